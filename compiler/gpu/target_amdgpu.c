/* target_amdgpu.c — the steps of the AMDGPU targets (gfx90a, gfx942, gfx950: the registry's
 * AMDGPU entries, compiler/arch.h).
 *
 * lower = lower_gpu.c on the pipeline's layout plan, then compiler/amdgpu's prepare (a kernel is
 * defined, only the matrix intrinsics of the chip's table are called, code object v5 pinned);
 * machine = compiler/amdgpu's target machine for the chip (PIC: code objects are linked
 * -shared); codegen = a relocatable object, with LLVM's diagnostics captured; link = lld in this
 * process, giving the code object.  No AMD GPU is present on any machine kiln is built on here,
 * so there is no load: running a code object is the HIP runtime's business, or the emulated
 * target's (docs/emu.md).
 */
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "amdgpu.h"
#include "gpu.h"

static const kn_loc tgt_loc = {"amdgpu", 0, 0};

static int amd_lower(const kn_target *t, kn_func *k, const kn_layout_plan *plan,
                     LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d) {
  (void)k;
  if (!plan) return kn_error(d, NULL, tgt_loc, "internal: %s lowered without a layout plan", t->name);
  kn_amdgpu_init();
  if (kn_lower_gpu(plan, ctx, out, d)) return -1;
  return kn_amdgpu_prepare(t->arch, *out, d);
}

static LLVMTargetMachineRef amd_machine(const kn_target *t, kn_diag *d) {
  return kn_amdgpu_machine(t->arch, NULL, d);
}

static int amd_codegen(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                       kn_artifact *a, kn_diag *d) {
  (void)t;
  return kn_amdgpu_emit(mod, tm, false, &a->data, &a->size, d);
}

/* relocatable object -> code object (ET_DYN), in place */
static int amd_link(const kn_target *t, kn_artifact *a, kn_diag *d) {
  char err[1024] = "";
  void *co = NULL;
  size_t n = 0;
  if (kn_amdgpu_link(a->data, a->size, &co, &n, err, sizeof err))
    return kn_error(d, NULL, tgt_loc, "linking the %s code object failed: %s", t->name, err);
  free(a->data);
  a->data = co;
  a->size = n;
  return 0;
}

const kn_target kn_target_amdgpu_steps = {
    .artifact = KN_ARTIFACT_CODE_OBJECT,
    .passes = kn_amdgpu_passes,
    .lower = amd_lower,
    .machine = amd_machine,
    .codegen = amd_codegen,
    .link = amd_link,
};
