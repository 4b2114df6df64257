"""Pure-Python decode-step IR and the pattern matcher that fuses it (no Vulkan, no vkdecode)."""
from fusion.ir import Op, Program, Value, IRError  # noqa: F401
from fusion.pattern import (  # noqa: F401
    Graph, Match, Pattern, PatternError, match, op, optional, pattern, repeat, why_illegal)
from fusion.rules import DEFAULT_RULES, Region, Rule, rules_by_name, single_op_region  # noqa: F401
from fusion.partition import (  # noqa: F401
    PartitionError, check_partition, format_partition, partition, schedule, summarize)
