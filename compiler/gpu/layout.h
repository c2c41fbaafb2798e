/* layout.h — where the elements of a tile live on a GPU: parametric layout kinds, their
 * evaluation into per-(warp, lane, register) coordinate maps, and the questions lowering asks.
 *
 * A layout is written as one of a few parametric kinds (kn_layout: blocked, mma, dot_a, dot_b,
 * slice, shared) and printed in that form.  For a tile shape a register layout is *evaluated*
 * into a kn_lmap: a list of per-register coordinate offsets plus one coordinate delta per lane
 * bit and per warp bit, so that the element held by (warp w, lane l, register r) is
 *     reg[r] + sum over set bits b of l: lane[b] + sum over set bits b of w: warp[b]
 * (each component reduced modulo the shape, which only matters for broadcast dims of size 1 and
 * for power-of-two shapes smaller than a layout's coverage: the extra lanes hold copies).
 * Registers are an explicit list, so any shape that is a multiple of the instruction tile works
 * (head dims 80, 96: three or five 32-wide repetitions), while lanes and warps, always powers of
 * two, stay linear.  That one form is both the table every query below is checked on
 * (kn_lmap_coord for any (warp, lane, reg)) and what lowering emits code from: a thread computes
 * its base coordinate from its lane and warp ids once, and each register adds a constant.
 *
 * The matrix-instruction lane tables (kn_mma_shape) are written in the same form, in the
 * instruction's own coordinates, with their sources cited in layout.c.
 *
 * Nothing here allocates except kn_layout_eval (kn_lmap_free releases it); nothing prints.
 */
#ifndef KILN_GPU_LAYOUT_H
#define KILN_GPU_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_MAX_LANE_BITS 6  /* wave64 */
#define KN_MAX_WARP_BITS 4  /* 16 warps */

/* ---- test-only breaks ------------------------------------------------------------------
 * Never set outside tests.  Each bit makes compiler/gpu get one layout or lowering decision
 * wrong on purpose, at the place the decision is made, so a test can show that its numeric or
 * race checks would catch kiln making that mistake (tests/unit/test_emu_attn.c).  Read when a
 * kernel is compiled (not thread-safe: set it only while no compile runs). */
enum {
  /* the accumulator (mma) layout is evaluated with the deltas of its two highest lane bits
   * swapped (MFMA 32x32: lane groups of 16 and 32 trade places): kiln's table then names the
   * wrong lane for half of every instruction's results */
  KN_GPU_BREAK_ACC_LANE = 1u << 0,
  /* stage_store (lower_gpu.c) omits the barrier after its LDS stores: other waves may read the
   * staged tile before it is written */
  KN_GPU_BREAK_STAGING_BARRIER = 1u << 1,
};
extern unsigned kn_gpu_test_breaks;

/* ---- matrix instructions ------------------------------------------------------------------ */

/* kn_mma_id (the instruction shapes) is the registry's: compiler/arch.h */

/* One instruction's lane tables in separable form, in its own coordinates:
 *   A (m x k):  lane l, element e  ->  a_reg[e] + sum_b bit_b(l) * a_lane[b]     as (row, k)
 *   B (k x n):  lane l, element e  ->  b_reg[e] + sum_b bit_b(l) * b_lane[b]     as (k, col)
 *   C/D (m x n): lane l, register j -> acc_reg[j] + sum_b bit_b(l) * acc_lane[b] as (row, col) */
typedef struct kn_mma_shape {
  kn_mma_id id;
  const char *name;        /* printed in layouts: "mfma_32x32x8" */
  int m, n, k;
  int lanes;               /* 64 (wave64) or 32 (NVIDIA warp) */
  int a_regs, b_regs, acc_regs;
  int8_t a_reg[8][2], a_lane[KN_MAX_LANE_BITS][2];
  int8_t b_reg[8][2], b_lane[KN_MAX_LANE_BITS][2];
  int8_t acc_reg[16][2], acc_lane[KN_MAX_LANE_BITS][2];
} kn_mma_shape;

const kn_mma_shape *kn_mma_shape_get(kn_mma_id id);

/* ---- parametric layouts ------------------------------------------------------------------- */

typedef enum kn_layout_kind {
  KN_LAYOUT_BLOCKED,  /* spt x tpw x wpp elements, order[0] the contiguous dim */
  KN_LAYOUT_MMA,      /* accumulator of an mma instruction, warps along dim 0 */
  KN_LAYOUT_DOT_A,    /* A operand (M x K) of the parent mma */
  KN_LAYOUT_DOT_B,    /* B operand (K x N) of the parent mma; every warp holds all of it */
  KN_LAYOUT_SLICE,    /* parent with dim `dim` removed (what a reduction along dim gives) */
  KN_LAYOUT_SHARED,   /* memory (LDS): order[0] contiguous, XOR swizzle of vec-element groups */
} kn_layout_kind;

typedef struct kn_layout kn_layout;
struct kn_layout {
  uint8_t kind;           /* kn_layout_kind */
  uint8_t rank;           /* blocked: 1 or 2; others 2 except slice (its parent's rank - 1) */
  uint8_t warps;          /* warps (waves) per program */
  uint8_t lanes;          /* 64 or 32 */
  /* blocked */
  uint8_t spt[2], tpw[2], wpp[2]; /* size per thread, threads per warp, warps per program */
  uint8_t order[2];               /* blocked, shared: order[0] is the contiguous dim */
  /* mma, dot_a, dot_b */
  const kn_mma_shape *mma;
  bool transposed;        /* mma: the instruction computes D^T = B^T A^T, so lanes walk rows */
  uint8_t kwidth;         /* dot_a / dot_b: consecutive k elements per lane per instruction */
  /* slice */
  uint8_t dim;
  const kn_layout *parent;
  /* shared */
  uint8_t vec, per_phase, max_phase;
  uint8_t pad;            /* shared: elements of padding after each row (then no XOR) */
  /* shared, XOR-swizzled: 0, or the inner dim is cut into column blocks of cblock elements,
   * each block stored whole (all rows of cblock elements) before the next, rows swizzled
   * within it: wgmma's canonical 128-byte swizzled layout (kn_layout_shared_wgmma) */
  uint8_t cblock;
};

kn_layout kn_layout_blocked(int rank, const int *shape, int contig_dim, int elem_bytes, int warps,
                            int lanes);
kn_layout kn_layout_mma(const kn_mma_shape *s, int warps, bool transposed);
kn_layout kn_layout_dot(const kn_mma_shape *s, int warps, int opidx /* 0: A, 1: B */);
kn_layout kn_layout_slice(const kn_layout *parent, int dim);
/* a shared layout for a 2-D tile read as `reader` (dot_a / dot_b / blocked): the contiguous dim
 * is the one the reader's lanes read consecutively.  Dot operands get a padded layout (vec
 * elements after each row: consecutive rows start 2 banks apart, so the 16 rows of a half-wave
 * read cover all 32 banks, and every fragment's address is the thread's base plus a constant);
 * other readers get an XOR swizzle spreading the rows a wave reads at once over the banks. */
kn_layout kn_layout_shared_for(const kn_layout *reader, const int *shape, int elem_bytes);
/* an XOR-swizzled shared layout: order[0] = inner, groups of vec elements XOR-ed with the phase
 * (row / per_phase) % max_phase, which spreads max_phase rows over 128 bytes of banks */
kn_layout kn_layout_shared_swizzled(int inner, const int *shape, int vec, int elem_bytes);
/* wgmma's canonical layout with the 128-byte swizzle (PTX ISA, "Shared Memory Matrix Layout":
 * K-major ((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), both
 * under Swizzle<3,4,3>): rows of 128 bytes along the contiguous dim `inner`, 16-byte chunks
 * XOR-ed with row % 8, in column blocks of 128 bytes (64 16-bit elements), one after the other
 * (a last partial block is padded to 64).  Read through a matrix descriptor: SBO = 1024 bytes
 * (8 rows), LBO = the column block's bytes; the buffer must start on a 1024-byte boundary. */
kn_layout kn_layout_shared_wgmma(int inner, const int *shape, int elem_bytes);
/* wgmma's matrix descriptor for B (K x N, k along dim 0) stored in s = kn_layout_shared_wgmma
 * over shape: the byte offset from the buffer's start of the k step that begins at k0, the
 * leading and stride byte offsets, and whether B is N-major (imm-trans-b = 1) rather than
 * K-major.  K-major: SBO 1024 (8 rows of 128 bytes), LBO unused (16: "assumed 1"); N-major: SBO
 * 1024 (8 k rows), LBO the bytes of one column block. */
typedef struct kn_wgmma_desc {
  int64_t start, lbo, sbo;
  bool trans;
} kn_wgmma_desc;
kn_wgmma_desc kn_wgmma_desc_for(const kn_layout *s, const int *shape, int elem_bytes, int k0);
/* the same for A (M x K, k along dim 1) stored K-major in s = kn_layout_shared_wgmma(1, ...):
 * the byte offset of element (m0, k0) (m0 a multiple of 8: a warpgroup's first row), SBO 1024,
 * LBO unused; trans (M-major A, imm-trans-a = 1) is not produced by the layout pass */
kn_wgmma_desc kn_wgmma_desc_for_a(const kn_layout *s, const int *shape, int elem_bytes, int m0,
                                  int k0);
bool kn_layout_eq(const kn_layout *a, const kn_layout *b);
/* "#mma<mfma_32x32x8, warps=[4,1], transposed>"; snprintf-like */
int kn_layout_format(const kn_layout *l, char *buf, size_t n);

/* ---- evaluated maps ---------------------------------------------------------------------- */

typedef struct kn_lmap {
  int rank;
  int shape[2];
  int lanes, warps, lane_bits, warp_bits;
  int nregs;
  int32_t (*reg)[2];                 /* nregs offsets (malloc'd) */
  int32_t lane[KN_MAX_LANE_BITS][2];
  int32_t warp[KN_MAX_WARP_BITS][2];
} kn_lmap;

/* Evaluates a register layout for a tile shape; -1 with *d when the shape does not fit the
 * layout (e.g. rows per warp not a multiple of the instruction's m). */
int kn_layout_eval(const kn_layout *l, int rank, const int *shape, kn_lmap *out, kn_diag *d);
void kn_lmap_free(kn_lmap *m);
void kn_lmap_coord(const kn_lmap *m, int warp, int lane, int reg, int out[2]);

/* A conversion src -> dst is free when every thread finds each of its dst coordinates among its
 * own src registers, and at the same register index in every thread (so it is a renaming).
 * Coordinates of dst are compared modulo src's shape, so a broadcast (src dim of size 1) is a
 * conversion too.  regmap[dst reg] = src reg when free (regmap may be NULL). */
bool kn_lmap_convert_free(const kn_lmap *src, const kn_lmap *dst, int *regmap);

/* Reduction of a tile in layout p along axis into the slice map s (s = eval of slice(axis, p)):
 * group[r] is the slice register parent register r combines into (in-thread), and the lane bits
 * listed in bfly need a butterfly step (lanes l and l ^ (1 << bit)) after it.  -1 when a warp
 * bit or a lane bit mixing kept and reduced coordinates is involved (the pass never picks such
 * a layout).  s == NULL: a rank-1 p reduced to a scalar (every register into group 0). */
typedef struct kn_reduce_plan {
  int nregs;      /* parent registers */
  int *group;     /* nregs entries (malloc'd) */
  int nbfly;
  int bfly[KN_MAX_LANE_BITS];
} kn_reduce_plan;
int kn_reduce_plan_make(const kn_lmap *p, const kn_lmap *s, int axis, kn_reduce_plan *out);
void kn_reduce_plan_free(kn_reduce_plan *p);

/* Widest power of two v <= maxvec such that the map's registers come in aligned groups of v
 * consecutive registers with consecutive coordinates along dim, and every lane / warp delta
 * along dim is a multiple of v: then each group is v adjacent elements of any row-major (along
 * dim) memory, at a v-aligned coordinate. */
int kn_lmap_vec(const kn_lmap *m, int dim, int maxvec);

/* One owner for each element of m, for a store that must touch an element once (atomic_add,
 * which would add a copy twice): keep[r] (nregs entries) is false where an earlier register of
 * the thread has r's coordinate (equal modulo the shape: so in every thread), and a thread owns
 * its kept registers when lane & *lmask and warp & *wmask are 0 (the lane and warp bits whose
 * delta lands on the same element, and the bits of a program of `warps` warps, a power of two,
 * past the map's).  Checked by enumerating kn_lmap_coord over every (warp, lane, register):
 * 0, or -1 with bad[] an element that does not get exactly one owner and *nown its owners
 * (copies made by a combination of bits, say two lane steps adding up to the shape). */
int kn_lmap_owners(const kn_lmap *m, int warps, bool *keep, unsigned *lmask, unsigned *wmask,
                   int bad[2], int *nown);

/* Element offset of (i, j) in a shared layout over shape (XOR-swizzled or padded); rank 1: i. */
int64_t kn_shared_offset(const kn_layout *s, const int *shape, int i, int j);
/* elements a shared layout over shape occupies (numel plus padding) */
int64_t kn_shared_size(const kn_layout *s, const int *shape);

#ifdef __cplusplus
}
#endif
#endif
