"""What one rope dict means (an HF rope_scaling / rope_parameters object, once settings.py has
chosen which one is read) and llama.cpp's rope_freqs tensor. vkdecode/models/rope.py turns what
these return into the inverse-frequency tables."""

from __future__ import annotations

from vkdecode.errors import ModelError
from vkdecode.models.rope import LLAMA3_KEYS

ROPE_TYPES = ("default", "llama3", "linear", "yarn")  # the ones rope.py builds a table for


def rope_scaling(params: dict, where: str, key: str) -> dict | None:
    """A rope_scaling / rope_parameters object -> None (plain rope) or a normalised scaling dict;
    a type we build no table for (dynamic, longrope, ...) is refused."""
    kind = params.get("rope_type", params.get("type", "default"))  # transformers' setdefault
    if not isinstance(kind, str):
        raise ModelError(f"{where}: key {key + '.rope_type'!r} must be a string, not {kind!r}")
    if kind not in ROPE_TYPES:
        raise ModelError(
            f"{where}: rope scaling {kind!r} (key {key!r}) is not supported "
            f"(supported: {', '.join(ROPE_TYPES)})"
        )
    if kind == "default":
        return None
    if kind == "yarn":
        return _yarn(params, where, key)
    need = ("factor",) if kind == "linear" else LLAMA3_KEYS
    missing = [
        k for k in need if not isinstance(params.get(k), (int, float)) or isinstance(params.get(k), bool)
    ]
    if missing:
        raise ModelError(
            f"{where}: rope scaling {kind!r} (key {key!r}) needs numbers for {', '.join(missing)}"
        )
    vals = {k: float(params[k]) for k in need}
    if vals["factor"] <= 0 or (
        kind == "llama3"
        and (
            vals["original_max_position_embeddings"] <= 0
            or vals["low_freq_factor"] <= 0
            or vals["high_freq_factor"] <= vals["low_freq_factor"]
        )
    ):
        raise ModelError(f"{where}: rope scaling {kind!r} (key {key!r}) has out-of-range values {vals}")
    if params.get("attention_factor") not in (None, 1, 1.0):
        raise ModelError(f"{where}: rope attention_factor {params['attention_factor']!r} is not supported")
    return {"rope_type": kind, **vals}


def _yarn(params: dict, where: str, key: str) -> dict:
    """YaRN as transformers reads it: factor (required here: a null one would mean the ratio of
    the contexts), beta_fast / beta_slow (absent, null or 0: 32 / 1), truncate (default true),
    attention_factor or DeepSeek's mscale / mscale_all_dim. original_max_position_embeddings is
    settings.py's to fill in."""

    def refuse(what: str):
        raise ModelError(f"{where}: rope scaling 'yarn' (key {key!r}) needs {what}")

    def num(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0

    out = {"rope_type": "yarn", "truncate": params.get("truncate", True)}
    if not isinstance(out["truncate"], bool):
        refuse(f"truncate true or false, not {out['truncate']!r}")
    defaults = {"factor": None, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": None}
    for name, default in defaults.items():
        v = params.get(name) or default  # transformers: `get(name) or default`
        if not num(v):
            refuse(f"a positive number for {name}, not {params.get(name)!r}")
        out[name] = float(v)
    for name in ("attention_factor", "mscale", "mscale_all_dim"):
        if params.get(name) is not None:
            if not num(params[name]):
                refuse(f"a positive number for {name}, not {params[name]!r}")
            out[name] = float(params[name])
    return out


def gguf_rope_factors(reader, path: str) -> tuple[float, ...] | None:
    """llama.cpp's per-frequency divisors (Llama 3.1+ files): angle = pos * base^(-2i/d) / f[i]."""
    t = next((t for t in reader.tensors if t.name == "rope_freqs.weight"), None)
    if t is None:
        return None
    if t.tensor_type.name != "F32":
        raise ModelError(f"{path}: tensor 'rope_freqs.weight' has type {t.tensor_type.name}, expected F32")
    return tuple(float(x) for x in t.data.reshape(-1))
