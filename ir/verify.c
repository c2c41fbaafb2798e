/* verify.c — the IR verifier: checks a module and reports the FIRST broken rule at the most
 * precise place it knows (the offending operand's token when the IR was parsed, else the op).
 *
 * It assumes nothing of where the IR came from: the parser resolves names but does no type
 * checking, and built IR (templates, passes) bypasses the parser entirely, so every rule is
 * re-checked here, SSA dominance included.  Rules (docs/ir.md, "Verifier rules", says the same):
 *
 *  - Types: scalar, ptr<T> (any element type, i1 included: an i1 lives in one byte) or a tile of
 *    rank 1..2 with dims >= 1 and at most KN_MAX_TILE_NUMEL elements.  Kernel parameters are
 *    scalars or pointers; kernels return nothing; function names are unique; attrs keys are
 *    unique within a function.
 *  - Counts: operand/result/region counts of ops.def; load/store operand count from rank and
 *    clauses.
 *  - Elementwise: binary operands of one scalar-or-tile type, unary likewise; result of that type;
 *    INT_ONLY ops take i1/i32/i64, FLOAT_ONLY ops take float types.  cmp: predicate valid, result
 *    i1 of the operands' shape.  select: a and b of one type, cond i1 scalar or of their shape.
 *    cast: same shape.  splat: scalar -> tile of that element type.
 *  - Shapes: broadcast keeps the rank (rank 1 -> 2 needs expand_dims first, so which axis is
 *    added is always explicit), each source dim equals the result dim or is 1.  expand_dims takes
 *    a rank-1 tile, axis 0..1.  reshape keeps the element count.  transpose: rank 2, dims
 *    swapped.  arange: end > start, result tile<(end-start)xi32>.  reduce: axis < rank, result is
 *    the operand without that axis (a scalar for rank 1).
 *  - program_id/num_programs: axis 0..2, result i32.  const: scalar or tile of any element type,
 *    integer value fitting the type, no fractional/float value on an integer type.
 *  - ptradd: ptr + i32|i64 scalar -> the same ptr type.  load/store: rank 1..2; the loaded/stored
 *    value is a tile of that rank or, for rank 1 only, a scalar (one element); base ptr<T> with T
 *    the element type; offsets/strides/bounds i32|i64 scalars; mask i1 of the value's shape;
 *    other a scalar of the element type.
 *  - dot: a MxK and b KxN of one float element type, acc and result tile<MxNxf32>.
 *  - for: lo/hi/step scalars of one int type; body args (iv of that type, iters of the init
 *    types); body ends in yield of the iter types; results of the iter types.  if: cond i1
 *    scalar; both regions end in yield of the result types.  yield only ends a region, return
 *    only ends a function body, and a terminator is the last op of its block.
 *  - call: callee exists and is a func (not a kernel); argument and result types match; calls form
 *    no cycle.  return: nothing in a kernel, the declared types in a func.  An elemental call
 *    (tiles for scalar params) takes tiles of one shape S of the params' element types, scalars
 *    and pointers as declared, gives tiles of S; its callee takes scalars and pointers, returns
 *    scalars, and can run per element (straight-line scalar code, no store, program index, dot,
 *    reduction or shape op; loads of one element, without mask or other).
 *  - gather: base ptr<T>, offsets an i32|i64 tile of the result's shape (result tile of T), mask
 *    i1 of that shape, other a T scalar.
 *  - hints (multiple_of, max_contiguous): value > 0, integer operand, result of its type.
 *  - Dominance: an operand is defined earlier in its block or in an enclosing block.
 *
 * The verifier writes only op->callee (resolved from callee_name) and the value ids / nvalues of
 * each function (kn_func_number order).  It allocates scratch with malloc and frees it itself.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "op_cases.h"

/* a tile bigger than this is surely a typo (and would overflow int32 index math downstream) */
#define KN_MAX_TILE_NUMEL (1 << 20)

typedef struct vctx {
  kn_module *m;
  kn_diag *d;
  kn_func *f;            /* the function being checked */
  int nvalues;
  kn_value **byid;       /* value of each id in f, to reject stale ids of other functions */
  unsigned char *live;   /* live[id]: defined and visible at the current point */
  unsigned char *seen;   /* seen[id]: defined somewhere before the current point */
} vctx;

/* ---- messages ---- */

/* A type as text, returned by value so several fit in one printf (temporary lifetime). */
typedef struct tystr {
  char s[64];
} tystr;
static tystr ts(kn_type t) {
  tystr r;
  kn_ty_format(t, r.s, sizeof r.s);
  return r;
}

/* A value as text: '%name' when it has one, else its number. */
typedef struct vstr {
  char s[80];
} vstr;
static vstr vs(const kn_value *v) {
  vstr r;
  if (v && v->name) snprintf(r.s, sizeof r.s, "'%%%.60s'", v->name);
  else snprintf(r.s, sizeof r.s, "value #%d", v ? v->id : -1);
  return r;
}

static const char *opname(const kn_op *op) {
  return (unsigned)op->opc < KN_OP_COUNT ? kn_opinfo_table[op->opc].name : "?";
}

/* Built IR has no location: name the function so the message still leads somewhere. */
__attribute__((format(printf, 3, 4))) static int fail(vctx *c, kn_loc loc, const char *fmt, ...) {
  char msg[420];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (loc.line <= 0 && c->f)
    return kn_error(c->d, c->m, loc, "%s (in '@%.60s')", msg, c->f->name ? c->f->name : "?");
  return kn_error(c->d, c->m, loc, "%s", msg);
}

static kn_loc at_opnd(const kn_op *op, int i) {
  if (op->opnd_loc && i >= 0 && i < op->nopnd && op->opnd_loc[i].line > 0) return op->opnd_loc[i];
  return op->loc;
}

/* ---- type predicates ---- */

static bool is_scalar(kn_type t) { return t.kind == KN_TY_SCALAR; }
static bool is_tile(kn_type t) { return t.kind == KN_TY_TILE; }
static bool is_ptr(kn_type t) { return t.kind == KN_TY_PTR; }
static bool is_data(kn_type t) { return is_scalar(t) || is_tile(t); } /* not a pointer */
static bool is_index(kn_type t) {  /* offsets, strides, bounds, loop bounds */
  return is_scalar(t) && (t.elem == KN_I32 || t.elem == KN_I64);
}
static bool is_float(kn_type t) { return kn_scalar_is_float((kn_scalar)t.elem); }
static bool is_int(kn_type t) { return kn_scalar_is_int((kn_scalar)t.elem); }

/* same kind and, for tiles, same rank and dims (element types may differ) */
static bool same_shape(kn_type a, kn_type b) {
  if (a.kind != b.kind) return false;
  if (a.kind != KN_TY_TILE) return true;
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; i++)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

/* NULL when t is a well-formed value type, else why not (in buf) */
static const char *type_problem(kn_type t, char *buf, size_t n) {
  if (t.kind != KN_TY_SCALAR && t.kind != KN_TY_PTR && t.kind != KN_TY_TILE) {
    snprintf(buf, n, "invalid type (kind %d)", t.kind);
    return buf;
  }
  if (t.elem >= KN_SCALAR_COUNT) {
    snprintf(buf, n, "invalid element type (%d)", t.elem);
    return buf;
  }
  if (t.kind != KN_TY_TILE) return NULL;
  if (t.rank < 1 || t.rank > KN_MAX_RANK) {
    snprintf(buf, n, "tile rank must be 1 or 2, found %d", t.rank);
    return buf;
  }
  int64_t numel = 1;
  for (int i = 0; i < t.rank; i++) {
    if (t.shape[i] < 1) {
      snprintf(buf, n, "tile dimensions must be positive, found %s", ts(t).s);
      return buf;
    }
    numel *= t.shape[i];  /* <= 2^62: no overflow with two int32 dims */
  }
  if (numel > KN_MAX_TILE_NUMEL) {
    snprintf(buf, n, "%s has %lld elements; a tile holds at most %d", ts(t).s, (long long)numel,
             KN_MAX_TILE_NUMEL);
    return buf;
  }
  return NULL;
}

static int check_type(vctx *c, kn_loc loc, kn_type t, const char *what) {
  char why[200];
  if (type_problem(t, why, sizeof why)) return fail(c, loc, "%s: %s", what, why);
  return 0;
}

/* ---- per-op rules ---- */

static int expect_result(vctx *c, const kn_op *op, kn_type want) {
  if (!kn_ty_eq(op->res[0]->type, want))
    return fail(c, op->loc, "result of '%s' must be %s, found %s", opname(op), ts(want).s,
                ts(op->res[0]->type).s);
  return 0;
}

static int check_elementwise(vctx *c, const kn_op *op) {
  unsigned fl = kn_opinfo_table[op->opc].flags;
  kn_type a = op->opnd[0]->type;
  if (!is_data(a))
    return fail(c, at_opnd(op, 0), "operands of '%s' must be scalars or tiles, found %s",
                opname(op), ts(a).s);
  if (op->nopnd == 2 && !kn_ty_eq(a, op->opnd[1]->type))
    return fail(c, at_opnd(op, 1), "operands of '%s' must have the same type, found %s and %s",
                opname(op), ts(a).s, ts(op->opnd[1]->type).s);
  if ((fl & KN_INT_ONLY) && !is_int(a))
    return fail(c, at_opnd(op, 0), "'%s' needs integer operands (i1, i32, i64), found %s",
                opname(op), ts(a).s);
  if ((fl & KN_FLOAT_ONLY) && !is_float(a))
    return fail(c, at_opnd(op, 0), "'%s' needs float operands, found %s", opname(op), ts(a).s);
  return expect_result(c, op, a);
}

static int check_cmp(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type;
  if (op->iattr[0] < 0 || op->iattr[0] >= KN_PRED_COUNT)
    return fail(c, op->loc, "invalid predicate %lld of 'cmp'", (long long)op->iattr[0]);
  if (!is_data(a))
    return fail(c, at_opnd(op, 0), "operands of 'cmp' must be scalars or tiles, found %s",
                ts(a).s);
  if (!kn_ty_eq(a, op->opnd[1]->type))
    return fail(c, at_opnd(op, 1), "operands of 'cmp' must have the same type, found %s and %s",
                ts(a).s, ts(op->opnd[1]->type).s);
  return expect_result(c, op, kn_ty_with_elem(a, KN_I1));
}

static int check_select(vctx *c, const kn_op *op) {
  kn_type cond = op->opnd[0]->type, a = op->opnd[1]->type, b = op->opnd[2]->type;
  if (!is_data(a))
    return fail(c, at_opnd(op, 1), "operands of 'select' must be scalars or tiles, found %s",
                ts(a).s);
  if (!kn_ty_eq(a, b))
    return fail(c, at_opnd(op, 2), "operands of 'select' must have the same type, found %s and %s",
                ts(a).s, ts(b).s);
  if (!(is_scalar(cond) && cond.elem == KN_I1) && !kn_ty_eq(cond, kn_ty_with_elem(a, KN_I1)))
    return fail(c, at_opnd(op, 0),
                "condition of 'select' must be i1 or %s (the shape of its operands), found %s",
                ts(kn_ty_with_elem(a, KN_I1)).s, ts(cond).s);
  return expect_result(c, op, a);
}

static int check_cast(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type, r = op->res[0]->type;
  if (!is_data(a))
    return fail(c, at_opnd(op, 0), "operand of 'cast' must be a scalar or tile, found %s",
                ts(a).s);
  if (!same_shape(a, r))
    return fail(c, op->loc, "'cast' changes only the element type, not the shape: %s to %s",
                ts(a).s, ts(r).s);
  return 0;
}

static int check_splat(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type, r = op->res[0]->type;
  if (!is_scalar(a))
    return fail(c, at_opnd(op, 0), "operand of 'splat' must be a scalar, found %s", ts(a).s);
  if (!is_tile(r) || r.elem != a.elem)
    return fail(c, op->loc, "result of 'splat' must be a tile of %s, found %s", ts(a).s, ts(r).s);
  return 0;
}

static int check_broadcast(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type, r = op->res[0]->type;
  if (!is_tile(a))
    return fail(c, at_opnd(op, 0), "operand of 'broadcast' must be a tile (use 'splat' for a "
                "scalar), found %s", ts(a).s);
  if (!is_tile(r) || r.elem != a.elem)
    return fail(c, op->loc, "result of 'broadcast' must be a tile of element type %s, found %s",
                kn_scalar_name((kn_scalar)a.elem), ts(r).s);
  if (r.rank != a.rank)
    return fail(c, op->loc, "'broadcast' keeps the rank: %s to %s (use 'expand_dims' first)",
                ts(a).s, ts(r).s);
  for (int i = 0; i < a.rank; i++)
    if (a.shape[i] != r.shape[i] && a.shape[i] != 1)
      return fail(c, op->loc, "cannot broadcast %s to %s: dim %d is %d, neither 1 nor %d",
                  ts(a).s, ts(r).s, i, a.shape[i], r.shape[i]);
  return 0;
}

static int check_expand_dims(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type;
  if (!is_tile(a) || a.rank != 1)
    return fail(c, at_opnd(op, 0), "operand of 'expand_dims' must be a rank-1 tile, found %s",
                ts(a).s);
  int64_t axis = op->iattr[0];
  if (axis < 0 || axis > 1)
    return fail(c, op->loc, "axis %lld of 'expand_dims' is out of range for %s (must be 0 or 1)",
                (long long)axis, ts(a).s);
  kn_type want = axis == 0 ? kn_ty_tile2((kn_scalar)a.elem, 1, a.shape[0])
                           : kn_ty_tile2((kn_scalar)a.elem, a.shape[0], 1);
  return expect_result(c, op, want);
}

static int check_reshape(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type, r = op->res[0]->type;
  if (!is_tile(a))
    return fail(c, at_opnd(op, 0), "operand of 'reshape' must be a tile, found %s", ts(a).s);
  if (!is_tile(r) || r.elem != a.elem)
    return fail(c, op->loc, "result of 'reshape' must be a tile of element type %s, found %s",
                kn_scalar_name((kn_scalar)a.elem), ts(r).s);
  if (kn_ty_numel(a) != kn_ty_numel(r))
    return fail(c, op->loc, "'reshape' must keep the element count: %s has %lld, %s has %lld",
                ts(a).s, (long long)kn_ty_numel(a), ts(r).s, (long long)kn_ty_numel(r));
  return 0;
}

static int check_transpose(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type;
  if (!is_tile(a) || a.rank != 2)
    return fail(c, at_opnd(op, 0), "operand of 'transpose' must be a rank-2 tile, found %s",
                ts(a).s);
  return expect_result(c, op, kn_ty_tile2((kn_scalar)a.elem, a.shape[1], a.shape[0]));
}

static int check_arange(vctx *c, const kn_op *op) {
  int64_t lo = op->iattr[0], hi = op->iattr[1];
  if (lo < INT32_MIN || lo > INT32_MAX || hi < INT32_MIN || hi > INT32_MAX)
    return fail(c, op->loc, "bounds of 'arange' must fit in i32, found %lld, %lld", (long long)lo,
                (long long)hi);
  if (hi <= lo)
    return fail(c, op->loc, "'arange %lld, %lld' is empty: end must be greater than start",
                (long long)lo, (long long)hi);
  kn_type r = op->res[0]->type;
  if (hi - lo > KN_MAX_TILE_NUMEL || !kn_ty_eq(r, kn_ty_tile1(KN_I32, (int)(hi - lo))))
    return fail(c, op->loc, "result of 'arange %lld, %lld' must be tile<%lldxi32>, found %s",
                (long long)lo, (long long)hi, (long long)(hi - lo), ts(r).s);
  return 0;
}

static int check_const(vctx *c, const kn_op *op) {
  kn_type r = op->res[0]->type;
  if (!is_data(r))
    return fail(c, op->loc, "'const' must have a scalar or tile type, found %s", ts(r).s);
  if (is_float(r)) return 0;
  /* an integer const lives in iattr[0]; a non-integral fattr means a float literal was given */
  if (op->fattr != 0 && op->fattr != (double)op->iattr[0])
    return fail(c, op->loc, "float constant %g on integer type %s", op->fattr, ts(r).s);
  int64_t v = op->iattr[0];
  bool fits = r.elem == KN_I1 ? (v == 0 || v == 1)
            : r.elem == KN_I32 ? (v >= INT32_MIN && v <= INT32_MAX) : true;
  if (!fits)
    return fail(c, op->loc, "constant %lld does not fit in %s", (long long)v,
                kn_scalar_name((kn_scalar)r.elem));
  return 0;
}

static int check_axis_op(vctx *c, const kn_op *op) {  /* program_id, num_programs */
  if (op->iattr[0] < 0 || op->iattr[0] > 2)
    return fail(c, op->loc, "axis of '%s' must be 0, 1 or 2, found %lld", opname(op),
                (long long)op->iattr[0]);
  return expect_result(c, op, kn_ty_scalar(KN_I32));
}

static int check_ptradd(vctx *c, const kn_op *op) {
  kn_type p = op->opnd[0]->type, o = op->opnd[1]->type;
  if (!is_ptr(p))
    return fail(c, at_opnd(op, 0), "first operand of 'ptradd' must be a pointer, found %s",
                ts(p).s);
  if (!is_index(o))
    return fail(c, at_opnd(op, 1), "offset of 'ptradd' must be an i32 or i64 scalar, found %s",
                ts(o).s);
  return expect_result(c, op, p);
}

static int check_dot(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type, b = op->opnd[1]->type, acc = op->opnd[2]->type;
  if (!is_tile(a) || a.rank != 2)
    return fail(c, at_opnd(op, 0), "operand a of 'dot' must be a rank-2 tile, found %s", ts(a).s);
  if (!is_tile(b) || b.rank != 2)
    return fail(c, at_opnd(op, 1), "operand b of 'dot' must be a rank-2 tile, found %s", ts(b).s);
  if (!is_float(a))
    return fail(c, at_opnd(op, 0), "operands of 'dot' must be float tiles (f16, bf16, f32 or fp8), "
                "found %s", ts(a).s);
  if (a.elem != b.elem)
    return fail(c, at_opnd(op, 1), "operands a and b of 'dot' must have the same element type, "
                "found %s and %s", ts(a).s, ts(b).s);
  if (a.shape[1] != b.shape[0])
    return fail(c, at_opnd(op, 1), "inner dimensions of 'dot' differ: a is %s (K = %d), b is %s "
                "(K = %d)", ts(a).s, a.shape[1], ts(b).s, b.shape[0]);
  kn_type want = kn_ty_tile2(KN_F32, a.shape[0], b.shape[1]);
  if (acc.elem != KN_F32 || !is_tile(acc))
    return fail(c, at_opnd(op, 2), "accumulator of 'dot' must be %s (f32), found %s", ts(want).s,
                ts(acc).s);
  if (!kn_ty_eq(acc, want))
    return fail(c, at_opnd(op, 2), "accumulator of 'dot' must be %s (M x N of a and b), found %s",
                ts(want).s, ts(acc).s);
  return expect_result(c, op, want);
}

static int check_reduce(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type;
  if (!is_tile(a))
    return fail(c, at_opnd(op, 0), "operand of '%s' must be a tile, found %s", opname(op),
                ts(a).s);
  int64_t axis = op->iattr[0];
  if (axis < 0 || axis >= a.rank)
    return fail(c, op->loc, "axis %lld of '%s' is out of range for %s (rank %d)", (long long)axis,
                opname(op), ts(a).s, a.rank);
  kn_type want = a.rank == 1 ? kn_ty_scalar((kn_scalar)a.elem)
                             : kn_ty_tile1((kn_scalar)a.elem, a.shape[axis == 0 ? 1 : 0]);
  return expect_result(c, op, want);
}

static int check_hint(vctx *c, const kn_op *op) {
  kn_type a = op->opnd[0]->type;
  if (!is_data(a) || !is_int(a) || a.elem == KN_I1)
    return fail(c, at_opnd(op, 0), "operand of '%s' must be an i32 or i64 scalar or tile, "
                "found %s", opname(op), ts(a).s);
  if (op->iattr[0] <= 0)
    return fail(c, op->loc, "value of '%s' must be positive, found %lld", opname(op),
                (long long)op->iattr[0]);
  return expect_result(c, op, a);
}

/* load and store share the operand layout of kn_mem_operands_get(); the counts are checked
 * first because that function asserts on them */
static int check_mem(vctx *c, const kn_op *op) {
  bool st = op->opc == KN_OP_STORE;
  const char *nm = opname(op);
  int64_t rank = op->iattr[0];
  unsigned cl = (unsigned)op->iattr[1];
  if (rank < 1 || rank > KN_MAX_RANK)
    return fail(c, op->loc, "rank of '%s' must be 1 or 2, found %lld", nm, (long long)rank);
  unsigned allowed =
      KN_MEM_BOUNDS | KN_MEM_MASK |
      (st ? (unsigned)KN_MEM_ATOMIC_ADD : (unsigned)(KN_MEM_OTHER | KN_MEM_OFF32));
  if (op->iattr[1] < 0 || (cl & ~allowed))
    return fail(c, op->loc, "invalid clauses 0x%llx of '%s'", (unsigned long long)op->iattr[1], nm);
  int r = (int)rank;
  int want = 1 + 2 * r + ((cl & KN_MEM_BOUNDS) ? r : 0) + (st ? 1 : 0) +
             ((cl & KN_MEM_MASK) ? 1 : 0) + ((cl & KN_MEM_OTHER) ? 1 : 0);
  if (op->nopnd != want)
    return fail(c, op->loc, "'%s' of rank %d with these clauses takes %d operands, found %d", nm,
                r, want, op->nopnd);
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  /* operand indices, for locations */
  int i_bound = 1 + 2 * r, k = i_bound + ((cl & KN_MEM_BOUNDS) ? r : 0);
  int i_value = st ? k++ : -1;
  int i_mask = (cl & KN_MEM_MASK) ? k++ : -1;
  int i_other = (cl & KN_MEM_OTHER) ? k++ : -1;

  kn_type t = st ? mo.value->type : op->res[0]->type;
  kn_loc tloc = st ? at_opnd(op, i_value) : op->loc;
  if (!is_data(t))
    return fail(c, tloc, "%s of '%s' must be a tile (or a scalar), found %s",
                st ? "stored value" : "result", nm, ts(t).s);
  if (is_tile(t) ? t.rank != r : r != 1)
    return fail(c, tloc, "'%s' of rank %d needs a rank-%d tile%s, found %s", nm, r, r,
                r == 1 ? " or a scalar" : "", ts(t).s);
  kn_type base = mo.base->type;
  kn_type want_base = kn_ty_ptr((kn_scalar)t.elem);
  /* a store's value is what the user most likely got wrong; a load's base */
  if (st && is_ptr(base) && base.elem != t.elem)
    return fail(c, tloc, "'store' of %s through %s: the element types differ", ts(t).s,
                ts(base).s);
  if (!kn_ty_eq(base, want_base))
    return fail(c, at_opnd(op, 0), "base of '%s' must be %s to %s %s, found %s", nm,
                ts(want_base).s, st ? "store" : "load", ts(t).s, ts(base).s);
  if ((cl & KN_MEM_ATOMIC_ADD) && t.elem != KN_F32)
    return fail(c, tloc, "'store' with atomic_add adds f32 elements only, found %s through %s",
                ts(t).s, ts(base).s);
  for (int i = 0; i < r; i++) {
    if (!is_index(mo.off[i]->type))
      return fail(c, at_opnd(op, 1 + i), "offset %d of '%s' must be an i32 or i64 scalar, found %s",
                  i, nm, ts(mo.off[i]->type).s);
    if (!is_index(mo.stride[i]->type))
      return fail(c, at_opnd(op, 1 + r + i), "stride %d of '%s' must be an i32 or i64 scalar, "
                  "found %s", i, nm, ts(mo.stride[i]->type).s);
  }
  for (int i = 0; mo.bound[0] && i < r; i++)
    if (!is_index(mo.bound[i]->type))
      return fail(c, at_opnd(op, i_bound + i), "bound %d of '%s' must be an i32 or i64 scalar, "
                  "found %s", i, nm, ts(mo.bound[i]->type).s);
  if (mo.mask && !kn_ty_eq(mo.mask->type, kn_ty_with_elem(t, KN_I1)))
    return fail(c, at_opnd(op, i_mask), "mask of '%s' must be %s (the shape of the %s value), "
                "found %s", nm, ts(kn_ty_with_elem(t, KN_I1)).s, st ? "stored" : "loaded",
                ts(mo.mask->type).s);
  if (mo.other && !kn_ty_eq(mo.other->type, kn_ty_scalar((kn_scalar)t.elem)))
    return fail(c, at_opnd(op, i_other), "'other' of 'load' must be a %s scalar, found %s",
                kn_scalar_name((kn_scalar)t.elem), ts(mo.other->type).s);
  return 0;
}

static int check_gather(vctx *c, const kn_op *op) {
  unsigned cl = (unsigned)op->iattr[0];
  if (op->iattr[0] < 0 || (cl & ~(unsigned)(KN_MEM_MASK | KN_MEM_OTHER)))
    return fail(c, op->loc, "invalid clauses 0x%llx of 'gather'", (unsigned long long)op->iattr[0]);
  int want = 2 + ((cl & KN_MEM_MASK) ? 1 : 0) + ((cl & KN_MEM_OTHER) ? 1 : 0);
  if (op->nopnd != want)
    return fail(c, op->loc, "'gather' with these clauses takes %d operands, found %d", want,
                op->nopnd);
  kn_gather_operands go;
  kn_gather_operands_get(op, &go);
  kn_type r = op->res[0]->type;
  if (!is_tile(r)) return fail(c, op->loc, "result of 'gather' must be a tile, found %s", ts(r).s);
  kn_type want_base = kn_ty_ptr((kn_scalar)r.elem);
  if (!kn_ty_eq(go.base->type, want_base))
    return fail(c, at_opnd(op, 0), "base of 'gather' must be %s to gather %s, found %s",
                ts(want_base).s, ts(r).s, ts(go.base->type).s);
  kn_type o = go.offsets->type;
  if (!is_tile(o) || (o.elem != KN_I32 && o.elem != KN_I64) || !same_shape(o, r))
    return fail(c, at_opnd(op, 1), "offsets of 'gather' must be %s or %s (the result's shape), "
                "found %s", ts(kn_ty_with_elem(r, KN_I32)).s, ts(kn_ty_with_elem(r, KN_I64)).s,
                ts(o).s);
  if (go.mask && !kn_ty_eq(go.mask->type, kn_ty_with_elem(r, KN_I1)))
    return fail(c, at_opnd(op, 2), "mask of 'gather' must be %s (the result's shape), found %s",
                ts(kn_ty_with_elem(r, KN_I1)).s, ts(go.mask->type).s);
  if (go.other && !kn_ty_eq(go.other->type, kn_ty_scalar((kn_scalar)r.elem)))
    return fail(c, at_opnd(op, op->nopnd - 1), "'other' of 'gather' must be a %s scalar, found %s",
                kn_scalar_name((kn_scalar)r.elem), ts(go.other->type).s);
  return 0;
}

/* ---- blocks, regions, dominance ---- */

static int walk_block(vctx *c, kn_block *b, kn_loc where, const char *what);

/* the loc of the last op of a region (where a missing yield should go), else `fallback` */
static kn_loc end_loc(const kn_block *b, kn_loc fallback) {
  return b && b->last ? b->last->loc : fallback;
}

/* a region's yield against the types it must carry: those of like[0..n) */
static int check_yield(vctx *c, const kn_op *parent, kn_block *b, int n, kn_value *const *like,
                       const char *what) {
  const kn_op *y = b->last;  /* walk_block made sure it is a yield */
  if (y->nopnd != n)
    return fail(c, y->loc, "'yield' of %s passes %d value%s, expected %d", what, y->nopnd,
                y->nopnd == 1 ? "" : "s", n);
  for (int i = 0; i < n; i++) {
    kn_type want = like[i]->type;
    if (!kn_ty_eq(y->opnd[i]->type, want))
      return fail(c, at_opnd(y, i), "'yield' of %s: value %d has type %s, expected %s%s", what, i,
                  ts(y->opnd[i]->type).s, ts(want).s,
                  parent->opc == KN_OP_FOR ? " (the loop-carried type)" : "");
  }
  return 0;
}

static int check_for(vctx *c, kn_op *op) {
  if (op->nopnd < 3)
    return fail(c, op->loc, "'for' needs lo, hi and step, found %d operands", op->nopnd);
  kn_type it = op->opnd[0]->type;
  static const char *const bname[3] = {"lower bound", "upper bound", "step"};
  for (int i = 0; i < 3; i++) {
    kn_type t = op->opnd[i]->type;
    if (!is_index(t))
      return fail(c, at_opnd(op, i), "%s of 'for' must be an i32 or i64 scalar, found %s",
                  bname[i], ts(t).s);
    if (!kn_ty_eq(t, it))
      return fail(c, at_opnd(op, i), "bounds of 'for' must have one type, found %s and %s",
                  ts(it).s, ts(t).s);
  }
  int ninit = op->nopnd - 3;
  if (op->nres != ninit)
    return fail(c, op->loc, "'for' has %d result%s but %d loop-carried value%s", op->nres,
                op->nres == 1 ? "" : "s", ninit, ninit == 1 ? "" : "s");
  if (op->nregion != 1 || !op->region[0])
    return fail(c, op->loc, "'for' must have exactly one body region");
  kn_block *body = op->region[0];
  if (body->nargs != 1 + ninit)
    return fail(c, op->loc, "body of 'for' has %d arguments, expected %d (iv and %d loop-carried)",
                body->nargs, 1 + ninit, ninit);
  if (!kn_ty_eq(body->args[0]->type, it))
    return fail(c, op->loc, "induction variable of 'for' has type %s but the bounds are %s",
                ts(body->args[0]->type).s, ts(it).s);
  for (int i = 0; i < ninit; i++) {
    kn_type init = op->opnd[3 + i]->type;
    if (!kn_ty_eq(body->args[1 + i]->type, init))
      return fail(c, at_opnd(op, 3 + i), "loop-carried value %s has type %s but its initial "
                  "value has type %s", vs(body->args[1 + i]).s, ts(body->args[1 + i]->type).s,
                  ts(init).s);
    if (!kn_ty_eq(op->res[i]->type, init))
      return fail(c, at_opnd(op, 3 + i), "result %d of 'for' has type %s but the loop-carried "
                  "value has type %s", i, ts(op->res[i]->type).s, ts(init).s);
  }
  if (walk_block(c, body, op->loc, "body of 'for'")) return -1;
  return check_yield(c, op, body, ninit, op->opnd + 3, "the 'for' body");
}

static int check_if(vctx *c, kn_op *op) {
  if (op->nopnd != 1)
    return fail(c, op->loc, "'if' takes 1 condition, found %d operands", op->nopnd);
  kn_type cond = op->opnd[0]->type;
  if (!is_scalar(cond) || cond.elem != KN_I1)
    return fail(c, at_opnd(op, 0), "condition of 'if' must be an i1 scalar, found %s",
                ts(cond).s);
  if (op->nregion != 2 || !op->region[0] || !op->region[1])
    return fail(c, op->loc, "'if' must have a then and an else region");
  static const char *const rname[2] = {"the 'then' region of 'if'", "the 'else' region of 'if'"};
  for (int r = 0; r < 2; r++) {
    kn_block *b = op->region[r];
    if (b->nargs != 0) return fail(c, op->loc, "%s takes no arguments", rname[r]);
    if (walk_block(c, b, op->loc, rname[r])) return -1;
    if (check_yield(c, op, b, op->nres, op->res, rname[r])) return -1;
  }
  return 0;
}

/* ---- elemental calls ---- */

/* why op cannot run per element in the body of an elemental callee (into why), or NULL when it
 * can: the ops the inliner lifts to tiles (inline.c), on scalars and pointers.  Two kinds of
 * reason, looked for in two passes so that the op that matters is named (a dot rather than the
 * tile constant feeding it): kind 0, an op that never runs per element; kind 1, a tile value or
 * a load of another form. */
static const char *not_per_element(const kn_op *op, int kind, char *why, size_t n) {
  bool tiles = false;
  for (int i = 0; i < op->nopnd; i++) tiles |= op->opnd[i] && is_tile(op->opnd[i]->type);
  for (int i = 0; i < op->nres; i++) tiles |= op->res[i] && is_tile(op->res[i]->type);
  switch (op->opc) {
  KN_CASES_BINARY
  KN_CASES_UNARY
  case KN_OP_CONST: case KN_OP_CMP: case KN_OP_SELECT: case KN_OP_CAST: case KN_OP_PTRADD:
  case KN_OP_MULTIPLE_OF: case KN_OP_MAX_CONTIGUOUS: case KN_OP_CALL: case KN_OP_RETURN:
    if (kind == 0 || !tiles) return NULL;
    snprintf(why, n, "'%s' on a tile", opname(op));
    return why;
  case KN_OP_LOAD:
    /* load %p[%o] strides [%s] (bounds [%n])? : T, the one form the inliner turns into a gather */
    if (kind == 0 ||
        (!tiles && op->iattr[0] == 1 && !(op->iattr[1] & (KN_MEM_MASK | KN_MEM_OTHER))))
      return NULL;
    snprintf(why, n, "'load' %s", tiles ? "of a tile" : "with a mask or other");
    return why;
  case KN_OP_PROGRAM_ID: case KN_OP_NUM_PROGRAMS: case KN_OP_ARANGE: case KN_OP_SPLAT:
  case KN_OP_BROADCAST: case KN_OP_EXPAND_DIMS: case KN_OP_RESHAPE: case KN_OP_TRANSPOSE:
  case KN_OP_STORE: case KN_OP_GATHER: case KN_OP_DOT: case KN_OP_REDUCE_MAX:
  case KN_OP_REDUCE_SUM: case KN_OP_FOR: case KN_OP_IF: case KN_OP_YIELD:
    break;
  }
  snprintf(why, n, "'%s'", opname(op));
  return why;
}

/* f (called elementally, the call at `at_s`) runs per element: straight-line code of the ops
 * not_per_element() accepts, calling only such functions.  depth bounds the walk when calls form
 * a cycle (reported by check_no_recursion). */
static int check_per_element(vctx *c, const kn_func *f, const char *at_s, int depth) {
  if (!f->body || depth > c->m->nfuncs) return 0;
  for (int kind = 0; kind < 2; kind++)
    for (const kn_op *op = f->body->first; op; op = op->next) {
      char why[80];
      if ((unsigned)op->opc >= KN_OP_COUNT || !not_per_element(op, kind, why, sizeof why))
        continue;  /* (an unknown opcode is reported with f's own checks) */
      kn_func *saved = c->f;
      c->f = (kn_func *)f;  /* built IR: the message names the callee */
      int rc = fail(c, op->loc, "%s in @%s cannot run per element in an elemental call (called "
                    "with tiles at %s)", why, f->name, at_s);
      c->f = saved;
      return rc;
    }
  for (const kn_op *op = f->body->first; op; op = op->next) {
    if (op->opc != KN_OP_CALL) continue;
    const kn_func *g = op->callee;
    if (!g && op->callee_name) g = kn_module_find(c->m, op->callee_name);
    if (g && !g->is_kernel && check_per_element(c, g, at_s, depth + 1)) return -1;
  }
  return 0;
}

/* a call passing the tile `first` for a scalar param: every tile argument of first's shape and
 * its param's element type, pointers and scalars as they are, results tiles of that shape of
 * the declared scalar types, and a callee that can run per element */
static int check_elemental_call(vctx *c, kn_op *op, const kn_func *f, const kn_value *first) {
  const char *name = f->name;
  kn_type s = first->type;
  char shape[40];
  if (s.rank == 1) snprintf(shape, sizeof shape, "%d", s.shape[0]);
  else snprintf(shape, sizeof shape, "%dx%d", s.shape[0], s.shape[1]);
  for (int i = 0; i < kn_func_nparams(f); i++) {
    const kn_value *p = kn_func_param(f, i);
    kn_type pt = p->type, at = op->opnd[i]->type;
    if (is_tile(pt))
      return fail(c, at_opnd(op, i), "'@%s' is called with tiles for its scalar params, but its "
                  "param %s is %s (an elemental callee takes scalars and pointers)", name,
                  vs(p).s, ts(pt).s);
    if (kn_ty_eq(at, pt)) continue;
    kn_type tile = kn_ty_tile((kn_scalar)pt.elem, s.rank, s.shape);
    if (is_ptr(pt))
      return fail(c, at_opnd(op, i), "argument %d of '@%s' (param %s) must be %s (a pointer is "
                  "passed as it is), found %s", i, name, vs(p).s, ts(pt).s, ts(at).s);
    if (!kn_ty_eq(at, tile))
      return fail(c, at_opnd(op, i), "argument %d of '@%s' (param %s) must be %s or %s (the "
                  "elemental call is over %s), found %s", i, name, vs(p).s, ts(pt).s, ts(tile).s,
                  shape, ts(at).s);
  }
  for (int i = 0; i < f->nret; i++) {
    if (!is_scalar(f->ret[i]))
      return fail(c, op->loc, "'@%s' is called with tiles for its scalar params, but its result %d "
                  "is %s (an elemental callee returns scalars)", name, i, ts(f->ret[i]).s);
    kn_type want = kn_ty_tile((kn_scalar)f->ret[i].elem, s.rank, s.shape);
    if (!kn_ty_eq(op->res[i]->type, want))
      return fail(c, op->loc, "result %d of the elemental call of '@%s' must be %s, found %s", i,
                  name, ts(want).s, ts(op->res[i]->type).s);
  }
  char at_s[200];
  const char *file = op->loc.file ? op->loc.file : c->m->filename ? c->m->filename : "<built>";
  if (op->loc.line > 0)
    snprintf(at_s, sizeof at_s, "%.150s:%d:%d", file, op->loc.line, op->loc.col);
  else snprintf(at_s, sizeof at_s, "a call in '@%.60s'", c->f->name);
  return check_per_element(c, f, at_s, 0);
}

static int check_call(vctx *c, kn_op *op) {
  const char *name = op->callee_name ? op->callee_name : op->callee ? op->callee->name : NULL;
  if (!name) return fail(c, op->loc, "'call' without a callee");
  kn_func *f = kn_module_find(c->m, name);
  if (!f) return fail(c, op->loc, "call of unknown function '@%s'", name);
  if (f->is_kernel)
    return fail(c, op->loc, "cannot call kernel '@%s'; only 'func' functions can be called", name);
  op->callee = f;
  int np = kn_func_nparams(f);
  if (op->nopnd != np)
    return fail(c, op->nopnd > np ? at_opnd(op, np) : op->loc,
                "'@%s' takes %d argument%s, found %d", name, np, np == 1 ? "" : "s", op->nopnd);
  if (op->nres != f->nret)
    return fail(c, op->loc, "'@%s' returns %d value%s, but the call has %d result%s", name,
                f->nret, f->nret == 1 ? "" : "s", op->nres, op->nres == 1 ? "" : "s");
  const kn_value *first = kn_call_elemental_arg(op, f);
  if (first) return check_elemental_call(c, op, f, first);
  for (int i = 0; i < np; i++)
    if (!kn_ty_eq(op->opnd[i]->type, kn_func_param(f, i)->type))
      return fail(c, at_opnd(op, i), "argument %d of '@%s' must be %s, found %s", i, name,
                  ts(kn_func_param(f, i)->type).s, ts(op->opnd[i]->type).s);
  for (int i = 0; i < f->nret; i++)
    if (!kn_ty_eq(op->res[i]->type, f->ret[i]))
      return fail(c, op->loc, "result %d of the call of '@%s' must be %s, found %s", i, name,
                  ts(f->ret[i]).s, ts(op->res[i]->type).s);
  return 0;
}

static int check_return(vctx *c, const kn_op *op) {
  kn_func *f = c->f;
  if (op->parent && op->parent->parent_op)
    return fail(c, op->loc, "'return' inside a '%s' region; a region ends with 'yield'",
                opname(op->parent->parent_op));
  if (f->is_kernel) {
    if (op->nopnd)
      return fail(c, at_opnd(op, 0), "kernel '@%s' returns nothing, but 'return' has %d value%s",
                  f->name, op->nopnd, op->nopnd == 1 ? "" : "s");
    return 0;
  }
  if (op->nopnd != f->nret)
    return fail(c, op->nopnd > f->nret ? at_opnd(op, f->nret) : op->loc,
                "'@%s' returns %d value%s, but 'return' has %d", f->name, f->nret,
                f->nret == 1 ? "" : "s", op->nopnd);
  for (int i = 0; i < f->nret; i++)
    if (!kn_ty_eq(op->opnd[i]->type, f->ret[i]))
      return fail(c, at_opnd(op, i), "return value %d of '@%s' must be %s, found %s", i, f->name,
                  ts(f->ret[i]).s, ts(op->opnd[i]->type).s);
  return 0;
}

/* fixed operand/result/region counts from ops.def */
static int check_counts(vctx *c, const kn_op *op) {
  const kn_opinfo *in = &kn_opinfo_table[op->opc];
  if (in->nopnd >= 0 && op->nopnd != in->nopnd)
    return fail(c, op->loc, "'%s' takes %d operand%s, found %d", in->name, in->nopnd,
                in->nopnd == 1 ? "" : "s", op->nopnd);
  if (in->nres >= 0 && op->nres != in->nres)
    return fail(c, op->loc, "'%s' has %d result%s, found %d", in->name, in->nres,
                in->nres == 1 ? "" : "s", op->nres);
  if (!(in->flags & KN_REGION) && op->nregion != 0)
    return fail(c, op->loc, "'%s' cannot own regions", in->name);
  if (op->nopnd < 0 || op->nres < 0 || (op->nopnd && !op->opnd) || (op->nres && !op->res))
    return fail(c, op->loc, "malformed '%s' (operand or result arrays)", in->name);
  for (int i = 0; i < op->nres; i++)
    if (!op->res[i] || op->res[i]->def != op)
      return fail(c, op->loc, "malformed '%s': result %d does not belong to it", in->name, i);
  return 0;
}

/* every operand must be a value of this function that is visible here */
static int check_operands(vctx *c, const kn_op *op) {
  for (int i = 0; i < op->nopnd; i++) {
    kn_value *v = op->opnd[i];
    if (!v) return fail(c, at_opnd(op, i), "operand %d of '%s' is missing", i, opname(op));
    if (v->id < 0 || v->id >= c->nvalues || c->byid[v->id] != v)
      return fail(c, at_opnd(op, i), "%s is not a value of function '@%s'", vs(v).s, c->f->name);
    if (c->live[v->id]) continue;
    kn_loc dl = v->def ? v->def->loc : v->owner && v->owner->parent_op ? v->owner->parent_op->loc
                                                                       : c->f->loc;
    char where[32] = "";
    if (dl.line > 0) snprintf(where, sizeof where, " (line %d)", dl.line);
    if (c->seen[v->id])
      return fail(c, at_opnd(op, i), "%s is not visible here: it is defined inside a region%s "
                  "that does not enclose this use", vs(v).s, where);
    return fail(c, at_opnd(op, i), "%s is used before its definition%s", vs(v).s, where);
  }
  return 0;
}

static int check_op(vctx *c, kn_op *op) {
  switch (op->opc) {
  case KN_OP_PROGRAM_ID: case KN_OP_NUM_PROGRAMS: return check_axis_op(c, op);
  case KN_OP_CONST: return check_const(c, op);
  case KN_OP_ARANGE: return check_arange(c, op);
  case KN_OP_SPLAT: return check_splat(c, op);
  case KN_OP_BROADCAST: return check_broadcast(c, op);
  case KN_OP_EXPAND_DIMS: return check_expand_dims(c, op);
  case KN_OP_RESHAPE: return check_reshape(c, op);
  case KN_OP_TRANSPOSE: return check_transpose(c, op);
  case KN_OP_CMP: return check_cmp(c, op);
  case KN_OP_SELECT: return check_select(c, op);
  case KN_OP_CAST: return check_cast(c, op);
  case KN_OP_PTRADD: return check_ptradd(c, op);
  case KN_OP_LOAD: case KN_OP_STORE: return check_mem(c, op);
  case KN_OP_GATHER: return check_gather(c, op);
  case KN_OP_DOT: return check_dot(c, op);
  case KN_OP_REDUCE_MAX: case KN_OP_REDUCE_SUM: return check_reduce(c, op);
  case KN_OP_FOR: return check_for(c, op);
  case KN_OP_IF: return check_if(c, op);
  case KN_OP_YIELD:
    if (!op->parent || !op->parent->parent_op)
      return fail(c, op->loc, "'yield' outside a 'for' or 'if' region (a function body ends "
                  "with 'return')");
    return 0;  /* its operands are matched by the owning for/if */
  case KN_OP_CALL: return check_call(c, op);
  case KN_OP_RETURN: return check_return(c, op);
  case KN_OP_MULTIPLE_OF: case KN_OP_MAX_CONTIGUOUS: return check_hint(c, op);
  KN_CASES_BINARY
  KN_CASES_UNARY
    return check_elementwise(c, op);
  }
  return fail(c, op->loc, "unknown opcode %d", (int)op->opc);
}

static void set_live(vctx *c, kn_value *v, int on) {
  c->live[v->id] = (unsigned char)on;
  if (on) c->seen[v->id] = 1;
}

/* `where`/`what` describe the block for messages: the function or the owning op */
static int walk_block(vctx *c, kn_block *b, kn_loc where, const char *what) {
  for (int i = 0; i < b->nargs; i++) {
    if (!b->args[i]) return fail(c, where, "%s: argument %d is missing", what, i);
    if (check_type(c, where, b->args[i]->type, what)) return -1;
    set_live(c, b->args[i], 1);
  }
  const kn_op *term = NULL;
  for (kn_op *op = b->first; op; op = op->next) {
    if ((unsigned)op->opc >= KN_OP_COUNT) return fail(c, op->loc, "unknown opcode %d", op->opc);
    if (term)
      return fail(c, op->loc, "'%s' after '%s', which must be the last op of its block",
                  opname(op), opname(term));
    if (check_counts(c, op) || check_operands(c, op)) return -1;
    for (int i = 0; i < op->nres; i++)
      if (check_type(c, op->loc, op->res[i]->type, "result type")) return -1;
    if (check_op(c, op)) return -1;
    for (int i = 0; i < op->nres; i++) set_live(c, op->res[i], 1);
    if (kn_opinfo_table[op->opc].flags & KN_TERMINATOR) term = op;
  }
  bool region = b->parent_op != NULL;
  kn_opcode want = region ? KN_OP_YIELD : KN_OP_RETURN;
  if (!b->last || b->last->opc != want)
    return fail(c, end_loc(b, where), "%s must end with '%s'", what,
                kn_opinfo_table[want].name);
  /* leaving the block: its values go out of scope */
  for (int i = 0; i < b->nargs; i++) set_live(c, b->args[i], 0);
  for (kn_op *op = b->first; op; op = op->next)
    for (int i = 0; i < op->nres; i++) set_live(c, op->res[i], 0);
  return 0;
}

/* ids in kn_func_number() order (params, then program order, a region before its op's results);
 * done here rather than by kn_func_number() so malformed built IR (a region missing) cannot crash */
static int number_block(kn_block *b, kn_value **byid, int next) {
  for (int i = 0; i < b->nargs; i++) {
    if (!b->args[i]) continue;  /* reported by walk_block */
    if (byid) byid[next] = b->args[i];
    b->args[i]->id = next++;
  }
  for (kn_op *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion && r < 2; r++)
      if (op->region[r]) next = number_block(op->region[r], byid, next);
    for (int i = 0; i < op->nres; i++) {
      if (!op->res[i]) continue;  /* reported by check_counts */
      if (byid) byid[next] = op->res[i];
      op->res[i]->id = next++;
    }
  }
  return next;
}

/* ---- functions and the module ---- */

static int verify_func(vctx *c, kn_func *f) {
  kn_module *m = c->m;
  char what[160];
  const char *kind = f->is_kernel ? "kernel" : "function";
  kn_func *first = kn_module_find(m, f->name); /* the first function of the name */
  if (first != f)
    return fail(c, f->loc, "function '@%s' is already defined (line %d)", f->name,
                first ? first->loc.line : 0);
  if (f->nmeta > 1) { /* (a set: linear in the attributes) */
    kn_arena *a = kn_arena_new();
    kn_strmap seen = {.arena = a};
    int twice = -1;
    for (int i = 0; twice < 0 && i < f->nmeta; i++)
      if (kn_strmap_put(&seen, f->meta[i].key, strlen(f->meta[i].key), i) >= 0) twice = i;
    kn_arena_free(a);
    if (twice >= 0)
      return fail(c, f->loc, "attribute '%s' of '@%s' is given twice", f->meta[twice].key,
                  f->name);
  }
  if (f->is_kernel && f->nret)
    return fail(c, f->loc, "kernel '@%s' cannot return values (it declares %d)", f->name, f->nret);
  for (int i = 0; i < f->nret; i++)
    if (check_type(c, f->loc, f->ret[i], "result type")) return -1;
  if (!f->body) return fail(c, f->loc, "%s '@%s' has no body", kind, f->name);
  for (int i = 0; i < f->body->nargs; i++) {
    kn_value *p = f->body->args[i];
    if (check_type(c, f->loc, p->type, "parameter type")) return -1;
    if (f->is_kernel && is_tile(p->type))
      return fail(c, f->loc, "parameter %s of kernel '@%s' has type %s; kernel parameters are "
                  "scalars or pointers", vs(p).s, f->name, ts(p->type).s);
  }

  int n = number_block(f->body, NULL, 0);
  f->nvalues = n;
  c->nvalues = n;
  c->byid = calloc((size_t)n + 1, sizeof *c->byid);
  c->live = calloc((size_t)n + 1, 1);
  c->seen = calloc((size_t)n + 1, 1);
  int rc = -1;
  if (!c->byid || !c->live || !c->seen) {
    rc = fail(c, f->loc, "out of memory while verifying '@%s'", f->name);
  } else {
    number_block(f->body, c->byid, 0);
    snprintf(what, sizeof what, "body of %s '@%s'", kind, f->name);
    rc = walk_block(c, f->body, f->loc, what);
  }
  free(c->byid);
  free(c->live);
  free(c->seen);
  c->byid = NULL;
  c->live = c->seen = NULL;
  return rc;
}

/* ---- no recursion: calls form a DAG ---- */

typedef struct cgraph {
  vctx *c;
  unsigned char *state;  /* 0 unvisited, 1 on the DFS stack, 2 done */
  int *stack, depth;
  int *height;           /* of a done function: its longest chain of calls (0: calls nothing) */
} cgraph;

static int func_index(const kn_module *m, const kn_func *f) {
  return f->index >= 0 && f->index < m->nfuncs && m->funcs[f->index] == f ? f->index : -1;
}

static int dfs_func(cgraph *g, int fi);

static int dfs_block(cgraph *g, const kn_block *b) {
  for (const kn_op *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion && r < 2; r++)
      if (op->region[r] && dfs_block(g, op->region[r])) return -1;
    if (op->opc != KN_OP_CALL || !op->callee) continue;
    int ci = func_index(g->c->m, op->callee);
    if (ci < 0) continue;
    if (g->state[ci] == 1) {
      char path[300];
      size_t k = 0;
      int from = 0;
      while (g->stack[from] != ci) from++;
      for (int i = from; i < g->depth && k < sizeof path - 80; i++)
        k += (size_t)snprintf(path + k, sizeof path - k, "@%.60s -> ",
                              g->c->m->funcs[g->stack[i]]->name);
      snprintf(path + k, sizeof path - k, "@%.60s", op->callee->name);
      g->c->f = g->c->m->funcs[g->stack[g->depth - 1]];
      return fail(g->c, op->loc, "recursive call: %s (calls must not form a cycle)", path);
    }
    if (g->state[ci] == 0 && g->depth <= KN_MAX_CALL_DEPTH && dfs_func(g, ci)) return -1;
    /* the longest chain of calls from the caller (g->stack's top) through this one */
    int fi = g->stack[g->depth - 1];
    if (g->state[ci] == 0 || g->height[ci] + 1 > KN_MAX_CALL_DEPTH) {
      g->c->f = g->c->m->funcs[fi];
      return fail(g->c, op->loc, "calls nested more than %d deep (through the call of @%.60s): "
                  "the interpreter and the inliner recurse along them", KN_MAX_CALL_DEPTH,
                  op->callee->name);
    }
    if (g->height[ci] + 1 > g->height[fi]) g->height[fi] = g->height[ci] + 1;
  }
  return 0;
}

static int dfs_func(cgraph *g, int fi) {
  g->state[fi] = 1;
  g->stack[g->depth++] = fi;
  if (g->c->m->funcs[fi]->body && dfs_block(g, g->c->m->funcs[fi]->body)) return -1;
  g->depth--;
  g->state[fi] = 2;
  return 0;
}

static int check_no_recursion(vctx *c) {
  int n = c->m->nfuncs;
  cgraph g = {.c = c, .state = calloc((size_t)n + 1, 1),
              .stack = calloc((size_t)n + 1, sizeof(int)),
              .height = calloc((size_t)n + 1, sizeof(int))};
  int rc = 0;
  if (!g.state || !g.stack || !g.height)
    rc = kn_error(c->d, c->m, (kn_loc){0}, "out of memory in verifier");
  for (int i = 0; rc == 0 && i < n; i++)
    if (g.state[i] == 0) rc = dfs_func(&g, i);
  free(g.state);
  free(g.stack);
  free(g.height);
  return rc;
}

int kn_verify(kn_module *m, kn_diag *d) {
  vctx c = {.m = m, .d = d};
  for (int i = 0; i < m->nfuncs; i++) {
    c.f = m->funcs[i];
    if (verify_func(&c, m->funcs[i])) return -1;
  }
  c.f = NULL;
  return check_no_recursion(&c);
}
