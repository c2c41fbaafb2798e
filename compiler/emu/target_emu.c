/* target_emu.c — the gfx90a-emu and gfx942-emu kn_targets.
 *
 * lower = the real AMDGPU target's lower (compiler/gpu: layouts, LDS plan, lowering — unchanged)
 * followed by kn_emu_rewrite (rewrite.c), which turns the amdgcn module into a host module; the
 * rest is the host target's machinery: the host target machine, default<O3>, host assembly for
 * dumps, and the ORC JIT (kn_jit_load finds kiln_<name> and kiln_<name>.status as for the host
 * target).  The compiled kernel is run with kn_emu_run (runtime.c).
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

typedef struct emu_target {
  kn_target t;             /* first: the pipeline passes &t back to us */
  const kn_target *real;   /* compiler/gpu's gfx90a / gfx942 */
  const char *arch;
  unsigned breaks;
} emu_target;

static int emu_lower(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
                     kn_diag *d) {
  const emu_target *e = (const emu_target *)t;
  if (e->real->lower(e->real, k, ctx, out, d)) return -1;
  const kn_amdgpu_target *a = kn_amdgpu_target_by_name(e->arch);
  if (kn_emu_rewrite(*out, e->arch, a ? a->lds_bytes : 65536, e->breaks, d)) {
    LLVMDisposeModule(*out);
    *out = NULL;
    return -1;
  }
  return 0;
}

static LLVMTargetMachineRef emu_machine(const kn_target *t, kn_diag *d) {
  (void)t;
  return kn_llvm_host_machine(d);
}

static int emu_load(const kn_target *t, LLVMContextRef ctx, LLVMModuleRef mod,
                    const char *kernel_name, kn_loaded *out, kn_diag *d) {
  (void)t;
  return kn_jit_load(ctx, mod, kernel_name, out, d);
}

static void emu_unload(const kn_target *t, kn_loaded *l) {
  (void)t;
  kn_jit_unload(l);
}

#define EMU_TARGET(nm, chip, realt, br)                                                          \
  {.t = {.name = nm, .triple = NULL, .cpu = NULL, .features = NULL, .pointer_bits = 64,          \
         .vector_bits = 128, .lower = emu_lower, .machine = emu_machine,                          \
         .optimize = kn_target_optimize_o3, .emit_asm = kn_target_emit_asm,                     \
         .load = emu_load, .unload = emu_unload},                                                 \
   .real = realt, .arch = chip, .breaks = br}

static emu_target emu_targets[2] = {
    EMU_TARGET("gfx90a-emu", "gfx90a", &kn_target_gfx90a, 0),
    EMU_TARGET("gfx942-emu", "gfx942", &kn_target_gfx942, 0),
};
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* the matrix instruction tables are the real targets' (not constant expressions in C) */
static void fill_tables(void) {
  for (int i = 0; i < 2; i++) {
    emu_targets[i].t.matrix = emu_targets[i].real->matrix;
    emu_targets[i].t.nmatrix = emu_targets[i].real->nmatrix;
  }
}

static int index_of(const char *name) {
  if (name && !strcmp(name, "gfx90a-emu")) return 0;
  if (name && !strcmp(name, "gfx942-emu")) return 1;
  return -1;
}

const kn_target *kn_emu_target(const char *name) {
  int i = index_of(name);
  if (i < 0) return NULL;
  pthread_once(&tables_once, fill_tables);
  return &emu_targets[i].t;
}

const kn_target *kn_emu_target_broken(const char *name, unsigned breaks) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  static emu_target *broken[2][KN_EMU_BREAK_ALL + 1];
  int i = index_of(name);
  if (i < 0) return NULL;
  breaks &= KN_EMU_BREAK_ALL;
  if (!breaks) return kn_emu_target(name);
  pthread_once(&tables_once, fill_tables);
  pthread_mutex_lock(&mu);
  if (!broken[i][breaks] && (broken[i][breaks] = malloc(sizeof(emu_target)))) {
    *broken[i][breaks] = emu_targets[i];
    broken[i][breaks]->breaks = breaks;
  }
  emu_target *e = broken[i][breaks];
  pthread_mutex_unlock(&mu);
  return e ? &e->t : NULL;
}

/* ---- hand-written LLVM IR kernels ---- */

struct kn_emu_ir_kernel {
  kn_loaded loaded;
};

static const kn_loc ir_loc = {"<llvm ir>", 0, 0};

int kn_emu_compile_ir(const char *llvm_ir, const char *arch, unsigned breaks, kn_emu_ir_kernel **out,
                      kn_diag *d) {
  *out = NULL;
  const kn_amdgpu_target *a = kn_amdgpu_target_by_name(arch);
  if (!a) return kn_error(d, NULL, ir_loc, "unknown AMDGPU target '%s'", arch ? arch : "");
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
  int rc = kn_emu_rewrite(mod, a->name, a->lds_bytes, breaks, d);
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
