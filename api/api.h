/* api.h — what api/kiln.c (context, prepare, forward) and api/tune.c (the autotuner) share.
 *
 * The API layer is the only one that sees templates, the compiler, the runtime and the storage
 * layers together.  It holds no LLVM types: compiler/pipeline.h's object path (kn_object,
 * kn_host_object) is its whole view of code generation.
 */
#ifndef KILN_API_INTERNAL_H
#define KILN_API_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "attention.h"
#include "cache.h"
#include "discover.h"
#include "kiln.h"
#include "pipeline.h"
#include "space.h"
#include "tunedb.h"

#define API_MEMO_BUCKETS 256

typedef struct memo_slot memo_slot;

struct kiln_context {
  const kn_target *target;     /* what the context compiles for (the host so far) */
  kn_device_kind kind;
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

  /* the memo: request and kernel slots, one in-flight marker per key (see kiln.c) */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  memo_slot *buckets[API_MEMO_BUCKETS];
  kiln_kernel *kernels;        /* every kernel, for destroy */

  struct {
    atomic_uint_fast64_t prepares, memo_hits, cache_hits, compiles, corrupt_entries, not_stored,
        tuning_hits, tunings, candidates, launches;
  } stats;
};

struct kiln_kernel {
  kiln_context *ctx;
  kiln_kernel *next;           /* ctx->kernels list */
  kiln_kernel_info info;
  kn_attn_desc desc;
  kn_attn_config cfg;
  kn_host_object *obj;
  pthread_mutex_t launch_mu;   /* one launch of this kernel at a time (its status word) */
};

/* kiln.c */
kiln_status api_fail(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void api_log(kiln_context *ctx, kiln_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* the "cannot store" class of warnings (cache or tuning database unwritable): the first of a
 * context is a warning, later ones are info, so a read-only cache costs one warning */
void api_log_unwritable(kiln_context *ctx, const char *msg);
kn_tunedb *api_db(kiln_context *ctx);
void api_tune_key(const kiln_context *ctx, const kn_attn_desc *d, int seqlen, kn_tune_key *key);
/* builds the template for (d, c) into a fresh module; NULL with the reason in *diag */
kn_module *api_build_module(const kn_attn_desc *d, const kn_attn_config *c, kn_diag *diag);
/* the cache key of a built module on the context's target */
kn_cache_key api_cache_key(const kiln_context *ctx, const kn_module *m);
/* payload = small header (kernel symbol, ABI version, tile bytes) + the object; malloc'ed */
void *api_pack(const kn_object *o, size_t *size);
/* stores a compiled object in the cache (NOT_STORED is logged, counted, and not an error) */
void api_store(kiln_context *ctx, const kn_cache_key *key, const kn_object *o);
const char *api_dtype_name(kn_scalar s);

/* tune.c: tunes (d) at seqlen; record: 0 do not record, 1 only if faster, 2 replace.  Fills res
 * (may be NULL) and *best. */
kiln_status api_tune(kiln_context *ctx, const kn_attn_desc *d, const kiln_prepare_options *o,
                     int seqlen, int record, kiln_tune_result *res, kn_attn_config *best);

#endif
