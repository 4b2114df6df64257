"""GGUF files of Qwen3.5 (`qwen35`), Qwen3.5-MoE (`qwen35moe`) and Qwen3-Next (`qwen3next`) as
llama.cpp's converter writes them (tests/helpers/qwen35_gguf.py): the same program and logits as the
HF dir they came from, transformers' logits and greedy tokens, each undone converter step checked
by leaving it out (2 key heads, 4 value heads: the V-head reorder is not the identity), and bad
files refused."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import hf_logits, tiny_hf_model
from tests.helpers.qwen35_checks import hf_greedy, up_to_eos
from tests.helpers.qwen35_gguf import convert
from vkdecode.errors import ModelError
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

CTX = 64
TOKENS = [5, 9, 17, 33, 2, 70, 11, 4]
# llama.cpp derives the layer types from full_attention_interval (config.json leaves it out: the
# converter writes 4, so full attention in layer 3); its MoE always renormalises the top-k weights
# and has no dense layers
LAYOUT = {"layer_types": ["linear_attention"] * 3 + ["full_attention"]}
# llama.cpp's qwen35 takes the value head size from ssm.state_size (the key head's): equal here
ARCHS = {
    "qwen35": {**LAYOUT, "linear_value_head_dim": 16},
    "qwen35moe": {**LAYOUT, "linear_value_head_dim": 16},
    "qwen3next": {**LAYOUT, "norm_topk_prob": True, "mlp_only_layers": []},
}


def hf_dir(models_dir, arch: str):
    return tiny_hf_model(arch, models_dir, **ARCHS[arch])


def logits(path, tokens=TOKENS) -> np.ndarray:
    m = load_model(str(path), ctx=CTX)
    ref = Reference(m.program, m.weights, dtype=np.float64)
    return np.stack([ref.step(t, p)["logits"] for p, t in enumerate(tokens)])


@pytest.mark.parametrize("arch", list(ARCHS))
def test_gguf_matches_hf_dir_and_transformers(models_dir, arch):
    src = hf_dir(models_dir, arch)
    gg = convert(src, models_dir / f"{arch}.gguf")
    a, b = load_model(str(src), ctx=CTX), load_model(str(gg), ctx=CTX)
    assert a.args.layer_types == b.args.layer_types and a.args.linear_attn == b.args.linear_attn
    assert (a.args.rotary_dim, a.args.n_experts, a.args.shared_expert_ffn) == (
        b.args.rotary_dim,
        b.args.n_experts,
        b.args.shared_expert_ffn,
    )
    assert sorted(a.weights) == sorted(b.weights)
    got, want = logits(gg), logits(src)
    # the same program weights; only log(-(-exp(A_log))) is not bit-exact
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    hf = hf_logits(src, TOKENS)
    assert np.abs(got - hf).max() <= 2e-4 * np.abs(hf).max()


@pytest.mark.parametrize(
    "step", [{"reorder": False}, {"plus_one": False}], ids=["v_head_reorder", "norms_plus_one"]
)
def test_each_converter_step_is_undone(models_dir, step):
    """A file written without one of the converter's steps reads as another model: the reader
    really undoes each (the V-head reorder is not the identity: 4 value heads over 2 key heads)."""
    src = hf_dir(models_dir, "qwen35")
    good = logits(convert(src, models_dir / "qwen35.gguf"))
    name = "-".join(f"{k}{v}" for k, v in step.items())
    bad = logits(convert(src, models_dir / f"qwen35-{name}.gguf", **step))
    assert np.abs(bad - good).max() > 1e-2 * np.abs(good).max()


def test_ssm_a_sign(models_dir):
    """ssm_a holds -exp(A_log): a file with A_log itself (some positive) is refused."""
    src = hf_dir(models_dir, "qwen35")
    with pytest.raises(ModelError, match="ssm_a must be negative"):
        logits(convert(src, models_dir / "qwen35-noexp.gguf", neg_exp=False))


def test_prediction_layers_skipped(models_dir):
    """nextn_predict_layers: the multi-token prediction layers appended to block_count are not run."""
    src = hf_dir(models_dir, "qwen35moe")
    gg = convert(src, models_dir / "qwen35moe-mtp.gguf", mtp=1)
    m = load_model(str(gg), ctx=CTX)
    assert m.args.n_layers == 4
    np.testing.assert_array_equal(logits(gg), logits(convert(src, models_dir / "qwen35moe.gguf")))


def test_q8_0_rows_kept_quantized(models_dir, monkeypatch):
    """Q8_0 matrices whose rows are rearranged stay Q8_0 (whole blocks moved): the same logits as
    the file read with every Q8_0 tensor dequantized first (the f32 path of each view)."""
    from vkdecode.models import weights

    src = hf_dir(models_dir, "qwen35")
    gg = convert(src, models_dir / "qwen35-q8_0.gguf", dtype="q8_0")
    m = load_model(str(gg), ctx=CTX)
    assert m.weights["layers.0.lin_qkv"].dtype == "q8_0" and m.weights["layers.3.wq"].dtype == "q8_0"
    kept = logits(gg)
    monkeypatch.setattr(weights, "GGUF_KEPT", tuple(k for k in weights.GGUF_KEPT if k != "Q8_0"))
    monkeypatch.setattr(weights, "GGUF_DEQUANT", (*weights.GGUF_DEQUANT, "Q8_0"))
    np.testing.assert_array_equal(kept, logits(gg))


@pytest.mark.parametrize(
    "meta, msg",
    [
        ({"ssm.time_step_rank": 8, "ssm.inner_size": 128}, "shape"),
        ({"ssm.inner_size": 24}, "ssm.inner_size"),
        ({"ssm.group_count": None}, "missing key 'qwen35.ssm.group_count'"),
        ({"rope.dimension_count": 17}, "rope.dimension_count"),
        ({"rope.scaling.type": "yarn"}, "rope scaling"),
    ],
)
def test_bad_metadata_refused(models_dir, meta, msg):
    src = hf_dir(models_dir, "qwen35")
    name = "-".join(f"{k}{v}" for k, v in meta.items())
    gg = convert(src, models_dir / f"qwen35-bad-{name}.gguf", metadata=meta)
    with pytest.raises(ModelError, match=msg):
        logits(gg)


def test_truncated_refused(models_dir, tmp_path):
    src = hf_dir(models_dir, "qwen35")
    data = convert(src, models_dir / "qwen35.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(ModelError):
        logits(cut)


@pytest.mark.parametrize("arch", ["qwen35", "qwen3next"])
def test_greedy_generate_matches_transformers(device, models_dir, arch):
    import torch
    import transformers

    import vkdecode

    src = hf_dir(models_dir, arch)
    gg = convert(src, models_dir / f"{arch}.gguf")
    hf = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    ids = [5, 9, 17, 33, 2, 70, 11]
    with vkdecode.load(str(gg), device=device, ctx=CTX) as model:
        got = [r.token for r in model.stream_generate(prompt_ids=ids, max_tokens=8)]
    up_to_eos(got, hf_greedy(hf, ids, 8))
