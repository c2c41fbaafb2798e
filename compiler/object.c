/* object.c — the host object path: a kernel compiled to a relocatable object in memory, and an
 * object loaded into a fresh LLJIT.  This is what lets the JIT service cache host code on disk:
 * the bytes that are stored are exactly the bytes that are run, whether they were just compiled
 * or read back from the cache.
 *
 * The host target's codegen step (kn_host_codegen) writes that object, and its load step
 * (kn_host_load) links it, so every host kernel — compiled by the pipeline just now, or read back
 * from the API's cache — runs through the same object path.  The emulated AMDGPU targets use
 * the same two steps on their rewritten module.
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
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
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

static char llvm_version[32];
static pthread_once_t llvm_version_once = PTHREAD_ONCE_INIT;

static void format_llvm_version(void) {
  unsigned major, minor, patch;
  LLVMGetVersion(&major, &minor, &patch);
  snprintf(llvm_version, sizeof llvm_version, "%u.%u.%u", major, minor, patch);
}

const char *kn_llvm_version(void) {
  pthread_once(&llvm_version_once, format_llvm_version);
  return llvm_version;
}

int kn_object_target_id(const kn_target *t, char *out, size_t size) {
  if (t->arch->isa != KN_ISA_HOST || t->emulated)
    return kn_arch_code_id(t->name, t->arch, kn_llvm_version(), out, size);
  kn_llvm_init();
  char *triple = LLVMGetDefaultTargetTriple();
  char *cpu = LLVMGetHostCPUName(), *features = LLVMGetHostCPUFeatures();
  int n = snprintf(out, size, "host;%s;%s;%s;pic-small;llvm-%s", triple, cpu, features,
                   kn_llvm_version());
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

int kn_object_load(const void *data, size_t size, const char *symbol, kn_host_object **out,
                   kn_diag *d) {
  *out = NULL;
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

/* ---- the host target's codegen and load ---- */

int kn_host_codegen(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                    kn_artifact *a, kn_diag *d) {
  (void)t;
  char *err = NULL;
  LLVMMemoryBufferRef buf = NULL;
  if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &err, &buf)) {
    LLVMContextRef ctx = LLVMGetModuleContext(mod);
    kn_error(d, NULL, no_loc, "object emission failed: %s%s%s", err ? err : "?",
             *kn_llvm_context_diag(ctx) ? "; " : "", kn_llvm_context_diag(ctx));
    LLVMDisposeMessage(err);
    return -1;
  }
  size_t n = LLVMGetBufferSize(buf);
  a->data = malloc(n ? n : 1);
  if (!a->data) {
    LLVMDisposeMemoryBuffer(buf);
    return kn_error(d, NULL, no_loc, "out of memory");
  }
  memcpy(a->data, LLVMGetBufferStart(buf), n);
  a->size = n;
  LLVMDisposeMemoryBuffer(buf);
  return 0;
}

int kn_host_load(const kn_target *t, const kn_artifact *a, kn_loaded *out, kn_diag *d) {
  (void)t;
  memset(out, 0, sizeof *out);
  kn_host_object *h;
  if (kn_object_load(a->data, a->size, a->symbol, &h, d)) return -1;
  out->impl = h;
  out->entry = (void *)h->entry;
  out->status = h->status;
  return 0;
}

void kn_host_unload(const kn_target *t, kn_loaded *l) {
  (void)t;
  kn_object_unload(l ? l->impl : NULL);
  if (l) memset(l, 0, sizeof *l);
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
