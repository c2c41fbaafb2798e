/* fold.c — canonicalize: fold ops on scalar integer constants, delete dead pure ops.
 *
 * Deliberately small.  Folding covers what templates produce in bulk: index arithmetic on
 * constants (BLOCK_M * 2, HEAD_DIM - 1, ...) of i32 and i64 scalars — binary ops, cmp, and int to
 * int casts — with the interpreter's semantics (two's complement wrap; truncating division).  An
 * op whose result the interpreter would report as an error (division by zero) or whose semantics
 * depend on corner cases (shift counts out of range) is left alone for the lowering.  A folded op
 * is rewritten in place into a `const`, so its result value (and every use) stays valid.
 *
 * Dead code: a pure op (KN_PURE in ops.def) with no used result is unlinked; this repeats until
 * nothing changes, so chains die in one call.  Loads, stores, for/if and calls are never removed.
 */
#include "passes.h"

static bool is_int_scalar(const kn_value *v, kn_scalar *s) {
  if (v->type.kind != KN_TY_SCALAR) return false;
  *s = (kn_scalar)v->type.elem;
  return *s == KN_I32 || *s == KN_I64;
}

static bool const_int(const kn_value *v, int64_t *x) {
  kn_scalar s;
  if (!v->def || v->def->opc != KN_OP_CONST || !is_int_scalar(v, &s)) return false;
  *x = v->def->iattr[0];
  return true;
}

static int64_t wrap(kn_scalar s, int64_t x) { return s == KN_I32 ? (int64_t)(int32_t)x : x; }

/* a op b with wrap-around (computed on uint64 so that C has no overflow UB) */
static bool fold_binary(kn_opcode opc, kn_scalar s, int64_t a, int64_t b, int64_t *r) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  int width = s == KN_I32 ? 32 : 64;
  switch (opc) {
  case KN_OP_ADD: *r = (int64_t)(ua + ub); break;
  case KN_OP_SUB: *r = (int64_t)(ua - ub); break;
  case KN_OP_MUL: *r = (int64_t)(ua * ub); break;
  case KN_OP_DIV:
  case KN_OP_REM:
    if (b == 0) return false;
    if (b == -1) *r = opc == KN_OP_DIV ? (int64_t)(0 - ua) : 0;
    else *r = opc == KN_OP_DIV ? a / b : a % b;
    break;
  case KN_OP_MAX: *r = a > b ? a : b; break;
  case KN_OP_MIN: *r = a < b ? a : b; break;
  case KN_OP_AND: *r = a & b; break;
  case KN_OP_OR: *r = a | b; break;
  case KN_OP_XOR: *r = a ^ b; break;
  case KN_OP_SHL:
    if (b < 0 || b >= width) return false;
    *r = (int64_t)(ua << b);
    break;
  case KN_OP_SHR:
    if (b < 0 || b >= width) return false;
    *r = a >> b; /* operands are already wrapped to the width, so this is arithmetic */
    break;
  default: return false;
  }
  *r = wrap(s, *r);
  return true;
}

static bool fold_cmp(kn_pred p, int64_t a, int64_t b) {
  switch (p) {
  case KN_PRED_EQ: return a == b;
  case KN_PRED_NE: return a != b;
  case KN_PRED_LT: return a < b;
  case KN_PRED_LE: return a <= b;
  case KN_PRED_GT: return a > b;
  default: return a >= b;
  }
}

static void make_const(kn_op *op, int64_t v) {
  op->opc = KN_OP_CONST;
  op->nopnd = 0;
  op->opnd_loc = NULL;
  op->iattr[0] = v;
  op->iattr[1] = op->iattr[2] = 0;
}

static int fold_block(kn_block *blk) {
  int changed = 0;
  for (kn_op *op = blk->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) changed += fold_block(op->region[r]);
    int64_t a, b, v;
    kn_scalar s;
    if (kn_op_is_binary(op->opc) && is_int_scalar(op->res[0], &s) &&
        const_int(op->opnd[0], &a) && const_int(op->opnd[1], &b) &&
        fold_binary(op->opc, s, a, b, &v)) {
      make_const(op, v);
      changed++;
    } else if (op->opc == KN_OP_CMP && op->res[0]->type.kind == KN_TY_SCALAR &&
               const_int(op->opnd[0], &a) && const_int(op->opnd[1], &b)) {
      make_const(op, fold_cmp((kn_pred)op->iattr[0], a, b));
      changed++;
    } else if (op->opc == KN_OP_CAST && is_int_scalar(op->res[0], &s) &&
               const_int(op->opnd[0], &a)) {
      make_const(op, wrap(s, a));
      changed++;
    }
  }
  return changed;
}

/* ---- dead code ---- */

static void count_uses(kn_block *blk, int *uses) {
  for (kn_op *op = blk->first; op; op = op->next) {
    for (int i = 0; i < op->nopnd; i++) uses[op->opnd[i]->id]++;
    for (int r = 0; r < op->nregion; r++) count_uses(op->region[r], uses);
  }
}

static void unlink_op(kn_block *blk, kn_op *op) {
  if (op->prev) op->prev->next = op->next;
  else blk->first = op->next;
  if (op->next) op->next->prev = op->prev;
  else blk->last = op->prev;
}

/* removes dead pure ops, walking backwards so a chain dies in one sweep */
static int sweep_block(kn_block *blk, int *uses) {
  int removed = 0;
  for (kn_op *op = blk->last; op;) {
    kn_op *prev = op->prev;
    for (int r = 0; r < op->nregion; r++) removed += sweep_block(op->region[r], uses);
    bool dead = (kn_opinfo_table[op->opc].flags & KN_PURE) && op->nres > 0;
    for (int i = 0; dead && i < op->nres; i++) dead = uses[op->res[i]->id] == 0;
    if (dead) {
      for (int i = 0; i < op->nopnd; i++) uses[op->opnd[i]->id]--;
      unlink_op(blk, op);
      removed++;
    }
    op = prev;
  }
  return removed;
}

int kn_fold(kn_module *m) {
  int changed = 0;
  for (int i = 0; i < m->nfuncs; i++) {
    kn_func *f = m->funcs[i];
    changed += fold_block(f->body);
    for (;;) {
      int nv = kn_func_number(f);
      int *uses = kn_arena_alloc(m->arena, sizeof *uses * (size_t)(nv ? nv : 1));
      count_uses(f->body, uses);
      int removed = sweep_block(f->body, uses);
      changed += removed;
      if (!removed) break;
    }
  }
  return changed;
}
