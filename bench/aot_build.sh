#!/usr/bin/env bash
# aot_build.sh — the bundle build time (bench/RESULTS.md, "AOT bundles"): `kiln aot -j 1` and
# `-j N` on tests/aot/attention16.manifest (16 kernels x gfx90a, gfx942, sm_80, sm_90a: 64
# objects, cubins too where ptxas is found) against the same 64 objects made by separate
# `kiln compile` runs one after another (code objects for AMD; PTX then the cubin for NVIDIA,
# two runs each, as a script without `kiln aot` would do), then the warm load time per kernel
# through the API from the bundle (test_aot on the HIP stand-in and the fake CUDA driver).
# usage: bench/aot_build.sh [BUILD_DIR] [N]        (default build, N = nproc)
set -euo pipefail
build=${1:-build}
n=${2:-$(nproc)}
kiln=$build/tools/kiln
manifest=tests/aot/attention16.manifest
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
now() { date +%s.%N; }
for j in 1 "$n"; do
  t0=$(now)
  "$kiln" aot "$manifest" -o "$out/j$j" -j "$j" >/dev/null
  echo "kiln aot -j $j: $(echo "$(now) - $t0" | bc) s"
done
t0=$(now)
runs=0
while read -r kw name fields; do
  [ "$kw" = kernel ] || continue
  opts=()
  for f in $fields; do
    case $f in
      dtype=*) opts+=(--dtype "${f#dtype=}") ;;
      head_dim=*) opts+=(--head-dim "${f#head_dim=}") ;;
      variant=*) v=${f#variant=}
        [[ $v == *causal* ]] && opts+=(--causal)
        [[ $v == *window* ]] && opts+=(--window 24,3) ;;
      archs=*) archs=${f#archs=} ;;
    esac
  done
  for a in ${archs//,/ }; do
    case $a in
      gfx*) "$kiln" compile --target "$a" "${opts[@]}" -o "$out/$name.$a.hsaco"; runs=$((runs + 1)) ;;
      sm_*) "$kiln" compile --target "$a" "${opts[@]}" -o "$out/$name.$a.ptx"
            "$kiln" compile --target "$a" "${opts[@]}" --emit cubin -o "$out/$name.$a.cubin" 2>/dev/null || true
            runs=$((runs + 2)) ;;
    esac
  done
done <"$manifest"
echo "$runs serial kiln compile runs: $(echo "$(now) - $t0" | bc) s"
for t in test_aot_cuda_fake test_aot_hip_fake; do
  ctest --test-dir "$build" -R "^$t\$" -V 2>/dev/null | grep -o 'bundle load.*' | sed "s/^/$t: /"
done
