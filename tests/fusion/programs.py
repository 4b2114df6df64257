"""Pure-Python decode programs for the matcher tests, in the exact op order of the model builders.

Until vkdecode.models builds real programs these stand in; the tests will then also run on those.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from fusion.ir import STEP_WORDS, Program


@dataclass(frozen=True)
class Spec:
    name: str
    arch: str  # llama | qwen2 | qwen3
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool = True  # lm_head is tok_embd
    bias: bool = False  # q/k/v biases (Qwen2)
    o_bias: bool = False  # o-projection bias (Llama / Qwen3 attention_bias)
    mlp_bias: bool = False  # gate/up/down biases (Llama mlp_bias)
    qk_norm: bool = False  # per-head q/k rms_norm (Qwen3)
    theta: float = 10000.0
    eps: float = 1e-5
    ctx: int = 256
    dtype: str = "f16"  # default weight dtype of matrices
    dtypes: dict = field(default_factory=dict)  # value name -> dtype overrides, e.g. {"l0.w_up": "q8_0"}

    def with_(self, **kw) -> Spec:
        return replace(self, **kw)


SMOLLM2_135M = Spec("smollm2-135m", "llama", 30, 576, 9, 3, 64, 1536, 49152, theta=100000.0)
QWEN2_0_5B = Spec(
    "qwen2-0.5b", "qwen2", 24, 896, 14, 2, 64, 4864, 151936, bias=True, theta=1000000.0, eps=1e-6
)
QWEN3_0_6B = Spec(
    "qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, qk_norm=True, theta=1000000.0, eps=1e-6
)
SPECS = (SMOLLM2_135M, QWEN2_0_5B, QWEN3_0_6B)


def build(s: Spec, n_layers: int | None = None) -> Program:
    """One decode step of `s` (optionally cut to n_layers), verified."""
    L = s.n_layers if n_layers is None else n_layers
    p = Program(f"{s.name}-decode")
    p.meta.update(arch=s.arch, n_layers=L, ctx=s.ctx)
    d, q_dim, kv_dim = s.hidden, s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim

    def w(name, shape, dtype=None):
        dt = dtype or (s.dtype if len(shape) == 2 else "f32")
        return p.value(name, shape, s.dtypes.get(name, dt), "weight")

    def act(name, n, kind="activation", dtype="f32"):
        return p.value(name, (n,), dtype, kind)

    step = p.value("step", (STEP_WORDS,), "u32", "step")
    tok = w("tok_embd", (s.vocab, d))
    x = act("x0", d)
    p.op("embed", (tok, step), (x,))
    rope = {"layout": "neox", "head_dim": s.head_dim}
    freqs = p.constant(
        "rope_freqs", (s.theta ** (-np.arange(0, s.head_dim, 2) / s.head_dim)).astype(np.float32)
    )
    for i in range(L):
        n = f"l{i}."
        h = act(n + "h", d)
        p.op("rms_norm", (x, w(n + "attn_norm", (d,))), (h,), eps=s.eps)
        proj = {}
        for key, rows in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
            y = act(n + key, rows)
            p.op("matmul", (w(n + "w" + key, (rows, d)), h), (y,))
            if s.bias:
                yb = act(n + key + "b", rows)
                p.op("add", (y, w(n + "b" + key, (rows,))), (yb,))
                y = yb
            proj[key] = y
        q, k, v = proj["q"], proj["k"], proj["v"]
        if s.qk_norm:
            qn, kn = act(n + "qn", q_dim), act(n + "kn", kv_dim)
            p.op("rms_norm", (q, w(n + "q_norm", (s.head_dim,))), (qn,), eps=s.eps)
            p.op("rms_norm", (k, w(n + "k_norm", (s.head_dim,))), (kn,), eps=s.eps)
            q, k = qn, kn
        qr, kr = act(n + "qr", q_dim), act(n + "kr", kv_dim)
        p.op("rope", (q, step, freqs), (qr,), n_heads=s.n_heads, **rope)
        p.op("rope", (k, step, freqs), (kr,), n_heads=s.n_kv_heads, **rope)
        kc = p.value(n + "k_cache", (s.ctx, kv_dim), "f32", "state")
        vc = p.value(n + "v_cache", (s.ctx, kv_dim), "f32", "state")
        p.op("kv_write", (kr, v, step), (kc, vc))
        o = act(n + "o", q_dim)
        p.op(
            "attention",
            (qr, kc, vc, step),
            (o,),
            n_heads=s.n_heads,
            n_kv_heads=s.n_kv_heads,
            head_dim=s.head_dim,
            scale=s.head_dim**-0.5,
        )
        ao, x1 = act(n + "ao", d), act(n + "x1", d)
        p.op("matmul", (w(n + "wo", (d, q_dim)), o), (ao,))
        if s.o_bias:
            aob = act(n + "aob", d)
            p.op("add", (ao, w(n + "bo", (d,))), (aob,))
            ao = aob
        p.op("add", (x, ao), (x1,))
        h2 = act(n + "h2", d)
        p.op("rms_norm", (x1, w(n + "ffn_norm", (d,))), (h2,), eps=s.eps)
        g, u, a = act(n + "g", s.ffn), act(n + "u", s.ffn), act(n + "a", s.ffn)
        p.op("matmul", (w(n + "w_gate", (s.ffn, d)), h2), (g,))
        if s.mlp_bias:
            gb = act(n + "gb", s.ffn)
            p.op("add", (g, w(n + "b_gate", (s.ffn,))), (gb,))
            g = gb
        p.op("matmul", (w(n + "w_up", (s.ffn, d)), h2), (u,))
        if s.mlp_bias:
            ub = act(n + "ub", s.ffn)
            p.op("add", (u, w(n + "b_up", (s.ffn,))), (ub,))
            u = ub
        p.op("silu_mul", (g, u), (a,))
        dn, x2 = act(n + "dn", d), act(n + "x2", d)
        p.op("matmul", (w(n + "w_down", (d, s.ffn)), a), (dn,))
        if s.mlp_bias:
            dnb = act(n + "dnb", d)
            p.op("add", (dn, w(n + "b_down", (d,))), (dnb,))
            dn = dnb
        p.op("add", (x1, dn), (x2,))
        x = x2
    hf = act("hf", d)
    p.op("rms_norm", (x, w("out_norm", (d,))), (hf,), eps=s.eps)
    head = tok if s.tied else w("lm_head", (s.vocab, d))
    logits = act("logits", s.vocab, kind="output")
    p.op("matmul", (head, hf), (logits,))
    p.op("argmax", (logits,), (act("next_token", 1, kind="output", dtype="u32"),))
    return p.verify()


def add_consumer(p: Program, value: str, out: str = "extra", verify: bool = True) -> Program:
    """Give `value` one more reader (a program output), right after its producer (verify False: a
    program whose inputs have no producer, gated_tail's)."""
    v = p.values[value]
    p.value(out, v.shape, v.dtype, "output")
    at = p.producers()[value] + 1
    p.op("add", (value, value), (out,))
    p.ops.insert(at, p.ops.pop())
    return p.verify() if verify else p


def mark_output(p: Program, value: str, verify: bool = True) -> Program:
    """Turn an intermediate into a program output (the host reads it back)."""
    p.values[value] = replace(p.values[value], kind="output")
    return p.verify() if verify else p


def gated_tail(heads: int, d: int, m: int, dtype: str = "f32", silu_of: str = "z") -> Program:
    """The end of a Qwen3.5 linear-attention layer as vkdecode/models/qwen35.py builds it: s = x +
    W (silu(z) * rms_norm(o)), the norm over each d-element head (silu_of "n": silu of the normed o
    instead, the gate the other way round). o, z and x are activations with no producer, so the
    program is not verified."""
    p = Program("gated-tail")
    k = heads * d
    for name, n in (("o", k), ("z", k), ("n", k), ("g", k), ("x", m), ("y", m)):
        p.value(name, (n,), "f32", "activation")
    p.value("s", (m,), "f32", "output")
    p.value("norm_w", (d,), "f32", "weight")
    p.value("w", (m, k), dtype, "weight")
    p.op("rms_norm", ["o", "norm_w"], ["n"], eps=1e-6)
    p.op("silu_mul", ["z", "n"] if silu_of == "z" else ["n", "z"], ["g"])
    p.op("matmul", ["w", "g"], ["y"])
    p.op("add", ["x", "y"], ["s"])
    return p


def shared_tail(
    k: int, m: int, dtype: str = "f32", gates: int = 1, scaled_first: bool = False, gate_matmul: bool = True
) -> Program:
    """The end of a gated shared expert's layer as vkdecode/models/moe.py builds it: s = r +
    sigmoid(g) * (W a), g the one-float gate logit of h, computed after the down (gate_matmul False:
    g an input; gates > 1: a gate per row of m / gates, a chunk's form). a, h and r are activations
    with no producer, so the program is not verified."""
    p = Program("shared-tail")
    for name, n in (("a", k), ("h", k), ("g", gates), ("y", m), ("sc", m), ("r", m)):
        p.value(name, (n,), "f32", "activation")
    p.value("s", (m,), "f32", "output")
    p.value("w", (m, k), dtype, "weight")
    p.value("w_gate", (gates, k), "f32", "weight")
    p.op("matmul", ["w", "a"], ["y"])
    if gate_matmul:
        p.op("matmul", ["w_gate", "h"], ["g"])
    p.op("sigmoid_scale", ["g", "y"], ["sc"])
    p.op("add", ["sc", "r"] if scaled_first else ["r", "sc"], ["s"])
    return p


def gated_attention_tail(k: int, m: int, dtype: str = "f32", gates: int | None = None) -> Program:
    """The end of a Qwen3.5 full-attention layer as vkdecode/models/qwen35.py builds it: s = r + W
    (sigmoid(g) * o), a gate an element of o (gates: fewer, one per group of o's elements, as a gate
    per head would be). o, g and r are activations with no producer, so the program is not verified."""
    p = Program("gated-attention-tail")
    for name, n in (("o", k), ("g", gates or k), ("go", k), ("y", m), ("r", m)):
        p.value(name, (n,), "f32", "activation")
    p.value("s", (m,), "f32", "output")
    p.value("w", (m, k), dtype, "weight")
    p.op("sigmoid_scale", ["g", "o"], ["go"])
    p.op("matmul", ["w", "go"], ["y"])
    p.op("add", ["r", "y"], ["s"])
    return p
