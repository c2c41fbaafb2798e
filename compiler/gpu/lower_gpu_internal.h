/* lower_gpu_internal.h — what the generic GPU lowering (lower_gpu.c) shares with the per-ISA
 * leaf operations (lower_amdgpu.c, lower_nvptx.c): the lowering state G, the leaf table, and the
 * small helpers every file emits IR with.  Private to compiler/gpu.
 *
 * The split: lower_gpu.c is everything above the leaves (values as per-thread register lists,
 * addresses, masks, loops, conversions through shared memory, the order of matrix instructions,
 * and NVPTX's ldmatrix / cp.async staging, which is layout business); a new ISA is a new leaf
 * table in a file of its own, and a new chip of a known ISA is a registry entry (arch.c).
 */
#ifndef KILN_LOWER_GPU_INTERNAL_H
#define KILN_LOWER_GPU_INTERNAL_H

#include <string.h>

#include <llvm-c/Core.h>

#include "gpu.h"

typedef struct base_entry {
  int32_t lane[KN_MAX_LANE_BITS][2], warp[KN_MAX_WARP_BITS][2];
  int shape[2];
  LLVMValueRef v[2];
} base_entry;

typedef struct leaf_ops leaf_ops;

typedef struct ldsm_base {
  int conv, n, j;
  int ds[4], dch[4];
  LLVMValueRef p;
} ldsm_base;

typedef struct G {
  const kn_layout_plan *p;
  const leaf_ops *ops;       /* the target's leaf operations */
  kn_diag *d;
  int failed;
  LLVMContextRef C;
  LLVMModuleRef M;
  LLVMBuilderRef B, E;       /* E: before the entry block's terminator (thread bases) */
  LLVMValueRef fn;
  LLVMValueRef lane, warp, lds;
  LLVMValueRef *sv;          /* per value id: scalar */
  LLVMValueRef **tv;         /* per value id: tile registers */
  kn_lmap *map;              /* per value id (tiles), evaluated on demand */
  bool *has_map;
  LLVMValueRef **conv_regs;  /* per conversion: registers in the destination layout */
  base_entry *bases;
  int nbases, capbases;
  /* NVPTX: per-thread ldmatrix base pointers (entry block), one per (conversion, matrix
   * pattern, chunk residue); the innermost loop being lowered (cp.async prefetch) */
  struct ldsm_base *ldsm;
  int nldsm, capldsm;
  kn_block *loop_body;
  bool remat_init;  /* remat for the loop's prologue: carried values are their inits */
  bool maxnum;      /* float max/min (and their reductions) as maxnum/minnum: MAXNUM = 1 */
  LLVMValueRef loop_iv, loop_step, loop_hi;
  /* the innermost loop's K prefetch (lower_gpu.c, prefetch_load): the body's load read one
   * iteration ahead, the phis standing for this iteration's registers, the next iteration's
   * registers once issued (NULL before) */
  kn_op *pf_load;
  LLVMValueRef *pf_phi, *pf_next;
  /* sm_90a: the wgmma dots issued and not yet waited for, oldest first, each with the A
   * registers it reads (lower_gpu.c, "wgmma groups in flight") */
  struct wg_group {
    kn_value *v;
    LLVMValueRef *a;
    int na;
    int64_t lo[2], hi[2];  /* the shared-memory bytes its operands are read from */
  } wg[8];
  int nwg;
  LLVMTypeRef i1, i8, i16, i32, i64, f16, bf16, f32, vd, p1, p3;
} G;

/* the target's leaf operations (see "the targets' leaf operations" below) */
struct leaf_ops {
  const char *name;        /* in messages: "AMDGPU", "NVPTX" */
  void (*ids)(G *g);       /* in the entry block: g->lane, g->warp */
  LLVMValueRef (*program_id)(G *g, int dim);
  LLVMValueRef (*num_programs)(G *g, int dim);  /* the grid size along dim */
  void (*barrier)(G *g);   /* every thread of the program, shared memory ordered across it */
  /* the i32 `bits` of lane (lane ^ mask) of the same warp */
  LLVMValueRef (*xor_lanes)(G *g, LLVMValueRef bits, int mask);
  /* acc[0..acc_regs) += A * B for one instruction; a, b: the lane's operand elements in the
   * lane tables' order (layout.c); -1 when the target has no such instruction */
  int (*mma)(G *g, const kn_mma_shape *s, kn_scalar t, bool transposed, LLVMValueRef *a,
             LLVMValueRef *b, LLVMValueRef *acc);
  void (*kernel)(G *g);    /* calling convention and attributes of g->fn */
  LLVMValueRef (*shared)(G *g, int64_t bytes);  /* the addrspace(3) byte array */
  /* f32 `fname` ("exp2", "log", ...) of x where the generic llvm.<fname>.f32 would not do, or
   * NULL (then llvm.<fname>.f32); the entry may be NULL */
  LLVMValueRef (*f32_math)(G *g, const char *fname, LLVMValueRef x);
  /* fp8 byte x (i8) of format s -> its exact f16 by a conversion instruction, or NULL (then
   * lower_gpu.c's integer decode, fp8_to_f32); the entry may be NULL */
  LLVMValueRef (*fp8_to_f16)(G *g, kn_scalar s, LLVMValueRef x);
  /* loads with the off32 clause (KN_MEM_OFF32) through a buffer resource: the resource of a
   * uniform base pointer (its records end at KN_GPU_OFF32_END bytes), and a load of `bytes` (1,
   * 2, 4, 8 or 16) at byte offset voff (i32) of it, an integer (<N x i32> for 8 and 16 bytes);
   * an offset at or past the end reads 0, with no branch.  NULL where the target has none
   * (then the load is an ordinary one, as without the clause). */
  LLVMValueRef (*buffer_rsrc)(G *g, LLVMValueRef base);
  LLVMValueRef (*buffer_load)(G *g, LLVMValueRef rsrc, LLVMValueRef voff, int bytes);
  /* a store's atomic_add (KN_MEM_ATOMIC_ADD): *ptr += v (f32, global), one relaxed atomic
   * read-modify-write whose result is unused */
  void (*atomic_fadd)(G *g, LLVMValueRef ptr, LLVMValueRef v);
  bool nowrap_offsets;     /* mark coordinate and shared-offset arithmetic nuw nsw */
  /* llvm.maximum/minimum (NaN-propagating) cost more than maxnum/minnum (AMDGPU: v_max_f32 +
   * v_cmp_o + v_cndmask, and an s_nop, per element; one v_max_f32): kernels with MAXNUM = 1
   * get maxnum/minnum (docs/ir.md) */
  bool maxnum_cheaper;
};

/* the end of an off32 load's buffer resource in bytes: the clause puts every live element
 * below it, and a dead element's offset is moved to it, where the range check reads 0 */
#define KN_GPU_OFF32_END 0x80000000u

/* ---- types and intrinsics ---- */

static inline LLVMTypeRef sty(G *g, kn_scalar s) {
  switch (s) {
  case KN_I1: return g->i1;
  case KN_I32: return g->i32;
  case KN_I64: return g->i64;
  case KN_F16: return g->f16;
  case KN_BF16: return g->bf16;
  case KN_F32: return g->f32;
  default: return g->i8;  /* fp8: raw bits (no arithmetic is lowered on them) */
  }
}

static inline LLVMValueRef call(G *g, const char *name, LLVMTypeRef ret, LLVMValueRef *args, int n) {
  LLVMTypeRef ts[16];
  for (int i = 0; i < n; i++) ts[i] = LLVMTypeOf(args[i]);
  LLVMTypeRef ft = LLVMFunctionType(ret, ts, (unsigned)n, 0);
  LLVMValueRef f = LLVMGetNamedFunction(g->M, name);
  if (!f) f = LLVMAddFunction(g->M, name, ft);
  return LLVMBuildCall2(g->B, ft, f, args, (unsigned)n, "");
}

static inline const char *fsuffix(G *g, LLVMTypeRef t) {
  return t == g->f16 ? "f16" : t == g->bf16 ? "bf16" : "f32";
}

static inline LLVMValueRef ci32(G *g, long long v) { return LLVMConstInt(g->i32, (unsigned long long)v, 1); }
static inline LLVMValueRef ci64(G *g, long long v) { return LLVMConstInt(g->i64, (unsigned long long)v, 1); }

static inline LLVMValueRef pack_vec(G *g, LLVMValueRef *e, int n, kn_scalar t) {
  LLVMValueRef v = LLVMGetUndef(LLVMVectorType(sty(g, t), (unsigned)n));
  for (int k = 0; k < n; k++) v = LLVMBuildInsertElement(g->B, v, e[k], ci32(g, k), "");
  return v;
}

/* ---- the targets' leaf operations ----
 *
 * Everything above the leaves (values as per-thread register lists, addresses, masks, loops,
 * conversions through shared memory, the order of matrix instructions) is the same for every
 * target; what differs is this small table: thread and program ids, the barrier, the cross-lane
 * move of a reduction butterfly, one matrix instruction, the kernel's calling convention and
 * attributes, and the shared-memory global.  Each entry is LLVM intrinsics or plain IR (no
 * inline asm), so the emulated AMDGPU target can still replace the AMDGPU leaves one by one. */

static inline void str_attr(G *g, const char *k, const char *v) {
  LLVMAddAttributeAtIndex(g->fn, LLVMAttributeFunctionIndex,
                          LLVMCreateStringAttribute(g->C, k, (unsigned)strlen(k), v,
                                                    (unsigned)strlen(v)));
}

/* the leaf tables (lower_amdgpu.c, lower_nvptx.c) */
extern const leaf_ops kn_leaf_amdgpu, kn_leaf_nvptx;

#endif
