/* tunedb.c — the SQLite tuning database (see tunedb.h for the contract).
 *
 * Schema 1 (one table, no rowid: the key is the primary key, lookups are one b-tree search):
 *
 *   tuning(template, variant, dtype, head_dim, seq_bucket, arch, kiln_version,   -- key
 *          block_m, block_n, warps, stages, waves_per_eu, matrix_instr,          -- config
 *          time_us, tuned_at)
 *
 * plus PRAGMA application_id = 'KILN' (so a stray SQLite file of another program is recognised)
 * and PRAGMA user_version = 1.  The database is created inside one BEGIN IMMEDIATE
 * transaction that re-reads user_version, so processes racing to create it agree.
 *
 * Every file of the database is reached through a descriptor of its directory (the cache's,
 * checked when the cache opened): SQLite is given /proc/self/fd/<dirfd>/<name> through the
 * "kiln-at" VFS, which keeps that name as it is.  Before SQLite opens it, the file is created
 * 0600 with O_NOFOLLOW and must be a regular file of this user writable by nobody else.
 *
 * Opening checks the file before trusting it: pragmas readable (a non-database gives
 * SQLITE_NOTADB here), PRAGMA quick_check says "ok", the application id and schema version are
 * ours.  A bad file is moved aside while holding an exclusive flock on <path>.lock and after
 * checking again under the lock: two processes that both saw the bad file must not have the
 * second one move aside the fresh database the first one just made.  quick_check reads the
 * whole file; a tuning database is small (10,000 records are 860 KB and check in ~2 ms), and
 * it runs once per process.
 *
 * Connections use WAL (persistent in the file), synchronous=NORMAL (a power loss may drop the
 * last record, never corrupts) and a busy timeout of KN_TUNEDB_BUSY_TIMEOUT_MS for writes (reads:
 * KN_TUNEDB_READ_TIMEOUT_MS, so a lock held for ever costs each opener a moment), so concurrent
 * tuners wait for each other instead of failing.  Statements are prepared per call: the handle
 * may be shared by threads and a shared prepared statement would need its own lock, while
 * preparing costs microseconds next to the milliseconds a tuning trial takes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "cache.h"
#include "tunedb.h"

struct kn_tunedb {
  sqlite3 *db;
  char path[PATH_MAX];  /* as the caller named it (messages, kn_tunedb_path) */
  int dirfd;            /* the directory it lives in, held open: every file of it is opened
                           relative to this descriptor */
};


int kn_tune_seq_bucket(int64_t n) {
  int b = 1;
  while (b < n && b < (1 << 30)) b <<= 1;
  return b;
}

static const char kCreate[] =
    "CREATE TABLE IF NOT EXISTS tuning ("
    " template TEXT NOT NULL, variant TEXT NOT NULL, dtype TEXT NOT NULL,"
    " head_dim INTEGER NOT NULL, seq_bucket INTEGER NOT NULL, arch TEXT NOT NULL,"
    " kiln_version TEXT NOT NULL,"
    " block_m INTEGER NOT NULL, block_n INTEGER NOT NULL, warps INTEGER NOT NULL,"
    " stages INTEGER NOT NULL, waves_per_eu INTEGER NOT NULL, matrix_instr TEXT NOT NULL,"
    " time_us REAL NOT NULL, tuned_at INTEGER NOT NULL,"
    " PRIMARY KEY (template, variant, dtype, head_dim, seq_bucket, arch, kiln_version)"
    ") WITHOUT ROWID";

#define KEY_WHERE                                                                              \
  "template = ?1 AND variant = ?2 AND dtype = ?3 AND head_dim = ?4 AND seq_bucket = ?5 AND "  \
  "arch = ?6 AND kiln_version = ?7"
#define COLUMNS                                                                                \
  "template, variant, dtype, head_dim, seq_bucket, arch, kiln_version, block_m, block_n, "    \
  "warps, stages, waves_per_eu, matrix_instr, time_us, tuned_at"

/* ---- opening and checking ---- */

/* WAL is a property of the file: the first connection switches it, later ones find it set.
 * Switching needs an exclusive lock and SQLite does not run the busy handler for it, so
 * processes opening a new database together retry here, up to the busy timeout. */
static bool set_wal(sqlite3 *db) {
  for (int waited_ms = 0;; waited_ms += 2) {
    sqlite3_stmt *st;
    bool wal = false;
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &st, NULL) != SQLITE_OK) return false;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) wal = !sqlite3_stricmp((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    if (wal) break;
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) ||
        waited_ms >= KN_TUNEDB_BUSY_TIMEOUT_MS)
      return false;
    sqlite3_sleep(2);
  }
  /* in WAL mode NORMAL cannot corrupt the file; a power loss may drop the last transaction */
  return sqlite3_exec(db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL) == SQLITE_OK;
}

/* ---- files relative to the directory's descriptor ---- */

/* SQLite opens files by name.  To open them in the directory we hold a descriptor of (not at
 * whatever the path names now), the database is named /proc/self/fd/<dirfd>/<name>: the kernel
 * resolves that through the descriptor, and SQLite derives the -wal and -shm names from it.  The
 * default VFS would first turn the name into a canonical path (resolving the /proc link back
 * into a path string), so these names go through "kiln-at": the default VFS with the name taken
 * as given. */
static sqlite3_vfs at_vfs;
static pthread_once_t at_once = PTHREAD_ONCE_INIT;

static int at_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out) {
  (void)vfs;
  if ((int)strlen(name) >= n) return SQLITE_CANTOPEN;
  strcpy(out, name);
  return SQLITE_OK;
}

static void at_register(void) {
  sqlite3_vfs *base = sqlite3_vfs_find(NULL);
  if (!base) return;
  at_vfs = *base;
  at_vfs.zName = "kiln-at";
  at_vfs.pNext = NULL;
  at_vfs.xFullPathname = at_full_pathname;
  if (sqlite3_vfs_register(&at_vfs, 0) != SQLITE_OK) at_vfs.zName = NULL;
}

/* Checks the database file `name` of dirfd before SQLite opens it, creating it 0600 when
 * missing (not when readonly: then KN_MISS): reached without following a symbolic link, a
 * regular file, owned by this user and writable by nobody else; its -wal, -shm and -journal are
 * no symbolic links either.  0, or the status with why. */
static kn_status check_files(int dirfd, const char *name, bool readonly, char *why,
                             size_t whysize) {
  int fd = openat(dirfd, name, (readonly ? O_RDONLY : O_RDWR | O_CREAT) | O_NOFOLLOW |
                  O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0 && readonly && errno == ENOENT) {
    snprintf(why, whysize, "no tuning database yet");
    return KN_MISS;
  }
  if (fd < 0 && errno == ELOOP) {
    snprintf(why, whysize, "it is a symbolic link; refused (kiln follows none in its cache)");
    return KN_E_INSECURE;
  }
  if (fd < 0) {
    snprintf(why, whysize, "%s", strerror(errno));
    return KN_E_IO;
  }
  struct stat st;
  kn_status s = KN_OK;
  if (fstat(fd, &st) != 0) {
    snprintf(why, whysize, "%s", strerror(errno));
    s = KN_E_IO;
  } else if (!S_ISREG(st.st_mode)) {
    snprintf(why, whysize, "not a regular file; refused");
    s = KN_E_INSECURE;
  } else if (st.st_uid != geteuid() || (st.st_mode & 022)) {
    snprintf(why, whysize, "owned by uid %u with mode %03o: it must be this user's (uid %u) and "
             "writable by nobody else; refused", (unsigned)st.st_uid,
             (unsigned)(st.st_mode & 0777), (unsigned)geteuid());
    s = KN_E_INSECURE;
  }
  close(fd);
  static const char *const sidecars[] = {"-wal", "-shm", "-journal"};
  for (int i = 0; !s && i < 3; i++) {
    char side[NAME_MAX + 16];
    snprintf(side, sizeof side, "%s%s", name, sidecars[i]);
    if (fstatat(dirfd, side, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
      snprintf(why, whysize, "%s is not a regular file; refused", side);
      s = KN_E_INSECURE;
    }
  }
  return s;
}

/* BEGIN IMMEDIATE, waiting for another writer up to KN_TUNEDB_BUSY_TIMEOUT_MS (each attempt
 * waits the connection's short busy timeout) */
static int begin_immediate(sqlite3 *db) {
  for (int waited_ms = 0;; waited_ms += KN_TUNEDB_READ_TIMEOUT_MS) {
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK || (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) ||
        waited_ms >= KN_TUNEDB_BUSY_TIMEOUT_MS)
      return rc;
  }
}

typedef enum file_state {
  FILE_OK,       /* ours, current schema (or new and empty, schema now created) */
  FILE_BAD,      /* not a database, corrupt, foreign or older: move aside */
  FILE_NEWER,    /* a newer kiln's: leave it */
  FILE_ERROR,    /* cannot open at all (permissions, I/O): report */
  FILE_EMPTY,    /* read-only: no schema yet (an empty file) */
} file_state;

/* Opens path and classifies it; on FILE_OK *out is the ready connection.  why receives the
 * reason for any other state. */
static file_state open_checked(const char *path, const char *vfs, bool readonly, sqlite3 **out,
                               char *why, size_t whysize) {
  sqlite3 *db = NULL;
  *out = NULL;
  int rc = sqlite3_open_v2(path, &db, (readonly ? SQLITE_OPEN_READONLY
                                                : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                           SQLITE_OPEN_FULLMUTEX, vfs);
  if (rc != SQLITE_OK) {
    snprintf(why, whysize, "%s", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return FILE_ERROR;
  }
  /* reads wait briefly: in WAL mode only a lock held against everything (a process that
   * froze holding an exclusive lock) blocks them, and then every prepare would wait the whole
   * busy timeout; writes wait the long timeout in put's own loop */
  sqlite3_busy_timeout(db, KN_TUNEDB_READ_TIMEOUT_MS);
  /* one statement, so one snapshot: read separately, a schema another process commits in
   * between would look like "no version but tables" — a foreign file */
  int64_t app = 0, version = 0, tables = 0;
  sqlite3_stmt *st;
  rc = sqlite3_prepare_v2(db, "SELECT (SELECT application_id FROM pragma_application_id), "
                          "(SELECT user_version FROM pragma_user_version), "
                          "(SELECT count(*) FROM sqlite_schema)", -1, &st, NULL);
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
      app = sqlite3_column_int64(st, 0);
      version = sqlite3_column_int64(st, 1);
      tables = sqlite3_column_int64(st, 2);
      rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
  }
  if (rc != SQLITE_OK) {
    snprintf(why, whysize, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    return rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT ? FILE_BAD : FILE_ERROR;
  }
  /* quick_check returns "ok" or the problems found, one per row */
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &st, NULL) != SQLITE_OK) {
    snprintf(why, whysize, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    return FILE_BAD;
  }
  rc = sqlite3_step(st);
  const unsigned char *res = rc == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
  bool ok = res && !strcmp((const char *)res, "ok");
  if (!ok) snprintf(why, whysize, "integrity check: %s", res ? (const char *)res : sqlite3_errmsg(db));
  sqlite3_finalize(st);
  if (!ok) {
    sqlite3_close(db);
    return rc == SQLITE_ROW || rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB ? FILE_BAD : FILE_ERROR;
  }
  if (app != 0 && app != KN_TUNEDB_APPLICATION_ID) {
    snprintf(why, whysize, "another application's database (application_id 0x%llx)",
             (unsigned long long)app);
    sqlite3_close(db);
    return FILE_BAD;
  }
  if (version > KN_TUNEDB_SCHEMA_VERSION) {
    snprintf(why, whysize, "schema version %lld is newer than this kiln's (%d)", (long long)version,
             KN_TUNEDB_SCHEMA_VERSION);
    sqlite3_close(db);
    return FILE_NEWER;
  }
  if (version == 0 && tables > 0) {
    snprintf(why, whysize, "an unversioned database with %lld tables, not kiln's", (long long)tables);
    sqlite3_close(db);
    return FILE_BAD;
  }
  if (version > 0 && version < KN_TUNEDB_SCHEMA_VERSION) {
    /* no migrations yet: records of an older schema are only a tuning cache */
    snprintf(why, whysize, "old schema version %lld (current %d)", (long long)version,
             KN_TUNEDB_SCHEMA_VERSION);
    sqlite3_close(db);
    return FILE_BAD;
  }
  if (readonly) { /* (an empty file: no schema yet, so no records) */
    *out = db;
    return version == 0 ? FILE_EMPTY : FILE_OK;
  }
  if (!set_wal(db)) {
    snprintf(why, whysize, "cannot enable WAL: %s", sqlite3_errmsg(db));
    sqlite3_close(db);
    return FILE_ERROR;
  }
  char *err = NULL;
  if (version == 0) {
    char sql[1024];
    snprintf(sql, sizeof sql, "%s; PRAGMA application_id = %d; PRAGMA user_version = %d; COMMIT",
             kCreate, KN_TUNEDB_APPLICATION_ID, KN_TUNEDB_SCHEMA_VERSION);
    if (begin_immediate(db) != SQLITE_OK || sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
      snprintf(why, whysize, "cannot create the schema: %s", err ? err : sqlite3_errmsg(db));
      sqlite3_free(err);
      sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
      sqlite3_close(db);
      return FILE_ERROR;
    }
  }
  *out = db;
  return FILE_OK;
}

/* renames name (and its -wal and -shm) in dirfd to name.bad-<time>-<pid>; aside receives the
 * new name */
static int move_aside(int dirfd, const char *name, char *aside, size_t size) {
  snprintf(aside, size, "%s.bad-%lld-%d", name, (long long)time(NULL), (int)getpid());
  if (renameat(dirfd, name, dirfd, aside) != 0 && errno != ENOENT) return -1;
  static const char *const sidecars[] = {"-wal", "-shm"};
  for (int i = 0; i < 2; i++) {
    char from[NAME_MAX + 8], to[NAME_MAX + 72];
    snprintf(from, sizeof from, "%s%s", name, sidecars[i]);
    snprintf(to, sizeof to, "%s%s", aside, sidecars[i]);
    if (renameat(dirfd, from, dirfd, to) != 0 && errno != ENOENT) unlinkat(dirfd, from, 0);
  }
  return 0;
}

/* the checks, then SQLite, on the file `name` of t->dirfd; sqlpath: its name for SQLite */
static file_state open_file(kn_tunedb *t, const char *name, const char *sqlpath, const char *vfs,
                            bool readonly, char *why, size_t whysize, kn_status *insecure) {
  kn_status s = check_files(t->dirfd, name, readonly, why, whysize);
  if (s) {
    *insecure = s;
    return FILE_ERROR;
  }
  return open_checked(sqlpath, vfs, readonly, &t->db, why, whysize);
}

static kn_status open_at(int dirfd, const char *name, const char *shown, bool readonly,
                         kn_tunedb **out, kn_diag *d) {
  if (!out) return kn_diag_set(d, KN_E_INVALID, "kn_tunedb_open: null output");
  *out = NULL;
  if (!name || !*name || strchr(name, '/') || strlen(name) > NAME_MAX - 40)
    return kn_diag_set(d, KN_E_INVALID, "tuning database name '%s' is not a file name",
                       name ? name : "(null)");
  kn_tunedb *t = calloc(1, sizeof *t);
  if (!t) return kn_diag_set(d, KN_E_NOMEM, "out of memory opening the tuning database");
  snprintf(t->path, sizeof t->path, "%s", shown ? shown : name);
  if ((t->dirfd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0)) < 0) {
    kn_status e = kn_diag_set(d, KN_E_IO, "tuning database %s: %s", t->path, strerror(errno));
    free(t);
    return e;
  }
  /* SQLite's name for the file: through the descriptor where /proc allows, else the path */
  pthread_once(&at_once, at_register);
  char sqlpath[PATH_MAX];
  const char *vfs = NULL;
  snprintf(sqlpath, sizeof sqlpath, "/proc/self/fd/%d", t->dirfd);
  struct stat a, b;
  if (at_vfs.zName && stat(sqlpath, &a) == 0 && fstat(t->dirfd, &b) == 0 &&
      a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    snprintf(sqlpath, sizeof sqlpath, "/proc/self/fd/%d/%s", t->dirfd, name);
    vfs = at_vfs.zName;
  } else {
    snprintf(sqlpath, sizeof sqlpath, "%s", t->path);
  }

  char why[512] = "";
  kn_status insecure = KN_OK;
  file_state fs = open_file(t, name, sqlpath, vfs, readonly, why, sizeof why, &insecure);
  kn_status status = KN_OK;
  if (readonly && fs != FILE_OK) {
    /* listing changes nothing: a missing or empty file has no records, a bad one stays */
    status = fs == FILE_EMPTY || insecure == KN_MISS ? KN_MISS
             : fs == FILE_BAD || fs == FILE_NEWER    ? KN_E_CORRUPT
             : insecure                              ? insecure
                                                     : KN_E_IO;
    kn_diag_set(d, status, "tuning database %s: %s%s", t->path,
                fs == FILE_EMPTY ? "no records yet" : why,
                fs == FILE_BAD ? "; left as it is (a kiln that tunes moves it aside)" : "");
    kn_tunedb_close(t);
    return status;
  }
  if (fs == FILE_BAD) {
    /* check again under the lock, so only one process moves a bad file aside */
    char lock[NAME_MAX + 8];
    snprintf(lock, sizeof lock, "%s.lock", name);
    int lfd = openat(t->dirfd, lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lfd < 0 && errno == ELOOP) {
      snprintf(why, sizeof why, "%s is a symbolic link; refused (kiln follows none in its cache)",
               lock);
      insecure = KN_E_INSECURE;
      fs = FILE_ERROR;
    }
    if (lfd >= 0) flock(lfd, LOCK_EX);
    if (fs == FILE_BAD) fs = open_file(t, name, sqlpath, vfs, false, why, sizeof why, &insecure);
    if (fs == FILE_BAD) {
      char aside[NAME_MAX + 72];
      char first_why[512];
      snprintf(first_why, sizeof first_why, "%s", why);
      if (move_aside(t->dirfd, name, aside, sizeof aside) != 0) {
        kn_diag_set(d, KN_E_IO, "tuning database %s is unusable (%s) and cannot be moved aside: %s",
            t->path, first_why, strerror(errno));
        fs = FILE_ERROR;
        status = KN_E_IO;
      } else {
        fs = open_file(t, name, sqlpath, vfs, false, why, sizeof why, &insecure);
        if (fs == FILE_OK)
          status = kn_diag_set(d, KN_RECREATED, "tuning database %s was unusable (%s); moved aside to "
                       "%s and started afresh", t->path, first_why, aside);
      }
    }
    if (lfd >= 0) close(lfd); /* releases the lock */
  }
  if (fs == FILE_NEWER) {
    kn_diag_set(d, KN_E_UNSUPPORTED, "tuning database %s: %s; left untouched, tuning results will not "
        "be saved (use a newer kiln, or another KILN_CACHE_DIR)", t->path, why);
    kn_tunedb_close(t);
    return KN_E_UNSUPPORTED;
  }
  if (fs != FILE_OK) {
    if (status == KN_OK) {
      status = insecure ? insecure : KN_E_IO;
      kn_diag_set(d, status, "cannot open tuning database %s: %s", t->path, why);
    }
    kn_tunedb_close(t);
    return status;
  }
  if (status == KN_OK) kn_diag_clear(d);
  *out = t;
  return status;
}

kn_status kn_tunedb_open_at(int dirfd, const char *name, const char *shown, kn_tunedb **out,
                            kn_diag *d) {
  return open_at(dirfd, name, shown, false, out, d);
}

kn_status kn_tunedb_open_existing(int dirfd, const char *name, const char *shown,
                                  kn_tunedb **out, kn_diag *d) {
  return open_at(dirfd, name, shown, true, out, d);
}

kn_status kn_tunedb_open(const char *path, kn_tunedb **out, kn_diag *d) {
  if (!out) return kn_diag_set(d, KN_E_INVALID, "kn_tunedb_open: null output");
  *out = NULL;
  char full[PATH_MAX];
  if (path) {
    if (snprintf(full, sizeof full, "%s", path) >= (int)sizeof full)
      return kn_diag_set(d, KN_E_INVALID, "tuning database path too long");
  } else {
    char dir[PATH_MAX - 32];
    kn_diag why;
    if (kn_cache_default_dir(dir, sizeof dir, &why) != KN_OK || kn_cache_ensure_dir(dir, &why) != KN_OK)
      return kn_diag_set(d, KN_E_IO, "tuning database: %s", why.message);
    snprintf(full, sizeof full, "%s/%s", dir, KN_TUNEDB_FILE);
  }
  /* the directory, then the file relative to it */
  char dir[PATH_MAX];
  const char *slash = strrchr(full, '/'), *name = slash ? slash + 1 : full;
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == full) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - full), full);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return kn_diag_set(d, KN_E_IO, "cannot open tuning database %s: %s", full, strerror(errno));
  kn_status s = kn_tunedb_open_at(fd, name, full, out, d);
  close(fd);
  return s;
}

void kn_tunedb_close(kn_tunedb *t) {
  if (!t) return;
  sqlite3_close(t->db);
  if (t->dirfd >= 0) close(t->dirfd);
  free(t);
}

const char *kn_tunedb_path(const kn_tunedb *t) { return t->path; }

/* ---- records ---- */

static bool name_ok(const char *s, size_t size, bool may_be_empty) {
  size_t n = strnlen(s, size);
  return n < size && (may_be_empty || n > 0);
}

static kn_status check_key(const kn_tune_key *k, kn_diag *d) {
  if (!name_ok(k->template_name, sizeof k->template_name, false) ||
      !name_ok(k->variant, sizeof k->variant, true) || !name_ok(k->dtype, sizeof k->dtype, false) ||
      !name_ok(k->arch, sizeof k->arch, false) ||
      !name_ok(k->kiln_version, sizeof k->kiln_version, false))
    return kn_diag_set(d, KN_E_INVALID, "tuning key: template, dtype, arch and kiln version must be "
               "non-empty, NUL-terminated strings");
  if (k->head_dim <= 0 || k->seq_bucket <= 0)
    return kn_diag_set(d, KN_E_INVALID, "tuning key: head_dim (%d) and seq_bucket (%d) must be positive",
               k->head_dim, k->seq_bucket);
  return KN_OK;
}

static void bind_key(sqlite3_stmt *st, const kn_tune_key *k) {
  sqlite3_bind_text(st, 1, k->template_name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, k->variant, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, k->dtype, -1, SQLITE_STATIC);
  sqlite3_bind_int(st, 4, k->head_dim);
  sqlite3_bind_int(st, 5, k->seq_bucket);
  sqlite3_bind_text(st, 6, k->arch, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 7, k->kiln_version, -1, SQLITE_STATIC);
}

static void column_str(sqlite3_stmt *st, int col, char *dst, size_t size) {
  const unsigned char *s = sqlite3_column_text(st, col);
  snprintf(dst, size, "%s", s ? (const char *)s : "");
}

/* an INTEGER column within [lo, hi]: another type (a text, a real) or a value out of range is
 * false, never truncated (sqlite3_column_int would take 2^32 + 16 as 16) */
static bool column_in(sqlite3_stmt *st, int col, int64_t lo, int64_t hi, int *out) {
  int64_t v = sqlite3_column_int64(st, col);
  *out = (int)v;
  return sqlite3_column_type(st, col) == SQLITE_INTEGER && v >= lo && v <= hi;
}

/* a row into *r; false (why says which field) when a value is of the wrong type or out of range:
 * such a record came from another program or a damaged file, and is used as no record */
static bool read_row(sqlite3_stmt *st, kn_tune_record *r, char *why, size_t whysize) {
  memset(r, 0, sizeof *r);
  column_str(st, 0, r->key.template_name, sizeof r->key.template_name);
  column_str(st, 1, r->key.variant, sizeof r->key.variant);
  column_str(st, 2, r->key.dtype, sizeof r->key.dtype);
  column_str(st, 5, r->key.arch, sizeof r->key.arch);
  column_str(st, 6, r->key.kiln_version, sizeof r->key.kiln_version);
  column_str(st, 12, r->config.matrix_instr, sizeof r->config.matrix_instr);
  const struct { int col; const char *name; int64_t lo, hi; int *dst; } ints[] = {
      {3, "head_dim", 1, INT32_MAX, &r->key.head_dim},
      {4, "seq_bucket", 1, INT32_MAX, &r->key.seq_bucket},
      {7, "block_m", 1, KN_TUNE_MAX_TILE, &r->config.block_m},
      {8, "block_n", 1, KN_TUNE_MAX_TILE, &r->config.block_n},
      {9, "warps", 1, KN_TUNE_MAX_TILE, &r->config.warps},
      {10, "stages", 1, KN_TUNE_MAX_TILE, &r->config.stages},
      {11, "waves_per_eu", 0, KN_TUNE_MAX_TILE, &r->config.waves_per_eu},
  };
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (!column_in(st, ints[i].col, ints[i].lo, ints[i].hi, ints[i].dst)) {
      snprintf(why, whysize, "%s %s is not an integer in [%lld, %lld]", ints[i].name,
               sqlite3_column_text(st, ints[i].col) ? (const char *)sqlite3_column_text(st, ints[i].col)
                                                     : "NULL",
               (long long)ints[i].lo, (long long)ints[i].hi);
      return false;
    }
  r->time_us = sqlite3_column_double(st, 13);
  r->tuned_at = sqlite3_column_int64(st, 14);
  if (!(r->time_us >= 0) || isinf(r->time_us)) {
    snprintf(why, whysize, "time_us %g is not a finite time >= 0", r->time_us);
    return false;
  }
  return true;
}

static kn_status db_error(kn_tunedb *t, const char *what, kn_diag *d) {
  return kn_diag_set(d, KN_E_IO, "tuning database %s: %s: %s", t->path, what, sqlite3_errmsg(t->db));
}

kn_status kn_tunedb_get(kn_tunedb *t, const kn_tune_key *key, kn_tune_record *out, kn_diag *d) {
  if (!t || !key || !out) return kn_diag_set(d, KN_E_INVALID, "kn_tunedb_get: null argument");
  kn_status s = check_key(key, d);
  if (s) return s;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(t->db, "SELECT " COLUMNS " FROM tuning WHERE " KEY_WHERE, -1, &st, NULL) != SQLITE_OK)
    return db_error(t, "get", d);
  bind_key(st, key);
  int rc = sqlite3_step(st);
  char why[160];
  if (rc == SQLITE_ROW && !read_row(st, out, why, sizeof why)) {
    s = kn_diag_set(d, KN_E_CORRUPT, "tuning database %s: the record for the key is invalid (%s); "
                    "not used", t->path, why);
  } else if (rc == SQLITE_ROW) {
    s = KN_OK;
    kn_diag_clear(d);
  } else if (rc == SQLITE_DONE) {
    s = kn_diag_set(d, KN_MISS, "no tuning record for the key");
  } else {
    s = db_error(t, "get", d);
  }
  sqlite3_finalize(st);
  return s;
}

kn_status kn_tunedb_put(kn_tunedb *t, const kn_tune_record *rec, int only_if_faster, kn_diag *d) {
  if (!t || !rec) return kn_diag_set(d, KN_E_INVALID, "kn_tunedb_put: null argument");
  kn_status s = check_key(&rec->key, d);
  if (s) return s;
  const kn_tune_config *c = &rec->config;
  if (!name_ok(c->matrix_instr, sizeof c->matrix_instr, true) || !(rec->time_us >= 0) ||
      isinf(rec->time_us))
    return kn_diag_set(d, KN_E_INVALID, "tuning record: bad matrix instruction name or time");
  if (c->block_m < 1 || c->block_n < 1 || c->warps < 1 || c->stages < 1 || c->waves_per_eu < 0 ||
      c->block_m > KN_TUNE_MAX_TILE || c->block_n > KN_TUNE_MAX_TILE ||
      c->warps > KN_TUNE_MAX_TILE || c->stages > KN_TUNE_MAX_TILE ||
      c->waves_per_eu > KN_TUNE_MAX_TILE)
    return kn_diag_set(d, KN_E_INVALID, "tuning record: block %dx%d, warps %d, stages %d, "
                       "waves_per_eu %d: each must be in [1, %d] (waves_per_eu from 0)",
                       c->block_m, c->block_n, c->warps, c->stages, c->waves_per_eu,
                       KN_TUNE_MAX_TILE);
  /* IMMEDIATE takes the write lock now (waiting up to the busy timeout: the connection's short
   * one, retried here), so the compare and the write below see and change the same state */
  if (begin_immediate(t->db) != SQLITE_OK) return db_error(t, "begin", d);
  sqlite3_stmt *st = NULL;
  if (only_if_faster) {
    if (sqlite3_prepare_v2(t->db, "SELECT time_us FROM tuning WHERE " KEY_WHERE, -1, &st, NULL) != SQLITE_OK)
      goto fail;
    bind_key(st, &rec->key);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && sqlite3_column_double(st, 0) <= rec->time_us) {
      sqlite3_finalize(st);
      sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
      return kn_diag_set(d, KN_NOT_REPLACED, "a faster record is already stored");
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) goto fail;
    sqlite3_finalize(st);
    st = NULL;
  }
  if (sqlite3_prepare_v2(t->db, "INSERT OR REPLACE INTO tuning (" COLUMNS ") VALUES "
                         "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                         -1, &st, NULL) != SQLITE_OK)
    goto fail;
  bind_key(st, &rec->key);
  sqlite3_bind_int(st, 8, rec->config.block_m);
  sqlite3_bind_int(st, 9, rec->config.block_n);
  sqlite3_bind_int(st, 10, rec->config.warps);
  sqlite3_bind_int(st, 11, rec->config.stages);
  sqlite3_bind_int(st, 12, rec->config.waves_per_eu);
  sqlite3_bind_text(st, 13, rec->config.matrix_instr, -1, SQLITE_STATIC);
  sqlite3_bind_double(st, 14, rec->time_us);
  sqlite3_bind_int64(st, 15, rec->tuned_at ? rec->tuned_at : (int64_t)time(NULL));
  if (sqlite3_step(st) != SQLITE_DONE) goto fail;
  sqlite3_finalize(st);
  if (sqlite3_exec(t->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
    s = db_error(t, "commit", d);
    sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
    return s;
  }
  kn_diag_clear(d);
  return KN_OK;
fail:
  s = db_error(t, "put", d);
  sqlite3_finalize(st);
  sqlite3_exec(t->db, "ROLLBACK", NULL, NULL, NULL);
  return s;
}

kn_status kn_tunedb_list(kn_tunedb *t, kn_tune_record **records, size_t *count, kn_diag *d) {
  if (!t || !records || !count) return kn_diag_set(d, KN_E_INVALID, "kn_tunedb_list: null argument");
  *records = NULL;
  *count = 0;
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(t->db, "SELECT " COLUMNS " FROM tuning ORDER BY template, variant, dtype, "
                         "head_dim, seq_bucket, arch, kiln_version", -1, &st, NULL) != SQLITE_OK)
    return db_error(t, "list", d);
  kn_tune_record *v = NULL;
  size_t n = 0, cap = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      kn_tune_record *nv = realloc(v, cap * sizeof *nv);
      if (!nv) {
        free(v);
        sqlite3_finalize(st);
        return kn_diag_set(d, KN_E_NOMEM, "out of memory listing the tuning database");
      }
      v = nv;
    }
    char why[160];
    if (read_row(st, &v[n], why, sizeof why)) n++; /* (an invalid record is not listed) */
  }
  if (rc != SQLITE_DONE) {
    kn_status s = db_error(t, "list", d);
    free(v);
    sqlite3_finalize(st);
    return s;
  }
  sqlite3_finalize(st);
  *records = v;
  *count = n;
  return KN_OK;
}

kn_status kn_tunedb_prune(kn_tunedb *t, const char *keep_version, size_t *removed, kn_diag *d) {
  if (!t) return kn_diag_set(d, KN_E_INVALID, "kn_tunedb_prune: null database");
  sqlite3_stmt *st;
  const char *sql = keep_version ? "DELETE FROM tuning WHERE kiln_version <> ?1" : "DELETE FROM tuning";
  if (sqlite3_prepare_v2(t->db, sql, -1, &st, NULL) != SQLITE_OK) return db_error(t, "prune", d);
  if (keep_version) sqlite3_bind_text(st, 1, keep_version, -1, SQLITE_STATIC);
  int rc = sqlite3_step(st);
  if (removed) *removed = rc == SQLITE_DONE ? (size_t)sqlite3_changes(t->db) : 0;
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE) return db_error(t, "prune", d);
  return KN_OK;
}
