/* attn_decode.h — the split-KV decode template: a few query rows against a long KV cache.
 *
 * Decode (docs/serving.md) is two kernels.  attn_decode, the split kernel, packs the query rows
 * of one GQA group into the tile's rows, so one program reads each K and V block once for every
 * query head that shares it: packed row r of kv head hk is query head hk * kv_group + r / seqlen_q,
 * query position r % seqlen_q, and rows = kv_group x seqlen_q, padded to BLOCK_M.  The KV range
 * is cut into num_splits pieces of split_len keys (a multiple of BLOCK_N); program (i, b * HK +
 * hk) with split s = i % num_splits and row block i / num_splits writes its rows' normalised f32
 * output and log2-sum-exp (in exp2 units, -inf for a row that saw no key of its piece) to the
 * workspace.  attn_decode_combine merges the pieces of each query head exactly, by log-sum-exp
 * rescaling, and writes o (and lse) in the caller's layout.
 *
 * The split kernel takes the forward template's parameters and its variant's (kn_attn_signature,
 * attention.h; o, lse and their strides are unused there) and then four of its own:
 *   ws_o     ptr<f32>  (B * HK, num_splits, ws_rows, DP)   normalised partial outputs
 *   ws_lse   ptr<f32>  (B * HK, num_splits, ws_rows)       log2 of each row's sum of 2^s
 *   num_splits, split_len   i32
 * ws_rows = kv_group * seqlen_q (the live packed rows) and DP = kn_attn_head_pad(head_dim).
 * Grid: (cdiv(kv_group * seqlen_q, BLOCK_M) * num_splits, batch * kv_heads, 1).
 *
 * The combine kernel's parameters:
 *   ws_o, ws_lse   ptr<f32> as above;   o ptr<dtype> (B, H, Nq, D);   lse ptr<f32> (B, H, Nq)
 *   seqlen_q, heads, kv_group, num_splits, ws_rows   i32
 *   o_sb, o_sh, o_sm, lse_sb, lse_sh   i64
 * Grid: (1, batch * heads, 1); one program holds a head's seqlen_q <= 16 rows.
 *
 * Every variant of the forward template applies except those with a block predicate (the
 * document mask, a user @block_mask: they bound a program's query rows, which here belong to
 * several heads) and the varlen layout; kn_attn_decode_check says which.  Score and mask
 * modifiers see the packed row's own head (a tile) and query position.
 *
 * Paged (layout KN_ATTN_PAGED): the split kernel's signature has the paged forward's six
 * parameters after the 24 (block_table, cache_seqlens, page_size, num_pages, seqlen_new,
 * block_table_sb; attention.h), seqlen_k is the table's capacity and k_sb / v_sb the pools' page
 * strides.  Each program reads its sequence's keys through the table (attn_paged.c's helpers,
 * the forward's own), its length cache_seqlens[b] + seqlen_new clamped into the capacity is its
 * seqlen_k everywhere, and piece s covers its blocks [s * P, (s + 1) * P) with P =
 * cdiv(cdiv(len, BLOCK_N), num_splits) (split_len, the capacity's, is ignored); pieces past the
 * length write lse -inf.  The combine kernel is the dense one.
 *
 * fp8 inputs (q_dtype / kv_dtype, attention.h): the split kernel's signature has the forward's
 * seven descale parameters after the layout's, its q and K / V tiles are read in their fp8
 * format and converted to dtype, and the descales of (b, hk) fold into the score scale and the
 * output as in the forward; the combine kernel is unchanged (f32 in, dtype out).
 */
#ifndef KILN_ATTN_DECODE_H
#define KILN_ATTN_DECODE_H

#include "attention.h"

/* the most query rows per sequence the decode kernels take (speculative decoding's drafts) */
enum { KN_DECODE_MAX_Q = 16, KN_DECODE_NPARAMS = 4, KN_DECODE_COMBINE_NPARAMS = 14,
       KN_DECODE_MAX_SPLITS = 256, KN_DECODE_MIN_BLOCKS = 2,
       KN_DECODE_CHUNK = 16 /* the pages kernel's keys per table entry read */ };

/* 0 when decode serves descriptor d with config c on arch (NULL: the host), else -1 with the
 * reason: the forward template's check (kn_attn_check_on: the two dots have its shapes), a
 * dense or paged layout, no block predicate, block_m >= 16 */
int kn_attn_decode_check(const kn_arch *arch, const kn_attn_desc *d, const kn_attn_config *c,
                         kn_diag *diag);
/* the decode tiling of d on arch: block_m 16 (a GQA group of one or a few query rows fills the
 * smallest matrix-instruction tile), the warps that tile allows, block_n 64 (32 above head dim 128;
 * not measured on a GPU yet: kiln_decode_bench --sweep is the table to choose it from).  Paged
 * on a GPU: fewer gathered elements per thread (16 rows a warp, 2 or 4 warps, block_n 16 or 32;
 * docs/serving.md has the spill table) */
kn_attn_config kn_attn_decode_default_config(const kn_arch *arch, const kn_attn_desc *d);

/* How a paged split kernel reads its KV blocks (a dense one ignores it).  The page size is a
 * launch argument, so one kernel can hold both loops and branch once per program on page_size %
 * BLOCK_N (KN_DECODE_READ_ANY, kernel "attn_decode"); but a kernel's registers are those of its
 * worst loop, and the gather loop's row offsets make a tiling that suits block loads spill.  The
 * runtime therefore builds one kernel per read mode, each at its own tiling
 * (kn_attn_decode_read_config), and picks one at launch by the page size: "attn_decode_in_page"
 * takes only pages that are multiples of its BLOCK_N (every block in one page: block loads, the
 * dense loop's speed), "attn_decode_pages" pages that are multiples of 16 (each block read as
 * BLOCK_N / 16 chunks of 16 keys, one table entry and one block load of K and V per chunk, the
 * chunks' pages read a block early; the dense kernel's tiling), "attn_decode_gather" any page
 * size (row gathers). */
typedef enum kn_decode_read {
  KN_DECODE_READ_ANY,      /* dense, or paged with both loops (the versioned kernel) */
  KN_DECODE_READ_IN_PAGE,  /* paged, page_size % BLOCK_N == 0 only (the launch's duty) */
  KN_DECODE_READ_GATHER,   /* paged, any page size */
  KN_DECODE_READ_PAGES,    /* paged, page_size % 16 == 0 only (the launch's duty) */
} kn_decode_read;
/* the split kernel's function name for a read mode ("attn_decode", "attn_decode_in_page",
 * "attn_decode_gather", "attn_decode_pages"); kn_attn_decode_read_of is the inverse (-1: not a
 * split kernel name) */
const char *kn_attn_decode_symbol(kn_decode_read read);
int kn_attn_decode_read_of(const char *symbol);
/* the tiling of read mode `read` of paged descriptor d on arch: in-page and pages the dense
 * kernel's (kn_attn_decode_default_config of d as a dense layout), gather and any the paged
 * default */
kn_attn_config kn_attn_decode_read_config(const kn_arch *arch, const kn_attn_desc *d,
                                          kn_decode_read read);
/* the read mode a launch of page size page_size takes, given the BLOCK_N of the in-page and
 * pages kernels: in-page where the page is a multiple of its BLOCK_N, pages where it is a
 * multiple of 16 (and the pages kernel's BLOCK_N one of 16), else gather */
kn_decode_read kn_attn_decode_read_for(int page_size, int in_page_block_n, int pages_block_n);

/* the split kernel of read mode `read` (kn_attn_decode_symbol names it) into m (the modifier
 * functions parsed unless m has a source); NULL with *diag when unsupported (a read mode other
 * than ANY on a dense descriptor) */
kn_func *kn_attn_decode_build(kn_module *m, const kn_attn_desc *d, const kn_attn_config *c,
                              kn_decode_read read, kn_diag *diag);
/* kernel "attn_decode_combine" into m */
kn_func *kn_attn_decode_combine_build(kn_module *m, const kn_attn_desc *d, kn_diag *diag);

/* the kernel signature of the split kernel (which 0: the forward's and its variant's
 * parameters, then ws_o, ws_lse, num_splits, split_len) or of the combine kernel (which 1); -1
 * with *diag as kn_attn_signature */
int kn_attn_decode_signature(const kn_attn_desc *d, int which, kn_attn_sig *sig, kn_diag *diag);

/* the workspace of a decode launch */
typedef struct kn_decode_plan {
  int splits;      /* KV pieces (1..KN_DECODE_MAX_SPLITS) */
  int split_len;   /* keys per piece, a multiple of block_n */
  int ws_rows;     /* packed rows per kv head: kv_group x seqlen_q */
  int row_blocks;  /* cdiv(ws_rows, block_m) */
  size_t ws_o_bytes, ws_lse_bytes;
} kn_decode_plan;

/* How many pieces: FlashAttention's num_splits_heuristic made for kiln's one-warp programs.
 * With P = batch * kv_heads * row_blocks programs per piece and `cus` compute units, splitting
 * pays while the device is short of programs: the smallest count whose programs fill `waves`
 * programs per compute unit (kiln's decode programs are small: several run on one unit at a
 * time), at most one piece per KN_DECODE_MIN_BLOCKS KV blocks and KN_DECODE_MAX_SPLITS;
 * `want` > 0 forces a count (clamped to one piece per block and KN_DECODE_MAX_SPLITS).  Then split_len = cdiv(blocks, splits) blocks, and splits is
 * recomputed so that no piece is empty. */
kn_decode_plan kn_attn_decode_plan(const kn_attn_desc *d, const kn_attn_config *c,
                                   const kn_attn_problem *p, int cus, int want);

/* The arguments of both kernels for contiguous buffers (the caller may replace strides after):
 * split[sig->n + KN_DECODE_NPARAMS] (kn_attn_fill_args's, then ws_o, ws_lse, num_splits,
 * split_len), combine[KN_DECODE_COMBINE_NPARAMS], and both grids.  -1 with *diag as
 * kn_attn_fill_args, or when seqlen_q is above KN_DECODE_MAX_Q. */
int kn_attn_decode_fill_args(const kn_attn_desc *d, const kn_attn_sig *sig,
                             const kn_attn_config *c, const kn_attn_problem *p,
                             const kn_decode_plan *plan, void *q, void *k, void *v, void *o,
                             float *lse, float *ws_o, float *ws_lse, const kn_attn_vargs *va,
                             kn_argval *split, int split_grid[3], kn_argval *combine,
                             int combine_grid[3], kn_diag *diag);

/* the indices of the combine kernel's stride parameters (its o_sb and lse_sb) */
enum { KN_DECODE_C_O_SB = 9, KN_DECODE_C_LSE_SB = 12 };

#endif
