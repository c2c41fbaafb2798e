/* pipeline.h — compiling a kernel of the tile IR for a target: the one pipeline of kiln.
 *
 * kn_compile() takes a kernel of a module (the module is copied, never changed), runs the pass
 * list of pipeline.c and returns a compiled kernel that owns its artefact — the bytes a target
 * produces (a relocatable host object, an AMDGPU code object, PTX) — and, for the targets that
 * run in this process (host, emulated), the loaded code.  Every path compiles through it: the
 * command line, the public API (which caches the artefact on disk), the tuner, the tests and the
 * benchmarks.  Compiles on different threads are independent.
 *
 * Dumps: the stages "ir" (tile IR after kiln's passes), "layout" (GPU targets: every tile's
 * layout, the conversions and the shared-memory plan), "lowered" (LLVM IR as lowered), "llvm"
 * (after LLVM's optimisation) and "asm" (the target's assembly: x86, AMDGPU, PTX) are printed
 * while compiling when asked, by options (dump_stages, dump_file) or by the environment
 * KILN_DUMP=ir,layout,... ("all" for every stage).  An unknown stage name in either is an error
 * naming the stages, never silently nothing.  kn_pipeline_dump() compiles up to a stage just to
 * print it (`kiln dump --stage`).
 */
#ifndef KILN_PIPELINE_H
#define KILN_PIPELINE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "interp.h"
#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kn_target kn_target;
typedef struct kn_kernel kn_kernel;

typedef enum kn_stage {
  KN_STAGE_IR = 1 << 0,      /* tile IR after kiln's passes */
  KN_STAGE_LAYOUT = 1 << 1,  /* GPU: layouts, conversions, shared-memory plan */
  KN_STAGE_LOWERED = 1 << 2, /* LLVM IR before LLVM's optimisation */
  KN_STAGE_LLVM = 1 << 3,    /* LLVM IR after optimisation */
  KN_STAGE_ASM = 1 << 4,     /* target assembly (PTX on NVIDIA) */
  KN_STAGE_ALL = (1 << 5) - 1,
} kn_stage;

/* "ir,llvm" -> mask; -1 when a name is not a stage */
int kn_stage_parse(const char *s);
/* the stage names, comma-separated, for messages */
const char *kn_stage_names(void);

typedef enum kn_artifact_kind {
  KN_ARTIFACT_HOST_OBJECT = 1, /* relocatable ELF for the host (PIC, small code model) */
  KN_ARTIFACT_CODE_OBJECT,     /* linked AMDGPU code object (ET_DYN, code object v5) */
  KN_ARTIFACT_PTX,             /* PTX text, NUL-terminated (size excludes the NUL) */
} kn_artifact_kind;

/* What a compile produces, whatever the target. */
typedef struct kn_artifact {
  kn_artifact_kind kind;
  void *data;             /* malloc'd */
  size_t size;
  char symbol[160];       /* the entry symbol: "kiln_<name>" on the host, "<name>" on GPUs */
  int64_t shared_bytes;   /* GPU: the shared-memory (LDS) plan, to launch with */
  int threads;            /* GPU: threads per program (lanes x warps), exactly */
  uint64_t tile_bytes;    /* host: the kernel's stack slots before optimisation */
} kn_artifact;

void kn_artifact_free(kn_artifact *a);
const char *kn_artifact_kind_name(kn_artifact_kind k); /* "host object", "code object", "PTX" */

typedef struct kn_compile_options {
  unsigned dump_stages;  /* kn_stage bits, ORed with $KILN_DUMP */
  FILE *dump_file;       /* NULL: stderr */
  bool verify_each;      /* kn_verify between kiln passes (also: debug builds, KILN_VERIFY_EACH=1) */
  bool no_load;          /* stop at the artefact: do not load it even where the target could */
  bool keep_layout;      /* GPU: keep the layout stage's text (kn_kernel_layout_text) */
  bool check_bounds;     /* checked mode (host only, compiler/host_run.h): every global load and
                            store of a live element is checked against the launch's regions; it
                            changes the code and its ABI, so a cache of compiled code must key on
                            it (the API compiles unchecked: api/kiln.c api_cache_key) */
} kn_compile_options;

/* wall time of each step of one compile, in ms */
typedef struct kn_compile_times {
  double front;          /* copy, verify, fold, inline */
  double layout;         /* GPU: layout pass and shared-memory plan */
  double lower, optimize, codegen, link, load;
} kn_compile_times;

/* the host target (compiler/target.h describes the struct) */
const kn_target *kn_host_target(void);

/* Compiles kernel `name` of m for t.  opts may be NULL.  Returns 0 and *out, or -1 with *d. */
int kn_compile(const kn_module *m, const char *name, const kn_target *t,
               const kn_compile_options *opts, kn_kernel **out, kn_diag *d);
void kn_kernel_free(kn_kernel *k);
/* kn_compile with opts->no_load, keeping only the artefact (the API's cache, the tuner, AOT):
 * 0 and *out (free with kn_artifact_free), or -1 with *d */
int kn_compile_artifact(const kn_module *m, const char *name, const kn_target *t,
                        const kn_compile_options *opts, kn_artifact *out, kn_diag *d);

const char *kn_kernel_name(const kn_kernel *k);
const kn_target *kn_kernel_target(const kn_kernel *k);
/* the artefact (owned by the kernel) */
const kn_artifact *kn_kernel_artifact(const kn_kernel *k);
/* takes the artefact's bytes out of the kernel (the caller frees them with kn_artifact_free) */
void kn_kernel_take_artifact(kn_kernel *k, kn_artifact *out);
const kn_compile_times *kn_kernel_times(const kn_kernel *k);
/* the layout stage's text when opts.keep_layout was set on a GPU target, else NULL */
const char *kn_kernel_layout_text(const kn_kernel *k);
/* the entry point and status word of a loaded kernel (host, emulated), else NULL */
void *kn_kernel_entry(const kn_kernel *k);
/* host: the kernel's status word (kiln_<name>.status, compiler/target.h bits), or NULL */
int *kn_kernel_status_word(const kn_kernel *k);
/* the kernel's parameter count, and whether it was compiled with check_bounds */
int kn_kernel_nparams(const kn_kernel *k);
bool kn_kernel_checked(const kn_kernel *k);

/* Runs a host-compiled kernel over grid on the host device.  args has one kn_argval per kernel
 * parameter.  Returns 0, or -1 with *d (runtime failure, integer division by zero).  A kernel
 * compiled with check_bounds runs here with nothing checked.  Launches, not compiles: defined in
 * runtime/kernel_run.c (library kiln_host_run). */int kn_kernel_run_host(kn_kernel *k, const kn_argval *args, const int grid[3], kn_diag *d);
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

/* ---- host objects (object.c): what the JIT service caches for the host ----
 * kn_object_load() links a host artefact into a fresh LLJIT; the result runs like a kernel. */
typedef struct kn_host_object kn_host_object;
int kn_object_load(const void *data, size_t size, const char *symbol, kn_host_object **out,
                   kn_diag *d);
void kn_object_unload(kn_host_object *h);
/* runs a loaded object over grid like kn_kernel_run_host; launches of one object must not
 * overlap (its status word is shared) */
int kn_object_run_host(kn_host_object *h, const kn_argval *args, const int grid[3], kn_diag *d);
/* what a host object depends on besides its IR: "host;<triple>;<cpu>;<features>;pic-small;
 * llvm-<version>"; for other targets the target's name and LLVM version (part of cache keys) */
int kn_object_target_id(const kn_target *t, char *out, size_t size);
/* the host CPU as LLVM names it ("znver3"), for tuning keys */
int kn_host_cpu_name(char *out, size_t size);
/* the version of the LLVM kiln runs ("22.1.8"), as target identities name it */
const char *kn_llvm_version(void);

/* The code generators' revision: part of every cache key (api_cache_key, the AOT bundle's
 * entries), raised whenever kiln emits different code for the same IR, target and options, so
 * a binary cached by an earlier kiln is never loaded.  "codegen-2": sm_90a's wgmma reads every
 * loop-invariant A operand from shared memory (gpu/assign_layouts.c).  "codegen-3": a wgmma
 * dot's wait is deferred to the first use of its result (gpu/lower_gpu.c, "wgmma groups in
 * flight"), so independent dots and the elementwise work between them overlap.  "codegen-4":
 * AMDGPU's own optimisation pipeline (kn_amdgpu_passes) and codegen level Default, whose code
 * objects differ outside the KV loop; wgmma's M-major A through a descriptor. */
#define KN_CODEGEN_REVISION "codegen-4"

/* KILN_WGMMA_A_REGS=1 in the environment: sm_90a's wgmma keeps loop-invariant A operands in
 * registers again (the lowering before codegen-2, which computed wrong results on an H200 when
 * the forward's block_n equals the padded head dim), to compare the two.  KILN_WGMMA_SERIAL=1:
 * every wgmma dot waits for itself right after it is issued (the lowering before codegen-3), to
 * compare.  The cache key names both (kn_codegen_revision). */
static inline bool kn_env_is_1(const char *name) {
  const char *e = getenv(name);
  return e && e[0] == '1' && !e[1];
}
static inline bool kn_wgmma_a_regs(void) { return kn_env_is_1("KILN_WGMMA_A_REGS"); }
static inline bool kn_wgmma_serial(void) { return kn_env_is_1("KILN_WGMMA_SERIAL"); }
/* KN_CODEGEN_REVISION, with "+wgmma-a-regs" / "+wgmma-serial" for those switches (inline: the
 * runtime-only library keys its cache entries without the compiler) */
static inline const char *kn_codegen_revision(void) {
  static const char *const rev[4] = {KN_CODEGEN_REVISION, KN_CODEGEN_REVISION "+wgmma-a-regs",
                                     KN_CODEGEN_REVISION "+wgmma-serial",
                                     KN_CODEGEN_REVISION "+wgmma-a-regs+wgmma-serial"};
  return rev[(kn_wgmma_a_regs() ? 1 : 0) + (kn_wgmma_serial() ? 2 : 0)];
}

#ifdef __cplusplus
}
#endif
#endif
