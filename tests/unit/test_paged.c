/* test_paged.c — the paged KV cache (docs/serving.md): keys and values in pages of a pool read
 * through a block table, against the float64 reference, on every target that runs here, and
 * through the API.
 *
 * 1. The reference: its paged mode equals the dense reference on each sequence's keys copied
 *    out of the pages (so the paged oracle is the dense one, which test_attention checks).
 * 2. The kernel on the interpreter, the host, gfx90a-emu and gfx942-emu: page sizes 1, 16, 64,
 *    256 and sizes off the blocks (5, 48), ragged cache lengths including empty sequences,
 *    length 1 and lengths on page boundaries, pages in shuffled order, block tables with unused
 *    tail entries that hold garbage, GQA 4:1 / 2:1 and MQA, causal both ways, window, softcap,
 *    ALiBi, documents, a user mask, no lse; fresh random inputs each run.
 * 3. Safety: block tables whose entries are outside the pool and lengths past the table make
 *    the kernel clamp, never read outside the pool or the table (the interpreter checks every
 *    access); the reference refuses them.
 * 4. Append (flash_attn_with_kvcache): kn_attn_paged_append writes new rows through the table,
 *    then the kernel attends over them; a position past the table is refused, nothing written.
 * 5. Code: every variant above at its default paged tiling compiles for gfx90a / gfx942 at head
 *    dims 64, 128, 256 without VGPR spills and for sm_80 / sm_90a at 64 and 128 without spills
 *    (ptxas -O3, when found; skipped without CUDA).
 * 6. The API (host): KILN_LAYOUT_PAGED with k_new / v_new, the block table checks before launch;
 *    calls of up to 16 query rows through the split-KV decode kernels (test_decode checks those
 *    kernels on every target), and with KILN_DECODE=0 through the paged prefill kernel.
 *
 * KILN_TEST_SEED=<n> replays the random inputs; KILN_TEST_VERBOSE=1 prints each case;
 * KILN_TEST_FILTER=test_api* runs the tests whose names match.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "attn_internal.h"
#include "kiln.h"
#include "numeric.h"
#include "attn_test.h"
#include "test_mods.h"

/* ---- one paged problem ------------------------------------------------------------------------- */

enum { MAXB = 8 };

typedef struct pg_case {
  const char *name;
  kn_attn_desc desc;
  int batch, heads, kv_heads, seqlen_q, page_size;
  int len[MAXB];     /* cache lengths */
  int tail;          /* unused table entries past the pages a sequence needs */
  int spare;         /* pool pages no sequence uses */
  int seqlen_new;    /* rows appended before the launch (the kernel adds them to the lengths) */
  /* derived */
  int max_pages, num_pages, max_len;
  int32_t *table, seqlens[MAXB];
  kn_attn_vargs va;
  kn_attn_named_arg named[2];
  void *buf[4];
} pg_case;

/* the table (each sequence's pages drawn at random from a shuffled pool, garbage in the unused
 * tail entries) and the variant's values */
static void pg_prepare(pg_case *c) {
  c->max_len = 0;
  for (int b = 0; b < c->batch; b++) {
    if (c->len[b] > c->max_len) c->max_len = c->len[b];
    c->seqlens[b] = c->len[b];
  }
  c->table = test_page_table(c->batch, c->len, c->page_size, c->tail, c->spare, &c->max_pages,
                             &c->num_pages);
  const kn_attn_desc *d = &c->desc;
  kn_attn_vargs *va = &c->va;
  memset(va, 0, sizeof *va);
  memset(c->buf, 0, sizeof c->buf);
  int B = c->batch, H = c->heads, nb = 0;
  if (d->window) {
    va->window_left = irand(-1, 3) < 0 ? -1 : irand(0, 30);
    va->window_right = irand(-1, 3) < 0 ? -1 : irand(0, 10);
  }
  if (d->softcap) va->softcap = (float)unif(0.5, 3);
  if (d->alibi) {
    float *s = malloc(sizeof *s * (size_t)(B * H));
    for (int i = 0; i < B * H; i++) s[i] = (float)unif(0.01, 0.6);
    va->alibi_slopes = s, va->alibi_sb = H;
    c->buf[nb++] = s;
  }
  if (d->document) {  /* key ids over the table's capacity (the kernel's seqlen_k extent) */
    int mq = c->seqlen_q > 0 ? c->seqlen_q : 1, mk = c->max_pages * c->page_size;
    if (mk < 1) mk = 1;
    int32_t *qs = calloc((size_t)(B * mq), 4), *ks = calloc((size_t)(B * mk), 4);
    for (int b = 0; b < B; b++) {
      int id = 0;
      for (int j = 0; j < mk; j++) ks[b * mk + j] = id += irand(0, 7) == 0;
      id = 0;
      for (int i = 0; i < mq; i++) qs[b * mq + i] = id += irand(0, 7) == 0;
    }
    va->q_seg = qs, va->k_seg = ks, va->q_seg_sb = mq, va->k_seg_sb = mk;
    c->buf[nb++] = qs, c->buf[nb++] = ks;
  }
  if (d->mods) {
    c->named[0] = (kn_attn_named_arg){"chunk", {.i = irand(3, 20)}, 0};
    va->mods = c->named, va->nmods = 1;
  }
}

static void pg_free(pg_case *c) {
  for (int i = 0; i < 4; i++) free(c->buf[i]), c->buf[i] = NULL;
  free(c->table), c->table = NULL;
}

static kn_attn_problem pg_problem(const pg_case *c) {
  return (kn_attn_problem){.batch = c->batch, .heads = c->heads, .kv_heads = c->kv_heads,
                           .seqlen_q = c->seqlen_q, .seqlen_k = c->max_pages * c->page_size,
                           .block_table = c->table, .cache_seqlens = c->seqlens,
                           .page_size = c->page_size, .num_pages = c->num_pages,
                           .max_pages = c->max_pages, .seqlen_new = c->seqlen_new};
}

static double abs_err(double got, double want) {
  if (isinf(want) || isinf(got)) return got == want ? 0 : INFINITY;
  double e = fabs(got - want);
  return e == e ? e : INFINITY;
}

/* dense q/o/lse, the pools (num_pages, page_size, HK, D): dtype buffers and their values */
typedef struct pg_data {
  size_t nq, nk, nl, es;
  void *q, *k, *v, *o;
  float *lse;
  double *qd, *kd, *vd, *od, *ld;
} pg_data;

static void fill(kn_scalar dt, void *buf, double *vals, size_t n, size_t es, bool nan) {
  for (size_t i = 0; i < n; i++) {
    kn_store_elem(dt, (char *)buf + i * es, nan ? NAN : unif(-2, 2));
    vals[i] = kn_load_elem(dt, (char *)buf + i * es);
  }
}

static void data_make(const pg_case *c, pg_data *x) {
  kn_scalar dt = c->desc.dtype;
  int D = c->desc.head_dim;
  x->es = kn_scalar_size(dt);
  x->nq = (size_t)c->batch * c->heads * c->seqlen_q * D;
  x->nk = (size_t)c->num_pages * c->page_size * c->kv_heads * D;
  x->nl = (size_t)c->batch * c->heads * c->seqlen_q;
  x->q = malloc(x->nq * x->es + 16), x->o = malloc(x->nq * x->es + 16);
  x->k = malloc(x->nk * x->es + 16), x->v = malloc(x->nk * x->es + 16);
  x->lse = malloc(x->nl * 4 + 16);
  x->qd = malloc(x->nq * 8 + 8), x->od = malloc(x->nq * 8 + 8), x->kd = malloc(x->nk * 8 + 8);
  x->vd = malloc(x->nk * 8 + 8), x->ld = malloc(x->nl * 8 + 8);
  assert_true(x->q && x->o && x->k && x->v && x->lse && x->qd && x->od && x->kd && x->vd && x->ld);
  fill(dt, x->q, x->qd, x->nq, x->es, false);
  fill(dt, x->o, x->od, x->nq, x->es, true);
  fill(dt, x->k, x->kd, x->nk, x->es, false);
  fill(dt, x->v, x->vd, x->nk, x->es, false);
  for (size_t i = 0; i < x->nl; i++) x->lse[i] = NAN, x->ld[i] = NAN;
}

static void data_free(pg_data *x) {
  free(x->q), free(x->k), free(x->v), free(x->o), free(x->lse);
  free(x->qd), free(x->kd), free(x->vd), free(x->od), free(x->ld);
}

static void compare(const pg_case *c, const pg_data *x, const char *target) {
  double err = 0, lerr = 0;
  kn_scalar dt = c->desc.dtype;
  for (size_t i = 0; i < x->nq; i++)
    err = fmax(err, abs_err(kn_load_elem(dt, (char *)x->o + i * x->es), x->od[i]));
  if (c->desc.has_lse)
    for (size_t i = 0; i < x->nl; i++) lerr = fmax(lerr, abs_err(x->lse[i], x->ld[i]));
  double tol = kn_attn_tolerance(dt), ltol = kn_attn_lse_tolerance(dt) * 4;
  char lens[160];
  int at = 0;
  for (int b = 0; b < c->batch && at < (int)sizeof lens - 24; b++)
    at += snprintf(lens + at, sizeof lens - (size_t)at, "%s%d", b ? "," : "", c->len[b]);
  if (verbose())
    printf("    %-18s %-11s %s D%d H%d/%d Nq %d page %d lens %s: err %.3g lse %.3g\n", c->name,
           target, kn_scalar_name(dt), c->desc.head_dim, c->heads, c->kv_heads, c->seqlen_q,
           c->page_size, lens, err, lerr);
  if (!(err <= tol) || !(lerr <= ltol))
    fail_msg("%s on %s (seed %llu, %s D%d H%d/%d, Nq %d, page %d, lens %s): err O %.3g (tol "
             "%.3g), lse %.3g", c->name, target, (unsigned long long)seed0, kn_scalar_name(dt),
             c->desc.head_dim, c->heads, c->kv_heads, c->seqlen_q, c->page_size, lens, err, tol,
             lerr);
}

/* the kernel of case c built for cfg, its arguments and the memory it may touch */
typedef struct pg_run {
  kn_module *m;
  kn_func *f;
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[3], nreg;
  kn_region regions[KN_ATTN_MAX_PARAMS];
} pg_run;

/* the index of kernel parameter `name` of descriptor d */
static int sig_param(const kn_attn_desc *d, const char *name) {
  kn_attn_sig sig;
  kn_diag diag;
  assert_int_equal(kn_attn_signature(d, &sig, &diag), 0);
  for (int i = 0; i < sig.n; i++)
    if (!strcmp(sig.name[i], name)) return i;
  fail_msg("no parameter %s", name);
  return 0;
}

static void run_make(pg_case *c, pg_data *x, const kn_attn_config *cfg, pg_run *r) {
  const kn_attn_desc *d = &c->desc;
  kn_diag diag;
  r->m = kn_module_new("<paged>");
  r->f = kn_attn_fwd_build(r->m, d, cfg, &diag);
  if (!r->f) fail_msg("%s: build: %s", c->name, diag.rendered);
  kn_attn_sig sig;
  if (kn_attn_signature(d, &sig, &diag)) fail_msg("%s: signature: %s", c->name, diag.message);
  kn_attn_problem p = pg_problem(c);
  if (kn_attn_fill_args(d, &sig, cfg, &p, x->q, x->k, x->v, x->o, x->lse, &c->va, r->args,
                        r->grid, &diag))
    fail_msg("%s: args: %s", c->name, diag.message);
  kn_region base[5] = {{x->q, x->nq * x->es}, {x->k, x->nk * x->es}, {x->v, x->nk * x->es},
                       {x->o, x->nq * x->es}, {x->lse, x->nl * 4}};
  memcpy(r->regions, base, sizeof base);
  r->nreg = 5;
  kn_argval scratch[KN_ATTN_MAX_PARAMS];
  memcpy(scratch, r->args, sizeof scratch);
  int n = kn_attn_fill_vargs(d, &sig, &p, &c->va, scratch, r->regions + r->nreg, &diag);
  assert_true(n >= 0);
  r->nreg += n;
}

static void check_reference(pg_case *c, pg_data *x, const char *target) {
  kn_attn_problem p = pg_problem(c);
  kn_diag diag;
  if (kn_attn_reference_v(&c->desc, NULL, &p, &c->va, x->qd, x->kd, x->vd, x->od,
                          c->desc.has_lse ? x->ld : NULL, &diag))
    fail_msg("%s: reference: %s", c->name, diag.message);
  compare(c, x, target);
}

/* builds, runs on target (NULL: the interpreter) and checks one case */
static void run_case(const char *target, pg_case *c, const kn_attn_config *cfg) {
  pg_prepare(c);
  pg_data x;
  data_make(c, &x);
  pg_run r;
  run_make(c, &x, cfg, &r);
  kn_diag diag;
  int rc = 0;
  if (r.grid[0] > 0 && r.grid[1] > 0)
    rc = run_on_target(target, r.m, r.f, r.args, r.grid, r.regions, r.nreg, NULL, c->name, &diag);
  if (rc) fail_msg("%s on %s (seed %llu): %s", c->name, target ? target : "interp",
                   (unsigned long long)seed0, diag.message);
  check_reference(c, &x, target ? target : "interp");
  kn_module_free(r.m);
  data_free(&x);
  pg_free(c);
}

/* the variants every target runs */
static int case_list(pg_case *out, kn_scalar dt, int D) {
  static const char *const extra[] = {"document", "user-mask(chunks)", NULL};
  test_variant v[16];
  kn_attn_desc base = {.dtype = dt, .head_dim = D, .has_lse = true, .layout = KN_ATTN_PAGED};
  int n = test_variant_list(base, extra, v);
  for (int i = 0; i < n; i++) out[i] = (pg_case){.name = v[i].name, .desc = v[i].desc};
  return n;
}

/* ragged batches over page sizes 1, 16, 64, 256 and two off the blocks: empty sequences,
 * length 1, lengths on and next to page boundaries, GQA 4:1 and 2:1, MQA, one query row
 * (decode-like) and more queries than keys */
static void shape_of(pg_case *c, int which) {
  static const struct { int B, H, HK, Nq, ps, len[5], tail, spare; } shapes[] = {
      {4, 4, 1, 3, 16, {1, 32, 0, 45}, 2, 3},
      {3, 8, 2, 1, 1, {33, 0, 7}, 1, 5},
      {5, 3, 3, 17, 64, {64, 2, 0, 129, 63}, 1, 0},
      {2, 4, 2, 9, 256, {256, 5}, 1, 1},
      {3, 4, 4, 20, 5, {10, 11, 4}, 3, 2},
      {2, 8, 2, 40, 48, {96, 30}, 0, 2},
  };
  int s = which % 6;
  c->batch = shapes[s].B, c->heads = shapes[s].H, c->kv_heads = shapes[s].HK;
  c->seqlen_q = shapes[s].Nq, c->page_size = shapes[s].ps;
  for (int b = 0; b < c->batch; b++) c->len[b] = shapes[s].len[b];
  c->tail = shapes[s].tail, c->spare = shapes[s].spare;
}

static void sweep(const char *target, kn_scalar dt, int D, int nshapes) {
  pg_case cs[16];
  int n = case_list(cs, dt, D);
  clock_t t0 = clock();
  const kn_target *t = target_named(target);
  for (int i = 0; i < n; i++)
    for (int s = 0; s < nshapes; s++) {
      /* reduced (KILN_TEST_REDUCED): every third (variant, shape), rotating over the sweeps */
      if (!test_take(3)) continue;
      pg_case c = cs[i];
      shape_of(&c, s + i);
      kn_attn_config cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 2};
      if ((s + i) % 2) cfg = kn_attn_default_config(t ? t->arch : NULL, &c.desc);
      run_case(target, &c, &cfg);
    }
  printf("[ paged ] %-11s %s D%d: %d variants x %d batches, %.1f s\n",
         target ? target : "interp", kn_scalar_name(dt), D, n, nshapes,
         (double)(clock() - t0) / CLOCKS_PER_SEC);
}

/* ---- 1: the reference against the dense one ------------------------------------------------------ */

static void test_reference_dense(void **state) {
  (void)state;
  pg_case cs[16];
  int n = case_list(cs, KN_F32, 24);
  for (int i = 0; i < n; i++) {
    if (cs[i].desc.document || cs[i].desc.mods) continue;  /* their tensors are per batch */
    pg_case c = cs[i];
    shape_of(&c, i);
    pg_prepare(&c);
    pg_data x;
    data_make(&c, &x);
    kn_attn_problem p = pg_problem(&c);
    kn_diag diag;
    double *ld = c.desc.has_lse ? x.ld : NULL;
    if (kn_attn_reference_v(&c.desc, NULL, &p, &c.va, x.qd, x.kd, x.vd, x.od, ld, &diag))
      fail_msg("%s: %s", c.name, diag.message);
    kn_attn_desc dd = c.desc;
    dd.layout = KN_ATTN_DENSE;
    const int H = c.heads, HK = c.kv_heads, D = dd.head_dim, Nq = c.seqlen_q, ps = c.page_size;
    for (int b = 0; b < c.batch; b++) {
      int nk = c.len[b];
      /* sequence b alone, its keys copied out of the pages */
      double *k1 = malloc(sizeof(double) * (size_t)(HK * nk * D) + 8);
      double *v1 = malloc(sizeof(double) * (size_t)(HK * nk * D) + 8);
      double *o1 = malloc(sizeof(double) * (size_t)(H * Nq * D) + 8);
      double *l1 = malloc(sizeof(double) * (size_t)(H * Nq) + 8);
      for (int h = 0; h < HK; h++)
        for (int j = 0; j < nk; j++) {
          size_t row = ((size_t)c.table[b * c.max_pages + j / ps] * ps + (size_t)(j % ps)) * HK + h;
          for (int e = 0; e < D; e++) {
            k1[((size_t)h * nk + j) * D + e] = x.kd[row * D + e];
            v1[((size_t)h * nk + j) * D + e] = x.vd[row * D + e];
          }
        }
      kn_attn_vargs va = c.va;
      float slopes[16];
      if (dd.alibi) {
        for (int h = 0; h < H; h++) slopes[h] = c.va.alibi_slopes[b * H + h];
        va.alibi_slopes = slopes;
      }
      kn_attn_problem p1 = {.batch = 1, .heads = H, .kv_heads = HK, .seqlen_q = Nq, .seqlen_k = nk};
      const double *q1 = x.qd + (size_t)b * H * Nq * D;
      if (kn_attn_reference_v(&dd, NULL, &p1, &va, q1, k1, v1, o1, l1, &diag))
        fail_msg("%s dense: %s", c.name, diag.message);
      for (size_t r = 0; r < (size_t)H * Nq * D; r++)
        assert_true(abs_err(x.od[(size_t)b * H * Nq * D + r], o1[r]) < 1e-12);
      for (size_t r = 0; ld && r < (size_t)H * Nq; r++)
        assert_true(abs_err(ld[(size_t)b * H * Nq + r], l1[r]) < 1e-12);
      free(k1), free(v1), free(o1), free(l1);
    }
    data_free(&x);
    pg_free(&c);
  }
}

/* ---- 2: the kernel on every target ----------------------------------------------------------------- */

static void test_interp(void **s) {
  (void)s;
  sweep(NULL, KN_F32, 32, 3);
  sweep(NULL, KN_F16, 40, 2);
}
static void test_host(void **s) {
  (void)s;
  sweep("host", KN_F16, 64, 6);
  sweep("host", KN_BF16, 72, 2);
}
static void test_gfx90a_emu(void **s) { (void)s; sweep("gfx90a-emu", KN_F16, 64, 2); }
static void test_gfx942_emu(void **s) { (void)s; sweep("gfx942-emu", KN_BF16, 32, 2); }

/* ---- 3: hostile tables and lengths are clamped -------------------------------------------------- */

static void test_clamped(void **state) {
  (void)state;
  static const int sizes[] = {1, 16, 7};
  for (int si = 0; si < 3; si++) {
    pg_case c = {.name = "clamp",
                 .desc = {.dtype = KN_F32, .head_dim = 16, .has_lse = true,
                          .causal = KN_CAUSAL_BOTTOM_RIGHT, .layout = KN_ATTN_PAGED},
                 .batch = 3, .heads = 2, .kv_heads = 1, .seqlen_q = 5, .page_size = sizes[si],
                 .len = {20, 9, 33}, .tail = 2};
    pg_prepare(&c);
    pg_data x;
    data_make(&c, &x);
    /* pages outside the pool, lengths past the table and negative */
    c.table[0] = c.num_pages + 3;
    c.table[1] = -5;
    c.table[c.max_pages] = INT32_MAX;
    c.seqlens[1] = c.max_pages * c.page_size + 1000;
    c.seqlens[2] = -4;
    kn_attn_config cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
    pg_run r;
    run_make(&c, &x, &cfg, &r);
    kn_diag diag;
    if (kn_interp_run(r.f, r.args, r.grid, r.regions, r.nreg, NULL, &diag))
      fail_msg("hostile block table (page %d): %s", c.page_size, diag.message);
    kn_attn_problem p = pg_problem(&c);
    assert_int_equal(kn_attn_reference_v(&c.desc, NULL, &p, NULL, x.qd, x.kd, x.vd, x.od, x.ld,
                                         &diag), -1);
    assert_non_null(strstr(diag.message, "block_table[0, 0]"));
    /* lengths that would wrap around i32 */
    r.args[sig_param(&c.desc, "seqlen_new")].i = INT32_MAX;
    if (kn_interp_run(r.f, r.args, r.grid, r.regions, r.nreg, NULL, &diag))
      fail_msg("seqlen_new INT32_MAX: %s", diag.message);
    /* an empty pool: every sequence has no keys, whatever the table says */
    r.args[sig_param(&c.desc, "num_pages")].i = 0;
    if (kn_interp_run(r.f, r.args, r.grid, r.regions, r.nreg, NULL, &diag))
      fail_msg("empty pool: %s", diag.message);
    for (size_t i = 0; i < x.nl; i++) assert_true(isinf(x.lse[i]) && x.lse[i] < 0);
    kn_module_free(r.m);
    data_free(&x);
    pg_free(&c);
  }
}

/* ---- 4: append, then attend ----------------------------------------------------------------------- */

/* the reference's pools get the new rows ((B, nnew, HK, D) values) by their own loop */
static void ref_append(const pg_case *c, pg_data *x, const double *knd, const double *vnd,
                       int nnew) {
  const int HK = c->kv_heads, D = c->desc.head_dim;
  for (int b = 0; b < c->batch; b++)
    for (int i = 0; i < nnew; i++) {
      int j = c->seqlens[b] + i;
      size_t row = (size_t)c->table[b * c->max_pages + j / c->page_size] * c->page_size +
                   (size_t)(j % c->page_size);
      for (int h = 0; h < HK; h++)
        for (int e = 0; e < D; e++) {
          size_t from = (((size_t)b * nnew + i) * HK + h) * D + e;
          x->kd[(row * HK + h) * D + e] = knd[from];
          x->vd[(row * HK + h) * D + e] = vnd[from];
        }
    }
}

static void test_append(void **state) {
  (void)state;
  pg_case cs[16];
  case_list(cs, KN_F16, 32);
  for (int s = 0; s < 6; s++) {
    pg_case c = cs[s % 2 ? 1 : 3];  /* causal, window + causal */
    shape_of(&c, s);
    const int nnew = 1 + s % 3;
    /* room for the new rows: the lengths after the append */
    for (int b = 0; b < c.batch; b++) c.len[b] += nnew;
    pg_prepare(&c);
    for (int b = 0; b < c.batch; b++) c.seqlens[b] -= nnew;  /* before the append */
    pg_data x;
    data_make(&c, &x);
    const int HK = c.kv_heads, D = c.desc.head_dim;
    size_t nn = (size_t)c.batch * nnew * HK * D;
    void *kn = malloc(nn * x.es), *vn = malloc(nn * x.es);
    double *knd = malloc(nn * 8), *vnd = malloc(nn * 8);
    fill(c.desc.dtype, kn, knd, nn, x.es, false);
    fill(c.desc.dtype, vn, vnd, nn, x.es, false);
    /* k_new in FlashAttention's (B, seqlen_new, HK, D) */
    kn_paged_append ap = {
        .batch = c.batch, .kv_heads = HK, .head_dim = D, .seqlen_new = nnew,
        .page_size = c.page_size, .num_pages = c.num_pages, .max_pages = c.max_pages,
        .elem_size = x.es, .block_table = c.table, .cache_seqlens = c.seqlens,
        .table_stride = c.max_pages, .k_pool = x.k, .v_pool = x.v,
        .k_pool_stride = {(int64_t)c.page_size * HK * D, D, (int64_t)HK * D},
        .v_pool_stride = {(int64_t)c.page_size * HK * D, D, (int64_t)HK * D},
        .k_new = kn, .v_new = vn,
        .k_new_stride = {(int64_t)nnew * HK * D, D, (int64_t)HK * D},
        .v_new_stride = {(int64_t)nnew * HK * D, D, (int64_t)HK * D}};
    kn_diag diag;
    if (kn_attn_paged_append(&ap, &diag)) fail_msg("append: %s", diag.message);
    ref_append(&c, &x, knd, vnd, nnew);
    c.seqlen_new = nnew;  /* the kernel attends over cache_seqlens + seqlen_new keys */
    kn_attn_config cfg = {.block_m = 16, .block_n = 32, .warps = 1, .stages = 1};
    pg_run r;
    run_make(&c, &x, &cfg, &r);
    if (r.grid[0] > 0 && kn_interp_run(r.f, r.args, r.grid, r.regions, r.nreg, NULL, &diag))
      fail_msg("append + attend: %s", diag.message);
    check_reference(&c, &x, "interp+append");
    /* past the table's capacity: refused, nothing written */
    c.seqlens[0] = c.max_pages * c.page_size - nnew + 1;  /* one row past the table */
    unsigned char *before = malloc(x.nk * x.es + 1);
    memcpy(before, x.k, x.nk * x.es);
    assert_int_equal(kn_attn_paged_append(&ap, &diag), -1);
    assert_non_null(strstr(diag.message, "do not fit"));
    assert_memory_equal(before, x.k, x.nk * x.es);
    free(before);
    kn_module_free(r.m);
    free(kn), free(vn), free(knd), free(vnd);
    data_free(&x);
    pg_free(&c);
  }
}

/* The append kernel (kv_append, for CUDA) against kn_attn_paged_append on the interpreter, the
 * host and gfx90a-emu: the same pools byte for byte, k_new in (B, Nnew, HK, D) and v_new in
 * (B, HK, Nnew, D) (its own strides); then rows past the table's capacity and pages outside
 * the pool store nothing outside it (the interpreter checks every access) */
static void test_append_kernel(void **state) {
  (void)state;
  static const char *const targets[] = {NULL, "host", "gfx90a-emu"};
  for (int ti = 0; ti < 3; ti++)
    for (int s = 0; s < 3; s++) {
      pg_case c = {.desc = {.dtype = s == 1 ? KN_BF16 : KN_F16, .head_dim = s == 2 ? 40 : 64,
                            .layout = KN_ATTN_PAGED}};
      shape_of(&c, s * 2 + ti);
      const int nnew = 1 + s;
      for (int b = 0; b < c.batch; b++) c.len[b] += nnew;
      pg_prepare(&c);
      for (int b = 0; b < c.batch; b++) c.seqlens[b] -= nnew;
      pg_data x, y;
      data_make(&c, &x);
      data_make(&c, &y);
      memcpy(y.k, x.k, x.nk * x.es), memcpy(y.v, x.v, x.nk * x.es);
      const int B = c.batch, HK = c.kv_heads, D = c.desc.head_dim, PS = c.page_size;
      size_t nn = (size_t)B * nnew * HK * D;
      void *kn = malloc(nn * x.es), *vn = malloc(nn * x.es);
      double *scratch = malloc(nn * 8);
      fill(c.desc.dtype, kn, scratch, nn, x.es, false);
      fill(c.desc.dtype, vn, scratch, nn, x.es, false);
      int64_t pool[3] = {(int64_t)PS * HK * D, D, (int64_t)HK * D};
      int64_t ks[3] = {(int64_t)nnew * HK * D, D, (int64_t)HK * D};   /* (B, Nnew, HK, D) */
      int64_t vs[3] = {(int64_t)HK * nnew * D, (int64_t)nnew * D, D}; /* (B, HK, Nnew, D) */
      kn_paged_append ap = {.batch = B, .kv_heads = HK, .head_dim = D, .seqlen_new = nnew,
                            .page_size = PS, .num_pages = c.num_pages, .max_pages = c.max_pages,
                            .elem_size = x.es, .block_table = c.table, .cache_seqlens = c.seqlens,
                            .table_stride = c.max_pages, .k_pool = x.k, .v_pool = x.v,
                            .k_new = kn, .v_new = vn};
      memcpy(ap.k_pool_stride, pool, sizeof pool), memcpy(ap.v_pool_stride, pool, sizeof pool);
      memcpy(ap.k_new_stride, ks, sizeof ks), memcpy(ap.v_new_stride, vs, sizeof vs);
      kn_diag diag;
      if (kn_attn_paged_append(&ap, &diag)) fail_msg("append: %s", diag.message);
      kn_module *m = kn_module_new("<append>");
      kn_func *f = kn_paged_append_build(m, c.desc.dtype, D, &diag);
      if (!f) fail_msg("append kernel: %s", diag.message);
      kn_argval a[KN_PAGED_APPEND_NPARAMS] = {
          {.p = y.k}, {.p = y.v}, {.p = kn}, {.p = vn}, {.p = c.table}, {.p = c.seqlens},
          {.i = PS}, {.i = c.num_pages}, {.i = c.max_pages}, {.i = HK}, {.i = c.max_pages},
          {.i = pool[0]}, {.i = pool[1]}, {.i = pool[2]}, {.i = pool[0]}, {.i = pool[1]},
          {.i = pool[2]}, {.i = ks[0]}, {.i = ks[1]}, {.i = ks[2]}, {.i = vs[0]}, {.i = vs[1]},
          {.i = vs[2]}};
      kn_region regions[] = {{y.k, y.nk * y.es}, {y.v, y.nk * y.es}, {kn, nn * x.es},
                             {vn, nn * x.es}, {c.table, sizeof(int32_t) * (size_t)(B * c.max_pages)},
                             {c.seqlens, sizeof(int32_t) * (size_t)B}};
      int grid[3] = {nnew, B * HK, 1};
      if (run_on_target(targets[ti], m, f, a, grid, regions, 6, NULL, "kv_append", &diag))
        fail_msg("kv_append on %s: %s", targets[ti] ? targets[ti] : "interp", diag.message);
      assert_memory_equal(x.k, y.k, x.nk * x.es);
      assert_memory_equal(x.v, y.v, x.nk * x.es);
      if (!targets[ti]) {  /* hostile positions and pages: nothing outside the pool */
        c.seqlens[0] = c.max_pages * PS;  /* every row past the table */
        c.seqlens[1 % B] = -3;
        for (int i = 0; i < B * c.max_pages; i++) c.table[i] = i % 2 ? INT32_MAX : -9;
        memcpy(x.k, y.k, x.nk * x.es);
        if (kn_interp_run(f, a, grid, regions, 6, NULL, &diag))
          fail_msg("kv_append, hostile table: %s", diag.message);
        if (B == 1) assert_memory_equal(x.k, y.k, x.nk * x.es);  /* all past: nothing stored */
      }
      kn_module_free(m);
      free(kn), free(vn), free(scratch);
      data_free(&x), data_free(&y);
      pg_free(&c);
    }
}

/* ---- 5: code objects and PTX at the default tilings ------------------------------------------ */

static void test_code(void **state) {
  (void)state;
  pg_case cs[16];
  int n = case_list(cs, KN_F16, 128), checked = 0;
  char ptxas[512];
  kn_diag d;
  bool have_ptxas = kn_ptxas_find(ptxas, sizeof ptxas, &d) == KN_OK;
  static const char *const targets[] = {"gfx90a", "gfx942", "sm_80", "sm_90a"};
  static const int dims[] = {64, 128, 256};
  for (int ti = 0; ti < 4; ti++)
    for (int di = 0; di < 3; di++) {
      const kn_target *t = kn_target_get(targets[ti]);
      assert_non_null(t);
      if (t->arch->isa == KN_ISA_NVPTX && (!have_ptxas || dims[di] > 128)) continue;
      for (int i = 0; i < n; i++) {
        if (!test_take(3)) continue;   /* reduced: every third, rotating over targets, dims */
        kn_attn_desc desc = cs[i].desc;
        desc.head_dim = dims[di];
        kn_attn_config cfg = kn_attn_default_config(t->arch, &desc);
        kn_module *m = kn_module_new("<paged>");
        if (!kn_attn_fwd_build(m, &desc, &cfg, &d)) fail_msg("%s: %s", cs[i].name, d.message);
        kn_artifact a;
        if (kn_compile_artifact(m, "attn_fwd", t, NULL, &a, &d))
          fail_msg("%s on %s: %s", cs[i].name, t->name, d.rendered);
        kn_module_free(m);
        int spills = artifact_spills(&a, t->arch, "attn_fwd");
        kn_artifact_free(&a);
        if (verbose() || spills)
          printf("  paged %s on %s D%d at %dx%d w%d: %d spill units\n", cs[i].name, t->name,
                 dims[di], cfg.block_m, cfg.block_n, cfg.warps, spills);
        if (spills)
          fail_msg("paged %s on %s D%d at its default %dx%d w%d: %d spill units", cs[i].name,
                   t->name, dims[di], cfg.block_m, cfg.block_n, cfg.warps, spills);
        checked++;
      }
      /* and the append kernel of this head dim */
      kn_module *m = kn_module_new("<append>");
      if (!kn_paged_append_build(m, KN_F16, dims[di], &d)) fail_msg("kv_append: %s", d.message);
      kn_artifact a;
      if (kn_compile_artifact(m, "kv_append", t, NULL, &a, &d))
        fail_msg("kv_append on %s: %s", t->name, d.rendered);
      kn_module_free(m);
      int spills = artifact_spills(&a, t->arch, "kv_append");
      kn_artifact_free(&a);
      if (spills) fail_msg("kv_append on %s D%d: %d spill units", t->name, dims[di], spills);
      checked++;
    }
  printf("[ paged ] %d kernels compiled (gfx90a, gfx942%s)\n", checked,
         have_ptxas ? ", sm_80, sm_90a through ptxas" : "; no ptxas: NVIDIA skipped");
}

/* ---- 6: the API on the host ----------------------------------------------------------------- */

static kiln_context *host_context(void) {
  kiln_context_options co = {.no_cache = 1, .device = "host"};
  kiln_context *ctx = NULL;
  if (kiln_context_create(&co, &ctx)) fail_msg("context: %s", kiln_last_error());
  return ctx;
}

/* kiln_forward of case c (its lengths after appending nnew rows) on the host: q and o in
 * FlashAttention's (B, Nq, H, D), k_new / v_new (B, nnew, HK, D), every capacity described;
 * the status, and on success the check against the reference */
static kiln_status api_run(kiln_context *ctx, pg_case *c, int nnew, void (*edit)(kiln_attn_args *)) {
  for (int b = 0; b < c->batch; b++) c->len[b] += nnew;
  pg_prepare(c);
  for (int b = 0; b < c->batch; b++) c->seqlens[b] -= nnew;
  pg_data x;
  data_make(c, &x);
  const int B = c->batch, H = c->heads, HK = c->kv_heads, D = c->desc.head_dim, Nq = c->seqlen_q;
  size_t nn = (size_t)B * nnew * HK * D;
  void *kn = malloc(nn * x.es + 2), *vn = malloc(nn * x.es + 2);
  double *knd = malloc(nn * 8 + 8), *vnd = malloc(nn * 8 + 8);
  fill(c->desc.dtype, kn, knd, nn, x.es, false);
  fill(c->desc.dtype, vn, vnd, nn, x.es, false);
  /* the (B, H, Nq, D) values the reference reads, laid out as (B, Nq, H, D) for the API */
  void *qf = malloc(x.nq * x.es + 2), *of = malloc(x.nq * x.es + 2);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < Nq; i++) {
        size_t from = (((size_t)b * H + h) * Nq + i) * D, to = (((size_t)b * Nq + i) * H + h) * D;
        memcpy((char *)qf + to * x.es, (char *)x.q + from * x.es, (size_t)D * x.es);
      }
  kiln_attn_desc pd = {.dtype = c->desc.dtype == KN_F16 ? KILN_F16 : KILN_F32,
                       .head_dim = D, .causal = c->desc.causal, .has_lse = c->desc.has_lse,
                       .window = c->desc.window, .softcap = c->desc.softcap,
                       .alibi = c->desc.alibi, .layout = KILN_LAYOUT_PAGED};
  kiln_kernel *k;
  if (kiln_prepare(ctx, &pd, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
  int64_t qs[3] = {(int64_t)Nq * H * D, D, (int64_t)H * D};
  kiln_attn_args a = {
      .q = qf, .k = x.k, .v = x.v, .o = of, .lse = x.lse, .batch = B, .heads = H,
      .kv_heads = HK, .seqlen_q = Nq, .window_left = c->va.window_left,
      .window_right = c->va.window_right, .softcap = c->va.softcap,
      .alibi_slopes = c->va.alibi_slopes, .alibi_stride = c->va.alibi_sb,
      .block_table = c->table, .cache_seqlens = c->seqlens, .page_size = c->page_size,
      .num_pages = c->num_pages, .max_pages = c->max_pages, .k_new = nnew ? kn : NULL,
      .v_new = nnew ? vn : NULL, .seqlen_new = nnew, .q_numel = (int64_t)x.nq,
      .k_numel = (int64_t)x.nk, .v_numel = (int64_t)x.nk, .o_numel = (int64_t)x.nq,
      .lse_numel = (int64_t)x.nl, .block_table_numel = (int64_t)B * c->max_pages,
      .k_new_numel = (int64_t)nn, .v_new_numel = (int64_t)nn,
      .alibi_numel = c->desc.alibi ? (int64_t)B * H : 0};
  memcpy(a.q_stride, qs, sizeof qs);
  memcpy(a.o_stride, qs, sizeof qs);
  if (edit) edit(&a);
  unsigned char *before = malloc(x.nk * x.es + 1);
  memcpy(before, x.k, x.nk * x.es);
  kiln_status st = kiln_forward(k, &a, NULL);
  if (st == KILN_OK) {
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < Nq; i++) {
          size_t to = (((size_t)b * H + h) * Nq + i) * D, from = (((size_t)b * Nq + i) * H + h) * D;
          memcpy((char *)x.o + to * x.es, (char *)of + from * x.es, (size_t)D * x.es);
        }
    ref_append(c, &x, knd, vnd, nnew);
    c->seqlen_new = nnew;
    check_reference(c, &x, "host (API)");
    c->seqlen_new = 0;
  } else {
    assert_memory_equal(before, x.k, x.nk * x.es);  /* a refused call appends nothing */
  }
  free(before), free(qf), free(of), free(kn), free(vn), free(knd), free(vnd);
  data_free(&x);
  pg_free(c);
  return st;
}

static void page_out(kiln_attn_args *a) { ((int32_t *)a->block_table)[0] = a->num_pages; }
static void long_seq(kiln_attn_args *a) { ((int32_t *)a->cache_seqlens)[1] = a->max_pages * a->page_size; }
static void bad_seqlen_k(kiln_attn_args *a) { a->seqlen_k = 7; }
static void small_table(kiln_attn_args *a) { a->block_table_numel -= 1; }
static void no_v_new(kiln_attn_args *a) { a->v_new = NULL; }
static void page_zero(kiln_attn_args *a) { a->page_size = 0; }
static void big_page(kiln_attn_args *a) { a->page_size = 257; }
static void small_pool(kiln_attn_args *a) { a->k_numel -= 1; }
static void small_new(kiln_attn_args *a) { a->v_new_numel -= 1; }

static void expect_invalid(kiln_context *ctx, pg_case c, void (*edit)(kiln_attn_args *),
                           const char *words) {
  assert_int_equal(api_run(ctx, &c, 2, edit), KILN_ERR_INVALID);
  if (!strstr(kiln_last_error(), words))
    fail_msg("expected \"%s\" in: %s", words, kiln_last_error());
}

static void test_api_paged(void **state) {
  (void)state;
  kiln_context *ctx = host_context();
  pg_case cs[16];
  case_list(cs, KN_F16, 64);
  static const int variants[] = {0, 1, 3, 5, 6};  /* plain, causal, window, softcap, alibi */
  for (int i = 0; i < 5; i++)
    for (int sh = 0; sh < 6; sh++) {
      pg_case c = cs[variants[i]];
      shape_of(&c, sh + i);
      assert_int_equal(api_run(ctx, &c, (sh + i) % 3, NULL), KILN_OK);
    }
  /* each variant: its paged prefill kernel (17, 20 and 40 query rows) and, for 1, 3 and 9
   * rows, the split-KV decode kernels reading the same pages (docs/serving.md): the combine
   * kernel and three split kernels, the gather one for pages of 1, the pages one for pages of
   * 16 and the in-page one (the host's block_n 64) for pages of 256; each call checked against
   * the reference above */
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 5 * 5);
  setenv("KILN_DECODE", "0", 1);  /* decode-shaped calls on the paged prefill kernel, as before */
  for (int sh = 0; sh < 2; sh++) {
    pg_case c = cs[1];
    shape_of(&c, sh);
    assert_int_equal(api_run(ctx, &c, 1, NULL), KILN_OK);
  }
  unsetenv("KILN_DECODE");
  pg_case c = cs[1];
  shape_of(&c, 0);
  expect_invalid(ctx, c, page_out, "block_table[0, 0]");
  expect_invalid(ctx, c, long_seq, "cache_seqlens[1]");
  expect_invalid(ctx, c, bad_seqlen_k, "seqlen_k 7");
  expect_invalid(ctx, c, small_table, "block_table holds");
  expect_invalid(ctx, c, no_v_new, "k_new and v_new");
  expect_invalid(ctx, c, page_zero, "page_size 0");
  expect_invalid(ctx, c, big_page, "page_size 257");
  expect_invalid(ctx, c, small_pool, "k holds");
  expect_invalid(ctx, c, small_new, "v_new holds");
  /* paged fields to a dense kernel; a paged kernel is not tuned */
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = 64};
  kiln_kernel *k;
  if (kiln_prepare(ctx, &pd, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
  char buf[64];
  int32_t one = 1;
  kiln_attn_args a = {.q = buf, .k = buf, .v = buf, .o = buf, .batch = 1, .heads = 1,
                      .kv_heads = 1, .seqlen_q = 1, .seqlen_k = 1, .block_table = &one};
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "KILN_LAYOUT_PAGED"));
  pd.layout = KILN_LAYOUT_PAGED;
  assert_int_equal(kiln_tune(ctx, &pd, NULL, NULL), KILN_ERR_UNSUPPORTED);
  kiln_context_destroy(ctx);
}

int main(void) {
  const char *e = getenv("KILN_TEST_SEED");
  seed0 = e ? strtoull(e, NULL, 10) : (uint64_t)time(NULL);
  rng = seed0;
  printf("[ paged ] seed %llu\n", (unsigned long long)seed0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_dense), cmocka_unit_test(test_clamped),
      cmocka_unit_test(test_append),          cmocka_unit_test(test_append_kernel),
      cmocka_unit_test(test_interp),
      cmocka_unit_test(test_host),            cmocka_unit_test(test_gfx90a_emu),
      cmocka_unit_test(test_gfx942_emu),      cmocka_unit_test(test_code),
      cmocka_unit_test(test_api_paged),
  };
  if (getenv("KILN_TEST_FILTER")) cmocka_set_test_filter(getenv("KILN_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
