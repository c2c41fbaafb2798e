/* host_run.h — running host-compiled code: the kernel's status word, and checked mode.
 *
 * Every host launch (a JIT'ed kn_kernel, a loaded kn_host_object) goes through kn_host_run():
 * clear the kernel's status word, run the grid on the host pool (runtime/host.c), turn the
 * KN_KSTATUS_* bits the programs set into one error naming the kernel.
 *
 * Checked mode (kn_compile_options.check_bounds).  The lowering (lower_host.c) then guards every
 * global load and store of a live element (a masked-off or out-of-`bound` element is never
 * touched, so never checked, exactly as in the interpreter) with a call of
 *     i32 kn_rt_check_access(ptr check, ptr site, i64 addr, i64 bytes, i64 i, i64 j,
 *                            i32 px, i32 py, i32 pz)
 * which answers 1 when [addr, addr + bytes) lies inside one region of the launch, else records
 * the violation and answers 0: the access is then skipped (a load gives `other`, or 0), so a
 * checked kernel never touches memory outside the caller's buffers and never crashes on it.
 * `check` is the launch's kn_host_check, passed as one more kernel argument after the
 * parameters: a checked kernel's args are args[0 .. nparams) then args[nparams].p = the checker
 * (kn_host_run appends it), so one compiled kernel can run several launches at once with no
 * shared state but its status word.  `site` is a constant kn_check_site of the lowered module
 * (the op and its location); (i, j) is the element (j = -1 for a rank-1 access) and (px, py, pz)
 * the program.
 *
 * Of the violations of a launch the one reported is the first the interpreter would report: the
 * lowest linear program id (x fastest), and within that program the first in program order (a
 * program runs on one thread, in order).  The message names the kernel, the op and its location,
 * the element, the program, the address, and the nearest region ("N bytes past the end of
 * buffer k (B bytes at 0x...)").  A checked launch with no regions checks nothing (as the
 * emulator with regions == NULL).
 */
#ifndef KILN_HOST_RUN_H
#define KILN_HOST_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "device.h"
#include "interp.h"

/* one checked load or store of a lowered module; the lowering emits it as {ptr, ptr, i32, i32} */
typedef struct kn_check_site {
  const char *op;     /* "load" or "store" */
  const char *file;   /* the op's file (or the module's name), may be NULL */
  int32_t line, col;  /* 0 when unknown */
} kn_check_site;

/* the helper checked code calls (an absolute JIT symbol, jit.c) */
int32_t kn_rt_check_access(void *check, const kn_check_site *site, uint64_t addr, int64_t bytes,
                           int64_t i, int64_t j, int32_t px, int32_t py, int32_t pz);

/* Runs fn over grid on the host pool.  name is how errors name the kernel ("@attn_fwd"); status
 * is the kernel's status word (or NULL).  A checked kernel (checked) gets its args extended by
 * the checker, for which it needs nparams; regions may then be NULL (nothing checked).  Returns
 * 0, or -1 with *d: a launch failure, the first out-of-bounds access, a status bit. */
int kn_host_run(const char *name, kn_host_kernel_fn fn, int *status, const kn_argval *args,
                int nparams, const int grid[3], bool checked, const kn_region *regions,
                int nregions, kn_diag *d);

#endif
