/* device.c — the context's device as one set of calls, whatever its kind (host, CUDA, HIP):
 * memory, copies, a timer, and the load, unload and cache store of a compiled kernel.  The
 * tuners (tune.c, tune_decode.c) and decode's workspace (kiln.c) use these, so each has one path
 * for the three devices instead of one per device.
 *
 * Device memory is host memory on the host (its copies are memcpy); on CUDA a CUdeviceptr
 * carried as a void * (kernel arguments pass pointers as u64 either way); on HIP a device
 * pointer.  The timer: on the host the wall clock around the launches between start and stop
 * (host launches are synchronous); on a GPU two events recorded on the stream, stop waiting for
 * the second and returning the time between them.  Errors are KILN_ERR_RUNTIME (an allocation
 * that fails: KILN_ERR_NOMEM) with the runtime's message, after "<device name>: ".
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"

static kiln_status dev_fail(const kiln_context *ctx, kn_status st, const kn_diag *e) {
  return api_fail(st == KN_E_NOMEM ? KILN_ERR_NOMEM : KILN_ERR_RUNTIME, "%s: %s",
                  ctx->device_name, e->message);
}

kiln_status api_dev_alloc(kiln_context *ctx, size_t bytes, void **out) {
  kn_diag e;
  kn_status st = KN_OK;
  *out = NULL;
  if (ctx->kind == KN_DEVICE_CUDA) {
    kn_cuda_ptr p = 0;
    st = kn_cuda_alloc(ctx->cuda, bytes, &p, &e);
    *out = (void *)(uintptr_t)p;
  } else if (ctx->kind == KN_DEVICE_HIP) {
    st = kn_hip_alloc(ctx->hip, bytes, out, &e);
  } else if (!(*out = malloc(bytes ? bytes : 1))) {
    st = kn_diag_set(&e, KN_E_NOMEM, "out of memory (%zu bytes)", bytes);
  }
  if (st != KN_OK) *out = NULL;
  return st == KN_OK ? KILN_OK : dev_fail(ctx, KN_E_NOMEM, &e);
}

void api_dev_free(kiln_context *ctx, void *p) {
  if (!p) return;
  if (ctx->kind == KN_DEVICE_CUDA) kn_cuda_free(ctx->cuda, (kn_cuda_ptr)(uintptr_t)p, NULL);
  else if (ctx->kind == KN_DEVICE_HIP) kn_hip_free(ctx->hip, p, NULL);
  else free(p);
}

kiln_status api_dev_put(kiln_context *ctx, void *dst, const void *src, size_t bytes) {
  kn_diag e;
  kn_status st = KN_OK;
  if (ctx->kind == KN_DEVICE_CUDA)
    st = kn_cuda_copy_htod(ctx->cuda, (kn_cuda_ptr)(uintptr_t)dst, src, bytes, &e);
  else if (ctx->kind == KN_DEVICE_HIP) st = kn_hip_copy_htod(ctx->hip, dst, src, bytes, &e);
  else if (dst != src) memcpy(dst, src, bytes);
  return st == KN_OK ? KILN_OK : dev_fail(ctx, st, &e);
}

kiln_status api_dev_get(kiln_context *ctx, void *dst, const void *src, size_t bytes) {
  kn_diag e;
  kn_status st = KN_OK;
  if (ctx->kind == KN_DEVICE_CUDA)
    st = kn_cuda_copy_dtoh(ctx->cuda, dst, (kn_cuda_ptr)(uintptr_t)src, bytes, &e);
  else if (ctx->kind == KN_DEVICE_HIP) st = kn_hip_copy_dtoh(ctx->hip, dst, src, bytes, &e);
  else if (dst != src) memcpy(dst, src, bytes);
  return st == KN_OK ? KILN_OK : dev_fail(ctx, st, &e);
}

kiln_status api_dev_clear(kiln_context *ctx, void *dst, size_t bytes) {
  kn_diag e;
  kn_status st = KN_OK;
  if (ctx->kind == KN_DEVICE_CUDA)
    st = kn_cuda_memset8(ctx->cuda, (kn_cuda_ptr)(uintptr_t)dst, 0, bytes, &e);
  else if (ctx->kind == KN_DEVICE_HIP) st = kn_hip_memset8(ctx->hip, dst, 0, bytes, &e);
  else memset(dst, 0, bytes);
  return st == KN_OK ? KILN_OK : dev_fail(ctx, st, &e);
}

kiln_status api_dev_sync(kiln_context *ctx, void *stream) {
  kn_diag e;
  kn_status st = KN_OK;
  if (ctx->kind == KN_DEVICE_CUDA)
    st = stream ? kn_cuda_stream_sync(ctx->cuda, (kn_cuda_stream)stream, &e)
                : kn_cuda_device_sync(ctx->cuda, &e);
  else if (ctx->kind == KN_DEVICE_HIP)
    st = stream ? kn_hip_stream_sync(ctx->hip, (kn_hip_stream)stream, &e)
                : kn_hip_device_sync(ctx->hip, &e);
  return st == KN_OK ? KILN_OK : dev_fail(ctx, st, &e);
}

/* ---- the timer ---- */

static double wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + 1e-3 * (double)ts.tv_nsec;
}

kiln_status api_timer_open(kiln_context *ctx, api_timer *t) {
  memset(t, 0, sizeof *t);
  kn_diag e;
  kn_status st = KN_OK;
  for (int i = 0; i < 2 && st == KN_OK; i++) {
    if (ctx->kind == KN_DEVICE_CUDA)
      st = kn_cuda_event_create(ctx->cuda, (kn_cuda_event *)&t->ev[i], &e);
    else if (ctx->kind == KN_DEVICE_HIP)
      st = kn_hip_event_create(ctx->hip, (kn_hip_event *)&t->ev[i], &e);
  }
  if (st == KN_OK) return KILN_OK;
  api_timer_close(ctx, t);
  return dev_fail(ctx, st, &e);
}

void api_timer_close(kiln_context *ctx, api_timer *t) {
  for (int i = 0; i < 2; i++) {
    if (!t->ev[i]) continue;
    if (ctx->kind == KN_DEVICE_CUDA) kn_cuda_event_destroy(ctx->cuda, (kn_cuda_event)t->ev[i]);
    else if (ctx->kind == KN_DEVICE_HIP) kn_hip_event_destroy(ctx->hip, (kn_hip_event)t->ev[i]);
    t->ev[i] = NULL;
  }
}

/* records event i on the stream (on the host: the clock into t0) */
static kn_status record(kiln_context *ctx, api_timer *t, int i, void *stream, kn_diag *e) {
  if (ctx->kind == KN_DEVICE_CUDA)
    return kn_cuda_event_record(ctx->cuda, (kn_cuda_event)t->ev[i], (kn_cuda_stream)stream, e);
  if (ctx->kind == KN_DEVICE_HIP)
    return kn_hip_event_record(ctx->hip, (kn_hip_event)t->ev[i], (kn_hip_stream)stream, e);
  if (i == 0) t->t0 = wall_us();
  return KN_OK;
}

kiln_status api_timer_start(kiln_context *ctx, api_timer *t, void *stream) {
  kn_diag e;
  kn_status st = record(ctx, t, 0, stream, &e);
  return st == KN_OK ? KILN_OK : dev_fail(ctx, st, &e);
}

kiln_status api_timer_stop(kiln_context *ctx, api_timer *t, void *stream, double *us) {
  kn_diag e;
  float ms = 0;
  *us = 0;
  kn_status st = record(ctx, t, 1, stream, &e);
  if (ctx->kind == KN_DEVICE_CUDA) {
    if (st == KN_OK) st = kn_cuda_event_sync(ctx->cuda, (kn_cuda_event)t->ev[1], &e);
    if (st == KN_OK)
      st = kn_cuda_event_elapsed(ctx->cuda, (kn_cuda_event)t->ev[0], (kn_cuda_event)t->ev[1],
                                 &ms, &e);
  } else if (ctx->kind == KN_DEVICE_HIP) {
    if (st == KN_OK) st = kn_hip_event_sync(ctx->hip, (kn_hip_event)t->ev[1], &e);
    if (st == KN_OK)
      st = kn_hip_event_elapsed(ctx->hip, (kn_hip_event)t->ev[0], (kn_hip_event)t->ev[1], &ms,
                                &e);
  } else {
    *us = wall_us() - t->t0;
    return KILN_OK;
  }
  if (st != KN_OK) return dev_fail(ctx, st, &e);
  *us = 1e3 * (double)ms;
  return KILN_OK;
}

/* ---- compiled kernels ---- */

kiln_status api_dev_load(kiln_context *ctx, kiln_kernel *k, const kn_artifact *o) {
  if (ctx->kind == KN_DEVICE_CUDA)
    return api_cuda_load(ctx, k, (const char *)o->data, NULL, 0, k->kname, o->threads,
                         o->shared_bytes);
  if (ctx->kind == KN_DEVICE_HIP) return api_hip_load(ctx, k, o->data, o->size, k->kname);
  kn_diag d;
  if (api_the_compiler.host_load(o->data, o->size, o->symbol, &k->obj, &d))
    return api_fail(KILN_ERR_COMPILE, "loading %s failed: %s", k->kname, d.message);
  return KILN_OK;
}

void api_dev_unload(kiln_kernel *k) {
  if (k->obj) api_the_compiler.host_unload(k->obj);
  k->obj = NULL;
  api_cuda_unload(k);
  api_hip_unload(k);
}

void api_dev_store(kiln_context *ctx, const kn_cache_key *key, const kn_artifact *o) {
  if (ctx->kind == KN_DEVICE_CUDA) api_cuda_store(ctx, key, o);
  else if (ctx->kind == KN_DEVICE_HIP) api_cache_put(ctx, key, o->data, o->size);
  else api_store(ctx, key, o);
}
