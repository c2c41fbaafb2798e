/* numeric.c — the number formats of the tile IR: rounding, bit encodings, memory access.
 *
 * Every float format here is described by four numbers (exponent bits, mantissa bits, bias,
 * flavour) and handled by one generic routine each for rounding, encoding and decoding, instead
 * of one hand-written copy per format.  The flavour says what the top exponent field and the
 * sign bit mean:
 *   IEEE  the all-ones exponent holds inf (mantissa 0) and NaN (f16, bf16, f32, OCP e5m2);
 *   FN    "finite": no inf; only S.1111.111 is NaN, the rest of the top binade is finite
 *         (OCP e4m3fn);
 *   FNUZ  "finite, unsigned zero": no inf, no -0; the pattern 1.0000.000 (0x80) is the only NaN
 *         and every other pattern is a number (AMD gfx942 e4m3fnuz / e5m2fnuz).
 * Subnormals exist in every format (exponent field 0: value = mantissa * 2^(1 - bias - mbits)).
 *
 * Rounding works on the bits of the double: the 53-bit significand is cut to the format's
 * precision at the format's quantum, rounding to nearest, ties to even.  That is a single
 * rounding of the exact double, so it is correctly rounded; it does not depend on the FPU's
 * rounding mode, on _Float16, or on the host having any of these formats.  Overflow: IEEE
 * formats go to +-inf; the fp8 formats without inf SATURATE to +-max finite (both for finite
 * overflow and for +-inf inputs), as the hardware's clamped/satfinite conversions do.  OCP e5m2
 * has an inf and is IEEE-like, but kiln's fp8 conversions saturate for every fp8 format (the
 * common choice of fp8 GEMM/attention libraries), so e5m2 finite overflow also gives +-57344;
 * an e5m2 +-inf input stays +-inf.
 *
 * Memory holds elements in the host's byte order (little-endian on every machine kiln targets),
 * without alignment requirements; i1 is one byte, 0 or 1 (any nonzero byte reads as 1).
 */
#include <math.h>
#include <string.h>

#include "numeric.h"

typedef enum { FL_IEEE, FL_FN, FL_FNUZ } flavour;

typedef struct fmt {
  int ebits, mbits, bias;
  flavour fl;
  bool sat;    /* finite overflow saturates to max (fp8) instead of going to inf */
  double maxf; /* largest finite value (test_numeric checks it against the top bit patterns) */
} fmt;

/* indexed by kn_scalar; the integer rows are unused */
static const fmt fmts[KN_SCALAR_COUNT] = {
    [KN_F16] = {5, 10, 15, FL_IEEE, false, 65504.0},
    [KN_BF16] = {8, 7, 127, FL_IEEE, false, 0x1.fep127},
    [KN_F32] = {8, 23, 127, FL_IEEE, false, 0x1.fffffep127},
    [KN_F8E4M3] = {4, 3, 7, FL_FN, true, 448.0},        /* S.1111.110 */
    [KN_F8E5M2] = {5, 2, 15, FL_IEEE, true, 57344.0},   /* S.11110.11 */
    [KN_F8E4M3FNUZ] = {4, 3, 8, FL_FNUZ, true, 240.0},  /* S.1111.111 */
    [KN_F8E5M2FNUZ] = {5, 2, 16, FL_FNUZ, true, 57344.0}, /* S.11111.11 */
};

static const uint64_t D_SIGN = 1ull << 63, D_MANT = (1ull << 52) - 1;

static inline uint64_t dbits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* 2^e for -1022 <= e <= 1023, built from bits (exact, no libm call) */
static inline double pow2(int e) {
  uint64_t u = (uint64_t)(e + 1023) << 52;
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static inline int emin_of(const fmt *f) { return 1 - f->bias; }

static double round_fmt(const fmt *f, double x) {
  uint64_t u = dbits(x), a = u & ~D_SIGN;
  int E = (int)(a >> 52);
  double maxf = f->maxf;
  if (E == 0x7FF) {
    if (a & D_MANT) return x;                   /* NaN stays NaN */
    if (f->fl == FL_IEEE) return x;             /* inf stays inf where the format has one */
    return (u & D_SIGN) ? -maxf : maxf;         /* no inf: saturate */
  }
  double r;
  if (E == 0) {
    r = 0; /* zero or a double subnormal (< 2^-1022): far below half of any format's quantum */
  } else {
    int e = E - 1023, emin = emin_of(f);
    int qe = (e > emin ? e : emin) - f->mbits;  /* exponent of the format's quantum at x */
    int d = qe - (e - 52);                      /* significand bits to drop, >= 52 - mbits */
    uint64_t S = (a & D_MANT) | (1ull << 52);
    if (d >= 54) {
      r = 0; /* |x| < quantum/2 */
    } else {
      uint64_t q = S >> d, rem = S & ((1ull << d) - 1), half = 1ull << (d - 1);
      if (rem > half || (rem == half && (q & 1))) q++;
      /* q * 2^qe is exact; qe >= -149 keeps 2^qe a normal double; the product may reach
       * 2^1024 = inf only when x is near DBL_MAX, which the overflow test below handles */
      r = (double)q * pow2(qe);
    }
  }
  if (r > maxf) r = (f->sat || f->fl != FL_IEEE) ? maxf : INFINITY;
  if (r == 0 && f->fl == FL_FNUZ) return 0.0; /* no negative zero */
  return (u & D_SIGN) ? -r : r;
}

static uint64_t encode_fmt(const fmt *f, double x) {
  double r = round_fmt(f, x);
  int m = f->mbits, w = 1 + f->ebits + m;
  uint64_t signbit = 1ull << (w - 1), expall = (1ull << f->ebits) - 1, mantall = (1ull << m) - 1;
  uint64_t u = dbits(r), sign = (u & D_SIGN) ? signbit : 0;
  if (isnan(r)) {
    if (f->fl == FL_FNUZ) return signbit;
    if (f->fl == FL_FN) return sign | expall << m | mantall;
    return sign | expall << m | 1ull << (m - 1); /* canonical quiet NaN */
  }
  uint64_t a = u & ~D_SIGN;
  if (a == 0) return sign;
  if (isinf(r)) return sign | expall << m; /* only IEEE formats keep an inf */
  int e = (int)(a >> 52) - 1023, emin = emin_of(f);
  if (e < emin) { /* subnormal: |r| = mant * 2^(emin - m), exactly, after rounding */
    double ar = r < 0 ? -r : r;
    return sign | (uint64_t)(ar * pow2(m - emin));
  }
  return sign | (uint64_t)(e + f->bias) << m | ((a >> (52 - m)) & mantall);
}

static double decode_fmt(const fmt *f, uint64_t bits) {
  int m = f->mbits, w = 1 + f->ebits + m;
  uint64_t signbit = 1ull << (w - 1), expall = (1ull << f->ebits) - 1, mantall = (1ull << m) - 1;
  bits &= (signbit << 1) - 1;
  uint64_t ef = (bits >> m) & expall, mf = bits & mantall;
  bool neg = (bits & signbit) != 0;
  if (f->fl == FL_FNUZ && bits == signbit) return NAN;
  if (f->fl == FL_IEEE && ef == expall) return mf ? (neg ? -NAN : NAN) : (neg ? -INFINITY : INFINITY);
  if (f->fl == FL_FN && ef == expall && mf == mantall) return neg ? -NAN : NAN;
  double v = ef == 0 ? (double)mf * pow2(emin_of(f) - m)
                     : (double)(mf | 1ull << m) * pow2((int)ef - f->bias - m);
  return neg ? -v : v;
}

/* ---- public API ---- */

int64_t kn_wrap_int(kn_scalar t, int64_t x) {
  switch (t) {
  case KN_I1: return x != 0;
  case KN_I32: return (int64_t)(int32_t)(uint32_t)(uint64_t)x; /* two's complement wrap */
  default: return x;
  }
}

/* float -> int as `cast` does it: truncate toward zero, NaN -> 0, saturate to the range */
static int64_t float_to_int(kn_scalar t, double x) {
  if (t == KN_I1) return x != 0;
  if (isnan(x)) return 0;
  double lo = t == KN_I32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = t == KN_I32 ? 2147483648.0 : 9223372036854775808.0; /* exclusive, exact in double */
  if (x <= lo) return t == KN_I32 ? INT32_MIN : INT64_MIN;
  if (x >= hi) return t == KN_I32 ? INT32_MAX : INT64_MAX;
  return (int64_t)x; /* C truncates toward zero; in range, so defined */
}

double kn_round(kn_scalar t, double x) {
  if (kn_scalar_is_int(t)) return (double)float_to_int(t, x);
  if (t >= KN_SCALAR_COUNT) return x;
  return round_fmt(&fmts[t], x);
}

void kn_round_array(kn_scalar t, double *x, size_t n) {
  if (t == KN_F32) {
    /* the C conversion rounds to nearest even, overflows to inf, keeps NaN: exactly round_fmt
     * for binary32 (test_numeric checks the two agree) and several times faster */
    for (size_t i = 0; i < n; i++) x[i] = (double)(float)x[i];
    return;
  }
  if (kn_scalar_is_int(t) || t >= KN_SCALAR_COUNT) {
    for (size_t i = 0; i < n; i++) x[i] = kn_round(t, x[i]);
    return;
  }
  const fmt *f = &fmts[t];
  for (size_t i = 0; i < n; i++) x[i] = round_fmt(f, x[i]);
}

double kn_int_to_float(kn_scalar t, int64_t v) {
  /* A plain (double)v rounds an i64 above 2^53 once, and rounding that to a narrower format
   * would be a second rounding (wrong on ties).  Rounding to 53 bits "to odd" first (keep the
   * top 53 bits, OR every dropped bit into the lowest kept one) is exact in a double, and
   * round-to-odd to p + 2 or more bits followed by round-to-nearest-even to p bits (p <= 24
   * here) equals a single rounding. */
  uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  if (mag >> 53) {
    int hb = 63 - __builtin_clzll(mag);
    int drop = hb - 52;
    uint64_t kept = mag >> drop;
    if (mag & ((1ull << drop) - 1)) kept |= 1;
    double d = (double)kept * ldexp(1.0, drop);
    return kn_round(t, v < 0 ? -d : d);
  }
  return kn_round(t, (double)v);
}

uint64_t kn_encode(kn_scalar t, double x) {
  if (kn_scalar_is_int(t)) return (uint64_t)float_to_int(t, x) & (t == KN_I1 ? 1 : t == KN_I32 ? 0xFFFFFFFFull : ~0ull);
  if (t >= KN_SCALAR_COUNT) return 0;
  return encode_fmt(&fmts[t], x);
}

double kn_decode(kn_scalar t, uint64_t bits) {
  switch (t) {
  case KN_I1: return (double)(bits & 1);
  case KN_I32: return (double)(int32_t)(uint32_t)bits;
  case KN_I64: return (double)(int64_t)bits;
  default: return t < KN_SCALAR_COUNT ? decode_fmt(&fmts[t], bits) : 0;
  }
}

double kn_max_finite(kn_scalar t) {
  switch (t) {
  case KN_I1: return 1;
  case KN_I32: return INT32_MAX;
  case KN_I64: return 9223372036854775807.0; /* rounds to 2^63 */
  default: return t < KN_SCALAR_COUNT ? fmts[t].maxf : 0;
  }
}

double kn_load_elem(kn_scalar t, const void *p) {
  switch (t) {
  case KN_F32: {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
  }
  case KN_F16:
  case KN_BF16: {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return decode_fmt(&fmts[t], h);
  }
  case KN_F8E4M3:
  case KN_F8E5M2:
  case KN_F8E4M3FNUZ:
  case KN_F8E5M2FNUZ: return decode_fmt(&fmts[t], *(const uint8_t *)p);
  default: return (double)kn_load_elem_i(t, p);
  }
}

int64_t kn_load_elem_i(kn_scalar t, const void *p) {
  switch (t) {
  case KN_I1: return *(const uint8_t *)p != 0;
  case KN_I32: {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  case KN_I64: {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  default: return float_to_int(KN_I64, kn_load_elem(t, p));
  }
}

void kn_store_elem(kn_scalar t, void *p, double x) {
  switch (t) {
  case KN_F32: {
    float f = (float)x;
    memcpy(p, &f, sizeof f);
    return;
  }
  case KN_F16:
  case KN_BF16: {
    uint16_t h = (uint16_t)encode_fmt(&fmts[t], x);
    memcpy(p, &h, sizeof h);
    return;
  }
  case KN_F8E4M3:
  case KN_F8E5M2:
  case KN_F8E4M3FNUZ:
  case KN_F8E5M2FNUZ: *(uint8_t *)p = (uint8_t)encode_fmt(&fmts[t], x); return;
  default: kn_store_elem_i(t, p, float_to_int(t, x)); return;
  }
}

void kn_store_elem_i(kn_scalar t, void *p, int64_t x) {
  switch (t) {
  case KN_I1: *(uint8_t *)p = x != 0; return;
  case KN_I32: {
    int32_t v = (int32_t)kn_wrap_int(KN_I32, x);
    memcpy(p, &v, sizeof v);
    return;
  }
  case KN_I64: memcpy(p, &x, sizeof x); return;
  default: kn_store_elem(t, p, kn_int_to_float(t, x)); return;
  }
}

/* ---- tolerances (kn_exactness of ops.def) ---- */

double kn_ulp(kn_scalar t, double x) {
  if (!kn_scalar_is_float(t)) return 1;
  const fmt *f = &fmts[t];
  if (isinf(x) || isnan(x)) return INFINITY;
  int e = 0;
  if (x != 0) frexp(x, &e);                  /* |x| = m * 2^e, m in [0.5, 1) */
  int ex = x != 0 && e - 1 > emin_of(f) ? e - 1 : emin_of(f);
  return ldexp(1.0, ex - f->mbits);
}

/* the same value: any NaN equals any NaN, -0 is not +0 */
static bool same_value(double want, double got) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  return want == got && signbit(want) == signbit(got);
}

bool kn_exactness_accepts(kn_exactness e, kn_scalar t, double want, double got) {
  if (same_value(want, got)) return true;
  if (!kn_scalar_is_float(t) || e == KN_EXACT || e == KN_REASSOC) return false;
  /* a NaN or an inf is never excused; nor is an inf against a finite value */
  if (isnan(want) || isnan(got) || isinf(want) || isinf(got)) return false;
  double diff = fabs(got - want);
  if (diff <= 2 * kn_ulp(t, want)) return true;
  return e == KN_APPROX && (diff <= 0x1p-16 * fabs(want) || diff <= 0x1p-20);
}
