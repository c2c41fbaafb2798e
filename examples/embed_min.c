/* embed_min.c — kiln in a serving loop, the short version (embed.c is the long one).  One
 * context and one kernel for the process; each request is a launch with its own shape.  Values
 * of 1 make the check one line: softmax weights sum to 1, so every output is 1.  Buffers are
 * host memory: the host device, or a pretend GPU (tests/install.sh runs it on the fake CUDA
 * driver); on a real GPU they would be device memory and the last argument of kiln_forward a
 * stream.  usage: embed_min [DEVICE [CACHE_DIR]]; prints PASS and exits 0 when every output is 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln.h"

int main(int argc, char **argv) {
  kiln_context_options co = {.device = argc > 1 ? argv[1] : "auto", .cache_dir = argc > 2 ? argv[2] : NULL};
  kiln_attn_desc desc = {.dtype = KILN_F16, .head_dim = 64};
  kiln_context *ctx;
  kiln_kernel *kernel;
  if (kiln_context_create(&co, &ctx) || kiln_prepare(ctx, &desc, NULL, &kernel))
    return fprintf(stderr, "embed_min: %s\n", kiln_last_error()), 1;
  kiln_kernel_info info;
  kiln_kernel_get_info(kernel, &info);
  printf("kernel %s for %s\n", info.source == KILN_SOURCE_CACHE ? "from the cache" : "compiled",
         kiln_context_target(ctx));
  int bad = 0;
  for (int r = 1; r <= 3; r++) { /* requests: batch and length are launch arguments */
    int B = r, H = 4, N = 40 * r;
    size_t n = (size_t)B * H * N * 64;
    _Float16 *q = malloc(n * 2), *k = malloc(n * 2), *v = malloc(n * 2), *o = malloc(n * 2);
    for (size_t i = 0; i < n; i++) q[i] = (_Float16)sinf(i), k[i] = (_Float16)cosf(i), v[i] = 1;
    kiln_attn_args a = {.q = q, .k = k, .v = v, .o = o, .batch = B, .heads = H, .kv_heads = H,
                        .seqlen_q = N, .seqlen_k = N};
    if (kiln_forward(kernel, &a, NULL)) return fprintf(stderr, "embed_min: %s\n", kiln_last_error()), 1;
    for (size_t i = 0; i < n; i++) bad += fabsf((float)o[i] - 1) > 1e-3f;
    printf("request %d: B=%d H=%d N=%d\n", r, B, H, N);
    free(q), free(k), free(v), free(o);
  }
  kiln_context_destroy(ctx);
  printf("%s\n", bad ? "FAIL" : "PASS");
  return bad != 0;
}
