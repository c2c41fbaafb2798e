/* interp.c — the reference interpreter: runs a kernel of the tile IR on host memory.
 *
 * It is the numeric oracle every kiln target is compared with, so it favours exactly specified
 * results over speed, but attention tests run whole (1000 x 1000, head dim 128) problems through
 * it, so the hot paths are plain loops over arrays:
 *  - kn_func_number() gives every value a dense id; each function has one frame, a slot array
 *    indexed by id.  A slot owns a buffer (doubles for float elements; int64 for ints, i1 and
 *    pointers, which hold host addresses) sized for its value's static type, allocated the first
 *    time the value is defined and reused on every later definition (loop iterations, programs).
 *    Scalars live inline in the slot.  Recursion is rejected by the verifier, so one frame per
 *    function suffices; a recursive call is still caught here and reported, not followed.
 *  - float results are rounded to their type after every op (kn_round_array, f32 by a cast);
 *  - ops dispatch once per op; the element loops below the switch have no per-element calls
 *    except where a format conversion is inherent (loads, stores, non-f32 rounding).
 *
 * It assumes a verified module (kn_verify) but never trusts it with memory: operand counts,
 * value ids, shapes of operands, offsets and every address a load or store touches are checked,
 * and a violation is reported through kn_diag at the op's location.  Library code: no printing.
 * The semantics are listed in docs/ir.md, section "Interpreter semantics".
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "numeric.h"
#include "op_cases.h"

/* one runtime value: n elements, doubles (float types) or int64 (ints, i1, pointers) */
typedef struct slot {
  void *heap;     /* buffer when cap > 0 */
  int64_t cap;    /* elements in heap; 0: the value is held inline */
  union {
    double f;
    int64_t i;
  } inl;
  bool set;       /* defined at least once */
} slot;

static inline double *F(slot *s) { return s->cap ? (double *)s->heap : &s->inl.f; }
static inline int64_t *I(slot *s) { return s->cap ? (int64_t *)s->heap : &s->inl.i; }

typedef struct frame {
  kn_func *f;
  slot *s;
  int n;
  bool active; /* executing now: a call to it again would be recursion */
} frame;

typedef struct interp {
  kn_module *m;
  kn_diag *d;
  kn_interp_stats st;
  const kn_region *reg;
  int nreg, last_reg;  /* last_reg: the region of the previous access, tried first */
  int pid[3], grid[3];
  bool grid_run;       /* running a kernel's programs (not kn_interp_fn_call): name the program */
  bool f64;            /* KN_INTERP_F64: floats are never rounded to their type */
  frame *frames;       /* one per module function, same index as m->funcs */
  float *scratch;      /* dot operands as f32 */
  size_t scratch_cap;
  const kn_op *ecall;  /* the elemental call running its callee, or NULL */
  int64_t eidx;        /* ... on this element of its shape */
  uint64_t steps, max_steps; /* ops executed; the budget (0: none) */
} interp;

/* ---- errors ---- */

static int rt_error(interp *in, const kn_op *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "[e]" or "[i, j]": element e (row-major) of a value of type t (a scalar is element [0]) */
static void elem_text(kn_type t, int64_t e, char *buf, size_t n) {
  if (t.kind == KN_TY_TILE && t.rank == 2)
    snprintf(buf, n, "[%lld, %lld]", (long long)(e / t.shape[1]), (long long)(e % t.shape[1]));
  else snprintf(buf, n, "[%lld]", (long long)e);
}

/* where the interpreter is, for the end of a message: the element of an elemental call being
 * run, and the program instance of a kernel run ("" for a function called by kn_interp_fn_call) */
static void where(const interp *in, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  if (in->ecall) {
    char el[64];
    elem_text(in->ecall->res[0]->type, in->eidx, el, sizeof el);
    k = (size_t)snprintf(buf, n, " (element %s of the elemental call at line %d)", el,
                         in->ecall->loc.line);
  }
  if (in->grid_run && k < n)
    snprintf(buf + k, n - k, " (program (%d,%d,%d))", in->pid[0], in->pid[1], in->pid[2]);
}

static int rt_error(interp *in, const kn_op *op, const char *fmt, ...) {
  char buf[400], w[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  where(in, w, sizeof w);
  kn_loc loc = op ? op->loc : (kn_loc){0};
  return kn_error(in->d, in->m, loc, "%s%s", buf, w);
}

/* a live element of a load, store or gather whose bytes are in no region */
static int oob_error(interp *in, const kn_op *op, const char *el, uint64_t addr) {
  char w[160];
  where(in, w, sizeof w);
  return kn_error(in->d, in->m, op->loc, "%s out of bounds: element %s at address 0x%llx%s is "
                  "outside every buffer", kn_opinfo_table[op->opc].name, el,
                  (unsigned long long)addr, w);
}

/* ---- slots ---- */

/* ty_float and numel are asked for every operand of every op, so they are inline here rather
 * than calls of kn_scalar_is_float and kn_ty_numel (kn_scalar lists the ints first, then the
 * floats) */
static inline int64_t numel(kn_type t) {
  if (t.kind != KN_TY_TILE) return 1;
  if (t.rank == 1) return t.shape[0];
  return t.rank == 2 ? (int64_t)t.shape[0] * t.shape[1] : kn_ty_numel(t);
}
static inline bool ty_float(kn_type t) {
  return t.kind != KN_TY_PTR && t.elem >= KN_F16 && t.elem < KN_SCALAR_COUNT;
}
/* the scalar type of the elements as the interpreter computes with them (pointers: i64) */
static inline kn_scalar ty_elem(kn_type t) {
  return t.kind == KN_TY_PTR ? KN_I64 : (kn_scalar)t.elem;
}

static int get(interp *in, frame *fr, const kn_op *op, const kn_value *v, slot **out) {
  if (!v || v->id < 0 || v->id >= fr->n)
    return rt_error(in, op, "internal: operand is not a value of function @%s", fr->f->name);
  slot *s = &fr->s[v->id];
  if (!s->set) return rt_error(in, op, "value used before its definition");
  *out = s;
  return 0;
}

/* the slot of v, holding room for its type's elements (contents unspecified) */
static int def(interp *in, frame *fr, const kn_op *op, const kn_value *v, slot **out) {
  if (!v || v->id < 0 || v->id >= fr->n)
    return rt_error(in, op, "internal: result is not a value of function @%s", fr->f->name);
  slot *s = &fr->s[v->id];
  int64_t n = numel(v->type);
  if (n < 0 || n > ((int64_t)1 << 40)) return rt_error(in, op, "tile too large");
  if (n > 1 && s->cap < n) {
    void *p = realloc(s->heap, (size_t)n * 8);
    if (!p) return rt_error(in, op, "out of memory for a tile of %lld elements", (long long)n);
    s->heap = p;
    s->cap = n;
  }
  s->set = true;
  *out = s;
  return 0;
}

/* dst := src (values of the same class and element count) */
static int copy_val(interp *in, frame *dfr, const kn_op *op, const kn_value *dst, frame *sfr,
                    const kn_value *src) {
  slot *s = NULL, *d = NULL;
  if (get(in, sfr, op, src, &s)) return -1;
  int64_t n = numel(dst->type);
  if (numel(src->type) != n || ty_float(src->type) != ty_float(dst->type))
    return rt_error(in, op, "internal: value of a mismatched type passed on");
  if (def(in, dfr, op, dst, &d)) return -1;
  if (s == d) return 0;
  if (ty_float(dst->type)) memmove(F(d), F(s), (size_t)n * sizeof(double));
  else memmove(I(d), I(s), (size_t)n * sizeof(int64_t));
  return 0;
}

/* ---- rounding ---- */

/* x rounded to float format t, or x itself in f64 mode */
static inline double rnd(const interp *in, kn_scalar t, double x) {
  return in->f64 ? x : kn_round(t, x);
}

static inline void round_to(const interp *in, kn_scalar t, double *x, int64_t n) {
  if (in->f64) return;
  if (t == KN_F32)
    for (int64_t i = 0; i < n; i++) x[i] = (double)(float)x[i];
  else kn_round_array(t, x, (size_t)n);
}

static inline void wrap_to(kn_scalar t, int64_t *x, int64_t n) {
  if (t == KN_I32)
    for (int64_t i = 0; i < n; i++) x[i] = (int32_t)(uint32_t)(uint64_t)x[i];
  else if (t == KN_I1)
    for (int64_t i = 0; i < n; i++) x[i] = x[i] != 0;
}

/* NaN-propagating max/min; +0 is above -0 */
static inline double fmax_nan(double a, double b) {
  if (a != a || b != b) return NAN;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}
static inline double fmin_nan(double a, double b) {
  if (a != a || b != b) return NAN;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}

/* ---- elementwise ---- */

/* operand element count must be the result's, or 1 (a scalar used with a tile) */
static int elt_stride(interp *in, const kn_op *op, const kn_value *v, int64_t n, int64_t *st) {
  int64_t k = numel(v->type);
  if (k == n) *st = 1;
  else if (k == 1) *st = 0;
  else return rt_error(in, op, "internal: operand shape does not match the result");
  return 0;
}

static int exec_binary(interp *in, frame *fr, kn_op *op) {
  slot *a = NULL, *b = NULL, *r = NULL;
  kn_value *rv = op->res[0];
  int64_t n = numel(rv->type), sa = 0, sb = 0;
  if (get(in, fr, op, op->opnd[0], &a) || get(in, fr, op, op->opnd[1], &b) ||
      elt_stride(in, op, op->opnd[0], n, &sa) || elt_stride(in, op, op->opnd[1], n, &sb) ||
      def(in, fr, op, rv, &r))
    return -1;
  kn_scalar t = ty_elem(rv->type);
  if (ty_float(rv->type)) {
    if (!ty_float(op->opnd[0]->type) || !ty_float(op->opnd[1]->type))
      return rt_error(in, op, "internal: operand class does not match the result");
    const double *x = F(a), *y = F(b);
    double *z = F(r);
#define FLOOP(expr)                                                       \
  do {                                                                    \
    if (sa == 1 && sb == 1)                                               \
      for (int64_t i = 0; i < n; i++) { double u = x[i], v = y[i]; z[i] = (expr); } \
    else                                                                  \
      for (int64_t i = 0; i < n; i++) { double u = x[i * sa], v = y[i * sb]; z[i] = (expr); } \
  } while (0)
    switch (op->opc) {
    case KN_OP_ADD: FLOOP(u + v); break;
    case KN_OP_SUB: FLOOP(u - v); break;
    case KN_OP_MUL: FLOOP(u * v); break;
    case KN_OP_DIV: FLOOP(u / v); break;
    case KN_OP_REM: FLOOP(fmod(u, v)); break;
    case KN_OP_MAX: FLOOP(fmax_nan(u, v)); break;
    case KN_OP_MIN: FLOOP(fmin_nan(u, v)); break;
    case KN_OP_AND: case KN_OP_OR: case KN_OP_XOR: case KN_OP_SHL: case KN_OP_SHR:
    KN_CASES_NOT_BINARY
      return rt_error(in, op, "'%s' is not defined on floats", kn_opinfo_table[op->opc].name);
    }
#undef FLOOP
    round_to(in, t, z, n);
    return 0;
  }
  if (ty_float(op->opnd[0]->type) || ty_float(op->opnd[1]->type))
    return rt_error(in, op, "internal: operand class does not match the result");
  const int64_t *x = I(a), *y = I(b);
  int64_t *z = I(r);
  int width = t == KN_I1 ? 1 : t == KN_I32 ? 32 : 64;
  /* add/sub/mul wrap: computed on uint64 (defined in C), then wrapped to the width */
#define ILOOP(expr)                                                                     \
  for (int64_t i = 0; i < n; i++) {                                                     \
    int64_t u = x[i * sa], v = y[i * sb];                                               \
    z[i] = (expr);                                                                      \
  }
  switch (op->opc) {
  case KN_OP_ADD: ILOOP((int64_t)((uint64_t)u + (uint64_t)v)); break;
  case KN_OP_SUB: ILOOP((int64_t)((uint64_t)u - (uint64_t)v)); break;
  case KN_OP_MUL: ILOOP((int64_t)((uint64_t)u * (uint64_t)v)); break;
  case KN_OP_DIV:
  case KN_OP_REM:
    for (int64_t i = 0; i < n; i++) {
      int64_t u = x[i * sa], v = y[i * sb];
      if (v == 0)
        return rt_error(in, op, "integer %s by zero (element %lld)",
                        op->opc == KN_OP_DIV ? "division" : "remainder", (long long)i);
      if (u == INT64_MIN && v == -1) z[i] = op->opc == KN_OP_DIV ? INT64_MIN : 0; /* wraps */
      else z[i] = op->opc == KN_OP_DIV ? u / v : u % v;
    }
    break;
  case KN_OP_MAX: ILOOP(u > v ? u : v); break;
  case KN_OP_MIN: ILOOP(u < v ? u : v); break;
  case KN_OP_AND: ILOOP(u & v); break;
  case KN_OP_OR: ILOOP(u | v); break;
  case KN_OP_XOR: ILOOP(u ^ v); break;
  case KN_OP_SHL:
  case KN_OP_SHR:
    for (int64_t i = 0; i < n; i++) {
      int64_t u = x[i * sa], v = y[i * sb];
      if (v < 0 || v >= width)
        return rt_error(in, op, "shift amount %lld out of range [0, %d) (element %lld)",
                        (long long)v, width, (long long)i);
      /* values are held sign-extended, so >> on int64 is the arithmetic shift of the width
       * (GCC and Clang define >> of a negative value as arithmetic) */
      z[i] = op->opc == KN_OP_SHL ? (int64_t)((uint64_t)u << v) : u >> v;
    }
    break;
  KN_CASES_NOT_BINARY
    return rt_error(in, op, "internal: '%s' is not a binary op", kn_opinfo_table[op->opc].name);
  }
#undef ILOOP
  wrap_to(t, z, n);
  return 0;
}

static int exec_unary(interp *in, frame *fr, kn_op *op) {
  slot *a = NULL, *r = NULL;
  kn_value *rv = op->res[0];
  int64_t n = numel(rv->type);
  if (get(in, fr, op, op->opnd[0], &a) || def(in, fr, op, rv, &r)) return -1;
  if (numel(op->opnd[0]->type) != n || ty_float(op->opnd[0]->type) != ty_float(rv->type))
    return rt_error(in, op, "internal: operand does not match the result");
  kn_scalar t = ty_elem(rv->type);
  if (ty_float(rv->type)) {
    const double *x = F(a);
    double *z = F(r);
#define ULOOP(expr) for (int64_t i = 0; i < n; i++) { double u = x[i]; z[i] = (expr); }
    switch (op->opc) {
    case KN_OP_NEG: ULOOP(-u); break;
    case KN_OP_ABS: ULOOP(fabs(u)); break;
    case KN_OP_EXP: ULOOP(exp(u)); break;
    case KN_OP_EXP2: ULOOP(exp2(u)); break;
    case KN_OP_LOG: ULOOP(log(u)); break;
    case KN_OP_LOG2: ULOOP(log2(u)); break;
    case KN_OP_SQRT: ULOOP(sqrt(u)); break;
    case KN_OP_RSQRT: ULOOP(1.0 / sqrt(u)); break;
    case KN_OP_TANH: ULOOP(tanh(u)); break;
    case KN_OP_NOT:
    KN_CASES_NOT_UNARY
      return rt_error(in, op, "'%s' is not defined on floats", kn_opinfo_table[op->opc].name);
    }
#undef ULOOP
    round_to(in, t, z, n);
    return 0;
  }
  const int64_t *x = I(a);
  int64_t *z = I(r);
  for (int64_t i = 0; i < n; i++) {
    int64_t u = x[i];
    switch (op->opc) {
    case KN_OP_NEG: z[i] = (int64_t)(0 - (uint64_t)u); break;
    case KN_OP_ABS: z[i] = u < 0 ? (int64_t)(0 - (uint64_t)u) : u; break;
    case KN_OP_NOT: z[i] = t == KN_I1 ? !u : ~u; break;
    KN_CASES_MATH
    KN_CASES_NOT_UNARY
      return rt_error(in, op, "'%s' is not defined on integers", kn_opinfo_table[op->opc].name);
    }
  }
  wrap_to(t, z, n);
  return 0;
}

static int exec_cmp(interp *in, frame *fr, kn_op *op) {
  slot *a = NULL, *b = NULL, *r = NULL;
  kn_value *rv = op->res[0];
  int64_t n = numel(rv->type), sa = 0, sb = 0;
  if (get(in, fr, op, op->opnd[0], &a) || get(in, fr, op, op->opnd[1], &b) ||
      elt_stride(in, op, op->opnd[0], n, &sa) || elt_stride(in, op, op->opnd[1], n, &sb) ||
      def(in, fr, op, rv, &r))
    return -1;
  if (ty_float(rv->type)) return rt_error(in, op, "internal: cmp result must be i1");
  bool fl = ty_float(op->opnd[0]->type);
  if (fl != ty_float(op->opnd[1]->type)) return rt_error(in, op, "internal: cmp of mixed types");
  int64_t *z = I(r);
  kn_pred p = (kn_pred)op->iattr[0];
  if (p < 0 || p >= KN_PRED_COUNT) return rt_error(in, op, "unknown predicate %lld", (long long)p);
  for (int64_t i = 0; i < n; i++) {
    bool c;
    if (fl) {
      /* C's comparisons are the ordered IEEE ones (false on NaN) and != is true on NaN */
      double u = F(a)[i * sa], v = F(b)[i * sb];
      switch (p) {
      case KN_PRED_EQ: c = u == v; break;
      case KN_PRED_NE: c = u != v; break;
      case KN_PRED_LT: c = u < v; break;
      case KN_PRED_LE: c = u <= v; break;
      case KN_PRED_GT: c = u > v; break;
      default: c = u >= v; break;
      }
    } else {
      int64_t u = I(a)[i * sa], v = I(b)[i * sb];
      switch (p) {
      case KN_PRED_EQ: c = u == v; break;
      case KN_PRED_NE: c = u != v; break;
      case KN_PRED_LT: c = u < v; break;
      case KN_PRED_LE: c = u <= v; break;
      case KN_PRED_GT: c = u > v; break;
      default: c = u >= v; break;
      }
    }
    z[i] = c;
  }
  return 0;
}

static int exec_select(interp *in, frame *fr, kn_op *op) {
  slot *c = NULL, *a = NULL, *b = NULL, *r = NULL;
  kn_value *rv = op->res[0];
  int64_t n = numel(rv->type), sc = 0, sa = 0, sb = 0;
  if (get(in, fr, op, op->opnd[0], &c) || get(in, fr, op, op->opnd[1], &a) ||
      get(in, fr, op, op->opnd[2], &b) || elt_stride(in, op, op->opnd[0], n, &sc) ||
      elt_stride(in, op, op->opnd[1], n, &sa) || elt_stride(in, op, op->opnd[2], n, &sb) ||
      def(in, fr, op, rv, &r))
    return -1;
  bool fl = ty_float(rv->type);
  if (ty_float(op->opnd[0]->type) || ty_float(op->opnd[1]->type) != fl ||
      ty_float(op->opnd[2]->type) != fl)
    return rt_error(in, op, "internal: select operand types");
  const int64_t *cc = I(c);
  if (fl) {
    const double *x = F(a), *y = F(b);
    double *z = F(r);
    for (int64_t i = 0; i < n; i++) z[i] = cc[i * sc] ? x[i * sa] : y[i * sb];
  } else {
    const int64_t *x = I(a), *y = I(b);
    int64_t *z = I(r);
    for (int64_t i = 0; i < n; i++) z[i] = cc[i * sc] ? x[i * sa] : y[i * sb];
  }
  return 0;
}

/* float -> int: truncate toward zero, NaN -> 0, saturate (kn_round on an int type) */
static int exec_cast(interp *in, frame *fr, kn_op *op) {
  slot *a = NULL, *r = NULL;
  kn_value *rv = op->res[0], *av = op->opnd[0];
  int64_t n = numel(rv->type);
  if (get(in, fr, op, av, &a) || def(in, fr, op, rv, &r)) return -1;
  if (numel(av->type) != n) return rt_error(in, op, "internal: cast changes the shape");
  kn_scalar to = ty_elem(rv->type);
  bool ff = ty_float(av->type), tf = ty_float(rv->type);
  if (ff && tf) {
    const double *x = F(a);
    double *z = F(r);
    if (x != z) memcpy(z, x, (size_t)n * sizeof *z);
    round_to(in, to, z, n);
  } else if (ff) {
    const double *x = F(a);
    int64_t *z = I(r);
    /* kn_round saturates into the int range, but for i64 the top of that range is 2^63 as a
     * double, one past INT64_MAX: converting it with a C cast would be undefined */
    for (int64_t i = 0; i < n; i++) {
      double v = kn_round(to, x[i]);
      z[i] = v >= 0x1p63 ? INT64_MAX : (int64_t)v;
    }
  } else if (tf) {
    const int64_t *x = I(a);
    double *z = F(r);
    for (int64_t i = 0; i < n; i++) z[i] = in->f64 ? (double)x[i] : kn_int_to_float(to, x[i]);
  } else {
    const int64_t *x = I(a);
    int64_t *z = I(r);
    if (x != z) memcpy(z, x, (size_t)n * sizeof *z);
    wrap_to(to, z, n);
  }
  return 0;
}

/* ---- tile construction ---- */

static bool already_set(frame *fr, const kn_value *v) {
  return v && v->id >= 0 && v->id < fr->n && fr->s[v->id].set;
}

static int exec_const(interp *in, frame *fr, kn_op *op) {
  kn_value *rv = op->res[0];
  slot *r = NULL;
  if (already_set(fr, rv)) return 0; /* written by its op only, and always the same */
  int64_t n = numel(rv->type);
  if (def(in, fr, op, rv, &r)) return -1;
  if (ty_float(rv->type)) {
    double v = rnd(in, ty_elem(rv->type), op->fattr), *z = F(r);
    for (int64_t i = 0; i < n; i++) z[i] = v;
  } else {
    int64_t v = kn_wrap_int(ty_elem(rv->type), op->iattr[0]), *z = I(r);
    for (int64_t i = 0; i < n; i++) z[i] = v;
  }
  return 0;
}

static int exec_arange(interp *in, frame *fr, kn_op *op) {
  kn_value *rv = op->res[0];
  slot *r = NULL;
  if (already_set(fr, rv)) return 0; /* depends on attributes only */
  int64_t n = numel(rv->type);
  if (ty_float(rv->type)) return rt_error(in, op, "internal: arange must give integers");
  if (def(in, fr, op, rv, &r)) return -1;
  int64_t *z = I(r);
  for (int64_t i = 0; i < n; i++) z[i] = op->iattr[0] + i;
  wrap_to(ty_elem(rv->type), z, n);
  return 0;
}

/* splat, broadcast, expand_dims, reshape, transpose: element moves without arithmetic.  The
 * operand and result slots, their class, and both shapes right-aligned to rank 2 ({1, n} for
 * rank 1, {1, 1} for a scalar). */
typedef struct moves {
  slot *a, *r;
  bool fl;
  int64_t n, na;
  int32_t as[2], rs[2];
} moves;

static int moves_begin(interp *in, frame *fr, kn_op *op, moves *m) {
  kn_value *rv = op->res[0], *av = op->opnd[0];
  kn_type at = av->type, rt = rv->type;
  m->n = numel(rt), m->na = numel(at);
  if (get(in, fr, op, av, &m->a) || def(in, fr, op, rv, &m->r)) return -1;
  if (ty_float(at) != ty_float(rt)) return rt_error(in, op, "internal: element class changes");
  m->fl = ty_float(rt);
  if (m->a == m->r) return rt_error(in, op, "internal: op reads its own result");
  int rr = rt.kind == KN_TY_TILE ? rt.rank : 0, ar = at.kind == KN_TY_TILE ? at.rank : 0;
  m->rs[0] = m->rs[1] = m->as[0] = m->as[1] = 1;
  for (int i = 0; i < rr; i++) m->rs[2 - rr + i] = rt.shape[i];
  for (int i = 0; i < ar; i++) m->as[2 - ar + i] = at.shape[i];
  return 0;
}

/* result element i := operand element s */
static inline void move(moves *m, int64_t i, int64_t s) {
  if (m->fl) F(m->r)[i] = F(m->a)[s];
  else I(m->r)[i] = I(m->a)[s];
}

static int exec_splat(interp *in, frame *fr, kn_op *op) {
  moves m;
  if (moves_begin(in, fr, op, &m)) return -1;
  if (m.na != 1) return rt_error(in, op, "internal: splat of a tile");
  for (int64_t i = 0; i < m.n; i++) move(&m, i, 0);
  return 0;
}

/* expand_dims, reshape: the same elements in the same (row-major) order */
static int exec_same_order(interp *in, frame *fr, kn_op *op) {
  moves m;
  if (moves_begin(in, fr, op, &m)) return -1;
  if (m.na != m.n)
    return rt_error(in, op, "internal: %s changes the element count", kn_opinfo_table[op->opc].name);
  for (int64_t i = 0; i < m.n; i++) move(&m, i, i);
  return 0;
}

static int exec_transpose(interp *in, frame *fr, kn_op *op) {
  moves m;
  if (moves_begin(in, fr, op, &m)) return -1;
  if (op->res[0]->type.rank != 2 || op->opnd[0]->type.rank != 2 || m.as[0] != m.rs[1] ||
      m.as[1] != m.rs[0])
    return rt_error(in, op, "internal: transpose shapes");
  for (int64_t i = 0; i < m.rs[0]; i++)
    for (int64_t j = 0; j < m.rs[1]; j++) move(&m, i * m.rs[1] + j, j * m.as[1] + i);
  return 0;
}

/* shapes aligned at the right, dims of 1 repeat */
static int exec_broadcast(interp *in, frame *fr, kn_op *op) {
  moves m;
  if (moves_begin(in, fr, op, &m)) return -1;
  for (int k = 0; k < 2; k++)
    if (m.as[k] != 1 && m.as[k] != m.rs[k]) return rt_error(in, op, "internal: broadcast shapes");
  for (int64_t i = 0; i < m.rs[0]; i++)
    for (int64_t j = 0; j < m.rs[1]; j++)
      move(&m, i * m.rs[1] + j, (m.as[0] == 1 ? 0 : i) * m.as[1] + (m.as[1] == 1 ? 0 : j));
  return 0;
}

/* ---- memory ---- */

/* the region holding [addr, addr+size), or -1 */
static int find_region(interp *in, uint64_t addr, size_t size) {
  for (int k = -1; k < in->nreg; k++) {
    int r = k < 0 ? in->last_reg : k;
    if (r < 0 || r >= in->nreg) continue;
    uint64_t lo = (uint64_t)(uintptr_t)in->reg[r].data;
    size_t bytes = in->reg[r].bytes;
    if (addr >= lo && bytes >= size && addr - lo <= bytes - size) {
      in->last_reg = r;
      return r;
    }
  }
  return -1;
}

static int scalar_int(interp *in, frame *fr, const kn_op *op, const kn_value *v, int64_t *out) {
  slot *s = NULL;
  if (get(in, fr, op, v, &s)) return -1;
  if (numel(v->type) != 1 || ty_float(v->type))
    return rt_error(in, op, "internal: expected an integer scalar operand");
  *out = I(s)[0];
  return 0;
}

static int exec_mem(interp *in, frame *fr, kn_op *op) {
  bool load = op->opc == KN_OP_LOAD;
  int rank = (int)op->iattr[0];
  unsigned cl = (unsigned)op->iattr[1];
  if (rank < 1 || rank > KN_MAX_RANK) return rt_error(in, op, "internal: memory op rank");
  int want = 1 + 2 * rank + ((cl & KN_MEM_BOUNDS) ? rank : 0) + (load ? 0 : 1) +
             ((cl & KN_MEM_MASK) ? 1 : 0) + (load && (cl & KN_MEM_OTHER) ? 1 : 0);
  if (op->nopnd != want || (load && op->nres != 1))
    return rt_error(in, op, "internal: memory op operand count");
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  kn_value *tv = load ? op->res[0] : mo.value; /* the tile in registers */
  kn_type tt = tv->type;
  if (mo.base->type.kind != KN_TY_PTR) return rt_error(in, op, "internal: base is not a pointer");
  kn_scalar et = (kn_scalar)mo.base->type.elem;
  bool fl = kn_scalar_is_float(et);
  if (fl != ty_float(tt)) return rt_error(in, op, "internal: element type differs from the pointer's");
  if ((cl & KN_MEM_ATOMIC_ADD) && (load || et != KN_F32))
    return rt_error(in, op, "internal: atomic_add on a load or on %s", kn_scalar_name(et));
  size_t esz = kn_scalar_size(et);
  int64_t dim[2] = {1, 1}, off[2] = {0, 0}, str[2] = {0, 0}, bnd[2] = {0, 0};
  if (tt.kind == KN_TY_TILE) {
    if (tt.rank != rank) return rt_error(in, op, "internal: memory op rank differs from the tile's");
    for (int k = 0; k < rank; k++) dim[k] = tt.shape[k];
  }
  slot *bs = NULL;
  if (get(in, fr, op, mo.base, &bs)) return -1;
  uint64_t base = (uint64_t)I(bs)[0];
  for (int k = 0; k < rank; k++) {
    if (scalar_int(in, fr, op, mo.off[k], &off[k]) ||
        scalar_int(in, fr, op, mo.stride[k], &str[k]))
      return -1;
    if (mo.bound[k] && scalar_int(in, fr, op, mo.bound[k], &bnd[k])) return -1;
  }
  int64_t n = dim[0] * dim[1], smask = 0, sval = 0;
  slot *ms = NULL, *vs = NULL, *r = NULL;
  if (mo.mask && (get(in, fr, op, mo.mask, &ms) || elt_stride(in, op, mo.mask, n, &smask)))
    return -1;
  if (mo.mask && ty_float(mo.mask->type)) return rt_error(in, op, "internal: mask is not i1");
  double of = 0;
  int64_t oi = 0;
  if (load) {
    if (mo.other) {
      slot *os = NULL;
      if (get(in, fr, op, mo.other, &os)) return -1;
      if (numel(mo.other->type) != 1 || ty_float(mo.other->type) != fl)
        return rt_error(in, op, "internal: 'other' must be a scalar of the element type");
      if (fl) of = F(os)[0];
      else oi = I(os)[0];
    }
    if (def(in, fr, op, tv, &r)) return -1;
  } else if (get(in, fr, op, mo.value, &vs) || elt_stride(in, op, mo.value, n, &sval)) {
    return -1;
  }
  kn_scalar tel = ty_elem(tt); /* what the register side holds (the pointee for verified IR) */
  for (int64_t i = 0; i < dim[0]; i++) {
    for (int64_t j = 0; j < dim[1]; j++) {
      int64_t e = i * dim[1] + j, pos[2] = {0, 0};
      bool live = !ms || I(ms)[e * smask] != 0;
      int64_t eoff = 0;
      bool ovf = false;
      for (int k = 0; k < rank && live; k++) {
        int64_t ix = k == 0 ? i : j, t;
        ovf |= __builtin_add_overflow(off[k], ix, &pos[k]);
        if (mo.bound[k] && (ovf || pos[k] < 0 || pos[k] >= bnd[k])) live = false;
        ovf |= __builtin_mul_overflow(pos[k], str[k], &t);
        ovf |= __builtin_add_overflow(eoff, t, &eoff);
      }
      if (!live) {
        if (load) {
          if (fl) F(r)[e] = of;
          else I(r)[e] = oi;
        }
        continue;
      }
      int64_t boff;
      ovf |= __builtin_mul_overflow(eoff, (int64_t)esz, &boff);
      /* off32: the builder promised every live element within [0, 2^31) bytes of the base */
      if ((cl & KN_MEM_OFF32) && !ovf && (boff < 0 || boff > (INT64_C(1) << 31) - (int64_t)esz)) {
        char el[64];
        elem_text(tt, e, el, sizeof el);
        return rt_error(in, op, "load off32: element %s lies at byte offset %lld from the "
                        "base, outside [0, 2^31)", el, (long long)boff);
      }
      uint64_t addr = base + (uint64_t)boff;
      if (ovf || find_region(in, addr, esz) < 0) {
        char el[64];
        elem_text(tt, e, el, sizeof el);
        return oob_error(in, op, el, addr);
      }
      void *p = (void *)(uintptr_t)addr;
      if (load) {
        if (fl) F(r)[e] = kn_load_elem(et, p);
        else I(r)[e] = kn_load_elem_i(et, p);
      } else {
        /* atomic_add: programs run one after another here; the f32 sum taken in double and
         * rounded once is the f32 add's */
        if (cl & KN_MEM_ATOMIC_ADD) kn_store_elem(et, p, kn_load_elem(et, p) + F(vs)[e * sval]);
        else if (fl) kn_store_elem(et, p, F(vs)[e * sval]);
        else kn_store_elem_i(et, p, I(vs)[e * sval]);
      }
    }
  }
  if (load) {
    /* the pointee and the result have one element type in verified IR; if not, convert */
    if (fl && tel != et) round_to(in, tel, F(r), n);
    if (!fl && tel != et) wrap_to(tel, I(r), n);
  }
  return 0;
}

/* element e of the result is base[offsets[e]] where the mask holds, else `other` */
static int exec_gather(interp *in, frame *fr, kn_op *op) {
  unsigned cl = (unsigned)op->iattr[0];
  if (op->nopnd != 2 + ((cl & KN_MEM_MASK) ? 1 : 0) + ((cl & KN_MEM_OTHER) ? 1 : 0))
    return rt_error(in, op, "internal: gather operand count");
  kn_gather_operands go;
  kn_gather_operands_get(op, &go);
  kn_value *rv = op->res[0];
  int64_t n = numel(rv->type);
  if (go.base->type.kind != KN_TY_PTR || go.base->type.elem != rv->type.elem ||
      numel(go.offsets->type) != n || ty_float(go.offsets->type) ||
      (go.mask && (numel(go.mask->type) != n || ty_float(go.mask->type))) ||
      (go.other && (numel(go.other->type) != 1 || ty_float(go.other->type) != ty_float(rv->type))))
    return rt_error(in, op, "internal: gather operands");
  kn_scalar et = (kn_scalar)go.base->type.elem;
  bool fl = kn_scalar_is_float(et);
  size_t esz = kn_scalar_size(et);
  slot *bs = NULL, *os = NULL, *ms = NULL, *xs = NULL, *r = NULL;
  if (get(in, fr, op, go.base, &bs) || get(in, fr, op, go.offsets, &os) ||
      (go.mask && get(in, fr, op, go.mask, &ms)) || (go.other && get(in, fr, op, go.other, &xs)) ||
      def(in, fr, op, rv, &r))
    return -1;
  if (r == os || r == ms) return rt_error(in, op, "internal: op reads its own result");
  uint64_t base = (uint64_t)I(bs)[0];
  double of = xs && fl ? F(xs)[0] : 0;
  int64_t oi = xs && !fl ? I(xs)[0] : 0;
  for (int64_t e = 0; e < n; e++) {
    if (ms && !I(ms)[e]) {
      if (fl) F(r)[e] = of;
      else I(r)[e] = oi;
      continue;
    }
    int64_t boff;
    bool ovf = __builtin_mul_overflow(I(os)[e], (int64_t)esz, &boff);
    uint64_t addr = base + (uint64_t)boff;
    if (ovf || find_region(in, addr, esz) < 0) {
      char el[64];
      elem_text(rv->type, e, el, sizeof el);
      return oob_error(in, op, el, addr);
    }
    const void *p = (const void *)(uintptr_t)addr;
    if (fl) F(r)[e] = kn_load_elem(et, p);
    else I(r)[e] = kn_load_elem_i(et, p);
  }
  return 0;
}

/* ---- dot and reductions ---- */

/* r = a (M x K) . b (K x N) + c, accumulating in f32: for each (i, j), for k = 0, 1, ... in
 * order, acc = f32(acc + f32(a[i][k] * b[k][j])).
 *
 * Why this loop is exact: every float format here has at most 24 significant bits, so a and b
 * hold values exact in f32 and their product (at most 48 bits, exponents far inside double's
 * range) is exact in double; (float)(a * b) is therefore f32(a*b) with one rounding.  Adding it to
 * a float accumulator in float arithmetic is f32(acc + p) (FLT_EVAL_METHOD == 0 on every kiln
 * host: x86-64 SSE, aarch64).  The multiply is in double and the add in float, so no compiler
 * can fuse them into an FMA (which would skip the product's rounding), and since a and b are
 * doubles the compiler cannot narrow the multiply to float either.  Iterating i, k, j keeps each
 * (i, j) accumulating in k order while the j loop runs over contiguous memory; it runs in
 * chunks of a constant 8 because GCC -O2 vectorises only loops with a known trip count.
 * row: N floats of scratch. */
static void dot_f32(const double *restrict a, const double *restrict b, const double *restrict c,
                    double *restrict r, float *restrict row, int64_t M, int64_t K, int64_t N) {
  for (int64_t i = 0; i < M; i++) {
    for (int64_t j = 0; j < N; j++) row[j] = (float)c[i * N + j];
    for (int64_t k = 0; k < K; k++) {
      const double aik = a[i * K + k];
      const double *restrict bk = b + k * N;
      int64_t j = 0;
      for (; j + 8 <= N; j += 8)
        for (int u = 0; u < 8; u++) row[j + u] = row[j + u] + (float)(aik * bk[j + u]);
      for (; j < N; j++) row[j] = row[j] + (float)(aik * bk[j]);
    }
    for (int64_t j = 0; j < N; j++) r[i * N + j] = row[j];
  }
}

static int exec_dot(interp *in, frame *fr, kn_op *op) {
  slot *a = NULL, *b = NULL, *c = NULL, *r = NULL;
  kn_value *rv = op->res[0];
  kn_type at = op->opnd[0]->type, bt = op->opnd[1]->type, ct = op->opnd[2]->type, rt = rv->type;
  if (at.kind != KN_TY_TILE || bt.kind != KN_TY_TILE || rt.kind != KN_TY_TILE || at.rank != 2 ||
      bt.rank != 2 || rt.rank != 2 || !kn_ty_eq(ct, rt) || at.shape[1] != bt.shape[0] ||
      rt.shape[0] != at.shape[0] || rt.shape[1] != bt.shape[1] || !ty_float(rt))
    return rt_error(in, op, "internal: dot shapes");
  if (get(in, fr, op, op->opnd[0], &a) || get(in, fr, op, op->opnd[1], &b) ||
      get(in, fr, op, op->opnd[2], &c) || def(in, fr, op, rv, &r))
    return -1;
  int64_t M = at.shape[0], K = at.shape[1], N = bt.shape[1];
  bool fa = ty_float(at), fb = ty_float(bt);
  kn_scalar rte = ty_elem(rt);
  if (fa && fb && rte == KN_F32 && !in->f64) {
    if (in->scratch_cap < (size_t)N) {
      float *p = realloc(in->scratch, (size_t)N * sizeof *p);
      if (!p) return rt_error(in, op, "out of memory for dot");
      in->scratch = p;
      in->scratch_cap = (size_t)N;
    }
    if (F(r) == F(c)) return rt_error(in, op, "internal: op reads its own result");
    dot_f32(F(a), F(b), F(c), F(r), in->scratch, M, K, N);
    return 0;
  }
  /* general (integer operands, an accumulator type other than f32, or f64 mode): the same
   * order, each product and sum rounded to the accumulator's type (in f64 mode, not rounded) */
  double *dr = F(r);
  const double *dc = F(c);
  if (dr != dc) memmove(dr, dc, (size_t)(M * N) * sizeof *dr);
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) {
      double x = fa ? F(a)[i * K + k] : (double)I(a)[i * K + k];
      for (int64_t j = 0; j < N; j++) {
        double y = fb ? F(b)[k * N + j] : (double)I(b)[k * N + j];
        dr[i * N + j] = rnd(in, rte, dr[i * N + j] + rnd(in, rte, x * y));
      }
    }
  return 0;
}

static int exec_reduce(interp *in, frame *fr, kn_op *op) {
  slot *a = NULL, *r = NULL;
  kn_value *rv = op->res[0], *av = op->opnd[0];
  kn_type at = av->type;
  int axis = (int)op->iattr[0];
  if (at.kind != KN_TY_TILE || axis < 0 || axis >= at.rank || ty_float(at) != ty_float(rv->type))
    return rt_error(in, op, "internal: reduce operand");
  int64_t outer, len, inner; /* x[o][l][in] -> r[o][in] */
  if (at.rank == 1) outer = 1, len = at.shape[0], inner = 1;
  else if (axis == 0) outer = 1, len = at.shape[0], inner = at.shape[1];
  else outer = at.shape[0], len = at.shape[1], inner = 1;
  if (numel(rv->type) != outer * inner || len < 1)
    return rt_error(in, op, "internal: reduce result shape");
  if (get(in, fr, op, av, &a) || def(in, fr, op, rv, &r)) return -1;
  if (a == r) return rt_error(in, op, "internal: op reads its own result");
  bool sum = op->opc == KN_OP_REDUCE_SUM;
  kn_scalar t = ty_elem(at);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t q = 0; q < inner; q++) {
      int64_t base = o * len * inner + q;
      if (ty_float(at)) {
        const double *x = F(a);
        double acc = x[base]; /* starting from the first element keeps a sum of -0s at -0 */
        for (int64_t l = 1; l < len; l++) {
          double v = x[base + l * inner];
          acc = sum ? rnd(in, t, acc + v) : fmax_nan(acc, v);
        }
        F(r)[o * inner + q] = acc;
      } else {
        const int64_t *x = I(a);
        int64_t acc = x[base];
        for (int64_t l = 1; l < len; l++) {
          int64_t v = x[base + l * inner];
          acc = sum ? kn_wrap_int(t, (int64_t)((uint64_t)acc + (uint64_t)v)) : (v > acc ? v : acc);
        }
        I(r)[o * inner + q] = acc;
      }
    }
  return 0;
}

/* ---- control flow ---- */

static int run_block(interp *in, frame *fr, kn_block *b, kn_op **term);

/* the ops of a region's terminator must be `want` with n operands; a missing terminator counts
 * as one with no operands */
static int check_term(interp *in, const kn_op *op, const kn_op *term, kn_opcode want, int n) {
  int got = term ? term->nopnd : 0;
  if ((term && term->opc != want) || got != n)
    return rt_error(in, op, "internal: region must end with '%s' of %d values",
                    kn_opinfo_table[want].name, n);
  return 0;
}

static int exec_for(interp *in, frame *fr, kn_op *op) {
  int ninit = op->nopnd - 3;
  if (ninit < 0 || op->nres != ninit || op->nregion != 1 || !op->region[0] ||
      op->region[0]->nargs != 1 + ninit)
    return rt_error(in, op, "internal: malformed for");
  kn_block *body = op->region[0];
  int64_t lo, hi, step;
  if (scalar_int(in, fr, op, op->opnd[0], &lo) || scalar_int(in, fr, op, op->opnd[1], &hi) ||
      scalar_int(in, fr, op, op->opnd[2], &step))
    return -1;
  if (step <= 0) return rt_error(in, op, "for step %lld is not positive", (long long)step);
  for (int i = 0; i < ninit; i++)
    if (copy_val(in, fr, op, body->args[1 + i], fr, op->opnd[3 + i])) return -1;
  if (lo >= hi) {
    for (int i = 0; i < ninit; i++)
      if (copy_val(in, fr, op, op->res[i], fr, op->opnd[3 + i])) return -1;
    return 0;
  }
  slot *ivs = NULL;
  if (def(in, fr, op, body->args[0], &ivs)) return -1;
  for (int64_t iv = lo;;) {
    I(ivs)[0] = iv;
    kn_op *term;
    if (run_block(in, fr, body, &term) || check_term(in, op, term, KN_OP_YIELD, ninit)) return -1;
    in->st.loop_iterations++;
    /* yields go to the results first (a yield may pass iter args in another order) ... */
    for (int i = 0; i < ninit; i++)
      if (copy_val(in, fr, term, op->res[i], fr, term->opnd[i])) return -1;
    int64_t next;
    if (__builtin_add_overflow(iv, step, &next) || next >= hi) break;
    iv = next;
    /* ... then become the next iteration's args by swapping buffers, not copying */
    for (int i = 0; i < ninit; i++) {
      slot *x = &fr->s[op->res[i]->id], *y = &fr->s[body->args[1 + i]->id], t = *x;
      *x = *y;
      *y = t;
    }
    ivs = &fr->s[body->args[0]->id];
  }
  return 0;
}

static int exec_if(interp *in, frame *fr, kn_op *op) {
  if (op->nopnd != 1 || op->nregion != 2 || !op->region[0] || !op->region[1])
    return rt_error(in, op, "internal: malformed if");
  int64_t c;
  if (scalar_int(in, fr, op, op->opnd[0], &c)) return -1;
  kn_op *term;
  if (run_block(in, fr, op->region[c ? 0 : 1], &term) ||
      check_term(in, op, term, KN_OP_YIELD, op->nres))
    return -1;
  for (int i = 0; i < op->nres; i++)
    if (copy_val(in, fr, term, op->res[i], fr, term->opnd[i])) return -1;
  return 0;
}

static frame *frame_of(interp *in, const kn_func *f) {
  int i = f->index;
  return i >= 0 && i < in->m->nfuncs && in->m->funcs[i] == f ? &in->frames[i] : NULL;
}

/* An elemental call: the callee runs once per element of the shape, its scalar params taking
 * that element of the tile arguments (the scalar and pointer arguments are passed once, before
 * the loop), and its results filling that element of the call's tiles.  The element loop is
 * here, so a call costs one run_block per element and no copies through copy_val. */
static int exec_elemental(interp *in, frame *fr, kn_op *op, kn_func *f, frame *cf,
                          const kn_value *first) {
  int64_t n = numel(first->type);
  int np = op->nopnd, nr = op->nres;
  /* src[i]: tile argument i (NULL for the others), pslot[i]: its param, res[k]: result k */
  slot **src = calloc((size_t)(2 * np + nr + 1), sizeof *src);
  if (!src) return rt_error(in, op, "out of memory for an elemental call");
  slot **pslot = src + np, **res = pslot + np;
  int rc = 0;
  /* tile arguments: their slots; the others: copied into the params once */
  for (int i = 0; i < np && !rc; i++) {
    kn_value *a = op->opnd[i], *p = kn_func_param(f, i);
    if (a->type.kind != KN_TY_TILE) {
      rc = copy_val(in, cf, op, p, fr, a);
      continue;
    }
    if (numel(a->type) != n || p->type.kind != KN_TY_SCALAR ||
        ty_float(a->type) != ty_float(p->type))
      rc = rt_error(in, op, "internal: elemental argument %d of @%s", i, f->name);
    else if (!get(in, fr, op, a, &src[i]))
      rc = def(in, cf, op, p, &pslot[i]);
    else rc = -1;
  }
  for (int k = 0; k < nr && !rc; k++) {
    if (numel(op->res[k]->type) != n || ty_float(op->res[k]->type) != ty_float(f->ret[k]))
      rc = rt_error(in, op, "internal: elemental result %d of @%s", k, f->name);
    else rc = def(in, fr, op, op->res[k], &res[k]);
  }
  cf->active = true;
  in->ecall = op;
  for (int64_t e = 0; e < n && !rc; e++) {
    in->eidx = e;
    for (int i = 0; i < np; i++) {
      if (!src[i]) continue;
      if (ty_float(op->opnd[i]->type)) F(pslot[i])[0] = F(src[i])[e];
      else I(pslot[i])[0] = I(src[i])[e];
    }
    kn_op *term;
    rc = run_block(in, cf, f->body, &term);
    if (!rc) rc = check_term(in, op, term, KN_OP_RETURN, nr);
    for (int k = 0; k < nr && !rc; k++) {
      slot *v = NULL;
      if (get(in, cf, term, term->opnd[k], &v) || numel(term->opnd[k]->type) != 1) {
        rc = rt_error(in, term, "internal: elemental callee @%s returns a tile", f->name);
        break;
      }
      if (ty_float(op->res[k]->type)) F(res[k])[e] = F(v)[0];
      else I(res[k])[e] = I(v)[0];
    }
  }
  in->ecall = NULL;
  cf->active = false;
  free(src);
  return rc;
}

static int exec_call(interp *in, frame *fr, kn_op *op) {
  kn_func *f = op->callee;
  if (!f && op->callee_name) f = kn_module_find(in->m, op->callee_name);
  frame *cf = f ? frame_of(in, f) : NULL;
  if (!cf) return rt_error(in, op, "call of unknown function @%s", op->callee_name ? op->callee_name : "?");
  if (cf->active) return rt_error(in, op, "recursive call of @%s", f->name);
  if (op->nopnd != kn_func_nparams(f) || op->nres != f->nret)
    return rt_error(in, op, "internal: call of @%s with the wrong arity", f->name);
  const kn_value *first = kn_call_elemental_arg(op, f);
  if (first) return exec_elemental(in, fr, op, f, cf, first);
  for (int i = 0; i < op->nopnd; i++)
    if (copy_val(in, cf, op, kn_func_param(f, i), fr, op->opnd[i])) return -1;
  cf->active = true;
  kn_op *term;
  int rc = run_block(in, cf, f->body, &term);
  cf->active = false;
  if (rc || check_term(in, op, term, KN_OP_RETURN, op->nres)) return -1;
  for (int i = 0; i < op->nres; i++)
    if (copy_val(in, fr, term, op->res[i], cf, term->opnd[i])) return -1;
  return 0;
}

static int exec_program_index(interp *in, frame *fr, kn_op *op) {
  int axis = (int)op->iattr[0];
  slot *r = NULL;
  if (axis < 0 || axis > 2) return rt_error(in, op, "axis %d out of range", axis);
  if (ty_float(op->res[0]->type) || def(in, fr, op, op->res[0], &r)) return -1;
  int64_t v = op->opc == KN_OP_PROGRAM_ID ? in->pid[axis] : in->grid[axis];
  int64_t n = numel(op->res[0]->type);
  for (int64_t i = 0; i < n; i++) I(r)[i] = v;
  return 0;
}

static int exec_ptradd(interp *in, frame *fr, kn_op *op) {
  slot *p = NULL, *o = NULL, *r = NULL;
  if (get(in, fr, op, op->opnd[0], &p) || get(in, fr, op, op->opnd[1], &o)) return -1;
  if (op->opnd[0]->type.kind != KN_TY_PTR || numel(op->opnd[1]->type) != 1 ||
      ty_float(op->opnd[1]->type))
    return rt_error(in, op, "internal: ptradd operands");
  uint64_t base = (uint64_t)I(p)[0];
  int64_t off = I(o)[0];
  size_t esz = kn_scalar_size((kn_scalar)op->opnd[0]->type.elem);
  if (def(in, fr, op, op->res[0], &r)) return -1;
  /* address arithmetic wraps (like the hardware's); a wild pointer is caught at its access */
  I(r)[0] = (int64_t)(base + (uint64_t)off * esz);
  return 0;
}

static int exec_op(interp *in, frame *fr, kn_op *op) {
  const kn_opinfo *info = &kn_opinfo_table[op->opc];
  if ((info->nopnd >= 0 && op->nopnd != info->nopnd) || (info->nres >= 0 && op->nres != info->nres))
    return rt_error(in, op, "internal: '%s' with %d operands and %d results", info->name,
                    op->nopnd, op->nres);
  switch (op->opc) {
  case KN_OP_PROGRAM_ID:
  case KN_OP_NUM_PROGRAMS: return exec_program_index(in, fr, op);
  case KN_OP_CONST: return exec_const(in, fr, op);
  case KN_OP_ARANGE: return exec_arange(in, fr, op);
  case KN_OP_SPLAT: return exec_splat(in, fr, op);
  case KN_OP_BROADCAST: return exec_broadcast(in, fr, op);
  case KN_OP_EXPAND_DIMS:
  case KN_OP_RESHAPE: return exec_same_order(in, fr, op);
  case KN_OP_TRANSPOSE: return exec_transpose(in, fr, op);
  KN_CASES_BINARY return exec_binary(in, fr, op);
  KN_CASES_UNARY return exec_unary(in, fr, op);
  case KN_OP_CMP: return exec_cmp(in, fr, op);
  case KN_OP_SELECT: return exec_select(in, fr, op);
  case KN_OP_CAST: return exec_cast(in, fr, op);
  case KN_OP_PTRADD: return exec_ptradd(in, fr, op);
  case KN_OP_LOAD:
  case KN_OP_STORE: return exec_mem(in, fr, op);
  case KN_OP_GATHER: return exec_gather(in, fr, op);
  case KN_OP_DOT: return exec_dot(in, fr, op);
  case KN_OP_REDUCE_MAX:
  case KN_OP_REDUCE_SUM: return exec_reduce(in, fr, op);
  case KN_OP_FOR: return exec_for(in, fr, op);
  case KN_OP_IF: return exec_if(in, fr, op);
  case KN_OP_CALL: return exec_call(in, fr, op);
  case KN_OP_MULTIPLE_OF:
  case KN_OP_MAX_CONTIGUOUS: return copy_val(in, fr, op, op->res[0], fr, op->opnd[0]);
  case KN_OP_YIELD:
  case KN_OP_RETURN: break;  /* run_block ends the block at them */
  }
  return rt_error(in, op, "internal: op '%s' cannot be executed here", info->name);
}

/* runs b's ops; *term receives its yield/return (NULL when the block has none) */
static int run_block(interp *in, frame *fr, kn_block *b, kn_op **term) {
  *term = NULL;
  for (kn_op *op = b->first; op; op = op->next) {
    if ((unsigned)op->opc >= KN_OP_COUNT) return rt_error(in, op, "internal: bad opcode");
    in->st.ops[op->opc]++;
    /* the budget: an op costs one step, plus one per element of a tile result (a tile op's
     * work, so the budget bounds time whatever a loop's body holds) */
    if (in->max_steps &&
        (in->steps += 1 + (op->nres && op->res[0]->type.kind == KN_TY_TILE
                               ? (uint64_t)numel(op->res[0]->type) : 0)) > in->max_steps)
      return rt_error(in, op, "step budget of %llu exhausted (a loop that does not end?)",
                      (unsigned long long)in->max_steps);
    if (op->opc == KN_OP_YIELD || op->opc == KN_OP_RETURN) {
      *term = op;
      return 0;
    }
    if (exec_op(in, fr, op)) return -1;
  }
  return 0;
}

/* ---- entry ---- */

/* one frame per function of the module, numbered now; kn_error at loc on failure */
static int frames_new(interp *in, kn_loc loc) {
  in->frames = calloc((size_t)in->m->nfuncs + 1, sizeof *in->frames);
  if (!in->frames) return kn_error(in->d, in->m, loc, "out of memory");
  for (int i = 0; i < in->m->nfuncs; i++) {
    frame *f = &in->frames[i];
    f->f = in->m->funcs[i];
    f->n = kn_func_number(f->f);
    f->s = calloc((size_t)f->n + 1, sizeof *f->s);
    if (!f->s) return kn_error(in->d, in->m, loc, "out of memory");
  }
  return 0;
}

static void frames_free(interp *in) {
  for (int i = 0; in->frames && i < in->m->nfuncs; i++) {
    frame *f = &in->frames[i];
    for (int j = 0; f->s && j < f->n; j++) free(f->s[j].heap);
    free(f->s);
  }
  free(in->frames);
  free(in->scratch);
  in->frames = NULL;
  in->scratch = NULL;
}

/* parameter i of f (a scalar or a pointer) := a: floats rounded to the type (not in f64 mode),
 * ints wrapped */
static int set_param(interp *in, frame *fr, kn_func *f, int i, kn_argval a) {
  kn_value *p = kn_func_param(f, i);
  slot *s = NULL;
  if (p->type.kind != KN_TY_PTR && p->type.kind != KN_TY_SCALAR)
    return kn_error(in->d, in->m, f->loc, "parameter %d of @%s is not a scalar or pointer", i,
                    f->name);
  if (def(in, fr, NULL, p, &s)) return -1;
  if (p->type.kind == KN_TY_PTR) I(s)[0] = (int64_t)(uintptr_t)a.p;
  else if (ty_float(p->type)) F(s)[0] = rnd(in, (kn_scalar)p->type.elem, a.f);
  else I(s)[0] = kn_wrap_int((kn_scalar)p->type.elem, a.i);
  return 0;
}

static int run_all(interp *in, kn_func *k, const kn_argval *args) {
  frame *kf = frame_of(in, k);
  if (!kf) return kn_error(in->d, in->m, k->loc, "kernel @%s is not in its module", k->name);
  in->grid_run = true;
  for (int z = 0; z < in->grid[2]; z++)
    for (int y = 0; y < in->grid[1]; y++)
      for (int x = 0; x < in->grid[0]; x++) {
        in->pid[0] = x, in->pid[1] = y, in->pid[2] = z;
        for (int i = 0; i < kn_func_nparams(k); i++)
          if (set_param(in, kf, k, i, args[i])) return -1;
        kn_op *term;
        kf->active = true;
        int rc = run_block(in, kf, k->body, &term);
        kf->active = false;
        if (rc) return -1;
        in->st.programs++;
      }
  return 0;
}

int kn_interp_run_budget(kn_func *k, int flags, uint64_t max_steps, const kn_argval *args,
                         const int grid[3], const kn_region *regions, int nregions,
                         kn_interp_stats *stats, kn_diag *d) {
  if (stats) memset(stats, 0, sizeof *stats);
  if (!k || !k->module) return kn_error(d, NULL, (kn_loc){0}, "no kernel to run");
  interp in = {.m = k->module, .d = d, .reg = regions, .nreg = regions ? nregions : 0,
               .last_reg = -1, .f64 = (flags & KN_INTERP_F64) != 0, .max_steps = max_steps};
  if (!grid) return kn_error(d, in.m, k->loc, "no grid");
  for (int i = 0; i < 3; i++) {
    if (grid[i] < 0) return kn_error(d, in.m, k->loc, "grid[%d] = %d is negative", i, grid[i]);
    in.grid[i] = grid[i];
  }
  if (kn_func_nparams(k) > 0 && !args) return kn_error(d, in.m, k->loc, "no kernel arguments");
  int rc = frames_new(&in, k->loc);
  if (rc == 0) rc = run_all(&in, k, args);
  frames_free(&in);
  in.st.steps = in.steps;
  if (stats) *stats = in.st;
  return rc;
}

int kn_interp_run_flags(kn_func *k, int flags, const kn_argval *args, const int grid[3],
                        const kn_region *regions, int nregions, kn_interp_stats *stats,
                        kn_diag *d) {
  return kn_interp_run_budget(k, flags, 0, args, grid, regions, nregions, stats, d);
}

int kn_interp_run(kn_func *k, const kn_argval *args, const int grid[3], const kn_region *regions,
                  int nregions, kn_interp_stats *stats, kn_diag *d) {
  return kn_interp_run_budget(k, 0, 0, args, grid, regions, nregions, stats, d);
}

/* ---- one function, called many times ---- */

struct kn_interp_fn {
  interp in;       /* its frames live as long as the kn_interp_fn; d is set per call */
  kn_func *f;
  frame *fr;
  kn_region *reg;  /* a copy of the caller's regions */
};

void kn_interp_fn_free(kn_interp_fn *fn) {
  if (!fn) return;
  frames_free(&fn->in);
  free(fn->reg);
  free(fn);
}

kn_interp_fn *kn_interp_fn_new(kn_func *f, int flags, const kn_region *regions, int nregions,
                               kn_diag *d) {
  if (!f || !f->module || !f->body) {
    kn_error(d, NULL, (kn_loc){0}, "no function to call");
    return NULL;
  }
  for (int i = 0; i < kn_func_nparams(f) + f->nret; i++) {
    kn_type t = i < kn_func_nparams(f) ? kn_func_param(f, i)->type : f->ret[i - kn_func_nparams(f)];
    if (t.kind != KN_TY_SCALAR && t.kind != KN_TY_PTR) {
      kn_error(d, f->module, f->loc, "@%s takes or returns a tile; kn_interp_fn calls functions of "
               "scalars and pointers", f->name);
      return NULL;
    }
  }
  kn_interp_fn *fn = calloc(1, sizeof *fn);
  if (nregions < 0 || !regions) nregions = 0;
  kn_region *reg = nregions ? malloc(sizeof *reg * (size_t)nregions) : NULL;
  if (!fn || (nregions && !reg)) {
    free(fn);
    free(reg);
    kn_error(d, f->module, f->loc, "out of memory");
    return NULL;
  }
  if (nregions) memcpy(reg, regions, sizeof *reg * (size_t)nregions);
  fn->f = f;
  fn->reg = reg;
  fn->in = (interp){.m = f->module, .d = d, .reg = reg, .nreg = nregions, .last_reg = -1,
                    .f64 = (flags & KN_INTERP_F64) != 0};
  int rc = frames_new(&fn->in, f->loc);
  if (rc == 0 && !(fn->fr = frame_of(&fn->in, f)))
    rc = kn_error(d, f->module, f->loc, "@%s is not in its module", f->name);
  if (rc) {
    kn_interp_fn_free(fn);
    return NULL;
  }
  return fn;
}

int kn_interp_fn_call(kn_interp_fn *fn, const kn_argval *args, kn_argval *results, kn_diag *d) {
  interp *in = &fn->in;
  kn_func *f = fn->f;
  in->d = d;
  for (int i = 0; i < kn_func_nparams(f); i++)
    if (set_param(in, fn->fr, f, i, args[i])) return -1;
  kn_op *term;
  fn->fr->active = true;
  int rc = run_block(in, fn->fr, f->body, &term);
  fn->fr->active = false;
  if (rc || check_term(in, NULL, term, KN_OP_RETURN, f->nret)) return -1;
  for (int k = 0; k < f->nret; k++) {
    slot *v = NULL;
    if (get(in, fn->fr, term, term->opnd[k], &v)) return -1;
    kn_type t = f->ret[k];
    if (t.kind == KN_TY_PTR) results[k].p = (void *)(uintptr_t)I(v)[0];
    else if (ty_float(t)) results[k].f = F(v)[0];
    else results[k].i = I(v)[0];
  }
  return 0;
}
