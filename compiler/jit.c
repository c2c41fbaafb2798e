/* jit.c — LLVM plumbing shared by the targets, and the host JIT (ORC LLJIT).
 *
 * Everything here is LLVM-C.  Errors never print: LLVMErrorRefs and LLVMVerifyModule messages are
 * turned into kn_diag messages, and each compile's LLVMContext gets a diagnostic handler that
 * collects warnings and errors into a buffer (kn_llvm_context_diag) instead of letting LLVM
 * write to stderr or exit.
 *
 * Host JIT: one LLJIT per compiled kernel, so a kernel owns its code and frees it with the JIT
 * (kn_jit_unload), and compiles on different threads share nothing.  The JIT's target machine is
 * the host CPU with its features (the code runs where it was compiled).  The JIT'ed code calls a
 * few C functions: kiln's numeric helpers (kn_rt_round, kn_rt_encode), checked mode's
 * kn_rt_check_access (host_run.c), the libm functions the op table names for the host (ops.def:
 * KN_MATH(exp, LIBM, ...)) and the libm/libc functions
 * LLVM emits calls to; these are defined as absolute symbols (addresses taken here), so linking
 * does not depend on the process exporting them (a static binary does not); a process symbol
 * generator is added as well for anything else LLVM's codegen may call (e.g. __truncdfhf2).
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "host_run.h"
#include "numeric.h"
#include "target.h"

/* ---- helpers called by JIT'ed code ---- */

double kn_rt_round(int32_t scalar, double x) { return kn_round((kn_scalar)scalar, x); }
uint32_t kn_rt_encode(int32_t scalar, double x) { return (uint32_t)kn_encode((kn_scalar)scalar, x); }
double kn_rt_int_to_float(int32_t scalar, int64_t v) { return kn_int_to_float((kn_scalar)scalar, v); }

/* f32 -> bf16 (round to nearest even), the compiler-rt routine LLVM's x86 backend calls for a
 * bfloat result it computes in f32 (the emulated targets' code: InstCombine narrows e.g.
 * maximum(fpext a, fpext b) back to a bfloat maximum); the host's libgcc may not have it.  The
 * bf16 comes back in the low 16 bits of the first float return register, as a _Float16 would. */
static _Float16 kn_rt_truncsfbf2(float x) {
  uint16_t b = (uint16_t)kn_encode(KN_BF16, x);
  _Float16 h;
  memcpy(&h, &b, sizeof h);
  return h;
}

/* ---- initialisation ---- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_llvm(void) {
  LLVMInitializeNativeTarget();
  LLVMInitializeNativeAsmPrinter();
  LLVMInitializeNativeAsmParser();
}

void kn_llvm_init(void) { pthread_once(&init_once, init_llvm); }

/* ---- diagnostics ---- */

typedef struct diag_sink {
  size_t len;
  char text[2048];
} diag_sink;

static void on_diagnostic(LLVMDiagnosticInfoRef di, void *ctx) {
  diag_sink *s = ctx;
  LLVMDiagnosticSeverity sev = LLVMGetDiagInfoSeverity(di);
  if (sev == LLVMDSRemark || sev == LLVMDSNote) return;
  char *desc = LLVMGetDiagInfoDescription(di);
  if (s->len < sizeof s->text - 1) {
    int n = snprintf(s->text + s->len, sizeof s->text - s->len, "%s%s: %s", s->len ? "; " : "",
                     sev == LLVMDSError ? "error" : "warning", desc ? desc : "?");
    if (n > 0) s->len += (size_t)n;
    if (s->len >= sizeof s->text) s->len = sizeof s->text - 1;
  }
  LLVMDisposeMessage(desc);
}

LLVMContextRef kn_llvm_context_new(void) {
  kn_llvm_init();
  LLVMContextRef ctx = LLVMContextCreate();
  diag_sink *s = calloc(1, sizeof *s);
  if (s) LLVMContextSetDiagnosticHandler(ctx, on_diagnostic, s);
  return ctx;
}

const char *kn_llvm_context_diag(LLVMContextRef ctx) {
  diag_sink *s = ctx ? LLVMContextGetDiagnosticContext(ctx) : NULL;
  return s ? s->text : "";
}

void kn_llvm_context_forget(LLVMContextRef ctx) {
  diag_sink *s = LLVMContextGetDiagnosticContext(ctx);
  LLVMContextSetDiagnosticHandler(ctx, NULL, NULL);
  free(s);
}

static const kn_loc no_loc = {0};

int kn_llvm_error(kn_diag *d, LLVMErrorRef err, const char *what) {
  char *msg = LLVMGetErrorMessage(err); /* consumes err */
  kn_error(d, NULL, no_loc, "%s: %s", what, msg ? msg : "unknown LLVM error");
  LLVMDisposeErrorMessage(msg);
  return -1;
}

int kn_llvm_verify(LLVMModuleRef mod, kn_diag *d) {
  char *msg = NULL;
  if (!LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
    LLVMDisposeMessage(msg);
    return 0;
  }
  /* keep the first line or two: the full text repeats the broken instructions */
  kn_error(d, NULL, no_loc, "internal error: the lowering produced invalid LLVM IR: %.400s",
           msg ? msg : "?");
  LLVMDisposeMessage(msg);
  return -1;
}

/* ---- target machines, passes, assembly ---- */

LLVMTargetMachineRef kn_llvm_host_machine_with(LLVMRelocMode reloc, LLVMCodeModel model,
                                               kn_diag *d) {
  kn_llvm_init();
  char *triple = LLVMGetDefaultTargetTriple(), *err = NULL;
  LLVMTargetRef target;
  if (LLVMGetTargetFromTriple(triple, &target, &err)) {
    kn_error(d, NULL, no_loc, "host target '%s' unavailable: %s", triple, err ? err : "?");
    LLVMDisposeMessage(err);
    LLVMDisposeMessage(triple);
    return NULL;
  }
  /* The bfloat conversion instructions of AVX512-BF16 and AVX-NE-CONVERT (vcvtneps2bf16)
   * flush subnormal inputs to zero, and LLVM uses them wherever a bfloat value passes through
   * f32 (a bfloat phi or select is promoted that way): on a CPU that has them, the emulated
   * targets read 1e-40 back as 0.  kiln's bf16 keeps subnormals (the interpreter, the GPUs'
   * integer rounding), so those features are off: bf16 conversions are integer code. */
  char *cpu = LLVMGetHostCPUName(), *host = LLVMGetHostCPUFeatures();
  static const char no_bf16_cvt[] = ",-avx512bf16,-avxneconvert";
  size_t n = strlen(host) + sizeof no_bf16_cvt;
  char *features = malloc(n);
  KN_ASSERT(features);
  snprintf(features, n, "%s%s", host, no_bf16_cvt);
  LLVMDisposeMessage(host);
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, cpu, features,
                                                    LLVMCodeGenLevelAggressive, reloc, model);
  LLVMDisposeMessage(cpu);
  free(features);
  LLVMDisposeMessage(triple);
  if (!tm) kn_error(d, NULL, no_loc, "cannot create a target machine for the host");
  return tm;
}

LLVMTargetMachineRef kn_llvm_host_machine(kn_diag *d) {
  return kn_llvm_host_machine_with(LLVMRelocDefault, LLVMCodeModelJITDefault, d);
}

/* gives the module the triple and data layout of tm (the optimiser needs the layout) */
static void attach_machine(LLVMModuleRef mod, LLVMTargetMachineRef tm) {
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(mod, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(mod, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);
}

int kn_llvm_run_passes(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *passes, kn_diag *d) {
  attach_machine(mod, tm);
  LLVMPassBuilderOptionsRef o = LLVMCreatePassBuilderOptions();
  LLVMErrorRef err = LLVMRunPasses(mod, passes, tm, o);
  LLVMDisposePassBuilderOptions(o);
  if (err) return kn_llvm_error(d, err, "LLVM optimisation");
  return 0;
}

int kn_llvm_emit_asm(LLVMModuleRef mod, LLVMTargetMachineRef tm, FILE *out, kn_diag *d) {
  /* codegen changes the module it runs on: emit from a copy */
  LLVMModuleRef copy = LLVMCloneModule(mod);
  attach_machine(copy, tm);
  char *err = NULL;
  LLVMMemoryBufferRef buf = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, copy, LLVMAssemblyFile, &err, &buf)) {
    kn_error(d, NULL, no_loc, "assembly emission failed: %s", err ? err : "?");
    LLVMDisposeMessage(err);
    LLVMDisposeModule(copy);
    return -1;
  }
  fwrite(LLVMGetBufferStart(buf), 1, LLVMGetBufferSize(buf), out);
  LLVMDisposeMemoryBuffer(buf);
  LLVMDisposeModule(copy);
  return 0;
}

/* ---- the host JIT ---- */

typedef struct host_jit {
  LLVMOrcLLJITRef jit;
  diag_sink *sink; /* the module's context diagnostics; the context itself belongs to ORC */
} host_jit;

typedef struct abs_sym {
  const char *name;
  void *addr;
} abs_sym;

int kn_jit_define_helpers(LLVMOrcLLJITRef J, kn_diag *d) {
  /* cast through uintptr_t: the addresses of C functions, as the JIT wants them */
  const abs_sym syms[] = {
      {"kn_rt_round", (void *)(uintptr_t)kn_rt_round},
      {"kn_rt_encode", (void *)(uintptr_t)kn_rt_encode},
      {"kn_rt_int_to_float", (void *)(uintptr_t)kn_rt_int_to_float},
      {"kn_rt_check_access", (void *)(uintptr_t)kn_rt_check_access},
  /* the C functions the op table's math entries name for the host (KN_MATH(f, LIBM, ...)) */
#define KN_NOMATH
#define KN_MATH(f, host, gpu) KN_MATH_SYM_##host(f)
#define KN_MATH_SYM_LIBM(f) {#f, (void *)(uintptr_t)f},
#define KN_MATH_SYM_LLVM(f)
#define KN_MATH_SYM_KILN(f)
#define KN_OP(e, name, nopnd, nres, flags, syntax, math, exact) math
#include "ops.def"
#undef KN_OP
#undef KN_MATH_SYM_KILN
#undef KN_MATH_SYM_LLVM
#undef KN_MATH_SYM_LIBM
#undef KN_MATH
#undef KN_NOMATH
      /* what LLVM's own lowering may call */
      {"__truncsfbf2", (void *)(uintptr_t)kn_rt_truncsfbf2},
      {"fmod", (void *)(uintptr_t)fmod},
      {"fmodf", (void *)(uintptr_t)fmodf},
      {"sqrt", (void *)(uintptr_t)sqrt},
      {"memcpy", (void *)(uintptr_t)memcpy},
      {"memmove", (void *)(uintptr_t)memmove},
      {"memset", (void *)(uintptr_t)memset},
  };
  enum { N = sizeof syms / sizeof syms[0] };
  LLVMOrcCSymbolMapPair pairs[N];
  for (int i = 0; i < N; i++) {
    pairs[i].Name = LLVMOrcLLJITMangleAndIntern(J, syms[i].name);
    pairs[i].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)syms[i].addr;
    pairs[i].Sym.Flags.GenericFlags = LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
    pairs[i].Sym.Flags.TargetFlags = 0;
  }
  LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(pairs, N);
  LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(J);
  LLVMErrorRef err = LLVMOrcJITDylibDefine(jd, mu);
  if (err) {
    LLVMOrcDisposeMaterializationUnit(mu);
    return kn_llvm_error(d, err, "JIT symbol setup");
  }
  LLVMOrcDefinitionGeneratorRef gen = NULL;
  err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(J),
                                                             NULL, NULL);
  if (err) LLVMConsumeError(err); /* only a fallback */
  else LLVMOrcJITDylibAddGenerator(jd, gen);
  return 0;
}

static int jit_fail(host_jit *h, kn_diag *d, LLVMErrorRef err, const char *what) {
  char *msg = LLVMGetErrorMessage(err); /* consumes err */
  /* LLVM's own diagnostics, when there are any, say more than "failed to materialize" */
  bool extra = h->sink && h->sink->len;
  kn_error(d, NULL, no_loc, "%s: %s%s%s%s", what, msg ? msg : "unknown LLVM error",
           extra ? " (" : "", extra ? h->sink->text : "", extra ? ")" : "");
  LLVMDisposeErrorMessage(msg);
  kn_loaded l = {.impl = h};
  kn_jit_unload(&l);
  return -1;
}

int kn_jit_load(LLVMContextRef ctx, LLVMModuleRef mod, const char *kernel_name, kn_loaded *out,
                kn_diag *d) {
  host_jit *h = calloc(1, sizeof *h);
  if (!h) {
    LLVMDisposeModule(mod);
    kn_llvm_context_forget(ctx);
    LLVMContextDispose(ctx);
    return kn_error(d, NULL, no_loc, "out of memory");
  }
  h->sink = LLVMContextGetDiagnosticContext(ctx);

  LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContextFromLLVMContext(ctx);
  LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(mod, tsc);
  LLVMOrcDisposeThreadSafeContext(tsc);

  kn_diag tmp;
  LLVMTargetMachineRef tm = kn_llvm_host_machine(&tmp);
  if (!tm) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    *d = tmp;
    kn_loaded l = {.impl = h};
    kn_jit_unload(&l);
    return -1;
  }
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  LLVMErrorRef err = LLVMOrcCreateLLJIT(&h->jit, jb);
  if (err) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    return jit_fail(h, d, err, "cannot create the JIT");
  }
  if (kn_jit_define_helpers(h->jit, d)) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    kn_loaded l = {.impl = h};
    kn_jit_unload(&l);
    return -1;
  }
  err = LLVMOrcLLJITAddLLVMIRModule(h->jit, LLVMOrcLLJITGetMainJITDylib(h->jit), tsm);
  if (err) {
    LLVMOrcDisposeThreadSafeModule(tsm);
    return jit_fail(h, d, err, "cannot add the module to the JIT");
  }
  char sym[300];
  snprintf(sym, sizeof sym, "kiln_%s", kernel_name);
  LLVMOrcExecutorAddress entry = 0, status = 0;
  err = LLVMOrcLLJITLookup(h->jit, &entry, sym);
  if (err) return jit_fail(h, d, err, "JIT compilation failed");
  snprintf(sym, sizeof sym, "kiln_%s.status", kernel_name);
  err = LLVMOrcLLJITLookup(h->jit, &status, sym);
  if (err) return jit_fail(h, d, err, "JIT lookup of the status word failed");
  out->impl = h;
  out->entry = (void *)(uintptr_t)entry;
  out->status = (int *)(uintptr_t)status;
  return 0;
}

void kn_jit_unload(kn_loaded *l) {
  host_jit *h = l ? l->impl : NULL;
  if (!h) return;
  if (h->jit) {
    LLVMErrorRef err = LLVMOrcDisposeLLJIT(h->jit);
    if (err) LLVMConsumeError(err);
  }
  free(h->sink);
  free(h);
  l->impl = NULL;
  l->entry = NULL;
  l->status = NULL;
}
