/* attn_gen.h — the small IR-building helpers the attention templates share (attn_fwd.c, attn_bwd.c):
 * a builder that names what it builds, binary ops, broadcasts of rows and columns, splats,
 * constants the (batch, head) base pointer, and calls of
 * a variant's modifiers.  Header-only (static inline): the templates are
 * its only users, inside templates/.  Every op is built by its own statement, because C leaves
 * the evaluation order of arguments open and the printed IR (golden files, cache keys) must not
 * depend on the compiler.
 */
#ifndef KILN_ATTN_GEN_H
#define KILN_ATTN_GEN_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "attn_internal.h"
#include "ir.h"

/* the builder the helpers below append with (it also knows the module, for names) */
typedef struct gen {
  kn_builder b;
} gen;

static inline kn_value *named(gen *g, kn_value *v, const char *name) {
  kn_value_set_name(g->b.m, v, name);
  return v;
}

static inline kn_value *bin(gen *g, kn_opcode opc, kn_value *x, kn_value *y, const char *name) {
  return named(g, kn_b_binary(&g->b, opc, x, y), name);
}

/* x (a named value) as a (1, n) row or an (n, 1) column, named <x>_row / <x>_col */
static inline kn_value *expand(gen *g, kn_value *x, int axis) {
  char name[64];
  snprintf(name, sizeof name, "%s_%s", x->name ? x->name : "x", axis == 0 ? "row" : "col");
  return named(g, kn_b_expand_dims(&g->b, x, axis), name);
}

/* (n) row vector -> (rows, n) by repeating it down the rows */
static inline kn_value *rows_of(gen *g, kn_value *x, int rows, const char *name) {
  int32_t shape[2] = {rows, x->type.shape[0]};
  return named(g, kn_b_broadcast(&g->b, expand(g, x, 0), 2, shape), name);
}

/* (n) column vector -> (n, cols) by repeating it across the columns */
static inline kn_value *cols_of(gen *g, kn_value *x, int cols, const char *name) {
  int32_t shape[2] = {x->type.shape[0], cols};
  return named(g, kn_b_broadcast(&g->b, expand(g, x, 1), 2, shape), name);
}

static inline kn_value *splat1(gen *g, kn_value *x, int n, const char *name) {
  int32_t shape[1] = {n};
  return named(g, kn_b_splat(&g->b, x, 1, shape), name);
}

static inline kn_value *splat2(gen *g, kn_value *x, int m, int n, const char *name) {
  int32_t shape[2] = {m, n};
  return named(g, kn_b_splat(&g->b, x, 2, shape), name);
}

/* bin() named <nm>_<sfx> */
static inline kn_value *bin_sfx(gen *g, kn_opcode opc, kn_value *x, kn_value *y,
                                const char *nm, const char *sfx) {
  char name[32];
  snprintf(name, sizeof name, "%s_%s", nm, sfx);
  return bin(g, opc, x, y, name);
}

/* ptr + b * sb + h * sh, the start of one (batch, head); named <nm>_base.  Each op is built by
 * its own statement: C leaves the evaluation order of arguments open, and the printed IR (golden
 * files, cache keys) must not depend on the compiler. */

static inline kn_value *head_base(gen *g, kn_value *ptr, kn_value *b, kn_value *sb,
                                  kn_value *h, kn_value *sh, const char *nm) {
  char name[32];
  kn_value *boff = bin_sfx(g, KN_OP_MUL, b, sb, nm, "boff");
  kn_value *hoff = bin_sfx(g, KN_OP_MUL, h, sh, nm, "hoff");
  kn_value *off = bin_sfx(g, KN_OP_ADD, boff, hoff, nm, "off");
  snprintf(name, sizeof name, "%s_base", nm);
  return named(g, kn_b_ptradd(&g->b, ptr, off), name);
}

static inline kn_value *cf(gen *g, kn_type t, double v, const char *name) {
  return named(g, kn_b_const_f(&g->b, t, v), name);
}

static inline kn_value *ci(gen *g, kn_type t, int64_t v, const char *name) {
  return named(g, kn_b_const_i(&g->b, t, v), name);
}

/* the index of the kernel parameter `name` (the plan made it, so it is there) */
static inline int sig_index(const kn_attn_sig *sig, const char *name) {
  for (int i = 0; i < sig->n; i++)
    if (!strcmp(sig->name[i], name)) return i;
  KN_ASSERT(!"variant parameter missing from the signature");
  return 0;
}

/* a call of the modifier: its fixed arguments, then the kernel parameters its plan binds; an
 * elemental call (docs/ir.md) when the arguments are tiles, so its result has type `res` */
static inline kn_value *call_mod(gen *g, const kn_attn_mod *mod, kn_value *const *fixed,
                                 int nfixed, kn_value *const *P, kn_type res, const char *name) {
  kn_value *args[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK];
  int n = 0;
  for (int i = 0; i < nfixed; i++) args[n++] = fixed[i];
  for (int i = nfixed; i < kn_func_nparams(mod->f); i++) args[n++] = P[mod->arg[i - nfixed]];
  kn_op *op = kn_b_call(&g->b, mod->f, n, args);
  op->res[0]->type = res;
  return named(g, op->res[0], name);
}

#endif
