/* test_fp8.c — fp8 inputs (docs/serving.md, "fp8 inputs and KV pages"): q, k, v or only the KV
 * (the pages of a paged cache) in an fp8 format with per-(batch, kv head) descale factors,
 * computed in f16 or bf16, against the float64 reference on the dequantised inputs.
 *
 * 1. The kernel on the interpreter, the host, gfx942-emu (e4m3fnuz, e5m2fnuz) and gfx90a-emu,
 *    for the dense, varlen and paged layouts: every fp8 format on the interpreter and the host,
 *    q in fp8 or in the compute dtype, ragged lengths (empty sequences, length 1, lengths off
 *    the blocks, pages in shuffled order, tables with unused entries), GQA and MQA, causal,
 *    softcap (a score modifier sees the dequantised score) and ALiBi, a NULL descale (1), and
 *    inputs small enough to be fp8 subnormals.  Fresh random data and descales every run.
 *    The split-KV decode kernels likewise (dense and paged, Nq 1 / 4 / 16, GQA 32/8, MQA, MHA,
 *    pages of 1, 16, 64, 256), split then combine through a NaN-filled workspace.
 * 2. Code: the fp8 kernels (the forward's and the split-KV decode kernel at their defaults)
 *    compile for gfx942 (e4m3fnuz) without VGPR spills and for sm_90a / sm_80 (e4m3; ptxas when
 *    it is installed; the decode kernel without spills there too).
 * 3. The API (host): kiln_prepare / kiln_forward with q_dtype / kv_dtype and q_descale /
 *    k_descale / v_descale for the three layouts (dense and paged calls of 1..16 query rows
 *    build the two decode kernels; KILN_DECODE=0 the prefill kernel), and the refusals: an fp8
 *    dtype for o, an f32 compute type, descales for a kernel without fp8 inputs, a backward of
 *    fp8 inputs, descales smaller than their described capacity (q_descale_numel, ...), rows
 *    that overlap (descale_stride < kv_heads), capacities of NULL descales.
 *
 * KILN_TEST_SEED=<n> replays the random inputs; KILN_TEST_VERBOSE=1 prints each case;
 * KILN_TEST_FILTER=test_decode* runs the tests whose names match.
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

#include "amdgpu.h"
#include "attn_internal.h"
#include "emu.h"
#include "interp.h"
#include "kiln.h"
#include "reduced.h"
#include "numeric.h"
#include "pipeline.h"
#include "ptxas.h"
#include "attn_test.h"
#include "target.h"

enum { MAXB = 6 };

/* one problem: the layout's buffers (raw, in the memory types) and their dequantised values as
 * doubles in the same layout (the reference reads those) */
typedef struct f8_case {
  const char *name;
  kn_attn_desc desc;
  int batch, heads, kv_heads, head_dim;
  int lq[MAXB], lk[MAXB];  /* dense / paged: lq[0] for every sequence; dense: lk[0] too */
  int page_size;
  bool no_q_descale;       /* q_descale NULL (1) */
  bool tiny;               /* some inputs far below 1: fp8 subnormals */
  /* derived */
  int seqlen_q, seqlen_k, total_q, total_k, num_pages, max_pages;
  int32_t cu_q[MAXB + 1], cu_k[MAXB + 1], lens[MAXB];
  int32_t *table;
  float *descale[3];        /* q, k, v: (B, HK) */
  float slopes[256];
  size_t nq, nk;            /* elements of q/o and of k/v (a pool when paged) */
  void *q, *k, *v, *o;
  float *lse;
  double *qd, *kd, *vd, *od, *ld;
  int *k_owner;             /* paged: the sequence owning each page (-1: none) */
} f8_case;

static bool is_paged(const f8_case *c) { return c->desc.layout == KN_ATTN_PAGED; }
static bool is_varlen(const f8_case *c) { return c->desc.layout == KN_ATTN_VARLEN; }

/* the (batch, kv head) an element of q (which 0) or k / v (1) belongs to */
static void owner(const f8_case *c, int which, size_t idx, int *b, int *hk) {
  const size_t D = (size_t)c->head_dim, H = (size_t)c->heads, HK = (size_t)c->kv_heads;
  const int group = c->heads / c->kv_heads;
  if (which == 0) {
    size_t h;
    if (is_varlen(c)) {
      size_t t = idx / (H * D);
      h = idx / D % H;
      *b = 0;
      for (int s = 0; s < c->batch; s++)
        if ((int)t >= c->cu_q[s] && (int)t < c->cu_q[s + 1]) *b = s;
    } else {
      *b = (int)(idx / (H * (size_t)c->seqlen_q * D));
      h = idx / ((size_t)c->seqlen_q * D) % H;
    }
    *hk = (int)h / group;
    return;
  }
  if (is_varlen(c)) {
    size_t t = idx / (HK * D);
    *hk = (int)(idx / D % HK);
    *b = 0;
    for (int s = 0; s < c->batch; s++)
      if ((int)t >= c->cu_k[s] && (int)t < c->cu_k[s + 1]) *b = s;
  } else if (is_paged(c)) {
    size_t page = idx / ((size_t)c->page_size * HK * D);
    *hk = (int)(idx / D % HK);
    *b = c->k_owner[page] < 0 ? 0 : c->k_owner[page];
  } else {
    *b = (int)(idx / (HK * (size_t)c->seqlen_k * D));
    *hk = (int)(idx / ((size_t)c->seqlen_k * D) % HK);
  }
}

/* x / s in format t and its dequantised value; t not fp8: rounded to t, s ignored */
static double quantise(kn_scalar t, double x, double s, void *at) {
  if (!kn_scalar_is_fp8(t)) {
    kn_store_elem(t, at, x);
    return kn_load_elem(t, at);
  }
  uint8_t byte = (uint8_t)kn_encode(t, x / s);
  *(uint8_t *)at = byte;
  return kn_decode(t, byte) * s;
}

static double input(const f8_case *c) {
  double x = unif(-2, 2);
  return c->tiny && irand(0, 3) == 0 ? x * 1e-3 : x;
}

static void fill(f8_case *c, int which, kn_scalar t, void *buf, double *dq, size_t n) {
  size_t es = kn_scalar_size(t);
  for (size_t i = 0; i < n; i++) {
    int b, hk;
    owner(c, which ? 1 : 0, i, &b, &hk);
    const float *ds = c->descale[which];
    double s = ds ? ds[b * c->kv_heads + hk] : 1.0;
    dq[i] = quantise(t, input(c), s, (char *)buf + i * es);
  }
}

static void prepare(f8_case *c) {
  const kn_attn_desc *d = &c->desc;
  const int B = c->batch, H = c->heads, HK = c->kv_heads, D = c->head_dim;
  if (is_varlen(c)) {
    c->cu_q[0] = c->cu_k[0] = 0;
    c->seqlen_q = c->seqlen_k = 0;
    for (int b = 0; b < B; b++) {
      c->cu_q[b + 1] = c->cu_q[b] + c->lq[b], c->cu_k[b + 1] = c->cu_k[b] + c->lk[b];
      if (c->lq[b] > c->seqlen_q) c->seqlen_q = c->lq[b];
      if (c->lk[b] > c->seqlen_k) c->seqlen_k = c->lk[b];
    }
    c->total_q = c->cu_q[B] + 1, c->total_k = c->cu_k[B] + 2;  /* rows no sequence owns */
    c->nq = (size_t)c->total_q * H * D, c->nk = (size_t)c->total_k * HK * D;
  } else if (is_paged(c)) {
    c->seqlen_q = c->lq[0];
    int need = 0, most = 1;
    for (int b = 0; b < B; b++) {
      int p = (c->lk[b] + c->page_size - 1) / c->page_size;
      need += p;
      if (p > most) most = p;
      c->lens[b] = c->lk[b];
    }
    c->max_pages = most + 1;  /* an unused tail entry per sequence */
    c->num_pages = need + 1;  /* a spare page */
    c->seqlen_k = c->max_pages * c->page_size;
    c->table = malloc(sizeof(int32_t) * (size_t)(B * c->max_pages) + 4);
    c->k_owner = malloc(sizeof(int) * (size_t)c->num_pages);
    int *perm = malloc(sizeof(int) * (size_t)c->num_pages);
    for (int i = 0; i < c->num_pages; i++) perm[i] = i, c->k_owner[i] = -1;
    for (int i = c->num_pages - 1; i > 0; i--) {  /* pages in shuffled order */
      int j = irand(0, i), t = perm[i];
      perm[i] = perm[j], perm[j] = t;
    }
    int at = 0;
    for (int b = 0; b < B; b++)
      for (int i = 0; i < c->max_pages; i++) {
        bool used = i * c->page_size < c->lk[b];
        c->table[b * c->max_pages + i] = used ? perm[at] : 1000 + i;  /* unused: no page */
        if (used) c->k_owner[perm[at++]] = b;
      }
    free(perm);
    c->nq = (size_t)B * H * c->seqlen_q * D;
    c->nk = (size_t)c->num_pages * c->page_size * HK * D;
  } else {
    c->seqlen_q = c->lq[0], c->seqlen_k = c->lk[0];
    c->nq = (size_t)B * H * c->seqlen_q * D, c->nk = (size_t)B * HK * c->seqlen_k * D;
  }
  const kn_scalar qt = kn_attn_q_type(d), kt = kn_attn_kv_type(d), dt = d->dtype;
  const kn_scalar ts[3] = {qt, kt, kt};
  for (int w = 0; w < 3; w++) {
    c->descale[w] = NULL;
    if (!kn_scalar_is_fp8(ts[w]) || (w == 0 && c->no_q_descale)) continue;
    c->descale[w] = malloc(sizeof(float) * (size_t)(B * HK) + 4);
    /* the raw values span about half the format's range, as a per-tensor amax scaling does */
    for (int i = 0; i < B * HK; i++)
      c->descale[w][i] = (float)(4.0 * unif(0.7, 1.4) / kn_max_finite(ts[w]));
  }
  c->q = malloc(c->nq * kn_scalar_size(qt) + 16), c->o = malloc(c->nq * kn_scalar_size(dt) + 16);
  c->k = malloc(c->nk * kn_scalar_size(kt) + 16), c->v = malloc(c->nk * kn_scalar_size(kt) + 16);
  size_t nl = c->nq / (size_t)D;
  c->lse = malloc(nl * 4 + 16);
  c->qd = malloc(c->nq * 8 + 8), c->od = malloc(c->nq * 8 + 8), c->ld = malloc(nl * 8 + 8);
  c->kd = malloc(c->nk * 8 + 8), c->vd = malloc(c->nk * 8 + 8);
  assert_true(c->q && c->o && c->k && c->v && c->lse && c->qd && c->od && c->ld && c->kd && c->vd);
  fill(c, 0, qt, c->q, c->qd, c->nq);
  fill(c, 1, kt, c->k, c->kd, c->nk);
  fill(c, 2, kt, c->v, c->vd, c->nk);
  for (size_t i = 0; i < c->nq; i++) kn_store_elem(dt, (char *)c->o + i * kn_scalar_size(dt), NAN), c->od[i] = NAN;
  for (size_t i = 0; i < nl; i++) c->lse[i] = NAN, c->ld[i] = NAN;
  for (int i = 0; i < B * H && i < 256; i++) c->slopes[i] = (float)unif(0.01, 0.5);
}

static void release(f8_case *c) {
  free(c->q), free(c->k), free(c->v), free(c->o), free(c->lse);
  free(c->qd), free(c->kd), free(c->vd), free(c->od), free(c->ld);
  for (int w = 0; w < 3; w++) free(c->descale[w]);
  free(c->table), free(c->k_owner);
}

static kn_attn_problem problem(const f8_case *c) {
  return (kn_attn_problem){
      .batch = c->batch, .heads = c->heads, .kv_heads = c->kv_heads, .seqlen_q = c->seqlen_q,
      .seqlen_k = c->seqlen_k, .cu_seqlens_q = c->cu_q, .cu_seqlens_k = c->cu_k,
      .total_q = c->total_q, .total_k = c->total_k, .block_table = c->table,
      .cache_seqlens = c->lens, .page_size = c->page_size, .num_pages = c->num_pages,
      .max_pages = c->max_pages, .q_descale = c->descale[0], .k_descale = c->descale[1],
      .v_descale = c->descale[2]};
}

static kn_attn_vargs vargs(f8_case *c) {
  return (kn_attn_vargs){.softcap = 3.5f, .alibi_slopes = c->slopes, .alibi_sb = c->heads};
}

static double abs_err(double got, double want) {
  if (isinf(want) || isinf(got)) return got == want ? 0 : INFINITY;
  double e = fabs(got - want);
  return e == e ? e : INFINITY;
}

/* o and lse against the reference (rows the reference leaves NaN must stay NaN) */
static void compare(const f8_case *c, const char *target) {
  const kn_scalar dt = c->desc.dtype;
  double err = 0, lerr = 0;
  for (size_t i = 0; i < c->nq; i++) {
    double got = kn_load_elem(dt, (char *)c->o + i * kn_scalar_size(dt)), want = c->od[i];
    double e = isnan(want) ? (isnan(got) ? 0 : INFINITY) : abs_err(got, want);
    if (e > err) err = e;
  }
  for (size_t i = 0; c->desc.has_lse && i < c->nq / (size_t)c->head_dim; i++) {
    double want = c->ld[i], got = c->lse[i];
    double e = isnan(want) ? (isnan(got) ? 0 : INFINITY) : abs_err(got, want);
    if (e > lerr) lerr = e;
  }
  double tol = kn_attn_tolerance(dt), ltol = 4 * kn_attn_lse_tolerance(dt);
  const char *qn = kn_scalar_name(kn_attn_q_type(&c->desc)),
             *kn = kn_scalar_name(kn_attn_kv_type(&c->desc));
  if (verbose())
    printf("    %-14s %-11s q %s kv %s -> %s D%d H%d/%d layout %d: err %.3g lse %.3g\n", c->name,
           target, qn, kn, kn_scalar_name(dt), c->head_dim, c->heads, c->kv_heads,
           c->desc.layout, err, lerr);
  if (!(err <= tol) || !(lerr <= ltol))
    fail_msg("%s on %s (seed %llu, q %s kv %s -> %s, D%d H%d/%d, layout %d): err O %.3g (tol "
             "%.3g), lse %.3g (tol %.3g)", c->name, target, (unsigned long long)seed0, qn, kn,
             kn_scalar_name(dt), c->head_dim, c->heads, c->kv_heads, c->desc.layout, err, tol,
             lerr, ltol);
}

static void reference(f8_case *c) {
  kn_attn_problem p = problem(c);
  kn_attn_vargs va = vargs(c);
  kn_diag diag;
  if (kn_attn_reference_v(&c->desc, NULL, &p, &va, c->qd, c->kd, c->vd, c->od,
                          c->desc.has_lse ? c->ld : NULL, &diag))
    fail_msg("%s: reference: %s", c->name, diag.message);
}

/* the case's q, k, v, o and lse as the kernels may touch them (in their memory formats) */
static void io_regions(const f8_case *c, kn_region io[5]) {
  const kn_attn_desc *d = &c->desc;
  const size_t qs = kn_scalar_size(kn_attn_q_type(d)), ks = kn_scalar_size(kn_attn_kv_type(d));
  io[0] = (kn_region){c->q, c->nq * qs};
  io[1] = (kn_region){c->k, c->nk * ks};
  io[2] = (kn_region){c->v, c->nk * ks};
  io[3] = (kn_region){c->o, c->nq * kn_scalar_size(d->dtype)};
  io[4] = (kn_region){c->lse, c->nq / (size_t)c->head_dim * 4};
}

/* builds the kernel, runs it on target (NULL: the interpreter) and checks it */
static void run_case(const char *target, f8_case *c, bool dflt) {
  prepare(c);
  const kn_attn_desc *d = &c->desc;
  const kn_target *t = target_named(target);
  kn_attn_config cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 2};
  if (dflt) cfg = kn_attn_default_config(t ? t->arch : NULL, d);
  /* the emulated AMD targets: K/V by buffer loads, as the API prepares them (off32) */
  if (dflt) cfg.off32 = kn_attn_off32_applies(t ? t->arch : NULL, d);
  kn_diag diag;
  kn_module *m = kn_module_new("<fp8>");
  kn_func *f = kn_attn_fwd_build(m, d, &cfg, &diag);
  if (!f) fail_msg("%s: build: %s", c->name, diag.message);
  kn_attn_sig sig;
  if (kn_attn_signature(d, &sig, &diag)) fail_msg("%s: signature: %s", c->name, diag.message);
  kn_attn_problem p = problem(c);
  kn_attn_vargs va = vargs(c);
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[3];
  if (kn_attn_fill_args(d, &sig, &cfg, &p, c->q, c->k, c->v, c->o, c->lse, &va, args, grid, &diag))
    fail_msg("%s: args: %s", c->name, diag.message);
  kn_region regions[KN_ATTN_MAX_PARAMS];
  io_regions(c, regions);
  int nreg = 5;
  kn_argval scratch[KN_ATTN_MAX_PARAMS];
  memcpy(scratch, args, sizeof scratch);
  int n = kn_attn_fill_vargs(d, &sig, &p, &va, scratch, regions + nreg, &diag);
  assert_true(n >= 0);
  nreg += n;
  int rc = grid[0] > 0 && grid[1] > 0
               ? run_on_target(target, m, f, args, grid, regions, nreg, NULL, c->name, &diag)
               : 0;
  if (rc) fail_msg("%s on %s (seed %llu): %s", c->name, target ? target : "interp",
                   (unsigned long long)seed0, diag.message);
  reference(c);
  compare(c, target ? target : "interp");
  kn_module_free(m);
  release(c);
}

/* the split-KV decode kernels (templates/attn_decode.c) on the dense or paged case c, on target
 * (NULL: the interpreter), at the decode default tiling of target when dflt, else 16x16; `splits`
 * pieces (0: the heuristic's) */
static void run_decode_case(const char *target, f8_case *c, bool dflt, int splits) {
  prepare(c);
  const kn_attn_desc *d = &c->desc;
  const kn_target *t = target_named(target);
  kn_attn_config cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 2};
  if (dflt) cfg = kn_attn_decode_default_config(t ? t->arch : NULL, d);
  kn_attn_problem p = problem(c);
  kn_attn_vargs va = vargs(c);
  kn_region io[5];
  io_regions(c, io);
  run_decode_on_target(target, d, &cfg, &p, &va, splits, io, c->name);
  reference(c);
  char tn[64];
  snprintf(tn, sizeof tn, "%s decode", target ? target : "interp");
  compare(c, tn);
  release(c);
}

/* fp8 decode (1, 4 or 16 query rows against ragged KV, dense and paged) on one target: GQA 32/8,
 * MQA and MHA, pages of 1, 16, 64 and 256 in shuffled order with unused table entries, empty
 * sequences, lengths on and next to block and page boundaries; q in fp8 or in dtype, plain,
 * causal, softcap (the dequantised score), ALiBi (each packed row its own head's slope), a NULL
 * q_descale, fp8 subnormals; pieces from the heuristic's to one per block */
static int decode_sweep(const char *target, kn_scalar dt, const kn_scalar *fmts, int nf, int D,
                        int nshapes) {
  static const struct { int B, H, HK, nq, lk[4], ps, splits; } dense[] = {
      {2, 32, 8, 1, {1000}, 0, 0},  {3, 8, 1, 4, {65}, 0, 3},  {1, 8, 2, 16, {300}, 0, 2},
      {2, 4, 4, 1, {1}, 0, 0},      {1, 32, 8, 4, {129}, 0, 100},
  };
  static const struct { int B, H, HK, nq, lk[4], ps, splits; } paged[] = {
      {3, 32, 8, 1, {0, 1, 300}, 16, 0},  {3, 8, 1, 4, {33, 0, 7}, 1, 3},
      {2, 8, 2, 16, {64, 129}, 64, 2},    {2, 4, 1, 1, {256, 300}, 256, 100},
      {2, 32, 8, 4, {17, 1000}, 16, 0},
  };
  static const struct { const char *name; int causal; bool softcap, alibi, qf8, noqd, tiny; } vs[] = {
      {"dec-plain", 0, false, false, true, false, false},
      {"dec-causal-kv", KN_CAUSAL_BOTTOM_RIGHT, false, false, false, false, true},
      {"dec-softcap", 0, true, false, true, true, false},
      {"dec-alibi+causal", KN_CAUSAL_BOTTOM_RIGHT, false, true, false, false, false},
  };
  const int nv = (int)(sizeof vs / sizeof vs[0]);
  int runs = 0;
  for (int fi = 0; fi < nf; fi++)
    for (int layout = 0; layout < 3; layout += 2)
      for (int si = 0; si < nshapes; si++) {
        /* reduced (KILN_TEST_REDUCED): every second case of the nest, rotating */
        if (!test_take(2)) continue;
        const bool pg = layout == KN_ATTN_PAGED;
        const int w = (si + fi) % 5, vi = (si + fi + layout) % nv;
        f8_case c = {.name = vs[vi].name, .no_q_descale = vs[vi].noqd, .tiny = vs[vi].tiny};
        c.batch = pg ? paged[w].B : dense[w].B, c.heads = pg ? paged[w].H : dense[w].H;
        c.kv_heads = pg ? paged[w].HK : dense[w].HK, c.page_size = pg ? paged[w].ps : 0;
        c.lq[0] = pg ? paged[w].nq : dense[w].nq;
        memcpy(c.lk, pg ? paged[w].lk : dense[w].lk, sizeof paged[w].lk);
        c.head_dim = D;
        c.desc = (kn_attn_desc){.dtype = dt, .head_dim = D, .has_lse = true,
                                .causal = vs[vi].causal, .softcap = vs[vi].softcap,
                                .alibi = vs[vi].alibi, .layout = layout, .kv_dtype = fmts[fi],
                                .q_dtype = vs[vi].qf8 ? fmts[fi] : KN_I1};
        run_decode_case(target, &c, (si + fi) % 2 == 1, pg ? paged[w].splits : dense[w].splits);
        runs++;
      }
  printf("[ fp8 ] %-11s -> %s D%d: %d decode cases\n", target ? target : "interp",
         kn_scalar_name(dt), D, runs);
  return runs;
}

/* the cases of one target: q in fp8 (every variant) or in dtype (the KV cache case), three
 * layouts, ragged shapes */
static int sweep(const char *target, kn_scalar dt, const kn_scalar *fmts, int nf, int D) {
  static const struct { int B, H, HK, lq[MAXB], lk[MAXB], ps; } shapes[] = {
      {3, 4, 2, {1, 17, 0}, {1, 30, 45}, 16},
      {2, 3, 1, {33, 5}, {20, 0}, 5},
      {4, 2, 2, {16, 2, 9, 1}, {16, 64, 1, 17}, 1},
  };
  static const struct { const char *name; int causal; bool softcap, alibi, qf8, noqd, tiny; } vs[] = {
      {"plain", 0, false, false, true, false, false},
      {"causal", KN_CAUSAL_BOTTOM_RIGHT, false, false, true, false, true},
      {"softcap", 0, true, false, true, true, false},
      {"alibi+causal", KN_CAUSAL_BOTTOM_RIGHT, false, true, false, false, false},
      {"kv-only", KN_CAUSAL_BOTTOM_RIGHT, false, false, false, false, true},
  };
  int runs = 0;
  for (int fi = 0; fi < nf; fi++)
    for (int layout = 0; layout < 3; layout++)
      for (size_t vi = 0; vi < sizeof vs / sizeof vs[0]; vi++) {
        /* reduced (KILN_TEST_REDUCED): every second case of the nest, rotating */
        if (!test_take(2)) continue;
        int s = (int)(fi + layout + vi) % 3;
        f8_case c = {.name = vs[vi].name, .batch = shapes[s].B, .heads = shapes[s].H,
                     .kv_heads = shapes[s].HK, .page_size = shapes[s].ps,
                     .no_q_descale = vs[vi].noqd, .tiny = vs[vi].tiny};
        c.desc = (kn_attn_desc){.dtype = dt, .head_dim = D, .has_lse = true,
                                .causal = vs[vi].causal, .softcap = vs[vi].softcap,
                                .alibi = vs[vi].alibi, .layout = layout,
                                .kv_dtype = fmts[fi], .q_dtype = vs[vi].qf8 ? fmts[fi] : KN_I1};
        c.head_dim = D;
        memcpy(c.lq, shapes[s].lq, sizeof c.lq);
        memcpy(c.lk, shapes[s].lk, sizeof c.lk);
        if (layout == KN_ATTN_PAGED) c.lq[0] = vi % 2 ? 1 : 3;  /* decode-like queries */
        run_case(target, &c, (vi + (size_t)layout) % 2 == 1);
        runs++;
      }
  printf("[ fp8 ] %-11s -> %s D%d: %d cases\n", target ? target : "interp", kn_scalar_name(dt),
         D, runs);
  return runs;
}

static const kn_scalar all_fmts[] = {KN_F8E4M3, KN_F8E5M2, KN_F8E4M3FNUZ, KN_F8E5M2FNUZ};

static void test_interp(void **s) {
  (void)s;
  sweep(NULL, KN_F16, all_fmts, 4, 24);
  sweep(NULL, KN_BF16, all_fmts + 2, 1, 16);
}
static void test_host(void **s) {
  (void)s;
  sweep("host", KN_F16, all_fmts, 4, 64);
  sweep("host", KN_BF16, all_fmts, 2, 40);
}
static void test_gfx942_emu(void **s) {
  (void)s;
  sweep("gfx942-emu", KN_F16, all_fmts + 2, 2, 32);
}
static void test_gfx90a_emu(void **s) {
  (void)s;
  sweep("gfx90a-emu", KN_BF16, all_fmts, 2, 16);
}

/* the split-KV decode kernels over fp8 K / V (and q) */
static void test_decode_interp(void **s) {
  (void)s;
  decode_sweep(NULL, KN_F16, all_fmts, 4, 24, 3);
  decode_sweep(NULL, KN_BF16, all_fmts + 1, 1, 16, 5);
}
static void test_decode_host(void **s) {
  (void)s;
  decode_sweep("host", KN_F16, all_fmts, 4, 128, 5);
  decode_sweep("host", KN_BF16, all_fmts, 4, 64, 5);
}
static void test_decode_emu(void **s) {
  (void)s;
  decode_sweep("gfx942-emu", KN_F16, all_fmts + 2, 2, 64, 3);
  decode_sweep("gfx90a-emu", KN_BF16, all_fmts, 2, 32, 2);
}

/* ---- 1b: the GPU lowering's fp8 -> f32 / f16 / bf16 conversion, every byte ---------------------- */

/* each of the 256 bytes of every format, converted on gfx90a-emu and gfx942-emu (the GPU
 * lowering's integer decode) against the interpreter (ir/numeric.c): bit for bit, NaN as NaN */
static void test_cast_bytes(void **state) {
  (void)state;
  static const char *const to[] = {"f32", "f16", "bf16"};
  static const kn_scalar tos[] = {KN_F32, KN_F16, KN_BF16};
  int checked = 0;
  for (int fi = 0; fi < 4; fi++)
    for (int ti = 0; ti < 3; ti++) {
      const char *fn = kn_scalar_name(all_fmts[fi]);
      char text[1024];
      snprintf(text, sizeof text,
               "kernel @k(%%x: ptr<%s>, %%y: ptr<%s>) attrs {WARPS = 1} {\n"
               "  %%c0 = const 0 : i32\n"
               "  %%c1 = const 1 : i64\n"
               "  %%t = load %%x[%%c0] strides [%%c1] : tile<256x%s>\n"
               "  %%u = cast %%t : tile<256x%s>\n"
               "  store %%u, %%y[%%c0] strides [%%c1]\n"
               "  return\n"
               "}\n", fn, to[ti], fn, to[ti]);
      kn_diag d;
      kn_module *m = kn_parse("cast.tile", text, strlen(text), &d);
      if (!m) fail_msg("parse: %s", d.rendered);
      uint8_t bytes[256];
      for (int i = 0; i < 256; i++) bytes[i] = (uint8_t)i;
      const size_t es = kn_scalar_size(tos[ti]);
      char want[256 * 4], got[256 * 4];
      const int grid[3] = {1, 1, 1};
      kn_argval args[2] = {{.p = bytes}, {.p = want}};
      kn_region regions[2] = {{bytes, sizeof bytes}, {want, 256 * es}};
      if (kn_interp_run(kn_module_find(m, "k"), args, grid, regions, 2, NULL, &d))
        fail_msg("interp: %s", d.message);
      static const char *const emus[] = {"gfx90a-emu", "gfx942-emu"};
      for (int e = 0; e < 2; e++) {
        memset(got, 0x55, sizeof got);
        args[1].p = got, regions[1].data = got;
        if (run_named_on_target(emus[e], m, "k", args, grid, regions, 2, NULL, "cast", &d))
          fail_msg("%s: %s", emus[e], d.message);
        for (int i = 0; i < 256; i++) {
          double w = kn_load_elem(tos[ti], want + i * es), g = kn_load_elem(tos[ti], got + i * es);
          bool same = isnan(w) ? isnan(g) : !memcmp(want + i * es, got + i * es, es);
          if (!same)
            fail_msg("%s -> %s on %s: byte 0x%02x gives %.9g, the interpreter %.9g", fn, to[ti],
                     emus[e], i, g, w);
        }
        checked++;
      }
      kn_module_free(m);
    }
  printf("[ fp8 ] every byte of 4 formats to f32, f16, bf16: %d conversions match\n", checked);
}

/* ---- 2: code ----------------------------------------------------------------------------------- */

static void test_code(void **state) {
  (void)state;
  char ptxas[512];
  kn_diag d;
  bool have_ptxas = kn_ptxas_find(ptxas, sizeof ptxas, &d) == KN_OK;
  static const struct { const char *target; kn_scalar fmt; } ts[] = {
      {"gfx942", KN_F8E4M3FNUZ}, {"sm_90a", KN_F8E4M3}, {"sm_80", KN_F8E4M3}};
  int checked = 0;
  /* the forward (every layout; NVIDIA within test_variants' 32-byte bound) and the split-KV
   * decode kernel (dense and paged; no spills on any target: the combine kernel reads only f32,
   * dense's, test_decode), each at its default tiling */
  for (int dec = 0; dec < 2; dec++)
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++)
      for (int layout = 0; layout < 3; layout += dec ? 2 : 1)
        for (int D = 64; D <= 128; D *= 2)
          for (int qf8 = 0; qf8 < 2; qf8++) {
            const kn_target *t = kn_target_get(ts[ti].target);
            assert_non_null(t);
            const bool nv = t->arch->isa == KN_ISA_NVPTX;
            const char *name = dec ? "attn_decode" : "attn_fwd";
            kn_attn_desc desc = {.dtype = KN_F16, .head_dim = D,
                                 .causal = KN_CAUSAL_BOTTOM_RIGHT, .has_lse = true,
                                 .layout = layout, .kv_dtype = ts[ti].fmt,
                                 .q_dtype = qf8 ? ts[ti].fmt : KN_I1};
            kn_attn_config cfg = dec ? kn_attn_decode_default_config(t->arch, &desc)
                                     : kn_attn_default_config(t->arch, &desc);
            kn_module *m = kn_module_new("<fp8>");
            if (!(dec ? kn_attn_decode_build(m, &desc, &cfg, KN_DECODE_READ_ANY, &d)
                      : kn_attn_fwd_build(m, &desc, &cfg, &d)))
              fail_msg("%s build: %s", name, d.message);
            kn_artifact a;
            if (kn_compile_artifact(m, name, t, NULL, &a, &d))
              fail_msg("fp8 %s layout %d D%d on %s: %s", name, layout, D, t->name, d.rendered);
            kn_module_free(m);
            checked++;
            if (nv && !have_ptxas) {
              kn_artifact_free(&a);
              continue;
            }
            int spills = artifact_spills(&a, t->arch, name);
            kn_artifact_free(&a);
            if (verbose() || spills || dec)
              printf("  fp8 %s %s layout %d q %s D%d on %s at %dx%d w%d: %d spill units\n", name,
                     kn_scalar_name(ts[ti].fmt), layout, qf8 ? "fp8" : "f16", D, t->name,
                     cfg.block_m, cfg.block_n, cfg.warps, spills);
            if (spills > (nv && !dec ? 32 : 0))
              fail_msg("fp8 %s layout %d D%d on %s at its default %dx%d: %d spill units", name,
                       layout, D, t->name, cfg.block_m, cfg.block_n, spills);
          }
  /* the CUDA append kernel (kv_append) over fp8 pools: bytes copied, every GPU target */
  for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
    kn_module *m = kn_module_new("<fp8-append>");
    if (!kn_paged_append_build(m, ts[ti].fmt, 128, &d)) fail_msg("append: %s", d.message);
    kn_artifact a;
    if (kn_compile_artifact(m, "kv_append", kn_target_get(ts[ti].target), NULL, &a, &d))
      fail_msg("fp8 kv_append on %s: %s", ts[ti].target, d.rendered);
    kn_artifact_free(&a);
    kn_module_free(m);
    checked++;
  }
  printf("[ fp8 ] %d kernels compiled (gfx942, sm_90a, sm_80%s)\n", checked,
         have_ptxas ? ", ptxas" : "; no ptxas: PTX not assembled");
}

/* ---- 3: the API ---------------------------------------------------------------------------------- */

static kiln_dtype pub_of(kn_scalar s) {
  switch (s) {
  case KN_F16: return KILN_F16;
  case KN_BF16: return KILN_BF16;
  case KN_F8E4M3: return KILN_F8E4M3;
  case KN_F8E5M2: return KILN_F8E5M2;
  case KN_F8E4M3FNUZ: return KILN_F8E4M3FNUZ;
  case KN_F8E5M2FNUZ: return KILN_F8E5M2FNUZ;
  default: return 0;
  }
}

/* api_case with `append` rows of every paged sequence given as k_new / v_new instead (fp8
 * bytes, (B, append, HK, D)): the pool's copies are overwritten with NaN bytes first, and
 * kiln_forward must write them back through the table before attending */
static void api_case_append(kiln_context *ctx, f8_case *c, int append);

static void api_case(kiln_context *ctx, f8_case *c) { api_case_append(ctx, c, 0); }

static void api_case_append(kiln_context *ctx, f8_case *c, int append) {
  prepare(c);
  const kn_attn_desc *d = &c->desc;
  kiln_attn_desc pd = {.dtype = pub_of(d->dtype), .head_dim = c->head_dim, .causal = d->causal,
                       .has_lse = d->has_lse, .layout = d->layout,
                       .q_dtype = d->q_dtype == KN_I1 ? 0 : pub_of(d->q_dtype),
                       .kv_dtype = pub_of(kn_attn_kv_type(d))};
  kiln_kernel *k;
  if (kiln_prepare(ctx, &pd, NULL, &k)) fail_msg("%s: prepare: %s", c->name, kiln_last_error());
  kiln_kernel_info info;
  assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
  assert_int_equal(info.desc.kv_dtype, pd.kv_dtype);
  assert_int_equal(info.desc.q_dtype, pd.q_dtype);
  const int64_t D = c->head_dim, HK = c->kv_heads;
  kiln_attn_args a = {.q = c->q, .k = c->k, .v = c->v, .o = c->o, .lse = c->lse,
                      .batch = c->batch, .heads = c->heads, .kv_heads = c->kv_heads,
                      .seqlen_q = c->seqlen_q, .seqlen_k = c->seqlen_k,
                      .q_descale = c->descale[0], .k_descale = c->descale[1],
                      .v_descale = c->descale[2], .q_numel = (int64_t)c->nq,
                      .q_descale_numel = c->descale[0] ? (int64_t)c->batch * HK : 0,
                      .k_descale_numel = c->descale[1] ? (int64_t)c->batch * HK : 0,
                      .v_descale_numel = c->descale[2] ? (int64_t)c->batch * HK : 0,
                      .k_numel = (int64_t)c->nk, .v_numel = (int64_t)c->nk,
                      .o_numel = (int64_t)c->nq};
  if (is_varlen(c)) {
    a.cu_seqlens_q = c->cu_q, a.cu_seqlens_k = c->cu_k, a.total_q = c->total_q,
    a.total_k = c->total_k;
  }
  if (is_paged(c)) {
    a.seqlen_k = 0;
    a.block_table = c->table, a.cache_seqlens = c->lens, a.page_size = c->page_size,
    a.num_pages = c->num_pages, a.max_pages = c->max_pages;
    a.block_table_numel = (int64_t)c->batch * c->max_pages;
    /* the table's unused tail entries name no page: the host check reads only used entries */
  }
  uint8_t *kn = NULL, *vn = NULL;
  int32_t lens[MAXB];
  if (append) {
    assert_true(is_paged(c) && kn_scalar_size(kn_attn_kv_type(d)) == 1);
    const size_t row = (size_t)HK * D, n = (size_t)c->batch * append * row;
    kn = malloc(n), vn = malloc(n);
    assert_true(kn && vn);
    for (int b = 0; b < c->batch; b++) {
      assert_true(c->lens[b] >= append);
      lens[b] = c->lens[b] - append;
      for (int j = 0; j < append; j++) {
        int pos = lens[b] + j, page = c->table[b * c->max_pages + pos / c->page_size];
        size_t at = ((size_t)page * c->page_size + (size_t)(pos % c->page_size)) * row;
        size_t to = ((size_t)b * append + j) * row;
        memcpy(kn + to, (uint8_t *)c->k + at, row), memcpy(vn + to, (uint8_t *)c->v + at, row);
        memset((uint8_t *)c->k + at, 0x7f, row), memset((uint8_t *)c->v + at, 0x7f, row);
      }
    }
    a.cache_seqlens = lens, a.k_new = kn, a.v_new = vn, a.seqlen_new = append;
    a.k_new_numel = a.v_new_numel = (int64_t)n;
  }
  if (kiln_forward(k, &a, NULL)) fail_msg("%s: forward: %s", c->name, kiln_last_error());
  free(kn), free(vn);
  reference(c);
  compare(c, "api-host");
  release(c);
}

/* descales smaller than the (batch, kv_heads) rows the call describes, overlapping rows, and
 * capacities of NULL descales: KILN_ERR_INVALID before launch, naming the tensor */
static void descale_refusals(kiln_context *ctx) {
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = 16, .kv_dtype = KILN_F8E4M3};
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx, &pd, NULL, &k), KILN_OK);
  enum { B = 3, H = 4, HK = 2, N = 5, D = 16 };
  static uint16_t q[B * H * N * D], o[B * H * N * D];
  static uint8_t kv[B * HK * N * D];
  float ds[2 * B * HK + 8];
  for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) ds[i] = 0.5f;
  const kiln_attn_args base = {.q = q, .k = kv, .v = kv, .o = o, .batch = B, .heads = H,
                               .kv_heads = HK, .seqlen_q = N, .seqlen_k = N, .k_descale = ds,
                               .v_descale = ds, .k_descale_numel = B * HK,
                               .v_descale_numel = B * HK};
  kiln_attn_args a = base;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_OK);  /* exactly (B, HK) */
  a.v_descale_numel = B * HK - 1;  /* one kv head short */
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "v_descale holds 5 scales (v_descale_numel), but "
                                            "batch 3 x kv_heads 2 at descale_stride 2 reach 6"));
  a = base;
  a.descale_stride = HK + 3;  /* a padded batch stride: (B - 1) * 5 + HK = 12 */
  a.k_descale_numel = 11, a.v_descale_numel = 12;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "k_descale holds 11 scales"));
  a.k_descale_numel = 12;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_OK);
  a = base;
  a.descale_stride = HK - 1;  /* rows of two sequences overlap */
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "below kv_heads"));
  a = base;
  a.q_descale_numel = B * HK;  /* a capacity for a NULL descale */
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "q_descale is NULL"));
  a = base;
  a.k_descale_numel = -1;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "negative"));
  a = base;
  a.descale_stride = INT64_MAX / 2;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "2^63"));
  /* one query row: the decode kernels get the same checks */
  a = base;
  a.seqlen_q = 1, a.k_descale_numel = 1;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "k_descale holds 1 scales"));
}

static void test_api(void **state) {
  (void)state;
  kiln_context *ctx;
  kiln_context_options co = {.no_cache = 1, .device = "host"};
  if (kiln_context_create(&co, &ctx)) fail_msg("context: %s", kiln_last_error());
  /* dense with one query row (decode: the split-KV decode kernels), q in fp8 */
  f8_case c1 = {.name = "api-dense-decode", .batch = 2, .heads = 8, .kv_heads = 2,
                .head_dim = 64, .lq = {1}, .lk = {77},
                .desc = {.dtype = KN_F16, .head_dim = 64, .has_lse = true,
                         .causal = KN_CAUSAL_BOTTOM_RIGHT, .q_dtype = KN_F8E4M3,
                         .kv_dtype = KN_F8E4M3}};
  kiln_stats s0, s1, s2;
  kiln_context_stats(ctx, &s0);
  api_case(ctx, &c1);
  kiln_context_stats(ctx, &s1);
  /* the prefill kernel (kiln_prepare), then the split and combine kernels (the first decode) */
  assert_int_equal(s1.compiles, s0.compiles + 3);
  /* the same call with KILN_DECODE=0: the prefill kernel, memoised (nothing compiled) */
  setenv("KILN_DECODE", "0", 1);
  c1.name = "api-dense-decode-prefill";
  api_case(ctx, &c1);
  unsetenv("KILN_DECODE");
  kiln_context_stats(ctx, &s2);
  assert_int_equal(s2.compiles, s1.compiles);
  /* GQA 32/8 with 16 query rows (speculative drafts) over e5m2 KV, q f16 */
  f8_case c1b = {.name = "api-dense-decode-32/8", .batch = 2, .heads = 32, .kv_heads = 8,
                 .head_dim = 128, .lq = {16}, .lk = {300},
                 .desc = {.dtype = KN_F16, .head_dim = 128, .has_lse = true,
                          .causal = KN_CAUSAL_BOTTOM_RIGHT, .kv_dtype = KN_F8E5M2}};
  api_case(ctx, &c1b);
  f8_case c2 = {.name = "api-dense", .batch = 1, .heads = 4, .kv_heads = 4, .head_dim = 40,
                .lq = {70}, .lk = {33},
                .desc = {.dtype = KN_BF16, .head_dim = 40, .has_lse = true,
                         .q_dtype = KN_F8E5M2, .kv_dtype = KN_F8E5M2}};
  api_case(ctx, &c2);
  f8_case c3 = {.name = "api-varlen", .batch = 3, .heads = 4, .kv_heads = 1, .head_dim = 64,
                .lq = {9, 0, 40}, .lk = {9, 13, 70},
                .desc = {.dtype = KN_F16, .head_dim = 64, .has_lse = true,
                         .causal = KN_CAUSAL_BOTTOM_RIGHT, .layout = KN_ATTN_VARLEN,
                         .q_dtype = KN_F8E4M3FNUZ, .kv_dtype = KN_F8E4M3FNUZ}};
  api_case(ctx, &c3);
  f8_case c4 = {.name = "api-paged", .batch = 3, .heads = 8, .kv_heads = 2, .head_dim = 64,
                .lq = {4}, .lk = {31, 0, 100}, .page_size = 16,
                .desc = {.dtype = KN_F16, .head_dim = 64, .has_lse = true,
                         .causal = KN_CAUSAL_BOTTOM_RIGHT, .layout = KN_ATTN_PAGED,
                         .kv_dtype = KN_F8E4M3}};
  kiln_context_stats(ctx, &s0);
  api_case(ctx, &c4);
  kiln_context_stats(ctx, &s1);
  assert_int_equal(s1.compiles, s0.compiles + 3);  /* paged: prefill, then split and combine */
  /* fp8 rows appended to fp8 pages (kn_attn_paged_append copies bytes), then attended */
  f8_case c5 = {.name = "api-paged-append", .batch = 2, .heads = 4, .kv_heads = 2, .head_dim = 32,
                .lq = {3}, .lk = {19, 40}, .page_size = 16,
                .desc = {.dtype = KN_BF16, .head_dim = 32, .has_lse = true,
                         .causal = KN_CAUSAL_BOTTOM_RIGHT, .layout = KN_ATTN_PAGED,
                         .kv_dtype = KN_F8E5M2FNUZ}};
  api_case_append(ctx, &c5, 3);

  /* refusals */
  kiln_kernel *k;
  kiln_attn_desc bad = {.dtype = KILN_F8E4M3, .head_dim = 64};
  assert_int_equal(kiln_prepare(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "q_dtype / kv_dtype"));
  bad = (kiln_attn_desc){.dtype = KILN_F32, .head_dim = 64, .kv_dtype = KILN_F8E4M3};
  assert_int_equal(kiln_prepare(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "computed in f16 or bf16"));
  bad = (kiln_attn_desc){.dtype = KILN_F16, .head_dim = 64, .kv_dtype = KILN_F32};
  assert_int_equal(kiln_prepare(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "kv_dtype f32 is not supported"));
  bad = (kiln_attn_desc){.dtype = KILN_F16, .head_dim = 64, .kv_dtype = (kiln_dtype)99};
  assert_int_equal(kiln_prepare(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  bad = (kiln_attn_desc){.dtype = KILN_F16, .head_dim = 64, .kv_dtype = KILN_F8E4M3};
  assert_int_equal(kiln_prepare_backward(ctx, &bad, NULL, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "fp8"));
  /* descales for a kernel without fp8 inputs */
  kiln_attn_desc plain = {.dtype = KILN_F16, .head_dim = 16};
  assert_int_equal(kiln_prepare(ctx, &plain, NULL, &k), KILN_OK);
  uint16_t buf[4 * 16] = {0};
  float one = 1;
  kiln_attn_args a = {.q = buf, .k = buf, .v = buf, .o = buf, .batch = 1, .heads = 1,
                      .kv_heads = 1, .seqlen_q = 4, .seqlen_k = 4, .k_descale = &one};
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "not prepared with fp8 inputs"));
  a.k_descale = NULL, a.k_descale_numel = 4;
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "not prepared with fp8 inputs"));
  descale_refusals(ctx);
  /* the key names the input types, and only when set */
  assert_int_equal(kiln_dtype_name(KILN_F8E4M3FNUZ) != NULL, 1);
  assert_string_equal(kiln_dtype_name(KILN_F8E4M3FNUZ), "f8e4m3fnuz");
  kiln_context_destroy(ctx);
}

/* the descriptor key: unchanged without fp8 inputs, ";q=...;kv=..." with them */
static void test_key(void **state) {
  (void)state;
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 128, .causal = 1, .has_lse = true};
  char k[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(&d, k, sizeof k);
  assert_string_equal(k, "dtype=f16;d=128;causal=1;lse=1;window=0;softcap=0;alibi=0;bias=0;"
                         "doc=0;prefix=0;layout=0;mods=0");
  d.kv_dtype = KN_F8E4M3;
  kn_attn_desc_key(&d, k, sizeof k);
  assert_non_null(strstr(k, ";mods=0;kv=f8e4m3"));
  assert_null(strstr(k, "q="));
  d.q_dtype = KN_F8E4M3;
  kn_attn_desc_key(&d, k, sizeof k);
  assert_non_null(strstr(k, ";mods=0;q=f8e4m3;kv=f8e4m3"));
}

int main(void) {
  const char *env = getenv("KILN_TEST_SEED");
  seed0 = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 1000003u;
  rng = seed0;
  printf("[ fp8 ] seed %llu (KILN_TEST_SEED=%llu replays this run)\n",
         (unsigned long long)seed0, (unsigned long long)seed0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_key),        cmocka_unit_test(test_cast_bytes),
      cmocka_unit_test(test_interp),
      cmocka_unit_test(test_host),       cmocka_unit_test(test_gfx942_emu),
      cmocka_unit_test(test_gfx90a_emu), cmocka_unit_test(test_decode_interp),
      cmocka_unit_test(test_decode_host), cmocka_unit_test(test_decode_emu),
      cmocka_unit_test(test_code),
      cmocka_unit_test(test_api),
  };
  if (getenv("KILN_TEST_FILTER")) cmocka_set_test_filter(getenv("KILN_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
