"""The MoE kernels op by op against the float64 reference (shapes around the subgroup / workgroup
sizes, every reduction path, the dtypes of dense models), and the fused MoE regions of a tiny model
on both reduction paths."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.make_models import tiny_hf_model
from tests.helpers.reference_run import greedy_against_reference
from tests.lowering.kernel_harness import caps_of, nmse, one_op, run_and_reference
from vkdecode.executors import make_executor
from vkdecode.lowering.ops import op_calls
from vkdecode.models.loader import load_model
from vkdecode.quant import quantize
from vkdecode.reference import Reference

LIMIT = 1e-8  # same (de)quantised weights on both sides: only f32 rounding against float64


def _paths(device):
    caps = caps_of(device)
    out = {"smem": replace(caps, subgroup_arithmetic=False)}
    if caps.subgroup_arithmetic:
        out["sg"] = caps
    return out


def moe_matmul_case(dtype: str, e: int, m: int, k: int, slots: int, xrows: int, scale: float = 0.3):
    """One moe_matmul op over e experts of m x k `dtype` weights, slots chosen at random over xrows
    x rows -> (program, inputs)."""
    rng = np.random.default_rng(e * m + k)
    p = one_op(
        "moe_matmul",
        {
            "w": ((e, m, k), dtype, "weight"),
            "x": ((xrows * k,), "f32", "activation"),
            "ids": ((slots,), "u32", "activation"),
        },
        {"y": ((slots * m,), "f32", "output")},
    )
    env = {
        "w": quantize((scale * rng.standard_normal((e * m, k))).astype(np.float32), dtype),
        "x": rng.standard_normal(xrows * k).astype(np.float32),
        "ids": rng.integers(0, e, slots).astype(np.uint32),
    }
    return p, env


# the grouped matmul has no subgroup reduction: one reduction path covers it
@pytest.mark.parametrize("path,group", [("sg", "slots"), ("smem", "slots"), ("smem", "grouped")])
@pytest.mark.parametrize(
    "dtype,e,m,k",
    [
        ("f32", 3, 31, 33),
        ("f32", 8, 64, 64),
        ("f16", 5, 33, 34),
        ("q8_0", 8, 63, 96),
        ("q4_k", 4, 33, 256),
        ("mxfp4", 5, 33, 160),
    ],
)
@pytest.mark.parametrize("slots,xrows", [(2, 1), (2, 2), (6, 3), (6, 6), (70, 35), (40, 40)])
def test_moe_matmul(device, path, group, dtype, e, m, k, slots, xrows):
    """Per-slot matvecs, and (grouped) moe_group.comp then the chunk matmul with MOE: tiles of up
    to BN slots of one expert, several tiles for the busy experts of the wide cases."""
    caps = _paths(device).get(path) or pytest.skip("no subgroup arithmetic")
    # matmul_coop -1: the f32 tiled kernel on GPUs too (tests/lowering/test_coop.py has the coop one)
    caps = replace(caps, moe_group=1 if group == "grouped" else -1, matmul_coop=-1)
    p, env = moe_matmul_case(dtype, e, m, k, slots, xrows)
    shaders = [c.shader for c in op_calls(p, 0, caps)]
    assert shaders == (["moe_group", "matmul_rows"] if group == "grouped" else ["moe_matmul"]), shaders
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["y"], want["y"]) <= LIMIT


@pytest.mark.parametrize("path", ["sg", "smem"])
@pytest.mark.parametrize("e,k,rows", [(8, 2, 1), (7, 1, 3), (33, 6, 2), (64, 8, 1), (128, 8, 4)])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("ties", [False, True])
def test_moe_topk(device, path, e, k, rows, norm, ties):
    """ties: whole-number logits, so most picks choose among equal p (the lower index wins)."""
    caps = _paths(device).get(path) or pytest.skip("no subgroup arithmetic")
    p = one_op(
        "moe_topk",
        {"logits": ((rows * e,), "f32", "activation")},
        {"ids": ((rows * k,), "u32", "output"), "w": ((rows * k,), "f32", "output")},
        k=k,
        n_experts=e,
        norm=norm,
    )
    logits = 2.0 * np.random.default_rng(e + k).standard_normal(rows * e)
    env = {"logits": (np.round(logits) if ties else logits).astype(np.float32)}
    got, want = run_and_reference(device, p, env, caps)
    np.testing.assert_array_equal(got["ids"], want["ids"])
    assert nmse(got["w"], want["w"]) <= 1e-12


@pytest.mark.parametrize("n,slots,rows", [(31, 2, 1), (64, 8, 1), (33, 6, 3)])
def test_moe_sum_and_sigmoid_scale(device, n, slots, rows):
    rng = np.random.default_rng(n)
    caps = caps_of(device)
    p = one_op(
        "moe_sum",
        {"y": ((slots * n,), "f32", "activation"), "w": ((slots,), "f32", "activation")},
        {"o": ((rows * n,), "f32", "output")},
    )
    env = {"y": rng.standard_normal(slots * n).astype(np.float32), "w": rng.random(slots).astype(np.float32)}
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["o"], want["o"]) <= LIMIT
    p = one_op(
        "sigmoid_scale",
        {"g": ((rows,), "f32", "activation"), "y": ((rows * n,), "f32", "activation")},
        {"o": ((rows * n,), "f32", "output")},
    )
    env = {
        "g": rng.standard_normal(rows).astype(np.float32),
        "y": rng.standard_normal(rows * n).astype(np.float32),
    }
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["o"], want["o"]) <= 1e-12


@pytest.mark.parametrize("e,n,slots", [(8, 31, 2), (4, 64, 8), (33, 33, 6)])
def test_moe_bias_and_swiglu_clamp(device, e, n, slots):
    """gpt-oss's expert biases (slot s gets its expert's row) and clamped GLU; gates and ups spread
    past the limit on both sides, so every branch of the clamps runs."""
    rng = np.random.default_rng(e * n)
    caps = caps_of(device)
    p = one_op(
        "moe_bias",
        {
            "x": ((slots * n,), "f32", "activation"),
            "b": ((e, n), "f32", "weight"),
            "ids": ((slots,), "u32", "activation"),
        },
        {"y": ((slots * n,), "f32", "output")},
    )
    env = {
        "x": rng.standard_normal(slots * n).astype(np.float32),
        "b": quantize(rng.standard_normal((e, n)).astype(np.float32), "f32"),
        "ids": rng.integers(0, e, slots).astype(np.uint32),
    }
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["y"], want["y"]) <= 1e-14
    assert not np.allclose(want["y"], env["x"])  # the biases were added
    p = one_op(
        "swiglu_clamp",
        {"g": ((slots * n,), "f32", "activation"), "u": ((slots * n,), "f32", "activation")},
        {"y": ((slots * n,), "f32", "output")},
        alpha=1.702,
        limit=1.5,
    )
    env = {"g": 3 * rng.standard_normal(slots * n).astype(np.float32)}
    env["u"] = 3 * rng.standard_normal(slots * n).astype(np.float32)
    assert (env["g"] > 1.5).any() and (env["u"] < -1.5).any() and (env["u"] > 1.5).any()
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["y"], want["y"]) <= 1e-12
    c = np.minimum(env["g"].astype(np.float64), 1.5)  # transformers' GptOssExperts._apply_gate
    direct = c / (1 + np.exp(-1.702 * c)) * (np.clip(env["u"], -1.5, 1.5) + 1)
    np.testing.assert_allclose(want["y"], direct, rtol=1e-6)  # the reference sees f32 inputs


@pytest.mark.parametrize("path", ["sg", "smem"])
def test_fused_moe_regions(device, models_dir, path):
    """The three fused MoE kernels in a whole step (32 experts, top-4: the router's experts straddle
    the subgroups), on both reduction paths."""
    caps = _paths(device).get(path) or pytest.skip("no subgroup arithmetic")
    d = tiny_hf_model("qwen3moe", models_dir, num_experts=33, num_experts_per_tok=4, norm_topk_prob=True)
    m = load_model(d, ctx=24, kv_dtype="f32")
    with make_executor("fused", device, m.program, m.weights, caps=caps) as ex:
        shaders = {it.call.shader for it in ex.items}
        assert {"rms_norm_matmul_moe_topk", "moe_matmul_sum_add", "matmul_silu_mul"} <= shaders
        greedy_against_reference(ex, Reference(m.program, m.weights), 16)


GPT_OSS_ROUTERS = {  # caps over the path's -> the router region's shaders, the first one's bias define
    "one-wg": ({}, ("rms_norm_matmul_moe_topk",), "BIAS"),
    "two": ({"router_one_wg": 1}, ("rms_norm_matmul", "moe_topk"), "BIAS_0"),
    "norm-pre": ({"norm_pre": 1}, ("rms_norm_matmul_moe_topk",), "BIAS"),
}


@pytest.mark.parametrize("router", GPT_OSS_ROUTERS)
@pytest.mark.parametrize("path", ["sg", "smem"])
def test_gpt_oss_fused_moe_regions(device, models_dir, path, router):
    """gpt-oss's router with its bias row (RMS_NORM_MATMUL_BIAS_MOE_TOPK: the one-workgroup kernel
    with BIAS, or past it rms_norm_matmul with the bias, then top-k) and its down with the experts'
    bias rows, the weighted sum and the residual (MOE_MATMUL_BIAS_SUM_ADD: moe_matmul_sum_add with
    BIAS; norm-pre: also handing the next norm its inputs, bound after the bias). 33 experts, top-4:
    the router's experts straddle the subgroups. Greedy decode as the reference; every layer's
    expert ids and weights of the last step as the reference's."""
    over, router_shaders, bias = GPT_OSS_ROUTERS[router]
    caps = _paths(device).get(path) or pytest.skip("no subgroup arithmetic")
    caps = replace(caps, **over)
    d = tiny_hf_model("gpt_oss", models_dir, num_local_experts=33, num_experts_per_tok=4)
    m = load_model(d, ctx=24, kv_dtype="f32")
    ref = Reference(m.program, m.weights)
    with make_executor("fused", device, m.program, m.weights, caps=caps) as ex:
        greedy_against_reference(ex, ref, 12)
        routers = [ri for ri, r in enumerate(ex.regions) if r.rule == "RMS_NORM_MATMUL_BIAS_MOE_TOPK"]
        downs = [ri for ri, r in enumerate(ex.regions) if r.rule == "MOE_MATMUL_BIAS_SUM_ADD"]
        assert len(routers) == len(downs) == m.args.n_layers
        for ri in routers:
            calls = [it.call for it in ex.items if it.region == ri]
            assert tuple(c.shader for c in calls) == router_shaders
            assert (bias, "1") in calls[0].defines
            roles = ex.regions[ri].roles
            np.testing.assert_array_equal(ex.plan.read(roles["ids"], "uint32"), ref.values[roles["ids"]])
            np.testing.assert_allclose(
                ex.plan.read(roles["weights"]), ref.values[roles["weights"]], rtol=1e-4, atol=1e-5
            )
        down_calls = [it.call for it in ex.items if it.region in downs]
        assert [c.shader for c in down_calls] == ["moe_matmul_sum_add"] * len(downs)
        assert all(("BIAS", "1") in c.defines for c in down_calls)
        # the first layer's down hands the next layer's q/k/v norm its inputs
        assert (("NORM_OUT", "1") in down_calls[0].defines) == (router == "norm-pre")


def _split_caps(device, idot: int, **over):
    """Wide q4_k / q6_k units split (kwide_rows.glsl), as GPUs take them: kwide, kw_split and kq_idot
    forced (lavapipe's defaults are whole units in 16-lane workgroups), the GPU launch shapes."""
    caps = caps_of(device, kwide=1, kw_split=1, kq_idot=idot, matvec_wg=0, matvec_rows=0, **over)
    if idot > 0 and not caps.integer_dot:
        pytest.skip("no shaderIntegerDotProduct on this device")
    return caps


@pytest.mark.parametrize("idot", [-1, 1])
@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
@pytest.mark.parametrize("k", [256, 768])  # 768: 24 wide units a row, 3 superblocks
def test_moe_matmul_split_wide_units(device, dtype, k, idot):
    """Per-slot expert matvecs in split wide units: each slot reads its own expert's rows (KW_BASE);
    5 experts of 33 rows, so a wrong or missing offset reads another expert's rows."""
    caps = replace(_split_caps(device, idot), moe_group=-1)
    p, env = moe_matmul_case(dtype, 5, 33, k, 6, 3)
    (call,) = op_calls(p, 0, caps)
    d = dict(call.defines)
    assert "WVEC" in d and "KW_JOINT" not in d and ("KQ_IDOT" in d) == (idot > 0), d
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["y"], want["y"]) <= LIMIT


@pytest.mark.parametrize("idot", [-1, 1])
@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
def test_fused_moe_regions_split_wide_units(device, models_dir, dtype, idot):
    """The fused expert kernels (matmul_silu_mul with MOE, moe_matmul_sum_add) in split wide units
    with their expert offsets and slot weights: a GGUF qwen3moe with q4_k / q6_k experts, hidden 256,
    experts 768 wide (the down's 24 wide units a row), decodes as the reference."""
    from tests.helpers.make_models import write_gguf

    caps = _split_caps(device, idot)
    over = {"norm_topk_prob": True, "hidden_size": 256, "moe_intermediate_size": 768, "num_hidden_layers": 1}
    d = tiny_hf_model("qwen3moe", models_dir, **over)
    m = load_model(write_gguf(d, models_dir / f"qwen3moe-h256-e768.{dtype}.gguf", dtype), ctx=16)
    assert m.weights["layers.0.exp_down"].dtype == dtype
    with make_executor("fused", device, m.program, m.weights, caps=caps) as ex:
        experts = [it.call for it in ex.items if it.call.shader in ("matmul_silu_mul", "moe_matmul_sum_add")]
        assert {c.shader for c in experts} == {"matmul_silu_mul", "moe_matmul_sum_add"}
        assert all("WVEC" in dict(c.defines) and "KW_JOINT" not in dict(c.defines) for c in experts)
        greedy_against_reference(ex, Reference(m.program, m.weights), 6)


def test_qwen3_30b_a3b_decode_calls_on_a_gpu():
    """No GPU: Qwen3-30B-A3B Q4_K_M's MoE layer with an H100's caps (32-lane subgroups, accelerated
    integer dot products). The router (128 x 2048, past the one-workgroup kernel) is rms_norm_matmul
    writing h and the logits, its top-k inside the gate/up kernel (MOE_ROUTE; moe_route=-1: its own
    dispatch); gate/up take the dense gate/up's shape at one expert's 768 rows but 2 rows of each
    weight (one subgroup, split wide units on integer dot products: 384 row blocks a slot); the
    768-wide down in wide units too, its 8 slots' 24 units a row one loop over 128 lanes, 2 rows a
    workgroup; the 2048-wide q/k/v in 8-element units over 128 lanes."""
    from fusion.partition import partition
    from vkdecode.benchmark.shapes import shape_args, weight_dtypes
    from vkdecode.lowering.caps import KernelCaps
    from vkdecode.lowering.regions import region_calls
    from vkdecode.models import build_program

    args = shape_args("qwen3-30b-a3b", max_position=256, n_layers=1)
    p = build_program(args, 256, weight_dtypes(args, "q4_k_m"))
    caps = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, integer_dot=True, integer_dot_fast=True)
    calls = {r.rule: region_calls(p, r, caps) for r in partition(p) if r.rule and "MOE" in r.rule}
    (router, gu) = calls["RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL"]
    assert router.shader == "rms_norm_matmul" and "B_H" in dict(router.defines)
    assert gu.shader == "matmul_silu_mul" and {"MOE_ROUTE", "MOE_NORM"} <= dict(gu.defines).keys()
    assert gu.spec[:3] == (32, 2048, 2) and gu.spec[4:] == (768, 384, 128, 8) and gu.groups[0] == 8 * 384
    own = [r for r in partition(p) if r.rule == "RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL"]
    apart = region_calls(p, own[0], replace(caps, moe_route=-1))
    assert [c.shader for c in apart] == ["rms_norm_matmul", "moe_topk", "matmul_silu_mul"]
    assert {"WVEC", "KQ_IDOT"} <= dict(gu.defines).keys() and "KW_JOINT" not in dict(gu.defines)
    (down,) = calls["MOE_MATMUL_SUM_ADD"]
    assert down.spec[:4] == (128, 768, 2048, 2) and {"WVEC", "KQ_IDOT"} <= dict(down.defines).keys()
    qkv = [c for r in partition(p) if r.rule == "RMS_NORM_MATMUL" for c in region_calls(p, r, caps)]
    assert qkv and all(c.spec[0] == 128 and "WVEC" not in dict(c.defines) for c in qkv)


BIG_ROUTER = {  # 128 experts x 384: past the one-workgroup router
    "moe": {"num_experts": 128, "num_experts_per_tok": 8, "hidden_size": 384, "moe_intermediate_size": 16},
    "gpt_oss": {
        "num_local_experts": 128,
        "num_experts_per_tok": 8,
        "hidden_size": 384,
        "intermediate_size": 16,
    },
}
ROUTE_RULES = {
    "moe": "RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL",
    "gpt_oss": "RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP",
}


@pytest.mark.parametrize("sg", [False, True])
@pytest.mark.parametrize(
    "arch,norm", [("qwen3moe", True), ("qwen3moe", False), ("qwen2moe", False), ("gpt_oss", True)]
)
def test_router_top_k_inside_the_experts_gate_up(device, models_dir, arch, norm, sg):
    """A router too big for one workgroup (128 experts x 384) in a decode step: rms_norm_matmul
    writes h and the logits, and the chosen experts' gate/up kernel ranks the logits itself and
    writes the ids and weights (MOE_ROUTE, shaders/moe_route.glsl): no moe_topk dispatch. With and
    without norm_topk_prob, qwen2moe's shared expert reading h too, and gpt-oss (the router's bias
    row in rms_norm_matmul, the experts' bias rows and the clamped GLU in the gate/up): greedy
    tokens as the reference, and as with the top-k's own dispatch (moe_route=-1). sg: gate/up
    workgroups of one subgroup (GPUs' shape), the top-k as subgroup argmax passes (MOE_ROUTE_SG);
    else by ranks."""
    base = caps_of(device)
    if sg and not base.subgroup_arithmetic:
        pytest.skip("no subgroup arithmetic")
    base = replace(base, matvec_wg=base.subgroup_size if sg else 0)
    family = "gpt_oss" if arch == "gpt_oss" else "moe"
    over = {**BIG_ROUTER[family], "num_hidden_layers": 2}
    over.update({} if family == "gpt_oss" else {"norm_topk_prob": norm})
    m = load_model(tiny_hf_model(arch, models_dir, **over), ctx=16)
    tokens = {}
    for route in (0, -1):
        caps = replace(base, moe_route=route)
        with make_executor("fused", device, m.program, m.weights, caps=caps) as ex:
            rules = {r.rule for r in ex.regions}
            assert ROUTE_RULES[family] in rules, rules
            shaders = [it.call.shader for it in ex.items]
            routed = [it.call for it in ex.items if ("MOE_ROUTE", "1") in it.call.defines]
            assert len(routed) == (2 if route == 0 else 0) and ("moe_topk" in shaders) == (route < 0)
            assert all((("MOE_NORM", "1") in c.defines) == norm for c in routed)
            assert all((("MOE_ROUTE_SG", "1") in c.defines) == sg for c in routed)
            if family == "gpt_oss":  # the router's bias in its matvec, the experts' in the gate/up
                router = [
                    it.call
                    for it in ex.items
                    if it.call.shader == "rms_norm_matmul" and "B_H" in dict(it.call.defines)
                ]
                glu = [it.call for it in ex.items if it.call.shader == "matmul_silu_mul"]
                assert len(router) == len(glu) == 2
                assert all(("BIAS_0", "1") in c.defines for c in router)
                assert all({"BIAS", "GLU_CLAMP"} <= dict(c.defines).keys() for c in glu)
            tokens[route] = greedy_against_reference(ex, Reference(m.program, m.weights), 6)[0]
    assert tokens[0] == tokens[-1]
