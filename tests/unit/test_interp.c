/* test_interp.c — the reference interpreter (ir/interp.c), op by op.
 *
 * Each test builds a small kernel with the builder API, runs it on random inputs in host
 * buffers and compares with values the test computes itself in plain C (not stored outputs).
 * The IR is built well-typed by hand and is not passed through kn_verify(), so these tests do
 * not depend on the verifier.  Assumes an IEEE host with FLT_EVAL_METHOD == 0.
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

#include "interp.h"
#include "numeric.h"

#include "kbuild.h"

/* ---- helpers ---- */

static int run_grid(kb *k, const kn_argval *args, int gx, int gy, int gz, const kn_region *r,
                    int nr, kn_interp_stats *st, kn_diag *d) {
  kn_b_return(&k->b, 0, NULL);
  return kn_interp_run(k->k, args, (int[]){gx, gy, gz}, r, nr, st, d);
}
static void run_ok(kb *k, const kn_argval *args, const kn_region *r, int nr) {
  kn_diag d;
  if (run_grid(k, args, 1, 1, 1, r, nr, NULL, &d)) fail_msg("interp: %s", d.message);
}

static bool same(double a, double b) {
  return (isnan(a) && isnan(b)) || (a == b && !signbit(a) == !signbit(b));
}

/* random values of a float type, written to memory of that type; vals gets the exact values */
static void fill_float(kn_scalar t, void *mem, double *vals, int n, double lo, double hi) {
  size_t es = kn_scalar_size(t);
  for (int i = 0; i < n; i++) {
    vals[i] = kn_round(t, urand(lo, hi));
    kn_store_elem(t, (char *)mem + es * (size_t)i, vals[i]);
  }
}

/* ---- tests ---- */

/* out[i] = x[i] + y[i] over a grid of blocks, with bounds; stats */
static void test_vadd(void **st) {
  (void)st;
  enum { BLK = 32, N = 70 };
  float x[N], y[N], out[3 * BLK];
  for (int i = 0; i < N; i++) x[i] = (float)urand(-10, 10), y[i] = (float)urand(-10, 10);
  for (int i = 0; i < 3 * BLK; i++) out[i] = -99;
  kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_scalar(KN_I32)};
  kb k = kb_new(4, pt);
  kn_builder *b = &k.b;
  kn_value *start = kn_b_binary(b, KN_OP_MUL, kn_b_program_id(b, 0), ci32(b, BLK));
  kn_value *one = ci32(b, 1), *n = P(&k, 3);
  kn_type tt = kn_ty_tile1(KN_F32, BLK);
  kn_value *a = kn_b_load(b, tt, P(&k, 0), &start, &one, &n, NULL, NULL);
  kn_value *c = kn_b_load(b, tt, P(&k, 1), &start, &one, &n, NULL, NULL);
  kn_b_store(b, kn_b_binary(b, KN_OP_ADD, a, c), P(&k, 2), &start, &one, &n, NULL);
  kn_argval args[4] = {{.p = x}, {.p = y}, {.p = out}, {.i = N}};
  kn_region reg[] = {{x, sizeof x}, {y, sizeof y}, {out, sizeof out}};
  kn_interp_stats s;
  kn_diag d;
  assert_int_equal(run_grid(&k, args, 3, 1, 1, reg, 3, &s, &d), 0);
  for (int i = 0; i < 3 * BLK; i++) {
    if (i < N) assert_true(out[i] == x[i] + y[i]);
    else assert_true(out[i] == -99); /* beyond the bound: not written */
  }
  assert_int_equal(s.programs, 3);
  assert_int_equal(s.ops[KN_OP_LOAD], 6);
  assert_int_equal(s.ops[KN_OP_STORE], 3);
  assert_int_equal(s.ops[KN_OP_ADD], 3);
  assert_int_equal(s.ops[KN_OP_RETURN], 3);
  assert_int_equal(s.loop_iterations, 0);
  kn_module_free(k.m);
}

static double fmax_ref(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  return a > b ? a : b;
}
static double fmin_ref(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  return a < b ? a : b;
}

/* every float binary op in f32 (checked against C float arithmetic) and f16 */
static void test_float_binary(void **st) {
  (void)st;
  enum { N = 64 };
  const kn_opcode ops[] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV,
                           KN_OP_REM, KN_OP_MAX, KN_OP_MIN};
  for (int ti = 0; ti < 2; ti++) {
    kn_scalar t = ti ? KN_F16 : KN_F32;
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
      double xa[N], ya[N];
      uint8_t xm[4 * N], ym[4 * N], om[4 * N];
      fill_float(t, xm, xa, N, -100, 100);
      fill_float(t, ym, ya, N, -100, 100);
      xa[3] = NAN, kn_store_elem(t, xm + 3 * kn_scalar_size(t), NAN);
      kn_type pt[] = {kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t)};
      kb k = kb_new(3, pt);
      kn_value *r = kn_b_binary(&k.b, ops[o], load1(&k.b, P(&k, 0), t, N), load1(&k.b, P(&k, 1), t, N));
      store1(&k.b, r, P(&k, 2));
      kn_region reg[] = {{xm, sizeof xm}, {ym, sizeof ym}, {om, sizeof om}};
      run_ok(&k, (kn_argval[]){{.p = xm}, {.p = ym}, {.p = om}}, reg, 3);
      for (int i = 0; i < N; i++) {
        double a = xa[i], c = ya[i], e;
        if (t == KN_F32) { /* the host's own float arithmetic is the reference */
          float fa = (float)a, fc = (float)c;
          switch (ops[o]) {
          case KN_OP_ADD: e = fa + fc; break;
          case KN_OP_SUB: e = fa - fc; break;
          case KN_OP_MUL: e = fa * fc; break;
          case KN_OP_DIV: e = fa / fc; break;
          case KN_OP_REM: e = fmodf(fa, fc); break;
          case KN_OP_MAX: e = fmax_ref(fa, fc); break;
          default: e = fmin_ref(fa, fc); break;
          }
        } else { /* one rounding of the exact result to f16 */
          switch (ops[o]) {
          case KN_OP_ADD: e = a + c; break;
          case KN_OP_SUB: e = a - c; break;
          case KN_OP_MUL: e = a * c; break;
          case KN_OP_DIV: e = a / c; break;
          case KN_OP_REM: e = fmod(a, c); break;
          case KN_OP_MAX: e = fmax_ref(a, c); break;
          default: e = fmin_ref(a, c); break;
          }
          e = kn_round(t, e);
        }
        double got = kn_load_elem(t, om + kn_scalar_size(t) * (size_t)i);
        if (!same(got, e))
          fail_msg("%s %s [%d]: %a op %a = %a, want %a", kn_scalar_name(t),
                   kn_opinfo_table[ops[o]].name, i, a, c, got, e);
      }
      kn_module_free(k.m);
    }
  }
}

static void test_float_unary(void **st) {
  (void)st;
  enum { N = 64 };
  const kn_opcode ops[] = {KN_OP_NEG,  KN_OP_ABS,  KN_OP_EXP,   KN_OP_EXP2, KN_OP_LOG,
                           KN_OP_LOG2, KN_OP_SQRT, KN_OP_RSQRT, KN_OP_TANH};
  for (int ti = 0; ti < 2; ti++) {
    kn_scalar t = ti ? KN_BF16 : KN_F32;
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
      double xa[N];
      uint8_t xm[4 * N], om[4 * N];
      fill_float(t, xm, xa, N, -8, 8);
      kn_type pt[] = {kn_ty_ptr(t), kn_ty_ptr(t)};
      kb k = kb_new(2, pt);
      store1(&k.b, kn_b_unary(&k.b, ops[o], load1(&k.b, P(&k, 0), t, N)), P(&k, 1));
      kn_region reg[] = {{xm, sizeof xm}, {om, sizeof om}};
      run_ok(&k, (kn_argval[]){{.p = xm}, {.p = om}}, reg, 2);
      for (int i = 0; i < N; i++) {
        double a = xa[i], e;
        switch (ops[o]) {
        case KN_OP_NEG: e = -a; break;
        case KN_OP_ABS: e = fabs(a); break;
        case KN_OP_EXP: e = exp(a); break;
        case KN_OP_EXP2: e = exp2(a); break;
        case KN_OP_LOG: e = log(a); break;
        case KN_OP_LOG2: e = log2(a); break;
        case KN_OP_SQRT: e = sqrt(a); break;
        case KN_OP_RSQRT: e = 1 / sqrt(a); break;
        default: e = tanh(a); break;
        }
        e = t == KN_F32 ? (double)(float)e : kn_round(t, e);
        double got = kn_load_elem(t, om + kn_scalar_size(t) * (size_t)i);
        if (!same(got, e))
          fail_msg("%s(%a) = %a, want %a", kn_opinfo_table[ops[o]].name, a, got, e);
      }
      kn_module_free(k.m);
    }
  }
}

static void test_int_ops(void **st) {
  (void)st;
  enum { N = 64 };
  const kn_opcode ops[] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV, KN_OP_REM, KN_OP_MAX,
                           KN_OP_MIN, KN_OP_AND, KN_OP_OR,  KN_OP_XOR, KN_OP_SHL, KN_OP_SHR,
                           KN_OP_NEG, KN_OP_ABS, KN_OP_NOT};
  int32_t x[N], y[N], out[N];
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
    bool shift = ops[o] == KN_OP_SHL || ops[o] == KN_OP_SHR;
    for (int i = 0; i < N; i++) {
      x[i] = (int32_t)rnd();
      if (i < 4) x[i] = i == 0 ? INT32_MIN : i == 1 ? INT32_MAX : i == 2 ? -1 : 0;
      y[i] = shift ? (int32_t)(rnd() % 32) : (int32_t)rnd() >> (rnd() % 31);
      if (y[i] == 0) y[i] = 3;
      if (i == 5) y[i] = -1, x[i] = INT32_MIN; /* INT_MIN / -1 wraps */
      if (shift && i == 5) y[i] = 31;
    }
    kn_type pt[] = {kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32)};
    kb k = kb_new(3, pt);
    kn_value *a = load1(&k.b, P(&k, 0), KN_I32, N), *c = load1(&k.b, P(&k, 1), KN_I32, N), *r;
    r = kn_op_is_unary(ops[o]) ? kn_b_unary(&k.b, ops[o], a) : kn_b_binary(&k.b, ops[o], a, c);
    store1(&k.b, r, P(&k, 2));
    kn_region reg[] = {{x, sizeof x}, {y, sizeof y}, {out, sizeof out}};
    run_ok(&k, (kn_argval[]){{.p = x}, {.p = y}, {.p = out}}, reg, 3);
    for (int i = 0; i < N; i++) {
      int64_t a64 = x[i], c64 = y[i];
      uint32_t ua = (uint32_t)x[i], uc = (uint32_t)y[i];
      int32_t e;
      switch (ops[o]) {
      case KN_OP_ADD: e = (int32_t)(ua + uc); break;
      case KN_OP_SUB: e = (int32_t)(ua - uc); break;
      case KN_OP_MUL: e = (int32_t)(ua * uc); break;
      case KN_OP_DIV: e = (int32_t)(uint32_t)(a64 / c64); break;
      case KN_OP_REM: e = (int32_t)(a64 % c64); break;
      case KN_OP_MAX: e = x[i] > y[i] ? x[i] : y[i]; break;
      case KN_OP_MIN: e = x[i] < y[i] ? x[i] : y[i]; break;
      case KN_OP_AND: e = x[i] & y[i]; break;
      case KN_OP_OR: e = x[i] | y[i]; break;
      case KN_OP_XOR: e = x[i] ^ y[i]; break;
      case KN_OP_SHL: e = (int32_t)(ua << y[i]); break;
      case KN_OP_SHR: e = (int32_t)(a64 >> y[i]); break;
      case KN_OP_NEG: e = (int32_t)(0u - ua); break;
      case KN_OP_ABS: e = x[i] < 0 ? (int32_t)(0u - ua) : x[i]; break;
      default: e = ~x[i]; break;
      }
      if (out[i] != e)
        fail_msg("%s [%d]: %d, %d -> %d, want %d", kn_opinfo_table[ops[o]].name, i, x[i], y[i],
                 out[i], e);
    }
    kn_module_free(k.m);
  }
}

/* cmp with every predicate (floats with NaN, and ints), then select */
static void test_cmp_select(void **st) {
  (void)st;
  enum { N = 64 };
  float x[N], y[N], out[N];
  int32_t xi[N], yi[N], outi[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)(int)urand(-3, 3), y[i] = (float)(int)urand(-3, 3);
    xi[i] = (int32_t)x[i], yi[i] = (int32_t)y[i];
  }
  x[0] = NAN, y[1] = NAN;
  for (int p = 0; p < KN_PRED_COUNT; p++) {
    kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32),
                    kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32)};
    kb k = kb_new(6, pt);
    kn_builder *b = &k.b;
    kn_value *a = load1(b, P(&k, 0), KN_F32, N), *c = load1(b, P(&k, 1), KN_F32, N);
    store1(b, kn_b_select(b, kn_b_cmp(b, (kn_pred)p, a, c), a, c), P(&k, 2));
    kn_value *ai = load1(b, P(&k, 3), KN_I32, N), *bi = load1(b, P(&k, 4), KN_I32, N);
    kn_value *m = kn_b_cmp(b, (kn_pred)p, ai, bi);
    store1(b, kn_b_select(b, m, kn_b_const_i(b, kn_ty_tile1(KN_I32, N), 1), kn_b_const_i(b, kn_ty_tile1(KN_I32, N), 0)), P(&k, 5));
    kn_region reg[] = {{x, sizeof x}, {y, sizeof y}, {out, sizeof out},
                       {xi, sizeof xi}, {yi, sizeof yi}, {outi, sizeof outi}};
    run_ok(&k, (kn_argval[]){{.p = x}, {.p = y}, {.p = out}, {.p = xi}, {.p = yi}, {.p = outi}}, reg, 6);
    for (int i = 0; i < N; i++) {
      float u = x[i], v = y[i];
      bool cf = p == KN_PRED_EQ ? u == v : p == KN_PRED_NE ? u != v : p == KN_PRED_LT ? u < v
              : p == KN_PRED_LE ? u <= v : p == KN_PRED_GT ? u > v : u >= v;
      int32_t s = xi[i], t = yi[i];
      bool ci = p == KN_PRED_EQ ? s == t : p == KN_PRED_NE ? s != t : p == KN_PRED_LT ? s < t
              : p == KN_PRED_LE ? s <= t : p == KN_PRED_GT ? s > t : s >= t;
      assert_true(same(out[i], cf ? u : v));
      assert_int_equal(outi[i], ci);
    }
    kn_module_free(k.m);
  }
}

/* f32 -> every float type, f32 -> i32, i32 -> f32 / f16 / i1 */
static void test_casts(void **st) {
  (void)st;
  enum { N = 64 };
  const kn_scalar to[] = {KN_F16, KN_BF16, KN_F8E4M3, KN_F8E5M2, KN_F8E4M3FNUZ, KN_F8E5M2FNUZ};
  float x[N];
  for (int i = 0; i < N; i++) x[i] = (float)urand(-600, 600) / (float)(1 << (rnd() % 12));
  x[0] = NAN, x[1] = INFINITY, x[2] = -0.0f, x[3] = 1e30f;
  for (size_t t = 0; t < sizeof to / sizeof *to; t++) {
    uint8_t om[2 * N];
    kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(to[t])};
    kb k = kb_new(2, pt);
    store1(&k.b, kn_b_cast(&k.b, load1(&k.b, P(&k, 0), KN_F32, N), to[t]), P(&k, 1));
    kn_region reg[] = {{x, sizeof x}, {om, sizeof om}};
    run_ok(&k, (kn_argval[]){{.p = x}, {.p = om}}, reg, 2);
    size_t es = kn_scalar_size(to[t]);
    for (int i = 0; i < N; i++) {
      uint64_t bits = 0;
      memcpy(&bits, om + es * (size_t)i, es);
      if (bits != kn_encode(to[t], x[i]))
        fail_msg("cast %a to %s: 0x%llx", (double)x[i], kn_scalar_name(to[t]), (unsigned long long)bits);
    }
    kn_module_free(k.m);
  }
  /* float -> int truncates toward zero, saturates, NaN -> 0; int -> float rounds; int -> i1 */
  int32_t oi[N], xi[N];
  float of[N];
  uint16_t oh[N];
  uint8_t ob[N];
  for (int i = 0; i < N; i++) xi[i] = (int32_t)rnd() >> (rnd() % 31);
  kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32), kn_ty_ptr(KN_F32),
                  kn_ty_ptr(KN_F16), kn_ty_ptr(KN_I1)};
  kb k = kb_new(6, pt);
  kn_builder *b = &k.b;
  store1(b, kn_b_cast(b, load1(b, P(&k, 0), KN_F32, N), KN_I32), P(&k, 1));
  kn_value *li = load1(b, P(&k, 2), KN_I32, N);
  store1(b, kn_b_cast(b, li, KN_F32), P(&k, 3));
  store1(b, kn_b_cast(b, li, KN_F16), P(&k, 4));
  store1(b, kn_b_cast(b, li, KN_I1), P(&k, 5));
  kn_region reg[] = {{x, sizeof x}, {oi, sizeof oi}, {xi, sizeof xi}, {of, sizeof of}, {oh, sizeof oh}, {ob, sizeof ob}};
  run_ok(&k, (kn_argval[]){{.p = x}, {.p = oi}, {.p = xi}, {.p = of}, {.p = oh}, {.p = ob}}, reg, 6);
  for (int i = 0; i < N; i++) {
    int32_t e = isnan(x[i]) ? 0 : x[i] >= 2147483648.0f ? INT32_MAX : x[i] <= -2147483648.0f ? INT32_MIN : (int32_t)x[i];
    assert_int_equal(oi[i], e);
    assert_true(of[i] == (float)xi[i]);
    assert_true(kn_decode(KN_F16, oh[i]) == kn_round(KN_F16, (double)xi[i]));
    assert_int_equal(ob[i], xi[i] != 0);
  }
  kn_module_free(k.m);
}

/* arange, splat, broadcast, expand_dims, reshape, transpose */
static void test_shapes(void **st) {
  (void)st;
  enum { M = 8, N = 16 };
  int32_t idx[M * N], rs[M * N], tr[N * M], sp[M * N];
  kn_type pt[] = {kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I32)};
  kb k = kb_new(4, pt);
  kn_builder *b = &k.b;
  int32_t shp[2] = {M, N};
  kn_value *rows = kn_b_broadcast(b, kn_b_expand_dims(b, kn_b_arange(b, 0, M), 1), 2, shp);
  kn_value *cols = kn_b_broadcast(b, kn_b_expand_dims(b, kn_b_arange(b, 5, 5 + N), 0), 2, shp);
  kn_value *nn = kn_b_splat(b, ci32(b, N), 2, shp);
  kn_value *id = kn_b_binary(b, KN_OP_ADD, kn_b_binary(b, KN_OP_MUL, rows, nn), cols);
  store2(b, id, P(&k, 0), N);
  /* reshape to N x M keeps the row-major order; transpose swaps */
  store2(b, kn_b_reshape(b, id, 2, (int32_t[]){N, M}), P(&k, 1), M);
  store2(b, kn_b_transpose(b, id), P(&k, 2), M);
  store2(b, kn_b_splat(b, ci32(b, -7), 2, shp), P(&k, 3), N);
  kn_region reg[] = {{idx, sizeof idx}, {rs, sizeof rs}, {tr, sizeof tr}, {sp, sizeof sp}};
  run_ok(&k, (kn_argval[]){{.p = idx}, {.p = rs}, {.p = tr}, {.p = sp}}, reg, 4);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      int32_t e = i * N + j + 5;
      assert_int_equal(idx[i * N + j], e);
      assert_int_equal(rs[i * N + j], e);
      assert_int_equal(tr[j * M + i], e);
      assert_int_equal(sp[i * N + j], -7);
    }
  kn_module_free(k.m);
}

/* a 2-D block at (r0, c0) of an R x C matrix with leading dimension LD: bounds clip it, a mask
 * drops odd columns, `other` fills the dead elements; and a masked store */
static void test_load2d_mask_other(void **st) {
  (void)st;
  enum { R = 13, C = 11, LD = 17, BM = 8, BN = 8 };
  float a[R * LD], out[BM * BN], st_out[R * LD];
  for (int i = 0; i < R * LD; i++) a[i] = (float)urand(-1, 1), st_out[i] = 5;
  for (int r0 = -3; r0 <= 9; r0 += 4)
    for (int c0 = 0; c0 <= 6; c0 += 3) {
      kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_scalar(KN_I32),
                      kn_ty_scalar(KN_I32)};
      kb k = kb_new(5, pt);
      kn_builder *b = &k.b;
      int32_t shp[2] = {BM, BN};
      kn_value *cols = kn_b_broadcast(b, kn_b_expand_dims(b, kn_b_arange(b, 0, BN), 0), 2, shp);
      kn_value *odd = kn_b_binary(b, KN_OP_AND, cols, kn_b_splat(b, ci32(b, 1), 2, shp));
      kn_value *mask = kn_b_cmp(b, KN_PRED_EQ, odd, kn_b_splat(b, ci32(b, 0), 2, shp));
      kn_value *off[2] = {P(&k, 3), P(&k, 4)}, *str[2] = {ci64(b, LD), ci64(b, 1)};
      kn_value *bnd[2] = {ci32(b, R), ci32(b, C)};
      kn_value *other = kn_b_const_f(b, kn_ty_scalar(KN_F32), -1.5);
      kn_value *t = kn_b_load(b, kn_ty_tile2(KN_F32, BM, BN), P(&k, 0), off, str, bnd, mask, other);
      store2(b, t, P(&k, 1), BN);
      kn_value *neg = kn_b_unary(b, KN_OP_NEG, t);
      kn_b_store(b, neg, P(&k, 2), off, str, bnd, mask);
      kn_region reg[] = {{a, sizeof a}, {out, sizeof out}, {st_out, sizeof st_out}};
      run_ok(&k, (kn_argval[]){{.p = a}, {.p = out}, {.p = st_out}, {.i = r0}, {.i = c0}}, reg, 3);
      for (int i = 0; i < BM; i++)
        for (int j = 0; j < BN; j++) {
          int r = r0 + i, c = c0 + j;
          bool live = r >= 0 && r < R && c >= 0 && c < C && j % 2 == 0;
          assert_true(out[i * BN + j] == (live ? a[r * LD + c] : -1.5f));
          if (live) assert_true(st_out[r * LD + c] == -a[r * LD + c]);
        }
      kn_module_free(k.m);
    }
  for (int r = 0; r < R; r++) /* columns beyond the bound were never stored */
    for (int c = C; c < LD; c++) assert_true(st_out[r * LD + c] == 5);
}

static kn_module *oob_kernel(bool store, int n, kn_func **kf) {
  kn_type pt[] = {kn_ty_ptr(KN_F16)};
  kb k = kb_new(1, pt);
  kn_value *off[2] = {ci32(&k.b, 0), ci32(&k.b, 0)}, *str[2] = {ci32(&k.b, n), ci32(&k.b, 1)};
  if (store)
    kn_b_store(&k.b, kn_b_const_f(&k.b, kn_ty_tile2(KN_F16, 4, n), 1.0), P(&k, 0), off, str, NULL, NULL);
  else
    store2(&k.b, kn_b_load(&k.b, kn_ty_tile2(KN_F16, 4, n), P(&k, 0), off, str, NULL, NULL, NULL), P(&k, 0), n);
  kn_b_return(&k.b, 0, NULL);
  *kf = k.k;
  return k.m;
}

/* accesses outside every region are errors with a message, not crashes */
static void test_oob(void **st) {
  (void)st;
  uint16_t buf[4 * 8 - 1]; /* one element short of the 4 x 8 tile */
  memset(buf, 0, sizeof buf);
  for (int s = 0; s < 2; s++) {
    kn_func *kf;
    kn_module *m = oob_kernel(s, 8, &kf);
    kn_region reg = {buf, sizeof buf};
    kn_diag d;
    assert_int_equal(kn_interp_run(kf, (kn_argval[]){{.p = buf}}, (int[]){1, 2, 1}, &reg, 1, NULL, &d), -1);
    assert_non_null(strstr(d.message, "out of bounds"));
    assert_non_null(strstr(d.message, s ? "store" : "load"));
    assert_non_null(strstr(d.message, "element [3, 7]"));
    assert_non_null(strstr(d.message, "program (0,0,0)"));
    /* no regions at all: the first element is already outside */
    assert_int_equal(kn_interp_run(kf, (kn_argval[]){{.p = buf}}, (int[]){1, 1, 1}, NULL, 0, NULL, &d), -1);
    assert_non_null(strstr(d.message, "element [0, 0]"));
    /* a wild pointer */
    assert_int_equal(kn_interp_run(kf, (kn_argval[]){{.p = (void *)(uintptr_t)16}}, (int[]){1, 1, 1}, &reg, 1, NULL, &d), -1);
    assert_non_null(strstr(d.message, "out of bounds"));
    kn_module_free(m);
  }
  /* an element straddling the end of a region is outside */
  {
    kn_type pt[] = {kn_ty_ptr(KN_F32)};
    kb k = kb_new(1, pt);
    kn_value *z = ci32(&k.b, 0), *one = ci32(&k.b, 1);
    kn_b_load(&k.b, kn_ty_tile1(KN_F32, 2), P(&k, 0), &z, &one, NULL, NULL, NULL);
    char bytes[7];
    kn_region reg = {bytes, sizeof bytes};
    kn_diag d;
    assert_int_equal(run_grid(&k, (kn_argval[]){{.p = bytes}}, 1, 1, 1, &reg, 1, NULL, &d), -1);
    assert_non_null(strstr(d.message, "load out of bounds: element [1]"));
    kn_module_free(k.m);
  }
}

/* off32 (docs/ir.md): the promise that live elements lie below 2^31 bytes from the base is
 * checked: a live element past it is an error naming it (before any address is formed), a dead
 * one (bounds) is not, and the values are the plain load's */
static void test_off32(void **st) {
  (void)st;
  float a[4 * 8];
  for (int i = 0; i < 4 * 8; i++) a[i] = (float)i;
  for (int big = 0; big < 2; big++) {
    kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_scalar(KN_I64),
                    kn_ty_scalar(KN_I32)};
    kb k = kb_new(4, pt);
    kn_value *off[2] = {ci32(&k.b, 0), ci32(&k.b, 0)}, *str[2] = {P(&k, 2), ci64(&k.b, 1)};
    kn_value *bnd[2] = {P(&k, 3), ci32(&k.b, 8)};
    kn_value *t = kn_b_load(&k.b, kn_ty_tile2(KN_F32, 4, 8), P(&k, 0), off, str, bnd, NULL, NULL);
    kn_load_set_off32(t);
    store2(&k.b, t, P(&k, 1), 8);
    float out[4 * 8];
    kn_region reg[] = {{a, sizeof a}, {out, sizeof out}};
    kn_diag d;
    /* row stride 2^29 floats: row 1 starts at byte 2^31, past the promise */
    int64_t stride = big ? INT64_C(1) << 29 : 8;
    int rows = big ? 2 : 4;
    int rc = run_grid(&k, (kn_argval[]){{.p = a}, {.p = out}, {.i = stride}, {.i = rows}}, 1, 1, 1,
                      reg, 2, NULL, &d);
    if (big) {
      assert_int_equal(rc, -1);
      assert_non_null(strstr(d.message, "load off32: element [1, 0] lies at byte offset 2147483648"));
    } else {
      if (rc) fail_msg("interp: %s", d.message);
      for (int i = 0; i < 4 * 8; i++) assert_true(out[i] == a[i]);
    }
    kn_module_free(k.m);
  }
  /* one row of the huge stride is live only: every live element is within the promise */
  {
    kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_scalar(KN_I64)};
    kb k = kb_new(3, pt);
    kn_value *off[2] = {ci32(&k.b, 0), ci32(&k.b, 0)}, *str[2] = {P(&k, 2), ci64(&k.b, 1)};
    kn_value *bnd[2] = {ci32(&k.b, 1), ci32(&k.b, 8)};
    kn_value *t = kn_b_load(&k.b, kn_ty_tile2(KN_F32, 4, 8), P(&k, 0), off, str, bnd, NULL, NULL);
    kn_load_set_off32(t);
    store2(&k.b, t, P(&k, 1), 8);
    float out[4 * 8];
    kn_region reg[] = {{a, sizeof a}, {out, sizeof out}};
    run_ok(&k, (kn_argval[]){{.p = a}, {.p = out}, {.i = INT64_C(1) << 40}}, reg, 2);
    for (int i = 0; i < 4 * 8; i++) assert_true(out[i] == (i < 8 ? a[i] : 0));
    kn_module_free(k.m);
  }
}

static void test_int_errors(void **st) {
  (void)st;
  const kn_opcode ops[] = {KN_OP_DIV, KN_OP_REM, KN_OP_SHL, KN_OP_SHR};
  for (int o = 0; o < 4; o++) {
    kn_type pt[] = {kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I32)};
    kb k = kb_new(2, pt);
    kn_b_binary(&k.b, ops[o], P(&k, 0), P(&k, 1));
    kn_diag d;
    int64_t bad = o < 2 ? 0 : 32;
    assert_int_equal(run_grid(&k, (kn_argval[]){{.i = 7}, {.i = bad}}, 1, 1, 1, NULL, 0, NULL, &d), -1);
    assert_non_null(strstr(d.message, o < 2 ? "by zero" : "out of range"));
    kn_module_free(k.m);
  }
}

/* dot on random f16 against a plain C f32-accumulation loop, bit for bit; and its speed */
static void test_dot(void **st) {
  (void)st;
  enum { M = 64, K = 128, N = 64 };
  static uint16_t am[M * K], bm[K * N];
  static double av[M * K], bv[K * N];
  static float c0[M * N], out[M * N];
  fill_float(KN_F16, am, av, M * K, -2, 2);
  fill_float(KN_F16, bm, bv, K * N, -2, 2);
  for (int i = 0; i < M * N; i++) c0[i] = (float)urand(-1, 1);
  for (int reps = 1; reps <= 101; reps += 100) {
    kn_type pt[] = {kn_ty_ptr(KN_F16), kn_ty_ptr(KN_F16), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32)};
    kb k = kb_new(4, pt);
    kn_builder *b = &k.b, body;
    kn_value *a = load2(b, P(&k, 0), KN_F16, M, K, K), *bb = load2(b, P(&k, 1), KN_F16, K, N, N);
    kn_value *acc = load2(b, P(&k, 2), KN_F32, M, N, N);
    /* reps dots in a loop; the result of the last one is stored (each starts from acc) */
    kn_op *loop = kn_b_for(b, ci32(b, 0), ci32(b, reps), ci32(b, 1), 1, &acc, &body);
    kn_value *r = kn_b_dot(&body, a, bb, acc);
    kn_b_yield(&body, 1, &r);
    store2(b, loop->res[0], P(&k, 3), N);
    kn_region reg[] = {{am, sizeof am}, {bm, sizeof bm}, {c0, sizeof c0}, {out, sizeof out}};
    kn_interp_stats s;
    kn_diag d;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kn_b_return(b, 0, NULL);
    if (kn_interp_run(k.k, (kn_argval[]){{.p = am}, {.p = bm}, {.p = c0}, {.p = out}}, (int[]){1, 1, 1}, reg, 4, &s, &d))
      fail_msg("%s", d.message);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(s.ops[KN_OP_DOT], reps);
    assert_int_equal(s.loop_iterations, reps);
    if (reps > 1) {
      double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / reps;
      printf("dot %dx%dx%d f16 -> f32: %.1f us per dot\n", M, N, K, us);
    }
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        float e = c0[i * N + j];
        for (int kk = 0; kk < K; kk++) e += (float)av[i * K + kk] * (float)bv[kk * N + j];
        if (out[i * N + j] != e) fail_msg("dot[%d][%d] = %a, want %a", i, j, (double)out[i * N + j], (double)e);
      }
    kn_module_free(k.m);
  }
}

/* dot on f32 operands (products not exact in f32): each product is rounded before the add */
static void test_dot_f32(void **st) {
  (void)st;
  enum { M = 16, K = 48, N = 24 };
  float a[M * K], b[K * N], out[M * N];
  for (int i = 0; i < M * K; i++) a[i] = (float)urand(-3, 3);
  for (int i = 0; i < K * N; i++) b[i] = (float)urand(-3, 3);
  kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32)};
  kb k = kb_new(3, pt);
  kn_builder *b_ = &k.b;
  kn_value *acc = kn_b_const_f(b_, kn_ty_tile2(KN_F32, M, N), 0.0);
  kn_value *r = kn_b_dot(b_, load2(b_, P(&k, 0), KN_F32, M, K, K), load2(b_, P(&k, 1), KN_F32, K, N, N), acc);
  store2(b_, r, P(&k, 2), N);
  kn_region reg[] = {{a, sizeof a}, {b, sizeof b}, {out, sizeof out}};
  run_ok(&k, (kn_argval[]){{.p = a}, {.p = b}, {.p = out}}, reg, 3);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      float e = 0;
      for (int kk = 0; kk < K; kk++) {
        volatile float p = a[i * K + kk] * b[kk * N + j]; /* volatile: no FMA contraction */
        e = e + p;
      }
      assert_true(out[i * N + j] == e);
    }
  kn_module_free(k.m);
}

/* reduce_sum / reduce_max on both axes and on rank 1, f32 and f16 */
static void test_reduce(void **st) {
  (void)st;
  enum { M = 8, N = 24 };
  for (int ti = 0; ti < 2; ti++) {
    kn_scalar t = ti ? KN_F16 : KN_F32;
    double xa[M * N];
    uint8_t xm[4 * M * N], s0[4 * N], s1[4 * M], m0[4 * N], m1[4 * M], s2[4];
    fill_float(t, xm, xa, M * N, -50, 50);
    if (ti) xa[7] = NAN, kn_store_elem(t, xm + 2 * 7, NAN); /* row 0, column 7 */
    kn_type pt[] = {kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t)};
    kb k = kb_new(6, pt);
    kn_builder *b = &k.b;
    kn_value *x = load2(b, P(&k, 0), t, M, N, N);
    store1(b, kn_b_reduce(b, KN_OP_REDUCE_SUM, x, 0), P(&k, 1));
    store1(b, kn_b_reduce(b, KN_OP_REDUCE_SUM, x, 1), P(&k, 2));
    store1(b, kn_b_reduce(b, KN_OP_REDUCE_MAX, x, 0), P(&k, 3));
    kn_value *rm = kn_b_reduce(b, KN_OP_REDUCE_MAX, x, 1);
    store1(b, rm, P(&k, 4));
    kn_value *tot = kn_b_reduce(b, KN_OP_REDUCE_SUM, rm, 0); /* rank 1 -> scalar */
    kn_value *z = ci32(b, 0), *one = ci32(b, 1);
    kn_b_store(b, tot, P(&k, 5), &z, &one, NULL, NULL);
    kn_region reg[] = {{xm, sizeof xm}, {s0, sizeof s0}, {s1, sizeof s1}, {m0, sizeof m0}, {m1, sizeof m1}, {s2, sizeof s2}};
    run_ok(&k, (kn_argval[]){{.p = xm}, {.p = s0}, {.p = s1}, {.p = m0}, {.p = m1}, {.p = s2}}, reg, 6);
    size_t es = kn_scalar_size(t);
    double rowmax[M], total = 0;
    for (int j = 0; j < N; j++) {
      double s = xa[j], mx = xa[j];
      for (int i = 1; i < M; i++) s = kn_round(t, s + xa[i * N + j]), mx = fmax_ref(mx, xa[i * N + j]);
      if (t == KN_F32) { /* the same sum in plain float */
        float fs = (float)xa[j];
        for (int i = 1; i < M; i++) fs += (float)xa[i * N + j];
        assert_true(same(s, fs));
      }
      assert_true(same(kn_load_elem(t, s0 + es * (size_t)j), s));
      assert_true(same(kn_load_elem(t, m0 + es * (size_t)j), mx));
    }
    for (int i = 0; i < M; i++) {
      double s = xa[i * N], mx = xa[i * N];
      for (int j = 1; j < N; j++) s = kn_round(t, s + xa[i * N + j]), mx = fmax_ref(mx, xa[i * N + j]);
      assert_true(same(kn_load_elem(t, s1 + es * (size_t)i), s));
      assert_true(same(kn_load_elem(t, m1 + es * (size_t)i), mx));
      rowmax[i] = mx;
      total = i ? kn_round(t, total + rowmax[i]) : rowmax[0];
    }
    assert_true(same(kn_load_elem(t, s2), total));
    kn_module_free(k.m);
  }
}

/* for with carried values (a scalar and a tile), step > 1, an empty loop, step <= 0 */
static void test_for(void **st) {
  (void)st;
  enum { N = 16 };
  const int cases[][3] = {{2, 31, 3}, {5, 5, 1}, {7, 3, 2}, {-4, 4, 1}};
  for (int c = 0; c < 4; c++) {
    int lo = cases[c][0], hi = cases[c][1], step = cases[c][2];
    int32_t res[N + 2];
    float x[N], outf[N];
    for (int i = 0; i < N; i++) x[i] = (float)urand(-1, 1);
    kn_type pt[] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_I32)};
    kb k = kb_new(3, pt);
    kn_builder *b = &k.b, body;
    kn_value *t0 = load1(b, P(&k, 0), KN_F32, N);
    kn_value *init[3] = {ci32(b, 100), t0, ci32(b, 0)};
    kn_op *loop = kn_b_for(b, ci32(b, lo), ci32(b, hi), ci32(b, step), 3, init, &body);
    kn_value *iv = loop->region[0]->args[0], *s = loop->region[0]->args[1],
             *t = loop->region[0]->args[2], *cnt = loop->region[0]->args[3];
    /* s += iv; t = t * 0.5 + 1 (rounded each op); cnt yields swapped with s to check ordering */
    kn_value *s2 = kn_b_binary(&body, KN_OP_ADD, s, iv);
    kn_value *half = kn_b_const_f(&body, kn_ty_tile1(KN_F32, N), 0.5);
    kn_value *onet = kn_b_const_f(&body, kn_ty_tile1(KN_F32, N), 1.0);
    kn_value *t2 = kn_b_binary(&body, KN_OP_ADD, kn_b_binary(&body, KN_OP_MUL, t, half), onet);
    kn_value *c2 = kn_b_binary(&body, KN_OP_ADD, cnt, ci32(&body, 1));
    kn_b_yield(&body, 3, (kn_value *[]){s2, t2, c2});
    kn_value *z = ci32(b, 0), *o1 = ci32(b, 1), *two = ci32(b, N + 1);
    kn_b_store(b, loop->res[0], P(&k, 2), &z, &o1, NULL, NULL);
    kn_b_store(b, loop->res[2], P(&k, 2), &two, &o1, NULL, NULL);
    store1(b, loop->res[1], P(&k, 1));
    kn_region reg[] = {{x, sizeof x}, {outf, sizeof outf}, {res, sizeof res}};
    kn_interp_stats sts;
    kn_diag d;
    if (run_grid(&k, (kn_argval[]){{.p = x}, {.p = outf}, {.p = res}}, 1, 1, 1, reg, 3, &sts, &d))
      fail_msg("%s", d.message);
    int32_t es = 100, n = 0;
    float et[N];
    memcpy(et, x, sizeof et);
    for (int i = lo; i < hi; i += step) {
      es += i, n++;
      for (int j = 0; j < N; j++) et[j] = et[j] * 0.5f + 1.0f;
    }
    assert_int_equal(res[0], es);
    assert_int_equal(res[N + 1], n);
    for (int j = 0; j < N; j++) assert_true(outf[j] == et[j]);
    assert_int_equal(sts.loop_iterations, n);
    assert_int_equal(sts.ops[KN_OP_FOR], 1);
    assert_int_equal(sts.ops[KN_OP_YIELD], n);
    assert_int_equal(sts.ops[KN_OP_MUL], n);
    kn_module_free(k.m);
  }
  /* step 0 is a runtime error */
  kn_type pt[] = {kn_ty_scalar(KN_I32)};
  kb k = kb_new(1, pt);
  kn_builder body;
  kn_b_for(&k.b, ci32(&k.b, 0), ci32(&k.b, 10), P(&k, 0), 0, NULL, &body);
  kn_b_yield(&body, 0, NULL);
  kn_diag d;
  assert_int_equal(run_grid(&k, (kn_argval[]){{.i = 0}}, 1, 1, 1, NULL, 0, NULL, &d), -1);
  assert_non_null(strstr(d.message, "step"));
  kn_module_free(k.m);
}

/* if on program_id: even programs store pid*10, odd ones -pid; grid ids on all axes */
static void test_if_grid(void **st) {
  (void)st;
  enum { GX = 3, GY = 2, GZ = 2, NP = GX * GY * GZ };
  int32_t out[NP * 4];
  kn_type pt[] = {kn_ty_ptr(KN_I32)};
  kb k = kb_new(1, pt);
  kn_builder *b = &k.b, tb, eb;
  kn_value *x = kn_b_program_id(b, 0), *y = kn_b_program_id(b, 1), *z = kn_b_program_id(b, 2);
  kn_value *lin = kn_b_binary(b, KN_OP_ADD, x, kn_b_binary(b, KN_OP_MUL, kn_b_num_programs(b, 0),
                              kn_b_binary(b, KN_OP_ADD, y, kn_b_binary(b, KN_OP_MUL, kn_b_num_programs(b, 1), z))));
  kn_value *even = kn_b_cmp(b, KN_PRED_EQ, kn_b_binary(b, KN_OP_REM, lin, ci32(b, 2)), ci32(b, 0));
  kn_type it = kn_ty_scalar(KN_I32);
  kn_op *ifo = kn_b_if(b, even, 1, &it, &tb, &eb);
  kn_value *tv = kn_b_binary(&tb, KN_OP_MUL, lin, ci32(&tb, 10));
  kn_b_yield(&tb, 1, &tv);
  kn_value *ev = kn_b_unary(&eb, KN_OP_NEG, lin);
  kn_b_yield(&eb, 1, &ev);
  kn_value *base = kn_b_binary(b, KN_OP_MUL, lin, ci32(b, 4)), *one = ci32(b, 1);
  kn_value *vals[4] = {ifo->res[0], x, y, z};
  for (int i = 0; i < 4; i++) {
    kn_value *o = kn_b_binary(b, KN_OP_ADD, base, ci32(b, i));
    kn_b_store(b, vals[i], P(&k, 0), &o, &one, NULL, NULL);
  }
  kn_region reg = {out, sizeof out};
  kn_interp_stats s;
  kn_diag d;
  if (run_grid(&k, (kn_argval[]){{.p = out}}, GX, GY, GZ, &reg, 1, &s, &d)) fail_msg("%s", d.message);
  for (int pz = 0; pz < GZ; pz++)
    for (int py = 0; py < GY; py++)
      for (int px = 0; px < GX; px++) {
        int l = px + GX * (py + GY * pz);
        assert_int_equal(out[4 * l], l % 2 == 0 ? l * 10 : -l);
        assert_int_equal(out[4 * l + 1], px);
        assert_int_equal(out[4 * l + 2], py);
        assert_int_equal(out[4 * l + 3], pz);
      }
  assert_int_equal(s.programs, NP);
  assert_int_equal(s.ops[KN_OP_IF], NP);
  assert_int_equal(s.ops[KN_OP_MUL], NP * 3 + NP / 2); /* three in every program, one per then */
  assert_int_equal(s.ops[KN_OP_NEG], NP / 2);
  kn_module_free(k.m);
}

/* call of a function with two results; recursion is reported */
static void test_call(void **st) {
  (void)st;
  enum { N = 32 };
  kn_module *m = kn_module_new(NULL);
  kn_type tt = kn_ty_tile1(KN_F32, N), sc = kn_ty_scalar(KN_F32);
  kn_func *f = kn_func_new(m, "fma_like", false, 2, (kn_type[]){tt, sc}, NULL, 2, (kn_type[]){tt, sc});
  kn_builder fb = kn_builder_at_end(m, f->body);
  kn_value *sq = kn_b_binary(&fb, KN_OP_MUL, kn_func_param(f, 0), kn_func_param(f, 0));
  kn_value *r0 = kn_b_binary(&fb, KN_OP_ADD, sq, kn_b_splat(&fb, kn_func_param(f, 1), 1, (int32_t[]){N}));
  kn_value *r1 = kn_b_reduce(&fb, KN_OP_REDUCE_SUM, r0, 0);
  kn_b_return(&fb, 2, (kn_value *[]){r0, r1});
  kn_func *k = kn_func_new(m, "k", true, 3, (kn_type[]){kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), sc}, NULL, 0, NULL);
  kn_builder b = kn_builder_at_end(m, k->body);
  kn_value *x = load1(&b, kn_func_param(k, 0), KN_F32, N);
  kn_op *c1 = kn_b_call(&b, f, 2, (kn_value *[]){x, kn_func_param(k, 2)});
  kn_op *c2 = kn_b_call(&b, f, 2, (kn_value *[]){c1->res[0], c1->res[1]}); /* call twice: frame reuse */
  store1(&b, c2->res[0], kn_func_param(k, 1));
  kn_b_return(&b, 0, NULL);
  float xs[N], out[N];
  for (int i = 0; i < N; i++) xs[i] = (float)urand(-1, 1);
  kn_region reg[] = {{xs, sizeof xs}, {out, sizeof out}};
  kn_diag d;
  double sarg = 0.1; /* rounded to f32 on entry */
  if (kn_interp_run(k, (kn_argval[]){{.p = xs}, {.p = out}, {.f = sarg}}, (int[]){1, 1, 1}, reg, 2, NULL, &d))
    fail_msg("%s", d.message);
  float y[N], s = 0;
  for (int i = 0; i < N; i++) y[i] = xs[i] * xs[i] + (float)sarg;
  s = y[0];
  for (int i = 1; i < N; i++) s += y[i];
  for (int i = 0; i < N; i++) assert_true(out[i] == y[i] * y[i] + s);
  kn_module_free(m);

  /* a function calling itself */
  m = kn_module_new(NULL);
  f = kn_func_new(m, "rec", false, 1, &sc, NULL, 1, &sc);
  fb = kn_builder_at_end(m, f->body);
  kn_op *self = kn_b_call(&fb, f, 1, (kn_value *[]){kn_func_param(f, 0)});
  kn_b_return(&fb, 1, self->res);
  k = kn_func_new(m, "k", true, 1, &sc, NULL, 0, NULL);
  b = kn_builder_at_end(m, k->body);
  kn_b_call(&b, f, 1, (kn_value *[]){kn_func_param(k, 0)});
  kn_b_return(&b, 0, NULL);
  assert_int_equal(kn_interp_run(k, (kn_argval[]){{.f = 1}}, (int[]){1, 1, 1}, NULL, 0, NULL, &d), -1);
  assert_non_null(strstr(d.message, "recursive"));
  kn_module_free(m);
}

/* ptradd, hints, float kernel arguments rounded to the parameter type, i1 memory */
static void test_misc(void **st) {
  (void)st;
  uint16_t h[16] = {0};
  uint8_t flags[4] = {0};
  kn_type pt[] = {kn_ty_ptr(KN_F16), kn_ty_scalar(KN_F16), kn_ty_scalar(KN_I64), kn_ty_ptr(KN_I1)};
  kb k = kb_new(4, pt);
  kn_builder *b = &k.b;
  kn_value *p = kn_b_ptradd(b, P(&k, 0), kn_b_hint(b, KN_OP_MULTIPLE_OF, P(&k, 2), 2));
  kn_value *v = kn_b_hint(b, KN_OP_MAX_CONTIGUOUS, kn_b_splat(b, P(&k, 1), 1, (int32_t[]){4}), 4);
  store1(b, v, p);
  kn_value *gt = kn_b_cmp(b, KN_PRED_GT, load1(b, P(&k, 0), KN_F16, 4),
                          kn_b_const_f(b, kn_ty_tile1(KN_F16, 4), 0.0));
  store1(b, gt, P(&k, 3));
  kn_region reg[] = {{h, sizeof h}, {flags, sizeof flags}};
  double arg = 1.0 + 0x1p-12; /* not an f16: rounds to 1.0 */
  run_ok(&k, (kn_argval[]){{.p = h}, {.f = arg}, {.i = 2}, {.p = flags}}, reg, 2);
  for (int i = 0; i < 16; i++) assert_int_equal(h[i], i >= 2 && i < 6 ? 0x3C00 : 0);
  assert_int_equal(flags[0], 0);
  assert_int_equal(flags[1], 0);
  assert_int_equal(flags[2], 1);
  assert_int_equal(flags[3], 1);
  kn_module_free(k.m);
}

/* ---- elemental calls, gather, kn_interp_fn ---- */

/* fresh random inputs for the tests below (the seed is printed; KILN_TEST_SEED replays it) */
static uint64_t fresh_seed(void) {
  uint64_t s = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)clock();
  if (getenv("KILN_TEST_SEED")) s = strtoull(getenv("KILN_TEST_SEED"), NULL, 0);
  rng_state = s | 1;
  printf("  seed %llu\n", (unsigned long long)s);
  return s;
}

static kn_module *parse_ok(const char *text) {
  kn_diag d;
  kn_module *m = kn_parse("t.tile", text, strlen(text), &d);
  if (!m || kn_verify(m, &d)) fail_msg("%s", d.rendered);
  return m;
}

static const char *const elemental_text =
    "func @f(%x: f32, %i: i32, %tab: ptr<f32>, %n: i32, %c: f32) -> (f32, i1) {\n"
    "  %one = const 1 : i32\n"
    "  %t = load %tab[%i] strides [%one] bounds [%n] : f32\n"
    "  %y = mul %x, %t : f32\n"
    "  %r = add %y, %c : f32\n"
    "  %z = const 0 : f32\n"
    "  %p = cmp gt %r, %z : i1\n"
    "  return %r, %p\n"
    "}\n"
    "\n"
    "kernel @k(%xs: ptr<f32>, %is: ptr<i32>, %tab: ptr<f32>, %n: i32, %c: f32, %o: ptr<f32>, "
    "%po: ptr<i1>) {\n"
    "  %c0 = const 0 : i32\n"
    "  %c1 = const 1 : i32\n"
    "  %c8 = const 8 : i32\n"
    "  %x = load %xs[%c0, %c0] strides [%c8, %c1] : tile<16x8xf32>\n"
    "  %i = load %is[%c0, %c0] strides [%c8, %c1] : tile<16x8xi32>\n"
    "  %r, %p = call @f(%x, %i, %tab, %n, %c) : tile<16x8xf32>, tile<16x8xi1>\n"
    "  store %r, %o[%c0, %c0] strides [%c8, %c1]\n"
    "  store %p, %po[%c0, %c0] strides [%c8, %c1]\n"
    "  return\n"
    "}\n";

/* an elemental call gives, element by element, what the function gives called on scalars (and
 * what C computes); a run-time error in the callee names the element */
static void test_elemental_call(void **st) {
  (void)st;
  enum { M = 16, N = 8, E = M * N, T = 20 };
  fresh_seed();
  kn_module *m = parse_ok(elemental_text);
  float xs[E], tab[T], o[E];
  int32_t is[E];
  uint8_t po[E];
  for (int e = 0; e < E; e++) xs[e] = (float)urand(-4, 4), is[e] = (int32_t)(rnd() % 30) - 5;
  for (int i = 0; i < T; i++) tab[i] = (float)urand(-2, 2);
  double c = urand(-1, 1);
  kn_region reg[] = {{xs, sizeof xs}, {is, sizeof is}, {tab, sizeof tab}, {o, sizeof o}, {po, sizeof po}};
  kn_argval av[] = {{.p = xs}, {.p = is}, {.p = tab}, {.i = T}, {.f = c}, {.p = o}, {.p = po}};
  kn_diag d;
  if (kn_interp_run(kn_module_find(m, "k"), av, (int[]){1, 1, 1}, reg, 5, NULL, &d))
    fail_msg("%s", d.rendered);
  kn_interp_fn *fn = kn_interp_fn_new(kn_module_find(m, "f"), 0, reg + 2, 1, &d);
  if (!fn) fail_msg("%s", d.rendered);
  for (int e = 0; e < E; e++) {
    kn_argval a[5] = {{.f = xs[e]}, {.i = is[e]}, {.p = tab}, {.i = T}, {.f = c}}, r[2];
    if (kn_interp_fn_call(fn, a, r, &d)) fail_msg("%s", d.rendered);
    float t = is[e] >= 0 && is[e] < T ? tab[is[e]] : 0.0f;
    float want = xs[e] * t + (float)c;
    if (memcmp(&o[e], &want, 4) || (float)r[0].f != want)
      fail_msg("element %d: %.9g (scalar call %.9g), want %.9g", e, o[e], r[0].f, want);
    assert_int_equal(po[e], want > 0);
    assert_int_equal(r[1].i, want > 0);
  }
  kn_interp_fn_free(fn);
  /* an index of the table past its region, which a bound no longer guards: the element is named */
  for (int e = 0; e < E; e++) is[e] = e % T;
  int bad = (int)(rnd() % E);
  is[bad] = T + 3;
  av[3].i = T + 10;
  assert_int_equal(kn_interp_run(kn_module_find(m, "k"), av, (int[]){1, 1, 1}, reg, 5, NULL, &d), -1);
  char want[96];
  snprintf(want, sizeof want, "(element [%d, %d] of the elemental call at line 17)", bad / N, bad % N);
  if (!strstr(d.message, "load out of bounds") || !strstr(d.message, want) ||
      !strstr(d.message, "(program (0,0,0))"))
    fail_msg("message '%s' lacks '%s'", d.message, want);
  if (strncmp(d.rendered, "t.tile:3:", 9)) fail_msg("location: %s", d.rendered);
  kn_module_free(m);
}

/* gather: element (i, j) is p[offs[i][j]] where the mask holds, else other; dead elements
 * touch nothing (their offsets point anywhere); a live element outside every region is an error */
static void test_gather(void **st) {
  (void)st;
  enum { M = 8, N = 12, E = M * N, T = 37 };
  fresh_seed();
  for (int ti = 0; ti < 2; ti++) {
    kn_scalar it = ti ? KN_I64 : KN_I32;
    int16_t tab[T];  /* f16 bits */
    double tv[T];
    fill_float(KN_F16, tab, tv, T, -8, 8);
    int64_t offs[E];
    uint8_t mk[E];
    uint16_t out[E];
    for (int e = 0; e < E; e++) {
      mk[e] = rnd() % 3 != 0;
      offs[e] = mk[e] ? (int64_t)(rnd() % T) : (int64_t)(rnd() % 1000000) - 500000;
    }
    int32_t offs32[E];
    for (int e = 0; e < E; e++) offs32[e] = (int32_t)offs[e];
    kn_type pt[] = {kn_ty_ptr(KN_F16), kn_ty_ptr(it), kn_ty_ptr(KN_I1), kn_ty_ptr(KN_F16)};
    kb k = kb_new(4, pt);
    kn_builder *b = &k.b;
    kn_value *o = load2(b, P(&k, 1), it, M, N, 0), *msk = load2(b, P(&k, 2), KN_I1, M, N, 0);
    kn_value *other = kn_b_const_f(b, kn_ty_scalar(KN_F16), -0.5);
    kn_value *g = kn_b_gather(b, kn_ty_tile2(KN_F16, M, N), P(&k, 0), o, msk, other);
    store2(b, g, P(&k, 3), 0);
    void *op = ti ? (void *)offs : (void *)offs32;
    kn_region reg[] = {{tab, sizeof tab}, {op, ti ? sizeof offs : sizeof offs32}, {mk, sizeof mk},
                       {out, sizeof out}};
    kn_argval av[] = {{.p = tab}, {.p = op}, {.p = mk}, {.p = out}};
    run_ok(&k, av, reg, 4);
    for (int e = 0; e < E; e++) {
      double want = mk[e] ? tv[offs[e]] : -0.5;
      if (kn_decode(KN_F16, out[e]) != want) fail_msg("element %d: %g, want %g", e, kn_decode(KN_F16, out[e]), want);
    }
    /* a live element past the table: an error naming it */
    int bad = (int)(rnd() % E);
    mk[bad] = 1, offs[bad] = T, offs32[bad] = T;
    kn_diag d;
    assert_int_equal(kn_interp_run(k.k, av, (int[]){1, 1, 1}, reg, 4, NULL, &d), -1);
    char want[64];
    snprintf(want, sizeof want, "gather out of bounds: element [%d, %d]", bad / N, bad % N);
    if (!strstr(d.message, want)) fail_msg("message '%s' lacks '%s'", d.message, want);
    kn_module_free(k.m);
  }
}

/* KN_INTERP_F64: x * (1 + 2^-30) is x in f32 (the constant itself rounds to 1) and the exact
 * product in f64; f16 arguments are not rounded; a load from ptr<f16> widens the stored value;
 * kn_interp_run_flags: (a + b) - a in double, stored to f32 */
static void test_interp_fn_f64(void **st) {
  (void)st;
  fresh_seed();
  kn_module *m = parse_ok(
      "func @g(%x: f32, %h: f16, %p: ptr<f16>) -> (f32, f16, f32) {\n"
      "  %k = const 1.000000000931322574615478515625 : f32\n"
      "  %r = mul %x, %k : f32\n"
      "  %hh = add %h, %h : f16\n"
      "  %c0 = const 0 : i32\n"
      "  %c1 = const 1 : i32\n"
      "  %v = load %p[%c0] strides [%c1] : f16\n"
      "  %w = cast %v : f32\n"
      "  return %r, %hh, %w\n"
      "}\n"
      "\n"
      "kernel @k(%a: f32, %b: f32, %o: ptr<f32>) {\n"
      "  %s = add %a, %b : f32\n"
      "  %t = sub %s, %a : f32\n"
      "  %c0 = const 0 : i32\n"
      "  %c1 = const 1 : i32\n"
      "  store %t, %o[%c0] strides [%c1]\n"
      "  return\n"
      "}\n");
  uint16_t hv = (uint16_t)kn_encode(KN_F16, urand(-100, 100));
  kn_region reg = {&hv, sizeof hv};
  kn_diag d;
  kn_interp_fn *f32 = kn_interp_fn_new(kn_module_find(m, "g"), 0, &reg, 1, &d);
  kn_interp_fn *f64 = kn_interp_fn_new(kn_module_find(m, "g"), KN_INTERP_F64, &reg, 1, &d);
  assert_non_null(f32);
  assert_non_null(f64);
  for (int i = 0; i < 100; i++) {
    double x = (double)(float)urand(1, 2), h = 1.0 + 0x1p-20 * (double)(rnd() % 1000 + 1);
    kn_argval a[3] = {{.f = x}, {.f = h}, {.p = &hv}}, r32[3], r64[3];
    if (kn_interp_fn_call(f32, a, r32, &d) || kn_interp_fn_call(f64, a, r64, &d)) fail_msg("%s", d.rendered);
    assert_true(r32[0].f == x);                       /* f32: 1 + 2^-30 is 1 */
    assert_true(r64[0].f == x * (1 + 0x1p-30));      /* f64: exact */
    assert_true(r64[0].f != x);
    assert_true(r32[1].f == kn_round(KN_F16, kn_round(KN_F16, h) * 2));
    assert_true(r64[1].f == h * 2);                  /* the argument as given */
    assert_true(r32[2].f == kn_decode(KN_F16, hv));  /* the stored f16, widened */
    assert_true(r64[2].f == kn_decode(KN_F16, hv));
  }
  kn_interp_fn_free(f32);
  kn_interp_fn_free(f64);
  float out = 0;
  kn_region ro = {&out, sizeof out};
  kn_argval ka[3] = {{.f = 1e8}, {.f = 1.0}, {.p = &out}};
  assert_int_equal(kn_interp_run_flags(kn_module_find(m, "k"), 0, ka, (int[]){1, 1, 1}, &ro, 1, NULL, &d), 0);
  assert_true(out == 0.0f);   /* 1e8 + 1 rounds to 1e8 in f32 */
  assert_int_equal(kn_interp_run_flags(kn_module_find(m, "k"), KN_INTERP_F64, ka, (int[]){1, 1, 1}, &ro, 1, NULL, &d), 0);
  assert_true(out == 1.0f);
  kn_module_free(m);
}

/* kn_interp_fn_call on a 7-op function (what a float64 reference pays per element for a score
 * function), a million calls: the sum must be exact; the rate is printed for the reader, never
 * asserted (a sanitizer build runs it several times slower; speed is the benchmarks' business) */
static void test_interp_fn_speed(void **st) {
  (void)st;
  kn_module *m = parse_ok(
      "func @s(%score: f32, %q: i32, %kv: i32, %slope: f32) -> (f32) {\n"
      "  %d = sub %q, %kv : i32\n"
      "  %df = cast %d : f32\n"
      "  %a = mul %slope, %df : f32\n"
      "  %r = add %score, %a : f32\n"
      "  %z = const 0 : i32\n"
      "  %c = cmp ge %d, %z : i1\n"
      "  %o = select %c, %r, %score : f32\n"
      "  return %o\n"
      "}\n");
  kn_diag d;
  kn_interp_fn *fn = kn_interp_fn_new(kn_module_find(m, "s"), KN_INTERP_F64, NULL, 0, &d);
  assert_non_null(fn);
  enum { CALLS = 1000000 };
  double sum = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  for (int i = 0; i < CALLS; i++) {
    kn_argval a[4] = {{.f = 0.5}, {.i = i & 1023}, {.i = i >> 10}, {.f = -0.25}}, r;
    if (kn_interp_fn_call(fn, a, &r, &d)) fail_msg("%s", d.rendered);
    sum += r.f;
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  printf("  kn_interp_fn_call, 7 ops: %.2f M calls/s of CPU time (%.0f ns a call)\n", CALLS / s * 1e-6, s / CALLS * 1e9);
  /* the sum, in double: the select keeps score where q < kv */
  double want = 0;
  for (int i = 0; i < CALLS; i++) {
    int dd = (i & 1023) - (i >> 10);
    want += dd >= 0 ? 0.5 + -0.25 * dd : 0.5;
  }
  assert_true(sum == want);
  kn_interp_fn_free(fn);
  kn_module_free(m);
}

/* the step budget (kn_interp_run_budget): a loop of 2^63 - 1 iterations stops with the error
 * once the budget is spent (it ran for ever before); a loop of random length with a budget that
 * covers it computes the sum of its tiles, and one step less is the error; stats.steps is the
 * budget's count */
static void test_step_budget(void **st) {
  (void)st;
  fresh_seed();
  kn_module *m = parse_ok(
      "kernel @k(%p: ptr<f32>, %n: i64, %o: ptr<f32>) {\n"
      "  %c0 = const 0 : i64\n"
      "  %c1 = const 1 : i64\n"
      "  %c8 = const 8 : i64\n"
      "  %z = const 0 : tile<8xf32>\n"
      "  %s = for %i = %c0 to %n step %c1 iter (%a = %z) : tile<8xf32> {\n"
      "    %at = mul %i, %c8 : i64\n"
      "    %x = load %p[%at] strides [%c1] : tile<8xf32>\n"
      "    %b = add %a, %x : tile<8xf32>\n"
      "    yield %b\n"
      "  }\n"
      "  %r = reduce_sum %s, 0 : f32\n"
      "  store %r, %o[%c0] strides [%c1]\n"
      "  return\n"
      "}\n");
  kn_func *k = kn_module_find(m, "k");
  int n = 50 + (int)(rnd() % 400);
  float *p = malloc(sizeof *p * 8 * (size_t)n), out = -1;
  for (int i = 0; i < 8 * n; i++) p[i] = (float)(int)(rnd() % 200) - 100; /* sums exact in f32 */
  kn_region reg[2] = {{p, sizeof *p * 8 * (size_t)n}, {&out, sizeof out}};
  kn_diag d;
  /* 2^63 - 1 iterations (the loads stay inside p only for the first n: the budget ends first) */
  kn_argval forever[3] = {{.p = p}, {.i = INT64_MAX}, {.p = &out}};
  uint64_t budget = 10 * (uint64_t)n; /* a tenth of n iterations at ~30 steps each */
  assert_int_equal(kn_interp_run_budget(k, 0, budget, forever, (int[]){1, 1, 1}, reg, 2, NULL, &d), -1);
  if (!strstr(d.message, "step budget of") || !strstr(d.message, "exhausted"))
    fail_msg("message '%s'", d.message);
  /* the same loop over n tiles, its ops counted by a run without a budget */
  kn_argval finite[3] = {{.p = p}, {.i = n}, {.p = &out}};
  kn_interp_stats stats;
  assert_int_equal(kn_interp_run_budget(k, 0, 0, finite, (int[]){1, 1, 1}, reg, 2, &stats, &d), 0);
  float want = 0;
  for (int i = 0; i < 8 * n; i++) want += p[i];
  assert_true(out == want);
  /* steps: every op once, plus 8 for each tile result (const z, the for, and per iteration the
   * load and the add) */
  uint64_t ops = 0;
  for (int i = 0; i < KN_OP_COUNT; i++) ops += stats.ops[i];
  uint64_t steps = ops + 16 + 16 * (uint64_t)n;
  assert_int_equal(stats.steps, 0); /* (no budget: not counted) */
  out = -1;
  if (kn_interp_run_budget(k, 0, steps, finite, (int[]){1, 1, 1}, reg, 2, &stats, &d)) fail_msg("%s", d.rendered);
  assert_true(out == want);
  assert_int_equal(stats.steps, steps); /* the count the budget kept: what it took */
  assert_int_equal(kn_interp_run_budget(k, 0, steps - 1, finite, (int[]){1, 1, 1}, reg, 2, &stats, &d), -1);
  assert_non_null(strstr(d.message, "step budget"));
  /* exhausted: the count includes the op that went past (the last store, one step) */
  assert_int_equal(stats.steps, steps);
  free(p);
  kn_module_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vadd),          cmocka_unit_test(test_float_binary),
      cmocka_unit_test(test_float_unary),   cmocka_unit_test(test_int_ops),
      cmocka_unit_test(test_cmp_select),    cmocka_unit_test(test_casts),
      cmocka_unit_test(test_shapes),        cmocka_unit_test(test_load2d_mask_other),
      cmocka_unit_test(test_off32), cmocka_unit_test(test_oob),           cmocka_unit_test(test_int_errors),
      cmocka_unit_test(test_dot),           cmocka_unit_test(test_dot_f32),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_for),           cmocka_unit_test(test_if_grid),
      cmocka_unit_test(test_call),          cmocka_unit_test(test_misc),
      cmocka_unit_test(test_elemental_call), cmocka_unit_test(test_gather),
      cmocka_unit_test(test_interp_fn_f64), cmocka_unit_test(test_interp_fn_speed),
      cmocka_unit_test(test_step_budget),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
