"""Program.verify(): shapes and dtypes per op kind, SSA form, step values read only."""

from __future__ import annotations

from fusion.vocab import K_QUANT_BLOCK, QUANT_BLOCK, STEP_WORDS, WEIGHT_DTYPES, IRError

ARITY = {  # kind -> (number of inputs, number of outputs)
    "embed": (2, 1),
    "rms_norm": (2, 1),
    "matmul": (2, 1),
    "add": (2, 1),
    "rope": (3, 1),
    "kv_write": (3, 2),
    "attention": (4, 1),
    "silu_mul": (2, 1),
    "gelu_mul": (2, 1),
    "argmax": (1, 1),
    "sample": (2, 1),
    "moe_topk": (1, 2),
    "moe_matmul": (3, 1),
    "moe_sum": (2, 1),
    "sigmoid_scale": (2, 1),
    "swiglu_clamp": (2, 1),
    "moe_bias": (3, 1),
    "conv1d_step": (3, 2),
    "gated_delta_step": (6, 2),
}
# kind -> trailing inputs an op may leave out: attention's sinks (gpt-oss), see fusion/ir.py
OPTIONAL_INPUTS = {"attention": 1}


def verify_program(p) -> None:
    """Raise IRError on the first malformed op of p (a fusion.ir.Program)."""
    produced: set[str] = set()
    for i, op in enumerate(p.ops):

        def fail(msg: str, i=i, op=op) -> None:
            raise IRError(f"op #{i} {op.kind}: {msg}")

        if op.kind not in ARITY:
            fail(f"unknown op kind (known: {', '.join(ARITY)})")
        n_in, n_out = ARITY[op.kind]
        n_opt = OPTIONAL_INPUTS.get(op.kind, 0)
        if not n_in <= len(op.inputs) <= n_in + n_opt or len(op.outputs) != n_out:
            ins = f"{n_in}..{n_in + n_opt}" if n_opt else str(n_in)
            fail(f"takes {ins} inputs and {n_out} outputs, got {len(op.inputs)} and {len(op.outputs)}")
        for name in op.inputs + op.outputs:
            if name not in p.values:
                fail(f"value {name!r} is not defined")
        for name in op.inputs:
            v = p.values[name]
            if v.kind in ("activation", "output") and name not in produced:
                fail(f"reads {name!r} before any op writes it")
        for name in op.outputs:
            v = p.values[name]
            if name in produced:
                fail(f"writes {name!r}, which an earlier op already wrote")
            if v.kind in ("weight", "step"):
                fail(f"writes {name!r}, a {v.kind} value")
            produced.add(name)
        _check_shapes(p, op, fail)


def _check_shapes(p, op, fail) -> None:
    ins = [p.values[n] for n in op.inputs]
    outs = [p.values[n] for n in op.outputs]
    a = op.attrs

    def need(cond: bool, msg: str) -> None:
        if not cond:
            fail(msg)

    # rows > 1: a prompt chunk (fusion/chunk.py), every row-wise operand holds `rows` rows
    r = int(a.get("rows", 1))
    for v in ins:
        if v.kind == "step" and v.name == "step":
            need(
                v.shape == (STEP_WORDS,) and v.dtype == "u32",
                f"step value {v.name} must be u32[{STEP_WORDS}]",
            )
    k = op.kind
    if k == "embed":
        t, ids = ins
        need(t.kind == "weight" and len(t.shape) == 2, f"table {t.name} must be a 2-D weight")
        need(
            outs[0].shape == (r * t.shape[1],),
            f"output {outs[0].name} {outs[0].shape} != ({r * t.shape[1]},)",
        )
        if r > 1 or ids.name != "step":
            n = r * STEP_WORDS if a.get("batch") else r  # a batched step: one step record per row
            need(
                ids.kind == "step" and ids.shape == (n,) and ids.dtype == "u32",
                f"token ids {ids.name} must be u32[{n}]",
            )
    elif k == "rms_norm":
        x, w = ins
        need(
            len(w.shape) == 1 and w.shape[0] > 0 and x.shape[0] % w.shape[0] == 0,
            f"weight {w.name} {w.shape} does not divide input {x.name} {x.shape}",
        )
        need(outs[0].shape == x.shape, f"output {outs[0].name} {outs[0].shape} != input {x.shape}")
        need("eps" in a, "missing attr eps")
    elif k == "matmul":
        w, x = ins
        need(w.kind == "weight" and len(w.shape) == 2, f"{w.name} must be a 2-D weight")
        need(
            x.shape == (r * w.shape[1],), f"input {x.name} {x.shape} does not match weight {w.name} {w.shape}"
        )
        need(
            outs[0].shape == (r * w.shape[0],),
            f"output {outs[0].name} {outs[0].shape} != ({r * w.shape[0]},)",
        )
        _check_blocks(w, need)
    elif k in ("add", "silu_mul", "gelu_mul", "swiglu_clamp"):
        # a chunk adds a bias (a weight) to every row
        bias = k == "add" and ins[1].kind == "weight" and ins[0].numel % ins[1].numel == 0
        need(
            ins[0].shape == outs[0].shape and (ins[1].shape == ins[0].shape or bias),
            f"shapes differ: {[v.shape for v in ins + outs]}",
        )
    elif k == "rope":
        x = ins[0]
        need(a.get("layout") in ("neox", "pairs"), f"layout must be neox or pairs, got {a.get('layout')!r}")
        need(
            x.shape == (r * a["n_heads"] * a["head_dim"],) and outs[0].shape == x.shape,
            f"{x.name} {x.shape} != n_heads*head_dim {a['n_heads']}*{a['head_dim']}",
        )
        need(a["head_dim"] % 2 == 0, "head_dim must be even")
        f = ins[2]
        need(
            f.kind == "weight" and f.dtype == "f32" and f.shape == (a["head_dim"] // 2,),
            f"freqs {f.name} must be an f32 weight of shape ({a['head_dim'] // 2},)",
        )
    elif k == "kv_write":
        kk, vv, _ = ins
        kc, vc = outs
        need(kc.kind == "state" and vc.kind == "state", "caches must be state values")
        need(len(kc.shape) == 2 and kc.shape == vc.shape, f"cache shapes {kc.shape} {vc.shape}")
        need(kc.dtype in ("f32", "f16") and vc.dtype == kc.dtype, f"cache dtypes {kc.dtype} {vc.dtype}")
        need(
            kc.dtype == "f32" or kc.shape[1] % 2 == 0,
            f"f16 cache rows {kc.shape[1]} must be even (word pairs)",
        )
        need(kk.shape == vv.shape == (r * kc.shape[1],), f"k/v {kk.shape} do not match cache rows {kc.shape}")
    elif k == "attention":
        q, kc, vc = ins[:3]
        h, kvh, d = a["n_heads"], a["n_kv_heads"], a["head_dim"]
        for sk in ins[4:]:  # the optional sinks: one logit per head
            need(
                sk.kind == "weight" and sk.dtype == "f32" and sk.shape == (h,),
                f"sinks {sk.name} must be an f32 weight of shape ({h},)",
            )
        need(h % kvh == 0, f"n_heads {h} not a multiple of n_kv_heads {kvh}")
        need(q.shape == (r * h * d,), f"q {q.shape} != ({r * h * d},)")
        need(kc.shape[1] == kvh * d and vc.shape == kc.shape, f"cache {kc.shape} != (ctx, {kvh * d})")
        need(outs[0].shape == (r * h * d,), f"output {outs[0].shape} != ({r * h * d},)")
        need("scale" in a, "missing attr scale")
        need(int(a.get("window", 0)) >= 0, f"window {a.get('window')} must be >= 0")
    if k in ("conv1d_step", "gated_delta_step"):
        _check_linear(op, ins, outs, need)
    elif k == "swiglu_clamp":
        need(float(a.get("limit", 0)) > 0 and "alpha" in a, "needs attrs alpha and a positive limit")
    elif k == "sigmoid_scale":
        g, y = ins
        need(y.numel % g.numel == 0 and outs[0].shape == y.shape, f"{y.name} {y.shape} is not {g.numel} rows")
    elif k.startswith("moe_"):
        _check_moe(op, ins, outs, need)
    elif k in ("argmax", "sample"):
        need(outs[0].shape == (r,) and outs[0].dtype == "u32", f"output must be u32[{r}]")
        need(ins[0].numel % r == 0, f"{ins[0].name} {ins[0].shape} is not {r} rows")


def _check_linear(op, ins, outs, need) -> None:
    """Qwen3.5's linear-attention ops (fusion/ir.py): f32 activations and recurrent state; a prompt
    chunk's rows (attr rows) run in order."""
    a = op.attrs
    state, r = outs[1], int(a.get("rows", 1))
    need(state.kind == "state" and state.dtype == "f32", f"{state.name} must be an f32 state value")
    if op.kind == "conv1d_step":
        x, w, _ = ins
        kk, c = int(a.get("kernel", 0)), x.numel // r
        need(kk >= 2 and x.numel % r == 0, f"kernel {kk} must be at least 2, {x.numel} in whole rows")
        need(w.kind == "weight" and w.shape == (c * kk,), f"weight {w.name} {w.shape} != ({c * kk},)")
        need(outs[0].shape == x.shape, f"output {outs[0].shape} != input {x.shape}")
        _check_state(state, (kk - 1) * c, a, need)
        return
    hk, hv, dk, dv = (int(a.get(n, 0)) for n in ("n_k_heads", "n_v_heads", "k_dim", "v_dim"))
    need(min(hk, hv, dk, dv) > 0 and hv % hk == 0, f"heads {hk} / {hv} x dims {dk} / {dv}")
    need(int(a.get("v_tiled", 0)) in (0, 1), f"v_tiled {a.get('v_tiled')} must be 0 or 1")
    qkv, ga, gb, alog, dtb = ins[:5]
    c = 2 * hk * dk + hv * dv
    need(qkv.shape == (r * c,), f"qkv {qkv.shape} != ({r} x {c},)")
    for v in (ga, gb):
        need(v.shape == (r * hv,), f"{v.name} {v.shape} != ({r} x {hv},)")
    for v in (alog, dtb):
        need(v.kind == "weight" and v.shape == (hv,), f"{v.name} must be a weight of shape ({hv},)")
    need(outs[0].shape == (r * hv * dv,), f"output {outs[0].shape} != ({r} x {hv * dv},)")
    _check_state(state, hv * dk * dv, a, need)


def _check_state(state, n: int, a: dict, need) -> None:
    """One state of n floats, or a batched step's copies of it (fusion/chunk_batch.py)."""
    copies = max(1, state.numel // n) if a.get("batch") else 1
    need(state.shape == (copies * n,), f"state {state.shape} != ({copies} x {n},)")


def _check_moe(op, ins, outs, need) -> None:
    """The MoE ops are shape-generic (a prompt chunk's rows are more slots): sizes must divide."""
    a, k = op.attrs, op.kind
    if k == "moe_topk":
        top, n = int(a.get("k", 0)), int(a.get("n_experts", 0))
        ids, w = outs
        need(0 < top <= n, f"k {top} must be in 1..n_experts {n}")
        rows = ins[0].numel // max(1, n)
        need(ins[0].numel == rows * n and rows > 0, f"logits {ins[0].shape} are not rows of {n}")
        need(
            ids.dtype == "u32" and ids.shape == w.shape == (rows * top,),
            f"ids/weights must be [{rows * top}]",
        )
    elif k == "moe_matmul":
        w, x, ids = ins
        need(w.kind == "weight" and len(w.shape) == 3, f"{w.name} must be a 3-D weight (experts, out, in)")
        s = ids.numel
        need(ids.dtype == "u32" and s > 0, f"expert ids {ids.name} must be u32")
        xr = x.numel // w.shape[2]
        need(
            x.numel == xr * w.shape[2] and xr > 0 and s % xr == 0,
            f"input {x.name} is not rows of {w.shape[2]}",
        )
        need(outs[0].shape == (s * w.shape[1],), f"output {outs[0].name} != ({s * w.shape[1]},)")
        _check_blocks(w, need)
    elif k == "moe_bias":
        x, b, ids = ins
        need(
            b.kind == "weight" and b.dtype == "f32" and len(b.shape) == 2,
            f"{b.name} must be f32 (experts, n)",
        )
        need(ids.dtype == "u32" and x.numel == ids.numel * b.shape[1], f"{x.name} is not {ids.numel} slots")
        need(outs[0].shape == x.shape, f"output {outs[0].name} {outs[0].shape} != {x.shape}")
    else:  # moe_sum
        y, w = ins
        n = y.numel // max(1, w.numel)
        need(y.numel == n * w.numel and n > 0, f"{y.name} {y.shape} is not {w.numel} slots")
        need(outs[0].numel % n == 0 and w.numel % (outs[0].numel // n) == 0, f"output {outs[0].shape}")


def _check_blocks(w, need) -> None:
    """A weight's dtype is known and its rows (the last dim) are whole quant blocks."""
    need(w.dtype in WEIGHT_DTYPES, f"{w.name}: unsupported weight dtype {w.dtype}")
    if w.dtype not in ("f32", "f16"):
        blk = K_QUANT_BLOCK if w.dtype.endswith("_k") else QUANT_BLOCK
        need(w.shape[-1] % blk == 0, f"{w.name}: in-dim {w.shape[-1]} not a multiple of {blk}")
