#!/usr/bin/env bash
# build_static.sh — builds kiln and the device-side test binaries with LLVM linked statically,
# strips them and packs them for the lent H200 (see docs/nvidia.md).
#
# The H200 machine has the CUDA driver, PyTorch and Triton but no LLVM and no package registry,
# so what runs there must carry LLVM inside: KILN_LLVM_STATIC=ON links LLVM's component archives,
# static_deps.cmake (beside this script) swaps zlib/zstd for their .a archives, libstdc++ and
# libgcc are linked statically, and --as-needed drops libraries nothing references (Debian's
# LLVMSupport names libz3.so, which only LLVM's SMT solver API uses).  What is left needed is
# glibc (libc, libm, libdl, libpthread) — checked with ldd below; the build fails if anything
# else remains.  cmocka exists here only as a shared library, so the test binaries' copy of it
# travels in the pack's lib/ (device_run.sh sets LD_LIBRARY_PATH); so do SQLite and xxHash
# (plain C libraries needing only glibc) for binaries that link the API (test_api_cuda), whose
# pkg-config targets name the shared libraries.
#
# Output: bench/h200/pack/kiln-h200.tar.xz (gitignored), unpacked by device_run.sh into
# kiln-h200/{bin,lib,MANIFEST}.  Run from anywhere; uses build-static/ at the repository root.
#   KILN_STATIC_TARGETS   targets to build and pack (default: kiln test_cuda test_ptxas; each
#                         LLVM-linked one, e.g. test_host, adds about 14 MiB to the pack)
#   KILN_STATIC_JOBS      parallel jobs (default: nproc)
# With test_aot (or test_aot_rt, its libkiln_rt build) among the targets, the AOT bundle of tests/aot/attention16.manifest (and its
# generated launcher) is built here with that kiln and packed as kiln-h200/aot_bundle, and
# examples/aot's program on its own generated launcher as bin/aot_example, for device_run.sh's
# `aot` step (docs/aot.md).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$root/build-static"
pack="$here/pack"
stage="$pack/kiln-h200"
targets=${KILN_STATIC_TARGETS:-"kiln test_cuda test_ptxas kiln_attn_bench"}
jobs=${KILN_STATIC_JOBS:-$(nproc)}
limit_mib=60

echo "== configure $build"
cmake -S "$root" -B "$build" \
  -DKILN_LLVM_STATIC=ON -DCMAKE_BUILD_TYPE=Release -DKILN_SANITIZERS=OFF \
  -DCMAKE_PROJECT_INCLUDE="$here/static_deps.cmake" \
  "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc -Wl,--as-needed" >"$build.configure.log" 2>&1 \
  || { tail -30 "$build.configure.log"; exit 1; }
grep "kiln static build" "$build.configure.log" || true

echo "== build: $targets (-j$jobs)"
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" --target $targets

rm -rf "$pack"
mkdir -p "$stage/bin" "$stage/lib"
status=0
for t in $targets; do
  f=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  if [ -z "$f" ]; then echo "error: no binary for target $t" >&2; status=1; continue; fi
  cp "$f" "$stage/bin/$t"
  strip --strip-unneeded "$stage/bin/$t"
done

# what the binaries still need: glibc's libraries are on every Linux; cmocka travels with us
echo "== ldd"
allowed='^(linux-vdso\.so|/lib64/ld-linux-x86-64\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libz\.so|libzstd\.so)'
for b in "$stage"/bin/*; do
  echo "-- $(basename "$b")"
  ldd "$b" | sed 's/^/   /'
  while read -r lib _; do
    [ -z "$lib" ] && continue
    if [[ "$lib" =~ ^(libcmocka|libsqlite3|libxxhash)\.so ]]; then
      path=$(ldd "$b" | awk -v l="$lib" '$1 == l {print $3}')
      cp -L "$path" "$stage/lib/$lib"
    elif ! [[ "$lib" =~ $allowed ]]; then
      echo "error: $(basename "$b") needs $lib, which the device may not have" >&2
      status=1
    fi
  done < <(ldd "$b" | awk '{print $1}')
done

if [[ " $targets " == *" test_aot "* || " $targets " == *" test_aot_rt "* ]]; then
  # the bundle holds AMD code objects, which need lld: the static kiln has none, so the
  # bundle comes from the regular build's kiln (KILN_AOT_KILN; build/tools/kiln by default)
  aot_kiln=${KILN_AOT_KILN:-$root/build/tools/kiln}
  [ -x "$aot_kiln" ] || { echo "error: $aot_kiln missing (build kiln, or set KILN_AOT_KILN)" >&2; exit 1; }
  echo "== the AOT bundle (tests/aot/attention16.manifest) with $aot_kiln"
  "$aot_kiln" aot "$root/tests/aot/attention16.manifest" -o "$stage/aot_bundle" -j "$jobs" \
    --emit-c kiln_aot | tail -1
  "$aot_kiln" aot "$root/tests/aot/variants.manifest" -o "$stage/aot_variants" -j "$jobs" \
    --emit-c kiln_aotv | tail -1
  echo "== examples/aot: its bundle, launcher and main (cc; glibc only)"
  "$aot_kiln" aot "$root/examples/aot/kernels.manifest" -o "$build/aot_example" -j "$jobs" \
    --emit-c aot_kernels | tail -1
  ${CC:-cc} -std=gnu17 -O2 -I "$build/aot_example" "$root/examples/aot/main.c" \
    "$build/aot_example/aot_kernels.c" -ldl -lpthread -lm -o "$stage/bin/aot_example"
fi

{
  echo "kiln static pack for the H200"
  echo "commit: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
  echo "targets: $targets"
  for b in "$stage"/bin/*; do echo "$(basename "$b"): $(stat -c %s "$b") bytes"; done
} >"$stage/MANIFEST"

echo "== pack"
tar -C "$pack" -cJf "$pack/kiln-h200.tar.xz" kiln-h200
rm -rf "$stage"
size=$(stat -c %s "$pack/kiln-h200.tar.xz")
echo "packed: $pack/kiln-h200.tar.xz, $((size / 1024)) KiB"
if [ "$size" -gt $((limit_mib * 1024 * 1024)) ]; then
  echo "error: the pack exceeds ${limit_mib} MiB (the device tool carries at most 64 MiB)" >&2
  status=1
fi
exit $status
