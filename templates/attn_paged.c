/* attn_paged.c — paged KV addressing: the IR a kernel uses to read keys and values through a
 * block table, and the host-side append of new rows into the pages (docs/serving.md).
 *
 * A paged KV cache keeps every sequence's keys in fixed-size pages of one pool, k and v each
 * (num_pages, page_size, kv_heads, D) in FlashAttention's layout (any strides: a page stride, a
 * row stride inside the page, a head stride), and a block table (batch, max_pages) of int32 page
 * numbers: key j of sequence b is row j % page_size of page block_table[b, j / page_size].  The
 * page size is a launch argument of any value 1..256, so a kernel's block of keys may span
 * several pages (page_size < block) or a page several blocks, and nothing about it is compiled
 * in: the rows of a block are addressed one by one, a `gather` whose offsets are per-row (the
 * row's page times the page stride plus its slot times the row stride) plus the head column.
 *
 * The helpers build that IR with a plain kn_builder and name their values, so any template can
 * call them (the attention forward and the split-KV decode kernel do): kn_paged_open sets a
 * program up from its kernel's paged parameters (its sequence's table row, the page size and
 * pool, the clamped length), kn_paged_len clamps a sequence's cache length into what its table
 * can address, kn_paged_block finds the page and slot of each key of a block (a division per
 * key, or one per block and a reciprocal), kn_paged_gather reads the block's (keys, D) or (D, keys) tile, and
 * kn_paged_key / kn_paged_page give one key's table index and slot and one entry's page (the
 * decode kernel's in-page loop, which steps index and slot itself).
 * Safety does not depend on the caller's table: the kernel clamps every page number into
 * [0, num_pages) and every length into [0, max_pages * page_size] (the table's row is never read
 * past max_pages), and a pool of no pages gives every sequence length 0, so no table or length
 * makes a kernel read outside the pool or the table (test_paged runs hostile tables on the
 * interpreter, which checks every access).  Bad entries give wrong rows; the API refuses them
 * before launch where it can read them (the host).
 *
 * kn_attn_paged_append is the append of flash_attn_with_kvcache: new rows (batch, seqlen_new,
 * kv_heads, D) written at positions cache_seqlens[b]... of each sequence, through the table,
 * before the attention launch (host memory; the API's host path and the tests call it).  It
 * checks every position and page first and writes nothing when one is bad.  On a device whose
 * memory the host does not write (CUDA), kn_paged_append_build's kernel does the same copy,
 * clamping instead of checking: one program per new row and kv head.
 */
#include <stdio.h>
#include <string.h>

#include "attn_internal.h"

static kn_value *nm(kn_builder *b, kn_value *v, const char *name) {
  kn_value_set_name(b->m, v, name);
  return v;
}

static kn_value *bin(kn_builder *b, kn_opcode opc, kn_value *x, kn_value *y, const char *name) {
  return nm(b, kn_b_binary(b, opc, x, y), name);
}

static kn_value *splat1(kn_builder *b, kn_value *x, int n, const char *name) {
  int32_t shape[1] = {n};
  return nm(b, kn_b_splat(b, x, 1, shape), name);
}

/* (n) -> (rows, n) when axis is 0 (x along the columns), (n, cols) when 1 */
static kn_value *spread(kn_builder *b, kn_value *x, int axis, int other, const char *name) {
  int n = x->type.shape[0];
  int32_t shape[2] = {axis == 0 ? other : n, axis == 0 ? n : other};
  kn_value *e = kn_b_expand_dims(b, x, axis);
  return nm(b, kn_b_broadcast(b, e, 2, shape), name);
}

kn_value *kn_paged_len(kn_builder *b, kn_value *cache_seqlens, kn_value *b64, kn_value *added,
                       kn_value *cap, kn_value *num_pages) {
  kn_type i32 = kn_ty_scalar(KN_I32);
  kn_value *one = nm(b, kn_b_const_i(b, kn_ty_scalar(KN_I64), 1), "c1_pg");
  kn_value *z = nm(b, kn_b_const_i(b, i32, 0), "c0_pg");
  kn_value *raw = nm(b, kn_b_load(b, i32, cache_seqlens, &b64, &one, NULL, NULL, NULL),
                     "cache_len_raw");
  /* in i64, so no length and count can wrap around */
  kn_value *sum = bin(b, KN_OP_ADD, nm(b, kn_b_cast(b, raw, KN_I64), "cache_len64"),
                      nm(b, kn_b_cast(b, added, KN_I64), "added64"), "cache_len_sum");
  kn_value *cap64 = nm(b, kn_b_cast(b, cap, KN_I64), "cap64");
  kn_value *z64 = nm(b, kn_b_const_i(b, kn_ty_scalar(KN_I64), 0), "c0_pg64");
  kn_value *len = nm(b, kn_b_cast(b, bin(b, KN_OP_MIN, bin(b, KN_OP_MAX, sum, z64, "cache_len_pos"),
                                         cap64, "cache_len_cap64"), KN_I32), "cache_len_cap");
  /* a pool without pages has nothing to read: every sequence is empty */
  kn_value *any = nm(b, kn_b_cmp(b, KN_PRED_GT, num_pages, z), "pool_any");
  return nm(b, kn_b_select(b, any, len, z), "cache_len");
}

kn_paged_kv kn_paged_open(kn_builder *b, const kn_attn_sig *sig, kn_value *const *P,
                          kn_value *b64, kn_value *cap) {
  kn_value *q[KN_ATTN_PAGED_NPARAMS] = {0};
  for (int i = 0; i < sig->n; i++)
    for (int j = 0; j < KN_ATTN_PAGED_NPARAMS; j++)
      if (!strcmp(sig->name[i], kn_attn_paged_names[j])) q[j] = P[i];
  for (int j = 0; j < KN_ATTN_PAGED_NPARAMS; j++)
    KN_ASSERT(q[j] && "a paged kernel's parameter is missing from the signature");
  /* kn_attn_paged_names' order: block_table, cache_seqlens, page_size, num_pages, seqlen_new,
   * block_table_sb */
  kn_value *toff = bin(b, KN_OP_MUL, b64, q[5], "table_off");
  return (kn_paged_kv){.table = nm(b, kn_b_ptradd(b, q[0], toff), "table_row"),
                       .page_size = q[2],
                       .num_pages = q[3],
                       .len = kn_paged_len(b, q[1], b64, q[4], cap, q[3])};
}

void kn_paged_block(kn_builder *b, const kn_paged_kv *pg, kn_value *n0, int n, bool recip,
                    kn_paged_rows *out) {
  kn_type i32 = kn_ty_scalar(KN_I32);
  kn_value *n0_v = splat1(b, n0, n, "pg_n0");
  kn_value *range = nm(b, kn_b_arange(b, 0, n), "pg_range");
  kn_value *cols = bin(b, KN_OP_ADD, range, n0_v, "pg_cols");
  out->live = nm(b, kn_b_cmp(b, KN_PRED_LT, cols, splat1(b, pg->len, n, "pg_len_v")), "pg_live");
  kn_value *ps = splat1(b, pg->page_size, n, "pg_size_v");
  kn_value *idx, *slot;  /* idx < max_pages where live */
  if (!recip) {
    idx = bin(b, KN_OP_DIV, cols, ps, "pg_index");
    slot = bin(b, KN_OP_SUB, cols, bin(b, KN_OP_MUL, idx, ps, "pg_first"), "pg_slot");
  } else {
    /* No division per key: key n0's index i0 and slot s0 (one scalar division), then key n0 +
     * j is t = s0 + j keys past the start of entry i0, and t / page_size = (t * m) >> 20 with
     * m = 2^20 / page_size + 1: writing 2^20 = a * page_size + r, t * m / 2^20 = t / page_size
     * + t * (page_size - r) / (page_size * 2^20), so the floor is exact while t * (page_size -
     * r) < 2^20, which holds for t < 2^12 and page sizes 1..KN_ATTN_MAX_PAGE = 2^8 (the API
     * refuses others); here t < page_size + n <= 2^8 + 2^10, and t * m < 2^31 */
    KN_ASSERT(n <= 1024 && "kn_paged_block: a block of at most 1024 keys");
    _Static_assert(KN_ATTN_MAX_PAGE <= 256, "kn_paged_block's reciprocal needs pages of <= 2^8");
    kn_value *i0, *s0;
    kn_paged_key(b, pg, n0, &i0, &s0);
    kn_value *mag = kn_paged_recip(b, pg);
    kn_value *t = bin(b, KN_OP_ADD, range, splat1(b, s0, n, "pg_s0"), "pg_from_entry");
    kn_value *q = bin(b, KN_OP_SHR,
                      bin(b, KN_OP_MUL, t, splat1(b, mag, n, "pg_recip_v"), "pg_tm"),
                      splat1(b, nm(b, kn_b_const_i(b, i32, 20), "c20"), n, "c20_v"),
                      "pg_entries");
    idx = bin(b, KN_OP_ADD, splat1(b, i0, n, "pg_i0"), q, "pg_index");
    slot = bin(b, KN_OP_SUB, t, bin(b, KN_OP_MUL, q, ps, "pg_first"), "pg_slot");
    /* slot is in [0, page_size): saying so (a max with 0) lets the code generators widen it to
     * i64 without its sign */
    slot = bin(b, KN_OP_MAX, slot, nm(b, kn_b_const_i(b, kn_ty_tile1(KN_I32, n), 0), "pg_zero_s"),
               "pg_slot_nn");
  }
  kn_value *idx64 = nm(b, kn_b_cast(b, idx, KN_I64), "pg_index64");
  /* dead keys read no table entry (their page reads as 0) */
  kn_value *page = nm(b, kn_b_gather(b, kn_ty_tile1(KN_I32, n), pg->table, idx64, out->live, NULL),
                      "pg_page_raw");
  kn_value *last = bin(b, KN_OP_SUB, pg->num_pages, nm(b, kn_b_const_i(b, i32, 1), "c1_pgl"),
                       "pg_last");
  kn_value *zero = nm(b, kn_b_const_i(b, kn_ty_tile1(KN_I32, n), 0), "pg_zero");
  page = bin(b, KN_OP_MAX, bin(b, KN_OP_MIN, page, splat1(b, last, n, "pg_last_v"), "pg_page_hi"),
             zero, "pg_page");
  out->page = nm(b, kn_b_cast(b, page, KN_I64), "pg_page64");
  out->slot = nm(b, kn_b_cast(b, slot, KN_I64), "pg_slot64");
}

void kn_paged_key(kn_builder *b, const kn_paged_kv *pg, kn_value *n0, kn_value **index,
                  kn_value **slot) {
  kn_value *idx = bin(b, KN_OP_DIV, n0, pg->page_size, "pk_index");
  if (slot)
    *slot = bin(b, KN_OP_SUB, n0, bin(b, KN_OP_MUL, idx, pg->page_size, "pk_first"), "pk_slot");
  if (index) *index = idx;
}

kn_value *kn_paged_recip(kn_builder *b, const kn_paged_kv *pg) {
  kn_type i32 = kn_ty_scalar(KN_I32);
  return bin(b, KN_OP_ADD,
             bin(b, KN_OP_DIV, nm(b, kn_b_const_i(b, i32, 1 << 20), "c_2p20"), pg->page_size,
                 "pg_recip0"),
             nm(b, kn_b_const_i(b, i32, 1), "c1_pgm"), "pg_recip");
}

kn_value *kn_paged_entries(kn_builder *b, kn_value *t, kn_value *recip) {
  kn_value *c20 = nm(b, kn_b_const_i(b, kn_ty_scalar(KN_I32), 20), "c20_pk");
  return bin(b, KN_OP_SHR, bin(b, KN_OP_MUL, t, recip, "pk_tm"), c20, "pk_entries");
}

kn_value *kn_paged_page(kn_builder *b, const kn_paged_kv *pg, kn_value *index) {
  kn_type i32 = kn_ty_scalar(KN_I32);
  kn_value *idx64 = nm(b, kn_b_cast(b, index, KN_I64), "pk_index64");
  kn_value *one = nm(b, kn_b_const_i(b, kn_ty_scalar(KN_I64), 1), "c1_pk");
  kn_value *pgv = nm(b, kn_b_load(b, i32, pg->table, &idx64, &one, NULL, NULL, NULL),
                     "pk_page_raw");
  kn_value *last = bin(b, KN_OP_SUB, pg->num_pages, nm(b, kn_b_const_i(b, i32, 1), "c1_pkl"),
                       "pk_last");
  pgv = bin(b, KN_OP_MAX, bin(b, KN_OP_MIN, pgv, last, "pk_page_hi"),
            nm(b, kn_b_const_i(b, i32, 0), "c0_pk"), "pk_page");
  return nm(b, kn_b_cast(b, pgv, KN_I64), "pk_page64");
}

kn_value *kn_paged_gather(kn_builder *b, kn_scalar dt, kn_value *base, const kn_paged_rows *r,
                          kn_value *page_stride, kn_value *row_stride, int d, int dp,
                          bool transposed, const char *name) {
  const int n = r->page->type.shape[0];
  const int ax = transposed ? 0 : 1;  /* the axis the head dimension runs along */
  char buf[48];
  snprintf(buf, sizeof buf, "%s_rows", name);
  kn_value *rows = bin(b, KN_OP_ADD,
                       bin(b, KN_OP_MUL, r->page, splat1(b, page_stride, n, "pg_ps_v"), "pg_poff"),
                       bin(b, KN_OP_MUL, r->slot, splat1(b, row_stride, n, "pg_rs_v"), "pg_soff"),
                       buf);
  /* Every row starts at a multiple of the vector a GPU kernel reads the head in (16 bytes, or
   * less where the head dim is not a multiple of that): kiln_forward checks the pools' strides
   * and base against it on GPUs (check_alignment).  Stated as a hint, so the row gather below is
   * read in vectors (compiler/gpu/gather.c); the interpreter and the host ignore it. */
  int vec = 16 / (int)kn_scalar_size(dt);
  while (vec > 1 && d % vec) vec /= 2;
  if (vec > 1) rows = nm(b, kn_b_hint(b, KN_OP_MULTIPLE_OF, rows, vec), "pg_rows_aligned");
  kn_value *col = nm(b, kn_b_arange(b, 0, dp), "pg_head");
  kn_value *col64 = nm(b, kn_b_cast(b, col, KN_I64), "pg_head64");
  snprintf(buf, sizeof buf, "%s_offs", name);
  kn_value *offs = bin(b, KN_OP_ADD, spread(b, rows, ax, dp, "pg_rows_s"),
                       spread(b, col64, 1 - ax, n, "pg_head_s"), buf);
  kn_value *mask = spread(b, r->live, ax, dp, "pg_live_s");
  if (d < dp) {  /* the padding columns of the head read as 0 */
    kn_value *dv = splat1(b, nm(b, kn_b_const_i(b, kn_ty_scalar(KN_I32), d), "pg_d"), dp,
                          "pg_d_v");
    kn_value *in_d = nm(b, kn_b_cmp(b, KN_PRED_LT, col, dv), "pg_in_d");
    mask = bin(b, KN_OP_AND, mask, spread(b, in_d, 1 - ax, n, "pg_in_d_s"), "pg_mask");
  }
  kn_type t = transposed ? kn_ty_tile2(dt, dp, n) : kn_ty_tile2(dt, n, dp);
  return nm(b, kn_b_gather(b, t, base, offs, mask, NULL), name);
}

/* ---- the host-side append ---------------------------------------------------------------------- */

int kn_attn_paged_append(const kn_paged_append *a, kn_diag *diag) {
  kn_loc nowhere = {0};
  const int64_t cap = (int64_t)a->max_pages * a->page_size;
  for (int b = 0; b < a->batch; b++) {
    int64_t at = a->cache_seqlens[b];
    if (at < 0 || at + a->seqlen_new > cap)
      return kn_error(diag, NULL, nowhere, "paged append: sequence %d holds %lld keys; %d more "
                      "do not fit its %d pages of %d (max_pages * page_size = %lld)", b,
                      (long long)at, a->seqlen_new, a->max_pages, a->page_size, (long long)cap);
    for (int64_t j = at; j < at + a->seqlen_new; j++) {
      int32_t page = a->block_table[(int64_t)b * a->table_stride + j / a->page_size];
      if (page < 0 || page >= a->num_pages)
        return kn_error(diag, NULL, nowhere, "paged append: block_table[%d, %lld] = %d is not a "
                        "page of the pool (0..%d)", b, (long long)(j / a->page_size), page,
                        a->num_pages - 1);
    }
  }
  for (int w = 0; w < 2; w++) {
    char *pool = w ? a->v_pool : a->k_pool;
    const char *src = w ? a->v_new : a->k_new;
    const int64_t *ps = w ? a->v_pool_stride : a->k_pool_stride;
    const int64_t *ss = w ? a->v_new_stride : a->k_new_stride;
    if (!pool || !src) continue;
    for (int b = 0; b < a->batch; b++)
      for (int i = 0; i < a->seqlen_new; i++) {
        int64_t j = (int64_t)a->cache_seqlens[b] + i;
        int64_t page = a->block_table[(int64_t)b * a->table_stride + j / a->page_size];
        for (int h = 0; h < a->kv_heads; h++) {
          int64_t to = page * ps[0] + (j % a->page_size) * ps[2] + h * ps[1];
          int64_t from = b * ss[0] + h * ss[1] + i * ss[2];
          memcpy(pool + to * a->elem_size, src + from * a->elem_size,
                 (size_t)a->head_dim * a->elem_size);
        }
      }
  }
  return 0;
}

/* ---- the append kernel (CUDA: flash_attn_with_kvcache's append on the device) -------------------- */

const char *const kn_paged_append_names[KN_PAGED_APPEND_NPARAMS] = {
    "k_pool", "v_pool", "k_new", "v_new", "block_table", "cache_seqlens", "page_size",
    "num_pages", "max_pages", "kv_heads", "block_table_sb", "k_psb", "k_psh", "k_psn", "v_psb",
    "v_psh", "v_psn", "k_nsb", "k_nsh", "k_nsn", "v_nsb", "v_nsh", "v_nsn"};

kn_type kn_paged_append_param_type(kn_scalar dt, int i) {
  if (i < 4) return kn_ty_ptr(dt);
  if (i < 6) return kn_ty_ptr(KN_I32);
  if (i < 10) return kn_ty_scalar(KN_I32);
  return kn_ty_scalar(KN_I64);
}

/* One program per new row and (batch, kv head): grid (seqlen_new, batch * kv_heads, 1).  The row
 * goes to position cache_seqlens[b] + i of its sequence; a position outside [0, max_pages *
 * page_size) stores nothing, and the page is clamped into the pool, so no table or length
 * writes outside it.  Rows are D elements, one tile of the padded head dim. */
kn_func *kn_paged_append_build(kn_module *m, kn_scalar dt, int head_dim, kn_diag *diag) {
  if (head_dim < 1 || head_dim > KN_ATTN_MAX_HEAD_DIM) {
    kn_error(diag, NULL, (kn_loc){0}, "paged append: head dim %d is not in 1..%d", head_dim,
             KN_ATTN_MAX_HEAD_DIM);
    return NULL;
  }
  kn_type types[KN_PAGED_APPEND_NPARAMS];
  for (int i = 0; i < KN_PAGED_APPEND_NPARAMS; i++) types[i] = kn_paged_append_param_type(dt, i);
  kn_func *f = kn_func_new(m, "kv_append", true, KN_PAGED_APPEND_NPARAMS, types,
                           kn_paged_append_names, 0, NULL);
  kn_func_set_meta(f, "HEAD_DIM", head_dim);
  kn_func_set_meta(f, "WARPS", 1);
  kn_builder B = kn_builder_at_end(m, f->body), *b = &B;
  kn_value *P[KN_PAGED_APPEND_NPARAMS];
  for (int i = 0; i < KN_PAGED_APPEND_NPARAMS; i++) P[i] = kn_func_param(f, i);
  const kn_type i32 = kn_ty_scalar(KN_I32), i64 = kn_ty_scalar(KN_I64);
  const int DP = kn_attn_head_pad(head_dim);
  kn_value *row = nm(b, kn_b_program_id(b, 0), "row");
  kn_value *bh = nm(b, kn_b_program_id(b, 1), "bh");
  kn_value *bi = bin(b, KN_OP_DIV, bh, P[9], "b");
  kn_value *hk = bin(b, KN_OP_REM, bh, P[9], "hk");
  kn_value *b64 = nm(b, kn_b_cast(b, bi, KN_I64), "b64");
  kn_value *hk64 = nm(b, kn_b_cast(b, hk, KN_I64), "hk64");
  kn_value *row64 = nm(b, kn_b_cast(b, row, KN_I64), "row64");
  kn_value *one = nm(b, kn_b_const_i(b, i64, 1), "c1_64");
  kn_value *z32 = nm(b, kn_b_const_i(b, i32, 0), "c0");
  kn_value *z64 = nm(b, kn_b_const_i(b, i64, 0), "c0_64");
  kn_value *len = nm(b, kn_b_load(b, i32, P[5], &b64, &one, NULL, NULL, NULL), "cache_len");
  kn_value *pos = bin(b, KN_OP_ADD, nm(b, kn_b_cast(b, len, KN_I64), "cache_len64"), row64, "pos");
  kn_value *ps64 = nm(b, kn_b_cast(b, P[6], KN_I64), "page_size64");
  kn_value *cap = bin(b, KN_OP_MUL, nm(b, kn_b_cast(b, P[8], KN_I64), "max_pages64"), ps64, "cap");
  kn_value *ok = bin(b, KN_OP_AND, nm(b, kn_b_cmp(b, KN_PRED_GE, pos, z64), "pos_ge0"),
                     nm(b, kn_b_cmp(b, KN_PRED_LT, pos, cap), "pos_lt_cap"), "pos_ok");
  ok = bin(b, KN_OP_AND, ok, nm(b, kn_b_cmp(b, KN_PRED_GT, P[7], z32), "pool_any"), "ok");
  kn_value *posc = nm(b, kn_b_select(b, ok, pos, z64), "pos_ok64");
  kn_value *pidx = bin(b, KN_OP_DIV, posc, ps64, "page_index");
  kn_value *slot = bin(b, KN_OP_SUB, posc, bin(b, KN_OP_MUL, pidx, ps64, "page_first"), "slot");
  kn_value *toff = bin(b, KN_OP_ADD, bin(b, KN_OP_MUL, b64, P[10], "table_boff"), pidx, "table_off");
  kn_value *page = nm(b, kn_b_load(b, i32, P[4], &toff, &one, NULL, NULL, NULL), "page_raw");
  kn_value *last = bin(b, KN_OP_SUB, P[7], nm(b, kn_b_const_i(b, i32, 1), "c1"), "page_last");
  page = bin(b, KN_OP_MAX, bin(b, KN_OP_MIN, page, last, "page_hi"), z32, "page");
  kn_value *page64 = nm(b, kn_b_cast(b, page, KN_I64), "page64");
  kn_value *cd = nm(b, kn_b_const_i(b, i32, head_dim), "c_head_dim");
  kn_value *bound = nm(b, kn_b_select(b, ok, cd, z32), "store_bound");
  for (int w = 0; w < 2; w++) {
    const int ps = 11 + 3 * w, ns = 17 + 3 * w;
    const char *sfx = w ? "v" : "k";
    char name[32];
    /* the source row: b * nsb + hk * nsh + row * nsn */
    kn_value *src = bin(b, KN_OP_ADD, bin(b, KN_OP_MUL, b64, P[ns], "src_boff"),
                        bin(b, KN_OP_MUL, hk64, P[ns + 1], "src_hoff"), "src_bh");
    src = bin(b, KN_OP_ADD, src, bin(b, KN_OP_MUL, row64, P[ns + 2], "src_roff"), "src_off");
    snprintf(name, sizeof name, "%s_row", sfx);
    kn_value *base = nm(b, kn_b_ptradd(b, P[2 + w], src), "src_row");
    kn_value *vals = nm(b, kn_b_load(b, kn_ty_tile1(dt, DP), base, &z32, &one, &cd, NULL, NULL),
                        name);
    /* the destination: page * psb + hk * psh + slot * psn */
    kn_value *dst = bin(b, KN_OP_ADD, bin(b, KN_OP_MUL, page64, P[ps], "dst_poff"),
                        bin(b, KN_OP_MUL, hk64, P[ps + 1], "dst_hoff"), "dst_ph");
    dst = bin(b, KN_OP_ADD, dst, bin(b, KN_OP_MUL, slot, P[ps + 2], "dst_soff"), "dst_off");
    kn_value *to = nm(b, kn_b_ptradd(b, P[w], dst), "dst_row");
    kn_b_store(b, vals, to, &z32, &one, &bound, NULL);
  }
  kn_b_return(b, 0, NULL);
  return f;
}
