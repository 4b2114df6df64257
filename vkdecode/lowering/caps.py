"""KernelCaps: what the shaders may use on a device, and the tuning knobs with their per-device-type
defaults (each CPU default names the lavapipe measurement that chose it). Split from kernels.py,
which re-exports it: every kernel builder takes one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelCaps:
    """What the shaders may use on this device, plus tuning knobs (0 = choose automatically)."""

    subgroup_size: int
    subgroup_arithmetic: bool
    max_storage_range: int
    max_invocations: int
    max_shared: int
    min_align: int
    subgroup_fixed: bool = False  # min == max subgroup size: shaders may rely on subgroup_size lanes
    integer_dot: bool = False  # shaderIntegerDotProduct (OpUDot / OpSUDot on packed 4x8-bit vectors)
    integer_dot_fast: bool = False  # and the driver says they are accelerated (its ...Accelerated properties)
    coop_matrix: bool = False  # the *_coop.comp kernels run here: vk/coopmat.py chose the KHR path
    attn_max_chunk: int = 256  # kv rows per attention workgroup at full context (sets the split count)
    attn_splits: int = 0  # fused attention workgroups per head at least (0: attention.py chooses)
    attn_live_rows: int = 0  # rows per live split at a position (0: attention.live_rows, < 0: MAXCHUNK)
    attn_max_splits: int = 0  # GPUs (attn_live_rows >= 0): splits of an attention grid at most (0: auto)
    attn_wg: int = 0  # fused attention workgroup size (0: attention.ATTN_WG[_SG])
    attn_rows_wg: int = 0  # attention_rows' workgroup size (0: GPUs 512, CPUs head_dim, >= 64)
    attn_rows_fused: int = 0  # batched steps: rope, KV write, attention as one attention_rows (0: on
    # GPUs, apart on CPUs, not measured there; > 0: always; < 0: never)
    attn_kernel: str = ""  # fused attention: "sg" (subgroup rows) where it fits, "wg" never; "" auto
    cx_rows: int = 0  # rows per workgroup of an o-projection combining attention partials (0: auto,
    # < 0: none does, split attention keeps its attention_combine dispatch)
    matvec_wg: int = 0
    matvec_rows: int = 0
    kwide: int = 0  # K-quant matvecs in 32-element units sharing one scale decode (0: rows of
    # 4096 and more, > 0: all, < 0: none: 8-element units)
    kq_inplace: int = 0  # wide K-quant units' nibbles read in place by float bits (dequant.glsl pos4;
    # 0: yes, < 0: by shifts and int-to-float conversions, define NIB_OLD)
    kw_split: int = 0  # wide q4_k / q6_k units take every row's weights, then x in halves
    # (shaders/kwide_rows.glsl; 0: yes, < 0: load_x + unit_dot, define KW_JOINT)
    kq_idot: int = 0  # split wide q4_k / q6_k units on integer dot products, x as block fixed point made
    # in registers (dequant.glsl KQ_IDOT), and split at every width (calls.kq_idot;
    # 0: where accelerated, > 0: where shaderIntegerDotProduct, < 0: never)
    kq_idot_q6: int = 0  # and q6_k units too where kq_idot applies (0: yes, < 0: q4_k only)
    kq_planes: int = 0  # byte planes of x there: 2 (0 too: x as 16-bit block fixed point, two dot
    # products a word) or 3 (22-bit, three): kw_planes.glsl KQ_PLANES, calls.planes_defines
    kw_balance: int = 0  # wide q4_k / q6_k rows of an odd multiple of 64 units (14336-wide: 448) take
    # units / 2 lanes, two units each, where a power of two left lanes idle
    # (calls.kw_balanced; 0 or > 0: with subgroup arithmetic, < 0: never)
    norm_pre: int = 0  # a matmul_add feeding an RMS norm also writes x * norm_w and partial sums
    # of x^2 for the norm's matvec (norm_pre.py; 0: from 2048-element
    # vectors, > 0: always, < 0: never)
    norm_pre_late: int = 0  # its consumers sum those partials after their weight loop, not before
    # (NORM_PRE_LATE; 0: where their weights are K-quants, > 0: always, < 0: never)
    matmul_narrow: int = 0  # chunk widths up to this take matmul_rows_narrow (0: 16, < 0: never)
    narrow_lanes: int = (
        0  # matmul_rows_narrow invocations per weight row (0: auto, up to 32; < 0: the tile width)
    )
    matmul_wide: int = 0  # chunk widths from this take matmul_rows_wide (0: 17, < 0: never)
    matmul_coop: int = 0  # chunk widths from this take matmul_rows_coop where coop_matrix (0: 16, < 0: never)
    coop_tile: str = ""  # its subgroups x 16x16 blocks, "SG_MxSG_N:BLK_MxBLK_N" ("": coop.py chooses)
    coop_bk: int = 0  # its k step (0: 64 on 8+ subgroups, else 32, the experts always 32; 32 or 64 forces it)
    coop_wide: int = 0  # coop.COOP_WIDE_TILE first from in-dim 2048 (0), never (< 0: the tiles before)
    coop_x16: int = 0  # its x rounded to f16 once before it (lowering/half_x.py; < 0: in the tile loader)
    matmul_tile: str = ""  # its TMxTN micro-tile ("8x8", "8x4", "4x8", "4x4"; "": matmul_rows.py chooses)
    matmul_splitk: int = 0  # its k splits (0: enough for matmul_groups workgroups, 1: none)
    matmul_groups: int = 0  # workgroups a wide matmul should reach at least (0: 264, 2 per SM of an H100)
    alias_acts: int = 0  # a chunk's / batched step's activations share memory by lifetime (< 0: never)
    prefill_chunk_rows: int = (
        0  # a prompt chunk's fixed cost in rows, for padded chunk plans (0: 64; < 0: no padding)
    )
    attn_coop: int = (
        0  # chunk attention on the tensor cores where coop_matrix (0: head_dim <= 256, > 0: any, < 0: never)
    )
    attn_subgroups: int = 0  # the tensor-core chunk attention's subgroups a workgroup to aim for, a
    # power of two (0: coop.COOP_ATTN_SUBGROUPS): more share each staged K/V tile, fewer workgroups
    attn_bkv: int = 0  # its keys per staged K/V tile, a multiple of 16 (0: the widest of
    # coop.COOP_ATTN_TILES that fits the shared memory); one that does not fit is refused
    attn_gqa_rows: int = (
        0  # chunks from this many rows take attention_rows_gqa when attn_rows_q is auto (0: 17)
    )
    attn_rows_q: int = (
        0  # chunk attention: rows per attention_rows_gqa workgroup (0: auto, < 0: per-row kernel)
    )
    batch_matvec: int = (
        0  # batched decode steps up to this width take the decode matvec over all rows (0: 8, < 0: never)
    )
    batch_acc: int = 0  # their matvec's x rows x rows per workgroup at most where the rows are
    # automatic (ops.batch_rows; 0: ops.XR_ACC)
    batch_rows: int = 0  # their matvec's rows per workgroup, past one row's choice too (0: auto)
    norm_parts: int = 0  # workgroups a row of their norms writing x planes (0: 16 groups of 16 each
    # on GPUs, one on CPUs; xplanes.norm_parts)
    xplanes: int = 0  # their split K-quant matvecs on integer dot products read x as byte planes
    # made once a step (lowering/xplanes.py; 0: every width, > 0: widths from this, < 0: never)
    router_one_wg: int = (
        0  # MoE routers up to this many elements fused in one workgroup (0: lowering/moe.py's bound)
    )
    router_ops: bool = False  # larger routers run as their three ops (norm, matvec, top-k), not as
    # rms_norm_matmul writing the normed x and the logits, then top-k (A/B: lowering/moe.py)
    moe_route: int = 0  # a decode step's big router's top-k inside the experts' gate/up kernel
    # (0: yes, < 0: its own moe_topk dispatch; lowering/moe.py)
    moe_group: int = (
        0  # chunks of this many MoE slots or more group them by expert (0: 2 per expert, < 0: never)
    )
    moe_tile: int = (
        0  # slots per tile of a grouped expert matmul, a power of two 4..128 (0: lowering/moe.py chooses)
    )
    delta_block: int = 0  # > 0: Qwen3.5 prompt chunks' gated_delta_step in blocks of this many rows
    # (gated_delta_chunk.comp; < 0: row by row; 0: lowering/linear_attention.py chooses and says why)
    head_blocks: int = 0  # row blocks per lm_head + argmax workgroup (0: matvec.ARGMAX_PARTIALS pairs)
    head_ops: bool = (
        False  # the final norm + lm_head + argmax region runs its ops' kernels, not the fused one
    )
    device_cpu: bool = False  # a CPU implementation (lavapipe): the measured CPU launch shapes below apply

    @classmethod
    def from_info(cls, info, **tuning) -> KernelCaps:
        f, lim = info.features, info.limits
        if getattr(info, "device_type", "") == "cpu":
            # lavapipe pays per workgroup (each is a coroutine over SIMD lanes) and the fused
            # norm+matvec recomputes the norm per workgroup: 16 rows each is ~2x faster there.
            tuning.setdefault("matvec_rows", 16)
            # and per idle lane: a 128/256-lane matvec over 72/192 units (SmolLM2 q4_1) runs its
            # idle subgroups too. 16 lanes: fused step 148 -> 100 ms, per-op replay 151 -> 97
            # (8 lanes, 32 x 32 rows and 64 were slower; bench/results/llvmpipe/2026-11-23-cpufuse/README.md)
            tuning.setdefault("matvec_wg", 16)
            # and the fused attention in 32-lane workgroups (4 subgroups owning rows) instead of
            # 512: SmolLM2 at position 120, 30 layers: 67 -> 6.6 ms (16 / 64 lanes 7.8 / 9.3, the
            # workgroup form at 64 17); its per-op ops (rope, kv_write, attention) took 31 ms
            tuning.setdefault("attn_wg", 32)
            # and one row block per lm_head workgroup: lavapipe runs the block loop of
            # rms_norm_matmul_argmax 1.6-2.3x slower (SmolLM2's head with 2 blocks each: 52 vs 23 ms)
            tuning.setdefault("head_blocks", 1)
            # and even one block of rms_norm_matmul_argmax ran slower than the per-op rms_norm +
            # matmul + 2-pass argmax (SmolLM2: 27 vs 23.5 ms; cause not found: not the norm, the
            # serial logits store, the accumulator array or a barrier), so that region runs its ops'
            # kernels, still recorded once (fused / replay-nofuse tok/s by round 0.97 -> 1.00)
            tuning.setdefault("head_ops", True)
            # and one attention workgroup per head unless the context needs more (attn_max_chunk),
            # live splits as few as the rows allow (empty ones cost ~0.1 ms each there)
            tuning.setdefault("attn_splits", 1)
            tuning.setdefault("attn_live_rows", -1)
            # and split attention combined by its own dispatch, not by every o-projection workgroup
            # (lavapipe runs the absorbed combine's code even when one split is live: SmolLM2 Q4_1
            # ctx 4096 pos 16-24, 302 ms/token absorbed, 279-289 separate, 277-284 at ctx 256)
            tuning.setdefault("cx_rows", -1)
            # and 32-element K-quant units at every width (lavapipe, q6_k 1024x4096 matvec
            # 1.56 vs 2.98 ms in 8-element units: bench/matvec_bench.py --ab caps:kwide=-1)
            tuning.setdefault("kwide", 1)
            # with their nibbles moved to bit 0 and converted (lavapipe, q4_k 3072x1024 matvec, NIB_OLD
            # vs in place: 850-907 vs 897-940 µs; the H100's gain is in dequant.glsl)
            tuning.setdefault("kq_inplace", -1)
            # and whole wide units, x loaded at once (lavapipe, K-quant 3072x1024 / 1024x3072 matvecs:
            # q4_k 967-989 / 1055-1062 µs whole vs 1115-1128 / 1108 split, q6_k within 2%;
            # bench/results/llvmpipe/2026-11-25-kwide-split/; the H100's gain is in calls.kw_split)
            tuning.setdefault("kw_split", -1)
            # and power-of-two matvec workgroups (matvec_wg is 16 lanes there anyway)
            tuning.setdefault("kw_balance", -1)
            # and the tiled chunk matmul at every width (tuned there; the narrow kernel's 64-lane
            # workgroups over few rows fill a GPU, not a few CPU cores)
            tuning.setdefault("matmul_narrow", -1)
            # nor the register-blocked wide one: lavapipe, best of 3 (bench/matmul_rows_bench.py),
            # q4_1 [1536, 576] 32 rows 14.3 ms tiled vs 23.3 wide 8x4, 64 rows 34.8 vs 29.6 (a wash)
            tuning.setdefault("matmul_wide", -1)
            # and the kv-head chunk attention from 2 rows (its 32-row chunk: 42 vs 86 ms per row
            # there; GPUs keep narrow chunks per row, where few kv-head workgroups starve them)
            tuning.setdefault("attn_gqa_rows", 2)
            # and exact chunk widths: a CPU's chunk costs its rows, so padding rows is waste there
            tuning.setdefault("prefill_chunk_rows", -1)
            tuning["device_cpu"] = True
        return cls(
            subgroup_size=int(f.get("subgroup_size", 1) or 1),
            subgroup_arithmetic=bool(f.get("subgroup_arithmetic", False)),
            subgroup_fixed=f.get("min_subgroup_size") == f.get("max_subgroup_size") == f.get("subgroup_size"),
            integer_dot=bool(f.get("integer_dot")),
            integer_dot_fast=bool(f.get("integer_dot") and f.get("integer_dot_fast")),
            coop_matrix=f.get("coop") == "khr",
            max_storage_range=int(lim["max_storage_buffer_range"]),
            max_invocations=int(lim["max_workgroup_invocations"]),
            max_shared=int(lim["max_shared_memory"]),
            min_align=int(lim["min_storage_buffer_offset_alignment"]),
            **tuning,
        )


# ---------------------------------------------------------------- helpers


def parse_tuning(items: list[str]) -> dict:
    """["matmul_coop=-1", "coop_tile=2x2:4x2", ...] (the bench scripts' --caps) -> KernelCaps field
    values, each converted to its field's type; an unknown field is refused by name."""
    import dataclasses

    types = {f.name: f.type for f in dataclasses.fields(KernelCaps)}
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if key not in types:
            raise ValueError(f"--caps {item!r}: KernelCaps has no field {key!r}")
        kind = str(types[key])
        out[key] = (
            value if kind == "str" else (value.lower() in ("1", "true") if kind == "bool" else int(value))
        )
    return out
