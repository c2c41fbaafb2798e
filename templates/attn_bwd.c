/* attn_bwd.c — the FlashAttention-2 backward templates, built with the IR builder (attn_bwd.h).
 *
 * Math (exp2 units as the forward: qk_scale = sm_scale * log2(e), lse2 = lse * log2(e)).  With
 * z the final score in natural units (sm_scale * q.k, then the score modifiers) and the forward's
 * lse, P = exp(z - lse) = 2^(z log2e - lse2) is recomputed exactly as the forward normalised it,
 * and for loss L with dL/dO = dO:
 *     dV = P^T dO                  dP = dO V^T
 *     dS = P * (dP - delta)        delta = rowsum(dO * O)   (= rowsum(P * dP))
 *     dQ = sm_scale * (dS * f') K    dK = sm_scale * (dS * f')^T Q
 * where f' = d z / d(sm_scale q.k) is the product of the score modifiers' derivatives (1 without
 * any; kn_attn_mod_grad derives each from its IR).  Masked pairs get z = -inf, so P = 0 and dS = 0.
 * A row that saw no key has lse = -inf: the kernels use lse2 = +inf there, so its P is 0 too.
 * Dropout (attention.h, "Dropout"): with Z = keep / (1 - p) regenerated from the forward's seed
 * and offset (kn_dropout_keep_tile), dV = (P * Z)^T dO and dS = P * (Z * dP - delta); the kept
 * weights are summed into dV and 1 / (1 - p) applied once at its store.
 *
 * Three kernels, no atomics.  attn_bwd_pre computes delta once per row (f32, from the stored O
 * as FlashAttention 2 does).  attn_bwd_dkdv owns BLOCK_N keys of one kv head, holds K, V and the
 * f32 accumulators dK, dV, and walks the query heads of its group and, for each, the query
 * blocks whose rows may see its keys; it computes the transposed tiles S^T = K Q^T (BLOCK_N x
 * BLOCK_M) so that dV += P^T dO and dK += dS^T Q are plain dots (Q^T and dO^T are loads with
 * swapped strides, as the forward loads K^T).  attn_bwd_dq owns BLOCK_N query rows (the rows a program
 * owns are BLOCK_N in both kernels, the blocks it walks BLOCK_M), holds Q, dO, lse and delta,
 * and walks the key blocks as the forward does, accumulating dQ += dS K.  P and
 * dS are rounded to the input dtype before their dots (as FlashAttention 2 does), every
 * accumulator is f32, and each output is written once, in one order: deterministic.
 *
 * Varlen (attention.h, docs/backward.md): every kernel opens its sequence with the forward's setup
 * (open_seq, kn_attn_varlen_open) and from there sees the sequence's own lengths and indices.
 *
 * Masking: the key bound (c < seqlen_k) and the query bound (r < seqlen_q) are explicit, and every
 * mask modifier of the plan (causal included) is applied on every visited block through the same
 * elemental calls as the forward.  Causal, prefix and window also bound the loops: the dQ kernel
 * uses the forward's key range, the dK/dV kernel the range of query rows that may see any key of
 * its block (causal: r >= n0 - (Nk - Nq), 0 for top-left; window: n0 - off - right <= r <=
 * n_last - off + left; prefix: every row when the block starts below the prefix).  The modifiers
 * see indices clamped into [0, seqlen) (they may index tensors with them; the pairs outside are
 * masked anyway).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_bwd.h"
#include "attn_gen.h"
#include "attn_internal.h"

const char *const kn_attn_bwd_kernels[KN_BWD_NKERNELS] = {"attn_bwd_pre", "attn_bwd_dkdv",
                                                          "attn_bwd_dq"};

/* parameter indices, in the order of attn_bwd.h */
enum {
  B_Q, B_K, B_V, B_O, B_DO, B_DQ, B_DK, B_DV, B_LSE, B_DELTA,
  B_SM_SCALE, B_SEQLEN_Q, B_SEQLEN_K, B_HEADS, B_KV_GROUP,
  B_Q_SB, B_Q_SH, B_Q_SM, B_K_SB, B_K_SH, B_K_SN, B_V_SB, B_V_SH, B_V_SN,
  B_O_SB, B_O_SH, B_O_SM, B_DO_SB, B_DO_SH, B_DO_SM, B_DQ_SB, B_DQ_SH, B_DQ_SM,
  B_DK_SB, B_DK_SH, B_DK_SN, B_DV_SB, B_DV_SH, B_DV_SN, B_LSE_SB, B_LSE_SH,
  B_DELTA_SB, B_DELTA_SH, B_DQA, B_COUNT
};
_Static_assert((int)B_COUNT == (int)KN_ATTN_BWD_NPARAMS, "parameter list and KN_ATTN_BWD_NPARAMS");

const char *const kn_attn_bwd_param_names[KN_ATTN_BWD_NPARAMS] = {
    "q", "k", "v", "o", "do", "dq", "dk", "dv", "lse", "delta",
    "sm_scale", "seqlen_q", "seqlen_k", "heads", "kv_group",
    "q_sb", "q_sh", "q_sm", "k_sb", "k_sh", "k_sn", "v_sb", "v_sh", "v_sn",
    "o_sb", "o_sh", "o_sm", "do_sb", "do_sh", "do_sm", "dq_sb", "dq_sh", "dq_sm",
    "dk_sb", "dk_sh", "dk_sn", "dv_sb", "dv_sh", "dv_sn", "lse_sb", "lse_sh",
    "delta_sb", "delta_sh", "dq_acc"};

kn_type kn_attn_bwd_param_type(const kn_attn_desc *d, int i) {
  if (i == B_DQA) return kn_ty_ptr(KN_F32);
  if (i <= B_DV) return kn_ty_ptr(d->dtype);
  if (i <= B_DELTA) return kn_ty_ptr(KN_F32);
  if (i == B_SM_SCALE) return kn_ty_scalar(KN_F32);
  if (i <= B_KV_GROUP) return kn_ty_scalar(KN_I32);
  return kn_ty_scalar(KN_I64);
}

/* the backward parameter of the forward signature's parameter i: the template's own by name
 * (every forward name is a backward one), the variant's after the backward's own */
static int bwd_index(int i) {
  if (i >= KN_ATTN_NPARAMS) return B_COUNT + i - KN_ATTN_NPARAMS;
  for (int j = 0; j < B_COUNT; j++)
    if (!strcmp(kn_attn_param_names[i], kn_attn_bwd_param_names[j])) return j;
  KN_ASSERT(!"a forward parameter without a backward one");
  return 0;
}

static int bwd_sig_of(const kn_attn_sig *fs, kn_attn_sig *sig, const kn_attn_desc *d,
                      kn_diag *diag) {
  if (fs->n - KN_ATTN_NPARAMS + B_COUNT > KN_ATTN_MAX_PARAMS)
    return kn_error(diag, NULL, (kn_loc){0}, "attention backward: the variant's %d parameters "
                    "and the backward's %d are more than %d", fs->n - KN_ATTN_NPARAMS, B_COUNT,
                    KN_ATTN_MAX_PARAMS);
  sig->n = 0;
  for (int i = 0; i < B_COUNT; i++, sig->n++) {
    sig->type[i] = kn_attn_bwd_param_type(d, i);
    snprintf(sig->name[i], sizeof sig->name[i], "%s", kn_attn_bwd_param_names[i]);
  }
  for (int i = KN_ATTN_NPARAMS; i < fs->n; i++, sig->n++) {
    sig->type[sig->n] = fs->type[i];
    memcpy(sig->name[sig->n], fs->name[i], sizeof sig->name[0]);
  }
  return 0;
}

/* the forward signature that bwd_sig_of turned into sig: the template's own parameters, then the
 * variant's (sig's after the backward's own, in the same order); what kn_attn_signature gives
 * for sig's descriptor, without parsing its modifier texts again */
static int fwd_sig_of(const kn_attn_sig *sig, kn_attn_sig *fs, const kn_attn_desc *d,
                      kn_diag *diag) {
  if (sig->n < B_COUNT || sig->n - B_COUNT + KN_ATTN_NPARAMS > KN_ATTN_MAX_PARAMS)
    return kn_error(diag, NULL, (kn_loc){0}, "attention backward: a signature of %d parameters "
                    "is not a backward one (kn_attn_bwd_signature)", sig->n);
  for (int i = 0; i < KN_ATTN_NPARAMS; i++) {
    fs->type[i] = kn_attn_param_type(d, i);
    snprintf(fs->name[i], sizeof fs->name[i], "%s", kn_attn_param_names[i]);
  }
  fs->n = KN_ATTN_NPARAMS;
  for (int i = B_COUNT; i < sig->n; i++, fs->n++) {
    fs->type[fs->n] = sig->type[i];
    memcpy(fs->name[fs->n], sig->name[i], sizeof fs->name[0]);
  }
  return 0;
}

static int bwd_check(const kn_attn_desc *d, kn_diag *diag) {
  if (d->layout == KN_ATTN_PAGED)
    return kn_error(diag, NULL, (kn_loc){0}, "attention backward: paged is not supported yet "
                    "(dense (B, H, N, D) or varlen buffers: training does not page)");
  return 0;
}

int kn_attn_bwd_signature(const kn_attn_desc *d, kn_attn_sig *sig, kn_diag *diag) {
  kn_attn_sig fs;
  if (bwd_check(d, diag) || kn_attn_signature(d, &fs, diag)) return -1;
  return bwd_sig_of(&fs, sig, d, diag);
}

/* ---- checks and defaults ------------------------------------------------------------------------ */

typedef struct fit4 {
  int bm, bn, dp, w;
  bool adq;
} fit4;

/* the dots' two shapes: S^T = K Q^T and dP^T = V dO^T (BN x BM x DP), dV += P^T dO and
 * dK += dS^T Q (BN x DP x BM) in the dK/dV kernel, and the same in the dQ kernel, whose
 * program owns BN query rows and steps BM keys: S = Q K^T, dP = dO V^T, dQ += dS K.  With
 * atomic_dq the dK/dV kernel has a third, dQ^T = K^T dS^T (DP x BM x BN), and the dQ kernel none */
static bool fits_all_dots(void *p, const kn_mma_instr *in) {
  const fit4 *f = p;
  return kn_mma_fits(in, f->bn, f->bm, f->dp, f->w) && kn_mma_fits(in, f->bn, f->dp, f->bm, f->w) &&
         (!f->adq || kn_mma_fits(in, f->dp, f->bm, f->bn, f->w));
}

int kn_attn_bwd_check_on(const kn_arch *arch, const kn_attn_desc *d, const kn_attn_config *c,
                         kn_diag *diag) {
  kn_loc nowhere = {0};
  if (kn_attn_check(d, c, diag) || bwd_check(d, diag)) return -1;
  const int dp = kn_attn_head_pad(d->head_dim);
  if (dp > 256)
    return kn_error(diag, NULL, nowhere, "attention backward: head dim %d is not supported "
                    "(1..256)", d->head_dim);
  fit4 f = {c->block_m, c->block_n, dp, c->warps, c->atomic_dq};
  if (c->wgmma && arch) {  /* sm_90a's wgmma: one 64-row slab (block_n) per warpgroup */
    const kn_mma_instr *wg = kn_arch_pick_mma(arch, d->dtype, 64, NULL, NULL);
    if (!wg || wg->operands != KN_MMA_WGMMA)
      return kn_error(diag, NULL, nowhere, "attention backward: wgmma is not available on %s "
                      "for %s (sm_90a, f16 and bf16)", arch->name, kn_scalar_name(d->dtype));
    if (!kn_arch_pick_mma(arch, d->dtype, 64, fits_all_dots, &f))
      return kn_error(diag, NULL, nowhere, "attention backward: block %dx%d with %d warps does "
                      "not fit wgmma at head dim %d (block_n, the rows a program owns, must be "
                      "16 x warps with warps a multiple of 4: one 64-row slab per warpgroup; "
                      "block_m a multiple of 16%s)", c->block_m, c->block_n, c->warps,
                      d->head_dim, c->atomic_dq ? "; with atomic dQ the padded head dim, the "
                      "rows of dQ^T = K^T dS^T, must equal block_n too" : "");
    /* a warpgroup holds 64 rows of two f32 accumulators (dK and dV, or dQ beside Q and dO):
     * DP registers a thread, more than a thread has beside S and dP above 128 */
    if (dp > 128)
      return kn_error(diag, NULL, nowhere, "attention backward: wgmma at head dim %d is not "
                      "supported (up to 128: a warpgroup's dK and dV accumulators take %d "
                      "registers a thread)", d->head_dim, dp);
  }
  if (!arch || arch->isa == KN_ISA_HOST) return 0;
  const kn_mma_instr *in = kn_arch_pick_mma(arch, d->dtype, 0, NULL, NULL);
  int want = arch->isa == KN_ISA_AMDGPU && in && in->operands != KN_MMA_FMA ? c->mfma : 0;
  if (c->wgmma) want = 64;
  if (!in || !kn_arch_pick_mma(arch, d->dtype, want, fits_all_dots, &f))
    return kn_error(diag, NULL, nowhere, "attention backward: block %dx%d with %d warps does "
                    "not fit a matrix instruction of %s for %s at head dim %d (block_n / warps "
                    "must be a multiple of the instruction's m, block_m and the head dim of "
                    "its n and k%s)", c->block_m, c->block_n, c->warps,
                    arch->name, kn_scalar_name(d->dtype), d->head_dim,
                    c->atomic_dq ? "; with atomic dQ the padded head dim / warps too" : "");
  /* dK/dV kernel: K, V, and per query block Q, Q^T, dO, dO^T through shared memory; with
   * atomic dQ also K^T and dS^T (block_n x block_m) */
  const int64_t es = (int64_t)kn_scalar_size(d->dtype);
  const int64_t rows = 2 * (int64_t)c->block_n + 4 * (int64_t)c->block_m + (c->atomic_dq ? c->block_n : 0);
  int64_t need = rows * dp * es + (c->atomic_dq ? (int64_t)c->block_n * c->block_m * es : 0);
  if (c->wgmma)  /* column blocks of 64, each of the six (eight) buffers 1024-byte aligned */
    need = rows * ((dp + 63) / 64 * 64) * es +
           (c->atomic_dq ? (int64_t)c->block_n * ((c->block_m + 63) / 64 * 64) * es + 2048 : 0) +
           6 * 1024;
  if (need > arch->shared_bytes)
    return kn_error(diag, NULL, nowhere, "attention backward: block %dx%d at head dim %d needs "
                    "up to %lld bytes of shared memory; %s has %lld", c->block_m, c->block_n,
                    d->head_dim, (long long)need, arch->name, (long long)arch->shared_bytes);
  return 0;
}

kn_attn_config kn_attn_bwd_default_config(const kn_arch *arch, const kn_attn_desc *d) {
  /* wgmma where it was measured (the H200, 2026-12-03, B 4 x H 32 f16, N 1k / 4k, each kernel
   * checked against float64 first): D 64 at 64x64 w4 1.20-1.29x the mma.sync kernels, D 128 at
   * 32x64 w4 1.07-1.25x, plain and causal.  Dropout (D 128 spills 196-200 bytes there),
   * varlen and the other variants keep mma.sync until measured. */
  const int dp = kn_attn_head_pad(d->head_dim);
  if (arch && arch->isa == KN_ISA_NVPTX && d->layout == KN_ATTN_DENSE && d->dropout == 0 &&
      !kn_attn_has_modifiers(d) && (dp == 64 || dp == 128)) {
    kn_attn_config w = kn_attn_bwd_wgmma_config(arch, d);
    kn_diag diag;
    if (kn_attn_bwd_check_on(arch, d, &w, &diag) == 0) return w;
  }
  return kn_attn_bwd_sync_config(arch, d);
}

static kn_attn_config sync_search(const kn_arch *arch, const kn_attn_desc *d, bool adq);

kn_attn_config kn_attn_bwd_config_for(const kn_arch *arch, const kn_attn_desc *d, bool wgmma,
                                      bool sync, int dq, int block_m, int block_n, int warps) {
  const bool forced = sync || block_m || block_n || warps;
  kn_attn_config c = wgmma ? kn_attn_bwd_wgmma_config(arch, d)
                     : forced ? kn_attn_bwd_sync_config(arch, d)
                              : kn_attn_bwd_default_config(arch, d);
  if (dq == KN_BWD_DQ_SEPARATE && c.atomic_dq) c = kn_attn_bwd_wgmma_config(arch, d);
  if (dq == KN_BWD_DQ_ATOMIC && !c.atomic_dq)
    c = c.wgmma ? kn_attn_bwd_atomic_wgmma_config(arch, d) : sync_search(arch, d, true);
  if (block_m) c.block_m = block_m;
  if (block_n) c.block_n = block_n;
  if (warps) c.warps = warps;
  else if (c.wgmma && block_n) c.warps = c.block_n / 16;
  return c;
}

/* 64 x 64 with 4 warps; smaller where shared memory or the instructions refuse it */
static kn_attn_config sync_search(const kn_arch *arch, const kn_attn_desc *d, bool adq) {
  kn_diag diag;
  int bm0 = 64, bn0 = 64, w0 = 4;
  if (!arch || arch->isa == KN_ISA_HOST) w0 = 1;
  for (int bm = bm0; bm >= 16; bm /= 2)
    for (int bn = bn0; bn >= 16; bn /= 2)
      for (int w = w0; w >= 1; w /= 2) {
        kn_attn_config t = {.block_m = bm, .block_n = bn, .warps = w, .stages = 1, .atomic_dq = adq};
        if (kn_attn_bwd_check_on(arch, d, &t, &diag) == 0) return t;
      }
  return (kn_attn_config){.block_m = bm0, .block_n = bn0, .warps = w0, .stages = 1, .atomic_dq = adq};
}

kn_attn_config kn_attn_bwd_sync_config(const kn_arch *arch, const kn_attn_desc *d) {
  return sync_search(arch, d, false);
}

kn_attn_config kn_attn_bwd_wgmma_config(const kn_arch *arch, const kn_attn_desc *d) {
  (void)arch;
  /* ptxas, sm_90a (docs/backward.md): 64x64 spills nothing at D 64 (48-60 bytes with dropout),
   * 110-390 bytes at D 128; 32x64 spills nothing at either without dropout */
  int bm = kn_attn_head_pad(d->head_dim) <= 64 && d->dropout == 0 ? 64 : 32;
  return (kn_attn_config){.block_m = bm, .block_n = 64, .warps = 4, .stages = 1, .wgmma = true};
}

kn_attn_config kn_attn_bwd_atomic_wgmma_config(const kn_arch *arch, const kn_attn_desc *d) {
  /* dQ^T = K^T dS^T has the padded head dim as its rows, which wgmma takes as one 64-row slab
   * per warpgroup: block_n = DP (a multiple of 64 up to 128; others fail the check) */
  kn_attn_config c = kn_attn_bwd_wgmma_config(arch, d);
  const int dp = kn_attn_head_pad(d->head_dim);
  c.atomic_dq = true;
  if (dp % 64 == 0) c.block_n = dp, c.warps = dp / 16;
  return c;
}

/* ---- the kernels ---------------------------------------------------------------------------------- */

/* what every kernel's builder shares */
typedef struct bctx {
  gen G;
  const kn_attn_desc *d;
  const kn_attn_plan *plan;
  kn_func *grad[KN_ATTN_MAX_MODS];     /* the score modifiers' derivatives */
  const kn_attn_config *c;
  kn_scalar dt;
  int BM, BN, D, DP;
  kn_value *P[KN_ATTN_MAX_PARAMS];     /* the backward's parameters */
  kn_value *F[KN_ATTN_MAX_PARAMS];     /* the same, indexed as the forward's signature (call_mod) */
  kn_value *c0, *c1, *c_d, *one64, *log2e, *seqlen_q, *seqlen_k, *bidx, *b64;
} bctx;

static kn_func *new_kernel(kn_module *m, bctx *x, const kn_attn_sig *sig, int which) {
  const char *pnames[KN_ATTN_MAX_PARAMS];
  for (int i = 0; i < sig->n; i++) pnames[i] = sig->name[i];
  kn_func *f = kn_func_new(m, kn_attn_bwd_kernels[which], true, sig->n, sig->type, pnames, 0, NULL);
  kn_func_set_meta(f, "BLOCK_M", x->BM);
  kn_func_set_meta(f, "BLOCK_N", x->BN);
  kn_func_set_meta(f, "HEAD_DIM", x->D);
  kn_func_set_meta(f, "CAUSAL", x->d->causal);
  kn_func_set_meta(f, "WARPS", x->c->warps);
  kn_func_set_meta(f, "STAGES", x->c->stages);
  if (x->c->mfma) kn_func_set_meta(f, "MFMA", x->c->mfma);
  if (x->c->wgmma && which != KN_BWD_PRE) kn_func_set_meta(f, "WGMMA", 1);
  x->G = (gen){.b = kn_builder_at_end(m, f->body)};
  gen *g = &x->G;
  for (int i = 0; i < sig->n; i++) x->P[i] = kn_func_param(f, i);
  for (int i = 0; i < x->plan->sig.n; i++) x->F[i] = x->P[bwd_index(i)];
  const kn_type i32 = kn_ty_scalar(KN_I32), i64 = kn_ty_scalar(KN_I64);
  x->seqlen_q = x->P[B_SEQLEN_Q];
  x->seqlen_k = x->P[B_SEQLEN_K];
  x->c0 = ci(g, i32, 0, "c0");
  x->c1 = ci(g, i32, 1, "c1");
  x->c_d = ci(g, i32, x->D, "c_head_dim");
  x->one64 = ci(g, i64, 1, "c1_i64");
  x->log2e = cf(g, kn_ty_scalar(KN_F32), M_LOG2E, "c_log2e");
  return f;
}

/* (rows, D) tile of buffer base at row r0: rows past nrows and columns past D read as 0;
 * transposed: the (D, rows) tile of the same elements */
static kn_value *load_rows(bctx *x, kn_value *base, kn_value *r0, kn_value *rs, kn_value *nrows,
                           int rows, bool transposed, const char *name) {
  gen *g = &x->G;
  if (transposed)
    return named(g, kn_b_load(&g->b, kn_ty_tile2(x->dt, x->DP, rows), base,
                              (kn_value *[]){x->c0, r0}, (kn_value *[]){x->one64, rs},
                              (kn_value *[]){x->c_d, nrows}, NULL, NULL), name);
  return named(g, kn_b_load(&g->b, kn_ty_tile2(x->dt, rows, x->DP), base,
                            (kn_value *[]){r0, x->c0}, (kn_value *[]){rs, x->one64},
                            (kn_value *[]){nrows, x->c_d}, NULL, NULL), name);
}

/* (rows) f32 values of a per-row buffer (lse, delta) from r0; rows past seqlen_q read `other` */
static kn_value *load_row_f32(bctx *x, kn_value *base, kn_value *r0, int rows, double other,
                              const char *name) {
  gen *g = &x->G;
  kn_value *oth = other != 0 ? cf(g, kn_ty_scalar(KN_F32), other, "row_other") : NULL;
  return named(g, kn_b_load(&g->b, kn_ty_tile1(KN_F32, rows), base, &r0, &x->one64,
                            &x->seqlen_q, NULL, oth), name);
}

/* lse in exp2 units, +inf for rows that saw no key (and, through `other`, for rows past
 * seqlen_q), so that their P is 0 */
static kn_value *lse2_rows(bctx *x, kn_value *lse_base, kn_value *r0, int rows) {
  gen *g = &x->G;
  const kn_type t = kn_ty_tile1(KN_F32, rows);
  kn_value *lse = load_row_f32(x, lse_base, r0, rows, INFINITY, "lse_rows");
  kn_value *l2 = bin(g, KN_OP_MUL, lse, splat1(g, x->log2e, rows, "log2e_r"), "lse2_raw");
  kn_value *none = named(g, kn_b_cmp(&g->b, KN_PRED_EQ, lse, cf(g, t, -INFINITY, "ninf_r")),
                         "no_key");
  return named(g, kn_b_select(&g->b, none, cf(g, t, INFINITY, "inf_r"), l2), "lse2");
}

/* The scores in exp2 units of a (R, C) tile whose elements pair the query indices q_idx with the
 * key indices kv_idx (both (R, C) i32): the score modifiers with their derivative (*fprime, NULL
 * without score modifiers), then every mask of the plan and `live` (the explicit bounds);
 * masked pairs are -inf and have *fprime 0. */
static kn_value *scores(bctx *x, kn_value *qk, kn_value *hidx, kn_value *q_idx, kn_value *kv_idx,
                        kn_value *live, kn_value **fprime) {
  gen *g = &x->G;
  const kn_attn_plan *plan = x->plan;
  const int R = qk->type.shape[0], C = qk->type.shape[1];
  const kn_type t = kn_ty_tile2(KN_F32, R, C);
  *fprime = NULL;
  kn_value *qi = q_idx, *ki = kv_idx;
  if (plan->nmods) {  /* clamped: a modifier may index a tensor with them */
    kn_value *q_last = bin(g, KN_OP_SUB, x->seqlen_q, x->c1, "q_last");
    kn_value *k_last = bin(g, KN_OP_SUB, x->seqlen_k, x->c1, "k_last");
    qi = bin(g, KN_OP_MIN, q_idx, splat2(g, q_last, R, C, "q_last_s"), "q_idx_c");
    ki = bin(g, KN_OP_MIN, kv_idx, splat2(g, k_last, R, C, "k_last_s"), "kv_idx_c");
  }
  kn_value *s = NULL;
  int nscore = 0;
  for (int i = 0; i < plan->nmods; i++) nscore += plan->mod[i].kind == KN_MOD_SCORE;
  if (nscore) {
    kn_value *sc = bin(g, KN_OP_MUL, qk, splat2(g, x->P[B_SM_SCALE], R, C, "sm_scale_s"), "score");
    for (int i = 0; i < plan->nmods; i++) {
      const kn_attn_mod *mod = &plan->mod[i];
      if (mod->kind != KN_MOD_SCORE) continue;
      kn_value *args[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK] = {sc, x->bidx, hidx, qi, ki};
      int n = KN_MOD_FIXED_SCORE;
      for (int j = n; j < kn_func_nparams(mod->f); j++) args[n++] = x->F[mod->arg[j - KN_MOD_FIXED_SCORE]];
      kn_op *op = kn_b_call(&g->b, x->grad[i], n, args);
      op->res[0]->type = op->res[1]->type = t;
      sc = named(g, op->res[0], "score_mod");
      kn_value *df = named(g, op->res[1], "score_mod_grad");
      *fprime = *fprime ? bin(g, KN_OP_MUL, *fprime, df, "fprime") : df;
    }
    s = bin(g, KN_OP_MUL, sc, splat2(g, x->log2e, R, C, "log2e_s"), "s");
  } else {
    kn_value *qk_scale = bin(g, KN_OP_MUL, x->P[B_SM_SCALE], x->log2e, "qk_scale");
    s = bin(g, KN_OP_MUL, qk, splat2(g, qk_scale, R, C, "qk_scale_s"), "s");
  }
  for (int i = 0; i < plan->nmods; i++) {
    if (plan->mod[i].kind != KN_MOD_MASK) continue;
    kn_value *fixed[KN_MOD_FIXED_MASK] = {x->bidx, hidx, qi, ki};
    kn_value *vis = call_mod(g, &plan->mod[i], fixed, KN_MOD_FIXED_MASK, x->F,
                             kn_ty_tile2(KN_I1, R, C), "visible");
    live = bin(g, KN_OP_AND, live, vis, "live");
  }
  if (*fprime) *fprime = named(g, kn_b_select(&g->b, live, *fprime, cf(g, t, 0, "zero_f")), "fprime_live");
  return named(g, kn_b_select(&g->b, live, s, cf(g, t, -INFINITY, "neg_inf_s")), "s_masked");
}

/* Dropout (attention.h, "Dropout"): the keep mask of the (R, C) tile pairing q_idx with kv_idx
 * of query head hidx, regenerated from the forward's seed and offset; NULL without dropout */
static kn_value *drop_keep(bctx *x, kn_value *hidx, kn_value *q_idx, kn_value *kv_idx) {
  if (x->d->dropout == 0) return NULL;
  gen *g = &x->G;
  kn_value *bh = bin(g, KN_OP_ADD, bin(g, KN_OP_MUL, x->bidx, x->P[B_HEADS], "drop_b_h"), hidx,
                     "drop_bh");
  return kn_dropout_keep_tile(&g->b, x->F[sig_index(&x->plan->sig, "dropout_seed")],
                              x->F[sig_index(&x->plan->sig, "dropout_offset")], bh, q_idx, kv_idx,
                              x->d->dropout);
}

/* dP of the dropped weights: Z * (dO V^T), Z = keep / (1 - p) */
static kn_value *drop_dp(bctx *x, kn_value *keep, kn_value *dp) {
  if (!keep) return dp;
  gen *g = &x->G;
  const int R = dp->type.shape[0], C = dp->type.shape[1];
  const kn_type t = kn_ty_tile2(KN_F32, R, C);
  kn_value *scaled = bin(g, KN_OP_MUL, dp, cf(g, t, kn_dropout_scale(x->d->dropout), "drop_scale_s"),
                         "dp_scaled");
  return named(g, kn_b_select(&g->b, keep, scaled, cf(g, t, 0, "zero_drop")), "dp_dropped");
}

/* dS = P * (dP - delta) [* f'], rounded to the input dtype for its dot; delta_b is delta
 * broadcast to P's shape */
static kn_value *dscore(bctx *x, kn_value *p, kn_value *dp, kn_value *delta_b, kn_value *fprime) {
  gen *g = &x->G;
  kn_value *ds = bin(g, KN_OP_MUL, p, bin(g, KN_OP_SUB, dp, delta_b, "dp_centred"), "ds");
  if (fprime) ds = bin(g, KN_OP_MUL, ds, fprime, "ds_mod");
  return x->dt == KN_F32 ? ds : named(g, kn_b_cast(&g->b, ds, x->dt), "ds_cast");
}

static kn_value *clamp_k(bctx *x, kn_value *v, kn_value *hi, const char *nm) {
  gen *g = &x->G;
  return bin(g, KN_OP_MIN, bin(g, KN_OP_MAX, v, x->c0, "clamp_lo"), hi, nm);
}

/* the window's sizes, clamped to seqlen_q + seqlen_k (above that: unbounded, and the sums stay
 * in i32); *no_left / *no_right: that side is unbounded */
static void window_sizes(bctx *x, const kn_attn_sig *fs, kn_value **wl, kn_value **wr,
                         kn_value **no_left, kn_value **no_right) {
  gen *g = &x->G;
  kn_value *span = bin(g, KN_OP_ADD, x->seqlen_q, x->seqlen_k, "span");
  *wl = bin(g, KN_OP_MIN, x->F[sig_index(fs, "window_left")], span, "wl");
  *wr = bin(g, KN_OP_MIN, x->F[sig_index(fs, "window_right")], span, "wr");
  *no_left = named(g, kn_b_cmp(&g->b, KN_PRED_LT, *wl, x->c0), "w_no_left");
  *no_right = named(g, kn_b_cmp(&g->b, KN_PRED_LT, *wr, x->c0), "w_no_right");
}

/* floor(v / blk) * blk for v >= 0 */
static kn_value *round_down(bctx *x, kn_value *v, int blk, const char *nm) {
  gen *g = &x->G;
  kn_value *c = ci(g, kn_ty_scalar(KN_I32), blk, "c_blk");
  return bin(g, KN_OP_MUL, bin(g, KN_OP_DIV, v, c, "n_blk"), c, nm);
}

/* Varlen (attention.h): the program's sequence b64 (kn_attn_varlen_open, the forward's setup):
 * *qb / *kb become its first query / key token (what the batch strides multiply), and the
 * kernel sees the sequence's own lengths (masks, loop bounds, modifiers).  A program with
 * nothing to do sees an empty other side: `live` (its rows, or its keys, start inside the
 * sequence) false gives a dQ program no keys (*no_keys) or a dK/dV program no query rows.
 * Dense: *qb = *kb = b64 and nothing changes. */
static void open_seq(bctx *x, kn_value *b64, kn_value *first, bool no_keys, kn_value **qb,
                     kn_value **kb) {
  *qb = *kb = b64;
  if (x->d->layout != KN_ATTN_VARLEN) return;
  gen *g = &x->G;
  kn_value *len_q, *len_k;
  kn_attn_varlen_open(&g->b, &x->plan->sig, x->F, b64, qb, kb, &len_q, &len_k);
  if (first) {
    kn_value *live = named(g, kn_b_cmp(&g->b, KN_PRED_LT, first, no_keys ? len_q : len_k),
                           "seq_live");
    if (no_keys) len_k = named(g, kn_b_select(&g->b, live, len_k, x->c0), "seq_k_live");
    else len_q = named(g, kn_b_select(&g->b, live, len_q, x->c0), "seq_q_live");
  }
  x->seqlen_q = x->P[B_SEQLEN_Q] = x->F[KN_ATTN_P_SEQLEN_Q] = len_q;
  x->seqlen_k = x->P[B_SEQLEN_K] = x->F[KN_ATTN_P_SEQLEN_K] = len_k;
}

/* atomic dQ (kn_attn_config.atomic_dq): the f32 workspace dq_acc holds head_dim values per
 * element of delta, in delta's layout (dense (B, H, Nq, D), varlen (H, total_q, D)): the base
 * of (batch or first token qb64, head h64); its rows are D apart */
static kn_value *dqa_base(bctx *x, kn_value *qb64, kn_value *h64) {
  gen *g = &x->G;
  kn_value *D64 = ci(g, kn_ty_scalar(KN_I64), x->D, "c_d_i64");
  return head_base(g, x->P[B_DQA], qb64, bin(g, KN_OP_MUL, x->P[B_DELTA_SB], D64, "dqa_sb"), h64,
                   bin(g, KN_OP_MUL, x->P[B_DELTA_SH], D64, "dqa_sh"), "dqa");
}

/* the (rows, DP) tile of dq_acc at query row row0, as the row-wise kernels (pre's zeroing,
 * the dQ kernel's rounding) address it: rows past seqlen_q and columns past D are outside */
typedef struct dqa_tile {
  kn_value *base, *idx[2], *stride[2], *bound[2];
} dqa_tile;
static dqa_tile dqa_rows(bctx *x, kn_value *qb64, kn_value *h64, kn_value *row0) {
  gen *g = &x->G;
  return (dqa_tile){dqa_base(x, qb64, h64),
                    {row0, x->c0},
                    {ci(g, kn_ty_scalar(KN_I64), x->D, "dqa_sm"), x->one64},
                    {x->seqlen_q, x->c_d}};
}

/* the grid of the row-wise kernels (pre, dQ's rounding): x = blocks of `rows` query rows, y =
 * (batch, head); the block's first row, batch and head */
static kn_value *row_program(bctx *x, int rows, kn_value **b64, kn_value **h64) {
  gen *g = &x->G;
  kn_value **P = x->P;
  kn_value *pid_m = named(g, kn_b_program_id(&g->b, 0), "pid_m");
  kn_value *pid_bh = named(g, kn_b_program_id(&g->b, 1), "pid_bh");
  *b64 = named(g, kn_b_cast(&g->b, bin(g, KN_OP_DIV, pid_bh, P[B_HEADS], "b"), KN_I64), "b64");
  *h64 = named(g, kn_b_cast(&g->b, bin(g, KN_OP_REM, pid_bh, P[B_HEADS], "h"), KN_I64), "h64");
  return named(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF,
                            bin(g, KN_OP_MUL, pid_m, ci(g, kn_ty_scalar(KN_I32), rows, "c_bm"),
                                "row0_raw"), rows), "row0");
}

static void build_pre(bctx *x, kn_module *m, const kn_attn_sig *sig) {
  new_kernel(m, x, sig, KN_BWD_PRE);
  gen *g = &x->G;
  kn_value **P = x->P;
  const int BM = x->BM;
  kn_value *b64, *h64, *row0 = row_program(x, BM, &b64, &h64);
  kn_value *qb64, *kb64;
  open_seq(x, b64, NULL, false, &qb64, &kb64);
  kn_value *o_base = head_base(g, P[B_O], qb64, P[B_O_SB], h64, P[B_O_SH], "o");
  kn_value *do_base = head_base(g, P[B_DO], qb64, P[B_DO_SB], h64, P[B_DO_SH], "do");
  kn_value *dl_base = head_base(g, P[B_DELTA], qb64, P[B_DELTA_SB], h64, P[B_DELTA_SH], "delta");
  kn_value *o = load_rows(x, o_base, row0, P[B_O_SM], x->seqlen_q, BM, false, "o_tile");
  kn_value *dout = load_rows(x, do_base, row0, P[B_DO_SM], x->seqlen_q, BM, false, "do_tile");
  if (x->dt != KN_F32) {
    o = named(g, kn_b_cast(&g->b, o, KN_F32), "o_f32");
    dout = named(g, kn_b_cast(&g->b, dout, KN_F32), "do_f32");
  }
  kn_value *delta = named(g, kn_b_reduce(&g->b, KN_OP_REDUCE_SUM,
                                         bin(g, KN_OP_MUL, o, dout, "o_do"), 1), "delta_rows");
  kn_b_store(&g->b, delta, dl_base, &row0, &x->one64, &x->seqlen_q, NULL);
  if (x->c->atomic_dq) {  /* the rows' dQ sums start at 0 (the dK/dV kernel adds into them) */
    dqa_tile t = dqa_rows(x, qb64, h64, row0);
    kn_b_store(&g->b, cf(g, kn_ty_tile2(KN_F32, BM, x->DP), 0, "zero_dqa"), t.base, t.idx,
               t.stride, t.bound, NULL);
  }
  kn_b_return(&g->b, 0, NULL);
}

/* dQ with atomic_dq: one program per BLOCK_N query rows scales the f32 sums the dK/dV kernel
 * added and rounds them into dq */
static void build_dq_round(bctx *x, kn_module *m, const kn_attn_sig *sig) {
  new_kernel(m, x, sig, KN_BWD_DQ);
  gen *g = &x->G;
  kn_value **P = x->P;
  const int BM = x->BN, DP = x->DP;
  kn_value *b64, *h64, *row0 = row_program(x, BM, &b64, &h64);
  kn_value *qb64, *kb64;
  open_seq(x, b64, row0, true, &qb64, &kb64);
  kn_value *dq_base = head_base(g, P[B_DQ], qb64, P[B_DQ_SB], h64, P[B_DQ_SH], "dq");
  dqa_tile t = dqa_rows(x, qb64, h64, row0);
  kn_value *acc = named(g, kn_b_load(&g->b, kn_ty_tile2(KN_F32, BM, DP), t.base, t.idx, t.stride,
                                     t.bound, NULL, NULL), "dqa_tile");
  kn_value *dq = bin(g, KN_OP_MUL, acc, splat2(g, P[B_SM_SCALE], BM, DP, "sm_scale_acc"), "dq");
  if (x->dt != KN_F32) dq = named(g, kn_b_cast(&g->b, dq, x->dt), "dq_cast");
  kn_b_store(&g->b, dq, dq_base, (kn_value *[]){row0, x->c0}, (kn_value *[]){P[B_DQ_SM], x->one64},
             (kn_value *[]){x->seqlen_q, x->c_d}, NULL);
  kn_b_return(&g->b, 0, NULL);
}

/* dQ: one program per BLOCK_N query rows of one (batch, head), the keys in steps of BLOCK_M:
 * as the dK/dV program owns BLOCK_N keys and steps BLOCK_M query rows, so the two kernels'
 * dots have the same shapes (kn_attn_bwd_check_on) */
static void build_dq(bctx *x, kn_module *m, const kn_attn_sig *sig) {
  new_kernel(m, x, sig, KN_BWD_DQ);
  gen *g = &x->G;
  kn_value **P = x->P;
  const int BM = x->BN /* the rows owned */, BN = x->BM /* the key step */, DP = x->DP;
  const kn_type i32 = kn_ty_scalar(KN_I32);
  const kn_type acc_t = kn_ty_tile2(KN_F32, BM, DP), s_t = kn_ty_tile2(KN_F32, BM, BN);
  kn_value *pid_m = named(g, kn_b_program_id(&g->b, 0), "pid_m");
  kn_value *pid_bh = named(g, kn_b_program_id(&g->b, 1), "pid_bh");
  kn_value *bidx = x->bidx = bin(g, KN_OP_DIV, pid_bh, P[B_HEADS], "b");
  kn_value *hidx = bin(g, KN_OP_REM, pid_bh, P[B_HEADS], "h");
  kn_value *hk = bin(g, KN_OP_DIV, hidx, P[B_KV_GROUP], "hk");
  kn_value *b64 = named(g, kn_b_cast(&g->b, bidx, KN_I64), "b64");
  kn_value *h64 = named(g, kn_b_cast(&g->b, hidx, KN_I64), "h64");
  kn_value *hk64 = named(g, kn_b_cast(&g->b, hk, KN_I64), "hk64");
  kn_value *c_bm = ci(g, i32, BM, "c_block_m");
  kn_value *row0 = named(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF,
                                      bin(g, KN_OP_MUL, pid_m, c_bm, "row0_raw"), BM), "row0");
  kn_value *qb64, *kb64;
  open_seq(x, b64, row0, true, &qb64, &kb64);
  kn_value *q_base = head_base(g, P[B_Q], qb64, P[B_Q_SB], h64, P[B_Q_SH], "q");
  kn_value *k_base = head_base(g, P[B_K], kb64, P[B_K_SB], hk64, P[B_K_SH], "k");
  kn_value *v_base = head_base(g, P[B_V], kb64, P[B_V_SB], hk64, P[B_V_SH], "v");
  kn_value *do_base = head_base(g, P[B_DO], qb64, P[B_DO_SB], h64, P[B_DO_SH], "do");
  kn_value *dq_base = head_base(g, P[B_DQ], qb64, P[B_DQ_SB], h64, P[B_DQ_SH], "dq");
  kn_value *lse_base = head_base(g, P[B_LSE], qb64, P[B_LSE_SB], h64, P[B_LSE_SH], "lse");
  kn_value *dl_base = head_base(g, P[B_DELTA], qb64, P[B_DELTA_SB], h64, P[B_DELTA_SH], "delta");
  kn_value *q_tile = load_rows(x, q_base, row0, P[B_Q_SM], x->seqlen_q, BM, false, "q_tile");
  kn_value *do_tile = load_rows(x, do_base, row0, P[B_DO_SM], x->seqlen_q, BM, false, "do_tile");
  kn_value *lse2 = cols_of(g, lse2_rows(x, lse_base, row0, BM), BN, "lse2_s");
  kn_value *delta = cols_of(g, load_row_f32(x, dl_base, row0, BM, 0, "delta_rows"), BN, "delta_s");
  kn_value *rows = bin(g, KN_OP_ADD, named(g, kn_b_arange(&g->b, 0, BM), "m_range"),
                       splat1(g, row0, BM, "row0_v"), "rows");
  kn_value *q_idx = cols_of(g, rows, BN, "q_idx");
  kn_value *col_range = named(g, kn_b_arange(&g->b, 0, BN), "n_range");

  /* the key range: the forward's (attn_fwd.c) */
  const kn_attn_desc *d = x->d;
  kn_value *lo = x->c0, *hi = x->seqlen_k;
  if (d->causal || d->prefix || d->window) {
    kn_value *off = bin(g, KN_OP_SUB, x->seqlen_k, x->seqlen_q, "diag_off");
    kn_value *row_end = bin(g, KN_OP_MIN, bin(g, KN_OP_ADD, row0, c_bm, "row0_end"), x->seqlen_q,
                            "row_end");
    if (d->causal || d->prefix) {
      kn_value *end = d->causal == KN_CAUSAL_TOP_LEFT ? row_end
                                                      : bin(g, KN_OP_ADD, row_end, off, "kv_end");
      hi = clamp_k(x, end, x->seqlen_k, "kv_hi");
      if (d->prefix)
        hi = bin(g, KN_OP_MAX, hi, clamp_k(x, x->F[sig_index(&x->plan->sig, "prefix_len")],
                                           x->seqlen_k, "prefix_hi"), "kv_hi_p");
    }
    if (d->window) {
      kn_value *wl, *wr, *no_l, *no_r;
      window_sizes(x, &x->plan->sig, &wl, &wr, &no_l, &no_r);
      kn_value *w_hi = clamp_k(x, bin(g, KN_OP_ADD, bin(g, KN_OP_ADD, row_end, off, "w_diag_end"),
                                      wr, "w_end"), x->seqlen_k, "w_hi");
      hi = bin(g, KN_OP_MIN, hi, named(g, kn_b_select(&g->b, no_r, x->seqlen_k, w_hi), "w_hi_s"),
               "kv_hi_w");
      kn_value *first = bin(g, KN_OP_MAX, bin(g, KN_OP_SUB, bin(g, KN_OP_ADD, row0, off, "w_diag0"),
                                              wl, "w_first"), x->c0, "w_first_pos");
      lo = named(g, kn_b_select(&g->b, no_l, x->c0, round_down(x, first, BN, "w_lo")), "kv_lo");
    }
  }
  kn_value *carry = cf(g, acc_t, 0, "zero_acc");
  kn_builder body;
  kn_op *loop = kn_b_for(&g->b, lo, hi, ci(g, i32, BN, "c_block_n"), 1, &carry, &body);
  kn_builder outer = g->b;
  g->b = body;
  kn_value *n0 = named(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF, named(g, loop->region[0]->args[0], "start_n"), BN), "n0");
  kn_value *dq_acc = named(g, loop->region[0]->args[1], "dq_acc");
  /* both score-sized dots first (see the dK/dV kernel) */
  kn_value *kt = load_rows(x, k_base, n0, P[B_K_SN], x->seqlen_k, BN, true, "kt_tile");
  kn_value *vt = load_rows(x, v_base, n0, P[B_V_SN], x->seqlen_k, BN, true, "vt_tile");
  kn_value *qk = named(g, kn_b_dot(&g->b, q_tile, kt, cf(g, s_t, 0, "zero_s")), "qk");
  kn_value *dp = named(g, kn_b_dot(&g->b, do_tile, vt, cf(g, s_t, 0, "zero_dp")), "dp");
  kn_value *cols = rows_of(g, bin(g, KN_OP_ADD, col_range, splat1(g, n0, BN, "n0_v"), "cols"), BM,
                           "kv_idx");
  kn_value *in_k = named(g, kn_b_cmp(&g->b, KN_PRED_LT, cols, splat2(g, x->seqlen_k, BM, BN, "seqlen_k_s")), "in_k");
  kn_value *fprime;
  kn_value *s = scores(x, qk, hidx, q_idx, cols, in_k, &fprime);
  kn_value *p = named(g, kn_b_unary(&g->b, KN_OP_EXP2, bin(g, KN_OP_SUB, s, lse2, "s_shift")), "p");
  dp = drop_dp(x, drop_keep(x, hidx, q_idx, cols), dp);
  kn_value *ds = dscore(x, p, dp, delta, fprime);
  kn_value *k_tile = load_rows(x, k_base, n0, P[B_K_SN], x->seqlen_k, BN, false, "k_tile");
  kn_value *dq_new = named(g, kn_b_dot(&g->b, ds, k_tile, dq_acc), "dq_new");
  kn_b_yield(&g->b, 1, &dq_new);
  g->b = outer;
  kn_value *dq = bin(g, KN_OP_MUL, named(g, loop->res[0], "dq_final"),
                     splat2(g, P[B_SM_SCALE], BM, DP, "sm_scale_acc"), "dq");
  if (x->dt != KN_F32) dq = named(g, kn_b_cast(&g->b, dq, x->dt), "dq_cast");
  kn_b_store(&g->b, dq, dq_base, (kn_value *[]){row0, x->c0}, (kn_value *[]){P[B_DQ_SM], x->one64},
             (kn_value *[]){x->seqlen_q, x->c_d}, NULL);
  kn_b_return(&g->b, 0, NULL);
}

/* dK, dV: one program per BLOCK_N keys of one (batch, kv head) */
static void build_dkdv(bctx *x, kn_module *m, const kn_attn_sig *sig) {
  new_kernel(m, x, sig, KN_BWD_DKDV);
  gen *g = &x->G;
  kn_value **P = x->P;
  const int BM = x->BM, BN = x->BN, DP = x->DP;
  const kn_type i32 = kn_ty_scalar(KN_I32);
  const kn_type acc_t = kn_ty_tile2(KN_F32, BN, DP), s_t = kn_ty_tile2(KN_F32, BN, BM);
  kn_value *pid_n = named(g, kn_b_program_id(&g->b, 0), "pid_n");
  kn_value *pid_bh = named(g, kn_b_program_id(&g->b, 1), "pid_bh");
  kn_value *kv_heads = bin(g, KN_OP_DIV, P[B_HEADS], P[B_KV_GROUP], "kv_heads");
  kn_value *bidx = x->bidx = bin(g, KN_OP_DIV, pid_bh, kv_heads, "b");
  kn_value *hk = bin(g, KN_OP_REM, pid_bh, kv_heads, "hk");
  kn_value *b64 = named(g, kn_b_cast(&g->b, bidx, KN_I64), "b64");
  kn_value *hk64 = named(g, kn_b_cast(&g->b, hk, KN_I64), "hk64");
  kn_value *c_bn = ci(g, i32, BN, "c_block_n");
  kn_value *n0 = named(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF,
                                    bin(g, KN_OP_MUL, pid_n, c_bn, "n0_raw"), BN), "n0");
  kn_value *qb64, *kb64;
  open_seq(x, b64, n0, false, &qb64, &kb64);
  kn_value *k_base = head_base(g, P[B_K], kb64, P[B_K_SB], hk64, P[B_K_SH], "k");
  kn_value *v_base = head_base(g, P[B_V], kb64, P[B_V_SB], hk64, P[B_V_SH], "v");
  kn_value *dk_base = head_base(g, P[B_DK], kb64, P[B_DK_SB], hk64, P[B_DK_SH], "dk");
  kn_value *dv_base = head_base(g, P[B_DV], kb64, P[B_DV_SB], hk64, P[B_DV_SH], "dv");
  kn_value *k_tile = load_rows(x, k_base, n0, P[B_K_SN], x->seqlen_k, BN, false, "k_tile");
  kn_value *v_tile = load_rows(x, v_base, n0, P[B_V_SN], x->seqlen_k, BN, false, "v_tile");
  kn_value *kt_tile = x->c->atomic_dq
                          ? load_rows(x, k_base, n0, P[B_K_SN], x->seqlen_k, BN, true, "kt_tile")
                          : NULL;
  kn_value *keys = bin(g, KN_OP_ADD, named(g, kn_b_arange(&g->b, 0, BN), "n_range"),
                       splat1(g, n0, BN, "n0_v"), "keys");
  kn_value *kv_idx = cols_of(g, keys, BM, "kv_idx");   /* (BN, BM) */
  kn_value *m_range = named(g, kn_b_arange(&g->b, 0, BM), "m_range");

  /* the query rows that may see a key of [n0, n_end) */
  const kn_attn_desc *d = x->d;
  kn_value *lo = x->c0, *hi = x->seqlen_q;
  if (d->causal || d->prefix || d->window) {
    kn_value *off = bin(g, KN_OP_SUB, x->seqlen_k, x->seqlen_q, "diag_off");
    kn_value *n_end = bin(g, KN_OP_MIN, bin(g, KN_OP_ADD, n0, c_bn, "n0_end"), x->seqlen_k, "n_end");
    if (d->causal || d->prefix) {
      kn_value *first = d->causal == KN_CAUSAL_TOP_LEFT ? n0 : bin(g, KN_OP_SUB, n0, off, "q_first");
      lo = clamp_k(x, first, x->seqlen_q, "q_lo_c");
      if (d->prefix) {  /* keys below the prefix are seen by every row */
        kn_value *in_pre = named(g, kn_b_cmp(&g->b, KN_PRED_LT, n0,
                                             x->F[sig_index(&x->plan->sig, "prefix_len")]), "in_prefix");
        lo = named(g, kn_b_select(&g->b, in_pre, x->c0, lo), "q_lo_p");
      }
    }
    if (d->window) {
      kn_value *wl, *wr, *no_l, *no_r;
      window_sizes(x, &x->plan->sig, &wl, &wr, &no_l, &no_r);
      /* row r sees key c iff r + off - wl <= c <= r + off + wr */
      kn_value *w_lo = clamp_k(x, bin(g, KN_OP_SUB, bin(g, KN_OP_SUB, n0, off, "w_rel0"), wr, "w_first"),
                               x->seqlen_q, "w_lo");
      lo = bin(g, KN_OP_MAX, lo, named(g, kn_b_select(&g->b, no_r, x->c0, w_lo), "w_lo_s"), "q_lo_w");
      kn_value *last = bin(g, KN_OP_ADD, bin(g, KN_OP_SUB, bin(g, KN_OP_SUB, n_end, off, "w_rel1"),
                                              x->c1, "w_rel_last"), wl, "w_last");
      kn_value *w_hi = clamp_k(x, bin(g, KN_OP_ADD, last, x->c1, "w_end"), x->seqlen_q, "w_hi");
      hi = named(g, kn_b_select(&g->b, no_l, x->seqlen_q, w_hi), "q_hi_w");
    }
    lo = round_down(x, lo, BM, "q_lo");
  }
  kn_value *zero = cf(g, acc_t, 0, "zero_acc");
  kn_value *carry[2] = {zero, zero};
  /* the query heads of the group */
  kn_builder gbody;
  kn_op *gloop = kn_b_for(&g->b, x->c0, P[B_KV_GROUP], x->c1, 2, carry, &gbody);
  kn_builder outer = g->b;
  g->b = gbody;
  kn_value *gi = named(g, gloop->region[0]->args[0], "g");
  kn_value *hidx = bin(g, KN_OP_ADD, bin(g, KN_OP_MUL, hk, P[B_KV_GROUP], "h_first"), gi, "h");
  kn_value *h64 = named(g, kn_b_cast(&g->b, hidx, KN_I64), "h64");
  kn_value *q_base = head_base(g, P[B_Q], qb64, P[B_Q_SB], h64, P[B_Q_SH], "q");
  kn_value *do_base = head_base(g, P[B_DO], qb64, P[B_DO_SB], h64, P[B_DO_SH], "do");
  kn_value *lse_base = head_base(g, P[B_LSE], qb64, P[B_LSE_SB], h64, P[B_LSE_SH], "lse");
  kn_value *dl_base = head_base(g, P[B_DELTA], qb64, P[B_DELTA_SB], h64, P[B_DELTA_SH], "delta");
  kn_builder qbody;
  kn_value *gcarry[2] = {gloop->region[0]->args[1], gloop->region[0]->args[2]};
  kn_op *qloop = kn_b_for(&g->b, lo, hi, ci(g, i32, BM, "c_block_m"), 2, gcarry, &qbody);
  kn_builder gb = g->b;
  g->b = qbody;
  kn_value *m0 = named(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF, named(g, qloop->region[0]->args[0], "start_m"), BM), "m0");
  kn_value *dk_acc = named(g, qloop->region[0]->args[1], "dk_acc");
  kn_value *dv_acc = named(g, qloop->region[0]->args[2], "dv_acc");
  /* both score-sized dots first, then the softmax's work: on sm_90a the second wgmma runs while
   * P^T is computed, and dV += P^T dO while dS^T is (lower_gpu.c, "wgmma groups in flight");
   * the rows' lse and delta before them, as their conversions store to shared memory */
  kn_value *qt = load_rows(x, q_base, m0, P[B_Q_SM], x->seqlen_q, BM, true, "qt_tile");
  kn_value *dot_tile = load_rows(x, do_base, m0, P[B_DO_SM], x->seqlen_q, BM, true, "dot_tile");
  kn_value *lse2 = rows_of(g, lse2_rows(x, lse_base, m0, BM), BN, "lse2_s");
  kn_value *delta = rows_of(g, load_row_f32(x, dl_base, m0, BM, 0, "delta_rows"), BN, "delta_s");
  kn_value *st = named(g, kn_b_dot(&g->b, k_tile, qt, cf(g, s_t, 0, "zero_s")), "st");
  kn_value *dpt = named(g, kn_b_dot(&g->b, v_tile, dot_tile, cf(g, s_t, 0, "zero_dp")), "dpt");
  kn_value *qrows = bin(g, KN_OP_ADD, m_range, splat1(g, m0, BM, "m0_v"), "qrows");
  kn_value *q_idx = rows_of(g, qrows, BN, "q_idx");   /* (BN, BM) */
  kn_value *in_q = named(g, kn_b_cmp(&g->b, KN_PRED_LT, q_idx, splat2(g, x->seqlen_q, BN, BM, "seqlen_q_s")), "in_q");
  kn_value *fprime;
  kn_value *s = scores(x, st, hidx, q_idx, kv_idx, in_q, &fprime);
  kn_value *pt = named(g, kn_b_unary(&g->b, KN_OP_EXP2, bin(g, KN_OP_SUB, s, lse2, "s_shift")), "pt");
  /* dropout: dV sums the kept weights (1 / (1 - p) applied to dV at the end), dS sees dP of
   * the dropped ones */
  kn_value *keep = drop_keep(x, hidx, q_idx, kv_idx), *pt_pv = pt;
  if (keep) pt_pv = named(g, kn_b_select(&g->b, keep, pt, cf(g, s_t, 0, "zero_pt")), "pt_dropped");
  kn_value *pt_in = x->dt == KN_F32 ? pt_pv : named(g, kn_b_cast(&g->b, pt_pv, x->dt), "pt_cast");
  kn_value *do_tile = load_rows(x, do_base, m0, P[B_DO_SM], x->seqlen_q, BM, false, "do_tile");
  kn_value *dv_new = named(g, kn_b_dot(&g->b, pt_in, do_tile, dv_acc), "dv_new");
  kn_value *dst = dscore(x, pt, drop_dp(x, keep, dpt), delta, fprime);
  kn_value *dqt = NULL;
  if (x->c->atomic_dq)  /* dQ's partial sums of this key block, dQ^T = K^T dS^T (DP x BM), issued
                           before dK's dot so that its adds run while that dot does */
    dqt = named(g, kn_b_dot(&g->b, kt_tile, dst, cf(g, kn_ty_tile2(KN_F32, DP, BM), 0, "zero_dqt")),
                "dqt");
  kn_value *q_tile = load_rows(x, q_base, m0, P[B_Q_SM], x->seqlen_q, BM, false, "q_tile");
  kn_value *dk_new = named(g, kn_b_dot(&g->b, dst, q_tile, dk_acc), "dk_new");
  if (dqt) {
    /* added to the rows' f32 sums: every element by one atomic add (sm_scale applied by the dQ
     * kernel) */
    kn_op *add = kn_b_store(&g->b, dqt, dqa_base(x, qb64, h64), (kn_value *[]){x->c0, m0},
                            (kn_value *[]){x->one64, ci(g, kn_ty_scalar(KN_I64), x->D, "dqa_sm")},
                            (kn_value *[]){x->c_d, x->seqlen_q}, NULL);
    kn_store_set_atomic_add(add);
  }
  kn_b_yield(&g->b, 2, (kn_value *[]){dk_new, dv_new});
  g->b = gb;
  kn_b_yield(&g->b, 2, (kn_value *[]){qloop->res[0], qloop->res[1]});
  g->b = outer;
  kn_value *dk = bin(g, KN_OP_MUL, named(g, gloop->res[0], "dk_final"),
                     splat2(g, P[B_SM_SCALE], BN, DP, "sm_scale_acc"), "dk");
  kn_value *dv = named(g, gloop->res[1], "dv_final");
  if (d->dropout != 0)
    dv = bin(g, KN_OP_MUL, dv, cf(g, acc_t, kn_dropout_scale(d->dropout), "drop_scale_acc"),
             "dv_scaled");
  if (x->dt != KN_F32) {
    dk = named(g, kn_b_cast(&g->b, dk, x->dt), "dk_cast");
    dv = named(g, kn_b_cast(&g->b, dv, x->dt), "dv_cast");
  }
  kn_b_store(&g->b, dk, dk_base, (kn_value *[]){n0, x->c0}, (kn_value *[]){P[B_DK_SN], x->one64},
             (kn_value *[]){x->seqlen_k, x->c_d}, NULL);
  kn_b_store(&g->b, dv, dv_base, (kn_value *[]){n0, x->c0}, (kn_value *[]){P[B_DV_SN], x->one64},
             (kn_value *[]){x->seqlen_k, x->c_d}, NULL);
  kn_b_return(&g->b, 0, NULL);
}

int kn_attn_bwd_build(kn_module *m, const kn_attn_desc *d, const kn_attn_config *c,
                      kn_diag *diag) {
  if (kn_attn_bwd_check_on(NULL, d, c, diag)) return -1;
  if (!m->source && kn_attn_mods_parse(m, d, diag)) return -1;
  if (m->nfuncs && kn_verify(m, diag)) return -1;
  bctx *x = calloc(1, sizeof *x);
  kn_attn_plan *plan = kn_arena_alloc(m->arena, sizeof *plan);
  kn_attn_sig *sig = kn_arena_alloc(m->arena, sizeof *sig);
  KN_ASSERT(x && plan && sig);
  int rc = -1;
  if (kn_attn_plan_make(m, d, plan, diag) || bwd_sig_of(&plan->sig, sig, d, diag)) goto out;
  *x = (bctx){.d = d, .plan = plan, .c = c, .dt = d->dtype, .BM = c->block_m, .BN = c->block_n,
              .D = d->head_dim, .DP = kn_attn_head_pad(d->head_dim)};
  for (int i = 0; i < plan->nmods; i++)
    if (plan->mod[i].kind == KN_MOD_SCORE && !(x->grad[i] = kn_attn_mod_grad(m, plan->mod[i].f, diag)))
      goto out;
  build_pre(x, m, sig);
  build_dkdv(x, m, sig);
  if (c->atomic_dq) build_dq_round(x, m, sig);
  else build_dq(x, m, sig);
  rc = 0;
out:
  free(x);
  return rc;
}

/* ---- arguments -------------------------------------------------------------------------------------- */

int kn_attn_bwd_fill_args(const kn_attn_desc *d, const kn_attn_sig *sig, const kn_attn_config *c,
                          const kn_attn_problem *p, const kn_attn_bwd_bufs *bf,
                          const kn_attn_vargs *va, kn_argval *out, int grid[KN_BWD_NKERNELS][3],
                          kn_diag *diag) {
  if (bwd_check(d, diag)) return -1;
  /* the forward's arguments give the shared ones and the variant's (the forward signature from
   * sig: kiln_backward called kn_attn_signature here, a parse of the modifier texts per call) */
  kn_attn_sig *fs = malloc(sizeof *fs);
  kn_argval *fa = calloc(KN_ATTN_MAX_PARAMS, sizeof *fa);
  KN_ASSERT(fs && fa);
  int fgrid[3], rc = -1;
  if (fwd_sig_of(sig, fs, d, diag) ||
      kn_attn_fill_args(d, fs, c, p, bf->q, bf->k, bf->v, bf->o, bf->lse, va, fa, fgrid, diag))
    goto out;
  memset(out, 0, sizeof *out * (size_t)sig->n);
  for (int i = 0; i < fs->n; i++) out[bwd_index(i)] = fa[i];
  const int64_t D = d->head_dim, H = p->heads, HK = p->kv_heads, Nq = p->seqlen_q, Nk = p->seqlen_k;
  out[B_DO].p = bf->dout, out[B_DQ].p = bf->dq, out[B_DK].p = bf->dk, out[B_DV].p = bf->dv;
  out[B_DELTA].p = bf->delta;
  out[B_DQA].p = bf->dq_acc;
  out[B_DO_SB].i = out[B_DQ_SB].i = H * Nq * D;
  out[B_DO_SH].i = out[B_DQ_SH].i = Nq * D;
  out[B_DO_SM].i = out[B_DQ_SM].i = D;
  out[B_DK_SB].i = out[B_DV_SB].i = HK * Nk * D;
  out[B_DK_SH].i = out[B_DV_SH].i = Nk * D;
  out[B_DK_SN].i = out[B_DV_SN].i = D;
  out[B_DELTA_SB].i = H * Nq, out[B_DELTA_SH].i = Nq;
  if (d->layout == KN_ATTN_VARLEN) {  /* packed (total, heads, D), delta (H, total_q) as lse */
    out[B_DO_SB].i = out[B_DO_SM].i = out[B_DQ_SB].i = out[B_DQ_SM].i = H * D;
    out[B_DO_SH].i = out[B_DQ_SH].i = D;
    out[B_DK_SB].i = out[B_DK_SN].i = out[B_DV_SB].i = out[B_DV_SN].i = HK * D;
    out[B_DK_SH].i = out[B_DV_SH].i = D;
    out[B_DELTA_SB].i = 1, out[B_DELTA_SH].i = p->total_q;
  }
  const int gq = (int)((Nq + c->block_m - 1) / c->block_m), gk = (int)((Nk + c->block_n - 1) / c->block_n);
  const int gqn = (int)((Nq + c->block_n - 1) / c->block_n);  /* dQ: block_n rows a program */
  const int g[KN_BWD_NKERNELS][3] = {{gq, p->batch * p->heads, 1}, {gk, p->batch * p->kv_heads, 1},
                                     {gqn, p->batch * p->heads, 1}};
  memcpy(grid, g, sizeof g);
  rc = 0;
out:
  free(fa);
  free(fs);
  return rc;
}

/* ---- tolerances ------------------------------------------------------------------------------------- */

/* dQ, dK, dV for N(0,1) q, k, v, dO and sm_scale = 1/sqrt(D) are O(1) to O(sqrt(N)) sums (dV sums
 * P^T dO over the rows that see a key, up to a few units; dK and dQ are sm_scale-scaled sums of
 * dS, smaller).  What the kernels round beyond the reference's exact math: f32 everywhere (a few
 * ulp, grown by the sums: measured below 1e-5); f16/bf16: P and dS before their dots (2^-11 /
 * 2^-8 relative each, random signs, so ~2^-11 |x| / sqrt(n) summed) and the outputs' own
 * rounding (half an ulp: 2^-11 |dV|, up to ~4e-3 for |dV| ~ 8).  The tests bound the error
 * relative to the largest reference gradient and, more tightly, against the error of the same
 * math rounded as the kernels round (kn_attn_bwd_reference with lowp): within 2x of it. */
double kn_attn_bwd_tolerance(kn_scalar dtype) {
  switch (dtype) {
  case KN_F32: return 1e-4;
  case KN_F16: return 1e-2;
  case KN_BF16: return 6e-2;
  default: return 0;
  }
}
