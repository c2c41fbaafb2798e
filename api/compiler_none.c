/* compiler_none.c — api/compiler.h's table for libkiln_rt, the API without a compiler: no LLVM,
 * no lld, nothing of compiler/ but the registry (kiln_arch, pure data).  A request whose code is
 * not in the cache fails here with KN_E_UNSUPPORTED and a message that says why and what to do;
 * the API turns it into KILN_ERR_UNSUPPORTED.  The GPU targets' identity is the registry's data
 * and the LLVM version of the build (KILN_LLVM_VERSION, set by api/CMakeLists.txt from the LLVM
 * that libkiln of the same build links), so this library finds what libkiln stored.
 */
#include <stdio.h>

#include "compiler.h"

#ifndef KILN_LLVM_VERSION
#error "KILN_LLVM_VERSION (the LLVM version of the build) must be defined"
#endif

static const char no_compiler[] =
    "this library (libkiln_rt) has no compiler; link libkiln, or fill the cache with a kiln "
    "that compiles (kiln run / kiln tune, or an application linked with libkiln)";
static const kn_loc no_loc = {0};

static const char *llvm_version(void) { return KILN_LLVM_VERSION; }

static int compile(const kn_module *m, const char *name, const kn_arch *arch, kn_artifact *out,
                   kn_diag *d) {
  (void)m, (void)name, (void)arch, (void)out;
  return kn_error(d, NULL, no_loc, "%s", no_compiler);
}

static int target_id(const kn_arch *arch, char *out, size_t size) {
  /* the host's identity (triple, CPU, features) is LLVM's to tell; no host code runs here */
  if (arch->isa == KN_ISA_HOST) return snprintf(out, size, "host;no-compiler") < 0 ? -1 : 0;
  return kn_arch_code_id(arch->name, arch, KILN_LLVM_VERSION, out, size);
}

static int host_cpu_name(char *out, size_t size) {
  (void)out, (void)size;
  return -1;
}

static int host_load(const void *data, size_t size, const char *symbol, kn_host_object **out,
                     kn_diag *d) {
  (void)data, (void)size, (void)symbol;
  *out = NULL;
  return kn_error(d, NULL, no_loc, "host kernels run in LLVM's ORC JIT: %s", no_compiler);
}

static int host_run(kn_host_object *h, const kn_argval *args, const int grid[3], kn_diag *d) {
  (void)h, (void)args, (void)grid;
  return kn_error(d, NULL, no_loc, "%s", no_compiler);
}

static void host_unload(kn_host_object *h) { (void)h; }

const api_compiler api_the_compiler = {
    .present = false,
    .library = "libkiln_rt",
    .llvm_version = llvm_version,
    .compile = compile,
    .target_id = target_id,
    .host_cpu_name = host_cpu_name,
    .host_load = host_load,
    .host_run = host_run,
    .host_unload = host_unload,
};
