"""Counters every executor fills. The vk wrappers count at the Vulkan call sites, so the numbers
are what was actually called, not what an executor believes it did.

Per-token figures have one name and one meaning wherever they are reported (`vkdecode stats`,
`bench`, `run --json`):
  executed_per_token   what the GPU executes per step (dispatches, pipeline binds, barriers), from
                       the recording: replay executes it without any host call, so the host
                       counters cannot show it;
  host_calls_per_token the Vulkan calls the host makes per token (descriptor writes, set
                       allocations, command-buffer recordings, recorded commands, submits), counted
                       at the call sites; 0 dispatches are *recorded* per token in replay, which is
                       why `dispatches` is never a host-call figure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class Counters:
    dispatches: int = 0
    pipeline_binds: int = 0
    descriptor_set_binds: int = 0
    descriptor_writes: int = 0  # VkWriteDescriptorSet entries passed to vkUpdateDescriptorSets
    descriptor_set_allocations: int = 0
    command_buffer_recordings: int = 0  # vkBeginCommandBuffer calls
    recorded_commands: int = 0  # every vkCmd* call
    barriers: int = 0
    submits: int = 0

    def snapshot(self) -> Counters:
        return Counters(**asdict(self))

    def __sub__(self, other: Counters) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict:
        return asdict(self)


HOST_KEYS = (
    "descriptor_writes",
    "descriptor_set_allocations",
    "command_buffer_recordings",
    "recorded_commands",
    "submits",
)


def executed_per_token(ex) -> dict:
    """What the GPU executes per step, from the recording. Same formula as
    Executor._record_items: a barrier before the step, the data-flow barriers, and the
    host-visibility barrier at the end."""
    return {
        "dispatches": len(ex.items),
        "pipeline_binds": len(ex.items),
        "barriers": sum(bool(it.barrier) for it in ex.items) + 2,
        "regions": len(ex.regions),
    }


def host_calls_per_token(counters: dict) -> dict:
    return {k: counters.get(k, 0) for k in HOST_KEYS}


def mean_counters(steps) -> dict:
    """Host counters as a mean per token (an int where exact): with several tokens per submit
    only a submit's first token has any."""
    total: dict = {}
    for st in steps:
        for key, v in st.counters.as_dict().items():
            total[key] = total.get(key, 0) + v
    n = max(1, len(steps))
    return {key: v // n if v % n == 0 else v / n for key, v in total.items()}


def op_weight_bytes(program, op, name: str, full: int) -> int:
    """Bytes of weight `name` (full: all of it) that `op` reads per token: one row of an embedding
    table, the chosen experts' rows of a 3-D expert weight, else the whole weight."""
    shape = program.values[name].shape
    if op.kind == "embed":
        return full // shape[0]
    if op.kind == "moe_matmul":  # its slots (k per row) over the experts
        return full * min(shape[0], program.values[op.inputs[2]].numel) // shape[0]
    return full
