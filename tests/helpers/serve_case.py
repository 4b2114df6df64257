"""What the server tests share (tests/serve/, tests/reliability/test_serve_batch_stress.py): the
tiny model they serve, the chat they send, concurrent posts. A plain module that test files import
in place of the conftest they used to import (`from tests.serve.conftest import ...`), which put
that conftest in sys.modules a second time. The likely cause, not proven there, of the GPU run on 8
xdist workers where every tests/serve file errored at setup with `fixture 'model' not found`."""

from __future__ import annotations

import threading
import time

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
EOS_ID = 2  # <|im_end|> in the tiny tokenizer


def _no_eos(name, a):
    """The output row of EOS zeroed: greedy never picks it, so generations run to max_tokens."""
    if name == "output.weight":
        a = a.copy()
        a[EOS_ID] = 0
    return a


def tiny_serve_gguf(tmp_path_factory) -> str:
    """A tiny random Llama GGUF whose EOS is never picked (generations run to max_tokens)."""
    from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf

    d = models_dir(tmp_path_factory)
    hf = tiny_hf_model("llama", d, tied=False, max_position_embeddings=1024)
    return str(write_gguf(hf, d / "llama-untied-noeos.q8_0.gguf", "q8_0", mutate=_no_eos))


def post_all(url, bodies, timeout=120):
    """Posts every body from its own thread at once; -> [(index, status, json)] in completion order."""
    out, lock = [], threading.Lock()

    def one(i, body):
        import httpx

        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)
        with lock:
            out.append((i, r.status_code, r.json()))

    threads = [threading.Thread(target=one, args=(i, b)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
        time.sleep(0.01)  # distinct arrival times
    for t in threads:
        t.join(timeout + 10)
    assert not any(t.is_alive() for t in threads), "a client hung"
    return out
