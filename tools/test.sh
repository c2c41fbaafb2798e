#!/usr/bin/env bash
# test.sh — README's second command: install what is missing, build, run the whole test suite
# (CTest), then the suite again built under AddressSanitizer and UBSan (build-asan/: KILN_ASAN,
# docs/hostile_inputs.md "Sanitizers").  CI runs this (.ci/run).  The suite in build/ includes
# the ThreadSanitizer copy of the threaded API test and the libFuzzer targets for a short time
# (`fuzz`, tools/build.sh turns it on; skipped where clang-22 is absent).
#
# The ASan pass runs the tests of kiln's own input handling and runtime (KILN_TEST_ASAN_TESTS, a
# ctest -R regex: the IR's reader and interpreter, the CLI, the API's argument checks and hostile
# inputs, the cache, the tuning database, discovery, the CUDA and HIP runtimes on their fakes, AOT
# bundles and libkiln_rt), not the compile- and emulator-heavy kernel tests, which spend their
# time in LLVM (not instrumented) and take 4-8 times their plain time under ASan (measured:
# docs/hostile_inputs.md): with them the pass would not fit CI's 90 minutes on 2 cores beside the
# plain suite and the fuzz test.  KILN_TEST_ASAN_TESTS=. runs every test (minus
# KILN_TEST_ASAN_SKIP, a ctest -E regex, empty by default); KILN_TEST_ASAN=0 skips the pass.
# Arguments go to both ctest runs (say, -R cli).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
tools/deps.sh
tools/build.sh
ctest --test-dir build --output-on-failure -j "$jobs" "$@"
only=${KILN_TEST_ASAN_TESTS-'^(test_numeric|test_interp|test_text|test_verify|golden|malformed|cli|api_cli|test_target_id|test_layout|test_cache|test_tunedb|test_discover|test_cuda_fake|test_api|test_hostile|test_api_cuda_fake|test_api_hip_fake|test_aot|test_aot_cuda_fake|test_aot_rt_cuda_fake|test_emu|scripts)$'}
skip=${KILN_TEST_ASAN_SKIP-}
if [ "${KILN_TEST_ASAN:-1}" != 0 ]; then
  echo "== tests under ASan + UBSan (build-asan): ${only:-all}${skip:+, leaving out $skip}"
  cmake -S . -B build-asan -DKILN_WERROR=ON -DKILN_ASAN=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  ctest --test-dir build-asan --output-on-failure -j "$jobs" ${only:+-R "$only"} \
    ${skip:+-E "$skip"} "$@"
fi
