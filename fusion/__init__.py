"""Pure-Python decode-step IR and the pattern matcher that fuses it (no Vulkan, no vkdecode)."""

from fusion.ir import IRError, Op, Program, Value
from fusion.partition import PartitionError, check_partition, format_partition, partition, schedule, summarize
from fusion.pattern import (
    Graph,
    Match,
    Pattern,
    PatternError,
    match,
    op,
    optional,
    pattern,
    repeat,
    why_illegal,
)
from fusion.region import Region, Rule, single_op_region
from fusion.rules import DEFAULT_RULES, rules_by_name

__all__ = [
    "DEFAULT_RULES",
    "Graph",
    "IRError",
    "Match",
    "Op",
    "PartitionError",
    "Pattern",
    "PatternError",
    "Program",
    "Region",
    "Rule",
    "Value",
    "check_partition",
    "format_partition",
    "match",
    "op",
    "optional",
    "partition",
    "pattern",
    "repeat",
    "rules_by_name",
    "schedule",
    "single_op_region",
    "summarize",
    "why_illegal",
]
