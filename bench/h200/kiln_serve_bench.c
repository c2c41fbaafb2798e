/* kiln_serve_bench.c — the serving call shapes of prefill on an NVIDIA GPU through the public API
 * (docs/serving.md), beside SDPA in the same device run (sdpa_anchor.py --varlen FILE).
 *
 * What a serving engine gets: a kiln context on the GPU ("auto"), kiln_prepare with default
 * options, one kiln_forward per batch.  bf16, head dim 128, 32 query heads on 8 kv heads, causal.
 *
 * (a) correctness first, each on fresh random inputs against kn_attn_reference (float64, CPU)
 *     per sequence, the output starting as NaN bytes:
 *     - varlen: lengths {0, 1, 17, 300, 1000, 2049, 64} packed (an empty sequence, length 1,
 *       lengths that are no multiple of any block), 4 heads on 2 kv heads;
 *     - paged: 3 sequences with cache lengths {700, 1500, 1} and their last min(Nq, len)
 *       queries ... as flash_attn_with_kvcache has them (seqlen_q 500, cache_seqlens each),
 *       page sizes 16 and 256, the pages of the pool in shuffled order, unused table tail
 *       entries pointing at page 0.
 *     A failed check stops the timing of that call shape.
 * (b) varlen prefill of a realistic mix: 24 sequences, lengths log-uniform in [1, 8192]
 *     (seeded; written to --lengths FILE for the anchor), one varlen call, timed with CUDA
 *     events (warm-up, median of the repeats); next to it kiln's dense kernel on the padded
 *     batch (24 x max length), the cost of padding.  TFLOP/s counts the useful work:
 *     sum over sequences of 2 * 2 * H * L^2 * D / 2 (causal).
 * (c) paged prefill vs dense at the same shape: B 4, N 4096 queries and keys, the cache in
 *     pages of 16 and of 256 (shuffled), against the dense kernel; paged / dense time; an extra
 *     row per page size with the paged kernel forced to 128x64 with 8 warps (checked first).
 *
 *   kiln_serve_bench [--quick] [--repeats R] [--lengths FILE] [--check-only]
 * --check-only: (a) alone (a smoke run on the fake CUDA driver of the tests).
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
#include "bench_cuda.h"
#include "cuda_device.h"
#include "kiln.h"
#include "numeric.h"

enum { D = 128 };
#define DT KN_BF16

static kn_cuda_device *dev;
static int failures;

/* the test suite's fake libcuda (KILN_CUDA_LIBRARY, tests/unit/test_cuda.c) computes kiln's
 * kernels by their contracts once told the shape of the next launches: a smoke run of this
 * bench without a GPU.  No-ops on a real driver. */
static void (*fake_attn)(int elem_bytes, int bf16, int head_dim, int causal);
static void (*fake_varlen)(int on), (*fake_paged)(int on);
static void fake_layout(int layout) {
  if (!fake_attn) return;
  fake_attn(2, 1, D, 1);
  fake_varlen(layout == KILN_LAYOUT_VARLEN), fake_paged(layout == KILN_LAYOUT_PAGED);
}

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}
static double normal(uint64_t *s) {
  double u = ((double)(rng(s) >> 11) + 0.5) * 0x1p-53, v = (double)(rng(s) >> 11) * 0x1p-53;
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static kn_cuda_ptr dalloc(size_t n) {
  kn_cuda_ptr p = 0;
  kn_diag e;
  if (kn_cuda_alloc(dev, n ? n : 4, &p, &e)) {
    fprintf(stderr, "cuda: %s\n", e.message);
    failures++;
    return 0;
  }
  return p;
}
static kn_cuda_ptr upload(const void *h, size_t n) {
  kn_cuda_ptr p = dalloc(n);
  kn_diag e;
  if (p && n && kn_cuda_copy_htod(dev, p, h, n, &e)) {
    fprintf(stderr, "cuda: %s\n", e.message);
    failures++;
  }
  return p;
}
#define DP(p) ((void *)(uintptr_t)(p))

/* n random elements of the dtype, and their values as doubles */
static uint16_t *randn(size_t n, double **values, uint64_t *s) {
  uint16_t *x = malloc(n * 2 + 2);
  *values = malloc(n * 8 + 8);
  for (size_t i = 0; i < n; i++)
    kn_store_elem(DT, x + i, normal(s)), (*values)[i] = kn_load_elem(DT, x + i);
  return x;
}

static kiln_attn_desc desc(int layout) {
  return (kiln_attn_desc){.dtype = KILN_BF16, .head_dim = D, .causal = 1, .layout = layout};
}

/* the float64 answer for one sequence: rows nq of q (row stride qs, head stride qh) against
 * nk keys of k/v (gathered into contiguous (HK, nk, D) by the caller), into ref (H, nq, D) */
static void ref_seq(int H, int HK, int nq, int nk, const double *q, const double *k,
                    const double *v, double *ref) {
  kn_attn_desc in;
  kiln_attn_desc pd = desc(0);
  api_desc_from_public(&pd, &in);
  kn_attn_problem p = {.batch = 1, .heads = H, .kv_heads = HK, .seqlen_q = nq, .seqlen_k = nk};
  double *lse = malloc(sizeof(double) * (size_t)H * (nq ? nq : 1));
  kn_attn_reference(&in, &p, q, k, v, ref, lse);
  free(lse);
}

static bool verdict(const char *what, double err) {
  bool pass = err <= kn_attn_tolerance(DT);
  failures += !pass;
  printf("%s  %s: max|dO| %.3g (tol %.0e)\n", pass ? "PASS" : "FAIL", what, err,
         kn_attn_tolerance(DT));
  fflush(stdout);
  return pass;
}

static double maxdiff(const uint16_t *o, const double *ref, size_t n, double err) {
  for (size_t i = 0; i < n; i++) {
    double x = fabs(kn_load_elem(DT, o + i) - ref[i]);
    if (!(x <= err)) err = isnan(x) ? INFINITY : x;
  }
  return err;
}

/* (a) varlen: the packed mix against float64 per sequence */
static bool check_varlen(kiln_kernel *kern) {
  static const int lens[] = {0, 1, 17, 300, 1000, 2049, 64};
  enum { NS = 7, H = 4, HK = 2 };
  int32_t cu[NS + 1] = {0};
  int maxl = 0;
  for (int i = 0; i < NS; i++) cu[i + 1] = cu[i] + lens[i], maxl = lens[i] > maxl ? lens[i] : maxl;
  const int T = cu[NS];
  uint64_t s = 99;
  double *qd, *kd, *vd;
  uint16_t *q = randn((size_t)T * H * D, &qd, &s), *k = randn((size_t)T * HK * D, &kd, &s),
           *v = randn((size_t)T * HK * D, &vd, &s), *o = malloc((size_t)T * H * D * 2);
  kn_cuda_ptr dq = upload(q, (size_t)T * H * D * 2), dk = upload(k, (size_t)T * HK * D * 2),
              dv = upload(v, (size_t)T * HK * D * 2), dout = dalloc((size_t)T * H * D * 2),
              dcu = upload(cu, sizeof cu);
  kn_diag e;
  double err = INFINITY;
  if (dq && dk && dv && dout && dcu && !kn_cuda_memset8(dev, dout, 0xff, (size_t)T * H * D * 2, &e)) {
    kiln_attn_args a = {.q = DP(dq), .k = DP(dk), .v = DP(dv), .o = DP(dout), .batch = NS,
                        .heads = H, .kv_heads = HK, .seqlen_q = maxl, .seqlen_k = maxl,
                        .cu_seqlens_q = DP(dcu), .cu_seqlens_k = DP(dcu), .total_q = T,
                        .total_k = T};
    fake_layout(KILN_LAYOUT_VARLEN);
    if (kiln_forward(kern, &a, NULL)) fprintf(stderr, "kiln: %s\n", kiln_last_error());
    else if (!kn_cuda_device_sync(dev, &e) && !kn_cuda_copy_dtoh(dev, o, dout, (size_t)T * H * D * 2, &e)) {
      err = 0;
      for (int b = 0; b < NS; b++) {
        int L = lens[b];
        /* (L, H, D) packed rows -> (H, L, D) */
        double *sq = malloc(sizeof(double) * ((size_t)H * L * D + 1)),
               *sk = malloc(sizeof(double) * ((size_t)HK * L * D + 1)),
               *sv = malloc(sizeof(double) * ((size_t)HK * L * D + 1)),
               *ref = malloc(sizeof(double) * ((size_t)H * L * D + 1));
        for (int t = 0; t < L; t++)
          for (int h = 0; h < H; h++)
            for (int c = 0; c < D; c++) {
              sq[((size_t)h * L + t) * D + c] = qd[((size_t)(cu[b] + t) * H + h) * D + c];
              if (h < HK) {
                sk[((size_t)h * L + t) * D + c] = kd[((size_t)(cu[b] + t) * HK + h) * D + c];
                sv[((size_t)h * L + t) * D + c] = vd[((size_t)(cu[b] + t) * HK + h) * D + c];
              }
            }
        if (L) ref_seq(H, HK, L, L, sq, sk, sv, ref);
        for (int t = 0; t < L; t++)
          for (int h = 0; h < H; h++)
            err = maxdiff(o + ((size_t)(cu[b] + t) * H + h) * D, ref + ((size_t)h * L + t) * D, D, err);
        free(sq), free(sk), free(sv), free(ref);
      }
    }
  }
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dcu};
  for (int i = 0; i < 5; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  free(q), free(k), free(v), free(o), free(qd), free(kd), free(vd);
  return verdict("varlen lengths 0,1,17,300,1000,2049,64 H4/2 causal", err);
}

/* a shuffled page table for B sequences of max_pages pages each over a pool of B * max_pages
 * pages; the entries of a sequence past its length point at page 0 (unused tail entries) */
static int32_t *page_table(int B, int max_pages, int page, const int32_t *lens, uint64_t *s) {
  int np = B * max_pages;
  int32_t *perm = malloc(sizeof(int32_t) * np), *bt = malloc(sizeof(int32_t) * np);
  for (int i = 0; i < np; i++) perm[i] = i;
  for (int i = np - 1; i > 0; i--) {
    int j = (int)(rng(s) % (uint64_t)(i + 1));
    int32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (int b = 0; b < B; b++)
    for (int p = 0; p < max_pages; p++)
      bt[b * max_pages + p] = p * page < lens[b] ? perm[b * max_pages + p] : 0;
  free(perm);
  return bt;
}

/* (a) paged: 3 sequences of their own cache lengths, seqlen_q 500 */
static bool check_paged(kiln_kernel *kern, int page) {
  enum { B = 3, H = 4, HK = 2, NQ = 500 };
  static const int32_t lens[B] = {700, 1500, 1};
  const int max_pages = (1500 + page - 1) / page, np = B * max_pages;
  uint64_t s = 7 + (uint64_t)page;
  int32_t *bt = page_table(B, max_pages, page, lens, &s);
  const size_t pool = (size_t)np * page * HK * D, nq = (size_t)B * H * NQ * D;
  double *qd, *kd, *vd;
  uint16_t *q = randn(nq, &qd, &s), *k = randn(pool, &kd, &s), *v = randn(pool, &vd, &s),
           *o = malloc(nq * 2);
  kn_cuda_ptr dq = upload(q, nq * 2), dk = upload(k, pool * 2), dv = upload(v, pool * 2),
              dout = dalloc(nq * 2), dbt = upload(bt, sizeof(int32_t) * np),
              dlen = upload(lens, sizeof lens);
  kn_diag e;
  double err = INFINITY;
  if (dq && dk && dv && dout && dbt && dlen && !kn_cuda_memset8(dev, dout, 0xff, nq * 2, &e)) {
    kiln_attn_args a = {.q = DP(dq), .k = DP(dk), .v = DP(dv), .o = DP(dout), .batch = B,
                        .heads = H, .kv_heads = HK, .seqlen_q = NQ,
                        .seqlen_k = max_pages * page, .block_table = DP(dbt),
                        .cache_seqlens = DP(dlen), .page_size = page, .num_pages = np,
                        .max_pages = max_pages};
    fake_layout(KILN_LAYOUT_PAGED);
    if (kiln_forward(kern, &a, NULL)) fprintf(stderr, "kiln: %s\n", kiln_last_error());
    else if (!kn_cuda_device_sync(dev, &e) && !kn_cuda_copy_dtoh(dev, o, dout, nq * 2, &e)) {
      err = 0;
      for (int b = 0; b < B; b++) {
        const int L = lens[b], nqb = NQ;
        double *sk = malloc(sizeof(double) * (size_t)HK * L * D),
               *sv = malloc(sizeof(double) * (size_t)HK * L * D),
               *ref = malloc(sizeof(double) * (size_t)H * nqb * D);
        for (int j = 0; j < L; j++) {
          size_t row = (size_t)bt[b * max_pages + j / page] * page + (size_t)(j % page);
          for (int h = 0; h < HK; h++)
            for (int c = 0; c < D; c++) {
              sk[((size_t)h * L + j) * D + c] = kd[(row * HK + h) * D + c];
              sv[((size_t)h * L + j) * D + c] = vd[(row * HK + h) * D + c];
            }
        }
        /* the queries are the sequence's last NQ positions (bottom-right): with fewer keys
         * than queries the first rows see no key and are 0, as the reference has them */
        ref_seq(H, HK, nqb, L, qd + (size_t)b * H * NQ * D, sk, sv, ref);
        err = maxdiff(o + (size_t)b * H * NQ * D, ref, (size_t)H * NQ * D, err);
        free(sk), free(sv), free(ref);
      }
    }
  }
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dbt, dlen};
  for (int i = 0; i < 6; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  free(q), free(k), free(v), free(o), free(qd), free(kd), free(vd), free(bt);
  char what[96];
  snprintf(what, sizeof what, "paged page %d cache 700,1500,1 Nq 500 H4/2 causal, shuffled", page);
  return verdict(what, err);
}

/* (b), (c): median ms of kiln_forward(kern, a) */
typedef struct call {
  kiln_kernel *kern;
  const kiln_attn_args *a;
} call;
static int forward(void *user) {
  call *c = user;
  return kiln_forward(c->kern, c->a, NULL) != KILN_OK;
}
static double timed(kiln_kernel *kern, const kiln_attn_args *a, int repeats) {
  fake_layout(a->cu_seqlens_q ? KILN_LAYOUT_VARLEN : a->block_table ? KILN_LAYOUT_PAGED : 0);
  call c = {kern, a};
  double ms = bench_median_ms(dev, 3, repeats, forward, &c);
  failures += isnan(ms);
  return ms;
}

static kn_cuda_ptr filled(size_t bytes, unsigned char byte) {
  kn_cuda_ptr p = dalloc(bytes);
  kn_diag e;
  if (p && kn_cuda_memset8(dev, p, byte, bytes, &e)) failures++;
  return p;
}

int main(int argc, char **argv) {
  int repeats = 15;
  bool quick = false, check_only = false;
  const char *lengths_file = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true, repeats = 5;
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lengths") && i + 1 < argc) lengths_file = argv[++i];
    else if (!strcmp(argv[i], "--check-only")) check_only = true;
    else {
      fprintf(stderr, "usage: %s [--quick] [--repeats R] [--lengths FILE] [--check-only]\n",
              argv[0]);
      return 2;
    }
  }
  if (repeats < 1 || repeats > 64) repeats = 15;
  if (!bench_device_open(&dev)) return 0;
  const char *lib = getenv("KILN_CUDA_LIBRARY");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (h) {
    *(void **)&fake_attn = dlsym(h, "kn_fake_cuda_attn");
    *(void **)&fake_varlen = dlsym(h, "kn_fake_cuda_attn_varlen");
    *(void **)&fake_paged = dlsym(h, "kn_fake_cuda_attn_paged");
    if (!fake_varlen || !fake_paged) fake_attn = NULL;
  }
  kiln_context *ctx = bench_context();
  kiln_kernel *kd, *kv, *kp;
  kiln_attn_desc d0 = desc(KILN_LAYOUT_DENSE), d1 = desc(KILN_LAYOUT_VARLEN),
                 d2 = desc(KILN_LAYOUT_PAGED);
  if (kiln_prepare(ctx, &d0, NULL, &kd) || kiln_prepare(ctx, &d1, NULL, &kv) ||
      kiln_prepare(ctx, &d2, NULL, &kp)) {
    printf("# prepare: %s\n", kiln_last_error());
    return 1;
  }
  kiln_kernel_info info;
  const kiln_kernel *ks[] = {kd, kv, kp};
  for (int i = 0; i < 3; i++)
    if (!kiln_kernel_get_info(ks[i], &info))
      printf("# %s kernel: %dx%d, %d warps%s\n", i == 0 ? "dense" : i == 1 ? "varlen" : "paged",
             info.block_m, info.block_n, info.warps, info.wgmma ? ", wgmma" : "");
  bool varlen_ok = check_varlen(kv);
  bool paged_ok = check_paged(kp, 16) & check_paged(kp, 256);
  /* an extra column: the paged kernel at the dense kernels' 128x64 with 8 warps (not the default) */
  kiln_prepare_options forced = {.block_m = 128, .block_n = 64, .warps = 8};
  kiln_kernel *kp2 = NULL;
  if (kiln_prepare(ctx, &d2, &forced, &kp2)) printf("# forced paged tiling: %s\n", kiln_last_error());
  bool forced_ok = kp2 && check_paged(kp2, 16);
  if (check_only) varlen_ok = paged_ok = false;

  /* (b) the mix */
  enum { H = 32, HK = 8 };
  const int NS = quick ? 8 : 24;
  int32_t cu[25] = {0};
  int lens[24], maxl = 0;
  uint64_t s = 2026;
  double useful = 0;
  for (int i = 0; i < NS; i++) {
    double u = (double)(rng(&s) >> 11) * 0x1p-53;
    lens[i] = (int)floor(exp(u * log(8192.0))); /* log-uniform in [1, 8192) */
    if (lens[i] < 1) lens[i] = 1;
    cu[i + 1] = cu[i] + lens[i];
    maxl = lens[i] > maxl ? lens[i] : maxl;
    useful += 4.0 * H * (double)lens[i] * lens[i] * D * 0.5;
  }
  FILE *lf = lengths_file ? fopen(lengths_file, "w") : NULL;
  printf("# varlen mix: %d sequences, %d tokens, longest %d; lengths", NS, cu[NS], maxl);
  for (int i = 0; i < NS; i++) {
    printf("%s%d", i ? "," : " ", lens[i]);
    if (lf) fprintf(lf, "%s%d", i ? "," : "", lens[i]);
  }
  printf("\n");
  if (lf) fprintf(lf, "\n"), fclose(lf);
  if (varlen_ok) {
    const int T = cu[NS];
    kn_cuda_ptr q = filled((size_t)T * H * D * 2, 0x3c), k = filled((size_t)T * HK * D * 2, 0x3b),
                v = filled((size_t)T * HK * D * 2, 0x3a), o = dalloc((size_t)T * H * D * 2),
                dcu = upload(cu, sizeof(int32_t) * (NS + 1));
    kiln_attn_args a = {.q = DP(q), .k = DP(k), .v = DP(v), .o = DP(o), .batch = NS, .heads = H,
                        .kv_heads = HK, .seqlen_q = maxl, .seqlen_k = maxl,
                        .cu_seqlens_q = DP(dcu), .cu_seqlens_k = DP(dcu), .total_q = T,
                        .total_k = T};
    double ms = q && k && v && o && dcu ? timed(kv, &a, repeats) : NAN;
    kn_cuda_ptr bufs[] = {q, k, v, o, dcu};
    for (int i = 0; i < 5; i++)
      if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
    /* the padded batch through the dense kernel */
    size_t nq = (size_t)NS * H * maxl * D * 2, nk = (size_t)NS * HK * maxl * D * 2;
    q = filled(nq, 0x3c), k = filled(nk, 0x3b), v = filled(nk, 0x3a), o = dalloc(nq);
    kiln_attn_args p = {.q = DP(q), .k = DP(k), .v = DP(v), .o = DP(o), .batch = NS, .heads = H,
                        .kv_heads = HK, .seqlen_q = maxl, .seqlen_k = maxl};
    double pms = q && k && v && o ? timed(kd, &p, quick ? 3 : 7) : NAN;
    kn_cuda_ptr bufs2[] = {q, k, v, o};
    for (int i = 0; i < 4; i++)
      if (bufs2[i]) kn_cuda_free(dev, bufs2[i], NULL);
    printf("\n| call | ms | useful TFLOP/s |\n|---|---|---|\n");
    printf("| kiln varlen (one call, %d sequences) | %.3f | %.0f |\n", NS, ms,
           useful / (ms * 1e-3) / 1e12);
    printf("| kiln dense on the padded batch (%d x %d) | %.3f | %.0f |\n", NS, maxl, pms,
           useful / (pms * 1e-3) / 1e12);
    fflush(stdout);
  }

  /* (c) paged vs dense */
  if (paged_ok) {
    const int B = 4, N = quick ? 2048 : 4096;
    size_t nq = (size_t)B * H * N * D * 2, nk = (size_t)B * HK * N * D * 2;
    kn_cuda_ptr q = filled(nq, 0x3c), k = filled(nk, 0x3b), v = filled(nk, 0x3a), o = dalloc(nq);
    kiln_attn_args a = {.q = DP(q), .k = DP(k), .v = DP(v), .o = DP(o), .batch = B, .heads = H,
                        .kv_heads = HK, .seqlen_q = N, .seqlen_k = N};
    double dms = timed(kd, &a, repeats);
    double flops = 4.0 * B * H * (double)N * N * D * 0.5;
    printf("\n| B | N | layout | ms | TFLOP/s | / dense |\n|---|---|---|---|---|---|\n");
    printf("| %d | %d | dense | %.3f | %.0f | 1 |\n", B, N, dms, flops / (dms * 1e-3) / 1e12);
    static const int pages[] = {16, 256};
    for (int i = 0; i < 2; i++) {
      const int page = pages[i], max_pages = N / page, np = B * max_pages;
      int32_t lens[4] = {N, N, N, N};
      int32_t *bt = page_table(B, max_pages, page, lens, &s);
      kn_cuda_ptr dbt = upload(bt, sizeof(int32_t) * np), dl = upload(lens, sizeof lens);
      /* the same pool bytes as the dense K and V: (np, page, HK, D) */
      kiln_attn_args pa = a;
      pa.block_table = DP(dbt), pa.cache_seqlens = DP(dl), pa.page_size = page;
      pa.num_pages = np, pa.max_pages = max_pages, pa.seqlen_k = max_pages * page;
      double pms = dbt && dl ? timed(kp, &pa, repeats) : NAN;
      printf("| %d | %d | paged %d (shuffled) | %.3f | %.0f | %.3f |\n", B, N, page, pms,
             flops / (pms * 1e-3) / 1e12, pms / dms);
      if (forced_ok) {
        double fms = dbt && dl ? timed(kp2, &pa, repeats) : NAN;
        printf("| %d | %d | paged %d, 128x64 8 warps (forced) | %.3f | %.0f | %.3f |\n", B, N,
               page, fms, flops / (fms * 1e-3) / 1e12, fms / dms);
      }
      fflush(stdout);
      if (dbt) kn_cuda_free(dev, dbt, NULL);
      if (dl) kn_cuda_free(dev, dl, NULL);
      free(bt);
    }
    kn_cuda_ptr bufs[] = {q, k, v, o};
    for (int i = 0; i < 4; i++)
      if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  }
  kiln_context_destroy(ctx);
  kn_cuda_device_close(dev);
  printf("# failures: %d\n", failures);
  return failures ? 1 : 0;
}
