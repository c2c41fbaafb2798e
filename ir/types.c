/* types.c — scalar and value types, the opcode table, predicate names.
 *
 * The opcode table is generated from ops.def (KN_MATH(exp, LIBM, LLVM) becomes {"exp",
 * KN_VIA_LIBM, KN_VIA_LLVM}); names are looked up linearly (a few dozen entries, only the parser
 * asks).
 */
#include <stdio.h>
#include <string.h>

#include "ir.h"

const kn_opinfo kn_opinfo_table[KN_OP_COUNT] = {
#define KN_NOMATH {NULL, KN_VIA_NONE, KN_VIA_NONE}
#define KN_MATH(fn, host, gpu) {#fn, KN_VIA_##host, KN_VIA_##gpu}
#define KN_OP(e, name, nopnd, nres, flags, syntax, math, exact) \
  [KN_OP_##e] = {name, nopnd, nres, flags, syntax, math, exact},
#include "ops.def"
#undef KN_OP
#undef KN_MATH
#undef KN_NOMATH
};

static bool name_is(const char *want, const char *s, size_t n) {
  return strlen(want) == n && memcmp(want, s, n) == 0;
}

int kn_opcode_from_name(const char *s, size_t n) {
  /* (the first character before the length: the parser asks this for every op it reads) */
  for (int i = 0; i < KN_OP_COUNT && n; i++)
    if (kn_opinfo_table[i].name[0] == s[0] && name_is(kn_opinfo_table[i].name, s, n)) return i;
  return -1;
}

static const char *const scalar_names[KN_SCALAR_COUNT] = {
    [KN_I1] = "i1",           [KN_I32] = "i32",           [KN_I64] = "i64",
    [KN_F16] = "f16",         [KN_BF16] = "bf16",         [KN_F32] = "f32",
    [KN_F8E4M3] = "f8e4m3",   [KN_F8E5M2] = "f8e5m2",     [KN_F8E4M3FNUZ] = "f8e4m3fnuz",
    [KN_F8E5M2FNUZ] = "f8e5m2fnuz",
};

const char *kn_scalar_name(kn_scalar s) { return s < KN_SCALAR_COUNT ? scalar_names[s] : "?"; }

int kn_scalar_from_name(const char *s, size_t n) {
  for (int i = 0; i < KN_SCALAR_COUNT; i++)
    if (name_is(scalar_names[i], s, n)) return i;
  return -1;
}

int kn_scalar_bits(kn_scalar s) {
  switch (s) {
  case KN_I1: return 1;
  case KN_I32: case KN_F32: return 32;
  case KN_I64: return 64;
  case KN_F16: case KN_BF16: return 16;
  default: return 8;
  }
}

size_t kn_scalar_size(kn_scalar s) { return s == KN_I1 ? 1 : (size_t)kn_scalar_bits(s) / 8; }
bool kn_scalar_is_int(kn_scalar s) { return s == KN_I1 || s == KN_I32 || s == KN_I64; }
bool kn_scalar_is_float(kn_scalar s) { return s < KN_SCALAR_COUNT && !kn_scalar_is_int(s); }

static const char *const pred_names[KN_PRED_COUNT] = {"eq", "ne", "lt", "le", "gt", "ge"};
const char *kn_pred_name(kn_pred p) { return p < KN_PRED_COUNT ? pred_names[p] : "?"; }
int kn_pred_from_name(const char *s, size_t n) {
  for (int i = 0; i < KN_PRED_COUNT; i++)
    if (name_is(pred_names[i], s, n)) return i;
  return -1;
}

kn_type kn_ty_scalar(kn_scalar s) { return (kn_type){.kind = KN_TY_SCALAR, .elem = (uint8_t)s}; }
kn_type kn_ty_ptr(kn_scalar s) { return (kn_type){.kind = KN_TY_PTR, .elem = (uint8_t)s}; }
kn_type kn_ty_tile(kn_scalar s, int rank, const int32_t *shape) {
  KN_ASSERT(rank >= 1 && rank <= KN_MAX_RANK);
  kn_type t = {.kind = KN_TY_TILE, .elem = (uint8_t)s, .rank = (uint8_t)rank};
  for (int i = 0; i < rank; i++) t.shape[i] = shape[i];
  return t;
}
kn_type kn_ty_tile1(kn_scalar s, int n) { return kn_ty_tile(s, 1, (int32_t[]){n}); }
kn_type kn_ty_tile2(kn_scalar s, int m, int n) { return kn_ty_tile(s, 2, (int32_t[]){m, n}); }
kn_type kn_ty_with_elem(kn_type t, kn_scalar s) {
  t.elem = (uint8_t)s;
  return t;
}

bool kn_ty_eq(kn_type a, kn_type b) {
  if (a.kind != b.kind || a.elem != b.elem) return false;
  if (a.kind != KN_TY_TILE) return true;
  if (a.rank != b.rank) return false;
  for (int i = 0; i < a.rank; i++)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

int64_t kn_ty_numel(kn_type t) {
  if (t.kind != KN_TY_TILE) return 1;
  int64_t n = 1;
  for (int i = 0; i < t.rank; i++) n *= t.shape[i];
  return n;
}

int kn_ty_format(kn_type t, char *buf, size_t n) {
  const char *e = kn_scalar_name((kn_scalar)t.elem);
  switch (t.kind) {
  case KN_TY_SCALAR: return snprintf(buf, n, "%s", e);
  case KN_TY_PTR: return snprintf(buf, n, "ptr<%s>", e);
  case KN_TY_TILE:
    if (t.rank == 1) return snprintf(buf, n, "tile<%dx%s>", t.shape[0], e);
    return snprintf(buf, n, "tile<%dx%dx%s>", t.shape[0], t.shape[1], e);
  default: return snprintf(buf, n, "void");
  }
}
