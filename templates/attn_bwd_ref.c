/* attn_bwd_ref.c — naive float64 attention backward: the oracle of the backward kernels.
 *
 * The textbook gradients of loss = sum(O * dO), one query row at a time, in double: the row's
 * scores with the variant's modifiers (evaluated per (b, h, i, j) by the interpreter in float64
 * mode, as attn_ref.c does), its softmax P from the exact max and sum, O = P V, delta = dO . O,
 * dS_j = P_j (dO . v_j - delta) f'_j, and dQ_i += scale dS_j k_j, dK_j += scale dS_j q_i,
 * dV_j += P_j dO_i (GQA: dK, dV of a kv head summed over its query heads).  f'_j, the derivative
 * of the score modifiers at the pair's score, is a central difference of the modifier chain in
 * double (step 1e-5 relative), so the oracle does not share the kernels' derivative
 * (kn_attn_mod_grad) and the tests compare two independent derivations.  Nothing is shared with
 * attn_bwd.c but the plan of modifiers; the masks are the plan's, the key bound is restated.
 *
 * Dropout: with Z_j = keep_j / (1 - p) from the forward's generator (kn_dropout_keep),
 * O = sum_j P_j Z_j v_j, dV_j += P_j Z_j dO_i and dS_j = P_j (Z_j dO . v_j - delta) f'_j.
 *
 * lowp: the same math, rounding to the kernel's dtype what the kernels round (O as the forward
 * stores it, P before dV's product, dS before dQ's and dK's, the three outputs), so a test can
 * tell the error low precision makes from an error of the kernel.  Contiguous layouts, dense or
 * varlen (packed (total, heads, D) buffers, each sequence a problem of its own lengths, as
 * attn_ref.c); the cost is O(B H Nq Nk (D + modifiers)).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_bwd.h"
#include "attn_internal.h"
#include "numeric.h"

/* the score modifiers applied to x for the pair (b, h, i, j) */
static int score_chain(kn_attn_ref_mods *r, double x, int b, int h, int i, int j, double *z, kn_diag *diag) {
  kn_argval sc = {.f = x};
  for (int m = 0; m < r->plan.nmods; m++) {
    if (r->plan.mod[m].kind != KN_MOD_SCORE) continue;
    kn_argval fx[KN_MOD_FIXED_SCORE] = {sc, {.i = b}, {.i = h}, {.i = i}, {.i = j}};
    if (kn_attn_ref_mod_call(r, m, fx, KN_MOD_FIXED_SCORE, &sc, diag)) return -1;
  }
  *z = sc.f;
  return 0;
}

/* is the pair visible to every mask of the plan? */
static int visible(kn_attn_ref_mods *r, int b, int h, int i, int j, bool *vis, kn_diag *diag) {
  *vis = true;
  for (int m = 0; m < r->plan.nmods && *vis; m++) {
    if (r->plan.mod[m].kind != KN_MOD_MASK) continue;
    kn_argval fx[KN_MOD_FIXED_MASK] = {{.i = b}, {.i = h}, {.i = i}, {.i = j}}, res;
    if (kn_attn_ref_mod_call(r, m, fx, KN_MOD_FIXED_MASK, &res, diag)) return -1;
    *vis = res.i != 0;
  }
  return 0;
}

int kn_attn_bwd_reference(const kn_attn_desc *desc, kn_module *mods, const kn_attn_problem *p,
                          const kn_attn_vargs *va, const double *q, const double *k,
                          const double *v, const double *dout, bool lowp, double *dq,
                          double *dk, double *dv, kn_diag *diag) {
  const int B = p->batch, H = p->heads, HK = p->kv_heads, Nq = p->seqlen_q, Nk = p->seqlen_k;
  const int D = desc->head_dim, group = H / HK;
  const double scale = p->sm_scale != 0 ? p->sm_scale : 1.0 / sqrt((double)D);
  const kn_scalar dt = desc->dtype;
  int rc = -1;
  kn_attn_ref_mods *r = calloc(1, sizeof *r);
  const size_t nk1 = (size_t)(Nk > 0 ? Nk : 1);
  double *z = malloc(sizeof *z * nk1), *fp = malloc(sizeof *fp * nk1), *zd = malloc(sizeof *zd * nk1);
  const uint32_t thr = kn_dropout_threshold(desc->dropout);
  const double dscale = kn_dropout_scale(desc->dropout);
  double *o = malloc(sizeof *o * (size_t)(D > 0 ? D : 1));
  bool *live = malloc(sizeof *live * nk1);
  KN_ASSERT(r && z && fp && zd && o && live);
  const bool varlen = desc->layout == KN_ATTN_VARLEN;
  if (desc->layout == KN_ATTN_PAGED) {
    kn_error(diag, NULL, (kn_loc){0}, "attention backward reference: paged is not supported");
    goto out;
  }
  if (varlen && kn_attn_seqlens_check(p, diag)) goto out;
  if (kn_attn_ref_mods_open(r, desc, mods, p, va, diag)) goto out;
  /* the buffers' sizes, and the row strides of q/dq/dO and k/v/dk/dv: packed tokens of every
   * head (varlen), or the rows of one head */
  const size_t nq_all = varlen ? (size_t)p->total_q * H * D : (size_t)B * H * Nq * D;
  const size_t nk_all = varlen ? (size_t)p->total_k * HK * D : (size_t)B * HK * Nk * D;
  const size_t rq = varlen ? (size_t)H * D : (size_t)D, rk = varlen ? (size_t)HK * D : (size_t)D;
  memset(dq, 0, sizeof *dq * nq_all);
  memset(dk, 0, sizeof *dk * nk_all);
  memset(dv, 0, sizeof *dv * nk_all);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group;
      int nq = Nq, nk = Nk;
      size_t qoff = ((size_t)b * H + h) * (size_t)Nq * D;
      size_t koff = ((size_t)b * HK + hk) * (size_t)Nk * D;
      if (varlen) {  /* sequence b: its own lengths, seen by the modifiers as seqlen_q/k */
        nq = p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
        nk = p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
        qoff = (size_t)p->cu_seqlens_q[b] * rq + (size_t)h * D;
        koff = (size_t)p->cu_seqlens_k[b] * rk + (size_t)hk * D;
        r->args[KN_ATTN_P_SEQLEN_Q].i = nq;
        r->args[KN_ATTN_P_SEQLEN_K].i = nk;
      }
      const double *qh = q + qoff, *kh = k + koff, *vh = v + koff, *doh = dout + qoff;
      double *dqh = dq + qoff, *dkh = dk + koff, *dvh = dv + koff;
      for (int i = 0; i < nq; i++) {
        double mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
          double dot = 0;
          for (int d = 0; d < D; d++) dot += qh[(size_t)i * rq + d] * kh[(size_t)j * rk + d];
          const double x = dot * scale;
          if (visible(r, b, h, i, j, &live[j], diag) || score_chain(r, x, b, h, i, j, &z[j], diag))
            goto out;
          fp[j] = 1;
          if (live[j] && r->plan.nmods) {
            const double eps = 1e-5 * (fabs(x) > 1 ? fabs(x) : 1);
            double zp, zm;
            if (score_chain(r, x + eps, b, h, i, j, &zp, diag) ||
                score_chain(r, x - eps, b, h, i, j, &zm, diag))
              goto out;
            fp[j] = (zp - zm) / (2 * eps);
          }
          if (live[j] && z[j] > mx) mx = z[j];
        }
        if (mx == -INFINITY) continue;  /* no live key: O = 0, no gradient */
        double sum = 0;
        for (int j = 0; j < nk; j++) sum += live[j] ? exp(z[j] - mx) : 0;
        const double lse = mx + log(sum);
        /* dropout: Z_j = keep_j / (1 - p), the forward's mask (kn_dropout_keep) */
        for (int j = 0; j < nk; j++)
          zd[j] = desc->dropout == 0 ? 1
                  : kn_dropout_keep(p->dropout_seed, p->dropout_offset, (int64_t)b * H + h, i, j,
                                    thr) ? dscale : 0;
        for (int d = 0; d < D; d++) o[d] = 0;
        for (int j = 0; j < nk; j++)
          if (live[j]) {
            const double pj = exp(z[j] - lse) * zd[j];
            for (int d = 0; d < D; d++) o[d] += pj * vh[(size_t)j * rk + d];
          }
        double delta = 0;
        for (int d = 0; d < D; d++)
          delta += (lowp ? kn_round(dt, o[d]) : o[d]) * doh[(size_t)i * rq + d];
        for (int j = 0; j < nk; j++) {
          if (!live[j]) continue;
          const double pj = exp(z[j] - lse), pr = (lowp ? kn_round(dt, pj) : pj) * zd[j];
          double dp = 0;
          for (int d = 0; d < D; d++) dp += doh[(size_t)i * rq + d] * vh[(size_t)j * rk + d];
          dp *= zd[j];
          double ds = pj * (dp - delta) * fp[j];
          if (lowp) ds = kn_round(dt, ds);
          for (int d = 0; d < D; d++) {
            dqh[(size_t)i * rq + d] += scale * ds * kh[(size_t)j * rk + d];
            dkh[(size_t)j * rk + d] += scale * ds * qh[(size_t)i * rq + d];
            dvh[(size_t)j * rk + d] += pr * doh[(size_t)i * rq + d];
          }
        }
      }
    }
  if (lowp) {
    kn_round_array(dt, dq, nq_all);
    kn_round_array(dt, dk, nk_all);
    kn_round_array(dt, dv, nk_all);
  }
  rc = 0;
out:
  kn_attn_ref_mods_close(r);
  free(live);
  free(o);
  free(zd);
  free(fp);
  free(z);
  free(r);
  return rc;
}
