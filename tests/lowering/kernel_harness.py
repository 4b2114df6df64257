"""Op-by-op test harness (cf. llama.cpp's test-backend-ops): build a one-op Program, run its
KernelCalls on the device, compare with the numpy reference.

The runner is the smallest executor: one buffer per value (one per weight part), a buffer per
scratch name, one descriptor set per call, the executors' barriers (executors/plan.barriers_before), one submit. Outputs start as NaN so a kernel that skips an element fails.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusion.ir import STEP_POS, STEP_SLOT, STEP_WORDS, Program
from vkdecode.executors.plan import barriers_before
from vkdecode.lowering.calls import KernelCall, KernelCaps
from vkdecode.lowering.ops import op_calls
from vkdecode.quant import PackedWeight
from vkdecode.reference import make_step, run_op

NAN_WORD = 0x7FC00000


def caps_of(device, **over) -> KernelCaps:
    return KernelCaps.from_info(device.info, **over)


def launch(device, shape: str) -> KernelCaps:
    """lavapipe's own caps on either reduction ("sg" subgroup arithmetic, "smem" shared memory), or a
    GPU's launch shape ("gpu": matmul_add's lanes and rows from matvec_shape, wide K-quant units
    split as on an H100)."""
    if shape == "gpu":
        caps = caps_of(device, matvec_wg=0, matvec_rows=0, kw_split=0, kq_inplace=0)
        return replace(caps, device_cpu=False)
    caps = caps_of(device)
    if shape == "sg" and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    return replace(caps, subgroup_arithmetic=shape == "sg")


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    """sum((a-b)^2) / sum(b^2) in float64; NaN (an unwritten element) stays NaN and fails."""
    g, w = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    assert g.shape == w.shape, (g.shape, w.shape)
    den = float(np.sum(w * w))
    return float(np.sum((g - w) ** 2)) / (den if den > 0 else 1.0)


def one_op(kind: str, inputs: dict, outputs: dict, **attrs) -> Program:
    """inputs / outputs: name -> (shape, dtype, kind). Activation inputs become state values: a
    one-op program has no producer for them, and verify() insists activations are produced."""
    p = Program(f"test-{kind}")
    for name, (shape, dtype, vkind) in inputs.items():
        p.value(name, shape, dtype, "state" if vkind == "activation" else vkind)
    for name, (shape, dtype, vkind) in outputs.items():
        p.value(name, shape, dtype, vkind)
    p.op(kind, list(inputs), list(outputs), **attrs)
    return p.verify()


def _as_bytes(v) -> bytes:
    return np.ascontiguousarray(v).tobytes()


class OpRun:
    """Runs the calls of one op (or `calls`: a region's). env: value name -> PackedWeight (weights),
    np array (others); state values missing from env start as zeros."""

    def __init__(self, device, program: Program, env: dict, caps: KernelCaps, op_index: int = 0, calls=None):
        self.device, self.program, self.env, self.caps = device, program, env, caps
        # calls: a region's (several ops' values; those no call writes start as NaN), else the op's
        self.calls: list[KernelCall] = op_calls(program, op_index, caps) if calls is None else list(calls)
        self.buffers: dict[tuple[str, str], object] = {}

    def _buffer(self, name: str, part: str):
        key = (name, part)
        if key in self.buffers:
            return self.buffers[key]
        dev = self.device
        if name.startswith("scratch:"):
            size = max(n for call in self.calls for s, n in call.scratch if s == name)
            buf = dev.buffer(size, name=name)
            buf.write(np.full(size // 4, NAN_WORD, np.uint32))
        else:
            v = self.program.values[name]
            if v.kind == "weight":
                arr = self.env[name].parts[part]
            elif v.dtype == "f16" and name in self.env:  # an f16 KV cache: halves, whole words
                arr = np.ascontiguousarray(self.env[name], np.float16).ravel()
                arr = np.concatenate([arr, np.zeros(arr.size % 2, np.float16)])
            elif v.kind == "step" or (v.kind in ("activation", "state") and name in self.env):
                arr = np.ascontiguousarray(self.env[name], np.uint32 if v.dtype == "u32" else np.float32)
            elif v.kind == "state":
                arr = np.zeros(v.shape, np.float32)
            else:  # an output: NaN (or all-ones for u32) so an unwritten element shows
                arr = np.full(v.numel, NAN_WORD if v.dtype == "f32" else 0xFFFFFFFF, np.uint32)
            buf = dev.buffer(max(4, arr.nbytes), name=name)
            buf.write(_as_bytes(arr))
        self.buffers[key] = buf
        return buf

    def _range(self, b) -> tuple:
        buf = self._buffer(b.value, b.part)
        v = self.program.values.get(b.value)
        if v is None or v.kind != "weight" or (b.row_start == 0 and b.rows is None):
            return (buf, 0, buf.size)
        rb = self.env[b.value].row_bytes(b.part)
        rows = v.shape[0] - b.row_start if b.rows is None else b.rows
        return (buf, b.row_start * rb, rows * rb)

    def run(self) -> dict[str, np.ndarray]:
        from vkdecode.vk.descriptors import write_descriptor_set

        dev = self.device
        pool = dev.descriptor_pool(len(self.calls), sum(len(c.bindings) for c in self.calls))
        cmd = dev.command_buffer()
        try:
            cmd.begin()
            for call, barrier in zip(self.calls, barriers_before(self.calls)):
                pipe = dev.pipeline(
                    call.shader,
                    spec=call.spec,
                    defines=dict(call.defines),
                    n_bindings=len(call.bindings),
                    push_size=len(call.push),
                )
                dset = pool.allocate(pipe)
                write_descriptor_set(dev, dset, [self._range(b) for b in call.bindings])
                # the executors' barriers (RAW, WAW and WAR: a split-k scratch is reused by name)
                if barrier:
                    cmd.barrier()
                cmd.bind(pipe, dset)
                if call.push:
                    cmd.push(pipe, call.push)
                cmd.dispatch(*call.groups)
            cmd.host_barrier()
            cmd.end()
            dev.submit([cmd])
            out = {}
            for name in {call.bindings[i].value for call in self.calls for i in call.writes}:
                v = self.program.values.get(name)
                if v is None:
                    continue
                dt = {"u32": np.uint32, "f16": np.float16}.get(v.dtype, np.float32)
                out[name] = self.buffers[(name, "data")].read_array(dt, v.numel).reshape(v.shape)
            return out
        finally:
            cmd.close()
            pool.close()
            for buf in self.buffers.values():
                buf.close()
            self.buffers.clear()


def run_and_reference(device, program: Program, env: dict, caps: KernelCaps):
    """(gpu outputs, float64 reference outputs) of the program's single op."""
    got = OpRun(device, program, env, caps).run()
    ref_env = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in env.items()}
    want = run_op(program.ops[0], program, ref_env, dtype=np.float64)
    return got, want


def run_ops_reference(program: Program, env: dict) -> dict[str, np.ndarray]:
    """Every op of `program` in order through the float64 reference, on copies of env's arrays."""
    env = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in env.items()}
    for op in program.ops:
        env.update(run_op(op, program, env, dtype=np.float64))
    return env


def draw_sinks(rng, h: int) -> np.ndarray:
    """gpt-oss attention sinks for h heads: N(0, 2), head 0 at +30 (it takes nearly all the mass: its
    o is ~1e-11 of the others') and head 1 at -30 (none), so both ends of the range are checked."""
    s = rng.normal(0.0, 2.0, h).astype(np.float32)
    s[: min(h, 2)] = (30.0, -30.0)[: min(h, 2)]
    return s


def head_nmse(got: np.ndarray, want: np.ndarray, h: int, d: int) -> float:
    """The worst head's nmse over all rows: a head whose output a large sink shrinks to ~1e-11 is
    held to the same relative bound as the others (a whole-vector nmse would not see it)."""
    g, w = (np.asarray(a, np.float64).reshape(-1, h, d) for a in (got, want))
    return max(nmse(g[:, i], w[:, i]) for i in range(h))


def step(token: int = 0, pos: int = 0) -> np.ndarray:
    s = make_step(token, pos)
    assert s.shape == (STEP_WORDS,)
    return s


def batch_step(positions, slots) -> np.ndarray:
    """A batched step's records (fusion/chunk_batch.py): row b at positions[b] in slots[b]."""
    s = np.zeros((len(positions), STEP_WORDS), np.uint32)
    s[:, STEP_POS], s[:, STEP_SLOT] = positions, slots
    return s.reshape(-1)


__all__ = [
    "OpRun",
    "PackedWeight",
    "batch_step",
    "caps_of",
    "draw_sinks",
    "head_nmse",
    "nmse",
    "one_op",
    "run_and_reference",
    "run_ops_reference",
    "step",
]
