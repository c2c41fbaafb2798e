/* fuzz_bundle.c — libFuzzer target: the AOT readers (runtime/bundle.c) on any bytes.
 *
 * The same input as an offload bundle (kn_bundle_entries, kn_bundle_find for gfx942: KN_OK with
 * every entry inside the bytes, or an error with a message) and as an index (kn_aot_index_parse:
 * KN_OK, or KN_E_CORRUPT with "file:line:col:"); never a crash or a read outside the input.
 * Seeds: fuzz/run.sh copies the index and a bundle `kiln aot` writes for tests/aot/small.manifest.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* an exact-size copy, so a read past the end is a sanitizer report */
  uint8_t *p = malloc(size ? size : 1);
  if (!p) abort();
  memcpy(p, data, size);
  kn_bundle_part parts[16];
  size_t idl[16];
  int n;
  kn_diag d;
  if (kn_bundle_entries(p, size, parts, idl, 16, &n, &d) == KN_OK) {
    for (int i = 0; i < n; i++)
      if ((const uint8_t *)parts[i].data < p || (const uint8_t *)parts[i].data + parts[i].size > p + size)
        abort();
  } else if (!d.message[0]) {
    abort();
  }
  const void *code;
  size_t cs;
  kn_status s = kn_bundle_find(p, size, "gfx942", &code, &cs, &d);
  if (s == KN_OK && ((const uint8_t *)code < p || (const uint8_t *)code + cs > p + size)) abort();
  if (s != KN_OK && !d.message[0]) abort();
  kn_aot_index ix;
  s = kn_aot_index_parse((const char *)p, size, "f/index.kiln", "f", &ix, &d);
  if (s == KN_OK) kn_aot_index_free(&ix);
  else if (s != KN_E_NOMEM && (s != KN_E_CORRUPT || strncmp(d.message, "f/index.kiln:", 13)))
    abort();
  free(p);
  return 0;
}
