/* kiln.c — the public API (include/kiln.h): contexts, prepare (compile-or-load), forward.
 *
 * prepare, in order of cost:
 *   1. the context's memo: a hash map from the request (descriptor, policy, bucket, forced
 *      tiling) to its kernel — a mutex and a lookup;
 *   2. the tiling: forced, the template default, a tuning-database record, or a tuning run;
 *   3. a second memo level keyed by (descriptor, tiling): two requests that resolve to the same
 *      tiling share one kernel;
 *   4. the disk cache: the template is instantiated and printed, the key hashed from the
 *      descriptor's and tiling's canonical keys + the printed IR + the target's identity
 *      (triple, CPU, features, code model, LLVM version) + compile options + kiln version +
 *      payload ABI; a hit is an object linked into a fresh LLJIT;
 *   5. a compile to an object, stored in the cache, then loaded the same way — so the code run
 *      after a compile is byte for byte the code a later process loads.
 * Each memo key has an in-flight marker: the first thread to want a key builds it outside the
 * lock while later threads wait on the context's condition variable, so concurrent prepares of
 * one kernel compile it once.  A failed build removes its marker and the waiters retry (and
 * report their own error).
 *
 * Cache problems.  A corrupt entry (the cache checks length and checksum) or a payload whose
 * header or object does not load is a warning: it is removed and the kernel rebuilt, never
 * loaded.  An unwritable cache (read-only directory, full disk, injected faults) and an
 * unusable tuning database are one warning per context, then info: a serving process with a
 * read-only cache should not log on every kernel.  A cache directory writable by others is
 * refused at context creation (KILN_ERR_INSECURE) — loading code from a directory others can
 * write is running their code; the caller may pass no_cache=1 to run uncached instead.
 *
 * forward (and backward) checks before every launch (args.c, api_forward_args): sizes, the
 * variant's values, varlen's prefix sums and a paged call's block table and cache lengths (on
 * the host, where they are readable), and the described capacities of every buffer against the
 * shape and strides (docs/api.md "Varlen and capacities", the zero-stride rule), and fills the
 * kernel's arguments; then kiln_forward appends a paged call's new rows (on the host by
 * api_paged_append_host, args.c; on CUDA by api_cuda_append's kernel) and launches on the host
 * pool or the device's stream.
 *
 * Errors are a status plus a thread-local message (kiln_last_error, status.c), so concurrent callers
 * never see each other's messages.  The library never prints; see tune.c for the one progress
 * exception the tuning policy asks for.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "device.h"
#include "interp.h"

/* ---- logging ---- */

void api_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...) {
  if (!ctx || !ctx->log) return;
  char msg[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ctx->log(ctx->log_user, level, msg);
}

void api_log_unwritable(kiln_context *ctx, const char *msg) {
  bool first = atomic_exchange(&ctx->warned_unwritable, 1) == 0;
  api_log(ctx, first ? KILN_LOG_WARN : KILN_LOG_INFO, "%s", msg);
}

/* The cache reports through its log callback from inside get/put/open on the calling thread, so
 * a thread-local says which call it is: a warning during get is a corrupt entry (always worth a
 * warning), during open or put it means the cache cannot store (one warning per context). */
static _Thread_local bool tl_in_cache_get;

static void cache_log(void *user, int level, const char *message) {
  kiln_context *ctx = user;
  if (level >= 2) api_log(ctx, KILN_LOG_DEBUG, "%s", message);
  else if (tl_in_cache_get) api_log(ctx, KILN_LOG_WARN, "%s", message);
  else api_log_unwritable(ctx, message);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

/* ---- the memo: string keys -> kernels, with in-flight markers ---- */

struct memo_slot {
  memo_slot *next;
  bool ready;          /* false: a thread is building it */
  kiln_kernel *kernel;
  char key[];
};

static unsigned memo_hash(const char *s) {
  unsigned h = 2166136261u; /* FNV-1a: short keys, no adversary (the caller's own requests) */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h % API_MEMO_BUCKETS;
}

static memo_slot *memo_find(kiln_context *ctx, const char *key) {
  for (memo_slot *s = ctx->buckets[memo_hash(key)]; s; s = s->next)
    if (!strcmp(s->key, key)) return s;
  return NULL;
}

/* 1 and *k: ready.  0: the caller now owns the in-flight marker and must call memo_finish.
 * -1: out of memory. */
static int memo_acquire(kiln_context *ctx, const char *key, kiln_kernel **k) {
  pthread_mutex_lock(&ctx->mu);
  for (;;) {
    memo_slot *s = memo_find(ctx, key);
    if (!s) break;
    if (s->ready) {
      *k = s->kernel;
      pthread_mutex_unlock(&ctx->mu);
      return 1;
    }
    pthread_cond_wait(&ctx->cv, &ctx->mu);
  }
  size_t n = strlen(key) + 1;
  memo_slot *s = calloc(1, sizeof *s + n);
  if (!s) {
    pthread_mutex_unlock(&ctx->mu);
    return -1;
  }
  memcpy(s->key, key, n);
  unsigned h = memo_hash(key);
  s->next = ctx->buckets[h];
  ctx->buckets[h] = s;
  pthread_mutex_unlock(&ctx->mu);
  return 0;
}

/* publishes k for key (NULL: the build failed; the marker goes and waiters retry).  own: k is
 * new and joins the context's list of kernels to free. */
static void memo_finish(kiln_context *ctx, const char *key, kiln_kernel *k, bool own) {
  pthread_mutex_lock(&ctx->mu);
  memo_slot **pp = &ctx->buckets[memo_hash(key)];
  while (*pp && strcmp((*pp)->key, key)) pp = &(*pp)->next;
  memo_slot *s = *pp;
  if (s && k) {
    s->ready = true;
    s->kernel = k;
  } else if (s) {
    *pp = s->next;
    free(s);
  }
  if (k && own) {
    k->next = ctx->kernels;
    ctx->kernels = k;
  }
  pthread_cond_broadcast(&ctx->cv);
  pthread_mutex_unlock(&ctx->mu);
}

/* ---- context ---- */

static void ws_free(kiln_context *ctx, api_ws *w) {
  api_dev_free(ctx, w->ptr);
  w->ptr = NULL;
  w->bytes = 0;
}

static void kernel_free(kiln_kernel *k) {
  for (int i = 0; i < k->nws; i++) ws_free(k->ctx, &k->ws[i]);
  pthread_mutex_destroy(&k->decode_mu);
  pthread_mutex_destroy(&k->decode_launch_mu);
  api_dev_unload(k);
  pthread_mutex_destroy(&k->launch_mu);
  free(k->mods);
  free(k);
}

static pthread_once_t discover_once = PTHREAD_ONCE_INIT;
static kn_device_list discovered;

static void discover_devices(void) { kn_discover(&discovered); }

/* KILN_AUTOTUNE, read once per context (getenv is not safe against a concurrent setenv) */
static kiln_tune_policy env_policy(kiln_context *ctx) {
  const char *e = getenv("KILN_AUTOTUNE");
  if (!e || !*e) return KILN_TUNE_CONTEXT;
  if (!strcmp(e, "1")) return KILN_TUNE_AUTO;
  if (!strcmp(e, "0")) return KILN_TUNE_CACHED;
  if (!strcmp(e, "none")) return KILN_TUNE_NONE;
  api_log(ctx, KILN_LOG_WARN, "KILN_AUTOTUNE=%s is not 0, 1 or none; ignored", e);
  return KILN_TUNE_CONTEXT;
}

/* the registry's NVIDIA architecture a device string names ("sm_80", "sm_90a"), or NULL */
static const kn_arch *nv_arch_named(const char *device) {
  const kn_arch *a = kn_arch_get(device);
  return a && a->isa == KN_ISA_NVPTX ? a : NULL;
}

/* the ordinal of "cuda:N" (N decimal digits only, at most 1024), else -1 */
static int cuda_ordinal(const char *device) {
  const char *p = device + 5;
  long v = 0;
  for (; *p >= '0' && *p <= '9' && v <= 1024; p++) v = v * 10 + (*p - '0');
  return p == device + 5 || *p || v > 1024 ? -1 : (int)v;
}

/* the CUDA device a device string names, from discovery: "cuda" (the first NVIDIA GPU kiln
 * can run on), "cuda:N" (ordinal N), an NVIDIA target of the registry: one for any later GPU
 * ("sm_80": any sm_80+ GPU, compiled for sm_80) or for exactly one compute capability
 * ("sm_90a": a 9.0 GPU).  NULL with the reason in *why. */
static const kn_device_info *find_cuda(const char *device, char *why, size_t n) {
  pthread_once(&discover_once, discover_devices);
  if (discovered.cuda.status != KN_OK) {
    snprintf(why, n, "no CUDA device: %s", discovered.cuda.why.message);
    return NULL;
  }
  int ordinal = strncmp(device, "cuda:", 5) ? -1 : cuda_ordinal(device); /* (pick_device checked) */
  const kn_arch *want = nv_arch_named(device);
  bool exact = want && want->cc_exact;
  const kn_device_info *older = NULL;
  for (int i = 0; i < discovered.n; i++) {
    const kn_device_info *d = &discovered.dev[i];
    if (d->kind != KN_DEVICE_CUDA || (ordinal >= 0 && d->ordinal != ordinal)) continue;
    if (!d->target[0] || (exact && strcmp(d->target, want->name))) {
      if (!older) older = d;
      continue;
    }
    return d;
  }
  if (older && exact)
    snprintf(why, n, "CUDA device %d (%s, compute capability %d.%d) cannot run %s: it needs "
             "exactly %d.%d", older->ordinal, older->name, older->cc_major, older->cc_minor,
             want->name, want->cc_major, want->cc_minor);
  else if (older)
    snprintf(why, n, "CUDA device %d (%s, compute capability %d.%d) cannot run kiln's kernels: "
             "kiln needs 8.0 or later", older->ordinal, older->name, older->cc_major,
             older->cc_minor);
  else if (ordinal >= 0)
    snprintf(why, n, "no CUDA device with ordinal %d (%d present)", ordinal,
             discovered.cuda.device_count);
  else
    snprintf(why, n, "no CUDA device found");
  return NULL;
}

/* the registry's AMDGPU architecture a device string names ("gfx90a", "gfx942"), or NULL */
static const kn_arch *amd_arch_named(const char *device) {
  const kn_arch *a = kn_arch_get(device);
  return a && a->isa == KN_ISA_AMDGPU ? a : NULL;
}

/* the HIP device a device string names, from discovery: "hip" (the first AMD GPU kiln has a
 * target for), "hip:N" (ordinal N), an AMDGPU target of the registry ("gfx942": the first AMD
 * GPU of that chip).  NULL with the reason in *why. */
static const kn_device_info *find_hip(const char *device, char *why, size_t n) {
  pthread_once(&discover_once, discover_devices);
  if (discovered.hip.status != KN_OK) {
    snprintf(why, n, "HIP runtime: %s", discovered.hip.why.message);
    return NULL;
  }
  int ordinal = -1;
  if (!strncmp(device, "hip:", 4)) {
    char *end;
    long v = strtol(device + 4, &end, 10);
    if (end == device + 4 || *end || v < 0 || v > 1024) {
      snprintf(why, n, "'%s' is not hip:<ordinal>", device);
      return NULL;
    }
    ordinal = (int)v;
  }
  const kn_arch *want = amd_arch_named(device);
  const kn_device_info *other = NULL;
  for (int i = 0; i < discovered.n; i++) {
    const kn_device_info *d = &discovered.dev[i];
    if (d->kind != KN_DEVICE_HIP || (ordinal >= 0 && d->ordinal != ordinal)) continue;
    if (!d->target[0] || (want && strcmp(d->target, want->name))) {
      if (!other) other = d;
      continue;
    }
    return d;
  }
  if (other && want)
    snprintf(why, n, "HIP device %d (%s) is a %s, not a %s", other->ordinal, other->name,
             other->arch, want->name);
  else if (other)
    snprintf(why, n, "HIP device %d (%s) is a %s, for which kiln has no target", other->ordinal,
             other->name, other->arch);
  else if (ordinal >= 0)
    snprintf(why, n, "no HIP device with ordinal %d (%d present)", ordinal,
             discovered.hip.device_count);
  else
    snprintf(why, n, "no AMD GPU found");
  return NULL;
}

/* the host device; device_name: the caller's, else the CPU as discovery names it */
static kiln_status pick_host(kiln_context *ctx, const char *device_name) {
  ctx->kind = KN_DEVICE_HOST;
  ctx->target_arch = kn_arch_host();
  snprintf(ctx->target_name, sizeof ctx->target_name, "host");
  pthread_once(&discover_once, discover_devices);
  snprintf(ctx->device_name, sizeof ctx->device_name, "%s",
           device_name ? device_name : discovered.dev[discovered.n - 1].name);
  /* LLVM's name of the CPU keys the tuning records; libkiln_rt, which runs no host code, has
   * none */
  char cpu[64];
  if (api_the_compiler.host_cpu_name(cpu, sizeof cpu)) snprintf(cpu, sizeof cpu, "unknown");
  snprintf(ctx->arch, sizeof ctx->arch, "host-%.26s", cpu);
  if (api_the_compiler.target_id(ctx->target_arch, ctx->target_id, sizeof ctx->target_id))
    return api_fail(KILN_ERR_UNSUPPORTED, "host target description too long");
  const kn_device_info *host = discovered.n ? &discovered.dev[discovered.n - 1] : NULL;
  ctx->compute_units = host && host->kind == KN_DEVICE_HOST ? host->compute_units : 1;
  return KILN_OK;
}

static kiln_status pick_device(kiln_context *ctx, const char *device) {
  char why[700];
  if (!device || !strcmp(device, "auto")) {
    /* an AMD GPU kiln has a target for, else an NVIDIA one, else the host (kn_discover_best's
     * order) */
    const kn_device_info *hip = find_hip("hip", why, sizeof why);
    if (hip) return api_hip_open(ctx, hip, hip->target);
    const kn_device_info *cu = find_cuda("cuda", why, sizeof why);
    if (cu) return api_cuda_open(ctx, cu, cu->target);
    const kn_device_info *best = kn_discover_best(&discovered);
    if (best->kind != KN_DEVICE_HOST)
      api_log(ctx, KILN_LOG_INFO,
              "device %s (%s, target %s) found, but kiln cannot launch on it; using the host",
              best->name, kn_device_kind_str(best->kind), best->target[0] ? best->target : "none");
    return pick_host(ctx, NULL);
  }
  if (!strcmp(device, "host")) {
    char cpu[sizeof ctx->device_name];
    return pick_host(ctx, api_the_compiler.host_cpu_name(cpu, sizeof cpu) ? NULL : cpu);
  }
  const kn_arch *nv = nv_arch_named(device);
  if (!strcmp(device, "cuda") || !strncmp(device, "cuda:", 5) || nv) {
    /* a malformed name is the caller's error, whatever the machine has */
    if (!strncmp(device, "cuda:", 5) && cuda_ordinal(device) < 0)
      return api_fail(KILN_ERR_INVALID, "device '%s' is not cuda:<ordinal> (a decimal number, "
                      "0 to 1024)", device);
    const kn_device_info *cu = find_cuda(device, why, sizeof why);
    if (!cu) return api_fail(KILN_ERR_NO_DEVICE, "device '%s': %s", device, why);
    /* a target for any later GPU ("sm_80") asks for its code whatever the GPU (PTX for sm_80 runs
     * on every later one); otherwise the device's own target */
    return api_cuda_open(ctx, cu, nv && !nv->cc_exact ? nv->name : cu->target);
  }
  const kn_arch *amd = amd_arch_named(device);
  if (!strcmp(device, "hip") || !strncmp(device, "hip:", 4) || amd) {
    const kn_device_info *hip = find_hip(device, why, sizeof why);
    if (!hip) return api_fail(KILN_ERR_NO_DEVICE, "device '%s': %s", device, why);
    return api_hip_open(ctx, hip, hip->target);
  }
  if (kn_arch_get(device) || !strncmp(device, "sm_", 3) || !strncmp(device, "gfx", 3))
    return api_fail(KILN_ERR_UNSUPPORTED,
                    "device '%s': the API does not launch on this target (use \"host\", "
                    "\"cuda\", \"sm_80\", \"sm_90a\", \"hip\", an AMD chip such as "
                    "\"gfx942\", or \"auto\")", device);
  return api_fail(KILN_ERR_NO_DEVICE,
                  "unknown device '%s' (expected auto, host, cuda, cuda:N, hip, hip:N, or a "
                  "target)", device);
}

kiln_status kiln_context_create(const kiln_context_options *options, kiln_context **out) {
  kiln_context_options none = {0};
  if (!out) return api_fail(KILN_ERR_INVALID, "kiln_context_create: null output");
  *out = NULL;
  if (!options) options = &none;
  kiln_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return api_fail(KILN_ERR_NOMEM, "out of memory creating a context");
  ctx->log = options->log;
  ctx->log_user = options->log_user;
  ctx->progress = options->progress;
  ctx->progress_user = options->progress_user;
  pthread_mutex_init(&ctx->mu, NULL);
  pthread_mutex_init(&ctx->db_mu, NULL);
  pthread_cond_init(&ctx->cv, NULL);
  const char *e = getenv("KILN_TUNE_PROGRESS");
  ctx->progress_quiet = e && !strcmp(e, "0");
  if ((e = getenv("KILN_TUNE_SPACE"))) snprintf(ctx->env_space, sizeof ctx->env_space, "%s", e);
  kiln_tune_policy p = options->tune_policy;
  if (p < KILN_TUNE_CONTEXT || p > KILN_TUNE_AUTO) {
    kiln_context_destroy(ctx);
    return api_fail(KILN_ERR_INVALID, "tune_policy %d is not a kiln_tune_policy", (int)p);
  }
  ctx->policy = p == KILN_TUNE_CONTEXT ? KILN_TUNE_CACHED : p;
  ctx->env_policy = env_policy(ctx);
  if (ctx->env_policy) ctx->policy = ctx->env_policy;

  kiln_status s = pick_device(ctx, options->device);
  if (!s && options->bundle) s = api_bundle_open(ctx, options->bundle);
  if (s) {
    kiln_context_destroy(ctx);
    return s;
  }
  /* (a library without the compiler is not bundle_only: it also serves libkiln's cache) */
  ctx->bundle_only = options->bundle_only != 0;
  if (!options->no_cache) {
    kn_cache_config cc = {.dir = options->cache_dir, .log = cache_log, .log_user = ctx};
    kn_diag why;
    kn_status cs = kn_cache_open(&cc, &ctx->cache, &why);
    if (cs == KN_E_INSECURE) {
      s = api_fail(api_status_of(cs), "%s", why.message);
      api_log(ctx, KILN_LOG_ERROR, "%s", kiln_last_error());
      kiln_context_destroy(ctx);
      return s;
    }
    if (cs != KN_OK) {
      /* no usable directory (no HOME, mkdir failed): run uncached, say so once */
      char msg[1200];
      snprintf(msg, sizeof msg, "%s; running without a cache", why.message);
      api_log_unwritable(ctx, msg);
      ctx->cache = NULL;
    } else {
      snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s", kn_cache_dir(ctx->cache));
    }
  }
  api_log(ctx, KILN_LOG_DEBUG, "context: target %s (%s), cache %s, tuning policy %s",
          ctx->target_name, ctx->device_name, ctx->cache ? ctx->cache_dir : "none",
          ctx->policy == KILN_TUNE_AUTO ? "auto" : ctx->policy == KILN_TUNE_NONE ? "none" : "cached");
  *out = ctx;
  return KILN_OK;
}

void kiln_context_destroy(kiln_context *ctx) {
  if (!ctx) return;
  for (int b = 0; b < API_MEMO_BUCKETS; b++)
    for (memo_slot *s = ctx->buckets[b], *n; s; s = n) {
      n = s->next;
      free(s);
    }
  for (kiln_kernel *k = ctx->kernels, *n; k; k = n) {
    n = k->next;
    kernel_free(k);
  }
  api_cuda_close(ctx);
  api_hip_close(ctx);
  api_bundle_close(ctx);
  kn_tunedb_close(ctx->db);
  kn_cache_close(ctx->cache);
  pthread_cond_destroy(&ctx->cv);
  pthread_mutex_destroy(&ctx->mu);
  pthread_mutex_destroy(&ctx->db_mu);
  free(ctx);
}

const char *kiln_context_target(const kiln_context *ctx) { return ctx ? ctx->target_name : ""; }
const char *kiln_context_device_name(const kiln_context *ctx) { return ctx ? ctx->device_name : ""; }
const char *kiln_context_cache_dir(const kiln_context *ctx) { return ctx ? ctx->cache_dir : ""; }
int kiln_context_device_ordinal(const kiln_context *ctx) {
  if (!ctx) return -1;
  return ctx->kind == KN_DEVICE_CUDA ? ctx->cuda_ordinal
       : ctx->kind == KN_DEVICE_HIP ? ctx->hip_ordinal : -1;
}

void kiln_context_stats(kiln_context *ctx, kiln_stats *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  if (!ctx) return;
  o->prepares = atomic_load(&ctx->stats.prepares);
  o->memo_hits = atomic_load(&ctx->stats.memo_hits);
  o->cache_hits = atomic_load(&ctx->stats.cache_hits);
  o->compiles = atomic_load(&ctx->stats.compiles);
  o->corrupt_entries = atomic_load(&ctx->stats.corrupt_entries);
  o->not_stored = atomic_load(&ctx->stats.not_stored);
  o->tuning_hits = atomic_load(&ctx->stats.tuning_hits);
  o->tunings = atomic_load(&ctx->stats.tunings);
  o->candidates = atomic_load(&ctx->stats.candidates);
  o->launches = atomic_load(&ctx->stats.launches);
  o->bundle_loads = atomic_load(&ctx->stats.bundle_loads);
}

/* the tuning database beside the cache, opened on first use */
kn_tunedb *api_db(kiln_context *ctx) {
  pthread_mutex_lock(&ctx->db_mu);
  if (!ctx->db_tried && ctx->cache) {
    ctx->db_tried = true;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", ctx->cache_dir, KN_TUNEDB_FILE);
    kn_diag why;
    /* in the directory the cache checked, through its descriptor (not the path again) */
    kn_status s = kn_tunedb_open_at(kn_cache_dir_fd(ctx->cache), KN_TUNEDB_FILE, path, &ctx->db,
                                    &why);
    if (s == KN_RECREATED) {
      api_log(ctx, KILN_LOG_WARN, "%s", why.message);
    } else if (s != KN_OK) {
      char msg[5400];
      snprintf(msg, sizeof msg, "tuning database %s unusable (%s); tuning results are not kept",
               path, why.message);
      api_log_unwritable(ctx, msg);
      ctx->db = NULL;
    }
  }
  kn_tunedb *db = ctx->db;
  pthread_mutex_unlock(&ctx->db_mu);
  return db;
}

/* ---- keys, payloads, building ---- */

/* the host-object payload: magic, ABI, symbol and tile bytes, then the object */
#define PAYLOAD_MAGIC "KILNHOB1"
#define PAYLOAD_ABI 1u
#define PAYLOAD_HEADER 32

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void *api_pack(const kn_artifact *o, size_t *size) {
  size_t ns = strlen(o->symbol);
  *size = PAYLOAD_HEADER + ns + o->size;
  uint8_t *p = malloc(*size);
  if (!p) return NULL;
  memcpy(p, PAYLOAD_MAGIC, 8);
  put_le(p + 8, PAYLOAD_ABI, 4);
  put_le(p + 12, ns, 4);
  put_le(p + 16, o->tile_bytes, 8);
  put_le(p + 24, o->size, 8);
  memcpy(p + PAYLOAD_HEADER, o->symbol, ns);
  memcpy(p + PAYLOAD_HEADER + ns, o->data, o->size);
  return p;
}

/* NULL when the payload is well formed, else why not */
static const char *unpack(const uint8_t *p, size_t size, char *symbol, size_t symsize,
                          const uint8_t **obj, size_t *objsize) {
  if (size < PAYLOAD_HEADER) return "payload shorter than its header";
  if (memcmp(p, PAYLOAD_MAGIC, 8)) return "not a kiln host object";
  if (get_le(p + 8, 4) != PAYLOAD_ABI) return "host object ABI version mismatch";
  uint64_t ns = get_le(p + 12, 4), no = get_le(p + 24, 8);
  if (ns == 0 || ns >= symsize) return "bad symbol length";
  if (PAYLOAD_HEADER + ns + no != size) return "length mismatch";
  memcpy(symbol, p + PAYLOAD_HEADER, ns);
  symbol[ns] = 0;
  *obj = p + PAYLOAD_HEADER + ns;
  *objsize = (size_t)no;
  return NULL;
}

const char *api_kind_symbol(api_kind kind) {
  return kind == API_DECODE           ? kn_attn_decode_symbol(KN_DECODE_READ_ANY)
         : kind == API_DECODE_IN_PAGE ? kn_attn_decode_symbol(KN_DECODE_READ_IN_PAGE)
         : kind == API_DECODE_GATHER  ? kn_attn_decode_symbol(KN_DECODE_READ_GATHER)
         : kind == API_DECODE_PAGES   ? kn_attn_decode_symbol(KN_DECODE_READ_PAGES)
         : kind == API_COMBINE        ? "attn_decode_combine"
                                      : "attn_fwd";
}

kn_module *api_build_module_of(api_kind kind, const kn_attn_desc *d, const kn_attn_config *c,
                               kn_diag *diag) {
  return api_build_module(api_kind_symbol(kind), d, c, diag);
}

kn_module *api_build_module(const char *kname, const kn_attn_desc *d, const kn_attn_config *c,
                            kn_diag *diag) {
  const bool bwd = strncmp(kname, "attn_bwd", 8) == 0;
  const int read = kn_attn_decode_read_of(kname);
  const bool dec = read >= 0;
  const bool comb = strcmp(kname, "attn_decode_combine") == 0;
  kn_module *m = kn_module_new(bwd ? "<attn_bwd>" : dec || comb ? "<attn_decode>" : "<attn_fwd>");
  if (!m) {
    snprintf(diag->message, sizeof diag->message, "out of memory");
    return NULL;
  }
  if (bwd ? kn_attn_bwd_build(m, d, c, diag) != 0
          : !(dec    ? kn_attn_decode_build(m, d, c, (kn_decode_read)read, diag)
              : comb ? kn_attn_decode_combine_build(m, d, diag)
                     : kn_attn_fwd_build(m, d, c, diag))) {
    kn_module_free(m);
    return NULL;
  }
  return m;
}

kn_cache_key api_cache_key(const kiln_context *ctx, const char *kname, const kn_attn_desc *d,
                           const kn_attn_config *c, const kn_module *m) {
  char *ir = kn_print(m);
  /* the printed IR determines the code; the canonical keys are in as well, so what a key was
   * made for is stated in it and no descriptor field can be left out of it */
  char dk[KN_ATTN_KEY_MAX], ck[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(d, dk, sizeof dk);
  kn_attn_config_key(c, ck, sizeof ck);
  /* the payload's ABI names the device kind too: a host object and a PTX payload can never be
   * mistaken for each other, even for one IR */
  const char *abi = ctx->kind == KN_DEVICE_CUDA ? "cuda-ptx-abi-1"
                  : ctx->kind == KN_DEVICE_HIP ? "hip-codeobj-abi-1" : "host-object-abi-1";
  /* the compile options: kn_compile_object with NULL (O3, unchecked); an option that changes the
   * code, such as kn_compile_options.check_bounds, must be named here when it is used */
  static const char opts[] = "O3";
  const char *rev = kn_codegen_revision();
  kn_cache_part parts[] = {
      {abi, strlen(abi)},
      {kname, strlen(kname)},
      {dk, strlen(dk)},
      {ck, strlen(ck)},
      {ir ? ir : "", ir ? strlen(ir) : 0},
      {ctx->target_id, strlen(ctx->target_id)},
      {opts, sizeof opts - 1},
      {KILN_VERSION_STRING, sizeof KILN_VERSION_STRING - 1},
      {rev, strlen(rev)},
  };
  kn_cache_key key = kn_cache_key_of(parts, (int)(sizeof parts / sizeof parts[0]));
  free(ir);
  return key;
}

void api_cache_put(kiln_context *ctx, const kn_cache_key *key, const void *payload, size_t n) {
  if (!ctx->cache) return;
  if (kn_cache_put(ctx->cache, key, payload, n, NULL) == KN_NOT_STORED)
    atomic_fetch_add(&ctx->stats.not_stored, 1);
}

void api_store(kiln_context *ctx, const kn_cache_key *key, const kn_artifact *o) {
  if (!ctx->cache) return;
  size_t n;
  void *payload = api_pack(o, &n);
  if (!payload) return;
  api_cache_put(ctx, key, payload, n);
  free(payload);
}

kiln_status api_compile(kiln_context *ctx, const kn_module *m, const char *what, kn_artifact *out) {
  return api_compile_named(ctx, m, "attn_fwd", what, out);
}

kiln_status api_compile_named(kiln_context *ctx, const kn_module *m, const char *kname,
                              const char *what, kn_artifact *out) {
  kn_diag d;
  if (api_the_compiler.compile(m, kname, ctx->target_arch, out, &d))
    return api_fail(api_the_compiler.present ? KILN_ERR_COMPILE : KILN_ERR_UNSUPPORTED,
                    api_the_compiler.present ? "compiling %s for %s failed: %s"
                                             : "%s for %s is not in the cache: %s",
                    what, ctx->target_name, d.message);
  atomic_fetch_add(&ctx->stats.compiles, 1);
  return KILN_OK;
}

void api_describe(const char *kname, const kn_attn_desc *d, const kn_attn_config *c, char *out,
                  size_t n) {
  char dk[KN_ATTN_KEY_MAX], ck[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(d, dk, sizeof dk);
  kn_attn_config_key(c, ck, sizeof ck);
  snprintf(out, n, "%s [%s] [%s]", kname, dk, ck);
}

void api_describe_kind(api_kind kind, const kn_attn_desc *d, const kn_attn_config *c, char *out,
                       size_t n) {
  api_describe(api_kind_symbol(kind), d, c, out, n);
}

kn_status api_cache_get(kiln_context *ctx, const kn_cache_key *key, const char *hex,
                        void **payload, size_t *size) {
  *payload = NULL;
  *size = 0;
  if (!ctx->cache) return KN_MISS;
  kn_diag why;
  tl_in_cache_get = true;
  kn_status cs = kn_cache_get(ctx->cache, key, payload, size, &why);
  tl_in_cache_get = false;
  /* a corrupt entry was removed and warned of through the log callback: a miss */
  if (cs == KN_E_CORRUPT) atomic_fetch_add(&ctx->stats.corrupt_entries, 1);
  else if (cs < 0) api_log(ctx, KILN_LOG_DEBUG, "cache get %s: %s", hex, why.message);
  return cs;
}

/* the cache's checksum held, but what it holds is not a loadable kernel (another kiln build's
 * payload, a bug): never run it; remove it and rebuild */
void api_cache_reject(kiln_context *ctx, const kn_cache_key *key, const char *hex,
                      const char *why) {
  api_log(ctx, KILN_LOG_WARN, "cache entry %s/objects-v1/%s is not a loadable kernel (%s); "
          "removed, rebuilding", ctx->cache_dir, hex, why);
  atomic_fetch_add(&ctx->stats.corrupt_entries, 1);
  kn_cache_remove(ctx->cache, key, NULL);
}

/* cache lookup: 0 with *obj loaded, or -1 (miss, corrupt, bad payload: all logged) */
static int load_cached(kiln_context *ctx, const kn_cache_key *key, const char *hex,
                       kn_host_object **obj) {
  void *payload = NULL;
  size_t size = 0;
  if (api_cache_get(ctx, key, hex, &payload, &size) != KN_OK) return -1;
  char symbol[160];
  const uint8_t *bytes;
  size_t nbytes;
  const char *bad = unpack(payload, size, symbol, sizeof symbol, &bytes, &nbytes);
  kn_diag d;
  if (!bad && api_the_compiler.host_load(bytes, nbytes, symbol, obj, &d) == 0) {
    free(payload);
    return 0;
  }
  api_cache_reject(ctx, key, hex, bad ? bad : d.message);
  free(payload);
  return -1;
}

/* a new kernel of ctx, its kernel kname (kernel `kind` of the descriptor: API_FWD for a forward
 * or a backward part), for (d, c, sig), nothing loaded yet; NULL when out of memory */
static kiln_kernel *kernel_new(kiln_context *ctx, const char *kname, const kn_attn_desc *d,
                               const kn_attn_sig *sig, const kn_attn_config *c, api_kind kind) {
  kiln_kernel *k = calloc(1, sizeof *k);
  if (!k || (d->mods && !(k->mods = strdup(d->mods)))) {
    free(k);
    return NULL;
  }
  k->ctx = ctx;
  k->kname = kname;
  /* the kernel's own descriptor: its copy of the text; the caller's name for it is not kept */
  k->desc = *d;
  k->desc.mods = k->mods;
  k->desc.mods_file = NULL;
  k->cfg = *c;
  k->kind = kind;
  k->sig = *sig;
  k->n_user_params = api_user_params(d, sig, k->user_param);
  pthread_mutex_init(&k->launch_mu, NULL);
  pthread_mutex_init(&k->decode_mu, NULL);
  pthread_mutex_init(&k->decode_launch_mu, NULL);
  return k;
}

/* the kernel's info once it is loaded */
static void kernel_loaded(kiln_context *ctx, kiln_kernel *k, const char *what, double t0,
                          bool tuned) {
  const kn_attn_config *c = &k->cfg;
  k->info.prepare_ms = now_ms() - t0;
  k->info.desc = api_desc_to_public(&k->desc);
  k->info.block_m = c->block_m;
  k->info.wgmma = c->wgmma;
  k->info.block_n = c->block_n;
  k->info.warps = c->warps;
  k->info.stages = c->stages;
  k->info.tuned = tuned;
  snprintf(k->info.target, sizeof k->info.target, "%s", ctx->target_name);
  api_log(ctx, KILN_LOG_INFO, "%s: %s in %.2f ms (key %s)",
          k->info.source == KILN_SOURCE_CACHE ? "cache hit"
          : k->info.source == KILN_SOURCE_BUNDLE ? "bundle" : "compiled",
          what, k->info.prepare_ms, k->info.cache_key);
}

/* be: the AOT bundle's entry of a forward kernel (NULL: compile or take it from the cache) */
static kiln_status build_kernel(kiln_context *ctx, const char *kname, const kn_attn_desc *d,
                                const kn_attn_sig *sig, const kn_attn_config *c, bool tuned,
                                api_kind kind,
                                const kn_aot_entry *be, kiln_kernel **out) {
  double t0 = now_ms();
  kn_diag diag;
  char what[2 * KN_ATTN_KEY_MAX + 32];
  api_describe(kname, d, c, what, sizeof what);
  if (be) {
    /* the compile-free path: nothing of the template is built */
    kiln_kernel *k = kernel_new(ctx, kname, d, sig, c, kind);
    if (!k) return api_fail(KILN_ERR_NOMEM, "out of memory");
    kiln_status s = api_bundle_load(ctx, k, be, what);
    if (s) {
      kernel_free(k);
      return s;
    }
    kernel_loaded(ctx, k, what, t0, tuned);
    *out = k;
    return KILN_OK;
  }
  kn_module *m = api_build_module(kname, d, c, &diag);
  if (!m) return api_fail(KILN_ERR_UNSUPPORTED, "%s", diag.message);
  kiln_kernel *k = kernel_new(ctx, kname, d, sig, c, kind);
  if (!k) {
    kn_module_free(m);
    return api_fail(KILN_ERR_NOMEM, "out of memory");
  }
  kn_cache_key key = api_cache_key(ctx, kname, d, c, m);
  kn_cache_key_hex(&key, k->info.cache_key);

  kiln_status s = KILN_OK;
  if (ctx->kind == KN_DEVICE_CUDA) {
    s = api_cuda_build(ctx, k, m, &key, what);
  } else if (ctx->kind == KN_DEVICE_HIP) {
    s = api_hip_build(ctx, k, m, &key, what);
  } else if (!api_the_compiler.present) {
    /* before the cache: a host object this library cannot load is not a bad entry to remove */
    s = api_fail(KILN_ERR_UNSUPPORTED, "%s on the host: host kernels run in LLVM's ORC JIT, and "
                 "this library (%s) has no compiler; link libkiln", what,
                 api_the_compiler.library);
  } else if (ctx->cache && load_cached(ctx, &key, k->info.cache_key, &k->obj) == 0) {
    k->info.source = KILN_SOURCE_CACHE;
    atomic_fetch_add(&ctx->stats.cache_hits, 1);
  } else {
    kn_artifact o;
    if (!(s = api_compile_named(ctx, m, kname, what, &o))) {
      api_store(ctx, &key, &o);
      int rc = api_the_compiler.host_load(o.data, o.size, o.symbol, &k->obj, &diag);
      kn_artifact_free(&o);
      if (rc) s = api_fail(KILN_ERR_COMPILE, "loading %s failed: %s", what, diag.message);
      k->info.source = KILN_SOURCE_COMPILED;
    }
  }
  kn_module_free(m);
  if (s) {
    kernel_free(k);
    return s;
  }
  kernel_loaded(ctx, k, what, t0, tuned);
  *out = k;
  return KILN_OK;
}

/* the second memo level: one kernel per (descriptor, tiling) */
static kiln_status get_kernel(kiln_context *ctx, const char *kname, const kn_attn_desc *d,
                              const kn_attn_sig *sig, const kn_attn_config *c, bool tuned,
                              api_kind kind,
                              const kn_aot_entry *be, kiln_kernel **out) {
  char key[2 * KN_ATTN_KEY_MAX + 64], dk[KN_ATTN_KEY_MAX], ck[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(d, dk, sizeof dk);
  kn_attn_config_key(c, ck, sizeof ck);
  snprintf(key, sizeof key, "kernel|%s|%s|%s|tuned=%d", kname, dk, ck, tuned);
  int m = memo_acquire(ctx, key, out);
  if (m > 0) return KILN_OK;
  if (m < 0) return api_fail(KILN_ERR_NOMEM, "out of memory");
  kiln_kernel *k = NULL;
  kiln_status s = build_kernel(ctx, kname, d, sig, c, tuned, kind, be, &k);
  memo_finish(ctx, key, s ? NULL : k, true);
  *out = k;
  return s;
}

kiln_status api_get_kernel(kiln_context *ctx, const kn_attn_desc *d, const kn_attn_sig *sig,
                           const kn_attn_config *c, bool tuned, api_kind kind,
                           kiln_kernel **out) {
  return get_kernel(ctx, api_kind_symbol(kind), d, sig, c, tuned, kind, NULL, out);
}

/* ---- versions ---- */

const char *kiln_version(void) { return KILN_VERSION_STRING; }

/* the LLVM that compiles (libkiln) or that generated the code this library loads (libkiln_rt) */
const char *kiln_llvm_version(void) { return api_the_compiler.llvm_version(); }

/* ---- prepare ---- */

void api_tune_key(const kiln_context *ctx, const kn_attn_desc *d, int seqlen, kn_tune_key *key) {
  memset(key, 0, sizeof *key);
  snprintf(key->template_name, sizeof key->template_name, "fwd");
  kn_attn_desc_key(d, key->variant, sizeof key->variant);
  snprintf(key->dtype, sizeof key->dtype, "%s", kn_scalar_name(d->dtype));
  key->head_dim = d->head_dim;
  key->seq_bucket = kn_tune_seq_bucket(seqlen);
  snprintf(key->arch, sizeof key->arch, "%s", ctx->arch);
  snprintf(key->kiln_version, sizeof key->kiln_version, "%s", KILN_VERSION_STRING);
}

/* a request that forces its tiling (block_m and block_n, or warps): true with *c the template's
 * default with the forced values in it; no tuning then */
static bool forced_config(const kiln_context *ctx, const kn_attn_desc *d,
                          const kiln_prepare_options *o, kn_attn_config *c) {
  *c = kn_attn_default_config(ctx->target_arch, d);
  if (!o || (!o->block_m && !o->warps && !o->wgmma)) return false;
  if (o->block_m) {
    c->block_m = o->block_m;
    c->block_n = o->block_n;
  }
  if (o->warps) c->warps = o->warps;
  if (o->wgmma) {  /* one 64-row slab per warpgroup: block_m = 16 x warps */
    c->wgmma = true;
    if (o->block_m && !o->warps) c->warps = c->block_m / 16;
    else if (!o->block_m && o->warps) c->block_m = 16 * c->warps;
    else if (!o->block_m) c->warps = c->block_m / 16;
  }
  return true;
}

/* the tiling for a request; tuned says whether it came from tuning */
static kiln_status resolve_config(kiln_context *ctx, const kn_attn_desc *d,
                                  const kn_attn_sig *sig, const kiln_prepare_options *o,
                                  kiln_tune_policy policy, int seqlen, kn_attn_config *c,
                                  bool *tuned) {
  *c = kn_attn_default_config(ctx->target_arch, d);
  *tuned = false;
  if (forced_config(ctx, d, o, c)) {
    kn_diag diag;
    if (kn_attn_check_on(ctx->target_arch, d, c, &diag))
      return api_fail(KILN_ERR_UNSUPPORTED, "%s", diag.message);
    return KILN_OK;
  }
  /* the default is the first tiling that fits the target; when none does (head dim 320 on
   * NVIDIA: the accumulator exceeds the registers), the request is unsupported there, and no
   * tuning record or tuner can make it otherwise (a record's tiling is checked the same way) */
  kn_diag dd;
  if (kn_attn_check_on(ctx->target_arch, d, c, &dd))
    return api_fail(KILN_ERR_UNSUPPORTED, "%s", dd.message);
  if (policy == KILN_TUNE_NONE) return KILN_OK;
  /* bad tuning options are the caller's error, not a tuning failure to serve around */
  kiln_status s = policy == KILN_TUNE_AUTO ? api_tune_check(d, o, seqlen) : KILN_OK;
  if (s) return s;
  /* the tuner times dense f16 / bf16 / f32 problems only: a varlen, paged or fp8 kernel reads
   * records, never tunes */
  if (policy == KILN_TUNE_AUTO && (d->layout != KN_ATTN_DENSE || kn_attn_is_fp8(d))) {
    api_log(ctx, KILN_LOG_INFO, "%s kernels are not tuned yet: KILN_TUNE_AUTO acts as "
            "KILN_TUNE_CACHED", kn_attn_is_fp8(d) ? "fp8" : d->layout == KN_ATTN_VARLEN
                                                                  ? "varlen" : "paged");
    policy = KILN_TUNE_CACHED;
  }
  /* no tuner without a compiler: AUTO reads records like CACHED, and says so once */
  if (policy == KILN_TUNE_AUTO && !api_the_compiler.present) {
    if (atomic_exchange(&ctx->warned_no_tuner, 1) == 0)
      api_log(ctx, KILN_LOG_INFO, "autotuning on %s needs a compiler (libkiln): KILN_TUNE_AUTO "
              "acts as KILN_TUNE_CACHED", ctx->target_name);
    policy = KILN_TUNE_CACHED;
  }
  kn_tune_key key;
  api_tune_key(ctx, d, seqlen, &key);
  kn_tunedb *db = api_db(ctx);
  kn_tune_record rec;
  kn_diag gd;
  kn_status gs = db ? kn_tunedb_get(db, &key, &rec, &gd) : KN_MISS;
  if (gs == KN_E_CORRUPT) api_log(ctx, KILN_LOG_WARN, "%s", gd.message); /* then: no record */
  if (gs == KN_OK) {
    kn_attn_config t = api_config_of(&rec.config);
    kn_diag diag;
    if (kn_attn_check_on(ctx->target_arch, d, &t, &diag) == 0) {
      *c = t;
      *tuned = true;
      atomic_fetch_add(&ctx->stats.tuning_hits, 1);
      char ck[KN_ATTN_KEY_MAX];
      kn_attn_config_key(&t, ck, sizeof ck);
      api_log(ctx, KILN_LOG_INFO, "tuning record: fwd [%s] bucket %d on %s -> [%s] (%.1f us)",
              key.variant, key.seq_bucket, key.arch, ck, rec.time_us);
      return KILN_OK;
    }
    api_log(ctx, KILN_LOG_WARN, "tuning record for fwd [%s] is unusable (%s); ignored",
            key.variant, diag.message);
  }
  if (policy != KILN_TUNE_AUTO) return KILN_OK;
  kn_attn_config best;
  s = api_tune(ctx, d, sig, o, seqlen, 1, NULL, &best);
  if (s) {
    /* a serving process keeps going on the default tiling */
    api_log(ctx, KILN_LOG_WARN, "tuning failed (%s); using the default tiling", kiln_last_error());
    return KILN_OK;
  }
  *c = best;
  *tuned = true;
  return KILN_OK;
}

kiln_status kiln_prepare(kiln_context *ctx, const kiln_attn_desc *desc,
                         const kiln_prepare_options *o, kiln_kernel **out) {
  if (!ctx || !out) return api_fail(KILN_ERR_INVALID, "kiln_prepare: null context or output");
  *out = NULL;
  kn_attn_desc d;
  kiln_status s = api_desc_from_public(desc, &d);
  if (s) return s;
  /* KILN_AUTOTUNE overrides the policy, the context's and the request's alike */
  kiln_tune_policy policy = o && o->tune_policy ? o->tune_policy : ctx->policy;
  if (ctx->env_policy) policy = ctx->env_policy;
  if (policy < KILN_TUNE_CONTEXT || policy > KILN_TUNE_AUTO)
    return api_fail(KILN_ERR_INVALID, "tune_policy %d is not a kiln_tune_policy", (int)policy);
  if (o && (!o->block_m != !o->block_n))
    return api_fail(KILN_ERR_INVALID, "block_m and block_n must be given together");
  if (o && o->seqlen < 0) return api_fail(KILN_ERR_INVALID, "seqlen %d is negative", o->seqlen);
  if (o && o->warps < 0) return api_fail(KILN_ERR_INVALID, "warps %d is negative", o->warps);
  int seqlen = o && o->seqlen ? o->seqlen : 1024;
  kn_attn_config forced;
  bool is_forced = forced_config(ctx, &d, o, &forced);
  int bucket = is_forced || policy == KILN_TUNE_NONE ? 0 : kn_tune_seq_bucket(seqlen);

  /* the request: what is computed, how the tiling is chosen, and the forced tiling if any */
  char key[2 * KN_ATTN_KEY_MAX + 64], dk[KN_ATTN_KEY_MAX], fk[KN_ATTN_KEY_MAX] = "none";
  kn_attn_desc_key(&d, dk, sizeof dk);
  if (is_forced) kn_attn_config_key(&forced, fk, sizeof fk);
  snprintf(key, sizeof key, "request|%s|policy=%d;bucket=%d|forced=%s", dk, (int)policy, bucket,
           fk);
  kiln_kernel *k = NULL;
  int m = memo_acquire(ctx, key, &k);
  if (m < 0) return api_fail(KILN_ERR_NOMEM, "out of memory");
  if (m > 0) {
    atomic_fetch_add(&ctx->stats.memo_hits, 1);
    atomic_fetch_add(&ctx->stats.prepares, 1);
    *out = k;
    return KILN_OK;
  }
  /* the kernel's signature: its modifier text parsed once, here (a malformed one fails) */
  kn_attn_sig sig;
  kn_attn_config c;
  bool tuned = false;
  s = api_signature(&d, &sig);
  /* the AOT bundle first: a descriptor it holds is loaded with the bundle's tiling, never
   * tuned or compiled */
  const kn_aot_entry *be = NULL;
  if (!s) be = api_bundle_find(ctx, &d, seqlen, is_forced ? &forced : NULL, &c);
  if (be) tuned = be->tuned;
  if (!s && !be && ctx->bundle_only)
    s = api_fail(KILN_ERR_UNSUPPORTED, "bundle_only: the bundle %s has no kernel for [%s]%s on "
                 "%s, and this context may not compile (bundle_only)",
                 ctx->bundle.path[0] ? ctx->bundle.path : "(none)", dk,
                 is_forced ? " with the forced tiling" : "", ctx->target_name);
  if (!s && !be) s = resolve_config(ctx, &d, &sig, o, policy, seqlen, &c, &tuned);
  /* off32 (templates/attention.h): the kernel prepared is the one for K/V slabs below 2^31
   * bytes; a launch past that takes its twin without off32 (api_forward_kernel) */
  if (!s && !be && kn_attn_off32_applies(ctx->target_arch, &d)) c.off32 = true;
  if (!s) s = get_kernel(ctx, "attn_fwd", &d, &sig, &c, tuned, API_FWD, be, &k);
  memo_finish(ctx, key, s ? NULL : k, false);
  if (s) {
    api_log(ctx, KILN_LOG_ERROR, "prepare: %s", kiln_last_error());
    return s;
  }
  atomic_fetch_add(&ctx->stats.prepares, 1);
  *out = k;
  return KILN_OK;
}

kiln_status kiln_kernel_get_info(const kiln_kernel *k, kiln_kernel_info *out) {
  if (!k || !out) return api_fail(KILN_ERR_INVALID, "kiln_kernel_get_info: null argument");
  *out = k->info;
  return KILN_OK;
}

/* ---- forward ---- */

/* what args.c's checks see of kernel k */
static api_launch_view view_of(const kiln_kernel *k) {
  return (api_launch_view){&k->desc, &k->sig, &k->cfg, k->user_param, k->ctx->kind, k->ctx->target_name,
                           k->backward};
}

/* ---- decode (docs/serving.md) ---- */

/* does forward k serve this call with the decode kernels?  Dense or paged (the split kernel
 * reads the pages through the block table, each sequence its own length; a paged call's new
 * rows are appended before, by call_args), 1..KN_DECODE_MAX_Q query rows, a variant decode
 * takes, and KILN_DECODE not "0" (the prefill kernel then serves it, as before decode existed).
 * fp8 inputs (dense or paged) take them too.  Varlen keeps the prefill kernel, and so does a
 * kernel of an AOT bundle or a context that may not compile: bundles hold no decode kernels. */
bool api_decode_wanted(const kiln_kernel *k, const kiln_attn_args *a) {
  if (k->kind != API_FWD) return false;
  if (k->desc.layout != KN_ATTN_DENSE && k->desc.layout != KN_ATTN_PAGED) return false;
  if (k->info.source == KILN_SOURCE_BUNDLE || k->ctx->bundle_only) return false;
  if (a->seqlen_q < 1 || a->seqlen_q > KN_DECODE_MAX_Q) return false;
  const char *e = getenv("KILN_DECODE");
  if (e && !strcmp(e, "0")) return false;
  kn_attn_config c = kn_attn_decode_default_config(k->ctx->target_arch, &k->desc);
  kn_diag diag;
  return kn_attn_decode_check(k->ctx->target_arch, &k->desc, &c, &diag) == 0;
}

/* a decode slot's tiling: the read mode's (kn_attn_decode_read_config), or the measuring knobs'
 * KILN_DECODE_BLOCK_N (the split kernel's keys per block) and KILN_DECODE_PAGED_TILING=MxN:W (a
 * paged kernel's whole tiling, both read modes; bench/h200/kiln_decode_bench); *forced says a
 * knob set it.  KILN_ERR_INVALID for a knob that does not parse. */
static kiln_status decode_config(const kiln_kernel *k, int slot, kn_attn_config *c, bool *forced) {
  const kn_arch *arch = k->ctx->target_arch;
  const bool paged = k->desc.layout == KN_ATTN_PAGED;
  *c = kn_attn_decode_read_config(arch, &k->desc,
                                  slot == API_SPLIT_IN_PAGE ? KN_DECODE_READ_IN_PAGE
                                  : slot == API_SPLIT_PAGES ? KN_DECODE_READ_PAGES
                                  : paged                   ? KN_DECODE_READ_GATHER
                                                            : KN_DECODE_READ_ANY);
  const char *bn = getenv("KILN_DECODE_BLOCK_N");
  const char *pt = paged ? getenv("KILN_DECODE_PAGED_TILING") : NULL;
  *forced = false;
  if (bn && atoi(bn) > 0) c->block_n = atoi(bn), *forced = true;
  if (pt && *pt) {
    *forced = true;
    if (sscanf(pt, "%dx%d:%d", &c->block_m, &c->block_n, &c->warps) != 3)
      return api_fail(KILN_ERR_INVALID, "KILN_DECODE_PAGED_TILING=%s: not BLOCK_MxBLOCK_N:WARPS",
                      pt);
  }
  return KILN_OK;
}

api_kind api_decode_kind(const kiln_kernel *k, int slot) {
  if (slot == API_SPLIT_COMBINE) return API_COMBINE;
  if (k->desc.layout != KN_ATTN_PAGED) return API_DECODE;
  return slot == API_SPLIT_IN_PAGE ? API_DECODE_IN_PAGE
         : slot == API_SPLIT_PAGES ? API_DECODE_PAGES : API_DECODE_GATHER;
}

/* the keys per block of paged slot `slot`'s split kernel: the built (or tuned) kernel's, else its
 * tiling's; 0 when neither is known */
static int decode_block_n(kiln_kernel *k, int slot) {
  pthread_mutex_lock(&k->decode_mu);
  const kiln_kernel *in = k->decode[slot];
  int bn = in ? in->cfg.block_n : 0;
  pthread_mutex_unlock(&k->decode_mu);
  if (!bn) {
    kn_attn_config c;
    bool forced;
    if (decode_config(k, slot, &c, &forced)) return 0;
    bn = c.block_n;
  }
  return bn;
}

int api_decode_slot(kiln_kernel *k, int page_size) {
  if (k->desc.layout != KN_ATTN_PAGED || page_size <= 0) return API_SPLIT;
  /* in-page where its kernel's block divides the page, pages where 16 does (the pages kernel's
   * block a multiple of 16), else gather (kn_attn_decode_read_for) */
  const int in_bn = decode_block_n(k, API_SPLIT_IN_PAGE);
  const int pg_bn = page_size % KN_DECODE_CHUNK ? 0 : decode_block_n(k, API_SPLIT_PAGES);
  const kn_decode_read r = kn_attn_decode_read_for(page_size, in_bn, pg_bn);
  return r == KN_DECODE_READ_IN_PAGE ? API_SPLIT_IN_PAGE
         : r == KN_DECODE_READ_PAGES ? API_SPLIT_PAGES : API_SPLIT;
}

/* decode slot `slot`'s split kernel and the combine kernel of k's descriptor, each built once
 * (memoised in the context, so every forward kernel of one descriptor shares them) */
static kiln_status decode_build(kiln_kernel *k, int slot) {
  if (k->decode_tried[slot]) return k->decode_status[slot];
  kn_attn_config c;
  kn_attn_sig sig;
  kn_diag diag;
  bool forced = false;
  kiln_status s = slot == API_SPLIT_COMBINE ? (c = API_COMBINE_CONFIG, KILN_OK)
                                            : decode_config(k, slot, &c, &forced);
  if (!s && forced && kn_attn_decode_check(k->ctx->target_arch, &k->desc, &c, &diag))
    s = api_fail(KILN_ERR_INVALID, "KILN_DECODE_BLOCK_N / KILN_DECODE_PAGED_TILING (%dx%d, %d "
                 "warps): %s", c.block_m, c.block_n, c.warps, diag.message);
  if (!s && kn_attn_decode_signature(&k->desc, slot == API_SPLIT_COMBINE, &sig, &diag))
    s = api_fail(KILN_ERR_INVALID, "decode: %s", diag.message);
  if (!s)
    s = api_get_kernel(k->ctx, &k->desc, &sig, &c, false, api_decode_kind(k, slot),
                       &k->decode[slot]);
  k->decode_tried[slot] = true;
  k->decode_status[slot] = s;
  if (s) snprintf(k->decode_why[slot], sizeof k->decode_why[slot], "%s", kiln_last_error());
  return s;
}

kiln_status api_decode_kernels(kiln_kernel *k, int slot) {
  pthread_mutex_lock(&k->decode_mu);
  int failed = API_SPLIT_COMBINE;
  kiln_status s = decode_build(k, failed);
  if (!s) s = decode_build(k, failed = slot);
  char why[256];
  if (s) snprintf(why, sizeof why, "%s", k->decode_why[failed]);
  pthread_mutex_unlock(&k->decode_mu);
  if (s)
    return api_fail(s, "kiln_forward: the decode kernels could not be built: %s (KILN_DECODE=0 "
                    "serves decode with the prefill kernel)", why);
  return KILN_OK;
}

/* the workspace of stream, at least `bytes` (grown by replacing it: the device frees the old
 * one once the work queued on it is done) */
static kiln_status decode_ws(kiln_kernel *k, void *stream, size_t bytes, void **out) {
  kiln_context *ctx = k->ctx;
  pthread_mutex_lock(&k->decode_mu);
  api_ws *w = NULL;
  for (int i = 0; i < k->nws && !w; i++)
    if (k->ws[i].stream == stream) w = &k->ws[i];
  if (!w && k->nws < API_MAX_WS) w = &k->ws[k->nws++], w->stream = stream;
  kiln_status s = KILN_OK;
  if (!w) {
    s = api_fail(KILN_ERR_UNSUPPORTED, "kiln_forward: decode on more than %d streams with one "
                 "kernel (prepare a kernel per group of streams)", API_MAX_WS);
  } else if (w->bytes < bytes) {
    ws_free(ctx, w);
    void *p = NULL;
    if (api_dev_alloc(ctx, bytes, &p))
      s = api_fail(KILN_ERR_NOMEM, "kiln_forward: the decode workspace of %zu bytes could not "
                   "be allocated (%s)", bytes, kiln_last_error());
    w->ptr = p;
    w->bytes = p ? bytes : 0;
  }
  *out = w ? w->ptr : NULL;
  pthread_mutex_unlock(&k->decode_mu);
  return s;
}

kiln_status api_launch_kernel(kiln_kernel *k, const kn_argval *args, const int grid[3],
                              void *stream) {
  kiln_context *ctx = k->ctx;
  if (ctx->kind == KN_DEVICE_CUDA) return api_cuda_forward(k, args, grid, stream);
  if (ctx->kind == KN_DEVICE_HIP) return api_hip_forward(k, args, grid, stream);
  kn_diag diag;
  pthread_mutex_lock(&k->launch_mu);
  int rc = api_the_compiler.host_run(k->obj, args, grid, &diag);
  pthread_mutex_unlock(&k->launch_mu);
  return rc ? api_fail(KILN_ERR_RUNTIME, "%s", diag.message) : KILN_OK;
}

static kiln_status decode_launch(kiln_kernel *k, kiln_kernel *ks, const api_call *c,
                                 const kn_decode_plan *plan, void *ws, size_t lse_at,
                                 void *stream);

/* The decode launch of forward k: args are the forward's, checked, with the caller's strides.
 * The split kernel takes them (and the variant's) followed by its own four; the combine kernel
 * the output's.  Pieces: KILN_DECODE_SPLITS, else the heuristic over the device's units. */
kiln_status api_decode_forward(kiln_kernel *k, const api_call *c, void *stream) {
  const kn_attn_problem *p = &c->p;
  const int slot = api_decode_slot(k, c->a.page_size);
  kiln_status s = api_decode_kernels(k, slot);
  if (s) return s;
  pthread_mutex_lock(&k->decode_mu);
  kiln_kernel *ks = k->decode[slot];
  pthread_mutex_unlock(&k->decode_mu);
  const char *e = getenv("KILN_DECODE_SPLITS");
  int want = e ? atoi(e) : 0;
  if (!e) {  /* kiln_tune_decode's choice for this problem, if it tuned one like it */
    pthread_mutex_lock(&k->decode_mu);
    if (k->tuned_splits && k->tuned_bk == p->batch * p->kv_heads && k->tuned_nk == p->seqlen_k &&
        k->tuned_nq == p->seqlen_q)
      want = k->tuned_splits;
    pthread_mutex_unlock(&k->decode_mu);
  }
  kn_decode_plan plan = kn_attn_decode_plan(&k->desc, &ks->cfg, p, k->ctx->compute_units, want);
  size_t lse_at = (plan.ws_o_bytes + 255) / 256 * 256;
  void *ws = NULL;
  /* two calls on one stream (the host's, or a shared GPU stream) must not interleave their
   * split and combine launches on its workspace: each takes the lock for its pair (on a GPU
   * only the enqueueing; stream order does the rest) */
  pthread_mutex_lock(&k->decode_launch_mu);
  s = decode_ws(k, stream, lse_at + plan.ws_lse_bytes, &ws);
  if (!s) s = decode_launch(k, ks, c, &plan, ws, lse_at, stream);
  pthread_mutex_unlock(&k->decode_launch_mu);
  return s;
}

/* the two launches of a decode call on workspace ws (its lse part at byte lse_at) */
static kiln_status decode_launch(kiln_kernel *k, kiln_kernel *ks, const api_call *c,
                                 const kn_decode_plan *plan, void *ws, size_t lse_at,
                                 void *stream) {
  float *ws_o = ws, *ws_lse = (float *)((char *)ws + lse_at);
  kn_argval sa[KN_ATTN_MAX_PARAMS + KN_DECODE_NPARAMS], ca[KN_DECODE_COMBINE_NPARAMS];
  int sg[3], cg[3];
  const api_launch_view v = view_of(k);
  kiln_status s = api_decode_args(&v, &ks->cfg, c, plan, ws_o, ws_lse, sa, sg, ca, cg);
  if (!s) s = api_launch_kernel(ks, sa, sg, stream);
  return s ? s : api_launch_kernel(k->decode[API_SPLIT_COMBINE], ca, cg, stream);
}

kiln_status api_forward_kernel(kiln_kernel *k, const api_call *c, kiln_kernel **run) {
  *run = k;
  if (!k->cfg.off32 || c->off32) return KILN_OK;
  pthread_mutex_lock(&k->decode_mu);
  if (!k->wide_tried) {
    kn_attn_config wc = k->cfg;
    wc.off32 = false;
    k->wide_status = api_get_kernel(k->ctx, &k->desc, &k->sig, &wc, k->info.tuned, API_FWD,
                                    &k->wide);
    if (k->wide_status)
      snprintf(k->wide_why, sizeof k->wide_why, "%s", kiln_last_error());
    k->wide_tried = true;
  }
  kiln_status s = k->wide_status;
  char why[256];
  if (s) snprintf(why, sizeof why, "%s", k->wide_why);
  else *run = k->wide;
  pthread_mutex_unlock(&k->decode_mu);
  if (s)
    return api_fail(s, "kiln_forward: the kernel for K/V slabs of 2^31 bytes or more (global "
                    "loads) could not be built: %s", why);
  return KILN_OK;
}

/* The checks and arguments of a launch of forward signature (api_forward_args), and a paged
 * kernel's append of k_new/v_new (on `stream`) */
static kiln_status call_args(kiln_kernel *k, const kiln_attn_args *a, const char *who,
                             api_call *c, void *stream) {
  const api_launch_view v = view_of(k);
  kiln_status s = api_forward_args(&v, a, who, c);
  if (s || !c->append) return s;
  if (k->ctx->kind == KN_DEVICE_HOST) return api_paged_append_host(&k->desc, &c->a, c->args);
  if (k->ctx->kind == KN_DEVICE_CUDA) return api_cuda_append(k, &c->a, c->args, stream);
  return KILN_OK;  /* (check_paged refused appends elsewhere) */
}

kiln_status kiln_forward(kiln_kernel *k, const kiln_attn_args *a, void *stream) {
  /* the stream matters on GPUs only: the host device runs synchronously on its own pool */
  if (!k || !a) return api_fail(KILN_ERR_INVALID, "kiln_forward: null kernel or arguments");
  if (k->backward)
    return api_fail(KILN_ERR_INVALID, "kiln_forward: the kernel is a backward "
                    "(kiln_prepare_backward): launch it with kiln_backward");
  api_call c;
  kiln_status s = call_args(k, a, "kiln_forward", &c, stream);
  if (s) return s;
  if (c.empty) {
    atomic_fetch_add(&k->ctx->stats.launches, 1);
    return KILN_OK;
  }
  /* dense and paged forwards of 1..KN_DECODE_MAX_Q query rows take the split-KV decode kernels
   * (varlen, bundle and bundle_only keep the prefill kernel: api_decode_wanted).  Without a compiler,
   * decode's kernels come from the cache or not at all: the prefill kernel then serves the call */
  if (api_decode_wanted(k, a) &&
      (api_the_compiler.present ||
       api_decode_kernels(k, api_decode_slot(k, a->page_size)) == KILN_OK)) {
    if ((s = api_decode_forward(k, &c, stream))) return s;
  } else {
    kiln_kernel *run;
    if ((s = api_forward_kernel(k, &c, &run)) || (s = api_launch_kernel(run, c.args, c.grid, stream)))
      return s;
  }
  atomic_fetch_add(&k->ctx->stats.launches, 1);
  return KILN_OK;
}

/* ---- backward (docs/backward.md) ---- */

_Static_assert((int)KILN_BWD_DQ_DEFAULT == (int)KN_BWD_DQ_DEFAULT &&
               (int)KILN_BWD_DQ_DETERMINISTIC == (int)KN_BWD_DQ_SEPARATE &&
               (int)KILN_BWD_DQ_ATOMIC == (int)KN_BWD_DQ_ATOMIC,
               "kiln_backward_dq and the template's KN_BWD_DQ_*");

kiln_status kiln_prepare_backward(kiln_context *ctx, const kiln_attn_desc *desc,
                                  const kiln_prepare_options *o, kiln_kernel **out) {
  const char *who = "kiln_prepare_backward";
  if (!ctx || !out) return api_fail(KILN_ERR_INVALID, "%s: null context or output", who);
  *out = NULL;
  kn_attn_desc d;
  kiln_status s = api_desc_from_public(desc, &d);
  if (s) return s;
  if (o && (!o->block_m != !o->block_n))
    return api_fail(KILN_ERR_INVALID, "block_m and block_n must be given together");
  if (o && o->warps < 0) return api_fail(KILN_ERR_INVALID, "warps %d is negative", o->warps);
  if (o && (o->backward_dq < KILN_BWD_DQ_DEFAULT || o->backward_dq > KILN_BWD_DQ_ATOMIC))
    return api_fail(KILN_ERR_INVALID, "%s: backward_dq %d is not KILN_BWD_DQ_DEFAULT (0), "
                    "KILN_BWD_DQ_DETERMINISTIC (1) or KILN_BWD_DQ_ATOMIC (2)", who, o->backward_dq);
  if (kn_attn_is_fp8(&d))
    return api_fail(KILN_ERR_UNSUPPORTED, "%s: fp8 inputs (q_dtype / kv_dtype) have no backward "
                    "(training reads f16 / bf16 q, k, v)", who);
  if (ctx->bundle_only)
    return api_fail(KILN_ERR_UNSUPPORTED, "%s: AOT bundles hold forward kernels only, and this "
                    "context may not compile (bundle_only)", who);
  /* the tiling: the caller's (block_m and block_n together, checked above), else the
   * backward's default (no tuning yet) */
  kn_attn_config c = o ? kn_attn_bwd_config_for(ctx->target_arch, &d, o->wgmma, false,
                                                o->backward_dq, o->block_m, o->block_n, o->warps)
                       : kn_attn_bwd_default_config(ctx->target_arch, &d);
  kn_diag diag;
  if (kn_attn_bwd_check_on(ctx->target_arch, &d, &c, &diag))
    return api_fail(KILN_ERR_UNSUPPORTED, "%s: %s", who, diag.message);
  char key[2 * KN_ATTN_KEY_MAX + 64], dk[KN_ATTN_KEY_MAX], ck[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(&d, dk, sizeof dk);
  kn_attn_config_key(&c, ck, sizeof ck);
  snprintf(key, sizeof key, "backward|%s|%s", dk, ck);
  kiln_kernel *k = NULL;
  int m = memo_acquire(ctx, key, &k);
  if (m < 0) return api_fail(KILN_ERR_NOMEM, "out of memory");
  if (m > 0) {
    atomic_fetch_add(&ctx->stats.memo_hits, 1);
    atomic_fetch_add(&ctx->stats.prepares, 1);
    *out = k;
    return KILN_OK;
  }
  kn_attn_sig fsig, bsig;
  s = api_signature(&d, &fsig);
  if (!s && kn_attn_bwd_signature(&d, &bsig, &diag))
    s = api_fail(KILN_ERR_UNSUPPORTED, "%s: %s", who, diag.message);
  if (!s && !(k = calloc(1, sizeof *k))) s = api_fail(KILN_ERR_NOMEM, "out of memory");
  if (!s && d.mods && !(k->mods = strdup(d.mods))) s = api_fail(KILN_ERR_NOMEM, "out of memory");
  double t0 = now_ms();
  for (int w = 0; !s && w < KN_BWD_NKERNELS; w++)
    s = get_kernel(ctx, kn_attn_bwd_kernels[w], &d, &bsig, &c, false, API_FWD, NULL,
                   &k->part[w]);
  if (!s) {
    k->ctx = ctx;
    k->kname = "attn_bwd";
    k->backward = true;
    k->desc = d;
    k->desc.mods = k->mods;
    k->desc.mods_file = NULL;
    k->cfg = c;
    k->sig = fsig;  /* the arguments are checked as a forward's (call_args) */
    k->n_user_params = api_user_params(&d, &fsig, k->user_param);
    pthread_mutex_init(&k->launch_mu, NULL);
    k->info = k->part[KN_BWD_DKDV]->info;
    k->info.atomic_dq = c.atomic_dq;
    k->info.prepare_ms = now_ms() - t0;
    k->info.desc = api_desc_to_public(&k->desc);
    for (int w = 0; w < KN_BWD_NKERNELS; w++)
      if (k->part[w]->info.source == KILN_SOURCE_COMPILED) k->info.source = KILN_SOURCE_COMPILED;
  } else if (k) {
    free(k->mods);
    free(k);
    k = NULL;
  }
  memo_finish(ctx, key, s ? NULL : k, true);
  if (s) {
    api_log(ctx, KILN_LOG_ERROR, "prepare backward: %s", kiln_last_error());
    return s;
  }
  atomic_fetch_add(&ctx->stats.prepares, 1);
  *out = k;
  return KILN_OK;
}

kiln_status kiln_backward(kiln_kernel *k, const kiln_backward_args *a, void *stream) {
  const char *who = "kiln_backward";
  if (!k || !a) return api_fail(KILN_ERR_INVALID, "%s: null kernel or arguments", who);
  if (!k->backward)
    return api_fail(KILN_ERR_INVALID, "%s: the kernel is a forward (kiln_prepare): prepare the "
                    "backward with kiln_prepare_backward", who);
  const api_launch_view v = view_of(k);
  api_call c;
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[KN_BWD_NKERNELS][3];
  kiln_status s = api_backward_args(&v, &k->part[0]->sig, a, &c, args, grid);
  if (s) return s;
  for (int w = 0; w < KN_BWD_NKERNELS; w++) {
    if (!grid[w][0] || !grid[w][1]) continue;
    if ((s = api_launch_kernel(k->part[w], args, grid[w], stream))) return s;
  }
  atomic_fetch_add(&k->ctx->stats.launches, 1);
  return KILN_OK;
}
