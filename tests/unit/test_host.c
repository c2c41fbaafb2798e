/* test_host.c — the host target (compiler/ + runtime/host.c) against the reference interpreter.
 *
 * Every test builds a small kernel with the builder, verifies it, and runs it twice on the same
 * fresh random inputs: compiled for the host (kn_compile + kn_kernel_run_host) and interpreted
 * (kn_interp_run).  Every buffer is then compared element by element: bit for bit (NaN equals
 * NaN) unless the test allows a few ulps.  The attention template is compared with the float64
 * reference instead, within kn_attn_tolerance(dtype).  Compile errors must come back as
 * diagnostics, never crashes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "device.h"
#include "interp.h"
#include "numeric.h"
#include "passes.h"
#include "pipeline.h"

#include "kbuild.h"

/* ---- random numbers ---- */

/* ---- buffers and the two runs ---- */

typedef enum fill { FILL_SMALL, FILL_MIXED, FILL_MIXED_NO_PINF, FILL_POSITIVE, FILL_NONZERO_INT, FILL_SHIFT, FILL_ZERO } fill;

typedef struct bufspec {
  kn_scalar t;
  int64_t n;   /* elements */
  fill how;
} bufspec;

static void fill_buf(const bufspec *s, void *mem) {
  size_t es = kn_scalar_size(s->t);
  for (int64_t i = 0; i < s->n; i++) {
    char *p = (char *)mem + (size_t)i * es;
    if (s->how == FILL_ZERO) {
      memset(p, 0, es);
    } else if (kn_scalar_is_float(s->t)) {
      double x;
      switch (s->how) {
      case FILL_POSITIVE: x = urand(0.01, 8); break;
      case FILL_MIXED:
      case FILL_MIXED_NO_PINF: {
        int r = (int)(rnd() % 16);
        x = r < 5 ? urand(-2, 2) : r < 9 ? urand(-600, 600) : r < 12 ? urand(-1e5, 1e5)
          : r == 12 ? 0.0 : r == 13 ? -0.0 : r == 14 ? (rnd() & 1 ? INFINITY : -INFINITY) : NAN;
        if (s->how == FILL_MIXED_NO_PINF && x == INFINITY) x = -x;
        break;
      }
      default: x = urand(-4, 4); break;
      }
      kn_store_elem(s->t, p, x);
      if (s->how == FILL_MIXED_NO_PINF && kn_load_elem(s->t, p) == INFINITY) kn_store_elem(s->t, p, 1.0);
    } else {
      int64_t x;
      switch (s->how) {
      case FILL_MIXED: x = (rnd() & 3) ? (int64_t)(rnd() % 2001) - 1000 : (int64_t)rnd(); break;
      case FILL_NONZERO_INT: x = (int64_t)(rnd() % 200) - 100; x = x ? x : 7; if (rnd() % 8 == 0) x = -1; break;
      case FILL_SHIFT: x = (int64_t)(rnd() % (s->t == KN_I32 ? 32 : s->t == KN_I64 ? 64 : 1)); break;
      case FILL_POSITIVE: x = (int64_t)(rnd() % 100); break;
      default: x = (int64_t)(rnd() % 41) - 20; break;
      }
      if (s->t == KN_I1) x = s->how == FILL_SHIFT ? 0 : (int64_t)(rnd() & 1);
      kn_store_elem_i(s->t, p, x);
    }
  }
}

static bool same_elem(kn_scalar t, const void *a, const void *b, double ulps) {
  if (!kn_scalar_is_float(t)) return kn_load_elem_i(t, a) == kn_load_elem_i(t, b);
  double x = kn_load_elem(t, a), y = kn_load_elem(t, b);
  if (isnan(x) || isnan(y)) return isnan(x) && isnan(y);
  if (x == y) return signbit(x) == signbit(y) || ulps > 0;
  if (ulps == 0 || isinf(x) || isinf(y)) return false;
  /* ulps of the format at the larger magnitude */
  double m = fmax(fabs(x), fabs(y));
  int e;
  frexp(m, &e);
  int p = t == KN_F32 ? 24 : t == KN_F16 ? 11 : t == KN_BF16 ? 8 : 4;
  return fabs(x - y) <= ulps * ldexp(1.0, e - p);
}

typedef struct run_opts {
  int grid[3];
  const kn_argval *extra;  /* scalar args after the buffers */
  int nextra;
  double ulps;             /* 0: bit for bit */
  const char *expect_host_error; /* substring of the host run's error, or NULL */
} run_opts;

/* runs kernel "k" of m on host and interpreter with buffers bs (params 0..nb-1) and compares.
 * The host runs checked (compiled with check_bounds, run against exactly those buffers), so a
 * lowering that strays outside them fails here with the access named; the unchecked code is run
 * by test_attention and the golden files. */
static void check_kernel(kn_module *m, int nb, const bufspec *bs, const run_opts *o) {
  kn_diag d;
  if (kn_verify(m, &d)) fail_msg("verify: %s", d.rendered);
  void *mi[16], *mh[16];
  kn_argval args[32];
  kn_region reg[16], regh[16];
  assert_true(nb <= 16 && nb + (o ? o->nextra : 0) <= 32);
  for (int i = 0; i < nb; i++) {
    size_t bytes = (size_t)bs[i].n * kn_scalar_size(bs[i].t);
    mi[i] = calloc(1, bytes + 1);
    mh[i] = calloc(1, bytes + 1);
    fill_buf(&bs[i], mi[i]);
    memcpy(mh[i], mi[i], bytes);
    reg[i] = (kn_region){mi[i], bytes};
    regh[i] = (kn_region){mh[i], bytes};
  }
  for (int i = 0; o && i < o->nextra; i++) args[nb + i] = o->extra[i];
  int grid[3] = {1, 1, 1};
  if (o && o->grid[0]) memcpy(grid, o->grid, sizeof grid);

  kn_kernel *kk = NULL;
  kn_compile_options checked = {.check_bounds = true};
  if (kn_compile(m, "k", kn_host_target(), &checked, &kk, &d)) fail_msg("compile: %s", d.rendered);
  for (int i = 0; i < nb; i++) args[i].p = mh[i];
  int hrc = kn_kernel_run_host_checked(kk, args, grid, regh, nb, &d);
  if (o && o->expect_host_error) {
    assert_int_equal(hrc, -1);
    if (!strstr(d.message, o->expect_host_error)) fail_msg("host error '%s'", d.message);
  } else if (hrc) {
    fail_msg("host run: %s", d.message);
  }
  kn_kernel_free(kk);

  for (int i = 0; i < nb; i++) args[i].p = mi[i];
  int irc = kn_interp_run(kn_module_find(m, "k"), args, grid, reg, nb, NULL, &d);
  if (o && o->expect_host_error) assert_int_equal(irc, -1);
  else if (irc) fail_msg("interp: %s", d.message);

  for (int i = 0; i < nb && !(o && o->expect_host_error); i++) {
    size_t es = kn_scalar_size(bs[i].t);
    for (int64_t e = 0; e < bs[i].n; e++) {
      const char *a = (char *)mh[i] + e * (int64_t)es, *b = (char *)mi[i] + e * (int64_t)es;
      if (!same_elem(bs[i].t, a, b, o ? o->ulps : 0)) {
        double x = kn_scalar_is_float(bs[i].t) ? kn_load_elem(bs[i].t, a) : (double)kn_load_elem_i(bs[i].t, a);
        double y = kn_scalar_is_float(bs[i].t) ? kn_load_elem(bs[i].t, b) : (double)kn_load_elem_i(bs[i].t, b);
        fail_msg("buffer %d (%s) element %lld: host %.17g, interp %.17g", i, kn_scalar_name(bs[i].t),
                 (long long)e, x, y);
      }
    }
  }
  for (int i = 0; i < nb; i++) {
    free(mi[i]);
    free(mh[i]);
  }
}

static const kn_scalar float_types[] = {KN_F16, KN_BF16, KN_F32, KN_F8E4M3, KN_F8E5M2,
                                        KN_F8E4M3FNUZ, KN_F8E5M2FNUZ};
enum { NFLOAT = sizeof float_types / sizeof float_types[0] };
static const kn_scalar all_types[] = {KN_I1, KN_I32, KN_I64, KN_F16, KN_BF16, KN_F32,
                                      KN_F8E4M3, KN_F8E5M2, KN_F8E4M3FNUZ, KN_F8E5M2FNUZ};
enum { NALL = sizeof all_types / sizeof all_types[0] };

/* ---- the thinnest path: vector add over a grid with bounds ---- */

static void test_vadd(void **st) {
  (void)st;
  kn_type pt[4] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_scalar(KN_I32)};
  kb k = kb_new(4, pt);
  kn_builder *b = &k.b;
  kn_value *pid = kn_b_program_id(b, 0);
  kn_value *start = kn_b_binary(b, KN_OP_MUL, pid, ci32(b, 128));
  kn_value *one = ci32(b, 1), *n = P(&k, 3);
  kn_value *x = kn_b_load(b, kn_ty_tile1(KN_F32, 128), P(&k, 0), &start, &one, &n, NULL, NULL);
  kn_value *y = kn_b_load(b, kn_ty_tile1(KN_F32, 128), P(&k, 1), &start, &one, &n, NULL, NULL);
  kn_b_store(b, kn_b_binary(b, KN_OP_ADD, x, y), P(&k, 2), &start, &one, &n, NULL);
  kn_b_return(b, 0, NULL);
  int N = 1000;
  bufspec bs[3] = {{KN_F32, N, FILL_SMALL}, {KN_F32, N, FILL_SMALL}, {KN_F32, N, FILL_ZERO}};
  kn_argval extra = {.i = N};
  run_opts o = {.grid = {(N + 127) / 128, 1, 1}, .extra = &extra, .nextra = 1};
  check_kernel(k.m, 3, bs, &o);
  kn_module_free(k.m);
}

/* ---- elementwise ---- */

/* out = op(a, b) on tiles of 8 x 16 (or scalars when scalar) */
static void binary_case(kn_opcode opc, kn_scalar t, fill fa, fill fb, const char *expect_err) {
  kn_type pt[3] = {kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t)};
  kb k = kb_new(3, pt);
  kn_builder *b = &k.b;
  kn_value *x = load2(b, P(&k, 0), t, 8, 16, 0), *y = load2(b, P(&k, 1), t, 8, 16, 0);
  store2(b, kn_b_binary(b, opc, x, y), P(&k, 2), 0);
  /* the scalar form too, on element 0 */
  kn_value *z = ci32(b, 0), *one = ci32(b, 1);
  kn_value *sx = kn_b_load(b, kn_ty_scalar(t), P(&k, 0), &z, &one, NULL, NULL, NULL);
  kn_value *sy = kn_b_load(b, kn_ty_scalar(t), P(&k, 1), &z, &one, NULL, NULL, NULL);
  kn_value *o128 = ci32(b, 128);
  kn_b_store(b, kn_b_binary(b, opc, sx, sy), P(&k, 2), &o128, &one, NULL, NULL);
  kn_b_return(b, 0, NULL);
  bufspec bs[3] = {{t, 129, fa}, {t, 129, fb}, {t, 129, FILL_ZERO}};
  run_opts o = {.expect_host_error = expect_err};
  check_kernel(k.m, 3, bs, &o);
  kn_module_free(k.m);
}

static void test_float_binary(void **st) {
  (void)st;
  const kn_opcode ops[] = {KN_OP_ADD, KN_OP_SUB, KN_OP_MUL, KN_OP_DIV, KN_OP_REM, KN_OP_MAX, KN_OP_MIN};
  for (int ti = 0; ti < NFLOAT; ti++)
    for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
      binary_case(ops[oi], float_types[ti], FILL_SMALL, FILL_SMALL, NULL);
      binary_case(ops[oi], float_types[ti], FILL_MIXED, FILL_MIXED, NULL);
    }
}

static void test_int_binary(void **st) {
  (void)st;
  const kn_scalar ts[] = {KN_I1, KN_I32, KN_I64};
  for (int ti = 0; ti < 3; ti++) {
    kn_scalar t = ts[ti];
    for (kn_opcode o = KN_OP_ADD; o <= KN_OP_SHR; o++) {
      fill fb = (o == KN_OP_DIV || o == KN_OP_REM) ? (t == KN_I1 ? FILL_POSITIVE : FILL_NONZERO_INT)
              : (o == KN_OP_SHL || o == KN_OP_SHR) ? FILL_SHIFT : FILL_MIXED;
      if (t == KN_I1 && (o == KN_OP_DIV || o == KN_OP_REM)) continue; /* a random i1 is 0 */
      binary_case(o, t, FILL_MIXED, fb, NULL);
    }
  }
}

static void test_int_errors(void **st) {
  (void)st;
  binary_case(KN_OP_DIV, KN_I32, FILL_MIXED, FILL_ZERO, "division");
  binary_case(KN_OP_REM, KN_I64, FILL_MIXED, FILL_ZERO, "division");
  binary_case(KN_OP_SHL, KN_I32, FILL_MIXED, FILL_MIXED, "shift");
}

static void unary_case(kn_opcode opc, kn_scalar t, fill f, double ulps) {
  kn_type pt[2] = {kn_ty_ptr(t), kn_ty_ptr(t)};
  kb k = kb_new(2, pt);
  kn_builder *b = &k.b;
  store1(b, kn_b_unary(b, opc, load1(b, P(&k, 0), t, 100)), P(&k, 1));
  kn_b_return(b, 0, NULL);
  bufspec bs[2] = {{t, 100, f}, {t, 100, FILL_ZERO}};
  run_opts o = {.ulps = ulps};
  check_kernel(k.m, 2, bs, &o);
  kn_module_free(k.m);
}

static void test_unary(void **st) {
  (void)st;
  for (int ti = 0; ti < NFLOAT; ti++) {
    kn_scalar t = float_types[ti];
    for (kn_opcode o = KN_OP_NEG; o <= KN_OP_TANH; o++) {
      /* exp, log, tanh...: same libm in double, rounded once: exact here; allow 1 ulp anyway */
      double ulps = (o == KN_OP_NEG || o == KN_OP_ABS || o == KN_OP_SQRT) ? 0 : 1;
      unary_case(o, t, FILL_SMALL, ulps);
      unary_case(o, t, FILL_MIXED, ulps);
    }
  }
  const kn_scalar its[] = {KN_I1, KN_I32, KN_I64};
  for (int ti = 0; ti < 3; ti++) {
    unary_case(KN_OP_NEG, its[ti], FILL_MIXED, 0);
    unary_case(KN_OP_ABS, its[ti], FILL_MIXED, 0);
    unary_case(KN_OP_NOT, its[ti], FILL_MIXED, 0);
  }
}

/* out_i1[p][i] = cmp p (a, b); sel = select(c, a, b) with a tile and a scalar condition */
static void test_cmp_select(void **st) {
  (void)st;
  for (int ti = 0; ti < NALL; ti++) {
    kn_scalar t = all_types[ti];
    kn_type pt[5] = {kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(KN_I1), kn_ty_ptr(t), kn_ty_ptr(t)};
    kb k = kb_new(5, pt);
    kn_builder *b = &k.b;
    kn_value *x = load1(b, P(&k, 0), t, 64), *y = load1(b, P(&k, 1), t, 64);
    kn_value *c = NULL;
    for (int p = 0; p < KN_PRED_COUNT; p++) {
      c = kn_b_cmp(b, (kn_pred)p, x, y);
      kn_value *off = ci32(b, 64 * p), *one = ci32(b, 1);
      kn_b_store(b, c, P(&k, 2), &off, &one, NULL, NULL);
    }
    store1(b, kn_b_select(b, c, x, y), P(&k, 3));
    kn_value *z = ci32(b, 0), *one = ci32(b, 1);
    kn_value *sc = kn_b_load(b, kn_ty_scalar(KN_I1), P(&k, 2), &z, &one, NULL, NULL, NULL);
    store1(b, kn_b_select(b, sc, y, x), P(&k, 4));
    kn_b_return(b, 0, NULL);
    bufspec bs[5] = {{t, 64, FILL_MIXED}, {t, 64, FILL_MIXED}, {KN_I1, 64 * KN_PRED_COUNT, FILL_ZERO},
                     {t, 64, FILL_ZERO}, {t, 64, FILL_ZERO}};
    /* FILL_MIXED repeats 0, -0, inf and NaN, so equal and unordered pairs occur */
    check_kernel(k.m, 5, bs, NULL);
    kn_module_free(k.m);
  }
}

static void test_casts(void **st) {
  (void)st;
  for (int a = 0; a < NALL; a++)
    for (int c = 0; c < NALL; c++) {
      kn_scalar from = all_types[a], to = all_types[c];
      kn_type pt[2] = {kn_ty_ptr(from), kn_ty_ptr(to)};
      kb k = kb_new(2, pt);
      kn_builder *b = &k.b;
      store1(b, kn_b_cast(b, load1(b, P(&k, 0), from, 200), to), P(&k, 1));
      kn_b_return(b, 0, NULL);
      /* +inf -> i64: the interpreter converts kn_round's 2^63 to int64 (undefined in C; x86 gives
       * INT64_MIN), the host saturates to INT64_MAX as documented: keep +inf out of that case */
      fill f = kn_scalar_is_float(from) && to == KN_I64 ? FILL_MIXED_NO_PINF : FILL_MIXED;
      bufspec bs[2] = {{from, 200, f}, {to, 200, FILL_ZERO}};
      check_kernel(k.m, 2, bs, NULL);
      kn_module_free(k.m);
    }
}

/* ---- constants, shapes, hints ---- */

static void test_shapes(void **st) {
  (void)st;
  kn_type pt[8] = {kn_ty_ptr(KN_F16), kn_ty_ptr(KN_F16), kn_ty_ptr(KN_F16), kn_ty_ptr(KN_F16),
                   kn_ty_ptr(KN_I32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_BF16), kn_ty_ptr(KN_I1)};
  kb k = kb_new(8, pt);
  kn_builder *b = &k.b;
  kn_value *x = load2(b, P(&k, 0), KN_F16, 6, 10, 0);                 /* 6 x 10 */
  store2(b, kn_b_transpose(b, x), P(&k, 1), 0);                        /* 10 x 6 */
  kn_value *row = load1(b, P(&k, 0), KN_F16, 10);
  kn_value *r2 = kn_b_expand_dims(b, row, 0);                       /* 1 x 10 */
  kn_value *bc = kn_b_broadcast(b, r2, 2, (int32_t[]){6, 10});
  kn_value *col = kn_b_expand_dims(b, load1(b, P(&k, 0), KN_F16, 6), 1); /* 6 x 1 */
  kn_value *bc2 = kn_b_broadcast(b, col, 2, (int32_t[]){6, 10});
  store2(b, kn_b_binary(b, KN_OP_ADD, bc, bc2), P(&k, 2), 0);
  kn_value *rs = kn_b_reshape(b, x, 2, (int32_t[]){3, 20});
  store2(b, kn_b_transpose(b, rs), P(&k, 3), 0);                       /* 20 x 3 */
  kn_value *ar = kn_b_arange(b, 5, 69);
  kn_value *m8 = kn_b_hint(b, KN_OP_MULTIPLE_OF, ci32(b, 16), 16);
  kn_value *ar2 = kn_b_binary(b, KN_OP_MUL, ar, kn_b_splat(b, m8, 1, (int32_t[]){64}));
  store1(b, kn_b_hint(b, KN_OP_MAX_CONTIGUOUS, ar2, 4), P(&k, 4));
  kn_value *cf = kn_b_const_f(b, kn_ty_tile2(KN_F32, 4, 8), 0.1);
  kn_value *ones = kn_b_splat(b, kn_b_const_f(b, kn_ty_scalar(KN_F32), -2.5), 2, (int32_t[]){4, 8});
  store2(b, kn_b_binary(b, KN_OP_MUL, cf, ones), P(&k, 5), 0);
  kn_value *cb = kn_b_const_f(b, kn_ty_tile1(KN_BF16, 16), 3.14159);
  kn_value *cb3 = kn_b_broadcast(b, kn_b_expand_dims(b, cb, 0), 2, (int32_t[]){3, 16});
  store1(b, kn_b_reshape(b, kn_b_transpose(b, cb3), 1, (int32_t[]){48}), P(&k, 6));
  kn_value *ci = kn_b_const_i(b, kn_ty_tile1(KN_I1, 8), 1);
  store1(b, ci, P(&k, 7));
  kn_b_return(b, 0, NULL);
  bufspec bs[8] = {{KN_F16, 60, FILL_MIXED}, {KN_F16, 60, FILL_ZERO}, {KN_F16, 60, FILL_ZERO},
                   {KN_F16, 60, FILL_ZERO},  {KN_I32, 64, FILL_ZERO}, {KN_F32, 32, FILL_ZERO},
                   {KN_BF16, 48, FILL_ZERO}, {KN_I1, 8, FILL_ZERO}};
  check_kernel(k.m, 8, bs, NULL);
  kn_module_free(k.m);
}

/* ---- memory: bounds, mask, other, scalar loads, ptradd ---- */

static void test_load_store_masked(void **st) {
  (void)st;
  for (int ti = 0; ti < NALL; ti++) {
    kn_scalar t = all_types[ti];
    /* a 20 x 30 matrix (ld 32); a 16 x 16 block at (o0, o1) with bounds (b0, b1), a mask from
     * an i1 tile, other = element 0 of buffer 3 */
    kn_type pt[8] = {kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(KN_I1), kn_ty_ptr(t),
                     kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I64), kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I64)};
    kb k = kb_new(8, pt);
    kn_builder *b = &k.b;
    kn_value *off[2] = {P(&k, 4), P(&k, 5)}, *str[2] = {ci32(b, 32), ci64(b, 1)};
    kn_value *bnd[2] = {P(&k, 6), P(&k, 7)};
    kn_value *z = ci32(b, 0), *one = ci32(b, 1);
    kn_value *other = kn_b_load(b, kn_ty_scalar(t), P(&k, 3), &z, &one, NULL, NULL, NULL);
    kn_value *mask = load2(b, P(&k, 2), KN_I1, 16, 16, 0);
    kn_value *x = kn_b_load(b, kn_ty_tile2(t, 16, 16), P(&k, 0), off, str, bnd, mask, other);
    kn_value *y = kn_b_load(b, kn_ty_tile2(t, 16, 16), P(&k, 0), off, str, bnd, NULL, NULL);
    /* x into buffer 1 at (o0, o1) under bounds and the inverted mask; y at row 20 plainly;
     * x at row 28 under the mask only */
    kn_value *nm = kn_b_unary(b, KN_OP_NOT, mask);
    kn_b_store(b, x, P(&k, 1), off, str, bnd, nm);
    kn_value *p1 = kn_b_ptradd(b, P(&k, 1), ci64(b, 20 * 32));
    kn_value *o2[2] = {ci32(b, 0), ci32(b, 0)}, *s2[2] = {ci32(b, 16), ci32(b, 1)};
    kn_b_store(b, y, p1, o2, s2, NULL, NULL);
    kn_value *p2 = kn_b_ptradd(b, P(&k, 1), ci32(b, 20 * 32 + 256));
    kn_b_store(b, x, p2, o2, s2, NULL, mask);
    kn_b_return(b, 0, NULL);
    bufspec bs[4] = {{t, 20 * 32, FILL_MIXED}, {t, 20 * 32 + 512, FILL_MIXED},
                     {KN_I1, 256, FILL_MIXED}, {t, 1, FILL_MIXED}};
    const int64_t offs[][4] = {{0, 0, 20, 30}, {10, 20, 20, 30}, {-3, -5, 20, 30}, {5, 7, 12, 9}};
    for (int c = 0; c < 4; c++) {
      kn_argval extra[4] = {{.i = offs[c][0]}, {.i = offs[c][1]}, {.i = offs[c][2]}, {.i = offs[c][3]}};
      run_opts o = {.extra = extra, .nextra = 4};
      check_kernel(k.m, 4, bs, &o);
    }
    kn_module_free(k.m);
  }
}

/* bounds-only and mask-only loads at ragged offsets, run over a grid */
static void test_load_bounds_grid(void **st) {
  (void)st;
  kn_type pt[4] = {kn_ty_ptr(KN_F16), kn_ty_ptr(KN_F16), kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I32)};
  kb k = kb_new(4, pt);
  kn_builder *b = &k.b;
  kn_value *m = P(&k, 2), *n = P(&k, 3);
  kn_value *r0 = kn_b_binary(b, KN_OP_MUL, kn_b_program_id(b, 0), ci32(b, 16));
  kn_value *c0 = kn_b_binary(b, KN_OP_MUL, kn_b_program_id(b, 1), ci32(b, 32));
  kn_value *off[2] = {r0, c0}, *str[2] = {n, ci32(b, 1)}, *bnd[2] = {m, n};
  kn_value *minus1 = kn_b_const_f(b, kn_ty_scalar(KN_F16), -1);
  kn_value *x = kn_b_load(b, kn_ty_tile2(KN_F16, 16, 32), P(&k, 0), off, str, bnd, NULL, minus1);
  kn_value *np = kn_b_cast(b, kn_b_num_programs(b, 1), KN_F16);
  kn_value *y = kn_b_binary(b, KN_OP_ADD, x, kn_b_splat(b, np, 2, (int32_t[]){16, 32}));
  kn_b_store(b, y, P(&k, 1), off, str, bnd, NULL);
  kn_b_return(b, 0, NULL);
  int M = 37, N = 70;
  bufspec bs[2] = {{KN_F16, M * N, FILL_SMALL}, {KN_F16, M * N, FILL_ZERO}};
  kn_argval extra[2] = {{.i = M}, {.i = N}};
  run_opts o = {.grid = {(M + 15) / 16, (N + 31) / 32, 2}, .extra = extra, .nextra = 2};
  check_kernel(k.m, 2, bs, &o);
  kn_module_free(k.m);
}

/* ---- dot and reductions ---- */

static void dot_case(kn_scalar t, int M, int K, int N) {
  kn_type pt[4] = {kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32)};
  kb k = kb_new(4, pt);
  kn_builder *b = &k.b;
  kn_value *a = load2(b, P(&k, 0), t, M, K, 0), *bb = load2(b, P(&k, 1), t, K, N, 0);
  kn_value *acc = load2(b, P(&k, 2), KN_F32, M, N, 0);
  store2(b, kn_b_dot(b, a, bb, acc), P(&k, 3), 0);
  kn_b_return(b, 0, NULL);
  bufspec bs[4] = {{t, M * K, FILL_SMALL}, {t, K * N, FILL_SMALL}, {KN_F32, M * N, FILL_SMALL},
                   {KN_F32, M * N, FILL_ZERO}};
  check_kernel(k.m, 4, bs, NULL);
  kn_module_free(k.m);
}

static void test_dot(void **st) {
  (void)st;
  for (int ti = 0; ti < NFLOAT; ti++) dot_case(float_types[ti], 16, 32, 24);
  dot_case(KN_F16, 64, 64, 64);
  dot_case(KN_F32, 1, 7, 3);
  /* dot with a uniform accumulator (a const) and operands from a transpose */
  kn_type pt[3] = {kn_ty_ptr(KN_BF16), kn_ty_ptr(KN_BF16), kn_ty_ptr(KN_F32)};
  kb k = kb_new(3, pt);
  kn_builder *b = &k.b;
  kn_value *a = load2(b, P(&k, 0), KN_BF16, 32, 16, 0), *bt = load2(b, P(&k, 1), KN_BF16, 32, 16, 0);
  kn_value *acc = kn_b_const_f(b, kn_ty_tile2(KN_F32, 32, 32), 0.5);
  store2(b, kn_b_dot(b, a, kn_b_transpose(b, bt), acc), P(&k, 2), 0);
  kn_b_return(b, 0, NULL);
  bufspec bs[3] = {{KN_BF16, 512, FILL_SMALL}, {KN_BF16, 512, FILL_SMALL}, {KN_F32, 1024, FILL_ZERO}};
  check_kernel(k.m, 3, bs, NULL);
  kn_module_free(k.m);
}

static void test_reduce(void **st) {
  (void)st;
  const kn_scalar ts[] = {KN_F32, KN_F16, KN_BF16, KN_F8E4M3, KN_I32, KN_I64, KN_I1};
  for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
    kn_scalar t = ts[ti];
    for (int sum = 0; sum < 2; sum++) {
      kn_opcode opc = sum ? KN_OP_REDUCE_SUM : KN_OP_REDUCE_MAX;
      kn_type pt[5] = {kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t), kn_ty_ptr(t)};
      kb k = kb_new(5, pt);
      kn_builder *b = &k.b;
      kn_value *x = load2(b, P(&k, 0), t, 12, 20, 0);
      store1(b, kn_b_reduce(b, opc, x, 0), P(&k, 1));
      store1(b, kn_b_reduce(b, opc, x, 1), P(&k, 2));
      kn_value *z = ci32(b, 0), *one = ci32(b, 1);
      kn_value *v = load1(b, P(&k, 0), t, 37);
      kn_b_store(b, kn_b_reduce(b, opc, v, 0), P(&k, 3), &z, &one, NULL, NULL);
      kn_value *col = kn_b_reduce(b, opc, load2(b, P(&k, 0), t, 1, 5, 0), 0); /* a dim of 1 */
      store1(b, col, P(&k, 4));
      kn_b_return(b, 0, NULL);
      bufspec bs[5] = {{t, 240, sum ? FILL_SMALL : FILL_MIXED}, {t, 20, FILL_ZERO}, {t, 12, FILL_ZERO},
                       {t, 1, FILL_ZERO}, {t, 5, FILL_ZERO}};
      check_kernel(k.m, 5, bs, NULL);
      kn_module_free(k.m);
    }
  }
}

/* ---- control flow ---- */

/* acc (tile) and s (scalar) carried through a loop; two tiles swapped every iteration */
static void test_for(void **st) {
  (void)st;
  kn_type pt[5] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32),
                   kn_ty_scalar(KN_I32)};
  for (int trips = 0; trips < 3; trips++) {
    kb k = kb_new(5, pt);
    kn_builder *b = &k.b;
    kn_value *x = load1(b, P(&k, 0), KN_F32, 32), *y = load1(b, P(&k, 1), KN_F32, 32);
    kn_value *zero = kn_b_const_f(b, kn_ty_tile1(KN_F32, 32), 0);
    kn_value *s0 = kn_b_const_f(b, kn_ty_scalar(KN_F32), 1);
    kn_value *init[4] = {zero, s0, x, y};
    kn_builder body;
    kn_op *f = kn_b_for(b, ci32(b, 1), P(&k, 4), ci32(b, 2), 4, init, &body);
    kn_value *iv = f->region[0]->args[0], *acc = f->region[0]->args[1], *s = f->region[0]->args[2];
    kn_value *a = f->region[0]->args[3], *c = f->region[0]->args[4];
    kn_value *ivf = kn_b_cast(&body, iv, KN_F32);
    kn_value *t = kn_b_binary(&body, KN_OP_MUL, a, kn_b_splat(&body, ivf, 1, (int32_t[]){32}));
    kn_value *acc2 = kn_b_binary(&body, KN_OP_ADD, acc, t);
    kn_value *s2 = kn_b_binary(&body, KN_OP_MUL, s, kn_b_const_f(&body, kn_ty_scalar(KN_F32), 1.5));
    /* inner loop with no iter values and an if with results */
    kn_builder ib;
    kn_b_for(&body, ci64(&body, 0), ci64(&body, 3), ci64(&body, 1), 0, NULL, &ib);
    kn_b_yield(&ib, 0, NULL);
    kn_value *cond = kn_b_cmp(&body, KN_PRED_GT, iv, ci32(&body, 2));
    kn_builder tb, eb;
    kn_op *iff = kn_b_if(&body, cond, 1, (kn_type[]){kn_ty_tile1(KN_F32, 32)}, &tb, &eb);
    kn_b_yield(&tb, 1, (kn_value *[]){kn_b_unary(&tb, KN_OP_NEG, acc2)});
    kn_b_yield(&eb, 1, (kn_value *[]){acc2});
    kn_b_yield(&body, 4, (kn_value *[]){iff->res[0], s2, c, a}); /* swap a and c */
    store1(b, f->res[0], P(&k, 2));
    kn_value *sum = kn_b_binary(b, KN_OP_ADD, f->res[2], kn_b_splat(b, f->res[1], 1, (int32_t[]){32}));
    kn_value *both = kn_b_binary(b, KN_OP_SUB, sum, f->res[3]);
    store1(b, both, P(&k, 3));
    kn_b_return(b, 0, NULL);
    bufspec bs[4] = {{KN_F32, 32, FILL_SMALL}, {KN_F32, 32, FILL_SMALL}, {KN_F32, 32, FILL_ZERO},
                     {KN_F32, 32, FILL_ZERO}};
    kn_argval extra = {.i = trips == 0 ? 0 : trips == 1 ? 4 : 9};
    run_opts o = {.extra = &extra, .nextra = 1};
    check_kernel(k.m, 4, bs, &o);
    kn_module_free(k.m);
  }
}

static void test_for_bad_step(void **st) {
  (void)st;
  kn_type pt[2] = {kn_ty_ptr(KN_I32), kn_ty_scalar(KN_I32)};
  kb k = kb_new(2, pt);
  kn_builder *b = &k.b, body;
  kn_op *f = kn_b_for(b, ci32(b, 0), ci32(b, 10), P(&k, 1), 1, (kn_value *[]){ci32(b, 0)}, &body);
  kn_b_yield(&body, 1, (kn_value *[]){kn_b_binary(&body, KN_OP_ADD, f->region[0]->args[1], ci32(&body, 1))});
  kn_value *z = ci32(b, 0), *one = ci32(b, 1);
  kn_b_store(b, f->res[0], P(&k, 0), &z, &one, NULL, NULL);
  kn_b_return(b, 0, NULL);
  bufspec bs[1] = {{KN_I32, 1, FILL_ZERO}};
  kn_argval good = {.i = 3}, bad = {.i = 0};
  run_opts o = {.extra = &good, .nextra = 1};
  check_kernel(k.m, 1, bs, &o);
  o.extra = &bad;
  o.expect_host_error = "step";
  check_kernel(k.m, 1, bs, &o);
  kn_module_free(k.m);
}

/* the number of f32 tile multiplies in a block */
static int tile_muls(const kn_block *blk) {
  int n = 0;
  for (const kn_op *op = blk->first; op; op = op->next)
    n += op->opc == KN_OP_MUL && op->res[0]->type.kind == KN_TY_TILE;
  return n;
}

/* compiler/scale.c: ALiBi's shape, ((x * u) - (y * v)) * w, is three tile multiplies; the fold
 * leaves two (x * (u w) - y * (v w)), only in a kernel with REASSOC = 1, and the host result
 * stays within a few ulps of the interpreter's unfolded one (an ulp of each product, which the
 * subtraction can magnify where the products nearly cancel: 8 ulps of the result allowed) */
static void test_scale_fold(void **st) {
  (void)st;
  for (int allowed = 0; allowed < 2; allowed++) {
    kn_module *m = kn_module_new(NULL);
    kn_type pt[6] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32),
                     kn_ty_scalar(KN_F32), kn_ty_scalar(KN_F32), kn_ty_scalar(KN_F32)};
    kn_func *k = kn_func_new(m, "k", true, 6, pt, NULL, 0, NULL);
    if (allowed) kn_func_set_meta(k, "REASSOC", 1);
    kn_builder b = kn_builder_at_end(m, k->body);
    int32_t n16[1] = {16};
    kn_value *x = load1(&b, kn_func_param(k, 0), KN_F32, 16);
    kn_value *y = load1(&b, kn_func_param(k, 1), KN_F32, 16);
    kn_value *u = kn_b_splat(&b, kn_func_param(k, 3), 1, n16);
    kn_value *v = kn_b_splat(&b, kn_func_param(k, 4), 1, n16);
    kn_value *w = kn_b_splat(&b, kn_func_param(k, 5), 1, n16);
    kn_value *d = kn_b_binary(&b, KN_OP_SUB, kn_b_binary(&b, KN_OP_MUL, x, u),
                              kn_b_binary(&b, KN_OP_MUL, v, y));
    store1(&b, kn_b_binary(&b, KN_OP_MUL, d, w), kn_func_param(k, 2));
    kn_b_return(&b, 0, NULL);
    kn_module *c = kn_module_clone(m);
    assert_int_equal(tile_muls(c->funcs[0]->body), 3);
    int rewrites = kn_fold_scale(c);
    kn_diag dg;
    if (kn_verify(c, &dg)) fail_msg("folded IR: %s", dg.rendered);
    assert_int_equal(tile_muls(c->funcs[0]->body), allowed ? 2 : 3);
    assert_true(allowed ? rewrites > 0 : rewrites == 0);
    kn_module_free(c);
    bufspec bs[3] = {{KN_F32, 16, FILL_SMALL}, {KN_F32, 16, FILL_SMALL}, {KN_F32, 16, FILL_ZERO}};
    kn_argval extra[3] = {{.f = 0.3}, {.f = -0.7}, {.f = 1.4426950408889634}};
    run_opts o = {.extra = extra, .nextra = 3, .ulps = allowed ? 8 : 0};
    check_kernel(m, 3, bs, &o);
    kn_module_free(m);
  }
}

/* func @scale(x: tile, s: f32) -> (tile, f32) called twice, and a func calling a func */
static void test_call(void **st) {
  (void)st;
  kn_module *m = kn_module_new(NULL);
  kn_type tt = kn_ty_tile1(KN_F32, 16), ft = kn_ty_scalar(KN_F32);
  kn_func *g = kn_func_new(m, "twice", false, 1, &ft, NULL, 1, &ft);
  kn_builder gb = kn_builder_at_end(m, g->body);
  kn_value *gp = kn_func_param(g, 0);
  kn_b_return(&gb, 1, (kn_value *[]){kn_b_binary(&gb, KN_OP_ADD, gp, gp)});
  kn_func *f = kn_func_new(m, "scale", false, 2, (kn_type[]){tt, ft}, NULL, 2, (kn_type[]){tt, ft});
  kn_builder fb = kn_builder_at_end(m, f->body);
  kn_value *s2 = kn_b_call(&fb, g, 1, (kn_value *[]){kn_func_param(f, 1)})->res[0];
  kn_value *y = kn_b_binary(&fb, KN_OP_MUL, kn_func_param(f, 0), kn_b_splat(&fb, s2, 1, (int32_t[]){16}));
  kn_b_return(&fb, 2, (kn_value *[]){y, s2});
  kn_type pt[3] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32), kn_ty_scalar(KN_F32)};
  kn_func *k = kn_func_new(m, "k", true, 3, pt, NULL, 0, NULL);
  kn_builder b = kn_builder_at_end(m, k->body);
  kn_value *x = load1(&b, kn_func_param(k, 0), KN_F32, 16);
  kn_op *c1 = kn_b_call(&b, f, 2, (kn_value *[]){x, kn_func_param(k, 2)});
  kn_op *c2 = kn_b_call(&b, f, 2, (kn_value *[]){c1->res[0], c1->res[1]});
  kn_value *out = kn_b_binary(&b, KN_OP_ADD, c2->res[0], kn_b_splat(&b, c2->res[1], 1, (int32_t[]){16}));
  store1(&b, out, kn_func_param(k, 1));
  kn_b_return(&b, 0, NULL);
  bufspec bs[2] = {{KN_F32, 16, FILL_SMALL}, {KN_F32, 16, FILL_ZERO}};
  kn_argval extra = {.f = 0.3};
  run_opts o = {.extra = &extra, .nextra = 1};
  check_kernel(m, 2, bs, &o);
  kn_module_free(m);
}

/* scalar int arithmetic on constants (what the fold pass folds) must match the interpreter */
static void test_fold_consts(void **st) {
  (void)st;
  kn_type pt[2] = {kn_ty_ptr(KN_I32), kn_ty_ptr(KN_I64)};
  kb k = kb_new(2, pt);
  kn_builder *b = &k.b;
  kn_value *r32[16], *r64[8];
  int n32 = 0, n64 = 0;
  kn_value *imax = ci32(b, INT32_MAX), *imin = ci32(b, INT32_MIN), *m1 = ci32(b, -1);
  r32[n32++] = kn_b_binary(b, KN_OP_ADD, imax, ci32(b, 1));
  r32[n32++] = kn_b_binary(b, KN_OP_DIV, imin, m1);
  r32[n32++] = kn_b_binary(b, KN_OP_REM, imin, m1);
  r32[n32++] = kn_b_binary(b, KN_OP_REM, ci32(b, -7), ci32(b, 2));
  r32[n32++] = kn_b_binary(b, KN_OP_DIV, ci32(b, -7), ci32(b, 2));
  r32[n32++] = kn_b_binary(b, KN_OP_SHL, ci32(b, 3), ci32(b, 31));
  r32[n32++] = kn_b_binary(b, KN_OP_SHR, ci32(b, -8), ci32(b, 1));
  r32[n32++] = kn_b_binary(b, KN_OP_MUL, imax, imax);
  r32[n32++] = kn_b_binary(b, KN_OP_XOR, kn_b_binary(b, KN_OP_MAX, imin, m1), ci32(b, 0x5555));
  r32[n32++] = kn_b_cast(b, kn_b_cmp(b, KN_PRED_LT, imin, m1), KN_I32);
  r32[n32++] = kn_b_cast(b, ci64(b, 0x123456789abcll), KN_I32);
  r64[n64++] = kn_b_cast(b, imin, KN_I64);
  r64[n64++] = kn_b_binary(b, KN_OP_DIV, ci64(b, INT64_MIN), ci64(b, -1));
  r64[n64++] = kn_b_binary(b, KN_OP_SUB, ci64(b, INT64_MIN), ci64(b, 1));
  r64[n64++] = kn_b_binary(b, KN_OP_SHL, ci64(b, 5), ci64(b, 62));
  /* dead pure ops for the sweep */
  kn_b_unary(b, KN_OP_EXP, kn_b_const_f(b, kn_ty_tile1(KN_F32, 8), 1));
  kn_b_binary(b, KN_OP_ADD, ci32(b, 1), ci32(b, 2));
  for (int i = 0; i < n32; i++) {
    kn_value *o = ci32(b, i), *one = ci32(b, 1);
    kn_b_store(b, r32[i], P(&k, 0), &o, &one, NULL, NULL);
  }
  for (int i = 0; i < n64; i++) {
    kn_value *o = ci32(b, i), *one = ci32(b, 1);
    kn_b_store(b, r64[i], P(&k, 1), &o, &one, NULL, NULL);
  }
  kn_b_return(b, 0, NULL);
  bufspec bs[2] = {{KN_I32, n32, FILL_ZERO}, {KN_I64, n64, FILL_ZERO}};
  check_kernel(k.m, 2, bs, NULL);
  kn_module_free(k.m);

  /* a constant division by zero is not folded away: both report it */
  k = kb_new(1, pt);
  b = &k.b;
  kn_value *o = ci32(b, 0), *one = ci32(b, 1);
  kn_b_store(b, kn_b_binary(b, KN_OP_DIV, ci32(b, 5), ci32(b, 0)), P(&k, 0), &o, &one, NULL, NULL);
  kn_b_return(b, 0, NULL);
  bufspec bz[1] = {{KN_I32, 1, FILL_ZERO}};
  run_opts ro = {.expect_host_error = "division"};
  check_kernel(k.m, 1, bz, &ro);
  kn_module_free(k.m);
}

/* a call inside a loop body and inside an if */
static void test_call_in_loop(void **st) {
  (void)st;
  kn_module *m = kn_module_new(NULL);
  kn_type tt = kn_ty_tile2(KN_F32, 4, 8), it = kn_ty_scalar(KN_I32);
  kn_func *g = kn_func_new(m, "score_mod", false, 2, (kn_type[]){tt, it}, NULL, 1, &tt);
  kn_builder gb = kn_builder_at_end(m, g->body);
  kn_value *sc = kn_b_splat(&gb, kn_b_cast(&gb, kn_func_param(g, 1), KN_F32), 2, (int32_t[]){4, 8});
  kn_b_return(&gb, 1, (kn_value *[]){kn_b_unary(&gb, KN_OP_TANH, kn_b_binary(&gb, KN_OP_MUL, kn_func_param(g, 0), sc))});
  kn_type pt[2] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32)};
  kn_func *k = kn_func_new(m, "k", true, 2, pt, NULL, 0, NULL);
  kn_builder b = kn_builder_at_end(m, k->body), body, tb, eb;
  kn_value *x = load2(&b, kn_func_param(k, 0), KN_F32, 4, 8, 0);
  kn_op *f = kn_b_for(&b, ci32(&b, 0), ci32(&b, 5), ci32(&b, 1), 1, &x, &body);
  kn_value *iv = f->region[0]->args[0], *a = f->region[0]->args[1];
  kn_op *iff = kn_b_if(&body, kn_b_cmp(&body, KN_PRED_EQ, iv, ci32(&body, 3)), 1, &tt, &tb, &eb);
  kn_b_yield(&tb, 1, (kn_value *[]){kn_b_call(&tb, g, 2, (kn_value *[]){a, iv})->res[0]});
  kn_b_yield(&eb, 1, &a);
  kn_value *y = kn_b_call(&body, g, 2, (kn_value *[]){iff->res[0], ci32(&body, 2)})->res[0];
  kn_b_yield(&body, 1, &y);
  store2(&b, f->res[0], kn_func_param(k, 1), 0);
  kn_b_return(&b, 0, NULL);
  bufspec bs[2] = {{KN_F32, 32, FILL_SMALL}, {KN_F32, 32, FILL_ZERO}};
  run_opts o = {.ulps = 1};
  check_kernel(m, 2, bs, &o);
  kn_module_free(m);
}

/* compiles and runs on several threads at once (each its own module) */
typedef struct thread_job {
  int id;
  int failures;
} thread_job;

static void *compile_thread(void *arg) {
  thread_job *j = arg;
  for (int rep = 0; rep < 3; rep++) {
    kn_type pt[2] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32)};
    kb k = kb_new(2, pt);
    kn_value *x = load1(&k.b, P(&k, 0), KN_F32, 64);
    kn_value *c = kn_b_const_f(&k.b, kn_ty_tile1(KN_F32, 64), (double)j->id);
    store1(&k.b, kn_b_binary(&k.b, KN_OP_ADD, x, c), P(&k, 1));
    kn_b_return(&k.b, 0, NULL);
    kn_diag d;
    kn_kernel *kk = NULL;
    float in[64], out[64];
    for (int i = 0; i < 64; i++) in[i] = (float)i;
    kn_argval args[2] = {{.p = in}, {.p = out}};
    if (kn_compile(k.m, "k", kn_host_target(), NULL, &kk, &d) ||
        kn_kernel_run_host(kk, args, (int[]){1, 1, 1}, &d)) {
      j->failures++;
    } else {
      for (int i = 0; i < 64; i++)
        if (out[i] != (float)(i + j->id)) j->failures++;
    }
    kn_kernel_free(kk);
    kn_module_free(k.m);
  }
  return NULL;
}

static void test_threads(void **st) {
  (void)st;
  pthread_t th[4];
  thread_job jobs[4];
  for (int i = 0; i < 4; i++) {
    jobs[i] = (thread_job){i + 1, 0};
    assert_int_equal(pthread_create(&th[i], NULL, compile_thread, &jobs[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(jobs[i].failures, 0);
  }
  /* the pool resized: still runs */
  kn_host_set_threads(3);
  assert_int_equal(kn_host_threads(), 3);
  thread_job j = {7, 0};
  compile_thread(&j);
  assert_int_equal(j.failures, 0);
  kn_host_set_threads(0);
}

/* kernel parameters of every scalar type, stored back through a tile */
static void test_params(void **st) {
  (void)st;
  for (int ti = 0; ti < NALL; ti++) {
    kn_scalar t = all_types[ti];
    kn_type pt[2] = {kn_ty_ptr(t), kn_ty_scalar(t)};
    kb k = kb_new(2, pt);
    kn_builder *b = &k.b;
    store1(b, kn_b_splat(b, P(&k, 1), 1, (int32_t[]){4}), P(&k, 0));
    kn_b_return(b, 0, NULL);
    bufspec bs[1] = {{t, 4, FILL_ZERO}};
    kn_argval extra;
    if (kn_scalar_is_float(t)) extra.f = 1234.5678;
    else extra.i = 0x123456789ll;
    run_opts o = {.extra = &extra, .nextra = 1};
    check_kernel(k.m, 1, bs, &o);
    kn_module_free(k.m);
  }
}

/* ---- checked mode: out-of-bounds accesses are errors naming them, never touched ---- */

/* A grid of 4 programs, program p on elements [16p, 16p + 16) of a buffer of 40 elements: an
 * unmasked access goes out of bounds in programs 2 and 3; masked by `idx < n` it does not.
 * LOAD: the load of %a (40 elements) is the access, %b has 64; else the store to %b (40
 * elements) is, %a has 64.  The load is on line 11 of the text, the store on line 12. */
static kn_module *oob_kernel(bool load, bool masked) {
  char text[1024];
  const char *mask = masked ? " mask %m" : "";
  snprintf(text, sizeof text,
           "kernel @k(%%a: ptr<f32>, %%b: ptr<f32>, %%n: i32) {\n"
           "  %%c1 = const 1 : i32\n"
           "  %%c16 = const 16 : i32\n"
           "  %%pid = program_id 0 : i32\n"
           "  %%off = mul %%pid, %%c16 : i32\n"
           "  %%r = arange 0, 16 : tile<16xi32>\n"
           "  %%base = splat %%off : tile<16xi32>\n"
           "  %%idx = add %%r, %%base : tile<16xi32>\n"
           "  %%lim = splat %%n : tile<16xi32>\n"
           "  %%m = cmp lt %%idx, %%lim : tile<16xi1>\n"
           "  %%x = load %%a[%%off] strides [%%c1]%s : tile<16xf32>\n"
           "  store %%x, %%b[%%off] strides [%%c1]%s\n"
           "  return\n"
           "}\n",
           load ? mask : "", load ? "" : mask);
  kn_diag d;
  kn_module *m = kn_parse("check.tile", text, strlen(text), &d);
  if (!m || kn_verify(m, &d)) fail_msg("oob kernel: %s", d.rendered);
  return m;
}

/* the buffers of one checked run live in one block, 4 KiB apart, so that the nearest buffer of
 * an access just past one is that one: 64 elements 100 * i + e each, then canary bytes */
typedef struct oob_mem {
  char *block;
  float *buf[2];
} oob_mem;

enum { OOB_GAP = 4096, OOB_CANARY = 0x7f };

static oob_mem oob_alloc(void) {
  oob_mem o;
  o.block = malloc(2 * OOB_GAP);
  assert_non_null(o.block);
  memset(o.block, OOB_CANARY, 2 * OOB_GAP);
  for (int i = 0; i < 2; i++) {
    o.buf[i] = (float *)(o.block + i * OOB_GAP);
    for (int e = 0; e < 64; e++) o.buf[i][e] = (float)(i * 100 + e);
  }
  return o;
}

static void test_check_bounds(void **st) {
  (void)st;
  kn_compile_options checked = {.check_bounds = true};
  for (int load = 0; load < 2; load++) {
    /* unmasked: the first violation as the interpreter finds it: program 2, element [8] */
    kn_module *m = oob_kernel(load, false);
    kn_kernel *kk = NULL;
    kn_diag d;
    if (kn_compile(m, "k", kn_host_target(), &checked, &kk, &d)) fail_msg("compile: %s", d.rendered);
    oob_mem mem = oob_alloc();
    int small = load ? 0 : 1; /* the buffer of 40 elements */
    kn_region reg[2] = {{mem.buf[0], (load ? 40 : 64) * sizeof(float)},
                        {mem.buf[1], (load ? 64 : 40) * sizeof(float)}};
    kn_argval args[3] = {{.p = mem.buf[0]}, {.p = mem.buf[1]}, {.i = 40}};
    assert_int_equal(kn_kernel_run_host_checked(kk, args, (int[]){4, 1, 1}, reg, 2, &d), -1);
    char want[160];
    snprintf(want, sizeof want, "@k: %s out of bounds: element [8] at address %p (program (2,0,0)) "
             "is outside every buffer; the nearest is buffer %d (160 bytes at %p), 4 bytes past its end",
             load ? "load" : "store", (void *)&mem.buf[small][40], small, (void *)mem.buf[small]);
    if (!strstr(d.message, want)) fail_msg("got '%s'\nwant '%s'", d.message, want);
    if (strncmp(d.rendered, load ? "check.tile:11:" : "check.tile:12:", 14))
      fail_msg("location: %s", d.rendered);
    /* the faulting accesses were skipped: nothing past the 40 elements was written */
    for (int e = 40; e < 64; e++)
      if (mem.buf[small][e] != (float)(small * 100 + e)) fail_msg("element %d past the buffer written", e);
    for (int i = 64 * (int)sizeof(float); i < OOB_GAP; i++)
      if (((char *)mem.buf[small])[i] != OOB_CANARY) fail_msg("byte %d past the buffer written", i);
    /* the same kernel on an unchecked run with regions is refused, not silently unchecked */
    kn_kernel *ku = NULL;
    if (kn_compile(m, "k", kn_host_target(), NULL, &ku, &d)) fail_msg("compile: %s", d.rendered);
    assert_int_equal(kn_kernel_run_host_checked(ku, args, (int[]){4, 1, 1}, reg, 2, &d), -1);
    assert_non_null(strstr(d.message, "without check_bounds"));
    kn_kernel_free(ku);
    kn_kernel_free(kk);
    free(mem.block);
    kn_module_free(m);

    /* masked: passes, and matches the interpreter */
    m = oob_kernel(load, true);
    bufspec bs[2] = {{KN_F32, load ? 40 : 64, FILL_SMALL}, {KN_F32, load ? 64 : 40, FILL_ZERO}};
    kn_argval n = {.i = 40};
    run_opts o = {.grid = {4, 1, 1}, .extra = &n, .nextra = 1};
    check_kernel(m, 2, bs, &o);
    kn_module_free(m);
  }
  /* a rank-2 access names [row, column]; host objects are not made checked */
  kn_type pt[2] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32)};
  kb k = kb_new(2, pt);
  store2(&k.b, load2(&k.b, P(&k, 0), KN_F32, 4, 8, 0), P(&k, 1), 0);
  kn_b_return(&k.b, 0, NULL);
  kn_kernel *kk = NULL;
  kn_diag d;
  if (kn_compile(k.m, "k", kn_host_target(), &checked, &kk, &d)) fail_msg("compile: %s", d.rendered);
  oob_mem mem = oob_alloc();
  kn_region reg[2] = {{mem.buf[0], 30 * sizeof(float)}, {mem.buf[1], 32 * sizeof(float)}};
  kn_argval args[2] = {{.p = mem.buf[0]}, {.p = mem.buf[1]}};
  assert_int_equal(kn_kernel_run_host_checked(kk, args, (int[]){1, 1, 1}, reg, 2, &d), -1);
  if (!strstr(d.message, "load out of bounds: element [3, 6]")) fail_msg("got '%s'", d.message);
  /* elements [3, 6] and [3, 7] were skipped: they read as 0 */
  assert_true(mem.buf[1][29] == 29 && mem.buf[1][30] == 0 && mem.buf[1][31] == 0);
  kn_kernel_free(kk);
  free(mem.block);
  kn_artifact obj;
  assert_int_equal(kn_compile_artifact(k.m, "k", kn_host_target(), &checked, &obj, &d), -1);
  kn_module_free(k.m);
}

/* ---- errors: the compiler reports, never crashes ---- */

static void test_compile_errors(void **st) {
  (void)st;
  kn_diag d;
  kn_kernel *kk = NULL;
  /* a call of an unknown function (never verified) */
  kn_module *m = kn_module_new(NULL);
  kn_func *k = kn_func_new(m, "k", true, 0, NULL, NULL, 0, NULL);
  kn_builder b = kn_builder_at_end(m, k->body);
  kn_op *c = kn_build_op(&b, KN_OP_CALL, 0, NULL, 0, NULL);
  c->callee_name = "nowhere";
  kn_b_return(&b, 0, NULL);
  assert_int_equal(kn_compile(m, "k", kn_host_target(), NULL, &kk, &d), -1);
  assert_null(kk);
  assert_true(strlen(d.message) > 0);
  kn_module_free(m);
  /* a type error */
  m = kn_module_new(NULL);
  k = kn_func_new(m, "k", true, 0, NULL, NULL, 0, NULL);
  b = kn_builder_at_end(m, k->body);
  kn_b_binary(&b, KN_OP_ADD, ci32(&b, 1), kn_b_const_f(&b, kn_ty_scalar(KN_F32), 1));
  kn_b_return(&b, 0, NULL);
  assert_int_equal(kn_compile(m, "k", kn_host_target(), NULL, &kk, &d), -1);
  assert_true(strlen(d.message) > 0);
  /* no such kernel */
  assert_int_equal(kn_compile(m, "nope", kn_host_target(), NULL, &kk, &d), -1);
  kn_module_free(m);
  /* too much tile storage for a host thread's stack */
  m = kn_module_new(NULL);
  k = kn_func_new(m, "k", true, 1, (kn_type[]){kn_ty_ptr(KN_F32)}, NULL, 0, NULL);
  b = kn_builder_at_end(m, k->body);
  kn_value *acc = kn_b_const_f(&b, kn_ty_tile2(KN_F32, 1024, 1024), 0);
  for (int i = 0; i < 16; i++) acc = kn_b_unary(&b, KN_OP_EXP, acc);
  kn_value *t = kn_b_binary(&b, KN_OP_ADD, load2(&b, kn_func_param(k, 0), KN_F32, 1024, 1024, 0), acc);
  for (int i = 0; i < 16; i++) t = kn_b_unary(&b, KN_OP_EXP, t);
  store2(&b, t, kn_func_param(k, 0), 0);
  kn_b_return(&b, 0, NULL);
  assert_int_equal(kn_verify(m, &d), 0);
  assert_int_equal(kn_compile(m, "k", kn_host_target(), NULL, &kk, &d), -1);
  assert_non_null(strstr(d.message, "tile storage"));
  kn_module_free(m);
}

/* ---- dumps ---- */

static void test_dump(void **st) {
  (void)st;
  kn_type pt[2] = {kn_ty_ptr(KN_F32), kn_ty_ptr(KN_F32)};
  kb k = kb_new(2, pt);
  store1(&k.b, kn_b_unary(&k.b, KN_OP_EXP2, load1(&k.b, P(&k, 0), KN_F32, 64)), P(&k, 1));
  kn_b_return(&k.b, 0, NULL);
  const kn_stage stages[] = {KN_STAGE_IR, KN_STAGE_LOWERED, KN_STAGE_LLVM, KN_STAGE_ASM};
  const char *want[] = {"exp2", "define", "define", "kiln_k"};
  for (int i = 0; i < 4; i++) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kn_diag d;
    if (kn_pipeline_dump(k.m, "k", kn_host_target(), stages[i], f, &d)) fail_msg("dump: %s", d.message);
    fclose(f);
    assert_non_null(strstr(buf, want[i]));
    free(buf);
  }
  assert_int_equal(kn_stage_parse("ir,llvm"), KN_STAGE_IR | KN_STAGE_LLVM);
  assert_int_equal(kn_stage_parse("ir,bogus"), -1);
  kn_module_free(k.m);
}

/* ---- the attention template against the float64 reference ---- */

/* one problem on a compiled kernel: fresh random inputs, the float64 reference, the tolerances;
 * checked: the kernel was compiled with check_bounds and runs against exactly its five buffers.
 * Returns the run's time in seconds. */
static double attn_case(kn_kernel *kern, bool checked, const kn_attn_desc *desc,
                        const kn_attn_config *cfg, int nq, int nk, int batch, int heads,
                        int kv_heads) {
  kn_scalar dt = desc->dtype;
  int hd = desc->head_dim;
  kn_diag d;
  kn_attn_problem p = {.batch = batch, .heads = heads, .kv_heads = kv_heads, .seqlen_q = nq, .seqlen_k = nk};
  size_t es = kn_scalar_size(dt);
  size_t nqe = (size_t)batch * heads * nq * hd, nke = (size_t)batch * kv_heads * nk * hd;
  size_t nle = (size_t)batch * heads * nq;
  void *q = malloc(nqe * es), *kk = malloc(nke * es), *v = malloc(nke * es), *o = malloc(nqe * es);
  float *lse = malloc(nle * sizeof(float));
  double *qd = malloc(nqe * 8), *kd = malloc(nke * 8), *vd = malloc(nke * 8);
  double *od = malloc(nqe * 8), *lsed = malloc(nle * 8);
  for (size_t i = 0; i < nqe; i++) {
    kn_store_elem(dt, (char *)q + i * es, urand(-2, 2));
    qd[i] = kn_load_elem(dt, (char *)q + i * es);
    kn_store_elem(dt, (char *)o + i * es, NAN); /* an element never written fails */
  }
  for (size_t i = 0; i < nle; i++) lse[i] = NAN;
  for (size_t i = 0; i < nke; i++) {
    kn_store_elem(dt, (char *)kk + i * es, urand(-2, 2));
    kd[i] = kn_load_elem(dt, (char *)kk + i * es);
    kn_store_elem(dt, (char *)v + i * es, urand(-2, 2));
    vd[i] = kn_load_elem(dt, (char *)v + i * es);
  }
  kn_argval args[KN_ATTN_NPARAMS];
  int grid[3];
  kn_attn_fill_args(desc, NULL, cfg, &p, q, kk, v, o, lse, NULL, args, grid, NULL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kn_region reg[5] = {{q, nqe * es}, {kk, nke * es}, {v, nke * es}, {o, nqe * es},
                      {lse, nle * sizeof(float)}};
  if (kn_kernel_run_host_checked(kern, args, grid, checked ? reg : NULL, 5, &d))
    fail_msg("run: %s", d.message);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double rt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  kn_attn_reference(desc, &p, qd, kd, vd, od, lsed);
  double tol = kn_attn_tolerance(dt), lse_tol = kn_attn_lse_tolerance(dt), worst = 0, worst_lse = 0;
  for (size_t i = 0; i < nqe; i++) {
    double x = kn_load_elem(dt, (char *)o + i * es), e = fabs(x - od[i]);
    if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
  }
  for (size_t i = 0; i < nle; i++) {
    double e = (isinf(lsed[i]) && lse[i] == lsed[i]) ? 0 : fabs(lse[i] - lsed[i]);
    if (!(e <= worst_lse)) worst_lse = isnan(e) ? INFINITY : e;
  }
  printf("  attn %-4s d=%-3d causal=%d (%4d,%4d) b=%d h=%d/%d: run %.3fs%s max_abs_err=%.3g "
         "lse_err=%.3g tol=%.3g\n",
         kn_scalar_name(dt), hd, desc->causal, nq, nk, batch, heads, kv_heads, rt,
         checked ? " (checked)" : "", worst, worst_lse, tol);
  if (!(worst <= tol) || !(worst_lse <= lse_tol)) fail_msg("attention error above tolerance");
  free(q), free(kk), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(lsed);
  return rt;
}

/* the foundation issue's matrix: head dim 64/128 x causal x f16/bf16/f32 x ragged lengths, one
 * compile per kernel; GQA and batch strides on the small shapes.  These runs are unchecked (the
 * code that runs in production, at full speed); f16 D 128 causal also runs checked, every shape,
 * and prints how much slower checked mode is. */
static void test_attention(void **st) {
  (void)st;
  static const kn_scalar dtypes[] = {KN_F16, KN_BF16, KN_F32};
  static const int hds[] = {64, 128};
  static const int shapes[][2] = {{1, 1}, {17, 17}, {128, 128}, {1000, 1000}, {64, 1000},
                                  {1000, 64}, {100, 37}};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 2; c++) {
        kn_attn_desc desc = {.dtype = dtypes[a], .head_dim = hds[b], .causal = c, .has_lse = true};
        kn_attn_config cfg = kn_attn_default_config(NULL, &desc);
        kn_diag d;
        kn_module *m = kn_module_new(NULL);
        kn_func *k = kn_attn_fwd_build(m, &desc, &cfg, &d);
        if (!k) fail_msg("attn build: %s", d.message);
        kn_kernel *kern = NULL;
        if (kn_compile(m, k->name, kn_host_target(), NULL, &kern, &d))
          fail_msg("compile: %s", d.rendered);
        kn_kernel *checked = NULL;
        kn_compile_options co = {.check_bounds = true};
        if (a == 0 && b == 1 && c == 1 && kn_compile(m, k->name, kn_host_target(), &co, &checked, &d))
          fail_msg("compile (checked): %s", d.rendered);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
          bool small = shapes[s][0] * shapes[s][1] <= 128 * 128;
          int nb = small ? 2 : 1, nh = small ? 4 : 1, nkv = small ? 2 : 1;
          double t = attn_case(kern, false, &desc, &cfg, shapes[s][0], shapes[s][1], nb, nh, nkv);
          if (checked) {
            double tc = attn_case(checked, true, &desc, &cfg, shapes[s][0], shapes[s][1], nb, nh, nkv);
            printf("  checked / unchecked: %.2fx\n", t > 0 ? tc / t : 0.0);
          }
        }
        kn_kernel_free(checked);
        kn_kernel_free(kern);
        kn_module_free(m);
      }
}

int main(void) {
  /* fresh inputs every run; KILN_TEST_SEED=<printed seed> repeats one */
  const char *seed = getenv("KILN_TEST_SEED");
  rng_state = seed ? strtoull(seed, NULL, 10) : 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
  if (!rng_state) rng_state = 1;
  printf("test_host: seed %llu\n", (unsigned long long)rng_state);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vadd),
      cmocka_unit_test(test_float_binary),
      cmocka_unit_test(test_int_binary),
      cmocka_unit_test(test_int_errors),
      cmocka_unit_test(test_unary),
      cmocka_unit_test(test_cmp_select),
      cmocka_unit_test(test_casts),
      cmocka_unit_test(test_shapes),
      cmocka_unit_test(test_load_store_masked),
      cmocka_unit_test(test_load_bounds_grid),
      cmocka_unit_test(test_dot),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_for),
      cmocka_unit_test(test_for_bad_step),
      cmocka_unit_test(test_call),
      cmocka_unit_test(test_scale_fold),
      cmocka_unit_test(test_params),
      cmocka_unit_test(test_fold_consts),
      cmocka_unit_test(test_call_in_loop),
      cmocka_unit_test(test_check_bounds),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_compile_errors),
      cmocka_unit_test(test_dump),
      cmocka_unit_test(test_attention),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
