/* lower_gpu.c — a laid-out tile IR kernel -> LLVM IR for amdgcn-amd-amdhsa or nvptx64.
 *
 * This file is the ISA-independent part; the leaf operations of each ISA are a table in a file
 * of its own (lower_amdgpu.c, lower_nvptx.c, sharing lower_gpu_internal.h).  NVPTX's ldmatrix
 * reads and cp.async staging stay here: they are decisions of the layout plan (gpu.h).
 *
 * Values.  A scalar IR value is one LLVM value (uniform across the workgroup; LLVM's uniformity
 * analysis puts it in SGPRs).  A tile value is, per thread, the list of registers its layout's
 * map names (kn_lmap): one LLVM scalar per register, in map order; LLVM's SROA and the AMDGPU
 * backend pack them into VGPRs / AGPRs.  A thread computes the base coordinate of each map once,
 * from its lane (workitem id & 63) and warp (workitem id >> 6, made wave-uniform with
 * readfirstlane) and the map's per-bit deltas; register r is that base plus the constant r adds.
 *
 * Leaf operations are LLVM intrinsics only, so the emulated target can replace each one by a
 * call into its runtime (docs/gpu.md): llvm.amdgcn.workitem.id.x, workgroup.id.{x,y,z},
 * implicitarg.ptr (the grid size for num_programs), readfirstlane, s.barrier (between
 * workgroup-scope fences), ds.bpermute, mfma.*; LDS is one
 * addrspace(3) global (@kn_lds) indexed by the plan's offsets; global memory is addrspace(1).
 * No inline asm on AMDGPU.  NVPTX adds ldmatrix fragment reads and cp.async staging (inline
 * PTX, see "NVPTX: ldmatrix fragment reads and cp.async staging" and docs/gpu.md), and on sm_90a
 * wgmma.mma_async when the plan's instruction is wgmma ("NVPTX: wgmma").
 *
 * Operations.  Every op of ops.def is lowered (each switch over opcodes names them all; the
 * families come from op_cases.h), on the element types the interpreter has, except arithmetic
 * on fp8 values (an error: fp8 tiles are loaded, stored, selected, fed to dot and cast to a
 * wider float, exactly: by the leaf table's fp8_to_f16 where the target has an instruction,
 * else in integer ops, fp8_to_f32).
 *  - elementwise ops, compare, select, cast: per register.  Float functions are computed in
 *    f32 as the op's math entry in ops.def says (llvm.<name>.f32, which a target may replace by
 *    its own leaf, NVPTX's .approx units; or kiln's expansion: rsqrt, tanh from exp2) and
 *    rounded once to f16 / bf16.  Float rem is an exact fmod (kn.fmod.f32, long division of the
 *    significands), not the backends' x - trunc(x / y) * y.  i1 arithmetic is on 0 / 1 as in the
 *    interpreter; an integer to bf16 rounds once.  Integer division guards a zero or -1 divisor
 *    (no trap, no poison; the result is then unspecified, as the host target's status bit is
 *    not available here).
 *  - load / store: each group of registers the map holds contiguously along the dimension whose
 *    stride is the constant 1 becomes one vector access (16 bytes where the map allows, and only
 *    when the offset and the bound along that dim are known multiples of the vector: constants or
 *    multiple_of hints, and no other dim has a constant stride that is not); otherwise scalar
 *    accesses.  Dead elements (bounds, mask) are not touched: each access is under a branch,
 *    which the backend turns into exec masking.  A load with the off32 clause, on a target
 *    whose leaves have buffer loads (AMDGPU), is instead one buffer resource over its base and
 *    per register group an i32 byte offset, moved past the resource's end when the group is
 *    dead (the hardware reads 0 there): no branch.  A scalar load or store is one access by every
 *    thread, at the same address.  A store with atomic_add is one f32 atomic per element (the
 *    leaf's atomic_fadd), from the one owner of each element ("atomic_add stores" below); a
 *    scalar one is thread 0's.
 *  - gather: per register of the offsets' layout, one scalar load at base + offset, under the
 *    register's mask (a lane's own address: no vectors).
 *  - dot: the accumulator is the transposed mma layout; for each (m, n) instruction tile of the
 *    warp and each k step one MFMA, given B's fragment as its A and A's as its B.  An operand
 *    staged lazily is read from LDS fragment by fragment (one 8-byte ds_read per fragment when
 *    the swizzle keeps the k-width contiguous).
 *  - reduce: in-thread combine in register order, then one ds_bpermute butterfly per lane bit of
 *    the plan (kn_reduce_plan; a rank-1 tile reduces to a scalar the same way); values narrower
 *    than 32 bits cross lanes zero-extended, i64 as two halves.
 *  - for: phis for the induction variable and every register of every carried value; a loop
 *    whose first iteration fails its test (or whose step is not positive) runs no iteration.
 *    if (a uniform condition): a branch and a phi per register of each result.
 *  - reshape, transpose: through LDS (a permute conversion, gpu.h).
 *  - staged conversions: barrier, every thread holding the first copy of its elements stores
 *    its source registers at the swizzled offsets, barrier; then an eager conversion loads its
 *    destination registers at once, a lazy one leaves the reads to the dot.  NVPTX: see kn_stage_kind (gpu.h) for operands copied by
 *    cp.async or staged once before their loop.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "lower_gpu_internal.h"
#include "pipeline.h"
#include "op_cases.h"
#include "op_cases.h"

static int fail(G *g, const kn_op *op, const char *fmt, const char *what) {
  if (!g->failed) {
    char msg[300];
    snprintf(msg, sizeof msg, fmt, what);
    kn_error(g->d, g->p->k->module, op ? op->loc : g->p->k->loc, "%s", msg);
  }
  g->failed = 1;
  return -1;
}

/* "not yet supported on <target>: <what>" */
static int unsupported(G *g, const kn_op *op, const char *what) {
  if (!g->failed)
    kn_error(g->d, g->p->k->module, op ? op->loc : g->p->k->loc, "not yet supported on %s: %s",
             g->ops->name, what);
  g->failed = 1;
  return -1;
}

static int unsupported_op(G *g, const kn_op *op, const char *fmt, const char *name) {
  char what[200];
  snprintf(what, sizeof what, fmt, name);
  return unsupported(g, op, what);
}

/* NVPTX: coordinates and shared offsets are small and non-negative, and saying so (nuw nsw)
 * lets LLVM split sext(base + constant) into sext(base) + constant, so each fragment read of a
 * padded shared layout is the thread's one 64-bit address plus an immediate offset.  Without
 * it every fragment's address is hoisted out of the KV loop into its own register pair (over a
 * hundred registers at D 128).  AMDGPU keeps its IR as it was (its register figures are pinned
 * by tests/unit/test_amdgpu_attn.c). */
static LLVMValueRef nowrap(G *g, LLVMValueRef v) {
  if (g->ops->nowrap_offsets && LLVMIsAInstruction(v)) {
    LLVMSetNUW(v, 1);
    LLVMSetNSW(v, 1);
  }
  return v;
}

/* ---- thread coordinates ---- */

static const kn_lmap *vmap(G *g, const kn_value *v) {
  if (!g->has_map[v->id]) {
    int shape[2] = {v->type.shape[0], v->type.rank == 2 ? v->type.shape[1] : 1};
    kn_diag d;
    int rc = kn_layout_eval(g->p->lay[v->id], v->type.rank, shape, &g->map[v->id], &d);
    KN_ASSERT(rc == 0);  /* the layout pass evaluated every tile value already */
    g->has_map[v->id] = true;
  }
  return &g->map[v->id];
}

/* the thread's base coordinate of map m (computed once, in the entry block) */
static void base_of(G *g, const kn_lmap *m, LLVMValueRef out[2]) {
  for (int i = 0; i < g->nbases; i++) {
    base_entry *e = &g->bases[i];
    if (!memcmp(e->lane, m->lane, sizeof e->lane) && !memcmp(e->warp, m->warp, sizeof e->warp) &&
        e->shape[0] == m->shape[0] && e->shape[1] == m->shape[1]) {
      out[0] = e->v[0];
      out[1] = e->v[1];
      return;
    }
  }
  if (g->nbases == g->capbases) {
    g->capbases = g->capbases ? 2 * g->capbases : 16;
    g->bases = realloc(g->bases, sizeof *g->bases * (size_t)g->capbases);
    KN_ASSERT(g->bases);
  }
  base_entry *e = &g->bases[g->nbases++];
  memcpy(e->lane, m->lane, sizeof e->lane);
  memcpy(e->warp, m->warp, sizeof e->warp);
  e->shape[0] = m->shape[0];
  e->shape[1] = m->shape[1];
  for (int d = 0; d < 2; d++) {
    LLVMValueRef v = ci32(g, 0);
    for (int b = 0; b < m->lane_bits; b++)
      if (m->lane[b][d]) {
        LLVMValueRef bit = LLVMBuildAnd(g->E, LLVMBuildLShr(g->E, g->lane, ci32(g, b), ""), ci32(g, 1), "");
        v = LLVMBuildAdd(g->E, v, LLVMBuildMul(g->E, bit, ci32(g, m->lane[b][d]), ""), "");
      }
    for (int b = 0; b < m->warp_bits; b++)
      if (m->warp[b][d]) {
        LLVMValueRef bit = LLVMBuildAnd(g->E, LLVMBuildLShr(g->E, g->warp, ci32(g, b), ""), ci32(g, 1), "");
        v = LLVMBuildAdd(g->E, v, LLVMBuildMul(g->E, bit, ci32(g, m->warp[b][d]), ""), "");
      }
    e->v[d] = v;
  }
  out[0] = e->v[0];
  out[1] = e->v[1];
}

/* coordinate along dim d of register r (i32) */
static LLVMValueRef coord(G *g, const kn_lmap *m, int r, int d) {
  LLVMValueRef base[2];
  base_of(g, m, base);
  LLVMValueRef v = nowrap(g, LLVMBuildAdd(g->B, base[d], ci32(g, m->reg[r][d]), ""));
  long long maxc = m->reg[r][d];
  for (int b = 0; b < m->lane_bits; b++) maxc += m->lane[b][d];
  for (int b = 0; b < m->warp_bits; b++) maxc += m->warp[b][d];
  if (maxc >= m->shape[d]) v = LLVMBuildURem(g->B, v, ci32(g, m->shape[d]), "");
  return v;
}

/* ---- barriers and LDS ---- */

static void barrier(G *g) { g->ops->barrier(g); }

/* element offset of (i, j) in shared layout s over shape (the swizzle of kn_shared_offset) */
static LLVMValueRef shared_off(G *g, const kn_layout *s, const int *shape, LLVMValueRef i,
                               LLVMValueRef j) {
  int inner = s->order[0];
  LLVMValueRef ci = inner == 0 ? i : j, co = inner == 0 ? j : i, block = NULL;
  int row = shape[inner] + s->pad;
  if (s->cblock) {  /* column blocks (wgmma's canonical layout) */
    block = LLVMBuildMul(g->B, LLVMBuildUDiv(g->B, ci, ci32(g, s->cblock), ""),
                         ci32(g, (long long)s->cblock * shape[1 - inner]), "");
    ci = LLVMBuildURem(g->B, ci, ci32(g, s->cblock), "");
    row = s->cblock;
  }
  LLVMValueRef phase = LLVMBuildURem(g->B, LLVMBuildUDiv(g->B, co, ci32(g, s->per_phase), ""),
                                     ci32(g, s->max_phase), "");
  LLVMValueRef grp = LLVMBuildXor(g->B, LLVMBuildUDiv(g->B, ci, ci32(g, s->vec), ""), phase, "");
  LLVMValueRef v = nowrap(g, LLVMBuildMul(g->B, co, ci32(g, row), ""));
  if (block) v = LLVMBuildAdd(g->B, v, block, "");
  if (s->max_phase == 1)   /* padded: affine, so LLVM folds each register's constant offset */
    return nowrap(g, LLVMBuildAdd(g->B, v, ci, ""));
  v = LLVMBuildAdd(g->B, v, LLVMBuildMul(g->B, grp, ci32(g, s->vec), ""), "");
  return LLVMBuildAdd(g->B, v, LLVMBuildURem(g->B, ci, ci32(g, s->vec), ""), "");
}

static LLVMValueRef lds_ptr(G *g, const kn_conversion *c, LLVMValueRef elem_off) {
  const kn_lds_buffer *b = &g->p->buf[c->buffer];
  int esz = (int)kn_scalar_size(c->value->type.elem);
  LLVMValueRef byte = nowrap(g, LLVMBuildAdd(g->B, ci32(g, (long long)b->offset),
                                   nowrap(g, LLVMBuildMul(g->B, elem_off, ci32(g, esz), "")), ""));
  return LLVMBuildGEP2(g->B, g->i8, g->lds, &byte, 1, "");
}

static bool exact_map(const kn_lmap *m);

/* The address of register r of map m in conversion c's shared buffer.  NVPTX, padded layouts:
 * the thread's base pointer (its base coordinate's offset, computed once in the entry block)
 * plus a constant byte offset per register, which the backend folds into ld/st.shared [p+imm].
 * Built from coordinates in the loop instead, every fragment's address is loop-invariant, gets
 * hoisted out of the KV loop by LICM and holds a 64-bit register pair for the whole loop (more
 * than a hundred registers at D 128: spills).  Otherwise: the offset from the coordinates. */
static LLVMValueRef shared_reg_ptr(G *g, const kn_conversion *c, const kn_lmap *m, int r,
                                   const int *shape) {
  const kn_layout *s = &c->shared;
  if (!g->ops->nowrap_offsets || s->max_phase != 1 || !exact_map(m))
    return lds_ptr(g, c, shared_off(g, s, shape, coord(g, m, r, 0), coord(g, m, r, 1)));
  int inner = s->order[0];
  long long row = shape[inner] + s->pad;
  int esz = (int)kn_scalar_size(c->value->type.elem);
  LLVMValueRef base[2];
  base_of(g, m, base);
  LLVMValueRef off = LLVMBuildAdd(g->E, LLVMBuildMul(g->E, base[1 - inner], ci32(g, row), ""),
                                  base[inner], "");
  off = LLVMBuildAdd(g->E, ci32(g, (long long)g->p->buf[c->buffer].offset),
                     LLVMBuildMul(g->E, off, ci32(g, esz), ""), "");
  off = LLVMBuildZExt(g->E, off, g->i64, "");
  LLVMValueRef p = LLVMBuildGEP2(g->E, g->i8, g->lds, &off, 1, "");
  LLVMValueRef k = ci64(g, (m->reg[r][1 - inner] * row + m->reg[r][inner]) * esz);
  return LLVMBuildGEP2(g->B, g->i8, p, &k, 1, "");
}

static LLVMTypeRef vec_ty(LLVMTypeRef t, int v) { return v == 1 ? t : LLVMVectorType(t, (unsigned)v); }

/* ---- guarded code: if (cond) { ... } ---- */

typedef struct guard {
  LLVMBasicBlockRef from, body, join;  /* all NULL when there was no condition */
} guard;

/* opens the block run when cond holds (nothing to open when cond is NULL: always run) */
static guard guard_open(G *g, LLVMValueRef cond, const char *name) {
  guard gd = {0};
  if (!cond) return gd;
  gd.from = LLVMGetInsertBlock(g->B);
  gd.body = LLVMAppendBasicBlockInContext(g->C, g->fn, name);
  gd.join = LLVMAppendBasicBlockInContext(g->C, g->fn, "join");
  LLVMBuildCondBr(g->B, cond, gd.body, gd.join);
  LLVMPositionBuilderAtEnd(g->B, gd.body);
  return gd;
}

static void guard_close(G *g, const guard *gd) {
  if (!gd->join) return;
  LLVMBuildBr(g->B, gd->join);
  LLVMPositionBuilderAtEnd(g->B, gd->join);
}

/* after guard_close: v as computed in the guarded block, or `skipped` when it did not run */
static LLVMValueRef guard_value(G *g, const guard *gd, LLVMValueRef v, LLVMValueRef skipped) {
  if (!gd->join) return v;
  LLVMValueRef phi = LLVMBuildPhi(g->B, LLVMTypeOf(v), "");
  LLVMValueRef vals[2] = {v, skipped};
  LLVMBasicBlockRef bbs[2] = {gd->body, gd->from};
  LLVMAddIncoming(phi, vals, bbs, 2);
  return phi;
}

/* is (delta0, delta1) a move that lands on the same element (0, or a whole shape: the map's
 * coordinates are taken modulo the shape)? */
static bool same_element(const kn_lmap *m, const int32_t *delta) {
  return delta[0] % m->shape[0] == 0 && delta[1] % m->shape[1] == 0;
}

/* NULL when every element of map m is held by one thread; else the i1 "this thread holds the
 * first copy of its elements": its lane and warp bits that only make copies are all 0 (so a
 * value laid out with copies in several waves is stored once, not raced on) */
static LLVMValueRef first_copy(G *g, const kn_lmap *m) {
  LLVMValueRef own = NULL;
  for (int k = 0; k < 2; k++) {
    int bits = k ? m->warp_bits : m->lane_bits;
    for (int b = 0; b < bits; b++) {
      if (!same_element(m, k ? m->warp[b] : m->lane[b])) continue;
      LLVMValueRef bit = LLVMBuildAnd(g->B, k ? g->warp : g->lane, ci32(g, 1 << b), "");
      LLVMValueRef zero = LLVMBuildICmp(g->B, LLVMIntEQ, bit, ci32(g, 0), "");
      own = own ? LLVMBuildAnd(g->B, own, zero, "") : zero;
    }
  }
  return own;
}

static LLVMValueRef nv_asm(G *g, LLVMTypeRef ret, const char *text, const char *cons,
                           LLVMValueRef *args, int n);

/* NVPTX, a buffer wgmma reads through a descriptor (c->desc): wgmma reads shared memory through
 * the async proxy, so each thread's ordinary stores and cp.async copies are made visible to it
 * by fence.proxy.async before the barrier that publishes them (PTX ISA, "Async proxy") */
static void proxy_fence(G *g, const kn_conversion *c) {
  if (c->desc) nv_asm(g, g->vd, "fence.proxy.async.shared::cta;", "", NULL, 0);
}

/* the widest v <= maxvec for which map m's registers form groups of v elements consecutive
 * along dim at the same other coordinate, group starts a multiple of v along dim and lane and
 * warp steps multiples of v, wherever the registers lie (grp[k * v + i]: element i of group k);
 * 1 when none (grp: the registers in order) */
static int strided_vec(const kn_lmap *m, int dim, int maxvec, int *grp) {
  for (int v = maxvec; v > 1; v /= 2) {
    bool ok = m->nregs % v == 0;
    for (int b = 0; b < m->lane_bits && ok; b++) ok = m->lane[b][dim] % v == 0;
    for (int b = 0; b < m->warp_bits && ok; b++) ok = m->warp[b][dim] % v == 0;
    int n = 0;
    for (int r = 0; r < m->nregs && ok; r++) {
      if (m->reg[r][dim] % v) continue;
      for (int i = 0; i < v && ok; i++) {
        int h = -1;
        for (int q = 0; q < m->nregs && h < 0; q++)
          if (m->reg[q][dim] == m->reg[r][dim] + i && m->reg[q][1 - dim] == m->reg[r][1 - dim]) h = q;
        ok = h >= 0;
        grp[n++] = h;
      }
    }
    if (ok && n == m->nregs) return v;
  }
  for (int r = 0; r < m->nregs; r++) grp[r] = r;
  return 1;
}

/* barrier; store every register of the value at its swizzled offset (from the threads holding
 * the first copy of each element); barrier.  Groups of registers consecutive along the layout's
 * inner dim are one vector store; on AMDGPU (64 lanes) also when they are not consecutive
 * registers (a lane holding several rows of a k-contiguous dot operand, rows_for_b) */
static void wg_wait_bytes(G *g, const kn_conversion *c);

static void stage_store(G *g, const kn_conversion *c) {
  wg_wait_bytes(g, c);  /* a wgmma in flight may still read the bytes stored here */
  const kn_lmap *m = vmap(g, c->value);
  LLVMValueRef *src = g->tv[c->value->id];
  int shape[2] = {m->shape[0], m->shape[1]};
  LLVMTypeRef et = sty(g, c->value->type.elem);
  int *grp = malloc(sizeof(int) * (size_t)(m->nregs ? m->nregs : 1));
  KN_ASSERT(grp);
  int v = kn_lmap_vec(m, c->shared.order[0], c->shared.vec);
  for (int r = 0; r < m->nregs; r++) grp[r] = r;
  if (m->lanes == 64 && v < c->shared.vec) v = strided_vec(m, c->shared.order[0], c->shared.vec, grp);
  barrier(g);
  guard own = guard_open(g, first_copy(g, m), "stage.own");
  for (int k = 0; k < m->nregs; k += v) {
    int r = grp[k];
    LLVMValueRef x;
    if (v == 1) {
      x = src[r];
    } else {
      x = LLVMGetUndef(vec_ty(et, v));
      for (int e = 0; e < v; e++) x = LLVMBuildInsertElement(g->B, x, src[grp[k + e]], ci32(g, e), "");
    }
    LLVMValueRef st = LLVMBuildStore(g->B, x, shared_reg_ptr(g, c, m, r, shape));
    LLVMSetAlignment(st, (unsigned)(v * (int)kn_scalar_size(c->value->type.elem)));
  }
  free(grp);
  guard_close(g, &own);
  proxy_fence(g, c);
  if (!(kn_gpu_test_breaks & KN_GPU_BREAK_STAGING_BARRIER)) barrier(g);
}

/* reads registers [r0, r0 + n) of map m (the conversion's destination) from LDS */
static void lds_read(G *g, const kn_conversion *c, const kn_lmap *m, int r0, int n,
                     LLVMValueRef *out) {
  int shape[2] = {m->shape[0], m->shape[1]};
  LLVMTypeRef et = sty(g, c->value->type.elem);
  int v = kn_lmap_vec(m, c->shared.order[0], c->shared.vec);
  while (v > 1 && (n % v || r0 % v)) v /= 2;
  for (int r = r0; r < r0 + n; r += v) {
    LLVMValueRef ld = LLVMBuildLoad2(g->B, vec_ty(et, v), shared_reg_ptr(g, c, m, r, shape), "");
    LLVMSetAlignment(ld, (unsigned)(v * (int)kn_scalar_size(c->value->type.elem)));
    if (v == 1) out[r - r0] = ld;
    else
      for (int e = 0; e < v; e++) out[r - r0 + e] = LLVMBuildExtractElement(g->B, ld, ci32(g, e), "");
  }
}

static int eval_dst(G *g, const kn_conversion *c, kn_lmap *out) {
  int shape[2] = {c->value->type.shape[0], c->value->type.rank == 2 ? c->value->type.shape[1] : 1};
  return kn_layout_eval(c->dst, c->value->type.rank, shape, out, g->d);
}

/* eager conversions of v: staged right after v is defined */
static void materialize(G *g, const kn_value *v) {
  for (int i = 0; i < g->p->nconv; i++) {
    const kn_conversion *c = &g->p->conv[i];
    if (c->value == v && c->kind == KN_CONV_LAZY && c->stage == KN_STAGE_ONCE) {
      stage_store(g, c);  /* the loop's dots read their fragments from it */
      continue;
    }
    if (c->value != v || c->kind != KN_CONV_EAGER || c->same) continue;
    kn_lmap dm;
    if (eval_dst(g, c, &dm)) {
      g->failed = 1;
      return;
    }
    stage_store(g, c);
    g->conv_regs[i] = calloc((size_t)dm.nregs, sizeof(LLVMValueRef));
    KN_ASSERT(g->conv_regs[i]);
    lds_read(g, c, &dm, 0, dm.nregs, g->conv_regs[i]);
    kn_lmap_free(&dm);
  }
}

/* operand i of op as registers of the layout op needs (NULL for a lazily staged dot operand) */
static LLVMValueRef *opnd_regs(G *g, const kn_op *op, int i) {
  const kn_value *v = op->opnd[i];
  const kn_conversion *c = kn_plan_conversion(g->p, op, i);
  if (!c) return g->tv[v->id];
  int ci = c->same ? c->same - 1 : (int)(c - g->p->conv);
  if (g->conv_regs[ci]) return g->conv_regs[ci];
  if (c->kind == KN_CONV_LAZY) return NULL;
  if (v->def && (v->def->opc == KN_OP_CONST || v->def->opc == KN_OP_SPLAT)) {
    /* every register holds the same scalar: rebuild it in the new layout */
    kn_lmap dm;
    if (eval_dst(g, c, &dm)) {
      g->failed = 1;
      return NULL;
    }
    LLVMValueRef *r = calloc((size_t)(dm.nregs ? dm.nregs : 1), sizeof(LLVMValueRef));
    KN_ASSERT(r);
    for (int k = 0; k < dm.nregs; k++) r[k] = g->tv[v->id][0];
    kn_lmap_free(&dm);
    g->conv_regs[ci] = r;
    return r;
  }
  KN_ASSERT(c->kind == KN_CONV_FREE);
  kn_lmap dm;
  if (eval_dst(g, c, &dm)) {
    g->failed = 1;
    return NULL;
  }
  int *map = malloc(sizeof(int) * (size_t)dm.nregs);
  KN_ASSERT(map);
  bool ok = kn_lmap_convert_free(vmap(g, v), &dm, map);
  KN_ASSERT(ok);
  LLVMValueRef *r = calloc((size_t)dm.nregs, sizeof(LLVMValueRef));
  KN_ASSERT(r);
  for (int k = 0; k < dm.nregs; k++) r[k] = g->tv[v->id][map[k]];
  free(map);
  kn_lmap_free(&dm);
  g->conv_regs[ci] = r;
  return r;
}

static LLVMValueRef *new_regs(G *g, const kn_value *v) {
  const kn_lmap *m = vmap(g, v);
  LLVMValueRef *r = calloc((size_t)(m->nregs ? m->nregs : 1), sizeof(LLVMValueRef));
  KN_ASSERT(r);
  g->tv[v->id] = r;
  return r;
}

/* ---- elementwise ---- */

static bool isf(kn_scalar s) { return kn_scalar_is_float(s); }

static LLVMValueRef cf32(G *g, double v) { return LLVMConstReal(g->f32, v); }

/* the f32 function `fname` of x: the target's leaf where it has one, else llvm.<fname>.f32 */
static LLVMValueRef f32_fn(G *g, const char *fname, LLVMValueRef x) {
  LLVMValueRef r = g->ops->f32_math ? g->ops->f32_math(g, fname, x) : NULL;
  if (r) return r;
  char name[64];
  snprintf(name, sizeof name, "llvm.%s.f32", fname);
  return call(g, name, g->f32, &x, 1);
}

/* kiln's expansions (KILN in the gpu column of ops.def), on f32 */
static LLVMValueRef expand_rsqrt(G *g, LLVMValueRef x) {
  return LLVMBuildFDiv(g->B, cf32(g, 1.0), f32_fn(g, "sqrt", x), "");
}

/* 1 / x, approximately (an error of about one ulp): the target's reciprocal unit where it has a
 * leaf (NVPTX: rcp.approx.ftz.f32), else an fdiv LLVM may turn into one (arcp, afn: AMDGPU's
 * v_rcp_f32).  For expansions whose result does not need a correctly rounded quotient. */
static LLVMValueRef f32_rcp(G *g, LLVMValueRef x) {
  LLVMValueRef r = g->ops->f32_math ? g->ops->f32_math(g, "rcp", x) : NULL;
  if (r) return r;
  r = LLVMBuildFDiv(g->B, cf32(g, 1.0), x, "");
  LLVMSetFastMathFlags(r, LLVMFastMathAllowReciprocal | LLVMFastMathApproxFunc);
  return r;
}

/* tanh from exp2 (no GPU backend selects llvm.tanh.f32 without afn, and NVPTX would make it a
 * libm call, which aborts LLVM).  |x| < 0.25: the odd Taylor polynomial
 *   x (1 - x^2/3 + 2x^4/15 - 17x^6/315 + 62x^8/2835 - 1382x^10/155925)
 * whose next term, 21844 x^13 / 6081075, is below 2^-26 |x| there; this keeps tiny x exact (no
 * 1 - e cancellation).  Else 1 - 2 / (1 + e^{2|x|}) with e^{2|x|} = exp2(2|x| log2 e): 2/(1+e)
 * is at most 0.76 there, so the subtraction loses at most two bits, and a huge |x| gives
 * e = inf, 2/inf = 0, 1.  The sign is x's (copysign keeps -0 and NaN).  On NVPTX exp2 is
 * ex2.approx, hence KN_APPROX.  The quotient is 2 * f32_rcp(1 + e): a correctly rounded f32
 * division is a dozen instructions on both GPU families (NVPTX's div.rn.f32 with its slow path),
 * paid per score by soft-capping, and one ulp of it is far below the two bits the subtraction
 * may lose. */
static LLVMValueRef expand_tanh(G *g, LLVMValueRef x) {
  LLVMBuilderRef B = g->B;
  LLVMValueRef ax = call(g, "llvm.fabs.f32", g->f32, &x, 1);
  LLVMValueRef x2 = LLVMBuildFMul(B, x, x, "");
  static const double c[] = {-1382.0 / 155925, 62.0 / 2835, -17.0 / 315, 2.0 / 15, -1.0 / 3, 1.0};
  LLVMValueRef p = cf32(g, c[0]);
  for (int i = 1; i < 6; i++) p = LLVMBuildFAdd(B, LLVMBuildFMul(B, p, x2, ""), cf32(g, c[i]), "");
  LLVMValueRef small = LLVMBuildFMul(B, x, p, "");
  LLVMValueRef t = LLVMBuildFMul(B, ax, cf32(g, 2.0 * 1.44269504088896340736), "");
  LLVMValueRef e = f32_fn(g, "exp2", t);
  LLVMValueRef q = LLVMBuildFMul(B, cf32(g, 2.0), f32_rcp(g, LLVMBuildFAdd(B, cf32(g, 1.0), e, "")), "");
  LLVMValueRef big = LLVMBuildFSub(B, cf32(g, 1.0), q, "");
  LLVMValueRef args[2] = {big, x};
  big = call(g, "llvm.copysign.f32", g->f32, args, 2);
  LLVMValueRef is_small = LLVMBuildFCmp(B, LLVMRealOLT, ax, cf32(g, 0.25), "");
  return LLVMBuildSelect(B, is_small, small, big, "");
}

static const struct {
  const char *name;
  LLVMValueRef (*fn)(G *g, LLVMValueRef x);
} expansions[] = {{"rsqrt", expand_rsqrt}, {"tanh", expand_tanh}};

/* a float function as the op's math entry says, computed in f32 and rounded once to a's type
 * (f16, bf16); NULL when the entry has nothing a GPU can run */
static LLVMValueRef math_unary(G *g, kn_opcode o, LLVMValueRef a) {
  kn_math m = kn_opinfo_table[o].math;
  LLVMTypeRef t = LLVMTypeOf(a);
  LLVMValueRef y = t == g->f32 ? a : LLVMBuildFPExt(g->B, a, g->f32, ""), r = NULL;
  switch ((kn_math_via)m.gpu) {
  case KN_VIA_LLVM: r = f32_fn(g, m.name, y); break;
  case KN_VIA_KILN:
    for (size_t i = 0; i < sizeof expansions / sizeof expansions[0]; i++)
      if (!strcmp(expansions[i].name, m.name)) r = expansions[i].fn(g, y);
    break;
  case KN_VIA_LIBM:  /* GPUs have no libm */
  case KN_VIA_NONE: break;
  }
  if (!r) return NULL;
  return t == g->f32 ? r : LLVMBuildFPTrunc(g->B, r, t, "");
}

static LLVMValueRef call_smax(G *g, LLVMValueRef a, LLVMValueRef b) {
  LLVMValueRef args[2] = {a, b};
  return call(g, "llvm.smax.i32", g->i32, args, 2);
}

/* fmod on f32, exactly (the interpreter's rem; NVPTX's frem is x - trunc(x / y) * y, which is
 * not): long division of the significands, one quotient bit per step.  Both significands are
 * normalised to [2^23, 2^24) (ctlz takes care of subnormals), so before each step m < 2 my and
 * one conditional subtraction keeps it below my; after ex - ey steps the remainder is m at y's
 * exponent, exact because the result of fmod always is.  At most 277 steps (subnormal y, huge
 * x).  Built once per module as an internal function; the backends inline it. */
static LLVMValueRef fmod_f32_fn(G *g) {
  LLVMValueRef f = LLVMGetNamedFunction(g->M, "kn.fmod.f32");
  if (f) return f;
  LLVMTypeRef pt[2] = {g->f32, g->f32};
  f = LLVMAddFunction(g->M, "kn.fmod.f32", LLVMFunctionType(g->f32, pt, 2, 0));
  LLVMSetLinkage(f, LLVMInternalLinkage);
  LLVMBuilderRef B = LLVMCreateBuilderInContext(g->C), keep = g->B;
  g->B = B;
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(g->C, f, "entry");
  LLVMBasicBlockRef special = LLVMAppendBasicBlockInContext(g->C, f, "special");
  LLVMBasicBlockRef work = LLVMAppendBasicBlockInContext(g->C, f, "work");
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(g->C, f, "loop");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->C, f, "done");
  LLVMPositionBuilderAtEnd(B, entry);
  LLVMValueRef x = LLVMGetParam(f, 0), y = LLVMGetParam(f, 1);
  LLVMValueRef ux = LLVMBuildBitCast(B, x, g->i32, ""), uy = LLVMBuildBitCast(B, y, g->i32, "");
  LLVMValueRef sx = LLVMBuildAnd(B, ux, ci32(g, (int32_t)0x80000000u), "");
  LLVMValueRef ax = LLVMBuildAnd(B, ux, ci32(g, 0x7fffffff), "");
  LLVMValueRef ay = LLVMBuildAnd(B, uy, ci32(g, 0x7fffffff), "");
  /* y == 0, x inf or NaN, y NaN: NaN; |x| < |y| (x = 0, y = inf included): x */
  LLVMValueRef nan = LLVMBuildOr(B, LLVMBuildICmp(B, LLVMIntEQ, ay, ci32(g, 0), ""),
                                 LLVMBuildOr(B, LLVMBuildICmp(B, LLVMIntUGE, ax, ci32(g, 0x7f800000), ""),
                                             LLVMBuildICmp(B, LLVMIntUGT, ay, ci32(g, 0x7f800000), ""), ""), "");
  LLVMValueRef keepx = LLVMBuildICmp(B, LLVMIntULT, ax, ay, "");
  LLVMBuildCondBr(B, LLVMBuildOr(B, nan, keepx, ""), special, work);
  LLVMPositionBuilderAtEnd(B, special);
  LLVMBuildRet(B, LLVMBuildSelect(B, nan, cf32(g, NAN), x, ""));
  /* significands normalised to [2^23, 2^24), exponents to match */
  LLVMPositionBuilderAtEnd(B, work);
  LLVMValueRef e[2], mnt[2], a2[2] = {ax, ay};
  for (int i = 0; i < 2; i++) {
    LLVMValueRef ef = LLVMBuildLShr(B, a2[i], ci32(g, 23), "");
    LLVMValueRef frac = LLVMBuildAnd(B, a2[i], ci32(g, 0x7fffff), "");
    LLVMValueRef normal = LLVMBuildICmp(B, LLVMIntNE, ef, ci32(g, 0), "");
    LLVMValueRef m = LLVMBuildSelect(B, normal, LLVMBuildOr(B, frac, ci32(g, 1 << 23), ""), frac, "");
    LLVMValueRef ctlz_args[2] = {m, LLVMConstInt(g->i1, 1, 0)};
    LLVMValueRef sh = LLVMBuildSub(B, call(g, "llvm.ctlz.i32", g->i32, ctlz_args, 2), ci32(g, 8), "");
    mnt[i] = LLVMBuildShl(B, m, sh, "");
    e[i] = LLVMBuildSub(B, LLVMBuildSelect(B, normal, ef, ci32(g, 1), ""), sh, "");
  }
  LLVMBuildBr(B, loop);
  /* loop: while ex > ey { if m >= my: m -= my; m <<= 1; ex-- }; then one last step */
  LLVMPositionBuilderAtEnd(B, loop);
  LLVMValueRef m = LLVMBuildPhi(B, g->i32, "m"), ex = LLVMBuildPhi(B, g->i32, "ex");
  LLVMValueRef ge = LLVMBuildICmp(B, LLVMIntUGE, m, mnt[1], "");
  LLVMValueRef r = LLVMBuildSelect(B, ge, LLVMBuildSub(B, m, mnt[1], ""), m, "");
  LLVMValueRef more = LLVMBuildICmp(B, LLVMIntSGT, ex, e[1], "");
  LLVMValueRef m2 = LLVMBuildShl(B, r, ci32(g, 1), ""), ex2 = LLVMBuildSub(B, ex, ci32(g, 1), "");
  LLVMValueRef mv[2] = {mnt[0], m2}, ev[2] = {e[0], ex2};
  LLVMBasicBlockRef from[2] = {work, loop};
  LLVMAddIncoming(m, mv, from, 2);
  LLVMAddIncoming(ex, ev, from, 2);
  LLVMBuildCondBr(B, more, loop, done);
  /* r * 2^(ey - 150), r < 2^24: renormalise and rebuild the bits (subnormal when small) */
  LLVMPositionBuilderAtEnd(B, done);
  LLVMValueRef ctlz_args[2] = {r, LLVMConstInt(g->i1, 0, 0)};
  LLVMValueRef sh = LLVMBuildSub(B, call(g, "llvm.ctlz.i32", g->i32, ctlz_args, 2), ci32(g, 8), "");
  LLVMValueRef rn = LLVMBuildShl(B, r, sh, ""), er = LLVMBuildSub(B, e[1], sh, "");
  LLVMValueRef normal_bits = LLVMBuildOr(B, LLVMBuildShl(B, er, ci32(g, 23), ""),
                                         LLVMBuildAnd(B, rn, ci32(g, 0x7fffff), ""), "");
  /* subnormal: the field is r * 2^(ey - 1), shifted left or right by the one amount that is
   * not negative */
  LLVMValueRef zero = ci32(g, 0), up = LLVMBuildSub(B, e[1], ci32(g, 1), "");
  LLVMValueRef down = LLVMBuildSub(B, zero, up, "");
  LLVMValueRef sub_bits = LLVMBuildLShr(
      B, LLVMBuildShl(B, r, call_smax(g, up, zero), ""), call_smax(g, down, zero), "");
  LLVMValueRef bits = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGE, er, ci32(g, 1), ""),
                                      normal_bits, sub_bits, "");
  bits = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntEQ, r, ci32(g, 0), ""), ci32(g, 0), bits, "");
  LLVMBuildRet(B, LLVMBuildBitCast(B, LLVMBuildOr(B, bits, sx, ""), g->f32, ""));
  LLVMDisposeBuilder(B);
  g->B = keep;
  return f;
}

static LLVMValueRef fmod_any(G *g, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef t = LLVMTypeOf(a);
  LLVMValueRef f = fmod_f32_fn(g);
  LLVMValueRef args[2] = {t == g->f32 ? a : LLVMBuildFPExt(g->B, a, g->f32, ""),
                          t == g->f32 ? b : LLVMBuildFPExt(g->B, b, g->f32, "")};
  LLVMTypeRef pt[2] = {g->f32, g->f32};
  LLVMValueRef r = LLVMBuildCall2(g->B, LLVMFunctionType(g->f32, pt, 2, 0), f, args, 2, "");
  return t == g->f32 ? r : LLVMBuildFPTrunc(g->B, r, t, "");  /* exact: fmod of f16s is an f16 */
}

/* Float add, sub and mul carry `contract`: the backend may fuse a multiply and the add or
 * subtract that consumes it into one FMA (one rounding instead of two), as CUDA compiles by
 * default (-fmad=true) and Triton does.  Without it NVPTX writes mul.rn / sub.rn, which ptxas
 * must not fuse: the scaled score and its row maximum, qk * qk_scale - m, cost two instructions
 * per element instead of one. */
static LLVMValueRef contract(LLVMValueRef r) {
  if (LLVMIsAInstruction(r)) LLVMSetFastMathFlags(r, LLVMFastMathAllowContract);
  return r;
}

static LLVMValueRef float_binary(G *g, kn_opcode o, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef t = LLVMTypeOf(a);
  char name[64];
  switch (o) {
  case KN_OP_ADD: return contract(LLVMBuildFAdd(g->B, a, b, ""));
  case KN_OP_SUB: return contract(LLVMBuildFSub(g->B, a, b, ""));
  case KN_OP_MUL: return contract(LLVMBuildFMul(g->B, a, b, ""));
  case KN_OP_DIV: return LLVMBuildFDiv(g->B, a, b, "");
  case KN_OP_REM: return fmod_any(g, a, b);
  case KN_OP_MAX:
  case KN_OP_MIN: {
    /* NaN-propagating, as the IR says; or, in a kernel that allows it (MAXNUM = 1) on a target
     * where it is cheaper, IEEE maxNum / minNum: a NaN operand gives the other one */
    snprintf(name, sizeof name, "llvm.%s.%s",
             o == KN_OP_MAX ? (g->maxnum ? "maxnum" : "maximum") : (g->maxnum ? "minnum" : "minimum"),
             fsuffix(g, t));
    LLVMValueRef args[2] = {a, b};
    return call(g, name, t, args, 2);
  }
  case KN_OP_AND: case KN_OP_OR: case KN_OP_XOR: case KN_OP_SHL: case KN_OP_SHR:
  KN_CASES_NOT_BINARY
    return NULL;  /* int only, or not binary */
  }
  return NULL;
}

static LLVMValueRef int_binary(G *g, kn_opcode o, LLVMValueRef a, LLVMValueRef b) {
  LLVMTypeRef t = LLVMTypeOf(a);
  char name[64];
  switch (o) {
  case KN_OP_ADD: return LLVMBuildAdd(g->B, a, b, "");
  case KN_OP_SUB: return LLVMBuildSub(g->B, a, b, "");
  case KN_OP_MUL: return LLVMBuildMul(g->B, a, b, "");
  case KN_OP_DIV:
  case KN_OP_REM: {
    /* a zero or -1 divisor would be poison (x / 0, INT_MIN / -1): divide by 1 instead and fix
     * -1 up afterwards; x / 0 then gives x (unspecified, but never a trap) */
    LLVMValueRef zero = LLVMConstInt(t, 0, 0), m1 = LLVMConstAllOnes(t), one = LLVMConstInt(t, 1, 0);
    LLVMValueRef bad = LLVMBuildOr(g->B, LLVMBuildICmp(g->B, LLVMIntEQ, b, zero, ""),
                                   LLVMBuildICmp(g->B, LLVMIntEQ, b, m1, ""), "");
    LLVMValueRef dv = LLVMBuildSelect(g->B, bad, one, b, "");
    LLVMValueRef isneg1 = LLVMBuildICmp(g->B, LLVMIntEQ, b, m1, "");
    if (o == KN_OP_DIV)
      return LLVMBuildSelect(g->B, isneg1, LLVMBuildSub(g->B, zero, a, ""), LLVMBuildSDiv(g->B, a, dv, ""), "");
    return LLVMBuildSelect(g->B, isneg1, zero, LLVMBuildSRem(g->B, a, dv, ""), "");
  }
  case KN_OP_MAX:
  case KN_OP_MIN: {
    snprintf(name, sizeof name, "llvm.%s.%s", o == KN_OP_MAX ? "smax" : "smin",
             t == g->i64 ? "i64" : "i32");
    LLVMValueRef args[2] = {a, b};
    return call(g, name, t, args, 2);
  }
  case KN_OP_AND: return LLVMBuildAnd(g->B, a, b, "");
  case KN_OP_OR: return LLVMBuildOr(g->B, a, b, "");
  case KN_OP_XOR: return LLVMBuildXor(g->B, a, b, "");
  case KN_OP_SHL:
  case KN_OP_SHR: {
    unsigned bits = LLVMGetIntTypeWidth(t);
    LLVMValueRef amt = LLVMBuildAnd(g->B, b, LLVMConstInt(t, bits - 1, 0), "");
    return o == KN_OP_SHL ? LLVMBuildShl(g->B, a, amt, "") : LLVMBuildAShr(g->B, a, amt, "");
  }
  KN_CASES_NOT_BINARY return NULL;
  }
  return NULL;
}

static LLVMValueRef binary(G *g, kn_opcode o, kn_scalar s, LLVMValueRef a, LLVMValueRef b) {
  if (isf(s)) return float_binary(g, o, a, b);
  /* and, or, xor of i1 are LLVM's own (masks stay plain i1 logic: sink_mask moves them) */
  if (s != KN_I1 || o == KN_OP_AND || o == KN_OP_OR || o == KN_OP_XOR) return int_binary(g, o, a, b);
  /* else i1 is the integer 0 or 1 (not -1) and its results wrap back as x != 0, as in the
   * interpreter: add is or, sub xor, max or, min and */
  LLVMValueRef r = int_binary(g, o, LLVMBuildZExt(g->B, a, g->i32, ""), LLVMBuildZExt(g->B, b, g->i32, ""));
  return r ? LLVMBuildICmp(g->B, LLVMIntNE, r, ci32(g, 0), "") : NULL;
}

static LLVMValueRef unary(G *g, kn_opcode o, kn_scalar s, LLVMValueRef a) {
  LLVMTypeRef t = LLVMTypeOf(a);
  char name[64];
  switch (o) {
  case KN_OP_NEG: return isf(s) ? LLVMBuildFNeg(g->B, a, "") : LLVMBuildNeg(g->B, a, "");
  case KN_OP_ABS:
    if (isf(s)) {
      snprintf(name, sizeof name, "llvm.fabs.%s", fsuffix(g, t));
      return call(g, name, t, &a, 1);
    }
    if (s == KN_I1) return a;
    snprintf(name, sizeof name, "llvm.abs.%s", t == g->i64 ? "i64" : "i32");
    LLVMValueRef args[2] = {a, LLVMConstInt(g->i1, 0, 0)};
    return call(g, name, t, args, 2);
  KN_CASES_MATH return isf(s) ? math_unary(g, o, a) : NULL;
  case KN_OP_NOT: return isf(s) ? NULL : LLVMBuildNot(g->B, a, "");
  KN_CASES_NOT_UNARY return NULL;
  }
  return NULL;
}

static LLVMValueRef compare(G *g, kn_pred p, kn_scalar s, LLVMValueRef a, LLVMValueRef b) {
  if (isf(s)) {
    static const LLVMRealPredicate fp[] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                           LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
    return LLVMBuildFCmp(g->B, fp[p], a, b, "");
  }
  static const LLVMIntPredicate ip[] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT,
                                        LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
  if (s == KN_I1) {  /* true is 1, not -1 */
    a = LLVMBuildZExt(g->B, a, g->i32, "");
    b = LLVMBuildZExt(g->B, b, g->i32, "");
  }
  return LLVMBuildICmp(g->B, ip[p], a, b, "");
}

/* An i32/i64 to bf16 with one rounding, as the interpreter's kn_int_to_float: sitofp to f32
 * and then to bf16 would round twice (2^30 + 2^22 + 1 becomes the bf16 tie 2^30 + 2^22, then
 * 2^30, where one rounding gives 2^30 + 2^23).  So the magnitude is cut to 24 significant bits
 * with the bits cut away ORed into the lowest kept one (round to odd, exact in f32), and only
 * the f32 -> bf16 step rounds to nearest even. */
static LLVMValueRef int_to_bf16(G *g, kn_scalar from, LLVMValueRef x) {
  LLVMBuilderRef B = g->B;
  LLVMValueRef v = from == KN_I64 ? x : LLVMBuildSExt(B, x, g->i64, ""), z = ci64(g, 0);
  LLVMValueRef neg = LLVMBuildICmp(B, LLVMIntSLT, v, z, "");
  LLVMValueRef u = LLVMBuildSelect(B, neg, LLVMBuildSub(B, z, v, ""), v, "");  /* |v|, unsigned */
  LLVMValueRef ctlz_args[2] = {u, LLVMConstInt(g->i1, 0, 0)};
  LLVMValueRef len = LLVMBuildSub(B, ci64(g, 64), call(g, "llvm.ctlz.i64", g->i64, ctlz_args, 2), "");
  LLVMValueRef cut_args[2] = {LLVMBuildSub(B, len, ci64(g, 24), ""), z};
  LLVMValueRef cut = call(g, "llvm.smax.i64", g->i64, cut_args, 2);  /* bits below f32's 24 */
  LLVMValueRef low = LLVMBuildSub(B, LLVMBuildShl(B, ci64(g, 1), cut, ""), ci64(g, 1), "");
  LLVMValueRef sticky = LLVMBuildICmp(B, LLVMIntNE, LLVMBuildAnd(B, u, low, ""), z, "");
  LLVMValueRef kept = LLVMBuildAnd(B, u, LLVMBuildNot(B, low, ""), "");
  LLVMValueRef f = LLVMBuildUIToFP(B, kept, g->f32, "");  /* exact: 24 bits at most */
  LLVMValueRef bits = LLVMBuildOr(B, LLVMBuildBitCast(B, f, g->i32, ""),
                                  LLVMBuildZExt(B, sticky, g->i32, ""), "");
  f = LLVMBuildBitCast(B, bits, g->f32, "");
  f = LLVMBuildSelect(B, neg, LLVMBuildFNeg(B, f, ""), f, "");
  return LLVMBuildFPTrunc(B, f, g->bf16, "");
}

/* An fp8 byte (i8) -> f32, exactly, in integer ops (every GPU target, the emulated ones
 * included: no conversion instruction is assumed).  e5m2 is the top byte of an f16; the others
 * are rebuilt field by field: a normal number's exponent rebiased into f32's, a subnormal as
 * m * 2^(1 - bias - mbits) (no f32 denormal is made, so flushing modes cannot change it), and
 * the NaN (and e5m2's infinities) of each encoding (ir/numeric.c: e4m3 S.1111.111, fnuz 0x80). */
static LLVMValueRef fp8_to_f32(G *g, kn_scalar s, LLVMValueRef x) {
  if (s == KN_F8E5M2) {
    LLVMValueRef h = LLVMBuildShl(g->B, LLVMBuildZExt(g->B, x, g->i16, ""),
                                  LLVMConstInt(g->i16, 8, 0), "");
    return LLVMBuildFPExt(g->B, LLVMBuildBitCast(g->B, h, g->f16, ""), g->f32, "");
  }
  const int eb = s == KN_F8E5M2FNUZ ? 5 : 4, mb = 7 - eb;
  const int bias = s == KN_F8E4M3 ? 7 : s == KN_F8E4M3FNUZ ? 8 : 16;
  LLVMBuilderRef B = g->B;
  LLVMValueRef u = LLVMBuildZExt(B, x, g->i32, "");
  LLVMValueRef sign = LLVMBuildShl(B, LLVMBuildAnd(B, u, ci32(g, 0x80), ""), ci32(g, 24), "");
  LLVMValueRef e = LLVMBuildAnd(B, LLVMBuildLShr(B, u, ci32(g, mb), ""), ci32(g, (1 << eb) - 1), "");
  LLVMValueRef m = LLVMBuildAnd(B, u, ci32(g, (1 << mb) - 1), "");
  LLVMValueRef nrm = LLVMBuildOr(
      B, LLVMBuildShl(B, LLVMBuildAdd(B, e, ci32(g, 127 - bias), ""), ci32(g, 23), ""),
      LLVMBuildShl(B, m, ci32(g, 23 - mb), ""), "");
  LLVMValueRef sub = LLVMBuildFMul(B, LLVMBuildUIToFP(B, m, g->f32, ""),
                                   LLVMConstReal(g->f32, ldexp(1.0, 1 - bias - mb)), "");
  LLVMValueRef mag = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntEQ, e, ci32(g, 0), ""),
                                     LLVMBuildBitCast(B, sub, g->i32, ""), nrm, "");
  LLVMValueRef bits = LLVMBuildOr(B, mag, sign, "");
  LLVMValueRef nan = s == KN_F8E4M3
                         ? LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildAnd(B, u, ci32(g, 0x7f), ""),
                                         ci32(g, 0x7f), "")
                         : LLVMBuildICmp(B, LLVMIntEQ, u, ci32(g, 0x80), "");
  bits = LLVMBuildSelect(B, nan, ci32(g, 0x7fc00000), bits, "");
  return LLVMBuildBitCast(B, bits, g->f32, "");
}

static LLVMValueRef cast(G *g, kn_scalar from, kn_scalar to, LLVMValueRef x) {
  LLVMTypeRef tt = sty(g, to);
  if (from == to) return x;
  /* fp8 -> a wider float: the exact f32, then the f32 -> `to` cast (exact too: every fp8
   * value is an f16 and a bf16) */
  if (isf(from) && kn_scalar_size(from) == 1 && isf(to) && kn_scalar_size(to) > 1) {
    LLVMValueRef h = g->ops->fp8_to_f16 ? g->ops->fp8_to_f16(g, from, x) : NULL;
    return h ? cast(g, KN_F16, to, h) : cast(g, KN_F32, to, fp8_to_f32(g, from, x));
  }
  bool ff = isf(from), ft = isf(to);
  if (to == KN_I1)
    return ff ? LLVMBuildFCmp(g->B, LLVMRealUNE, x, LLVMConstReal(LLVMTypeOf(x), 0), "")
              : LLVMBuildICmp(g->B, LLVMIntNE, x, LLVMConstInt(LLVMTypeOf(x), 0, 0), "");
  if (ff && ft) {
    return kn_scalar_size(from) < kn_scalar_size(to) || (from == KN_F16 && to == KN_BF16)
               ? (from == KN_F16 && to == KN_BF16
                      ? LLVMBuildFPTrunc(g->B, LLVMBuildFPExt(g->B, x, g->f32, ""), tt, "")
                      : LLVMBuildFPExt(g->B, x, tt, ""))
               : (from == KN_BF16 && to == KN_F16
                      ? LLVMBuildFPTrunc(g->B, LLVMBuildFPExt(g->B, x, g->f32, ""), tt, "")
                      : LLVMBuildFPTrunc(g->B, x, tt, ""));
  }
  if (!ff && ft && to == KN_BF16 && from != KN_I1) return int_to_bf16(g, from, x);
  if (!ff && ft) return from == KN_I1 ? LLVMBuildUIToFP(g->B, x, tt, "") : LLVMBuildSIToFP(g->B, x, tt, "");
  if (ff && !ft) {
    char name[64];
    snprintf(name, sizeof name, "llvm.fptosi.sat.%s.%s", to == KN_I64 ? "i64" : "i32",
             fsuffix(g, LLVMTypeOf(x)));
    return call(g, name, tt, &x, 1);
  }
  if (from == KN_I1) return LLVMBuildZExt(g->B, x, tt, "");
  return kn_scalar_size(from) < kn_scalar_size(to) ? LLVMBuildSExt(g->B, x, tt, "")
                                                    : LLVMBuildTrunc(g->B, x, tt, "");
}

static LLVMValueRef const_of(G *g, const kn_op *op, kn_scalar s) {
  if (isf(s)) return LLVMConstReal(sty(g, s), op->fattr);
  return LLVMConstInt(sty(g, s), (unsigned long long)op->iattr[0], 1);
}

/* operand i as a scalar (uniform) or register r of its tile in the needed layout */
static LLVMValueRef get_elem(G *g, LLVMValueRef *regs, const kn_value *v, int r) {
  return v->type.kind == KN_TY_TILE ? regs[r] : g->sv[v->id];
}

/* Moves the single-use i1 computation c (a compare, or and/or/xor of them, in the current
 * block) to just before its user `at`, operands first.  Op by op, a masked tile's compares are
 * all emitted before the select that consumes them; on AMDGPU each per-register i1 of a
 * divergent compare is a 64-bit lane mask in an SGPR pair, and with all 32 registers' masks of
 * a 128x64 causal S live at once the kernel ran out of SGPRs and spilled them into VGPR lanes.
 * Next to its select, each mask dies at once.  Moving an instruction later in its block is
 * safe: its only user comes after the new position.  (NVPTX's order is left as it was: there
 * it cost ptxas a register or two.) */
static void sink_mask(LLVMBuilderRef b, LLVMValueRef c, LLVMValueRef at) {
  LLVMValueRef i = LLVMIsAInstruction(c);
  if (!i || LLVMGetInstructionParent(i) != LLVMGetInstructionParent(at)) return;
  LLVMUseRef u = LLVMGetFirstUse(i);
  if (!u || LLVMGetNextUse(u)) return;
  LLVMOpcode o = LLVMGetInstructionOpcode(i);
  if (o != LLVMICmp && o != LLVMFCmp && o != LLVMAnd && o != LLVMOr && o != LLVMXor) return;
  LLVMInstructionRemoveFromParent(i);
  LLVMPositionBuilderBefore(b, at);
  LLVMInsertIntoBuilder(b, i);
  if (o == LLVMAnd || o == LLVMOr || o == LLVMXor)
    for (int k = 0; k < 2; k++) sink_mask(b, LLVMGetOperand(i, (unsigned)k), i);
}

/* one element of op's result from its operands' elements x[] (NULL: not for these types) */
typedef LLVMValueRef (*elem_fn)(G *g, const kn_op *op, LLVMValueRef *x);

static kn_scalar in_elem(const kn_op *op) { return op->opnd[0]->type.elem; }
static kn_scalar out_elem(const kn_op *op) { return op->res[0]->type.elem; }

static LLVMValueRef elem_binary(G *g, const kn_op *op, LLVMValueRef *x) {
  return binary(g, op->opc, out_elem(op), x[0], x[1]);
}
static LLVMValueRef elem_unary(G *g, const kn_op *op, LLVMValueRef *x) {
  return unary(g, op->opc, out_elem(op), x[0]);
}
static LLVMValueRef elem_cmp(G *g, const kn_op *op, LLVMValueRef *x) {
  return compare(g, (kn_pred)op->iattr[0], in_elem(op), x[0], x[1]);
}
static LLVMValueRef elem_cast(G *g, const kn_op *op, LLVMValueRef *x) {
  return cast(g, in_elem(op), out_elem(op), x[0]);
}
static LLVMValueRef elem_same(G *g, const kn_op *op, LLVMValueRef *x) {
  (void)g, (void)op;
  return x[0];  /* multiple_of, max_contiguous */
}
static LLVMValueRef elem_select(G *g, const kn_op *op, LLVMValueRef *x) {
  LLVMValueRef v = LLVMBuildSelect(g->B, x[0], x[1], x[2], "");
  /* AMDGPU only: NVPTX keeps predicates in its own registers and ptxas schedules them */
  if (g->p->arch->isa == KN_ISA_AMDGPU && op->opnd[0]->type.kind == KN_TY_TILE &&
      LLVMIsAInstruction(v)) {
    LLVMBuilderRef mb = LLVMCreateBuilderInContext(g->C);
    sink_mask(mb, x[0], v);
    LLVMDisposeBuilder(mb);
  }
  return v;
}

static bool is_fp8(kn_scalar s) { return isf(s) && kn_scalar_size(s) == 1; }

/* fp8 values are raw bytes on GPU targets: loaded, stored, selected and fed to dot, no more */
static bool touches_fp8(const kn_op *op) {
  if (op->opc == KN_OP_SELECT || op->opc == KN_OP_MULTIPLE_OF || op->opc == KN_OP_MAX_CONTIGUOUS)
    return false;
  /* fp8 -> f16 / bf16 / f32 is lowered (fp8_to_f32) */
  if (op->opc == KN_OP_CAST && is_fp8(op->opnd[0]->type.elem) && isf(out_elem(op)) &&
      !is_fp8(out_elem(op)))
    return false;
  bool any = is_fp8(out_elem(op));
  for (int i = 0; i < op->nopnd; i++) any |= is_fp8(op->opnd[i]->type.elem);
  return any;
}

static int lower_elementwise(G *g, kn_op *op, elem_fn f) {
  kn_value *res = op->res[0];
  if (touches_fp8(op))
    return unsupported_op(g, op, "'%s' on fp8 values (fp8 tiles are loaded, stored and fed to "
                          "dot; cast them in the interpreter or on the host)", kn_opinfo_table[op->opc].name);
  LLVMValueRef *ops[3] = {0};
  for (int i = 0; i < op->nopnd; i++)
    if (op->opnd[i]->type.kind == KN_TY_TILE && !(ops[i] = opnd_regs(g, op, i)))
      return fail(g, op, "internal: operand of '%s' has no registers", kn_opinfo_table[op->opc].name);
  int n = res->type.kind == KN_TY_TILE ? vmap(g, res)->nregs : 1;
  LLVMValueRef *out = res->type.kind == KN_TY_TILE ? new_regs(g, res) : &g->sv[res->id];
  for (int r = 0; r < n; r++) {
    LLVMValueRef x[3];
    for (int i = 0; i < op->nopnd; i++) x[i] = get_elem(g, ops[i], op->opnd[i], r);
    if (!(out[r] = f(g, op, x))) return unsupported_op(g, op, "'%s' on these types", kn_opinfo_table[op->opc].name);
  }
  return 0;
}

/* ---- memory ---- */

/* a divisor every value of v is known to be a multiple of (1 when nothing is known) */
static long long known_multiple(const kn_value *v) {
  if (!v || !v->def) return 1;
  const kn_op *d = v->def;
  switch (d->opc) {
  case KN_OP_CONST: {
    long long c = d->iattr[0] < 0 ? -d->iattr[0] : d->iattr[0];
    return c ? c : 1 << 30;
  }
  case KN_OP_MULTIPLE_OF: {
    long long a = d->iattr[0], b = known_multiple(d->opnd[0]);
    return a > b ? a : b;
  }
  case KN_OP_MUL: return known_multiple(d->opnd[0]) * known_multiple(d->opnd[1]);
  case KN_OP_ADD:
  case KN_OP_SUB: {
    long long a = known_multiple(d->opnd[0]), b = known_multiple(d->opnd[1]);
    while (b) {
      long long t = a % b;
      a = b;
      b = t;
    }
    return a;
  }
  /* nothing known of what the others give */
  case KN_OP_DIV: case KN_OP_REM: case KN_OP_MAX: case KN_OP_MIN: case KN_OP_AND: case KN_OP_OR:
  case KN_OP_XOR: case KN_OP_SHL: case KN_OP_SHR:
  KN_CASES_UNARY
  case KN_OP_PROGRAM_ID: case KN_OP_NUM_PROGRAMS: case KN_OP_ARANGE: case KN_OP_SPLAT:
  case KN_OP_BROADCAST: case KN_OP_EXPAND_DIMS: case KN_OP_RESHAPE: case KN_OP_TRANSPOSE:
  case KN_OP_CMP: case KN_OP_SELECT: case KN_OP_CAST: case KN_OP_PTRADD: case KN_OP_LOAD:
  case KN_OP_STORE: case KN_OP_GATHER: case KN_OP_DOT: case KN_OP_REDUCE_MAX:
  case KN_OP_REDUCE_SUM: case KN_OP_FOR:
  case KN_OP_IF: case KN_OP_YIELD: case KN_OP_CALL: case KN_OP_RETURN: case KN_OP_MAX_CONTIGUOUS:
    return 1;
  }
  return 1;
}

long long kn_gpu_known_multiple(const kn_value *v) { return known_multiple(v); }

static bool is_const_one(const kn_value *v) {
  return v->def && v->def->opc == KN_OP_CONST && v->def->iattr[0] == 1;
}

typedef struct access {
  kn_mem_operands mo;
  const kn_lmap *m;
  int contig, vec;
  LLVMTypeRef et;
  int esz;
} access;

/* may groups of v elements along dim contig be accessed as one aligned vector?  The offset and
 * bound along contig must be known multiples of v (so are the groups' coordinates: a group never
 * straddles the bound, and its first element decides its liveness).  The other dims' strides
 * move whole rows: a constant one that is not a multiple of v (a row stride of 12 halves under
 * 16-byte vectors) would misalign every other row, so it rules the vector out; a stride known
 * only at run time is assumed to keep rows aligned.  The attention template's bound along the
 * head dimension is the head dim D itself (its tiles are padded to a multiple of 16), so v
 * divides D: 16-byte vectors at D 72, 8-byte ones at D 60, scalars at D 59; its contiguous row
 * strides are D, and the caller's must be multiples of that alignment too (include/kiln.h;
 * kiln_forward checks them on CUDA). */
bool kn_gpu_vec_aligned(const kn_mem_operands *mo, int contig, int v) {
  if (known_multiple(mo->off[contig]) % v) return false;
  if (mo->bound[contig] && known_multiple(mo->bound[contig]) % v) return false;
  for (int d = 0; d < mo->rank; d++) {
    const kn_op *c = mo->stride[d]->def;
    if (d != contig && c && c->opc == KN_OP_CONST && c->iattr[0] % v) return false;
  }
  return true;
}

static void plan_access(G *g, const kn_op *op, const kn_lmap *m, kn_scalar elem, access *a) {
  kn_mem_operands_get(op, &a->mo);
  a->m = m;
  a->et = sty(g, elem);
  a->esz = (int)kn_scalar_size(elem);
  a->contig = -1;
  a->vec = 1;
  for (int d = a->mo.rank - 1; d >= 0 && a->contig < 0; d--)
    if (is_const_one(a->mo.stride[d])) a->contig = d;
  if (a->contig < 0 || a->mo.mask || elem == KN_I1) return;
  int v = kn_lmap_vec(m, a->contig, 16 / a->esz);
  while (v > 1 && !kn_gpu_vec_aligned(&a->mo, a->contig, v)) v /= 2;
  a->vec = v;
}

static LLVMValueRef to_i64(G *g, const kn_value *v) {
  LLVMValueRef x = g->sv[v->id];
  return v->type.elem == KN_I64 ? x : LLVMBuildSExt(g->B, x, g->i64, "");
}

/* does every coordinate of m stay below the shape without the modulo (base + reg exactly)? */
static bool exact_map(const kn_lmap *m) {
  for (int d = 0; d < 2; d++) {
    long long maxr = 0, sum = 0;
    for (int r = 0; r < m->nregs; r++)
      if (m->reg[r][d] > maxr) maxr = m->reg[r][d];
    for (int b = 0; b < m->lane_bits; b++) sum += m->lane[b][d];
    for (int b = 0; b < m->warp_bits; b++) sum += m->warp[b][d];
    if (maxr + sum >= m->shape[d]) return false;
  }
  return true;
}

/* The pointer of the thread's register 0 for an access: the uniform part (offsets times
 * strides) once in scalar registers, the thread's base coordinate times the strides once in
 * vector registers; each register group then adds a uniform constant-times-stride. */
static LLVMValueRef thread_ptr(G *g, const access *a) {
  LLVMValueRef uni = ci64(g, 0), thr = ci64(g, 0), base[2];
  base_of(g, a->m, base);
  for (int d = 0; d < a->mo.rank; d++) {
    bool one = is_const_one(a->mo.stride[d]);
    LLVMValueRef st = to_i64(g, a->mo.stride[d]);
    LLVMValueRef off = to_i64(g, a->mo.off[d]);
    uni = LLVMBuildAdd(g->B, uni, one ? off : LLVMBuildMul(g->B, off, st, ""), "");
    LLVMValueRef b = LLVMBuildZExt(g->B, base[d], g->i64, "");
    thr = LLVMBuildAdd(g->B, thr, one ? b : LLVMBuildMul(g->B, b, st, ""), "");
  }
  LLVMValueRef p = LLVMBuildGEP2(g->B, a->et, g->sv[a->mo.base->id], &uni, 1, "");
  return LLVMBuildGEP2(g->B, a->et, p, &thr, 1, "");
}

/* liveness of register group r: its bounds and mask (NULL: always live) */
static LLVMValueRef liveness(G *g, const access *a, LLVMValueRef *mask_regs, int r) {
  LLVMValueRef live = NULL;
  for (int d = 0; d < a->mo.rank; d++) {
    if (!a->mo.bound[d]) continue;
    LLVMValueRef c = coord(g, a->m, r, d);
    /* in the offset's own width when offset and bound are both i32 */
    bool narrow = a->mo.off[d]->type.elem == KN_I32 && a->mo.bound[d]->type.elem == KN_I32;
    LLVMValueRef pos = narrow ? LLVMBuildAdd(g->B, g->sv[a->mo.off[d]->id], c, "")
                              : LLVMBuildAdd(g->B, to_i64(g, a->mo.off[d]), LLVMBuildZExt(g->B, c, g->i64, ""), "");
    LLVMValueRef b = narrow ? g->sv[a->mo.bound[d]->id] : to_i64(g, a->mo.bound[d]);
    LLVMValueRef zero = narrow ? ci32(g, 0) : ci64(g, 0);
    LLVMValueRef in = LLVMBuildAnd(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, pos, b, ""),
                                   LLVMBuildICmp(g->B, LLVMIntSGE, pos, zero, ""), "");
    live = live ? LLVMBuildAnd(g->B, live, in, "") : in;
  }
  if (mask_regs) live = live ? LLVMBuildAnd(g->B, live, mask_regs[r], "") : mask_regs[r];
  return live;
}

/* address and liveness of register group r */
static void address(G *g, const access *a, LLVMValueRef tptr, LLVMValueRef *mask_regs, int r,
                    LLVMValueRef *ptr, LLVMValueRef *live) {
  LLVMValueRef idx = ci64(g, 0);
  bool exact = tptr != NULL;
  for (int d = 0; d < a->mo.rank; d++) {
    bool one = is_const_one(a->mo.stride[d]);
    LLVMValueRef st = to_i64(g, a->mo.stride[d]);
    if (exact) {
      LLVMValueRef k = ci64(g, a->m->reg[r][d]);
      idx = LLVMBuildAdd(g->B, idx, one ? k : LLVMBuildMul(g->B, k, st, ""), "");
    } else {
      LLVMValueRef c = coord(g, a->m, r, d);
      LLVMValueRef pos = LLVMBuildAdd(g->B, to_i64(g, a->mo.off[d]), LLVMBuildZExt(g->B, c, g->i64, ""), "");
      idx = LLVMBuildAdd(g->B, idx, one ? pos : LLVMBuildMul(g->B, pos, st, ""), "");
    }
  }
  *live = liveness(g, a, mask_regs, r);
  *ptr = LLVMBuildGEP2(g->B, a->et, exact ? tptr : g->sv[a->mo.base->id], &idx, 1, "");
}

/* ---- off32 loads: a buffer resource, 32-bit offsets, dead elements past its end ---- */

static LLVMValueRef to_i32(G *g, const kn_value *v) {
  LLVMValueRef x = g->sv[v->id];
  return v->type.elem == KN_I32 ? x : LLVMBuildTrunc(g->B, x, g->i32, "");
}

/* a constant stride's value (false: known at run time only) */
static bool const_stride(const kn_value *s, long long *c) {
  if (!s->def || s->def->opc != KN_OP_CONST) return false;
  *c = s->def->iattr[0];
  return true;
}

/* The element offset from the base of an exact map's register 0 (the thread's base coordinate
 * plus the offsets, times the strides), in wrapping i32 arithmetic: the clause puts every live
 * element's byte offset below 2^31, so it is exact wherever it is used; a dead element's is
 * replaced (buffer_offset). */
static LLVMValueRef thread_off32(G *g, const access *a) {
  LLVMValueRef sum = ci32(g, 0), base[2];
  base_of(g, a->m, base);
  for (int d = 0; d < a->mo.rank; d++) {
    LLVMValueRef pos = LLVMBuildAdd(g->B, to_i32(g, a->mo.off[d]), base[d], "");
    sum = LLVMBuildAdd(g->B, sum, is_const_one(a->mo.stride[d]) ? pos
                                  : LLVMBuildMul(g->B, pos, to_i32(g, a->mo.stride[d]), ""), "");
  }
  return sum;
}

/* the byte offset of register group r (toff: thread_off32 of an exact map, else NULL), or
 * KN_GPU_OFF32_END and on when it is dead.  What constant strides add is kept out of the select
 * (end + a small constant is still past the end), so LLVM folds it into the instruction */
static LLVMValueRef buffer_offset(G *g, const access *a, LLVMValueRef toff, LLVMValueRef live,
                                  int r) {
  LLVMValueRef var = toff ? toff : ci32(g, 0);
  long long k = 0, c;
  for (int d = 0; d < a->mo.rank; d++) {
    bool known = const_stride(a->mo.stride[d], &c);
    if (toff && known) {
      k += a->m->reg[r][d] * c;
    } else {
      LLVMValueRef pos = toff ? ci32(g, a->m->reg[r][d])
                              : LLVMBuildAdd(g->B, to_i32(g, a->mo.off[d]), coord(g, a->m, r, d), "");
      var = LLVMBuildAdd(g->B, var, known && c == 1 ? pos
                                    : LLVMBuildMul(g->B, pos, to_i32(g, a->mo.stride[d]), ""), "");
    }
  }
  LLVMValueRef bytes = LLVMBuildMul(g->B, var, ci32(g, a->esz), "");
  if (live) bytes = LLVMBuildSelect(g->B, live, bytes, ci32(g, (long long)KN_GPU_OFF32_END), "");
  return k ? LLVMBuildAdd(g->B, bytes, ci32(g, k * a->esz), "") : bytes;
}

static LLVMValueRef and_opt(G *g, LLVMValueRef a, LLVMValueRef b) {
  return !a ? b : !b ? a : LLVMBuildAnd(g->B, a, b, "");
}

static bool async_staged(G *g, const kn_value *v) {
  for (int i = 0; i < g->p->nconv; i++)
    if (g->p->conv[i].value == v && g->p->conv[i].stage >= KN_STAGE_ASYNC_AT_DOT) return true;
  return false;
}

/* A load or store of one element (a scalar value, rank 1): every thread computes the same
 * address and liveness; every thread loads the element, and every thread stores the same value
 * to the same address (so it is written once, whoever wins).  An atomic_add is thread 0's. */
static int lower_scalar_mem(G *g, kn_op *op, bool load) {
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  kn_scalar s = load ? op->res[0]->type.elem : mo.value->type.elem;
  LLVMTypeRef et = sty(g, s);
  LLVMValueRef idx = LLVMBuildMul(g->B, to_i64(g, mo.off[0]), to_i64(g, mo.stride[0]), "");
  LLVMValueRef ptr = LLVMBuildGEP2(g->B, et, g->sv[mo.base->id], &idx, 1, "");
  LLVMValueRef live = mo.mask ? g->sv[mo.mask->id] : NULL;
  if (mo.bound[0]) {
    LLVMValueRef o = to_i64(g, mo.off[0]);
    LLVMValueRef in = LLVMBuildAnd(g->B, LLVMBuildICmp(g->B, LLVMIntSGE, o, ci64(g, 0), ""),
                                   LLVMBuildICmp(g->B, LLVMIntSLT, o, to_i64(g, mo.bound[0]), ""), "");
    live = live ? LLVMBuildAnd(g->B, live, in, "") : in;
  }
  bool atomic = !load && (op->iattr[1] & KN_MEM_ATOMIC_ADD);
  if (atomic && (s != KN_F32 || !g->ops->atomic_fadd))
    return unsupported(g, op, "a store with atomic_add of anything but f32");
  /* atomic_add: thread 0 of the program adds, once */
  if (atomic)
    live = and_opt(g, live, LLVMBuildICmp(g->B, LLVMIntEQ, LLVMBuildOr(g->B, g->lane, g->warp, ""),
                                          ci32(g, 0), ""));
  guard gd = guard_open(g, live, load ? "ld" : atomic ? "red" : "st");
  LLVMValueRef x = NULL;
  if (atomic) g->ops->atomic_fadd(g, ptr, g->sv[mo.value->id]);
  else if (load) x = LLVMBuildLoad2(g->B, et, ptr, "");
  else x = LLVMBuildStore(g->B, g->sv[mo.value->id], ptr);
  if (x) LLVMSetAlignment(x, (unsigned)kn_scalar_size(s));
  guard_close(g, &gd);
  if (load)
    g->sv[op->res[0]->id] = guard_value(g, &gd, x, mo.other ? g->sv[mo.other->id] : LLVMConstNull(et));
  return 0;
}

static int lower_load(G *g, kn_op *op) {
  kn_value *res = op->res[0];
  if (res->type.kind != KN_TY_TILE) return lower_scalar_mem(g, op, true);
  /* copied into shared memory by cp.async where its dot needs it; no registers */
  if (async_staged(g, res)) return 0;
  access a;
  const kn_lmap *m = vmap(g, res);
  plan_access(g, op, m, res->type.elem, &a);
  LLVMValueRef *mask = NULL;
  for (int i = 0; i < op->nopnd; i++)
    if (op->opnd[i] == a.mo.mask) mask = opnd_regs(g, op, i);
  LLVMValueRef other = a.mo.other ? g->sv[a.mo.other->id] : LLVMConstNull(a.et);
  LLVMValueRef *out = new_regs(g, res);
  LLVMTypeRef vt = vec_ty(a.et, a.vec);
  LLVMValueRef otherv = other;
  if (a.vec > 1) {
    otherv = LLVMGetUndef(vt);
    for (int e = 0; e < a.vec; e++) otherv = LLVMBuildInsertElement(g->B, otherv, other, ci32(g, e), "");
  }
  /* off32 (AMDGPU): one buffer resource, per group an i32 offset and no branch */
  bool buf = (op->iattr[1] & KN_MEM_OFF32) && g->ops->buffer_load && res->type.elem != KN_I1;
  LLVMValueRef rsrc = buf ? g->ops->buffer_rsrc(g, g->sv[a.mo.base->id]) : NULL;
  LLVMValueRef toff = buf && exact_map(m) ? thread_off32(g, &a) : NULL;
  LLVMValueRef tptr = !buf && exact_map(m) ? thread_ptr(g, &a) : NULL;
  for (int r = 0; r < m->nregs; r += a.vec) {
    LLVMValueRef ptr, live, x;
    if (buf) {
      live = liveness(g, &a, mask, r);
      x = g->ops->buffer_load(g, rsrc, buffer_offset(g, &a, toff, live, r), a.esz * a.vec);
      x = LLVMBuildBitCast(g->B, x, vt, "");
      /* a dead element reads 0: `other` where it is given */
      if (live && a.mo.other) x = LLVMBuildSelect(g->B, live, x, otherv, "");
    } else {
      address(g, &a, tptr, mask, r, &ptr, &live);
      guard gd = guard_open(g, live, "ld");
      x = LLVMBuildLoad2(g->B, vt, ptr, "");
      LLVMSetAlignment(x, (unsigned)(a.esz * a.vec));
      guard_close(g, &gd);
      x = guard_value(g, &gd, x, otherv);
    }
    if (a.vec == 1) out[r] = x;
    else
      for (int e = 0; e < a.vec; e++) out[r + e] = LLVMBuildExtractElement(g->B, x, ci32(g, e), "");
  }
  return 0;
}

/* ---- atomic_add stores: each element added by one owner ----
 *
 * A plain store may write an element from every (warp, lane, register) that holds a copy of it
 * (the same value, whoever wins); an atomic add must add it once.  kn_lmap_owners (layout.h)
 * picks at compile time one owner per element from the value's map (registers that repeat an
 * earlier one are skipped, and the lane and warp bits that only make copies must be 0) and
 * checks by enumeration that it is exactly one; where it is not, the compile fails naming the
 * op and the layout: nothing is emitted that would add an element twice or never. */
typedef struct owners {
  bool *keep;             /* per register */
  unsigned lmask, wmask;  /* lane and warp bits that must be 0 */
} owners;

static int atomic_owners(G *g, const kn_op *op, const kn_value *v, const kn_lmap *m, owners *o) {
  o->keep = kn_arena_alloc(g->p->arena, sizeof *o->keep * (size_t)(m->nregs ? m->nregs : 1));
  int bad[2], nown;
  if (!kn_lmap_owners(m, g->p->warps, o->keep, &o->lmask, &o->wmask, bad, &nown)) return 0;
  char lay[160], ty[64];
  kn_layout_format(g->p->lay[v->id], lay, sizeof lay);
  kn_ty_format(v->type, ty, sizeof ty);
  if (!g->failed)
    kn_error(g->d, g->p->k->module, op->loc, "'store' with atomic_add of %s in layout %s: "
             "element [%d, %d] would be added by %d threads or registers (not 1), and no owner "
             "of its copies can be chosen from lane and warp bits", ty, lay, bad[0], bad[1],
             nown);
  g->failed = 1;
  return -1;
}

/* i1: this thread owns its kept registers (NULL: every thread does) */
static LLVMValueRef owner_pred(G *g, const owners *o) {
  LLVMValueRef own = NULL;
  for (int k = 0; k < 2; k++) {
    unsigned mk = k ? o->wmask : o->lmask;
    if (!mk) continue;
    LLVMValueRef bits = LLVMBuildAnd(g->B, k ? g->warp : g->lane, ci32(g, mk), "");
    LLVMValueRef zero = LLVMBuildICmp(g->B, LLVMIntEQ, bits, ci32(g, 0), "");
    own = own ? LLVMBuildAnd(g->B, own, zero, "") : zero;
  }
  return own;
}


static int lower_store(G *g, kn_op *op) {
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  if (mo.value->type.kind != KN_TY_TILE) return lower_scalar_mem(g, op, false);
  const kn_lmap *m = vmap(g, mo.value);
  access a;
  plan_access(g, op, m, mo.value->type.elem, &a);
  bool atomic = op->iattr[1] & KN_MEM_ATOMIC_ADD;
  owners own = {0};
  LLVMValueRef own_pred = NULL;
  if (atomic) {
    if (mo.value->type.elem != KN_F32 || !g->ops->atomic_fadd)
      return unsupported(g, op, "a store with atomic_add of anything but f32");
    if (atomic_owners(g, op, mo.value, m, &own)) return -1;
    own_pred = owner_pred(g, &own);
    a.vec = 1;  /* one atomic per element */
  }
  LLVMValueRef *mask = NULL;
  for (int i = 0; i < op->nopnd; i++)
    if (op->opnd[i] == mo.mask) mask = opnd_regs(g, op, i);
  LLVMValueRef *val = g->tv[mo.value->id];
  LLVMValueRef tptr = exact_map(m) ? thread_ptr(g, &a) : NULL;
  for (int r = 0; r < m->nregs; r += a.vec) {
    LLVMValueRef ptr, live, x;
    if (atomic && !own.keep[r]) continue;
    address(g, &a, tptr, mask, r, &ptr, &live);
    if (atomic) {
      guard gd = guard_open(g, and_opt(g, live, own_pred), "red");
      g->ops->atomic_fadd(g, ptr, val[r]);
      guard_close(g, &gd);
      continue;
    }
    if (a.vec == 1) x = val[r];
    else {
      x = LLVMGetUndef(vec_ty(a.et, a.vec));
      for (int e = 0; e < a.vec; e++) x = LLVMBuildInsertElement(g->B, x, val[r + e], ci32(g, e), "");
    }
    guard gd = guard_open(g, live, "st");
    LLVMValueRef s = LLVMBuildStore(g->B, x, ptr);
    LLVMSetAlignment(s, (unsigned)(a.esz * a.vec));
    guard_close(g, &gd);
  }
  return 0;
}

/* A gather: each thread loads the elements of its own registers, in the layout of the offsets
 * (the layout pass gives the result that layout), each at base + its offset and under its mask
 * register: one access per register, with whatever address each lane has.  A row gather
 * (gather.c: offsets in unit steps along an axis, aligned, the mask constant over each group)
 * reads groups of registers consecutive along that axis as one vector of up to 16 bytes, at
 * the group's first offset and under its first mask register. */
/* the address of register r's element of gather go (offsets registers offs, element type et) */
static LLVMValueRef gather_ptr(G *g, const kn_gather_operands *go, LLVMValueRef *offs, int r,
                               LLVMTypeRef et) {
  LLVMValueRef off = offs[r];
  if (go->offsets->type.elem != KN_I64) off = LLVMBuildSExt(g->B, off, g->i64, "");
  return LLVMBuildGEP2(g->B, et, g->sv[go->base->id], &off, 1, "");
}

static int lower_gather(G *g, kn_op *op) {
  kn_value *res = op->res[0];
  kn_gather_operands go;
  kn_gather_operands_get(op, &go);
  kn_scalar s = res->type.elem;
  LLVMTypeRef et = sty(g, s);
  /* copied into shared memory by cp.async where its dot needs it; no registers */
  if (async_staged(g, res)) return 0;
  LLVMValueRef *offs = opnd_regs(g, op, 1), *mask = go.mask ? opnd_regs(g, op, 2) : NULL;
  if (!offs || (go.mask && !mask))
    return fail(g, op, "internal: %s without registers for its offsets or mask", "gather");
  LLVMValueRef other = go.other ? g->sv[go.other->id] : LLVMConstNull(et);
  const kn_lmap *m = vmap(g, res);
  LLVMValueRef *out = new_regs(g, res);
  int esz = (int)kn_scalar_size(s), ax = kn_gpu_gather_axis(op), vec = 1;
  if (ax >= 0 && s != KN_I1) {
    vec = kn_lmap_vec(m, ax, 16 / esz);
    int w = kn_gpu_gather_vec(op, ax, vec);
    vec = w < vec ? w : vec;
  }
  LLVMTypeRef vt = vec_ty(et, vec);
  LLVMValueRef otherv = other;
  if (vec > 1) {
    otherv = LLVMGetUndef(vt);
    for (int e = 0; e < vec; e++) otherv = LLVMBuildInsertElement(g->B, otherv, other, ci32(g, e), "");
  }
  for (int r = 0; r < m->nregs; r += vec) {
    LLVMValueRef ptr = gather_ptr(g, &go, offs, r, et);
    guard gd = guard_open(g, mask ? mask[r] : NULL, "gather");
    LLVMValueRef x = LLVMBuildLoad2(g->B, vt, ptr, "");
    LLVMSetAlignment(x, (unsigned)(esz * vec));
    guard_close(g, &gd);
    x = guard_value(g, &gd, x, otherv);
    if (vec == 1) out[r] = x;
    else
      for (int e = 0; e < vec; e++) out[r + e] = LLVMBuildExtractElement(g->B, x, ci32(g, e), "");
  }
  return 0;
}

/* ---- dot ---- */

/* the fragment (n registers from r0) of a dot operand: from registers or from LDS */
static void fragment(G *g, kn_op *op, int i, LLVMValueRef *regs, const kn_lmap *m, int r0, int n,
                     LLVMValueRef *e);

/* ---- NVPTX: ldmatrix fragment reads and cp.async staging ----
 *
 * Shared layouts read with ldmatrix are XOR-swizzled in 16-byte chunks (kn_layout_shared_
 * swizzled with vec 8): element (row, col) of a tile with rows of L elements lives at
 *     row * L + 8 * ((col / 8) ^ ph(row)) + col % 8,   ph(row) = (row / per_phase) % max_phase
 * and per_phase * max_phase <= 8, so ph depends on row % 8 only.  One ldmatrix.x4 reads four
 * 8x8 matrices, lane l giving the address of row l % 8 of matrix l / 8.  Within one dot every
 * x4 reads its four matrices in the same relative pattern (row and chunk offsets from the
 * first), at origins whose row is a multiple of 8: so a lane's address is a per-thread pointer,
 * computed once in the entry block for each residue j of the origin's chunk modulo max_phase,
 * plus a compile-time constant.  At most max_phase (8) pointers per pattern. */

/* Inline PTX for ldmatrix and cp.async, NVPTX only (the AMDGPU leaves stay intrinsics, for the
 * emulated target).  Why not llvm.nvvm.ldmatrix / llvm.nvvm.cp.async.*: their shared-memory
 * operand is a 64-bit addrspace(3) pointer and the backend folds no offset into it, so every
 * fragment of the loop gets its own 64-bit address, and LICM hoists the loop-invariant ones
 * out of the KV loop: at D 128 with 4 warps about 25 register pairs held across the loop (255
 * registers and spills).  Written here, a shared address is one 32-bit register per thread
 * base plus an immediate ([%r + imm]), as CUDA C's __cvta_generic_to_shared code gets.
 * sideeffect keeps LLVM from hoisting, merging or reordering them across the barriers and
 * cp.async waits (which are intrinsics with memory effects); convergent because ldmatrix is a
 * warp-collective (.aligned) instruction. */
static LLVMValueRef nv_asm(G *g, LLVMTypeRef ret, const char *text, const char *cons,
                           LLVMValueRef *args, int n) {
  LLVMTypeRef *ts = malloc(sizeof(LLVMTypeRef) * (size_t)(n + 1));
  KN_ASSERT(ts);
  for (int i = 0; i < n; i++) ts[i] = LLVMTypeOf(args[i]);
  LLVMTypeRef ft = LLVMFunctionType(ret, ts, (unsigned)n, 0);
  free(ts);
  LLVMValueRef a = LLVMGetInlineAsm(ft, text, strlen(text), cons, strlen(cons), 1, 0,
                                    LLVMInlineAsmDialectATT, 0);
  LLVMValueRef c = LLVMBuildCall2(g->B, ft, a, args, (unsigned)n, "");
  unsigned kind = LLVMGetEnumAttributeKindForName("convergent", 10);
  LLVMAddCallSiteAttribute(c, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(g->C, kind, 0));
  return c;
}

/* the 32-bit shared-window address of an addrspace(3) pointer (shared memory is below 4 GiB) */
static LLVMValueRef smem_u32(LLVMBuilderRef b, G *g, LLVMValueRef p) {
  return LLVMBuildTrunc(b, LLVMBuildPtrToInt(b, p, g->i64, ""), g->i32, "");
}

static bool in_block(const kn_value *v, const kn_block *b) {
  for (const kn_block *vb = v->def ? v->def->parent : v->owner; vb;
       vb = vb->parent_op ? vb->parent_op->parent : NULL)
    if (vb == b) return true;
  return false;
}

/* the per-thread pointer of pattern (n matrices at row / chunk offsets ds, dch from the first)
 * for chunk residue j of conversion c's buffer, read through map m */
static LLVMValueRef ldsm_base_ptr(G *g, const kn_conversion *c, const kn_lmap *m, int n,
                                  const int *ds, const int *dch, int j) {
  int ci = (int)(c - g->p->conv);
  for (int i = 0; i < g->nldsm; i++) {
    ldsm_base *e = &g->ldsm[i];
    if (e->conv == ci && e->n == n && e->j == j && !memcmp(e->ds, ds, sizeof e->ds) &&
        !memcmp(e->dch, dch, sizeof e->dch))
      return e->p;
  }
  const kn_layout *s = &c->shared;
  int inner = s->order[0], srow = 1 - inner;
  int row = m->shape[inner] + s->pad, pp = s->per_phase, mp = s->max_phase;
  int esz = (int)kn_scalar_size(c->value->type.elem);
  LLVMBuilderRef E = g->E;
  LLVMValueRef q = LLVMBuildAnd(E, LLVMBuildLShr(E, g->lane, ci32(g, 3), ""), ci32(g, n - 1), "");
  LLVMValueRef i = LLVMBuildAnd(E, g->lane, ci32(g, 7), "");
  LLVMValueRef dq = ci32(g, ds[0]), cq = ci32(g, dch[0]);
  for (int k = 1; k < n; k++) {
    LLVMValueRef is = LLVMBuildICmp(E, LLVMIntEQ, q, ci32(g, k), "");
    dq = LLVMBuildSelect(E, is, ci32(g, ds[k]), dq, "");
    cq = LLVMBuildSelect(E, is, ci32(g, dch[k]), cq, "");
  }
  LLVMValueRef rr = LLVMBuildAdd(E, dq, i, ""), cc = cq;
  for (int b = 0; b < m->warp_bits; b++) {
    LLVMValueRef bit = LLVMBuildAnd(E, LLVMBuildLShr(E, g->warp, ci32(g, b), ""), ci32(g, 1), "");
    if (m->warp[b][srow]) rr = LLVMBuildAdd(E, rr, LLVMBuildMul(E, bit, ci32(g, m->warp[b][srow]), ""), "");
    if (m->warp[b][inner]) cc = LLVMBuildAdd(E, cc, LLVMBuildMul(E, bit, ci32(g, m->warp[b][inner] / 8), ""), "");
  }
  LLVMValueRef ph = LLVMBuildURem(E, LLVMBuildUDiv(E, rr, ci32(g, pp), ""), ci32(g, mp), "");
  LLVMValueRef x = LLVMBuildAdd(E, cc, ci32(g, j), "");
  LLVMValueRef hi = LLVMBuildMul(E, LLVMBuildUDiv(E, x, ci32(g, mp), ""), ci32(g, mp), "");
  LLVMValueRef lo = LLVMBuildXor(E, LLVMBuildURem(E, x, ci32(g, mp), ""), ph, "");
  LLVMValueRef off = LLVMBuildAdd(E, LLVMBuildMul(E, rr, ci32(g, row), ""),
                                  LLVMBuildMul(E, LLVMBuildAdd(E, hi, lo, ""), ci32(g, 8), ""), "");
  off = LLVMBuildAdd(E, ci32(g, (long long)g->p->buf[c->buffer].offset),
                     LLVMBuildMul(E, off, ci32(g, esz), ""), "");
  off = LLVMBuildZExt(E, off, g->i64, "");
  LLVMValueRef p = smem_u32(E, g, LLVMBuildGEP2(E, g->i8, g->lds, &off, 1, "ldsm.base"));
  if (g->nldsm == g->capldsm) {
    g->capldsm = g->capldsm ? 2 * g->capldsm : 16;
    g->ldsm = realloc(g->ldsm, sizeof *g->ldsm * (size_t)g->capldsm);
    KN_ASSERT(g->ldsm);
  }
  ldsm_base *e = &g->ldsm[g->nldsm++];
  memset(e, 0, sizeof *e);
  e->conv = ci, e->n = n, e->j = j, e->p = p;
  memcpy(e->ds, ds, sizeof e->ds);
  memcpy(e->dch, dch, sizeof e->dch);
  return p;
}

/* One ldmatrix (.x2 or .x4, .trans when the shared rows run along k's other dim): the register
 * pairs starting at regs[0..n) of map m (each pair one 8x8 matrix, as the layout pass checked)
 * into out[2 * k], out[2 * k + 1]. */
static void ldsm_read(G *g, const kn_conversion *c, const kn_lmap *m, int kdim, const int *regs,
                      int n, LLVMValueRef *out) {
  const kn_layout *s = &c->shared;
  int inner = s->order[0], srow = 1 - inner, mp = s->max_phase;
  int row = m->shape[inner] + s->pad, esz = (int)kn_scalar_size(c->value->type.elem);
  int ds[4] = {0}, dch[4] = {0};
  int S = m->reg[regs[0]][srow], Ch = m->reg[regs[0]][inner] / 8;
  for (int k = 0; k < n; k++) {
    ds[k] = m->reg[regs[k]][srow] - S;
    dch[k] = m->reg[regs[k]][inner] / 8 - Ch;
  }
  int j = Ch % mp;
  LLVMValueRef base = ldsm_base_ptr(g, c, m, n, ds, dch, j);
  LLVMValueRef args[2] = {base, ci32(g, ((long long)S * row + 8LL * (Ch - j)) * esz)};
  bool trans = inner != kdim;
  char text[120];
  snprintf(text, sizeof text, "ldmatrix.sync.aligned.m8n8.x%d%s.shared.b16 %s, [$%d+$%d];", n,
           trans ? ".trans" : "", n == 4 ? "{$0, $1, $2, $3}" : "{$0, $1}", n, n + 1);
  LLVMTypeRef el[4] = {g->i32, g->i32, g->i32, g->i32};
  LLVMValueRef r = nv_asm(g, LLVMStructTypeInContext(g->C, el, (unsigned)n, 0), text,
                          n == 4 ? "=r,=r,=r,=r,r,n" : "=r,=r,r,n", args, 2);
  LLVMTypeRef et = sty(g, c->value->type.elem);
  for (int q = 0; q < n; q++) {
    LLVMValueRef v = LLVMBuildBitCast(g->B, LLVMBuildExtractValue(g->B, r, (unsigned)q, ""),
                                      LLVMVectorType(et, 2), "");
    out[2 * q] = LLVMBuildExtractElement(g->B, v, ci32(g, 0), "");
    out[2 * q + 1] = LLVMBuildExtractElement(g->B, v, ci32(g, 1), "");
  }
}

/* Recomputes the scalars of the loop body that `v` depends on for induction value iv (the
 * layout pass checked they are scalar ops of the body on iv and values defined outside:
 * remat_ok), each by its own lowering, setting g->sv for them; the old entries are pushed on
 * saved[] for the caller to restore (in reverse order: a value reached twice is pushed twice). */
typedef struct sv_saved {
  int id;
  LLVMValueRef old;
} sv_saved;
enum { REMAT_MAX = 256 };

static int lower_op(G *g, kn_op *op);

static void remat(G *g, kn_value *v, LLVMValueRef iv, sv_saved *saved, int *ns) {
  kn_block *body = g->loop_body;
  int arg = -1;  /* v is the body's argument arg (0: the induction variable, else carried) */
  for (int i = 0; i < body->nargs && arg < 0; i++)
    if (v == body->args[i]) arg = i;
  if (arg < 0 && !in_block(v, body)) return;
  if (arg < 0)
    for (int i = 0; i < v->def->nopnd; i++) remat(g, v->def->opnd[i], iv, saved, ns);
  KN_ASSERT(*ns < REMAT_MAX);
  saved[*ns].id = v->id;
  saved[*ns].old = g->sv[v->id];
  (*ns)++;
  if (arg == 0) {
    g->sv[v->id] = iv;
  } else if (arg > 0) {
    /* a carried scalar: in the prologue its init, else what this iteration yields for the next
     * (computed before the prefetch: the layout pass's remat_ok checked its position) */
    const kn_op *loop = body->parent_op;
    KN_ASSERT(body->last && body->last->opc == KN_OP_YIELD);
    const kn_value *x = g->remat_init ? loop->opnd[3 + arg - 1] : body->last->opnd[arg - 1];
    g->sv[v->id] = g->sv[x->id];
    KN_ASSERT(g->sv[v->id]);
  } else {
    lower_op(g, v->def);
  }
}

/* ---- reading a block one iteration ahead (AMDGPU, off32) ----
 *
 * A loop's first off32 tile load at the top level of its body (the forward's K block) is read
 * one iteration ahead into registers: the prologue loads the first iteration's, the body's load
 * stands for phis of them, and after the dot that reads them (lower_dot; else at the end of the
 * body) the next iteration's are loaded at iv + step, in flight while the rest of this iteration
 * computes.  A buffer load never faults (a dead element reads 0 at the resource's end, a live
 * one lies in its slab by the clause), so the read past the last iteration needs no guard. */

/* can scalar v be recomputed at another induction value: defined outside the body, the
 * induction variable, or scalar arithmetic of the body's top level on such values */
static bool ahead_ok(const kn_value *v, const kn_block *body, int depth) {
  if (v == body->args[0] || !in_block(v, body)) return true;
  const kn_op *d = v->def;
  if (depth > 24 || !d || d->parent != body || d->nres != 1 || v->type.kind == KN_TY_TILE)
    return false;
  switch (d->opc) {
  KN_CASES_BINARY
  KN_CASES_UNARY
  case KN_OP_CAST: case KN_OP_MULTIPLE_OF: case KN_OP_MAX_CONTIGUOUS: case KN_OP_CMP:
  case KN_OP_SELECT: case KN_OP_PTRADD: case KN_OP_CONST:
    break;
  default: return false;
  }
  for (int i = 0; i < d->nopnd; i++)
    if (!ahead_ok(d->opnd[i], body, depth + 1)) return false;
  return true;
}

/* the load of body read one iteration ahead, or NULL */
static kn_op *ahead_load(G *g, const kn_block *body) {
  if (!g->ops->buffer_load) return NULL;
  for (kn_op *op = body->first; op; op = op->next) {
    if (op->opc != KN_OP_LOAD || op->res[0]->type.kind != KN_TY_TILE ||
        !(op->iattr[1] & KN_MEM_OFF32) || op->res[0]->type.elem == KN_I1 ||
        async_staged(g, op->res[0]))
      continue;
    for (int i = 0; i < op->nopnd; i++)
      if (!ahead_ok(op->opnd[i], body, 0)) return NULL;
    return op;
  }
  return NULL;
}

/* the registers of load ld at induction value iv (its scalar operands recomputed there) */
static LLVMValueRef *load_at(G *g, kn_op *ld, LLVMValueRef iv) {
  sv_saved saved[REMAT_MAX];
  int ns = 0;
  for (int i = 0; i < ld->nopnd; i++) remat(g, ld->opnd[i], iv, saved, &ns);
  kn_value *res = ld->res[0];
  LLVMValueRef *keep = g->tv[res->id];
  lower_load(g, ld);
  LLVMValueRef *r = g->tv[res->id];
  g->tv[res->id] = keep;
  while (ns > 0) {
    ns--;
    g->sv[saved[ns].id] = saved[ns].old;
  }
  return r;
}

/* the next iteration's registers of the loop's read-ahead load, once */
static void load_ahead(G *g) {
  if (g->pf_load && !g->pf_next)
    g->pf_next = load_at(g, g->pf_load, LLVMBuildAdd(g->B, g->loop_iv, g->loop_step, ""));
}

/* cp.async.cg 16-byte copies of conversion c's load straight into its shared layout, at
 * induction value iv (NULL: the current iteration's values).  Each thread copies the 16-byte
 * chunks its blocked layout would have loaded; a chunk past the load's bounds is zero-filled
 * (src-size 0: nothing is read) from the tile's first element's address. */
static void issue_copies(G *g, const kn_conversion *c, LLVMValueRef iv) {
  wg_wait_bytes(g, c);  /* a wgmma in flight may still read the bytes copied here */
  kn_op *ld = c->value->def;
  sv_saved saved[REMAT_MAX];
  int ns = 0;
  if (iv)
    for (int i = 0; i < ld->nopnd; i++) remat(g, ld->opnd[i], iv, saved, &ns);
  const kn_lmap *m = vmap(g, c->value);
  access a;
  /* a row gather (async_ok): each vector's address from its offsets register, its liveness
   * from its mask register; never one iteration ahead (its offsets are a tile of this one) */
  bool gat = ld->opc == KN_OP_GATHER;
  kn_gather_operands go;
  LLVMValueRef *goffs = NULL, *gmask = NULL;
  if (gat) {
    KN_ASSERT(!iv);
    kn_gather_operands_get(ld, &go);
    goffs = opnd_regs(g, ld, 1);
    gmask = go.mask ? opnd_regs(g, ld, 2) : NULL;
    KN_ASSERT(goffs && (!go.mask || gmask));
    a = (access){.et = sty(g, c->value->type.elem), .esz = (int)kn_scalar_size(c->value->type.elem),
                 .contig = kn_gpu_gather_axis(ld)};
    a.vec = 16 / a.esz;
    KN_ASSERT(kn_lmap_vec(m, a.contig, a.vec) == a.vec);
  } else {
    plan_access(g, ld, m, c->value->type.elem, &a);
  }
  KN_ASSERT(a.vec * a.esz == 16 && a.contig == c->shared.order[0]);
  const kn_layout *s = &c->shared;
  int inner = s->order[0], outer = 1 - inner;
  int shape[2] = {m->shape[0], m->shape[1]};
  long long row = shape[inner] + s->pad;
  /* destination: the thread's base offset once (entry block) plus a constant per chunk, when
   * every chunk keeps the base's phase and chunk residue; else from the coordinates */
  bool affine = exact_map(m);
  for (int r = 0; r < m->nregs && affine; r += a.vec)
    affine = m->reg[r][outer] % 8 == 0 && m->reg[r][inner] % (8 * s->max_phase) == 0 &&
             (!s->cblock || m->reg[r][inner] % s->cblock == 0);
  LLVMValueRef dbase = NULL;
  if (affine) {
    LLVMValueRef b[2];
    base_of(g, m, b);
    LLVMBuilderRef keep = g->B;
    g->B = g->E;
    LLVMValueRef off = shared_off(g, s, shape, b[0], b[1]);
    off = LLVMBuildAdd(g->B, ci32(g, (long long)g->p->buf[c->buffer].offset),
                       LLVMBuildMul(g->B, off, ci32(g, a.esz), ""), "");
    off = LLVMBuildZExt(g->B, off, g->i64, "");
    dbase = smem_u32(g->B, g, LLVMBuildGEP2(g->B, g->i8, g->lds, &off, 1, "cp.dst"));
    g->B = keep;
  }
  LLVMValueRef tptr = !gat && exact_map(m) ? thread_ptr(g, &a) : NULL;
  LLVMValueRef zero_src = NULL, src_base = g->sv[(gat ? go.base : a.mo.base)->id];
  for (int r = 0; r < m->nregs; r += a.vec) {
    LLVMValueRef src, live, dst, k;
    if (gat) {
      src = gather_ptr(g, &go, goffs, r, a.et);
      live = gmask ? gmask[r] : NULL;
    } else {
      address(g, &a, tptr, NULL, r, &src, &live);
    }
    if (dbase) {
      /* column blocks: a register whose inner offset is whole blocks keeps the base's place
       * within its block */
      long long kk = s->cblock ? (long long)m->reg[r][inner] * shape[outer] +
                                     (long long)m->reg[r][outer] * s->cblock
                               : m->reg[r][outer] * row + m->reg[r][inner];
      dst = dbase;
      k = ci32(g, kk * a.esz);
    } else {
      dst = smem_u32(g->B, g, shared_reg_ptr(g, c, m, r, shape));
      k = ci32(g, 0);
    }
    LLVMValueRef size = ci32(g, 16);
    if (live) {
      if (!zero_src) {
        LLVMValueRef z = ci64(g, 0);
        zero_src = LLVMBuildGEP2(g->B, a.et, src_base, &z, 1, "");
      }
      size = LLVMBuildSelect(g->B, live, size, ci32(g, 0), "");
      src = LLVMBuildSelect(g->B, live, src, zero_src, "");
    }
    LLVMValueRef args[4] = {dst, k, src, size};
    nv_asm(g, g->vd, "cp.async.cg.shared.global [$0+$1], [$2], 16, $3;", "r,n,l,r", args, 4);
  }
  while (ns > 0) {
    ns--;
    g->sv[saved[ns].id] = saved[ns].old;
  }
}

static void cp_commit(G *g) { call(g, "llvm.nvvm.cp.async.commit.group", g->vd, NULL, 0); }

/* wait until at most n of this thread's committed copy groups are in flight */
static void cp_wait(G *g, int n) {
  LLVMValueRef z = ci32(g, n);
  call(g, "llvm.nvvm.cp.async.wait.group", g->vd, &z, 1);
}
static void cp_wait_all(G *g) { cp_wait(g, 0); }

/* issues the copies of loop's ASYNC_EARLY operands, one group */
static void issue_early(G *g, const kn_op *loop) {
  for (int i = 0; i < g->p->nconv; i++) {
    const kn_conversion *o = &g->p->conv[i];
    if (o->stage == KN_STAGE_ASYNC_EARLY && o->loop == loop) issue_copies(g, o, NULL);
  }
  cp_commit(g);
}

/* issues the copies of loop's heads for induction value iv (not committed); false: it has none */
static bool issue_heads(G *g, const kn_op *loop, LLVMValueRef iv) {
  bool any = false;
  for (int i = 0; i < g->p->nconv; i++)
    if (g->p->conv[i].stage == KN_STAGE_ASYNC_HEAD && g->p->conv[i].loop == loop) {
      if (iv) issue_copies(g, &g->p->conv[i], iv);
      any = true;
    }
  return any;
}

/* what a dot does before reading operand c from shared memory (gpu.h, kn_stage_kind) */
static void stage_for_dot(G *g, const kn_conversion *c) {
  switch (c->stage) {
  case KN_STAGE_AT_DOT: stage_store(g, c); break;
  case KN_STAGE_ONCE: break;
  case KN_STAGE_ASYNC_AT_DOT:
    barrier(g);                 /* earlier readers of the buffer are done */
    issue_copies(g, c, NULL);
    cp_commit(g);
    cp_wait_all(g);
    proxy_fence(g, c);
    barrier(g);                 /* every thread's copies have landed */
    break;
  case KN_STAGE_ASYNC_HEAD:
    if (c->follow) break;  /* landed with the first head's */
    /* this iteration's copy (issued one iteration ahead) has landed for every thread, and
     * every thread is past the last streamed dot of the previous iteration: the other
     * streamed buffers may be refilled now, overlapping this dot */
    cp_wait_all(g);
    proxy_fence(g, c);
    barrier(g);
    issue_early(g, c->loop);
    break;
  case KN_STAGE_ASYNC_LEAD:
    /* every reader of this iteration's buffers (last iteration's dots) is done; this copy and
     * the early ones in flight together, this dot waiting for its own only (the older group) */
    barrier(g);
    issue_copies(g, c, NULL);
    cp_commit(g);
    issue_early(g, c->loop);
    cp_wait(g, 1);
    proxy_fence(g, c);
    barrier(g);
    break;
  case KN_STAGE_ASYNC_EARLY:
    if (!c->follow) {           /* else landed with the first early one's, past its barrier */
      cp_wait_all(g);
      proxy_fence(g, c);
      barrier(g);               /* its copies landed; the heads' buffers are read by no one */
    }
    if (c->issue_head) {
      KN_ASSERT(issue_heads(g, c->loop, NULL) && g->loop_iv);
      LLVMValueRef next = LLVMBuildAdd(g->B, g->loop_iv, g->loop_step, "");
      LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(g->C, g->fn, "prefetch");
      LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(g->C, g->fn, "prefetch.join");
      LLVMBuildCondBr(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, next, g->loop_hi, ""), yes, join);
      LLVMPositionBuilderAtEnd(g->B, yes);
      issue_heads(g, c->loop, next);
      LLVMBuildBr(g->B, join);
      LLVMPositionBuilderAtEnd(g->B, join);
      cp_commit(g);
    }
    break;
  }
}

/* dot with at least one operand read by ldmatrix: k step by k step, each A fragment read once
 * for all n tiles and each B fragment once for all m tiles (the register-staged order reads a
 * lazily staged B once per m tile) */
static int lower_dot_ldsm(G *g, kn_op *op, const kn_mma_shape *s, kn_scalar t, bool transposed,
                          LLVMValueRef *ra, LLVMValueRef *rb, const kn_lmap *ma,
                          const kn_lmap *mb, LLVMValueRef *acc, LLVMValueRef *out) {
  kn_value *res = op->res[0], *A = op->opnd[0];
  const kn_conversion *ca = kn_plan_conversion(g->p, op, 0), *cb = kn_plan_conversion(g->p, op, 1);
  int M = res->type.shape[0], N = res->type.shape[1], K = A->type.shape[1];
  int reps_m = M / g->p->warps / s->m, reps_n = N / s->n, reps_k = K / s->k;
  if (s->a_regs != 8 || s->b_regs != 4 || reps_m > 16) return -1;
  int nacc = reps_m * reps_n * s->acc_regs;
  memcpy(out, acc, sizeof(LLVMValueRef) * (size_t)nacc);
  for (int kr = 0; kr < reps_k; kr++) {
    LLVMValueRef af[16][8];
    for (int mr = 0; mr < reps_m; mr++) {
      int r0 = (mr * reps_k + kr) * s->a_regs;
      if (!ra && ca && ca->ldsm) {
        int regs[4] = {r0, r0 + 2, r0 + 4, r0 + 6};
        ldsm_read(g, ca, ma, 1, regs, 4, af[mr]);
      } else {
        fragment(g, op, 0, ra, ma, r0, s->a_regs, af[mr]);
      }
    }
    for (int nr = 0; nr < reps_n; nr += 2) {
      int nn = nr + 1 < reps_n && !rb && cb && cb->ldsm ? 2 : 1;
      LLVMValueRef bf[2][8];
      if (!rb && cb && cb->ldsm) {
        int r0 = (nr * reps_k + kr) * s->b_regs, r1 = ((nr + 1) * reps_k + kr) * s->b_regs;
        int regs[4] = {r0, r0 + 2, r1, r1 + 2};
        LLVMValueRef tmp[8];
        ldsm_read(g, cb, mb, 0, regs, 2 * nn, tmp);
        memcpy(bf[0], tmp, sizeof(LLVMValueRef) * 4);
        if (nn == 2) memcpy(bf[1], tmp + 4, sizeof(LLVMValueRef) * 4);
      } else {
        fragment(g, op, 1, rb, mb, (nr * reps_k + kr) * s->b_regs, s->b_regs, bf[0]);
      }
      for (int x = 0; x < nn; x++)
        for (int mr = 0; mr < reps_m; mr++) {
          LLVMValueRef *c = out + (mr * reps_n + nr + x) * s->acc_regs;
          if (g->ops->mma(g, s, t, transposed, af[mr], bf[x], c)) return -1;
        }
      if (nn == 1 && nr + 1 < reps_n) nr--;  /* one fragment at a time: step by 1 */
    }
  }
  return 0;
}

/* ---- NVPTX: wgmma ----
 *
 * wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16} (PTX ISA 8.0, sm_90a), inline
 * PTX: LLVM 22 has no intrinsic for the MMA itself.  One instruction per k step of 16 covers the
 * warpgroup's 64 rows and the dot's whole N; A comes from registers (the per-warp m16n8k16 A
 * fragment, kn_mma_shape KN_MMA_NV_WG64), B from shared memory through a 64-bit matrix
 * descriptor (PTX ISA, "Matrix Descriptor Format"):
 *     bits 0-13  (start address & 0x3FFFF) >> 4       bits 16-29  leading byte offset >> 4
 *     bits 32-45 stride byte offset >> 4              bits 49-51  base offset (0: the buffer is
 *     bits 62-63 swizzle: 1 = 128 bytes                           1024-byte aligned)
 * over the canonical 128-byte swizzled layout (kn_layout_shared_wgmma).  K-major B (K^T of
 * S = QK^T: shared rows are n, elements k): SBO = 1024 (8 rows of 128 bytes), LBO unused (1), a
 * k step starts k * 2 bytes into its column block.  N-major B (V of O += PV, rows are k,
 * elements n; imm-trans-b = 1): SBO = 1024 (8 k rows), LBO = one column block (64 n of every k
 * row), a k step starts k rows in.  The accumulator is the m16n8 C fragment repeated N/8 times,
 * d[4j..4j+3], which is the mma layout's register order.
 *
 * Ordering (PTX ISA, "wgmma.fence", "wgmma.commit_group", "wgmma.wait_group"): wgmma.fence
 * before the first wgmma, after the registers it reads (A, the accumulator) were written;
 * commit_group after the dot's instructions, wait_group 0 before the accumulator is read.  The
 * fence and the wait take the registers they order as tied operands ("+r" / "+f"), so LLVM can
 * neither compute A or the accumulator after the fence nor read the result before the wait. */

/* inline PTX whose operands $0..$(n-1) are v[0..n) in and out (tied: each comes back as the
 * asm's result, v[] updated), followed by nx further inputs x[] with constraints xcons
 * ("r,l,...", NULL when nx is 0) */
static void nv_asm_tied(G *g, const char *text, LLVMValueRef *v, int n, LLVMValueRef *x,
                        const char *xcons, int nx) {
  LLVMTypeRef *ts = malloc(sizeof(LLVMTypeRef) * (size_t)(2 * n + nx + 1));
  LLVMValueRef *args = malloc(sizeof(LLVMValueRef) * (size_t)(n + nx + 1));
  size_t cap = (size_t)(n * 10 + 16) + (xcons ? strlen(xcons) : 0), len = 0;
  char *cons = malloc(cap);
  KN_ASSERT(ts && args && cons);
  cons[0] = 0;
  for (int i = 0; i < n; i++) {
    ts[i] = LLVMTypeOf(v[i]);
    len += (size_t)snprintf(cons + len, cap - len, "%s=%s", i ? "," : "", ts[i] == g->f32 ? "f" : "r");
  }
  for (int i = 0; i < n; i++) {
    args[i] = v[i];
    len += (size_t)snprintf(cons + len, cap - len, ",%d", i);
  }
  for (int i = 0; i < nx; i++) args[n + i] = x[i];
  if (nx) snprintf(cons + len, cap - len, "%s%s", n ? "," : "", xcons);
  LLVMTypeRef ret = n == 0 ? g->vd : n == 1 ? ts[0] : LLVMStructTypeInContext(g->C, ts, (unsigned)n, 0);
  LLVMValueRef r = nv_asm(g, ret, text, cons, args, n + nx);
  if (n == 1) v[0] = r;
  else
    for (int i = 0; i < n; i++) v[i] = LLVMBuildExtractValue(g->B, r, (unsigned)i, "");
  free(ts);
  free(args);
  free(cons);
}

/* ---- wgmma groups in flight ----
 * A wgmma dot is issued and committed as one group, and its wait is deferred: g->wg lists the
 * groups not yet waited for, oldest first.  Before an op reads a dot's result, wg_wait_for
 * waits with "wgmma.wait_group N", N the groups issued after it (groups complete in order), so
 * the dots after it and the elementwise work between stay in flight.  Every register an
 * awaited group owns, its accumulator and the A registers it reads, passes through the wait as
 * a tied operand: LLVM reads none of the results before the wait and ptxas keeps the A
 * registers until it.  Everything else waits for all groups first (wg_wait_all): an op other
 * than elementwise ops, loads, renamings and dots (control flow, reductions, permutes,
 * stores).  A write to shared memory (stage_store, issue_copies) first waits for the groups
 * that read bytes it overwrites (wg_wait_bytes: buffers whose live ranges do not overlap share
 * bytes, and a buffer is refilled for the next iteration).  KILN_WGMMA_SERIAL=1 waits at each
 * dot instead. */
static void wg_wait_upto(G *g, int last) {
  if (last < 0) return;
  int n = 0;
  for (int i = 0; i <= last; i++) n += vmap(g, g->wg[i].v)->nregs + g->wg[i].na;
  LLVMValueRef *r = malloc(sizeof(LLVMValueRef) * (size_t)(n ? n : 1));
  KN_ASSERT(r);
  int k = 0;
  for (int i = 0; i <= last; i++) {
    int nv = vmap(g, g->wg[i].v)->nregs;
    memcpy(r + k, g->tv[g->wg[i].v->id], sizeof(LLVMValueRef) * (size_t)nv);
    memcpy(r + k + nv, g->wg[i].a, sizeof(LLVMValueRef) * (size_t)g->wg[i].na);
    k += nv + g->wg[i].na;
  }
  char text[64];
  snprintf(text, sizeof text, "wgmma.wait_group.sync.aligned %d;", g->nwg - 1 - last);
  nv_asm_tied(g, text, r, n, NULL, NULL, 0);
  k = 0;
  for (int i = 0; i <= last; i++) {
    int nv = vmap(g, g->wg[i].v)->nregs;
    memcpy(g->tv[g->wg[i].v->id], r + k, sizeof(LLVMValueRef) * (size_t)nv);
    k += nv + g->wg[i].na;
    free(g->wg[i].a);
  }
  free(r);
  memmove(g->wg, g->wg + last + 1, sizeof g->wg[0] * (size_t)(g->nwg - last - 1));
  g->nwg -= last + 1;
}

static void wg_wait_all(G *g) { wg_wait_upto(g, g->nwg - 1); }

/* waits for v when it is the result of a group in flight (and for the groups before it) */
static void wg_wait_for(G *g, const kn_value *v) {
  for (int i = g->nwg - 1; i >= 0; i--)
    if (g->wg[i].v == v) {
      wg_wait_upto(g, i);
      return;
    }
}

/* waits for the newest group in flight that reads any byte of conversion c's buffer (and so
 * for every older one) */
static void wg_wait_bytes(G *g, const kn_conversion *c) {
  int64_t lo = g->p->buf[c->buffer].offset, hi = lo + g->p->buf[c->buffer].bytes;
  for (int i = g->nwg - 1; i >= 0; i--)
    for (int k = 0; k < 2; k++)
      if (g->wg[i].lo[k] < hi && lo < g->wg[i].hi[k]) {
        wg_wait_upto(g, i);
        return;
      }
}

/* may op run while wgmma groups are in flight (waiting only for its own operands)? */
static bool wg_may_overlap(const kn_op *op) {
  switch (op->opc) {
  case KN_OP_PROGRAM_ID: case KN_OP_NUM_PROGRAMS: case KN_OP_CONST: case KN_OP_SPLAT:
  case KN_OP_ARANGE: case KN_OP_BROADCAST: case KN_OP_EXPAND_DIMS: case KN_OP_PTRADD:
  case KN_OP_LOAD: case KN_OP_DOT: case KN_OP_CMP: case KN_OP_SELECT: case KN_OP_CAST:
  case KN_OP_MULTIPLE_OF: case KN_OP_MAX_CONTIGUOUS:
  KN_CASES_BINARY
  KN_CASES_UNARY
    return true;
  default:
    return false;
  }
}

/* the descriptor of conversion c's buffer at its start (entry block): address, LBO, SBO and the
 * 128-byte swizzle; a k step adds its byte offset >> 4 */
static LLVMValueRef wgmma_desc_base(G *g, const kn_conversion *c, kn_wgmma_desc wd) {
  long long lbo = wd.lbo, sbo = wd.sbo;
  LLVMBuilderRef E = g->E;
  LLVMValueRef off = ci64(g, (long long)g->p->buf[c->buffer].offset);
  LLVMValueRef a = smem_u32(E, g, LLVMBuildGEP2(E, g->i8, g->lds, &off, 1, ""));
  /* the swizzle is the address bits': a shared array the driver did not place on a 1024-byte
   * boundary (it is declared .align 1024) would read wrong elements silently, so trap instead */
  LLVMValueRef mis = LLVMBuildAnd(E, smem_u32(E, g, g->lds), ci32(g, 1023), "");
  LLVMBuilderRef keep = g->B;
  g->B = E;
  nv_asm(g, g->vd, "{\n.reg .pred q;\nsetp.ne.b32 q, $0, 0;\n@q trap;\n}", "r", &mis, 1);
  g->B = keep;
  a = LLVMBuildLShr(E, LLVMBuildAnd(E, a, ci32(g, 0x3FFFF), ""), ci32(g, 4), "");
  unsigned long long hi = ((unsigned long long)(lbo >> 4) << 16) |
                          ((unsigned long long)(sbo >> 4) << 32) | (1ULL << 62);
  return LLVMBuildOr(E, LLVMBuildZExt(E, a, g->i64, ""), LLVMConstInt(g->i64, hi, 0), "wgmma.desc");
}

/* is v the constant 0 (a zero tile, or a splat of a zero scalar)? */
static bool const_zero(const kn_value *v) {
  const kn_op *d = v->def;
  if (d && d->opc == KN_OP_SPLAT) d = d->opnd[0]->def;
  return d && d->opc == KN_OP_CONST && kn_scalar_is_float(v->type.elem) && d->fattr == 0.0;
}

static int lower_dot_wgmma(G *g, kn_op *op, kn_scalar t, LLVMValueRef *ra, const kn_lmap *ma,
                           LLVMValueRef *acc, LLVMValueRef *out) {
  kn_value *res = op->res[0], *A = op->opnd[0], *Bv = op->opnd[1];
  const kn_conversion *ca = kn_plan_conversion(g->p, op, 0), *cb = kn_plan_conversion(g->p, op, 1);
  int M = res->type.shape[0], N = res->type.shape[1], K = A->type.shape[1];
  if (!cb || !cb->desc || M != 16 * g->p->warps || N % 8 || N > 256 || K % 16 ||
      cb->shared.cblock == 0)
    return -1;
  int nacc = N / 2, ksteps = K / 16;
  int bshape[2] = {Bv->type.shape[0], Bv->type.shape[1]}, ashape[2] = {M, K};
  int esz = (int)kn_scalar_size(t);
  kn_wgmma_desc bd = kn_wgmma_desc_for(&cb->shared, bshape, esz, 0);
  bool trans = bd.trans;  /* N-major B */
  LLVMValueRef desc = wgmma_desc_base(g, cb, bd);
  /* A through a descriptor (a K-major operand staged once): no A registers; warpgroup wg reads
   * rows 64 wg.. (a fixed byte step for every k step) */
  bool adesc = ca && ca->desc, atrans = false;
  LLVMValueRef a_desc = NULL;
  if (adesc) {
    kn_wgmma_desc ad = kn_wgmma_desc_for_a(&ca->shared, ashape, esz, 0, 0);
    if (ca->shared.cblock == 0) return -1;
    atrans = ad.trans;  /* M-major A (K^T of dQ^T = K^T dS^T) */
    a_desc = wgmma_desc_base(g, ca, ad);
    if (g->p->warps > 4) {
      int64_t step = kn_wgmma_desc_for_a(&ca->shared, ashape, esz, 64, 0).start - ad.start;
      for (int kr = 0; kr < ksteps; kr++)
        if (kn_wgmma_desc_for_a(&ca->shared, ashape, esz, 64, 16 * kr).start -
                kn_wgmma_desc_for_a(&ca->shared, ashape, esz, 0, 16 * kr).start != step)
          return -1;
      LLVMValueRef wg = LLVMBuildZExt(g->B, LLVMBuildLShr(g->B, g->warp, ci32(g, 2), ""), g->i64, "");
      a_desc = LLVMBuildAdd(g->B, a_desc, LLVMBuildMul(g->B, wg, ci64(g, step >> 4), ""), "wgmma.adesc");
    }
  }
  /* A: four 32-bit pairs per k step, in the fragment's order (a0a1, a2a3, a4a5, a6a7) */
  int nw = adesc ? 0 : 4 * ksteps;
  LLVMValueRef *w = malloc(sizeof(LLVMValueRef) * (size_t)(nw + nacc));
  KN_ASSERT(w);
  for (int kr = 0; kr < ksteps && !adesc; kr++) {
    LLVMValueRef af[8];
    int r0 = kr * 8;
    if (!ra && ca && ca->ldsm) {
      int regs[4] = {r0, r0 + 2, r0 + 4, r0 + 6};
      ldsm_read(g, ca, ma, 1, regs, 4, af);
    } else {
      fragment(g, op, 0, ra, ma, r0, 8, af);
    }
    for (int q = 0; q < 4; q++)
      w[4 * kr + q] = LLVMBuildBitCast(g->B, pack_vec(g, af + 2 * q, 2, t), g->i32, "");
  }
  LLVMValueRef *d = w + nw;
  /* an accumulator that is the constant 0 (S = QK^T starts from nothing) is not materialised:
   * the first k step runs with scale-d = 0 (D = A B, the input accumulator ignored), so no
   * registers are zeroed per iteration and the fence orders only A */
  bool zacc = const_zero(op->opnd[2]);
  memcpy(d, acc, sizeof(LLVMValueRef) * (size_t)nacc);
  if (zacc)
    for (int i = 0; i < nacc; i++) d[i] = LLVMGetUndef(LLVMTypeOf(acc[i]));
  nv_asm_tied(g, "wgmma.fence.sync.aligned;", w, nw + (zacc ? 0 : nacc), NULL, NULL, 0);
  /* "{ .reg .pred p; setp.ne.b32 p, $S, 0; wgmma... {$0, ..}, {$A..}, $D, p, 1, 1, trans; }",
   * with A through a descriptor "..., $Adesc, $D, p, 1, 1, 0, trans;" */
  size_t cap = (size_t)nacc * 6 + 400, len = 0;
  char *text = malloc(cap);
  KN_ASSERT(text);
  const char *ty = t == KN_BF16 ? "bf16" : "f16";
  int nx = adesc ? 3 : 6;  /* the inputs after the accumulator */
  len += (size_t)snprintf(text + len, cap - len, "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n"
                          "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {",
                          2 * nacc + nx - 1, N, ty, ty);
  for (int i = 0; i < nacc; i++) len += (size_t)snprintf(text + len, cap - len, "%s$%d", i ? ", " : "", i);
  if (adesc)
    snprintf(text + len, cap - len, "}, $%d, $%d, p, 1, 1, %d, %d;\n}", 2 * nacc, 2 * nacc + 1,
             atrans ? 1 : 0, trans ? 1 : 0);
  else
    snprintf(text + len, cap - len, "}, {$%d, $%d, $%d, $%d}, $%d, p, 1, 1, %d;\n}", 2 * nacc,
             2 * nacc + 1, 2 * nacc + 2, 2 * nacc + 3, 2 * nacc + 4, trans ? 1 : 0);
  for (int kr = 0; kr < ksteps; kr++) {
    /* the k step's first element, (16 kr, 0) of B; its byte offset >> 4 goes into the address */
    int64_t start = kn_wgmma_desc_for(&cb->shared, bshape, esz, 16 * kr).start;
    LLVMValueRef bk = LLVMBuildAdd(g->B, desc, ci64(g, start >> 4), "");
    LLVMValueRef scale = ci32(g, zacc && kr == 0 ? 0 : 1);
    if (adesc) {  /* A's k step: element (0, 16 kr) */
      int64_t as = kn_wgmma_desc_for_a(&ca->shared, ashape, esz, 0, 16 * kr).start;
      LLVMValueRef x[3] = {LLVMBuildAdd(g->B, a_desc, ci64(g, as >> 4), ""), bk, scale};
      nv_asm_tied(g, text, d, nacc, x, "l,l,r", 3);
    } else {
      LLVMValueRef x[6] = {w[4 * kr], w[4 * kr + 1], w[4 * kr + 2], w[4 * kr + 3], bk, scale};
      nv_asm_tied(g, text, d, nacc, x, "r,r,r,r,l,r", 6);
    }
  }
  free(text);
  nv_asm(g, g->vd, "wgmma.commit_group.sync.aligned;", "", NULL, 0);
  memcpy(out, d, sizeof(LLVMValueRef) * (size_t)nacc);
  if (g->nwg == (int)(sizeof g->wg / sizeof g->wg[0])) wg_wait_upto(g, 0);
  LLVMValueRef *a = malloc(sizeof(LLVMValueRef) * (size_t)(nw ? nw : 1));
  KN_ASSERT(a);
  memcpy(a, w, sizeof(LLVMValueRef) * (size_t)nw);
  struct wg_group *gr = &g->wg[g->nwg++];
  *gr = (struct wg_group){.v = res, .a = a, .na = nw};
  for (int k = 0; k < 2; k++) {
    const kn_conversion *c = k ? cb : ca;
    if (c && c->kind == KN_CONV_LAZY) {  /* read from shared memory */
      gr->lo[k] = g->p->buf[c->buffer].offset;
      gr->hi[k] = gr->lo[k] + g->p->buf[c->buffer].bytes;
    }
  }
  if (kn_wgmma_serial()) wg_wait_all(g);
  free(w);
  return 0;
}

/* the fragment (n registers from r0) of a dot operand: from registers or from LDS */
static void fragment(G *g, kn_op *op, int i, LLVMValueRef *regs, const kn_lmap *m, int r0, int n,
                     LLVMValueRef *e) {
  if (regs) memcpy(e, regs + r0, sizeof(LLVMValueRef) * (size_t)n);
  else lds_read(g, kn_plan_conversion(g->p, op, i), m, r0, n, e);
}

/* one k step of the fma "instruction" (layout.c, fma_16x32 / fma_16x16): each accumulator
 * register takes the A element of its row times the B element of its column, found through the
 * same tables */
static void fma_step(G *g, const kn_mma_shape *s, LLVMValueRef *a, LLVMValueRef *b, LLVMValueRef *c) {
  for (int j = 0; j < s->acc_regs; j++) {
    int ea = 0, eb = 0;
    for (int e = 0; e < s->a_regs; e++)
      if (s->a_reg[e][0] == s->acc_reg[j][0]) ea = e;
    for (int e = 0; e < s->b_regs; e++)
      if (s->b_reg[e][1] == s->acc_reg[j][1]) eb = e;
    LLVMValueRef args[3] = {a[ea], b[eb], c[j]};
    c[j] = call(g, "llvm.fma.f32", g->f32, args, 3);
  }
}

static int lower_dot(G *g, kn_op *op) {
  kn_value *res = op->res[0], *A = op->opnd[0], *Bv = op->opnd[1];
  const kn_layout *rl = g->p->lay[res->id];
  const kn_mma_shape *s = rl->mma;
  kn_scalar t = A->type.elem;
  const kn_mma_instr *in = g->p->instr;
  bool fma = rl->kind == KN_LAYOUT_MMA && in && in->operands == KN_MMA_FMA && t == KN_F32;
  if (rl->kind != KN_LAYOUT_MMA || !in || in->a != t || Bv->type.elem != t)
    return unsupported(g, op, "this dot");
  /* operands: stage lazily staged ones now, then read fragments as the instructions need them */
  LLVMValueRef *ra = NULL, *rb = NULL;
  kn_lmap ma, mb;
  int shape_a[2] = {A->type.shape[0], A->type.shape[1]}, shape_b[2] = {Bv->type.shape[0], Bv->type.shape[1]};
  kn_layout la = kn_layout_dot(s, g->p->warps, 0), lb = kn_layout_dot(s, g->p->warps, 1);
  if (kn_layout_eval(&la, 2, shape_a, &ma, g->d) || kn_layout_eval(&lb, 2, shape_b, &mb, g->d))
    return fail(g, op, "internal: %s", "dot operand layouts");
  bool ldsm = false;
  for (int i = 0; i < 2; i++) {
    const kn_conversion *c = kn_plan_conversion(g->p, op, i);
    if (c && c->kind == KN_CONV_LAZY) {
      stage_for_dot(g, c);
      ldsm |= c->ldsm;
    } else if (!(i ? (rb = opnd_regs(g, op, 1)) : (ra = opnd_regs(g, op, 0)))) {
      return fail(g, op, "internal: %s", "dot operand without registers");
    }
  }
  LLVMValueRef *acc = opnd_regs(g, op, 2);
  if (!acc) return fail(g, op, "internal: %s", "dot accumulator without registers");
  LLVMValueRef *out = new_regs(g, res);
  if (in->operands == KN_MMA_WGMMA) {
    int rc = lower_dot_wgmma(g, op, t, ra, &ma, acc, out);
    kn_lmap_free(&ma);
    kn_lmap_free(&mb);
    if (rc) return unsupported(g, op, "this dot with wgmma (B from shared memory, 64 rows per "
                               "warpgroup, N a multiple of 8 up to 256)");
    return 0;
  }
  if (ldsm) {
    int rc = lower_dot_ldsm(g, op, s, t, rl->transposed, ra, rb, &ma, &mb, acc, out);
    kn_lmap_free(&ma);
    kn_lmap_free(&mb);
    if (rc) return unsupported(g, op, "this dot (no matrix instruction for it)");
    return 0;
  }
  int M = res->type.shape[0], N = res->type.shape[1], K = A->type.shape[1];
  int reps_m = M / g->p->warps / s->m, reps_n = N / s->n, reps_k = K / s->k;
  int rc = 0;
  for (int mr = 0; mr < reps_m && !rc; mr++)
    for (int nr = 0; nr < reps_n && !rc; nr++) {
      int c0 = (mr * reps_n + nr) * s->acc_regs;
      LLVMValueRef c[16], af[8], bf[8];
      memcpy(c, acc + c0, sizeof(LLVMValueRef) * (size_t)s->acc_regs);
      for (int kr = 0; kr < reps_k && !rc; kr++) {
        fragment(g, op, 0, ra, &ma, (mr * reps_k + kr) * s->a_regs, s->a_regs, af);
        fragment(g, op, 1, rb, &mb, (nr * reps_k + kr) * s->b_regs, s->b_regs, bf);
        if (fma) fma_step(g, s, af, bf, c);
        else rc = g->ops->mma(g, s, t, rl->transposed, af, bf, c);
      }
      memcpy(out + c0, c, sizeof(LLVMValueRef) * (size_t)s->acc_regs);
    }
  kn_lmap_free(&ma);
  kn_lmap_free(&mb);
  /* the read-ahead load's next registers after the dot that reads this iteration's (issued
   * after its matrix instructions: 867.9 llvm-mca cycles at gfx942 D128, 904.6 when issued
   * between the staging and the dot, 873.9 at the end of the body) */
  if (g->pf_load)
    for (int i = 0; i < 2; i++) {
      const kn_conversion *c = kn_plan_conversion(g->p, op, i);
      if (c && c->value == g->pf_load->res[0]) load_ahead(g);
    }
  if (rc) return unsupported(g, op, "this dot (no matrix instruction for it)");
  return 0;
}

/* ---- reduce ---- */

/* v of lane (lane ^ mask) for a value of any register type: the target moves 32 bits, so a
 * narrower value travels zero-extended and an i64 as its two halves */
static LLVMValueRef xor_lanes_any(G *g, LLVMValueRef v, int mask) {
  LLVMTypeRef t = LLVMTypeOf(v);
  if (t == g->i64) {
    LLVMValueRef lo = LLVMBuildTrunc(g->B, v, g->i32, "");
    LLVMValueRef hi = LLVMBuildTrunc(g->B, LLVMBuildLShr(g->B, v, ci64(g, 32), ""), g->i32, "");
    lo = LLVMBuildZExt(g->B, g->ops->xor_lanes(g, lo, mask), g->i64, "");
    hi = LLVMBuildZExt(g->B, g->ops->xor_lanes(g, hi, mask), g->i64, "");
    return LLVMBuildOr(g->B, LLVMBuildShl(g->B, hi, ci64(g, 32), ""), lo, "");
  }
  unsigned bits = t == g->i1 ? 1 : t == g->f16 || t == g->bf16 ? 16 : 32;
  LLVMTypeRef it = LLVMIntTypeInContext(g->C, bits);
  LLVMValueRef x = t == it ? v : LLVMBuildBitCast(g->B, v, it, "");
  if (bits < 32) x = LLVMBuildZExt(g->B, x, g->i32, "");
  x = g->ops->xor_lanes(g, x, mask);
  if (bits < 32) x = LLVMBuildTrunc(g->B, x, it, "");
  return t == it ? x : LLVMBuildBitCast(g->B, x, t, "");
}

static int lower_reduce(G *g, kn_op *op) {
  kn_value *x = op->opnd[0], *res = op->res[0];
  bool scalar = res->type.kind != KN_TY_TILE;
  const kn_lmap *pm = vmap(g, x), *sm = scalar ? NULL : vmap(g, res);
  kn_reduce_plan plan;
  if (kn_reduce_plan_make(pm, sm, (int)op->iattr[0], &plan))
    return unsupported(g, op, "a reduction across warps");
  kn_opcode comb = op->opc == KN_OP_REDUCE_MAX ? KN_OP_MAX : KN_OP_ADD;
  kn_scalar t = x->type.elem;
  if (is_fp8(t)) {
    kn_reduce_plan_free(&plan);
    return unsupported_op(g, op, "'%s' of fp8 values (fp8 tiles are loaded, stored and fed to dot)",
                          kn_opinfo_table[op->opc].name);
  }
  LLVMValueRef *in = opnd_regs(g, op, 0), *out = scalar ? &g->sv[res->id] : new_regs(g, res);
  int nout = scalar ? 1 : sm->nregs;
  for (int r = 0; r < pm->nregs; r++) {
    int q = plan.group[r];
    out[q] = out[q] ? binary(g, comb, t, out[q], in[r]) : in[r];
  }
  for (int b = 0; b < plan.nbfly; b++)
    for (int q = 0; q < nout; q++)
      out[q] = binary(g, comb, t, out[q], xor_lanes_any(g, out[q], 1 << plan.bfly[b]));
  kn_reduce_plan_free(&plan);
  return 0;
}

/* ---- control flow and the rest ---- */

static int lower_block(G *g, kn_block *b);

static void set_value(G *g, kn_value *v, LLVMValueRef *regs, LLVMValueRef s) {
  if (v->type.kind == KN_TY_TILE) g->tv[v->id] = regs;
  else g->sv[v->id] = s;
}

static int nregs_of(G *g, const kn_value *v) {
  return v->type.kind == KN_TY_TILE ? vmap(g, v)->nregs : 1;
}

static int lower_for(G *g, kn_op *op) {
  kn_block *body = op->region[0];
  int n = body->nargs - 1;
  LLVMValueRef lo = g->sv[op->opnd[0]->id], hi = g->sv[op->opnd[1]->id], step = g->sv[op->opnd[2]->id];
  LLVMTypeRef it = LLVMTypeOf(lo);
  LLVMValueRef zero = LLVMConstInt(it, 0, 0);
  LLVMValueRef go = LLVMBuildAnd(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, lo, hi, ""),
                                 LLVMBuildICmp(g->B, LLVMIntSGT, step, zero, ""), "");
  /* inits in the layouts of the carried values */
  LLVMValueRef **init = calloc((size_t)(n ? n : 1), sizeof *init);
  KN_ASSERT(init);
  for (int i = 0; i < n; i++)
    init[i] = op->opnd[3 + i]->type.kind == KN_TY_TILE ? opnd_regs(g, op, 3 + i) : &g->sv[op->opnd[3 + i]->id];
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->B);
  LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(g->C, g->fn, "for.body");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->C, g->fn, "for.exit");
  /* the loop's enclosing context, restored after the body (nested loops) */
  kn_block *o_body = g->loop_body;
  LLVMValueRef o_iv = g->loop_iv, o_step = g->loop_step, o_hi = g->loop_hi;
  g->loop_body = body;
  kn_op *o_pf = g->pf_load;
  LLVMValueRef *o_pf_phi = g->pf_phi, *o_pf_next = g->pf_next, *pf_init = NULL;
  g->pf_load = ahead_load(g, body);
  g->pf_phi = g->pf_next = NULL;
  if (g->pf_load) pf_init = load_at(g, g->pf_load, lo);  /* the first iteration's, ahead */
  LLVMBasicBlockRef into = pre;  /* the loop's predecessor on entry */
  if (issue_heads(g, op, NULL)) {
    /* prologue: the first iteration's copy of the head stream.  The barrier first: buffers
     * staged before the loop (Q) may share its bytes, and other threads may still read them. */
    into = LLVMAppendBasicBlockInContext(g->C, g->fn, "for.prologue");
    LLVMBuildCondBr(g->B, go, into, exit);
    LLVMPositionBuilderAtEnd(g->B, into);
    barrier(g);
    g->remat_init = true;
    issue_heads(g, op, lo);
    g->remat_init = false;
    cp_commit(g);
    into = LLVMGetInsertBlock(g->B);
    LLVMBuildBr(g->B, loop);
  } else {
    LLVMBuildCondBr(g->B, go, loop, exit);
  }
  LLVMPositionBuilderAtEnd(g->B, loop);
  LLVMValueRef iv = LLVMBuildPhi(g->B, it, "iv");
  g->sv[body->args[0]->id] = iv;
  g->loop_iv = iv, g->loop_step = step, g->loop_hi = hi;
  int npf = g->pf_load ? nregs_of(g, g->pf_load->res[0]) : 0;
  if (npf) {
    g->pf_phi = calloc((size_t)npf, sizeof(LLVMValueRef));
    KN_ASSERT(g->pf_phi);
    for (int r = 0; r < npf; r++) g->pf_phi[r] = LLVMBuildPhi(g->B, LLVMTypeOf(pf_init[r]), "ahead");
  }
  LLVMValueRef **phi = calloc((size_t)(n ? n : 1), sizeof *phi);
  KN_ASSERT(phi);
  for (int i = 0; i < n; i++) {
    kn_value *a = body->args[i + 1];
    int k = nregs_of(g, a);
    phi[i] = calloc((size_t)k, sizeof(LLVMValueRef));
    KN_ASSERT(phi[i]);
    LLVMTypeRef t = sty(g, a->type.elem);
    for (int r = 0; r < k; r++) phi[i][r] = LLVMBuildPhi(g->B, t, "");
    set_value(g, a, phi[i], phi[i][0]);
  }
  for (int i = 0; i < n; i++) materialize(g, body->args[i + 1]);
  int rc = lower_block(g, body);
  kn_op *y = body->last;
  if (!rc && (!y || y->opc != KN_OP_YIELD)) rc = fail(g, op, "internal: %s", "for body without yield");
  if (!rc) {
    load_ahead(g);  /* not issued at its dot */
    LLVMValueRef next = LLVMBuildAdd(g->B, iv, step, "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->B);
    for (int r = 0; r < npf; r++) {
      LLVMValueRef v2[2] = {pf_init[r], g->pf_next[r]};
      LLVMBasicBlockRef b2[2] = {into, latch};
      LLVMAddIncoming(g->pf_phi[r], v2, b2, 2);
    }
    LLVMBuildCondBr(g->B, LLVMBuildICmp(g->B, LLVMIntSLT, next, hi, ""), loop, exit);
    LLVMValueRef vals[2] = {lo, next};
    LLVMBasicBlockRef bbs[2] = {into, latch}, xbbs[2] = {pre, latch};
    LLVMAddIncoming(iv, vals, bbs, 2);
    LLVMPositionBuilderAtEnd(g->B, exit);
    for (int i = 0; i < n && !rc; i++) {
      kn_value *a = body->args[i + 1];
      int k = nregs_of(g, a);
      LLVMValueRef *yv = a->type.kind == KN_TY_TILE ? opnd_regs(g, y, i) : &g->sv[y->opnd[i]->id];
      if (!yv) {
        rc = fail(g, op, "internal: %s", "yielded value without registers");
        break;
      }
      LLVMValueRef *res = calloc((size_t)k, sizeof(LLVMValueRef));
      KN_ASSERT(res);
      for (int r = 0; r < k; r++) {
        LLVMValueRef v2[2] = {init[i][r], yv[r]};
        LLVMAddIncoming(phi[i][r], v2, bbs, 2);
        res[r] = LLVMBuildPhi(g->B, LLVMTypeOf(phi[i][r]), "");
        LLVMAddIncoming(res[r], v2, xbbs, 2);
      }
      set_value(g, op->res[i], res, res[0]);
      if (a->type.kind != KN_TY_TILE) free(res);
    }
  }
  g->loop_body = o_body;
  g->loop_iv = o_iv, g->loop_step = o_step, g->loop_hi = o_hi;
  if (g->pf_load && g->tv[g->pf_load->res[0]->id] != g->pf_phi) free(g->pf_phi);
  free(pf_init);
  free(g->pf_next);
  g->pf_load = o_pf, g->pf_phi = o_pf_phi, g->pf_next = o_pf_next;
  for (int i = 0; i < n; i++)
    if (body->args[i + 1]->type.kind != KN_TY_TILE) free(phi[i]);
  free(phi);
  free(init);
  return rc;
}

/* reshape, transpose: the operand's registers stored through its permute conversion (row-major
 * offsets of its shape; a transpose's column-major), then the result's registers read at the
 * row-major offsets of the result's shape: both orders name the same element */
static int lower_permute(G *g, kn_op *op) {
  kn_value *res = op->res[0];
  const kn_conversion *c = kn_plan_conversion(g->p, op, 0);
  if (!c || c->kind != KN_CONV_PERMUTE || !g->tv[c->value->id])
    return fail(g, op, "internal: %s without its shared-memory permutation", kn_opinfo_table[op->opc].name);
  stage_store(g, c);
  kn_conversion rd = *c;  /* the same buffer, read in the result's row-major order */
  rd.shared.order[0] = 1;
  rd.shared.order[1] = 0;
  const kn_lmap *m = vmap(g, res);
  lds_read(g, &rd, m, 0, m->nregs, new_regs(g, res));
  return 0;
}

/* if with a uniform (scalar) condition: a branch, each region lowered in its block, and a phi
 * per register of every result, from the yields (in the results' layouts) */
static int lower_if(G *g, kn_op *op) {
  int n = op->nres;
  LLVMBasicBlockRef start[2] = {LLVMAppendBasicBlockInContext(g->C, g->fn, "then"),
                                LLVMAppendBasicBlockInContext(g->C, g->fn, "else")};
  LLVMBasicBlockRef end[2], join = LLVMAppendBasicBlockInContext(g->C, g->fn, "endif");
  LLVMBuildCondBr(g->B, g->sv[op->opnd[0]->id], start[0], start[1]);
  LLVMValueRef **yv = calloc((size_t)(2 * n + 1), sizeof *yv);
  KN_ASSERT(yv);
  int rc = 0;
  for (int r = 0; r < 2 && !rc; r++) {
    LLVMPositionBuilderAtEnd(g->B, start[r]);
    kn_op *y = op->region[r]->last;
    rc = lower_block(g, op->region[r]);
    if (!rc && (!y || y->opc != KN_OP_YIELD)) rc = fail(g, op, "internal: %s", "if region without yield");
    for (int i = 0; i < n && !rc; i++) {
      yv[2 * i + r] = op->res[i]->type.kind == KN_TY_TILE ? opnd_regs(g, y, i) : &g->sv[y->opnd[i]->id];
      if (!yv[2 * i + r]) rc = fail(g, op, "internal: %s", "yielded value without registers");
    }
    end[r] = LLVMGetInsertBlock(g->B);
    LLVMBuildBr(g->B, join);
  }
  LLVMPositionBuilderAtEnd(g->B, join);
  for (int i = 0; i < n && !rc; i++) {
    kn_value *res = op->res[i];
    LLVMValueRef *out = res->type.kind == KN_TY_TILE ? new_regs(g, res) : &g->sv[res->id];
    for (int k = 0; k < nregs_of(g, res); k++) {
      LLVMValueRef v[2] = {yv[2 * i][k], yv[2 * i + 1][k]};
      out[k] = LLVMBuildPhi(g->B, LLVMTypeOf(v[0]), "");
      LLVMAddIncoming(out[k], v, end, 2);
    }
  }
  free(yv);
  return rc;
}

static int lower_op(G *g, kn_op *op) {
  kn_value *res = op->nres == 1 ? op->res[0] : NULL;
  bool tile = res && res->type.kind == KN_TY_TILE;
  switch (op->opc) {
  case KN_OP_PROGRAM_ID:
    g->sv[res->id] = g->ops->program_id(g, (int)(op->iattr[0] % 3));
    return 0;
  case KN_OP_NUM_PROGRAMS:
    g->sv[res->id] = g->ops->num_programs(g, (int)(op->iattr[0] % 3));
    return 0;
  case KN_OP_CONST: {
    LLVMValueRef c = const_of(g, op, res->type.elem);
    if (!tile) {
      g->sv[res->id] = c;
      return 0;
    }
    LLVMValueRef *out = new_regs(g, res);
    for (int r = 0; r < vmap(g, res)->nregs; r++) out[r] = c;
    return 0;
  }
  case KN_OP_SPLAT: {
    LLVMValueRef *out = new_regs(g, res);
    for (int r = 0; r < vmap(g, res)->nregs; r++) out[r] = g->sv[op->opnd[0]->id];
    return 0;
  }
  case KN_OP_ARANGE: {
    const kn_lmap *m = vmap(g, res);
    LLVMValueRef *out = new_regs(g, res);
    for (int r = 0; r < m->nregs; r++)
      out[r] = LLVMBuildAdd(g->B, coord(g, m, r, 0), ci32(g, op->iattr[0]), "");
    return 0;
  }
  case KN_OP_BROADCAST:
  case KN_OP_EXPAND_DIMS: {
    /* free by construction: the result's registers are the operand's, renamed */
    const kn_lmap *src = vmap(g, op->opnd[0]), *dst = vmap(g, res);
    LLVMValueRef *in = opnd_regs(g, op, 0);
    const kn_conversion *c = kn_plan_conversion(g->p, op, 0);
    kn_lmap tmp;
    if (c) {  /* the operand was converted into the layout the result implies */
      if (eval_dst(g, c, &tmp)) return fail(g, op, "internal: %s", "conversion");
      src = &tmp;
    }
    kn_lmap lifted = {0};
    if (op->opc == KN_OP_EXPAND_DIMS) {
      /* the rank-1 operand seen as its rank-2 result with a dim of 1 at the axis */
      int ax = (int)op->iattr[0];
      lifted = *src;
      lifted.rank = 2;
      lifted.shape[ax] = 1;
      lifted.shape[1 - ax] = src->shape[0];
      lifted.reg = malloc(sizeof *lifted.reg * (size_t)(src->nregs ? src->nregs : 1));
      KN_ASSERT(lifted.reg);
      for (int r = 0; r < src->nregs; r++) {
        lifted.reg[r][ax] = 0;
        lifted.reg[r][1 - ax] = src->reg[r][0];
      }
      for (int b = 0; b < KN_MAX_LANE_BITS; b++) {
        lifted.lane[b][ax] = 0;
        lifted.lane[b][1 - ax] = src->lane[b][0];
      }
      for (int b = 0; b < KN_MAX_WARP_BITS; b++) {
        lifted.warp[b][ax] = 0;
        lifted.warp[b][1 - ax] = src->warp[b][0];
      }
      src = &lifted;
    }
    int *map = malloc(sizeof(int) * (size_t)(dst->nregs ? dst->nregs : 1));
    KN_ASSERT(map);
    bool ok = kn_lmap_convert_free(src, dst, map);
    if (c) kn_lmap_free(&tmp);
    free(lifted.reg);
    if (!ok || !in) {
      free(map);
      return unsupported_op(g, op, "%s with a layout change", kn_opinfo_table[op->opc].name);
    }
    LLVMValueRef *out = new_regs(g, res);
    for (int r = 0; r < dst->nregs; r++) out[r] = in[map[r]];
    free(map);
    return 0;
  }
  case KN_OP_PTRADD: {
    LLVMValueRef off = g->sv[op->opnd[1]->id];
    if (LLVMTypeOf(off) != g->i64) off = LLVMBuildSExt(g->B, off, g->i64, "");
    g->sv[res->id] = LLVMBuildGEP2(g->B, sty(g, res->type.elem), g->sv[op->opnd[0]->id], &off, 1, "");
    return 0;
  }
  case KN_OP_LOAD:
    if (op == g->pf_load) {  /* read one iteration ahead: this iteration's phis */
      g->tv[res->id] = g->pf_phi;
      return 0;
    }
    return lower_load(g, op);
  case KN_OP_STORE: return lower_store(g, op);
  case KN_OP_GATHER: return lower_gather(g, op);
  case KN_OP_DOT: return lower_dot(g, op);
  case KN_OP_REDUCE_MAX:
  case KN_OP_REDUCE_SUM: return lower_reduce(g, op);
  case KN_OP_FOR: return lower_for(g, op);
  case KN_OP_YIELD: return 0;  /* read by lower_for */
  case KN_OP_RETURN:
    LLVMBuildRetVoid(g->B);
    return 0;
  KN_CASES_BINARY return lower_elementwise(g, op, elem_binary);
  KN_CASES_UNARY return lower_elementwise(g, op, elem_unary);
  case KN_OP_CMP: return lower_elementwise(g, op, elem_cmp);
  case KN_OP_SELECT: return lower_elementwise(g, op, elem_select);
  case KN_OP_CAST: return lower_elementwise(g, op, elem_cast);
  case KN_OP_MULTIPLE_OF:
  case KN_OP_MAX_CONTIGUOUS: return lower_elementwise(g, op, elem_same);
  case KN_OP_IF: return lower_if(g, op);
  case KN_OP_RESHAPE:
  case KN_OP_TRANSPOSE: return lower_permute(g, op);
  case KN_OP_CALL:
    return fail(g, op, "internal: a call of '@%s' reached the GPU lowering (the inliner removes "
                "every call)", op->callee_name ? op->callee_name : "?");
  }
  return unsupported_op(g, op, "opcode %s", "?");
}

static int lower_block(G *g, kn_block *b) {
  for (kn_op *op = b->first; op; op = op->next) {
    if (op->opc == KN_OP_RETURN && op->next) continue;
    if (!wg_may_overlap(op)) wg_wait_all(g);
    else
      for (int i = 0; i < op->nopnd && g->nwg; i++) wg_wait_for(g, op->opnd[i]);
    if (lower_op(g, op) || g->failed) return -1;
    for (int i = 0; i < op->nres; i++) materialize(g, op->res[i]);
    if (g->failed) return -1;
  }
  return 0;
}

/* ---- the kernel ---- */

int kn_lower_gpu(const kn_layout_plan *p, LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d) {
  kn_func *k = p->k;
  G g = {.p = p, .d = d, .C = ctx};
  g.ops = p->arch->isa == KN_ISA_NVPTX ? &kn_leaf_nvptx : &kn_leaf_amdgpu;
  int64_t maxnum = 0;
  g.maxnum = g.ops->maxnum_cheaper && kn_func_get_meta(p->k, "MAXNUM", &maxnum) && maxnum;
  g.M = LLVMModuleCreateWithNameInContext(k->name, ctx);
  g.i1 = LLVMInt1TypeInContext(ctx);
  g.i8 = LLVMInt8TypeInContext(ctx);
  g.i16 = LLVMInt16TypeInContext(ctx);
  g.i32 = LLVMInt32TypeInContext(ctx);
  g.i64 = LLVMInt64TypeInContext(ctx);
  g.f16 = LLVMHalfTypeInContext(ctx);
  g.bf16 = LLVMBFloatTypeInContext(ctx);
  g.f32 = LLVMFloatTypeInContext(ctx);
  g.vd = LLVMVoidTypeInContext(ctx);
  g.p1 = LLVMPointerTypeInContext(ctx, 1);
  g.p3 = LLVMPointerTypeInContext(ctx, 3);
  LLVMSetTarget(g.M, p->arch->triple);

  int np = kn_func_nparams(k);
  LLVMTypeRef *pt = calloc((size_t)(np ? np : 1), sizeof(LLVMTypeRef));
  KN_ASSERT(pt);
  for (int i = 0; i < np; i++) {
    kn_type t = kn_func_param(k, i)->type;
    pt[i] = t.kind == KN_TY_PTR ? g.p1 : sty(&g, t.elem);
    if (t.kind == KN_TY_TILE) {
      free(pt);
      LLVMDisposeModule(g.M);
      return kn_error(d, k->module, k->loc, "not yet supported on %s: tile parameters", p->arch->name);
    }
  }
  g.fn = LLVMAddFunction(g.M, k->name, LLVMFunctionType(g.vd, pt, (unsigned)np, 0));
  free(pt);
  g.ops->kernel(&g);
  for (int i = 0; i < np; i++) {
    kn_value *v = kn_func_param(k, i);
    LLVMValueRef a = LLVMGetParam(g.fn, (unsigned)i);
    if (v->name) LLVMSetValueName2(a, v->name, strlen(v->name));
  }

  g.sv = calloc((size_t)p->nvalues + 1, sizeof *g.sv);
  g.tv = calloc((size_t)p->nvalues + 1, sizeof *g.tv);
  g.map = calloc((size_t)p->nvalues + 1, sizeof *g.map);
  g.has_map = calloc((size_t)p->nvalues + 1, sizeof *g.has_map);
  g.conv_regs = calloc((size_t)p->nconv + 1, sizeof *g.conv_regs);
  KN_ASSERT(g.sv && g.tv && g.map && g.has_map && g.conv_regs);
  for (int i = 0; i < np; i++) g.sv[kn_func_param(k, i)->id] = LLVMGetParam(g.fn, (unsigned)i);

  if (p->lds_bytes > 0) g.lds = g.ops->shared(&g, p->lds_bytes);

  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(ctx, g.fn, "entry");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(ctx, g.fn, "body");
  g.B = LLVMCreateBuilderInContext(ctx);
  g.E = LLVMCreateBuilderInContext(ctx);
  LLVMPositionBuilderAtEnd(g.B, entry);
  g.ops->ids(&g);
  LLVMValueRef br = LLVMBuildBr(g.B, body);
  LLVMPositionBuilderBefore(g.E, br);
  LLVMPositionBuilderAtEnd(g.B, body);

  int rc = lower_block(&g, k->body);
  if (!rc && !LLVMGetBasicBlockTerminator(LLVMGetInsertBlock(g.B))) LLVMBuildRetVoid(g.B);

  for (int i = 0; i <= p->nvalues; i++) {
    if (g.has_map[i]) kn_lmap_free(&g.map[i]);
    if (g.tv[i]) {
      /* tile register arrays may be shared by a renaming; free each array once */
      bool dup = false;
      for (int j = 0; j < i && !dup; j++) dup = g.tv[j] == g.tv[i];
      if (!dup) free(g.tv[i]);
    }
  }
  for (int i = 0; i < p->nconv; i++) free(g.conv_regs[i]);
  free(g.sv), free(g.tv), free(g.map), free(g.has_map), free(g.conv_regs), free(g.bases), free(g.ldsm);
  LLVMDisposeBuilder(g.B);
  LLVMDisposeBuilder(g.E);
  if (rc || g.failed) {
    LLVMDisposeModule(g.M);
    return -1;
  }
  *out = g.M;
  return 0;
}

