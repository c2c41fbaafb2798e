/* test_hostile.c — the public API against a hostile caller (issue 16: no crash, hang or silent
 * misuse on any input).
 *
 * Each test is one of the numbered cases and failed (a crash, a hang, a wrong answer)
 * before its fix: tuning options whose problem overflows size_t or whose launch counts never end
 * (1), forward sizes and strides no buffer can have (2, and a bias kernel's sizes and a
 * backward's lse capacity, which fuzz_api found), kiln_context_stats with a NULL output
 * (3), the tuning database of a cache directory swapped after the context checked it (8),
 * malformed device names (10).  Every rejection is checked for its status and for the message naming the cause; every
 * accepted call next to them is checked against the float64 reference on fresh random inputs of
 * ragged sizes, so a check that refuses too much fails as well.  `--filter PATTERN` runs only
 * the matching tests.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "attention.h"
#include "kiln.h"
#include "numeric.h"
#include "test_dirs.h"

/* ---- helpers ---- */

static char *fresh_dir(void) { return test_fresh_dir("hostile"); }
static void rm_dir(char *p) { test_rm_dir(p); }

static kiln_context *make_ctx(const char *dir) {
  kiln_context_options o = {.cache_dir = dir, .tune_policy = KILN_TUNE_NONE, .device = "host"};
  kiln_context *ctx = NULL;
  kiln_status s = kiln_context_create(&o, &ctx);
  if (s) fprintf(stderr, "context: %s\n", kiln_last_error());
  assert_int_equal(s, KILN_OK);
  return ctx;
}

static uint64_t seed_state;

static double normal(void) {
  uint64_t z[2];
  for (int i = 0; i < 2; i++) {
    uint64_t x = (seed_state += 0x9E3779B97F4A7C15ull);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    z[i] = x ^ (x >> 31);
  }
  double u1 = ((double)(z[0] >> 11) + 0.5) * 0x1p-53, u2 = (double)(z[1] >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* the status and that the last error names `why` */
#define assert_refused(call, status, why)                                                        \
  do {                                                                                           \
    assert_int_equal((call), (status));                                                          \
    if (!strstr(kiln_last_error(), (why)))                                                       \
      fail_msg("error '%s' does not say '%s'", kiln_last_error(), (why));                        \
  } while (0)

/* a contiguous f32 forward of k (descriptor d) on fresh random inputs of B x H x Nq x Nk against
 * the float64 reference: the checks that refuse hostile sizes must let this through */
static void forward_matches(kiln_kernel *k, const kiln_attn_desc *d, int B, int H, int Nq,
                            int Nk) {
  kn_attn_desc id;
  assert_int_equal(api_desc_from_public(d, &id), KILN_OK);
  size_t D = (size_t)d->head_dim, nq = (size_t)B * H * Nq * D, nk = (size_t)B * H * Nk * D;
  size_t nl = (size_t)B * H * Nq;
  float *q = malloc(nq * 4), *kk = malloc(nk * 4), *v = malloc(nk * 4), *o = calloc(nq, 4);
  float *lse = calloc(nl, 4);
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8), *od = malloc(nq * 8);
  double *ld = malloc(nl * 8);
  for (size_t i = 0; i < nq; i++) qd[i] = q[i] = (float)normal();
  for (size_t i = 0; i < nk; i++) kd[i] = kk[i] = (float)normal();
  for (size_t i = 0; i < nk; i++) vd[i] = v[i] = (float)normal();
  kiln_attn_args a = {.q = q, .k = kk, .v = v, .o = o, .lse = lse, .batch = B, .heads = H,
                      .kv_heads = H, .seqlen_q = Nq, .seqlen_k = Nk};
  if (kiln_forward(k, &a, NULL)) fail_msg("forward: %s", kiln_last_error());
  kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = H, .seqlen_q = Nq, .seqlen_k = Nk};
  kn_attn_reference(&id, &p, qd, kd, vd, od, ld);
  double err = 0;
  for (size_t i = 0; i < nq; i++) err = fmax(err, fabs(o[i] - od[i]));
  for (size_t i = 0; i < nl; i++) err = fmax(err, isinf(ld[i]) && lse[i] == ld[i] ? 0 : fabs(lse[i] - ld[i]));
  if (!(err <= kn_attn_tolerance(KN_F32))) fail_msg("forward: max_abs_err %g", err);
  free(q), free(kk), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(ld);
}

static const kiln_attn_desc f32_d16 = {.dtype = KILN_F32, .head_dim = 16, .has_lse = 1};

/* ---- 1: tuning options ---- */

static void test_tune_options(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir);
  kiln_tune_result res;
  /* 2^30 x 2^30 x 2^20 x 16 elements wrap size_t to 0: a division by zero before the bound */
  kiln_prepare_options o = {.seqlen = 1 << 20, .tune_batch = 1 << 30, .tune_heads = 1 << 30};
  assert_refused(kiln_tune(ctx, &f32_d16, &o, &res), KILN_ERR_INVALID, "tune_batch 1073741824");
  /* a wrap to 2^42 elements */
  o = (kiln_prepare_options){.seqlen = 1 << 20, .tune_batch = (1 << 26) + 1, .tune_heads = 1 << 18};
  assert_refused(kiln_tune(ctx, &f32_d16, &o, &res), KILN_ERR_INVALID, "elements a tensor");
  o = (kiln_prepare_options){.seqlen = 64, .tune_batch = INT_MAX, .tune_heads = INT_MAX};
  assert_refused(kiln_tune(ctx, &f32_d16, &o, &res), KILN_ERR_INVALID, "elements a tensor");
  /* launch counts that never end, negative ones */
  o = (kiln_prepare_options){.seqlen = 64, .tune_repeats = INT_MAX};
  assert_refused(kiln_tune(ctx, &f32_d16, &o, &res), KILN_ERR_INVALID,
                 "tune_repeats = 2147483647 is out of range");
  o = (kiln_prepare_options){.seqlen = 64, .tune_warmup = 1 << 30};
  assert_refused(kiln_tune(ctx, &f32_d16, &o, &res), KILN_ERR_INVALID, "tune_warmup");
  o = (kiln_prepare_options){.seqlen = 64, .tune_heads = -3};
  assert_refused(kiln_tune(ctx, &f32_d16, &o, &res), KILN_ERR_INVALID, "tune_heads = -3");
  o = (kiln_prepare_options){.seqlen = 64, .tune_batch = -1};
  assert_refused(kiln_tune(ctx, &f32_d16, &o, &res), KILN_ERR_INVALID, "tune_batch = -1");
  /* kiln_prepare under KILN_TUNE_AUTO refuses them too (rather than tuning for ever) */
  kiln_kernel *k = NULL;
  o = (kiln_prepare_options){.tune_policy = KILN_TUNE_AUTO, .seqlen = 64, .tune_repeats = INT_MAX};
  assert_refused(kiln_prepare(ctx, &f32_d16, &o, &k), KILN_ERR_INVALID, "tune_repeats");
  o.tune_repeats = 0, o.tune_batch = 1 << 30, o.tune_heads = 1 << 30, o.seqlen = 1 << 20;
  assert_refused(kiln_prepare(ctx, &f32_d16, &o, &k), KILN_ERR_INVALID, "elements a tensor");
  assert_null(k);
  /* within the bounds: tuning runs, and its winner computes attention */
  o = (kiln_prepare_options){.tune_policy = KILN_TUNE_AUTO, .seqlen = 40, .tune_batch = 1,
                             .tune_heads = 2, .tune_warmup = 1, .tune_repeats = 1,
                             .tune_space = "block_m=32;block_n=32"};
  assert_int_equal(kiln_tune(ctx, &f32_d16, &o, &res), KILN_OK);
  assert_true(res.best >= 0);
  kiln_tune_result_free(&res);
  if (kiln_prepare(ctx, &f32_d16, &o, &k)) fail_msg("prepare: %s", kiln_last_error());
  forward_matches(k, &f32_d16, 2, 3, 37, 53);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* ---- 2: forward sizes ---- */

static void test_forward_sizes(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir);
  kiln_kernel *k = NULL;
  kiln_prepare_options none = {.tune_policy = KILN_TUNE_NONE};
  if (kiln_prepare(ctx, &f32_d16, &none, &k)) fail_msg("prepare: %s", kiln_last_error());
  float buf[64] = {0};
  kiln_attn_args a = {.q = buf, .k = buf, .v = buf, .o = buf, .lse = buf, .batch = 1,
                      .heads = INT_MAX, .kv_heads = 1, .seqlen_q = INT_MAX, .seqlen_k = 1};
  /* 2^31 x 2^31 x 16 x 4 bytes: the strides overflow int64 (a segfault before) */
  assert_refused(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "larger than any buffer");
  a = (kiln_attn_args){.q = buf, .k = buf, .v = buf, .o = buf, .lse = buf, .batch = 1,
                       .heads = 1, .kv_heads = 1, .seqlen_q = 1, .seqlen_k = INT_MAX};
  a.heads = a.kv_heads = 1 << 27; /* 2^27 x 2^31 x 16 x 4 bytes */
  assert_refused(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "the k/v tensor");
  /* an empty batch still has strides: they must not overflow either */
  a.batch = 0, a.seqlen_q = INT_MAX, a.heads = INT_MAX, a.kv_heads = 1;
  assert_refused(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "the q/o tensor");
  /* the caller's strides: a span past 2^63 bytes, and the one stride with no absolute value */
  a = (kiln_attn_args){.q = buf, .k = buf, .v = buf, .o = buf, .lse = buf, .batch = 4,
                       .heads = 1, .kv_heads = 1, .seqlen_q = 1, .seqlen_k = 1};
  a.q_stride[0] = INT64_MAX / 2, a.q_stride[1] = 16, a.q_stride[2] = 16;
  assert_refused(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "the strides of q address");
  a.q_stride[0] = 0, a.q_stride[1] = 0, a.q_stride[2] = 0;
  a.o_stride[0] = INT64_MIN, a.o_stride[1] = 16, a.o_stride[2] = 16;
  assert_refused(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "the strides of o address");
  a.o_stride[0] = 0, a.o_stride[1] = 0, a.o_stride[2] = 0;
  a.lse_stride[0] = INT64_MAX / 3, a.lse_stride[1] = 1;
  assert_refused(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "the strides of lse address");
  /* the output buffer was never written */
  for (int i = 0; i < 64; i++) assert_true(buf[i] == 0);
  forward_matches(k, &f32_d16, 3, 2, 29, 45);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* A bias kernel's contiguous bias strides (H x Nq x Nk) were formed before the sizes were
 * checked: a signed overflow (undefined behaviour, UBSan's abort in build-asan) for sizes the
 * checks then refused; for varlen kernels, whose sizes were checked only after.  Found by
 * fuzz_api.  Now the sizes come first, dense and varlen alike. */
static void test_bias_sizes(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir);
  kiln_prepare_options none = {.tune_policy = KILN_TUNE_NONE};
  float buf[64] = {0};
  int32_t cu[2] = {0, 1};
  for (int varlen = 0; varlen < 2; varlen++) {
    kiln_attn_desc d = f32_d16;
    d.bias = 1, d.layout = varlen ? KILN_LAYOUT_VARLEN : KILN_LAYOUT_DENSE;
    kiln_kernel *k = NULL;
    if (kiln_prepare(ctx, &d, &none, &k)) fail_msg("prepare: %s", kiln_last_error());
    /* 4 x (2^31 - 1)^2 elements of bias: past 2^63 */
    kiln_attn_args a = {.q = buf, .k = buf, .v = buf, .o = buf, .lse = buf, .bias = buf,
                        .batch = 1, .heads = 4, .kv_heads = 1, .seqlen_q = INT_MAX,
                        .seqlen_k = INT_MAX};
    if (varlen) a.cu_seqlens_q = a.cu_seqlens_k = cu, a.total_q = a.total_k = 1;
    assert_refused(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "the bias tensor");
  }
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* kiln_backward reads lse (the forward's log-sum-exp) whatever the descriptor's has_lse, but
 * its described capacity (lse_numel) was checked only when has_lse was set: a too-small lse was
 * read past its end.  Found by fuzz_api.  Now a backward checks it always; the exact capacity
 * is accepted. */
static void test_backward_lse(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir);
  kiln_attn_desc d = f32_d16;
  d.has_lse = 0;
  kiln_kernel *k = NULL;
  if (kiln_prepare_backward(ctx, &d, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
  enum { B = 1, H = 2, N = 13, D = 16 };
  static float q[B * H * N * D], kk[B * H * N * D], v[B * H * N * D], o[B * H * N * D],
      dout[B * H * N * D], dq[B * H * N * D], dk[B * H * N * D], dv[B * H * N * D];
  static float lse[B * H * N], delta[B * H * N];
  kiln_backward_args a = {
      .fwd = {.q = q, .k = kk, .v = v, .o = o, .lse = lse, .batch = B, .heads = H, .kv_heads = H,
              .seqlen_q = N, .seqlen_k = N, .sm_scale = 0.25f, .lse_numel = B * H * N - 1},
      .dout = dout, .dq = dq, .dk = dk, .dv = dv, .delta = delta};
  assert_refused(kiln_backward(k, &a, NULL), KILN_ERR_INVALID, "lse holds 25 elements");
  a.fwd.lse_numel = B * H * N;
  if (kiln_backward(k, &a, NULL)) fail_msg("backward: %s", kiln_last_error());
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* ---- 3: statistics into NULL ---- */

static void test_stats_null(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir);
  kiln_context_stats(ctx, NULL); /* a segfault before */
  kiln_context_stats(NULL, NULL);
  kiln_stats s;
  memset(&s, 0xab, sizeof s);
  kiln_context_stats(NULL, &s);
  assert_int_equal(s.prepares, 0);
  assert_int_equal(s.launches, 0);
  kiln_kernel *k = NULL;
  kiln_prepare_options none = {.tune_policy = KILN_TUNE_NONE};
  if (kiln_prepare(ctx, &f32_d16, &none, &k)) fail_msg("prepare: %s", kiln_last_error());
  forward_matches(k, &f32_d16, 1, 1, 7, 9);
  kiln_context_stats(ctx, &s);
  assert_int_equal(s.prepares, 1);
  assert_int_equal(s.launches, 1);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* ---- 8: the tuning database in a swapped directory ---- */

static void test_tunedb_swapped_dir(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir); /* the directory is checked now */
  char moved[4200], theirs[4200], mine[4300];
  snprintf(moved, sizeof moved, "%s.moved", dir);
  assert_int_equal(rename(dir, moved), 0);
  assert_int_equal(mkdir(dir, 0777), 0); /* another user's, writable by all */
  assert_int_equal(chmod(dir, 0777), 0);
  /* tuning opens the database for the first time: in the checked directory, not this one */
  kiln_prepare_options o = {.seqlen = 40, .tune_batch = 1, .tune_heads = 2, .tune_warmup = 1,
                            .tune_repeats = 1, .tune_space = "block_m=32;block_n=32"};
  kiln_tune_result res;
  assert_int_equal(kiln_tune(ctx, &f32_d16, &o, &res), KILN_OK);
  assert_true(res.recorded);
  kiln_tune_result_free(&res);
  snprintf(theirs, sizeof theirs, "%s/tuning.sqlite3", dir);
  snprintf(mine, sizeof mine, "%s/tuning.sqlite3", moved);
  struct stat st;
  assert_int_equal(lstat(theirs, &st), -1);
  assert_int_equal(stat(mine, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  kiln_kernel *k = NULL;
  o.tune_policy = KILN_TUNE_CACHED;
  if (kiln_prepare(ctx, &f32_d16, &o, &k)) fail_msg("prepare: %s", kiln_last_error());
  kiln_kernel_info info;
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_true(info.tuned);
  forward_matches(k, &f32_d16, 2, 2, 33, 40);
  kiln_context_destroy(ctx);
  rmdir(dir);
  rm_dir(dir);
  char *m = strdup(moved);
  rm_dir(m);
}

/* ---- 10: device names ---- */

static void test_device_names(void **state) {
  (void)state;
  /* malformed cuda:<ordinal> is a bad argument whatever the machine has (it was reported as a
   * missing driver, or a missing device) */
  static const char *const bad[] = {"cuda:x", "cuda:", "cuda: 1", "cuda:+1", "cuda:1x",
                                    "cuda:-1", "cuda:99999", "cuda:0x1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_context_options o = {.device = bad[i], .no_cache = 1};
    kiln_context *ctx = NULL;
    assert_refused(kiln_context_create(&o, &ctx), KILN_ERR_INVALID, "is not cuda:<ordinal>");
    assert_null(ctx);
  }
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--filter")) cmocka_set_test_filter(argv[2]);
  seed_state = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 32;
  const char *env = getenv("KILN_TEST_SEED");
  if (env && *env) seed_state = strtoull(env, NULL, 0);
  printf("seed %llu (KILN_TEST_SEED)\n", (unsigned long long)seed_state);
  unsetenv("KILN_TUNE_SPACE"), unsetenv("KILN_AUTOTUNE"), unsetenv("KILN_CACHE_FAULT");
  setenv("KILN_TUNE_PROGRESS", "0", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tune_options),
      cmocka_unit_test(test_forward_sizes),
      cmocka_unit_test(test_bias_sizes),
      cmocka_unit_test(test_backward_lse),
      cmocka_unit_test(test_stats_null),
      cmocka_unit_test(test_tunedb_swapped_dir),
      cmocka_unit_test(test_device_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
