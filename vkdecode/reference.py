"""The numpy oracle: executes a Program op by op, exactly per the semantics in fusion/ir.py.

Every Vulkan path is checked against this. Weights are used as `dequantize(packed)` of the same
PackedWeight the GPU reads, so both see identical weight values; math is f32 (or f64).
"""

from __future__ import annotations

import numpy as np

from fusion.ir import STEP_LIVE, STEP_POS, STEP_SEED, STEP_SLOT, STEP_TOKEN, STEP_WORDS, Op, Program
from vkdecode.quant import PackedWeight, dequantize


def _weight(w, dtype) -> np.ndarray:
    a = dequantize(w) if isinstance(w, PackedWeight) else np.asarray(w)
    return a.astype(dtype, copy=False)


def make_step(token: int, pos: int) -> np.ndarray:
    s = np.zeros(STEP_WORDS, np.uint32)
    s[STEP_TOKEN], s[STEP_POS] = token, pos
    return s


def _rope(x: np.ndarray, pos: int, freqs: np.ndarray, a: dict, dtype) -> np.ndarray:
    h, d = a["n_heads"], a["head_dim"]
    # the angle is f32(pos) * f32 freq rounded to f32, as transformers and the shaders compute it;
    # cos/sin of that angle in f64 then rounded once, so f32 and f64 runs differ only after it
    ang = (np.float32(pos) * np.asarray(freqs, dtype=np.float32)).astype(np.float64)
    cos, sin = np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)
    x = x.reshape(h, d)
    if a["layout"] == "neox":
        x1, x2 = x[:, : d // 2], x[:, d // 2 :]
        y = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=1)
    else:
        x1, x2 = x[:, 0::2], x[:, 1::2]
        y = np.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=2)
    return y.reshape(-1)


def _attention(q, kc, vc, pos: int, a: dict, dtype, sinks=None) -> np.ndarray:
    h, kvh, d = a["n_heads"], a["n_kv_heads"], a["head_dim"]
    window = int(a.get("window", 0))
    lo = max(0, pos - window + 1) if window else 0  # a sliding layer sees `window` keys
    n = pos + 1 - lo
    k = kc[lo : pos + 1].reshape(n, kvh, d).astype(dtype, copy=False)
    v = vc[lo : pos + 1].reshape(n, kvh, d).astype(dtype, copy=False)
    qg = q.reshape(kvh, h // kvh, d)  # head i reads kv head i // group
    s = np.einsum("kgd,nkd->kgn", qg, k) * dtype(a["scale"])
    m = s.max(axis=-1, keepdims=True)
    # gpt-oss's sinks: one more logit per head, in the max (no overflow) and the denominator only
    sink = None if sinks is None else np.asarray(sinks, dtype=dtype).reshape(kvh, h // kvh, 1)
    if sink is not None:
        m = np.maximum(m, sink)
    e = np.exp(s - m)
    den = e.sum(axis=-1, keepdims=True)
    if sink is not None:
        den = den + np.exp(sink - m)
    return np.einsum("kgn,nkd->kgd", e / den, v).reshape(-1)


def _linear_attention(op: Op, program: Program, env: dict, ins: list, dt) -> list:
    """conv1d_step / gated_delta_step (fusion/ir.py): their state (env's, by output name) is read
    as zeros at position 0 and updated in place."""
    a = op.attrs
    name = op.outputs[1]
    state = env.get(name)
    if state is None:
        state = np.zeros(program.values[name].shape, dtype=dt)
    step = ins[-1]
    rows = int(a.get("rows", 1))
    if rows > 1 or a.get("batch"):
        # a prompt chunk: its rows in order, each a step at the next position; a batched step
        # (fusion/chunk_batch.py): each row a sequence of its own (padding rows share a state copy)
        sizes = [program.values[n].numel // rows for n in op.inputs[:-1]]
        one = Op(op.kind, op.inputs, op.outputs, {k: v for k, v in a.items() if k not in ("rows", "batch")})
        kk, hv, dk, dv = (int(a.get(n, 0)) for n in ("kernel", "n_v_heads", "k_dim", "v_dim"))
        per = (kk - 1) * sizes[0] if op.kind == "conv1d_step" else hv * dk * dv  # a slot's state
        # a padded prompt chunk: STEP_LIVE prompt rows (0: all) step the state, the rest are zero
        live = rows if a.get("batch") else min(int(step[STEP_LIVE]) or rows, rows)
        outs, pad = [], [np.zeros(program.values[op.outputs[0]].numel // rows, dt)] * (rows - live)
        for t in range(live):
            row_ins = [
                x[t * n : (t + 1) * n] if program.values[v].kind != "weight" else x
                for x, n, v in zip(ins[:-1], sizes, op.inputs[:-1])
            ]
            s, row_state = step.copy(), state
            s[STEP_POS] += t
            if a.get("batch"):  # its step record, and its slot's copy (a view: updated in place)
                s = step[t * STEP_WORDS : (t + 1) * STEP_WORDS]
                row_state = state.reshape(-1)[int(s[STEP_SLOT]) * per :][:per]
            outs.append(_linear_attention(one, program, {**env, name: row_state}, row_ins + [s], dt)[0])
        return [np.concatenate(outs + pad), state]
    pos = int(step[STEP_POS])
    if op.kind == "conv1d_step":
        x, w = ins[0], ins[1]
        kk, c = int(a["kernel"]), x.size
        hist = state.reshape(kk - 1, c)
        u = [hist[p % (kk - 1)] if p >= 0 else np.zeros(c, dt) for p in range(pos - kk + 1, pos)] + [x]
        acc = (w.reshape(c, kk) * np.stack(u, axis=1)).sum(axis=1)
        hist[pos % (kk - 1)] = x
        return [acc / (dt(1) + np.exp(-acc)), state]
    hk, hv, dk, dv = (int(a[n]) for n in ("n_k_heads", "n_v_heads", "k_dim", "v_dim"))
    qkv, ga, gb, a_log, dt_bias = ins[:5]
    q = qkv[: hk * dk].reshape(hk, dk)
    k = qkv[hk * dk : 2 * hk * dk].reshape(hk, dk)
    v = qkv[2 * hk * dk :].reshape(hv, dv)
    q = q / np.sqrt((q * q).sum(axis=1, keepdims=True) + dt(1e-6)) / np.sqrt(dt(dk))
    k = k / np.sqrt((k * k).sum(axis=1, keepdims=True) + dt(1e-6))
    x = ga + dt_bias
    sp = np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))
    decay = np.exp(-np.exp(a_log) * sp)
    beta = dt(1) / (dt(1) + np.exp(-gb))
    s = state.reshape(hv, dk, dv)
    if pos == 0:
        s[:] = 0
    out = np.empty((hv, dv), dt)
    tiled = bool(a.get("v_tiled", 0))  # V head h of key head h % hk (GGUF's order), else h // (hv / hk)
    for h in range(hv):
        g = h % hk if tiled else h // (hv // hk)
        kh, qh = k[g], q[g]
        s[h] *= decay[h]
        delta = (v[h] - kh @ s[h]) * beta[h]
        s[h] += np.outer(kh, delta)
        out[h] = qh @ s[h]
    return [out.reshape(-1), state]


def _moe(op: Op, program: Program, ins: list, dt) -> list:
    """The mixture-of-experts ops (fusion/ir.py): router top-k, expert matvecs, weighted sum."""
    if op.kind == "moe_topk":
        k = int(op.attrs["k"])
        logits = ins[0].reshape(-1, int(op.attrs["n_experts"]))
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        ids = np.argsort(-p, axis=1, kind="stable")[:, :k]  # descending, ties: lower index first
        w = np.take_along_axis(p, ids, axis=1)
        if op.attrs.get("norm"):
            w = w / w.sum(axis=1, keepdims=True)
        return [ids.reshape(-1).astype(np.uint32), w.reshape(-1)]
    if op.kind == "moe_matmul":
        w = ins[0].reshape(program.values[op.inputs[0]].shape)
        ids = ins[2].astype(np.int64)
        xs = ins[1].reshape(-1, w.shape[2])
        per = ids.size // xs.shape[0]  # slots that read one x row
        return [np.concatenate([w[e] @ xs[s // per] for s, e in enumerate(ids)])]
    if op.kind == "moe_bias":
        x, b, ids = ins
        b = b.reshape(program.values[op.inputs[1]].shape)
        return [(x.reshape(ids.size, -1) + b[ids.astype(np.int64)]).reshape(-1)]
    if op.kind == "sigmoid_scale":
        g, y = ins
        return [(y.reshape(g.size, -1) / (dt(1) + np.exp(-g))[:, None]).reshape(-1)]
    y, w = ins
    n = y.size // w.size
    rows = program.values[op.outputs[0]].numel // n
    terms = (y.reshape(w.size, n) * w[:, None]).reshape(rows, w.size // rows, n)
    return [terms.sum(axis=1, dtype=dt).reshape(-1)]


def _rows_op(op: Op, program: Program, env: dict, ins: list, rows: int, dt) -> list:
    a, k = op.attrs, op.kind
    if k == "embed":
        return [(ins[0][ins[1].astype(np.int64)] * dt(a.get("scale", 1.0))).reshape(-1)]
    if k == "matmul":
        return [(ins[1].reshape(rows, -1) @ ins[0].T).reshape(-1)]
    if k == "argmax":
        return [np.argmax(ins[0].reshape(rows, -1), axis=1).astype(np.uint32)]
    pos0 = int(ins[list(op.inputs).index("step")][STEP_POS])
    if k == "rope":
        return [
            np.concatenate(
                [_rope(x, pos0 + t, ins[2], a, dt) for t, x in enumerate(ins[0].reshape(rows, -1))]
            )
        ]
    if k == "kv_write":
        caches = []
        for name, x in zip(op.outputs, ins[:2]):
            c = env.get(name)
            if c is None:
                c = np.zeros(program.values[name].shape, dtype=dt)
            if program.values[name].dtype == "f16":  # an f16 cache stores (and returns) halves
                x = np.asarray(x).astype(np.float16)
            c[pos0 : pos0 + rows] = x.reshape(rows, -1)
            caches.append(c)
        return caches
    if k == "attention":
        q, kc, vc = ins[:3]
        sinks = ins[4] if len(ins) > 4 else None
        return [
            np.concatenate(
                [_attention(x, kc, vc, pos0 + t, a, dt, sinks) for t, x in enumerate(q.reshape(rows, -1))]
            )
        ]
    raise ValueError(f"reference: op {k} has no row-wise form")


def run_op(op: Op, program: Program, env: dict, dtype=np.float32) -> dict[str, np.ndarray]:
    """One op. env maps input names to arrays (weights may be PackedWeight or dequantized arrays;
    the step value is u32[8]). For kv_write, env's existing caches (by output name) are updated in
    place, or fresh zero caches are made. Returns {output name: array}."""
    a, k = op.attrs, op.kind
    dt = np.dtype(dtype).type

    def get(name):
        v = env[name]
        if program.values[name].kind == "weight":
            return _weight(v, dt)
        return np.asarray(v) if program.values[name].dtype == "u32" else np.asarray(v, dtype=dt)

    ins = [get(n) for n in op.inputs]
    rows = int(a.get("rows", 1))
    if k in ("conv1d_step", "gated_delta_step"):  # one row or a chunk's rows in order
        out = _linear_attention(op, program, env, ins, dt)
    elif rows > 1 or k == "embed" and op.inputs[1] != "step":
        # a prompt chunk (fusion/chunk.py): the row-wise ops, row by row with the decode semantics
        out = _rows_op(op, program, env, ins, rows, dt)
    elif k == "embed":
        out = [ins[0][int(ins[1][STEP_TOKEN])] * dt(a.get("scale", 1.0))]
    elif k == "rms_norm":
        x, w = ins
        xs = x.reshape(-1, w.shape[0])
        ms = np.mean(xs * xs, axis=1, keepdims=True)
        out = [(xs / np.sqrt(ms + dt(a["eps"])) * w).reshape(-1)]
    elif k == "matmul":
        out = [ins[0] @ ins[1]]
    elif k == "add":  # a bias weight shorter than a (a chunk's rows) is added to every row
        out = [(ins[0].reshape(-1, ins[1].size) + ins[1]).reshape(-1)]
    elif k == "rope":
        out = [_rope(ins[0], int(ins[1][STEP_POS]), ins[2], a, dt)]
    elif k == "kv_write":
        kk, vv, step = ins
        caches = []
        for name, row in zip(op.outputs, (kk, vv)):
            c = env.get(name)
            if c is None:
                c = np.zeros(program.values[name].shape, dtype=dt)
            if program.values[name].dtype == "f16":  # stored as f16, read back as such
                row = np.asarray(row).astype(np.float16)
            c[int(step[STEP_POS])] = row
            caches.append(c)
        out = caches
    elif k == "attention":
        q, kc, vc, step = ins[:4]
        out = [_attention(q, kc, vc, int(step[STEP_POS]), a, dt, ins[4] if len(ins) > 4 else None)]
    elif k == "silu_mul":
        g, u = ins
        out = [g / (dt(1) + np.exp(-g)) * u]
    elif k == "swiglu_clamp":
        g, u = ins
        lim, alpha = dt(a["limit"]), dt(a["alpha"])
        c = np.minimum(g, lim)
        out = [c / (dt(1) + np.exp(-alpha * c)) * (np.clip(u, -lim, lim) + dt(1))]
    elif k == "gelu_mul":
        g, u = ins
        c = dt(np.sqrt(2.0 / np.pi))
        out = [dt(0.5) * g * (dt(1) + np.tanh(c * (g + dt(0.044715) * g * g * g))) * u]
    elif k == "argmax":
        out = [np.array([np.argmax(ins[0])], dtype=np.uint32)]
    elif k.startswith("moe_") or k == "sigmoid_scale":
        out = _moe(op, program, ins, dt)
    elif k == "sample":
        from vkdecode.sampling import sample_logits

        out = [np.array([sample_logits(ins[0], ins[1])], dtype=np.uint32)]
    else:
        raise ValueError(f"reference: unknown op kind {k!r}")
    return {
        name: np.asarray(v, dtype=np.uint32 if program.values[name].dtype == "u32" else dt)
        for name, v in zip(op.outputs, out)
    }


class Reference:
    """Runs every op of `program` in order for one token; keeps the KV caches across steps."""

    def __init__(self, program: Program, weights: dict[str, PackedWeight], dtype=np.float32, sampling=None):
        self.program, self.dtype = program, np.dtype(dtype).type
        self.sampling = sampling  # a vkdecode.sampling.SamplingParams for `sample` ops
        weights = {**program.constants, **weights}  # the builder's tables (rope frequencies)
        missing = [v.name for v in program.values.values() if v.kind == "weight" and v.name not in weights]
        if missing:
            raise KeyError(f"reference: weights missing for {missing[:5]}")
        # dequantize once: the per-token loop then runs plain numpy matvecs
        self.weights = {
            n: _weight(weights[n], self.dtype) for n, v in program.values.items() if v.kind == "weight"
        }
        self.values: dict[str, np.ndarray] = {}
        self.reset()

    def reset(self) -> None:
        self.state = {
            v.name: np.zeros(v.shape, dtype=self.dtype)
            for v in self.program.values.values()
            if v.kind == "state"
        }
        self.values = {}

    def step(self, token: int, pos: int) -> dict[str, np.ndarray]:
        # the KV caches' rows (2-D states; the recurrent ones of linear attention are 1-D)
        ctx = next((s.shape[0] for s in self.state.values() if s.ndim == 2), None)
        if ctx is not None and not 0 <= pos < ctx:
            from vkdecode.errors import ContextError

            raise ContextError(f"position {pos} is outside the context of {ctx} tokens")
        step = make_step(token, pos)
        if self.sampling is not None:
            step[STEP_SEED : STEP_SEED + 4] = self.sampling.step_words()
        env: dict = {**self.weights, **self.state, "step": step}
        return self._run(env)

    def chunk(self, tokens, pos0: int) -> dict[str, np.ndarray]:
        """One prompt chunk of a fusion/chunk.py program: tokens at positions pos0.. (the KV caches
        in self.state are updated in place, as step() does)."""
        from fusion.chunk import TOKENS

        ids = np.asarray(tokens, dtype=np.uint32)
        if ids.shape != self.program.values[TOKENS].shape:
            raise ValueError(
                f"reference: {ids.size} tokens for a chunk of {self.program.values[TOKENS].shape[0]}"
            )
        env: dict = {**self.weights, **self.state, "step": make_step(int(ids[0]), pos0), TOKENS: ids}
        return self._run(env)

    def _run(self, env: dict) -> dict[str, np.ndarray]:
        for op in self.program.ops:
            env.update(run_op(op, self.program, env, self.dtype))
        self.values = {
            n: env[n] for n in self.program.values if self.program.values[n].kind in ("activation", "output")
        }
        return {n: env[n] for n in self.program.outputs()}
