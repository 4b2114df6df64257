import sys

from vkdecode.cli import main

sys.exit(main())
