"""Memory plan of one model on one device: every weight, activation, state, output and scratch
buffer gets a fixed slice at build time, so descriptor sets written once stay valid forever."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fusion.ir import STEP_WORDS, Program
from vkdecode.lowering.calls import Binding, KernelCall, row_bytes
from vkdecode.quant import QUANT_TYPES, PackedWeight, pack_float

CHUNK = 256 << 20  # arena buffer size; larger tensors get their own buffer
SMALL_OUTPUT_BYTES = 4096  # outputs this small (next_token) live in host-visible memory
TOKEN_RING = 64  # tokens the GPU appends (advance_step); the host reads them by position


GRID_ARGS = "attn_grid_args"  # slice of the indirect attention grids' records (GridArgs)


class GridArgs:
    """The step's split-K attention grids that are dispatched indirectly (KernelCall.live), so a
    step at position pos runs only the live_splits(pos) splits with rows, whatever --ctx sized the
    grid for. One record of RECORD_WORDS u32 per distinct grid (layout: shaders/attn_live.glsl):
    the dispatch's (x, y, z), then the grid's constants, written once at build. (x, y, z) are
    written by the host with the position (Executor._write_step) and by the step's last dispatch
    for the next position (advance_step / argmax ADVANCE, which run grid_args_update), so a
    replayed step and the pipelined steps after it need no host work and no recording."""

    RECORD_WORDS = 16

    def __init__(self, calls: list[KernelCall]):
        self.records: list[tuple[int, ...]] = []  # (S, rows per live split, MIN_S, WINDOW, H, PF_G)
        self.index: list[int | None] = []  # record of each call, None: a direct dispatch
        for c in calls:
            if c.live is None:
                self.index.append(None)
                continue
            g = c.live
            rec = (g.s, g.maxchunk, g.min_s, g.window, g.h, int(dict(c.defines).get("PF_G", 0)))
            assert c.groups[0] == g.s and c.groups[2] == 1, c.label
            if rec not in self.records:
                self.records.append(rec)
            self.index.append(self.records.index(rec))

    def __len__(self) -> int:
        return len(self.records)

    def args(self, pos: int) -> list[int]:
        """(x, y, z) of every record at position pos, as grid_args_update computes them."""
        from vkdecode.lowering.calls import AttnGrid, live_splits

        out = []
        for s, maxchunk, min_s, window, h, pf_g in self.records:
            x = live_splits(pos, AttnGrid(h, 0, s, maxchunk, min_s, window))
            out += [x, h + -(-pf_g // x), 1]
        return out

    def initial_words(self) -> list[int]:
        """Every record whole, at position 0."""
        out = []
        a = self.args(0)
        for g, rec in enumerate(self.records):
            out += a[3 * g : 3 * g + 3] + list(rec) + [0] * (self.RECORD_WORDS - 3 - len(rec))
        return out


def advance_call(n_grids: int = 0) -> KernelCall:
    """Appended to every step: feeds the chosen token to the next step on the GPU (and sizes its
    n_grids indirect attention grids: GridArgs)."""
    b = (Binding("next_token"), Binding("step"), Binding("token_ring"))
    call = KernelCall("advance_step", (TOKEN_RING,), b, (1, 2), (1, 1, 1), label="advance_step")
    return _with_grid_args(call, n_grids)


def advance_rows_call(rows: int, step: str, ring: str) -> KernelCall:
    """Appended to a batched decode step (fusion/chunk_batch.py): feeds each live row its token,
    and keeps it in the ring by the parity of the row's position (executors/batch_ahead.py)."""
    b = (Binding("next_token"), Binding(step), Binding(ring))
    return KernelCall("advance_rows", (32, rows), b, (1, 2), (-(-rows // 32), 1, 1), label="advance_rows")


def _with_grid_args(call: KernelCall, n_grids: int) -> KernelCall:
    if not n_grids:
        return call
    n = len(call.bindings)
    return replace(
        call,
        bindings=call.bindings + (Binding(GRID_ARGS),),
        writes=call.writes + (n,),
        defines=call.defines + (("GRID_ARGS", str(n)), ("GRID_N", str(n_grids))),
    )


def with_advance(calls: list[KernelCall], n_grids: int = 0) -> tuple[list[KernelCall], bool]:
    """The step's calls with the token hand-off at the end, and whether it took a dispatch of its
    own: a final argmax pass writing next_token does it itself (shaders/argmax.comp ADVANCE: one
    dispatch and one barrier fewer per token); any other last call gets advance_call() after it.
    Either also writes the next step's n_grids indirect attention grids (GridArgs)."""
    last = calls[-1] if calls else None
    if (
        last is not None
        and last.shader == "argmax"
        and ("FINAL", "1") in last.defines
        and last.bindings[1].value == "next_token"
        and len(last.spec) == 3
    ):
        n = len(last.bindings)
        folded = replace(
            last,
            spec=last.spec + (TOKEN_RING,),
            bindings=last.bindings + (Binding("step"), Binding("token_ring")),
            writes=last.writes + (n, n + 1),
            defines=last.defines + (("ADVANCE", "1"),),
            label=last.label + "+advance",
        )
        return calls[:-1] + [_with_grid_args(folded, n_grids)], False
    return calls + [advance_call(n_grids)], True


def value_bytes(v) -> int:
    """Device bytes of a non-weight value: f32 and u32 4 per element, f16 (KV caches) 2, in words."""
    return v.numel * 4 if v.dtype != "f16" else -(-v.numel // 2) * 4


def required_bytes(program: Program, weights: dict) -> dict[str, int]:
    """Device bytes the plan will allocate, by kind (scratch and alignment padding are small)."""
    need = {"weights": 0, "kv_cache": 0, "activations": 0}
    for v in program.values.values():
        if v.kind == "weight" and v.name in weights:
            need["weights"] += weights[v.name].nbytes
        elif v.kind == "state":
            need["kv_cache"] += value_bytes(v)
        elif v.kind in ("activation", "output"):
            need["activations"] += v.numel * 4
    return need


def check_fits(device, program: Program, weights: dict) -> None:
    """Refuse before uploading anything when the model cannot fit the device-local heaps: a clear
    error instead of a vkAllocateMemory failing half way through the upload. (Compared with the
    heap size, not what is free: drivers do not report free memory portably.)"""
    from vkdecode.errors import DeviceMemoryError
    from vkdecode.vk.memory import format_bytes as fmt

    need = required_bytes(program, weights)
    total, heap = sum(need.values()), device.info.device_local_bytes
    if heap and total > heap:
        raise DeviceMemoryError(
            f"the model needs {fmt(total)} of device memory (weights {fmt(need['weights'])}, KV cache "
            f"{fmt(need['kv_cache'])}, activations {fmt(need['activations'])}), but {device.info.name} has "
            f"{fmt(heap)} device-local; try a smaller --ctx or a smaller quantization"
        )


class MemoryPlan:
    """share: plans whose slices this one uses by name instead of allocating (a prompt chunk's
    plan takes the decode plan's weights, KV caches and step buffer, and a narrower chunk the
    activations of the widest). Only slices at least as large are taken; runs never overlap
    (one queue, each chunk waited for), so sharing activations between programs is safe."""

    def __init__(self, device, program: Program, weights: dict, progress=None, share=(), alias=False):
        self.share = tuple(share)
        self.aliased = alias  # activations placed later, sharing memory by lifetime (place_activations)
        self.alias: dict[str, str] = {}  # activation -> its slot's name (executors/alias.py)
        if not self.share:
            check_fits(device, program, weights)
        self.device = device
        self.program = program
        self.slices: dict[tuple[str, str], object] = {}
        self.weight_bytes: dict[str, int] = {}
        self._weights = device.arena(CHUNK)
        self._acts = device.arena(CHUNK)
        self._host = device.arena(1 << 20, host_visible=True)
        try:
            # every weight, cache and activation is known now (scratch comes later): chunks sized to
            # them, so device memory ~ the weights' bytes + KV + activations, not whole 256 MiB chunks
            # (a plan sharing another's slices allocates only what it cannot take: no expectation)
            vals = [] if self.share else program.values.values()
            self._weights.expect(
                sum(
                    self._weights.padded(nbytes)
                    for v in vals
                    if v.kind == "weight"
                    for nbytes in self._weight(program, weights, v).part_bytes.values()
                )
            )
            self._acts.expect(
                sum(
                    self._acts.padded(value_bytes(v))
                    for v in vals
                    if (v.kind == "activation" and not alias)
                    or v.kind == "state"
                    or (v.kind == "output" and value_bytes(v) > SMALL_OUTPUT_BYTES)
                )
            )
            self._build(program, weights, progress)
        except BaseException:  # out of memory or Ctrl-C half way: free what was allocated
            self.close()
            raise

    def _take_shared(self, v) -> bool:
        """Use a shared plan's slices (every part) of value v, if one has them large enough."""
        part = "q" if v.kind == "weight" and v.dtype in QUANT_TYPES else "data"
        need = 0 if v.kind == "weight" else value_bytes(v)
        for plan in self.share:
            s = plan.slices.get((v.name, part))
            if s is not None and s.size >= need:
                self.slices.update({k: x for k, x in plan.slices.items() if k[0] == v.name})
                if v.kind == "weight":
                    self.weight_bytes[v.name] = plan.weight_bytes[v.name]
                return True
        return False

    def _build(self, program: Program, weights: dict, progress) -> None:
        for name, nbytes in (("step", STEP_WORDS * 4), ("token_ring", TOKEN_RING * 4)):
            shared = [p.slices[(name, "data")] for p in self.share[:1]]
            self.slices[(name, "data")] = shared[0] if shared else self._host.alloc(nbytes, name)
        self.step, self.ring = self.slices[("step", "data")], self.slices[("token_ring", "data")]
        for v in program.values.values():
            if v.name == "step" or (self.aliased and v.kind == "activation") or self._take_shared(v):
                continue
            if v.kind == "step" and v.name != "step":
                # chunk token ids: written by the host once per chunk
                self.slices[(v.name, "data")] = self._host.alloc(v.numel * 4, v.name)
            elif v.kind == "weight":
                self._upload(v.name, self._weight(program, weights, v).packed(), progress)
            elif v.kind in ("activation", "state", "output"):
                nbytes = value_bytes(v)
                arena = self._host if v.kind == "output" and nbytes <= SMALL_OUTPUT_BYTES else self._acts
                self.slices[(v.name, "data")] = arena.alloc(nbytes, v.name)

    def _upload(self, name: str, pw: PackedWeight, progress) -> None:
        """One weight's parts into the weight arena. pw is the only reference to a lazy weight's
        packed copy (models/lazy.py), dropped on return: one weight's host copy at a time."""
        for part, arr in pw.parts.items():
            s = self._weights.alloc(arr.nbytes, f"{name}.{part}")
            s.write(arr)
            self.slices[(name, part)] = s
            if progress is not None:
                progress.update(arr.nbytes)
        self.weight_bytes[name] = pw.nbytes

    @staticmethod
    def _weight(program: Program, weights: dict, v):
        """A weight as loaded (a PackedWeight, or a LazyWeight packed at upload: both give dtype,
        shape, nbytes, part_bytes and packed()), or one of the builder's tables (rope frequencies)
        packed as f32."""
        if v.name in program.constants:
            return pack_float(np.ascontiguousarray(program.constants[v.name], np.float32), "f32")
        if v.name not in weights:
            raise KeyError(f"weight {v.name} missing from the loaded weights")
        return weights[v.name]

    def place_activations(self, calls: list[KernelCall], barriers: list[bool]) -> None:
        """An aliased plan's activations: by lifetime over the recorded calls (executors/alias.py)."""
        from vkdecode.executors.alias import place

        acts = {v.name: value_bytes(v) for v in self.program.values.values() if v.kind == "activation"}
        slices, self.alias = place(self._acts, acts, calls, barriers)
        self.slices.update({(n, "data"): s for n, s in slices.items()})

    def add_grid_args(self, grids: GridArgs) -> None:
        """The host-visible records of the step's indirect attention grids, written at position 0."""
        if len(grids):
            s = self._host.alloc(len(grids) * GridArgs.RECORD_WORDS * 4, GRID_ARGS)
            s.buffer.write_u32(s.offset // 4, grids.initial_words())
            self.slices[(GRID_ARGS, "data")] = s

    def add_scratch(self, calls: list[KernelCall]) -> None:
        """Scratch is shared by name (e.g. attention partials, written and read in one step).
        Names ending ".sync" (grid barrier counters) start zeroed; ".err" (error words the host
        polls) are host-visible and start zeroed."""
        for call in calls:
            for name, nbytes in call.scratch:
                have = self.slices.get((name, "data"))
                if have is None or have.size < nbytes:
                    arena = self._host if name.endswith(".err") else self._acts
                    s = self.slices[(name, "data")] = arena.alloc(nbytes, name)
                    if name.endswith((".sync", ".err")):
                        s.write(np.zeros(s.size // 4, np.uint32))

    def resolve(self, b: Binding) -> tuple:
        """(Buffer, offset, range) of a binding; a row range of a weight when the call splits it."""
        s = self.slices[(b.value, b.part)]
        if b.rows is None or b.value not in self.program.values:
            return (s.buffer, s.offset, s.size)
        v = self.program.values[b.value]
        rb = row_bytes(v.dtype, v.shape[1], b.part)
        return (s.buffer, s.offset + b.row_start * rb, b.rows * rb)

    def ranges(self, call: KernelCall) -> list[tuple]:
        return [self.resolve(b) for b in call.bindings]

    def ring_token(self, pos: int) -> int:
        """The token the step at `pos` chose (written by advance_step)."""
        return int(self.ring.read_array("uint32", 1, (pos % TOKEN_RING) * 4)[0])

    def read(self, name: str, dtype="float32"):
        v = self.program.values[name]
        return self.slices[(name, "data")].read_array(dtype, v.numel)

    @property
    def total_bytes(self) -> int:
        return sum(a.allocated_bytes for a in (self._weights, self._acts, self._host))

    def close(self) -> None:
        for a in (self._host, self._acts, self._weights):
            a.close()


def barriers_before(calls: list[KernelCall], alias: dict[str, str] | None = None) -> list[bool]:
    """Only the barriers the data flow needs: one before a call that reads or writes a value written
    since the last barrier, or writes a value read since then (the hazards of one compute queue).
    alias: values sharing memory (MemoryPlan.alias) count as their slot."""
    out = []
    written: set[str] = set()
    read: set[str] = set()
    at = alias or {}
    for call in calls:
        w = {at.get(call.bindings[i].value, call.bindings[i].value) for i in call.writes}
        r = {at.get(b.value, b.value) for i, b in enumerate(call.bindings) if i not in call.writes}
        need = bool((r | w) & written) or bool(w & read)
        if need:
            written, read = set(), set()
        out.append(need)
        written |= w
        read |= r
    return out
