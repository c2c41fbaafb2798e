/* tunedb.h — the tuning database: the best kernel configuration found for each problem class.
 *
 * One SQLite file, by default $KILN_CACHE_DIR/tuning.sqlite3 (the cache directory of
 * runtime/cache.h, created 0700 and checked the same way), shared by every process of the user:
 * WAL journal (readers never block the writer), a busy timeout instead of SQLITE_BUSY errors,
 * and one transaction per write.  It survives restarts, so a second process start does no
 * tuning.
 *
 * A record is keyed by what makes the best configuration differ — template, variant, dtype,
 * head dim, sequence-length bucket, arch, kiln version — and holds the configuration, the
 * measured time and when it was measured.  The library stores; the autotuner decides (what to
 * time, what "best" is).  Records of other kiln versions are kept but never matched: a new
 * compiler retunes.
 *
 * Schema version: PRAGMA user_version.  A file that is not a database, is corrupt, belongs to
 * another application, or has an older schema is moved aside to <path>.bad-<time> (with its
 * -wal/-shm) and a fresh database is made (the outcome KN_RECREATED, with a message).  A file
 * with a newer schema (a later kiln) is left untouched and refused (KN_E_UNSUPPORTED): the
 * caller tunes without persisting rather than destroying the newer kiln's records.
 *
 * Errors: a kn_status with the message in the caller's kn_diag (base/status.h; NULL allowed),
 * like the cache.  Nothing is printed.
 * Threads: a handle may be shared by threads (SQLite serialised mode).
 */
#ifndef KILN_TUNEDB_H
#define KILN_TUNEDB_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_TUNEDB_SCHEMA_VERSION 1
#define KN_TUNEDB_APPLICATION_ID 0x4b494c4e /* "KILN" in the SQLite header */
#define KN_TUNEDB_FILE "tuning.sqlite3"
#define KN_TUNEDB_BUSY_TIMEOUT_MS 10000 /* a write waits this long for another writer */
#define KN_TUNEDB_READ_TIMEOUT_MS 250  /* an open or a read waits this long for a lock */
#define KN_TUNE_NAME_MAX 64
/* a variant is a descriptor's whole canonical key (templates/attention.h, KN_ATTN_KEY_MAX) */
#define KN_TUNE_VARIANT_MAX 192

/* The statuses the database returns:
 *   KN_OK
 *   KN_MISS            get: no record for the key (outcome)
 *   KN_RECREATED       open: a bad or old database was moved aside; a fresh one is open (outcome)
 *   KN_NOT_REPLACED    put with only_if_faster: the stored record is faster (outcome)
 *   KN_E_INVALID       a bad argument (empty or over-long name, non-positive size)
 *   KN_E_IO            cannot open or write the database (SQLite's message follows)
 *   KN_E_UNSUPPORTED   open: the file has a newer schema; left untouched
 *   KN_E_NOMEM */

typedef struct kn_tune_key {
  char template_name[KN_TUNE_NAME_MAX]; /* "fwd", "decode", "bwd" */
  char variant[KN_TUNE_VARIANT_MAX];    /* the variant descriptor's canonical name, "causal" */
  char dtype[16];                       /* "f16", "bf16", "f32", "fp8e4m3" */
  int head_dim;
  int seq_bucket;                       /* kn_tune_seq_bucket(sequence length) */
  char arch[32];                        /* "gfx942", "sm_90a", "host" */
  char kiln_version[32];                /* KILN_VERSION_STRING of the compiler that measured */
} kn_tune_key;

/* the largest value of a configuration field (block sizes, warps, stages, waves_per_eu) a
 * record may hold: kn_tunedb_put refuses others, kn_tunedb_get reports a stored one as
 * KN_E_CORRUPT (and kn_tunedb_list leaves it out), as it does a time that is negative, NaN or
 * infinite */
#define KN_TUNE_MAX_TILE (1 << 20)

typedef struct kn_tune_config {
  int block_m, block_n;
  int warps;
  int stages;
  int waves_per_eu;                     /* AMD occupancy hint; 0 elsewhere */
  char matrix_instr[KN_TUNE_NAME_MAX];  /* "mfma_f32_32x32x8_f16", "mma_m16n8k16", "" */
} kn_tune_config;

typedef struct kn_tune_record {
  kn_tune_key key;
  kn_tune_config config;
  double time_us;       /* the measured (median) time of the best configuration */
  int64_t tuned_at;     /* seconds since the epoch; put fills it when 0 */
} kn_tune_record;

/* the power-of-two bucket of a sequence length: the smallest power of two >= n (1 for n <= 1,
 * saturating at 2^30); neighbouring lengths share a tuned configuration */
int kn_tune_seq_bucket(int64_t n);

typedef struct kn_tunedb kn_tunedb;

/* path NULL: <kn_cache_default_dir()>/tuning.sqlite3, creating the directory 0700.
 * KN_OK or KN_RECREATED give a handle; other statuses leave *out NULL.  The file is opened
 * relative to a descriptor of its directory (kn_tunedb_open_at). */
kn_status kn_tunedb_open(const char *path, kn_tunedb **out, kn_diag *d);
/* the database `name` (a file name) of the directory dirfd (a duplicate of it is held while
 * the handle lives, and every file of the database — itself, -wal, -shm, .lock — is reached
 * through it: a directory swapped at the path afterwards is never used); shown: its path in
 * messages.  The file is created 0600; a symbolic link at the name (or at its .lock, -wal, -shm),
 * a file that is not regular, not this user's or writable by others is KN_E_INSECURE. */
kn_status kn_tunedb_open_at(int dirfd, const char *name, const char *shown, kn_tunedb **out,
                            kn_diag *d);
/* the same, read-only, changing nothing (for listing): KN_MISS when there is no database or an
 * empty one, KN_E_CORRUPT for a file kn_tunedb_open_at would move aside (it stays) or a newer
 * schema; puts on the handle fail */
kn_status kn_tunedb_open_existing(int dirfd, const char *name, const char *shown,
                                  kn_tunedb **out, kn_diag *d);
void kn_tunedb_close(kn_tunedb *db);
const char *kn_tunedb_path(const kn_tunedb *db);

/* KN_OK (filled *out), KN_MISS, or KN_E_CORRUPT for a stored record that is invalid */
kn_status kn_tunedb_get(kn_tunedb *db, const kn_tune_key *key, kn_tune_record *out, kn_diag *d);
/* inserts or replaces the record for rec->key; with only_if_faster an existing record with a
 * smaller time_us is kept (KN_NOT_REPLACED; decided inside one transaction, so racing tuners
 * agree) */
kn_status kn_tunedb_put(kn_tunedb *db, const kn_tune_record *rec, int only_if_faster, kn_diag *d);
/* every record (all versions), ordered by key; *records is malloc'ed (free() it) */
kn_status kn_tunedb_list(kn_tunedb *db, kn_tune_record **records, size_t *count, kn_diag *d);
/* removes every record of other kiln versions than `keep_version` (NULL: all records);
 * *removed may be NULL */
kn_status kn_tunedb_prune(kn_tunedb *db, const char *keep_version, size_t *removed, kn_diag *d);

#ifdef __cplusplus
}
#endif
#endif
