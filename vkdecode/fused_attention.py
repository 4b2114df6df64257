"""(QK_NORM_)ROPE_KV_WRITE_ATTENTION -> one fused dispatch on the split-K grid (the last workgroup
of each head combines the splits; with caps.attn_fold_combine off, a separate attention_combine
dispatch does), and ADD_RMS_NORM -> one dispatch."""
from __future__ import annotations

from fusion.ir import Program
from fusion.rules import Region
from vkdecode.kernels import ZEROED, Binding, KernelCall, KernelCaps, _reduce_defines, _wg, attention_splits

# Decode attention is latency-bound (a few rows per workgroup, chains of dependent loads). Measured
# on an H200 at pos ~90 of ctx 128, GPU µs per layer: SmolLM2 shape (head_dim 64) 14.5 with 64
# invocations and 1 split (attention.comp's shape) -> 7.4 with 256 and 1 split (8.5 with 4);
# Qwen3-0.6B shape (head_dim 128) 100 -> 51 with 256 and 1 split, 32 with 4 splits. A split costs
# a combine (folded into the last workgroup of each head; as its own dispatch, ~1-4 µs with
# attn_fold_combine off) and pays off once a workgroup's rows x head_dim is large.
ATTN_WG = 256           # invocations per attention workgroup
MIN_SPLITS_D128 = 4     # splits (workgroups per head) at least, for head_dim >= 128


def attention_grid(ctx: int, head_dim: int, caps: KernelCaps) -> tuple[int, int]:
    """(splits S, max rows per split) of the fused attention: kernels.attention_splits (bounded
    by attn_max_chunk rows at full context), and more splits for wide heads."""
    s, maxchunk = attention_splits(ctx, caps)
    want = MIN_SPLITS_D128 if head_dim >= 128 else 1
    if s < want:
        s = min(want, ctx)
        maxchunk = -(-ctx // s)
    return s, maxchunk


def rope_kv_write_attention(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    r, a = region.roles, region.attrs
    h, kvh, d = int(a["n_heads"]), int(a["n_kv_heads"]), int(a["head_dim"])
    if d % 2 or h % kvh:
        return None
    out = r["out"]
    ctx = p.values[r["k_cache"]].shape[0]
    s, maxchunk = attention_grid(ctx, d, caps)
    wg = _wg(caps, ATTN_WG, cap=256)
    du = d // 4 if d % 4 == 0 else d      # P.V units per row, as the shader's RG
    rg = wg // du if wg >= du else 1
    if 4 * (3 * d + maxchunk + rg * d + 2 * wg) > caps.max_shared:
        return None
    qk_norm = "q_norm_w" in r
    spec = (wg, h, kvh, d, s, maxchunk, float(a["scale"]), float(a["theta"]), float(a.get("eps", 0.0)))
    defines = _reduce_defines(caps) + ((("KVEC", "1"),) if d % 4 == 0 else ()) \
        + ((("NEOX", "1"),) if a["layout"] == "neox" else ()) + ((("QK_NORM", "1"),) if qk_norm else ())
    ins = (Binding(r["q"]), Binding(r["k"]), Binding(r["v"]), Binding(r["step"]),
           Binding(r["k_cache"]), Binding(r["v_cache"]))
    norms = (Binding(r["q_norm_w"]), Binding(r["k_norm_w"])) if qk_norm else ()
    if s == 1:
        return [KernelCall("rope_kv_write_attention", spec, ins + (Binding(out),) + norms, (4, 5, 6),
                           (1, h, 1), defines=defines, label=out)]
    # partials and combine exactly as kernels._attention lays them out
    part = f"scratch:{out}.partials"
    nbytes = h * s * (d + 2) * 4
    if caps.attn_fold_combine:
        # the last workgroup of each head combines (one dispatch, no barrier); its per-head arrival
        # counts must start at zero and are reset by that workgroup (kernels.ZEROED scratch)
        cnt = f"scratch:{out}.counts{ZEROED}"
        b = ins + (Binding(part),) + norms + (Binding(out), Binding(cnt))
        return [KernelCall("rope_kv_write_attention", spec, b, (4, 5, 6, len(b) - 2, len(b) - 1), (s, h, 1),
                           defines=defines + (("SPLIT", "1"), ("FOLD", "1")),
                           scratch=((part, nbytes), (cnt, h * 4)), label=out + "[split+combine]")]
    cwg = _wg(caps, d, cap=128)
    return [KernelCall("rope_kv_write_attention", spec, ins + (Binding(part),) + norms, (4, 5, 6), (s, h, 1),
                       defines=defines + (("SPLIT", "1"),), scratch=((part, nbytes),), label=out + "[split]"),
            KernelCall("attention_combine", (cwg, h, d, s), (Binding(part), Binding(out)), (1,), (h, 1, 1),
                       scratch=((part, nbytes),), label=out + "[combine]")]


def add_rms_norm(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """sum = a + b and out = rms_norm(sum) * w in one workgroup (x is a few thousand floats)."""
    r = region.roles
    n = p.values[r["sum"]].numel
    wg = _wg(caps, n, cap=256)
    b = (Binding(r["a"]), Binding(r["b"]), Binding(r["norm_w"]), Binding(r["sum"]), Binding(r["out"]))
    return [KernelCall("add_rms_norm", (wg, n, float(region.attrs["eps"])), b, (3, 4), (1, 1, 1),
                       defines=_reduce_defines(caps), label=r["sum"] + "+" + r["out"])]
