/* fuzz_ir.c — libFuzzer target: the IR front end, the printer round trip and the bounded
 * interpreter on any bytes.
 *
 * The input is a .tile text.  What must hold for every input (an abort otherwise, which libFuzzer
 * reports as a crash, as it does any ASan/UBSan finding): the parser and verifier return (0 or -1
 * with a message, never a crash); a module that verifies prints to text that parses and verifies
 * again and prints the same; each kernel runs on the interpreter over one program with every
 * pointer NULL (no memory: every access is an error, not a crash), integers of 0..3, floats of
 * 0.5, within a step budget of 2 x 10^4 (a loop that does not end is an error, not a hang).
 * At most 8 kernels of a module run, within 6 x 10^4 steps together.  Seeds: tests/golden and
 * tests/malformed (fuzz/run.sh).
 *
 * The mutator (LLVMFuzzerCustomMutator) knows the text's shape: half the time it makes
 * three times in four libFuzzer's byte mutations, else one that keeps the text well-formed and makes it larger the
 * way the quadratic paths of issue 16 needed — up to 64 copies of a function under new names
 * (many functions: the name lookups), up to 512 new attributes on a function (the attribute
 * array and its duplicate check), a nest of up to 24 loops at the start of a body (the
 * verifier's and printer's recursion, the interpreter's budget), up to 64 copies of a body line
 * with renamed results (long blocks); the large counts one time in 8.  Byte mutations then mix
 * these with everything else.  run.sh gives fuzz_ir a -max_len of 256 KiB: the corpus keeps
 * texts of tens of thousands of lines, and each run grows them further.  (Timing those paths
 * stays test_large_texts's job: a fuzzer's timeout is too coarse to see a quadratic.)
 */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "ir.h"

static void check(int ok, const char *what, const char *text) {
  if (ok) return;
  fprintf(stderr, "fuzz_ir: %s\n%s\n", what, text ? text : "");
  abort();
}

/* ---- the structure-aware mutator ---- */

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

typedef struct text {
  char *p;
  size_t n, cap;
} text;

static void put(text *t, const char *s, size_t n) {
  if (t->n + n > t->cap) {
    t->n = t->cap + 1; /* too long: the caller falls back */
    return;
  }
  memcpy(t->p + t->n, s, n);
  t->n += n;
}
static void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

/* [start, end) of the lines of d; n lines (at most max) */
static int lines_of(const char *d, size_t size, size_t *start, size_t *end, int max) {
  int n = 0;
  for (size_t at = 0; at < size && n < max; n++) {
    const char *nl = memchr(d + at, '\n', size - at);
    start[n] = at;
    end[n] = nl ? (size_t)(nl - d) + 1 : size;
    at = end[n];
  }
  return n;
}

/* a count of 1..small, one time in 8 up to big */
static int count(uint64_t *rng, int small, int big) {
  return 1 + (int)(next(rng) % (uint64_t)(next(rng) % 8 ? small : big));
}

static int starts(const char *d, size_t s, size_t e, const char *prefix) {
  size_t n = strlen(prefix);
  return e - s >= n && !memcmp(d + s, prefix, n);
}

enum { MAX_LINES = 1 << 16 };

/* A larger well-formed text from d (see the file comment) into t; 0 when d offers nothing for
 * the mutation drawn */
static int grow(const char *d, size_t size, uint64_t *rng, text *t) {
  static size_t ls[MAX_LINES], le[MAX_LINES];
  static int heads[MAX_LINES], bodies[MAX_LINES];
  int n = lines_of(d, size, ls, le, MAX_LINES), nh = 0, nb = 0;
  for (int i = 0; i < n; i++) {
    if (starts(d, ls[i], le[i], "func @") || starts(d, ls[i], le[i], "kernel @")) heads[nh++] = i;
    /* a body line defining values, not opening a region */
    else if (starts(d, ls[i], le[i], "  %") && memmem(d + ls[i], le[i] - ls[i], " = ", 3) &&
             d[le[i] - 2] != '{')
      bodies[nb++] = i;
  }
  if (!nh) return 0;
  unsigned r = (unsigned)(next(rng) % 100000);
  char buf[160];
  switch (next(rng) % 4) {
  case 0: { /* copies of a function under new names, appended */
    int h = heads[next(rng) % (unsigned)nh], e = h;
    while (e < n && !(le[e] - ls[e] >= 1 && d[ls[e]] == '}')) e++;
    if (e == n) return 0;
    put(t, d, size);
    if (size && d[size - 1] != '\n') puts_(t, "\n");
    /* the name's '@' and the '(' after it, both within the head line (a head without a '('
     * before a short last line once read past the input: the 2026-12-03 long run's crash) */
    const char *at = memchr(d + ls[h], '@', le[h] - ls[h]);
    const char *paren = at ? memchr(at, '(', (size_t)(d + le[h] - at)) : NULL;
    if (!paren) return 0;
    for (int c = 0, copies = count(rng, 4, 64); c < copies; c++) {
      put(t, d + ls[h], (size_t)(paren - (d + ls[h])));
      snprintf(buf, sizeof buf, "_d%u_%d", r, c);
      puts_(t, buf);
      put(t, paren, le[e] - (size_t)(paren - d));
      if (d[le[e] - 1] != '\n') puts_(t, "\n");
    }
    return 1;
  }
  case 1: { /* attributes */
    int h = heads[next(rng) % (unsigned)nh];
    const char *line = d + ls[h];
    size_t len = le[h] - ls[h];
    const char *attrs = memmem(line, len, " attrs {", 8);
    size_t cut = attrs ? (size_t)(attrs - d) + 8 : le[h] - (d[le[h] - 1] == '\n') - 2;
    if (!attrs && (len < 3 || memcmp(d + cut, " {", 2))) return 0;
    put(t, d, cut);
    if (!attrs) puts_(t, " attrs {");
    for (int a = 0, na = count(rng, 16, 512); a < na; a++) {
      snprintf(buf, sizeof buf, "%sA%u_%d = %d", a ? ", " : "", r, a, (int)(next(rng) % 1000));
      puts_(t, buf);
    }
    puts_(t, attrs ? ", " : "}");
    put(t, d + cut, size - cut);
    return 1;
  }
  case 2: { /* a loop nest at the start of a body */
    int h = heads[next(rng) % (unsigned)nh];
    if (d[le[h] - 2] != '{') return 0;
    put(t, d, le[h]);
    int depth = count(rng, 4, 24);
    snprintf(buf, sizeof buf, "  %%n%u_lo = const 0 : i32\n  %%n%u_hi = const %d : i32\n"
             "  %%n%u_st = const 1 : i32\n", r, r, 1 + (int)(next(rng) % 3), r);
    puts_(t, buf);
    for (int i = 0; i < depth; i++) {
      snprintf(buf, sizeof buf, "%*sfor %%n%u_%d = %%n%u_lo to %%n%u_hi step %%n%u_st {\n",
               2 + 2 * i, "", r, i, r, r, r);
      puts_(t, buf);
    }
    snprintf(buf, sizeof buf, "%*s%%n%u_v = add %%n%u_%d, %%n%u_st : i32\n", 2 + 2 * depth, "",
             r, r, depth - 1, r);
    puts_(t, buf);
    for (int i = depth - 1; i >= 0; i--) {
      snprintf(buf, sizeof buf, "%*syield\n%*s}\n", 4 + 2 * i, "", 2 + 2 * i, "");
      puts_(t, buf);
    }
    put(t, d + le[h], size - le[h]);
    return 1;
  }
  default: { /* copies of a body line, its results renamed */
    if (!nb) return 0;
    int b = bodies[next(rng) % (unsigned)nb];
    const char *line = d + ls[b], *eq = memmem(line, le[b] - ls[b], " = ", 3);
    put(t, d, le[b]);
    for (int c = 0, copies = count(rng, 4, 64); c < copies; c++) {
      for (const char *p = line; p < eq; p++) { /* each result %x becomes %x_c<r>_<c> */
        put(t, p, 1);
        if (p[0] != ',' && p[0] != ' ' && (p + 1 == eq || p[1] == ',')) {
          snprintf(buf, sizeof buf, "_c%u_%d", r, c);
          puts_(t, buf);
        }
      }
      put(t, eq, le[b] - (size_t)(eq - d));
    }
    put(t, d + le[b], size - le[b]);
    return 1;
  }
  }
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed) {
  uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
  if (next(&rng) % 4) return LLVMFuzzerMutate(data, size, max_size);
  static text t;
  if (t.cap < max_size) {
    free(t.p);
    t.p = malloc(max_size);
    t.cap = t.p ? max_size : 0;
  }
  t.n = 0;
  if (!t.p || !grow((const char *)data, size, &rng, &t) || t.n > max_size)
    return LLVMFuzzerMutate(data, size, max_size);
  memcpy(data, t.p, t.n);
  return t.n;
}

/* ---- the target ---- */

/* The interpreter's step budgets: each kernel's, and all of a module's together.  The largest
 * golden kernel takes about 1.1 x 10^4 steps before its first access (a NULL pointer) ends it;
 * what runs longer is nearly always a loop nest of the mutator's, which repeats the same ops
 * until the budget ends (a per-kernel budget of 10^5 before: nine tenths of the target's time,
 * in copies of one nest under new names; perf, bench/RESULTS.md 2026-12-02). */
enum { KERNEL_STEPS = 20000, MODULE_STEPS = 60000 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kn_diag d;
  kn_module *m = kn_parse("fuzz.tile", (const char *)data, size, &d);
  if (!m) return 0;
  if (kn_verify(m, &d)) {
    kn_module_free(m);
    return 0;
  }
  char *a = kn_print(m);
  check(a != NULL, "print failed", NULL);
  kn_module *m2 = kn_parse("fuzz2.tile", a, strlen(a), &d);
  check(m2 != NULL, "the printed text does not parse", a);
  check(kn_verify(m2, &d) == 0, "the printed text does not verify", a);
  char *b = kn_print(m2);
  check(b && !strcmp(a, b), "print(parse(print(m))) != print(m)", a);
  free(b);
  kn_module_free(m2);
  free(a);
  uint64_t left = MODULE_STEPS;
  for (int i = 0, ran = 0; i < m->nfuncs && ran < 8 && left; i++) {
    kn_func *k = m->funcs[i];
    if (!k->is_kernel) continue;
    ran++;
    int np = kn_func_nparams(k);
    kn_argval *args = calloc((size_t)np + 1, sizeof *args);
    check(args != NULL, "out of memory", NULL);
    for (int p = 0; p < np; p++) {
      kn_type t = kn_func_param(k, p)->type;
      if (t.kind == KN_TY_PTR) args[p].p = NULL;
      else if (kn_scalar_is_float((kn_scalar)t.elem)) args[p].f = 0.5;
      else args[p].i = p % 4;
    }
    kn_interp_stats st;
    kn_interp_run_budget(k, 0, left < KERNEL_STEPS ? left : KERNEL_STEPS, args, (int[]){1, 1, 1},
                         NULL, 0, &st, &d);
    left -= st.steps < left ? st.steps : left;
    free(args);
  }
  kn_module_free(m);
  return 0;
}
