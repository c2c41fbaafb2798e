/* test_layout.c — the layout machinery against brute force.
 *
 * - every register layout covers each element of its tile, each the same number of times
 *   (the expected replication: 1, or the warps for dot_b, or the lanes a small tile leaves over);
 * - a matrix product computed only through the layout tables (gather the A and B fragments of
 *   each lane, run the instruction as the ISA defines it, scatter D by the accumulator table)
 *   equals a plain matmul; the instruction model below is written from the ISA's formulas,
 *   independently of layout.c's tables, and a table with rows and columns swapped must fail;
 * - a conversion through a swizzled shared layout round-trips every element and the swizzle is
 *   a bijection inside the buffer;
 * - a row reduction by the butterfly plan equals the plain row sum / max;
 * - the free conversions the lowering relies on are free (and others are not).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "layout.h"

static unsigned rng_state = 12345;
static double rnd(void) {
  rng_state = rng_state * 1103515245u + 12345u;
  return (int)((rng_state >> 16) % 17) - 8;  /* small integers: sums are exact */
}

static kn_lmap eval(const kn_layout *l, int rank, int r, int c) {
  int shape[2] = {r, c};
  kn_lmap m;
  kn_diag d;
  int rc = kn_layout_eval(l, rank, shape, &m, &d);
  if (rc) fail_msg("eval failed: %s", d.message);
  return m;
}

/* every element held the same number of times; returns that number */
static int coverage(const kn_lmap *m) {
  int n = m->shape[0] * m->shape[1];
  int *cnt = calloc((size_t)n, sizeof(int));
  for (int w = 0; w < m->warps; w++)
    for (int l = 0; l < m->lanes; l++)
      for (int r = 0; r < m->nregs; r++) {
        int c[2];
        kn_lmap_coord(m, w, l, r, c);
        assert_true(c[0] >= 0 && c[0] < m->shape[0] && c[1] >= 0 && c[1] < m->shape[1]);
        cnt[c[0] * m->shape[1] + c[1]]++;
      }
  int rep = cnt[0];
  for (int i = 0; i < n; i++) assert_int_equal(cnt[i], rep);
  free(cnt);
  return rep;
}

static void test_coverage(void **state) {
  (void)state;
  const kn_mma_shape *s32 = kn_mma_shape_get(KN_MMA_MFMA_32X32X8);
  const kn_mma_shape *s16 = kn_mma_shape_get(KN_MMA_MFMA_16X16X16);
  const kn_mma_shape *f8 = kn_mma_shape_get(KN_MMA_MFMA_32X32X16);
  const kn_mma_shape *nv = kn_mma_shape_get(KN_MMA_NV_16X8X16);
  const kn_mma_shape *fm = kn_mma_shape_get(KN_MMA_FMA_16X32);
  const kn_mma_shape *fn = kn_mma_shape_get(KN_MMA_FMA_16X16);
  const kn_mma_shape *fw = kn_mma_shape_get(KN_MMA_FMA_16X16_W64);
  struct { kn_layout l; int r, c, rep; } cases[] = {
      /* f32 FMAs: the accumulator once; A copied across the 8 column lanes, B across the 8
       * row lanes of every warp */
      {kn_layout_mma(fm, 4, false), 64, 64, 1},
      {kn_layout_dot(fm, 4, 0), 64, 128, 8},
      {kn_layout_dot(fm, 4, 1), 64, 128, 8 * 4},
      /* the same on warps of 32 (NVPTX): A copied across the 4 column lanes, B across the 8 row
       * lanes of every warp */
      {kn_layout_mma(fn, 4, false), 64, 64, 1},
      {kn_layout_dot(fn, 4, 0), 64, 128, 4},
      {kn_layout_dot(fn, 4, 1), 64, 128, 8 * 4},
      /* 16x16 blocks on waves of 64 (f32 at head dim 48, 80, ...): A copied across the 8
       * column lanes, B across the 8 row lanes of every wave; n = 48 is three blocks */
      {kn_layout_mma(fw, 4, false), 64, 48, 1},
      {kn_layout_dot(fw, 4, 0), 64, 48, 8},
      {kn_layout_dot(fw, 4, 1), 48, 16, 8 * 4},
      {kn_layout_mma(s32, 4, false), 128, 64, 1},
      {kn_layout_mma(s32, 4, true), 128, 128, 1},
      {kn_layout_mma(s32, 4, true), 128, 96, 1},   /* head dim 96: three repetitions */
      {kn_layout_mma(s16, 4, true), 64, 32, 1},
      {kn_layout_mma(s16, 4, false), 64, 80, 1},
      {kn_layout_mma(f8, 4, false), 128, 64, 1},
      {kn_layout_mma(nv, 4, false), 64, 64, 1},
      {kn_layout_dot(s32, 4, 0), 128, 128, 1},
      {kn_layout_dot(s32, 4, 1), 128, 64, 4},      /* every warp holds all of B */
      {kn_layout_dot(s16, 4, 0), 64, 64, 1},
      {kn_layout_dot(s16, 4, 1), 64, 128, 4},
      {kn_layout_dot(f8, 4, 0), 128, 64, 1},
      {kn_layout_dot(nv, 4, 0), 64, 32, 1},
      {kn_layout_dot(nv, 4, 1), 32, 64, 4},
      {kn_layout_mma(s32, 4, true), 128, 1, 2},    /* expand_dims of a row slice */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kn_lmap m = eval(&cases[i].l, 2, cases[i].r, cases[i].c);
    assert_int_equal(coverage(&m), cases[i].rep);
    kn_lmap_free(&m);
  }
  /* blocked layouts for the attention loads, vectorised along the stride-1 dim */
  int shapes[][3] = {{128, 128, 1}, {128, 64, 0}, {64, 128, 1}, {96, 64, 0}, {64, 96, 1},
                     {16, 32, 1}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    kn_layout b = kn_layout_blocked(2, shapes[i], shapes[i][2], 2, 4, 64);
    kn_lmap m = eval(&b, 2, shapes[i][0], shapes[i][1]);
    int rep = coverage(&m);
    assert_true(rep >= 1);
    if (shapes[i][0] * shapes[i][1] >= 256 * 8) assert_int_equal(rep, 1);
    assert_int_equal(kn_lmap_vec(&m, shapes[i][2], 8), 8);   /* 16-byte vectors of f16 */
    kn_lmap_free(&m);
  }
  /* slices: one copy per lane bit the slice drops */
  kn_layout p = kn_layout_mma(s32, 4, true);
  kn_layout sl = kn_layout_slice(&p, 1);
  kn_lmap m = eval(&sl, 1, 128, 0);
  assert_int_equal(coverage(&m), 2);
  kn_lmap_free(&m);
  kn_layout sl0 = kn_layout_slice(&p, 0);
  m = eval(&sl0, 1, 64, 0);
  assert_int_equal(coverage(&m), 4 * 32);   /* every warp, and 32 lanes per column */
  kn_lmap_free(&m);
}

/* kn_lmap_owners (atomic_add stores): the owners it picks hold every element exactly once,
 * by a count of its own here, on layouts with and without copies; a map whose copies come from
 * two lane steps adding up to the shape has no owner of that form, and says which element */
static int owners_count(const kn_lmap *m, int warps, int *bad, int *nown) {
  bool keep[1024];
  unsigned lm, wm;
  assert_true(m->nregs <= 1024);
  int rc = kn_lmap_owners(m, warps, keep, &lm, &wm, bad, nown);
  if (rc) return rc;
  int n = m->shape[0] * m->shape[1];
  int *cnt = calloc((size_t)n, sizeof(int));
  for (int w = 0; w < warps; w++)
    for (int l = 0; l < m->lanes; l++)
      for (int r = 0; r < m->nregs; r++) {
        if ((w & (int)wm) || (l & (int)lm) || !keep[r]) continue;
        int c[2];
        kn_lmap_coord(m, w % m->warps, l, r, c);
        cnt[c[0] * m->shape[1] + c[1]]++;
      }
  for (int i = 0; i < n; i++) assert_int_equal(cnt[i], 1);
  free(cnt);
  return 0;
}

static void test_owners(void **state) {
  (void)state;
  int bad[2], nown;
  const kn_mma_shape *s32 = kn_mma_shape_get(KN_MMA_MFMA_32X32X8);
  const kn_mma_shape *nv = kn_mma_shape_get(KN_MMA_NV_16X8X16);
  struct { kn_layout l; int r, c; } cases[] = {
      {kn_layout_mma(s32, 4, true), 128, 64},
      {kn_layout_mma(s32, 4, true), 128, 1},   /* copies across lanes */
      {kn_layout_dot(s32, 4, 1), 128, 64},     /* every warp holds all of B */
      {kn_layout_mma(nv, 4, false), 64, 64},
      {kn_layout_dot(nv, 4, 1), 32, 64},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kn_lmap m = eval(&cases[i].l, 2, cases[i].r, cases[i].c);
    assert_int_equal(owners_count(&m, 4, bad, &nown), 0);
    kn_lmap_free(&m);
  }
  /* blocked layouts, f32, 4 warps of 64 and of 32 lanes, shapes down to 1 */
  int shapes[][2] = {{8, 8}, {2, 2}, {1, 64}, {64, 1}, {1, 1}, {16, 32}, {128, 64}, {4, 256}};
  for (int lanes = 32; lanes <= 64; lanes *= 2)
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
      for (int contig = 0; contig < 2; contig++) {
        kn_layout b = kn_layout_blocked(2, shapes[i], contig, 4, 4, lanes);
        kn_lmap m = eval(&b, 2, shapes[i][0], shapes[i][1]);
        assert_int_equal(owners_count(&m, 4, bad, &nown), 0);
        kn_lmap_free(&m);
      }
  /* a map of one warp in a program of four: the other warps' bits must be 0 */
  int one[2] = {8, 8};
  kn_layout b1 = kn_layout_blocked(2, one, 1, 4, 1, 64);
  kn_lmap m1 = eval(&b1, 2, 8, 8);
  bool keep[64];
  unsigned lm, wm;
  assert_int_equal(kn_lmap_owners(&m1, 4, keep, &lm, &wm, bad, &nown), 0);
  assert_int_equal(wm, 3);
  kn_lmap_free(&m1);
  /* 80 elements, lane steps 1, 2, 4, 8, 16 and 64: lanes 0 and 48 both hold element 0 */
  int32_t reg[1][2] = {{0, 0}};
  kn_lmap h = {.rank = 1, .shape = {80, 1}, .lanes = 64, .warps = 1, .lane_bits = 6,
               .nregs = 1, .reg = reg,
               .lane = {{1, 0}, {2, 0}, {4, 0}, {8, 0}, {16, 0}, {64, 0}}};
  assert_int_equal(kn_lmap_owners(&h, 1, keep, &lm, &wm, bad, &nown), -1);
  assert_int_equal(bad[0], 0);
  assert_int_equal(bad[1], 0);
  assert_int_equal(nown, 2);
}

/* ---- the matrix instructions, as the ISA defines them (not through layout.c) ---- */

/* hardware A element (i, k) of an MxK instruction tile: which lane, which element */
static void isa_a(kn_mma_id id, int i, int k, int *lane, int *e) {
  switch (id) {
  case KN_MMA_MFMA_32X32X8: *lane = i + 32 * (k / 4); *e = k % 4; return;
  case KN_MMA_MFMA_16X16X16: *lane = i + 16 * (k / 4); *e = k % 4; return;
  case KN_MMA_MFMA_32X32X16: *lane = i + 32 * (k / 8); *e = k % 8; return;
  default: /* mma.sync m16n8k16 a_i: row g + 8*((i/2)%2), col 2t + i%2 + 8*(i/4) */
    *lane = 4 * (i % 8) + (k % 8) / 2;
    *e = (k % 2) + 2 * (i / 8) + 4 * (k / 8);
  }
}
static void isa_b(kn_mma_id id, int k, int j, int *lane, int *e) {
  switch (id) {
  case KN_MMA_MFMA_32X32X8: *lane = j + 32 * (k / 4); *e = k % 4; return;
  case KN_MMA_MFMA_16X16X16: *lane = j + 16 * (k / 4); *e = k % 4; return;
  case KN_MMA_MFMA_32X32X16: *lane = j + 32 * (k / 8); *e = k % 8; return;
  default: *lane = 4 * j + (k % 8) / 2; *e = (k % 2) + 2 * (k / 8);
  }
}
static void isa_d(kn_mma_id id, int i, int j, int *lane, int *r) {
  switch (id) {
  case KN_MMA_MFMA_32X32X8:
  case KN_MMA_MFMA_32X32X16: *lane = j + 32 * ((i / 4) % 2); *r = i % 4 + 4 * (i / 8); return;
  case KN_MMA_MFMA_16X16X16: *lane = j + 16 * (i / 4); *r = i % 4; return;
  default: *lane = 4 * (i % 8) + j / 2; *r = j % 2 + 2 * (i / 8);
  }
}

/* one instruction on one warp: D = A * B + C, operands as per-lane fragments */
static void isa_mma(const kn_mma_shape *s, double (*a)[8], double (*b)[8], double (*c)[16]) {
  double d[32][32];
  for (int i = 0; i < s->m; i++)
    for (int j = 0; j < s->n; j++) {
      int l, r;
      isa_d(s->id, i, j, &l, &r);
      double acc = c[l][r];
      for (int k = 0; k < s->k; k++) {
        int la, ea, lb, eb;
        isa_a(s->id, i, k, &la, &ea);
        isa_b(s->id, k, j, &lb, &eb);
        acc += a[la][ea] * b[lb][eb];
      }
      d[i][j] = acc;
    }
  for (int i = 0; i < s->m; i++)
    for (int j = 0; j < s->n; j++) {
      int l, r;
      isa_d(s->id, i, j, &l, &r);
      c[l][r] = d[i][j];
    }
}

/* C(MxN) = A(MxK) B(KxN) through the layout maps of dot_a, dot_b, mma(transposed); returns the
 * largest error against the plain product */
static double matmul_via_tables(const kn_mma_shape *s, bool transposed, int M, int N, int K,
                                int warps) {
  kn_layout la = kn_layout_dot(s, warps, 0), lb = kn_layout_dot(s, warps, 1);
  kn_layout lc = kn_layout_mma(s, warps, transposed);
  kn_lmap ma = eval(&la, 2, M, K), mb = eval(&lb, 2, K, N), mc = eval(&lc, 2, M, N);
  double *A = malloc(sizeof(double) * M * K), *B = malloc(sizeof(double) * K * N);
  double *C = calloc((size_t)M * N, sizeof(double));
  for (int i = 0; i < M * K; i++) A[i] = rnd();
  for (int i = 0; i < K * N; i++) B[i] = rnd();
  int L = s->lanes, reps_m = M / warps / s->m, reps_n = N / s->n, reps_k = K / s->k;
  double (*fa)[8] = calloc(64, sizeof *fa), (*fb)[8] = calloc(64, sizeof *fb);
  double (*fc)[16] = calloc(64, sizeof *fc);
  for (int w = 0; w < warps; w++)
    for (int mr = 0; mr < reps_m; mr++)
      for (int nr = 0; nr < reps_n; nr++) {
        memset(fc, 0, 64 * sizeof *fc);
        for (int kr = 0; kr < reps_k; kr++) {
          for (int l = 0; l < L; l++) {
            for (int e = 0; e < s->a_regs; e++) {   /* registers (mr, kr, e) of dot_a */
              int c[2];
              kn_lmap_coord(&ma, w, l, (mr * reps_k + kr) * s->a_regs + e, c);
              fa[l][e] = A[c[0] * K + c[1]];
            }
            for (int e = 0; e < s->b_regs; e++) {   /* registers (nr, kr, e) of dot_b */
              int c[2];
              kn_lmap_coord(&mb, w, l, (nr * reps_k + kr) * s->b_regs + e, c);
              fb[l][e] = B[c[0] * N + c[1]];
            }
          }
          /* transposed: the instruction is given B as its A and A as its B (D^T = B^T A^T) */
          if (transposed) isa_mma(s, fb, fa, fc);
          else isa_mma(s, fa, fb, fc);
        }
        for (int l = 0; l < L; l++)
          for (int r = 0; r < s->acc_regs; r++) {   /* registers (mr, nr, r) of mma */
            int c[2];
            kn_lmap_coord(&mc, w, l, (mr * reps_n + nr) * s->acc_regs + r, c);
            C[c[0] * N + c[1]] = fc[l][r];
          }
      }
  double err = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ref = 0;
      for (int k = 0; k < K; k++) ref += A[i * K + k] * B[k * N + j];
      double e = ref - C[i * N + j];
      if (e < 0) e = -e;
      if (e > err) err = e;
    }
  free(A), free(B), free(C), free(fa), free(fb), free(fc);
  kn_lmap_free(&ma), kn_lmap_free(&mb), kn_lmap_free(&mc);
  return err;
}

static void test_mma_tables(void **state) {
  (void)state;
  const kn_mma_shape *s32 = kn_mma_shape_get(KN_MMA_MFMA_32X32X8);
  const kn_mma_shape *s16 = kn_mma_shape_get(KN_MMA_MFMA_16X16X16);
  const kn_mma_shape *f8 = kn_mma_shape_get(KN_MMA_MFMA_32X32X16);
  const kn_mma_shape *nv = kn_mma_shape_get(KN_MMA_NV_16X8X16);
  assert_true(matmul_via_tables(s32, false, 128, 64, 64, 4) == 0);
  assert_true(matmul_via_tables(s32, true, 128, 64, 128, 4) == 0);
  assert_true(matmul_via_tables(s32, true, 128, 96, 32, 4) == 0);
  assert_true(matmul_via_tables(s16, false, 64, 32, 64, 4) == 0);
  assert_true(matmul_via_tables(s16, true, 64, 64, 32, 4) == 0);
  assert_true(matmul_via_tables(f8, false, 64, 64, 32, 2) == 0);
  assert_true(matmul_via_tables(nv, false, 64, 32, 32, 4) == 0);
  /* a deliberately transposed accumulator table must be caught */
  kn_mma_shape bad = *s32;
  for (int j = 0; j < 16; j++) {
    int8_t t = bad.acc_reg[j][0];
    bad.acc_reg[j][0] = bad.acc_reg[j][1];
    bad.acc_reg[j][1] = t;
  }
  for (int b = 0; b < 6; b++) {
    int8_t t = bad.acc_lane[b][0];
    bad.acc_lane[b][0] = bad.acc_lane[b][1];
    bad.acc_lane[b][1] = t;
  }
  assert_true(matmul_via_tables(&bad, false, 128, 64, 64, 4) > 0);
  /* and so must an A table with its k elements in the wrong lanes */
  kn_mma_shape bad_a = *s16;
  bad_a.a_lane[4][1] = 8, bad_a.a_lane[5][1] = 4;
  assert_true(matmul_via_tables(&bad_a, false, 64, 32, 64, 4) > 0);
}

/* mma.sync m16n8k16 (the NVPTX target): the attention shapes through the tables, the
 * accumulator of S feeding the next dot as its A operand by renaming, the row reduction of the
 * accumulator (in-thread plus the two butterflies of a lane quad), and broken tables caught:
 * A's a2a3 / a4a5 pairs exchanged (row + 8 taken for k + 8, the classic slip in the PTX ISA
 * figure), and B with its second k half at k + 4 instead of k + 8 */
static void test_nv_tables(void **state) {
  (void)state;
  const kn_mma_shape *nv = kn_mma_shape_get(KN_MMA_NV_16X8X16);
  assert_true(matmul_via_tables(nv, false, 128, 64, 64, 4) == 0);    /* S = QK^T, D 64, 4 warps */
  assert_true(matmul_via_tables(nv, false, 128, 128, 64, 8) == 0);   /* O += PV, D 128, 8 warps */
  assert_true(matmul_via_tables(nv, false, 64, 80, 96, 4) == 0);     /* head dims 80, 96 */
  kn_mma_shape bad = *nv;
  for (int d = 0; d < 2; d++) {
    int8_t t = bad.a_reg[2][d];
    bad.a_reg[2][d] = bad.a_reg[4][d], bad.a_reg[4][d] = t;
    t = bad.a_reg[3][d];
    bad.a_reg[3][d] = bad.a_reg[5][d], bad.a_reg[5][d] = t;
  }
  assert_true(matmul_via_tables(&bad, false, 64, 32, 32, 4) > 0);
  bad = *nv;
  bad.b_reg[2][0] = 4, bad.b_reg[3][0] = 5;
  assert_true(matmul_via_tables(&bad, false, 64, 32, 32, 4) > 0);
  /* P (the accumulator of S, cast) is the A operand of PV: free */
  kn_layout acc = kn_layout_mma(nv, 4, false), da = kn_layout_dot(nv, 4, 0);
  kn_lmap ma = eval(&acc, 2, 128, 64), md = eval(&da, 2, 128, 64);
  assert_true(kn_lmap_convert_free(&ma, &md, NULL));
  kn_lmap_free(&md);
  /* the row reduction: butterflies over lane bits 0 and 1 only */
  kn_layout sl = kn_layout_slice(&acc, 1);
  kn_lmap ms = eval(&sl, 1, 128, 0);
  kn_reduce_plan rp;
  assert_int_equal(kn_reduce_plan_make(&ma, &ms, 1, &rp), 0);
  assert_int_equal(rp.nbfly, 2);
  assert_int_equal(rp.bfly[0], 0);
  assert_int_equal(rp.bfly[1], 1);
  kn_reduce_plan_free(&rp);
  kn_lmap_free(&ms);
  kn_lmap_free(&ma);
}

/* store every element of src's registers at the shared offsets, read dst's back */
static void roundtrip_via(const kn_layout *src, const kn_layout *dst, int R, int C,
                          const kn_layout *shp, bool vec_check) {
  kn_lmap ms = eval(src, 2, R, C), md = eval(dst, 2, R, C);
  int shape[2] = {R, C};
  kn_layout sh = *shp;
  int64_t size = kn_shared_size(&sh, shape);
  double *lds = malloc(sizeof(double) * size);
  char *seen = calloc((size_t)size, 1);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      int64_t o = kn_shared_offset(&sh, shape, i, j);
      assert_true(o >= 0 && o < size);
      assert_int_equal(seen[o], 0);   /* a bijection */
      seen[o] = 1;
    }
  for (int w = 0; w < ms.warps; w++)
    for (int l = 0; l < ms.lanes; l++)
      for (int r = 0; r < ms.nregs; r++) {
        int c[2];
        kn_lmap_coord(&ms, w, l, r, c);
        lds[kn_shared_offset(&sh, shape, c[0], c[1])] = c[0] * 1000.0 + c[1];
      }
  for (int w = 0; w < md.warps; w++)
    for (int l = 0; l < md.lanes; l++)
      for (int r = 0; r < md.nregs; r++) {
        int c[2];
        kn_lmap_coord(&md, w, l, r, c);
        assert_true(lds[kn_shared_offset(&sh, shape, c[0], c[1])] == c[0] * 1000.0 + c[1]);
      }
  /* the reader's fragments are contiguous vectors in the swizzled buffer (not for ldmatrix
   * layouts: there a lane's pair comes from an 8x8 matrix whose rows are 16-byte chunks) */
  if (vec_check) assert_int_equal(kn_lmap_vec(&md, sh.order[0], sh.vec), sh.vec);
  free(lds), free(seen);
  kn_lmap_free(&ms), kn_lmap_free(&md);
}

/* through the layout the pass would pick (padded for dot operands) and through an XOR swizzle */
static void roundtrip(const kn_layout *src, const kn_layout *dst, int R, int C) {
  int shape[2] = {R, C};
  kn_layout sh = kn_layout_shared_for(dst, shape, 2);
  roundtrip_via(src, dst, R, C, &sh, true);
  kn_layout sw = kn_layout_shared_swizzled(sh.order[0], shape, sh.vec, 2);
  assert_true(sw.max_phase > 1);
  roundtrip_via(src, dst, R, C, &sw, true);
}

static void test_shared_roundtrip(void **state) {
  (void)state;
  const kn_mma_shape *s32 = kn_mma_shape_get(KN_MMA_MFMA_32X32X8);
  const kn_mma_shape *s16 = kn_mma_shape_get(KN_MMA_MFMA_16X16X16);
  int q[2] = {128, 128}, kt[2] = {128, 64}, v[2] = {64, 128}, d96[2] = {64, 96};
  kn_layout bq = kn_layout_blocked(2, q, 1, 2, 4, 64);
  kn_layout bk = kn_layout_blocked(2, kt, 0, 2, 4, 64);
  kn_layout bv = kn_layout_blocked(2, v, 1, 2, 4, 64);
  kn_layout b96 = kn_layout_blocked(2, d96, 1, 2, 4, 64);
  kn_layout a32 = kn_layout_dot(s32, 4, 0), b32 = kn_layout_dot(s32, 4, 1);
  kn_layout b16 = kn_layout_dot(s16, 4, 1), a16 = kn_layout_dot(s16, 4, 0);
  roundtrip(&bq, &a32, 128, 128);   /* Q -> dot_a */
  roundtrip(&bk, &b32, 128, 64);    /* K^T -> dot_b */
  roundtrip(&bv, &b32, 64, 128);    /* V -> dot_b (the shared order flips) */
  roundtrip(&bv, &b16, 64, 128);
  roundtrip(&b96, &a16, 64, 96);
  kn_layout sh = kn_layout_shared_for(&b32, kt, 2);
  assert_int_equal(sh.order[0], 0);
  assert_true(sh.pad > 0);
  /* a padded row of K^T (128 halves + 4) starts two banks after the previous one: the 16 rows
   * a half-wave reads at one k cover all 32 banks */
  char banks[32] = {0};
  for (int n = 0; n < 16; n++) {
    int64_t byte = kn_shared_offset(&sh, kt, 0, n) * 2;
    banks[(byte / 4) % 32]++, banks[(byte / 4 + 1) % 32]++;
  }
  for (int b = 0; b < 32; b++) assert_int_equal(banks[b], 1);
}

/* NVPTX's ldmatrix layouts (16-byte chunks XOR row phase, compiler/gpu/assign_layouts.c): an
 * 8x8 matrix read (8 consecutive rows from a multiple of 8, one chunk) touches 8 distinct
 * 16-byte bank groups, so ldmatrix is conflict-free; and staging through them round-trips the
 * mma.sync operands (K^T and V with the global layout's contiguous dim, Q) */
static void test_ldsm_swizzle(void **state) {
  (void)state;
  const kn_mma_shape *nv = kn_mma_shape_get(KN_MMA_NV_16X8X16);
  const int shapes[][3] = {{64, 64, 0}, {128, 64, 0}, {32, 64, 0}, {64, 64, 1}, {64, 128, 1},
                           {128, 128, 1}, {64, 32, 1}, {64, 256, 1}};
  for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
    int shape[2] = {shapes[t][0], shapes[t][1]}, inner = shapes[t][2];
    kn_layout sw = kn_layout_shared_swizzled(inner, shape, 8, 2);
    int rows = shape[1 - inner], chunks = shape[inner] / 8;
    for (int r0 = 0; r0 < rows; r0 += 8)
      for (int c = 0; c < chunks; c++) {
        int seen[8] = {0};
        for (int i = 0; i < 8; i++) {
          int rc[2];
          rc[1 - inner] = r0 + i;
          rc[inner] = 8 * c;
          int64_t byte = kn_shared_offset(&sw, shape, rc[0], rc[1]) * 2;
          assert_int_equal(byte % 16, 0);
          seen[(byte / 16) % 8]++;
        }
        for (int b = 0; b < 8; b++) assert_int_equal(seen[b], 1);
      }
  }
  int kt[2] = {64, 64}, v[2] = {64, 128}, q[2] = {128, 128};
  kn_layout bk = kn_layout_blocked(2, kt, 0, 2, 4, 32), bv = kn_layout_blocked(2, v, 1, 2, 4, 32);
  kn_layout bq = kn_layout_blocked(2, q, 1, 2, 4, 32);
  kn_layout a = kn_layout_dot(nv, 4, 0), b = kn_layout_dot(nv, 4, 1);
  kn_layout sk = kn_layout_shared_swizzled(0, kt, 8, 2), sv = kn_layout_shared_swizzled(1, v, 8, 2);
  kn_layout sq = kn_layout_shared_swizzled(1, q, 8, 2);
  roundtrip_via(&bk, &b, 64, 64, &sk, false);    /* K^T: rows n, elements k (ldmatrix) */
  roundtrip_via(&bv, &b, 64, 128, &sv, false);   /* V: rows k, elements n (ldmatrix.trans) */
  roundtrip_via(&bq, &a, 128, 128, &sq, false);  /* Q staged once */
}

static void reduce_check(const kn_layout *p, int R, int C) {
  kn_lmap pm = eval(p, 2, R, C);
  kn_layout sl = kn_layout_slice(p, 1);
  kn_lmap sm = eval(&sl, 1, R, 0);
  kn_reduce_plan plan;
  assert_int_equal(kn_reduce_plan_make(&pm, &sm, 1, &plan), 0);
  double *X = malloc(sizeof(double) * R * C);
  for (int i = 0; i < R * C; i++) X[i] = rnd();
  int L = pm.lanes, W = pm.warps;
  double *sum = calloc((size_t)W * L * sm.nregs, sizeof(double));
  double *mx = malloc(sizeof(double) * W * L * sm.nregs);
  for (int i = 0; i < W * L * sm.nregs; i++) mx[i] = -1e300;
  for (int w = 0; w < W; w++)
    for (int l = 0; l < L; l++)
      for (int r = 0; r < pm.nregs; r++) {
        int c[2];
        kn_lmap_coord(&pm, w, l, r, c);
        double x = X[c[0] * C + c[1]];
        int g = (w * L + l) * sm.nregs + plan.group[r];
        sum[g] += x;
        if (x > mx[g]) mx[g] = x;
      }
  for (int b = 0; b < plan.nbfly; b++) {
    double *ns = malloc(sizeof(double) * W * L * sm.nregs), *nm = malloc(sizeof(double) * W * L * sm.nregs);
    for (int w = 0; w < W; w++)
      for (int l = 0; l < L; l++)
        for (int q = 0; q < sm.nregs; q++) {
          int me = (w * L + l) * sm.nregs + q, other = (w * L + (l ^ (1 << plan.bfly[b]))) * sm.nregs + q;
          ns[me] = sum[me] + sum[other];
          nm[me] = mx[me] > mx[other] ? mx[me] : mx[other];
        }
    free(sum), free(mx);
    sum = ns, mx = nm;
  }
  for (int w = 0; w < W; w++)
    for (int l = 0; l < L; l++)
      for (int q = 0; q < sm.nregs; q++) {
        int c[2];
        kn_lmap_coord(&sm, w, l, q, c);
        double ref = 0, refm = -1e300;
        for (int j = 0; j < C; j++) {
          ref += X[c[0] * C + j];
          if (X[c[0] * C + j] > refm) refm = X[c[0] * C + j];
        }
        assert_true(sum[(w * L + l) * sm.nregs + q] == ref);
        assert_true(mx[(w * L + l) * sm.nregs + q] == refm);
      }
  free(X), free(sum), free(mx);
  kn_reduce_plan_free(&plan);
  kn_lmap_free(&pm), kn_lmap_free(&sm);
}

/* wgmma's B operand (compiler/gpu/lower_gpu.c, "NVPTX: wgmma"): the element the hardware
 * reads for B(k, n) of every k step, modelled from the PTX ISA's canonical layouts ("Shared
 * Memory Matrix Layout", 128-byte swizzle, T = 8 16-bit elements per 16 bytes):
 *   K-major  ((8,m),(T,2k)) : ((8T,SBO),(1,T))      n = r + 8 m',  k = t + T k'
 *   N-major  ((T,8,m),(8,k)) : ((1,T,LBO),(8T,SBO)) n = t + T c + 64 m',  k = r + 8 k'
 * at the descriptor's start address (strides in elements, LBO / SBO in bytes), then
 * Swizzle<3,4,3> on the byte address (bits 4-6 ^= bits 7-9, the buffer 1024-byte aligned),
 * must be where kiln's store layout (kn_layout_shared_wgmma, kn_shared_offset) put B(k, n);
 * and the layout is a bijection into its buffer.  K^T of S = QK^T is K-major, V of O += PV
 * N-major, at head dims that fill one, two and a partial column block. */
static int64_t hw_swizzle(int64_t byte) { return byte ^ (((byte >> 7) & 7) << 4); }

static void wgmma_reads(int K, int N, int inner) {
  int shape[2] = {K, N};
  kn_layout s = kn_layout_shared_wgmma(inner, shape, 2);
  assert_int_equal(s.cblock, 64);
  int64_t size = kn_shared_size(&s, shape);
  char *seen = calloc((size_t)size, 1);
  assert_non_null(seen);
  for (int k = 0; k < K; k++)
    for (int n = 0; n < N; n++) {
      int64_t o = kn_shared_offset(&s, shape, k, n);
      assert_true(o >= 0 && o < size);
      assert_int_equal(seen[o]++, 0);
    }
  free(seen);
  for (int k0 = 0; k0 < K; k0 += 16) {
    kn_wgmma_desc d = kn_wgmma_desc_for(&s, shape, 2, k0);
    assert_int_equal(d.trans, inner != 0);
    assert_int_equal(d.start % 16, 0);
    assert_int_equal(d.sbo, 1024);
    for (int k = 0; k < 16; k++)
      for (int n = 0; n < N; n++) {
        int64_t e;
        if (!d.trans) e = (n % 8) * 64 + (n / 8) * (d.sbo / 2) + (k % 8) + (k / 8) * 8;
        else e = (n % 8) + (n / 8 % 8) * 8 + (n / 64) * (d.lbo / 2) + (k % 8) * 64 + (k / 8) * (d.sbo / 2);
        int64_t hw = hw_swizzle(d.start + 2 * e);
        int64_t ours = 2 * kn_shared_offset(&s, shape, k0 + k, n);
        if (hw != ours)
          fail_msg("wgmma %s B %dx%d: k step %d reads B(%d,%d) at byte %lld, stored at %lld",
                   d.trans ? "N-major" : "K-major", K, N, k0, k0 + k, n, (long long)hw,
                   (long long)ours);
      }
  }
}

/* wgmma's A operand through a descriptor (the backward's K and V, Q and dO, staged once; K^T
 * of the atomic dQ's dQ^T = K^T dS^T): K-major A(m, k) of M x K (k contiguous) is read as
 * K-major B with n read as m, M-major A (m contiguous, imm-trans-a 1) as N-major B with n read
 * as m, from the start of each warpgroup's 64 rows (m0) and k step (k0): kn_wgmma_desc_for_a */
static void wgmma_reads_a(int M, int K, int inner) {
  int shape[2] = {M, K};
  kn_layout s = kn_layout_shared_wgmma(inner, shape, 2);
  for (int m0 = 0; m0 < M; m0 += 64)
    for (int k0 = 0; k0 < K; k0 += 16) {
      kn_wgmma_desc d = kn_wgmma_desc_for_a(&s, shape, 2, m0, k0);
      assert_int_equal(d.trans, inner == 0);
      assert_int_equal(d.start % 16, 0);
      assert_int_equal(d.sbo, 1024);
      for (int m = 0; m < 64 && m0 + m < M; m++)
        for (int k = 0; k < 16; k++) {
          int64_t e;
          if (!d.trans) e = (m % 8) * 64 + (m / 8) * (d.sbo / 2) + (k % 8) + (k / 8) * 8;
          else e = (m % 8) + (m / 8 % 8) * 8 + (m / 64) * (d.lbo / 2) + (k % 8) * 64 + (k / 8) * (d.sbo / 2);
          int64_t hw = hw_swizzle(d.start + 2 * e);
          int64_t ours = 2 * kn_shared_offset(&s, shape, m0 + m, k0 + k);
          if (hw != ours)
            fail_msg("wgmma %s A %dx%d: rows %d.. k step %d read A(%d,%d) at byte %lld, "
                     "stored at %lld", d.trans ? "M-major" : "K-major", M, K, m0, k0, m0 + m,
                     k0 + k, (long long)hw, (long long)ours);
        }
    }
}

static void test_wgmma_shared(void **state) {
  (void)state;
  static const int heads[] = {64, 128, 96, 256, 32};
  for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
    for (int bn = 16; bn <= 128; bn *= 2) {
      wgmma_reads(heads[i], bn, 0);   /* K^T: (d, n), d contiguous: K-major */
      wgmma_reads(bn, heads[i], 1);   /* V: (n, d), d contiguous: N-major */
    }
    wgmma_reads_a(64, heads[i], 1);   /* K of S^T = K Q^T, one warpgroup */
    wgmma_reads_a(128, heads[i], 1);  /* two warpgroups */
    if (heads[i] % 64 == 0)           /* K^T of dQ^T = K^T dS^T: M = D, k = BLOCK_N keys */
      for (int bn = 16; bn <= 128; bn *= 2) wgmma_reads_a(heads[i], bn, 0);
  }
}

static void test_reduce(void **state) {
  (void)state;
  const kn_mma_shape *s32 = kn_mma_shape_get(KN_MMA_MFMA_32X32X8);
  const kn_mma_shape *s16 = kn_mma_shape_get(KN_MMA_MFMA_16X16X16);
  kn_layout t32 = kn_layout_mma(s32, 4, true), n32 = kn_layout_mma(s32, 4, false);
  kn_layout t16 = kn_layout_mma(s16, 4, true);
  reduce_check(&t32, 128, 64);   /* one butterfly (lane bit 5) */
  reduce_check(&n32, 128, 64);   /* five butterflies */
  reduce_check(&t16, 64, 32);
  reduce_check(&t32, 128, 128);
  /* a layout whose warps split the reduced dim is refused */
  int shp[2] = {16, 256};
  kn_layout b = kn_layout_blocked(2, shp, 1, 4, 4, 64);
  b.tpw[0] = 1, b.tpw[1] = 64, b.wpp[0] = 1, b.wpp[1] = 4, b.spt[1] = 1;
  kn_lmap pm = eval(&b, 2, 16, 256);
  kn_layout sl = kn_layout_slice(&b, 1);
  kn_lmap sm = eval(&sl, 1, 16, 0);
  kn_reduce_plan plan;
  assert_int_equal(kn_reduce_plan_make(&pm, &sm, 1, &plan), -1);
  kn_lmap_free(&pm), kn_lmap_free(&sm);
}

static void test_free_conversions(void **state) {
  (void)state;
  const kn_mma_shape *s32 = kn_mma_shape_get(KN_MMA_MFMA_32X32X8);
  const kn_mma_shape *s16 = kn_mma_shape_get(KN_MMA_MFMA_16X16X16);
  /* P = softmax(S) feeds the second dot from registers when S is transposed-mma */
  kn_layout t32 = kn_layout_mma(s32, 4, true), n32 = kn_layout_mma(s32, 4, false);
  kn_layout a32 = kn_layout_dot(s32, 4, 0);
  kn_lmap mt = eval(&t32, 2, 128, 64), mn = eval(&n32, 2, 128, 64), ma = eval(&a32, 2, 128, 64);
  int map[256];
  assert_true(kn_lmap_convert_free(&mt, &ma, map));
  assert_false(kn_lmap_convert_free(&mn, &ma, NULL));
  kn_lmap_free(&mt), kn_lmap_free(&mn), kn_lmap_free(&ma);
  kn_layout t16 = kn_layout_mma(s16, 4, true), a16 = kn_layout_dot(s16, 4, 0);
  mt = eval(&t16, 2, 64, 32), ma = eval(&a16, 2, 64, 32);
  assert_true(kn_lmap_convert_free(&mt, &ma, map));
  kn_lmap_free(&mt), kn_lmap_free(&ma);
  /* expand_dims + broadcast of a row slice back to its parent is free */
  kn_lmap col = eval(&t32, 2, 128, 1), full = eval(&t32, 2, 128, 128);
  assert_true(kn_lmap_convert_free(&col, &full, map));
  kn_lmap_free(&col), kn_lmap_free(&full);
  char buf[256];
  kn_layout sl = kn_layout_slice(&t32, 1);
  kn_layout_format(&sl, buf, sizeof buf);
  assert_string_equal(buf, "#slice<dim=1, #mma<mfma_32x32x8, warps=[4,1], transposed>>");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_coverage),
      cmocka_unit_test(test_mma_tables),
      cmocka_unit_test(test_nv_tables),
      cmocka_unit_test(test_shared_roundtrip),
      cmocka_unit_test(test_ldsm_swizzle),
      cmocka_unit_test(test_wgmma_shared),
      cmocka_unit_test(test_reduce),
      cmocka_unit_test(test_free_conversions),
      cmocka_unit_test(test_owners),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
