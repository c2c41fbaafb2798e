/* layout.c — the matrix-instruction lane tables, layout evaluation and the layout queries.
 *
 * Every register layout evaluates to the separable form of layout.h: per-register offsets plus
 * one delta per lane bit and per warp bit.  Each kind below builds its offsets and deltas from
 * its parameters; finish() then reduces every component modulo the shape (so a dim of size 1,
 * or a power-of-two dim smaller than the layout's coverage, becomes replication) and drops the
 * registers a thread would hold twice.  The queries (free conversion, reduction plan, vector
 * width) are answered on those maps; the unit test checks them against brute-force tables.
 *
 * Sources of the lane tables (facts only, no code taken):
 *  - AMD MFMA on wave64: AMD Matrix Instruction Calculator (ROCm/amd_matrix_instruction_calculator,
 *    `-d` register layouts for CDNA2/CDNA3) and AMD's ROCm blog "Introduction to Matrix Core
 *    Programming on AMD CDNA3 and CDNA4" (2025, section 5: the 16x16x16 f16 and 32x32x16 fp8
 *    examples, and the 32x32 C/D store pattern C[lane%32 + 32*(4*(lane/32) + j + 8*i)] for
 *    register 4i+j), consistent with the CDNA3 ISA guide's "Dependent arithmetic / MFMA" layout
 *    figures:
 *      32x32x8 f16/bf16_1k: A[lane%32][4*(lane/32)+e], B[4*(lane/32)+e][lane%32],
 *                           D reg j: row 8*(j/4) + 4*(lane/32) + j%4, col lane%32.
 *      16x16x16 f16/bf16_1k: A[lane%16][4*(lane/16)+e], B[4*(lane/16)+e][lane%16],
 *                           D reg j: row 4*(lane/16) + j, col lane%16.
 *      32x32x16 fp8 (gfx942), f16/bf16/fp8 (gfx950): A[lane%32][8*(lane/32)+e],
 *                           B[8*(lane/32)+e][lane%32], D as 32x32x8.
 *      16x16x32 f16/bf16 (gfx950): A[lane%16][8*(lane/16)+e], B[8*(lane/16)+e][lane%16],
 *                           D as 16x16x16.
 *  - NVIDIA mma.sync.m16n8k16 (.f16/.bf16 -> .f32): PTX ISA, "Matrix Fragments for
 *    mma.m16n8k16 with floating point type": groupID = lane>>2, tid = lane%4;
 *      A a_i: row groupID + 8*((i/2)%2), col 2*tid + i%2 + 8*(i/4);
 *      B b_i: row 2*tid + i%2 + 8*(i/2), col groupID;
 *      C c_i: row groupID + 8*(i/2), col 2*tid + i%2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

unsigned kn_gpu_test_breaks;  /* layout.h: never set outside tests */

static const kn_loc gpu_loc = {"layout", 0, 0};

/* ---- lane tables --------------------------------------------------------------------------- */

/* mma.sync m16n8k16's lane tables (A, B, C/D per warp), also wgmma m64nNk16's per warp */
#define NV_16X8X16_TABLES                                                                      \
  .a_regs = 8, .b_regs = 4, .acc_regs = 4,                                                     \
  .a_reg = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}},                   \
  .a_lane = {{0, 2}, {0, 4}, {1, 0}, {2, 0}, {4, 0}},                                          \
  .b_reg = {{0, 0}, {1, 0}, {8, 0}, {9, 0}},                                                   \
  .b_lane = {{2, 0}, {4, 0}, {0, 1}, {0, 2}, {0, 4}},                                          \
  .acc_reg = {{0, 0}, {0, 1}, {8, 0}, {8, 1}},                                                 \
  .acc_lane = {{0, 2}, {0, 4}, {1, 0}, {2, 0}, {4, 0}}

static const kn_mma_shape mma_shapes[KN_MMA_COUNT] = {
    [KN_MMA_MFMA_32X32X8] = {
        .id = KN_MMA_MFMA_32X32X8, .name = "mfma_32x32x8", .m = 32, .n = 32, .k = 8, .lanes = 64,
        .a_regs = 4, .b_regs = 4, .acc_regs = 16,
        .a_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}},
        .a_lane = {{1, 0}, {2, 0}, {4, 0}, {8, 0}, {16, 0}, {0, 4}},
        .b_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}},
        .b_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {0, 16}, {4, 0}},
        .acc_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {8, 0}, {9, 0}, {10, 0}, {11, 0},
                    {16, 0}, {17, 0}, {18, 0}, {19, 0}, {24, 0}, {25, 0}, {26, 0}, {27, 0}},
        .acc_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {0, 16}, {4, 0}},
    },
    [KN_MMA_MFMA_16X16X16] = {
        .id = KN_MMA_MFMA_16X16X16, .name = "mfma_16x16x16", .m = 16, .n = 16, .k = 16,
        .lanes = 64, .a_regs = 4, .b_regs = 4, .acc_regs = 4,
        .a_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}},
        .a_lane = {{1, 0}, {2, 0}, {4, 0}, {8, 0}, {0, 4}, {0, 8}},
        .b_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}},
        .b_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {4, 0}, {8, 0}},
        .acc_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}},
        .acc_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {4, 0}, {8, 0}},
    },
    /* 32x32x16 with 8 consecutive k per lane: gfx942 fp8, gfx950 f16 / bf16 / fp8 */
    [KN_MMA_MFMA_32X32X16] = {
        .id = KN_MMA_MFMA_32X32X16, .name = "mfma_32x32x16", .m = 32, .n = 32, .k = 16,
        .lanes = 64, .a_regs = 8, .b_regs = 8, .acc_regs = 16,
        .a_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}},
        .a_lane = {{1, 0}, {2, 0}, {4, 0}, {8, 0}, {16, 0}, {0, 8}},
        .b_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 0}, {6, 0}, {7, 0}},
        .b_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {0, 16}, {8, 0}},
        .acc_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {8, 0}, {9, 0}, {10, 0}, {11, 0},
                    {16, 0}, {17, 0}, {18, 0}, {19, 0}, {24, 0}, {25, 0}, {26, 0}, {27, 0}},
        .acc_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {0, 16}, {4, 0}},
    },
    /* gfx950 f16 / bf16: 8 consecutive k per lane, the D layout of 16x16x16 */
    [KN_MMA_MFMA_16X16X32] = {
        .id = KN_MMA_MFMA_16X16X32, .name = "mfma_16x16x32", .m = 16, .n = 16, .k = 32,
        .lanes = 64, .a_regs = 8, .b_regs = 8, .acc_regs = 4,
        .a_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}},
        .a_lane = {{1, 0}, {2, 0}, {4, 0}, {8, 0}, {0, 8}, {0, 16}},
        .b_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 0}, {6, 0}, {7, 0}},
        .b_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {8, 0}, {16, 0}},
        .acc_reg = {{0, 0}, {1, 0}, {2, 0}, {3, 0}},
        .acc_lane = {{0, 1}, {0, 2}, {0, 4}, {0, 8}, {4, 0}, {8, 0}},
    },
    [KN_MMA_NV_16X8X16] = {
        .id = KN_MMA_NV_16X8X16, .name = "mma_m16n8k16", .m = 16, .n = 8, .k = 16, .lanes = 32,
        NV_16X8X16_TABLES,
    },
    /* wgmma.mma_async.m64nNk16 (PTX ISA, "Register Fragments" of the warpgroup-level MMA,
     * figures "WGMMA .m64nNk16 register fragment layout for matrix A / accumulator D"): warp w
     * of a warpgroup holds rows 16w..16w+15 of the 64-row slab, and within the warp A is the
     * m16n8k16 A fragment and D the m16n8 C fragment repeated N/8 times (d[4j..4j+3] at columns
     * 8j..8j+7).  Evaluated with 16 rows per warp (kn_mma_fits: M = 16 * warps), the mma.sync
     * tables give exactly that map, register order included; B has no register table in
     * use (it is read from shared memory through a matrix descriptor), the m16n8k16 one stands
     * in for the layout pass's dot_b. */
    [KN_MMA_NV_WG64] = {
        .id = KN_MMA_NV_WG64, .name = "wgmma_m64nNk16", .m = 16, .n = 8, .k = 16, .lanes = 32,
        NV_16X8X16_TABLES,
    },
    /* Not an instruction: f32 dots on AMDGPU (no f32 MFMA is used) as FMAs in each thread,
     * written in the same tables so that the layout pass, the reduction plans and the dot
     * lowering treat it like one.  A wave's 16x32 block: lane bits 0-2 walk columns (4 apart),
     * bits 3-5 rows (2 apart); each lane holds 2 rows x 4 columns.  One "k step" is k = 1: the
     * lane needs A at its 2 rows and B at its 4 columns (lanes that share rows or columns hold
     * copies, delta 0), read from LDS.  Rows stay within a wave and are not transposed: a row
     * reduction is in-thread over 4 columns plus three butterflies (lane bits 0-2). */
    [KN_MMA_FMA_16X32] = {
        .id = KN_MMA_FMA_16X32, .name = "fma_16x32", .m = 16, .n = 32, .k = 1, .lanes = 64,
        .a_regs = 2, .b_regs = 4, .acc_regs = 8,
        .a_reg = {{0, 0}, {1, 0}},
        .a_lane = {{0, 0}, {0, 0}, {0, 0}, {2, 0}, {4, 0}, {8, 0}},
        .b_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}},
        .b_lane = {{0, 4}, {0, 8}, {0, 16}, {0, 0}, {0, 0}, {0, 0}},
        .acc_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {1, 3}},
        .acc_lane = {{0, 4}, {0, 8}, {0, 16}, {2, 0}, {4, 0}, {8, 0}},
    },
    /* The same for a warp of 32 (f32 dots on NVPTX: mma.sync has no exact f32 form): lane bits
     * 0-1 walk columns (4 apart), bits 2-4 rows (2 apart), a 16x16 block per warp. */
    [KN_MMA_FMA_16X16] = {
        .id = KN_MMA_FMA_16X16, .name = "fma_16x16", .m = 16, .n = 16, .k = 1, .lanes = 32,
        .a_regs = 2, .b_regs = 4, .acc_regs = 8,
        .a_reg = {{0, 0}, {1, 0}},
        .a_lane = {{0, 0}, {0, 0}, {2, 0}, {4, 0}, {8, 0}},
        .b_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}},
        .b_lane = {{0, 4}, {0, 8}, {0, 0}, {0, 0}, {0, 0}},
        .acc_reg = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {1, 0}, {1, 1}, {1, 2}, {1, 3}},
        .acc_lane = {{0, 4}, {0, 8}, {2, 0}, {4, 0}, {8, 0}},
    },
    /* fma_16x32 halved for dots whose n is not a multiple of 32 (f32 attention at head dims
     * 48, 80, ..., or block_n 16, on AMDGPU): a wave's 16x16 block, lane bits 0-2 walk columns
     * (2 apart), bits 3-5 rows (2 apart), each lane 2 rows x 2 columns. */
    [KN_MMA_FMA_16X16_W64] = {
        .id = KN_MMA_FMA_16X16_W64, .name = "fma_16x16_w64", .m = 16, .n = 16, .k = 1,
        .lanes = 64, .a_regs = 2, .b_regs = 2, .acc_regs = 4,
        .a_reg = {{0, 0}, {1, 0}},
        .a_lane = {{0, 0}, {0, 0}, {0, 0}, {2, 0}, {4, 0}, {8, 0}},
        .b_reg = {{0, 0}, {0, 1}},
        .b_lane = {{0, 2}, {0, 4}, {0, 8}, {0, 0}, {0, 0}, {0, 0}},
        .acc_reg = {{0, 0}, {0, 1}, {1, 0}, {1, 1}},
        .acc_lane = {{0, 2}, {0, 4}, {0, 8}, {2, 0}, {4, 0}, {8, 0}},
    },
};

const kn_mma_shape *kn_mma_shape_get(kn_mma_id id) {
  return id < KN_MMA_COUNT ? &mma_shapes[id] : NULL;
}

/* ---- constructors ------------------------------------------------------------------------- */

static int log2i(int x) {
  int b = 0;
  while ((1 << b) < x) b++;
  return b;
}
static bool pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }
static int min_i(int a, int b) { return a < b ? a : b; }
static int max_i(int a, int b) { return a > b ? a : b; }

kn_layout kn_layout_blocked(int rank, const int *shape, int contig_dim, int elem_bytes, int warps,
                            int lanes) {
  kn_layout l = {.kind = KN_LAYOUT_BLOCKED, .rank = (uint8_t)rank, .warps = (uint8_t)warps,
                 .lanes = (uint8_t)lanes};
  int c = rank == 1 ? 0 : contig_dim, o = 1 - c;
  int vec = min_i(16 / max_i(elem_bytes, 1), shape[c]);
  while (shape[c] % vec) vec /= 2;      /* a power of two dividing the contiguous extent */
  int groups = shape[c] / vec, tc = 1;
  while (tc * 2 <= lanes && groups % (tc * 2) == 0) tc *= 2;
  l.spt[c] = (uint8_t)vec;
  l.tpw[c] = (uint8_t)tc;
  l.wpp[c] = 1;
  if (rank == 2) {
    l.spt[o] = 1;
    l.tpw[o] = (uint8_t)(lanes / tc);
    l.wpp[o] = (uint8_t)warps;
    l.order[0] = (uint8_t)c;
    l.order[1] = (uint8_t)o;
  } else {
    /* rank 1: the lanes that do not fit replicate; warps replicate too */
    l.tpw[0] = (uint8_t)tc;
    l.wpp[0] = 1;
  }
  return l;
}

kn_layout kn_layout_mma(const kn_mma_shape *s, int warps, bool transposed) {
  kn_layout l = {.kind = KN_LAYOUT_MMA, .rank = 2, .warps = (uint8_t)warps,
                 .lanes = (uint8_t)s->lanes, .mma = s, .transposed = transposed};
  return l;
}

kn_layout kn_layout_dot(const kn_mma_shape *s, int warps, int opidx) {
  kn_layout l = {.kind = opidx ? KN_LAYOUT_DOT_B : KN_LAYOUT_DOT_A, .rank = 2,
                 .warps = (uint8_t)warps, .lanes = (uint8_t)s->lanes, .mma = s};
  /* k-width: the run of consecutive k one lane holds; MFMA: all its elements, mma.sync: 2 */
  l.kwidth = (uint8_t)(s->k == 1 ? 1 : s->lanes == 64 ? (opidx ? s->b_regs : s->a_regs) : 2);
  return l;
}

kn_layout kn_layout_slice(const kn_layout *parent, int dim) {
  kn_layout l = {.kind = KN_LAYOUT_SLICE, .rank = (uint8_t)(parent->rank - 1),
                 .warps = parent->warps, .lanes = parent->lanes, .dim = (uint8_t)dim,
                 .parent = parent};
  return l;
}

kn_layout kn_layout_shared_swizzled(int inner, const int *shape, int vec, int elem_bytes) {
  kn_layout l = {.kind = KN_LAYOUT_SHARED, .rank = 2, .warps = 1, .lanes = 64};
  vec = max_i(vec, 1);
  l.order[0] = (uint8_t)inner;
  l.order[1] = (uint8_t)(1 - inner);
  l.vec = (uint8_t)vec;
  /* Rows of the tile a wave reads at once start at the same bank every (inner * bytes) / 128
   * rows; XOR-ing the vec-group index with the row (per_phase rows share a phase) spreads
   * max_phase consecutive rows over distinct groups of the 128 bytes of all 32 banks. */
  int row_bytes = shape[inner] * elem_bytes;
  l.per_phase = (uint8_t)max_i(1, 128 / max_i(row_bytes, 1));
  int groups = shape[inner] / vec, mp = 1;
  int limit = max_i(1, 128 / (vec * elem_bytes));
  while (mp * 2 <= limit && groups % (mp * 2) == 0) mp *= 2;
  l.max_phase = (uint8_t)mp;
  return l;
}

kn_layout kn_layout_shared_wgmma(int inner, const int *shape, int elem_bytes) {
  (void)shape;
  kn_layout l = {.kind = KN_LAYOUT_SHARED, .rank = 2, .warps = 1, .lanes = 32};
  l.order[0] = (uint8_t)inner;
  l.order[1] = (uint8_t)(1 - inner);
  l.vec = (uint8_t)(16 / elem_bytes);
  l.per_phase = 1;
  l.max_phase = 8;
  l.cblock = (uint8_t)(128 / elem_bytes);
  return l;
}

kn_wgmma_desc kn_wgmma_desc_for(const kn_layout *s, const int *shape, int elem_bytes, int k0) {
  kn_wgmma_desc d = {.sbo = 1024, .trans = s->order[0] != 0};
  d.lbo = d.trans ? (int64_t)s->cblock * shape[1 - s->order[0]] * elem_bytes : 16;
  d.start = kn_shared_offset(s, shape, k0, 0) * elem_bytes;  /* (k0, 0): chunk phase 0 */
  return d;
}

kn_wgmma_desc kn_wgmma_desc_for_a(const kn_layout *s, const int *shape, int elem_bytes, int m0,
                                   int k0) {
  /* K-major A (rows m, elements k) is K-major B with n read as m: SBO 1024, LBO unused; M-major
   * A (rows k, elements m; imm-trans-a = 1) is N-major B with n read as m: LBO one column block
   * (64 m of every k row) */
  kn_wgmma_desc d = {.sbo = 1024, .lbo = 16, .trans = s->order[0] != 1};
  if (d.trans) d.lbo = (int64_t)s->cblock * shape[1] * elem_bytes;
  d.start = kn_shared_offset(s, shape, m0, k0) * elem_bytes;  /* m0 % 8 == 0: chunk phase 0 */
  return d;
}

kn_layout kn_layout_shared_for(const kn_layout *reader, const int *shape, int elem_bytes) {
  int inner, vec;
  if (reader->kind == KN_LAYOUT_DOT_A) inner = 1, vec = reader->kwidth;
  else if (reader->kind == KN_LAYOUT_DOT_B) inner = 0, vec = reader->kwidth;
  else if (reader->kind == KN_LAYOUT_BLOCKED) inner = reader->order[0], vec = reader->spt[reader->order[0]];
  else inner = 1, vec = 1;
  kn_layout l = kn_layout_shared_swizzled(inner, shape, vec, elem_bytes);
  l.warps = reader->warps;
  l.lanes = reader->lanes;
  if (reader->kind == KN_LAYOUT_DOT_A || reader->kind == KN_LAYOUT_DOT_B) {
    /* A dot reads one fragment per k step: with an XOR swizzle each would need its own address
     * (the XOR does not commute with the k offset), and the loop-invariant addresses would all
     * be hoisted into registers.  Padding keeps them affine: base + constant. */
    l.per_phase = l.max_phase = 1;
    l.pad = (uint8_t)max_i(vec, 8 / max_i(elem_bytes, 1));
    /* warps of 32 (mma.sync): a fragment read is 32 lanes x 4 bytes, lane (g, t) = (lane / 4,
     * lane % 4) reading row g at word t.  16 bytes of padding make consecutive rows start 4
     * banks apart, so 8 rows x 4 words cover the 32 banks once (8 bytes would give 2 apart: a
     * two-way conflict on every read) */
    if (reader->lanes == 32) l.pad = (uint8_t)max_i(l.pad, 16 / max_i(elem_bytes, 1));
  }
  return l;
}

bool kn_layout_eq(const kn_layout *a, const kn_layout *b) {
  if (a == b) return true;
  if (!a || !b || a->kind != b->kind || a->rank != b->rank || a->warps != b->warps ||
      a->lanes != b->lanes)
    return false;
  switch ((kn_layout_kind)a->kind) {
  case KN_LAYOUT_BLOCKED:
    return !memcmp(a->spt, b->spt, 2) && !memcmp(a->tpw, b->tpw, 2) &&
           !memcmp(a->wpp, b->wpp, 2) && (a->rank == 1 || !memcmp(a->order, b->order, 2));
  case KN_LAYOUT_MMA:
    return a->mma == b->mma && a->transposed == b->transposed;
  case KN_LAYOUT_DOT_A:
  case KN_LAYOUT_DOT_B:
    return a->mma == b->mma && a->kwidth == b->kwidth;
  case KN_LAYOUT_SLICE:
    return a->dim == b->dim && kn_layout_eq(a->parent, b->parent);
  case KN_LAYOUT_SHARED:
    return !memcmp(a->order, b->order, 2) && a->vec == b->vec && a->per_phase == b->per_phase &&
           a->max_phase == b->max_phase && a->pad == b->pad && a->cblock == b->cblock;
  }
  return false;
}

int kn_layout_format(const kn_layout *l, char *buf, size_t n) {
  char inner[256];
  switch ((kn_layout_kind)l->kind) {
  case KN_LAYOUT_BLOCKED:
    if (l->rank == 1)
      return snprintf(buf, n, "#blocked<spt=[%d], tpw=[%d], wpp=[%d]>", l->spt[0], l->tpw[0],
                      l->wpp[0]);
    return snprintf(buf, n, "#blocked<spt=[%d,%d], tpw=[%d,%d], wpp=[%d,%d], order=[%d,%d]>",
                    l->spt[0], l->spt[1], l->tpw[0], l->tpw[1], l->wpp[0], l->wpp[1],
                    l->order[0], l->order[1]);
  case KN_LAYOUT_MMA:
    return snprintf(buf, n, "#mma<%s, warps=[%d,1]%s>", l->mma->name, l->warps,
                    l->transposed ? ", transposed" : "");
  case KN_LAYOUT_DOT_A:
  case KN_LAYOUT_DOT_B:
    return snprintf(buf, n, "#dot_%c<#mma<%s, warps=[%d,1]>, kwidth=%d>",
                    l->kind == KN_LAYOUT_DOT_A ? 'a' : 'b', l->mma->name, l->warps, l->kwidth);
  case KN_LAYOUT_SLICE:
    kn_layout_format(l->parent, inner, sizeof inner);
    return snprintf(buf, n, "#slice<dim=%d, %s>", l->dim, inner);
  case KN_LAYOUT_SHARED:
    if (l->pad)
      return snprintf(buf, n, "#shared<order=[%d,%d], vec=%d, pad=%d>", l->order[0], l->order[1],
                      l->vec, l->pad);
    if (l->cblock)
      return snprintf(buf, n, "#shared<order=[%d,%d], vec=%d, per_phase=%d, max_phase=%d, "
                      "cblock=%d>", l->order[0], l->order[1], l->vec, l->per_phase, l->max_phase,
                      l->cblock);
    return snprintf(buf, n, "#shared<order=[%d,%d], vec=%d, per_phase=%d, max_phase=%d>",
                    l->order[0], l->order[1], l->vec, l->per_phase, l->max_phase);
  }
  return snprintf(buf, n, "#?");
}

/* ---- evaluation --------------------------------------------------------------------------- */

typedef struct regs {
  int n, cap;
  int32_t (*r)[2];
} regs;

static void push(regs *rs, int a, int b) {
  if (rs->n == rs->cap) {
    rs->cap = rs->cap ? rs->cap * 2 : 64;
    rs->r = realloc(rs->r, (size_t)rs->cap * sizeof *rs->r);
    KN_ASSERT(rs->r);
  }
  rs->r[rs->n][0] = a;
  rs->r[rs->n][1] = b;
  rs->n++;
}

static int mod(int x, int s) { return s > 0 ? ((x % s) + s) % s : x; }

/* reduce modulo the shape, drop duplicate registers, hand the list to m */
static void finish(kn_lmap *m, regs *rs) {
  for (int b = 0; b < m->lane_bits; b++)
    for (int d = 0; d < 2; d++) m->lane[b][d] = mod(m->lane[b][d], m->shape[d]);
  for (int b = 0; b < m->warp_bits; b++)
    for (int d = 0; d < 2; d++) m->warp[b][d] = mod(m->warp[b][d], m->shape[d]);
  int n = 0;
  for (int i = 0; i < rs->n; i++) {
    int a = mod(rs->r[i][0], m->shape[0]), b = mod(rs->r[i][1], m->shape[1]);
    bool dup = false;
    for (int j = 0; j < n && !dup; j++) dup = rs->r[j][0] == a && rs->r[j][1] == b;
    if (dup) continue;
    rs->r[n][0] = a;
    rs->r[n][1] = b;
    n++;
  }
  m->nregs = n;
  m->reg = rs->r;
}

/* the extent a layout covers must divide the shape, or (a power-of-two shape) be a multiple */
static int check_fit(int shape, int cover, const char *what, kn_diag *d) {
  if (shape % cover == 0 || (pow2(shape) && cover % shape == 0)) return 0;
  return kn_error(d, NULL, gpu_loc, "a tile extent of %d does not fit %s (covers %d)", shape,
                  what, cover);
}

int kn_layout_eval(const kn_layout *l, int rank, const int *shape, kn_lmap *m, kn_diag *d) {
  memset(m, 0, sizeof *m);
  m->rank = rank;
  m->shape[0] = shape[0];
  m->shape[1] = rank == 2 ? shape[1] : 1;
  m->lanes = l->lanes;
  m->warps = l->warps;
  m->lane_bits = log2i(l->lanes);
  m->warp_bits = log2i(l->warps);
  if (!pow2(l->lanes) || !pow2(l->warps))
    return kn_error(d, NULL, gpu_loc, "lanes and warps must be powers of two");
  regs rs = {0};
  char name[256];
  kn_layout_format(l, name, sizeof name);

  switch ((kn_layout_kind)l->kind) {
  case KN_LAYOUT_BLOCKED: {
    int c = rank == 1 ? 0 : l->order[0], o = 1 - c;
    int cov[2] = {1, 1}, reps[2] = {1, 1}, bit = 0, wbit = 0;
    for (int dd = 0; dd < rank; dd++) {
      cov[dd] = l->spt[dd] * l->tpw[dd] * l->wpp[dd];
      if (check_fit(m->shape[dd], cov[dd], name, d)) return -1;
      reps[dd] = max_i(1, m->shape[dd] / cov[dd]);
    }
    int dims[2] = {c, o};
    for (int i = 0; i < rank; i++) {
      int dd = dims[i];
      for (int b = 0; (1 << b) < l->tpw[dd]; b++, bit++) m->lane[bit][dd] = l->spt[dd] << b;
    }
    for (int i = 0; i < rank; i++) {
      int dd = dims[i];
      for (int b = 0; (1 << b) < l->wpp[dd]; b++, wbit++)
        m->warp[wbit][dd] = (l->spt[dd] * l->tpw[dd]) << b;
    }
    /* lanes or warps the layout leaves unused along every dim hold copies (delta 0) */
    int so = rank == 2 ? l->spt[o] : 1, ro = rank == 2 ? reps[o] : 1;
    for (int r_o = 0; r_o < ro; r_o++)
      for (int r_c = 0; r_c < reps[c]; r_c++)
        for (int e_o = 0; e_o < so; e_o++)
          for (int e_c = 0; e_c < l->spt[c]; e_c++) {
            int x[2] = {0, 0};
            x[c] = r_c * cov[c] + e_c;
            if (rank == 2) x[o] = r_o * cov[o] + e_o;
            push(&rs, x[0], x[1]);
          }
    break;
  }
  case KN_LAYOUT_MMA: {
    const kn_mma_shape *s = l->mma;
    int t = l->transposed;
    int im = t ? s->n : s->m, in = t ? s->m : s->n;  /* one instruction, in tile coordinates */
    /* a broadcast dim (size 1) is evaluated at one instruction per warp, then reduced to 0 */
    int R = m->shape[0] == 1 ? im * l->warps : m->shape[0];
    int C = m->shape[1] == 1 ? in : m->shape[1];
    if (R % l->warps || (R / l->warps) % im || C % in)
      return kn_error(d, NULL, gpu_loc, "tile %dx%d does not fit %s (%d rows per warp, "
                      "instruction %dx%d)", m->shape[0], m->shape[1], name, R / l->warps, im, in);
    int rw = R / l->warps;
    for (int mr = 0; mr < rw / im; mr++)
      for (int nr = 0; nr < C / in; nr++)
        for (int j = 0; j < s->acc_regs; j++)
          push(&rs, mr * im + s->acc_reg[j][t], nr * in + s->acc_reg[j][!t]);
    for (int b = 0; b < m->lane_bits; b++) {
      m->lane[b][0] = s->acc_lane[b][t];
      m->lane[b][1] = s->acc_lane[b][!t];
    }
    if ((kn_gpu_test_breaks & KN_GPU_BREAK_ACC_LANE) && m->lane_bits >= 2) {
      int hi = m->lane_bits - 1;  /* test-only: a wrong lane mapping, still a valid layout */
      for (int x = 0; x < 2; x++) {
        int32_t tmp = m->lane[hi][x];
        m->lane[hi][x] = m->lane[hi - 1][x];
        m->lane[hi - 1][x] = tmp;
      }
    }
    for (int b = 0; b < m->warp_bits; b++) m->warp[b][0] = rw << b;
    break;
  }
  case KN_LAYOUT_DOT_A:
  case KN_LAYOUT_DOT_B: {
    const kn_mma_shape *s = l->mma;
    bool is_a = l->kind == KN_LAYOUT_DOT_A;
    if (rank != 2) return kn_error(d, NULL, gpu_loc, "%s needs a rank-2 tile", name);
    if (is_a) {
      int M = m->shape[0], K = m->shape[1];
      if (M % l->warps || (M / l->warps) % s->m || K % s->k)
        return kn_error(d, NULL, gpu_loc, "tile %dx%d does not fit %s", M, K, name);
      int rw = M / l->warps;
      for (int mr = 0; mr < rw / s->m; mr++)
        for (int kr = 0; kr < K / s->k; kr++)
          for (int e = 0; e < s->a_regs; e++)
            push(&rs, mr * s->m + s->a_reg[e][0], kr * s->k + s->a_reg[e][1]);
      for (int b = 0; b < m->lane_bits; b++) {
        m->lane[b][0] = s->a_lane[b][0];
        m->lane[b][1] = s->a_lane[b][1];
      }
      for (int b = 0; b < m->warp_bits; b++) m->warp[b][0] = rw << b;
    } else {
      int K = m->shape[0], N = m->shape[1];
      if (K % s->k || N % s->n)
        return kn_error(d, NULL, gpu_loc, "tile %dx%d does not fit %s", K, N, name);
      /* every warp needs the whole B operand: warp bits replicate */
      for (int nr = 0; nr < N / s->n; nr++)
        for (int kr = 0; kr < K / s->k; kr++)
          for (int e = 0; e < s->b_regs; e++)
            push(&rs, kr * s->k + s->b_reg[e][0], nr * s->n + s->b_reg[e][1]);
      for (int b = 0; b < m->lane_bits; b++) {
        m->lane[b][0] = s->b_lane[b][0];
        m->lane[b][1] = s->b_lane[b][1];
      }
    }
    break;
  }
  case KN_LAYOUT_SLICE: {
    if (rank != 1 || l->parent->rank != 2)
      return kn_error(d, NULL, gpu_loc, "%s: only rank-2 parents are sliced", name);
    int ps[2];
    ps[l->dim] = 1;
    ps[1 - l->dim] = shape[0];
    kn_lmap pm;
    if (kn_layout_eval(l->parent, 2, ps, &pm, d)) return -1;
    int keep = 1 - l->dim;
    for (int r = 0; r < pm.nregs; r++) push(&rs, pm.reg[r][keep], 0);
    for (int b = 0; b < m->lane_bits; b++) m->lane[b][0] = pm.lane[b][keep];
    for (int b = 0; b < m->warp_bits; b++) m->warp[b][0] = pm.warp[b][keep];
    kn_lmap_free(&pm);
    break;
  }
  case KN_LAYOUT_SHARED:
    return kn_error(d, NULL, gpu_loc, "%s is not a register layout", name);
  }
  finish(m, &rs);
  return 0;
}

void kn_lmap_free(kn_lmap *m) {
  if (!m) return;
  free(m->reg);
  m->reg = NULL;
  m->nregs = 0;
}

void kn_lmap_coord(const kn_lmap *m, int warp, int lane, int reg, int out[2]) {
  int x = m->reg[reg][0], y = m->reg[reg][1];
  for (int b = 0; b < m->lane_bits; b++)
    if (lane >> b & 1) x += m->lane[b][0], y += m->lane[b][1];
  for (int b = 0; b < m->warp_bits; b++)
    if (warp >> b & 1) x += m->warp[b][0], y += m->warp[b][1];
  out[0] = mod(x, m->shape[0]);
  out[1] = mod(y, m->shape[1]);
}

/* ---- queries ------------------------------------------------------------------------------ */

bool kn_lmap_convert_free(const kn_lmap *src, const kn_lmap *dst, int *regmap) {
  if (src->lanes != dst->lanes || src->warps != dst->warps || src->rank != dst->rank)
    return false;
  int *map = malloc(sizeof(int) * (size_t)(dst->nregs ? dst->nregs : 1));
  KN_ASSERT(map);
  bool ok = true;
  /* the register each dst register renames, found in thread (0, 0) ... */
  for (int r = 0; r < dst->nregs && ok; r++) {
    int c[2], s[2];
    kn_lmap_coord(dst, 0, 0, r, c);
    c[0] = mod(c[0], src->shape[0]);
    c[1] = mod(c[1], src->shape[1]);
    map[r] = -1;
    for (int q = 0; q < src->nregs && map[r] < 0; q++) {
      kn_lmap_coord(src, 0, 0, q, s);
      if (s[0] == c[0] && s[1] == c[1]) map[r] = q;
    }
    ok = map[r] >= 0;
  }
  /* ... must be the right one in every thread */
  for (int w = 0; w < dst->warps && ok; w++)
    for (int l = 0; l < dst->lanes && ok; l++)
      for (int r = 0; r < dst->nregs && ok; r++) {
        int c[2], s[2];
        kn_lmap_coord(dst, w, l, r, c);
        kn_lmap_coord(src, w, l, map[r], s);
        ok = s[0] == mod(c[0], src->shape[0]) && s[1] == mod(c[1], src->shape[1]);
      }
  if (ok && regmap) memcpy(regmap, map, sizeof(int) * (size_t)dst->nregs);
  free(map);
  return ok;
}

/* a rank-1 tile to a scalar: every register into the one value, butterflies over the lane bits
 * that move along the tile (the others hold copies) */
static int reduce_plan_scalar(const kn_lmap *p, kn_reduce_plan *out) {
  if (p->rank != 1) return -1;
  for (int b = 0; b < p->warp_bits; b++)
    if (p->warp[b][0]) return -1;             /* would cross warps */
  for (int b = 0; b < p->lane_bits; b++)
    if (p->lane[b][0]) out->bfly[out->nbfly++] = b;
  if ((p->nregs << out->nbfly) != p->shape[0]) return -1;  /* each element once */
  out->nregs = p->nregs;
  out->group = calloc((size_t)(p->nregs ? p->nregs : 1), sizeof(int));
  KN_ASSERT(out->group);
  return 0;
}

int kn_reduce_plan_make(const kn_lmap *p, const kn_lmap *s, int axis, kn_reduce_plan *out) {
  memset(out, 0, sizeof *out);
  if (!s) return reduce_plan_scalar(p, out);
  int keep = 1 - axis;
  if (p->rank != 2 || s->rank != 1 || s->lanes != p->lanes || s->warps != p->warps) return -1;
  for (int b = 0; b < p->warp_bits; b++)
    if (p->warp[b][axis]) return -1;          /* would cross warps */
  for (int b = 0; b < p->lane_bits; b++) {
    if (p->lane[b][axis] && p->lane[b][keep]) return -1;
    if (p->lane[b][axis]) out->bfly[out->nbfly++] = b;
    if (s->lane[b][0] != p->lane[b][keep]) return -1;
  }
  out->nregs = p->nregs;
  out->group = malloc(sizeof(int) * (size_t)(p->nregs ? p->nregs : 1));
  KN_ASSERT(out->group);
  int *count = calloc((size_t)(s->nregs ? s->nregs : 1), sizeof(int));
  KN_ASSERT(count);
  int rc = 0;
  for (int r = 0; r < p->nregs && !rc; r++) {
    out->group[r] = -1;
    for (int q = 0; q < s->nregs; q++)
      if (s->reg[q][0] == p->reg[r][keep]) out->group[r] = q;
    if (out->group[r] < 0) rc = -1;
    else count[out->group[r]]++;
  }
  /* each reduced coordinate must be met exactly once (a sum must not count a copy twice) */
  for (int q = 0; q < s->nregs && !rc; q++)
    if ((count[q] << out->nbfly) != p->shape[axis]) rc = -1;
  free(count);
  if (rc) kn_reduce_plan_free(out);
  return rc;
}

void kn_reduce_plan_free(kn_reduce_plan *p) {
  if (!p) return;
  free(p->group);
  p->group = NULL;
}

static bool lands_on_itself(const kn_lmap *m, const int32_t *delta) {
  return mod(delta[0], m->shape[0]) == 0 && mod(delta[1], m->shape[1]) == 0;
}

int kn_lmap_owners(const kn_lmap *m, int warps, bool *keep, unsigned *lmask, unsigned *wmask,
                   int bad[2], int *nown) {
  *lmask = *wmask = 0;
  for (int r = 0; r < m->nregs; r++) {
    keep[r] = true;
    for (int q = 0; q < r && keep[r]; q++) {
      int32_t delta[2] = {m->reg[r][0] - m->reg[q][0], m->reg[r][1] - m->reg[q][1]};
      if (lands_on_itself(m, delta)) keep[r] = false;
    }
  }
  for (int b = 0; b < m->lane_bits; b++)
    if (lands_on_itself(m, m->lane[b])) *lmask |= 1u << b;
  for (int b = 0; b < m->warp_bits; b++)
    if (lands_on_itself(m, m->warp[b])) *wmask |= 1u << b;
  for (int w = m->warps; w < warps; w <<= 1) *wmask |= (unsigned)w;
  size_t n = (size_t)m->shape[0] * (size_t)m->shape[1];
  int *count = calloc(n, sizeof *count);
  KN_ASSERT(count);
  for (int w = 0; w < m->warps; w++)
    for (int l = 0; l < m->lanes; l++) {
      if (((unsigned)w & *wmask) || ((unsigned)l & *lmask)) continue;
      for (int r = 0; r < m->nregs; r++) {
        int c[2];
        if (!keep[r]) continue;
        kn_lmap_coord(m, w, l, r, c);
        count[(size_t)c[0] * (size_t)m->shape[1] + (size_t)c[1]]++;
      }
    }
  int rc = 0;
  for (size_t e = 0; e < n && !rc; e++)
    if (count[e] != 1) {
      bad[0] = (int)(e / (size_t)m->shape[1]);
      bad[1] = (int)(e % (size_t)m->shape[1]);
      *nown = count[e];
      rc = -1;
    }
  free(count);
  return rc;
}

int kn_lmap_vec(const kn_lmap *m, int dim, int maxvec) {
  for (int v = maxvec; v > 1; v /= 2) {
    bool ok = m->nregs % v == 0;
    for (int b = 0; b < m->lane_bits && ok; b++) ok = m->lane[b][dim] % v == 0;
    for (int b = 0; b < m->warp_bits && ok; b++) ok = m->warp[b][dim] % v == 0;
    for (int g = 0; g < m->nregs && ok; g += v) {
      ok = m->reg[g][dim] % v == 0;
      for (int i = 1; i < v && ok; i++)
        ok = m->reg[g + i][dim] == m->reg[g][dim] + i &&
             m->reg[g + i][1 - dim] == m->reg[g][1 - dim];
    }
    if (ok) return v;
  }
  return 1;
}

int64_t kn_shared_offset(const kn_layout *s, const int *shape, int i, int j) {
  if (s->rank == 1) return i;
  int inner = s->order[0];
  int ci = inner == 0 ? i : j, co = inner == 0 ? j : i;
  int phase = (co / s->per_phase) % s->max_phase;
  int64_t block = 0, row = shape[inner] + s->pad;
  if (s->cblock) {  /* column blocks of cblock elements, each all rows long */
    block = (int64_t)(ci / s->cblock) * s->cblock * shape[1 - inner];
    ci %= s->cblock;
    row = s->cblock;
  }
  return block + (int64_t)co * row + ((ci / s->vec) ^ phase) * s->vec + ci % s->vec;
}

int64_t kn_shared_size(const kn_layout *s, const int *shape) {
  if (s->rank == 1) return shape[0];
  if (s->cblock)
    return (int64_t)(shape[s->order[0]] + s->cblock - 1) / s->cblock * s->cblock *
           shape[1 - s->order[0]];
  return (int64_t)shape[0] * shape[1] + (int64_t)shape[1 - s->order[0]] * s->pad;
}
