/* test_backward.c — the attention backward (templates/attn_bwd.c, docs/backward.md) against its
 * float64 reference, and the reference against finite differences of the forward's.
 *
 * 1. The oracle: kn_attn_bwd_reference's dQ, dK, dV equal central differences of
 *    loss = sum(O * dO), O from the forward's float64 reference (attn_ref.c, which shares no
 *    code with the backward's), on tiny shapes: plain, causal both ways, GQA, window, softcap,
 *    ALiBi, a bias and a user score_mod.
 * 2. The derivative of score modifiers from their IR (kn_attn_mod_grad) against a difference
 *    quotient, and its refusals (a score cast to an integer, a load at the score) with clear
 *    errors.
 * 3. The kernels (pre, dK/dV, dQ) on the interpreter, the host and gfx90a-emu / gfx942-emu, on
 *    fresh random inputs with ragged lengths (not multiples of the blocks, seqlen_k above and
 *    below seqlen_q), odd head dims, GQA and MQA, causal both ways, window, softcap, ALiBi, bias,
 *    documents, a user score_mod and dropout (p 0.17 and 0.6, its mask from the forward's
 *    generator), f16 / bf16 / f32: every gradient within the dtype's
 *    tolerance of float64 and within 2x (plus a floor) of the error the same math makes rounded
 *    as the kernels round (the lowp reference); deterministic (two runs bit-identical).
 * 4. Code: the backward kernels at their default tilings compile for gfx90a / gfx942 (VGPR
 *    spills reported) and sm_80 / sm_90a (ptxas; skipped without it).
 * 5. Bad input: paged, head dim above 256, wgmma, a non-differentiable score_mod: clear errors.
 * 6. The API on the host: kiln_forward then kiln_backward (GQA and causal, softcap, a user
 *    score_mod with its tensor, varlen with dropout) against the float64 reference, and the
 *    errors of bad calls.
 * Varlen (docs/backward.md, "Varlen") runs through 1, 3, 4 and 6: packed sequences of ragged
 * lengths (empty ones on either side, length 1) with padding tokens after the last, which no
 * kernel may write.
 *
 * KILN_TEST_SEED=<n> replays the random inputs; KILN_TEST_VERBOSE=1 prints each case;
 * KILN_TEST_BWD_TILING=BM,BN,W[,WGMMA] compiles (4.) that tiling instead of the defaults;
 * KILN_TEST_BWD_DUMP=DIR writes the code (4.) compiled, one file per kernel;
 * KILN_TEST_BWD_ARCH=sm_90a compiles (4.) for that target only (with KILN_TEST_VERBOSE=1:
 * ptxas's registers and spills of each kernel);
 * KILN_TEST_FILTER=test_codegen runs the tests whose names match.
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

#include "attn_bwd.h"
#include "attn_internal.h"
#include "numeric.h"
#include "attn_test.h"
#include "objdump.h"
#include "kiln.h"

/* ---- one problem --------------------------------------------------------------------------- */

typedef struct bcase {
  const char *name;
  kn_attn_desc desc;
  int batch, heads, kv_heads, nq, nk;
  /* varlen (desc.layout KN_ATTN_VARLEN): the sequences' lengths (batch of each); nq / nk, the
   * max lengths, and the packed layout below are derived */
  const int *lq, *lk;
  int32_t cu_q[9], cu_k[9];
  int total_q, total_k;
  /* derived */
  uint64_t seed, offset;  /* dropout's generator (fresh per case) */
  kn_attn_vargs va;
  kn_attn_named_arg named[2];
  void *buf[4];
  int nbuf;
} bcase;

#define TEMP_SCORE_MOD                                                                            \
  "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, "                    \
  "%temp: ptr<f32>) -> (f32) {\n"                                                                 \
  "  %c1 = const 1 : i64\n"                                                                       \
  "  %h64 = cast %h : i64\n"                                                                      \
  "  %t = load %temp[%h64] strides [%c1] : f32\n"                                                 \
  "  %x = mul %score, %t : f32\n"                                                                 \
  "  %e = exp %x : f32\n"                                                                         \
  "  %one = const 1 : f32\n"                                                                      \
  "  %d = add %one, %e : f32\n"                                                                   \
  "  %l = log %d : f32\n"                                                                         \
  "  %out = mul %l, %score : f32\n"                                                               \
  "  return %out\n"                                                                               \
  "}\n"

/* a case: its name, shape (B, H, HK, Nq, Nk) and descriptor fields (the rest is derived) */
#define C(nm, b, h, hk, q, k, ...) \
  {.name = nm, .desc = {__VA_ARGS__}, .batch = b, .heads = h, .kv_heads = hk, .nq = q, .nk = k}
/* a varlen case: the lengths of its b sequences (int arrays), packed with a few tokens of
 * padding after the last sequence that no kernel may write */
#define V(nm, b, h, hk, LQ, LK, ...)                                                              \
  {.name = nm, .desc = {.layout = KN_ATTN_VARLEN, __VA_ARGS__}, .batch = b, .heads = h,        \
   .kv_heads = hk, .lq = (const int[])LQ, .lk = (const int[])LK}
#define L(...) {__VA_ARGS__}

static bool is_varlen(const bcase *c) { return c->desc.layout == KN_ATTN_VARLEN; }

/* varlen: the prefix sums, the totals (with padding) and the max lengths of the lengths */
static void varlen_shape(bcase *c) {
  if (!is_varlen(c)) return;
  KN_ASSERT(c->batch <= 8);
  c->cu_q[0] = c->cu_k[0] = 0;
  c->nq = c->nk = 0;
  for (int b = 0; b < c->batch; b++) {
    c->cu_q[b + 1] = c->cu_q[b] + c->lq[b];
    c->cu_k[b + 1] = c->cu_k[b] + c->lk[b];
    if (c->lq[b] > c->nq) c->nq = c->lq[b];
    if (c->lk[b] > c->nk) c->nk = c->lk[b];
  }
  c->total_q = c->cu_q[c->batch] + 3, c->total_k = c->cu_k[c->batch] + 2;
}

/* the token rows of q (and o, dO, dQ) and of k (v, dK, dV): packed, or batch x rows */
static size_t rows_q(const bcase *c) { return is_varlen(c) ? (size_t)c->total_q : (size_t)c->batch * c->nq; }
static size_t rows_k(const bcase *c) { return is_varlen(c) ? (size_t)c->total_k : (size_t)c->batch * c->nk; }

static void make_values(bcase *c) {
  const kn_attn_desc *d = &c->desc;
  kn_attn_vargs *va = &c->va;
  memset(va, 0, sizeof *va);
  varlen_shape(c);
  c->nbuf = 0;
  c->seed = next(), c->offset = next();  /* offset's carry into the counter's high word too */
  const int B = c->batch, H = c->heads;
  if (d->window) {
    va->window_left = irand(0, 3) == 0 ? -1 : irand(0, c->nk / 2 + 3);
    va->window_right = irand(0, 3) == 0 ? -1 : irand(0, 12);
  }
  if (d->softcap) va->softcap = (float)unif(0.5, 3);
  if (d->alibi) {
    float *s = malloc(sizeof *s * (size_t)(B * H));
    for (int i = 0; i < B * H; i++) s[i] = (float)unif(0.01, 0.6);
    va->alibi_slopes = s;
    va->alibi_sb = H;
    c->buf[c->nbuf++] = s;
  }
  if (d->bias) {
    size_t n = (size_t)B * H * c->nq * c->nk, es = kn_scalar_size(d->dtype);
    void *x = malloc(es * n);
    for (size_t i = 0; i < n; i++) kn_store_elem(d->dtype, (char *)x + i * es, unif(-2, 2));
    va->bias = x;
    va->bias_sb = (int64_t)H * c->nq * c->nk, va->bias_sh = (int64_t)c->nq * c->nk;
    va->bias_sm = c->nk;
    c->buf[c->nbuf++] = x;
  }
  if (d->document) {
    int32_t *qs = malloc(sizeof *qs * (size_t)(B * c->nq)), *ks = malloc(sizeof *ks * (size_t)(B * c->nk));
    for (int b = 0; b < B; b++) {
      int id = 0;
      for (int j = 0; j < c->nk; j++) {
        if (irand(0, 7) == 0) id++;
        ks[b * c->nk + j] = id;
      }
      id = 0;
      for (int i = 0; i < c->nq; i++) {
        if (irand(0, 7) == 0) id++;
        qs[b * c->nq + i] = id;
      }
    }
    va->q_seg = qs, va->k_seg = ks, va->q_seg_sb = c->nq, va->k_seg_sb = c->nk;
    c->buf[c->nbuf++] = qs;
    c->buf[c->nbuf++] = ks;
  }
  if (d->mods) {
    float *t = malloc(sizeof *t * (size_t)H);
    for (int i = 0; i < H; i++) t[i] = (float)unif(0.5, 1.5);
    c->named[0] = (kn_attn_named_arg){"temp", {.p = t}, sizeof *t * (size_t)H};
    va->mods = c->named, va->nmods = 1;
    c->buf[c->nbuf++] = t;
  }
}

static void free_values(bcase *c) {
  for (int i = 0; i < c->nbuf; i++) free(c->buf[i]);
  c->nbuf = 0;
}

static kn_attn_problem problem_of(const bcase *c) {
  return (kn_attn_problem){.batch = c->batch, .heads = c->heads, .kv_heads = c->kv_heads,
                           .seqlen_q = c->nq, .seqlen_k = c->nk, .dropout_seed = c->seed,
                           .dropout_offset = c->offset,
                           .cu_seqlens_q = is_varlen(c) ? c->cu_q : NULL,
                           .cu_seqlens_k = is_varlen(c) ? c->cu_k : NULL,
                           .total_q = is_varlen(c) ? c->total_q : 0,
                           .total_k = is_varlen(c) ? c->total_k : 0};
}

static double *rand_vec(size_t n, kn_scalar dt, double lo, double hi) {
  double *x = malloc(sizeof *x * (n ? n : 1));
  for (size_t i = 0; i < n; i++) x[i] = kn_round(dt, unif(lo, hi));
  return x;
}

/* loss = sum(O * dO) with O from the forward's float64 reference */
static double loss_of(bcase *c, const double *q, const double *k, const double *v,
                      const double *dout) {
  kn_attn_problem p = problem_of(c);
  size_t no = rows_q(c) * c->heads * c->desc.head_dim;
  double *o = calloc(no ? no : 1, sizeof *o);
  kn_diag diag;
  if (kn_attn_reference_v(&c->desc, NULL, &p, &c->va, q, k, v, o, NULL, &diag))
    fail_msg("reference: %s", diag.rendered);
  double l = 0;
  for (size_t i = 0; i < no; i++) l += o[i] * dout[i];
  free(o);
  return l;
}

/* 1. the backward reference against central differences of the forward reference */
static void fd_case(bcase *c) {
  make_values(c);
  const int D = c->desc.head_dim;
  const size_t nq = rows_q(c) * c->heads * D, nk = rows_k(c) * c->kv_heads * D;
  double *q = rand_vec(nq, KN_F32, -1.5, 1.5), *k = rand_vec(nk, KN_F32, -1.5, 1.5);
  double *v = rand_vec(nk, KN_F32, -1, 1), *dout = rand_vec(nq, KN_F32, -1, 1);
  double *g[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk), malloc(sizeof(double) * nk)};
  kn_attn_problem p = problem_of(c);
  kn_diag diag;
  if (kn_attn_bwd_reference(&c->desc, NULL, &p, &c->va, q, k, v, dout, false, g[0], g[1], g[2], &diag))
    fail_msg("%s: backward reference: %s", c->name, diag.rendered);
  double *x[3] = {q, k, v};
  size_t n[3] = {nq, nk, nk};
  double worst = 0, scale = 1e-3;
  for (int t = 0; t < 3; t++)
    for (size_t i = 0; i < n[t]; i++) {
      const double h = 1e-5, x0 = x[t][i];
      x[t][i] = x0 + h;
      double lp = loss_of(c, q, k, v, dout);
      x[t][i] = x0 - h;
      double lm = loss_of(c, q, k, v, dout);
      x[t][i] = x0;
      double fd = (lp - lm) / (2 * h), e = fabs(fd - g[t][i]);
      if (e > worst) worst = e;
      if (fabs(fd) > scale) scale = fabs(fd);
    }
  if (verbose()) printf("  fd %-24s max |fd - ref| = %.2e (largest gradient %.2f)\n", c->name, worst, scale);
  if (worst > 1e-6 * scale) fail_msg("%s: the reference's gradient differs from finite differences by %g", c->name, worst);
  for (int t = 0; t < 3; t++) free(g[t]);
  free(q), free(k), free(v), free(dout);
  free_values(c);
}

static void test_reference_fd(void **state) {
  (void)state;
  bcase cases[] = {
      C("plain", 1, 2, 2, 3, 4, .dtype = KN_F32, .head_dim = 3),
      C("causal gqa", 1, 2, 1, 4, 3, .dtype = KN_F32, .head_dim = 2, .causal = 1),
      C("causal top-left", 1, 1, 1, 3, 5, .dtype = KN_F32, .head_dim = 2, .causal = 2),
      C("window", 1, 1, 1, 5, 5, .dtype = KN_F32, .head_dim = 2, .window = true),
      C("softcap", 1, 1, 1, 3, 4, .dtype = KN_F32, .head_dim = 3, .softcap = true),
      C("alibi causal", 2, 1, 1, 3, 3, .dtype = KN_F32, .head_dim = 2, .alibi = true, .causal = 1),
      C("bias", 1, 2, 1, 2, 3, .dtype = KN_F32, .head_dim = 2, .bias = true),
      C("user score_mod", 1, 2, 2, 3, 3, .dtype = KN_F32, .head_dim = 2, .mods = TEMP_SCORE_MOD),
      V("varlen causal gqa", 3, 2, 1, L(3, 0, 2), L(2, 3, 1), .dtype = KN_F32, .head_dim = 2,
        .causal = 1),
      V("varlen dropout", 2, 1, 1, L(1, 4), L(4, 3), .dtype = KN_F32, .head_dim = 2,
        .dropout = 0.4f),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fd_case(&cases[i]);
}

/* ---- 2. derivatives of score modifiers ---------------------------------------------------------- */

static void grad_fd(const char *text, const char *fname, double cap) {
  kn_diag diag;
  kn_module *m = kn_parse("<grad>", text, strlen(text), &diag);
  if (!m || kn_verify(m, &diag)) fail_msg("parse: %s", diag.rendered);
  kn_func *f = kn_module_find(m, fname);
  kn_func *gf = kn_attn_mod_grad(m, f, &diag);
  if (!gf) fail_msg("grad: %s", diag.rendered);
  if (kn_verify(m, &diag)) fail_msg("verify: %s", diag.rendered);
  kn_interp_fn *fn = kn_interp_fn_new(f, KN_INTERP_F64, NULL, 0, &diag);
  kn_interp_fn *gn = kn_interp_fn_new(gf, KN_INTERP_F64, NULL, 0, &diag);
  assert_non_null(fn);
  assert_non_null(gn);
  for (int t = 0; t < 50; t++) {
    kn_argval a[6] = {{.f = unif(-6, 6)}, {.i = 0}, {.i = 1}, {.i = irand(0, 9)}, {.i = irand(0, 9)}, {.f = cap}};
    kn_argval r[2], zp, zm;
    assert_int_equal(kn_interp_fn_call(gn, a, r, &diag), 0);
    const double x0 = a[0].f, h = 1e-6;
    a[0].f = x0 + h;
    kn_interp_fn_call(fn, a, &zp, &diag);
    a[0].f = x0 - h;
    kn_interp_fn_call(fn, a, &zm, &diag);
    double fd = (zp.f - zm.f) / (2 * h);
    if (fabs(fd - r[1].f) > 1e-6 * (1 + fabs(fd)))
      fail_msg("%s at %g: derivative %g, difference quotient %g", fname, x0, r[1].f, fd);
  }
  kn_interp_fn_free(fn);
  kn_interp_fn_free(gn);
  kn_module_free(m);
}

static void grad_refused(const char *text, const char *want) {
  kn_diag diag;
  kn_module *m = kn_parse("<grad>", text, strlen(text), &diag);
  if (!m || kn_verify(m, &diag)) fail_msg("parse: %s", diag.rendered);
  assert_null(kn_attn_mod_grad(m, kn_module_find(m, "score_mod"), &diag));
  if (!strstr(diag.message, want)) fail_msg("error '%s' does not say '%s'", diag.message, want);
  kn_module_free(m);
}

static void test_mod_grad(void **state) {
  (void)state;
  const char *fns =
      "func @soft(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, %cap: f32) -> (f32) {\n"
      "  %one = const 1 : f32\n  %inv = div %one, %cap : f32\n  %x = mul %score, %inv : f32\n"
      "  %t = tanh %x : f32\n  %r = mul %t, %cap : f32\n  return %r\n}\n"
      "func @mix(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, %cap: f32) -> (f32) {\n"
      "  %qi = cast %q_idx : f32\n  %a = sub %score, %qi : f32\n  %s = abs %a : f32\n"
      "  %c = const 0.5 : f32\n  %m = max %s, %c : f32\n  %e = exp2 %m : f32\n"
      "  %sq = sqrt %m : f32\n  %l = log2 %m : f32\n  %y = add %e, %sq : f32\n  %z = sub %y, %l : f32\n"
      "  %w = div %z, %m : f32\n  %n = neg %w : f32\n  %r = rsqrt %m : f32\n  %o = mul %n, %r : f32\n"
      "  %p = cmp gt %score, %cap : i1\n  %sel = select %p, %o, %score : f32\n"
      "  %mn = min %sel, %cap : f32\n  return %mn\n}\n";
  grad_fd(fns, "soft", 2.5);
  grad_fd(fns, "mix", 1.5);
  grad_refused("func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32) -> (f32) {\n"
               "  %i = cast %score : i32\n  %f = cast %i : f32\n  return %f\n}\n",
               "the score reaches 'cast' in @score_mod");
  grad_refused("func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, %t: ptr<f32>) -> (f32) {\n"
               "  %i = cast %score : i64\n  %c1 = const 1 : i64\n  %x = load %t[%i] strides [%c1] : f32\n"
               "  return %x\n}\n",
               "no derivative kiln takes");
}

/* ---- 3. the kernels ----------------------------------------------------------------------------- */

typedef struct run_bufs {
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float *lse, *delta;
} run_bufs;

static void *dt_buf(kn_scalar dt, const double *x, size_t n) {
  size_t es = kn_scalar_size(dt);
  char *b = malloc(es * (n ? n : 1));
  for (size_t i = 0; i < n; i++) kn_store_elem(dt, b + i * es, x ? x[i] : NAN);
  return b;
}

/* the three kernels on target (NULL: the interpreter); 0 or -1 with *diag */
static int run_backward(const char *target, bcase *c, const kn_attn_config *cfg, run_bufs *rb,
                        kn_diag *diag) {
  kn_module *m = kn_module_new("<bwd>");
  if (kn_attn_bwd_build(m, &c->desc, cfg, diag)) fail_msg("%s: build: %s", c->name, diag->rendered);
  if (kn_verify(m, diag)) fail_msg("%s: verify: %s", c->name, diag->rendered);
  kn_attn_sig sig;
  if (kn_attn_bwd_signature(&c->desc, &sig, diag)) fail_msg("%s: sig: %s", c->name, diag->rendered);
  kn_attn_problem p = problem_of(c);
  const size_t es = kn_scalar_size(c->desc.dtype), D = (size_t)c->desc.head_dim;
  const size_t nq = rows_q(c) * c->heads, nk = rows_k(c) * c->kv_heads;
  /* atomic dQ's workspace, NaN: a sum the preprocess did not zero shows */
  float *dq_acc = malloc(4 * (nq * D > 0 ? nq * D : 1));
  memset(dq_acc, 0xff, 4 * nq * D);
  kn_attn_bwd_bufs bb = {rb->q,     rb->k,  rb->v,  rb->o,  rb->dout, rb->lse,
                         rb->delta, rb->dq, rb->dk, rb->dv, dq_acc};
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[KN_BWD_NKERNELS][3];
  if (kn_attn_bwd_fill_args(&c->desc, &sig, cfg, &p, &bb, &c->va, args, grid, diag))
    fail_msg("%s: args: %s", c->name, diag->rendered);
  kn_region regions[KN_ATTN_MAX_PARAMS] = {
      {rb->q, nq * D * es}, {rb->k, nk * D * es}, {rb->v, nk * D * es}, {rb->o, nq * D * es},
      {rb->dout, nq * D * es}, {rb->dq, nq * D * es}, {rb->dk, nk * D * es}, {rb->dv, nk * D * es},
      {rb->lse, nq * 4}, {rb->delta, nq * 4}, {dq_acc, nq * D * 4}};
  int nreg = 11;
  /* the variant's tensors: every pointer argument after the backward's own */
  for (int i = KN_ATTN_BWD_NPARAMS; i < sig.n; i++)
    if (sig.type[i].kind == KN_TY_PTR) {
      size_t bytes = 1 << 20;
      for (int j = 0; j < c->va.nmods; j++)
        if (!strcmp(c->va.mods[j].name, sig.name[i])) bytes = c->va.mods[j].bytes;
      if (!strcmp(sig.name[i], "bias")) bytes = (size_t)c->batch * c->heads * c->nq * c->nk * es;
      if (!strcmp(sig.name[i], "alibi_slopes")) bytes = (size_t)c->batch * c->heads * 4;
      if (!strcmp(sig.name[i], "q_seg")) bytes = (size_t)c->batch * c->nq * 4;
      if (!strcmp(sig.name[i], "k_seg")) bytes = (size_t)c->batch * c->nk * 4;
      if (!strncmp(sig.name[i], "cu_seqlens", 10)) bytes = (size_t)(c->batch + 1) * 4;
      regions[nreg++] = (kn_region){args[i].p, bytes};
    }
  int rc = 0;
  for (int w = 0; w < KN_BWD_NKERNELS && rc == 0; w++) {
    if (grid[w][0] == 0 || grid[w][1] == 0) continue;
    rc = run_named_on_target(target, m, kn_attn_bwd_kernels[w], args, grid[w], regions, nreg,
                             NULL, c->name, diag);
  }
  kn_module_free(m);
  free(dq_acc);
  return rc;
}

/* the largest |got - want| over n elements of a dtype buffer */
static double max_err(kn_scalar dt, const void *got, const double *want, size_t n, double *big) {
  double e = 0;
  size_t es = kn_scalar_size(dt);
  for (size_t i = 0; i < n; i++) {
    double g = kn_load_elem(dt, (const char *)got + i * es), d = fabs(g - want[i]);
    if (!(d <= e)) e = d;  /* NaN counts */
    if (fabs(want[i]) > *big) *big = fabs(want[i]);
  }
  return e;
}

static double max_diff(const double *a, const double *b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++)
    if (fabs(a[i] - b[i]) > e) e = fabs(a[i] - b[i]);
  return e;
}

/* one case on one target: fresh inputs, the kernels, the checks */
/* varlen: the padding tokens after the last sequence are still the NaN they were filled with
 * (no kernel writes outside the sequences), then 0 as the reference has them there */
static void check_padding(const bcase *c, void *got, int heads, bool q_side) {
  if (!is_varlen(c)) return;
  const kn_scalar dt = c->desc.dtype;
  const size_t es = kn_scalar_size(dt), row = (size_t)heads * c->desc.head_dim;
  const size_t from = (size_t)(q_side ? c->cu_q : c->cu_k)[c->batch];
  const size_t to = q_side ? (size_t)c->total_q : (size_t)c->total_k;
  for (size_t i = from * row; i < to * row; i++) {
    char *e = (char *)got + i * es;
    if (!isnan(kn_load_elem(dt, e)))
      fail_msg("%s: a kernel wrote %s padding token %zu", c->name, q_side ? "dq" : "dk/dv", i / row);
    kn_store_elem(dt, e, 0);
  }
}

static void kernel_case(const char *target, bcase *c, const kn_attn_config *cfg_in) {
  make_values(c);
  const kn_scalar dt = c->desc.dtype;
  const int D = c->desc.head_dim;
  const size_t nq = rows_q(c) * c->heads * D, nk = rows_k(c) * c->kv_heads * D;
  const size_t nrow = rows_q(c) * c->heads;
  double *q = rand_vec(nq, dt, -2, 2), *k = rand_vec(nk, dt, -2, 2), *v = rand_vec(nk, dt, -2, 2);
  double *dout = rand_vec(nq, dt, -1, 1);
  double *o = calloc(nq ? nq : 1, sizeof *o), *lse = calloc(nrow ? nrow : 1, sizeof *lse);
  kn_attn_problem p = problem_of(c);
  kn_diag diag;
  if (kn_attn_reference_v(&c->desc, NULL, &p, &c->va, q, k, v, o, lse, &diag))
    fail_msg("%s: forward reference: %s", c->name, diag.rendered);
  /* the forward's outputs as a kernel stores them: O in the dtype, lse in f32 */
  run_bufs rb = {dt_buf(dt, q, nq), dt_buf(dt, k, nk), dt_buf(dt, v, nk), dt_buf(dt, o, nq),
                 dt_buf(dt, dout, nq), dt_buf(dt, NULL, nq), dt_buf(dt, NULL, nk), dt_buf(dt, NULL, nk),
                 malloc(4 * (nrow ? nrow : 1)), malloc(4 * (nrow ? nrow : 1))};
  for (size_t i = 0; i < nrow; i++) rb.lse[i] = (float)lse[i];
  kn_attn_config cfg = cfg_in ? *cfg_in : kn_attn_bwd_default_config(NULL, &c->desc);
  if (run_backward(target, c, &cfg, &rb, &diag))
    fail_msg("%s on %s: run: %s", c->name, target ? target : "interp", diag.rendered);
  double *ref[3], *low[3];
  size_t n[3] = {nq, nk, nk};
  for (int t = 0; t < 3; t++) {
    ref[t] = malloc(sizeof(double) * (n[t] ? n[t] : 1));
    low[t] = malloc(sizeof(double) * (n[t] ? n[t] : 1));
  }
  if (kn_attn_bwd_reference(&c->desc, NULL, &p, &c->va, q, k, v, dout, false, ref[0], ref[1], ref[2], &diag) ||
      kn_attn_bwd_reference(&c->desc, NULL, &p, &c->va, q, k, v, dout, true, low[0], low[1], low[2], &diag))
    fail_msg("%s: backward reference: %s", c->name, diag.rendered);
  void *got[3] = {rb.dq, rb.dk, rb.dv};
  const char *nm[3] = {"dq", "dk", "dv"};
  const double tol = kn_attn_bwd_tolerance(dt);
  for (int t = 0; t < 3; t++) check_padding(c, got[t], t ? c->kv_heads : c->heads, t == 0);
  for (int t = 0; t < 3; t++) {
    double big = 0, e = max_err(dt, got[t], ref[t], n[t], &big);
    double lowp = max_diff(low[t], ref[t], n[t]);
    /* the floor: a few ulps of f32 over the sums for f32, half an ulp of the largest
     * gradient otherwise */
    double floor_ = dt == KN_F32 ? 2e-5 * (1 + big) : 0.5 * kn_ulp(dt, big);
    if (verbose())
      printf("  %-10s %-28s %s: err %.2e  lowp err %.2e  (max |%s| %.2f)\n",
             target ? target : "interp", c->name, nm[t], e, lowp, nm[t], big);
    if (!(e <= tol * (1 + big)))
      fail_msg("%s on %s: %s error %g above tol %g (max |%s| %g)", c->name, target ? target : "interp",
               nm[t], e, tol * (1 + big), nm[t], big);
    if (!(e <= 2 * lowp + floor_))
      fail_msg("%s on %s: %s error %g is more than 2x the low-precision error %g (+%g)", c->name,
               target ? target : "interp", nm[t], e, lowp, floor_);
  }
  /* deterministic: a second run gives the same bits (with atomic dQ, dK and dV do; dQ's sums
   * may come in another order) */
  if (target && !strcmp(target, "host")) {
    run_bufs r2 = rb;
    r2.dq = dt_buf(dt, NULL, nq), r2.dk = dt_buf(dt, NULL, nk), r2.dv = dt_buf(dt, NULL, nk);
    if (run_backward(target, c, &cfg, &r2, &diag)) fail_msg("second run: %s", diag.rendered);
    check_padding(c, r2.dq, c->heads, true);
    check_padding(c, r2.dk, c->kv_heads, false);
    check_padding(c, r2.dv, c->kv_heads, false);
    size_t es = kn_scalar_size(dt);
    if (!cfg.atomic_dq) assert_memory_equal(r2.dq, rb.dq, nq * es);
    assert_memory_equal(r2.dk, rb.dk, nk * es);
    assert_memory_equal(r2.dv, rb.dv, nk * es);
    free(r2.dq), free(r2.dk), free(r2.dv);
  }
  for (int t = 0; t < 3; t++) free(ref[t]), free(low[t]);
  void *all[] = {rb.q, rb.k, rb.v, rb.o, rb.dout, rb.dq, rb.dk, rb.dv, rb.lse, rb.delta, q, k, v, dout, o, lse};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  free_values(c);
}

static const kn_attn_config small_cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};

static void test_interp(void **state) {
  (void)state;
  bcase cases[] = {
      C("plain f16", 1, 2, 2, 37, 29, .dtype = KN_F16, .head_dim = 16),
      C("causal gqa f16", 1, 4, 2, 33, 45, .dtype = KN_F16, .head_dim = 24, .causal = 1),
      C("causal top-left mqa bf16", 2, 2, 1, 40, 23, .dtype = KN_BF16, .head_dim = 16, .causal = 2),
      C("causal nq>nk f32", 1, 1, 1, 41, 19, .dtype = KN_F32, .head_dim = 7, .causal = 1),
      C("window f16", 1, 2, 1, 35, 50, .dtype = KN_F16, .head_dim = 16, .window = true),
      C("softcap f16", 1, 1, 1, 31, 27, .dtype = KN_F16, .head_dim = 16, .softcap = true),
      C("dropout causal gqa f16", 1, 4, 2, 35, 43, .dtype = KN_F16, .head_dim = 16, .causal = 1,
        .dropout = 0.17f),
      C("dropout f32", 1, 2, 1, 29, 38, .dtype = KN_F32, .head_dim = 9, .dropout = 0.17f),
      V("varlen causal gqa f16", 4, 4, 2, L(17, 0, 33, 1), L(20, 5, 1, 0), .dtype = KN_F16,
        .head_dim = 16, .causal = 1),
      V("varlen dropout window f32 d7", 3, 2, 1, L(21, 1, 30), L(35, 1, 18), .dtype = KN_F32,
        .head_dim = 7, .window = true, .dropout = 0.17f),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) kernel_case(NULL, &cases[i], &small_cfg);
}

static void test_host(void **state) {
  (void)state;
  bcase cases[] = {
      C("plain f16 d64", 2, 2, 2, 150, 133, .dtype = KN_F16, .head_dim = 64),
      C("causal gqa f16 d59", 1, 4, 2, 97, 130, .dtype = KN_F16, .head_dim = 59, .causal = 1),
      C("causal top-left bf16", 1, 3, 1, 120, 77, .dtype = KN_BF16, .head_dim = 32, .causal = 2),
      C("plain f32 d5", 1, 2, 1, 70, 91, .dtype = KN_F32, .head_dim = 5),
      C("causal f16 d128", 1, 1, 1, 129, 129, .dtype = KN_F16, .head_dim = 128, .causal = 1),
      C("window f16", 1, 2, 2, 100, 111, .dtype = KN_F16, .head_dim = 40, .window = true),
      C("window causal bf16", 1, 2, 1, 90, 90, .dtype = KN_BF16, .head_dim = 16, .window = true, .causal = 1),
      C("softcap f16", 1, 2, 2, 80, 96, .dtype = KN_F16, .head_dim = 64, .softcap = true),
      C("alibi causal f16", 1, 2, 2, 77, 88, .dtype = KN_F16, .head_dim = 32, .alibi = true, .causal = 1),
      C("bias bf16", 1, 2, 1, 50, 61, .dtype = KN_BF16, .head_dim = 16, .bias = true),
      C("document f16", 2, 1, 1, 64, 70, .dtype = KN_F16, .head_dim = 16, .document = true),
      C("user score_mod f16", 1, 2, 2, 45, 66, .dtype = KN_F16, .head_dim = 32, .mods = TEMP_SCORE_MOD),
      C("head dim 256 f16", 1, 1, 1, 70, 70, .dtype = KN_F16, .head_dim = 256, .causal = 1),
      C("empty keys", 1, 1, 1, 20, 0, .dtype = KN_F16, .head_dim = 16),
      C("dropout f16 d64", 2, 2, 2, 150, 133, .dtype = KN_F16, .head_dim = 64, .dropout = 0.17f),
      C("dropout causal gqa bf16 d59", 1, 4, 2, 97, 130, .dtype = KN_BF16, .head_dim = 59,
        .causal = 1, .dropout = 0.17f),
      C("dropout causal top-left mqa f32", 2, 3, 1, 70, 55, .dtype = KN_F32, .head_dim = 24,
        .causal = 2, .dropout = 0.17f),
      C("dropout window softcap f16", 1, 2, 1, 80, 96, .dtype = KN_F16, .head_dim = 32,
        .window = true, .softcap = true, .dropout = 0.17f),
      C("dropout 0.6 f16", 1, 2, 2, 64, 77, .dtype = KN_F16, .head_dim = 16, .dropout = 0.6f),
      /* varlen: ragged lengths, empty sequences (either side) and length 1 */
      V("varlen f16 d64", 4, 2, 2, L(150, 1, 0, 77), L(133, 40, 9, 1), .dtype = KN_F16,
        .head_dim = 64),
      V("varlen causal gqa f16 d59", 3, 4, 2, L(97, 64, 1), L(130, 30, 1), .dtype = KN_F16,
        .head_dim = 59, .causal = 1),
      V("varlen causal top-left mqa bf16", 3, 3, 1, L(70, 0, 81), L(55, 12, 0), .dtype = KN_BF16,
        .head_dim = 32, .causal = 2),
      V("varlen f32 d5", 2, 2, 1, L(1, 70), L(91, 1), .dtype = KN_F32, .head_dim = 5),
      V("varlen window causal f16", 2, 2, 1, L(90, 33), L(90, 47), .dtype = KN_F16,
        .head_dim = 16, .window = true, .causal = 1),
      V("varlen softcap alibi bf16", 2, 2, 2, L(40, 65), L(70, 20), .dtype = KN_BF16,
        .head_dim = 40, .softcap = true, .alibi = true),
      V("varlen bias f16", 3, 2, 1, L(30, 1, 50), L(61, 7, 33), .dtype = KN_F16, .head_dim = 16,
        .bias = true),
      V("varlen document f16", 2, 1, 1, L(64, 20), L(70, 35), .dtype = KN_F16,
        .head_dim = 16, .document = true),
      V("varlen user score_mod f16", 2, 2, 2, L(45, 3), L(66, 17), .dtype = KN_F16,
        .head_dim = 32, .mods = TEMP_SCORE_MOD),
      V("varlen dropout causal gqa f16", 4, 4, 2, L(97, 0, 1, 64), L(130, 7, 1, 64),
        .dtype = KN_F16, .head_dim = 48, .causal = 1, .dropout = 0.17f),
      V("varlen dropout 0.6 bf16 d59", 2, 2, 1, L(64, 31), L(77, 50), .dtype = KN_BF16,
        .head_dim = 59, .dropout = 0.6f),
  };
  /* reduced (KILN_TEST_REDUCED): every second case, the tilings and the wgmma cases whole */
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (test_keep((int)i, 2)) kernel_case("host", &cases[i], NULL);
  /* other tilings: both kernels own block_n rows and step block_m (the dQ kernel's rows are
   * block_n), so non-square tilings check both; and the wgmma tilings of sm_90a as the host
   * runs their IR (the same IR: only the meta key WGMMA differs, which the host ignores) */
  kn_attn_config cfgs[] = {{.block_m = 32, .block_n = 16, .warps = 1, .stages = 1},
                           {.block_m = 16, .block_n = 64, .warps = 1, .stages = 1},
                           {.block_m = 64, .block_n = 32, .warps = 1, .stages = 1},
                           {.block_m = 32, .block_n = 64, .warps = 4, .stages = 1, .wgmma = true},
                           {.block_m = 64, .block_n = 64, .warps = 4, .stages = 1, .wgmma = true},
                           {.block_m = 32, .block_n = 128, .warps = 8, .stages = 1, .wgmma = true}};
  bcase c = C("causal gqa f16 d48", 1, 4, 1, 83, 71, .dtype = KN_F16, .head_dim = 48, .causal = 1);
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) kernel_case("host", &c, &cfgs[i]);
  const kn_arch *h100 = kn_arch_get("sm_90a");
  bcase wcases[] = {
      C("wgmma plain f16 d128", 1, 2, 1, 150, 133, .dtype = KN_F16, .head_dim = 128),
      C("wgmma causal gqa bf16 d64", 1, 4, 2, 133, 150, .dtype = KN_BF16, .head_dim = 64, .causal = 1),
      C("wgmma causal top-left f16 d128", 1, 2, 2, 97, 65, .dtype = KN_F16, .head_dim = 128, .causal = 2),
      V("wgmma varlen dropout causal f16 d59", 3, 2, 1, L(97, 1, 64), L(70, 0, 65),
        .dtype = KN_F16, .head_dim = 59, .causal = 1, .dropout = 0.17f),
  };
  for (size_t i = 0; i < sizeof wcases / sizeof wcases[0]; i++) {
    kn_attn_config wc = kn_attn_bwd_wgmma_config(h100, &wcases[i].desc);
    kn_diag diag;
    if (kn_attn_bwd_check_on(h100, &wcases[i].desc, &wc, &diag))
      fail_msg("%s: %s", wcases[i].name, diag.message);
    kernel_case("host", &wcases[i], &wc);
  }
}

static void test_emu(void **state) {
  (void)state;
  const char *targets[] = {"gfx90a-emu", "gfx942-emu"};
  for (int t = 0; t < 2; t++) {
    const kn_arch *arch = kn_arch_get(targets[t][5] == '4' ? "gfx942" : "gfx90a");
    bcase cases[] = {
        C("causal gqa f16", 1, 2, 1, 45, 37, .dtype = KN_F16, .head_dim = 32, .causal = 1),
        C("plain bf16 d20", 1, 1, 1, 33, 40, .dtype = KN_BF16, .head_dim = 20),
        C("softcap f16", 1, 1, 1, 30, 30, .dtype = KN_F16, .head_dim = 16, .softcap = true),
        C("dropout causal gqa f16", 1, 2, 1, 41, 39, .dtype = KN_F16, .head_dim = 32, .causal = 1,
          .dropout = 0.17f),
        V("varlen causal gqa f16", 3, 2, 1, L(45, 0, 33), L(37, 5, 1), .dtype = KN_F16,
          .head_dim = 32, .causal = 1),
        V("varlen dropout bf16 d20", 3, 2, 2, L(1, 40, 29), L(33, 0, 45), .dtype = KN_BF16,
          .head_dim = 20, .dropout = 0.17f),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      /* square, and on the first case a block_m below block_n: the dQ kernel owns block_n rows */
      kn_attn_config cfg = {.block_m = 32, .block_n = 32, .warps = 2, .stages = 1};
      if (i == 0) {
        kn_attn_config nsq = {.block_m = 16, .block_n = 32, .warps = 2, .stages = 1};
        kn_diag nd;
        if (kn_attn_bwd_check_on(arch, &cases[i].desc, &nsq, &nd))
          fail_msg("%s: %s", cases[i].name, nd.message);
        kernel_case(targets[t], &cases[i], &nsq);
      }
      kn_diag diag;
      if (kn_attn_bwd_check_on(arch, &cases[i].desc, &cfg, &diag))
        fail_msg("%s: %s", cases[i].name, diag.message);
      kernel_case(targets[t], &cases[i], &cfg);
    }
  }
}

/* atomic dQ (kn_attn_config.atomic_dq): the dK/dV kernel adds dQ^T = K^T dS^T into an f32
 * workspace with atomic adds, the dQ kernel rounds it; the same checks as every kernel (float64,
 * 2x the low-precision error, varlen padding untouched) on the interpreter, the host (many
 * threads adding into the same rows), both emulators and sm_90a's atomic wgmma tilings as the
 * host runs their IR */
static void test_atomic_dq(void **state) {
  (void)state;
  bcase cases[] = {
      C("plain f16 d64", 2, 2, 2, 150, 133, .dtype = KN_F16, .head_dim = 64),
      C("causal gqa f16 d59", 1, 4, 2, 97, 130, .dtype = KN_F16, .head_dim = 59, .causal = 1),
      C("causal top-left mqa bf16", 1, 3, 1, 120, 77, .dtype = KN_BF16, .head_dim = 32, .causal = 2),
      C("plain f32 d5", 1, 2, 1, 70, 91, .dtype = KN_F32, .head_dim = 5),
      C("window softcap f16", 1, 2, 1, 80, 96, .dtype = KN_F16, .head_dim = 32, .window = true,
        .softcap = true),
      C("dropout causal gqa bf16", 1, 4, 2, 97, 130, .dtype = KN_BF16, .head_dim = 48, .causal = 1,
        .dropout = 0.17f),
      C("empty keys", 1, 1, 1, 20, 0, .dtype = KN_F16, .head_dim = 16),
      V("varlen causal gqa f16", 3, 4, 2, L(97, 0, 1), L(130, 30, 1), .dtype = KN_F16,
        .head_dim = 40, .causal = 1),
      V("varlen dropout bf16", 3, 2, 2, L(1, 40, 29), L(33, 0, 45), .dtype = KN_BF16,
        .head_dim = 20, .dropout = 0.17f),
  };
  const kn_attn_config host_cfgs[] = {
      {.block_m = 64, .block_n = 64, .warps = 1, .stages = 1, .atomic_dq = true},
      {.block_m = 16, .block_n = 32, .warps = 1, .stages = 1, .atomic_dq = true}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int h = 0; h < 2; h++)
      if (test_keep((int)(2 * i + (size_t)h), 2)) kernel_case("host", &cases[i], &host_cfgs[h]);
  bcase small = C("causal gqa f16", 1, 4, 2, 37, 45, .dtype = KN_F16, .head_dim = 16, .causal = 1);
  const kn_attn_config sc = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1, .atomic_dq = true};
  kernel_case(NULL, &small, &sc);
  bcase vsmall = V("varlen f32 d7", 3, 2, 1, L(21, 1, 30), L(35, 1, 18), .dtype = KN_F32,
                   .head_dim = 7, .window = true);
  kernel_case(NULL, &vsmall, &sc);
  /* sm_90a's atomic wgmma tilings (block_n = the padded head dim) as the host runs their IR */
  const kn_arch *h100 = kn_arch_get("sm_90a");
  for (int dp = 64; dp <= 128; dp += 64) {
    bcase w = C("causal gqa f16 wgmma", 1, 4, 2, 150, 133, .dtype = KN_F16, .head_dim = dp - 3,
                .causal = 1);
    kn_attn_config wc = kn_attn_bwd_atomic_wgmma_config(h100, &w.desc);
    kn_diag diag;
    if (kn_attn_bwd_check_on(h100, &w.desc, &wc, &diag)) fail_msg("sm_90a: %s", diag.message);
    assert_true(wc.atomic_dq && wc.wgmma && wc.block_n == dp && wc.warps == dp / 16);
    kernel_case("host", &w, &wc);
  }
  const char *targets[] = {"gfx90a-emu", "gfx942-emu"};
  for (int t = 0; t < 2; t++) {
    const kn_arch *arch = kn_arch_get(targets[t][5] == '4' ? "gfx942" : "gfx90a");
    bcase ecases[] = {
        C("causal gqa f16", 1, 2, 1, 45, 37, .dtype = KN_F16, .head_dim = 32, .causal = 1),
        V("varlen dropout bf16 d20", 3, 2, 2, L(1, 40, 29), L(33, 0, 45), .dtype = KN_BF16,
          .head_dim = 20, .dropout = 0.17f)};
    for (size_t i = 0; i < sizeof ecases / sizeof ecases[0]; i++) {
      kn_attn_config cfg = {.block_m = 32, .block_n = 32, .warps = 2, .stages = 1, .atomic_dq = true};
      kn_diag diag;
      if (kn_attn_bwd_check_on(arch, &ecases[i].desc, &cfg, &diag))
        fail_msg("%s: %s", ecases[i].name, diag.message);
      kernel_case(targets[t], &ecases[i], &cfg);
    }
  }
  /* the rule's choices: ATOMIC on sm_90a is the atomic wgmma tiling; SEPARATE never atomic */
  kn_attn_desc d128 = {.dtype = KN_F16, .head_dim = 128};
  kn_attn_config a = kn_attn_bwd_config_for(h100, &d128, true, false, KN_BWD_DQ_ATOMIC, 0, 0, 0);
  assert_true(a.atomic_dq && a.wgmma && a.block_n == 128 && a.warps == 8);
  kn_attn_config sep = kn_attn_bwd_config_for(h100, &d128, false, false, KN_BWD_DQ_SEPARATE, 0, 0, 0);
  assert_false(sep.atomic_dq);
  kn_attn_config ha = kn_attn_bwd_config_for(NULL, &d128, false, false, KN_BWD_DQ_ATOMIC, 0, 0, 0);
  assert_true(ha.atomic_dq);
  /* a tiling whose dQ^T dot does not fit: wgmma needs block_n = the padded head dim */
  kn_attn_config bad = kn_attn_bwd_wgmma_config(h100, &d128);
  bad.atomic_dq = true;
  kn_diag diag;
  assert_int_equal(kn_attn_bwd_check_on(h100, &d128, &bad, &diag), -1);
  assert_non_null(strstr(diag.message, "atomic dQ"));
}

/* ---- 4. code for the GPU targets ---------------------------------------------------------------- */

/* the code of an artefact as a NUL-terminated string (PTX is text); the caller frees it */
static char *artifact_text(const kn_artifact *a) {
  char *text = malloc(a->size + 1);
  assert_non_null(text);
  memcpy(text, a->data, a->size);
  text[a->size] = 0;
  return text;
}

/* PTX's f32 atomic add (atom, or red where the old value is unused) */
static bool ptx_atomic_add(const char *text) {
  return strstr(text, "atom.global.add.f32") || strstr(text, "red.global.add.f32");
}

/* KILN_TEST_BWD_DUMP=DIR: the artefact's code into DIR/<name>.co or .ptx */
static void dump_code(const kn_artifact *a, const char *fmt, ...) {
  const char *dir = getenv("KILN_TEST_BWD_DUMP");
  if (!dir) return;
  char name[256], path[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  snprintf(path, sizeof path, "%s/%s.%s", dir, name, a->kind == KN_ARTIFACT_CODE_OBJECT ? "co" : "ptx");
  FILE *f = fopen(path, "wb");
  if (f) {
    fwrite(a->data, 1, a->size, f);
    fclose(f);
  }
}

static void test_codegen(void **state) {
  (void)state;
  const char *archs[] = {"gfx90a", "gfx942", "sm_80", "sm_90a"};
  const int dims[] = {64, 128};
  const char *only = getenv("KILN_TEST_BWD_ARCH");  /* one target's code only */
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    const kn_arch *arch;
    const kn_target *t;
    if (only && strcmp(only, archs[a])) continue;
    if (!code_target(archs[a], &arch, &t)) continue;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (int vi = 0; vi < 5; vi++) {  /* plain, causal, causal with dropout; the last two varlen */
        /* reduced (KILN_TEST_REDUCED): every third (arch, dim, variant), rotating through all */
        if (!test_take(3)) continue;
        const int causal = vi > 0;
        kn_attn_desc d = {.dtype = KN_F16, .head_dim = dims[di], .causal = causal,
                          .dropout = vi == 2 || vi == 4 ? 0.17f : 0,
                          .layout = vi >= 3 ? KN_ATTN_VARLEN : KN_ATTN_DENSE};
        kn_attn_config cfg = kn_attn_bwd_sync_config(arch, &d);  /* the mma.sync kernels */
        const char *tl = getenv("KILN_TEST_BWD_TILING");  /* "BM,BN,W": measure another tiling */
        int wg = cfg.wgmma;
        if (tl && sscanf(tl, "%d,%d,%d,%d", &cfg.block_m, &cfg.block_n, &cfg.warps, &wg) >= 3)
          cfg.wgmma = wg != 0;
        kn_diag diag;
        if (kn_attn_bwd_check_on(arch, &d, &cfg, &diag)) {
          if (!tl) fail_msg("%s: %s", archs[a], diag.message);
          printf("  %-6s D%-3d %s\n", archs[a], dims[di], diag.message);
          continue;
        }
        kn_module *m = kn_module_new("<bwd>");
        if (kn_attn_bwd_build(m, &d, &cfg, &diag)) fail_msg("build: %s", diag.rendered);
        for (int w = 0; w < KN_BWD_NKERNELS; w++) {
          kn_artifact art;
          if (kn_compile_artifact(m, kn_attn_bwd_kernels[w], t, NULL, &art, &diag))
            fail_msg("%s D%d %s: %s", archs[a], dims[di], kn_attn_bwd_kernels[w], diag.rendered);
          dump_code(&art, "%s_d%d_v%d_%s", archs[a], dims[di], vi, kn_attn_bwd_kernels[w]);
          int spills = artifact_spills(&art, arch, kn_attn_bwd_kernels[w]);
          printf("  %-6s D%-3d causal=%d%s%s %dx%d w%d %-14s spills %d\n", archs[a], dims[di],
                 causal, vi >= 3 ? " varlen" : "", d.dropout != 0 ? " dropout" : "", cfg.block_m,
                 cfg.block_n, cfg.warps,
                 kn_attn_bwd_kernels[w], spills);
          kn_artifact_free(&art);
        }
        kn_module_free(m);
      }
  }
}

/* atomic dQ's code on gfx90a / gfx942 (code objects) and sm_80 (ptxas) at the rule's atomic
 * tiling (kn_attn_bwd_config_for with KN_BWD_DQ_ATOMIC): the dK/dV kernel adds with the f32
 * atomic instruction (global_atomic_add_f32, no compare-and-swap loop; atom/red.global.add.f32),
 * the dQ kernel only rounds (no atomic); spills printed */
static void test_codegen_atomic(void **state) {
  (void)state;
  const char *archs[] = {"gfx90a", "gfx942", "sm_80"};
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    const kn_arch *arch;
    const kn_target *t;
    if (!code_target(archs[a], &arch, &t)) continue;
    for (int di = 0; di < 2; di++) {
      if (!test_take(2)) continue;
      kn_attn_desc d = {.dtype = di ? KN_BF16 : KN_F16, .head_dim = di ? 128 : 64, .causal = true};
      kn_attn_config cfg = kn_attn_bwd_config_for(arch, &d, false, false, KN_BWD_DQ_ATOMIC, 0, 0, 0);
      assert_true(cfg.atomic_dq && !cfg.wgmma);
      kn_diag diag;
      if (kn_attn_bwd_check_on(arch, &d, &cfg, &diag)) fail_msg("%s: %s", archs[a], diag.message);
      kn_module *m = kn_module_new("<bwd>");
      if (kn_attn_bwd_build(m, &d, &cfg, &diag)) fail_msg("build: %s", diag.rendered);
      for (int w = KN_BWD_DKDV; w <= KN_BWD_DQ; w++) {
        kn_artifact art;
        if (kn_compile_artifact(m, kn_attn_bwd_kernels[w], t, NULL, &art, &diag))
          fail_msg("%s atomic D%d %s: %s", archs[a], d.head_dim, kn_attn_bwd_kernels[w],
                   diag.rendered);
        int adds, cas = 0;
        if (art.kind == KN_ARTIFACT_CODE_OBJECT) {
          adds = test_objdump_count(archs[a], art.data, art.size, "global_atomic_add_f32");
          cas = test_objdump_count(archs[a], art.data, art.size, "cmpswap");
        } else {
          char *text = artifact_text(&art);
          adds = ptx_atomic_add(text);
          free(text);
        }
        int spills = artifact_spills(&art, arch, kn_attn_bwd_kernels[w]);
        printf("  %-6s D%-3d causal %dx%d w%d atomic-dq %-14s atomic adds %d, cas %d, spills %d\n",
               archs[a], d.head_dim, cfg.block_m, cfg.block_n, cfg.warps, kn_attn_bwd_kernels[w],
               adds, cas, spills);
        if (adds >= 0) {  /* -1: llvm-objdump not installed */
          if (w == KN_BWD_DKDV && (adds == 0 || cas > 0))
            fail_msg("%s atomic D%d dK/dV: %d atomic adds, %d cmpswap", archs[a], d.head_dim, adds, cas);
          if (w == KN_BWD_DQ && adds > 0)
            fail_msg("%s atomic D%d dQ: the rounding pass adds atomically", archs[a], d.head_dim);
        }
        kn_artifact_free(&art);
      }
      kn_module_free(m);
    }
  }
}

/* sm_90a's wgmma kernels (kn_attn_bwd_wgmma_config): ptxas accepts them; at head dims 64 and
 * 128 without dropout none spills; every dot is a wgmma, and at every head dim the S^T / dP^T
 * (dK/dV) and S / dP (dQ) dots read A (K, V; Q, dO: staged once) through a matrix descriptor.  Odd and middle head
 * dims (59, 96: K and V not cp.async-able at 59) compile too. */
static void test_codegen_wgmma(void **state) {
  (void)state;
  const kn_arch *arch;
  const kn_target *t;
  if (!code_target("sm_90a", &arch, &t)) return;
  /* the default is wgmma where it was measured faster: dense, plain or causal, padded D 64 / 128 */
  const struct { kn_attn_desc d; bool wgmma; } defaults[] = {
      {{.dtype = KN_F16, .head_dim = 64}, true},
      {{.dtype = KN_BF16, .head_dim = 128, .causal = true}, true},
      {{.dtype = KN_F16, .head_dim = 59}, true},
      {{.dtype = KN_F16, .head_dim = 96}, false},
      {{.dtype = KN_F16, .head_dim = 64, .dropout = 0.17f}, false},
      {{.dtype = KN_F16, .head_dim = 64, .layout = KN_ATTN_VARLEN}, false},
      {{.dtype = KN_F16, .head_dim = 64, .window = true}, false},
      {{.dtype = KN_F32, .head_dim = 64}, false}};
  for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
    kn_attn_config c = kn_attn_bwd_default_config(arch, &defaults[i].d);
    if (c.wgmma != defaults[i].wgmma || kn_attn_bwd_sync_config(arch, &defaults[i].d).wgmma)
      fail_msg("sm_90a default %zu: wgmma %d, expected %d", i, c.wgmma, defaults[i].wgmma);
  }
  assert_false(kn_attn_bwd_default_config(kn_arch_get("sm_80"), &defaults[0].d).wgmma);
  const int dims[] = {64, 128, 59, 96};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
    for (int vi = 0; vi < 5; vi++) {  /* plain, causal, causal with dropout; the last two varlen */
      if (dims[di] != 64 && dims[di] != 128 && vi > 1) continue;
      kn_attn_desc d = {.dtype = vi == 1 ? KN_BF16 : KN_F16, .head_dim = dims[di],
                        .causal = vi > 0, .dropout = vi == 2 || vi == 4 ? 0.17f : 0,
                        .layout = vi >= 3 ? KN_ATTN_VARLEN : KN_ATTN_DENSE};
      kn_attn_config cfg = kn_attn_bwd_wgmma_config(arch, &d);
      kn_diag diag;
      if (kn_attn_bwd_check_on(arch, &d, &cfg, &diag)) fail_msg("sm_90a: %s", diag.message);
      kn_module *m = kn_module_new("<bwd>");
      if (kn_attn_bwd_build(m, &d, &cfg, &diag)) fail_msg("build: %s", diag.rendered);
      for (int w = 0; w < KN_BWD_NKERNELS; w++) {
        kn_artifact art;
        if (kn_compile_artifact(m, kn_attn_bwd_kernels[w], t, NULL, &art, &diag))
          fail_msg("sm_90a wgmma D%d %s: %s", dims[di], kn_attn_bwd_kernels[w], diag.rendered);
        int spills = artifact_spills(&art, arch, kn_attn_bwd_kernels[w]);
        printf("  sm_90a D%-3d causal=%d%s%s %dx%d w%d wgmma %-14s spills %d\n", dims[di],
               d.causal, vi >= 3 ? " varlen" : "", d.dropout != 0 ? " dropout" : "",
               cfg.block_m, cfg.block_n, cfg.warps, kn_attn_bwd_kernels[w], spills);
        if (d.dropout == 0 && (dims[di] == 64 || dims[di] == 128) && spills)
          fail_msg("sm_90a wgmma D%d %s spills %d bytes", dims[di], kn_attn_bwd_kernels[w], spills);
        if (w != KN_BWD_PRE) {
          /* the four (dK/dV: S^T, dV, dP^T, dK) or three (dQ) dots, each one wgmma per k
           * step; two of them with A from a descriptor: "}, %rd" after the accumulator */
          char *text = artifact_text(&art);
          int n = 0, adesc = 0;
          for (char *q = strstr(text, "wgmma.mma_async"); q; q = strstr(q + 1, "wgmma.mma_async")) {
            n++;
            char *close = strchr(q, '}');
            adesc += close && !strncmp(close, "}, %rd", 6);
          }
          /* codegen-3: both score-sized dots in flight together, and one of them (dP^T or
           * dP) while P is computed: a wait that leaves one group running (D 64, 96, 128,
           * where cp.async fills separate buffers; at D 59, rows of 118 bytes, the second
           * dot's operand is stored from registers into bytes the first one's buffer shares,
           * so that dot waits) */
          bool overlap = strstr(text, "wgmma.wait_group.sync.aligned 1;") != NULL;
          free(text);
          if (!overlap && dims[di] != 59)
            fail_msg("sm_90a wgmma D%d %s: no dot stays in flight (wait_group 1)", dims[di],
                     kn_attn_bwd_kernels[w]);
          /* every head dim: the loop-invariant A (K, V; Q, dO) from shared memory, the
           * loop's own (P^T, dS^T; dS) from registers (KILN_WGMMA_A_REGS=1, the old
           * lowering, kept K and V in registers at D 64 and gave wrong gradients) */
          if (strstr((const char *)art.data, "mma.sync.aligned") || n == 0 || adesc == 0 ||
              adesc == n)
            fail_msg("sm_90a wgmma D%d %s: %d wgmma, %d with A through a descriptor", dims[di],
                     kn_attn_bwd_kernels[w], n, adesc);
        }
        kn_artifact_free(&art);
      }
      kn_module_free(m);
    }
  /* atomic dQ (kn_attn_bwd_atomic_wgmma_config): the dK/dV kernel's five dots are wgmma, dQ^T
   * added by one f32 atomic per element; the dQ kernel only rounds (no dot) */
  for (int di = 0; di < 2; di++)
    for (int causal = 0; causal < 2; causal++) {
      kn_attn_desc d = {.dtype = causal ? KN_BF16 : KN_F16, .head_dim = di ? 128 : 64,
                        .causal = causal};
      kn_attn_config cfg = kn_attn_bwd_atomic_wgmma_config(arch, &d);
      kn_diag diag;
      if (kn_attn_bwd_check_on(arch, &d, &cfg, &diag)) fail_msg("sm_90a atomic: %s", diag.message);
      kn_module *m = kn_module_new("<bwd>");
      if (kn_attn_bwd_build(m, &d, &cfg, &diag)) fail_msg("build: %s", diag.rendered);
      for (int w = 0; w < KN_BWD_NKERNELS; w++) {
        kn_artifact art;
        if (kn_compile_artifact(m, kn_attn_bwd_kernels[w], t, NULL, &art, &diag))
          fail_msg("sm_90a atomic D%d %s: %s", d.head_dim, kn_attn_bwd_kernels[w], diag.rendered);
        dump_code(&art, "sm_90a_atomic_d%d_c%d_%s", d.head_dim, causal, kn_attn_bwd_kernels[w]);
        int spills = artifact_spills(&art, arch, kn_attn_bwd_kernels[w]);
        printf("  sm_90a D%-3d causal=%d %dx%d w%d wgmma atomic-dq %-14s spills %d\n", d.head_dim,
               causal, cfg.block_m, cfg.block_n, cfg.warps, kn_attn_bwd_kernels[w], spills);
        char *text = artifact_text(&art);
        bool atom = ptx_atomic_add(text);
        bool wg = strstr(text, "wgmma.mma_async") != NULL;
        if (w == KN_BWD_DKDV && (!atom || !wg || strstr(text, "mma.sync.aligned")))
          fail_msg("sm_90a atomic D%d dK/dV: atomic add %d, wgmma %d", d.head_dim, atom, wg);
        if (w == KN_BWD_DQ && (atom || wg))
          fail_msg("sm_90a atomic D%d dQ: the rounding pass has an atomic or a dot", d.head_dim);
        free(text);
        kn_artifact_free(&art);
      }
      kn_module_free(m);
    }
  /* KILN_WGMMA_SERIAL=1: every dot waits for itself (the lowering before codegen-3) */
  kn_attn_desc sd = {.dtype = KN_F16, .head_dim = 64};
  kn_attn_config sc = kn_attn_bwd_wgmma_config(arch, &sd);
  kn_module *m = kn_module_new("<bwd>");
  kn_diag diag;
  if (kn_attn_bwd_build(m, &sd, &sc, &diag)) fail_msg("build: %s", diag.rendered);
  setenv("KILN_WGMMA_SERIAL", "1", 1);
  assert_string_equal(kn_codegen_revision(), KN_CODEGEN_REVISION "+wgmma-serial");
  kn_artifact art;
  int rc = kn_compile_artifact(m, kn_attn_bwd_kernels[KN_BWD_DKDV], t, NULL, &art, &diag);
  unsetenv("KILN_WGMMA_SERIAL");
  assert_string_equal(kn_codegen_revision(), KN_CODEGEN_REVISION);
  if (rc) fail_msg("sm_90a serial: %s", diag.rendered);
  char *text = artifact_text(&art);
  int waits = 0;
  for (char *q = strstr(text, "wgmma.wait_group.sync.aligned 0;"); q;
       q = strstr(q + 1, "wgmma.wait_group.sync.aligned 0;"))
    waits++;
  assert_null(strstr(text, "wgmma.wait_group.sync.aligned 1;"));
  assert_true(waits >= 4);  /* the loop's four dots each wait for themselves */
  free(text);
  kn_artifact_free(&art);
  kn_module_free(m);
}

/* ---- 5. bad input ------------------------------------------------------------------------------- */

static void expect_error(const kn_attn_desc *d, const kn_attn_config *c, const char *want) {
  kn_module *m = kn_module_new("<bwd>");
  kn_diag diag;
  assert_int_equal(kn_attn_bwd_build(m, d, c, &diag), -1);
  if (!strstr(diag.message, want)) fail_msg("error '%s' does not say '%s'", diag.message, want);
  kn_module_free(m);
}

static void test_errors(void **state) {
  (void)state;
  kn_attn_config c = small_cfg;
  expect_error(&(kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .layout = KN_ATTN_PAGED}, &c,
               "paged is not supported yet");
  expect_error(&(kn_attn_desc){.dtype = KN_F16, .head_dim = 300}, &c, "head dim 300 is not supported");
  /* wgmma: sm_90a's, f16 / bf16, one warpgroup per 64 rows owned, head dims up to 128 */
  const struct { const char *arch; kn_scalar dt; int d, bm, bn, w; const char *want; } wg[] = {
      {"sm_80", KN_F16, 64, 64, 64, 4, "wgmma is not available on sm_80"},
      {"host", KN_F16, 64, 64, 64, 4, "wgmma is not available on host"},
      {"gfx942", KN_F16, 64, 64, 64, 4, "wgmma is not available on gfx942"},
      {"sm_90a", KN_F32, 64, 64, 64, 4, "wgmma is not available on sm_90a for f32"},
      {"sm_90a", KN_F16, 64, 64, 32, 4, "does not fit wgmma"},
      {"sm_90a", KN_F16, 64, 64, 64, 2, "does not fit wgmma"},
      {"sm_90a", KN_F16, 64, 64, 128, 4, "does not fit wgmma"},
      {"sm_90a", KN_F16, 192, 32, 64, 4, "wgmma at head dim 192 is not supported"},
  };
  for (size_t i = 0; i < sizeof wg / sizeof wg[0]; i++) {
    kn_attn_desc d = {.dtype = wg[i].dt, .head_dim = wg[i].d};
    kn_attn_config c = {.block_m = wg[i].bm, .block_n = wg[i].bn, .warps = wg[i].w, .stages = 1,
                        .wgmma = true};
    kn_diag diag;
    assert_int_equal(kn_attn_bwd_check_on(kn_arch_get(wg[i].arch), &d, &c, &diag), -1);
    if (!strstr(diag.message, wg[i].want))
      fail_msg("error '%s' does not say '%s'", diag.message, wg[i].want);
  }
  expect_error(&(kn_attn_desc){.dtype = KN_F16, .head_dim = 64,
                               .mods = "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, "
                                       "%kv_idx: i32) -> (f32) {\n  %i = cast %score : i32\n"
                                       "  %f = cast %i : f32\n  return %f\n}\n"},
               &c, "the score reaches 'cast' in @score_mod");
  expect_error(&(kn_attn_desc){.dtype = KN_I32, .head_dim = 64}, &c, "dtype i32 is not supported");
  /* the arguments take the forward's signature from the backward one (no parse per call): a
   * forward signature in its place is refused, not read past its end */
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 64, .softcap = true};
  kn_attn_sig fs;
  kn_diag diag;
  if (kn_attn_signature(&d, &fs, &diag)) fail_msg("sig: %s", diag.message);
  kn_attn_problem p = {.batch = 1, .heads = 1, .kv_heads = 1, .seqlen_q = 4, .seqlen_k = 4};
  kn_attn_bwd_bufs bb = {0};
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[KN_BWD_NKERNELS][3];
  assert_int_equal(kn_attn_bwd_fill_args(&d, &fs, &c, &p, &bb, NULL, args, grid, &diag), -1);
  if (!strstr(diag.message, "is not a backward one")) fail_msg("error '%s'", diag.message);
}

/* ---- 6. the API on the host ---------------------------------------------------------------------- */

/* kiln_backward on the host for case c (GQA, causal, softcap, ALiBi or a user modifier) with the
 * forward through kiln_forward first (its O and lse are what the backward reads), against the
 * float64 reference; and the errors of bad calls */
static void api_case(kiln_context *ctx, bcase *c, const kiln_attn_desc *pd) {
  make_values(c);
  const kn_scalar dt = c->desc.dtype;
  const int D = c->desc.head_dim;
  const size_t nq = rows_q(c) * c->heads * D, nk = rows_k(c) * c->kv_heads * D;
  const size_t nrow = rows_q(c) * c->heads;
  double *q = rand_vec(nq, dt, -2, 2), *k = rand_vec(nk, dt, -2, 2), *v = rand_vec(nk, dt, -2, 2);
  double *dout = rand_vec(nq, dt, -1, 1);
  void *bq = dt_buf(dt, q, nq), *bk = dt_buf(dt, k, nk), *bv = dt_buf(dt, v, nk), *bo = dt_buf(dt, NULL, nq);
  void *bdo = dt_buf(dt, dout, nq), *bdq = dt_buf(dt, NULL, nq), *bdk = dt_buf(dt, NULL, nk), *bdv = dt_buf(dt, NULL, nk);
  float *lse = calloc(nrow, 4), *delta = malloc(4 * nrow);
  kiln_kernel *fwd, *bwd;
  kiln_attn_desc fd = *pd;
  fd.has_lse = 1;
  if (kiln_prepare(ctx, &fd, NULL, &fwd)) fail_msg("%s: prepare: %s", c->name, kiln_last_error());
  if (kiln_prepare_backward(ctx, pd, NULL, &bwd)) fail_msg("%s: prepare_backward: %s", c->name, kiln_last_error());
  kiln_mod_arg ma = {0};
  kiln_backward_args a = {.fwd = {.q = bq, .k = bk, .v = bv, .o = bo, .lse = lse, .batch = c->batch,
                                  .heads = c->heads, .kv_heads = c->kv_heads, .seqlen_q = c->nq,
                                  .seqlen_k = c->nk, .softcap = c->va.softcap,
                                  .alibi_slopes = c->va.alibi_slopes, .alibi_stride = c->va.alibi_sb,
                                  .q_numel = (int64_t)nq, .k_numel = (int64_t)nk},
                          .dout = bdo, .dq = bdq, .dk = bdk, .dv = bdv, .delta = delta,
                          .dq_numel = (int64_t)nq, .dk_numel = (int64_t)nk, .delta_numel = (int64_t)nrow};
  if (pd->dropout_p != 0) a.fwd.dropout_seed = c->seed, a.fwd.dropout_offset = c->offset;
  if (is_varlen(c)) {
    a.fwd.cu_seqlens_q = c->cu_q, a.fwd.cu_seqlens_k = c->cu_k;
    a.fwd.total_q = c->total_q, a.fwd.total_k = c->total_k;
    a.fwd.lse_numel = (int64_t)nrow, a.fwd.o_numel = (int64_t)nq, a.fwd.v_numel = (int64_t)nk;
    a.dout_numel = (int64_t)nq, a.dv_numel = (int64_t)nk;
  }
  if (pd->mods) {
    ma = (kiln_mod_arg){.name = "temp", .kind = KILN_MOD_ARG_PTR, .p = c->named[0].value.p,
                        .bytes = c->named[0].bytes};
    a.fwd.mod_args = &ma, a.fwd.n_mod_args = 1;
  }
  if (kiln_forward(fwd, &a.fwd, NULL)) fail_msg("%s: forward: %s", c->name, kiln_last_error());
  if (kiln_backward(bwd, &a, NULL)) fail_msg("%s: backward: %s", c->name, kiln_last_error());
  double *ref[3];
  size_t n[3] = {nq, nk, nk};
  for (int t = 0; t < 3; t++) ref[t] = malloc(sizeof(double) * n[t]);
  kn_attn_problem p = problem_of(c);
  kn_diag diag;
  if (kn_attn_bwd_reference(&c->desc, NULL, &p, &c->va, q, k, v, dout, false, ref[0], ref[1], ref[2], &diag))
    fail_msg("reference: %s", diag.rendered);
  void *got[3] = {bdq, bdk, bdv};
  for (int t = 0; t < 3; t++) check_padding(c, got[t], t ? c->kv_heads : c->heads, t == 0);
  for (int t = 0; t < 3; t++) {
    double big = 0, e = max_err(dt, got[t], ref[t], n[t], &big);
    if (verbose()) printf("  api %-24s grad %d: err %.2e (max %.2f)\n", c->name, t, e, big);
    if (!(e <= kn_attn_bwd_tolerance(dt) * (1 + big)))
      fail_msg("%s through the API: gradient %d error %g", c->name, t, e);
  }
  /* bad calls: each a clear KILN_ERR_INVALID */
  struct { const char *want; kiln_backward_args a; kiln_kernel *k; } bad[] = {
      {"null dout", a, bwd}, {"null lse", a, bwd}, {"dq holds 1 elements", a, bwd},
      {"launch it with kiln_backward", a, bwd}, {"prepare the backward with kiln_prepare_backward", a, fwd}};
  bad[0].a.dout = NULL;
  bad[1].a.fwd.lse = NULL;
  bad[2].a.dq_numel = 1;
  if (is_varlen(c)) {  /* a batch stride for a packed gradient, a delta too small for (H, total_q) */
    bad[3].want = "dk_stride is {0, head, token}";
    bad[3].a.dk_stride[0] = 1, bad[3].a.dk_stride[1] = D, bad[3].a.dk_stride[2] = (int64_t)c->kv_heads * D;
    bad[4].want = "delta holds";
    bad[4].a.delta_numel = (int64_t)nrow - 1, bad[4].k = bwd;
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_status st = i == 3 && !is_varlen(c) ? kiln_forward(bwd, &a.fwd, NULL)
                                             : kiln_backward(bad[i].k, &bad[i].a, NULL);
    assert_int_equal(st, KILN_ERR_INVALID);
    if (!strstr(kiln_last_error(), bad[i].want))
      fail_msg("error '%s' does not say '%s'", kiln_last_error(), bad[i].want);
  }
  for (int t = 0; t < 3; t++) free(ref[t]);
  void *all[] = {q, k, v, dout, bq, bk, bv, bo, bdo, bdq, bdk, bdv, lse, delta};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
  free_values(c);
}

static void test_api(void **state) {
  (void)state;
  kiln_context_options co = {.no_cache = 1, .device = "host"};
  kiln_context *ctx = NULL;
  if (kiln_context_create(&co, &ctx)) fail_msg("context: %s", kiln_last_error());
  bcase cases[] = {
      C("api causal gqa f16", 2, 4, 2, 67, 81, .dtype = KN_F16, .head_dim = 64, .causal = 1),
      C("api softcap bf16", 1, 2, 1, 50, 40, .dtype = KN_BF16, .head_dim = 40, .softcap = true),
      C("api user score_mod f16", 1, 2, 2, 30, 45, .dtype = KN_F16, .head_dim = 32, .mods = TEMP_SCORE_MOD),
      C("api dropout causal gqa f16", 2, 4, 2, 67, 81, .dtype = KN_F16, .head_dim = 64, .causal = 1,
        .dropout = 0.17f),
      V("api varlen dropout causal gqa f16", 4, 4, 2, L(67, 0, 1, 40), L(81, 3, 1, 0),
        .dtype = KN_F16, .head_dim = 56, .causal = 1, .dropout = 0.17f),
  };
  const kiln_attn_desc pub[] = {{.dtype = KILN_F16, .head_dim = 64, .causal = 1},
                                {.dtype = KILN_BF16, .head_dim = 40, .softcap = 1},
                                {.dtype = KILN_F16, .head_dim = 32, .mods = TEMP_SCORE_MOD},
                                {.dtype = KILN_F16, .head_dim = 64, .causal = 1, .dropout_p = 0.17f},
                                {.dtype = KILN_F16, .head_dim = 56, .causal = 1, .dropout_p = 0.17f,
                                 .layout = KILN_LAYOUT_VARLEN}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) api_case(ctx, &cases[i], &pub[i]);
  /* refusals at prepare */
  kiln_kernel *k;
  assert_int_equal(kiln_prepare_backward(ctx, &(kiln_attn_desc){.dtype = KILN_F16, .head_dim = 64,
                                                                 .layout = KILN_LAYOUT_PAGED}, NULL, &k),
                   KILN_ERR_UNSUPPORTED);
  if (!strstr(kiln_last_error(), "paged is not supported yet")) fail_msg("%s", kiln_last_error());
  /* a tiling half forced: block_m and block_n go together */
  for (int half = 0; half < 2; half++) {
    kiln_prepare_options po = {.block_m = half ? 0 : 32, .block_n = half ? 32 : 0};
    assert_int_equal(kiln_prepare_backward(ctx, &(kiln_attn_desc){.dtype = KILN_F16,
                                                                   .head_dim = 64}, &po, &k),
                     KILN_ERR_INVALID);
    if (!strstr(kiln_last_error(), "must be given together")) fail_msg("%s", kiln_last_error());
  }
  /* dropout: p outside [0, 1), with a paged cache, a seed for a kernel without dropout */
  assert_int_equal(kiln_prepare(ctx, &(kiln_attn_desc){.dtype = KILN_F16, .head_dim = 64,
                                                        .dropout_p = 1}, NULL, &k),
                   KILN_ERR_INVALID);
  if (!strstr(kiln_last_error(), "dropout_p 1 is not a probability")) fail_msg("%s", kiln_last_error());
  assert_int_equal(kiln_prepare(ctx, &(kiln_attn_desc){.dtype = KILN_F16, .head_dim = 64,
                                                        .dropout_p = 0.1f,
                                                        .layout = KILN_LAYOUT_PAGED}, NULL, &k),
                   KILN_ERR_UNSUPPORTED);
  if (!strstr(kiln_last_error(), "paged KV")) fail_msg("%s", kiln_last_error());
  if (kiln_prepare(ctx, &(kiln_attn_desc){.dtype = KILN_F16, .head_dim = 16}, NULL, &k))
    fail_msg("%s", kiln_last_error());
  {
    uint16_t buf[16] = {0};
    kiln_attn_args fa = {.q = buf, .k = buf, .v = buf, .o = buf, .batch = 1, .heads = 1,
                         .kv_heads = 1, .seqlen_q = 1, .seqlen_k = 1, .dropout_seed = 7};
    assert_int_equal(kiln_forward(k, &fa, NULL), KILN_ERR_INVALID);
    if (!strstr(kiln_last_error(), "not prepared with dropout")) fail_msg("%s", kiln_last_error());
  }
  kiln_context_destroy(ctx);
  /* AOT bundles hold forward kernels only: a bundle_only context never compiles a backward */
  co.bundle_only = 1;
  if (kiln_context_create(&co, &ctx)) fail_msg("context: %s", kiln_last_error());
  assert_int_equal(kiln_prepare_backward(ctx, &pub[0], NULL, &k), KILN_ERR_UNSUPPORTED);
  if (!strstr(kiln_last_error(), "AOT bundles hold forward kernels only"))
    fail_msg("%s", kiln_last_error());
  kiln_context_destroy(ctx);
}

int main(void) {
  const char *s = getenv("KILN_TEST_SEED");
  seed0 = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL);
  rng = seed0;
  printf("test_backward: KILN_TEST_SEED=%llu\n", (unsigned long long)seed0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_fd), cmocka_unit_test(test_mod_grad),
      cmocka_unit_test(test_errors),       cmocka_unit_test(test_interp),
      cmocka_unit_test(test_host),         cmocka_unit_test(test_emu),
      cmocka_unit_test(test_atomic_dq),
      cmocka_unit_test(test_codegen),      cmocka_unit_test(test_codegen_wgmma),
      cmocka_unit_test(test_codegen_atomic),
      cmocka_unit_test(test_api),
  };
  if (getenv("KILN_TEST_FILTER")) cmocka_set_test_filter(getenv("KILN_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
