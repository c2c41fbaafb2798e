#!/usr/bin/env bash
# examples.sh — the examples build and run (CTest `examples`).
# usage: examples.sh SOURCE_DIR BUILD_DIR FAKE_LIBCUDA
#  - examples/embed.c (build/examples/embed): a serving loop through include/kiln.h on the host;
#    every request's output within tolerance, the first process compiles each descriptor once,
#    a second process on the same cache directory compiles nothing;
#  - examples/embed_min.c and embed.cpp (build/examples/embed_min, embed_cpp): their PASS lines
#    (tests/install.sh builds and runs them again against an installed prefix);
#  - examples/aot: `kiln aot --emit-c` on its manifest, main.c built on the launcher with plain cc
#    and run on the fake CUDA driver (FAKE_LIBCUDA).
set -u
src=$1 build=$2 fake=$3
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

# examples/aot: the bundle and launcher of its manifest, main.c compiled with plain cc on it (no
# kiln, no LLVM), run on the fake CUDA driver told what each kernel computes (a float64
# attention from the launch's parameters: the launcher's packing and main.c's shapes are checked)
"$build/tools/kiln" aot "$src/examples/aot/kernels.manifest" -o "$tmp/aot" -j 2 \
  --emit-c aot_kernels >"$tmp/aot.log" 2>&1
check aot-build sh -c "grep -q '^kiln aot: 2 kernels, 8 objects' '$tmp/aot.log'"
${CC:-cc} -std=gnu17 -O2 -Wall -Wextra -Werror -I "$tmp/aot" "$src/examples/aot/main.c" \
  "$tmp/aot/aot_kernels.c" -ldl -lpthread -lm -o "$tmp/aot_example" >>"$tmp/aot.log" 2>&1
check aot-cc [ $? -eq 0 ]
export KILN_FAKE_CUDA_KERNELS="attn_fwd_causal_f16_d64=f16:64:1:0:0;attn_fwd_window_bf16_d128=bf16:128:0:1:0"
KILN_CUDA_LIBRARY=$fake "$tmp/aot_example" >>"$tmp/aot.log" 2>&1
echo "aot_example exit $?" >>"$tmp/aot.log"
# the same kernels described as something else: main.c's check must fail
KILN_FAKE_CUDA_KERNELS="attn_fwd_causal_f16_d64=f16:64:0:0:0" KILN_CUDA_LIBRARY=$fake \
  "$tmp/aot_example" >"$tmp/aot_wrong.log" 2>&1
echo "aot_example exit $?" >>"$tmp/aot_wrong.log"
"$tmp/aot_example" hip >"$tmp/aot_nogpu.log" 2>&1
echo "aot_example exit $?" >>"$tmp/aot_nogpu.log"
sed 's/^/  | /' "$tmp/aot.log" "$tmp/aot_wrong.log" "$tmp/aot_nogpu.log"
check aot-run sh -c "[ \$(grep -c ' ok\$' '$tmp/aot.log') -eq 2 ] && grep -q -x PASS '$tmp/aot.log' && grep -q -x 'aot_example exit 0' '$tmp/aot.log'"
check aot-run-can-fail sh -c "grep -q '^causal_f16_d64 on .* FAIL\$' '$tmp/aot_wrong.log' && grep -q -x 'aot_example exit 1' '$tmp/aot_wrong.log'"
check aot-no-gpu sh -c "grep -q '^aot_example: no HIP runtime' '$tmp/aot_nogpu.log' && grep -q -x 'aot_example exit 2' '$tmp/aot_nogpu.log'"
unset KILN_FAKE_CUDA_KERNELS

echo "examples: $fails failed"
[ "$fails" -eq 0 ]
