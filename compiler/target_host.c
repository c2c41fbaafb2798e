/* target_host.c — the host CPU as a kiln target.
 *
 * The description is the process's own machine (triple, CPU and features are detected when the
 * target machine is made); there are no matrix instructions and no layout pass, and the
 * lowering keeps tiles in plain buffers (lower_host.c).  Codegen writes a relocatable object
 * (PIC, small code model: it is linked at any address, now or when read back from the cache)
 * and load links it into a fresh ORC LLJIT in this process (object.c).
 */
#include "target.h"

static LLVMTargetMachineRef host_machine(const kn_target *t, kn_diag *d) {
  (void)t;
  return kn_llvm_host_machine_with(LLVMRelocPIC, LLVMCodeModelSmall, d);
}

const kn_target kn_target_host = {
    .name = "host",
    .arch = &kn_archs[0],
    .artifact = KN_ARTIFACT_HOST_OBJECT,
    .lower = kn_lower_host,
    .lower_checked = kn_lower_host_checked,
    .machine = host_machine,
    .codegen = kn_host_codegen,
    .load = kn_host_load,
    .unload = kn_host_unload,
};
