/* msgpack.c — the bounds-checked MessagePack reader of msgpack.h (see there for why kiln has
 * its own).  Follows the MessagePack specification's type table; all multi-byte fields are
 * big-endian.  Every length is checked against the bytes left before it is used, so a count
 * or length field taken from a corrupt buffer can neither read out of bounds nor make a skip
 * loop run longer than the buffer.
 */
#include <string.h>

#include "msgpack.h"

void kn_mp_init(kn_mp *r, const void *data, size_t n) {
  r->p = data;
  r->end = r->p + n;
  r->error = false;
}

static bool fail(kn_mp *r) {
  r->error = true;
  return false;
}

static size_t left(const kn_mp *r) { return (size_t)(r->end - r->p); }

/* reads an n-byte big-endian unsigned field */
static bool be(kn_mp *r, int n, uint64_t *v) {
  if (left(r) < (size_t)n) return fail(r);
  uint64_t x = 0;
  for (int k = 0; k < n; k++) x = x << 8 | r->p[k];
  r->p += n;
  *v = x;
  return true;
}

/* takes len bytes as the payload of a str/bin/ext */
static bool payload(kn_mp *r, kn_mp_obj *o, uint64_t len) {
  if (len > left(r) || len > UINT32_MAX) return fail(r);
  o->str = (const char *)r->p;
  o->len = (uint32_t)len;
  r->p += len;
  return true;
}

bool kn_mp_read(kn_mp *r, kn_mp_obj *o) {
  memset(o, 0, sizeof *o);
  if (r->error || left(r) == 0) return fail(r);
  uint8_t b = *r->p++;
  uint64_t v;
  if (b <= 0x7f) { o->type = KN_MP_UINT; o->u = b; return true; }
  if (b >= 0xe0) { o->type = KN_MP_INT; o->i = (int8_t)b; return true; }
  if (b >= 0x80 && b <= 0x8f) { o->type = KN_MP_MAP; o->len = b & 0x0f; return true; }
  if (b >= 0x90 && b <= 0x9f) { o->type = KN_MP_ARRAY; o->len = b & 0x0f; return true; }
  if (b >= 0xa0 && b <= 0xbf) { o->type = KN_MP_STR; return payload(r, o, b & 0x1f); }
  switch (b) {
  case 0xc0: o->type = KN_MP_NIL; return true;
  case 0xc2: case 0xc3: o->type = KN_MP_BOOL; o->u = b == 0xc3; return true;
  case 0xc4: case 0xc5: case 0xc6:  /* bin 8/16/32 */
    o->type = KN_MP_BIN;
    return be(r, 1 << (b - 0xc4), &v) && payload(r, o, v);
  case 0xc7: case 0xc8: case 0xc9:  /* ext 8/16/32: length, type byte, data */
    o->type = KN_MP_EXT;
    return be(r, 1 << (b - 0xc7), &v) && be(r, 1, &o->u) && payload(r, o, v);
  case 0xca: {
    uint32_t bits;
    float f;
    if (!be(r, 4, &v)) return false;
    bits = (uint32_t)v;
    memcpy(&f, &bits, 4);
    o->type = KN_MP_FLOAT;
    o->f = f;
    return true;
  }
  case 0xcb:
    if (!be(r, 8, &v)) return false;
    memcpy(&o->f, &v, 8);
    o->type = KN_MP_FLOAT;
    return true;
  case 0xcc: case 0xcd: case 0xce: case 0xcf:  /* uint 8/16/32/64 */
    o->type = KN_MP_UINT;
    return be(r, 1 << (b - 0xcc), &o->u);
  case 0xd0: case 0xd1: case 0xd2: case 0xd3: {  /* int 8/16/32/64 */
    int n = 1 << (b - 0xd0);
    if (!be(r, n, &v)) return false;
    int64_t x = n == 8 ? (int64_t)v : (int64_t)(v ^ (1ull << (8 * n - 1))) - (1ll << (8 * n - 1));
    if (x >= 0) { o->type = KN_MP_UINT; o->u = (uint64_t)x; }
    else { o->type = KN_MP_INT; o->i = x; }
    return true;
  }
  case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:  /* fixext 1/2/4/8/16 */
    o->type = KN_MP_EXT;
    return be(r, 1, &o->u) && payload(r, o, 1u << (b - 0xd4));
  case 0xd9: case 0xda: case 0xdb:  /* str 8/16/32 */
    o->type = KN_MP_STR;
    return be(r, 1 << (b - 0xd9), &v) && payload(r, o, v);
  case 0xdc: case 0xdd:  /* array 16/32 */
    o->type = KN_MP_ARRAY;
    if (!be(r, b == 0xdc ? 2 : 4, &v)) return false;
    o->len = (uint32_t)v;
    return true;
  case 0xde: case 0xdf:  /* map 16/32 */
    o->type = KN_MP_MAP;
    if (!be(r, b == 0xde ? 2 : 4, &v)) return false;
    o->len = (uint32_t)v;
    return true;
  default:  /* 0xc1 is never used */
    return fail(r);
  }
}

bool kn_mp_skip(kn_mp *r) {
  /* values still to skip; every value takes at least one byte, so a pending count larger than
   * the bytes left means the buffer is corrupt (this also bounds the loop) */
  uint64_t pending = 1;
  kn_mp_obj o;
  while (pending > 0) {
    if (!kn_mp_read(r, &o)) return false;
    pending--;
    if (o.type == KN_MP_ARRAY) pending += o.len;
    else if (o.type == KN_MP_MAP) pending += 2ull * o.len;
    if (pending > left(r)) return fail(r);
  }
  return true;
}

bool kn_mp_str_is(const kn_mp_obj *o, const char *s) {
  size_t n = strlen(s);
  return o->type == KN_MP_STR && o->len == n && !memcmp(o->str, s, n);
}

bool kn_mp_as_int(const kn_mp_obj *o, int32_t *v) {
  if (o->type != KN_MP_UINT || o->u > INT32_MAX) return false;
  *v = (int32_t)o->u;
  return true;
}
