/* fuzz_ir.c — libFuzzer target: the IR front end, the printer round trip and the bounded
 * interpreter on any bytes.
 *
 * The input is a .tile text.  What must hold for every input (an abort otherwise, which libFuzzer
 * reports as a crash, as it does any ASan/UBSan finding): the parser and verifier return (0 or -1
 * with a message, never a crash); a module that verifies prints to text that parses and verifies
 * again and prints the same; each kernel runs on the interpreter over one program with every
 * pointer NULL (no memory: every access is an error, not a crash), integers of 0..3, floats of
 * 0.5, within a step budget of 10^5 (a loop that does not end is an error, not a hang).
 * Seeds: tests/golden and tests/malformed (fuzz/run.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp.h"
#include "ir.h"

static void check(int ok, const char *what, const char *text) {
  if (ok) return;
  fprintf(stderr, "fuzz_ir: %s\n%s\n", what, text ? text : "");
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kn_diag d;
  kn_module *m = kn_parse("fuzz.tile", (const char *)data, size, &d);
  if (!m) return 0;
  if (kn_verify(m, &d)) {
    kn_module_free(m);
    return 0;
  }
  char *a = kn_print(m);
  check(a != NULL, "print failed", NULL);
  kn_module *m2 = kn_parse("fuzz2.tile", a, strlen(a), &d);
  check(m2 != NULL, "the printed text does not parse", a);
  check(kn_verify(m2, &d) == 0, "the printed text does not verify", a);
  char *b = kn_print(m2);
  check(b && !strcmp(a, b), "print(parse(print(m))) != print(m)", a);
  free(b);
  kn_module_free(m2);
  free(a);
  for (int i = 0; i < m->nfuncs; i++) {
    kn_func *k = m->funcs[i];
    if (!k->is_kernel) continue;
    int np = kn_func_nparams(k);
    kn_argval *args = calloc((size_t)np + 1, sizeof *args);
    check(args != NULL, "out of memory", NULL);
    for (int p = 0; p < np; p++) {
      kn_type t = kn_func_param(k, p)->type;
      if (t.kind == KN_TY_PTR) args[p].p = NULL;
      else if (kn_scalar_is_float((kn_scalar)t.elem)) args[p].f = 0.5;
      else args[p].i = p % 4;
    }
    kn_interp_run_budget(k, 0, 100000, args, (int[]){1, 1, 1}, NULL, 0, NULL, &d);
    free(args);
  }
  kn_module_free(m);
  return 0;
}
