/* fuzz_cache.c — libFuzzer target: the code cache's entry reader on any bytes.
 *
 * The input is written as the file of one entry in a private cache directory, then read through
 * kn_cache_get: the answer must be KN_OK with exactly the payload the header describes, or
 * KN_E_CORRUPT (the file then removed) or KN_MISS, never a crash or an over-read (ASan).  One
 * input in 64 also runs kn_cache_verify and kn_cache_list over it.  Seeds: fuzz/run.sh writes
 * a valid entry and some damaged ones.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"

static kn_cache *cache;
static char entry[512];
static kn_cache_key key;

static void init(void) {
  static char dir[256];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/kiln-fuzz-cache-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) abort();
  kn_cache_config cfg = {.dir = dir, .max_bytes = (uint64_t)64 << 20};
  kn_diag d;
  if (kn_cache_open(&cfg, &cache, &d) != KN_OK) abort();
  for (int i = 0; i < 16; i++) key.b[i] = (uint8_t)(0x11 * i);
  char hex[33];
  kn_cache_key_hex(&key, hex);
  snprintf(entry, sizeof entry, "%s/objects-v1/%s", dir, hex);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!cache) init();
  FILE *f = fopen(entry, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  fclose(f);
  void *payload = NULL;
  size_t n = 0;
  kn_diag d;
  kn_status s = kn_cache_get(cache, &key, &payload, &n, &d);
  if (s == KN_OK) {
    /* a good entry is the header and exactly the payload it describes */
    if (n + KN_CACHE_HEADER_BYTES != size || memcmp(payload, data + KN_CACHE_HEADER_BYTES, n))
      abort();
  } else if (s != KN_E_CORRUPT && s != KN_MISS) {
    fprintf(stderr, "fuzz_cache: kn_cache_get: %s: %s\n", kn_status_str(s), d.message);
    abort();
  } else if (s == KN_E_CORRUPT && !access(entry, F_OK) && !strstr(d.message, "could not be")) {
    abort(); /* said removed, still there */
  }
  free(payload);
  if ((data[0 % (size ? size : 1)] & 63) == 0 && size) {
    kn_cache_report r;
    kn_cache_entry *list;
    size_t count;
    kn_cache_verify(cache, &r, &d);
    if (kn_cache_list(cache, &list, &count, &d) == KN_OK) free(list);
  }
  return 0;
}
