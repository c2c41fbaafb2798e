/* target.h — what the compiler needs to know about a target, and the calls that differ per target.
 *
 * A target is a description (triple, CPU, features, sizes, the matrix instructions the layout
 * pass may use) plus a small table of function pointers called by compiler/pipeline.c in this
 * order: lower (tile IR -> LLVM module), optimise (LLVM passes with the target machine attached),
 * emit_asm (for dumps), load (codegen and make the code runnable: the host JITs it, GPU targets
 * will emit and link a code object).  The host target (target_host.c) is the first
 * implementation; AMDGPU and NVPTX fill the same struct.
 *
 * Host kernel ABI.  A kernel @name lowers to
 *     void kiln_<name>(const kn_argval *args, i32 px, i32 py, i32 pz, i32 nx, i32 ny, i32 nz)
 * where args[i] is the i-th kernel parameter as an 8-byte kn_argval (ir/interp.h): .i for i1 /
 * i32 / i64 (truncated to the width on entry; i1 is args[i].i != 0), .f for float parameters
 * (rounded to the parameter's format on entry, as the interpreter does), .p for pointers;
 * (px, py, pz) is the program id and (nx, ny, nz) the grid.  The module also defines
 *     i32 kiln_<name>.status
 * where a program ORs (atomically) the KN_KSTATUS_* bits of the run-time errors the interpreter
 * would have reported (integer division by zero, a shift out of range, a for step <= 0); the
 * launcher clears it before and reads it after a launch.  The program carries on with a defined
 * result (0 for the division and shift, no iteration for the loop) instead of trapping.
 * A kernel lowered by `lower_checked` (checked mode) takes one more argument, args[nparams].p,
 * the launch's checker, and calls kn_rt_check_access before every global access (host_run.h).
 */
#ifndef KILN_TARGET_H
#define KILN_TARGET_H

#include <stdio.h>

#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Types.h>
#include <llvm-c/TargetMachine.h>

#include "ir.h"

/* bits of kiln_<name>.status */
enum {
  KN_KSTATUS_DIV_ZERO = 1 << 0,   /* integer division or remainder by zero */
  KN_KSTATUS_SHIFT = 1 << 1,      /* shift amount outside [0, width) */
  KN_KSTATUS_STEP = 1 << 2,       /* for with step <= 0 */
};

/* one matrix instruction a target offers (empty table for the host) */
typedef struct kn_matrix_instr {
  const char *name;       /* e.g. "v_mfma_f32_32x32x8f16" */
  int m, n, k;            /* shape of one instruction */
  kn_scalar a, b, acc;    /* operand and accumulator element types */
  int lanes;              /* lanes of the wave/warp that execute it together */
} kn_matrix_instr;

typedef struct kn_target kn_target;

/* the result of `load`: something runnable; targets keep their own state behind `impl` */
typedef struct kn_loaded {
  void *impl;             /* target-owned (host: the LLJIT), freed by target->unload */
  void *entry;            /* host: the kernel function (see the ABI above) */
  int *status;            /* host: kiln_<name>.status, or NULL */
} kn_loaded;

struct kn_target {
  const char *name;       /* "host", "gfx942", ... (what --target names) */
  const char *triple;     /* NULL: the process's own (host) */
  const char *cpu;        /* NULL: the host CPU */
  const char *features;   /* NULL: the host CPU's features */
  int pointer_bits;
  int vector_bits;        /* widest useful vector register (a hint for lowering) */
  const kn_matrix_instr *matrix;
  int nmatrix;

  /* Writes kernel `k` of a verified, call-free module into a new LLVM module in ctx. */
  int (*lower)(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
               kn_diag *d);
  /* The same with every global access checked (kn_compile_options.check_bounds); NULL: none. */
  int (*lower_checked)(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
                       kn_diag *d);
  /* A target machine for this target (the caller disposes of it), or NULL with *d filled. */
  LLVMTargetMachineRef (*machine)(const kn_target *t, kn_diag *d);
  /* Runs the LLVM optimisation pipeline (e.g. "default<O3>") on the module. */
  int (*optimize)(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm, kn_diag *d);
  /* Writes the module's assembly to out. */
  int (*emit_asm)(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm, FILE *out,
                  kn_diag *d);
  /* Codegen and load.  Takes ownership of ctx and mod (also on failure). */
  int (*load)(const kn_target *t, LLVMContextRef ctx, LLVMModuleRef mod, const char *kernel_name,
              kn_loaded *out, kn_diag *d);
  void (*unload)(const kn_target *t, kn_loaded *l);
};

/* the host CPU, run by ORC LLJIT */
extern const kn_target kn_target_host;

/* ---- pieces shared by targets (jit.c) ---- */

/* Initialises LLVM's native target once (thread-safe). */
void kn_llvm_init(void);
/* An LLVM context whose diagnostics are collected (not printed); see kn_llvm_context_diag(). */
LLVMContextRef kn_llvm_context_new(void);
/* the diagnostics collected so far in ctx (errors and warnings, one per line), or "" */
const char *kn_llvm_context_diag(LLVMContextRef ctx);
/* releases the collector of ctx (call before disposing of ctx yourself) */
void kn_llvm_context_forget(LLVMContextRef ctx);
/* turns an LLVMErrorRef into a kn_diag message prefixed by what; consumes err; returns -1 */
int kn_llvm_error(kn_diag *d, LLVMErrorRef err, const char *what);
/* LLVMVerifyModule with a returned message */
int kn_llvm_verify(LLVMModuleRef mod, kn_diag *d);
/* the LLVM pass pipeline with tm attached */
int kn_llvm_run_passes(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *passes,
                       kn_diag *d);
int kn_llvm_emit_asm(LLVMModuleRef mod, LLVMTargetMachineRef tm, FILE *out, kn_diag *d);
/* the `optimize` and `emit_asm` every target uses so far: `default<O3>` with the target machine
 * attached, and the machine's assembly */
int kn_target_optimize_o3(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                          kn_diag *d);
int kn_target_emit_asm(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm, FILE *out,
                       kn_diag *d);
/* host: a target machine for the host CPU at O3 (for the JIT: default relocation, JIT code model) */
LLVMTargetMachineRef kn_llvm_host_machine(kn_diag *d);
/* the same with a chosen relocation model and code model (relocatable objects: PIC, small) */
LLVMTargetMachineRef kn_llvm_host_machine_with(LLVMRelocMode reloc, LLVMCodeModel model,
                                               kn_diag *d);
/* host: JIT the module (takes ownership of ctx and mod), look up kiln_<name> */
int kn_jit_load(LLVMContextRef ctx, LLVMModuleRef mod, const char *kernel_name, kn_loaded *out,
                kn_diag *d);
void kn_jit_unload(kn_loaded *l);
/* defines in J's main dylib the C functions JIT'ed host code calls (kiln's numeric helpers,
 * libm/libc) as absolute symbols, so that a static binary links too */
int kn_jit_define_helpers(LLVMOrcLLJITRef J, kn_diag *d);

/* lower_host.c: the host target's `lower` and `lower_checked` */
int kn_lower_host(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
                  kn_diag *d);
int kn_lower_host_checked(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
                          kn_diag *d);

/* ---- C helpers the JIT'ed host code calls (absolute symbols) ---- */
double kn_rt_round(int32_t scalar, double x);          /* kn_round */
uint32_t kn_rt_encode(int32_t scalar, double x);       /* kn_encode (fp8: the byte) */
double kn_rt_int_to_float(int32_t scalar, int64_t v);  /* kn_int_to_float */

#endif
