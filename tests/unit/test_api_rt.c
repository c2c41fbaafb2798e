/* test_api_rt.c — libkiln_rt, the public API without a compiler (api/compiler_none.c), through
 * include/kiln.h alone: this binary links libkiln_rt.so and nothing of kiln's compiler.
 *
 * What libkiln_rt promises (docs/install.md): it serves a GPU from the code a kiln with a
 * compiler left in the disk cache, under the very cache keys that kiln computes, and it answers
 * everything that needs a compiler with KILN_ERR_UNSUPPORTED and a message saying so.  So:
 *   - the CUDA device (KILN_CUDA_LIBRARY = the fake driver of test_cuda.c, whose attn_fwd is a
 *     float64 attention reading the launch's kernelParams; its device memory is host memory):
 *     `kiln run --target sm_80` (argv[1], which links libkiln) fills a fresh cache; libkiln_rt
 *     then prepares the same kernel (a cache hit: 0 compiles), launches it and the output is
 *     checked against a float64 attention written here; a descriptor the cache lacks, kiln_tune
 *     and a forced tiling are KILN_ERR_UNSUPPORTED naming the missing compiler; KILN_TUNE_AUTO
 *     reads records like CACHED;
 *   - the host: a context is created and its cache listed, but a prepare is UNSUPPORTED (host
 *     code runs in LLVM's ORC JIT), before the cache is read, so an entry libkiln stored there
 *     stays;
 *   - kiln_llvm_version() is the build's LLVM (the version GPU code is keyed with).
 * Without the fake driver (KILN_CUDA_LIBRARY unset) the CUDA test is a cmocka skip.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw (test_dirs.h) */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "test_api_util.h"

static const char *kiln_binary;

typedef _Float16 half;

enum { B = 1, H = 2, N = 100, D = 64 };

static int count_log;
static char last_log[2048];
static void logger(void *user, kiln_log_level level, const char *msg) {
  (void)user, (void)level;
  count_log++;
  snprintf(last_log, sizeof last_log, "%s", msg);
}

/* the largest |o - reference| of a plain attention on contiguous (B, H, N, D) buffers (the fake
 * driver computes non-causal attention unless its test tells it otherwise) */
static double max_error(const half *q, const half *k, const half *v, const half *o) {
  double worst = 0, p[N];
  for (int h = 0; h < B * H; h++)
    for (int i = 0; i < N; i++) {
      const half *qi = q + ((size_t)h * N + i) * D;
      double m = -INFINITY, l = 0;
      for (int j = 0; j < N; j++) {
        double s = 0;
        for (int d = 0; d < D; d++) s += (double)qi[d] * (double)k[((size_t)h * N + j) * D + d];
        p[j] = s / sqrt(D);
        if (p[j] > m) m = p[j];
      }
      for (int j = 0; j < N; j++) l += p[j] = exp(p[j] - m);
      for (int d = 0; d < D; d++) {
        double want = 0;
        for (int j = 0; j < N; j++) want += p[j] / l * (double)v[((size_t)h * N + j) * D + d];
        double e = fabs((double)o[((size_t)h * N + i) * D + d] - want);
        if (!(e <= worst)) worst = e;
      }
    }
  return worst;
}

static void test_version(void **state) {
  (void)state;
  assert_string_equal(kiln_llvm_version(), KILN_TEST_LLVM_VERSION);
}

static void test_host(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context_options co = {.cache_dir = dir, .device = "host", .log = logger};
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&co, &ctx), KILN_OK);
  assert_string_equal(kiln_context_target(ctx), "host");
  kiln_attn_desc d = {.dtype = KILN_F16, .head_dim = D, .causal = 1};
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "ORC JIT"));
  assert_non_null(strstr(kiln_last_error(), "libkiln_rt) has no compiler"));
  kiln_tune_result r;
  assert_int_equal(kiln_tune(ctx, &d, NULL, &r), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "has no compiler"));
  kiln_cache_listing l;
  assert_int_equal(kiln_cache_list(ctx, &l), KILN_OK);
  assert_int_equal(l.nentries, 0);
  kiln_cache_listing_free(&l);
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

static void test_cuda_from_cache(void **state) {
  (void)state;
  const char *lib = getenv("KILN_CUDA_LIBRARY");
  if (!lib || !strcmp(lib, "none")) skip();
  char *dir = fresh_dir();
  /* libkiln (the command line) compiles the kernel and stores its PTX */
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' run --target sm_80 --cache-dir '%s' --dtype f16 --head-dim %d "
           "--batch %d --heads %d --seqlen-q %d --seqlen-k %d > '%s/run.log' 2>&1",
           kiln_binary, dir, D, B, H, N, N, dir);
  int rc = system(cmd);
  if (rc) {
    snprintf(cmd, sizeof cmd, "cat '%s/run.log'", dir);
    (void)!system(cmd);
  }
  assert_int_equal(rc, 0);

  kiln_context_options co = {.cache_dir = dir, .device = "sm_80", .log = logger,
                             .tune_policy = KILN_TUNE_AUTO};
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&co, &ctx), KILN_OK);
  assert_string_equal(kiln_context_target(ctx), "sm_80");
  /* kiln run's descriptor: f16, not causal, with lse */
  kiln_attn_desc d = {.dtype = KILN_F16, .head_dim = D, .has_lse = 1};
  kiln_kernel *k;
  count_log = 0;
  assert_int_equal(kiln_prepare(ctx, &d, NULL, &k), KILN_OK);
  kiln_kernel_info info;
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_int_equal(info.source, KILN_SOURCE_CACHE);
  /* kiln's part of a warm load (the fake driver's module load costs nothing; a real one JITs
   * the PTX): what docs/install.md quotes */
  printf("libkiln_rt: prepare from the cache %.3f ms\n", info.prepare_ms);
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.cache_hits, 1);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.tunings, 0);

  uint64_t s = 7;
  size_t n = (size_t)B * H * N * D;
  half *q = malloc(n * sizeof *q), *kk = malloc(n * sizeof *kk), *v = malloc(n * sizeof *v);
  half *o = calloc(n, sizeof *o);
  float *lse = calloc((size_t)B * H * N, sizeof *lse);
  for (size_t i = 0; i < n; i++)
    q[i] = (half)normal(&s), kk[i] = (half)normal(&s), v[i] = (half)normal(&s);
  kiln_attn_args a = {.q = q, .k = kk, .v = v, .o = o, .lse = lse, .batch = B, .heads = H,
                      .kv_heads = H, .seqlen_q = N, .seqlen_k = N};
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_OK);
  double err = max_error(q, kk, v, o);
  printf("libkiln_rt on the fake sm_80 device, kernel from the cache: max_abs_err=%.3g\n", err);
  assert_true(err < 4e-3);

  /* what the cache does not hold needs a compiler */
  kiln_attn_desc other = d;
  other.head_dim = 128;
  assert_int_equal(kiln_prepare(ctx, &other, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "is not in the cache"));
  assert_non_null(strstr(kiln_last_error(), "libkiln_rt) has no compiler"));
  kiln_prepare_options forced = {.block_m = 64, .block_n = 32};
  assert_int_equal(kiln_prepare(ctx, &d, &forced, &k), KILN_ERR_UNSUPPORTED);
  kiln_tune_result r;
  assert_int_equal(kiln_tune(ctx, &d, NULL, &r), KILN_ERR_UNSUPPORTED);
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);
  kiln_context_destroy(ctx);

  /* a host context of libkiln_rt leaves the host entries of libkiln alone */
  kiln_context_options ho = {.cache_dir = dir, .device = "host", .log = logger};
  assert_int_equal(kiln_context_create(&ho, &ctx), KILN_OK);
  kiln_cache_listing l;
  assert_int_equal(kiln_cache_list(ctx, &l), KILN_OK);
  size_t entries = l.nentries;
  kiln_cache_listing_free(&l);
  assert_int_equal(entries, 1);
  assert_int_equal(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_int_equal(kiln_cache_list(ctx, &l), KILN_OK);
  assert_int_equal(l.nentries, entries);
  kiln_cache_listing_free(&l);
  kiln_context_destroy(ctx);
  free(q), free(kk), free(v), free(o), free(lse);
  rm_dir(dir);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_api_rt PATH-TO-kiln\n");
    return 2;
  }
  kiln_binary = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_version),
      cmocka_unit_test(test_host),
      cmocka_unit_test(test_cuda_from_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
