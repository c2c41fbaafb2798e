/* amdgpu.h — kiln's AMDGPU code-object backend: target descriptions, LLVM module -> code object,
 * the in-process lld link, and a code-object inspector that works without AMD hardware.
 *
 * This is the part of the AMDGPU target that does not depend on the tile lowering: it takes an
 * LLVM module that already holds amdgpu_kernel functions (addrspace(1) pointers for global
 * memory, addrspace(3) for LDS) and turns it into a loadable code object (an ET_DYN ELF for
 * amdgcn-amd-amdhsa, code object v5), then reads back what the hardware would care about:
 * register counts, spills, LDS, scratch, kernarg size, occupancy and the MFMA instructions.
 *
 * Assumes LLVM 22 (LLVM-C API; the AMDGPU target, asm printer and disassembler are compiled in)
 * and lld 22 as a static library.  Nothing here prints, exits or reads the environment or PATH:
 * every failure (LLVM's diagnostics, lld's messages, a corrupt ELF) comes back as -1 with a
 * kn_diag (ir/ir.h).  Facts about the chips are cited where they are defined (amdgpu_target.c).
 */
#ifndef KILN_AMDGPU_H
#define KILN_AMDGPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llvm-c/TargetMachine.h>
#include <llvm-c/Types.h>

#include "arch.h"
#include "codeobj.h"
#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The chips (gfx90a, gfx942, gfx950), their MFMA tables and occupancy facts are entries of the
 * registry (compiler/arch.h, kn_arch with its kn_amd_facts); this file takes them as kn_arch. */

/* ---- LLVM module -> code object ------------------------------------------------------------- */

typedef struct kn_amdgpu_options {
  const char *features;   /* LLVM feature string; NULL or "": sramecc and xnack "any" */
  const char *passes;     /* NULL: "default<O3>" */
  bool emit_asm;          /* also produce the assembly text */
  bool link;              /* also link the object into a code object (ET_DYN) */
} kn_amdgpu_options;

typedef struct kn_amdgpu_output {
  void *obj;              /* relocatable ELF (malloc'd) */
  size_t obj_size;
  void *code_object;      /* linked ET_DYN ELF when options.link (malloc'd), else NULL */
  size_t code_object_size;
  char *asm_text;         /* NUL-terminated assembly when options.emit_asm (malloc'd), else NULL */
  double ms_optimize, ms_codegen, ms_link; /* wall time of each step */
} kn_amdgpu_output;

/* Initialises LLVM's AMDGPU target (once per process; thread-safe). */
void kn_amdgpu_init(void);

/* A target machine for t (CPU t->name, the given features), or NULL with *d filled. */
LLVMTargetMachineRef kn_amdgpu_machine(const kn_arch *t, const char *features,
                                       kn_diag *d);

/* The AMDGPU steps of compiler/pipeline.c, for compiler/gpu/target_amdgpu.c:
 *  prepare: the module defines a kernel, calls only matrix intrinsics t's table lists (LLVM's
 *           instruction selector would abort the process on others), pinned to code object v5;
 *  emit:    codegen of the optimised module (object, or assembly from a copy) with LLVM's
 *           diagnostics captured into *d; *out is malloc'd and NUL-terminated. */
int kn_amdgpu_prepare(const kn_arch *t, LLVMModuleRef mod, kn_diag *d);
int kn_amdgpu_emit(LLVMModuleRef mod, LLVMTargetMachineRef tm, bool assembly, void **out,
                   size_t *out_n, kn_diag *d);

/* For LLVM modules written by hand (tests): verifies mod, prepares it, gives it t's triple and
 * data layout, optimises it with the target machine attached, and emits an object (and
 * optionally assembly and a linked code object).  mod stays owned by the caller and is modified (optimised).  Every LLVM diagnostic
 * of the module's context during the call is captured into *d.  0 on success; -1 with *d and
 * *out left empty on failure. */
int kn_amdgpu_compile(const kn_arch *t, LLVMModuleRef mod, const kn_amdgpu_options *opt,
                      kn_amdgpu_output *out, kn_diag *d);
void kn_amdgpu_output_free(kn_amdgpu_output *out);

/* ---- linking (lld_link.cpp) -------------------------------------------------------------------- */

/* Links the relocatable object obj[0..n) into a shared object with lld 22 in this process
 * (ld.lld --threads=1 -shared --no-undefined), through files in a private temporary directory
 * that is removed afterwards.  Calls are serialised (lld keeps global state).  0 with *out
 * (malloc'd) on success; else -1 and lld's messages in err. */
int kn_amdgpu_link(const void *obj, size_t n, void **out, size_t *out_n, char *err, size_t errn);

/* ---- code-object inspector ----------------------------------------------------------------- */

/* The code-object reader itself (kn_codeobj, kn_codeobj_read, the occupancy model) is LLVM-free
 * and lives in codeobj.h (library kiln_codeobj), so the HIP runtime can use it; what needs LLVM's
 * disassembler is here. */

/* kn_codeobj_read, then (for known targets) disassembles each kernel to count its instructions
 * and MFMAs, in a child process (kn_amdgpu_count_mfma_isolated).  Every read is bounds-checked:
 * a corrupt or truncated file gives -1 and *d, never a crash, also when the disassembler crashes
 * on it (the message names the kernel and the signal).  On success the caller frees *co with
 * kn_codeobj_free. */
int kn_codeobj_parse(const void *data, size_t n, kn_codeobj *co, kn_diag *d);

/* Counts the instructions and the v_mfma* instructions in code[0..n) disassembled for cpu;
 * -1 when the disassembler cannot be created.  In this process: for code kiln just compiled. */
int kn_amdgpu_count_mfma(const char *cpu, const uint8_t *code, size_t n, int *ninstr);

/* The same in a child process, for bytes nobody vouches for: LLVM 22's AMDGPU disassembler
 * crashes on some damaged code (two changed bytes of a code object are enough), and a decoder
 * that loops is stopped after KN_DISASM_SECONDS.  -2 with *sig the signal that ended the child
 * (SIGALRM for the time limit), -1 when it could not run. */
#define KN_DISASM_SECONDS 30
int kn_amdgpu_count_mfma_isolated(const char *cpu, const uint8_t *code, size_t n, int *ninstr,
                                  int *sig);

#ifdef __cplusplus
}
#endif

#endif
