/* object.c — the host object path: a kernel compiled to a relocatable object in memory, and an
 * object loaded into a fresh LLJIT.  This is what lets the JIT service cache host code on disk:
 * the bytes that are stored are exactly the bytes that are run, whether they were just compiled
 * or read back from the cache.
 *
 * Compiling reuses kn_compile() unchanged, so the pass list stays in one place (pipeline.c): the
 * compile is given a copy of the host target whose `lower` also measures the tile storage of the
 * lowered kernel (the resource the autotuner prunes on for the host) and whose `load` runs
 * codegen to an object in memory instead of JIT-ing.  The copy is a per-call struct with the
 * kn_target as its first member, so the hooks find their call's output without globals and
 * concurrent compiles share nothing.
 *
 * Code model.  The object is emitted position-independent with the small code model: JITLink
 * places the code anywhere in the address space, so absolute 32-bit relocations (what non-PIC
 * code uses for constant pools) could not be resolved; calls to libm and kiln's helpers go
 * through stubs JITLink makes.  The target machine is otherwise the host's (CPU and features),
 * like kn_llvm_host_machine(): the object runs only on a CPU with the same features, which is why
 * kn_object_target_id() (part of every cache key) names them.
 *
 * Loading defines, through jit.c's kn_jit_define_helpers(), the same absolute symbols as a JIT
 * compile (kiln's numeric helpers and the libm/libc functions LLVM may call) in the new JIT.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "device.h"
#include "host_run.h"
#include "pipeline.h"
#include "target.h"

static const kn_loc no_loc = {0};

/* ---- compiling to an object ---- */

typedef struct object_target {
  kn_target t;          /* first: the pipeline calls the hooks with &t */
  const kn_target *base;
  kn_object *out;
} object_target;

/* the bytes of the kernel function's stack slots (tiles and scalar slots), before optimisation:
 * an upper bound of the stack a program needs, which is what the host lowering limits */
static uint64_t measure_tile_bytes(LLVMModuleRef mod, const char *kernel_name) {
  char sym[300];
  snprintf(sym, sizeof sym, "kiln_%s", kernel_name);
  LLVMValueRef f = LLVMGetNamedFunction(mod, sym);
  if (!f) return 0;
  LLVMTargetDataRef td = LLVMGetModuleDataLayout(mod);
  uint64_t total = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i))
      if (LLVMIsAAllocaInst(i)) total += LLVMABISizeOfType(td, LLVMGetAllocatedType(i));
  return total;
}

static int object_lower(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
                        kn_diag *d) {
  const object_target *ot = (const object_target *)t;
  if (ot->base->lower(ot->base, k, ctx, out, d)) return -1;
  /* the lowered module has no data layout yet; sizes need the host's */
  LLVMTargetMachineRef tm = ot->base->machine(ot->base, d);
  if (!tm) return -1;
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  char *layout = LLVMCopyStringRepOfTargetData(td);
  LLVMSetDataLayout(*out, layout);
  LLVMDisposeMessage(layout);
  LLVMDisposeTargetData(td);
  LLVMDisposeTargetMachine(tm);
  ot->out->tile_bytes = measure_tile_bytes(*out, k->name);
  return 0;
}

static LLVMTargetMachineRef object_machine_of(const kn_target *t, kn_diag *d) {
  const object_target *ot = (const object_target *)t;
  return ot->base->machine(ot->base, d);
}

static int object_optimize(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                           kn_diag *d) {
  const object_target *ot = (const object_target *)t;
  return ot->base->optimize(ot->base, mod, tm, d);
}

static int object_emit_asm(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                           FILE *out, kn_diag *d) {
  const object_target *ot = (const object_target *)t;
  return ot->base->emit_asm(ot->base, mod, tm, out, d);
}

static int object_load_hook(const kn_target *t, LLVMContextRef ctx, LLVMModuleRef mod,
                            const char *kernel_name, kn_loaded *out, kn_diag *d) {
  const object_target *ot = (const object_target *)t;
  int rc = -1;
  /* objects are linked at any address later (cache loads): PIC, small code model */
  LLVMTargetMachineRef tm = kn_llvm_host_machine_with(LLVMRelocPIC, LLVMCodeModelSmall, d);
  if (tm) {
    char *err = NULL;
    LLVMMemoryBufferRef buf = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &err, &buf)) {
      kn_error(d, NULL, no_loc, "object emission failed: %s%s%s", err ? err : "?",
               *kn_llvm_context_diag(ctx) ? "; " : "", kn_llvm_context_diag(ctx));
      LLVMDisposeMessage(err);
    } else {
      size_t n = LLVMGetBufferSize(buf);
      void *bytes = malloc(n ? n : 1);
      if (!bytes) {
        kn_error(d, NULL, no_loc, "out of memory");
      } else {
        memcpy(bytes, LLVMGetBufferStart(buf), n);
        ot->out->data = bytes;
        ot->out->size = n;
        snprintf(ot->out->symbol, sizeof ot->out->symbol, "kiln_%s", kernel_name);
        rc = 0;
      }
      LLVMDisposeMemoryBuffer(buf);
    }
    LLVMDisposeTargetMachine(tm);
  }
  /* the hook owns ctx and mod, also on failure */
  LLVMDisposeModule(mod);
  kn_llvm_context_forget(ctx);
  LLVMContextDispose(ctx);
  memset(out, 0, sizeof *out);
  return rc;
}

static void object_unload_hook(const kn_target *t, kn_loaded *l) {
  (void)t;
  memset(l, 0, sizeof *l);
}

int kn_compile_object(const kn_module *m, const char *name, const kn_target *t,
                      const kn_compile_options *opts, kn_object *out, kn_diag *d) {
  memset(out, 0, sizeof *out);
  if (t != kn_host_target())
    return kn_error(d, NULL, no_loc, "objects are only made for the host target so far");
  if (opts && opts->check_bounds)
    return kn_error(d, NULL, no_loc,
                    "host objects are compiled unchecked (check_bounds is for kn_compile)");
  object_target ot = {.t = *t, .base = t, .out = out};
  ot.t.lower = object_lower;
  ot.t.machine = object_machine_of;
  ot.t.optimize = object_optimize;
  ot.t.emit_asm = object_emit_asm;
  ot.t.load = object_load_hook;
  ot.t.unload = object_unload_hook;
  kn_kernel *k = NULL;
  if (kn_compile(m, name, &ot.t, opts, &k, d)) {
    kn_object_free(out);
    return -1;
  }
  kn_kernel_free(k); /* holds nothing: the object is in *out */
  return 0;
}

void kn_object_free(kn_object *o) {
  if (!o) return;
  free(o->data);
  o->data = NULL;
  o->size = 0;
}

int kn_object_target_id(const kn_target *t, char *out, size_t size) {
  if (t != kn_host_target()) return snprintf(out, size, "%s", t->name) < (int)size ? 0 : -1;
  kn_llvm_init();
  char *triple = LLVMGetDefaultTargetTriple();
  char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
  unsigned major, minor, patch;
  LLVMGetVersion(&major, &minor, &patch);
  int n = snprintf(out, size, "host;%s;%s;%s;pic-small;llvm-%u.%u.%u", triple, cpu, features,
                   major, minor, patch);
  LLVMDisposeMessage(triple);
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(features);
  return n >= 0 && (size_t)n < size ? 0 : -1;
}

int kn_host_cpu_name(char *out, size_t size) {
  kn_llvm_init();
  char *cpu = LLVMGetHostCPUName();
  int n = snprintf(out, size, "%s", cpu ? cpu : "unknown");
  LLVMDisposeMessage(cpu);
  return n >= 0 && (size_t)n < size ? 0 : -1;
}

/* ---- loading an object ---- */

struct kn_host_object {
  LLVMOrcLLJITRef jit;
  kn_host_kernel_fn entry;
  int *status;
  char symbol[160];
};

int kn_object_load(const kn_target *t, const void *data, size_t size, const char *symbol,
                   kn_host_object **out, kn_diag *d) {
  *out = NULL;
  if (t != kn_host_target())
    return kn_error(d, NULL, no_loc, "objects are only loaded for the host target so far");
  kn_host_object *h = calloc(1, sizeof *h);
  if (!h) return kn_error(d, NULL, no_loc, "out of memory");
  snprintf(h->symbol, sizeof h->symbol, "%s", symbol);
  /* objects are linked at any address later (cache loads): PIC, small code model */
  LLVMTargetMachineRef tm = kn_llvm_host_machine_with(LLVMRelocPIC, LLVMCodeModelSmall, d);
  if (!tm) {
    free(h);
    return -1;
  }
  LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
  LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(
      jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
  LLVMErrorRef err = LLVMOrcCreateLLJIT(&h->jit, jb);
  if (err) {
    free(h);
    return kn_llvm_error(d, err, "cannot create the JIT");
  }
  if (kn_jit_define_helpers(h->jit, d)) goto fail;
  LLVMMemoryBufferRef buf =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(data, size, "kiln-host-object");
  err = LLVMOrcLLJITAddObjectFile(h->jit, LLVMOrcLLJITGetMainJITDylib(h->jit), buf);
  if (err) {
    kn_llvm_error(d, err, "cannot add the object to the JIT");
    goto fail;
  }
  LLVMOrcExecutorAddress entry = 0, status = 0;
  if ((err = LLVMOrcLLJITLookup(h->jit, &entry, symbol))) {
    kn_llvm_error(d, err, "object link failed");
    goto fail;
  }
  char sym[200];
  snprintf(sym, sizeof sym, "%s.status", symbol);
  if ((err = LLVMOrcLLJITLookup(h->jit, &status, sym))) {
    kn_llvm_error(d, err, "object link failed (status word)");
    goto fail;
  }
  h->entry = (kn_host_kernel_fn)(uintptr_t)entry;
  h->status = (int *)(uintptr_t)status;
  *out = h;
  return 0;
fail:
  kn_object_unload(h);
  return -1;
}

void kn_object_unload(kn_host_object *h) {
  if (!h) return;
  if (h->jit) {
    LLVMErrorRef err = LLVMOrcDisposeLLJIT(h->jit);
    if (err) LLVMConsumeError(err);
  }
  free(h);
}

int kn_object_run_host(kn_host_object *h, const kn_argval *args, const int grid[3], kn_diag *d) {
  if (!h || !h->entry) return kn_error(d, NULL, no_loc, "object is not loaded");
  /* the caller serialises launches of one object: its status word is shared */
  return kn_host_run(h->symbol, h->entry, h->status, args, 0, grid, false, NULL, 0, d);
}
