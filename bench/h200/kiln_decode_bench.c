/* kiln_decode_bench.c — decode (one query row per sequence against a long KV cache) on an NVIDIA
 * GPU through the public API, beside the SDPA anchor of the same device run
 * (bench/h200/sdpa_anchor.py --decode: FlashAttention 2 and cuDNN with enable_gqa).
 *
 * What a serving engine gets: a kiln context on the GPU, kiln_prepare with default options,
 * kiln_forward with seqlen_q 1 (the decode kernels of docs/serving.md: GQA rows packed, the KV
 * range split into pieces by the heuristic over the device's SMs, then the exact combine).
 * The table: B {1, 16, 64} x Nk {4k, 32k, 128k}, 32 query heads on 8 kv heads, D 128, f16.
 *
 * (a) correctness first, for every row of the table: the same kernels with the same number of
 *     pieces (KILN_DECODE_SPLITS set to the row's) on batch 1 at the row's Nk, against
 *     kn_attn_reference (float64, CPU) within kn_attn_tolerance, lse too; the output starts as
 *     NaN bytes.  Plus ragged shapes (Nk 1, 7, 1000, 4097; Nq 1, 4, 16; MQA and MHA).  A row
 *     whose check fails is not timed.
 * (b) time: CUDA events around kiln_forward (both launches), warm-up, then the median of the
 *     repeats, rotating over enough KV caches to exceed the L2 (for the small rows).  TB/s counts
 *     the unique bytes of K and V: 2 x B x HK x Nk x D x 2 bytes per call (the copy ceiling of an
 *     H200 is ~4.2 TB/s).  Also the prefill kernel on the same call (KILN_DECODE=0), the path
 *     decode replaced.
 * (c) --sweep: for each row, block_n {32, 64, 128} x pieces {the heuristic's, 1, 2, 4, ... 128},
 *     each checked as in (a) before it is timed (a measured table for the heuristic and the
 *     default block_n).
 *
 * (d) --tune: for each row, kiln_tune_decode on the row's call (its candidates are compared with
 *     the default kernels, which (a) checked), then the row timed again with the winner.
 * (e) --paged [--page-size P]: the same table through a paged KV cache (KILN_LAYOUT_PAGED, pages
 *     of P rows, default 16, in shuffled order, a block table and cache_seqlens on the device:
 *     the split kernel reading K and V through the table), timed beside the dense call in the
 *     same run, with the paged/dense time ratio (the goal: within 5%).  Each row's paged call is
 *     first checked against float64 (batch 1 at the row's Nk, its piece count), plus ragged
 *     paged shapes (empty sequences, length 1, page boundaries, Nq 4, a table with an unused
 *     tail entry).  The prefill kernel's column is left out in this mode.
 *     KILN_BENCH_POOL_HEAD_MAJOR=1 (an experiment): the timed pools laid out (kv_heads,
 *     num_pages, page_size, D) by their strides instead of (num_pages, page_size, kv_heads, D),
 *     so a page of one head is contiguous as the dense (B, HK, N, D) buffer's rows are;
 *     KILN_BENCH_PAGES_IN_ORDER=1: the tables name the pages in pool order (no shuffle).
 *     KILN_BENCH_SPLITS=N: every call of the table (dense and paged, checks included) in N
 *     pieces; KILN_BENCH_ROWS="16x32768 ...": only those rows (for a profiler);
 *     KILN_BENCH_PAGED_FIRST=1: each row's paged call timed before its dense one.  The last two
 *     columns: the median host time of one kiln_forward call (bench_cuda.h; KILN_BENCH_BATCH=N
 *     times N calls back to back between the events).
 *
 * (e) --fp8 FMT (f8e4m3 on NVIDIA; any of kiln's fp8 formats): fp8 inputs (docs/serving.md,
 *     "fp8 inputs and KV pages") instead of the tables above.  Checks first, through the API,
 *     against float64 on the dequantised inputs (per-(batch, kv head) descales, a NaN-filled
 *     output): dense prefill with q, k, v in fp8 (ragged, causal), decode calls (1, 4 and 16
 *     query rows, q f16 or fp8 over fp8 KV) and paged decode calls over shuffled fp8 pages;
 *     each line names the route kiln_forward took (api_decode_wanted and the split kernel
 *     built: "split-KV decode", else "prefill"), and a decode-shaped call the split-KV kernels
 *     did not serve is a FAIL.  Then times: prefill B 4 x 32/8 heads x N {4k, 16k} (causal off /
 *     on) with q, k, v fp8 beside the f16 kernel (TFLOP/s, 4 B H N^2 D, halved for causal), and
 *     decode B {1, 16, 64} x Nk {4k, 32k} with an f16 q over fp8 KV, dense and paged (pages of
 *     16), through the split-KV decode kernels, beside f16 split-KV decode and the fp8 dense
 *     call through the prefill kernel (KILN_DECODE=0, the route before fp8 decode; TB/s of
 *     unique KV bytes: fp8 counts one byte an element).
 *
 *   kiln_decode_bench [--quick] [--repeats R] [--sweep] [--tune] [--paged [--page-size P]]
 *                     [--fp8 FMT]
 * Exit status: 0 when every check passed and every launch ran, 1 otherwise.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NOLOAD */
#endif
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "attention.h"
#include "attn_decode.h"
#include "bench_cuda.h"
#include "cuda_device.h"
#include "kiln.h"
#include "numeric.h"
#include "target.h"

enum { H = 32, HK = 8, D = 128 };

static kn_cuda_device *dev;
static int failures;

static kn_cuda_ptr dalloc(size_t n) {
  kn_cuda_ptr p = 0;
  kn_diag e;
  if (kn_cuda_alloc(dev, n, &p, &e)) {
    fprintf(stderr, "cuda: %s\n", e.message);
    failures++;
    return 0;
  }
  return p;
}

/* (b, e) the timed calls' device buffers, kept across the table's rows and calls: slot i is
 * allocated again (the old one freed first) and filled with byte `fill` only when a call needs
 * more than it holds, so a table allocates and fills each cache once per size it grows to
 * instead of once per row and call (at B 16 x 32k a K / V cache is 1 GiB); kept_free at exit */
enum { BUF_Q, BUF_O, BUF_L, BUF_T, BUF_S, BUF_K, BUF_V = BUF_K + 4, NBUFS = BUF_V + 4 };
static struct { kn_cuda_ptr p; size_t n; } kept_bufs[NBUFS];
static kn_cuda_ptr kept(int slot, size_t n, int fill) {
  if (kept_bufs[slot].p && kept_bufs[slot].n >= n) return kept_bufs[slot].p;
  if (kept_bufs[slot].p) kn_cuda_free(dev, kept_bufs[slot].p, NULL);
  kept_bufs[slot].p = dalloc(n);
  kept_bufs[slot].n = kept_bufs[slot].p ? n : 0;
  kn_diag e;
  if (kept_bufs[slot].p && fill >= 0 &&
      kn_cuda_memset8(dev, kept_bufs[slot].p, (unsigned char)fill, n, &e)) {
    fprintf(stderr, "cuda: %s\n", e.message);
    kn_cuda_free(dev, kept_bufs[slot].p, NULL);
    kept_bufs[slot].p = 0, kept_bufs[slot].n = 0;
  }
  return kept_bufs[slot].p;
}
static void kept_free(void) {
  for (int i = 0; i < NBUFS; i++)
    if (kept_bufs[i].p) kn_cuda_free(dev, kept_bufs[i].p, NULL);
  memset(kept_bufs, 0, sizeof kept_bufs);
}

/* the test suite's fake libcuda (KILN_CUDA_LIBRARY, tests/unit/test_cuda.c) computes kiln's
 * kernels by their contracts but must be told the dtype, head dim and causal flag: a smoke run
 * of this bench without a GPU.  NULL on a real driver. */
static void (*fake_attn)(int elem_bytes, int bf16, int head_dim, int causal);
static void (*fake_paged)(int on);

static void fake_causal(int causal) {
  if (fake_attn) fake_attn(2, 0, 128, causal);
}
static void fake_layout(bool paged) {
  if (fake_paged) fake_paged(paged);
}

static kiln_attn_desc desc_of(int causal) {
  return (kiln_attn_desc){.dtype = KILN_F16, .head_dim = D, .causal = causal, .has_lse = 1};
}
static kiln_attn_desc paged_desc(int causal) {
  kiln_attn_desc d = desc_of(causal);
  d.layout = KILN_LAYOUT_PAGED;
  return d;
}

/* KILN_BENCH_SPLITS=N (an experiment): every dense and paged decode call of the table, its
 * check included, splits the KV range into N pieces instead of the heuristic's count */
static int bench_splits(void) {
  const char *e = getenv("KILN_BENCH_SPLITS");
  return e && atoi(e) > 0 ? atoi(e) : 0;
}

/* KILN_BENCH_ROWS="BxNK ..." (for a profiler): only those rows of the table are checked and
 * timed; unset: every row */
static bool row_wanted(int B, int nk) {
  const char *e = getenv("KILN_BENCH_ROWS");
  char want[32];
  if (!e || !*e) return true;
  snprintf(want, sizeof want, "%dx%d", B, nk);
  for (const char *p = strstr(e, want); p; p = strstr(p + 1, want))
    if ((p == e || p[-1] == ' ') && (p[strlen(want)] == ' ' || !p[strlen(want)])) return true;
  return false;
}

static void set_splits(int s) {
  char b[16];
  snprintf(b, sizeof b, "%d", s);
  if (s > 0) setenv("KILN_DECODE_SPLITS", b, 1);
  else unsetenv("KILN_DECODE_SPLITS");
}

/* the largest |o - od| (f16 o) and |lse - ld| (an infinite lse equal to the reference's: 0);
 * NaN counts as infinite */
static void max_errs(const uint16_t *o, const double *od, size_t n_q, const float *lse,
                     const double *ld, size_t n_l, double *err, double *lerr) {
  *err = *lerr = 0;
  for (size_t i = 0; i < n_q; i++) {
    double x = fabs(kn_load_elem(KN_F16, o + i) - od[i]);
    if (!(x <= *err)) *err = isnan(x) ? INFINITY : x;
  }
  for (size_t i = 0; i < n_l; i++) {
    double x = isinf(ld[i]) && lse[i] == ld[i] ? 0 : fabs(lse[i] - ld[i]);
    if (!(x <= *lerr)) *lerr = isnan(x) ? INFINITY : x;
  }
}

/* (a) one decode call against float64; false on FAIL */
static bool check(kiln_kernel *kern, int B, int h, int hk, int nq, int nk, int causal, int splits,
                  uint64_t seed) {
  size_t n_q = (size_t)B * h * nq * D, n_k = (size_t)B * hk * nk * D, n_l = (size_t)B * h * nq;
  uint16_t *q = malloc(n_q * 2), *k = malloc(n_k * 2), *v = malloc(n_k * 2), *o = malloc(n_q * 2);
  float *lse = malloc(n_l * 4);
  double *qd = malloc(n_q * 8), *kd = malloc(n_k * 8), *vd = malloc(n_k * 8),
         *od = malloc(n_q * 8), *ld = malloc(n_l * 8);
  if (!q || !k || !v || !o || !lse || !qd || !kd || !vd || !od || !ld) {
    printf("# out of host memory\n");
    failures++;
    return false;
  }
  uint64_t s = seed | 1;
  for (size_t i = 0; i < n_q; i++) kn_store_elem(KN_F16, q + i, bench_normal(&s)), qd[i] = kn_load_elem(KN_F16, q + i);
  for (size_t i = 0; i < n_k; i++) {
    kn_store_elem(KN_F16, k + i, bench_normal(&s)), kd[i] = kn_load_elem(KN_F16, k + i);
    kn_store_elem(KN_F16, v + i, bench_normal(&s)), vd[i] = kn_load_elem(KN_F16, v + i);
  }
  kn_cuda_ptr dq = dalloc(n_q * 2), dk = dalloc(n_k * 2), dv = dalloc(n_k * 2),
              dout = dalloc(n_q * 2), dl = dalloc(n_l * 4);
  kn_diag e;
  double err = INFINITY, lerr = INFINITY;
  if (dq && dk && dv && dout && dl && !kn_cuda_copy_htod(dev, dq, q, n_q * 2, &e) &&
      !kn_cuda_copy_htod(dev, dk, k, n_k * 2, &e) && !kn_cuda_copy_htod(dev, dv, v, n_k * 2, &e) &&
      !kn_cuda_memset8(dev, dout, 0xff, n_q * 2, &e) && !kn_cuda_memset8(dev, dl, 0xff, n_l * 4, &e)) {
    kiln_attn_args a = {.q = (void *)(uintptr_t)dq, .k = (void *)(uintptr_t)dk,
                        .v = (void *)(uintptr_t)dv, .o = (void *)(uintptr_t)dout,
                        .lse = (float *)(uintptr_t)dl, .batch = B, .heads = h, .kv_heads = hk,
                        .seqlen_q = nq, .seqlen_k = nk};
    set_splits(splits);
    fake_causal(causal);
    kiln_status st = kiln_forward(kern, &a, NULL);
    set_splits(0);
    if (st) fprintf(stderr, "kiln: %s\n", kiln_last_error());
    if (!st && !kn_cuda_device_sync(dev, &e) && !kn_cuda_copy_dtoh(dev, o, dout, n_q * 2, &e) &&
        !kn_cuda_copy_dtoh(dev, lse, dl, n_l * 4, &e)) {
      kn_attn_desc in;
      kiln_attn_desc pd = desc_of(causal);
      api_desc_from_public(&pd, &in);
      kn_attn_problem p = {.batch = B, .heads = h, .kv_heads = hk, .seqlen_q = nq,
                           .seqlen_k = nk};
      kn_attn_reference(&in, &p, qd, kd, vd, od, ld);
      max_errs(o, od, n_q, lse, ld, n_l, &err, &lerr);
    }
  }
  bool pass = err <= kn_attn_tolerance(KN_F16) && lerr <= 4 * kn_attn_lse_tolerance(KN_F16);
  failures += !pass;
  char sp[24] = "heuristic";
  if (splits > 0) snprintf(sp, sizeof sp, "%d", splits);
  printf("%s  decode B%d H%d/%d Nq %d Nk %d causal %d pieces %s: max|dO| %.3g (tol %.0e) "
         "max|dlse| %.3g\n", pass ? "PASS" : "FAIL", B, h, hk, nq, nk, causal, sp, err,
         kn_attn_tolerance(KN_F16), lerr);
  fflush(stdout);
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dl};
  for (int i = 0; i < 5; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  free(q), free(k), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(ld);
  return pass;
}

/* one timed call for bench_median_ms: kiln_forward(kern, a), K and V rotated over the first
 * `sets` caches of k[] / v[] (sets >= 1; one cache: a's own) */
typedef struct rotating {
  kiln_kernel *kern;
  kiln_attn_args a;
  const kn_cuda_ptr *k, *v;
  int sets, n;
} rotating;
static int rotate_forward(void *user) {
  rotating *r = user;
  int i = r->n++ % r->sets;
  if (r->k) r->a.k = (void *)(uintptr_t)r->k[i], r->a.v = (void *)(uintptr_t)r->v[i];
  return kiln_forward(r->kern, &r->a, NULL) != KILN_OK;
}

/* (b) median ms of one call (B, Nk) at `splits` (0: the heuristic's), over `sets` KV caches */
static double timed(kiln_kernel *kern, int B, int nk, int splits, int repeats, bool prefill) {
  size_t kv = (size_t)B * HK * nk * D * 2, qo = (size_t)B * H * D * 2;
  int sets = 1;
  while (sets < 4 && kv * 2 * sets < ((size_t)256 << 20)) sets++;
  kn_cuda_ptr k[4] = {0}, v[4] = {0}, q = kept(BUF_Q, qo, 0x3c), o = kept(BUF_O, qo, -1),
              l = kept(BUF_L, (size_t)B * H * 4, -1);
  double med = NAN;
  bool ok = q && o && l;
  for (int i = 0; i < sets && ok; i++)
    ok = (k[i] = kept(BUF_K + i, kv, 0x3b)) && (v[i] = kept(BUF_V + i, kv, 0x3a));
  if (!ok) {
    failures++;
    goto out;
  }
  set_splits(splits ? splits : bench_splits());
  fake_causal(0);
  if (prefill) setenv("KILN_DECODE", "0", 1);
  rotating call = {kern,
                   {.q = (void *)(uintptr_t)q, .o = (void *)(uintptr_t)o,
                    .lse = (float *)(uintptr_t)l, .batch = B, .heads = H, .kv_heads = HK,
                    .seqlen_q = 1, .seqlen_k = nk},
                   k, v, sets, 0};
  med = bench_median_ms(dev, 3, repeats, rotate_forward, &call);
  failures += isnan(med);
out:
  set_splits(0);
  unsetenv("KILN_DECODE");
  return med;
}

/* A shuffled pool for B sequences of len[b] keys in pages of ps rows (one unused tail entry
 * per table row when `tail`, naming no page): the (B, *max_pages) table; *num_pages pages */
static int32_t *page_table(int B, const int *len, int ps, bool tail, uint64_t *s, int *max_pages,
                           int *num_pages) {
  int need = 0, mp = 0;
  for (int b = 0; b < B; b++) {
    int n = (len[b] + ps - 1) / ps;
    need += n;
    if (n > mp) mp = n;
  }
  mp += tail;
  int32_t *perm = malloc(sizeof *perm * (size_t)(need + 1)), *t = malloc(sizeof *t * (size_t)(B * mp + 1));
  for (int i = 0; i < need; i++) perm[i] = i;
  /* KILN_BENCH_PAGES_IN_ORDER=1 (an experiment): the pages in pool order, not shuffled */
  const bool in_order = getenv("KILN_BENCH_PAGES_IN_ORDER") != NULL;
  for (int i = need - 1; i > 0 && !in_order; i--) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    int j = (int)(*s % (uint64_t)(i + 1));
    int32_t x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  int at = 0;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < mp; i++) t[b * mp + i] = i < (len[b] + ps - 1) / ps ? perm[at++] : need;
  free(perm);
  *max_pages = mp, *num_pages = need;
  return t;
}

/* (e) one paged decode call (B sequences of len[b] keys, pages of ps) against float64 */
static bool check_paged(kiln_kernel *kern, int B, int h, int hk, int nq, const int *len, int ps,
                        int causal, int splits, uint64_t seed) {
  uint64_t s = seed | 1;
  int mp, np;
  int32_t *table = page_table(B, len, ps, true, &s, &mp, &np);
  int32_t lens[64];
  for (int b = 0; b < B; b++) lens[b] = len[b];
  size_t n_q = (size_t)B * h * nq * D, n_k = (size_t)np * ps * hk * D, n_l = (size_t)B * h * nq;
  uint16_t *q = malloc(n_q * 2), *k = malloc(n_k * 2 + 2), *v = malloc(n_k * 2 + 2),
           *o = malloc(n_q * 2);
  float *lse = malloc(n_l * 4);
  double *qd = malloc(n_q * 8), *kd = malloc(n_k * 8 + 8), *vd = malloc(n_k * 8 + 8),
         *od = malloc(n_q * 8), *ld = malloc(n_l * 8);
  if (!q || !k || !v || !o || !lse || !qd || !kd || !vd || !od || !ld) {
    printf("# out of host memory\n");
    failures++;
    return false;
  }
  for (size_t i = 0; i < n_q; i++) kn_store_elem(KN_F16, q + i, bench_normal(&s)), qd[i] = kn_load_elem(KN_F16, q + i);
  for (size_t i = 0; i < n_k; i++) {
    kn_store_elem(KN_F16, k + i, bench_normal(&s)), kd[i] = kn_load_elem(KN_F16, k + i);
    kn_store_elem(KN_F16, v + i, bench_normal(&s)), vd[i] = kn_load_elem(KN_F16, v + i);
  }
  size_t tb = (size_t)B * mp * 4;
  kn_cuda_ptr dq = dalloc(n_q * 2), dk = dalloc(n_k * 2 + 2), dv = dalloc(n_k * 2 + 2),
              dout = dalloc(n_q * 2), dl = dalloc(n_l * 4), dt = dalloc(tb + 4),
              ds = dalloc((size_t)B * 4);
  kn_diag e;
  double err = INFINITY, lerr = INFINITY;
  if (dq && dk && dv && dout && dl && dt && ds && !kn_cuda_copy_htod(dev, dq, q, n_q * 2, &e) &&
      !kn_cuda_copy_htod(dev, dk, k, n_k * 2, &e) && !kn_cuda_copy_htod(dev, dv, v, n_k * 2, &e) &&
      !kn_cuda_copy_htod(dev, dt, table, tb, &e) &&
      !kn_cuda_copy_htod(dev, ds, lens, (size_t)B * 4, &e) &&
      !kn_cuda_memset8(dev, dout, 0xff, n_q * 2, &e) && !kn_cuda_memset8(dev, dl, 0xff, n_l * 4, &e)) {
    kiln_attn_args a = {.q = (void *)(uintptr_t)dq, .k = (void *)(uintptr_t)dk,
                        .v = (void *)(uintptr_t)dv, .o = (void *)(uintptr_t)dout,
                        .lse = (float *)(uintptr_t)dl, .batch = B, .heads = h, .kv_heads = hk,
                        .seqlen_q = nq, .block_table = (void *)(uintptr_t)dt,
                        .cache_seqlens = (void *)(uintptr_t)ds, .page_size = ps,
                        .num_pages = np, .max_pages = mp, .q_numel = (int64_t)n_q,
                        .k_numel = (int64_t)n_k, .v_numel = (int64_t)n_k,
                        .o_numel = (int64_t)n_q, .lse_numel = (int64_t)n_l,
                        .block_table_numel = (int64_t)B * mp};
    set_splits(splits);
    fake_causal(causal);
    fake_layout(true);
    kiln_status st = kiln_forward(kern, &a, NULL);
    fake_layout(false);
    set_splits(0);
    if (st) fprintf(stderr, "kiln: %s\n", kiln_last_error());
    if (!st && !kn_cuda_device_sync(dev, &e) && !kn_cuda_copy_dtoh(dev, o, dout, n_q * 2, &e) &&
        !kn_cuda_copy_dtoh(dev, lse, dl, n_l * 4, &e)) {
      kn_attn_desc in;
      kiln_attn_desc pd = paged_desc(causal);
      api_desc_from_public(&pd, &in);
      kn_attn_problem p = {.batch = B, .heads = h, .kv_heads = hk, .seqlen_q = nq,
                           .seqlen_k = mp * ps, .block_table = table, .cache_seqlens = lens,
                           .page_size = ps, .num_pages = np, .max_pages = mp};
      kn_attn_reference(&in, &p, qd, kd, vd, od, ld);
      err = lerr = 0;
      for (size_t i = 0; i < n_q; i++) {
        double x = fabs(kn_load_elem(KN_F16, o + i) - od[i]);
        if (!(x <= err)) err = isnan(x) ? INFINITY : x;
      }
      for (size_t i = 0; i < n_l; i++) {
        double x = isinf(ld[i]) && lse[i] == ld[i] ? 0 : fabs(lse[i] - ld[i]);
        if (!(x <= lerr)) lerr = isnan(x) ? INFINITY : x;
      }
    }
  }
  bool pass = err <= kn_attn_tolerance(KN_F16) && lerr <= 4 * kn_attn_lse_tolerance(KN_F16);
  failures += !pass;
  char sp[24] = "heuristic", lt[96] = "";
  if (splits > 0) snprintf(sp, sizeof sp, "%d", splits);
  for (int b = 0, at = 0; b < B && at < 80; b++)
    at += snprintf(lt + at, sizeof lt - (size_t)at, "%s%d", b ? "," : "", len[b]);
  printf("%s  paged decode B%d H%d/%d Nq %d lens %s page %d causal %d pieces %s: max|dO| %.3g "
         "(tol %.0e) max|dlse| %.3g\n", pass ? "PASS" : "FAIL", B, h, hk, nq, lt, ps, causal, sp,
         err, kn_attn_tolerance(KN_F16), lerr);
  fflush(stdout);
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dl, dt, ds};
  for (int i = 0; i < 7; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  free(q), free(k), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(ld);
  free(table);
  return pass;
}

/* (e) median ms of one paged call: B sequences of nk keys in shuffled pages of ps rows, over
 * enough pools to exceed the L2 for the small rows */
static double timed_paged(kiln_kernel *kern, int B, int nk, int ps, int repeats) {
  int lens[64];
  for (int b = 0; b < B; b++) lens[b] = nk;
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int mp, np;
  int32_t *table = page_table(B, lens, ps, false, &s, &mp, &np);
  size_t kv = (size_t)np * ps * HK * D * 2, qo = (size_t)B * H * D * 2;
  int sets = 1;
  while (sets < 4 && kv * 2 * sets < ((size_t)256 << 20)) sets++;
  kn_cuda_ptr k[4] = {0}, v[4] = {0}, q = kept(BUF_Q, qo, 0x3c), o = kept(BUF_O, qo, -1),
              l = kept(BUF_L, (size_t)B * H * 4, -1);
  kn_cuda_ptr dt = kept(BUF_T, (size_t)B * mp * 4, -1), ds = kept(BUF_S, (size_t)B * 4, -1);
  kn_diag e;
  double med = NAN;
  bool ok = q && o && l && dt && ds &&
            !kn_cuda_copy_htod(dev, dt, table, (size_t)B * mp * 4, &e) &&
            !kn_cuda_copy_htod(dev, ds, lens, (size_t)B * 4, &e);
  for (int i = 0; i < sets && ok; i++)
    ok = (k[i] = kept(BUF_K + i, kv, 0x3b)) && (v[i] = kept(BUF_V + i, kv, 0x3a));
  if (!ok) {
    failures++;
    goto out;
  }
  set_splits(bench_splits());
  fake_causal(0);
  fake_layout(true);
  rotating call = {kern,
                   {.q = (void *)(uintptr_t)q, .o = (void *)(uintptr_t)o,
                    .lse = (float *)(uintptr_t)l, .batch = B, .heads = H, .kv_heads = HK,
                    .seqlen_q = 1, .block_table = (void *)(uintptr_t)dt,
                    .cache_seqlens = (void *)(uintptr_t)ds, .page_size = ps, .num_pages = np,
                    .max_pages = mp},
                   k, v, sets, 0};
  if (getenv("KILN_BENCH_POOL_HEAD_MAJOR")) {
    /* an experiment's layout: each kv head's pages contiguous, (HK, num_pages, page_size, D)
     * (strides {page, head, row}), so a page of one head is page_size x D contiguous elements
     * as in the dense (B, HK, N, D) buffer, instead of rows interleaved with the other heads' */
    const int64_t st[3] = {(int64_t)ps * D, (int64_t)np * ps * D, D};
    memcpy(call.a.k_stride, st, sizeof st);
    memcpy(call.a.v_stride, st, sizeof st);
  }
  med = bench_median_ms(dev, 3, repeats, rotate_forward, &call);
  failures += isnan(med);
out:
  set_splits(0);
  fake_layout(false);
  free(table);
  return med;
}

static double tbs(int B, int nk, double ms) {
  return 2.0 * B * HK * (double)nk * D * 2 / (ms * 1e-3) / 1e12;
}

/* the number of pieces the API picks for (B, Nk) with the decode tiling of the dense kernel
 * (page 0) or of the paged split kernel that pages of `page` rows run (kn_attn_decode_read_for:
 * the in-page kernel where page is a multiple of its BLOCK_N, the pages kernel where it is one
 * of 16, else the gather kernel: each has its own tiling, kn_attn_decode_read_config); block_n: KILN_DECODE_BLOCK_N's, 0 for the default;
 * KILN_BENCH_SPLITS's count where it is set */
static int plan_splits_of(kiln_context *ctx, int B, int nk, int block_n, int page) {
  if (bench_splits()) return bench_splits();
  kn_attn_desc d;
  kiln_attn_desc pd = page ? paged_desc(0) : desc_of(0);
  api_desc_from_public(&pd, &d);
  kn_attn_config c = kn_attn_decode_read_config(ctx->target_arch, &d, KN_DECODE_READ_IN_PAGE);
  const kn_attn_config pc = kn_attn_decode_read_config(ctx->target_arch, &d, KN_DECODE_READ_PAGES);
  const kn_decode_read r = page ? kn_attn_decode_read_for(page, c.block_n, pc.block_n)
                                : KN_DECODE_READ_IN_PAGE;
  if (r != KN_DECODE_READ_IN_PAGE) c = kn_attn_decode_read_config(ctx->target_arch, &d, r);
  if (block_n) c.block_n = block_n;
  kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = 1, .seqlen_k = nk};
  return kn_attn_decode_plan(&d, &c, &p, ctx->compute_units, 0).splits;
}
static int plan_splits(kiln_context *ctx, int B, int nk, int block_n) {
  return plan_splits_of(ctx, B, nk, block_n, 0);
}

static kiln_context *context(int block_n) {
  char b[16];
  snprintf(b, sizeof b, "%d", block_n);
  if (block_n) setenv("KILN_DECODE_BLOCK_N", b, 1);
  else unsetenv("KILN_DECODE_BLOCK_N");
  kiln_context *ctx;
  kiln_context_options co = {.device = "auto", .no_cache = 1};
  if (kiln_context_create(&co, &ctx)) {
    printf("# no kiln context: %s\n", kiln_last_error());
    exit(1);
  }
  return ctx;
}

/* ---- (e) fp8 inputs ---- */

static kn_cuda_ptr upload(const void *h, size_t n) {
  kn_cuda_ptr p = dalloc(n ? n : 4);
  kn_diag e;
  if (p && n && kn_cuda_copy_htod(dev, p, h, n, &e)) {
    fprintf(stderr, "cuda: %s\n", e.message);
    failures++;
  }
  return p;
}

/* random N(0,1) values quantised into fmt with the descale of each element's (b, hk) (of
 * ds, (B, HK)); deq gets the dequantised values.  Element i's (b, head): contiguous
 * (B, heads, rows, D), or (owner of its page, (i / D) % heads) for a pool of pages */
static void fp8_fill(kn_scalar fmt, uint8_t *raw, double *deq, size_t n, int heads, int group,
                     int64_t rows, const int *page_owner, int64_t page_rows, const float *ds,
                     uint64_t *s) {
  for (size_t i = 0; i < n; i++) {
    int64_t b, h;
    if (page_owner) {
      int64_t page = (int64_t)(i / ((size_t)page_rows * heads * D));
      b = page_owner[page] < 0 ? 0 : page_owner[page], h = (int64_t)(i / D) % heads;
    } else {
      b = (int64_t)(i / ((size_t)heads * rows * D)), h = (int64_t)(i / ((size_t)rows * D)) % heads;
    }
    double scale = ds[b * HK + h / group];
    raw[i] = (uint8_t)kn_encode(fmt, bench_normal(s) / scale);
    deq[i] = kn_decode(fmt, raw[i]) * scale;
  }
}

/* one fp8 call through the API against float64: layout dense (q, k, v fp8 when qf8, else q f16)
 * or paged (pages of 16 over shuffled pool pages, q f16); false on FAIL */
static bool fp8_check(kiln_context *ctx, kn_scalar fmt, kiln_dtype pfmt, bool paged, bool qf8,
                      int B, int nq, int nk, int causal, uint64_t seed) {
  const int PS = 16, MP = (nk + PS - 1) / PS + 1, NP = B * MP + 1;
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = D, .causal = causal, .has_lse = 1,
                       .layout = paged ? KILN_LAYOUT_PAGED : KILN_LAYOUT_DENSE,
                       .q_dtype = qf8 ? pfmt : 0, .kv_dtype = pfmt};
  kiln_kernel *kern;
  if (kiln_prepare(ctx, &pd, NULL, &kern)) {
    printf("FAIL  fp8 prepare: %s\n", kiln_last_error());
    failures++;
    return false;
  }
  size_t n_q = (size_t)B * H * nq * D, n_l = (size_t)B * H * nq;
  size_t n_k = paged ? (size_t)NP * PS * HK * D : (size_t)B * HK * nk * D;
  uint8_t *q = malloc(n_q * 2), *k = malloc(n_k), *v = malloc(n_k);
  uint16_t *o = malloc(n_q * 2);
  float *lse = malloc(n_l * 4), ds[3][64 * HK];
  double *qd = malloc(n_q * 8), *kd = malloc(n_k * 8), *vd = malloc(n_k * 8),
         *od = malloc(n_q * 8), *ld = malloc(n_l * 8);
  int32_t *table = malloc(sizeof(int32_t) * (size_t)(B * MP)), *lens = malloc(sizeof(int32_t) * (size_t)B);
  int *owner = malloc(sizeof(int) * (size_t)NP);
  if (!q || !k || !v || !o || !lse || !qd || !kd || !vd || !od || !ld || !table || !lens ||
      !owner || B > 64) {
    printf("# out of host memory\n");
    failures++;
    return false;
  }
  uint64_t s = seed | 1;
  for (int w = 0; w < 3; w++)
    for (int i = 0; i < B * HK; i++) ds[w][i] = (float)(4.0 * (0.7 + 0.1 * (i % 7)) / kn_max_finite(fmt));
  for (int i = 0; i < NP; i++) owner[i] = -1;
  int mul = 5;  /* pages in a scattered order: entry e names page e * mul mod NP, a permutation */
  for (;; mul++) {
    int a = mul, c = NP;
    while (c) { int t = a % c; a = c; c = t; }
    if (a == 1) break;
  }
  for (int b = 0; b < B; b++) {
    lens[b] = nk;
    for (int i = 0; i < MP; i++) table[b * MP + i] = (int32_t)((int64_t)(b * MP + i) * mul % NP);
  }
  if (paged)
    for (int b = 0; b < B; b++)
      for (int i = 0; i * PS < nk; i++) owner[table[b * MP + i]] = b;
  if (qf8) fp8_fill(fmt, q, qd, n_q, H, H / HK, nq, NULL, 0, ds[0], &s);
  else
    for (size_t i = 0; i < n_q; i++)
      kn_store_elem(KN_F16, (uint16_t *)q + i, bench_normal(&s)), qd[i] = kn_load_elem(KN_F16, (uint16_t *)q + i);
  fp8_fill(fmt, k, kd, n_k, HK, 1, nk, paged ? owner : NULL, PS, ds[1], &s);
  fp8_fill(fmt, v, vd, n_k, HK, 1, nk, paged ? owner : NULL, PS, ds[2], &s);
  kn_cuda_ptr dq = upload(q, n_q * (qf8 ? 1 : 2)), dk = upload(k, n_k), dv = upload(v, n_k),
              dout = dalloc(n_q * 2), dl = dalloc(n_l * 4), dds[3], dt = upload(table, sizeof(int32_t) * (size_t)(B * MP)),
              dlen = upload(lens, sizeof(int32_t) * (size_t)B);
  for (int w = 0; w < 3; w++) dds[w] = upload(ds[w], sizeof(float) * (size_t)(B * HK));
  kn_diag e;
  double err = INFINITY, lerr = INFINITY;
  const char *route = "none";
  if (dq && dk && dv && dout && dl && !kn_cuda_memset8(dev, dout, 0xff, n_q * 2, &e) &&
      !kn_cuda_memset8(dev, dl, 0xff, n_l * 4, &e)) {
    kiln_attn_args a = {.q = (void *)(uintptr_t)dq, .k = (void *)(uintptr_t)dk,
                        .v = (void *)(uintptr_t)dv, .o = (void *)(uintptr_t)dout,
                        .lse = (float *)(uintptr_t)dl, .batch = B, .heads = H, .kv_heads = HK,
                        .seqlen_q = nq, .seqlen_k = nk,
                        .q_descale = qf8 ? (const float *)(uintptr_t)dds[0] : NULL,
                        .k_descale = (const float *)(uintptr_t)dds[1],
                        .v_descale = (const float *)(uintptr_t)dds[2]};
    if (paged) {
      a.seqlen_k = 0, a.block_table = (const int32_t *)(uintptr_t)dt;
      a.cache_seqlens = (const int32_t *)(uintptr_t)dlen, a.page_size = PS, a.num_pages = NP;
      a.max_pages = MP;
    }
    kiln_status st = kiln_forward(kern, &a, NULL);
    if (st) fprintf(stderr, "kiln: %s\n", kiln_last_error());
    /* the route kiln_forward took: the split-KV decode kernels for 1..16 query rows */
    route = api_decode_wanted(kern, &a) && (kern->decode[API_SPLIT] ||
                                            kern->decode[API_SPLIT_IN_PAGE] ||
                                            kern->decode[API_SPLIT_PAGES])
                ? "split-KV decode" : "prefill";
    if (!st && !kn_cuda_device_sync(dev, &e) && !kn_cuda_copy_dtoh(dev, o, dout, n_q * 2, &e) &&
        !kn_cuda_copy_dtoh(dev, lse, dl, n_l * 4, &e)) {
      kn_attn_desc in;
      api_desc_from_public(&pd, &in);
      kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = nq,
                           .seqlen_k = paged ? MP * PS : nk, .block_table = table,
                           .cache_seqlens = lens, .page_size = PS, .num_pages = NP,
                           .max_pages = MP};
      kn_attn_reference(&in, &p, qd, kd, vd, od, ld);
      max_errs(o, od, n_q, lse, ld, n_l, &err, &lerr);
    }
  }
  const bool want_decode = nq >= 1 && nq <= KN_DECODE_MAX_Q;
  bool pass = err <= kn_attn_tolerance(KN_F16) && lerr <= 4 * kn_attn_lse_tolerance(KN_F16) &&
              want_decode == !strcmp(route, "split-KV decode");
  failures += !pass;
  printf("%s  fp8 %s %s B%d H%d/%d Nq %d Nk %d causal %d q %s (%s): max|dO| %.3g (tol %.0e) "
         "max|dlse| %.3g\n", pass ? "PASS" : "FAIL", kn_scalar_name(fmt), paged ? "paged" : "dense",
         B, H, HK, nq, nk, causal, qf8 ? "fp8" : "f16", route, err, kn_attn_tolerance(KN_F16),
         lerr);
  fflush(stdout);
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dl, dds[0], dds[1], dds[2], dt, dlen};
  for (int i = 0; i < 10; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  free(q), free(k), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(ld);
  free(table), free(lens), free(owner);
  return pass;
}

/* median ms of kern on (B, nq, nk): kv element bytes kvb (1: fp8), q bytes qb; paged: pages of
 * 16 in order; descales of 1 when fp8 */
static double fp8_timed(kiln_kernel *kern, bool paged, int qb, int kvb, int B, int nq, int nk,
                        int repeats) {
  const int PS = 16, MP = (nk + PS - 1) / PS;
  size_t kv = (size_t)B * HK * nk * D * (size_t)kvb, qn = (size_t)B * H * nq * D;
  kn_cuda_ptr q = dalloc(qn * (size_t)qb), o = dalloc(qn * 2), l = dalloc((size_t)B * H * nq * 4),
              k = dalloc(kv), v = dalloc(kv), dt = 0, dlen = 0, dds = 0;
  int32_t *table = malloc(sizeof(int32_t) * (size_t)B * MP), *lens = malloc(sizeof(int32_t) * (size_t)B);
  float *ones = malloc(sizeof(float) * (size_t)B * HK);
  kn_diag e;
  double med = NAN;
  for (int b = 0; b < B; b++) {
    lens[b] = nk;
    for (int i = 0; i < MP; i++) table[b * MP + i] = b * MP + i;
  }
  for (int i = 0; i < B * HK; i++) ones[i] = 1;
  dt = upload(table, sizeof(int32_t) * (size_t)B * MP), dlen = upload(lens, sizeof(int32_t) * (size_t)B);
  dds = upload(ones, sizeof(float) * (size_t)B * HK);
  bool ok = q && o && l && k && v && dt && dlen && dds &&
            !kn_cuda_memset8(dev, q, qb == 1 ? 0x30 : 0x3c, qn * (size_t)qb, &e) &&
            !kn_cuda_memset8(dev, k, kvb == 1 ? 0x31 : 0x3b, kv, &e) &&
            !kn_cuda_memset8(dev, v, kvb == 1 ? 0x32 : 0x3a, kv, &e);
  rotating call = {kern,
                   {.q = (void *)(uintptr_t)q, .k = (void *)(uintptr_t)k,
                    .v = (void *)(uintptr_t)v, .o = (void *)(uintptr_t)o,
                    .lse = (float *)(uintptr_t)l, .batch = B, .heads = H, .kv_heads = HK,
                    .seqlen_q = nq, .seqlen_k = nk},
                   NULL, NULL, 1, 0};
  if (kvb == 1) call.a.k_descale = call.a.v_descale = (const float *)(uintptr_t)dds;
  if (qb == 1) call.a.q_descale = (const float *)(uintptr_t)dds;
  if (paged) {
    call.a.seqlen_k = 0, call.a.block_table = (const int32_t *)(uintptr_t)dt;
    call.a.cache_seqlens = (const int32_t *)(uintptr_t)dlen, call.a.page_size = PS;
    call.a.num_pages = B * MP, call.a.max_pages = MP;
  }
  if (ok) med = bench_median_ms(dev, 3, repeats, rotate_forward, &call);
  failures += !ok || isnan(med);
  kn_cuda_ptr bufs[] = {q, o, l, k, v, dt, dlen, dds};
  for (int i = 0; i < 8; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  free(table), free(lens), free(ones);
  return med;
}

static int fp8_main(const char *name, bool quick, int repeats) {
  int fi = -1;
  static const kiln_dtype pubs[] = {KILN_F8E4M3, KILN_F8E5M2, KILN_F8E4M3FNUZ, KILN_F8E5M2FNUZ};
  for (int i = 0; i < 4; i++)
    if (!strcmp(name, kiln_dtype_name(pubs[i]))) fi = i;
  if (fi < 0) {
    fprintf(stderr, "--fp8 expects f8e4m3, f8e5m2, f8e4m3fnuz or f8e5m2fnuz, not '%s'\n", name);
    return 2;
  }
  const kn_scalar fmt = (kn_scalar)(KN_F8E4M3 + fi);
  kiln_context *ctx = context(0);
  printf("# kiln %s on %s (%s, %d SMs): fp8 inputs %s\n", kiln_version(),
         kiln_context_device_name(ctx), kiln_context_target(ctx), ctx->compute_units, name);
  const kiln_dtype pf = pubs[fi];
  bool ok = fp8_check(ctx, fmt, pf, false, true, 1, 1000, 1000, 1, 11) &
            fp8_check(ctx, fmt, pf, false, true, 2, 77, 300, 0, 12) &
            fp8_check(ctx, fmt, pf, false, false, 3, 1, 4097, 0, 13) &
            fp8_check(ctx, fmt, pf, false, true, 2, 4, 777, 1, 16) &
            fp8_check(ctx, fmt, pf, false, false, 1, 16, 4097, 1, 17) &
            fp8_check(ctx, fmt, pf, true, false, 3, 1, 1000, 1, 14) &
            fp8_check(ctx, fmt, pf, true, false, 2, 4, 4097, 1, 15) &
            fp8_check(ctx, fmt, pf, true, true, 2, 16, 333, 1, 18);
  if (!ok) {
    printf("# fp8 checks failed: nothing timed\n");
    kiln_context_destroy(ctx);
    return 1;
  }
  kiln_kernel *kf[2], *k8[2], *kv8, *kp8, *kdec, *kp16;
  for (int c = 0; c < 2; c++) {
    kiln_attn_desc a = desc_of(c), b = desc_of(c);
    b.q_dtype = b.kv_dtype = pf;
    if (kiln_prepare(ctx, &a, NULL, &kf[c]) || kiln_prepare(ctx, &b, NULL, &k8[c])) goto fail;
  }
  kiln_attn_desc dv = desc_of(0), dp = desc_of(0), dp16 = desc_of(0);
  dv.kv_dtype = pf, dp.kv_dtype = pf, dp.layout = KILN_LAYOUT_PAGED, dp16.layout = KILN_LAYOUT_PAGED;
  kiln_attn_desc dd = desc_of(0);
  if (kiln_prepare(ctx, &dv, NULL, &kv8) || kiln_prepare(ctx, &dp, NULL, &kp8) ||
      kiln_prepare(ctx, &dd, NULL, &kdec) || kiln_prepare(ctx, &dp16, NULL, &kp16))
    goto fail;
  printf("\n| prefill B 4, 32/8 heads, D 128 | N | causal | f16 ms | f16 TFLOP/s | %s q,k,v ms | "
         "%s TFLOP/s |\n|---|---|---|---|---|---|---|\n", name, name);
  static const int Np[] = {4096, 16384};
  for (int n = 0; n < (quick ? 1 : 2); n++)
    for (int c = 0; c < 2; c++) {
      double f = 4.0 * 4 * H * (double)Np[n] * Np[n] * D * (c ? 0.5 : 1.0);
      double m16 = fp8_timed(kf[c], false, 2, 2, 4, Np[n], Np[n], quick ? 3 : 7);
      double m8 = fp8_timed(k8[c], false, 1, 1, 4, Np[n], Np[n], quick ? 3 : 7);
      printf("| | %d | %d | %.3f | %.1f | %.3f | %.1f |\n", Np[n], c, m16, f / m16 / 1e9, m8,
             f / m8 / 1e9);
      fflush(stdout);
    }
  printf("\n| decode B | Nk | f16 split-KV ms | TB/s | f16 paged ms | TB/s | %s KV dense ms | "
         "TB/s | %s paged ms | TB/s | %s dense via prefill ms | TB/s |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|\n", name, name, name);
  static const int Bs[] = {1, 16, 64}, Ns[] = {4096, 32768};
  for (int b = 0; b < (quick ? 2 : 3); b++)
    for (int n = 0; n < 2; n++) {
      double bytes16 = 2.0 * Bs[b] * HK * (double)Ns[n] * D * 2, bytes8 = bytes16 / 2;
      double md = fp8_timed(kdec, false, 2, 2, Bs[b], 1, Ns[n], repeats);
      double mp = fp8_timed(kp16, true, 2, 2, Bs[b], 1, Ns[n], repeats);
      double mv = fp8_timed(kv8, false, 2, 1, Bs[b], 1, Ns[n], repeats);
      double m8 = fp8_timed(kp8, true, 2, 1, Bs[b], 1, Ns[n], repeats);
      setenv("KILN_DECODE", "0", 1);  /* the same fp8 call through the prefill kernel */
      double mpf = fp8_timed(kv8, false, 2, 1, Bs[b], 1, Ns[n], quick ? 3 : 7);
      unsetenv("KILN_DECODE");
      printf("| %d | %d | %.4f | %.2f | %.4f | %.2f | %.4f | %.2f | %.4f | %.2f | %.4f | %.2f |\n",
             Bs[b], Ns[n], md, bytes16 / md / 1e9, mp, bytes16 / mp / 1e9, mv, bytes8 / mv / 1e9,
             m8, bytes8 / m8 / 1e9, mpf, bytes8 / mpf / 1e9);
      fflush(stdout);
    }
  kiln_context_destroy(ctx);
  kn_cuda_device_close(dev);
  printf("# failures: %d\n", failures);
  return failures ? 1 : 0;
fail:
  printf("# prepare: %s\n", kiln_last_error());
  kiln_context_destroy(ctx);
  return 1;
}

int main(int argc, char **argv) {
  int repeats = 20, page = 16;
  bool quick = false, sweep = false, tune = false, paged = false;
  const char *fp8 = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true, repeats = 5;
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--sweep")) sweep = true;
    else if (!strcmp(argv[i], "--tune")) tune = true;
    else if (!strcmp(argv[i], "--paged")) paged = true;
    else if (!strcmp(argv[i], "--page-size") && i + 1 < argc) page = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--fp8") && i + 1 < argc) fp8 = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--quick] [--repeats R] [--sweep] [--tune] [--paged "
              "[--page-size P]] [--fp8 FMT]\n", argv[0]);
      return 2;
    }
  }
  if (page < 1 || page > 256) {
    fprintf(stderr, "--page-size %d: pages of 1..256 rows\n", page);
    return 2;
  }
  if (repeats < 1 || repeats > 64) repeats = 20;
  kn_diag e;
  if (!bench_device_open(&dev)) return 0;
  const char *lib = getenv("KILN_CUDA_LIBRARY");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (h) *(void **)&fake_attn = dlsym(h, "kn_fake_cuda_attn");
  if (h) *(void **)&fake_paged = dlsym(h, "kn_fake_cuda_attn_paged");
  if (fp8) return fp8_main(fp8, quick, repeats);
  kiln_context *ctx = context(0);
  printf("# kiln %s on %s (%s, %d SMs)\n", kiln_version(), kiln_context_device_name(ctx),
         kiln_context_target(ctx), ctx->compute_units);
  kiln_kernel *kern, *kc, *kp = NULL, *kpc = NULL;
  kiln_attn_desc d0 = desc_of(0), d1 = desc_of(1), p0 = paged_desc(0), p1 = paged_desc(1);
  if (kiln_prepare(ctx, &d0, NULL, &kern) || kiln_prepare(ctx, &d1, NULL, &kc) ||
      (paged && (kiln_prepare(ctx, &p0, NULL, &kp) || kiln_prepare(ctx, &p1, NULL, &kpc)))) {
    printf("# prepare: %s\n", kiln_last_error());
    return 1;
  }
  /* ragged shapes first */
  static const int rag[][6] = {{2, 32, 8, 1, 1}, {2, 32, 8, 1, 7}, {3, 32, 8, 4, 1000},
                               {1, 32, 8, 16, 4097}, {2, 8, 1, 1, 999}, {2, 8, 8, 2, 64}};
  for (size_t i = 0; i < sizeof rag / sizeof rag[0]; i++)
    check(i % 2 ? kc : kern, rag[i][0], rag[i][1], rag[i][2], rag[i][3], rag[i][4], (int)(i % 2),
          0, 77 + i);
  static const int Bs[] = {1, 16, 64}, Ns[] = {4096, 32768, 131072};
  const int nB = quick ? 2 : 3, nN = quick ? 2 : 3;
  bool row_ok[3][3];
  for (int b = 0; b < nB; b++)
    for (int n = 0; n < nN; n++)
      row_ok[b][n] = row_wanted(Bs[b], Ns[n]) && check(kern, 1, H, HK, 1, Ns[n], 0, plan_splits(ctx, Bs[b], Ns[n], 0),
                           1000 + 10 * b + n);
  if (paged) {
    /* ragged paged shapes, then each row's paged call (batch 1 at its Nk, its pieces) */
    const int pl[][4] = {{0, 1, page, page + 1}, {2 * page, 1000, 7, 4097}};
    check_paged(kp, 4, H, HK, 1, pl[0], page, 0, 0, 91);
    check_paged(kpc, 4, H, HK, 4, pl[1], page, 1, 0, 92);
    check_paged(kp, 2, 8, 1, 16, pl[1], page, 0, 5, 93);
    for (int b = 0; b < nB; b++)
      for (int n = 0; n < nN; n++)
        row_ok[b][n] = row_ok[b][n] && check_paged(kp, 1, H, HK, 1, &Ns[n], page, 0,
                                    plan_splits_of(ctx, Bs[b], Ns[n], 0, page), 2000 + 10 * b + n);
    {  /* the paged split kernel this page size runs (kn_attn_decode_read_for), its tiling */
      kn_attn_desc pdd;
      api_desc_from_public(&p0, &pdd);
      const kn_attn_config ic = kn_attn_decode_read_config(ctx->target_arch, &pdd,
                                                           KN_DECODE_READ_IN_PAGE),
                           pc = kn_attn_decode_read_config(ctx->target_arch, &pdd,
                                                           KN_DECODE_READ_PAGES);
      const kn_decode_read r = kn_attn_decode_read_for(page, ic.block_n, pc.block_n);
      const kn_attn_config c = kn_attn_decode_read_config(ctx->target_arch, &pdd, r);
      const char *pt = getenv("KILN_DECODE_PAGED_TILING");
      printf("# paged kernel for pages of %d: %s at %dx%d, %d warps%s%s\n", page,
             kn_attn_decode_symbol(r), c.block_m, c.block_n, c.warps,
             pt && *pt ? ", overridden by KILN_DECODE_PAGED_TILING=" : "", pt && *pt ? pt : "");
    }
    printf("\n| B | Nk | page | dense pieces | dense ms | dense TB/s | paged pieces | paged ms | "
           "paged TB/s | paged / dense | dense host µs | paged host µs |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int b = 0; b < nB; b++)
      for (int n = 0; n < nN; n++) {
        if (!row_wanted(Bs[b], Ns[n])) continue;
        if (!row_ok[b][n]) {
          printf("| %d | %d | %d | - | FAIL (not timed) | | | | | | | |\n", Bs[b], Ns[n], page);
          continue;
        }
        /* KILN_BENCH_PAGED_FIRST=1 (an experiment): the paged call timed before the dense */
        const bool pf = getenv("KILN_BENCH_PAGED_FIRST") != NULL;
        double pms = pf ? timed_paged(kp, Bs[b], Ns[n], page, repeats) : 0, ph = bench_last_host_us;
        double ms = timed(kern, Bs[b], Ns[n], 0, repeats, false), dh = bench_last_host_us;
        if (!pf) pms = timed_paged(kp, Bs[b], Ns[n], page, repeats), ph = bench_last_host_us;
        printf("| %d | %d | %d | %d | %.4f | %.2f | %d | %.4f | %.2f | %.3f | %.1f | %.1f |\n",
               Bs[b], Ns[n], page, plan_splits(ctx, Bs[b], Ns[n], 0), ms, tbs(Bs[b], Ns[n], ms),
               plan_splits_of(ctx, Bs[b], Ns[n], 0, page), pms, tbs(Bs[b], Ns[n], pms), pms / ms,
               dh, ph);
        fflush(stdout);
      }
  }
  if (!paged)
    printf("\n| B | Nk | pieces | kiln decode ms | kiln TB/s | prefill kernel ms | prefill TB/s |\n"
           "|---|---|---|---|---|---|---|\n");
  for (int b = 0; b < nB && !paged; b++)
    for (int n = 0; n < nN; n++) {
      if (!row_wanted(Bs[b], Ns[n])) continue;
      if (!row_ok[b][n]) {
        printf("| %d | %d | - | FAIL (not timed) | | | |\n", Bs[b], Ns[n]);
        continue;
      }
      double ms = timed(kern, Bs[b], Ns[n], 0, repeats, false);
      double pms = timed(kern, Bs[b], Ns[n], 0, quick ? 3 : 5, true);
      printf("| %d | %d | %d | %.4f | %.2f | %.4f | %.2f |\n", Bs[b], Ns[n],
             plan_splits(ctx, Bs[b], Ns[n], 0), ms, tbs(Bs[b], Ns[n], ms), pms,
             tbs(Bs[b], Ns[n], pms));
      fflush(stdout);
    }
  if (tune) {
    printf("\n| B | Nk | tuned block_n | tuned pieces | ms | TB/s | candidates |\n"
           "|---|---|---|---|---|---|---|\n");
    for (int b = 0; b < nB; b++)
      for (int n = 0; n < nN; n++) {
        if (!row_ok[b][n]) continue;
        size_t kv = (size_t)Bs[b] * HK * Ns[n] * D * 2, qo = (size_t)Bs[b] * H * D * 2;
        kn_cuda_ptr q = dalloc(qo), o = dalloc(qo), l = dalloc((size_t)Bs[b] * H * 4),
                    k = dalloc(kv), v = dalloc(kv);
        kiln_tune_result r = {0};
        if (q && o && l && k && v && !kn_cuda_memset8(dev, q, 0x3c, qo, &e) &&
            !kn_cuda_memset8(dev, k, 0x3b, kv, &e) && !kn_cuda_memset8(dev, v, 0x3a, kv, &e)) {
          kiln_attn_args a = {.q = (void *)(uintptr_t)q, .k = (void *)(uintptr_t)k,
                              .v = (void *)(uintptr_t)v, .o = (void *)(uintptr_t)o,
                              .lse = (float *)(uintptr_t)l, .batch = Bs[b], .heads = H,
                              .kv_heads = HK, .seqlen_q = 1, .seqlen_k = Ns[n]};
          fake_causal(0);
          kiln_prepare_options po = {.tune_repeats = quick ? 3 : 9};
          if (kiln_tune_decode(kern, &a, NULL, &po, &r)) {
            printf("# tune B%d Nk %d: %s\n", Bs[b], Ns[n], kiln_last_error());
            failures++;
          } else {
            const kiln_tune_candidate *c = &r.candidates[r.best];
            printf("| %d | %d | %d | %d | %.4f | %.2f | %d |\n", Bs[b], Ns[n], c->block_n,
                   c->decode_splits, c->median_us / 1e3, tbs(Bs[b], Ns[n], c->median_us / 1e3),
                   r.ncandidates);
          }
          kiln_tune_result_free(&r);
        }
        kn_cuda_ptr bufs[] = {q, o, l, k, v};
        for (int i = 0; i < 5; i++)
          if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
        fflush(stdout);
      }
  }
  kept_free();
  kiln_context_destroy(ctx);
  if (sweep) {
    printf("\n| B | Nk | block_n | pieces | ms | TB/s |\n|---|---|---|---|---|---|\n");
    static const int bns[] = {32, 64, 128}, sps[] = {0, 1, 2, 4, 8, 16, 32, 64, 128};
    for (int j = 0; j < 3; j++) {
      kiln_context *c2 = context(bns[j]);
      kiln_kernel *k2;
      if (kiln_prepare(c2, &d0, NULL, &k2)) {
        printf("# prepare: %s\n", kiln_last_error());
        failures++;
        kiln_context_destroy(c2);
        continue;
      }
      for (int b = 0; b < nB; b++)
        for (int n = 0; n < nN; n++)
          for (size_t s = 0; s < sizeof sps / sizeof sps[0]; s++) {
            int pieces = sps[s] ? sps[s] : plan_splits(c2, Bs[b], Ns[n], bns[j]);
            if (sps[s] && sps[s] == plan_splits(c2, Bs[b], Ns[n], bns[j])) continue;
            if (!check(k2, 1, H, HK, 1, Ns[n], 0, pieces, 5000 + s)) continue;
            double ms = timed(k2, Bs[b], Ns[n], pieces, quick ? 3 : 7, false);
            printf("| %d | %d | %d | %d%s | %.4f | %.2f |\n", Bs[b], Ns[n], bns[j], pieces,
                   sps[s] ? "" : " (heuristic)", ms, tbs(Bs[b], Ns[n], ms));
            fflush(stdout);
          }
      kiln_context_destroy(c2);
    }
    unsetenv("KILN_DECODE_BLOCK_N");
  }
  kept_free();
  kn_cuda_device_close(dev);
  printf("# failures: %d\n", failures);
  return failures ? 1 : 0;
}
