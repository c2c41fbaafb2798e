/* cuda.c — the API's CUDA device: NVIDIA GPUs through runtime/cuda_device.h (the driver by
 * dlopen), kernels compiled to PTX by the pipeline for the NVPTX targets.
 *
 * A context on a CUDA device retains the device's primary context (the one PyTorch and every
 * other driver-API user in the process share) for its lifetime, so caller-owned device pointers
 * from any of them are valid in our launches.  The target is the device's: sm_90a on compute
 * capability 9.0, sm_80 on other 8.0+ devices (PTX for sm_80 is JIT-compiled by the driver for
 * whatever GPU it runs on); "sm_80" may be asked for explicitly on any of them.
 *
 * Prepare runs the same memo and in-flight markers as the host (api/kiln.c); what differs is the
 * payload and the load.  The payload is the PTX text plus the launch facts the PTX alone does not
 * carry reliably (dynamic shared bytes; threads per block are also in .reqntid, but a header field
 * is cheaper to read and to check):
 *
 *   "KILNPTX1" | ABI u32 | threads u32 | smem bytes u64 | PTX length u64 | PTX (no NUL)
 *
 * PTX is driver-independent, so the cache key (api_cache_key) is (ABI "cuda-ptx-abi-1",
 * "attn_fwd", descriptor key, config key, printed IR, "nvptx64-nvidia-cuda;<sm>;llvm-<version>",
 * "O3", kiln version): the
 * driver version is not in it, and a driver upgrade keeps every entry valid.  The load is
 * cuModuleLoadDataEx (kn_cuda_module_load_ptx): the driver JIT-compiles the PTX for the GPU (and
 * keeps its own compute cache of the result).  A cached payload that is malformed or that the
 * driver refuses is a warning, removed and rebuilt, exactly as a bad host object; a freshly
 * compiled PTX that the driver refuses is KILN_ERR_COMPILE with the JIT's log.
 *
 * Forward is asynchronous on the caller's stream (a CUstream, NULL: the legacy default stream),
 * through the launch helper shared with the CLI and the tests (runtime/attn_launch_cuda.h), which
 * packs every parameter of the kernel's signature (the variant's too) in its PTX width.
 * Launches of one kernel need no lock: the driver is thread-safe and the helper keeps every
 * launch's parameter values on the launching thread's stack.  A paged kernel's append of new
 * rows (api_cuda_append) is a second, small kernel (templates/attn_paged.c, kv_append), compiled
 * and loaded at the first forward that appends (under the kernel's launch_mu, uncached: it is
 * tiny) and launched on the same stream before the attention.
 *
 * Kernels are compiled by the one pipeline (api_compile: kn_compile_artifact) for the
 * context's target from the registry; the artefact is the PTX.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

#define PTX_MAGIC "KILNPTX1"
#define PTX_ABI 1u
#define PTX_HEADER 32

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static kiln_status cuda_fail(kiln_status s, const char *what, const kn_diag *e) {
  return api_fail(s, "%s: %s", what, e->message);
}

void api_gpu_target(kiln_context *ctx, const kn_arch *a, const char *name) {
  ctx->target_arch = a;
  snprintf(ctx->target_name, sizeof ctx->target_name, "%s", a->name);
  snprintf(ctx->device_name, sizeof ctx->device_name, "%.127s", name);
  /* the tuning key's arch: the target and the GPU model */
  snprintf(ctx->arch, sizeof ctx->arch, "%s-%.22s", a->name, name);
  /* the code depends on the target and on LLVM's backend (api/compiler.h: the same identity
   * with or without a compiler) */
  if (api_the_compiler.target_id(a, ctx->target_id, sizeof ctx->target_id))
    snprintf(ctx->target_id, sizeof ctx->target_id, "%s", a->name);
}

kiln_status api_gpu_params(const kiln_kernel *k, const char *what) {
  for (int i = 0; i < k->sig.n; i++)
    if (!kn_attn_cuda_param_bytes(&k->sig, i)) {
      char ty[48];
      kn_ty_format(k->sig.type[i], ty, sizeof ty);
      return api_fail(KILN_ERR_UNSUPPORTED, "%s: parameter %%%s is %s; a GPU kernel takes i32, "
                      "i64, f32 and pointer parameters", what, k->sig.name[i], ty);
    }
  return KILN_OK;
}

kiln_status api_cuda_open(kiln_context *ctx, const kn_device_info *dev, const char *target) {
  const kn_arch *a = kn_arch_get(target);
  if (!a) return api_fail(KILN_ERR_UNSUPPORTED, "target %s is not compiled into this kiln", target);
  kn_diag e;
  kn_status st = kn_cuda_init(&e);
  if (st != KN_OK) return cuda_fail(api_status_of(st), "CUDA", &e);
  /* whatever the driver says, a device that cannot be opened is no device to the caller */
  if (kn_cuda_device_open(dev->ordinal, &ctx->cuda, &e) != KN_OK)
    return cuda_fail(KILN_ERR_NO_DEVICE, "opening the CUDA device", &e);
  const kn_cuda_props *p = kn_cuda_device_get_props(ctx->cuda);
  ctx->kind = KN_DEVICE_CUDA;
  ctx->cuda_ordinal = dev->ordinal;
  ctx->cuda_smem_optin = p->shared_per_block_optin;
  ctx->compute_units = p->sm_count > 0 ? p->sm_count : dev->compute_units;
  /* (an H100 and an H200 are both sm_90a but need not agree on a tiling) */
  api_gpu_target(ctx, a, p->name);
  return KILN_OK;
}

void api_cuda_close(kiln_context *ctx) {
  if (ctx->cuda) kn_cuda_device_close(ctx->cuda);
  ctx->cuda = NULL;
}

void api_cuda_unload(kiln_kernel *k) {
  if (k->cu_mod) kn_cuda_module_unload(k->cu_mod);
  k->cu_mod = NULL;
  k->cu_fn = NULL;
  if (k->cu_append_mod) kn_cuda_module_unload(k->cu_append_mod);
  k->cu_append_mod = NULL;
  k->cu_append_fn = NULL;
}

static void *pack(const char *ptx, size_t n, int threads, int64_t smem, size_t *size) {
  *size = PTX_HEADER + n;
  uint8_t *p = malloc(*size);
  if (!p) return NULL;
  memcpy(p, PTX_MAGIC, 8);
  put_le(p + 8, PTX_ABI, 4);
  put_le(p + 12, (uint64_t)threads, 4);
  put_le(p + 16, (uint64_t)smem, 8);
  put_le(p + 24, n, 8);
  memcpy(p + PTX_HEADER, ptx, n);
  return p;
}

void api_cuda_store(kiln_context *ctx, const kn_cache_key *key, const kn_artifact *o) {
  size_t n;
  void *p = pack((const char *)o->data, o->size, o->threads, o->shared_bytes, &n);
  if (p) api_cache_put(ctx, key, p, n);
  free(p);
}

/* NULL when well formed (*ptx then a malloc'ed NUL-terminated copy), else why not */
static const char *unpack(const uint8_t *p, size_t size, char **ptx, int *threads,
                          int64_t *smem) {
  if (size < PTX_HEADER) return "payload shorter than its header";
  if (memcmp(p, PTX_MAGIC, 8)) return "not a kiln PTX payload";
  if (get_le(p + 8, 4) != PTX_ABI) return "PTX payload ABI version mismatch";
  uint64_t t = get_le(p + 12, 4), s = get_le(p + 16, 8), n = get_le(p + 24, 8);
  if (t == 0 || t > 1024 || t % 32) return "bad threads per block";
  if (s > (1u << 30)) return "bad shared memory size";
  if (PTX_HEADER + n != size) return "length mismatch";
  if (memchr(p + PTX_HEADER, 0, n)) return "NUL inside the PTX";
  char *copy = malloc(n + 1);
  if (!copy) return "out of memory";
  memcpy(copy, p + PTX_HEADER, n);
  copy[n] = 0;
  *ptx = copy;
  *threads = (int)t;
  *smem = (int64_t)s;
  return NULL;
}

/* loads ptx (or, ptx NULL, the cubin) into k, its kernel `symbol`; 0, or -1 with the driver's
 * message in e */
static int load(kiln_context *ctx, kiln_kernel *k, const char *ptx, const void *cubin,
                size_t cubin_n, const char *symbol, int threads, int64_t smem, kn_diag *e) {
  if (ptx ? kn_cuda_module_load_ptx(ctx->cuda, ptx, &k->cu_mod, e)
          : kn_cuda_module_load_cubin(ctx->cuda, cubin, cubin_n, &k->cu_mod, e))
    return -1;
  if (kn_cuda_module_kernel(k->cu_mod, symbol, &k->cu_fn, e)) {
    api_cuda_unload(k);
    return -1;
  }
  k->cu_launch = (kn_attn_cuda_launch_info){.threads = threads, .smem_bytes = smem};
  return 0;
}

kiln_status api_cuda_build(kiln_context *ctx, kiln_kernel *k, const kn_module *m,
                           const kn_cache_key *key, const char *what) {
  const char *hex = k->info.cache_key;
  kn_diag e;
  void *payload;
  size_t size;
  /* a modifier parameter of a type the launch cannot pass fails here, not at every forward */
  kiln_status bad = api_gpu_params(k, what);
  if (bad) return bad;
  if (api_cache_get(ctx, key, hex, &payload, &size) == KN_OK) {
    char *ptx = NULL;
    int threads = 0;
    int64_t smem = 0;
    const char *bad = unpack(payload, size, &ptx, &threads, &smem);
    free(payload);
    if (!bad && smem > ctx->cuda_smem_optin) bad = "needs more shared memory than the device has";
    if (!bad && load(ctx, k, ptx, NULL, 0, k->kname, threads, smem, &e)) bad = e.message;
    free(ptx);
    if (!bad) {
      k->info.source = KILN_SOURCE_CACHE;
      atomic_fetch_add(&ctx->stats.cache_hits, 1);
      return KILN_OK;
    }
    api_cache_reject(ctx, key, hex, bad);
  }

  kn_artifact c;
  kiln_status s = api_compile_named(ctx, m, k->kname, what, &c);
  if (s) return s;
  if (c.shared_bytes > ctx->cuda_smem_optin) {
    s = api_fail(KILN_ERR_UNSUPPORTED, "%s needs %lld bytes of shared memory per block; %s "
                 "allows %lld (choose smaller blocks)", what, (long long)c.shared_bytes,
                 ctx->device_name, (long long)ctx->cuda_smem_optin);
  } else if (load(ctx, k, (const char *)c.data, NULL, 0, k->kname, c.threads, c.shared_bytes,
                  &e)) {
    s = api_fail(KILN_ERR_COMPILE, "loading %s (%s PTX) into the driver failed: %s", what,
                 ctx->target_name, e.message);
  } else {
    /* stored only once the driver accepted it: the cache never holds PTX that cannot load */
    api_cuda_store(ctx, key, &c);
    k->info.source = KILN_SOURCE_COMPILED;
  }
  kn_artifact_free(&c);
  return s;
}

/* the append kernel of k's dtype and head dim (templates/attn_paged.c), compiled and loaded
 * once per kernel at its first use; the caller holds k->launch_mu */
static kiln_status append_load(kiln_kernel *k) {
  kiln_context *ctx = k->ctx;
  kn_diag d;
  kn_module *m = kn_module_new("<kv_append>");
  kn_artifact c;
  if (!kn_paged_append_build(m, kn_attn_kv_type(&k->desc), k->desc.head_dim, &d)) {
    kn_module_free(m);
    return api_fail(KILN_ERR_COMPILE, "building the paged append failed: %s", d.message);
  }
  kiln_status s = api_compile_named(ctx, m, "kv_append", "the paged append", &c);
  kn_module_free(m);
  if (s) return s;
  if (kn_cuda_module_load_ptx(ctx->cuda, (const char *)c.data, &k->cu_append_mod, &d) ||
      kn_cuda_module_kernel(k->cu_append_mod, "kv_append", &k->cu_append_fn, &d)) {
    if (k->cu_append_mod) kn_cuda_module_unload(k->cu_append_mod);
    k->cu_append_mod = NULL, k->cu_append_fn = NULL;
    s = api_fail(KILN_ERR_COMPILE, "loading the paged append into the driver failed: %s",
                 d.message);
  } else {
    k->cu_append_launch = (kn_attn_cuda_launch_info){.threads = c.threads,
                                                     .smem_bytes = c.shared_bytes};
  }
  kn_artifact_free(&c);
  return s;
}

kiln_status api_cuda_append(kiln_kernel *k, const kiln_attn_args *a, const kn_argval *args,
                            void *stream) {
  enum { K_SB = 13, V_SB = 16 };  /* the template's stride parameters (attention.h) */
  pthread_mutex_lock(&k->launch_mu);
  kiln_status s = k->cu_append_fn ? KILN_OK : append_load(k);
  pthread_mutex_unlock(&k->launch_mu);
  if (s) return s;
  const int64_t HK = a->kv_heads, D = k->desc.head_dim, N = a->seqlen_new;
  const int64_t dense[3] = {N * HK * D, D, HK * D};  /* (batch, seqlen_new, kv_heads, D) */
  const int64_t *ks = a->k_new_stride[0] || a->k_new_stride[1] || a->k_new_stride[2]
                          ? a->k_new_stride : dense;
  const int64_t *vs = a->v_new_stride[0] || a->v_new_stride[1] || a->v_new_stride[2]
                          ? a->v_new_stride : dense;
  /* the values, in kn_paged_append_names' order, and kernelParams pointing at them */
  uint64_t ptr[6] = {(uintptr_t)a->k, (uintptr_t)a->v, (uintptr_t)a->k_new,
                     (uintptr_t)a->v_new, (uintptr_t)a->block_table,
                     (uintptr_t)a->cache_seqlens};
  int32_t i32[4] = {a->page_size, a->num_pages, a->max_pages, a->kv_heads};
  int64_t i64[13] = {a->block_table_stride ? a->block_table_stride : a->max_pages,
                     args[K_SB].i, args[K_SB + 1].i, args[K_SB + 2].i,
                     args[V_SB].i, args[V_SB + 1].i, args[V_SB + 2].i,
                     ks[0], ks[1], ks[2], vs[0], vs[1], vs[2]};
  /* the kernel reads and writes rows in vectors as wide as the head dim allows, as the
   * attention kernel does (check_alignment in kiln.c checked the pools) */
  int64_t es = (int64_t)kn_scalar_size(kn_attn_kv_type(&k->desc)), vec = 16 / es;
  while (vec > 1 && D % vec) vec /= 2;
  bool aligned = (uintptr_t)a->k_new % (uintptr_t)(vec * es) == 0 &&
                 (uintptr_t)a->v_new % (uintptr_t)(vec * es) == 0;
  for (int i = 0; i < 3; i++) aligned &= ks[i] % vec == 0 && vs[i] % vec == 0;
  if (!aligned)
    return api_fail(KILN_ERR_INVALID, "kiln_forward: k_new and v_new must be %lld-byte aligned "
                    "with strides that are multiples of %lld elements at head dim %lld (the "
                    "append's vector accesses)", (long long)(vec * es), (long long)vec,
                    (long long)D);
  void *params[KN_PAGED_APPEND_NPARAMS];
  for (int i = 0; i < 6; i++) params[i] = &ptr[i];
  for (int i = 0; i < 4; i++) params[6 + i] = &i32[i];
  for (int i = 0; i < 13; i++) params[10 + i] = &i64[i];
  if ((int64_t)a->batch * HK > 65535)
    return api_fail(KILN_ERR_UNSUPPORTED, "kiln_forward: the paged append's grid (batch * "
                    "kv_heads = %lld) exceeds CUDA's y limit (65535)", (long long)(a->batch * HK));
  unsigned grid[3] = {(unsigned)N, (unsigned)(a->batch * HK), 1};
  unsigned block[3] = {(unsigned)k->cu_append_launch.threads, 1, 1};
  kn_diag e;
  kn_status st = kn_cuda_launch(k->cu_append_fn, grid, block,
                                (unsigned)k->cu_append_launch.smem_bytes,
                                (kn_cuda_stream)stream, params, &e);
  if (st == KN_OK) return KILN_OK;
  return api_fail(api_status_of(st), "kiln_forward (paged append) on %s: %s",
                  k->ctx->device_name, e.message);
}

kiln_status api_cuda_load(kiln_context *ctx, kiln_kernel *k, const char *ptx, const void *cubin,
                          size_t cubin_n, const char *symbol, int threads, int64_t smem) {
  kn_diag e;
  if (smem > ctx->cuda_smem_optin)
    return api_fail(KILN_ERR_UNSUPPORTED, "%s needs %lld bytes of shared memory per block; %s "
                    "allows %lld", symbol, (long long)smem, ctx->device_name,
                    (long long)ctx->cuda_smem_optin);
  if (load(ctx, k, ptx, cubin, cubin_n, symbol, threads, smem, &e))
    return api_fail(KILN_ERR_RUNTIME, "loading %s (%s) into the driver failed: %s", symbol,
                    ptx ? "PTX" : "cubin", e.message);
  return KILN_OK;
}

kiln_status api_cuda_forward(kiln_kernel *k, const kn_argval *args, const int grid[3],
                             void *stream) {
  kn_diag e;
  kn_status st =
      kn_attn_cuda_launch(k->cu_fn, &k->cu_launch, &k->sig, args, grid, (kn_cuda_stream)stream,
                          &e);
  if (st == KN_OK) return KILN_OK;
  return api_fail(api_status_of(st), "kiln_forward on %s: %s", k->ctx->device_name, e.message);
}
