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
 * O(B H Nq Nk (D + modifiers)) and slow.  Varlen: packed tokens, each sequence a problem of its
 * own lengths (the modifiers' seqlen_q / seqlen_k are the sequence's), its indices from 0.
 * Paged: dense q/o, contiguous (num_pages, page_size, HK, D) pools read key by key through the
 * (B, max_pages) block table; sequence b has cache_seqlens[b] keys (its seqlen_k), and tables or
 * lengths that leave the pool are an error, not clamped.  Dropout: the kept weights, scaled by
 * 1 / (1 - p), from the same generator as the kernels (kn_dropout_keep, attn_dropout.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"

int kn_attn_ref_mod_call(kn_attn_ref_mods *r, int i, const kn_argval *fixed, int nfixed,
                         kn_argval *res, kn_diag *diag) {
  const kn_attn_mod *mod = &r->plan.mod[i];
  kn_argval a[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK];
  int n = 0;
  for (int j = 0; j < nfixed; j++) a[n++] = fixed[j];
  for (int j = nfixed; j < kn_func_nparams(mod->f); j++) a[n++] = r->args[mod->arg[j - nfixed]];
  return kn_interp_fn_call(r->fn[i], a, res, diag);
}

int kn_attn_ref_mods_open(kn_attn_ref_mods *r, const kn_attn_desc *desc, kn_module *mods,
                          const kn_attn_problem *p, const kn_attn_vargs *va, kn_diag *diag) {
  memset(r, 0, sizeof *r);
  if (!mods) {
    r->own = mods = kn_module_new(desc->mods_file ? desc->mods_file : "<mods>");
    if (kn_attn_mods_parse(mods, desc, diag) || (mods->nfuncs && kn_verify(mods, diag)))
      return -1;
  }
  if (kn_attn_plan_make(mods, desc, &r->plan, diag)) return -1;
  /* the kernel's arguments (one config is as good as another: the grid is not used) and the
   * memory the modifiers may read */
  kn_attn_config cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
  kn_region regions[KN_ATTN_MAX_PARAMS];
  int grid[3];
  if (kn_attn_fill_args(desc, NULL, &cfg, p, NULL, NULL, NULL, NULL, NULL, NULL, r->args, grid,
                        diag))
    return -1;
  int nreg = kn_attn_fill_vargs(desc, &r->plan.sig, p, va, r->args, regions, diag);
  if (nreg < 0) return -1;
  for (int i = 0; i < r->plan.nmods; i++)
    if (!(r->fn[i] = kn_interp_fn_new(r->plan.mod[i].f, KN_INTERP_F64, regions, nreg, diag)))
      return -1;
  return 0;
}

void kn_attn_ref_mods_close(kn_attn_ref_mods *r) {
  for (int i = 0; i < r->plan.nmods; i++)
    if (r->fn[i]) kn_interp_fn_free(r->fn[i]);
  if (r->own) kn_module_free(r->own);
  memset(r, 0, sizeof *r);
}

/* a varlen problem's cu_seqlens: non-decreasing from 0 or more, within total_q / total_k, no
 * sequence longer than the max lengths (seqlen_q / seqlen_k) */
int kn_attn_seqlens_check(const kn_attn_problem *p, kn_diag *diag) {
  kn_loc nowhere = {0};
  const int32_t *cu[2] = {p->cu_seqlens_q, p->cu_seqlens_k};
  const int total[2] = {p->total_q, p->total_k}, most[2] = {p->seqlen_q, p->seqlen_k};
  for (int w = 0; w < 2; w++) {
    const char *nm = w ? "cu_seqlens_k" : "cu_seqlens_q";
    if (!cu[w]) return kn_error(diag, NULL, nowhere, "attention reference: %s is NULL", nm);
    if (cu[w][0] < 0)
      return kn_error(diag, NULL, nowhere, "attention reference: %s[0] = %d is negative", nm,
                      cu[w][0]);
    for (int b = 0; b < p->batch; b++)
      if (cu[w][b + 1] < cu[w][b] || cu[w][b + 1] > total[w] || cu[w][b + 1] - cu[w][b] > most[w])
        return kn_error(diag, NULL, nowhere, "attention reference: %s[%d..%d] = %d..%d is not a "
                        "range of at most %d tokens within %d", nm, b, b + 1, cu[w][b],
                        cu[w][b + 1], most[w], total[w]);
  }
  return 0;
}

/* a paged problem's cache lengths and block table: each length within the table's capacity,
 * every page a sequence uses a page of the pool */
static int paged_check(const kn_attn_problem *p, kn_diag *diag) {
  kn_loc nowhere = {0};
  if (!p->block_table || !p->cache_seqlens)
    return kn_error(diag, NULL, nowhere, "attention reference: paged, but block_table or "
                    "cache_seqlens is NULL");
  const int64_t cap = (int64_t)p->max_pages * p->page_size;
  for (int b = 0; b < p->batch; b++) {
    int64_t n = (int64_t)p->cache_seqlens[b] + p->seqlen_new;
    if (p->cache_seqlens[b] < 0 || n > cap)
      return kn_error(diag, NULL, nowhere, "attention reference: cache_seqlens[%d] = %d (+ %d "
                      "new) is not in 0..%lld (max_pages * page_size)", b, p->cache_seqlens[b],
                      p->seqlen_new, (long long)cap);
    for (int i = 0; i < (int)((n + p->page_size - 1) / p->page_size); i++) {
      int pg = p->block_table[(size_t)b * p->max_pages + i];
      if (pg < 0 || pg >= p->num_pages)
        return kn_error(diag, NULL, nowhere, "attention reference: block_table[%d, %d] = %d is "
                        "not a page of the pool (0..%d)", b, i, pg, p->num_pages - 1);
    }
  }
  return 0;
}

int kn_attn_reference_v(const kn_attn_desc *desc, kn_module *mods, const kn_attn_problem *p,
                        const kn_attn_vargs *va, const double *q, const double *k,
                        const double *v, double *o, double *lse, kn_diag *diag) {
  const int B = p->batch, H = p->heads, HK = p->kv_heads, Nq = p->seqlen_q, Nk = p->seqlen_k;
  const int D = desc->head_dim, group = H / HK;
  const double scale = p->sm_scale != 0 ? p->sm_scale : 1.0 / sqrt((double)D);
  const uint32_t thr = kn_dropout_threshold(desc->dropout);
  const double dscale = kn_dropout_scale(desc->dropout);
  int rc = -1;
  kn_attn_ref_mods *r = calloc(1, sizeof *r);
  /* paged: the keys a table row addresses */
  const int Kmax = desc->layout == KN_ATTN_PAGED ? p->max_pages * p->page_size : Nk;
  double *s = malloc(sizeof *s * (size_t)(Kmax > 0 ? Kmax : 1));  /* (Nk) scores of one row */
  bool *live = malloc(sizeof *live * (size_t)(Kmax > 0 ? Kmax : 1));
  KN_ASSERT(r && s && live);
  if (kn_attn_ref_mods_open(r, desc, mods, p, va, diag)) goto out;

  const bool varlen = desc->layout == KN_ATTN_VARLEN, paged = desc->layout == KN_ATTN_PAGED;
  if (varlen && kn_attn_seqlens_check(p, diag)) goto out;
  if (paged && paged_check(p, diag)) goto out;
  /* the row strides of q/o and k/v: packed tokens of every head, or the rows of one head */
  const size_t rq = varlen ? (size_t)H * D : (size_t)D,
               rk = varlen || paged ? (size_t)HK * D : (size_t)D;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group;
      int nq = Nq, nk = Nk;
      size_t qoff = ((size_t)b * H + h) * (size_t)Nq * D;
      size_t koff = ((size_t)b * HK + hk) * (size_t)Nk * D;
      size_t loff = ((size_t)b * H + h) * (size_t)Nq;  /* lse of row 0; rows are contiguous */
      if (varlen) {  /* sequence b: its own lengths, seen by the modifiers as seqlen_q/k */
        nq = p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
        nk = p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
        qoff = (size_t)p->cu_seqlens_q[b] * rq + (size_t)h * D;
        koff = (size_t)p->cu_seqlens_k[b] * rk + (size_t)hk * D;
        loff = (size_t)h * (size_t)p->total_q + (size_t)p->cu_seqlens_q[b];
        r->args[KN_ATTN_P_SEQLEN_Q].i = nq;
        r->args[KN_ATTN_P_SEQLEN_K].i = nk;
      }
      if (paged) {  /* keys through the table: key_row() below; the modifiers see the length */
        nk = p->cache_seqlens[b] + p->seqlen_new;
        koff = (size_t)hk * D;
        r->args[KN_ATTN_P_SEQLEN_K].i = nk;
      }
      const double *qh = q + qoff, *kh = k + koff, *vh = v + koff;  /* (nq, D), (nk, D) */
      /* key j's row offset from kh / vh: contiguous, or (paged) its page's row */
#define KEY_ROW(j) (paged ? ((size_t)p->block_table[(size_t)b * p->max_pages + (j) / p->page_size] * \
                             p->page_size + (size_t)((j) % p->page_size)) * rk                   \
                          : (size_t)(j) * rk)
      double *oh = o + qoff;
      for (int i = 0; i < nq; i++) {
        double mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
          double dot = 0;
          for (int d = 0; d < D; d++) dot += qh[(size_t)i * rq + d] * kh[KEY_ROW(j) + d];
          kn_argval sc = {.f = dot * scale}, vis = {.i = 1};
          for (int m = 0; m < r->plan.nmods && vis.i; m++) {
            const kn_attn_mod *mod = &r->plan.mod[m];
            if (mod->kind == KN_MOD_SCORE) {
              kn_argval fx[KN_MOD_FIXED_SCORE] = {sc, {.i = b}, {.i = h}, {.i = i}, {.i = j}};
              if (kn_attn_ref_mod_call(r, m, fx, KN_MOD_FIXED_SCORE, &sc, diag)) goto out;
            } else if (mod->kind == KN_MOD_MASK) {
              kn_argval fx[KN_MOD_FIXED_MASK] = {{.i = b}, {.i = h}, {.i = i}, {.i = j}};
              if (kn_attn_ref_mod_call(r, m, fx, KN_MOD_FIXED_MASK, &vis, diag)) goto out;
            }
            /* block predicates only skip work: the reference has none to skip */
          }
          live[j] = vis.i != 0;
          s[j] = sc.f;
          if (live[j] && s[j] > mx) mx = s[j];
        }
        double *orow = oh + (size_t)i * rq;
        for (int d = 0; d < D; d++) orow[d] = 0;
        if (mx == -INFINITY) {  /* no live key (or every live score is -inf) */
          if (lse) lse[loff + i] = -INFINITY;
          continue;
        }
        double sum = 0;
        for (int j = 0; j < nk; j++) {
          s[j] = live[j] ? exp(s[j] - mx) : 0;
          sum += s[j];
        }
        for (int j = 0; j < nk; j++) {
          if (!live[j]) continue;
          /* dropout: a dropped weight adds nothing, a kept one is scaled by 1 / (1 - p); the
           * sum (and lse) stays the undropped one */
          double w = s[j];
          if (desc->dropout != 0)
            w = kn_dropout_keep(p->dropout_seed, p->dropout_offset, (int64_t)b * H + h, i, j,
                                thr) ? w * dscale : 0;
          for (int d = 0; d < D; d++) orow[d] += w * vh[KEY_ROW(j) + d];
        }
        for (int d = 0; d < D; d++) orow[d] /= sum;
        if (lse) lse[loff + i] = mx + log(sum);
      }
    }
#undef KEY_ROW
  rc = 0;
out:
  kn_attn_ref_mods_close(r);
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
