"""models/arch.py and the registry in models/__init__.py: one record per architecture, and the
lists other modules used to type out derived from the records."""

from vkdecode.lowering.coop import COOP_REFUSED_ARCHS, COOP_ROW_SCALED_ARCHS
from vkdecode.models import ARCHITECTURES
from vkdecode.models.config import ARCHS, HF_ARCHS, HF_MODEL_TYPES
from vkdecode.models.llama import Builder


def test_records_are_consistent():
    names = (
        "llama",
        "qwen2",
        "qwen3",
        "gemma3",
        "qwen3moe",
        "mixtral",
        "qwen2moe",
        "olmoe",
        "gpt-oss",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_next",
    )
    assert ARCHS == names == tuple(a.name for a in ARCHITECTURES.values())
    classes = [c for a in ARCHITECTURES.values() for c in a.hf_classes]
    types = [t for a in ARCHITECTURES.values() for t in a.hf_model_types]
    assert len(set(classes)) == len(classes) == len(HF_ARCHS) and len(set(types)) == len(types) == len(
        HF_MODEL_TYPES
    )
    # the MoE Qwens' names are llama.cpp's (GGUF); transformers spells their types qwen3_moe, qwen2_moe;
    # Qwen3.5's text models are qwen3_5_text, qwen3_5_moe_text (qwen3_5, qwen3_5_moe: multimodal wrappers)
    assert set(ARCHS) - {"qwen3moe", "qwen2moe", "gpt-oss", "qwen3_5", "qwen3_5_moe"} <= set(HF_MODEL_TYPES)
    assert {"qwen3_moe", "qwen2_moe", "gpt_oss", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next"} <= set(
        HF_MODEL_TYPES
    )
    assert all(issubclass(a.builder, Builder) for a in ARCHITECTURES.values())
    assert COOP_REFUSED_ARCHS == () and set(COOP_ROW_SCALED_ARCHS) == {"gemma3", "gpt-oss"}
