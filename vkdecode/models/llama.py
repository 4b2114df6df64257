"""The Llama decode step as a Program; Qwen2, Qwen3 and Gemma 3 reuse this builder with their hooks.

Op order per layer is fixed (the fusion matcher relies on plain program order):
  rms_norm -> wq [+bq] -> wk [+bk] -> wv [+bv] -> [q_norm, k_norm] -> rope q -> rope k ->
  kv_write -> attention -> wo [+bo] [-> post_attn_norm] -> add -> rms_norm -> w_gate [+b_gate] ->
  w_up [+b_up] -> silu_mul | gelu_mul -> w_down [+b_down] [-> post_ffn_norm] -> add
RoPE reads an inverse-frequency table (a Program constant from vkdecode/models/rope.py), one per
distinct rope setting (Gemma 3: one for the sliding layers, one for the global ones).
"""

from __future__ import annotations

import math

from fusion.ir import STEP_WORDS, Program
from vkdecode.models import moe, rope
from vkdecode.models.arch import Architecture


class Builder:
    """Emits the ops; families override the hooks below instead of copying the layer. args: a
    ModelArgs (config.py, which imports the architectures, so not imported here)."""

    EXTRA_NORMS: tuple[str, ...] = ()  # hidden-size norm weights a layer has beyond Llama's

    def __init__(self, args, ctx: int, weight_dtypes: dict[str, str] | None, sampling: bool = False):
        self.args, self.ctx, self.sampling = args, ctx, sampling
        self.p = Program(f"{args.arch}_decode")
        dtypes = weight_dtypes or {}
        for name, shape in self.weight_shapes(args).items():
            # vectors (norms, biases) are always f32; matrices take the dtype they were loaded in
            self.p.value(name, shape, dtypes.get(name, "f32") if len(shape) >= 2 else "f32", "weight")
        self.p.value("step", (STEP_WORDS,), "u32", "step")

    @classmethod
    def weight_shapes(cls, args) -> dict[str, tuple[int, ...]]:
        """Every weight the program of `args` reads, with its logical shape ((out, in) or (n,))."""
        h, q, kv = args.hidden_size, args.q_dim, args.kv_dim
        shapes: dict[str, tuple[int, ...]] = {"tok_embd": (args.vocab_size, h)}
        for i in range(args.n_layers):
            layer = {
                "attn_norm": (h,),
                "wq": (q, h),
                "wk": (kv, h),
                "wv": (kv, h),
                "wo": (h, q),
                "ffn_norm": (h,),
                **cls.ffn_shapes(args, i),
            }
            if args.attention_bias:
                layer.update(bq=(q,), bk=(kv,), bv=(kv,))
            if args.o_bias:
                layer.update(bo=(h,))
            if args.qk_norm:
                layer.update(q_norm=(args.head_dim,), k_norm=(args.head_dim,))
            layer.update({n: (h,) for n in cls.EXTRA_NORMS})
            shapes.update({f"layers.{i}.{k}": v for k, v in layer.items()})
        shapes["out_norm"] = (h,)
        if not args.tie_embeddings:
            shapes["lm_head"] = (args.vocab_size, h)
        return shapes

    @classmethod
    def ffn_shapes(cls, args, i: int) -> dict[str, tuple[int, ...]]:
        """Layer i's FFN weights (the MoE families override: models/moe.py)."""
        h, f = args.hidden_size, args.intermediate_size
        shapes = {"w_gate": (f, h), "w_up": (f, h), "w_down": (h, f)}
        if args.mlp_bias:
            shapes.update(b_gate=(f,), b_up=(f,), b_down=(h,))
        return shapes

    def act(self, name: str, n: int) -> str:
        return self.p.value(name, (n,))

    # -- hooks --
    def qkv_bias(self, i: int, which: str, x: str, n: int) -> str:
        """After each of the q/k/v projections (Qwen2 adds its bias here)."""
        if not self.args.attention_bias:
            return x
        return self.add(f"layers.{i}.{which}_b", x, f"layers.{i}.b{which}", n)

    def bias(self, flag: bool, i: int, which: str, x: str, n: int) -> str:
        """x + layers.{i}.{which} when `flag` (the o-projection and MLP biases), else x."""
        return self.add(f"layers.{i}.{which}_out", x, f"layers.{i}.{which}", n) if flag else x

    def qk_norm(self, i: int, q: str, k: str) -> tuple[str, str]:
        """Between the projections and rope (Qwen3 normalises each head of q and k here)."""
        if not self.args.qk_norm:
            return q, k
        a = self.args
        qn = self.act(f"layers.{i}.q_normed", a.q_dim)
        self.p.op("rms_norm", [q, f"layers.{i}.q_norm"], [qn], eps=a.rms_eps)
        kn = self.act(f"layers.{i}.k_normed", a.kv_dim)
        self.p.op("rms_norm", [k, f"layers.{i}.k_norm"], [kn], eps=a.rms_eps)
        return qn, kn

    def rope_table(self, i: int) -> str:
        """The inverse-frequency table layer i's rope reads (Gemma 3 overrides per layer type)."""
        a = self.args
        return self.p.constant(
            "rope_freqs", rope.inv_freq(a.rope_theta, a.head_dim, a.rope_scaling, a.rope_freq_factors)
        )

    def window(self, i: int) -> int:
        """Keys layer i's attention sees (0: all); Gemma 3's sliding layers override."""
        return 0

    def attn_sinks(self, i: int) -> list[str]:
        """Layer i's attention sinks weight, as the attention op's optional input (gpt-oss)."""
        return []

    def attn_scale(self) -> float:
        # YaRN scales cos and sin, so q.k by its factor squared: the scale takes it instead
        return rope.attention_factor(self.args.rope_scaling) / math.sqrt(self.args.head_dim)

    def attn_output(self, i: int, h: str, o: str) -> str:
        """The attention output before the o-projection (Qwen3.5 gates it); h: the normed input."""
        return o

    def post_norm(self, i: int, which: str, x: str) -> str:
        """Applied to the attention / FFN output before its residual add (Gemma 3's sandwich norms)."""
        return x

    def embed_scale(self) -> float:
        return 1.0

    # -- building blocks --
    def add(self, out: str, a: str, b: str, n: int) -> str:
        self.p.op("add", [a, b], [self.act(out, n)])
        return out

    def matmul(self, out: str, w: str, x: str) -> str:
        self.p.op("matmul", [w, x], [self.act(out, self.p.values[w].shape[0])])
        return out

    def layer(self, i: int, x: str) -> str:
        a, L = self.args, f"layers.{i}."
        h = self.act(L + "attn_in", a.hidden_size)
        self.p.op("rms_norm", [x, L + "attn_norm"], [h], eps=a.rms_eps)
        q = self.qkv_bias(i, "q", self.matmul(L + "q", L + "wq", h), a.q_dim)
        k = self.qkv_bias(i, "k", self.matmul(L + "k", L + "wk", h), a.kv_dim)
        v = self.qkv_bias(i, "v", self.matmul(L + "v", L + "wv", h), a.kv_dim)
        q, k = self.qk_norm(i, q, k)
        rope = {"layout": a.rope_layout, "head_dim": a.head_dim}
        freqs = self.rope_table(i)
        qr = self.act(L + "q_rope", a.q_dim)
        self.p.op("rope", [q, "step", freqs], [qr], n_heads=a.n_heads, **rope)
        kr = self.act(L + "k_rope", a.kv_dim)
        self.p.op("rope", [k, "step", freqs], [kr], n_heads=a.n_kv_heads, **rope)
        kc = self.p.value(L + "k_cache", (self.ctx, a.kv_dim), "f32", "state")
        vc = self.p.value(L + "v_cache", (self.ctx, a.kv_dim), "f32", "state")
        self.p.op("kv_write", [kr, v, "step"], [kc, vc])
        o = self.act(L + "attn_out", a.q_dim)
        window = {"window": self.window(i)} if self.window(i) else {}
        self.p.op(
            "attention",
            [qr, kc, vc, "step", *self.attn_sinks(i)],
            [o],
            n_heads=a.n_heads,
            n_kv_heads=a.n_kv_heads,
            head_dim=a.head_dim,
            scale=self.attn_scale(),
            **window,
        )
        o = self.attn_output(i, h, o)
        wo = self.bias(a.o_bias, i, "bo", self.matmul(L + "wo_out", L + "wo", o), a.hidden_size)
        x1 = self.add(L + "x_mid", x, self.post_norm(i, "attn", wo), a.hidden_size)
        h2 = self.act(L + "ffn_in", a.hidden_size)
        self.p.op("rms_norm", [x1, L + "ffn_norm"], [h2], eps=a.rms_eps)
        return self.ffn_residual(i, x1, h2)

    def ffn_residual(self, i: int, x1: str, h2: str) -> str:
        """Layer i's output: the residual x1 plus its FFN of the normed h2 (moe.py: a shared expert's
        layer adds its two parts one at a time)."""
        down = self.post_norm(i, "ffn", self.ffn(i, h2))
        return self.add(f"layers.{i}.x_out", x1, down, self.args.hidden_size)

    def ffn(self, i: int, h2: str) -> str:
        """Layer i's FFN of the normed h2 -> its output (before any post-norm and the residual add)."""
        a, L = self.args, f"layers.{i}."
        f = a.intermediate_size
        g = self.bias(a.mlp_bias, i, "b_gate", self.matmul(L + "gate", L + "w_gate", h2), f)
        u = self.bias(a.mlp_bias, i, "b_up", self.matmul(L + "up", L + "w_up", h2), f)
        act = self.act(L + "act", f)
        self.p.op("gelu_mul" if a.hidden_act == "gelu_tanh" else "silu_mul", [g, u], [act])
        return self.bias(
            a.mlp_bias, i, "b_down", self.matmul(L + "ffn_out", L + "w_down", act), a.hidden_size
        )

    def build(self) -> Program:
        a = self.args
        x = self.act("embd", a.hidden_size)
        scale = {"scale": self.embed_scale()} if self.embed_scale() != 1.0 else {}
        self.p.op("embed", ["tok_embd", "step"], [x], **scale)
        for i in range(a.n_layers):
            x = self.layer(i, x)
        hf = self.act("out_normed", a.hidden_size)
        self.p.op("rms_norm", [x, "out_norm"], [hf], eps=a.rms_eps)
        head = "tok_embd" if a.tie_embeddings else "lm_head"  # tied: read the table, no copy
        self.p.op("matmul", [head, hf], [self.p.value("logits", (a.vocab_size,), "f32", "output")])
        # greedy programs end in argmax (fused with the lm_head); sampling ones in the GPU sampler
        nxt = self.p.value("next_token", (1,), "u32", "output")
        if self.sampling:
            self.p.op("sample", ["logits", "step"], [nxt])
        else:
            self.p.op("argmax", ["logits"], [nxt])
        self.p.meta.update(
            arch=a.arch,
            ctx=self.ctx,
            n_layers=a.n_layers,
            vocab_size=a.vocab_size,
            hidden_size=a.hidden_size,
            n_heads=a.n_heads,
            n_kv_heads=a.n_kv_heads,
            head_dim=a.head_dim,
            rope_layout=a.rope_layout,
            tie_embeddings=a.tie_embeddings,
        )
        return self.p.verify()


class LlamaBuilder(moe.MoeMixin, Builder):
    """Llama, and Mixtral as llama.cpp writes it: a GGUF `llama` with expert counts (MoE layers)."""


def _gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    # llama.cpp's llama MoE: experts of feed_forward_length, the top-k weights always renormalised
    if not key("expert_count", 0):
        return {}
    return moe.gguf_fields(key, n_layers, hidden, heads, ffn_default=key("feed_forward_length"))


ARCHITECTURE = Architecture(
    "llama",
    LlamaBuilder,
    ("LlamaForCausalLM",),
    ("llama",),
    mlp_bias=True,
    hf_defaults={"max_position_embeddings": 2048},
    gguf_rope_layout="pairs",
    gguf_implemented=frozenset({"expert_count", "expert_used_count"}),
    gguf_fields=_gguf_fields,
    layer_names=moe.MOE_NAMES,
)
