"""fused_norm_pre: a matmul_add feeding an RMS norm writes x * norm_w and partial sums of x^2 for
the norm's matvec (shaders/matmul_add.comp NORM_OUT, shaders/fused_matvec.glsl NORM_PRE)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fusion.ir import Program
from vkdecode.lowering import norm_pre as fn
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps

CAPS = KernelCaps(
    subgroup_size=32,
    subgroup_arithmetic=True,
    max_storage_range=1 << 32,
    max_invocations=1024,
    max_shared=49152,
    min_align=64,
)


def _program(n: int = 4096) -> Program:
    p = Program("t")
    p.value("h", (n,), "f32")
    p.value("nw", (64,), "f32", "weight")
    return p


def _add(out="h", rows=None) -> KernelCall:
    b = (Binding("wo", rows=rows), Binding("a"), Binding("res"), Binding(out))
    return KernelCall("matmul_add", (64, 64, 64, 4), b, (3,), (16, 1, 1))


def _norm(x="h", shader="rms_norm_matmul_silu_mul", extra=()) -> KernelCall:
    b = (Binding(x), Binding("nw"), Binding("wg"), Binding("wu"), Binding("y")) + extra
    return KernelCall(shader, (32, 64, 2), b, (4,), (32, 1, 1), defines=(("B_X", "0"), ("B_NW", "1")))


def test_pairs_a_matmul_add_with_the_norm_reading_its_output():
    calls = [_add(), _norm()]
    out, owners = fn.add_norm_pre(_program(), calls, [0, 1], CAPS)
    assert owners == [0, 1]
    prod, cons = out
    d = dict(prod.defines)
    assert (d["NORM_OUT"], d["NO_NW"], d["NO_XN"], d["NO_PART"]) == ("1", "4", "5", "6")
    assert prod.bindings[4:] == (Binding("nw"), Binding("scratch:h.xn"), Binding("scratch:h.ss"))
    assert prod.writes == (3, 5, 6) and set(prod.scratch) == {
        ("scratch:h.xn", 4 * 4096),
        ("scratch:h.ss", 64),
    }
    assert cons.bindings[:2] == (Binding("scratch:h.xn"), Binding("scratch:h.ss"))
    assert dict(cons.defines)["NORM_PRE"] == "1" and dict(cons.defines)["N_PARTS"] == "16"
    # the lm_head's kernel binds x and norm_w at 0 and 1 without defines
    head = replace(_norm(shader="rms_norm_matmul_argmax"), defines=())
    assert dict(fn.add_norm_pre(_program(), [_add(), head], [0, 1], CAPS)[0][1].defines)["N_PARTS"] == "16"


def test_narrow_vectors_pair_only_when_asked():
    """Below NORM_PRE_MIN elements (latency-bound matvecs, where it measured slower) only
    norm_pre > 0 pairs."""
    calls = [_add(), _norm()]
    narrow = _program(fn.NORM_PRE_MIN // 2)
    assert fn.add_norm_pre(narrow, calls, [0, 1], CAPS)[0] == calls
    assert fn.add_norm_pre(narrow, calls, [0, 1], replace(CAPS, norm_pre=1))[0] != calls
    assert fn.add_norm_pre(_program(fn.NORM_PRE_MIN), calls, [0, 1], CAPS)[0] != calls


@pytest.mark.parametrize("case", ["off", "row-split", "other-reader", "x-twice", "no-norm"])
def test_leaves_calls_it_cannot_pair(case):
    caps, calls = CAPS, [_add(), _norm()]
    if case == "off":
        caps = replace(CAPS, norm_pre=-1)
    elif case == "row-split":
        calls = [_add(rows=32), _norm()]
    elif case == "other-reader":  # the first reader after the matmul_add is not the norm
        calls = [_add(), KernelCall("add", (64,), (Binding("h"), Binding("z")), (1,), (1, 1, 1)), _norm()]
    elif case == "x-twice":
        calls = [_add(), _norm(extra=(Binding("h"),))]
    else:
        calls = [_add(), replace(_norm(), defines=(("B_X", "0"),))]
    assert fn.add_norm_pre(_program(), calls, list(range(len(calls))), caps)[0] == calls


def test_consumers_with_k_quant_weights_sum_the_partials_late():
    """NORM_PRE_LATE (the partials loaded after the weight loop) goes to K-quant consumers, a slot's
    dtype counting (SLOT_DTYPES), unless caps.norm_pre_late says always or never."""

    def late(defines, knob=0):
        cons = replace(_norm(), defines=(("B_X", "0"), ("B_NW", "1")) + defines)
        out = fn.add_norm_pre(_program(), [_add(), cons], [0, 1], replace(CAPS, norm_pre_late=knob))[0]
        return ("NORM_PRE_LATE", "1") in out[1].defines

    from vkdecode.quant import QUANT_TYPES

    assert late((("DT_Q4_K", "1"),)) and late((("DT_Q6_K", "1"),))
    assert not late((("DT_F16", "1"),)) and not late((("DT_Q4_1", "1"),))
    slots = (("SLOT_DTYPES", "1"), ("DTS_0", str(QUANT_TYPES.index("q8_0"))))
    assert not late(slots) and late(slots + (("DTS_1", str(QUANT_TYPES.index("q6_k"))),))
    assert late((("DT_F16", "1"),), knob=1) and not late((("DT_Q4_K", "1"),), knob=-1)
