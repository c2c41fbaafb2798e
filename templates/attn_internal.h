/* attn_internal.h — what the attention template, its variants and its reference share inside
 * templates/ (not an interface of the library).
 *
 * A variant is applied as a list of modifier calls (docs/variants.md): the library's functions
 * the descriptor asks for and the user's @score_mod / @mask_mod / @block_mask, in the one order
 * kn_attn_plan_make decides.  The kernel builder (attn_fwd.c) and the float64 reference
 * (attn_ref.c) both walk that list, so the kernel and its oracle cannot apply different
 * modifiers or bind their parameters differently.
 */
#ifndef KILN_ATTN_INTERNAL_H
#define KILN_ATTN_INTERNAL_H

#include "attention.h"

/* one file of the modifier library (templates/mods/<name>.tile), embedded by the build */
typedef struct kn_attn_lib_file {
  const char *name, *text;
} kn_attn_lib_file;
extern const kn_attn_lib_file kn_attn_lib[];
extern const int kn_attn_nlib;

typedef enum kn_attn_mod_kind { KN_MOD_SCORE, KN_MOD_MASK, KN_MOD_BLOCK } kn_attn_mod_kind;

/* the fixed parameters of each kind: score (score f32, b, h, q_idx, kv_idx), mask (b, h, q_idx,
 * kv_idx), block (b, h, q_lo, q_hi, kv_lo, kv_hi) */
enum { KN_MOD_FIXED_SCORE = 5, KN_MOD_FIXED_MASK = 4, KN_MOD_FIXED_BLOCK = 6 };

typedef struct kn_attn_mod {
  kn_attn_mod_kind kind;
  kn_func *f;
  int arg[KN_ATTN_MAX_PARAMS];  /* the kernel parameter (index in the signature) of each of f's
                                   parameters after the fixed ones */
} kn_attn_mod;

enum { KN_ATTN_MAX_MODS = 16 };

typedef struct kn_attn_plan {
  kn_attn_sig sig;
  int nmods;
  kn_attn_mod mod[KN_ATTN_MAX_MODS];  /* score mods, then masks, then block predicates, each in
                                         the order of application */
} kn_attn_plan;

/* the text of every modifier descriptor d uses: the user's (first, so its line numbers are those
 * of the user's file), then the library files it needs, DTYPE replaced by d's dtype.  Arena-free:
 * the caller frees it.  NULL when d needs none. */
char *kn_attn_mods_text(const kn_attn_desc *d);

/* parses kn_attn_mods_text(d) into m (a module with no functions yet; diagnostics name
 * d->mods_file, else "<mods>"); 0 when there is nothing to parse */
int kn_attn_mods_parse(kn_module *m, const kn_attn_desc *d, kn_diag *diag);

/* The plan of d over module m, which holds the modifier functions (kn_attn_mods_parse, or an IR
 * file read back): the signature and the calls.  A user function is applied when m defines it.
 * -1 with *diag at the function or parameter when a modifier has the wrong signature. */
int kn_attn_plan_make(kn_module *m, const kn_attn_desc *d, kn_attn_plan *p, kn_diag *diag);

/* Fills out[KN_ATTN_NPARAMS .. sig->n) from va: the built-in parameters by field, the user's by
 * name.  regions (room for sig->n, or NULL) gets the memory of each tensor parameter.  Returns
 * the number of regions written, or -1 with *diag naming a parameter without a value. */
int kn_attn_fill_vargs(const kn_attn_desc *d, const kn_attn_sig *sig, const kn_attn_problem *p,
                       const kn_attn_vargs *va, kn_argval *out, kn_region *regions,
                       kn_diag *diag);

/* The modifiers of a float64 reference (attn_ref.c, attn_bwd_ref.c): d's plan over mods (NULL:
 * d's own texts, parsed into a module the struct owns), the kernel's arguments for problem p and
 * the variant's values va, and each modifier prepared for the interpreter in float64 mode.
 * open: 0, or -1 with *diag (close it either way). */
typedef struct kn_attn_ref_mods {
  kn_attn_plan plan;
  kn_interp_fn *fn[KN_ATTN_MAX_MODS];
  kn_argval args[KN_ATTN_MAX_PARAMS];   /* the kernel's arguments (kn_attn_fill_args) */
  kn_module *own;
} kn_attn_ref_mods;
int kn_attn_ref_mods_open(kn_attn_ref_mods *r, const kn_attn_desc *d, kn_module *mods,
                          const kn_attn_problem *p, const kn_attn_vargs *va, kn_diag *diag);
void kn_attn_ref_mods_close(kn_attn_ref_mods *r);
/* modifier i of the plan: its fixed arguments, then the bound kernel arguments */
/* a varlen problem's cu_seqlens for the references: non-decreasing from 0 or more, within
 * total_q / total_k, no sequence longer than the max lengths; 0 or -1 with *diag */
int kn_attn_seqlens_check(const kn_attn_problem *p, kn_diag *diag);
int kn_attn_ref_mod_call(kn_attn_ref_mods *r, int i, const kn_argval *fixed, int nfixed,
                         kn_argval *res, kn_diag *diag);

/* the names of the template's own parameters, in order (KN_ATTN_NPARAMS) */
extern const char *const kn_attn_param_names[];
/* the indices of the template's seqlen_q and seqlen_k parameters (attn_fwd.c checks them) */
enum { KN_ATTN_P_SEQLEN_Q = 6, KN_ATTN_P_SEQLEN_K = 7 };

/* the names of a varlen kernel's four parameters after them (attention.h): the two prefix sums
 * and the two max lengths */
enum { KN_ATTN_CU_NPARAMS = 4 };
extern const char *const kn_attn_cu_names[KN_ATTN_CU_NPARAMS];
/* A varlen program's sequence b64 (i64) from the parameters P (indexed as the forward's
 * signature sig): the first token of its queries and of its keys (*q_start, *k_start, i64: what
 * the batch strides multiply), and its lengths (*len_q, *len_k, i32), every value clamped into
 * the packed buffers (seqlen_q / seqlen_k are total_q / total_k) and the max lengths, so no
 * cu_seqlens value makes a program leave them.  The one varlen setup of every template (the
 * forward, the three backward kernels). */
void kn_attn_varlen_open(kn_builder *b, const kn_attn_sig *sig, kn_value *const *P,
                         kn_value *b64, kn_value **q_start, kn_value **k_start,
                         kn_value **len_q, kn_value **len_k);

/* the names of an fp8 kernel's parameters after the layout's (attention.h) */
enum { KN_ATTN_FP8_NPARAMS = 7 };
extern const char *const kn_attn_fp8_names[KN_ATTN_FP8_NPARAMS];
/* an fp8 kernel's descales of (batch b64, kv head hk64), both i64, from its parameters (found by
 * name in sig, their values P[]): *qk = q_descale * k_descale (the factor of the score scale) and
 * *v = v_descale (the output's), f32 scalars, each 1 where its tensor is NULL (a count of 0).
 * The one dequantisation every fp8 template folds (the forward, the split-KV decode kernel). */
void kn_attn_fp8_scales(kn_builder *b, const kn_attn_sig *sig, kn_value *const *P,
                        kn_value *b64, kn_value *hk64, kn_value **qk, kn_value **v);

/* the names of a dropout kernel's two i64 parameters (attention.h, "Dropout") */
enum { KN_ATTN_DROPOUT_NPARAMS = 2 };
extern const char *const kn_attn_dropout_names[KN_ATTN_DROPOUT_NPARAMS];

/* The dropout mask in tile IR (attn_dropout.c): an i1 tile of rows' shape, true where element
 * (rows, cols) (i32 tiles of one shape: query row and key column indices) of query head bh
 * (i32 scalar, b * heads + h) is kept for probability p, from the i64 scalars seed and offset;
 * the same bits as kn_dropout_keep. */
/* the first word of the Philox block of each element of that counter (the mask's draw) */
kn_value *kn_philox_tile(kn_builder *b, kn_value *seed, kn_value *offset, kn_value *bh,
                         kn_value *rows, kn_value *cols);
kn_value *kn_dropout_keep_tile(kn_builder *b, kn_value *seed, kn_value *offset, kn_value *bh,
                               kn_value *rows, kn_value *cols, float p);

/* ---- paged KV addressing (attn_paged.c; docs/serving.md) ----
 *
 * IR helpers any template may call with its builder (the attention forward and the split-KV
 * decode kernel do): they read keys through a block table, clamp whatever the table and lengths
 * hold so no access leaves the pool, and name the values they build. */

/* the names of a paged kernel's parameters after the template's 24 (attention.h) */
enum { KN_ATTN_PAGED_NPARAMS = 6 };
extern const char *const kn_attn_paged_names[KN_ATTN_PAGED_NPARAMS];

/* what the helpers read: the sequence's row of the block table (ptr<i32>), the page size and
 * the number of pages (i32 scalars), the sequence's key count (i32, from kn_paged_len) */
typedef struct kn_paged_kv {
  kn_value *table, *page_size, *num_pages, *len;
} kn_paged_kv;

/* the keys of one block: page number and slot in the page ((n) i64 tiles) and live ((n) i1:
 * below the sequence's length; the others hold page 0, slot 0 there) */
typedef struct kn_paged_rows {
  kn_value *page, *slot, *live;
} kn_paged_rows;

/* sequence b64's (i64) key count: cache_seqlens[b] + added (i32: the rows appended before the
 * launch) clamped into [0, cap] (cap = max_pages * page_size, the most its table row
 * addresses), 0 when num_pages <= 0 */
kn_value *kn_paged_len(kn_builder *b, kn_value *cache_seqlens, kn_value *b64, kn_value *added,
                       kn_value *cap, kn_value *num_pages);

/* what a program of sequence b64 (i64) reads through its table, from its kernel's paged
 * parameters (found by name in sig, their values P[]): the table's row b, the page size, the
 * pool's pages and the sequence's clamped key count (kn_paged_len of cache_seqlens[b] +
 * seqlen_new, cap = the table's capacity, the kernel's seqlen_k).  The one setup every paged
 * template shares (the forward and the split-KV decode kernel). */
kn_paged_kv kn_paged_open(kn_builder *b, const kn_attn_sig *sig, kn_value *const *P,
                          kn_value *b64, kn_value *cap);

/* the pages and slots of keys n0 .. n0 + n - 1 (n0 >= 0, n <= 1024): one gather of the table's
 * live entries, each clamped into [0, num_pages).  Each key's entry and slot come from a division
 * by the page size per key, or with `recip` from one division per block and a multiply and
 * shift per key by the page size's reciprocal (exact for pages of 1..KN_ATTN_MAX_PAGE): fewer
 * instructions (the decode gather loop on sm_90a: 1246 -> 1037 per block of 32 keys), but more
 * values live, which made ptxas spill the paged forward at sm_90a D 64 softcap + causal 128x64
 * with 8 warps (20 bytes), so the forward keeps the division */
void kn_paged_block(kn_builder *b, const kn_paged_kv *pg, kn_value *n0, int n, bool recip,
                    kn_paged_rows *out);

/* the table index and slot (i32 scalars) of key n0 >= 0 of the sequence: one division by the
 * page size (either output may be NULL).  A block of keys n0 .. that lies in one page (n0 a
 * multiple of the block, page_size of it) starts at page * page_stride + slot * row_stride and
 * is a plain block load (the decode kernel's fast path, which calls this once per program and
 * then steps index and slot by the block: no division in its loop). */
void kn_paged_key(kn_builder *b, const kn_paged_kv *pg, kn_value *n0, kn_value **index,
                  kn_value **slot);
/* the page (an i64 scalar) of table entry `index` (i32, one of the sequence's entries): one
 * scalar load of the table, the page clamped into [0, num_pages) */
kn_value *kn_paged_page(kn_builder *b, const kn_paged_kv *pg, kn_value *index);
/* the page size's reciprocal m = 2^20 / page_size + 1 (an i32 scalar): t / page_size =
 * kn_paged_entries(t, m) = (t * m) >> 20 exactly for 0 <= t < 2^12 and pages of
 * 1..KN_ATTN_MAX_PAGE (kn_paged_block says why), with no division */
kn_value *kn_paged_recip(kn_builder *b, const kn_paged_kv *pg);
kn_value *kn_paged_entries(kn_builder *b, kn_value *t, kn_value *recip);

/* the block's tile of a pool at base (the kv head's start): (n, dp) rows, or (dp, n) when
 * transposed (K^T), element (j, c) at page[j] * page_stride + slot[j] * row_stride + c (i64
 * strides in elements); dead keys and head columns c >= d read as 0.  Named `name`. */
kn_value *kn_paged_gather(kn_builder *b, kn_scalar dt, kn_value *base, const kn_paged_rows *r,
                          kn_value *page_stride, kn_value *row_stride, int d, int dp,
                          bool transposed, const char *name);

#endif
