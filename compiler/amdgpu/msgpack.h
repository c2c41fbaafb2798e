/* msgpack.h — a small bounds-checked MessagePack reader, enough for AMDGPU metadata notes.
 *
 * Written for kiln rather than taken from a library: Debian 12's libmsgpack-dev (msgpack-c
 * 4.0.0) would be a new build and CI dependency for ~150 lines of reading, and its unpacker
 * allocates a whole object tree, where a cursor over the note's bytes suffices.  The reader
 * never reads outside [p, end): a truncated or corrupt buffer sets an error and every later read
 * fails too.  Internal to compiler/amdgpu.
 */
#ifndef KILN_AMDGPU_MSGPACK_H
#define KILN_AMDGPU_MSGPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kn_mp_type {
  KN_MP_NIL,
  KN_MP_BOOL,    /* .u is 0 or 1 */
  KN_MP_UINT,    /* .u */
  KN_MP_INT,     /* .i (negative values only; non-negative ints are KN_MP_UINT) */
  KN_MP_FLOAT,   /* .f */
  KN_MP_STR,     /* .str, .len (not NUL-terminated) */
  KN_MP_BIN,     /* .str, .len */
  KN_MP_ARRAY,   /* .len elements follow */
  KN_MP_MAP,     /* .len key/value pairs follow */
  KN_MP_EXT,     /* .str, .len (the type byte is dropped) */
} kn_mp_type;

typedef struct kn_mp_obj {
  kn_mp_type type;
  uint64_t u;
  int64_t i;
  double f;
  const char *str;
  uint32_t len;
} kn_mp_obj;

typedef struct kn_mp {
  const uint8_t *p, *end;
  bool error;
} kn_mp;

void kn_mp_init(kn_mp *r, const void *data, size_t n);
/* Reads one value's header (and a string's bytes).  For arrays and maps the caller then reads
 * .len elements (2 * .len values for a map).  false (and r->error) at the end or on corruption. */
bool kn_mp_read(kn_mp *r, kn_mp_obj *o);
/* Skips one whole value, nested arrays and maps included (iteratively: no recursion depth). */
bool kn_mp_skip(kn_mp *r);
/* o is a string equal to s */
bool kn_mp_str_is(const kn_mp_obj *o, const char *s);
/* o as a non-negative integer that fits in an int32; false otherwise */
bool kn_mp_as_int(const kn_mp_obj *o, int32_t *v);

#endif
