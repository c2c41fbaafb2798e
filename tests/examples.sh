#!/usr/bin/env bash
# examples.sh — the examples build and run (CTest `examples`).
# usage: examples.sh SOURCE_DIR BUILD_DIR
#  - examples/embed.c (build/examples/embed): a serving loop through include/kiln.h on the host;
#    every request's output within tolerance, the first process compiles each descriptor once,
#    a second process on the same cache directory compiles nothing;
#  - examples/embed_min.c and embed.cpp (build/examples/embed_min, embed_cpp): their PASS lines
#    (tests/install.sh builds and runs them again against an installed prefix);
#  - examples/aot.sh: code objects and PTX with a manifest (two targets, two variants here).
set -u
src=$1 build=$2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KILN_CUDA_LIBRARY=none KILN_HIP_LIBRARY=none
unset KILN_AUTOTUNE KILN_TUNE_SPACE KILN_CACHE_FAULT KILN_DUMP
check() {  # NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}

for i in 1 2; do
  "$build/examples/embed" "$tmp/cache" >"$tmp/embed$i" 2>&1
  echo "embed exit $?" >>"$tmp/embed$i"
  sed 's/^/  | /' "$tmp/embed$i"
done
check embed-first grep -q '^context: 8 prepares, 5 memo hits, 0 cache hits, 5 compiles, 8 launches$' "$tmp/embed1"
check embed-first-ok sh -c "[ \$(grep -c ' ok\$' '$tmp/embed1') -eq 8 ] && grep -q '^embed exit 0\$' '$tmp/embed1'"
check embed-second grep -q '^context: 8 prepares, 5 memo hits, 5 cache hits, 0 compiles, 8 launches$' "$tmp/embed2"
check embed-second-ok sh -c "[ \$(grep -c ' ok\$' '$tmp/embed2') -eq 8 ] && grep -q '^embed exit 0\$' '$tmp/embed2'"

"$build/examples/embed_min" host "$tmp/cache" >"$tmp/min" 2>&1
sed 's/^/  | /' "$tmp/min"
check embed_min grep -q -x PASS "$tmp/min"
"$build/examples/embed_cpp" host "$tmp/cache" >"$tmp/cpp" 2>&1
sed 's/^/  | /' "$tmp/cpp"
check embed_cpp sh -c "[ \$(grep -c ' ok\$' '$tmp/cpp') -eq 4 ] && grep -q -x PASS '$tmp/cpp'"

KILN=$build/tools/kiln AOT_TARGETS="gfx942 sm_80" AOT_VARIANTS="f16:64:1 bf16:128:0" \
  "$src/examples/aot.sh" "$tmp/aot" >"$tmp/aot.log" 2>&1
rc=$?
sed 's/^/  | /' "$tmp/aot.log"
m=$tmp/aot/MANIFEST.tsv
check aot-exit [ "$rc" -eq 0 ]
# one line per artefact, each naming an existing file, its variant, a tiling (the registry's
# default, which may change), threads = lanes x warps and a shared-memory plan
check aot-manifest awk -F '\t' -v dir="$tmp/aot" '
  NR == 1 { next }
  { n++; lanes = $2 ~ /^gfx/ ? 64 : 32
    if ((getline line < (dir "/" $1)) <= 0 || $7 <= 0 || $8 <= 0 || $9 != lanes * $8 || $10 <= 0) bad++ }
  END { exit !(n == 4 && !bad) }' "$m"
check aot-variants grep -q $'^attn_fwd_bf16_d128.sm_80.ptx\tsm_80\tbf16\t128\t0\t' "$m"
check aot-hsaco-is-elf sh -c "head -c 4 '$tmp/aot/attn_fwd_bf16_d128.gfx942.hsaco' | grep -q ELF"
check aot-ptx sh -c "grep -q '^.target sm_80' '$tmp/aot/attn_fwd_f16_d64_causal.sm_80.ptx'"

echo "examples: $fails failed"
[ "$fails" -eq 0 ]
