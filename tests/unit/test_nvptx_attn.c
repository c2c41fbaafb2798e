/* test_nvptx_attn.c — the attention template through the NVPTX lowering, to PTX, ptxas and
 * (where a GPU is found) the GPU.
 *
 * Everywhere: for head dims 64 and 128, f16 and bf16, causal on and off, the template's default
 * config and a few others, the kernel lowers to PTX for sm_80 and sm_90a; the PTX has an
 * `.entry attn_fwd` with `.reqntid 32*warps`, mma.sync.aligned.m16n8k16 instructions and no
 * `.local` memory.  Where ptxas is found (kn_ptxas_find; a cmocka skip otherwise) it assembles
 * every PTX; registers, spills and stack are printed per config, and the default configs (and
 * 128x64 with 8 warps at D 128 and 4 warps at D 64) must have zero spills and no stack frame.
 *
 * Head dims that are not multiples of 16 (1, 8, 24, 40, 59, 72, 80, 111) and 256 at the
 * default configs: PTX, ptxas, spills; cp.async only where 8 | D; D 512 refused (test_head_dims).
 * wgmma on sm_90a (kn_attn_config.wgmma): the instructions, fences and descriptors' transpose
 * flags in the PTX, ptxas without spills, the refusals (test_wgmma); the GPU test runs two wgmma
 * tilings beside the mma.sync ones.
 *
 * On a machine with an NVIDIA GPU (kn_cuda_init finds one: the H200 of bench/h200) the kernels
 * run through runtime/cuda_device.h on N(0,1) inputs rounded to the dtype, with ragged lengths
 * ((17,17), (1000,1000), (64,1000), (1000,64), (1,1), (129,77), (300,511)), several configs,
 * grouped-query heads and the lse output, and are compared with kn_attn_reference (float64)
 * within kn_attn_tolerance; the output buffer is filled with NaN bytes first, so a row the kernel
 * never writes fails.  Each case prints one line.  Without a GPU the GPU test is a skip.
 *
 * Launches go through the shared helper (runtime/attn_launch_cuda.h), whose parameter widths
 * are checked everywhere against the template's signature (test_launch_param_widths).
 *
 * KILN_TEST_SEED=<n> replays the random inputs; KILN_TEST_DUMP=prefix writes the layout plan,
 * the LLVM IR and the PTX of the first compile (KILN_TEST_DUMP_NTH=<n>: of the n-th, from 0, in
 * the order the report lines are printed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "attention.h"
#include "attn_decode.h"
#include "attn_launch_cuda.h"
#include "cuda_device.h"
#include "gpu.h"
#include "target.h"
#include "interp.h"
#include "numeric.h"
#include "passes.h"
#include "ptxas.h"

static bool have_ptxas(void) {
  char path[512];
  return kn_ptxas_find(path, sizeof path, NULL) == KN_OK;
}

/* what a test looks at: the artefact (PTX), the layout text, the step times */
typedef struct nv_compiled {
  kn_artifact art;
  char *ptx;              /* = art.data */
  size_t ptx_size;
  int64_t smem_bytes;
  int threads;
  char *layout_text;
  kn_compile_times times;
} nv_compiled;

static int nv_compile(const kn_module *m, const char *arch, FILE *dump, nv_compiled *out,
                      kn_diag *d) {
  memset(out, 0, sizeof *out);
  kn_compile_options o = {.keep_layout = true, .dump_file = dump,
                          .dump_stages = dump ? KN_STAGE_LAYOUT | KN_STAGE_LOWERED | KN_STAGE_ASM : 0};
  kn_kernel *k;
  /* the module's kernel: the forward, or the decode kernel of compile_kernel */
  const char *name = m->nfuncs && m->funcs[m->nfuncs - 1]->is_kernel ? m->funcs[m->nfuncs - 1]->name
                                                                    : "attn_fwd";
  if (kn_compile(m, name, kn_target_get(arch), &o, &k, d)) return -1;
  kn_kernel_take_artifact(k, &out->art);
  out->ptx = out->art.data;
  out->ptx_size = out->art.size;
  out->smem_bytes = out->art.shared_bytes;
  out->threads = out->art.threads;
  out->layout_text = strdup(kn_kernel_layout_text(k));
  out->times = *kn_kernel_times(k);
  kn_kernel_free(k);
  return 0;
}

static void nv_compiled_free(nv_compiled *c) {
  kn_artifact_free(&c->art);
  free(c->layout_text);
  memset(c, 0, sizeof *c);
}

typedef struct compiled {
  nv_compiled c;
  kn_ptxas_kernel px;   /* valid when ptxas ran */
  bool ptxas_ran;
} compiled;

/* the forward (or, decode, the split-KV decode kernel) of desc at cfg, compiled for arch */
static void compile_kernel(const char *arch, const kn_attn_desc *desc, const kn_attn_config *cfg,
                           bool decode, compiled *out) {
  memset(out, 0, sizeof *out);
  kn_diag d;
  kn_module *m = kn_module_new("<attn>");
  assert_non_null(decode ? kn_attn_decode_build(m, desc, cfg, KN_DECODE_READ_ANY, &d)
                         : kn_attn_fwd_build(m, desc, cfg, &d));
  static bool dumped;
  static int ncompiles;
  const char *dump = getenv("KILN_TEST_DUMP"), *nth = getenv("KILN_TEST_DUMP_NTH");
  if (nth && ncompiles++ != atoi(nth)) dump = NULL;
  FILE *df = dump && !dumped ? fopen(dump, "w") : NULL;
  int rc = nv_compile(m, arch, df, &out->c, &d);
  if (df) fclose(df);
  if (rc)
    fail_msg("%s %s D%d causal=%d %dx%d w%d: %s", arch, kn_scalar_name(desc->dtype),
             desc->head_dim, desc->causal, cfg->block_m, cfg->block_n, cfg->warps,
             d.rendered[0] ? d.rendered : d.message);
  if (df) dumped = true;
  kn_module_free(m);
  const char *ptx = out->c.ptx;
  assert_non_null(strstr(ptx, decode ? ".entry attn_decode" : ".entry attn_fwd"));
  if (cfg->wgmma) {
    assert_non_null(strstr(ptx, "wgmma.mma_async.sync.aligned.m64n"));
    assert_null(strstr(ptx, "mma.sync.aligned"));
  } else {
    assert_non_null(strstr(ptx, "mma.sync.aligned.m16n8k16.row.col.f32"));
  }
  assert_null(strstr(ptx, ".local"));
  char req[32];
  snprintf(req, sizeof req, ".reqntid %d", 32 * cfg->warps);
  assert_non_null(strstr(ptx, req));
  assert_int_equal(out->c.threads, 32 * cfg->warps);
  if (!have_ptxas()) return;
  kn_ptxas_options o = {.arch = arch, .opt_level = 3};
  kn_ptxas_result r;
  kn_diag msg;
  if (kn_ptxas_run(ptx, out->c.ptx_size, &o, &r, &msg) != KN_OK)
    fail_msg("ptxas %s: %s", arch, msg.rendered);
  const kn_ptxas_kernel *k = kn_ptxas_find_kernel(&r, decode ? "attn_decode" : "attn_fwd");
  assert_non_null(k);
  out->px = *k;
  out->ptxas_ran = true;
  kn_ptxas_result_free(&r);
}

static void compile_one(const char *arch, const kn_attn_desc *desc, const kn_attn_config *cfg,
                        compiled *out) {
  compile_kernel(arch, desc, cfg, false, out);
}

static int count_text(const char *ptx, const char *what) {
  int n = 0;
  for (const char *p = ptx; (p = strstr(p, what)); p++) n++;
  return n;
}

/* matrix instructions in the PTX: mma.sync or wgmma */
static int count_mma(const char *ptx) {
  return count_text(ptx, "mma.sync.aligned.m16n8k16") + count_text(ptx, "wgmma.mma_async");
}

static void report(const char *arch, const kn_attn_desc *desc, const kn_attn_config *cfg,
                   const compiled *c) {
  printf("  %-6s %-4s D%-3d causal=%d %3dx%-3d w%d: smem %6lld B, %3d mma in PTX", arch,
         kn_scalar_name(desc->dtype), desc->head_dim, desc->causal, cfg->block_m, cfg->block_n,
         cfg->warps, (long long)c->c.smem_bytes, count_mma(c->c.ptx));
  if (c->ptxas_ran)
    printf(", ptxas: %3d registers, spill %d/%d B, stack %d B", c->px.registers,
           c->px.spill_stores, c->px.spill_loads, c->px.stack_frame);
  printf("  (lower %.0f, opt %.0f, ptx %.0f ms)\n", c->c.times.lower, c->c.times.optimize,
         c->c.times.codegen);
}

/* the default configs take the fast path: K^T and V copied by cp.async (K^T one iteration
 * ahead, V at the first dot), every mma operand from shared memory read by ldmatrix (V with
 * .trans), and no fallback through registers (no st.shared of K or V) */
static void fast_path(const compiled *c) {
  const char *ptx = c->c.ptx, *lay = c->c.layout_text;
  assert_non_null(lay);
  assert_non_null(strstr(ptx, "cp.async.cg.shared.global"));
  assert_non_null(strstr(ptx, "cp.async.wait_group"));
  assert_non_null(strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"));
  assert_non_null(strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
  assert_non_null(strstr(lay, "ldmatrix, cp.async one iteration ahead"));
  assert_non_null(strstr(lay, "ldmatrix, cp.async early"));
}

/* the defaults are the measured fastest tilings (compiler/arch.c): at D 128 that is 4 warps of
 * 32 rows, which ptxas fits in 255 registers with a few bytes spilled (12-28 B measured; the
 * 8-warp tiling without spills was 1.27x slower on an H200).  Anything beyond a few words is a
 * regression. */
static void no_spills(const compiled *c) {
  if (!c->ptxas_ran) return;
  assert_true(c->px.spill_stores <= 32);
  assert_true(c->px.spill_loads <= 32);
  assert_true(c->px.stack_frame <= 32);
}

static const char *archs[] = {"sm_80", "sm_90a"};

static void test_default_configs(void **state) {
  (void)state;
  if (!have_ptxas()) printf("  (ptxas not found: PTX only, no register report)\n");
  for (int a = 0; a < 2; a++)
    for (int t = 0; t < 2; t++)
      for (int hd = 64; hd <= 128; hd += 64)
        for (int causal = 0; causal < 2; causal++) {
          kn_attn_desc desc = {.dtype = t ? KN_BF16 : KN_F16, .head_dim = hd, .causal = causal};
          kn_attn_config cfg = kn_attn_default_config(kn_arch_get(archs[a]), &desc);
          compiled c;
          compile_one(archs[a], &desc, &cfg, &c);
          report(archs[a], &desc, &cfg, &c);
          no_spills(&c);
          /* sm_90a at head dim 128 and 64: wgmma 64x64 and 64x128 (measured,
           * templates/attn_fwd.c), K^T and V streamed into wgmma's layout; else mma.sync with
           * ldmatrix */
          assert_true(cfg.wgmma == (a == 1));
          if (cfg.wgmma) assert_int_equal(cfg.block_n, hd == 64 ? 128 : 64);
          if (cfg.wgmma) {
            assert_non_null(strstr(c.c.layout_text, "wgmma descriptor, cp.async one iteration ahead"));
            assert_non_null(strstr(c.c.layout_text, "wgmma descriptor, cp.async early"));
          } else {
            fast_path(&c);
          }
          nv_compiled_free(&c.c);
        }
}

/* The paged kernel's K and V reads are row gathers (compiler/gpu/gather.c): each thread reads
 * its rows' head dimension in 16-byte vectors, not element by element.  At the defaults, every
 * 2-byte element load of the PTX would be a scalar gathered element (the table's entries are
 * 4 bytes): there must be none, and at least the 16-byte loads of one K^T and one V tile. */
static void test_paged_row_gather(void **state) {
  (void)state;
  for (int a = 0; a < 2; a++)
    for (int t = 0; t < 2; t++) {
      kn_attn_desc desc = {.dtype = t ? KN_BF16 : KN_F16, .head_dim = 128, .causal = 1,
                           .layout = KN_ATTN_PAGED};
      kn_attn_config cfg = kn_attn_default_config(kn_arch_get(archs[a]), &desc);
      compiled c;
      compile_one(archs[a], &desc, &cfg, &c);
      report(archs[a], &desc, &cfg, &c);
      const char *ptx = c.c.ptx;
      /* K and V: one 16-byte cp.async per row chunk, both issued at the first dot (V in flight
       * during QK^T and the softmax) */
      int cp = count_text(ptx, "cp.async.cg.shared.global"),
          scalar16 = count_text(ptx, "ld.global.u16") + count_text(ptx, "ld.global.b16");
      printf("    paged: %d 16-byte cp.async, %d 2-byte loads\n", cp, scalar16);
      assert_int_equal(scalar16, 0);
      assert_true(cp >= 2 * (cfg.block_n * 128 * 2 / 16) / (32 * cfg.warps));
      assert_non_null(strstr(c.c.layout_text, "cp.async at the dot, with the loop's early ones"));
      assert_non_null(strstr(c.c.layout_text, "cp.async early"));
      no_spills(&c);
      nv_compiled_free(&c.c);
      /* the paged decode kernel: its in-page loop streams K one block ahead (the page index a
       * scalar load of the table, recomputed for the next block), its gather loop issues K and
       * V together; no register staging of either, no spills (Q, read once, is still a scalar
       * gather) */
      cfg = kn_attn_decode_default_config(kn_arch_get(archs[a]), &desc);
      desc.causal = 0;
      compile_kernel(archs[a], &desc, &cfg, true, &c);
      report(archs[a], &desc, &cfg, &c);
      assert_non_null(strstr(c.c.layout_text, "cp.async one iteration ahead"));
      assert_non_null(strstr(c.c.layout_text, "cp.async at the dot, with the loop's early ones"));
      assert_int_equal(count_text(c.c.layout_text, "cp.async early"), 2);
      no_spills(&c);
      nv_compiled_free(&c.c);
    }
}

/* other block shapes and warp counts on sm_90a: they must compile and assemble; spills are
 * reported, not checked (the autotuner prunes by them) */
static void test_configs(void **state) {
  (void)state;
  const int cfgs[][3] = {{64, 64, 4}, {128, 32, 8}, {128, 128, 8}, {64, 32, 4}, {128, 64, 4}};
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
    for (int hd = 64; hd <= 128; hd += 64) {
      kn_attn_desc desc = {.dtype = KN_F16, .head_dim = hd, .causal = i % 2 == 0};
      kn_attn_config cfg = {.block_m = cfgs[i][0], .block_n = cfgs[i][1], .warps = cfgs[i][2],
                            .stages = 2};
      compiled c;
      compile_one("sm_90a", &desc, &cfg, &c);
      report("sm_90a", &desc, &cfg, &c);
      fast_path(&c);
      /* 128x64 with 4 warps at D 128: Q (64 registers per thread) is staged once in shared
       * memory and read by ldmatrix in the loop, which is what keeps it near 255 registers */
      if (hd == 128 && cfg.block_m == 128 && cfg.block_n == 64 && cfg.warps == 4)
        assert_non_null(strstr(c.c.layout_text, "ldmatrix, staged once"));
      nv_compiled_free(&c.c);
    }
  /* the lse output (a rank-1 store of a row slice) */
  kn_attn_desc desc = {.dtype = KN_BF16, .head_dim = 128, .causal = true, .has_lse = true};
  kn_attn_config cfg = kn_attn_default_config(kn_arch_get("sm_90a"), &desc);
  compiled c;
  /* the AMDGPU MFMA shape request (meta MFMA) means nothing here: the same PTX */
  {
    compiled c16;
    kn_attn_config cfg16 = cfg;
    cfg16.mfma = 16;
    compile_one("sm_90a", &desc, &cfg, &c);
    compile_one("sm_90a", &desc, &cfg16, &c16);
    assert_string_equal(c.c.ptx, c16.c.ptx);
    nv_compiled_free(&c.c);
    nv_compiled_free(&c16.c);
  }
  cfg = kn_attn_default_config(kn_arch_get("sm_80"), &desc);  /* mma.sync: sm_80 has no wgmma */
  assert_false(cfg.wgmma);
  compile_one("sm_80", &desc, &cfg, &c);
  report("sm_80", &desc, &cfg, &c);
  no_spills(&c);
  nv_compiled_free(&c.c);
}

/* wgmma (kn_attn_config.wgmma, sm_90a): D 64 and 128, causal and not, f16 and bf16, one and two
 * warpgroups, block_n 64 and 128.  The PTX has exactly DP / 16 wgmma.mma_async.m64n{block_n}k16
 * (S = QK^T, one per k step of the head dim) and block_n / 16 m64n{D}k16 (O += PV) in the loop,
 * each dot fenced (wgmma.fence), committed and waited for, the .f16/.bf16 form of the dtype,
 * PV's B N-major (imm-trans-b 1) and QK^T's K-major (0), fence.proxy.async after the K/V copies,
 * the shared array 1024-byte aligned, no mma.sync and no ldmatrix of K or V (B is read through
 * descriptors); ptxas assembles it without spills.  sm_80, f32 and tilings other than
 * block_m = 16 x warps (warps a multiple of 4) are refused by kn_attn_check_on with the reason,
 * and the layout pass refuses them too (an IR kernel with WGMMA = 1 that does not fit). */
static void test_wgmma(void **state) {
  (void)state;
  const int cfgs[][3] = {{64, 64, 4}, {128, 64, 8}, {128, 128, 8}};
  const kn_arch *sm90 = kn_arch_get("sm_90a");
  for (int t = 0; t < 2; t++)
    for (int hd = 64; hd <= 128; hd += 64)
      for (int causal = 0; causal < 2; causal++)
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
          kn_attn_desc desc = {.dtype = t ? KN_BF16 : KN_F16, .head_dim = hd, .causal = causal,
                               .has_lse = i == 1};
          kn_attn_config cfg = {.block_m = cfgs[i][0], .block_n = cfgs[i][1],
                                .warps = cfgs[i][2], .stages = 2, .wgmma = true};
          kn_diag d;
          /* block_n equal to the head dim (both dots of one wgmma shape) too: Q is read from
           * shared memory, see below */
          if (kn_attn_check_on(sm90, &desc, &cfg, &d)) fail_msg("%s", d.message);
          compiled c;
          compile_one("sm_90a", &desc, &cfg, &c);
          report("sm_90a", &desc, &cfg, &c);
          const char *ptx = c.c.ptx, *ty = t ? "bf16" : "f16";
          char qk[96], pv[96];
          snprintf(qk, sizeof qk, "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s", cfg.block_n,
                   ty, ty);
          snprintf(pv, sizeof pv, "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s", hd, ty, ty);
          int nqk = count_text(ptx, qk), npv = count_text(ptx, pv);
          if (cfg.block_n == hd) assert_int_equal(nqk, hd / 16 + cfg.block_n / 16);
          else assert_int_equal(nqk, hd / 16), assert_int_equal(npv, cfg.block_n / 16);
          assert_int_equal(count_text(ptx, "wgmma.fence.sync.aligned"), 2);
          assert_int_equal(count_text(ptx, "wgmma.commit_group.sync.aligned"), 2);
          assert_int_equal(count_text(ptx, "wgmma.wait_group.sync.aligned 0"), 2);
          /* S = Q K^T with both operands through descriptors (A = Q staged once, K-major; B =
           * K^T, K-major): Q in registers shared its registers with P in ptxas 13.0's
           * allocation when the two shapes match, wrong on the H200 (gpu/assign_layouts.c) */
          assert_int_equal(count_text(ptx, ", p, 1, 1, 0, 0;"), hd / 16);
          assert_int_equal(count_text(ptx, ", p, 1, 1, 0;"), 0);
          assert_int_equal(count_text(ptx, ", p, 1, 1, 1;"), cfg.block_n / 16);    /* N-major */
          assert_non_null(strstr(ptx, "fence.proxy.async.shared::cta"));
          assert_non_null(strstr(ptx, ".align 1024 .b8 kn_smem"));
          assert_non_null(strstr(ptx, "cp.async.cg.shared.global"));
          assert_null(strstr(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans"));
          assert_non_null(strstr(c.c.layout_text, "wgmma descriptor, cp.async one iteration ahead"));
          assert_non_null(strstr(c.c.layout_text, "wgmma descriptor, cp.async early"));
          if (c.ptxas_ran) {
            assert_int_equal(c.px.spill_stores, 0);
            assert_int_equal(c.px.stack_frame, 0);
          }
          nv_compiled_free(&c.c);
        }
  /* KILN_WGMMA_A_REGS=1: Q in registers again (the lowering before codegen-2, to compare) */
  {
    kn_attn_desc rd = {.dtype = KN_F16, .head_dim = 64, .causal = 1};
    kn_attn_config rc = {.block_m = 64, .block_n = 64, .warps = 4, .stages = 2, .wgmma = true};
    setenv("KILN_WGMMA_A_REGS", "1", 1);
    assert_string_equal(kn_codegen_revision(), KN_CODEGEN_REVISION "+wgmma-a-regs");
    compiled c;
    compile_one("sm_90a", &rd, &rc, &c);
    unsetenv("KILN_WGMMA_A_REGS");
    assert_string_equal(kn_codegen_revision(), KN_CODEGEN_REVISION);
    assert_int_equal(count_text(c.c.ptx, ", p, 1, 1, 0, 0;"), 0);
    assert_int_equal(count_text(c.c.ptx, ", p, 1, 1, 0;"), 4);
    nv_compiled_free(&c.c);
  }
  /* refused, with the reason */
  kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 64};
  kn_attn_config bad = {.block_m = 128, .block_n = 64, .warps = 4, .stages = 2, .wgmma = true};
  kn_diag d;
  assert_int_equal(kn_attn_check_on(sm90, &desc, &bad, &d), -1);
  assert_non_null(strstr(d.message, "16 x warps"));
  bad.block_m = 64;
  assert_int_equal(kn_attn_check_on(kn_arch_get("sm_80"), &desc, &bad, &d), -1);
  assert_non_null(strstr(d.message, "wgmma is not available on sm_80"));
  desc.dtype = KN_F32;
  assert_int_equal(kn_attn_check_on(sm90, &desc, &bad, &d), -1);
  assert_non_null(strstr(d.message, "wgmma is not available"));
  /* the layout pass's own check, on a kernel built without kn_attn_check_on */
  desc.dtype = KN_F16;
  bad.block_m = 128;
  kn_module *m = kn_module_new("<attn>");
  assert_non_null(kn_attn_fwd_build(m, &desc, &bad, &d));
  nv_compiled nc;
  assert_int_equal(nv_compile(m, "sm_90a", NULL, &nc, &d), -1);
  assert_non_null(strstr(d.message, "wgmma does not fit this dot with 4 warps"));
  assert_int_equal(nv_compile(m, "sm_80", NULL, &nc, &d), -1);
  assert_non_null(strstr(d.message, "sm_80 has no wgmma instruction"));
  kn_module_free(m);
}

/* Head dims that are not multiples of 16 (the head tile padded to one, attention.h) at the
 * default configs, on sm_80 and sm_90a, f16 and bf16, causal off and on in turn: PTX that
 * ptxas assembles with at most a few words spilled (D 59: 28-32 bytes at 255 registers).  The
 * K/V stream takes cp.async where whole 16-byte chunks stay aligned (8 | D: the loads' bound
 * along the head dim is D, and rows are D elements apart); at other head dims the K and V tiles
 * are loaded into registers with narrower accesses and staged, and there is no cp.async (a
 * 16-byte copy of a row of 59 halves would be misaligned).  D 512 is refused on both (the
 * accumulator alone would need 256 registers per thread; ptxas spilled 650-990 bytes). */
static void test_head_dims(void **state) {
  (void)state;
  static const int dims[] = {1, 8, 24, 40, 59, 72, 80, 111, 256};
  for (int a = 0; a < 2; a++)
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
      kn_attn_desc desc = {.dtype = (i + a) % 2 ? KN_BF16 : KN_F16, .head_dim = dims[i],
                           .causal = i % 2 == 1, .has_lse = i % 3 == 0};
      kn_attn_config cfg = kn_attn_default_config(kn_arch_get(archs[a]), &desc);
      kn_diag d;
      if (kn_attn_check_on(kn_arch_get(archs[a]), &desc, &cfg, &d))
        fail_msg("%s D%d: %s", archs[a], dims[i], d.message);
      compiled c;
      compile_one(archs[a], &desc, &cfg, &c);
      report(archs[a], &desc, &cfg, &c);
      no_spills(&c);
      if (dims[i] % 8 == 0) fast_path(&c);
      else assert_null(strstr(c.c.ptx, "cp.async"));
      nv_compiled_free(&c.c);
    }
  for (int a = 0; a < 2; a++) {
    kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 512};
    kn_attn_config cfg = kn_attn_default_config(kn_arch_get(archs[a]), &desc);
    kn_diag d;
    assert_int_equal(kn_attn_check_on(kn_arch_get(archs[a]), &desc, &cfg, &d), -1);
    assert_non_null(strstr(d.message, "head dims above 256 are not supported there"));
  }
}

/* the registry's NVIDIA targets through the one pipeline: the artefact is PTX for the arch */
static void test_target(void **state) {
  (void)state;
  kn_attn_desc desc = {.dtype = KN_F16, .head_dim = 64, .causal = true};
  /* (sm_80's tiling: mma.sync, which both archs have; sm_90a's own default is wgmma) */
  kn_attn_config cfg = kn_attn_default_config(kn_arch_get("sm_80"), &desc);
  kn_diag d;
  kn_module *m = kn_module_new("<attn>");
  assert_non_null(kn_attn_fwd_build(m, &desc, &cfg, &d));
  for (int a = 0; a < 2; a++) {
    const kn_target *t = kn_target_get(archs[a]);
    assert_non_null(t);
    assert_ptr_equal(t->arch, kn_arch_get(archs[a]));
    kn_kernel *k;
    if (kn_compile(m, "attn_fwd", t, NULL, &k, &d)) fail_msg("compile: %s", d.message);
    const kn_artifact *art = kn_kernel_artifact(k);
    assert_int_equal(art->kind, KN_ARTIFACT_PTX);
    assert_null(kn_kernel_entry(k));  /* PTX is loaded by the CUDA driver, not here */
    char want[32];
    snprintf(want, sizeof want, ".target %s", archs[a]);
    assert_non_null(strstr(art->data, want));
    assert_non_null(strstr(art->data, "mma.sync.aligned.m16n8k16"));
    assert_int_equal(strlen(art->data), art->size);
    assert_true(art->shared_bytes > 0);
    assert_int_equal(art->threads, 32 * cfg.warps);
    assert_string_equal(art->symbol, "attn_fwd");
    kn_kernel_free(k);
  }
  kn_module_free(m);
}

/* the launch helper's parameter widths (runtime/attn_launch_cuda.c) are those of the template's
 * signature, for every descriptor shape that changes it (dtype only changes pointee types), and
 * for a variant's kernel (its modifiers' i32, f32, i64 and pointer parameters) those of its
 * kn_attn_sig */
static void test_launch_param_widths(void **state) {
  (void)state;
  const char *user = "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, "
                     "%temp: f32, %shift: i64) -> (f32) {\n"
                     "  %t = mul %score, %temp : f32\n"
                     "  return %t\n"
                     "}\n";
  for (int v = 0; v < 3; v++) {
    kn_attn_desc desc = {.dtype = v == 1 ? KN_BF16 : KN_F16, .head_dim = 64, .has_lse = v == 1};
    if (v == 2) desc.window = desc.softcap = desc.alibi = true, desc.mods = user;
    kn_attn_sig sig;
    kn_diag d;
    if (kn_attn_signature(&desc, &sig, &d)) fail_msg("signature: %s", d.message);
    const kn_attn_sig *s = v == 2 ? &sig : NULL; /* NULL: the template's own parameters */
    kn_attn_config cfg = kn_attn_default_config(kn_arch_get("sm_90a"), &desc);
    kn_module *m = kn_module_new("<attn>");
    kn_func *f = kn_attn_fwd_build(m, &desc, &cfg, &d);
    if (!f) fail_msg("build: %s", d.message);
    assert_int_equal(kn_func_nparams(f), v == 2 ? KN_ATTN_NPARAMS + 7 : KN_ATTN_NPARAMS);
    assert_int_equal(sig.n, kn_func_nparams(f));
    for (int i = 0; i < kn_func_nparams(f); i++) {
      const kn_type *t = &kn_func_param(f, i)->type;
      int want = t->kind == KN_TY_PTR ? 8 : (int)kn_scalar_size(t->elem);
      if (kn_attn_cuda_param_bytes(s, i) != want)
        fail_msg("parameter %d: the launch helper packs %d bytes, the template declares %d", i,
                 kn_attn_cuda_param_bytes(s, i), want);
    }
    assert_int_equal(kn_attn_cuda_param_bytes(s, kn_func_nparams(f)), 0);
    kn_module_free(m);
  }
  /* and the packing puts each value at its own address, in its own width */
  kn_argval a[KN_ATTN_MAX_PARAMS];
  for (int i = 0; i < KN_ATTN_MAX_PARAMS; i++) a[i].i = 0x100000000ll + i;
  a[0].p = (void *)(uintptr_t)0x7f0000001000ull;
  a[5].f = 0.125;
  kn_attn_cuda_params p;
  assert_int_equal(kn_attn_cuda_pack(NULL, a, &p), 0);
  assert_int_equal(p.n, KN_ATTN_NPARAMS);
  assert_int_equal(*(uint64_t *)p.params[0], 0x7f0000001000ull);
  assert_true(*(float *)p.params[5] == 0.125f);
  assert_int_equal(*(int32_t *)p.params[6], 6);          /* truncated to the i32 */
  assert_int_equal(*(int64_t *)p.params[23], 0x100000000ll + 23);
  /* a variant: softcap (f32), alibi_slopes (ptr), alibi_sb (i64), the caller's temp (f32) and
   * shift (i64), window_left and window_right (i32), each where the signature puts it */
  kn_attn_desc vd = {.dtype = KN_F16, .head_dim = 64, .window = true, .softcap = true,
                     .alibi = true, .mods = user};
  kn_attn_sig sig;
  assert_int_equal(kn_attn_signature(&vd, &sig, NULL), 0);
  assert_int_equal(sig.n, KN_ATTN_NPARAMS + 7);
  const struct { const char *name; kn_argval v; } vals[] = {
      {"window_left", {.i = -1}}, {"window_right", {.i = 7}}, {"softcap", {.f = 30.0}},
      {"alibi_slopes", {.p = (void *)(uintptr_t)0x7f0000002000ull}}, {"alibi_sb", {.i = 8}},
      {"temp", {.f = 0.5}}, {"shift", {.i = -3}}};
  int at[7];
  for (int j = 0; j < 7; j++) {
    at[j] = -1;
    for (int i = KN_ATTN_NPARAMS; i < sig.n; i++)
      if (!strcmp(sig.name[i], vals[j].name)) at[j] = i;
    if (at[j] < 0) fail_msg("%s is not in the variant's signature", vals[j].name);
    a[at[j]] = vals[j].v;
  }
  assert_int_equal(kn_attn_cuda_pack(&sig, a, &p), 0);
  assert_int_equal(p.n, KN_ATTN_NPARAMS + 7);
  assert_int_equal(*(int32_t *)p.params[at[0]], -1);
  assert_int_equal(*(int32_t *)p.params[at[1]], 7);
  assert_true(*(float *)p.params[at[2]] == 30.0f);
  assert_int_equal(*(uint64_t *)p.params[at[3]], 0x7f0000002000ull);
  assert_int_equal(*(int64_t *)p.params[at[4]], 8);
  assert_true(*(float *)p.params[at[5]] == 0.5f);
  assert_int_equal(*(int64_t *)p.params[at[6]], -3);
  assert_int_equal(*(int64_t *)p.params[23], 0x100000000ll + 23); /* the template's, unmoved */
  /* a parameter the launch cannot pass (an i1) is refused, not packed in some width */
  sig.type[at[6]] = kn_ty_scalar(KN_I1);
  assert_int_equal(kn_attn_cuda_param_bytes(&sig, at[6]), 0);
  assert_int_equal(kn_attn_cuda_pack(&sig, a, &p), -1);
}

/* ---- on the GPU ---- */

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((splitmix(s) >> 11) + 0.5) * 0x1p-53; }
static double normal(uint64_t *s) {
  double u = uniform01(s), v = uniform01(s);
  return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static kn_cuda_device *dev;
static uint64_t seed = 1;

static kn_cuda_ptr upload_random(kn_scalar t, size_t n, uint64_t *rng, double **dbl) {
  size_t es = kn_scalar_size(t);
  unsigned char *h = malloc(n * es);
  double *x = malloc(n * sizeof(double));
  assert_true(h && x);
  for (size_t i = 0; i < n; i++) {
    x[i] = kn_round(t, normal(rng));
    kn_store_elem(t, h + i * es, x[i]);
  }
  kn_cuda_ptr p;
  kn_diag e;
  if (kn_cuda_alloc(dev, n * es, &p, &e) || kn_cuda_copy_htod(dev, p, h, n * es, &e))
    fail_msg("%s", e.message);
  free(h);
  *dbl = x;
  return p;
}

/* one problem through one compiled kernel; returns max abs errors of O and lse */
static void run_case(const kn_attn_desc *desc, const kn_attn_config *cfg, int B, int H, int HK,
                     int Nq, int Nk, double *err_o, double *err_lse) {
  compiled c;
  compile_one("sm_90a", desc, cfg, &c);
  kn_diag e;
  kn_cuda_module *mod;
  if (kn_cuda_module_load_ptx(dev, c.c.ptx, &mod, &e)) fail_msg("%s", e.message);
  kn_cuda_kernel *k;
  if (kn_cuda_module_kernel(mod, "attn_fwd", &k, &e)) fail_msg("%s", e.message);
  kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = Nq, .seqlen_k = Nk};
  int D = desc->head_dim;
  kn_scalar t = desc->dtype;
  size_t es = kn_scalar_size(t);
  size_t nq = (size_t)B * H * Nq * D, nk = (size_t)B * HK * Nk * D, nl = (size_t)B * H * Nq;
  uint64_t rng = seed;
  double *qd, *kd, *vd;
  kn_cuda_ptr q = upload_random(t, nq, &rng, &qd), kk = upload_random(t, nk, &rng, &kd),
              v = upload_random(t, nk, &rng, &vd), o, lse = 0;
  if (kn_cuda_alloc(dev, nq * es, &o, &e) || kn_cuda_memset8(dev, o, 0xff, nq * es, &e))
    fail_msg("%s", e.message);
  if (desc->has_lse &&
      (kn_cuda_alloc(dev, nl * 4, &lse, &e) || kn_cuda_memset8(dev, lse, 0xff, nl * 4, &e)))
    fail_msg("%s", e.message);
  kn_argval args[KN_ATTN_NPARAMS];
  int grid[3];
  kn_attn_fill_args(desc, NULL, cfg, &p, (void *)(uintptr_t)q, (void *)(uintptr_t)kk,
                    (void *)(uintptr_t)v, (void *)(uintptr_t)o,
                    desc->has_lse ? (float *)(uintptr_t)lse : NULL, NULL, args, grid, NULL);
  kn_attn_cuda_launch_info li = {.threads = c.c.threads, .smem_bytes = c.c.smem_bytes};
  if (kn_attn_cuda_launch(k, &li, NULL, args, grid, NULL, &e) || kn_cuda_device_sync(dev, &e))
    fail_msg("launch: %s", e.message);
  unsigned char *oh = malloc(nq * es);
  float *lh = desc->has_lse ? malloc(nl * 4) : NULL;
  if (kn_cuda_copy_dtoh(dev, oh, o, nq * es, &e)) fail_msg("%s", e.message);
  if (lh && kn_cuda_copy_dtoh(dev, lh, lse, nl * 4, &e)) fail_msg("%s", e.message);
  double *od = malloc(nq * sizeof(double)), *ld = malloc(nl * sizeof(double));
  kn_attn_reference(desc, &p, qd, kd, vd, od, ld);
  *err_o = 0;
  *err_lse = 0;
  for (size_t i = 0; i < nq; i++) {
    double x = kn_load_elem(t, oh + i * es), dd = fabs(x - od[i]);
    if (isnan(dd)) dd = INFINITY;
    if (dd > *err_o) *err_o = dd;
  }
  for (size_t i = 0; lh && i < nl; i++) {
    double dd = isinf(ld[i]) && isinf(lh[i]) && (ld[i] < 0) == (lh[i] < 0) ? 0 : fabs(lh[i] - ld[i]);
    if (isnan(dd)) dd = INFINITY;
    if (dd > *err_lse) *err_lse = dd;
  }
  free(oh), free(lh), free(od), free(ld), free(qd), free(kd), free(vd);
  kn_cuda_free(dev, q, NULL), kn_cuda_free(dev, kk, NULL), kn_cuda_free(dev, v, NULL);
  kn_cuda_free(dev, o, NULL);
  if (lse) kn_cuda_free(dev, lse, NULL);
  kn_cuda_module_unload(mod);
  nv_compiled_free(&c.c);
}

static void test_gpu(void **state) {
  (void)state;
  kn_diag e;
  if (kn_cuda_init(&e) != KN_OK) {
    printf("  (no GPU: %s)\n", e.message);
    skip();
    return;
  }
  if (kn_cuda_device_open(0, &dev, &e)) fail_msg("%s", e.message);
  const kn_cuda_props *pr = kn_cuda_device_get_props(dev);
  printf("  device 0: %s, sm_%d%d\n", pr->name, pr->cc_major, pr->cc_minor);
  const char *env = getenv("KILN_TEST_SEED");
  seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  printf("  seed %llu (KILN_TEST_SEED replays)\n", (unsigned long long)seed);
  const int lens[][2] = {{17, 17}, {1000, 1000}, {64, 1000}, {1000, 64}, {1, 1}, {129, 77},
                         {300, 511}};
  int failures = 0, cases = 0;
  for (int t = 0; t < 2; t++)
    for (int hd = 64; hd <= 128; hd += 64)
      for (int causal = 0; causal < 2; causal++)
        for (int cf = 0; cf < 6; cf++) {
          /* the default; 64x32 w4 (lse); 128x64 w4 (at D 128 Q is staged once in shared memory
           * and read with ldmatrix in the loop); 128x128 w8 (lse); wgmma: 64 rows w4 (one
           * warpgroup), 128 rows w8 (two warpgroups, lse) */
          kn_attn_desc desc = {.dtype = t ? KN_BF16 : KN_F16, .head_dim = hd, .causal = causal,
                               .has_lse = cf % 2 == 1};
          kn_attn_config cfg = kn_attn_default_config(kn_arch_get("sm_90a"), &desc);
          if (cf == 1) cfg = (kn_attn_config){.block_m = 64, .block_n = 32, .warps = 4, .stages = 2};
          if (cf == 2) cfg = (kn_attn_config){.block_m = 128, .block_n = 64, .warps = 4, .stages = 2};
          if (cf == 3) cfg = (kn_attn_config){.block_m = 128, .block_n = 128, .warps = 8, .stages = 2};
          if (cf == 4)
            cfg = (kn_attn_config){.block_m = 64, .block_n = hd == 64 ? 128 : 64, .warps = 4,
                                   .stages = 2, .wgmma = true};
          if (cf == 5)
            cfg = (kn_attn_config){.block_m = 128, .block_n = hd == 128 ? 64 : 128, .warps = 8,
                                   .stages = 2, .wgmma = true};
          for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int B = 1, H = 2, HK = li % 2 ? 1 : 2;  /* every other case: 2 heads on 1 kv head */
            double eo, el;
            run_case(&desc, &cfg, B, H, HK, lens[li][0], lens[li][1], &eo, &el);
            seed++;
            double tol = kn_attn_tolerance(desc.dtype), ltol = kn_attn_lse_tolerance(desc.dtype);
            bool ok = eo <= tol && (!desc.has_lse || el <= ltol);
            printf("  %s %-4s D%-3d causal=%d %3dx%-3d w%d%s B%d H%d HK%d N(%4d,%4d): max|dO| "
                   "%.2e (tol %.0e)",
                   ok ? "PASS" : "FAIL", kn_scalar_name(desc.dtype), hd, causal, cfg.block_m,
                   cfg.block_n, cfg.warps, cfg.wgmma ? " wgmma" : "", B, H, HK, lens[li][0],
                   lens[li][1], eo, tol);
            if (desc.has_lse) printf(", max|dlse| %.2e (tol %.0e)", el, ltol);
            printf("\n");
            failures += !ok;
            cases++;
          }
        }
  /* head dims that are not multiples of 16 (the padded head tile; scalar or narrower loads and
   * no cp.async where 8 does not divide D), at the default config, ragged lengths */
  static const int dims[] = {40, 59, 72, 111, 256};
  for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
    for (int causal = 0; causal < 2; causal++) {
      kn_attn_desc desc = {.dtype = (di + causal) % 2 ? KN_BF16 : KN_F16, .head_dim = dims[di],
                           .causal = causal, .has_lse = true};
      kn_attn_config cfg = kn_attn_default_config(kn_arch_get("sm_90a"), &desc);
      for (size_t li = 3; li < sizeof lens / sizeof lens[0]; li++) {
        double eo, el;
        run_case(&desc, &cfg, 1, 2, 1, lens[li][0], lens[li][1], &eo, &el);
        seed++;
        double tol = kn_attn_tolerance(desc.dtype), ltol = kn_attn_lse_tolerance(desc.dtype);
        bool ok = eo <= tol && el <= ltol;
        printf("  %s %-4s D%-3d causal=%d %3dx%-3d w%d N(%4d,%4d): max|dO| %.2e (tol %.0e), "
               "max|dlse| %.2e (tol %.0e)\n", ok ? "PASS" : "FAIL", kn_scalar_name(desc.dtype),
               dims[di], causal, cfg.block_m, cfg.block_n, cfg.warps, lens[li][0], lens[li][1],
               eo, tol, el, ltol);
        failures += !ok;
        cases++;
      }
    }
  printf("  %d of %d GPU cases passed\n", cases - failures, cases);
  kn_cuda_device_close(dev);
  assert_int_equal(failures, 0);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);  /* lines survive a crash of a later case */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_target),
      cmocka_unit_test(test_launch_param_widths),
      cmocka_unit_test(test_default_configs),
      cmocka_unit_test(test_paged_row_gather),
      cmocka_unit_test(test_configs),
      cmocka_unit_test(test_head_dims),
      cmocka_unit_test(test_wgmma),
      cmocka_unit_test(test_gpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
