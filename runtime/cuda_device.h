/* cuda_device.h — the CUDA device: NVIDIA GPUs through the CUDA driver API, loaded by dlopen.
 *
 * kiln has no link-time dependency on CUDA: runtime/cuda.c dlopens libcuda.so.1 (or
 * $KILN_CUDA_LIBRARY) on the first call that needs it, once per process (pthread_once), and
 * declares the few driver types it uses itself, so neither cuda.h nor a CUDA toolkit is needed
 * to build kiln.  A missing library, a stub library, a failed cuInit or zero devices all give
 * KN_E_NODEV with the reason (the dlopen error names the library tried); nothing here
 * crashes, prints or exits.  Once loaded and initialised the driver stays loaded for the life of
 * the process (it starts threads and registers exit handlers; unloading under them crashes).
 *
 * What it offers is what a kernel runtime needs and no more: device properties, the device's
 * primary context (shared with every other user of the driver in the process, e.g. PyTorch),
 * module load from PTX (the driver JIT-compiles it; its error and info logs are captured) or
 * from a cubin, kernel lookup, launch on a caller's stream, memory, events and streams.
 *
 * Contexts: each call that needs the device's context makes it current for the calling thread
 * only if it is not already, and restores the thread's previous context afterwards, so an
 * embedding application's own context state is left as it was.
 *
 * Threads: every call may be made from any thread, concurrently (the driver is thread-safe).
 * A module and its kernels may be used by many threads at once; unloading a module or closing
 * a device while another thread still uses it is the caller's error, as with the driver.
 *
 * Errors: every call returns a kn_status (base/status.h) and, when err is not NULL, writes into
 * the kn_diag the driver call and its error name, e.g.
 *   "cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)"
 * followed, for a failed PTX load, by the driver JIT's error log (whole in err->rendered, up to
 * its size).  KN_E_NODEV: no libcuda, a stub, cuInit failed, or no device; KN_E_INVALID: a bad
 * argument (NULL, an ordinal out of range, a kernel name the module lacks); KN_E_RUNTIME: a
 * driver call failed; KN_E_COMPILE: the driver could not compile or load a module; KN_E_NOMEM:
 * host or device memory exhausted.
 */
#ifndef KILN_CUDA_H
#define KILN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the driver ---- */

/* Loads and initialises the driver (once; later calls return the first result).  Returns
 * KN_OK when at least one device is present, else KN_E_NODEV with the reason. */
kn_status kn_cuda_init(kn_diag *err);
/* number of devices (0 when not present) */
int kn_cuda_device_count(void);
/* the driver's version (e.g. 13000), 0 when not present */
int kn_cuda_driver_version(void);
/* the library that was loaded (or the last one tried) */
const char *kn_cuda_library(void);

/* ---- devices ---- */

typedef struct kn_cuda_props {
  char name[256];            /* "NVIDIA H200" */
  int cc_major, cc_minor;    /* compute capability, 9 and 0 for Hopper */
  int sm_count;              /* streaming multiprocessors */
  int max_threads_per_block;
  int shared_per_block;      /* bytes a block gets without opting in (48 KiB) */
  int shared_per_block_optin;/* the most dynamic + static shared memory a block can opt into */
  int warp_size;
  uint64_t total_memory;     /* bytes */
} kn_cuda_props;

typedef struct kn_cuda_device kn_cuda_device;

/* Properties of device `ordinal` (no context is created). */
kn_status kn_cuda_device_props(int ordinal, kn_cuda_props *out, kn_diag *err);
/* Retains the primary context of device `ordinal`.  Each open needs one close. */
kn_status kn_cuda_device_open(int ordinal, kn_cuda_device **out, kn_diag *err);
/* Releases the primary context (the driver frees it when its last user releases it). */
void kn_cuda_device_close(kn_cuda_device *dev);
const kn_cuda_props *kn_cuda_device_get_props(const kn_cuda_device *dev);
/* the primary context as the driver's CUcontext, for interoperation */
void *kn_cuda_device_context(const kn_cuda_device *dev);

/* ---- modules and kernels ---- */

typedef struct kn_cuda_module kn_cuda_module;
typedef struct kn_cuda_kernel kn_cuda_kernel;

/* Loads NUL-terminated PTX text; the driver JIT-compiles it for the device.  On failure the
 * message carries the JIT's error log.  The JIT's info log (registers etc., verbose) stays with
 * the module: kn_cuda_module_log(). */
kn_status kn_cuda_module_load_ptx(kn_cuda_device *dev, const char *ptx, kn_cuda_module **out,
                                  kn_diag *err);
/* Loads a cubin (an ELF image made by ptxas for this device's architecture). */
kn_status kn_cuda_module_load_cubin(kn_cuda_device *dev, const void *image, size_t size,
                                    kn_cuda_module **out, kn_diag *err);
/* the JIT's info log of a PTX load ("" for a cubin or when the driver said nothing) */
const char *kn_cuda_module_log(const kn_cuda_module *m);
/* Unloads the module; its kernels become invalid. */
void kn_cuda_module_unload(kn_cuda_module *m);

/* What the driver reports about a loaded kernel. */
typedef struct kn_cuda_kernel_attrs {
  int num_regs;               /* registers per thread */
  int local_bytes;            /* local memory per thread (stack frame, spills) */
  int static_shared_bytes;    /* statically declared shared memory */
  int max_threads_per_block;  /* the most threads a launch of it may have */
} kn_cuda_kernel_attrs;

/* The kernel `name` (an .entry of the module), owned by the module; KN_E_INVALID if none.
 * Looking the same name up twice gives the same kernel. */
kn_status kn_cuda_module_kernel(kn_cuda_module *m, const char *name, kn_cuda_kernel **out,
                                kn_diag *err);
kn_status kn_cuda_kernel_attrs_get(const kn_cuda_kernel *k, kn_cuda_kernel_attrs *out,
                                   kn_diag *err);

/* Streams and events are the driver's CUstream / CUevent.  A NULL stream is the context's
 * legacy default stream. */
typedef struct kn_cuda_stream_ *kn_cuda_stream;
typedef struct kn_cuda_event_ *kn_cuda_event;

/* Launches k over grid x block threads on `stream` with `dyn_shared` bytes of dynamic shared
 * memory.  params[i] points at the value of the kernel's i-th parameter (the driver's
 * kernelParams convention: a device pointer parameter is passed as a pointer to a kn_cuda_ptr).
 * Above 48 KiB of dynamic shared memory the kernel's limit is raised first
 * (cuFuncSetAttribute), once per kernel and size.  Asynchronous: errors of the kernel itself
 * show at the next synchronising call. */
kn_status kn_cuda_launch(kn_cuda_kernel *k, const unsigned grid[3], const unsigned block[3],
                         unsigned dyn_shared, kn_cuda_stream stream, void **params, kn_diag *err);

/* ---- memory ---- */

typedef uint64_t kn_cuda_ptr; /* the driver's CUdeviceptr */

kn_status kn_cuda_alloc(kn_cuda_device *dev, size_t bytes, kn_cuda_ptr *out, kn_diag *err);
kn_status kn_cuda_free(kn_cuda_device *dev, kn_cuda_ptr p, kn_diag *err);
/* synchronous copies and fill */
kn_status kn_cuda_copy_htod(kn_cuda_device *dev, kn_cuda_ptr dst, const void *src, size_t bytes,
                            kn_diag *err);
kn_status kn_cuda_copy_dtoh(kn_cuda_device *dev, void *dst, kn_cuda_ptr src, size_t bytes,
                            kn_diag *err);
kn_status kn_cuda_copy_dtod(kn_cuda_device *dev, kn_cuda_ptr dst, kn_cuda_ptr src, size_t bytes,
                            kn_diag *err);
kn_status kn_cuda_memset8(kn_cuda_device *dev, kn_cuda_ptr dst, unsigned char value, size_t bytes,
                          kn_diag *err);
/* asynchronous copies on a stream (host memory should be page-locked for real overlap) */
kn_status kn_cuda_copy_htod_async(kn_cuda_device *dev, kn_cuda_ptr dst, const void *src,
                                  size_t bytes, kn_cuda_stream stream, kn_diag *err);
kn_status kn_cuda_copy_dtoh_async(kn_cuda_device *dev, void *dst, kn_cuda_ptr src, size_t bytes,
                                  kn_cuda_stream stream, kn_diag *err);

/* ---- streams and events ---- */

/* a non-blocking stream (does not synchronise with the legacy default stream) */
kn_status kn_cuda_stream_create(kn_cuda_device *dev, kn_cuda_stream *out, kn_diag *err);
void kn_cuda_stream_destroy(kn_cuda_device *dev, kn_cuda_stream s);
kn_status kn_cuda_stream_sync(kn_cuda_device *dev, kn_cuda_stream s, kn_diag *err);
/* waits for all work of the device's context (cuCtxSynchronize) */
kn_status kn_cuda_device_sync(kn_cuda_device *dev, kn_diag *err);

kn_status kn_cuda_event_create(kn_cuda_device *dev, kn_cuda_event *out, kn_diag *err);
void kn_cuda_event_destroy(kn_cuda_device *dev, kn_cuda_event e);
kn_status kn_cuda_event_record(kn_cuda_device *dev, kn_cuda_event e, kn_cuda_stream s,
                               kn_diag *err);
kn_status kn_cuda_event_sync(kn_cuda_device *dev, kn_cuda_event e, kn_diag *err);
/* milliseconds between two recorded, completed events */
kn_status kn_cuda_event_elapsed(kn_cuda_device *dev, kn_cuda_event start, kn_cuda_event end,
                                float *ms, kn_diag *err);

#ifdef __cplusplus
}
#endif
#endif
