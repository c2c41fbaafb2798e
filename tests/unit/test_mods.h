/* test_mods.h — modifiers of the caller's (docs/variants.md) that the API tests prepare, as the
 * IR text kiln_attn_desc.mods holds (string literals, so a test can put two together). */
#ifndef KILN_TEST_MODS_H
#define KILN_TEST_MODS_H

/* a chunked causal mask: a query sees every key of its chunk of %chunk positions and of the
 * earlier chunks; with its block predicate, so the kernel skips whole key blocks */
#define TEST_CHUNK_MASK_MOD                                                                       \
  "func @mask_mod(%b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, %chunk: i32) -> (i1) {\n"          \
  "  %qc = div %q_idx, %chunk : i32\n"                                                            \
  "  %kc = div %kv_idx, %chunk : i32\n"                                                           \
  "  %live = cmp le %kc, %qc : i1\n"                                                              \
  "  return %live\n"                                                                              \
  "}\n"                                                                                           \
  "func @block_mask(%b: i32, %h: i32, %q_lo: i32, %q_hi: i32, %kv_lo: i32, %kv_hi: i32, "         \
  "%chunk: i32) -> (i1) {\n"                                                                      \
  "  %c1 = const 1 : i32\n"                                                                       \
  "  %q_end = sub %q_hi, %c1 : i32\n"                                                             \
  "  %qc = div %q_end, %chunk : i32\n"                                                            \
  "  %kc = div %kv_lo, %chunk : i32\n"                                                            \
  "  %live = cmp le %kc, %qc : i1\n"                                                              \
  "  return %live\n"                                                                              \
  "}\n"

/* a per-head temperature: the score times %temp[h] (a tensor parameter) */
#define TEST_HEAD_TEMP_SCORE_MOD                                                                  \
  "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, "                    \
  "%temp: ptr<f32>) -> (f32) {\n"                                                                 \
  "  %c1 = const 1 : i64\n"                                                                       \
  "  %h64 = cast %h : i64\n"                                                                      \
  "  %t = load %temp[%h64] strides [%c1] : f32\n"                                                 \
  "  %out = mul %score, %t : f32\n"                                                               \
  "  return %out\n"                                                                               \
  "}\n"

#endif
