/* golden_runner.c — runs .tile files that carry their own expectations (round trip, expected
 * error, and launches compared between the interpreter and the host target), and fuzzes the text
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
 *   // LAUNCH: @kernel grid=G0[,G1[,G2]] name=VALUE ... [tol=ulp1]
 *       (RUN files only, any number of them, one launch each; every kernel of a RUN file needs at
 *       least one, so that a new kernel cannot go unexecuted.)  Runs @kernel over the grid (every
 *       G >= 1, missing ones are 1) with a value for every parameter, given by name:
 *         pointer parameter: a fresh buffer of N elements of the pointee type, N >= 1:
 *           rand:N          random: floats uniform in [-4, 4] rounded to the type, ints uniform
 *                           in [-1000, 1000] (wrapped to the type), i1 0 or 1
 *           rand:N:LO:HI    the same in [LO, HI] (ints: whole numbers, both ends included)
 *           mixed:N         floats: a mix of small values, values up to 1e5 (overflowing f16 and
 *                           the fp8 formats), +-0, +-inf and NaN; ints: mostly [-1000, 1000],
 *                           a quarter any 64-bit pattern (wrapped); i1 0 or 1
 *           zero:N          zeros
 *           iota:N          0, 1, 2, ... converted to the element type (rounded or wrapped)
 *         scalar parameter: a literal: an integer for i32/i64 (it must fit), 0 or 1 for i1, a C
 *           float literal (also inf, -inf, nan) for float types (rounded to the type on entry).
 *       Each buffer is a region of its own of exactly N elements, so a kernel that touches a
 *       live element outside it fails with the interpreter's out-of-bounds error: the sizes must
 *       cover what the kernel reads and writes.  The buffers are filled from one random stream
 *       per file, seeded from the file's name (the same on every checkout) or by the environment
 *       KILN_TEST_SEED (decimal or 0x hex); the seed is printed with every launch failure, and
 *       KILN_TEST_SEED=<that seed> golden_runner <that file> repeats it.
 *       The launch runs on the interpreter (kn_interp_run, every buffer registered as a region; a
 *       runtime error fails the file).  When the runner is built with KN_GOLDEN_HOST (linked with
 *       kiln_compiler and kiln_runtime), the kernel is also compiled for kn_host_target() twice:
 *       checked (check_bounds, run by kn_kernel_run_host_checked against exactly its buffers, so
 *       host code that strays outside them fails the file naming the access) and then unchecked
 *       (kn_kernel_run_host, the code that runs in production), each on a copy of the same
 *       inputs, and every element of every buffer of each is compared with the interpreter's:
 *       bit for bit, except that any NaN equals any NaN.  tol=ulp1 (or ulpN) lets a
 *       float element differ by that many steps of its format; it is accepted only for kernels
 *       that use (also through calls) an op that ops.def does not call exact or reassociating
 *       (exp, exp2, log, log2, tanh, rsqrt), and it never
 *       excuses a different sign of zero, an inf against a finite value, or an integer.
 *       A LAUNCH line ending in '\' continues on the next `//` line.  The keys grid and tol are
 *       not parameter names (a kernel with a parameter of that name cannot be launched here).
 * Other `//` lines in the block are free comments, but one of the form `// WORD:` with an unknown
 * upper-case WORD is an error, and a file must carry exactly one RUN or ERROR directive, so that
 * a typo cannot make a file silently test nothing.
 *
 * A passing file prints "PASS name", with "(interp+host, N elements compared)" when it has
 * launches (host builds; ", M within tol" added when M elements differed by at most tol;
 * "(interp, K launches)" in builds without KN_GOLDEN_HOST); the summary line counts launches.
 * A failing launch prints its line, the kernel, the seed, and the first differing elements of
 * each buffer that differs (index, both values and their bits).
 *
 * With --mutate N the expectations are ignored: each file yields N mutants (bit flips, inserted or
 * deleted bytes, truncations, duplicated or deleted lines, swapped tokens, and token swaps that
 * keep the text parseable: other names, numbers, types, op names), seeded by the file's
 * name so failures reproduce; each goes through kn_parse, kn_verify and kn_print, in a malloc'd
 * buffer of exactly its length so that AddressSanitizer sees any read past the end.  A mutant
 * that verifies must also survive print -> parse -> verify -> print unchanged.
 *
 * It uses the public IR API (ir.h, numeric.h, interp.h) and, with KN_GOLDEN_HOST, pipeline.h;
 * it prints to stdout and exits 1 on any failure or when no file was found.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "interp.h"
#include "ir.h"
#include "numeric.h"
#ifdef KN_GOLDEN_HOST
#include "pipeline.h"
#endif

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

static uint64_t rng_next(uint64_t *s) {  /* splitmix64: tiny, and enough for fuzzing and fills */
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

/* appends to a fixed-size message (silently cut at its end) */
static void append(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void append(char *out, size_t n, const char *fmt, ...) {
  size_t used = strlen(out);
  if (used + 1 >= n) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out + used, n - used, fmt, ap);
  va_end(ap);
}

/* ---- directives ---- */

#define MAX_LAUNCHES 32

typedef struct launch_text {
  int line;         /* line of the `// LAUNCH:` directive */
  char text[2048];  /* what follows "LAUNCH:", continuation lines joined with a space */
} launch_text;

typedef struct expect {
  enum { EXP_NONE, EXP_ROUNDTRIP, EXP_ERROR } kind;
  int line, col;
  char msg[512];
  size_t body_off;  /* where the text after the directive block starts */
  int nlaunch;
  launch_text launch[MAX_LAUNCHES];
} expect;

/* reads the leading `//` block; returns NULL or a reason why the directives are unusable */
static const char *read_directives(const char *s, size_t len, expect *e, char *why, size_t nwhy) {
  memset(e, 0, sizeof *e);
  int ndir = 0, lineno = 0;
  launch_text *cont = NULL;  /* a LAUNCH whose line ended in '\' */
  size_t p = 0;
  while (p + 1 < len && s[p] == '/' && s[p + 1] == '/') {
    lineno++;
    size_t eol = p;
    while (eol < len && s[eol] != '\n') eol++;
    char line[2048];
    size_t n = eol - (p + 2);
    if (n >= sizeof line) {  /* refuse rather than cut a LAUNCH line silently */
      snprintf(why, nwhy, "line %d: a line of the directive block is longer than %zu bytes",
               lineno, sizeof line - 1);
      return why;
    }
    memcpy(line, s + p + 2, n);
    line[n] = 0;
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r')) line[--n] = 0;
    char *t = line;
    while (*t == ' ' || *t == '\t') t++;
    p = eol < len ? eol + 1 : eol;
    if (cont) {  /* the rest of a LAUNCH line */
      size_t tl = strlen(t);
      bool more = tl && t[tl - 1] == '\\';
      if (more) t[--tl] = 0;
      if (strlen(cont->text) + 1 + tl >= sizeof cont->text) {
        snprintf(why, nwhy, "line %d: LAUNCH too long", cont->line);
        return why;
      }
      append(cont->text, sizeof cont->text, " %s", t);
      if (!more) cont = NULL;
      continue;
    }
    /* a directive is an upper-case word followed by ':' */
    size_t w = 0;
    while ((t[w] >= 'A' && t[w] <= 'Z') || t[w] == '_') w++;
    if (w == 0 || t[w] != ':') continue;
    char *arg = t + w + 1;
    while (*arg == ' ') arg++;
    if (w == 6 && strncmp(t, "LAUNCH", 6) == 0) {
      /* not counted as the file's directive: a RUN file may carry any number of launches */
      if (e->nlaunch == MAX_LAUNCHES) {
        snprintf(why, nwhy, "line %d: more than %d LAUNCH lines", lineno, MAX_LAUNCHES);
        return why;
      }
      launch_text *l = &e->launch[e->nlaunch++];
      l->line = lineno;
      size_t al = strlen(arg);
      if (al && arg[al - 1] == '\\') {
        arg[--al] = 0;
        cont = l;
      }
      snprintf(l->text, sizeof l->text, "%s", arg);
      continue;
    }
    ndir++;
    if (w == 3 && strncmp(t, "RUN", 3) == 0) {
      if (strcmp(arg, "roundtrip") != 0) {
        snprintf(why, nwhy, "unknown RUN mode '%s' (known: roundtrip)", arg);
        return why;
      }
      e->kind = EXP_ROUNDTRIP;
    } else if (w == 5 && strncmp(t, "ERROR", 5) == 0) {
      int used = 0;
      if (sscanf(arg, "%d:%d:%n", &e->line, &e->col, &used) != 2 || used == 0 || e->line < 1 ||
          e->col < 1) {
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
  if (cont) {
    snprintf(why, nwhy, "line %d: LAUNCH continued ('\\') past the end of the directive block",
             cont->line);
    return why;
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
  if (e->nlaunch && e->kind != EXP_ROUNDTRIP) {
    snprintf(why, nwhy, "line %d: LAUNCH in a file without '// RUN: roundtrip' (nothing to run)",
             e->launch[0].line);
    return why;
  }
  return NULL;
}

/* ---- launches: parsing a LAUNCH line against the module ---- */

typedef enum src_kind { SRC_RAND, SRC_MIXED, SRC_ZERO, SRC_IOTA } src_kind;

typedef struct argspec {
  bool set;
  /* pointer parameters: the buffer */
  src_kind src;
  int64_t n;
  double lo, hi;  /* SRC_RAND: the range (ints: whole numbers, inclusive) */
  /* scalar parameters */
  kn_argval val;
} argspec;

typedef struct launch {
  int line;
  kn_func *k;
  int grid[3];
  int ulps;       /* tol=ulpN; 0: bit for bit */
  argspec *arg;   /* one per kernel parameter */
} launch;

#define MAX_BUFFER_ELEMS ((int64_t)1 << 26)

static bool parse_i64(const char *s, int64_t *out) {
  if (!*s) return false;
  errno = 0;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

static bool parse_f64(const char *s, double *out) {
  if (!*s) return false;
  char *end;
  double v = strtod(s, &end);
  if (*end) return false;
  *out = v;
  return true;
}

/* "rand:N", "rand:N:LO:HI", "mixed:N", "zero:N", "iota:N" for a buffer of element type t */
static int parse_source(const char *v, kn_scalar t, argspec *a, char *msg, size_t nmsg) {
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s", v);
  char *part[5];
  int np = 0;
  for (char *q = tmp; np < 5;) {
    part[np++] = q;
    char *c = strchr(q, ':');
    if (!c) break;
    *c = 0;
    q = c + 1;
  }
  static const char *const kinds[] = {"rand", "mixed", "zero", "iota"};
  int kind = -1;
  for (int i = 0; i < 4; i++)
    if (strcmp(part[0], kinds[i]) == 0) kind = i;
  if (kind < 0 || np < 2) {
    snprintf(msg, nmsg, "'%s' is not a buffer (want rand:N, rand:N:LO:HI, mixed:N, zero:N or "
             "iota:N)", v);
    return -1;
  }
  a->src = (src_kind)kind;
  if (!parse_i64(part[1], &a->n) || a->n < 1 || a->n > MAX_BUFFER_ELEMS) {
    snprintf(msg, nmsg, "'%s': N must be a whole number in [1, %lld]", v,
             (long long)MAX_BUFFER_ELEMS);
    return -1;
  }
  /* the default ranges of rand */
  if (kn_scalar_is_float(t)) a->lo = -4, a->hi = 4;
  else if (t == KN_I1) a->lo = 0, a->hi = 1;
  else a->lo = -1000, a->hi = 1000;
  if (np == 2) return 0;
  if (np != 4 || kind != SRC_RAND) {
    snprintf(msg, nmsg, "'%s': only rand takes a range, as rand:N:LO:HI", v);
    return -1;
  }
  if (!parse_f64(part[2], &a->lo) || !parse_f64(part[3], &a->hi) || !(a->lo <= a->hi) ||
      !isfinite(a->lo) || !isfinite(a->hi)) {
    snprintf(msg, nmsg, "'%s': want finite LO <= HI", v);
    return -1;
  }
  /* whole numbers within 2^53, so that hi - lo + 1 is exact in the int fill */
  if (!kn_scalar_is_float(t) && (a->lo != floor(a->lo) || a->hi != floor(a->hi) ||
                                 fabs(a->lo) > 0x1p53 || fabs(a->hi) > 0x1p53)) {
    snprintf(msg, nmsg, "'%s': an integer buffer needs whole LO and HI within 2^53", v);
    return -1;
  }
  return 0;
}

static int parse_scalar(const char *v, kn_scalar t, kn_argval *out, char *msg, size_t nmsg) {
  if (kn_scalar_is_float(t)) {
    if (parse_f64(v, &out->f)) return 0;
    snprintf(msg, nmsg, "'%s' is not a float literal", v);
    return -1;
  }
  int64_t x;
  bool ok = parse_i64(v, &x);
  if (ok && t == KN_I1) ok = x == 0 || x == 1;
  if (ok && t == KN_I32) ok = x >= INT32_MIN && x <= INT32_MAX;
  if (ok) {
    out->i = x;
    return 0;
  }
  snprintf(msg, nmsg, "'%s' is not a literal of type %s", v, kn_scalar_name(t));
  return -1;
}

/* an op anywhere in b, its regions or its callees whose results a target may compute within
 * ulps of the interpreter's (exactness KN_ULP or KN_APPROX in ops.def: exp, exp2, log, log2,
 * rsqrt, tanh) */
static bool uses_transcendental(const kn_block *b) {
  for (const kn_op *op = b->first; op; op = op->next) {
    if (kn_opinfo_table[op->opc].exact >= KN_ULP) return true;
    for (int r = 0; r < op->nregion; r++)
      if (uses_transcendental(op->region[r])) return true;
    if (op->opc == KN_OP_CALL && op->callee && uses_transcendental(op->callee->body)) return true;
  }
  return false;
}

/* resolves one LAUNCH line against the (verified) module; 0, or -1 with msg */
static int parse_launch(kn_module *m, const launch_text *lt, launch *L, char *msg, size_t nmsg) {
  memset(L, 0, sizeof *L);
  L->line = lt->line;
  char text[sizeof lt->text];
  snprintf(text, sizeof text, "%s", lt->text);
  char *save = NULL;
  char *tok = strtok_r(text, " \t", &save);
  if (!tok || tok[0] != '@') {
    snprintf(msg, nmsg, "want '@kernel grid=... name=value ...'");
    return -1;
  }
  L->k = kn_module_find(m, tok + 1);
  if (!L->k || !L->k->is_kernel) {
    snprintf(msg, nmsg, "the file has no kernel %s", tok);
    return -1;
  }
  kn_func *k = L->k;
  int np = kn_func_nparams(k);
  for (int i = 0; i < np; i++) {
    const char *pn = kn_func_param(k, i)->name;
    if (pn && (strcmp(pn, "grid") == 0 || strcmp(pn, "tol") == 0)) {
      snprintf(msg, nmsg, "parameter %%%s of @%s has the name of a LAUNCH key", pn, k->name);
      return -1;
    }
  }
  L->arg = calloc((size_t)(np ? np : 1), sizeof *L->arg);
  if (!L->arg) exit(2);
  bool have_grid = false;
  while ((tok = strtok_r(NULL, " \t", &save))) {
    char *eq = strchr(tok, '=');
    if (!eq || eq == tok || !eq[1]) {
      snprintf(msg, nmsg, "'%s' is not name=value", tok);
      return -1;
    }
    *eq = 0;
    const char *key = tok, *val = eq + 1;
    if (strcmp(key, "grid") == 0) {
      int g[3] = {1, 1, 1}, ng = 0;
      char gbuf[128];
      snprintf(gbuf, sizeof gbuf, "%s", val);
      char *gs = NULL;
      for (char *c = strtok_r(gbuf, ",", &gs); c; c = strtok_r(NULL, ",", &gs)) {
        int64_t x;
        if (ng == 3 || !parse_i64(c, &x) || x < 1 || x > 1 << 20) {
          snprintf(msg, nmsg, "grid=%s: want 1 to 3 numbers in [1, 2^20], e.g. grid=4,2,1", val);
          return -1;
        }
        g[ng++] = (int)x;
      }
      if (ng == 0) {
        snprintf(msg, nmsg, "grid= is empty");
        return -1;
      }
      memcpy(L->grid, g, sizeof g);
      have_grid = true;
    } else if (strcmp(key, "tol") == 0) {
      int64_t u = -1;
      if (strcmp(val, "exact") == 0) u = 0;
      else if (strncmp(val, "ulp", 3) != 0 || !parse_i64(val + 3, &u) || u < 0 || u > 1000)
        u = -1;
      if (u < 0) {
        snprintf(msg, nmsg, "tol=%s: want tol=exact or tol=ulpN (e.g. ulp1)", val);
        return -1;
      }
      L->ulps = (int)u;
    } else {
      int i = 0;
      while (i < np && !(kn_func_param(k, i)->name && strcmp(kn_func_param(k, i)->name, key) == 0))
        i++;
      if (i == np) {
        snprintf(msg, nmsg, "@%s has no parameter %%%s", k->name, key);
        return -1;
      }
      argspec *a = &L->arg[i];
      if (a->set) {
        snprintf(msg, nmsg, "%%%s is given twice", key);
        return -1;
      }
      a->set = true;
      kn_type ty = kn_func_param(k, i)->type;
      char sub[300];
      int rc = ty.kind == KN_TY_PTR ? parse_source(val, (kn_scalar)ty.elem, a, sub, sizeof sub)
                                    : parse_scalar(val, (kn_scalar)ty.elem, &a->val, sub, sizeof sub);
      if (rc) {
        snprintf(msg, nmsg, "%%%s: %s", key, sub);
        return -1;
      }
    }
  }
  if (!have_grid) {
    snprintf(msg, nmsg, "no grid= (e.g. grid=1,1,1)");
    return -1;
  }
  for (int i = 0; i < np; i++)
    if (!L->arg[i].set) {
      char ty[64];
      kn_ty_format(kn_func_param(k, i)->type, ty, sizeof ty);
      snprintf(msg, nmsg, "no value for %%%s: %s", kn_func_param(k, i)->name, ty);
      return -1;
    }
  if (L->ulps > 0 && !uses_transcendental(k->body)) {
    snprintf(msg, nmsg, "tol=ulp%d, but @%s uses none of exp, exp2, log, log2, tanh, rsqrt, sqrt: "
             "its results must match bit for bit", L->ulps, k->name);
    return -1;
  }
  return 0;
}

/* ---- launches: buffers, the two runs, the comparison ---- */

static double urand(uint64_t *rng, double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next(rng) >> 11) * 0x1p-53;
}

static void fill_buffer(const argspec *a, kn_scalar t, void *mem, uint64_t *rng) {
  size_t es = kn_scalar_size(t);
  bool fl = kn_scalar_is_float(t);
  for (int64_t i = 0; i < a->n; i++) {
    char *p = (char *)mem + (size_t)i * es;
    switch (a->src) {
    case SRC_ZERO:
      memset(p, 0, es);
      break;
    case SRC_IOTA:
      kn_store_elem_i(t, p, i);  /* floats: rounded once */
      break;
    case SRC_RAND:
      if (fl) {
        kn_store_elem(t, p, urand(rng, a->lo, a->hi));
      } else {
        uint64_t span = (uint64_t)((int64_t)a->hi - (int64_t)a->lo) + 1;
        kn_store_elem_i(t, p, (int64_t)a->lo + (int64_t)(rng_next(rng) % span));
      }
      break;
    case SRC_MIXED:
      if (fl) {
        /* the special values of every format, and magnitudes that overflow f16 and fp8 */
        int r = (int)(rng_next(rng) % 16);
        double x = r < 5 ? urand(rng, -2, 2) : r < 9 ? urand(rng, -600, 600)
                 : r < 12 ? urand(rng, -1e5, 1e5) : r == 12 ? 0.0 : r == 13 ? -0.0
                 : r == 14 ? (rng_next(rng) & 1 ? INFINITY : -INFINITY) : NAN;
        kn_store_elem(t, p, x);
      } else if (t == KN_I1) {
        kn_store_elem_i(t, p, (int64_t)(rng_next(rng) & 1));
      } else {
        int64_t x = (rng_next(rng) & 3) ? (int64_t)(rng_next(rng) % 2001) - 1000
                                        : (int64_t)rng_next(rng);
        kn_store_elem_i(t, p, x);
      }
      break;
    }
  }
}

#ifdef KN_GOLDEN_HOST
static uint64_t raw_bits(const void *p, size_t es) {
  uint64_t r = 0;
  memcpy(&r, p, es);  /* little-endian host: the low es bytes */
  return r;
}

/* 0: the same bits, or both NaN; 1: different but within ulps steps of the format; -1: differs.
 * Every float format here is sign-magnitude with magnitudes ordered like their bit patterns, so
 * the distance in steps is the difference of the magnitudes (or their sum across zero). */
static int compare_elem(kn_scalar t, const void *h, const void *i, int ulps) {
  size_t es = kn_scalar_size(t);
  if (memcmp(h, i, es) == 0) return 0;
  if (!kn_scalar_is_float(t)) return -1;
  double x = kn_load_elem(t, h), y = kn_load_elem(t, i);
  if (isnan(x) && isnan(y)) return 0;
  if (ulps == 0 || isnan(x) || isnan(y) || isinf(x) || isinf(y)) return -1;
  if (x == 0 && y == 0) return -1;  /* +0 against -0: a sign error, not a rounding one */
  uint64_t a = raw_bits(h, es), b = raw_bits(i, es), sbit = 1ull << (8 * es - 1);
  uint64_t ma = a & (sbit - 1), mb = b & (sbit - 1);
  uint64_t steps = ((a ^ b) & sbit) ? ma + mb : ma > mb ? ma - mb : mb - ma;
  return steps <= (uint64_t)ulps ? 1 : -1;
}

static void describe_elem(kn_scalar t, const void *p, char *out, size_t n) {
  size_t es = kn_scalar_size(t);
  if (kn_scalar_is_float(t))
    snprintf(out, n, "%.9g (0x%0*llx)", kn_load_elem(t, p), (int)(2 * es),
             (unsigned long long)raw_bits(p, es));
  else
    snprintf(out, n, "%lld", (long long)kn_load_elem_i(t, p));
}

/* the host compiles of each kernel of a file (checked, unchecked), made once for all its
 * launches */
typedef struct host_cache {
  int n;
  kn_func *k[MAX_LAUNCHES];
  kn_kernel *kk[MAX_LAUNCHES][2];
} host_cache;

static kn_kernel *host_kernel(host_cache *c, kn_func *k, bool checked, kn_diag *d) {
  int i = 0;
  while (i < c->n && c->k[i] != k) i++;
  if (i == c->n) {
    c->k[c->n++] = k;
    c->kk[i][0] = c->kk[i][1] = NULL;
  }
  kn_kernel **kk = &c->kk[i][checked ? 0 : 1];
  kn_compile_options o = {.check_bounds = checked};
  if (!*kk && kn_compile(k->module, k->name, kn_host_target(), &o, kk, d) != 0) return NULL;
  return *kk;
}

static void host_cache_free(host_cache *c) {
  for (int i = 0; i < c->n; i++) {
    kn_kernel_free(c->kk[i][0]);
    kn_kernel_free(c->kk[i][1]);
  }
  c->n = 0;
}
#else
typedef struct host_cache {
  int n;
} host_cache;
static void host_cache_free(host_cache *c) { (void)c; }
#endif

typedef struct file_stats {
  int launches;      /* launches run (also a failing one) */
  int64_t compared;  /* buffer elements compared between host and interpreter (both host runs) */
  int64_t inexact;   /* of those, different but within tol */
} file_stats;

#ifdef KN_GOLDEN_HOST
/* one host run of launch L (checked or not) on a copy of the inputs `in`, compared with the
 * interpreter's buffers bi; 0, or -1 with why */
static int host_launch(const launch *L, host_cache *hc, bool checked, void *const *in,
                       void *const *bi, kn_argval *args, file_stats *fs, char *why, size_t nwhy) {
  kn_func *k = L->k;
  int np = kn_func_nparams(k);
  const char *how = checked ? "checked" : "unchecked";
  kn_diag d;
  memset(&d, 0, sizeof d);
  kn_kernel *kk = host_kernel(hc, k, checked, &d);
  if (!kk) {
    append(why, nwhy, "host compile (%s): %s", how, d.rendered[0] ? d.rendered : d.message);
    return -1;
  }
  size_t cnt = (size_t)(np ? np : 1);
  void **bh = calloc(cnt, sizeof *bh);
  kn_region *reg = calloc(cnt, sizeof *reg);
  if (!bh || !reg) exit(2);
  int nreg = 0;
  for (int i = 0; i < np; i++) {
    if (!in[i]) continue;
    size_t bytes = (size_t)L->arg[i].n * kn_scalar_size((kn_scalar)kn_func_param(k, i)->type.elem);
    if (!(bh[i] = malloc(bytes))) exit(2);
    memcpy(bh[i], in[i], bytes);
    args[i].p = bh[i];
    reg[nreg++] = (kn_region){bh[i], bytes};
  }
  bool same = true;
  int hrc = checked ? kn_kernel_run_host_checked(kk, args, L->grid, reg, nreg, &d)
                    : kn_kernel_run_host(kk, args, L->grid, &d);
  if (hrc != 0) {
    append(why, nwhy, "host run (%s): %s (the interpreter ran without error)", how,
           d.rendered[0] ? d.rendered : d.message);
    same = false;
  }
  for (int i = 0; i < np && hrc == 0; i++) {
    if (!bh[i]) continue;
    kn_scalar t = (kn_scalar)kn_func_param(k, i)->type.elem;
    size_t es = kn_scalar_size(t);
    int64_t ndiff = 0, first[4];
    for (int64_t e = 0; e < L->arg[i].n; e++) {
      int c = compare_elem(t, (char *)bh[i] + (size_t)e * es, (char *)bi[i] + (size_t)e * es,
                           L->ulps);
      if (c > 0) fs->inexact++;
      if (c < 0 && ndiff++ < 4) first[ndiff - 1] = e;
    }
    fs->compared += L->arg[i].n;
    if (!ndiff) continue;
    same = false;
    append(why, nwhy, "%shost (%s) and interpreter differ in %lld of %lld elements of %%%s (%s%s)",
           why[0] ? "\n    " : "", how, (long long)ndiff, (long long)L->arg[i].n,
           kn_func_param(k, i)->name, kn_scalar_name(t), L->ulps ? ", beyond tol" : "");
    for (int j = 0; j < 4 && j < ndiff; j++) {
      char hs[96], is[96];
      describe_elem(t, (char *)bh[i] + (size_t)first[j] * es, hs, sizeof hs);
      describe_elem(t, (char *)bi[i] + (size_t)first[j] * es, is, sizeof is);
      append(why, nwhy, "\n      [%lld] host %s, interp %s", (long long)first[j], hs, is);
    }
  }
  for (int i = 0; i < np; i++) free(bh[i]);
  free(bh);
  free(reg);
  return same ? 0 : -1;
}
#endif

/* one launch: fill, interpret, (host: compile, run checked then unchecked, compare); 0, or -1
 * with why.  The interpreter runs first and the checked host code second: their region checks
 * prove that the launch stays inside its buffers before the unchecked code touches them. */
static int run_launch(const launch *L, uint64_t *rng, host_cache *hc, file_stats *fs, char *why,
                      size_t nwhy) {
  kn_func *k = L->k;
  int np = kn_func_nparams(k);
  size_t cnt = (size_t)(np ? np : 1);
  void **bi = calloc(cnt, sizeof *bi), **in = calloc(cnt, sizeof *in);
  kn_argval *args = calloc(cnt, sizeof *args);
  kn_region *reg = calloc(cnt, sizeof *reg);
  if (!bi || !in || !args || !reg) exit(2);
  int nreg = 0, rc = -1;
  fs->launches++;
  for (int i = 0; i < np; i++) {
    kn_type ty = kn_func_param(k, i)->type;
    if (ty.kind != KN_TY_PTR) {
      args[i] = L->arg[i].val;
      continue;
    }
    /* exactly the buffer's bytes, so that ASan (the _san build) also sees the interpreter
     * overrun a buffer its region checks should have caught */
    size_t bytes = (size_t)L->arg[i].n * kn_scalar_size((kn_scalar)ty.elem);
    bi[i] = malloc(bytes);
    in[i] = malloc(bytes);
    if (!bi[i] || !in[i]) exit(2);
    fill_buffer(&L->arg[i], (kn_scalar)ty.elem, bi[i], rng);
    memcpy(in[i], bi[i], bytes);  /* the host runs get the same inputs */
    args[i].p = bi[i];
    reg[nreg++] = (kn_region){bi[i], bytes};
  }
  kn_diag d;
  memset(&d, 0, sizeof d);
  if (kn_interp_run(k, args, L->grid, reg, nreg, NULL, &d) != 0) {
    append(why, nwhy, "interpreter: %s", d.rendered[0] ? d.rendered : d.message);
    goto out;
  }
#ifdef KN_GOLDEN_HOST
  if (host_launch(L, hc, true, in, bi, args, fs, why, nwhy) != 0 ||
      host_launch(L, hc, false, in, bi, args, fs, why, nwhy) != 0)
    goto out;
#else
  (void)hc;
#endif
  rc = 0;
out:
  for (int i = 0; i < np; i++) {
    free(bi[i]);
    free(in[i]);
  }
  free(bi);
  free(in);
  free(args);
  free(reg);
  return rc;
}

/* the file's seed: $KILN_TEST_SEED, else a hash of its short name (the same on every checkout) */
static uint64_t file_seed(const char *path) {
  const char *env = getenv("KILN_TEST_SEED");
  if (env && *env) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 0);
    if (errno || *end) {
      fprintf(stderr, "golden_runner: KILN_TEST_SEED='%s' is not a number\n", env);
      exit(2);
    }
    return v;
  }
  return fnv1a(short_name(path));
}

/* every LAUNCH of a RUN file, after its round trip passed; 0, or -1 with why */
static int run_launches(const char *path, kn_module *m, const expect *e, file_stats *fs,
                        char *why, size_t nwhy) {
  launch L[MAX_LAUNCHES];
  int nl = 0, rc = -1;
  char msg[1024];
  /* check every line before running any, so that a typo is reported even when an earlier
   * launch fails */
  for (; nl < e->nlaunch; nl++)
    if (parse_launch(m, &e->launch[nl], &L[nl], msg, sizeof msg) != 0) {
      nl++;
      snprintf(why, nwhy, "LAUNCH at line %d: %s", e->launch[nl - 1].line, msg);
      goto out;
    }
  for (int i = 0; i < m->nfuncs; i++) {
    if (!m->funcs[i]->is_kernel) continue;
    bool launched = false;
    for (int j = 0; j < nl; j++) launched |= L[j].k == m->funcs[i];
    if (!launched) {
      snprintf(why, nwhy, "kernel @%s has no LAUNCH line (every kernel of a RUN file runs)",
               m->funcs[i]->name);
      goto out;
    }
  }
  uint64_t seed = file_seed(path), rng = seed;
  host_cache hc = {0};
  rc = 0;
  for (int j = 0; j < nl && rc == 0; j++) {
    why[0] = 0;
    if (run_launch(&L[j], &rng, &hc, fs, why, nwhy) != 0) {
      /* put the launch and the seed in front of what went wrong */
      char *detail = xstrdup(why);
      snprintf(why, nwhy, "LAUNCH at line %d (@%s, KILN_TEST_SEED=0x%016llx): %s", L[j].line,
               L[j].k->name, (unsigned long long)seed, detail);
      free(detail);
      rc = -1;
    }
  }
  host_cache_free(&hc);
out:
  for (int j = 0; j < nl; j++) free(L[j].arg);
  return rc;
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
static int run_file(const char *path, file_stats *fs, char *why, size_t nwhy) {
  size_t len = 0;
  char *text = read_file(path, &len);
  if (!text) {
    snprintf(why, nwhy, "cannot read: %s", strerror(errno));
    return -1;
  }
  expect *e = malloc(sizeof *e);  /* ~70 KB with its launch lines: not on the stack */
  if (!e) exit(2);
  int rc = -1;
  kn_module *m = NULL;
  kn_diag d;
  memset(&d, 0, sizeof d);
  if (read_directives(text, len, e, why, nwhy)) goto out;

  m = kn_parse(path, text, len, &d);
  const char *stage = "parse";
  if (m && kn_verify(m, &d) != 0) stage = "verify";
  bool ok = m && strcmp(stage, "parse") == 0;

  if (e->kind == EXP_ROUNDTRIP) {
    if (!ok) {
      snprintf(why, nwhy, "%s failed:\n    %s", stage, d.rendered);
      goto out;
    }
    char *out = kn_print(m);
    if (!out) {
      snprintf(why, nwhy, "kn_print returned NULL");
      goto out;
    }
    const char *want = text + e->body_off;
    size_t wn = len - e->body_off, gn = strlen(out);
    int line0 = 1;
    for (size_t i = 0; i < e->body_off; i++) line0 += text[i] == '\n';
    if (wn == gn && memcmp(want, out, gn) == 0) rc = 0;
    else first_difference(want, wn, out, gn, line0, why, nwhy);
    free(out);
    if (rc == 0) rc = run_launches(path, m, e, fs, why, nwhy);
    goto out;
  }

  /* EXP_ERROR */
  if (ok) {
    snprintf(why, nwhy, "expected an error at %d:%d (%s), but the file parsed and verified",
             e->line, e->col, e->msg);
    goto out;
  }
  if (d.loc.line != e->line || d.loc.col != e->col || !strstr(d.message, e->msg)) {
    snprintf(why, nwhy, "expected %d:%d: ...%s...\n    got (%s): %s", e->line, e->col, e->msg,
             stage, d.rendered);
    goto out;
  }
  char prefix[600];
  snprintf(prefix, sizeof prefix, "%s:%d:%d: error: ", path, e->line, e->col);
  if (strncmp(d.rendered, prefix, strlen(prefix)) != 0) {
    snprintf(why, nwhy, "rendered diagnostic does not start with '%s':\n    %s", prefix,
             d.rendered);
    goto out;
  }
  rc = 0;
out:
  kn_module_free(m);
  free(e);
  free(text);
  return rc;
}

/* ---- mutations ---- */

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

#ifdef KN_GOLDEN_HOST
#define RUNS_ON "interp+host"
#else
#define RUNS_ON "interp"
#endif

int main(int argc, char **argv) {
  int mutate = -1;
  strlist files = {0};
  int failed = 0, passed = 0, launches = 0;
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
  static char why[8192];
  mstats st = {0};
  for (int i = 0; i < files.n; i++) {
    const char *name = short_name(files.v[i]);
    file_stats fs = {0};
    why[0] = 0;
    int rc = mutate > 0 ? mutate_file(files.v[i], mutate, &st, why, sizeof why)
                        : run_file(files.v[i], &fs, why, sizeof why);
    launches += fs.launches;
    if (rc != 0) {
      failed++;
      size_t wl = strlen(why);
      while (wl && why[wl - 1] == '\n') why[--wl] = 0;  /* rendered diagnostics end in one */
      printf("FAIL %s: %s\n", name, why);
    } else {
      passed++;
      if (fs.launches == 0) printf("PASS %s\n", name);
#ifdef KN_GOLDEN_HOST
      else if (fs.inexact)
        printf("PASS %s (" RUNS_ON ", %lld elements compared, %lld within tol)\n", name,
               (long long)fs.compared, (long long)fs.inexact);
      else
        printf("PASS %s (" RUNS_ON ", %lld elements compared)\n", name, (long long)fs.compared);
#else
      else printf("PASS %s (" RUNS_ON ", %d launch%s)\n", name, fs.launches,
                  fs.launches == 1 ? "" : "es");
#endif
    }
    fflush(stdout);
  }
  if (mutate > 0)
    printf("mutate: %ld mutants, %ld parse errors, %ld verify errors, %ld verified, "
           "%ld reprint failures\n", st.mutants, st.parse_err, st.verify_err, st.verified,
           st.reprint_fail);
  printf("golden: %d files, %d passed, %d failed, %d launches (" RUNS_ON ")\n", files.n, passed,
         failed, launches);
  if (files.n == 0) printf("golden: no .tile files found\n");
  for (int i = 0; i < files.n; i++) free(files.v[i]);
  free(files.v);
  return failed || files.n == 0 ? 1 : 0;
}
