/* lower_nvptx.c — the NVPTX leaf operations of the GPU lowering (lower_gpu.c calls them through
 * kn_leaf_nvptx): warps of 32, bar.sync, shfl.sync butterflies, mma.sync m16n8k16, a ptx_kernel
 * with .reqntid, dynamic shared memory, and the f32 math NVPTX has no libm for (.approx units).
 * The ldmatrix / cp.async staging and wgmma (inline PTX, B through shared-memory descriptors)
 * stay with the layouts in lower_gpu.c; the shared array is 1024-byte aligned when wgmma reads
 * it.
 */
#include "lower_gpu_internal.h"

/* NVPTX: warps of 32.  The warp index tid >> 5 is uniform across a warp by construction; ptxas
 * sees that as well as readfirstlane would tell it. */
static void nv_ids(G *g) {
  LLVMValueRef tid = call(g, "llvm.nvvm.read.ptx.sreg.tid.x", g->i32, NULL, 0);
  g->lane = LLVMBuildAnd(g->B, tid, ci32(g, 31), "lane");
  g->warp = LLVMBuildLShr(g->B, tid, ci32(g, 5), "warp");
}

static LLVMValueRef nv_program_id(G *g, int dim) {
  static const char *ids[] = {"llvm.nvvm.read.ptx.sreg.ctaid.x", "llvm.nvvm.read.ptx.sreg.ctaid.y",
                              "llvm.nvvm.read.ptx.sreg.ctaid.z"};
  return call(g, ids[dim % 3], g->i32, NULL, 0);
}

static LLVMValueRef nv_num_programs(G *g, int dim) {
  static const char *ids[] = {"llvm.nvvm.read.ptx.sreg.nctaid.x", "llvm.nvvm.read.ptx.sreg.nctaid.y",
                              "llvm.nvvm.read.ptx.sreg.nctaid.z"};
  return call(g, ids[dim % 3], g->i32, NULL, 0);
}

/* bar.sync 0 (LLVM 22's name for what was llvm.nvvm.barrier0): it orders shared and global
 * memory accesses among the CTA's threads, so no separate fence is needed, and the intrinsic's
 * memory effects keep LLVM from moving loads and stores across it */
static void nv_barrier(G *g) {
  LLVMValueRef zero = ci32(g, 0);
  call(g, "llvm.nvvm.barrier.cta.sync.aligned.all", g->vd, &zero, 1);
}

static LLVMValueRef nv_xor_lanes(G *g, LLVMValueRef bits, int mask) {
  /* all 32 lanes take part (full mask); clamp 31: the whole warp is one segment */
  LLVMValueRef args[4] = {ci32(g, -1), bits, ci32(g, mask), ci32(g, 31)};
  return call(g, "llvm.nvvm.shfl.sync.bfly.i32", g->i32, args, 4);
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32: A as four 32-bit registers
 * (pairs a0a1, a2a3, a4a5, a6a7 of the lane table), B as two (b0b1, b2b3), C and D as four f32.
 * LLVM 22 (IntrinsicsNVVM.td) names the f16 form by its D and C types, .f32.f32, with <2 x half>
 * operands, and the bf16 form .bf16 with i32 operands. */
static int nv_mma(G *g, const kn_mma_shape *s, kn_scalar t, bool transposed, LLVMValueRef *a,
                  LLVMValueRef *b, LLVMValueRef *acc) {
  const kn_mma_instr *in = g->p->instr;
  if (!in || in->operands != KN_MMA_PAIRS_NV || s->id != KN_MMA_NV_16X8X16 || transposed ||
      in->a != t)
    return -1;
  LLVMValueRef args[10];
  for (int i = 0; i < 6; i++) {
    LLVMValueRef *src = i < 4 ? a + 2 * i : b + 2 * (i - 4);
    LLVMValueRef v = pack_vec(g, src, 2, t);
    args[i] = t == KN_BF16 ? LLVMBuildBitCast(g->B, v, g->i32, "") : v;
  }
  for (int j = 0; j < 4; j++) args[6 + j] = acc[j];
  LLVMTypeRef f4[4] = {g->f32, g->f32, g->f32, g->f32};
  LLVMTypeRef rt = LLVMStructTypeInContext(g->C, f4, 4, 0);
  LLVMValueRef r = call(g, in->intrinsic, rt, args, 10);
  for (int j = 0; j < 4; j++) acc[j] = LLVMBuildExtractValue(g->B, r, (unsigned)j, "");
  return 0;
}

static void nv_kernel(G *g) {
  LLVMSetFunctionCallConv(g->fn, LLVMPTXKernelCallConv);
  char n[16];
  snprintf(n, sizeof n, "%d", 32 * g->p->warps);
  /* .reqntid: ptxas budgets registers for exactly this block size (255 per thread up to 256
   * threads), and a launch with another block size is an error instead of wrong results (the
   * lanes and warps of every layout assume it).  ptxas rejects .maxntid next to it. */
  str_attr(g, "nvvm.reqntid", n);
}

/* dynamic shared memory (extern .shared): a static .shared array is limited to 48 KiB, the
 * dynamic one may be opted into up to the device's limit; the launcher passes the plan's bytes */
static LLVMValueRef nv_shared(G *g, int64_t bytes) {
  (void)bytes;
  LLVMTypeRef at = LLVMArrayType2(g->i8, 0);
  LLVMValueRef smem = LLVMAddGlobalInAddressSpace(g->M, at, "kn_smem", 3);
  LLVMSetLinkage(smem, LLVMExternalLinkage);
  /* wgmma's swizzled operands need their buffers on 1024-byte boundaries (plan_shared.c
   * places them so within the array): then the array itself is aligned so */
  unsigned align = 16;
  for (int i = 0; i < g->p->nconv; i++)
    if (g->p->conv[i].desc) align = 1024;
  LLVMSetAlignment(smem, align);
  return smem;
}

/* NVPTX has no libm: llvm.log2/exp/log.f32 without fast-math flags become calls the backend
 * cannot select (an LLVM fatal error).  All go through the approximate hardware units: lg2.approx.f32 (max error 2^-22 absolute
 * in [0.5, 2], relative elsewhere), exp(x) = ex2(x * log2 e), log(x) = lg2(x) * ln 2. */
static LLVMValueRef nv_f32_math(G *g, const char *fname, LLVMValueRef x) {
  if (!strcmp(fname, "log2") || !strcmp(fname, "log")) {
    LLVMValueRef y = call(g, "llvm.nvvm.lg2.approx.f", g->f32, &x, 1);
    return fname[3] ? y : LLVMBuildFMul(g->B, y, LLVMConstReal(g->f32, 0.69314718055994530942), "");
  }
  if (!strcmp(fname, "exp")) {
    LLVMValueRef y = LLVMBuildFMul(g->B, x, LLVMConstReal(g->f32, 1.44269504088896340736), "");
    return call(g, "llvm.nvvm.ex2.approx.ftz.f32", g->f32, &y, 1);
  }
  /* ex2.approx.ftz.f32: one MUFU op; llvm.exp2.f32 gives the non-ftz form, which on sm_80+
   * costs extra instructions to handle denormal inputs and outputs.  Flushing them to zero is
   * harmless for softmax weights (2^-126 of the row maximum is 0 to any f16/bf16 P). */
  if (!strcmp(fname, "exp2")) return call(g, "llvm.nvvm.ex2.approx.ftz.f32", g->f32, &x, 1);
  /* rcp.approx.ftz.f32 (one MUFU op, max error about 1 ulp): for kiln's expansions only */
  if (!strcmp(fname, "rcp")) return call(g, "llvm.nvvm.rcp.approx.ftz.f", g->f32, &x, 1);
  return NULL;
}

/* fp8 -> f16 on sm_89 and later (sm_90a): cvt.rn.f16x2.e4m3x2 / .e5m2x2 (PTX 7.8), one
 * instruction for two bytes, here given one (the high byte 0, the low half taken): exact, NaN
 * to NaN.  e5m2 needs no instruction (it is an f16's top byte): the integer decode's shift is
 * cheaper.  The fnuz formats have no NVIDIA conversion.  sm_80: NULL, the integer decode. */
static LLVMValueRef nv_fp8_to_f16(G *g, kn_scalar s, LLVMValueRef x) {
  const kn_arch *a = g->p->arch;
  if (s != KN_F8E4M3 || a->cc_major * 10 + a->cc_minor < 89) return NULL;
  LLVMValueRef w = LLVMBuildZExt(g->B, x, g->i16, "");
  LLVMValueRef h2 = call(g, "llvm.nvvm.e4m3x2.to.f16x2.rn", LLVMVectorType(g->f16, 2), &w, 1);
  return LLVMBuildExtractElement(g->B, h2, ci32(g, 0), "");
}

/* atom.global.add.f32, relaxed (LLVM 22 gives the atom form even with the result unused, not
 * red).  sm_90's vector red.global.add.v2/v4.f32 is not what LLVM 22 selects for an atomicrmw
 * of <2 x float> (it expands a cmpxchg loop), so kiln issues one per element. */
static void nv_atomic_fadd(G *g, LLVMValueRef ptr, LLVMValueRef v) {
  LLVMValueRef a = LLVMBuildAtomicRMW(g->B, LLVMAtomicRMWBinOpFAdd, ptr, v,
                                      LLVMAtomicOrderingMonotonic, 0);
  LLVMSetAlignment(a, 4);
}

const leaf_ops kn_leaf_nvptx = {
    .name = "NVPTX", .ids = nv_ids,
    .program_id = nv_program_id, .num_programs = nv_num_programs, .barrier = nv_barrier,
    .xor_lanes = nv_xor_lanes,
    .mma = nv_mma, .kernel = nv_kernel, .shared = nv_shared, .f32_math = nv_f32_math,
    .fp8_to_f16 = nv_fp8_to_f16, .atomic_fadd = nv_atomic_fadd, .nowrap_offsets = true,
};
