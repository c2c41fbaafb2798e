/* pipeline.h — compiling a kernel of the tile IR for a target, and running it on the host.
 *
 * kn_compile() takes a kernel of a module (the module is copied, never changed), runs the pass
 * list of pipeline.c and returns a compiled kernel that owns everything it needs (for the host:
 * its LLJIT and the machine code).  Compiles on different threads are independent.
 *
 * Dumps: the stages "ir" (tile IR after the kiln passes), "lowered" (LLVM IR as lowered, before
 * optimisation), "llvm" (LLVM IR after the LLVM pipeline) and "asm" (the target's assembly) can be
 * written while compiling: by options (dump_stages, dump_file) or by the environment
 * KILN_DUMP=ir,llvm,asm (to stderr unless dump_file is given).  kn_pipeline_dump() compiles up to
 * one stage just to print it (`kiln dump --stage`).
 */
#ifndef KILN_PIPELINE_H
#define KILN_PIPELINE_H

#include <stdio.h>

#include "interp.h"
#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kn_target kn_target;
typedef struct kn_kernel kn_kernel;

typedef enum kn_stage {
  KN_STAGE_IR = 1 << 0,      /* tile IR after kiln's passes */
  KN_STAGE_LOWERED = 1 << 1, /* LLVM IR before LLVM's optimisation */
  KN_STAGE_LLVM = 1 << 2,    /* LLVM IR after optimisation */
  KN_STAGE_ASM = 1 << 3,     /* target assembly */
} kn_stage;

/* "ir,llvm" -> mask; unknown names give -1 */
int kn_stage_parse(const char *s);

typedef struct kn_compile_options {
  unsigned dump_stages;  /* kn_stage bits, ORed with $KILN_DUMP */
  FILE *dump_file;       /* NULL: stderr */
  bool verify_each;      /* kn_verify between kiln passes (also: debug builds, KILN_VERIFY_EACH=1) */
  bool check_bounds;     /* checked mode (host only, compiler/host_run.h): every global load and
                            store of a live element is checked against the launch's regions; it
                            changes the code and its ABI, so a cache of compiled code must key on
                            it (the API compiles unchecked: api/kiln.c api_cache_key) */
} kn_compile_options;

/* the host target (compiler/target.h describes the struct) */
const kn_target *kn_host_target(void);

/* Compiles kernel `name` of m for t.  opts may be NULL.  Returns 0 and *out, or -1 with *d. */
int kn_compile(const kn_module *m, const char *name, const kn_target *t,
               const kn_compile_options *opts, kn_kernel **out, kn_diag *d);
void kn_kernel_free(kn_kernel *k);

/* the host entry point (runtime/device.h kn_host_kernel_fn), NULL for other targets */
void *kn_kernel_entry(const kn_kernel *k);
const char *kn_kernel_name(const kn_kernel *k);

/* Runs a host-compiled kernel over grid on the host device.  args has one kn_argval per kernel
 * parameter.  Returns 0, or -1 with *d (runtime failure, integer division by zero).  A kernel
 * compiled with check_bounds runs here with nothing checked. */
int kn_kernel_run_host(kn_kernel *k, const kn_argval *args, const int grid[3], kn_diag *d);
/* The same for a kernel compiled with check_bounds: every global access of a live element must
 * lie in one of regions[0 .. nregions); the first that does not (as the interpreter would find
 * it) is skipped and reported as the error, naming the kernel, the op's location, the element,
 * the program, the address and the nearest region.  -1 for a kernel compiled without it. */
int kn_kernel_run_host_checked(kn_kernel *k, const kn_argval *args, const int grid[3],
                               const kn_region *regions, int nregions, kn_diag *d);

/* Compiles kernel `name` up to `stage` and prints that stage to out (several kn_stage bits:
 * prints each, stopping after the last). */
int kn_pipeline_dump(const kn_module *m, const char *name, const kn_target *t, kn_stage stage,
                     FILE *out, kn_diag *d);

/* ---- the host object path (object.c): what the JIT service caches ----
 * kn_compile_object() runs the same pipeline as kn_compile() but stops at codegen: the kernel
 * becomes a relocatable object in memory (PIC, small code model, the host CPU's features), and
 * the lowering's tile storage is measured on the way (the host's resource for the autotuner).
 * kn_object_load() links such an object into a fresh LLJIT; the result runs like a kn_kernel.
 * Host target only so far (other targets: -1 with a message), and unchecked (check_bounds: -1). */
typedef struct kn_object {
  void *data;             /* the object file (ELF on Linux), malloc'ed */
  size_t size;
  char symbol[160];       /* the kernel's entry symbol, "kiln_<name>" */
  uint64_t tile_bytes;    /* stack slots of the kernel function before optimisation */
} kn_object;

int kn_compile_object(const kn_module *m, const char *name, const kn_target *t,
                      const kn_compile_options *opts, kn_object *out, kn_diag *d);
void kn_object_free(kn_object *o);
/* what an object depends on besides its IR: for the host "host;<triple>;<cpu>;<features>;
 * pic-small;llvm-<version>" (part of the cache key) */
int kn_object_target_id(const kn_target *t, char *out, size_t size);
/* the host CPU as LLVM names it ("znver3"), for tuning keys */
int kn_host_cpu_name(char *out, size_t size);

typedef struct kn_host_object kn_host_object;
int kn_object_load(const kn_target *t, const void *data, size_t size, const char *symbol,
                   kn_host_object **out, kn_diag *d);
void kn_object_unload(kn_host_object *h);
/* runs a loaded object over grid like kn_kernel_run_host; launches of one object must not
 * overlap (its status word is shared) */
int kn_object_run_host(kn_host_object *h, const kn_argval *args, const int grid[3], kn_diag *d);

#ifdef __cplusplus
}
#endif
#endif
