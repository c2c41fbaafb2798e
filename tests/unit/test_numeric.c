/* test_numeric.c — the number formats (ir/numeric.c): encodings checked by hand, exhaustive
 * round trips of every 8- and 16-bit pattern, monotonicity, rounding against an independent
 * brute-force nearest-value search, f32 rounding against the host's float conversion, and the
 * ulp and the exactness check (kn_exactness_accepts) that the target tests compare with.
 *
 * Assumes an IEEE-754 host with FLT_EVAL_METHOD == 0 (x86-64 SSE, aarch64), where (float)x is
 * the correctly rounded binary32 value of a double.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "numeric.h"

static const kn_scalar fp8s[] = {KN_F8E4M3, KN_F8E5M2, KN_F8E4M3FNUZ, KN_F8E5M2FNUZ};
static const kn_scalar floats[] = {KN_F16, KN_BF16, KN_F8E4M3, KN_F8E5M2, KN_F8E4M3FNUZ,
                                   KN_F8E5M2FNUZ};

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
/* a random double with a random sign, exponent in [lo, hi) and full random significand */
static double rnd_double(int lo, int hi) {
  double m = 1.0 + (double)(rnd() >> 11) * 0x1p-53;
  int e = lo + (int)(rnd() % (uint64_t)(hi - lo));
  return (rnd() & 1 ? -1 : 1) * ldexp(m, e);
}

static void check_enc(kn_scalar t, double x, uint64_t want) {
  uint64_t got = kn_encode(t, x);
  if (got != want)
    fail_msg("%s: encode(%a) = 0x%llx, want 0x%llx", kn_scalar_name(t), x,
             (unsigned long long)got, (unsigned long long)want);
}
static void check_dec(kn_scalar t, uint64_t bits, double want) {
  double got = kn_decode(t, bits);
  bool same = isnan(want) ? isnan(got) : (got == want && signbit(got) == signbit(want));
  if (!same)
    fail_msg("%s: decode(0x%llx) = %a, want %a", kn_scalar_name(t), (unsigned long long)bits,
             got, want);
}

static void test_f16(void **st) {
  (void)st;
  check_enc(KN_F16, 1.0, 0x3C00);
  check_enc(KN_F16, -2.0, 0xC000);
  check_enc(KN_F16, 65504.0, 0x7BFF);
  check_enc(KN_F16, 65519.0, 0x7BFF);
  check_enc(KN_F16, 65520.0, 0x7C00);        /* halfway to 2^16: ties to even -> inf */
  check_enc(KN_F16, -1e9, 0xFC00);
  check_enc(KN_F16, INFINITY, 0x7C00);
  check_enc(KN_F16, 0x1p-24, 0x0001);        /* smallest subnormal */
  check_enc(KN_F16, 0x1p-25, 0x0000);        /* tie between 0 and 2^-24: even is 0 */
  check_enc(KN_F16, 0x1.8p-25, 0x0001);
  check_enc(KN_F16, 0x3p-25, 0x0002);        /* tie between 1 and 2 quanta: even is 2 */
  check_enc(KN_F16, 0x1p-14, 0x0400);        /* smallest normal */
  check_enc(KN_F16, 1.0 + 0x1p-11, 0x3C00);  /* tie -> even (down) */
  check_enc(KN_F16, 1.0 + 0x3p-11, 0x3C02);  /* tie -> even (up) */
  check_enc(KN_F16, 1.0 + 0x1p-11 + 0x1p-40, 0x3C01);
  check_enc(KN_F16, -0.0, 0x8000);
  check_enc(KN_F16, -0x1p-30, 0x8000);       /* underflow keeps the sign */
  check_enc(KN_F16, NAN, 0x7E00);
  check_dec(KN_F16, 0x7C00, INFINITY);
  check_dec(KN_F16, 0x7C01, NAN);
  check_dec(KN_F16, 0x3555, 0x1.554p-2);
  assert_true(kn_max_finite(KN_F16) == 65504.0);
}

static void test_bf16(void **st) {
  (void)st;
  check_enc(KN_BF16, 1.0, 0x3F80);
  check_enc(KN_BF16, 1.0 + 0x1p-7, 0x3F81);
  check_enc(KN_BF16, 1.0 + 0x1p-8, 0x3F80);  /* tie -> even */
  check_enc(KN_BF16, 1.0 + 0x3p-8, 0x3F82);  /* tie -> even */
  check_enc(KN_BF16, -3.0, 0xC040);
  check_enc(KN_BF16, 0x1.fep127, 0x7F7F);
  check_enc(KN_BF16, 0x1.ffp127, 0x7F80);    /* tie at the top -> inf */
  check_enc(KN_BF16, 0x1p-133, 0x0001);      /* smallest subnormal */
  check_enc(KN_BF16, NAN, 0x7FC0);
  check_dec(KN_BF16, 0x7F80, INFINITY);
  assert_true(kn_max_finite(KN_BF16) == 0x1.fep127);
}

static void test_e4m3(void **st) {
  (void)st;
  check_enc(KN_F8E4M3, 1.0, 0x38);
  check_enc(KN_F8E4M3, 448.0, 0x7E);
  check_enc(KN_F8E4M3, 464.0, 0x7E);         /* saturates */
  check_enc(KN_F8E4M3, 1e6, 0x7E);
  check_enc(KN_F8E4M3, -1e6, 0xFE);
  check_enc(KN_F8E4M3, INFINITY, 0x7E);      /* no inf: saturates */
  check_enc(KN_F8E4M3, -INFINITY, 0xFE);
  check_enc(KN_F8E4M3, 0x1p-9, 0x01);        /* smallest subnormal */
  check_enc(KN_F8E4M3, 0x1p-6, 0x08);        /* smallest normal */
  check_enc(KN_F8E4M3, -0.0, 0x80);
  check_enc(KN_F8E4M3, NAN, 0x7F);
  check_dec(KN_F8E4M3, 0x7F, NAN);
  check_dec(KN_F8E4M3, 0xFF, NAN);
  check_dec(KN_F8E4M3, 0x7E, 448.0);
  check_dec(KN_F8E4M3, 0x78, 256.0);         /* S.1111.000 is a number */
  check_dec(KN_F8E4M3, 0x80, -0.0);
  assert_true(kn_max_finite(KN_F8E4M3) == 448.0);
}

static void test_e5m2(void **st) {
  (void)st;
  check_enc(KN_F8E5M2, 1.0, 0x3C);
  check_enc(KN_F8E5M2, 57344.0, 0x7B);
  check_enc(KN_F8E5M2, 1e6, 0x7B);           /* fp8 conversions saturate */
  check_enc(KN_F8E5M2, INFINITY, 0x7C);      /* but e5m2 keeps a real inf */
  check_enc(KN_F8E5M2, 0x1p-16, 0x01);
  check_enc(KN_F8E5M2, -0.0, 0x80);
  check_enc(KN_F8E5M2, NAN, 0x7E);
  check_dec(KN_F8E5M2, 0x7C, INFINITY);
  check_dec(KN_F8E5M2, 0xFC, -INFINITY);
  check_dec(KN_F8E5M2, 0x7D, NAN);
  check_dec(KN_F8E5M2, 0x7F, NAN);
  assert_true(kn_max_finite(KN_F8E5M2) == 57344.0);
}

static void test_fnuz(void **st) {
  (void)st;
  check_enc(KN_F8E4M3FNUZ, 1.0, 0x40);
  check_enc(KN_F8E4M3FNUZ, 240.0, 0x7F);
  check_enc(KN_F8E4M3FNUZ, 1000.0, 0x7F);
  check_enc(KN_F8E4M3FNUZ, -INFINITY, 0xFF);
  check_enc(KN_F8E4M3FNUZ, -0.0, 0x00);      /* no negative zero */
  check_enc(KN_F8E4M3FNUZ, -0x1p-20, 0x00);
  check_enc(KN_F8E4M3FNUZ, 0x1p-10, 0x01);
  check_enc(KN_F8E4M3FNUZ, NAN, 0x80);
  check_dec(KN_F8E4M3FNUZ, 0x80, NAN);
  check_dec(KN_F8E4M3FNUZ, 0xFF, -240.0);
  check_dec(KN_F8E4M3FNUZ, 0x78, 128.0);
  assert_true(kn_max_finite(KN_F8E4M3FNUZ) == 240.0);
  assert_true(kn_round(KN_F8E4M3FNUZ, -0.0) == 0 && !signbit(kn_round(KN_F8E4M3FNUZ, -0.0)));

  check_enc(KN_F8E5M2FNUZ, 1.0, 0x40);
  check_enc(KN_F8E5M2FNUZ, 57344.0, 0x7F);
  check_enc(KN_F8E5M2FNUZ, INFINITY, 0x7F);
  check_enc(KN_F8E5M2FNUZ, -0.0, 0x00);
  check_enc(KN_F8E5M2FNUZ, 0x1p-17, 0x01);
  check_enc(KN_F8E5M2FNUZ, NAN, 0x80);
  check_dec(KN_F8E5M2FNUZ, 0x80, NAN);
  check_dec(KN_F8E5M2FNUZ, 0x7C, 32768.0);
  assert_true(kn_max_finite(KN_F8E5M2FNUZ) == 57344.0);
}

/* every pattern decodes to a value that encodes back to it (NaNs to some NaN) */
static void test_round_trip_all(void **st) {
  (void)st;
  for (size_t f = 0; f < sizeof floats / sizeof *floats; f++) {
    kn_scalar t = floats[f];
    uint64_t count = 1ull << kn_scalar_bits(t), nans = 0;
    for (uint64_t b = 0; b < count; b++) {
      double v = kn_decode(t, b);
      uint64_t e = kn_encode(t, v);
      if (isnan(v)) {
        nans++;
        assert_true(isnan(kn_decode(t, e)));
        continue;
      }
      if (e != b) fail_msg("%s: 0x%llx -> %a -> 0x%llx", kn_scalar_name(t), (unsigned long long)b, v,
                           (unsigned long long)e);
      assert_true(kn_round(t, v) == v); /* representable values are fixed points */
      if (isfinite(v)) assert_true(fabs(v) <= kn_max_finite(t));
    }
    /* the NaN counts say which flavour each format has */
    uint64_t want = t == KN_F16 ? 2046 : t == KN_BF16 ? 254 : t == KN_F8E5M2 ? 6 : t == KN_F8E4M3 ? 2 : 1;
    assert_int_equal(nans, want);
  }
}

/* positive patterns in increasing order decode to strictly increasing values */
static void test_monotonic(void **st) {
  (void)st;
  for (size_t f = 0; f < sizeof floats / sizeof *floats; f++) {
    kn_scalar t = floats[f];
    uint64_t half = 1ull << (kn_scalar_bits(t) - 1);
    double prev = -1;
    for (uint64_t b = 0; b < half; b++) {
      double v = kn_decode(t, b);
      if (isnan(v)) continue;
      assert_true(v > prev);
      prev = v;
      double n = kn_decode(t, b | half);
      if (!isnan(n)) assert_true(n == -v);
    }
    /* kn_round is monotonic on random pairs */
    for (int i = 0; i < 20000; i++) {
      double x = rnd_double(-30, 20), y = rnd_double(-30, 20);
      if (x > y) { double z = x; x = y; y = z; }
      assert_true(kn_round(t, x) <= kn_round(t, y));
    }
  }
}

/* reference rounding by search: the nearest finite value, ties to the even pattern, then the
 * overflow rule; written without any of numeric.c's bit tricks */
static double brute_round(kn_scalar t, double x, const double *pos, int npos) {
  if (isnan(x)) return NAN;
  bool fnuz = t == KN_F8E4M3FNUZ || t == KN_F8E5M2FNUZ;
  bool fp8 = kn_scalar_bits(t) == 8;
  double maxf = pos[npos - 1], a = fabs(x), r;
  if (isinf(x)) {
    if (t == KN_F16 || t == KN_BF16 || t == KN_F8E5M2) return x;
    return x < 0 ? -maxf : maxf;
  }
  /* pos[] holds the non-negative finite values in increasing order, index = even/odd pattern */
  int lo = 0, hi = npos - 1;
  if (a >= maxf) {
    /* beyond max: the IEEE formats round to inf once past max + half a quantum (or at the tie,
     * since max has an odd mantissa); fp8 saturates */
    double ulp = maxf - pos[npos - 2];
    if (!fp8 && a >= maxf + ulp / 2) r = INFINITY;
    else r = maxf;
  } else {
    while (hi - lo > 1) {
      int mid = (lo + hi) / 2;
      if (pos[mid] <= a) lo = mid;
      else hi = mid;
    }
    double dl = a - pos[lo], dh = pos[hi] - a;
    r = dl < dh ? pos[lo] : dh < dl ? pos[hi] : ((lo & 1) ? pos[hi] : pos[lo]);
  }
  if (r == 0 && fnuz) return 0.0;
  return x < 0 ? -r : r;
}

static void test_round_vs_search(void **st) {
  (void)st;
  static double pos[1 << 15];
  for (size_t f = 0; f < sizeof floats / sizeof *floats; f++) {
    kn_scalar t = floats[f];
    int npos = 0;
    uint64_t half = 1ull << (kn_scalar_bits(t) - 1);
    for (uint64_t b = 0; b < half; b++) {
      double v = kn_decode(t, b);
      if (isfinite(v)) pos[npos++] = v;
    }
    int elo = (int)floor(log2(pos[1])) - 3, ehi = (int)ceil(log2(pos[npos - 1])) + 3;
    for (int i = 0; i < 100000; i++) {
      double x;
      if (i % 4 == 0) { /* exact midpoints between neighbours: the ties */
        int k = (int)(rnd() % (uint64_t)(npos - 1));
        x = (pos[k] + pos[k + 1]) / 2 * (rnd() & 1 ? -1 : 1);
      } else {
        x = rnd_double(elo, ehi);
      }
      double want = brute_round(t, x, pos, npos), got = kn_round(t, x);
      if (!(got == want && signbit(got) == signbit(want)))
        fail_msg("%s: round(%a) = %a, search says %a", kn_scalar_name(t), x, got, want);
    }
  }
  (void)fp8s;
}

/* binary32: kn_round and kn_encode agree with the host's conversions */
static void test_f32_vs_hardware(void **st) {
  (void)st;
  for (int i = 0; i < 300000; i++) {
    double x;
    int mode = i % 5;
    if (mode == 0) x = rnd_double(-160, -120);          /* subnormals and underflow */
    else if (mode == 1) x = rnd_double(120, 130);       /* overflow */
    else if (mode == 2) {                               /* ties */
      float f = (float)rnd_double(-149, 127);
      x = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
    } else x = rnd_double(-60, 60);
    double want = (double)(float)x, got = kn_round(KN_F32, x);
    if (!(got == want && signbit(got) == signbit(want)))
      fail_msg("f32: round(%a) = %a, hardware %a", x, got, want);
    float fw = (float)x;
    uint32_t wb;
    memcpy(&wb, &fw, 4);
    assert_int_equal(kn_encode(KN_F32, x), wb);
    assert_true(kn_decode(KN_F32, wb) == want || isnan(want));
  }
  /* every 4099th f32 pattern decodes like the host */
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) {
    uint32_t u = (uint32_t)b;
    float f;
    memcpy(&f, &u, 4);
    double d = kn_decode(KN_F32, u);
    if (isnan(f)) assert_true(isnan(d));
    else assert_true(d == (double)f && !signbit(d) == !signbit(f));
  }
}

static void test_ints(void **st) {
  (void)st;
  assert_true(kn_round(KN_I32, 3.7) == 3);
  assert_true(kn_round(KN_I32, -3.7) == -3);
  assert_true(kn_round(KN_I32, NAN) == 0);
  assert_true(kn_round(KN_I32, 1e20) == 2147483647.0);
  assert_true(kn_round(KN_I32, -1e20) == -2147483648.0);
  assert_true(kn_round(KN_I1, 0.5) == 1);
  assert_true(kn_round(KN_I1, 0.0) == 0);
  assert_int_equal(kn_wrap_int(KN_I32, 0x80000000ll), INT32_MIN);
  assert_int_equal(kn_wrap_int(KN_I32, 0x1FFFFFFFFll), -1);
  assert_int_equal(kn_wrap_int(KN_I1, 2), 1);
  assert_int_equal(kn_wrap_int(KN_I64, INT64_MIN), INT64_MIN);
  /* one rounding from i64: 2^60 + 2^36 + 1 is just above the f32 midpoint 2^60 + 2^36, which a
   * (double) conversion would reach first and then round to even (2^60) */
  int64_t v = (1ll << 60) + (1ll << 36) + 1;
  assert_true(kn_int_to_float(KN_F32, v) == 0x1p60 + 0x1p37);
  for (int i = 0; i < 100000; i++) {
    int64_t x = (int64_t)rnd() >> (rnd() % 64);
    float hw = (float)x; /* the host converts int64 -> float with one rounding */
    assert_true(kn_int_to_float(KN_F32, x) == (double)hw);
    double b = kn_int_to_float(KN_BF16, x);
    assert_true(b == kn_round(KN_BF16, b));
  }
}

static void test_memory(void **st) {
  (void)st;
  unsigned char buf[16] = {0};
  kn_store_elem(KN_F16, buf + 1, 1.0); /* unaligned */
  assert_int_equal(buf[1], 0x00);
  assert_int_equal(buf[2], 0x3C);
  assert_true(kn_load_elem(KN_F16, buf + 1) == 1.0);
  kn_store_elem(KN_BF16, buf, -2.0);
  assert_true(kn_load_elem(KN_BF16, buf) == -2.0);
  kn_store_elem(KN_F32, buf + 3, 0.1);
  assert_true(kn_load_elem(KN_F32, buf + 3) == (double)0.1f);
  kn_store_elem(KN_F8E4M3, buf, 1000);
  assert_int_equal(buf[0], 0x7E);
  kn_store_elem(KN_F8E4M3FNUZ, buf, -0.0);
  assert_int_equal(buf[0], 0x00);
  kn_store_elem_i(KN_I1, buf, 5);
  assert_int_equal(buf[0], 1);
  buf[0] = 7;
  assert_int_equal(kn_load_elem_i(KN_I1, buf), 1);
  kn_store_elem_i(KN_I32, buf + 1, 0x100000005ll);
  assert_int_equal(kn_load_elem_i(KN_I32, buf + 1), 5);
  kn_store_elem_i(KN_I64, buf + 5, -7);
  assert_int_equal(kn_load_elem_i(KN_I64, buf + 5), -7);
}

static void test_ulp_and_exactness(void **st) {
  (void)st;
  assert_true(kn_ulp(KN_F32, 1.0) == 0x1p-23);
  assert_true(kn_ulp(KN_F32, -1.5) == 0x1p-23);
  assert_true(kn_ulp(KN_F32, 0.0) == 0x1p-149);       /* subnormal spacing */
  assert_true(kn_ulp(KN_F16, 1000.0) == 0.5);         /* [512, 1024): 2^9 / 2^10 */
  assert_true(kn_ulp(KN_F16, 0x1p-20) == 0x1p-24);
  assert_true(kn_ulp(KN_BF16, 3.0) == 0x1p-6);
  assert_true(kn_ulp(KN_I32, 3.0) == 1);
  /* exact: the same value only; NaN equals NaN, -0 is not +0 */
  assert_true(kn_exactness_accepts(KN_EXACT, KN_F32, NAN, -NAN));
  assert_false(kn_exactness_accepts(KN_EXACT, KN_F32, 0.0, -0.0));
  assert_false(kn_exactness_accepts(KN_REASSOC, KN_F32, 1.0, 1.0 + 0x1p-23));
  assert_false(kn_exactness_accepts(KN_ULP, KN_I32, 7, 8));
  /* ulp: two steps of the format */
  assert_true(kn_exactness_accepts(KN_ULP, KN_F32, 1.0, 1.0 + 0x1p-22));
  assert_false(kn_exactness_accepts(KN_ULP, KN_F32, 1.0, 1.0 + 0x1p-21));
  assert_true(kn_exactness_accepts(KN_ULP, KN_F16, 1000.0, 999.0));
  assert_false(kn_exactness_accepts(KN_ULP, KN_F32, INFINITY, 3e38));
  assert_false(kn_exactness_accepts(KN_ULP, KN_F32, 1.0, NAN));
  /* approx: also 2^-16 relative or 2^-20 absolute, never a different class */
  assert_true(kn_exactness_accepts(KN_APPROX, KN_F32, 100.0, 100.0 * (1 + 0x1p-17)));
  assert_false(kn_exactness_accepts(KN_APPROX, KN_F32, 100.0, 100.0 * (1 + 0x1p-15)));
  assert_true(kn_exactness_accepts(KN_APPROX, KN_F32, 0x1p-40, 0.0));
  assert_false(kn_exactness_accepts(KN_APPROX, KN_F32, 0.5, 0.5 + 0x1p-16));
  assert_false(kn_exactness_accepts(KN_APPROX, KN_F32, -INFINITY, -3e38));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f16),           cmocka_unit_test(test_bf16),
      cmocka_unit_test(test_e4m3),          cmocka_unit_test(test_e5m2),
      cmocka_unit_test(test_fnuz),          cmocka_unit_test(test_round_trip_all),
      cmocka_unit_test(test_monotonic),     cmocka_unit_test(test_round_vs_search),
      cmocka_unit_test(test_f32_vs_hardware), cmocka_unit_test(test_ints),
      cmocka_unit_test(test_memory),        cmocka_unit_test(test_ulp_and_exactness),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
