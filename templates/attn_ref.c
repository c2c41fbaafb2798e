/* attn_ref.c — naive float64 attention: the oracle the attention kernels are checked against.
 *
 * Deliberately the textbook formula, one query row at a time, in double: scores for every key
 * the row may see, a first pass for their max, a second for exp and the sum, then the weighted
 * sum of V.  No tiling, no online rescaling, nothing shared with attn_fwd.c except the masking
 * rule, which is restated here from attention.h:
 *   query row i may see key j iff j < seqlen_k and, when causal, j <= i + (seqlen_k - seqlen_q)
 *   (bottom-right alignment).  A row that sees no key outputs zeros and lse = -inf.
 * GQA: query head h reads kv head h / (heads / kv_heads).
 * It assumes contiguous buffers and kv_heads dividing heads; it is O(B H Nq Nk D) and slow.
 */
#include <math.h>
#include <stdlib.h>

#include "attention.h"

void kn_attn_reference(const kn_attn_desc *desc, const kn_attn_problem *p, const double *q,
                       const double *k, const double *v, double *o, double *lse) {
  const int B = p->batch, H = p->heads, HK = p->kv_heads, Nq = p->seqlen_q, Nk = p->seqlen_k;
  const int D = desc->head_dim, group = H / HK;
  const bool causal = desc->causal;
  const double scale = p->sm_scale != 0 ? p->sm_scale : 1.0 / sqrt((double)D);
  double *s = malloc(sizeof *s * (size_t)(Nk > 0 ? Nk : 1));  /* (Nk) scores of one row */
  KN_ASSERT(s != NULL);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group;
      const double *qh = q + ((size_t)b * H + h) * (size_t)Nq * D;    /* (Nq, D) */
      const double *kh = k + ((size_t)b * HK + hk) * (size_t)Nk * D;  /* (Nk, D) */
      const double *vh = v + ((size_t)b * HK + hk) * (size_t)Nk * D;  /* (Nk, D) */
      double *oh = o + ((size_t)b * H + h) * (size_t)Nq * D;          /* (Nq, D) */
      for (int i = 0; i < Nq; i++) {
        /* keys 0 .. nvis-1 are visible to row i */
        long nvis = Nk;
        if (causal) {
          long last = (long)i + ((long)Nk - Nq);  /* the last visible key */
          nvis = last + 1 < 0 ? 0 : (last + 1 > Nk ? Nk : last + 1);
        }
        double *orow = oh + (size_t)i * D;
        for (int d = 0; d < D; d++) orow[d] = 0;
        if (nvis == 0) {
          if (lse) lse[((size_t)b * H + h) * Nq + i] = -INFINITY;
          continue;
        }
        double mx = -INFINITY;
        for (long j = 0; j < nvis; j++) {
          double dot = 0;
          for (int d = 0; d < D; d++) dot += qh[(size_t)i * D + d] * kh[(size_t)j * D + d];
          s[j] = dot * scale;
          if (s[j] > mx) mx = s[j];
        }
        double sum = 0;
        for (long j = 0; j < nvis; j++) {
          s[j] = exp(s[j] - mx);
          sum += s[j];
        }
        for (long j = 0; j < nvis; j++)
          for (int d = 0; d < D; d++) orow[d] += s[j] * vh[(size_t)j * D + d];
        for (int d = 0; d < D; d++) orow[d] /= sum;
        if (lse) lse[((size_t)b * H + h) * Nq + i] = mx + log(sum);
      }
    }
  free(s);
}
