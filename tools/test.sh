#!/usr/bin/env bash
# test.sh — README's second command: install what is missing, build, run the whole test suite
# (CTest), then the suite again built under AddressSanitizer and UBSan (build-asan/: KILN_ASAN,
# docs/hostile_inputs.md "Sanitizers").  CI runs this (.ci/run).  The suite in build/ includes
# the ThreadSanitizer copy of the threaded API test and the libFuzzer targets for a short time
# (`fuzz`, tools/build.sh turns it on; skipped where clang-22 is absent).
#
# The ASan pass runs every test of the suite (the fuzz targets and the TSan and _san copies are
# build/'s alone: build-asan configures neither).  The compile- and emulator-heavy kernel tests
# spend their time in LLVM (not instrumented, but its allocations go through ASan's allocator)
# and in the instrumented emulator, 3-8 times their plain time under ASan; KILN_TEST_REDUCED=1,
# set for this pass only, makes them run a representative part of their case lists
# (tests/unit/reduced.h: every k-th kernel, each dtype, target and variant family kept, the
# ragged sizes kept, every assertion of a case that runs), so that the pass fits CI's 90
# minutes on 2 cores beside the deps, the builds and the plain suite (measured:
# docs/hostile_inputs.md "Sanitizers").  KILN_TEST_REDUCED=0 runs their whole case lists under
# ASan too.  KILN_TEST_ASAN_TESTS (a ctest -R regex) narrows the pass, KILN_TEST_ASAN_SKIP (a
# ctest -E regex, empty by default) leaves tests out; KILN_TEST_ASAN=0 skips the pass.
# Arguments go to both ctest runs (say, -R cli).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
tools/deps.sh
tools/build.sh
ctest --test-dir build --output-on-failure -j "$jobs" "$@"
only=${KILN_TEST_ASAN_TESTS-}
skip=${KILN_TEST_ASAN_SKIP-}
if [ "${KILN_TEST_ASAN:-1}" != 0 ]; then
  echo "== tests under ASan + UBSan (build-asan): ${only:-all}${skip:+, leaving out $skip}, KILN_TEST_REDUCED=${KILN_TEST_REDUCED-1}"
  cmake -S . -B build-asan -DKILN_WERROR=ON -DKILN_ASAN=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  KILN_TEST_REDUCED=${KILN_TEST_REDUCED-1} \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" ${only:+-R "$only"} \
    ${skip:+-E "$skip"} "$@"
fi
