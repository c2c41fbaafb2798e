/* test_attention.c — the attention forward template against the naive float64 reference.
 *
 * Every case builds the kernel with kn_attn_fwd_build(), verifies it, runs it with the reference
 * interpreter over its grid on fresh N(0,1) inputs rounded to the dtype, and compares O (and lse)
 * with kn_attn_reference() computed in double from the same rounded inputs; the bound is
 * kn_attn_tolerance(dtype).  Inputs are random on every run: the seed of each case is printed when
 * it fails, and KILN_TEST_SEED=<n> replays a run.  Also checked: causal KV-block skipping (dot
 * count = 2 x visited-and-needed blocks, by brute force), ragged sizes with small blocks,
 * kn_attn_check's rejections, that a wrong kernel is caught (the test can fail), the golden
 * printed form in tests/golden/attn_fwd_*.tile, and head dims that are not multiples of 16
 * (the padded head tile) on the interpreter and on the host target, with gaps between rows.
 *
 * Runtime is dominated by the (1000, 1000) cases (batch 1, 2 query heads on 1 kv head): about 4 s
 * in all on one core with the interpreter's f32 dot fast path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "interp.h"
#include "numeric.h"
#include "pipeline.h"

/* ---- random inputs ------------------------------------------------------------------------------ */

static uint64_t seed_base;   /* from KILN_TEST_SEED or the clock; case seeds count up from it */
static uint64_t seed_count;

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) { return ((splitmix(s) >> 11) + 0.5) * 0x1p-53; }

static double normal(uint64_t *s) {  /* Box-Muller; one of the pair is enough here */
  double u = uniform01(s), v = uniform01(s);
  return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* ---- one case ---------------------------------------------------------------------------------- */

typedef struct result {
  double err_o, err_lse;  /* max abs error (inf if a value is NaN or a -inf lse disagrees) */
  uint64_t dots;          /* dot ops executed */
  uint64_t seed;
} result;

/* a buffer of n elements of dtype t, filled with N(0,1) rounded to t; the rounded values also
 * go to *dbl (n doubles) */
static void *random_buffer(kn_scalar t, size_t n, uint64_t *rng, double **dbl) {
  size_t sz = kn_scalar_size(t);
  unsigned char *raw = malloc(sz * (n ? n : 1));
  double *d = malloc(sizeof *d * (n ? n : 1));
  assert_non_null(raw);
  assert_non_null(d);
  for (size_t i = 0; i < n; i++) {
    kn_store_elem(t, raw + i * sz, normal(rng));
    d[i] = kn_load_elem(t, raw + i * sz);
  }
  *dbl = d;
  return raw;
}

static double abs_err(double got, double want) {
  if (isinf(want) || isinf(got)) return got == want ? 0 : INFINITY;
  double e = fabs(got - want);
  return e == e ? e : INFINITY;  /* NaN counts as infinitely wrong */
}

/* Where run_case runs the kernel, and how its rows lie in memory.  on_host: compiled for the
 * host target with check_bounds (every access checked against the five buffers) instead of the
 * interpreter.  row_gap: the rows of q, k, v and o are head_dim + row_gap elements apart (the
 * caller's row strides), the gaps filled with NaN: a kernel that reads past head_dim gets NaN
 * into its dots, one that writes past it is caught by the gap check. */
static bool on_host;
static int row_gap;

/* the n rows of d elements of src (contiguous) at a stride of d + gap, the gaps NaN */
static void *spread_rows(kn_scalar t, const void *src, size_t n, int d, int gap) {
  size_t sz = kn_scalar_size(t), st = (size_t)(d + gap);
  unsigned char *r = malloc(sz * (n * st > 0 ? n * st : 1));
  assert_non_null(r);
  for (size_t i = 0; i < n * st; i++) kn_store_elem(t, r + i * sz, NAN);
  for (size_t i = 0; i < n; i++) memcpy(r + i * st * sz, (const char *)src + i * d * sz, d * sz);
  return r;
}

/* Builds, verifies and runs the kernel for (desc, cfg) on problem p with fresh inputs, and
 * compares with the reference computed with causal = desc->causal ^ flip_ref_causal. */
static void run_case(const kn_attn_desc *desc, const kn_attn_config *cfg, const kn_attn_problem *p,
                     bool flip_ref_causal, result *res) {
  const kn_scalar dt = desc->dtype;
  const int D = desc->head_dim, S = D + row_gap;                      /* S: the row stride */
  const size_t rq = (size_t)p->batch * p->heads * p->seqlen_q;         /* rows of q and o */
  const size_t rk = (size_t)p->batch * p->kv_heads * p->seqlen_k;      /* rows of k and v */
  const size_t nq = rq * D, nk = rk * D;                               /* (B, H, Nq, D) ... */
  const size_t nl = (size_t)p->batch * p->heads * p->seqlen_q;         /* (B, H, Nq) */
  const size_t sz = kn_scalar_size(dt);
  uint64_t seed = seed_base + seed_count++, rng = seed;
  res->seed = seed;

  double *qd, *kd, *vd;
  void *q = random_buffer(dt, nq, &rng, &qd);
  void *k = random_buffer(dt, nk, &rng, &kd);
  void *v = random_buffer(dt, nk, &rng, &vd);
  if (row_gap) {
    void *t;
    t = spread_rows(dt, q, rq, D, row_gap), free(q), q = t;
    t = spread_rows(dt, k, rk, D, row_gap), free(k), k = t;
    t = spread_rows(dt, v, rk, D, row_gap), free(v), v = t;
  }
  unsigned char *o = malloc(sz * (rq * S > 0 ? rq * S : 1));              /* (B, H, Nq, S) */
  float *lse = malloc(sizeof *lse * (nl ? nl : 1));                    /* (B, H, Nq) */
  double *od = malloc(sizeof *od * (nq ? nq : 1));
  double *lsed = malloc(sizeof *lsed * (nl ? nl : 1));
  assert_non_null(o), assert_non_null(lse), assert_non_null(od), assert_non_null(lsed);
  /* NaN everywhere, so an element the kernel forgets to write fails the comparison */
  for (size_t i = 0; i < rq * S; i++) kn_store_elem(dt, o + i * sz, NAN);
  for (size_t i = 0; i < nl; i++) lse[i] = NAN;

  kn_module *m = kn_module_new(NULL);
  kn_diag diag;
  kn_func *f = kn_attn_fwd_build(m, desc, cfg, &diag);
  if (!f) fail_msg("build: %s", diag.rendered);
  if (kn_verify(m, &diag) != 0) fail_msg("verify: %s", diag.rendered);

  kn_argval args[KN_ATTN_NPARAMS];
  int grid[3];
  kn_attn_fill_args(desc, NULL, cfg, p, q, k, v, o, desc->has_lse ? lse : NULL, NULL, args, grid,
                    NULL);
  /* the strides of q, k, v, o (parameters 10..21: batch, head, row each) for rows S apart */
  for (int i = 0; i < 4; i++) {
    int64_t n = i == 0 || i == 3 ? p->seqlen_q : p->seqlen_k;
    int64_t h = i == 0 || i == 3 ? p->heads : p->kv_heads;
    args[10 + 3 * i].i = h * n * S, args[11 + 3 * i].i = n * S, args[12 + 3 * i].i = S;
  }
  kn_region regions[5] = {{q, sz * rq * S}, {k, sz * rk * S}, {v, sz * rk * S},
                          {o, sz * rq * S}, {lse, sizeof *lse * nl}};
  kn_interp_stats stats;
  memset(&stats, 0, sizeof stats);
  if (on_host) {
    /* one compile per (descriptor, config): the last one is kept for the next case */
    static kn_kernel *kern;
    static kn_attn_desc kdesc;
    static kn_attn_config kcfg;
    if (!kern || memcmp(&kdesc, desc, sizeof kdesc) || memcmp(&kcfg, cfg, sizeof kcfg)) {
      kn_kernel_free(kern);
      kern = NULL;
      kn_compile_options co = {.check_bounds = true};
      if (kn_compile(m, "attn_fwd", kn_host_target(), &co, &kern, &diag))
        fail_msg("host compile: %s", diag.rendered);
      kdesc = *desc, kcfg = *cfg;
    }
    if (kn_kernel_run_host_checked(kern, args, grid, regions, 5, &diag))
      fail_msg("host run (seed %llu): %s", (unsigned long long)seed, diag.rendered);
  } else if (kn_interp_run(f, args, grid, regions, 5, &stats, &diag) != 0) {
    fail_msg("interp (seed %llu): %s", (unsigned long long)seed, diag.rendered);
  }
  res->dots = stats.ops[KN_OP_DOT];

  kn_attn_desc ref_desc = *desc;
  ref_desc.causal = desc->causal ^ flip_ref_causal;
  kn_attn_reference(&ref_desc, p, qd, kd, vd, od, lsed);
  res->err_o = 0;
  for (size_t i = 0; i < nq; i++) {
    double e = abs_err(kn_load_elem(dt, o + (i / D * S + i % D) * sz), od[i]);
    if (e > res->err_o) res->err_o = e;
  }
  /* the gaps are as they were: nothing was written past head_dim */
  for (size_t i = 0; i < rq * S; i++)
    if ((int)(i % S) >= D && !isnan(kn_load_elem(dt, o + i * sz))) res->err_o = INFINITY;
  res->err_lse = 0;
  if (desc->has_lse)
    for (size_t i = 0; i < nl; i++) {
      double e = abs_err(lse[i], lsed[i]);
      if (e > res->err_lse) res->err_lse = e;
    }

  kn_module_free(m);
  free(q), free(k), free(v), free(o), free(lse);
  free(qd), free(kd), free(vd), free(od), free(lsed);
}

/* runs a case and asserts both errors are within the dtype's tolerance; returns the result */
static result check_case(const kn_attn_desc *desc, const kn_attn_config *cfg,
                         const kn_attn_problem *p) {
  result r;
  run_case(desc, cfg, p, false, &r);
  double tol = kn_attn_tolerance(desc->dtype), ltol = kn_attn_lse_tolerance(desc->dtype);
  if (!(r.err_o <= tol) || !(r.err_lse <= ltol))
    fail_msg("%s %s D=%d causal=%d lse=%d B=%d H=%d HK=%d Nq=%d Nk=%d BM=%d BN=%d row gap %d "
             "seed=%llu: max abs err O %.3g (tol %.3g; inf: NaN, or a gap written), lse %.3g "
             "(tol %.3g)", on_host ? "host" : "interp",
             kn_scalar_name(desc->dtype), desc->head_dim, desc->causal, desc->has_lse, p->batch,
             p->heads, p->kv_heads, p->seqlen_q, p->seqlen_k, cfg->block_m, cfg->block_n,
             row_gap, (unsigned long long)r.seed, r.err_o, tol, r.err_lse, ltol);
  return r;
}

/* ---- the sweep over dtype x head dim x causal x shapes ------------------------------------------ */

static const int shapes[][2] = {{1, 1}, {17, 17}, {128, 128}, {1000, 1000}, {64, 1000}, {1000, 64}};

static void sweep(kn_scalar dt) {
  double worst = 0, worst_lse = 0;
  clock_t t0 = clock();
  for (int di = 0; di < 2; di++)
    for (int causal = 0; causal < 2; causal++)
      for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int nq = shapes[si][0], nk = shapes[si][1];
        kn_attn_desc desc = {.dtype = dt, .head_dim = di ? 128 : 64, .causal = causal,
                             .has_lse = true};
        /* small cases carry GQA and batch; the big ones batch 1 (interpreter time) */
        kn_attn_problem p = {.batch = 1, .heads = 1, .kv_heads = 1, .seqlen_q = nq, .seqlen_k = nk};
        if (nq * nk <= 17 * 17) p.batch = 2, p.heads = 2, p.kv_heads = 1;
        else if (nq * nk <= 128 * 128) p.heads = 4, p.kv_heads = 2;
        else if (nq * nk >= 1000 * 1000) p.heads = 2, p.kv_heads = 1;
        /* lse off in one layout per dtype, so the has_lse=false kernel runs too */
        if (si == 2 && causal) desc.has_lse = false;
        kn_attn_config cfg = kn_attn_default_config(NULL, &desc);
        result r = check_case(&desc, &cfg, &p);
        if (r.err_o > worst) worst = r.err_o;
        if (r.err_lse > worst_lse) worst_lse = r.err_lse;
      }
  printf("[ attention ] %-4s max abs err O %.3g (tol %.3g), lse %.3g (tol %.3g), %.1f s\n",
         kn_scalar_name(dt), worst, kn_attn_tolerance(dt), worst_lse, kn_attn_lse_tolerance(dt),
         (double)(clock() - t0) / CLOCKS_PER_SEC);
}

static void test_fwd_f32(void **state) { (void)state; sweep(KN_F32); }
static void test_fwd_f16(void **state) { (void)state; sweep(KN_F16); }
static void test_fwd_bf16(void **state) { (void)state; sweep(KN_BF16); }

/* ---- (b) ragged sizes with small blocks (BM < BN, BM > BN), several heads --------------------------- */

static void test_ragged_small_blocks(void **state) {
  (void)state;
  static const int sz[][2] = {{33, 77}, {77, 33}, {100, 37}, {15, 16}, {16, 15}, {31, 1}};
  static const int blk[][2] = {{16, 32}, {64, 16}, {32, 32}};
  for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
    for (size_t bi = 0; bi < sizeof blk / sizeof blk[0]; bi++)
      for (int causal = 0; causal < 2; causal++) {
        kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 32, .causal = causal, .has_lse = true};
        kn_attn_config cfg = {.block_m = blk[bi][0], .block_n = blk[bi][1], .warps = 4,
                              .stages = 2};
        kn_attn_problem p = {.batch = 2, .heads = 3, .kv_heads = 1, .seqlen_q = sz[s][0],
                             .seqlen_k = sz[s][1], .sm_scale = 0.3};
        check_case(&desc, &cfg, &p);
      }
}

/* ---- (a) causal block skipping ------------------------------------------------------------------ */

/* (program, KV block) pairs holding at least one live (row, col), by brute force */
static uint64_t needed_blocks(int nq, int nk, int bm, int bn, bool causal) {
  uint64_t n = 0;
  for (int r0 = 0; r0 < nq; r0 += bm)
    for (int c0 = 0; c0 < nk; c0 += bn) {
      bool any = false;
      for (int r = r0; r < r0 + bm && r < nq && !any; r++)
        for (int c = c0; c < c0 + bn && c < nk && !any; c++)
          any = !causal || c <= r + (nk - nq);
      n += any;
    }
  return n;
}

static void test_causal_block_skipping(void **state) {
  (void)state;
  static const int sz[][2] = {{128, 128}, {100, 300}, {300, 100}, {17, 17}, {64, 1000},
                              {1000, 64}, {5, 200}, {200, 5}};
  static const int blk[][2] = {{32, 16}, {16, 64}, {64, 64}};
  for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
    for (size_t bi = 0; bi < sizeof blk / sizeof blk[0]; bi++)
      for (int causal = 0; causal < 2; causal++) {
        kn_attn_desc desc = {.dtype = KN_F32, .head_dim = 32, .causal = causal, .has_lse = true};
        kn_attn_config cfg = {.block_m = blk[bi][0], .block_n = blk[bi][1], .warps = 4,
                              .stages = 2};
        kn_attn_problem p = {.batch = 1, .heads = 2, .kv_heads = 2, .seqlen_q = sz[s][0],
                             .seqlen_k = sz[s][1]};
        result r = check_case(&desc, &cfg, &p);
        uint64_t want = 2 * (uint64_t)p.batch * p.heads *
                        needed_blocks(p.seqlen_q, p.seqlen_k, cfg.block_m, cfg.block_n, causal);
        if (r.dots != want)
          fail_msg("causal=%d Nq=%d Nk=%d BM=%d BN=%d: %llu dots executed, %llu needed", causal,
                   p.seqlen_q, p.seqlen_k, cfg.block_m, cfg.block_n,
                   (unsigned long long)r.dots, (unsigned long long)want);
      }
}

/* ---- (c) unsupported descriptors and configs ---------------------------------------------------- */

static void expect_reject(kn_attn_desc desc, kn_attn_config cfg, const char *needle) {
  kn_diag d;
  memset(&d, 0, sizeof d);
  assert_int_equal(kn_attn_check(&desc, &cfg, &d), -1);
  if (!strstr(d.message, needle)) fail_msg("message '%s' does not mention '%s'", d.message, needle);
  kn_module *m = kn_module_new(NULL);
  assert_null(kn_attn_fwd_build(m, &desc, &cfg, &d));
  assert_int_equal(m->nfuncs, 0);
  kn_module_free(m);
}

/* off32's rule (kn_attn_off32_fits): ((seqlen_k - 1) * row stride + head_dim) * element size
 * below 2^31 for k and for v, non-negative strides, no overflow; which kernels take it */
static void test_off32_fits(void **state) {
  (void)state;
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 128};
  assert_true(kn_attn_off32_fits(&d, (1 << 23) - 1, 128, 128));
  assert_false(kn_attn_off32_fits(&d, 1 << 23, 128, 128));
  assert_false(kn_attn_off32_fits(&d, 1 << 23, 128, 0) && kn_attn_off32_fits(&d, 2, 128, 1 << 30));
  assert_true(kn_attn_off32_fits(&d, 0, -1, -1));   /* no rows: nothing is read */
  assert_true(kn_attn_off32_fits(&d, 1, INT64_MAX, INT64_MAX));
  assert_false(kn_attn_off32_fits(&d, 2, -128, 128)); /* below the base */
  assert_false(kn_attn_off32_fits(&d, 3, INT64_MAX / 2, 128)); /* overflow */
  assert_true(kn_attn_off32_fits(&d, 1 << 10, 0, 0)); /* broadcast rows */
  kn_attn_desc f8 = {.dtype = KN_F16, .head_dim = 128, .kv_dtype = KN_F8E4M3};
  assert_true(kn_attn_off32_fits(&f8, 1 << 23, 128, 128)); /* one byte an element */
  assert_false(kn_attn_off32_fits(&f8, 1 << 24, 128, 128));
  assert_true(kn_attn_off32_applies(kn_arch_get("gfx942"), &d));
  assert_false(kn_attn_off32_applies(kn_arch_get("sm_90a"), &d));
  assert_false(kn_attn_off32_applies(NULL, &d));
  kn_attn_desc pg = {.dtype = KN_F16, .head_dim = 128, .layout = KN_ATTN_PAGED};
  assert_false(kn_attn_off32_applies(kn_arch_get("gfx90a"), &pg));
  /* keyed only when set: every key without it is what it was */
  kn_attn_config c = {.block_m = 64, .block_n = 32, .warps = 4, .stages = 2, .off32 = true};
  char key[KN_ATTN_KEY_MAX];
  kn_attn_config_key(&c, key, sizeof key);
  assert_string_equal(key, "block_m=64;block_n=32;warps=4;stages=2;mfma=0;wgmma=0;off32=1");
}

static void test_check_rejects(void **state) {
  (void)state;
  kn_attn_desc ok = {.dtype = KN_F16, .head_dim = 64};
  kn_attn_config cfg = kn_attn_default_config(NULL, &ok);
  kn_diag d;
  assert_int_equal(kn_attn_check(&ok, &cfg, &d), 0);
  kn_attn_desc bad = ok;
  bad.head_dim = 513;
  expect_reject(bad, cfg, "head dim 513 is not supported (1..512)");
  bad.head_dim = 0;
  expect_reject(bad, cfg, "head dim 0");
  bad.head_dim = -16;
  expect_reject(bad, cfg, "head dim -16");
  bad = ok;
  bad.dtype = KN_I32;
  expect_reject(bad, cfg, "i32");
  bad.dtype = KN_F8E4M3;
  expect_reject(bad, cfg, "f8e4m3");
  kn_attn_config c2 = cfg;
  c2.block_m = 48;
  expect_reject(ok, c2, "BLOCK_M 48");
  c2 = cfg;
  c2.block_n = 512;
  expect_reject(ok, c2, "BLOCK_N 512");
  c2 = cfg;
  c2.warps = 3;
  expect_reject(ok, c2, "warps 3");
  c2 = cfg;
  c2.stages = 0;
  expect_reject(ok, c2, "stages 0");
  /* every head dim 1..512 is accepted with its default config, and builds a kernel whose head
   * tile dimension is the padded one (a multiple of 16) */
  for (int dt = 0; dt < 3; dt++)
    for (int D = 1; D <= KN_ATTN_MAX_HEAD_DIM; D++) {
      kn_attn_desc x = {.dtype = (kn_scalar[]){KN_F16, KN_BF16, KN_F32}[dt], .head_dim = D};
      kn_attn_config c = kn_attn_default_config(NULL, &x);
      assert_int_equal(kn_attn_check(&x, &c, &d), 0);
      int dp = kn_attn_head_pad(D);
      assert_true(dp >= D && dp < D + 16 && dp % 16 == 0);
      if (D % 16 == 0) assert_int_equal(dp, D);
    }
  /* the descriptor keeps the caller's head dim */
  kn_attn_desc x = {.dtype = KN_F16, .head_dim = 59, .causal = true};
  char key[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(&x, key, sizeof key);
  assert_string_equal(key, "dtype=f16;d=59;causal=1;lse=0;window=0;softcap=0;alibi=0;bias=0;"
                           "doc=0;prefix=0;layout=0;mods=0");
}

/* ---- (e) any head dim: the tile dimension padded to 16, bounds at head_dim ------------------- */

/* Head dims that are not multiples of 16 (FlashAttention's tests use 40, 59 and 111, models 72,
 * 80 and 96; 1, 8 and 24 are below one k step), 256 and 512, on the interpreter and on the host
 * target (checked mode), f16 / bf16 / f32 in turn, causal off and on (the host: one of them per
 * head dim, alternating), ragged lengths, GQA, with
 * row strides of head_dim (contiguous) and of head_dim + 5 (NaN gaps between rows: a read past
 * head_dim poisons the result, a write past it is caught). */
static void test_head_dims(void **state) {
  (void)state;
  static const int dims[] = {1, 8, 24, 40, 59, 72, 80, 96, 111, 256, 512};
  static const int sz[][2] = {{77, 130}, {130, 77}, {1, 1}, {17, 33}};
  static const kn_scalar dts[] = {KN_F16, KN_BF16, KN_F32};
  const int ndims = (int)(sizeof dims / sizeof dims[0]);
  double worst[3] = {0};
  clock_t t0 = clock();
  for (int host = 0; host < 2; host++)
    for (int i = 0; i < ndims; i++)
      for (int causal = 0; causal < 2; causal++) {
        const int D = dims[i];
        if (host && causal != i % 2) continue;  /* host: one compile per head dim (~0.8 s) */
        kn_attn_desc desc = {.dtype = dts[(i + causal + host) % 3], .head_dim = D,
                             .causal = causal, .has_lse = true};
        /* the default config, and on the interpreter small blocks (several per row) as well */
        kn_attn_config cfgs[2] = {kn_attn_default_config(NULL, &desc),
                                  {.block_m = 32, .block_n = 16, .warps = 4, .stages = 2}};
        for (int c = 0; c < (host ? 1 : 2); c++)
          for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++) {
            /* D 512 on the interpreter: the small problems (its dots are slow at 512) */
            if (D == 512 && !host && sz[s][0] * sz[s][1] > 1000) continue;
            kn_attn_problem p = {.batch = 2, .heads = 2, .kv_heads = 1, .seqlen_q = sz[s][0],
                                 .seqlen_k = sz[s][1]};
            on_host = host;
            row_gap = s % 2 ? 5 : 0;
            result r = check_case(&desc, &cfgs[c], &p);
            on_host = false;
            row_gap = 0;
            int k = desc.dtype == KN_F16 ? 0 : desc.dtype == KN_BF16 ? 1 : 2;
            if (r.err_o > worst[k]) worst[k] = r.err_o;
          }
      }
  printf("[ attention ] head dims 1..512, interp and host: max abs err O f16 %.3g, bf16 %.3g, "
         "f32 %.3g, %.1f s\n", worst[0], worst[1], worst[2],
         (double)(clock() - t0) / CLOCKS_PER_SEC);
}

/* ---- (d) the comparison can fail ---------------------------------------------------------------- */

static void test_wrong_kernel_is_caught(void **state) {
  (void)state;
  for (int causal = 0; causal < 2; causal++) {
    kn_attn_desc desc = {.dtype = KN_F32, .head_dim = 64, .causal = causal, .has_lse = true};
    kn_attn_config cfg = kn_attn_default_config(NULL, &desc);
    kn_attn_problem p = {.batch = 1, .heads = 2, .kv_heads = 1, .seqlen_q = 17, .seqlen_k = 17};
    result r;
    run_case(&desc, &cfg, &p, true, &r);  /* reference with the causal flag flipped */
    if (!(r.err_o > 10 * kn_attn_tolerance(desc.dtype)))
      fail_msg("causal=%d vs flipped reference: O error %.3g was not caught (seed %llu)", causal,
               r.err_o, (unsigned long long)r.seed);
    if (!(r.err_lse > 10 * kn_attn_lse_tolerance(desc.dtype)))
      fail_msg("causal=%d vs flipped reference: lse error %.3g was not caught", causal, r.err_lse);
  }
}

/* ---- golden printed form ------------------------------------------------------------------------ */

/* tests/golden/<name>, beside this file's directory */
static void golden_path(char *path, size_t n, const char *name) {
  const char *slash = strrchr(__FILE__, '/');
  int dir = slash ? (int)(slash - __FILE__) : 1;
  snprintf(path, n, "%.*s/../golden/%s", dir, slash ? __FILE__ : ".", name);
}

/* the file's text after its leading "//" header lines (malloc'd), or NULL when unreadable */
static char *golden_body(const char *name) {
  char path[4096];
  golden_path(path, sizeof path, name);
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *s = malloc((size_t)n + 1);
  if (!s || fread(s, 1, (size_t)n, fp) != (size_t)n) {
    free(s);
    fclose(fp);
    return NULL;
  }
  fclose(fp);
  s[n] = 0;
  char *body = s;
  while (strncmp(body, "//", 2) == 0) {  /* the header block, as golden_runner reads it */
    char *nl = strchr(body, '\n');
    body = nl ? nl + 1 : body + strlen(body);
  }
  while (*body == '\n') body++;
  memmove(s, body, strlen(body) + 1);
  return s;
}

/* the header of the golden file kept, its body replaced by `body` */
static void golden_rewrite(const char *name, const char *body) {
  char path[4096];
  golden_path(path, sizeof path, name);
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  char line[4096], *head = calloc(1, 1 << 16);
  assert_non_null(head);
  size_t n = 0;
  while (fgets(line, sizeof line, fp) && (!strncmp(line, "//", 2) || line[0] == '\n')) {
    size_t k = strlen(line);
    assert_true(n + k < (1 << 16));
    memcpy(head + n, line, k + 1);
    n += k;
  }
  fclose(fp);
  fp = fopen(path, "wb");
  assert_non_null(fp);
  fputs(head, fp);
  fputs(body, fp);
  fclose(fp);
  free(head);
}

static void check_golden(const char *file, kn_attn_desc desc) {
  kn_attn_config cfg = kn_attn_default_config(NULL, &desc);
  kn_module *m = kn_module_new(NULL);
  kn_diag d;
  assert_non_null(kn_attn_fwd_build(m, &desc, &cfg, &d));
  assert_int_equal(kn_verify(m, &d), 0);
  char *got = kn_print(m);
  char *want = golden_body(file);
  if (!want) fail_msg("cannot read tests/golden/%s", file);
  if (getenv("KILN_UPDATE_GOLDEN") && strcmp(got, want) != 0) {
    /* after a deliberate change of the template: rewrite the body, keep the header, and say so
     * (the test still fails this run, so a stray variable cannot hide a change) */
    golden_rewrite(file, got);
    fail_msg("KILN_UPDATE_GOLDEN: rewrote tests/golden/%s; run again without it", file);
  }
  if (strcmp(got, want) != 0) {
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    fail_msg("%s differs from kn_print() at byte %zu:\n--- printed ---\n%.200s\n--- golden ---\n"
             "%.200s", file, i, got + i, want + i);
  }
  /* and the printed form reads back to the same text */
  kn_module *m2 = kn_parse(file, got, strlen(got), &d);
  if (!m2) fail_msg("parse: %s", d.rendered);
  if (kn_verify(m2, &d) != 0) fail_msg("verify parsed: %s", d.rendered);
  char *again = kn_print(m2);
  assert_string_equal(again, got);
  free(again), free(got), free(want);
  kn_module_free(m2);
  kn_module_free(m);
}

static void test_golden_default(void **state) {
  (void)state;
  check_golden("attn_fwd_default.tile", (kn_attn_desc){.dtype = KN_F16, .head_dim = 64});
}

static void test_golden_causal_lse(void **state) {
  (void)state;
  check_golden("attn_fwd_causal_lse.tile",
               (kn_attn_desc){.dtype = KN_BF16, .head_dim = 128, .causal = true, .has_lse = true});
}

/* ---- the canonical keys ------------------------------------------------------------------------- */

/* another value of a field of this kind: a different dtype, the other bool, a different int, a
 * different text (the key hashes it) */
static long other_value(int kind, long v) {
  static const char text[] = "func @mask_mod(%b: i32, %h: i32, %q: i32, %k: i32) -> (i1) {}";
  switch (kind) {
  case KN_ATTN_FIELD_SCALAR: return v == KN_F16 ? KN_BF16 : KN_F16;
  case KN_ATTN_FIELD_SCALAR_OPT: return v == KN_F8E4M3 ? KN_F8E5M2 : KN_F8E4M3;  /* fp8 inputs */
  case KN_ATTN_FIELD_BOOL:
  case KN_ATTN_FIELD_BOOL_OPT: return !v;
  case KN_ATTN_FIELD_TEXT: return (long)(intptr_t)text;
  default: return v + 16;
  }
}

/* Every field of the descriptor and of the config, taken from the same field lists the structs
 * are declared from: changing any one of them changes the key, and the key names it.  A field
 * added to a list is covered here without editing this test. */
static void test_keys_cover_every_field(void **state) {
  (void)state;
  kn_attn_desc d0 = {.dtype = KN_F16, .head_dim = 128, .causal = true, .has_lse = true};
  kn_attn_config c0 = kn_attn_default_config(NULL, &d0);
  char k0[KN_ATTN_KEY_MAX], k1[KN_ATTN_KEY_MAX];
  int fields = 0;
#define CHANGE_ONE(keyfn, base, kind, type, field, name)                                     \
  {                                                                                           \
    __typeof__(base) x = base;                                                                \
    x.field = (type)(intptr_t)other_value(kind, (long)(intptr_t)base.field);                  \
    assert_true(keyfn(&base, k0, sizeof k0) < KN_ATTN_KEY_MAX);                               \
    assert_true(keyfn(&x, k1, sizeof k1) < KN_ATTN_KEY_MAX);                                  \
    if (!strcmp(k0, k1)) fail_msg("changing field %s leaves the key '%s' unchanged", #field, k0); \
    assert_non_null(strstr(k1, name "="));                                                    \
    fields++;                                                                                 \
  }
#define DESC_FIELD(kind, type, field, name) CHANGE_ONE(kn_attn_desc_key, d0, kind, type, field, name)
#define CONFIG_FIELD(kind, type, field, name) \
  CHANGE_ONE(kn_attn_config_key, c0, kind, type, field, name)
  KN_ATTN_DESC_FIELDS(DESC_FIELD)
  KN_ATTN_CONFIG_FIELDS(CONFIG_FIELD)
#undef DESC_FIELD
#undef CONFIG_FIELD
#undef CHANGE_ONE
  assert_true(fields >= 9);
  /* the text itself is a contract (tuning-database records, logs) */
  kn_attn_desc_key(&d0, k0, sizeof k0);
  assert_string_equal(k0, "dtype=f16;d=128;causal=1;lse=1;window=0;softcap=0;alibi=0;bias=0;"
                          "doc=0;prefix=0;layout=0;mods=0");
  kn_attn_config c = {.block_m = 64, .block_n = 32, .warps = 4, .stages = 2};
  kn_attn_config_key(&c, k0, sizeof k0);
  assert_string_equal(k0, "block_m=64;block_n=32;warps=4;stages=2;mfma=0;wgmma=0");
  /* snprintf-like: the full length however small the buffer, always terminated */
  char tiny[8];
  assert_int_equal(kn_attn_desc_key(&d0, tiny, sizeof tiny), 95);
  assert_string_equal(tiny, "dtype=f");
  assert_int_equal(kn_attn_desc_key(&d0, NULL, 0), 95);
}

int main(void) {
  const char *env = getenv("KILN_TEST_SEED");
  seed_base = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 1000003u;
  printf("[ attention ] seed base %llu (KILN_TEST_SEED=%llu replays this run)\n",
         (unsigned long long)seed_base, (unsigned long long)seed_base);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keys_cover_every_field),
      cmocka_unit_test(test_off32_fits),
      cmocka_unit_test(test_check_rejects),
      cmocka_unit_test(test_golden_default),
      cmocka_unit_test(test_golden_causal_lse),
      cmocka_unit_test(test_wrong_kernel_is_caught),
      cmocka_unit_test(test_causal_block_skipping),
      cmocka_unit_test(test_ragged_small_blocks),
      cmocka_unit_test(test_head_dims),
      cmocka_unit_test(test_fwd_f32),
      cmocka_unit_test(test_fwd_f16),
      cmocka_unit_test(test_fwd_bf16),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
