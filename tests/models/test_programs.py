"""The per-family decode Programs (llama.py, qwen2.py, qwen3.py): names, order, tied head."""

import pytest

from tests.helpers.make_models import SMALL
from vkdecode.models import build_program
from vkdecode.models.config import ModelArgs

LAYER = [
    "rms_norm",
    "matmul",
    "matmul",
    "matmul",
    "rope",
    "rope",
    "kv_write",
    "attention",
    "matmul",
    "add",
    "rms_norm",
    "matmul",
    "matmul",
    "silu_mul",
    "matmul",
    "add",
]
QWEN2 = LAYER[:2] + ["add", "matmul", "add", "matmul", "add"] + LAYER[4:]
QWEN3 = LAYER[:4] + ["rms_norm", "rms_norm"] + LAYER[4:]


def args(arch, tied=False):
    cls = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[arch]
    return ModelArgs.from_hf_config({**SMALL, "architectures": [cls], "tie_word_embeddings": tied})


@pytest.mark.parametrize("arch,layer", [("llama", LAYER), ("qwen2", QWEN2), ("qwen3", QWEN3)])
def test_op_order(arch, layer):
    p = build_program(args(arch), 32)
    kinds = [op.kind for op in p.ops]
    assert kinds == ["embed"] + layer * 2 + ["rms_norm", "matmul", "argmax"]
    assert p.meta["arch"] == arch and p.meta["ctx"] == 32 and p.meta["n_layers"] == 2


def test_value_names_and_kinds():
    p = build_program(args("qwen2"), 32, {"layers.0.wq": "q8_0", "tok_embd": "f16"})
    v = p.values
    assert v["step"].kind == "step" and v["step"].shape == (8,) and v["step"].dtype == "u32"
    assert (
        v["layers.0.wq"].dtype == "q8_0" and v["tok_embd"].dtype == "f16" and v["layers.1.wq"].dtype == "f32"
    )
    assert v["layers.0.bq"].kind == "weight" and v["layers.0.bq"].shape == (64,)
    assert v["layers.1.k_cache"].kind == "state" and v["layers.1.k_cache"].shape == (32, 32)
    assert v["logits"].kind == "output" and v["logits"].shape == (300,)
    assert v["next_token"].kind == "output" and v["next_token"].dtype == "u32"
    assert sorted(p.outputs()) == ["logits", "next_token"]
    q = next(op for op in p.ops if op.outputs == ("layers.0.q",))
    assert q.inputs == ("layers.0.wq", "layers.0.attn_in")


def test_qwen3_per_head_norm_and_rope_attrs():
    p = build_program(args("qwen3"), 16)
    qn = next(op for op in p.ops if op.outputs == ("layers.0.q_normed",))
    assert qn.inputs[1] == "layers.0.q_norm" and p.values["layers.0.q_norm"].shape == (16,)
    rope = next(op for op in p.ops if op.outputs == ("layers.0.k_rope",))
    assert rope.attrs == {"layout": "neox", "head_dim": 16, "n_heads": 2}
    assert rope.inputs[2] == "rope_freqs" and p.constants["rope_freqs"].shape == (8,)
    att = next(op for op in p.ops if op.kind == "attention")
    assert att.attrs["scale"] == pytest.approx(0.25) and att.attrs["n_kv_heads"] == 2


@pytest.mark.parametrize("tied", [False, True])
def test_tied_lm_head_reads_embedding(tied):
    p = build_program(args("llama", tied), 16)
    head = p.ops[-2]
    assert head.kind == "matmul" and head.inputs[0] == ("tok_embd" if tied else "lm_head")
    assert ("lm_head" in p.values) is not tied
