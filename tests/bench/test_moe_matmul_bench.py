"""bench/moe_matmul_bench: the grouped expert matmul timed per caps variant, with its launch shape,
and the dense comparison, written to JSON (on lavapipe the f32 tiles: shapes, not speed)."""

from __future__ import annotations

import json

import numpy as np

from bench import moe_matmul_bench
from bench.moe_matmul_bench import routed_ids


def test_routed_ids_are_k_distinct_experts_a_row():
    ids = routed_ids(64, 8, 3, np.random.default_rng(0)).reshape(64, 3)
    assert ids.dtype == np.uint32 and ids.max() < 8
    assert all(len(set(row)) == 3 for row in ids.tolist())


def test_bench_writes_each_variant_and_the_dense_case(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.matmul_rows_bench.WARM_SECONDS", 0.0)
    out = tmp_path / "moe.json"
    argv = ["--experts", "4", "--k", "2", "--rows", "16", "--reps", "1", "--shapes", "gate"]
    assert (
        moe_matmul_bench.main(argv + ["--variants", "default", "moe_tile=4", "--dense", "--out", str(out)])
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert [r["variant"] for r in rows] == ["default", "moe_tile=4", "dense"]
    grouped = rows[:2]
    assert all(r["us"] > 0 and r["TFLOPs"] > 0 for r in rows)
    assert all(r["calls"][0]["shader"] == "moe_group" for r in grouped)
    # 32 slots over 4 experts: 8 a tile by default (the f32 tiles' power of two; 16 on the tensor
    # cores, after x's f16 conversion), 4 when forced (under the tensor cores' 16: the f32 tiles)
    default = grouped[0]["calls"][-1]
    bn = 16 if default["shader"] == "matmul_rows_coop" else 8
    assert [r["calls"][-1]["groups"][1] for r in grouped] == [32 // bn + 4, 32 // 4 + 4]
