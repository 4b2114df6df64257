"""transformers' answers for the real Gemma-3-270M GGUF, computed in a child process and kept on
disk: loading the GGUF through transformers takes ~50 s and ~2.7 GB on 2 cores, so the test module
reads them from the cache when the file, transformers' version and the question are unchanged,
and the child gives its memory back when it exits (the suite's peak stays near one module's).

Run as `python -m tests.helpers.gemma_oracle GGUF QUESTION.json OUT.json`."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT


def _answer(gguf: Path, question: dict) -> dict:
    import torch
    import transformers

    kw = {"gguf_file": gguf.name}
    tok = transformers.AutoTokenizer.from_pretrained(gguf.parent, **kw)
    ids = {t: tok(t)["input_ids"] for t in question["texts"]}
    special = {"bos": tok.bos_token_id, "end_of_turn": tok.convert_tokens_to_ids("<end_of_turn>")}
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, dtype=torch.float32, attn_implementation="eager", **kw
    ).eval()
    greedy = {}
    with torch.no_grad():
        for p in question["prompts"]:
            x = tok(p, return_tensors="pt")["input_ids"]
            out = model.generate(
                x, max_new_tokens=question["new_tokens"], do_sample=False, top_p=None, top_k=None
            )
            greedy[p] = out[0, x.shape[1] :].tolist()
    return {"ids": ids, "special": special, "greedy": greedy}


def oracle(gguf: Path, question: dict, cache: Path) -> dict:
    """{"ids": {text: ids}, "special": {...}, "greedy": {prompt: ids}} for `question`
    ({"texts", "prompts", "new_tokens"}), from `cache` when already answered."""
    import transformers

    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    digest.update(transformers.__version__.encode())
    digest.update(json.dumps(question, sort_keys=True).encode())
    out = cache / f"gemma3-oracle-{digest.hexdigest()[:16]}.json"
    if not out.exists():
        cache.mkdir(parents=True, exist_ok=True)
        q = out.with_suffix(".question.json")
        q.write_text(json.dumps(question))
        cmd = [sys.executable, "-m", "tests.helpers.gemma_oracle", str(gguf), str(q), str(out)]
        subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(out.read_text())


if __name__ == "__main__":
    gguf, question, dest = (Path(a) for a in sys.argv[1:4])
    answer = _answer(gguf, json.loads(question.read_text()))
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(json.dumps(answer))
    tmp.replace(dest)  # whole or absent: an interrupted run leaves no half answer behind
