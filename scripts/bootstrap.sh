#!/usr/bin/env bash
# Installs what vkdecode needs from the system when it is missing: a Vulkan loader, a driver
# (Mesa's lavapipe works on any CPU), glslang-tools, the Khronos validation layer (tests) and
# python3-venv. Idempotent: with everything present it installs nothing.
set -euo pipefail
pkgs=()
{ ldconfig -p 2>/dev/null | grep 'libvulkan.so.1' >/dev/null; } || pkgs+=(libvulkan1)   # no grep -q: with pipefail its early exit fails the pipe
# Mesa's packages require one another at the same version: asking for the archive's newest
# mesa-vulkan-drivers upgrades the installed Mesa GL packages with it, so ask for the version of
# the Mesa already installed when the archive still has it.
mesa_pkg() {
  local have
  have=$(dpkg-query -W -f='${Version}' libglapi-mesa 2>/dev/null || true)
  if [ -n "$have" ] && apt-cache madison mesa-vulkan-drivers 2>/dev/null | grep -F "| $have |" >/dev/null; then
    echo "mesa-vulkan-drivers=$have"
  else
    echo mesa-vulkan-drivers
  fi
}
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || pkgs+=(MESA)
command -v glslangValidator >/dev/null || pkgs+=(glslang-tools)
command -v vulkaninfo >/dev/null || pkgs+=(vulkan-tools)
ls /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json >/dev/null 2>&1 || pkgs+=(vulkan-validationlayers)
python3 -c 'import venv, ensurepip' 2>/dev/null || pkgs+=(python3-venv)
[ ${#pkgs[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "vkdecode needs system packages: ${pkgs[*]/MESA/mesa-vulkan-drivers}" >&2
  echo "run as root:  sudo make demo   (or sudo bash scripts/bootstrap.sh)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
pkgs=("${pkgs[@]/MESA/$(mesa_pkg)}")   # after the update: madison reads the fresh package lists
echo "installing the missing system packages (and what apt needs for them): ${pkgs[*]}"
# --no-upgrade: what is already installed stays as it is; only the missing packages come in
apt-get install -y --no-install-recommends --no-upgrade "${pkgs[@]}"
