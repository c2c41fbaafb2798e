/* test_verify.c — verifier rules that text cannot express: the parser already rejects undefined
 * names, so SSA dominance and cross-function values are checked here on built IR; and the
 * messages of elemental calls, which name two places (the callee's op and the call).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ir.h"

/* a kernel @k(%p: ptr<f32>) with an empty body, and a builder at its end */
static kn_func *new_kernel(kn_module *m, const char *name, kn_builder *b) {
  kn_type pt = kn_ty_ptr(KN_F32);
  kn_func *f = kn_func_new(m, name, true, 1, &pt, (const char *[]){"p"}, 0, NULL);
  *b = kn_builder_at_end(m, f->body);
  return f;
}

static void expect_error(kn_module *m, const char *substr) {
  kn_diag d;
  assert_int_equal(kn_verify(m, &d), -1);
  if (!strstr(d.message, substr)) fail_msg("message '%s' lacks '%s'", d.message, substr);
}

static void valid_kernel_verifies(void **state) {
  (void)state;
  kn_module *m = kn_module_new(NULL);
  kn_builder b;
  new_kernel(m, "k", &b);
  kn_value *x = kn_b_const_f(&b, kn_ty_scalar(KN_F32), 1.0);
  kn_b_binary(&b, KN_OP_ADD, x, x);
  kn_b_return(&b, 0, NULL);
  kn_diag d;
  assert_int_equal(kn_verify(m, &d), 0);
  kn_module_free(m);
}

/* an op using a value defined after it in the same block */
static void use_before_definition(void **state) {
  (void)state;
  kn_module *m = kn_module_new(NULL);
  kn_builder b;
  new_kernel(m, "k", &b);
  kn_value *x = kn_b_const_f(&b, kn_ty_scalar(KN_F32), 1.0);
  kn_op *add = kn_build_op(&b, KN_OP_ADD, 2, (kn_value *[]){x, x}, 1, &x->type);
  kn_value *late = kn_b_const_f(&b, kn_ty_scalar(KN_F32), 2.0);
  add->opnd[1] = late;
  kn_b_return(&b, 0, NULL);
  expect_error(m, "used before its definition");
  kn_module_free(m);
}

/* a value defined inside a for body used after the loop */
static void region_value_escapes(void **state) {
  (void)state;
  kn_module *m = kn_module_new(NULL);
  kn_builder b, body;
  new_kernel(m, "k", &b);
  kn_value *lo = kn_b_const_i(&b, kn_ty_scalar(KN_I32), 0);
  kn_value *hi = kn_b_const_i(&b, kn_ty_scalar(KN_I32), 4);
  kn_value *st = kn_b_const_i(&b, kn_ty_scalar(KN_I32), 1);
  kn_b_for(&b, lo, hi, st, 0, NULL, &body);
  kn_value *inner = kn_b_binary(&body, KN_OP_ADD, body.block->args[0], st);
  kn_b_yield(&body, 0, NULL);
  kn_b_binary(&b, KN_OP_ADD, inner, st);
  kn_b_return(&b, 0, NULL);
  expect_error(m, "not visible here");
  kn_module_free(m);
}

/* an operand that belongs to another function */
static void value_of_other_function(void **state) {
  (void)state;
  kn_module *m = kn_module_new(NULL);
  kn_builder b1, b2;
  new_kernel(m, "k1", &b1);
  kn_value *x = kn_b_const_f(&b1, kn_ty_scalar(KN_F32), 1.0);
  kn_b_return(&b1, 0, NULL);
  new_kernel(m, "k2", &b2);
  kn_value *y = kn_b_const_f(&b2, kn_ty_scalar(KN_F32), 1.0);
  kn_b_binary(&b2, KN_OP_ADD, y, x);
  kn_b_return(&b2, 0, NULL);
  expect_error(m, "is not a value of function '@k2'");
  kn_module_free(m);
}

/* a block without its terminator, and an op after one */
static void terminators(void **state) {
  (void)state;
  kn_module *m = kn_module_new(NULL);
  kn_builder b;
  new_kernel(m, "k", &b);
  kn_b_const_f(&b, kn_ty_scalar(KN_F32), 1.0);
  kn_diag d;
  assert_int_equal(kn_verify(m, &d), -1);
  kn_b_return(&b, 0, NULL);
  assert_int_equal(kn_verify(m, &d), 0);
  kn_b_const_f(&b, kn_ty_scalar(KN_F32), 1.0);
  assert_int_equal(kn_verify(m, &d), -1);
  kn_module_free(m);
}

/* the errors of an elemental call name the offending op in the callee (its file:line:col) and
 * where the callee was called with tiles */
static void elemental_call_locations(void **state) {
  (void)state;
  const char *text =
      "func @m(%q: i32, %kv: i32) -> (i1) {\n"
      "  %c0 = const 0 : i32\n"
      "  %c1 = const 1 : i32\n"
      "  %s = for %i = %c0 to %q step %c1 iter (%a = %c0) : i32 {\n"
      "    yield %i\n"
      "  }\n"
      "  %r = cmp lt %kv, %s : i1\n"
      "  return %r\n"
      "}\n"
      "\n"
      "kernel @k(%n: i32) {\n"
      "  %q = const 1 : tile<8x4xi32>\n"
      "  %r = call @m(%q, %n) : tile<8x4xi1>\n"
      "  return\n"
      "}\n";
  kn_diag d;
  kn_module *m = kn_parse("t.tile", text, strlen(text), &d);
  assert_non_null(m);
  assert_int_equal(kn_verify(m, &d), -1);
  const char *want = "t.tile:4:8: error: 'for' in @m cannot run per element in an elemental call "
                     "(called with tiles at t.tile:13:8)";
  if (strncmp(d.rendered, want, strlen(want))) fail_msg("got '%s'\nwant '%s'", d.rendered, want);
  kn_module_free(m);
}

/* built IR: a valid elemental call verifies; a store in the callee or a tile of another shape
 * is an error naming the callee (built IR has no locations) */
static void elemental_call_built(void **state) {
  (void)state;
  for (int bad = 0; bad < 3; bad++) {
    kn_module *m = kn_module_new(NULL);
    kn_type f32 = kn_ty_scalar(KN_F32), pf = kn_ty_ptr(KN_F32);
    kn_func *f = kn_func_new(m, "f", false, 3, (kn_type[]){f32, f32, pf}, NULL, 1, &f32);
    kn_builder fb = kn_builder_at_end(m, f->body);
    kn_value *r = kn_b_binary(&fb, KN_OP_MUL, kn_func_param(f, 0), kn_func_param(f, 1));
    if (bad == 1) {
      kn_value *z = kn_b_const_i(&fb, kn_ty_scalar(KN_I32), 0), *one = kn_b_const_i(&fb, kn_ty_scalar(KN_I32), 1);
      kn_b_store(&fb, r, kn_func_param(f, 2), &z, &one, NULL, NULL);
    }
    kn_b_return(&fb, 1, &r);
    kn_builder b;
    kn_func *k = new_kernel(m, "k", &b);
    kn_value *x = kn_b_const_f(&b, kn_ty_tile2(KN_F32, 4, 8), 2.0);
    kn_value *y = bad == 2 ? kn_b_const_f(&b, kn_ty_tile1(KN_F32, 32), 3.0) : kn_b_const_f(&b, f32, 3.0);
    kn_op *c = kn_b_call(&b, f, 3, (kn_value *[]){x, y, kn_func_param(k, 0)});
    c->res[0]->type = kn_ty_tile2(KN_F32, 4, 8);  /* kn_b_call gives the callee's scalar types */
    kn_b_return(&b, 0, NULL);
    if (bad == 0) {
      kn_diag d;
      if (kn_verify(m, &d)) fail_msg("%s", d.message);
    } else if (bad == 1) {
      expect_error(m, "'store' in @f cannot run per element in an elemental call (called with tiles "
                      "at a call in '@k') (in '@f')");
    } else {
      expect_error(m, "argument 1 of '@f' (param value #1) must be f32 or tile<4x8xf32> (the "
                      "elemental call is over 4x8), found tile<32xf32>");
    }
    kn_module_free(m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_kernel_verifies), cmocka_unit_test(use_before_definition),
      cmocka_unit_test(region_value_escapes),  cmocka_unit_test(value_of_other_function),
      cmocka_unit_test(terminators),           cmocka_unit_test(elemental_call_locations),
      cmocka_unit_test(elemental_call_built),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
