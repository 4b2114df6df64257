#!/usr/bin/env bash
# A Khronos validation layer that knows SPV_KHR_cooperative_matrix (Debian 13's 1.4.309), so that
# the tensor-core cases can run under validation: Debian 12's 1.3.239 predates the extension and
# vkdecode turns the coop path off under it (vk/coopmat.py KHR_VALIDATION).
#   bash bench/validation_layer_1_4.sh fetch   # here: the deb (5.7 MB) into .device/trixie-vvl (carry it)
#   source bench/validation_layer_1_4.sh       # on the GPU machine, after setup-remote.sh: unpack it
#                                              # under /tmp/vvl-root and point the loader at it
# The layer needs glibc >= 2.38 and libstdc++ >= 14, which the Debian 12 host lacks (so it is not
# for lavapipe here); sourcing checks that the process can load it and says so if not.
_vvl_deb=vulkan-validationlayers_1.4.309.0-1_amd64.deb
_vvl_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.device/trixie-vvl
if [ "${1:-}" = fetch ]; then
    mkdir -p "$_vvl_dir"
    [ -f "$_vvl_dir/$_vvl_deb" ] || curl -sSfL -o "$_vvl_dir/$_vvl_deb" \
        "${DEBIAN_MIRROR:-http://deb.debian.org/debian}/pool/main/v/vulkan-validationlayers/$_vvl_deb"
    ls -la "$_vvl_dir/$_vvl_deb"
else
    _vvl_root=/tmp/vvl-root
    dpkg -x "$_vvl_dir/$_vvl_deb" "$_vvl_root" || return 1
    _vvl_lib=$_vvl_root/usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so
    _vvl_json=$_vvl_root/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json
    # the manifest names the library bare (found on the system path, where the old layer is):
    # point it at this one, and the loader at this manifest only
    sed -i "s#\"library_path\": *\"[^\"]*\"#\"library_path\": \"$_vvl_lib\"#" "$_vvl_json"
    export VK_LAYER_PATH=$(dirname "$_vvl_json")
    python3 - <<'PY' || echo "validation_layer_1_4: this process cannot load the 1.4 layer (see above)" >&2
import vulkan as vk
from vkdecode.vk.coopmat import version_str
layers = {p.layerName: p.specVersion for p in vk.vkEnumerateInstanceLayerProperties()}
v = layers.get("VK_LAYER_KHRONOS_validation", 0)
print("validation layer:", version_str(v) if v else "none")
vk.vkDestroyInstance(vk.vkCreateInstance(vk.VkInstanceCreateInfo(
    ppEnabledLayerNames=["VK_LAYER_KHRONOS_validation"], enabledLayerCount=1), None), None)
print("validation layer: an instance with it was created")
PY
fi
