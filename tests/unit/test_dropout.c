/* test_dropout.c — attention dropout (templates/attn_dropout.c, attention.h "Dropout",
 * docs/backward.md): its generator, the forward against the float64 reference, and the mask
 * the kernels imply.
 *
 * 1. Philox 4x32-10 in C against Random123's published known-answer vectors (kat_vectors).
 * 2. The same generator as tile IR (kn_philox_tile, kn_dropout_keep_tile) on the interpreter,
 *    the host and gfx90a-emu / gfx942-emu: the same bits as the C one for random seeds, offsets
 *    (whose sum with b * heads + h carries into the counter's high word) and tile positions.
 * 3. The forward with dropout p in {0, 0.17} (and 0.6) on the interpreter, the host and both
 *    emulated AMD targets against the float64 reference with the same mask, on fresh random
 *    inputs with ragged lengths, GQA / MQA, causal both ways, odd head dims, varlen; lse is the
 *    undropped one.  A reference with another seed must disagree (the test can fail).
 * 4. The mask the kernels imply, on the host: the forward with V = I (O[i, j] = P Z), the dK/dV
 *    kernel with one-hot dO (dV[j, i] = P Z) and the dQ kernel with K = I (dQ[i, j] =
 *    sm_scale P (Z - m_i)), compared with each other and with kn_dropout_keep pair by pair
 *    (GQA, causal both ways); the keep rate of the kernels' mask and of 2^22 draws of the
 *    generator within 3 sigma of 1 - p.
 * 5. Code: the forward with dropout at its default tilings for gfx90a / gfx942 (code objects)
 *    and sm_80 / sm_90a (ptxas; skipped without it): no spills (NVIDIA: a word at most).
 * 6. Bad input: p outside [0, 1), dropout with a paged KV cache or fp8 inputs.
 *
 * KILN_TEST_SEED=<n> replays the random inputs; KILN_TEST_VERBOSE=1 prints each case;
 * KILN_TEST_FWD_TILING=BM,BN,W compiles (5.) that tiling instead of the defaults.
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
#include "attn_gen.h"
#include "attn_internal.h"
#include "numeric.h"
#include "attn_test.h"

/* ---- 1. known answers -------------------------------------------------------------------------- */

static void test_philox_kat(void **state) {
  (void)state;
  /* Random123's kat_vectors, the philox4x32 10 lines: counter, key, result */
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1},
  };
  for (int i = 0; i < 3; i++) {
    uint32_t out[4];
    kn_philox4x32_10(kat[i], kat[i] + 4, out);
    for (int w = 0; w < 4; w++)
      if (out[w] != kat[i][6 + w])
        fail_msg("philox4x32-10 vector %d word %d: %08x, want %08x", i, w, out[w], kat[i][6 + w]);
  }
  /* the threshold and the mask's definition */
  assert_int_equal(kn_dropout_threshold(0), 0);
  assert_int_equal(kn_dropout_threshold(0.5f), 0x80000000u);
  assert_true(kn_dropout_threshold(0.17f) == (uint32_t)floor((double)0.17f * 4294967296.0));
  const uint32_t ctr[4] = {7, 5, 3 + 0xfffffffeu, 1};  /* offset 2^32 + 0xfffffffe, bh 3: carry */
  const uint32_t key[2] = {0x01234567u, 0x89abcdefu};
  uint32_t x[4];
  kn_philox4x32_10(ctr, key, x);
  const uint64_t offset = 0xfffffffeu;  /* + bh 3 carries into the counter's high word */
  assert_true(kn_dropout_keep(0x89abcdef01234567ull, offset, 3, 5, 7, x[0]));
  assert_false(kn_dropout_keep(0x89abcdef01234567ull, offset, 3, 5, 7, x[0] + 1));
}

/* ---- 2. the IR generator ------------------------------------------------------------------------ */

enum { PR = 32, PC = 16 };
static const float PK = 0.17f;

/* kernel "philox": out[0 .. PR*PC) the first words of the tile at (row0.., col0..) of query head
 * bh, out[PR*PC ..) its keep bits for p = PK */
static kn_module *philox_module(void) {
  kn_module *m = kn_module_new("<philox>");
  kn_type ty[6] = {kn_ty_ptr(KN_I32), kn_ty_scalar(KN_I64), kn_ty_scalar(KN_I64),
                   kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I32)};
  const char *names[6] = {"out", "seed", "offset", "bh", "row0", "col0"};
  kn_func *f = kn_func_new(m, "philox", true, 6, ty, names, 0, NULL);
  gen G = {.b = kn_builder_at_end(m, f->body)}, *g = &G;
  kn_value *P[6];
  for (int i = 0; i < 6; i++) P[i] = kn_func_param(f, i);
  kn_value *r = bin(g, KN_OP_ADD, named(g, kn_b_arange(&g->b, 0, PR), "r"), splat1(g, P[4], PR, "r0"), "rows1");
  kn_value *c = bin(g, KN_OP_ADD, named(g, kn_b_arange(&g->b, 0, PC), "c"), splat1(g, P[5], PC, "c0"), "cols1");
  kn_value *rows = cols_of(g, r, PC, "rows"), *cols = rows_of(g, c, PR, "cols");
  kn_value *x0 = kn_philox_tile(&g->b, P[1], P[2], P[3], rows, cols);
  kn_value *keep = kn_dropout_keep_tile(&g->b, P[1], P[2], P[3], rows, cols, PK);
  kn_value *k32 = named(g, kn_b_cast(&g->b, keep, KN_I32), "keep32");
  kn_value *c0 = ci(g, kn_ty_scalar(KN_I32), 0, "z"), *cpr = ci(g, kn_ty_scalar(KN_I32), PR, "pr");
  kn_value *one = ci(g, kn_ty_scalar(KN_I64), 1, "one"), *spc = ci(g, kn_ty_scalar(KN_I64), PC, "spc");
  kn_value *ccp = ci(g, kn_ty_scalar(KN_I32), PC, "pc");
  kn_b_store(&g->b, x0, P[0], (kn_value *[]){c0, c0}, (kn_value *[]){spc, one},
             (kn_value *[]){cpr, ccp}, NULL);
  kn_value *base2 = named(g, kn_b_ptradd(&g->b, P[0], ci(g, kn_ty_scalar(KN_I64), PR * PC, "half")), "out2");
  kn_b_store(&g->b, k32, base2, (kn_value *[]){c0, c0}, (kn_value *[]){spc, one},
             (kn_value *[]){cpr, ccp}, NULL);
  kn_b_return(&g->b, 0, NULL);
  kn_diag diag;
  if (kn_verify(m, &diag)) fail_msg("philox kernel: %s", diag.rendered);
  return m;
}

static void test_ir_philox(void **state) {
  (void)state;
  kn_module *m = philox_module();
  const char *targets[] = {NULL, "host", "gfx90a-emu", "gfx942-emu"};
  int32_t out[2 * PR * PC];
  for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++)
    for (int trial = 0; trial < 3; trial++) {
      const uint64_t seed = next(), offset = trial == 0 ? 0xfffffff0u : next();
      const int bh = irand(0, 1000), row0 = irand(0, 5000), col0 = irand(0, 5000);
      kn_argval args[6] = {{.p = out}, {.i = (int64_t)seed}, {.i = (int64_t)offset}, {.i = bh},
                           {.i = row0}, {.i = col0}};
      kn_region reg = {out, sizeof out};
      int grid[3] = {1, 1, 1};
      memset(out, 0x55, sizeof out);
      kn_diag diag;
      if (run_named_on_target(targets[t], m, "philox", args, grid, &reg, 1, NULL, "philox", &diag))
        fail_msg("philox on %s: %s", targets[t] ? targets[t] : "interp", diag.rendered);
      const uint32_t thr = kn_dropout_threshold(PK);
      int kept = 0;
      for (int i = 0; i < PR; i++)
        for (int j = 0; j < PC; j++) {
          const uint64_t o = offset + (uint64_t)bh;
          const uint32_t ctr[4] = {(uint32_t)(col0 + j), (uint32_t)(row0 + i), (uint32_t)o,
                                   (uint32_t)(o >> 32)};
          const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
          uint32_t x[4];
          kn_philox4x32_10(ctr, key, x);
          if ((uint32_t)out[i * PC + j] != x[0])
            fail_msg("%s: philox word at (%d, %d) = %08x, want %08x", targets[t] ? targets[t] : "interp",
                     i, j, (uint32_t)out[i * PC + j], x[0]);
          const bool keep = kn_dropout_keep(seed, offset, bh, row0 + i, col0 + j, thr);
          if (out[PR * PC + i * PC + j] != (int32_t)keep)
            fail_msg("%s: keep at (%d, %d) = %d, want %d", targets[t] ? targets[t] : "interp", i,
                     j, out[PR * PC + i * PC + j], keep);
          kept += keep;
        }
      if (verbose())
        printf("  %-10s philox tile matches C; kept %d of %d\n", targets[t] ? targets[t] : "interp",
               kept, PR * PC);
    }
  kn_module_free(m);
}

/* ---- 3. the forward ----------------------------------------------------------------------------- */

typedef struct fcase {
  const char *name;
  kn_attn_desc desc;
  int batch, heads, kv_heads, nq, nk;
  const int *lens_q, *lens_k;  /* varlen: the sequences' lengths (batch of them) */
} fcase;

#define F(nm, b, h, hk, q, k, ...) \
  {.name = nm, .desc = {.has_lse = true, __VA_ARGS__}, .batch = b, .heads = h, .kv_heads = hk, .nq = q, .nk = k}

typedef struct fbufs {
  void *q, *k, *v, *o;
  float *lse;
  double *qd, *kd, *vd;
  size_t nq, nk, nrow;  /* elements of q/o, k/v, lse */
  int32_t cu_q[9], cu_k[9];
  kn_attn_problem p;
} fbufs;

/* the problem of c (varlen: packed, cu_seqlens from the lengths) and its random inputs; the
 * values of k and v come from fill(0 for k / 1 for v, key j, column d) when it is given (the
 * mask test's identities) */
typedef double (*kv_fill)(int which, int j, int d);
static void fbufs_make(fbufs *b, const fcase *c, uint64_t seed, uint64_t offset, kv_fill fill) {
  const kn_attn_desc *d = &c->desc;
  const kn_scalar dt = d->dtype;
  const int D = d->head_dim;
  const size_t es = kn_scalar_size(dt);
  memset(b, 0, sizeof *b);
  b->p = (kn_attn_problem){.batch = c->batch, .heads = c->heads, .kv_heads = c->kv_heads,
                           .seqlen_q = c->nq, .seqlen_k = c->nk, .dropout_seed = seed,
                           .dropout_offset = offset};
  size_t tq = (size_t)c->batch * c->nq, tk = (size_t)c->batch * c->nk;
  if (d->layout == KN_ATTN_VARLEN) {
    for (int i = 0; i < c->batch; i++) {
      b->cu_q[i + 1] = b->cu_q[i] + c->lens_q[i];
      b->cu_k[i + 1] = b->cu_k[i] + c->lens_k[i];
    }
    tq = (size_t)b->cu_q[c->batch], tk = (size_t)b->cu_k[c->batch];
    b->p.cu_seqlens_q = b->cu_q, b->p.cu_seqlens_k = b->cu_k;
    b->p.total_q = (int)tq, b->p.total_k = (int)tk;
  }
  b->nq = tq * c->heads * D, b->nk = tk * c->kv_heads * D, b->nrow = tq * c->heads;
  b->q = malloc(es * (b->nq + 1)), b->o = malloc(es * (b->nq + 1));
  b->k = malloc(es * (b->nk + 1)), b->v = malloc(es * (b->nk + 1));
  b->lse = malloc(4 * (b->nrow + 1));
  b->qd = malloc(8 * (b->nq + 1)), b->kd = malloc(8 * (b->nk + 1)), b->vd = malloc(8 * (b->nk + 1));
  for (size_t i = 0; i < b->nq; i++) {
    kn_store_elem(dt, (char *)b->q + i * es, unif(-2, 2));
    b->qd[i] = kn_load_elem(dt, (char *)b->q + i * es);
    kn_store_elem(dt, (char *)b->o + i * es, NAN);
  }
  for (size_t i = 0; i < b->nk; i++) {
    /* dense (B, HK, Nk, D): element i is (j, d) of its (batch, kv head) */
    const int dd = (int)(i % (size_t)D), j = (int)(i / (size_t)D % (size_t)c->nk);
    const double kx = unif(-2, 2), vx = unif(-2, 2);
    kn_store_elem(dt, (char *)b->k + i * es, fill ? fill(0, j, dd) : kx);
    b->kd[i] = kn_load_elem(dt, (char *)b->k + i * es);
    kn_store_elem(dt, (char *)b->v + i * es, fill ? fill(1, j, dd) : vx);
    b->vd[i] = kn_load_elem(dt, (char *)b->v + i * es);
  }
  for (size_t i = 0; i < b->nrow; i++) b->lse[i] = NAN;
}

static void fbufs_free(fbufs *b) {
  void *all[] = {b->q, b->k, b->v, b->o, b->lse, b->qd, b->kd, b->vd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* the forward of c on target (NULL: the interpreter) into b->o, b->lse */
static void fwd_run(const char *target, const fcase *c, const kn_attn_config *cfg, fbufs *b) {
  const kn_attn_desc *d = &c->desc;
  const size_t es = kn_scalar_size(d->dtype);
  kn_diag diag;
  kn_module *m = kn_module_new("<dropout>");
  kn_func *f = kn_attn_fwd_build(m, d, cfg, &diag);
  if (!f) fail_msg("%s: build: %s", c->name, diag.rendered);
  if (kn_verify(m, &diag)) fail_msg("%s: verify: %s", c->name, diag.rendered);
  kn_attn_sig sig;
  if (kn_attn_signature(d, &sig, &diag)) fail_msg("%s: signature: %s", c->name, diag.message);
  assert_int_equal(sig.n, kn_func_nparams(f));
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[3];
  if (kn_attn_fill_args(d, &sig, cfg, &b->p, b->q, b->k, b->v, b->o, b->lse, NULL, args, grid, &diag))
    fail_msg("%s: args: %s", c->name, diag.message);
  kn_region regions[8] = {{b->q, b->nq * es}, {b->k, b->nk * es}, {b->v, b->nk * es},
                          {b->o, b->nq * es}, {b->lse, b->nrow * 4}};
  int nreg = 5;
  if (d->layout == KN_ATTN_VARLEN) {
    regions[nreg++] = (kn_region){b->cu_q, sizeof(int32_t) * (size_t)(c->batch + 1)};
    regions[nreg++] = (kn_region){b->cu_k, sizeof(int32_t) * (size_t)(c->batch + 1)};
  }
  if (run_on_target(target, m, f, args, grid, regions, nreg, NULL, c->name, &diag))
    fail_msg("%s on %s (seed %llu): %s", c->name, target ? target : "interp",
             (unsigned long long)seed0, diag.message);
  kn_module_free(m);
}

/* max |O - ref| and |lse - ref| of the kernel's outputs in b against the reference of problem p */
static void fwd_errors(const fcase *c, const fbufs *b, const kn_attn_problem *p, double *err,
                       double *lse_err) {
  const kn_scalar dt = c->desc.dtype;
  const size_t es = kn_scalar_size(dt);
  double *od = malloc(8 * (b->nq + 1)), *ld = malloc(8 * (b->nrow + 1));
  for (size_t i = 0; i < b->nq; i++) od[i] = 0;
  for (size_t i = 0; i < b->nrow; i++) ld[i] = -INFINITY;
  kn_diag diag;
  if (kn_attn_reference_v(&c->desc, NULL, p, NULL, b->qd, b->kd, b->vd, od, ld, &diag))
    fail_msg("%s: reference: %s", c->name, diag.message);
  *err = *lse_err = 0;
  for (size_t i = 0; i < b->nq; i++) {
    double e = fabs(kn_load_elem(dt, (const char *)b->o + i * es) - od[i]);
    if (!(e <= *err)) *err = e;
  }
  for (size_t i = 0; i < b->nrow; i++) {
    double x = b->lse[i], y = ld[i], e = x == y ? 0 : fabs(x - y);
    if (!(e <= *lse_err)) *lse_err = e;
  }
  free(od), free(ld);
}

static void fwd_case(const char *target, const fcase *c, const kn_attn_config *cfg_in) {
  fbufs b;
  fbufs_make(&b, c, next(), next(), NULL);
  const kn_arch *arch = target && strstr(target, "gfx") ? kn_arch_get(strstr(target, "gfx942") ? "gfx942" : "gfx90a") : NULL;
  kn_attn_config cfg = cfg_in ? *cfg_in : kn_attn_default_config(arch, &c->desc);
  fwd_run(target, c, &cfg, &b);
  double err, lerr;
  fwd_errors(c, &b, &b.p, &err, &lerr);
  /* |O| can exceed max |V| by the dropout scale 1 / (1 - p); the dtype's bound grows with it */
  const double tol = kn_attn_tolerance_of(&c->desc) * 2;
  const double ltol = kn_attn_lse_tolerance(c->desc.dtype) * 4;
  /* the same check with another seed (the mask differs) must fail: the test can fail */
  double wrong = 0, wl;
  if (c->desc.dropout != 0) {
    kn_attn_problem p2 = b.p;
    p2.dropout_seed ^= 1;
    fwd_errors(c, &b, &p2, &wrong, &wl);
  }
  if (verbose())
    printf("  %-10s %-34s %dx%d: err %.3g (tol %.3g) lse %.3g; another seed's reference: %.3g\n",
           target ? target : "interp", c->name, cfg.block_m, cfg.block_n, err, tol, lerr, wrong);
  if (!(err <= tol) || !(lerr <= ltol))
    fail_msg("%s on %s (seed %llu): err O %.3g (tol %.3g), lse %.3g (tol %.3g)", c->name,
             target ? target : "interp", (unsigned long long)seed0, err, tol, lerr, ltol);
  if (c->desc.dropout != 0 && !(wrong > 4 * tol))
    fail_msg("%s: the reference with another seed agrees with the kernel (%.3g)", c->name, wrong);
  fbufs_free(&b);
}

static const int vl_q[3] = {37, 1, 60}, vl_k[3] = {50, 19, 33};

static void test_forward(void **state) {
  (void)state;
  const kn_attn_config small = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
  const fcase interp[] = {
      F("p=0 f16", 1, 2, 2, 23, 31, .dtype = KN_F16, .head_dim = 16),
      F("p=0.17 f16", 1, 2, 2, 23, 31, .dtype = KN_F16, .head_dim = 16, .dropout = 0.17f),
      F("p=0.17 causal gqa f32 d7", 2, 4, 2, 33, 21, .dtype = KN_F32, .head_dim = 7, .causal = 1,
        .dropout = 0.17f),
      F("p=0.17 causal top-left mqa bf16", 1, 3, 1, 19, 40, .dtype = KN_BF16, .head_dim = 16,
        .causal = 2, .dropout = 0.17f),
  };
  for (size_t i = 0; i < sizeof interp / sizeof interp[0]; i++) fwd_case(NULL, &interp[i], &small);
  const fcase host[] = {
      F("p=0 causal gqa f16 d64", 2, 4, 2, 150, 133, .dtype = KN_F16, .head_dim = 64, .causal = 1),
      F("p=0.17 f16 d64", 2, 2, 2, 150, 133, .dtype = KN_F16, .head_dim = 64, .dropout = 0.17f),
      F("p=0.17 causal gqa bf16 d59", 1, 4, 2, 97, 130, .dtype = KN_BF16, .head_dim = 59,
        .causal = 1, .dropout = 0.17f),
      F("p=0.17 causal top-left mqa f32", 1, 3, 1, 120, 77, .dtype = KN_F32, .head_dim = 32,
        .causal = 2, .dropout = 0.17f),
      F("p=0.6 f16 d128", 1, 1, 1, 129, 200, .dtype = KN_F16, .head_dim = 128, .dropout = 0.6f),
  };
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) fwd_case("host", &host[i], NULL);
  /* varlen: each sequence's rows and keys count from its first token (attention.h) */
  fcase vl = F("p=0.17 varlen causal gqa f16", 3, 4, 2, 60, 50, .dtype = KN_F16, .head_dim = 32,
               .causal = 1, .layout = KN_ATTN_VARLEN, .dropout = 0.17f);
  vl.lens_q = vl_q, vl.lens_k = vl_k;
  fwd_case("host", &vl, NULL);
  fwd_case(NULL, &vl, &small);
  const char *emu[] = {"gfx90a-emu", "gfx942-emu"};
  for (int t = 0; t < 2; t++) {
    const fcase cs[] = {
        F("p=0.17 causal gqa f16", 1, 2, 1, 45, 37, .dtype = KN_F16, .head_dim = 32, .causal = 1,
          .dropout = 0.17f),
        F("p=0.17 bf16 d20", 1, 1, 1, 33, 40, .dtype = KN_BF16, .head_dim = 20, .dropout = 0.17f),
    };
    const kn_attn_config cfg = {.block_m = 32, .block_n = 32, .warps = 2, .stages = 1};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) fwd_case(emu[t], &cs[i], &cfg);
  }
}

/* ---- 4. the mask the kernels imply ---------------------------------------------------------------- */

/* run A: K random, V = I (v_j = e_j) */
static double fill_a(int which, int j, int d) { return which == 0 ? unif(-2, 2) : j == d; }
/* run B: K = I (k_j = e_j), every row of V e_0 */
static double fill_b(int which, int j, int d) { return which == 0 ? j == d : d == 0; }

/* the three backward kernels of c on the host, on the forward's O and lse in b and dO (f32) */
static void bwd_run_host(const fcase *c, fbufs *b, float *dof, float *dq, float *dk, float *dv) {
  const kn_attn_desc *d = &c->desc;
  float *delta = malloc(4 * b->nrow);
  kn_attn_config bc = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
  kn_diag diag;
  kn_module *m = kn_module_new("<bwd>");
  if (kn_attn_bwd_build(m, d, &bc, &diag)) fail_msg("bwd build: %s", diag.rendered);
  kn_attn_sig sig;
  if (kn_attn_bwd_signature(d, &sig, &diag)) fail_msg("bwd sig: %s", diag.message);
  kn_attn_bwd_bufs bb = {b->q, b->k, b->v, b->o, dof, b->lse, delta, dq, dk, dv, NULL};
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[KN_BWD_NKERNELS][3];
  if (kn_attn_bwd_fill_args(d, &sig, &bc, &b->p, &bb, NULL, args, grid, &diag))
    fail_msg("bwd args: %s", diag.message);
  for (int w = 0; w < KN_BWD_NKERNELS; w++)
    if (run_named_on_target("host", m, kn_attn_bwd_kernels[w], args, grid[w], NULL, 0, NULL,
                            "mask", &diag))
      fail_msg("bwd %s: %s", kn_attn_bwd_kernels[w], diag.message);
  kn_module_free(m);
  free(delta);
}

/* The mask each kernel implies, on the host, against kn_dropout_keep on every live pair (P > 0
 * there: no score underflows), three ways:
 *  - the forward with V = I: O[b, h, i, j] = P Z of pair (i, j), nonzero iff kept;
 *  - the dK/dV kernel with dO[b, h, i] = e_(g Nq + i) (g the head's index in its group):
 *    dV[b, hk, j, g Nq + i] = P Z of pair (i, j) of head h;
 *  - the dQ kernel with K = I, every row of V e_0 and of dO e_0: dP = Z, O_i = m_i e_0 with
 *    m_i = sum_j P Z, delta_i = m_i, so dQ[b, h, i, j] = sm_scale P (Z - m_i) and
 *    Z = dQ / (sm_scale P) + m_i, which is 0 or 1 / (1 - p).
 * Returns the kept and live pairs. */
static void mask_case(const fcase *c, uint64_t seed, uint64_t offset, int64_t *kept_out,
                      int64_t *live_out) {
  const kn_attn_desc *d = &c->desc;
  const int D = d->head_dim, B = c->batch, H = c->heads, HK = c->kv_heads, Nq = c->nq, Nk = c->nk;
  const int group = H / HK;
  assert_true(Nk <= D && group * Nq <= D && d->dtype == KN_F32);
  const kn_attn_config fc = {.block_m = 32, .block_n = 16, .warps = 1, .stages = 1};
  fbufs a, bb;
  fbufs_make(&a, c, seed, offset, fill_a);
  fbufs_make(&bb, c, seed, offset, fill_b);
  fwd_run("host", c, &fc, &a);
  fwd_run("host", c, &fc, &bb);
  float *dof = malloc(4 * a.nq), *dq = malloc(4 * a.nq), *dk = malloc(4 * a.nk), *dv = malloc(4 * a.nk);
  for (int bi = 0; bi < B; bi++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < Nq; i++)
        for (int x = 0; x < D; x++)
          dof[(((size_t)bi * H + h) * Nq + i) * D + x] = x == (h % group) * Nq + i;
  bwd_run_host(c, &a, dof, dq, dk, dv);   /* run A: dV */
  float *dv_a = dv;
  dv = malloc(4 * a.nk);
  for (size_t i = 0; i < a.nq; i++) dof[i] = i % (size_t)D == 0;
  bwd_run_host(c, &bb, dof, dq, dk, dv);  /* run B: dQ */
  const uint32_t thr = kn_dropout_threshold(d->dropout);
  const double scale = 1 / sqrt((double)D), zk = kn_dropout_scale(d->dropout);
  int64_t kept = 0, live = 0;
  const float *oa = a.o, *ob = bb.o;
  for (int bi = 0; bi < B; bi++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < Nq; i++) {
        const size_t row = ((size_t)bi * H + h) * Nq + i;
        const double m_i = ob[row * D];  /* O_i = m_i e_0 */
        for (int j = 0; j < Nk; j++) {
          const int off = Nk - Nq;
          if ((d->causal == 1 && j > i + off) || (d->causal == 2 && j > i)) continue;
          live++;
          const bool want = kn_dropout_keep(seed, offset, (int64_t)bi * H + h, i, j, thr);
          const bool fwd = oa[row * D + j] != 0;
          const bool bwd_dv = dv_a[(((size_t)bi * HK + h / group) * Nk + j) * D + (h % group) * Nq + i] != 0;
          /* run B's P from the forward's lse: the score of (i, j) is sm_scale q_i[j] */
          const double pij = exp(scale * bb.qd[row * D + j] - bb.lse[row]);
          const double z = dq[row * D + j] / (scale * pij) + m_i;
          const bool bwd_dq = z > zk / 2;
          if (fwd != want || bwd_dv != want || bwd_dq != want || !(fabs(z - (want ? zk : 0)) < 1e-2))
            fail_msg("%s: pair (b %d, h %d, i %d, j %d): kept by the generator %d, the forward %d, "
                     "the dK/dV kernel %d, the dQ kernel %d (Z %.4g)", c->name, bi, h, i, j, want,
                     fwd, bwd_dv, bwd_dq, z);
          kept += want;
        }
      }
  *kept_out += kept, *live_out += live;
  free(dof), free(dq), free(dk), free(dv), free(dv_a);
  fbufs_free(&a);
  fbufs_free(&bb);
}

/* |rate - (1 - p)| in sigmas of n Bernoulli draws */
static double sigmas(int64_t kept, int64_t n, double p) {
  return fabs((double)kept / (double)n - (1 - p)) / sqrt(p * (1 - p) / (double)n);
}

static void test_mask(void **state) {
  (void)state;
  const fcase cs[] = {
      F("mask gqa", 2, 4, 2, 21, 40, .dtype = KN_F32, .head_dim = 48, .dropout = 0.17f),
      F("mask causal mqa", 1, 2, 1, 23, 33, .dtype = KN_F32, .head_dim = 48, .causal = 1,
        .dropout = 0.17f),
      F("mask causal top-left", 1, 2, 2, 30, 17, .dtype = KN_F32, .head_dim = 32, .causal = 2,
        .dropout = 0.17f),
      F("mask large", 8, 8, 4, 24, 48, .dtype = KN_F32, .head_dim = 48, .dropout = 0.17f),
  };
  /* The keep rates are checked at 3 sigma, which 0.3% of seeds miss by chance: their seeds are
   * fixed (an LCG stream of their own), so the test fails only for a biased generator; the
   * inputs are fresh.  The forward and backward tests draw fresh seeds. */
  uint64_t fixed = 0x6b696c6e64726f70ull;
  int64_t kept = 0, live = 0;
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
    const uint64_t sd = fixed = fixed * 6364136223846793005ull + 1442695040888963407ull;
    mask_case(&cs[i], sd, sd >> 7, &kept, &live);
  }
  const double sk = sigmas(kept, live, 0.17f);
  printf("  kernels' mask: kept %lld of %lld pairs (rate %.4f, %.2f sigma from 1 - p)\n",
         (long long)kept, (long long)live, (double)kept / (double)live, sk);
  if (!(sk <= 3)) fail_msg("the kernels' keep rate is %.2f sigma from 1 - p", sk);
  /* the generator on a large sample */
  const float ps[] = {0.17f, 0.5f, 0.9f};
  for (int t = 0; t < 3; t++) {
    const uint64_t seed = fixed = fixed * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t offset = seed >> 9;
    const uint32_t thr = kn_dropout_threshold(ps[t]);
    int64_t k = 0, n = 0;
    for (int bh = 0; bh < 16; bh++)
      for (int i = 0; i < 512; i++)
        for (int j = 0; j < 512; j++, n++) k += kn_dropout_keep(seed, offset, bh, i, j, thr);
    const double s = sigmas(k, n, ps[t]);
    printf("  generator p=%.2f: kept %lld of %lld (rate %.5f, %.2f sigma)\n", (double)ps[t],
           (long long)k, (long long)n, (double)k / (double)n, s);
    if (!(s <= 3)) fail_msg("the generator's keep rate at p %g is %.2f sigma from 1 - p", (double)ps[t], s);
  }
}

/* ---- 5. code for the GPU targets ---------------------------------------------------------------- */

static void test_codegen(void **state) {
  (void)state;
  const char *archs[] = {"gfx90a", "gfx942", "sm_80", "sm_90a"};
  const int dims[] = {64, 128};
  for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
    const kn_arch *arch;
    const kn_target *t;
    if (!code_target(archs[a], &arch, &t)) continue;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (int causal = 0; causal <= 1; causal++) {
        kn_attn_desc d = {.dtype = KN_F16, .head_dim = dims[di], .causal = causal, .has_lse = true,
                          .dropout = 0.17f};
        kn_attn_config cfg = kn_attn_default_config(arch, &d);
        const char *tl = getenv("KILN_TEST_FWD_TILING");  /* "BM,BN,W": measure another tiling */
        if (tl) sscanf(tl, "%d,%d,%d", &cfg.block_m, &cfg.block_n, &cfg.warps);
        kn_diag diag;
        if (kn_attn_check_on(arch, &d, &cfg, &diag)) {
          if (!tl) fail_msg("%s: %s", archs[a], diag.message);
          printf("  %-6s D%-3d %s\n", archs[a], dims[di], diag.message);
          continue;
        }
        kn_module *m = kn_module_new("<dropout>");
        if (!kn_attn_fwd_build(m, &d, &cfg, &diag)) fail_msg("build: %s", diag.rendered);
        kn_artifact art;
        if (kn_compile_artifact(m, "attn_fwd", t, NULL, &art, &diag))
          fail_msg("%s D%d: %s", archs[a], dims[di], diag.rendered);
        int spills = artifact_spills(&art, arch, "attn_fwd");
        printf("  %-6s D%-3d causal=%d dropout %dx%d w%d attn_fwd spills %d\n", archs[a], dims[di],
               causal, cfg.block_m, cfg.block_n, cfg.warps, spills);
        /* the defaults spill nothing (NVIDIA: at most a word each way, as test_variants) */
        if (!tl && spills > (arch->isa == KN_ISA_NVPTX ? 8 : 0))
          fail_msg("%s D%d causal=%d: the dropout forward's default %dx%d w%d spills %d",
                   archs[a], dims[di], causal, cfg.block_m, cfg.block_n, cfg.warps, spills);
        kn_artifact_free(&art);
        kn_module_free(m);
      }
  }
}

/* ---- 6. bad input ------------------------------------------------------------------------------- */

static void check_refuses(kn_attn_desc d, const char *want) {
  kn_attn_config c = {.block_m = 64, .block_n = 64, .warps = 4, .stages = 1};
  kn_diag diag;
  assert_int_equal(kn_attn_check(&d, &c, &diag), -1);
  if (!strstr(diag.message, want)) fail_msg("error '%s' does not say '%s'", diag.message, want);
}

static void test_errors(void **state) {
  (void)state;
  check_refuses((kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .dropout = 1}, "not in [0, 1)");
  check_refuses((kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .dropout = -0.1f}, "not in [0, 1)");
  check_refuses((kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .dropout = NAN}, "not in [0, 1)");
  check_refuses((kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .dropout = 0.1f,
                              .layout = KN_ATTN_PAGED}, "paged");
  check_refuses((kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .dropout = 0.1f,
                              .kv_dtype = KN_F8E4M3}, "fp8");
  /* the key: p != 0 kernels are keyed apart, p = 0 keys as before the field existed */
  char k0[KN_ATTN_KEY_MAX], k1[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(&(kn_attn_desc){.dtype = KN_F16, .head_dim = 64}, k0, sizeof k0);
  kn_attn_desc_key(&(kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .dropout = 0.17f}, k1, sizeof k1);
  assert_null(strstr(k0, "dropout"));
  assert_non_null(strstr(k1, ";dropout=0.17"));
  kn_attn_desc_key(&(kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .dropout = nextafterf(0.17f, 1)},
                   k0, sizeof k0);
  assert_string_not_equal(k0, k1);
}

int main(void) {
  seed_from_env("dropout");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_kat), cmocka_unit_test(test_ir_philox),
      cmocka_unit_test(test_errors),     cmocka_unit_test(test_forward),
      cmocka_unit_test(test_mask),       cmocka_unit_test(test_codegen),
  };
  if (getenv("KILN_TEST_FILTER")) cmocka_set_test_filter(getenv("KILN_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
