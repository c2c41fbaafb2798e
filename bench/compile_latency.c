/* compile_latency.c — cold, in-process compile latency of the attention forward template.
 *
 * Each repeat is a full compile from the tile IR (kiln's passes, lowering, LLVM O3, codegen and
 * JIT link) in a fresh LLVM context: nothing is cached between repeats.  The first compile also
 * pays LLVM's one-time initialisation and is reported apart.  Prints the median and min.
 *
 *   compile_latency [--target host|gfx90a|gfx942] [--head-dim D] [--dtype f16] [--causal]
 *                   [--block-m BM --block-n BN --warps W] [--repeats R] [--llvm-time-passes]
 * For the AMDGPU targets a compile ends with the linked code object (kn_gpu_compile).
 * A second line gives the median of each pipeline phase (kn_compile_times); --llvm-time-passes
 * adds LLVM's own per-pass report (-time-passes, printed at exit, summed over all compiles).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Core.h>
#include <llvm-c/Support.h>

#include "attention.h"
#include "gpu.h"
#include "pipeline.h"
#include "target.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 128, .causal = false, .has_lse = false};
  int repeats = 7, bm = 0, bn = 0, warps = 0;
  bool time_passes = false;
  const char *target = "host";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--causal")) desc.causal = true;
    else if (!strcmp(argv[i], "--llvm-time-passes")) time_passes = true;
    else if (!strcmp(argv[i], "--head-dim") && i + 1 < argc) desc.head_dim = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
      const char *v = argv[++i];
      int s = kn_scalar_from_name(v, strlen(v));
      if (s < 0) return fprintf(stderr, "unknown dtype %s\n", v), 2;
      desc.dtype = (kn_scalar)s;
    } else if (!strcmp(argv[i], "--target") && i + 1 < argc) {
      target = argv[++i];
      if (!kn_target_get(target))
        return fprintf(stderr, "unknown target %s\n", target), 2;
    } else if (!strcmp(argv[i], "--block-m") && i + 1 < argc) {
      bm = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--block-n") && i + 1 < argc) {
      bn = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--warps") && i + 1 < argc) {
      warps = atoi(argv[++i]);
    } else {
      return fprintf(stderr, "unknown option %s\n", argv[i]), 2;
    }
  }
  if (repeats < 1 || repeats > 1000) return fprintf(stderr, "--repeats: 1..1000\n"), 2;
  kn_attn_config cfg = kn_attn_default_config(kn_target_get(target)->arch, &desc);
  if (bm) cfg.block_m = bm;
  if (bn) cfg.block_n = bn;
  if (warps) cfg.warps = warps;
  if (time_passes) {
    const char *opt[] = {"compile_latency", "-time-passes"};
    LLVMParseCommandLineOptions(2, opt, "");
  }
  kn_diag d;
  kn_module *m = kn_module_new(NULL);
  kn_func *k = kn_attn_fwd_build(m, &desc, &cfg, &d);
  if (!k || kn_verify(m, &d)) return fprintf(stderr, "%s", d.rendered), 2;

  enum { PHASES = 7 };
  static const char *const phase[PHASES] = {"front", "layout", "lower", "optimize", "codegen",
                                            "link", "load"};
  double *t = malloc(sizeof *t * (size_t)(repeats + 1));
  double *ph = malloc(sizeof *ph * PHASES * (size_t)repeats);
  for (int r = 0; r <= repeats; r++) {
    double t0 = now_s();
    kn_kernel *kern;
    if (kn_compile(m, k->name, kn_target_get(target), NULL, &kern, &d))
      return fprintf(stderr, "compile failed:\n%s", d.rendered), 1;
    t[r] = now_s() - t0;
    const kn_compile_times *ct = kn_kernel_times(kern);
    const double v[PHASES] = {ct->front, ct->layout, ct->lower, ct->optimize, ct->codegen,
                              ct->link, ct->load};
    for (int p = 0; r && p < PHASES; p++) ph[p * repeats + r - 1] = v[p];
    kn_kernel_free(kern);
  }
  qsort(t + 1, (size_t)repeats, sizeof *t, cmp_double);
  printf("attn_fwd %s dtype=%s D=%d causal=%d block=%dx%d warps=%d: first %.1f ms, median %.1f ms, "
         "min %.1f ms over %d cold compiles\n",
         target, kn_scalar_name(desc.dtype), desc.head_dim, desc.causal, cfg.block_m, cfg.block_n, cfg.warps,
         t[0] * 1e3, t[1 + repeats / 2] * 1e3, t[1] * 1e3, repeats);
  printf("median per phase, ms:");
  for (int p = 0; p < PHASES; p++) {
    qsort(ph + p * repeats, (size_t)repeats, sizeof *ph, cmp_double);
    printf(" %s %.1f", phase[p], ph[p * repeats + repeats / 2]);
  }
  printf("\n");
  free(ph);
  free(t);
  kn_module_free(m);
  if (time_passes) LLVMShutdown();  /* prints LLVM's timer report */
  return 0;
}
