/* cache_latency.c — what a serving process pays for a kernel through the JIT service (kiln.h).
 *
 *   cold   kiln_prepare in a new context on an empty cache directory: template, kiln passes,
 *          LLVM O3, codegen to an object, the cache put (fsync + rename), the object linked into
 *          a fresh LLJIT.  Each repeat has its own empty directory.
 *   warm   kiln_prepare in a new context on the directory the cold runs filled: the template is
 *          instantiated and printed (the key is a hash of the printed IR), the entry read and
 *          checked, the object linked into a fresh LLJIT.  A new context per repeat is the state
 *          of a process that just started (its memo is empty; only LLVM's one-time
 *          initialisation is shared, and the first warm run, which pays the process's first
 *          LLJIT, is reported apart).
 *   memo   kiln_prepare again in the same context (the in-process hash map).
 *   tune   kiln_tune for one shape with the template's default host space.
 * Medians of the repeats, min beside them.  Context creation is timed apart (it opens the cache
 * directory, not the tuning database; the first prepare of the default policy opens that).
 *
 *   cache_latency [--head-dim D] [--dtype f16|bf16|f32] [--causal] [--repeats R]
 *                 [--tune-seqlen N] [--tune-heads H] [--no-tune]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nftw, mkdtemp */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <ftw.h>

#include "kiln.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st, (void)flag, (void)f;
  return remove(p);
}

static char *temp_dir(void) {
  const char *base = getenv("TMPDIR");
  char *p = malloc(4096);
  snprintf(p, 4096, "%s/kiln-bench-XXXXXX", base && *base ? base : "/tmp");
  if (!mkdtemp(p)) {
    perror("mkdtemp");
    exit(2);
  }
  return p;
}

static kiln_context *context(const char *dir, double *ms) {
  kiln_context_options o = {.cache_dir = dir, .device = "host", .tune_policy = KILN_TUNE_NONE};
  kiln_context *ctx;
  double t0 = now_ms();
  if (kiln_context_create(&o, &ctx)) {
    fprintf(stderr, "context: %s\n", kiln_last_error());
    exit(1);
  }
  if (ms) *ms = now_ms() - t0;
  return ctx;
}

static double prepare(kiln_context *ctx, const kiln_attn_desc *d, kiln_kernel_source want) {
  kiln_kernel *k;
  double t0 = now_ms();
  if (kiln_prepare(ctx, d, NULL, &k)) {
    fprintf(stderr, "prepare: %s\n", kiln_last_error());
    exit(1);
  }
  double t = now_ms() - t0;
  kiln_kernel_info info;
  kiln_kernel_get_info(k, &info);
  if (want && info.source != want) {
    fprintf(stderr, "expected source %d, got %d\n", (int)want, (int)info.source);
    exit(1);
  }
  return t;
}

int main(int argc, char **argv) {
  kiln_attn_desc d = {.dtype = KILN_F16, .head_dim = 128, .causal = 0, .has_lse = 0};
  int repeats = 9, tune_seqlen = 512, tune_heads = 8, tune = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--causal")) d.causal = 1;
    else if (!strcmp(argv[i], "--no-tune")) tune = 0;
    else if (!strcmp(argv[i], "--head-dim") && i + 1 < argc) d.head_dim = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tune-seqlen") && i + 1 < argc) tune_seqlen = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tune-heads") && i + 1 < argc) tune_heads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
      const char *v = argv[++i];
      d.dtype = !strcmp(v, "bf16") ? KILN_BF16 : !strcmp(v, "f32") ? KILN_F32 : KILN_F16;
    } else {
      return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
    }
  }
  if (repeats < 1 || repeats > 1000) return fprintf(stderr, "--repeats: 1..1000\n"), 2;
  double *cold = calloc((size_t)repeats, sizeof *cold), *warm = calloc((size_t)repeats, 8);
  double *memo = calloc((size_t)repeats, 8), *create = calloc((size_t)repeats, 8);

  /* cold: an empty directory each time; the last one is kept for the warm runs */
  char *dir = NULL;
  for (int r = 0; r < repeats; r++) {
    if (dir) {
      nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
      free(dir);
    }
    dir = temp_dir();
    kiln_context *ctx = context(dir, NULL);
    cold[r] = prepare(ctx, &d, KILN_SOURCE_COMPILED);
    kiln_context_destroy(ctx);
  }
  /* warm: a new context on the filled directory */
  double first_warm = 0;
  for (int r = -1; r < repeats; r++) {
    double c;
    kiln_context *ctx = context(dir, &c);
    double t = prepare(ctx, &d, KILN_SOURCE_CACHE);
    if (r < 0) {
      first_warm = t;
    } else {
      warm[r] = t;
      create[r] = c;
      memo[r] = prepare(ctx, &d, 0);
    }
    kiln_context_destroy(ctx);
  }
  printf("attn_fwd host dtype=%s D=%d causal=%d (default tiling), %d repeats each:\n",
         d.dtype == KILN_F16 ? "f16" : d.dtype == KILN_BF16 ? "bf16" : "f32", d.head_dim,
         d.causal, repeats);
  /* median() sorts, so take the medians before reading the minima */
  double cold_med = median(cold, repeats), warm_med = median(warm, repeats);
  double create_med = median(create, repeats), memo_med = median(memo, repeats);
  printf("  cold prepare (compile + store + load): median %.1f ms, min %.1f ms\n", cold_med,
         cold[0]);
  printf("  warm prepare (new context, cache hit): median %.2f ms, min %.2f ms (first in "
         "process %.2f ms)\n", warm_med, warm[0], first_warm);
  printf("  context create: median %.3f ms; memo hit: median %.4f ms\n", create_med, memo_med);

  if (tune) {
    kiln_context *ctx = context(dir, NULL);
    kiln_prepare_options po = {.seqlen = tune_seqlen, .tune_heads = tune_heads};
    kiln_tune_result res;
    double t0 = now_ms();
    kiln_status s = kiln_tune(ctx, &d, &po, &res);
    double t = now_ms() - t0;
    if (s) {
      fprintf(stderr, "tune: %s\n", kiln_last_error());
      return 1;
    }
    int timed = 0;
    double compile = 0;
    for (int i = 0; i < res.ncandidates; i++) {
      timed += res.candidates[i].state == KILN_CANDIDATE_TIMED;
      compile += res.candidates[i].compile_ms;
    }
    const kiln_tune_candidate *b = &res.candidates[res.best];
    printf("  tune (batch %d x heads %d x %d^2, space %s): %.1f s for %d candidates (%d timed; "
           "%.1f s compiling), best %dx%d at %.1f us\n",
           res.batch, res.heads, res.seqlen, res.space, t * 1e-3, res.ncandidates, timed,
           compile * 1e-3, b->block_m, b->block_n, b->median_us);
    kiln_tune_result_free(&res);
    kiln_context_destroy(ctx);
  }
  nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
  free(dir);
  free(cold), free(warm), free(memo), free(create);
  return 0;
}
