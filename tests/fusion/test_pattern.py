"""The pattern language and the one legality predicate, on tiny hand-built programs."""

import pytest

from fusion.ir import Program
from fusion.pattern import Graph, PatternError, match, op, optional, pattern, repeat, why_illegal


def _prog(ops, outputs=(), weights=(), n=8):
    """ops: (kind, inputs, outputs); every name is an f32[n] value (weights: 2-D [n, n] or 1-D)."""
    p = Program("t")
    for w in weights:
        p.value(w, (n, n) if w.startswith("W") else (n,), "f32", "weight")
    p.value("x", (n,), "f32", "state")  # a free input
    for kind, ins, outs in ops:
        for v in outs:
            p.value(v, (n,), "f32", "output" if v in outputs else "activation")
        p.op(kind, ins, outs, **({"eps": 1e-5} if kind == "rms_norm" else {}))
    return p.verify()


QKV = [
    ("rms_norm", ("x", "nw"), ("h",)),
    ("matmul", ("Wq", "h"), ("q",)),
    ("add", ("q", "bq"), ("qb",)),
    ("matmul", ("Wk", "h"), ("k",)),
    ("matmul", ("Wv", "h"), ("v",)),
    ("add", ("bv", "v"), ("vb",)),
]
QKV_W = ("nw", "Wq", "Wk", "Wv", "bq", "bv")
NORM_PROJ = pattern(
    "NP",
    op("rms_norm", ("x", "nw"), ("h",)),
    repeat(
        op("matmul", ("w", "h"), ("y",)),
        optional(op("add", ("y", "b"), ("yb",), kinds={"b": "weight"}, commutative=True)),
        exports=(("yb", "y"),),
    ),
)


def test_repeat_optional_commutative():
    g = Graph(_prog(QKV, weights=QKV_W))
    m = next(match(NORM_PROJ, g, 0))
    assert m.ops == [0, 1, 2, 3, 4, 5]
    assert m.captures["w"] == ["Wq", "Wk", "Wv"]
    assert m.captures["b"] == ["bq", None, "bv"]  # add(bv, v) matched with its inputs swapped
    assert m.exports == ["qb", "k", "vb"]
    assert m.inputs == ["x", "nw", "Wq", "bq", "Wk", "Wv", "bv"]
    assert why_illegal(m, g) is None


def test_anchor_must_match_first_item():
    g = Graph(_prog(QKV, weights=QKV_W))
    assert list(match(NORM_PROJ, g, 1)) == []


def test_claimed_ops_are_skipped_and_refused():
    g = Graph(_prog(QKV, weights=QKV_W))
    m = next(match(NORM_PROJ, g, 0, claimed={4: (4, 5), 5: (4, 5)}))
    assert m.ops == [0, 1, 2, 3]  # the matcher never looks at claimed ops
    assert "consumed outside" in why_illegal(m, g, {4: (4, 5), 5: (4, 5)})  # h is read by op 4
    full = next(match(NORM_PROJ, g, 0))
    assert "already claimed" in why_illegal(full, g, {5: (5,)})


def test_unification_failure():
    # silu_mul's inputs come from matmuls reading two different vectors: "x" cannot bind both
    ops = [
        ("rms_norm", ("x", "nw"), ("h",)),
        ("rms_norm", ("x", "nw2"), ("h2",)),
        ("matmul", ("Wg", "h"), ("g",)),
        ("matmul", ("Wu", "h2"), ("u",)),
        ("silu_mul", ("g", "u"), ("a",)),
    ]
    g = Graph(_prog(ops, weights=("nw", "nw2", "Wg", "Wu")))
    swiglu = pattern(
        "S",
        op("matmul", ("wg", "x"), ("g",)),
        op("matmul", ("wu", "x"), ("u",)),
        op("silu_mul", ("g", "u"), ("a",)),
        exports=("a",),
    )
    assert list(match(swiglu, g, 2)) == []
    loose = pattern(
        "S",
        op("matmul", ("wg", "x"), ("g",)),
        op("silu_mul", ("g", "u"), ("a",)),
        op("matmul", ("wu", "x2"), ("u",)),
        exports=("a",),
    )
    assert [m.ops for m in match(loose, g, 2)] == [[2, 3, 4]]


def test_backtracking_finds_the_right_pairing():
    # up is emitted before gate: the first pairing fails on silu_mul(g, u) and is backtracked
    ops = [
        ("rms_norm", ("x", "nw"), ("h",)),
        ("matmul", ("Wu", "h"), ("u",)),
        ("matmul", ("Wg", "h"), ("g",)),
        ("silu_mul", ("g", "u"), ("a",)),
    ]
    g = Graph(_prog(ops, weights=("nw", "Wg", "Wu")))
    p = pattern(
        "S",
        op("rms_norm", ("x", "nw"), ("h",)),
        op("matmul", ("wg", "h"), ("g",)),
        op("matmul", ("wu", "h"), ("u",)),
        op("silu_mul", ("g", "u"), ("a",)),
        exports=("a",),
    )
    m = next(match(p, g, 0))
    assert (m.captures["wg"], m.captures["wu"]) == ("Wg", "Wu")


def test_attr_predicates_and_where():
    g = Graph(_prog(QKV, weights=QKV_W))
    assert next(match(pattern("N", op("rms_norm", ("x", "w"), ("h",), attrs={"eps": 1e-5})), g, 0))
    assert not list(match(pattern("N", op("rms_norm", ("x", "w"), ("h",), attrs={"eps": 1e-6})), g, 0))
    small = pattern("N", op("rms_norm", ("x", "w"), ("h",), attrs={"eps": lambda e: e < 1e-3}))
    assert next(match(small, g, 0))
    assert not list(match(pattern("N", op("rms_norm", ("x", "w"), ("h",), where=lambda o, p: False)), g, 0))


def test_intermediate_with_two_consumers_or_program_output():
    ops = [("add", ("x", "x"), ("s",)), ("rms_norm", ("s", "nw"), ("n",)), ("silu_mul", ("s", "n"), ("z",))]
    p2 = pattern("AN", op("add", ("a", "b"), ("s",)), op("rms_norm", ("s", "w"), ("n",)), exports=("n",))
    g = Graph(_prog(ops, weights=("nw",)))
    assert "s is consumed outside" in why_illegal(next(match(p2, g, 0)), g)
    g = Graph(_prog(ops[:2], outputs=("s",), weights=("nw",)))
    assert "s is a program output" in why_illegal(next(match(p2, g, 0)), g)
    exported = pattern("AN", *p2.items, exports=("s", "n"))
    assert why_illegal(next(match(exported, g, 0)), g) is None


def test_outside_op_between_match_ops_is_not_schedulable():
    # s = a+b (match) -> c = f(s) (outside) -> t = s+c (match): the region would wait on itself
    ops = [("add", ("x", "x"), ("s",)), ("silu_mul", ("s", "s"), ("c",)), ("add", ("s", "c"), ("t",))]
    g = Graph(_prog(ops))
    p = pattern("AA", op("add", ("a", "b"), ("s",)), op("add", ("s", "c"), ("t",)), exports=("s", "t"))
    m = next(match(p, g, 0))
    assert m.ops == [0, 2]
    assert "data path between" in why_illegal(m, g)


def test_claimed_regions_count_as_units_on_data_paths():
    # region R = {1, 3} reads s (match output) and writes c (match input): no order works
    ops = [
        ("add", ("x", "x"), ("s",)),
        ("silu_mul", ("s", "s"), ("r1",)),
        ("add", ("x", "x"), ("e",)),
        ("add", ("e", "e"), ("c",)),
        ("add", ("s", "c"), ("t",)),
        ("add", ("r1", "r1"), ("z",)),
    ]
    g = Graph(_prog(ops))
    p = pattern("AA", op("add", ("a", "b"), ("s",)), op("add", ("s", "c"), ("t",)), exports=("s", "t"))
    m = next(match(p, g, 0))
    assert m.ops == [0, 4]
    assert why_illegal(m, g) is None
    assert "data path between" in why_illegal(m, g, {1: (1, 3), 3: (1, 3)})


def test_rule_check_can_refuse():
    g = Graph(_prog(QKV, weights=QKV_W))
    m = next(match(NORM_PROJ, g, 0))
    assert why_illegal(m, g, check=lambda m, p: len(m.captures["w"]) == 2) == "the rule's check refused"


def test_malformed_patterns():
    with pytest.raises(PatternError):
        pattern("P", optional(op("add", ("a", "b"), ("c",))))
    g = Graph(_prog(QKV, weights=QKV_W))
    disconnected = pattern("P", op("rms_norm", ("x", "w"), ("h",)), op("matmul", ("W", "zz"), ("y",)))
    with pytest.raises(PatternError):
        list(match(disconnected, g, 0))


def _attention_prog() -> Program:
    """Two attention ops over the same caches: #0 with gpt-oss's sinks (a 5th input), #1 without."""
    p = Program("t")
    for name, shape, kind in (
        ("q", (8,), "state"),
        ("kc", (4, 4), "state"),
        ("vc", (4, 4), "state"),
        ("step", (8,), "step"),
        ("s", (2,), "weight"),
        ("o1", (8,), "output"),
        ("o2", (8,), "output"),
    ):
        p.value(name, shape, "u32" if kind == "step" else "f32", kind)
    attrs = {"n_heads": 2, "n_kv_heads": 1, "head_dim": 4, "scale": 0.5}
    p.op("attention", ["q", "kc", "vc", "step", "s"], ["o1"], **attrs)
    p.op("attention", ["q", "kc", "vc", "step"], ["o2"], **attrs)
    return p.verify()


def test_optional_inputs():
    """optional_inputs: trailing inputs an op may leave out (bound when present, absent otherwise);
    without them a pattern matches only ops of exactly its inputs."""
    g = Graph(_attention_prog())
    att = op("attention", ("q", "kc", "vc", "step"), ("o",), optional_inputs=("sinks",))
    with_sinks, without = (list(match(pattern("A", att), g, i)) for i in (0, 1))
    assert len(with_sinks) == len(without) == 1
    assert with_sinks[0].captures["sinks"] == "s" and with_sinks[0].inputs == ["q", "kc", "vc", "step", "s"]
    assert "sinks" not in without[0].captures and without[0].inputs == ["q", "kc", "vc", "step"]
    plain = pattern("P", op("attention", ("q", "kc", "vc", "step"), ("o",)))
    assert not list(match(plain, g, 0)) and len(list(match(plain, g, 1))) == 1
