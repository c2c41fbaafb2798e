/* test_emu_fp8.c — dot of f8e4m3fnuz operands (f32 accumulator) through kiln's AMDGPU lowering:
 * v_mfma_f32_32x32x16_fp8_fp8 on gfx942.
 *
 * A small kernel built with the builder: A (64x32) and B (32x64) loaded with bounds (ragged:
 * the valid rows and columns are not multiples of the MFMA tile), dot into a zero f32
 * accumulator, stored with bounds.  Compiled for gfx942-emu and run by the emulator on random
 * fp8 inputs, compared with the reference interpreter on the same inputs (products of fp8 values
 * are exact in f32; only the order of the f32 accumulation may differ).  Compiled for gfx942 to a
 * code object whose disassembly holds the fp8 MFMA; on gfx90a (no fp8 MFMA) a clear error.
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

#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>

#include "amdgpu.h"
#include "emu.h"
#include "gpu.h"
#include "target.h"
#include "interp.h"
#include "kbuild.h"
#include "numeric.h"
#include "pipeline.h"

enum { TM = 64, TK = 32, TN = 64 };

/* k(a: ptr f8, b: ptr f8, c: ptr f32, m, n, kk: i32):
 *   c[:m, :n] = dot(a[:m, :kk], b[:kk, :n], 0) with zeros outside the bounds */
static kb build(int warps) {
  kn_type pt[6] = {kn_ty_ptr(KN_F8E4M3FNUZ), kn_ty_ptr(KN_F8E4M3FNUZ), kn_ty_ptr(KN_F32),
                   kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I32), kn_ty_scalar(KN_I32)};
  kb k = kb_new(6, pt);
  kn_func_set_meta(k.k, "WARPS", warps);
  kn_builder *b = &k.b;
  kn_value *off[2] = {ci32(b, 0), ci32(b, 0)};
  kn_value *sa[2] = {ci32(b, TK), ci32(b, 1)}, *sb[2] = {ci32(b, TN), ci32(b, 1)};
  kn_value *ba[2] = {P(&k, 3), P(&k, 5)}, *bb[2] = {P(&k, 5), P(&k, 4)}, *bc[2] = {P(&k, 3), P(&k, 4)};
  kn_value *a = kn_b_load(b, kn_ty_tile2(KN_F8E4M3FNUZ, TM, TK), P(&k, 0), off, sa, ba, NULL, NULL);
  kn_value *bm = kn_b_load(b, kn_ty_tile2(KN_F8E4M3FNUZ, TK, TN), P(&k, 1), off, sb, bb, NULL, NULL);
  kn_value *acc = kn_b_const_f(b, kn_ty_tile2(KN_F32, TM, TN), 0.0);
  kn_value *d = kn_b_dot(b, a, bm, acc);
  kn_b_store(b, d, P(&k, 2), off, sb, bc, NULL);
  kn_b_return(b, 0, NULL);
  return k;
}

static void test_emu_vs_interp(void **st) {
  (void)st;
  kb k = build(2);
  kn_diag d;
  if (kn_verify(k.m, &d)) fail_msg("verify: %s", d.message);
  const kn_target *t = kn_emu_target("gfx942-emu");
  assert_non_null(t);
  kn_kernel *kern = NULL;
  if (kn_compile(k.m, "k", t, NULL, &kern, &d)) fail_msg("compile: %s", d.message);
  const int shapes[][3] = {{64, 64, 32}, {45, 37, 23}, {1, 63, 17}, {33, 1, 5}};
  for (int s = 0; s < 4; s++) {
    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    /* dense arrays of the full tile's strides, but only the valid part is written or read */
    uint8_t *a = malloc(TM * TK), *bm = malloc(TK * TN);
    float *ce = malloc(TM * TN * sizeof(float)), *ci = malloc(TM * TN * sizeof(float));
    assert_true(a && bm && ce && ci);
    for (int i = 0; i < TM * TK; i++) kn_store_elem(KN_F8E4M3FNUZ, &a[i], urand(-8, 8));
    for (int i = 0; i < TK * TN; i++) kn_store_elem(KN_F8E4M3FNUZ, &bm[i], urand(-8, 8));
    for (int i = 0; i < TM * TN; i++) ce[i] = ci[i] = NAN;
    kn_argval ae[6] = {{.p = a}, {.p = bm}, {.p = ce}, {.i = M}, {.i = N}, {.i = K}};
    kn_argval ai[6] = {{.p = a}, {.p = bm}, {.p = ci}, {.i = M}, {.i = N}, {.i = K}};
    kn_region re[3] = {{a, TM * TK}, {bm, TK * TN}, {ce, TM * TN * sizeof(float)}};
    kn_region ri[3] = {{a, TM * TK}, {bm, TK * TN}, {ci, TM * TN * sizeof(float)}};
    int grid[3] = {1, 1, 1};
    kn_emu_stats es = {0};
    kn_emu_options eo = {.threads = 1, .stats = &es};
    if (kn_emu_run(kern, ae, grid, re, 3, &eo, &d)) fail_msg("emu run: %s", d.message);
    if (kn_interp_run(k.k, ai, grid, ri, 3, NULL, &d)) fail_msg("interp run: %s", d.message);
    assert_true(es.mfmas > 0);
    double maxerr = 0;
    for (int i = 0; i < TM; i++)
      for (int j = 0; j < TN; j++) {
        float e = ce[i * TN + j], r = ci[i * TN + j];
        if (i >= M || j >= N) {
          if (!isnan(e) || !isnan(r)) fail_msg("(%d,%d) outside %dx%d written", i, j, M, N);
          continue;
        }
        /* float64 reference of the same fp8 values, to size the tolerance */
        double want = 0, mag = 0;
        for (int q = 0; q < K; q++) {
          double p = kn_load_elem(KN_F8E4M3FNUZ, &a[i * TK + q]) *
                     kn_load_elem(KN_F8E4M3FNUZ, &bm[q * TN + j]);
          want += p, mag += fabs(p);
        }
        double tol = 1e-5 * mag + 1e-30;
        if (!(fabs(e - r) <= tol) || !(fabs(e - want) <= tol))
          fail_msg("%dx%dx%d: C[%d][%d] emu %.9g interp %.9g want %.9g", M, N, K, i, j, e, r, want);
        maxerr = fmax(maxerr, fabs(e - r));
      }
    if (getenv("KILN_TEST_VERBOSE"))
      printf("fp8 dot %dx%dx%d: max |emu - interp| %g, %llu MFMAs\n", M, N, K, maxerr,
             (unsigned long long)es.mfmas);
    free(a), free(bm), free(ce), free(ci);
  }
  kn_kernel_free(kern);
  kn_module_free(k.m);
}

/* the emulator with kiln's MFMA decisions perturbed (operands swapped, accumulator one lane group
 * off): the comparison above must see it */
static void test_breaks_caught(void **st) {
  (void)st;
  const unsigned breaks[] = {KN_EMU_BREAK_MFMA_AB, KN_EMU_BREAK_ACC_LANE};
  for (int bi = 0; bi < 2; bi++) {
    kb k = build(2);
    kn_diag d;
    kn_kernel *kern = NULL;
    if (kn_compile(k.m, "k", kn_emu_target_broken("gfx942-emu", breaks[bi]), NULL, &kern, &d))
      fail_msg("compile: %s", d.message);
    uint8_t *a = malloc(TM * TK), *bm = malloc(TK * TN);
    float *c = malloc(TM * TN * sizeof(float));
    assert_true(a && bm && c);
    for (int i = 0; i < TM * TK; i++) kn_store_elem(KN_F8E4M3FNUZ, &a[i], urand(-8, 8));
    for (int i = 0; i < TK * TN; i++) kn_store_elem(KN_F8E4M3FNUZ, &bm[i], urand(-8, 8));
    kn_argval args[6] = {{.p = a}, {.p = bm}, {.p = c}, {.i = TM}, {.i = TN}, {.i = TK}};
    kn_region re[3] = {{a, TM * TK}, {bm, TK * TN}, {c, TM * TN * sizeof(float)}};
    int grid[3] = {1, 1, 1};
    bool caught = kn_emu_run(kern, args, grid, re, 3, NULL, &d) != 0;
    for (int i = 0; i < TM && !caught; i++)
      for (int j = 0; j < TN && !caught; j++) {
        double want = 0;
        for (int q = 0; q < TK; q++)
          want += kn_load_elem(KN_F8E4M3FNUZ, &a[i * TK + q]) *
                  kn_load_elem(KN_F8E4M3FNUZ, &bm[q * TN + j]);
        caught = !(fabs(c[i * TN + j] - want) <= 1e-3 * fabs(want) + 1e-3);
      }
    if (!caught) fail_msg("break %u not caught", breaks[bi]);
    free(a), free(bm), free(c);
    kn_kernel_free(kern);
    kn_module_free(k.m);
  }
}

/* a stage of the pipeline for target, as text (malloc'd) */
static char *stage_text(const kn_module *m, const char *target, kn_stage stage) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  kn_diag d;
  int rc = kn_pipeline_dump(m, "k", kn_target_get(target), stage, f, &d);
  fclose(f);
  if (rc) fail_msg("%s: %s", target, d.message);
  return buf;
}

static void test_gfx942_code_object(void **st) {
  (void)st;
  kb k = build(2);
  kn_diag d;
  kn_kernel *kern;
  if (kn_compile(k.m, "k", kn_target_get("gfx942"), NULL, &kern, &d)) fail_msg("gfx942: %s", d.message);
  char *ll = stage_text(k.m, "gfx942", KN_STAGE_LOWERED);
  assert_non_null(strstr(ll, "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8"));
  free(ll);
  const kn_artifact *a = kn_kernel_artifact(kern);
  assert_int_equal(a->kind, KN_ARTIFACT_CODE_OBJECT);
  kn_codeobj co;
  if (kn_codeobj_parse(a->data, a->size, &co, &d)) fail_msg("parse: %s", d.message);
  const kn_codeobj_kernel *kk = kn_codeobj_find(&co, "k");
  assert_non_null(kk);
  assert_true(kk->mfma_count > 0);
  assert_int_equal(kk->vgpr_spill_count, 0);
  kn_codeobj_free(&co);
  kn_kernel_free(kern);
  kn_module_free(k.m);
}

static void test_gfx942_asm_mnemonic(void **st) {
  (void)st;
  kb k = build(2);
  char *text = stage_text(k.m, "gfx942", KN_STAGE_ASM);
  if (!strstr(text, "v_mfma_f32_32x32x16_fp8_fp8")) fail_msg("no fp8 MFMA in the assembly");
  free(text);
  kn_module_free(k.m);
}

static void test_gfx90a_error(void **st) {
  (void)st;
  kb k = build(2);
  kn_diag d;
  kn_kernel *kern = NULL;
  assert_int_equal(kn_compile(k.m, "k", kn_target_get("gfx90a"), NULL, &kern, &d), -1);
  if (!strstr(d.message, "not supported on gfx90a")) fail_msg("gfx90a said: %s", d.message);
  if (getenv("KILN_TEST_VERBOSE")) printf("gfx90a: %s\n", d.message);
  assert_int_equal(kn_compile(k.m, "k", kn_emu_target("gfx90a-emu"), NULL, &kern, &d), -1);
  if (!strstr(d.message, "not supported on gfx90a")) fail_msg("gfx90a-emu said: %s", d.message);
  kn_module_free(k.m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_emu_vs_interp),
      cmocka_unit_test(test_breaks_caught),
      cmocka_unit_test(test_gfx942_code_object),
      cmocka_unit_test(test_gfx942_asm_mnemonic),
      cmocka_unit_test(test_gfx90a_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
