/* amdgpu_target.c — the gfx90a / gfx942 descriptions, their MFMA tables, the MFMA count of the
 * inspector (the occupancy model these facts also feed is in codeobj.c), and the path from an
 * LLVM module holding amdgpu_kernel functions to a code object.
 *
 * Sources of the facts below (references for numbers only; no code taken from them):
 *  - AMD Matrix Instruction Calculator (ROCm/amd_matrix_instruction_calculator, v1.3.2):
 *    MFMA shapes, operand types and cycle counts for CDNA 2 (gfx90a) and CDNA 3 (gfx942).
 *    "AMD Instinct MI300 (CDNA 3) ISA Reference Guide" and "... MI200 (CDNA 2) ..." for the same
 *    instructions; a pass is 4 cycles.
 *  - LLVM's AMDGPU backend (AMDGPUBaseInfo / GCNSubtarget, LLVM 22) and its AMDGPUUsage document:
 *    512 unified VGPR+AGPR per lane per SIMD on gfx90a and later, allocation granule 8, AGPRs
 *    placed at align(vgpr, 4), 8 waves per SIMD, the gfx9 SGPR occupancy steps (<=80: 10,
 *    <=88: 9, <=100: 8, else 7), 16 barriers per CU for multi-wave workgroups, LDS of 64 KiB per
 *    CU allocated in 128-dword blocks, code object v5 = ELF ABI version 3.
 *
 * Compilation assumes the module's functions are already lowered (amdgpu_kernel calling
 * convention, addrspace(1) global pointers); it only attaches the target, pins the code object
 * version, optimises with the target machine (so the AMDGPU attributor runs and the kernarg
 * segment carries no unused hidden arguments), and emits.  The module's LLVMContext gets a
 * diagnostic handler for the duration of the call, so nothing LLVM reports is printed or fatal.
 */
#include <signal.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Disassembler.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "amdgpu.h"

static const kn_loc amd_loc = {"amdgpu", 0, 0};

/* ---- the inspector's disassembly ------------------------------------------------------------- */

int kn_codeobj_parse(const void *data, size_t n, kn_codeobj *co, kn_diag *d) {
  if (kn_codeobj_read(data, n, co, d)) return -1;
  for (int k = 0; k < co->nkernels; k++) {
    kn_codeobj_kernel *kn = &co->kernels[k];
    if (!co->target || !kn->code_size) continue;
    int sig = 0;
    kn->mfma_count = kn_amdgpu_count_mfma_isolated(co->target->name,
                                                   (const uint8_t *)data + kn->code_offset,
                                                   (size_t)kn->code_size, &kn->ninstr, &sig);
    if (kn->mfma_count == -2) {
      kn_error(d, NULL, (kn_loc){"code object", 0, 0}, "kernel '%s': LLVM's %s disassembler %s "
               "on its %llu bytes of code (signal %d): the code object is damaged", kn->name, co->target->name,
               sig == SIGALRM ? "did not finish" : "crashed", (unsigned long long)kn->code_size,
               sig);
      kn_codeobj_free(co);
      return -1;
    }
    if (kn->mfma_count < 0) kn->ninstr = kn->mfma_count = -1;
  }
  return 0;
}

/* ---- LLVM setup ------------------------------------------------------------------------------------ */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_amdgpu(void) {
  LLVMInitializeAMDGPUTargetInfo();
  LLVMInitializeAMDGPUTargetMC();
  LLVMInitializeAMDGPUTarget();
  LLVMInitializeAMDGPUAsmPrinter();
  LLVMInitializeAMDGPUAsmParser();
  LLVMInitializeAMDGPUDisassembler();
}

void kn_amdgpu_init(void) { pthread_once(&init_once, init_amdgpu); }

LLVMTargetMachineRef kn_amdgpu_machine(const kn_arch *t, const char *features,
                                       kn_diag *d) {
  kn_amdgpu_init();
  LLVMTargetRef target;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(t->triple, &target, &err)) {
    kn_error(d, NULL, amd_loc, "LLVM has no target for %s: %s", t->triple, err ? err : "?");
    LLVMDisposeMessage(err);
    return NULL;
  }
  /* Code object v5 code must be position independent (it is linked -shared). */
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, t->triple, t->name,
                                                    features ? features : "",
                                                    LLVMCodeGenLevelDefault, LLVMRelocPIC,
                                                    LLVMCodeModelDefault);
  if (!tm) kn_error(d, NULL, amd_loc, "cannot create an LLVM target machine for %s", t->name);
  return tm;
}

/* ---- the optimisation pipeline --------------------------------------------------------------------- */

/* The LLVM optimisation pipeline of the AMDGPU targets (target.h's `passes`; kn_amdgpu_compile's
 * default).  It is LLVM 22's default<O3> for these chips, as printed by
 *   opt-22 -mtriple=amdgcn-amd-amdhsa -mcpu=gfx942 -passes='default<O3>' -print-pipeline-passes
 *          -disable-output K.ll     (K.ll: `KILN_DUMP=lowered kiln compile --target gfx942 ...`)
 * less opt's trailing `verify` (as printed, it compiled all 24 of gfx90a / gfx942 / gfx950 x
 * D 64, 128 x plain, causal x buffer, global K/V loads to the bytes default<O3> gives), with
 * the edits marked in the text:
 *  - gvn<> replaced by early-cse<memssa>                                (-3.7% of the compile)
 *  - jump-threading and correlated-propagation (both places), constraint-elimination  (-0.7%)
 *  - aggressive-instcombine                                                            (-0.05%)
 * and kn_amdgpu_machine's codegen level Default instead of Aggressive                  (-2.8%).
 * Measured 2026-12-05 (bench/RESULTS.md): instructions (callgrind) of one cold gfx942 compile,
 * D 128, 128x64, 4 waves: 1264 M -> 1171 M (LLVM's passes 465 -> 409 M, codegen 764 -> 727 M);
 * the KV loops of those 24 kernels (and decode, D 32 / 256, bf16, fp8 on gfx942) are the same
 * instructions in the same order, SGPR numbers aside: the same llvm-mca cycles, registers,
 * spills (none) and waves.  Measured and not taken: reassociate dropped too (-0.65%, but
 * gfx950's loops changed, D 64 +0.9% cycles); SLP off or default<O1> (the loop 10% slower); a
 * short hand-written pipeline (it spilled).  LLVMPassBuilderOptionsSetSLPVectorization(0) has
 * no effect on "default<O3>", hence the text.  Pass names and options are LLVM 22's (CMake
 * requires LLVM 22): LLVMRunPasses rejects a text it cannot parse, failing every AMDGPU compile
 * with LLVM's message, so another LLVM needs the pipeline printed and measured again. */
const char kn_amdgpu_passes[] =
    "memprof-remove-attributes,annotation2metadata,forceattrs,inferattrs,coro-early,"
    "function<eager-inv>(ee-instrument<>,lower-expect,simplifycfg<bonus-inst-threshold=1;"
    "no-forward-switch-cond;no-switch-range-to-icmp;no-switch-to-arithmetic;no-switch-to-lookup;"
    "keep-loops;no-hoist-common-insts;no-hoist-loads-stores-with-cond-faulting;"
    "no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables>,"
    "sroa<modify-cfg>,early-cse<>,callsite-splitting),openmp-opt,amdgpu-printf-runtime-binding,"
    "ipsccp,called-value-propagation,globalopt,function<eager-inv>(mem2reg,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,amdgpu-usenative,amdgpu-simplifylib,"
    "amdgpu-uniform-intrinsic-combine,simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;"
    "switch-range-to-icmp;no-switch-to-arithmetic;no-switch-to-lookup;keep-loops;"
    "no-hoist-common-insts;no-hoist-loads-stores-with-cond-faulting;no-sink-common-insts;"
    "speculate-blocks;simplify-cond-branch;no-speculate-unpredictables>),always-inline,"
    "require<globals-aa>,function(invalidate<aa>),require<profile-summary>,cgscc(devirt<4>(inline,"
    "function-attrs<skip-non-recursive-function-attrs>,argpromotion,openmp-opt-cgscc,function("
    "amdgpu-promote-kernel-arguments,infer-address-spaces,amdgpu-lower-kernel-attributes,"
    "amdgpu-promote-alloca-to-vector),function<eager-inv;no-rerun>(sroa<modify-cfg>,"
    "early-cse<memssa>,speculative-execution<only-if-divergent-target>,"
    /* O3: jump-threading, correlated-propagation (dropped) */
    "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;"
    "no-switch-to-arithmetic;no-switch-to-lookup;keep-loops;no-hoist-common-insts;"
    "no-hoist-loads-stores-with-cond-faulting;no-sink-common-insts;speculate-blocks;"
    "simplify-cond-branch;no-speculate-unpredictables>,instcombine<max-iterations=1;"
    "no-verify-fixpoint>,"
    /* O3: aggressive-instcombine (dropped) */
    "libcalls-shrinkwrap,amdgpu-usenative,amdgpu-simplifylib,amdgpu-uniform-intrinsic-combine,"
    "tailcallelim,simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;"
    "no-switch-to-arithmetic;no-switch-to-lookup;keep-loops;no-hoist-common-insts;"
    "no-hoist-loads-stores-with-cond-faulting;no-sink-common-insts;speculate-blocks;"
    "simplify-cond-branch;no-speculate-unpredictables>,reassociate,"
    /* O3: constraint-elimination (dropped) */
    "loop-mssa(loop-instsimplify,loop-simplifycfg,licm<no-allowspeculation>,"
    "loop-rotate<header-duplication;no-prepare-for-lto>,licm<allowspeculation>,"
    "simple-loop-unswitch<nontrivial;trivial>),simplifycfg<bonus-inst-threshold=1;"
    "no-forward-switch-cond;switch-range-to-icmp;no-switch-to-arithmetic;no-switch-to-lookup;"
    "keep-loops;no-hoist-common-insts;no-hoist-loads-stores-with-cond-faulting;"
    "no-sink-common-insts;speculate-blocks;simplify-cond-branch;no-speculate-unpredictables>,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,loop(loop-idiom,indvars,"
    "extra-simple-loop-unswitch-passes,loop-deletion,loop-unroll-full),sroa<modify-cfg>,"
    "vector-combine,mldst-motion<no-split-footer-bb>,"
    /* O3: gvn<>; here: */
    "early-cse<memssa>,sccp,bdce,instcombine<max-iterations=1;no-verify-fixpoint>,amdgpu-usenative,"
    "amdgpu-simplifylib,amdgpu-uniform-intrinsic-combine,"
    /* O3: jump-threading, correlated-propagation (dropped) */
    "adce,memcpyopt,dse,move-auto-init,loop-mssa(licm<allowspeculation>),coro-elide,"
    "infer-address-spaces,simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;"
    "switch-range-to-icmp;switch-to-arithmetic;no-switch-to-lookup;keep-loops;hoist-common-insts;"
    "no-hoist-loads-stores-with-cond-faulting;sink-common-insts;speculate-blocks;"
    "simplify-cond-branch;no-speculate-unpredictables>,instcombine<max-iterations=1;"
    "no-verify-fixpoint>,amdgpu-usenative,amdgpu-simplifylib,amdgpu-uniform-intrinsic-combine),"
    "function-attrs,function(require<should-not-run-function-passes>),coro-split,"
    "coro-annotation-elide)),deadargelim,coro-cleanup,globalopt,globaldce,elim-avail-extern,"
    "rpo-function-attrs,recompute-globalsaa,function<eager-inv>(drop-unnecessary-assumes,float2int,"
    "lower-constant-intrinsics,chr,loop(loop-rotate<header-duplication;no-prepare-for-lto>,"
    "loop-deletion),loop-distribute,inject-tli-mappings,loop-vectorize<no-interleave-forced-only;"
    "no-vectorize-forced-only;>,drop-unnecessary-assumes,infer-alignment,loop-load-elim,"
    "instcombine<max-iterations=1;no-verify-fixpoint>,simplifycfg<bonus-inst-threshold=1;"
    "forward-switch-cond;switch-range-to-icmp;switch-to-arithmetic;switch-to-lookup;no-keep-loops;"
    "hoist-common-insts;no-hoist-loads-stores-with-cond-faulting;sink-common-insts;"
    "speculate-blocks;simplify-cond-branch;no-speculate-unpredictables>,slp-vectorizer,"
    "vector-combine,instcombine<max-iterations=1;no-verify-fixpoint>,loop-unroll<O3>,"
    "transform-warning,sroa<preserve-cfg>,infer-alignment,instcombine<max-iterations=1;"
    "no-verify-fixpoint>,loop-mssa(licm<allowspeculation>),alignment-from-assumptions,"
    "infer-address-spaces,loop-sink,instsimplify,div-rem-pairs,tailcallelim,"
    "simplifycfg<bonus-inst-threshold=1;no-forward-switch-cond;switch-range-to-icmp;"
    "switch-to-arithmetic;no-switch-to-lookup;keep-loops;no-hoist-common-insts;"
    "hoist-loads-stores-with-cond-faulting;no-sink-common-insts;speculate-blocks;"
    "simplify-cond-branch;speculate-unpredictables>),alloc-token,amdgpu-attributor,globaldce,"
    "constmerge,cg-profile,rel-lookup-table-converter,function(annotation-remarks)";

/* ---- diagnostics ------------------------------------------------------------------------------------ */

/* LLVM reports codegen problems (e.g. "ran out of registers", unsupported intrinsic) through the
 * context's diagnostic handler; the default one prints and, for errors, exits.  This one keeps
 * the text and counts errors; the previous handler is restored afterwards. */
typedef struct diag_capture {
  LLVMContextRef ctx;
  LLVMDiagnosticHandler old;
  void *old_ctx;
  int errors;
  size_t len;
  char text[1024];
} diag_capture;

static void on_diag(LLVMDiagnosticInfoRef di, void *p) {
  diag_capture *c = p;
  LLVMDiagnosticSeverity sev = LLVMGetDiagInfoSeverity(di);
  if (sev == LLVMDSRemark || sev == LLVMDSNote) return;
  if (sev == LLVMDSError) c->errors++;
  char *desc = LLVMGetDiagInfoDescription(di);
  if (c->len < sizeof c->text - 1) {
    int n = snprintf(c->text + c->len, sizeof c->text - c->len, "%s%s: %s", c->len ? "; " : "",
                     sev == LLVMDSError ? "error" : "warning", desc ? desc : "?");
    if (n > 0) c->len += (size_t)n;
    if (c->len >= sizeof c->text) c->len = sizeof c->text - 1;
  }
  LLVMDisposeMessage(desc);
}

static void capture_begin(diag_capture *c, LLVMContextRef ctx) {
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  c->old = LLVMContextGetDiagnosticHandler(ctx);
  c->old_ctx = LLVMContextGetDiagnosticContext(ctx);
  LLVMContextSetDiagnosticHandler(ctx, on_diag, c);
}

static void capture_end(diag_capture *c) {
  LLVMContextSetDiagnosticHandler(c->ctx, c->old, c->old_ctx);
}

/* ---- compile ------------------------------------------------------------------------------------ */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char cov_key[] = "amdhsa_code_object_version";

/* Pins code object v5.  LLVM 22 emits v6 (ELF ABI version 4) when the module does not say,
 * which ROCm before 6.2 cannot load; a module that asks for another version is refused rather
 * than silently changed. */
static int pin_code_object_v5(LLVMModuleRef mod, kn_diag *d) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMMetadataRef md = LLVMGetModuleFlag(mod, cov_key, sizeof cov_key - 1);
  if (md) {
    /* a constant module flag reads back as a one-operand "node" holding the constant */
    LLVMValueRef v = LLVMMetadataAsValue(ctx, md), c = NULL;
    if (LLVMGetMDNodeNumOperands(v) == 1) LLVMGetMDNodeOperands(v, &c);
    if (!c || !LLVMIsAConstantInt(c) || LLVMConstIntGetZExtValue(c) != 500)
      return kn_error(d, NULL, amd_loc, "module asks for a code object version other than 5 "
                                        "(module flag %s); kiln emits v5 only", cov_key);
    return 0;
  }
  LLVMValueRef five = LLVMConstInt(LLVMInt32TypeInContext(ctx), 500, 0);
  LLVMAddModuleFlag(mod, LLVMModuleFlagBehaviorError, cov_key, sizeof cov_key - 1,
                    LLVMValueAsMetadata(five));
  return 0;
}

static int count_kernels(LLVMModuleRef mod) {
  int n = 0;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (!LLVMIsDeclaration(f) && LLVMGetFunctionCallConv(f) == LLVMAMDGPUKERNELCallConv) n++;
  return n;
}

static bool starts_with(const char *s, size_t n, const char *prefix) {
  size_t k = strlen(prefix);
  return n >= k && !memcmp(s, prefix, k);
}

static bool contains(const char *s, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(s + i, needle, k)) return true;
  return false;
}

/* LLVM's instruction selector does not report an intrinsic the subtarget lacks as a diagnostic:
 * it calls report_fatal_error ("Cannot select: intrinsic ..."), which exits the process.  So the
 * matrix intrinsics kiln may emit are checked against this target's table first, and AMD's
 * fp8/bf8 intrinsics (conversions included) are allowed only where the table has an fp8 MFMA. */
static int check_intrinsics(const kn_arch *t, LLVMModuleRef mod, kn_diag *d) {
  bool fp8 = false;
  for (int i = 0; i < t->nmma; i++) fp8 |= kn_scalar_size(t->mma[i].a) == 1;
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f)) {
    size_t n;
    const char *name = LLVMGetValueName2(f, &n);
    if (!LLVMIsDeclaration(f) || !LLVMGetFirstUse(f) || !starts_with(name, n, "llvm.amdgcn."))
      continue;
    bool matrix = starts_with(name, n, "llvm.amdgcn.mfma.") ||
                  starts_with(name, n, "llvm.amdgcn.smfmac.") ||
                  starts_with(name, n, "llvm.amdgcn.wmma.") ||
                  starts_with(name, n, "llvm.amdgcn.swmmac.");
    bool known = !matrix;
    for (int i = 0; matrix && i < t->nmma; i++)
      known |= t->mma[i].intrinsic && strlen(t->mma[i].intrinsic) == n &&
               !memcmp(t->mma[i].intrinsic, name, n);
    if (!fp8 && (contains(name, n, "fp8") || contains(name, n, "bf8"))) known = false;
    if (!known)
      return kn_error(d, NULL, amd_loc, "%.*s is not available on %s (kiln's table of its "
                      "matrix instructions does not list it)", (int)n, name, t->name);
  }
  return 0;
}

static void attach_target(LLVMModuleRef mod, LLVMTargetMachineRef tm) {
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(mod, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(mod, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);
}

/* codegen of mod into a malloc'd copy (ELF object or assembly text, NUL-terminated) */
static int emit(LLVMTargetMachineRef tm, LLVMModuleRef mod, LLVMCodeGenFileType kind, void **out,
                size_t *out_n, diag_capture *cap, kn_diag *d) {
  char *err = NULL;
  LLVMMemoryBufferRef buf = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, kind, &err, &buf) || cap->errors) {
    kn_error(d, NULL, amd_loc, "AMDGPU code generation failed: %s%s%s", err ? err : "",
             err && cap->len ? "; " : "", cap->text);
    LLVMDisposeMessage(err);
    if (buf) LLVMDisposeMemoryBuffer(buf);
    return -1;
  }
  size_t n = LLVMGetBufferSize(buf);
  char *p = malloc(n + 1);
  if (!p) {
    LLVMDisposeMemoryBuffer(buf);
    return kn_error(d, NULL, amd_loc, "out of memory");
  }
  memcpy(p, LLVMGetBufferStart(buf), n);
  p[n] = 0;
  LLVMDisposeMemoryBuffer(buf);
  *out = p;
  *out_n = n;
  return 0;
}

int kn_amdgpu_prepare(const kn_arch *t, LLVMModuleRef mod, kn_diag *d) {
  if (!t || t->isa != KN_ISA_AMDGPU || !mod)
    return kn_error(d, NULL, amd_loc, "no AMDGPU target or no module");
  if (count_kernels(mod) == 0)
    return kn_error(d, NULL, amd_loc, "module defines no amdgpu_kernel function");
  if (check_intrinsics(t, mod, d)) return -1;
  return pin_code_object_v5(mod, d);
}

int kn_amdgpu_emit(LLVMModuleRef mod, LLVMTargetMachineRef tm, bool assembly, void **out,
                   size_t *out_n, kn_diag *d) {
  diag_capture cap;
  capture_begin(&cap, LLVMGetModuleContext(mod));
  int rc;
  if (assembly) {
    /* codegen rewrites the IR it runs on (kernel argument lowering and more): emit assembly
     * from a copy, so the module can still become the object */
    LLVMModuleRef copy = LLVMCloneModule(mod);
    rc = emit(tm, copy, LLVMAssemblyFile, out, out_n, &cap, d);
    LLVMDisposeModule(copy);
  } else {
    rc = emit(tm, mod, LLVMObjectFile, out, out_n, &cap, d);
  }
  capture_end(&cap);
  return rc;
}

/* The AMDGPU steps of compiler/pipeline.c applied to an LLVM module written by hand (tests):
 * verify, prepare, default<O3> (or opt->passes) with the target machine, codegen, link. */
int kn_amdgpu_compile(const kn_arch *t, LLVMModuleRef mod, const kn_amdgpu_options *opt,
                      kn_amdgpu_output *out, kn_diag *d) {
  static const kn_amdgpu_options defaults = {0};
  if (!opt) opt = &defaults;
  memset(out, 0, sizeof *out);
  if (!t || !mod) return kn_error(d, NULL, amd_loc, "no target or no module");
  LLVMTargetMachineRef tm = NULL;
  int rc = -1;
  char *vmsg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &vmsg)) {
    kn_error(d, NULL, amd_loc, "invalid LLVM IR before optimisation: %.400s", vmsg ? vmsg : "?");
    LLVMDisposeMessage(vmsg);
    return -1;
  }
  LLVMDisposeMessage(vmsg);
  if (kn_amdgpu_prepare(t, mod, d)) return -1;
  if (!(tm = kn_amdgpu_machine(t, opt->features, d))) return -1;
  attach_target(mod, tm);
  /* default<O3> with the target machine: the machine brings the AMDGPU passes into the pipeline,
   * among them the attributor that marks each kernel amdgpu-no-implicitarg-ptr etc., so codegen
   * leaves the unused hidden arguments out of the kernarg segment. */
  double t0 = now_ms();
  diag_capture cap;
  capture_begin(&cap, LLVMGetModuleContext(mod));
  LLVMPassBuilderOptionsRef pbo = LLVMCreatePassBuilderOptions();
  LLVMErrorRef perr = LLVMRunPasses(mod, opt->passes ? opt->passes : kn_amdgpu_passes, tm, pbo);
  LLVMDisposePassBuilderOptions(pbo);
  capture_end(&cap);
  if (perr) {
    char *m = LLVMGetErrorMessage(perr);
    kn_error(d, NULL, amd_loc, "LLVM optimisation failed: %s", m ? m : "?");
    LLVMDisposeErrorMessage(m);
    goto done;
  }
  if (cap.errors) {
    kn_error(d, NULL, amd_loc, "LLVM optimisation failed: %s", cap.text);
    goto done;
  }
  double t1 = now_ms();
  out->ms_optimize = t1 - t0;
  size_t n;
  if (opt->emit_asm && kn_amdgpu_emit(mod, tm, true, (void **)&out->asm_text, &n, d)) goto done;
  if (kn_amdgpu_emit(mod, tm, false, &out->obj, &out->obj_size, d)) goto done;
  double t2 = now_ms();
  out->ms_codegen = t2 - t1;
  if (opt->link) {
    char err[1024] = "";
    if (kn_amdgpu_link(out->obj, out->obj_size, &out->code_object, &out->code_object_size, err,
                       sizeof err)) {
      kn_error(d, NULL, amd_loc, "linking the %s code object failed: %s", t->name, err);
      goto done;
    }
    out->ms_link = now_ms() - t2;
  }
  rc = 0;
done:
  LLVMDisposeTargetMachine(tm);
  if (rc) kn_amdgpu_output_free(out);
  return rc;
}

void kn_amdgpu_output_free(kn_amdgpu_output *out) {
  if (!out) return;
  free(out->obj);
  free(out->code_object);
  free(out->asm_text);
  memset(out, 0, sizeof *out);
}

/* ---- disassembly ------------------------------------------------------------------------------------ */

/* the count, in this process */
static int count_mfma(const char *cpu, const uint8_t *code, size_t n, int *ninstr) {
  LLVMDisasmContextRef dc = LLVMCreateDisasmCPU("amdgcn-amd-amdhsa", cpu, NULL, 0, NULL, NULL);
  if (!dc) return -1;
  int mfma = 0, count = 0;
  char text[256];
  size_t pc = 0;
  while (pc < n) {
    size_t len = LLVMDisasmInstruction(dc, (uint8_t *)(uintptr_t)(code + pc), n - pc, pc, text,
                                       sizeof text);
    /* an undecodable word (data, padding) is skipped a dword at a time: every AMDGPU
     * instruction is a multiple of 4 bytes */
    if (len == 0) {
      pc += 4;
      continue;
    }
    count++;
    const char *s = text;
    while (*s == ' ' || *s == '\t') s++;
    if (!strncmp(s, "v_mfma", 6)) mfma++;
    pc += len;
  }
  LLVMDisasmDispose(dc);
  if (ninstr) *ninstr = count;
  return mfma;
}

int kn_amdgpu_count_mfma(const char *cpu, const uint8_t *code, size_t n, int *ninstr) {
  kn_amdgpu_init();
  return count_mfma(cpu, code, n, ninstr);
}

/* the count in the child: two ints on fd */
typedef struct {
  const char *cpu;
  const uint8_t *code;
  size_t n;
} count_job;

static int count_child(void *ctx, int fd) {
  const count_job *j = ctx;
  int r[2] = {0, 0};
  r[0] = count_mfma(j->cpu, j->code, j->n, &r[1]);
  return write(fd, r, sizeof r) == (ssize_t)sizeof r ? 0 : 1;
}

int kn_amdgpu_isolated(int (*fn)(void *ctx, int fd), void *ctx, char **out, size_t *out_n,
                       int *sig) {
  kn_amdgpu_init(); /* (before the fork: the child only disassembles) */
  *sig = 0;
  *out = NULL;
  *out_n = 0;
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]), close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    close(fds[0]);
    /* a crash must reach the parent as the signal it is: the handlers this process inherited
     * (an embedding program's, or a sanitizer's, which would report and exit 1) are not ours */
    static const int crashes[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGALRM};
    for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++) signal(crashes[i], SIG_DFL);
    alarm(KN_DISASM_SECONDS); /* a decoder that loops is killed like one that crashes */
    _exit(fn(ctx, fds[1]));
  }
  close(fds[1]);
  /* read to the end (the child may write more than a pipe holds), at most 64 MiB */
  size_t cap = 0, len = 0;
  char *buf = NULL;
  bool ok = true;
  for (;;) {
    if (len == cap) {
      size_t nc = cap ? 2 * cap : 4096;
      char *nb = nc <= ((size_t)64 << 20) ? realloc(buf, nc) : NULL;
      if (!nb) {
        ok = false;
        break;
      }
      buf = nb, cap = nc;
    }
    ssize_t got = read(fds[0], buf + len, cap - len);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      ok = ok && got == 0;
      break;
    }
    len += (size_t)got;
  }
  close(fds[0]);
  int status = 0;
  if (!ok) kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (ok && WIFSIGNALED(status)) {
    free(buf);
    *sig = WTERMSIG(status);
    return -2;
  }
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status)) {
    free(buf);
    return -1;
  }
  *out = buf;
  *out_n = len;
  return 0;
}

int kn_amdgpu_count_mfma_isolated(const char *cpu, const uint8_t *code, size_t n, int *ninstr,
                                  int *sig) {
  count_job j = {cpu, code, n};
  char *buf;
  size_t len;
  int rc = kn_amdgpu_isolated(count_child, &j, &buf, &len, sig);
  if (rc) return rc;
  int r[2] = {-1, -1};
  if (len == sizeof r) memcpy(r, buf, sizeof r);
  free(buf);
  if (r[0] < 0) return -1;
  if (ninstr) *ninstr = r[1];
  return r[0];
}
