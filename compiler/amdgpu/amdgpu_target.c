/* amdgpu_target.c — the gfx90a / gfx942 descriptions, their MFMA tables, the occupancy model, and
 * the path from an LLVM module holding amdgpu_kernel functions to a code object.
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Disassembler.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "amdgpu.h"

static const kn_loc amd_loc = {"amdgpu", 0, 0};

/* ---- targets ------------------------------------------------------------------------------------- */

/* CDNA 2: f16 and bf16 MFMAs run at 1024 flop/cycle/CU (64 cycles for 32x32x8). */
static const kn_amdgpu_mfma gfx90a_mfma[] = {
    {"v_mfma_f32_32x32x8f16", "llvm.amdgcn.mfma.f32.32x32x8f16", 32, 32, 8, KN_F16, KN_F16,
     KN_F32, 4, 4, 16, 64, 16},
    {"v_mfma_f32_32x32x8bf16_1k", "llvm.amdgcn.mfma.f32.32x32x8bf16.1k", 32, 32, 8, KN_BF16,
     KN_BF16, KN_F32, 4, 4, 16, 64, 16},
    {"v_mfma_f32_16x16x16f16", "llvm.amdgcn.mfma.f32.16x16x16f16", 16, 16, 16, KN_F16, KN_F16,
     KN_F32, 4, 4, 4, 32, 8},
    {"v_mfma_f32_16x16x16bf16_1k", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k", 16, 16, 16, KN_BF16,
     KN_BF16, KN_F32, 4, 4, 4, 32, 8},
};

/* CDNA 3: the same instructions at twice the rate (the assembler drops "_1k" and adds an
 * underscore before the type), plus fp8 in AMD's "fnuz" encoding (the calculator's amd_fp8).
 * The bf16 intrinsics still take <4 x i16>. */
static const kn_amdgpu_mfma gfx942_mfma[] = {
    {"v_mfma_f32_32x32x8_f16", "llvm.amdgcn.mfma.f32.32x32x8f16", 32, 32, 8, KN_F16, KN_F16,
     KN_F32, 4, 4, 16, 32, 8},
    {"v_mfma_f32_32x32x8_bf16", "llvm.amdgcn.mfma.f32.32x32x8bf16.1k", 32, 32, 8, KN_BF16,
     KN_BF16, KN_F32, 4, 4, 16, 32, 8},
    {"v_mfma_f32_16x16x16_f16", "llvm.amdgcn.mfma.f32.16x16x16f16", 16, 16, 16, KN_F16, KN_F16,
     KN_F32, 4, 4, 4, 16, 4},
    {"v_mfma_f32_16x16x16_bf16", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k", 16, 16, 16, KN_BF16,
     KN_BF16, KN_F32, 4, 4, 4, 16, 4},
    {"v_mfma_f32_32x32x16_fp8_fp8", "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8", 32, 32, 16,
     KN_F8E4M3FNUZ, KN_F8E4M3FNUZ, KN_F32, 8, 8, 16, 32, 8},
};

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const kn_amdgpu_target targets[] = {
    {.name = "gfx90a", .chip = "CDNA 2 (MI200)", .triple = "amdgcn-amd-amdhsa", .elf_mach = 0x3f,
     .wave_size = 64, .simds_per_cu = 4, .max_waves_per_simd = 8, .vgprs_per_lane = 512,
     .max_arch_vgprs = 256, .max_agprs = 256, .vgpr_granule = 8, .agpr_offset_align = 4,
     .max_sgprs = 102, .lds_bytes = 65536, .lds_granule = 512, .max_barriers_per_cu = 16,
     .mfma = gfx90a_mfma, .nmfma = NELEM(gfx90a_mfma)},
    {.name = "gfx942", .chip = "CDNA 3 (MI300)", .triple = "amdgcn-amd-amdhsa", .elf_mach = 0x4c,
     .wave_size = 64, .simds_per_cu = 4, .max_waves_per_simd = 8, .vgprs_per_lane = 512,
     .max_arch_vgprs = 256, .max_agprs = 256, .vgpr_granule = 8, .agpr_offset_align = 4,
     .max_sgprs = 102, .lds_bytes = 65536, .lds_granule = 512, .max_barriers_per_cu = 16,
     .mfma = gfx942_mfma, .nmfma = NELEM(gfx942_mfma)},
};

const kn_amdgpu_target *kn_amdgpu_target_at(int i) {
  return i >= 0 && i < NELEM(targets) ? &targets[i] : NULL;
}

const kn_amdgpu_target *kn_amdgpu_target_by_name(const char *name) {
  for (int i = 0; name && i < NELEM(targets); i++)
    if (!strcmp(targets[i].name, name)) return &targets[i];
  return NULL;
}

const kn_amdgpu_target *kn_amdgpu_target_by_mach(unsigned mach) {
  for (int i = 0; i < NELEM(targets); i++)
    if (targets[i].elf_mach == mach) return &targets[i];
  return NULL;
}

const kn_amdgpu_mfma *kn_amdgpu_find_mfma(const kn_amdgpu_target *t, int m, int n, int k,
                                          kn_scalar a) {
  for (int i = 0; t && i < t->nmfma; i++) {
    const kn_amdgpu_mfma *f = &t->mfma[i];
    if (f->m == m && f->n == n && f->k == k && f->a == a) return f;
  }
  return NULL;
}

/* ---- occupancy ------------------------------------------------------------------------------------ */

static int align_up(int x, int a) { return (x + a - 1) / a * a; }
static int min_int(int a, int b) { return a < b ? a : b; }

kn_amdgpu_occupancy kn_amdgpu_occupancy_of(const kn_amdgpu_target *t, int vgpr, int agpr,
                                           int sgpr, uint32_t lds, int wg_size) {
  kn_amdgpu_occupancy o = {0};
  if (!t || vgpr < 0 || agpr < 0 || sgpr < 0 || wg_size <= 0 || wg_size > 1024) return o;
  /* Registers.  On gfx90a and later VGPRs and AGPRs share one 512-entry file per lane; a wave's
   * AGPRs start at its VGPR count rounded up to 4, and the metadata's .vgpr_count is already
   * that total, align(arch, 4) + agpr (LLVM's TotalNumVgprs), so it is used as it is, rounded
   * up to the allocation granule. */
  if (agpr > t->max_agprs || vgpr - agpr > t->max_arch_vgprs || agpr > vgpr) return o;
  o.unified_vgprs = align_up(vgpr > 0 ? vgpr : 1, t->vgpr_granule);
  if (o.unified_vgprs > t->vgprs_per_lane) return o;
  o.by_vgpr = min_int(t->max_waves_per_simd, t->vgprs_per_lane / o.unified_vgprs);

  /* SGPRs: gfx9 steps.  The metadata's .sgpr_count adds the special registers (VCC,
   * FLAT_SCRATCH, XNACK_MASK: 6 more) to the up to 102 a kernel addresses, so a launchable
   * kernel reports up to 108; what lies above 100 gets the last step. */
  if (sgpr > t->max_sgprs + 6) return o;
  o.by_sgpr = sgpr <= 80 ? 10 : sgpr <= 88 ? 9 : sgpr <= 100 ? 8 : 7;
  o.by_sgpr = min_int(o.by_sgpr, t->max_waves_per_simd);

  /* LDS and workgroup slots: whole workgroups are resident on one CU, their waves spread over
   * its SIMDs; a workgroup of more than one wave also takes one of the CU's barriers. */
  int waves_per_wg = (wg_size + t->wave_size - 1) / t->wave_size;
  int wave_slots = t->max_waves_per_simd * t->simds_per_cu;
  int wgs = waves_per_wg > 1 ? min_int(wave_slots / waves_per_wg, t->max_barriers_per_cu)
                             : wave_slots;
  if (lds > (uint32_t)t->lds_bytes) return o;
  if (lds > 0) {
    uint32_t rounded = (lds + (uint32_t)t->lds_granule - 1) / (uint32_t)t->lds_granule *
                       (uint32_t)t->lds_granule;
    wgs = min_int(wgs, (int)((uint32_t)t->lds_bytes / rounded));
  }
  o.by_lds = min_int(t->max_waves_per_simd, wgs * waves_per_wg / t->simds_per_cu);

  o.waves = min_int(min_int(o.by_vgpr, o.by_sgpr), o.by_lds);
  /* a workgroup must fit at once: its waves need ceil(waves_per_wg / 4) slots on each SIMD */
  if (o.waves < (waves_per_wg + t->simds_per_cu - 1) / t->simds_per_cu) o.waves = 0;
  return o;
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

LLVMTargetMachineRef kn_amdgpu_machine(const kn_amdgpu_target *t, const char *features,
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
                                                    LLVMCodeGenLevelAggressive, LLVMRelocPIC,
                                                    LLVMCodeModelDefault);
  if (!tm) kn_error(d, NULL, amd_loc, "cannot create an LLVM target machine for %s", t->name);
  return tm;
}

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
static int check_intrinsics(const kn_amdgpu_target *t, LLVMModuleRef mod, kn_diag *d) {
  bool fp8 = false;
  for (int i = 0; i < t->nmfma; i++) fp8 |= t->mfma[i].a == KN_F8E4M3FNUZ;
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
    for (int i = 0; matrix && i < t->nmfma; i++)
      known |= strlen(t->mfma[i].intrinsic) == n && !memcmp(t->mfma[i].intrinsic, name, n);
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

int kn_amdgpu_compile(const kn_amdgpu_target *t, LLVMModuleRef mod, const kn_amdgpu_options *opt,
                      kn_amdgpu_output *out, kn_diag *d) {
  static const kn_amdgpu_options defaults = {0};
  if (!opt) opt = &defaults;
  memset(out, 0, sizeof *out);
  if (!t || !mod) return kn_error(d, NULL, amd_loc, "no target or no module");

  diag_capture cap;
  capture_begin(&cap, LLVMGetModuleContext(mod));
  LLVMTargetMachineRef tm = NULL;
  LLVMPassBuilderOptionsRef pbo = NULL;
  int rc = -1;

  char *vmsg = NULL;
  if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &vmsg)) {
    kn_error(d, NULL, amd_loc, "invalid LLVM IR before optimisation: %.400s", vmsg ? vmsg : "?");
    LLVMDisposeMessage(vmsg);
    goto done;
  }
  LLVMDisposeMessage(vmsg);
  if (count_kernels(mod) == 0) {
    kn_error(d, NULL, amd_loc, "module defines no amdgpu_kernel function");
    goto done;
  }
  if (check_intrinsics(t, mod, d)) goto done;
  if (!(tm = kn_amdgpu_machine(t, opt->features, d))) goto done;
  attach_target(mod, tm);
  if (pin_code_object_v5(mod, d)) goto done;

  /* default<O3> with the target machine: the machine brings the AMDGPU passes into the pipeline,
   * among them the attributor that marks each kernel amdgpu-no-implicitarg-ptr etc., so codegen
   * leaves the unused hidden arguments out of the kernarg segment. */
  double t0 = now_ms();
  pbo = LLVMCreatePassBuilderOptions();
  LLVMErrorRef perr = LLVMRunPasses(mod, opt->passes ? opt->passes : "default<O3>", tm, pbo);
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

  if (opt->emit_asm) {
    /* codegen rewrites the IR it runs on (kernel argument lowering and more), so the assembly
     * comes from a copy and the object from the module itself */
    LLVMModuleRef copy = LLVMCloneModule(mod);
    size_t n;
    int e = emit(tm, copy, LLVMAssemblyFile, (void **)&out->asm_text, &n, &cap, d);
    LLVMDisposeModule(copy);
    if (e) goto done;
  }
  if (emit(tm, mod, LLVMObjectFile, &out->obj, &out->obj_size, &cap, d)) goto done;
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
  if (pbo) LLVMDisposePassBuilderOptions(pbo);
  if (tm) LLVMDisposeTargetMachine(tm);
  capture_end(&cap);
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

int kn_amdgpu_count_mfma(const char *cpu, const uint8_t *code, size_t n, int *ninstr) {
  kn_amdgpu_init();
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
