/* gather.c — when a gather is a row gather: its offsets run in unit steps along one axis.
 *
 * A gather reads base[offsets[i, j]] per element, so in general every element is a scalar
 * access at an address of its own.  The gathers kiln's templates build are not general: the
 * paged KV read (templates/attn_paged.c) is `rows[:, None] + arange(0, D)[None, :]` — one
 * address per key row, then the head dimension contiguous — under a mask that is constant
 * along that dimension.  Such a gather can be laid out like a load (a blocked layout, vectors
 * along the contiguous axis: the layout pass anchors it so) and read in vectors of up to 16
 * bytes (lower_gpu.c), which is what makes a paged kernel read its pages as fast as a dense one
 * reads its rows.
 *
 * The facts come from the IR's structure alone, as known_multiple's do: a value is *constant*
 * along an axis (splats, constants, aranges and values broadcast across it, and elementwise
 * ops of such values), or a *step* along it (base + position, the base constant along the axis:
 * an arange, or a sum of one step and constants); anything else is unknown.  The base's known
 * multiple comes from constants and `multiple_of` hints (the paged template states its rows'
 * alignment, which kiln_forward checks on the caller's strides, with one), so a vector of w
 * elements starting at a position that is a multiple of w starts at an offset that is one too.
 */
#include "gpu.h"

typedef struct cls {
  enum { CLS_OTHER, CLS_CONST, CLS_STEP } kind;
  long long mult; /* CONST, OTHER: every element is a multiple of it; STEP: the base is */
} cls;

static long long gcd(long long a, long long b) {
  while (b) {
    long long t = a % b;
    a = b, b = t;
  }
  return a ? a : 1;
}

/* the multiple every element of v is known to be (a step's elements: gcd with 1) */
static long long elem_multiple(cls c) { return c.kind == CLS_STEP ? 1 : c.mult; }

static cls classify(const kn_value *v, int ax, int depth) {
  cls other = {CLS_OTHER, 1};
  if (depth > 32) return other;
  if (v->type.kind != KN_TY_TILE) return (cls){CLS_CONST, kn_gpu_known_multiple(v)};
  const kn_op *d = v->def;
  if (!d) return other;
  switch (d->opc) {
  case KN_OP_CONST: {
    long long c = d->iattr[0] < 0 ? -d->iattr[0] : d->iattr[0];
    return (cls){CLS_CONST, c ? c : 1LL << 30};
  }
  case KN_OP_SPLAT: return (cls){CLS_CONST, kn_gpu_known_multiple(d->opnd[0])};
  case KN_OP_ARANGE: {
    long long s = d->iattr[0] < 0 ? -d->iattr[0] : d->iattr[0];
    return ax == 0 ? (cls){CLS_STEP, s ? s : 1LL << 30} : other;
  }
  case KN_OP_CAST: {
    kn_scalar from = d->opnd[0]->type.elem, to = v->type.elem;
    bool ints = (from == KN_I32 || from == KN_I64) && (to == KN_I32 || to == KN_I64);
    return ints ? classify(d->opnd[0], ax, depth + 1) : other;
  }
  case KN_OP_MULTIPLE_OF: { /* every element: so a constant's or an unknown value's */
    cls c = classify(d->opnd[0], ax, depth + 1);
    if (c.kind != CLS_STEP && d->iattr[0] > c.mult) c.mult = d->iattr[0];
    return c;
  }
  case KN_OP_EXPAND_DIMS: {
    int e = (int)d->iattr[0];
    if (ax == e) return (cls){CLS_CONST, elem_multiple(classify(d->opnd[0], 0, depth + 1))};
    return classify(d->opnd[0], ax > e ? ax - 1 : ax, depth + 1);
  }
  case KN_OP_BROADCAST: {
    const kn_value *x = d->opnd[0];
    if (x->type.rank != v->type.rank) return other;
    if (x->type.shape[ax] == 1) return (cls){CLS_CONST, elem_multiple(classify(x, ax, depth + 1))};
    return classify(x, ax, depth + 1);
  }
  case KN_OP_ADD:
  case KN_OP_SUB: {
    cls a = classify(d->opnd[0], ax, depth + 1), b = classify(d->opnd[1], ax, depth + 1);
    if (a.kind == CLS_OTHER || b.kind == CLS_OTHER) return other;
    if (a.kind == CLS_STEP && b.kind == CLS_STEP) return other;
    if (d->opc == KN_OP_SUB && b.kind == CLS_STEP) return other; /* c - step: a step down */
    return (cls){a.kind == CLS_STEP || b.kind == CLS_STEP ? CLS_STEP : CLS_CONST,
                 gcd(a.mult, b.mult)};
  }
  case KN_OP_MUL: {
    cls a = classify(d->opnd[0], ax, depth + 1), b = classify(d->opnd[1], ax, depth + 1);
    if (a.kind == CLS_CONST && b.kind == CLS_CONST) return (cls){CLS_CONST, a.mult * b.mult};
    return other;
  }
  default:
    break;
  }
  /* any other elementwise op of values constant along ax is constant along it */
  if (!(kn_op_is_binary(d->opc) || kn_op_is_unary(d->opc) || d->opc == KN_OP_CMP ||
        d->opc == KN_OP_SELECT || d->opc == KN_OP_MAX_CONTIGUOUS))
    return other;
  for (int i = 0; i < d->nopnd; i++)
    if (classify(d->opnd[i], ax, depth + 1).kind != CLS_CONST) return other;
  return (cls){CLS_CONST, 1};
}

/* is the i1 mask m the same within each aligned group of w positions along ax? */
static bool uniform_in_groups(const kn_value *m, int ax, int w, int depth) {
  if (depth > 32) return false;
  if (classify(m, ax, depth).kind == CLS_CONST) return true;
  const kn_op *d = m->def;
  if (!d) return false;
  switch (d->opc) {
  case KN_OP_AND:
  case KN_OP_OR:
    return uniform_in_groups(d->opnd[0], ax, w, depth + 1) &&
           uniform_in_groups(d->opnd[1], ax, w, depth + 1);
  case KN_OP_EXPAND_DIMS: {
    int e = (int)d->iattr[0];
    return ax == e || uniform_in_groups(d->opnd[0], ax > e ? ax - 1 : ax, w, depth + 1);
  }
  case KN_OP_BROADCAST:
    return d->opnd[0]->type.rank == m->type.rank &&
           (d->opnd[0]->type.shape[ax] == 1 || uniform_in_groups(d->opnd[0], ax, w, depth + 1));
  case KN_OP_CMP: {
    /* step < c and step >= c change value only at c: at a group boundary when w divides c and
     * the step's base */
    kn_pred p = (kn_pred)d->iattr[0];
    if (p != KN_PRED_LT && p != KN_PRED_GE) return false;
    cls a = classify(d->opnd[0], ax, depth + 1), b = classify(d->opnd[1], ax, depth + 1);
    return a.kind == CLS_STEP && b.kind == CLS_CONST && a.mult % w == 0 && b.mult % w == 0;
  }
  default:
    return false;
  }
}

int kn_gpu_gather_axis(const kn_op *op) {
  if (op->opc != KN_OP_GATHER || op->res[0]->type.kind != KN_TY_TILE) return -1;
  kn_gather_operands go;
  kn_gather_operands_get(op, &go);
  for (int ax = op->res[0]->type.rank - 1; ax >= 0; ax--)
    if (op->res[0]->type.shape[ax] > 1 && classify(go.offsets, ax, 0).kind == CLS_STEP) return ax;
  return -1;
}

int kn_gpu_gather_vec(const kn_op *op, int ax, int maxvec) {
  kn_gather_operands go;
  kn_gather_operands_get(op, &go);
  cls c = classify(go.offsets, ax, 0);
  if (c.kind != CLS_STEP) return 1;
  int w = maxvec;
  while (w > 1 && (c.mult % w || (go.mask && !uniform_in_groups(go.mask, ax, w, 0)))) w /= 2;
  return w;
}
