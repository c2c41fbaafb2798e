/* attention.h — the attention forward template and its float64 reference.
 *
 * kn_attn_fwd_build() writes the FlashAttention-2 style forward kernel into a module from a
 * descriptor (what to compute) and a config (how to tile it).  One program instance computes
 * BLOCK_M query rows of one (batch, head): grid = (cdiv(seqlen_q, BLOCK_M), batch * heads, 1).
 *
 * Causal masking is aligned bottom-right, as FlashAttention 2 does when seqlen_q != seqlen_k:
 * query row i may see key j iff j <= i + (seqlen_k - seqlen_q).  A query row that sees no key
 * (possible when seqlen_q > seqlen_k) outputs zeros and lse = -inf.  The KV loop of a causal
 * kernel stops at the last key any live row of its block may see, so it never visits a fully
 * masked KV block.
 *
 * Kernel parameters, in order (strides in elements; the head dimension is contiguous):
 *   q, k, v, o        ptr<dtype>   (B, H, Nq, D), (B, HK, Nk, D), (B, HK, Nk, D), (B, H, Nq, D)
 *   lse               ptr<f32>     (B, H, Nq) natural-log sum of exp of the scaled scores;
 *                                  ignored (may be null) unless desc.has_lse
 *   sm_scale          f32          softmax scale
 *   seqlen_q, seqlen_k, heads, kv_group   i32   (kv_group = H / HK; head h reads kv head h / kv_group)
 *   q_sb, q_sh, q_sm, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, o_sb, o_sh, o_sm, lse_sb, lse_sh   i64
 * That is 4 + 1 + 1 + 4 + 14 = 24 parameters (the lse row stride is 1: lse rows are contiguous).
 *
 * Varlen (layout KN_ATTN_VARLEN, docs/serving.md): the batch's sequences are packed along the
 * token axis, q and o (total_q, H, D), k and v (total_k, HK, D), lse (H, total_q), and four more
 * parameters follow the 24: cu_seqlens_q and cu_seqlens_k (ptr<i32>, batch + 1 prefix sums each:
 * sequence b owns tokens [cu[b], cu[b+1])), then max_seqlen_q and max_seqlen_k (i32: the
 * problem's seqlen_q / seqlen_k, the longest sequence's lengths).  Then seqlen_q and seqlen_k
 * are total_q and total_k (the kernel clamps every sequence's token range into them, and its
 * lengths into the max lengths, so no cu_seqlens value can make it read or write outside the
 * buffers, bias and document tensors of max-length rows included), the batch strides (q_sb,
 * k_sb, v_sb, o_sb, lse_sb) are the strides of one token (q_sb = q_sm for a packed buffer; lse_sb = 1), and each program takes
 * its sequence's own lengths: the masks, the loop bounds and the modifiers see the sequence's
 * seqlen_q and seqlen_k, and its indices count from the sequence's first token.  The grid is
 * (cdiv(max_seqlen_q, BLOCK_M), batch * heads, 1); a program whose rows start past its
 * sequence's end runs no key block and stores nothing.
 *
 * Paged (layout KN_ATTN_PAGED, docs/serving.md, templates/attn_paged.c): q, o and lse are dense
 * (B, H, Nq, D) as above, k and v are page pools (num_pages, page_size, HK, D) addressed through
 * a block table, and six parameters follow the 24: block_table (ptr<i32>, (B, max_pages)),
 * cache_seqlens (ptr<i32>, (B)), page_size (i32, 1..256), num_pages (i32), seqlen_new (i32: the
 * rows appended before this launch, flash_attn_with_kvcache's k_new) and block_table_sb (i64,
 * the table's row stride).  Then seqlen_k is the table's capacity max_pages * page_size,
 * k_sb / v_sb are the pools' page strides, k_sh / v_sh their head strides and k_sn / v_sn the
 * row strides inside a page; each program's keys are its sequence's cache_seqlens[b] +
 * seqlen_new (clamped into [0, seqlen_k]), and the masks, loop bounds and modifiers see that length as seqlen_k
 * (causal is bottom-right aligned to it: the queries are the last seqlen_q keys, as in
 * flash_attn_with_kvcache).  Every page number is clamped into the pool, so no block table makes
 * the kernel read outside it.
 *
 * fp8 inputs (q_dtype and / or kv_dtype an fp8 format, docs/serving.md): q, or k and v, are
 * ptr<fp8>, and seven parameters follow the layout's: q_descale, k_descale, v_descale
 * (ptr<f32>, (B, HK) each), descale_sb (i64, their batch stride) and q_descale_n, k_descale_n,
 * v_descale_n (i64: the elements each holds; 0 reads none and means 1).  The tiles are loaded
 * in fp8 and converted exactly to dtype (every fp8 value is an f16 and a bf16); the descales
 * of (b, hk) fold into the score scale (sm_scale * q_descale * k_descale) and into the output
 * (O = (P V) * v_descale), so the dots are dtype's.  Varlen and paged take them the same way.
 *
 * Dropout (desc.dropout = p in (0, 1), docs/backward.md, templates/attn_dropout.c): two i64
 * parameters follow the fp8 ones (or the layout's), dropout_seed and dropout_offset.  Each weight
 * P[i, j] of query row i and key column j (indices of the sequence, as the modifiers see them)
 * of query head h of batch b is kept with probability 1 - p and scaled by 1 / (1 - p), or
 * dropped, by Philox 4x32-10 keyed by the seed with the counter (j, i, offset + b * heads + h)
 * (kn_dropout_keep): O = (P * Z) V with Z = keep / (1 - p), as FlashAttention; lse is that of the
 * undropped scores, and the backward regenerates the same mask from the same arguments.  The
 * kernel folds 1 / (1 - p) into the output's normalisation (one multiply per row).  Dense and
 * varlen layouts (a paged KV cache serves inference: refused).
 *
 * Supported (kn_attn_check): dtype f16, bf16 or f32 (q_dtype / kv_dtype an fp8 format only with
 * dtype f16 or bf16); head_dim any of 1..512; block_m and block_n
 * powers of two in 16..256; warps a power of two in 1..16; stages in 1..8; mfma 0, 16 or 32;
 * wgmma only on sm_90a, f16/bf16, with block_m = 16 x warps (kn_attn_check_on).
 *
 * Head dims.  The whole head is one tile dimension of DP = kn_attn_head_pad(head_dim) columns:
 * head_dim rounded up to a multiple of 16, the k step of the f16/bf16 matrix instructions of
 * every target (so it need not be a power of two, and a multiple of 16 is its own DP).  The
 * loads of Q, K and V have the bound head_dim on the head dimension, so the padding columns read
 * as 0 and add 0 to QK^T; the store of O has the same bound, so they are never written.  Rows
 * are head_dim elements apart in a contiguous layout: the GPU lowerings use vector accesses only
 * as wide as head_dim's alignment allows (16 bytes at head dim 8 | D for f16/bf16, 4 | D for
 * f32; scalar accesses for an odd head dim).  Tile sizes and shared-memory bounds (the check,
 * the defaults) use DP; the descriptor and its key keep head_dim ("d=59").
 * Head dims up to 256 compile on every target (tests/unit/test_defaults.c).  Above 256 (DP up to
 * 512) kn_attn_check_on decides per architecture, by shared memory and registers: the host
 * takes every dtype; gfx90a, gfx942 and gfx950 take f16 and bf16 at tilings whose f32
 * accumulator and Q fit half of a thread's registers (the default 32x16 with 2 waves compiles
 * without spills at D 512); NVIDIA (sm_80, sm_90a) takes none (16 rows per warp is the least,
 * and 16 x 512 f32 is 256 registers per thread: ptxas spills 650-990 bytes), and f32 on a GPU
 * is refused (its FMA dots hold whole rows of Q per thread).
 */
#ifndef KILN_ATTENTION_H
#define KILN_ATTENTION_H

#include "arch.h"
#include "interp.h"
#include "ir.h"

/* The descriptor (what is computed) and the config (how it is tiled) are declared from these
 * field lists, X(kind, type, field, key name), and their canonical key texts below are written
 * from the same lists: a field added to a list is in the struct, in every key built from it
 * (memo keys, the tuning database's variant, log and describe text) and in the test that changes
 * each field and checks the key changes, with no other edit.  kind says how the key prints it:
 * a scalar type by name, a bool as 0/1, an int in decimal.  Later variants (sliding window,
 * softcap, ALiBi) are one more line of KN_ATTN_DESC_FIELDS each. */
/* TEXT: a string, keyed by the hex XXH3-64 of its bytes ("0" for NULL or empty) */
/* SCALAR_OPT: a scalar type that 0 (KN_I1) leaves unset, named in the key only when set (so the
 * keys of every descriptor that leaves it unset are what they were before the field existed) */
/* FLOAT_OPT: a float that 0 leaves unset, named in the key only when set, in the fewest digits
 * that read back as the same float ("dropout=0.17") */
/* BOOL_OPT: a bool named in the key only when set ("off32=1") */
enum { KN_ATTN_FIELD_SCALAR, KN_ATTN_FIELD_BOOL, KN_ATTN_FIELD_INT, KN_ATTN_FIELD_TEXT,
       KN_ATTN_FIELD_SCALAR_OPT, KN_ATTN_FIELD_FLOAT_OPT, KN_ATTN_FIELD_BOOL_OPT };

/* f16, bf16, f32; head_dim 1..512 (kn_attn_check; above 256 not on every target:
 * kn_attn_check_on); has_lse: store the log-sum-exp.  The variant (docs/variants.md): causal 0
 * none, 1 bottom-right (FlashAttention 2: query i sees key j iff j <= i + seqlen_k - seqlen_q), 2
 * top-left (j <= i); window: a sliding window whose sizes are kernel arguments (kn_attn_vargs);
 * softcap: cap * tanh(s / cap), the cap an argument; alibi: per-head slopes (an argument tensor);
 * bias: an additive bias tensor; document: per-token segment ids, a query sees only keys of its
 * own segment; prefix: prefix-LM, a query sees every key below the prefix length (an argument)
 * and the keys causal (bottom-right) lets it see.  mods: the text of the user's own modifiers
 * (@score_mod, @mask_mod, @block_mask; NULL or "" for none), keyed by its hash.  layout: the
 * call shape, KN_ATTN_DENSE (0: (B, H, N, D) buffers), KN_ATTN_VARLEN (1: packed sequences
 * with cu_seqlens, above) or KN_ATTN_PAGED (2: a paged KV cache with a block table, above).
 * q_dtype, kv_dtype: the element type of q and of k / v when it is not dtype (0: dtype): an fp8
 * format (f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz) read with per-(batch, kv head) descale
 * factors, computed in dtype (f16 or bf16), which stays the type of o (docs/serving.md, "fp8
 * inputs and KV pages").  Keyed as ";q=f8e4m3;kv=f8e4m3" after mods, only when set. */
#define KN_ATTN_DESC_FIELDS(X)                             \
  X(KN_ATTN_FIELD_SCALAR, kn_scalar, dtype, "dtype")       \
  X(KN_ATTN_FIELD_INT, int, head_dim, "d")                 \
  X(KN_ATTN_FIELD_INT, int, causal, "causal")              \
  X(KN_ATTN_FIELD_BOOL, bool, has_lse, "lse")              \
  X(KN_ATTN_FIELD_BOOL, bool, window, "window")            \
  X(KN_ATTN_FIELD_BOOL, bool, softcap, "softcap")          \
  X(KN_ATTN_FIELD_BOOL, bool, alibi, "alibi")              \
  X(KN_ATTN_FIELD_BOOL, bool, bias, "bias")                \
  X(KN_ATTN_FIELD_BOOL, bool, document, "doc")             \
  X(KN_ATTN_FIELD_BOOL, bool, prefix, "prefix")            \
  X(KN_ATTN_FIELD_INT, int, layout, "layout")              \
  X(KN_ATTN_FIELD_TEXT, const char *, mods, "mods")               \
  X(KN_ATTN_FIELD_SCALAR_OPT, kn_scalar, q_dtype, "q")             \
  X(KN_ATTN_FIELD_SCALAR_OPT, kn_scalar, kv_dtype, "kv")           \
  X(KN_ATTN_FIELD_FLOAT_OPT, float, dropout, "dropout")

enum { KN_CAUSAL_NONE = 0, KN_CAUSAL_BOTTOM_RIGHT = 1, KN_CAUSAL_TOP_LEFT = 2 };
enum { KN_ATTN_DENSE = 0, KN_ATTN_VARLEN = 1, KN_ATTN_PAGED = 2 };
/* the largest page of a paged KV cache (rows; any size 1..KN_ATTN_MAX_PAGE) */
enum { KN_ATTN_MAX_PAGE = 256 };

/* block_m: query rows per program, 16..256, a power of two.  block_n: keys per loop iteration,
 * 16..256, a power of two.  warps: GPU targets, warps / waves per program (recorded as meta).
 * stages: GPU targets, software pipeline depth (recorded as meta).  mfma: AMDGPU, the matrix
 * instruction m, 16 (16x16xK) or 32 (32x32xK, K from the chip: 8/16 or 16/32 on gfx950); 0 = the target's choice; recorded as meta
 * MFMA only when non-zero, so the IR of a config that leaves it 0 is what it was before the field
 * existed; NVPTX ignores it.  wgmma: sm_90a, the dots as wgmma.mma_async m64nNk16 (B from
 * shared memory) instead of mma.sync; needs block_m = 16 x warps with warps a multiple of 4
 * (one 64-row slab per warpgroup); recorded as meta WGMMA = 1 only when set (the IR of the
 * default config is unchanged).  off32: the K and V block loads of the KV loop carry the IR's
 * off32 clause (docs/ir.md: every live element within 2^31 bytes of its base), which AMDGPU
 * lowers to buffer loads on a resource with 32-bit offsets, out-of-range lanes reading 0 with no
 * branch; a launch-derived property, not a tiling: it holds only when each (batch, kv head)
 * slab of k and of v spans less than 2^31 bytes (kn_attn_off32_fits), so the API sets it on the
 * AMDGPU kernels it prepares (kn_attn_off32_applies) and launches a problem that does not fit
 * on the kernel without it (docs/amdgpu.md); keyed only when set ("...;wgmma=0;off32=1"); a
 * paged kernel gathers its K and V and has no such loads (the API leaves it unset).  atomic_dq:
 * the backward only (attn_bwd.h): the dK/dV kernel also adds dQ's partial sums into an f32
 * workspace with atomic adds, and the dQ kernel only scales and rounds it (5 dots per block
 * pair instead of 7; not bit-identical run to run); keyed only when set ("...;adq=1"). */
#define KN_ATTN_CONFIG_FIELDS(X)                           \
  X(KN_ATTN_FIELD_INT, int, block_m, "block_m")            \
  X(KN_ATTN_FIELD_INT, int, block_n, "block_n")            \
  X(KN_ATTN_FIELD_INT, int, warps, "warps")                \
  X(KN_ATTN_FIELD_INT, int, stages, "stages")              \
  X(KN_ATTN_FIELD_INT, int, mfma, "mfma")                  \
  X(KN_ATTN_FIELD_BOOL, bool, wgmma, "wgmma")                \
  X(KN_ATTN_FIELD_BOOL_OPT, bool, off32, "off32")          \
  X(KN_ATTN_FIELD_BOOL_OPT, bool, atomic_dq, "adq")

#define KN_ATTN_DECLARE_FIELD(kind, type, field, name) type field;
typedef struct kn_attn_desc {
  KN_ATTN_DESC_FIELDS(KN_ATTN_DECLARE_FIELD)
  const char *mods_file; /* not in the key: the file name diagnostics give the mods text */
} kn_attn_desc;

typedef struct kn_attn_config {
  KN_ATTN_CONFIG_FIELDS(KN_ATTN_DECLARE_FIELD)
} kn_attn_config;
#undef KN_ATTN_DECLARE_FIELD

/* the element types of q and of k / v (the descriptor's q_dtype / kv_dtype, else dtype), and
 * whether either is an fp8 format (the kernel then takes the descale parameters) */
static inline kn_scalar kn_attn_q_type(const kn_attn_desc *d) {
  return d->q_dtype != KN_I1 ? d->q_dtype : d->dtype;
}
static inline kn_scalar kn_attn_kv_type(const kn_attn_desc *d) {
  return d->kv_dtype != KN_I1 ? d->kv_dtype : d->dtype;
}
static inline bool kn_scalar_is_fp8(kn_scalar s) { return s >= KN_F8E4M3 && s <= KN_F8E5M2FNUZ; }
static inline bool kn_attn_is_fp8(const kn_attn_desc *d) {
  return kn_scalar_is_fp8(kn_attn_q_type(d)) || kn_scalar_is_fp8(kn_attn_kv_type(d));
}

/* The canonical key text of a descriptor, every field named in list order:
 * "dtype=f16;d=128;causal=1;lse=1".  snprintf-like: returns the full length (output truncated
 * to n - 1 characters; buf may be NULL when n is 0).  Equal descriptors give equal texts and
 * descriptors that differ in any field give different texts. */
int kn_attn_desc_key(const kn_attn_desc *d, char *buf, size_t n);
/* the same for a config: "block_m=128;block_n=64;warps=4;stages=2;mfma=0;wgmma=0" */
int kn_attn_config_key(const kn_attn_config *c, char *buf, size_t n);
/* room for either key (with the fields of today, and some to spare) */
enum { KN_ATTN_KEY_MAX = 160 };

enum { KN_ATTN_NPARAMS = 24 };
/* the type of the template's own parameter i (< KN_ATTN_NPARAMS) of descriptor d */
kn_type kn_attn_param_type(const kn_attn_desc *d, int i);

/* the head dims the template takes, and the step its tile dimension is padded to */
enum { KN_ATTN_MAX_HEAD_DIM = 512, KN_ATTN_HEAD_STEP = 16 };
/* the head dimension of the kernel's tiles: head_dim rounded up to KN_ATTN_HEAD_STEP */
static inline int kn_attn_head_pad(int head_dim) {
  /* (a head dim no check has seen yet may be anything: above the limit it is returned as it is,
   * for the check to refuse, rather than overflow; found by fuzz_api under UBSan) */
  if (head_dim > KN_ATTN_MAX_HEAD_DIM) return head_dim;
  return (head_dim + KN_ATTN_HEAD_STEP - 1) / KN_ATTN_HEAD_STEP * KN_ATTN_HEAD_STEP;
}

/* the default config for a descriptor on an architecture (NULL: the host): the registry's
 * measured row for the padded head dim (compiler/arch.h), or the nearest smaller tiling
 * kn_attn_check_on accepts; one it accepts whenever there is one (not above head dim 256 on
 * NVIDIA or for f32 on a GPU: the check says why) */
kn_attn_config kn_attn_default_config(const kn_arch *arch, const kn_attn_desc *d);
/* off32 (the config's, above): is it a property the kernels of d on arch take (AMDGPU, a dense
 * or varlen layout: their K and V are block loads), and does a launch fit it: every live K and
 * V element of a (batch, kv head) slab, seqlen_k rows (varlen: the longest sequence's) of
 * head_dim elements at row strides k_sn / v_sn (elements), lies below 2^31 bytes from the
 * slab's base, ((seqlen_k - 1) * stride + head_dim) * element size < 2^31, with non-negative
 * strides (a negative one reads below the base) */
bool kn_attn_off32_applies(const kn_arch *arch, const kn_attn_desc *d);
bool kn_attn_off32_fits(const kn_attn_desc *d, int64_t seqlen_k, int64_t k_sn, int64_t v_sn);
/* does d apply modifiers beyond the causal masks (which every default tiling was measured with)? */
bool kn_attn_has_modifiers(const kn_attn_desc *d);
/* 0 when the descriptor and config are supported, else -1 with the reason in *diag */
int kn_attn_check(const kn_attn_desc *d, const kn_attn_config *c, kn_diag *diag);
/* kn_attn_check, and on a GPU architecture: a matrix instruction of arch fits both dots with the
 * config's warps (the layout pass's own rule, kn_mma_fits) and the K/V tiles fit its shared
 * memory.  Every config this accepts compiles; the tuner's space is filtered by it. */
int kn_attn_check_on(const kn_arch *arch, const kn_attn_desc *d, const kn_attn_config *c,
                     kn_diag *diag);
/* builds kernel "attn_fwd" into m; NULL with *diag filled when unsupported */
kn_func *kn_attn_fwd_build(kn_module *m, const kn_attn_desc *d, const kn_attn_config *c,
                           kn_diag *diag);

/* A problem instance: shapes, contiguous (B, H, N, D) buffers and the scale.  Varlen (the
 * descriptor's layout KN_ATTN_VARLEN): seqlen_q and seqlen_k are the longest sequence's lengths
 * (max_seqlen_q/k: the grid, and the extents of the variant tensors' row axes), the buffers are
 * packed (total_q, H, D) / (total_k, HK, D) / lse (H, total_q), and cu_seqlens_q/k hold batch + 1
 * prefix sums each (memory the kernel reads: device memory on a GPU). */
typedef struct kn_attn_problem {
  int batch, heads, kv_heads, seqlen_q, seqlen_k;
  double sm_scale;  /* 0 means 1/sqrt(head_dim) */
  const int32_t *cu_seqlens_q, *cu_seqlens_k;  /* varlen only */
  int total_q, total_k;                        /* varlen only: rows of the packed buffers */
  /* paged only: block_table (B, max_pages) and cache_seqlens (B) int32 (memory the kernel
   * reads), the pools' num_pages pages of page_size rows; seqlen_k is max_pages * page_size */
  const int32_t *block_table, *cache_seqlens;
  int page_size, num_pages, max_pages;
  int seqlen_new;  /* rows appended before the launch: sequence b has cache_seqlens[b] + it keys */
  /* fp8 inputs only (kn_attn_is_fp8): the descale factors of q, k and v, f32 (B, HK) with batch
   * stride descale_sb (0: HK), memory the kernel reads; NULL: 1.  The kernel computes with
   * q * q_descale[b, h / kv_group], k * k_descale[b, hk], v * v_descale[b, hk]. */
  const float *q_descale, *k_descale, *v_descale;
  int64_t descale_sb;
  /* dropout only (desc.dropout != 0): Philox's seed and counter offset ("Dropout" above) */
  uint64_t dropout_seed, dropout_offset;
} kn_attn_problem;

/* flash_attn_with_kvcache's append, on host memory: k_new and v_new ((B, HK, seqlen_new, D)
 * logically, strides {b, h, row} in elements) written into the pools (strides {page, head, row})
 * at positions cache_seqlens[b] .. + seqlen_new - 1 of each sequence, through the block table
 * (row stride table_stride).  Checks every position and page number first: -1 with *diag, and
 * nothing written, when one is outside the table's capacity or the pool.  A NULL pool or source
 * skips that side. */
typedef struct kn_paged_append {
  int batch, kv_heads, head_dim, seqlen_new, page_size, num_pages, max_pages;
  size_t elem_size;
  const int32_t *block_table, *cache_seqlens;
  int64_t table_stride;
  void *k_pool, *v_pool;
  int64_t k_pool_stride[3], v_pool_stride[3];
  const void *k_new, *v_new;
  int64_t k_new_stride[3], v_new_stride[3];
} kn_paged_append;
int kn_attn_paged_append(const kn_paged_append *a, kn_diag *diag);

/* The append as a kernel, "kv_append" (for devices whose memory the host cannot write: CUDA):
 * parameters kn_paged_append_names with kn_paged_append_param_type, in that order (the pools,
 * the new rows, the table and lengths, page_size, num_pages, max_pages, kv_heads (i32), the
 * table's row stride, the pools' {page, head, row} and the new rows' {batch, head, row} strides
 * (i64)); grid (seqlen_new, batch * kv_heads, 1).  Row i of (b, hk) goes to position
 * cache_seqlens[b] + i through the table; positions outside the table's capacity store nothing
 * and pages are clamped into the pool.  NULL with *diag for a head dim out of range. */
enum { KN_PAGED_APPEND_NPARAMS = 23 };
extern const char *const kn_paged_append_names[KN_PAGED_APPEND_NPARAMS];
kn_type kn_paged_append_param_type(kn_scalar dt, int i);
kn_func *kn_paged_append_build(kn_module *m, kn_scalar dt, int head_dim, kn_diag *diag);

/* ---- variants: the kernel's extra parameters and their values (docs/variants.md) ----
 *
 * A variant's kernel takes the KN_ATTN_NPARAMS parameters above, then the parameters of its
 * modifiers beyond their fixed ones, in the order the modifiers are applied (the built-ins in
 * the order of KN_ATTN_DESC_FIELDS, then the user's @score_mod, @mask_mod, @block_mask), each
 * name once: a modifier parameter named like a kernel parameter (seqlen_q, seqlen_k, heads,
 * sm_scale, ...) or like an earlier modifier's parameter, with the same type, is that parameter. */
enum { KN_ATTN_MAX_PARAMS = 64 };

typedef struct kn_attn_sig {
  int n;                                /* all parameters, the KN_ATTN_NPARAMS fixed ones first */
  kn_type type[KN_ATTN_MAX_PARAMS];
  char name[KN_ATTN_MAX_PARAMS][48];
} kn_attn_sig;

/* one value of a user modifier's parameter, by name; bytes: the extent of a pointer's memory
 * (the reference and the interpreter check accesses against it; 0 = unknown, only allowed where
 * nothing checks, i.e. on GPUs) */
typedef struct kn_attn_named_arg {
  const char *name;
  kn_argval value;    /* .i for integers, .f for floats, .p for pointers */
  size_t bytes;
} kn_attn_named_arg;

/* The values of a variant's built-in parameters (their names in the modifier library, in
 * brackets) and of the user's.  Layouts are (B, H, ...) with strides in elements; only the
 * fields of the descriptor's variant are read. */
typedef struct kn_attn_vargs {
  int window_left, window_right;   /* [window_left, window_right]: keys visible on each side of
                                      the (bottom-right aligned) diagonal; -1 = unbounded */
  float softcap;                   /* [softcap] > 0 */
  const float *alibi_slopes;       /* [alibi_slopes] (B, H) f32, or (H) with alibi_sb = 0 */
  int64_t alibi_sb;                /* [alibi_sb] */
  const void *bias;                /* [bias] (B, H, Nq, Nk) of the kernel dtype, Nk contiguous */
  int64_t bias_sb, bias_sh, bias_sm; /* [bias_sb, bias_sh, bias_sm]; 0 broadcasts that axis */
  const int32_t *q_seg, *k_seg;    /* [q_seg, k_seg] (B, Nq) and (B, Nk) segment ids, each row
                                      non-decreasing (the document mask's block skipping needs it) */
  int64_t q_seg_sb, k_seg_sb;      /* [q_seg_sb, k_seg_sb] */
  int prefix_len;                  /* [prefix_len] */
  const kn_attn_named_arg *mods;   /* the user's modifier parameters, any order */
  int nmods;
} kn_attn_vargs;

/* the kernel signature of descriptor d (parses the modifier texts); -1 with *diag (file:line:col
 * for a wrong modifier) when the variant is malformed */
int kn_attn_signature(const kn_attn_desc *d, kn_attn_sig *sig, kn_diag *diag);

/* the same over module m, which already holds the modifier functions (say, an IR file read back:
 * its @score_mod / @mask_mod / @block_mask and the library functions d's fields name) */
int kn_attn_signature_in(kn_module *m, const kn_attn_desc *d, kn_attn_sig *sig, kn_diag *diag);

/* whether the kernel parameter `name` of descriptor d takes a built-in variant's value (a field
 * of kn_attn_vargs: window_left, softcap, bias, ...) rather than a named one (kn_attn_vargs.mods) */
bool kn_attn_param_builtin(const kn_attn_desc *d, const char *name);

/* 0 when every tensor of problem p (q/o, k/v, lse and a bias of d) has a byte size that fits
 * in int64; -1 with *diag for sizes no buffer can have (their strides would overflow).  The
 * sizes must be >= 0. */
int kn_attn_check_sizes(const kn_attn_desc *d, const kn_attn_problem *p, kn_diag *diag);

/* Fills the sig->n kernel arguments for contiguous (B, H, N, D) buffers and the grid (varlen:
 * packed contiguous buffers, the cu_seqlens of p; -1 when either is NULL).  lse may be NULL; va
 * may be NULL for a descriptor without variant parameters.  -1 with *diag when a parameter has
 * no value (a user parameter missing from va->mods, a NULL built-in tensor) or the sizes fit no
 * buffer (kn_attn_check_sizes). */
int kn_attn_fill_args(const kn_attn_desc *d, const kn_attn_sig *sig, const kn_attn_config *c,
                      const kn_attn_problem *p, void *q, void *k, void *v, void *o, float *lse,
                      const kn_attn_vargs *va, kn_argval *out, int grid[3], kn_diag *diag);

/* Naive float64 attention: the oracle of descriptor d (its dtype is that of the kernel whose
 * inputs were rounded; the reference itself computes in double).  q, k, v hold the (already
 * rounded) inputs as doubles in contiguous (B, H, N, D) / (B, HK, N, D) layouts; o gets
 * (B, H, Nq, D) and lse (B, H, Nq) (lse may be NULL); varlen: packed (total_q, H, D),
 * (total_k, HK, D) and lse (H, total_q), the cu_seqlens of p (host memory) giving each sequence's
 * rows, and rows of o and lse no sequence owns left untouched.  Same masking rules as the
 * kernel.  For a
 * descriptor whose variant takes no parameters (plain, causal either way); else
 * kn_attn_reference_v. */
void kn_attn_reference(const kn_attn_desc *d, const kn_attn_problem *p, const double *q,
                       const double *k, const double *v, double *o, double *lse);

/* The float64 reference of the variant: the same modifier functions (the library's and the
 * user's, or those of `mods`, a verified module holding them — the IR `kiln run --ir` read)
 * evaluated by the interpreter in double for every (b, h, i, j); otherwise as
 * kn_attn_reference.  -1 with *diag when a modifier fails (say, reads outside its tensor) or a
 * varlen problem's cu_seqlens are not non-decreasing prefix sums within total_q / total_k and
 * the max lengths. */
int kn_attn_reference_v(const kn_attn_desc *d, kn_module *mods, const kn_attn_problem *p,
                        const kn_attn_vargs *va, const double *q, const double *k,
                        const double *v, double *o, double *lse, kn_diag *diag);

/* kn_attn_reference_v for a descriptor whose variant has no parameters (plain, causal, or a
 * user modifier without parameters): asserts that it succeeds */
void kn_attn_reference(const kn_attn_desc *d, const kn_attn_problem *p, const double *q,
                       const double *k, const double *v, double *o, double *lse);

/* ---- dropout's generator (templates/attn_dropout.c) ---- */

/* Philox 4x32-10 of counter ctr under key key (Random123's philox4x32 with 10 rounds) */
void kn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* the keep threshold of probability p: floor(p * 2^32) (0 for p <= 0) */
uint32_t kn_dropout_threshold(float p);
/* 1 / (1 - p), the scale of a kept weight */
double kn_dropout_scale(float p);
/* is element (row, col) of query head bh = b * heads + h kept?  (The kernels' mask, in C.) */
bool kn_dropout_keep(uint64_t seed, uint64_t offset, int64_t bh, int32_t row, int32_t col,
                     uint32_t threshold);

/* Absolute tolerance for an output of this dtype (inputs ~ N(0,1), sm_scale ~ 1/sqrt(D)); the
 * rationale is in attn_fwd.c */
double kn_attn_tolerance(kn_scalar dtype);
/* kn_attn_tolerance of descriptor d's dtype, grown by dropout's 1 / (1 - p) (the output is then
 * no longer a convex combination of V's rows) */
double kn_attn_tolerance_of(const kn_attn_desc *d);
/* Absolute tolerance for the (f32, natural log) lse of a kernel of this dtype, same inputs */
double kn_attn_lse_tolerance(kn_scalar dtype);

#endif
