/* test_api_cuda.c — the public API (include/kiln.h) on the CUDA device.
 *
 * Three ways this binary runs (like test_cuda):
 *   - Everywhere: without a CUDA driver (a child re-run with KILN_CUDA_LIBRARY pointing at a
 *     missing library), device "cuda" and "sm_90a" are KILN_ERR_NO_DEVICE with the discovery
 *     reason naming the library, "auto" falls back to the host, "gfx1100" is unsupported.
 *   - Here and in CI as test_api_cuda_fake: KILN_CUDA_LIBRARY is the fake driver built from
 *     test_cuda.c (one pretend compute capability 9.0 device; device memory is host memory; its
 *     `attn_fwd` is a float64 attention reading the launch's kernelParams).  The PTX is really
 *     compiled by the NVPTX target and stored in the cache; only the GPU is pretend.  This checks
 *     the API's CUDA path end to end: device selection, the PTX payload and its cache key, a
 *     second context's cache hit, the parameter packing (pointers, f32 scale, i32 sizes, i64
 *     strides of a (B, N, H, D) layout), lse optional, GQA, streams, 8 threads at once, and a
 *     variant's parameters after the template's (a window and a softcap, which the fake
 *     computes too), kiln_prepare_options.wgmma (the wgmma PTX compiled and cached; refused
 *     on the host), and varlen launches (the prefix sums as device memory after the template's
 *     parameters; the fake computes packed sequences too), paged KV launches (the block
 *     table and cache lengths as device memory, pools read through the table; the fake
 *     computes them and the device append of k_new / v_new too), decode (forwards of up to
 *     16 query rows: the split and combine kernels through the workspace, which the fake
 *     computes by their contracts), and the backward's three kernels, dense and varlen (the
 *     fake computes them from their 43 parameters and varlen's four).
 *   - On a machine with an NVIDIA sm_80+ GPU (the H200): the same GPU tests on the real driver,
 *     where the numbers come from kiln's PTX on the GPU, checked against the float64 reference.
 * Without either (a plain `test_api_cuda` here) the GPU tests are cmocka skips.
 *
 * Buffers are allocated with runtime/cuda_device.h on the device the context uses (the primary
 * context is shared, as it would be with PyTorch).  KILN_TEST_SEED replays the inputs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, RTLD_NOLOAD */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "attention.h"
#include "attn_bwd.h"
#include "cuda_device.h"
#include "kiln.h"
#include "numeric.h"
#include "test_api_util.h"
#include "test_mods.h"

static const char *self_path;
static uint64_t seed = 1;

/* ---- helpers ---- */


typedef struct logcap {
  pthread_mutex_t mu;
  char text[16384];
  size_t len;
} logcap;
static void capture(void *user, kiln_log_level level, const char *msg) {
  logcap *l = user;
  (void)level;
  pthread_mutex_lock(&l->mu);
  int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s\n", msg);
  if (n > 0 && l->len + (size_t)n < sizeof l->text) l->len += (size_t)n;
  pthread_mutex_unlock(&l->mu);
}

/* the fake driver's side channel (NULL on a real driver) */
static void (*fake_attn)(int elem_bytes, int bf16, int head_dim, int causal);
static void (*fake_variant)(int window, int softcap);
static void (*fake_varlen)(int on);
static int (*fake_decode_launches)(void);
static void (*fake_paged)(int on);
static int (*fake_launches)(void);
typedef int (*cost_fn)(unsigned gx, unsigned bx, unsigned dyn, double *ms);
static void (*fake_cost)(cost_fn fn);
static void (*fake_bias_doc)(int bias, int document);
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER; /* its settings are global */

static void find_fake(void) {
  const char *lib = getenv("KILN_CUDA_LIBRARY");
  if (!lib) return;
  void *h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
  if (h) *(void **)&fake_attn = dlsym(h, "kn_fake_cuda_attn");
  if (h) *(void **)&fake_variant = dlsym(h, "kn_fake_cuda_attn_variant");
  if (h) *(void **)&fake_varlen = dlsym(h, "kn_fake_cuda_attn_varlen");
  if (h) *(void **)&fake_decode_launches = dlsym(h, "kn_fake_cuda_decode_launches");
  if (h) *(void **)&fake_paged = dlsym(h, "kn_fake_cuda_attn_paged");
  if (h) *(void **)&fake_launches = dlsym(h, "kn_fake_cuda_attn_launches");
  if (h) *(void **)&fake_cost = dlsym(h, "kn_fake_cuda_attn_cost");
  if (h) *(void **)&fake_bias_doc = dlsym(h, "kn_fake_cuda_attn_bias_doc");
}


/* the template's descriptor of a public one (the API's own conversion) */
static kn_attn_desc internal_desc(const kiln_attn_desc *d) {
  kn_attn_desc x;
  if (api_desc_from_public(d, &x)) fail_msg("descriptor: %s", kiln_last_error());
  return x;
}

/* a descriptor of the plain template: dtype, head dim, causal, has_lse */
#define DESC(t, d, c, l) {.dtype = t, .head_dim = d, .causal = c, .has_lse = l}

typedef struct shape {
  int batch, heads, kv_heads, seqlen_q, seqlen_k;
  int bshd;     /* q/k/v/o stored as (B, N, H, D) through strides */
  int no_lse;   /* pass lse = NULL (descriptor without has_lse) */
} shape;

static kn_cuda_device *dev; /* opened once, for buffers */

/* the largest lse error of n rows (equal infinities: 0; NaN sticks) */
static double lse_error(const float *got, const double *want, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) {
    double x = isinf(want[i]) && got[i] == want[i] ? 0 : fabs(got[i] - want[i]);
    if (!(x <= e)) e = x;
  }
  return e;
}

/* 0 when the errors are within the dtype's tolerances, else -1; why gets the numbers */
static int verdict(kn_scalar t, double err, double lerr, char *why, size_t nwhy) {
  double tol = kn_attn_tolerance(t), ltol = kn_attn_lse_tolerance(t);
  snprintf(why, nwhy, "max|dO| %.2e (tol %.0e), max|dlse| %.2e (tol %.0e)", err, tol, lerr, ltol);
  return err <= tol && lerr <= ltol ? 0 : -1;
}

/* one forward on device buffers against the reference; 0 when within tolerance.  The output is
 * filled with NaN bytes first, so a row the kernel never writes fails. */
static int check_forward(kiln_kernel *k, const kiln_attn_desc *d, shape s, uint64_t sd,
                         kn_cuda_stream stream, char *why, size_t nwhy) {
  const kn_attn_desc idesc = internal_desc(d);
  kn_scalar t = idesc.dtype;
  size_t es = kn_scalar_size(t), D = (size_t)d->head_dim;
  size_t nq = (size_t)s.batch * s.heads * s.seqlen_q * D;
  size_t nk = (size_t)s.batch * s.kv_heads * s.seqlen_k * D;
  size_t nl = (size_t)s.batch * s.heads * s.seqlen_q;
  char *hq = malloc(nq * es), *hk = malloc(nk * es), *hv = malloc(nk * es), *ho = malloc(nq * es);
  float *hl = malloc(nl * sizeof(float));
  double *q = malloc(nq * 8), *kk = malloc(nk * 8), *v = malloc(nk * 8), *ro = malloc(nq * 8),
         *rl = malloc(nl * 8);
  assert_true(hq && hk && hv && ho && hl && q && kk && v && ro && rl);
  /* logical (B, H, N, D) values; stored at (B, H, N, D) or (B, N, H, D) positions */
  struct { double *x; char *h; size_t n; int heads, len; } in[3] = {
      {q, hq, nq, s.heads, s.seqlen_q}, {kk, hk, nk, s.kv_heads, s.seqlen_k},
      {v, hv, nk, s.kv_heads, s.seqlen_k}};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < in[a].n; i++) {
      in[a].x[i] = kn_round(t, normal(&sd));
      size_t dd = i % D, r = i / D, n = r % in[a].len, hb = r / in[a].len,
             h = hb % in[a].heads, b = hb / in[a].heads;
      size_t at = s.bshd ? ((b * in[a].len + n) * in[a].heads + h) * D + dd : i;
      kn_store_elem(t, in[a].h + at * es, in[a].x[i]);
    }
  kn_diag e;
  kn_cuda_ptr dq, dk, dv, dout, dl = 0;
  if (kn_cuda_alloc(dev, nq * es, &dq, &e) || kn_cuda_alloc(dev, nk * es, &dk, &e) ||
      kn_cuda_alloc(dev, nk * es, &dv, &e) || kn_cuda_alloc(dev, nq * es, &dout, &e) ||
      (!s.no_lse && kn_cuda_alloc(dev, nl * 4, &dl, &e)))
    fail_msg("%s", e.message);
  if (kn_cuda_copy_htod(dev, dq, hq, nq * es, &e) || kn_cuda_copy_htod(dev, dk, hk, nk * es, &e) ||
      kn_cuda_copy_htod(dev, dv, hv, nk * es, &e) || kn_cuda_memset8(dev, dout, 0xff, nq * es, &e) ||
      (dl && kn_cuda_memset8(dev, dl, 0xff, nl * 4, &e)))
    fail_msg("%s", e.message);
  kiln_attn_args a = {.q = (void *)(uintptr_t)dq, .k = (void *)(uintptr_t)dk,
                      .v = (void *)(uintptr_t)dv, .o = (void *)(uintptr_t)dout,
                      .lse = (float *)(uintptr_t)dl, .batch = s.batch, .heads = s.heads,
                      .kv_heads = s.kv_heads, .seqlen_q = s.seqlen_q, .seqlen_k = s.seqlen_k};
  if (s.bshd) {
    int64_t Dq = (int64_t)D;
    a.q_stride[0] = a.o_stride[0] = (int64_t)s.seqlen_q * s.heads * Dq;
    a.q_stride[1] = a.o_stride[1] = Dq;
    a.q_stride[2] = a.o_stride[2] = (int64_t)s.heads * Dq;
    a.k_stride[0] = a.v_stride[0] = (int64_t)s.seqlen_k * s.kv_heads * Dq;
    a.k_stride[1] = a.v_stride[1] = Dq;
    a.k_stride[2] = a.v_stride[2] = (int64_t)s.kv_heads * Dq;
  }
  /* the fake's settings are global: its launches are serialised (real ones run concurrently) */
  if (fake_attn) {
    pthread_mutex_lock(&fake_mu);
    fake_attn((int)es, d->dtype == KILN_BF16, d->head_dim, d->causal);
  }
  kiln_status st = kiln_forward(k, &a, (void *)stream);
  int sync = st == KILN_OK ? kn_cuda_stream_sync(dev, stream, &e) : 0;
  if (fake_attn) pthread_mutex_unlock(&fake_mu);
  if (sync) fail_msg("sync: %s", e.message);
  if (st) fail_msg("forward: %s", kiln_last_error());
  if (kn_cuda_copy_dtoh(dev, ho, dout, nq * es, &e) ||
      (dl && kn_cuda_copy_dtoh(dev, hl, dl, nl * 4, &e)))
    fail_msg("%s", e.message);
  kn_attn_problem p = {.batch = s.batch, .heads = s.heads, .kv_heads = s.kv_heads,
                       .seqlen_q = s.seqlen_q, .seqlen_k = s.seqlen_k};
  kn_attn_reference(&idesc, &p, q, kk, v, ro, rl);
  double err = 0, lerr = 0;
  for (size_t i = 0; i < nq; i++) {
    size_t dd = i % D, r = i / D, n = r % s.seqlen_q, hb = r / s.seqlen_q, h = hb % s.heads,
           b = hb / s.heads;
    size_t at = s.bshd ? ((b * s.seqlen_q + n) * s.heads + h) * D + dd : i;
    double x = fabs(kn_load_elem(t, ho + at * es) - ro[i]);
    if (!(x <= err)) err = x; /* NaN sticks */
  }
  if (dl) lerr = lse_error(hl, rl, nl);
  kn_cuda_free(dev, dq, NULL), kn_cuda_free(dev, dk, NULL), kn_cuda_free(dev, dv, NULL);
  kn_cuda_free(dev, dout, NULL);
  if (dl) kn_cuda_free(dev, dl, NULL);
  free(hq), free(hk), free(hv), free(ho), free(hl), free(q), free(kk), free(v), free(ro), free(rl);
  return verdict(t, err, lerr, why, nwhy);
}

/* a CUDA device present (real, or the fake)?  Opens `dev` the first time. */
static bool have_gpu(void) {
  static int state; /* 0 unknown, 1 yes, -1 no */
  if (state) return state > 0;
  kn_diag e;
  if (kn_cuda_init(&e) != KN_OK || kn_cuda_device_open(0, &dev, &e) != KN_OK) {
    printf("  (no CUDA device: %s)\n", e.message);
    state = -1;
    return false;
  }
  const kn_cuda_props *p = kn_cuda_device_get_props(dev);
  if (p->cc_major < 8) {
    printf("  (CUDA device 0 is sm_%d%d; kiln needs sm_80+)\n", p->cc_major, p->cc_minor);
    state = -1;
    return false;
  }
  find_fake();
  printf("  device 0: %s, sm_%d%d%s\n", p->name, p->cc_major, p->cc_minor,
         fake_attn ? " (the fake driver)" : "");
  state = 1;
  return true;
}

static kiln_context *cuda_ctx(const char *dir, logcap *l, const char *device) {
  kiln_context_options o = {.cache_dir = dir, .device = device, .log = l ? capture : NULL,
                            .log_user = l, .tune_policy = KILN_TUNE_NONE};
  kiln_context *ctx = NULL;
  if (kiln_context_create(&o, &ctx)) fail_msg("context: %s", kiln_last_error());
  return ctx;
}

/* a test's context on the device over a fresh cache directory (*dir, rm_dir it); a cmocka
 * skip where there is no CUDA device */
static kiln_context *gpu_test_ctx(char **dir, logcap *l) {
  if (!have_gpu()) skip();
  *dir = fresh_dir();
  return cuda_ctx(*dir, l, "cuda");
}

/* ---- no device ---- */

/* run in a child whose KILN_CUDA_LIBRARY names a library that does not exist */
static int child_nodev(void) {
  kiln_context *ctx = NULL;
  kiln_context_options o = {.device = "cuda", .no_cache = 1};
  int bad = 0;
  if (kiln_context_create(&o, &ctx) != KILN_ERR_NO_DEVICE ||
      !strstr(kiln_last_error(), "/nonexistent/libcuda.so.1")) {
    fprintf(stderr, "cuda: %s\n", kiln_last_error());
    bad++;
  }
  o.device = "sm_90a";
  if (kiln_context_create(&o, &ctx) != KILN_ERR_NO_DEVICE) bad++;
  o.device = "cuda:3";
  if (kiln_context_create(&o, &ctx) != KILN_ERR_NO_DEVICE) bad++;
  o.device = "gfx1100"; /* an AMD chip kiln has no target for */
  if (kiln_context_create(&o, &ctx) != KILN_ERR_UNSUPPORTED) bad++;
  o.device = "auto";
  if (kiln_context_create(&o, &ctx) != KILN_OK || strcmp(kiln_context_target(ctx), "host")) bad++;
  kiln_context_destroy(ctx);
  printf("child nodev: %d wrong\n", bad);
  return bad ? 1 : 0;
}

static void test_no_device(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("KILN_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    execl(self_path, self_path, "--child", "nodev", (char *)NULL);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- on the device ---- */

static void test_forward(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  logcap l = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kiln_context *ctx = cuda_ctx(dir, &l, "cuda");
  const kn_cuda_props *pr = kn_cuda_device_get_props(dev);
  const char *want = pr->cc_major == 9 && pr->cc_minor == 0 ? "sm_90a" : "sm_80";
  assert_string_equal(kiln_context_target(ctx), want);
  kn_cuda_stream stream;
  kn_diag e;
  if (kn_cuda_stream_create(dev, &stream, &e)) fail_msg("%s", e.message);
  const struct { kiln_attn_desc d; shape s; } cases[] = {
      {DESC(KILN_F16, 64, 1, 1), {1, 2, 2, 129, 77, 0, 0}},
      {DESC(KILN_F16, 64, 1, 1), {2, 4, 2, 300, 511, 1, 0}},   /* GQA, (B, N, H, D) strides */
      {DESC(KILN_BF16, 128, 0, 0), {1, 2, 1, 17, 1000, 0, 1}}, /* no lse */
      {DESC(KILN_BF16, 128, 1, 1), {1, 3, 3, 1000, 64, 0, 0}}, /* rows that see no key */
      {DESC(KILN_F16, 128, 0, 1), {2, 2, 2, 1, 1, 1, 0}},
      /* head dims that are not multiples of 16 (the padded head tile) */
      {DESC(KILN_F16, 72, 1, 1), {1, 4, 2, 129, 77, 1, 0}},    /* 16-byte rows, BNHD strides */
      {DESC(KILN_BF16, 59, 0, 1), {2, 2, 1, 300, 511, 0, 0}},  /* odd: scalar loads, no cp.async */
  };
  int failures = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_kernel *k;
    if (kiln_prepare(ctx, &cases[i].d, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
    kiln_kernel_info info;
    assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
    assert_string_equal(info.target, want);
    char why[160];
    int bad = check_forward(k, &cases[i].d, cases[i].s, seed + i, i % 2 ? stream : NULL, why,
                            sizeof why);
    const shape *s = &cases[i].s;
    printf("  %s %s D%d causal=%d lse=%d B%d H%d HK%d N(%d,%d)%s: %s\n", bad ? "FAIL" : "PASS",
           cases[i].d.dtype == KILN_F16 ? "f16" : "bf16", cases[i].d.head_dim, cases[i].d.causal,
           cases[i].d.has_lse, s->batch, s->heads, s->kv_heads, s->seqlen_q, s->seqlen_k,
           s->bshd ? " BNHD" : "", why);
    failures += bad != 0;
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  /* the first two cases share a kernel; the fifth (one query row) also builds decode's two */
  assert_int_equal(st.compiles, 8);
  assert_int_equal(st.cache_hits, 0);
  assert_int_equal(st.launches, 7);

  /* a second context loads every kernel from the cache: no compile */
  logcap l2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kiln_context *ctx2 = cuda_ctx(dir, &l2, "cuda");
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx2, &cases[1].d, NULL, &k), KILN_OK);
  char why[160];
  failures += check_forward(k, &cases[1].d, cases[1].s, seed, stream, why, sizeof why) != 0;
  kiln_context_stats(ctx2, &st);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.cache_hits, 1);
  assert_non_null(strstr(l2.text, "cache hit"));

  /* (tuning on the device: test_tune_cuda) */
  assert_int_equal(kiln_prepare(ctx2, &cases[2].d, NULL, &k), KILN_OK);

  /* argument errors are the host's; a grid too tall for CUDA is unsupported, not a crash */
  kiln_attn_args a = {.q = (void *)16, .k = (void *)16, .v = (void *)16, .o = (void *)16,
                      .batch = 70000, .heads = 1, .kv_heads = 1, .seqlen_q = 1, .seqlen_k = 1};
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "65535"));
  /* buffers whose rows the kernel's vector accesses would read misaligned (bf16, D 128: 16
   * bytes, 8 elements) are refused before any launch: an address, a row stride */
  kiln_attn_args m = {.q = (void *)18, .k = (void *)16, .v = (void *)16, .o = (void *)16,
                      .batch = 1, .heads = 2, .kv_heads = 2, .seqlen_q = 4, .seqlen_k = 4};
  assert_int_equal(kiln_forward(k, &m, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "q must be 16-byte aligned"));
  m.q = (void *)16;
  m.k_stride[0] = 1032, m.k_stride[1] = 516, m.k_stride[2] = 129;
  assert_int_equal(kiln_forward(k, &m, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "k must be"));

  /* "auto" picks this GPU; "sm_80" compiles for sm_80 on it */
  kiln_context *c3;
  kiln_context_options o80 = {.no_cache = 1, .device = "auto"};
  assert_int_equal(kiln_context_create(&o80, &c3), KILN_OK);
  assert_string_equal(kiln_context_target(c3), want);
  kiln_context_destroy(c3);
  o80.device = "sm_80";
  assert_int_equal(kiln_context_create(&o80, &c3), KILN_OK);
  assert_string_equal(kiln_context_target(c3), "sm_80");
  assert_int_equal(kiln_prepare(c3, &cases[0].d, NULL, &k), KILN_OK);
  failures += check_forward(k, &cases[0].d, cases[0].s, seed, NULL, why, sizeof why) != 0;
  kiln_context_destroy(c3);

  kiln_context_destroy(ctx2);
  kiln_context_destroy(ctx);
  kn_cuda_stream_destroy(dev, stream);
  rm_dir(dir);
  assert_int_equal(failures, 0);
}

/* ---- variants on the device ----
 *
 * A few variants through the CUDA path against kn_attn_reference_v: the launch packs the
 * variant's parameters after the template's (i32 window sizes, an f32 cap, device pointers and
 * i64 strides of the tensors, the caller's own).  The fake driver computes a window and a
 * softcap (kn_fake_cuda_attn_variant), so there only those cases run; the H200 runs them all. */

/* the caller's modifiers: a per-head temperature (a device tensor) and a chunked causal mask
 * with its block predicate (an i32) */
static const char cuda_mods[] = TEST_HEAD_TEMP_SCORE_MOD TEST_CHUNK_MASK_MOD;

typedef struct vcase {
  kiln_attn_desc d;     /* has_lse is set; mods from `user` */
  shape s;
  int wl, wr;
  float cap;
  int user;             /* cuda_mods */
} vcase;

/* device copies of host tensors, freed at the end of a case */
typedef struct devbufs {
  kn_cuda_ptr p[8];
  int n;
} devbufs;
static void *upload(devbufs *b, const void *host, size_t bytes) {
  kn_diag e;
  kn_cuda_ptr d;
  if (kn_cuda_alloc(dev, bytes, &d, &e) || kn_cuda_copy_htod(dev, d, host, bytes, &e))
    fail_msg("%s", e.message);
  b->p[b->n++] = d;
  return (void *)(uintptr_t)d;
}

/* q, k, v: N(0,1) rounded to t (h) and the rounded values (x) */
static void rand_inputs(kn_scalar t, char *const h[3], double *const x[3], const size_t n[3],
                        uint64_t *sd) {
  size_t es = kn_scalar_size(t);
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < n[a]; i++) {
      kn_store_elem(t, h[a] + i * es, normal(sd));
      x[a][i] = kn_load_elem(t, h[a] + i * es);
    }
}

/* kiln_forward and a sync, with the fake driver (when it is the driver) told what to compute;
 * failures are cmocka failures */
static void forward_synced(kiln_kernel *k, const kiln_attn_args *a, const kiln_attn_desc *d) {
  kn_diag e;
  if (fake_attn) {
    pthread_mutex_lock(&fake_mu);
    if (!fake_variant || !fake_varlen || !fake_paged || !fake_bias_doc)
      fail_msg("the fake driver lacks its variant calls");
    fake_attn((int)kn_scalar_size(internal_desc(d).dtype), d->dtype == KILN_BF16, d->head_dim,
              d->causal);
    fake_variant(d->window, d->softcap);
    fake_varlen(d->layout == KILN_LAYOUT_VARLEN);
    fake_paged(d->layout == KILN_LAYOUT_PAGED);
    /* (the fake computes bias and documents of varlen launches: test_varlen_cuda) */
    fake_bias_doc(d->layout == KILN_LAYOUT_VARLEN && d->bias,
                  d->layout == KILN_LAYOUT_VARLEN && d->document);
  }
  kiln_status st = kiln_forward(k, a, NULL);
  int sync = st == KILN_OK ? kn_cuda_device_sync(dev, &e) : 0;
  if (fake_attn) {
    fake_variant(0, 0);
    fake_varlen(0);
    fake_paged(0);
    fake_bias_doc(0, 0);
    pthread_mutex_unlock(&fake_mu);
  }
  if (sync) fail_msg("sync: %s", e.message);
  if (st) fail_msg("forward: %s", kiln_last_error());
}

/* the largest |O - reference| (NaN sticks) */
static double out_error(kn_scalar t, const char *ho, const double *ro, size_t n) {
  size_t es = kn_scalar_size(t);
  double err = 0;
  for (size_t i = 0; i < n; i++) {
    double y = fabs(kn_load_elem(t, ho + i * es) - ro[i]);
    if (!(y <= err)) err = y;
  }
  return err;
}

static int check_variant(kiln_context *ctx, const vcase *c, uint64_t sd, char *why, size_t nwhy) {
  kiln_attn_desc d = c->d;
  d.has_lse = 1;
  d.mods = c->user ? cuda_mods : NULL;
  kiln_kernel *k;
  if (kiln_prepare(ctx, &d, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
  const kn_attn_desc id = internal_desc(&d);
  const shape *s = &c->s;
  kn_scalar t = id.dtype;
  size_t es = kn_scalar_size(t), D = (size_t)d.head_dim;
  size_t nq = (size_t)s->batch * s->heads * s->seqlen_q * D;
  size_t nk = (size_t)s->batch * s->kv_heads * s->seqlen_k * D;
  size_t nl = (size_t)s->batch * s->heads * s->seqlen_q;
  const int B = s->batch, H = s->heads, Nq = s->seqlen_q, Nk = s->seqlen_k;
  char *h[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)}, *ho = malloc(nq * es);
  double *x[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)}, *ro = malloc(nq * 8);
  double *rl = malloc(nl * 8);
  float *hl = malloc(nl * 4);
  size_t n[3] = {nq, nk, nk};
  rand_inputs(t, h, x, n, &sd);
  /* the variant's tensors, on the host (the reference) and on the device (the kernel) */
  devbufs bufs = {0};
  float *slopes = malloc(sizeof(float) * (size_t)B * H), temp[64];
  size_t nbias = (size_t)B * H * Nq * Nk;
  char *bias = malloc(nbias * es);
  int32_t *qseg = malloc(sizeof(int32_t) * (size_t)B * Nq);
  int32_t *kseg = malloc(sizeof(int32_t) * (size_t)B * Nk);
  for (int i = 0; i < B * H; i++) slopes[i] = (float)(0.01 + 0.2 * (double)(rng(&sd) % 100) / 100);
  for (size_t i = 0; i < nbias; i++) kn_store_elem(t, bias + i * es, normal(&sd));
  for (int b = 0; b < B; b++) {
    for (int i = 0; i < Nq; i++) qseg[(size_t)b * Nq + i] = (int32_t)((int64_t)i * 3 / Nq);
    for (int j = 0; j < Nk; j++) kseg[(size_t)b * Nk + j] = (int32_t)((int64_t)j * 3 / Nk);
  }
  for (int i = 0; i < H; i++) temp[i] = (float)(0.5 + (double)(rng(&sd) % 100) / 100);
  int chunk = 16 + (int)(rng(&sd) % 50);
  kn_attn_vargs va = {.window_left = c->wl, .window_right = c->wr, .softcap = c->cap,
                      .alibi_slopes = slopes, .alibi_sb = H, .bias = bias,
                      .bias_sb = (int64_t)H * Nq * Nk, .bias_sh = (int64_t)Nq * Nk,
                      .bias_sm = Nk, .q_seg = qseg, .k_seg = kseg, .q_seg_sb = Nq,
                      .k_seg_sb = Nk};
  kn_attn_named_arg named[2] = {{"temp", {.p = temp}, sizeof(float) * (size_t)H},
                                {"chunk", {.i = chunk}, 0}};
  if (c->user) va.mods = named, va.nmods = 2;
  kiln_mod_arg margs[2] = {{.name = "temp", .kind = KILN_MOD_ARG_PTR},
                           {.name = "chunk", .kind = KILN_MOD_ARG_INT, .i = chunk}};
  kn_diag e;
  kn_cuda_ptr dout, dl;
  if (kn_cuda_alloc(dev, nq * es, &dout, &e) || kn_cuda_alloc(dev, nl * 4, &dl, &e) ||
      kn_cuda_memset8(dev, dout, 0xff, nq * es, &e) || kn_cuda_memset8(dev, dl, 0xff, nl * 4, &e))
    fail_msg("%s", e.message);
  kiln_attn_args a = {.q = upload(&bufs, h[0], nq * es), .k = upload(&bufs, h[1], nk * es),
                      .v = upload(&bufs, h[2], nk * es), .o = (void *)(uintptr_t)dout,
                      .lse = (float *)(uintptr_t)dl, .batch = B, .heads = H,
                      .kv_heads = s->kv_heads, .seqlen_q = Nq, .seqlen_k = Nk};
  if (d.window) a.window_left = c->wl, a.window_right = c->wr;
  if (d.softcap) a.softcap = c->cap;
  if (d.alibi) a.alibi_slopes = upload(&bufs, slopes, sizeof(float) * (size_t)B * H),
               a.alibi_stride = H;
  if (d.bias) a.bias = upload(&bufs, bias, nbias * es);
  if (d.document) a.q_seg = upload(&bufs, qseg, sizeof(int32_t) * (size_t)B * Nq),
                  a.k_seg = upload(&bufs, kseg, sizeof(int32_t) * (size_t)B * Nk);
  if (c->user) {
    margs[0].p = upload(&bufs, temp, sizeof(float) * (size_t)H);
    a.mod_args = margs, a.n_mod_args = 2;
  }
  forward_synced(k, &a, &d);
  if (kn_cuda_copy_dtoh(dev, ho, dout, nq * es, &e) || kn_cuda_copy_dtoh(dev, hl, dl, nl * 4, &e))
    fail_msg("%s", e.message);
  kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = s->kv_heads, .seqlen_q = Nq,
                       .seqlen_k = Nk};
  if (kn_attn_reference_v(&id, NULL, &p, &va, x[0], x[1], x[2], ro, rl, &e))
    fail_msg("reference: %s", e.message);
  double err = out_error(t, ho, ro, nq), lerr = lse_error(hl, rl, nl);
  for (int i = 0; i < bufs.n; i++) kn_cuda_free(dev, bufs.p[i], NULL);
  kn_cuda_free(dev, dout, NULL), kn_cuda_free(dev, dl, NULL);
  for (int i = 0; i < 3; i++) free(h[i]), free(x[i]);
  free(ho), free(ro), free(rl), free(hl), free(slopes), free(bias), free(qseg), free(kseg);
  return verdict(t, err, lerr, why, nwhy);
}

static void test_variants(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  kiln_context *ctx = cuda_ctx(dir, NULL, "cuda");
#define VD(dt, hd, ...) {.dtype = dt, .head_dim = hd, __VA_ARGS__}
  const vcase cases[] = {
      {.d = VD(KILN_F16, 64, .causal = 1, .window = 1, .softcap = 1),
       .s = {2, 4, 2, 300, 333, 0, 0}, .wl = 32, .wr = 0, .cap = 20},
      {.d = VD(KILN_BF16, 128, .window = 1), .s = {1, 2, 1, 100, 1000, 0, 0}, .wl = -1, .wr = 8},
      {.d = VD(KILN_BF16, 128, .alibi = 1, .bias = 1, .document = 1),
       .s = {2, 2, 2, 130, 170, 0, 0}},
      {.d = VD(KILN_F16, 64, .causal = KILN_CAUSAL_TOP_LEFT), .s = {1, 4, 1, 200, 90, 0, 0},
       .user = 1},
  };
#undef VD
  int failures = 0, ran = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const vcase *c = &cases[i];
    bool fake_can = !c->d.alibi && !c->d.bias && !c->d.document && !c->user &&
                    c->d.causal != KILN_CAUSAL_TOP_LEFT;
    if (fake_attn && !fake_can) {
      printf("  SKIP variant case %zu (the fake driver computes windows and softcaps only)\n", i);
      continue;
    }
    char why[160];
    int bad = check_variant(ctx, c, seed + 31 * i, why, sizeof why);
    printf("  %s variant case %zu (window %d, softcap %d, alibi %d, bias %d, document %d, "
           "causal %d, mods %d): %s\n", bad ? "FAIL" : "PASS", i, c->d.window, c->d.softcap,
           c->d.alibi, c->d.bias, c->d.document, c->d.causal, c->user, why);
    failures += bad != 0;
    ran++;
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.launches, ran);
  kiln_context_destroy(ctx);
  rm_dir(dir);
  assert_int_equal(failures, 0);
}

/* Varlen (docs/serving.md) through the CUDA path: packed ragged sequences (an empty one, length
 * 1, lengths off the blocks), GQA, causal and a window, the prefix sums as device memory (the
 * launch packs them after the template's parameters), capacities described; against
 * kn_attn_reference_v.  The fake driver computes varlen too (kn_fake_cuda_attn_varlen). */
static void test_varlen_cuda(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  kiln_context *ctx = cuda_ctx(dir, NULL, "cuda");
  static const struct { kiln_attn_desc d; int n, lq[5], lk[5], wl, wr; } cases[] = {
      {{.dtype = KILN_F16, .head_dim = 128, .causal = 1, .has_lse = 1}, 5,
       {1, 130, 0, 77, 300}, {1, 200, 5, 77, 290}, 0, 0},
      {{.dtype = KILN_BF16, .head_dim = 64, .causal = 1, .window = 1, .has_lse = 1}, 3,
       {64, 9, 200}, {64, 40, 260}, 24, 0},
      /* a bias and documents: (B, H, max_q, max_k) and (B, max) tensors indexed by each
       * sequence's own positions (the kernel clamps its lengths into max_seqlen) */
      {{.dtype = KILN_F16, .head_dim = 64, .bias = 1, .document = 1, .has_lse = 1}, 4,
       {33, 0, 1, 70}, {50, 3, 64, 70}, 0, 0},
  };
  int failures = 0;
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const kiln_attn_desc *d = &cases[ci].d;
    kiln_kernel *k;
    kiln_attn_desc vd = *d;
    vd.layout = KILN_LAYOUT_VARLEN;
    if (kiln_prepare(ctx, &vd, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
    const kn_attn_desc id = internal_desc(&vd);
    const int B = cases[ci].n, H = 4, HK = 2, D = d->head_dim;
    int32_t cq[6] = {0}, ck[6] = {0};
    int mq = 0, mk = 0;
    for (int b = 0; b < B; b++) {
      cq[b + 1] = cq[b] + cases[ci].lq[b], ck[b + 1] = ck[b] + cases[ci].lk[b];
      if (cases[ci].lq[b] > mq) mq = cases[ci].lq[b];
      if (cases[ci].lk[b] > mk) mk = cases[ci].lk[b];
    }
    kn_scalar t = id.dtype;
    size_t es = kn_scalar_size(t), nq = (size_t)cq[B] * H * D, nk = (size_t)ck[B] * HK * D;
    size_t nl = (size_t)H * cq[B];
    char *h[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)}, *ho = malloc(nq * es);
    double *x[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)}, *ro = malloc(nq * 8);
    double *rl = malloc(nl * 8);
    float *hl = malloc(nl * 4);
    size_t n[3] = {nq, nk, nk};
    uint64_t sd = seed + 7 * ci;
    rand_inputs(t, h, x, n, &sd);
    devbufs bufs = {0};
    kn_diag e;
    kn_cuda_ptr dout, dl;
    if (kn_cuda_alloc(dev, nq * es, &dout, &e) || kn_cuda_alloc(dev, nl * 4, &dl, &e) ||
        kn_cuda_memset8(dev, dout, 0xff, nq * es, &e) ||
        kn_cuda_memset8(dev, dl, 0xff, nl * 4, &e))
      fail_msg("%s", e.message);
    /* the bias (B, H, max_q, max_k) and segment ids (B, max_q), (B, max_k): three documents */
    const size_t nb = (size_t)B * H * mq * mk;
    char *bias = malloc(nb * es + 1);
    int32_t *qseg = malloc(sizeof(int32_t) * (size_t)(B * mq + 1));
    int32_t *kseg = malloc(sizeof(int32_t) * (size_t)(B * mk + 1));
    for (size_t i = 0; i < nb; i++) kn_store_elem(t, bias + i * es, normal(&sd));
    for (int b = 0; b < B; b++) {
      for (int i = 0; i < mq; i++) qseg[b * mq + i] = (int32_t)((int64_t)i * 3 / mq);
      for (int j = 0; j < mk; j++) kseg[b * mk + j] = (int32_t)((int64_t)j * 3 / mk);
    }
    kiln_attn_args a = {.q = upload(&bufs, h[0], nq * es), .k = upload(&bufs, h[1], nk * es),
                        .v = upload(&bufs, h[2], nk * es), .o = (void *)(uintptr_t)dout,
                        .lse = (float *)(uintptr_t)dl, .batch = B, .heads = H, .kv_heads = HK,
                        .seqlen_q = mq, .seqlen_k = mk,
                        .cu_seqlens_q = upload(&bufs, cq, sizeof cq),
                        .cu_seqlens_k = upload(&bufs, ck, sizeof ck), .total_q = cq[B],
                        .total_k = ck[B], .q_numel = (int64_t)nq, .k_numel = (int64_t)nk,
                        .v_numel = (int64_t)nk, .o_numel = (int64_t)nq,
                        .lse_numel = (int64_t)nl};
    if (d->window) a.window_left = cases[ci].wl, a.window_right = cases[ci].wr;
    if (d->bias) a.bias = upload(&bufs, bias, nb * es), a.bias_numel = (int64_t)nb;
    if (d->document) {
      a.q_seg = upload(&bufs, qseg, sizeof(int32_t) * (size_t)B * mq);
      a.k_seg = upload(&bufs, kseg, sizeof(int32_t) * (size_t)B * mk);
      a.q_seg_numel = (int64_t)B * mq, a.k_seg_numel = (int64_t)B * mk;
    }
    forward_synced(k, &a, &vd);
    if (kn_cuda_copy_dtoh(dev, ho, dout, nq * es, &e) ||
        kn_cuda_copy_dtoh(dev, hl, dl, nl * 4, &e))
      fail_msg("%s", e.message);
    kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = mq, .seqlen_k = mk,
                         .cu_seqlens_q = cq, .cu_seqlens_k = ck, .total_q = cq[B],
                         .total_k = ck[B]};
    kn_attn_vargs va = {.window_left = cases[ci].wl, .window_right = cases[ci].wr,
                        .bias = bias, .bias_sb = (int64_t)H * mq * mk,
                        .bias_sh = (int64_t)mq * mk, .bias_sm = mk, .q_seg = qseg,
                        .k_seg = kseg, .q_seg_sb = mq, .k_seg_sb = mk};
    if (kn_attn_reference_v(&id, NULL, &p, &va, x[0], x[1], x[2], ro, rl, &e))
      fail_msg("reference: %s", e.message);
    double err = out_error(t, ho, ro, nq), lerr = lse_error(hl, rl, nl);
    char why[160];
    int bad = verdict(t, err, lerr, why, sizeof why);
    printf("  %s varlen case %zu (%d sequences, window %d, bias %d, document %d): %s\n",
           bad ? "FAIL" : "PASS", ci, B, d->window, d->bias, d->document, why);
    failures += bad != 0;
    for (int i = 0; i < bufs.n; i++) kn_cuda_free(dev, bufs.p[i], NULL);
    kn_cuda_free(dev, dout, NULL), kn_cuda_free(dev, dl, NULL);
    for (int i = 0; i < 3; i++) free(h[i]), free(x[i]);
    free(ho), free(ro), free(rl), free(hl), free(bias), free(qseg), free(kseg);
  }
  kiln_context_destroy(ctx);
  rm_dir(dir);
  assert_int_equal(failures, 0);
}

/* The backward (docs/backward.md) through kiln_backward's CUDA path, dense and varlen
 * (ragged, an empty sequence, length 1), GQA and causal: kiln_forward then kiln_backward on
 * device buffers, dq / dk / dv against kn_attn_bwd_reference.  The fake driver computes the
 * three kernels from their arguments (plain or causal, f32 at D 64 there, varlen's prefix sums:
 * kn_fake_cuda_attn_varlen), so a wrong stride, base or grid fails there too; on a real GPU
 * the cases with dropout run as well, and on an sm_90a GPU every case again with the wgmma
 * kernels (kiln_prepare_options.wgmma).  Varlen gradients start as NaN bytes: the tokens past the
 * last sequence must stay so (nothing writes them), the others must be written. */
static void test_backward_cuda(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  kiln_context *ctx = cuda_ctx(dir, NULL, "cuda");
  static const struct { kiln_attn_desc d; int n, lq[5], lk[5]; } cases[] = {
      {{.dtype = KILN_F16, .head_dim = 64, .causal = 1}, 2, {130, 77}, {130, 77}},
      {{.dtype = KILN_F16, .head_dim = 64, .causal = 1, .layout = KILN_LAYOUT_VARLEN}, 5,
       {1, 130, 0, 77, 200}, {1, 150, 5, 60, 190}},
      {{.dtype = KILN_F16, .head_dim = 64, .layout = KILN_LAYOUT_VARLEN}, 3, {64, 9, 100},
       {64, 40, 0}},
      {{.dtype = KILN_F16, .head_dim = 64, .causal = 1, .layout = KILN_LAYOUT_VARLEN,
        .dropout_p = 0.17f}, 3, {97, 1, 64}, {130, 1, 64}},
  };
  int failures = 0;
  const size_t ncases = sizeof cases / sizeof cases[0];
  /* on an sm_90a GPU every case once more with the backward's wgmma kernels */
  const bool wg = !fake_attn && !strcmp(kiln_context_target(ctx), "sm_90a");
  for (size_t cj = 0; cj < (wg ? 2 : 1) * ncases; cj++) {
    const size_t ci = cj % ncases;
    const kiln_prepare_options wgo = {.wgmma = 1}, *bo = cj >= ncases ? &wgo : NULL;
    /* the fake accumulates dK and dV in the buffers' dtype, one rounding per update: f32
     * there keeps its own error far below the tolerance */
    kiln_attn_desc dd = cases[ci].d;
    if (fake_attn) dd.dtype = KILN_F32;
    const kiln_attn_desc *d = &dd;
    if (fake_attn && d->dropout_p != 0) continue;  /* the fake computes no dropout */
    const bool varlen = d->layout == KILN_LAYOUT_VARLEN;
    kiln_kernel *fk, *bk;
    kiln_attn_desc fd = *d;
    fd.has_lse = 1;
    if (kiln_prepare(ctx, &fd, NULL, &fk) || kiln_prepare_backward(ctx, d, bo, &bk))
      fail_msg("prepare: %s", kiln_last_error());
    const kn_attn_desc id = internal_desc(d);
    const int B = cases[ci].n, H = 4, HK = 2, D = d->head_dim;
    int32_t cq[6] = {0}, ck[6] = {0};
    int mq = 0, mk = 0;
    for (int b = 0; b < B; b++) {
      cq[b + 1] = cq[b] + cases[ci].lq[b], ck[b + 1] = ck[b] + cases[ci].lk[b];
      if (cases[ci].lq[b] > mq) mq = cases[ci].lq[b];
      if (cases[ci].lk[b] > mk) mk = cases[ci].lk[b];
    }
    if (!varlen) mq = cases[ci].lq[0], mk = cases[ci].lk[0];
    /* token rows: packed (with 3 / 2 rows of no sequence after the last), or B x length */
    const int Tq = varlen ? cq[B] + 3 : B * mq, Tk = varlen ? ck[B] + 2 : B * mk;
    kn_scalar t = id.dtype;
    size_t es = kn_scalar_size(t), nq = (size_t)Tq * H * D, nk = (size_t)Tk * HK * D;
    size_t nl = (size_t)H * Tq;
    char *h[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)}, *hdo = malloc(nq * es);
    char *g[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)};
    double *x[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)}, *xdo = malloc(nq * 8);
    double *ref[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)};
    size_t n[3] = {nq, nk, nk};
    uint64_t sd = seed + 11 * ci;
    rand_inputs(t, h, x, n, &sd);
    for (size_t i = 0; i < nq; i++) {
      kn_store_elem(t, hdo + i * es, normal(&sd));
      xdo[i] = kn_load_elem(t, hdo + i * es);
    }
    devbufs bufs = {0}, outs = {0};
    kn_diag e;
    kn_cuda_ptr dp[6];  /* o, lse, dq, dk, dv, delta */
    const size_t bytes[6] = {nq * es, nl * 4, nq * es, nk * es, nk * es, nl * 4};
    for (int i = 0; i < 6; i++) {
      if (kn_cuda_alloc(dev, bytes[i], &dp[i], &e) || kn_cuda_memset8(dev, dp[i], 0xff, bytes[i], &e))
        fail_msg("%s", e.message);
      outs.p[outs.n++] = dp[i];
    }
    const uint64_t dseed = sd, doff = sd >> 7;
    kiln_backward_args a = {
        .fwd = {.q = upload(&bufs, h[0], nq * es), .k = upload(&bufs, h[1], nk * es),
                .v = upload(&bufs, h[2], nk * es), .o = (void *)(uintptr_t)dp[0],
                .lse = (float *)(uintptr_t)dp[1], .batch = B, .heads = H, .kv_heads = HK,
                .seqlen_q = mq, .seqlen_k = mk, .q_numel = (int64_t)nq, .k_numel = (int64_t)nk,
                .v_numel = (int64_t)nk, .o_numel = (int64_t)nq, .lse_numel = (int64_t)nl},
        .dout = upload(&bufs, hdo, nq * es), .dq = (void *)(uintptr_t)dp[2],
        .dk = (void *)(uintptr_t)dp[3], .dv = (void *)(uintptr_t)dp[4],
        .delta = (float *)(uintptr_t)dp[5], .dout_numel = (int64_t)nq, .dq_numel = (int64_t)nq,
        .dk_numel = (int64_t)nk, .dv_numel = (int64_t)nk, .delta_numel = (int64_t)nl};
    if (varlen) {
      a.fwd.cu_seqlens_q = upload(&bufs, cq, sizeof cq);
      a.fwd.cu_seqlens_k = upload(&bufs, ck, sizeof ck);
      a.fwd.total_q = Tq, a.fwd.total_k = Tk;
    }
    if (d->dropout_p != 0) a.fwd.dropout_seed = dseed, a.fwd.dropout_offset = doff;
    forward_synced(fk, &a.fwd, &fd);
    if (fake_attn) {
      pthread_mutex_lock(&fake_mu);
      fake_attn((int)es, 0, D, d->causal);
      fake_varlen(varlen);
    }
    kiln_status st = kiln_backward(bk, &a, NULL);
    int sync = st == KILN_OK ? kn_cuda_device_sync(dev, &e) : 0;
    if (fake_attn) {
      fake_varlen(0);
      pthread_mutex_unlock(&fake_mu);
    }
    if (sync) fail_msg("sync: %s", e.message);
    if (st) fail_msg("backward: %s", kiln_last_error());
    for (int i = 0; i < 3; i++)
      if (kn_cuda_copy_dtoh(dev, g[i], dp[2 + i], n[i] * es, &e)) fail_msg("%s", e.message);
    kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = mq, .seqlen_k = mk,
                         .dropout_seed = dseed, .dropout_offset = doff};
    if (varlen)
      p.cu_seqlens_q = cq, p.cu_seqlens_k = ck, p.total_q = Tq, p.total_k = Tk;
    if (kn_attn_bwd_reference(&id, NULL, &p, NULL, x[0], x[1], x[2], xdo, false, ref[0], ref[1],
                              ref[2], &e))
      fail_msg("reference: %s", e.message);
    const char *nm[3] = {"dq", "dk", "dv"};
    char why[256] = "";
    int bad = 0;
    for (int i = 0; i < 3; i++) {
      /* rows of no sequence (varlen): at or past the last sequence's end */
      const size_t first = varlen ? (size_t)(i ? ck[B] * HK : cq[B] * H) * D : n[i];
      double err = 0, big = 0;
      for (size_t j = 0; j < n[i]; j++) {
        double v = kn_load_elem(t, g[i] + j * es);
        if (j >= first) {
          bad |= !isnan(v);
          continue;
        }
        double dx = fabs(v - ref[i][j]);
        if (!(dx <= err)) err = dx;
        if (fabs(ref[i][j]) > big) big = fabs(ref[i][j]);
      }
      const double tol = kn_attn_bwd_tolerance(t) * (1 + big);
      bad |= !(err <= tol);
      size_t l = strlen(why);
      snprintf(why + l, sizeof why - l, " %s %.2e (tol %.1e)", nm[i], err, tol);
    }
    printf("  %s backward case %zu (%s, %d sequences, causal %d, dropout %g%s):%s\n",
           bad ? "FAIL" : "PASS", ci, varlen ? "varlen" : "dense", B, d->causal,
           (double)d->dropout_p, bo ? ", wgmma" : "", why);
    failures += bad != 0;
    for (int i = 0; i < bufs.n; i++) kn_cuda_free(dev, bufs.p[i], NULL);
    for (int i = 0; i < outs.n; i++) kn_cuda_free(dev, outs.p[i], NULL);
    for (int i = 0; i < 3; i++) free(h[i]), free(x[i]), free(g[i]), free(ref[i]);
    free(hdo), free(xdo);
  }
  kiln_context_destroy(ctx);
  rm_dir(dir);
  assert_int_equal(failures, 0);
}

/* A paged KV cache (docs/serving.md) through the CUDA path: pools in FlashAttention's (num_pages,
 * page_size, kv_heads, D) with pages in shuffled order, the block table and cache lengths as
 * device memory (packed after the template's parameters), page sizes off the blocks, an empty
 * sequence and length 1, GQA, causal and a window, rows the caller appended itself counted by
 * seqlen_new, q and o as (B, Nq, H, D), capacities described; then k_new / v_new appended on
 * the device (the kv_append kernel) and attended over; against kn_attn_reference_v.  The fake
 * driver computes paged attention and the append too (kn_fake_cuda_attn_paged).  Calls of up to
 * 16 query rows (the first two cases) run the split-KV decode kernels through the table, two
 * launches each; the third (17 rows) the paged prefill kernel. */
static void test_paged_cuda(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  kiln_context *ctx = cuda_ctx(dir, NULL, "cuda");
  static const struct { kiln_attn_desc d; int n, nq, ps, len[4], snew, wl, wr; } cases[] = {
      {{.dtype = KILN_F16, .head_dim = 128, .causal = 1, .has_lse = 1}, 4, 3, 16,
       {1, 130, 0, 77}, 0, 0, 0},
      {{.dtype = KILN_BF16, .head_dim = 64, .causal = 1, .window = 1, .has_lse = 1}, 3, 1, 5,
       {64, 9, 200}, 2, 24, 0},
      {{.dtype = KILN_F16, .head_dim = 64, .has_lse = 1}, 2, 17, 256, {300, 256}, 1, 0, 0},
  };
  int failures = 0, decode_calls = 0;
  int launches0 = fake_decode_launches ? fake_decode_launches() : 0;
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    kiln_attn_desc pd = cases[ci].d;
    pd.layout = KILN_LAYOUT_PAGED;
    decode_calls += cases[ci].nq <= 16 ? 1 + (ci > 0) : 0;  /* (ci > 0: and after the append) */
    kiln_kernel *k;
    if (kiln_prepare(ctx, &pd, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
    const kn_attn_desc id = internal_desc(&pd);
    const int B = cases[ci].n, H = 4, HK = 2, D = pd.head_dim, Nq = cases[ci].nq;
    const int ps = cases[ci].ps, snew = cases[ci].snew;
    int mp = 0, np = 0;
    int32_t cs[4];
    for (int b = 0; b < B; b++) {
      int need = (cases[ci].len[b] + ps - 1) / ps;
      mp = need > mp ? need : mp;
      np += need;
      cs[b] = cases[ci].len[b] - snew;  /* the lengths are cache_seqlens + seqlen_new */
    }
    mp += 1, np += 2;  /* an unused tail entry per sequence, two spare pages */
    int32_t *bt = malloc(sizeof *bt * (size_t)(B * mp));
    for (int i = 0, at = 0; i < B * mp; i++)  /* sequence pages taken from the pool's far end */
      bt[i] = i % mp < (cases[ci].len[i / mp] + ps - 1) / ps ? np - 1 - at++ : 999999;
    kn_scalar t = id.dtype;
    size_t es = kn_scalar_size(t), nq = (size_t)B * Nq * H * D, nk = (size_t)np * ps * HK * D;
    size_t nl = (size_t)B * H * Nq;
    char *h[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)}, *ho = malloc(nq * es);
    double *x[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)}, *ro = malloc(nq * 8);
    double *rl = malloc(nl * 8), *xq = malloc(nq * 8);
    float *hl = malloc(nl * 4);
    size_t n[3] = {nq, nk, nk};
    uint64_t sd = seed + 11 * ci;
    rand_inputs(t, h, x, n, &sd);
    /* q as (B, Nq, H, D): the reference's (B, H, Nq, D) copy */
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < H; hh++)
        for (int i = 0; i < Nq; i++)
          for (int e = 0; e < D; e++)
            xq[(((size_t)b * H + hh) * Nq + i) * D + e] = x[0][(((size_t)b * Nq + i) * H + hh) * D + e];
    devbufs bufs = {0};
    kn_diag e;
    kn_cuda_ptr dout, dl;
    if (kn_cuda_alloc(dev, nq * es, &dout, &e) || kn_cuda_alloc(dev, nl * 4, &dl, &e) ||
        kn_cuda_memset8(dev, dout, 0xff, nq * es, &e) ||
        kn_cuda_memset8(dev, dl, 0xff, nl * 4, &e))
      fail_msg("%s", e.message);
    int64_t qs[3] = {(int64_t)Nq * H * D, D, (int64_t)H * D};
    kiln_attn_args a = {.q = upload(&bufs, h[0], nq * es), .k = upload(&bufs, h[1], nk * es),
                        .v = upload(&bufs, h[2], nk * es), .o = (void *)(uintptr_t)dout,
                        .lse = (float *)(uintptr_t)dl, .batch = B, .heads = H, .kv_heads = HK,
                        .seqlen_q = Nq, .block_table = upload(&bufs, bt, sizeof *bt * (size_t)(B * mp)),
                        .cache_seqlens = upload(&bufs, cs, sizeof cs), .page_size = ps,
                        .num_pages = np, .max_pages = mp, .seqlen_new = snew,
                        .q_numel = (int64_t)nq, .k_numel = (int64_t)nk, .v_numel = (int64_t)nk,
                        .o_numel = (int64_t)nq, .lse_numel = (int64_t)nl,
                        .block_table_numel = (int64_t)B * mp};
    memcpy(a.q_stride, qs, sizeof qs);
    memcpy(a.o_stride, qs, sizeof qs);
    if (pd.window) a.window_left = cases[ci].wl, a.window_right = cases[ci].wr;
    forward_synced(k, &a, &pd);
    if (kn_cuda_copy_dtoh(dev, ho, dout, nq * es, &e) ||
        kn_cuda_copy_dtoh(dev, hl, dl, nl * 4, &e))
      fail_msg("%s", e.message);
    kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = Nq,
                         .seqlen_k = mp * ps, .block_table = bt, .cache_seqlens = cs,
                         .page_size = ps, .num_pages = np, .max_pages = mp, .seqlen_new = snew};
    kn_attn_vargs va = {.window_left = cases[ci].wl, .window_right = cases[ci].wr};
    if (kn_attn_reference_v(&id, NULL, &p, &va, xq, x[1], x[2], ro, rl, &e))
      fail_msg("reference: %s", e.message);
    /* the kernel's o back in the reference's (B, H, Nq, D) order */
    char *hb = malloc(nq * es);
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < H; hh++)
        for (int i = 0; i < Nq; i++)
          memcpy(hb + (((size_t)b * H + hh) * Nq + i) * D * es,
                 ho + (((size_t)b * Nq + i) * H + hh) * D * es, (size_t)D * es);
    double err = out_error(t, hb, ro, nq), lerr = lse_error(hl, rl, nl);
    char why[160];
    int bad = verdict(t, err, lerr, why, sizeof why);
    printf("  %s paged case %zu (%d sequences, page %d, window %d): %s\n", bad ? "FAIL" : "PASS",
           ci, B, ps, pd.window, why);
    failures += bad != 0;
    /* then an append on the device (the kv_append kernel): one new row per sequence, at the
     * position its length had before, the same keys attended over */
    if (ci > 0) {
      size_t nn = (size_t)B * HK * D;
      char *kn = malloc(nn * es), *vn = malloc(nn * es);
      double *knd = malloc(nn * 8), *vnd = malloc(nn * 8);
      char *hn[3] = {kn, vn, kn};
      double *xn[3] = {knd, vnd, knd};
      size_t nn3[3] = {nn, nn, 0};
      rand_inputs(t, hn, xn, nn3, &sd);
      int32_t cs1[4];
      for (int b = 0; b < B; b++) {
        cs1[b] = cases[ci].len[b] - 1;  /* the new row is each sequence's last key */
        int j = cs1[b];
        size_t row = ((size_t)bt[b * mp + j / ps] * ps + (size_t)(j % ps)) * HK;
        for (int hh = 0; hh < HK; hh++)
          for (int dd = 0; dd < D; dd++) {
            x[1][(row + hh) * D + dd] = knd[((size_t)b * HK + hh) * D + dd];
            x[2][(row + hh) * D + dd] = vnd[((size_t)b * HK + hh) * D + dd];
          }
      }
      a.cache_seqlens = upload(&bufs, cs1, sizeof cs1);
      a.k_new = upload(&bufs, kn, nn * es), a.v_new = upload(&bufs, vn, nn * es);
      a.seqlen_new = 1, a.k_new_numel = a.v_new_numel = (int64_t)nn;
      forward_synced(k, &a, &pd);
      if (kn_cuda_copy_dtoh(dev, ho, dout, nq * es, &e) ||
          kn_cuda_copy_dtoh(dev, hl, dl, nl * 4, &e))
        fail_msg("%s", e.message);
      p.cache_seqlens = cs1, p.seqlen_new = 1;
      if (kn_attn_reference_v(&id, NULL, &p, &va, xq, x[1], x[2], ro, rl, &e))
        fail_msg("reference: %s", e.message);
      for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++)
          for (int i = 0; i < Nq; i++)
            memcpy(hb + (((size_t)b * H + hh) * Nq + i) * D * es,
                   ho + (((size_t)b * Nq + i) * H + hh) * D * es, (size_t)D * es);
      err = out_error(t, hb, ro, nq), lerr = lse_error(hl, rl, nl);
      bad = verdict(t, err, lerr, why, sizeof why);
      printf("  %s paged case %zu after a device append: %s\n", bad ? "FAIL" : "PASS", ci, why);
      failures += bad != 0;
      free(kn), free(vn), free(knd), free(vnd);
    }
    for (int i = 0; i < bufs.n; i++) kn_cuda_free(dev, bufs.p[i], NULL);
    kn_cuda_free(dev, dout, NULL), kn_cuda_free(dev, dl, NULL);
    for (int i = 0; i < 3; i++) free(h[i]), free(x[i]);
    free(ho), free(hb), free(ro), free(rl), free(hl), free(xq), free(bt);
  }
  kiln_context_destroy(ctx);
  rm_dir(dir);
  assert_int_equal(failures, 0);
  if (fake_decode_launches)  /* each decode call: a split and a combine launch */
    assert_int_equal(fake_decode_launches() - launches0, 2 * decode_calls);
}

/* 8 threads, each on its own stream, preparing 4 kernels and launching: one compile each */
typedef struct tharg {
  kiln_context *ctx;
  int id, bad;
} tharg;

static const kiln_attn_desc th_desc[4] = {
    DESC(KILN_F16, 64, 0, 1), DESC(KILN_F16, 64, 1, 1), DESC(KILN_BF16, 64, 0, 1),
    DESC(KILN_BF16, 64, 1, 0)};

static void *thread_main(void *p) {
  tharg *t = p;
  kn_cuda_stream s;
  kn_diag e;
  if (kn_cuda_stream_create(dev, &s, &e)) {
    t->bad++;
    return NULL;
  }
  for (int round = 0; round < 2; round++) {
    const kiln_attn_desc *d = &th_desc[(t->id + round) % 4];
    kiln_kernel *k;
    if (kiln_prepare(t->ctx, d, NULL, &k)) {
      t->bad++;
      continue;
    }
    shape sh = {1, 2, 1, 70 + t->id, 90, t->id % 2, !d->has_lse};
    char why[160];
    t->bad += check_forward(k, d, sh, seed + 100 * (uint64_t)t->id + round, s, why, sizeof why) != 0;
  }
  kn_cuda_stream_destroy(dev, s);
  return NULL;
}

/* kiln_prepare_options.wgmma: on sm_90a the dots as wgmma.mma_async (a forced tiling with
 * block_m = 16 x warps; the kernel's info says so, its cache entry is its own), checked against
 * float64 on ragged shapes with GQA; on an sm_80 device and on the host it is refused with the
 * reason (KILN_ERR_UNSUPPORTED). */
static void test_wgmma(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context_options ho = {.cache_dir = dir, .device = "host", .tune_policy = KILN_TUNE_NONE};
  kiln_context *host;
  assert_int_equal(kiln_context_create(&ho, &host), KILN_OK);
  kiln_attn_desc d0 = DESC(KILN_F16, 64, 1, 1);
  kiln_prepare_options wo = {.wgmma = 1};
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(host, &d0, &wo, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "wgmma is not available on host"));
  kiln_context_destroy(host);
  /* the tuner's matrix axis (the registry's names) and tuning records carry it too */
  const kn_arch *sm90 = kn_arch_get("sm_90a");
  for (int i = 0; i < sm90->nmma; i++) {
    if (!sm90->mma[i].mnemonic) continue;
    kn_tune_config tc = {.block_m = 64, .block_n = 64, .warps = 4, .stages = 2};
    snprintf(tc.matrix_instr, sizeof tc.matrix_instr, "%s", sm90->mma[i].mnemonic);
    kn_attn_config c = api_config_of(&tc);
    assert_int_equal(c.wgmma, sm90->mma[i].operands == KN_MMA_WGMMA);
    assert_int_equal(c.block_m, 64);
  }
  if (!have_gpu()) {
    rm_dir(dir);
    skip();
    return;
  }
  kiln_context *ctx = cuda_ctx(dir, NULL, "cuda");
  if (strcmp(kiln_context_target(ctx), "sm_90a")) {
    assert_int_equal(kiln_prepare(ctx, &d0, &wo, &k), KILN_ERR_UNSUPPORTED);
    assert_non_null(strstr(kiln_last_error(), "wgmma is not available"));
    kiln_context_destroy(ctx);
    rm_dir(dir);
    return;
  }
  /* a head dim no NVIDIA tiling holds (the accumulator alone exceeds the registers) is
   * refused at prepare, as `kiln compile --target sm_90a` refuses it, not compiled at a
   * tiling that does not fit (it was, and gave NaN) */
  kiln_attn_desc d320 = DESC(KILN_F16, 320, 0, 1);
  assert_int_equal(kiln_prepare(ctx, &d320, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "head dim 320"));
  const struct { kiln_attn_desc d; shape s; int warps; } cases[] = {
      {DESC(KILN_F16, 64, 1, 1), {1, 2, 2, 129, 77, 0, 0}, 0},     /* the default's 128 rows: 8 warps */
      {DESC(KILN_F16, 64, 0, 1), {2, 4, 2, 300, 511, 1, 0}, 4},    /* GQA, BNHD; 64 x 4 warps */
      {DESC(KILN_BF16, 128, 1, 1), {1, 3, 3, 1000, 64, 0, 0}, 8},
      {DESC(KILN_BF16, 128, 0, 0), {1, 2, 1, 17, 1000, 0, 1}, 4},
  };
  int failures = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_prepare_options o = {.wgmma = 1, .warps = cases[i].warps};
    if (kiln_prepare(ctx, &cases[i].d, &o, &k)) fail_msg("prepare: %s", kiln_last_error());
    kiln_kernel_info info;
    assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
    assert_int_equal(info.wgmma, 1);
    assert_int_equal(info.block_m, 16 * info.warps);
    if (cases[i].warps) assert_int_equal(info.warps, cases[i].warps);
    kiln_kernel *plain;
    assert_int_equal(kiln_prepare(ctx, &cases[i].d, NULL, &plain), KILN_OK);
    /* a separate kernel, unless the default is this very tiling (sm_90a's at head dim 128:
     * wgmma 64x64 with 4 warps), which the memo then serves */
    kiln_kernel_info pinfo;
    assert_int_equal(kiln_kernel_get_info(plain, &pinfo), KILN_OK);
    bool same = pinfo.wgmma && pinfo.block_m == info.block_m && pinfo.block_n == info.block_n &&
                pinfo.warps == info.warps && pinfo.stages == info.stages;
    assert_true((plain != k) == !same);
    char why[160];
    int bad = check_forward(k, &cases[i].d, cases[i].s, seed + 100 + i, NULL, why, sizeof why);
    const shape *s = &cases[i].s;
    printf("  %s wgmma %s D%d causal=%d %dx%d w%d B%d H%d HK%d N(%d,%d): %s\n",
           bad ? "FAIL" : "PASS", cases[i].d.dtype == KILN_F16 ? "f16" : "bf16",
           cases[i].d.head_dim, cases[i].d.causal, info.block_m, info.block_n, info.warps,
           s->batch, s->heads, s->kv_heads, s->seqlen_q, s->seqlen_k, why);
    failures += bad != 0;
  }
  /* a tiling wgmma does not take is refused with the rule */
  kiln_prepare_options bad = {.wgmma = 1, .block_m = 128, .block_n = 64, .warps = 4};
  assert_int_equal(kiln_prepare(ctx, &d0, &bad, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "16 x warps"));
  kiln_context_destroy(ctx);
  rm_dir(dir);
  assert_int_equal(failures, 0);
}

static void test_threads(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  kiln_context *ctx = cuda_ctx(dir, NULL, "cuda");
  pthread_t th[8];
  tharg a[8];
  for (int i = 0; i < 8; i++) {
    a[i] = (tharg){.ctx = ctx, .id = i};
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &a[i]), 0);
  }
  int bad = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    bad += a[i].bad;
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  printf("  8 threads: %d wrong, %llu compiles, %llu launches\n", bad,
         (unsigned long long)st.compiles, (unsigned long long)st.launches);
  assert_int_equal(bad, 0);
  assert_int_equal(st.compiles, 4);
  assert_int_equal(st.launches, 16);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* Decode (docs/serving.md): forwards of 1..16 query rows run the split and combine kernels
 * (two more compiles, two launches each on the fake), GQA 32/8, MQA, MHA, (B, N, H, D) strides,
 * causal, no lse, against the float64 reference; KILN_DECODE_SPLITS forces many pieces. */
static void test_decode_cuda(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  kiln_context *ctx = cuda_ctx(dir, NULL, "cuda");
  kn_cuda_stream stream;
  kn_diag e;
  if (kn_cuda_stream_create(dev, &stream, &e)) fail_msg("%s", e.message);
  const struct { kiln_attn_desc d; shape s; const char *splits; } cases[] = {
      {DESC(KILN_F16, 128, 1, 1), {2, 32, 8, 1, 1000, 0, 0}, NULL},
      {DESC(KILN_F16, 128, 1, 1), {1, 32, 8, 4, 4097, 1, 0}, "7"},
      {DESC(KILN_F16, 128, 0, 1), {3, 8, 1, 16, 65, 0, 0}, NULL},     /* MQA */
      {DESC(KILN_BF16, 64, 1, 0), {2, 4, 4, 2, 333, 1, 1}, "40"},     /* MHA, no lse */
      {DESC(KILN_F16, 64, 0, 1), {1, 2, 1, 1, 1, 0, 0}, NULL},
  };
  int launches0 = fake_decode_launches ? fake_decode_launches() : 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_kernel *k;
    if (kiln_prepare(ctx, &cases[i].d, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
    if (cases[i].splits) setenv("KILN_DECODE_SPLITS", cases[i].splits, 1);
    char why[160];
    int bad = check_forward(k, &cases[i].d, cases[i].s, seed + i, stream, why, sizeof why);
    unsetenv("KILN_DECODE_SPLITS");
    printf("  decode case %zu (B%d H%d/%d Nq %d Nk %d): %s\n", i, cases[i].s.batch,
           cases[i].s.heads, cases[i].s.kv_heads, cases[i].s.seqlen_q, cases[i].s.seqlen_k, why);
    if (bad) fail_msg("decode case %zu: %s", i, why);
  }
  if (fake_decode_launches)  /* each forward: a split and a combine launch */
    assert_int_equal(fake_decode_launches() - launches0, 2 * 5);
  kn_cuda_stream_destroy(dev, stream);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* ---- tuning on the device: candidates timed with CUDA events ----
 *
 * kiln_tune on a small problem over a space of (block_m, warps) points, each a different grid x
 * (seqlen / block_m) and block (32 x warps), which is how the fake driver's cost hook tells the
 * candidates' launches apart.  On the fake, each candidate gets a cost (its event-timed
 * milliseconds) in an order drawn from the seed; the cheapest is made to compute a wrong output
 * and the second cheapest to fail its launches, so the check and the failure path must reject
 * them or the test sees the wrong winner.  Every launch is counted: one check launch, then the
 * warm-up and the timed ones.  On a real GPU every candidate must pass the check and be timed.
 * Then the record serves a later prepare (KILN_TUNE_CACHED, its code from the cache), on this
 * context and on a second one, and KILN_TUNE_AUTO tunes on a miss. */

enum { TUNE_N = 200, TUNE_WARMUP = 2, TUNE_REPEATS = 3, TUNE_MAX = 16 };
typedef struct tune_pt {
  int block_m, warps;
  double ms;   /* the fake's cost of one launch */
  int how;     /* 0 right, 1 a wrong output, 2 the launch fails */
  int seen;    /* launches the hook saw */
} tune_pt;
static tune_pt tpts[TUNE_MAX];
static int ntpts, tune_stray;

static int tune_cost(unsigned gx, unsigned bx, unsigned dyn, double *ms) {
  (void)dyn;
  for (int i = 0; i < ntpts; i++)
    if (gx == (unsigned)((TUNE_N + tpts[i].block_m - 1) / tpts[i].block_m) &&
        bx == 32u * (unsigned)tpts[i].warps) {
      tpts[i].seen++;
      *ms = tpts[i].ms;
      return tpts[i].how;
    }
  tune_stray++;
  *ms = 0.5;
  return 0;
}

static int tune_find(int block_m, int warps) {
  for (int i = 0; i < ntpts; i++)
    if (tpts[i].block_m == block_m && tpts[i].warps == warps) return i;
  fail_msg("candidate %dx? w%d is none of the space's points", block_m, warps);
  return -1;
}

static void test_tune_cuda(void **state) {
  (void)state;
  char *dir;
  logcap l = {.mu = PTHREAD_MUTEX_INITIALIZER};
  setenv("KILN_TUNE_PROGRESS", "0", 1);
  kiln_context *ctx = gpu_test_ctx(&dir, &l);
  const kn_arch *arch = kn_arch_get(kiln_context_target(ctx));
  assert_non_null(arch);
  kiln_attn_desc d = DESC(KILN_F16, 64, 1, 1);
  kn_attn_desc id = internal_desc(&d);
  /* the space: block_m x warps at one block_n, with a matrix instruction that is not wgmma
   * (whose threads are not 32 x warps) */
  kn_space sp;
  kn_diag e;
  if (kn_space_default(&sp, "fwd", arch, &e)) fail_msg("%s", e.message);
  const char *mi = NULL;
  for (int i = 0; i < sp.nmatrix && !mi; i++)
    if (strncmp(sp.matrix_names[i], "wgmma.", 6)) mi = sp.matrix_names[i];
  assert_non_null(mi);
  char spec[256];
  snprintf(spec, sizeof spec, "block_m=32,64,128;block_n=64;warps=2,4,8;stages=2;matrix_instr=%s",
           mi);
  if (kn_space_apply(&sp, spec, &e)) fail_msg("%s", e.message);
  ntpts = 0;
  for (int i = 0; i < kn_space_size(&sp) && ntpts < TUNE_MAX; i++) {
    kn_tune_config tc;
    kn_space_point(&sp, i, &tc);
    kn_attn_config c = api_config_of(&tc);
    if (kn_attn_check_on(arch, &id, &c, &e) == 0)
      tpts[ntpts++] = (tune_pt){.block_m = tc.block_m, .warps = tc.warps};
  }
  printf("  %d candidates in '%s'\n", ntpts, spec);
  assert_true(ntpts >= 4);
  /* costs: 1.0 + 0.25 k ms for a permutation k of the points drawn from the seed; the cheapest
   * is wrong, the next fails, the third must win */
  int order[TUNE_MAX];
  uint64_t sd = seed;
  for (int i = 0; i < ntpts; i++) order[i] = i;
  for (int i = ntpts - 1; i > 0; i--) {
    int j = (int)(rng(&sd) % (uint64_t)(i + 1)), x = order[i];
    order[i] = order[j], order[j] = x;
  }
  for (int k = 0; k < ntpts; k++) {
    tpts[order[k]].ms = 1.0 + 0.25 * k;
    tpts[order[k]].how = k == 0 ? 1 : k == 1 ? 2 : 0;
  }
  const int winner = order[2];
  tune_stray = 0;
  int launches0 = fake_launches ? fake_launches() : 0;
  if (fake_attn) {
    pthread_mutex_lock(&fake_mu);
    fake_attn(2, 0, 64, 1);
    fake_cost(tune_cost);
  }
  kiln_prepare_options po = {.seqlen = TUNE_N, .tune_space = spec, .tune_heads = 2,
                             .tune_warmup = TUNE_WARMUP, .tune_repeats = TUNE_REPEATS};
  kiln_tune_result res;
  kiln_status ts = kiln_tune(ctx, &d, &po, &res);
  if (fake_attn) {
    fake_cost(NULL);
    pthread_mutex_unlock(&fake_mu);
  }
  if (ts) fail_msg("tune: %s", kiln_last_error());
  assert_int_equal(res.ncandidates, ntpts);
  int ok_launches = 0;
  for (int i = 0; i < res.ncandidates; i++) {
    const kiln_tune_candidate *c = &res.candidates[i];
    int p = tune_find(c->block_m, c->warps);
    printf("  candidate %dx%d w%d: state %d, median %.1f us, %d launches %s\n", c->block_m,
           c->block_n, c->warps, (int)c->state, c->median_us, tpts[p].seen, c->note);
    if (!fake_attn) {
      assert_int_equal(c->state, KILN_CANDIDATE_TIMED);  /* every kernel passes the check */
      assert_true(c->median_us > 0 && c->min_us <= c->median_us);
      continue;
    }
    if (tpts[p].how == 1) {  /* wrong: rejected by its check launch, never timed */
      assert_int_equal(c->state, KILN_CANDIDATE_WRONG);
      assert_non_null(strstr(c->note, "max_abs_err"));
      assert_int_equal(tpts[p].seen, 1);
      ok_launches += 1;
    } else if (tpts[p].how == 2) {  /* the failing launch: FAILED with the driver's error */
      assert_int_equal(c->state, KILN_CANDIDATE_FAILED);
      assert_non_null(strstr(c->note, "cuLaunchKernel"));
      assert_int_equal(tpts[p].seen, 1);
    } else {
      assert_int_equal(c->state, KILN_CANDIDATE_TIMED);
      assert_int_equal(tpts[p].seen, 1 + TUNE_WARMUP + TUNE_REPEATS);
      /* the events' time, exactly the fake's cost: the median of equal launches */
      assert_true(fabs(c->median_us - 1e3 * tpts[p].ms) < 0.05);
      assert_true(fabs(c->min_us - 1e3 * tpts[p].ms) < 0.05);
      ok_launches += 1 + TUNE_WARMUP + TUNE_REPEATS;
    }
  }
  assert_true(res.best >= 0 && res.recorded);
  const kiln_tune_candidate *b = &res.candidates[res.best];
  if (fake_attn) {
    assert_int_equal(tune_stray, 0);
    assert_int_equal(fake_launches() - launches0, ok_launches);
    assert_int_equal(b->block_m, tpts[winner].block_m);
    assert_int_equal(b->warps, tpts[winner].warps);
  }
  assert_non_null(strstr(l.text, "(recorded)"));
  /* the record serves the next prepare, whose code the tuner left in the cache */
  kiln_kernel *k = prepare_tuned(ctx, &d, TUNE_N, b);
  kiln_kernel_info info;
  char why[160];
  int bad = check_forward(k, &d, (shape){1, 2, 1, 150, 177, 0, 0}, seed + 21, NULL, why,
                          sizeof why);
  printf("  %s the tuned kernel: %s\n", bad ? "FAIL" : "PASS", why);
  assert_int_equal(bad, 0);
  /* a second context on the same cache reads the record too */
  kiln_context *ctx2 = cuda_ctx(dir, NULL, "cuda");
  prepare_tuned(ctx2, &d, TUNE_N, b);
  kiln_context_destroy(ctx2);
  kiln_tune_result_free(&res);

  /* KILN_TUNE_AUTO on a miss tunes (on the device), records and uses the winner */
  kiln_attn_desc d2 = DESC(KILN_BF16, 64, 0, 1);
  kiln_stats st0, st1;
  kiln_context_stats(ctx, &st0);
  kiln_prepare_options au = po;
  au.tune_policy = KILN_TUNE_AUTO;
  if (fake_attn) {
    pthread_mutex_lock(&fake_mu);
    fake_attn(2, 1, 64, 0);
  }
  ts = kiln_prepare(ctx, &d2, &au, &k);
  if (fake_attn) pthread_mutex_unlock(&fake_mu);
  if (ts) fail_msg("prepare AUTO: %s", kiln_last_error());
  kiln_context_stats(ctx, &st1);
  assert_int_equal(st1.tunings - st0.tunings, 1);
  assert_int_equal(st1.candidates - st0.candidates, (uint64_t)ntpts);
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_true(info.tuned);
  assert_null(strstr(l.text, "acts as KILN_TUNE_CACHED"));
  bad = check_forward(k, &d2, (shape){2, 2, 2, 70, 201, 1, 0}, seed + 22, NULL, why, sizeof why);
  printf("  %s the AUTO-tuned kernel: %s\n", bad ? "FAIL" : "PASS", why);
  assert_int_equal(bad, 0);
  /* a variant: its representative values (a window of 256 keys left of the diagonal, a softcap
   * of 30) are parameters of every candidate's launch, checked against kn_attn_reference_v
   * (which the fake computes too) */
  kiln_attn_desc dv = {.dtype = KILN_F16, .head_dim = 64, .has_lse = 1, .window = 1,
                       .softcap = 1};
  snprintf(spec, sizeof spec, "block_m=64,128;block_n=64;warps=4;stages=2;matrix_instr=%s", mi);
  kiln_prepare_options pv = po;
  pv.tune_space = spec;
  if (fake_attn) {
    pthread_mutex_lock(&fake_mu);
    fake_attn(2, 0, 64, 0);
    fake_variant(1, 1);
  }
  ts = kiln_tune(ctx, &dv, &pv, &res);
  if (fake_attn) {
    fake_variant(0, 0);
    pthread_mutex_unlock(&fake_mu);
  }
  if (ts) fail_msg("tune (variant): %s", kiln_last_error());
  assert_int_equal(res.ncandidates, 2);
  for (int i = 0; i < res.ncandidates; i++) {
    printf("  variant candidate %dx%d: state %d, median %.1f us %s\n", res.candidates[i].block_m,
           res.candidates[i].block_n, (int)res.candidates[i].state, res.candidates[i].median_us,
           res.candidates[i].note);
    assert_int_equal(res.candidates[i].state, KILN_CANDIDATE_TIMED);
  }
  kiln_tune_result_free(&res);
  kiln_context_destroy(ctx);
  unsetenv("KILN_TUNE_PROGRESS");
  rm_dir(dir);
}

/* kiln_tune_decode on the device: each candidate's forward on the caller's stream between two
 * CUDA events (on the fake, every launch takes 0.5 ms of its clock: a decode forward is the
 * split and the combine, 1 ms exactly); then the winner serves the same problem correctly */
static void test_tune_decode_cuda(void **state) {
  (void)state;
  char *dir;
  kiln_context *ctx = gpu_test_ctx(&dir, NULL);
  kiln_attn_desc d = DESC(KILN_F16, 64, 0, 1);
  kiln_kernel *k;
  if (kiln_prepare(ctx, &d, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
  const shape s = {2, 8, 2, 1, 700, 0, 0};
  const size_t es = 2, nq = (size_t)s.batch * s.heads * 64, nk = (size_t)s.batch * s.kv_heads *
                                                                 s.seqlen_k * 64;
  uint16_t *h = malloc(nk * es);
  assert_non_null(h);
  uint64_t sd = seed + 31;
  for (size_t i = 0; i < nk; i++) kn_store_elem(KN_F16, h + i, normal(&sd));
  kn_diag e;
  kn_cuda_ptr dq, dk, dv, dout, dl;
  if (kn_cuda_alloc(dev, nq * es, &dq, &e) || kn_cuda_alloc(dev, nk * es, &dk, &e) ||
      kn_cuda_alloc(dev, nk * es, &dv, &e) || kn_cuda_alloc(dev, nq * es, &dout, &e) ||
      kn_cuda_alloc(dev, nq / 64 * 4, &dl, &e) || kn_cuda_copy_htod(dev, dq, h, nq * es, &e) ||
      kn_cuda_copy_htod(dev, dk, h, nk * es, &e) || kn_cuda_copy_htod(dev, dv, h, nk * es, &e))
    fail_msg("%s", e.message);
  kiln_attn_args a = {.q = (void *)(uintptr_t)dq, .k = (void *)(uintptr_t)dk,
                      .v = (void *)(uintptr_t)dv, .o = (void *)(uintptr_t)dout,
                      .lse = (float *)(uintptr_t)dl, .batch = s.batch, .heads = s.heads,
                      .kv_heads = s.kv_heads, .seqlen_q = 1, .seqlen_k = s.seqlen_k};
  kiln_prepare_options po = {.tune_warmup = 1, .tune_repeats = 3};
  kiln_tune_result r;
  int launches0 = fake_decode_launches ? fake_decode_launches() : 0;
  if (fake_attn) {
    pthread_mutex_lock(&fake_mu);
    fake_attn(2, 0, 64, 0);
  }
  kiln_status ts = kiln_tune_decode(k, &a, NULL, &po, &r);
  if (fake_attn) pthread_mutex_unlock(&fake_mu);
  if (ts) fail_msg("tune decode: %s", kiln_last_error());
  assert_true(r.ncandidates >= 4);
  int timed = 0;
  for (int i = 0; i < r.ncandidates; i++) {
    const kiln_tune_candidate *c = &r.candidates[i];
    assert_int_equal(c->state, KILN_CANDIDATE_TIMED);  /* each agreed with the default */
    assert_true(c->median_us > 0);
    if (fake_attn) assert_true(fabs(c->median_us - 1000.0) < 0.05);
    timed++;
  }
  printf("  decode tune: %d candidates timed, best block_n %d, %d pieces, %.1f us\n", timed,
         r.candidates[r.best].block_n, r.candidates[r.best].decode_splits,
         r.candidates[r.best].median_us);
  /* the default's forward, then each candidate: a check forward, the warm-up and the repeats
   * (two launches each), then the winner's forward */
  if (fake_decode_launches)
    assert_int_equal(fake_decode_launches() - launches0, 2 * (1 + timed * (1 + 1 + 3) + 1));
  kiln_tune_result_free(&r);
  char why[160];
  int bad = check_forward(k, &d, s, seed + 32, NULL, why, sizeof why);
  printf("  %s the tuned decode kernels: %s\n", bad ? "FAIL" : "PASS", why);
  assert_int_equal(bad, 0);
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dl};
  for (int i = 0; i < 5; i++) kn_cuda_free(dev, bufs[i], NULL);
  free(h);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  self_path = argv[0];
  if (argc == 3 && !strcmp(argv[1], "--child") && !strcmp(argv[2], "nodev")) return child_nodev();
  const char *env = getenv("KILN_TEST_SEED");
  seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  printf("seed %llu (KILN_TEST_SEED replays)\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_device),
      cmocka_unit_test(test_forward),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_variants),
      cmocka_unit_test(test_wgmma),
      cmocka_unit_test(test_varlen_cuda),
      cmocka_unit_test(test_backward_cuda),
      cmocka_unit_test(test_decode_cuda),
      cmocka_unit_test(test_paged_cuda),
      cmocka_unit_test(test_tune_cuda),
      cmocka_unit_test(test_tune_decode_cuda),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (dev) kn_cuda_device_close(dev);
  return rc;
}
