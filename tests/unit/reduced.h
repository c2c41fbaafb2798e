/* reduced.h — the reduced case set of the compile- and emulator-heavy tests.
 *
 * KILN_TEST_REDUCED=1 (tools/test.sh sets it for its ASan + UBSan pass only) makes those tests
 * run a representative part of their case lists instead of all of it: every k-th case of a
 * list, chosen so that each family (dtype, target, variant, config) keeps at least one case and
 * the ragged sizes stay (the tests keep their size lists whole and thin out the kernels, which
 * are what costs: LLVM's compiles through ASan's allocator, the instrumented emulator).  Every
 * assertion of a case that runs stays; no test is skipped.  Unset or 0: every case, as always.
 * Header-only; each test file that includes it has its own copy. */
#ifndef KILN_TEST_REDUCED_H
#define KILN_TEST_REDUCED_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* whether KILN_TEST_REDUCED is set (and not 0); says so once on stdout */
static inline bool test_reduced(void) {
  static int on = -1;
  if (on < 0) {
    const char *e = getenv("KILN_TEST_REDUCED");
    on = e && *e && strcmp(e, "0");
    if (on) printf("[ reduced ] KILN_TEST_REDUCED: a representative subset of the cases\n");
  }
  return on;
}

/* whether case i of a list runs: every case normally, every k-th (i % k == 0) when reduced */
static inline bool test_keep(int i, int k) { return !test_reduced() || k <= 1 || i % k == 0; }

/* test_keep on a counter of its own calls (one counter per test file): for nested loops, the
 * k-th kernel of the whole nest, so that with k prime to the inner loops' lengths the kept ones
 * rotate through every inner value instead of always taking the first */
static inline bool test_take(int k) {
  static int calls;
  return test_keep(calls++, k);
}

#endif
