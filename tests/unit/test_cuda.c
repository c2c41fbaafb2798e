/* test_cuda.c — the CUDA device (runtime/cuda.c), with and without a GPU.
 *
 * Three ways this binary runs:
 *   - Here and in CI (no GPU, normally no libcuda.so.1): the driver is "not present", cleanly,
 *     with the reason; every call on a device refuses; KILN_CUDA_LIBRARY=/nonexistent/... is
 *     named in the message (checked in a forked child, since the driver is loaded once per
 *     process).  The GPU tests are skipped (cmocka skip()).
 *   - Under ctest as test_cuda_fake: KILN_CUDA_LIBRARY points at a fake driver built from this
 *     same file (-DKN_FAKE_LIBCUDA).  It has one pretend device, keeps "device" memory in host
 *     memory and runs the two test kernels on the CPU, so the GPU tests exercise cuda.c's
 *     argument passing, context handling, JIT log capture and error paths without hardware.
 *     The fake refuses any call made without its context current, and a launch with more
 *     dynamic shared memory than the kernel's attribute allows, as the real driver does.
 *     It also runs kiln's attention kernel (`attn_fwd`, any PTX): a float64 attention that
 *     reads the 24 kernelParams in the template's order and widths (templates/attention.h),
 *     which lets test_api_cuda check the public API's CUDA path (cache payload, module load,
 *     parameter packing, strides, streams) without a GPU.  The dtype, head dim and causal flag
 *     are not kernel parameters, so the test tells the fake with kn_fake_cuda_attn() first;
 *     kn_fake_cuda_attn_variant() says that a softcap (an f32) and/or a sliding window (two
 *     i32 parameters) follow the 24, which checks the packing of a variant's parameters;
 *     kn_fake_cuda_attn_varlen() and kn_fake_cuda_attn_paged() switch it to packed sequences
 *     and to a paged KV cache read through its block table, kn_fake_cuda_attn_bias_doc() a
 *     varlen launch's bias tensor and document mask on.  The paged append (`kv_append`)
 *     and the AOT bundles' `attn_fwd_<name>` kernels run too, and the backward's three kernels
 *     (`attn_bwd_pre`, `attn_bwd_dkdv`, `attn_bwd_dq`: 44 parameters, templates/attn_bwd.h)
 *     are computed the same way as the forward, plain or causal.
 *     Decode's two kernels (attn_decode, attn_decode_combine: templates/attn_decode.h) are
 *     computed by their contracts too, the pieces' partial outputs through the workspace, so
 *     a wrong workspace layout, split argument or combine stride gives wrong numbers.
 *   - On the H200 (bench/h200/device_run.sh): the same GPU tests against the real driver, with
 *     hand-written PTX (.version 8.0, .target sm_80) JIT-compiled by the driver, and, where
 *     ptxas is installed, also a cubin made by compiler/ptxas.c.
 * The GPU part is chosen at run time: it runs when kn_cuda_init() finds a device.
 */
#if defined(KN_FAKE_LIBCUDA)
/* ---------------- the fake driver ---------------- */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>
#include <pthread.h>

typedef unsigned long long dptr;
typedef struct fake_fn {
  int id; /* 0 kn_vadd, 1 kn_block_reverse, 2 attn_fwd, 3 kv_append, 4-6 the backward's,
              7 attn_decode (and its paged read modes' _in_page, _gather), 8
              attn_decode_combine */
  int max_dyn;
  /* an attn_fwd_<name> kernel KILN_FAKE_CUDA_KERNELS describes: what it computes */
  int described, elem, bf16, d, causal, window, softcap;
} fake_fn;
#define FAKE_FN(i) {.id = i, .max_dyn = 48 * 1024}
static fake_fn fake_fns[9] = {FAKE_FN(0), FAKE_FN(1), FAKE_FN(2), FAKE_FN(3), FAKE_FN(4),
                              FAKE_FN(5), FAKE_FN(6), FAKE_FN(7), FAKE_FN(8)};

/* ---- kiln's attention, for test_api_cuda ---- */
static int attn_elem = 2, attn_bf16, attn_d = 64, attn_causal, attn_launches;
/* what the next attn_fwd launches compute: elem_bytes 2 (f16 or bf16) or 4 (f32) */
void kn_fake_cuda_attn(int elem_bytes, int bf16, int head_dim, int causal) {
  attn_elem = elem_bytes, attn_bf16 = bf16, attn_d = head_dim, attn_causal = causal;
}
int kn_fake_cuda_attn_launches(void) { return attn_launches; }

/* The fake clock that events read (cuEventRecord): every launch advances it by its cost, 0.5
 * ms, or for an attn_fwd launch what kn_fake_cuda_attn_cost's hook says.  The hook sees the
 * launch's grid x, threads per block and dynamic shared bytes (which tell a tuner's candidates
 * apart: the grid's x is seqlen_q / block_m, the threads 32 x warps), writes its cost in
 * milliseconds and returns 0, 1 for a launch that computes a wrong output (the right one, its
 * first element plus one), or 2 for a launch that fails (CUDA_ERROR_INVALID_VALUE); NULL: the
 * default. */
typedef int (*kn_fake_cuda_cost_fn)(unsigned gx, unsigned bx, unsigned dyn, double *ms);
static kn_fake_cuda_cost_fn attn_cost;
static double fake_clock_ms;
static pthread_mutex_t clock_mu = PTHREAD_MUTEX_INITIALIZER;
void kn_fake_cuda_attn_cost(kn_fake_cuda_cost_fn fn) { attn_cost = fn; }
static void clock_advance(double ms) {
  pthread_mutex_lock(&clock_mu);
  fake_clock_ms += ms;
  pthread_mutex_unlock(&clock_mu);
}
/* the variant of the next attn_fwd launches (templates/mods): a softcap (an f32) and/or a window
 * (two i32) after the template's 24 parameters, in that order (score modifiers come before
 * masks in a variant's signature, templates/attn_mods.c) */
static int attn_window, attn_softcap, attn_varlen;
void kn_fake_cuda_attn_variant(int window, int softcap) {
  attn_window = window, attn_softcap = softcap;
}
/* varlen (docs/serving.md): cu_seqlens_q and cu_seqlens_k (device pointers) and max_seqlen_q,
 * max_seqlen_k (i32) follow the 24, and seqlen_q / seqlen_k are the packed totals; each sequence
 * is attended on its own, its lengths clamped into the max lengths (as the kernel does) */
void kn_fake_cuda_attn_varlen(int on) { attn_varlen = on; }
/* a bias tensor (bias, bias_sb, bias_sh, bias_sm after the softcap: the score modifiers' order)
 * and the document mask (q_seg, q_seg_sb, k_seg, k_seg_sb after the window), of attn_fwd
 * launches; the bias is of the launch's element type, rows of keys contiguous, indexed by the
 * batch (the sequence) and each sequence's own query and key positions */
static int attn_bias, attn_doc;
void kn_fake_cuda_attn_bias_doc(int bias, int document) { attn_bias = bias, attn_doc = document; }
/* paged (docs/serving.md): block_table, cache_seqlens (device pointers), page_size, num_pages,
 * seqlen_new (i32) and block_table_sb (i64) follow the 24; seqlen_k is the table's capacity,
 * k_sb / v_sb are page strides, and sequence b's key j is row j % page_size of its page
 * block_table[b, j / page_size] (clamped into the pool, as the kernel does) */
static int attn_paged;
void kn_fake_cuda_attn_paged(int on) { attn_paged = on; }

static double ld_elem(const void *base, int64_t i) {
  if (attn_elem == 4) return ((const float *)base)[i];
  uint16_t h = ((const uint16_t *)base)[i];
  if (attn_bf16) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
  }
  _Float16 x;
  memcpy(&x, &h, 2);
  return (double)x;
}
static void st_elem(void *base, int64_t i, double v) {
  if (attn_elem == 4) {
    ((float *)base)[i] = (float)v;
    return;
  }
  uint16_t h;
  if (attn_bf16) {
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    b += 0x7fff + ((b >> 16) & 1); /* round to nearest even (finite values only here) */
    h = (uint16_t)(b >> 16);
  } else {
    _Float16 x = (_Float16)v;
    memcpy(&h, &x, 2);
  }
  ((uint16_t *)base)[i] = h;
}

/* the page of sequence b's key j, clamped into the pool as the kernel clamps it */
static int64_t fake_page(const int32_t *bt, int b, int64_t bt_sb, int32_t np, int32_t ps, int j) {
  int32_t p = bt[b * bt_sb + j / ps];
  return p < 0 ? 0 : p >= np ? np - 1 : p;
}

/* a paged kernel's six parameters from params[*at] on (advancing *at); 1 when the table or the
 * lengths are null or the page size is not positive */
static int fake_paged_params(void **params, int *at, const int32_t **bt, const int32_t **cs,
                             int32_t *ps, int32_t *np, int32_t *snew, int64_t *bt_sb) {
  *bt = (const int32_t *)(uintptr_t)*(dptr *)params[(*at)++];
  *cs = (const int32_t *)(uintptr_t)*(dptr *)params[(*at)++];
  *ps = *(int32_t *)params[(*at)++], *np = *(int32_t *)params[(*at)++];
  *snew = *(int32_t *)params[(*at)++];
  *bt_sb = *(int64_t *)params[(*at)++];
  return !*bt || !*cs || *ps < 1;
}

/* params in template order: q k v o lse (u64), sm_scale (f32), seqlen_q seqlen_k heads
 * kv_group (i32), q_sb q_sh q_sm k_sb k_sh k_sn v_sb v_sh v_sn o_sb o_sh o_sm lse_sb lse_sh */
static int fake_attention(unsigned gx, unsigned gy, void **params) {
  void *q = (void *)(uintptr_t)*(dptr *)params[0], *k = (void *)(uintptr_t)*(dptr *)params[1];
  void *v = (void *)(uintptr_t)*(dptr *)params[2], *o = (void *)(uintptr_t)*(dptr *)params[3];
  float *lse = (float *)(uintptr_t)*(dptr *)params[4];
  float scale = *(float *)params[5];
  int32_t nq = *(int32_t *)params[6], nk = *(int32_t *)params[7], H = *(int32_t *)params[8],
          group = *(int32_t *)params[9];
  int64_t st[14];
  for (int i = 0; i < 14; i++) st[i] = *(int64_t *)params[10 + i];
  int32_t wl = -1, wr = -1;
  float cap = 0;
  int at = 24;
  const int32_t *cuq = NULL, *cuk = NULL;
  int32_t mq = 0, mk = 0;
  if (attn_varlen) {
    cuq = (const int32_t *)(uintptr_t)*(dptr *)params[at++];
    cuk = (const int32_t *)(uintptr_t)*(dptr *)params[at++];
    mq = *(int32_t *)params[at++], mk = *(int32_t *)params[at++];
    if (!cuq || !cuk) return 1;
  }
  const int32_t *bt = NULL, *cs = NULL;
  int32_t ps = 1, np = 0, snew = 0;
  int64_t bt_sb = 0;
  if (attn_paged && fake_paged_params(params, &at, &bt, &cs, &ps, &np, &snew, &bt_sb)) return 1;
  if (attn_softcap) cap = *(float *)params[at++];
  const void *bias = NULL;
  int64_t bst[3] = {0, 0, 0};
  if (attn_bias) {
    bias = (const void *)(uintptr_t)*(dptr *)params[at++];
    for (int i = 0; i < 3; i++) bst[i] = *(int64_t *)params[at++];
    if (!bias) return 1;
  }
  if (attn_window) wl = *(int32_t *)params[at++], wr = *(int32_t *)params[at++];
  const int32_t *qseg = NULL, *kseg = NULL;
  int64_t qseg_sb = 0, kseg_sb = 0;
  if (attn_doc) {
    qseg = (const int32_t *)(uintptr_t)*(dptr *)params[at++];
    qseg_sb = *(int64_t *)params[at++];
    kseg = (const int32_t *)(uintptr_t)*(dptr *)params[at++];
    kseg_sb = *(int64_t *)params[at++];
    if (!qseg || !kseg) return 1;
  }
  if (attn_softcap && !(cap > 0)) return 1;
  if (H <= 0 || group <= 0 || gy % (unsigned)H || gx == 0 || nq <= 0 || nk < 0 ||
      !(scale > 0) || !q || !k || !v || !o)
    return 1; /* CUDA_ERROR_INVALID_VALUE: the test sees a launch failure */
  int B = (int)(gy / (unsigned)H), D = attn_d;
  double *s = malloc(sizeof(double) * (size_t)(nk > 0 ? nk : 1));
  if (!s) return 2;
  const int32_t tq = nq, tk = nk;  /* varlen: the totals */
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      int hk = h / group;
      /* what the batch strides multiply: the batch, or (varlen) the sequence's first token */
      int64_t qb = b, kb = b;
      if (attn_varlen) {
        qb = cuq[b], kb = cuk[b], nq = cuq[b + 1] - cuq[b], nk = cuk[b + 1] - cuk[b];
        if (nq < 0 || nk < 0 || cuq[b + 1] > tq || cuk[b + 1] > tk) {
          free(s);
          return 1;
        }
        if (nq > mq) nq = mq;
        if (nk > mk) nk = mk;
      }
      bool pstart = false;  /* paged: rows are (page, slot); the page stride is st[3] */
      if (attn_paged) {
        int64_t n = (int64_t)cs[b] + snew;
        nk = np <= 0 ? 0 : (int32_t)(n < 0 ? 0 : n > tk ? tk : n);
        kb = 0;
        pstart = true;
      }
      for (int i = 0; i < nq; i++) {
        int64_t qo = qb * st[0] + h * st[1] + i * st[2], oo = qb * st[9] + h * st[10] + i * st[11];
        double m = -INFINITY, l = 0;
        int last = attn_causal ? i + nk - nq : nk - 1;
        for (int j = 0; j < nk; j++) {
          s[j] = -INFINITY;
          if (j > last) continue;
          int rel = j - (i + nk - nq); /* the window sits on the bottom-right diagonal */
          if ((wl >= 0 && rel < -wl) || (wr >= 0 && rel > wr)) continue;
          int64_t ko = kb * st[3] + hk * st[4] + j * st[5];
          if (pstart) ko = fake_page(bt, b, bt_sb, np, ps, j) * st[3] + hk * st[4] + (j % ps) * st[5];
          double dot = 0;
          for (int d = 0; d < D; d++) dot += ld_elem(q, qo + d) * ld_elem(k, ko + d);
          s[j] = dot * scale;
          if (cap > 0) s[j] = cap * tanh(s[j] / cap);
          if (bias) s[j] += ld_elem(bias, b * bst[0] + h * bst[1] + i * bst[2] + j);
          if (qseg && qseg[b * qseg_sb + i] != kseg[b * kseg_sb + j]) s[j] = -INFINITY;
          if (s[j] > m) m = s[j];
        }
        for (int j = 0; j < nk; j++) l += s[j] == -INFINITY ? 0 : exp(s[j] - m);
        for (int d = 0; d < D; d++) {
          double acc = 0;
          for (int j = 0; j < nk; j++)
            if (s[j] != -INFINITY)
              acc += exp(s[j] - m) *
                     ld_elem(v, pstart ? fake_page(bt, b, bt_sb, np, ps, j) * st[6] + hk * st[7] +
                                             (j % ps) * st[8] + d
                                       : kb * st[6] + hk * st[7] + j * st[8] + d);
          st_elem(o, oo + d, l > 0 ? acc / l : 0);
        }
        if (lse) lse[qb * st[12] + h * st[13] + i] = l > 0 ? (float)(m + log(l)) : -INFINITY;
      }
    }
  free(s);
  attn_launches++;
  return 0;
}
/* The backward's three kernels (templates/attn_bwd.h: 44 parameters, the last the atomic dQ's
 * workspace, unused here (the fake sums dQ in its own pass); plain or causal as
 * kn_fake_cuda_attn said; no variant parameters but varlen's, as kn_fake_cuda_attn_varlen said:
 * the prefix sums and max lengths after the 44, seqlen_q / seqlen_k the totals, the batch
 * strides multiplying each sequence's first token): 4 attn_bwd_pre writes delta, 5
 * attn_bwd_dkdv dK and dV (grid y = B * HK), 6 attn_bwd_dq dQ (grid y = B * H), each in float64
 * from the launch's q, k, v, o, dO, lse and delta and its strides, whatever the grid's x. */
static int fake_attention_bwd(int which, unsigned gy, void **params) {
  void *ptr[10];
  for (int i = 0; i < 10; i++) ptr[i] = (void *)(uintptr_t)*(dptr *)params[i];
  float scale = *(float *)params[10], *lse = ptr[8], *delta = ptr[9];
  int32_t nq = *(int32_t *)params[11], nk = *(int32_t *)params[12], H = *(int32_t *)params[13],
          group = *(int32_t *)params[14];
  int64_t st[28];  /* q k v o do dq dk dv {b, h, row}, lse delta {b, h} */
  for (int i = 0; i < 28; i++) st[i] = *(int64_t *)params[15 + i];
  for (int i = 0; i < 10; i++)
    if (!ptr[i]) return 1;
  if (H <= 0 || group <= 0 || H % group || nq < 0 || nk < 0 || !(scale > 0)) return 1;
  const int HK = H / group, B = (int)gy / (which == 5 ? HK : H), D = attn_d;
  const int32_t *cuq = NULL, *cuk = NULL, tq = nq, tk = nk;
  int32_t mq = nq, mk = nk;
  if (attn_varlen) {
    cuq = (const int32_t *)(uintptr_t)*(dptr *)params[44];
    cuk = (const int32_t *)(uintptr_t)*(dptr *)params[45];
    mq = *(int32_t *)params[46], mk = *(int32_t *)params[47];
    if (!cuq || !cuk) return 1;
    for (int b = 0; b < B; b++)
      if (cuq[b + 1] < cuq[b] || cuk[b + 1] < cuk[b] || cuq[b + 1] > tq || cuk[b + 1] > tk)
        return 1;
  }
  /* sequence b: what the batch strides multiply (qb, kb) and its lengths */
#define SEQ(b)                                                                           \
  int64_t qb = attn_varlen ? cuq[b] : (b), kb = attn_varlen ? cuk[b] : (b);              \
  nq = attn_varlen ? cuq[(b) + 1] - cuq[b] : tq, nk = attn_varlen ? cuk[(b) + 1] - cuk[b] : tk; \
  if (nq > mq) nq = mq;                                                                  \
  if (nk > mk) nk = mk
#define AT(t, b, h, r) ((b) * st[3 * (t)] + (h) * st[3 * (t) + 1] + (r) * st[3 * (t) + 2])
  if (which == 5)
    for (int b = 0; b < B; b++) {
      SEQ(b);
      (void)qb;
      for (int hk = 0; hk < HK; hk++)
        for (int j = 0; j < nk; j++)
          for (int d = 0; d < D; d++) {
            st_elem(ptr[6], AT(6, kb, hk, j) + d, 0);
            st_elem(ptr[7], AT(7, kb, hk, j) + d, 0);
          }
    }
  double *acc = calloc((size_t)(D > 0 ? D : 1) * 2, sizeof(double));
  if (!acc) return 2;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / group;
      SEQ(b);
      for (int i = 0; i < nq; i++) {
        const int64_t lrow = qb * st[24] + h * st[25] + i, drow = qb * st[26] + h * st[27] + i;
        if (which == 4) {
          double s = 0;
          for (int d = 0; d < D; d++)
            s += ld_elem(ptr[4], AT(4, qb, h, i) + d) * ld_elem(ptr[3], AT(3, qb, h, i) + d);
          delta[drow] = (float)s;
          continue;
        }
        for (int d = 0; d < D; d++) acc[d] = 0;
        for (int j = 0; j < nk && lse[lrow] != -INFINITY; j++) {
          if (attn_causal && j > i + nk - nq) continue;
          double s = 0, dp = 0;
          for (int d = 0; d < D; d++) {
            s += ld_elem(ptr[0], AT(0, qb, h, i) + d) * ld_elem(ptr[1], AT(1, kb, hk, j) + d);
            dp += ld_elem(ptr[4], AT(4, qb, h, i) + d) * ld_elem(ptr[2], AT(2, kb, hk, j) + d);
          }
          double p = exp(s * scale - lse[lrow]), ds = p * (dp - delta[drow]);
          for (int d = 0; d < D; d++) {
            if (which == 6) {
              acc[d] += scale * ds * ld_elem(ptr[1], AT(1, kb, hk, j) + d);
              continue;
            }
            int64_t ko = AT(6, kb, hk, j) + d, vo = AT(7, kb, hk, j) + d;
            st_elem(ptr[6], ko, ld_elem(ptr[6], ko) + scale * ds * ld_elem(ptr[0], AT(0, qb, h, i) + d));
            st_elem(ptr[7], vo, ld_elem(ptr[7], vo) + p * ld_elem(ptr[4], AT(4, qb, h, i) + d));
          }
        }
        if (which == 6)
          for (int d = 0; d < D; d++) st_elem(ptr[5], AT(5, qb, h, i) + d, acc[d]);
      }
    }
#undef AT
#undef SEQ
  free(acc);
  attn_launches++;
  return 0;
}

/* decode (templates/attn_decode.h): launches of its two kernels */
static int dec_launches;
int kn_fake_cuda_decode_launches(void) { return dec_launches; }

/* attn_decode: the 24 parameters, (paged) the six paged ones, the variant's, then ws_o, ws_lse,
 * num_splits, split_len; grid (row blocks x pieces, batch x kv heads).  Each packed row r of (b,
 * kv head hk) is query head hk * group + r / nq at position r % nq; piece s covers keys
 * [s * split_len, + split_len) of the sequence's (paged: cache_seqlens[b] + seqlen_new, through
 * the block table; the kernel cuts each sequence's own length, any partition merges the same).
 * Its normalised output and log2-sum-exp go to the workspace, in float64 then f32. */
static int fake_decode(unsigned gx, unsigned gy, unsigned bx, void **params) {
  void *q = (void *)(uintptr_t)*(dptr *)params[0], *k = (void *)(uintptr_t)*(dptr *)params[1];
  void *v = (void *)(uintptr_t)*(dptr *)params[2];
  float scale = *(float *)params[5];
  int32_t nq = *(int32_t *)params[6], nk = *(int32_t *)params[7], H = *(int32_t *)params[8],
          group = *(int32_t *)params[9];
  int64_t st[14];
  for (int i = 0; i < 14; i++) st[i] = *(int64_t *)params[10 + i];
  int at = 24;
  int32_t wl = -1, wr = -1;
  float cap = 0;
  const int32_t *bt = NULL, *cs = NULL;
  int32_t ps = 1, np = 0, snew = 0;
  int64_t bt_sb = 0;
  if (attn_paged && fake_paged_params(params, &at, &bt, &cs, &ps, &np, &snew, &bt_sb)) return 1;
  if (attn_softcap) cap = *(float *)params[at++];
  if (attn_window) wl = *(int32_t *)params[at++], wr = *(int32_t *)params[at++];
  float *ws_o = (float *)(uintptr_t)*(dptr *)params[at];
  float *ws_lse = (float *)(uintptr_t)*(dptr *)params[at + 1];
  int32_t S = *(int32_t *)params[at + 2], len = *(int32_t *)params[at + 3];
  if (H <= 0 || group <= 0 || H % group || S <= 0 || len <= 0 || nq <= 0 || gx % (unsigned)S ||
      !q || !k || !v || !ws_o || !ws_lse)
    return 1;
  int HK = H / group, D = attn_d, DP = (D + 15) / 16 * 16;
  int rows = group * nq;  /* the workspace rows of one (b, kv head, piece) */
  /* row blocks of 16 rows per warp (the decode tilings' block_m = 16 x warps) */
  if (gy % (unsigned)HK || gx / (unsigned)S * 16 * (bx / 32) < (unsigned)rows) return 1;
  int B = (int)(gy / (unsigned)HK);
  double *sc = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
  if (!sc) return 2;
  const int32_t cap_k = nk;  /* paged: the table's capacity */
  for (int b = 0; b < B; b++)
    for (int hk = 0; hk < HK; hk++) {
      if (attn_paged) {
        int64_t n = (int64_t)cs[b] + snew;
        nk = np <= 0 ? 0 : (int32_t)(n < 0 ? 0 : n > cap_k ? cap_k : n);
      }
      for (int sp = 0; sp < S; sp++)
        for (int r = 0; r < group * nq; r++) {
          int h = hk * group + r / nq, i = r % nq, j0 = sp * len;
          int j1 = j0 + len < nk ? j0 + len : nk;
          int64_t qo = b * st[0] + h * st[1] + i * st[2];
          int64_t slot = (((int64_t)b * HK + hk) * S + sp) * rows + r;
          double m = -INFINITY, l = 0;
          int last = attn_causal ? i + nk - nq : nk - 1;
          for (int j = j0; j < j1; j++) {
            sc[j - j0] = -INFINITY;
            int rel = j - (i + nk - nq);
            if (j > last || (wl >= 0 && rel < -wl) || (wr >= 0 && rel > wr)) continue;
            int64_t ko = attn_paged ? fake_page(bt, b, bt_sb, np, ps, j) * st[3] + hk * st[4] +
                                          (j % ps) * st[5]
                                    : b * st[3] + hk * st[4] + j * st[5];
            double dot = 0;
            for (int d = 0; d < D; d++) dot += ld_elem(q, qo + d) * ld_elem(k, ko + d);
            double x = dot * scale;
            if (cap > 0) x = cap * tanh(x / cap);
            sc[j - j0] = x;
            if (x > m) m = x;
          }
          for (int j = j0; j < j1; j++) l += sc[j - j0] == -INFINITY ? 0 : exp(sc[j - j0] - m);
          for (int d = 0; d < DP; d++) {
            double acc = 0;
            for (int j = j0; j < j1 && d < D; j++)
              if (sc[j - j0] != -INFINITY)
                acc += exp(sc[j - j0] - m) *
                       ld_elem(v, attn_paged ? fake_page(bt, b, bt_sb, np, ps, j) * st[6] +
                                                   hk * st[7] + (j % ps) * st[8] + d
                                             : b * st[6] + hk * st[7] + j * st[8] + d);
            ws_o[slot * DP + d] = (float)(l > 0 ? acc / l : 0);
          }
          ws_lse[slot] = l > 0 ? (float)((m + log(l)) / log(2.0)) : -INFINITY;
        }
    }
  free(sc);
  dec_launches++;
  return 0;
}

/* attn_decode_combine: ws_o, ws_lse, o, lse, seqlen_q, heads, kv_group, num_splits, ws_rows,
 * o_sb, o_sh, o_sm, lse_sb, lse_sh; grid (1, batch x heads) */
static int fake_combine(unsigned gx, unsigned gy, void **params) {
  const float *ws_o = (const float *)(uintptr_t)*(dptr *)params[0];
  const float *ws_lse = (const float *)(uintptr_t)*(dptr *)params[1];
  void *o = (void *)(uintptr_t)*(dptr *)params[2];
  float *lse = (float *)(uintptr_t)*(dptr *)params[3];
  int32_t nq = *(int32_t *)params[4], H = *(int32_t *)params[5], group = *(int32_t *)params[6],
          S = *(int32_t *)params[7], rows = *(int32_t *)params[8];
  int64_t st[5];
  for (int i = 0; i < 5; i++) st[i] = *(int64_t *)params[9 + i];
  if (gx != 1 || H <= 0 || group <= 0 || H % group || S <= 0 || nq <= 0 || nq > 16 ||
      rows < group * nq || gy % (unsigned)H || !ws_o || !ws_lse || !o)
    return 1;
  int B = (int)(gy / (unsigned)H), HK = H / group, D = attn_d, DP = (D + 15) / 16 * 16;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < nq; i++) {
        int64_t base = ((int64_t)b * HK + h / group) * S * rows + (h % group) * nq + i;
        double m = -INFINITY, l = 0;
        for (int sp = 0; sp < S; sp++)
          if (ws_lse[base + (int64_t)sp * rows] > m) m = ws_lse[base + (int64_t)sp * rows];
        for (int sp = 0; sp < S; sp++)
          if (m > -INFINITY) l += exp2(ws_lse[base + (int64_t)sp * rows] - m);
        for (int d = 0; d < D; d++) {
          double acc = 0;
          for (int sp = 0; sp < S && l > 0; sp++) {
            int64_t slot = base + (int64_t)sp * rows;
            acc += exp2(ws_lse[slot] - m) * ws_o[slot * DP + d];
          }
          st_elem(o, b * st[0] + h * st[1] + i * st[2] + d, l > 0 ? acc / l : 0);
        }
        if (lse) lse[b * st[3] + h * st[4] + i] = l > 0 ? (float)((m + log2(l)) * log(2.0))
                                                        : -INFINITY;
      }
  dec_launches++;
  return 0;
}

/* the paged append (templates/attn_paged.c, kv_append): row i of (b, hk), grid (seqlen_new,
 * batch * kv_heads), to position cache_seqlens[b] + i through the table, in the parameter order
 * of kn_paged_append_names; elements of attn_elem bytes, rows of attn_d */
static int fake_append(unsigned gx, unsigned gy, void **params) {
  char *pool[2], *src[2];
  for (int w = 0; w < 2; w++) {
    pool[w] = (char *)(uintptr_t)*(dptr *)params[w];
    src[w] = (char *)(uintptr_t)*(dptr *)params[2 + w];
  }
  const int32_t *bt = (const int32_t *)(uintptr_t)*(dptr *)params[4];
  const int32_t *cs = (const int32_t *)(uintptr_t)*(dptr *)params[5];
  int32_t ps = *(int32_t *)params[6], np = *(int32_t *)params[7], mp = *(int32_t *)params[8],
          hk_n = *(int32_t *)params[9];
  int64_t st[13];
  for (int i = 0; i < 13; i++) st[i] = *(int64_t *)params[10 + i];
  if (!pool[0] || !pool[1] || !src[0] || !src[1] || !bt || !cs || ps < 1 || hk_n < 1 ||
      gy % (unsigned)hk_n)
    return 1;
  for (unsigned bh = 0; bh < gy; bh++)
    for (unsigned i = 0; i < gx; i++) {
      int b = (int)bh / hk_n, hk = (int)bh % hk_n;
      int64_t pos = (int64_t)cs[b] + i;
      if (pos < 0 || pos >= (int64_t)mp * ps || np <= 0) continue;
      int32_t page = bt[b * st[0] + pos / ps];
      page = page < 0 ? 0 : page >= np ? np - 1 : page;
      for (int w = 0; w < 2; w++) {
        const int64_t *p = st + 1 + 3 * w, *n = st + 7 + 3 * w;
        memcpy(pool[w] + (page * p[0] + hk * p[1] + (pos % ps) * p[2]) * attn_elem,
               src[w] + (b * n[0] + hk * n[1] + (int64_t)i * n[2]) * attn_elem,
               (size_t)attn_d * (size_t)attn_elem);
      }
    }
  return 0;
}

static int fake_ctx_obj;
static __thread void *cur_ctx;

#define NEED_CTX() \
  if (cur_ctx != &fake_ctx_obj) return 201 /* CUDA_ERROR_INVALID_CONTEXT */

int cuInit(unsigned f) { return f ? 1 : 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuGetErrorName(int e, const char **s) {
  *s = e == 218 ? "CUDA_ERROR_INVALID_PTX" : e == 500 ? "CUDA_ERROR_NOT_FOUND"
     : e == 201 ? "CUDA_ERROR_INVALID_CONTEXT" : e == 1 ? "CUDA_ERROR_INVALID_VALUE"
     : "CUDA_ERROR_UNKNOWN";
  return 0;
}
int cuGetErrorString(int e, const char **s) {
  *s = e == 218 ? "a PTX JIT compilation failed" : "fake error";
  return 0;
}
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int o) { *d = o + 7; return o == 0 ? 0 : 101; }
int cuDeviceGetName(char *s, int n, int d) {
  (void)d;
  strncpy(s, "Fake CUDA device", (size_t)n);
  return 0;
}
int cuDeviceGetAttribute(int *v, int a, int d) {
  (void)d;
  switch (a) {
  case 75: *v = 9; break;         /* cc major */
  case 76: *v = 0; break;         /* cc minor */
  case 16: *v = 132; break;       /* SMs */
  case 1: *v = 1024; break;
  case 8: *v = 48 * 1024; break;
  case 97: *v = 227 * 1024; break;
  case 10: *v = 32; break;
  default: return 1;
  }
  return 0;
}
int cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)141 << 30; return 0; }
int cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = &fake_ctx_obj; return 0; }
int cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return 0; }
int cuCtxGetCurrent(void **c) { *c = cur_ctx; return 0; }
/* a one-deep stack is all cuda.c needs: it pushes only when the context is not current */
static __thread void *saved_ctx;
int cuCtxPushCurrent_v2(void *c) { saved_ctx = cur_ctx; cur_ctx = c; return 0; }
int cuCtxPopCurrent_v2(void **c) { *c = cur_ctx; cur_ctx = saved_ctx; return 0; }
int cuCtxSynchronize(void) { NEED_CTX(); return 0; }
int cuModuleLoadDataEx(void **m, const void *img, unsigned n, int *opts, void **vals) {
  NEED_CTX();
  if (strstr((const char *)img, "bogus")) {
    for (unsigned i = 0; i < n; i++)
      if (opts[i] == 5) /* CU_JIT_ERROR_LOG_BUFFER */
        strcpy(vals[i], "ptxas application ptx input, line 9; error   : Unknown symbol 'bogus'");
    return 218;
  }
  for (unsigned i = 0; i < n; i++)
    if (opts[i] == 3) strcpy(vals[i], "ptxas info    : Used 8 registers"); /* info log */
  *m = &fake_fns;
  return 0;
}
int cuModuleUnload(void *m) { (void)m; NEED_CTX(); return 0; }
/* A program that cannot call kn_fake_cuda_attn() (an example built on a generated AOT
 * launcher, tests/install.sh) describes its kernels instead:
 *   KILN_FAKE_CUDA_KERNELS="SYMBOL=DTYPE:HEAD_DIM:CAUSAL:WINDOW:SOFTCAP;..."
 * (DTYPE f16, bf16 or f32, the others 0 or 1); a launch of such a kernel computes that.  Other
 * attn_fwd kernels compute what kn_fake_cuda_attn() said. */
static fake_fn *fake_described(const char *name) {
  static fake_fn pool[16];
  static int used;
  const char *env = getenv("KILN_FAKE_CUDA_KERNELS");
  size_t n = strlen(name);
  for (const char *e = env; e && *e; e = strchr(e, ';') ? strchr(e, ';') + 1 : "") {
    char dt[8] = "";
    int d, causal, window, softcap;
    if (strncmp(e, name, n) || e[n] != '=' ||
        sscanf(e + n + 1, "%7[a-z0-9]:%d:%d:%d:%d", dt, &d, &causal, &window, &softcap) != 5)
      continue;
    if (used == 16) break;
    fake_fn *f = &pool[used++];
    *f = (fake_fn){.id = 2, .max_dyn = 48 * 1024, .described = 1,
                   .elem = strcmp(dt, "f32") ? 2 : 4, .bf16 = !strcmp(dt, "bf16"), .d = d,
                   .causal = causal, .window = window, .softcap = softcap};
    return f;
  }
  return &fake_fns[2];
}

int cuModuleGetFunction(void **f, void *m, const char *name) {
  (void)m;
  NEED_CTX();
  if (strcmp(name, "kn_vadd") == 0) *f = &fake_fns[0];
  else if (strcmp(name, "kn_block_reverse") == 0) *f = &fake_fns[1];
  else if (strcmp(name, "kv_append") == 0) *f = &fake_fns[3];
  /* the backward's and decode's kernels by their exact names, before the AOT prefix match
   * (attn_fwd_<name>) */
  else if (strcmp(name, "attn_bwd_pre") == 0) *f = &fake_fns[4];
  else if (strcmp(name, "attn_bwd_dkdv") == 0) *f = &fake_fns[5];
  else if (strcmp(name, "attn_bwd_dq") == 0) *f = &fake_fns[6];
  else if (strcmp(name, "attn_decode") == 0 || strcmp(name, "attn_decode_in_page") == 0 ||
           strcmp(name, "attn_decode_gather") == 0 ||
           strcmp(name, "attn_decode_pages") == 0)  /* the split kernel of any read mode */
    *f = &fake_fns[7];
  else if (strcmp(name, "attn_decode_combine") == 0) *f = &fake_fns[8];
  else if (strncmp(name, "attn_fwd", 8) == 0) *f = fake_described(name); /* AOT: attn_fwd_<name> */
  else return 500;
  return 0;
}
int cuFuncGetAttribute(int *v, int a, void *f) {
  (void)f;
  *v = a == 4 ? 8 : a == 0 ? 1024 : 0;
  return 0;
}
int cuFuncSetAttribute(void *f, int a, int v) {
  if (a != 8 || v > 227 * 1024) return 1;
  ((fake_fn *)f)->max_dyn = v;
  return 0;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned dyn, void *stream, void **params, void **extra) {
  (void)stream;
  (void)extra;
  NEED_CTX();
  fake_fn *fn = f;
  if (bx * by * bz > 1024 || (int)dyn > fn->max_dyn || gz != 1) return 1;
  if (fn->id != 2) clock_advance(0.5);
  if (fn->id == 2 && fn->described)
    attn_elem = fn->elem, attn_bf16 = fn->bf16, attn_d = fn->d, attn_causal = fn->causal,
    attn_window = fn->window, attn_softcap = fn->softcap;
  if (fn->id == 2) {
    double ms = 0.5;
    int how = attn_cost ? attn_cost(gx, bx, dyn, &ms) : 0;
    if (how == 2) return 1;
    int rc = by == 1 && bx % 32 == 0 && gy <= 65535 ? fake_attention(gx, gy, params) : 1;
    if (!rc && how == 1) st_elem((void *)(uintptr_t)*(dptr *)params[3], 0,
                                 ld_elem((void *)(uintptr_t)*(dptr *)params[3], 0) + 1);
    if (!rc) clock_advance(ms);
    return rc;
  }
  if (fn->id == 3) return by == 1 && bx % 32 == 0 && gy <= 65535 ? fake_append(gx, gy, params) : 1;
  if (fn->id == 7) return by == 1 && bx % 32 == 0 && gy <= 65535 ? fake_decode(gx, gy, bx, params) : 1;
  if (fn->id == 8) return by == 1 && bx % 32 == 0 && gy <= 65535 ? fake_combine(gx, gy, params) : 1;
  if (fn->id >= 4)
    return by == 1 && bx % 32 == 0 && gy <= 65535 ? fake_attention_bwd(fn->id, gy, params) : 1;
  if (gy != 1) return 1;
  if (fn->id == 0) {
    float *a = (float *)(uintptr_t)*(dptr *)params[0], *b = (float *)(uintptr_t)*(dptr *)params[1];
    float *c = (float *)(uintptr_t)*(dptr *)params[2];
    unsigned n = *(unsigned *)params[3];
    for (unsigned i = 0; i < gx * bx; i++)
      if (i < n) c[i] = a[i] + b[i];
  } else {
    float *in = (float *)(uintptr_t)*(dptr *)params[0];
    float *out = (float *)(uintptr_t)*(dptr *)params[1];
    if (*(unsigned *)params[2] != dyn || dyn < 4 * bx) return 1;
    for (unsigned blk = 0; blk < gx; blk++)
      for (unsigned t = 0; t < bx; t++) out[blk * bx + t] = in[blk * bx + (bx - 1 - t)];
  }
  return 0;
}
int cuMemAlloc_v2(dptr *p, size_t n) {
  NEED_CTX();
  void *m = malloc(n);
  *p = (dptr)(uintptr_t)m;
  return m ? 0 : 2;
}
int cuMemFree_v2(dptr p) { NEED_CTX(); free((void *)(uintptr_t)p); return 0; }
int cuMemcpyHtoD_v2(dptr d, const void *s, size_t n) {
  NEED_CTX();
  memcpy((void *)(uintptr_t)d, s, n);
  return 0;
}
int cuMemcpyDtoH_v2(void *d, dptr s, size_t n) {
  NEED_CTX();
  memcpy(d, (void *)(uintptr_t)s, n);
  return 0;
}
int cuMemcpyDtoD_v2(dptr d, dptr s, size_t n) {
  NEED_CTX();
  memcpy((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return 0;
}
int cuMemcpyHtoDAsync_v2(dptr d, const void *s, size_t n, void *st) {
  (void)st;
  return cuMemcpyHtoD_v2(d, s, n);
}
int cuMemcpyDtoHAsync_v2(void *d, dptr s, size_t n, void *st) {
  (void)st;
  return cuMemcpyDtoH_v2(d, s, n);
}
int cuMemsetD8_v2(dptr d, unsigned char v, size_t n) {
  NEED_CTX();
  memset((void *)(uintptr_t)d, v, n);
  return 0;
}
static int fake_obj;
int cuStreamCreate(void **s, unsigned f) { (void)f; NEED_CTX(); *s = &fake_obj; return 0; }
int cuStreamDestroy_v2(void *s) { (void)s; NEED_CTX(); return 0; }
int cuStreamSynchronize(void *s) { (void)s; NEED_CTX(); return 0; }
/* an event is the fake clock's value when it was last recorded (launches run at once, so that is
 * the time every launch before it took) */
typedef struct fake_event { double ms; int recorded; } fake_event;
int cuEventCreate(void **e, unsigned f) {
  (void)f;
  NEED_CTX();
  *e = calloc(1, sizeof(fake_event));
  return *e ? 0 : 2;
}
int cuEventDestroy_v2(void *e) { NEED_CTX(); free(e); return 0; }
int cuEventRecord(void *e, void *s) {
  (void)s;
  NEED_CTX();
  pthread_mutex_lock(&clock_mu);
  ((fake_event *)e)->ms = fake_clock_ms;
  pthread_mutex_unlock(&clock_mu);
  ((fake_event *)e)->recorded = 1;
  return 0;
}
int cuEventSynchronize(void *e) { (void)e; NEED_CTX(); return 0; }
/* only the unversioned symbol: exercises cuda.c's fallback for drivers before 12.8; two
 * recorded events, else CUDA_ERROR_INVALID_HANDLE (400) as the driver's "not recorded" */
int cuEventElapsedTime(float *ms, void *a, void *b) {
  NEED_CTX();
  const fake_event *x = a, *y = b;
  if (!x->recorded || !y->recorded) return 400;
  *ms = (float)(y->ms - x->ms);
  return 0;
}

#else
/* ---------------- the tests ---------------- */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cuda_device.h"
#include "ptxas.h"

#include "test_ptx.h"

/* Reverses each block's elements through dynamic shared memory.  The elements are staged at
 * the TOP of the dynamic allocation (offset bytes - 4*ntid), so the launch really needs `bytes`
 * of it: a launch given less faults instead of passing by luck. */
static const char reverse_ptx[] =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".extern .shared .align 16 .b8 kn_dyn[];\n"
    "\n"
    ".visible .entry kn_block_reverse(.param .u64 pin, .param .u64 pout, .param .u32 pbytes)\n"
    "{\n"
    "  .reg .b32 %r<16>;\n"
    "  .reg .f32 %f<3>;\n"
    "  .reg .b64 %rd<10>;\n"
    "  ld.param.u64 %rd1, [pin];\n"
    "  ld.param.u64 %rd2, [pout];\n"
    "  ld.param.u32 %r1, [pbytes];\n"
    "  mov.u32 %r2, %tid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %ctaid.x;\n"
    "  mad.lo.s32 %r5, %r4, %r3, %r2;\n"
    "  cvta.to.global.u64 %rd3, %rd1;\n"
    "  cvta.to.global.u64 %rd4, %rd2;\n"
    "  mul.wide.u32 %rd5, %r5, 4;\n"
    "  add.s64 %rd6, %rd3, %rd5;\n"
    "  add.s64 %rd7, %rd4, %rd5;\n"
    "  ld.global.f32 %f1, [%rd6];\n"
    "  shl.b32 %r6, %r3, 2;\n"          /* 4*ntid */
    "  sub.s32 %r7, %r1, %r6;\n"        /* base = bytes - 4*ntid */
    "  shl.b32 %r8, %r2, 2;\n"          /* 4*tid */
    "  mov.u32 %r9, kn_dyn;\n"
    "  add.s32 %r10, %r9, %r7;\n"
    "  add.s32 %r11, %r10, %r8;\n"
    "  st.shared.f32 [%r11], %f1;\n"
    "  bar.sync 0;\n"
    "  add.s32 %r12, %r10, %r6;\n"      /* base + 4*ntid */
    "  sub.s32 %r13, %r12, %r8;\n"
    "  sub.s32 %r14, %r13, 4;\n"        /* base + 4*(ntid-1-tid) */
    "  ld.shared.f32 %f2, [%r14];\n"
    "  st.global.f32 [%rd7], %f2;\n"
    "  ret;\n"
    "}\n";

/* ---- without a GPU ---- */

/* Runs kn_cuda_init in a child with KILN_CUDA_LIBRARY=lib (the driver is loaded once per
 * process, so a fresh process is the only way to try another library); returns its status and
 * copies its message. */
static int init_in_child(const char *lib, char *msg, size_t n) {
  int fd[2];
  assert_int_equal(pipe(fd), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fd[0]);
    setenv("KILN_CUDA_LIBRARY", lib, 1);
    kn_diag err;
    int st = kn_cuda_init(&err);
    int count = kn_cuda_device_count();
    char out[sizeof err.rendered + 32];
    int len = snprintf(out, sizeof out, "%d %d %s", st, count, st ? err.rendered : "");
    ssize_t w = write(fd[1], out, (size_t)len);
    _exit(w == len ? 0 : 1);
  }
  close(fd[1]);
  char buf[sizeof(kn_diag){0}.rendered + 64];
  size_t got = 0;
  ssize_t r;
  while ((r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
  buf[got] = 0;
  close(fd[0]);
  int ws;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  int st = 0, count = -1, used = 0;
  assert_int_equal(sscanf(buf, "%d %d %n", &st, &count, &used), 2);
  snprintf(msg, n, "%s", buf + used);
  if (st != KN_OK) assert_int_equal(count, 0);
  return st;
}

static void test_missing_library_named(void **state) {
  (void)state;
  char msg[sizeof(kn_diag){0}.rendered];
  int st = init_in_child("/nonexistent/libcuda.so.1", msg, sizeof msg);
  assert_int_equal(st, KN_E_NODEV);
  assert_non_null(strstr(msg, "/nonexistent/libcuda.so.1"));
  assert_non_null(strstr(msg, "not present"));
  st = init_in_child("none", msg, sizeof msg);
  assert_int_equal(st, KN_E_NODEV);
  assert_non_null(strstr(msg, "KILN_CUDA_LIBRARY=none"));
  /* a library without the driver's entry points (libm) is not present either, not a crash */
  st = init_in_child("libm.so.6", msg, sizeof msg);
  assert_int_equal(st, KN_E_NODEV);
  assert_non_null(strstr(msg, "lacks the entry point cuInit"));
}

/* The toolkit's stub libcuda (for linking only) answers cuInit with CUDA_ERROR_STUB_LIBRARY. */
static void test_stub_library(void **state) {
  (void)state;
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) skip();
  char msg[sizeof(kn_diag){0}.rendered];
  int st = init_in_child(stub, msg, sizeof msg);
  assert_int_equal(st, KN_E_NODEV);
  assert_non_null(strstr(msg, "cuInit"));
  assert_non_null(strstr(msg, "CUDA_ERROR_STUB_LIBRARY"));
  print_message("stub: %s\n", msg);
}

static bool have_gpu(void) {
  static int known = -1;
  if (known < 0) known = kn_cuda_init(NULL) == KN_OK;
  return known == 1;
}

static void test_not_present_is_clean(void **state) {
  (void)state;
  if (have_gpu()) skip();
  kn_diag err;
  assert_int_equal(kn_cuda_init(&err), KN_E_NODEV);
  assert_true(strlen(err.message) > 20);
  print_message("without a GPU: %s\n", err.message);
  assert_int_equal(kn_cuda_device_count(), 0);
  assert_int_equal(kn_cuda_driver_version(), 0);
  kn_cuda_device *dev = (kn_cuda_device *)&err; /* must be overwritten */
  assert_int_equal(kn_cuda_device_open(0, &dev, &err), KN_E_NODEV);
  assert_null(dev);
  kn_cuda_props props;
  assert_int_equal(kn_cuda_device_props(0, &props, &err), KN_E_NODEV);
  /* calls on no device refuse instead of crashing */
  kn_cuda_ptr p = 1;
  assert_int_equal(kn_cuda_alloc(NULL, 16, &p, &err), KN_E_INVALID);
  assert_int_equal(p, 0);
  kn_cuda_module *m = NULL;
  assert_int_equal(kn_cuda_module_load_ptx(NULL, vadd_ptx, &m, &err), KN_E_INVALID);
  unsigned g[3] = {1, 1, 1};
  assert_int_equal(kn_cuda_launch(NULL, g, g, 0, NULL, NULL, &err), KN_E_INVALID);
  kn_cuda_device_close(NULL);
  kn_cuda_module_unload(NULL);
  assert_string_equal(kn_status_str(KN_E_NODEV), "not present");
}

/* ---- with a GPU (or the fake driver) ---- */

typedef struct gpu {
  kn_cuda_device *dev;
  bool fake;
} gpu;

static int gpu_setup(void **state) {
  static gpu g;
  *state = &g;
  if (!have_gpu()) return 0;
  kn_diag err;
  if (kn_cuda_device_open(0, &g.dev, &err) != KN_OK) {
    fprintf(stderr, "device open failed: %s\n", err.message);
    return -1;
  }
  g.fake = strstr(kn_cuda_device_get_props(g.dev)->name, "Fake") != NULL;
  return 0;
}

static int gpu_teardown(void **state) {
  gpu *g = *state;
  kn_cuda_device_close(g->dev);
  g->dev = NULL;
  return 0;
}

#define NEED_GPU(g)                                                                          \
  gpu *g = *state;                                                                           \
  if (!g->dev) skip()

/* a call that must succeed; `err` is the caller's kn_diag */
#define OK(call)                                                                             \
  do {                                                                                       \
    int s_ = (call);                                                                         \
    if (s_ != KN_OK) fail_msg("%s -> %d: %s", #call, s_, err.message);                  \
  } while (0)

static void test_gpu_props(void **state) {
  NEED_GPU(g);
  const kn_cuda_props *p = kn_cuda_device_get_props(g->dev);
  print_message("device 0: %s, sm_%d%d, %d SMs, %.1f GiB, shared %d/%d (opt-in), driver %d, %s\n",
                p->name, p->cc_major, p->cc_minor, p->sm_count,
                (double)p->total_memory / (1 << 30), p->shared_per_block,
                p->shared_per_block_optin, kn_cuda_driver_version(), kn_cuda_library());
  assert_true(p->name[0] != 0);
  assert_true(p->cc_major >= 5);
  assert_true(p->sm_count > 0);
  assert_int_equal(p->warp_size, 32);
  assert_true(p->total_memory > 0);
  assert_true(p->shared_per_block_optin >= p->shared_per_block);
  assert_true(kn_cuda_device_count() >= 1);
  assert_true(kn_cuda_device_context(g->dev) != NULL);
  kn_diag err;
  kn_cuda_props q;
  assert_int_equal(kn_cuda_device_props(kn_cuda_device_count(), &q, &err), KN_E_INVALID);
}

static uint32_t rng_state = 12345;
static float frand(void) {
  rng_state = rng_state * 1664525u + 1013904223u;
  return (float)(rng_state >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* loads vadd (from PTX, or from a cubin when cubin != NULL), runs it on n elements on
 * `stream`, checks every element, and times `reps` launches with events when reps > 0 */
static void run_vadd(gpu *g, kn_cuda_module *m, unsigned n, kn_cuda_stream stream, int reps) {
  kn_diag err;
  kn_cuda_kernel *k = NULL;
  OK(kn_cuda_module_kernel(m, "kn_vadd", &k, &err));
  kn_cuda_kernel *k2 = NULL;
  OK(kn_cuda_module_kernel(m, "kn_vadd", &k2, &err));
  assert_ptr_equal(k, k2);
  float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
  float *c = malloc(n * sizeof(float));
  assert_true(a && b && c);
  for (unsigned i = 0; i < n; i++) {
    a[i] = frand();
    b[i] = frand();
    c[i] = NAN;
  }
  kn_cuda_ptr da, db, dc;
  size_t bytes = (size_t)n * sizeof(float);
  OK(kn_cuda_alloc(g->dev, bytes, &da, &err));
  OK(kn_cuda_alloc(g->dev, bytes, &db, &err));
  OK(kn_cuda_alloc(g->dev, bytes + 4096, &dc, &err)); /* slack: a write past n would land here */
  OK(kn_cuda_copy_htod(g->dev, da, a, bytes, &err));
  OK(kn_cuda_copy_htod_async(g->dev, db, b, bytes, stream, &err));
  OK(kn_cuda_memset8(g->dev, dc, 0xff, bytes + 4096, &err)); /* NaN poison */
  OK(kn_cuda_stream_sync(g->dev, stream, &err));
  void *params[] = {&da, &db, &dc, &n};
  unsigned block[3] = {256, 1, 1}, grid[3] = {(n + 255) / 256, 1, 1};
  OK(kn_cuda_launch(k, grid, block, 0, stream, params, &err));
  OK(kn_cuda_copy_dtoh_async(g->dev, c, dc, bytes, stream, &err));
  OK(kn_cuda_stream_sync(g->dev, stream, &err));
  for (unsigned i = 0; i < n; i++)
    if (c[i] != a[i] + b[i]) fail_msg("vadd: c[%u] = %g, expected %g", i, c[i], a[i] + b[i]);
  uint32_t tail[1024];
  OK(kn_cuda_copy_dtoh(g->dev, tail, dc + bytes, sizeof tail, &err));
  for (int i = 0; i < 1024; i++) assert_int_equal(tail[i], 0xffffffffu);
  if (reps > 0) {
    kn_cuda_event e0, e1;
    OK(kn_cuda_event_create(g->dev, &e0, &err));
    OK(kn_cuda_event_create(g->dev, &e1, &err));
    OK(kn_cuda_launch(k, grid, block, 0, stream, params, &err)); /* warm-up */
    OK(kn_cuda_event_record(g->dev, e0, stream, &err));
    for (int r = 0; r < reps; r++) OK(kn_cuda_launch(k, grid, block, 0, stream, params, &err));
    OK(kn_cuda_event_record(g->dev, e1, stream, &err));
    OK(kn_cuda_event_sync(g->dev, e1, &err));
    float ms = 0;
    OK(kn_cuda_event_elapsed(g->dev, e0, e1, &ms, &err));
    assert_true(ms > 0);
    double per = ms / reps;
    print_message("vadd n=%u: %.4f ms per launch, %.1f GB/s (3 x %zu bytes)%s\n", n, per,
                  3.0 * (double)bytes / (per * 1e-3) / 1e9, bytes,
                  g->fake ? " [fake driver]" : "");
    kn_cuda_event_destroy(g->dev, e0);
    kn_cuda_event_destroy(g->dev, e1);
  }
  OK(kn_cuda_free(g->dev, da, &err));
  OK(kn_cuda_free(g->dev, db, &err));
  OK(kn_cuda_free(g->dev, dc, &err));
  free(a);
  free(b);
  free(c);
}

static void test_gpu_vadd_ptx(void **state) {
  NEED_GPU(g);
  kn_diag err;
  kn_cuda_module *m = NULL;
  OK(kn_cuda_module_load_ptx(g->dev, vadd_ptx, &m, &err));
  print_message("JIT info log: %s\n", kn_cuda_module_log(m));
  kn_cuda_kernel *k;
  OK(kn_cuda_module_kernel(m, "kn_vadd", &k, &err));
  kn_cuda_kernel_attrs at;
  OK(kn_cuda_kernel_attrs_get(k, &at, &err));
  print_message("kn_vadd: %d registers, %d local bytes, %d static shared, max %d threads\n",
                at.num_regs, at.local_bytes, at.static_shared_bytes, at.max_threads_per_block);
  assert_true(at.num_regs > 0);
  assert_true(at.max_threads_per_block >= 256);
  run_vadd(g, m, 1000003, NULL, 0);                    /* ragged, legacy default stream */
  kn_cuda_stream s;
  OK(kn_cuda_stream_create(g->dev, &s, &err));
  run_vadd(g, m, g->fake ? 4096 : 1u << 25, s, 20);    /* 128 MiB per array, timed */
  kn_cuda_stream_destroy(g->dev, s);
  OK(kn_cuda_device_sync(g->dev, &err));
  kn_cuda_module_unload(m);
}

static void test_gpu_missing_kernel(void **state) {
  NEED_GPU(g);
  kn_diag err;
  kn_cuda_module *m = NULL;
  OK(kn_cuda_module_load_ptx(g->dev, vadd_ptx, &m, &err));
  kn_cuda_kernel *k = (kn_cuda_kernel *)&err;
  assert_int_equal(kn_cuda_module_kernel(m, "kn_nope", &k, &err), KN_E_INVALID);
  assert_null(k);
  assert_non_null(strstr(err.message, "cuModuleGetFunction(\"kn_nope\")"));
  assert_non_null(strstr(err.message, "CUDA_ERROR_NOT_FOUND"));
  /* a block larger than any GPU allows: the driver refuses, the message names the launch */
  OK(kn_cuda_module_kernel(m, "kn_vadd", &k, &err));
  kn_cuda_ptr p = 0;
  unsigned n = 0;
  void *params[] = {&p, &p, &p, &n};
  unsigned grid[3] = {1, 1, 1}, block[3] = {4096, 1, 1};
  assert_int_equal(kn_cuda_launch(k, grid, block, 0, NULL, params, &err), KN_E_RUNTIME);
  print_message("oversized block: %s\n", err.message);
  assert_non_null(strstr(err.message, "cuLaunchKernel(kn_vadd, grid 1x1x1, block 4096x1x1"));
  assert_non_null(strstr(err.message, "CUDA_ERROR_INVALID_VALUE"));
  OK(kn_cuda_device_sync(g->dev, &err)); /* the context survived */
  kn_cuda_module_unload(m);
}

static void test_gpu_bad_ptx(void **state) {
  NEED_GPU(g);
  kn_diag err;
  kn_cuda_module *m = (kn_cuda_module *)&err;
  int st = kn_cuda_module_load_ptx(g->dev, bad_ptx, &m, &err);
  print_message("bad PTX: %s\n", err.message);
  assert_int_equal(st, KN_E_COMPILE);
  assert_null(m);
  assert_non_null(strstr(err.message, "cuModuleLoadDataEx"));
  assert_non_null(strstr(err.message, "CUDA_ERROR_INVALID_PTX"));
  assert_non_null(strstr(err.rendered, "JIT log:"));
  assert_non_null(strstr(err.rendered, "bogus"));
  /* a cubin that is not ELF is refused before the driver sees it */
  assert_int_equal(kn_cuda_module_load_cubin(g->dev, bad_ptx, sizeof bad_ptx, &m, &err),
                   KN_E_INVALID);
}

static void test_gpu_dynamic_shared(void **state) {
  NEED_GPU(g);
  kn_diag err;
  const kn_cuda_props *p = kn_cuda_device_get_props(g->dev);
  unsigned dyn = 100 * 1024;
  if ((int)dyn > p->shared_per_block_optin) dyn = (unsigned)p->shared_per_block_optin;
  if (dyn <= 48 * 1024) skip(); /* nothing above the default to opt into */
  kn_cuda_module *m = NULL;
  OK(kn_cuda_module_load_ptx(g->dev, reverse_ptx, &m, &err));
  kn_cuda_kernel *k;
  OK(kn_cuda_module_kernel(m, "kn_block_reverse", &k, &err));
  unsigned n = 256 * 1024, bt = 256;
  float *in = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
  assert_true(in && out);
  for (unsigned i = 0; i < n; i++) in[i] = (float)i;
  kn_cuda_ptr din, dout;
  OK(kn_cuda_alloc(g->dev, n * sizeof(float), &din, &err));
  OK(kn_cuda_alloc(g->dev, n * sizeof(float), &dout, &err));
  OK(kn_cuda_copy_htod(g->dev, din, in, n * sizeof(float), &err));
  OK(kn_cuda_memset8(g->dev, dout, 0xff, n * sizeof(float), &err));
  void *params[] = {&din, &dout, &dyn};
  unsigned grid[3] = {n / bt, 1, 1}, block[3] = {bt, 1, 1};
  /* twice: the second launch finds the limit already raised */
  for (int rep = 0; rep < 2; rep++) OK(kn_cuda_launch(k, grid, block, dyn, NULL, params, &err));
  /* a smaller size above 48 KiB must not lower the limit set for the larger one */
  unsigned dyn2 = 64 * 1024;
  void *params2[] = {&din, &dout, &dyn2};
  OK(kn_cuda_launch(k, grid, block, dyn2, NULL, params2, &err));
  OK(kn_cuda_launch(k, grid, block, dyn, NULL, params, &err));
  OK(kn_cuda_copy_dtoh(g->dev, out, dout, n * sizeof(float), &err));
  for (unsigned i = 0; i < n; i++) {
    unsigned blk = i / bt, t = i % bt;
    if (out[i] != in[blk * bt + bt - 1 - t]) fail_msg("reverse: out[%u] = %g", i, out[i]);
  }
  print_message("block reverse with %u bytes of dynamic shared memory: ok\n", dyn);
  /* more than the device allows: the attribute call fails and says so */
  unsigned too_much = (unsigned)p->shared_per_block_optin + 4096;
  void *params3[] = {&din, &dout, &too_much};
  assert_int_not_equal(kn_cuda_launch(k, grid, block, too_much, NULL, params3, &err),
                       KN_OK);
  print_message("too much shared memory: %s\n", err.message);
  assert_non_null(strstr(err.message, "cuFuncSetAttribute(kn_block_reverse"));
  OK(kn_cuda_free(g->dev, din, &err));
  OK(kn_cuda_free(g->dev, dout, &err));
  free(in);
  free(out);
  kn_cuda_module_unload(m);
}

/* the same PTX through ptxas into a cubin for this device, loaded as a cubin */
static void test_gpu_cubin(void **state) {
  NEED_GPU(g);
  if (g->fake) skip(); /* the fake cannot tell a cubin from anything else */
  char path[512];
  kn_diag msg;
  if (kn_ptxas_find(path, sizeof path, &msg) != KN_OK) {
    print_message("%s\n", msg.message);
    skip();
  }
  const kn_cuda_props *p = kn_cuda_device_get_props(g->dev);
  char arch[16];
  /* sm_90a runs only on 9.0 exactly; other devices get their plain architecture */
  snprintf(arch, sizeof arch, "sm_%d%d%s", p->cc_major, p->cc_minor,
           p->cc_major == 9 && p->cc_minor == 0 ? "a" : "");
  kn_ptxas_options o = {.arch = arch, .opt_level = 3, .want_cubin = true};
  kn_ptxas_result r;
  if (kn_ptxas_run(vadd_ptx, strlen(vadd_ptx), &o, &r, &msg) != KN_OK)
    fail_msg("ptxas %s: %s", arch, msg.rendered);
  kn_diag err;
  kn_cuda_module *m = NULL;
  OK(kn_cuda_module_load_cubin(g->dev, r.cubin, r.cubin_size, &m, &err));
  print_message("cubin for %s (%zu bytes) from %s: loaded\n", arch, r.cubin_size, r.ptxas);
  run_vadd(g, m, 65537, NULL, 0);
  kn_cuda_module_unload(m);
  kn_ptxas_result_free(&r);
}

/* several threads, each with its own stream and buffers, launching one shared kernel */
typedef struct worker {
  gpu *g;
  kn_cuda_kernel *k;
  int failures;
  char msg[512];
} worker;

static void *worker_main(void *arg) {
  worker *w = arg;
  kn_diag err = {.message = "out of host memory"};
  kn_cuda_device *dev = w->g->dev;
  enum { N = 1 << 16 };
  float *a = malloc(N * sizeof(float)), *c = malloc(N * sizeof(float));
  kn_cuda_stream s = NULL;
  kn_cuda_ptr da = 0, dc = 0;
  if (!a || !c) goto fail;
  for (int i = 0; i < N; i++) a[i] = (float)i * 0.25f;
  if (kn_cuda_stream_create(dev, &s, &err) || kn_cuda_alloc(dev, N * 4, &da, &err) ||
      kn_cuda_alloc(dev, N * 4, &dc, &err) || kn_cuda_copy_htod(dev, da, a, N * 4, &err))
    goto fail;
  unsigned n = N;
  void *params[] = {&da, &da, &dc, &n};
  unsigned grid[3] = {N / 128, 1, 1}, block[3] = {128, 1, 1};
  for (int r = 0; r < 50; r++)
    if (kn_cuda_launch(w->k, grid, block, 0, s, params, &err)) goto fail;
  if (kn_cuda_copy_dtoh_async(dev, c, dc, N * 4, s, &err) || kn_cuda_stream_sync(dev, s, &err))
    goto fail;
  for (int i = 0; i < N; i++)
    if (c[i] != a[i] + a[i]) {
      snprintf(err.message, sizeof err.message, "c[%d] = %g", i, c[i]);
      goto fail;
    }
  goto done;
fail:
  w->failures++;
  snprintf(w->msg, sizeof w->msg, "%.500s", err.message);
done:
  kn_cuda_free(dev, da, NULL);
  kn_cuda_free(dev, dc, NULL);
  kn_cuda_stream_destroy(dev, s);
  free(a);
  free(c);
  return NULL;
}

static void test_gpu_threads(void **state) {
  NEED_GPU(g);
  kn_diag err;
  kn_cuda_module *m = NULL;
  OK(kn_cuda_module_load_ptx(g->dev, vadd_ptx, &m, &err));
  kn_cuda_kernel *k;
  OK(kn_cuda_module_kernel(m, "kn_vadd", &k, &err));
  enum { T = 4 };
  worker w[T];
  pthread_t th[T];
  for (int i = 0; i < T; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].g = g;
    w[i].k = k;
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < T; i++)
    if (w[i].failures) fail_msg("thread %d: %s", i, w[i].msg);
  kn_cuda_module_unload(m);
}

int main(void) {
  /* the forking tests first: a child of a process that already initialised CUDA inherits it */
  const struct CMUnitTest plain[] = {
      cmocka_unit_test(test_missing_library_named),
      cmocka_unit_test(test_stub_library),
      cmocka_unit_test(test_not_present_is_clean),
  };
  const struct CMUnitTest gpu_tests[] = {
      cmocka_unit_test(test_gpu_props),
      cmocka_unit_test(test_gpu_vadd_ptx),
      cmocka_unit_test(test_gpu_missing_kernel),
      cmocka_unit_test(test_gpu_bad_ptx),
      cmocka_unit_test(test_gpu_dynamic_shared),
      cmocka_unit_test(test_gpu_cubin),
      cmocka_unit_test(test_gpu_threads),
  };
  int failed = cmocka_run_group_tests_name("cuda", plain, NULL, NULL);
  failed += cmocka_run_group_tests_name("cuda_gpu", gpu_tests, gpu_setup, gpu_teardown);
  return failed ? 1 : 0;
}
#endif
