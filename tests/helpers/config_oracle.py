"""Random configs that mix every math-changing key and its spellings, and the oracle they are held
to: vkdecode reads a config.json the way transformers 5 does (same next-token ids and logits over a
sequence), or refuses it with a ModelError. Used by tests/models/test_config_property.py (a small
sample in CI) and scripts/config_property.py (the long run).

A config is drawn in two parts: the checkpoint's structure (architecture, stored biases, head_dim,
kv heads, and whether lm_head.weight is absent, equal to the embedding or different) picks a tiny
random model built by transformers (cached); then config.json is rewritten with rope forms (v5
rope_parameters, v4 rope_theta + rope_scaling, both at once, per layer type or flat, `type` or
`rope_type`), tying, bias flags, Gemma windows and bases, norms, head_dim and scaling keys, each
present, absent or contradicting another spelling. Nothing here knows what the right reading is:
transformers, loading the very directory, is the oracle.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from tests.helpers.make_models import tiny_hf_model

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
SEQ = [5, 17, 42, 99, 7, 250, 3, 64, 11, 200, 31, 8]  # past the shortest Gemma windows drawn
THETAS = (100.0, 10000.0, 500000.0)
ABSENT = object()  # a key left out of config.json
TF_RUNS = " [transformers runs it]"  # ends a refusal of a config transformers can run


# ---------------------------------------------------------------- the checkpoint


@st.composite
def structures(draw, archs=ARCHS) -> dict:
    arch = draw(st.sampled_from(archs))
    return {
        "arch": arch,
        "attention_bias": arch in ("llama", "qwen3") and draw(st.integers(0, 2)) == 0,
        "mlp_bias": arch == "llama" and draw(st.integers(0, 2)) == 0,
        "head_dim": _pick(draw, (16,), (8, 32)),
        "num_key_value_heads": draw(st.sampled_from((2, 4))),
        "head": _pick(draw, ("differs", "absent"), ("equal",)),  # lm_head.weight stored
    }


def checkpoint(s: dict, models_dir) -> Path:
    """The tiny random model of structure s (cached under models_dir)."""
    over = {k: s[k] for k in ("head_dim", "num_key_value_heads")}
    if s["attention_bias"]:
        over["attention_bias"] = True
    if s["mlp_bias"]:
        over["mlp_bias"] = True
    src = tiny_hf_model(s["arch"], models_dir, **over)  # untied: stores its own lm_head
    if s["head"] == "differs":
        return src
    dst = Path(models_dir) / f"{src.name}-head-{s['head']}"
    if not (dst / "config.json").exists():
        from safetensors.numpy import load_file, save_file

        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp)
        state = load_file(tmp / "model.safetensors")
        if s["head"] == "absent":
            del state["lm_head.weight"]
        else:
            state["lm_head.weight"] = state["model.embed_tokens.weight"].copy()
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        os.replace(tmp, dst)
    return dst


# ---------------------------------------------------------------- config.json


def _pick(draw, common, rare=(), odds: int = 6):
    """One of `common` (odds - 1 times in odds), else one of `rare`; ABSENT leaves a key out."""
    if rare and draw(st.integers(0, odds - 1)) == 0:
        return draw(st.sampled_from(tuple(rare)))
    return draw(st.sampled_from(tuple(common)))


@st.composite
def rope_dicts(draw, scaled: bool = True) -> dict:
    """One rope dict, its type spelled rope_type, type, both or neither."""
    kind = _pick(
        draw,
        ("default", "linear", "llama3", "yarn") if scaled else ("default",),
        ("dynamic", "longrope", "linear"),
    )
    spell = _pick(draw, ("rope_type",), ("type", "both", "none"), odds=3)
    d = {}
    if spell in ("rope_type", "both"):
        d["rope_type"] = kind
    if spell in ("type", "both"):
        d["type"] = draw(st.sampled_from((kind, "default", "linear"))) if spell == "both" else kind
    theta = _pick(draw, THETAS, (ABSENT,))
    if theta is not ABSENT:
        d["rope_theta"] = theta
    if kind != "default" or draw(st.integers(0, 5)) == 0:
        d["factor"] = draw(st.sampled_from((2.0, 4.0, 8.0)))
    if kind == "llama3":
        d.update(low_freq_factor=1.0, high_freq_factor=4.0)
    if kind == "yarn":  # transformers' defaults or gpt-oss's / DeepSeek's spellings
        for key, values in (
            ("truncate", (False, True)),
            ("beta_fast", (16.0, 0)),
            ("attention_factor", (0.8,)),
        ):
            v = _pick(draw, (ABSENT,), values, odds=3)
            if v is not ABSENT:
                d[key] = v
    if kind in ("llama3", "yarn"):
        omp = _pick(draw, (16, 32), (ABSENT,))
        if omp is not ABSENT:
            d["original_max_position_embeddings"] = omp
    if draw(st.integers(0, 19)) == 0:
        d["partial_rotary_factor"] = draw(st.sampled_from((1.0, 0.5)))
    return d


@st.composite
def rope_keys(draw, arch: str) -> dict:
    """rope_theta / rope_parameters / rope_scaling (and Gemma's rope_local_base_freq), in any mix:
    each form is common for the architectures that write it, the others rare."""
    out = {"rope_theta": _pick(draw, (ABSENT,) + THETAS), "rope_scaling": ABSENT, "rope_parameters": ABSENT}
    forms = ("v5", "v4", "both") if arch != "gemma3" else ("per-layer", "v4", "per-layer-partial")
    rare = ("absent", "null", "empty", "flat", "per-layer", "per-layer-partial", "both")
    form = _pick(draw, forms, rare)
    if form == "null":
        out["rope_parameters"] = None
    elif form == "empty":
        out["rope_parameters"] = {}
    elif form in ("v5", "flat", "both"):
        out["rope_parameters"] = draw(rope_dicts())
    elif form.startswith("per-layer"):
        kinds = ["full_attention", "sliding_attention"]
        if form.endswith("partial"):
            kinds = [draw(st.sampled_from(kinds))]
        out["rope_parameters"] = {}
        for k in kinds:
            out["rope_parameters"][k] = draw(rope_dicts(scaled=k == "full_attention" or draw(st.booleans())))
    if form in ("v4", "both"):
        out["rope_scaling"] = (
            _pick(draw, (ABSENT,), (None, {})) if draw(st.booleans()) else draw(rope_dicts())
        )
    elif draw(st.integers(0, 9)) == 0:
        out["rope_scaling"] = draw(rope_dicts())
    if arch == "gemma3":
        out["rope_local_base_freq"] = _pick(draw, (ABSENT, 100.0, 10000.0, 50000.0))
    out["original_max_position_embeddings"] = _pick(draw, (ABSENT,), (16, 32), odds=8)
    return out


@st.composite
def configs(draw, base: dict, s: dict) -> dict:
    """base (the checkpoint's saved config.json) with its math-changing keys redrawn; "keep"
    leaves the saved value."""
    arch = s["arch"]
    cfg = dict(base)
    for k in ("rope_theta", "rope_parameters", "rope_scaling"):
        cfg.pop(k, None)
    over = draw(rope_keys(arch))
    # mostly a flag the checkpoint can satisfy: tied where it stores no head
    over["tie_word_embeddings"] = (
        _pick(draw, (True,), (False, ABSENT)) if s["head"] == "absent" else _pick(draw, (True, False, ABSENT))
    )
    over["rms_norm_eps"] = _pick(draw, ("keep", 0.5), (ABSENT, 1e-6))
    over["head_dim"] = _pick(draw, ("keep",), (ABSENT,))
    over["num_key_value_heads"] = _pick(draw, ("keep",), (ABSENT,))
    over["max_position_embeddings"] = _pick(draw, ("keep", 32, 64), (ABSENT,))
    over["attention_bias"] = _pick(draw, ("keep",), (True, False, ABSENT))
    if arch == "llama":
        over["mlp_bias"] = _pick(draw, ("keep",), (True, False, ABSENT))
    over["partial_rotary_factor"] = _pick(draw, (ABSENT,), (1.0, 0.5), odds=10)
    if arch == "gemma3":
        over["sliding_window"] = _pick(draw, (2, 3, 6, 64), (ABSENT, None))
        over["query_pre_attn_scalar"] = _pick(draw, ("keep", 16), (ABSENT,))
        over["hidden_activation"] = _pick(draw, ("keep",), (ABSENT, "gelu"))
        over["hidden_act"] = _pick(draw, (ABSENT,), ("silu", "gelu_pytorch_tanh"))
        layout = _pick(draw, ("keep", "list"), ("absent", "pattern"))
        if layout != "keep":
            over["layer_types"] = ABSENT
        if layout == "pattern":
            over["sliding_window_pattern"] = draw(st.sampled_from((1, 2, 3)))
        elif layout == "list":
            over["layer_types"] = draw(
                st.lists(st.sampled_from(("sliding_attention", "full_attention")), min_size=2, max_size=2)
            )
    else:
        over["hidden_act"] = _pick(draw, ("keep",), ("swish", ABSENT, "gelu"))
    for k, v in over.items():
        if v is ABSENT:
            cfg.pop(k, None)
        elif not (isinstance(v, str) and v == "keep"):
            cfg[k] = v
    return cfg


def variant(src: Path, cfg: dict, dst: Path) -> Path:
    """A model dir: src's weights and tokenizer (linked) with cfg as config.json."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "config.json" and not (dst / f.name).exists():
            os.symlink(f, dst / f.name)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


# ---------------------------------------------------------------- the oracle


def transformers_logits(path) -> tuple[np.ndarray | None, str]:
    """(logits over SEQ, "") or (None, why transformers cannot run it as the checkpoint says:
    an exception, or weights it would initialise at random)."""
    import torch
    import transformers

    try:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
        )
        if info.get("missing_keys") or info.get("mismatched_keys"):
            return None, f"missing / mismatched weights {sorted(info['missing_keys'])[:2]}"
        with torch.no_grad():
            out = model.eval()(torch.tensor([SEQ]), use_cache=False)
        return out.logits[0].float().numpy(), ""
    except Exception as e:  # noqa: BLE001 - any failure: transformers has no answer for it
        return None, f"{type(e).__name__}: {e}"


def vkdecode_logits(path) -> tuple[np.ndarray | None, str]:
    """(logits over SEQ from vkdecode's numpy oracle of the decode program, "") or (None, the
    ModelError's message). Any other exception propagates: that is a bug."""
    from vkdecode.errors import ModelError
    from vkdecode.models import build_program
    from vkdecode.models.weights import load_weights
    from vkdecode.reference import Reference

    try:
        args, weights, _ = load_weights(str(path))
    except ModelError as e:
        return None, str(e)
    ref = Reference(build_program(args, len(SEQ), {k: w.dtype for k, w in weights.items()}), weights)
    return np.array([ref.step(t, pos)["logits"] for pos, t in enumerate(SEQ)]), ""


def check(path) -> str:
    """The property, for one model dir: "exact", "refused: <message>" (with " [transformers runs
    it]" where it does), or an AssertionError saying how vkdecode and transformers differ."""
    ours, refusal = vkdecode_logits(path)
    theirs, failure = transformers_logits(path)
    cfg = (Path(path) / "config.json").read_text()
    if ours is None:
        assert str(path) in refusal and "vkdecode bug" not in refusal, refusal
        return f"refused: {refusal}" + (TF_RUNS if theirs is not None else "")
    assert theirs is not None, f"vkdecode runs a config transformers cannot ({failure}):\n{cfg}"
    ids_tf, ids_vk = theirs.argmax(axis=1), ours.argmax(axis=1)
    top2 = np.sort(theirs, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-3 * np.abs(theirs).max()  # not a near-tie
    err = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert (ids_tf == ids_vk)[clear].all() and err <= 2e-4, (
        f"different from transformers: ids {ids_vk.tolist()} vs {ids_tf.tolist()}, "
        f"logits rel err {err:.2e}\n{cfg}"
    )
    return "exact"
