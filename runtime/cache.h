/* cache.h — the content-addressed on-disk cache of compiled code (and the home of the tuning
 * database).
 *
 * The cache stores opaque payloads (code objects, PTX, host objects) under a 128-bit key.  The
 * caller builds the key from whatever determines the payload — printed IR, target, options,
 * compiler version — as a list of byte strings; the cache never interprets them.  It knows
 * nothing of the IR, of LLVM or of devices.
 *
 * Location: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln.  Entries live
 * in <dir>/objects-v1/<32 hex digits of the key>; the tuning database sits beside them in
 * <dir>/tuning.sqlite3 (autotune/tunedb.h).  Directories kiln creates are 0700; a cache
 * directory writable by group or others, or owned by another user, is refused.
 *
 * Guarantees (docs/runtime.md has the reasoning):
 *  - a get returns exactly the bytes some put stored under that key, or a miss: a truncated or
 *    corrupted entry is detected (length + XXH3-128 checksum over header and payload),
 *    removed, reported (KN_E_CORRUPT) and treated as a miss;
 *  - a put is atomic (temp file in the same directory, fsync, rename); any number of processes
 *    may put the same key at once; a put that cannot write (read-only, full disk, quota) returns
 *    KN_NOT_STORED and leaves nothing behind — the caller just continues uncached;
 *  - the total size is kept near KILN_CACHE_MAX_BYTES by evicting the least recently used
 *    entries (a hit refreshes the entry's mtime).
 *
 * Errors: every call returns a kn_status (base/status.h) and, when it is not KN_OK, says in the
 * caller's kn_diag (which may be NULL) what happened, naming the file or directory.  The outcomes
 * KN_MISS and KN_NOT_STORED are not errors.  The library never prints; a log callback, if given,
 * receives the warnings (corrupt entry removed, entry not stored) as they happen.
 *
 * Threads: a kn_cache handle may be used from several threads at once.
 */
#ifndef KILN_CACHE_H
#define KILN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_CACHE_FORMAT_VERSION 1
#define KN_CACHE_HEADER_BYTES 64
#define KN_CACHE_DEFAULT_MAX_BYTES ((uint64_t)1 << 30) /* 1 GiB */
/* the largest entry file kiln writes or reads, whatever the bound: a larger file is corrupt
 * (removed unread); one above this handle's bound but within this is another process's (a miss,
 * left alone, unread) */
#define KN_CACHE_MAX_ENTRY_BYTES ((uint64_t)1 << 30)
/* a temp file older than this is a crashed writer's leftover and may be removed */
#define KN_CACHE_STALE_TEMP_SECONDS 3600

/* The statuses the cache returns:
 *   KN_OK
 *   KN_MISS         get: no entry for the key (outcome)
 *   KN_NOT_STORED   put: could not write (read-only, ENOSPC, EDQUOT...); nothing left (outcome)
 *   KN_E_CORRUPT    get: the entry was bad (truncated, checksum, header); removed: a miss
 *   KN_E_INVALID    a bad argument
 *   KN_E_IO         the cache directory cannot be used (no HOME, mkdir failed)
 *   KN_E_INSECURE   the directory is writable by others or not ours: refused
 *   KN_E_NOMEM */

/* ---- keys ---- */

typedef struct kn_cache_key {
  uint8_t b[16]; /* XXH3-128, canonical (big-endian) byte order */
} kn_cache_key;

typedef struct kn_cache_part {
  const void *data;
  size_t size;
} kn_cache_part;

/* key of a list of byte strings; each part is length-prefixed, so ("ab","c") != ("a","bc"),
 * and the cache format version is mixed in */
kn_cache_key kn_cache_key_of(const kn_cache_part *parts, int nparts);
/* 32 lowercase hex digits + NUL */
void kn_cache_key_hex(const kn_cache_key *key, char out[33]);
/* parses 32 hex digits; returns 0 on success */
int kn_cache_key_parse(const char *hex, kn_cache_key *key);

/* ---- opening ---- */

/* level: 1 warning (something was not cached or was removed), 2 info (eviction) */
typedef void (*kn_cache_log_fn)(void *user, int level, const char *message);

typedef struct kn_cache_config {
  const char *dir;      /* NULL: $KILN_CACHE_DIR, $XDG_CACHE_HOME/kiln, $HOME/.cache/kiln */
  uint64_t max_bytes;   /* 0: $KILN_CACHE_MAX_BYTES (bytes, or with a K/M/G suffix), else
                           KN_CACHE_DEFAULT_MAX_BYTES; UINT64_MAX: unbounded */
  kn_cache_log_fn log;  /* optional */
  void *log_user;
} kn_cache_config;

typedef struct kn_cache kn_cache;

/* the directory a NULL config->dir resolves to (not created); KN_E_IO when neither
 * KILN_CACHE_DIR, XDG_CACHE_HOME nor HOME is set */
kn_status kn_cache_default_dir(char *out, size_t size, kn_diag *d);
/* creates dir (and missing parents) with mode 0700 and checks it is a directory owned by the
 * effective user and not writable by group or others; shared by the tuning database */
kn_status kn_cache_ensure_dir(const char *dir, kn_diag *d);

/* opens (creating) the cache.  On success *out is a handle; otherwise *out is NULL and the
 * status is an error.  Opening is cheap: it does not scan the entries.  A cache directory that
 * exists but whose objects directory cannot be created (read-only) still opens (KN_OK, with the
 * warning in *d and sent to the log callback): every get misses, every put is KN_NOT_STORED. */
kn_status kn_cache_open(const kn_cache_config *config, kn_cache **out, kn_diag *d);
void kn_cache_close(kn_cache *cache);
const char *kn_cache_dir(const kn_cache *cache);          /* the resolved cache directory */
/* a descriptor of that directory, opened and checked (owner, mode) when the cache opened and
 * open until it closes: files beside the entries (the tuning database) are opened relative to
 * it, so a directory swapped at that path after the check is never used */
int kn_cache_dir_fd(const kn_cache *cache);
uint64_t kn_cache_max_bytes(const kn_cache *cache);

/* ---- entries ---- */

/* On KN_OK, *payload is a malloc'ed copy (free() it; a 0-byte payload gives a non-NULL
 * pointer) and *size its length; on any other status (KN_MISS, KN_E_CORRUPT...) *payload is
 * NULL. */
kn_status kn_cache_get(kn_cache *cache, const kn_cache_key *key, void **payload, size_t *size,
                       kn_diag *d);
/* KN_OK or KN_NOT_STORED (with a message), or an argument error */
kn_status kn_cache_put(kn_cache *cache, const kn_cache_key *key, const void *payload, size_t size,
                       kn_diag *d);
/* removes the entry if present (KN_OK either way) */
kn_status kn_cache_remove(kn_cache *cache, const kn_cache_key *key, kn_diag *d);

typedef struct kn_cache_entry {
  kn_cache_key key;
  uint64_t file_bytes;   /* header + payload */
  int64_t last_used;     /* seconds since the epoch (the entry's mtime) */
  int64_t last_used_ns;  /* nanoseconds within that second */
} kn_cache_entry;

/* all entries, most recently used first; *entries is malloc'ed (free() it).  Entries are not
 * verified here (kn_cache_verify does that). */
kn_status kn_cache_list(kn_cache *cache, kn_cache_entry **entries, size_t *count, kn_diag *d);

typedef struct kn_cache_report {
  size_t entries;        /* entries examined */
  size_t valid;          /* of which good */
  size_t removed_corrupt;
  size_t corrupt_kept;   /* corrupt entries that could not be removed (the message says why) */
  size_t removed_temp;   /* stale temp files of crashed writers (an hour old: a younger one
                            may be another process's write in flight, and clear leaves it) */
  size_t kept_temp;      /* temp files left because they are younger */
  size_t removed_evicted; /* entries removed by eviction (or by clear) */
  uint64_t bytes;        /* bytes held after the operation */
} kn_cache_report;

/* reads every entry, removes bad ones (and stale temp files); report may be NULL.  When bad
 * entries were removed, *d holds a note of how many, with KN_OK. */
kn_status kn_cache_verify(kn_cache *cache, kn_cache_report *report, kn_diag *d);
/* removes every entry and every stale temp file kiln wrote (other files, and temp files of
 * writes that may be in flight, are left alone) */
kn_status kn_cache_clear(kn_cache *cache, kn_cache_report *report, kn_diag *d);
/* evicts least-recently-used entries until the total is at most `target` bytes (put does this
 * on its own to ~90% of the bound when the bound is exceeded); a note in *d when it removed any */
kn_status kn_cache_evict(kn_cache *cache, uint64_t target, kn_cache_report *report, kn_diag *d);

/* ---- fault injection (tests) ----
 * Makes one stage of every later put fail with an errno, as if the disk were full or read-only,
 * so those paths are tested without a real full disk.  Also set from the environment at open:
 * KILN_CACHE_FAULT=<stage>:<errno>, stage one of open|write|fsync|rename, errno one of
 * enospc|edquot|erofs|eacces|eio (e.g. KILN_CACHE_FAULT=write:enospc). */
typedef enum kn_cache_fault_stage {
  KN_CACHE_FAULT_NONE = 0,
  KN_CACHE_FAULT_OPEN,    /* creating the temp file */
  KN_CACHE_FAULT_WRITE,   /* writing it (after a partial write, as a full disk would) */
  KN_CACHE_FAULT_FSYNC,
  KN_CACHE_FAULT_RENAME,
} kn_cache_fault_stage;
void kn_cache_set_fault(kn_cache *cache, kn_cache_fault_stage stage, int err);

#ifdef __cplusplus
}
#endif
#endif
