/* test_api_util.h — what the API tests (test_api.c, test_api_cuda.c, test_api_hip.c) share:
 * fresh cache directories and their removal, the seeded random inputs, and the prepare that
 * follows a tuning run.  Include after cmocka.h; every function is static. */
#ifndef KILN_TEST_API_UTIL_H
#define KILN_TEST_API_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "kiln.h"
#include "test_dirs.h"

/* a new empty directory under $TMPDIR (or /tmp); the caller removes it with rm_dir, which
 * removes the tree and frees the path (test_dirs.h) */
static char *fresh_dir(void) { return test_fresh_dir("test"); }
static void rm_dir(char *p) { test_rm_dir(p); }

/* splitmix64 */
static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* a standard normal sample (Box-Muller) */
static double normal(uint64_t *s) {
  double u1 = ((double)(rng(s) >> 11) + 0.5) * 0x1p-53, u2 = (double)(rng(s) >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* the prepare after kiln_tune (KILN_TUNE_CACHED at its seqlen): the record's tiling, best's, with
 * its code from the cache the tuner stored it in */
static inline kiln_kernel *prepare_tuned(kiln_context *ctx, const kiln_attn_desc *d, int seqlen,
                                         const kiln_tune_candidate *best) {
  kiln_prepare_options cached = {.tune_policy = KILN_TUNE_CACHED, .seqlen = seqlen};
  kiln_kernel *k;
  if (kiln_prepare(ctx, d, &cached, &k)) fail_msg("prepare: %s", kiln_last_error());
  kiln_kernel_info info;
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_true(info.tuned);
  assert_int_equal(info.block_m, best->block_m);
  assert_int_equal(info.block_n, best->block_n);
  assert_int_equal(info.warps, best->warps);
  assert_int_equal(info.source, KILN_SOURCE_CACHE);
  return k;
}

#endif
