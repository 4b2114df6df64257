"""The grouped expert matmuls' launch choices (lowering/moe_group.py), no GPU: their kernels run
against numpy in test_ops_moe.py (f32 tiles) and test_coop.py (tensor cores)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fusion.ir import Program
from vkdecode.lowering.caps import KernelCaps
from vkdecode.lowering.coop import tile_dims
from vkdecode.lowering.moe_group import group_rows, group_tile
from vkdecode.lowering.ops import op_calls

# an H100's caps with its tensor-core path (32-lane subgroups, 48 KiB of shared memory)
GPU = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, coop_matrix=True)


def _expert_matmul(e: int, m: int, k: int, rows: int, top: int) -> Program:
    p = Program("t")
    p.meta["arch"] = "qwen3moe"
    p.value("w", (e, m, k), "q4_k", "weight")
    p.value("x", (rows * k,), "f32", "state")
    p.value("ids", (rows * top,), "u32", "state")
    p.value("y", (rows * top * m,), "f32", "output")
    p.op("moe_matmul", ["w", "x", "ids"], ["y"])
    return p


def test_group_tile_is_four_subgroups_of_one_row_block():
    """64 weight rows over 4 subgroups, 16 or 32 slots a subgroup's column (few registers a lane)."""
    assert [group_tile(bn) for bn in (16, 32, 64, 128)] == [
        (4, 1, 1, 1),
        (4, 1, 1, 2),
        (4, 2, 1, 2),
        (4, 4, 1, 2),
    ]
    assert all(tile_dims(group_tile(bn))[:2] == (64, bn) for bn in (16, 32, 64, 128))


def test_qwen3_30b_a3b_prompt_chunk_on_tensor_cores():
    """A 512-row chunk of Qwen3-30B-A3B (8 of 128 experts: 32 slots an expert on average): the
    slots grouped 32 a tile, the gate (768 x 2048) on 64 x 32 tiles of four 32-lane subgroups, one
    workgroup column per 64 rows, a row of the grid per tile (4096 / 32 + 128 at most)."""
    p = _expert_matmul(128, 768, 2048, 512, 8)
    assert group_rows(p, "ids", 128, GPU) == 32
    group, mm = op_calls(p, 0, GPU)
    assert group.shader == "moe_group" and mm.shader == "matmul_rows_coop"
    d = dict(mm.defines)
    assert (d["SG_M"], d["SG_N"], d["BLK_M"], d["BLK_N"]) == ("4", "1", "1", "2") and "MOE" in d
    assert mm.spec[0] == 128 and mm.groups == (12, 4096 // 32 + 128, 1)


def test_a_forced_tile_must_match_the_groups():
    p = _expert_matmul(128, 768, 2048, 512, 8)
    assert [c.shader for c in op_calls(p, 0, replace(GPU, coop_tile="2x1:2x2"))][1] == "matmul_rows_coop"
    with pytest.raises(ValueError, match="slots a tile"):
        op_calls(p, 0, replace(GPU, coop_tile="2x2:2x2"))
