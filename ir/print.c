/* print.c — the canonical text form of a module (grammar: docs/ir.md).
 *
 * The output is what kn_parse() reads back to the same module, and for canonical text
 * print(parse(x)) == x.  It is deterministic (it is also the key of the compile cache): values
 * keep their names; unnamed values are numbered %0, %1, ... per function in the order they appear
 * in the text, skipping numbers that some value already uses as its name.  Built IR may carry
 * names the parser would reject (two values called "acc", or odd characters): a later duplicate
 * becomes "acc.1", "acc.2", ... and a character outside [A-Za-z0-9_.] becomes '_', so the output
 * always parses.  The printer does not verify; for IR the verifier would reject it still prints
 * what it can (an operand it cannot name shows as %<undefined>) without reading out of bounds.
 *
 * Each op's operands print in the form of its syntax class in ops.def (kn_syntax), the same
 * table the parser reads them by.
 *
 * Floats print in the shortest %.{1..17}g form that strtod reads back to the same bits, which
 * assumes the C locale's '.' decimal point (as does the parser's strtod).
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* ---- output buffer ---------------------------------------------------------------------------- */

typedef struct kn_sb {
  char *s;
  size_t n, cap;
  bool oom;  /* a failed malloc: kn_print returns NULL */
} kn_sb;

static void sb_put(kn_sb *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + n + 1) cap *= 2;
    char *ns = realloc(b->s, cap);
    if (!ns) {
      b->oom = true;
      return;
    }
    b->s = ns, b->cap = cap;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
}

static void sb_str(kn_sb *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_fmt(kn_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(kn_sb *b, const char *fmt, ...) {
  char buf[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n > 0) sb_put(b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* ---- value names ------------------------------------------------------------------------------- */

typedef struct kn_printer {
  kn_sb out;
  kn_arena *tmp;  /* names and tables of the function being printed */
  /* value -> printed name (open addressing on the pointer) */
  const kn_value **vkeys;
  const char **vnames;
  size_t vcap;
  /* the set of names taken in this function */
  const char **taken;
  size_t tcap, tn;
  /* values of the function in text order */
  const kn_value **order;
  size_t norder, caporder;
} kn_printer;

static size_t ptr_hash(const void *p) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 17;
  x *= (uintptr_t)0x9E3779B97F4A7C15ull;
  return (size_t)(x ^ (x >> 29));
}

static size_t str_hash(const char *s) {
  size_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool taken_has(const kn_printer *P, const char *s) {
  for (size_t i = str_hash(s) & (P->tcap - 1);; i = (i + 1) & (P->tcap - 1)) {
    if (!P->taken[i]) return false;
    if (strcmp(P->taken[i], s) == 0) return true;
  }
}

static void taken_add(kn_printer *P, const char *s) {
  if ((P->tn + 1) * 2 > P->tcap) {
    size_t cap = P->tcap ? P->tcap * 2 : 64;
    const char **old = P->taken;
    size_t oldcap = P->tcap;
    P->taken = kn_arena_alloc(P->tmp, sizeof *P->taken * cap);
    P->tcap = cap;
    P->tn = 0;
    for (size_t i = 0; i < oldcap; i++)
      if (old[i]) taken_add(P, old[i]);
  }
  size_t i = str_hash(s) & (P->tcap - 1);
  while (P->taken[i]) {
    if (strcmp(P->taken[i], s) == 0) return;
    i = (i + 1) & (P->tcap - 1);
  }
  P->taken[i] = s;
  P->tn++;
}

static const char *name_of(const kn_printer *P, const kn_value *v) {
  if (!v || !P->vcap) return NULL;
  for (size_t i = ptr_hash(v) & (P->vcap - 1);; i = (i + 1) & (P->vcap - 1)) {
    if (!P->vkeys[i]) return NULL;
    if (P->vkeys[i] == v) return P->vnames[i];
  }
}

static void collect(kn_printer *P, const kn_value *v) {
  if (!v) return;
  if (P->norder == P->caporder) {
    size_t cap = P->caporder ? P->caporder * 2 : 64;
    const kn_value **no = kn_arena_alloc(P->tmp, sizeof *no * cap);
    if (P->norder) memcpy(no, P->order, sizeof *no * P->norder);
    P->order = no, P->caporder = cap;
  }
  P->order[P->norder++] = v;
}

/* text order: an op's results come before the values of its regions (they are written first) */
static void collect_block(kn_printer *P, const kn_block *b) {
  if (!b) return;
  for (int i = 0; i < b->nargs; i++) collect(P, b->args[i]);
  for (const kn_op *op = b->first; op; op = op->next) {
    for (int i = 0; i < op->nres; i++) collect(P, op->res[i]);
    for (int r = 0; r < op->nregion && r < 2; r++) collect_block(P, op->region[r]);
  }
}

/* the name as the parser accepts it: [A-Za-z0-9_.]+, or NULL to number the value */
static char *clean_name(kn_printer *P, const char *s) {
  if (!s || !*s) return NULL;
  char *c = kn_arena_strdup(P->tmp, s);
  for (char *q = c; *q; q++) {
    unsigned char ch = (unsigned char)*q;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.';
    if (!ok) *q = '_';
  }
  return c;
}

static void name_values(kn_printer *P, const kn_func *f) {
  /* the tables live in P->tmp, which is new for each function */
  P->order = NULL;
  P->norder = P->caporder = 0;
  P->tn = 0;
  P->tcap = 0;
  P->taken = NULL;
  collect_block(P, f->body);
  size_t n = P->norder;
  char **clean = kn_arena_alloc(P->tmp, sizeof *clean * (n ? n : 1));
  for (size_t i = 0; i < n; i++) clean[i] = clean_name(P, P->order[i]->name);
  /* every written name is taken up front, so neither a number nor a ".k" suffix collides with
   * a name that appears later in the function */
  taken_add(P, "");
  for (size_t i = 0; i < n; i++)
    if (clean[i]) taken_add(P, clean[i]);
  /* G: the names given out so far, to spot a later duplicate */
  kn_printer G = {.tmp = P->tmp};
  taken_add(&G, "");
  const char **assigned = kn_arena_alloc(P->tmp, sizeof *assigned * (n ? n : 1));
  size_t counter = 0;
  char buf[32];
  for (size_t i = 0; i < n; i++) {
    const char *nm = clean[i];
    if (nm && !taken_has(&G, nm)) {
      assigned[i] = nm;
    } else if (nm) {
      size_t len = strlen(nm);
      char *cand = kn_arena_alloc(P->tmp, len + 24);
      for (size_t k = 1;; k++) {
        snprintf(cand, len + 24, "%s.%zu", nm, k);
        if (!taken_has(P, cand)) break;
      }
      assigned[i] = cand;
      taken_add(P, cand);
    } else {
      for (;; counter++) {
        snprintf(buf, sizeof buf, "%zu", counter);
        if (!taken_has(P, buf)) break;
      }
      counter++;
      assigned[i] = kn_arena_strdup(P->tmp, buf);
      taken_add(P, assigned[i]);
    }
    taken_add(&G, assigned[i]);
  }
  /* the value -> name table */
  size_t cap = 64;
  while (cap < 2 * n + 2) cap *= 2;
  P->vkeys = kn_arena_alloc(P->tmp, sizeof *P->vkeys * cap);
  P->vnames = kn_arena_alloc(P->tmp, sizeof *P->vnames * cap);
  P->vcap = cap;
  for (size_t i = 0; i < n; i++) {
    size_t j = ptr_hash(P->order[i]) & (cap - 1);
    while (P->vkeys[j] && P->vkeys[j] != P->order[i]) j = (j + 1) & (cap - 1);
    P->vkeys[j] = P->order[i];
    P->vnames[j] = assigned[i];
  }
}

/* ---- pieces ------------------------------------------------------------------------------------ */

static void put_value(kn_printer *P, const kn_value *v) {
  const char *n = name_of(P, v);
  sb_str(&P->out, "%");
  sb_str(&P->out, n ? n : "<undefined>");
}

static void put_type(kn_printer *P, kn_type t) {
  char buf[64];
  kn_ty_format(t, buf, sizeof buf);
  sb_str(&P->out, buf);
}

static void put_types(kn_printer *P, const kn_type *t, int n) {
  for (int i = 0; i < n; i++) {
    if (i) sb_str(&P->out, ", ");
    put_type(P, t[i]);
  }
}

static void put_result_types(kn_printer *P, const kn_op *op) {
  for (int i = 0; i < op->nres; i++) {
    sb_str(&P->out, i ? ", " : " : ");
    put_type(P, op->res[i]->type);
  }
}

/* operands [from, to) separated by ", " */
static void put_opnds(kn_printer *P, const kn_op *op, int from, int to) {
  for (int i = from; i < to && i < op->nopnd; i++) {
    if (i > from) sb_str(&P->out, ", ");
    put_value(P, op->opnd[i]);
  }
}

/* the shortest %.{1..17}g text that reads back to the same bits (so -0 stays -0); the lowest
 * precision that round-trips is not always the shortest text: 240 is "2.4e+02" at %.2g */
static void put_double(kn_printer *P, double x) {
  if (isnan(x)) {
    sb_str(&P->out, "nan");
    return;
  }
  if (isinf(x)) {
    sb_str(&P->out, x < 0 ? "-inf" : "inf");
    return;
  }
  char best[40] = "", buf[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, x);
    double y = strtod(buf, NULL);
    if (memcmp(&x, &y, sizeof x) == 0 && (!best[0] || strlen(buf) < strlen(best)))
      memcpy(best, buf, sizeof buf);
  }
  sb_str(&P->out, best);
}

static void indent(kn_printer *P, int level) {
  for (int i = 0; i < level; i++) sb_str(&P->out, "  ");
}

static void put_block(kn_printer *P, const kn_block *b, int level);

/* the " mask %m" and " other %x" clauses of load, store and gather (each may be NULL) */
static void put_mask_other(kn_printer *P, const kn_value *mask, const kn_value *other) {
  if (mask) {
    sb_str(&P->out, " mask ");
    put_value(P, mask);
  }
  if (other) {
    sb_str(&P->out, " other ");
    put_value(P, other);
  }
}

/* load/store in their bracket form, or false when the operand count does not match the clauses */
static bool put_mem(kn_printer *P, const kn_op *op) {
  bool store = op->opc == KN_OP_STORE;
  int64_t r = op->iattr[0];
  unsigned cl = (unsigned)op->iattr[1];
  if (r < 1 || r > KN_MAX_RANK) return false;
  int want = 1 + 2 * (int)r + (cl & KN_MEM_BOUNDS ? (int)r : 0) + (store ? 1 : 0) +
             (cl & KN_MEM_MASK ? 1 : 0) + (!store && (cl & KN_MEM_OTHER) ? 1 : 0);
  if (want != op->nopnd) return false;
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  sb_str(&P->out, " ");
  if (store) {
    put_value(P, mo.value);
    sb_str(&P->out, ", ");
  }
  put_value(P, mo.base);
  const char *pre[3] = {"[", " strides [", " bounds ["};
  kn_value *const *lists[3] = {mo.off, mo.stride, mo.bound};
  for (int l = 0; l < 3; l++) {
    if (l == 2 && !(cl & KN_MEM_BOUNDS)) break;
    sb_str(&P->out, pre[l]);
    for (int i = 0; i < r; i++) {
      if (i) sb_str(&P->out, ", ");
      put_value(P, lists[l][i]);
    }
    sb_str(&P->out, "]");
  }
  put_mask_other(P, mo.mask, mo.other);
  if (!store && (cl & KN_MEM_OFF32)) sb_str(&P->out, " off32");
  if (store && (cl & KN_MEM_ATOMIC_ADD)) sb_str(&P->out, " atomic_add");
  return true;
}

/* gather in its bracket form, or false when the operand count does not match the clauses */
static bool put_gather(kn_printer *P, const kn_op *op) {
  unsigned cl = (unsigned)op->iattr[0];
  if (cl & ~(unsigned)(KN_MEM_MASK | KN_MEM_OTHER) ||
      op->nopnd != 2 + (cl & KN_MEM_MASK ? 1 : 0) + (cl & KN_MEM_OTHER ? 1 : 0))
    return false;
  kn_gather_operands go;
  kn_gather_operands_get(op, &go);
  sb_str(&P->out, " ");
  put_value(P, go.base);
  sb_str(&P->out, "[");
  put_value(P, go.offsets);
  sb_str(&P->out, "]");
  put_mask_other(P, go.mask, go.other);
  return true;
}

static void put_for(kn_printer *P, const kn_op *op, int level) {
  const kn_block *r0 = op->nregion >= 1 ? op->region[0] : NULL;
  sb_str(&P->out, " ");
  if (r0 && r0->nargs >= 1) put_value(P, r0->args[0]);
  else sb_str(&P->out, "%<missing>");
  const char *kw[3] = {" = ", " to ", " step "};
  for (int i = 0; i < 3; i++) {
    sb_str(&P->out, kw[i]);
    if (i < op->nopnd) put_value(P, op->opnd[i]);
    else sb_str(&P->out, "%<missing>");
  }
  int niter = r0 && r0->nargs > 1 ? r0->nargs - 1 : 0;
  if (op->nopnd - 3 > niter) niter = op->nopnd - 3;
  if (niter > 0) {
    sb_str(&P->out, " iter (");
    for (int i = 0; i < niter; i++) {
      if (i) sb_str(&P->out, ", ");
      if (r0 && 1 + i < r0->nargs) put_value(P, r0->args[1 + i]);
      else sb_str(&P->out, "%<missing>");
      sb_str(&P->out, " = ");
      if (3 + i < op->nopnd) put_value(P, op->opnd[3 + i]);
      else sb_str(&P->out, "%<missing>");
    }
    sb_str(&P->out, ")");
  }
  put_result_types(P, op);
  sb_str(&P->out, " {\n");
  put_block(P, r0, level + 1);
  indent(P, level);
  sb_str(&P->out, "}\n");
}

static void put_if(kn_printer *P, const kn_op *op, int level) {
  sb_str(&P->out, " ");
  put_opnds(P, op, 0, op->nopnd);
  put_result_types(P, op);
  sb_str(&P->out, " {\n");
  put_block(P, op->nregion >= 1 ? op->region[0] : NULL, level + 1);
  indent(P, level);
  sb_str(&P->out, "} else {\n");
  put_block(P, op->nregion >= 2 ? op->region[1] : NULL, level + 1);
  indent(P, level);
  sb_str(&P->out, "}\n");
}

/* everything after the op name but the result types, in the form of the op's syntax class */
static void put_operands(kn_printer *P, const kn_op *op, kn_syntax syn) {
  switch (syn) {
  case KN_SYN_INT:
    sb_fmt(&P->out, " %" PRId64, op->iattr[0]);
    return;
  case KN_SYN_CONST:
    sb_str(&P->out, " ");
    if (op->nres >= 1 && kn_scalar_is_float((kn_scalar)op->res[0]->type.elem))
      put_double(P, op->fattr);
    else
      sb_fmt(&P->out, "%" PRId64, op->iattr[0]);
    return;
  case KN_SYN_RANGE:
    sb_fmt(&P->out, " %" PRId64 ", %" PRId64, op->iattr[0], op->iattr[1]);
    return;
  case KN_SYN_OPERAND_INT:
    sb_str(&P->out, " ");
    put_opnds(P, op, 0, op->nopnd);
    sb_fmt(&P->out, ", %" PRId64, op->iattr[0]);
    return;
  case KN_SYN_CMP:
    sb_fmt(&P->out, " %s ", kn_pred_name((kn_pred)op->iattr[0]));
    put_opnds(P, op, 0, op->nopnd);
    return;
  case KN_SYN_MEM:
  case KN_SYN_GATHER:
    if (!(syn == KN_SYN_MEM ? put_mem(P, op) : put_gather(P, op))) {
      sb_str(&P->out, " <malformed> ");
      put_opnds(P, op, 0, op->nopnd);
    }
    return;
  case KN_SYN_CALL:
    sb_str(&P->out, " @");
    sb_str(&P->out, op->callee_name ? op->callee_name : op->callee ? op->callee->name : "<none>");
    sb_str(&P->out, "(");
    put_opnds(P, op, 0, op->nopnd);
    sb_str(&P->out, ")");
    return;
  case KN_SYN_OPERANDS:
  case KN_SYN_VALUES:
  case KN_SYN_FOR:  /* (put_op prints for and if itself) */
  case KN_SYN_IF:
    if (op->nopnd) sb_str(&P->out, " ");
    put_opnds(P, op, 0, op->nopnd);
    return;
  }
}

static void put_op(kn_printer *P, const kn_op *op, int level) {
  indent(P, level);
  for (int i = 0; i < op->nres; i++) {
    if (i) sb_str(&P->out, ", ");
    put_value(P, op->res[i]);
  }
  if (op->nres) sb_str(&P->out, " = ");
  bool known = (unsigned)op->opc < KN_OP_COUNT;
  sb_str(&P->out, known ? kn_opinfo_table[op->opc].name : "<unknown op>");
  kn_syntax syn = known ? kn_opinfo_table[op->opc].syntax : KN_SYN_OPERANDS;
  if (syn == KN_SYN_FOR) {
    put_for(P, op, level);
    return;
  }
  if (syn == KN_SYN_IF) {
    put_if(P, op, level);
    return;
  }
  put_operands(P, op, syn);
  put_result_types(P, op);
  sb_str(&P->out, "\n");
}

static void put_block(kn_printer *P, const kn_block *b, int level) {
  if (!b) return;
  for (const kn_op *op = b->first; op; op = op->next) put_op(P, op, level);
}

static void put_func(kn_printer *P, const kn_func *f) {
  name_values(P, f);
  sb_str(&P->out, f->is_kernel ? "kernel @" : "func @");
  sb_str(&P->out, f->name ? f->name : "<unnamed>");
  sb_str(&P->out, "(");
  const kn_block *body = f->body;
  for (int i = 0; body && i < body->nargs; i++) {
    if (i) sb_str(&P->out, ", ");
    put_value(P, body->args[i]);
    sb_str(&P->out, ": ");
    put_type(P, body->args[i]->type);
  }
  sb_str(&P->out, ")");
  if (f->nret > 0) {
    sb_str(&P->out, " -> (");
    put_types(P, f->ret, f->nret);
    sb_str(&P->out, ")");
  }
  for (int i = 0; i < f->nmeta; i++) {
    sb_str(&P->out, i ? ", " : " attrs {");
    sb_str(&P->out, f->meta[i].key);
    sb_fmt(&P->out, " = %" PRId64, f->meta[i].value);
  }
  if (f->nmeta) sb_str(&P->out, "}");
  sb_str(&P->out, " {\n");
  put_block(P, body, 1);
  sb_str(&P->out, "}\n");
}

char *kn_print(const kn_module *m) {
  kn_printer P = {0};
  sb_put(&P.out, "", 0);  /* an empty module prints as "" rather than NULL */
  for (int i = 0; m && i < m->nfuncs; i++) {
    if (i) sb_str(&P.out, "\n");
    P.tmp = kn_arena_new();
    put_func(&P, m->funcs[i]);
    kn_arena_free(P.tmp);
    P.vcap = 0;
  }
  if (P.out.oom) {
    free(P.out.s);
    return NULL;
  }
  return P.out.s;
}
