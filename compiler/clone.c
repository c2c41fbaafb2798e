/* clone.c — deep copies of ops, blocks and modules.
 *
 * Ops are copied through kn_build_op() so that copies are exactly what the builder and the parser
 * make; region blocks and their arguments are made here (the builder's block constructor is
 * private to ir/builder.c) with the same field conventions.  Values are mapped by their dense
 * per-function id (kn_func_number()), so the caller numbers the source function first.
 */
#include <string.h>

#include "passes.h"

static kn_block *new_block(kn_module *m, kn_func *f, const kn_block *like) {
  kn_block *b = kn_arena_alloc(m->arena, sizeof *b);
  b->parent_func = f;
  b->nargs = like->nargs;
  b->args = kn_arena_alloc(m->arena, sizeof(kn_value *) * (size_t)(like->nargs ? like->nargs : 1));
  for (int i = 0; i < like->nargs; i++) {
    kn_value *v = kn_arena_alloc(m->arena, sizeof *v);
    v->type = like->args[i]->type;
    v->owner = b;
    v->index = i;
    v->id = -1;
    if (like->args[i]->name) v->name = kn_arena_strdup(m->arena, like->args[i]->name);
    b->args[i] = v;
  }
  return b;
}

static void map_value(kn_value **map, const kn_value *from, kn_value *to) {
  KN_ASSERT(from->id >= 0);
  map[from->id] = to;
}

static kn_value *mapped(kn_value **map, const kn_value *v) {
  KN_ASSERT(v->id >= 0 && map[v->id]);
  return map[v->id];
}

static void clone_op(kn_builder *b, const kn_op *op, kn_value **map) {
  kn_module *m = b->m;
  kn_value *opnd[64], **o = opnd;
  kn_type rt[64], *r = rt;
  if (op->nopnd > 64) o = kn_arena_alloc(m->arena, sizeof *o * (size_t)op->nopnd);
  if (op->nres > 64) r = kn_arena_alloc(m->arena, sizeof *r * (size_t)op->nres);
  for (int i = 0; i < op->nopnd; i++) o[i] = mapped(map, op->opnd[i]);
  for (int i = 0; i < op->nres; i++) r[i] = op->res[i]->type;
  kn_loc saved = b->loc;
  b->loc = op->loc;
  kn_op *n = kn_build_op(b, op->opc, op->nopnd, o, op->nres, r);
  b->loc = saved;
  memcpy(n->iattr, op->iattr, sizeof n->iattr);
  n->fattr = op->fattr;
  n->callee = op->callee;
  n->callee_name = op->callee_name ? kn_arena_strdup(m->arena, op->callee_name) : NULL;
  if (op->opnd_loc) {
    n->opnd_loc = kn_arena_alloc(m->arena, sizeof(kn_loc) * (size_t)(op->nopnd ? op->nopnd : 1));
    memcpy(n->opnd_loc, op->opnd_loc, sizeof(kn_loc) * (size_t)op->nopnd);
  }
  for (int i = 0; i < op->nres; i++) {
    if (op->res[i]->name) n->res[i]->name = kn_arena_strdup(m->arena, op->res[i]->name);
    map_value(map, op->res[i], n->res[i]);
  }
  n->nregion = op->nregion;
  for (int ri = 0; ri < op->nregion; ri++) {
    const kn_block *src = op->region[ri];
    kn_block *dst = new_block(m, b->block->parent_func, src);
    dst->parent_op = n;
    n->region[ri] = dst;
    for (int i = 0; i < src->nargs; i++) map_value(map, src->args[i], dst->args[i]);
    kn_builder inner = kn_builder_at_end(m, dst);
    kn_clone_ops(&inner, src->first, NULL, map);
  }
}

void kn_clone_ops(kn_builder *b, const kn_op *first, const kn_op *stop, kn_value **map) {
  for (const kn_op *op = first; op && op != stop; op = op->next) clone_op(b, op, map);
}

static void resolve_calls(kn_module *m, kn_block *blk) {
  for (kn_op *op = blk->first; op; op = op->next) {
    if (op->opc == KN_OP_CALL)
      op->callee = op->callee_name ? kn_module_find(m, op->callee_name) : NULL;
    for (int r = 0; r < op->nregion; r++) resolve_calls(m, op->region[r]);
  }
}

kn_module *kn_module_clone(const kn_module *src) {
  kn_module *m = kn_module_new(src->filename);
  if (src->source) m->source = kn_arena_strdup(m->arena, src->source);
  /* shells first, so that calls can be pointed at the copies */
  for (int i = 0; i < src->nfuncs; i++) {
    const kn_func *f = src->funcs[i];
    int np = kn_func_nparams(f);
    kn_type *pt = kn_arena_alloc(m->arena, sizeof *pt * (size_t)(np ? np : 1));
    const char **pn = kn_arena_alloc(m->arena, sizeof *pn * (size_t)(np ? np : 1));
    for (int j = 0; j < np; j++) {
      pt[j] = f->body->args[j]->type;
      pn[j] = f->body->args[j]->name;
    }
    kn_func *g = kn_func_new(m, f->name, f->is_kernel, np, pt, pn, f->nret, f->ret);
    g->loc = f->loc;
    for (int j = 0; j < f->nmeta; j++) kn_func_set_meta(g, f->meta[j].key, f->meta[j].value);
  }
  for (int i = 0; i < src->nfuncs; i++) {
    kn_func *f = src->funcs[i], *g = m->funcs[i];
    int nv = kn_func_number(f);
    kn_value **map = kn_arena_alloc(m->arena, sizeof *map * (size_t)(nv ? nv : 1));
    for (int j = 0; j < kn_func_nparams(f); j++) map[f->body->args[j]->id] = g->body->args[j];
    kn_builder b = kn_builder_at_end(m, g->body);
    kn_clone_ops(&b, f->body->first, NULL, map);
  }
  /* point calls at the copies (by name; an unknown callee stays unresolved for the verifier) */
  for (int i = 0; i < m->nfuncs; i++) resolve_calls(m, m->funcs[i]->body);
  return m;
}
