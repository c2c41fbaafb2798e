/* hip.c — the API's HIP device: AMD GPUs through runtime/hip_device.h (libamdhip64 by dlopen),
 * kernels compiled to code objects by the pipeline for the AMDGPU targets (gfx90a, gfx942,
 * gfx950: the device's chip, as discovery found it).
 *
 * The payload is the code object itself (a linked ET_DYN ELF, code object v5): it carries
 * everything a launch needs in its metadata note (workgroup size, LDS, the kernarg segment's
 * layout), which runtime/hip.c reads at load.  The cache key (api_cache_key) is (ABI
 * "hip-codeobj-abi-1", "attn_fwd", descriptor key, config key, printed IR, the target's identity
 * with LLVM's version, "O3", kiln version); kiln compiles with sramecc and xnack "any", so one
 * code object serves every configuration of the chip and the device's features are not in the
 * key.  A cached entry that is not a code object for the device's chip, or that the runtime
 * refuses, is a warning, removed and rebuilt, as on the other devices; a freshly compiled one
 * that the runtime refuses is KILN_ERR_COMPILE with the runtime's message.
 *
 * Forward is asynchronous on the caller's stream (a hipStream_t, NULL: the null stream).  The
 * arguments are the kernel signature's values in their GPU widths (the same packing as CUDA's,
 * runtime/attn_launch_cuda.h: .u64 pointers, f32, i32, i64), which runtime/hip.c places in the
 * kernarg segment at the offsets the code object's metadata gives, after checking each size
 * against it.  No lock: every launch packs on its own stack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

static kiln_status hip_fail(kiln_status s, const char *what, const kn_diag *e) {
  return api_fail(s, "%s: %s", what, e->message);
}

kiln_status api_hip_open(kiln_context *ctx, const kn_device_info *dev, const char *target) {
  const kn_arch *a = kn_arch_get(target);
  if (!a) return api_fail(KILN_ERR_UNSUPPORTED, "target %s is not compiled into this kiln", target);
  kn_diag e;
  kn_status st = kn_hip_init(&e);
  if (st != KN_OK) return hip_fail(api_status_of(st), "HIP", &e);
  /* the whole target ID, so a module load checks the code object's xnack / sramecc against it */
  char target_id[160];
  snprintf(target_id, sizeof target_id, "%s%s%s", dev->arch, dev->arch_features[0] ? ":" : "",
           dev->arch_features);
  if (kn_hip_device_open(dev->ordinal, target_id, &ctx->hip, &e) != KN_OK)
    return hip_fail(KILN_ERR_NO_DEVICE, "opening the HIP device", &e);
  ctx->kind = KN_DEVICE_HIP;
  ctx->compute_units = dev->compute_units > 0 ? dev->compute_units : 1;
  ctx->hip_ordinal = dev->ordinal;
  /* (an MI300X and an MI300A are both gfx942 but need not agree on a tiling) */
  api_gpu_target(ctx, a, dev->name);
  return KILN_OK;
}

void api_hip_close(kiln_context *ctx) {
  if (ctx->hip) kn_hip_device_close(ctx->hip);
  ctx->hip = NULL;
}

void api_hip_unload(kiln_kernel *k) {
  if (k->hip_mod) kn_hip_module_unload(k->hip_mod);
  k->hip_mod = NULL;
  k->hip_fn = NULL;
}

/* loads a code object (or an offload bundle) into k, its kernel `symbol`: 0, or -1 with the
 * reason in e (KN_E_* in *st) */
static int load(kiln_context *ctx, kiln_kernel *k, const void *co, size_t n, const char *symbol,
                kn_status *st, kn_diag *e) {
  *st = kn_hip_module_load(ctx->hip, co, n, &k->hip_mod, e);
  if (*st == KN_OK) *st = kn_hip_module_kernel(k->hip_mod, symbol, &k->hip_fn, e);
  if (*st != KN_OK) {
    api_hip_unload(k);
    return -1;
  }
  int want = k->cfg.warps * ctx->target_arch->lanes;
  int got = kn_hip_kernel_meta(k->hip_fn)->max_flat_workgroup_size;
  if (got != want) {
    *st = kn_diag_set(e, KN_E_CORRUPT, "the code object's %s runs %d work-items per "
                      "workgroup; its tiling has %d", symbol, got, want);
    api_hip_unload(k);
    return -1;
  }
  k->hip_threads = want;
  return 0;
}

kiln_status api_hip_load(kiln_context *ctx, kiln_kernel *k, const void *co, size_t n,
                         const char *symbol) {
  kn_status st;
  kn_diag e;
  if (load(ctx, k, co, n, symbol, &st, &e)) return api_fail(api_status_of(st), "%s", e.message);
  return KILN_OK;
}

kiln_status api_hip_build(kiln_context *ctx, kiln_kernel *k, const kn_module *m,
                          const kn_cache_key *key, const char *what) {
  const char *hex = k->info.cache_key;
  kn_diag e;
  kn_status st;
  kiln_status bad = api_gpu_params(k, what);
  if (bad) return bad;
  void *payload;
  size_t size;
  if (api_cache_get(ctx, key, hex, &payload, &size) == KN_OK) {
    int bad = load(ctx, k, payload, size, k->kname, &st, &e);
    free(payload);
    if (!bad) {
      k->info.source = KILN_SOURCE_CACHE;
      atomic_fetch_add(&ctx->stats.cache_hits, 1);
      return KILN_OK;
    }
    api_cache_reject(ctx, key, hex, e.message);
  }
  kn_artifact c;
  kiln_status s = api_compile_named(ctx, m, k->kname, what, &c);
  if (s) return s;
  if (load(ctx, k, c.data, c.size, k->kname, &st, &e)) {
    s = api_fail(st == KN_E_NOMEM ? KILN_ERR_NOMEM : KILN_ERR_COMPILE,
                 "loading %s (%s code object) into the HIP runtime failed: %s", what,
                 ctx->target_name, e.message);
  } else {
    /* stored only once the runtime accepted it: the cache never holds code that cannot load */
    api_cache_put(ctx, key, c.data, c.size);
    k->info.source = KILN_SOURCE_COMPILED;
  }
  kn_artifact_free(&c);
  return s;
}

kiln_status api_hip_forward(kiln_kernel *k, const kn_argval *args, const int grid[3],
                            void *stream) {
  kn_attn_cuda_params p;
  if (kn_attn_cuda_pack(&k->sig, args, &p))
    return api_fail(KILN_ERR_UNSUPPORTED, "kiln_forward: a kernel parameter's type is none of "
                    "i32, i64, f32 or a pointer");
  kn_hip_arg a[KN_ATTN_MAX_PARAMS];
  for (int i = 0; i < p.n; i++)
    a[i] = (kn_hip_arg){.value = p.params[i],
                        .size = (uint32_t)kn_attn_cuda_param_bytes(&k->sig, i)};
  if (grid[0] < 0 || grid[1] < 0 || grid[2] != 1)
    return api_fail(KILN_ERR_INVALID, "kiln_forward: bad grid");
  unsigned g3[3] = {(unsigned)grid[0], (unsigned)grid[1], 1};
  unsigned b3[3] = {(unsigned)k->hip_threads, 1, 1};
  kn_diag e;
  kn_status st = kn_hip_launch(k->hip_fn, g3, b3, 0, (kn_hip_stream)stream, a, p.n, &e);
  if (st == KN_OK) return KILN_OK;
  return api_fail(api_status_of(st), "kiln_forward on %s: %s", k->ctx->device_name, e.message);
}
