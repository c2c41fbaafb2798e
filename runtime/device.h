/* device.h — the devices kiln runs kernels on, as seen by the rest of kiln.
 *
 * The runtime knows nothing of the tile IR or of LLVM: a device receives finished code (for the
 * host, a function pointer produced by the compiler's JIT) and a grid.  Only the host device
 * exists so far; HIP and CUDA devices (dlopen'ed drivers) will sit beside it behind the same
 * kind of calls.
 *
 * Host kernel ABI (what compiler/lower_host.c emits, see compiler/target.h):
 *   void kernel(const void *args, int32_t px, int32_t py, int32_t pz,
 *               int32_t nx, int32_t ny, int32_t nz);
 * `args` points at the kernel arguments (for kiln kernels an array of 8-byte kn_argval), (px,
 * py, pz) is the program id and (nx, ny, nz) the grid.
 *
 * Threads: kn_host_launch() runs the grid on a pool of worker threads (one per online CPU, or
 * $KILN_HOST_THREADS), each taking a contiguous chunk of the linearised program ids (x fastest).
 * Kernels keep their tiles on the stack, so every program instance runs on a pool thread whose
 * stack is KN_HOST_STACK_BYTES, never on the caller's (possibly small) stack.  Launches from
 * several threads are serialised; the call returns when the whole grid has run.
 *
 * Errors: a kn_status with a kn_diag (base/status.h), as everywhere below the API.
 */
#ifndef KILN_DEVICE_H
#define KILN_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* stack of every worker thread: room for a kernel's tile buffers (the lowering refuses kernels
 * whose tiles need more than KN_HOST_TILE_BYTES_MAX) */
#define KN_HOST_STACK_BYTES ((size_t)64 << 20)
#define KN_HOST_TILE_BYTES_MAX ((size_t)48 << 20)

typedef void (*kn_host_kernel_fn)(const void *args, int32_t px, int32_t py, int32_t pz,
                                  int32_t nx, int32_t ny, int32_t nz);

/* host memory: 64-byte aligned, zero-filled; NULL when out of memory (bytes 0 gives a valid
 * pointer) */
void *kn_host_alloc(size_t bytes);
void kn_host_free(void *p);

/* Runs fn over grid[0] x grid[1] x grid[2] program instances on the pool (every dim >= 0; an
 * empty grid runs nothing).  Returns KN_OK, KN_E_INVALID (a bad grid or no function),
 * KN_E_NOMEM, or KN_E_RUNTIME (a worker thread could not be started), with *d. */
kn_status kn_host_launch(kn_host_kernel_fn fn, const void *args, const int grid[3], kn_diag *d);

/* number of worker threads the pool has (or will have) */
int kn_host_threads(void);
/* changes the worker count for later launches (n <= 0: back to the default); joins the old pool */
void kn_host_set_threads(int n);

#ifdef __cplusplus
}
#endif
#endif
