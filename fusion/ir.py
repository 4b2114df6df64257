"""The op list of one decode step: Values, Ops and a Program, plus verify().

Every activation is a flat 1-D vector; ops that see heads take `n_heads` / `head_dim` attrs, so
there is no reshape op. Anything that changes per token (token id, position, kv length, RNG state)
lives in the single `step` value (u32 words, layout below), never in attrs.

Op semantics (the reference executor and every kernel implement exactly these):
  embed      (table[vocab, dim] weight, step)          -> x[dim]      x = table[step.token] * scale
             (attr scale, default 1.0; Gemma scales by sqrt(dim), rounded to f32)
  rms_norm   (x[n], w[d])                               -> y[n]        attrs eps; d == n normalises
             the whole vector, d < n normalises each of the n // d heads with the same w
  matmul     (w[out, in] weight, x[in])                 -> y[out]      y = w @ x (w's dtype: f32,
             f16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, mxfp4, q*_k; math in f32)
  add        (a[n], b[n])                               -> c[n]        residual and bias adds
  rope       (x[h*d], step, freqs[d/2] weight)          -> y[h*d]      attrs n_heads, head_dim,
             layout "neox" (rotate halves i, i+d/2) or "pairs" (rotate 2i, 2i+1); angle of pair i
             at position p is f32(p) * freqs[i] (rounded to f32, as transformers computes it).
             freqs is the inverse-frequency table (theta ** (-2i/d), with llama3 scaling applied,
             ...), usually a Program constant that the builder computed (vkdecode/models/rope.py)
  kv_write   (k[kvh*d], v[kvh*d], step)                 -> k_cache, v_cache  (state values of
             shape [ctx, kvh*d], f32): row step.pos := k / v; rows < pos are kept from earlier steps
  attention  (q[h*d], k_cache, v_cache, step[, sinks])  -> o[h*d]      attrs n_heads, n_kv_heads,
             head_dim, scale, window (0 = none); causal over rows lo .. step.pos (inclusive),
             lo = max(0, pos - window + 1) with a window (a sliding-window layer sees `window`
             keys, itself included), else 0; head i reads kv head i // (n_heads // n_kv_heads).
             Optional 5th input sinks[h] (f32 weight; gpt-oss): head i's softmax has one more
             logit sinks[i] in its denominator only (no value vector): with scores s_j, c = sinks[i]
             and m = max(max_j s_j, c), o_i = sum_j e^(s_j - m) v_j / (sum_j e^(s_j - m) + e^(c - m))
  silu_mul   (g[n], u[n])                               -> y[n]        y = g * sigmoid(g) * u
  gelu_mul   (g[n], u[n])                               -> y[n]        y = gelu_tanh(g) * u, gelu_tanh(g) =
             0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (PyTorch's gelu approximate="tanh")
  argmax     (logits[n])                                -> token[1] u32 (first index of the max)
  sample     (logits[n], step)                          -> token[1] u32: with step.temp <= 0 the
             argmax; else the kept set is the top_k largest logits (ties kept; top_k 0 = all),
             cut to the smallest top set whose softmax(l/temp) mass reaches top_p, and the token
             is argmax over it of l/temp + Gumbel(u), u = hash(seed, pos, index) (Gumbel-max: an
             exact draw from the renormalised distribution, reproducible from the step buffer alone)
Mixture of experts (shape-generic: a prompt chunk's T rows are just more rows / slots):
  moe_topk   (logits[R*E])                              -> ids[R*k] u32, weights[R*k]   attrs k,
             n_experts, norm; per row p = softmax(logits), ids = the k largest p in descending
             order (ties: lower index first), weights = p[ids], / sum(weights) when norm
  moe_matmul (w[E, out, in] weight, x[X*in], ids[S] u32) -> y[S*out]  slot s: y_s = w[ids[s]] @
             x row (s // (S / X)) (X = 1: every slot reads the same x; X = S: one x per slot)
  moe_sum    (y[S*n], weights[S])                       -> out[R*n]  out row r = sum over its
             S / R slots j of weights[j] * y_j (the experts' weighted sum)
  sigmoid_scale (g[R], y[R*n])                          -> out[R*n]  out row r = sigmoid(g[r]) * y_r
             (Qwen2-MoE's gated shared expert)
  moe_bias   (x[S*n], b[E, n] weight, ids[S] u32)       -> y[S*n]    slot s: y_s = x_s + b[ids[s]]
             (gpt-oss's per-expert biases)
  swiglu_clamp (g[n], u[n])                             -> y[n]      attrs alpha, limit: gpt-oss's
             GLU, c = min(g, limit): y = c * sigmoid(alpha * c) * (clamp(u, -limit, limit) + 1)
Linear attention (Qwen3.5's Gated DeltaNet layers; recurrent state values updated in place, read
as zeros at step.pos 0, so a sequence restarting at position 0 needs no clearing):
  conv1d_step (x[C], w[C*K] weight, step)               -> y[C], hist[(K-1)*C] state   attr kernel K:
             u_p = the x of position p (u_p = 0 for p < 0), hist row p % (K-1) holds u_p;
             y_c = silu(sum_j w[c*K + j] * u_{pos-K+1+j, c}), j = 0..K-1; then hist row pos % (K-1) := x
  gated_delta_step (qkv[2*Hk*dk + Hv*dv], a[Hv], b[Hv], a_log[Hv] weight, dt_bias[Hv] weight, step)
             -> o[Hv*dv], s[Hv*dk*dv] state   attrs n_k_heads Hk, n_v_heads Hv, k_dim dk, v_dim dv:
             q, k, v = qkv's three parts; v-head h reads q/k head h // (Hv / Hk) (attr v_tiled 1:
             h % Hk, the V heads in llama.cpp's GGUF order); q_h, k_h scaled by
             rsqrt(sum of squares + 1e-6), q_h also by dk ** -0.5; beta = sigmoid(b_h), g = -exp(a_log_h)
             * softplus(a_h + dt_bias_h) (softplus(x) = x above 20); S_h (dk x dv, s's h-th block,
             row-major) = (0 at pos 0, else S_h) * exp(g); S_h += k_h (v_h - S_h^T k_h)^T beta;
             o_h = S_h^T q_h
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fusion.verify import verify_program
from fusion.vocab import (  # noqa: F401 (re-exported: the IR's words are imported from here)
    K_QUANT_BLOCK,
    QUANT_BLOCK,
    STEP_LIVE,
    STEP_POS,
    STEP_SEED,
    STEP_SLOT,
    STEP_TEMP,
    STEP_TOKEN,
    STEP_TOP_K,
    STEP_TOP_P,
    STEP_WORDS,
    VALUE_KINDS,
    WEIGHT_DTYPES,
    IRError,
)


@dataclass(frozen=True)
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str  # f32 | u32 for activations; a WEIGHT_DTYPES entry for weights
    kind: str  # one of VALUE_KINDS

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass
class Op:
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict = field(default_factory=dict)

    def __str__(self) -> str:
        attrs = " ".join(f"{k}={v}" for k, v in self.attrs.items())
        return (
            f"{', '.join(self.outputs)} = {self.kind}({', '.join(self.inputs)}){' ' + attrs if attrs else ''}"
        )


class Program:
    """The ordered ops of one decode step and the values they read and write."""

    def __init__(self, name: str = "decode"):
        self.name = name
        self.values: dict[str, Value] = {}
        self.ops: list[Op] = []
        self.meta: dict = {}  # free-form facts for users of the program (arch, ctx, ...)
        # weight values whose data the builder computed, not read from the model file (the rope
        # frequency tables): name -> f32 array; executors upload them with the loaded weights
        self.constants: dict = {}

    def value(self, name: str, shape, dtype: str = "f32", kind: str = "activation") -> str:
        if kind not in VALUE_KINDS:
            raise IRError(f"value {name}: unknown kind {kind!r}")
        if name in self.values:
            raise IRError(f"value {name}: defined twice")
        self.values[name] = Value(name, tuple(int(s) for s in shape), dtype, kind)
        return name

    def constant(self, name: str, array) -> str:
        """A 1-D f32 weight value whose data (a numpy array) the program carries itself."""
        if name not in self.values:
            self.value(name, array.shape, "f32", "weight")
            self.constants[name] = array
        return name

    def op(self, kind: str, inputs, outputs, **attrs) -> Op:
        op = Op(kind, tuple(inputs), tuple(outputs), dict(attrs))
        self.ops.append(op)
        return op

    # -- data flow queries (used by the matcher and the executors) --
    def producers(self) -> dict[str, int]:
        return {out: i for i, op in enumerate(self.ops) for out in op.outputs}

    def consumers(self) -> dict[str, list[int]]:
        users: dict[str, list[int]] = {name: [] for name in self.values}
        for i, op in enumerate(self.ops):
            for name in op.inputs:
                users.setdefault(name, []).append(i)
        return users

    def outputs(self) -> list[str]:
        return [v.name for v in self.values.values() if v.kind == "output"]

    def verify(self) -> Program:
        verify_program(self)
        return self

    def __str__(self) -> str:
        lines = [f"program {self.name}: {len(self.ops)} ops, {len(self.values)} values"]
        for i, op in enumerate(self.ops):
            lines.append(f"  #{i:<4d} {op}")
        return "\n".join(lines)
