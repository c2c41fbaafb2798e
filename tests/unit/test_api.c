/* test_api.c — the public API (include/kiln.h) end to end on the host device.
 *
 * Every test gets a fresh cache directory under $TMPDIR and checks results against the float64
 * reference (kn_attn_reference) with the template's tolerance.  Covered: prepare/forward with
 * strided layouts and GQA; the memo; a second context is a cache hit; a bit-flipped, truncated
 * or garbage entry is detected, rebuilt and never loaded; a read-only cache and a full disk
 * (injected faults: these tests may run as root, where chmod does not bind; plus a real 16 KiB
 * tmpfs where root may mount one) give correct results with exactly one warning; a 0777 directory is refused; 16 processes preparing one kernel at
 * once leave one valid entry; a second process start neither tunes nor compiles; the tuner
 * prunes by reported resources and records its choice; 32 threads preparing and launching at
 * once compile each kernel once (and, in the TSan build, race on nothing).
 * Every context names the host device: the buffers are host memory, and "auto" would pick an
 * NVIDIA GPU where there is one (test_api_cuda.c covers that device).
 *
 * Processes: the test binary re-runs itself with `--child MODE` (the kernel and the problem are
 * fixed per mode); a child prints one `stats ...` line and exits 0 when its results were correct.
 * `--filter PATTERN` runs only matching tests (the TSan target runs the thread test alone).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, truncate, pipe2 */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "attention.h"
#include "cache.h"
#include "kiln.h"
#include "numeric.h"
#include "test_api_util.h"
#include "test_mods.h"
#include "tunedb.h"

static const char *self_path;

/* ---- helpers ---- */

typedef struct logcap {
  pthread_mutex_t mu;
  int count[4];
  char text[32768];
  size_t len;
} logcap;

static void capture(void *user, kiln_log_level level, const char *msg) {
  logcap *l = user;
  pthread_mutex_lock(&l->mu);
  l->count[level]++;
  static const char *names[] = {"error", "warn", "info", "debug"};
  int n = snprintf(l->text + l->len, sizeof l->text - l->len, "%s: %s\n", names[level], msg);
  if (n > 0 && l->len + (size_t)n < sizeof l->text) l->len += (size_t)n;
  pthread_mutex_unlock(&l->mu);
}

static void logcap_init(logcap *l) {
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->mu, NULL);
}

static kiln_context *make_ctx(const char *dir, logcap *l, kiln_tune_policy p) {
  kiln_context_options o = {.cache_dir = dir, .log = l ? capture : NULL, .log_user = l,
                            .tune_policy = p, .device = "host"};
  kiln_context *ctx = NULL;
  kiln_status s = kiln_context_create(&o, &ctx);
  if (s) fprintf(stderr, "context: %s\n", kiln_last_error());
  assert_int_equal(s, KILN_OK);
  return ctx;
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
  int bshd; /* store q/k/v/o as (B, N, H, D) through strides, as many engines do */
} shape;

/* runs k on random inputs and compares with the reference; returns 0 when within tolerance */
static int check_forward(kiln_kernel *k, const kiln_attn_desc *d, shape s, uint64_t seed) {
  const kn_attn_desc idesc = internal_desc(d);
  kn_scalar t = idesc.dtype;
  size_t es = kn_scalar_size(t), D = (size_t)d->head_dim;
  size_t nq = (size_t)s.batch * s.heads * s.seqlen_q * D;     /* (B, H, Nq, D) */
  size_t nk = (size_t)s.batch * s.kv_heads * s.seqlen_k * D;  /* (B, HK, Nk, D) */
  size_t nl = (size_t)s.batch * s.heads * s.seqlen_q;         /* (B, H, Nq) */
  char *q = malloc(nq * es), *kk = malloc(nk * es), *v = malloc(nk * es), *o = calloc(nq, es);
  float *lse = calloc(nl, sizeof(float));
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8), *od = malloc(nq * 8);
  double *ld = malloc(nl * 8);
  /* element (b, h, n, x) of a (B, H, N, D) tensor at its (B, H, N, D) or (B, N, H, D) place */
#define AT(H_, N_, b, h, n, x)                                                                    \
  (s.bshd ? ((((size_t)(b) * (N_) + (n)) * (H_) + (h)) * D + (x))                                 \
          : ((((size_t)(b) * (H_) + (h)) * (N_) + (n)) * D + (x)))
  for (int b = 0; b < s.batch; b++)
    for (int h = 0; h < s.heads; h++)
      for (int n = 0; n < s.seqlen_q; n++)
        for (size_t x = 0; x < D; x++) {
          size_t ref = (((size_t)b * s.heads + h) * s.seqlen_q + n) * D + x;
          char *p = q + AT(s.heads, s.seqlen_q, b, h, n, x) * es;
          kn_store_elem(t, p, normal(&seed));
          qd[ref] = kn_load_elem(t, p);
        }
  for (int b = 0; b < s.batch; b++)
    for (int h = 0; h < s.kv_heads; h++)
      for (int n = 0; n < s.seqlen_k; n++)
        for (size_t x = 0; x < D; x++) {
          size_t ref = (((size_t)b * s.kv_heads + h) * s.seqlen_k + n) * D + x;
          size_t at = AT(s.kv_heads, s.seqlen_k, b, h, n, x) * es;
          kn_store_elem(t, kk + at, normal(&seed));
          kn_store_elem(t, v + at, normal(&seed));
          kd[ref] = kn_load_elem(t, kk + at);
          vd[ref] = kn_load_elem(t, v + at);
        }
  kiln_attn_args a = {.q = q, .k = kk, .v = v, .o = o, .lse = d->has_lse ? lse : NULL,
                      .batch = s.batch, .heads = s.heads, .kv_heads = s.kv_heads,
                      .seqlen_q = s.seqlen_q, .seqlen_k = s.seqlen_k};
  if (s.bshd) {
    int64_t Dl = (int64_t)D;
    a.q_stride[0] = a.o_stride[0] = (int64_t)s.seqlen_q * s.heads * Dl;
    a.q_stride[1] = a.o_stride[1] = Dl;
    a.q_stride[2] = a.o_stride[2] = (int64_t)s.heads * Dl;
    a.k_stride[0] = a.v_stride[0] = (int64_t)s.seqlen_k * s.kv_heads * Dl;
    a.k_stride[1] = a.v_stride[1] = Dl;
    a.k_stride[2] = a.v_stride[2] = (int64_t)s.kv_heads * Dl;
  }
  int rc = 0;
  kiln_status st = kiln_forward(k, &a, NULL);
  if (st) {
    fprintf(stderr, "forward: %s\n", kiln_last_error());
    rc = -1;
  } else {
    kn_attn_problem p = {.batch = s.batch, .heads = s.heads, .kv_heads = s.kv_heads,
                         .seqlen_q = s.seqlen_q, .seqlen_k = s.seqlen_k};
    kn_attn_reference(&idesc, &p, qd, kd, vd, od, ld);
    double err = 0, lerr = 0;
    for (int b = 0; b < s.batch; b++)
      for (int h = 0; h < s.heads; h++)
        for (int n = 0; n < s.seqlen_q; n++)
          for (size_t x = 0; x < D; x++) {
            size_t ref = (((size_t)b * s.heads + h) * s.seqlen_q + n) * D + x;
            double e = fabs(kn_load_elem(t, o + AT(s.heads, s.seqlen_q, b, h, n, x) * es) - od[ref]);
            if (!(e <= err)) err = e;
          }
    for (size_t i = 0; d->has_lse && i < nl; i++) {
      double e = isinf(ld[i]) && lse[i] == ld[i] ? 0 : fabs(lse[i] - ld[i]);
      if (!(e <= lerr)) lerr = e;
    }
    if (!(err <= kn_attn_tolerance(t)) || !(lerr <= kn_attn_lse_tolerance(t))) {
      fprintf(stderr, "forward: max_abs_err %g (tol %g), lse err %g\n", err, kn_attn_tolerance(t),
              lerr);
      rc = -1;
    }
  }
#undef AT
  free(q), free(kk), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(ld);
  return rc;
}

static const shape small = {2, 4, 2, 70, 100, 0};
static const kiln_attn_desc desc_a = DESC(KILN_F16, 64, 1, 1);
static const kiln_prepare_options no_tune = {.tune_policy = KILN_TUNE_NONE};

/* the one file in <dir>/objects-v1 (asserts there is exactly one), into path */
static int count_entries(const char *dir, char *path, size_t n, int *temps) {
  char od[4200];
  snprintf(od, sizeof od, "%s/objects-v1", dir);
  DIR *dd = opendir(od);
  if (!dd) return 0;
  int count = 0;
  if (temps) *temps = 0;
  for (struct dirent *e; (e = readdir(dd));) {
    if (e->d_name[0] == '.') {
      if (temps && !strncmp(e->d_name, ".tmp-", 5)) (*temps)++;
      continue;
    }
    count++;
    if (path && strlen(od) + strlen(e->d_name) + 2 <= n) {
      strcpy(path, od);
      strcat(path, "/");
      strcat(path, e->d_name);
    }
  }
  closedir(dd);
  return count;
}

/* ---- tests ---- */

static void test_prepare_forward(void **state) {
  (void)state;
  char *dir = fresh_dir();
  logcap l;
  logcap_init(&l);
  kiln_context *ctx = make_ctx(dir, &l, KILN_TUNE_NONE);
  assert_string_equal(kiln_context_target(ctx), "host");
  kiln_kernel *k = NULL, *k2 = NULL;
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k), KILN_OK);
  assert_int_equal(check_forward(k, &desc_a, small, 1), 0);
  shape strided = small;
  strided.bshd = 1;
  assert_int_equal(check_forward(k, &desc_a, strided, 2), 0);
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k2), KILN_OK);
  assert_ptr_equal(k, k2);
  kiln_kernel_info info;
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_int_equal(info.source, KILN_SOURCE_COMPILED);
  assert_int_equal(strlen(info.cache_key), 32);
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 1);
  assert_int_equal(st.memo_hits, 1);
  assert_int_equal(st.launches, 2);
  assert_int_equal(l.count[KILN_LOG_WARN], 0);
  assert_non_null(strstr(l.text, "compiled: attn_fwd [dtype=f16;d=64;causal=1;lse=1;window=0;softcap=0;"
                                   "alibi=0;bias=0;doc=0;prefix=0;layout=0;mods=0]"));
  /* a forced tiling, f32 without lse, ragged */
  kiln_attn_desc d32 = DESC(KILN_F32, 32, 0, 0);
  kiln_prepare_options force = {.block_m = 16, .block_n = 32};
  assert_int_equal(kiln_prepare(ctx, &d32, &force, &k), KILN_OK);
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_int_equal(info.block_m, 16);
  assert_int_equal(info.block_n, 32);
  assert_int_equal(check_forward(k, &d32, (shape){1, 3, 1, 33, 17, 1}, 3), 0);
  /* warps are part of the forced tiling and of the keys: another kernel, alone or with blocks */
  kiln_kernel *kw, *kw2;
  kiln_prepare_options warps = {.warps = 2};
  assert_int_equal(kiln_prepare(ctx, &d32, &warps, &kw), KILN_OK);
  assert_int_equal(kiln_kernel_get_info(kw, &info), KILN_OK);
  assert_int_equal(info.warps, 2);
  assert_ptr_not_equal(kw, k);
  force.warps = 2;
  assert_int_equal(kiln_prepare(ctx, &d32, &force, &kw2), KILN_OK);
  assert_ptr_not_equal(kw2, k);
  assert_ptr_not_equal(kw2, kw);
  assert_int_equal(kiln_kernel_get_info(kw2, &info), KILN_OK);
  assert_int_equal(info.warps, 2);
  assert_int_equal(info.block_m, 16);
  assert_int_equal(check_forward(kw2, &d32, (shape){1, 2, 1, 20, 20, 0}, 5), 0);
  warps.warps = 3;
  assert_int_equal(kiln_prepare(ctx, &d32, &warps, &kw), KILN_ERR_UNSUPPORTED);
  warps.warps = -1;
  assert_int_equal(kiln_prepare(ctx, &d32, &warps, &kw), KILN_ERR_INVALID);
  kiln_context_destroy(ctx);

  /* a second context on the same directory loads from the cache */
  logcap l2;
  logcap_init(&l2);
  ctx = make_ctx(dir, &l2, KILN_TUNE_NONE);
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k), KILN_OK);
  assert_int_equal(check_forward(k, &desc_a, small, 4), 0);
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.cache_hits, 1);
  assert_non_null(strstr(l2.text, "cache hit: attn_fwd [dtype=f16;d=64;causal=1;lse=1;window=0;softcap=0;"
                                    "alibi=0;bias=0;doc=0;prefix=0;layout=0;mods=0]"));
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

#define EXPECT(call, status, needle)                                                              \
  do {                                                                                            \
    kiln_status st_ = (call);                                                                     \
    if (st_ != (status) || !strstr(kiln_last_error(), needle))                                    \
      fail_msg("%s: status %d, message '%s' (expected %d and '%s')", #call, st_,                  \
               kiln_last_error(), status, needle);                                                \
  } while (0)

static void test_errors(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir, NULL, KILN_TUNE_NONE);
  kiln_kernel *k = NULL;
  kiln_attn_desc bad = DESC(KILN_F16, 600, 0, 0);
  assert_int_equal(kiln_prepare(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "head dim 600"));
  bad = (kiln_attn_desc)DESC((kiln_dtype)42, 64, 0, 0);
  assert_int_equal(kiln_prepare(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  kiln_prepare_options half = {.block_m = 64};
  assert_int_equal(kiln_prepare(ctx, &desc_a, &half, &k), KILN_ERR_INVALID);
  kiln_prepare_options odd = {.block_m = 48, .block_n = 64};
  assert_int_equal(kiln_prepare(ctx, &desc_a, &odd, &k), KILN_ERR_UNSUPPORTED);
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k), KILN_OK);
  char buf[64];
  kiln_attn_args a = {.q = buf, .k = buf, .v = buf, .o = buf, .lse = NULL, .batch = 1,
                      .heads = 3, .kv_heads = 2, .seqlen_q = 1, .seqlen_k = 1};
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "multiple of kv_heads"));
  a.kv_heads = 3;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID); /* has_lse, lse NULL */
  assert_non_null(strstr(kiln_last_error(), "lse"));
  /* written buffers whose strides make elements share an address (fuzz_api: a zero head stride
   * over 2^28 heads): refused before anything runs, naming the buffer */
  float lse_buf[16];
  a.lse = lse_buf;
  a.o_stride[0] = 0, a.o_stride[1] = 0, a.o_stride[2] = 64; /* heads 0 apart */
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "o is written");
  a.seqlen_q = 2, a.o_stride[1] = 64, a.o_stride[2] = 32;  /* rows half a row apart */
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "rows would overlap");
  a.seqlen_q = 1, a.o_stride[1] = 0, a.o_stride[2] = 0;
  a.lse_stride[0] = 3, a.lse_stride[1] = 0;                 /* every head's lse one address */
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "lse is written");
  a.lse_stride[0] = 0;
  kiln_context_destroy(ctx);
  kiln_context_options o = {.device = "gfx1100", .no_cache = 1}; /* a chip kiln has no target for */
  assert_int_equal(kiln_context_create(&o, &ctx), KILN_ERR_UNSUPPORTED);
  o.device = "tpu";
  assert_int_equal(kiln_context_create(&o, &ctx), KILN_ERR_NO_DEVICE);
  /* without a disk cache */
  /* (host: these buffers are host memory; "auto" picks a GPU where there is one) */
  o = (kiln_context_options){.no_cache = 1, .device = "host"};
  assert_int_equal(kiln_context_create(&o, &ctx), KILN_OK);
  assert_string_equal(kiln_context_cache_dir(ctx), "");
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k), KILN_OK);
  assert_int_equal(check_forward(k, &desc_a, small, 5), 0);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* corrupt the single entry with `how`, then a new context must warn, rebuild and be right */
static void corrupt_and_rebuild(const char *how, const char *expect) {
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir, NULL, KILN_TUNE_NONE);
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k), KILN_OK);
  kiln_kernel_info info;
  kiln_kernel_get_info(k, &info);
  kiln_context_destroy(ctx);
  char path[4600];
  assert_int_equal(count_entries(dir, path, sizeof path, NULL), 1);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  if (!strcmp(how, "flip")) {
    FILE *f = fopen(path, "r+b");
    long at = (long)st.st_size / 2;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
  } else if (!strcmp(how, "truncate")) {
    assert_int_equal(truncate(path, st.st_size - 100), 0);
  } else { /* a well-formed cache entry whose payload is not a kiln object */
    kn_cache_config cc = {.dir = dir};
    kn_cache *c;
    assert_int_equal(kn_cache_open(&cc, &c, NULL), KN_OK);
    kn_cache_key key;
    assert_int_equal(kn_cache_key_parse(info.cache_key, &key), 0);
    static const char junk[] = "KILNHOB1 but not really an object";
    assert_int_equal(kn_cache_put(c, &key, junk, sizeof junk, NULL), KN_OK);
    kn_cache_close(c);
  }
  logcap l;
  logcap_init(&l);
  ctx = make_ctx(dir, &l, KILN_TUNE_NONE);
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k), KILN_OK);
  assert_int_equal(check_forward(k, &desc_a, small, 6), 0);
  kiln_stats s;
  kiln_context_stats(ctx, &s);
  assert_int_equal(s.corrupt_entries, 1);
  assert_int_equal(s.compiles, 1);
  assert_int_equal(s.cache_hits, 0);
  assert_int_equal(l.count[KILN_LOG_WARN], 1);
  if (!strstr(l.text, expect)) fprintf(stderr, "log:\n%s", l.text);
  assert_non_null(strstr(l.text, expect));
  kiln_context_destroy(ctx);
  /* rebuilt: the entry is whole again */
  kn_cache_config cc = {.dir = dir};
  kn_cache *c;
  assert_int_equal(kn_cache_open(&cc, &c, NULL), KN_OK);
  kn_cache_report r;
  assert_int_equal(kn_cache_verify(c, &r, NULL), KN_OK);
  assert_int_equal(r.valid, 1);
  assert_int_equal(r.removed_corrupt, 0);
  kn_cache_close(c);
  rm_dir(dir);
}

static void test_corrupt_flip(void **state) {
  (void)state;
  corrupt_and_rebuild("flip", "checksum mismatch");
}
static void test_corrupt_truncate(void **state) {
  (void)state;
  corrupt_and_rebuild("truncate", "length mismatch");
}
static void test_corrupt_payload(void **state) {
  (void)state;
  corrupt_and_rebuild("payload", "not a loadable kernel");
}

/* prepares two kernels and runs them; exactly one warning, no entry stored */
static void unwritable_run(const char *dir, const char *expect) {
  logcap l;
  logcap_init(&l);
  kiln_context *ctx = make_ctx(dir, &l, KILN_TUNE_CACHED);
  kiln_kernel *k1, *k2;
  kiln_attn_desc d2 = DESC(KILN_BF16, 32, 0, 0);
  assert_int_equal(kiln_prepare(ctx, &desc_a, NULL, &k1), KILN_OK);
  assert_int_equal(kiln_prepare(ctx, &d2, NULL, &k2), KILN_OK);
  assert_int_equal(check_forward(k1, &desc_a, small, 7), 0);
  assert_int_equal(check_forward(k2, &d2, small, 8), 0);
  kiln_stats s;
  kiln_context_stats(ctx, &s);
  assert_int_equal(s.compiles, 2);
  if (l.count[KILN_LOG_WARN] != 1 || (expect && !strstr(l.text, expect)))
    fprintf(stderr, "log:\n%s", l.text);
  assert_int_equal(l.count[KILN_LOG_WARN], 1);
  if (expect) assert_non_null(strstr(l.text, expect));
  kiln_context_destroy(ctx);
  int temps = 0;
  assert_int_equal(count_entries(dir, NULL, 0, &temps), 0);
  assert_int_equal(temps, 0);
}

static void test_readonly_cache(void **state) {
  (void)state;
  char *dir = fresh_dir();
  if (geteuid() != 0) {
    /* a real read-only directory: objects-v1 cannot be created */
    assert_int_equal(chmod(dir, 0500), 0);
    unwritable_run(dir, "not writable");
  } else {
    /* root ignores modes: the cache's fault injection stands in for EROFS */
    setenv("KILN_CACHE_FAULT", "open:erofs", 1);
    unwritable_run(dir, "Read-only file system");
    unsetenv("KILN_CACHE_FAULT");
  }
  rm_dir(dir);
}

static void test_full_disk(void **state) {
  (void)state;
  char *dir = fresh_dir();
  setenv("KILN_CACHE_FAULT", "write:enospc", 1);
  unwritable_run(dir, "No space left on device");
  unsetenv("KILN_CACHE_FAULT");
  rm_dir(dir);
}

/* a real full disk: a 16 KiB tmpfs, where root may mount one (skipped elsewhere).  The first
 * write that fails is the tuning database's or the entry's; either way one warning. */
static void test_small_tmpfs(void **state) {
  (void)state;
  char *dir = fresh_dir();
  if (geteuid() != 0 || mount("tmpfs", dir, "tmpfs", 0, "size=16k,mode=0700") != 0) {
    rm_dir(dir);
    skip();
  }
  unwritable_run(dir, NULL);
  umount(dir);
  rm_dir(dir);
}

static void test_insecure_dir(void **state) {
  (void)state;
  char *dir = fresh_dir();
  assert_int_equal(chmod(dir, 0777), 0);
  logcap l;
  logcap_init(&l);
  kiln_context_options o = {.cache_dir = dir, .log = capture, .log_user = &l};
  kiln_context *ctx = (kiln_context *)&o;
  assert_int_equal(kiln_context_create(&o, &ctx), KILN_ERR_INSECURE);
  assert_null(ctx);
  assert_non_null(strstr(kiln_last_error(), "writable by all users"));
  assert_non_null(strstr(kiln_last_error(), dir));
  assert_int_equal(l.count[KILN_LOG_ERROR], 1);
  rm_dir(dir);
}

/* ---- processes ---- */

typedef struct child {
  pid_t pid;
  int out;     /* read end of its stdout */
} child;

/* starts `self --child mode` with the environment given (NAME=VALUE, NULL-terminated); the
 * child waits on `gate` (a pipe's read end) before it starts */
static child spawn(const char *mode, const char *const *env, int gate) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1); /* dup2 clears close-on-exec on the copy */
    for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
    char gatefd[16];
    snprintf(gatefd, sizeof gatefd, "%d", gate);
    execl(self_path, self_path, "--child", mode, gatefd, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  return (child){pid, p[0]};
}

/* waits for c; its output into buf; returns its exit status */
static int reap(child c, char *buf, size_t n) {
  size_t len = 0;
  for (ssize_t got; len + 1 < n && (got = read(c.out, buf + len, n - 1 - len)) > 0;)
    len += (size_t)got;
  buf[len] = 0;
  close(c.out);
  int st = 0;
  waitpid(c.pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static unsigned long stat_of(const char *out, const char *name) {
  char pat[64];
  snprintf(pat, sizeof pat, " %s=", name);
  const char *p = strstr(out, pat);
  return p ? strtoul(p + strlen(pat), NULL, 10) : 999;
}

static void test_16_processes(void **state) {
  (void)state;
  char *dir = fresh_dir();
  char envdir[4200];
  snprintf(envdir, sizeof envdir, "KILN_CACHE_DIR=%s", dir);
  const char *env[] = {envdir, "KILN_HOST_THREADS=2", NULL};
  int gate[2];
  assert_int_equal(pipe2(gate, O_CLOEXEC), 0);
  assert_int_equal(fcntl(gate[0], F_SETFD, 0), 0); /* only the read end reaches the children */
  enum { N = 16 };
  child c[N];
  for (int i = 0; i < N; i++) c[i] = spawn("prepare", env, gate[0]);
  close(gate[0]);
  close(gate[1]); /* the start gun: every child's read returns 0 now */
  unsigned long compiles = 0, hits = 0;
  for (int i = 0; i < N; i++) {
    char out[8192];
    int rc = reap(c[i], out, sizeof out);
    if (rc) fprintf(stderr, "child %d: exit %d\n%s", i, rc, out);
    assert_int_equal(rc, 0);
    compiles += stat_of(out, "compiles");
    hits += stat_of(out, "cache_hits");
  }
  assert_int_equal(compiles + hits, N);
  assert_true(compiles >= 1);
  int temps = -1;
  assert_int_equal(count_entries(dir, NULL, 0, &temps), 1);
  assert_int_equal(temps, 0);
  kn_cache_config cc = {.dir = dir};
  kn_cache *cache;
  assert_int_equal(kn_cache_open(&cc, &cache, NULL), KN_OK);
  kn_cache_report r;
  assert_int_equal(kn_cache_verify(cache, &r, NULL), KN_OK);
  assert_int_equal(r.entries, 1);
  assert_int_equal(r.valid, 1);
  kn_cache_close(cache);
  fprintf(stderr, "16 processes: %lu compiled, %lu loaded from the cache\n", compiles, hits);
  rm_dir(dir);
}

static void test_second_start(void **state) {
  (void)state;
  char *dir = fresh_dir();
  char envdir[4200];
  snprintf(envdir, sizeof envdir, "KILN_CACHE_DIR=%s", dir);
  const char *env[] = {envdir, "KILN_AUTOTUNE=1", "KILN_TUNE_SPACE=block_m=16,32;block_n=16",
                       "KILN_TUNE_PROGRESS=0", NULL};
  char out[16384];
  int gate[2];
  assert_int_equal(pipe(gate), 0);
  close(gate[1]); /* no gate: the children start at once */
  /* first start: tunes (2 candidates), stores the winner, loads it */
  assert_int_equal(reap(spawn("tune", env, gate[0]), out, sizeof out), 0);
  assert_int_equal(stat_of(out, "tunings"), 1);
  assert_int_equal(stat_of(out, "candidates"), 2);
  assert_int_equal(stat_of(out, "compiles"), 0);   /* the winner came from the tuner */
  assert_int_equal(stat_of(out, "cache_hits"), 1);
  /* second start: no tuning, no compiling: a tuning record, then a cache hit */
  assert_int_equal(reap(spawn("tune", env, gate[0]), out, sizeof out), 0);
  close(gate[0]);
  assert_int_equal(stat_of(out, "tunings"), 0);
  assert_int_equal(stat_of(out, "candidates"), 0);
  assert_int_equal(stat_of(out, "compiles"), 0);
  assert_int_equal(stat_of(out, "tuning_hits"), 1);
  assert_int_equal(stat_of(out, "cache_hits"), 1);
  assert_non_null(strstr(out, "info: cache hit: attn_fwd [dtype=f16;d=32;"));
  assert_non_null(strstr(out, "info: tuning record: fwd"));
  assert_null(strstr(out, "info: compiled"));
  assert_null(strstr(out, "info: tuning fwd"));
  rm_dir(dir);
}

static void test_tune_prune_record(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context_options o = {.cache_dir = dir, .progress = NULL, .device = "host"};
  setenv("KILN_TUNE_PROGRESS", "0", 1);
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&o, &ctx), KILN_OK);
  unsetenv("KILN_TUNE_PROGRESS");
  kiln_attn_desc d = DESC(KILN_F32, 32, 1, 1);
  kiln_prepare_options po = {.seqlen = 48, .tune_heads = 2, .tune_repeats = 3, .tune_warmup = 1,
                             .tune_space = "block_m=16,32;block_n=16,512"};
  kiln_tune_result r;
  assert_int_equal(kiln_tune(ctx, &d, &po, &r), KILN_OK);
  /* BLOCK_N 512 cannot compile: the space never offers it (2 of the 4 points) */
  assert_int_equal(r.ncandidates, 2);
  for (int i = 0; i < r.ncandidates; i++) assert_int_equal(r.candidates[i].block_n, 16);
  uint64_t tb16 = r.candidates[0].tile_bytes, tb32 = r.candidates[1].tile_bytes;
  assert_int_equal(r.candidates[0].block_m, 16);
  assert_int_equal(r.candidates[1].block_m, 32);
  assert_int_equal(r.candidates[0].state, KILN_CANDIDATE_TIMED);
  assert_int_equal(r.candidates[1].state, KILN_CANDIDATE_TIMED);
  assert_true(tb16 > 0 && tb32 > tb16);
  assert_true(r.recorded);
  kiln_tune_result_free(&r);

  /* a limit between the two: 32x16 is pruned by its reported tile storage */
  char space[128];
  snprintf(space, sizeof space, "block_m=16,32;block_n=16;max_tile_bytes=%llu",
           (unsigned long long)(tb16 + tb32) / 2);
  po.tune_space = space;
  assert_int_equal(kiln_tune(ctx, &d, &po, &r), KILN_OK);
  assert_int_equal(r.ncandidates, 2);
  assert_int_equal(r.candidates[0].state, KILN_CANDIDATE_TIMED);
  assert_int_equal(r.candidates[1].state, KILN_CANDIDATE_PRUNED);
  assert_non_null(strstr(r.candidates[1].note, "max_tile_bytes"));
  assert_int_equal(r.best, 0);
  kiln_tune_result_free(&r);
  kiln_context_destroy(ctx);

  /* the record says 16x16 now (kiln_tune replaces) */
  char path[4200];
  snprintf(path, sizeof path, "%s/tuning.sqlite3", dir);
  kn_tunedb *db;
  assert_int_equal(kn_tunedb_open(path, &db, NULL), KN_OK);
  kn_tune_record *recs;
  size_t n;
  assert_int_equal(kn_tunedb_list(db, &recs, &n, NULL), KN_OK);
  assert_int_equal(n, 1);
  assert_int_equal(recs[0].config.block_m, 16);
  assert_int_equal(recs[0].config.block_n, 16);
  assert_int_equal(recs[0].key.seq_bucket, 64);
  assert_string_equal(recs[0].key.variant, "dtype=f32;d=32;causal=1;lse=1;window=0;softcap=0;"
                                           "alibi=0;bias=0;doc=0;prefix=0;layout=0;mods=0");
  free(recs);
  kn_tunedb_close(db);
  rm_dir(dir);
}

/* ---- variants (docs/variants.md) ----
 *
 * Each built-in variant and the caller's own modifiers through kiln_prepare / kiln_forward,
 * against an independent float64 formula written here (not the modifier library's text, so a
 * wrong library modifier fails too), on fresh random inputs and ragged shapes.  The caller's
 * modifiers are also checked against kn_attn_reference_v (the interpreter evaluating their text
 * in double), which must agree with the formula to rounding. */

/* the caller's modifiers of the tests: a per-head temperature and a clamped relative-position
 * bias table (two tensors and a scalar) ... */
static const char score_mod_text[] =
    "// a per-head temperature and a relative-position bias table\n"
    "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, "
    "%head_scale: ptr<f32>, %rel_table: ptr<f32>, %max_dist: i32) -> (f32) {\n"
    "  %c1 = const 1 : i64\n"
    "  %h64 = cast %h : i64\n"
    "  %hs = load %head_scale[%h64] strides [%c1] : f32\n"
    "  %rel = sub %q_idx, %kv_idx : i32\n"
    "  %dist = abs %rel : i32\n"
    "  %d = min %dist, %max_dist : i32\n"
    "  %d64 = cast %d : i64\n"
    "  %tb = load %rel_table[%d64] strides [%c1] : f32\n"
    "  %scaled = mul %score, %hs : f32\n"
    "  %out = add %scaled, %tb : f32\n"
    "  return %out\n"
    "}\n";
/* ... a chunked causal mask with its block predicate (%chunk, an i32) ... */
static const char mask_mod_text[] = TEST_CHUNK_MASK_MOD;
/* ... and a score_mod whose only parameter is a kernel parameter (seqlen_k): no values to give */
static const char noparam_mod_text[] =
    "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, "
    "%seqlen_k: i32) -> (f32) {\n"
    "  %k = cast %kv_idx : f32\n"
    "  %n = cast %seqlen_k : f32\n"
    "  %frac = div %k, %n : f32\n"
    "  %out = sub %score, %frac : f32\n"
    "  return %out\n"
    "}\n";

enum { USER_NONE, USER_SCORE, USER_MASK, USER_NOPARAM };

typedef struct vcase {
  const char *name;
  kiln_attn_desc d;   /* the variant; mods is set from `user` */
  shape s;
  int wl, wr;         /* window */
  float cap;          /* softcap */
  int alibi_bh;       /* alibi: (B, H) slopes rather than one (H) vector */
  int bias_bcast;     /* bias: one (Nq, Nk) matrix for every head (head stride 0) */
  int ndocs;          /* document: segments per row */
  int user;
} vcase;

/* a case's variant values: the kernel's (public, kiln_attn_args) and the formula's */
typedef struct vdata {
  float *slopes;
  int64_t slope_sb;
  void *bias;           /* kernel dtype */
  double *biasd;        /* the same values */
  int64_t bias_st[3];
  int32_t *qseg, *kseg;
  int prefix;
  float head_scale[64], table[32];
  int max_dist, chunk;
  kiln_mod_arg margs[4];
  int nmargs;
} vdata;

static void vdata_make(const vcase *c, vdata *v, uint64_t *seed) {
  const shape *s = &c->s;
  const int B = s->batch, H = s->heads, Nq = s->seqlen_q, Nk = s->seqlen_k;
  kn_scalar t = internal_desc(&c->d).dtype;
  memset(v, 0, sizeof *v);
  if (c->d.alibi) {
    int n = c->alibi_bh ? B * H : H;
    v->slopes = malloc(sizeof *v->slopes * (size_t)n);
    for (int i = 0; i < n; i++)
      v->slopes[i] = (float)(0.02 + 0.5 * (double)(rng(seed) % 1000) / 1000);
    v->slope_sb = c->alibi_bh ? H : 0;
  }
  if (c->d.bias) {
    int64_t hs = c->bias_bcast ? 0 : (int64_t)Nq * Nk;
    v->bias_st[0] = c->bias_bcast ? (int64_t)Nq * Nk : H * hs, v->bias_st[1] = hs,
    v->bias_st[2] = Nk;
    size_t n = (size_t)(c->bias_bcast ? B : B * H) * Nq * Nk;
    v->bias = malloc(n * kn_scalar_size(t));
    v->biasd = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
      kn_store_elem(t, (char *)v->bias + i * kn_scalar_size(t), normal(seed));
      v->biasd[i] = kn_load_elem(t, (char *)v->bias + i * kn_scalar_size(t));
    }
  }
  if (c->d.document) {
    /* ndocs documents per row, cut at random places in q and in k independently (a document
     * may have no key: its queries see nothing) */
    v->qseg = malloc(sizeof *v->qseg * (size_t)B * Nq);
    v->kseg = malloc(sizeof *v->kseg * (size_t)B * Nk);
    for (int b = 0; b < B; b++)
      for (int w = 0; w < 2; w++) {
        int n = w ? Nk : Nq;
        int32_t *seg = (w ? v->kseg : v->qseg) + (size_t)b * n;
        for (int i = 0; i < n; i++) seg[i] = (int32_t)(rng(seed) % (uint64_t)c->ndocs);
        for (int i = 1; i < n; i++) /* sorted: non-decreasing ids */
          for (int j = i; j > 0 && seg[j - 1] > seg[j]; j--) {
            int32_t x = seg[j];
            seg[j] = seg[j - 1], seg[j - 1] = x;
          }
      }
  }
  if (c->d.prefix) v->prefix = (int)(rng(seed) % (uint64_t)(Nk + 1));
  if (c->user == USER_SCORE) {
    for (int h = 0; h < H; h++) v->head_scale[h] = (float)(0.25 + (double)(rng(seed) % 1000) / 500);
    for (int i = 0; i < 32; i++) v->table[i] = (float)normal(seed);
    v->max_dist = 5 + (int)(rng(seed) % 20);
    v->margs[v->nmargs++] = (kiln_mod_arg){.name = "max_dist", .kind = KILN_MOD_ARG_INT,
                                           .i = v->max_dist};
    v->margs[v->nmargs++] = (kiln_mod_arg){.name = "rel_table", .kind = KILN_MOD_ARG_PTR,
                                           .p = v->table, .bytes = sizeof v->table};
    v->margs[v->nmargs++] = (kiln_mod_arg){.name = "head_scale", .kind = KILN_MOD_ARG_PTR,
                                           .p = v->head_scale, .bytes = sizeof(float) * (size_t)H};
  }
  if (c->user == USER_MASK) {
    v->chunk = 7 + (int)(rng(seed) % 40);
    v->margs[v->nmargs++] =
        (kiln_mod_arg){.name = "chunk", .kind = KILN_MOD_ARG_INT, .i = v->chunk};
  }
}

static void vdata_free(vdata *v) {
  free(v->slopes), free(v->bias), free(v->biasd), free(v->qseg), free(v->kseg);
}

/* the variant's values as the caller passes them */
static void vdata_args(const vcase *c, const vdata *v, kiln_attn_args *a) {
  a->window_left = c->d.window ? c->wl : 0;
  a->window_right = c->d.window ? c->wr : 0;
  a->softcap = c->d.softcap ? c->cap : 0;
  a->alibi_slopes = v->slopes;
  a->alibi_stride = v->slope_sb;
  a->bias = v->bias;
  if (c->bias_bcast) memcpy(a->bias_stride, v->bias_st, sizeof a->bias_stride);
  a->q_seg = v->qseg;
  a->k_seg = v->kseg;
  a->prefix_len = v->prefix;
  a->mod_args = v->nmargs ? v->margs : NULL;
  a->n_mod_args = v->nmargs;
}

/* the formula: scores, modifiers in docs/variants.md's order, masks, softmax, in double */
static void variant_formula(const vcase *c, const vdata *v, const double *q, const double *k,
                            const double *vv, double *o, double *lse) {
  const shape *s = &c->s;
  const int B = s->batch, H = s->heads, HK = s->kv_heads, Nq = s->seqlen_q, Nk = s->seqlen_k;
  const int D = c->d.head_dim, off = Nk - Nq;
  const double scale = 1.0 / sqrt((double)D);
  double *sc = malloc(sizeof *sc * (size_t)Nk);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < Nq; i++) {
        const int hk = h / (H / HK);
        const double *qr = q + (((size_t)b * H + h) * Nq + i) * D;
        double mx = -INFINITY;
        for (int j = 0; j < Nk; j++) {
          const double *kr = k + (((size_t)b * HK + hk) * Nk + j) * D;
          double x = 0;
          for (int d = 0; d < D; d++) x += qr[d] * kr[d];
          x *= scale;
          if (c->d.softcap) x = c->cap * tanh(x / c->cap);
          if (c->d.alibi) x -= v->slopes[b * v->slope_sb + h] * fabs((double)(i + off - j));
          if (c->d.bias)
            x += v->biasd[b * v->bias_st[0] + h * v->bias_st[1] + i * v->bias_st[2] + j];
          if (c->user == USER_SCORE) {
            int dist = abs(i - j) < v->max_dist ? abs(i - j) : v->max_dist;
            x = x * v->head_scale[h] + v->table[dist];
          }
          if (c->user == USER_NOPARAM) x -= (double)j / Nk;
          bool live = true;
          if (c->d.causal == KILN_CAUSAL_BOTTOM_RIGHT) live &= j <= i + off;
          if (c->d.causal == KILN_CAUSAL_TOP_LEFT) live &= j <= i;
          if (c->d.window) {
            int rel = j - (i + off);
            live &= (c->wl < 0 || rel >= -c->wl) && (c->wr < 0 || rel <= c->wr);
          }
          if (c->d.document) live &= v->qseg[(size_t)b * Nq + i] == v->kseg[(size_t)b * Nk + j];
          if (c->d.prefix) live &= j < v->prefix || j <= i + off;
          if (c->user == USER_MASK) live &= j / v->chunk <= i / v->chunk;
          sc[j] = live ? x : -INFINITY;
          if (sc[j] > mx) mx = sc[j];
        }
        double *orow = o + (((size_t)b * H + h) * Nq + i) * D, sum = 0;
        for (int d = 0; d < D; d++) orow[d] = 0;
        if (mx == -INFINITY) {
          lse[((size_t)b * H + h) * Nq + i] = -INFINITY;
          continue;
        }
        for (int j = 0; j < Nk; j++) {
          double p = sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
          sum += p;
          for (int d = 0; d < D && p != 0; d++)
            orow[d] += p * vv[(((size_t)b * HK + hk) * Nk + j) * D + d];
        }
        for (int d = 0; d < D; d++) orow[d] /= sum;
        lse[((size_t)b * H + h) * Nq + i] = mx + log(sum);
      }
  free(sc);
}

static const char *user_text(int user) {
  return user == USER_SCORE ? score_mod_text : user == USER_MASK ? mask_mod_text
                            : user == USER_NOPARAM ? noparam_mod_text : NULL;
}

/* max |a - b| over n, with equal infinities 0 and NaN sticking */
static double max_err(const double *a, const double *b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) {
    double x = isinf(a[i]) && a[i] == b[i] ? 0 : fabs(a[i] - b[i]);
    if (!(x <= e)) e = x;
  }
  return e;
}

/* prepares c's kernel on ctx and runs it on fresh random inputs against the formula (and, for
 * the caller's modifiers, kn_attn_reference_v against the formula); 0 when within tolerance */
static int check_variant(kiln_context *ctx, const vcase *c, uint64_t seed) {
  kiln_attn_desc d = c->d;
  d.mods = user_text(c->user);
  d.has_lse = 1;
  kiln_kernel *k;
  if (kiln_prepare(ctx, &d, &no_tune, &k)) {
    fprintf(stderr, "%s: prepare: %s\n", c->name, kiln_last_error());
    return -1;
  }
  const shape *s = &c->s;
  kn_attn_desc id = internal_desc(&d);
  kn_scalar t = id.dtype;
  size_t es = kn_scalar_size(t), D = (size_t)d.head_dim;
  size_t nq = (size_t)s->batch * s->heads * s->seqlen_q * D;
  size_t nk = (size_t)s->batch * s->kv_heads * s->seqlen_k * D;
  size_t nl = (size_t)s->batch * s->heads * s->seqlen_q;
  char *q = malloc(nq * es), *kk = malloc(nk * es), *v = malloc(nk * es), *o = malloc(nq * es);
  float *lse = malloc(nl * sizeof(float));
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8), *od = malloc(nq * 8),
         *ld = malloc(nl * 8), *got = malloc(nq * 8), *gotl = malloc(nl * 8);
  struct { char *buf; double *x; size_t n; } in[3] = {{q, qd, nq}, {kk, kd, nk}, {v, vd, nk}};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < in[a].n; i++) {
      kn_store_elem(t, in[a].buf + i * es, normal(&seed));
      in[a].x[i] = kn_load_elem(t, in[a].buf + i * es);
    }
  memset(o, 0xff, nq * es); /* NaN: a row the kernel never writes fails */
  vdata vv;
  vdata_make(c, &vv, &seed);
  kiln_attn_args a = {.q = q, .k = kk, .v = v, .o = o, .lse = lse, .batch = s->batch,
                      .heads = s->heads, .kv_heads = s->kv_heads, .seqlen_q = s->seqlen_q,
                      .seqlen_k = s->seqlen_k};
  vdata_args(c, &vv, &a);
  int rc = 0;
  if (kiln_forward(k, &a, NULL)) {
    fprintf(stderr, "%s: forward: %s\n", c->name, kiln_last_error());
    rc = -1;
  } else {
    variant_formula(c, &vv, qd, kd, vd, od, ld);
    for (size_t i = 0; i < nq; i++) got[i] = kn_load_elem(t, o + i * es);
    for (size_t i = 0; i < nl; i++) gotl[i] = lse[i];
    double err = max_err(got, od, nq), lerr = max_err(gotl, ld, nl);
    bool ok = err <= kn_attn_tolerance(t) && lerr <= kn_attn_lse_tolerance(t);
    printf("  %s %s: max|dO| %.2e (tol %.0e), max|dlse| %.2e\n", ok ? "PASS" : "FAIL", c->name,
           err, kn_attn_tolerance(t), lerr);
    if (!ok) rc = -1;
    if (c->user) {
      /* the interpreter's float64 evaluation of the modifiers agrees with the formula */
      kn_attn_named_arg named[4];
      for (int i = 0; i < vv.nmargs; i++) {
        kn_argval x = {.i = vv.margs[i].i};
        if (vv.margs[i].kind == KILN_MOD_ARG_PTR) x.p = (void *)vv.margs[i].p;
        named[i] = (kn_attn_named_arg){vv.margs[i].name, x, vv.margs[i].bytes};
      }
      kn_attn_vargs va = {.window_left = c->wl, .window_right = c->wr, .softcap = c->cap,
                          .alibi_slopes = vv.slopes, .alibi_sb = vv.slope_sb, .bias = vv.bias,
                          .bias_sb = vv.bias_st[0], .bias_sh = vv.bias_st[1],
                          .bias_sm = vv.bias_st[2], .q_seg = vv.qseg, .k_seg = vv.kseg,
                          .q_seg_sb = s->seqlen_q, .k_seg_sb = s->seqlen_k,
                          .prefix_len = vv.prefix, .mods = named, .nmods = vv.nmargs};
      kn_attn_problem p = {.batch = s->batch, .heads = s->heads, .kv_heads = s->kv_heads,
                           .seqlen_q = s->seqlen_q, .seqlen_k = s->seqlen_k};
      kn_diag diag;
      if (kn_attn_reference_v(&id, NULL, &p, &va, qd, kd, vd, got, gotl, &diag)) {
        fprintf(stderr, "%s: kn_attn_reference_v: %s\n", c->name, diag.message);
        rc = -1;
      } else if (!(max_err(got, od, nq) <= 1e-9) || !(max_err(gotl, ld, nl) <= 1e-9)) {
        fprintf(stderr, "%s: kn_attn_reference_v and the formula differ by %g\n", c->name,
                max_err(got, od, nq));
        rc = -1;
      }
    }
  }
  vdata_free(&vv);
  free(q), free(kk), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od);
  free(ld), free(got), free(gotl);
  return rc;
}

#define VDESC(dt, hd, ...) {.dtype = dt, .head_dim = hd, __VA_ARGS__}
static const vcase variant_cases[] = {
    {.name = "causal top-left, Nq > Nk", .s = {2, 4, 2, 83, 61, 0},
     .d = VDESC(KILN_F16, 64, .causal = KILN_CAUSAL_TOP_LEFT)},
    {.name = "causal top-left, Nq < Nk", .s = {1, 2, 1, 45, 130, 0},
     .d = VDESC(KILN_F32, 32, .causal = KILN_CAUSAL_TOP_LEFT)},
    {.name = "window (24, 0) + causal", .s = {1, 3, 1, 150, 170, 0},
     .d = VDESC(KILN_F16, 64, .window = 1, .causal = 1), .wl = 24, .wr = 0},
    {.name = "window (5, 9)", .s = {2, 2, 2, 97, 64, 0}, .d = VDESC(KILN_F32, 32, .window = 1),
     .wl = 5, .wr = 9},
    {.name = "window (-1, 3)", .s = {1, 2, 2, 40, 77, 0}, .d = VDESC(KILN_BF16, 32, .window = 1),
     .wl = -1, .wr = 3},
    {.name = "softcap 5", .s = {1, 2, 1, 50, 90, 0}, .d = VDESC(KILN_F32, 64, .softcap = 1),
     .cap = 5},
    {.name = "alibi (H) slopes, causal", .s = {2, 4, 4, 66, 66, 0},
     .d = VDESC(KILN_F16, 32, .alibi = 1, .causal = 1)},
    {.name = "alibi (B, H) slopes, GQA", .s = {2, 4, 2, 33, 71, 0},
     .d = VDESC(KILN_F32, 32, .alibi = 1), .alibi_bh = 1},
    {.name = "bias", .s = {2, 2, 1, 37, 45, 0}, .d = VDESC(KILN_F16, 64, .bias = 1)},
    {.name = "bias broadcast over heads", .s = {2, 3, 3, 20, 64, 0},
     .d = VDESC(KILN_BF16, 32, .bias = 1), .bias_bcast = 1},
    {.name = "document, 4 documents", .s = {2, 2, 1, 130, 110, 0},
     .d = VDESC(KILN_F16, 32, .document = 1), .ndocs = 4},
    {.name = "document + causal", .s = {1, 2, 2, 96, 96, 0},
     .d = VDESC(KILN_F32, 32, .document = 1, .causal = 1), .ndocs = 3},
    {.name = "prefix", .s = {2, 2, 2, 77, 90, 0}, .d = VDESC(KILN_F16, 64, .prefix = 1)},
    {.name = "window + softcap + alibi + bias + document", .s = {1, 2, 1, 70, 85, 0},
     .d = VDESC(KILN_F32, 32, .window = 1, .softcap = 1, .alibi = 1, .bias = 1, .document = 1),
     .wl = 30, .wr = 6, .cap = 8, .ndocs = 3},
    {.name = "score_mod: head scale tensor + relative bias table", .s = {2, 4, 2, 75, 90, 0},
     .d = VDESC(KILN_F16, 64, .causal = 1), .user = USER_SCORE},
    {.name = "mask_mod + block_mask: chunked causal", .s = {1, 2, 1, 140, 150, 0},
     .d = VDESC(KILN_F32, 32), .user = USER_MASK},
    {.name = "score_mod on seqlen_k + softcap", .s = {1, 2, 2, 30, 45, 0},
     .d = VDESC(KILN_BF16, 32, .softcap = 1), .cap = 20, .user = USER_NOPARAM},
};
enum { NVCASES = sizeof variant_cases / sizeof variant_cases[0] };

static void test_variants(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir, NULL, KILN_TUNE_NONE);
  const char *e = getenv("KILN_TEST_SEED");
  uint64_t seed = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
  printf("  variants: seed %llu (KILN_TEST_SEED replays)\n", (unsigned long long)seed);
  int failures = 0;
  for (int i = 0; i < NVCASES; i++)
    failures += check_variant(ctx, &variant_cases[i], seed + 7919 * (uint64_t)i) != 0;
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, NVCASES);
  kiln_context_destroy(ctx);
  rm_dir(dir);
  assert_int_equal(failures, 0);
}

/* prepare's and forward's errors for variants: each a status and a message that names it */
static void test_variant_errors(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir, NULL, KILN_TUNE_NONE);
  kiln_kernel *k = NULL;
  /* descriptors */
  kiln_attn_desc d = {.dtype = KILN_F16, .head_dim = 32, .causal = 3};
  EXPECT(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_INVALID, "causal 3");
  d = (kiln_attn_desc){.dtype = KILN_F16, .head_dim = 32, .causal = 1, .prefix = 1};
  EXPECT(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_INVALID, "prefix");
  /* a malformed text: the parser's file:line:col, under the caller's name for the text */
  d = (kiln_attn_desc){.dtype = KILN_F16, .head_dim = 32,
                       .mods = "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, "
                               "%kv_idx: i32) -> (f32) {\n  %x = fooo %score : f32\n"
                               "  return %x\n}\n",
                       .mods_name = "my_mods.tile"};
  EXPECT(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_INVALID, "my_mods.tile:2:");
  d.mods_name = NULL;
  EXPECT(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_INVALID, "<mods>:2:");
  /* a verifier error (a type mismatch) and a modifier of the wrong signature, also located */
  d.mods = "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32) -> (f32) "
           "{\n  %x = add %score, %b : f32\n  return %x\n}\n";
  EXPECT(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_INVALID, "<mods>:2:");
  d.mods = "func @mask_mod(%b: i32, %h: i32, %q_idx: i32) -> (i1) {\n"
           "  %x = cmp le %b, %h : i1\n  return %x\n}\n";
  EXPECT(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_INVALID, "@mask_mod");
  d.mods = "func @helper(%x: i32) -> (i32) {\n  return %x\n}\n";
  EXPECT(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_INVALID, "defines none of");
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);

  /* forward: values for variants the kernel was not prepared with */
  char buf[4096] = {0};
  kiln_attn_desc plain = {.dtype = KILN_F32, .head_dim = 32};
  assert_int_equal(kiln_prepare(ctx, &plain, NULL, &k), KILN_OK);
  kiln_attn_args a0 = {.q = buf, .k = buf, .v = buf, .o = buf, .batch = 1, .heads = 1,
                       .kv_heads = 1, .seqlen_q = 4, .seqlen_k = 4};
  kiln_attn_args a = a0;
  a.window_left = 16;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "window");
  a = a0, a.softcap = 30;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "softcap");
  float slopes[4] = {1, 1, 1, 1};
  a = a0, a.alibi_slopes = slopes;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "alibi");
  a = a0, a.prefix_len = 2;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "prefix");
  kiln_mod_arg one = {.name = "chunk", .kind = KILN_MOD_ARG_INT, .i = 4};
  a = a0, a.mod_args = &one, a.n_mod_args = 1;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "take no parameters");
  a = a0;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_OK);

  /* a NULL tensor of the kernel's variant, bad values */
  kiln_attn_desc al = {.dtype = KILN_F32, .head_dim = 32, .alibi = 1, .softcap = 1,
                       .window = 1};
  assert_int_equal(kiln_prepare(ctx, &al, NULL, &k), KILN_OK);
  a = a0, a.softcap = 30;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "alibi_slopes");
  a.alibi_slopes = slopes;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_OK);
  a.softcap = 0;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "softcap");
  a.softcap = 30, a.window_left = -2;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "window");

  /* the caller's modifier parameters: missing, unknown, of the wrong kind, given twice */
  kiln_attn_desc um = {.dtype = KILN_F32, .head_dim = 32, .mods = mask_mod_text};
  assert_int_equal(kiln_prepare(ctx, &um, NULL, &k), KILN_OK);
  a = a0;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "%chunk (i32) has no value");
  kiln_mod_arg two[2] = {{.name = "chunck", .kind = KILN_MOD_ARG_INT, .i = 4}, one};
  a.mod_args = two, a.n_mod_args = 1;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "'chunck' is not a parameter");
  two[0] = (kiln_mod_arg){.name = "chunk", .kind = KILN_MOD_ARG_FLOAT, .f = 4};
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "KILN_MOD_ARG_INT");
  two[0] = (kiln_mod_arg){.name = "chunk", .kind = KILN_MOD_ARG_INT, .i = (int64_t)1 << 40};
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "out of its range");
  two[0] = one, a.n_mod_args = 2;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "given twice");
  a.n_mod_args = 1;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_OK);
  kiln_attn_desc sm = {.dtype = KILN_F32, .head_dim = 32, .mods = score_mod_text};
  assert_int_equal(kiln_prepare(ctx, &sm, NULL, &k), KILN_OK);
  float table[32] = {0}, hs[1] = {1};
  kiln_mod_arg three[3] = {{.name = "max_dist", .kind = KILN_MOD_ARG_INT, .i = 3},
                           {.name = "rel_table", .kind = KILN_MOD_ARG_PTR, .p = table},
                           {.name = "head_scale", .kind = KILN_MOD_ARG_PTR, .p = NULL}};
  a = a0, a.mod_args = three, a.n_mod_args = 3;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "%head_scale (ptr<f32>) is NULL");
  three[2].p = hs;
  three[1].kind = KILN_MOD_ARG_INT;
  EXPECT(kiln_forward(k, &a, NULL), KILN_ERR_INVALID, "KILN_MOD_ARG_PTR");
  three[1].kind = KILN_MOD_ARG_PTR;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_OK);
#undef EXPECT
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* the keys: one kernel per variant and per modifier text (whatever buffer holds it, whatever the
 * caller calls it); the kernel keeps its own copy of the text */
static void test_variant_keys(void **state) {
  (void)state;
  char *dir = fresh_dir();
  logcap l;
  logcap_init(&l);
  kiln_context *ctx = make_ctx(dir, &l, KILN_TUNE_NONE);
  const kiln_attn_desc base = {.dtype = KILN_F32, .head_dim = 32};
  kiln_attn_desc ds[9];
  for (int i = 0; i < 9; i++) ds[i] = base;
  ds[1].causal = KILN_CAUSAL_BOTTOM_RIGHT, ds[2].causal = KILN_CAUSAL_TOP_LEFT;
  ds[3].window = 1, ds[4].softcap = 1, ds[5].alibi = 1, ds[6].bias = 1, ds[7].document = 1;
  ds[8].prefix = 1;
  kiln_kernel *k[12];
  kiln_kernel_info info[12];
  for (int i = 0; i < 9; i++) {
    if (kiln_prepare(ctx, &ds[i], NULL, &k[i])) fail_msg("%d: %s", i, kiln_last_error());
    assert_int_equal(kiln_kernel_get_info(k[i], &info[i]), KILN_OK);
  }
  /* two texts that differ in one character, and the first again from another buffer */
  char *t1 = strdup(noparam_mod_text), *t2 = strdup(noparam_mod_text);
  char *at = strstr(t2, "sub %score");
  memcpy(at, "add", 3);
  kiln_attn_desc u1 = {.dtype = KILN_F32, .head_dim = 32, .mods = t1, .mods_name = "a.tile"};
  kiln_attn_desc u2 = {.dtype = KILN_F32, .head_dim = 32, .mods = t2};
  assert_int_equal(kiln_prepare(ctx, &u1, NULL, &k[9]), KILN_OK);
  assert_int_equal(kiln_prepare(ctx, &u2, NULL, &k[10]), KILN_OK);
  free(t1);
  char *t3 = strdup(noparam_mod_text);
  kiln_attn_desc u3 = {.dtype = KILN_F32, .head_dim = 32, .mods = t3, .mods_name = "b.tile"};
  assert_int_equal(kiln_prepare(ctx, &u3, NULL, &k[11]), KILN_OK);
  assert_ptr_equal(k[11], k[9]); /* the same text: the same kernel */
  for (int i = 9; i < 11; i++) assert_int_equal(kiln_kernel_get_info(k[i], &info[i]), KILN_OK);
  for (int i = 0; i < 11; i++)
    for (int j = 0; j < i; j++) {
      assert_ptr_not_equal(k[i], k[j]);
      assert_string_not_equal(info[i].cache_key, info[j].cache_key);
    }
  /* the kernel's descriptor holds its own copy of the text */
  assert_non_null(info[9].desc.mods);
  assert_ptr_not_equal(info[9].desc.mods, u1.mods);
  assert_string_equal(info[9].desc.mods, noparam_mod_text);
  assert_int_equal(info[3].desc.window, 1);
  assert_int_equal(info[2].desc.causal, KILN_CAUSAL_TOP_LEFT);
  assert_null(info[0].desc.mods);
  free(t2), free(t3);
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 11);
  assert_int_equal(st.memo_hits, 1);
  assert_non_null(strstr(l.text, "causal=2;lse=0;window=0"));
  assert_non_null(strstr(l.text, "prefix=1;layout=0;mods=0]"));
  kiln_context_destroy(ctx);

  /* a second context: every variant loads from the cache under its own key */
  ctx = make_ctx(dir, NULL, KILN_TUNE_NONE);
  kiln_kernel *k2;
  for (int i = 0; i < 9; i++) {
    assert_int_equal(kiln_prepare(ctx, &ds[i], NULL, &k2), KILN_OK);
    kiln_kernel_info i2;
    assert_int_equal(kiln_kernel_get_info(k2, &i2), KILN_OK);
    assert_string_equal(i2.cache_key, info[i].cache_key);
  }
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.cache_hits, 9);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* tuning variants on the host: each variant is its own record; the caller's modifier
 * parameters come from tune_mod_args, and without them tuning is refused with the reason */
static void test_tune_variants(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context_options o = {.cache_dir = dir, .device = "host"};
  setenv("KILN_TUNE_PROGRESS", "0", 1);
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&o, &ctx), KILN_OK);
  unsetenv("KILN_TUNE_PROGRESS");
  kiln_prepare_options po = {.seqlen = 40, .tune_heads = 2, .tune_repeats = 2, .tune_warmup = 1,
                             .tune_space = "block_m=16,32;block_n=16"};
  const kiln_attn_desc dw = {.dtype = KILN_F32, .head_dim = 32, .window = 1, .causal = 1,
                             .alibi = 1, .document = 1, .bias = 1, .softcap = 1};
  const kiln_attn_desc dp = {.dtype = KILN_F32, .head_dim = 32, .prefix = 1};
  const kiln_attn_desc dn = {.dtype = KILN_F32, .head_dim = 32, .mods = noparam_mod_text};
  const kiln_attn_desc du = {.dtype = KILN_F32, .head_dim = 32, .mods = score_mod_text};
  kiln_tune_result r;
  const kiln_attn_desc *ok[] = {&dw, &dp, &dn};
  for (int i = 0; i < 3; i++) {
    if (kiln_tune(ctx, ok[i], &po, &r)) fail_msg("tune %d: %s", i, kiln_last_error());
    assert_int_equal(r.ncandidates, 2);
    for (int c = 0; c < 2; c++)
      if (r.candidates[c].state != KILN_CANDIDATE_TIMED)
        fail_msg("tune %d, candidate %d: state %d (%s)", i, c, r.candidates[c].state,
                 r.candidates[c].note);
    assert_true(r.recorded);
    kiln_tune_result_free(&r);
  }
  /* the caller's parameters: refused without values, tuned with them */
  assert_int_equal(kiln_tune(ctx, &du, &po, &r), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "tune_mod_args"));
  float hs[2] = {0.5f, 1.5f}, table[32];
  for (int i = 0; i < 32; i++) table[i] = (float)(i % 5) * 0.25f;
  kiln_mod_arg margs[3] = {
      {.name = "head_scale", .kind = KILN_MOD_ARG_PTR, .p = hs, .bytes = sizeof hs},
      {.name = "rel_table", .kind = KILN_MOD_ARG_PTR, .p = table, .bytes = sizeof table},
      {.name = "max_dist", .kind = KILN_MOD_ARG_INT, .i = 31}};
  po.tune_mod_args = margs;
  po.tune_n_mod_args = 3;
  margs[1].bytes = 0;
  assert_int_equal(kiln_tune(ctx, &du, &po, &r), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "rel_table"));
  margs[1].bytes = 16; /* too small for a distance of up to 31: the reference says so */
  assert_int_equal(kiln_tune(ctx, &du, &po, &r), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "reference"));
  margs[1].bytes = sizeof table;
  if (kiln_tune(ctx, &du, &po, &r)) fail_msg("tune: %s", kiln_last_error());
  for (int c = 0; c < r.ncandidates; c++)
    assert_int_equal(r.candidates[c].state, KILN_CANDIDATE_TIMED);
  kiln_tune_result_free(&r);

  /* four records, one per variant; a prepare of one uses its record */
  kiln_cache_listing li;
  assert_int_equal(kiln_cache_list(ctx, &li), KILN_OK);
  assert_int_equal(li.nrecords, 4);
  int windows = 0, mods = 0;
  for (size_t i = 0; i < li.nrecords; i++) {
    windows += strstr(li.records[i].variant, "window=1;softcap=1;alibi=1;bias=1;doc=1") != NULL;
    mods += strstr(li.records[i].variant, ";mods=0") == NULL;
  }
  assert_int_equal(windows, 1);
  assert_int_equal(mods, 2);
  kiln_cache_listing_free(&li);
  kiln_kernel *k;
  kiln_prepare_options cached = {.seqlen = 40, .tune_policy = KILN_TUNE_CACHED};
  assert_int_equal(kiln_prepare(ctx, &dp, &cached, &k), KILN_OK);
  kiln_kernel_info info;
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_true(info.tuned);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* ---- threads ---- */

enum { NTHREADS = 32, NDESC = 4 };
static const kiln_attn_desc thread_desc[NDESC] = {
    DESC(KILN_F16, 32, 1, 1),
    DESC(KILN_BF16, 32, 0, 0),
    DESC(KILN_F32, 32, 1, 0),
    DESC(KILN_F16, 64, 0, 1)};

typedef struct thread_arg {
  kiln_context *ctx;
  int index;
  int failed;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  const kiln_attn_desc *d = &thread_desc[a->index % NDESC];
  for (int round = 0; round < 2; round++) {
    kiln_kernel *k = NULL;
    if (kiln_prepare(a->ctx, d, &no_tune, &k)) {
      fprintf(stderr, "thread %d: prepare: %s\n", a->index, kiln_last_error());
      a->failed = 1;
      return NULL;
    }
    shape s = {1, 2, 1, 19 + a->index, 23 + 2 * a->index, a->index & 1};
    if (check_forward(k, d, s, (uint64_t)a->index * 100 + round)) a->failed = 1;
  }
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  char *dir = fresh_dir();
  logcap l;
  logcap_init(&l);
  kiln_context *ctx = make_ctx(dir, &l, KILN_TUNE_NONE);
  pthread_t th[NTHREADS];
  thread_arg args[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    args[i] = (thread_arg){ctx, i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &args[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(args[i].failed, 0);
  }
  kiln_stats s;
  kiln_context_stats(ctx, &s);
  assert_int_equal(s.compiles, NDESC); /* each kernel compiled once */
  assert_int_equal(s.prepares, 2 * NTHREADS);
  assert_int_equal(s.launches, 2 * NTHREADS);
  assert_int_equal(l.count[KILN_LOG_WARN], 0);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* ---- child mode ---- */

static int child_main(const char *mode, int gate) {
  char c;
  while (read(gate, &c, 1) > 0) { /* wait for the start gun */
  }
  logcap l;
  logcap_init(&l);
  kiln_context_options o = {.log = capture, .log_user = &l, .device = "host"};
  kiln_context *ctx;
  if (kiln_context_create(&o, &ctx)) {
    printf("context: %s\n", kiln_last_error());
    return 2;
  }
  kiln_attn_desc d = desc_a;
  kiln_prepare_options po = {0};
  shape s = small;
  if (!strcmp(mode, "tune")) {
    d = (kiln_attn_desc)DESC(KILN_F16, 32, 1, 0);
    po = (kiln_prepare_options){.seqlen = 40, .tune_heads = 2, .tune_repeats = 3,
                                .tune_warmup = 1};
    s = (shape){1, 2, 2, 40, 40, 0};
  }
  kiln_kernel *k;
  int rc = 0;
  if (kiln_prepare(ctx, &d, &po, &k)) {
    printf("prepare: %s\n", kiln_last_error());
    rc = 1;
  } else if (check_forward(k, &d, s, 11)) {
    rc = 1;
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  printf("%s", l.text);
  printf("stats compiles=%lu cache_hits=%lu tunings=%lu candidates=%lu tuning_hits=%lu "
         "corrupt=%lu warnings=%d\n",
         (unsigned long)st.compiles, (unsigned long)st.cache_hits, (unsigned long)st.tunings,
         (unsigned long)st.candidates, (unsigned long)st.tuning_hits,
         (unsigned long)st.corrupt_entries, l.count[KILN_LOG_WARN]);
  if (l.count[KILN_LOG_WARN]) rc = 1;
  kiln_context_destroy(ctx);
  return rc;
}

int main(int argc, char **argv) {
  self_path = argv[0];
  if (argc == 4 && !strcmp(argv[1], "--child")) return child_main(argv[2], atoi(argv[3]));
  if (argc == 3 && !strcmp(argv[1], "--filter")) cmocka_set_test_filter(argv[2]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_prepare_forward),   cmocka_unit_test(test_errors),
      cmocka_unit_test(test_corrupt_flip),      cmocka_unit_test(test_corrupt_truncate),
      cmocka_unit_test(test_corrupt_payload),   cmocka_unit_test(test_readonly_cache),
      cmocka_unit_test(test_full_disk),         cmocka_unit_test(test_small_tmpfs),
      cmocka_unit_test(test_insecure_dir),
      cmocka_unit_test(test_16_processes),      cmocka_unit_test(test_second_start),
      cmocka_unit_test(test_tune_prune_record), cmocka_unit_test(test_threads),
      cmocka_unit_test(test_variants),          cmocka_unit_test(test_variant_errors),
      cmocka_unit_test(test_variant_keys),      cmocka_unit_test(test_tune_variants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
