"""The long run of the config property (tests/models/test_config_property.py runs a small sample in
CI): random config.json files mixing every math-changing key and its spellings, on tiny random
models built by transformers; vkdecode must give transformers' next-token ids and logits, or refuse
with a ModelError. Prints the count of examples, how many ran exact and how many were refused (by
reason), and stops at the first failure with Hypothesis' shrunk example. CPU only.

    .venv/bin/python scripts/config_property.py --examples 2000 [--seed N] [--arch gemma3]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", type=int, default=500)
    p.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: random)")
    p.add_argument("--arch", action="append", default=None, help="only these architectures")
    p.add_argument("--models", default=None, help="cache dir of the tiny models (default: a temp dir)")
    a = p.parse_args(argv)

    import torch
    import transformers
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from tests.helpers.config_oracle import ARCHS, TF_RUNS, check, checkpoint, configs, structures, variant

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(1)  # tiny models: threads only contend (run several seeds side by side)
    models = Path(a.models or tempfile.mkdtemp(prefix="config-property-"))
    models.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="config-property-run-"))
    counts: collections.Counter = collections.Counter()
    n = [0]
    t0 = time.time()

    @settings(
        max_examples=a.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def prop(data):
        s = data.draw(structures(tuple(a.arch or ARCHS)), label="structure")
        src = checkpoint(s, models)
        cfg = data.draw(configs(json.loads((src / "config.json").read_text()), s), label="config")
        n[0] += 1
        out = check(variant(src, cfg, work / f"m{n[0]}"))
        # a refusal by its kind: the message without the path and the values; "refused+" where
        # transformers runs the config (vkdecode does not implement something it asks for)
        kind = out
        if out != "exact":
            flag = "refused+: " if out.endswith(TF_RUNS) else "refused: "
            kind = flag + re.sub(r"\S*config\.json: |/\S+: |\d\S*", "", out[9:].removesuffix(TF_RUNS))[:100]
        counts[(s["arch"], kind)] += 1
        if n[0] % 100 == 0:
            print(f"  {n[0]} examples, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)

    if a.seed is not None:
        prop = seed(a.seed)(prop)
    failed = None
    try:
        prop()
    except Exception as e:  # noqa: BLE001 - report it with the counts so far
        failed = e
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if a.models is None:
            shutil.rmtree(models, ignore_errors=True)
    exact = sum(v for (_, k), v in counts.items() if k == "exact")
    runs = sum(v for (_, k), v in counts.items() if k.startswith("refused+"))
    print(
        f"{n[0]} examples in {time.time() - t0:.0f} s: {exact} exact, {n[0] - exact} refused "
        f"({runs} of them configs transformers runs: refused+)"
    )
    for (arch, kind), v in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {v:6d}  {arch:7s} {kind}")
    if failed is not None:
        print(f"FAILED: {type(failed).__name__}: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
