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
#include <unistd.h>

#include "api.h"
#include "attention.h"
#include "cache.h"
#include "kiln.h"
#include "numeric.h"
#include "tunedb.h"

static const char *self_path;

/* ---- helpers ---- */

static char *fresh_dir(void) {
  const char *base = getenv("TMPDIR");
  char *p = malloc(4096);
  snprintf(p, 4096, "%s/kiln-api-XXXXXX", base && *base ? base : "/tmp");
  assert_non_null(mkdtemp(p));
  return p;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  chmod(p, 0700);
  return remove(p);
}

static void rm_dir(char *p) {
  chmod(p, 0700);
  nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(p);
}

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

static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double normal(uint64_t *s) {
  double u1 = ((double)(rng(s) >> 11) + 0.5) * 0x1p-53, u2 = (double)(rng(s) >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

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
    kn_attn_problem p = {s.batch, s.heads, s.kv_heads, s.seqlen_q, s.seqlen_k, 0};
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
static const kiln_attn_desc desc_a = {KILN_F16, 64, 1, 1};
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
  assert_non_null(strstr(l.text, "compiled: attn_fwd [dtype=f16;d=64;causal=1;lse=1]"));
  /* a forced tiling, f32 without lse, ragged */
  kiln_attn_desc d32 = {KILN_F32, 32, 0, 0};
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
  assert_non_null(strstr(l2.text, "cache hit: attn_fwd [dtype=f16;d=64;causal=1;lse=1]"));
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

static void test_errors(void **state) {
  (void)state;
  char *dir = fresh_dir();
  kiln_context *ctx = make_ctx(dir, NULL, KILN_TUNE_NONE);
  kiln_kernel *k = NULL;
  kiln_attn_desc bad = {KILN_F16, 600, 0, 0};
  assert_int_equal(kiln_prepare(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "head dim 600"));
  bad = (kiln_attn_desc){(kiln_dtype)42, 64, 0, 0};
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
  kiln_context_destroy(ctx);
  kiln_context_options o = {.device = "gfx942", .no_cache = 1};
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
  kiln_attn_desc d2 = {KILN_BF16, 32, 0, 0};
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
  kiln_attn_desc d = {KILN_F32, 32, 1, 1};
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
  assert_string_equal(recs[0].key.variant, "dtype=f32;d=32;causal=1;lse=1");
  free(recs);
  kn_tunedb_close(db);
  rm_dir(dir);
}

/* ---- threads ---- */

enum { NTHREADS = 32, NDESC = 4 };
static const kiln_attn_desc thread_desc[NDESC] = {
    {KILN_F16, 32, 1, 1}, {KILN_BF16, 32, 0, 0}, {KILN_F32, 32, 1, 0}, {KILN_F16, 64, 0, 1}};

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
    d = (kiln_attn_desc){KILN_F16, 32, 1, 0};
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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
