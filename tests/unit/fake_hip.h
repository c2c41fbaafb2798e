/* fake_hip.h — the test side of the stand-in libamdhip64 (fake_hip.c).
 *
 * The stand-in validates every call against the code object it was given and decodes the
 * kernarg segment by the metadata's argument list; the numbers come from a *runner* the test
 * registers (kn_fake_hip_set_runner, found with dlsym in the loaded stand-in): it receives the
 * decoded explicit arguments and runs the emulated twin of the same kernel (tests/unit/
 * test_api_hip.c: the kernel's tile IR compiled for <chip>-emu, after checking that the same IR
 * compiled for <chip> gives exactly the launched code object's bytes).  Without a runner a
 * launch fails.
 */
#ifndef KILN_FAKE_HIP_H
#define KILN_FAKE_HIP_H

#include <stddef.h>
#include <stdint.h>

#include "codeobj.h"
#include "interp.h" /* kn_region */

typedef struct kn_fake_hip_launch {
  const void *code_object;          /* the bytes hipModuleLoadData was given */
  size_t code_object_size;
  const kn_codeobj_kernel *meta;    /* the launched kernel's metadata */
  int nvalues;                      /* explicit arguments, in metadata order */
  const uint64_t *values;           /* each read at its .offset, .size bytes, zero-extended */
  unsigned grid[3], block[3];
  const kn_region *regions;         /* every live allocation ("device memory") */
  int nregions;
} kn_fake_hip_launch;

/* 0, or nonzero with why (the launch then fails with hipErrorLaunchFailure) */
typedef int (*kn_fake_hip_runner)(void *user, const kn_fake_hip_launch *l, char *why, size_t n);

/* exported by the stand-in */
typedef void (*kn_fake_hip_set_runner_fn)(kn_fake_hip_runner fn, void *user);
typedef const char *(*kn_fake_hip_last_error_fn)(void);
typedef int (*kn_fake_hip_launches_fn)(void);

#endif
