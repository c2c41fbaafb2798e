/* kiln_attn_bench.c — kiln's attention forward on an NVIDIA GPU: a correctness table against the
 * float64 reference and a throughput table next to the SDPA anchor (bench/h200/sdpa_anchor.py).
 *
 * Built statically into the H200 pack (bench/h200/build_static.sh) and run there by
 * kiln_tables.sh.  Every kernel is the attention template (templates/attention.h) compiled by
 * the pipeline for the sm_90a target (kn_compile_artifact: mma.sync m16n8k16, or wgmma with
 * --mma) and loaded as PTX through the CUDA driver (runtime/cuda_device.h); no ptxas is needed.
 *
 * (a) correctness: D 64/128, causal off/on, f16/bf16, ragged (Nq, Nk), batch 1, 2 heads (every
 *     other case on 1 kv head), every config the throughput table times, inputs N(0,1) rounded to the
 *     dtype; O compared with kn_attn_reference (float64, CPU) within kn_attn_tolerance.  The
 *     output is filled with NaN bytes first, so an unwritten row fails.  One PASS/FAIL line per
 *     case with the max error.
 * (b) throughput: batch 4, 32 heads, D 64/128, N 1k/4k/16k, causal off/on, f16/bf16; for each
 *     shape a few (BLOCK_M, BLOCK_N, warps) configs are timed (a mini autotune) with CUDA events:
 *     warm-up, then the median of the repeats.  TFLOP/s = 4*B*H*N*N*D, halved for causal (the
 *     anchor's convention).  One CSV line per (shape, config), then a markdown table of the best
 *     config per shape.
 *
 *   kiln_attn_bench [--quick] [--no-check] [--no-perf] [--seed N] [--mma sync|wgmma|both]
 * --mma (or $KILN_BENCH_MMA, which kiln_tables.sh passes through device_run.sh) picks the
 * candidate tilings: mma.sync (default), wgmma (kn_attn_config.wgmma, sm_90a's
 * wgmma.mma_async) or both; every candidate is checked against float64 on the ragged shapes of
 * (a) before (b) times it, and its lines carry "wgmma" (the CSV a last column mma).  --quick:
 * N 1k and 4k only, and the first two candidates of each set.
 * Exit status: 0 when every correctness case passed (and no run failed), 1 otherwise.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "attn_launch_cuda.h"
#include "cuda_device.h"
#include "gpu.h"
#include "target.h"
#include "interp.h"
#include "numeric.h"

static kn_cuda_device *dev;
static int failures;

typedef struct kernel {
  kn_cuda_module *mod;
  kn_cuda_kernel *k;
  kn_attn_config cfg;
  int threads;
  int64_t smem;
  kn_cuda_kernel_attrs attrs;
  double ms_compile;
} kernel;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* " wgmma" for a wgmma config, "" for mma.sync: the tag every line of a config carries */
static const char *mma_tag(const kn_attn_config *c) { return c->wgmma ? " wgmma" : ""; }

/* compile + load; 0, or -1 with a message printed (the bench goes on) */
static int build(const kn_attn_desc *desc, const kn_attn_config *cfg, kernel *out) {
  memset(out, 0, sizeof *out);
  double t0 = now_ms();
  kn_diag d;
  kn_module *m = kn_module_new("<attn>");
  if (!kn_attn_fwd_build(m, desc, cfg, &d)) {
    printf("# config %dx%d w%d%s: %s\n", cfg->block_m, cfg->block_n, cfg->warps, mma_tag(cfg),
           d.message);
    kn_module_free(m);
    return -1;
  }
  kn_artifact c;
  int rc = kn_compile_artifact(m, "attn_fwd", kn_target_get("sm_90a"), NULL, &c, &d);
  kn_module_free(m);
  if (rc) {
    printf("# compile %s D%d causal=%d %dx%d w%d failed: %s\n", kn_scalar_name(desc->dtype),
           desc->head_dim, desc->causal, cfg->block_m, cfg->block_n, cfg->warps, d.message);
    return -1;
  }
  kn_diag e;
  if (kn_cuda_module_load_ptx(dev, c.data, &out->mod, &e) ||
      kn_cuda_module_kernel(out->mod, "attn_fwd", &out->k, &e) ||
      kn_cuda_kernel_attrs_get(out->k, &out->attrs, &e)) {
    printf("# load %s D%d causal=%d %dx%d w%d failed: %s\n", kn_scalar_name(desc->dtype),
           desc->head_dim, desc->causal, cfg->block_m, cfg->block_n, cfg->warps, e.message);
    if (out->mod) kn_cuda_module_unload(out->mod);
    kn_artifact_free(&c);
    return -1;
  }
  out->cfg = *cfg;
  out->threads = c.threads;
  out->smem = c.shared_bytes;
  out->ms_compile = now_ms() - t0;
  kn_artifact_free(&c);
  return 0;
}

static void unload(kernel *k) {
  if (k->mod) kn_cuda_module_unload(k->mod);
  memset(k, 0, sizeof *k);
}

typedef struct bufs {
  kn_cuda_ptr q, k, v, o;
} bufs;

/* one launch (asynchronous on the default stream) */
static int launch(const kernel *kk, const kn_attn_desc *desc, const kn_attn_problem *p,
                  const bufs *b, kn_cuda_ptr lse) {
  kn_argval args[KN_ATTN_NPARAMS];
  int grid[3];
  kn_attn_fill_args(desc, NULL, &kk->cfg, p, (void *)(uintptr_t)b->q, (void *)(uintptr_t)b->k,
                    (void *)(uintptr_t)b->v, (void *)(uintptr_t)b->o,
                    (float *)(uintptr_t)lse, NULL, args, grid, NULL);
  /* the launch helper the API uses packs each parameter in its own width */
  kn_attn_cuda_launch_info li = {.threads = kk->threads, .smem_bytes = kk->smem};
  kn_diag e;
  if (kn_attn_cuda_launch(kk->k, &li, NULL, args, grid, NULL, &e)) {
    printf("# launch failed: %s\n", e.message);
    return -1;
  }
  return 0;
}

/* ---- random inputs ---- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double normal(uint64_t *s) {
  double u = ((splitmix(s) >> 11) + 0.5) * 0x1p-53, v = ((splitmix(s) >> 11) + 0.5) * 0x1p-53;
  return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static int upload_random(kn_scalar t, size_t n, uint64_t *rng, double **dbl, kn_cuda_ptr *out) {
  size_t es = kn_scalar_size(t);
  unsigned char *h = malloc(n * es);
  double *x = malloc(n * sizeof(double));
  if (!h || !x) return -1;
  for (size_t i = 0; i < n; i++) {
    x[i] = kn_round(t, normal(rng));
    kn_store_elem(t, h + i * es, x[i]);
  }
  kn_diag e;
  int rc = kn_cuda_alloc(dev, n * es, out, &e) || kn_cuda_copy_htod(dev, *out, h, n * es, &e);
  if (rc) printf("# upload: %s\n", e.message);
  free(h);
  *dbl = x;
  return rc ? -1 : 0;
}

static void free_bufs(bufs *b) {
  kn_cuda_ptr *ps[4] = {&b->q, &b->k, &b->v, &b->o};
  for (int i = 0; i < 4; i++)
    if (*ps[i]) kn_cuda_free(dev, *ps[i], NULL);
}

/* q, k, v and o of n elements each for the timed runs, filled with one random pattern (the
 * values only have to be realistic, not fresh); 0, or -1 after a message (counted a failure) */
static int timing_bufs(kn_scalar t, size_t n, uint64_t seed, bufs *b) {
  size_t es = kn_scalar_size(t);
  unsigned char *h = malloc(n * es);
  if (!h) return -1;
  uint64_t rng = seed;
  enum { PAT = 1 << 16 };
  static unsigned char pat[PAT * 2];
  for (int i = 0; i < PAT; i++) kn_store_elem(t, pat + (size_t)i * es, kn_round(t, normal(&rng)));
  for (size_t i = 0; i < n; i += PAT) memcpy(h + i * es, pat, (n - i < PAT ? n - i : PAT) * es);
  kn_cuda_ptr *ps[4] = {&b->q, &b->k, &b->v, &b->o};
  kn_diag e;
  for (int i = 0; i < 4; i++)
    if (kn_cuda_alloc(dev, n * es, ps[i], &e) || kn_cuda_copy_htod(dev, *ps[i], h, n * es, &e)) {
      printf("# buffers: %s\n", e.message);
      failures++;
      free(h);
      free_bufs(b);
      return -1;
    }
  free(h);
  return 0;
}


/* ---- (a) correctness ---- */

static void check_case(const kn_attn_desc *desc, const kernel *kk, int HK, int Nq, int Nk,
                       uint64_t seed) {
  const int B = 1, H = 2, D = desc->head_dim;
  kn_scalar t = desc->dtype;
  size_t es = kn_scalar_size(t);
  kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = Nq, .seqlen_k = Nk};
  size_t nq = (size_t)B * H * Nq * D, nk = (size_t)B * HK * Nk * D;
  uint64_t rng = seed;
  double *qd = NULL, *kd = NULL, *vd = NULL;
  bufs b = {0};
  kn_diag e;
  double err = INFINITY;
  const char *why = "";
  if (upload_random(t, nq, &rng, &qd, &b.q) || upload_random(t, nk, &rng, &kd, &b.k) ||
      upload_random(t, nk, &rng, &vd, &b.v) || kn_cuda_alloc(dev, nq * es, &b.o, &e) ||
      kn_cuda_memset8(dev, b.o, 0xff, nq * es, &e)) {
    why = " (setup failed)";
  } else if (launch(kk, desc, &p, &b, 0) || kn_cuda_device_sync(dev, &e)) {
    why = " (launch failed)";
    printf("# %s\n", e.message);
  } else {
    unsigned char *oh = malloc(nq * es);
    double *od = malloc(nq * sizeof(double));
    if (oh && od && !kn_cuda_copy_dtoh(dev, oh, b.o, nq * es, &e)) {
      kn_attn_reference(desc, &p, qd, kd, vd, od, NULL);
      err = 0;
      for (size_t i = 0; i < nq; i++) {
        double dd = fabs(kn_load_elem(t, oh + i * es) - od[i]);
        if (!(dd <= err)) err = isnan(dd) ? INFINITY : dd;
      }
    }
    free(oh);
    free(od);
  }
  double tol = kn_attn_tolerance(t);
  bool ok = err <= tol;
  failures += !ok;
  printf("%s  %-4s D%-3d causal=%d B%d H%d HK%d N(%4d,%4d) %dx%d w%d%s: max|dO| %.3e tol %.0e%s\n",
         ok ? "PASS" : "FAIL", kn_scalar_name(t), D, desc->causal, B, H, HK, Nq, Nk,
         kk->cfg.block_m, kk->cfg.block_n, kk->cfg.warps, mma_tag(&kk->cfg), err, tol, why);
  fflush(stdout);
  free(qd), free(kd), free(vd);
  if (b.q) kn_cuda_free(dev, b.q, NULL);
  if (b.k) kn_cuda_free(dev, b.k, NULL);
  if (b.v) kn_cuda_free(dev, b.v, NULL);
  if (b.o) kn_cuda_free(dev, b.o, NULL);
}

/* the candidates of the mini autotune (configs whose registers spill are still timed); the
 * correctness table checks every one of them, so whichever wins the throughput table was
 * checked too.  --mma picks the set: mma.sync (the default), wgmma (kn_attn_config.wgmma:
 * block_m = 16 x warps, one 64-row slab per warpgroup) or both. */
static const kn_attn_config sync_cands[] = {{128, 64, 4, 2, 0, false, false, false}, {128, 64, 8, 2, 0, false, false, false},
                                            {128, 128, 8, 2, 0, false, false, false}, {64, 64, 4, 2, 0, false, false, false},
                                            {128, 32, 8, 2, 0, false, false, false}, {64, 32, 4, 2, 0, false, false, false}};
static const kn_attn_config wgmma_cands[] = {{128, 64, 8, 2, 0, true, false, false}, {128, 128, 8, 2, 0, true, false, false},
                                             {64, 64, 4, 2, 0, true, false, false}, {64, 128, 4, 2, 0, true, false, false},
                                             {128, 32, 8, 2, 0, true, false, false}};
enum { MAX_CANDS = 16 };
static kn_attn_config cands[MAX_CANDS];
static int ncands;

static void add_cands(const kn_attn_config *c, int n) {
  for (int i = 0; i < n && ncands < MAX_CANDS; i++) cands[ncands++] = c[i];
}


static void correctness(uint64_t seed) {
  printf("## correctness: kiln (sm_90a PTX, every candidate config) vs float64 reference\n");
  const int lens[][2] = {{17, 17}, {1000, 1000}, {64, 1000}, {1000, 64}, {1, 1}, {129, 77},
                         {300, 511}};
  for (int t = 0; t < 2; t++)
    for (int hd = 64; hd <= 128; hd += 64)
      for (int causal = 0; causal < 2; causal++)
        for (int ci = 0; ci < ncands; ci++) {
        kn_attn_desc desc = {.dtype = t ? KN_BF16 : KN_F16, .head_dim = hd, .causal = causal};
        kn_attn_config cfg = cands[ci];
        kernel kk;
        if (build(&desc, &cfg, &kk)) {
          failures++;
          printf("FAIL  %s D%d causal=%d: compile/load\n", kn_scalar_name(desc.dtype), hd, causal);
          continue;
        }
        printf("# %s D%d causal=%d %dx%d w%d%s: %d registers, %d B local, %lld B shared, "
               "compile+load %.0f ms\n", kn_scalar_name(desc.dtype), hd, causal, cfg.block_m,
               cfg.block_n, cfg.warps, mma_tag(&cfg), kk.attrs.num_regs, kk.attrs.local_bytes,
               (long long)kk.smem, kk.ms_compile);
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
          check_case(&desc, &kk, li % 2 ? 1 : 2, lens[li][0], lens[li][1], seed++);
        unload(&kk);
      }
}

/* ---- (b) throughput ---- */

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* median ms of `reps` launches after `warm` warm-up launches; <0 on failure */
static double time_kernel(const kernel *kk, const kn_attn_desc *desc, const kn_attn_problem *p,
                          const bufs *b, int warm, int reps) {
  kn_diag e;
  kn_cuda_event ev[2];
  if (kn_cuda_event_create(dev, &ev[0], &e) || kn_cuda_event_create(dev, &ev[1], &e)) return -1;
  float ms[64];
  double res = -1;
  for (int i = 0; i < warm; i++)
    if (launch(kk, desc, p, b, 0)) goto out;
  if (kn_cuda_device_sync(dev, &e)) {
    printf("# warm-up: %s\n", e.message);
    goto out;
  }
  for (int i = 0; i < reps; i++) {
    if (kn_cuda_event_record(dev, ev[0], NULL, &e) || launch(kk, desc, p, b, 0) ||
        kn_cuda_event_record(dev, ev[1], NULL, &e) || kn_cuda_event_sync(dev, ev[1], &e) ||
        kn_cuda_event_elapsed(dev, ev[0], ev[1], &ms[i], &e)) {
      printf("# timing: %s\n", e.message);
      goto out;
    }
  }
  qsort(ms, (size_t)reps, sizeof ms[0], cmp_f);
  res = ms[reps / 2];
out:
  kn_cuda_event_destroy(dev, ev[0]);
  kn_cuda_event_destroy(dev, ev[1]);
  return res;
}

typedef struct best {
  int dt, hd, causal, n;
  double tflops, ms;
  kn_attn_config cfg;
  int regs;
} best;

static void throughput(bool quick) {
  const int B = 4, H = 32;
  const int ns[] = {1024, 4096, 16384};
  int nn = quick ? 2 : 3;
  const int ncand = ncands;  /* --quick: two of each set (main) */
  size_t maxn = (size_t)B * H * ns[nn - 1] * 128;
  printf("## throughput: kiln sm_90a (%s), batch %d, %d heads, median of repeats\n",
         cands[0].wgmma && cands[ncands - 1].wgmma ? "wgmma" : cands[ncands - 1].wgmma
                                                             ? "mma.sync and wgmma" : "mma.sync",
         B, H);
  printf("csv,kernel,dtype,D,causal,N,block_m,block_n,warps,regs,local_bytes,ms,tflops,mma\n");
  best bests[2 * 2 * 2 * 3];
  int nbest = 0;
  for (int dt = 0; dt < 2; dt++) {
    kn_scalar t = dt ? KN_BF16 : KN_F16;
    /* one set of buffers at the largest shape, filled with a random pattern (every smaller
     * shape uses their beginning); the values only have to be realistic, not fresh */
    bufs b = {0};
    if (timing_bufs(t, maxn, 7, &b)) return;
    for (int hd = 64; hd <= 128; hd += 64)
      for (int causal = 0; causal < 2; causal++) {
        kn_attn_desc desc = {.dtype = t, .head_dim = hd, .causal = causal};
        kernel ks[MAX_CANDS];
        bool ok[MAX_CANDS] = {0};
        for (int c = 0; c < ncand; c++) ok[c] = build(&desc, &cands[c], &ks[c]) == 0;
        for (int ni = 0; ni < nn; ni++) {
          int N = ns[ni];
          kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = H, .seqlen_q = N, .seqlen_k = N};
          double flops = 4.0 * B * H * (double)N * N * hd * (causal ? 0.5 : 1.0);
          best *bb = &bests[nbest++];
          *bb = (best){.dt = dt, .hd = hd, .causal = causal, .n = N, .tflops = 0};
          int reps = N >= 16384 ? 7 : 15;
          for (int c = 0; c < ncand; c++) {
            if (!ok[c]) continue;
            double ms = time_kernel(&ks[c], &desc, &p, &b, 2, reps);
            if (ms <= 0) {
              failures++;
              continue;
            }
            double tf = flops / (ms * 1e-3) / 1e12;
            printf("csv,kiln,%s,%d,%d,%d,%d,%d,%d,%d,%d,%.4f,%.1f,%s\n", kn_scalar_name(t), hd,
                   causal, N, cands[c].block_m, cands[c].block_n, cands[c].warps,
                   ks[c].attrs.num_regs, ks[c].attrs.local_bytes, ms, tf,
                   cands[c].wgmma ? "wgmma" : "sync");
            fflush(stdout);
            if (tf > bb->tflops) {
              bb->tflops = tf;
              bb->ms = ms;
              bb->cfg = cands[c];
              bb->regs = ks[c].attrs.num_regs;
            }
          }
        }
        for (int c = 0; c < ncand; c++)
          if (ok[c]) unload(&ks[c]);
      }
    free_bufs(&b);
  }
  printf("\n| dtype | D | causal | N | kiln TFLOP/s | ms | best BLOCK_M x BLOCK_N, warps | regs |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < nbest; i++) {
    const best *bb = &bests[i];
    printf("| %s | %d | %s | %d | %.0f | %.3f | %dx%d, %d%s | %d |\n", bb->dt ? "bf16" : "fp16",
           bb->hd, bb->causal ? "yes" : "no", bb->n, bb->tflops, bb->ms, bb->cfg.block_m,
           bb->cfg.block_n, bb->cfg.warps, mma_tag(&bb->cfg), bb->regs);
  }
}

/* --defaults: which tiling is fastest per head dim on this GPU (sm_90a), and how the registry's
 * default (kn_attn_default_config, compiler/arch.c) compares: f16, batch 4, 32 heads, N 4096,
 * causal off and on; every candidate the template accepts on sm_90a (kn_attn_check_on) is
 * checked against float64 on a ragged shape first, then timed.  One CSV line per candidate and
 * a table: best config, default config, default / best time. */
static void defaults_table(uint64_t seed) {
  const int B = 4, H = 32, N = 4096;
  static const int dims[] = {64, 96, 128, 192, 256};
  static const kn_attn_config dc[] = {
      {128, 64, 4, 2, 0, false, false, false}, {128, 64, 8, 2, 0, false, false, false}, {128, 128, 8, 2, 0, false, false, false},
      {128, 32, 4, 2, 0, false, false, false}, {64, 64, 4, 2, 0, false, false, false},  {64, 32, 4, 2, 0, false, false, false},
      {64, 64, 2, 2, 0, false, false, false},  {64, 32, 2, 2, 0, false, false, false}};
  enum { NC = sizeof dc / sizeof dc[0] };
  const kn_arch *arch = kn_arch_get("sm_90a");
  size_t maxn = (size_t)B * H * N * 256;
  bufs b = {0};
  if (timing_bufs(KN_F16, maxn, seed | 1, &b)) return;
  printf("## defaults: sm_90a f16, batch %d, %d heads, N %d, median of 15\n", B, H, N);
  printf("csv,defaults,D,causal,block_m,block_n,warps,ms,tflops\n");
  char table[4096];
  int tl = snprintf(table, sizeof table, "\n| D | causal | best | best TFLOP/s | default | "
                    "default TFLOP/s | default / best time |\n|---|---|---|---|---|---|---|\n");
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
    for (int causal = 0; causal < 2; causal++) {
      kn_attn_desc desc = {.dtype = KN_F16, .head_dim = dims[di], .causal = causal};
      kn_attn_config def = kn_attn_default_config(arch, &desc);
      kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = H, .seqlen_q = N, .seqlen_k = N};
      double flops = 4.0 * B * H * (double)N * N * desc.head_dim * (causal ? 0.5 : 1.0);
      double best_ms = 1e30, def_ms = -1;
      kn_attn_config best_cfg = def;
      for (int c = 0; c <= NC; c++) {
        kn_attn_config cfg = c < NC ? dc[c] : def;
        kn_diag d;
        if (kn_attn_check_on(arch, &desc, &cfg, &d)) continue;
        kernel kk;
        if (build(&desc, &cfg, &kk)) continue;
        int before = failures;
        check_case(&desc, &kk, 1, 129, 301, seed);  /* ragged, GQA: against float64 first */
        if (failures != before) {
          unload(&kk);
          continue;
        }
        double ms = time_kernel(&kk, &desc, &p, &b, 2, 15);
        unload(&kk);
        if (ms <= 0) continue;
        printf("csv,defaults,%d,%d,%d,%d,%d,%.4f,%.1f\n", desc.head_dim, causal, cfg.block_m,
               cfg.block_n, cfg.warps, ms, flops / (ms * 1e-3) / 1e12);
        bool is_def = cfg.block_m == def.block_m && cfg.block_n == def.block_n &&
                      cfg.warps == def.warps;
        if (is_def) def_ms = ms;
        if (ms < best_ms) best_ms = ms, best_cfg = cfg;
      }
      if (tl < (int)sizeof table)
        tl += snprintf(table + tl, sizeof table - (size_t)tl,
                       "| %d | %s | %dx%d, %d warps | %.0f | %dx%d, %d warps | %.0f | %.2f |\n",
                       desc.head_dim, causal ? "yes" : "no", best_cfg.block_m, best_cfg.block_n,
                       best_cfg.warps, flops / (best_ms * 1e-3) / 1e12, def.block_m, def.block_n,
                       def.warps, def_ms > 0 ? flops / (def_ms * 1e-3) / 1e12 : 0,
                       def_ms > 0 ? def_ms / best_ms : 0);
    }
  fputs(table, stdout);
  free_bufs(&b);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  bool quick = false, check = true, perf = true, defaults = false;
  const char *mma = getenv("KILN_BENCH_MMA") ? getenv("KILN_BENCH_MMA") : "sync";
  uint64_t seed = (uint64_t)time(NULL);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--mma") && i + 1 < argc) mma = argv[++i];
    else if (!strcmp(argv[i], "--no-check")) check = false;
    else if (!strcmp(argv[i], "--no-perf")) perf = false;
    else if (!strcmp(argv[i], "--defaults")) defaults = true;
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
    else {
      fprintf(stderr, "usage: %s [--quick] [--no-check] [--no-perf] [--defaults] [--seed N] "
              "[--mma sync|wgmma|both]\n", argv[0]);
      return 2;
    }
  }
  bool sync = !strcmp(mma, "sync") || !strcmp(mma, "both");
  bool wg = !strcmp(mma, "wgmma") || !strcmp(mma, "both");
  if (!sync && !wg) {
    fprintf(stderr, "%s: --mma (or KILN_BENCH_MMA) expects sync, wgmma or both, not '%s'\n",
            argv[0], mma);
    return 2;
  }
  if (sync) add_cands(sync_cands, quick ? 2 : (int)(sizeof sync_cands / sizeof sync_cands[0]));
  if (wg) add_cands(wgmma_cands, quick ? 2 : (int)(sizeof wgmma_cands / sizeof wgmma_cands[0]));
  kn_diag e;
  if (kn_cuda_init(&e) != KN_OK || kn_cuda_device_open(0, &dev, &e)) {
    printf("FAIL  no CUDA device: %s\n", e.message);
    return 1;
  }
  const kn_cuda_props *pr = kn_cuda_device_get_props(dev);
  printf("# device 0: %s, sm_%d%d, %d SMs, driver %d; seed %llu\n", pr->name, pr->cc_major,
         pr->cc_minor, pr->sm_count, kn_cuda_driver_version(), (unsigned long long)seed);
  if (defaults) defaults_table(seed);
  if (check) correctness(seed);
  if (perf) throughput(quick);
  printf("# %d failure(s)\n", failures);
  kn_cuda_device_close(dev);
  return failures ? 1 : 0;
}
