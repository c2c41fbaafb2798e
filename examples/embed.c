/* embed.c — embedding kiln in a serving loop, through the public API only (include/kiln.h).
 *
 * A server creates one context at start-up and keeps it: the context owns the kernels it
 * prepares.  For each request it asks for the kernel of the request's descriptor (dtype, head
 * dim, causal, and here a sliding window for some: a variant, docs/variants.md) and launches it
 * on the request's buffers.  The first request of a descriptor
 * compiles the kernel (or, in a later process, loads it from the disk cache in about a
 * millisecond); every later one is a lookup in the context's memory.  Shapes (batch, heads,
 * lengths, GQA) and the window's size are launch arguments: one kernel serves them all.
 *
 * This sketch runs on the host device (the CPU), where buffers are ordinary memory and the call
 * returns when the output is written.  On an NVIDIA GPU the same code takes device = "cuda",
 * device pointers and the caller's CUstream.  Each result is checked against a naive attention
 * in double precision, so the example is also a test (tests/examples.sh runs it twice: the
 * second process loads every kernel from the cache and compiles nothing).
 *
 * usage: embed [CACHE_DIR]     (default: $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln, ~/.cache/kiln)
 * Exit status 0 when every request's output is within tolerance, 1 otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kiln.h"

typedef _Float16 half; /* f16 storage: GCC and Clang on x86-64 and AArch64 */

typedef struct request {
  int causal, batch, heads, kv_heads, seqlen_q, seqlen_k;
  int window; /* > 0: a sliding window, each query sees the `window` keys before it and its own */
} request;

/* what a stream of requests may look like: three descriptors, several shapes each */
static const request requests[] = {
    {1, 1, 4, 2, 77, 77, 0},    {1, 2, 4, 4, 128, 128, 0}, {1, 1, 4, 2, 77, 77, 0},
    {0, 1, 8, 2, 1, 200, 0},    {1, 1, 4, 1, 300, 300, 0}, {0, 2, 4, 2, 64, 33, 0},
    {1, 1, 4, 2, 300, 300, 32}, {1, 2, 4, 4, 100, 150, 64},
};

enum { HEAD_DIM = 64 };
static const double TOLERANCE = 4e-3; /* f16 output: kiln's own bound for inputs ~ N(0,1) */

static void log_warnings(void *user, kiln_log_level level, const char *msg) {
  (void)user;
  if (level <= KILN_LOG_WARN) fprintf(stderr, "kiln: %s\n", msg);
}

static double uniform(unsigned *s) { /* a small deterministic generator, in [-1, 1) */
  *s = *s * 1664525u + 1013904223u;
  return (double)(*s >> 8) / (1 << 23) - 1.0;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* the largest |o - reference| of one request (contiguous (B, H, N, D) buffers) */
static double max_error(const request *r, const half *q, const half *k, const half *v,
                        const half *o) {
  const int D = HEAD_DIM, group = r->heads / r->kv_heads;
  const double scale = 1.0 / sqrt(D);
  double worst = 0, *p = malloc(sizeof(double) * r->seqlen_k);
  for (int b = 0; b < r->batch; b++)
    for (int h = 0; h < r->heads; h++)
      for (int i = 0; i < r->seqlen_q; i++) {
        const half *qi = q + (((size_t)b * r->heads + h) * r->seqlen_q + i) * D;
        const half *kh = k + ((size_t)b * r->kv_heads + h / group) * r->seqlen_k * D;
        const half *vh = v + ((size_t)b * r->kv_heads + h / group) * r->seqlen_k * D;
        const half *oi = o + (((size_t)b * r->heads + h) * r->seqlen_q + i) * D;
        int last = r->causal ? i + r->seqlen_k - r->seqlen_q : r->seqlen_k - 1;
        int first = r->window > 0 ? i + r->seqlen_k - r->seqlen_q - r->window : 0;
        if (first < 0) first = 0;
        double m = -INFINITY, l = 0;
        for (int j = first; j <= last && j < r->seqlen_k; j++) {
          double s = 0;
          for (int d = 0; d < D; d++) s += (double)qi[d] * (double)kh[(size_t)j * D + d];
          p[j] = s * scale;
          if (p[j] > m) m = p[j];
        }
        for (int j = first; j <= last && j < r->seqlen_k; j++) l += p[j] = exp(p[j] - m);
        for (int d = 0; d < D; d++) {
          double want = 0; /* a row that sees no key outputs zeros */
          for (int j = first; j <= last && j < r->seqlen_k; j++)
            want += p[j] / l * (double)vh[(size_t)j * D + d];
          double e = fabs((double)oi[d] - want);
          if (!(e <= worst)) worst = e; /* NaN sticks */
        }
      }
  free(p);
  return worst;
}

int main(int argc, char **argv) {
  kiln_context_options co = {.cache_dir = argc > 1 ? argv[1] : NULL, .device = "host",
                             .log = log_warnings};
  kiln_context *ctx;
  if (kiln_context_create(&co, &ctx)) {
    fprintf(stderr, "embed: %s\n", kiln_last_error());
    return 1;
  }
  printf("kiln %s: target=%s device=%s\n", kiln_version(), kiln_context_target(ctx),
         kiln_context_device_name(ctx));
  int bad = 0;
  unsigned seed = 1;
  for (size_t n = 0; n < sizeof requests / sizeof requests[0]; n++) {
    const request *r = &requests[n];
    size_t nq = (size_t)r->batch * r->heads * r->seqlen_q * HEAD_DIM;
    size_t nk = (size_t)r->batch * r->kv_heads * r->seqlen_k * HEAD_DIM;
    half *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
    half *o = malloc(nq * sizeof *o);
    for (size_t i = 0; i < nq; i++) q[i] = (half)uniform(&seed);
    for (size_t i = 0; i < nk; i++) k[i] = (half)uniform(&seed), v[i] = (half)uniform(&seed);

    /* the request's kernel: compiled, loaded from the cache, or found in the context.  A
     * sliding window is a variant of the kernel (window = 1); its size is an argument. */
    kiln_attn_desc desc = {.dtype = KILN_F16, .head_dim = HEAD_DIM, .causal = r->causal,
                           .window = r->window > 0};
    kiln_stats before, after;
    kiln_context_stats(ctx, &before);
    kiln_kernel *kernel;
    double t0 = now_ms();
    kiln_status s = kiln_prepare(ctx, &desc, NULL, &kernel);
    double t1 = now_ms();
    /* zero strides: contiguous (B, H, N, D); sm_scale 0: 1/sqrt(D) */
    kiln_attn_args a = {.q = q, .k = k, .v = v, .o = o, .batch = r->batch, .heads = r->heads,
                        .kv_heads = r->kv_heads, .seqlen_q = r->seqlen_q,
                        .seqlen_k = r->seqlen_k};
    if (r->window > 0) a.window_left = r->window, a.window_right = 0;
    if (!s) s = kiln_forward(kernel, &a, NULL);
    double t2 = now_ms();
    if (s) {
      fprintf(stderr, "embed: request %zu: %s: %s\n", n + 1, kiln_status_str(s),
              kiln_last_error());
      return 1;
    }
    kiln_context_stats(ctx, &after);
    const char *how = after.compiles > before.compiles       ? "compiled"
                      : after.cache_hits > before.cache_hits ? "cache hit"
                                                             : "memo hit";
    double err = max_error(r, q, k, v, o);
    bad += !(err <= TOLERANCE);
    char window[32] = "";
    if (r->window > 0) snprintf(window, sizeof window, " window=%d", r->window);
    printf("request %zu: causal=%d%s B=%d H=%d HK=%d Nq=%d Nk=%d  %-9s  prepare %.3f ms  "
           "forward %.3f ms  max_abs_err=%.2g %s\n", n + 1, r->causal, window, r->batch,
           r->heads, r->kv_heads, r->seqlen_q, r->seqlen_k, how, t1 - t0, t2 - t1, err,
           err <= TOLERANCE ? "ok" : "WRONG");
    free(q), free(k), free(v), free(o);
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  printf("context: %llu prepares, %llu memo hits, %llu cache hits, %llu compiles, %llu launches\n",
         (unsigned long long)st.prepares, (unsigned long long)st.memo_hits,
         (unsigned long long)st.cache_hits, (unsigned long long)st.compiles,
         (unsigned long long)st.launches);
  kiln_context_destroy(ctx); /* frees its kernels */
  return bad ? 1 : 0;
}
