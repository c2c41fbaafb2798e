/* cache.c — the content-addressed on-disk cache (see cache.h for the contract).
 *
 * Layout: <dir>/objects-v1/<hex key> holds one entry; the format version is in the directory
 * name so that two kiln releases with different entry formats sharing a cache directory never
 * see (and never delete) each other's entries.  An entry is a 64-byte header and the payload:
 *
 *   offset size
 *    0      8   magic "KILNCACH"
 *    8      4   format version (little-endian), KN_CACHE_FORMAT_VERSION
 *   12      4   header size, 64 (lets a later version grow the header)
 *   16     16   key (the file name, repeated: a file renamed by hand is caught)
 *   32      8   payload length (little-endian); must equal file size - 64
 *   40      8   reserved, 0
 *   48     16   XXH3-128 of bytes 0..47 followed by the payload
 *   64      -   payload
 *
 * The checksum covers the header too, so a flipped bit anywhere in the file is caught, not only
 * in the payload.  XXH3-128 is not a cryptographic hash: the cache defends against accidents
 * (torn writes, bad disks, truncation) and, by its directory checks, against other users; a
 * process running as the user can write anything there anyway.
 *
 * Every file operation is relative to a descriptor of the objects directory, opened once and
 * checked (owner, mode) through that descriptor: a path component swapped after the check
 * cannot redirect later writes.  The cache directory's own descriptor, checked the same way,
 * stays open for the tuning database (kn_cache_dir_fd, kn_tunedb_open_at).  Temp files are created with O_CREAT|O_EXCL (mode 0600) under
 * a fresh random name in that same directory — what mkstemp does, but relative to the
 * descriptor — then written, fsync'ed, closed and renamed over the final name.  rename() is
 * atomic, so readers see the old entry, the new one, or none; concurrent writers of one key each
 * rename their own complete file and the last one wins (all carry identical bytes, as the key
 * is a hash of everything that determines them).  The directory itself is not fsync'ed after
 * the rename: after a power loss the entry may be missing, which is a miss, never a torn entry.
 *
 * LRU: the entry's mtime is its last use (a put creates it, a hit sets it with futimens).  No
 * index file is kept: an index shared by processes needs locking and can itself be corrupted,
 * while the directory is already a consistent index the kernel maintains.  atime is not used
 * (relatime/noatime mounts do not update it).  Eviction stats every entry and removes the
 * oldest; it runs in put when this process's running estimate of the total exceeds the bound,
 * down to 90% of it, so a scan is paid once per ~10% of the bound written.  The bound is soft:
 * other processes' puts are only seen at the next scan.  Races are benign: two evictors may
 * both unlink a file (ENOENT ignored); an entry used or rewritten between the scan and the
 * unlink may be evicted (a later miss, recompiled).
 *
 * A corrupt entry is unlinked only if the name still refers to the inode that was read, so a
 * reader that saw a bad file does not delete a good one another process just renamed in (the
 * remaining window between the check and the unlink only ever costs a miss).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "cache.h"

#define OBJECTS_DIR "objects-v1"
#define TEMP_PREFIX ".tmp-"
static const char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};

struct kn_cache {
  char dir[PATH_MAX];
  char objdir[PATH_MAX];
  int topfd;                 /* the cache directory, checked (owner, mode) through it */
  int objfd;                 /* -1: objects directory missing and not creatable (read-only) */
  uint64_t max_bytes;
  kn_cache_log_fn log;
  void *log_user;
  pthread_mutex_t mu;        /* guards est_bytes and serialises eviction in this process */
  int64_t est_bytes;         /* running estimate of the total; -1: not scanned yet */
  _Atomic int fault_stage;
  _Atomic int fault_err;
  _Atomic uint64_t tmp_counter;
};

/* ---- messages ---- */

/* a warning (level 1) or a note (2) goes both to the caller's kn_diag and to the log callback */
static kn_status warn(kn_cache *c, int level, kn_status s, kn_diag *d) {
  if (c && c->log) c->log(c->log_user, level, d->message);
  return s;
}

/* ---- keys ---- */

static void put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static uint32_t get_le32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

kn_cache_key kn_cache_key_of(const kn_cache_part *parts, int nparts) {
  static const char domain[] = "kiln-cache-key-v1";
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  XXH3_128bits_update(&st, domain, sizeof domain);
  for (int i = 0; i < nparts; i++) {
    uint8_t len[8];
    put_le64(len, parts[i].size);
    XXH3_128bits_update(&st, len, sizeof len);
    if (parts[i].size) XXH3_128bits_update(&st, parts[i].data, parts[i].size);
  }
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&st));
  kn_cache_key k;
  memcpy(k.b, canon.digest, 16);
  return k;
}

void kn_cache_key_hex(const kn_cache_key *key, char out[33]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    out[2 * i] = digits[key->b[i] >> 4];
    out[2 * i + 1] = digits[key->b[i] & 15];
  }
  out[32] = 0;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1; /* uppercase is not produced by kn_cache_key_hex, so not an entry name */
}

int kn_cache_key_parse(const char *hex, kn_cache_key *key) {
  for (int i = 0; i < 16; i++) {
    int hi = hexval(hex[2 * i]), lo = hi < 0 ? -1 : hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    key->b[i] = (uint8_t)(hi << 4 | lo);
  }
  return hex[32] ? -1 : 0;
}

/* checksum of header bytes 0..47 and the payload */
static void entry_checksum(const uint8_t *header, const void *payload, size_t size, uint8_t out[16]) {
  XXH3_state_t st;
  XXH3_128bits_reset(&st);
  XXH3_128bits_update(&st, header, 48);
  if (size) XXH3_128bits_update(&st, payload, size);
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&st));
  memcpy(out, canon.digest, 16);
}

static void build_header(uint8_t h[KN_CACHE_HEADER_BYTES], const kn_cache_key *key,
                         const void *payload, size_t size) {
  memset(h, 0, KN_CACHE_HEADER_BYTES);
  memcpy(h, kMagic, 8);
  put_le32(h + 8, KN_CACHE_FORMAT_VERSION);
  put_le32(h + 12, KN_CACHE_HEADER_BYTES);
  memcpy(h + 16, key->b, 16);
  put_le64(h + 32, size);
  entry_checksum(h, payload, size, h + 48);
}

/* ---- directories ---- */

kn_status kn_cache_default_dir(char *out, size_t size, kn_diag *d) {
  const char *e = getenv("KILN_CACHE_DIR");
  int n;
  if (e && *e) {
    n = snprintf(out, size, "%s", e);
  } else if ((e = getenv("XDG_CACHE_HOME")) && e[0] == '/') {
    /* the XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored */
    n = snprintf(out, size, "%s/kiln", e);
  } else if ((e = getenv("HOME")) && *e) {
    n = snprintf(out, size, "%s/.cache/kiln", e);
  } else {
    return kn_diag_set(d, KN_E_IO, "no cache directory: none of KILN_CACHE_DIR, XDG_CACHE_HOME, HOME is set");
  }
  if (n < 0 || (size_t)n >= size) return kn_diag_set(d, KN_E_INVALID, "cache directory path too long");
  /* trailing slashes would give "dir//objects" in messages; keep "/" itself */
  while (n > 1 && out[n - 1] == '/') out[--n] = 0;
  return KN_OK;
}

/* refuses a directory the effective user does not own or that others may write into: anyone
 * who can write there can plant entries that kiln would load and run */
static kn_status check_dir_stat(const char *path, const struct stat *st, kn_diag *d) {
  if (!S_ISDIR(st->st_mode)) return kn_diag_set(d, KN_E_IO, "cache path %s is not a directory", path);
  if (st->st_uid != geteuid())
    return kn_diag_set(d, KN_E_INSECURE,
               "cache directory %s is owned by uid %u, not by the current user (uid %u); "
               "refusing to use it (set KILN_CACHE_DIR to a directory of your own)",
               path, (unsigned)st->st_uid, (unsigned)geteuid());
  if (st->st_mode & (S_IWGRP | S_IWOTH))
    return kn_diag_set(d, KN_E_INSECURE,
               "cache directory %s is writable by %s (mode %04o); refusing to use it "
               "(chmod 0700 %s, or set KILN_CACHE_DIR)",
               path, (st->st_mode & S_IWOTH) ? "all users" : "its group",
               (unsigned)(st->st_mode & 07777), path);
  return KN_OK;
}

/* mkdir -p with mode 0700 for every component it creates */
static kn_status make_dirs(const char *dir, kn_diag *d) {
  char p[PATH_MAX];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p) return kn_diag_set(d, KN_E_INVALID, "bad cache directory path");
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    char saved = p[i];
    p[i] = 0;
    if (mkdir(p, 0700) != 0 && errno != EEXIST) {
      int e = errno;
      /* a component may exist as something mkdir cannot create over; stat says */
      struct stat st;
      if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
        return kn_diag_set(d, KN_E_IO, "cannot create cache directory %s: %s", p, strerror(e));
    }
    p[i] = saved;
  }
  return KN_OK;
}

kn_status kn_cache_ensure_dir(const char *dir, kn_diag *d) {
  if (!dir || !*dir) return kn_diag_set(d, KN_E_INVALID, "empty cache directory path");
  kn_status s = make_dirs(dir, d);
  if (s) return s;
  struct stat st;
  if (stat(dir, &st) != 0)
    return kn_diag_set(d, KN_E_IO, "cannot stat cache directory %s: %s", dir, strerror(errno));
  return check_dir_stat(dir, &st, d);
}

static int parse_bytes(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned shift = 0;
  switch (*end) {
  case 0: break;
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  case 't': case 'T': shift = 40; end++; break;
  default: return -1;
  }
  if (*end == 'i' || *end == 'I') end++;  /* "GiB" */
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return -1;
  if (shift && v > (UINT64_MAX >> shift)) return -1;
  *out = (uint64_t)v << shift;
  return 0;
}

static int parse_errno_name(const char *s) {
  if (!strcmp(s, "enospc")) return ENOSPC;
  if (!strcmp(s, "edquot")) return EDQUOT;
  if (!strcmp(s, "erofs")) return EROFS;
  if (!strcmp(s, "eacces")) return EACCES;
  if (!strcmp(s, "eio")) return EIO;
  return 0;
}

static void fault_from_env(kn_cache *c) {
  const char *f = getenv("KILN_CACHE_FAULT");
  if (!f || !*f) return;
  static const char *stages[] = {"", "open", "write", "fsync", "rename"};
  const char *colon = strchr(f, ':');
  if (!colon) return;
  for (int s = 1; s <= 4; s++) {
    if ((size_t)(colon - f) == strlen(stages[s]) && !strncmp(f, stages[s], (size_t)(colon - f))) {
      int e = parse_errno_name(colon + 1);
      if (e) kn_cache_set_fault(c, (kn_cache_fault_stage)s, e);
    }
  }
}

void kn_cache_set_fault(kn_cache *c, kn_cache_fault_stage stage, int err) {
  atomic_store(&c->fault_err, err);
  atomic_store(&c->fault_stage, (int)stage);
}

kn_status kn_cache_open(const kn_cache_config *config, kn_cache **out, kn_diag *d) {
  kn_cache_config none = {0};
  kn_diag own;
  if (!d) d = &own; /* the read-only warning goes to the log too */
  if (!out) return kn_diag_set(d, KN_E_INVALID, "kn_cache_open: null output");
  *out = NULL;
  if (!config) config = &none;

  kn_cache *c = calloc(1, sizeof *c);
  if (!c) return kn_diag_set(d, KN_E_NOMEM, "out of memory opening the cache");
  c->topfd = c->objfd = -1;
  c->est_bytes = -1;
  c->log = config->log;
  c->log_user = config->log_user;
  pthread_mutex_init(&c->mu, NULL);

  kn_status s = KN_OK;
  if (config->dir) {
    if (snprintf(c->dir, sizeof c->dir, "%s", config->dir) >= (int)sizeof c->dir)
      s = kn_diag_set(d, KN_E_INVALID, "cache directory path too long");
  } else {
    s = kn_cache_default_dir(c->dir, sizeof c->dir, d);
  }
  if (s) goto fail;

  c->max_bytes = config->max_bytes;
  if (!c->max_bytes) {
    const char *m = getenv("KILN_CACHE_MAX_BYTES");
    c->max_bytes = KN_CACHE_DEFAULT_MAX_BYTES;
    if (m && *m && parse_bytes(m, &c->max_bytes) != 0) {
      s = kn_diag_set(d, KN_E_INVALID, "KILN_CACHE_MAX_BYTES=%s is not a size (bytes, or a number with "
              "a K, M, G or T suffix)", m);
      goto fail;
    }
    if (!c->max_bytes) c->max_bytes = UINT64_MAX; /* "0" in the environment: unbounded */
  }

  if ((s = make_dirs(c->dir, d))) goto fail;
  int topfd = c->topfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (topfd < 0) {
    s = kn_diag_set(d, KN_E_IO, "cannot open cache directory %s: %s", c->dir, strerror(errno));
    goto fail;
  }
  struct stat st;
  if (fstat(topfd, &st) != 0 || (s = check_dir_stat(c->dir, &st, d))) {
    if (!s) s = kn_diag_set(d, KN_E_IO, "cannot stat cache directory %s: %s", c->dir, strerror(errno));
    goto fail;
  }
  if (snprintf(c->objdir, sizeof c->objdir, "%s/%s", c->dir, OBJECTS_DIR) >= (int)sizeof c->objdir) {
    s = kn_diag_set(d, KN_E_INVALID, "cache directory path too long");
    goto fail;
  }
  if (mkdirat(topfd, OBJECTS_DIR, 0700) != 0 && errno != EEXIST) {
    /* a read-only cache: usable for nothing, but not an error — every get misses and every
     * put reports NOT_STORED, and the caller runs uncached */
    kn_diag_set(d, KN_NOT_STORED, "cache directory %s is not writable (%s); running without a cache",
        c->dir, strerror(errno));
    warn(c, 1, KN_OK, d);
    goto done;
  }
  c->objfd = openat(topfd, OBJECTS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int e = errno;
  if (c->objfd < 0) {
    s = kn_diag_set(d, e == ELOOP || e == ENOTDIR ? KN_E_INSECURE : KN_E_IO, "cannot open %s: %s",
                    c->objdir, strerror(e));
    goto fail;
  }
  if (fstat(c->objfd, &st) != 0 || (s = check_dir_stat(c->objdir, &st, d))) {
    if (!s) s = kn_diag_set(d, KN_E_IO, "cannot stat %s: %s", c->objdir, strerror(errno));
    goto fail;
  }
done:
  fault_from_env(c);
  *out = c;
  return KN_OK; /* read-only: with the warning in *d */
fail:
  kn_cache_close(c);
  return s;
}

void kn_cache_close(kn_cache *c) {
  if (!c) return;
  if (c->objfd >= 0) close(c->objfd);
  if (c->topfd >= 0) close(c->topfd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

const char *kn_cache_dir(const kn_cache *c) { return c->dir; }
int kn_cache_dir_fd(const kn_cache *c) { return c->topfd; }
uint64_t kn_cache_max_bytes(const kn_cache *c) { return c->max_bytes; }

/* ---- reading ---- */

static int read_full(int fd, void *buf, size_t n, off_t off) {
  uint8_t *p = buf;
  while (n) {
    ssize_t r = pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r, n -= (size_t)r, off += r;
  }
  return 0;
}

/* removes the directory `name` of dirfd with everything in it (links unlinked, never
 * followed; at most 16 levels deep); 0, or an errno */
static int remove_tree(int dirfd, const char *name, int depth) {
  if (unlinkat(dirfd, name, AT_REMOVEDIR) == 0) return 0;
  if (errno != ENOTEMPTY && errno != EEXIST) return errno;
  if (depth >= 16) return ENOTEMPTY;
  int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    int e = errno;
    if (fd >= 0) close(fd);
    return e;
  }
  int err = 0;
  for (struct dirent *de; !err && (de = readdir(dir));) {
    struct stat st;
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
        fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
      continue;
    if (S_ISDIR(st.st_mode)) err = remove_tree(fd, de->d_name, depth + 1);
    else if (unlinkat(fd, de->d_name, 0) != 0) err = errno;
  }
  closedir(dir);
  if (!err && unlinkat(dirfd, name, AT_REMOVEDIR) != 0) err = errno;
  return err;
}

/* removes name (a file, or a directory where an entry belongs) if it still is the inode `st`
 * describes; 0, or the errno of a failed removal */
static int remove_if_same(kn_cache *c, const char *name, const struct stat *st) {
  struct stat now;
  if (fstatat(c->objfd, name, &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_dev != st->st_dev ||
      now.st_ino != st->st_ino)
    return 0; /* already gone, or replaced by another writer: nothing bad left */
  if (S_ISDIR(now.st_mode)) return remove_tree(c->objfd, name, 0);
  return unlinkat(c->objfd, name, 0) == 0 ? 0 : errno;
}

/* Reads and checks the entry `name`.  On OK with payload != NULL, *payload is malloc'ed.
 * On KN_E_CORRUPT the entry has been removed (unless *kept, when kept is not NULL: the removal
 * failed) and *d (also logged) says why.  The size is checked before anything is read. */
static kn_status read_entry(kn_cache *c, const char *name, const kn_cache_key *key, void **payload,
                            size_t *size, bool touch, bool *kept, kn_diag *d) {
  if (kept) *kept = false;
  int fd = openat(c->objfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return kn_diag_set(d, KN_MISS, "no cache entry %s", name);
    if (errno == ELOOP) { /* a symlink where an entry belongs: never follow it, drop it */
      unlinkat(c->objfd, name, 0);
      kn_diag_set(d, KN_E_CORRUPT, "cache entry %s/%s is a symbolic link; removed", c->objdir, name);
      return warn(c, 1, KN_E_CORRUPT, d);
    }
    return kn_diag_set(d, KN_MISS, "cannot open cache entry %s/%s: %s", c->objdir, name, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return kn_diag_set(d, KN_MISS, "cannot stat cache entry %s/%s: %s", c->objdir, name, strerror(e));
  }
  const char *why = NULL;
  char whybuf[128];
  uint8_t h[KN_CACHE_HEADER_BYTES];
  uint8_t *data = NULL;
  uint64_t len = 0;
  if (!S_ISREG(st.st_mode)) {
    why = S_ISDIR(st.st_mode) ? "a directory, not a file" : "not a regular file";
  } else if ((uint64_t)st.st_size > KN_CACHE_MAX_ENTRY_BYTES) {
    snprintf(whybuf, sizeof whybuf, "%llu bytes, larger than any entry kiln writes",
             (unsigned long long)st.st_size);
    why = whybuf;
  } else if ((uint64_t)st.st_size > c->max_bytes) {
    /* another process's, with a larger bound: not read (it may be large), not removed */
    close(fd);
    return kn_diag_set(d, KN_MISS, "cache entry %s/%s has %llu bytes, more than this cache's "
                       "bound (%llu bytes); not read", c->objdir, name,
                       (unsigned long long)st.st_size, (unsigned long long)c->max_bytes);
  } else if ((uint64_t)st.st_size < KN_CACHE_HEADER_BYTES) {
    snprintf(whybuf, sizeof whybuf, "truncated: %lld bytes, shorter than the header",
             (long long)st.st_size);
    why = whybuf;
  } else if (read_full(fd, h, sizeof h, 0) != 0) {
    why = "unreadable header";
  } else if (memcmp(h, kMagic, 8) != 0) {
    why = "bad magic";
  } else if (get_le32(h + 8) != KN_CACHE_FORMAT_VERSION || get_le32(h + 12) != KN_CACHE_HEADER_BYTES) {
    why = "bad format version or header size";
  } else if (memcmp(h + 16, key->b, 16) != 0) {
    why = "header key does not match the file name";
  } else if ((len = get_le64(h + 32)) != (uint64_t)st.st_size - KN_CACHE_HEADER_BYTES) {
    snprintf(whybuf, sizeof whybuf, "length mismatch: header says %llu payload bytes, file has %llu",
             (unsigned long long)len, (unsigned long long)st.st_size - KN_CACHE_HEADER_BYTES);
    why = whybuf;
  } else if (len > SIZE_MAX - 1 || !(data = malloc(len ? (size_t)len : 1))) {
    close(fd);
    return kn_diag_set(d, KN_E_NOMEM, "out of memory reading cache entry %s/%s (%llu bytes)", c->objdir,
               name, (unsigned long long)len);
  } else if (read_full(fd, data, (size_t)len, KN_CACHE_HEADER_BYTES) != 0) {
    why = "unreadable payload";
  } else {
    uint8_t sum[16];
    entry_checksum(h, data, (size_t)len, sum);
    if (memcmp(sum, h + 48, 16) != 0) why = "checksum mismatch";
  }
  if (why) {
    free(data);
    int err = remove_if_same(c, name, &st);
    close(fd);
    if (kept) *kept = err != 0;
    kn_diag_set(d, KN_E_CORRUPT, "cache entry %s/%s is corrupt (%s); %s%s", c->objdir, name, why,
        err ? "could not be removed: " : "removed", err ? strerror(err) : "");
    return warn(c, 1, KN_E_CORRUPT, d);
  }
  if (touch) futimens(fd, NULL); /* LRU: a hit is a use (fails harmlessly if read-only) */
  close(fd);
  if (payload) {
    *payload = data;
    *size = (size_t)len;
  } else {
    free(data);
  }
  return KN_OK;
}

kn_status kn_cache_get(kn_cache *c, const kn_cache_key *key, void **payload, size_t *size,
                       kn_diag *d) {
  if (!c || !key || !payload || !size) return kn_diag_set(d, KN_E_INVALID, "kn_cache_get: null argument");
  kn_diag own;
  if (!d) d = &own;
  *payload = NULL;
  *size = 0;
  if (c->objfd < 0) return kn_diag_set(d, KN_MISS, "cache %s is not usable (read-only)", c->dir);
  char name[33];
  kn_cache_key_hex(key, name);
  return read_entry(c, name, key, payload, size, true, NULL, d);
}

/* ---- writing ---- */

static int write_full(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    if (w == 0) { errno = EIO; return -1; }
    p += w, n -= (size_t)w;
  }
  return 0;
}

static int fault_at(kn_cache *c, kn_cache_fault_stage stage) {
  return atomic_load(&c->fault_stage) == (int)stage ? atomic_load(&c->fault_err) : 0;
}

static kn_status scan_and_evict(kn_cache *c, uint64_t target, kn_cache_report *r, kn_diag *d);

/* bookkeeping after a successful put: evict when this process's estimate passes the bound */
static void account_put(kn_cache *c, uint64_t file_bytes) {
  if (c->max_bytes == UINT64_MAX) return;
  pthread_mutex_lock(&c->mu);
  if (c->est_bytes >= 0) c->est_bytes += (int64_t)file_bytes;
  if (c->est_bytes < 0 || (uint64_t)c->est_bytes > c->max_bytes) {
    kn_cache_report r = {0};
    kn_diag note; /* eviction's own: put's caller hears of it through the log only */
    if (scan_and_evict(c, c->max_bytes - c->max_bytes / 10, &r, &note) == KN_OK)
      c->est_bytes = (int64_t)r.bytes;
  }
  pthread_mutex_unlock(&c->mu);
}

kn_status kn_cache_put(kn_cache *c, const kn_cache_key *key, const void *payload, size_t size,
                       kn_diag *d) {
  if (!c || !key || (!payload && size)) return kn_diag_set(d, KN_E_INVALID, "kn_cache_put: null argument");
  kn_diag own;
  if (!d) d = &own;
  char name[33];
  kn_cache_key_hex(key, name);
  kn_diag_clear(d);
  if (c->objfd < 0) {
    kn_diag_set(d, KN_NOT_STORED, "cache %s is not writable; %s not stored", c->dir, name);
    return warn(c, 1, KN_NOT_STORED, d);
  }
  uint64_t bound = c->max_bytes < KN_CACHE_MAX_ENTRY_BYTES ? c->max_bytes : KN_CACHE_MAX_ENTRY_BYTES;
  if ((uint64_t)size > bound || (uint64_t)size + KN_CACHE_HEADER_BYTES > bound) {
    kn_diag_set(d, KN_NOT_STORED, "cache entry %s (%zu bytes) is larger than the cache bound (%llu "
        "bytes, KILN_CACHE_MAX_BYTES, at most %llu an entry); not stored", name, size,
        (unsigned long long)c->max_bytes, (unsigned long long)KN_CACHE_MAX_ENTRY_BYTES);
    return warn(c, 1, KN_NOT_STORED, d);
  }

  uint8_t h[KN_CACHE_HEADER_BYTES];
  build_header(h, key, payload, size);

  /* a fresh temp name: pid, time and a per-handle counter hashed together; O_EXCL makes a
   * collision a retry, never a shared file */
  char tmp[64];
  int fd = -1, err = 0;
  const char *stage = "create";
  for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t seed[4] = {(uint64_t)getpid(), (uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec,
                        atomic_fetch_add(&c->tmp_counter, 1)};
    snprintf(tmp, sizeof tmp, TEMP_PREFIX "%.8s-%016llx", name,
             (unsigned long long)XXH3_64bits(seed, sizeof seed));
    if ((err = fault_at(c, KN_CACHE_FAULT_OPEN))) break;
    fd = openat(c->objfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      err = errno;
      if (err != EEXIST) break;
    }
  }
  if (fd >= 0) {
    err = 0;
    stage = "write";
    if ((err = fault_at(c, KN_CACHE_FAULT_WRITE))) {
      /* a full disk fails part-way: leave a partial temp file for the cleanup to handle */
      (void)!write(fd, h, sizeof h / 2);
    } else if (write_full(fd, h, sizeof h) != 0 || write_full(fd, payload, size) != 0) {
      err = errno;
    }
    if (!err) {
      stage = "fsync";
      if ((err = fault_at(c, KN_CACHE_FAULT_FSYNC)) == 0 && fsync(fd) != 0) err = errno;
    }
    /* close can report a deferred write error (NFS, some quota implementations) */
    if (close(fd) != 0 && !err) {
      stage = "close";
      err = errno;
    }
    if (!err) {
      stage = "rename";
      if ((err = fault_at(c, KN_CACHE_FAULT_RENAME)) == 0 && renameat(c->objfd, tmp, c->objfd, name) != 0)
        err = errno;
    }
    if (err) unlinkat(c->objfd, tmp, 0);
  } else if (!err) {
    err = EEXIST;
  }
  if (err) {
    kn_diag_set(d, KN_NOT_STORED, "cache entry %s not stored in %s (%s: %s); continuing without caching it",
        name, c->objdir, stage, strerror(err));
    return warn(c, 1, KN_NOT_STORED, d);
  }
  account_put(c, (uint64_t)size + KN_CACHE_HEADER_BYTES);
  return KN_OK;
}

kn_status kn_cache_remove(kn_cache *c, const kn_cache_key *key, kn_diag *d) {
  if (!c || !key) return kn_diag_set(d, KN_E_INVALID, "kn_cache_remove: null argument");
  if (c->objfd < 0) return KN_OK;
  char name[33];
  kn_cache_key_hex(key, name);
  unlinkat(c->objfd, name, 0);
  return KN_OK;
}

/* ---- scanning: list, verify, clear, evict ---- */

typedef struct scan_item {
  kn_cache_entry e;
  char name[33];
} scan_item;

typedef struct scan_result {
  scan_item *items;
  size_t n, cap;
  uint64_t total;        /* entries + temp files */
} scan_result;

static int cmp_oldest_first(const void *a, const void *b) {
  const kn_cache_entry *x = &((const scan_item *)a)->e, *y = &((const scan_item *)b)->e;
  if (x->last_used != y->last_used) return x->last_used < y->last_used ? -1 : 1;
  if (x->last_used_ns != y->last_used_ns) return x->last_used_ns < y->last_used_ns ? -1 : 1;
  return memcmp(x->key.b, y->key.b, 16);
}

/* Lists entries (names that are 32 hex digits) into sr.  Temp files count in the total; with
 * remove_temps stale ones (KN_CACHE_STALE_TEMP_SECONDS old: a younger one may be another
 * process's write in flight) are removed, the others counted in r->kept_temp. */
static kn_status scan(kn_cache *c, scan_result *sr, int remove_temps, kn_cache_report *r,
                      kn_diag *d) {
  memset(sr, 0, sizeof *sr);
  int fd = openat(c->objfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    int e = errno;
    if (fd >= 0) close(fd);
    return kn_diag_set(d, KN_E_IO, "cannot read cache directory %s: %s", c->objdir, strerror(e));
  }
  time_t now = time(NULL);
  struct dirent *de;
  while ((de = readdir(dir))) {
    struct stat st;
    if (!strncmp(de->d_name, TEMP_PREFIX, strlen(TEMP_PREFIX))) {
      if (fstatat(c->objfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      bool stale = now - st.st_mtime > KN_CACHE_STALE_TEMP_SECONDS;
      if (remove_temps && stale && unlinkat(c->objfd, de->d_name, 0) == 0) {
        if (r) r->removed_temp++;
      } else {
        sr->total += (uint64_t)st.st_size;
        if (remove_temps && r) r->kept_temp++;
      }
      continue;
    }
    kn_cache_key k;
    if (strlen(de->d_name) != 32 || kn_cache_key_parse(de->d_name, &k) != 0) continue;
    if (fstatat(c->objfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (sr->n == sr->cap) {
      size_t cap = sr->cap ? 2 * sr->cap : 64;
      scan_item *ni = realloc(sr->items, cap * sizeof *ni);
      if (!ni) {
        closedir(dir);
        free(sr->items);
        sr->items = NULL;
        return kn_diag_set(d, KN_E_NOMEM, "out of memory listing %s", c->objdir);
      }
      sr->items = ni, sr->cap = cap;
    }
    scan_item *it = &sr->items[sr->n++];
    it->e.key = k;
    it->e.file_bytes = (uint64_t)st.st_size;
    it->e.last_used = (int64_t)st.st_mtim.tv_sec;
    it->e.last_used_ns = (int64_t)st.st_mtim.tv_nsec;
    memcpy(it->name, de->d_name, 33);
    sr->total += (uint64_t)st.st_size;
  }
  closedir(dir);
  if (sr->n) qsort(sr->items, sr->n, sizeof *sr->items, cmp_oldest_first); /* (NULL when empty) */
  return KN_OK;
}

static kn_status scan_and_evict(kn_cache *c, uint64_t target, kn_cache_report *r, kn_diag *d) {
  scan_result sr;
  kn_status s = scan(c, &sr, 1, r, d);
  if (s) return s;
  size_t evicted = 0;
  uint64_t freed = 0;
  for (size_t i = 0; i < sr.n && sr.total > target; i++) {
    if (unlinkat(c->objfd, sr.items[i].name, 0) == 0 || errno == ENOENT) {
      sr.total -= sr.items[i].e.file_bytes;
      freed += sr.items[i].e.file_bytes;
      evicted++;
    }
  }
  if (r) {
    r->entries = sr.n;
    r->removed_evicted = evicted;
    r->bytes = sr.total;
  }
  free(sr.items);
  if (evicted) {
    kn_diag_set(d, KN_OK, "cache %s: evicted %zu least recently used entries (%llu bytes) to stay "
        "under %llu bytes", c->objdir, evicted, (unsigned long long)freed, (unsigned long long)target);
    warn(c, 2, KN_OK, d);
  }
  return KN_OK;
}

kn_status kn_cache_evict(kn_cache *c, uint64_t target, kn_cache_report *report, kn_diag *d) {
  if (!c) return kn_diag_set(d, KN_E_INVALID, "kn_cache_evict: null cache");
  kn_diag own;
  if (!d) d = &own;
  kn_diag_clear(d);
  if (report) memset(report, 0, sizeof *report);
  if (c->objfd < 0) return KN_OK;
  pthread_mutex_lock(&c->mu);
  kn_status s = scan_and_evict(c, target, report, d);
  if (!s && report) c->est_bytes = (int64_t)report->bytes;
  pthread_mutex_unlock(&c->mu);
  return s;
}

kn_status kn_cache_list(kn_cache *c, kn_cache_entry **entries, size_t *count, kn_diag *d) {
  if (!c || !entries || !count) return kn_diag_set(d, KN_E_INVALID, "kn_cache_list: null argument");
  *entries = NULL;
  *count = 0;
  if (c->objfd < 0) return KN_OK;
  scan_result sr;
  kn_status s = scan(c, &sr, 0, NULL, d);
  if (s) return s;
  kn_cache_entry *out = malloc((sr.n ? sr.n : 1) * sizeof *out);
  if (!out) {
    free(sr.items);
    return kn_diag_set(d, KN_E_NOMEM, "out of memory listing %s", c->objdir);
  }
  for (size_t i = 0; i < sr.n; i++) out[i] = sr.items[sr.n - 1 - i].e; /* most recent first */
  free(sr.items);
  *entries = out;
  *count = sr.n;
  return KN_OK;
}

kn_status kn_cache_verify(kn_cache *c, kn_cache_report *report, kn_diag *d) {
  kn_cache_report r = {0};
  if (!c) return kn_diag_set(d, KN_E_INVALID, "kn_cache_verify: null cache");
  kn_diag own;
  if (!d) d = &own;
  kn_diag_clear(d);
  if (report) *report = r;
  if (c->objfd < 0) return KN_OK;
  scan_result sr;
  kn_status s = scan(c, &sr, 1, &r, d);
  if (s) return s;
  r.entries = sr.n;
  r.bytes = sr.total;
  for (size_t i = 0; i < sr.n; i++) {
    /* verification reads every entry but is not a use: it leaves the LRU order alone */
    bool kept;
    kn_status e = read_entry(c, sr.items[i].name, &sr.items[i].e.key, NULL, NULL, false, &kept, d);
    if (e == KN_OK) {
      r.valid++;
    } else if (e == KN_E_CORRUPT && kept) {
      r.corrupt_kept++;
    } else if (e == KN_E_CORRUPT) {
      r.removed_corrupt++;
      r.bytes -= sr.items[i].e.file_bytes;
    } else if (e == KN_MISS) {
      r.bytes -= sr.items[i].e.file_bytes; /* removed by someone else meanwhile */
    } else {
      free(sr.items);
      return e;
    }
  }
  free(sr.items);
  pthread_mutex_lock(&c->mu);
  c->est_bytes = (int64_t)r.bytes;
  pthread_mutex_unlock(&c->mu);
  if (report) *report = r;
  if (r.corrupt_kept)
    kn_diag_set(d, KN_OK, "cache %s: %zu of %zu entries were corrupt, %zu of them could not be "
                "removed", c->objdir, r.removed_corrupt + r.corrupt_kept, r.entries, r.corrupt_kept);
  else if (r.removed_corrupt)
    kn_diag_set(d, KN_OK, "cache %s: %zu of %zu entries were corrupt and have been removed", c->objdir,
        r.removed_corrupt, r.entries);
  else
    kn_diag_clear(d);
  return KN_OK;
}

kn_status kn_cache_clear(kn_cache *c, kn_cache_report *report, kn_diag *d) {
  kn_cache_report r = {0};
  if (!c) return kn_diag_set(d, KN_E_INVALID, "kn_cache_clear: null cache");
  if (report) *report = r;
  if (c->objfd < 0) return KN_OK;
  pthread_mutex_lock(&c->mu);
  scan_result sr;
  kn_status s = scan(c, &sr, 1, &r, d);
  if (!s) {
    r.entries = sr.n;
    for (size_t i = 0; i < sr.n; i++) {
      struct stat st;
      if (fstatat(c->objfd, sr.items[i].name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
          remove_if_same(c, sr.items[i].name, &st) == 0)
        r.removed_evicted++;
    }
    free(sr.items);
    c->est_bytes = 0;
  }
  pthread_mutex_unlock(&c->mu);
  if (report) *report = r;
  return s;
}
