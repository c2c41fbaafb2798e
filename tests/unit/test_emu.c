/* test_emu.c — the emulated AMDGPU targets' hardware semantics and runtime.
 *
 * 1. MFMA lane tables: entries worked out by hand from AMD's Matrix Instruction Calculator
 *    formulas (a transposed or shifted table fails them), the tables being bijections, and every
 *    MFMA kiln emits computing D = A B + C exactly on small-integer matrices with distinct
 *    entries, its operands placed by the test's own statement of the hardware layout.
 * 2. DPP, ds_swizzle, ds_bpermute, ds_permute on hand-computed cases (the ISA guide's examples).
 * 3. The runtime on hand-written LLVM IR kernels: an MFMA 32x32x8 product checked against a C
 *    matmul, a bpermute butterfly and a DPP row reduction, and the errors that must come back as
 *    diagnostics, never a hang or a crash: a barrier one wave never reaches (deadlock), waves at
 *    different barriers, lanes at different cross-lane operations, LDS beyond the allocation, LDS
 *    beyond 64 KiB, an LDS allocation over 64 KiB, an LDS race between waves, unmasked
 *    out-of-bounds global loads (and the masked form that must pass).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "emu.h"
#include "numeric.h"

/* ---- 1. MFMA ---- */

static void expect_a(kn_emu_mfma_kind k, int i, int kk, int lane, int elem) {
  int l, e;
  kn_emu_mfma_a_loc(k, i, kk, &l, &e);
  if (l != lane || e != elem)
    fail_msg("%s A[%d][%d]: lane %d elem %d, want lane %d elem %d", kn_emu_mfma_get(k)->mnemonic, i,
             kk, l, e, lane, elem);
}

static void expect_b(kn_emu_mfma_kind k, int kk, int j, int lane, int elem) {
  int l, e;
  kn_emu_mfma_b_loc(k, kk, j, &l, &e);
  if (l != lane || e != elem)
    fail_msg("%s B[%d][%d]: lane %d elem %d, want lane %d elem %d", kn_emu_mfma_get(k)->mnemonic, kk,
             j, l, e, lane, elem);
}

static void expect_d(kn_emu_mfma_kind k, int i, int j, int lane, int reg) {
  int l, r;
  kn_emu_mfma_acc_loc(k, i, j, &l, &r);
  if (l != lane || r != reg)
    fail_msg("%s D[%d][%d]: lane %d reg %d, want lane %d reg %d", kn_emu_mfma_get(k)->mnemonic, i, j,
             l, r, lane, reg);
}

/* entries read off the calculator's register layouts (--register-layout -A / -B / -D) */
static void test_mfma_table_entries(void **st) {
  (void)st;
  for (int bf = 0; bf < 2; bf++) {
    kn_emu_mfma_kind k = bf ? KN_EMU_MFMA_32X32X8_BF16 : KN_EMU_MFMA_32X32X8_F16;
    expect_a(k, 0, 0, 0, 0);
    expect_a(k, 5, 6, 37, 2);     /* k 4..7 live in lanes 32..63 */
    expect_a(k, 31, 3, 31, 3);
    expect_b(k, 7, 2, 34, 3);
    expect_b(k, 1, 30, 30, 1);
    expect_d(k, 0, 0, 0, 0);
    expect_d(k, 4, 0, 32, 0);     /* rows 4..7 in the second lane group */
    expect_d(k, 9, 3, 3, 5);      /* row 9: register 4 + 1, first lane group */
    expect_d(k, 13, 1, 33, 5);
    expect_d(k, 31, 31, 63, 15);
    expect_d(k, 2, 17, 17, 2);
  }
  for (int bf = 0; bf < 2; bf++) {
    kn_emu_mfma_kind k = bf ? KN_EMU_MFMA_16X16X16_BF16 : KN_EMU_MFMA_16X16X16_F16;
    expect_a(k, 3, 9, 35, 1);     /* k 8..11: lanes 32..47 */
    expect_a(k, 15, 15, 63, 3);
    expect_b(k, 4, 0, 16, 0);
    expect_d(k, 6, 5, 21, 2);     /* row 6: lane group 1, register 2 */
    expect_d(k, 15, 15, 63, 3);
    expect_d(k, 0, 9, 9, 0);
  }
  expect_a(KN_EMU_MFMA_32X32X16_FP8, 2, 11, 34, 3);  /* 8 fp8 per lane */
  expect_b(KN_EMU_MFMA_32X32X16_FP8, 15, 31, 63, 7);
  expect_d(KN_EMU_MFMA_32X32X16_FP8, 13, 1, 33, 5);
  assert_int_equal(kn_emu_mfma_by_intrinsic("llvm.amdgcn.mfma.f32.32x32x8f16", "gfx942"), KN_EMU_MFMA_32X32X8_F16);
  assert_int_equal(kn_emu_mfma_by_intrinsic("llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8", "gfx942"),
                   KN_EMU_MFMA_32X32X16_FP8);
  assert_int_equal(kn_emu_mfma_by_intrinsic("llvm.amdgcn.mfma.f32.4x4x4f16", NULL), -1);
}

/* every element in exactly one (lane, slot), and the inverse maps agree */
static void test_mfma_tables_bijective(void **st) {
  (void)st;
  for (int k = 0; k < KN_EMU_MFMA_COUNT; k++) {
    const kn_emu_mfma_desc *s = kn_emu_mfma_get((kn_emu_mfma_kind)k);
    assert_int_equal(s->m * s->k, 64 * s->in_per_lane);
    assert_int_equal(s->m * s->n, 64 * s->acc_per_lane);
    static char seen[64][16];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < s->m; i++)
      for (int kk = 0; kk < s->k; kk++) {
        int l, e, i2, k2;
        kn_emu_mfma_a_loc((kn_emu_mfma_kind)k, i, kk, &l, &e);
        assert_true(l >= 0 && l < 64 && e >= 0 && e < s->in_per_lane && !seen[l][e]);
        seen[l][e] = 1;
        kn_emu_mfma_a_coord((kn_emu_mfma_kind)k, l, e, &i2, &k2);
        assert_int_equal(i2, i);
        assert_int_equal(k2, kk);
        kn_emu_mfma_b_loc((kn_emu_mfma_kind)k, kk, i, &l, &e);
        kn_emu_mfma_b_coord((kn_emu_mfma_kind)k, l, e, &k2, &i2);
        assert_int_equal(i2, i);
        assert_int_equal(k2, kk);
      }
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < s->m; i++)
      for (int j = 0; j < s->n; j++) {
        int l, r, i2, j2;
        kn_emu_mfma_acc_loc((kn_emu_mfma_kind)k, i, j, &l, &r);
        assert_true(l >= 0 && l < 64 && r >= 0 && r < s->acc_per_lane && !seen[l][r]);
        seen[l][r] = 1;
        kn_emu_mfma_acc_coord((kn_emu_mfma_kind)k, l, r, &i2, &j2);
        assert_int_equal(i2, i);
        assert_int_equal(j2, j);
      }
  }
}

/* The hardware layout restated by the test (AMD calculator, single block):
 * A[i][k] in lane i + m*(k/KL), slot k%KL; B[k][j] in lane j + n*(k/KL), slot k%KL;
 * D[i][j] in lane j + n*((i/4) % (64/n)), register (i / (4*(64/n)))*4 + i%4. */
static void run_mfma(kn_emu_mfma_kind kind, unsigned breaks, bool *exact) {
  const kn_emu_mfma_desc *s = kn_emu_mfma_get(kind);
  int m = s->m, n = s->n, K = s->k, KL = s->in_per_lane, G = 64 / n;
  int esz = (int)kn_scalar_size(s->in);
  static uint8_t a[64][16], b[64][16];
  static float c[64][16], d[64][16];
  double A[32][32], B[32][32], C[32][32];  /* up to 32x32 outputs and k 32 (16x16x32) */
  for (int i = 0; i < m; i++)
    for (int k = 0; k < K; k++) A[i][k] = (double)((i * 3 + k * 5) % 9 - 4);  /* distinct rows */
  for (int k = 0; k < K; k++)
    for (int j = 0; j < n; j++) B[k][j] = (double)((k * 7 + j * 2) % 9 - 4);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) C[i][j] = (double)(i - 2 * j);
  for (int i = 0; i < m; i++)
    for (int k = 0; k < K; k++) {
      int l = i + m * (k / KL), e = k % KL;
      uint64_t bits = kn_encode(s->in, A[i][k]);
      memcpy(&a[l][e * esz], &bits, (size_t)esz);
    }
  for (int k = 0; k < K; k++)
    for (int j = 0; j < n; j++) {
      int l = j + n * (k / KL), e = k % KL;
      uint64_t bits = kn_encode(s->in, B[k][j]);
      memcpy(&b[l][e * esz], &bits, (size_t)esz);
    }
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) c[j + n * ((i / 4) % G)][(i / (4 * G)) * 4 + i % 4] = (float)C[i][j];
  const void *pa[64], *pb[64];
  const float *pc[64];
  float *pd[64];
  for (int l = 0; l < 64; l++) pa[l] = a[l], pb[l] = b[l], pc[l] = c[l], pd[l] = d[l];
  kn_emu_mfma_exec(kind, pa, pb, pc, pd, breaks);
  *exact = true;
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double want = C[i][j];
      for (int k = 0; k < K; k++) want += A[i][k] * B[k][j];
      if (d[j + n * ((i / 4) % G)][(i / (4 * G)) * 4 + i % 4] != (float)want) *exact = false;
    }
}

static void test_mfma_exec(void **st) {
  (void)st;
  for (int k = 0; k < KN_EMU_MFMA_COUNT; k++) {
    bool exact;
    run_mfma((kn_emu_mfma_kind)k, 0, &exact);
    if (!exact) fail_msg("%s: D != A B + C", kn_emu_mfma_get((kn_emu_mfma_kind)k)->mnemonic);
    run_mfma((kn_emu_mfma_kind)k, KN_EMU_BREAK_ACC_LANE, &exact);
    assert_false(exact);  /* the test-only break is visible */
  }
}

/* ---- 2. cross-lane moves ---- */

static void test_dpp(void **st) {
  (void)st;
  uint32_t src[64], old[64], out[64];
  for (int l = 0; l < 64; l++) src[l] = 100 + (uint32_t)l, old[l] = 1000 + (uint32_t)l;
  /* quad_perm:[1,0,3,2] */
  assert_int_equal(kn_emu_dpp_exec(old, src, 1 | 0 << 2 | 3 << 4 | 2 << 6, 15, 15, false, out), 0);
  assert_int_equal(out[0], 101), assert_int_equal(out[1], 100), assert_int_equal(out[2], 103);
  assert_int_equal(out[61], 160);
  /* row_shr:1: lane i reads lane i-1 of its row; the first lane of a row has no source */
  kn_emu_dpp_exec(old, src, 0x111, 15, 15, false, out);
  assert_int_equal(out[0], 1000), assert_int_equal(out[1], 100), assert_int_equal(out[16], 1016);
  assert_int_equal(out[17], 116);
  kn_emu_dpp_exec(old, src, 0x111, 15, 15, true, out);  /* bound_ctrl: zero instead */
  assert_int_equal(out[0], 0), assert_int_equal(out[16], 0), assert_int_equal(out[17], 116);
  /* row_shl:2 */
  kn_emu_dpp_exec(old, src, 0x102, 15, 15, false, out);
  assert_int_equal(out[0], 102), assert_int_equal(out[13], 115), assert_int_equal(out[14], 1014);
  /* row_ror:1, row_mirror, row_half_mirror */
  kn_emu_dpp_exec(old, src, 0x121, 15, 15, false, out);
  assert_int_equal(out[0], 115), assert_int_equal(out[1], 100), assert_int_equal(out[16], 131);
  kn_emu_dpp_exec(old, src, 0x140, 15, 15, false, out);
  assert_int_equal(out[0], 115), assert_int_equal(out[17], 130);
  kn_emu_dpp_exec(old, src, 0x141, 15, 15, false, out);
  assert_int_equal(out[0], 107), assert_int_equal(out[8], 115);
  /* row_bcast:15 and :31 */
  kn_emu_dpp_exec(old, src, 0x142, 15, 15, false, out);
  assert_int_equal(out[0], 1000), assert_int_equal(out[16], 115), assert_int_equal(out[63], 147);
  kn_emu_dpp_exec(old, src, 0x143, 15, 15, false, out);
  assert_int_equal(out[16], 1016), assert_int_equal(out[32], 131), assert_int_equal(out[63], 131);
  /* wave_shr:1, wave_ror:1, wave_shl:1, wave_rol:1 */
  kn_emu_dpp_exec(old, src, 0x138, 15, 15, false, out);
  assert_int_equal(out[0], 1000), assert_int_equal(out[16], 115);
  kn_emu_dpp_exec(old, src, 0x13c, 15, 15, false, out);
  assert_int_equal(out[0], 163);
  kn_emu_dpp_exec(old, src, 0x130, 15, 15, false, out);
  assert_int_equal(out[63], 1063), assert_int_equal(out[15], 116);
  kn_emu_dpp_exec(old, src, 0x134, 15, 15, false, out);
  assert_int_equal(out[63], 100);
  /* row and bank masks: disabled lanes keep old */
  kn_emu_dpp_exec(old, src, 0xe4 /* identity */, 0x1, 0xf, false, out);
  assert_int_equal(out[3], 103), assert_int_equal(out[16], 1016);
  kn_emu_dpp_exec(old, src, 0xe4, 0xf, 0x1, false, out);
  assert_int_equal(out[3], 103), assert_int_equal(out[4], 1004), assert_int_equal(out[19], 119);
  assert_int_equal(out[20], 1020);
  assert_int_equal(kn_emu_dpp_exec(old, src, 0x150, 15, 15, false, out), -1);  /* gfx10 row_share */
}

static void test_swizzle_permute(void **st) {
  (void)st;
  uint32_t src[64], out[64], addr[64];
  for (int l = 0; l < 64; l++) src[l] = 100 + (uint32_t)l;
  kn_emu_swizzle_exec(src, 0x1f | 1 << 10, out);  /* SWAPX1: and 0x1f, xor 1 */
  assert_int_equal(out[0], 101), assert_int_equal(out[1], 100), assert_int_equal(out[33], 132);
  kn_emu_swizzle_exec(src, 5 << 5, out);          /* BCASTX32 of lane 5 (per half) */
  assert_int_equal(out[0], 105), assert_int_equal(out[31], 105), assert_int_equal(out[40], 137);
  kn_emu_swizzle_exec(src, 0x1f | 0x0f << 10, out);  /* REVERSEX16 */
  assert_int_equal(out[0], 115), assert_int_equal(out[16], 131);
  kn_emu_swizzle_exec(src, 0x8000 | 3 | 2 << 2 | 1 << 4 | 0 << 6, out);  /* quad [3,2,1,0] */
  assert_int_equal(out[0], 103), assert_int_equal(out[5], 106), assert_int_equal(out[63], 160);
  kn_emu_swizzle_exec(src, 0xc000 | 1 << 5, out);  /* rotate by 1 within 32 */
  assert_int_equal(out[0], 101), assert_int_equal(out[30], 131), assert_int_equal(out[32], 133);
  /* the ISA guide's examples (lanes 4..63 read themselves) */
  for (int l = 0; l < 64; l++) addr[l] = (uint32_t)l * 4;
  addr[0] = 0, addr[1] = 0, addr[2] = 12, addr[3] = 4;
  kn_emu_bpermute_exec(addr, src, out);
  assert_int_equal(out[0], 100), assert_int_equal(out[1], 100), assert_int_equal(out[2], 103);
  assert_int_equal(out[3], 101), assert_int_equal(out[10], 110);
  kn_emu_permute_exec(addr, src, out);
  assert_int_equal(out[0], 101), assert_int_equal(out[1], 103), assert_int_equal(out[2], 0);
  assert_int_equal(out[3], 102);
  for (int l = 0; l < 64; l++) addr[l] = (uint32_t)(((l + 1) % 64) * 4 + 256);  /* high bits ignored */
  kn_emu_bpermute_exec(addr, src, out);
  assert_int_equal(out[0], 101), assert_int_equal(out[63], 100);
}

/* ---- 3. hand-written kernels ---- */

static const char *decls =
    "declare i32 @llvm.amdgcn.workitem.id.x()\n"
    "declare void @llvm.amdgcn.s.barrier()\n"
    "declare i32 @llvm.amdgcn.ds.bpermute(i32, i32)\n"
    "declare i32 @llvm.amdgcn.update.dpp.i32(i32, i32, i32, i32, i32, i1)\n"
    "declare <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half>, <4 x half>, <16 x float>, i32, i32, i32)\n"
    "declare float @llvm.amdgcn.exp2.f32(float)\n";

/* compiles `body` (after the declarations) for gfx942-emu and runs it on one workgroup */
static int run_ir(const char *body, const kn_argval *args, const kn_region *regions, int nregions,
                  kn_diag *d) {
  char *ir = malloc(strlen(decls) + strlen(body) + 1);
  assert_non_null(ir);
  strcpy(ir, decls);
  strcat(ir, body);
  kn_emu_ir_kernel *k = NULL;
  if (kn_emu_compile_ir(ir, "gfx942", 0, &k, d)) fail_msg("compile: %s", d->message);
  free(ir);
  int grid[3] = {1, 1, 1};
  int rc = kn_emu_run_ir(k, args, grid, regions, nregions, NULL, d);
  kn_emu_ir_kernel_free(k);
  return rc;
}

static void expect_error(int rc, const kn_diag *d, const char *want) {
  assert_int_equal(rc, -1);
  if (!strstr(d->message, want)) fail_msg("wanted '%s' in: %s", want, d->message);
}

static const char *mm_kernel =
    "define amdgpu_kernel void @mm(ptr addrspace(1) %a, ptr addrspace(1) %bt, ptr addrspace(1) %d) #0 {\n"
    "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
    "  %row = and i32 %l, 31\n"
    "  %grp = lshr i32 %l, 5\n"
    "  %o0 = mul i32 %row, 8\n"
    "  %o1 = shl i32 %grp, 2\n"
    "  %o = add i32 %o0, %o1\n"       /* A[row][4 grp ..], B^T[col][4 grp ..] */
    "  %ap = getelementptr half, ptr addrspace(1) %a, i32 %o\n"
    "  %av = load <4 x half>, ptr addrspace(1) %ap, align 8\n"
    "  %bp = getelementptr half, ptr addrspace(1) %bt, i32 %o\n"
    "  %bv = load <4 x half>, ptr addrspace(1) %bp, align 8\n"
    "  %dv = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half> %av, <4 x half> %bv, "
    "<16 x float> zeroinitializer, i32 0, i32 0, i32 0)\n"
    "  %dp = getelementptr <16 x float>, ptr addrspace(1) %d, i32 %l\n"
    "  store <16 x float> %dv, ptr addrspace(1) %dp, align 64\n"
    "  ret void\n"
    "}\n"
    "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,64\" }\n";

/* a 32x32x8 product through the whole path: rewrite, JIT, fibers, the MFMA rendezvous */
static void test_kernel_mfma_product(void **st) {
  (void)st;
  _Float16 *a = aligned_alloc(64, 32 * 8 * 2), *bt = aligned_alloc(64, 32 * 8 * 2);
  float *d = aligned_alloc(64, 64 * 16 * 4);
  double A[32][8], B[8][32];
  for (int i = 0; i < 32; i++)
    for (int k = 0; k < 8; k++) A[i][k] = (i * 7 + k * 3) % 11 - 5, a[i * 8 + k] = (_Float16)A[i][k];
  for (int k = 0; k < 8; k++)
    for (int j = 0; j < 32; j++) B[k][j] = (k * 5 + j) % 13 - 6, bt[j * 8 + k] = (_Float16)B[k][j];
  kn_argval args[3] = {{.p = a}, {.p = bt}, {.p = d}};
  kn_region regions[3] = {{a, 512}, {bt, 512}, {d, 4096}};
  kn_diag dg;
  if (run_ir(mm_kernel, args, regions, 3, &dg)) fail_msg("run: %s", dg.message);
  for (int l = 0; l < 64; l++)
    for (int r = 0; r < 16; r++) {
      int i = 8 * (r / 4) + 4 * (l / 32) + r % 4, j = l % 32;
      double want = 0;
      for (int k = 0; k < 8; k++) want += A[i][k] * B[k][j];
      if (d[l * 16 + r] != (float)want) fail_msg("D[%d][%d] (lane %d reg %d) = %g, want %g", i, j, l, r, d[l * 16 + r], want);
    }
  free(a), free(bt), free(d);
}

static const char *reduce_kernel =
    "define amdgpu_kernel void @red(ptr addrspace(1) %x, ptr addrspace(1) %out) #0 {\n"
    "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
    "  %p = getelementptr i32, ptr addrspace(1) %x, i32 %l\n"
    "  %v0 = load i32, ptr addrspace(1) %p, align 4\n"
    "  %x1 = xor i32 %l, 1\n  %a1 = shl i32 %x1, 2\n"
    "  %o1 = call i32 @llvm.amdgcn.ds.bpermute(i32 %a1, i32 %v0)\n  %v1 = add i32 %v0, %o1\n"
    "  %x2 = xor i32 %l, 2\n  %a2 = shl i32 %x2, 2\n"
    "  %o2 = call i32 @llvm.amdgcn.ds.bpermute(i32 %a2, i32 %v1)\n  %v2 = add i32 %v1, %o2\n"
    "  %x3 = xor i32 %l, 4\n  %a3 = shl i32 %x3, 2\n"
    "  %o3 = call i32 @llvm.amdgcn.ds.bpermute(i32 %a3, i32 %v2)\n  %v3 = add i32 %v2, %o3\n"
    "  %x4 = xor i32 %l, 8\n  %a4 = shl i32 %x4, 2\n"
    "  %o4 = call i32 @llvm.amdgcn.ds.bpermute(i32 %a4, i32 %v3)\n  %v4 = add i32 %v3, %o4\n"
    "  %x5 = xor i32 %l, 16\n  %a5 = shl i32 %x5, 2\n"
    "  %o5 = call i32 @llvm.amdgcn.ds.bpermute(i32 %a5, i32 %v4)\n  %v5 = add i32 %v4, %o5\n"
    "  %x6 = xor i32 %l, 32\n  %a6 = shl i32 %x6, 2\n"
    "  %o6 = call i32 @llvm.amdgcn.ds.bpermute(i32 %a6, i32 %v5)\n  %v6 = add i32 %v5, %o6\n"
    /* row sums with DPP row_ror:8, 4, 2, 1 */
    "  %d1 = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %v0, i32 296, i32 15, i32 15, i1 false)\n"
    "  %s1 = add i32 %v0, %d1\n"
    "  %d2 = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %s1, i32 292, i32 15, i32 15, i1 false)\n"
    "  %s2 = add i32 %s1, %d2\n"
    "  %d3 = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %s2, i32 290, i32 15, i32 15, i1 false)\n"
    "  %s3 = add i32 %s2, %d3\n"
    "  %d4 = call i32 @llvm.amdgcn.update.dpp.i32(i32 0, i32 %s3, i32 289, i32 15, i32 15, i1 false)\n"
    "  %s4 = add i32 %s3, %d4\n"
    "  %q = getelementptr i32, ptr addrspace(1) %out, i32 %l\n"
    "  store i32 %v6, ptr addrspace(1) %q, align 4\n"
    "  %l2 = add i32 %l, 64\n"
    "  %q2 = getelementptr i32, ptr addrspace(1) %out, i32 %l2\n"
    "  store i32 %s4, ptr addrspace(1) %q2, align 4\n"
    "  ret void\n"
    "}\n"
    "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,64\" }\n";

static void test_kernel_reductions(void **st) {
  (void)st;
  int32_t x[64], out[128];
  int total = 0, rows[4] = {0};
  for (int l = 0; l < 64; l++) x[l] = (l * 37) % 101 - 50, total += x[l], rows[l / 16] += x[l];
  kn_argval args[2] = {{.p = x}, {.p = out}};
  kn_region regions[2] = {{x, sizeof x}, {out, sizeof out}};
  kn_diag d;
  if (run_ir(reduce_kernel, args, regions, 2, &d)) fail_msg("run: %s", d.message);
  for (int l = 0; l < 64; l++) {
    assert_int_equal(out[l], total);
    assert_int_equal(out[64 + l], rows[l / 16]);
  }
}

/* v_exp_f32 (llvm.amdgcn.exp2, kiln's AMDGPU exp2): 2^x within 1 ulp, results below 2^-126
 * flushed to +0, -inf -> +0, +inf -> +inf, NaN -> NaN */
static const char *exp2_kernel =
    "define amdgpu_kernel void @e(ptr addrspace(1) %x, ptr addrspace(1) %y) #0 {\n"
    "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
    "  %xp = getelementptr float, ptr addrspace(1) %x, i32 %l\n"
    "  %xv = load float, ptr addrspace(1) %xp, align 4\n"
    "  %e = call float @llvm.amdgcn.exp2.f32(float %xv)\n"
    "  %yp = getelementptr float, ptr addrspace(1) %y, i32 %l\n"
    "  store float %e, ptr addrspace(1) %yp, align 4\n"
    "  ret void\n"
    "}\n"
    "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,64\" }\n";

static void test_exp2(void **st) {
  (void)st;
  float x[64], y[64];
  const float special[] = {-INFINITY, INFINITY, NAN, -126.0f, -126.5f, -127.0f, -149.0f, -200.0f,
                           0.0f, -0.0f, 1.0f, 127.0f, 128.0f, 0x1p-140f};
  const int ns = (int)(sizeof special / sizeof special[0]);
  for (int l = 0; l < 64; l++) x[l] = l < ns ? special[l] : -125.0f + 3.97f * (float)(l - ns);
  kn_argval args[2] = {{.p = x}, {.p = y}};
  kn_region regions[2] = {{x, sizeof x}, {y, sizeof y}};
  kn_diag d;
  if (run_ir(exp2_kernel, args, regions, 2, &d)) fail_msg("run: %s", d.message);
  for (int l = 0; l < 64; l++) {
    double want = exp2((double)x[l]);
    if (isnan(x[l])) {
      assert_true(isnan(y[l]));
    } else if (want < 0x1p-126) {
      if (y[l] != 0.0f || signbit(y[l])) fail_msg("exp2(%a) = %a, want +0 (flushed)", x[l], y[l]);
    } else if (want >= 0x1p128) {
      assert_true(isinf(y[l]) && y[l] > 0);
    } else if (fabs(y[l] - want) > 0x1p-23 * want) {
      fail_msg("exp2(%a) = %a, want %a within 1 ulp", x[l], y[l], want);
    }
  }
  assert_true(y[3] == 0x1p-126f);  /* the smallest normal result is kept */
}

static void test_deadlock(void **st) {
  (void)st;
  /* wave 1 skips the barrier and finishes: wave 0 would wait forever */
  const char *k =
      "define amdgpu_kernel void @dl() #0 {\n"
      "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %w = lshr i32 %l, 6\n"
      "  %c = icmp eq i32 %w, 0\n"
      "  br i1 %c, label %bar, label %end\n"
      "bar:\n  call void @llvm.amdgcn.s.barrier()\n  br label %end\n"
      "end:\n  ret void\n}\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,128\" }\n";
  kn_diag d;
  int rc = run_ir(k, NULL, NULL, 0, &d);
  expect_error(rc, &d, "deadlock");
  expect_error(rc, &d, "wave 0 lanes 0-63 wait at s_barrier #1");
  expect_error(rc, &d, "wave 1 lanes 0-63 finished");
  /* both waves at a barrier, but not the same one */
  const char *k2 =
      "define amdgpu_kernel void @two() #0 {\n"
      "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %w = lshr i32 %l, 6\n"
      "  %c = icmp eq i32 %w, 0\n"
      "  br i1 %c, label %a, label %b\n"
      "a:\n  call void @llvm.amdgcn.s.barrier()\n  br label %end\n"
      "b:\n  call void @llvm.amdgcn.s.barrier()\n  br label %end\n"
      "end:\n  ret void\n}\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,128\" }\n";
  expect_error(run_ir(k2, NULL, NULL, 0, &d), &d, "different barriers");
  /* half a wave at one bpermute, the other half at another */
  const char *k3 =
      "define amdgpu_kernel void @div(ptr addrspace(1) %o) #0 {\n"
      "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %c = icmp ult i32 %l, 32\n"
      "  br i1 %c, label %a, label %b\n"
      "a:\n  %x = call i32 @llvm.amdgcn.ds.bpermute(i32 0, i32 %l)\n  br label %end\n"
      "b:\n  %y = call i32 @llvm.amdgcn.ds.bpermute(i32 4, i32 %l)\n  br label %end\n"
      "end:\n  ret void\n}\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,64\" }\n";
  expect_error(run_ir(k3, NULL, NULL, 0, &d), &d, "different cross-lane operations");
}

/* the LDS allocation in bytes is printed in front */
static const char *lds_kernel =
    " x i8] undef, align 16\n"
    "define amdgpu_kernel void @ldsk(i32 %off) #0 {\n"
    "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
    "  %o4 = shl i32 %l, 2\n"
    "  %o = add i32 %o4, %off\n"
    "  %p = getelementptr i8, ptr addrspace(3) @lds, i32 %o\n"
    "  store i32 %l, ptr addrspace(3) %p, align 4\n"
    "  ret void\n}\n"
    "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,64\" }\n";

static void test_lds_bounds(void **st) {
  (void)st;
  kn_diag d;
  char ir[1024];
  snprintf(ir, sizeof ir, "@lds = internal addrspace(3) global [%d%s", 256, lds_kernel);
  kn_argval off = {.i = 0};
  assert_int_equal(run_ir(ir, &off, NULL, 0, &d), 0);  /* exactly the 256 bytes */
  off.i = 4;
  expect_error(run_ir(ir, &off, NULL, 0, &d), &d, "beyond the kernel's LDS allocation of 256 bytes");
  expect_error(run_ir(ir, &off, NULL, 0, &d), &d, "wave 0 lane 63");
  off.i = 70000;
  expect_error(run_ir(ir, &off, NULL, 0, &d), &d, "outside the 64 KiB of LDS");
  off.i = -8;
  expect_error(run_ir(ir, &off, NULL, 0, &d), &d, "outside the 64 KiB of LDS");
  off.i = 2;
  expect_error(run_ir(ir, &off, NULL, 0, &d), &d, "misaligned LDS store");
  /* an allocation the chip does not have */
  snprintf(ir, sizeof ir, "@lds = internal addrspace(3) global [%d%s", 70000, lds_kernel);
  off.i = 0;
  expect_error(run_ir(ir, &off, NULL, 0, &d), &d, "more than the 64 KiB");
}

static void test_lds_race(void **st) {
  (void)st;
  /* wave 0 stores lds[l], wave 1 reads lds[l - 64]: only correct with the barrier */
  const char *k =
      "@lds = internal addrspace(3) global [256 x i8] undef, align 16\n"
      "define amdgpu_kernel void @race(ptr addrspace(1) %out, i1 %sync) #0 {\n"
      "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %w = lshr i32 %l, 6\n"
      "  %lane = and i32 %l, 63\n"
      "  %p = getelementptr i32, ptr addrspace(3) @lds, i32 %lane\n"
      "  %first = icmp eq i32 %w, 0\n"
      "  br i1 %first, label %st, label %mid\n"
      "st:\n  store i32 %l, ptr addrspace(3) %p, align 4\n  br label %mid\n"
      "mid:\n  br i1 %sync, label %bar, label %rd\n"
      "bar:\n  call void @llvm.amdgcn.s.barrier()\n  br label %rd\n"
      "rd:\n  br i1 %first, label %end, label %ld\n"
      "ld:\n  %v = load i32, ptr addrspace(3) %p, align 4\n"
      "  %q = getelementptr i32, ptr addrspace(1) %out, i32 %lane\n"
      "  store i32 %v, ptr addrspace(1) %q, align 4\n  br label %end\n"
      "end:\n  ret void\n}\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,128\" }\n";
  int32_t out[64] = {0};
  kn_argval args[2] = {{.p = out}, {.i = 1}};
  kn_region r = {out, sizeof out};
  kn_diag d;
  if (run_ir(k, args, &r, 1, &d)) fail_msg("run: %s", d.message);
  for (int l = 0; l < 64; l++) assert_int_equal(out[l], l);
  args[1].i = 0;
  /* wave 0 runs to its end first, so wave 1 would even read the right values: the shadow
   * memory still sees that nothing ordered the two */
  expect_error(run_ir(k, args, &r, 1, &d), &d, "LDS race");
}

static void test_global_bounds(void **st) {
  (void)st;
  const char *k =
      "define amdgpu_kernel void @shift(ptr addrspace(1) %x, ptr addrspace(1) %y, i32 %off, i32 %n, i1 %mask) #0 {\n"
      "  %l = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %i = add i32 %l, %off\n"
      "  %in = icmp slt i32 %i, %n\n"
      "  %nm = xor i1 %mask, true\n"
      "  %live = or i1 %in, %nm\n"
      "  br i1 %live, label %ld, label %join\n"
      "ld:\n  %p = getelementptr float, ptr addrspace(1) %x, i32 %i\n"
      "  %v = load float, ptr addrspace(1) %p, align 4\n  br label %join\n"
      "join:\n  %r = phi float [ %v, %ld ], [ 0.0, %0 ]\n"
      "  %q = getelementptr float, ptr addrspace(1) %y, i32 %l\n"
      "  store float %r, ptr addrspace(1) %q, align 4\n  ret void\n}\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,64\" }\n";
  /* separate allocations: x[64] must not happen to be y[0] */
  float *x = malloc(64 * sizeof(float)), *y = malloc(64 * sizeof(float));
  assert_true(x && y);
  for (int i = 0; i < 64; i++) x[i] = (float)i;
  kn_argval args[5] = {{.p = x}, {.p = y}, {.i = 1}, {.i = 64}, {.i = 1}};
  kn_region regions[2] = {{x, 64 * sizeof(float)}, {y, 64 * sizeof(float)}};
  kn_diag d;
  if (run_ir(k, args, regions, 2, &d)) fail_msg("masked: %s", d.message);  /* masked: fine */
  assert_true(y[0] == 1.0f && y[62] == 63.0f && y[63] == 0.0f);
  args[4].i = 0;  /* unmasked: lane 63 reads x[64] */
  int rc = run_ir(k, args, regions, 2, &d);
  expect_error(rc, &d, "unmasked out-of-bounds global load of 4 bytes");
  expect_error(rc, &d, "4 bytes past the end of buffer 0");
  expect_error(rc, &d, "wave 0 lane 63");
  free(x), free(y);
}

static void test_targets(void **st) {
  (void)st;
  assert_non_null(kn_emu_target("gfx90a-emu"));
  assert_non_null(kn_emu_target("gfx942-emu"));
  assert_null(kn_emu_target("gfx942"));
  assert_null(kn_emu_target(NULL));
  assert_ptr_equal(kn_emu_target_broken("gfx942-emu", 0), kn_emu_target("gfx942-emu"));
  assert_ptr_not_equal(kn_emu_target_broken("gfx942-emu", KN_EMU_BREAK_BARRIER), kn_emu_target("gfx942-emu"));
  assert_ptr_equal(kn_emu_target_broken("gfx942-emu", KN_EMU_BREAK_BARRIER),
                   kn_emu_target_broken("gfx942-emu", KN_EMU_BREAK_BARRIER));
  kn_emu_ir_kernel *k;
  kn_diag d;
  assert_int_equal(kn_emu_compile_ir("define void @f() { ret void }", "gfx942", 0, &k, &d), -1);
  assert_non_null(strstr(d.message, "one amdgpu_kernel"));
  assert_int_equal(kn_emu_compile_ir("this is not IR", "gfx942", 0, &k, &d), -1);
  const char *unsupported =
      "declare i64 @llvm.amdgcn.s.memtime()\n"
      "define amdgpu_kernel void @t() #0 {\n  %t = call i64 @llvm.amdgcn.s.memtime()\n  ret void\n}\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,64\" }\n";
  assert_int_equal(kn_emu_compile_ir(unsupported, "gfx942", 0, &k, &d), -1);
  assert_non_null(strstr(d.message, "llvm.amdgcn.s.memtime is not emulated"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mfma_table_entries), cmocka_unit_test(test_mfma_tables_bijective),
      cmocka_unit_test(test_mfma_exec),          cmocka_unit_test(test_dpp),
      cmocka_unit_test(test_swizzle_permute),    cmocka_unit_test(test_kernel_mfma_product),
      cmocka_unit_test(test_kernel_reductions),  cmocka_unit_test(test_exp2),
      cmocka_unit_test(test_deadlock),
      cmocka_unit_test(test_lds_bounds),         cmocka_unit_test(test_lds_race),
      cmocka_unit_test(test_global_bounds),      cmocka_unit_test(test_targets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
