/* compiler_llvm.c — api/compiler.h's table for libkiln: the API's compile and host-object calls
 * go to kiln's compiler (compiler/pipeline.h, compiler/target.h).  The one file of api/ that
 * links kiln_compiler; libkiln_rt links api/compiler_none.c in its place.  Each entry is the
 * compiler's own function, with the registry's architecture turned into its compile target.
 */
#include "compiler.h"
#include "target.h"

static int compile(const kn_module *m, const char *name, const kn_arch *arch, kn_artifact *out,
                   kn_diag *d) {
  return kn_compile_artifact(m, name, kn_target_of_arch(arch), NULL, out, d);
}

static int target_id(const kn_arch *arch, char *out, size_t size) {
  const kn_target *t = kn_target_of_arch(arch);
  return t ? kn_object_target_id(t, out, size) : -1;
}

const api_compiler api_the_compiler = {
    .present = true,
    .library = "libkiln",
    .llvm_version = kn_llvm_version,
    .compile = compile,
    .target_id = target_id,
    .host_cpu_name = kn_host_cpu_name,
    .host_load = kn_object_load,
    .host_run = kn_object_run_host,
    .host_unload = kn_object_unload,
};
