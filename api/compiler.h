/* compiler.h — the one door between the public API and kiln's compiler.
 *
 * The public API's sources are the same in both libraries kiln builds: libkiln (the API plus
 * the compiler, hence LLVM and lld) and libkiln_rt (the API alone: no LLVM).  Every call of
 * api/ that needs LLVM goes through the table below: compile a kernel to its artefact, name the
 * code's target for cache keys, and load / run / unload a host object (the host device runs
 * only code linked into an ORC JIT).  Exactly one of two files defines the table, chosen when
 * the library is linked, not at run time:
 *   api/compiler_llvm.c  (libkiln)     the pipeline (kn_compile_artifact) and host objects;
 *   api/compiler_none.c  (libkiln_rt)  no compiler: every entry fails with KN_E_UNSUPPORTED.
 * libkiln_rt therefore serves the HIP and CUDA devices from code it finds in the disk cache (a
 * code object or PTX a kiln with a compiler stored there, keyed exactly as that kiln keys it),
 * reads tuning records, and answers a request whose code it does not have with
 * KILN_ERR_UNSUPPORTED ("this library has no compiler"), never with a crash or a wrong kernel.
 * Host kernels need the JIT, so a libkiln_rt context on the host can list, verify and clear the
 * cache but prepares nothing (docs/install.md says what each library serves).
 *
 * The GPU targets' identity (kn_arch_code_id) is pure registry data plus the version of the LLVM
 * that generated the code; without LLVM that version is the one libkiln_rt was built beside
 * (KILN_LLVM_VERSION, from CMake), so both libraries of one build compute the same cache keys
 * (test_api_rt checks it).
 */
#ifndef KILN_API_COMPILER_H
#define KILN_API_COMPILER_H

#include <stdbool.h>
#include <stddef.h>

#include "arch.h"
#include "pipeline.h"

typedef struct api_compiler {
  bool present;              /* false: libkiln_rt (every entry below fails) */
  const char *library;       /* "libkiln" or "libkiln_rt", for messages */
  /* the LLVM version code is generated and keyed with ("22.1.0") */
  const char *(*llvm_version)(void);
  /* kernel `name` of m for the architecture -> the artefact (kn_compile_artifact) */
  int (*compile)(const kn_module *m, const char *name, const kn_arch *arch, kn_artifact *out,
                 kn_diag *d);
  /* what code for arch depends on besides its IR (kn_object_target_id): part of cache keys */
  int (*target_id)(const kn_arch *arch, char *out, size_t size);
  /* the host CPU as LLVM names it ("znver3"), for tuning keys */
  int (*host_cpu_name)(char *out, size_t size);
  /* host objects (compiler/object.c) */
  int (*host_load)(const void *data, size_t size, const char *symbol, kn_host_object **out,
                   kn_diag *d);
  int (*host_run)(kn_host_object *h, const kn_argval *args, const int grid[3], kn_diag *d);
  void (*host_unload)(kn_host_object *h);
} api_compiler;

extern const api_compiler api_the_compiler;

#endif
