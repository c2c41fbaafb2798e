/* bench_cuda.h — what the H200 benches (bench/h200/kiln_*_bench.c) share: CUDA-event timing of
 * a launch, the median of the repeats, the random inputs.  Header-only (each bench is one
 * translation unit). */
#ifndef KILN_BENCH_CUDA_H
#define KILN_BENCH_CUDA_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cuda_device.h"
#include "kiln.h"

/* a standard normal sample (xorshift64 and Box-Muller): the benches' random inputs */
static inline double bench_normal(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  double u = ((double)(*s >> 11) + 0.5) * 0x1p-53;
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  double v = (double)(*s >> 11) * 0x1p-53;
  return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

/* Device 0 into *dev; false, with "# no CUDA device: why" on stdout, when there is none (a bench
 * exits 0 then: nothing to measure is not a failure). */
static inline bool bench_device_open(kn_cuda_device **dev) {
  kn_diag e = {0};
  if (kn_cuda_init(&e) || kn_cuda_device_count() < 1 || kn_cuda_device_open(0, dev, &e)) {
    printf("# no CUDA device: %s\n", e.message);
    return false;
  }
  return true;
}

/* What a serving engine opens: a kiln context on the best device ("auto"), here without the
 * disk cache; "# kiln VERSION on DEVICE (TARGET)" on stdout.  Exits 1 when there is none. */
static inline kiln_context *bench_context(void) {
  kiln_context *ctx;
  kiln_context_options co = {.device = "auto", .no_cache = 1};
  if (kiln_context_create(&co, &ctx)) {
    printf("# no kiln context: %s\n", kiln_last_error());
    exit(1);
  }
  printf("# kiln %s on %s (%s)\n", kiln_version(), kiln_context_device_name(ctx),
         kiln_context_target(ctx));
  return ctx;
}

/* The median host time in µs of one launch(user) call (its wall clock, the launch queued, not
 * waited for) over the timed calls of the last bench_median_ms: where it approaches the GPU time,
 * the events around a call measure the host too. */
static double bench_last_host_us = NAN;

static inline double bench_wall_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static inline void bench_sort(double *x, int n) { /* insertion sort: a handful */
  for (int i = 0; i < n; i++)
    for (int j = i; j > 0 && x[j] < x[j - 1]; j--) {
      double t = x[j];
      x[j] = x[j - 1], x[j - 1] = t;
    }
}

/* The median time in ms of `repeats` (1..64) calls of launch(user) on the default stream, each
 * between two events, after `warmup` untimed ones; launch returns nonzero when it failed.
 * KILN_BENCH_BATCH=N (default 1): each timed sample is N calls queued back to back between the
 * two events, divided by N, so the host's part of a call hides behind the GPU's as in a serving
 * loop that does not wait for each call.  NAN, with the reason on stderr, when a launch or an
 * event call fails. */
static inline double bench_median_ms(kn_cuda_device *dev, int warmup, int repeats,
                              int (*launch)(void *user), void *user) {
  kn_cuda_event ev[2] = {0};
  kn_diag e = {0};
  double ms[64], host[64 * 16], med = NAN;
  const char *be = getenv("KILN_BENCH_BATCH");
  int batch = be && atoi(be) > 0 ? atoi(be) : 1, nh = 0;
  if (batch > 16) batch = 16;
  bench_last_host_us = NAN;
  if (repeats < 1 || repeats > 64) repeats = 64 < repeats ? 64 : 1;
  if (kn_cuda_event_create(dev, &ev[0], &e) || kn_cuda_event_create(dev, &ev[1], &e)) {
    fprintf(stderr, "events: %s\n", e.message);
    goto out;
  }
  for (int r = -warmup; r < repeats; r++) {
    float t;
    if (kn_cuda_event_record(dev, ev[0], NULL, &e)) goto fail;
    for (int i = 0; i < batch; i++) {
      double t0 = bench_wall_us();
      if (launch(user)) goto fail;
      if (r >= 0) host[nh++] = bench_wall_us() - t0;
    }
    if (kn_cuda_event_record(dev, ev[1], NULL, &e) || kn_cuda_event_sync(dev, ev[1], &e) ||
        kn_cuda_event_elapsed(dev, ev[0], ev[1], &t, &e))
      goto fail;
    if (r >= 0) ms[r] = t / batch;
  }
  bench_sort(ms, repeats);
  med = ms[repeats / 2];
  bench_sort(host, nh);
  bench_last_host_us = host[nh / 2];
  goto out;
fail:
  fprintf(stderr, "launch failed: %s %s\n", kiln_last_error(), e.message);
out:
  for (int i = 0; i < 2; i++)
    if (ev[i]) kn_cuda_event_destroy(dev, ev[i]);
  return med;
}

#endif
