#!/usr/bin/env bash
# build.sh — configure and build kiln into build/ (Release with debug info, warnings as errors,
# the `fuzz` test on: skipped where clang-22 is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DKILN_WERROR=ON -DKILN_FUZZ=ON >/dev/null
cmake --build build -j "$jobs"
