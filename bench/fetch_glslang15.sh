#!/usr/bin/env bash
# Fetch Debian 13 (trixie)'s glslang-tools and what it runs with (spirv-tools, libc6, libstdc++6,
# libgcc-s1; ~10 MB of debs) into DIR (default .device/trixie-debs: carried to the GPU machine,
# never into .device/debs, whose debs are unpacked over /) and unpack them into $VKDECODE_TRIXIE
# (default /tmp/trixie-root, ~60 MB) for bench/glslang15.sh; with the debs there already, it only
# unpacks. The versions are pinned to those checked on 2026-11-27 (glslang 15.2.0).
set -euo pipefail
DIR=${1:-$(cd "$(dirname "$0")/.." && pwd)/.device/trixie-debs}
ROOT=${VKDECODE_TRIXIE:-/tmp/trixie-root}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$DIR" "$ROOT"
for f in g/glslang/glslang-tools_15.1.0+1.4.309.0-1_amd64.deb s/spirv-tools/spirv-tools_2025.1~rc1-1_amd64.deb \
         g/glibc/libc6_2.41-12+deb13u5_amd64.deb g/gcc-14/libstdc++6_14.2.0-19_amd64.deb \
         g/gcc-14/libgcc-s1_14.2.0-19_amd64.deb; do
    [ -f "$DIR/$(basename "$f")" ] || curl -sSfL -o "$DIR/$(basename "$f")" "$MIRROR/pool/main/$f"
done
for d in "$DIR"/*.deb; do dpkg -x "$d" "$ROOT"; done
"$(dirname "$0")/glslang15.sh" --version | head -1
