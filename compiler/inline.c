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
 * Assumes a verified module: a function body ends with its only `return`.
 */
#include "passes.h"

enum { INLINE_BUDGET = 4096 };

static void replace_uses(kn_block *blk, const kn_value *from, kn_value *to) {
  for (kn_op *op = blk->first; op; op = op->next) {
    for (int i = 0; i < op->nopnd; i++)
      if (op->opnd[i] == from) op->opnd[i] = to;
    for (int r = 0; r < op->nregion; r++) replace_uses(op->region[r], from, to);
  }
}

/* inlines the call `op` of block blk in function f; returns the first spliced op (or op->next) */
static kn_op *inline_call(kn_module *m, kn_func *f, kn_block *blk, kn_op *op, kn_func *callee) {
  int nv = kn_func_number(callee);
  kn_value **map = kn_arena_alloc(m->arena, sizeof *map * (size_t)(nv ? nv : 1));
  for (int i = 0; i < kn_func_nparams(callee); i++) map[callee->body->args[i]->id] = op->opnd[i];
  kn_op *ret = callee->body->last;
  KN_ASSERT(ret && ret->opc == KN_OP_RETURN && ret->nopnd == op->nres);

  kn_block *tmp = kn_arena_alloc(m->arena, sizeof *tmp);
  tmp->parent_func = f;
  tmp->args = kn_arena_alloc(m->arena, sizeof(kn_value *));
  kn_builder b = kn_builder_at_end(m, tmp);
  kn_clone_ops(&b, callee->body->first, ret, map);

  for (int i = 0; i < op->nres; i++) {
    kn_value *v = map[ret->opnd[i]->id];
    KN_ASSERT(v);
    replace_uses(f->body, op->res[i], v);
  }

  /* splice tmp's ops in place of op */
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
      op = inline_call(m, f, blk, op, callee);
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
