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
 * is KN_PTXAS_NOT_FOUND with "ptxas not found (set KILN_PTXAS)", which callers treat as
 * "check skipped".  Calls are independent and may run on several threads at once.  Nothing here
 * prints or exits.
 */
#ifndef KILN_PTXAS_H
#define KILN_PTXAS_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_ptxas_status {
  KN_PTXAS_OK = 0,
  KN_PTXAS_NOT_FOUND = -1, /* no ptxas: skip the check */
  KN_PTXAS_EFAIL = -2,     /* ptxas rejected the PTX (or crashed); the message has its output */
  KN_PTXAS_EIO = -3,       /* temporary files, pipes or the spawn failed */
  KN_PTXAS_EINVAL = -4,    /* a bad argument (no PTX, an arch ptxas cannot be asked for) */
  KN_PTXAS_ENOMEM = -5,
  KN_PTXAS_EPARSE = -6,    /* ptxas succeeded but its -v report could not be read */
} kn_ptxas_status;

const char *kn_ptxas_status_str(int status);

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
  int opt_level;         /* -O0..-O3; values outside 0..3 mean 3 */
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

/* Finds ptxas (see above); writes its path.  KN_PTXAS_OK or KN_PTXAS_NOT_FOUND with msg. */
int kn_ptxas_find(char *path, size_t path_size, char *msg, size_t msg_size);

/* Assembles `len` bytes of PTX text with `ptxas -arch=<arch> -O<n> -v`.  On success fills *out
 * (free it with kn_ptxas_result_free).  On failure returns a status and writes a message to msg
 * (ptxas's own error lines for KN_PTXAS_EFAIL); *out is left empty. */
int kn_ptxas_run(const char *ptx, size_t len, const kn_ptxas_options *opts,
                 kn_ptxas_result *out, char *msg, size_t msg_size);
void kn_ptxas_result_free(kn_ptxas_result *r);

/* the entry of kernel `name` in r, or NULL */
const kn_ptxas_kernel *kn_ptxas_find_kernel(const kn_ptxas_result *r, const char *name);

/* Parses a ptxas -v log into kernels (malloc'd array; *n entries).  Returns KN_PTXAS_OK,
 * KN_PTXAS_ENOMEM, or KN_PTXAS_EPARSE when a function's report is incomplete.  Exposed for
 * tests and for logs captured elsewhere (nvcc -Xptxas -v). */
int kn_ptxas_parse(const char *log, kn_ptxas_kernel **out, int *n);

#ifdef __cplusplus
}
#endif
#endif
