/* kernel_run.c — launching a compiled kernel on the host device (kn_kernel_run_host and its
 * checked form, declared in compiler/pipeline.h where its callers look for them).
 *
 * A launch, not a compile: the pipeline produces a kn_kernel (entry point + status word), the
 * host device (device.h) runs an entry point over a grid, and this file is the step between —
 * compiler/host_run.c clears the kernel's status word, runs the grid on the worker pool (with the
 * bounds checker for checked kernels) and turns the bits the kernel set into an error.  It sits in runtime/ with the other launches (attn_launch_cuda.c for CUDA) but in its
 * own library, kiln_host_run, above the compiler it takes kernels from: kiln_runtime itself
 * stays free of the IR and of LLVM.
 *
 * The status word is per kernel, so launches of one kernel must not overlap (host launches are
 * serialised by the pool anyway, so the bits read belong to this launch).
 */
#include "host_run.h"
#include "pipeline.h"
#include "target.h"

static const kn_loc no_loc = {0};

int kn_kernel_run_host_checked(kn_kernel *k, const kn_argval *args, const int grid[3],
                               const kn_region *regions, int nregions, kn_diag *d) {
  void *entry = kn_kernel_entry(k);
  if (!entry || kn_kernel_target(k)->emulated)
    return kn_error(d, NULL, no_loc, "kernel is not runnable on the host");
  if (regions && !kn_kernel_checked(k))
    return kn_error(d, NULL, no_loc, "@%s was compiled without check_bounds: nothing to check "
                    "its accesses with", kn_kernel_name(k));
  char name[136];
  snprintf(name, sizeof name, "@%s", kn_kernel_name(k));
  return kn_host_run(name, (kn_host_kernel_fn)entry, kn_kernel_status_word(k), args,
                     kn_kernel_nparams(k), grid, kn_kernel_checked(k), regions, nregions, d);
}

int kn_kernel_run_host(kn_kernel *k, const kn_argval *args, const int grid[3], kn_diag *d) {
  return kn_kernel_run_host_checked(k, args, grid, NULL, 0, d);
}
