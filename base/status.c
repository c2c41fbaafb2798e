/* status.c — kn_status names and location-free kn_diag messages (status.h).
 *
 * The message is formatted once into `rendered` behind "error: " (the long form) and copied,
 * cut to fit, into `message`, so a text longer than the message keeps its tail in `rendered`.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "status.h"

const char *kn_status_str(kn_status s) {
  switch (s) {
  case KN_OK: return "ok";
  case KN_MISS: return "not found";
  case KN_NOT_STORED: return "not stored";
  case KN_RECREATED: return "recreated";
  case KN_NOT_REPLACED: return "not replaced";
  case KN_E_INVALID: return "invalid argument";
  case KN_E_UNSUPPORTED: return "unsupported";
  case KN_E_NODEV: return "not present";
  case KN_E_COMPILE: return "compile failed";
  case KN_E_RUNTIME: return "runtime failure";
  case KN_E_IO: return "i/o error";
  case KN_E_NOMEM: return "out of memory";
  case KN_E_CORRUPT: return "corrupt data";
  case KN_E_INSECURE: return "insecure location refused";
  }
  return "unknown status";
}

kn_status kn_diag_set(kn_diag *d, kn_status s, const char *fmt, ...) {
  if (!d) return s;
  static const char prefix[] = "error: ";
  memcpy(d->rendered, prefix, sizeof prefix);
  size_t at = sizeof prefix - 1, room = sizeof d->rendered - at - 1; /* keep one for '\n' */
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(d->rendered + at, room + 1, fmt, ap);
  va_end(ap);
  size_t len = n < 0 ? 0 : (size_t)n > room ? room : (size_t)n;
  snprintf(d->message, sizeof d->message, "%.*s", (int)len, d->rendered + at);
  d->rendered[at + len] = '\n';
  d->rendered[at + len + 1] = 0;
  d->loc = (kn_loc){0};
  return s;
}

void kn_diag_clear(kn_diag *d) {
  if (!d) return;
  d->loc = (kn_loc){0};
  d->message[0] = 0;
  d->rendered[0] = 0;
}
