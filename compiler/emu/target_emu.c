/* target_emu.c — the steps of the emulated AMDGPU targets ("<chip>-emu" for every AMDGPU entry
 * of the registry the emulator can run: gfx90a-emu, gfx942-emu, gfx950-emu).
 *
 * The pipeline runs the chip's layout pass and shared-memory plan as for the real target; lower
 * = the AMDGPU target's lower (compiler/gpu, unchanged) followed by kn_emu_rewrite (rewrite.c),
 * which turns the amdgcn module into a host module; the rest is the host target's machinery:
 * the host target machine, default<O3>, host assembly for dumps, a host object and its load
 * (kiln_<name> and kiln_<name>.status as for the host target).  The compiled kernel is run with
 * kn_emu_run (runtime.c).
 *
 * A target carries the test-only breaks (KN_EMU_BREAK_*) it applies: kn_emu_target_broken makes
 * one per (chip, breaks) on demand and keeps it for the life of the process (targets are
 * compared and stored by address elsewhere, so they must not move or go away).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>

#include "emu_internal.h"
#include "gpu.h"
#include "target.h"

/* lower: the AMDGPU target's lower (lower_gpu.c on the AMD plan, prepare), then the rewrite that
 * routes every leaf operation to the emulator's runtime and retargets the module to the host */
static int emu_lower(const kn_target *t, kn_func *k, const kn_layout_plan *plan,
                     LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d) {
  if (kn_target_amdgpu_steps.lower(t, k, plan, ctx, out, d)) return -1;
  if (kn_emu_rewrite(*out, t->arch->name, (int)t->arch->shared_bytes, t->breaks, d)) {
    LLVMDisposeModule(*out);
    *out = NULL;
    return -1;
  }
  return 0;
}

/* the rewritten module is host code: the host's machine, codegen and load */
const kn_target kn_target_emu_steps = {
    .artifact = KN_ARTIFACT_HOST_OBJECT,
    .emulated = true,
    .lower = emu_lower,
    .machine = NULL, /* targets.c: the host target's */
    .codegen = kn_host_codegen,
    .load = kn_host_load,
    .unload = kn_host_unload,
};

const kn_target *kn_emu_target(const char *name) {
  const kn_target *t = kn_target_get(name);
  return t && t->emulated ? t : NULL;
}

/* the broken copies made so far (never freed: targets are compared and kept by address) */
typedef struct broken_target {
  kn_target t;
  const kn_target *base;
  struct broken_target *next;
} broken_target;

const kn_target *kn_emu_target_broken(const char *name, unsigned breaks) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static broken_target *made;
  const kn_target *base = kn_emu_target(name);
  breaks &= KN_EMU_BREAK_ALL;
  if (!base || !breaks) return base;
  pthread_mutex_lock(&mu);
  broken_target *b = made;
  while (b && !(b->base == base && b->t.breaks == breaks)) b = b->next;
  if (!b && (b = malloc(sizeof *b))) {
    b->t = *base;
    b->t.breaks = breaks;
    b->base = base;
    b->next = made;
    made = b;
  }
  pthread_mutex_unlock(&mu);
  return b ? &b->t : NULL;
}

/* ---- hand-written LLVM IR kernels ---- */

struct kn_emu_ir_kernel {
  kn_loaded loaded;
};

static const kn_loc ir_loc = {"<llvm ir>", 0, 0};

int kn_emu_compile_ir(const char *llvm_ir, const char *arch, unsigned breaks, kn_emu_ir_kernel **out,
                      kn_diag *d) {
  *out = NULL;
  const kn_arch *a = kn_arch_get(arch);
  if (!a || a->isa != KN_ISA_AMDGPU)
    return kn_error(d, NULL, ir_loc, "unknown AMDGPU target '%s'", arch ? arch : "");
  LLVMContextRef ctx = kn_llvm_context_new();
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(llvm_ir, strlen(llvm_ir), "ir");
  LLVMModuleRef mod = NULL;
  char *msg = NULL;
  if (LLVMParseIRInContext(ctx, buf, &mod, &msg)) {  /* takes the buffer */
    kn_error(d, NULL, ir_loc, "cannot parse the LLVM IR: %s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    kn_llvm_context_forget(ctx);
    LLVMContextDispose(ctx);
    return -1;
  }
  char name[256] = "";
  for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
    if (LLVMCountBasicBlocks(f) && LLVMGetFunctionCallConv(f) == LLVMAMDGPUKERNELCallConv) {
      size_t n;
      const char *s = LLVMGetValueName2(f, &n);
      snprintf(name, sizeof name, "%.*s", (int)n, s);
    }
  LLVMTargetMachineRef tm = NULL;
  int rc = kn_emu_rewrite(mod, a->name, (int)a->shared_bytes, breaks, d);
  if (!rc) rc = kn_llvm_verify(mod, d);
  if (!rc) rc = !(tm = kn_llvm_host_machine(d));
  if (!rc) rc = kn_llvm_run_passes(mod, tm, "default<O3>", d);
  if (tm) LLVMDisposeTargetMachine(tm);
  kn_emu_ir_kernel *k = rc ? NULL : calloc(1, sizeof *k);
  if (rc || !k) {
    LLVMDisposeModule(mod);
    kn_llvm_context_forget(ctx);
    LLVMContextDispose(ctx);
    return rc ? -1 : kn_error(d, NULL, ir_loc, "out of memory");
  }
  if (kn_jit_load(ctx, mod, name, &k->loaded, d)) {  /* takes ctx and mod */
    free(k);
    return -1;
  }
  *out = k;
  return 0;
}

int kn_emu_run_ir(kn_emu_ir_kernel *k, const kn_argval *args, const int grid[3],
                  const kn_region *regions, int nregions, const kn_emu_options *opt, kn_diag *d) {
  return kn_emu_run_entry(k ? k->loaded.entry : NULL, args, grid, regions, nregions, opt, d);
}

void kn_emu_ir_kernel_free(kn_emu_ir_kernel *k) {
  if (!k) return;
  kn_jit_unload(&k->loaded);
  free(k);
}
