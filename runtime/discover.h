/* discover.h — which devices this machine has, found at run time.
 *
 * GPU drivers are found by dlopen only: kiln has no link-time dependency on ROCm or CUDA, so one
 * build serves every machine.  A driver library that is missing, fails to initialise or reports
 * no device is "not present" (KN_E_NODEV), with the reason (the dlopen error, or the driver's
 * own error string) in the report's kn_diag for `kiln targets`; discovery never crashes and
 * never prints.  The host (the CPU running kiln) is always present and always listed last.
 *
 *   HIP   libamdhip64.so, .so.7, .so.6, .so.5 (the first that loads), or $KILN_HIP_LIBRARY
 *   CUDA  libcuda.so.1 (the driver API, not the runtime), or $KILN_CUDA_LIBRARY
 * Setting either variable to "none" skips that driver ("disabled by KILN_..._LIBRARY=none").
 *
 * A driver library that loaded and initialised stays loaded for the life of the process: both
 * runtimes start threads and register exit handlers, and unloading them under those is a crash.
 *
 * The runtime knows nothing of the IR; the `target` of a device is the name the compiler's
 * target table uses ("gfx942", "sm_90a", "host"), empty when kiln has no code generator for it.
 */
#ifndef KILN_DISCOVER_H
#define KILN_DISCOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_MAX_DEVICES 33 /* 16 per GPU driver, and the host */

typedef enum kn_device_kind {
  KN_DEVICE_HOST = 0, /* the CPU, through the ORC JIT */
  KN_DEVICE_HIP,      /* an AMD GPU through libamdhip64 */
  KN_DEVICE_CUDA,     /* an NVIDIA GPU through libcuda */
} kn_device_kind;

typedef struct kn_device_info {
  kn_device_kind kind;
  int ordinal;              /* the driver's device index (0 for the host) */
  char name[128];           /* "AMD Instinct MI300X", "NVIDIA H200", CPU model name */
  char arch[64];            /* "gfx942", "sm_90", "x86_64" */
  char arch_features[64];   /* AMD target features, e.g. "sramecc+:xnack-" ("" otherwise) */
  char target[16];          /* the kiln target that runs on it, "" when none */
  int compute_units;        /* CUs, SMs, or online CPU cores */
  int cc_major, cc_minor;   /* CUDA compute capability (0 for others) */
  uint64_t memory_bytes;    /* device memory, or the host's physical memory */
} kn_device_info;

typedef struct kn_driver_report {
  bool loaded;              /* the library was found and its entry points resolved */
  kn_status status;         /* KN_OK: loaded, initialised, and at least one device; else
                               KN_E_NODEV (or KN_E_NOMEM) with why */
  int device_count;
  int version;              /* the driver's version number when it reports one, else 0 */
  char library[256];        /* the library loaded, or the last one tried */
  kn_diag why;              /* why not present; empty when present */
} kn_driver_report;

typedef struct kn_device_list {
  int n;
  kn_device_info dev[KN_MAX_DEVICES]; /* HIP devices, CUDA devices, then the host */
  kn_driver_report hip, cuda;
} kn_device_list;

/* Fills *out.  Always succeeds: missing drivers are reported in out->hip/cuda (their status and
 * why) and the host is always there.  It initialises the drivers, which can take a fraction of
 * a second; callers keep the result. */
void kn_discover(kn_device_list *out);

/* the device kiln should use when the target is "auto": an AMD GPU with a supported gfx, else
 * an NVIDIA GPU of compute capability 8.0 or later, else the host.  Never NULL for a list filled
 * by kn_discover. */
const kn_device_info *kn_discover_best(const kn_device_list *list);

/* the kiln target for an AMD arch name ("gfx942" -> "gfx942"; "" when unsupported) and for a
 * CUDA compute capability (9.0 -> "sm_90a", 8.x and other 9+ -> "sm_80", older -> "") */
const char *kn_discover_amd_target(const char *gfx);
const char *kn_discover_cuda_target(int cc_major, int cc_minor);

const char *kn_device_kind_str(kn_device_kind kind);

#ifdef __cplusplus
}
#endif
#endif
