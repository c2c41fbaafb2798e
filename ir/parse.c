/* parse.c — the text form of the tile IR back into a module (grammar: docs/ir.md).
 *
 * A hand-written lexer feeds a recursive-descent parser that builds ops through the builder, so
 * parsed and built IR are the same structures.  The text is line-oriented: every op ends at the end
 * of its line, which keeps diagnostics precise ("expected end of line after op, found '%x'") and
 * needs no lookahead beyond one token.  Names are resolved here with SSA scoping, so the verifier
 * only ever sees resolved operands; types are NOT checked here (kn_verify() does that), but every
 * op has the operand and result counts its own rule requires, so later code can index freely.
 * Which form an op's operands take is its syntax class in ops.def (kn_syntax): the parser knows
 * the classes, not the ops, so a new op of an existing form needs no change here.
 *
 * Robustness: the input is untrusted.  The lexer never reads past `len` (the text need not be
 * NUL-terminated and may contain NUL bytes), literals are range-checked, region nesting is bounded
 * (KN_PARSE_MAX_DEPTH) so recursion is too, list lengths and the text (KN_PARSE_MAX_BYTES) are
 * bounded, and every lookup (value names, function names, attribute duplicates) is a hash, so the
 * time is linear in the text.  On the first error we
 * longjmp back to kn_parse(): everything allocated lives in the module arena or in the parser's
 * scratch arena, so unwinding is just freeing those two.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

#define KN_PARSE_MAX_DEPTH 64     /* nested for/if regions */
#define KN_PARSE_MAX_LIST 65536   /* items in one operand/param/type list */
#define KN_PARSE_MAX_ITERS 61     /* kn_b_for() takes at most 3 + 61 operands */

typedef enum kn_tok_kind {
  T_EOF,     /* end of the text */
  T_NL,      /* end of a line (comments and blank space before it are skipped) */
  T_IDENT,   /* [A-Za-z_][A-Za-z0-9_.]*: op names, keywords, types, attr keys */
  T_VALUE,   /* %name */
  T_FUNC,    /* @name */
  T_NUM,     /* a C-like "pp-number" (digits, letters, '.', signs after e/p) or -inf / -nan */
  T_LPAREN, T_RPAREN, T_LBRACK, T_RBRACK, T_LBRACE, T_RBRACE, T_LT, T_GT,
  T_COMMA, T_COLON, T_EQ, T_ARROW,
} kn_tok_kind;

typedef struct kn_tok {
  kn_tok_kind k;
  const char *s;  /* token text (sigils included) */
  size_t n;
  kn_loc loc;
} kn_tok;

enum { NAME_PENDING, NAME_ALIVE, NAME_DEAD };

/* one value name of the current function */
typedef struct kn_name_ent {
  const char *s;  /* without '%' */
  size_t n;
  kn_value *v;    /* NULL while pending (named by an op whose regions are being parsed) */
  int state;
} kn_name_ent;

/* a growable list of operands with the places they were written */
typedef struct kn_opnds {
  kn_value **v;
  kn_loc *loc;
  int n, cap;
} kn_opnds;

typedef struct kn_parser {
  kn_module *m;
  kn_diag *d;
  kn_arena *tmp;  /* scratch: freed when parsing ends */
  jmp_buf fail;
  const char *file;
  const char *p, *end;
  int line, col;
  kn_tok tok;
  /* names of the current function: entries, an open-addressing hash of entry index + 1, and the
   * stack of bound entries, popped (marked dead) when the region that bound them closes */
  kn_name_ent *ents;
  int nents, capents;
  int *hash;
  int hcap;
  int *stack;
  int nstack, capstack;
  int depth;
  char found[64];  /* describe() output */
} kn_parser;

/* ---- errors ---------------------------------------------------------------------------------- */

static void fail(kn_parser *P, kn_loc loc, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
static void fail(kn_parser *P, kn_loc loc, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kn_error(P->d, P->m, loc, "%s", msg);
  longjmp(P->fail, 1);
}

/* the current token for "found ..." */
static const char *describe(kn_parser *P) {
  const kn_tok *t = &P->tok;
  if (t->k == T_EOF) return "end of file";
  if (t->k == T_NL) return "end of line";
  if (t->n > 40) snprintf(P->found, sizeof P->found, "'%.40s...'", t->s);
  else snprintf(P->found, sizeof P->found, "'%.*s'", (int)t->n, t->s);
  return P->found;
}

static void expected(kn_parser *P, const char *what) __attribute__((noreturn));
static void expected(kn_parser *P, const char *what) {
  fail(P, P->tok.loc, "expected %s, found %s", what, describe(P));
}

/* ---- lexer ------------------------------------------------------------------------------------ */

static bool is_ident_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(int c) { return is_ident_start(c) || is_digit(c) || c == '.'; }

/* moves over n bytes that contain no newline; columns saturate instead of overflowing */
static void advance(kn_parser *P, size_t n) {
  P->p += n;
  P->col = (size_t)P->col + n > (size_t)1 << 30 ? 1 << 30 : P->col + (int)n;
}

static bool at(const kn_parser *P, size_t i, char c) {
  return (size_t)(P->end - P->p) > i && P->p[i] == c;
}

/* does the word w start at p[i] and end there (no identifier character after it)? */
static bool word_at(const kn_parser *P, size_t i, const char *w) {
  size_t n = strlen(w), left = (size_t)(P->end - P->p);
  if (left < i + n || memcmp(P->p + i, w, n) != 0) return false;
  return left == i + n || !is_ident_char((unsigned char)P->p[i + n]);
}

static void next(kn_parser *P) {
  /* blank space and comments; a comment ends before its newline */
  for (;;) {
    if (P->p < P->end && (*P->p == ' ' || *P->p == '\t' || *P->p == '\r')) advance(P, 1);
    else if (at(P, 0, '/') && at(P, 1, '/'))
      while (P->p < P->end && *P->p != '\n') advance(P, 1);
    else break;
  }
  kn_tok *t = &P->tok;
  t->s = P->p;
  t->loc = (kn_loc){P->file, P->line, P->col};
  if (P->p >= P->end) {
    t->k = T_EOF;
    t->n = 0;
    return;
  }
  const char *s = P->p;
  size_t left = (size_t)(P->end - s), n = 1;
  int c = (unsigned char)*s;
  if (c == '\n') {
    t->k = T_NL;
    t->n = 1;
    P->p++;
    if (P->line < (1 << 30)) P->line++;
    P->col = 1;
    return;
  }
  if (is_ident_start(c)) {
    while (n < left && is_ident_char((unsigned char)s[n])) n++;
    t->k = T_IDENT;
  } else if (c == '%' || c == '@') {
    /* values may be named by plain numbers (%0); functions by identifiers */
    while (n < left && (c == '%' ? is_ident_char((unsigned char)s[n])
                                 : (n == 1 ? is_ident_start((unsigned char)s[n])
                                           : is_ident_char((unsigned char)s[n]))))
      n++;
    if (n == 1)
      fail(P, t->loc, c == '%' ? "expected a value name after '%%'"
                               : "expected a function name after '@'");
    t->k = c == '%' ? T_VALUE : T_FUNC;
  } else if (is_digit(c) || (c == '.' && left > 1 && is_digit((unsigned char)s[1])) ||
             (c == '-' && left > 1 &&
              (is_digit((unsigned char)s[1]) || s[1] == '.'))) {
    /* like C's pp-number, so "64x64xf32" (a tile shape) and "0x1.8p+3" are one token each;
     * the parser decides what the characters mean */
    while (n < left) {
      int d = (unsigned char)s[n];
      if (is_ident_char(d)) n++;
      else if ((d == '+' || d == '-') && memchr("eEpP", s[n - 1], 4)) n++;
      else break;
    }
    t->k = T_NUM;
  } else if (c == '-' && (word_at(P, 1, "inf") || word_at(P, 1, "nan"))) {
    n = 4;
    t->k = T_NUM;
  } else if (c == '-' && left > 1 && s[1] == '>') {
    n = 2;
    t->k = T_ARROW;
  } else {
    switch (c) {
    case '(': t->k = T_LPAREN; break;
    case ')': t->k = T_RPAREN; break;
    case '[': t->k = T_LBRACK; break;
    case ']': t->k = T_RBRACK; break;
    case '{': t->k = T_LBRACE; break;
    case '}': t->k = T_RBRACE; break;
    case '<': t->k = T_LT; break;
    case '>': t->k = T_GT; break;
    case ',': t->k = T_COMMA; break;
    case ':': t->k = T_COLON; break;
    case '=': t->k = T_EQ; break;
    default:
      if (c > 0x20 && c < 0x7f) fail(P, t->loc, "unexpected character '%c'", c);
      fail(P, t->loc, "unexpected byte 0x%02x", c);
    }
  }
  t->n = n;
  advance(P, n);
}

static bool is_word(const kn_parser *P, const char *w) {
  return P->tok.k == T_IDENT && P->tok.n == strlen(w) && memcmp(P->tok.s, w, P->tok.n) == 0;
}

static void expect(kn_parser *P, kn_tok_kind k, const char *what) {
  if (P->tok.k != k) expected(P, what);
  next(P);
}

static void expect_word(kn_parser *P, const char *w, const char *what) {
  if (!is_word(P, w)) expected(P, what);
  next(P);
}

/* the end of an op's or a header's line (or of the file: an unclosed block is reported later) */
static void expect_eol(kn_parser *P, const char *what) {
  if (P->tok.k == T_EOF) return;
  if (P->tok.k != T_NL) expected(P, what);
  next(P);
}

/* ---- literals ----------------------------------------------------------------------------------- */

/* a decimal integer in s[0..n), optionally negative; false when it is not one */
static bool int_text(kn_parser *P, const char *s, size_t n, kn_loc loc, int64_t *out) {
  size_t i = 0;
  bool neg = n > 0 && s[0] == '-';
  if (neg) i++;
  if (i == n) return false;
  uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; i < n; i++) {
    if (!is_digit((unsigned char)s[i])) return false;
    unsigned dig = (unsigned)(s[i] - '0');
    if (v > (lim - dig) / 10) fail(P, loc, "integer literal '%.*s' out of range", (int)(n > 40 ? 40 : n), s);
    v = v * 10 + dig;
  }
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

static int64_t parse_int(kn_parser *P, const char *what) {
  int64_t v;
  if (P->tok.k != T_NUM || !int_text(P, P->tok.s, P->tok.n, P->tok.loc, &v)) expected(P, what);
  next(P);
  return v;
}

/* a float from a T_NUM or inf/nan token */
static double float_text(kn_parser *P, const kn_tok *t) {
  if (t->k == T_IDENT && t->n == 3 && memcmp(t->s, "inf", 3) == 0) return INFINITY;
  if (t->k == T_IDENT && t->n == 3 && memcmp(t->s, "nan", 3) == 0) return NAN;
  if (t->k != T_NUM) fail(P, t->loc, "expected a number, found '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
  if (t->n == 4 && memcmp(t->s, "-inf", 4) == 0) return -INFINITY;
  if (t->n == 4 && memcmp(t->s, "-nan", 4) == 0) return NAN;
  /* strtod wants a NUL-terminated string; the token text is not one */
  char *buf = kn_arena_strndup(P->tmp, t->s, t->n), *e;
  errno = 0;
  double v = strtod(buf, &e);
  if (e != buf + t->n || t->n == 0)
    fail(P, t->loc, "invalid number '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
  if (errno == ERANGE && isinf(v))
    fail(P, t->loc, "float literal '%.*s' out of range", (int)(t->n > 40 ? 40 : t->n), t->s);
  return v;  /* underflow rounds to a denormal or zero, as strtod decided */
}

/* ---- types ------------------------------------------------------------------------------------- */

static kn_scalar scalar_at(kn_parser *P, const char *s, size_t n, kn_loc loc) {
  int e = kn_scalar_from_name(s, n);
  if (e < 0) fail(P, loc, "unknown type '%.*s'", (int)(n > 40 ? 40 : n), s);
  return (kn_scalar)e;
}

static kn_loc loc_plus(kn_loc l, size_t k) {
  l.col = k > (size_t)1 << 30 ? 1 << 30 : l.col + (int)k;
  return l;
}

static kn_type parse_type(kn_parser *P) {
  kn_tok t = P->tok;
  if (t.k != T_IDENT) expected(P, "a type");
  next(P);
  if (t.n == 3 && memcmp(t.s, "ptr", 3) == 0) {
    expect(P, T_LT, "'<' after 'ptr'");
    if (P->tok.k != T_IDENT) expected(P, "an element type");
    kn_scalar e = scalar_at(P, P->tok.s, P->tok.n, P->tok.loc);
    next(P);
    expect(P, T_GT, "'>' after the element type");
    return kn_ty_ptr(e);
  }
  if (t.n == 4 && memcmp(t.s, "tile", 4) == 0) {
    expect(P, T_LT, "'<' after 'tile'");
    /* the shape and element type lex as one token, e.g. "64x64xf32": split it at the 'x's
     * that end each decimal dimension */
    kn_tok s = P->tok;
    if (s.k != T_NUM) expected(P, "a tile shape like 64x64xf32");
    int32_t shape[KN_MAX_RANK];
    int rank = 0;
    size_t i = 0;
    for (;;) {
      size_t b = i;
      bool neg = i < s.n && s.s[i] == '-';
      if (neg) i++;
      while (i < s.n && is_digit((unsigned char)s.s[i])) i++;
      if (i == b || (neg && i == b + 1)) {
        if (rank == 0) fail(P, loc_plus(s.loc, b), "expected a tile dimension");
        break;  /* the element type */
      }
      if (i >= s.n || s.s[i] != 'x')
        fail(P, loc_plus(s.loc, i), "expected 'x' after a tile dimension");
      int64_t v;
      if (!int_text(P, s.s + b, i - b, loc_plus(s.loc, b), &v) || v > INT32_MAX)
        fail(P, loc_plus(s.loc, b), "tile dimension too large");
      if (v <= 0) fail(P, loc_plus(s.loc, b), "tile dimension must be positive");
      if (rank == KN_MAX_RANK) fail(P, loc_plus(s.loc, b), "tile rank must be 1 or 2");
      shape[rank++] = (int32_t)v;
      i++; /* the 'x' */
    }
    kn_scalar e = scalar_at(P, s.s + i, s.n - i, loc_plus(s.loc, i));
    next(P);
    expect(P, T_GT, "'>' after the tile element type");
    return kn_ty_tile(e, rank, shape);
  }
  return kn_ty_scalar(scalar_at(P, t.s, t.n, t.loc));
}

/* type (", " type)*, into scratch memory */
static int parse_types(kn_parser *P, kn_type **out) {
  int n = 0, cap = 4;
  kn_type *v = kn_arena_alloc(P->tmp, sizeof *v * (size_t)cap);
  for (;;) {
    if (n == cap) {
      if (cap >= KN_PARSE_MAX_LIST) fail(P, P->tok.loc, "too many types in a list");
      kn_type *nv = kn_arena_alloc(P->tmp, sizeof *nv * (size_t)cap * 2);
      memcpy(nv, v, sizeof *v * (size_t)n);
      v = nv, cap *= 2;
    }
    v[n++] = parse_type(P);
    if (P->tok.k != T_COMMA) break;
    next(P);
  }
  *out = v;
  return n;
}

/* ---- names ------------------------------------------------------------------------------------- */

static uint32_t name_hash(const char *s, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static void names_reset(kn_parser *P) {
  P->nents = 0;
  P->nstack = 0;
  if (P->hash) memset(P->hash, 0, sizeof *P->hash * (size_t)P->hcap);
}

/* the slot holding name s, or the empty slot where it would go */
static int *name_slot(kn_parser *P, const char *s, size_t n) {
  uint32_t mask = (uint32_t)P->hcap - 1, i = name_hash(s, n) & mask;
  for (;; i = (i + 1) & mask) {
    int e = P->hash[i];
    if (!e) return &P->hash[i];
    const kn_name_ent *x = &P->ents[e - 1];
    if (x->n == n && memcmp(x->s, s, n) == 0) return &P->hash[i];
  }
}

static void names_grow(kn_parser *P) {
  if (P->nents + 1 >= P->capents) {
    int cap = P->capents ? P->capents * 2 : 64;
    kn_name_ent *ne = kn_arena_alloc(P->tmp, sizeof *ne * (size_t)cap);
    if (P->nents) memcpy(ne, P->ents, sizeof *ne * (size_t)P->nents);
    P->ents = ne, P->capents = cap;
  }
  if ((P->nents + 1) * 2 > P->hcap) {
    int cap = P->hcap ? P->hcap * 2 : 128;
    P->hash = kn_arena_alloc(P->tmp, sizeof *P->hash * (size_t)cap);
    P->hcap = cap;
    for (int i = 0; i < P->nents; i++) *name_slot(P, P->ents[i].s, P->ents[i].n) = i + 1;
  }
}

/* claims the name of a value about to be defined; the op binds it once built */
static int name_reserve(kn_parser *P, const kn_tok *t) {
  names_grow(P);
  int *slot = name_slot(P, t->s + 1, t->n - 1);
  if (*slot) fail(P, t->loc, "redefinition of value '%.*s'", (int)t->n, t->s);
  P->ents[P->nents] = (kn_name_ent){t->s + 1, t->n - 1, NULL, NAME_PENDING};
  *slot = ++P->nents;
  return P->nents - 1;
}

static void name_bind(kn_parser *P, int e, kn_value *v) {
  kn_name_ent *x = &P->ents[e];
  x->v = v;
  x->state = NAME_ALIVE;
  kn_value_set_name(P->m, v, kn_arena_strndup(P->tmp, x->s, x->n));
  if (P->nstack == P->capstack) {
    int cap = P->capstack ? P->capstack * 2 : 64;
    int *ns = kn_arena_alloc(P->tmp, sizeof *ns * (size_t)cap);
    if (P->nstack) memcpy(ns, P->stack, sizeof *ns * (size_t)P->nstack);
    P->stack = ns, P->capstack = cap;
  }
  P->stack[P->nstack++] = e;
}

/* leaving a region: what it defined is no longer visible (but its names stay taken) */
static void names_close(kn_parser *P, int mark) {
  while (P->nstack > mark) P->ents[P->stack[--P->nstack]].state = NAME_DEAD;
}

static kn_value *name_use(kn_parser *P, const kn_tok *t) {
  int *slot = P->hcap ? name_slot(P, t->s + 1, t->n - 1) : NULL;
  int len = (int)(t->n > 60 ? 60 : t->n);
  if (!slot || !*slot) fail(P, t->loc, "use of undefined value '%.*s'", len, t->s);
  const kn_name_ent *x = &P->ents[*slot - 1];
  if (x->state == NAME_PENDING)
    fail(P, t->loc, "use of value '%.*s' before its definition", len, t->s);
  if (x->state == NAME_DEAD)
    fail(P, t->loc, "use of value '%.*s' outside the region that defines it", len, t->s);
  return x->v;
}

/* ---- operand lists ---------------------------------------------------------------------------- */

static void opnds_push(kn_parser *P, kn_opnds *o, kn_value *v, kn_loc loc) {
  if (o->n == o->cap) {
    if (o->cap >= KN_PARSE_MAX_LIST) fail(P, loc, "too many operands");
    int cap = o->cap ? o->cap * 2 : 8;
    kn_value **nv = kn_arena_alloc(P->tmp, sizeof *nv * (size_t)cap);
    kn_loc *nl = kn_arena_alloc(P->tmp, sizeof *nl * (size_t)cap);
    if (o->n) {
      memcpy(nv, o->v, sizeof *nv * (size_t)o->n);
      memcpy(nl, o->loc, sizeof *nl * (size_t)o->n);
    }
    o->v = nv, o->loc = nl, o->cap = cap;
  }
  o->v[o->n] = v;
  o->loc[o->n++] = loc;
}

/* one operand: a %name that must be visible here */
static void use(kn_parser *P, kn_opnds *o, const char *what) {
  if (P->tok.k != T_VALUE) expected(P, what);
  opnds_push(P, o, name_use(P, &P->tok), P->tok.loc);
  next(P);
}

/* %a, %b, ... (at least one) */
static void use_list(kn_parser *P, kn_opnds *o) {
  use(P, o, "an operand '%name'");
  while (P->tok.k == T_COMMA) {
    next(P);
    use(P, o, "an operand '%name' after ','");
  }
}

static void append(kn_parser *P, kn_opnds *dst, const kn_opnds *src) {
  for (int i = 0; i < src->n; i++) opnds_push(P, dst, src->v[i], src->loc[i]);
}

/* ---- ops ---------------------------------------------------------------------------------------- */

static void parse_block(kn_parser *P, kn_builder *b);

/* the result names written before '=' */
typedef struct kn_results {
  int n;
  int *ent;       /* name entries */
  kn_loc first;   /* where the first name was written */
} kn_results;

static kn_op *build(kn_parser *P, kn_builder *b, kn_opcode opc, kn_loc oploc, const kn_opnds *o,
                    int nres, const kn_type *rt) {
  b->loc = oploc;
  kn_op *op = kn_build_op(b, opc, o->n, o->v, nres, rt);
  op->opnd_loc = kn_arena_alloc(P->m->arena, sizeof(kn_loc) * (size_t)(o->n ? o->n : 1));
  if (o->n) memcpy(op->opnd_loc, o->loc, sizeof(kn_loc) * (size_t)o->n);
  return op;
}

static void bind_results(kn_parser *P, const kn_results *r, kn_op *op) {
  KN_ASSERT(op->nres == r->n);
  for (int i = 0; i < r->n; i++) name_bind(P, r->ent[i], op->res[i]);
}

/* ": type" for ops with exactly one result */
static kn_type result_type(kn_parser *P) {
  expect(P, T_COLON, "':' and the result type after the operands");
  return parse_type(P);
}

/* ": types" whose count must match the result names (call, for, if) */
static int result_types(kn_parser *P, const kn_results *r, const char *opname, kn_type **rt) {
  *rt = NULL;
  if (P->tok.k != T_COLON) {
    if (r->n) expected(P, "':' and the result types");
    return 0;
  }
  kn_loc at = P->tok.loc;
  if (!r->n) fail(P, at, "'%s' has result types but no result names", opname);
  next(P);
  int n = parse_types(P, rt);
  if (n != r->n)
    fail(P, at, "%d result name%s but %d result type%s", r->n, r->n == 1 ? "" : "s", n,
         n == 1 ? "" : "s");
  return n;
}

static void parse_region_body(kn_parser *P, kn_block *blk) {
  kn_builder rb = kn_builder_at_end(P->m, blk);
  parse_block(P, &rb);
  expect(P, T_RBRACE, "'}'");
}

static void parse_for(kn_parser *P, kn_builder *b, kn_loc oploc, const kn_results *r) {
  kn_opnds o = {0};
  if (P->tok.k != T_VALUE) expected(P, "the induction variable '%name'");
  kn_tok ivt = P->tok;
  int iv = name_reserve(P, &ivt);
  next(P);
  expect(P, T_EQ, "'=' after the induction variable");
  use(P, &o, "the lower bound '%name'");
  expect_word(P, "to", "'to' after the lower bound");
  use(P, &o, "the upper bound '%name'");
  expect_word(P, "step", "'step' after the upper bound");
  use(P, &o, "the step '%name'");
  int niter = 0, *iters = kn_arena_alloc(P->tmp, sizeof(int) * KN_PARSE_MAX_ITERS);
  if (is_word(P, "iter")) {
    next(P);
    expect(P, T_LPAREN, "'(' after 'iter'");
    for (;;) {
      if (P->tok.k != T_VALUE) expected(P, "an iter value '%name'");
      if (niter == KN_PARSE_MAX_ITERS)
        fail(P, P->tok.loc, "too many iter values (at most %d)", KN_PARSE_MAX_ITERS);
      iters[niter++] = name_reserve(P, &P->tok);
      next(P);
      expect(P, T_EQ, "'=' after the iter value");
      use(P, &o, "the initial value '%name'");
      if (P->tok.k == T_RPAREN) break;
      expect(P, T_COMMA, "',' or ')' after an iter value");
    }
    next(P);
  }
  kn_type *rt;
  int nt = result_types(P, r, "for", &rt);
  if (nt != niter)
    fail(P, niter ? oploc : r->first, "'for' has %d iter value%s but %d result%s", niter,
         niter == 1 ? "" : "s", nt, nt == 1 ? "" : "s");
  expect(P, T_LBRACE, "'{' to open the loop body");
  expect_eol(P, "end of line after '{'");

  kn_builder body;
  b->loc = oploc;
  kn_op *op = kn_b_for(b, o.v[0], o.v[1], o.v[2], niter, o.v + 3, &body);
  op->opnd_loc = kn_arena_alloc(P->m->arena, sizeof(kn_loc) * (size_t)o.n);
  memcpy(op->opnd_loc, o.loc, sizeof(kn_loc) * (size_t)o.n);
  /* the written types declare the iter values and the results; the verifier checks that the
   * initial values and the yields agree with them */
  kn_block *blk = op->region[0];
  for (int i = 0; i < niter; i++) op->res[i]->type = blk->args[1 + i]->type = rt[i];

  int mark = P->nstack;
  name_bind(P, iv, blk->args[0]);
  for (int i = 0; i < niter; i++) name_bind(P, iters[i], blk->args[1 + i]);
  parse_region_body(P, blk);
  names_close(P, mark);
  bind_results(P, r, op);
}

static void parse_if(kn_parser *P, kn_builder *b, kn_loc oploc, const kn_results *r) {
  kn_opnds o = {0};
  use(P, &o, "the condition '%name'");
  kn_type *rt;
  int nt = result_types(P, r, "if", &rt);
  expect(P, T_LBRACE, "'{' to open the then-region");
  expect_eol(P, "end of line after '{'");
  kn_builder tb, eb;
  b->loc = oploc;
  kn_op *op = kn_b_if(b, o.v[0], nt, rt, &tb, &eb);
  op->opnd_loc = kn_arena_alloc(P->m->arena, sizeof(kn_loc));
  op->opnd_loc[0] = o.loc[0];

  int mark = P->nstack;
  parse_region_body(P, op->region[0]);
  names_close(P, mark);
  expect_word(P, "else", "'else' after the then-region of 'if'");
  expect(P, T_LBRACE, "'{' after 'else'");
  expect_eol(P, "end of line after '{'");
  parse_region_body(P, op->region[1]);
  names_close(P, mark);
  bind_results(P, r, op);
}

/* the clauses "(mask %m)? (other %x)?" ending a load (other only when other_ok: not a store)
 * or a gather; a clause out of order or repeated is an error (bounds: only load and store) */
static unsigned parse_mask_other(kn_parser *P, bool other_ok, bool bounds_ok, kn_opnds *mask,
                                 kn_opnds *other) {
  unsigned cl = 0;
  if (is_word(P, "mask")) {
    next(P);
    use(P, mask, "the mask '%name'");
    cl |= KN_MEM_MASK;
  }
  if (other_ok && is_word(P, "other")) {
    next(P);
    use(P, other, "the value '%name' for masked-off elements");
    cl |= KN_MEM_OTHER;
  }
  if ((bounds_ok && is_word(P, "bounds")) || is_word(P, "mask") || is_word(P, "other")) {
    if (!other_ok && is_word(P, "other")) fail(P, P->tok.loc, "store has no 'other' clause");
    fail(P, P->tok.loc, "clause '%.*s' out of order or repeated (the order is %smask%s)",
         (int)P->tok.n, P->tok.s, bounds_ok ? "bounds, " : "", other_ok ? ", other" : "");
  }
  return cl;
}

/* gather %p[%offs] (mask %m)? (other %x)? : T */
static void parse_gather(kn_parser *P, kn_builder *b, kn_loc oploc, const kn_results *r) {
  kn_opnds o = {0}, mask = {0}, other = {0};
  use(P, &o, "the base pointer '%name'");
  expect(P, T_LBRACK, "'[' and the offsets tile after the base pointer");
  use(P, &o, "the offsets '%name'");
  expect(P, T_RBRACK, "']' after the offsets (a gather takes one offsets tile)");
  unsigned cl = parse_mask_other(P, true, false, &mask, &other);
  kn_type rt = result_type(P);
  append(P, &o, &mask);
  append(P, &o, &other);
  kn_op *op = build(P, b, KN_OP_GATHER, oploc, &o, 1, &rt);
  op->iattr[0] = cl;
  bind_results(P, r, op);
}

/* load %p[offs] strides [s] (bounds [b])? (mask %m)? (other %x)? (off32)? ;
 * store %v, %p[offs] strides [s] (bounds [b])? (mask %m)? (atomic_add)? */
static void parse_mem(kn_parser *P, kn_builder *b, kn_opcode opc, kn_loc oploc,
                      const kn_results *r) {
  bool is_store = opc == KN_OP_STORE;
  kn_opnds value = {0}, base = {0}, off = {0}, stride = {0}, bound = {0}, mask = {0}, other = {0};
  if (is_store) {
    use(P, &value, "the stored value '%name'");
    expect(P, T_COMMA, "',' after operand");
  }
  use(P, &base, "the base pointer '%name'");
  kn_loc lb = P->tok.loc;
  expect(P, T_LBRACK, "'[' and the offsets after the base pointer");
  use_list(P, &off);
  expect(P, T_RBRACK, "',' or ']' after an offset");
  int rank = off.n;
  if (rank > KN_MAX_RANK) fail(P, lb, "%s takes 1 or 2 offsets, found %d", is_store ? "store" : "load", rank);
  expect_word(P, "strides", "'strides' after the offsets");
  lb = P->tok.loc;
  expect(P, T_LBRACK, "'[' after 'strides'");
  use_list(P, &stride);
  expect(P, T_RBRACK, "',' or ']' after a stride");
  if (stride.n != rank) fail(P, lb, "expected %d stride%s, found %d", rank, rank == 1 ? "" : "s", stride.n);
  unsigned cl = 0;
  if (is_word(P, "bounds")) {
    next(P);
    lb = P->tok.loc;
    expect(P, T_LBRACK, "'[' after 'bounds'");
    use_list(P, &bound);
    expect(P, T_RBRACK, "',' or ']' after a bound");
    if (bound.n != rank) fail(P, lb, "expected %d bound%s, found %d", rank, rank == 1 ? "" : "s", bound.n);
    cl |= KN_MEM_BOUNDS;
  }
  cl |= parse_mask_other(P, !is_store, true, &mask, &other);
  /* the last clause: a load's off32, a store's atomic_add */
  const char *last = is_store ? "atomic_add" : "off32", *other_last = is_store ? "off32" : "atomic_add";
  if (is_word(P, other_last))
    fail(P, P->tok.loc, "%s has no '%s' clause (a %s's)", is_store ? "store" : "load", other_last,
         is_store ? "load" : "store");
  if (is_word(P, last)) {
    next(P);
    cl |= is_store ? KN_MEM_ATOMIC_ADD : KN_MEM_OFF32;
    if (is_word(P, "bounds") || is_word(P, "mask") || is_word(P, "other") || is_word(P, last))
      fail(P, P->tok.loc, "clause '%.*s' out of order or repeated (the order is bounds, mask, "
           "%s%s)", (int)P->tok.n, P->tok.s, is_store ? "" : "other, ", last);
  }
  kn_type rt = {0};
  if (!is_store) rt = result_type(P);
  kn_opnds o = {0};
  append(P, &o, &base);
  append(P, &o, &off);
  append(P, &o, &stride);
  append(P, &o, &bound);
  append(P, &o, &value);
  append(P, &o, &mask);
  append(P, &o, &other);
  kn_op *op = build(P, b, opc, oploc, &o, is_store ? 0 : 1, &rt);
  op->iattr[0] = rank;
  op->iattr[1] = cl;
  bind_results(P, r, op);
}

static void parse_call(kn_parser *P, kn_builder *b, kn_loc oploc, const kn_results *r) {
  if (P->tok.k != T_FUNC) expected(P, "the callee '@name'");
  const char *callee = kn_arena_strndup(P->m->arena, P->tok.s + 1, P->tok.n - 1);
  next(P);
  expect(P, T_LPAREN, "'(' after the callee");
  kn_opnds o = {0};
  if (P->tok.k != T_RPAREN) {
    use_list(P, &o);
    if (P->tok.k != T_RPAREN) expected(P, "',' or ')' after an argument");
  }
  next(P);
  kn_type *rt;
  int nt = result_types(P, r, "call", &rt);
  kn_op *op = build(P, b, KN_OP_CALL, oploc, &o, nt, rt);
  op->callee_name = callee;
  bind_results(P, r, op);
}

/* const <number> : T (the literal is read once the type says whether it is a float) */
static void parse_const(kn_parser *P, kn_builder *b, kn_loc oploc, const kn_results *r) {
  kn_tok lit = P->tok;
  if (lit.k != T_NUM && !is_word(P, "inf") && !is_word(P, "nan")) expected(P, "a number");
  next(P);
  kn_type rt = result_type(P);
  kn_opnds o = {0};
  kn_op *op = build(P, b, KN_OP_CONST, oploc, &o, 1, &rt);
  if (kn_scalar_is_float((kn_scalar)rt.elem)) {
    op->fattr = float_text(P, &lit);
  } else {
    int64_t v;
    if (lit.k != T_NUM || !int_text(P, lit.s, lit.n, lit.loc, &v))
      fail(P, lit.loc, "expected an integer for a const of an integer type, found '%.*s'",
           (int)(lit.n > 40 ? 40 : lit.n), lit.s);
    op->iattr[0] = v;
  }
  bind_results(P, r, op);
}

/* the predicate of cmp */
static int64_t parse_pred(kn_parser *P) {
  if (P->tok.k != T_IDENT) expected(P, "a predicate (eq, ne, lt, le, gt, ge)");
  int p = kn_pred_from_name(P->tok.s, P->tok.n);
  if (p < 0)
    fail(P, P->tok.loc, "unknown predicate '%.*s' (expected eq, ne, lt, le, gt, ge)",
         (int)(P->tok.n > 40 ? 40 : P->tok.n), P->tok.s);
  next(P);
  return p;
}

/* "%a, %b =" before an op name (nothing when the op has no results) */
static kn_results parse_result_names(kn_parser *P) {
  kn_results r = {0};
  if (P->tok.k != T_VALUE) return r;
  int cap = 4;
  r.ent = kn_arena_alloc(P->tmp, sizeof(int) * (size_t)cap);
  r.first = P->tok.loc;
  for (;;) {
    if (r.n == cap) {
      if (cap >= KN_PARSE_MAX_LIST) fail(P, P->tok.loc, "too many results");
      int *ne = kn_arena_alloc(P->tmp, sizeof(int) * (size_t)cap * 2);
      memcpy(ne, r.ent, sizeof(int) * (size_t)r.n);
      r.ent = ne, cap *= 2;
    }
    r.ent[r.n++] = name_reserve(P, &P->tok);
    next(P);
    if (P->tok.k != T_COMMA) break;
    next(P);
    if (P->tok.k != T_VALUE) expected(P, "a result name '%name' after ','");
  }
  expect(P, T_EQ, "'=' or ',' after a result name");
  return r;
}

/* one op: its operand syntax is the one of its class in the op table (kn_syntax) */
static void parse_op(kn_parser *P, kn_builder *b) {
  kn_results r = parse_result_names(P);
  if (P->tok.k != T_IDENT) expected(P, r.n ? "an op name" : "an op or '}'");
  int opc = kn_opcode_from_name(P->tok.s, P->tok.n);
  if (opc < 0) fail(P, P->tok.loc, "unknown op '%.*s'", (int)(P->tok.n > 40 ? 40 : P->tok.n), P->tok.s);
  kn_loc oploc = P->tok.loc;
  const kn_opinfo *info = &kn_opinfo_table[opc];
  next(P);

  /* result counts fixed by the op table are checked before its operands */
  if (info->nres >= 0 && r.n != info->nres) {
    if (info->nres == 0) fail(P, r.first, "'%s' has no results", info->name);
    fail(P, r.n ? r.first : oploc, "'%s' has %d result, but %d result name%s given", info->name,
         info->nres, r.n, r.n == 1 ? " is" : "s are");
  }

  kn_opnds o = {0};
  kn_type rt;
  kn_op *op;
  int64_t a0 = 0, a1 = 0;
  char what[64];
  snprintf(what, sizeof what, "an integer attribute of '%s'", info->name);
  switch (info->syntax) {
  case KN_SYN_INT:
    a0 = parse_int(P, what);
    break;
  case KN_SYN_CONST:
    parse_const(P, b, oploc, &r);
    goto end;
  case KN_SYN_RANGE:
    a0 = parse_int(P, "the start of the range");
    expect(P, T_COMMA, "',' after the start");
    a1 = parse_int(P, "the end of the range");
    break;
  case KN_SYN_OPERAND_INT:
    use(P, &o, "an operand '%name'");
    expect(P, T_COMMA, "',' after operand");
    a0 = parse_int(P, what);
    break;
  case KN_SYN_CMP:
    a0 = parse_pred(P);
    use(P, &o, "an operand '%name'");
    expect(P, T_COMMA, "',' after operand");
    use(P, &o, "an operand '%name'");
    break;
  case KN_SYN_MEM:
    parse_mem(P, b, (kn_opcode)opc, oploc, &r);
    goto end;
  case KN_SYN_GATHER:
    parse_gather(P, b, oploc, &r);
    goto end;
  case KN_SYN_FOR:
  case KN_SYN_IF:
    if (P->depth >= KN_PARSE_MAX_DEPTH) fail(P, oploc, "regions nested too deeply (limit %d)", KN_PARSE_MAX_DEPTH);
    P->depth++;
    if (info->syntax == KN_SYN_FOR) parse_for(P, b, oploc, &r);
    else parse_if(P, b, oploc, &r);
    P->depth--;
    goto end;
  case KN_SYN_CALL:
    parse_call(P, b, oploc, &r);
    goto end;
  case KN_SYN_VALUES:
    if (P->tok.k == T_VALUE) use_list(P, &o);
    build(P, b, (kn_opcode)opc, oploc, &o, 0, NULL);
    goto end;
  case KN_SYN_OPERANDS:
    /* the fixed-arity operand forms: %a or %a, %b or %a, %b, %c */
    KN_ASSERT(info->nopnd >= 1 && info->nopnd <= 3);
    for (int i = 0; i < info->nopnd; i++) {
      if (i) expect(P, T_COMMA, "',' after operand");
      use(P, &o, "an operand '%name'");
    }
    break;
  }
  KN_ASSERT(info->nres == 1 && o.n == (info->nopnd < 0 ? 0 : info->nopnd));
  rt = result_type(P);
  op = build(P, b, (kn_opcode)opc, oploc, &o, 1, &rt);
  op->iattr[0] = a0;
  op->iattr[1] = a1;
  bind_results(P, &r, op);
end:
  expect_eol(P, "end of line after the op");
}

static void parse_block(kn_parser *P, kn_builder *b) {
  for (;;) {
    while (P->tok.k == T_NL) next(P);
    if (P->tok.k == T_RBRACE) return;
    if (P->tok.k == T_EOF) expected(P, "an op or '}'");
    parse_op(P, b);
  }
}

/* ---- functions ---------------------------------------------------------------------------------- */

static void parse_func(kn_parser *P) {
  bool is_kernel = is_word(P, "kernel");
  if (!is_kernel && !is_word(P, "func")) expected(P, "'kernel' or 'func'");
  next(P);
  if (P->tok.k != T_FUNC) expected(P, "a function name '@name'");
  kn_loc floc = P->tok.loc;
  char *name = kn_arena_strndup(P->tmp, P->tok.s + 1, P->tok.n - 1);
  if (kn_module_find(P->m, name)) fail(P, floc, "redefinition of function '@%s'", name);
  next(P);
  expect(P, T_LPAREN, "'(' after the function name");

  names_reset(P);
  int np = 0, cap = 8;
  kn_type *pt = kn_arena_alloc(P->tmp, sizeof *pt * (size_t)cap);
  int *pe = kn_arena_alloc(P->tmp, sizeof *pe * (size_t)cap);
  if (P->tok.k != T_RPAREN) {
    for (;;) {
      if (P->tok.k != T_VALUE) expected(P, "a parameter name '%name'");
      if (np == cap) {
        if (cap >= KN_PARSE_MAX_LIST) fail(P, P->tok.loc, "too many parameters");
        kn_type *nt = kn_arena_alloc(P->tmp, sizeof *nt * (size_t)cap * 2);
        int *ne = kn_arena_alloc(P->tmp, sizeof *ne * (size_t)cap * 2);
        memcpy(nt, pt, sizeof *pt * (size_t)np);
        memcpy(ne, pe, sizeof *pe * (size_t)np);
        pt = nt, pe = ne, cap *= 2;
      }
      pe[np] = name_reserve(P, &P->tok);
      next(P);
      expect(P, T_COLON, "':' after the parameter name");
      pt[np++] = parse_type(P);
      if (P->tok.k == T_RPAREN) break;
      expect(P, T_COMMA, "',' or ')' after a parameter");
    }
  }
  next(P);

  int nret = 0;
  kn_type *ret = NULL;
  if (P->tok.k == T_ARROW) {
    next(P);
    if (P->tok.k == T_LPAREN) {
      next(P);
      if (P->tok.k != T_RPAREN) nret = parse_types(P, &ret);
      expect(P, T_RPAREN, "',' or ')' after a result type");
    } else {
      nret = parse_types(P, &ret);
    }
  }

  int nmeta = 0;
  kn_tok *keys = NULL;
  int64_t *vals = NULL;
  if (is_word(P, "attrs")) {
    next(P);
    expect(P, T_LBRACE, "'{' after 'attrs'");
    int mcap = 8;
    keys = kn_arena_alloc(P->tmp, sizeof *keys * (size_t)mcap);
    vals = kn_arena_alloc(P->tmp, sizeof *vals * (size_t)mcap);
    kn_strmap seen = {.arena = P->tmp};
    for (;;) {
      if (P->tok.k != T_IDENT) expected(P, "an attribute name");
      if (kn_strmap_put(&seen, P->tok.s, P->tok.n, nmeta) >= 0)
        fail(P, P->tok.loc, "duplicate attribute '%.*s'", (int)(P->tok.n > 40 ? 40 : P->tok.n), P->tok.s);
      if (nmeta == mcap) {
        if (mcap >= KN_PARSE_MAX_LIST) fail(P, P->tok.loc, "too many attributes");
        kn_tok *nk = kn_arena_alloc(P->tmp, sizeof *nk * (size_t)mcap * 2);
        int64_t *nv = kn_arena_alloc(P->tmp, sizeof *nv * (size_t)mcap * 2);
        memcpy(nk, keys, sizeof *keys * (size_t)nmeta);
        memcpy(nv, vals, sizeof *vals * (size_t)nmeta);
        keys = nk, vals = nv, mcap *= 2;
      }
      keys[nmeta] = P->tok;
      next(P);
      expect(P, T_EQ, "'=' after the attribute name");
      vals[nmeta++] = parse_int(P, "an integer attribute value");
      if (P->tok.k == T_RBRACE) break;
      expect(P, T_COMMA, "',' or '}' after an attribute");
    }
    next(P);
  }
  expect(P, T_LBRACE, "'{' to open the function body");
  expect_eol(P, "end of line after '{'");

  kn_func *f = kn_func_new(P->m, name, is_kernel, np, pt, NULL, nret, ret);
  f->loc = floc;
  for (int i = 0; i < nmeta; i++) /* (no duplicates: checked above) */
    kn_func_add_meta(f, kn_arena_strndup(P->tmp, keys[i].s, keys[i].n), vals[i]);
  for (int i = 0; i < np; i++) name_bind(P, pe[i], f->body->args[i]);

  kn_builder b = kn_builder_at_end(P->m, f->body);
  parse_block(P, &b);
  expect(P, T_RBRACE, "'}'");
  expect_eol(P, "end of line after the function");
}

/* the whole text; false after an error (the setjmp lives here, in a frame that holds nothing
 * but P, so no local can be clobbered by the longjmp) */
static bool parse_all(kn_parser *P) {
  if (setjmp(P->fail)) return false;
  next(P);
  for (;;) {
    while (P->tok.k == T_NL) next(P);
    if (P->tok.k == T_EOF) return true;
    parse_func(P);
  }
}

int kn_parse_into(kn_module *m, const char *filename, const char *text, size_t len, kn_diag *d) {
  KN_ASSERT(m && !m->source);
  if (!filename) filename = m->filename;
  if (!text) len = 0;
  if (len > KN_PARSE_MAX_BYTES)
    return kn_error(d, NULL, (kn_loc){.file = filename}, "the text is %zu bytes, more than the "
                    "parser takes (%zu MiB)", len, KN_PARSE_MAX_BYTES >> 20);
  m->source = kn_arena_strndup(m->arena, len ? text : "", len);
  kn_parser P = {.m = m, .d = d, .tmp = kn_arena_new(), .file = kn_arena_strndup(m->arena, filename, strlen(filename)),
                 .p = m->source, .end = m->source + len, .line = 1, .col = 1};
  bool ok = parse_all(&P);
  kn_arena_free(P.tmp);
  return ok ? 0 : -1;
}

kn_module *kn_parse(const char *filename, const char *text, size_t len, kn_diag *d) {
  if (!filename) filename = "<input>";
  kn_module *m = kn_module_new(filename);
  if (kn_parse_into(m, filename, text, len, d) == 0) return m;
  kn_module_free(m);
  /* the diagnostic outlives the module: point it at the caller's file name */
  if (d) d->loc.file = filename;
  return NULL;
}
