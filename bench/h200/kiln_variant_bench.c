/* kiln_variant_bench.c — kiln's attention variants on an NVIDIA GPU through the public API, next
 * to the FlexAttention / SDPA anchor of the same device call (bench/h200/flex_anchor.py).
 *
 * What a user gets: a kiln context on the GPU, kiln_prepare with the default options (the
 * template's default tiling for the variant, or a tuning record if one exists), kiln_forward on
 * device buffers.  Variants (docs/variants.md), the anchor's definitions:
 *   causal          the plain causal kernel (the row the others are compared with)
 *   window          causal sliding window, window_left = 1024, window_right = 0
 *   softcap         causal, softcap 30
 *   alibi           causal, ALiBi slopes 2^(-8 (h + 1) / H)
 *   dropout         causal, attention dropout 0.17 (Philox 4x32-10, docs/backward.md; no
 *                   FlexAttention row: compare it with causal's)
 * (a) correctness first: each variant on a ragged GQA problem (B 2, H 4 on 2 kv heads, Nq 301,
 *     Nk 517, D 128, f16) against kn_attn_reference_v (float64, CPU) within kn_attn_tolerance;
 *     the output is filled with NaN bytes first.  One PASS/FAIL line each.
 * (b) throughput: B 4, H 32, D 128, f16, N 4096 and 16384; CUDA events around kiln_forward,
 *     warm-up then the median of the repeats.  TFLOP/s charges the flops of the visited (q, k)
 *     pairs, 4*B*H*D per pair (causal: N(N+1)/2 pairs; window: the pairs inside it), as
 *     flex_anchor.py does, so the two tables compare times.  The window's time at N 16k over N 4k
 *     should be ~4 (linear in N), where a kernel that skipped nothing would show ~16.
 *
 * (c) --tilings: each variant at N 4096 with forced tilings (kiln_prepare_options), an extra
 *     table for choosing the defaults.
 *
 *   kiln_variant_bench [--quick] [--repeats R] [--tilings] [--wgmma]
 * Exit status: 0 when every correctness case passed and every run launched, 1 otherwise.
 */
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

typedef struct variant {
  const char *name;
  int window, softcap, alibi;
  float dropout;
} variant;

static const variant variants[] = {
    {"causal", 0, 0, 0, 0}, {"window", 1, 0, 0, 0}, {"softcap", 0, 1, 0, 0},
    {"alibi", 0, 0, 1, 0},  {"dropout", 0, 0, 0, 0.17f}};
static const uint64_t DROP_SEED = 0x5eed5eed12345678ull, DROP_OFFSET = 77;
enum { NVAR = sizeof variants / sizeof variants[0], WINDOW = 1024 };

static kn_cuda_device *dev;
static int failures;

static kiln_attn_desc desc_of(const variant *v) {
  return (kiln_attn_desc){.dtype = KILN_F16, .head_dim = 128, .causal = KILN_CAUSAL_BOTTOM_RIGHT,
                          .has_lse = 0, .window = v->window, .softcap = v->softcap,
                          .alibi = v->alibi, .dropout_p = v->dropout};
}

/* a device copy of n bytes of host memory; 0 on failure (counted) */
static kn_cuda_ptr upload(const void *h, size_t n) {
  kn_cuda_ptr p = 0;
  kn_diag e;
  if (kn_cuda_alloc(dev, n, &p, &e) || (h && kn_cuda_copy_htod(dev, p, h, n, &e))) {
    fprintf(stderr, "cuda: %s", e.rendered);
    failures++;
    return 0;
  }
  return p;
}

/* (a) one variant on the ragged problem against the float64 reference */
/* (a) one variant against float64 at its default tiling (po NULL) or a forced one; false on
 * FAIL */
static bool check(kiln_context *ctx, const variant *v, const kiln_prepare_options *po) {
  const int B = 2, H = 4, HK = 2, Nq = 301, Nk = 517, D = 128;
  size_t nq = (size_t)B * H * Nq * D, nk = (size_t)B * HK * Nk * D;
  uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *vv = malloc(nk * 2), *o = malloc(nq * 2);
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8), *od = malloc(nq * 8);
  float slopes[4];
  uint64_t s = 0x1234567ull + (uint64_t)(v - variants);
  for (size_t i = 0; i < nq; i++) kn_store_elem(KN_F16, q + i, bench_normal(&s)), qd[i] = kn_load_elem(KN_F16, q + i);
  for (size_t i = 0; i < nk; i++) {
    kn_store_elem(KN_F16, k + i, bench_normal(&s)), kd[i] = kn_load_elem(KN_F16, k + i);
    kn_store_elem(KN_F16, vv + i, bench_normal(&s)), vd[i] = kn_load_elem(KN_F16, vv + i);
  }
  for (int h = 0; h < H; h++) slopes[h] = (float)exp2(-8.0 * (h + 1) / H);
  kiln_attn_desc d = desc_of(v);
  kiln_kernel *kern;
  kiln_status st = kiln_prepare(ctx, &d, po, &kern);
  kn_cuda_ptr dq = upload(q, nq * 2), dk = upload(k, nk * 2), dv = upload(vv, nk * 2),
              dout = upload(NULL, nq * 2), dsl = upload(slopes, sizeof slopes);
  kn_diag e;
  double err = INFINITY;
  if (!st && dq && dk && dv && dout && dsl && !kn_cuda_memset8(dev, dout, 0xff, nq * 2, &e)) {
    kiln_attn_args a = {.q = (void *)(uintptr_t)dq, .k = (void *)(uintptr_t)dk,
                        .v = (void *)(uintptr_t)dv, .o = (void *)(uintptr_t)dout, .batch = B,
                        .heads = H, .kv_heads = HK, .seqlen_q = Nq, .seqlen_k = Nk};
    if (v->window) a.window_left = 64, a.window_right = 0; /* short enough to skip blocks here */
    if (v->softcap) a.softcap = 30;
    if (v->alibi) a.alibi_slopes = (const float *)(uintptr_t)dsl;
    if (v->dropout != 0) a.dropout_seed = DROP_SEED, a.dropout_offset = DROP_OFFSET;
    st = kiln_forward(kern, &a, NULL);
    if (!st && !kn_cuda_device_sync(dev, &e) && !kn_cuda_copy_dtoh(dev, o, dout, nq * 2, &e)) {
      kn_attn_desc in;
      api_desc_from_public(&d, &in);
      kn_attn_vargs va = {.window_left = 64, .window_right = 0, .softcap = 30,
                          .alibi_slopes = slopes};
      kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = Nq,
                           .seqlen_k = Nk, .dropout_seed = DROP_SEED,
                           .dropout_offset = DROP_OFFSET};
      kn_diag rd;
      if (kn_attn_reference_v(&in, NULL, &p, &va, qd, kd, vd, od, NULL, &rd) == 0) {
        err = 0;
        for (size_t i = 0; i < nq; i++) {
          double x = fabs(kn_load_elem(KN_F16, o + i) - od[i]);
          if (!(x <= err)) err = isnan(x) ? INFINITY : x;
        }
      } else {
        fprintf(stderr, "reference: %s\n", rd.message);
      }
    }
  }
  if (st) fprintf(stderr, "kiln: %s\n", kiln_last_error());
  kn_attn_desc td;
  api_desc_from_public(&d, &td);
  const double tol = kn_attn_tolerance_of(&td);
  bool pass = err <= tol;
  failures += !pass;
  char tiling[48] = "";
  if (po)
    snprintf(tiling, sizeof tiling, " %dx%d w%d%s", po->block_m, po->block_n, po->warps,
             po->wgmma ? " wgmma" : "");
  printf("%s  %-8s B%d H%d/%d Nq %d Nk %d D%d f16%s: max_abs_err %.3g (tol %.3g)\n",
         pass ? "PASS" : "FAIL", v->name, B, H, HK, Nq, Nk, D, tiling, err, tol);
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dsl};
  for (int i = 0; i < 5; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  free(q), free(k), free(vv), free(o), free(qd), free(kd), free(vd), free(od);
  return pass;
}

static double pairs_of(const variant *v, long N) {
  if (!v->window) return (double)N * (N + 1) / 2;
  double n = 0;
  for (long q = 0; q < N; q++) n += (q < WINDOW ? q : WINDOW) + 1;
  return n;
}

struct call {
  kiln_kernel *kern;
  const kiln_attn_args *a;
};
static int forward(void *user) {
  struct call *c = user;
  return kiln_forward(c->kern, c->a, NULL) != KILN_OK;
}

/* (b) one variant at one length: median ms of kiln_forward, or NAN */
static double timed(kiln_context *ctx, const variant *v, int N, int repeats,
                    const kiln_prepare_options *po, kiln_kernel_info *info) {
  const int B = 4, H = 32, D = 128;
  size_t n = (size_t)B * H * N * D * 2;
  kn_cuda_ptr dq = upload(NULL, n), dk = upload(NULL, n), dv = upload(NULL, n),
              dout = upload(NULL, n);
  float slopes[32];
  for (int h = 0; h < H; h++) slopes[h] = (float)exp2(-8.0 * (h + 1) / H);
  kn_cuda_ptr dsl = upload(slopes, sizeof slopes);
  kn_diag e;
  double med = NAN;
  kiln_attn_desc d = desc_of(v);
  kiln_kernel *kern;
  if (!dq || !dk || !dv || !dout || !dsl || kn_cuda_memset8(dev, dq, 0x3c, n, &e) ||
      kn_cuda_memset8(dev, dk, 0x3b, n, &e) || kn_cuda_memset8(dev, dv, 0x3a, n, &e) ||
      kiln_prepare(ctx, &d, po, &kern) || kiln_kernel_get_info(kern, info)) {
    failures++;
    goto out;
  }
  kiln_attn_args a = {.q = (void *)(uintptr_t)dq, .k = (void *)(uintptr_t)dk,
                      .v = (void *)(uintptr_t)dv, .o = (void *)(uintptr_t)dout, .batch = B,
                      .heads = H, .kv_heads = H, .seqlen_q = N, .seqlen_k = N};
  if (v->window) a.window_left = WINDOW, a.window_right = 0;
  if (v->softcap) a.softcap = 30;
  if (v->alibi) a.alibi_slopes = (const float *)(uintptr_t)dsl;
  if (v->dropout != 0) a.dropout_seed = DROP_SEED, a.dropout_offset = DROP_OFFSET;
  struct call c = {kern, &a};
  med = bench_median_ms(dev, 3, repeats, forward, &c);
  failures += isnan(med);
out:
  kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dsl};
  for (int i = 0; i < 5; i++)
    if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
  return med;
}

int main(int argc, char **argv) {
  int repeats = 10;
  bool quick = false, tilings = false, wgmma = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true, repeats = 3;
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tilings")) tilings = true;
    else if (!strcmp(argv[i], "--wgmma")) tilings = wgmma = true;
    else {
      fprintf(stderr, "usage: %s [--quick] [--repeats R] [--tilings] [--wgmma]\n", argv[0]);
      return 2;
    }
  }
  if (repeats < 1 || repeats > 64) repeats = 10;
  if (!bench_device_open(&dev)) return 0;
  kiln_context *ctx = bench_context();
  for (int i = 0; i < NVAR; i++) check(ctx, &variants[i], NULL);
  if (failures) {
    printf("# correctness failed: no timing\n");
    return 1;
  }
  printf("\n| variant | N | tiling | ms | TFLOP/s (visited pairs) |\n|---|---|---|---|---|\n");
  double win_ms[2] = {NAN, NAN};
  const int Ns[] = {4096, 16384};
  for (int ni = 0; ni < (quick ? 1 : 2); ni++)
    for (int i = 0; i < NVAR; i++) {
      kiln_kernel_info info = {0};
      double ms = timed(ctx, &variants[i], Ns[ni], repeats, NULL, &info);
      double tf = 4.0 * 4 * 32 * 128 * pairs_of(&variants[i], Ns[ni]) / (ms * 1e-3) / 1e12;
      printf("| %s | %d | %dx%d w%d%s | %.3f | %.0f |\n", variants[i].name, Ns[ni], info.block_m,
             info.block_n, info.warps, info.tuned ? " (tuned)" : "", ms, tf);
      if (variants[i].window) win_ms[ni] = ms;
      fflush(stdout);
    }
  if (!quick)
    printf("\n# window %d: time at N 16384 / N 4096 = %.2f (linear in N: 4; no skipping: 16)\n",
           WINDOW, win_ms[1] / win_ms[0]);
  if (tilings) {
    /* forced tilings (an extra table, not the headline): which would the defaults want? */
    /* {block_m, block_n, warps, wgmma}; each checked against float64 before it is timed */
    static const int t[][4] = {{64, 32, 4, 0},  {64, 64, 4, 0},  {128, 32, 4, 0},
                               {128, 64, 4, 0}, {128, 64, 8, 0}, {128, 128, 8, 0},
                               {64, 64, 4, 1},  {128, 64, 8, 1}, {128, 32, 8, 1}};
    static char rows[64][96];
    int nrows = 0;
    for (int i = 0; i < NVAR; i++)
      for (size_t j = 0; j < sizeof t / sizeof t[0]; j++) {
        if (t[j][3] && !wgmma) continue;
        kiln_prepare_options po = {.block_m = t[j][0], .block_n = t[j][1], .warps = t[j][2],
                                   .wgmma = t[j][3]};
        if (!check(ctx, &variants[i], &po)) continue;  /* a wrong kernel is not timed */
        kiln_kernel_info info = {0};
        double ms = timed(ctx, &variants[i], 4096, repeats, &po, &info);
        double tf = 4.0 * 4 * 32 * 128 * pairs_of(&variants[i], 4096) / (ms * 1e-3) / 1e12;
        if (nrows < 64)
          snprintf(rows[nrows++], sizeof rows[0], "| %s | 4096 | %dx%d w%d%s | %.3f | %.0f |",
                   variants[i].name, t[j][0], t[j][1], t[j][2], t[j][3] ? " wgmma" : "", ms, tf);
      }
    printf("\n| variant | N | forced tiling | ms | TFLOP/s |\n|---|---|---|---|---|\n");
    for (int r = 0; r < nrows; r++) printf("%s\n", rows[r]);
  }
  kiln_context_destroy(ctx);
  kn_cuda_device_close(dev);
  return failures ? 1 : 0;
}
