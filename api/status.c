/* status.c — the one place where kiln's internal statuses (kn_status, base/status.h) become the
 * public kiln_status codes (include/kiln.h).
 *
 * Outcomes that are not errors (a cache miss, a put that could not store, a recreated tuning
 * database, a kept record) are KILN_OK: they never fail the caller's request.  Errors map one to
 * one where the public API has the same kind; the rest are the nearest public kind: corrupt
 * stored data is an i/o problem to the caller, ptxas or a driver refusing code is a compile
 * failure.  The message is the kn_diag's, which the caller passes to api_fail().
 */
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
