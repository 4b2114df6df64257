"""(QK_NORM_)ROPE_KV_WRITE_ATTENTION -> one fused dispatch on the split-K grid (+ attention_combine
when split, which absorb_combines then hands to the o-projection), and ADD_RMS_NORM -> one dispatch."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from fusion.ir import Program
from fusion.region import Region
from vkdecode.lowering.calls import (
    AttnGrid,
    Binding,
    KernelCall,
    KernelCaps,
    attention_splits,
    combine_call,
    flat_groups,
    kv_defines,
    partials,
    reduce_defines,
    wg_size,
)

# Decode attention is latency-bound (a few rows per workgroup, chains of dependent loads), so the
# grid trades workgroups per head (splits, whose partials the o-projection combines as it loads:
# absorb_combines) against rows per workgroup. H100, tok/s of the whole fused step at ctx 192
# (bench/sweep_attention.py, bench/results/nvidia-h100-80gb-hbm3/2026-11-21-attention-sweeps/sweep-wg-*.json), subgroup-rows
# kernel: SmolLM2 shape (head_dim 64) 1417 / 1459 / 1486 with 1 / 2 / 4 splits of 256 invocations,
# 1496 with 4 of 512; Qwen3-0.6B shape (head_dim 128) f16 916 / 935 / 952 with 1 / 2 / 4 of 256,
# 956 with 2 of 512; 1024 invocations was slower for both. The workgroup form (the portable
# fallback) was best at 256 invocations and 4 splits (sweep-kern-*.json).
ATTN_WG = 256  # invocations per workgroup, workgroup form
ATTN_WG_SG = 512  # invocations per workgroup, subgroup-rows form
SPLIT_WIDTH = 256  # automatic splits: about this many head elements per head over all splits
# and at least this many for heads up to 128 wide: H100, ctx 1024, whole step GPU µs at positions
# 16-48 / 400-432, 2 splits (SPLIT_WIDTH's) vs 4: Qwen3-0.6B F16 1147 / 1232 vs 1073 / 1136,
# Llama-3.1-8B Q4_K_M 4234 / 4333 vs 4111 / 4204; 8 were worse than 4 there and for head_dim 64
# (SmolLM2 695 vs 709, Llama-3.2-1B 1227 vs 1242; bench/results/nvidia-h100-80gb-hbm3/2026-11-25-attn-splits/)
MIN_SPLITS_128 = 4
SPLIT_ROWS_CTX = 256  # the context those sweeps ran at: GPU live splits keep its rows per split (live_rows)
# GPU grids at most this many splits: H100, Qwen3's 16 heads x 16 = 256 workgroups, about 2 per SM;
# position 1000 gets 16 splits of 63 rows (head_dim 64 and 128), whatever --ctx is
MAX_SPLITS = 16
CX_BATCH = 8  # splits the o-projection's absorbed combine loads together (matmul_add.comp CX_B)
SG_BATCH = 8  # rows per subgroup batch of the subgroup-rows kernel (registers: 2 x RB x EPL)


def attention_grid(ctx: int, head_dim: int, caps: KernelCaps) -> tuple[int, int, int]:
    """(splits S, max rows per split, live splits at least) of the fused attention. CPUs
    (caps.attn_live_rows < 0): calls.attention_splits (bounded by attn_max_chunk rows at full
    context), and at least caps.attn_splits. GPUs: the grid of live splits of gpu_split_rows rows,
    at most max_splits of them (beyond that the rows per split grow), so a position runs the same
    splits, of the same rows, whatever --ctx is (before, S = ctx / attn_max_chunk clamped the live
    count: position 1000, head_dim 128 ran 5 splits at ctx 1280 and 8 at 8192). The minimum (the
    third value; automatic: 4 for head_dim 64 and 128) keeps small positions spread over a GPU."""
    want = caps.attn_splits or max(
        1, min(8, SPLIT_WIDTH // head_dim), MIN_SPLITS_128 if head_dim <= 128 else 1
    )
    if caps.attn_live_rows >= 0:
        rows = gpu_split_rows(want, caps)
        s = min(ctx, max(want, min(max_splits(want, caps), -(-ctx // rows))))
        # rows a split may get: rows until every split is live, then ctx / S (shared arrays, RB)
        return s, max(min(rows, -(-ctx // min(want, s))), -(-ctx // s)), min(want, s)
    s, maxchunk = attention_splits(ctx, caps)
    if s < want:
        s = min(want, ctx)
        maxchunk = -(-ctx // s)
    return s, maxchunk, min(want, s)


def gpu_split_rows(min_s: int, caps: KernelCaps) -> int:
    """Rows per live split on GPUs: the split size tuned at ctx 192-256 (SPLIT_ROWS_CTX / min_s: 64
    rows for head_dim 64, 128 for 128) or caps.attn_live_rows, at most caps.attn_max_chunk."""
    return max(1, min(caps.attn_max_chunk, caps.attn_live_rows or -(-SPLIT_ROWS_CTX // max(1, min_s))))


def max_splits(min_s: int, caps: KernelCaps) -> int:
    """Splits of a GPU attention grid at most (caps.attn_max_splits, automatic MAX_SPLITS): each
    o-projection workgroup that absorbs the combine reads every live split's partials, so that
    redundant read, not only the attention's rows, grows with the live splits."""
    return max(min_s, caps.attn_max_splits or MAX_SPLITS)


def live_rows(maxchunk: int, min_s: int, caps: KernelCaps) -> int:
    """Rows per live split of a step (attn_live_splits divides a position's rows by this): at most
    the grid's MAXCHUNK. GPUs keep splits of the size tuned at short contexts (gpu_split_rows), so
    mid positions of a long context spread over as many workgroups as there are such splits
    (position 1000, head_dim 64: 16 splits of 63 rows rather than 4 of 250); a CPU
    (caps.attn_live_rows < 0) takes the fewest splits, each workgroup costing it."""
    if caps.attn_live_rows < 0:
        return maxchunk
    return min(maxchunk, gpu_split_rows(min_s, caps))


def subgroup_rows(d: int, wg: int, caps: KernelCaps) -> bool:
    """The subgroup-rows kernel needs subgroup arithmetic, a subgroup size the driver cannot change
    under it (min == max), and a head that splits evenly over the lanes, a few elements each."""
    lanes = caps.subgroup_size
    return (
        caps.attn_kernel != "wg"
        and caps.subgroup_arithmetic
        and caps.subgroup_fixed
        and wg % lanes == 0
        and d % lanes == 0
        and 1 <= d // lanes <= 16
    )


def _sg_shared_bytes(wg: int, lanes: int, d: int) -> int:
    """Shared memory of the subgroup-rows kernel: (m, l, w, o[D]) per subgroup for the final merge."""
    return 4 * ((wg // lanes) * (d + 3) + 1)


def rope_kv_write_attention(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    r, a = region.roles, region.attrs
    h, kvh, d = int(a["n_heads"]), int(a["n_kv_heads"]), int(a["head_dim"])
    if d % 2 or h % kvh:
        return None
    out = r["out"]
    ctx = p.values[r["k_cache"]].shape[0]
    window = int(a.get("window", 0))
    s, maxchunk, min_s = attention_grid(min(ctx, window) if window else ctx, d, caps)  # rows it can see
    qk_norm = "q_norm_w" in r
    defines = (
        reduce_defines(caps)
        + ((("NEOX", "1"),) if a["layout"] == "neox" else ())
        + ((("QK_NORM", "1"),) if qk_norm else ())
        + kv_defines(p, r["k_cache"])
    )
    f16 = p.values[r["k_cache"]].dtype == "f16"
    shader = "rope_kv_write_attention"
    wg = wg_size(caps, caps.attn_wg or ATTN_WG_SG, cap=1024)
    lanes = caps.subgroup_size
    while wg > lanes and _sg_shared_bytes(wg, lanes, d) > caps.max_shared:
        wg //= 2
    # an f16 cache word is two elements: a lane writes whole words only with an even EPL
    if (
        subgroup_rows(d, wg, caps)
        and _sg_shared_bytes(wg, lanes, d) <= caps.max_shared
        and not (f16 and (d // lanes) % 2)
    ):
        # rows a subgroup loads before using them: sized by the rows a live split takes at short
        # positions, not by MAXCHUNK (which grows with --ctx): registers 2 x RB x EPL, so a batch
        # sized for ctx 4096 cost short positions occupancy (H200, Qwen3-0.6B F16 948 tok/s at ctx
        # 4096 vs 1030 at 192); longer splits loop over more batches
        rows = live_rows(maxchunk, min_s, caps) if s > 1 else maxchunk
        rb = min(SG_BATCH, -(-rows // (wg // lanes)))
        shader += "_sg"
        defines += (("LANES", str(lanes)), ("EPL", str(d // lanes)), ("RB", str(rb)))
    else:
        wg = wg_size(caps, caps.attn_wg or ATTN_WG, cap=1024)
        du = d // 4 if d % 4 == 0 else d  # P.V units per row, as the shader's RG
        rg = wg // du if wg >= du else 1
        if 4 * (3 * d + maxchunk + rg * d + 2 * wg) > caps.max_shared:
            return None
        defines += (("KVEC", "1"),) if d % 4 == 0 else ()
    spec = (wg, h, kvh, d, s, maxchunk, float(a["scale"]), 0.0, float(a.get("eps", 0.0)), window, min_s)
    ins = (
        Binding(r["q"]),
        Binding(r["k"]),
        Binding(r["v"]),
        Binding(r["step"]),
        Binding(r["k_cache"]),
        Binding(r["v_cache"]),
    )
    # then the q/k norm weights, then the rope table (binding B_FREQ), then gpt-oss's sinks (B_SINKS:
    # split 0 folds them into its partials, so the combine, absorbed or not, is the plain one)
    norms = (Binding(r["q_norm_w"]), Binding(r["k_norm_w"])) if qk_norm else ()
    norms += (Binding(r["freqs"]),)
    defines += (("B_FREQ", str(len(ins) + len(norms))),)
    if "sinks" in r:
        norms += (Binding(r["sinks"]),)
        defines += (("SINKS", "1"), ("B_SINKS", str(len(ins) + len(norms))))
    if s == 1:
        return [
            KernelCall(
                shader, spec, ins + (Binding(out),) + norms, (4, 5, 6), (1, h, 1), defines=defines, label=out
            )
        ]
    part, nbytes = partials(out, h, d, s)
    per_split = live_rows(maxchunk, min_s, caps)
    if per_split < maxchunk:
        defines += (("LIVE_ROWS", str(per_split)),)
    # the grid as its combine and the indirect dispatch see it: the live formula's rows per split
    grid = AttnGrid(h, d, s, per_split, min_s, window)
    return [
        KernelCall(
            shader,
            spec,
            ins + (Binding(part),) + norms,
            (4, 5, 6),
            (s, h, 1),
            defines=defines + (("SPLIT", "1"),),
            scratch=((part, nbytes),),
            label=out + "[split]",
            live=grid if min_s < s else None,
        ),
        combine_call(out, r["step"], grid, caps),
    ]


def reader_counts(calls: list[KernelCall]) -> Counter:
    """How many bindings of `calls` read each value (writes not counted)."""
    return Counter(b.value for c in calls for i, b in enumerate(c.bindings) if i not in c.writes)


def absorb_combines(
    program: Program, calls: list[KernelCall], owners: list[int], caps: KernelCaps
) -> tuple[list, list]:
    """Peephole over a fused step's calls: an attention_combine whose output only a matmul_add reads
    (the o-projection + residual) is dropped, and that matmul_add combines the partials as it loads
    its input (shaders/matmul_add.comp, COMBINE_X): one dispatch and one barrier fewer per layer.
    Any other reader (a row-chunked o-projection, a per-op matmul) keeps the combine dispatch.
    owners[i] is the region of calls[i]; returns both lists without the absorbed combines.
    caps.cx_rows < 0 absorbs none (every o-projection workgroup would redo the whole combine)."""
    if caps.cx_rows < 0:
        return calls, owners
    readers = reader_counts(calls)
    held: dict[str, tuple[KernelCall, int]] = {}  # combine output -> (combine, owner) not yet placed
    out_calls, out_owners = [], []
    for call, owner in zip(calls, owners):
        if call.shader == "attention_combine":
            o = call.bindings[1].value
            if call.spec[2] % 4 == 0 and readers[o] == 1 and program.values[o].kind == "activation":
                held[o] = (call, owner)
                continue
        for i, b in enumerate(call.bindings):
            if b.value in held and i not in call.writes:
                comb, comb_owner = held.pop(b.value)
                if call.shader == "matmul_add" and _absorb_pays(call, comb, caps):
                    call = _combining_matmul_add(call, i, comb, caps)
                else:
                    out_calls.append(comb)
                    out_owners.append(comb_owner)
        out_calls.append(call)
        out_owners.append(owner)
    for comb, comb_owner in held.values():  # never read: keep it, the value is still defined
        out_calls.append(comb)
        out_owners.append(comb_owner)
    return out_calls, out_owners


# An absorbing o-projection's workgroups each redo the whole combine (heads x head_dim floats per
# live split), so it pays only while workgroups x that stay small. H100, ctx 1024 (ab_modes, GPU µs
# per token, bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kquant-wide/ab-cx-*): Llama-3.1-8B Q4_K_M shape
# (2048 workgroups x 4096) 5286 absorbed vs 4390 separate, Qwen3-0.6B Q4_K_M (512 x 2048) 1227 vs
# 1146; SmolLM2 (576 x 576) absorbed was 6% faster (2026-11-23-session-c/ab-cx-smollm2-*).
CX_ABSORB_MAX = 512 * 1024


def _absorb_pays(call: KernelCall, comb: KernelCall, caps: KernelCaps) -> bool:
    if ("SIGMOID_X", "1") in call.defines:  # x gated as it loads (matmul_add.comp): no combine there
        return False
    if caps.cx_rows > 0:
        return True
    _, h, d = comb.spec[:3]
    wg, _, m, rows = call.spec
    return -(-m // min(wg, rows)) * h * d <= CX_ABSORB_MAX


def _combining_matmul_add(call: KernelCall, x: int, comb: KernelCall, caps: KernelCaps) -> KernelCall:
    _, h, d, s, maxchunk, min_s, window = comb.spec
    wg, k, m, rows = call.spec
    # every workgroup combines all of x, so more rows per workgroup would share that work; measured
    # slower on an H100 (sweep-cx-*.json), so the matvec's own rows unless caps.cx_rows says
    rows = min(wg, caps.cx_rows or rows)
    # the partials replace x; the step buffer goes last (it says how many splits are live)
    bindings = call.bindings[:x] + (comb.bindings[0],) + call.bindings[x + 1 :] + (comb.bindings[2],)
    defines = call.defines + (
        ("COMBINE_X", "1"),
        ("CX_H", str(h)),
        ("CX_D", str(d)),
        ("CX_S", str(s)),
        ("CX_MAXCHUNK", str(maxchunk)),
        ("CX_MIN_S", str(min_s)),
        ("CX_WINDOW", str(window)),
        ("CX_B", str(min(s, CX_BATCH))),
    )
    return replace(
        call,
        spec=(wg, k, m, rows),
        groups=flat_groups(-(-m // rows)),
        bindings=bindings,
        defines=defines,
        scratch=call.scratch + comb.scratch,
        label=call.label + "+combine",
    )


def add_rms_norm(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """sum = a + b and out = rms_norm(sum) * w in one workgroup a row (a row is a few thousand
    floats; a batched step's rows, ADD_RMS_NORM_ROWS: one workgroup each)."""
    r = region.roles
    n = p.values[r["norm_w"]].numel
    wg = wg_size(caps, n, cap=256)
    b = (Binding(r["a"]), Binding(r["b"]), Binding(r["norm_w"]), Binding(r["sum"]), Binding(r["out"]))
    return [
        KernelCall(
            "add_rms_norm",
            (wg, n, float(region.attrs["eps"])),
            b,
            (3, 4),
            flat_groups(p.values[r["sum"]].numel // n),
            defines=reduce_defines(caps),
            label=r["sum"] + "+" + r["out"],
        )
    ]


def rms_norm_add(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """sum = residual + rms_norm(x) * w in one workgroup (Gemma's post-attention / post-FFN norm)."""
    r = region.roles
    n = p.values[r["sum"]].numel
    wg = wg_size(caps, n, cap=256)
    b = (Binding(r["x"]), Binding(r["norm_w"]), Binding(r["residual"]), Binding(r["sum"]))
    return [
        KernelCall(
            "rms_norm_add",
            (wg, n, float(region.attrs["eps"])),
            b,
            (3,),
            (1, 1, 1),
            defines=reduce_defines(caps),
            label=r["sum"],
        )
    ]
