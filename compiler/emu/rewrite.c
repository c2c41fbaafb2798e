/* rewrite.c — turns a module lowered for amdgcn-amd-amdhsa into a host module run by the emulator.
 *
 * Input: what compiler/gpu's `lower` produced (one amdgpu_kernel; AMDGPU leaf operations as
 * llvm.amdgcn.* intrinsic calls; LDS as addrspace(3) globals; global memory through addrspace(1)
 * pointers), before any LLVM optimisation or AMDGPU code generation.  Output: the same code, now
 * one *lane* of the kernel, plus
 *     void kiln_<name>(const kn_argval *args, i32 px, py, pz, nx, ny, nz)   (host kernel ABI)
 *     i32  kiln_<name>.status
 * where kiln_<name> runs workgroup (px, py, pz) under emulation (runtime.c).  Rewrites:
 *
 *  - each leaf intrinsic becomes a call of its runtime function (emu_internal.h): ids, the
 *    hidden kernel arguments (implicitarg.ptr: the grid size, read by num_programs), s_barrier,
 *    MFMA (operands through stack slots, so the runtime sees each lane's registers in hardware
 *    order), readfirstlane / readlane, ds_bpermute / ds_permute / ds_swizzle, DPP, ballot, mbcnt,
 *    and raw buffer loads (make.buffer.rsrc: the resource as a slot the loads read;
 *    raw.ptr.buffer.load: range-checked, 0 out of range, runtime.c).
 *    Scheduling hints (s_waitcnt, sched_barrier, s_setprio, ...) and fences are dropped: lanes of
 *    a workgroup run on one thread and meet only at the runtime's rendezvous.  Any other
 *    llvm.amdgcn.* call is an error, so nothing the emulator does not understand runs silently.
 *  - every load and store through an addrspace(1) or addrspace(3) pointer becomes a runtime call
 *    with the address, the size, the alignment the IR claims and a site id; LDS globals are
 *    replaced by constant addresses 0, 16, ... of one per-workgroup LDS, so an LDS pointer is its
 *    offset.  An f32 atomic fadd through a global pointer becomes a runtime call (an atomic add,
 *    checked as a store); other atomics, address-space casts and other calls on those pointers
 *    are errors.
 *  - bfloat arithmetic is done in f32 and rounded to bf16 with integer operations (round to
 *    nearest even, NaN kept quiet): the host libgcc here has no __truncsfbf2, and that is also
 *    what the AMDGPU backend does on chips without bf16 ALUs.
 *  - the runtime is called through absolute addresses baked into the IR (the JIT runs in this
 *    process), marked convergent so LLVM's optimiser never makes them depend on more control flow
 *    than the kernel did.
 *
 * Each runtime call gets a site id; the site names ("s_barrier #2", "global load <8 x half> #5")
 * are in the kn_emu_info constant the module carries, with the workgroup size (from
 * amdgpu-flat-work-group-size: kiln's lowering launches exactly that many work-items) and the
 * LDS allocation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "emu_internal.h"
#include "target.h"

typedef struct R {
  LLVMContextRef C;
  LLVMModuleRef M;
  LLVMBuilderRef B;
  LLVMTargetDataRef td;
  LLVMValueRef fn;          /* the kernel */
  LLVMBasicBlockRef entry;
  unsigned breaks;
  const char *arch;         /* the emulated chip: which instruction an intrinsic means */
  LLVMBasicBlockRef lds_store_bb;  /* the block of the last LDS store since the last barrier */
  kn_diag *d;
  int failed;
  char **sites;
  int nsites, capsites;
  int counts[16];           /* per site kind, for "#n" */
  LLVMTypeRef vd, i1, i8, i16, i32, i64, f32, f64, bf16, ptr;
  unsigned convergent;
} R;

static const kn_loc emu_loc = {"emu", 0, 0};

static int rfail(R *r, const char *fmt, const char *a, const char *b) {
  if (!r->failed) kn_error(r->d, NULL, emu_loc, fmt, a, b);
  r->failed = 1;
  return -1;
}

/* ---- helpers ---- */

static LLVMValueRef ci32(R *r, long long v) { return LLVMConstInt(r->i32, (unsigned long long)v, 1); }
static LLVMValueRef ci64(R *r, long long v) { return LLVMConstInt(r->i64, (unsigned long long)v, 1); }

static int add_site(R *r, int kind, const char *what, LLVMTypeRef ty) {
  char buf[160];
  char *tys = ty ? LLVMPrintTypeToString(ty) : NULL;
  snprintf(buf, sizeof buf, "%s%s%s #%d", what, tys ? " " : "", tys ? tys : "", ++r->counts[kind & 15]);
  if (tys) LLVMDisposeMessage(tys);
  if (r->nsites == r->capsites) {
    r->capsites = r->capsites ? 2 * r->capsites : 64;
    r->sites = realloc(r->sites, sizeof *r->sites * (size_t)r->capsites);
    KN_ASSERT(r->sites);
  }
  r->sites[r->nsites] = strdup(buf);
  KN_ASSERT(r->sites[r->nsites]);
  return r->nsites++;
}

/* a call of a runtime function at its absolute address */
static LLVMValueRef rt_call(R *r, void *fnptr, LLVMTypeRef ret, LLVMValueRef *args, int n,
                            bool convergent) {
  LLVMTypeRef ts[10];
  for (int i = 0; i < n; i++) ts[i] = LLVMTypeOf(args[i]);
  LLVMTypeRef ft = LLVMFunctionType(ret, ts, (unsigned)n, 0);
  LLVMValueRef callee = LLVMConstIntToPtr(ci64(r, (long long)(uintptr_t)fnptr), r->ptr);
  LLVMValueRef c = LLVMBuildCall2(r->B, ft, callee, args, (unsigned)n, "");
  if (convergent)
    LLVMAddCallSiteAttribute(c, LLVMAttributeFunctionIndex,
                             LLVMCreateEnumAttribute(r->C, r->convergent, 0));
  return c;
}

#define RT(f) ((void *)(uintptr_t)(f))

static LLVMValueRef entry_alloca(R *r, LLVMTypeRef ty) {
  LLVMBuilderRef b = LLVMCreateBuilderInContext(r->C);
  LLVMValueRef first = LLVMGetFirstInstruction(r->entry);
  if (first) LLVMPositionBuilderBefore(b, first);
  else LLVMPositionBuilderAtEnd(b, r->entry);
  LLVMValueRef a = LLVMBuildAlloca(b, ty, "emu.slot");
  /* at least the type's ABI alignment: the loads and stores LLVM builds on the slot assume it */
  unsigned align = LLVMABIAlignmentOfType(r->td, ty);
  LLVMSetAlignment(a, align > 16 ? align : 16);
  LLVMDisposeBuilder(b);
  return a;
}

/* the same shape as t (scalar or vector) with element type e */
static LLVMTypeRef reshape(LLVMTypeRef t, LLVMTypeRef e) {
  return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMVectorType(e, LLVMGetVectorSize(t)) : e;
}

static LLVMTypeRef elem_of(LLVMTypeRef t) {
  return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
}

static LLVMValueRef splat(LLVMTypeRef t, long long v) {
  LLVMTypeRef e = elem_of(t);
  LLVMValueRef c = LLVMConstInt(e, (unsigned long long)v, 0);
  if (LLVMGetTypeKind(t) != LLVMVectorTypeKind) return c;
  unsigned n = LLVMGetVectorSize(t);
  LLVMValueRef *cs = malloc(sizeof *cs * n);
  KN_ASSERT(cs);
  for (unsigned i = 0; i < n; i++) cs[i] = c;
  LLVMValueRef v2 = LLVMConstVector(cs, n);
  free(cs);
  return v2;
}

static bool is_bf16(LLVMTypeRef t) { return LLVMGetTypeKind(elem_of(t)) == LLVMBFloatTypeKind; }

/* float (or vector of float) -> bfloat, round to nearest even, NaN kept quiet */
static LLVMValueRef to_bf16(R *r, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  if (LLVMGetTypeKind(elem_of(t)) == LLVMDoubleTypeKind) {
    t = reshape(t, r->f32);
    x = LLVMBuildFPTrunc(r->B, x, t, "");
  }
  LLVMTypeRef it = reshape(t, r->i32);
  LLVMValueRef bits = LLVMBuildBitCast(r->B, x, it, "");
  LLVMValueRef hi = LLVMBuildLShr(r->B, bits, splat(it, 16), "");
  LLVMValueRef lsb = LLVMBuildAnd(r->B, hi, splat(it, 1), "");
  LLVMValueRef rnd = LLVMBuildAdd(r->B, bits, LLVMBuildAdd(r->B, lsb, splat(it, 0x7fff), ""), "");
  LLVMValueRef rounded = LLVMBuildLShr(r->B, rnd, splat(it, 16), "");
  LLVMValueRef qnan = LLVMBuildOr(r->B, hi, splat(it, 0x40), "");
  LLVMValueRef nan = LLVMBuildFCmp(r->B, LLVMRealUNO, x, x, "");
  LLVMValueRef res = LLVMBuildSelect(r->B, nan, qnan, rounded, "");
  res = LLVMBuildTrunc(r->B, res, reshape(t, r->i16), "");
  return LLVMBuildBitCast(r->B, res, reshape(t, r->bf16), "bf16");
}

static LLVMValueRef bf16_to_f32(R *r, LLVMValueRef x) {
  return is_bf16(LLVMTypeOf(x)) ? LLVMBuildFPExt(r->B, x, reshape(LLVMTypeOf(x), r->f32), "") : x;
}

static void replace(LLVMValueRef old, LLVMValueRef nw) {
  if (nw) LLVMReplaceAllUsesWith(old, nw);
  LLVMInstructionEraseFromParent(old);
}

/* 32-bit value as i32 and back (cross-lane moves are 32-bit on the hardware) */
static LLVMValueRef as_i32(R *r, LLVMValueRef v, const char *what) {
  LLVMTypeRef t = LLVMTypeOf(v);
  if (t == r->i32) return v;
  if (t == r->f32) return LLVMBuildBitCast(r->B, v, r->i32, "");
  rfail(r, "emulator: %s of a value that is not 32 bits wide is not emulated%s", what, "");
  return NULL;
}

static LLVMValueRef from_i32(R *r, LLVMValueRef v, LLVMTypeRef t) {
  return t == r->i32 ? v : LLVMBuildBitCast(r->B, v, t, "");
}

/* ---- memory ---- */

static unsigned addr_space(LLVMValueRef p) {
  LLVMTypeRef t = LLVMTypeOf(p);
  return LLVMGetTypeKind(t) == LLVMPointerTypeKind ? LLVMGetPointerAddressSpace(t) : 0;
}

static bool routed(unsigned as) { return as == KN_EMU_AS_GLOBAL || as == KN_EMU_AS_LDS; }

static int rewrite_memory(R *r, LLVMValueRef inst, bool store) {
  LLVMValueRef p = LLVMGetOperand(inst, store ? 1 : 0);
  unsigned as = addr_space(p);
  if (!routed(as)) return 0;
  if (LLVMGetOrdering(inst) != LLVMAtomicOrderingNotAtomic)
    return rfail(r, "emulator: atomic %s through addrspace(%s) is not emulated", store ? "store" : "load",
                 as == 1 ? "1" : "3");
  LLVMTypeRef ty = store ? LLVMTypeOf(LLVMGetOperand(inst, 0)) : LLVMTypeOf(inst);
  unsigned long long bytes = LLVMStoreSizeOfType(r->td, ty);
  int align = (int)LLVMGetAlignment(inst);
  char what[32];
  snprintf(what, sizeof what, "%s %s", as == KN_EMU_AS_LDS ? "LDS" : "global", store ? "store" : "load");
  int site = add_site(r, as == KN_EMU_AS_LDS ? (store ? 1 : 2) : (store ? 3 : 4), what, ty);
  LLVMPositionBuilderBefore(r->B, inst);
  LLVMValueRef slot = entry_alloca(r, ty);
  LLVMValueRef addr = LLVMBuildPtrToInt(r->B, p, r->i64, "");
  if (store) LLVMBuildStore(r->B, LLVMGetOperand(inst, 0), slot);
  if (store && as == KN_EMU_AS_LDS) r->lds_store_bb = LLVMGetInstructionParent(inst);
  LLVMValueRef args[6] = {ci32(r, as), addr, slot, ci32(r, (long long)bytes), ci32(r, align), ci32(r, site)};
  rt_call(r, store ? RT(kn_emu_rt_store) : RT(kn_emu_rt_load), r->vd, args, 6, false);
  replace(inst, store ? NULL : LLVMBuildLoad2(r->B, ty, slot, ""));
  return 0;
}

/* global_atomic_add_f32 (compiler/gpu/lower_amdgpu.c: an f32 atomicrmw fadd through a global
 * pointer, kiln's one atomic) becomes a runtime call that checks the address as a store and
 * adds atomically (workgroups run on several threads); gfx90a's instruction flushes f32
 * denormals, which the runtime does on that chip.  Any other atomic is an error. */
static int rewrite_atomic(R *r, LLVMValueRef inst) {
  LLVMValueRef p = LLVMGetOperand(inst, 0), v = LLVMGetOperand(inst, 1);
  unsigned as = addr_space(p);
  if (!routed(as)) return 0;
  if (LLVMGetInstructionOpcode(inst) != LLVMAtomicRMW || as != KN_EMU_AS_GLOBAL ||
      LLVMGetAtomicRMWBinOp(inst) != LLVMAtomicRMWBinOpFAdd || LLVMTypeOf(v) != r->f32)
    return rfail(r, "emulator: atomics other than a global f32 fadd are not emulated%s%s", "", "");
  LLVMPositionBuilderBefore(r->B, inst);
  LLVMValueRef args[5] = {LLVMBuildPtrToInt(r->B, p, r->i64, ""), v,
                          ci32(r, (long long)LLVMGetAlignment(inst)),
                          ci32(r, !strcmp(r->arch, "gfx90a")),
                          ci32(r, add_site(r, 14, "global_atomic_add_f32", NULL))};
  replace(inst, rt_call(r, RT(kn_emu_rt_atomic_fadd), r->f32, args, 5, false));
  return 0;
}

/* ---- intrinsics ---- */

static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static int rewrite_mfma(R *r, LLVMValueRef inst, const char *name) {
  int kind = kn_emu_mfma_by_intrinsic(name, r->arch);
  if (kind < 0) return rfail(r, "emulator: the MFMA %s is not emulated%s", name, "");
  const kn_emu_mfma_desc *s = kn_emu_mfma_get((kn_emu_mfma_kind)kind);
  int site = add_site(r, 5, s->mnemonic, NULL);
  LLVMPositionBuilderBefore(r->B, inst);
  LLVMValueRef a = LLVMGetOperand(inst, 0), b = LLVMGetOperand(inst, 1), c = LLVMGetOperand(inst, 2);
  if (r->breaks & KN_EMU_BREAK_MFMA_AB) {
    LLVMValueRef t = a;
    a = b;
    b = t;
  }
  LLVMValueRef sa = entry_alloca(r, LLVMTypeOf(a)), sb = entry_alloca(r, LLVMTypeOf(b));
  LLVMValueRef scd = entry_alloca(r, LLVMTypeOf(c));
  LLVMBuildStore(r->B, a, sa);
  LLVMBuildStore(r->B, b, sb);
  LLVMBuildStore(r->B, c, scd);
  LLVMValueRef args[8] = {ci32(r, kind), sa, sb, scd, LLVMGetOperand(inst, 3), LLVMGetOperand(inst, 4),
                          LLVMGetOperand(inst, 5), ci32(r, site)};
  rt_call(r, RT(kn_emu_rt_mfma), r->vd, args, 8, true);
  replace(inst, LLVMBuildLoad2(r->B, LLVMTypeOf(c), scd, ""));
  return 0;
}

static LLVMValueRef to_i32_imm(R *r, LLVMValueRef v) {
  LLVMTypeRef t = LLVMTypeOf(v);
  return t == r->i32 ? v : LLVMBuildZExt(r->B, v, r->i32, "");
}

static int rewrite_amdgcn(R *r, LLVMValueRef inst, const char *name) {
  const char *n = name + strlen("llvm.amdgcn.");
  LLVMTypeRef rt = LLVMTypeOf(inst);
  LLVMPositionBuilderBefore(r->B, inst);
  LLVMValueRef v = NULL, args[8];
  if (!strcmp(n, "workitem.id.x")) {
    v = rt_call(r, RT(kn_emu_rt_workitem_id), r->i32, NULL, 0, false);
  } else if (!strcmp(n, "workitem.id.y") || !strcmp(n, "workitem.id.z")) {
    v = ci32(r, 0);  /* kiln launches one-dimensional workgroups */
  } else if (starts(n, "workgroup.id.") && n[13] >= 'x' && n[13] <= 'z' && !n[14]) {
    args[0] = ci32(r, n[13] - 'x');
    v = rt_call(r, RT(kn_emu_rt_workgroup_id), r->i32, args, 1, false);
  } else if (!strcmp(n, "implicitarg.ptr")) {
    /* the hidden arguments live in the runtime; an addrspace(4) load of them stays a plain load */
    v = LLVMBuildIntToPtr(r->B, rt_call(r, RT(kn_emu_rt_implicitarg), r->i64, NULL, 0, false), rt, "");
  } else if (!strcmp(n, "s.barrier")) {
    bool publishes = r->lds_store_bb == LLVMGetInstructionParent(inst);
    r->lds_store_bb = NULL;
    if ((r->breaks & KN_EMU_BREAK_BARRIER) && publishes) {
      replace(inst, NULL);  /* test-only: the barrier after LDS stores goes missing */
      return 0;
    }
    args[0] = ci32(r, add_site(r, 6, "s_barrier", NULL));
    rt_call(r, RT(kn_emu_rt_barrier), r->vd, args, 1, true);
  } else if (starts(n, "mfma.")) {
    return rewrite_mfma(r, inst, name);
  } else if (starts(n, "make.buffer.rsrc.p8.")) {
    /* the resource (V#) is a slot of the lane's {base, stride, num_records, flags}, and the
     * ptr addrspace(8) value its address: only the buffer intrinsics below read it */
    LLVMValueRef slot = entry_alloca(r, LLVMArrayType2(r->i64, 4));
    LLVMValueRef parts[4] = {LLVMBuildPtrToInt(r->B, LLVMGetOperand(inst, 0), r->i64, ""),
                             LLVMBuildZExt(r->B, LLVMGetOperand(inst, 1), r->i64, ""),
                             LLVMGetOperand(inst, 2),
                             LLVMBuildZExt(r->B, LLVMGetOperand(inst, 3), r->i64, "")};
    for (int i = 0; i < 4; i++) {
      LLVMValueRef at = ci64(r, i);
      LLVMBuildStore(r->B, parts[i], LLVMBuildGEP2(r->B, r->i64, slot, &at, 1, ""));
    }
    v = LLVMBuildIntToPtr(r->B, LLVMBuildPtrToInt(r->B, slot, r->i64, ""), rt, "");
  } else if (starts(n, "raw.ptr.buffer.load.")) {
    /* buffer_load_* (raw: stride 0): the runtime range-checks the offset, 0 out of range */
    LLVMValueRef slot = entry_alloca(r, rt);
    LLVMValueRef a[6] = {LLVMBuildPtrToInt(r->B, LLVMGetOperand(inst, 0), r->i64, ""),
                         LLVMGetOperand(inst, 1), LLVMGetOperand(inst, 2), slot,
                         ci32(r, (long long)LLVMStoreSizeOfType(r->td, rt)),
                         ci32(r, add_site(r, 13, "buffer load", rt))};
    rt_call(r, RT(kn_emu_rt_buffer_load), r->vd, a, 6, false);
    v = LLVMBuildLoad2(r->B, rt, slot, "");
  } else if (starts(n, "readfirstlane")) {
    if (!(args[0] = as_i32(r, LLVMGetOperand(inst, 0), "readfirstlane"))) return -1;
    args[1] = ci32(r, add_site(r, 7, "readfirstlane", NULL));
    v = from_i32(r, rt_call(r, RT(kn_emu_rt_readfirstlane), r->i32, args, 2, true), rt);
  } else if (starts(n, "readlane")) {
    if (!(args[0] = as_i32(r, LLVMGetOperand(inst, 0), "readlane"))) return -1;
    args[1] = LLVMGetOperand(inst, 1);
    args[2] = ci32(r, add_site(r, 8, "readlane", NULL));
    v = from_i32(r, rt_call(r, RT(kn_emu_rt_readlane), r->i32, args, 3, true), rt);
  } else if (!strcmp(n, "ds.bpermute") || !strcmp(n, "ds.permute")) {
    bool back = n[3] == 'b';
    args[0] = LLVMGetOperand(inst, 0);
    if (!(args[1] = as_i32(r, LLVMGetOperand(inst, 1), "ds_bpermute"))) return -1;
    args[2] = ci32(r, add_site(r, 9, back ? "ds_bpermute" : "ds_permute", NULL));
    v = from_i32(r, rt_call(r, back ? RT(kn_emu_rt_bpermute) : RT(kn_emu_rt_permute), r->i32, args,
                            3, true), rt);
  } else if (!strcmp(n, "ds.swizzle")) {
    if (!(args[0] = as_i32(r, LLVMGetOperand(inst, 0), "ds_swizzle"))) return -1;
    args[1] = LLVMGetOperand(inst, 1);
    args[2] = ci32(r, add_site(r, 10, "ds_swizzle", NULL));
    v = from_i32(r, rt_call(r, RT(kn_emu_rt_swizzle), r->i32, args, 3, true), rt);
  } else if (starts(n, "update.dpp") || starts(n, "mov.dpp")) {
    bool upd = n[0] == 'u';
    int k = upd ? 1 : 0;  /* mov.dpp has no `old`: lanes it does not write keep the source */
    if (!(args[0] = as_i32(r, LLVMGetOperand(inst, 0), "DPP"))) return -1;
    if (!(args[1] = as_i32(r, LLVMGetOperand(inst, k), "DPP"))) return -1;
    for (int i = 0; i < 4; i++) args[2 + i] = to_i32_imm(r, LLVMGetOperand(inst, (unsigned)(k + 1 + i)));
    args[6] = ci32(r, add_site(r, 11, "dpp", NULL));
    v = from_i32(r, rt_call(r, RT(kn_emu_rt_dpp), r->i32, args, 7, true), rt);
  } else if (starts(n, "ballot")) {
    args[0] = LLVMBuildZExt(r->B, LLVMGetOperand(inst, 0), r->i32, "");
    args[1] = ci32(r, add_site(r, 12, "ballot", NULL));
    v = rt_call(r, RT(kn_emu_rt_ballot), r->i64, args, 2, true);
    if (rt != r->i64) v = LLVMBuildTrunc(r->B, v, rt, "");
  } else if (!strcmp(n, "exp2.f32")) {
    /* v_exp_f32 (CDNA 2/3 ISA guides; LLVM's exp2 lowering, which adds a range reduction
     * because of this): 2^x, results below 2^-126 (the smallest normal) flushed to +0; -inf ->
     * +0, NaN -> NaN.  The host's exp2 is within the instruction's 1 ulp. */
    LLVMValueRef x = LLVMGetOperand(inst, 0);
    LLVMTypeRef f32 = LLVMFloatTypeInContext(r->C);
    unsigned id = LLVMLookupIntrinsicID("llvm.exp2", 9);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(r->M, id, &f32, 1);
    LLVMValueRef e = LLVMBuildCall2(r->B, LLVMIntrinsicGetType(r->C, id, &f32, 1), fn, &x, 1, "");
    LLVMValueRef tiny = LLVMBuildFCmp(r->B, LLVMRealOLT, e, LLVMConstReal(f32, 0x1p-126), "");
    v = LLVMBuildSelect(r->B, tiny, LLVMConstReal(f32, 0.0), e, "");
  } else if (!strcmp(n, "mbcnt.lo") || !strcmp(n, "mbcnt.hi")) {
    args[0] = ci32(r, n[7] == 'h');
    args[1] = LLVMGetOperand(inst, 0);
    args[2] = LLVMGetOperand(inst, 1);
    v = rt_call(r, RT(kn_emu_rt_mbcnt), r->i32, args, 3, false);
  } else if (!strcmp(n, "s.waitcnt") || !strcmp(n, "sched.barrier") ||
             !strcmp(n, "sched.group.barrier") || !strcmp(n, "s.setprio") ||
             !strcmp(n, "wave.barrier") || !strcmp(n, "s.sleep") || !strcmp(n, "iglp.opt")) {
    /* scheduling hints: nothing to emulate */
  } else {
    return rfail(r, "emulator: the AMDGPU intrinsic %s is not emulated%s", name, "");
  }
  replace(inst, v);
  return 0;
}

/* bfloat arithmetic -> f32 arithmetic and a rounding */
static int legalize_bf16(R *r, LLVMValueRef inst) {
  LLVMOpcode op = LLVMGetInstructionOpcode(inst);
  LLVMTypeRef t = LLVMTypeOf(inst);
  if (!is_bf16(t)) return 0;
  LLVMPositionBuilderBefore(r->B, inst);
  LLVMTypeRef ft = reshape(t, r->f32);
  LLVMValueRef v = NULL;
  switch (op) {
  case LLVMFPTrunc: v = to_bf16(r, LLVMGetOperand(inst, 0)); break;
  case LLVMFAdd:
  case LLVMFSub:
  case LLVMFMul:
  case LLVMFDiv:
  case LLVMFRem:
    v = to_bf16(r, LLVMBuildBinOp(r->B, op, bf16_to_f32(r, LLVMGetOperand(inst, 0)),
                                  bf16_to_f32(r, LLVMGetOperand(inst, 1)), ""));
    break;
  case LLVMFNeg: {
    LLVMTypeRef it = reshape(t, r->i16);
    LLVMValueRef b = LLVMBuildBitCast(r->B, LLVMGetOperand(inst, 0), it, "");
    v = LLVMBuildBitCast(r->B, LLVMBuildXor(r->B, b, splat(it, 0x8000), ""), t, "");
    break;
  }
  case LLVMSIToFP: v = to_bf16(r, LLVMBuildSIToFP(r->B, LLVMGetOperand(inst, 0), ft, "")); break;
  case LLVMUIToFP: v = to_bf16(r, LLVMBuildUIToFP(r->B, LLVMGetOperand(inst, 0), ft, "")); break;
  case LLVMCall: {
    LLVMValueRef callee = LLVMGetCalledValue(inst);
    size_t len;
    const char *name = LLVMGetValueName2(callee, &len);
    unsigned id = LLVMLookupIntrinsicID(name, len);
    if (!id) return rfail(r, "emulator: a call of %s returning bfloat is not emulated%s", name, "");
    int na = LLVMGetNumArgOperands(inst);
    LLVMValueRef args[8];
    LLVMTypeRef ats[8];
    for (int i = 0; i < na && i < 8; i++) {
      args[i] = bf16_to_f32(r, LLVMGetOperand(inst, (unsigned)i));
      ats[i] = LLVMTypeOf(args[i]);
    }
    LLVMValueRef decl = LLVMGetIntrinsicDeclaration(r->M, id, &ft, 1);
    LLVMTypeRef fty = LLVMFunctionType(ft, ats, (unsigned)na, 0);
    v = to_bf16(r, LLVMBuildCall2(r->B, fty, decl, args, (unsigned)na, ""));
    break;
  }
  default: return 0;  /* moves (load, select, phi, bitcast, ...) need no rounding */
  }
  replace(inst, v);
  return 0;
}

static int rewrite_inst(R *r, LLVMValueRef inst) {
  LLVMOpcode op = LLVMGetInstructionOpcode(inst);
  switch (op) {
  case LLVMLoad: return rewrite_memory(r, inst, false);
  case LLVMStore: return rewrite_memory(r, inst, true);
  case LLVMFence: replace(inst, NULL); return 0;
  case LLVMAtomicRMW:
  case LLVMAtomicCmpXchg: return rewrite_atomic(r, inst);
  case LLVMAddrSpaceCast:
    if (routed(addr_space(LLVMGetOperand(inst, 0))) || routed(addr_space(inst)))
      return rfail(r, "emulator: address-space casts of global or LDS pointers are not emulated%s%s", "", "");
    return 0;
  case LLVMCall: {
    LLVMValueRef callee = LLVMGetCalledValue(inst);
    size_t len = 0;
    const char *name = LLVMIsAFunction(callee) ? LLVMGetValueName2(callee, &len) : "";
    if (starts(name, "llvm.amdgcn.")) return rewrite_amdgcn(r, inst, name);
    int na = LLVMGetNumArgOperands(inst);
    for (int i = 0; i < na; i++)
      if (routed(addr_space(LLVMGetOperand(inst, (unsigned)i))))
        return rfail(r, "emulator: %s on a global or LDS pointer is not emulated%s", name, "");
    return legalize_bf16(r, inst);
  }
  default: return legalize_bf16(r, inst);
  }
}

/* ---- the module around the lane ---- */

/* LDS globals -> constant offsets into one LDS; returns the total, or -1 */
static long long place_lds(R *r) {
  long long total = 0;
  LLVMValueRef g = LLVMGetFirstGlobal(r->M);
  while (g) {
    LLVMValueRef next = LLVMGetNextGlobal(g);
    if (addr_space(g) == KN_EMU_AS_LDS) {
      LLVMTypeRef vt = LLVMGlobalGetValueType(g);
      long long size = (long long)LLVMABISizeOfType(r->td, vt);
      unsigned align = LLVMGetAlignment(g) ? LLVMGetAlignment(g) : 16;
      total = (total + align - 1) / align * align;
      LLVMValueRef addr = LLVMConstIntToPtr(ci64(r, total), LLVMTypeOf(g));
      LLVMReplaceAllUsesWith(g, addr);
      LLVMDeleteGlobal(g);
      total += size;
    }
    g = next;
  }
  return total;
}

static LLVMValueRef const_string(R *r, const char *s, const char *gname) {
  LLVMValueRef init = LLVMConstStringInContext(r->C, s, (unsigned)strlen(s), 0);
  LLVMValueRef g = LLVMAddGlobal(r->M, LLVMTypeOf(init), gname);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  return g;
}

/* void kn.emu.lane(ptr args): unpacks the kn_argvals and runs the kernel for this lane */
static void build_lane(R *r, LLVMValueRef lane) {
  LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(r->C, lane, "entry");
  LLVMPositionBuilderAtEnd(r->B, bb);
  LLVMValueRef argp = LLVMGetParam(lane, 0);
  unsigned np = LLVMCountParams(r->fn);
  LLVMValueRef *vals = calloc(np ? np : 1, sizeof *vals);
  KN_ASSERT(vals);
  for (unsigned i = 0; i < np; i++) {
    LLVMTypeRef t = LLVMTypeOf(LLVMGetParam(r->fn, i));
    LLVMValueRef idx = ci64(r, (long long)i * 8);
    LLVMValueRef p = LLVMBuildGEP2(r->B, r->i8, argp, &idx, 1, "");
    LLVMTypeKind k = LLVMGetTypeKind(t);
    if (k == LLVMPointerTypeKind) {
      vals[i] = LLVMBuildIntToPtr(r->B, LLVMBuildLoad2(r->B, r->i64, p, ""), t, "");
    } else if (k == LLVMIntegerTypeKind) {
      LLVMValueRef x = LLVMBuildLoad2(r->B, r->i64, p, "");
      vals[i] = LLVMGetIntTypeWidth(t) == 1 ? LLVMBuildICmp(r->B, LLVMIntNE, x, ci64(r, 0), "")
                : LLVMGetIntTypeWidth(t) == 64 ? x
                                               : LLVMBuildTrunc(r->B, x, t, "");
    } else {
      /* floats: the host ABI's double, rounded to the parameter's format (f32: one rounding;
       * f16 / bf16 through f32 first, the same as the host target's entry for these values) */
      LLVMValueRef x = LLVMBuildFPTrunc(r->B, LLVMBuildLoad2(r->B, r->f64, p, ""), r->f32, "");
      vals[i] = t == r->f32 ? x : t == r->bf16 ? to_bf16(r, x) : LLVMBuildFPTrunc(r->B, x, t, "");
    }
  }
  LLVMBuildCall2(r->B, LLVMGlobalGetValueType(r->fn), r->fn, vals, np, "");
  LLVMBuildRetVoid(r->B);
  free(vals);
}

static int read_wg_size(R *r) {
  const char *key = "amdgpu-flat-work-group-size";
  LLVMAttributeRef a = LLVMGetStringAttributeAtIndex(r->fn, LLVMAttributeFunctionIndex, key,
                                                     (unsigned)strlen(key));
  if (!a) return -1;
  unsigned len;
  const char *v = LLVMGetStringAttributeValue(a, &len);
  const char *comma = memchr(v, ',', len);
  return comma ? atoi(comma + 1) : -1;
}

int kn_emu_rewrite(LLVMModuleRef mod, const char *arch, int lds_limit, unsigned breaks, kn_diag *d) {
  R r = {.M = mod, .C = LLVMGetModuleContext(mod), .breaks = breaks, .arch = arch, .d = d};
  r.B = LLVMCreateBuilderInContext(r.C);
  r.vd = LLVMVoidTypeInContext(r.C);
  r.i1 = LLVMInt1TypeInContext(r.C);
  r.i8 = LLVMInt8TypeInContext(r.C);
  r.i16 = LLVMInt16TypeInContext(r.C);
  r.i32 = LLVMInt32TypeInContext(r.C);
  r.i64 = LLVMInt64TypeInContext(r.C);
  r.f32 = LLVMFloatTypeInContext(r.C);
  r.f64 = LLVMDoubleTypeInContext(r.C);
  r.bf16 = LLVMBFloatTypeInContext(r.C);
  r.ptr = LLVMPointerTypeInContext(r.C, 0);
  r.convergent = LLVMGetEnumAttributeKindForName("convergent", 10);

  /* the host's triple and data layout from here on (sizes of types, pointer widths) */
  kn_diag tmp;
  LLVMTargetMachineRef tm = kn_llvm_host_machine(&tmp);
  if (!tm) {
    *d = tmp;
    LLVMDisposeBuilder(r.B);
    return -1;
  }
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(mod, triple);
  LLVMDisposeMessage(triple);
  r.td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(r.td);
  LLVMSetDataLayout(mod, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetMachine(tm);

  int rc = -1, nkernels = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (LLVMCountBasicBlocks(f) && LLVMGetFunctionCallConv(f) == LLVMAMDGPUKERNELCallConv) {
      r.fn = f;
      nkernels++;
    }
  if (nkernels != 1) {
    kn_error(d, NULL, emu_loc, "emulator: expected one amdgpu_kernel in the module, found %d", nkernels);
    goto done;
  }
  size_t nlen;
  const char *kname = LLVMGetValueName2(r.fn, &nlen);
  char *name = strndup(kname, nlen);
  KN_ASSERT(name);
  int wg_size = read_wg_size(&r);
  if (wg_size <= 0 || wg_size % 64) {
    kn_error(d, NULL, emu_loc, "emulator: @%s has no usable amdgpu-flat-work-group-size (%d)", name, wg_size);
    free(name);
    goto done;
  }
  long long lds = place_lds(&r);

  /* the lane: rewrite every instruction (collected first: the rewrite inserts and erases) */
  r.entry = LLVMGetEntryBasicBlock(r.fn);
  size_t n = 0, cap = 1024;
  LLVMValueRef *insts = malloc(sizeof *insts * cap);
  KN_ASSERT(insts);
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(r.fn); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i)) {
      if (n == cap) {
        insts = realloc(insts, sizeof *insts * (cap *= 2));
        KN_ASSERT(insts);
      }
      insts[n++] = i;
    }
  for (size_t i = 0; i < n && !r.failed; i++) rewrite_inst(&r, insts[i]);
  free(insts);
  if (r.failed) {
    free(name);
    goto done;
  }
  LLVMSetFunctionCallConv(r.fn, LLVMCCallConv);
  LLVMSetLinkage(r.fn, LLVMInternalLinkage);

  /* kn.emu.lane, kiln_<name>.status, the description, kiln_<name> */
  LLVMValueRef lane = LLVMAddFunction(mod, "kn.emu.lane", LLVMFunctionType(r.vd, &r.ptr, 1, 0));
  LLVMSetLinkage(lane, LLVMInternalLinkage);
  build_lane(&r, lane);
  char sym[300];
  snprintf(sym, sizeof sym, "kiln_%s.status", name);
  LLVMValueRef status = LLVMAddGlobal(mod, r.i32, sym);
  LLVMSetInitializer(status, ci32(&r, 0));
  LLVMValueRef *sv = calloc((size_t)r.nsites + 1, sizeof *sv);
  KN_ASSERT(sv);
  for (int i = 0; i < r.nsites; i++) sv[i] = const_string(&r, r.sites[i], ".kn.emu.site");
  LLVMValueRef sites = LLVMAddGlobal(mod, LLVMArrayType2(r.ptr, (uint64_t)r.nsites), ".kn.emu.sites");
  LLVMSetInitializer(sites, LLVMConstArray2(r.ptr, sv, (uint64_t)r.nsites));
  LLVMSetGlobalConstant(sites, 1);
  LLVMSetLinkage(sites, LLVMPrivateLinkage);
  free(sv);
  LLVMValueRef fields[13] = {ci32(&r, KN_EMU_MAGIC), ci32(&r, wg_size), ci32(&r, lds), ci32(&r, lds_limit),
                             ci32(&r, r.nsites), ci32(&r, (long long)breaks), ci32(&r, 0), ci32(&r, 0),
                             const_string(&r, name, ".kn.emu.kernel"),
                             const_string(&r, arch, ".kn.emu.arch"), sites, lane, status};
  LLVMValueRef info_init = LLVMConstStructInContext(r.C, fields, 13, 0);
  LLVMValueRef info = LLVMAddGlobal(mod, LLVMTypeOf(info_init), ".kn.emu.info");
  LLVMSetInitializer(info, info_init);
  LLVMSetGlobalConstant(info, 1);
  LLVMSetLinkage(info, LLVMPrivateLinkage);

  LLVMTypeRef ep[7] = {r.ptr, r.i32, r.i32, r.i32, r.i32, r.i32, r.i32};
  snprintf(sym, sizeof sym, "kiln_%s", name);
  LLVMValueRef entry = LLVMAddFunction(mod, sym, LLVMFunctionType(r.vd, ep, 7, 0));
  LLVMPositionBuilderAtEnd(r.B, LLVMAppendBasicBlockInContext(r.C, entry, "entry"));
  LLVMValueRef wa[8] = {info};
  for (int i = 0; i < 7; i++) wa[1 + i] = LLVMGetParam(entry, (unsigned)i);
  rt_call(&r, RT(kn_emu_rt_workgroup), r.vd, wa, 8, false);
  LLVMBuildRetVoid(r.B);
  free(name);
  rc = 0;
done:
  for (int i = 0; i < r.nsites; i++) free(r.sites[i]);
  free(r.sites);
  LLVMDisposeTargetData(r.td);
  LLVMDisposeBuilder(r.B);
  return rc;
}
