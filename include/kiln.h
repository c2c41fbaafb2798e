/* kiln.h — the public C API of kiln: the JIT service a serving engine embeds.
 *
 * A process creates a context (cache directory, device, log callback), asks it for an attention
 * kernel by descriptor (kiln_prepare), and launches the kernel on its own buffers and stream
 * (kiln_forward).  prepare returns a kernel from the context's memory in microseconds, from the
 * on-disk cache in milliseconds, or compiles it (and, if asked, autotunes its tiling first);
 * compiled code and tuning results are shared with later processes through the cache directory.
 *
 * Two libraries implement this header (docs/install.md): libkiln, with kiln's compiler (LLVM),
 * and libkiln_rt, without it, which serves HIP and CUDA devices from the code a libkiln of the
 * same build left in the cache and answers what needs a compiler (a kernel not in the cache,
 * tuning, every host kernel) with KILN_ERR_UNSUPPORTED, saying so in kiln_last_error().
 *
 *   kiln_context *ctx;
 *   kiln_context_options co = {.log = my_log};               // zero = defaults
 *   if (kiln_context_create(&co, &ctx)) fail(kiln_last_error());
 *   kiln_attn_desc d = {.dtype = KILN_F16, .head_dim = 128, .causal = 1};
 *   kiln_kernel *k;
 *   if (kiln_prepare(ctx, &d, NULL, &k)) fail(kiln_last_error());
 *   kiln_attn_args a = {.q = q, .k = kk, .v = v, .o = o, .batch = B, .heads = H,
 *                       .kv_heads = HK, .seqlen_q = N, .seqlen_k = N};
 *   if (kiln_forward(k, &a, stream)) fail(kiln_last_error());
 *   // a variant: a kernel of its own, its values launch arguments (kiln_attn_desc below)
 *   kiln_attn_desc w = {.dtype = KILN_F16, .head_dim = 128, .causal = 1, .window = 1};
 *   a.window_left = 4096, a.window_right = 0;
 *   ...
 *   kiln_context_destroy(ctx);   // frees its kernels
 *
 * Errors.  Every call returns a kiln_status; when it is not KILN_OK, kiln_last_error() gives the
 * message of the failed call on the calling thread (thread-local: valid until the next kiln
 * call on that thread).  Nothing is printed and nothing exits: warnings and events (cache hits,
 * compiles, corrupt cache entries, an unwritable cache) go to the log callback.  One exception,
 * asked for by the tuning policy: while autotuning, progress goes to stderr (a bar when stderr is
 * a terminal) unless a progress callback is given or KILN_TUNE_PROGRESS=0.
 *
 * Devices.  The host (the CPU, through LLVM's ORC JIT) and NVIDIA GPUs of compute capability 8.0
 * or later through the CUDA driver (found at run time by dlopen of libcuda.so.1: no build-time
 * CUDA dependency).  On CUDA, prepare compiles the kernel to PTX (sm_90a on compute capability
 * 9.0, sm_80 on other 8.0+ GPUs), caches the PTX, and loads it through the driver's JIT into
 * the device's primary context (the one PyTorch and other driver users share); forward launches
 * asynchronously on the caller's stream with caller-owned DEVICE pointers.  Without a usable GPU,
 * device "cuda" is KILN_ERR_NO_DEVICE with the reason discovery found (no driver, no device,
 * too old), and "auto" is the host; a malformed "cuda:N" (N not decimal digits, or above 1024)
 * is KILN_ERR_INVALID.  AMD GPUs (gfx90a, gfx942, gfx950) through the HIP runtime
 * (libamdhip64 found at run time by dlopen): prepare compiles the kernel to a code object for the
 * device's chip, caches it, and loads it (hipModuleLoadData); forward packs the kernel arguments
 * from the code object's metadata and launches asynchronously on the caller's hipStream_t with
 * caller-owned DEVICE pointers.
 *
 * Threads.  All functions may be called from any number of threads at once on one context:
 * prepares of the same kernel compile it once (the others wait for it), and kernels may be
 * launched concurrently (on the host device, launches are serialised inside the device; on
 * CUDA and HIP they go to the driver directly, each on its caller's stream).
 *
 * Lifetime.  A kernel belongs to its context: it stays valid until kiln_context_destroy, which
 * must not race with other calls on that context.  Repeated prepares return the same kernel.
 *
 * Cache.  $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln (created 0700).
 * A cache directory writable by other users is refused (KILN_ERR_INSECURE): anyone who can
 * write there could make this process run their code.  An unwritable cache directory or a full
 * disk is a single warning; kernels are then compiled and run without being stored.
 *
 * Tuning runs on every device: on the host each candidate is timed by the host's clock, on CUDA
 * and HIP by the device's events around launches on device copies of the inputs (each checked
 * against the float64 reference first).  Without a compiler (libkiln_rt) KILN_TUNE_AUTO acts
 * as KILN_TUNE_CACHED and kiln_tune returns KILN_ERR_UNSUPPORTED.
 *
 * Environment: KILN_CACHE_DIR, KILN_AUTOTUNE=0|1|none (overrides the tuning policy: 1 tune on a
 * tuning-database miss, 0 use tuned records but never tune, none ignore records),
 * KILN_TUNE_SPACE (a search-space spec, see kiln_prepare_options.tune_space),
 * KILN_TUNE_PROGRESS=0, KILN_CACHE_MAX_BYTES (docs/runtime.md), KILN_HOST_THREADS,
 * KILN_CUDA_LIBRARY (the driver library to dlopen; "none": no CUDA).
 * docs/api.md has the design and the measured latencies.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

typedef enum kiln_status {
  KILN_OK = 0,            /* success */
  KILN_ERR_INVALID = 1,   /* bad argument or malformed input (IR, descriptor) */
  KILN_ERR_UNSUPPORTED,   /* a valid request kiln cannot serve (shape, dtype, target) */
  KILN_ERR_NO_DEVICE,     /* the requested device or its driver is not present */
  KILN_ERR_COMPILE,       /* the compiler failed; the message says why */
  KILN_ERR_RUNTIME,       /* a launch or memory operation failed */
  KILN_ERR_IO,            /* a file or cache operation failed */
  KILN_ERR_NOMEM,         /* out of memory */
  KILN_ERR_INSECURE,      /* the cache directory is writable by others (or not ours): refused */
} kiln_status;

/* the library's version (KILN_VERSION_STRING of the build) and that of the LLVM it compiles
 * with ("22.1.0"; libkiln_rt: the LLVM of its build, which generated the code it loads) */
const char *kiln_version(void);
const char *kiln_llvm_version(void);

/* a short description of a status ("invalid argument") */
const char *kiln_status_str(kiln_status s);
/* the message of the last failed kiln call on this thread ("" if none) */
const char *kiln_last_error(void);

/* ---- context ---- */

typedef struct kiln_context kiln_context;
typedef struct kiln_kernel kiln_kernel;

typedef enum kiln_log_level {
  KILN_LOG_ERROR = 0,   /* a request failed (also returned as a status) */
  KILN_LOG_WARN = 1,    /* something degraded: corrupt cache entry rebuilt, cache unwritable */
  KILN_LOG_INFO = 2,    /* events: compiled, cache hit, tuned, tuning record used */
  KILN_LOG_DEBUG = 3,   /* detail: memo hits, candidate timings */
} kiln_log_level;

/* called from whichever thread hit the event; must be thread-safe; message valid for the call */
typedef void (*kiln_log_fn)(void *user, kiln_log_level level, const char *message);

typedef enum kiln_tune_policy {
  KILN_TUNE_CONTEXT = 0,  /* prepare: the context's policy.  context: KILN_TUNE_CACHED */
  KILN_TUNE_NONE,         /* the template's default tiling; the tuning database is not read */
  KILN_TUNE_CACHED,       /* a tuned tiling from the database if there is one, else the default */
  KILN_TUNE_AUTO,         /* as CACHED, but tune (and record) on a database miss */
} kiln_tune_policy;

struct kiln_tune_candidate;
/* tuning progress: candidate `done` of `total` has finished (c describes it) */
typedef void (*kiln_progress_fn)(void *user, int done, int total,
                                 const struct kiln_tune_candidate *c);

typedef struct kiln_context_options {
  const char *cache_dir;      /* NULL: $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln, ~/.cache/kiln */
  int no_cache;               /* nonzero: no disk cache and no tuning database at all */
  const char *device;         /* "auto" (NULL): the first AMD GPU kiln has a target for, else
                                 the first NVIDIA sm_80+ GPU, else the host; "host"; "cuda"
                                 (the first NVIDIA sm_80+ GPU), "cuda:N" (CUDA ordinal N);
                                 "sm_80" (any sm_80+ GPU, sm_80 code), "sm_90a" (a compute
                                 capability 9.0 GPU); "hip" (the first AMD GPU kiln has a
                                 target for), "hip:N" (HIP ordinal N), "gfx90a", "gfx942",
                                 "gfx950" (the first AMD GPU of that chip).  Another "gfx*" or
                                 "sm_*": KILN_ERR_UNSUPPORTED */
  kiln_log_fn log;            /* optional */
  void *log_user;
  kiln_tune_policy tune_policy; /* default for prepares (KILN_TUNE_CONTEXT: CACHED); the
                                   environment's KILN_AUTOTUNE overrides it */
  kiln_progress_fn progress;  /* optional; NULL: stderr while tuning (KILN_TUNE_PROGRESS=0: none) */
  void *progress_user;
  const char *bundle;         /* optional: an AOT bundle (`kiln aot`'s directory, or its
                                 index.kiln): descriptors it holds for the context's target are
                                 loaded from it, never compiled (docs/aot.md).  A malformed index:
                                 kiln_context_create fails (KILN_ERR_IO with file:line:col) */
  int bundle_only;            /* nonzero: never compile; a descriptor the bundle lacks is
                                 KILN_ERR_UNSUPPORTED; zero: such a descriptor is compiled as
                                 usual (in a library without the compiler: served from the
                                 cache, docs/install.md) */
} kiln_context_options;

/* options NULL: all defaults.  KILN_ERR_INSECURE for a cache directory writable by others,
 * KILN_ERR_NO_DEVICE / KILN_ERR_UNSUPPORTED for a device that is absent or not yet served. */
kiln_status kiln_context_create(const kiln_context_options *options, kiln_context **out);
void kiln_context_destroy(kiln_context *ctx);

/* the kiln target the context compiles for ("host", "sm_80", "sm_90a", "gfx942"...) and the
 * device's name (CPU model, "NVIDIA H200") */
const char *kiln_context_target(const kiln_context *ctx);
const char *kiln_context_device_name(const kiln_context *ctx);
/* the cache directory in use, or "" when running without one */
const char *kiln_context_cache_dir(const kiln_context *ctx);

/* the CUDA or HIP ordinal of the context's GPU (buffers for kiln_forward live on it), -1 on the
 * host */
int kiln_context_device_ordinal(const kiln_context *ctx);

/* counters since the context was created (for tests, monitoring, and "did we compile?") */
typedef struct kiln_stats {
  uint64_t prepares;        /* kiln_prepare calls that succeeded */
  uint64_t memo_hits;       /* ... answered from the context's memory */
  uint64_t cache_hits;      /* kernels loaded from the disk cache */
  uint64_t compiles;        /* kernels compiled (tuning candidates excluded) */
  uint64_t corrupt_entries; /* bad cache entries found (removed and rebuilt) */
  uint64_t not_stored;      /* compiled kernels the cache could not store */
  uint64_t tuning_hits;     /* tilings taken from the tuning database */
  uint64_t tunings;         /* autotuning runs */
  uint64_t candidates;      /* candidates compiled by those runs */
  uint64_t launches;        /* kiln_forward calls that succeeded */
  uint64_t bundle_loads;    /* kernels loaded from the context's AOT bundle */
} kiln_stats;
/* counters since the context was created; all zero for a NULL ctx, nothing for a NULL out */
void kiln_context_stats(kiln_context *ctx, kiln_stats *out);

/* ---- kernels ---- */

typedef enum kiln_dtype {
  KILN_F16 = 1,   /* IEEE binary16 */
  KILN_BF16,      /* bfloat16 */
  KILN_F32,       /* binary32 */
  /* fp8, for q_dtype / kv_dtype only (inputs with descale factors; docs/serving.md) */
  KILN_F8E4M3,     /* OCP E4M3FN (NVIDIA sm_89+, torch.float8_e4m3fn) */
  KILN_F8E5M2,     /* OCP E5M2 (torch.float8_e5m2) */
  KILN_F8E4M3FNUZ, /* AMD E4M3 fnuz (gfx942, torch.float8_e4m3fnuz) */
  KILN_F8E5M2FNUZ, /* AMD E5M2 fnuz (gfx942, torch.float8_e5m2fnuz) */
} kiln_dtype;

/* "f16", "bf16", "f32", "f8e4m3", ...; NULL for a value that is not a kiln_dtype */
const char *kiln_dtype_name(kiln_dtype t);

/* What to compute: FlashAttention-2 style forward, O = softmax(mods(Q K^T * scale)) V.
 *
 * The variant (docs/variants.md).  Each is a modifier of the scores or the mask, applied in the
 * order of the fields; its values are kiln_attn_args fields (window sizes, the cap, tensors),
 * arguments of every launch, not part of the kernel:
 *   causal    KILN_CAUSAL_BOTTOM_RIGHT (1): query i sees key j iff j <= i + seqlen_k - seqlen_q
 *             (FlashAttention 2); KILN_CAUSAL_TOP_LEFT (2): iff j <= i; 0: no causal mask
 *   window    sliding window around the bottom-right diagonal: key j is visible to query i iff
 *             -window_left <= j - (i + seqlen_k - seqlen_q) <= window_right (-1: unbounded)
 *   softcap   logit soft-capping: score -> softcap * tanh(score / softcap)
 *   alibi     ALiBi: score -= slope[b, h] * |i + seqlen_k - seqlen_q - j|
 *   bias      an additive bias tensor (B, H, seqlen_q, seqlen_k) in the kernel's dtype
 *   document  packed documents: query i sees key j only if q_seg[b, i] == k_seg[b, j]
 *   prefix    prefix-LM: every key below prefix_len is visible, the rest bottom-right causal
 *             (prefix includes its causal part: causal must be 0 with it)
 *   mods      the text of the caller's own modifiers in kiln's IR (docs/ir.md; a signature is
 *             one line there, wrapped here), any of
 *             func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32,
 *                             ...) -> (f32)
 *             func @mask_mod(%b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, ...) -> (i1)
 *             func @block_mask(%b: i32, %h: i32, %q_lo: i32, %q_hi: i32, %kv_lo: i32,
 *                              %kv_hi: i32, ...) -> (i1)
 *             whose parameters after the fixed ones are values given by name at launch
 *             (kiln_attn_args.mod_args), unless named like a kernel parameter (seqlen_q,
 *             seqlen_k, heads, kv_group, sm_scale, ...), which they then are.  kiln_prepare
 *             copies the text (the kernel owns its copy) and keys the kernel by its hash; a
 *             malformed text is KILN_ERR_INVALID with the parser's or verifier's
 *             <mods_name>:line:col message.
 * The flags are 0 (off) or nonzero (on); fields added later keep the zero-initialised
 * descriptor of an older caller meaning what it meant. */
enum {
  KILN_CAUSAL_NONE = 0,
  KILN_CAUSAL_BOTTOM_RIGHT = 1, /* as FlashAttention 2 aligns it when seqlen_q != seqlen_k */
  KILN_CAUSAL_TOP_LEFT = 2,
};

typedef struct kiln_attn_desc {
  kiln_dtype dtype;    /* of q, k, v and o */
  int head_dim;        /* 1..256 on every device; up to 512 where kiln accepts it (the host:
                        * yes; NVIDIA: no); padded to a multiple of 16 inside the kernel */
  int causal;          /* KILN_CAUSAL_NONE, _BOTTOM_RIGHT or _TOP_LEFT */
  int has_lse;         /* nonzero: also write the log-sum-exp per query row (natural log, f32) */
  int window, softcap, alibi, bias, document, prefix; /* the built-in variants (above) */
  const char *mods;    /* the caller's modifiers (IR text), NULL or "": none */
  const char *mods_name; /* what error messages call the text (a file name); NULL: "<mods>".
                            Not part of the kernel's identity */
  int layout;          /* the call shape: KILN_LAYOUT_DENSE (0), KILN_LAYOUT_VARLEN (packed
                          sequences of their own lengths, cu_seqlens; kiln_attn_args) or
                          KILN_LAYOUT_PAGED (a paged KV cache through a block table) */
  /* fp8 inputs (docs/serving.md, "fp8 inputs and KV pages"): the element type of q and of k / v
   * (the pools and k_new / v_new of a paged call) when they are not dtype: 0 means dtype, else
   * KILN_F8E4M3, KILN_F8E5M2, KILN_F8E4M3FNUZ or KILN_F8E5M2FNUZ, with dtype (the type of o and
   * of the dots) KILN_F16 or KILN_BF16.  The descale factors are kiln_attn_args'. */
  kiln_dtype q_dtype, kv_dtype;
  /* Dropout (training, docs/backward.md): the probability p in [0, 1) that an attention weight
   * is dropped (0: none; p != 0 is a kernel of its own).  A kept weight is scaled by 1 / (1 - p)
   * (FlashAttention's semantics; lse stays that of the undropped scores).  The mask is Philox
   * 4x32-10 of kiln_attn_args.dropout_seed / dropout_offset and each (batch, head, query row,
   * key column), regenerated by kiln_backward from the same arguments, never stored.  Dense and
   * varlen layouts; not with fp8 inputs or a paged KV cache (KILN_ERR_UNSUPPORTED); a p
   * outside [0, 1) is KILN_ERR_INVALID. */
  float dropout_p;
} kiln_attn_desc;

enum {
  KILN_LAYOUT_DENSE = 0,  /* (batch, heads, seqlen, head_dim) buffers, one length for all */
  KILN_LAYOUT_VARLEN = 1, /* packed (total_tokens, heads, head_dim), FlashAttention's varlen */
  KILN_LAYOUT_PAGED = 2,  /* k, v in pages (num_pages, page_size, kv_heads, head_dim) read
                             through a block table: FlashAttention's flash_attn_with_kvcache */
};

/* A value of a parameter of the caller's modifiers (kiln_attn_desc.mods), by name. */
typedef enum kiln_mod_arg_kind {
  KILN_MOD_ARG_INT = 1, /* i: an i32 or i64 parameter (also accepted for an f32 one) */
  KILN_MOD_ARG_FLOAT,   /* f: an f32 parameter */
  KILN_MOD_ARG_PTR,     /* p: a ptr<T> parameter (a tensor), on the kernel's device */
} kiln_mod_arg_kind;

typedef struct kiln_mod_arg {
  const char *name;     /* the parameter's name in the text, without '%' */
  kiln_mod_arg_kind kind;
  int64_t i;
  double f;
  const void *p;
  size_t bytes;         /* PTR: the bytes readable at p.  Required where kiln evaluates the
                           modifiers itself (tuning's reference checks every access against it);
                           kiln_forward does not read it (0 = unknown) */
} kiln_mod_arg;

typedef struct kiln_prepare_options {
  kiln_tune_policy tune_policy; /* KILN_TUNE_CONTEXT: the context's */
  int seqlen;          /* typical sequence length: picks the tuning bucket (0: 1024) */
  int block_m, block_n; /* nonzero: this tiling, no tuning (both must be given) */
  int warps;           /* nonzero: this many warps (GPU) per program, no tuning; the rest of the
                          tiling is block_m/block_n if given, else the template's default.  On
                          the host it is recorded in the kernel but changes nothing */
  /* autotuning (KILN_TUNE_AUTO, kiln_tune): */
  const char *tune_space; /* NULL: $KILN_TUNE_SPACE if set; applied over the template's
                             space, e.g. "block_m=32,64;block_n=32,64;max_tile_bytes=1048576"
                             (knobs block_m, block_n, warps, stages, waves_per_eu,
                             matrix_instr; limits max_tile_bytes, max_vgprs, max_lds_bytes,
                             max_spill_bytes) */
  int tune_batch, tune_heads; /* problem timed: batch x heads x seqlen^2 (0: 1 and 8); at most
                                  2^30 elements a tensor */
  int tune_warmup;     /* launches before timing (0: 2; at most 10000) */
  int tune_repeats;    /* timed launches, median reported (0: 7; at most 10000).  A negative or
                          out-of-range tuning field is KILN_ERR_INVALID (kiln_tune, and
                          kiln_prepare under KILN_TUNE_AUTO) */
  /* tuning a variant: every candidate is checked against the float64 reference with
   * representative values of the variant (window 256 left / 0 right, softcap 30, ALiBi's
   * geometric slopes, a random bias, four documents, a prefix of a quarter of the length) */
  int tune_window_left, tune_window_right; /* window: the sizes tuned with (both 0: 256, 0) */
  const kiln_mod_arg *tune_mod_args; /* the values of the caller's modifier parameters to tune
                                        with (pointers: host memory, `bytes` set, sized for the
                                        tuning problem tune_batch x tune_heads x seqlen); a
                                        kernel whose modifiers have parameters is not tuned
                                        without them */
  int tune_n_mod_args;
  int wgmma;           /* nonzero (sm_90a only): the dots as wgmma.mma_async instead of mma.sync;
                          a forced tiling, no tuning: block_m/block_n/warps if given, else the
                          default's block_n and block_m with block_m / 16 warps (wgmma takes one
                          64-row slab per warpgroup of 4 warps: block_m = 16 x warps) */
  int backward_dq;     /* kiln_prepare_backward: how dQ is summed (kiln_backward_dq) */
} kiln_prepare_options;

/* kiln_prepare_options.backward_dq.  DEFAULT: kiln's choice for the target and descriptor (see
 * kiln_prepare_backward).  DETERMINISTIC: a separate dQ pass, every element summed by one
 * program in one order, so the same inputs give the same bits on every run.  ATOMIC: the dK/dV
 * kernel also adds dQ's partial sums into an f32 workspace (kiln_backward_args.dq_accum) with
 * atomic adds, which spares the second pass's recomputation (5 matrix products per block pair
 * instead of 7); dK and dV stay deterministic, dQ's last bits may differ run to run. */
typedef enum kiln_backward_dq {
  KILN_BWD_DQ_DEFAULT = 0,
  KILN_BWD_DQ_DETERMINISTIC = 1,
  KILN_BWD_DQ_ATOMIC = 2,
} kiln_backward_dq;

/* Compile-or-load.  options NULL: defaults.  On success *out is the context's kernel for this
 * descriptor and tiling (the same pointer on every later call).  KILN_ERR_UNSUPPORTED for a
 * descriptor the template does not serve (and, in libkiln_rt, for a kernel whose code is not in
 * the cache, or any on the host), KILN_ERR_COMPILE if compiling fails. */
kiln_status kiln_prepare(kiln_context *ctx, const kiln_attn_desc *desc,
                         const kiln_prepare_options *options, kiln_kernel **out);

typedef enum kiln_kernel_source {
  KILN_SOURCE_COMPILED = 1,  /* compiled in this context */
  KILN_SOURCE_CACHE,         /* loaded from the disk cache */
  KILN_SOURCE_BUNDLE,        /* loaded from the context's AOT bundle (kiln_context_options.bundle) */
} kiln_kernel_source;

typedef struct kiln_kernel_info {
  kiln_attn_desc desc;
  int block_m, block_n, warps, stages;
  int tuned;                 /* the tiling came from the tuning database or a tuning run */
  kiln_kernel_source source;
  double prepare_ms;         /* time to compile or load it */
  char cache_key[33];        /* hex key of its cache entry */
  char target[16];
  int wgmma;                 /* the dots are wgmma (kiln_prepare_options.wgmma) */
  int atomic_dq;             /* a backward that adds dQ with atomics: kiln_backward needs
                                kiln_backward_args.dq_accum (KILN_BWD_DQ_ATOMIC) */
} kiln_kernel_info;
kiln_status kiln_kernel_get_info(const kiln_kernel *k, kiln_kernel_info *out);

/* Buffers are the caller's; strides are in elements, the head dimension must be contiguous.
 * Layouts (a stride triple of zeros means contiguous for exactly the shape described):
 *   q, o (batch, heads, seqlen_q, head_dim)      strides {batch, head, row}
 *   k, v (batch, kv_heads, seqlen_k, head_dim)   strides {batch, head, row}
 *   lse  (batch, heads, seqlen_q) f32            strides {batch, head}, rows contiguous;
 *        required when the descriptor has_lse, ignored otherwise
 * Varlen (KILN_LAYOUT_VARLEN): sequence b owns tokens [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q
 * and o and [cu_seqlens_k[b], cu_seqlens_k[b+1]) of k and v; seqlen_q and seqlen_k are the
 * longest sequence's lengths (FlashAttention's max_seqlen_q / max_seqlen_k: the grid, and the
 * row extents of bias and document tensors, which a sequence indexes from its own token 0):
 *   q, o (total_q, heads, head_dim)              strides {0, head, token}
 *   k, v (total_k, kv_heads, head_dim)           strides {0, head, token}
 *   lse  (heads, total_q) f32                    strides {0, head}, tokens contiguous
 * Each sequence is attended on its own: causal and window align bottom-right to its own
 * lengths, as FlashAttention's varlen does.  An empty sequence (equal neighbours) is allowed.
 *
 * Paged (KILN_LAYOUT_PAGED, flash_attn_with_kvcache): q, o and lse are dense as above (FlashAttention's
 * (batch, seqlen_q, heads, head_dim) is q_stride {Nq*H*D, D, H*D}); k and v are page pools
 *   k, v (num_pages, page_size, kv_heads, head_dim)  strides {page, head, row}; zeros: contiguous
 * and sequence b's key j is row j % page_size of page block_table[b, j / page_size].  Sequence b
 * has cache_seqlens[b] + seqlen_new keys: with k_new / v_new ((batch, seqlen_new, kv_heads,
 * head_dim), strides {batch, head, row}, zeros: contiguous) kiln first writes the new rows at
 * positions cache_seqlens[b].. through the table (on the host in kiln_forward, on CUDA by a
 * small append kernel launched first on the same stream; not on HIP yet), then attends; causal and
 * window align bottom-right to each sequence's length (the queries are its last seqlen_q keys).
 * seqlen_k must be 0 or max_pages * page_size (the table's capacity, also the key extent of bias
 * and document tensors).  On the host every used table entry must be a page of the pool and
 * every length fit the table (else KILN_ERR_INVALID, nothing written); on CUDA the table is
 * device memory kiln does not read, and the kernel clamps pages and lengths into the pool.
 *
 * Capacities.  q_numel ... k_seg_numel give the elements each buffer holds from its pointer
 * (0: not described, not checked).  A described buffer that the shape and strides reach past is
 * KILN_ERR_INVALID before launch, and so are zero (contiguous) strides over a dense q, k, v or
 * o larger than the contiguous shape when more than one (batch, head) is described: a
 * (batch, kv_heads, capacity, head_dim) KV cache read with seqlen_k < capacity would otherwise
 * be read with the wrong row stride (give its strides).  docs/api.md states the rule.
 *
 * heads must be a multiple of kv_heads (grouped-query attention: head h reads kv head
 * h / (heads / kv_heads)).  CUDA: GPU kernels read rows in vectors as wide as the head dim allows
 * (up to 16 bytes: 8 f16/bf16 elements when 8 divides head_dim, 4 when 4 does, ...), so q, k, v
 * and o must be aligned to the vector's size in bytes and their strides (of dims longer than 1)
 * multiples of its elements; contiguous layouts always are, anything else is KILN_ERR_INVALID. */
typedef struct kiln_attn_args {
  const void *q, *k, *v;
  void *o;
  float *lse;
  int batch, heads, kv_heads, seqlen_q, seqlen_k;
  float sm_scale;            /* 0: 1/sqrt(head_dim) */
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
  int64_t lse_stride[2];
  /* The variant's values (kiln_attn_desc).  The fields of a variant the kernel was not
   * prepared with must stay zero (KILN_ERR_INVALID otherwise); tensors live where q does. */
  int window_left, window_right; /* window: keys visible left and right of the diagonal, -1
                                    unbounded (0 and 0: the diagonal only) */
  float softcap;             /* softcap: the cap, > 0 */
  const float *alibi_slopes; /* alibi: f32 slopes (batch, heads), or (heads) for every batch */
  int64_t alibi_stride;      /* ... its batch stride; 0: one (heads) vector for every batch */
  const void *bias;          /* bias: (batch, heads, seqlen_q, seqlen_k) of the kernel's dtype,
                                keys contiguous */
  int64_t bias_stride[3];    /* ... strides {batch, head, row}; all zero: contiguous; a zero
                                among nonzero ones broadcasts that axis */
  const int32_t *q_seg, *k_seg; /* document: segment ids (batch, seqlen_q), (batch, seqlen_k);
                                   each row non-decreasing (documents packed in order) */
  int64_t q_seg_stride, k_seg_stride; /* ... batch strides; 0: contiguous */
  int prefix_len;            /* prefix: keys [0, prefix_len) are visible to every query */
  const kiln_mod_arg *mod_args; /* mods: a value for every parameter of the caller's modifiers */
  int n_mod_args;
  /* varlen (KILN_LAYOUT_VARLEN; zero otherwise): batch + 1 non-decreasing int32 prefix sums
   * each, where q lives (the host checks them; a GPU kernel clamps every range into total_q /
   * total_k, so bad values give wrong rows, never accesses outside the buffers) */
  const int32_t *cu_seqlens_q, *cu_seqlens_k;
  int total_q, total_k;      /* tokens (rows) of the packed q/o and k/v */
  /* capacities: elements each buffer holds from its pointer, 0: not described (above) */
  int64_t q_numel, k_numel, v_numel, o_numel, lse_numel;
  int64_t alibi_numel, bias_numel, q_seg_numel, k_seg_numel;
  /* paged (KILN_LAYOUT_PAGED; zero otherwise): the block table (batch, max_pages) int32 and the
   * cache lengths (batch) int32, where q lives; the pools' shape; the rows to append first */
  const int32_t *block_table, *cache_seqlens;
  int64_t block_table_stride;  /* the table's batch stride; 0: max_pages */
  int page_size;               /* rows per page, 1..256 */
  int num_pages, max_pages;    /* pages in each pool; table entries per sequence */
  const void *k_new, *v_new;   /* NULL, or (batch, seqlen_new, kv_heads, head_dim) each; with
                                  NULL, seqlen_new counts rows the caller already wrote */
  int seqlen_new;
  int64_t k_new_stride[3], v_new_stride[3];      /* {batch, head, row}; zeros: contiguous */
  int64_t block_table_numel, k_new_numel, v_new_numel;  /* capacities, 0: not described */
  /* fp8 inputs (a kernel with q_dtype or kv_dtype set; zero otherwise): FlashAttention 3's
   * q_descale / k_descale / v_descale, f32 (batch, kv_heads) each where q lives, NULL: 1.  The
   * kernel attends over q * q_descale[b, h / (heads / kv_heads)], k * k_descale[b, hk] and
   * v * v_descale[b, hk]; o is not scaled back. */
  const float *q_descale, *k_descale, *v_descale;
  int64_t descale_stride;      /* their batch stride; 0: kv_heads (contiguous); else at least
                                  kv_heads when batch > 1 (rows of kv_heads scales each) */
  /* capacities (f32 elements from each pointer, 0: not described): a descale that its
   * (batch, kv_heads) rows at descale_stride reach past is KILN_ERR_INVALID before launch */
  int64_t q_descale_numel, k_descale_numel, v_descale_numel;
  /* dropout (a kernel with dropout_p != 0; zero otherwise): Philox's key and the counter's
   * offset.  Query head h of batch b draws the counters (col, row, offset + b * heads + h), so
   * a training step that advances the offset by batch * heads (or more) per call never reuses a
   * mask; kiln_backward must get the forward's values (they are kiln_backward_args.fwd's). */
  uint64_t dropout_seed, dropout_offset;
} kiln_attn_args;

/* Launches the kernel on `stream`.  Bad arguments are KILN_ERR_INVALID with the reason: a
 * NULL tensor the kernel reads, a value for a variant the kernel was not prepared with, a
 * modifier parameter without a value (or a value for a name that is none of them, or of the
 * wrong kind).  CUDA: buffers are device pointers valid in the device's
 * primary context, `stream` a CUstream (NULL: the legacy default stream), the call returns once
 * the launch is queued (KILN_ERR_UNSUPPORTED for a grid CUDA cannot launch: batch * heads above
 * 65535; KILN_ERR_RUNTIME when the driver refuses the launch; faults inside the kernel show at
 * the caller's next synchronisation, as with any CUDA kernel).  HIP: buffers are device
 * pointers of the context's device, `stream` a hipStream_t (NULL: the null stream), the call
 * returns once the launch is queued (KILN_ERR_RUNTIME when the runtime refuses it).  Host: host
 * pointers, the stream is ignored and the call returns when the output is written. */
kiln_status kiln_forward(kiln_kernel *k, const kiln_attn_args *args, void *stream);

/* ---- autotuning ---- */

/* ---- training: the backward pass (docs/backward.md) ----
 *
 * kiln_prepare_backward prepares the backward of the forward that desc describes (the same
 * descriptor: variant, dtype, head dim; has_lse is not needed, the backward always reads lse):
 * three kernels (delta = rowsum(dO * O); dK and dV per key block, summed over the query heads of
 * a group; dQ per query block), deterministic (no atomics: the same inputs give the same bits),
 * or with options.backward_dq = KILN_BWD_DQ_ATOMIC dQ added by the dK/dV kernel with atomics
 * into kiln_backward_args.dq_accum and rounded by the third (kiln_backward_dq).
 * Options: block_m / block_n / warps force the tiling (each dK/dV program owns block_n keys and
 * walks the query rows in steps of block_m; each dQ program owns block_n query rows and walks
 * the keys in steps of block_m); wgmma (sm_90a, f16 / bf16, head dims up to 128) runs the dots
 * as wgmma.mma_async with the backward's wgmma tiling (kn_attn_bwd_wgmma_config: block_n 64
 * with 4 warps, block_m 64 or 32), or block_m / block_n with block_n / 16 warps when given;
 * without options that tiling is the default on sm_90a for dense plain and causal kernels at
 * padded head dims 64 and 128 (measured faster), and a forced tiling without wgmma is mma.sync;
 * tuning is not offered yet.  Dense and varlen layouts (varlen:
 * the forward's packed call, docs/serving.md); paged and head dims above 256 are
 * KILN_ERR_UNSUPPORTED, and so is a score modifier (the caller's @score_mod) whose
 * derivative kiln does not take from its IR (docs/backward.md lists the ops it differentiates);
 * so is any backward in a bundle_only context (AOT bundles hold forward kernels only).
 * The kernel it returns is launched with kiln_backward only. */
kiln_status kiln_prepare_backward(kiln_context *ctx, const kiln_attn_desc *desc,
                                  const kiln_prepare_options *options, kiln_kernel **out);

/* fwd: the forward's arguments, as kiln_forward took them (q, k, v, its output o, its lse --
 * required here -- shapes, strides, the variant's values, capacities).  dout (batch, heads,
 * seqlen_q, head_dim): dL/dO; dq like q, dk and dv like k, written; strides as q's ({batch,
 * head, row}, zeros: contiguous) and capacities as kiln_attn_args's.  delta: a workspace of
 * batch * heads * seqlen_q f32, contiguous, that the launch overwrites (device memory on a GPU).
 * Varlen (a backward prepared with KILN_LAYOUT_VARLEN): fwd is the forward's varlen call
 * (cu_seqlens_q/k, total_q/k, packed q, k, v, o, lse (heads, total_q)); dout and dq are
 * (total_q, heads, head_dim), dk and dv (total_k, kv_heads, head_dim), their strides {0, head,
 * token} (zeros: packed); delta holds heads * total_q f32 (lse's layout).  Tokens that no
 * sequence owns are not written.  dq_accum: a workspace of batch * heads * seqlen_q * head_dim
 * f32 (varlen: heads * total_q * head_dim), contiguous, that the launch overwrites; required by
 * a kernel that adds dQ with atomics (kiln_kernel_info.atomic_dq), ignored by the others. */
typedef struct kiln_backward_args {
  kiln_attn_args fwd;
  const void *dout;
  void *dq, *dk, *dv;
  float *delta;
  int64_t dout_stride[3], dq_stride[3], dk_stride[3], dv_stride[3];
  int64_t dout_numel, dq_numel, dk_numel, dv_numel, delta_numel;
  float *dq_accum;
  int64_t dq_accum_numel;
} kiln_backward_args;

/* Launches the backward on `stream` (its three kernels in order); errors as kiln_forward's. */
kiln_status kiln_backward(kiln_kernel *k, const kiln_backward_args *args, void *stream);

typedef enum kiln_candidate_state {
  KILN_CANDIDATE_TIMED = 0,  /* compiled, checked against the reference, timed */
  KILN_CANDIDATE_INVALID,    /* not a tiling the template accepts (the space no longer offers
                                these: kept so the values stay stable) */
  KILN_CANDIDATE_PRUNED,     /* its compiled code exceeds a resource limit of the space */
  KILN_CANDIDATE_FAILED,     /* did not compile or launch */
  KILN_CANDIDATE_WRONG,      /* ran, but its output is outside tolerance */
} kiln_candidate_state;

typedef struct kiln_tune_candidate {
  int block_m, block_n, warps, stages, waves_per_eu;
  char matrix_instr[64];
  kiln_candidate_state state;
  double median_us, min_us;  /* TIMED only */
  double compile_ms;
  uint64_t tile_bytes;       /* the resource its compiled code reports (host: tile storage) */
  char note[160];            /* why INVALID / PRUNED / FAILED / WRONG */
  int decode_splits;         /* kiln_tune_decode: the KV pieces (0 for kiln_tune) */
} kiln_tune_candidate;

typedef struct kiln_tune_result {
  int ncandidates;
  kiln_tune_candidate *candidates; /* malloc'ed: kiln_tune_result_free */
  int best;                  /* index of the fastest TIMED candidate */
  int batch, heads, seqlen;  /* the problem timed */
  int recorded;              /* the best was written to the tuning database */
  double seconds;            /* wall time of the whole run */
  char space[512];           /* the space searched, as a spec */
} kiln_tune_result;

/* Tunes the descriptor's tiling for the options' seqlen bucket now (whatever the database holds),
 * records the best (replacing the record), stores the best kernel in the cache, and fills *out
 * (may be NULL).  Fails with KILN_ERR_RUNTIME when no candidate could be timed, and with
 * KILN_ERR_UNSUPPORTED in libkiln_rt (tuning compiles every candidate). */
kiln_status kiln_tune(kiln_context *ctx, const kiln_attn_desc *desc,
                      const kiln_prepare_options *options, kiln_tune_result *out);
void kiln_tune_result_free(kiln_tune_result *r);

/* Tunes decode (docs/serving.md) for the call `args` of forward kernel k (dense or paged,
 * seqlen_q 1..16: a call kiln_forward serves with the decode kernels), on its buffers and
 * stream (a paged call's k_new / v_new are appended at every run, to the same rows): the split
 * kernel's block_n (16, 32, 64, 128, those the device takes) x the KV pieces (the heuristic's,
 * 1, 2, 4, ..., 128), each candidate's output first compared with the default decode kernels'
 * (a WRONG one is never chosen), then timed (options' tune_warmup / tune_repeats; NULL: 2 and
 * 7).  The fastest stays with k: later forwards of the same batch x kv heads, seqlen_k and
 * seqlen_q use it (not recorded in the tuning database).  Overwrites o and lse (with the
 * answer); no forward of k may run meanwhile.  *out (may be NULL): the candidates, their
 * decode_splits set.  KILN_ERR_INVALID for a call decode does not serve or with
 * KILN_DECODE_SPLITS set. */
kiln_status kiln_tune_decode(kiln_kernel *k, const kiln_attn_args *args, void *stream,
                             const kiln_prepare_options *options, kiln_tune_result *out);

/* ---- the cache directory (what `kiln cache ls|verify|clear` shows and does) ---- */

typedef struct kiln_cache_entry {
  char key[33];              /* hex key */
  uint64_t bytes;            /* on disk: header + payload */
  int64_t last_used;         /* seconds since the epoch */
} kiln_cache_entry;

typedef struct kiln_tuning_record {
  char template_name[64];    /* "fwd" */
  char variant[192];         /* the descriptor's canonical key,
                                "dtype=f16;d=128;causal=1;lse=1;window=0;...;mods=0" */
  char dtype[16];
  int head_dim, seq_bucket;
  char arch[32];             /* "host-znver3", "sm_90a-NVIDIA H200" */
  char kiln_version[32];     /* of the kiln that measured (others' records are never matched) */
  int block_m, block_n, warps, stages;
  double time_us;
  int64_t tuned_at;          /* seconds since the epoch */
} kiln_tuning_record;

typedef struct kiln_cache_listing {
  uint64_t max_bytes;        /* the size bound (KILN_CACHE_MAX_BYTES) */
  size_t nentries;           /* entries, most recently used first */
  kiln_cache_entry *entries;
  char tuning_db[4200];      /* the tuning database's path; "" when there is none yet */
  size_t nrecords;           /* its records (every kiln version) */
  kiln_tuning_record *records;
} kiln_cache_listing;

/* Lists the context's cache directory; never creates the tuning database.  KILN_ERR_INVALID
 * for a context without a cache.  Free with kiln_cache_listing_free. */
kiln_status kiln_cache_list(kiln_context *ctx, kiln_cache_listing *out);
void kiln_cache_listing_free(kiln_cache_listing *l);

typedef struct kiln_cache_report {
  size_t entries;            /* examined */
  size_t valid;
  size_t removed_corrupt;    /* verify: bad entries removed */
  size_t removed_temp;       /* stale temp files (an hour old) of crashed writers */
  size_t removed;            /* clear: entries removed */
  uint64_t bytes;            /* held afterwards */
  size_t corrupt_kept;       /* verify: bad entries that could not be removed (the log says why) */
  size_t kept_temp;          /* younger temp files, left alone: writes that may be in flight */
} kiln_cache_report;

/* reads every entry and removes the bad ones (each also a warning to the log) */
kiln_status kiln_cache_verify(kiln_context *ctx, kiln_cache_report *out);
/* removes every entry and stale temp file; the tuning records are kept, and so are younger
 * temp files (another process's write in flight) */
kiln_status kiln_cache_clear(kiln_context *ctx, kiln_cache_report *out);

#ifdef __cplusplus
}
#endif
#endif
