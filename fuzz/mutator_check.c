/* mutator_check.c — fuzz_ir's structure-aware mutator on edge-case texts, outside libFuzzer.
 *
 * A crash in LLVMFuzzerCustomMutator is not a finding in kiln but it ends a campaign and
 * leaves an empty artifact (libFuzzer dumps the unit it last executed, and none was being
 * executed): the 2026-12-03 long run lost fuzz_ir that way to a read past the input.  run.sh
 * builds this with fuzz_ir.c under ASan + UBSan (no libFuzzer: LLVMFuzzerMutate is a stub that
 * keeps the bytes) and runs every mutation on inputs allocated to their exact size, heads without
 * a '(' or a body, lines without a newline, at the end of the input.  Exit 0, or the sanitizer's
 * report. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned seed);

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size) {
  (void)data, (void)max_size;
  return size;
}

int main(void) {
  static const char *const texts[] = {
      "func @f\n}", "kernel @k\n}\n", "func @f() {\n}", "func @f(\n}",
      "func @g {\n  %a = const 1 : i32\n}", "kernel @k() attrs {\n}",
      "func @f() {\n  %a, %b = foo\n}\n", "func @", "kernel @k() {", "}\nfunc @f() {\n}"};
  for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++)
    for (unsigned seed = 1; seed <= 4000; seed++) {
      size_t n = strlen(texts[t]);
      for (size_t room = n; room <= n + 4096; room += 4096) {
        uint8_t *d = malloc(room);  /* exactly the input (room = n), then with room to grow */
        if (!d) return 2;
        memcpy(d, texts[t], n);
        size_t m = LLVMFuzzerCustomMutator(d, n, room, seed);
        if (m > room) {
          fprintf(stderr, "mutator_check: %zu bytes into a buffer of %zu\n", m, room);
          return 1;
        }
        free(d);
      }
    }
  puts("mutator_check: ok");
  return 0;
}
