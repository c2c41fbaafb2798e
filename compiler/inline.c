/* inline.c — replaces every `call` in a kernel by a copy of the callee's body.
 *
 * Attention variants enter as small IR functions (score_mod, mask_mod) called from the template;
 * after inlining, the lowering never sees a call and LLVM sees one straight-line kernel.  The
 * callee's body (all ops but its final `return`) is cloned into a scratch block with the call's
 * operands standing for the callee's params, spliced in front of the call, and every use of the
 * call's results is rewritten to the returned values.  Scanning resumes at the first spliced op so
 * calls inside the callee are inlined too; a budget on the number of inlined calls turns
 * recursion into an error instead of an endless loop.
 *
 * An elemental call (tiles for a func's scalar params, docs/ir.md) is inlined by *lifting* the
 * callee to the call's shape S instead of cloning it: the verifier has made sure the callee is
 * straight-line scalar code, so each of its values either depends on a tile argument (varying:
 * it becomes a tile of S) or does not (uniform: it stays the scalar it was, computed once, so a
 * `load %slopes[%h]` of a uniform head stays one scalar load).  A uniform operand of a varying op
 * is splat to S where a tile first needs it (one splat per scalar), and constants stay scalars
 * until then.  A pointer is a uniform base plus, once a ptradd adds a varying offset, an i64 tile
 * of element offsets from it; a load whose address, stride or bound varies becomes a `gather`
 * from the base at offsets + off * stride, its bounds [n] the gather's mask (0 <= off < n).
 * Calls inside the callee are lifted in place, with their arguments as the caller's values are.
 *
 * Assumes a verified module: a function body ends with its only `return`.
 */
#include <string.h>

#include "op_cases.h"
#include "passes.h"

enum { INLINE_BUDGET = 4096 };

static void replace_uses(kn_block *blk, const kn_value *from, kn_value *to) {
  for (kn_op *op = blk->first; op; op = op->next) {
    for (int i = 0; i < op->nopnd; i++)
      if (op->opnd[i] == from) op->opnd[i] = to;
    for (int r = 0; r < op->nregion; r++) replace_uses(op->region[r], from, to);
  }
}

/* a scratch block of f for the ops that replace a call */
static kn_block *scratch_block(kn_module *m, kn_func *f) {
  kn_block *tmp = kn_arena_alloc(m->arena, sizeof *tmp);
  tmp->parent_func = f;
  tmp->args = kn_arena_alloc(m->arena, sizeof(kn_value *));
  return tmp;
}

/* puts tmp's ops in place of op in blk; returns the first of them (or op->next when none) */
static kn_op *splice(kn_block *blk, kn_op *op, kn_block *tmp) {
  kn_op *first = tmp->first, *last = tmp->last, *after = op->next;
  for (kn_op *o = first; o; o = o->next) o->parent = blk;
  if (first) {
    first->prev = op->prev;
    last->next = after;
  }
  kn_op *before_first = first ? first : after;
  kn_op *after_last = first ? last : op->prev;
  if (op->prev) op->prev->next = before_first;
  else blk->first = before_first;
  if (after) after->prev = after_last;
  else blk->last = after_last;
  return first ? first : after;
}

/* inlines the call `op` of block blk in function f; returns the first spliced op (or op->next) */
static kn_op *inline_call(kn_module *m, kn_func *f, kn_block *blk, kn_op *op, kn_func *callee) {
  int nv = kn_func_number(callee);
  kn_value **map = kn_arena_alloc(m->arena, sizeof *map * (size_t)(nv ? nv : 1));
  for (int i = 0; i < kn_func_nparams(callee); i++) map[callee->body->args[i]->id] = op->opnd[i];
  kn_op *ret = callee->body->last;
  KN_ASSERT(ret && ret->opc == KN_OP_RETURN && ret->nopnd == op->nres);

  kn_block *tmp = scratch_block(m, f);
  kn_builder b = kn_builder_at_end(m, tmp);
  kn_clone_ops(&b, callee->body->first, ret, map);

  for (int i = 0; i < op->nres; i++) {
    kn_value *v = map[ret->opnd[i]->id];
    KN_ASSERT(v);
    replace_uses(f->body, op->res[i], v);
  }
  return splice(blk, op, tmp);
}

/* ---- elemental calls: the callee lifted to the call's shape ---- */

/* a callee value as lifted: uniform (u, a scalar or a pointer, t NULL) or varying (t, a tile of
 * the shape; for a pointer, u is its uniform base and t the i64 element offsets from it) */
typedef struct lv {
  kn_value *u, *t;
} lv;

typedef struct lifter {
  kn_module *m;
  kn_builder b;          /* appends to the scratch block; loc: the callee op being lifted */
  int rank;
  int32_t shape[KN_MAX_RANK];
  int *budget;
  kn_diag *d;
  kn_value **splat;      /* pairs (scalar, its splat to the shape) made so far */
  int nsplat, capsplat;
} lifter;

static kn_type tile_of_type(const lifter *L, kn_scalar e) {
  return kn_ty_tile(e, L->rank, L->shape);
}

/* x as a tile of the shape: a uniform x is splat once, where a tile first needs it (the ops are
 * straight-line, so that splat dominates every later use) */
static kn_value *as_tile(lifter *L, lv x) {
  if (x.t) return x.t;
  for (int i = 0; i < L->nsplat; i++)
    if (L->splat[2 * i] == x.u) return L->splat[2 * i + 1];
  if (L->nsplat == L->capsplat) {
    int cap = L->capsplat ? 2 * L->capsplat : 16;
    kn_value **n = kn_arena_alloc(L->m->arena, sizeof *n * 2 * (size_t)cap);
    if (L->nsplat) memcpy(n, L->splat, sizeof *n * 2 * (size_t)L->nsplat);
    L->splat = n, L->capsplat = cap;
  }
  kn_value *s = kn_b_splat(&L->b, x.u, L->rank, L->shape);
  L->splat[2 * L->nsplat] = x.u;
  L->splat[2 * L->nsplat++ + 1] = s;
  return s;
}

static lv uniform(kn_value *u) { return (lv){u, NULL}; }
static lv varying(kn_value *t) { return (lv){NULL, t}; }
static kn_scalar lv_elem(lv x) { return (kn_scalar)(x.t ? x.t : x.u)->type.elem; }

static lv lcast(lifter *L, lv x, kn_scalar to) {
  if (lv_elem(x) == to) return x;
  return x.t ? varying(kn_b_cast(&L->b, x.t, to)) : uniform(kn_b_cast(&L->b, x.u, to));
}

/* is x the uniform integer constant k (0 or 1: also through an integer cast)? */
static bool is_const(lv x, int64_t k) {
  const kn_op *d = x.t ? NULL : x.u->def;
  if (d && d->opc == KN_OP_CAST && kn_scalar_is_int((kn_scalar)d->opnd[0]->type.elem))
    d = d->opnd[0]->def;
  return d && d->opc == KN_OP_CONST && kn_scalar_is_int((kn_scalar)d->res[0]->type.elem) &&
         d->iattr[0] == k;
}

static lv lbinary(lifter *L, kn_opcode opc, lv a, lv c) {
  /* the common address arithmetic of a load: a stride of 1, an offset of 0 */
  if ((opc == KN_OP_MUL && is_const(c, 1)) || (opc == KN_OP_ADD && is_const(c, 0))) return a;
  if (!a.t && !c.t) return uniform(kn_b_binary(&L->b, opc, a.u, c.u));
  return varying(kn_b_binary(&L->b, opc, as_tile(L, a), as_tile(L, c)));
}

static lv lcmp(lifter *L, kn_pred p, lv a, lv c) {
  if (!a.t && !c.t) return uniform(kn_b_cmp(&L->b, p, a.u, c.u));
  return varying(kn_b_cmp(&L->b, p, as_tile(L, a), as_tile(L, c)));
}

/* a copy of op (attributes and result name included) on operands o, with one result of type t */
static kn_value *build_like(lifter *L, const kn_op *op, kn_value *const *o, kn_type t) {
  kn_op *n = kn_build_op(&L->b, op->opc, op->nopnd, o, 1, &t);
  memcpy(n->iattr, op->iattr, sizeof n->iattr);
  n->fattr = op->fattr;
  kn_value_set_name(L->m, n->res[0], op->res[0]->name);
  return n->res[0];
}

/* load %p[%o] strides [%s] (bounds [%n])? : T, one element: a scalar load when nothing of it
 * varies, else a gather of p's base at p's offsets + o * s, live where 0 <= o < n */
static int lift_load(lifter *L, const kn_op *op, lv *v) {
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  if (mo.rank != 1 || mo.mask || mo.other || op->res[0]->type.kind != KN_TY_SCALAR)
    return kn_error(L->d, L->m, op->loc, "internal: this 'load' cannot run per element");
  lv p = v[mo.base->id], o = v[mo.off[0]->id], s = v[mo.stride[0]->id];
  lv n = mo.bound[0] ? v[mo.bound[0]->id] : uniform(NULL);
  if (!p.t && !o.t && !s.t && !n.t) {
    kn_value *u[4];
    for (int i = 0; i < op->nopnd; i++) u[i] = v[op->opnd[i]->id].u;
    v[op->res[0]->id] = uniform(build_like(L, op, u, op->res[0]->type));
    return 0;
  }
  /* the element offset o * s in i64 (as the load computes it), or o itself for a stride of 1 */
  lv offs = o;
  if (!is_const(s, 1)) {
    lv o64 = lcast(L, o, KN_I64);
    offs = lbinary(L, KN_OP_MUL, o64, lcast(L, s, KN_I64));
  }
  if (p.t) offs = lbinary(L, KN_OP_ADD, varying(p.t), lcast(L, offs, KN_I64));
  kn_value *mask = NULL;
  if (mo.bound[0]) {  /* 0 <= o < n, in i32 when both are (the same truth as in i64) */
    kn_scalar ct = lv_elem(o) == KN_I32 && lv_elem(n) == KN_I32 ? KN_I32 : KN_I64;
    lv oc = lcast(L, o, ct), zero = uniform(kn_b_const_i(&L->b, kn_ty_scalar(ct), 0));
    lv ge = lcmp(L, KN_PRED_GE, oc, zero);  /* (one statement each: in this order) */
    lv lt = lcmp(L, KN_PRED_LT, oc, lcast(L, n, ct));
    mask = as_tile(L, lbinary(L, KN_OP_AND, ge, lt));
  }
  kn_type rt = tile_of_type(L, (kn_scalar)op->res[0]->type.elem);
  kn_value *r = kn_b_gather(&L->b, rt, p.u, as_tile(L, offs), mask, NULL);
  kn_value_set_name(L->m, r, op->res[0]->name);
  v[op->res[0]->id] = varying(r);
  return 0;
}

static int lift_body(lifter *L, kn_func *f, const lv *args, lv *res);

/* a call inside the callee: its callee lifted in place */
static int lift_call(lifter *L, const kn_op *op, lv *v) {
  kn_func *g = op->callee ? op->callee : kn_module_find(L->m, op->callee_name);
  if (!g)
    return kn_error(L->d, L->m, op->loc, "call of unknown function '@%s'",
                    op->callee_name ? op->callee_name : "?");
  if (--*L->budget < 0)
    return kn_error(L->d, L->m, op->loc, "too many inlined calls (is '@%s' recursive?): calls "
                    "must form no cycle", g->name);
  lv *args = kn_arena_alloc(L->m->arena, sizeof *args * (size_t)(op->nopnd + 1));
  lv *res = kn_arena_alloc(L->m->arena, sizeof *res * (size_t)(op->nres + 1));
  for (int i = 0; i < op->nopnd; i++) args[i] = v[op->opnd[i]->id];
  if (lift_body(L, g, args, res)) return -1;
  for (int k = 0; k < op->nres; k++) v[op->res[k]->id] = res[k];
  return 0;
}

static int lift_op(lifter *L, const kn_op *op, lv *v) {
  lv x[3] = {{0}};
  bool var = false;
  switch (op->opc) {
  KN_CASES_BINARY
  KN_CASES_UNARY
  case KN_OP_CONST: case KN_OP_CMP: case KN_OP_SELECT: case KN_OP_CAST: case KN_OP_PTRADD:
  case KN_OP_MULTIPLE_OF: case KN_OP_MAX_CONTIGUOUS: {
    KN_ASSERT(op->nopnd <= 3 && op->nres == 1);
    for (int i = 0; i < op->nopnd; i++) {
      x[i] = v[op->opnd[i]->id];
      var |= x[i].t != NULL;
    }
    kn_value *r = op->res[0];
    if (!var) {
      kn_value *u[3] = {x[0].u, x[1].u, x[2].u};
      v[r->id] = uniform(build_like(L, op, u, r->type));
    } else if (op->opc == KN_OP_PTRADD) {
      /* the same base; the element offsets grow by the (varying) offset */
      lv off = lcast(L, x[1], KN_I64);
      lv offs = x[0].t ? lbinary(L, KN_OP_ADD, varying(x[0].t), off) : off;
      v[r->id] = (lv){x[0].u, as_tile(L, offs)};
    } else {
      kn_value *o[3];
      for (int i = 0; i < op->nopnd; i++)  /* a uniform select condition stays a scalar */
        o[i] = op->opc == KN_OP_SELECT && i == 0 && !x[0].t ? x[0].u : as_tile(L, x[i]);
      v[r->id] = varying(build_like(L, op, o, tile_of_type(L, (kn_scalar)r->type.elem)));
    }
    return 0;
  }
  case KN_OP_LOAD: return lift_load(L, op, v);
  case KN_OP_CALL: return lift_call(L, op, v);
  case KN_OP_PROGRAM_ID: case KN_OP_NUM_PROGRAMS: case KN_OP_ARANGE: case KN_OP_SPLAT:
  case KN_OP_BROADCAST: case KN_OP_EXPAND_DIMS: case KN_OP_RESHAPE: case KN_OP_TRANSPOSE:
  case KN_OP_STORE: case KN_OP_GATHER: case KN_OP_DOT: case KN_OP_REDUCE_MAX:
  case KN_OP_REDUCE_SUM: case KN_OP_FOR: case KN_OP_IF: case KN_OP_YIELD: case KN_OP_RETURN:
    break;
  }
  return kn_error(L->d, L->m, op->loc, "internal: '%s' cannot run per element in an elemental "
                  "call (the verifier refuses it)", kn_opinfo_table[op->opc].name);
}

/* lifts f's body with its params bound to args; res[k] receives what it returns */
static int lift_body(lifter *L, kn_func *f, const lv *args, lv *res) {
  int nv = kn_func_number(f);
  lv *v = kn_arena_alloc(L->m->arena, sizeof *v * (size_t)(nv ? nv : 1));
  for (int i = 0; i < kn_func_nparams(f); i++) v[kn_func_param(f, i)->id] = args[i];
  for (const kn_op *op = f->body->first; op; op = op->next) {
    L->b.loc = op->loc;
    if (op->opc == KN_OP_RETURN) {
      for (int k = 0; k < op->nopnd; k++) res[k] = v[op->opnd[k]->id];
      return 0;
    }
    if (lift_op(L, op, v)) return -1;
  }
  return kn_error(L->d, L->m, f->loc, "cannot inline '@%s': its body does not end in return",
                  f->name);
}

/* inlines the elemental call `op` (first: its first tile argument for a scalar param) of block
 * blk in f; *next receives the first spliced op (or op->next) */
static int inline_elemental(kn_module *m, kn_func *f, kn_block *blk, kn_op *op, kn_func *callee,
                            const kn_value *first, int *budget, kn_diag *d, kn_op **next) {
  kn_block *tmp = scratch_block(m, f);
  lifter L = {.m = m, .b = kn_builder_at_end(m, tmp), .rank = first->type.rank, .budget = budget,
              .d = d};
  memcpy(L.shape, first->type.shape, sizeof L.shape);
  lv *args = kn_arena_alloc(m->arena, sizeof *args * (size_t)(op->nopnd + 1));
  lv *res = kn_arena_alloc(m->arena, sizeof *res * (size_t)(op->nres + 1));
  for (int i = 0; i < op->nopnd; i++)
    args[i] = op->opnd[i]->type.kind == KN_TY_TILE ? varying(op->opnd[i]) : uniform(op->opnd[i]);
  if (lift_body(&L, callee, args, res)) return -1;
  L.b.loc = op->loc;
  for (int k = 0; k < op->nres; k++) replace_uses(f->body, op->res[k], as_tile(&L, res[k]));
  *next = splice(blk, op, tmp);
  return 0;
}

static int inline_block(kn_module *m, kn_func *f, kn_block *blk, int *budget, kn_diag *d) {
  for (kn_op *op = blk->first; op;) {
    if (op->opc == KN_OP_CALL) {
      kn_func *callee = op->callee;
      if (!callee && op->callee_name) callee = kn_module_find(m, op->callee_name);
      if (!callee)
        return kn_error(d, m, op->loc, "call of unknown function '@%s'",
                        op->callee_name ? op->callee_name : "?");
      if (!callee->body->last || callee->body->last->opc != KN_OP_RETURN)
        return kn_error(d, m, op->loc, "cannot inline '@%s': its body does not end in return",
                        callee->name);
      if (--*budget < 0)
        return kn_error(d, m, op->loc,
                        "too many inlined calls (is '@%s' recursive?): calls must form no cycle",
                        callee->name);
      const kn_value *first = kn_call_elemental_arg(op, callee);
      if (!first) op = inline_call(m, f, blk, op, callee);
      else if (inline_elemental(m, f, blk, op, callee, first, budget, d, &op)) return -1;
      continue;
    }
    for (int r = 0; r < op->nregion; r++)
      if (inline_block(m, f, op->region[r], budget, d)) return -1;
    op = op->next;
  }
  return 0;
}

int kn_inline(kn_module *m, kn_diag *d) {
  for (int i = 0; i < m->nfuncs; i++) {
    kn_func *f = m->funcs[i];
    if (!f->is_kernel) continue;
    int budget = INLINE_BUDGET;
    if (inline_block(m, f, f->body, &budget, d)) return -1;
  }
  return 0;
}
