#!/usr/bin/env bash
# test.sh — README's second command: install what is missing, build, run the whole test suite
# (CTest), then the whole suite again built under AddressSanitizer and UBSan (build-asan/:
# KILN_ASAN, docs/hostile_inputs.md "Sanitizers").  CI runs this (.ci/run).  The suite in build/
# includes the ThreadSanitizer copies of the threaded API tests and the libFuzzer targets for a
# short time (`fuzz`).  Arguments go to both ctest runs (say, -R cli); KILN_TEST_ASAN=0 skips the
# sanitizer pass.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
tools/deps.sh
tools/build.sh
ctest --test-dir build --output-on-failure -j "$jobs" "$@"
if [ "${KILN_TEST_ASAN:-1}" != 0 ]; then
  echo "== the suite under ASan + UBSan (build-asan)"
  cmake -S . -B build-asan -DKILN_WERROR=ON -DKILN_ASAN=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  ctest --test-dir build-asan --output-on-failure -j "$jobs" "$@"
fi
