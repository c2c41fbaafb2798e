/* test_emu_attn.c — the attention forward template through kiln's AMDGPU lowering, run by the
 * emulated targets, against the float64 reference.
 *
 * The matrix of the emulator issue: gfx90a-emu and gfx942-emu x head dim 64 and 128 x f16 and
 * bf16 x causal off and on x lengths (1,1), (17,17), (1000,1000), (64,1000) x four configs
 * (the template's default, 64x32 with 4 waves, 64x64 with 2 waves, and 128x64 with 4 waves on
 * MFMA 16x16x16 by request, without (1000,1000); the first two with K and V by buffer loads as
 * the API prepares them, off32, the others by masked global loads), one compile per kernel and
 * config, fresh random inputs per problem, every global access checked against the caller's
 * buffers, outputs pre-filled with NaN (an element never written fails).  f32 (no MFMA: FMA
 * dots) on a smaller matrix of its own (test_f32); head dims that are not multiples of 16, and
 * 512, on a few cases (test_head_dims).  Then the test-only
 * breaks (emu.h: KN_EMU_BREAK_*) — a missing barrier, MFMA operands swapped, the accumulator one
 * lane group off — must each make a run fail, with an error or with results outside the
 * tolerance: the numeric tests would catch kiln getting any of these decisions wrong.  Last,
 * the same kind of mistakes made by kiln's own layout and lowering code (layout.h:
 * KN_GPU_BREAK_*, test-only) on the correct emulator: caught, and passing once cleared.
 *
 * KILN_TEST_VERBOSE=1 prints one line per problem; KILN_TEST_FILTER=<name> runs one test.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "attention.h"
#include "emu.h"
#include "target.h"
#include "layout.h"
#include "numeric.h"
#include "pipeline.h"
#include "reduced.h"

static bool verbose(void) {
  const char *e = getenv("KILN_TEST_VERBOSE");
  return e && *e && strcmp(e, "0") != 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(double lo, double hi) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return lo + (hi - lo) * (double)(rng >> 11) / 9007199254740992.0;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct outcome {
  int rc;                 /* kn_emu_run */
  char msg[600];
  double err, lse_err;    /* max abs error of o and lse */
} outcome;

/* row_gap: the rows of q, k, v and o are head_dim + row_gap elements apart (the caller's row
 * strides; a multiple of 8 keeps the rows as aligned as the kernel's vector accesses assume),
 * the gaps NaN: a read past head_dim poisons O, a write past it is counted as an error */
static int row_gap;

/* nan_key >= 0: element 0 of key nan_key (every kv head) is NaN (the reference keeps the finite
 * value): the rows that see that key must give NaN outputs and lse, the others the reference's
 * values (the NaN semantics of the row max, MAXNUM in docs/ir.md) */
static int nan_key = -1;

/* one problem on a compiled kernel: random inputs, the run, the reference */
static void run_problem(kn_kernel *kern, const kn_attn_desc *desc, const kn_attn_config *cfg,
                        int nq, int nk, int heads, int kv_heads, outcome *r) {
  kn_scalar dt = desc->dtype;
  int hd = desc->head_dim, rs = hd + row_gap;  /* rs: the row stride */
  kn_attn_problem p = {.batch = 1, .heads = heads, .kv_heads = kv_heads, .seqlen_q = nq, .seqlen_k = nk};
  size_t es = kn_scalar_size(dt);
  size_t nqe = (size_t)heads * nq * hd, nke = (size_t)kv_heads * nk * hd, nle = (size_t)heads * nq;
  size_t nqs = nqe / hd * rs, nks = nke / hd * rs;  /* elements with the gaps */
  void *q = malloc(nqs * es), *k = malloc(nks * es), *v = malloc(nks * es), *o = malloc(nqs * es);
  float *lse = malloc(nle * sizeof(float));
  double *qd = malloc(nqe * 8), *kd = malloc(nke * 8), *vd = malloc(nke * 8), *od = malloc(nqe * 8);
  double *lsed = malloc(nle * 8);
  assert_true(q && k && v && o && lse && qd && kd && vd && od && lsed);
#define AT(i) (((i) / hd * rs + (i) % hd) * es)  /* byte offset of element i of a (.., hd) buffer */
  for (size_t i = 0; i < nqs; i++) {
    kn_store_elem(dt, (char *)q + i * es, NAN);
    kn_store_elem(dt, (char *)o + i * es, NAN);
  }
  for (size_t i = 0; i < nks; i++) {
    kn_store_elem(dt, (char *)k + i * es, NAN);
    kn_store_elem(dt, (char *)v + i * es, NAN);
  }
  for (size_t i = 0; i < nqe; i++) {
    kn_store_elem(dt, (char *)q + AT(i), urand(-2, 2));
    qd[i] = kn_load_elem(dt, (char *)q + AT(i));
  }
  for (size_t i = 0; i < nle; i++) lse[i] = NAN;
  for (size_t i = 0; i < nke; i++) {
    kn_store_elem(dt, (char *)k + AT(i), urand(-2, 2));
    kd[i] = kn_load_elem(dt, (char *)k + AT(i));
    kn_store_elem(dt, (char *)v + AT(i), urand(-2, 2));
    vd[i] = kn_load_elem(dt, (char *)v + AT(i));
  }
  if (nan_key >= 0)
    for (int h = 0; h < kv_heads; h++) kn_store_elem(dt, (char *)k + AT((size_t)(h * nk + nan_key) * hd), NAN);
  kn_argval args[KN_ATTN_NPARAMS];
  int grid[3];
  kn_attn_fill_args(desc, NULL, cfg, &p, q, k, v, o, lse, NULL, args, grid, NULL);
  /* the strides of q, k, v, o (parameters 10..21: batch, head, row each) for rows rs apart */
  for (int i = 0; i < 4; i++) {
    int64_t n = i == 0 || i == 3 ? nq : nk, h = i == 0 || i == 3 ? heads : kv_heads;
    args[10 + 3 * i].i = h * n * rs, args[11 + 3 * i].i = n * rs, args[12 + 3 * i].i = rs;
  }
  kn_region regions[5] = {{q, nqs * es}, {k, nks * es}, {v, nks * es}, {o, nqs * es},
                          {lse, nle * 4}};
  kn_diag d;
  kn_emu_stats st;
  kn_emu_options opt = {.stats = &st};
  double t0 = now_s();
  r->rc = kn_emu_run(kern, args, grid, regions, 5, &opt, &d);
  double t1 = now_s();
  snprintf(r->msg, sizeof r->msg, "%s", r->rc ? d.message : "");
  kn_attn_reference(desc, &p, qd, kd, vd, od, lsed);
  r->err = r->lse_err = 0;
  /* whether query row i (of a (.., nq) buffer) sees the NaN key */
#define SEES_NAN(i) (nan_key >= 0 && (!desc->causal || nan_key <= (int)((i) % nq) + (nk - nq)))
  for (size_t i = 0; i < nqe; i++) {
    double got = kn_load_elem(dt, (char *)o + AT(i));
    double e = SEES_NAN(i / hd) ? (isnan(got) ? 0 : INFINITY) : fabs(got - od[i]);
    if (!(e <= r->err)) r->err = isnan(e) ? INFINITY : e;
  }
  for (size_t i = 0; i < nqs; i++)  /* the gaps are as they were */
    if ((int)(i % rs) >= hd && !isnan(kn_load_elem(dt, (char *)o + i * es))) r->err = INFINITY;
#undef AT
  for (size_t i = 0; i < nle; i++) {
    double e = SEES_NAN(i) ? (isnan(lse[i]) ? 0 : INFINITY)
               : (isinf(lsed[i]) && lse[i] == lsed[i]) ? 0 : fabs(lse[i] - lsed[i]);
    if (!(e <= r->lse_err)) r->lse_err = isnan(e) ? INFINITY : e;
  }
  if (verbose())
    printf("    (%4d,%4d) h=%d/%d: %.3fs max_abs_err=%.3g lse_err=%.3g (%llu workgroups, %llu switches, "
           "%llu MFMAs, %llu barriers)%s%s\n", nq, nk, heads, kv_heads, t1 - t0, r->err, r->lse_err,
           (unsigned long long)st.workgroups, (unsigned long long)st.switches,
           (unsigned long long)st.mfmas, (unsigned long long)st.barriers, r->rc ? " error: " : "",
           r->msg);
#undef SEES_NAN
  free(q), free(k), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(lsed);
}

static kn_kernel *compile(const kn_target *t, const char *arch, const kn_attn_desc *desc,
                          const kn_attn_config *cfg) {
  kn_diag d;
  kn_module *m = kn_module_new("<attn>");
  if (!kn_attn_fwd_build(m, desc, cfg, &d)) fail_msg("attn build: %s", d.message);
  kn_kernel *k = NULL;
  if (kn_compile(m, "attn_fwd", t, NULL, &k, &d))
    fail_msg("%s D%d %s causal=%d %dx%d w%d: %s", arch, desc->head_dim, kn_scalar_name(desc->dtype),
             desc->causal, cfg->block_m, cfg->block_n, cfg->warps, d.message);
  kn_module_free(m);
  return k;
}

static const int lengths[][2] = {{1, 1}, {17, 17}, {1000, 1000}, {64, 1000}};

static void matrix(const char *arch) {
  const kn_scalar dts[] = {KN_F16, KN_BF16};
  const int hds[] = {64, 128};
  const kn_target *t = kn_emu_target(arch);
  assert_non_null(t);
  for (int h = 0; h < 2; h++)
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 2; c++) {
        kn_attn_desc desc = {.dtype = dts[a], .head_dim = hds[h], .causal = c, .has_lse = true};
        /* the last asks for MFMA 16x16x16 where 32x32x8 would fit (32 rows per wave): the
         * 16x16 lane tables and their two-butterfly row reductions on the transposed
         * accumulator (64x32 with 4 waves gets 16x16x16 too, as the only shape that fits) */
        /* the default and 64x32 read K/V by buffer loads, as the API prepares them (off32);
         * 64x64 and the 16x16x16 one by masked global loads */
        kn_attn_config cfgs[4] = {kn_attn_default_config(kn_arch_get("gfx942"), &desc),
                                  {64, 32, 4, 2, 0, false, true, false}, {64, 64, 2, 2, 0, false, false, false},
                                  {128, 64, 4, 2, 16, false, false, false}};
        cfgs[0].off32 = true;
        for (int g = 0; g < 4; g++) {
          /* reduced (KILN_TEST_REDUCED): every third kernel of the matrix, every shape of it */
          if (!test_take(3)) continue;
          if (verbose())
            printf("  %s D%d %s causal=%d %dx%d w%d mfma=%d\n", arch, hds[h], kn_scalar_name(dts[a]),
                   c, cfgs[g].block_m, cfgs[g].block_n, cfgs[g].warps, cfgs[g].mfma);
          kn_kernel *k = compile(t, arch, &desc, &cfgs[g]);
          for (int s = 0; s < 4; s++) {
            /* the 16x16x16 config skips (1000,1000): the ragged shapes are what can go wrong,
             * and the long one would add ~10 s */
            if (cfgs[g].mfma && lengths[s][0] == 1000) continue;
            /* reduced: (1000,1000) neither, the costliest under ASan's emulator; (64,1000)
             * keeps the long KV loop */
            if (test_reduced() && lengths[s][0] == 1000) continue;
            /* GQA (2 query heads per kv head) on the short problems */
            bool small = lengths[s][0] * lengths[s][1] < 100000;
            outcome r;
            run_problem(k, &desc, &cfgs[g], lengths[s][0], lengths[s][1], small ? 4 : 2,
                        small ? 2 : 2, &r);
            if (r.rc || !(r.err <= kn_attn_tolerance(desc.dtype)) ||
                !(r.lse_err <= kn_attn_lse_tolerance(desc.dtype)))
              fail_msg("%s D%d %s causal=%d %dx%d w%d (%d,%d): %s max_abs_err=%.3g lse_err=%.3g tol=%.3g",
                       arch, hds[h], kn_scalar_name(dts[a]), c, cfgs[g].block_m, cfgs[g].block_n,
                       cfgs[g].warps, lengths[s][0], lengths[s][1], r.rc ? r.msg : "", r.err,
                       r.lse_err, kn_attn_tolerance(desc.dtype));
          }
          kn_kernel_free(k);
        }
      }
}

static void test_gfx90a_emu(void **st) {
  (void)st;
  matrix("gfx90a-emu");
}

static void test_gfx942_emu(void **st) {
  (void)st;
  matrix("gfx942-emu");
}

/* a NaN key: the row max is maxnum on AMDGPU (MAXNUM = 1), which skips the NaN score, but p =
 * exp2(NaN - m) still carries it into the row's sum and output, as the IR's NaN-propagating max
 * would; rows that never see the key (causal: the rows above it) are unaffected.  gfx942-emu and
 * gfx90a-emu, f16 and bf16, causal off and on, (40, 70) with the NaN at key 37 (with causal,
 * rows 0-6 do not see it). */
static void test_nan_key(void **st) {
  (void)st;
  const char *arch[] = {"gfx942-emu", "gfx90a-emu"};
  for (int a = 0; a < 2; a++)
    for (int dt = 0; dt < 2; dt++)
      for (int causal = 0; causal < 2; causal++) {
        if (!test_take(3)) continue;   /* reduced: 3 of the 8, both chips, dtypes and causal */
        const kn_target *t = kn_emu_target(arch[a]);
        assert_non_null(t);
        kn_attn_desc desc = {.dtype = dt ? KN_BF16 : KN_F16, .head_dim = 64, .causal = causal,
                             .has_lse = true};
        kn_attn_config cfg = kn_attn_default_config(t->arch, &desc);
        cfg.off32 = causal;  /* both kinds of K/V loads */
        kn_kernel *kern = compile(t, arch[a], &desc, &cfg);
        outcome r;
        nan_key = 37;
        run_problem(kern, &desc, &cfg, 40, 70, 2, 1, &r);
        nan_key = -1;
        kn_kernel_free(kern);
        double tol = kn_attn_tolerance(desc.dtype);
        if (r.rc || !(r.err <= tol) || !(r.lse_err <= tol))
          fail_msg("%s %s causal=%d NaN key: rc %d %s, err %g, lse_err %g (tol %g)", arch[a],
                   kn_scalar_name(desc.dtype), causal, r.rc, r.msg, r.err, r.lse_err, tol);
      }
}

/* gfx950 (CDNA 4): the registry's new instructions, 32x32x16 (the default, 32 rows per wave)
 * and 16x16x32 (8 waves: 16 rows per wave; and MFMA = 16), f16 and bf16, under emulation against
 * float64 on ragged shapes; its assembly shows the instructions; a broken accumulator lane table
 * is caught with them too. */
static void test_gfx950_emu(void **st) {
  (void)st;
  const kn_target *t = kn_emu_target("gfx950-emu");
  assert_non_null(t);
  const kn_scalar dts[] = {KN_F16, KN_BF16};
  const int shapes[][2] = {{1, 1}, {17, 17}, {64, 1000}, {129, 77}};
  for (int h = 64; h <= 128; h += 64)
    for (int a = 0; a < 2; a++) {
      kn_attn_desc desc = {.dtype = dts[a], .head_dim = h, .causal = a == 1, .has_lse = true};
      kn_attn_config cfgs[3] = {kn_attn_default_config(kn_arch_get("gfx950"), &desc),
                                {128, 64, 8, 2, 0, false, false, false}, {128, 64, 4, 2, 16, false, false, false}};
      for (int g = 0; g < 3; g++) {
        if (!test_take(2)) continue;   /* reduced: every second kernel, each config once */
        kn_kernel *k = compile(t, "gfx950-emu", &desc, &cfgs[g]);
        for (int s = 0; s < 4; s++) {
          outcome r;
          run_problem(k, &desc, &cfgs[g], shapes[s][0], shapes[s][1], 2, 1, &r);
          if (r.rc || !(r.err <= kn_attn_tolerance(desc.dtype)) ||
              !(r.lse_err <= kn_attn_lse_tolerance(desc.dtype)))
            fail_msg("gfx950-emu D%d %s %dx%d w%d mfma=%d (%d,%d): %s max_abs_err=%.3g", h,
                     kn_scalar_name(desc.dtype), cfgs[g].block_m, cfgs[g].block_n, cfgs[g].warps,
                     cfgs[g].mfma, shapes[s][0], shapes[s][1], r.rc ? r.msg : "", r.err);
        }
        kn_kernel_free(k);
      }
    }
  /* the code object's assembly has the CDNA 4 instructions */
  const char *want[] = {"v_mfma_f32_32x32x16_f16", "v_mfma_f32_16x16x32_bf16"};
  for (int i = 0; i < 2; i++) {
    kn_attn_desc desc = {.dtype = i ? KN_BF16 : KN_F16, .head_dim = 64};
    kn_attn_config cfg = {128, 64, i ? 8 : 4, 2, 0, false, false, false};
    kn_diag d;
    kn_module *m = kn_module_new("<attn>");
    assert_non_null(kn_attn_fwd_build(m, &desc, &cfg, &d));
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    int rc = kn_pipeline_dump(m, "attn_fwd", kn_target_get("gfx950"), KN_STAGE_ASM, f, &d);
    fclose(f);
    if (rc) fail_msg("gfx950: %s", d.message);
    if (!strstr(text, want[i])) fail_msg("gfx950 assembly has no %s", want[i]);
    free(text);
    kn_module_free(m);
  }
  /* a wrong accumulator lane table is caught on the new shapes */
  kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 64, .has_lse = true};
  kn_attn_config cfg = kn_attn_default_config(kn_arch_get("gfx950"), &desc);
  kn_kernel *k = compile(kn_emu_target_broken("gfx950-emu", KN_EMU_BREAK_ACC_LANE), "gfx950-emu",
                         &desc, &cfg);
  outcome r;
  run_problem(k, &desc, &cfg, 17, 17, 2, 1, &r);
  assert_true(r.rc || !(r.err <= kn_attn_tolerance(desc.dtype)));
  kn_kernel_free(k);
}

/* f32 attention on AMDGPU has no MFMA: its dots are per-thread FMAs over the fma_16x32 layout
 * (layout.c) with the operands staged through LDS, row reductions still within a wave.  Both
 * chips, D 64 (causal off and on) and 128 (off on gfx90a, on on gfx942: the unrolled FMA code
 * is slow to compile), two configs (16 and 32 rows per wave), ragged shapes ((64,200) for
 * several KV blocks: the emulated FMA loops are slow), against the reference at
 * kn_attn_tolerance(KN_F32). */
static void test_f32(void **st) {
  (void)st;
  const char *archs[] = {"gfx90a-emu", "gfx942-emu"};
  const int shapes[][2] = {{1, 1}, {17, 17}, {64, 200}, {129, 77}};
  for (int t = 0; t < 2; t++)
    for (int hd = 64; hd <= 128; hd += 64)
      for (int c = 0; c < 2; c++) {
        kn_attn_desc desc = {.dtype = KN_F32, .head_dim = hd, .causal = c, .has_lse = true};
        kn_attn_config cfgs[2] = {{64, 32, 4, 2, 0, false, false, false}, {64, 64, 2, 2, 0, false, false, false}};
        if (hd == 128 && c != t) continue;   /* D 128: one causal setting per chip (compile time) */
        /* one config per case, alternating, so each chip, head dim and causal setting meets
         * both somewhere */
        int g = hd == 128 ? t : (t + c) % 2;
        if (!test_take(2)) continue;   /* reduced: both chips, D 64 and 128, both configs */
        {
          const kn_target *tg = kn_emu_target(archs[t]);
          assert_non_null(tg);
          kn_kernel *k = compile(tg, archs[t], &desc, &cfgs[g]);
          if (verbose())
            printf("  %s D%d f32 causal=%d %dx%d w%d\n", archs[t], hd, c, cfgs[g].block_m,
                   cfgs[g].block_n, cfgs[g].warps);
          for (int s = 0; s < 4; s++) {
            outcome r;   /* GQA: 2 query heads per kv head */
            run_problem(k, &desc, &cfgs[g], shapes[s][0], shapes[s][1], 2, 1, &r);
            if (r.rc || !(r.err <= kn_attn_tolerance(KN_F32)) ||
                !(r.lse_err <= kn_attn_lse_tolerance(KN_F32)))
              fail_msg("f32 %s D%d causal=%d %dx%d w%d (%d,%d): %s max_abs_err=%.3g lse_err=%.3g",
                       archs[t], hd, c, cfgs[g].block_m, cfgs[g].block_n, cfgs[g].warps,
                       shapes[s][0], shapes[s][1], r.rc ? r.msg : "", r.err, r.lse_err);
          }
          kn_kernel_free(k);
        }
      }
}

/* Head dims that are not multiples of 16: the head tile padded to one (attention.h), the loads
 * bounded at the head dim (vector accesses as wide as its alignment allows: 16 bytes at D 40, 72,
 * 80, 8, 24; scalar at D 59, 111, 1), the store too.  Both chips, f16 / bf16 / f32 (f32 at D 40
 * and 80: the fma_16x16_w64 dots), causal off and on, the default tiling of the chip (and for
 * two of them 64x32 with 4 waves), ragged lengths, GQA, rows with NaN gaps between them on one
 * problem each; and D 512 (f16 and bf16, the default 32x16 with 2 waves).  The default reads
 * K/V by buffer loads (off32), the API's. */
static void test_head_dims(void **st) {
  (void)st;
  static const struct { const char *arch; kn_scalar dt; int hd; bool causal, small; } cases[] = {
      {"gfx90a-emu", KN_F16, 40, true, false},  {"gfx90a-emu", KN_BF16, 59, false, false},
      {"gfx90a-emu", KN_F16, 111, true, true},  {"gfx90a-emu", KN_F32, 40, false, false},
      {"gfx90a-emu", KN_BF16, 1, true, false},  {"gfx90a-emu", KN_F16, 512, false, false},
      {"gfx942-emu", KN_BF16, 72, true, false}, {"gfx942-emu", KN_F16, 80, false, true},
      {"gfx942-emu", KN_F16, 24, false, false}, {"gfx942-emu", KN_F32, 80, true, false},
      {"gfx942-emu", KN_F16, 8, true, false},   {"gfx942-emu", KN_BF16, 512, true, false},
  };
  const int shapes[][2] = {{77, 130}, {130, 77}, {1, 1}, {17, 33}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* reduced: the odd cases (D 59, 40 f32, 512, 80 with 64x32 too, 80 f32, 512 bf16) */
    if (!test_keep((int)i + 1, 2)) continue;
    const kn_target *t = kn_emu_target(cases[i].arch);
    assert_non_null(t);
    kn_attn_desc desc = {.dtype = cases[i].dt, .head_dim = cases[i].hd, .causal = cases[i].causal,
                         .has_lse = true};
    kn_attn_config cfgs[2] = {kn_attn_default_config(t->arch, &desc),
                              {.block_m = 64, .block_n = 32, .warps = 4, .stages = 2}};
    cfgs[0].off32 = true;  /* the default by buffer loads (scalar ones at D 59, 111, 1), as the
                            * API prepares it; 64x32 by masked global loads */
    for (int g = 0; g < (cases[i].small ? 2 : 1); g++) {
      kn_diag d;
      if (kn_attn_check_on(t->arch, &desc, &cfgs[g], &d))
        fail_msg("%s D%d: %s", cases[i].arch, desc.head_dim, d.message);
      kn_kernel *k = compile(t, cases[i].arch, &desc, &cfgs[g]);
      for (int s = 0; s < 4; s++) {
        outcome r;
        row_gap = s == 1 ? 16 : 0;
        run_problem(k, &desc, &cfgs[g], shapes[s][0], shapes[s][1], 4, 2, &r);
        row_gap = 0;
        if (verbose())
          printf("  %s %s D%d causal=%d %dx%d w%d (%d,%d): err %.3g lse %.3g\n", cases[i].arch,
                 kn_scalar_name(desc.dtype), desc.head_dim, desc.causal, cfgs[g].block_m,
                 cfgs[g].block_n, cfgs[g].warps, shapes[s][0], shapes[s][1], r.err, r.lse_err);
        if (r.rc || !(r.err <= kn_attn_tolerance(desc.dtype)) ||
            !(r.lse_err <= kn_attn_lse_tolerance(desc.dtype)))
          fail_msg("%s %s D%d causal=%d %dx%d w%d (%d,%d)%s: %s max_abs_err=%.3g lse_err=%.3g "
                   "(inf: NaN, or a gap written)", cases[i].arch, kn_scalar_name(desc.dtype),
                   desc.head_dim, desc.causal, cfgs[g].block_m, cfgs[g].block_n, cfgs[g].warps,
                   shapes[s][0], shapes[s][1], s == 1 ? " row gap 16" : "", r.rc ? r.msg : "",
                   r.err, r.lse_err);
      }
      kn_kernel_free(k);
    }
  }
}

/* Each broken decision must fail a problem of the matrix (with a diagnostic or numerically). */
static void test_breaks_are_caught(void **st) {
  (void)st;
  const unsigned breaks[] = {KN_EMU_BREAK_BARRIER, KN_EMU_BREAK_MFMA_AB, KN_EMU_BREAK_ACC_LANE};
  const char *names[] = {"missing barrier", "MFMA A/B swapped", "accumulator lane group off"};
  const kn_scalar dts[] = {KN_F16, KN_BF16};
  for (int b = 0; b < 3; b++)
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 2; c++) {
        if (!test_keep(a + c, 2)) continue;   /* reduced: each break on both chips and dtypes */
        kn_attn_desc desc = {.dtype = dts[a], .head_dim = 64, .causal = c, .has_lse = true};
        kn_attn_config cfg = kn_attn_default_config(kn_arch_get("gfx942"), &desc);
        const char *arch = c ? "gfx90a-emu" : "gfx942-emu";
        kn_kernel *k = compile(kn_emu_target_broken(arch, breaks[b]), arch, &desc, &cfg);
        outcome r;
        run_problem(k, &desc, &cfg, 17, 17, 2, 2, &r);
        bool caught = r.rc != 0 || !(r.err <= kn_attn_tolerance(desc.dtype));
        if (verbose())
          printf("  break '%s' %s %s causal=%d: %s (err %.3g)%s%s\n", names[b], arch,
                 kn_scalar_name(dts[a]), c, caught ? "caught" : "NOT caught", r.err,
                 r.rc ? ": " : "", r.msg);
        if (!caught) fail_msg("the break '%s' went unnoticed", names[b]);
        if (breaks[b] == KN_EMU_BREAK_BARRIER) assert_non_null(strstr(r.msg, "missing barrier"));
        kn_kernel_free(k);
      }
}

/* The same mistakes made by kiln itself (layout.h: KN_GPU_BREAK_*, the test-only switches read
 * where compiler/gpu makes the decision), on a correct emulator: each must fail the comparison
 * with the reference or be reported by the emulator, and the same problem must pass again once
 * the switch is cleared (nothing else in the test differs). */
static void test_kiln_breaks_are_caught(void **st) {
  (void)st;
  const unsigned breaks[] = {KN_GPU_BREAK_ACC_LANE, KN_GPU_BREAK_STAGING_BARRIER};
  const char *names[] = {"accumulator lanes permuted", "no barrier after a staging store"};
  const int shapes[][2] = {{17, 17}, {40, 70}};
  const char *arch = "gfx942-emu";
  const kn_target *t = kn_emu_target(arch);
  assert_non_null(t);
  for (int b = 0; b < 2; b++)
    for (int c = 0; c < 2; c++)
      for (int s = 0; s < 2; s++) {
        if (!test_keep(c + s, 2)) continue;   /* reduced: causal off and on, both shapes */
        kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 64, .causal = c, .has_lse = true};
        kn_attn_config cfg = kn_attn_default_config(kn_arch_get("gfx942"), &desc);
        int nq = shapes[s][0], nk = shapes[s][1];
        for (int broken = 1; broken >= 0; broken--) {
          kn_gpu_test_breaks = broken ? breaks[b] : 0;
          kn_kernel *k = compile(t, arch, &desc, &cfg);
          kn_gpu_test_breaks = 0;
          outcome r;
          run_problem(k, &desc, &cfg, nq, nk, 2, 2, &r);
          kn_kernel_free(k);
          bool ok = r.rc == 0 && r.err <= kn_attn_tolerance(desc.dtype) &&
                    r.lse_err <= kn_attn_lse_tolerance(desc.dtype);
          if (verbose())
            printf("  kiln break '%s' %s causal=%d (%d,%d) %s: %s (err %.3g lse %.3g)%s%s\n",
                   names[b], arch, c, nq, nk, broken ? "set" : "cleared",
                   ok ? "passes" : "fails", r.err, r.lse_err, r.rc ? ": " : "", r.msg);
          if (broken && ok) fail_msg("the kiln break '%s' went unnoticed (%d,%d)", names[b], nq, nk);
          if (!broken && !ok)
            fail_msg("with the break '%s' cleared (%d,%d): %s err %.3g", names[b], nq, nk, r.msg,
                     r.err);
          /* a missing barrier is a race whatever the numbers: the emulator must say so */
          if (broken && breaks[b] == KN_GPU_BREAK_STAGING_BARRIER)
            assert_non_null(strstr(r.msg, "missing barrier"));
        }
      }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_f32),
      cmocka_unit_test(test_head_dims),
      cmocka_unit_test(test_nan_key),
      cmocka_unit_test(test_gfx90a_emu),
      cmocka_unit_test(test_gfx942_emu),
      cmocka_unit_test(test_gfx950_emu),
      cmocka_unit_test(test_breaks_are_caught),
      cmocka_unit_test(test_kiln_breaks_are_caught),
  };
  /* KILN_TEST_FILTER=test_head_dims (a cmocka pattern, * allowed) runs only the tests it names */
  const char *filter = getenv("KILN_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, NULL, NULL);
}
