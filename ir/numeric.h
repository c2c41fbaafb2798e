/* numeric.h — the number formats of the tile IR and their exact rounding.
 *
 * Every float format is held in a double by the interpreter.  kn_round() maps a double to the
 * nearest value of a format: round to nearest, ties to even; f16/bf16/f32 overflow to +-inf;
 * the fp8 formats saturate to their largest finite value (as the hardware's satfinite / clamped
 * conversions do); NaN stays NaN; the "fnuz" formats have no negative zero (-0 becomes +0).
 * Because a double carries more than 2p+2 bits for every format here, computing +, -, *, /, sqrt
 * in double and then rounding once gives the correctly rounded result of the format itself.
 *
 * kn_encode()/kn_decode() convert between a double and the bit pattern of a format (after
 * rounding); kn_load_elem()/kn_store_elem() read and write one element of memory.
 */
#ifndef KILN_NUMERIC_H
#define KILN_NUMERIC_H

#include "ir.h"

double kn_round(kn_scalar t, double x);         /* float formats; ints: wrap to the width (i1: x != 0) */
uint64_t kn_encode(kn_scalar t, double x);      /* rounds first */
double kn_decode(kn_scalar t, uint64_t bits);
double kn_max_finite(kn_scalar t);              /* largest finite value of a float format */

/* one element of memory of type t at p (unaligned access allowed) */
double kn_load_elem(kn_scalar t, const void *p);          /* floats */
int64_t kn_load_elem_i(kn_scalar t, const void *p);       /* ints */
void kn_store_elem(kn_scalar t, void *p, double x);       /* floats (rounds) */
void kn_store_elem_i(kn_scalar t, void *p, int64_t x);    /* ints (wraps) */
int64_t kn_wrap_int(kn_scalar t, int64_t x);              /* i1: x != 0; i32: two's complement wrap */

#endif
