/* test_amdgpu_attn.c — the attention template through the AMDGPU lowering, down to code objects.
 *
 * No AMD GPU exists here: these tests check what can be checked without one.  For head dims 64
 * and 128, f16 and bf16, causal on and off, and BLOCK_M in {64, 128} x BLOCK_N in {32, 64, 128}
 * with 4 waves, the kernel lowers, optimises and links into a gfx90a and a gfx942 code object,
 * and the inspector reads each back: MFMA instructions present, a kernarg segment that is
 * exactly the explicit arguments (no hidden ones), and no spills (no VGPR spills, no private
 * segment) at the template's default config and at 128x64 with 4 waves (at the default configs,
 * and gfx90a's 128x64 with 4 waves, no SGPR spills either).  When
 * /usr/lib/llvm-22/bin/llvm-objdump exists it must disassemble every code object of that matrix
 * and show as many MFMAs as the inspector counted.  MFMA 16x16x16 by request (test_mfma16):
 * only that shape in the code object, no VGPR spills.  Numerics are the emulated target's job
 * (docs/gpu.md).
 *
 * KILN_TEST_VERBOSE=1 prints one line of figures per code object.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "reduced.h"
#include "amdgpu.h"
#include "attention.h"
#include "gpu.h"
#include "objdump.h"
#include "target.h"

static bool verbose(void) {
  const char *e = getenv("KILN_TEST_VERBOSE");
  return e && *e && strcmp(e, "0") != 0;
}

typedef struct result {
  kn_codeobj_kernel k;   /* copy of the inspector's record (args dropped) */
  double ms_total;
  int64_t lds_plan;
  size_t co_size;
} result;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* builds, compiles, links and inspects one configuration; the code object is kept in *co_out
 * when non-NULL (the caller frees it) */
static bool with_lse;   /* test_lse: also store the log-sum-exp (a rank-1 store of a slice) */
static int mfma_shape;  /* test_mfma16: kn_attn_config.mfma of the explicit configs */

static void compile_one(const char *arch, kn_scalar dt, int hd, bool causal, int bm, int bn,
                        int warps, result *r, void **co_out, size_t *co_n) {
  kn_attn_desc desc = {.dtype = dt, .head_dim = hd, .causal = causal, .has_lse = with_lse};
  kn_attn_config cfg = {.block_m = bm, .block_n = bn, .warps = warps, .stages = 2,
                        .mfma = mfma_shape};
  if (bm == 0) cfg = kn_attn_default_config(kn_arch_get(arch), &desc);
  /* K/V by buffer loads, as the API prepares an AMD kernel (off32) */
  cfg.off32 = kn_attn_off32_applies(kn_arch_get(arch), &desc);
  kn_diag d;
  kn_module *m = kn_module_new("<attn>");
  assert_non_null(kn_attn_fwd_build(m, &desc, &cfg, &d));
  double t0 = now_ms();
  /* KILN_TEST_DUMP=file: the layout plan and the LLVM IR as lowered of every compile */
  const char *dump = getenv("KILN_TEST_DUMP");
  FILE *df = dump ? fopen(dump, "a") : NULL;
  kn_compile_options o = {.dump_stages = df ? KN_STAGE_LAYOUT | KN_STAGE_LOWERED : 0,
                          .dump_file = df};
  kn_kernel *kk = NULL;
  int rc = kn_compile(m, "attn_fwd", kn_target_get(arch), &o, &kk, &d);
  if (df) fclose(df);
  if (rc) fail_msg("%s %s D%d causal=%d %dx%d w%d: %s", arch, kn_scalar_name(dt), hd, causal,
                   cfg.block_m, cfg.block_n, cfg.warps, d.rendered[0] ? d.rendered : d.message);
  kn_artifact c;
  kn_kernel_take_artifact(kk, &c);
  const kn_compile_times tm = *kn_kernel_times(kk);
  kn_kernel_free(kk);
  assert_int_equal(c.kind, KN_ARTIFACT_CODE_OBJECT);
  assert_int_equal(c.threads, 64 * cfg.warps);
  r->ms_total = now_ms() - t0;
  r->lds_plan = c.shared_bytes;
  r->co_size = c.size;
  kn_codeobj co;
  if (kn_codeobj_parse(c.data, c.size, &co, &d)) fail_msg("inspector: %s", d.message);
  assert_int_equal(co.code_object_version, 5);
  const kn_codeobj_kernel *k = kn_codeobj_find(&co, "attn_fwd");
  assert_non_null(k);
  r->k = *k;
  r->k.args = NULL;
  /* the explicit arguments, nothing hidden: 24 parameters, 4+1 pointers, i32s and i64s */
  assert_int_equal(k->nhidden, 0);
  assert_int_equal(k->nargs, KN_ATTN_NPARAMS);
  assert_int_equal(k->kernarg_size, k->explicit_arg_bytes);
  assert_true(k->mfma_count > 0);
  assert_int_equal(k->max_flat_workgroup_size, 64 * cfg.warps);
  assert_true(k->lds_bytes >= (uint32_t)c.shared_bytes);
  if (verbose())
    printf("  %s %-4s D%-3d causal=%d %3dx%-3d w%d%s: vgpr %3d agpr %3d sgpr %3d spill %d/%d scratch "
           "%u lds %5u occ %d mfma %3d code %6llu B  %.0f ms (opt %.0f, codegen %.0f, link %.0f)\n",
           arch, kn_scalar_name(dt), hd, causal, cfg.block_m, cfg.block_n, cfg.warps,
           cfg.mfma ? " mfma16" : "", k->vgpr_count, k->agpr_count, k->sgpr_count, k->vgpr_spill_count, k->sgpr_spill_count,
           k->scratch_bytes,
           k->lds_bytes, k->occupancy.waves, k->mfma_count, (unsigned long long)k->code_size,
           r->ms_total, tm.optimize, tm.codegen, tm.link);
  kn_codeobj_free(&co);
  if (co_out) {
    *co_out = c.data;
    *co_n = c.size;
    c.data = NULL;
  }
  kn_artifact_free(&c);
  kn_module_free(m);
}

/* no VGPR spills and no private segment (scratch); SGPR spills go to VGPR lanes, not memory,
 * and are reported (KILN_TEST_VERBOSE) rather than checked across the whole matrix */
static void no_spills(const result *r) {
  assert_int_equal(r->k.vgpr_spill_count, 0);
  assert_int_equal(r->k.scratch_bytes, 0);
}

/* ... and at the default configs (D <= 128) no SGPR spills either: the causal masks' per-register
 * lane masks once filled the SGPR file (lower_gpu.c, sink_mask) */
static void no_spills_at_all(const result *r) {
  no_spills(r);
  assert_int_equal(r->k.sgpr_spill_count, 0);
}

/* how many disassembled lines of the code object co contain pattern (llvm-objdump must exit
 * with status 0); frees co */
static int objdump_count(const char *arch, void *co, size_t n, const char *pattern) {
  int count = test_objdump_count(arch, co, n, pattern);
  free(co);
  assert_true(count >= 0);
  return count;
}

/* LLVM 22's llvm-objdump disassembles the code object and shows as many MFMA instructions as
 * the inspector counted; frees co */
static void objdump_agrees(const char *arch, void *co, size_t n, int mfma_expected) {
  assert_int_equal(objdump_count(arch, co, n, "v_mfma_"), mfma_expected);
}

static void test_matrix(void **state) {
  (void)state;
  const char *archs[] = {"gfx942", "gfx90a"};
  const kn_scalar dts[] = {KN_F16, KN_BF16};
  const int hds[] = {64, 128}, bms[] = {64, 128}, bns[] = {32, 64, 128};
  bool objdump = access(TEST_OBJDUMP, X_OK) == 0;
  for (int t = 0; t < 2; t++)
    for (int a = 0; a < 2; a++)
      for (int b = 0; b < 2; b++)
        for (int c = 0; c < 2; c++)
          for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) {
              /* reduced (KILN_TEST_REDUCED): every fifth of the 96, rotating through all */
              if (!test_take(5)) continue;
              result r;
              void *co = NULL;
              size_t n = 0;
              compile_one(archs[t], dts[a], hds[b], c, bms[i], bns[j], 4, &r,
                          objdump ? &co : NULL, objdump ? &n : NULL);
              if (bms[i] == 128 && bns[j] == 64) no_spills(&r);
              if (objdump) objdump_agrees(archs[t], co, n, r.k.mfma_count);
            }
}

static void test_default_configs(void **state) {
  (void)state;
  const char *archs[] = {"gfx942", "gfx90a"};
  const kn_scalar dts[] = {KN_F16, KN_BF16};
  for (int a = 0; a < 2; a++)
    for (int t = 0; t < 2; t++)
      for (int hd = 64; hd <= 128; hd += 64)
        for (int c = 0; c < 2; c++) {
          if (!test_take(3)) continue;   /* reduced: 6 of the 16, both chips and dtypes */
          result r;
          compile_one(archs[a], dts[t], hd, c, 0, 0, 0, &r, NULL, NULL);
          no_spills_at_all(&r);
          if (a == 1) {   /* gfx90a: also the 128x64, 4-wave config */
            compile_one(archs[a], dts[t], hd, c, 128, 64, 4, &r, NULL, NULL);
            no_spills_at_all(&r);
          }
        }
}

static void test_objdump(void **state) {
  (void)state;
  const char *tool = TEST_OBJDUMP;
  if (access(tool, X_OK) != 0) {
    skip();
    return;
  }
  result r;
  void *co;
  size_t n;
  compile_one("gfx942", KN_F16, 128, true, 128, 64, 4, &r, &co, &n);
  char path[] = "/tmp/kiln_attn_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, co, n), (ssize_t)n);
  close(fd);
  free(co);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "%s -d --mcpu=gfx942 %s 2>&1", tool, path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[512];
  int mfma = 0;
  while (fgets(line, sizeof line, p))
    if (strstr(line, "v_mfma_f32_32x32x8")) mfma++;
  int st = pclose(p);
  unlink(path);
  assert_int_equal(st, 0);
  assert_int_equal(mfma, r.k.mfma_count);
}

static void test_lse(void **state) {
  (void)state;
  with_lse = true;
  result r;
  compile_one("gfx942", KN_BF16, 128, true, 0, 0, 0, &r, NULL, NULL);
  no_spills(&r);
  compile_one("gfx90a", KN_F16, 64, false, 128, 64, 4, &r, NULL, NULL);
  no_spills(&r);
  with_lse = false;
}

/* MFMA 16x16x16 by request (kn_attn_config.mfma = 16, meta MFMA) where 32x32x8 would fit: at
 * 128x64 with 4 waves, f16 and bf16, D 64 and 128, causal or not, both chips, the code object
 * has one 16x16x16 MFMA per 16x16 tile of S and O per k step of 16 (the KV loop body, which is
 * not unrolled), only 16x16x16 ones in the disassembly when llvm-objdump is there, and no VGPR
 * spills.  Numerics: test_emu_attn. */
static void test_mfma16(void **state) {
  (void)state;
  const char *archs[] = {"gfx942", "gfx90a"};
  const kn_scalar dts[] = {KN_F16, KN_BF16};
  bool objdump = access(TEST_OBJDUMP, X_OK) == 0;
  mfma_shape = 16;
  for (int t = 0; t < 2; t++)
    for (int a = 0; a < 2; a++)
      for (int hd = 64; hd <= 128; hd += 64)
        for (int c = 0; c < 2; c++) {
          if (!test_take(3)) continue;   /* reduced: 6 of the 16, both chips and dtypes */
          result r;
          void *co = NULL;
          size_t n = 0;
          compile_one(archs[t], dts[a], hd, c, 128, 64, 4, &r, &co, &n);
          no_spills(&r);
          /* per wave, per KV step: S (32x64) and O (32xD) in 16x16 tiles, k steps of 16 */
          int per_step = (2 * 4) * (hd / 16) + (2 * (hd / 16)) * (64 / 16);
          assert_int_equal(r.k.mfma_count, per_step);
          if (objdump) {
            void *co2 = malloc(n);
            assert_non_null(co2);
            memcpy(co2, co, n);
            assert_int_equal(objdump_count(archs[t], co, n, "v_mfma_f32_16x16x16"), r.k.mfma_count);
            assert_int_equal(objdump_count(archs[t], co2, n, "v_mfma_f32_32x32"), 0);
          } else {
            free(co);
          }
        }
  mfma_shape = 0;
  /* a requested shape that does not fit is an error, not another shape: 32x32x8 needs 32 rows
   * per wave, 64x32 with 4 waves has 16; and the config accepts only 0, 16 and 32 */
  kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 64};
  kn_attn_config cfg = {.block_m = 64, .block_n = 32, .warps = 4, .stages = 2, .mfma = 32};
  kn_diag d;
  kn_module *m = kn_module_new("<attn>");
  assert_non_null(kn_attn_fwd_build(m, &desc, &cfg, &d));
  kn_kernel *kk;
  assert_int_equal(kn_compile(m, "attn_fwd", kn_target_get("gfx942"), NULL, &kk, &d), -1);
  assert_non_null(strstr(d.message, "no matrix instruction"));
  kn_module_free(m);
  cfg.mfma = 8;
  m = kn_module_new("<attn>");
  assert_null(kn_attn_fwd_build(m, &desc, &cfg, &d));
  kn_module_free(m);
}

/* what the lowering does not handle yet (arithmetic on fp8 values) is an error naming the op
 * and the target */
static void test_unsupported(void **state) {
  (void)state;
  const char *text =
      "kernel @k(%x: ptr<f8e4m3fnuz>) attrs {WARPS = 4} {\n"
      "  %c0 = const 0 : i32\n"
      "  %c1 = const 1 : i64\n"
      "  %t = load %x[%c0, %c0] strides [%c1, %c1] : tile<64x64xf8e4m3fnuz>\n"
      "  %u = add %t, %t : tile<64x64xf8e4m3fnuz>\n"
      "  store %u, %x[%c0, %c0] strides [%c1, %c1]\n"
      "  return\n"
      "}\n";
  kn_diag d;
  kn_module *m = kn_parse("t.tile", text, strlen(text), &d);
  assert_non_null(m);
  kn_kernel *kk;
  assert_int_equal(kn_compile(m, "k", kn_target_get("gfx942"), NULL, &kk, &d), -1);
  assert_non_null(strstr(d.message, "not yet supported"));
  assert_non_null(strstr(d.message, "'add' on fp8"));
  kn_module_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unsupported),
      cmocka_unit_test(test_objdump),
      cmocka_unit_test(test_lse),
      cmocka_unit_test(test_mfma16),
      cmocka_unit_test(test_default_configs),
      cmocka_unit_test(test_matrix),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
