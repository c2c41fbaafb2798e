/* target_nvptx.c — the steps of the NVIDIA targets (sm_80, sm_90a: the registry's NVPTX entries,
 * compiler/arch.h).
 *
 * The NVIDIA targets share everything above the leaf operations with AMDGPU: the layout pass
 * picks mma.sync m16n8k16 (the registry's table; layout.c has its lane tables) for warps of 32
 * lanes, the shared-memory plan is the same, and lower_gpu.c emits the kernel through its NVPTX
 * leaf table (ids from llvm.nvvm.read.ptx.sreg.*, bar.sync, shfl.sync.bfly, mma, a ptx_kernel
 * with .reqntid, dynamic shared memory).  LLVM's NVPTX backend writes the PTX: triple
 * nvptx64-nvidia-cuda, CPU sm_80 (PTX ISA 7.0) or sm_90a (PTX ISA 8.0).  sm_90a uses the same
 * mma.sync path so far (wgmma and TMA are later steps).
 *
 * The artefact is the PTX text: the CUDA driver JIT-compiles it when runtime/cuda_device.h loads
 * it, or ptxas turns it into a cubin offline (compiler/ptxas.h).  No NVIDIA GPU is needed to
 * compile.  The kernel takes its shared memory as dynamic shared memory: launch it with the
 * artefact's shared_bytes and exactly its threads per block.
 *
 * Nothing here prints or exits; LLVM's diagnostics go to the compile's context sink.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "gpu.h"

static const kn_loc nv_loc = {"nvptx", 0, 0};

static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_init_llvm(void) {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXAsmPrinter();
}

static int nv_lower(const kn_target *t, kn_func *k, const kn_layout_plan *plan,
                    LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d) {
  (void)k;
  if (!plan) return kn_error(d, NULL, nv_loc, "internal: %s lowered without a layout plan", t->name);
  return kn_lower_gpu(plan, ctx, out, d);
}

static LLVMTargetMachineRef nv_machine(const kn_target *t, kn_diag *d) {
  pthread_once(&nv_once, nv_init_llvm);
  const kn_arch *a = t->arch;
  LLVMTargetRef target;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(a->triple, &target, &err)) {
    kn_error(d, NULL, nv_loc, "LLVM has no target for %s: %s", a->triple, err ? err : "?");
    LLVMDisposeMessage(err);
    return NULL;
  }
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, a->triple, a->name, a->features,
                                                    LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                                    LLVMCodeModelDefault);
  if (!tm) kn_error(d, NULL, nv_loc, "cannot create a target machine for %s", a->name);
  return tm;
}

/* PTX of the optimised module, NUL-terminated, into the artefact */
static int nv_codegen(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                      kn_artifact *a, kn_diag *d) {
  (void)t;
  /* a call of anything but an intrinsic would be a libcall the NVPTX backend cannot select, and
   * LLVM reports that by aborting the process: refuse it here instead */
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (LLVMIsDeclaration(f) && !LLVMGetIntrinsicID(f) && LLVMGetFirstUse(f)) {
      size_t n;
      const char *name = LLVMGetValueName2(f, &n);
      return kn_error(d, NULL, nv_loc, "internal: the NVPTX module calls '%.*s', which has no "
                      "PTX lowering", (int)n, name);
    }
  char *err = NULL;
  LLVMMemoryBufferRef buf = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &err, &buf)) {
    kn_error(d, NULL, nv_loc, "PTX emission failed: %s", err ? err : "?");
    LLVMDisposeMessage(err);
    return -1;
  }
  size_t n = LLVMGetBufferSize(buf);
  char *ptx = malloc(n + 1);
  if (!ptx) {
    LLVMDisposeMemoryBuffer(buf);
    return kn_error(d, NULL, nv_loc, "out of memory");
  }
  memcpy(ptx, LLVMGetBufferStart(buf), n);
  ptx[n] = 0;
  LLVMDisposeMemoryBuffer(buf);
  a->data = ptx;
  a->size = strlen(ptx);
  return 0;
}

const kn_target kn_target_nvptx_steps = {
    .artifact = KN_ARTIFACT_PTX,
    .lower = nv_lower,
    .machine = nv_machine,
    .codegen = nv_codegen,
};
