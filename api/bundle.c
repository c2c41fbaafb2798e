/* bundle.c — the API's AOT bundles: kernels loaded from `kiln aot`'s output, never compiled.
 *
 * This file is the compile-free path of prepare: it reads the index (runtime/bundle.h), picks
 * the entry for a descriptor on the context's target, and loads its bytes through the device
 * (api/hip.c, api/cuda.c).  It calls nothing of the compiler or of LLVM, so a library without
 * the compiler (kiln_rt) builds it as it is; api_the_compiler.present (api/compiler.h) is the one
 * switch that says whether prepare may fall back to compiling a descriptor the bundle lacks.
 *
 * Which entries serve a context: those of its target ("gfx942", "sm_90a"); on CUDA also those of
 * a target compiled for every later GPU (sm_80's PTX, JIT-compiled by the driver for the device),
 * used only when the exact target has none.  Among a descriptor's entries the one whose seqlen_q
 * range holds the request's typical length (kiln_prepare_options.seqlen, else 1024) wins, else
 * the first: every entry computes the same thing, the range is a tiling preference.
 *
 * Loading: the file is read and checked against the index's size and XXH3-64 (a truncated or
 * damaged file is KILN_ERR_IO naming it, never loaded and never silently recompiled: what was
 * shipped is broken).  HIP takes the offload bundle whole (runtime/hip.c picks the chip's code
 * object) and the kernel by its symbol; CUDA takes the cubin when it was built for exactly the
 * device's compute capability, else (or when the driver refuses the cubin) the PTX, which the
 * driver JIT-compiles.  The launch facts (threads, shared memory) come from the index, and on
 * HIP are checked against the code object's own metadata.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* does an entry of arch serve the context?  2: its exact target; 1: a fallback; 0: no */
static int serves(const kiln_context *ctx, const char *arch) {
  if (!strcmp(arch, ctx->target_name)) return 2;
  const kn_arch *a = kn_arch_get(arch);
  if (ctx->kind != KN_DEVICE_CUDA || !a || a->isa != KN_ISA_NVPTX || a->cc_exact) return 0;
  const kn_cuda_props *p = kn_cuda_device_get_props(ctx->cuda);
  return p && p->cc_major * 10 + p->cc_minor >= a->cc_major * 10 + a->cc_minor ? 1 : 0;
}

kiln_status api_bundle_open(kiln_context *ctx, const char *path) {
  kn_aot_index all;
  kn_diag e;
  kn_status st = kn_aot_index_read(path, &all, &e);
  if (st != KN_OK)
    return api_fail(st == KN_E_NOMEM ? KILN_ERR_NOMEM : KILN_ERR_IO, "bundle: %s", e.message);
  kn_aot_index *ix = &ctx->bundle;
  *ix = all;
  ix->e = NULL;
  ix->n = 0;
  if (all.n && !(ix->e = calloc((size_t)all.n, sizeof *ix->e))) {
    kn_aot_index_free(&all);
    return api_fail(KILN_ERR_NOMEM, "out of memory reading the bundle %s", path);
  }
  for (int i = 0; i < all.n; i++)
    if (serves(ctx, all.e[i].arch)) ix->e[ix->n++] = all.e[i];
  api_log(ctx, KILN_LOG_INFO, "bundle %s: %d of its %d entries serve %s", ix->path, ix->n, all.n,
          ctx->target_name);
  kn_aot_index_free(&all);
  return KILN_OK;
}

void api_bundle_close(kiln_context *ctx) { kn_aot_index_free(&ctx->bundle); }

static kn_attn_config config_of(const kn_aot_entry *e) {
  return (kn_attn_config){.block_m = e->block_m, .block_n = e->block_n, .warps = e->warps,
                          .stages = e->stages, .mfma = e->mfma, .wgmma = e->wgmma != 0};
}

const kn_aot_entry *api_bundle_find(const kiln_context *ctx, const kn_attn_desc *d, int seqlen,
                                    const kn_attn_config *forced, kn_attn_config *cfg) {
  if (!ctx->bundle.n || d->mods) return NULL;
  char dk[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(d, dk, sizeof dk);
  const kn_aot_entry *best = NULL;
  int best_score = 0;
  for (int i = 0; i < ctx->bundle.n; i++) {
    const kn_aot_entry *e = &ctx->bundle.e[i];
    if (strcmp(e->desc, dk)) continue;
    kn_attn_config c = config_of(e);
    if (forced && memcmp(&c, forced, sizeof c)) continue;
    int score = serves(ctx, e->arch) * 2 + (seqlen >= e->seqlen_lo && seqlen <= e->seqlen_hi);
    if (score > best_score) best = e, best_score = score;
  }
  if (best) *cfg = config_of(best);
  return best;
}

kiln_status api_bundle_load(kiln_context *ctx, kiln_kernel *k, const kn_aot_entry *e,
                            const char *what) {
  const kn_aot_index *ix = &ctx->bundle;
  kn_diag d;
  void *bytes = NULL;
  size_t n = 0;
  kiln_status bad = api_gpu_params(k, what);
  if (bad) return bad;
  /* the kernel's cache key field names the bundle file's checksum: what was loaded */
  snprintf(k->info.cache_key, sizeof k->info.cache_key, "%016llx",
           (unsigned long long)e->file.xxh64);
  kiln_status s = KILN_OK;
  if (ctx->kind == KN_DEVICE_HIP) {
    kn_status st = kn_aot_file_read(ix, &e->file, &bytes, &n, &d);
    if (st != KN_OK) return api_fail(api_status_of(st), "%s from the bundle: %s", what, d.message);
    s = api_hip_load(ctx, k, bytes, n, e->symbol);
    if (!s && k->hip_threads != e->threads) {
      api_hip_unload(k);
      s = api_fail(KILN_ERR_IO, "bundle %s: %s on %s runs %d work-items; the index says %d",
                   ix->path, e->symbol, e->arch, k->hip_threads, e->threads);
    } else if (s) {
      char why[1024]; /* (api_fail writes the buffer kiln_last_error reads) */
      snprintf(why, sizeof why, "%s", kiln_last_error());
      s = api_fail(s, "%s from the bundle %s (%s): %s", what, ix->path, e->file.name, why);
    }
  } else if (ctx->kind == KN_DEVICE_CUDA) {
    const kn_cuda_props *p = kn_cuda_device_get_props(ctx->cuda);
    const kn_arch *a = kn_arch_get(e->arch);
    bool cubin = e->cubin.name[0] && a && p && p->cc_major == a->cc_major &&
                 p->cc_minor == a->cc_minor;
    if (cubin) {
      kn_status st = kn_aot_file_read(ix, &e->cubin, &bytes, &n, &d);
      if (st != KN_OK)
        return api_fail(api_status_of(st), "%s from the bundle: %s", what, d.message);
      s = api_cuda_load(ctx, k, NULL, bytes, n, e->symbol, e->threads, e->shared);
      free(bytes);
      bytes = NULL;
      if (!s) goto done;
      api_log(ctx, KILN_LOG_INFO, "bundle: the driver refused the cubin %s (%s); loading the PTX",
              e->cubin.name, kiln_last_error());
    }
    kn_status st = kn_aot_file_read(ix, &e->file, &bytes, &n, &d);
    if (st != KN_OK) return api_fail(api_status_of(st), "%s from the bundle: %s", what, d.message);
    if (memchr(bytes, 0, n)) {
      free(bytes);
      return api_fail(KILN_ERR_IO, "bundle file %s/%s holds a NUL byte: not PTX", ix->dir,
                      e->file.name);
    }
    ((char *)bytes)[n] = 0; /* (kn_aot_file_read leaves a byte past the end) */
    s = api_cuda_load(ctx, k, bytes, NULL, 0, e->symbol, e->threads, e->shared);
  } else {
    s = api_fail(KILN_ERR_UNSUPPORTED, "bundles hold GPU kernels; the host compiles its own");
  }
done:
  free(bytes);
  if (s) return s;
  k->info.source = KILN_SOURCE_BUNDLE;
  atomic_fetch_add(&ctx->stats.bundle_loads, 1);
  return KILN_OK;
}
