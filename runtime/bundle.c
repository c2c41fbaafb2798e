/* bundle.c — clang offload bundles and the AOT index (see bundle.h for both formats).
 *
 * Both readers treat their input as hostile: every length and offset is compared with what is
 * left of the bytes before it is used, and every failure names what was wrong (which entry, which
 * field, which line and column).  The index is one entry line per (kernel, architecture) so a
 * reader needs no nesting: a field it does not know is an error (a newer index is refused, not
 * half read), a field it needs and does not find is one too.
 */
#include "bundle.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}
static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- offload bundles ---- */

#define MAGIC_LEN (sizeof KN_BUNDLE_MAGIC - 1)
#define HOST_ID "host-x86_64-unknown-linux-gnu-"

void kn_bundle_amd_id(const char *chip, char *out, size_t n) {
  snprintf(out, n, "hipv4-amdgcn-amd-amdhsa--%s", chip);
}

int kn_bundle_is(const void *p, size_t n) {
  return p && n >= MAGIC_LEN && !memcmp(p, KN_BUNDLE_MAGIC, MAGIC_LEN);
}

kn_status kn_bundle_write(const kn_bundle_part *parts, int n, void **out, size_t *size,
                          kn_diag *err) {
  *out = NULL;
  *size = 0;
  size_t head = MAGIC_LEN + 8 + 24 + strlen(HOST_ID);
  for (int i = 0; i < n; i++) head += 24 + strlen(parts[i].id);
  size_t at = (head + KN_BUNDLE_ALIGN - 1) / KN_BUNDLE_ALIGN * KN_BUNDLE_ALIGN, total = at;
  for (int i = 0; i < n; i++)
    total = (total + KN_BUNDLE_ALIGN - 1) / KN_BUNDLE_ALIGN * KN_BUNDLE_ALIGN + parts[i].size;
  uint8_t *b = calloc(1, total);
  if (!b) return kn_diag_set(err, KN_E_NOMEM, "out of memory writing an offload bundle");
  memcpy(b, KN_BUNDLE_MAGIC, MAGIC_LEN);
  put64(b + MAGIC_LEN, (uint64_t)n + 1);
  uint8_t *h = b + MAGIC_LEN + 8;
  /* the host entry: empty, at the first code object's offset (clang's bundler does the same) */
  put64(h, at), put64(h + 8, 0), put64(h + 16, strlen(HOST_ID));
  memcpy(h + 24, HOST_ID, strlen(HOST_ID));
  h += 24 + strlen(HOST_ID);
  for (int i = 0; i < n; i++) {
    at = (at + KN_BUNDLE_ALIGN - 1) / KN_BUNDLE_ALIGN * KN_BUNDLE_ALIGN;
    size_t idl = strlen(parts[i].id);
    put64(h, at), put64(h + 8, parts[i].size), put64(h + 16, idl);
    memcpy(h + 24, parts[i].id, idl);
    h += 24 + idl;
    memcpy(b + at, parts[i].data, parts[i].size);
    at += parts[i].size;
  }
  *out = b;
  *size = total;
  return KN_OK;
}

kn_status kn_bundle_entries(const void *data, size_t n, kn_bundle_part *parts, size_t *idlen,
                            int max, int *count, kn_diag *err) {
  const uint8_t *p = data;
  *count = 0;
  if (!kn_bundle_is(data, n))
    return kn_diag_set(err, KN_E_CORRUPT, "not a clang offload bundle (no %s magic)",
                       KN_BUNDLE_MAGIC);
  size_t at = MAGIC_LEN;
  if (n - at < 8) return kn_diag_set(err, KN_E_CORRUPT, "truncated offload bundle (%zu bytes)", n);
  uint64_t entries = le64(p + at);
  at += 8;
  if (entries > (n - at) / 24)
    return kn_diag_set(err, KN_E_CORRUPT, "offload bundle claims %" PRIu64 " entries; %zu bytes "
                       "cannot hold them (truncated?)", entries, n);
  for (uint64_t i = 0; i < entries; i++) {
    if (n - at < 24)
      return kn_diag_set(err, KN_E_CORRUPT, "truncated offload bundle: entry %" PRIu64
                         " of %" PRIu64 " is cut off", i, entries);
    uint64_t off = le64(p + at), sz = le64(p + at + 8), idl = le64(p + at + 16);
    at += 24;
    if (idl == 0 || idl > n - at || idl > 1024)
      return kn_diag_set(err, KN_E_CORRUPT, "offload bundle entry %" PRIu64 ": an id of %" PRIu64
                         " bytes lies outside the file (truncated?)", i, idl);
    const char *id = (const char *)p + at;
    at += idl;
    if (off > n || sz > n - off)
      return kn_diag_set(err, KN_E_CORRUPT, "offload bundle entry %.*s: %" PRIu64 " bytes at %"
                         PRIu64 " lie outside the %zu-byte file (truncated?)",
                         (int)(idl < 100 ? idl : 100), id, sz, off, n);
    if ((int)i < max) {
      parts[i] = (kn_bundle_part){.id = id, .data = p + off, .size = (size_t)sz};
      idlen[i] = (size_t)idl;
    }
  }
  *count = (int)(entries < (uint64_t)max ? entries : (uint64_t)max);
  return KN_OK;
}

kn_status kn_bundle_find(const void *p, size_t n, const char *chip, const void **code,
                         size_t *size, kn_diag *err) {
  enum { MAX = 64 };
  kn_bundle_part parts[MAX];
  size_t idl[MAX];
  int count;
  kn_status s = kn_bundle_entries(p, n, parts, idl, MAX, &count, err);
  if (s != KN_OK) return s;
  char ids[512] = "";
  size_t cl = strlen(chip);
  for (int i = 0; i < count; i++) {
    const char *id = parts[i].id, *end = id + idl[i], *chipat = NULL;
    for (const char *q = id; q + 17 <= end; q++)
      if (!memcmp(q, "amdgcn-amd-amdhsa", 17)) chipat = q + 17;
    if (chipat) {
      while (chipat < end && *chipat == '-') chipat++;
      size_t left = (size_t)(end - chipat);
      if (left >= cl && !memcmp(chipat, chip, cl) && (left == cl || chipat[cl] == ':') &&
          parts[i].size) {
        *code = parts[i].data;
        *size = parts[i].size;
        return KN_OK;
      }
    }
    size_t used = strlen(ids);
    snprintf(ids + used, sizeof ids - used, "%s%.*s", used ? ", " : "",
             (int)(idl[i] < 80 ? idl[i] : 80), id);
  }
  return kn_diag_set(err, KN_E_UNSUPPORTED, "the offload bundle has no code object for %s (it "
                     "holds: %s)", chip, ids[0] ? ids : "nothing");
}

/* ---- the index ---- */

void kn_aot_file_describe(kn_aot_file *f, const char *name, const void *data, size_t n) {
  snprintf(f->name, sizeof f->name, "%s", name);
  f->bytes = n;
  f->xxh64 = XXH3_64bits(data, n);
}

typedef struct cursor {
  const char *file;
  int line;
  const char *line_start;
  kn_diag *err;
} cursor;

__attribute__((format(printf, 3, 4))) static kn_status bad(const cursor *c, const char *at,
                                                          const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return kn_diag_set(c->err, KN_E_CORRUPT, "%s:%d:%d: %s", c->file, c->line,
                     (int)(at - c->line_start) + 1, msg);
}

/* a decimal integer in [lo, hi] filling the whole of [s, e) */
static int num(const char *s, const char *e, int64_t lo, int64_t hi, int64_t *out) {
  if (s == e || e - s > 19) return -1;
  int64_t v = 0;
  for (const char *q = s; q < e; q++) {
    if (*q < '0' || *q > '9') return -1;
    v = v * 10 + (*q - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int text(const char *s, const char *e, char *out, size_t n) {
  if ((size_t)(e - s) >= n || s == e) return -1;
  memcpy(out, s, (size_t)(e - s));
  out[e - s] = 0;
  return 0;
}

/* a file name: plain characters, no directory part, not "." or ".." */
static int file_name(const char *s, const char *e, char *out, size_t n) {
  for (const char *q = s; q < e; q++)
    if (*q == '/' || *q == '\\' || (unsigned char)*q < 0x21 || (unsigned char)*q > 0x7e) return -1;
  if ((e - s == 1 && *s == '.') || (e - s == 2 && s[0] == '.' && s[1] == '.')) return -1;
  return text(s, e, out, n);
}

static int hex64(const char *s, const char *e, uint64_t *out) {
  if (e - s != 16) return -1;
  uint64_t v = 0;
  for (const char *q = s; q < e; q++) {
    int d = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v << 4 | (uint64_t)d;
  }
  *out = v;
  return 0;
}

enum { F_NAME = 1 << 0, F_SYMBOL = 1 << 1, F_ARCH = 1 << 2, F_DESC = 1 << 3, F_SEQLEN = 1 << 4,
       F_TILING = 1 << 5, F_THREADS = 1 << 6, F_SHARED = 1 << 7, F_FILE = 1 << 8,
       F_REQUIRED = (1 << 9) - 1 };

static const char GRID_RULE[] = "cdiv(seqlen_q,block_m),batch*heads,1";

/* one key=value field of an entry line */
static kn_status field(const cursor *c, const char *k, const char *ke, const char *v,
                       const char *ve, kn_aot_entry *e, int *seen) {
  size_t kl = (size_t)(ke - k);
#define IS(name) (kl == sizeof name - 1 && !memcmp(k, name, kl))
  int64_t x;
  int tiling_bit = 0;
  if (IS("name")) {
    if (text(v, ve, e->name, sizeof e->name)) return bad(c, v, "bad name");
    *seen |= F_NAME;
  } else if (IS("symbol")) {
    if (text(v, ve, e->symbol, sizeof e->symbol)) return bad(c, v, "bad symbol");
    *seen |= F_SYMBOL;
  } else if (IS("arch")) {
    if (text(v, ve, e->arch, sizeof e->arch)) return bad(c, v, "bad arch");
    *seen |= F_ARCH;
  } else if (IS("desc")) {
    if (text(v, ve, e->desc, sizeof e->desc)) return bad(c, v, "bad descriptor key");
    *seen |= F_DESC;
  } else if (IS("seqlen")) {
    const char *dash = memchr(v, '-', (size_t)(ve - v));
    int64_t lo, hi;
    if (!dash || num(v, dash, 1, INT32_MAX, &lo) || num(dash + 1, ve, 1, INT32_MAX, &hi) || lo > hi)
      return bad(c, v, "seqlen must be LO-HI with 1 <= LO <= HI <= 2147483647");
    e->seqlen_lo = (int)lo, e->seqlen_hi = (int)hi;
    *seen |= F_SEQLEN;
  } else if ((tiling_bit = IS("block_m") ? 1 : IS("block_n") ? 2 : IS("warps") ? 4
                         : IS("stages") ? 8 : IS("mfma") ? 16 : IS("wgmma") ? 32 : 0)) {
    int lo = tiling_bit >= 16 ? 0 : 1, hi = tiling_bit == 32 ? 1 : 1 << 20;
    if (num(v, ve, lo, hi, &x)) return bad(c, v, "%.*s must be a number in %d..%d", (int)kl, k, lo, hi);
    int *dst = tiling_bit == 1 ? &e->block_m : tiling_bit == 2 ? &e->block_n
             : tiling_bit == 4 ? &e->warps : tiling_bit == 8 ? &e->stages
             : tiling_bit == 16 ? &e->mfma : &e->wgmma;
    *dst = (int)x;
    seen[1] |= tiling_bit;
    if (seen[1] == 63) *seen |= F_TILING;
  } else if (IS("threads")) {
    if (num(v, ve, 1, 1024, &x)) return bad(c, v, "threads must be 1..1024");
    e->threads = (int)x;
    *seen |= F_THREADS;
  } else if (IS("shared")) {
    if (num(v, ve, 0, 1 << 30, &x)) return bad(c, v, "shared must be 0..2^30 bytes");
    e->shared = x;
    *seen |= F_SHARED;
  } else if (IS("tuned")) {
    if (num(v, ve, 0, 1, &x)) return bad(c, v, "tuned must be 0 or 1");
    e->tuned = (int)x;
  } else if (IS("grid")) {
    if ((size_t)(ve - v) != sizeof GRID_RULE - 1 || memcmp(v, GRID_RULE, sizeof GRID_RULE - 1))
      return bad(c, v, "the only grid rule kiln knows is %s", GRID_RULE);
  } else if (IS("file") || IS("cubin")) {
    kn_aot_file *f = IS("file") ? &e->file : &e->cubin;
    if (file_name(v, ve, f->name, sizeof f->name))
      return bad(c, v, "a file name in the bundle's directory (no '/', at most %zu characters)",
                 sizeof f->name - 1);
    if (IS("file")) *seen |= F_FILE;
  } else if (IS("bytes") || IS("cubin_bytes")) {
    if (num(v, ve, 1, (int64_t)1 << 32, &x)) return bad(c, v, "a size in bytes, 1..2^32");
    (IS("bytes") ? &e->file : &e->cubin)->bytes = (uint64_t)x;
  } else if (IS("xxh64") || IS("cubin_xxh64")) {
    if (hex64(v, ve, &(IS("xxh64") ? &e->file : &e->cubin)->xxh64))
      return bad(c, v, "a checksum of 16 lowercase hex digits");
  } else {
    return bad(c, k, "unknown field '%.*s'", (int)kl, k);
  }
#undef IS
  return KN_OK;
}

kn_status kn_aot_index_parse(const char *t, size_t len, const char *file, const char *dir,
                             kn_aot_index *out, kn_diag *err) {
  memset(out, 0, sizeof *out);
  snprintf(out->dir, sizeof out->dir, "%s", dir);
  snprintf(out->path, sizeof out->path, "%s", file);
  cursor c = {.file = file, .err = err};
  const char *p = t, *end = t + len;
  int cap = 0;
  bool magic = false;
  kn_status s = KN_OK;
  if (memchr(t, 0, len)) {
    c.line = 1, c.line_start = t;
    return bad(&c, t, "a NUL byte in the index: not a kiln index");
  }
  while (p < end && s == KN_OK) {
    const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
    c.line++, c.line_start = p;
    const char *q = p;
    while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
    if (q == le || *q == '#') {
      p = le + 1;
      continue;
    }
    if (!magic) {
      size_t ml = sizeof KN_AOT_INDEX_MAGIC - 1;
      if ((size_t)(le - q) < ml || memcmp(q, KN_AOT_INDEX_MAGIC, ml))
        s = bad(&c, q, "expected '%s' (a kiln AOT index of another version, or not one)",
                KN_AOT_INDEX_MAGIC);
      magic = true;
      p = le + 1;
      continue;
    }
    if ((size_t)(le - q) < 6 || memcmp(q, "entry ", 6)) {
      s = bad(&c, q, "expected an 'entry' line");
      break;
    }
    if (out->n == cap) {
      cap = cap ? 2 * cap : 16;
      kn_aot_entry *ne = realloc(out->e, sizeof *ne * (size_t)cap);
      if (!ne) {
        s = kn_diag_set(err, KN_E_NOMEM, "out of memory reading %s", file);
        break;
      }
      out->e = ne;
    }
    kn_aot_entry *e = &out->e[out->n];
    memset(e, 0, sizeof *e);
    int seen[2] = {0, 0};
    q += 6;
    while (q < le && s == KN_OK) {
      while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
      if (q == le) break;
      const char *te = q;
      while (te < le && *te != ' ' && *te != '\t' && *te != '\r') te++;
      const char *eq = memchr(q, '=', (size_t)(te - q));
      if (!eq || eq == q) s = bad(&c, q, "expected key=value");
      else s = field(&c, q, eq, eq + 1, te, e, seen);
      q = te;
    }
    if (s != KN_OK) break;
    if ((seen[0] & F_REQUIRED) != F_REQUIRED) {
      static const char *const names[] = {"name", "symbol", "arch", "desc", "seqlen",
                                          "block_m/block_n/warps/stages/mfma/wgmma", "threads",
                                          "shared", "file"};
      int i = 0;
      while (seen[0] & (1 << i)) i++;
      s = bad(&c, p, "the entry has no %s", names[i]);
      break;
    }
    if (!e->file.bytes || (e->cubin.name[0] && !e->cubin.bytes)) {
      s = bad(&c, p, "a file without its bytes= (or cubin_bytes=) and checksum");
      break;
    }
    out->n++;
    p = le + 1;
  }
  if (s == KN_OK && !magic) {
    c.line = c.line ? c.line : 1, c.line_start = t;
    s = bad(&c, t, "empty index (no '%s' line)", KN_AOT_INDEX_MAGIC);
  }
  if (s != KN_OK) kn_aot_index_free(out);
  return s;
}

static kn_status slurp(const char *path, size_t limit, void **out, size_t *size, kn_diag *err) {
  *out = NULL;
  *size = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return kn_diag_set(err, KN_E_IO, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    return kn_diag_set(err, KN_E_IO, "%s is not a regular file", path);
  }
  if ((uint64_t)st.st_size > limit) {
    fclose(f);
    return kn_diag_set(err, KN_E_CORRUPT, "%s is %lld bytes, more than kiln reads (%zu)", path,
                       (long long)st.st_size, limit);
  }
  size_t n = (size_t)st.st_size;
  char *b = malloc(n + 1);
  if (!b) {
    fclose(f);
    return kn_diag_set(err, KN_E_NOMEM, "out of memory reading %s", path);
  }
  size_t got = fread(b, 1, n, f);
  fclose(f);
  if (got != n) {
    free(b);
    return kn_diag_set(err, KN_E_IO, "reading %s: %zu of %zu bytes", path, got, n);
  }
  b[n] = 0;
  *out = b;
  *size = n;
  return KN_OK;
}

kn_status kn_aot_index_read(const char *path, kn_aot_index *out, kn_diag *err) {
  memset(out, 0, sizeof *out);
  if (!path || !*path) return kn_diag_set(err, KN_E_INVALID, "no bundle path");
  struct stat st;
  if (stat(path, &st))
    return kn_diag_set(err, KN_E_IO, "bundle %s: %s", path, strerror(errno));
  char file[4200], dir[4096];
  if (S_ISDIR(st.st_mode)) {
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(file, sizeof file, "%s/%s", path, KN_AOT_INDEX_FILE);
  } else {
    snprintf(file, sizeof file, "%s", path);
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else snprintf(dir, sizeof dir, ".");
  }
  void *t;
  size_t n;
  kn_status s = slurp(file, 64u << 20, &t, &n, err);
  if (s != KN_OK) return s;
  s = kn_aot_index_parse(t, n, file, dir, out, err);
  free(t);
  return s;
}

void kn_aot_index_free(kn_aot_index *ix) {
  if (!ix) return;
  free(ix->e);
  ix->e = NULL;
  ix->n = 0;
}

kn_status kn_aot_file_read(const kn_aot_index *ix, const kn_aot_file *f, void **out,
                           size_t *size, kn_diag *err) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", ix->dir, f->name);
  kn_status s = slurp(path, (size_t)f->bytes + 1, out, size, err);
  if (s == KN_E_CORRUPT || (s == KN_OK && *size != f->bytes)) {
    size_t got = *size;
    free(*out);
    *out = NULL;
    if (s == KN_OK)
      return kn_diag_set(err, KN_E_CORRUPT, "bundle file %s is %zu bytes; the index (%s) says "
                         "%" PRIu64 " (%s)", path, got, ix->path, f->bytes,
                         got < f->bytes ? "truncated" : "grown");
    return kn_diag_set(err, KN_E_CORRUPT, "bundle file %s is larger than the index (%s) says "
                       "(%" PRIu64 " bytes)", path, ix->path, f->bytes);
  }
  if (s != KN_OK) return s;
  if (XXH3_64bits(*out, *size) != f->xxh64) {
    free(*out);
    *out = NULL;
    return kn_diag_set(err, KN_E_CORRUPT, "bundle file %s: checksum mismatch (the index %s says "
                       "%016" PRIx64 "; the file was changed or damaged)", path, ix->path,
                       f->xxh64);
  }
  return KN_OK;
}

kn_status kn_aot_index_append(char **text, size_t *len, const kn_aot_entry *e, kn_diag *err) {
  char line[2048], cub[400] = "";
  if (e->cubin.name[0])
    snprintf(cub, sizeof cub, " cubin=%s cubin_bytes=%" PRIu64 " cubin_xxh64=%016" PRIx64,
             e->cubin.name, e->cubin.bytes, e->cubin.xxh64);
  int n = snprintf(line, sizeof line,
                   "entry name=%s symbol=%s arch=%s desc=%s seqlen=%d-%d block_m=%d block_n=%d "
                   "warps=%d stages=%d mfma=%d wgmma=%d threads=%d shared=%lld tuned=%d grid=%s "
                   "file=%s bytes=%" PRIu64 " xxh64=%016" PRIx64 "%s\n",
                   e->name, e->symbol, e->arch, e->desc, e->seqlen_lo, e->seqlen_hi, e->block_m,
                   e->block_n, e->warps, e->stages, e->mfma, e->wgmma, e->threads,
                   (long long)e->shared, e->tuned, GRID_RULE, e->file.name, e->file.bytes,
                   e->file.xxh64, cub);
  if (n < 0 || (size_t)n >= sizeof line)
    return kn_diag_set(err, KN_E_INVALID, "index entry of %s too long", e->name);
  if (!*text) {
    size_t ml = sizeof KN_AOT_INDEX_MAGIC;
    *text = malloc(ml + 1);
    if (!*text) return kn_diag_set(err, KN_E_NOMEM, "out of memory");
    memcpy(*text, KN_AOT_INDEX_MAGIC "\n", ml + 1);
    *len = ml;
  }
  char *t = realloc(*text, *len + (size_t)n + 1);
  if (!t) return kn_diag_set(err, KN_E_NOMEM, "out of memory");
  memcpy(t + *len, line, (size_t)n + 1);
  *text = t;
  *len += (size_t)n;
  return KN_OK;
}
