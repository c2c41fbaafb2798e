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

/* The median time in ms of `repeats` (1..64) calls of launch(user) on the default stream, each
 * between two events, after `warmup` untimed ones; launch returns nonzero when it failed.
 * NAN, with the reason on stderr, when a launch or an event call fails. */
static inline double bench_median_ms(kn_cuda_device *dev, int warmup, int repeats,
                              int (*launch)(void *user), void *user) {
  kn_cuda_event ev[2] = {0};
  kn_diag e = {0};
  double ms[64], med = NAN;
  if (repeats < 1 || repeats > 64) repeats = 64 < repeats ? 64 : 1;
  if (kn_cuda_event_create(dev, &ev[0], &e) || kn_cuda_event_create(dev, &ev[1], &e)) {
    fprintf(stderr, "events: %s\n", e.message);
    goto out;
  }
  for (int r = -warmup; r < repeats; r++) {
    float t;
    if (kn_cuda_event_record(dev, ev[0], NULL, &e) || launch(user) ||
        kn_cuda_event_record(dev, ev[1], NULL, &e) || kn_cuda_event_sync(dev, ev[1], &e) ||
        kn_cuda_event_elapsed(dev, ev[0], ev[1], &t, &e)) {
      fprintf(stderr, "launch failed: %s %s\n", kiln_last_error(), e.message);
      goto out;
    }
    if (r >= 0) ms[r] = t;
  }
  for (int i = 0; i < repeats; i++) /* insertion sort: a handful */
    for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
      double x = ms[j];
      ms[j] = ms[j - 1], ms[j - 1] = x;
    }
  med = ms[repeats / 2];
out:
  for (int i = 0; i < 2; i++)
    if (ev[i]) kn_cuda_event_destroy(dev, ev[i]);
  return med;
}

#endif
