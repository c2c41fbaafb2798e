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
  const char *passes;     /* LLVM pipeline text; NULL: kn_amdgpu_passes */
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

/* The LLVM optimisation pipeline of the AMDGPU targets (LLVMRunPasses text, run with the
 * target machine attached): LLVM 22's default<O3> for gfx942 written out, with the edits
 * amdgpu_target.c lists beside it (measured there: the same KV loop, less compile time). */
extern const char kn_amdgpu_passes[];

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

/* Runs fn(ctx, fd) in a child process (a crash or a hang of LLVM's disassembler on bytes nobody
 * vouches for ends the child, not the caller; KN_DISASM_SECONDS at most) and returns what it
 * wrote to fd in *out (malloc'd, *out_n bytes; the caller frees it).  0; -2 with *sig the signal
 * that ended the child; -1 when it could not run or fn returned nonzero. */
int kn_amdgpu_isolated(int (*fn)(void *ctx, int fd), void *ctx, char **out, size_t *out_n,
                       int *sig);

/* ---- the KV loop of a kernel (loop.c, `kiln inspect --loop`) -------------------------------- */

/* instruction classes, in the order the report prints them */
typedef enum kn_icls {
  KN_ICLS_MFMA,        /* v_mfma* */
  KN_ICLS_VALU,        /* other v_* (not below) */
  KN_ICLS_CMP,         /* v_cmp*, v_cndmask* */
  KN_ICLS_TRANS,       /* v_exp, v_log, v_rcp, v_rsq, v_sqrt, v_sin, v_cos */
  KN_ICLS_SALU,        /* s_* (not below) */
  KN_ICLS_SMEM,        /* s_load*, s_buffer_load* */
  KN_ICLS_LDS_READ,    /* ds_read*, ds_load* */
  KN_ICLS_LDS_WRITE,   /* ds_write*, ds_store* */
  KN_ICLS_LDS_OTHER,   /* other ds_* (ds_bpermute, ds_swizzle...) */
  KN_ICLS_VMEM_LOAD,   /* global_load*, buffer_load*, flat_load* */
  KN_ICLS_VMEM_STORE,  /* global_store*, buffer_store*, flat_store* */
  KN_ICLS_WAITCNT,     /* s_waitcnt* */
  KN_ICLS_BRANCH,      /* s_branch, s_cbranch_* */
  KN_ICLS_NOP,         /* s_nop */
  KN_ICLS_BARRIER,     /* s_barrier */
  KN_ICLS_OTHER,
  KN_ICLS_COUNT
} kn_icls;

typedef struct kn_amdgpu_loop {
  int nloops;                 /* backward branches in the kernel; 0: no loop (nothing below) */
  uint64_t begin, end;        /* byte offsets in the kernel's code: the loop's first instruction,
                               * and its backward branch (included) */
  int ninstr;                 /* instructions in [begin, end] */
  int count[KN_ICLS_COUNT];
  char *text;                 /* those instructions, one a line (llvm-mca's input); malloc'd */
  double mca_cycles;          /* llvm-mca's cycles per iteration; < 0 when it did not run */
  char mca[640];              /* the llvm-mca that ran, or why none did */
  /* an interior iteration: the one path through the loop's blocks, header to back edge, that
   * holds every MFMA of the loop with the fewest instructions, an exec-mask skip
   * (s_cbranch_execz) not taken and s_cbranch_execnz taken (every lane is live inside a block).
   * Blocks only an edge iteration runs (the causal mask, the last block's key bound) are off
   * it.  hot_ninstr == ninstr when every block is on it */
  int hot_ninstr;
  int hot_count[KN_ICLS_COUNT];
  char *hot_text;             /* its instructions in path order; malloc'd */
  double hot_mca_cycles;      /* llvm-mca on hot_text; < 0 when it did not run */
} kn_amdgpu_loop;

/* The KV loop of the kernel code[0..n) for cpu (gfx90a, gfx942, gfx950): every backward branch
 * (s_branch / s_cbranch_* to a lower address) closes a loop [target, branch]; the loop chosen is
 * the one holding the most MFMAs (ties: the shortest), and its instructions are classified.
 * Disassembles in a child process (kn_amdgpu_isolated).  0 (out->nloops = 0 when the kernel has
 * no loop); -1 with *d.  Free with kn_amdgpu_loop_free. */
int kn_amdgpu_find_loop(const char *cpu, const uint8_t *code, size_t n, kn_amdgpu_loop *out,
                        kn_diag *d);

/* llvm-mca's cycles for one iteration of the loop for cpu: runs llvm-mca as a child process on
 * the loop's text (100 iterations, cycles / 100).  The program is $KILN_LLVM_MCA when set
 * ("none": none), else llvm-mca-22 on PATH, else /usr/lib/llvm-22/bin/llvm-mca.  Sets
 * loop->mca_cycles, or leaves it < 0 and says why in loop->mca. */
void kn_amdgpu_loop_mca(const char *cpu, kn_amdgpu_loop *loop);

/* "kernel NAME: KV loop ..." lines for the report (kiln inspect --loop, kiln compile --loop) */
void kn_amdgpu_loop_format(const char *kernel, const char *cpu, const kn_amdgpu_loop *loop,
                           char *buf, size_t cap);
void kn_amdgpu_loop_free(kn_amdgpu_loop *loop);

#ifdef __cplusplus
}
#endif

#endif
