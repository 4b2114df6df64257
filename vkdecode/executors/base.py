"""What every executor shares: the memory plan, the pipelines, the per-token stats, the interface.

ex.step(token, pos) -> next token id (greedy argmax on the GPU)
ex.read_logits() -> np.ndarray of the last step's logits
ex.token_stats[-1] -> TokenStats of the last step; ex.region_stats() -> per-region table
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fusion.ir import STEP_POS, STEP_SEED, STEP_TOKEN
from vkdecode.errors import ContextError, UsageError
from vkdecode.executors.plan import (
    GRID_ARGS,
    GridArgs,
    MemoryPlan,
    advance_rows_call,
    barriers_before,
    with_advance,
)
from vkdecode.lowering.calls import KernelCall, KernelCaps
from vkdecode.lowering.half_x import drop_repeat_conversions
from vkdecode.stats import Counters, op_weight_bytes


@dataclass
class TokenStats:
    counters: Counters
    host_us: float  # token known -> submit returned
    gpu_us: float  # timestamp queries around the recorded work
    wall_us: float  # token known -> next token read back
    regions_us: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = {"host_us": self.host_us, "gpu_us": self.gpu_us, "wall_us": self.wall_us}
        d.update(self.counters.as_dict())
        return d


def keep_recent_stats(ex) -> None:
    """A server steps without end: past 1024 step records, keep an executor's latest 256."""
    if len(ex.token_stats) > 1024:
        del ex.token_stats[:-256]


@dataclass
class Item:
    """One dispatch of the step: its call, pipeline, descriptor ranges, barrier before it."""

    call: KernelCall
    pipeline: object
    ranges: list
    barrier: bool
    region: int
    grid: int | None = None  # record of GridArgs: dispatched indirectly from it


class Executor:
    mode = "?"

    def __init__(self, device, program, weights, caps: KernelCaps | None = None, progress=None, share=()):
        self.device = device
        self.program = program
        self.ctx = _ctx_of(program)
        self.caps = caps or KernelCaps.from_info(device.info)
        self.token_stats: list[TokenStats] = []
        self.regions = self._partition()
        # a chunk's or a batched step's activations share memory by lifetime (executors/alias.py)
        wide = "chunk_rows" in program.meta or bool(program.meta.get("batch_rows"))
        self.plan = MemoryPlan(
            device, program, weights, progress, share, alias=wide and self.caps.alias_acts >= 0
        )
        try:
            self._build(show_progress=progress is not None)
        except BaseException:  # a shader that does not compile, out of memory: free the plan
            self.close()
            raise

    def _build(self, show_progress: bool = False) -> None:
        calls, owners = [], []
        for ri, region in enumerate(self.regions):
            rc = self._lower(region)
            calls += rc
            owners += [ri] * len(rc)
        calls, owners = drop_repeat_conversions(*self._across_regions(calls, owners))
        self.grids = GridArgs(calls)
        # a prompt chunk (fusion/chunk.py) hands no token to a next step: the host starts decode;
        # a batched step (fusion/chunk_batch.py) hands each row its own
        self.batch_rows = self.program.meta.get("batch_rows", 0)
        if self.batch_rows:
            from fusion.chunk_batch import BATCH_RING, BATCH_STEP

            calls += [advance_rows_call(self.batch_rows, BATCH_STEP, BATCH_RING)]
            owners += owners[-1:]
        elif "chunk_rows" not in self.program.meta:
            calls, added = with_advance(calls, len(self.grids))
            if added:
                owners.append(owners[-1])  # counted with the last region (the token choice)
        assert len(self.grids) == 0 or "chunk_rows" not in self.program.meta
        if self.plan.aliased:
            self.plan.place_activations(calls, barriers_before(calls))
        self.plan.add_grid_args(self.grids)
        self.plan.add_scratch(calls)
        pipelines = [self._pipeline(c) for c in _shader_progress(calls, show_progress)]
        index = self.grids.index + [None] * (len(calls) - len(self.grids.index))  # the advance: direct
        self.items = [
            Item(c, pipe, self.plan.ranges(c), b, ri, g)
            for c, pipe, b, ri, g in zip(
                calls, pipelines, barriers_before(calls, self.plan.alias), owners, index
            )
        ]
        self._grid_slice = self.plan.slices.get((GRID_ARGS, "data"))
        self.timestamps = self.device.timestamp_pool(2 + len(self.regions))
        self._next = self.plan.slices.get(("next_token", "data"))
        assert STEP_POS == STEP_TOKEN + 1
        self._step_word = self.plan.step.offset // 4 + STEP_TOKEN

    # -- build helpers ------------------------------------------------------------------------
    def _partition(self):
        from fusion.partition import partition

        return partition(self.program, [])

    def _lower(self, region) -> list[KernelCall]:
        from vkdecode.lowering.regions import region_calls

        return region_calls(self.program, region, self.caps, fuse=False)

    def _across_regions(self, calls: list[KernelCall], owners: list[int]) -> tuple[list, list]:
        """Rewrites over the whole step's calls (fused replay: the o-projection combines split-K
        attention, a residual add pre-computes the next norm); per-op execution keeps every call
        as lowered."""
        return calls, owners

    def _pipeline(self, c: KernelCall):
        return self.device.pipeline(c.shader, c.spec, dict(c.defines), len(c.bindings), len(c.push))

    def _record_items(self, cmd, with_sets, profile: bool = False, ts=None, steps: int = 1) -> None:
        """Record the whole step (`steps` times back to back) into cmd; with_sets(i, item) returns
        the descriptor set to bind. Timestamps 0 and 1 bracket all of it; region timestamps
        (profile) only make sense with one step."""
        ts = ts or self.timestamps
        ts.reset_cmd(cmd)
        last = len(self.items) - 1
        grids = self._grid_slice
        for step in range(steps):
            # the previous step's shader writes are visible (the host's step write is, by the
            # submit; transfers end with their own barrier: vk/memory.py). Compute to compute
            # only: an H100 takes 2.2 µs for this barrier and 4.7 for one over all stages; and
            # to the indirect argument reads when the previous step wrote this one's grids.
            cmd.compute_barrier(indirect=grids is not None)
            if step == 0:
                cmd.timestamp(ts, 0)
            for i, it in enumerate(self.items):
                if it.barrier:
                    cmd.compute_barrier()
                cmd.bind(it.pipeline, with_sets(i, it))
                if it.call.push:
                    cmd.push(it.pipeline, it.call.push)
                if it.grid is None:
                    cmd.dispatch(*it.call.groups)
                else:  # x = the splits live at the step's position (GridArgs)
                    cmd.dispatch_indirect(grids.buffer, grids.offset + it.grid * GridArgs.RECORD_WORDS * 4)
                if profile and (i == last or self.items[i + 1].region != it.region):
                    # and of every region the call absorbed: they end with it
                    end = len(self.regions) if i == last else self.items[i + 1].region
                    for r in range(it.region, max(end, it.region + 1)):
                        cmd.timestamp(ts, 2 + r)
        cmd.timestamp(ts, 1)
        cmd.host_barrier()  # the next token is read by the host after the fence

    # -- per token ------------------------------------------------------------------------------
    def step(self, token: int, pos: int) -> int:
        if not 0 <= pos < self.ctx:
            raise ContextError(f"position {pos} is outside the context 0..{self.ctx - 1}")
        before = self.device.counters.snapshot()
        t0 = time.perf_counter()
        self._enqueue(token, pos)
        t1 = time.perf_counter()
        self.device.wait()
        nxt = int(self._next.read_array("uint32", 1)[0]) if self._next is not None else -1
        t2 = time.perf_counter()
        ns = self.timestamps.read_ns(0, 2)
        self.token_stats.append(
            TokenStats(
                self.device.counters.snapshot() - before,
                (t1 - t0) * 1e6,
                (ns[1] - ns[0]) / 1e3,
                (t2 - t0) * 1e6,
            )
        )
        return nxt

    def decode(self, token: int, pos: int, max_steps: int):
        """Yields the tokens of steps pos, pos+1, ... each fed the previous one; close() the
        generator to stop. This plain version waits for every step; replay pipelines it."""
        for p in range(pos, min(pos + max_steps, self.ctx)):
            token = self.step(token, p)
            yield token

    def write_step_word(self, word: int, value: int) -> None:
        """One word of the step record besides the token and position (a prompt chunk's STEP_LIVE)."""
        self.plan.step.buffer.write_u32(self._step_word + word, [int(value)])

    def _write_step(self, token: int, pos: int) -> None:
        if self.batch_rows:  # a batched step's rows are written by executors/batch.py, when they change
            return
        # STEP_TOKEN and STEP_POS are adjacent words: one small write into the mapped step buffer
        self.plan.step.buffer.write_u32(self._step_word, (token, pos))
        if self._grid_slice is not None:  # and the attention grids sized to pos (GridArgs)
            words, base = self.grids.args(pos), self._grid_slice.offset // 4
            for g in range(len(self.grids)):
                self._grid_slice.buffer.write_u32(base + g * GridArgs.RECORD_WORDS, words[3 * g : 3 * g + 3])

    def _enqueue(self, token: int, pos: int) -> None:
        raise NotImplementedError  # each executor's way of recording and submitting

    @property
    def samples(self) -> bool:
        """Whether the program ends in the GPU sampler (else greedy argmax)."""
        return any(op.kind == "sample" for op in self.program.ops)

    def set_sampling(self, params) -> None:
        """Write temperature, top-k, top-p and seed into the step buffer (once per generation)."""
        if not params.greedy and not self.samples:
            raise UsageError(
                "this model was loaded for greedy decoding; load it with sampling=True "
                "to sample with a temperature"
            )
        self.plan.step.buffer.write_u32(self.plan.step.offset // 4 + STEP_SEED, params.step_words())

    def read_logits(self):
        return self.plan.read("logits")

    def region_stats(self) -> list[dict]:
        rows = []
        for ri, r in enumerate(self.regions):
            its = [it for it in self.items if it.region == ri]
            read = {}
            for i in r.ops:
                op = self.program.ops[i]
                for v in op.inputs:
                    if self.program.values[v].kind == "weight":
                        part = op_weight_bytes(self.program, op, v, self.plan.weight_bytes[v])
                        read[v] = max(read.get(v, 0), part)
            rows.append(
                {
                    "name": r.name,
                    "rule": r.rule,
                    "ops": len(r.ops),
                    "dispatches": len(its),
                    "barriers": sum(it.barrier for it in its),
                    "descriptor_sets": len(its),
                    "weight_bytes": sum(read.values()),
                }
            )
        return rows

    def close(self) -> None:
        if getattr(self, "plan", None) is not None:
            self.device.wait_idle()
            if getattr(self, "timestamps", None) is not None:  # None when __init__ failed early
                self.timestamps.close()
            self.plan.close()
            self.plan = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _shader_progress(calls, show: bool):
    """Calls to build pipelines for, under a progress bar when asked (the first run compiles the
    shaders with glslangValidator; later runs hit the SPIR-V and pipeline caches)."""
    if not show:
        return calls
    from tqdm import tqdm

    return tqdm(calls, desc="shaders and pipelines", unit="pipeline", leave=False)


def _ctx_of(program) -> int:
    from fusion.chunk import kv_caches

    caches = kv_caches(program)  # not a recurrent state (Qwen3.5's first state, with no rows)
    return caches[0].shape[0] if caches else int(program.meta.get("ctx", 1 << 30))
