/* scale.c — fold chains of uniform f32 scalings into one multiply per element.
 *
 * The attention template hands score modifiers the score in natural units, qk * sm_scale, and
 * converts their result to the exp2 domain with a further multiply by log2(e).  A modifier that
 * is linear in a uniform factor then costs a multiply per element that the math does not need:
 * ALiBi's (qk * sm_scale - slope * dist) * log2e is three multiplies and a subtraction per score,
 * where qk * (sm_scale * log2e) - dist * (slope * log2e) is two (and one of them fuses with the
 * subtraction into an FMA).  This pass rewrites, on f32 tiles, where u and w are splats of
 * scalars (a program-wide value: a kernel parameter, a constant, a slope loaded once):
 *
 *   (x * u) * w        ->  x * (u * w)                       (u * w: one scalar multiply)
 *   (a +- b) * w       ->  a * w +- b * w                    when a or b is itself x * u
 *
 * each only when the inner value has no other use, so no work is duplicated; the second rule is
 * applied only where the first then folds at least one of the new multiplies, so it never adds a
 * multiply per element.  Reassociation changes the rounding of the score by an ulp or two (the
 * order of two f32 multiplies), well inside the kernels' tolerance against the float64
 * reference, which evaluates the modifiers unfolded.
 *
 * IR arithmetic is exact per op (the host matches the interpreter bit for bit), so the pass
 * rewrites only kernels that allow it: those with the attribute `REASSOC = 1`, which the
 * attention template sets (a .tile file dumped from it keeps the attribute, and a user's own
 * kernel opts in the same way).
 */
#include "passes.h"

/* the scalar a uniform tile v splats, or NULL */
static kn_value *uniform(const kn_value *v) {
  if (!v->def || v->def->opc != KN_OP_SPLAT) return NULL;
  kn_value *s = v->def->opnd[0];
  return s->type.kind == KN_TY_SCALAR && s->type.elem == KN_F32 ? s : NULL;
}

static bool f32_tile(const kn_value *v) {
  return v->type.kind == KN_TY_TILE && v->type.elem == KN_F32;
}

/* v = x * u with u uniform (either operand order) */
static bool scaled(const kn_value *v, kn_value **x, kn_value **u) {
  if (!v->def || v->def->opc != KN_OP_MUL || !f32_tile(v)) return false;
  for (int i = 0; i < 2; i++) {
    kn_value *s = uniform(v->def->opnd[i]);
    if (s && !uniform(v->def->opnd[1 - i])) {
      *x = v->def->opnd[1 - i];
      *u = s;
      return true;
    }
  }
  return false;
}

static void count_uses(const kn_block *blk, int *uses) {
  for (const kn_op *op = blk->first; op; op = op->next) {
    for (int i = 0; i < op->nopnd; i++) uses[op->opnd[i]->id]++;
    for (int r = 0; r < op->nregion; r++) count_uses(op->region[r], uses);
  }
}

/* Ops appended at the end of `before`'s block by the caller since `mark` (the block's last op
 * then) move to just before `before`. */
static void move_before(kn_op *mark, kn_op *before) {
  kn_block *blk = before->parent;
  kn_op *first = mark ? mark->next : blk->first;
  if (!first || first == before) return;
  kn_op *last = blk->last;
  /* unlink [first, last] from the end */
  if (first->prev) first->prev->next = NULL;
  else blk->first = NULL;
  blk->last = first->prev;
  /* link before `before` */
  first->prev = before->prev;
  if (before->prev) before->prev->next = first;
  else blk->first = first;
  last->next = before;
  before->prev = last;
}

/* splat(a * b) for scalars a, b, built before op; shape of op's result */
static kn_value *product(kn_module *m, kn_op *op, kn_value *a, kn_value *b) {
  kn_builder bl = kn_builder_at_end(m, op->parent);
  bl.loc = op->loc;
  kn_op *mark = op->parent->last;
  kn_value *s = kn_b_binary(&bl, KN_OP_MUL, a, b);
  kn_value *t = kn_b_splat(&bl, s, op->res[0]->type.rank, op->res[0]->type.shape);
  move_before(mark, op);
  return t;
}

/* one rewrite in blk (nested blocks included); true when something changed */
static bool rewrite(kn_module *m, kn_block *blk, const int *uses) {
  for (kn_op *op = blk->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++)
      if (rewrite(m, op->region[r], uses)) return true;
    kn_value *y, *w, *x, *u;
    if (op->nres != 1 || !scaled(op->res[0], &y, &w) || uses[y->id] != 1 || !y->def) continue;
    if (scaled(y, &x, &u)) {  /* (x * u) * w -> x * (u * w) */
      op->opnd[0] = x;
      op->opnd[1] = product(m, op, u, w);
      return true;
    }
    kn_op *d = y->def;
    if ((d->opc != KN_OP_ADD && d->opc != KN_OP_SUB) || !f32_tile(y)) continue;
    bool fold = false;
    for (int i = 0; i < 2; i++)
      fold |= uses[d->opnd[i]->id] == 1 && scaled(d->opnd[i], &x, &u);
    if (!fold) continue;
    /* (a +- b) * w -> a * w +- b * w: the new multiplies fold on the next rounds */
    kn_builder bl = kn_builder_at_end(m, op->parent);
    bl.loc = op->loc;
    kn_op *mark = op->parent->last;
    kn_value *ws = op->opnd[uniform(op->opnd[0]) ? 0 : 1];
    kn_value *t0 = kn_b_binary(&bl, KN_OP_MUL, d->opnd[0], ws);
    kn_value *t1 = kn_b_binary(&bl, KN_OP_MUL, d->opnd[1], ws);
    move_before(mark, op);
    op->opc = d->opc;
    op->opnd[0] = t0;
    op->opnd[1] = t1;
    return true;
  }
  return false;
}

int kn_fold_scale(kn_module *m) {
  int changed = 0;
  for (int i = 0; i < m->nfuncs; i++) {
    kn_func *f = m->funcs[i];
    int64_t allowed = 0;
    if (!kn_func_get_meta(f, "REASSOC", &allowed) || !allowed) continue;
    for (;;) {
      int nv = kn_func_number(f);
      int *uses = kn_arena_alloc(m->arena, sizeof *uses * (size_t)(nv ? nv : 1));
      count_uses(f->body, uses);
      if (!rewrite(m, f->body, uses)) break;
      changed++;
      kn_fold(m);  /* the replaced inner ops die, so the next round counts uses afresh */
    }
  }
  return changed;
}
