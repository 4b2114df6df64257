"""The mixture-of-experts FFN the MoE families share (qwen3moe.py, ...): tensor names, the HF config
reader and the builder mixin that emits the block as ops (fusion/ir.py moe_*):

  rms_norm -> router matmul -> moe_topk (ids, weights) -> moe_matmul gate, moe_matmul up ->
  silu_mul -> moe_matmul down -> moe_sum (weighted by the router) -> residual add

Expert weights are one 3-D tensor per projection (experts, out, in): one binding covers every
expert and a kernel offsets by the expert id it reads on the GPU, so the step stays recorded once.
"""

from __future__ import annotations

from vkdecode.errors import ModelError
from vkdecode.models import settings

# per-layer program name -> (HF suffix, "{e}" standing for the expert index; GGUF suffix)
MOE_NAMES = {
    "router": ("mlp.gate.weight", "ffn_gate_inp.weight"),
    "exp_gate": ("mlp.experts.{e}.gate_proj.weight", "ffn_gate_exps.weight"),
    "exp_up": ("mlp.experts.{e}.up_proj.weight", "ffn_up_exps.weight"),
    "exp_down": ("mlp.experts.{e}.down_proj.weight", "ffn_down_exps.weight"),
}


def hf_sources(src: str, n_experts: int) -> list[str]:
    """The HF tensors one program weight is read from: one per expert for a stacked expert tensor."""
    return [src.replace("{e}", str(e)) for e in range(n_experts)] if "{e}" in src else [src]


def is_moe(args, i: int) -> bool:
    return args.n_experts > 0 and i not in args.dense_layers


def _int_key(cfg: dict, names: tuple[str, ...], where: str) -> int:
    """The first of `names` the config sets (transformers 5 renamed num_experts -> num_local_experts);
    two that disagree are refused."""
    found = {n: cfg[n] for n in names if cfg.get(n) is not None}
    if len(set(found.values())) > 1:
        raise ModelError(f"{where}: keys {', '.join(found)} disagree ({found})")
    if not found:
        raise ModelError(f"{where}: missing key {names[0]!r}")
    v = next(iter(found.values()))
    if type(v) is not int or v < 0:
        raise ModelError(f"{where}: key {next(iter(found))!r} must be a non-negative integer, not {v!r}")
    return v


def hf_fields(cfg: dict, where: str, shared: bool = False) -> dict:
    """The MoE fields of an HF config.json (Qwen3-MoE's keys; with `shared`, Qwen2-MoE's gated shared
    expert). Keys that would change the math and are not implemented are refused, naming the key."""
    n = _int_key(cfg, ("num_experts", "num_local_experts"), where)
    used = _int_key(cfg, ("num_experts_per_tok",), where)
    if not 0 < used <= n:
        raise ModelError(f"{where}: key 'num_experts_per_tok' = {used} must be in 1..{n} (num_experts)")
    shared_ffn = _int_key(cfg, ("shared_expert_intermediate_size",), where) if shared else 0
    if shared and not shared_ffn:
        raise ModelError(f"{where}: key 'shared_expert_intermediate_size' = 0 is not supported")
    for key in ("shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts")[shared:]:
        if cfg.get(key):
            raise ModelError(f"{where}: key {key!r} = {cfg[key]!r} (shared experts) is not supported")
    step = cfg.get("decoder_sparse_step", 1)
    if type(step) is not int or step < 1:
        raise ModelError(f"{where}: key 'decoder_sparse_step' must be a positive integer, not {step!r}")
    only = cfg.get("mlp_only_layers") or []
    if not (isinstance(only, list) and all(type(i) is int for i in only)):
        raise ModelError(f"{where}: key 'mlp_only_layers' must list layer indices, not {only!r}")
    layers = int(cfg.get("num_hidden_layers", 0))
    # transformers' Qwen3-MoE: a layer is sparse iff not in mlp_only_layers and (i + 1) % step == 0
    dense = tuple(i for i in range(layers) if i in only or (i + 1) % step)
    ffn = _int_key(cfg, ("moe_intermediate_size",), where)
    if not ffn:
        raise ModelError(f"{where}: key 'moe_intermediate_size' = 0 (experts without rows) is not supported")
    return {
        "n_experts": n,
        "n_experts_used": used,
        "expert_ffn": ffn,
        "norm_topk_prob": settings.flag(cfg, "norm_topk_prob", False, where),
        "dense_layers": dense,
        "shared_expert_ffn": shared_ffn,
    }


# GGUF keys (after "{arch}.") that change the routing, with their neutral values
GGUF_NEUTRAL = {
    "expert_gating_func": 1,  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
    "expert_weights_scale": 1.0,
    "expert_shared_count": 0,
    "expert_group_count": 0,
}


def gguf_fields(
    key, n_layers: int, hidden: int, heads: int, ffn_default=None, norm: bool = True, shared: bool = False
) -> dict:
    """The MoE fields of GGUF metadata: every layer sparse (llama.cpp's qwen3moe has no dense ones)."""
    n, used = int(key("expert_count")), int(key("expert_used_count"))
    # llama.cpp keys of other MoE routers: refused where they differ from a softmax top-k
    for name, neutral in GGUF_NEUTRAL.items():
        v = key(name, neutral)
        if shared and name == "expert_shared_count" and v == 1:  # the one gated shared expert
            continue
        if v != neutral:
            raise ModelError(f"key '{name}' = {v!r} is not supported (softmax top-k routing only)")
    if not 0 < used <= n:
        raise ModelError(f"expert_used_count {used} must be in 1..{n} (expert_count)")
    return {
        "n_experts": n,
        "n_experts_used": used,
        "expert_ffn": int(key("expert_feed_forward_length", ffn_default)),
        "norm_topk_prob": bool(key("expert_weights_norm", norm)),
        "shared_expert_ffn": int(key("expert_shared_feed_forward_length")) if shared else 0,
    }


class MoeMixin:
    """Builder hooks (models/llama.py Builder) for MoE layers; dense layers keep the plain MLP."""

    @classmethod
    def ffn_shapes(cls, args, i: int) -> dict[str, tuple[int, ...]]:
        if not is_moe(args, i):
            return super().ffn_shapes(args, i)
        h, e, f, fs = args.hidden_size, args.n_experts, args.expert_ffn, args.shared_expert_ffn
        shapes = {"router": (e, h), "exp_gate": (e, f, h), "exp_up": (e, f, h), "exp_down": (e, h, f)}
        if fs:
            shapes.update(shexp_gate=(fs, h), shexp_up=(fs, h), shexp_down=(h, fs), shexp_gate_inp=(1, h))
        return shapes

    def ffn(self, i: int, h2: str) -> str:
        a, L = self.args, f"layers.{i}."
        if not is_moe(a, i):
            return super().ffn(i, h2)
        k, f = a.n_experts_used, a.expert_ffn
        logits = self.matmul(L + "router_logits", L + "router", h2)
        ids = self.p.value(L + "expert_ids", (k,), "u32")
        weights = self.act(L + "expert_weights", k)
        self.p.op("moe_topk", [logits], [ids, weights], k=k, n_experts=a.n_experts, norm=a.norm_topk_prob)
        g = self.act(L + "exp_g", k * f)
        self.p.op("moe_matmul", [L + "exp_gate", h2, ids], [g])
        u = self.act(L + "exp_u", k * f)
        self.p.op("moe_matmul", [L + "exp_up", h2, ids], [u])
        act = self.act(L + "exp_act", k * f)
        self.p.op("silu_mul", [g, u], [act])
        d = self.act(L + "exp_out", k * a.hidden_size)
        self.p.op("moe_matmul", [L + "exp_down", act, ids], [d])
        out = self.act(L + "experts_out", a.hidden_size)
        self.p.op("moe_sum", [d, weights], [out])
        return out

    def ffn_residual(self, i: int, x1: str, h2: str) -> str:
        """With a shared expert, x1 + experts, then + the gated shared expert (transformers adds
        their sum to x1: the same sum in another order), so each add ends a matvec: the experts'
        downs (MOE_MATMUL_SUM_ADD) and the shared down (MATMUL_SIGMOID_SCALE_ADD)."""
        a, L = self.args, f"layers.{i}."
        if not (is_moe(a, i) and a.shared_expert_ffn):
            return super().ffn_residual(i, x1, h2)
        routed = self.add(L + "x_routed", x1, self.ffn(i, h2), a.hidden_size)
        return self.add(L + "x_out", routed, self.shared_expert(i, h2), a.hidden_size)

    def shared_expert(self, i: int, h2: str) -> str:
        """Qwen2-MoE's shared expert: a SwiGLU MLP every token runs, scaled by sigmoid(gate . h2)."""
        a, L = self.args, f"layers.{i}."
        g = self.matmul(L + "shexp_g", L + "shexp_gate", h2)
        u = self.matmul(L + "shexp_u", L + "shexp_up", h2)
        act = self.act(L + "shexp_act", a.shared_expert_ffn)
        self.p.op("silu_mul", [g, u], [act])
        d = self.matmul(L + "shexp_out", L + "shexp_down", act)
        gate = self.matmul(L + "shexp_gate_logit", L + "shexp_gate_inp", h2)
        out = self.act(L + "shexp_scaled", a.hidden_size)
        self.p.op("sigmoid_scale", [gate, d], [out])
        return out
