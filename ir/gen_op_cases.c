/* gen_op_cases.c — writes op_cases.h, the case lists of ops.def, at build time.
 *
 *   gen_op_cases OUT.h
 *
 * A switch over kn_opcode has no `default`, so that -Wswitch (in -Wall) names every op a stage
 * forgot.  A switch about one family of ops (the binary arithmetic of a lowering, say) still has
 * to name all the others; it does so with one of these lists, which follow the table:
 *
 *   KN_CASES_BINARY           the ops with KN_BINARY
 *   KN_CASES_UNARY            the ops with KN_UNARY
 *   KN_CASES_MATH             the unary ops with a KN_MATH entry (computed as the table says)
 *   KN_CASES_NOT_BINARY       every op without KN_BINARY
 *   KN_CASES_NOT_UNARY        every op without KN_UNARY
 *   KN_CASES_NOT_ELEMENTWISE  every op with neither
 *
 * each expanding to "case KN_OP_X: case KN_OP_Y: ...".  A new binary op then lands in
 * KN_CASES_BINARY (the top-level switches send it to the binary code) and in no NOT_BINARY list,
 * so every binary switch that does not handle it is a warning (an error with KILN_WERROR); a new
 * op of no family lands in the NOT_ lists and only the top-level switches must name it.
 */
#include <stdio.h>

#include "ir.h"

typedef struct op_row {
  const char *e;
  unsigned flags;
  bool math;
} op_row;

static const op_row rows[] = {
#define KN_NOMATH false
#define KN_MATH(fn, host, gpu) true
#define KN_OP(e, name, nopnd, nres, flags, syntax, math, exact) {#e, flags, math},
#include "ops.def"
#undef KN_OP
#undef KN_MATH
#undef KN_NOMATH
};

enum { NROWS = sizeof rows / sizeof rows[0] };

typedef bool (*pick)(const op_row *r);
static bool binary(const op_row *r) { return r->flags & KN_BINARY; }
static bool unary(const op_row *r) { return r->flags & KN_UNARY; }
static bool math(const op_row *r) { return unary(r) && r->math; }
static bool not_binary(const op_row *r) { return !binary(r); }
static bool not_unary(const op_row *r) { return !unary(r); }
static bool not_elementwise(const op_row *r) { return !binary(r) && !unary(r); }

static void list(FILE *f, const char *name, pick p) {
  fprintf(f, "#define %s", name);
  int on_line = 4;
  for (int i = 0; i < NROWS; i++) {
    if (!p(&rows[i])) continue;
    if (on_line == 4) {
      fprintf(f, " \\\n ");
      on_line = 0;
    }
    fprintf(f, " case KN_OP_%s:", rows[i].e);
    on_line++;
  }
  fprintf(f, "\n\n");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: gen_op_cases OUT.h\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "w");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  fprintf(f, "/* op_cases.h — generated from ir/ops.def by ir/gen_op_cases.c; do not edit. */\n"
             "#ifndef KILN_OP_CASES_H\n#define KILN_OP_CASES_H\n\n");
  list(f, "KN_CASES_BINARY", binary);
  list(f, "KN_CASES_UNARY", unary);
  list(f, "KN_CASES_MATH", math);
  list(f, "KN_CASES_NOT_BINARY", not_binary);
  list(f, "KN_CASES_NOT_UNARY", not_unary);
  list(f, "KN_CASES_NOT_ELEMENTWISE", not_elementwise);
  fprintf(f, "#endif\n");
  return fclose(f) ? 1 : 0;
}
