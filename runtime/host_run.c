/* host_run.c — launching a compiled kernel on the host device (kn_kernel_run_host, declared in
 * compiler/pipeline.h where its callers look for it).
 *
 * A launch, not a compile: the pipeline produces a kn_kernel (entry point + status word), the
 * host device (device.h) runs an entry point over a grid, and this file is the step between —
 * clear the kernel's status word, run the grid on the worker pool, turn the bits the kernel set
 * (compiler/target.h: division by zero, shift out of range, non-positive for step) into an
 * error.  It sits in runtime/ with the other launches (attn_launch_cuda.c for CUDA) but in its
 * own library, kiln_host_run, above the compiler it takes kernels from: kiln_runtime itself
 * stays free of the IR and of LLVM.
 *
 * The status word is per kernel, so launches of one kernel must not overlap (host launches are
 * serialised by the pool anyway, so the bits read belong to this launch).
 */
#include "device.h"
#include "pipeline.h"
#include "target.h"

static const kn_loc no_loc = {0};

int kn_kernel_run_host(kn_kernel *k, const kn_argval *args, const int grid[3], kn_diag *d) {
  void *entry = kn_kernel_entry(k);
  if (!entry || kn_kernel_target(k)->emulated)
    return kn_error(d, NULL, no_loc, "kernel is not runnable on the host");
  const char *name = kn_kernel_name(k);
  int *status = kn_kernel_status_word(k);
  if (status) __atomic_store_n(status, 0, __ATOMIC_RELAXED);
  int st = kn_host_launch((kn_host_kernel_fn)entry, args, grid);
  if (st != KN_RT_OK)
    return kn_error(d, NULL, no_loc, "host launch of @%s: %s", name, kn_rt_status_str(st));
  int bits = status ? __atomic_load_n(status, __ATOMIC_RELAXED) : 0;
  if (bits & KN_KSTATUS_DIV_ZERO)
    return kn_error(d, NULL, no_loc, "@%s: integer division or remainder by zero", name);
  if (bits & KN_KSTATUS_SHIFT)
    return kn_error(d, NULL, no_loc, "@%s: shift amount out of range", name);
  if (bits & KN_KSTATUS_STEP)
    return kn_error(d, NULL, no_loc, "@%s: for step is not positive", name);
  return 0;
}
