/* target.h — the steps of the pipeline that differ per ISA, and the pieces targets share.
 *
 * A compile target is an architecture of the registry (compiler/arch.h: every fact about the
 * chip) plus a small table of function pointers that compiler/pipeline.c calls in order:
 * lower (tile IR, laid out on GPUs -> LLVM module), machine (LLVM target machine), codegen
 * (optimised module -> artefact bytes), link (AMDGPU only), load (host and emulated targets
 * only); and the text of its LLVM optimisation pipeline (default<O3> unless the table names
 * another).  Running that pipeline and the assembly dumps are the same for every target and
 * live in the pipeline.  One table serves each ISA (target_host.c, gpu/target_amdgpu.c,
 * gpu/target_nvptx.c, emu/target_emu.c); targets.c pairs them with the registry's entries.
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

#include "arch.h"
#include "ir.h"
#include "pipeline.h"

/* bits of kiln_<name>.status */
enum {
  KN_KSTATUS_DIV_ZERO = 1 << 0,   /* integer division or remainder by zero */
  KN_KSTATUS_SHIFT = 1 << 1,      /* shift amount outside [0, width) */
  KN_KSTATUS_STEP = 1 << 2,       /* for with step <= 0 */
};

typedef struct kn_target kn_target;
typedef struct kn_layout_plan kn_layout_plan;  /* compiler/gpu/gpu.h */

/* the result of `load`: something runnable in this process (host and emulated targets) */
typedef struct kn_loaded {
  void *impl;             /* target-owned (the LLJIT), freed by target->unload */
  void *entry;            /* the kernel function (the host ABI above) */
  int *status;            /* kiln_<name>.status, or NULL */
} kn_loaded;

/* A compile target: an architecture of the registry (compiler/arch.h) plus the steps of the
 * pipeline that differ per ISA.  compiler/targets.c makes one per registry entry (and one
 * "<name>-emu" per AMDGPU entry the emulator runs); compiler/pipeline.c calls the steps in
 * order: lower, machine, codegen, link (if any), load (if any). */
struct kn_target {
  const char *name;          /* "host", "gfx942", "gfx942-emu", "sm_90a" (what --target names) */
  const kn_arch *arch;       /* the facts; an emulated target has the emulated chip's */
  kn_artifact_kind artifact; /* what codegen (+ link) produces */
  bool emulated;             /* the AMDGPU lowering run by the emulator on the host */
  unsigned breaks;           /* emulated, test-only: KN_EMU_BREAK_* perturbations */
  /* LLVM's optimisation pipeline for this target, as LLVMRunPasses text (run with the target
   * machine attached); NULL: "default<O3>".  AMDGPU: kn_amdgpu_passes (compiler/amdgpu). */
  const char *passes;

  /* kernel k (verified, inlined, and laid out when plan is not NULL: GPU ISAs) -> a new LLVM
   * module in ctx with the target's triple and data layout set */
  int (*lower)(const kn_target *t, kn_func *k, const kn_layout_plan *plan, LLVMContextRef ctx,
               LLVMModuleRef *out, kn_diag *d);
  /* the same with every global access checked (kn_compile_options.check_bounds); NULL: none */
  int (*lower_checked)(const kn_target *t, kn_func *k, const kn_layout_plan *plan,
                       LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d);
  /* a target machine (the caller disposes of it), or NULL with *d */
  LLVMTargetMachineRef (*machine)(const kn_target *t, kn_diag *d);
  /* the optimised module -> the artefact's bytes (object file, PTX) */
  int (*codegen)(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm, kn_artifact *a,
                 kn_diag *d);
  /* optional: link the artefact in place (AMDGPU: relocatable object -> code object) */
  int (*link)(const kn_target *t, kn_artifact *a, kn_diag *d);
  /* optional: make the artefact runnable in this process (host, emulated) */
  int (*load)(const kn_target *t, const kn_artifact *a, kn_loaded *out, kn_diag *d);
  void (*unload)(const kn_target *t, kn_loaded *l);
};

/* targets.c: the compile targets, made from the registry: by name ("host", "gfx942",
 * "gfx942-emu", "sm_90a"), or the i-th (NULL past the end, for listing) */
const kn_target *kn_target_get(const char *name);
const kn_target *kn_target_at(int i);
/* the target for an architecture (not emulated) */
const kn_target *kn_target_of_arch(const kn_arch *a);

/* the steps of each ISA (targets.c pairs them with the registry's entries): target_host.c,
 * gpu/target_amdgpu.c, gpu/target_nvptx.c, emu/target_emu.c */
extern const kn_target kn_target_host, kn_target_amdgpu_steps, kn_target_nvptx_steps,
    kn_target_emu_steps;
/* the host's codegen and load (object.c), also the emulated targets' */
int kn_host_codegen(const kn_target *t, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                    kn_artifact *a, kn_diag *d);
int kn_host_load(const kn_target *t, const kn_artifact *a, kn_loaded *out, kn_diag *d);
void kn_host_unload(const kn_target *t, kn_loaded *l);

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
int kn_lower_host(const kn_target *t, kn_func *k, const kn_layout_plan *plan, LLVMContextRef ctx,
                  LLVMModuleRef *out, kn_diag *d);
int kn_lower_host_checked(const kn_target *t, kn_func *k, const kn_layout_plan *plan,
                          LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d);

/* ---- C helpers the JIT'ed host code calls (absolute symbols) ---- */
double kn_rt_round(int32_t scalar, double x);          /* kn_round */
uint32_t kn_rt_encode(int32_t scalar, double x);       /* kn_encode (fp8: the byte) */
double kn_rt_int_to_float(int32_t scalar, int64_t v);  /* kn_int_to_float */

#endif
