/* kbuild.h — helpers shared by the op-level unit tests: a small random number generator and
 * shorthands for building one-kernel modules with the builder API.  Header-only (static
 * functions), included by one test file each.
 */
#ifndef KILN_TEST_KBUILD_H
#define KILN_TEST_KBUILD_H

#include <stdint.h>

#include "ir.h"

/* xorshift64*: tests seed it (and print the seed) so a failure can be replayed */
static uint64_t rng_state = 0x243F6A8885A308D3ull;
static inline uint64_t rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
static inline double urand(double lo, double hi) {
  return lo + (hi - lo) * (double)(rnd() >> 11) * 0x1p-53;
}

/* a module with one kernel @k(params...) and a builder at the end of its body */
typedef struct kb {
  kn_module *m;
  kn_func *k;
  kn_builder b;
} kb;

static inline kb kb_new(int np, const kn_type *pt) {
  kb r;
  r.m = kn_module_new(NULL);
  r.k = kn_func_new(r.m, "k", true, np, pt, NULL, 0, NULL);
  r.b = kn_builder_at_end(r.m, r.k->body);
  return r;
}
static inline kn_value *P(kb *k, int i) { return kn_func_param(k->k, i); }
static inline kn_value *ci32(kn_builder *b, int64_t v) {
  return kn_b_const_i(b, kn_ty_scalar(KN_I32), v);
}
static inline kn_value *ci64(kn_builder *b, int64_t v) {
  return kn_b_const_i(b, kn_ty_scalar(KN_I64), v);
}

/* tile<n x t> from p[0..n) */
static inline kn_value *load1(kn_builder *b, kn_value *p, kn_scalar t, int n) {
  kn_value *z = ci32(b, 0), *one = ci32(b, 1);
  return kn_b_load(b, kn_ty_tile1(t, n), p, &z, &one, NULL, NULL, NULL);
}
static inline void store1(kn_builder *b, kn_value *v, kn_value *p) {
  kn_value *z = ci32(b, 0), *one = ci32(b, 1);
  kn_b_store(b, v, p, &z, &one, NULL, NULL);
}
/* tile<m x n x t> from a row-major matrix with leading dimension ld (0: dense, ld = n) */
static inline kn_value *load2(kn_builder *b, kn_value *p, kn_scalar t, int m, int n, int ld) {
  kn_value *off[2] = {ci32(b, 0), ci32(b, 0)}, *str[2] = {ci32(b, ld ? ld : n), ci32(b, 1)};
  return kn_b_load(b, kn_ty_tile2(t, m, n), p, off, str, NULL, NULL, NULL);
}
static inline void store2(kn_builder *b, kn_value *v, kn_value *p, int ld) {
  kn_value *off[2] = {ci32(b, 0), ci32(b, 0)};
  kn_value *str[2] = {ci32(b, ld ? ld : v->type.shape[1]), ci32(b, 1)};
  kn_b_store(b, v, p, off, str, NULL, NULL);
}

#endif
