/* fuzz_codeobj.c — libFuzzer target: the AMDGPU code-object reader (`kiln inspect`, the HIP
 * runtime's loader) on any bytes.
 *
 * The input is a file given to `kiln inspect`: kn_codeobj_read (ELF headers, sections, the
 * NT_AMDGPU_METADATA note in MessagePack, the kernel symbols) must answer 0 or -1 with a message,
 * never crash or read outside the bytes (ASan).  On 0 what it built must be consistent: every
 * kernel found by its own name, its arguments counted as described, its code inside the file,
 * its strings terminated; the stats table keeps snprintf's contract (the length it needs, the
 * same text into any smaller buffer, cut); and the HIP runtime's kernarg packer, given every
 * explicit argument at the size the metadata says, either packs a segment of exactly
 * kernarg_size bytes or refuses with a message.  The disassembler (LLVM's, which
 * kn_codeobj_parse adds for the MFMA count) is not fuzzed here: kiln runs it in a child process
 * (docs/hostile_inputs.md), so its crashes cannot take kiln down.
 * Seeds: code objects of `kiln compile` for every AMDGPU target and tests/hostile (fuzz/run.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codeobj.h"
#include "hip_device.h"

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "fuzz_codeobj: %s\n", what);
  abort();
}

static int terminated(const char *s, size_t n) { return memchr(s, 0, n) != NULL; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kn_codeobj co;
  kn_diag d;
  if (kn_codeobj_read(data, size, &co, &d)) {
    check(d.message[0] != 0, "an error without a message");
    return 0;
  }
  check(co.nkernels >= 0 && (co.nkernels == 0 || co.kernels), "kernel count");
  check(terminated(co.target_id, sizeof co.target_id), "target id not terminated");
  static uint8_t zeros[KN_HIP_KERNARG_MAX];
  static _Alignas(16) uint8_t segment[KN_HIP_KERNARG_MAX];
  for (int i = 0; i < co.nkernels; i++) {
    const kn_codeobj_kernel *k = &co.kernels[i];
    check(terminated(k->name, sizeof k->name) && terminated(k->symbol, sizeof k->symbol),
          "kernel name not terminated");
    check(kn_codeobj_find(&co, k->name) != NULL, "a kernel not found by its own name");
    check(k->nargs >= 0 && k->nhidden >= 0 && k->nhidden <= k->nargs &&
          (k->nargs == 0 || k->args), "argument counts");
    check(k->code_size == 0 || (k->code_offset <= size && k->code_size <= size - k->code_offset),
          "code outside the file");
    int nexplicit = 0;
    for (int a = 0; a < k->nargs; a++) {
      check(terminated(k->args[a].name, sizeof k->args[a].name) &&
            terminated(k->args[a].value_kind, sizeof k->args[a].value_kind),
            "argument strings not terminated");
      nexplicit += !k->args[a].hidden;
    }
    check(nexplicit == k->nargs - k->nhidden, "hidden arguments miscounted");
    /* every explicit argument at its declared size (zeros: the value does not matter) */
    kn_hip_arg *args = calloc((size_t)nexplicit + 1, sizeof *args);
    check(args != NULL, "out of memory");
    for (int a = 0, e = 0; a < k->nargs; a++)
      if (!k->args[a].hidden) {
        uint32_t n = k->args[a].size;
        args[e++] = (kn_hip_arg){.value = n <= sizeof zeros ? zeros : NULL, .size = n};
      }
    size_t packed = 0;
    kn_status s = kn_hip_pack_kernargs(k, (unsigned[]){2, 1, 1}, (unsigned[]){64, 1, 1}, 0, args,
                                       nexplicit, segment, &packed, &d);
    check(s != KN_OK || packed == k->kernarg_size, "packed a segment of another size");
    check(s == KN_OK || d.message[0], "a refused packing without a message");
    free(args);
  }
  /* the stats table: snprintf's contract */
  static char big[1 << 16], small[1 << 16];
  int need = kn_codeobj_format_stats(&co, big, sizeof big);
  check(need >= 0, "negative stats length");
  if ((size_t)need < sizeof big) {
    check(strlen(big) == (size_t)need, "stats length is not the text's");
    size_t cut = size ? data[size - 1] % ((size_t)need + 1) : 0;
    int again = kn_codeobj_format_stats(&co, small, cut + 1);
    check(again == need && strlen(small) == cut && !memcmp(small, big, cut),
          "the stats cut to a smaller buffer differ");
  }
  kn_codeobj_free(&co);
  return 0;
}
