/* test_text.c — the text form: printer and parser (ir/print.c, ir/parse.c).
 *
 * Checks that builder-made IR prints and re-parses to the same text, that unnamed and duplicate
 * names print as documented in docs/ir.md, that floats round-trip bit for bit, and that syntax
 * errors come back at the exact line:col with the expected message and a caret under the column.
 * It needs only the IR library (the parser does not verify; the large texts below are verified
 * and run too, since the verifier's and the interpreter's lookups must be linear as well).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "interp.h"
#include "ir.h"

/* print(m), parse that, print again: the two texts must be equal; returns the first text */
static char *roundtrip(const kn_module *m) {
  char *a = kn_print(m);
  assert_non_null(a);
  kn_diag d;
  memset(&d, 0, sizeof d);
  kn_module *m2 = kn_parse("rt.tile", a, strlen(a), &d);
  if (!m2) fail_msg("re-parse failed:\n%s\n%s", a, d.rendered);
  char *b = kn_print(m2);
  assert_string_equal(a, b);
  free(b);
  kn_module_free(m2);
  return a;
}

static kn_module *parse_ok(const char *src) {
  kn_diag d;
  memset(&d, 0, sizeof d);
  kn_module *m = kn_parse("t.tile", src, strlen(src), &d);
  if (!m) fail_msg("parse failed:\n%s", d.rendered);
  return m;
}

/* ---- builder IR through the printer and back ---- */

static void test_builder_roundtrip(void **state) {
  (void)state;
  kn_module *m = kn_module_new("built");
  kn_type f32 = kn_ty_scalar(KN_F32), i32 = kn_ty_scalar(KN_I32);
  kn_type t64 = kn_ty_tile1(KN_F32, 64), t2 = kn_ty_tile2(KN_F16, 16, 64);

  /* func @mm(%a, %b) -> (f32, f32) */
  kn_func *mm = kn_func_new(m, "mm", false, 2, (kn_type[]){f32, f32}, (const char *[]){"a", "b"},
                            2, (kn_type[]){f32, f32});
  kn_builder b = kn_builder_at_end(m, mm->body);
  kn_value *lo = kn_b_binary(&b, KN_OP_MIN, kn_func_param(mm, 0), kn_func_param(mm, 1));
  kn_value *hi = kn_b_binary(&b, KN_OP_MAX, kn_func_param(mm, 0), kn_func_param(mm, 1));
  kn_b_return(&b, 2, (kn_value *[]){lo, hi});

  kn_func *k = kn_func_new(m, "k", true, 4,
                           (kn_type[]){kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F16), i32, kn_ty_scalar(KN_I1)},
                           (const char *[]){"p", "q", "n", NULL}, 0, NULL);
  kn_func_set_meta(k, "BLOCK_M", 64);
  kn_func_set_meta(k, "CAUSAL", 1);
  b = kn_builder_at_end(m, k->body);
  kn_value *p = kn_func_param(k, 0), *q = kn_func_param(k, 1), *n = kn_func_param(k, 2);
  kn_value *flag = kn_func_param(k, 3);
  kn_value *c0 = kn_b_const_i(&b, i32, 0), *c1 = kn_b_const_i(&b, i32, 1);
  kn_value *c64 = kn_b_const_i(&b, i32, 64);
  kn_value *pid = kn_b_program_id(&b, 1);
  kn_value *r = kn_b_arange(&b, 0, 64);
  kn_value *lim = kn_b_splat(&b, n, 1, (int32_t[]){64});
  kn_value *mask = kn_b_cmp(&b, KN_PRED_LT, r, lim);
  kn_value *zero = kn_b_const_f(&b, f32, 0.0);
  kn_value *init = kn_b_const_f(&b, t64, -INFINITY);
  kn_value *x = kn_b_load(&b, t64, p, &pid, &c1, &n, mask, zero);
  kn_value_set_name(m, x, "x");

  kn_builder body;
  kn_op *loop = kn_b_for(&b, c0, n, c64, 2, (kn_value *[]){init, zero}, &body);
  kn_value *acc = loop->region[0]->args[1], *s = loop->region[0]->args[2];
  kn_value *mx = kn_b_binary(&body, KN_OP_MAX, acc, x);
  kn_value *red = kn_b_reduce(&body, KN_OP_REDUCE_SUM, mx, 0);
  kn_op *call = kn_b_call(&body, mm, 2, (kn_value *[]){red, s});
  kn_builder tb, eb;
  kn_op *iff = kn_b_if(&body, flag, 1, &f32, &tb, &eb);
  kn_b_yield(&tb, 1, &call->res[0]);
  kn_b_yield(&eb, 1, &call->res[1]);
  kn_b_yield(&body, 2, (kn_value *[]){mx, iff->res[0]});

  kn_value *tile = kn_b_load(&b, t2, q, (kn_value *[]){c0, c0}, (kn_value *[]){c64, c1}, NULL,
                             NULL, NULL);
  kn_value *tt = kn_b_transpose(&b, tile);
  kn_value *tf = kn_b_cast(&b, tt, KN_F32);
  kn_value *red2 = kn_b_reduce(&b, KN_OP_REDUCE_MAX, tf, 1);
  kn_b_store(&b, red2, p, &c0, &c1, &n, mask);
  kn_b_store(&b, loop->res[0], p, &c0, &c1, NULL, NULL);
  kn_b_return(&b, 0, NULL);

  char *text = roundtrip(m);
  /* a few lines whose exact form the grammar fixes */
  assert_non_null(strstr(text, "func @mm(%a: f32, %b: f32) -> (f32, f32) {\n  %0 = min %a, %b : f32\n"));
  assert_non_null(strstr(text, "kernel @k(%p: ptr<f32>, %q: ptr<f16>, %n: i32, %0: i1) attrs {BLOCK_M = 64, CAUSAL = 1} {\n"));
  assert_non_null(strstr(text, "  %x = load %p[%4] strides [%2] bounds [%n] mask %7 other %8 : tile<64xf32>\n"));
  assert_non_null(strstr(text, " = for %12 = %1 to %n step %3 iter (%13 = %9, %14 = %8) : tile<64xf32>, f32 {\n"));
  assert_non_null(strstr(text, "    %17, %18 = call @mm(%16, %14) : f32, f32\n"));
  assert_non_null(strstr(text, "    %19 = if %0 : f32 {\n      yield %17\n    } else {\n      yield %18\n    }\n"));
  assert_non_null(strstr(text, "  store %23, %p[%1] strides [%2] bounds [%n] mask %7\n"));
  assert_non_null(strstr(text, "}\n\nkernel @k("));
  size_t len = strlen(text);
  assert_true(len >= 3 && text[len - 1] == '\n' && text[len - 2] == '}');
  free(text);
  kn_module_free(m);
}

/* unnamed values skip numbers that are names; duplicates and odd characters are repaired */
static void test_names(void **state) {
  (void)state;
  kn_module *m = kn_module_new(NULL);
  kn_type i32 = kn_ty_scalar(KN_I32);
  kn_func *f = kn_func_new(m, "f", false, 2, (kn_type[]){i32, i32}, (const char *[]){NULL, "1"},
                           1, &i32);
  kn_builder b = kn_builder_at_end(m, f->body);
  kn_value *a = kn_b_binary(&b, KN_OP_ADD, kn_func_param(f, 0), kn_func_param(f, 1));
  kn_value *c = kn_b_binary(&b, KN_OP_ADD, a, a);
  kn_value_set_name(m, c, "acc");
  kn_value *e = kn_b_binary(&b, KN_OP_ADD, c, c);
  kn_value_set_name(m, e, "acc");
  kn_value *g = kn_b_binary(&b, KN_OP_ADD, e, e);
  kn_value_set_name(m, g, "acc.1");
  kn_value *h = kn_b_binary(&b, KN_OP_MUL, g, g);
  kn_value_set_name(m, h, "a b-c");
  kn_value *z = kn_b_binary(&b, KN_OP_SUB, h, a);
  kn_b_return(&b, 1, &z);
  char *text = roundtrip(m);
  assert_string_equal(text,
                      "func @f(%0: i32, %1: i32) -> (i32) {\n"
                      "  %2 = add %0, %1 : i32\n"
                      "  %acc = add %2, %2 : i32\n"
                      "  %acc.2 = add %acc, %acc : i32\n"
                      "  %acc.1 = add %acc.2, %acc.2 : i32\n"
                      "  %a_b_c = mul %acc.1, %acc.1 : i32\n"
                      "  %3 = sub %a_b_c, %2 : i32\n"
                      "  return %3\n"
                      "}\n");
  free(text);
  kn_module_free(m);

  /* an empty module prints as the empty string */
  m = kn_module_new(NULL);
  text = kn_print(m);
  assert_string_equal(text, "");
  free(text);
  kn_module_free(m);
}

/* ---- canonical text, locations, value names ---- */

static const char *const k_vadd =
    "kernel @vadd(%x: ptr<f32>, %y: ptr<f32>, %out: ptr<f32>, %n: i32) attrs {BLOCK = 128} {\n"
    "  %pid = program_id 0 : i32\n"
    "  %c128 = const 128 : i32\n"
    "  %start = mul %pid, %c128 : i32\n"
    "  %c1 = const 1 : i32\n"
    "  %a = load %x[%start] strides [%c1] bounds [%n] : tile<128xf32>\n"
    "  %b = load %y[%start] strides [%c1] bounds [%n] : tile<128xf32>\n"
    "  %s = add %a, %b : tile<128xf32>\n"
    "  store %s, %out[%start] strides [%c1] bounds [%n]\n"
    "  return\n"
    "}\n";

static void test_canonical_and_locations(void **state) {
  (void)state;
  kn_module *m = parse_ok(k_vadd);
  char *text = kn_print(m);
  assert_string_equal(text, k_vadd);
  free(text);

  kn_func *f = m->funcs[0];
  assert_true(f->is_kernel);
  assert_string_equal(f->name, "vadd");
  assert_int_equal(f->loc.line, 1);
  assert_int_equal(f->loc.col, 8);
  int64_t blk = 0;
  assert_true(kn_func_get_meta(f, "BLOCK", &blk));
  assert_int_equal(blk, 128);
  assert_string_equal(kn_func_param(f, 3)->name, "n");

  kn_op *op = f->body->first->next->next; /* %start = mul %pid, %c128 */
  assert_int_equal(op->opc, KN_OP_MUL);
  assert_int_equal(op->loc.line, 4);
  assert_int_equal(op->loc.col, 12);
  assert_string_equal(op->loc.file, "t.tile");
  assert_non_null(op->opnd_loc);
  assert_int_equal(op->opnd_loc[1].line, 4);
  assert_int_equal(op->opnd_loc[1].col, 22);
  assert_string_equal(op->res[0]->name, "start");

  kn_op *ld = op->next->next; /* %a = load %x[%start] strides [%c1] bounds [%n] */
  assert_int_equal(ld->opc, KN_OP_LOAD);
  assert_int_equal(ld->iattr[0], 1);
  assert_int_equal(ld->iattr[1], KN_MEM_BOUNDS);
  kn_mem_operands mo;
  kn_mem_operands_get(ld, &mo);
  assert_ptr_equal(mo.base, kn_func_param(f, 0));
  assert_ptr_equal(mo.bound[0], kn_func_param(f, 3));
  assert_int_equal(ld->opnd_loc[3].col, 46); /* %n in bounds [%n] */

  kn_op *st = f->body->last->prev;
  assert_int_equal(st->opc, KN_OP_STORE);
  kn_mem_operands_get(st, &mo);
  assert_string_equal(mo.value->name, "s");
  assert_null(mo.mask);
  kn_module_free(m);
}

/* forward calls, nested regions, comments, tabs, CRLF and a buffer without a NUL */
static void test_parse_forms(void **state) {
  (void)state;
  const char *src =
      "// a comment line\r\n"
      "kernel @k(%n: i32, %c: i1) {   // trailing comment\n"
      "\t%z = const 0 : i32\n"
      "\n"
      "  %r0, %r1 = for %i = %z to %n step %n iter (%a = %z, %b = %n) : i32, i32 {\n"
      "    for %j = %i to %n step %n {\n"
      "      %u, %v = call @later(%a, %b, %j) : i32, i32\n"
      "      yield\n"
      "    }\n"
      "    yield %b, %a\n"
      "  }\n"
      "  %h = const 0x1.8p+1 : f32\n"
      "  return\n"
      "}\n"
      "func @later(%x: i32, %y: i32, %w: i32) -> (i32, i32) {\n"
      "  return %y, %x\n"
      "}";
  size_t n = strlen(src);
  char *buf = malloc(n);
  memcpy(buf, src, n); /* not NUL-terminated */
  kn_diag d;
  kn_module *m = kn_parse("f.tile", buf, n, &d);
  free(buf);
  if (!m) fail_msg("%s", d.rendered);
  assert_int_equal(m->nfuncs, 2);
  kn_op *loop = m->funcs[0]->body->first->next;
  assert_int_equal(loop->opc, KN_OP_FOR);
  assert_int_equal(loop->nopnd, 5);
  assert_int_equal(loop->nres, 2);
  assert_int_equal(loop->region[0]->nargs, 3);
  assert_string_equal(loop->region[0]->args[0]->name, "i");
  kn_op *inner = loop->region[0]->first;
  kn_op *call = inner->region[0]->first;
  assert_int_equal(call->opc, KN_OP_CALL);
  assert_string_equal(call->callee_name, "later");
  assert_null(call->callee);
  assert_int_equal(call->nres, 2);
  assert_ptr_equal(call->opnd[2], inner->region[0]->args[0]);
  assert_true(loop->next->fattr == 3.0);
  char *text = roundtrip(m);
  assert_non_null(strstr(text, "  %h = const 3 : f32\n"));
  free(text);
  kn_module_free(m);
}

/* ---- errors ---- */

typedef struct err_case {
  const char *src;
  int line, col;
  const char *msg;
} err_case;

static const err_case k_errors[] = {
    {"kernel @k(%a: f32) {\n  %b = add %a : f32\n}\n", 2, 15, "expected ',' after operand, found ':'"},
    {"kernel @k(%a: f32) {\n  %b = fooo %a : f32\n}\n", 2, 8, "unknown op 'fooo'"},
    {"kernel @k(%a: f17) {\n}\n", 1, 15, "unknown type 'f17'"},
    {"kernel @k(%a: tile<64x0xf32>) {\n}\n", 1, 23, "tile dimension must be positive"},
    {"kernel @k(%a: tile<64xf17>) {\n}\n", 1, 23, "unknown type 'f17'"},
    {"kernel @k(%a: f32) {\n  %b = add %a, %x : f32\n}\n", 2, 16, "use of undefined value '%x'"},
    {"kernel @k(%a: f32) {\n  %c = neg %a : f32\n  %c = neg %a : f32\n}\n", 3, 3,
     "redefinition of value '%c'"},
    {"kernel @k(%a: f32, %a: f32) {\n}\n", 1, 20, "redefinition of value '%a'"},
    {"kernel @k(%a: f32) {\n  %b = add %a, %a f32\n}\n", 2, 19,
     "expected ':' and the result type after the operands, found 'f32'"},
    {"kernel @k(%a: f32) {\n  return %a\n", 3, 1, "expected an op or '}', found end of file"},
    {"kernel @k() {\n  %c = const 99999999999999999999 : i64\n}\n", 2, 14,
     "integer literal '99999999999999999999' out of range"},
    {"kernel @k() {\n  %c = const 1e400 : f32\n}\n", 2, 14, "float literal '1e400' out of range"},
    {"kernel @k() {\n  %c = const 2.5 : i32\n}\n", 2, 14,
     "expected an integer for a const of an integer type, found '2.5'"},
    {"kernel @k(%a: i1) {\n  if %a {\n    %t = const 1 : i32\n    yield\n  } else {\n    yield %t\n  }\n}\n",
     6, 11, "use of value '%t' outside the region that defines it"},
    {"kernel @k(%a: i32) {\n  %r = for %i = %a to %a step %a iter (%s = %r) : i32 {\n", 2, 45,
     "use of value '%r' before its definition"},
    {"kernel @k(%a: f32) {\n  %b, %c = neg %a : f32\n}\n", 2, 3,
     "'neg' has 1 result, but 2 result names are given"},
    {"kernel @k(%p: ptr<f32>, %a: i32) {\n  %x = load %p[%a] strides [%a] other %a mask %a : f32\n}\n",
     2, 42, "clause 'mask' out of order or repeated (the order is bounds, mask, other)"},
    {"kernel @k(%p: ptr<f32>, %a: i32) {\n  %x = load %p[%a, %a] strides [%a] : tile<2x2xf32>\n}\n",
     2, 32, "expected 2 strides, found 1"},
    {"kernel @k(%a: i32) {\n  %b = cmp lq %a, %a : i1\n}\n", 2, 12,
     "unknown predicate 'lq' (expected eq, ne, lt, le, gt, ge)"},
    {"kernel @k() {\n  return\n}\nfunc @k() {\n}\n", 4, 6, "redefinition of function '@k'"},
    {"kernel @k() {\n  return }\n", 2, 10, "expected end of line after the op, found '}'"},
    {"kernel @k(%a: i32) {\n  %b = neg %a : i32 $\n}\n", 2, 21, "unexpected character '$'"},
    {"kernel @k() attrs {N = 1, N = 2} {\n}\n", 1, 27, "duplicate attribute 'N'"},
    {"kernel @k(%c: i1) {\n  %r = if %c : f32 {\n    yield\n  }\n}\n", 4, 4,
     "expected 'else' after the then-region of 'if', found end of line"},
    {"kernel @k() {\n  %x = call @f() : f32, f32\n}\n", 2, 18, "1 result name but 2 result types"},
    {"kernel @k(%p: ptr<f32>, %a: i32) {\n  %x = load %p[%a] strides [%a] off32 mask %a : f32\n}\n",
     2, 39, "clause 'mask' out of order or repeated (the order is bounds, mask, other, off32)"},
    {"kernel @k(%p: ptr<f32>, %a: f32, %i: i32) {\n  store %a, %p[%i] strides [%i] off32\n}\n", 2,
     33, "store has no 'off32' clause (a load's)"},
    {"kernel @k(%p: ptr<f32>, %i: i32) {\n  %x = load %p[%i] strides [%i] atomic_add : f32\n}\n", 2,
     33, "load has no 'atomic_add' clause (a store's)"},
    {"kernel @k(%p: ptr<f32>, %a: f32, %i: i32, %m: i1) {\n"
     "  store %a, %p[%i] strides [%i] atomic_add mask %m\n}\n",
     2, 44, "clause 'mask' out of order or repeated (the order is bounds, mask, atomic_add)"},
    {"\x01", 1, 1, "unexpected byte 0x01"},
    {"{", 1, 1, "expected 'kernel' or 'func', found '{'"},
};

static void test_errors(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof k_errors / sizeof k_errors[0]; i++) {
    const err_case *e = &k_errors[i];
    kn_diag d;
    memset(&d, 0, sizeof d);
    kn_module *m = kn_parse("e.tile", e->src, strlen(e->src), &d);
    if (m) fail_msg("case %zu parsed but should fail", i);
    if (strcmp(d.message, e->msg) != 0 || d.loc.line != e->line || d.loc.col != e->col)
      fail_msg("case %zu: got %d:%d '%s', want %d:%d '%s'", i, d.loc.line, d.loc.col, d.message,
               e->line, e->col, e->msg);
    assert_string_equal(d.loc.file, "e.tile");
  }
}

/* a load's off32 clause (docs/ir.md) reads and prints back, last of the clauses */
static void test_off32_clause(void **state) {
  (void)state;
  const char *src = "kernel @k(%p: ptr<f32>, %i: i32, %z: f32) {\n"
                    "  %x = load %p[%i] strides [%i] bounds [%i] other %z off32 : f32\n"
                    "  return\n"
                    "}\n";
  kn_diag d;
  kn_module *m = kn_parse("o.tile", src, strlen(src), &d);
  if (!m) fail_msg("%s", d.message);
  assert_int_equal(kn_verify(m, &d), 0);
  char *text = roundtrip(m);
  assert_non_null(strstr(text, "bounds [%i] other %z off32 : f32"));
  free(text);
  kn_module_free(m);
}

static void test_nesting_limit(void **state) {
  (void)state;
  char *src = malloc(1 << 16), *p = src;
  p += sprintf(p, "kernel @k(%%a: i32) {\n");
  for (int i = 0; i < 100; i++) p += sprintf(p, "for %%i%d = %%a to %%a step %%a {\n", i);
  kn_diag d;
  assert_null(kn_parse("deep.tile", src, (size_t)(p - src), &d));
  assert_string_equal(d.message, "regions nested too deeply (limit 64)");
  assert_int_equal(d.loc.line, 66);
  free(src);
}

static void test_rendered_caret(void **state) {
  (void)state;
  const char *src = "kernel @k(%a: f32) {\n  %b = add %a : f32\n}\n";
  kn_diag d;
  assert_null(kn_parse("r.tile", src, strlen(src), &d));
  assert_string_equal(d.rendered,
                      "r.tile:2:15: error: expected ',' after operand, found ':'\n"
                      "  %b = add %a : f32\n"
                      "              ^\n");
  /* tabs in the source line are kept in the caret line, so the caret lands under the column */
  src = "kernel @k(%a: f32) {\n\t%b = fooo %a : f32\n}\n";
  assert_null(kn_parse(NULL, src, strlen(src), &d));
  assert_string_equal(d.rendered,
                      "<input>:2:7: error: unknown op 'fooo'\n"
                      "\t%b = fooo %a : f32\n"
                      "\t     ^\n");
}

/* every prefix of a valid text fails cleanly or parses (only the whole text, or whole lines) */
static void test_truncation(void **state) {
  (void)state;
  size_t n = strlen(k_vadd);
  for (size_t k = 0; k < n; k++) {
    kn_diag d;
    char *buf = malloc(k ? k : 1);
    memcpy(buf, k_vadd, k);
    kn_module *m = kn_parse("p.tile", buf, k, &d);
    free(buf);
    if (m) {
      assert_true(k == 0 || k == n - 1); /* nothing, or all but the last newline */
      kn_module_free(m);
    } else {
      assert_true(d.loc.line >= 1 && d.message[0]);
    }
  }
}

/* ---- floats ---- */

static void test_float_roundtrip(void **state) {
  (void)state;
  static const struct {
    double v;
    const char *text;
  } cases[] = {
      {0.1, "0.1"},
      {1e-45, "1e-45"},
      {3.4028234663852886e38, "3.4028234663852886e+38"},
      {-0.0, "-0"},
      {0.0, "0"},
      {4.9406564584124654e-324, "5e-324"},           /* smallest denormal */
      {2.2250738585072009e-308, "2.225073858507201e-308"}, /* largest denormal */
      {1.401298464324817e-45, "1.401298464324817e-45"},    /* smallest f32 denormal */
      {1.0 / 3.0, "0.3333333333333333"},
      {1e-05, "1e-05"},
      {240.0, "240"},
      {57344.0, "57344"},
      {1e22, "1e+22"},
      {-1.5, "-1.5"},
      {INFINITY, "inf"},
      {-INFINITY, "-inf"},
      {NAN, "nan"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kn_module *m = kn_module_new(NULL);
    kn_func *f = kn_func_new(m, "f", true, 0, NULL, NULL, 0, NULL);
    kn_builder b = kn_builder_at_end(m, f->body);
    kn_value *c = kn_b_const_f(&b, kn_ty_scalar(KN_F32), cases[i].v);
    kn_value_set_name(m, c, "c");
    kn_b_return(&b, 0, NULL);
    char *text = roundtrip(m);
    char want[128];
    snprintf(want, sizeof want, "  %%c = const %s : f32\n", cases[i].text);
    if (!strstr(text, want)) fail_msg("case %zu: want '%s' in\n%s", i, want, text);

    kn_diag d;
    kn_module *m2 = kn_parse("f.tile", text, strlen(text), &d);
    assert_non_null(m2);
    double got = m2->funcs[0]->body->first->fattr;
    if (isnan(cases[i].v)) assert_true(isnan(got));
    else assert_memory_equal(&got, &cases[i].v, sizeof got);
    kn_module_free(m2);
    free(text);
    kn_module_free(m);
  }
}

/* ---- large texts (issue 16, case 4) ---- */

static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t big_rng;
static uint64_t big_next(void) {
  big_rng ^= big_rng << 13, big_rng ^= big_rng >> 7, big_rng ^= big_rng << 17;
  return big_rng;
}

/* a growing text */
typedef struct text { char *s; size_t n, cap; } text;
static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    if (t->s && (size_t)k < t->cap - t->n) {
      t->n += (size_t)k;
      return;
    }
    t->cap = t->cap ? t->cap * 2 : 1 << 16;
    t->s = realloc(t->s, t->cap);
    assert_non_null(t->s);
  }
}

/* parse + verify + print + reparse: the two prints equal; the module */
static kn_module *front_end(const text *t) {
  kn_diag d;
  kn_module *m = kn_parse("big.tile", t->s, t->n, &d);
  if (!m || kn_verify(m, &d)) fail_msg("%s", d.rendered);
  char *a = kn_print(m);
  kn_module *m2 = kn_parse("big2.tile", a, strlen(a), &d);
  if (!m2) fail_msg("%s", d.rendered);
  char *b = kn_print(m2);
  assert_string_equal(a, b);
  free(a), free(b);
  kn_module_free(m2);
  return m;
}

/* 30,000 attributes and 60,000 functions through the front end in linear time (they took
 * minutes and gigabytes before: a copy of the attribute array per attribute, quadratic duplicate
 * checks and function lookups); a repeated attribute among 30,000 found at its place; a call
 * chain 1000 deep runs on the interpreter, 1001 deep is the verifier's error; a text over the
 * parser's limit is an error */
static void test_large_texts(void **state) {
  (void)state;
  big_rng = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
  if (getenv("KILN_TEST_SEED")) big_rng = strtoull(getenv("KILN_TEST_SEED"), NULL, 0);
  big_rng |= 1;
  printf("  seed %llu\n", (unsigned long long)big_rng);
  enum { NATTR = 30000, NFUNC = 60000 };
  double t0 = cpu_s();
  /* attributes in random order with random values */
  int *perm = malloc(sizeof *perm * NATTR);
  int64_t *val = malloc(sizeof *val * NATTR);
  for (int i = 0; i < NATTR; i++) perm[i] = i, val[i] = (int64_t)(big_next() >> 1) - INT64_MAX / 2;
  for (int i = NATTR - 1; i > 0; i--) {
    int j = (int)(big_next() % (uint64_t)(i + 1)), x = perm[i];
    perm[i] = perm[j], perm[j] = x;
  }
  text t = {0};
  put(&t, "kernel @k(%%p: ptr<f32>) attrs {");
  for (int i = 0; i < NATTR; i++)
    put(&t, "%sA%d = %lld", i ? ", " : "", perm[i], (long long)val[perm[i]]);
  put(&t, "} {\n  return\n}\n");
  kn_module *m = front_end(&t);
  assert_int_equal(m->funcs[0]->nmeta, NATTR);
  for (int r = 0; r < 100; r++) {
    int i = (int)(big_next() % NATTR);
    char key[16];
    snprintf(key, sizeof key, "A%d", i);
    int64_t v = 0;
    assert_true(kn_func_get_meta(m->funcs[0], key, &v));
    assert_true(v == val[i]);
  }
  kn_module_free(m);
  /* ... the same with the first attribute repeated last: the error at the repetition */
  t.n -= strlen("} {\n  return\n}\n");
  size_t col = t.n + 3; /* after ", " */
  put(&t, ", A%d = 1} {\n  return\n}\n", perm[0]);
  kn_diag d;
  assert_null(kn_parse("big.tile", t.s, t.n, &d));
  char want[64];
  snprintf(want, sizeof want, "duplicate attribute 'A%d'", perm[0]);
  if (!strstr(d.message, want)) fail_msg("message '%s'", d.message);
  assert_int_equal(d.loc.line, 1);
  assert_int_equal(d.loc.col, (int)col);

  /* 60,000 functions, each calling a random earlier one */
  t.n = 0;
  for (int i = 0; i < NFUNC; i++) {
    if (i == 0) {
      put(&t, "func @f0(%%x: i32) -> (i32) {\n  return %%x\n}\n");
      continue;
    }
    put(&t, "func @f%d(%%x: i32) -> (i32) {\n  %%y = call @f%d(%%x) : i32\n  return %%y\n}\n", i,
        (int)(big_next() % (uint64_t)i));
  }
  m = front_end(&t);
  assert_int_equal(m->nfuncs, NFUNC);
  for (int r = 0; r < 100; r++) {
    int i = (int)(big_next() % NFUNC);
    char name[16];
    snprintf(name, sizeof name, "f%d", i);
    kn_func *f = kn_module_find(m, name);
    assert_non_null(f);
    assert_string_equal(f->name, name);
    assert_ptr_equal(m->funcs[i], f);
  }
  assert_null(kn_module_find(m, "f60000"));
  kn_module_free(m);
  double took = cpu_s() - t0;
  printf("  30,000 attributes and 60,000 functions: %.2f s of CPU time\n", took);
  assert_true(took < 20);

  /* a chain of calls: kernel -> f999 -> ... -> f0, each adding 1 (1000 calls deep), runs; one
   * more function in the chain is the verifier's error at the call that goes too deep */
  for (int depth = 1000; depth <= 1001; depth++) {
    t.n = 0;
    put(&t, "func @f0(%%x: i32) -> (i32) {\n  return %%x\n}\n");
    for (int i = 1; i < depth; i++)
      put(&t, "func @f%d(%%x: i32) -> (i32) {\n  %%c = const 1 : i32\n  %%a = add %%x, %%c : i32\n"
          "  %%y = call @f%d(%%a) : i32\n  return %%y\n}\n", i, i - 1);
    put(&t, "kernel @k(%%p: ptr<i32>, %%x: i32) {\n  %%c0 = const 0 : i32\n  %%c1 = const 1 : i32\n"
        "  %%y = call @f%d(%%x) : i32\n  store %%y, %%p[%%c0] strides [%%c1]\n  return\n}\n",
        depth - 1);
    m = kn_parse("chain.tile", t.s, t.n, &d);
    assert_non_null(m);
    if (depth == 1001) {
      assert_int_equal(kn_verify(m, &d), -1);
      if (!strstr(d.message, "calls nested more than 1000 deep")) fail_msg("message '%s'", d.message);
    } else {
      if (kn_verify(m, &d)) fail_msg("%s", d.rendered);
      int32_t out = 0, x = (int32_t)(big_next() % 100000);
      kn_region reg = {&out, sizeof out};
      kn_argval args[2] = {{.p = &out}, {.i = x}};
      if (kn_interp_run(kn_module_find(m, "k"), args, (int[]){1, 1, 1}, &reg, 1, NULL, &d))
        fail_msg("%s", d.rendered);
      assert_int_equal(out, x + depth - 1);
    }
    kn_module_free(m);
  }

  /* over the limit: an error naming the size, before anything is read */
  size_t n = KN_PARSE_MAX_BYTES + 1;
  char *huge = malloc(n);
  assert_non_null(huge);
  memset(huge, '\n', n);
  assert_null(kn_parse("huge.tile", huge, n, &d));
  if (!strstr(d.message, "more than the parser takes")) fail_msg("message '%s'", d.message);
  kn_module *at_limit = kn_parse("huge.tile", huge, n - 1, &d); /* the limit itself is fine */
  assert_non_null(at_limit);
  kn_module_free(at_limit);
  free(huge);
  free(t.s), free(perm), free(val);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builder_roundtrip),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_canonical_and_locations),
      cmocka_unit_test(test_parse_forms),
      cmocka_unit_test(test_off32_clause), cmocka_unit_test(test_errors),
      cmocka_unit_test(test_nesting_limit),
      cmocka_unit_test(test_rendered_caret),
      cmocka_unit_test(test_truncation),
      cmocka_unit_test(test_float_roundtrip),
      cmocka_unit_test(test_large_texts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
