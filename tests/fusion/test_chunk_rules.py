"""fusion/chunk_rules.py: the decode projection rules on chunk programs (rows=T), no GPU."""

from __future__ import annotations

import pytest

from fusion.chunk import chunk_program
from fusion.chunk_rules import ROW_RULES, row_norm
from fusion.partition import check_partition, partition, summarize
from fusion.rules import DEFAULT_RULES
from tests.fusion.programs import QWEN2_0_5B, QWEN3_0_6B, SMOLLM2_135M, build

LLAMA_2L = SMOLLM2_135M.with_(n_layers=2)


def regions(spec, rows=9, tail="all", **kw):
    c = chunk_program(build(spec.with_(**kw) if kw else spec), rows, tail)
    rs = partition(c, ROW_RULES)
    check_partition(c, rs)
    return c, rs


def test_llama_verify_step_regions():
    """Per layer: norm + q/k/v, o + residual, norm + gate/up + SwiGLU, down + residual; the final
    norm goes into the lm_head; rope, kv_write, attention, embed and argmax stay single ops."""
    _, rs = regions(LLAMA_2L)
    assert summarize(rs) == {
        "EMBED": 1,
        "RMS_NORM_MATMUL_ROWS": 3,
        "ROPE": 4,
        "KV_WRITE": 2,
        "ATTENTION": 2,
        "MATMUL_ADD_ROWS": 4,
        "RMS_NORM_MATMUL_SILU_MUL_ROWS": 2,
        "ARGMAX": 1,
    }
    qkv = next(r for r in rs if r.name == "RMS_NORM_MATMUL_ROWS")
    assert qkv.roles["weights"] == ["l0.wq", "l0.wk", "l0.wv"] and qkv.roles["outs"] == [
        "l0.q",
        "l0.k",
        "l0.v",
    ]
    head = [r for r in rs if r.name == "RMS_NORM_MATMUL_ROWS"][-1]
    assert head.roles["outs"] == ["logits"] and head.roles["norm_w"] == "out_norm"
    assert all(r.rule == r.name for r in rs if r.rule)


def test_qwen_biases_and_qk_norms():
    """Qwen2's q/k/v biases ride with the projections; Qwen3's per-head q/k norms (weight one head
    long) are not row norms and stay single ops."""
    _, rs = regions(QWEN2_0_5B.with_(n_layers=1))
    qkv = next(r for r in rs if r.name == "RMS_NORM_MATMUL_ROWS")
    assert qkv.roles["biases"] == ["l0.bq", "l0.bk", "l0.bv"] and qkv.roles["outs"] == [
        "l0.qb",
        "l0.kb",
        "l0.vb",
    ]
    c, rs = regions(QWEN3_0_6B.with_(n_layers=1))
    assert summarize(rs)["RMS_NORM"] == 2
    assert not any(o.kind == "add" for r in rs if r.rule is None for o in (c.ops[i] for i in r.ops))


def test_bias_variants():
    _, rs = regions(LLAMA_2L, o_bias=True, mlp_bias=True, n_layers=1)
    names = summarize(rs)
    assert names["MATMUL_BIAS_ADD_ROWS"] == 2 and names["RMS_NORM_MATMUL_BIAS_SILU_MUL_ROWS"] == 1


@pytest.mark.parametrize("rows", [2, 3, 16])
def test_prefill_tail_and_widths(rows):
    """kv tail (a prompt chunk): the last layer keeps only what feeds its cache (norm + k/v)."""
    _, rs = regions(LLAMA_2L, rows=rows, tail="kv")
    last = [r for r in rs if r.name == "RMS_NORM_MATMUL_ROWS"][-1]
    assert last.roles["outs"] == ["l1.k", "l1.v"]


def test_row_norm_predicate_and_checks():
    c = chunk_program(build(LLAMA_2L), 4, "all")
    norms = [o for o in c.ops if o.kind == "rms_norm"]
    assert all(row_norm(o, c) for o in norms)
    # a decode program (1 row) has whole-vector norms, which the decode rules take
    dec = build(LLAMA_2L)
    assert all(row_norm(o, dec) for o in dec.ops if o.kind == "rms_norm")
    # the decode rules leave every norm of a chunk unfused (whole_norm fails on T rows)
    assert not any("RMS_NORM" in r.name for r in partition(c, DEFAULT_RULES) if r.rule)


def test_norm_weight_must_be_one_row_of_every_projection():
    """A norm whose weight is not as long as the projection's in-dim is refused by the check."""
    c = chunk_program(build(LLAMA_2L), 4, "all")
    # shrink one projection's in-dim (not a runnable program: only the rule check reads shapes)
    from dataclasses import replace

    c.values["l0.wk"] = replace(c.values["l0.wk"], shape=(c.values["l0.wk"].shape[0], 32))
    rs = partition(c, ROW_RULES)
    qkv = [r for r in rs if r.name == "RMS_NORM_MATMUL_ROWS" and "l0.q" in r.roles["outs"]]
    assert qkv == [] and summarize(rs)["RMS_NORM"] == 1
