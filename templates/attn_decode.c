/* attn_decode.c — the split-KV decode template (attn_decode.h), built with the IR builder.
 *
 * Decode reads a long KV cache for one or a few query rows, so it is bound by the bytes of K and
 * V, and the prefill kernel serves it badly twice: its programs own one query head each (a GQA
 * group of g heads reads every KV block g times) and there are only batch x heads of them (too
 * few to keep the memory system busy at small batch).  This template fixes both as FlashDecoding
 * does: the g heads of a group and their seqlen_q rows are the rows of one tile (so one KV read
 * serves the group), and the KV range is cut into pieces run by different programs, each writing
 * its normalised partial output O_s and log2-sum-exp L_s (f32) to a workspace.  The combine
 * kernel then merges the pieces of each row exactly:
 *     M = max_s L_s,   w_s = 2^(L_s - M),   O = sum_s w_s O_s / sum_s w_s,   L = M + log2 sum_s w_s
 * computed online over s (as the forward's softmax over key blocks), and lse = ln(2) * L.  A
 * piece a row saw no key of has L_s = -inf and weight 0; a row no piece saw has O = 0 and lse =
 * -inf, as in the forward.
 *
 * Within a piece the math is the forward template's (attn_fwd.c): scores in exp2 units, running
 * max and sum, masked entries -inf, rows without a live key subtracting 0.  The masks are the
 * descriptor's modifier plan (attn_mods.c: causal both ways, window, prefix, the user's masks),
 * applied to every block with the key bound, with q_idx the packed row's query position and h its
 * own head; score modifiers (softcap, ALiBi, bias, the user's) likewise.  The loop bounds are the
 * piece's range, narrowed where a built-in mask says every row is dead: top-left causal ends at
 * seqlen_q, a window's left edge starts at the first row's.  Bottom-right causal and the window's
 * right edge never narrow it (the last query row sees the last key).
 *
 * fp8 inputs (attention.h): q is gathered and K / V loaded in their memory format and converted
 * exactly to dtype; the descales of (b, hk), one kv head for all of a program's packed rows, fold
 * as in the forward (kn_attn_fp8_scales): q's and k's into the score scale, v's into the piece's
 * output.  The workspace and the combine kernel stay f32.
 *
 * Addressing.  kv_rows() is the one place that says where the keys of a KV block live: the
 * (batch, kv head) base, key rows start_n.., stride k_sn; or (paged) a gather through the block
 * table by attn_paged.c's helpers, the ones the paged forward uses (kn_paged_open for the
 * sequence's table row and clamped length, kn_paged_block, kn_paged_gather), so the page
 * addressing and its clamps exist once.  A paged program's sequence length is its seqlen_k
 * everywhere (masks, modifiers, loop), and its pieces cut that length.  q is read with a gather (the packed rows come from several
 * heads at the caller's strides); the workspace is kiln's own, contiguous, written with plain
 * block stores.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attn_decode.h"
#include "attn_internal.h"

/* ---- building blocks ---------------------------------------------------------------------------- */

typedef struct dgen {
  kn_builder b;
} dgen;

static kn_value *nm(dgen *g, kn_value *v, const char *name) {
  kn_value_set_name(g->b.m, v, name);
  return v;
}
static kn_value *op2(dgen *g, kn_opcode opc, kn_value *x, kn_value *y, const char *name) {
  return nm(g, kn_b_binary(&g->b, opc, x, y), name);
}
static kn_value *i32c(dgen *g, int64_t v, const char *name) {
  return nm(g, kn_b_const_i(&g->b, kn_ty_scalar(KN_I32), v), name);
}
static kn_value *i64c(dgen *g, int64_t v, const char *name) {
  return nm(g, kn_b_const_i(&g->b, kn_ty_scalar(KN_I64), v), name);
}
static kn_value *f32c(dgen *g, kn_type t, double v, const char *name) {
  return nm(g, kn_b_const_f(&g->b, t, v), name);
}
static kn_value *fill(dgen *g, kn_value *x, int m, int n, const char *name) {
  int32_t shape[2] = {m, n};
  return nm(g, kn_b_splat(&g->b, x, n ? 2 : 1, shape), name);
}
/* (m) -> (m, n) along columns (axis 1) or (n) -> (m, n) down rows (axis 0) */
static kn_value *spread(dgen *g, kn_value *x, int axis, int m, int n, const char *name) {
  int32_t shape[2] = {m, n};
  kn_value *e = nm(g, kn_b_expand_dims(&g->b, x, axis == 1 ? 1 : 0), "spread_e");
  return nm(g, kn_b_broadcast(&g->b, e, 2, shape), name);
}
/* ptr + x*sx (+ y*sy) in i64, the start of one block of rows */
static kn_value *at(dgen *g, kn_value *ptr, kn_value *x, kn_value *sx, kn_value *y, kn_value *sy,
                    const char *name) {
  kn_value *off = op2(g, KN_OP_MUL, x, sx, "off_x");
  if (y) {
    kn_value *oy = op2(g, KN_OP_MUL, y, sy, "off_y");
    off = op2(g, KN_OP_ADD, off, oy, "off_xy");
  }
  return nm(g, kn_b_ptradd(&g->b, ptr, off), name);
}
static kn_value *to64(dgen *g, kn_value *x, const char *name) {
  return nm(g, kn_b_cast(&g->b, x, KN_I64), name);
}
/* the parameter named `name` of signature sig (the plan or this file made it) */
static int param_of(const kn_attn_sig *sig, const char *name) {
  for (int i = 0; i < sig->n; i++)
    if (!strcmp(sig->name[i], name)) return i;
  KN_ASSERT(!"decode parameter missing from the signature");
  return 0;
}

/* ---- checks, defaults, the number of pieces ------------------------------------------------------- */

static bool has_block_mod(const kn_attn_desc *d) {
  /* the document mask brings a block predicate; a user's @block_mask is found by name */
  return d->document || (d->mods && strstr(d->mods, "@block_mask"));
}

int kn_attn_decode_check(const kn_arch *arch, const kn_attn_desc *d, const kn_attn_config *c,
                         kn_diag *diag) {
  kn_loc nowhere = {0};
  if (d->layout != KN_ATTN_DENSE && d->layout != KN_ATTN_PAGED)
    return kn_error(diag, NULL, nowhere, "decode: only the dense (B, H, N, D) and paged layouts "
                    "are served by the decode kernels (varlen goes to the prefill kernel)");
  if (has_block_mod(d))
    return kn_error(diag, NULL, nowhere, "decode: a block predicate (the document mask, "
                    "@block_mask) bounds one head's query rows; decode packs several heads");
  if (d->dropout != 0)
    return kn_error(diag, NULL, nowhere, "decode: dropout is not served by the decode kernels "
                    "(kiln_forward runs the prefill kernel for it)");
  if (c->wgmma)
    return kn_error(diag, NULL, nowhere, "decode: wgmma is not used by the decode kernels "
                    "(its 64-row slabs are 4x the rows a decode tile has)");
  return kn_attn_check_on(arch, d, c, diag);
}

kn_attn_config kn_attn_decode_default_config(const kn_arch *arch, const kn_attn_desc *d) {
  /* 16 packed rows (GQA 32/8 with one or four query rows fills them), one warp: the layout
   * splits warps along M and 16 rows is one instruction tile.  block_n: 64 keys at head dim
   * 128 (32 KB of K and V in flight per stage pair); larger heads take fewer keys */
  kn_attn_config c = {.block_m = 16, .block_n = 64, .warps = 1, .stages = 2};
  int dp = kn_attn_head_pad(d->head_dim);
  if (dp > 128) c.block_n = 32;
  if (d->layout == KN_ATTN_PAGED && arch) {
    /* a paged kernel holds its gather loop's row offsets (an i64 per 16-byte vector; the
     * in-page loop needs none), so its tiles keep fewer keys per thread.  NVIDIA D 128: 16x32
     * with one warp, measured on the H200 (bench/RESULTS.md, session 24: B 16 x Nk 32k paged /
     * dense 1.19 at pages of 16, 1.17 at 256; 64x16 with 4 warps 2.63, 16x64 1.38 / 1.13 and
     * it spills 284 bytes); elsewhere not measured: AMDGPU 32x32 with 2 waves at head dim 64
     * (108 VGPRs on gfx942), 32x16 at 128; NVIDIA 32x32 with 2 warps at 64 (no spills) */
    const bool nv = arch->isa == KN_ISA_NVPTX;
    c = dp <= 64 ? (kn_attn_config){.block_m = 32, .block_n = 32, .warps = 2, .stages = 2}
        : nv     ? (kn_attn_config){.block_m = 16, .block_n = 32, .warps = 1, .stages = 2}
                 : (kn_attn_config){.block_m = 32, .block_n = 16, .warps = 2, .stages = 2};
  }
  if (kn_attn_is_fp8(d) && arch && arch->isa == KN_ISA_NVPTX) {
    /* fp8 K / V: the conversions of the K and V tiles to dtype add their registers to the
     * tile's, and the one-warp and two-warp tilings above then spill (ptxas -O3, fp8 KV: dense
     * 16x64 on sm_90a 556 bytes at head dim 128; on sm_80, which has no conversion
     * instruction, 14 KB at 128 and 992 bytes at 64; paged 32x32 with 2 warps 16 bytes at 64).
     * 64 rows with 4 warps (16 packed rows each, as the dense tile's one warp) and at most 32
     * keys compile without spills on both at 64 and 128, dense and paged, q fp8 or not
     * (test_fp8's code test) */
    c.block_m = 64, c.warps = 4;
    if (c.block_n > 32) c.block_n = 32;
  }
  kn_diag diag;
  for (int bn = c.block_n; bn >= 16; bn /= 2) {
    kn_attn_config t = c;
    t.block_n = bn;
    for (int bm = c.block_m; bm <= 64; bm *= 2) {
      t.block_m = bm;
      if (kn_attn_decode_check(arch, d, &t, &diag) == 0) return t;
    }
  }
  return c;  /* the caller's check says why nothing fits */
}

kn_attn_config kn_attn_decode_read_config(const kn_arch *arch, const kn_attn_desc *d,
                                          kn_decode_read read) {
  if ((read != KN_DECODE_READ_IN_PAGE && read != KN_DECODE_READ_PAGES) ||
      d->layout != KN_ATTN_PAGED)
    return kn_attn_decode_default_config(arch, d);
  /* block loads from one page (pages: from one page per chunk of 16 keys): the dense loop's
   * code, so the dense kernel's tiling (checked against the paged descriptor, whose signature
   * has the table's parameters) */
  kn_attn_desc dense = *d;
  dense.layout = KN_ATTN_DENSE;
  kn_attn_config c = kn_attn_decode_default_config(arch, &dense);
  kn_diag diag;
  return kn_attn_decode_check(arch, d, &c, &diag) == 0 ? c : kn_attn_decode_default_config(arch, d);
}

static const char *const read_symbols[] = {"attn_decode", "attn_decode_in_page",
                                           "attn_decode_gather", "attn_decode_pages"};
enum { NREADS = sizeof read_symbols / sizeof read_symbols[0] };

const char *kn_attn_decode_symbol(kn_decode_read read) {
  return (unsigned)read < NREADS ? read_symbols[read] : read_symbols[0];
}

kn_decode_read kn_attn_decode_read_for(int page_size, int in_page_block_n, int pages_block_n) {
  if (in_page_block_n > 0 && page_size % in_page_block_n == 0) return KN_DECODE_READ_IN_PAGE;
  if (pages_block_n > 0 && pages_block_n % KN_DECODE_CHUNK == 0 &&
      page_size % KN_DECODE_CHUNK == 0)
    return KN_DECODE_READ_PAGES;
  return KN_DECODE_READ_GATHER;
}

int kn_attn_decode_read_of(const char *symbol) {
  for (int i = 0; i < NREADS; i++)
    if (symbol && !strcmp(symbol, read_symbols[i])) return i;
  return -1;
}

static int cdiv(int64_t a, int64_t b) { return (int)((a + b - 1) / b); }

kn_decode_plan kn_attn_decode_plan(const kn_attn_desc *d, const kn_attn_config *c,
                                   const kn_attn_problem *p, int cus, int want) {
  kn_decode_plan r = {0};
  const int group = p->kv_heads > 0 ? p->heads / p->kv_heads : 1;
  const int rows = group * (p->seqlen_q > 0 ? p->seqlen_q : 1);
  r.row_blocks = cdiv(rows, c->block_m);
  r.ws_rows = rows;
  const int blocks = p->seqlen_k > 0 ? cdiv(p->seqlen_k, c->block_n) : 1;
  int s = want;
  if (s <= 0) {
    /* programs of one piece; each compute unit runs several small programs at once, so the
     * device is short of work below `waves` of them per unit */
    const int64_t progs = (int64_t)(p->batch > 0 ? p->batch : 1) * p->kv_heads * r.row_blocks;
    const int64_t waves = 4, target = (int64_t)(cus > 0 ? cus : 1) * waves;
    s = progs >= target ? 1 : (int)((target + progs - 1) / progs);
    /* a piece's partial rows cost a write and a read of the workspace: at least
     * KN_DECODE_MIN_BLOCKS blocks of keys each keep that a few percent of the KV bytes */
    if (s > blocks / KN_DECODE_MIN_BLOCKS) s = blocks / KN_DECODE_MIN_BLOCKS;
  }
  if (s > blocks) s = blocks;
  if (s > KN_DECODE_MAX_SPLITS) s = KN_DECODE_MAX_SPLITS;
  if (s < 1) s = 1;
  const int per = cdiv(blocks, s);  /* blocks per piece */
  r.split_len = per * c->block_n;
  r.splits = cdiv(blocks, per);
  const int dp = kn_attn_head_pad(d->head_dim);
  const size_t slots = (size_t)(p->batch > 0 ? p->batch : 0) * (size_t)p->kv_heads *
                       (size_t)r.splits * (size_t)r.ws_rows;
  r.ws_o_bytes = slots * (size_t)dp * 4;
  r.ws_lse_bytes = slots * 4;
  return r;
}

/* ---- the split kernel ------------------------------------------------------------------------------ */

/* the forward template's parameter indices used here (attention.h's order) */
enum { P_Q, P_K, P_V, P_O, P_LSE, P_SM_SCALE, P_SEQLEN_Q, P_SEQLEN_K, P_HEADS, P_KV_GROUP,
       P_Q_SB, P_Q_SH, P_Q_SM, P_K_SB, P_K_SH, P_K_SN, P_V_SB, P_V_SH, P_V_SN };

/* the decode signature: the plan's (the forward's and the variant's), then the four of the split
 * kernel */
static const char *const split_names[KN_DECODE_NPARAMS] = {"ws_o", "ws_lse", "num_splits",
                                                           "split_len"};

static void decode_sig(kn_attn_sig *sig) {
  for (int i = 0; i < KN_DECODE_NPARAMS; i++) {
    snprintf(sig->name[sig->n], sizeof sig->name[0], "%s", split_names[i]);
    sig->type[sig->n++] = i < 2 ? kn_ty_ptr(KN_F32) : kn_ty_scalar(KN_I32);
  }
}

/* Where the keys [n0, n0 + rows) of one KV block of (batch, kv head) live, as a 2-D block:
 * k_tile (DP, BN) = K^T and v_tile (BN, DP).  The one place that knows the KV cache's layout:
 * dense rows from the (batch, kv head) base at stride k_sn, or (paged) through the block table
 * with attn_paged.c's helpers (the forward's own), from the kv head's base with the page strides
 * k_ps and row strides k_sn: one table entry and the dense block loads when the block lies in
 * one page, else each key's page and slot, gathered. */
typedef struct kv_view {
  kn_value *k_base, *v_base, *k_sn, *v_sn, *seqlen_k;
  const kn_paged_kv *paged;  /* the sequence's table and length (kn_paged_open), else NULL */
  kn_value *k_ps, *v_ps;     /* paged: the pools' page strides */
  kn_value *in_page;         /* paged: i1, page_size is a multiple of BLOCK_N (every block lies
                                in one page) */
} kv_view;

/* the block loads of K^T (DP, BN) and V (BN, DP): rows `first`.. of bases kb / vb at the row
 * strides k_sn / v_sn, bounded by the head dim and by `keys` rows from the base */
static void kv_block_loads(dgen *g, const kv_view *kv, kn_scalar dt, int BN, int DP,
                           kn_value *kb, kn_value *vb, kn_value *first, kn_value *keys,
                           kn_value *c0, kn_value *c_d, kn_value *one64, kn_value **kt,
                           kn_value **vt) {
  *kt = nm(g, kn_b_load(&g->b, kn_ty_tile2(dt, DP, BN), kb, (kn_value *[]){c0, first},
                        (kn_value *[]){one64, kv->k_sn}, (kn_value *[]){c_d, keys}, NULL, NULL),
           "k_tile");
  *vt = nm(g, kn_b_load(&g->b, kn_ty_tile2(dt, BN, DP), vb, (kn_value *[]){first, c0},
                        (kn_value *[]){kv->v_sn, one64}, (kn_value *[]){keys, c_d}, NULL, NULL),
           "v_tile");
}

/* how kv_rows reads a paged block (kn_decode_build versions the KV loop on it) */
typedef enum kv_read { KV_DENSE, KV_IN_PAGE, KV_GATHER, KV_PAGES } kv_read;

static void kv_rows(dgen *g, const kv_view *kv, kv_read how, kn_scalar dt, int BN, int D, int DP,
                    kn_value *n0, kn_value *page, kn_value *slot, kn_value *c0, kn_value *c_d,
                    kn_value *one64, kn_value **kt, kn_value **vt) {
  if (how == KV_DENSE) {  /* rows n0.. of the (batch, kv head) base */
    kv_block_loads(g, kv, dt, BN, DP, kv->k_base, kv->v_base, n0, kv->seqlen_k, c0, c_d, one64,
                   kt, vt);
  } else if (how == KV_IN_PAGE || how == KV_PAGES) {
    /* the block (KV_PAGES: the chunk of 16 keys) lies in one page (`page`, read from the table
     * a block early by kv_loop, and its `slot` in it): block loads from its rows, bounded by
     * the keys left */
    slot = to64(g, slot, "blk_slot64");
    kn_value *kb = at(g, kv->k_base, page, kv->k_ps, slot, kv->k_sn, "k_page_blk");
    kn_value *vb = at(g, kv->v_base, page, kv->v_ps, slot, kv->v_sn, "v_page_blk");
    kn_value *left = op2(g, KN_OP_SUB, kv->seqlen_k, n0, "k_left");  /* > 0: n0 is live */
    if (how == KV_PAGES)  /* a chunk past the sequence's end reads nothing */
      left = op2(g, KN_OP_MAX, left, c0, "k_left_pos");
    kv_block_loads(g, kv, dt, BN, DP, kb, vb, c0, left, c0, c_d, one64, kt, vt);
  } else {  /* each key's page and slot, gathered */
    kn_paged_rows pr;
    kn_paged_block(&g->b, kv->paged, n0, BN, true, &pr);
    *kt = kn_paged_gather(&g->b, dt, kv->k_base, &pr, kv->k_ps, kv->k_sn, D, DP, true, "k_tile");
    *vt = kn_paged_gather(&g->b, dt, kv->v_base, &pr, kv->v_ps, kv->v_sn, D, DP, false, "v_tile");
  }
}

/* a call of modifier `mod` with its fixed arguments and its plan-bound kernel parameters */
static kn_value *mod_call(dgen *g, const kn_attn_mod *mod, kn_value *const *fixed, int nfixed,
                          kn_value *const *P, kn_type res, const char *name) {
  kn_value *args[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK];
  int n = 0;
  for (int i = 0; i < nfixed; i++) args[n++] = fixed[i];
  for (int i = nfixed; i < kn_func_nparams(mod->f); i++) args[n++] = P[mod->arg[i - nfixed]];
  kn_op *op = kn_b_call(&g->b, mod->f, n, args);
  op->res[0]->type = res;
  return nm(g, op->res[0], name);
}

/* what the KV loop reads from the program around it */
typedef struct loop_in {
  const kn_attn_plan *plan;
  kn_value *const *P;
  const kv_view *kv;
  kn_scalar dt, kvt;  /* the compute type; K and V's in memory (fp8: converted to dt) */
  int BM, BN, D, DP, nscore;
  int W;        /* the score tiles' keys: BLOCK_N, or a chunk's 16 (KV_PAGES) */
  kn_type s_f32;
  kn_value *sm_scale;  /* the softmax scale, fp8's q and k descales folded in */
  kn_value *lo, *hi, *c_bn, *c0, *c_d, *one64, *q_tile, *kcols, *bidx, *h_s, *q_s, *k_last,
      *k_last_s, *qk_scale_s, *hi_s, *neg_inf_s, *neg_inf_r, *zero_r, *zero_acc;
} loop_in;

/* the page of chunk c (keys n0 + 16c.. of the block whose first key is slot s0 of table entry
 * i0): entry i0 + (s0 + 16c) / page_size by the reciprocal (s0 + 16c < page_size + BLOCK_N, far
 * below its 2^12), clamped to the sequence's last entry; *slot (if asked) its slot */
static kn_value *chunk_page(dgen *g, const loop_in *L, kn_value *i0, kn_value *s0, int c,
                            kn_value *recip, kn_value *last_idx, kn_value **slot) {
  const kn_paged_kv *pg = L->kv->paged;
  kn_value *t = c ? op2(g, KN_OP_ADD, s0, i32c(g, KN_DECODE_CHUNK * c, "c_chunk"), "chunk_t") : s0;
  kn_value *q = kn_paged_entries(&g->b, t, recip);
  if (slot)
    *slot = op2(g, KN_OP_SUB, t, op2(g, KN_OP_MUL, q, pg->page_size, "chunk_first"), "chunk_slot");
  return last_idx ? kn_paged_page(&g->b, pg, op2(g, KN_OP_MIN, op2(g, KN_OP_ADD, i0, q,
                                                                     "chunk_index0"),
                                                 last_idx, "chunk_index"))
                  : NULL;
}

/* the online-softmax loop over the piece's KV blocks [lo, hi), reading each block as `how`
 * says: res = its final (m, l, acc).  KV_PAGES reads each block as BLOCK_N / 16 chunks of 16
 * keys, one block load of K and V and one dot against Q each (L->W = 16: the score tiles are a
 * chunk's), and merges the chunks' scores elementwise before the block's one max and sum */
static void kv_loop(dgen *g, const loop_in *L, kv_read how, kn_value **res) {
  const kn_scalar dt = L->dt;
  const int BM = L->BM, BN = L->BN, DP = L->DP, W = L->W;
  const int C = how == KV_PAGES ? BN / KN_DECODE_CHUNK : 1;
  const kn_type s_f32 = L->s_f32;
  kn_builder body;
  /* in-page: the block's page is carried, read from the table one block early (the entry of
   * the next block, or of the last key where there is none: the table entry in use is always
   * one of the sequence's), so the GPUs' copy of the next block waits for no table read
   * (cp.async one iteration ahead, its page what this iteration yields:
   * compiler/gpu/assign_layouts.c remat_ok); and so are the block's table index and slot,
   * stepped by BLOCK_N (a page holds whole blocks: page_size % BLOCK_N == 0, and lo is a
   * multiple of BLOCK_N), so the loop divides by the page size nowhere: the one division of
   * key lo and of the last key are the program's.  Pages (page_size % 16 == 0): the block's
   * first key's entry and slot are carried and so are its chunks' pages, read a block early;
   * a chunk's entry and slot are its first key's by the page size's reciprocal */
  const bool carry = how == KV_IN_PAGE, chunks = how == KV_PAGES;
  enum { MAXC = 256 / KN_DECODE_CHUNK };
  kn_value *init[3 + 2 + MAXC] = {L->neg_inf_r, L->zero_r, L->zero_acc, NULL, NULL, NULL};
  kn_value *last_idx = NULL, *recip = NULL;
  int ncar = 3;
  if (carry) {
    const kn_paged_kv *pg = L->kv->paged;
    kn_paged_key(&g->b, pg, L->k_last, &last_idx, NULL);
    kn_paged_key(&g->b, pg, L->lo, &init[5], &init[4]);
    init[3] = kn_paged_page(&g->b, pg, op2(g, KN_OP_MIN, init[5], last_idx, "kv_lo_index"));
    ncar = 6;
  } else if (chunks) {
    const kn_paged_kv *pg = L->kv->paged;
    KN_ASSERT(C >= 1 && C <= MAXC);
    kn_paged_key(&g->b, pg, L->k_last, &last_idx, NULL);
    kn_paged_key(&g->b, pg, L->lo, &init[3], &init[4]);  /* index, slot of key lo */
    recip = kn_paged_recip(&g->b, pg);
    for (int c = 0; c < C; c++)
      init[5 + c] = chunk_page(g, L, init[3], init[4], c, recip, last_idx, NULL);
    ncar = 5 + C;
  }
  kn_op *loop = kn_b_for(&g->b, L->lo, L->hi, L->c_bn, ncar, init, &body);
  kn_builder outer = g->b;
  g->b = body;
  kn_value *n0 = nm(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF, loop->region[0]->args[0], BN), "n0");
  kn_value *m_i = nm(g, loop->region[0]->args[1], "m_i");  /* (BM) running max, exp2 units */
  kn_value *l_i = nm(g, loop->region[0]->args[2], "l_i");  /* (BM) running sum of p */
  kn_value *acc = nm(g, loop->region[0]->args[3], "acc");  /* (BM, DP) unnormalised O */
  kn_value *page = NULL, *slot = NULL, *next[3 + 2 + MAXC] = {NULL};
  kn_value *cpage[MAXC] = {NULL}, *cslot[MAXC] = {NULL};
  if (carry) {
    page = nm(g, loop->region[0]->args[4], "blk_page");
    slot = nm(g, loop->region[0]->args[5], "blk_slot");
    kn_value *idx = nm(g, loop->region[0]->args[6], "blk_index");
    /* the next block: slot + BLOCK_N, or slot 0 of the next entry where that ends the page */
    kn_value *step = op2(g, KN_OP_ADD, slot, L->c_bn, "slot_step");
    kn_value *wrap = nm(g, kn_b_cmp(&g->b, KN_PRED_GE, step, L->kv->paged->page_size),
                        "page_end");
    next[2] = op2(g, KN_OP_ADD, idx,
                  nm(g, kn_b_select(&g->b, wrap, i32c(g, 1, "c1_w"), L->c0), "index_step"),
                  "next_index");
    next[1] = nm(g, kn_b_select(&g->b, wrap, L->c0, step), "next_slot");
    next[0] = kn_paged_page(&g->b, L->kv->paged,
                            op2(g, KN_OP_MIN, next[2], last_idx, "next_entry"));
  } else if (chunks) {
    kn_value *idx = nm(g, loop->region[0]->args[4], "blk_index");
    kn_value *s0 = nm(g, loop->region[0]->args[5], "blk_slot");
    for (int c = 0; c < C; c++) {
      cpage[c] = nm(g, loop->region[0]->args[6 + c], "chunk_page");
      chunk_page(g, L, idx, s0, c, recip, NULL, &cslot[c]);
    }
  }
  kn_value *kt[MAXC], *vt[MAXC], *n0c[MAXC];
  for (int c = 0; c < C; c++) {
    n0c[c] = c ? op2(g, KN_OP_ADD, n0, i32c(g, KN_DECODE_CHUNK * c, "c_chunk_n"), "chunk_n0")
               : n0;
    kv_rows(g, L->kv, how, L->kvt, W, L->D, DP, n0c[c], chunks ? cpage[c] : page,
            chunks ? cslot[c] : slot, L->c0, L->c_d, L->one64, &kt[c], &vt[c]);
  }
  if (L->kvt != dt)  /* fp8 K and V: converted exactly (every fp8 value is an f16 and a bf16) */
    for (int c = 0; c < C; c++) {
      kt[c] = nm(g, kn_b_cast(&g->b, kt[c], dt), "k_conv");
      vt[c] = nm(g, kn_b_cast(&g->b, vt[c], dt), "v_conv");
    }
  kn_value *sc_all[MAXC];
  for (int c = 0; c < C; c++) {
    kn_value *qk = nm(g, kn_b_dot(&g->b, L->q_tile, kt[c], f32c(g, s_f32, 0.0, "zero_s")), "qk");
    kn_value *cols = spread(g, op2(g, KN_OP_ADD, L->kcols, fill(g, n0c[c], W, 0, "n0_v"), "cols"),
                            0, BM, W, "cols_s");
    /* in range for memory-reading modifiers; the key bound masks what is past it */
    kn_value *kv_idx = op2(g, KN_OP_MIN, cols, L->k_last_s, "kv_idx");
    kn_value *s = NULL;
    if (L->nscore) {
      /* the score modifiers see the scaled score in natural units */
      kn_value *sc = op2(g, KN_OP_MUL, qk, fill(g, L->sm_scale, BM, W, "sm_scale_s"), "score");
      for (int i = 0; i < L->plan->nmods; i++) {
        if (L->plan->mod[i].kind != KN_MOD_SCORE) continue;
        kn_value *fixed[KN_MOD_FIXED_SCORE] = {sc, L->bidx, L->h_s, L->q_s, kv_idx};
        sc = mod_call(g, &L->plan->mod[i], fixed, KN_MOD_FIXED_SCORE, L->P, s_f32, "score_mod");
      }
      kn_value *log2e = f32c(g, kn_ty_scalar(KN_F32), M_LOG2E, "c_log2e_s");
      s = op2(g, KN_OP_MUL, sc, fill(g, log2e, BM, W, "log2e_s"), "s");
    } else {
      s = op2(g, KN_OP_MUL, qk, L->qk_scale_s, "s");
    }
    kn_value *live = nm(g, kn_b_cmp(&g->b, KN_PRED_LT, cols, L->hi_s), "in_piece");
    for (int i = 0; i < L->plan->nmods; i++) {
      if (L->plan->mod[i].kind != KN_MOD_MASK) continue;
      kn_value *fixed[KN_MOD_FIXED_MASK] = {L->bidx, L->h_s, L->q_s, kv_idx};
      kn_value *vis = mod_call(g, &L->plan->mod[i], fixed, KN_MOD_FIXED_MASK, L->P,
                               kn_ty_tile2(KN_I1, BM, W), "visible");
      live = op2(g, KN_OP_AND, live, vis, "live");
    }
    sc_all[c] = nm(g, kn_b_select(&g->b, live, s, L->neg_inf_s), "s_masked");
  }
  if (chunks) {
    /* the next block's first key: BLOCK_N on, its entry and slot, then its chunks' pages (read
     * here, after the QK dots: the V copies, issued at the first, wait for no table read; the
     * next block's K copies, issued at the last PV dot, read what these yield) */
    kn_value *idx = loop->region[0]->args[4], *s0 = loop->region[0]->args[5];
    kn_value *t = op2(g, KN_OP_ADD, s0, L->c_bn, "slot_step");
    kn_value *q = kn_paged_entries(&g->b, t, recip);
    next[0] = op2(g, KN_OP_ADD, idx, q, "next_index");
    next[1] = op2(g, KN_OP_SUB, t, op2(g, KN_OP_MUL, q, L->kv->paged->page_size, "next_first"),
                  "next_slot");
    for (int c = 0; c < C; c++)
      next[2 + c] = chunk_page(g, L, next[0], next[1], c, recip, last_idx, NULL);
  }
  kn_value *smax = sc_all[0];  /* the chunks' scores merged: one row max for the block */
  for (int c = 1; c < C; c++) smax = op2(g, KN_OP_MAX, smax, sc_all[c], "s_chunks_max");
  kn_value *m_new = op2(g, KN_OP_MAX, m_i, nm(g, kn_b_reduce(&g->b, KN_OP_REDUCE_MAX, smax, 1),
                                              "m_blk"), "m_new");
  kn_value *dead = nm(g, kn_b_cmp(&g->b, KN_PRED_EQ, m_new, L->neg_inf_r), "no_key");
  kn_value *m_sub = nm(g, kn_b_select(&g->b, dead, L->zero_r, m_new), "m_sub");
  kn_value *m_sub_s = spread(g, m_sub, 1, BM, W, "m_sub_s");
  kn_value *p[MAXC], *psum = NULL;
  for (int c = 0; c < C; c++) {
    p[c] = nm(g, kn_b_unary(&g->b, KN_OP_EXP2, op2(g, KN_OP_SUB, sc_all[c], m_sub_s, "s_shift")),
              "p");
    psum = c ? op2(g, KN_OP_ADD, psum, p[c], "p_chunks_sum") : p[c];
  }
  kn_value *alpha = nm(g, kn_b_unary(&g->b, KN_OP_EXP2, op2(g, KN_OP_SUB, m_i, m_sub, "m_diff")),
                       "alpha");
  kn_value *l_new = op2(g, KN_OP_ADD, op2(g, KN_OP_MUL, l_i, alpha, "l_scaled"),
                        nm(g, kn_b_reduce(&g->b, KN_OP_REDUCE_SUM, psum, 1), "l_blk"), "l_new");
  kn_value *acc_new = op2(g, KN_OP_MUL, acc, spread(g, alpha, 1, BM, DP, "alpha_s"), "acc_scaled");
  for (int c = 0; c < C; c++) {
    kn_value *p_in = dt == KN_F32 ? p[c] : nm(g, kn_b_cast(&g->b, p[c], dt), "p_cast");
    acc_new = nm(g, kn_b_dot(&g->b, p_in, vt[c], acc_new), "acc_new");
  }
  kn_value *yield[3 + 2 + MAXC] = {m_new, l_new, acc_new};
  for (int i = 3; i < ncar; i++) yield[i] = next[i - 3];
  kn_b_yield(&g->b, ncar, yield);
  g->b = outer;
  for (int i = 0; i < 3; i++) res[i] = loop->res[i];
}

kn_func *kn_attn_decode_build(kn_module *m, const kn_attn_desc *d, const kn_attn_config *c,
                              kn_decode_read read, kn_diag *diag) {
  if (kn_attn_check(d, c, diag) || kn_attn_decode_check(NULL, d, c, diag)) return NULL;
  if ((unsigned)read > KN_DECODE_READ_PAGES || (read && d->layout != KN_ATTN_PAGED)) {
    kn_error(diag, NULL, (kn_loc){0}, "decode: read mode %d is for paged kernels only", read);
    return NULL;
  }
  if (read == KN_DECODE_READ_PAGES && (c->block_n % KN_DECODE_CHUNK ||
                                       c->block_n > KN_ATTN_MAX_PAGE)) {
    kn_error(diag, NULL, (kn_loc){0}, "decode: the pages kernel reads chunks of %d keys: "
             "block_n %d is not a multiple of %d (at most %d)", KN_DECODE_CHUNK, c->block_n,
             KN_DECODE_CHUNK, KN_ATTN_MAX_PAGE);
    return NULL;
  }
  const kn_scalar dt = d->dtype, qt = kn_attn_q_type(d), kvt = kn_attn_kv_type(d);
  const int BM = c->block_m, BN = c->block_n, D = d->head_dim, DP = kn_attn_head_pad(D);
  const kn_type f32 = kn_ty_scalar(KN_F32), row_f32 = kn_ty_tile1(KN_F32, BM),
                acc_f32 = kn_ty_tile2(KN_F32, BM, DP);
  /* the score tiles: a block's, or (pages) one chunk's of 16 keys */
  const int W = read == KN_DECODE_READ_PAGES ? KN_DECODE_CHUNK : BN;
  const kn_type s_f32 = kn_ty_tile2(KN_F32, BM, W);
  if (!m->source && kn_attn_mods_parse(m, d, diag)) return NULL;
  if (m->nfuncs && kn_verify(m, diag)) return NULL;
  kn_attn_plan *plan = kn_arena_alloc(m->arena, sizeof *plan);
  if (kn_attn_plan_make(m, d, plan, diag)) return NULL;
  kn_attn_sig *sig = &plan->sig;
  decode_sig(sig);
  const char *pnames[KN_ATTN_MAX_PARAMS];
  for (int i = 0; i < sig->n; i++) pnames[i] = sig->name[i];
  kn_func *f = kn_func_new(m, kn_attn_decode_symbol(read), true, sig->n, sig->type, pnames, 0,
                           NULL);
  kn_func_set_meta(f, "BLOCK_M", BM);
  kn_func_set_meta(f, "BLOCK_N", BN);
  kn_func_set_meta(f, "HEAD_DIM", D);
  kn_func_set_meta(f, "CAUSAL", d->causal);
  kn_func_set_meta(f, "WARPS", c->warps);
  kn_func_set_meta(f, "STAGES", c->stages);
  kn_func_set_meta(f, "DECODE", 1);
  if (c->mfma) kn_func_set_meta(f, "MFMA", c->mfma);

  dgen G = {.b = kn_builder_at_end(m, f->body)}, *g = &G;
  kn_value *P[KN_ATTN_MAX_PARAMS];
  for (int i = 0; i < sig->n; i++) P[i] = kn_func_param(f, i);
  kn_value *ws_o = P[param_of(sig, "ws_o")], *ws_lse = P[param_of(sig, "ws_lse")];
  kn_value *nsplit = P[param_of(sig, "num_splits")], *split_len = P[param_of(sig, "split_len")];
  kn_value *seqlen_q = P[P_SEQLEN_Q], *seqlen_k = P[P_SEQLEN_K], *group = P[P_KV_GROUP];

  /* which piece, which row block, which (batch, kv head) */
  kn_value *pid0 = nm(g, kn_b_program_id(&g->b, 0), "pid_split_m");
  kn_value *pid1 = nm(g, kn_b_program_id(&g->b, 1), "pid_bk");
  kn_value *split = op2(g, KN_OP_REM, pid0, nsplit, "split");
  kn_value *mblk = op2(g, KN_OP_DIV, pid0, nsplit, "m_blk");
  kn_value *kvh = op2(g, KN_OP_DIV, P[P_HEADS], group, "kv_heads");
  kn_value *bidx = op2(g, KN_OP_DIV, pid1, kvh, "b");
  kn_value *hk = op2(g, KN_OP_REM, pid1, kvh, "hk");
  kn_value *c0 = i32c(g, 0, "c0"), *c1 = i32c(g, 1, "c1"), *c_d = i32c(g, D, "c_head_dim");
  kn_value *c_bm = i32c(g, BM, "c_block_m"), *c_bn = i32c(g, BN, "c_block_n");
  kn_value *one64 = i64c(g, 1, "c1_i64");
  kn_value *b64 = to64(g, bidx, "b64"), *hk64 = to64(g, hk, "hk64");

  /* packed rows: r = m_blk * BM + i; its head hk * group + r / seqlen_q (clamped into the group
   * for the padding rows, which are computed but never merged) and query position r % seqlen_q */
  kn_value *nq1 = op2(g, KN_OP_MAX, seqlen_q, c1, "seqlen_q_1");
  kn_value *live_rows = op2(g, KN_OP_MUL, group, nq1, "live_rows");
  kn_value *row0 = op2(g, KN_OP_MUL, mblk, c_bm, "row0");
  kn_value *rows = op2(g, KN_OP_ADD, nm(g, kn_b_arange(&g->b, 0, BM), "m_range"),
                       fill(g, row0, BM, 0, "row0_v"), "rows");
  kn_value *g_last = op2(g, KN_OP_SUB, group, c1, "group_last");
  kn_value *hg = op2(g, KN_OP_MIN, op2(g, KN_OP_DIV, rows, fill(g, nq1, BM, 0, "nq_v"), "row_g"),
                     fill(g, g_last, BM, 0, "g_last_v"), "row_g_c");
  kn_value *qpos = op2(g, KN_OP_REM, rows, fill(g, nq1, BM, 0, "nq_v2"), "row_q");
  kn_value *hrow = op2(g, KN_OP_ADD, op2(g, KN_OP_MUL, fill(g, hk, BM, 0, "hk_v"),
                                         fill(g, group, BM, 0, "group_v"), "hk_g"), hg, "row_h");

  /* Q: (BM, DP) gathered at b*q_sb + h*q_sh + q*q_sm + d; padding rows and columns read 0 */
  kn_value *q_b = at(g, P[P_Q], b64, P[P_Q_SB], NULL, NULL, "q_b");
  kn_value *roff = op2(g, KN_OP_ADD,
                       op2(g, KN_OP_MUL, to64(g, hrow, "row_h64"), fill(g, P[P_Q_SH], BM, 0,
                                                                         "q_sh_v"), "q_hoff"),
                       op2(g, KN_OP_MUL, to64(g, qpos, "row_q64"), fill(g, P[P_Q_SM], BM, 0,
                                                                         "q_sm_v"), "q_moff"),
                       "q_roff");
  kn_value *dcols = nm(g, kn_b_arange(&g->b, 0, DP), "d_range");
  kn_value *qoffs = op2(g, KN_OP_ADD, spread(g, roff, 1, BM, DP, "q_roff_s"),
                        spread(g, to64(g, dcols, "d_range64"), 0, BM, DP, "q_coff_s"), "q_offs");
  kn_value *q_in = op2(g, KN_OP_AND,
                       spread(g, nm(g, kn_b_cmp(&g->b, KN_PRED_LT, rows,
                                                fill(g, live_rows, BM, 0, "live_v")), "row_in"),
                              1, BM, DP, "row_in_s"),
                       spread(g, nm(g, kn_b_cmp(&g->b, KN_PRED_LT, dcols,
                                                fill(g, c_d, DP, 0, "d_v")), "col_in"),
                              0, BM, DP, "col_in_s"), "q_in");
  kn_value *q_tile = nm(g, kn_b_gather(&g->b, kn_ty_tile2(qt, BM, DP), q_b, qoffs, q_in, NULL),
                        "q_tile");
  if (qt != dt) q_tile = nm(g, kn_b_cast(&g->b, q_tile, dt), "q_conv");
  /* fp8 inputs (attention.h, the forward's dequantisation): every packed row is of kv head hk,
   * so the descales of (b, hk) are two scalars of the program: q's and k's fold into the score
   * scale, v's into the output */
  kn_value *sm_scale = P[P_SM_SCALE], *v_scale = NULL;
  if (kn_attn_is_fp8(d)) {
    kn_value *qk_d;
    kn_attn_fp8_scales(&g->b, sig, P, b64, hk64, &qk_d, &v_scale);
    sm_scale = op2(g, KN_OP_MUL, sm_scale, qk_d, "sm_scale_d");
  }

  kv_view kv = {.k_sn = P[P_K_SN], .v_sn = P[P_V_SN]};
  kn_paged_kv pg_kv;
  if (d->layout == KN_ATTN_PAGED) {
    /* the pools have no batch axis (k_sb, v_sb are their page strides); the sequence's keys
     * are its own cache length, which bounds everything below (the pieces, the masks, the
     * modifiers' seqlen_k), and its pieces cut that length, not the table's capacity: each is
     * cdiv(its blocks, num_splits) blocks (split_len, the capacity's, is the most it can be) */
    pg_kv = kn_paged_open(&g->b, sig, P, b64, seqlen_k);
    P[P_SEQLEN_K] = seqlen_k = pg_kv.len;
    kv.paged = &pg_kv;
    kv.k_base = at(g, P[P_K], hk64, P[P_K_SH], NULL, NULL, "k_base");
    kv.v_base = at(g, P[P_V], hk64, P[P_V_SH], NULL, NULL, "v_base");
    kv.k_ps = P[P_K_SB], kv.v_ps = P[P_V_SB];
    kn_value *blocks = op2(g, KN_OP_DIV, op2(g, KN_OP_ADD, seqlen_k, i32c(g, BN - 1, "c_bn1"),
                                             "seq_blocks0"), c_bn, "seq_blocks");
    kn_value *per = op2(g, KN_OP_DIV, op2(g, KN_OP_ADD, blocks, op2(g, KN_OP_SUB, nsplit, c1,
                                                                   "nsplit_1"), "per0"),
                        nsplit, "seq_per");
    split_len = op2(g, KN_OP_MUL, per, c_bn, "seq_split_len");
    if (read == KN_DECODE_READ_ANY)
      kv.in_page = nm(g, kn_b_cmp(&g->b, KN_PRED_EQ, op2(g, KN_OP_REM, kv.paged->page_size,
                                                          c_bn, "page_rem"), c0), "in_page");
  } else {
    kv.k_base = at(g, P[P_K], b64, P[P_K_SB], hk64, P[P_K_SH], "k_base");
    kv.v_base = at(g, P[P_V], b64, P[P_V_SB], hk64, P[P_V_SH], "v_base");
  }
  kv.seqlen_k = seqlen_k;

  /* the piece [lo, hi): split * split_len .. + split_len, within seqlen_k; top-left causal ends
   * at seqlen_q (no row sees a key past it); a window's left edge starts at the first row's
   * first key, rounded down to a block (the masks below do the rest) */
  kn_value *lo = op2(g, KN_OP_MUL, split, split_len, "kv_lo_s");
  kn_value *hi = op2(g, KN_OP_MIN, op2(g, KN_OP_ADD, lo, split_len, "kv_hi_s"), seqlen_k,
                     "kv_hi");
  if (d->causal == KN_CAUSAL_TOP_LEFT) hi = op2(g, KN_OP_MIN, hi, seqlen_q, "kv_hi_tl");
  if (d->window && !d->prefix) {
    kn_value *wl = P[param_of(sig, "window_left")];
    kn_value *first = op2(g, KN_OP_SUB, op2(g, KN_OP_SUB, seqlen_k, seqlen_q, "diag_off"), wl,
                          "w_first");
    first = op2(g, KN_OP_MUL, op2(g, KN_OP_DIV, op2(g, KN_OP_MAX, first, c0, "w_first_pos"), c_bn,
                                  "w_blk"), c_bn, "w_lo");
    kn_value *bounded = nm(g, kn_b_cmp(&g->b, KN_PRED_GE, wl, c0), "w_left_bounded");
    lo = op2(g, KN_OP_MAX, lo, nm(g, kn_b_select(&g->b, bounded, first, c0), "w_lo_s"), "kv_lo");
  }

  /* the modifiers' view: (BM, BN) heads and query positions (kv_idx per block below) */
  int nscore = 0, nmask = 0;
  for (int i = 0; i < plan->nmods; i++) {
    nscore += plan->mod[i].kind == KN_MOD_SCORE;
    nmask += plan->mod[i].kind == KN_MOD_MASK;
  }
  kn_value *h_s = NULL, *q_s = NULL;
  if (nscore + nmask) {
    h_s = spread(g, hrow, 1, BM, W, "h_idx");
    q_s = spread(g, qpos, 1, BM, W, "q_idx");
  }
  kn_value *kcols = nm(g, kn_b_arange(&g->b, 0, W), "n_range");
  kn_value *hi_s = fill(g, hi, BM, W, "kv_hi_v");
  kn_value *k_last = op2(g, KN_OP_MAX, op2(g, KN_OP_SUB, seqlen_k, c1, "k_last0"), c0, "k_last");
  kn_value *k_last_s = fill(g, k_last, BM, W, "k_last_v");
  kn_value *qk_scale = op2(g, KN_OP_MUL, sm_scale, f32c(g, f32, M_LOG2E, "c_log2e"),
                           "qk_scale");
  kn_value *qk_scale_s = fill(g, qk_scale, BM, W, "qk_scale_s");
  kn_value *neg_inf_s = f32c(g, s_f32, -INFINITY, "neg_inf_s");
  kn_value *neg_inf_r = f32c(g, row_f32, -INFINITY, "neg_inf_r");
  kn_value *zero_r = f32c(g, row_f32, 0.0, "zero_r"), *one_r = f32c(g, row_f32, 1.0, "one_r");

  loop_in L = {.plan = plan, .P = P, .kv = &kv, .dt = dt, .kvt = kvt, .BM = BM, .BN = BN,
               .D = D, .DP = DP, .W = W, .nscore = nscore, .s_f32 = s_f32, .sm_scale = sm_scale,
               .lo = lo, .hi = hi, .c_bn = c_bn, .c0 = c0, .c_d = c_d, .one64 = one64,
               .q_tile = q_tile, .kcols = kcols, .bidx = bidx, .h_s = h_s, .q_s = q_s,
               .k_last = k_last, .k_last_s = k_last_s, .qk_scale_s = qk_scale_s, .hi_s = hi_s,
               .neg_inf_s = neg_inf_s, .neg_inf_r = neg_inf_r, .zero_r = zero_r,
               .zero_acc = f32c(g, acc_f32, 0.0, "zero_acc")};
  kn_value *fin[3];
  if (!kv.paged) {
    kv_loop(g, &L, KV_DENSE, fin);
  } else if (read != KN_DECODE_READ_ANY) {
    /* one read mode: the launch chose this kernel by the page size (attn_decode.h) */
    kv_loop(g, &L, read == KN_DECODE_READ_IN_PAGE ? KV_IN_PAGE
                   : read == KN_DECODE_READ_PAGES ? KV_PAGES : KV_GATHER, fin);
  } else {
    /* versioned on the page size: where every block lies in one page (page_size a multiple of
     * BLOCK_N: pages of 64..256 at the NVIDIA default's 32 keys), a loop of block loads, which
     * the GPUs stream with cp.async one block ahead as the dense loop does (the next block's
     * page read from the table a block early and carried: kv_loop); else a loop of row
     * gathers.  One branch per program, taken the same way by all: the choice costs nothing in
     * the loop. */
    kn_builder then_b, else_b;
    kn_op *br = kn_b_if(&g->b, kv.in_page, 3, (kn_type[]){row_f32, row_f32, acc_f32}, &then_b,
                        &else_b);
    kn_builder outer = g->b;
    kn_value *r[3];
    g->b = then_b;
    kv_loop(g, &L, KV_IN_PAGE, r);
    kn_b_yield(&g->b, 3, r);
    g->b = else_b;
    kv_loop(g, &L, KV_GATHER, r);
    kn_b_yield(&g->b, 3, r);
    g->b = outer;
    for (int i = 0; i < 3; i++) fin[i] = br->res[i];
  }

  /* the piece's normalised rows and their log2-sum-exp (-inf: no key of this piece) */
  kn_value *l_fin = nm(g, fin[1], "l_final");
  kn_value *l_zero = nm(g, kn_b_cmp(&g->b, KN_PRED_EQ, l_fin, zero_r), "l_zero");
  kn_value *l_safe = nm(g, kn_b_select(&g->b, l_zero, one_r, l_fin), "l_safe");
  kn_value *inv_l = op2(g, KN_OP_DIV, one_r, l_safe, "inv_l");
  if (v_scale) inv_l = op2(g, KN_OP_MUL, inv_l, fill(g, v_scale, BM, 0, "v_descale_r"), "inv_l_v");
  kn_value *out = op2(g, KN_OP_MUL, fin[2], spread(g, inv_l, 1, BM, DP, "inv_l_s"), "out");
  kn_value *lse2 = op2(g, KN_OP_ADD, fin[0], nm(g, kn_b_unary(&g->b, KN_OP_LOG2, l_safe),
                                                      "log2_l"), "lse2");
  /* workspace slot (pid_bk * num_splits + split): its ws_rows = live_rows rows from row0 (the
   * padding rows are not stored: at GQA 4 and one query row they would be 3/4 of the bytes) */
  kn_value *slot = op2(g, KN_OP_ADD, op2(g, KN_OP_MUL, pid1, nsplit, "slot_bk"), split, "slot");
  kn_value *wrow = op2(g, KN_OP_MUL, to64(g, slot, "slot64"), to64(g, live_rows, "ws_rows64"),
                       "ws_row");
  kn_value *c_dp64 = i64c(g, DP, "c_dp64");
  kn_value *o_at = at(g, ws_o, wrow, c_dp64, NULL, NULL, "ws_o_base");
  kn_b_store(&g->b, out, o_at, (kn_value *[]){row0, c0}, (kn_value *[]){c_dp64, one64},
             (kn_value *[]){live_rows, i32c(g, DP, "c_dp")}, NULL);
  kn_value *l_at = nm(g, kn_b_ptradd(&g->b, ws_lse, wrow), "ws_lse_base");
  kn_b_store(&g->b, lse2, l_at, (kn_value *[]){row0}, (kn_value *[]){one64},
             (kn_value *[]){live_rows}, NULL);
  kn_b_return(&g->b, 0, NULL);
  return f;
}

/* ---- the combine kernel ---------------------------------------------------------------------------- */

static const char *const combine_names[KN_DECODE_COMBINE_NPARAMS] = {
    "ws_o", "ws_lse", "o", "lse", "seqlen_q", "heads", "kv_group", "num_splits", "ws_rows",
    "o_sb", "o_sh", "o_sm", "lse_sb", "lse_sh"};
enum { C_WS_O, C_WS_LSE, C_O, C_LSE, C_SEQLEN_Q, C_HEADS, C_GROUP, C_NSPLIT, C_WS_ROWS, C_O_SB,
       C_O_SH, C_O_SM, C_LSE_SB, C_LSE_SH };
_Static_assert((int)C_O_SB == (int)KN_DECODE_C_O_SB && (int)C_LSE_SB == (int)KN_DECODE_C_LSE_SB,
               "attn_decode.h's combine indices disagree");

static kn_type combine_type(const kn_attn_desc *d, int i) {
  return i == C_O ? kn_ty_ptr(d->dtype) : i < C_SEQLEN_Q ? kn_ty_ptr(KN_F32)
       : i < C_O_SB ? kn_ty_scalar(KN_I32) : kn_ty_scalar(KN_I64);
}

int kn_attn_decode_signature(const kn_attn_desc *d, int which, kn_attn_sig *sig, kn_diag *diag) {
  if (which == 0) {
    if (kn_attn_signature(d, sig, diag)) return -1;
    decode_sig(sig);
    return 0;
  }
  sig->n = KN_DECODE_COMBINE_NPARAMS;
  for (int i = 0; i < KN_DECODE_COMBINE_NPARAMS; i++) {
    snprintf(sig->name[i], sizeof sig->name[0], "%s", combine_names[i]);
    sig->type[i] = combine_type(d, i);
  }
  return 0;
}

kn_func *kn_attn_decode_combine_build(kn_module *m, const kn_attn_desc *d, kn_diag *diag) {
  kn_attn_config any = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
  if (kn_attn_check(d, &any, diag)) return NULL;
  const int BQ = KN_DECODE_MAX_Q, D = d->head_dim, DP = kn_attn_head_pad(D);
  const kn_type row_f32 = kn_ty_tile1(KN_F32, BQ), o_f32 = kn_ty_tile2(KN_F32, BQ, DP);
  kn_type types[KN_DECODE_COMBINE_NPARAMS];
  for (int i = 0; i < KN_DECODE_COMBINE_NPARAMS; i++) types[i] = combine_type(d, i);
  kn_func *f = kn_func_new(m, "attn_decode_combine", true, KN_DECODE_COMBINE_NPARAMS, types,
                           combine_names, 0, NULL);
  kn_func_set_meta(f, "HEAD_DIM", D);
  kn_func_set_meta(f, "HAS_LSE", d->has_lse);
  kn_func_set_meta(f, "WARPS", 1);
  kn_func_set_meta(f, "DECODE", 2);
  dgen G = {.b = kn_builder_at_end(m, f->body)}, *g = &G;
  kn_value *P[KN_DECODE_COMBINE_NPARAMS];
  for (int i = 0; i < KN_DECODE_COMBINE_NPARAMS; i++) P[i] = kn_func_param(f, i);
  kn_value *pid = nm(g, kn_b_program_id(&g->b, 1), "pid_bh");
  kn_value *bidx = op2(g, KN_OP_DIV, pid, P[C_HEADS], "b");
  kn_value *h = op2(g, KN_OP_REM, pid, P[C_HEADS], "h");
  kn_value *kvh = op2(g, KN_OP_DIV, P[C_HEADS], P[C_GROUP], "kv_heads");
  kn_value *hk = op2(g, KN_OP_DIV, h, P[C_GROUP], "hk");
  kn_value *hg = op2(g, KN_OP_REM, h, P[C_GROUP], "hg");
  kn_value *c0 = i32c(g, 0, "c0"), *c_d = i32c(g, D, "c_head_dim"), *one64 = i64c(g, 1, "c1_i64");
  kn_value *c_dp64 = i64c(g, DP, "c_dp64");
  /* this head's rows of its (batch, kv head)'s slots: [hg * seqlen_q, (hg + 1) * seqlen_q) */
  kn_value *r0 = op2(g, KN_OP_MUL, hg, P[C_SEQLEN_Q], "row0");
  kn_value *r_end = op2(g, KN_OP_ADD, r0, P[C_SEQLEN_Q], "row_end");
  kn_value *bk = op2(g, KN_OP_ADD, op2(g, KN_OP_MUL, bidx, kvh, "b_kvh"), hk, "bk");
  kn_value *slot0 = op2(g, KN_OP_MUL, to64(g, bk, "bk64"), to64(g, P[C_NSPLIT], "nsplit64"),
                        "slot0");
  kn_value *rows64 = to64(g, P[C_WS_ROWS], "ws_rows64");
  kn_value *neg_inf_r = f32c(g, row_f32, -INFINITY, "neg_inf_r");
  kn_value *zero_r = f32c(g, row_f32, 0.0, "zero_r"), *one_r = f32c(g, row_f32, 1.0, "one_r");
  kn_builder body;
  kn_value *init[3] = {neg_inf_r, zero_r, f32c(g, o_f32, 0.0, "zero_acc")};
  kn_op *loop = kn_b_for(&g->b, c0, P[C_NSPLIT], i32c(g, 1, "c1"), 3, init, &body);
  kn_builder outer = g->b;
  g->b = body;
  kn_value *sidx = nm(g, loop->region[0]->args[0], "s");
  kn_value *m_i = nm(g, loop->region[0]->args[1], "m_i");
  kn_value *l_i = nm(g, loop->region[0]->args[2], "l_i");
  kn_value *acc = nm(g, loop->region[0]->args[3], "acc");
  kn_value *row = op2(g, KN_OP_MUL, op2(g, KN_OP_ADD, slot0, to64(g, sidx, "s64"), "slot"), rows64,
                      "slot_row");
  kn_value *l_at = nm(g, kn_b_ptradd(&g->b, P[C_WS_LSE], row), "ws_lse_s");
  kn_value *o_at = at(g, P[C_WS_O], row, c_dp64, NULL, NULL, "ws_o_s");
  /* rows past this head's read -inf and 0, weight 0 */
  kn_value *l_s = nm(g, kn_b_load(&g->b, row_f32, l_at, (kn_value *[]){r0}, (kn_value *[]){one64},
                                  (kn_value *[]){r_end}, NULL,
                                  f32c(g, kn_ty_scalar(KN_F32), -INFINITY, "neg_inf")), "lse_s");
  kn_value *o_s = nm(g, kn_b_load(&g->b, o_f32, o_at, (kn_value *[]){r0, c0},
                                  (kn_value *[]){c_dp64, one64}, (kn_value *[]){r_end, c_d}, NULL,
                                  NULL), "o_s");
  kn_value *m_new = op2(g, KN_OP_MAX, m_i, l_s, "m_new");
  kn_value *dead = nm(g, kn_b_cmp(&g->b, KN_PRED_EQ, m_new, neg_inf_r), "no_key");
  kn_value *m_sub = nm(g, kn_b_select(&g->b, dead, zero_r, m_new), "m_sub");
  kn_value *alpha = nm(g, kn_b_unary(&g->b, KN_OP_EXP2, op2(g, KN_OP_SUB, m_i, m_sub, "m_diff")),
                       "alpha");
  kn_value *w = nm(g, kn_b_unary(&g->b, KN_OP_EXP2, op2(g, KN_OP_SUB, l_s, m_sub, "l_diff")), "w");
  kn_value *l_new = op2(g, KN_OP_ADD, op2(g, KN_OP_MUL, l_i, alpha, "l_scaled"), w, "l_new");
  kn_value *acc_new = op2(g, KN_OP_ADD,
                          op2(g, KN_OP_MUL, acc, spread(g, alpha, 1, BQ, DP, "alpha_s"),
                              "acc_scaled"),
                          op2(g, KN_OP_MUL, o_s, spread(g, w, 1, BQ, DP, "w_s"), "o_w"),
                          "acc_new");
  kn_b_yield(&g->b, 3, (kn_value *[]){m_new, l_new, acc_new});
  g->b = outer;
  kn_value *l_fin = nm(g, loop->res[1], "l_final");
  kn_value *l_zero = nm(g, kn_b_cmp(&g->b, KN_PRED_EQ, l_fin, zero_r), "l_zero");
  kn_value *l_safe = nm(g, kn_b_select(&g->b, l_zero, one_r, l_fin), "l_safe");
  kn_value *inv_l = op2(g, KN_OP_DIV, one_r, l_safe, "inv_l");
  kn_value *out = op2(g, KN_OP_MUL, loop->res[2], spread(g, inv_l, 1, BQ, DP, "inv_l_s"), "out");
  if (d->dtype != KN_F32) out = nm(g, kn_b_cast(&g->b, out, d->dtype), "out_cast");
  kn_value *b64 = to64(g, bidx, "b64"), *h64 = to64(g, h, "h64");
  kn_value *o_base = at(g, P[C_O], b64, P[C_O_SB], h64, P[C_O_SH], "o_base");
  kn_b_store(&g->b, out, o_base, (kn_value *[]){c0, c0}, (kn_value *[]){P[C_O_SM], one64},
             (kn_value *[]){P[C_SEQLEN_Q], c_d}, NULL);
  if (d->has_lse) {
    kn_value *lse2 = op2(g, KN_OP_ADD, loop->res[0],
                         nm(g, kn_b_unary(&g->b, KN_OP_LOG2, l_safe), "log2_l"), "lse2");
    kn_value *lse = op2(g, KN_OP_MUL, lse2, f32c(g, row_f32, M_LN2, "ln2_r"), "lse_rows");
    kn_value *lse_base = at(g, P[C_LSE], b64, P[C_LSE_SB], h64, P[C_LSE_SH], "lse_base");
    kn_b_store(&g->b, lse, lse_base, (kn_value *[]){c0}, (kn_value *[]){one64},
               (kn_value *[]){P[C_SEQLEN_Q]}, NULL);
  }
  kn_b_return(&g->b, 0, NULL);
  return f;
}

/* ---- arguments ---------------------------------------------------------------------------------------- */

int kn_attn_decode_fill_args(const kn_attn_desc *d, const kn_attn_sig *sig,
                             const kn_attn_config *c, const kn_attn_problem *p,
                             const kn_decode_plan *plan, void *q, void *k, void *v, void *o,
                             float *lse, float *ws_o, float *ws_lse, const kn_attn_vargs *va,
                             kn_argval *split, int split_grid[3], kn_argval *combine,
                             int combine_grid[3], kn_diag *diag) {
  if (p->seqlen_q > KN_DECODE_MAX_Q)
    return kn_error(diag, NULL, (kn_loc){0}, "decode: seqlen_q %d is above %d (the prefill "
                    "kernel serves it)", p->seqlen_q, KN_DECODE_MAX_Q);
  if (kn_attn_fill_args(d, sig, c, p, q, k, v, o, lse, va, split, split_grid, diag)) return -1;
  const int n = sig->n;
  split[n].p = ws_o;
  split[n + 1].p = ws_lse;
  split[n + 2].i = plan->splits;
  split[n + 3].i = plan->split_len;
  split_grid[0] = plan->row_blocks * plan->splits;
  split_grid[1] = p->batch * p->kv_heads;
  split_grid[2] = 1;
  memset(combine, 0, sizeof *combine * KN_DECODE_COMBINE_NPARAMS);
  combine[C_WS_O].p = ws_o;
  combine[C_WS_LSE].p = ws_lse;
  combine[C_O].p = o;
  combine[C_LSE].p = lse;
  combine[C_SEQLEN_Q].i = p->seqlen_q;
  combine[C_HEADS].i = p->heads;
  combine[C_GROUP].i = split[P_KV_GROUP].i;
  combine[C_NSPLIT].i = plan->splits;
  combine[C_WS_ROWS].i = plan->ws_rows;
  for (int i = 0; i < 5; i++) combine[C_O_SB + i].i = split[KN_ATTN_NPARAMS - 5 + i].i;
  combine_grid[0] = 1;
  combine_grid[1] = p->batch * p->heads;
  combine_grid[2] = 1;
  return 0;
}
