/* test_verify.c — verifier rules that text cannot express: the parser already rejects undefined
 * names, so SSA dominance and cross-function values are checked here on built IR.
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(valid_kernel_verifies), cmocka_unit_test(use_before_definition),
      cmocka_unit_test(region_value_escapes),  cmocka_unit_test(value_of_other_function),
      cmocka_unit_test(terminators),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
