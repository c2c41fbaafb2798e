/* assign_layouts.c — the layout pass: a layout for every tile value, and the conversions.
 *
 * Anchors first: every dot gets the mma layout of one matrix instruction chosen for the whole
 * kernel (the largest that fits every dot, so that chained dots share it; f32 dots get the
 * per-thread FMA table fma_16x32 instead on AMDGPU, fma_16x16 on NVPTX, not transposed: its
 * rows already lie within a wave).  MFMAs are always *transposed* (the instruction is given B as A and A as B, so it
 * computes D^T): then each lane holds a row of the result, a row reduction is mostly
 * in-thread plus one or two butterflies, and the softmax P of S = QK^T feeds O += PV as its
 * dot_a operand by register renaming (the transposed accumulator of 32x32x8 holds, per lane,
 * row lane%32 and columns 8i + 4*(lane/32) + 0..3: the k elements dot_a wants).  Loads get a
 * blocked layout vectorised along the dimension whose stride is the constant 1, and so does a
 * row gather (offsets in unit steps along one axis, gather.c) along that axis.
 *
 * Then the layouts flow: forward (an elementwise op takes its operands' layout, preferring an
 * mma or slice layout over a blocked one; a gather takes its offsets'; reduce gives slice;
 * expand_dims of a slice gives its parent; loops carry the layout of init or yield, an if's
 * results those of its yields), and backward to values nothing anchored (constants, splats,
 * aranges take what their users want; a gather's offsets and mask take the gather's).
 * Both directions repeat until nothing changes; what is left gets a blocked layout.
 *
 * Finally every (user, operand) whose value's layout differs from what the user needs becomes a
 * conversion: free when kn_lmap_convert_free says so, else through LDS (see gpu.h for eager and
 * lazy); the operand of a reshape or transpose always goes through LDS (a permute).  Warps are
 * laid along M only; nothing here picks a layout whose reductions cross warps.
 */
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "op_cases.h"
#include "pipeline.h"

typedef struct pass {
  kn_layout_plan *p;
  kn_diag *d;
  kn_op **ops;            /* program order, nested blocks included */
  int nops, capops;
  const kn_layout *mma;   /* the kernel's accumulator layout, or NULL without dots */
  const kn_mma_shape *shape;
  int convcap;
} pass;

static const kn_layout *intern(pass *s, kn_layout l) {
  kn_layout *c = kn_arena_alloc(s->p->arena, sizeof *c);
  *c = l;
  return c;
}

static void collect(pass *s, kn_block *b) {
  for (kn_op *op = b->first; op; op = op->next) {
    if (s->nops == s->capops) {
      s->capops = s->capops ? 2 * s->capops : 256;
      s->ops = realloc(s->ops, sizeof(kn_op *) * (size_t)s->capops);
      KN_ASSERT(s->ops);
    }
    for (int i = 0; i < op->nres; i++) s->p->pos[op->res[i]->id] = s->nops;
    if (op->opc == KN_OP_FOR)
      for (int i = 0; i < op->region[0]->nargs; i++) s->p->pos[op->region[0]->args[i]->id] = s->nops;
    s->ops[s->nops++] = op;
    for (int r = 0; r < op->nregion; r++) collect(s, op->region[r]);
  }
}

static bool is_tile(const kn_value *v) { return v->type.kind == KN_TY_TILE; }

static int elem_bytes(const kn_value *v) { return (int)kn_scalar_size(v->type.elem); }

/* ---- anchors ---- */

/* every dot of the kernel fits instruction i with the plan's warps */
static bool fits_all(void *ctx, const kn_mma_instr *i) {
  pass *s = ctx;
  for (int j = 0; j < s->nops; j++) {
    kn_op *op = s->ops[j];
    if (op->opc != KN_OP_DOT) continue;
    int M = op->res[0]->type.shape[0], N = op->res[0]->type.shape[1];
    int K = op->opnd[0]->type.shape[1];
    if (!kn_mma_fits(i, M, N, K, s->p->warps)) return false;
  }
  return true;
}

/* the names of arch's instructions for operand type a, for messages */
static void list_instrs(const kn_arch *arch, kn_scalar a, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < arch->nmma && len < n; i++)
    if (arch->mma[i].a == a)
      len += (size_t)snprintf(buf + len, n - len, "%s%dx%dx%d", len ? ", " : "", arch->mma[i].m,
                              arch->mma[i].n, arch->mma[i].k);
}

/* One instruction for the whole kernel, from the registry's table (compiler/arch.h): all dots
 * must take one operand type, and the first entry for that type that fits every dot wins.
 * Meta WGMMA = 1 picks sm_90a's wgmma (m = 64 per warpgroup; an error where there is none or
 * it does not fit).  Meta MFMA = 16 / 32 picks the instruction's m on AMDGPU (16x16 holds a quarter of 32x32's
 * accumulator per lane group: fewer registers per dot, more instructions, a balance the
 * autotuner may prefer); only that size is then tried, so a kernel it does not fit is an error
 * rather than silently another shape.  NVPTX has one shape and ignores the key, and so do f32
 * dots on AMDGPU (FMAs, no MFMA). */
static int choose_mma(pass *s) {
  const kn_arch *arch = s->p->arch;
  kn_op *first = NULL;
  for (int i = 0; i < s->nops; i++) {
    kn_op *op = s->ops[i];
    if (op->opc != KN_OP_DOT) continue;
    if (!first) first = op;
    kn_scalar a = op->opnd[0]->type.elem, b = op->opnd[1]->type.elem;
    kn_scalar a0 = first->opnd[0]->type.elem;
    if (a != b || a != a0)
      return kn_error(s->d, s->p->k->module, op->loc,
                      "not yet supported on %s: dots of different operand types in one kernel "
                      "(%s x %s here, %s before; one matrix instruction serves a kernel)",
                      arch->name, kn_scalar_name(a), kn_scalar_name(b), kn_scalar_name(a0));
  }
  if (!first) return 0;
  kn_scalar a = first->opnd[0]->type.elem;
  if (!kn_arch_pick_mma(arch, a, 0, NULL, NULL)) {
    char have[200] = "";
    for (int i = 0, n = 0; i < arch->nmma; i++) {
      bool seen = false;
      for (int j = 0; j < i; j++) seen |= arch->mma[j].a == arch->mma[i].a;
      if (!seen)
        n += snprintf(have + n, sizeof have - (size_t)n, "%s%s", n ? ", " : "",
                      kn_scalar_name(arch->mma[i].a));
    }
    return kn_error(s->d, s->p->k->module, first->loc,
                    "dot of %s operands not supported on %s: no matrix instruction takes them "
                    "(it has instructions for %s)", kn_scalar_name(a), arch->name, have);
  }
  int64_t want = 0, wg = 0;
  bool fma = kn_arch_pick_mma(arch, a, 0, NULL, NULL)->operands == KN_MMA_FMA;
  if (kn_func_get_meta(s->p->k, "WGMMA", &wg) && wg) {
    /* wgmma (sm_90a): the entries with m = 64; only those, so a dot it does not fit is an
     * error rather than silently mma.sync */
    const kn_mma_instr *w = kn_arch_pick_mma(arch, a, 64, NULL, NULL);
    if (arch->isa != KN_ISA_NVPTX || !w || w->operands != KN_MMA_WGMMA)
      return kn_error(s->d, s->p->k->module, s->p->k->loc,
                      "WGMMA = %lld: %s has no wgmma instruction for %s operands (wgmma is "
                      "sm_90a's, f16 and bf16)", (long long)wg, arch->name, kn_scalar_name(a));
    if (!kn_arch_pick_mma(arch, a, 64, fits_all, s))
      return kn_error(s->d, s->p->k->module, first->loc,
                      "WGMMA = %lld: wgmma does not fit this dot with %d warps (each warpgroup "
                      "of 4 warps takes one 64-row slab: rows = 16 x warps, warps a multiple of "
                      "4; N a multiple of 8 up to 256, K of 16)", (long long)wg, s->p->warps);
    want = 64;
  } else if (kn_func_get_meta(s->p->k, "MFMA", &want) && arch->isa == KN_ISA_AMDGPU && !fma) {
    if (want != 16 && want != 32)
      return kn_error(s->d, s->p->k->module, s->p->k->loc,
                      "MFMA must be 16 (16x16 instructions) or 32 (32x32), not %lld",
                      (long long)want);
    if (!kn_arch_pick_mma(arch, a, (int)want, NULL, NULL))
      return kn_error(s->d, s->p->k->module, s->p->k->loc,
                      "MFMA = %lld: %s has no %lldx%lld instruction for %s operands",
                      (long long)want, arch->name, (long long)want, (long long)want,
                      kn_scalar_name(a));
  } else {
    want = 0;
  }
  const kn_mma_instr *in = kn_arch_pick_mma(arch, a, (int)want, fits_all, s);
  if (!in) {
    char list[160];
    list_instrs(arch, a, list, sizeof list);
    return kn_error(s->d, s->p->k->module, first->loc,
                    "no matrix instruction of %s fits this dot with %d warps (%s operands: %s; "
                    "the rows per warp must be a multiple of the instruction's m)", arch->name,
                    s->p->warps, kn_scalar_name(a), list);
  }
  const kn_mma_shape *sh = kn_mma_shape_get(in->shape);
  s->shape = sh;
  s->p->instr = in;
  /* AMDGPU: transposed (each lane holds a row, see the file comment).  mma.sync m16n8k16 as it
   * is: a quad of lanes (lane / 4) holds a row, so a row reduction is in-thread plus two
   * butterflies (lane bits 0 and 1), and the accumulator of S = QK^T, columns
   * 2 * (lane % 4) + {0, 1} + 8j, is already the A fragment of O += PV (k = columns). */
  s->mma = intern(s, kn_layout_mma(sh, s->p->warps, arch->isa == KN_ISA_AMDGPU && sh->k > 1));
  return 0;
}

/* the dim whose stride operand is the constant 1 (a compile-time fact only then) */
static int contiguous_dim(const kn_op *op) {
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  for (int dd = mo.rank - 1; dd >= 0; dd--) {
    const kn_value *st = mo.stride[dd];
    if (st->def && st->def->opc == KN_OP_CONST && st->def->iattr[0] == 1) return dd;
  }
  return mo.rank - 1;
}

static const kn_layout *blocked_for(pass *s, const kn_value *v, int contig) {
  int shape[2] = {v->type.shape[0], v->type.rank == 2 ? v->type.shape[1] : 1};
  return intern(s, kn_layout_blocked(v->type.rank, shape, contig, elem_bytes(v), s->p->warps,
                                     s->p->arch->lanes));
}

/* ---- propagation ---- */

static bool set(pass *s, kn_value *v, const kn_layout *l) {
  if (!is_tile(v) || !l || s->p->lay[v->id]) return false;
  if (l->kind == KN_LAYOUT_SLICE ? v->type.rank != 1 : l->rank != v->type.rank) return false;
  s->p->lay[v->id] = l;
  return true;
}

static const kn_layout *get(pass *s, const kn_value *v) { return s->p->lay[v->id]; }

static bool elementwise(kn_opcode o) {
  return kn_op_is_binary(o) || kn_op_is_unary(o) || o == KN_OP_CMP || o == KN_OP_SELECT ||
         o == KN_OP_CAST || o == KN_OP_MULTIPLE_OF || o == KN_OP_MAX_CONTIGUOUS;
}

static const kn_layout *slice_of(pass *s, const kn_layout *parent, int dim) {
  return intern(s, kn_layout_slice(parent, dim));
}

static bool forward(pass *s, kn_op *op) {
  bool ch = false;
  if (op->nres == 1 && is_tile(op->res[0]) && !get(s, op->res[0])) {
    kn_value *r = op->res[0];
    if (elementwise(op->opc)) {
      const kn_layout *best = NULL;
      for (int i = 0; i < op->nopnd; i++) {
        const kn_layout *l = is_tile(op->opnd[i]) ? get(s, op->opnd[i]) : NULL;
        if (l && (!best || (best->kind == KN_LAYOUT_BLOCKED && l->kind != KN_LAYOUT_BLOCKED)))
          best = l;
      }
      ch |= set(s, r, best);
    } else if (op->opc == KN_OP_BROADCAST) {
      ch |= set(s, r, get(s, op->opnd[0]));
    } else if (op->opc == KN_OP_EXPAND_DIMS) {
      const kn_layout *l = get(s, op->opnd[0]);
      if (l && l->kind == KN_LAYOUT_SLICE && l->dim == op->iattr[0]) ch |= set(s, r, l->parent);
    } else if (kn_op_is_reduce(op->opc)) {
      const kn_layout *l = get(s, op->opnd[0]);
      if (l && l->rank == 2) ch |= set(s, r, slice_of(s, l, (int)op->iattr[0]));
    } else if (op->opc == KN_OP_GATHER) {
      ch |= set(s, r, get(s, op->opnd[1]));  /* each thread loads the elements of its offsets */
    }
  }
  if (op->opc == KN_OP_FOR) {
    kn_block *body = op->region[0];
    kn_op *y = body->last;
    for (int i = 0; i + 1 < body->nargs; i++) {
      kn_value *arg = body->args[i + 1];
      const kn_layout *l = y && y->opc == KN_OP_YIELD ? get(s, y->opnd[i]) : NULL;
      if (!l && is_tile(op->opnd[3 + i])) l = get(s, op->opnd[3 + i]);
      ch |= set(s, arg, l);
      ch |= set(s, op->res[i], get(s, arg));
    }
  }
  if (op->opc == KN_OP_IF)  /* a result takes the layout its then-yield has, else its else-yield's */
    for (int i = 0; i < op->nres; i++)
      for (int r = 0; r < 2; r++) {
        kn_op *y = op->region[r]->last;
        if (y && y->opc == KN_OP_YIELD && is_tile(y->opnd[i])) ch |= set(s, op->res[i], get(s, y->opnd[i]));
      }
  return ch;
}

static bool backward(pass *s, kn_op *op) {
  bool ch = false;
  const kn_layout *rl = op->nres == 1 && is_tile(op->res[0]) ? get(s, op->res[0]) : NULL;
  if (rl && elementwise(op->opc)) {
    for (int i = 0; i < op->nopnd; i++)
      if (is_tile(op->opnd[i]) && op->opnd[i]->type.rank == op->res[0]->type.rank)
        ch |= set(s, op->opnd[i], rl);
  } else if (rl && op->opc == KN_OP_BROADCAST) {
    ch |= set(s, op->opnd[0], rl);
  } else if (rl && op->opc == KN_OP_DOT) {
    ch |= set(s, op->opnd[2], rl);
  } else if (rl && op->opc == KN_OP_EXPAND_DIMS) {
    ch |= set(s, op->opnd[0], slice_of(s, rl, (int)op->iattr[0]));
  } else if (rl && kn_op_is_reduce(op->opc) && rl->kind == KN_LAYOUT_SLICE) {
    ch |= set(s, op->opnd[0], rl->parent);
  } else if (rl && op->opc == KN_OP_GATHER) {
    for (int i = 1; i < op->nopnd; i++) ch |= set(s, op->opnd[i], rl);  /* offsets, mask */
  } else if (rl && op->opc == KN_OP_LOAD) {
    kn_mem_operands mo;
    kn_mem_operands_get(op, &mo);
    if (mo.mask) ch |= set(s, mo.mask, rl);
  } else if (op->opc == KN_OP_FOR) {
    kn_block *body = op->region[0];
    kn_op *y = body->last;
    for (int i = 0; i + 1 < body->nargs; i++) {
      const kn_layout *l = get(s, body->args[i + 1]);
      ch |= set(s, op->opnd[3 + i], l);
      if (y && y->opc == KN_OP_YIELD) ch |= set(s, y->opnd[i], l);
    }
  } else if (op->opc == KN_OP_IF) {
    for (int i = 0; i < op->nres; i++)
      for (int r = 0; r < 2; r++) {
        kn_op *y = op->region[r]->last;
        if (y && y->opc == KN_OP_YIELD) ch |= set(s, y->opnd[i], get(s, op->res[i]));
      }
  } else if (op->opc == KN_OP_STORE) {
    kn_mem_operands mo;
    kn_mem_operands_get(op, &mo);
    if (mo.mask && get(s, mo.value)) ch |= set(s, mo.mask, get(s, mo.value));
    if (mo.mask && !get(s, mo.value)) ch |= set(s, mo.value, get(s, mo.mask));
  }
  return ch;
}

/* ---- conversions ---- */

/* the layout op needs operand i in, or NULL when it takes whatever the operand has */
static const kn_layout *wanted(pass *s, kn_op *op, int i) {
  kn_value *v = op->opnd[i];
  if (!is_tile(v)) return NULL;
  const kn_layout *rl = op->nres == 1 && is_tile(op->res[0]) ? get(s, op->res[0]) : NULL;
  switch (op->opc) {
  case KN_OP_DOT:
    if (i == 2) return rl;
    return intern(s, kn_layout_dot(s->shape, s->p->warps, i));
  case KN_OP_BROADCAST:
    return rl;
  case KN_OP_EXPAND_DIMS:
    return rl ? slice_of(s, rl, (int)op->iattr[0]) : NULL;
  case KN_OP_LOAD:
  case KN_OP_GATHER:
    return rl;   /* the mask; a gather's offsets */
  case KN_OP_STORE: {
    kn_mem_operands mo;
    kn_mem_operands_get(op, &mo);
    return v == mo.mask && v != mo.value ? get(s, mo.value) : NULL;
  }
  case KN_OP_FOR:
    return i >= 3 ? get(s, op->region[0]->args[i - 3 + 1]) : NULL;
  case KN_OP_YIELD: {
    kn_op *owner = op->parent->parent_op;
    if (owner && owner->opc == KN_OP_FOR) return get(s, op->parent->args[i + 1]);
    if (owner && owner->opc == KN_OP_IF) return get(s, owner->res[i]);
    return NULL;
  }
  default:
    if (elementwise(op->opc) && rl && v->type.rank == op->res[0]->type.rank) return rl;
    return NULL;
  }
}

/* is the value defined outside the innermost loop around `user`? */
static bool loop_invariant(const kn_value *v, const kn_op *user) {
  const kn_block *b = user->parent;
  while (b && !(b->parent_op && b->parent_op->opc == KN_OP_FOR)) b = b->parent_op ? b->parent_op->parent : NULL;
  if (!b) return false;
  const kn_block *vb = v->def ? v->def->parent : v->owner;
  for (; vb; vb = vb->parent_op ? vb->parent_op->parent : NULL)
    if (vb == b) return false;
  return true;
}

/* an unswizzled, unpadded shared layout of a tile (a rank-1 one as n x 1): inner = 1 row-major,
 * 0 column-major */
static kn_layout plain_shared(const kn_layout_plan *p, int inner) {
  return (kn_layout){.kind = KN_LAYOUT_SHARED, .rank = 2, .warps = (uint8_t)p->warps,
                     .lanes = (uint8_t)p->arch->lanes, .order = {(uint8_t)inner, (uint8_t)(1 - inner)},
                     .vec = 1, .per_phase = 1, .max_phase = 1};
}

/* a zeroed conversion at the end of the plan's list */
static kn_conversion *new_conversion(pass *s) {
  kn_layout_plan *p = s->p;
  if (p->nconv == s->convcap) {
    s->convcap = s->convcap ? 2 * s->convcap : 32;
    p->conv = realloc(p->conv, sizeof *p->conv * (size_t)s->convcap);
    KN_ASSERT(p->conv);
  }
  kn_conversion *c = &p->conv[p->nconv++];
  memset(c, 0, sizeof *c);
  return c;
}

static int add_conversion(pass *s, kn_op *op, int i, const kn_layout *want) {
  kn_layout_plan *p = s->p;
  kn_value *v = op->opnd[i];
  const kn_layout *have = get(s, v);
  if (kn_layout_eq(have, want)) return 0;
  int shape[2] = {v->type.shape[0], v->type.rank == 2 ? v->type.shape[1] : 1};
  kn_lmap src, dst;
  if (kn_layout_eval(have, v->type.rank, shape, &src, s->d)) return -1;
  if (kn_layout_eval(want, v->type.rank, shape, &dst, s->d)) {
    kn_lmap_free(&src);
    return -1;
  }
  /* a constant or a splat is rebuilt in any layout: free */
  bool free_ = (v->def && (v->def->opc == KN_OP_CONST || v->def->opc == KN_OP_SPLAT)) ||
               kn_lmap_convert_free(&src, &dst, NULL);
  kn_lmap_free(&src);
  kn_lmap_free(&dst);
  kn_conversion *c = new_conversion(s);
  c->user = op;
  c->opnd = i;
  c->value = v;
  c->dst = want;
  c->buffer = -1;
  if (free_) {
    c->kind = KN_CONV_FREE;
    return 0;
  }
  if (v->type.rank != 2) {  /* a rank-1 tile: read at once, in its order */
    c->kind = KN_CONV_EAGER;
    c->shared = plain_shared(p, 1);
    return 0;
  }
  c->kind = op->opc == KN_OP_DOT && i < 2 && !loop_invariant(v, op) ? KN_CONV_LAZY : KN_CONV_EAGER;
  /* an eager conversion is made once, where its value is defined: another for the same
   * operand of a dot of the same block reads its registers (Q against each K chunk of the
   * decode pages loop; no other kernel has two such dots) */
  for (int j = 0; j < p->nconv - 1 && c->kind == KN_CONV_EAGER && op->opc == KN_OP_DOT; j++) {
    const kn_conversion *o = &p->conv[j];
    if (o->value == v && o->kind == KN_CONV_EAGER && !o->same && o->user->opc == KN_OP_DOT &&
        o->opnd == i && o->user->parent == op->parent && kn_layout_eq(o->dst, want))
      c->same = j + 1;
  }
  c->shared = kn_layout_shared_for(want, shape, elem_bytes(v));
  if (c->kind == KN_CONV_EAGER && c->shared.pad) {
    /* read once, all at once: no hoisted addresses to fear, so the XOR swizzle (no padding:
     * a 128x128 f16 Q stays at 32 KiB, and two workgroups still fit a CU's LDS) */
    kn_layout sw = kn_layout_shared_swizzled(c->shared.order[0], shape, c->shared.vec, elem_bytes(v));
    sw.warps = c->shared.warps;
    sw.lanes = c->shared.lanes;
    c->shared = sw;
  }
  return 0;
}

/* reshape, transpose: the operand goes through LDS in the element order the op keeps, a plain
 * unswizzled layout (row-major; a transpose stores column-major and reads row-major) */
static int add_permute(pass *s, kn_op *op) {
  kn_layout_plan *p = s->p;
  if (!is_tile(op->opnd[0])) return 0;
  kn_conversion *c = new_conversion(s);
  int inner = op->opc == KN_OP_TRANSPOSE ? 0 : 1;
  *c = (kn_conversion){.user = op, .opnd = 0, .value = op->opnd[0], .dst = get(s, op->res[0]),
                       .kind = KN_CONV_PERMUTE, .buffer = -1, .shared = plain_shared(p, inner)};
  return 0;
}

/* ---- NVPTX: ldmatrix reads, cp.async staging ---- */

/* Does ldmatrix deliver exactly the fragments of map m (a dot operand, k along kdim) from a
 * shared tile whose contiguous dim is inner?  ldmatrix reads 8x8 matrices of 16-bit elements,
 * each matrix row 16 contiguous bytes; lane t receives row t / 4, elements 2 (t % 4) + {0, 1}
 * (or, .trans, rows 2 (t % 4) + {0, 1} of element t / 4).  Every register pair (2e, 2e + 1) of
 * the map must be one such matrix: lane 0 of warp 0 at an origin that is a multiple of 8 in
 * both dims, lane t at the offsets above, the pair consecutive along k.  The mma.sync m16n8k16
 * tables pass (four pairs for A, two for B); this check is what keeps a different table from
 * silently reading the wrong elements. */
static bool ldsm_fits(const kn_lmap *m, int kdim, int inner) {
  int srow = 1 - inner;
  bool trans = inner != kdim;
  if (m->lanes != 32 || m->nregs % 2 || m->shape[0] % 8 || m->shape[1] % 8) return false;
  for (int b = 0; b < m->warp_bits; b++)
    if (m->warp[b][0] % 8 || m->warp[b][1] % 8) return false;
  for (int r = 0; r < m->nregs; r += 2) {
    int o[2];
    kn_lmap_coord(m, 0, 0, r, o);
    if (o[0] % 8 || o[1] % 8) return false;
    for (int l = 0; l < 32; l++) {
      int c0[2], c1[2];
      kn_lmap_coord(m, 0, l, r, c0);
      kn_lmap_coord(m, 0, l, r + 1, c1);
      int er = trans ? 2 * (l % 4) : l / 4, ei = trans ? l / 4 : 2 * (l % 4);
      if (c0[srow] - o[srow] != er || c0[inner] - o[inner] != ei) return false;
      if (c1[kdim] != c0[kdim] + 1 || c1[1 - kdim] != c0[1 - kdim]) return false;
    }
  }
  return true;
}

/* the `for` whose body directly holds op, or NULL */
static kn_op *loop_of(const kn_op *op) {
  kn_op *f = op->parent ? op->parent->parent_op : NULL;
  return f && f->opc == KN_OP_FOR ? f : NULL;
}

static bool defined_in(const kn_value *v, const kn_block *b) {
  for (const kn_block *vb = v->def ? v->def->parent : v->owner; vb;
       vb = vb->parent_op ? vb->parent_op->parent : NULL)
    if (vb == b) return true;
  return false;
}

/* can the scalar v be recomputed for another iteration of the loop with body `body` (from the
 * induction variable and values defined outside, through scalar ops of the body itself:
 * arithmetic, compares, selects, pointer offsets and scalar loads)?  A scalar load is read again
 * one iteration early (lower_gpu.c guards the prefetch by the next iteration's existence), which
 * is what lets a paged kernel prefetch a block whose page comes from the block table. */
static bool remat_ok(const kn_layout_plan *p, const kn_value *v, const kn_block *body, int limit,
                     int depth) {
  if (v == body->args[0] || !defined_in(v, body)) return true;
  for (int i = 1; i < body->nargs; i++)
    if (v == body->args[i]) {
      /* a carried scalar: the next iteration's is what this one yields, if that is known
       * before the prefetch at position limit (a value the template computes a block early,
       * as the paged decode kernel's next page) */
      const kn_value *y = body->last && body->last->opc == KN_OP_YIELD && body->last->nopnd >= i
                              ? body->last->opnd[i - 1] : NULL;
      return y && !is_tile(y) && (!defined_in(y, body) || p->pos[y->id] < limit);
    }
  const kn_op *d = v->def;
  if (depth > 24 || is_tile(v) || !d || d->parent != body || d->nres != 1) return false;
  switch (d->opc) {
  KN_CASES_BINARY
  KN_CASES_UNARY
  case KN_OP_CAST: case KN_OP_MULTIPLE_OF: case KN_OP_MAX_CONTIGUOUS: case KN_OP_CMP:
  case KN_OP_SELECT: case KN_OP_PTRADD: case KN_OP_CONST: case KN_OP_LOAD:
    break;
  default: return false;
  }
  for (int i = 0; i < d->nopnd; i++)
    if (!remat_ok(p, d->opnd[i], body, limit, depth + 1)) return false;
  return true;
}

static int uses_of(pass *s, const kn_value *v) {
  int n = 0;
  for (int i = 0; i < s->nops; i++)
    for (int j = 0; j < s->ops[i]->nopnd; j++) n += s->ops[i]->opnd[j] == v;
  return n;
}

/* AMDGPU: the layout of off32 load ld whose only reader is a dot's B operand, B's rows (k) not
 * its contiguous dim (the forward's V block).  The dot reads B from LDS k-contiguous, kwidth
 * elements per lane; the plain blocked layout gives each lane one row of each group of 8 columns,
 * so staging wrote every element alone (ds_write_b16).  Each lane holding kwidth consecutive
 * rows of its columns instead (spt[0] = kwidth, where the rows hold that many), stage_store
 * writes kwidth rows of one column at once (gfx942 D128: 8 ds_write_b64 per lane for 32
 * ds_write_b16).  NULL: the plain layout. */
static const kn_layout *rows_for_b(pass *s, const kn_op *ld, const kn_layout *bl) {
  const kn_value *v = ld->res[0];
  if (s->p->arch->isa != KN_ISA_AMDGPU || !(ld->iattr[1] & KN_MEM_OFF32) || v->type.rank != 2 ||
      bl->kind != KN_LAYOUT_BLOCKED || bl->order[0] != 1 || !s->shape || uses_of(s, v) != 1)
    return NULL;
  bool b_only = false;
  for (int i = 0; i < s->nops; i++)
    b_only |= s->ops[i]->opc == KN_OP_DOT && s->ops[i]->opnd[1] == v;
  kn_layout l = *bl;
  /* whole kwidth runs only: at D 64 the rows allow 2 (8 ds_write_b32 for 16 ds_write_b16),
   * 587.1 llvm-mca cycles for 583.1 */
  int sp = kn_layout_dot(s->shape, s->p->warps, 1).kwidth;
  if (!b_only || sp < 2 || v->type.shape[0] % (sp * l.tpw[0] * l.wpp[0])) return NULL;
  l.spt[0] = (uint8_t)sp;
  return intern(s, l);
}

/* can conversion c (a lazy ldmatrix operand) be filled by cp.async straight from a row gather
 * (gather.c): one address per 16-byte vector along the shared layout's contiguous dim, a mask
 * that is the same across each vector (a dead vector is zero-filled), no `other` but 0? */
static bool async_gather_ok(pass *s, const kn_conversion *c) {
  const kn_op *ga = c->value->def;
  kn_gather_operands go;
  kn_gather_operands_get(ga, &go);
  if (go.other && !(go.other->def && go.other->def->opc == KN_OP_CONST &&
                    go.other->def->fattr == 0.0 && go.other->def->iattr[0] == 0))
    return false;
  int ax = kn_gpu_gather_axis(ga);
  if (ax < 0 || ax != c->shared.order[0] || kn_gpu_gather_vec(ga, ax, 8) != 8) return false;
  const kn_layout *bl = get(s, c->value);
  return bl && bl->kind == KN_LAYOUT_BLOCKED && bl->order[0] == ax && bl->spt[ax] == 8;
}

/* can conversion c (a lazy ldmatrix operand) be filled by cp.async straight from its load (or
 * row gather)? */
static bool async_ok(pass *s, const kn_conversion *c) {
  const kn_value *v = c->value;
  const kn_op *ld = v->def;
  if (!ld || (ld->opc != KN_OP_LOAD && ld->opc != KN_OP_GATHER) ||
      ld->parent != c->user->parent || !loop_of(ld))
    return false;
  if (uses_of(s, v) != 1) return false;
  if (ld->opc == KN_OP_GATHER) return async_gather_ok(s, c);
  kn_mem_operands mo;
  kn_mem_operands_get(ld, &mo);
  if (mo.mask || mo.rank != 2) return false;
  int contig = -1;
  for (int d = 1; d >= 0 && contig < 0; d--) {
    const kn_value *st = mo.stride[d];
    if (st->def && st->def->opc == KN_OP_CONST && st->def->iattr[0] == 1) contig = d;
  }
  if (contig < 0 || contig != c->shared.order[0]) return false;
  /* whole 16-byte chunks: the offset and bound along the contiguous dim multiples of 8 */
  if (!kn_gpu_vec_aligned(&mo, contig, 8)) return false;
  const kn_layout *bl = get(s, v);
  if (!bl || bl->kind != KN_LAYOUT_BLOCKED || bl->order[0] != contig || bl->spt[contig] != 8)
    return false;
  return true;
}

/* all scalar operands of c's load available before position pos (or outside the loop)? */
static bool operands_before(pass *s, const kn_conversion *c, const kn_block *body, int pos) {
  const kn_op *ld = c->value->def;
  for (int i = 0; i < ld->nopnd; i++) {
    const kn_value *o = ld->opnd[i];
    if (defined_in(o, body) && s->p->pos[o->id] >= pos) return false;
  }
  return true;
}

/* can c's copy be issued for the next iteration at position limit (the loop's last streamed
 * dot)? */
static bool head_ok(const kn_layout_plan *p, const kn_conversion *c, const kn_block *body,
                    int limit) {
  const kn_op *ld = c->value->def;
  for (int i = 0; i < ld->nopnd; i++)
    if (!remat_ok(p, ld->opnd[i], body, limit, 0)) return false;
  return true;
}

static int user_pos(const kn_layout_plan *p, const kn_conversion *c) {
  return p->pos[c->user->res[0]->id];
}

/* the registers per thread of c's operand in its dot layout, when c is a loop-invariant dot
 * operand (eager, defined outside the loop of its dot), else 0 */
static int invariant_regs(pass *s, const kn_conversion *c) {
  kn_op *loop = loop_of(c->user);
  if (c->kind != KN_CONV_EAGER || c->user->opc != KN_OP_DOT || c->opnd > 1 || !loop ||
      !c->value->def || defined_in(c->value, loop->region[0]) ||
      kn_scalar_size(c->value->type.elem) != 2)
    return 0;
  int shape[2] = {c->value->type.shape[0], c->value->type.shape[1]};
  kn_lmap m;
  kn_diag d;
  if (kn_layout_eval(c->dst, 2, shape, &m, &d)) return 0;
  int r = m.nregs / 2;
  kn_lmap_free(&m);
  (void)s;
  return r;
}

/* the registers per thread that the loop-invariant dot operands of c's loop take together
 * (Q in the forward; K and V in the backward's dK/dV loop, Q and dO in its dQ loop) */
static int invariant_regs_of_loop(pass *s, const kn_conversion *c) {
  int n = 0;
  for (int i = 0; i < s->p->nconv; i++)
    if (loop_of(s->p->conv[i].user) == loop_of(c->user) && !s->p->conv[i].same)
      n += invariant_regs(s, &s->p->conv[i]);
  return n;
}

/* NVPTX: with wgmma (KN_MMA_NV_WG64) every B operand goes to shared memory in wgmma's canonical
 * swizzled layout and is read through a descriptor (c->desc; streamed by cp.async like the
 * ldmatrix operands below), and so does a staged-once A operand that is K-major (its load's
 * contiguous dim is k: K and V of the dK/dV kernel, Q and dO of the dQ kernel), so that A
 * takes no registers either; otherwise decides which dot operands are read with ldmatrix from
 * an XOR-swizzled layout (16-byte
 * chunks, chunk ^ row phase: the 8 rows of one 8x8 matrix hit 8 distinct 16-byte bank groups),
 * which loop-invariant operands are staged once and read from shared memory in the loop instead
 * of held in registers (when the loop's invariant operands together would take more than 32
 * registers per thread: Q at D 128 with 4 warps in the forward, where Q in registers, the
 * accumulator and S together exceed 255; K and V at D 128 in the backward's dK/dV loop, 32
 * each beside the two f32 accumulators), and which operands are filled by cp.async and how
 * they are scheduled (gpu.h, kn_stage_kind). */
static void nv_plan_staging(pass *s) {
  kn_layout_plan *p = s->p;
  if (p->arch->isa != KN_ISA_NVPTX || !s->shape ||
      (s->shape->id != KN_MMA_NV_16X8X16 && s->shape->id != KN_MMA_NV_WG64))
    return;
  bool wgmma = s->shape->id == KN_MMA_NV_WG64;
  /* first which invariant operands are staged once, before any conversion changes kind */
  bool *once_of = calloc((size_t)p->nconv + 1, sizeof *once_of);
  KN_ASSERT(once_of);
  /* with wgmma every loop-invariant A operand is staged once and read from shared memory: held
   * in registers (Q in the forward; K, V, Q, dO in the backward), ptxas 13.0 gave it the
   * physical registers of the loop's other wgmma A operand (P, dS) whenever the two wgmmas have
   * the same shape (block_n equal to the padded head dim), and every KV block after the first
   * computed with a clobbered Q (H200, bench/RESULTS.md; tools/hgmma_regs.py shows it in the
   * SASS).  KILN_WGMMA_A_REGS=1 restores the register lowering to compare (kn_wgmma_a_regs) */
  bool a_smem = wgmma && !kn_wgmma_a_regs();
  for (int i = 0; i < p->nconv; i++)
    once_of[i] = invariant_regs(s, &p->conv[i]) &&
                 ((a_smem && p->conv[i].opnd == 0) || invariant_regs_of_loop(s, &p->conv[i]) > 32);
  for (int i = 0; i < p->nconv; i++) {
    kn_conversion *c = &p->conv[i];
    if (c->kind == KN_CONV_FREE || c->user->opc != KN_OP_DOT || c->opnd > 1) continue;
    if (kn_scalar_size(c->value->type.elem) != 2) continue;
    if (c->same) {
      /* registers shared while the first stays in registers; staged once, each its own */
      if (p->conv[c->same - 1].kind == KN_CONV_EAGER) continue;
      c->same = 0;
    }
    kn_op *loop = loop_of(c->user);
    int shape[2] = {c->value->type.shape[0], c->value->type.shape[1]};
    if (wgmma && c->opnd == 0 && once_of[i]) {
      /* wgmma's A staged once through a descriptor: K-major (k contiguous in the load: K, V,
       * Q, dO) or M-major (m contiguous, read with imm-trans-a: K^T of the backward's atomic
       * dQ^T = K^T dS^T), in the canonical layout whose rows run along the load's contiguous dim */
      const kn_layout *have = get(s, c->value);
      if (have && have->kind == KN_LAYOUT_BLOCKED && have->rank == 2) {
        kn_layout sh = kn_layout_shared_wgmma(have->order[0], shape, 2);
        sh.warps = (uint8_t)p->warps;
        c->shared = sh;
        c->desc = true;
        c->kind = KN_CONV_LAZY;
        c->stage = KN_STAGE_ONCE;
        c->loop = loop;
        continue;
      }
    }
    if (wgmma && c->opnd == 1) {
      /* wgmma's B: always from shared memory, in the canonical layout whose rows run along the
       * load's contiguous dim (K^T: K-major; V: N-major, read with the transpose flag), staged
       * at the dot or streamed by cp.async below */
      const kn_layout *have = get(s, c->value);
      int inner = have && have->kind == KN_LAYOUT_BLOCKED && have->rank == 2 ? have->order[0] : 0;
      kn_layout sh = kn_layout_shared_wgmma(inner, shape, 2);
      sh.warps = (uint8_t)p->warps;
      c->shared = sh;
      c->desc = true;
      c->kind = KN_CONV_LAZY;
      continue;
    }
    kn_lmap m;
    kn_diag d;
    if (kn_layout_eval(c->dst, 2, shape, &m, &d)) continue;
    bool once = false;
    if (c->kind == KN_CONV_EAGER) {
      if (!once_of[i]) {  /* a loop-invariant operand kept in registers */
        kn_lmap_free(&m);
        continue;
      }
      once = true;
    }
    int kdim = c->opnd == 0 ? 1 : 0, inner = kdim;
    const kn_layout *have = get(s, c->value);
    if (have && have->kind == KN_LAYOUT_BLOCKED && have->rank == 2) inner = have->order[0];
    bool fits = shape[inner] % 8 == 0 && ldsm_fits(&m, kdim, inner);
    kn_lmap_free(&m);
    if (!fits) continue;
    kn_layout sh = kn_layout_shared_swizzled(inner, shape, 8, 2);
    sh.warps = c->shared.warps ? c->shared.warps : (uint8_t)p->warps;
    sh.lanes = 32;
    c->shared = sh;
    c->ldsm = true;
    if (once) {
      c->kind = KN_CONV_LAZY;
      c->stage = KN_STAGE_ONCE;
      c->loop = loop;
    }
  }
  /* cp.async: per loop, the streamable operands in the order of their dots (one per dot) */
  for (int li = 0; li < s->nops; li++) {
    kn_op *loop = s->ops[li];
    if (loop->opc != KN_OP_FOR) continue;
    kn_block *body = loop->region[0];
    int idx[16], n = 0;
    for (int i = 0; i < p->nconv && n < 16; i++) {
      kn_conversion *c = &p->conv[i];
      if (!(c->ldsm || c->desc) || c->kind != KN_CONV_LAZY || c->stage != KN_STAGE_AT_DOT ||
          loop_of(c->user) != loop || !async_ok(s, c))
        continue;
      bool dup = false;  /* one streamed operand per dot */
      for (int j = 0; j < n; j++) dup |= p->conv[idx[j]].user == c->user;
      if (!dup) idx[n++] = i;
    }
    for (int i = 1; i < n; i++)  /* by the position of their dots */
      for (int j = i; j > 0 && user_pos(p, &p->conv[idx[j]]) < user_pos(p, &p->conv[idx[j - 1]]); j--) {
        int t = idx[j];
        idx[j] = idx[j - 1];
        idx[j - 1] = t;
      }
    /* the heads: the first dot's operand, and those of the dots after it that read the same
     * other operand (the K chunks of a block against Q), while one operand is left to be
     * early.  The others issued at the first dot: their addresses known by then; the heads one
     * iteration ahead where their addresses can be recomputed for the next (head_ok), else one
     * head at its own dot (LEAD) */
    if (n == 0) continue;
    int nh = 1;
    while (nh < n - 1 && p->conv[idx[nh]].opnd == p->conv[idx[0]].opnd &&
           p->conv[idx[nh]].user->opnd[1 - p->conv[idx[0]].opnd] ==
               p->conv[idx[0]].user->opnd[1 - p->conv[idx[0]].opnd])
      nh++;
    bool early, pipelined;
    for (;;) {
      early = n > nh;
      for (int j = nh; j < n && early; j++)
        early = operands_before(s, &p->conv[idx[j]], body, user_pos(p, &p->conv[idx[0]]));
      pipelined = early;
      for (int j = 0; j < nh && pipelined; j++)
        pipelined = head_ok(p, &p->conv[idx[j]], body, user_pos(p, &p->conv[idx[n - 1]]));
      if (pipelined || nh == 1) break;
      nh = 1;
    }
    for (int j = 0; j < n; j++) {
      kn_conversion *c = &p->conv[idx[j]];
      c->loop = loop;
      c->stage = !early ? KN_STAGE_ASYNC_AT_DOT
                 : j >= nh ? KN_STAGE_ASYNC_EARLY
                 : pipelined ? KN_STAGE_ASYNC_HEAD : KN_STAGE_ASYNC_LEAD;
      c->issue_head = pipelined && j == n - 1;
      c->follow = nh > 1 && j != 0 && j != nh;
    }
  }
  free(once_of);
}

/* ---- driver ---- */

int kn_assign_layouts(kn_func *k, const kn_arch *arch, kn_layout_plan *p, kn_diag *d) {
  memset(p, 0, sizeof *p);
  p->arena = kn_arena_new();
  p->k = k;
  p->arch = arch;
  int64_t warps = 4;
  kn_func_get_meta(k, "WARPS", &warps);
  if (warps < 1 || warps > 16 || (warps & (warps - 1)))
    return kn_error(d, k->module, k->loc, "WARPS must be a power of two in 1..16");
  p->warps = (int)warps;
  p->nvalues = kn_func_number(k);
  p->lay = kn_arena_alloc(p->arena, sizeof(*p->lay) * (size_t)(p->nvalues + 1));
  p->pos = kn_arena_alloc(p->arena, sizeof(int) * (size_t)(p->nvalues + 1));

  pass s = {.p = p, .d = d};
  collect(&s, k->body);
  int rc = -1;
  if (choose_mma(&s)) goto out;

  /* anchors */
  for (int i = 0; i < s.nops; i++) {
    kn_op *op = s.ops[i];
    if (op->opc == KN_OP_DOT) p->lay[op->res[0]->id] = s.mma;
    if (op->opc == KN_OP_LOAD && is_tile(op->res[0])) {
      const kn_layout *bl = blocked_for(&s, op->res[0], contiguous_dim(op)), *rb = rows_for_b(&s, op, bl);
      p->lay[op->res[0]->id] = rb ? rb : bl;
    }
    int gax = kn_gpu_gather_axis(op);  /* a row gather is laid out as a load (gather.c) */
    if (gax >= 0) p->lay[op->res[0]->id] = blocked_for(&s, op->res[0], gax);
  }
  for (int iter = 0; iter < 64; iter++) {
    bool ch = false;
    for (int i = 0; i < s.nops; i++) ch |= forward(&s, s.ops[i]);
    for (int i = s.nops - 1; i >= 0; i--) ch |= backward(&s, s.ops[i]);
    if (!ch) break;
  }
  /* what nothing reached: blocked along the last dim */
  for (int i = 0; i < s.nops; i++) {
    kn_op *op = s.ops[i];
    for (int r = 0; r < op->nres; r++)
      if (is_tile(op->res[r]) && !get(&s, op->res[r]))
        p->lay[op->res[r]->id] = blocked_for(&s, op->res[r], op->res[r]->type.rank - 1);
    if (op->opc == KN_OP_FOR)
      for (int a = 1; a < op->region[0]->nargs; a++) {
        kn_value *v = op->region[0]->args[a];
        if (is_tile(v) && !get(&s, v)) p->lay[v->id] = blocked_for(&s, v, v->type.rank - 1);
      }
  }
  /* every tile layout must evaluate on its shape */
  for (int i = 0; i < s.nops; i++) {
    kn_op *op = s.ops[i];
    for (int r = 0; r < op->nres; r++) {
      kn_value *v = op->res[r];
      if (!is_tile(v)) continue;
      kn_lmap m;
      int shape[2] = {v->type.shape[0], v->type.rank == 2 ? v->type.shape[1] : 1};
      if (kn_layout_eval(get(&s, v), v->type.rank, shape, &m, d)) {
        d->loc = op->loc;
        goto out;
      }
      kn_lmap_free(&m);
    }
  }
  for (int i = 0; i < s.nops; i++) {
    kn_op *op = s.ops[i];
    if ((op->opc == KN_OP_RESHAPE || op->opc == KN_OP_TRANSPOSE) && add_permute(&s, op)) goto out;
    for (int j = 0; j < op->nopnd; j++) {
      const kn_layout *w = wanted(&s, op, j);
      if (w && add_conversion(&s, op, j, w)) goto out;
    }
  }
  nv_plan_staging(&s);
  rc = 0;
out:
  free(s.ops);
  return rc;
}

void kn_layout_plan_free(kn_layout_plan *p) {
  if (!p) return;
  free(p->conv);
  free(p->buf);
  if (p->arena) kn_arena_free(p->arena);
  memset(p, 0, sizeof *p);
}

const kn_conversion *kn_plan_conversion(const kn_layout_plan *p, const kn_op *user, int opnd) {
  for (int i = 0; i < p->nconv; i++)
    if (p->conv[i].user == user && p->conv[i].opnd == opnd) return &p->conv[i];
  return NULL;
}
