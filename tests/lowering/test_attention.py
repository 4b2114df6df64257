"""No GPU: the fused attention's grid and absorb_combines, the peephole that hands split-K
attention's combine to the o-projection (the numerics run in tests/lowering/test_regions.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fusion.partition import partition
from tests.fusion.programs import SPECS, build
from vkdecode.executors.plan import GridArgs
from vkdecode.lowering.attention import CX_BATCH, absorb_combines, attention_grid, subgroup_rows
from vkdecode.lowering.calls import AttnGrid, KernelCall, KernelCaps, live_splits
from vkdecode.lowering.regions import region_calls

CAPS = KernelCaps(
    subgroup_size=32,
    subgroup_arithmetic=True,
    max_storage_range=128 << 20,
    max_invocations=1024,
    max_shared=49152,
    min_align=64,
)


def _lowered(spec="qwen3-0.6b", ctx=256, caps=CAPS, **rules):
    s = next(s for s in SPECS if s.name == spec).with_(ctx=ctx)
    p = build(s, n_layers=2)
    calls, owners = [], []
    for ri, r in enumerate(partition(p, **rules)):
        rc = region_calls(p, r, caps)
        calls += rc
        owners += [ri] * len(rc)
    return p, calls, owners


def test_attention_grid_splits():
    # (splits, max rows per split, live splits at least)
    assert attention_grid(256, 64, CAPS) == (4, 64, 4)  # automatic: 256 head elements
    assert attention_grid(256, 128, CAPS) == (4, 64, 4)  # at least MIN_SPLITS_128 up to 128
    assert attention_grid(256, 256, CAPS) == (1, 256, 1)
    assert attention_grid(256, 16, CAPS) == (8, 32, 8)  # at most 8
    assert attention_grid(4096, 64, CAPS) == (16, 256, 4)  # attn_max_chunk rows per split
    assert attention_grid(4096, 128, CAPS) == (16, 256, 4)
    assert attention_grid(256, 64, replace(CAPS, attn_splits=8)) == (8, 32, 8)
    assert attention_grid(256, 128, replace(CAPS, attn_splits=1)) == (1, 256, 1)
    assert attention_grid(4096, 64, replace(CAPS, attn_splits=1)) == (16, 256, 1)  # as on lavapipe
    assert attention_grid(5, 64, replace(CAPS, attn_splits=8)) == (5, 1, 5)  # never more than ctx


def test_combine_absorbed_by_the_o_projection():
    p, calls, owners = _lowered("smollm2-135m")
    combines = [i for i, c in enumerate(calls) if c.shader == "attention_combine"]
    assert len(combines) == 2
    new, new_owners = absorb_combines(p, calls, owners, CAPS)
    assert len(new) == len(calls) - 2 and len(new_owners) == len(new)
    assert not [c for c in new if c.shader == "attention_combine"]
    for i in combines:
        comb = calls[i]
        part, out = comb.bindings[0].value, comb.bindings[1].value
        mm = next(c for c in new if ("COMBINE_X", "1") in c.defines and part in {b.value for b in c.bindings})
        assert mm.shader == "matmul_add" and out not in {b.value for b in mm.bindings}
        _, h, d, s, maxchunk, min_s, window = comb.spec
        assert {
            ("CX_H", str(h)),
            ("CX_D", str(d)),
            ("CX_S", str(s)),
            ("CX_MAXCHUNK", str(maxchunk)),
            ("CX_MIN_S", str(min_s)),
            ("CX_WINDOW", str(window)),
        } <= set(mm.defines)
        # it reads the step buffer last: the live split count comes from the position
        assert mm.bindings[-1] == comb.bindings[2] and mm.bindings[-1].value == "step"
        assert (part, comb.scratch[0][1]) in mm.scratch
        # the call keeps its region: the o-projection's MATMUL_ADD
        assert (
            new_owners[new.index(mm)]
            == owners[calls.index(next(c for c in calls if c.label == mm.label[:-8]))]
        )


def test_combine_kept_when_another_call_reads_the_output():
    p, calls, owners = _lowered("smollm2-135m")
    comb = next(c for c in calls if c.shader == "attention_combine")
    out = comb.bindings[1].value
    extra = KernelCall(
        "add", (64, 8), (comb.bindings[1], comb.bindings[1], comb.bindings[1]), (2,), (1, 1, 1)
    )
    new, _ = absorb_combines(p, calls + [extra], owners + [owners[-1]], CAPS)
    assert comb in new
    assert not [c for c in new if ("CX_H", str(comb.spec[1])) in c.defines and out in c.label]


@pytest.mark.parametrize("rules", [["QK_NORM_ROPE_KV_WRITE_ATTENTION", "RMS_NORM_MATMUL"]])
def test_combine_kept_before_a_plain_matmul(rules):
    """Without MATMUL_ADD the o-projection is the per-op matmul: the combine dispatch stays, in
    front of its reader."""
    p, calls, owners = _lowered(rules=rules)
    new, _ = absorb_combines(p, calls, owners, CAPS)
    assert new == calls


def test_combine_kept_before_an_o_projection_that_gates_its_x():
    """An o-projection loading its x gated (SIGMOID_X: Qwen3.5's attention output, its own x hooks
    in matmul_add.comp) keeps the combine dispatch in front of it."""
    p, calls, owners = _lowered("smollm2-135m")
    gated = [
        replace(c, defines=c.defines + (("SIGMOID_X", "1"),)) if c.shader == "matmul_add" else c
        for c in calls
    ]
    new, _ = absorb_combines(p, gated, owners, CAPS)
    assert new == gated


def test_combine_kept_for_a_head_dim_not_multiple_of_4():
    p, calls, owners = _lowered()
    odd = [
        replace(c, spec=c.spec[:2] + (18,) + c.spec[3:]) if c.shader == "attention_combine" else c
        for c in calls
    ]
    new, _ = absorb_combines(p, odd, owners, CAPS)
    assert new == odd


def test_subgroup_rows_kernel_only_where_it_fits():
    fixed = replace(CAPS, subgroup_fixed=True)
    assert subgroup_rows(64, 256, fixed) and subgroup_rows(128, 256, fixed)
    assert not subgroup_rows(64, 256, CAPS)  # size may vary
    assert not subgroup_rows(64, 256, replace(fixed, subgroup_arithmetic=False))
    assert not subgroup_rows(16, 256, fixed)  # fewer elements than lanes
    assert not subgroup_rows(48, 256, fixed)  # uneven over 32 lanes
    assert not subgroup_rows(64, 256, replace(fixed, attn_kernel="wg"))
    assert subgroup_rows(16, 64, replace(fixed, subgroup_size=8))


def test_subgroup_rows_call():
    _, calls, _ = _lowered(caps=replace(CAPS, subgroup_fixed=True))
    att = [c for c in calls if c.shader.startswith("rope_kv")]
    assert {c.shader for c in att} == {"rope_kv_write_attention_sg"}
    d = dict(att[0].defines)
    assert (d["LANES"], d["EPL"]) == ("32", "4")  # head_dim 128 over 32 lanes
    assert 1 <= int(d["RB"]) <= 8 and "QK_NORM" in d and "SPLIT" in d


def test_subgroup_rows_workgroup_fits_shared_memory():
    """lavapipe: 8 lanes, 32 KiB of shared memory; 512 invocations of head_dim 128 would need 33.5 KB."""
    caps = replace(CAPS, subgroup_fixed=True, subgroup_size=8, max_shared=32768)
    _, calls, _ = _lowered(caps=caps)
    att = next(c for c in calls if c.shader == "rope_kv_write_attention_sg")
    wg, d = att.spec[0], att.spec[3]
    assert wg == 256 and 4 * ((wg // 8) * (d + 3) + 1) <= 32768


def _step_calls(spec: str, ctx: int, caps: KernelCaps) -> list[KernelCall]:
    """A fused step's calls as replay records them: absorbed combines."""
    p, calls, owners = _lowered(spec, ctx, caps)
    return absorb_combines(p, calls, owners, caps)[0]


def _work_at(calls: list[KernelCall], pos: int) -> list[tuple]:
    """Per call at position pos: shader, workgroups launched (an indirect grid: GridArgs's (x, y, z)),
    and for an o-projection combining partials the splits it reads, per batch and batches."""
    grids = GridArgs(calls)
    args = grids.args(pos)
    out = []
    for c, g in zip(calls, grids.index):
        groups = tuple(args[3 * g : 3 * g + 3]) if g is not None else c.groups
        d = dict(c.defines)
        combine = ()
        if "COMBINE_X" in d:
            grid = AttnGrid(
                int(d["CX_H"]),
                int(d["CX_D"]),
                int(d["CX_S"]),
                int(d["CX_MAXCHUNK"]),
                int(d["CX_MIN_S"]),
                int(d["CX_WINDOW"]),
            )
            live, b = live_splits(pos, grid), int(d.get("CX_B", d["CX_S"]))  # before CX_B: arrays of CX_S
            combine = (live, b, -(-live // b))
        out.append((c.shader, groups, combine))
    return out


@pytest.mark.parametrize("spec", ["qwen3-0.6b", "smollm2-135m"])
def test_gpu_work_at_a_position_does_not_grow_with_ctx(spec):
    """GPU defaults (live rows, absorbed combine): at a fixed position every dispatch
    launches the workgroups, and the o-projection combines the splits in the batches, that it does
    at ctx 1280, up to ctx 32768 (before: position 1000 of Qwen3 ran 5 splits at ctx 1280 and 8 at
    8192, and the absorbed combine held arrays of all 32 splits)."""
    # Qwen3's o-projection keeps its combine dispatch by default (CX_ABSORB_MAX); absorbing is forced
    # here so the absorbed combine's batches are checked at head_dim 128 too
    gpu = replace(CAPS, subgroup_fixed=True, cx_rows=2 if spec == "qwen3-0.6b" else 0)
    calls = {ctx: _step_calls(spec, ctx, gpu) for ctx in (1280, 8192, 32768)}
    assert any("COMBINE_X" in dict(c.defines) for c in calls[8192])
    for pos in (0, 16, 255, 1000, 1279):
        work = {ctx: _work_at(c, pos) for ctx, c in calls.items()}
        assert work[1280] == work[8192] == work[32768], pos
    attn = [w for w in _work_at(calls[8192], 1000) if w[0].startswith("rope_kv_write_attention")]
    assert attn[0][1][0] == 16  # splits of 63 rows (head_dim 64 and 128: MIN_SPLITS_128)
    combine = [w[2] for w in _work_at(calls[32768], 32000) if w[2]]
    assert combine and all(b <= CX_BATCH and n * b >= live for live, b, n in combine)


@pytest.mark.parametrize("spec,absorbed", [("smollm2-135m", True), ("qwen3-0.6b", False)])
def test_combine_absorbed_only_while_it_pays(spec, absorbed):
    """Every absorbing o-projection workgroup redoes the whole combine: kept as its own dispatch once
    workgroups x heads x head_dim passes CX_ABSORB_MAX (Qwen3-0.6B: 512 x 2048), unless cx_rows asks."""
    p, calls, owners = _lowered(spec)
    new, _ = absorb_combines(p, calls, owners, CAPS)
    assert (not [c for c in new if c.shader == "attention_combine"]) == absorbed
    forced, _ = absorb_combines(p, calls, owners, replace(CAPS, cx_rows=4))
    assert not [c for c in forced if c.shader == "attention_combine"]
