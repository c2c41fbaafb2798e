/* aot_emit.c — placeholder */
#include "aot.h"
#include <stdio.h>
int aot_emit_c(const aot_build *b, const char *out_dir, const char *name, char *err, size_t n) {
  (void)b, (void)out_dir, (void)name;
  snprintf(err, n, "not written yet");
  return -1;
}
