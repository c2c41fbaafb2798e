#!/usr/bin/env bash
# test.sh — README's second command: install what is missing, build, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
tools/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@"
