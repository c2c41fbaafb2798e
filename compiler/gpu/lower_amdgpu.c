/* lower_amdgpu.c — the AMDGPU leaf operations of the GPU lowering (lower_gpu.c calls them
 * through kn_leaf_amdgpu): wave64 ids, s_barrier, ds_bpermute butterflies, one MFMA of the
 * kernel's instruction (the registry's entry: intrinsic and operand packing), the kernel's
 * calling convention and attributes, the LDS global, exp2 as the bare v_exp_f32, and the
 * buffer resource and raw buffer loads of off32 loads.  LLVM intrinsics only (no inline asm),
 * so the emulated targets can replace each leaf by a call into their runtime.
 */
#include <string.h>

#include "lower_gpu_internal.h"

/* AMDGPU: wave64; the wave index is made uniform with readfirstlane so that everything derived
 * from it stays in SGPRs */
static void amd_ids(G *g) {
  LLVMValueRef tid = call(g, "llvm.amdgcn.workitem.id.x", g->i32, NULL, 0);
  g->lane = LLVMBuildAnd(g->B, tid, ci32(g, 63), "lane");
  LLVMValueRef w = LLVMBuildLShr(g->B, tid, ci32(g, 6), "");
  g->warp = call(g, "llvm.amdgcn.readfirstlane.i32", g->i32, &w, 1);
}

static LLVMValueRef amd_program_id(G *g, int dim) {
  static const char *ids[] = {"llvm.amdgcn.workgroup.id.x", "llvm.amdgcn.workgroup.id.y",
                              "llvm.amdgcn.workgroup.id.z"};
  return call(g, ids[dim % 3], g->i32, NULL, 0);
}

/* the grid in workgroups: hidden_block_count_{x,y,z}, the first three i32 of the hidden kernel
 * arguments of code object v5 (kiln pins v5), read through llvm.amdgcn.implicitarg.ptr */
static LLVMValueRef amd_num_programs(G *g, int dim) {
  LLVMTypeRef p4 = LLVMPointerTypeInContext(g->C, 4);
  LLVMValueRef base = call(g, "llvm.amdgcn.implicitarg.ptr", p4, NULL, 0);
  LLVMValueRef off = ci64(g, 4 * (dim % 3));
  LLVMValueRef ld = LLVMBuildLoad2(g->B, g->i32, LLVMBuildGEP2(g->B, g->i8, base, &off, 1, ""), "");
  LLVMSetAlignment(ld, 4);
  return ld;
}

static void amd_barrier(G *g) {
  unsigned wg = LLVMGetSyncScopeID(g->C, "workgroup", 9);
  LLVMBuildFenceSyncScope(g->B, LLVMAtomicOrderingRelease, wg, "");
  call(g, "llvm.amdgcn.s.barrier", g->vd, NULL, 0);
  LLVMBuildFenceSyncScope(g->B, LLVMAtomicOrderingAcquire, wg, "");
}

static LLVMValueRef amd_xor_lanes(G *g, LLVMValueRef bits, int mask) {
  /* ds_bpermute takes the source lane as a byte address */
  LLVMValueRef addr = LLVMBuildShl(g->B, LLVMBuildXor(g->B, g->lane, ci32(g, mask), ""), ci32(g, 2), "");
  LLVMValueRef args[2] = {addr, bits};
  return call(g, "llvm.amdgcn.ds.bpermute", g->i32, args, 2);
}


/* one MFMA of the kernel's instruction (the registry's entry: intrinsic and operand packing) */
static int amd_mma(G *g, const kn_mma_shape *s, kn_scalar t, bool transposed, LLVMValueRef *a,
                   LLVMValueRef *b, LLVMValueRef *acc) {
  const kn_mma_instr *in = g->p->instr;
  if (!in || !in->intrinsic || in->shape != s->id || in->a != t) return -1;
  LLVMValueRef av = pack_vec(g, a, s->a_regs, t), bv = pack_vec(g, b, s->b_regs, t);
  switch (in->operands) {
  case KN_MMA_VEC: break;
  case KN_MMA_VEC_I16:  /* the bf16_1k MFMAs take their operands as <N x i16> */
    av = LLVMBuildBitCast(g->B, av, LLVMVectorType(g->i16, (unsigned)s->a_regs), "");
    bv = LLVMBuildBitCast(g->B, bv, LLVMVectorType(g->i16, (unsigned)s->b_regs), "");
    break;
  case KN_MMA_PACKED_I64:  /* fp8: 8 raw bytes per lane as one i64, byte e = element e */
    av = LLVMBuildBitCast(g->B, av, g->i64, "");
    bv = LLVMBuildBitCast(g->B, bv, g->i64, "");
    break;
  case KN_MMA_PAIRS_NV:
  case KN_MMA_WGMMA:
  case KN_MMA_FMA:
    return -1;
  }
  LLVMValueRef cv = pack_vec(g, acc, s->acc_regs, KN_F32);
  /* transposed: the instruction computes D^T = B^T A^T, B's fragment goes first;
   * cbsz = abid = blgp = 0 */
  LLVMValueRef args[6] = {transposed ? bv : av, transposed ? av : bv, cv, ci32(g, 0), ci32(g, 0),
                          ci32(g, 0)};
  cv = call(g, in->intrinsic, LLVMTypeOf(cv), args, 6);
  for (int j = 0; j < s->acc_regs; j++) acc[j] = LLVMBuildExtractElement(g->B, cv, ci32(g, j), "");
  return 0;
}

static void amd_kernel(G *g) {
  LLVMSetFunctionCallConv(g->fn, LLVMAMDGPUKERNELCallConv);
  char size[32], wpe[8];
  snprintf(size, sizeof size, "1,%d", 64 * g->p->warps);
  /* registers: amdgpu-waves-per-eu is a minimum the register allocator must allow; 2 waves
   * per SIMD (2 workgroups of 4 waves per CU) caps a wave at 256 of the 512 unified VGPR+AGPR
   * entries, the budget the attention kernel fits without spilling up to D 128 at 128x64 */
  snprintf(wpe, sizeof wpe, "%d", g->p->warps >= 4 ? 2 : 1);
  str_attr(g, "amdgpu-flat-work-group-size", size);
  str_attr(g, "amdgpu-waves-per-eu", wpe);
  str_attr(g, "uniform-work-group-size", "true");
}

static LLVMValueRef amd_shared(G *g, int64_t bytes) {
  LLVMTypeRef at = LLVMArrayType2(g->i8, (uint64_t)bytes);
  LLVMValueRef lds = LLVMAddGlobalInAddressSpace(g->M, at, "kn_lds", 3);
  LLVMSetInitializer(lds, LLVMGetUndef(at));
  LLVMSetLinkage(lds, LLVMInternalLinkage);
  LLVMSetAlignment(lds, 16);
  return lds;
}

/* exp2 as the bare v_exp_f32 (llvm.amdgcn.exp2): llvm.exp2.f32 wraps it in a range reduction
 * for results below 2^-126 (compare, add 64, exp, multiply by 2^-64: about 6 instructions per
 * element) because the instruction flushes those to +0.  Flushing them is harmless where kiln
 * takes exp2 (softmax weights: 2^-126 of the row maximum is 0 to any f16/bf16 P; tanh's
 * e^{2|x|} >= 1), and NVPTX's ex2.approx.ftz does the same.  v_exp_f32: 2^x within 1 ulp,
 * -inf -> +0, +inf -> +inf, NaN -> NaN, results below 2^-126 -> +0 (the emulator computes
 * exactly that, compiler/emu/rewrite.c). */
static LLVMValueRef amd_f32_math(G *g, const char *fname, LLVMValueRef x) {
  if (!strcmp(fname, "exp2")) return call(g, "llvm.amdgcn.exp2.f32", g->f32, &x, 1);
  return NULL;
}

/* a raw buffer resource (V#) over base: stride 0, KN_GPU_OFF32_END bytes of records, the
 * chip's fourth dword (the registry's buffer_word3).  base is uniform (a kernel argument plus
 * uniform offsets), so the resource is in SGPRs; the loop's copy is hoisted by LICM */
static LLVMValueRef amd_buffer_rsrc(G *g, LLVMValueRef base) {
  LLVMValueRef args[4] = {base, LLVMConstInt(g->i16, 0, 0), ci64(g, (long long)KN_GPU_OFF32_END),
                          ci32(g, (long long)g->p->arch->amd->buffer_word3)};
  return call(g, "llvm.amdgcn.make.buffer.rsrc.p8.p1", LLVMPointerTypeInContext(g->C, 8), args, 4);
}

/* buffer_load_{ubyte,ushort,dword,dwordx2,dwordx4} at voff (offen; LLVM folds a constant part
 * into the instruction's offset), soffset 0, no cache policy bits */
static LLVMValueRef amd_buffer_load(G *g, LLVMValueRef rsrc, LLVMValueRef voff, int bytes) {
  LLVMTypeRef t = bytes == 1 ? g->i8 : bytes == 2 ? g->i16 : bytes == 4 ? g->i32
                  : LLVMVectorType(g->i32, (unsigned)bytes / 4);
  const char *name = bytes == 1 ? "llvm.amdgcn.raw.ptr.buffer.load.i8"
                     : bytes == 2 ? "llvm.amdgcn.raw.ptr.buffer.load.i16"
                     : bytes == 4 ? "llvm.amdgcn.raw.ptr.buffer.load.i32"
                     : bytes == 8 ? "llvm.amdgcn.raw.ptr.buffer.load.v2i32"
                                  : "llvm.amdgcn.raw.ptr.buffer.load.v4i32";
  LLVMValueRef args[4] = {rsrc, voff, ci32(g, 0), ci32(g, 0)};
  return call(g, name, t, args, 4);
}

/* global_atomic_add_f32 (gfx90a, gfx942), not a compare-and-swap loop: LLVM keeps the
 * instruction only for an atomicrmw fadd that is at most agent scope and promises, by metadata
 * (docs/AMDGPUUsage, "Memory Model"), that the address is not fine-grained host memory
 * (amdgpu.no.fine.grained.memory: kiln's buffers are device allocations) and that the
 * instruction may ignore the denormal mode (amdgpu.ignore.denormal.mode: gfx90a's flushes f32
 * denormals, which kiln's f32 gradient sums do not need; gfx942's keeps them).  Relaxed. */
static void amd_atomic_fadd(G *g, LLVMValueRef ptr, LLVMValueRef v) {
  unsigned agent = LLVMGetSyncScopeID(g->C, "agent", 5);
  LLVMValueRef a = LLVMBuildAtomicRMWSyncScope(g->B, LLVMAtomicRMWBinOpFAdd, ptr, v,
                                               LLVMAtomicOrderingMonotonic, agent);
  LLVMSetAlignment(a, 4);
  const char *md[2] = {"amdgpu.no.fine.grained.memory", "amdgpu.ignore.denormal.mode"};
  for (int i = 0; i < 2; i++)
    LLVMSetMetadata(a, LLVMGetMDKindIDInContext(g->C, md[i], (unsigned)strlen(md[i])),
                    LLVMMetadataAsValue(g->C, LLVMMDNodeInContext2(g->C, NULL, 0)));
}

const leaf_ops kn_leaf_amdgpu = {
    .name = "AMDGPU", .ids = amd_ids,
    .program_id = amd_program_id, .num_programs = amd_num_programs, .barrier = amd_barrier,
    .xor_lanes = amd_xor_lanes,
    .mma = amd_mma, .kernel = amd_kernel, .shared = amd_shared, .f32_math = amd_f32_math,
    .buffer_rsrc = amd_buffer_rsrc, .buffer_load = amd_buffer_load, .atomic_fadd = amd_atomic_fadd,
    .maxnum_cheaper = true,
};
