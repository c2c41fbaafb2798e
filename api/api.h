/* api.h — what api/kiln.c (context, prepare, forward) and api/tune.c (the autotuner) share.
 *
 * The API layer is the only one that sees templates, the compiler, the runtime and the storage
 * layers together.  It holds no LLVM types: compiler/pipeline.h's object path (kn_artifact,
 * kn_host_object) is its view of host code generation, api/cuda.c's calls below (which alone know
 * the CUDA device) its view of the NVIDIA targets, and api/hip.c's (which alone know the HIP
 * device) its view of the AMD ones; all compile through api_compile, and every call that needs
 * LLVM goes through api/compiler.h's table (absent from libkiln_rt).
 */
#ifndef KILN_API_INTERNAL_H
#define KILN_API_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "attention.h"
#include "attn_bwd.h"
#include "attn_decode.h"
#include "attn_launch_cuda.h"
#include "bundle.h"
#include "cache.h"
#include "compiler.h"
#include "cuda_device.h"
#include "discover.h"
#include "hip_device.h"
#include "kiln.h"
#include "pipeline.h"
#include "space.h"
#include "tunedb.h"

#define API_MEMO_BUCKETS 256
#define API_MAX_WS 8
/* kiln_kernel.decode's slots: the split kernel (dense, or paged gather), the combine kernel, a
 * paged descriptor's in-page and pages split kernels */
enum { API_SPLIT, API_SPLIT_COMBINE, API_SPLIT_IN_PAGE, API_SPLIT_PAGES, API_DECODE_SLOTS };

/* the kernels a descriptor compiles to: the forward (prefill) kernel and decode's two
 * (templates/attn_decode.h); the symbol of each is api_kind_symbol's */
/* API_DECODE: the split kernel of a dense descriptor (or a paged one with both loops);
 * API_DECODE_IN_PAGE / API_DECODE_GATHER / API_DECODE_PAGES: a paged descriptor's per-read-mode
 * split kernels (attn_decode.h, kn_decode_read), one of which a launch picks by its page size */
typedef enum api_kind { API_FWD, API_DECODE, API_COMBINE, API_DECODE_IN_PAGE,
                        API_DECODE_GATHER, API_DECODE_PAGES } api_kind;
const char *api_kind_symbol(api_kind kind);

/* a decode workspace (f32 partial outputs and log-sum-exps), one per stream it was used on:
 * launches on one stream are ordered, so they may share it */
typedef struct api_ws {
  void *stream;
  void *ptr;     /* host memory, or a device pointer of the context's device */
  size_t bytes;
} api_ws;

typedef struct memo_slot memo_slot;
typedef struct api_call api_call;

struct kiln_context {
  const kn_arch *target_arch;  /* what the context compiles for (host, sm_*, gfx*) */
  kn_device_kind kind;         /* HOST, CUDA or HIP */
  kn_cuda_device *cuda;        /* CUDA: the device's primary context, retained for our life */
  int cuda_ordinal;
  int compute_units;           /* SMs, CUs or CPU cores: decode's split heuristic */
  int64_t cuda_smem_optin;     /* CUDA: the most dynamic shared memory a block may opt into */
  kn_hip_device *hip;          /* HIP: the device (the runtime's ordinal and chip) */
  int hip_ordinal;
  char target_name[16];
  char device_name[128];
  char target_id[1024];        /* kn_object_target_id: part of every cache key */
  char arch[32];               /* the tuning key's arch: "host-<cpu>" */

  kn_cache *cache;             /* NULL: running without a disk cache */
  char cache_dir[4096];
  pthread_mutex_t db_mu;       /* guards the lazy open of db */
  bool db_tried;
  kn_tunedb *db;               /* NULL: no tuning database (no cache, or unusable) */

  kiln_log_fn log;
  void *log_user;
  kiln_progress_fn progress;
  void *progress_user;
  bool progress_quiet;         /* KILN_TUNE_PROGRESS=0 */
  kiln_tune_policy policy;     /* resolved: NONE, CACHED or AUTO */
  kiln_tune_policy env_policy; /* KILN_AUTOTUNE (KILN_TUNE_CONTEXT: unset) */
  char env_space[512];         /* $KILN_TUNE_SPACE at creation */
  atomic_int warned_unwritable; /* the one "cache cannot store" warning was given */
  atomic_int warned_no_tuner;  /* no compiler: "AUTO acts as CACHED" was said */

  /* the memo: request and kernel slots, one in-flight marker per key (see kiln.c) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  memo_slot *buckets[API_MEMO_BUCKETS];
  kiln_kernel *kernels;        /* every kernel, for destroy */

  kn_aot_index bundle;         /* the AOT bundle's entries that serve the target (bundle.c) */
  bool bundle_only;            /* never compile (kiln_context_options.bundle_only, or no JIT) */

  struct {
    atomic_uint_fast64_t prepares, memo_hits, cache_hits, compiles, corrupt_entries, not_stored,
        tuning_hits, tunings, candidates, launches, bundle_loads;
  } stats;
};

struct kiln_kernel {
  kiln_context *ctx;
  kiln_kernel *next;           /* ctx->kernels list */
  const char *kname;           /* the kernel function: "attn_fwd" or one of kn_attn_bwd_kernels */
  bool backward;               /* kiln_prepare_backward's: its kernels are part[], in launch order,
                                  and sig is the forward's signature (the arguments' checks) */
  kiln_kernel *part[KN_BWD_NKERNELS];
  kiln_kernel_info info;
  kn_attn_desc desc;           /* desc.mods (and info.desc.mods) point at mods */
  kn_attn_config cfg;
  api_kind kind;               /* which kernel of the descriptor this is */
  char *mods;                  /* the kernel's copy of the modifier text (NULL: none) */
  kn_attn_sig sig;             /* its parameters, from kiln_prepare: forward parses nothing */
  bool user_param[KN_ATTN_MAX_PARAMS]; /* sig parameter i takes a kiln_attn_args.mod_args value */
  int n_user_params;
  kn_host_object *obj;         /* host */
  pthread_mutex_t launch_mu;   /* host: one launch of this kernel at a time (its status word) */
  kn_cuda_module *cu_mod;      /* CUDA: the loaded PTX module and its kernel */
  kn_cuda_kernel *cu_fn;
  kn_attn_cuda_launch_info cu_launch; /* CUDA: threads per block, dynamic shared bytes */
  kn_cuda_module *cu_append_mod; /* CUDA, paged: the append kernel (kv_append), compiled at the
                                    first forward with k_new (under launch_mu), not cached */
  kn_cuda_kernel *cu_append_fn;
  kn_attn_cuda_launch_info cu_append_launch;
  kn_hip_module *hip_mod;      /* HIP: the loaded code object and its kernel */
  kn_hip_kernel *hip_fn;
  int hip_threads;             /* HIP: work-items per workgroup (the code object's) */
  /* decode (docs/serving.md), on a forward kernel: its descriptor's split and combine kernels,
   * each built at the first forward that needs it (decode_status[i] says how that went), and
   * the workspaces, one per stream.  decode[API_SPLIT] is the split kernel of a dense
   * descriptor or a paged one's gather kernel (any page size), decode[API_SPLIT_IN_PAGE] a paged
   * one's in-page kernel (pages that are multiples of its block_n: api_decode_slot),
   * decode[API_SPLIT_PAGES] its pages kernel (other pages that are multiples of 16) */
  pthread_mutex_t decode_mu;
  pthread_mutex_t decode_launch_mu; /* held from taking a workspace to the combine's launch (or
                                       enqueue), so no two calls interleave on one workspace */
  bool decode_tried[API_DECODE_SLOTS];
  kiln_status decode_status[API_DECODE_SLOTS];
  char decode_why[API_DECODE_SLOTS][256]; /* a failed build's message, for every later call */
  kiln_kernel *decode[API_DECODE_SLOTS];
  api_ws ws[API_MAX_WS];
  int nws;
  /* kiln_tune_decode's pieces for the problem it tuned (batch x kv heads, seqlen_k, seqlen_q):
   * forwards of that problem use them (KILN_DECODE_SPLITS still overrides) */
  int tuned_splits, tuned_bk, tuned_nk, tuned_nq;
  /* an off32 forward (cfg.off32, templates/attention.h): the same kernel without it, which
   * serves the calls whose K/V slabs span 2^31 bytes or more, built at the first such call
   * (under decode_mu; wide_status says how that went) */
  bool wide_tried;
  kiln_status wide_status;
  char wide_why[256];
  kiln_kernel *wide;
};

/* the combine kernel's fixed tiling (it has no dot: one warp over 16 rows) */
#define API_COMBINE_CONFIG ((kn_attn_config){.block_m = 16, .block_n = 16, .warps = 1, .stages = 1})

/* kiln.c, decode (docs/serving.md): whether forward k serves call a with the decode kernels;
 * their build (once per kernel); the decode launch of checked forward arguments; one launch of
 * any kernel on its device; the memo's kernel of (d, c, kind) */
bool api_decode_wanted(const kiln_kernel *k, const kiln_attn_args *a);
/* the split kernel slot a call of page size page_size takes (API_SPLIT for a dense kernel), the
 * kind of kernel a slot holds, and the build of that slot's split kernel and of the combine
 * kernel (once each) */
int api_decode_slot(kiln_kernel *k, int page_size);
api_kind api_decode_kind(const kiln_kernel *k, int slot);
kiln_status api_decode_kernels(kiln_kernel *k, int slot);
kiln_status api_decode_forward(kiln_kernel *k, const api_call *c, void *stream);
/* one launch of kernel k (a forward, a decode part or a backward part) on its device */
kiln_status api_launch_kernel(kiln_kernel *k, const kn_argval *args, const int grid[3],
                              void *stream);
/* the kernel that runs forward call c (api_forward_args accepted it) of kernel k: k itself, or
 * for an off32 kernel whose call does not fit (c->off32 false) its kernel without off32 (built
 * once, memoised and cached as any other: its config key lacks "off32=1") */
kiln_status api_forward_kernel(kiln_kernel *k, const api_call *c, kiln_kernel **run);
kiln_status api_get_kernel(kiln_context *ctx, const kn_attn_desc *d, const kn_attn_sig *sig,
                           const kn_attn_config *c, bool tuned, api_kind kind, kiln_kernel **out);

/* status.c: the thread-local message of kiln_last_error (at most API_ERROR_MAX bytes) */
enum { API_ERROR_MAX = 1024 };
kiln_status api_fail(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* kiln.c */
void api_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* the "cannot store" class of warnings (cache or tuning database unwritable): the first of a
 * context is a warning, later ones are info, so a read-only cache costs one warning */
void api_log_unwritable(kiln_context *ctx, const char *msg);
kn_tunedb *api_db(kiln_context *ctx);
/* args.c.  The one conversion between kiln.h's descriptor and the template's (everything in kiln —
 * prepare, tune, the command line — converts through these).  from_public checks the dtype and
 * that the template serves the descriptor (KILN_ERR_UNSUPPORTED with the reason otherwise). */
kiln_status api_desc_from_public(const kiln_attn_desc *in, kn_attn_desc *out);
kiln_attn_desc api_desc_to_public(const kn_attn_desc *d);
/* the kernel signature of d (its modifier text parsed and verified): KILN_ERR_INVALID with the
 * parser's or verifier's file:line:col message for a malformed text */
kiln_status api_signature(const kn_attn_desc *d, kn_attn_sig *sig);
/* a kn_diag as an API error message: "file:line:col: message" (and the source line with a caret)
 * when it has a location, else the message */
const char *api_diag_text(const kn_diag *d, char *buf, size_t n);
/* which parameters of sig take the caller's modifier values (kiln_mod_arg), into user[]; returns
 * how many */
int api_user_params(const kn_attn_desc *d, const kn_attn_sig *sig, bool *user);
/* The caller's modifier values (args[0..nargs)) as the named values of kn_attn_vargs (out: room
 * for KN_ATTN_MAX_PARAMS), each converted to its parameter's type.  KILN_ERR_INVALID, the
 * message starting with `who`, for a name that is none of the user parameters, a duplicate, a
 * value of the wrong kind or range, a NULL pointer, or a user parameter without a value (`from`
 * says where values come from). */
kiln_status api_mod_args(const kn_attn_sig *sig, const bool *user, const kiln_mod_arg *args,
                         int nargs, kn_attn_named_arg *out, const char *who, const char *from);
/* What the argument checks need to know of a kernel (args.c needs no context, device or LLVM:
 * fuzz/fuzz_api.c drives it on its own) */
typedef struct api_launch_view {
  const kn_attn_desc *desc;
  const kn_attn_sig *sig;      /* the forward's signature (a backward's arguments are a forward's) */
  const kn_attn_config *cfg;
  const bool *user_param;      /* sig parameter i takes a mod_args value (api_user_params) */
  kn_device_kind kind;         /* HOST, CUDA or HIP: what is readable, what is aligned */
  const char *target_name;     /* for messages; NULL: the kind's name */
  bool backward;               /* kiln_backward's forward arguments: lse is read, and an empty
                                  problem is checked whole (it still writes dK = dV = 0) */
} api_launch_view;
/* A launch's checked arguments (api_forward_args's result; va.mods points at named, so it is
 * used where it was filled, never copied) */
struct api_call {
  kn_argval args[KN_ATTN_MAX_PARAMS];  /* the kernel's, with the caller's strides in place */
  int grid[3];
  kn_attn_vargs va;
  kn_attn_named_arg named[KN_ATTN_MAX_PARAMS];
  kn_attn_problem p;
  kiln_attn_args a;            /* the caller's arguments, a paged kernel's seqlen_k its table's
                                  capacity (what the append takes) */
  bool empty;                  /* no batch or no query row: nothing to launch for a forward */
  bool off32;                  /* every (batch, kv head) slab of k and of v spans < 2^31 bytes
                                  (kn_attn_off32_fits): an off32 kernel may serve the call */
  bool append;                 /* a paged call's k_new/v_new: append them before the launch */
};
/* The checks and arguments every launch of a forward signature shares (kiln.h: sizes, the
 * variant's values, varlen prefix sums, a paged call's table, lengths and pool shape, extents,
 * described capacities, on GPUs the vector alignment) and the kernel's arguments and grid, into
 * *c.  `who` starts the messages.  A forward's empty problem (batch 0, or seqlen_q 0 without a
 * paged append) is not checked past its sizes and values.  KILN_ERR_INVALID / _UNSUPPORTED with
 * the reason. */
kiln_status api_forward_args(const api_launch_view *k, const kiln_attn_args *a, const char *who,
                             api_call *c);
/* a paged call's new rows (k_new, v_new) into the pools through the block table, on the host
 * (kn_attn_paged_append), after api_forward_args accepted them (c->append: c->a and c->args);
 * CUDA appends by api_cuda_append's kernel instead */
kiln_status api_paged_append_host(const kn_attn_desc *d, const kiln_attn_args *a,
                                  const kn_argval *args);
/* kiln_backward's checks: the gradients and the delta workspace given, the forward's arguments
 * (api_forward_args into *c, the view's backward set), then the three backward kernels'
 * arguments (bsig: their signature; args: KN_ATTN_MAX_PARAMS) and grids, with the caller's
 * gradient strides, their capacities and (GPU) alignment checked */
kiln_status api_backward_args(const api_launch_view *k, const kn_attn_sig *bsig,
                              const kiln_backward_args *a, api_call *c, kn_argval *args,
                              int grid[][3]);
/* decode's split and combine kernels' arguments and grids for a forward call c that
 * api_forward_args accepted (the split kernel's tiling split_cfg, the plan's pieces, the
 * workspace's two parts) */
kiln_status api_decode_args(const api_launch_view *k, const kn_attn_config *split_cfg,
                            const api_call *c, const kn_decode_plan *plan, float *ws_o,
                            float *ws_lse, kn_argval *sa, int sg[3], kn_argval *ca, int cg[3]);
/* kiln.c.  "<kname> [<descriptor key>] [<config key>]": what logs and errors call a kernel */
void api_describe(const char *kname, const kn_attn_desc *d, const kn_attn_config *c, char *out,
                  size_t n);
/* the same for any kernel of the descriptor: "attn_decode [...] [...]" */
void api_describe_kind(api_kind kind, const kn_attn_desc *d, const kn_attn_config *c, char *out,
                       size_t n);
/* the tuning database's key: template "fwd", variant = the descriptor's canonical key */
void api_tune_key(const kiln_context *ctx, const kn_attn_desc *d, int seqlen, kn_tune_key *key);
/* the template's tiling of a point of the tuning space or a tuning record: its block_m, block_n,
 * warps, stages, and wgmma when its matrix instruction is one of sm_90a's wgmma entries (the
 * space's matrix axis lists the registry's instructions) */
kn_attn_config api_config_of(const kn_tune_config *tc);
/* builds the template of kernel kname ("attn_fwd", "attn_decode", "attn_decode_combine", or a
 * backward kernel: the module then holds all three) for (d, c) into a fresh module; NULL with the
 * reason in *diag */
kn_module *api_build_module(const char *kname, const kn_attn_desc *d, const kn_attn_config *c,
                            kn_diag *diag);
/* the same for kernel `kind` of the descriptor */
kn_module *api_build_module_of(api_kind kind, const kn_attn_desc *d, const kn_attn_config *c,
                               kn_diag *diag);
/* the cache key of kernel kname of module m, built from (d, c), on the context's target */
kn_cache_key api_cache_key(const kiln_context *ctx, const char *kname, const kn_attn_desc *d,
                           const kn_attn_config *c, const kn_module *m);
/* payload = small header (kernel symbol, ABI version, tile bytes) + the object; malloc'ed */
void *api_pack(const kn_artifact *o, size_t *size);
/* stores a compiled object in the cache (NOT_STORED is logged, counted, and not an error) */
void api_store(kiln_context *ctx, const kn_cache_key *key, const kn_artifact *o);
/* compiles kernel kname of m (`what` names it) for the context's target through
 * api/compiler.h and counts the compile: KILN_OK and *out (kn_artifact_free), KILN_ERR_COMPILE
 * with the compiler's message, or KILN_ERR_UNSUPPORTED where this library has no compiler */
kiln_status api_compile(kiln_context *ctx, const kn_module *m, const char *what, kn_artifact *out);
/* the same for kernel kname of m (api_compile: "attn_fwd") */
kiln_status api_compile_named(kiln_context *ctx, const kn_module *m, const char *kname,
                              const char *what, kn_artifact *out);
/* the cache lookup of kiln.c: KN_OK with a malloc'ed payload, or a miss (corrupt entries
 * counted and logged as warnings) */
kn_status api_cache_get(kiln_context *ctx, const kn_cache_key *key, const char *hex,
                        void **payload, size_t *size);
/* a checksummed entry whose payload is not a loadable kernel: warn, count, remove */
void api_cache_reject(kiln_context *ctx, const kn_cache_key *key, const char *hex,
                      const char *why);
/* a cache put; a put that cannot store is counted (its warning came from the cache's log) */
void api_cache_put(kiln_context *ctx, const kn_cache_key *key, const void *payload, size_t n);

/* bundle.c: the AOT bundle (kiln_context_options.bundle), the compile-free path of prepare.
 * open: reads the index, keeps the entries serving ctx's target (KILN_ERR_IO for a bad index).
 * find: the entry for d (seqlen: the typical length; forced: a tiling it must have, or NULL),
 * its tiling in *cfg; NULL when the bundle has none.  load: the entry's bytes (checked against
 * the index) into k on the context's device. */
kiln_status api_bundle_open(kiln_context *ctx, const char *path);
void api_bundle_close(kiln_context *ctx);
const kn_aot_entry *api_bundle_find(const kiln_context *ctx, const kn_attn_desc *d, int seqlen,
                                    const kn_attn_config *forced, kn_attn_config *cfg);
kiln_status api_bundle_load(kiln_context *ctx, kiln_kernel *k, const kn_aot_entry *e,
                            const char *what);

/* status.c: the public status of an internal one (outcomes that are not errors are KILN_OK) */
kiln_status api_status_of(kn_status s);

/* cuda.c: the CUDA device.  open: discovery's device -> ctx (target, ids, the device's
 * primary context).  build: compile-or-load k's module (k->info.source/cache_key are filled).
 * forward: launch on the caller's stream.  unload/close: for destroy. */
kiln_status api_cuda_open(kiln_context *ctx, const kn_device_info *dev, const char *target);
kiln_status api_cuda_build(kiln_context *ctx, kiln_kernel *k, const kn_module *m,
                           const kn_cache_key *key, const char *what);
kiln_status api_cuda_forward(kiln_kernel *k, const kn_argval *args, const int grid[3],
                             void *stream);
void api_cuda_unload(kiln_kernel *k);
/* a paged kernel's append of k_new / v_new on CUDA (kiln_forward, before the attention launch,
 * on the same stream); args: the attention's arguments (the pools' strides) */
kiln_status api_cuda_append(kiln_kernel *k, const kiln_attn_args *a, const kn_argval *args,
                            void *stream);
void api_cuda_close(kiln_context *ctx);
/* loads NUL-terminated ptx, or (ptx NULL) a cubin, into k: its kernel `symbol`, launched with
 * `threads` per block and `smem` bytes of dynamic shared memory (AOT bundles) */
kiln_status api_cuda_load(kiln_context *ctx, kiln_kernel *k, const char *ptx, const void *cubin,
                          size_t cubin_n, const char *symbol, int threads, int64_t smem);

/* the PTX of a compiled kernel o, with its launch facts, into the cache under key (the payload
 * api_cuda_build loads) */
void api_cuda_store(kiln_context *ctx, const kn_cache_key *key, const kn_artifact *o);

/* cuda.c, shared by the GPU devices: the context's target a and names for a GPU called `name`
 * (target_name, device_name, the tuning key's arch "<target>-<GPU name>", the target identity
 * of the cache keys); and whether every parameter of k's signature is one a GPU launch passes
 * (i32, i64, f32, pointers: KILN_ERR_UNSUPPORTED naming the first that is not). */
void api_gpu_target(kiln_context *ctx, const kn_arch *a, const char *name);
kiln_status api_gpu_params(const kiln_kernel *k, const char *what);

/* hip.c: the HIP device, the same five calls as cuda.c's (the payload is the code object). */
kiln_status api_hip_open(kiln_context *ctx, const kn_device_info *dev, const char *target);
kiln_status api_hip_build(kiln_context *ctx, kiln_kernel *k, const kn_module *m,
                          const kn_cache_key *key, const char *what);
kiln_status api_hip_forward(kiln_kernel *k, const kn_argval *args, const int grid[3],
                            void *stream);
void api_hip_unload(kiln_kernel *k);
/* loads a code object or offload bundle into k, its kernel `symbol` (the tuner's candidates,
 * "attn_fwd": k is a kernel of its own, unloaded with api_hip_unload; AOT bundles) */
kiln_status api_hip_load(kiln_context *ctx, kiln_kernel *k, const void *co, size_t n,
                         const char *symbol);
void api_hip_close(kiln_context *ctx);

/* device.c: the context's device, whatever its kind, for the tuners and decode's workspace.
 * Memory (host memory on the host; a CUDA pointer carried as a void *): alloc, free, put (host
 * to device), get (device to host), clear (zero bytes), sync (the stream; NULL: the whole
 * device).  The timer: the time between start and stop on the stream, from the device's events
 * (on the host: the wall clock around synchronous launches).  load: a compiled kernel o (PTX, a
 * code object or a host object) into k as its kernel k->kname; unload: whichever k holds; store:
 * o into the cache under key in its device's payload (what a later prepare loads).  Failures are
 * KILN_ERR_RUNTIME (an allocation: KILN_ERR_NOMEM) with the runtime's message. */
kiln_status api_dev_alloc(kiln_context *ctx, size_t bytes, void **out);
void api_dev_free(kiln_context *ctx, void *p);
kiln_status api_dev_put(kiln_context *ctx, void *dst, const void *src, size_t bytes);
kiln_status api_dev_get(kiln_context *ctx, void *dst, const void *src, size_t bytes);
kiln_status api_dev_clear(kiln_context *ctx, void *dst, size_t bytes);
kiln_status api_dev_sync(kiln_context *ctx, void *stream);
typedef struct api_timer {
  void *ev[2];  /* the start and stop events (GPUs) */
  double t0;    /* the host: the clock at start, in microseconds */
} api_timer;
kiln_status api_timer_open(kiln_context *ctx, api_timer *t);
void api_timer_close(kiln_context *ctx, api_timer *t);
kiln_status api_timer_start(kiln_context *ctx, api_timer *t, void *stream);
/* waits for the stop and gives the time since start in microseconds */
kiln_status api_timer_stop(kiln_context *ctx, api_timer *t, void *stream, double *us);
kiln_status api_dev_load(kiln_context *ctx, kiln_kernel *k, const kn_artifact *o);
void api_dev_unload(kiln_kernel *k);
void api_dev_store(kiln_context *ctx, const kn_cache_key *key, const kn_artifact *o);

/* tune.c: the tuning fields of o (tune_batch, tune_heads, tune_warmup, tune_repeats) and the problem
 * they make at seqlen: negative values, more than 10000 launches of either kind (a prepare that
 * would never return) or more than 2^30 elements a tensor (computed without overflow) are
 * KILN_ERR_INVALID; api_tune checks them first, prepare with KILN_TUNE_AUTO too */
kiln_status api_tune_check(const kn_attn_desc *d, const kiln_prepare_options *o, int seqlen);
/* tune.c: tunes (d) at seqlen; record: 0 do not record, 1 only if faster, 2 replace.  Fills res
 * (may be NULL) and *best. */
kiln_status api_tune(kiln_context *ctx, const kn_attn_desc *d, const kn_attn_sig *sig,
                     const kiln_prepare_options *o, int seqlen, int record, kiln_tune_result *res,
                     kn_attn_config *best);

#endif
