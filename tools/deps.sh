#!/usr/bin/env bash
# deps.sh — install what kiln needs to build and test on Debian 12, only what is missing.
# Uses sudo when not root.  Safe to run again: it does nothing when everything is present.
set -euo pipefail
pkgs=(cmake make gcc g++ pkg-config
      llvm-22-dev lld-22 liblld-22-dev libclang-rt-22-dev
      libcmocka-dev libxxhash-dev libsqlite3-dev zlib1g-dev libzstd-dev
      libamdhip64-dev   # HIP headers and runtime: discovery reports "no AMD device" cleanly
      libamd-comgr2     # ROCm's comgr: the HIP runtime reads code objects' metadata with it
      clang-22)         # libFuzzer for fuzz/ (the `fuzz` test; bench/fuzz_long.sh)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "kiln: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
