/* numeric.h — the number formats of the tile IR and their exact rounding.
 *
 * Every float format is held in a double by the interpreter.  kn_round() maps a double to the
 * nearest value of a format: round to nearest, ties to even; f16/bf16/f32 overflow to +-inf;
 * the fp8 formats saturate to their largest finite value (as the hardware's satfinite / clamped
 * conversions do): finite overflow gives +-max in all four, and +-inf gives +-max in the three
 * without an inf (e4m3, e4m3fnuz, e5m2fnuz) while OCP e5m2 keeps +-inf; NaN stays NaN; the
 * "fnuz" formats have no negative zero (-0 becomes +0).  Subnormals exist in every format.
 * Rounding is computed on the bits of the double, independent of the FPU rounding mode.
 * Because a double carries more than 2p+2 bits for every format here, computing +, -, *, /, sqrt
 * in double and then rounding once gives the correctly rounded result of the format itself.
 *
 * kn_encode()/kn_decode() convert between a double and the bit pattern of a format (after
 * rounding); kn_load_elem()/kn_store_elem() read and write one element of memory.
 */
#ifndef KILN_NUMERIC_H
#define KILN_NUMERIC_H

#include "ir.h"

/* float formats: as above.  Int types: what a float->int cast gives: truncation toward zero,
 * NaN -> 0, saturation to the type's range; i1: x != 0 (so NaN -> 1). */
double kn_round(kn_scalar t, double x);
void kn_round_array(kn_scalar t, double *x, size_t n);  /* kn_round of each, with a fast f32 path */
/* an integer converted to a float format with ONE rounding (a plain (double)v would round an
 * i64 beyond 2^53 twice) */
double kn_int_to_float(kn_scalar t, int64_t v);
/* bit patterns: rounds first.  NaN encodes as the format's canonical NaN (IEEE: quiet NaN with
 * the sign, e.g. f16 0x7E00; e4m3: S.1111.111; fnuz: 0x80).  Ints: the low bits of the
 * kn_round() value. */
uint64_t kn_encode(kn_scalar t, double x);
double kn_decode(kn_scalar t, uint64_t bits);   /* only the format's low bits are read */
double kn_max_finite(kn_scalar t);              /* largest finite value of a float format */

/* one element of memory of type t at p (unaligned access allowed) */
double kn_load_elem(kn_scalar t, const void *p);          /* floats */
int64_t kn_load_elem_i(kn_scalar t, const void *p);       /* ints */
void kn_store_elem(kn_scalar t, void *p, double x);       /* floats (rounds) */
void kn_store_elem_i(kn_scalar t, void *p, int64_t x);    /* ints (wraps) */
int64_t kn_wrap_int(kn_scalar t, int64_t x);              /* i1: x != 0; i32: two's complement wrap */
/* the spacing of format t's values at x (for |x| at or below the smallest normal: the subnormal
 * spacing); 1 for integer types, inf for inf and NaN */
double kn_ulp(kn_scalar t, double x);
/* Does a GPU target's `got` keep the promise e (ops.def, kn_exactness) against the interpreter's
 * `want`, both values of type t?  The same value always does (any NaN equals any NaN; -0 is not
 * +0); otherwise only a finite float pair does: KN_ULP within 2 ulps of t at want, KN_APPROX
 * also within 2^-16 of |want| or 2^-20 absolute.  KN_EXACT and KN_REASSOC accept nothing else
 * (the tests give reassociating ops inputs whose partial results are exact). */
bool kn_exactness_accepts(kn_exactness e, kn_scalar t, double want, double got);
/* Memory is in the host's byte order (little-endian on every kiln machine); i1 is one byte 0/1
 * (a nonzero byte reads as 1).  kn_load_elem_i on a float type truncates (as kn_round), and
 * kn_store_elem on an int type converts likewise; kn_store_elem_i on a float type rounds once. */

#endif
