/* ptxas.h — checking PTX with NVIDIA's assembler, and turning it into a cubin.
 *
 * The CUDA driver JIT-compiles PTX at load time, so kiln never needs ptxas to run a kernel.
 * Where ptxas is installed it is the offline check: it assembles the PTX that the NVPTX target
 * emits for sm_80 or sm_90a, reports per kernel the registers, spill stores/loads, stack frame
 * and shared memory (what the autotuner prunes by, without a GPU), and produces a cubin for
 * `kiln compile --emit cubin`.
 *
 * ptxas is found at run time: $KILN_PTXAS, else `ptxas` on the PATH, else
 * /usr/local/cuda/bin/ptxas.  It is run as a subprocess (posix_spawn, no shell) on a private
 * temporary directory; its output (stdout and stderr together) is kept as the log.  Absent, it
 * is KN_E_NODEV with "ptxas not found (set KILN_PTXAS...)", which callers treat as "check
 * skipped".  Calls are independent and may run on several threads at once.  Nothing here
 * prints or exits.
 *
 * Errors: a kn_status with the message in the caller's kn_diag (base/status.h): KN_E_NODEV (no
 * ptxas), KN_E_COMPILE (ptxas rejected the PTX, or crashed; its error lines follow, whole in
 * `rendered`), KN_E_IO (temporary files, pipes, the spawn), KN_E_INVALID (no PTX, an arch ptxas
 * cannot be asked for), KN_E_NOMEM, KN_E_CORRUPT (ptxas succeeded but its -v report could not be
 * read).
 */
#ifndef KILN_PTXAS_H
#define KILN_PTXAS_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* what ptxas -v says about one entry (or device) function */
typedef struct kn_ptxas_kernel {
  char name[256];
  char arch[16];         /* "sm_90a" */
  int registers;         /* per thread */
  int spill_stores;      /* bytes */
  int spill_loads;       /* bytes */
  int stack_frame;       /* bytes per thread */
  int shared_bytes;      /* static shared memory ("smem") */
  int const_bytes;       /* cmem[0]: the kernel's parameters and constants */
  int barriers;          /* named barriers used */
} kn_ptxas_kernel;

typedef struct kn_ptxas_options {
  const char *arch;      /* "sm_80", "sm_90a", ... (required) */
  int opt_level;         /* -O1..-O3; 0 (what a designated initializer leaves) and any other
                            value mean -O3, as the CUDA driver compiles PTX.  -O0 is not
                            offered: its spills mislead (kernels that spill 28-288 bytes at
                            -O0 have none at -O3) */
  int max_registers;     /* -maxrregcount, 0: no cap */
  bool want_cubin;       /* keep the cubin in the result */
} kn_ptxas_options;

typedef struct kn_ptxas_result {
  kn_ptxas_kernel *kernels;  /* malloc'd, nkernels entries, in ptxas's order */
  int nkernels;
  void *cubin;               /* malloc'd when want_cubin, else NULL */
  size_t cubin_size;
  char *log;                 /* ptxas's whole output, malloc'd ("" when silent) */
  char ptxas[512];           /* the ptxas that ran */
} kn_ptxas_result;

/* Finds ptxas (see above); writes its path.  KN_OK, or KN_E_NODEV with why in *d. */
kn_status kn_ptxas_find(char *path, size_t path_size, kn_diag *d);

/* Assembles `len` bytes of PTX text with `ptxas -arch=<arch> -O<n> -v`.  On success fills *out
 * (free it with kn_ptxas_result_free).  On failure returns a status with the message in *d
 * (ptxas's own error lines for KN_E_COMPILE); *out is left empty. */
kn_status kn_ptxas_run(const char *ptx, size_t len, const kn_ptxas_options *opts,
                       kn_ptxas_result *out, kn_diag *d);
void kn_ptxas_result_free(kn_ptxas_result *r);

/* the entry of kernel `name` in r, or NULL */
const kn_ptxas_kernel *kn_ptxas_find_kernel(const kn_ptxas_result *r, const char *name);

/* Parses a ptxas -v log into kernels (malloc'd array; *n entries).  Returns KN_OK, KN_E_NOMEM,
 * or KN_E_CORRUPT when a function's report is incomplete (naming it in *d).  Exposed for tests
 * and for logs captured elsewhere (nvcc -Xptxas -v). */
kn_status kn_ptxas_parse(const char *log, kn_ptxas_kernel **out, int *n, kn_diag *d);

#ifdef __cplusplus
}
#endif
#endif
