#!/usr/bin/env bash
# build_pylib.sh — libkiln.so with LLVM linked in statically, for the Python binding on a machine
# without LLVM (the H200).  Reuses build-static/ (configured by build_static.sh, which it runs
# first when needed) and packs pack/pylib.tar.xz: lib/libkiln.so.0 (stripped) plus the two shared
# libraries it needs beyond glibc and libstdc++ (xxHash, SQLite).  On the device:
#   tar -C $D -xJf bench/h200/pack/pylib.tar.xz; export LD_LIBRARY_PATH=$D/lib
#   KILN_LIBRARY=$D/lib/libkiln.so.0 python3 bench/h200/python_torch_check.py
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ -f "$root/build-static/CMakeCache.txt" ] || KILN_STATIC_TARGETS=test_cuda bash "$here/build_static.sh"
cmake --build "$root/build-static" -j "$(nproc)" --target kiln_shared
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib" "$here/pack"
strip -o "$tmp/lib/libkiln.so.0" "$root/build-static/api/libkiln.so.0"
for l in libxxhash.so.0 libsqlite3.so.0; do
  cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')" "$tmp/lib/"
done
ldd "$tmp/lib/libkiln.so.0"
tar -C "$tmp" -cJf "$here/pack/pylib.tar.xz" lib
echo "packed: $here/pack/pylib.tar.xz, $(( $(stat -c %s "$here/pack/pylib.tar.xz") / 1024 )) KiB"
