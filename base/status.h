/* status.h — the one status and message convention of kiln below the public API.
 *
 * A call that can fail returns a kn_status and, when given a kn_diag, writes what happened into
 * it: the runtime (host pool, CUDA driver, code cache, device discovery), the tuning database
 * and the ptxas check all work this way.  The IR and the compiler use the same carrier: they
 * return 0 or -1 with a kn_diag that also has a source location (kn_error, ir/ir.h), -1 meaning
 * "the input was rejected" (KN_E_COMPILE, or KN_E_INVALID for malformed IR, to the caller).
 * The only translation to the public kiln_status codes is api_status_of() in api/status.c.
 *
 * kn_status: 0 is success.  Negative values are errors, one per kind of failure a caller may
 * handle differently.  Positive values are outcomes that are not errors: the call did what it
 * could and the caller carries on (a cache miss, a put the disk refused); kn_status_failed()
 * tells them apart.  Which statuses a call returns is documented with the call.
 *
 * kn_diag: the message (at most 511 bytes) and its rendered form (with the location, or
 * "error: " when there is none, at most 2047 bytes: long texts such as a driver's JIT log are
 * kept whole there).  A call fills it for every error and for outcomes with something to say;
 * a NULL kn_diag is allowed wherever one is taken.  Nothing below the API prints: callers decide
 * what to show.  This header depends on nothing but the C library, so every layer may use it.
 */
#ifndef KILN_STATUS_H
#define KILN_STATUS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_status {
  KN_OK = 0,
  /* outcomes: not errors */
  KN_MISS = 1,           /* nothing is stored under the key (code cache, tuning database) */
  KN_NOT_STORED = 2,     /* a write could not be made (read-only, full disk, quota); nothing
                            was left behind, the caller continues without it */
  KN_RECREATED = 3,      /* an unusable store was moved aside and a fresh one made */
  KN_NOT_REPLACED = 4,   /* a better record is already stored and was kept */
  /* errors */
  KN_E_INVALID = -1,     /* a bad argument from the caller */
  KN_E_UNSUPPORTED = -2, /* well formed, but not something this kiln can do (a newer schema) */
  KN_E_NODEV = -3,       /* a device, driver or tool is not present on this machine */
  KN_E_COMPILE = -4,     /* code was rejected (the driver's JIT, ptxas) */
  KN_E_RUNTIME = -5,     /* a driver call, a launch or a worker thread failed */
  KN_E_IO = -6,          /* files, directories, pipes, subprocesses, a database */
  KN_E_NOMEM = -7,       /* host or device memory exhausted */
  KN_E_CORRUPT = -8,     /* stored or reported data is malformed (a cache entry, a tool's report) */
  KN_E_INSECURE = -9,    /* a directory others may write into, or not ours: refused */
} kn_status;

static inline bool kn_status_failed(kn_status s) { return s < 0; }

/* "ok", "not stored", "i/o error", ... */
const char *kn_status_str(kn_status s);

typedef struct kn_loc {
  const char *file;  /* NULL for built IR */
  int line, col;     /* 1-based; 0 when unknown */
} kn_loc;

typedef struct kn_diag {
  kn_loc loc;
  char message[512];   /* just the message, e.g. "unknown op 'fooo'" */
  char rendered[2048]; /* "file:line:col: error: message\n<source line>\n<caret line>\n", or
                          "error: message\n" without a location */
} kn_diag;

/* Writes a message without a location into d (when not NULL); returns s, so that a call can
 * `return kn_diag_set(d, KN_E_IO, "cannot open %s: %s", path, strerror(errno));`. */
kn_status kn_diag_set(kn_diag *d, kn_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* empties d (when not NULL): no message */
void kn_diag_clear(kn_diag *d);

#ifdef __cplusplus
}
#endif
#endif
