"""Qwen3-Next (models/qwen3next.py): its config read (transformers' defaults) and refused, its fused
projections regrouped as transformers' fix_query_key_value_ordering does (and a plain split caught),
its step against transformers (the reference, with experts renormalised or not and dense layers,
then every mode of the GPU path against the reference), its multi-token prediction heads left
alone, fused experts, prompt chunks against the token path, the user's path against transformers'
greedy generation, and the paths refused for a recurrent state (tests/helpers/qwen35_checks.py)."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.make_models import (
    MOE_OVERRIDES,
    QWEN35,
    SMALL,
    fused_experts_hf_model,
    hf_logits,
    hf_state,
    tiny_hf_model,
)
from vkdecode.errors import ModelError
from vkdecode.models import ARCHITECTURES, build_program
from vkdecode.models.config import ModelArgs
from vkdecode.models.loader import load_model
from vkdecode.models.qwen3next import hf_views, regroup
from vkdecode.models.qwen35 import FULL, LINEAR
from vkdecode.reference import Reference

CTX = 64
TOKENS = [5, 9, 17, 33, 2, 70, 11, 4, 200, 8]
# 4 experts of 32 rows (2 per token, weights not renormalised), a shared expert of 48, layer 1 dense
EXPERTS = MOE_OVERRIDES["qwen3next"]
# another grouping (4 key heads of 3 value heads), sparse every 2nd layer, renormalised, tied head
OTHER = {
    "decoder_sparse_step": 2,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 12,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 4,
}


def config(**kw) -> dict:
    cfg = {
        **SMALL,
        **QWEN35,
        **EXPERTS,
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        **kw,
    }
    return {k: v for k, v in cfg.items() if v is not None}


def hf_config(cfg: dict):
    import transformers

    return transformers.Qwen3NextConfig(
        **{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    )


@pytest.fixture(scope="module")
def tiny(models_dir):
    path = tiny_hf_model("qwen3next", models_dir)
    return path, load_model(str(path), ctx=CTX)


def test_config_read():
    a = ModelArgs.from_hf_config(config())
    assert (a.arch, a.rotary_dim, a.linear_attn, a.layer_types) == (
        "qwen3_next",
        8,
        (2, 4, 16, 8, 4),
        (LINEAR, LINEAR, FULL, LINEAR),
    )
    assert (a.n_experts, a.n_experts_used, a.expert_ffn, a.shared_expert_ffn) == (4, 2, 32, 48)
    assert (a.norm_topk_prob, a.dense_layers, a.intermediate_size) == (False, (1,), 96)
    b = ModelArgs.from_hf_config(config(**OTHER))
    assert (b.norm_topk_prob, b.dense_layers, b.linear_attn) == (True, (0, 2), (4, 12, 8, 4, 4))


def test_config_defaults_are_transformers():
    """Keys a config.json leaves out take Qwen3NextConfig's values: renormalised top-k, 2 kv heads,
    a quarter of head_dim rotated, a full layer every 4th; and Qwen's own config.json (4.57 keys:
    top-level rope_theta and partial_rotary_factor, rope_scaling null) reads as transformers does."""
    drop = {k: None for k in ("norm_topk_prob", "num_key_value_heads", "rope_parameters", "layer_types")}
    cfg = config(**drop, num_hidden_layers=8)
    a = ModelArgs.from_hf_config(cfg)
    hf = hf_config(cfg)
    assert (a.norm_topk_prob, a.n_kv_heads) == (hf.norm_topk_prob, hf.num_key_value_heads) == (True, 2)
    assert a.rotary_dim == int(16 * hf.rope_parameters["partial_rotary_factor"]) == 4
    assert list(a.layer_types) == hf.layer_types == [LINEAR, LINEAR, LINEAR, FULL] * 2
    shipped = {
        **config(rope_parameters=None, layer_types=None, mlp_only_layers=[], norm_topk_prob=True),
        "rope_theta": 1e7,
        "partial_rotary_factor": 0.25,
        "rope_scaling": None,
        "full_attention_interval": 4,
        "use_sliding_window": False,
        "decoder_sparse_step": 1,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
    }
    s = ModelArgs.from_hf_config(shipped)
    assert (s.rope_theta, s.rotary_dim, s.dense_layers, s.layer_types[3]) == (1e7, 4, (), FULL)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "yarn|rope"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "linear|rope"),
        ({"layer_types": ["sliding_attention"] * 4}, "layer_types"),
        ({"linear_num_value_heads": 3}, "linear attention"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
        ({"num_experts": 0}, "num_experts_per_tok"),
        ({"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size"),
        ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
    ],
)
def test_config_refused(kw, msg):
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config(config(**kw))


@pytest.mark.parametrize("kw", [{}, OTHER], ids=["2x2", "4x3"])
def test_regrouped_as_transformers(kw):
    """in_proj_qkvz / in_proj_ba rows numbered, run through transformers' own
    fix_query_key_value_ordering: lin_qkv is its q, k, v (the conv's channels), lin_z its z, lin_b
    and lin_a its b and a, row for row."""
    import torch
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    cfg = config(**kw)
    args = ModelArgs.from_hf_config(cfg)
    hf = Qwen3NextGatedDeltaNet(hf_config(cfg), 0)
    views = hf_views(args)
    rows = {"qkvz": hf.in_proj_qkvz.out_features, "ba": hf.in_proj_ba.out_features}
    ids = {k: torch.arange(n, dtype=torch.float64)[None, None] for k, n in rows.items()}
    q, k, v, z, b, a = (
        t.reshape(-1).numpy() for t in hf.fix_query_key_value_ordering(ids["qkvz"], ids["ba"])
    )
    want = {"lin_qkv": np.concatenate([q, k, v]), "lin_z": z, "lin_b": b, "lin_a": a}
    shapes = ARCHITECTURES["qwen3_next"].builder.weight_shapes(args)
    for name, w in want.items():
        view, shape = views[name], shapes[f"layers.0.{name}"]
        stored = view.stored(shape)
        assert stored == (rows["qkvz" if "qkvz" in view.source else "ba"], args.hidden_size), name
        stored_ids = np.repeat(np.arange(stored[0], dtype=np.float64)[:, None], stored[1], axis=1)
        got = view.view(stored_ids)
        assert got.shape == shape and (got == got[:, :1]).all(), name
        np.testing.assert_array_equal(got[:, 0], w, err_msg=name)


def test_reference_matches_transformers(tiny):
    """Also: layer 1 dense, the routed layers' top-k weights not renormalised."""
    path, m = tiny
    want = hf_logits(path, TOKENS)
    ref = Reference(m.program, m.weights, dtype=np.float64)
    # the same weights with the top-k weights renormalised: must leave transformers' logits
    renorm = Reference(build_program(replace(m.args, norm_topk_prob=True), CTX), m.weights, dtype=np.float64)
    picked, sums, off = set(), [], 0.0
    for p, t in enumerate(TOKENS):
        got = ref.step(t, p)["logits"]
        # transformers' delta rule runs in float32 whatever the model's dtype
        assert np.abs(got - want[p]).max() <= 2e-4 * np.abs(want[p]).max(), f"position {p}"
        assert "layers.1.expert_ids" not in ref.values  # the dense layer
        picked.add(tuple(sorted(ref.values["layers.0.expert_ids"].tolist())))
        sums.append(ref.values["layers.0.expert_weights"].sum())
        off = max(off, np.abs(renorm.step(t, p)["logits"] - want[p]).max() / np.abs(want[p]).max())
    assert len(picked) >= 3 and max(sums) < 1 and min(sums) < 0.99 and off > 1e-2


def test_other_grouping_and_sparse_step(models_dir):
    """4 key-head groups of 3 value heads, experts every 2nd layer (renormalised), a tied head."""
    path = tiny_hf_model("qwen3next", models_dir, tied=True, **OTHER)
    m = load_model(str(path), ctx=CTX)
    assert (m.args.dense_layers, m.args.tie_embeddings) == ((0, 2), True)
    want = hf_logits(path, TOKENS)
    ref = Reference(m.program, m.weights, dtype=np.float64)
    for p, t in enumerate(TOKENS):
        got = ref.step(t, p)["logits"]
        assert np.abs(got - want[p]).max() <= 2e-4 * np.abs(want[p]).max(), f"position {p}"
        assert abs(ref.values["layers.1.expert_weights"].sum() - 1.0) < 1e-9


def test_a_plain_split_is_caught(tiny, monkeypatch):
    """in_proj_qkvz / in_proj_ba read as if not interleaved (one group: Qwen3.5's order): the logits
    leave transformers' far behind, so the test above can fail."""
    path, _ = tiny
    arch = ARCHITECTURES["qwen3_next"]

    def plain(args):
        hk, hv, dk, dv, _ = args.linear_attn
        views = hf_views(args)
        for name, group, part in (
            ("lin_qkv", (2 * hk * dk + hv * dv, hv * dv), 0),
            ("lin_z", (2 * hk * dk + hv * dv, hv * dv), 1),
            ("lin_b", (hv, hv), 0),
            ("lin_a", (hv, hv), 1),
        ):
            views[name] = replace(views[name], view=regroup(group, (part,)))
        return views

    monkeypatch.setitem(ARCHITECTURES, "qwen3_next", replace(arch, hf_views=plain))
    m = load_model(str(path), ctx=CTX)
    want = hf_logits(path, TOKENS[:4])
    ref = Reference(m.program, m.weights, dtype=np.float64)
    err = max(
        np.abs(ref.step(t, p)["logits"] - want[p]).max() / np.abs(want[p]).max()
        for p, t in enumerate(TOKENS[:4])
    )
    assert err > 1e-2


def test_mtp_heads_and_fused_experts(tiny, models_dir):
    """Qwen's checkpoints carry multi-token prediction heads (mtp.*) that transformers does not
    load: vkdecode leaves them too (another stray tensor is still refused). Experts stored fused
    (gate_up_proj, down_proj) read as the per-expert ones."""
    from safetensors.numpy import load_file, save_file

    path, m = tiny
    rng = np.random.default_rng(0)
    extras = {
        "mtp": {
            "mtp.fc.weight": (64, 128),
            "mtp.norm.weight": (64,),
            "mtp.layers.0.mlp.gate.weight": (4, 64),
        },
        "stray": {"model.layers.0.linear_attn.extra.weight": (4, 64)},
    }
    dirs = {}
    for kind, tensors in extras.items():
        d = dirs[kind] = models_dir / f"hf-qwen3next-{kind}"
        if not d.exists():
            shutil.copytree(path, d)
            state = load_file(d / "model.safetensors")
            state.update({n: rng.standard_normal(s).astype(np.float32) for n, s in tensors.items()})
            save_file(state, str(d / "model.safetensors"))
    # the same weights (a float's last bits may move with the tensors' places in the file)
    np.testing.assert_allclose(
        hf_logits(dirs["mtp"], TOKENS[:3]), hf_logits(path, TOKENS[:3]), rtol=0, atol=1e-4
    )
    with pytest.raises(ModelError, match="extra"):
        load_model(str(dirs["stray"]), ctx=CTX)
    fused = fused_experts_hf_model(dirs["mtp"], models_dir / "hf-qwen3next-fused")
    assert "model.layers.0.mlp.experts.gate_up_proj" in hf_state(fused)
    for d in (dirs["mtp"], fused):
        other = load_model(str(d), ctx=CTX)
        assert other.weights.keys() == m.weights.keys()
        for n in m.weights:
            np.testing.assert_array_equal(other.weights[n].dequantize(), m.weights[n].dequantize(), err_msg=n)
