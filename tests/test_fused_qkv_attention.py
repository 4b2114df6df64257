"""The q/k/v projection folded into the fused attention (vkdecode/fused_qkv_attention.py,
shaders/qkv_in.glsl): which calls fold (no GPU), and the folded step against the reference and
the unfolded one on every family it covers (lavapipe, forced on: it is off by default)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from fusion.partition import partition
from tests.fusion.programs import SPECS, build
from tests.helpers.make_models import tiny_hf_model, write_gguf
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.executors import make_executor
from vkdecode.fused_qkv_attention import ATTENTION, MAX_BYTES, fold_qkv
from vkdecode.kernels import KernelCaps
from vkdecode.lowering import region_calls
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

CAPS = KernelCaps(subgroup_size=32, subgroup_arithmetic=True, subgroup_fixed=True, max_storage_range=128 << 20,
                  max_invocations=1024, max_shared=49152, min_align=64, cx_rows=-1, attn_qkv_in=1)


def _lowered(spec: str, caps=CAPS, dtype: str = "q4_1"):
    s = next(s for s in SPECS if s.name == spec).with_(ctx=256, dtype=dtype)
    p = build(s, n_layers=2)
    calls, owners = [], []
    for ri, r in enumerate(partition(p)):
        rc = region_calls(p, r, caps)
        calls += rc
        owners += [ri] * len(rc)
    return p, calls, owners


def test_folds_the_projection_into_the_attention():
    p, calls, owners = _lowered("smollm2-135m")
    projs = [c for c in calls if c.shader == "rms_norm_matmul"]
    atts = [c for c in calls if c.shader == "rope_kv_write_attention_sg"]
    assert len(projs) == len(atts) == 2
    new, new_owners = fold_qkv(p, calls, owners, CAPS)
    assert len(new) == len(calls) - 2 and len(new_owners) == len(new)
    assert "rms_norm_matmul" not in [c.shader for c in new]
    for proj, att in zip(projs, atts):
        folded = next(c for c in new if c.label == att.label + "+qkv")
        d = dict(folded.defines)
        assert d["QKV_IN"] == "1" and folded.bindings[:len(att.bindings)] == att.bindings
        pd = dict(proj.defines)
        assert folded.bindings[int(d["B_XIN"])] == proj.bindings[int(pd["B_X"])]
        assert folded.bindings[int(d["B_NWIN"])] == proj.bindings[int(pd["B_NW"])]
        for s in range(3):   # q, k, v weights (q words and scales) in the projection's order
            assert folded.bindings[int(d[f"WB_{s}"])] == proj.bindings[int(pd[f"WB_{s}"])]
            assert folded.bindings[int(d[f"SB_{s}"])] == proj.bindings[int(pd[f"SB_{s}"])]
        assert folded.spec == att.spec + (576, proj.spec[3]) and ("DT_Q4_1", "1") in folded.defines
        # counted with the attention's region; the projection's region keeps its ops, no dispatch
        assert new_owners[new.index(folded)] == owners[calls.index(att)]


def test_does_not_fold_where_it_does_not_fit():
    p, calls, owners = _lowered("smollm2-135m")
    assert fold_qkv(p, calls, owners, replace(CAPS, attn_qkv_in=0))[0] == calls      # off by default
    # over MAX_BYTES per workgroup: SmolLM2's 3 x 64 rows of 576 in f16 (221 KB), Qwen3-0.6B's
    # 3 x 128 rows of 1024 even in q4_1 (144 KB)
    f, fcalls, fowners = _lowered("smollm2-135m", dtype="f16")
    assert 3 * 64 * 576 * 2 > MAX_BYTES and fold_qkv(f, fcalls, fowners, CAPS)[0] == fcalls
    q, qcalls, qowners = _lowered("qwen3-0.6b")
    assert fold_qkv(q, qcalls, qowners, CAPS)[0] == qcalls
    # Qwen2's q/k/v biases
    q2, c2, o2 = _lowered("qwen2-0.5b")
    assert fold_qkv(q2, c2, o2, CAPS)[0] == c2
    # another reader of k: the projection stays
    k = next(c for c in calls if c.shader == "rope_kv_write_attention_sg").bindings[1]
    extra = replace(calls[-1], bindings=calls[-1].bindings + (k,))
    new, _ = fold_qkv(p, calls[:-1] + [extra], owners, CAPS)
    assert [c.shader for c in new].count("rms_norm_matmul") == 1


# (family, weight dtype or None for the HF f32 model, kv dtype, attention splits at least)
CASES = [("llama", "q4_1", "f16", 2), ("llama", "q4_1", "f16", 1), ("qwen3", "f16", "f16", 2),
         ("llama", None, "f32", 1), ("qwen3", "q5_1", "f32", 2), ("gemma3", "q4_0", "f16", 2),
         ("llama", "q8_0", "f16", 3), ("qwen3", "iq4_nl", "f16", 1)]


@pytest.mark.parametrize("fam,dtype,kv,splits", CASES, ids=lambda v: str(v))
def test_folded_step_matches_reference_and_unfolded(device, models_dir, fam, dtype, kv, splits):
    hf = tiny_hf_model(fam, models_dir)
    src = write_gguf(hf, models_dir / f"{fam}.qkvin.{dtype}.gguf", dtype) if dtype else hf
    m = load_model(src, ctx=40, kv_dtype=kv)
    base = replace(KernelCaps.from_info(device.info), attn_splits=splits, attn_kernel="sg")
    ref = Reference(m.program, m.weights)
    out = {}
    for on in (0, 1):
        with make_executor("fused", device, m.program, m.weights, caps=replace(base, attn_qkv_in=on)) as ex:
            if not any(it.call.shader == ATTENTION for it in ex.items):
                # the fold rides on the subgroup-rows attention, which splits a head over the lanes:
                # the tiny models' 16-wide heads fit lavapipe's 8 lanes (CI), not an NVIDIA GPU's 32
                pytest.skip(f"no subgroup-rows attention for head_dim {m.args.head_dim} on {base.subgroup_size} lanes")
            folded = [it for it in ex.items if ("QKV_IN", "1") in it.call.defines]
            assert len(folded) == (m.args.n_layers if on else 0)
            out[on] = greedy_against_reference(ex, ref, 24)[0]
    assert out[0] == out[1]
