/* builder.c — creating modules, functions, blocks and ops.
 *
 * The builder appends at the end of a block and infers result types where the op fixes them; it
 * checks nothing else (the verifier does).  The parser builds through kn_build_op() too, so built
 * and parsed IR are the same structures.
 */
#include <string.h>

#include "ir.h"

kn_module *kn_module_new(const char *filename) {
  kn_arena *a = kn_arena_new();
  kn_module *m = kn_arena_alloc(a, sizeof *m);
  m->arena = a;
  m->func_names.arena = a;
  m->filename = kn_arena_strdup(a, filename ? filename : "<built>");
  return m;
}

void kn_module_free(kn_module *m) {
  if (m) kn_arena_free(m->arena);
}

kn_func *kn_module_find(const kn_module *m, const char *name) {
  int i = kn_strmap_get(&m->func_names, name, strlen(name));
  /* a function renamed by kn_func_rename leaves its old name in the map (which cannot forget
   * a key): that name finds nothing now */
  return i >= 0 && !strcmp(m->funcs[i]->name, name) ? m->funcs[i] : NULL;
}

int kn_func_rename(kn_func *f, const char *name) {
  kn_func *other = kn_module_find(f->module, name);
  if (other && other != f) return -1;
  f->name = kn_arena_strdup(f->module->arena, name);
  kn_strmap_put(&f->module->func_names, f->name, strlen(f->name), f->index);
  return 0;
}

static kn_value *new_value(kn_module *m, kn_type t) {
  kn_value *v = kn_arena_alloc(m->arena, sizeof *v);
  v->type = t;
  v->id = -1;
  return v;
}

static kn_block *new_block(kn_module *m, kn_func *f, int nargs, const kn_type *types) {
  kn_block *b = kn_arena_alloc(m->arena, sizeof *b);
  b->parent_func = f;
  b->nargs = nargs;
  b->args = kn_arena_alloc(m->arena, sizeof(kn_value *) * (size_t)(nargs ? nargs : 1));
  for (int i = 0; i < nargs; i++) {
    kn_value *v = new_value(m, types[i]);
    v->owner = b;
    v->index = i;
    b->args[i] = v;
  }
  return b;
}

kn_func *kn_func_new(kn_module *m, const char *name, bool is_kernel, int nparams,
                     const kn_type *ptypes, const char *const *pnames, int nret,
                     const kn_type *ret) {
  kn_func *f = kn_arena_alloc(m->arena, sizeof *f);
  f->name = kn_arena_strdup(m->arena, name);
  f->is_kernel = is_kernel;
  f->module = m;
  f->body = new_block(m, f, nparams, ptypes);
  for (int i = 0; pnames && i < nparams; i++)
    if (pnames[i]) kn_value_set_name(m, f->body->args[i], pnames[i]);
  f->nret = nret;
  f->ret = kn_arena_alloc(m->arena, sizeof(kn_type) * (size_t)(nret ? nret : 1));
  for (int i = 0; i < nret; i++) f->ret[i] = ret[i];
  if (m->nfuncs == m->capfuncs) {
    int cap = m->capfuncs ? m->capfuncs * 2 : 8;
    kn_func **nf = kn_arena_alloc(m->arena, sizeof *nf * (size_t)cap);
    if (m->nfuncs) memcpy(nf, m->funcs, sizeof *nf * (size_t)m->nfuncs);
    m->funcs = nf;
    m->capfuncs = cap;
  }
  f->index = m->nfuncs;
  m->funcs[m->nfuncs++] = f;
  /* (a second function of one name stays out of the map: the verifier reports it) */
  kn_strmap_put(&m->func_names, f->name, strlen(f->name), f->index);
  return f;
}

void kn_func_add_meta(kn_func *f, const char *key, int64_t value) {
  if (f->nmeta == f->capmeta) {
    int cap = f->capmeta ? f->capmeta * 2 : 8;
    kn_meta *nm = kn_arena_alloc(f->module->arena, sizeof *nm * (size_t)cap);
    if (f->nmeta) memcpy(nm, f->meta, sizeof *nm * (size_t)f->nmeta);
    f->meta = nm;
    f->capmeta = cap;
  }
  f->meta[f->nmeta].key = kn_arena_strdup(f->module->arena, key);
  f->meta[f->nmeta++].value = value;
}

void kn_func_set_meta(kn_func *f, const char *key, int64_t value) {
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta[i].key, key) == 0) {
      f->meta[i].value = value;
      return;
    }
  kn_func_add_meta(f, key, value);
}

bool kn_func_get_meta(const kn_func *f, const char *key, int64_t *value) {
  for (int i = 0; i < f->nmeta; i++)
    if (strcmp(f->meta[i].key, key) == 0) {
      if (value) *value = f->meta[i].value;
      return true;
    }
  return false;
}

static int number_block(kn_block *b, int next) {
  for (int i = 0; i < b->nargs; i++) b->args[i]->id = next++;
  for (kn_op *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nregion; r++) next = number_block(op->region[r], next);
    for (int i = 0; i < op->nres; i++) op->res[i]->id = next++;
  }
  return next;
}

int kn_func_number(kn_func *f) { return f->nvalues = number_block(f->body, 0); }

void kn_mem_operands_get(const kn_op *op, kn_mem_operands *out) {
  KN_ASSERT(op->opc == KN_OP_LOAD || op->opc == KN_OP_STORE);
  memset(out, 0, sizeof *out);
  int r = (int)op->iattr[0], k = 0;
  unsigned cl = (unsigned)op->iattr[1];
  KN_ASSERT(r >= 1 && r <= KN_MAX_RANK);
  out->rank = r;
  out->base = op->opnd[k++];
  for (int i = 0; i < r; i++) out->off[i] = op->opnd[k++];
  for (int i = 0; i < r; i++) out->stride[i] = op->opnd[k++];
  if (cl & KN_MEM_BOUNDS)
    for (int i = 0; i < r; i++) out->bound[i] = op->opnd[k++];
  if (op->opc == KN_OP_STORE) out->value = op->opnd[k++];
  if (cl & KN_MEM_MASK) out->mask = op->opnd[k++];
  if (op->opc == KN_OP_LOAD && (cl & KN_MEM_OTHER)) out->other = op->opnd[k++];
  KN_ASSERT(k == op->nopnd);
}

void kn_gather_operands_get(const kn_op *op, kn_gather_operands *out) {
  KN_ASSERT(op->opc == KN_OP_GATHER && op->nopnd >= 2);
  unsigned cl = (unsigned)op->iattr[0];
  int k = 2;
  out->base = op->opnd[0];
  out->offsets = op->opnd[1];
  out->mask = (cl & KN_MEM_MASK) ? op->opnd[k++] : NULL;
  out->other = (cl & KN_MEM_OTHER) ? op->opnd[k++] : NULL;
  KN_ASSERT(k == op->nopnd);
}

const kn_value *kn_call_elemental_arg(const kn_op *call, const kn_func *callee) {
  if (!callee || !callee->body) return NULL;
  for (int i = 0; i < call->nopnd && i < kn_func_nparams(callee); i++)
    if (call->opnd[i] && call->opnd[i]->type.kind == KN_TY_TILE &&
        kn_func_param(callee, i)->type.kind != KN_TY_TILE)
      return call->opnd[i];
  return NULL;
}

/* ---- builder ---- */

kn_builder kn_builder_at_end(kn_module *m, kn_block *block) {
  return (kn_builder){.m = m, .block = block};
}

void kn_value_set_name(kn_module *m, kn_value *v, const char *name) {
  v->name = name ? kn_arena_strdup(m->arena, name) : NULL;
}

kn_op *kn_build_op(kn_builder *b, kn_opcode opc, int nopnd, kn_value *const *opnd, int nres,
                   const kn_type *rtypes) {
  kn_module *m = b->m;
  kn_op *op = kn_arena_alloc(m->arena, sizeof *op);
  op->opc = opc;
  op->loc = b->loc;
  op->nopnd = nopnd;
  op->opnd = kn_arena_alloc(m->arena, sizeof(kn_value *) * (size_t)(nopnd ? nopnd : 1));
  for (int i = 0; i < nopnd; i++) op->opnd[i] = opnd[i];
  op->nres = nres;
  op->res = kn_arena_alloc(m->arena, sizeof(kn_value *) * (size_t)(nres ? nres : 1));
  for (int i = 0; i < nres; i++) {
    kn_value *v = new_value(m, rtypes[i]);
    v->def = op;
    v->index = i;
    op->res[i] = v;
  }
  op->parent = b->block;
  op->prev = b->block->last;
  if (b->block->last) b->block->last->next = op;
  else b->block->first = op;
  b->block->last = op;
  return op;
}

static kn_value *op1(kn_builder *b, kn_opcode opc, int n, kn_value *const *opnd, kn_type t) {
  return kn_build_op(b, opc, n, opnd, 1, &t)->res[0];
}

static kn_value *attr_op(kn_builder *b, kn_opcode opc, kn_type t, int64_t a0, int64_t a1) {
  kn_op *op = kn_build_op(b, opc, 0, NULL, 1, &t);
  op->iattr[0] = a0;
  op->iattr[1] = a1;
  return op->res[0];
}

kn_value *kn_b_program_id(kn_builder *b, int axis) {
  return attr_op(b, KN_OP_PROGRAM_ID, kn_ty_scalar(KN_I32), axis, 0);
}
kn_value *kn_b_num_programs(kn_builder *b, int axis) {
  return attr_op(b, KN_OP_NUM_PROGRAMS, kn_ty_scalar(KN_I32), axis, 0);
}
kn_value *kn_b_const_i(kn_builder *b, kn_type t, int64_t v) {
  return attr_op(b, KN_OP_CONST, t, v, 0);
}
kn_value *kn_b_const_f(kn_builder *b, kn_type t, double v) {
  kn_op *op = kn_build_op(b, KN_OP_CONST, 0, NULL, 1, &t);
  op->fattr = v;
  return op->res[0];
}
kn_value *kn_b_arange(kn_builder *b, int start, int end) {
  return attr_op(b, KN_OP_ARANGE, kn_ty_tile1(KN_I32, end - start), start, end);
}
kn_value *kn_b_splat(kn_builder *b, kn_value *x, int rank, const int32_t *shape) {
  return op1(b, KN_OP_SPLAT, 1, &x, kn_ty_tile((kn_scalar)x->type.elem, rank, shape));
}
kn_value *kn_b_broadcast(kn_builder *b, kn_value *x, int rank, const int32_t *shape) {
  return op1(b, KN_OP_BROADCAST, 1, &x, kn_ty_tile((kn_scalar)x->type.elem, rank, shape));
}
kn_value *kn_b_expand_dims(kn_builder *b, kn_value *x, int axis) {
  kn_type t = x->type;
  int32_t shape[KN_MAX_RANK] = {1, 1};
  int r = t.rank + 1;
  KN_ASSERT(t.kind == KN_TY_TILE && r <= KN_MAX_RANK && axis >= 0 && axis < r);
  for (int i = 0, j = 0; i < r; i++) shape[i] = i == axis ? 1 : t.shape[j++];
  kn_op *op = kn_build_op(b, KN_OP_EXPAND_DIMS, 1, &x, 1,
                          (kn_type[]){kn_ty_tile((kn_scalar)t.elem, r, shape)});
  op->iattr[0] = axis;
  return op->res[0];
}
kn_value *kn_b_reshape(kn_builder *b, kn_value *x, int rank, const int32_t *shape) {
  return op1(b, KN_OP_RESHAPE, 1, &x, kn_ty_tile((kn_scalar)x->type.elem, rank, shape));
}
kn_value *kn_b_transpose(kn_builder *b, kn_value *x) {
  kn_type t = x->type;
  KN_ASSERT(t.kind == KN_TY_TILE && t.rank == 2);
  return op1(b, KN_OP_TRANSPOSE, 1, &x, kn_ty_tile2((kn_scalar)t.elem, t.shape[1], t.shape[0]));
}
kn_value *kn_b_binary(kn_builder *b, kn_opcode opc, kn_value *x, kn_value *y) {
  return op1(b, opc, 2, (kn_value *[]){x, y}, x->type);
}
kn_value *kn_b_unary(kn_builder *b, kn_opcode opc, kn_value *x) {
  return op1(b, opc, 1, &x, x->type);
}
kn_value *kn_b_cmp(kn_builder *b, kn_pred p, kn_value *x, kn_value *y) {
  kn_op *op = kn_build_op(b, KN_OP_CMP, 2, (kn_value *[]){x, y}, 1,
                          (kn_type[]){kn_ty_with_elem(x->type, KN_I1)});
  op->iattr[0] = p;
  return op->res[0];
}
kn_value *kn_b_select(kn_builder *b, kn_value *c, kn_value *x, kn_value *y) {
  return op1(b, KN_OP_SELECT, 3, (kn_value *[]){c, x, y}, x->type);
}
kn_value *kn_b_cast(kn_builder *b, kn_value *x, kn_scalar to) {
  return op1(b, KN_OP_CAST, 1, &x, kn_ty_with_elem(x->type, to));
}
kn_value *kn_b_ptradd(kn_builder *b, kn_value *p, kn_value *off) {
  return op1(b, KN_OP_PTRADD, 2, (kn_value *[]){p, off}, p->type);
}
kn_value *kn_b_dot(kn_builder *b, kn_value *a, kn_value *bm, kn_value *acc) {
  return op1(b, KN_OP_DOT, 3, (kn_value *[]){a, bm, acc}, acc->type);
}
kn_value *kn_b_reduce(kn_builder *b, kn_opcode opc, kn_value *x, int axis) {
  kn_type t = x->type;
  KN_ASSERT(t.kind == KN_TY_TILE && axis >= 0 && axis < t.rank);
  kn_type r;
  if (t.rank == 1) r = kn_ty_scalar((kn_scalar)t.elem);
  else r = kn_ty_tile1((kn_scalar)t.elem, t.shape[axis == 0 ? 1 : 0]);
  kn_op *op = kn_build_op(b, opc, 1, &x, 1, &r);
  op->iattr[0] = axis;
  return op->res[0];
}
kn_value *kn_b_hint(kn_builder *b, kn_opcode opc, kn_value *x, int64_t v) {
  kn_op *op = kn_build_op(b, opc, 1, &x, 1, &x->type);
  op->iattr[0] = v;
  return op->res[0];
}

/* collects the operands of a load/store in the order kn_mem_operands_get() reads them */
static int mem_opnds(kn_value **o, int rank, kn_value *base, kn_value *const *off,
                     kn_value *const *stride, kn_value *const *bound, kn_value *value,
                     kn_value *mask, kn_value *other, unsigned *clauses) {
  int k = 0;
  o[k++] = base;
  for (int i = 0; i < rank; i++) o[k++] = off[i];
  for (int i = 0; i < rank; i++) o[k++] = stride[i];
  *clauses = 0;
  if (bound) {
    *clauses |= KN_MEM_BOUNDS;
    for (int i = 0; i < rank; i++) o[k++] = bound[i];
  }
  if (value) o[k++] = value;
  if (mask) {
    *clauses |= KN_MEM_MASK;
    o[k++] = mask;
  }
  if (other) {
    *clauses |= KN_MEM_OTHER;
    o[k++] = other;
  }
  return k;
}

kn_value *kn_b_load(kn_builder *b, kn_type result, kn_value *base, kn_value *const *off,
                    kn_value *const *stride, kn_value *const *bound, kn_value *mask,
                    kn_value *other) {
  int rank = result.kind == KN_TY_TILE ? result.rank : 1;
  kn_value *o[4 * KN_MAX_RANK + 4];
  unsigned cl;
  int n = mem_opnds(o, rank, base, off, stride, bound, NULL, mask, other, &cl);
  kn_op *op = kn_build_op(b, KN_OP_LOAD, n, o, 1, &result);
  op->iattr[0] = rank;
  op->iattr[1] = cl;
  return op->res[0];
}

void kn_load_set_off32(kn_value *load) {
  KN_ASSERT(load->def && load->def->opc == KN_OP_LOAD);
  load->def->iattr[1] |= KN_MEM_OFF32;
}

void kn_store_set_atomic_add(kn_op *store) {
  KN_ASSERT(store->opc == KN_OP_STORE);
  store->iattr[1] |= KN_MEM_ATOMIC_ADD;
}

kn_op *kn_b_store(kn_builder *b, kn_value *value, kn_value *base, kn_value *const *off,
                  kn_value *const *stride, kn_value *const *bound, kn_value *mask) {
  int rank = value->type.kind == KN_TY_TILE ? value->type.rank : 1;
  kn_value *o[4 * KN_MAX_RANK + 4];
  unsigned cl;
  int n = mem_opnds(o, rank, base, off, stride, bound, value, mask, NULL, &cl);
  kn_op *op = kn_build_op(b, KN_OP_STORE, n, o, 0, NULL);
  op->iattr[0] = rank;
  op->iattr[1] = cl;
  return op;
}

kn_value *kn_b_gather(kn_builder *b, kn_type result, kn_value *base, kn_value *offsets,
                      kn_value *mask, kn_value *other) {
  kn_value *o[4] = {base, offsets};
  int n = 2;
  unsigned cl = 0;
  if (mask) o[n++] = mask, cl |= KN_MEM_MASK;
  if (other) o[n++] = other, cl |= KN_MEM_OTHER;
  kn_op *op = kn_build_op(b, KN_OP_GATHER, n, o, 1, &result);
  op->iattr[0] = cl;
  return op->res[0];
}

kn_op *kn_b_for(kn_builder *b, kn_value *lo, kn_value *hi, kn_value *step, int ninit,
                kn_value *const *init, kn_builder *body) {
  kn_module *m = b->m;
  kn_value *o[64];
  kn_type rt[64];
  KN_ASSERT(ninit + 3 <= 64);
  o[0] = lo, o[1] = hi, o[2] = step;
  rt[0] = lo->type;
  for (int i = 0; i < ninit; i++) {
    o[3 + i] = init[i];
    rt[1 + i] = init[i]->type;
  }
  kn_op *op = kn_build_op(b, KN_OP_FOR, 3 + ninit, o, ninit, rt + 1);
  op->nregion = 1;
  op->region[0] = new_block(m, b->block->parent_func, 1 + ninit, rt);
  op->region[0]->parent_op = op;
  *body = kn_builder_at_end(m, op->region[0]);
  body->loc = b->loc;
  return op;
}

kn_op *kn_b_if(kn_builder *b, kn_value *cond, int nres, const kn_type *rtypes, kn_builder *then_b,
               kn_builder *else_b) {
  kn_op *op = kn_build_op(b, KN_OP_IF, 1, &cond, nres, rtypes);
  op->nregion = 2;
  for (int r = 0; r < 2; r++) {
    op->region[r] = new_block(b->m, b->block->parent_func, 0, NULL);
    op->region[r]->parent_op = op;
  }
  *then_b = kn_builder_at_end(b->m, op->region[0]);
  *else_b = kn_builder_at_end(b->m, op->region[1]);
  then_b->loc = else_b->loc = b->loc;
  return op;
}

kn_op *kn_b_yield(kn_builder *b, int n, kn_value *const *v) {
  return kn_build_op(b, KN_OP_YIELD, n, v, 0, NULL);
}

kn_op *kn_b_call(kn_builder *b, kn_func *callee, int n, kn_value *const *args) {
  kn_op *op = kn_build_op(b, KN_OP_CALL, n, args, callee->nret, callee->ret);
  op->callee = callee;
  op->callee_name = callee->name;
  return op;
}

kn_op *kn_b_return(kn_builder *b, int n, kn_value *const *v) {
  return kn_build_op(b, KN_OP_RETURN, n, v, 0, NULL);
}
