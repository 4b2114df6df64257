"""fusion/verify.py: op arity with optional inputs (attention's sinks) and their shapes."""

import pytest

from fusion.ir import IRError, Program


def _attention(sinks_shape=None, extra=False, sinks_dtype="f32") -> Program:
    p = Program("t")
    for name, shape, kind in (("q", (8,), "state"), ("kc", (4, 4), "state"), ("vc", (4, 4), "state")):
        p.value(name, shape, "f32", kind)
    p.value("step", (8,), "u32", "step")
    p.value("o", (8,), "f32", "output")
    ins = ["q", "kc", "vc", "step"]
    if sinks_shape is not None:
        p.value("sinks", sinks_shape, sinks_dtype, "weight")
        ins.append("sinks")
    if extra:
        ins.append("q")
    p.op("attention", ins, ["o"], n_heads=2, n_kv_heads=1, head_dim=4, scale=0.5)
    return p


def test_attention_sinks_are_an_optional_fifth_input():
    _attention().verify()
    _attention((2,)).verify()  # one logit per head
    with pytest.raises(IRError, match=r"takes 4\.\.5 inputs"):
        _attention((2,), extra=True).verify()
    with pytest.raises(IRError, match="sinks sinks must be an f32 weight of shape"):
        _attention((8,)).verify()
    with pytest.raises(IRError, match="sinks sinks must be an f32 weight"):
        _attention((2,), sinks_dtype="f16").verify()
