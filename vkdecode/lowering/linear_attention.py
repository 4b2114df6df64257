"""Kernel calls of Qwen3.5's linear-attention ops (fusion/ir.py conv1d_step, gated_delta_step):
one dispatch each, their recurrent state bound as a read-write buffer like a KV cache. A batched
step's op (fusion/chunk_batch.py, attr batch) takes the same kernel with the define BATCH: its rows
are sequences, not a chunk's positions, so they run side by side, each on its slot's state."""

from __future__ import annotations

from fusion.ir import Op, Program
from vkdecode.lowering.calls import (
    Binding,
    KernelCall,
    KernelCaps,
    flat_groups,
    pow2_at_least,
    reduce_defines,
    wg_size,
)
from vkdecode.lowering.rows import batch_defines

# Lanes a channel splits a prompt chunk's rows over in conv1d_step, on a GPU (a CPU walks them in
# order, a lane a channel): 8 lanes x 32 channels a workgroup. One lane a channel left the H100 64
# workgroups at Qwen3.5-35B-A3B's 8,192 channels: its 8 layers' 512-row chunk, 2.07 ms -> 0.39
# (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-q35-kernels)
CONV_ROW_LANES = 8


def conv1d_step(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    x, w, step = op.inputs
    y, hist = op.outputs
    rows = int(op.attrs.get("rows", 1))  # a prompt chunk's rows, or a batched step's sequences
    c = p.values[x].numel // rows
    b = (Binding(x), Binding(w), Binding(step), Binding(y), Binding(hist))
    if op.attrs.get("batch"):  # an invocation per row and channel
        lanes, wg = 1, wg_size(caps, rows * c, cap=128)
        groups = -(-(rows * c) // wg)
    else:
        lanes = 1 if caps.device_cpu else min(CONV_ROW_LANES, pow2_at_least(rows))
        wg = wg_size(caps, c * lanes, cap=32 * lanes if lanes > 1 else 128)  # 32 channels a group
        lanes = min(lanes, wg)
        groups = -(-c // (wg // lanes))
    spec = (wg, c, int(op.attrs["kernel"]), rows, lanes)
    return [
        KernelCall("conv1d_step", spec, b, (3, 4), flat_groups(groups), label=y, defines=batch_defines(op))
    ]


# State columns a gated_delta_step workgroup holds in shared memory (DK floats each) at most: a
# head's 128 in 4 workgroups at Qwen3.5's widths, so its 16-64 heads fill more than 16-64 SMs
DELTA_COLS = 32
# A prompt chunk's rows in blocks (gated_delta_chunk.comp) on a GPU: the delta rule of a 512-row chunk
# of the Qwen3.5-35B-A3B shape's first 8 layers, H100, 7.32 ms row by row, 3.59 in blocks of 16
# (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-q35-kernels). Row by row on a CPU: lavapipe, a 64-row
# chunk of the Qwen3.5-27B shape's first 2 layers, 838-903 ms in blocks of 16 against 502-569 row by
# row (bench/results/llvmpipe/2026-12-07-delta-columns): there the pair products, redone by each
# column block, cost more than the rows' barriers they save.
DELTA_BLOCK_GPU = 16
DELTA_BLOCK_MAX = 64
# Lanes of a chunked workgroup on a GPU (8 a state column at 32 columns): a head's 4 column blocks
# are the only workgroups, 128 at Qwen3.5-35B-A3B's 32 value heads, under one an SM, so the lanes
# are all the latency of the block's shared-memory products can hide behind (128 before; with the
# padded q/k rows, 5.91 -> 3.59 ms in the chunk above: not split between the two)
DELTA_CHUNK_LANES = 256


def delta_shared(dk: int, cols: int, block: int, wg: int = 0) -> int:
    """Shared bytes of the delta kernels: the state's columns, and in the chunked form the block's
    q and k rows (dk + 1 apart), its two pair products, the columns' updates, six floats a row and
    the norms' two partial sums a lane (wg lanes)."""
    chunked = 2 * block * (dk + 1) + 2 * block * block + block * cols + 6 * block + 2 * wg
    return 4 * (dk * cols + (chunked if block else 0))


def delta_columns(dk: int, dv: int, caps: KernelCaps, block: int = 0, wg: int = 0) -> int:
    """Columns of the state a workgroup of at most wg lanes owns: a power of two up to DELTA_COLS
    (not past dv's), within half the device's shared memory (all of it for the chunked form)."""
    cols = min(DELTA_COLS, pow2_at_least(dv))
    limit = caps.max_shared if block else caps.max_shared // 2
    while cols > 1 and delta_shared(dk, cols, block, wg) > limit:
        cols //= 2
    return cols


def gated_delta_step(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    a = op.attrs
    hk, hv, dk, dv = (int(a[n]) for n in ("n_k_heads", "n_v_heads", "k_dim", "v_dim"))
    o = op.outputs[0]
    rows = int(a.get("rows", 1))
    want = caps.delta_block or (0 if caps.device_cpu else DELTA_BLOCK_GPU)
    if want > 0 and want & (want - 1):
        raise ValueError(f"delta_block {want}: a power of two (< 0: row by row, 0: the default)")
    chunk = rows > 1 and not op.attrs.get("batch")  # a batched step's rows are not a chunk's to block
    block = min(want, DELTA_BLOCK_MAX, pow2_at_least(rows)) if chunk and want > 0 else 0

    # lanes of a column: wg / cols; one on a CPU (lavapipe), where the lanes' sums cost more than
    # they split: a 64-row chunk of the Qwen3.5-27B shape's first 2 (linear) layers, the two calls
    # 657.7 ms a workgroup a head (before), 724.4 at 4 lanes a column, 633.4 at one
    # (bench/results/llvmpipe/2026-12-07-delta-columns)
    def gpu_lanes(block: int) -> int:
        n = DELTA_CHUNK_LANES if block else 128
        return 0 if caps.device_cpu else wg_size(caps, n, cap=n)

    wg_most = max(gpu_lanes(block), DELTA_COLS, block)  # what the chunked form's norm sums are sized for
    cols = delta_columns(dk, dv, caps, block, wg_most)
    if block and delta_shared(dk, cols, block, wg_most) > caps.max_shared:
        block, cols = 0, delta_columns(dk, dv, caps)
    wg = max(cols, gpu_lanes(block), block)  # the chunked form: a row's decay an invocation each
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    tiled = (("V_TILED", "1"),) if int(a.get("v_tiled", 0)) else ()
    return [
        KernelCall(
            "gated_delta_chunk" if block else "gated_delta_step",
            (wg, hk, hv, dk, dv, rows, cols) + ((block,) if block else ()),
            b,
            (6, 7),
            flat_groups((rows if op.attrs.get("batch") else 1) * hv * -(-dv // cols)),
            defines=reduce_defines(caps) + tiled + batch_defines(op),
            label=o,
        )
    ]
