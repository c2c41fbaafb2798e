/* kiln.h — the public C API of kiln.
 *
 * This header grows into the JIT service's API (an opaque context, attention descriptors,
 * prepare/forward, status codes with messages).  For now it carries the version and the status
 * codes shared by the library and the command line.
 */
#ifndef KILN_H
#define KILN_H

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

typedef enum kiln_status {
  KILN_OK = 0,            /* success */
  KILN_ERR_INVALID = 1,   /* bad argument or malformed input (IR, descriptor) */
  KILN_ERR_UNSUPPORTED,   /* a valid request kiln cannot serve (shape, dtype, target) */
  KILN_ERR_NO_DEVICE,     /* the requested device or its driver is not present */
  KILN_ERR_COMPILE,       /* the compiler failed; the message says why */
  KILN_ERR_RUNTIME,       /* a launch or memory operation failed */
  KILN_ERR_IO,            /* a file or cache operation failed */
  KILN_ERR_NOMEM,         /* out of memory */
} kiln_status;

#ifdef __cplusplus
}
#endif
#endif
