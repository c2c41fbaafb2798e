/* target_host.c — the host CPU as a kiln target.
 *
 * The description is the process's own machine (triple, CPU and features are detected when the
 * target machine is made); there are no matrix instructions, so the layout machinery has nothing
 * to choose and the lowering keeps tiles in plain buffers (lower_host.c).  Code is run by ORC
 * LLJIT in this process (jit.c).
 */
#include "target.h"

static LLVMTargetMachineRef host_machine(const kn_target *t, kn_diag *d) {
  (void)t;
  return kn_llvm_host_machine(d);
}

static int host_load(const kn_target *t, LLVMContextRef ctx, LLVMModuleRef mod, const char *name,
                     kn_loaded *out, kn_diag *d) {
  (void)t;
  return kn_jit_load(ctx, mod, name, out, d);
}

static void host_unload(const kn_target *t, kn_loaded *l) {
  (void)t;
  kn_jit_unload(l);
}

const kn_target kn_target_host = {
    .name = "host",
    .triple = NULL,
    .cpu = NULL,
    .features = NULL,
    .pointer_bits = 64,
    .vector_bits = 256,
    .matrix = NULL,
    .nmatrix = 0,
    .lower = kn_lower_host,
    .lower_checked = kn_lower_host_checked,
    .machine = host_machine,
    .optimize = kn_target_optimize_o3,
    .emit_asm = kn_target_emit_asm,
    .load = host_load,
    .unload = host_unload,
};
