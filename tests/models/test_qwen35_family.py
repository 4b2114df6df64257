"""What every Qwen3.5-family model (linear attention with recurrent state: qwen35.py, qwen35moe.py,
qwen3next.py) must do, on each one's tiny random model: every decode mode token for token with the
reference, the user's path equal to transformers' generate, prompt chunks equal to the token path,
and speculative decode (whose verify step must be taken back out of the states) equal to plain. Each
model's own checks (config, weights, logits against transformers) stay in its test file.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from fusion.rules import DEFAULT_RULES
from tests.helpers.make_models import tiny_hf_model
from tests.helpers.qwen35_checks import check_prompt_chunks, check_speculative_equals_plain, check_user_path
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.executors import make_executor
from vkdecode.lowering.caps import KernelCaps
from vkdecode.models.loader import load_model
from vkdecode.models.moe import is_moe
from vkdecode.models.qwen35 import LINEAR
from vkdecode.reference import Reference

CTX = 64


@pytest.fixture(scope="module", params=["qwen35", "qwen35moe", "qwen3next"])
def tiny(request, models_dir):
    path = tiny_hf_model(request.param, models_dir)
    return path, load_model(str(path), ctx=CTX)


@pytest.mark.parametrize("mode", ["unfused", "replay-nofuse", "fused"])
def test_modes_match_the_reference(device, tiny, mode):
    _, m = tiny
    with make_executor(mode, device, m.program, m.weights) as ex:
        toks, _ = greedy_against_reference(ex, Reference(m.program, m.weights), 14)
        if mode == "fused":  # each MoE layer's gated shared expert ends in its down's rule
            moe_layers = sum(is_moe(m.args, i) for i in range(m.args.n_layers))
            assert [r.rule for r in ex.regions].count("MATMUL_SIGMOID_SCALE_ADD") == moe_layers
    assert len(set(toks)) > 3  # not a constant run


GATED = "RMS_NORM_SILU_MUL_MATMUL_ADD"


def test_fused_step_folds_the_gated_norm(device, tiny):
    """Each linear layer's per-head norm, silu(z) gate and out_proj + residual are one dispatch
    (RMS_NORM_SILU_MUL_MATMUL_ADD): two dispatches fewer a linear layer than with the rule left out
    (rms_norm, silu_mul, then MATMUL_ADD; the dense tiny model: 34 -> 28)."""
    _, m = tiny
    linear = m.args.layer_types.count(LINEAR)
    without = [r for r in DEFAULT_RULES if r.name != GATED]
    with (
        make_executor("fused", device, m.program, m.weights) as ex,
        make_executor("fused", device, m.program, m.weights, rules=without) as apart,
    ):
        assert [r.rule for r in ex.regions].count(GATED) == linear
        assert [r.rule for r in apart.regions].count(GATED) == 0
        assert len(apart.items) - len(ex.items) == 2 * linear


def test_fused_step_folds_the_attention_gate(device, tiny):
    """Each full-attention layer's sigmoid output gate goes into o_proj's x load
    (SIGMOID_SCALE_MATMUL_ADD): one dispatch and one barrier fewer a full layer than without it."""
    _, m = tiny
    full = len(m.args.layer_types) - m.args.layer_types.count(LINEAR)
    rule = "SIGMOID_SCALE_MATMUL_ADD"
    with (
        make_executor("fused", device, m.program, m.weights) as ex,
        make_executor(
            "fused", device, m.program, m.weights, rules=[r for r in DEFAULT_RULES if r.name != rule]
        ) as apart,
    ):
        assert [r.rule for r in ex.regions].count(rule) == full > 0
        assert len(apart.items) - len(ex.items) == full
        assert sum(it.barrier for it in apart.items) - sum(it.barrier for it in ex.items) == full
        # and the shared expert's gate, MoE layers': no sigmoid_scale dispatch is left
        assert "sigmoid_scale" not in {it.call.shader for it in ex.items}


def test_fused_gpu_shapes_match_the_reference(device, tiny):
    """A GPU's launch shapes on lavapipe (matvec lanes and rows from matvec_shape, the out_proj
    writing the next norm's inputs: norm_pre), the gated norm's kernel included: token for token
    with the reference."""
    _, m = tiny
    caps = KernelCaps.from_info(device.info, matvec_wg=0, matvec_rows=0, norm_pre=1, head_ops=False)
    with make_executor("fused", device, m.program, m.weights, caps=replace(caps, device_cpu=False)) as ex:
        gated = [it.call for it in ex.items if ("GATED_NORM", "1") in it.call.defines]
        assert len(gated) == m.args.layer_types.count(LINEAR)
        assert all((c.spec[0], c.spec[3]) != (16, 16) for c in gated)  # not lavapipe's lanes x rows
        # the dense FFN's fused norm reads the norm_pre inputs they write (MoE layers: as the router takes)
        assert m.args.n_experts or all(("NORM_OUT", "1") in c.defines for c in gated)
        greedy_against_reference(ex, Reference(m.program, m.weights), 14)


def test_user_path_equals_transformers_generate(device, tiny):
    check_user_path(device, tiny[0], CTX)


@pytest.mark.parametrize("mode", ["unfused", "fused"])
def test_prompt_chunks_equal_the_token_path(device, tiny, mode):
    check_prompt_chunks(device, tiny[1], mode)


def test_speculative_equals_plain_decode(device, tiny):
    check_speculative_equals_plain(device, tiny[1])
