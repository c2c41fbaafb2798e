/* golden_runner.c — runs .tile files that carry their own expectations, and fuzzes the text
 * front end with deterministic mutations of them.
 *
 *   golden_runner [--mutate N] PATH...     (PATH: a .tile file, or a directory of them)
 *
 * The expectations are directives in the block of `//` lines at the top of a file:
 *   // RUN: roundtrip
 *       kn_parse + kn_verify succeed and kn_print() reproduces the file after that block (and the
 *       blank lines right after it) byte for byte.
 *   // ERROR: <line>:<col>: <message substring>
 *       kn_parse or kn_verify fails at exactly that line:col of the file, with a message holding
 *       the substring, rendered as "<file>:<line>:<col>: error: ...".
 * Other `//` lines in the block are free comments, but one of the form `// WORD:` with an unknown
 * upper-case WORD is an error, and a file must carry exactly one directive, so that a typo cannot
 * make a file silently test nothing.
 *
 * With --mutate N the expectations are ignored: each file yields N mutants (bit flips, inserted or
 * deleted bytes, truncations, duplicated or deleted lines, swapped tokens, and token swaps that
 * keep the text parseable: other names, numbers, types, op names), seeded by the file's
 * name so failures reproduce; each goes through kn_parse, kn_verify and kn_print, in a malloc'd
 * buffer of exactly its length so that AddressSanitizer sees any read past the end.  A mutant
 * that verifies must also survive print -> parse -> verify -> print unchanged.
 *
 * It assumes only the public IR API (ir.h); it prints to stdout and exits 1 on any failure or when
 * no file was found.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ir.h"

/* ---- small utilities ---- */

typedef struct strlist {
  char **v;
  int n, cap;
} strlist;

static void strlist_push(strlist *l, char *s) {
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 16;
    l->v = realloc(l->v, sizeof *l->v * (size_t)l->cap);
    if (!l->v) {
      fprintf(stderr, "golden_runner: out of memory\n");
      exit(2);
    }
  }
  l->v[l->n++] = s;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *xstrdup(const char *s) {
  char *p = strdup(s);
  if (!p) {
    fprintf(stderr, "golden_runner: out of memory\n");
    exit(2);
  }
  return p;
}

static bool ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && strcmp(s + n - k, suf) == 0;
}

/* file or directory -> sorted list of .tile paths (a directory's files sorted by name) */
static int collect(const char *path, strlist *out) {
  struct stat st;
  if (stat(path, &st) != 0) {
    printf("FAIL %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    strlist_push(out, xstrdup(path));
    return 0;
  }
  DIR *d = opendir(path);
  if (!d) {
    printf("FAIL %s: %s\n", path, strerror(errno));
    return -1;
  }
  strlist here = {0};
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' || !ends_with(e->d_name, ".tile")) continue;
    size_t n = strlen(path) + strlen(e->d_name) + 2;
    char *p = malloc(n);
    if (!p) exit(2);
    snprintf(p, n, "%s/%s", path, e->d_name);
    strlist_push(&here, p);
  }
  closedir(d);
  if (here.n) qsort(here.v, (size_t)here.n, sizeof *here.v, cmp_str);
  for (int i = 0; i < here.n; i++) strlist_push(out, here.v[i]);
  free(here.v);
  return 0;
}

/* whole file into a malloc'd buffer of exactly its size (not NUL-terminated) */
static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += k;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) return NULL;
  char *exact = malloc(n ? n : 1);
  if (exact) memcpy(exact, buf, n);
  free(buf);
  *len = n;
  return exact;
}

/* "dir/name.tile" from a longer path, for short report lines */
static const char *short_name(const char *path) {
  const char *last = strrchr(path, '/');
  if (!last) return path;
  const char *p = last;
  while (p > path && p[-1] != '/') p--;
  return p;
}

/* ---- directives ---- */

typedef struct expect {
  enum { EXP_NONE, EXP_ROUNDTRIP, EXP_ERROR } kind;
  int line, col;
  char msg[512];
  size_t body_off;  /* where the text after the directive block starts */
} expect;

/* reads the leading `//` block; returns NULL or a reason why the directives are unusable */
static const char *read_directives(const char *s, size_t len, expect *e, char *why, size_t nwhy) {
  memset(e, 0, sizeof *e);
  int ndir = 0;
  size_t p = 0;
  while (p + 1 < len && s[p] == '/' && s[p + 1] == '/') {
    size_t eol = p;
    while (eol < len && s[eol] != '\n') eol++;
    char line[700];
    size_t n = eol - (p + 2);
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, s + p + 2, n);
    line[n] = 0;
    char *t = line;
    while (*t == ' ' || *t == '\t') t++;
    /* a directive is an upper-case word followed by ':' */
    size_t w = 0;
    while ((t[w] >= 'A' && t[w] <= 'Z') || t[w] == '_') w++;
    if (w > 0 && t[w] == ':') {
      char *arg = t + w + 1;
      while (*arg == ' ') arg++;
      size_t al = strlen(arg);
      while (al && (arg[al - 1] == ' ' || arg[al - 1] == '\r')) arg[--al] = 0;
      ndir++;
      if (w == 3 && strncmp(t, "RUN", 3) == 0) {
        if (strcmp(arg, "roundtrip") != 0) {
          snprintf(why, nwhy, "unknown RUN mode '%s' (known: roundtrip)", arg);
          return why;
        }
        e->kind = EXP_ROUNDTRIP;
      } else if (w == 5 && strncmp(t, "ERROR", 5) == 0) {
        int used = 0;
        if (sscanf(arg, "%d:%d:%n", &e->line, &e->col, &used) != 2 || used == 0 ||
            e->line < 1 || e->col < 1) {
          snprintf(why, nwhy, "malformed ERROR directive '%s' (want LINE:COL: MESSAGE)", arg);
          return why;
        }
        const char *m = arg + used;
        while (*m == ' ') m++;
        if (!*m) {
          snprintf(why, nwhy, "ERROR directive without a message substring");
          return why;
        }
        snprintf(e->msg, sizeof e->msg, "%s", m);
        e->kind = EXP_ERROR;
      } else {
        snprintf(why, nwhy, "unknown directive '%.*s:'", (int)w, t);
        return why;
      }
    }
    p = eol < len ? eol + 1 : eol;
  }
  while (p < len && (s[p] == '\n' || (s[p] == '\r' && p + 1 < len && s[p + 1] == '\n')))
    p += s[p] == '\r' ? 2 : 1;
  e->body_off = p;
  if (ndir == 0) {
    snprintf(why, nwhy, "no directive (want '// RUN: roundtrip' or '// ERROR: L:C: msg')");
    return why;
  }
  if (ndir > 1) {
    snprintf(why, nwhy, "%d directives; a file tests one thing", ndir);
    return why;
  }
  return NULL;
}

/* ---- one golden file ---- */

static void first_difference(const char *want, size_t wn, const char *got, size_t gn, int line0,
                             char *why, size_t nwhy) {
  size_t i = 0, bol = 0;
  int line = line0;
  while (i < wn && i < gn && want[i] == got[i]) {
    if (want[i] == '\n') {
      line++;
      bol = i + 1;
    }
    i++;
  }
  size_t we = bol, ge = bol;
  while (we < wn && want[we] != '\n') we++;
  while (ge < gn && got[ge] != '\n') ge++;
  snprintf(why, nwhy,
           "printed text differs at line %d:\n    file:    %.*s%s\n    printed: %.*s%s", line,
           (int)(we - bol > 200 ? 200 : we - bol), want + bol, bol >= wn ? "<end of file>" : "",
           (int)(ge - bol > 200 ? 200 : ge - bol), got + bol, bol >= gn ? "<end of output>" : "");
}

/* 0 on pass; else -1 with the reason in why */
static int run_file(const char *path, char *why, size_t nwhy) {
  size_t len = 0;
  char *text = read_file(path, &len);
  if (!text) {
    snprintf(why, nwhy, "cannot read: %s", strerror(errno));
    return -1;
  }
  expect e;
  int rc = -1;
  kn_module *m = NULL;
  kn_diag d;
  memset(&d, 0, sizeof d);
  if (read_directives(text, len, &e, why, nwhy)) goto out;

  m = kn_parse(path, text, len, &d);
  const char *stage = "parse";
  if (m && kn_verify(m, &d) != 0) stage = "verify";
  bool ok = m && strcmp(stage, "parse") == 0;

  if (e.kind == EXP_ROUNDTRIP) {
    if (!ok) {
      snprintf(why, nwhy, "%s failed:\n    %s", stage, d.rendered);
      goto out;
    }
    char *out = kn_print(m);
    if (!out) {
      snprintf(why, nwhy, "kn_print returned NULL");
      goto out;
    }
    const char *want = text + e.body_off;
    size_t wn = len - e.body_off, gn = strlen(out);
    int line0 = 1;
    for (size_t i = 0; i < e.body_off; i++) line0 += text[i] == '\n';
    if (wn == gn && memcmp(want, out, gn) == 0) rc = 0;
    else first_difference(want, wn, out, gn, line0, why, nwhy);
    free(out);
    goto out;
  }

  /* EXP_ERROR */
  if (ok) {
    snprintf(why, nwhy, "expected an error at %d:%d (%s), but the file parsed and verified",
             e.line, e.col, e.msg);
    goto out;
  }
  if (d.loc.line != e.line || d.loc.col != e.col || !strstr(d.message, e.msg)) {
    snprintf(why, nwhy, "expected %d:%d: ...%s...\n    got (%s): %s", e.line, e.col, e.msg,
             stage, d.rendered);
    goto out;
  }
  char prefix[600];
  snprintf(prefix, sizeof prefix, "%s:%d:%d: error: ", path, e.line, e.col);
  if (strncmp(d.rendered, prefix, strlen(prefix)) != 0) {
    snprintf(why, nwhy, "rendered diagnostic does not start with '%s':\n    %s", prefix,
             d.rendered);
    goto out;
  }
  rc = 0;
out:
  kn_module_free(m);
  free(text);
  return rc;
}

/* ---- mutations ---- */

static uint64_t rng_next(uint64_t *s) {  /* splitmix64: tiny, and enough for fuzzing */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static size_t rng_below(uint64_t *s, size_t n) { return n ? (size_t)(rng_next(s) % n) : 0; }

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

typedef struct buf {
  char *p;
  size_t n, cap;
} buf;

static void buf_reserve(buf *b, size_t n) {
  if (n <= b->cap) return;
  while (b->cap < n) b->cap = b->cap ? b->cap * 2 : 256;
  b->p = realloc(b->p, b->cap);
  if (!b->p) exit(2);
}
static void buf_insert(buf *b, size_t at, const char *s, size_t n) {
  buf_reserve(b, b->n + n);
  memmove(b->p + at + n, b->p + at, b->n - at);
  memcpy(b->p + at, s, n);
  b->n += n;
}
static void buf_erase(buf *b, size_t at, size_t n) {
  if (at + n > b->n) n = b->n - at;
  memmove(b->p + at, b->p + at + n, b->n - at - n);
  b->n -= n;
}

/* bytes and fragments a real typo or a hostile file is likely to contain */
static const char interesting_bytes[] = "%@:,=(){}[]<>x0123456789-+.e \n\t/abcif";
static const char *const fragments[] = {
    "99999999999999999999", "-2147483649", "2147483648", "0", "-1", "1e999", "nan", "-inf",
    "tile<", "tile<0xf32>", "tile<1048577xf32>", "ptr<", "%", "@", "{", "}", "(", ")", "[", "]",
    ":", ",", "//", "\"", "\\", "yield", "return", "for %i = %a to %b step %c {", "} else {",
    "if %c {", "kernel @k() {", "func @f() -> (f32) {", "\xff", "\x00", "i1", "f8e4m3fnuz",
};

static void line_bounds(const buf *b, size_t at, size_t *lo, size_t *hi) {
  size_t s = at, e = at;
  while (s > 0 && b->p[s - 1] != '\n') s--;
  while (e < b->n && b->p[e] != '\n') e++;
  *lo = s;
  *hi = e < b->n ? e + 1 : e;
}

static bool is_tok_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '%' || c == '@' || c == '.' || c == '-';
}

/* a token at or after `at`: [*s, *e); false if none */
static bool find_token(const buf *b, size_t at, size_t *s, size_t *e) {
  while (at < b->n && !is_tok_char(b->p[at])) at++;
  if (at >= b->n) return false;
  *s = at;
  while (at < b->n && is_tok_char(b->p[at])) at++;
  *e = at;
  return true;
}

static const char *const scalar_words[] = {"i1", "i32", "i64", "f16", "bf16", "f32", "f8e4m3",
                                            "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz"};
static const char *const small_numbers[] = {"0", "1", "2", "3", "16", "32", "64", "128"};

static void replace_span(buf *b, size_t s, size_t e, const char *with, size_t n) {
  buf_erase(b, s, e - s);
  buf_insert(b, s, with, n);
}

/* a change that still lexes and mostly still parses, so that the verifier gets exercised: another
 * value name, another number or tile dimension, another element type, another op name */
static void mutate_semantic(buf *b, uint64_t *rng) {
  size_t s, e;
  if (!find_token(b, rng_below(rng, b->n + 1), &s, &e)) return;
  char tok[64];
  size_t n = e - s < sizeof tok - 1 ? e - s : sizeof tok - 1;
  memcpy(tok, b->p + s, n);
  tok[n] = 0;
  if (tok[0] == '%') {  /* another value name from the file */
    size_t s2, e2, from = rng_below(rng, b->n + 1);
    while (from < b->n && b->p[from] != '%') from++;
    if (from >= b->n || !find_token(b, from, &s2, &e2) || e2 - s2 >= sizeof tok) return;
    char other[64];
    memcpy(other, b->p + s2, e2 - s2);
    replace_span(b, s, e, other, e2 - s2);
  } else if (tok[0] >= '0' && tok[0] <= '9') {  /* a number, or the first dim of a tile shape */
    size_t d = 0;
    while (d < n && tok[d] >= '0' && tok[d] <= '9') d++;
    const char *num = small_numbers[rng_below(rng, sizeof small_numbers / sizeof *small_numbers)];
    replace_span(b, s, s + d, num, strlen(num));
  } else {
    for (size_t i = 0; i < sizeof scalar_words / sizeof *scalar_words; i++)
      if (strcmp(tok, scalar_words[i]) == 0) {
        const char *w = scalar_words[rng_below(rng, sizeof scalar_words / sizeof *scalar_words)];
        replace_span(b, s, e, w, strlen(w));
        return;
      }
    if (kn_opcode_from_name(tok, n) >= 0) {
      const char *w = kn_opinfo_table[rng_below(rng, KN_OP_COUNT)].name;
      replace_span(b, s, e, w, strlen(w));
    }
  }
}

static void mutate_once(buf *b, uint64_t *rng) {
  size_t at = rng_below(rng, b->n + 1);
  switch (rng_below(rng, 14)) {
  case 10: case 11: case 12: case 13:
    mutate_semantic(b, rng);
    break;
  case 0:  /* flip one bit */
    if (b->n) b->p[rng_below(rng, b->n)] ^= (char)(1u << rng_below(rng, 8));
    break;
  case 1:  /* replace a byte */
    if (b->n) {
      size_t i = rng_below(rng, b->n);
      b->p[i] = rng_below(rng, 4) == 0 ? (char)rng_below(rng, 256)
                                       : interesting_bytes[rng_below(rng, sizeof interesting_bytes - 1)];
    }
    break;
  case 2: {  /* insert a byte or a fragment */
    if (rng_below(rng, 2)) {
      char c = interesting_bytes[rng_below(rng, sizeof interesting_bytes - 1)];
      buf_insert(b, at, &c, 1);
    } else {
      size_t k = rng_below(rng, sizeof fragments / sizeof *fragments);
      size_t n = fragments[k][0] ? strlen(fragments[k]) : 1;  /* "\x00": one NUL byte */
      buf_insert(b, at, fragments[k], n);
    }
    break;
  }
  case 3:  /* delete a short span */
    if (at < b->n) buf_erase(b, at, 1 + rng_below(rng, 8));
    break;
  case 4:  /* truncate */
    b->n = at;
    break;
  case 5: {  /* duplicate a line */
    if (!b->n) break;
    size_t lo, hi;
    line_bounds(b, rng_below(rng, b->n), &lo, &hi);
    size_t n = hi - lo;
    char *copy = malloc(n ? n : 1);
    if (!copy) exit(2);
    memcpy(copy, b->p + lo, n);
    buf_insert(b, hi, copy, n);
    free(copy);
    break;
  }
  case 6: {  /* delete a line */
    if (!b->n) break;
    size_t lo, hi;
    line_bounds(b, rng_below(rng, b->n), &lo, &hi);
    buf_erase(b, lo, hi - lo);
    break;
  }
  case 7: {  /* swap two tokens */
    size_t s1, e1, s2, e2;
    if (!find_token(b, rng_below(rng, b->n + 1), &s1, &e1)) break;
    if (!find_token(b, e1 + rng_below(rng, 200), &s2, &e2)) break;
    size_t n1 = e1 - s1, n2 = e2 - s2;
    char *t1 = malloc(n1 + 1), *t2 = malloc(n2 + 1);
    if (!t1 || !t2) exit(2);
    memcpy(t1, b->p + s1, n1);
    memcpy(t2, b->p + s2, n2);
    buf_erase(b, s2, n2);  /* the later one first, so s1 stays valid */
    buf_insert(b, s2, t1, n1);
    buf_erase(b, s1, n1);
    buf_insert(b, s1, t2, n2);
    free(t1);
    free(t2);
    break;
  }
  case 8: {  /* replace a token with a fragment (a huge number, a keyword, ...) */
    size_t s, e;
    if (!find_token(b, at, &s, &e)) break;
    size_t k = rng_below(rng, 8);  /* the numeric fragments */
    buf_erase(b, s, e - s);
    buf_insert(b, s, fragments[k], strlen(fragments[k]));
    break;
  }
  default: {  /* copy a span elsewhere */
    if (!b->n) break;
    size_t s = rng_below(rng, b->n), n = 1 + rng_below(rng, 40);
    if (s + n > b->n) n = b->n - s;
    char *copy = malloc(n);
    if (!copy) exit(2);
    memcpy(copy, b->p + s, n);
    buf_insert(b, rng_below(rng, b->n + 1), copy, n);
    free(copy);
    break;
  }
  }
}

typedef struct mstats {
  long mutants, parse_err, verify_err, verified, reprint_fail;
} mstats;

/* parse + verify + print of one mutant; returns -1 only when a verified module's printed text
 * does not read back to itself (a real front-end bug: the printer and parser disagree) */
static int run_mutant(const char *name, const char *p, size_t n, mstats *st, char *why,
                      size_t nwhy) {
  char *exact = malloc(n ? n : 1);  /* exactly n bytes, so ASan flags any over-read */
  if (!exact) exit(2);
  memcpy(exact, p, n);
  kn_diag d;
  int rc = 0;
  st->mutants++;
  kn_module *m = kn_parse(name, exact, n, &d);
  if (!m) {
    st->parse_err++;
  } else if (kn_verify(m, &d) != 0) {
    st->verify_err++;
  } else {
    st->verified++;
    char *out = kn_print(m);
    if (!out) {
      snprintf(why, nwhy, "kn_print returned NULL for a verified mutant");
      rc = -1;
    } else {
      size_t on = strlen(out);
      char *again = malloc(on ? on : 1);
      if (!again) exit(2);
      memcpy(again, out, on);
      kn_module *m2 = kn_parse(name, again, on, &d);
      if (!m2 || kn_verify(m2, &d) != 0) {
        snprintf(why, nwhy, "printed form of a verified mutant does not read back: %s",
                 d.rendered);
        rc = -1;
      } else {
        char *out2 = kn_print(m2);
        if (!out2 || strcmp(out, out2) != 0) {
          snprintf(why, nwhy, "print(parse(print(m))) != print(m)");
          rc = -1;
        }
        free(out2);
      }
      kn_module_free(m2);
      free(again);
      free(out);
    }
    if (rc) st->reprint_fail++;
  }
  kn_module_free(m);
  free(exact);
  return rc;
}

static int mutate_file(const char *path, int count, mstats *st, char *why, size_t nwhy) {
  size_t len = 0;
  char *text = read_file(path, &len);
  if (!text) {
    snprintf(why, nwhy, "cannot read: %s", strerror(errno));
    return -1;
  }
  const char *name = short_name(path);
  uint64_t seed = fnv1a(name);  /* the short name, so every checkout gets the same mutants */
  buf b = {0};
  int rc = 0;
  for (int i = 0; i < count && rc == 0; i++) {
    uint64_t rng = seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
    b.n = 0;
    buf_reserve(&b, len + 1);
    memcpy(b.p, text, len);
    b.n = len;
    int nmut = 1 + (int)rng_below(&rng, 3);
    for (int k = 0; k < nmut; k++) mutate_once(&b, &rng);
    if (run_mutant(path, b.p, b.n, st, why, nwhy)) {
      size_t w = strlen(why);
      snprintf(why + w, nwhy - w, " (mutant %d)", i);
      rc = -1;
    }
  }
  free(b.p);
  free(text);
  return rc;
}

/* ---- main ---- */

int main(int argc, char **argv) {
  int mutate = -1;
  strlist files = {0};
  int failed = 0, passed = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--mutate") == 0 && i + 1 < argc) {
      mutate = atoi(argv[++i]);
      if (mutate < 1) {
        fprintf(stderr, "golden_runner: --mutate needs a positive count\n");
        return 2;
      }
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: golden_runner [--mutate N] PATH...\n");
      return 2;
    } else if (collect(argv[i], &files) != 0) {
      failed++;
    }
  }
  static char why[4096];
  mstats st = {0};
  for (int i = 0; i < files.n; i++) {
    const char *name = short_name(files.v[i]);
    int rc = mutate > 0 ? mutate_file(files.v[i], mutate, &st, why, sizeof why)
                        : run_file(files.v[i], why, sizeof why);
    if (rc == 0) {
      passed++;
      printf("PASS %s\n", name);
    } else {
      failed++;
      printf("FAIL %s: %s\n", name, why);
    }
    fflush(stdout);
  }
  if (mutate > 0)
    printf("mutate: %ld mutants, %ld parse errors, %ld verify errors, %ld verified, "
           "%ld reprint failures\n", st.mutants, st.parse_err, st.verify_err, st.verified,
           st.reprint_fail);
  printf("golden: %d files, %d passed, %d failed\n", files.n, passed, failed);
  if (files.n == 0) printf("golden: no .tile files found\n");
  for (int i = 0; i < files.n; i++) free(files.v[i]);
  free(files.v);
  return failed || files.n == 0 ? 1 : 0;
}
