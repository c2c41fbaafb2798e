/* target_nvptx.c — the sm_80 and sm_90a kn_targets, and kn_nvptx_compile (tile IR -> PTX).
 *
 * The NVIDIA targets share everything above the leaf operations with AMDGPU: the layout pass
 * picks mma.sync m16n8k16 (f16 / bf16 operands, f32 accumulation; layout.c has its lane tables)
 * for warps of 32 lanes, the shared-memory plan is the same, and lower_gpu.c emits the kernel
 * through its NVPTX leaf table (ids from llvm.nvvm.read.ptx.sreg.*, bar.sync, shfl.sync.bfly,
 * llvm.nvvm.mma.m16n8k16.*, a ptx_kernel with .maxntid/.reqntid, dynamic shared memory).
 * LLVM's NVPTX backend writes the PTX: triple nvptx64-nvidia-cuda, CPU sm_80 (PTX ISA 7.0, the
 * first with sm_80) or sm_90a (PTX ISA 8.0, the first with sm_90a).  sm_90a uses the same
 * mma.sync path so far (wgmma and TMA are later steps); the "a" only makes the PTX loadable
 * where later wgmma code will be.
 *
 * `load` stops at PTX: the CUDA driver JIT-compiles it when runtime/cuda_device.h loads it
 * (kn_cuda_module_load_ptx), or ptxas turns it into a cubin offline (compiler/ptxas.h).  No
 * NVIDIA GPU is needed to compile.  The shared memory the plan needs travels with the module as
 * the named metadata !kiln.smem_bytes (lower -> load), since the kernel declares its shared
 * memory as an extern (dynamic) array whose size the launcher must pass.
 *
 * Nothing here prints or exits; LLVM's diagnostics go to the compile's context sink.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "gpu.h"
#include "passes.h"

static const kn_loc nv_loc = {"nvptx", 0, 0};

typedef struct nv_arch {
  const char *name;      /* "sm_90a": target name and LLVM CPU */
  const char *features;  /* the PTX ISA version LLVM writes */
  int smem_bytes;        /* the most shared memory a block may opt into */
} nv_arch;

/* sm_80 (A100): 163 KiB per block; sm_90 (H100/H200): 227 KiB (CUDA programming guide,
 * "Technical specifications per compute capability") */
static const nv_arch nv_archs[] = {
    {"sm_80", "+ptx70", 166912},
    {"sm_90a", "+ptx80", 232448},
};

static const nv_arch *nv_arch_get(const char *name) {
  for (size_t i = 0; i < sizeof nv_archs / sizeof nv_archs[0]; i++)
    if (name && !strcmp(nv_archs[i].name, name)) return &nv_archs[i];
  return NULL;
}

static void gpu_arch_of(const nv_arch *a, kn_gpu_arch *out) {
  memset(out, 0, sizeof *out);
  out->name = a->name;
  out->lanes = 32;
  out->lds_bytes = a->smem_bytes;
  out->amd = NULL;
  out->isa = KN_GPU_NVPTX;
}

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_init_llvm(void) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXAsmPrinter();
}

static LLVMTargetMachineRef nv_machine_for(const nv_arch *a, kn_diag *d) {
  pthread_once(&nv_once, nv_init_llvm);
  LLVMTargetRef target;
  char *err = NULL;
  const char *triple = "nvptx64-nvidia-cuda";
  if (LLVMGetTargetFromTriple(triple, &target, &err)) {
    kn_error(d, NULL, nv_loc, "LLVM has no target for %s: %s", triple, err ? err : "?");
    LLVMDisposeMessage(err);
    return NULL;
  }
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, triple, a->name, a->features,
                                                    LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                                    LLVMCodeModelDefault);
  if (!tm) kn_error(d, NULL, nv_loc, "cannot create a target machine for %s", a->name);
  return tm;
}

/* the plan's shared bytes, carried on the module from lower to load */
static void set_smem(LLVMModuleRef mod, int64_t bytes) {
  LLVMContextRef ctx = LLVMGetModuleContext(mod);
  LLVMMetadataRef md = LLVMValueAsMetadata(LLVMConstInt(LLVMInt64TypeInContext(ctx),
                                                        (unsigned long long)bytes, 0));
  LLVMAddNamedMetadataOperand(mod, "kiln.smem_bytes",
                              LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, &md, 1)));
}

static int64_t get_smem(LLVMModuleRef mod) {
  if (LLVMGetNamedMetadataNumOperands(mod, "kiln.smem_bytes") != 1) return 0;
  LLVMValueRef node;
  LLVMGetNamedMetadataOperands(mod, "kiln.smem_bytes", &node);
  LLVMValueRef c = LLVMGetOperand(node, 0);
  return c && LLVMIsAConstantInt(c) ? (int64_t)LLVMConstIntGetZExtValue(c) : 0;
}

/* PTX of an optimised module; malloc'd, NUL-terminated */
static char *emit_ptx(LLVMModuleRef mod, LLVMTargetMachineRef tm, size_t *size, kn_diag *d) {
  /* a call of anything but an intrinsic would be a libcall the NVPTX backend cannot select, and
   * LLVM reports that by aborting the process: refuse it here instead */
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (LLVMIsDeclaration(f) && !LLVMGetIntrinsicID(f) && LLVMGetFirstUse(f)) {
      size_t n;
      const char *name = LLVMGetValueName2(f, &n);
      kn_error(d, NULL, nv_loc, "internal: the NVPTX module calls '%.*s', which has no PTX "
               "lowering", (int)n, name);
      return NULL;
    }
  char *err = NULL;
  LLVMMemoryBufferRef buf = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &err, &buf)) {
    kn_error(d, NULL, nv_loc, "PTX emission failed: %s", err ? err : "?");
    LLVMDisposeMessage(err);
    return NULL;
  }
  size_t n = LLVMGetBufferSize(buf);
  char *ptx = malloc(n + 1);
  if (ptx) {
    memcpy(ptx, LLVMGetBufferStart(buf), n);
    ptx[n] = 0;
    *size = strlen(ptx);
  } else {
    kn_error(d, NULL, nv_loc, "out of memory");
  }
  LLVMDisposeMemoryBuffer(buf);
  return ptx;
}

/* ---- the kn_target functions ---- */

static int nv_lower(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
                    kn_diag *d) {
  const nv_arch *a = nv_arch_get(t->name);
  if (!a) return kn_error(d, NULL, nv_loc, "unknown NVIDIA target %s", t->name);
  kn_gpu_arch arch;
  gpu_arch_of(a, &arch);
  kn_layout_plan plan;
  int rc = kn_assign_layouts(k, &arch, &plan, d);
  if (!rc) rc = kn_plan_shared(&plan, d);
  if (!rc) rc = kn_lower_gpu(&plan, ctx, out, d);
  if (!rc) set_smem(*out, plan.lds_bytes);
  kn_layout_plan_free(&plan);
  return rc;
}

static LLVMTargetMachineRef nv_machine(const kn_target *t, kn_diag *d) {
  const nv_arch *a = nv_arch_get(t->name);
  if (!a) {
    kn_error(d, NULL, nv_loc, "unknown NVIDIA target %s", t->name);
    return NULL;
  }
  return nv_machine_for(a, d);
}

typedef struct nv_loaded {
  char *ptx;
  int64_t smem;
} nv_loaded;

static int nv_load(const kn_target *t, LLVMContextRef ctx, LLVMModuleRef mod,
                   const char *kernel_name, kn_loaded *out, kn_diag *d) {
  (void)kernel_name;
  memset(out, 0, sizeof *out);
  int rc = -1;
  nv_loaded *l = NULL;
  LLVMTargetMachineRef tm = nv_machine(t, d);
  if (tm) {
    size_t n = 0;
    int64_t smem = get_smem(mod);
    char *ptx = emit_ptx(mod, tm, &n, d);
    if (ptx && (l = calloc(1, sizeof *l))) {
      l->ptx = ptx;
      l->smem = smem;
      out->impl = l;
      rc = 0;
    } else {
      if (ptx) kn_error(d, NULL, nv_loc, "out of memory");
      free(ptx);
    }
    LLVMDisposeTargetMachine(tm);
  }
  LLVMDisposeModule(mod);
  kn_llvm_context_forget(ctx);
  LLVMContextDispose(ctx);
  return rc;
}

static void nv_unload(const kn_target *t, kn_loaded *l) {
  (void)t;
  if (!l || !l->impl) return;
  nv_loaded *n = l->impl;
  free(n->ptx);
  free(n);
  l->impl = NULL;
}

const char *kn_nvptx_loaded_ptx(const kn_loaded *l, int64_t *smem_bytes) {
  if (!l || !l->impl) return NULL;
  const nv_loaded *n = l->impl;
  if (smem_bytes) *smem_bytes = n->smem;
  return n->ptx;
}

static const kn_matrix_instr nv_matrix[] = {
    {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 16, 8, 16, KN_F16, KN_F16, KN_F32, 32},
    {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 16, 8, 16, KN_BF16, KN_BF16, KN_F32, 32},
};

#define NV_TARGET(n, f)                                                                        \
  {.name = n, .triple = "nvptx64-nvidia-cuda", .cpu = n, .features = f, .pointer_bits = 64,    \
   .vector_bits = 128, .matrix = nv_matrix, .nmatrix = 2, .lower = nv_lower,                   \
   .machine = nv_machine, .optimize = kn_target_optimize_o3,                                   \
   .emit_asm = kn_target_emit_asm, .load = nv_load, .unload = nv_unload}

const kn_target kn_target_sm_80 = NV_TARGET("sm_80", "+ptx70");
const kn_target kn_target_sm_90a = NV_TARGET("sm_90a", "+ptx80");

const kn_target *kn_nvptx_target_by_name(const char *name) {
  if (name && !strcmp(name, "sm_80")) return &kn_target_sm_80;
  if (name && !strcmp(name, "sm_90a")) return &kn_target_sm_90a;
  return NULL;
}

/* ---- one call: tile IR -> PTX ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int kn_nvptx_compile(const kn_module *src, const char *kernel, const char *arch_name,
                     bool keep_llvm, kn_nvptx_compiled *out, kn_diag *d) {
  memset(out, 0, sizeof *out);
  const nv_arch *a = nv_arch_get(arch_name);
  if (!a)
    return kn_error(d, NULL, nv_loc, "unknown NVIDIA target '%s' (sm_80, sm_90a)",
                    arch_name ? arch_name : "");
  double t0 = now_ms();
  kn_module *m = kn_module_clone(src);
  int rc = -1;
  kn_layout_plan plan = {0};
  LLVMContextRef ctx = NULL;
  LLVMModuleRef mod = NULL;
  LLVMTargetMachineRef tm = NULL;
  if (kn_verify(m, d)) goto done;
  kn_func *k = kn_module_find(m, kernel);
  if (!k || !k->is_kernel) {
    kn_error(d, m, nv_loc, "no kernel named '@%s' in the module", kernel);
    goto done;
  }
  kn_fold(m);
  if (kn_inline(m, d)) goto done;
  kn_fold(m);
  kn_gpu_arch arch;
  gpu_arch_of(a, &arch);
  if (kn_assign_layouts(k, &arch, &plan, d)) goto done;
  if (kn_plan_shared(&plan, d)) goto done;
  out->layout_text = kn_layout_plan_format(&plan);
  out->smem_bytes = plan.lds_bytes;
  out->threads = 32 * plan.warps;
  ctx = kn_llvm_context_new();
  if (kn_lower_gpu(&plan, ctx, &mod, d)) goto done;
  if (keep_llvm) {
    char *text = LLVMPrintModuleToString(mod);
    out->llvm_text = text ? strdup(text) : NULL;
    LLVMDisposeMessage(text);
  }
  if (kn_llvm_verify(mod, d)) goto done;
  out->ms_lower = now_ms() - t0;
  if (!(tm = nv_machine_for(a, d))) goto done;
  double t1 = now_ms();
  if (kn_llvm_run_passes(mod, tm, "default<O3>", d)) goto done;
  double t2 = now_ms();
  out->ms_optimize = t2 - t1;
  if (!(out->ptx = emit_ptx(mod, tm, &out->ptx_size, d))) goto done;
  out->ms_codegen = now_ms() - t2;
  rc = 0;
done:
  kn_layout_plan_free(&plan);
  if (tm) LLVMDisposeTargetMachine(tm);
  if (mod) LLVMDisposeModule(mod);
  if (ctx) {
    kn_llvm_context_forget(ctx);
    LLVMContextDispose(ctx);
  }
  kn_module_free(m);
  if (rc) kn_nvptx_compiled_free(out);
  return rc;
}

void kn_nvptx_compiled_free(kn_nvptx_compiled *c) {
  if (!c) return;
  free(c->ptx);
  free(c->layout_text);
  free(c->llvm_text);
  memset(c, 0, sizeof *c);
}
