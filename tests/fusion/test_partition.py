"""partition(): every op covered once, regions in a data-flow order, no-fuse mode, real model builders."""

import itertools

import pytest
from programs import QWEN3_0_6B, SMOLLM2_135M, SPECS, Spec, build

from fusion.ir import Program
from fusion.partition import PartitionError, check_partition, format_partition, partition, schedule, summarize
from fusion.region import Region
from fusion.rules import DEFAULT_RULES

IDS = [s.name for s in SPECS]


def simulate(p: Program, regions):
    """Run regions in list order on value names only: every input must exist before it is read, and
    whatever a region produces for others (or the host) must be among its outputs."""
    written = {v for o in p.ops for v in o.outputs}
    have = {v for v in p.values if v not in written}
    covered = sorted(i for r in regions for i in r.ops)
    assert covered == list(range(len(p.ops))), "every op exactly once"
    owner = {v: k for k, r in enumerate(regions) for i in r.ops for v in p.ops[i].outputs}
    for k, r in enumerate(regions):
        assert r.ops == sorted(r.ops)
        for v in r.inputs:
            assert v in have, f"{r.name} reads {v} before it is written"
        have.update(v for i in r.ops for v in p.ops[i].outputs)
        assert set(r.outputs) <= {v for i in r.ops for v in p.ops[i].outputs}
    for k, r in enumerate(regions):
        for v in r.inputs:
            if v in owner:
                assert v in regions[owner[v]].outputs, f"{v} read by {r.name} is not exported"
    for v in p.outputs():
        assert v in regions[owner[v]].outputs


SUBSETS = (
    [None, []] + [[r] for r in DEFAULT_RULES] + [list(c) for c in itertools.combinations(DEFAULT_RULES, 3)]
)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_cover_and_order_for_every_rule_subset(spec):
    p = build(spec, n_layers=2)
    for rules in SUBSETS:
        regions = partition(p, rules)
        simulate(p, regions)
        check_partition(p, regions)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_no_fuse_is_one_region_per_op(spec):
    p = build(spec, n_layers=2)
    regions = partition(p, [])
    assert [r.ops for r in regions] == [[i] for i in range(len(p.ops))]
    assert [r.name for r in regions] == [o.kind.upper() for o in p.ops]
    assert all(r.rule is None for r in regions)
    assert regions[0].name == "EMBED" and regions[0].outputs == ["x0"]


def test_rules_by_name_strings_and_summary():
    p = build(SMOLLM2_135M, n_layers=2)
    assert summarize(partition(p, ["ADD_RMS_NORM"]))["ADD_RMS_NORM"] == 4
    text = format_partition(p, partition(p))
    assert "RMS_NORM_MATMUL_ARGMAX" in text and f"{len(p.ops)} ops -> 12 regions" in text


def test_full_size_models_are_fast():
    import time

    p = build(QWEN3_0_6B)
    t = time.perf_counter()
    partition(p)
    assert time.perf_counter() - t < 5.0


def test_check_partition_catches_bad_lists():
    p = build(SMOLLM2_135M, n_layers=1)
    regions = partition(p)
    with pytest.raises(PartitionError):
        check_partition(p, regions[::-1])
    with pytest.raises(PartitionError):
        check_partition(p, regions[:-1])
    with pytest.raises(PartitionError):
        check_partition(p, regions + regions[-1:])


def test_schedule_orders_by_data_flow_and_detects_cycles():
    p = build(SMOLLM2_135M, n_layers=1)
    regions = partition(p)
    assert [r.ops for r in schedule(p, regions[::-1])] == [r.ops for r in regions]
    q = Program("cycle")
    for v in "xy":
        q.value(v, (4,))
    q.op("add", ("x", "x"), ("y",))
    q.op("add", ("y", "y"), ("x",))
    with pytest.raises(PartitionError):
        schedule(q, [Region("A", None, [0], ["x"], ["y"]), Region("B", None, [1], ["y"], ["x"])])


def _real_program(arch: str, spec: Spec, dtype: str):
    models = pytest.importorskip("vkdecode.models")
    from vkdecode.models.config import ModelArgs
    from vkdecode.models.gguf_names import expected_shapes

    a = ModelArgs(
        arch,
        spec.vocab,
        spec.hidden,
        spec.ffn,
        3,
        spec.n_heads,
        spec.n_kv_heads,
        spec.head_dim,
        spec.eps,
        spec.theta,
        4096,
        True,
        attention_bias=spec.bias,
        qk_norm=spec.qk_norm,
    )
    dtypes = {n: dtype for n, s in expected_shapes(a).items() if len(s) == 2}
    return models.build_program(a, 128, dtypes)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_real_model_builders(spec):
    """The same counts on the programs vkdecode.models builds (the fused path runs these)."""
    p = _real_program(spec.arch, spec, "q8_0")
    regions = partition(p)
    simulate(p, regions)
    attn = "QK_NORM_ROPE_KV_WRITE_ATTENTION" if spec.qk_norm else "ROPE_KV_WRITE_ATTENTION"
    assert len(regions) == 5 * 3 + 2
    assert summarize(regions) == {
        "EMBED": 1,
        "RMS_NORM_MATMUL": 3,
        attn: 3,
        "MATMUL_ADD": 6,
        "RMS_NORM_MATMUL_SILU_MUL": 3,
        "RMS_NORM_MATMUL_ARGMAX": 1,
    }
    for rules in SUBSETS:
        simulate(p, partition(p, rules))


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_gemma3_program_rules(kv_heads):
    """Gemma 3's layer (Gemma-3-270M shape; one kv head makes the k norm a whole-vector norm) needs
    two rule variants: RMS_NORM_MATMUL_GELU_MUL (GeGLU) and RMS_NORM_ADD (post-norm + residual),
    and keeps the q/k norms in the fused attention; the o and down projections stay plain matmuls."""
    models = pytest.importorskip("vkdecode.models")
    from vkdecode.models.config import ModelArgs
    from vkdecode.models.gemma3 import FULL, SLIDING
    from vkdecode.models.gguf_names import expected_shapes

    a = ModelArgs(
        "gemma3",
        1024,
        640,
        2048,
        3,
        4,
        kv_heads,
        256,
        1e-6,
        1e6,
        4096,
        True,
        qk_norm=True,
        hidden_act="gelu_tanh",
        sliding_window=512,
        layer_types=(SLIDING, SLIDING, FULL),
        rope_local_theta=1e4,
        query_pre_attn_scalar=256,
    )
    p = models.build_program(a, 128, {n: "q8_0" for n, s in expected_shapes(a).items() if len(s) == 2})
    regions = partition(p)
    simulate(p, regions)
    assert summarize(regions) == {
        "EMBED": 1,
        "RMS_NORM_MATMUL": 3,
        "QK_NORM_ROPE_KV_WRITE_ATTENTION": 3,
        "MATMUL": 6,
        "RMS_NORM_ADD": 6,
        "RMS_NORM_MATMUL_GELU_MUL": 3,
        "RMS_NORM_MATMUL_ARGMAX": 1,
    }
    windows = [r.attrs.get("window", 0) for r in regions if r.rule == "QK_NORM_ROPE_KV_WRITE_ATTENTION"]
    assert windows == [512, 512, 0]
    freqs = [r.roles["freqs"] for r in regions if r.rule == "QK_NORM_ROPE_KV_WRITE_ATTENTION"]
    assert freqs == ["rope_freqs_swa", "rope_freqs_swa", "rope_freqs"]
