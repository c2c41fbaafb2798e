#!/usr/bin/env bash
# install.sh — kiln installed like a library, and applications built against the installed
# prefix only (CTest `install`; docs/install.md is what it checks).
# usage: install.sh SOURCE_DIR BUILD_DIR FAKE_LIBCUDA
#  1. `cmake --install BUILD --prefix TMP/prefix`: the headers, both shared libraries with their
#     sonames, both archives, kiln, the CMake package and the .pc files are where
#     docs/install.md says;
#  2. the layering: libkiln_rt.so needs neither LLVM nor libstdc++ and leaves no LLVM or lld
#     symbol undefined, nor does libkiln_rt.a;
#  3. examples/ configured on its own against the prefix (find_package(kiln)), shared and
#     static: embed, embed_min and embed_cpp on the host print their PASS / ok lines; the
#     libkiln_rt build of embed_min refuses the host (no compiler) and, on the fake CUDA driver
#     (FAKE_LIBCUDA: device memory is host memory, attn_fwd a float64 attention), runs the
#     kernel libkiln's embed_min left in the cache, with nothing compiled;
#     examples/aot's launcher, written by the installed kiln at build time, runs on the fake
#     CUDA driver with no kiln linked;
#  4. the same through pkg-config: kiln.pc (shared) and kiln_rt.pc's static_libs (the archive),
#     and examples/aot with the kiln binary kiln.pc names;
#  5. the installed kiln binary runs.
set -u
src=$1 build=$2 fake=$3
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KILN_CUDA_LIBRARY=none KILN_HIP_LIBRARY=none
unset KILN_AUTOTUNE KILN_TUNE_SPACE KILN_CACHE_FAULT KILN_DUMP KILN_CACHE_DIR
check() {  # NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
run() {  # LOG COMMAND...: runs it, appends "exit N" to LOG, shows LOG
  local log=$1
  shift
  "$@" >"$log" 2>&1
  echo "exit $?" >>"$log"
  sed 's/^/  | /' "$log"
}

p=$tmp/prefix
cmake --install "$build" --prefix "$p" >"$tmp/install.log" 2>&1
check install [ $? -eq 0 ]
for f in include/kiln.h lib/libkiln.so.0.1.0 lib/libkiln_rt.so.0.1.0 lib/libkiln.a \
         lib/libkiln_rt.a bin/kiln lib/cmake/kiln/kilnConfig.cmake \
         lib/cmake/kiln/kilnConfigVersion.cmake lib/pkgconfig/kiln.pc lib/pkgconfig/kiln_rt.pc; do
  check "installed-$f" [ -f "$p/$f" ]
done
for l in kiln kiln_rt; do
  check "soname-$l" sh -c "readelf -d '$p/lib/lib$l.so.0.1.0' | grep -q 'Library soname: \[lib$l.so.0\]'"
  check "symlink-$l" [ "$(readlink "$p/lib/lib$l.so")" = "lib$l.so.0" ]
done

# the layering: no LLVM in libkiln_rt (libkiln has it, so the check can tell)
rt=$p/lib/libkiln_rt.so.0.1.0
readelf -d "$rt" | grep NEEDED >"$tmp/rt.needed"
check rt-needs-no-llvm sh -c "! grep -q -E 'LLVM|lld|stdc\+\+' '$tmp/rt.needed'"
check full-needs-llvm grep -q LLVM <(readelf -d "$p/lib/libkiln.so.0.1.0")
llvm_syms='(^|[^a-z])(LLVM|_ZN4llvm|_ZN3lld)'
check rt-no-llvm-symbols sh -c "! nm -D --undefined-only '$rt' | grep -q -E '$llvm_syms'"
check rt-archive-no-llvm-symbols sh -c "! nm --undefined-only '$p/lib/libkiln_rt.a' 2>/dev/null | grep -q -E '$llvm_syms'"
check full-archive-has-llvm-symbols sh -c "nm --undefined-only '$p/lib/libkiln.a' 2>/dev/null | grep -q -E '$llvm_syms'"
check rt-exports-api-only sh -c "! nm -D --defined-only '$rt' | awk '{print \$3}' | grep -v -q '^kiln_'"

# what the fake CUDA driver computes for the kernels of examples/aot/kernels.manifest
aot_kernels="attn_fwd_causal_f16_d64=f16:64:1:0:0;attn_fwd_window_bf16_d128=bf16:128:0:1:0"

# examples/ against the prefix, through find_package(kiln): shared, then static
for kind in shared static; do
  ex=$tmp/ex-$kind
  static=$([ $kind = static ] && echo ON || echo OFF)
  cmake -S "$src/examples" -B "$ex" -DCMAKE_PREFIX_PATH="$p" -DKILN_EXAMPLES_STATIC=$static \
    -DCMAKE_BUILD_TYPE=Release >"$tmp/cfg-$kind.log" 2>&1 &&
    cmake --build "$ex" -j 2 >"$tmp/build-$kind.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || tail -n 30 "$tmp/cfg-$kind.log" "$tmp/build-$kind.log"
  check "cmake-$kind-build" [ $rc -eq 0 ]
  c=$tmp/cache-$kind
  run "$tmp/min-$kind" "$ex/embed_min" host "$c"
  check "cmake-$kind-embed_min" grep -q -x 'PASS' "$tmp/min-$kind"
  run "$tmp/cpp-$kind" "$ex/embed_cpp" host "$c"
  check "cmake-$kind-embed_cpp" sh -c "[ \$(grep -c ' ok\$' '$tmp/cpp-$kind') -eq 4 ] && grep -q -x PASS '$tmp/cpp-$kind' && grep -q ', 1 compiles,' '$tmp/cpp-$kind'"
  run "$tmp/rt-host-$kind" "$ex/embed_min_rt" host "$c"
  check "cmake-$kind-rt-host-refused" sh -c "grep -q 'libkiln_rt) has no compiler' '$tmp/rt-host-$kind' && grep -q -x 'exit 1' '$tmp/rt-host-$kind'"
  # a serving process with libkiln_rt: the kernel libkiln compiled for the GPU, from the cache
  g=$tmp/gpu-cache-$kind
  KILN_CUDA_LIBRARY=$fake run "$tmp/gpu-$kind" "$ex/embed_min" sm_80 "$g"
  check "cmake-$kind-gpu-compiled" sh -c "grep -q -x 'kernel compiled for sm_80' '$tmp/gpu-$kind' && grep -q -x PASS '$tmp/gpu-$kind'"
  KILN_CUDA_LIBRARY=$fake run "$tmp/gpu-rt-$kind" "$ex/embed_min_rt" sm_80 "$g"
  check "cmake-$kind-rt-gpu-from-cache" sh -c "grep -q -x 'kernel from the cache for sm_80' '$tmp/gpu-rt-$kind' && grep -q -x PASS '$tmp/gpu-rt-$kind'"
  # examples/aot: the installed kiln wrote the launcher at build time; it runs with no kiln
  KILN_CUDA_LIBRARY=$fake KILN_FAKE_CUDA_KERNELS=$aot_kernels run "$tmp/aot-$kind" "$ex/aot_example"
  check "cmake-$kind-aot_example" sh -c "[ \$(grep -c ' ok\$' '$tmp/aot-$kind') -eq 2 ] && grep -q -x PASS '$tmp/aot-$kind'"
  check "cmake-$kind-aot-no-libkiln" sh -c "[ -x '$ex/aot_example' ] && ! ldd '$ex/aot_example' | grep -q -E 'kiln|LLVM'"
  if [ $kind = static ]; then
    check static-links-no-libkiln sh -c "! ldd '$ex/embed_min' '$ex/embed_min_rt' | grep -q libkiln"
    # (built under ASan + UBSan, build-asan's run: UBSan's runtime needs libstdc++ itself)
    cxx='|stdc\+\+'
    ldd "$ex/embed_min_rt" | grep -q libubsan && cxx=
    check static-rt-no-llvm sh -c "! ldd '$ex/embed_min_rt' | grep -q -E 'LLVM$cxx'"
  else
    check shared-links-libkiln sh -c "ldd '$ex/embed_min' | grep -q 'libkiln.so.0 => $p/lib/'"
  fi
done
run "$tmp/embed" "$tmp/ex-shared/embed" "$tmp/cache-embed"
check cmake-embed sh -c "[ \$(grep -c ' ok\$' '$tmp/embed') -eq 8 ] && grep -q -x 'exit 0' '$tmp/embed'"

# pkg-config: the shared library, and the archive through static_libs
export PKG_CONFIG_PATH=$p/lib/pkgconfig
cc=${CC:-cc}
$cc -std=gnu17 -o "$tmp/pc_min" "$src/examples/embed_min.c" $(pkg-config --cflags --libs kiln) -lm \
  -Wl,-rpath,"$(pkg-config --variable=libdir kiln)" 2>"$tmp/pc.log"
check pkgconfig-shared-build [ $? -eq 0 ]
run "$tmp/pc_min.out" "$tmp/pc_min" host "$tmp/cache-pc"
check pkgconfig-shared-embed_min grep -q -x PASS "$tmp/pc_min.out"
$cc -std=gnu17 -o "$tmp/pc_min_rt" "$src/examples/embed_min.c" $(pkg-config --cflags kiln_rt) \
  $(pkg-config --variable=static_libs kiln_rt) 2>>"$tmp/pc.log"
check pkgconfig-static-rt-build [ $? -eq 0 ]
KILN_CUDA_LIBRARY=$fake run "$tmp/pc_min_rt.out" "$tmp/pc_min_rt" sm_80 "$tmp/gpu-cache-shared"
check pkgconfig-static-rt-from-cache sh -c "grep -q -x 'kernel from the cache for sm_80' '$tmp/pc_min_rt.out' && grep -q -x PASS '$tmp/pc_min_rt.out'"
$cc -std=gnu17 -o "$tmp/pc_min_static" "$src/examples/embed_min.c" $(pkg-config --cflags kiln) \
  $(pkg-config --variable=static_libs kiln) 2>>"$tmp/pc.log"
check pkgconfig-static-build [ $? -eq 0 ]
run "$tmp/pc_min_static.out" "$tmp/pc_min_static" host "$tmp/cache-pc"
check pkgconfig-static-embed_min grep -q -x PASS "$tmp/pc_min_static.out"
# examples/aot through pkg-config: kiln.pc names the kiln binary
kiln_bin=$(pkg-config --variable=kiln kiln)
check pkgconfig-kiln-variable [ "$kiln_bin" -ef "$p/bin/kiln" ]
"$kiln_bin" aot "$src/examples/aot/kernels.manifest" -o "$tmp/aot-pc" -j 2 --emit-c aot_kernels \
  >>"$tmp/pc.log" 2>&1 &&
  $cc -std=gnu17 -O2 -I "$tmp/aot-pc" -o "$tmp/aot_pc" "$src/examples/aot/main.c" \
    "$tmp/aot-pc/aot_kernels.c" -ldl -lpthread -lm 2>>"$tmp/pc.log"
check pkgconfig-aot-build [ $? -eq 0 ]
KILN_CUDA_LIBRARY=$fake KILN_FAKE_CUDA_KERNELS=$aot_kernels run "$tmp/aot_pc.out" "$tmp/aot_pc"
check pkgconfig-aot_example grep -q -x PASS "$tmp/aot_pc.out"
sed 's/^/  | /' "$tmp/pc.log"

check kiln-binary sh -c "'$p/bin/kiln' --version | grep -q '^kiln 0.1.0 (LLVM '"

echo "install: $fails failed"
[ "$fails" -eq 0 ]
