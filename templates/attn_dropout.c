/* attn_dropout.c — attention dropout's counter-based generator: Philox 4x32-10 (Salmon, Moraes,
 * Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011), once in C for the
 * float64 references and the tests, once as tile IR for the templates (attention.h, "Dropout").
 *
 * The mask is a pure function of (seed, offset, batch, head, query row, key column): the forward
 * and the backward regenerate it from the same arguments, and nothing is stored.  The pair
 * (b, h) of a query head is one index bh = b * heads + h; the generator's counter is
 *     ctr = (col, row, lo32(offset + bh), hi32(offset + bh))      key = (lo32(seed), hi32(seed))
 * (offset + bh is a 64-bit sum that wraps), and the element is kept when the block's first word
 * x0 >= threshold = floor(p * 2^32), as unsigned 32-bit integers: the keep probability is
 * 1 - threshold / 2^32, within 2^-32 of 1 - p.  A call uses the counters offset .. offset +
 * B * H - 1 of the upper half, so successive calls that advance offset by B * H (or more) never
 * reuse a mask.
 *
 * The IR needs no op of its own: a 32 x 32 -> 64-bit product is an i64 multiply of the operands
 * zero-extended (an i32 sign-extended by `cast`, then `and` 0xffffffff), its high word a shift by
 * 32 and a truncating cast, and unsigned comparison a signed one of both sides with the sign bit
 * flipped.  LLVM turns these into mul.hi.u32 / mul.wide.u32 (NVPTX) and v_mul_hi_u32 (AMDGPU).
 * The interpreter's integer arithmetic wraps as the hardware's, so the interpreter, the host and
 * the GPUs compute the same bits as kn_philox4x32_10, which the tests check against Random123's
 * published known-answer vectors.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "attn_internal.h"

/* the round multipliers and the key schedule's Weyl increments (the paper's constants) */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
enum { PHILOX_ROUNDS = 10 };

void kn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    if (r) k0 += PHILOX_W0, k1 += PHILOX_W1;  /* the key is bumped before rounds 2..10 */
    const uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

uint32_t kn_dropout_threshold(float p) {
  if (!(p > 0)) return 0;
  double t = floor((double)p * 4294967296.0);
  return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

double kn_dropout_scale(float p) { return 1.0 / (1.0 - (double)p); }

bool kn_dropout_keep(uint64_t seed, uint64_t offset, int64_t bh, int32_t row, int32_t col,
                     uint32_t threshold) {
  const uint64_t o = offset + (uint64_t)bh;
  const uint32_t ctr[4] = {(uint32_t)col, (uint32_t)row, (uint32_t)o, (uint32_t)(o >> 32)};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t x[4];
  kn_philox4x32_10(ctr, key, x);
  return x[0] >= threshold;
}

/* ---- the same in tile IR -------------------------------------------------------------------- */

static kn_value *nm(kn_builder *b, kn_value *v, const char *name) {
  kn_value_set_name(b->m, v, name);
  return v;
}

static kn_value *op2(kn_builder *b, kn_opcode opc, kn_value *x, kn_value *y, const char *name) {
  return nm(b, kn_b_binary(b, opc, x, y), name);
}

/* the (hi, lo) words of the 64-bit product m * x, x an i32 tile read as unsigned */
static void mulhilo(kn_builder *b, kn_value *m64, kn_value *mask32, kn_value *c32, kn_value *x,
                    kn_value **hi, kn_value **lo, const char *name) {
  char n[48];
  snprintf(n, sizeof n, "%s_u64", name);
  kn_value *x64 = op2(b, KN_OP_AND, nm(b, kn_b_cast(b, x, KN_I64), "philox_x64"), mask32, n);
  snprintf(n, sizeof n, "%s_prod", name);
  kn_value *prod = op2(b, KN_OP_MUL, x64, m64, n);
  snprintf(n, sizeof n, "%s_hi", name);
  *hi = nm(b, kn_b_cast(b, op2(b, KN_OP_SHR, prod, c32, "philox_prod_shr"), KN_I32), n);
  snprintf(n, sizeof n, "%s_lo", name);
  *lo = nm(b, kn_b_cast(b, prod, KN_I32), n);
}

kn_value *kn_philox_tile(kn_builder *b, kn_value *seed, kn_value *offset, kn_value *bh,
                         kn_value *rows, kn_value *cols) {
  const kn_type t32 = rows->type, s64 = kn_ty_scalar(KN_I64), s32 = kn_ty_scalar(KN_I32);
  kn_type t64 = t32;
  t64.elem = KN_I64;
  const int rank = t32.rank;
  const int32_t *shape = t32.shape;
  /* the counter's upper half and the key, per program (scalars) */
  kn_value *c32s = nm(b, kn_b_const_i(b, s64, 32), "philox_c32");
  kn_value *o = op2(b, KN_OP_ADD, offset, nm(b, kn_b_cast(b, bh, KN_I64), "philox_bh64"),
                    "philox_ctr_hi64");
  kn_value *c2s = nm(b, kn_b_cast(b, o, KN_I32), "philox_c2");
  kn_value *c3s = nm(b, kn_b_cast(b, op2(b, KN_OP_SHR, o, c32s, "philox_o_shr"), KN_I32),
                     "philox_c3");
  kn_value *k0 = nm(b, kn_b_cast(b, seed, KN_I32), "philox_k0");
  kn_value *k1 = nm(b, kn_b_cast(b, op2(b, KN_OP_SHR, seed, c32s, "philox_seed_shr"), KN_I32),
                    "philox_k1");
  kn_value *w0 = nm(b, kn_b_const_i(b, s32, (int32_t)PHILOX_W0), "philox_w0");
  kn_value *w1 = nm(b, kn_b_const_i(b, s32, (int32_t)PHILOX_W1), "philox_w1");
  /* tile constants */
  kn_value *m0 = nm(b, kn_b_const_i(b, t64, (int64_t)PHILOX_M0), "philox_m0");
  kn_value *m1 = nm(b, kn_b_const_i(b, t64, (int64_t)PHILOX_M1), "philox_m1");
  kn_value *mask32 = nm(b, kn_b_const_i(b, t64, 0xffffffffll), "philox_mask32");
  kn_value *c32 = nm(b, kn_b_const_i(b, t64, 32), "philox_c32_t");
  kn_value *c0 = cols, *c1 = rows;
  kn_value *c2 = nm(b, kn_b_splat(b, c2s, rank, shape), "philox_c2_t");
  kn_value *c3 = nm(b, kn_b_splat(b, c3s, rank, shape), "philox_c3_t");
  for (int r = 0; r < PHILOX_ROUNDS; r++) {
    if (r) {
      k0 = op2(b, KN_OP_ADD, k0, w0, "philox_k0");
      k1 = op2(b, KN_OP_ADD, k1, w1, "philox_k1");
    }
    kn_value *hi0, *lo0, *hi1, *lo1;
    mulhilo(b, m0, mask32, c32, c0, &hi0, &lo0, "philox_p0");
    mulhilo(b, m1, mask32, c32, c2, &hi1, &lo1, "philox_p1");
    kn_value *k0t = nm(b, kn_b_splat(b, k0, rank, shape), "philox_k0_t");
    kn_value *k1t = nm(b, kn_b_splat(b, k1, rank, shape), "philox_k1_t");
    c0 = op2(b, KN_OP_XOR, op2(b, KN_OP_XOR, hi1, c1, "philox_x0"), k0t, "philox_c0");
    c1 = lo1;
    c2 = op2(b, KN_OP_XOR, op2(b, KN_OP_XOR, hi0, c3, "philox_x2"), k1t, "philox_c2");
    c3 = lo0;
  }
  return nm(b, c0, "philox_x0");
}

kn_value *kn_dropout_keep_tile(kn_builder *b, kn_value *seed, kn_value *offset, kn_value *bh,
                               kn_value *rows, kn_value *cols, float p) {
  const kn_type t32 = rows->type;
  kn_value *x0 = kn_philox_tile(b, seed, offset, bh, rows, cols);
  /* x0 >= threshold as unsigned: both sides with the sign bit flipped, compared signed */
  const uint32_t thr = kn_dropout_threshold(p);
  kn_value *sign = nm(b, kn_b_const_i(b, t32, INT32_MIN), "philox_sign");
  kn_value *xs = op2(b, KN_OP_XOR, x0, sign, "philox_x0_signed");
  kn_value *ts = nm(b, kn_b_const_i(b, t32, (int32_t)(thr ^ 0x80000000u)), "dropout_threshold");
  return nm(b, kn_b_cmp(b, KN_PRED_GE, xs, ts), "dropout_keep");
}
