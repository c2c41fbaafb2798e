/* status.c — the one place where kiln's internal statuses (kn_status, base/status.h) become the
 * public kiln_status codes (include/kiln.h).
 *
 * Outcomes that are not errors (a cache miss, a put that could not store, a recreated tuning
 * database, a kept record) are KILN_OK: they never fail the caller's request.  Errors map one to
 * one where the public API has the same kind; the rest are the nearest public kind: corrupt
 * stored data is an i/o problem to the caller, ptxas or a driver refusing code is a compile
 * failure.  The message is the kn_diag's, which the caller passes to api_fail().
 *
 * Also the thread-local error message itself (api_fail, kiln_last_error) and the status names,
 * so that the argument checks of args.c need nothing of kiln.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api.h"

kiln_status api_status_of(kn_status s) {
  switch (s) {
  case KN_OK:
  case KN_MISS:
  case KN_NOT_STORED:
  case KN_RECREATED:
  case KN_NOT_REPLACED: return KILN_OK;
  case KN_E_INVALID: return KILN_ERR_INVALID;
  case KN_E_UNSUPPORTED: return KILN_ERR_UNSUPPORTED;
  case KN_E_NODEV: return KILN_ERR_NO_DEVICE;
  case KN_E_COMPILE: return KILN_ERR_COMPILE;
  case KN_E_RUNTIME: return KILN_ERR_RUNTIME;
  case KN_E_IO:
  case KN_E_CORRUPT: return KILN_ERR_IO;
  case KN_E_NOMEM: return KILN_ERR_NOMEM;
  case KN_E_INSECURE: return KILN_ERR_INSECURE;
  }
  return KILN_ERR_RUNTIME;
}

/* ---- errors ---- */

static _Thread_local char tl_error[API_ERROR_MAX];

const char *kiln_last_error(void) { return tl_error; }

kiln_status api_fail(kiln_status s, const char *fmt, ...) {
  /* formatted apart first: an argument may be kiln_last_error() itself (a prefixed message) */
  char buf[sizeof tl_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  memcpy(tl_error, buf, sizeof buf);
  return s;
}

const char *kiln_status_str(kiln_status s) {
  switch (s) {
  case KILN_OK: return "ok";
  case KILN_ERR_INVALID: return "invalid argument";
  case KILN_ERR_UNSUPPORTED: return "unsupported";
  case KILN_ERR_NO_DEVICE: return "device not present";
  case KILN_ERR_COMPILE: return "compile failed";
  case KILN_ERR_RUNTIME: return "launch failed";
  case KILN_ERR_IO: return "i/o error";
  case KILN_ERR_NOMEM: return "out of memory";
  case KILN_ERR_INSECURE: return "cache directory refused (insecure)";
  }
  return "unknown status";
}
