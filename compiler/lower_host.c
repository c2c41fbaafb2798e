/* lower_host.c — lowering of a tile IR kernel to LLVM IR for the host CPU.
 *
 * Design (simple and exact first; LLVM's O3 does the vectorising):
 *  - A scalar IR value is one LLVM SSA value of its "register type": i1, i32, i64, half (f16),
 *    float (f32), and the raw bits for bf16 (i16) and the fp8 formats (i8).  bf16 and fp8 are
 *    kept as bits because the rounding they need (kn_round) is done by our own code, not by
 *    whatever the CPU offers.
 *  - A tile value is a buffer of its elements in row-major order, an alloca in the entry block
 *    (i1 elements take a byte, 0 or 1), or — when every element is the same, as for const, splat
 *    and shape ops on them — just the scalar (a "uniform" tile, no buffer, no loop).  Reshape and
 *    expand_dims alias their operand's buffer: values are immutable, so sharing is safe.
 *  - Every tile op is a loop (or a loop nest) over the elements of its result; element (i, j) of
 *    a rank-2 tile is at i * shape[1] + j.  Operands are read through get(), which hides the
 *    buffer / uniform difference.
 *  - Arithmetic on f16, bf16 and fp8 is done in f32 and rounded back to the format after every op
 *    (as the interpreter rounds after every op): f32 has more than 2p+2 bits for all of them, so
 *    +, -, *, /, sqrt give the correctly rounded result of the format itself.  The float
 *    functions (exp, exp2, log, log2, sqrt, rsqrt, tanh: the ops with a math entry in ops.def)
 *    are computed in double as the entry's host column says (the C library's function, an LLVM
 *    intrinsic, or an expansion below) and rounded once, exactly as the interpreter does, so
 *    the host matches it bit for bit when both use the same libm.
 *  - Every switch over opcodes names every op (no default; the families come from op_cases.h),
 *    so a new op is a compile error here until it is handled or refused with a message.
 *  - Rounding a double to f16/bf16 and anything to fp8 calls kn_rt_round / kn_rt_encode (C, the
 *    same kn_round/kn_encode as the interpreter) through absolute JIT symbols; f32 -> f16 is
 *    LLVM's fptrunc (round to nearest even), f32 -> bf16 is a few integer ops (RNE, NaN kept
 *    quiet); fp8 -> f32 is a 256-entry table built with kn_decode at compile time.
 *  - dot accumulates exactly like the interpreter: for each (i, j), acc = acc + f32(a*b) in k
 *    order; the loop nest is i, k, j so the j loop vectorises without reassociating anything.
 *    Reductions run in index order (first element, then op with each next one).
 *  - Loads, stores and gathers branch around dead elements (bounds, mask) so no dead address is
 *    touched; the vectoriser turns that into masked loads/stores where the CPU has them.  A
 *    gather's element i is base + offsets[i] (sign-extended to i64).  A store with atomic_add
 *    is an `atomicrmw fadd` (monotonic) per live element: programs run on several threads.
 *  - Checked mode (kn_lower_host_checked, see host_run.h): behind that branch, every live access
 *    first calls kn_rt_check_access with the launch's checker (one more kernel argument), a
 *    constant site naming the op and its location, the element and the program; an access it
 *    refuses is skipped (a load gives `other`, or 0).  The call keeps those loops scalar.
 *  - for/if results and loop-carried values live in slots (allocas; mem2reg turns scalar ones
 *    into phis); a yield copies into the slots, through a temporary when a yielded value is
 *    another slot of the same loop (parallel-copy semantics).
 *  - Run-time errors of the interpreter (integer division or remainder by zero, a shift out of
 *    range, a for step <= 0) set a bit in the kernel's status word (see target.h) and give a
 *    defined result (0; no iteration) instead of a trap; INT_MIN / -1 wraps as in the interpreter.
 *
 * Assumes a verified module without calls (the inliner ran).  Anything unexpected is reported as
 * an error naming the op, never an abort.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "device.h"
#include "host_run.h"
#include "numeric.h"
#include "op_cases.h"
#include "target.h"

/* where the yield ending a region writes: the slots of the enclosing for/if */
typedef struct yield_dst {
  int n;
  LLVMValueRef *slot;  /* scalar: alloca of the register type; tile: the buffer */
} yield_dst;

typedef struct lower {
  LLVMContextRef C;
  LLVMModuleRef M;
  LLVMBuilderRef B;
  LLVMBuilderRef A;        /* positioned before the branch that ends the alloca block */
  LLVMValueRef fn;
  LLVMValueRef alloca_br;
  const kn_module *m;
  kn_func *k;
  kn_diag *d;
  int failed;
  LLVMValueRef *vals;      /* per value id: scalar value, tile buffer, or uniform scalar */
  bool *uniform;           /* per value id: tile held as one scalar */
  LLVMValueRef args, pid[3], nprog[3];
  LLVMValueRef err;        /* i32 slot: KN_KSTATUS_* bits of this program */
  LLVMValueRef status;     /* the global status word */
  bool checked;            /* checked mode: */
  LLVMValueRef check;      /*   the launch's checker (args[nparams].p) */
  LLVMValueRef site;       /*   the kn_check_site of the load/store being lowered */
  LLVMValueRef f8tab[KN_SCALAR_COUNT];
  size_t tile_bytes;
  LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr, vd;
} lower;

/* ---- small helpers ---- */

static int fail(lower *L, const kn_op *op, const char *fmt, const char *what) {
  if (!L->failed) {
    char msg[256];
    snprintf(msg, sizeof msg, fmt, what);
    kn_error(L->d, L->m, op ? op->loc : L->k->loc, "host lowering: %s", msg);
  }
  L->failed = 1;
  return -1;
}

static kn_scalar elem(const kn_value *v) { return (kn_scalar)v->type.elem; }
static bool is_tile(const kn_value *v) { return v->type.kind == KN_TY_TILE; }
static bool is_fp8(kn_scalar s) { return s >= KN_F8E4M3 && s <= KN_F8E5M2FNUZ; }

static LLVMTypeRef reg_type(lower *L, kn_scalar s) {
  switch (s) {
  case KN_I1: return L->i1;
  case KN_I32: return L->i32;
  case KN_I64: return L->i64;
  case KN_F16: return L->f16;
  case KN_BF16: return L->i16;
  case KN_F32: return L->f32;
  default: return L->i8;
  }
}
static LLVMTypeRef mem_type(lower *L, kn_scalar s) { return s == KN_I1 ? L->i8 : reg_type(L, s); }

static LLVMValueRef ci64(lower *L, int64_t v) { return LLVMConstInt(L->i64, (unsigned long long)v, 1); }
static LLVMValueRef ci32(lower *L, int64_t v) { return LLVMConstInt(L->i32, (unsigned long long)v, 1); }

static LLVMValueRef call_fn(lower *L, const char *name, LLVMTypeRef ret, LLVMTypeRef *pt, int n,
                            LLVMValueRef *args, bool pure) {
  LLVMTypeRef fty = LLVMFunctionType(ret, pt, (unsigned)n, 0);
  LLVMValueRef f = LLVMGetNamedFunction(L->M, name);
  if (!f) {
    f = LLVMAddFunction(L->M, name, fty);
    const char *attrs[] = {"nounwind", "willreturn", "nosync"};
    for (int i = 0; i < 3; i++) {
      unsigned kind = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(L->C, kind, 0));
    }
    if (pure) { /* memory(none): lets LLVM hoist and CSE the call */
      unsigned kind = LLVMGetEnumAttributeKindForName("memory", 6);
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(L->C, kind, 0));
    }
  }
  return LLVMBuildCall2(L->B, fty, f, args, (unsigned)n, "");
}

static LLVMValueRef intrinsic(lower *L, const char *name, LLVMTypeRef *tys, int ntys,
                              LLVMValueRef *args, int nargs) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  KN_ASSERT(id != 0);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(L->M, id, tys, (size_t)ntys);
  LLVMTypeRef fty = LLVMIntrinsicGetType(L->C, id, tys, (size_t)ntys);
  return LLVMBuildCall2(L->B, fty, f, args, (unsigned)nargs, "");
}

static LLVMValueRef alloca_bytes(lower *L, LLVMTypeRef ty, int64_t n, size_t bytes, const char *nm) {
  L->tile_bytes += (bytes + 63) & ~(size_t)63;
  LLVMValueRef a = n == 1 ? LLVMBuildAlloca(L->A, ty, nm)
                          : LLVMBuildAlloca(L->A, LLVMArrayType2(ty, (uint64_t)n), nm);
  LLVMSetAlignment(a, n == 1 ? 8 : 64);
  return a;
}

static LLVMValueRef tile_alloc(lower *L, kn_type t) {
  int64_t n = kn_ty_numel(t);
  return alloca_bytes(L, mem_type(L, (kn_scalar)t.elem), n, (size_t)n * kn_scalar_size((kn_scalar)t.elem),
                      "tile");
}

static LLVMValueRef scalar_slot(lower *L, kn_scalar s) {
  return alloca_bytes(L, reg_type(L, s), 1, 8, "slot");
}

static LLVMValueRef elem_ptr(lower *L, kn_scalar s, LLVMValueRef base, LLVMValueRef idx) {
  return LLVMBuildGEP2(L->B, mem_type(L, s), base, &idx, 1, "");
}

/* register value from memory of type s (tile buffers and global memory alike) */
static LLVMValueRef load_mem(lower *L, kn_scalar s, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(L->B, mem_type(L, s), p, "");
  LLVMSetAlignment(v, align);
  if (s == KN_I1) v = LLVMBuildICmp(L->B, LLVMIntNE, v, LLVMConstInt(L->i8, 0, 0), "");
  return v;
}
static void store_mem(lower *L, kn_scalar s, LLVMValueRef p, LLVMValueRef v, unsigned align) {
  if (s == KN_I1) v = LLVMBuildZExt(L->B, v, L->i8, "");
  LLVMSetAlignment(LLVMBuildStore(L->B, v, p), align);
}

static LLVMValueRef load_elem(lower *L, kn_scalar s, LLVMValueRef buf, LLVMValueRef idx) {
  return load_mem(L, s, elem_ptr(L, s, buf, idx), (unsigned)kn_scalar_size(s));
}
static void store_elem(lower *L, kn_scalar s, LLVMValueRef buf, LLVMValueRef idx, LLVMValueRef v) {
  store_mem(L, s, elem_ptr(L, s, buf, idx), v, (unsigned)kn_scalar_size(s));
}

/* element idx (i64, row-major) of v; scalars and uniform tiles ignore idx */
static LLVMValueRef get(lower *L, const kn_value *v, LLVMValueRef idx) {
  LLVMValueRef x = L->vals[v->id];
  KN_ASSERT(x);
  if (!is_tile(v) || L->uniform[v->id]) return x;
  return load_elem(L, elem(v), x, idx);
}

static void set_value(lower *L, const kn_value *v, LLVMValueRef x, bool uniform) {
  L->vals[v->id] = x;
  L->uniform[v->id] = uniform;
}

/* ---- loops over elements ---- */

typedef struct loop {
  LLVMBasicBlockRef body;
  LLVMValueRef iv, end;
} loop;

/* opens `for (iv = start; iv < end; iv++)` with start < end (checked by the caller) */
static LLVMValueRef loop_open(lower *L, loop *lp, int64_t start, int64_t end) {
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(L->B);
  lp->body = LLVMAppendBasicBlockInContext(L->C, L->fn, "loop");
  LLVMBuildBr(L->B, lp->body);
  LLVMPositionBuilderAtEnd(L->B, lp->body);
  lp->iv = LLVMBuildPhi(L->B, L->i64, "i");
  LLVMValueRef s = ci64(L, start);
  LLVMAddIncoming(lp->iv, &s, &pre, 1);
  lp->end = ci64(L, end);
  return lp->iv;
}

static void loop_close(lower *L, loop *lp) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(L->B);
  LLVMValueRef next = LLVMBuildNSWAdd(L->B, lp->iv, ci64(L, 1), "");
  LLVMAddIncoming(lp->iv, &next, &latch, 1);
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(L->C, L->fn, "loop.end");
  LLVMBuildCondBr(L->B, LLVMBuildICmp(L->B, LLVMIntSLT, next, lp->end, ""), lp->body, exit);
  LLVMPositionBuilderAtEnd(L->B, exit);
}

/* ---- number formats ---- */

static LLVMValueRef f8_table(lower *L, kn_scalar s) {
  if (!L->f8tab[s]) {
    LLVMValueRef e[256];
    for (int i = 0; i < 256; i++) e[i] = LLVMConstReal(L->f32, kn_decode(s, (uint64_t)i));
    char name[64];
    snprintf(name, sizeof name, "kiln.decode.%s", kn_scalar_name(s));
    LLVMValueRef g = LLVMAddGlobal(L->M, LLVMArrayType2(L->f32, 256), name);
    LLVMSetInitializer(g, LLVMConstArray2(L->f32, e, 256));
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
    LLVMSetAlignment(g, 64);
    L->f8tab[s] = g;
  }
  return L->f8tab[s];
}

/* exact widening of a float-format register value to f32 */
static LLVMValueRef to_f32(lower *L, kn_scalar s, LLVMValueRef v) {
  switch (s) {
  case KN_F32: return v;
  case KN_F16: return LLVMBuildFPExt(L->B, v, L->f32, "");
  case KN_BF16: {
    LLVMValueRef w = LLVMBuildShl(L->B, LLVMBuildZExt(L->B, v, L->i32, ""), ci32(L, 16), "");
    return LLVMBuildBitCast(L->B, w, L->f32, "");
  }
  default: {
    KN_ASSERT(is_fp8(s));
    LLVMValueRef idx[2] = {ci64(L, 0), LLVMBuildZExt(L->B, v, L->i64, "")};
    LLVMValueRef p = LLVMBuildInBoundsGEP2(L->B, LLVMArrayType2(L->f32, 256), f8_table(L, s), idx, 2, "");
    return LLVMBuildLoad2(L->B, L->f32, p, "");
  }
  }
}

static LLVMValueRef to_f64(lower *L, kn_scalar s, LLVMValueRef v) {
  return LLVMBuildFPExt(L->B, to_f32(L, s, v), L->f64, "");
}

static LLVMValueRef rt_encode(lower *L, kn_scalar s, LLVMValueRef d) {
  LLVMTypeRef pt[2] = {L->i32, L->f64};
  LLVMValueRef a[2] = {ci32(L, s), d};
  return call_fn(L, "kn_rt_encode", L->i32, pt, 2, a, true);
}
static LLVMValueRef rt_round(lower *L, kn_scalar s, LLVMValueRef d) {
  LLVMTypeRef pt[2] = {L->i32, L->f64};
  LLVMValueRef a[2] = {ci32(L, s), d};
  return call_fn(L, "kn_rt_round", L->f64, pt, 2, a, true);
}

/* f32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN; overflow gives inf */
static LLVMValueRef bf16_from_f32(lower *L, LLVMValueRef f) {
  LLVMValueRef b = LLVMBuildBitCast(L->B, f, L->i32, "");
  LLVMValueRef hi = LLVMBuildLShr(L->B, b, ci32(L, 16), "");
  LLVMValueRef lsb = LLVMBuildAnd(L->B, hi, ci32(L, 1), "");
  LLVMValueRef r = LLVMBuildAdd(L->B, b, LLVMBuildAdd(L->B, lsb, ci32(L, 0x7fff), ""), "");
  r = LLVMBuildLShr(L->B, r, ci32(L, 16), "");
  LLVMValueRef nan = LLVMBuildOr(L->B, hi, ci32(L, 0x40), "");
  LLVMValueRef isnan = LLVMBuildFCmp(L->B, LLVMRealUNO, f, f, "");
  return LLVMBuildTrunc(L->B, LLVMBuildSelect(L->B, isnan, nan, r, ""), L->i16, "");
}

/* f32 (already the exact result, or rounded once from an exact +,-,*,/,sqrt) -> format s */
static LLVMValueRef from_f32(lower *L, kn_scalar s, LLVMValueRef f) {
  switch (s) {
  case KN_F32: return f;
  case KN_F16: return LLVMBuildFPTrunc(L->B, f, L->f16, "");
  case KN_BF16: return bf16_from_f32(L, f);
  default:
    KN_ASSERT(is_fp8(s));
    return LLVMBuildTrunc(L->B, rt_encode(L, s, LLVMBuildFPExt(L->B, f, L->f64, "")), L->i8, "");
  }
}

/* double -> format s with one rounding (as kn_round) */
static LLVMValueRef from_f64(lower *L, kn_scalar s, LLVMValueRef d) {
  switch (s) {
  case KN_F32: return LLVMBuildFPTrunc(L->B, d, L->f32, "");
  case KN_F16:
  case KN_BF16: {
    /* round once in C, then every narrowing below is exact */
    LLVMValueRef f = LLVMBuildFPTrunc(L->B, rt_round(L, s, d), L->f32, "");
    return from_f32(L, s, f);
  }
  default:
    KN_ASSERT(is_fp8(s));
    return LLVMBuildTrunc(L->B, rt_encode(L, s, d), L->i8, "");
  }
}

/* ---- elementwise semantics ---- */

/* when cond (i1) holds, a run-time error the interpreter reports: record its status bit */
static void note_error(lower *L, LLVMValueRef cond, int bit) {
  LLVMValueRef old = LLVMBuildLoad2(L->B, L->i32, L->err, "");
  LLVMValueRef b = LLVMBuildSelect(L->B, cond, ci32(L, bit), ci32(L, 0), "");
  LLVMBuildStore(L->B, LLVMBuildOr(L->B, old, b, ""), L->err);
}

static LLVMValueRef int_binary(lower *L, kn_opcode opc, LLVMValueRef a, LLVMValueRef b, int width) {
  LLVMBuilderRef B = L->B;
  LLVMTypeRef t = LLVMTypeOf(a);
  LLVMValueRef zero = LLVMConstInt(t, 0, 0), one = LLVMConstInt(t, 1, 0);
  switch (opc) {
  case KN_OP_ADD: return LLVMBuildAdd(B, a, b, "");
  case KN_OP_SUB: return LLVMBuildSub(B, a, b, "");
  case KN_OP_MUL: return LLVMBuildMul(B, a, b, "");
  case KN_OP_DIV:
  case KN_OP_REM: {
    LLVMValueRef z = LLVMBuildICmp(B, LLVMIntEQ, b, zero, "");
    LLVMValueRef m1 = LLVMBuildICmp(B, LLVMIntEQ, b, LLVMConstAllOnes(t), "");
    LLVMValueRef safe = LLVMBuildSelect(B, LLVMBuildOr(B, z, m1, ""), one, b, "");
    LLVMValueRef q = opc == KN_OP_DIV ? LLVMBuildSDiv(B, a, safe, "") : LLVMBuildSRem(B, a, safe, "");
    LLVMValueRef byneg = opc == KN_OP_DIV ? LLVMBuildSub(B, zero, a, "") : zero; /* x / -1 wraps */
    q = LLVMBuildSelect(B, m1, byneg, q, "");
    note_error(L, z, KN_KSTATUS_DIV_ZERO);
    return LLVMBuildSelect(B, z, zero, q, "");
  }
  case KN_OP_MAX: return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, a, b, ""), a, b, "");
  case KN_OP_MIN: return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, a, b, ""), a, b, "");
  case KN_OP_AND: return LLVMBuildAnd(B, a, b, "");
  case KN_OP_OR: return LLVMBuildOr(B, a, b, "");
  case KN_OP_XOR: return LLVMBuildXor(B, a, b, "");
  case KN_OP_SHL:
  case KN_OP_SHR: {
    /* a count outside [0, width) is an error; the result is then what shifting every bit out
     * gives (shl: 0, shr: the sign) */
    LLVMValueRef w = LLVMConstInt(t, (unsigned long long)width, 0);
    LLVMValueRef inrange = LLVMBuildICmp(B, LLVMIntULT, b, w, "");
    note_error(L, LLVMBuildNot(B, inrange, ""), KN_KSTATUS_SHIFT);
    LLVMValueRef cnt = LLVMBuildSelect(B, inrange, b, LLVMConstInt(t, (unsigned long long)width - 1, 0), "");
    if (opc == KN_OP_SHL) return LLVMBuildSelect(B, inrange, LLVMBuildShl(B, a, cnt, ""), zero, "");
    return LLVMBuildAShr(B, a, cnt, "");
  }
  KN_CASES_NOT_BINARY return NULL;
  }
  return NULL;
}

static LLVMValueRef float_binary(lower *L, kn_opcode opc, kn_scalar s, LLVMValueRef a,
                                 LLVMValueRef b) {
  LLVMBuilderRef B = L->B;
  LLVMValueRef x = to_f32(L, s, a), y = to_f32(L, s, b), r = NULL;
  switch (opc) {
  case KN_OP_ADD: r = LLVMBuildFAdd(B, x, y, ""); break;
  case KN_OP_SUB: r = LLVMBuildFSub(B, x, y, ""); break;
  case KN_OP_MUL: r = LLVMBuildFMul(B, x, y, ""); break;
  case KN_OP_DIV: r = LLVMBuildFDiv(B, x, y, ""); break;
  case KN_OP_REM: r = LLVMBuildFRem(B, x, y, ""); break; /* fmod: exact */
  case KN_OP_MAX:
  case KN_OP_MIN: {
    /* NaN-propagating; otherwise the larger (smaller) by value, -0 < +0 */
    LLVMValueRef xy[2] = {x, y};
    r = intrinsic(L, opc == KN_OP_MAX ? "llvm.maximum" : "llvm.minimum", &L->f32, 1, xy, 2);
    break;
  }
  case KN_OP_AND: case KN_OP_OR: case KN_OP_XOR: case KN_OP_SHL: case KN_OP_SHR:
  KN_CASES_NOT_BINARY
    return NULL;  /* int only, or not binary */
  }
  return r ? from_f32(L, s, r) : NULL;
}

static LLVMValueRef binary(lower *L, kn_opcode opc, kn_scalar s, LLVMValueRef a, LLVMValueRef b) {
  if (kn_scalar_is_float(s)) return float_binary(L, opc, s, a, b);
  if (s == KN_I1) {
    /* i1 arithmetic is done on 0/1 integers and wrapped back (x != 0), like the interpreter */
    LLVMValueRef r = int_binary(L, opc, LLVMBuildZExt(L->B, a, L->i64, ""),
                                LLVMBuildZExt(L->B, b, L->i64, ""), 1);
    return LLVMBuildICmp(L->B, LLVMIntNE, r, ci64(L, 0), "");
  }
  return int_binary(L, opc, a, b, kn_scalar_bits(s));
}

/* ---- float functions, as the op table's math entry says (KN_MATH(name, host, gpu)) ---- */

static LLVMValueRef libm1(lower *L, const char *name, LLVMValueRef d) {
  return call_fn(L, name, L->f64, &L->f64, 1, &d, true);
}

static LLVMValueRef llvm1(lower *L, const char *name, LLVMValueRef d) {
  char full[64];
  snprintf(full, sizeof full, "llvm.%s", name);
  return intrinsic(L, full, &L->f64, 1, &d, 1);
}

/* kiln's expansions (KILN in the host column), in double like everything here */
static LLVMValueRef expand_rsqrt(lower *L, LLVMValueRef d) {
  return LLVMBuildFDiv(L->B, LLVMConstReal(L->f64, 1.0), llvm1(L, "sqrt", d), "");
}

static const struct {
  const char *name;
  LLVMValueRef (*fn)(lower *L, LLVMValueRef d);
} expansions[] = {{"rsqrt", expand_rsqrt}};

/* f(x) in double, rounded once to s: what the interpreter computes */
static LLVMValueRef math_unary(lower *L, kn_opcode opc, kn_scalar s, LLVMValueRef a) {
  kn_math m = kn_opinfo_table[opc].math;
  LLVMValueRef d = to_f64(L, s, a), r = NULL;
  switch ((kn_math_via)m.host) {
  case KN_VIA_LIBM: r = libm1(L, m.name, d); break;
  case KN_VIA_LLVM: r = llvm1(L, m.name, d); break;
  case KN_VIA_KILN:
    for (size_t i = 0; i < sizeof expansions / sizeof expansions[0]; i++)
      if (!strcmp(expansions[i].name, m.name)) r = expansions[i].fn(L, d);
    break;
  case KN_VIA_NONE: break;
  }
  return r ? from_f64(L, s, r) : NULL;
}

static LLVMValueRef int_unary(lower *L, kn_opcode opc, kn_scalar s, LLVMValueRef a) {
  LLVMBuilderRef B = L->B;
  LLVMValueRef zero = LLVMConstInt(LLVMTypeOf(a), 0, 0);
  switch (opc) {
  case KN_OP_NEG: return LLVMBuildSub(B, zero, a, "");
  case KN_OP_ABS: {
    if (s == KN_I1) return a;
    LLVMValueRef neg = LLVMBuildSub(B, zero, a, "");
    return LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, a, zero, ""), neg, a, "");
  }
  case KN_OP_NOT: return LLVMBuildXor(B, a, LLVMConstAllOnes(LLVMTypeOf(a)), "");
  KN_CASES_MATH
  KN_CASES_NOT_UNARY
    return NULL;  /* float only, or not unary */
  }
  return NULL;
}

static LLVMValueRef unary(lower *L, kn_opcode opc, kn_scalar s, LLVMValueRef a) {
  if (!kn_scalar_is_float(s)) return int_unary(L, opc, s, a);
  switch (opc) {
  case KN_OP_NEG: return from_f32(L, s, LLVMBuildFNeg(L->B, to_f32(L, s, a), ""));
  case KN_OP_ABS: {
    LLVMValueRef x = to_f32(L, s, a);
    return from_f32(L, s, intrinsic(L, "llvm.fabs", &L->f32, 1, &x, 1));
  }
  KN_CASES_MATH return math_unary(L, opc, s, a);
  case KN_OP_NOT:
  KN_CASES_NOT_UNARY
    return NULL;  /* int only, or not unary */
  }
  return NULL;
}

static LLVMValueRef compare(lower *L, kn_pred p, kn_scalar s, LLVMValueRef a, LLVMValueRef b) {
  if (kn_scalar_is_float(s)) {
    static const LLVMRealPredicate fp[KN_PRED_COUNT] = {LLVMRealOEQ, LLVMRealUNE, LLVMRealOLT,
                                                        LLVMRealOLE, LLVMRealOGT, LLVMRealOGE};
    return LLVMBuildFCmp(L->B, fp[p], to_f32(L, s, a), to_f32(L, s, b), "");
  }
  static const LLVMIntPredicate ip[KN_PRED_COUNT] = {LLVMIntEQ, LLVMIntNE, LLVMIntSLT,
                                                     LLVMIntSLE, LLVMIntSGT, LLVMIntSGE};
  if (s == KN_I1) { /* true is 1, not -1 */
    a = LLVMBuildZExt(L->B, a, L->i8, "");
    b = LLVMBuildZExt(L->B, b, L->i8, "");
  }
  return LLVMBuildICmp(L->B, ip[p], a, b, "");
}

static LLVMValueRef cast(lower *L, kn_scalar from, kn_scalar to, LLVMValueRef x) {
  LLVMBuilderRef B = L->B;
  if (from == to) return x;
  bool fi = kn_scalar_is_int(from), ti = kn_scalar_is_int(to);
  if (fi && ti) {
    if (to == KN_I1) return LLVMBuildICmp(B, LLVMIntNE, x, LLVMConstInt(LLVMTypeOf(x), 0, 0), "");
    if (from == KN_I1) return LLVMBuildZExt(B, x, reg_type(L, to), "");
    if (kn_scalar_bits(from) < kn_scalar_bits(to)) return LLVMBuildSExt(B, x, reg_type(L, to), "");
    return LLVMBuildTrunc(B, x, reg_type(L, to), ""); /* wraps */
  }
  if (fi) {
    if (from == KN_I1) return from_f32(L, to, LLVMBuildUIToFP(B, x, L->f32, ""));
    /* one rounding from the integer (kn_int_to_float): sitofp to f32 is that; f16 through f32
     * is too (an int f32 has to round is far beyond f16's range, where both give inf); an i32
     * is exact in double; an i64 to bf16 or fp8 needs the C helper */
    if (to == KN_F32 || to == KN_F16) return from_f32(L, to, LLVMBuildSIToFP(B, x, L->f32, ""));
    if (from == KN_I32) return from_f64(L, to, LLVMBuildSIToFP(B, x, L->f64, ""));
    LLVMTypeRef pt[2] = {L->i32, L->i64};
    LLVMValueRef a[2] = {ci32(L, to), x};
    return from_f64(L, to, call_fn(L, "kn_rt_int_to_float", L->f64, pt, 2, a, true));
  }
  LLVMValueRef f = to_f32(L, from, x);
  if (ti) {
    /* kn_round on an int type: i1 is x != 0 (NaN -> 1); else truncate toward zero, NaN -> 0,
     * saturate */
    if (to == KN_I1) return LLVMBuildFCmp(B, LLVMRealUNE, f, LLVMConstReal(L->f32, 0.0), "");
    LLVMTypeRef tys[2] = {to == KN_I32 ? L->i32 : L->i64, L->f32};
    return intrinsic(L, "llvm.fptosi.sat", tys, 2, &f, 1);
  }
  return from_f32(L, to, f);
}

/* ---- elementwise ops: one loop over the result, or one scalar when nothing varies ---- */

/* one element of op's result from the elements x[] of its operands (NULL: not for these types) */
typedef LLVMValueRef (*elem_fn)(lower *L, const kn_op *op, LLVMValueRef *x);

static LLVMValueRef elem_binary(lower *L, const kn_op *op, LLVMValueRef *x) {
  return binary(L, op->opc, elem(op->opnd[0]), x[0], x[1]);
}
static LLVMValueRef elem_unary(lower *L, const kn_op *op, LLVMValueRef *x) {
  return unary(L, op->opc, elem(op->opnd[0]), x[0]);
}
static LLVMValueRef elem_cmp(lower *L, const kn_op *op, LLVMValueRef *x) {
  return compare(L, (kn_pred)op->iattr[0], elem(op->opnd[1]), x[0], x[1]);
}
static LLVMValueRef elem_select(lower *L, const kn_op *op, LLVMValueRef *x) {
  (void)op;
  return LLVMBuildSelect(L->B, x[0], x[1], x[2], "");
}
static LLVMValueRef elem_cast(lower *L, const kn_op *op, LLVMValueRef *x) {
  return cast(L, elem(op->opnd[0]), elem(op->res[0]), x[0]);
}
static LLVMValueRef elem_splat(lower *L, const kn_op *op, LLVMValueRef *x) {
  (void)L, (void)op;
  return x[0];
}

static int lower_map(lower *L, const kn_op *op, elem_fn f) {
  const kn_value *r = op->res[0];
  LLVMValueRef x[3];
  KN_ASSERT(op->nopnd <= 3);
  bool uniform = true;
  for (int i = 0; i < op->nopnd; i++)
    if (is_tile(op->opnd[i]) && !L->uniform[op->opnd[i]->id]) uniform = false;
  if (!is_tile(r) || uniform) {
    for (int i = 0; i < op->nopnd; i++) x[i] = get(L, op->opnd[i], NULL);
    LLVMValueRef v = f(L, op, x);
    if (!v) return fail(L, op, "'%s' is not supported for these types", kn_opinfo_table[op->opc].name);
    set_value(L, r, v, is_tile(r));
    return 0;
  }
  LLVMValueRef buf = tile_alloc(L, r->type);
  loop lp;
  LLVMValueRef i = loop_open(L, &lp, 0, kn_ty_numel(r->type));
  for (int k = 0; k < op->nopnd; k++) x[k] = get(L, op->opnd[k], i);
  LLVMValueRef v = f(L, op, x);
  if (!v) return fail(L, op, "'%s' is not supported for these types", kn_opinfo_table[op->opc].name);
  store_elem(L, elem(r), buf, i, v);
  loop_close(L, &lp);
  set_value(L, r, buf, false);
  return 0;
}

/* ---- constants and shapes ---- */

static LLVMValueRef const_scalar(lower *L, kn_scalar s, const kn_op *op) {
  switch (s) {
  case KN_I1: return LLVMConstInt(L->i1, op->iattr[0] != 0, 0);
  case KN_I32:
  case KN_I64: return LLVMConstInt(reg_type(L, s), (unsigned long long)op->iattr[0], 1);
  case KN_F32: return LLVMConstReal(L->f32, (double)(float)op->fattr);
  case KN_F16: return LLVMConstReal(L->f16, kn_round(KN_F16, op->fattr));
  default: return LLVMConstInt(reg_type(L, s), kn_encode(s, op->fattr), 0);
  }
}

static void lower_arange(lower *L, const kn_op *op) {
  const kn_value *r = op->res[0];
  LLVMValueRef buf = tile_alloc(L, r->type);
  loop lp;
  LLVMValueRef i = loop_open(L, &lp, 0, kn_ty_numel(r->type));
  LLVMValueRef v = LLVMBuildTrunc(L->B, LLVMBuildAdd(L->B, i, ci64(L, op->iattr[0]), ""), L->i32, "");
  store_elem(L, KN_I32, buf, i, v);
  loop_close(L, &lp);
  set_value(L, r, buf, false);
}

/* result[i][j] = src[f(i, j)]: broadcast and transpose */
static void lower_remap(lower *L, const kn_op *op) {
  const kn_value *x = op->opnd[0], *r = op->res[0];
  if (L->uniform[x->id]) {
    set_value(L, r, L->vals[x->id], true);
    return;
  }
  int rr = r->type.rank, xr = x->type.rank;
  int64_t R0 = rr == 2 ? r->type.shape[0] : 1, R1 = r->type.shape[rr - 1];
  /* source shape right-aligned to the result's */
  int64_t S0 = xr == 2 ? x->type.shape[0] : 1, S1 = x->type.shape[xr - 1];
  LLVMValueRef buf = tile_alloc(L, r->type);
  loop li, lj;
  LLVMValueRef i = loop_open(L, &li, 0, R0);
  LLVMValueRef j = loop_open(L, &lj, 0, R1);
  LLVMValueRef src;
  if (op->opc == KN_OP_TRANSPOSE) { /* r is R0 x R1, x is R1 x R0 */
    src = LLVMBuildAdd(L->B, LLVMBuildMul(L->B, j, ci64(L, R0), ""), i, "");
  } else {
    LLVMValueRef si = S0 == 1 ? ci64(L, 0) : i, sj = S1 == 1 ? ci64(L, 0) : j;
    src = LLVMBuildAdd(L->B, LLVMBuildMul(L->B, si, ci64(L, S1), ""), sj, "");
  }
  LLVMValueRef dst = LLVMBuildAdd(L->B, LLVMBuildMul(L->B, i, ci64(L, R1), ""), j, "");
  store_elem(L, elem(r), buf, dst, get(L, x, src));
  loop_close(L, &lj);
  loop_close(L, &li);
  set_value(L, r, buf, false);
}

/* ---- memory ---- */

static LLVMValueRef as_i64(lower *L, const kn_value *v, LLVMValueRef x) {
  if (elem(v) == KN_I1) return LLVMBuildZExt(L->B, x, L->i64, "");
  return elem(v) == KN_I64 ? x : LLVMBuildSExt(L->B, x, L->i64, "");
}

static LLVMValueRef scalar_i64(lower *L, const kn_value *v) { return as_i64(L, v, get(L, v, NULL)); }

/* the address and liveness of element (i, j) of a load/store */
static LLVMValueRef mem_addr(lower *L, const kn_mem_operands *mo, kn_scalar s, LLVMValueRef *coord,
                             LLVMValueRef lin, LLVMValueRef *live) {
  LLVMValueRef off = ci64(L, 0);
  *live = NULL;
  for (int d = 0; d < mo->rank; d++) {
    LLVMValueRef c = LLVMBuildAdd(L->B, scalar_i64(L, mo->off[d]), coord[d], "");
    off = LLVMBuildAdd(L->B, off, LLVMBuildMul(L->B, c, scalar_i64(L, mo->stride[d]), ""), "");
    if (mo->bound[d]) {
      LLVMValueRef ok = LLVMBuildAnd(L->B, LLVMBuildICmp(L->B, LLVMIntSGE, c, ci64(L, 0), ""),
                                     LLVMBuildICmp(L->B, LLVMIntSLT, c, scalar_i64(L, mo->bound[d]), ""), "");
      *live = *live ? LLVMBuildAnd(L->B, *live, ok, "") : ok;
    }
  }
  if (mo->mask) {
    LLVMValueRef mk = get(L, mo->mask, lin);
    *live = *live ? LLVMBuildAnd(L->B, *live, mk, "") : mk;
  }
  LLVMValueRef base = get(L, mo->base, NULL);
  return LLVMBuildGEP2(L->B, mem_type(L, s), base, &off, 1, "");
}

/* runs body(i, j, lin) over the elements of a memory op's tile (rank 1 or 2, or a scalar) */
static void mem_loop(lower *L, const kn_value *tile, int rank,
                     void (*body)(lower *, const kn_op *, const kn_mem_operands *, LLVMValueRef *, LLVMValueRef, void *),
                     const kn_op *op, const kn_mem_operands *mo, void *ctx) {
  LLVMValueRef coord[2];
  if (!is_tile(tile)) {
    coord[0] = coord[1] = ci64(L, 0);
    body(L, op, mo, coord, ci64(L, 0), ctx);
    return;
  }
  int64_t n0 = tile->type.shape[0], n1 = rank == 2 ? tile->type.shape[1] : 1;
  loop li, lj;
  coord[0] = loop_open(L, &li, 0, n0);
  LLVMValueRef lin = coord[0];
  if (rank == 2) {
    coord[1] = loop_open(L, &lj, 0, n1);
    lin = LLVMBuildAdd(L->B, LLVMBuildMul(L->B, coord[0], ci64(L, n1), ""), coord[1], "");
  }
  body(L, op, mo, coord, lin, ctx);
  if (rank == 2) loop_close(L, &lj);
  loop_close(L, &li);
}

/* the branches around an access that must not happen: a dead element, and in checked mode one
 * the checker refuses; skip[] are the blocks that branch straight to join */
typedef struct guard {
  LLVMBasicBlockRef join, skip[2];
  int nskip;
} guard;

static void guard_branch(lower *L, guard *g, LLVMValueRef cond, const char *name) {
  LLVMBasicBlockRef go = LLVMAppendBasicBlockInContext(L->C, L->fn, name);
  if (!g->join) g->join = LLVMAppendBasicBlockInContext(L->C, L->fn, "mem.join");
  g->skip[g->nskip++] = LLVMGetInsertBlock(L->B);
  LLVMBuildCondBr(L->B, cond, go, g->join);
  LLVMPositionBuilderAtEnd(L->B, go);
}

/* opens the block of the access of element `coord` (of a rank-`rank` tile) at p when something
 * guards it (else returns false and the caller emits the access in place) */
static bool guard_open(lower *L, guard *g, int rank, kn_scalar s, LLVMValueRef p,
                       LLVMValueRef live, const LLVMValueRef *coord) {
  *g = (guard){0};
  if (!live && !L->checked) return false;
  if (live) guard_branch(L, g, live, "mem.live");
  if (L->checked) {
    LLVMTypeRef pt[9] = {L->ptr, L->ptr, L->i64, L->i64, L->i64, L->i64, L->i32, L->i32, L->i32};
    LLVMValueRef a[9] = {L->check, L->site, LLVMBuildPtrToInt(L->B, p, L->i64, ""),
                         ci64(L, (int64_t)kn_scalar_size(s)), coord[0],
                         rank == 2 ? coord[1] : ci64(L, -1), L->pid[0], L->pid[1], L->pid[2]};
    LLVMValueRef ok = call_fn(L, "kn_rt_check_access", L->i32, pt, 9, a, false);
    guard_branch(L, g, LLVMBuildICmp(L->B, LLVMIntNE, ok, ci32(L, 0), ""), "mem.ok");
  }
  return true;
}

/* ends the access's block at join; returns the block that ended */
static LLVMBasicBlockRef guard_close(lower *L, guard *g) {
  LLVMBasicBlockRef end = LLVMGetInsertBlock(L->B);
  LLVMBuildBr(L->B, g->join);
  LLVMPositionBuilderAtEnd(L->B, g->join);
  return end;
}

/* the element of type s at p where live (NULL: always) and, in checked mode, the checker allow
 * it; else `other` (NULL: 0) */
static LLVMValueRef guarded_load(lower *L, kn_scalar s, LLVMValueRef p, LLVMValueRef live,
                                 const LLVMValueRef *coord, int rank, const kn_value *other) {
  guard g;
  if (!guard_open(L, &g, rank, s, p, live, coord)) return load_mem(L, s, p, 1);
  LLVMValueRef x = load_mem(L, s, p, 1);
  LLVMBasicBlockRef end = guard_close(L, &g);
  LLVMValueRef dead = other ? get(L, other, NULL) : LLVMConstNull(reg_type(L, s));
  LLVMValueRef v = LLVMBuildPhi(L->B, reg_type(L, s), "");
  LLVMValueRef vals[3] = {x, dead, dead};
  LLVMBasicBlockRef bbs[3] = {end, g.skip[0], g.skip[1]};
  LLVMAddIncoming(v, vals, bbs, 1 + (unsigned)g.nskip);
  return v;
}

static void load_body(lower *L, const kn_op *op, const kn_mem_operands *mo, LLVMValueRef *coord,
                      LLVMValueRef lin, void *ctx) {
  const kn_value *r = op->res[0];
  kn_scalar s = elem(r);
  LLVMValueRef live, p = mem_addr(L, mo, s, coord, lin, &live);
  LLVMValueRef v = guarded_load(L, s, p, live, coord, mo->rank, mo->other);
  if (is_tile(r)) store_elem(L, s, (LLVMValueRef)ctx, lin, v);
  else *(LLVMValueRef *)ctx = v;
}

/* element lin of a gather: base[offsets[lin]] where the mask holds */
static void gather_body(lower *L, const kn_op *op, const kn_mem_operands *mo, LLVMValueRef *coord,
                        LLVMValueRef lin, void *ctx) {
  (void)mo;
  const kn_value *r = op->res[0];
  kn_scalar s = elem(r);
  kn_gather_operands go;
  kn_gather_operands_get(op, &go);
  LLVMValueRef off = as_i64(L, go.offsets, get(L, go.offsets, lin));
  LLVMValueRef p = LLVMBuildGEP2(L->B, mem_type(L, s), get(L, go.base, NULL), &off, 1, "");
  LLVMValueRef live = go.mask ? get(L, go.mask, lin) : NULL;
  store_elem(L, s, (LLVMValueRef)ctx, lin,
             guarded_load(L, s, p, live, coord, r->type.rank, go.other));
}

static void store_body(lower *L, const kn_op *op, const kn_mem_operands *mo, LLVMValueRef *coord,
                       LLVMValueRef lin, void *ctx) {
  (void)ctx;
  kn_scalar s = elem(mo->value);
  LLVMValueRef live, p = mem_addr(L, mo, s, coord, lin, &live);
  LLVMValueRef v = get(L, mo->value, lin);
  guard g;
  bool guarded = guard_open(L, &g, mo->rank, s, p, live, coord);
  /* atomic_add (f32, the verifier's rule): programs run on the host pool's threads at once */
  if (op->iattr[1] & KN_MEM_ATOMIC_ADD)
    LLVMBuildAtomicRMW(L->B, LLVMAtomicRMWBinOpFAdd, p, v, LLVMAtomicOrderingMonotonic, 0);
  else
    store_mem(L, s, p, v, 1);
  if (guarded) guard_close(L, &g);
}

/* a private constant C string of the module (NULL: a null pointer) */
static LLVMValueRef const_cstr(lower *L, const char *text) {
  if (!text) return LLVMConstNull(L->ptr);
  size_t n = strlen(text);
  LLVMValueRef g = LLVMAddGlobal(L->M, LLVMArrayType2(L->i8, n + 1), "kiln.check.str");
  LLVMSetInitializer(g, LLVMConstStringInContext2(L->C, text, n, 0));
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return g;
}

/* checked mode: the kn_check_site {op, file, line, col} of a load, store or gather, for its
 * accesses */
static void set_site(lower *L, const kn_op *op) {
  if (!L->checked) return;
  const char *file = op->loc.file ? op->loc.file : L->m->filename;
  LLVMValueRef f[4] = {const_cstr(L, kn_opinfo_table[op->opc].name), const_cstr(L, file),
                       ci32(L, op->loc.line), ci32(L, op->loc.col)};
  LLVMValueRef init = LLVMConstStructInContext(L->C, f, 4, 0);
  L->site = LLVMAddGlobal(L->M, LLVMTypeOf(init), "kiln.check.site");
  LLVMSetInitializer(L->site, init);
  LLVMSetGlobalConstant(L->site, 1);
  LLVMSetLinkage(L->site, LLVMPrivateLinkage);
}

static void lower_load(lower *L, const kn_op *op) {
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  set_site(L, op);
  const kn_value *r = op->res[0];
  if (is_tile(r)) {
    LLVMValueRef buf = tile_alloc(L, r->type);
    mem_loop(L, r, mo.rank, load_body, op, &mo, buf);
    set_value(L, r, buf, false);
  } else {
    LLVMValueRef v = NULL;
    mem_loop(L, r, mo.rank, load_body, op, &mo, &v);
    set_value(L, r, v, false);
  }
}

static void lower_gather(lower *L, const kn_op *op) {
  const kn_value *r = op->res[0];
  set_site(L, op);
  LLVMValueRef buf = tile_alloc(L, r->type);
  mem_loop(L, r, r->type.rank, gather_body, op, NULL, buf);
  set_value(L, r, buf, false);
}

static void lower_store(lower *L, const kn_op *op) {
  kn_mem_operands mo;
  kn_mem_operands_get(op, &mo);
  set_site(L, op);
  mem_loop(L, mo.value, mo.rank, store_body, op, &mo, NULL);
}

/* ---- dot and reductions ---- */

static int lower_dot(lower *L, const kn_op *op) {
  const kn_value *a = op->opnd[0], *b = op->opnd[1], *acc = op->opnd[2], *r = op->res[0];
  if (!is_tile(a) || a->type.rank != 2 || b->type.rank != 2 || elem(r) != KN_F32)
    return fail(L, op, "%s: dot needs rank-2 operands and an f32 accumulator", "unsupported");
  int64_t M = a->type.shape[0], K = a->type.shape[1], N = b->type.shape[1];
  kn_scalar sa = elem(a), sb = elem(b);
  LLVMValueRef buf = tile_alloc(L, r->type);
  /* r = acc */
  if (L->uniform[acc->id]) {
    loop lp;
    LLVMValueRef i = loop_open(L, &lp, 0, M * N);
    store_elem(L, KN_F32, buf, i, L->vals[acc->id]);
    loop_close(L, &lp);
  } else {
    LLVMBuildMemCpy(L->B, buf, 64, L->vals[acc->id], 64, ci64(L, M * N * 4));
  }
  loop li, lk, lj;
  LLVMValueRef i = loop_open(L, &li, 0, M);
  LLVMValueRef k = loop_open(L, &lk, 0, K);
  LLVMValueRef av = get(L, a, LLVMBuildAdd(L->B, LLVMBuildMul(L->B, i, ci64(L, K), ""), k, ""));
  bool ints = !kn_scalar_is_float(sa) || !kn_scalar_is_float(sb);
  LLVMValueRef ax = ints ? NULL : to_f32(L, sa, av);
  LLVMValueRef j = loop_open(L, &lj, 0, N);
  LLVMValueRef bv = get(L, b, LLVMBuildAdd(L->B, LLVMBuildMul(L->B, k, ci64(L, N), ""), j, ""));
  LLVMValueRef prod;
  if (ints) { /* exact product in double, rounded once to f32 */
    LLVMValueRef x = kn_scalar_is_float(sa) ? to_f64(L, sa, av) : LLVMBuildSIToFP(L->B, as_i64(L, a, av), L->f64, "");
    LLVMValueRef y = kn_scalar_is_float(sb) ? to_f64(L, sb, bv) : LLVMBuildSIToFP(L->B, as_i64(L, b, bv), L->f64, "");
    prod = LLVMBuildFPTrunc(L->B, LLVMBuildFMul(L->B, x, y, ""), L->f32, "");
  } else {
    prod = LLVMBuildFMul(L->B, ax, to_f32(L, sb, bv), "");
  }
  LLVMValueRef ri = LLVMBuildAdd(L->B, LLVMBuildMul(L->B, i, ci64(L, N), ""), j, "");
  LLVMValueRef p = elem_ptr(L, KN_F32, buf, ri);
  LLVMValueRef old = LLVMBuildLoad2(L->B, L->f32, p, "");
  LLVMBuildStore(L->B, LLVMBuildFAdd(L->B, old, prod, ""), p);
  loop_close(L, &lj);
  loop_close(L, &lk);
  loop_close(L, &li);
  set_value(L, r, buf, false);
  return 0;
}

static LLVMValueRef reduce_step(lower *L, kn_opcode opc, kn_scalar s, LLVMValueRef acc, LLVMValueRef x) {
  return binary(L, opc == KN_OP_REDUCE_MAX ? KN_OP_MAX : KN_OP_ADD, s, acc, x);
}

static int lower_reduce(lower *L, const kn_op *op) {
  const kn_value *x = op->opnd[0], *r = op->res[0];
  kn_scalar s = elem(x);
  int axis = (int)op->iattr[0];
  if (!is_tile(x) || axis < 0 || axis >= x->type.rank)
    return fail(L, op, "%s: bad reduction axis", "reduce");
  if (x->type.rank == 1) {
    int64_t n = x->type.shape[0];
    if (L->uniform[x->id] && op->opc == KN_OP_REDUCE_MAX) {
      set_value(L, r, L->vals[x->id], false);
      return 0;
    }
    LLVMValueRef slot = scalar_slot(L, s);
    LLVMBuildStore(L->B, get(L, x, ci64(L, 0)), slot);
    if (n > 1) {
      loop lp;
      LLVMValueRef i = loop_open(L, &lp, 1, n);
      LLVMValueRef acc = LLVMBuildLoad2(L->B, reg_type(L, s), slot, "");
      LLVMBuildStore(L->B, reduce_step(L, op->opc, s, acc, get(L, x, i)), slot);
      loop_close(L, &lp);
    }
    set_value(L, r, LLVMBuildLoad2(L->B, reg_type(L, s), slot, ""), false);
    return 0;
  }
  int64_t M = x->type.shape[0], N = x->type.shape[1];
  int64_t n_out = axis == 0 ? N : M;
  LLVMValueRef buf = tile_alloc(L, r->type);
  loop l0, l1;
  /* out = the first slice along axis */
  LLVMValueRef o = loop_open(L, &l0, 0, n_out);
  store_elem(L, s, buf, o, get(L, x, axis == 0 ? o : LLVMBuildMul(L->B, o, ci64(L, N), "")));
  loop_close(L, &l0);
  if ((axis == 0 ? M : N) > 1) {
    LLVMValueRef i = loop_open(L, &l0, axis == 0 ? 1 : 0, M);
    LLVMValueRef j = loop_open(L, &l1, axis == 0 ? 0 : 1, N);
    LLVMValueRef oi = axis == 0 ? j : i;
    LLVMValueRef p = elem_ptr(L, s, buf, oi);
    LLVMValueRef acc = load_mem(L, s, p, (unsigned)kn_scalar_size(s));
    LLVMValueRef v = get(L, x, LLVMBuildAdd(L->B, LLVMBuildMul(L->B, i, ci64(L, N), ""), j, ""));
    store_mem(L, s, p, reduce_step(L, op->opc, s, acc, v), (unsigned)kn_scalar_size(s));
    loop_close(L, &l1);
    loop_close(L, &l0);
  }
  set_value(L, r, buf, false);
  return 0;
}

/* ---- control flow ---- */

static int lower_block(lower *L, const kn_block *blk, const yield_dst *yd);

/* copies tile value v into the buffer dst */
static void copy_tile(lower *L, LLVMValueRef dst, const kn_value *v, LLVMValueRef src_buf) {
  kn_scalar s = elem(v);
  int64_t n = kn_ty_numel(v->type);
  if (!src_buf && L->uniform[v->id]) {
    loop lp;
    LLVMValueRef i = loop_open(L, &lp, 0, n);
    store_elem(L, s, dst, i, L->vals[v->id]);
    loop_close(L, &lp);
    return;
  }
  LLVMValueRef src = src_buf ? src_buf : L->vals[v->id];
  if (src == dst) return;
  LLVMBuildMemCpy(L->B, dst, 64, src, 64, ci64(L, n * (int64_t)kn_scalar_size(s)));
}

static void make_slots(lower *L, const kn_op *op, LLVMValueRef *slot) {
  for (int i = 0; i < op->nres; i++) {
    const kn_value *r = op->res[i];
    slot[i] = is_tile(r) ? tile_alloc(L, r->type) : scalar_slot(L, elem(r));
  }
}

/* stores values vs into the slots, as one parallel copy */
static void write_slots(lower *L, const yield_dst *yd, kn_value *const *vs) {
  LLVMValueRef tmp[64];
  KN_ASSERT(yd->n <= 64);
  for (int i = 0; i < yd->n; i++) {
    tmp[i] = NULL;
    const kn_value *v = vs[i];
    if (!is_tile(v) || L->uniform[v->id]) continue;
    for (int k = 0; k < yd->n; k++)
      if (k != i && L->vals[v->id] == yd->slot[k]) {
        tmp[i] = tile_alloc(L, v->type);
        copy_tile(L, tmp[i], v, NULL);
        break;
      }
  }
  for (int i = 0; i < yd->n; i++) {
    const kn_value *v = vs[i];
    if (is_tile(v)) copy_tile(L, yd->slot[i], v, tmp[i]);
    else LLVMBuildStore(L->B, L->vals[v->id], yd->slot[i]);
  }
}

static void read_slots(lower *L, const kn_value *const *dst, int n, const LLVMValueRef *slot) {
  for (int i = 0; i < n; i++) {
    if (is_tile(dst[i])) set_value(L, dst[i], slot[i], false);
    else set_value(L, dst[i], LLVMBuildLoad2(L->B, reg_type(L, elem(dst[i])), slot[i], ""), false);
  }
}

static int lower_for(lower *L, const kn_op *op) {
  int n = op->nres;
  if (n > 64 || op->nopnd != 3 + n || op->nregion != 1)
    return fail(L, op, "%s: malformed for", "for");
  LLVMValueRef slot[64];
  make_slots(L, op, slot);
  yield_dst yd = {n, slot};
  write_slots(L, &yd, op->opnd + 3);

  const kn_value *lo = op->opnd[0];
  LLVMValueRef ivslot = scalar_slot(L, KN_I64);
  LLVMBuildStore(L->B, scalar_i64(L, lo), ivslot);
  LLVMValueRef hi = scalar_i64(L, op->opnd[1]), step = scalar_i64(L, op->opnd[2]);
  /* a step <= 0 is an error: record it and run no iteration rather than forever */
  LLVMValueRef badstep = LLVMBuildICmp(L->B, LLVMIntSLE, step, ci64(L, 0), "");
  note_error(L, badstep, KN_KSTATUS_STEP);
  hi = LLVMBuildSelect(L->B, badstep, LLVMConstInt(L->i64, (unsigned long long)INT64_MIN, 1), hi, "");
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(L->C, L->fn, "for.head");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(L->C, L->fn, "for.body");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(L->C, L->fn, "for.exit");
  LLVMBuildBr(L->B, head);
  LLVMPositionBuilderAtEnd(L->B, head);
  LLVMValueRef iv = LLVMBuildLoad2(L->B, L->i64, ivslot, "iv");
  LLVMValueRef go = LLVMBuildICmp(L->B, LLVMIntSLT, iv, hi, "");
  LLVMBuildCondBr(L->B, go, body, exit);
  LLVMPositionBuilderAtEnd(L->B, body);
  const kn_block *blk = op->region[0];
  const kn_value *ivv = blk->args[0];
  set_value(L, ivv, elem(ivv) == KN_I64 ? iv : LLVMBuildTrunc(L->B, iv, reg_type(L, elem(ivv)), ""), false);
  read_slots(L, (const kn_value *const *)blk->args + 1, n, slot);
  if (lower_block(L, blk, &yd)) return -1;
  /* next iteration; an iv that would overflow ends the loop (as in the interpreter) */
  LLVMValueRef cur = LLVMBuildLoad2(L->B, L->i64, ivslot, "");
  LLVMValueRef cs[2] = {cur, step};
  LLVMValueRef sum = intrinsic(L, "llvm.sadd.with.overflow", &L->i64, 1, cs, 2);
  LLVMBuildStore(L->B, LLVMBuildExtractValue(L->B, sum, 0, ""), ivslot);
  LLVMBuildCondBr(L->B, LLVMBuildExtractValue(L->B, sum, 1, ""), exit, head);
  LLVMPositionBuilderAtEnd(L->B, exit);
  read_slots(L, (const kn_value *const *)op->res, n, slot);
  return 0;
}

static int lower_if(lower *L, const kn_op *op) {
  int n = op->nres;
  if (n > 64 || op->nregion != 2) return fail(L, op, "%s: malformed if", "if");
  LLVMValueRef slot[64];
  make_slots(L, op, slot);
  yield_dst yd = {n, slot};
  LLVMBasicBlockRef bt = LLVMAppendBasicBlockInContext(L->C, L->fn, "then");
  LLVMBasicBlockRef be = LLVMAppendBasicBlockInContext(L->C, L->fn, "else");
  LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(L->C, L->fn, "endif");
  LLVMBuildCondBr(L->B, get(L, op->opnd[0], NULL), bt, be);
  LLVMPositionBuilderAtEnd(L->B, bt);
  if (lower_block(L, op->region[0], &yd)) return -1;
  LLVMBuildBr(L->B, join);
  LLVMPositionBuilderAtEnd(L->B, be);
  if (lower_block(L, op->region[1], &yd)) return -1;
  LLVMBuildBr(L->B, join);
  LLVMPositionBuilderAtEnd(L->B, join);
  read_slots(L, (const kn_value *const *)op->res, n, slot);
  return 0;
}

static void lower_return(lower *L) {
  /* publish this program's run-time errors in the kernel's status word */
  LLVMValueRef z = LLVMBuildLoad2(L->B, L->i32, L->err, "");
  LLVMBasicBlockRef set = LLVMAppendBasicBlockInContext(L->C, L->fn, "status");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(L->C, L->fn, "ret");
  LLVMBuildCondBr(L->B, LLVMBuildICmp(L->B, LLVMIntNE, z, ci32(L, 0), ""), set, done);
  LLVMPositionBuilderAtEnd(L->B, set);
  LLVMBuildAtomicRMW(L->B, LLVMAtomicRMWBinOpOr, L->status, z, LLVMAtomicOrderingMonotonic, 0);
  LLVMBuildBr(L->B, done);
  LLVMPositionBuilderAtEnd(L->B, done);
  LLVMBuildRetVoid(L->B);
}

static int lower_op(lower *L, const kn_op *op, const yield_dst *yd) {
  kn_opcode o = op->opc;
  switch (o) {
  KN_CASES_BINARY return lower_map(L, op, elem_binary);
  KN_CASES_UNARY return lower_map(L, op, elem_unary);
  case KN_OP_PROGRAM_ID:
  case KN_OP_NUM_PROGRAMS: {
    int axis = (int)op->iattr[0];
    if (axis < 0 || axis > 2) return fail(L, op, "%s: axis must be 0, 1 or 2", kn_opinfo_table[o].name);
    set_value(L, op->res[0], o == KN_OP_PROGRAM_ID ? L->pid[axis] : L->nprog[axis], false);
    return 0;
  }
  case KN_OP_CONST: {
    const kn_value *r = op->res[0];
    if (r->type.kind != KN_TY_SCALAR && r->type.kind != KN_TY_TILE)
      return fail(L, op, "%s: constant of a non-number type", "const");
    set_value(L, r, const_scalar(L, elem(r), op), is_tile(r));
    return 0;
  }
  case KN_OP_ARANGE: lower_arange(L, op); return 0;
  case KN_OP_SPLAT: return lower_map(L, op, elem_splat);
  case KN_OP_CMP: return lower_map(L, op, elem_cmp);
  case KN_OP_SELECT: return lower_map(L, op, elem_select);
  case KN_OP_CAST: return lower_map(L, op, elem_cast);
  case KN_OP_BROADCAST:
  case KN_OP_TRANSPOSE: lower_remap(L, op); return 0;
  case KN_OP_EXPAND_DIMS:
  case KN_OP_RESHAPE:
  case KN_OP_MULTIPLE_OF:
  case KN_OP_MAX_CONTIGUOUS: /* same elements in the same order: share the operand's storage */
    set_value(L, op->res[0], L->vals[op->opnd[0]->id], L->uniform[op->opnd[0]->id]);
    return 0;
  case KN_OP_PTRADD: {
    LLVMValueRef p = get(L, op->opnd[0], NULL), off = scalar_i64(L, op->opnd[1]);
    set_value(L, op->res[0], LLVMBuildGEP2(L->B, mem_type(L, elem(op->opnd[0])), p, &off, 1, ""), false);
    return 0;
  }
  case KN_OP_LOAD: lower_load(L, op); return 0;
  case KN_OP_STORE: lower_store(L, op); return 0;
  case KN_OP_GATHER: lower_gather(L, op); return 0;
  case KN_OP_DOT: return lower_dot(L, op);
  case KN_OP_REDUCE_MAX:
  case KN_OP_REDUCE_SUM: return lower_reduce(L, op);
  case KN_OP_FOR: return lower_for(L, op);
  case KN_OP_IF: return lower_if(L, op);
  case KN_OP_YIELD:
    if (!yd || yd->n != op->nopnd) return fail(L, op, "%s: yield outside for/if or with the wrong count", "yield");
    write_slots(L, yd, op->opnd);
    return 0;
  case KN_OP_RETURN:
    if (yd || op->nopnd) return fail(L, op, "%s: only a kernel body may return, with no value", "return");
    lower_return(L);
    return 0;
  case KN_OP_CALL:
    return fail(L, op, "call of '@%s' reached the lowering (the inliner should have removed it)",
                op->callee_name ? op->callee_name : "?");
  }
  return fail(L, op, "op '%s' is not supported by the host target", "?");
}

static int lower_block(lower *L, const kn_block *blk, const yield_dst *yd) {
  for (const kn_op *op = blk->first; op; op = op->next) {
    for (int i = 0; i < op->nopnd; i++)
      if (op->opnd[i]->id < 0 || !L->vals[op->opnd[i]->id])
        return fail(L, op, "%s: an operand is not defined before its use", kn_opinfo_table[op->opc].name);
    if (op->opc == KN_OP_RETURN && op->next) return fail(L, op, "%s: ops after return", "return");
    if (lower_op(L, op, yd)) return -1;
  }
  return 0;
}

/* kernel parameter i from args[i] (an 8-byte kn_argval) */
static LLVMValueRef load_param(lower *L, int i, kn_type t) {
  LLVMValueRef idx = ci64(L, 8 * (int64_t)i);
  LLVMValueRef p = LLVMBuildGEP2(L->B, L->i8, L->args, &idx, 1, "");
  if (t.kind == KN_TY_PTR) return LLVMBuildLoad2(L->B, L->ptr, p, "");
  kn_scalar s = (kn_scalar)t.elem;
  if (kn_scalar_is_int(s)) {
    LLVMValueRef v = LLVMBuildLoad2(L->B, L->i64, p, "");
    if (s == KN_I1) return LLVMBuildICmp(L->B, LLVMIntNE, v, ci64(L, 0), "");
    return s == KN_I64 ? v : LLVMBuildTrunc(L->B, v, L->i32, "");
  }
  return from_f64(L, s, LLVMBuildLoad2(L->B, L->f64, p, ""));
}

static int lower_kernel(kn_func *k, LLVMContextRef ctx, bool checked, LLVMModuleRef *out,
                        kn_diag *d) {
  lower L = {.C = ctx, .k = k, .m = k->module, .d = d, .checked = checked};
  if (!k->is_kernel) return kn_error(d, k->module, k->loc, "'@%s' is not a kernel", k->name);
  int nv = kn_func_number(k);
  L.vals = calloc((size_t)nv + 1, sizeof *L.vals);
  L.uniform = calloc((size_t)nv + 1, sizeof *L.uniform);
  if (!L.vals || !L.uniform) {
    free(L.vals);
    free(L.uniform);
    return kn_error(d, k->module, k->loc, "out of memory");
  }
  L.i1 = LLVMInt1TypeInContext(ctx);
  L.i8 = LLVMInt8TypeInContext(ctx);
  L.i16 = LLVMInt16TypeInContext(ctx);
  L.i32 = LLVMInt32TypeInContext(ctx);
  L.i64 = LLVMInt64TypeInContext(ctx);
  L.f16 = LLVMHalfTypeInContext(ctx);
  L.f32 = LLVMFloatTypeInContext(ctx);
  L.f64 = LLVMDoubleTypeInContext(ctx);
  L.ptr = LLVMPointerTypeInContext(ctx, 0);
  L.vd = LLVMVoidTypeInContext(ctx);

  char name[256];
  snprintf(name, sizeof name, "kiln_%s", k->name);
  L.M = LLVMModuleCreateWithNameInContext(name, ctx);
  LLVMTypeRef pt[7] = {L.ptr, L.i32, L.i32, L.i32, L.i32, L.i32, L.i32};
  L.fn = LLVMAddFunction(L.M, name, LLVMFunctionType(L.vd, pt, 7, 0));
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(L.fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, nounwind, 0));
  char sname[300];
  snprintf(sname, sizeof sname, "%s.status", name);
  L.status = LLVMAddGlobal(L.M, L.i32, sname);
  LLVMSetInitializer(L.status, ci32(&L, 0));
  LLVMSetAlignment(L.status, 4);

  L.args = LLVMGetParam(L.fn, 0);
  for (int i = 0; i < 3; i++) {
    L.pid[i] = LLVMGetParam(L.fn, 1 + (unsigned)i);
    L.nprog[i] = LLVMGetParam(L.fn, 4 + (unsigned)i);
  }
  L.B = LLVMCreateBuilderInContext(ctx);
  L.A = LLVMCreateBuilderInContext(ctx);
  LLVMBasicBlockRef ab = LLVMAppendBasicBlockInContext(ctx, L.fn, "allocas");
  LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(ctx, L.fn, "start");
  LLVMPositionBuilderAtEnd(L.A, ab);
  L.alloca_br = LLVMBuildBr(L.A, start);
  LLVMPositionBuilderBefore(L.A, L.alloca_br);
  LLVMPositionBuilderAtEnd(L.B, start);

  L.err = scalar_slot(&L, KN_I32);
  LLVMBuildStore(L.B, ci32(&L, 0), L.err);
  for (int i = 0; i < kn_func_nparams(k); i++) {
    kn_value *p = kn_func_param(k, i);
    if (p->type.kind == KN_TY_TILE) {
      fail(&L, NULL, "%s: a kernel parameter cannot be a tile", "kernel");
      break;
    }
    set_value(&L, p, load_param(&L, i, p->type), false);
  }
  if (checked) L.check = load_param(&L, kn_func_nparams(k), kn_ty_ptr(KN_I32)); /* a pointer */
  if (!L.failed) lower_block(&L, k->body, NULL);
  if (!L.failed && !LLVMGetBasicBlockTerminator(LLVMGetInsertBlock(L.B))) lower_return(&L);
  if (!L.failed && L.tile_bytes > KN_HOST_TILE_BYTES_MAX) {
    char msg[128];
    snprintf(msg, sizeof msg, "%zu bytes", L.tile_bytes);
    fail(&L, NULL, "kernel needs %s of tile storage per program, more than the host allows", msg);
  }
  LLVMDisposeBuilder(L.B);
  LLVMDisposeBuilder(L.A);
  free(L.vals);
  free(L.uniform);
  if (L.failed) {
    LLVMDisposeModule(L.M);
    return -1;
  }
  *out = L.M;
  return 0;
}

int kn_lower_host(const kn_target *t, kn_func *k, const kn_layout_plan *plan, LLVMContextRef ctx,
                  LLVMModuleRef *out, kn_diag *d) {
  (void)t;
  (void)plan;
  return lower_kernel(k, ctx, false, out, d);
}

int kn_lower_host_checked(const kn_target *t, kn_func *k, const kn_layout_plan *plan,
                          LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d) {
  (void)t;
  (void)plan;
  return lower_kernel(k, ctx, true, out, d);
}
