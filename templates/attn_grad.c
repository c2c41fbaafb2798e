/* attn_grad.c — the derivative of a score modifier with respect to its score, from its IR.
 *
 * The backward kernels need d z / d s for every score modifier z = f(s, b, h, q_idx, kv_idx,
 * params...) (attn_bwd.c).  kn_attn_mod_grad derives it in forward mode: it copies f into
 * @<name>.grad, op by op, and beside every value that depends on the score builds its tangent
 * (d value / d s, a value of the same type); a value that does not depend on the score has none
 * (zero), so a load of ALiBi's slope or a bias element stays one op and the derivative of an
 * additive modifier folds to 1.  @<name>.grad returns (f's result, its tangent).  Modifiers are
 * straight-line scalar code (the verifier's rule for elemental callees), so one pass in program
 * order is the whole algorithm.
 *
 * Rules: sums and products as usual; div (a/b)' = a'/b - a b'/b^2; max/min/abs/select take the
 * tangent of the side they choose (the derivative almost everywhere; at a tie max takes its
 * first operand); exp, exp2, log, log2, sqrt, rsqrt, tanh by their derivatives (tanh's 1 - r^2,
 * softcap's); a float-to-float cast casts the tangent.  What the score reaches and has no
 * derivative kiln trusts — rem, a cast to an integer (a step function whose result could index
 * memory), an address (ptradd, load) or a call — is an error at the op naming the modifier: the
 * backward of such a variant is refused rather than guessed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_bwd.h"
#include "attn_gen.h"

typedef struct tangents {
  kn_value **from, **to, **dt;  /* f's value, its copy, the copy's tangent (NULL: zero) */
  int n, cap;
} tangents;

static int find(const tangents *t, const kn_value *v) {
  for (int i = 0; i < t->n; i++)
    if (t->from[i] == v) return i;
  return -1;
}

static void put(tangents *t, kn_value *from, kn_value *to, kn_value *dt) {
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 32;
    t->from = realloc(t->from, sizeof *t->from * (size_t)t->cap);
    t->to = realloc(t->to, sizeof *t->to * (size_t)t->cap);
    t->dt = realloc(t->dt, sizeof *t->dt * (size_t)t->cap);
    KN_ASSERT(t->from && t->to && t->dt);
  }
  t->from[t->n] = from, t->to[t->n] = to, t->dt[t->n] = dt;
  t->n++;
}

static kn_value *mapped(const tangents *t, const kn_value *v) {
  int i = find(t, v);
  KN_ASSERT(i >= 0 && "an operand defined before its use");
  return t->to[i];
}

static kn_value *tangent(const tangents *t, const kn_value *v) {
  int i = find(t, v);
  return i < 0 ? NULL : t->dt[i];
}

/* a tangent, or the zero of type `like`'s type where there is none */
static kn_value *or_zero(gen *g, kn_value *dt, kn_value *like) {
  return dt ? dt : kn_b_const_f(&g->b, like->type, 0.0);
}

static kn_value *mulc(gen *g, kn_value *x, double c) {
  return kn_b_binary(&g->b, KN_OP_MUL, x, kn_b_const_f(&g->b, x->type, c));
}

static kn_value *bi(gen *g, kn_opcode o, kn_value *x, kn_value *y) {
  return kn_b_binary(&g->b, o, x, y);
}

/* the tangent of op's result (the copy r of op, its operands' copies a[] and tangents da[]);
 * *bad set when the op has none kiln trusts */
static kn_value *derive(gen *g, const kn_op *op, kn_value *r, kn_value *const *a,
                        kn_value *const *da, bool *bad) {
  kn_value *x = a[0], *dx = da[0];
  kn_value *y = op->nopnd > 1 ? a[1] : NULL, *dy = op->nopnd > 1 ? da[1] : NULL;
  switch (op->opc) {
  case KN_OP_ADD:
    return dx && dy ? bi(g, KN_OP_ADD, dx, dy) : dx ? dx : dy;
  case KN_OP_SUB:
    return dx && dy ? bi(g, KN_OP_SUB, dx, dy) : dx ? dx : kn_b_unary(&g->b, KN_OP_NEG, dy);
  case KN_OP_MUL: {
    kn_value *u = dx ? bi(g, KN_OP_MUL, dx, y) : NULL, *w = dy ? bi(g, KN_OP_MUL, x, dy) : NULL;
    return u && w ? bi(g, KN_OP_ADD, u, w) : u ? u : w;
  }
  case KN_OP_DIV: {
    kn_value *u = dx ? bi(g, KN_OP_DIV, dx, y) : NULL;
    kn_value *w = dy ? bi(g, KN_OP_DIV, bi(g, KN_OP_MUL, r, dy), y) : NULL;  /* (a/b) b' / b */
    return u && w ? bi(g, KN_OP_SUB, u, w) : u ? u : kn_b_unary(&g->b, KN_OP_NEG, w);
  }
  case KN_OP_NEG: return kn_b_unary(&g->b, KN_OP_NEG, dx);
  case KN_OP_ABS: {
    kn_value *neg = kn_b_cmp(&g->b, KN_PRED_LT, x, kn_b_const_f(&g->b, x->type, 0.0));
    return kn_b_select(&g->b, neg, kn_b_unary(&g->b, KN_OP_NEG, dx), dx);
  }
  case KN_OP_MAX: case KN_OP_MIN: {
    kn_value *first = kn_b_cmp(&g->b, op->opc == KN_OP_MAX ? KN_PRED_GE : KN_PRED_LE, x, y);
    return kn_b_select(&g->b, first, or_zero(g, dx, r), or_zero(g, dy, r));
  }
  case KN_OP_SELECT: {  /* operands (cond, a, b): the chosen side's tangent */
    kn_value *dt = op->nopnd > 2 ? da[2] : NULL;
    if (!dy && !dt) return NULL;
    return kn_b_select(&g->b, x, or_zero(g, dy, r), or_zero(g, dt, r));
  }
  case KN_OP_EXP: return bi(g, KN_OP_MUL, r, dx);
  case KN_OP_EXP2: return bi(g, KN_OP_MUL, mulc(g, r, M_LN2), dx);
  case KN_OP_LOG: return bi(g, KN_OP_DIV, dx, x);
  case KN_OP_LOG2: return bi(g, KN_OP_DIV, dx, mulc(g, x, M_LN2));
  case KN_OP_SQRT: return bi(g, KN_OP_DIV, dx, mulc(g, r, 2.0));
  case KN_OP_RSQRT: return bi(g, KN_OP_DIV, bi(g, KN_OP_MUL, mulc(g, r, -0.5), dx), x);
  case KN_OP_TANH: {
    kn_value *one = kn_b_const_f(&g->b, r->type, 1.0);
    return bi(g, KN_OP_MUL, bi(g, KN_OP_SUB, one, bi(g, KN_OP_MUL, r, r)), dx);
  }
  case KN_OP_CAST:
    if (kn_scalar_is_float(r->type.elem)) return kn_b_cast(&g->b, dx, r->type.elem);
    *bad = true;
    return NULL;
  case KN_OP_CMP:
    return NULL;  /* a predicate: its uses (select) choose a side */
  case KN_OP_MULTIPLE_OF: case KN_OP_MAX_CONTIGUOUS:
    return dx;
  default:
    *bad = true;
    return NULL;
  }
}

kn_func *kn_attn_mod_grad(kn_module *m, kn_func *f, kn_diag *diag) {
  char name[160];
  snprintf(name, sizeof name, "%s.grad", f->name);
  kn_func *have = kn_module_find(m, name);
  if (have) return have;
  const int np = kn_func_nparams(f);
  kn_type pt[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK];
  const char *pn[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK];
  KN_ASSERT(np <= (int)(sizeof pt / sizeof pt[0]) && f->nret == 1);
  for (int i = 0; i < np; i++) {
    pt[i] = f->body->args[i]->type;
    pn[i] = f->body->args[i]->name;
  }
  const kn_type rt[2] = {f->ret[0], f->ret[0]};
  kn_func *gf = kn_func_new(m, name, false, np, pt, pn, 2, rt);
  gen G = {.b = kn_builder_at_end(m, gf->body)}, *g = &G;
  tangents t = {0};
  for (int i = 0; i < np; i++)
    put(&t, f->body->args[i], gf->body->args[i],
        i == 0 ? kn_b_const_f(&g->b, pt[0], 1.0) : NULL);  /* d s / d s = 1 */
  kn_func *res = NULL;
  for (const kn_op *op = f->body->first; op; op = op->next) {
    kn_value *a[8] = {0}, *da[8] = {0};
    bool any = false;
    KN_ASSERT(op->nopnd <= 8 || op->opc == KN_OP_CALL || op->opc == KN_OP_RETURN);
    for (int i = 0; i < op->nopnd && i < 8; i++) {
      a[i] = mapped(&t, op->opnd[i]);
      da[i] = tangent(&t, op->opnd[i]);
      any |= da[i] != NULL;
    }
    if (op->opc == KN_OP_RETURN) {
      kn_value *dr = or_zero(g, da[0], a[0]);
      kn_b_return(&g->b, 2, (kn_value *[]){a[0], dr});
      res = gf;
      break;
    }
    if (op->opc == KN_OP_CALL && any) {
      kn_error(diag, m, op->loc, "attention backward: @%s passes the score to @%s; the "
               "derivative of a score modifier is taken through its own ops only (write the "
               "callee's ops into @%s)", f->name, op->callee_name, f->name);
      goto out;
    }
    kn_value *ops[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK];
    for (int i = 0; i < op->nopnd; i++) ops[i] = mapped(&t, op->opnd[i]);
    kn_type rtypes[4];
    for (int i = 0; i < op->nres && i < 4; i++) rtypes[i] = op->res[i]->type;
    kn_op *c = kn_build_op(&g->b, op->opc, op->nopnd, ops, op->nres, rtypes);
    memcpy(c->iattr, op->iattr, sizeof c->iattr);
    c->fattr = op->fattr;
    c->loc = op->loc;
    c->callee_name = op->callee_name;
    c->callee = op->callee;
    kn_value *dr = NULL;
    if (any) {
      bool bad = false;
      dr = derive(g, op, c->res[0], a, da, &bad);
      if (bad) {
        kn_error(diag, m, op->loc, "attention backward: the score reaches '%s' in @%s, which "
                 "has no derivative kiln takes (rem, a cast to an integer, an address or a "
                 "load): the backward of this score modifier is not supported",
                 kn_opinfo_table[op->opc].name, f->name);
        goto out;
      }
    }
    for (int i = 0; i < op->nres; i++) put(&t, op->res[i], c->res[i], i == 0 ? dr : NULL);
  }
out:
  free(t.from);
  free(t.to);
  free(t.dt);
  return res;
}
