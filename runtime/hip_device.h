/* hip_device.h — the HIP device: AMD GPUs through libamdhip64, loaded with dlopen.
 *
 * Like the CUDA device (cuda_device.h), one build serves every machine: the HIP runtime is found
 * at run time ($KILN_HIP_LIBRARY, else libamdhip64.so, .so.7, .so.6, .so.5: the first that
 * loads), kiln needs no ROCm to build, and a missing runtime or device is KN_E_NODEV with the
 * reason, never a crash.  "none" disables HIP.
 *
 * ROCm 5 and 6 (and 7): only entry points whose name and signature are the same in all of them
 * are used (hipInit, hipGetDeviceCount, hipSetDevice, hipModuleLoadData, hipModuleLaunchKernel,
 * hipMalloc, hipMemcpy, streams, events...).  The one call whose ABI changed, the device
 * properties (ROCm 6 moved gcnArchName; hipGetDevicePropertiesR0600), is discovery's
 * (runtime/discover.c): the API passes the chip it found to kn_hip_device_open.
 *
 * Code objects.  kn_hip_module_load reads the code object with kiln's own reader (codeobj.h,
 * no LLVM): an ELF of the device's chip (EF_AMDGPU_MACH against the device's arch) is checked
 * before the runtime sees it, and the metadata note's kernels and argument lists are kept --
 * as ROCm's comgr reads them where libamd_comgr loads and can read the object, else as kiln's
 * reader does (comgr.h; the same kn_codeobj either way, kn_hip_module_meta_reader says which).  A
 * clang offload bundle (__CLANG_OFFLOAD_BUNDLE__) is accepted too: the entry for the device's
 * chip is taken out of it and loaded as a code object.
 *
 * Kernel arguments.  kn_hip_launch packs the kernarg segment itself from the metadata, exactly as
 * the code object declares it: every explicit argument at its .offset with its .size (the
 * caller's value must have that size), the hidden arguments of code object v5 that describe the
 * launch (hidden_block_count_x/y/z, hidden_group_size_x/y/z, hidden_remainder_x/y/z,
 * hidden_grid_dims, hidden_global_offset_x/y/z, hidden_dynamic_lds_size) at theirs, everything
 * else zero, in a buffer of .kernarg_segment_size bytes aligned to .kernarg_segment_align; it is
 * passed through hipModuleLaunchKernel's `extra` (HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE), so
 * no layout rule of the HIP runtime's own is relied on.  The launch is checked against the
 * kernel's metadata first: workgroup size equal to the kernel's (kiln kernels require exactly
 * their .max_flat_workgroup_size), LDS (static + dynamic) within the chip's, grid within HIP's
 * limits (each dimension's work-items below 2^32).
 *
 * Devices are the runtime's ordinals; the runtime's current device is per thread, so every call
 * that works on a device makes it current first (hipSetDevice, only when another is current).
 * Launches are asynchronous on the caller's hipStream_t (NULL: the null stream); the hot path
 * takes no lock.  Errors: a kn_status with a kn_diag (base/status.h): "call: hipErrorX (text)".
 */
#ifndef KILN_HIP_DEVICE_H
#define KILN_HIP_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "codeobj.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Loads the runtime once per process and counts devices.  KN_OK, or KN_E_NODEV with why. */
kn_status kn_hip_init(kn_diag *err);
int kn_hip_device_count(void);       /* 0 when not present */
int kn_hip_driver_version(void);     /* hipDriverGetVersion, 0 when not present */
const char *kn_hip_library(void);    /* the library loaded or tried */

typedef struct kn_hip_device kn_hip_device;
typedef struct kn_hip_module kn_hip_module;
typedef struct kn_hip_kernel kn_hip_kernel;
typedef struct kn_hip_stream_ *kn_hip_stream; /* the runtime's hipStream_t */
typedef struct kn_hip_event_ *kn_hip_event;   /* hipEvent_t */

/* Opens device `ordinal`, whose chip discovery found (arch "gfx942", or its whole target ID
 * "gfx942:sramecc+:xnack-", which module loads check code objects' features against, comgr.h;
 * kiln must have a registry entry for the chip).  KN_E_INVALID for a bad ordinal,
 * KN_E_UNSUPPORTED for a chip kiln has no target for. */
kn_status kn_hip_device_open(int ordinal, const char *arch, kn_hip_device **out, kn_diag *err);
void kn_hip_device_close(kn_hip_device *dev);
const kn_arch *kn_hip_device_arch(const kn_hip_device *dev);

/* Loads a code object (or an offload bundle holding one for the device's chip) onto dev.
 * KN_E_INVALID: not a code object kiln can read (the reason); KN_E_UNSUPPORTED: one for another
 * chip (both named) or a bundle without the device's; else the runtime's error
 * (hipModuleLoadData).  The bytes are copied; the caller may free them. */
kn_status kn_hip_module_load(kn_hip_device *dev, const void *data, size_t n, kn_hip_module **out,
                             kn_diag *err);
void kn_hip_module_unload(kn_hip_module *m);
/* The kernel `name` of m (owned by m): hipModuleGetFunction and its metadata. */
kn_status kn_hip_module_kernel(kn_hip_module *m, const char *name, kn_hip_kernel **out,
                               kn_diag *err);
const kn_codeobj_kernel *kn_hip_kernel_meta(const kn_hip_kernel *k);
/* who read m's metadata: "comgr" or "kiln"; *why (may be NULL) why not comgr, "" when it did */
const char *kn_hip_module_meta_reader(const kn_hip_module *m, const char **why);

/* One explicit kernel argument: `size` bytes at `value` (little-endian, as the GPU reads it). */
typedef struct kn_hip_arg {
  const void *value;
  uint32_t size;
} kn_hip_arg;

/* The largest kernarg segment kn_hip_launch packs (on the launching thread's stack). */
#define KN_HIP_KERNARG_MAX 4096

/* Packs args[0..nargs) (the kernel's explicit arguments in metadata order) and the hidden
 * arguments into the kernarg segment the metadata describes, checks the launch (see the file
 * comment) and launches grid (workgroups) x block (work-items) on `stream`.  A count or size
 * that disagrees with the metadata, a workgroup size other than the kernel's, too much LDS or a
 * grid beyond the limits is KN_E_INVALID / KN_E_UNSUPPORTED before the runtime is called. */
kn_status kn_hip_launch(kn_hip_kernel *k, const unsigned grid[3], const unsigned block[3],
                        unsigned dyn_lds, kn_hip_stream stream, const kn_hip_arg *args,
                        int nargs, kn_diag *err);
/* The packing alone, into buf (KN_HIP_KERNARG_MAX bytes, aligned to 16); *size gets the
 * segment's size.  (kn_hip_launch's first step; tests read it back.) */
kn_status kn_hip_pack_kernargs(const kn_codeobj_kernel *meta, const unsigned grid[3],
                               const unsigned block[3], unsigned dyn_lds, const kn_hip_arg *args,
                               int nargs, uint8_t *buf, size_t *size, kn_diag *err);

/* Test only (never set outside tests): when > 0, the packing swaps the values of explicit
 * arguments kn_hip_test_swap and kn_hip_test_swap + 1 (of equal size) — a wrong offset, which the
 * numeric tests must catch. */
extern int kn_hip_test_swap;

/* memory, streams, events (on dev) */
kn_status kn_hip_alloc(kn_hip_device *dev, size_t bytes, void **out, kn_diag *err);
kn_status kn_hip_free(kn_hip_device *dev, void *p, kn_diag *err);
kn_status kn_hip_copy_htod(kn_hip_device *dev, void *dst, const void *src, size_t bytes,
                           kn_diag *err);
kn_status kn_hip_copy_dtoh(kn_hip_device *dev, void *dst, const void *src, size_t bytes,
                           kn_diag *err);
kn_status kn_hip_memset8(kn_hip_device *dev, void *dst, unsigned char v, size_t bytes,
                         kn_diag *err);
kn_status kn_hip_stream_create(kn_hip_device *dev, kn_hip_stream *out, kn_diag *err);
void kn_hip_stream_destroy(kn_hip_device *dev, kn_hip_stream s);
kn_status kn_hip_stream_sync(kn_hip_device *dev, kn_hip_stream s, kn_diag *err);
kn_status kn_hip_device_sync(kn_hip_device *dev, kn_diag *err);
kn_status kn_hip_event_create(kn_hip_device *dev, kn_hip_event *out, kn_diag *err);
void kn_hip_event_destroy(kn_hip_device *dev, kn_hip_event e);
kn_status kn_hip_event_record(kn_hip_device *dev, kn_hip_event e, kn_hip_stream s, kn_diag *err);
kn_status kn_hip_event_sync(kn_hip_device *dev, kn_hip_event e, kn_diag *err);
/* milliseconds between two recorded, completed events */
kn_status kn_hip_event_elapsed(kn_hip_device *dev, kn_hip_event a, kn_hip_event b, float *ms,
                               kn_diag *err);

#ifdef __cplusplus
}
#endif
#endif
