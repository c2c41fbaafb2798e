/* attn_ref.c — naive float64 attention: the oracle the attention kernels are checked against.
 *
 * Deliberately the textbook formula, one query row at a time, in double: scores for every key,
 * the variant's score modifiers and masks applied to each, a first pass for the max, a second
 * for exp and the sum, then the weighted sum of V.  No tiling, no online rescaling, no block
 * skipping, nothing shared with attn_fwd.c but the list of modifiers (kn_attn_plan_make, so the
 * two apply the same functions in the same order with the same parameters) — and the modifiers
 * themselves, which the interpreter evaluates here in double, one (b, h, i, j) at a time
 * (docs/variants.md).  The key bound is restated here: row i may see key j only if j < seqlen_k.
 * A row that sees no key outputs zeros and lse = -inf.  GQA: query head h reads kv head
 * h / (heads / kv_heads).  It assumes contiguous q/k/v/o and kv_heads dividing heads; it is
 * O(B H Nq Nk (D + modifiers)) and slow.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"

typedef struct ref_mods {
  kn_attn_plan plan;
  kn_interp_fn *fn[KN_ATTN_MAX_MODS];
  kn_argval args[KN_ATTN_MAX_PARAMS];   /* the kernel's arguments (kn_attn_fill_args) */
} ref_mods;

/* one modifier call: the fixed arguments, then the bound kernel arguments */
static int call_mod(ref_mods *r, int i, const kn_argval *fixed, int nfixed, kn_argval *res,
                    kn_diag *diag) {
  const kn_attn_mod *mod = &r->plan.mod[i];
  kn_argval a[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK];
  int n = 0;
  for (int j = 0; j < nfixed; j++) a[n++] = fixed[j];
  for (int j = nfixed; j < kn_func_nparams(mod->f); j++) a[n++] = r->args[mod->arg[j - nfixed]];
  return kn_interp_fn_call(r->fn[i], a, res, diag);
}

int kn_attn_reference_v(const kn_attn_desc *desc, kn_module *mods, const kn_attn_problem *p,
                        const kn_attn_vargs *va, const double *q, const double *k,
                        const double *v, double *o, double *lse, kn_diag *diag) {
  const int B = p->batch, H = p->heads, HK = p->kv_heads, Nq = p->seqlen_q, Nk = p->seqlen_k;
  const int D = desc->head_dim, group = H / HK;
  const double scale = p->sm_scale != 0 ? p->sm_scale : 1.0 / sqrt((double)D);
  int rc = -1;
  ref_mods *r = calloc(1, sizeof *r);
  double *s = malloc(sizeof *s * (size_t)(Nk > 0 ? Nk : 1));  /* (Nk) scores of one row */
  bool *live = malloc(sizeof *live * (size_t)(Nk > 0 ? Nk : 1));
  KN_ASSERT(r && s && live);
  kn_module *own = NULL;
  if (!mods) {
    own = mods = kn_module_new(desc->mods_file ? desc->mods_file : "<mods>");
    if (kn_attn_mods_parse(mods, desc, diag) || (mods->nfuncs && kn_verify(mods, diag)))
      goto out;
  }
  if (kn_attn_plan_make(mods, desc, &r->plan, diag)) goto out;
  /* the kernel's arguments (one config is as good as another: the grid is not used) and the
   * memory the modifiers may read */
  kn_attn_config cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
  kn_region regions[KN_ATTN_MAX_PARAMS];
  int grid[3];
  if (kn_attn_fill_args(desc, NULL, &cfg, p, NULL, NULL, NULL, NULL, NULL, NULL, r->args, grid,
                        diag))
    goto out;
  int nreg = kn_attn_fill_vargs(desc, &r->plan.sig, p, va, r->args, regions, diag);
  if (nreg < 0) goto out;
  for (int i = 0; i < r->plan.nmods; i++)
    if (!(r->fn[i] = kn_interp_fn_new(r->plan.mod[i].f, KN_INTERP_F64, regions, nreg, diag)))
      goto out;

  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group;
      const double *qh = q + ((size_t)b * H + h) * (size_t)Nq * D;    /* (Nq, D) */
      const double *kh = k + ((size_t)b * HK + hk) * (size_t)Nk * D;  /* (Nk, D) */
      const double *vh = v + ((size_t)b * HK + hk) * (size_t)Nk * D;  /* (Nk, D) */
      double *oh = o + ((size_t)b * H + h) * (size_t)Nq * D;          /* (Nq, D) */
      for (int i = 0; i < Nq; i++) {
        double mx = -INFINITY;
        for (int j = 0; j < Nk; j++) {
          double dot = 0;
          for (int d = 0; d < D; d++) dot += qh[(size_t)i * D + d] * kh[(size_t)j * D + d];
          kn_argval sc = {.f = dot * scale}, vis = {.i = 1};
          for (int m = 0; m < r->plan.nmods && vis.i; m++) {
            const kn_attn_mod *mod = &r->plan.mod[m];
            if (mod->kind == KN_MOD_SCORE) {
              kn_argval fx[KN_MOD_FIXED_SCORE] = {sc, {.i = b}, {.i = h}, {.i = i}, {.i = j}};
              if (call_mod(r, m, fx, KN_MOD_FIXED_SCORE, &sc, diag)) goto out;
            } else if (mod->kind == KN_MOD_MASK) {
              kn_argval fx[KN_MOD_FIXED_MASK] = {{.i = b}, {.i = h}, {.i = i}, {.i = j}};
              if (call_mod(r, m, fx, KN_MOD_FIXED_MASK, &vis, diag)) goto out;
            }
            /* block predicates only skip work: the reference has none to skip */
          }
          live[j] = vis.i != 0;
          s[j] = sc.f;
          if (live[j] && s[j] > mx) mx = s[j];
        }
        double *orow = oh + (size_t)i * D;
        for (int d = 0; d < D; d++) orow[d] = 0;
        if (mx == -INFINITY) {  /* no live key (or every live score is -inf) */
          if (lse) lse[((size_t)b * H + h) * Nq + i] = -INFINITY;
          continue;
        }
        double sum = 0;
        for (int j = 0; j < Nk; j++) {
          s[j] = live[j] ? exp(s[j] - mx) : 0;
          sum += s[j];
        }
        for (int j = 0; j < Nk; j++)
          if (live[j])
            for (int d = 0; d < D; d++) orow[d] += s[j] * vh[(size_t)j * D + d];
        for (int d = 0; d < D; d++) orow[d] /= sum;
        if (lse) lse[((size_t)b * H + h) * Nq + i] = mx + log(sum);
      }
    }
  rc = 0;
out:
  for (int i = 0; i < r->plan.nmods; i++)
    if (r->fn[i]) kn_interp_fn_free(r->fn[i]);
  if (own) kn_module_free(own);
  free(live);
  free(s);
  free(r);
  return rc;
}

void kn_attn_reference(const kn_attn_desc *d, const kn_attn_problem *p, const double *q,
                       const double *k, const double *v, double *o, double *lse) {
  kn_diag diag;
  int rc = kn_attn_reference_v(d, NULL, p, NULL, q, k, v, o, lse, &diag);
  KN_ASSERT(rc == 0 && "kn_attn_reference: a variant with parameters needs kn_attn_reference_v");
  (void)rc;
}
