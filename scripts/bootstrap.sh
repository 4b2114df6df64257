#!/usr/bin/env bash
# Installs what vkdecode needs from the system when it is missing: a Vulkan loader, a driver
# (Mesa's lavapipe works on any CPU), glslang-tools, the Khronos validation layer (tests) and
# python3-venv. Idempotent: with everything present it installs nothing.
set -euo pipefail
pkgs=()
{ ldconfig -p 2>/dev/null | grep 'libvulkan.so.1' >/dev/null; } || pkgs+=(libvulkan1)   # no grep -q: with pipefail its early exit fails the pipe
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || pkgs+=(mesa-vulkan-drivers)
command -v glslangValidator >/dev/null || pkgs+=(glslang-tools)
command -v vulkaninfo >/dev/null || pkgs+=(vulkan-tools)
ls /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json >/dev/null 2>&1 || pkgs+=(vulkan-validationlayers)
python3 -c 'import venv, ensurepip' 2>/dev/null || pkgs+=(python3-venv)
[ ${#pkgs[@]} -eq 0 ] && exit 0
# --no-upgrade: what is already installed stays as it is; only the missing packages come in
cmd="apt-get update && apt-get install -y --no-install-recommends --no-upgrade ${pkgs[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "vkdecode needs system packages: ${pkgs[*]}" >&2
  echo "run as root:  sudo sh -c '$cmd'" >&2
  exit 1
fi
echo "installing the missing system packages (and what apt needs for them): ${pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
sh -c "$cmd"
