"""A GGUF of a tiny Qwen3.5 / Qwen3.5-MoE / Qwen3-Next HF dir (tests/helpers/make_models.py's), written
the way llama.cpp's converter (conversion/qwen.py: Qwen3NextModel, _LinearAttentionVReorderBase,
Qwen3_5TextModel / Qwen3_5MoeTextModel; conversion/base.py's names and keys) writes it: independent
of vkdecode's reader, so its tests check one against the other."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.helpers.make_models import _add_tokenizer, finish_gguf, hf_state

GGUF_ARCH = {"qwen3_5_text": "qwen35", "qwen3_5_moe_text": "qwen35moe", "qwen3_next": "qwen3next"}
NAMES = {  # HF suffix after model.layers.{i}. -> GGUF suffix after blk.{i}. (gguf.tensor_mapping)
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.in_proj_ba.weight": "ssm_ba.weight",
    "linear_attn.in_proj_qkvz.weight": "ssm_in.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.shared_expert_gate.weight": "ffn_gate_inp_shexp.weight",
    "mlp.shared_expert.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_expert.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_expert.down_proj.weight": "ffn_down_shexp.weight",
}


def tile(a: np.ndarray, axis: int, hk: int, r: int, dim: int) -> np.ndarray:
    """The converter's _reorder_v_heads: V heads grouped by key head -> tiled."""
    shape = list(a.shape)
    b = a.reshape(shape[:axis] + [hk, r, dim] + shape[axis + 1 :])
    return np.swapaxes(b, axis, axis + 1).reshape(shape)


def convert(
    model_dir,
    path,
    dtype: str = "f32",
    reorder: bool = True,
    plus_one: bool = True,
    neg_exp: bool = True,
    mtp: int = 0,
    metadata: dict | None = None,
) -> Path:
    """reorder / plus_one / neg_exp False leave out that converter step (for tests that must then
    see other logits); mtp: that many extra prediction layers (copies of the last layer, under
    blk.{n}.) and key nextn_predict_layers; metadata: keys to add or (None) leave out."""
    import gguf

    path = Path(path)
    if path.exists():
        return path
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    arch = GGUF_ARCH[cfg["model_type"]]
    n = cfg["num_hidden_layers"]
    interval = cfg.get("full_attention_interval", 4)
    types = [("full_attention" if (i + 1) % interval == 0 else "linear_attention") for i in range(n)]
    assert cfg["layer_types"] == types, "llama.cpp derives the layer types from full_attention_interval"
    hk, hv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv, r = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"], hv // hk
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rope = cfg.get("rope_parameters") or {}
    factor = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    keys = {
        "context_length": cfg["max_position_embeddings"],
        "embedding_length": cfg["hidden_size"],
        "block_count": n + mtp,
        "attention.head_count": cfg["num_attention_heads"],
        "attention.head_count_kv": cfg["num_key_value_heads"],
        "rope.freq_base": float(rope.get("rope_theta", 10000.0)),
        "attention.layer_norm_rms_epsilon": float(cfg["rms_norm_eps"]),
        "attention.key_length": head_dim,
        "attention.value_length": head_dim,
        "ssm.conv_kernel": cfg["linear_conv_kernel_dim"],
        "ssm.state_size": dk,
        "ssm.group_count": hk,
        "ssm.time_step_rank": hv,
        "ssm.inner_size": dv * hv,
        "full_attention_interval": interval,
        "rope.dimension_count": int(head_dim * factor),
    }
    if cfg.get("intermediate_size"):
        keys["feed_forward_length"] = cfg["intermediate_size"]
    if "num_experts" in cfg:
        assert cfg.get("norm_topk_prob", True) and not cfg.get("mlp_only_layers"), (
            "llama.cpp: sparse, renormalised"
        )
        keys |= {
            "expert_count": cfg["num_experts"],
            "expert_used_count": cfg["num_experts_per_tok"],
            "expert_feed_forward_length": cfg["moe_intermediate_size"],
            "expert_shared_feed_forward_length": cfg["shared_expert_intermediate_size"],
        }
    if mtp:
        keys["nextn_predict_layers"] = mtp
    w = gguf.GGUFWriter(str(path) + ".tmp", arch)
    for k, v in {**keys, **(metadata or {})}.items():
        if v is None:
            continue
        add = {int: w.add_uint32, float: w.add_float32, str: w.add_string}[type(v)]
        add(f"{arch}.{k}", v)
    if arch != "qwen3next":
        w.add_array(f"{arch}.rope.dimension_sections", [11, 11, 10, 0])
    _add_tokenizer(w, model_dir, "qwen2")

    state = hf_state(model_dir)
    out = {}
    for name, a in state.items():
        if name.startswith("mtp."):
            continue
        g = {
            "model.embed_tokens.weight": "token_embd.weight",
            "model.norm.weight": "output_norm.weight",
            "lm_head.weight": "output.weight",
        }.get(name)
        if g is None:
            _, _, i, rest = name.split(".", 3)
            if ".experts." in rest:  # per-expert tensors stacked (Qwen2MoeModel.modify_tensors)
                e, proj = rest.split(".")[2:4]
                g = f"blk.{i}.ffn_{proj.split('_')[0]}_exps.weight"
                out.setdefault(g, {})[int(e)] = a
                continue
            g = f"blk.{i}.{NAMES[rest]}"
            if reorder and arch != "qwen3next" and r > 1 and "linear_attn." in rest:
                if rest.endswith("in_proj_qkv.weight"):
                    a = np.concatenate([a[: 2 * hk * dk], tile(a[2 * hk * dk :], 0, hk, r, dv)])
                elif rest.endswith("in_proj_z.weight"):
                    a = tile(a, 0, hk, r, dv)
                elif rest.endswith(("in_proj_b.weight", "in_proj_a.weight", "A_log", "dt_bias")):
                    a = tile(a, 0, hk, r, 1)
                elif rest.endswith("conv1d.weight"):
                    a = a.squeeze()
                    a = np.concatenate([a[: 2 * hk * dk], tile(a[2 * hk * dk :], 0, hk, r, dv)])
                elif rest.endswith("out_proj.weight"):
                    a = tile(a, 1, hk, r, dv)
            if rest.endswith("A_log") and neg_exp:
                a = -np.exp(a)
            if "conv1d" in rest:
                a = a.squeeze()
            if rest == "mlp.shared_expert_gate.weight":
                a = a.reshape(-1)
        if plus_one and name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            a = a + np.float32(1.0)
        out[g] = a
    if arch == "qwen3next":  # in_proj_qkvz (per key head [q, k, v, z]) -> attn_qkv, attn_gate
        for i in range(n):
            a = state.get(f"model.layers.{i}.linear_attn.in_proj_qkvz.weight")
            if a is None:
                continue
            del out[f"blk.{i}.ssm_in.weight"]
            q, k, v, z = np.split(a.reshape(hk, -1, a.shape[-1]), np.cumsum([dk, dk, r * dv])[:3], axis=1)
            out[f"blk.{i}.attn_qkv.weight"] = np.concatenate([p.reshape(-1, a.shape[-1]) for p in (q, k, v)])
            out[f"blk.{i}.attn_gate.weight"] = z.reshape(-1, a.shape[-1])
    for g, a in list(out.items()):
        if isinstance(a, dict):
            out[g] = np.stack([a[e] for e in sorted(a)])
    for j in range(mtp):  # a prediction layer: the last layer's tensors again, plus its own
        for g, a in list(out.items()):
            if g.startswith(f"blk.{n - 1}."):
                out[g.replace(f"blk.{n - 1}.", f"blk.{n + j}.")] = a
        out[f"blk.{n + j}.nextn.eh_proj.weight"] = np.ones(
            (cfg["hidden_size"], 2 * cfg["hidden_size"]), np.float32
        )
    for g, a in out.items():
        a = np.ascontiguousarray(a, np.float32)
        if a.ndim == 1 or dtype == "f32" or (dtype != "f16" and a.shape[-1] % 32):
            w.add_tensor(g, a)
        elif dtype == "f16":
            w.add_tensor(g, a.astype(np.float16))
        else:
            qt = gguf.GGMLQuantizationType[dtype.upper()]
            w.add_tensor(g, gguf.quants.quantize(a, qt), raw_dtype=qt)
    return finish_gguf(w, path)
