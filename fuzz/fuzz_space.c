/* fuzz_space.c — libFuzzer target: the tuning-space parser (autotune/space.c) on any text.
 *
 * kn_space_apply over the host's default space: KN_OK with a space of 1..4096 points whose
 * every point reads back, or KN_E_INVALID with a message; never a crash.  kn_space_describe of
 * the result must fit its buffer.  Seeds: fuzz/run.sh writes a few specs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *spec = malloc(size + 1);
  if (!spec) abort();
  memcpy(spec, data, size);
  spec[size] = 0;
  kn_space s;
  kn_diag d;
  if (kn_space_default(&s, "fwd", NULL, &d) != KN_OK) abort();
  kn_status st = kn_space_apply(&s, spec, &d);
  if (st == KN_OK) {
    int n = kn_space_size(&s);
    if (n < 1 || n > KN_SPACE_MAX_CANDIDATES) abort();
    for (int i = 0; i < n; i += 1 + n / 16) {
      kn_tune_config c;
      kn_space_point(&s, i, &c);
    }
    char text[1024];
    kn_space_describe(&s, text, sizeof text);
  } else if (st != KN_E_INVALID || !d.message[0]) {
    abort();
  }
  free(spec);
  return 0;
}
