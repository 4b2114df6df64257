"""The numpy oracle against transformers (tiny random models), op semantics, and the real model."""

import numpy as np
import pytest

from fusion.ir import Program
from tests.helpers.make_models import hf_logits, load_smollm2, models_dir, tiny_hf_model, write_gguf
from vkdecode.errors import ContextError
from vkdecode.models import build_program
from vkdecode.models.gguf_names import permute_rows
from vkdecode.models.rope import inv_freq
from vkdecode.models.weights import load_weights
from vkdecode.quant import pack_float
from vkdecode.reference import Reference, make_step, run_op

PROMPT, DECODE = 16, 16


@pytest.fixture(scope="module")
def mdir(tmp_path_factory):
    return models_dir(tmp_path_factory)


def rel_err(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def run_greedy(ref: Reference, prompt: list[int], n_decode: int):
    """Prompt one token per step, then greedy decode; -> (tokens fed, logits per step)."""
    tokens, logits = list(prompt), []
    for pos in range(len(prompt) + n_decode):
        out = ref.step(tokens[pos], pos)
        logits.append(out["logits"])
        if pos + 1 >= len(tokens) and pos + 1 < len(prompt) + n_decode:
            tokens.append(int(out["next_token"][0]))
    return tokens, np.array(logits)


def reference_for(path, ctx=64, dtype=np.float32):
    args, weights, _ = load_weights(path)
    return Reference(build_program(args, ctx, {k: w.dtype for k, w in weights.items()}), weights, dtype)


PROMPT_IDS = [int(t) for t in np.random.default_rng(1).integers(3, 300, PROMPT)]


@pytest.mark.parametrize("arch,tied", [("llama", False), ("llama", True), ("qwen2", False), ("qwen3", True)])
def test_matches_transformers(mdir, arch, tied):
    d = tiny_hf_model(arch, mdir, tied=tied)
    tokens, logits = run_greedy(reference_for(d), PROMPT_IDS, DECODE)
    ref = hf_logits(d, tokens)
    assert np.abs(ref).max() > 1.0  # logits are not degenerate
    assert rel_err(logits, ref) <= 1e-4
    # the greedy tokens are transformers' greedy tokens too
    assert list(ref.argmax(axis=1)[PROMPT - 1 : -1]) == tokens[PROMPT:]


def test_float64_option(mdir):
    d = tiny_hf_model("qwen2", mdir)
    _, l32 = run_greedy(reference_for(d), PROMPT_IDS[:4], 2)
    _, l64 = run_greedy(reference_for(d, dtype=np.float64), PROMPT_IDS[:4], 2)
    assert l64.dtype == np.float64 and rel_err(l32, l64) <= 1e-5


def test_gguf_llama_pairs_layout_matches_hf(mdir):
    """GGUF llama (q/k rows permuted, rope "pairs") equals the HF model with the same f16 weights
    (rope "neox"): the permutation and the pairs layout cancel exactly."""
    d = tiny_hf_model("llama", mdir)
    g = write_gguf(d, mdir / "llama-ref.f16.gguf", "f16")
    ga, gw, _ = load_weights(g)
    ha, hw, _ = load_weights(d)
    hw16 = {k: pack_float(w.dequantize(), "f16") if len(w.shape) == 2 else w for k, w in hw.items()}
    assert ga.rope_layout == "pairs" and ha.rope_layout == "neox"
    g_ref = Reference(build_program(ga, 64, {k: w.dtype for k, w in gw.items()}), gw)
    h_ref = Reference(build_program(ha, 64, {k: w.dtype for k, w in hw16.items()}), hw16)
    _, lg = run_greedy(g_ref, PROMPT_IDS, 4)
    _, lh = run_greedy(h_ref, PROMPT_IDS, 4)
    assert rel_err(lg, lh) <= 1e-4
    toks = PROMPT_IDS + [int(t) for t in lh.argmax(axis=1)[PROMPT - 1 : -1]]
    assert rel_err(lg, hf_logits(d, toks)) <= 2e-2  # f16 rounding of a random, sharp model


def test_reset_and_context(mdir):
    ref = reference_for(tiny_hf_model("llama", mdir), ctx=8)
    first = ref.step(5, 0)["logits"].copy()
    ref.step(6, 1)
    assert "layers.0.q" in ref.values and ref.values["logits"].shape == (300,)
    ref.reset()
    assert np.array_equal(ref.step(5, 0)["logits"], first)
    with pytest.raises(ContextError):
        ref.step(5, 8)


# ---------------------------------------------------------------- single ops


def one_op(kind, ins: dict, outs: dict, **attrs):
    """A one-op Program: ins/outs map name -> (shape, dtype, kind)."""
    p = Program("t")
    for name, (shape, dtype, k) in {**ins, **outs}.items():
        p.value(name, shape, dtype, k)
    return p, p.op(kind, list(ins), list(outs), **attrs)


def test_rope_pairs_equals_permuted_neox():
    h, d = 3, 8
    x = np.random.default_rng(0).standard_normal(h * d).astype(np.float32)
    res = {}
    for layout in ("neox", "pairs"):
        p, op = one_op(
            "rope",
            {
                "x": ((h * d,), "f32", "activation"),
                "step": ((8,), "u32", "step"),
                "freqs": ((d // 2,), "f32", "weight"),
            },
            {"y": ((h * d,), "f32", "activation")},
            n_heads=h,
            head_dim=d,
            layout=layout,
        )
        xin = x if layout == "neox" else permute_rows(x, h)
        res[layout] = run_op(op, p, {"x": xin, "step": make_step(0, 7), "freqs": inv_freq(10000.0, d)})["y"]
    np.testing.assert_allclose(res["pairs"], permute_rows(res["neox"], h), rtol=1e-6, atol=1e-6)
    # position 0 is the identity
    res0 = run_op(op, p, {"x": x, "step": make_step(0, 0), "freqs": inv_freq(10000.0, d)})["y"]
    np.testing.assert_allclose(res0, x, rtol=1e-6)


def test_attention_gqa_against_loop():
    h, kvh, d, ctx, pos = 4, 2, 8, 6, 3
    rng = np.random.default_rng(0)
    q = rng.standard_normal(h * d).astype(np.float32)
    kc, vc = (rng.standard_normal((ctx, kvh * d)).astype(np.float32) for _ in range(2))
    p, op = one_op(
        "attention",
        {
            "q": ((h * d,), "f32", "activation"),
            "kc": ((ctx, kvh * d), "f32", "state"),
            "vc": ((ctx, kvh * d), "f32", "state"),
            "step": ((8,), "u32", "step"),
        },
        {"o": ((h * d,), "f32", "activation")},
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=d,
        scale=0.3,
    )
    got = run_op(op, p, {"q": q, "kc": kc, "vc": vc, "step": make_step(0, pos)})["o"]
    want = []
    for i in range(h):
        j = i // (h // kvh)
        s = np.array([0.3 * q[i * d : (i + 1) * d] @ kc[t, j * d : (j + 1) * d] for t in range(pos + 1)])
        w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        want.append(sum(w[t] * vc[t, j * d : (j + 1) * d] for t in range(pos + 1)))
    np.testing.assert_allclose(got, np.concatenate(want), rtol=1e-5, atol=1e-6)


def _attention_with_sinks(h, kvh, d, ctx, window):
    p, op = one_op(
        "attention",
        {
            "q": ((h * d,), "f32", "state"),  # verify(): no op produces it here
            "kc": ((ctx, kvh * d), "f32", "state"),
            "vc": ((ctx, kvh * d), "f32", "state"),
            "step": ((8,), "u32", "step"),
            "sinks": ((h,), "f32", "weight"),
        },
        {"o": ((h * d,), "f32", "activation")},
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=d,
        scale=0.3,
        **({"window": window} if window else {}),
    )
    return p.verify(), op


@pytest.mark.parametrize("window", [0, 3])
def test_attention_sinks_match_transformers(window):
    """gpt-oss's sinks against transformers' own eager_attention_forward (cat the sink logit to the
    scores, subtract the max, softmax, drop its column): GQA, a sliding window, one sink so large it
    takes nearly all the mass and one so small it takes none."""
    torch = pytest.importorskip("torch")
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    h, kvh, d, ctx, pos = 6, 2, 8, 9, 6
    rng = np.random.default_rng(1)
    q = rng.standard_normal(h * d)
    kc, vc = (rng.standard_normal((ctx, kvh * d)) for _ in range(2))
    sinks = rng.normal(0.0, 2.0, h)
    sinks[0], sinks[1] = 30.0, -30.0
    p, op = _attention_with_sinks(h, kvh, d, ctx, window)
    env = {"q": q, "kc": kc, "vc": vc, "step": make_step(0, pos), "sinks": sinks}
    got = run_op(op, p, env, dtype=np.float64)["o"]

    lo = max(0, pos - window + 1) if window else 0
    module = type("Attn", (), {})()
    module.sinks, module.num_key_value_groups, module.training = torch.tensor(sinks), h // kvh, False
    keys, values = (torch.tensor(c[lo : pos + 1].reshape(-1, kvh, d)).transpose(0, 1)[None] for c in (kc, vc))
    want, _ = gpt_oss.eager_attention_forward(
        module, torch.tensor(q.reshape(1, h, 1, d)), keys, values, None, scaling=0.3
    )
    want = want.numpy().reshape(-1)  # (1, 1, h, d): token-major
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    # the sink matters: without it (a -inf logit) the result is far off
    no_sink = run_op(op, p, {**env, "sinks": np.full(h, -np.inf)}, dtype=np.float64)["o"]
    assert np.abs(no_sink - want).max() > 0.1
    assert np.abs(got[:d]).max() < 1e-9 < np.abs(no_sink[:d]).max()  # head 0: the sink takes it all


def test_rms_norm_per_head_kv_write_argmax():
    x = np.arange(8, dtype=np.float32)
    p, op = one_op(
        "rms_norm",
        {"x": ((8,), "f32", "activation"), "w": ((4,), "f32", "weight")},
        {"y": ((8,), "f32", "activation")},
        eps=0.0,
    )
    y = run_op(op, p, {"x": x, "w": np.ones(4, np.float32)})["y"]
    for head in (slice(0, 4), slice(4, 8)):  # each head normalised on its own
        np.testing.assert_allclose(y[head], x[head] / np.sqrt(np.mean(x[head] ** 2)), rtol=1e-6)
    p, op = one_op(
        "kv_write",
        {"k": ((4,), "f32", "activation"), "v": ((4,), "f32", "activation"), "step": ((8,), "u32", "step")},
        {"kc": ((3, 4), "f32", "state"), "vc": ((3, 4), "f32", "state")},
    )
    env = {"k": np.ones(4, np.float32), "v": 2 * np.ones(4, np.float32), "step": make_step(0, 0)}
    env.update(run_op(op, p, env))
    env.update(k=3 * env["k"], step=make_step(0, 2))
    env.update(run_op(op, p, env))
    assert env["kc"][:, 0].tolist() == [1, 0, 3] and env["vc"][:, 0].tolist() == [2, 0, 2]
    p, op = one_op("argmax", {"l": ((5,), "f32", "activation")}, {"t": ((1,), "u32", "output")})
    assert run_op(op, p, {"l": np.array([0, 3, 1, 3, 2], np.float32)})["t"].tolist() == [1]


# ---------------------------------------------------------------- the real model


def test_smollm2_answers_paris():
    m = load_smollm2()
    tok = m.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    assert text.endswith("<|im_start|>assistant\n")
    ref = Reference(m.program, m.weights)
    ids = tok.encode(text)
    for pos, t in enumerate(ids):
        out = ref.step(t, pos)
    stream, text_out, nxt, pos = tok.stream(), "", int(out["next_token"][0]), len(ids)
    for _ in range(24):
        if nxt in tok.eos_ids:
            break
        text_out += stream.add(nxt)
        nxt = int(ref.step(nxt, pos)["next_token"][0])
        pos += 1
    assert tok.id_to_token(nxt) == "<|im_end|>"
    assert text_out + stream.flush() == "The capital of France is Paris."


def _linear_attention_program(c, kk, hk, hv, dk, dv) -> Program:
    p = Program("linear")
    p.value("x", (c,), "f32", "state")  # inputs the test writes (no op produces them)
    p.value("cw", (c * kk,), "f32", "weight")
    p.value("step", (8,), "u32", "step")
    p.value("y", (c,), "f32", "activation")
    p.value("hist", ((kk - 1) * c,), "f32", "state")
    p.op("conv1d_step", ["x", "cw", "step"], ["y", "hist"], kernel=kk)
    for n in ("ga", "gb"):
        p.value(n, (hv,), "f32", "state")
    p.value("a_log", (hv,), "f32", "weight")
    p.value("dt_bias", (hv,), "f32", "weight")
    p.value("o", (hv * dv,), "f32", "output")
    p.value("s", (hv * dk * dv,), "f32", "state")
    p.op(
        "gated_delta_step",
        ["y", "ga", "gb", "a_log", "dt_bias", "step"],
        ["o", "s"],
        n_k_heads=hk,
        n_v_heads=hv,
        k_dim=dk,
        v_dim=dv,
    )
    return p.verify()


@pytest.mark.parametrize("hk,hv", [(2, 4), (2, 2)])
def test_linear_attention_matches_transformers(hk, hv):
    """Qwen3.5's Gated DeltaNet step by step (conv1d_step then gated_delta_step, float64) against
    transformers' own torch forms over the whole sequence: causal_conv1d_fn with SiLU, and the gated
    delta rule both recurrent and chunked (l2-normed q and k, grouped value heads). A sequence
    restarting at position 0 gives the same outputs again (the states read as zeros there)."""
    torch = pytest.importorskip("torch")
    q35 = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    kk, dk, dv, t = 4, 8, 6, 11
    c = 2 * hk * dk + hv * dv
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((t, c))
    cw = rng.standard_normal((c, kk)) * 0.5
    ga, gb = rng.standard_normal((t, hv)) * 2, rng.standard_normal((t, hv))
    ga[0, 0] = 25.0  # softplus's linear branch (above 20)
    a_log, dt_bias = rng.uniform(-1, 1, hv), rng.uniform(-1, 1, hv)
    p = _linear_attention_program(c, kk, hk, hv, dk, dv)
    ref = Reference(p, {"cw": cw.reshape(-1), "a_log": a_log, "dt_bias": dt_bias}, dtype=np.float64)

    def run():
        ys, os_ = [], []
        for i in range(t):
            env = {**ref.weights, **ref.state, "step": make_step(0, i), "x": xs[i], "ga": ga[i], "gb": gb[i]}
            for op in p.ops:
                env.update(run_op(op, p, env, np.float64))
            ys.append(env["y"])
            os_.append(env["o"])
        return np.stack(ys), np.stack(os_)

    ys, outs = run()
    conv = q35.causal_conv1d_fn(torch.tensor(xs.T[None]), torch.tensor(cw), None, activation="silu")
    np.testing.assert_allclose(ys, conv[0].numpy().T, rtol=1e-10, atol=1e-12)
    y = torch.tensor(ys[None])
    # q and k heads repeated to the value heads as the model does before the rule (transformers
    # 5.17's rules need it; 5.25's group the heads themselves and take it as well)
    q = y[..., : hk * dk].reshape(1, t, hk, dk).repeat_interleave(hv // hk, dim=2)
    k = y[..., hk * dk : 2 * hk * dk].reshape(1, t, hk, dk).repeat_interleave(hv // hk, dim=2)
    v = y[..., 2 * hk * dk :].reshape(1, t, hv, dv)
    g = -torch.tensor(a_log).exp() * torch.nn.functional.softplus(torch.tensor(ga) + torch.tensor(dt_bias))
    beta = torch.tensor(gb).sigmoid()
    for rule in (q35.torch_recurrent_gated_delta_rule, q35.torch_chunk_gated_delta_rule):
        # transformers' rules compute in float32 whatever their inputs
        want, _ = rule(q, k, v, g=g[None], beta=beta[None], use_qk_l2norm_in_kernel=True)
        want = want[0].numpy().reshape(t, -1)
        assert np.abs(outs - want).max() <= 2e-6 * np.abs(want).max(), rule.__name__
    again = run()  # a new sequence from position 0 over the same states: nothing of the first leaks
    np.testing.assert_array_equal(again[1], outs)
