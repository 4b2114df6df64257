"""Activations sharing memory by lifetime (executors/alias.py, MemoryPlan.place_activations): the
planning on made-up call lists, and on a real prompt chunk: the same barriers as without aliasing,
less memory, the same bits out, and no hazard under the validation layer's synchronization checks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fusion.chunk import TOKENS, chunk_program
from tests.helpers.make_models import tiny_hf_model
from vkdecode.executors import make_executor
from vkdecode.executors.alias import Lifetime, assign_slots, epochs, lifetimes
from vkdecode.executors.plan import barriers_before
from vkdecode.executors.prefill import chunk_executor
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps
from vkdecode.models.loader import load_model


def call(reads=(), writes=()) -> KernelCall:
    b = tuple(Binding(n) for n in (*reads, *writes))
    return KernelCall("k", (), b, tuple(range(len(reads), len(b))), (1, 1, 1))


def test_lifetimes_count_barrier_epochs_and_carried_values():
    calls = [call((), ("a",)), call(("a",), ("b",)), call(("c",), ("d",)), call(("b", "d"), ("c",))]
    bars = barriers_before(calls)
    assert bars == [False, True, False, True] and epochs(bars) == [0, 1, 1, 2]
    life = lifetimes(calls, bars, {"a", "b", "c", "d"})
    assert life["a"] == (0, 1) and life["b"] == (1, 2) and life["d"] == (1, 2)
    assert life["c"] == (0, 2)  # read before its write: the previous step's value, live throughout


def test_slots_are_reused_only_across_a_barrier_and_grow_to_fit():
    # a: epochs 0-1, b: 1-2, c: 2-3, d: 3-3 (larger): c cannot take a's slot (a ends in 1 < 2: it can)
    life = {n: Lifetime(*e) for n, e in {"a": (0, 1), "b": (1, 2), "c": (2, 3), "d": (3, 3)}.items()}
    slot, sizes = assign_slots(life, {"a": 8, "b": 8, "c": 8, "d": 32})
    assert slot["c"] == slot["a"] != slot["b"]
    assert slot["d"] == slot["b"] and sizes[slot["d"]] == 32  # b ended in 2 < 3: grown to d
    assert len(sizes) == 2
    slot, _ = assign_slots({"a": Lifetime(0, 2), "b": Lifetime(2, 3)}, {"a": 8, "b": 8})
    assert slot["a"] != slot["b"]  # same epoch: no barrier between a's reads and b's writes


@pytest.fixture(scope="module")
def tiny(models_dir):
    return load_model(tiny_hf_model("qwen3", models_dir), ctx=48, kv_dtype="f32")  # caches read as words


def run_chunk(device, m, rows: int, alias: int) -> tuple[dict, object]:
    caps = KernelCaps.from_info(device.info, prefill_chunk_rows=-1, alias_acts=alias)
    prog = chunk_program(m.program, rows, "all")
    toks = [int(t) for t in np.random.default_rng(1).integers(3, 290, rows)]
    outs = [v.name for v in prog.values.values() if v.kind in ("state", "output")]
    caches = {v.name for v in prog.values.values() if v.kind == "state"}
    with (
        make_executor("fused", device, m.program, m.weights, caps=caps) as dec,
        chunk_executor("fused", device, prog, caps, [dec.plan]) as ex,
    ):
        ids = ex.plan.slices[(TOKENS, "data")]
        ids.buffer.write_u32(ids.offset // 4, toks)
        ex.step(toks[0], 0)
        # the caches' rows this chunk wrote (the rest is whatever the memory held), every output
        got = {
            n: ex.plan.read(n, "uint32")[: rows * prog.values[n].shape[-1] if n in caches else None]
            for n in outs
        }
        calls = [it.call for it in ex.items]
        info = {
            "acts": sum(x.size for x in ex.plan._acts.slices),  # what was carved from the arena
            "alias": dict(ex.plan.alias),
            "same_barriers": barriers_before(calls, ex.plan.alias) == barriers_before(calls),
            "barriers": [it.barrier for it in ex.items],
        }
    return got, info


def test_a_chunk_aliased_gives_the_same_bits_and_barriers_in_less_memory(device, tiny):
    plain, p = run_chunk(device, tiny, 16, -1)
    shared, s = run_chunk(device, tiny, 16, 0)
    assert not p["alias"] and s["alias"]
    assert s["same_barriers"] and s["barriers"] == p["barriers"]
    assert s["acts"] < p["acts"], (s["acts"], p["acts"])
    for n in plain:
        np.testing.assert_array_equal(shared[n], plain[n], err_msg=n)


SYNC_CHECK = textwrap.dedent(
    """
    from tests.executors.test_alias import run_chunk
    from tests.helpers.make_models import tiny_hf_model
    from vkdecode.models.loader import load_model
    from vkdecode.vk.device import Device
    import pathlib, sys
    m = load_model(tiny_hf_model("qwen3", pathlib.Path(sys.argv[1])), ctx=48, kv_dtype="f32")
    with Device() as dev:
        run_chunk(dev, m, 16, 0)
    print("no hazard")
    """
)


def test_no_hazard_under_synchronization_validation(tmp_path):
    """The layer's synchronization validation sees every read and write of the recorded chunk: a
    slot written again before a barrier after its last reads would be a WRITE_AFTER_READ hazard
    (with every barrier dropped, this check fails on lavapipe too: the layer tracks, the CPU forgives)."""
    if os.environ.get("VKDECODE_VALIDATE") != "1":
        pytest.skip("runs where the suite runs under the validation layer (VKDECODE_VALIDATE=1, as CI)")
    env = dict(os.environ, VK_LAYER_ENABLES="VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT")
    r = subprocess.run(
        [sys.executable, "-c", SYNC_CHECK, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0 and "no hazard" in r.stdout, r.stderr[-3000:]
    assert "SYNC-HAZARD" not in r.stdout + r.stderr
