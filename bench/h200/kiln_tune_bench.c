/* kiln_tune_bench.c — the autotuner on an NVIDIA GPU through the public API: the default tiling
 * against the tuned one at the bench's prefill shapes (B 4 x H 32 x N 4096, D 64 and 128,
 * causal off and on, f16, with lse).
 *
 * For each shape, on a context over a fresh cache directory (so nothing is tuned beforehand):
 *   1. kiln_tune at the shape itself (tune_batch 4, tune_heads 32, seqlen N): every candidate of
 *      the space (the tuner's default for sm_90a, or --space) compiled to PTX, loaded by the
 *      driver, its first launch checked against the float64 reference, then timed with CUDA
 *      events (median of the repeats); the winner recorded in the tuning database and its PTX
 *      stored in the cache.  The candidates go to stdout, fastest first.
 *   2. kiln_prepare with KILN_TUNE_NONE (the template's default tiling) and with
 *      KILN_TUNE_CACHED (the record's: it must say tuned, from the cache).
 *   3. Both timed on the same call with CUDA events around kiln_forward (warm-up, then the
 *      median of the repeats, rotating two input sets), and their outputs compared with each
 *      other within twice the dtype's tolerance (the tuned kernel was checked against float64
 *      by the tuner at this shape; a disagreement fails the row).
 * The table: | D | causal | default tiling | ms | TFLOP/s | tuned tiling | ms | TFLOP/s | speedup
 * | timed / candidates | tuning s |, TFLOP/s counting 4 B H N^2 D (halved for causal).
 *
 *   kiln_tune_bench [--d 64|128] [--causal 0|1] [--n N] [--dtype f16|bf16] [--space SPEC]
 *                   [--repeats R]
 * --d / --causal pick one value of the table's axes (both by default).  Exit status: 0 when every
 * row tuned, agreed and ran, 1 otherwise (no CUDA device: 0, nothing measured).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp */
#endif
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attention.h"
#include "bench_cuda.h"
#include "cuda_device.h"
#include "kiln.h"
#include "numeric.h"

enum { B = 4, H = 32, SETS = 2 };

static kn_cuda_device *dev;
static int failures;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p);
}

static kn_cuda_ptr dalloc(size_t n) {
  kn_cuda_ptr p = 0;
  kn_diag e;
  if (kn_cuda_alloc(dev, n, &p, &e)) {
    fprintf(stderr, "cuMemAlloc %zu: %s\n", n, e.message);
    exit(1);
  }
  return p;
}

/* one forward of kernel k on input set `next` (rotating) */
typedef struct call {
  kiln_kernel *k;
  kiln_attn_args a[SETS];
  int next;
} call;

static int launch(void *user) {
  call *c = user;
  int s = kiln_forward(c->k, &c->a[c->next], NULL) != KILN_OK;
  c->next = (c->next + 1) % SETS;
  return s;
}

static void tiling(const kiln_kernel_info *i, char *buf, size_t n) {
  snprintf(buf, n, "%dx%d w%d s%d%s", i->block_m, i->block_n, i->warps, i->stages,
           i->wgmma ? " wgmma" : "");
}

static int by_median(const void *x, const void *y) {
  const kiln_tune_candidate *a = x, *b = y;
  int ta = a->state == KILN_CANDIDATE_TIMED, tb = b->state == KILN_CANDIDATE_TIMED;
  if (ta != tb) return tb - ta;
  return (a->median_us > b->median_us) - (a->median_us < b->median_us);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int only_d = 0, only_causal = -1, N = 4096, repeats = 20;
  kiln_dtype dt = KILN_F16;
  const char *space = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--d") && i + 1 < argc) only_d = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--causal") && i + 1 < argc) only_causal = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--n") && i + 1 < argc) N = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--space") && i + 1 < argc) space = argv[++i];
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
      dt = !strcmp(argv[++i], "bf16") ? KILN_BF16 : KILN_F16;
    else {
      fprintf(stderr, "usage: kiln_tune_bench [--d 64|128] [--causal 0|1] [--n N] "
              "[--dtype f16|bf16] [--space SPEC] [--repeats R]\n");
      return 2;
    }
  }
  if (N < 1 || repeats < 1 || repeats > 64) {
    fprintf(stderr, "kiln_tune_bench: --n must be positive and --repeats 1..64\n");
    return 2;
  }
  if (!bench_device_open(&dev)) return 0;
  char dir[4096];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/kiln-tune-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  kiln_context *ctx;
  kiln_context_options co = {.device = "cuda", .cache_dir = dir, .tune_policy = KILN_TUNE_NONE};
  if (kiln_context_create(&co, &ctx)) {
    printf("# no kiln context: %s\n", kiln_last_error());
    return 1;
  }
  printf("# kiln %s on %s (%s); B %d x H %d x N %d, %s, lse; space: %s; cache %s\n",
         kiln_version(), kiln_context_device_name(ctx), kiln_context_target(ctx), B, H, N,
         dt == KILN_BF16 ? "bf16" : "f16", space ? space : getenv("KILN_TUNE_SPACE")
         ? getenv("KILN_TUNE_SPACE") : "the tuner's default", dir);

  /* inputs for the largest head dim, reused (a prefix) by the smaller */
  const int Dmax = only_d ? only_d : 128;
  const size_t es = 2, n = (size_t)B * H * N * Dmax, nl = (size_t)B * H * N;
  uint16_t *host = malloc(n * es);
  if (!host) return 1;
  kn_cuda_ptr qkv[SETS][3], o[SETS][2], lse[SETS];
  kn_diag e;
  uint64_t seed = 0x74756e6562656e63ull;
  for (int s = 0; s < SETS; s++) {
    for (int t = 0; t < 3; t++) {
      for (size_t i = 0; i < n; i++)
        kn_store_elem(dt == KILN_BF16 ? KN_BF16 : KN_F16, host + i, bench_normal(&seed));
      qkv[s][t] = dalloc(n * es);
      if (kn_cuda_copy_htod(dev, qkv[s][t], host, n * es, &e)) {
        fprintf(stderr, "copy: %s\n", e.message);
        return 1;
      }
    }
    o[s][0] = dalloc(n * es), o[s][1] = dalloc(n * es), lse[s] = dalloc(nl * 4);
  }
  uint16_t *out2 = malloc(n * es);
  if (!out2) return 1;

  printf("| D | causal | default tiling | ms | TFLOP/s | tuned tiling | ms | TFLOP/s | speedup "
         "| timed / candidates | tuning s |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  const int dims[2] = {64, 128};
  for (int di = 0; di < 2; di++)
    for (int causal = 0; causal < 2; causal++) {
      const int D = dims[di];
      if ((only_d && D != only_d) || (only_causal >= 0 && causal != only_causal)) continue;
      kiln_attn_desc d = {.dtype = dt, .head_dim = D, .causal = causal, .has_lse = 1};
      kiln_prepare_options po = {.seqlen = N, .tune_space = space, .tune_batch = B,
                                 .tune_heads = H};
      kiln_tune_result r;
      printf("# D %d causal %d: tuning\n", D, causal);
      if (kiln_tune(ctx, &d, &po, &r)) {
        printf("FAIL D %d causal %d: kiln_tune: %s\n", D, causal, kiln_last_error());
        failures++;
        kiln_tune_result_free(&r);
        continue;
      }
      int timed = 0;
      for (int i = 0; i < r.ncandidates; i++) timed += r.candidates[i].state == KILN_CANDIDATE_TIMED;
      const kiln_tune_candidate best = r.candidates[r.best];
      qsort(r.candidates, (size_t)r.ncandidates, sizeof *r.candidates, by_median);
      for (int i = 0; i < r.ncandidates; i++) {
        const kiln_tune_candidate *c = &r.candidates[i];
        printf("#   %3dx%-3d w%d s%d %-6s ", c->block_m, c->block_n, c->warps, c->stages,
               strncmp(c->matrix_instr, "wgmma.", 6) ? "mma" : "wgmma");
        if (c->state == KILN_CANDIDATE_TIMED)
          printf("%9.1f us (min %9.1f), compile %6.1f ms\n", c->median_us, c->min_us,
                 c->compile_ms);
        else
          printf("state %d: %s\n", (int)c->state, c->note);
      }
      /* the default and the tuned kernel on the same call */
      kiln_kernel *k[2];
      kiln_kernel_info info[2];
      kiln_prepare_options none = {.tune_policy = KILN_TUNE_NONE, .seqlen = N};
      kiln_prepare_options cached = {.tune_policy = KILN_TUNE_CACHED, .seqlen = N};
      if (kiln_prepare(ctx, &d, &none, &k[0]) || kiln_kernel_get_info(k[0], &info[0]) ||
          kiln_prepare(ctx, &d, &cached, &k[1]) || kiln_kernel_get_info(k[1], &info[1])) {
        printf("FAIL D %d causal %d: prepare: %s\n", D, causal, kiln_last_error());
        failures++;
        kiln_tune_result_free(&r);
        continue;
      }
      if (!info[1].tuned || info[1].block_m != best.block_m || info[1].block_n != best.block_n ||
          info[1].warps != best.warps) {
        printf("FAIL D %d causal %d: the prepare after tuning did not get the record's tiling\n",
               D, causal);
        failures++;
      }
      double ms[2];
      for (int w = 0; w < 2; w++) {
        call c = {.k = k[w]};
        for (int s = 0; s < SETS; s++)
          c.a[s] = (kiln_attn_args){
              .q = (void *)(uintptr_t)qkv[s][0], .k = (void *)(uintptr_t)qkv[s][1],
              .v = (void *)(uintptr_t)qkv[s][2], .o = (void *)(uintptr_t)o[s][w],
              .lse = (float *)(uintptr_t)lse[s], .batch = B, .heads = H, .kv_heads = H,
              .seqlen_q = N, .seqlen_k = N};
        ms[w] = bench_median_ms(dev, 3, repeats, launch, &c);
      }
      /* set 0's outputs of the two kernels (the last launch of each on it wrote them) */
      const size_t no = (size_t)B * H * N * D;
      double diff = INFINITY;
      kn_scalar t = dt == KILN_BF16 ? KN_BF16 : KN_F16;
      if (!kn_cuda_copy_dtoh(dev, host, o[0][0], no * es, &e) &&
          !kn_cuda_copy_dtoh(dev, out2, o[0][1], no * es, &e)) {
        diff = 0;
        for (size_t i = 0; i < no; i++) {
          double x = fabs(kn_load_elem(t, host + i) - kn_load_elem(t, out2 + i));
          if (!(x <= diff)) diff = x; /* NaN sticks */
        }
      }
      double flop = 4.0 * B * H * (double)N * N * D * (causal ? 0.5 : 1.0);
      char t0[48], t1[48];
      tiling(&info[0], t0, sizeof t0);
      tiling(&info[1], t1, sizeof t1);
      bool ok = isfinite(ms[0]) && isfinite(ms[1]) && diff <= 2 * kn_attn_tolerance(t);
      printf("| %d | %s | %s | %.3f | %.0f | %s | %.3f | %.0f | %.2fx | %d / %d | %.1f |\n", D,
             causal ? "yes" : "no", t0, ms[0], flop / (ms[0] * 1e9), t1, ms[1],
             flop / (ms[1] * 1e9), ms[0] / ms[1], timed, r.ncandidates, r.seconds);
      printf("%s D %d causal %d: tuned %s (tuner's median %.1f us) vs default %s; outputs "
             "differ by %.3g (tol %.3g)\n", ok ? "PASS" : "FAIL", D, causal, t1, best.median_us,
             t0, diff, 2 * kn_attn_tolerance(t));
      failures += !ok;
      kiln_tune_result_free(&r);
    }
  kiln_context_destroy(ctx);
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(host);
  free(out2);
  printf("# %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
