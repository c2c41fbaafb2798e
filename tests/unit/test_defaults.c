/* test_defaults.c — the default tilings and the tuning spaces compile, on every target.
 *
 * For every compile target of the registry (host and every GPU arch), every dtype the template
 * takes and head dims from 32 to 256 (the multiples of 16 models use, FlashAttention's 160, 192
 * and 256 included), and head dims that are not multiples of 16 (1, 24, 40, 59, 72, 111, 200,
 * 239, 255: the padded head tile) and 512: the default config (kn_attn_default_config, the
 * registry's measured row) must pass kn_attn_check_on and compile through the one pipeline;
 * where the arch has no tiling for the request (head dims above 256 on NVIDIA, f32 above 256 on
 * any GPU) the check must say so.  On AMDGPU the code objects of the f16 / bf16 defaults must not
 * spill VGPRs.
 *
 * The tuning space: for each GPU arch and a few head dims, every point of the default space that
 * kn_attn_check_on accepts (what the tuner offers) is compiled in a deterministic sample, and
 * must compile.  Before this test, the defaults of D 160-256 (64 rows over 8 warps) compiled on
 * no GPU target.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "amdgpu.h"
#include "attention.h"
#include "pipeline.h"
#include "reduced.h"
#include "space.h"
#include "target.h"

static const kn_scalar dtypes[] = {KN_F16, KN_BF16, KN_F32};
static const int head_dims[] = {32, 48, 64, 80, 96, 128, 160, 192, 256};
/* head dims that are not multiples of 16 (the padded head tile), at the edges of the registry's
 * rows (AMDGPU 97..112, 193..208 and 225..240; NVIDIA's unaligned rows), and 512; f16, and one
 * in bf16 (f32 takes the tile shapes of the multiple of 16 above it, in the list above) */
static const struct { int hd; kn_scalar dt; } more_dims[] = {
    {1, KN_F16},   {24, KN_F16},   {40, KN_F16},  {59, KN_F16},  {72, KN_F16},   {111, KN_F16},
    {200, KN_F16}, {239, KN_BF16}, {255, KN_F16}, {512, KN_F16}, {512, KN_BF16}, {512, KN_F32}};

/* 0 when it compiled (and, for code objects of f16 / bf16, without VGPR spills: f32 attention's
 * FMA layout is known to spill on AMDGPU, docs/amdgpu.md), else -1 with *d */
static int compile_cfg(const kn_target *t, const kn_attn_desc *desc, const kn_attn_config *cfg,
                       kn_diag *d) {
  kn_module *m = kn_module_new("<attn>");
  if (!kn_attn_fwd_build(m, desc, cfg, d)) {
    kn_module_free(m);
    return -1;
  }
  kn_artifact a;
  int rc = kn_compile_artifact(m, "attn_fwd", t, NULL, &a, d);
  kn_module_free(m);
  if (rc) return -1;
  if (a.kind == KN_ARTIFACT_CODE_OBJECT) {
    kn_codeobj co;
    if (kn_codeobj_parse(a.data, a.size, &co, d)) rc = -1;
    else {
      const kn_codeobj_kernel *k = kn_codeobj_find(&co, "attn_fwd");
      if (k && desc->dtype == KN_F32 && k->vgpr_spill_count)
        printf("  %s f32 D%d %dx%d w%d: %d VGPR spills (f32 FMA layout)\n", t->name,
               desc->head_dim, cfg->block_m, cfg->block_n, cfg->warps, k->vgpr_spill_count);
      else if (!k || k->vgpr_spill_count || k->scratch_bytes)
        rc = kn_error(d, NULL, (kn_loc){0}, "%d VGPR spills, %u scratch bytes",
                      k ? k->vgpr_spill_count : -1, k ? k->scratch_bytes : 0);
      kn_codeobj_free(&co);
    }
  }
  kn_artifact_free(&a);
  return rc;
}

static void test_defaults_compile(void **state) {
  (void)state;
  int compiled = 0, refused = 0;
  const int nhd = (int)(sizeof head_dims / sizeof head_dims[0]);
  const int nmain = (int)(sizeof dtypes / sizeof dtypes[0]) * nhd;
  const int nmore = (int)(sizeof more_dims / sizeof more_dims[0]);
  for (int ti = 0; kn_target_at(ti); ti++) {
    const kn_target *t = kn_target_at(ti);
    if (t->emulated) continue;  /* the emulated targets compile what their chip compiles */
    for (int ci = 0; ci < nmain + nmore; ci++) {
      kn_scalar dt = ci < nmain ? dtypes[ci / nhd] : more_dims[ci - nmain].dt;
      int hd = ci < nmain ? head_dims[ci % nhd] : more_dims[ci - nmain].hd;
      /* bf16 takes f16's shapes: one head dim of it is enough */
      if (ci < nmain && dt == KN_BF16 && hd != 128) continue;
      /* reduced (KILN_TEST_REDUCED): every third request, rotating with the target */
      if (!test_keep(ci + ti, 3)) continue;
      kn_attn_desc desc = {.dtype = dt, .head_dim = hd, .causal = true, .has_lse = true};
      kn_attn_config cfg = kn_attn_default_config(t->arch, &desc);
      kn_diag d;
      bool has_instr = t->arch->isa == KN_ISA_HOST ||
                       kn_arch_pick_mma(t->arch, desc.dtype, 0, NULL, NULL) != NULL;
      int ok = kn_attn_check_on(t->arch, &desc, &cfg, &d);
      if (!has_instr) {
        /* refused by the check and by the compile, for the same reason */
        assert_int_equal(ok, -1);
        assert_non_null(strstr(d.message, "no matrix instruction"));
        kn_diag d2;
        assert_int_equal(compile_cfg(t, &desc, &cfg, &d2), -1);
        assert_non_null(strstr(d2.message, "no matrix instruction"));
        refused++;
        continue;
      }
      if (ok && desc.head_dim > 256 && t->arch->isa != KN_ISA_HOST &&
          (t->arch->isa == KN_ISA_NVPTX || desc.dtype == KN_F32)) {
        /* above head dim 256: no tiling on NVIDIA (the accumulator alone is 256 registers
         * per thread), and no f32 on a GPU; refused with the reason */
        assert_non_null(strstr(d.message, "head dim 512"));
        refused++;
        continue;
      }
      if (ok) fail_msg("%s %s D%d: default %dx%d w%d refused: %s", t->name,
                       kn_scalar_name(desc.dtype), desc.head_dim, cfg.block_m, cfg.block_n,
                       cfg.warps, d.message);
      if (compile_cfg(t, &desc, &cfg, &d))
        fail_msg("%s %s D%d: default %dx%d w%d does not compile: %s", t->name,
                 kn_scalar_name(desc.dtype), desc.head_dim, cfg.block_m, cfg.block_n,
                 cfg.warps, d.message);
      compiled++;
    }
  }
  printf("  %d default configs compiled, %d (dtype, target) pairs refused with a reason\n",
         compiled, refused);
  assert_true(compiled > (test_reduced() ? 12 : 40));
}

static void test_space_compiles(void **state) {
  (void)state;
  static const int dims[] = {64, 128, 256};
  int offered = 0, tried = 0;
  for (int ti = 0; kn_target_at(ti); ti++) {
    const kn_target *t = kn_target_at(ti);
    if (t->emulated || t->arch->isa == KN_ISA_HOST) continue;
    for (size_t hi = 0; hi < sizeof dims / sizeof dims[0]; hi++) {
      kn_attn_desc desc = {.dtype = KN_BF16, .head_dim = dims[hi], .causal = true};
      kn_space s;
      assert_int_equal(kn_space_default(&s, "fwd", t->arch, NULL), KN_OK);
      int n = kn_space_size(&s), k = 0;
      for (int i = 0; i < n; i++) {
        kn_tune_config tc;
        kn_space_point(&s, i, &tc);
        kn_attn_config c = {.block_m = tc.block_m, .block_n = tc.block_n, .warps = tc.warps,
                            .stages = tc.stages};
        kn_diag d;
        if (kn_attn_check_on(t->arch, &desc, &c, &d)) continue;
        offered++;
        /* every 50th offered point of each space: a fixed sample across shapes and warps
         * (reduced: every 150th, from the 50th on at every other head dim) */
        if (test_reduced() ? (k++ + (int)hi % 2 * 50) % 150 : k++ % 50) continue;
        tried++;
        /* spills are the tuner's pruning business; a compile failure is this test's */
        kn_module *m = kn_module_new("<attn>");
        assert_non_null(kn_attn_fwd_build(m, &desc, &c, &d));
        kn_artifact a;
        if (kn_compile_artifact(m, "attn_fwd", t, NULL, &a, &d))
          fail_msg("%s D%d: offered %dx%d w%d does not compile: %s", t->name, desc.head_dim,
                   c.block_m, c.block_n, c.warps, d.message);
        kn_artifact_free(&a);
        kn_module_free(m);
      }
    }
  }
  printf("  tuning spaces: %d points offered, %d compiled\n", offered, tried);
  assert_true(tried > (test_reduced() ? 3 : 10));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_defaults_compile),
      cmocka_unit_test(test_space_compiles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
