/* kiln_bwd_bench.c — kiln's attention backward on an NVIDIA GPU through the public API, next to
 * torch SDPA's flash and cuDNN backward measured in the same device call
 * (bench/h200/sdpa_bwd_anchor.py).
 *
 * What a user gets: a kiln context on the GPU, kiln_prepare (the forward, for O and lse) and
 * kiln_prepare_backward with the default options, kiln_backward on device buffers.
 * (a) correctness first: for each (dtype, D, causal) of the table and each tiling to be timed, a
 *     ragged GQA problem (B 1, H 4 on 2 kv heads, Nq 301, Nk 517, and Nq 517, Nk 301) with
 *     random q, k, v, dO; O and lse from kiln_forward; dQ, dK, dV (filled with NaN bytes first)
 *     against kn_attn_bwd_reference (float64, CPU) within kn_attn_bwd_tolerance times the
 *     largest gradient.  One PASS/FAIL line each; a tiling that fails at a (dtype, D, causal)
 *     is not timed there (the others are), and the exit status says so.
 * (b) throughput: B 4, H 32, D 64/128, N 1k/4k/16k, causal off/on, f16 (and bf16 unless
 *     --quick); CUDA events around kiln_backward (its three kernels), warm-up, then the median
 *     of the repeats.  TFLOP/s counts 2.5x the forward's 4*B*H*N*N*D (halved for causal), the
 *     convention of FlashAttention's benchmarks and of sdpa_bwd_anchor.py.  A markdown table.
 *
 *   kiln_bwd_bench [--quick] [--repeats R] [--tilings] [--wgmma] [--atomic] [--dropout P]
 *                  [--only D,CAUSAL,N]
 * --only times one row (head dim, causal 0/1, N) and checks only its (D, causal) kernels: for a
 * profiler (ncu) that should see few launches.
 * --tilings also times forced tilings (64x64 w4, 32x64 w4, 16x64 w4, 32x32 w2; block_m is the
 * step of each program's loop, block_n the rows it owns), each checked first.  --wgmma also
 * times sm_90a's wgmma kernels (kiln_prepare_options.wgmma: the backward's wgmma tiling, and
 * with --tilings 64x64 w4, 32x64 w4, 32x128 w8, 64x128 w8 as well), each checked first; their
 * lines say "wgmma".  --atomic also times the backward with atomic dQ (KILN_BWD_DQ_ATOMIC: the
 * dK/dV kernel adds dQ into an f32 workspace; its default tiling and others of block_n = the
 * head dim), each checked first; their lines say "atomic-dq".  --dropout P runs every case with attention dropout P (docs/backward.md:
 * the forward and the backward regenerate one Philox mask; the reference applies the same
 * one).  Exit status: 0 when every correctness case passed and every run launched, 1
 * otherwise.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_bwd.h"
#include "bench_cuda.h"
#include "cuda_device.h"
#include "kiln.h"
#include "numeric.h"

static kn_cuda_device *dev;
static int failures;
/* --dropout: the probability and the generator's arguments of every case */
static float drop_p;
static const uint64_t drop_seed = 0x5eed5eed12345678ull, drop_offset = 77;

static kn_cuda_ptr upload(const void *h, size_t n) {
  kn_cuda_ptr p = 0;
  kn_diag e;
  if (kn_cuda_alloc(dev, n ? n : 1, &p, &e) || (h && kn_cuda_copy_htod(dev, p, h, n, &e))) {
    printf("# device memory: %s\n", e.message);
    return 0;
  }
  return p;
}

static uint64_t rng = 0x6b696c6eull;
static double normal(void) {
  uint64_t z1 = (rng += 0x9e3779b97f4a7c15ull), z2 = (rng += 0x9e3779b97f4a7c15ull);
  z1 = (z1 ^ (z1 >> 31)) * 0xbf58476d1ce4e5b9ull, z2 = (z2 ^ (z2 >> 31)) * 0x94d049bb133111ebull;
  double u = (((z1 ^ (z1 >> 29)) >> 11) + 0.5) * 0x1p-53, v = (((z2 ^ (z2 >> 29)) >> 11) + 0.5) * 0x1p-53;
  return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* n random N(0,1) values rounded to dt: the host bytes and their doubles */
static void *rand_buf(kn_scalar dt, size_t n, double *twin) {
  size_t es = kn_scalar_size(dt);
  char *b = malloc(n * es + 1);
  for (size_t i = 0; i < n; i++) {
    kn_store_elem(dt, b + i * es, normal());
    twin[i] = kn_load_elem(dt, b + i * es);
  }
  return b;
}

typedef struct shape {
  int B, H, HK, Nq, Nk;
} shape;

/* device buffers of one problem: q k v o dout dq dk dv lse delta dq_accum */
enum { NBUF = 11 };
typedef struct dbufs {
  kn_cuda_ptr p[NBUF];
  size_t bytes[NBUF];
} dbufs;

static int dbufs_make(dbufs *d, kn_scalar dt, const shape *s, int D, void *const host[5]) {
  size_t es = kn_scalar_size(dt), nq = (size_t)s->B * s->H * s->Nq * D,
         nk = (size_t)s->B * s->HK * s->Nk * D, nl = (size_t)s->B * s->H * s->Nq;
  const size_t bytes[NBUF] = {nq * es, nk * es, nk * es, nq * es, nq * es, nq * es,
                              nk * es, nk * es, nl * 4,  nl * 4,  nq * 4};
  memset(d, 0, sizeof *d);
  for (int i = 0; i < NBUF; i++) {
    d->bytes[i] = bytes[i];
    if (!(d->p[i] = upload(i < 5 && i != 3 && host ? host[i] : NULL, bytes[i]))) return -1;
  }
  return 0;
}

static void dbufs_free(dbufs *d) {
  for (int i = 0; i < NBUF; i++)
    if (d->p[i]) kn_cuda_free(dev, d->p[i], NULL);
}

#define DP(i) ((void *)(uintptr_t)b->p[i])
static kiln_backward_args args_of(const dbufs *b, const shape *s) {
  kiln_backward_args a = {.fwd = {.q = DP(0), .k = DP(1), .v = DP(2), .o = DP(3), .lse = DP(8),
                                  .batch = s->B, .heads = s->H, .kv_heads = s->HK,
                                  .seqlen_q = s->Nq, .seqlen_k = s->Nk},
                          .dout = DP(4), .dq = DP(5), .dk = DP(6), .dv = DP(7), .delta = DP(9),
                          .dq_accum = DP(10), .dq_accum_numel = (int64_t)(b->bytes[10] / 4)};
  if (drop_p != 0) a.fwd.dropout_seed = drop_seed, a.fwd.dropout_offset = drop_offset;
  return a;
}
#undef DP

static const char *dt_name(kiln_dtype t) { return t == KILN_BF16 ? "bf16" : "f16"; }

/* (a) one ragged problem against float64; true when it passes */
static bool check(kiln_context *ctx, kiln_dtype pdt, int D, int causal, const shape *s,
                  const kiln_prepare_options *po) {
  const kn_scalar dt = pdt == KILN_BF16 ? KN_BF16 : KN_F16;
  const size_t es = 2, nq = (size_t)s->B * s->H * s->Nq * D, nk = (size_t)s->B * s->HK * s->Nk * D;
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8), *dod = malloc(nq * 8);
  double *ref[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)};
  void *host[5] = {rand_buf(dt, nq, qd), rand_buf(dt, nk, kd), rand_buf(dt, nk, vd), NULL,
                   rand_buf(dt, nq, dod)};
  void *got[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)};
  kiln_attn_desc d = {.dtype = pdt, .head_dim = D, .causal = causal, .has_lse = 1,
                      .dropout_p = drop_p};
  kiln_kernel *fwd, *bwd;
  dbufs b;
  kn_diag e;
  bool ok = false;
  char what[128], tiling[32] = "default tiling";
  const char *adq = po && po->backward_dq == KILN_BWD_DQ_ATOMIC ? " atomic-dq" : "";
  if (po && po->block_m)
    snprintf(tiling, sizeof tiling, "%dx%d w%d%s%s", po->block_m, po->block_n, po->warps,
             po->wgmma ? " wgmma" : "", adq);
  else if (po && (po->wgmma || adq[0]))
    snprintf(tiling, sizeof tiling, "%s%s", po->wgmma ? "wgmma tiling" : "default", adq);
  snprintf(what, sizeof what, "%s D%d causal=%d B%d H%d HK%d N(%d,%d) %s%s", dt_name(pdt), D,
           causal, s->B, s->H, s->HK, s->Nq, s->Nk, tiling, drop_p != 0 ? " dropout" : "");
  if (kiln_prepare(ctx, &d, NULL, &fwd) || kiln_prepare_backward(ctx, &d, po, &bwd)) {
    printf("FAIL %s: prepare: %s\n", what, kiln_last_error());
    goto out;
  }
  if (dbufs_make(&b, dt, s, D, host)) goto out;
  kiln_backward_args a = args_of(&b, s);
  for (int i = 5; i <= 10; i++)  /* the outputs, and the workspaces, NaN */
    if (i != 8) kn_cuda_memset8(dev, b.p[i], 0xff, b.bytes[i], &e);
  if (kiln_forward(fwd, &a.fwd, NULL) || kiln_backward(bwd, &a, NULL)) {
    printf("FAIL %s: %s\n", what, kiln_last_error());
    dbufs_free(&b);
    goto out;
  }
  kn_cuda_device_sync(dev, &e);
  for (int i = 0; i < 3; i++) kn_cuda_copy_dtoh(dev, got[i], b.p[5 + i], b.bytes[5 + i], &e);
  dbufs_free(&b);
  kn_attn_desc kd_ = {.dtype = dt, .head_dim = D, .causal = causal, .dropout = drop_p};
  kn_attn_problem p = {.batch = s->B, .heads = s->H, .kv_heads = s->HK, .seqlen_q = s->Nq,
                       .seqlen_k = s->Nk, .dropout_seed = drop_seed, .dropout_offset = drop_offset};
  if (kn_attn_bwd_reference(&kd_, NULL, &p, NULL, qd, kd, vd, dod, false, ref[0], ref[1], ref[2], &e)) {
    printf("FAIL %s: reference: %s\n", what, e.message);
    goto out;
  }
  ok = true;
  size_t n[3] = {nq, nk, nk};
  double worst[3];
  for (int t = 0; t < 3; t++) {
    double err = 0, big = 1;
    for (size_t i = 0; i < n[t]; i++) {
      double g = kn_load_elem(dt, (char *)got[t] + i * es), x = fabs(g - ref[t][i]);
      if (!(x <= err)) err = x;
      if (fabs(ref[t][i]) > big) big = fabs(ref[t][i]);
    }
    worst[t] = err / big;
    ok &= err <= kn_attn_bwd_tolerance(dt) * big;
  }
  printf("%s %s: rel err dq %.2e dk %.2e dv %.2e (tol %.0e)\n", ok ? "PASS" : "FAIL", what,
         worst[0], worst[1], worst[2], kn_attn_bwd_tolerance(dt));
out:
  if (!ok) failures++;
  for (int i = 0; i < 5; i++) free(host[i]);
  for (int i = 0; i < 3; i++) free(got[i]), free(ref[i]);
  free(qd), free(kd), free(vd), free(dod);
  return ok;
}

struct call {
  kiln_kernel *bwd;
  const kiln_backward_args *a;
};
static int backward(void *user) {
  struct call *c = user;
  return kiln_backward(c->bwd, c->a, NULL) != KILN_OK;
}

/* (b) the median ms of kiln_backward at one shape, or NAN */
static double timed(kiln_context *ctx, kiln_dtype pdt, int D, int causal, const shape *s,
                    int repeats, const kiln_prepare_options *po, kiln_kernel_info *info) {
  kiln_attn_desc d = {.dtype = pdt, .head_dim = D, .causal = causal, .has_lse = 1,
                      .dropout_p = drop_p};
  kiln_kernel *fwd, *bwd;
  dbufs b;
  kn_diag e;
  double med = NAN;
  if (kiln_prepare(ctx, &d, NULL, &fwd) || kiln_prepare_backward(ctx, &d, po, &bwd) ||
      kiln_kernel_get_info(bwd, info)) {
    printf("# prepare: %s\n", kiln_last_error());
    failures++;
    return NAN;
  }
  if (dbufs_make(&b, pdt == KILN_BF16 ? KN_BF16 : KN_F16, s, D, NULL)) {
    failures++;
    return NAN;
  }
  /* inputs: small constants (no NaN); O and lse from the forward */
  for (int i = 0; i < 5; i++) kn_cuda_memset8(dev, b.p[i], i == 3 ? 0 : 0x2c, b.bytes[i], &e);
  kiln_backward_args a = args_of(&b, s);
  if (kiln_forward(fwd, &a.fwd, NULL)) {
    printf("# forward: %s\n", kiln_last_error());
    failures++;
    goto out;
  }
  struct call c = {bwd, &a};
  med = bench_median_ms(dev, 2, repeats, backward, &c);
  failures += isnan(med);
out:
  dbufs_free(&b);
  return med;
}

int main(int argc, char **argv) {
  int repeats = 10;
  bool quick = false, tilings = false, wgmma = false, atomic = false;
  int only_d = 0, only_causal = -1, only_n = 0;  /* --only D,CAUSAL,N: one row (profiling) */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true, repeats = 3;
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tilings")) tilings = true;
    else if (!strcmp(argv[i], "--wgmma")) wgmma = true;
    else if (!strcmp(argv[i], "--atomic")) atomic = true;
    else if (!strcmp(argv[i], "--dropout") && i + 1 < argc) drop_p = (float)atof(argv[++i]);
    else if (!strcmp(argv[i], "--only") && i + 1 < argc &&
             sscanf(argv[i + 1], "%d,%d,%d", &only_d, &only_causal, &only_n) == 3)
      i++;
    else {
      fprintf(stderr, "usage: %s [--quick] [--repeats R] [--tilings] [--wgmma] [--atomic] "
              "[--dropout P] [--only D,CAUSAL,N]\n",
              argv[0]);
      return 2;
    }
  }
  if (repeats < 1 || repeats > 64) repeats = 10;
  if (!bench_device_open(&dev)) return 0;
  kiln_context *ctx = bench_context();
  /* the tilings timed beside the default (index 0, NULL options) */
  static const kiln_prepare_options sync_t[] = {{.block_m = 64, .block_n = 64, .warps = 4},
                                                {.block_m = 32, .block_n = 64, .warps = 4},
                                                {.block_m = 16, .block_n = 64, .warps = 4},
                                                {.block_m = 32, .block_n = 32, .warps = 2}};
  static const kiln_prepare_options wg_t[] = {{.wgmma = 1},
                                              {.block_m = 64, .block_n = 64, .warps = 4, .wgmma = 1},
                                              {.block_m = 32, .block_n = 64, .warps = 4, .wgmma = 1},
                                              {.block_m = 32, .block_n = 128, .warps = 8, .wgmma = 1},
                                              {.block_m = 64, .block_n = 128, .warps = 8, .wgmma = 1}};
  /* atomic dQ (KILN_BWD_DQ_ATOMIC): its default tiling and others of block_n = the head dim
   * (D 64: 64x64 w4, 32x64 w4; D 128: 32x128 w8, 16x128 w8, 64x128 w8) */
  static const kiln_prepare_options at_t[2][4] = {
      {{.backward_dq = KILN_BWD_DQ_ATOMIC},
       {.block_m = 32, .block_n = 64, .warps = 4, .wgmma = 1, .backward_dq = KILN_BWD_DQ_ATOMIC}},
      {{.backward_dq = KILN_BWD_DQ_ATOMIC},
       {.block_m = 16, .block_n = 128, .warps = 8, .wgmma = 1, .backward_dq = KILN_BWD_DQ_ATOMIC},
       {.block_m = 64, .block_n = 128, .warps = 8, .wgmma = 1, .backward_dq = KILN_BWD_DQ_ATOMIC}}};
  const kiln_prepare_options *opt[2][16] = {{NULL}};
  int nopt[2] = {1, 1};
  for (int hd = 0; hd < 2; hd++) {
    for (int i = 0; tilings && i < (int)(sizeof sync_t / sizeof sync_t[0]); i++)
      opt[hd][nopt[hd]++] = &sync_t[i];
    for (int i = 0; wgmma && i < (tilings ? (int)(sizeof wg_t / sizeof wg_t[0]) : 1); i++)
      opt[hd][nopt[hd]++] = &wg_t[i];
    for (int i = 0; atomic && i < 2 + hd; i++) opt[hd][nopt[hd]++] = &at_t[hd][i];
  }
  const kiln_dtype dts[] = {KILN_F16, KILN_BF16};
  const int Ds[] = {64, 128};
  const shape ragged[] = {{1, 4, 2, 301, 517}, {1, 4, 2, 517, 301}};
  bool passed[2][2][2][16];
  for (int di = 0; di < (quick ? 1 : 2); di++)
    for (int hd = 0; hd < 2; hd++)
      for (int causal = 0; causal <= 1; causal++)
        for (int f = 0; f < nopt[hd]; f++) {
          passed[di][hd][causal][f] = true;
          if ((only_d && only_d != Ds[hd]) || (only_causal >= 0 && only_causal != causal)) continue;
          for (int r = 0; r < 2; r++)
            passed[di][hd][causal][f] &= check(ctx, dts[di], Ds[hd], causal, &ragged[r], opt[hd][f]);
        }
  if (failures) printf("# %d correctness failures: those tilings are not timed\n", failures);
  printf("\n| dtype | D | causal | N | tiling | ms | TFLOP/s (2.5x fwd) |\n"
         "|---|---|---|---|---|---|---|\n");
  const int Ns[] = {1024, 4096, 16384};
  for (int di = 0; di < (quick ? 1 : 2); di++)
    for (int hd = 0; hd < 2; hd++)
      for (int causal = 0; causal <= 1; causal++)
        for (int ni = 0; ni < (quick && !only_n ? 2 : 3); ni++)
          for (int f = 0; f < nopt[hd]; f++) {
            if (!passed[di][hd][causal][f]) continue;
            if ((only_d && only_d != Ds[hd]) || (only_causal >= 0 && only_causal != causal) ||
                (only_n && only_n != Ns[ni]))
              continue;
            shape s = {4, 32, 32, Ns[ni], Ns[ni]};
            kiln_kernel_info info = {0};
            double ms = timed(ctx, dts[di], Ds[hd], causal, &s, repeats, opt[hd][f], &info);
            double flops = 2.5 * 4.0 * 4 * 32 * (double)Ns[ni] * Ns[ni] * Ds[hd] * (causal ? 0.5 : 1);
            printf("| %s | %d | %d | %d | %dx%d w%d%s%s%s | %.3f | %.1f |\n", dt_name(dts[di]),
                   Ds[hd], causal, Ns[ni], info.block_m, info.block_n, info.warps,
                   info.wgmma ? " wgmma" : "", info.atomic_dq ? " atomic-dq" : "",
                   f == 0 ? " (default)" : "", ms,
                   flops / (ms * 1e-3) / 1e12);
            fflush(stdout);
          }
  kiln_context_destroy(ctx);
  kn_cuda_device_close(dev);
  return failures ? 1 : 0;
}
