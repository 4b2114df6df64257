#!/usr/bin/env bash
# Debian 13's glslangValidator (15.x: GL_NV_cooperative_matrix2, which Debian 12's 12 and PyPI's
# 13.1.1 lack) on a Debian 12 host: it needs glibc 2.38, so it runs under its own loader and
# libraries, unpacked from the trixie debs that bench/fetch_glslang15.sh fetches. For
# VKDECODE_GLSLANG_CM2 (vkdecode/vk/glslang.py): bench/coop2_probe.py.
#   VKDECODE_TRIXIE  the unpacked root (default /tmp/trixie-root)
set -euo pipefail
R=${VKDECODE_TRIXIE:-/tmp/trixie-root}
L=$R/usr/lib/x86_64-linux-gnu
exec "$L/ld-linux-x86-64.so.2" --library-path "$L:$R/lib/x86_64-linux-gnu" "$R/usr/bin/glslangValidator" "$@"
