"""MoE models on the GPU: every mode against the numpy reference (logits and greedy tokens, step by
step), the fused rules that take the MoE block, and a steady state with no host work."""

from __future__ import annotations

import numpy as np
import pytest

from tests.executors.test_prefill import check_against, exact, prompt, reference_path
from tests.executors.test_speculative import plain_tokens, spec_tokens
from tests.helpers.make_models import GPT_OSS_TRUNCATED, mxfp4_hf_model, tiny_hf_model, write_gguf
from tests.helpers.reference_run import greedy_against_reference, replay_host_work
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

MODES = ("unfused", "replay-nofuse", "fused")
STEPS = 24
MOE_RULES = {"RMS_NORM_MATMUL_MOE_TOPK", "MOE_MATMUL_SILU_MUL", "MOE_MATMUL_SUM_ADD"}
# gpt-oss's forms of them, with bias rows (and its clamped GLU)
GPT_OSS_MOE_RULES = (
    "RMS_NORM_MATMUL_BIAS_MOE_TOPK",
    "MOE_MATMUL_BIAS_SWIGLU_CLAMP",
    "MOE_MATMUL_BIAS_SUM_ADD",
)


@pytest.fixture(scope="module")
def qwen3moe(models_dir):
    return load_model(tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True), ctx=48)


@pytest.mark.parametrize("kv_dtype", ["f16", "f32"])
def test_modes_match_reference(device, models_dir, qwen3moe, kv_dtype):
    m = qwen3moe
    if kv_dtype == "f32":
        m = load_model(tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True), ctx=48, kv_dtype="f32")
    ref = Reference(m.program, m.weights)
    out = {}
    for mode in MODES:
        with make_executor(mode, device, m.program, m.weights) as ex:
            out[mode] = greedy_against_reference(ex, ref, STEPS)
            if mode == "fused":
                rules = {r.rule for r in ex.regions}
                assert MOE_RULES <= rules, rules
    assert out["replay-nofuse"][0] == out["unfused"][0] == out["fused"][0]
    for a, b in zip(out["replay-nofuse"][1], out["unfused"][1]):
        np.testing.assert_array_equal(a, b)


ROUTER_CASES = {  # caps over the device's -> (router dispatches, their shaders)
    "one-wg": ({}, ("rms_norm_matmul_moe_topk",)),
    "two": ({"router_one_wg": 1, "matvec_rows": 1}, ("rms_norm_matmul", "moe_topk")),
    "two-norm-pre": ({"router_one_wg": 1, "norm_pre": 1}, ("rms_norm_matmul", "moe_topk")),
    "ops": ({"router_one_wg": 1, "router_ops": True}, ("rms_norm", "matmul", "moe_topk")),
}


@pytest.mark.parametrize("case", ROUTER_CASES)
def test_router_past_one_workgroup(device, qwen3moe, case):
    """A router too big for the one-workgroup fused kernel (router_one_wg=1 makes every router so)
    runs as rms_norm_matmul writing the normed h and the logits, then top-k (two dispatches; with
    norm_pre the o-projection before it hands it x * norm_w and partial sums, as the experts' down
    does the next layer's q/k/v), or with
    caps.router_ops as its three ops: the same tokens as the reference, and every layer's h, expert
    ids and weights of the last step equal to the reference's."""
    from dataclasses import replace

    from vkdecode.lowering.caps import KernelCaps

    over, shaders = ROUTER_CASES[case]
    m = qwen3moe
    ref = Reference(m.program, m.weights)
    caps = replace(KernelCaps.from_info(device.info), **over)
    with make_executor("fused", device, m.program, m.weights, caps=caps) as ex:
        greedy_against_reference(ex, ref, 8)
        routers = [ri for ri, r in enumerate(ex.regions) if r.rule == "RMS_NORM_MATMUL_MOE_TOPK"]
        assert routers
        for ri in routers:
            assert tuple(it.call.shader for it in ex.items if it.region == ri) == shaders
            roles = ex.regions[ri].roles
            np.testing.assert_array_equal(ex.plan.read(roles["ids"], "uint32"), ref.values[roles["ids"]])
            for v in ("weights", "h"):
                np.testing.assert_allclose(ex.plan.read(roles[v]), ref.values[roles[v]], rtol=1e-4, atol=1e-5)
        if case == "two-norm-pre":
            pre = [it.call for it in ex.items if it.region in routers and it.call.shader == "rms_norm_matmul"]
            assert all(("NORM_PRE", "1") in c.defines for c in pre), [c.defines for c in pre]
            # and each layer's experts' down + weighted sum + residual hands the next layer's norm
            # its inputs (the last one's reader, the head, runs as ops on CPUs: caps.head_ops)
            downs = [it.call for it in ex.items if it.call.shader == "moe_matmul_sum_add"]
            assert len(downs) > 1 and all(("NORM_OUT", "1") in c.defines for c in downs[:-1])


@pytest.mark.parametrize("mode", MODES)
def test_prompt_chunks_equal_the_token_path(device, qwen3moe, mode):
    """Prompt chunks (per-op kernels; a row's k slots pick their own experts) fill the same KV cache
    and give the same first token as the reference fed token by token."""
    m = qwen3moe
    toks = prompt(37)
    want = reference_path(m, toks)
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((16, 8, 3))
        check_against(dec, toks, *want, what=f"qwen3moe {mode}")
        assert [c.width for c in dec.prefill.chunks] == [16, 16, 3]
        # 16 rows x 2 of 8 experts: grouped by expert; 3 rows: a matvec per slot
        shaders = {w: {it.call.shader for it in ex.items} for w, ex in dec.prefill.runners.items()}
        assert {"moe_group", "matmul_rows"} <= shaders[16] and "moe_matmul" not in shaders[16]
        assert "moe_group" not in shaders[3] and shaders[3] & {"moe_matmul", "matmul_silu_mul"}


CHUNK_FAMILIES = {
    "qwen3moe-mixed": ("qwen3moe", {"mlp_only_layers": [0], "num_hidden_layers": 3}, 2),
    "qwen2moe": ("qwen2moe", {}, 2),  # the shared expert added after moe_sum's add
}


@pytest.mark.parametrize("rows", [16, 3])
@pytest.mark.parametrize("family", CHUNK_FAMILIES)
def test_fused_chunk_is_bit_identical_to_its_ops(device, models_dir, family, rows):
    """A prompt chunk in the fused mode (fusion.rules.CHUNK_RULES) against the same chunk op by op
    (replay-nofuse), the verify step's form (every row's logits): the same KV cache and logits to
    the bit (the grouped up matmul stores silu_mul.comp's expression of the same g and u; moe_sum
    with RES adds the residual in add.comp's one rounding). 16 rows (32 slots of 8 experts: grouped)
    lose two dispatches per MoE layer, silu_mul and the add; 3 rows (per-slot matvecs: the SwiGLU
    region runs its ops) the add; every residual add with the norm after it is one add_rms_norm
    (its own kernel's sum and rms_norm.comp's reduction: the same bits)."""
    from fusion.chunk import TOKENS, chunk_program
    from vkdecode.executors.prefill import chunk_executor

    arch, over, moe_layers = CHUNK_FAMILIES[family]
    m = load_model(tiny_hf_model(arch, models_dir, **over), ctx=48, kv_dtype="f32")
    caps = exact(device)
    prog = chunk_program(m.program, rows, "all")
    toks = prompt(rows, seed=3)
    outs = [v.name for v in prog.values.values() if v.kind in ("state", "output")]  # caches, logits, tokens
    got, items = {}, {}
    with make_executor("fused", device, m.program, m.weights, caps=caps) as dec:
        for mode in ("replay-nofuse", "fused"):
            with chunk_executor(mode, device, prog, caps, [dec.plan]) as ex:
                ids = ex.plan.slices[(TOKENS, "data")]
                ids.buffer.write_u32(ids.offset // 4, toks)
                ex.step(toks[0], 0)
                got[mode] = {n: ex.plan.read(n, "uint32") for n in outs}  # the bits
                items[mode], rules, stats = len(ex.items), [r.rule for r in ex.regions], ex.region_stats()
            assert sum(r["ops"] for r in stats) == len(prog.ops)
            assert sum(r["dispatches"] for r in stats) == items[mode]
            assert mode == "fused" or not any(rules)  # replay-nofuse: op by op
    glu = rows == 16
    assert rules.count("MOE_SUM_ADD_CHUNK") == rules.count("MOE_MATMUL_SILU_MUL_CHUNK") == moe_layers, rules
    # and a dispatch per residual add with the norm after it (ADD_RMS_NORM_CHUNK)
    assert items["replay-nofuse"] - items["fused"] == (1 + glu) * moe_layers + rules.count(
        "ADD_RMS_NORM_CHUNK"
    )
    for n in outs:
        np.testing.assert_array_equal(got["fused"][n], got["replay-nofuse"][n], err_msg=n)


@pytest.mark.parametrize("mode", ["replay-nofuse", "fused"])
def test_steady_state_has_no_host_work_but_one_submit(device, qwen3moe, mode):
    """The expert ids stay on the GPU: nothing is written or recorded per token."""
    with make_executor(mode, device, qwen3moe.program, qwen3moe.weights) as ex:
        assert replay_host_work(ex) == {(0, 0, 0, 0, 0, 1)}


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q4_0", "q4_k"])
def test_gguf_weight_dtypes(device, models_dir, dtype):
    """GGUF qwen3moe (llama.cpp's names, 3-D expert tensors) in the weight dtypes of dense models:
    fused and unfused against the reference on the same dequantized weights. Hidden 256: K-quant
    rows are whole 256-element superblocks."""
    d = tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True, hidden_size=256, moe_intermediate_size=256)
    m = load_model(write_gguf(d, models_dir / f"qwen3moe-h256.{dtype}.gguf", dtype), ctx=32)
    assert m.weights["layers.0.exp_gate"].dtype == dtype and m.args.arch == "qwen3moe"
    ref = Reference(m.program, m.weights)
    toks = {}
    for mode in ("unfused", "fused"):
        with make_executor(mode, device, m.program, m.weights) as ex:
            toks[mode] = greedy_against_reference(ex, ref, 12)[0]
    assert toks["unfused"] == toks["fused"]


FAMILIES = {
    "mixtral": ("mixtral", {}),
    "qwen2moe": ("qwen2moe", {}),
    "olmoe": ("olmoe", {}),
    # a dense layer 0 (mlp_only_layers) before the sparse ones
    "qwen3moe-mixed": ("qwen3moe", {"mlp_only_layers": [0], "num_hidden_layers": 3}),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_other_families_in_every_mode(device, models_dir, family):
    arch, over = FAMILIES[family]
    m = load_model(tiny_hf_model(arch, models_dir, **over), ctx=48)
    ref = Reference(m.program, m.weights)
    toks = {}
    for mode in MODES:
        with make_executor(mode, device, m.program, m.weights) as ex:
            toks[mode] = greedy_against_reference(ex, ref, STEPS)[0]
            if mode == "fused":
                rules = [r.rule for r in ex.regions]
                assert MOE_RULES <= set(rules)
                assert rules.count(SHARED) == (m.args.n_layers if m.args.shared_expert_ffn else 0), rules
    assert toks["unfused"] == toks["replay-nofuse"] == toks["fused"]
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((16, 8, 3))
        toks = prompt(37)
        check_against(dec, toks, *reference_path(m, toks), what=family)


SHARED = "MATMUL_SIGMOID_SCALE_ADD"
# The fused step's (dispatches, barriers) without the rule -> with it. A MoE layer's shared down,
# sigmoid_scale and add_rms_norm become one dispatch (2 fewer), and the layer input's norm after it
# folds into the next projections: qwen2moe's q/k/v with their biases 6 -> 1, a Qwen3.5 linear
# layer's 4 matvecs 1, a full layer's 4 also 1; the head's 3 (matmul, argmax and its final pass) 2,
# or 4 on lavapipe's shapes, where the head runs its ops (caps.head_ops).
SHARED_STEPS = {  # family: (MoE layers, {launch shape: (without, with)})
    "qwen2moe": (2, {"cpu": ((31, 24), (23, 18)), "gpu": ((31, 24), (21, 16))}),  # 4 + 5 -/+ 1
    "qwen35moe": (4, {"cpu": ((60, 42), (44, 35)), "gpu": ((60, 42), (42, 33))}),  # 8 + 3 x 3 -/+ 1
    "qwen3next": (3, {"cpu": ((51, 38), (40, 33)), "gpu": ((51, 38), (38, 31))}),  # 6 + 2 x 3 -/+ 1
}


@pytest.mark.parametrize("shape", ["cpu", "gpu"])
@pytest.mark.parametrize("family", SHARED_STEPS)
def test_shared_expert_gate_folds_into_its_down(device, models_dir, family, shape):
    """Each MoE layer's shared down, sigmoid gate and residual add are one matmul_add dispatch
    (MATMUL_SIGMOID_SCALE_ADD): fewer dispatches and barriers than the step built without the rule,
    token for token with the reference. A GPU's launch shapes (matvec lanes and rows, norm_pre on,
    the head fused): each such call also writes the next norm's inputs (NORM_OUT)."""
    from dataclasses import replace

    from fusion.rules import DEFAULT_RULES
    from vkdecode.lowering.caps import KernelCaps

    moe_layers, steps = SHARED_STEPS[family]
    m = load_model(tiny_hf_model(family, models_dir), ctx=48)
    caps = KernelCaps.from_info(device.info)
    if shape == "gpu":
        over = {"matvec_wg": 0, "matvec_rows": 0, "norm_pre": 1, "head_ops": False}
        caps = replace(KernelCaps.from_info(device.info, **over), device_cpu=False)
    without = [r for r in DEFAULT_RULES if r.name != SHARED]
    with (
        make_executor("fused", device, m.program, m.weights, caps=caps) as ex,
        make_executor("fused", device, m.program, m.weights, caps=caps, rules=without) as apart,
    ):
        counts = [(len(e.items), sum(it.barrier for it in e.items)) for e in (apart, ex)]
        assert counts == list(steps[shape])
        assert [r.rule for r in ex.regions].count(SHARED) == moe_layers
        gated = [it.call for it in ex.items if ("SIGMOID_OUT", "1") in it.call.defines]
        assert len(gated) == moe_layers
        assert shape == "cpu" or all(("NORM_OUT", "1") in c.defines for c in gated)
        greedy_against_reference(ex, Reference(m.program, m.weights), 14)


def test_speculative_verify_steps_equal_plain_decode(device, models_dir):
    """Verify steps (the chunk program with every row's logits) run the MoE ops per row too."""
    m = load_model(tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True), ctx=96)
    toks = [int(t) for t in np.random.default_rng(7).integers(3, 290, 8)] * 3
    with Decoder(make_executor("fused", device, m.program, m.weights)) as dec:
        dec.set_prefill((8,))
        plain = plain_tokens(dec, toks, 30)
        dec.set_speculative(4, always_verify=True, no_draft_burst=1)  # a look at every token
        assert spec_tokens(dec, toks, 30) == plain
        assert dec.speculative.stats.verify_steps > 0


@pytest.mark.parametrize("family,arch", [("mixtral", "llama"), ("qwen2moe", "qwen2moe"), ("olmoe", "olmoe")])
def test_other_families_gguf_q8_0(device, models_dir, family, arch):
    """GGUF as llama.cpp writes it (Mixtral as a `llama` with experts, q/k rows permuted) in q8_0
    (Qwen2-MoE's shared expert 64 wide: whole q8_0 blocks)."""
    over = {"shared_expert_intermediate_size": 64} if family == "qwen2moe" else {}
    d = tiny_hf_model(family, models_dir, **over)
    m = load_model(write_gguf(d, models_dir / f"{family}-gpu.q8_0.gguf", "q8_0", arch=arch), ctx=32)
    assert m.args.arch == arch and m.weights["layers.0.exp_down"].dtype == "q8_0"
    with make_executor("fused", device, m.program, m.weights) as ex:
        assert MOE_RULES <= {r.rule for r in ex.regions}
        greedy_against_reference(ex, Reference(m.program, m.weights), 12)


GPT_OSS_CASES = {"gqa": {}, "mha-hd32": {"num_key_value_heads": 4, "head_dim": 32}, "mxfp4": {}}


@pytest.mark.parametrize("case", GPT_OSS_CASES)
def test_gpt_oss_in_every_mode(device, models_dir, case):
    """gpt-oss (sinks, sliding layers of 6 keys, YaRN, expert biases, the clamped GLU): every decode
    mode against the reference step by step, then prompt chunks of 16 / 8 / 3 rows and speculative
    verify steps against the token-by-token path. mxfp4: the experts as OpenAI ships them (MXFP4
    blocks and scales), kept as mxfp4 on the device."""
    d = tiny_hf_model("gpt_oss", models_dir, **GPT_OSS_CASES[case])
    if case == "mxfp4":
        d = mxfp4_hf_model(d, models_dir / "hf-gpt_oss-mxfp4")
    m = load_model(d, ctx=64)
    assert {m.weights[f"layers.0.exp_{p}"].dtype for p in ("gate", "up", "down")} == {
        "mxfp4" if case == "mxfp4" else m.weights["layers.0.wq"].dtype
    }
    ref = Reference(m.program, m.weights)
    toks = {}
    for mode in MODES:
        with make_executor(mode, device, m.program, m.weights) as ex:
            toks[mode] = greedy_against_reference(ex, ref, STEPS)[0]
            if mode == "fused":  # each layer's MoE block: router, gate/up, down with the residual
                rules = [r.rule for r in ex.regions]
                for rule in GPT_OSS_MOE_RULES:
                    assert rules.count(rule) == m.args.n_layers, rules
                shaders = [it.call.shader for it in ex.items]
                for shader in ("rms_norm_matmul_moe_topk", "matmul_silu_mul", "moe_matmul_sum_add"):
                    assert shaders.count(shader) == m.args.n_layers, shaders
                assert not {"moe_topk", "moe_bias", "moe_sum", "add"} & set(shaders), shaders
    assert toks["unfused"] == toks["replay-nofuse"] == toks["fused"]
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((16, 8, 3))
        chunked = prompt(37)
        check_against(dec, chunked, *reference_path(m, chunked), what="gpt_oss")
    with Decoder(make_executor("fused", device, m.program, m.weights)) as dec:
        dec.set_prefill((8,))
        spec = [int(t) for t in np.random.default_rng(3).integers(3, 290, 8)] * 3
        plain = plain_tokens(dec, spec, 20)
        dec.set_speculative(4, always_verify=True, no_draft_burst=1)  # a look at every token
        assert spec_tokens(dec, spec, 20) == plain


@pytest.mark.parametrize("dtype", ["q8_0", "mxfp4"])
def test_gpt_oss_gguf(device, models_dir, dtype):
    """A gpt-oss GGUF as llama.cpp's converter writes it, matrices q8_0 or MXFP4 (gpt-oss's own
    expert format, kept as mxfp4), biases f32: fused and unfused against the reference on the same
    dequantized weights."""
    d = tiny_hf_model("gpt_oss", models_dir, **GPT_OSS_TRUNCATED)
    m = load_model(write_gguf(d, models_dir / f"gpt-oss-gpu.{dtype}.gguf", dtype), ctx=32)
    assert m.args.arch == "gpt-oss" and m.weights["layers.0.exp_down"].dtype == dtype
    assert m.weights["layers.0.exp_down_b"].dtype == "f32"
    toks = {}
    for mode in ("unfused", "fused"):
        with make_executor(mode, device, m.program, m.weights) as ex:
            toks[mode] = greedy_against_reference(ex, Reference(m.program, m.weights), 12)[0]
    assert toks["unfused"] == toks["fused"]


def test_gpt_oss_mxfp4_checkpoint(device, models_dir):
    """OpenAI's MXFP4 experts (HF blocks and scales) kept as mxfp4: fused against the reference."""
    d = mxfp4_hf_model(tiny_hf_model("gpt_oss", models_dir), models_dir / "hf-gpt_oss-mxfp4")
    m = load_model(d, ctx=32)
    assert m.weights["layers.0.exp_up"].dtype == "mxfp4"
    with make_executor("fused", device, m.program, m.weights) as ex:
        greedy_against_reference(ex, Reference(m.program, m.weights), 12)
