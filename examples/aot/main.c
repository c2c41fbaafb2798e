/* main.c — a program that ships attention kernels built ahead of time, through the launcher
 * `kiln aot kernels.manifest -o DIR --emit-c aot_kernels` generates.  It needs neither kiln nor
 * LLVM nor the HIP or CUDA headers: aot_kernels.c holds the code objects and loads libamdhip64
 * or libcuda at run time.
 *
 *   usage: aot_example [hip|cuda|auto]      (default auto: an AMD GPU, else an NVIDIA GPU)
 *
 * For each kernel of the manifest it uploads random inputs of a ragged GQA shape (sizes that
 * are not multiples of any block), launches, downloads the output and compares it with a naive
 * attention in double precision; exit 0 when every output is within tolerance, 1 otherwise,
 * 2 when there is no GPU the bundle serves.  Build (examples/CMakeLists.txt does the same):
 *   cc -std=gnu17 -O2 -I DIR examples/aot/main.c DIR/aot_kernels.c -ldl -lpthread -lm */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aot_kernels.h"

enum { B = 2, H = 4, HK = 2, NQ = 77, NK = 130 };

/* one element of f16 (_Float16) or bf16 (the top half of a float, rounded to nearest even) */
static uint16_t to_half(float x, int bf16) {
  uint32_t u;
  if (!bf16) {
    _Float16 h = (_Float16)x;
    uint16_t r;
    memcpy(&r, &h, 2);
    return r;
  }
  memcpy(&u, &x, 4);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static double from_half(uint16_t v, int bf16) {
  if (!bf16) {
    _Float16 h;
    memcpy(&h, &v, 2);
    return (double)h;
  }
  uint32_t u = (uint32_t)v << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* naive attention of row i of (b, h) in double precision: causal and window on the diagonal
 * aligned bottom-right (FlashAttention's), contiguous (batch, heads, seqlen, d) buffers */
static void reference(const uint16_t *q, const uint16_t *k, const uint16_t *v, int d, int bf16,
                      int causal, int left, int right, int b, int h, int i, double *out,
                      double *lse) {
  const int hk = h / (H / HK), diag = i + NK - NQ;
  const uint16_t *qr = q + (((size_t)b * H + h) * NQ + i) * d;
  double s[NK], m = -INFINITY, l = 0;
  for (int j = 0; j < NK; j++) {
    int live = (!causal || j <= diag) && (left < 0 || j >= diag - left) &&
               (right < 0 || j <= diag + right);
    s[j] = -INFINITY;
    if (!live) continue;
    const uint16_t *kr = k + (((size_t)b * HK + hk) * NK + j) * d;
    double dot = 0;
    for (int c = 0; c < d; c++) dot += from_half(qr[c], bf16) * from_half(kr[c], bf16);
    s[j] = dot / sqrt((double)d);
    if (s[j] > m) m = s[j];
  }
  for (int c = 0; c < d; c++) out[c] = 0;
  for (int j = 0; j < NK; j++) {
    if (s[j] == -INFINITY) continue;
    double p = exp(s[j] - m);
    l += p;
    const uint16_t *vr = v + (((size_t)b * HK + hk) * NK + j) * d;
    for (int c = 0; c < d; c++) out[c] += p * from_half(vr[c], bf16);
  }
  for (int c = 0; c < d; c++) out[c] = l > 0 ? out[c] / l : 0;
  *lse = l > 0 ? m + log(l) : -INFINITY;
}

typedef int (*launch_fn)(const aot_kernels_args *, void *);

/* one kernel: inputs up, launch, output down, checked; 0 when within tolerance */
static int run(const char *name, launch_fn launch, int d, int bf16, int causal, int left,
               int right) {
  const size_t nq = (size_t)B * H * NQ * d, nk = (size_t)B * HK * NK * d, nl = (size_t)B * H * NQ;
  uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *o = malloc(nq * 2);
  float *lse = malloc(nl * 4);
  for (size_t i = 0; i < nq; i++) q[i] = to_half((float)(rand() / (double)RAND_MAX * 2 - 1), bf16);
  for (size_t i = 0; i < nk; i++) k[i] = to_half((float)(rand() / (double)RAND_MAX * 2 - 1), bf16);
  for (size_t i = 0; i < nk; i++) v[i] = to_half((float)(rand() / (double)RAND_MAX * 2 - 1), bf16);
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dl = NULL;
  int bad = aot_kernels_alloc(&dq, nq * 2) || aot_kernels_alloc(&dk, nk * 2) ||
            aot_kernels_alloc(&dv, nk * 2) || aot_kernels_alloc(&dout, nq * 2) ||
            aot_kernels_alloc(&dl, nl * 4) || aot_kernels_upload(dq, q, nq * 2) ||
            aot_kernels_upload(dk, k, nk * 2) || aot_kernels_upload(dv, v, nk * 2);
  aot_kernels_args a = {.q = dq, .k = dk, .v = dv, .o = dout, .lse = causal ? dl : NULL,
                        .batch = B, .heads = H, .kv_heads = HK, .seqlen_q = NQ, .seqlen_k = NK,
                        .window_left = left, .window_right = right};
  bad = bad || launch(&a, NULL) || aot_kernels_sync(NULL) ||
        aot_kernels_download(o, dout, nq * 2) || aot_kernels_download(lse, dl, nl * 4);
  double err = 0, lerr = 0, out[128], l;
  if (bad) fprintf(stderr, "%s: %s\n", name, aot_kernels_error());
  for (int b = 0; b < B && !bad; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < NQ; i++) {
        reference(q, k, v, d, bf16, causal, left, right, b, h, i, out, &l);
        const uint16_t *orow = o + (((size_t)b * H + h) * NQ + i) * d;
        for (int c = 0; c < d; c++) err = fmax(err, fabs(from_half(orow[c], bf16) - out[c]));
        if (causal) lerr = fmax(lerr, fabs(lse[((size_t)b * H + h) * NQ + i] - l));
      }
  double tol = bf16 ? 2e-2 : 4e-3;
  int ok = !bad && err <= tol && lerr <= 1e-3;
  printf("%s on %s: B=%d H=%d HK=%d Nq=%d Nk=%d max_abs_err=%.3g%s tol=%g %s\n", name,
         aot_kernels_arch(), B, H, HK, NQ, NK, err, causal ? " (and lse)" : "", tol,
         ok ? "ok" : "FAIL");
  aot_kernels_free(dq), aot_kernels_free(dk), aot_kernels_free(dv), aot_kernels_free(dout);
  aot_kernels_free(dl);
  free(q), free(k), free(v), free(o), free(lse);
  return !ok;
}

int main(int argc, char **argv) {
  const char *runtime = argc > 1 ? argv[1] : "auto";
  if (aot_kernels_init(runtime)) {
    fprintf(stderr, "aot_example: %s\n", aot_kernels_error());
    return 2;
  }
  srand(1);
  int fails = run("causal_f16_d64", aot_kernels_causal_f16_d64, 64, 0, 1, -1, -1);
  fails += run("window_bf16_d128", aot_kernels_window_bf16_d128, 128, 1, 0, 40, 5);
  printf("%s\n", fails ? "FAIL" : "PASS");
  return fails ? 1 : 0;
}
