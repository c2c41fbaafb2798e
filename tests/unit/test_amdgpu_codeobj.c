/* test_amdgpu_codeobj.c — the AMDGPU code-object backend, checked without AMD hardware.
 *
 * Builds small kernels from LLVM IR text (an MFMA loop with an LDS round trip, a kernel that
 * keeps 40 MFMA accumulators live so that it must spill, and on gfx942 an fp8 MFMA loop),
 * compiles them for gfx90a and gfx942 through kn_amdgpu_compile (verify, default<O3> with the
 * target machine, object, in-process lld link), and checks the code objects with the inspector:
 * ELF type and machine, code object v5, the target ID, the MFMA count (also against
 * llvm-objdump when it is installed), a kernarg segment without hidden arguments, LDS, spills and
 * occupancy.  Then it corrupts the code object (truncations, byte flips, hostile header and note
 * fields) and expects errors, never a crash, and checks that the link does not use PATH.
 *
 * The compile of the first target is also the cold compile latency of the module (LLVM's
 * AMDGPU target initialised in this process for the first time); the test prints it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>

#include "amdgpu.h"
#include "layout.h"
#include "msgpack.h"

#include "objdump.h"
#define NHOG 40  /* accumulators of reg_hog: 40 x 16 f32 per lane > 512 registers */

/* ---- test kernels ---- */

typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *s, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int w = vsnprintf(s->p + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    assert_true(w >= 0);
    if ((size_t)w < s->cap - s->len) {
      s->len += (size_t)w;
      return;
    }
    s->cap = s->cap * 2 + (size_t)w;
    s->p = realloc(s->p, s->cap);
    assert_non_null(s->p);
  }
}

/* The test module's IR text (malloc'd).  Explicit kernarg bytes: mfma_loop 28, reg_hog 20,
 * mfma_fp8 20 (pointers 8, i32 4). */

/* the instruction of t with this shape and operand type, or NULL */
static const kn_mma_instr *find_mma(const kn_arch *t, int m, int n, int k, kn_scalar a) {
  for (int i = 0; t && i < t->nmma; i++)
    if (t->mma[i].m == m && t->mma[i].n == n && t->mma[i].k == k && t->mma[i].a == a)
      return &t->mma[i];
  return NULL;
}

static char *test_ir(bool fp8) {
  sbuf s = {malloc(4096), 0, 4096};
  put(&s,
      "@lds = internal addrspace(3) global [4096 x float] poison, align 16\n"
      "\n"
      "define amdgpu_kernel void @mfma_loop(ptr addrspace(1) noalias %%out,\n"
      "    ptr addrspace(1) noalias readonly %%a, ptr addrspace(1) noalias readonly %%b,\n"
      "    i32 %%n) #0 {\n"
      "entry:\n"
      "  %%tid = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %%pa = getelementptr <4 x half>, ptr addrspace(1) %%a, i32 %%tid\n"
      "  %%va = load <4 x half>, ptr addrspace(1) %%pa, align 8\n"
      "  %%pb = getelementptr <4 x half>, ptr addrspace(1) %%b, i32 %%tid\n"
      "  %%vb = load <4 x half>, ptr addrspace(1) %%pb, align 8\n"
      "  %%go = icmp sgt i32 %%n, 0\n"
      "  br i1 %%go, label %%loop, label %%done\n"
      "loop:\n"
      "  %%i = phi i32 [0, %%entry], [%%i1, %%loop]\n"
      "  %%acc = phi <16 x float> [zeroinitializer, %%entry], [%%r, %%loop]\n"
      "  %%r = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half> %%va,\n"
      "      <4 x half> %%vb, <16 x float> %%acc, i32 0, i32 0, i32 0)\n"
      "  %%i1 = add nuw nsw i32 %%i, 1\n"
      "  %%c = icmp slt i32 %%i1, %%n\n"
      "  br i1 %%c, label %%loop, label %%done\n"
      "done:\n"
      "  %%res = phi <16 x float> [zeroinitializer, %%entry], [%%r, %%loop]\n"
      "  %%e0 = extractelement <16 x float> %%res, i32 0\n"
      "  %%pl = getelementptr [4096 x float], ptr addrspace(3) @lds, i32 0, i32 %%tid\n"
      "  store float %%e0, ptr addrspace(3) %%pl, align 4\n"
      "  call void @llvm.amdgcn.s.barrier()\n"
      "  %%tid1 = xor i32 %%tid, 1\n"
      "  %%pl1 = getelementptr [4096 x float], ptr addrspace(3) @lds, i32 0, i32 %%tid1\n"
      "  %%nb = load float, ptr addrspace(3) %%pl1, align 4\n"
      "  %%res2 = insertelement <16 x float> %%res, float %%nb, i32 0\n"
      "  %%po = getelementptr <16 x float>, ptr addrspace(1) %%out, i32 %%tid\n"
      "  store <16 x float> %%res2, ptr addrspace(1) %%po, align 64\n"
      "  ret void\n"
      "}\n\n");

  /* reg_hog: NHOG accumulators live across the loop */
  put(&s,
      "define amdgpu_kernel void @reg_hog(ptr addrspace(1) noalias %%out,\n"
      "    ptr addrspace(1) noalias readonly %%a, i32 %%n) #0 {\n"
      "entry:\n"
      "  %%tid = call i32 @llvm.amdgcn.workitem.id.x()\n"
      "  %%base = mul i32 %%tid, %d\n",
      NHOG);
  for (int j = 0; j < NHOG; j++)
    put(&s,
        "  %%ia%d = add i32 %%base, %d\n"
        "  %%pa%d = getelementptr <4 x half>, ptr addrspace(1) %%a, i32 %%ia%d\n"
        "  %%a%d = load <4 x half>, ptr addrspace(1) %%pa%d, align 8\n",
        j, j, j, j, j, j);
  put(&s, "  br label %%loop\nloop:\n  %%i = phi i32 [0, %%entry], [%%i1, %%loop]\n");
  for (int j = 0; j < NHOG; j++)
    put(&s, "  %%acc%d = phi <16 x float> [zeroinitializer, %%entry], [%%r%d, %%loop]\n", j, j);
  for (int j = 0; j < NHOG; j++)
    put(&s,
        "  %%r%d = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half> %%a%d, "
        "<4 x half> %%a%d, <16 x float> %%acc%d, i32 0, i32 0, i32 0)\n",
        j, j, (j + 1) % NHOG, j);
  put(&s,
      "  %%i1 = add nuw nsw i32 %%i, 1\n"
      "  %%c = icmp slt i32 %%i1, %%n\n"
      "  br i1 %%c, label %%loop, label %%done\n"
      "done:\n");
  for (int j = 0; j < NHOG; j++)
    put(&s,
        "  %%po%d = getelementptr <16 x float>, ptr addrspace(1) %%out, i32 %%ia%d\n"
        "  store <16 x float> %%r%d, ptr addrspace(1) %%po%d, align 64\n",
        j, j, j, j);
  put(&s, "  ret void\n}\n\n");

  if (fp8)
    put(&s,
        "define amdgpu_kernel void @mfma_fp8(ptr addrspace(1) noalias %%out,\n"
        "    ptr addrspace(1) noalias readonly %%a, i32 %%n) #0 {\n"
        "entry:\n"
        "  %%tid = call i32 @llvm.amdgcn.workitem.id.x()\n"
        "  %%pa = getelementptr i64, ptr addrspace(1) %%a, i32 %%tid\n"
        "  %%va = load i64, ptr addrspace(1) %%pa, align 8\n"
        "  br label %%loop\n"
        "loop:\n"
        "  %%i = phi i32 [0, %%entry], [%%i1, %%loop]\n"
        "  %%acc = phi <16 x float> [zeroinitializer, %%entry], [%%r, %%loop]\n"
        "  %%r = call <16 x float> @llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8(i64 %%va, i64 %%va,\n"
        "      <16 x float> %%acc, i32 0, i32 0, i32 0)\n"
        "  %%i1 = add nuw nsw i32 %%i, 1\n"
        "  %%c = icmp slt i32 %%i1, %%n\n"
        "  br i1 %%c, label %%loop, label %%done\n"
        "done:\n"
        "  %%po = getelementptr <16 x float>, ptr addrspace(1) %%out, i32 %%tid\n"
        "  store <16 x float> %%r, ptr addrspace(1) %%po, align 64\n"
        "  ret void\n"
        "}\n\n"
        "declare <16 x float> @llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8(i64, i64, <16 x float>,\n"
        "    i32, i32, i32)\n");
  put(&s,
      "declare i32 @llvm.amdgcn.workitem.id.x()\n"
      "declare void @llvm.amdgcn.s.barrier()\n"
      "declare <16 x float> @llvm.amdgcn.mfma.f32.32x32x8f16(<4 x half>, <4 x half>,\n"
      "    <16 x float>, i32, i32, i32)\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,256\" }\n");
  return s.p;
}

static LLVMModuleRef parse_ir(LLVMContextRef ctx, const char *text) {
  LLVMMemoryBufferRef buf =
      LLVMCreateMemoryBufferWithMemoryRangeCopy(text, strlen(text), "test.ll");
  LLVMModuleRef mod = NULL;
  char *msg = NULL;
  if (LLVMParseIRInContext(ctx, buf, &mod, &msg)) {
    fprintf(stderr, "IR parse error: %s\n", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    return NULL;
  }
  return mod;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- compiled once, checked by several tests ---- */

typedef struct built {
  const kn_arch *t;
  kn_amdgpu_output out;
  double ms_total;  /* parse -> O3 -> object -> link */
} built;

static built gfx942, gfx90a;

static int build(built *b, const char *name) {
  b->t = kn_arch_get(name);
  if (!b->t) return -1;
  double t0 = now_ms();
  char *ir = test_ir(!strcmp(name, "gfx942"));
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMModuleRef mod = parse_ir(ctx, ir);
  free(ir);
  kn_diag d = {0};
  kn_amdgpu_options opt = {.emit_asm = true, .link = true};
  int rc = mod ? kn_amdgpu_compile(b->t, mod, &opt, &b->out, &d) : -1;
  b->ms_total = now_ms() - t0;
  if (rc) fprintf(stderr, "%s: %s", name, d.rendered);
  if (mod) LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  return rc;
}

static int setup(void **state) {
  (void)state;
  /* gfx942 first: its time is the cold compile (first use of LLVM's AMDGPU target here) */
  if (build(&gfx942, "gfx942") || build(&gfx90a, "gfx90a")) return -1;
  printf("compile latency, parse -> O3 -> object -> link, 2-core machine:\n");
  const built *bs[] = {&gfx942, &gfx90a};
  for (int i = 0; i < 2; i++)
    printf("  %s%s: %.1f ms (O3 %.1f, codegen obj+asm %.1f, link %.1f)\n", bs[i]->t->name,
           i == 0 ? " (cold)" : "", bs[i]->ms_total, bs[i]->out.ms_optimize,
           bs[i]->out.ms_codegen, bs[i]->out.ms_link);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kn_amdgpu_output_free(&gfx942.out);
  kn_amdgpu_output_free(&gfx90a.out);
  return 0;
}

/* ---- the target tables ---- */

/* the registry's AMDGPU entries: facts, and every instruction's lane tables covering its
 * operands exactly once over the 64 lanes */
static void test_targets(void **state) {
  (void)state;
  const kn_arch *a = kn_arch_get("gfx90a"), *c = kn_arch_get("gfx942"), *e = kn_arch_get("gfx950");
  assert_non_null(a);
  assert_non_null(c);
  assert_non_null(e);
  assert_null(kn_arch_get("gfx1100"));
  assert_ptr_equal(kn_arch_by_elf_mach(0x3f), a);
  assert_ptr_equal(kn_arch_by_elf_mach(0x4c), c);
  assert_ptr_equal(kn_arch_by_elf_mach(0x4f), e);
  for (int i = 0; i < 3; i++) {
    const kn_arch *t = i == 0 ? a : i == 1 ? c : e;
    assert_int_equal(t->isa, KN_ISA_AMDGPU);
    assert_string_equal(t->triple, "amdgcn-amd-amdhsa");
    assert_int_equal(t->lanes, 64);
    assert_int_equal(t->shared_bytes, i == 2 ? 163840 : 65536);
    assert_int_equal(t->amd->vgprs_per_lane, 512);
    assert_int_equal(t->amd->vgpr_granule, 8);
    assert_int_equal(t->amd->max_waves_per_simd, 8);
    const kn_mma_instr *f = find_mma(t, 32, 32, 8, KN_F16);
    assert_non_null(f);
    assert_string_equal(f->intrinsic, "llvm.amdgcn.mfma.f32.32x32x8f16");
    for (int k = 0; k < t->nmma; k++) {
      const kn_mma_instr *m = &t->mma[k];
      const kn_mma_shape *sh = kn_mma_shape_get(m->shape);
      assert_non_null(sh);
      assert_int_equal(sh->m, m->m);
      assert_int_equal(sh->n, m->n);
      assert_int_equal(sh->k, m->k);
      if (m->operands == KN_MMA_FMA) continue;
      assert_int_equal(m->m * m->k, 64 * sh->a_regs);
      assert_int_equal(m->k * m->n, 64 * sh->b_regs);
      assert_int_equal(m->m * m->n, 64 * sh->acc_regs);
      assert_true(m->cycles > 0 && m->cycles % 4 == 0);
    }
    assert_non_null(find_mma(t, 32, 32, 8, KN_BF16));
    assert_non_null(find_mma(t, 16, 16, 16, KN_F16));
    assert_non_null(find_mma(t, 16, 16, 16, KN_BF16));
  }
  assert_null(find_mma(a, 32, 32, 16, KN_F8E4M3FNUZ));
  assert_non_null(find_mma(c, 32, 32, 16, KN_F8E4M3FNUZ));
  assert_null(find_mma(c, 16, 16, 32, KN_F16));
  /* CDNA 4: the new f16 / bf16 shapes, fp8 in the OCP encoding */
  assert_non_null(find_mma(e, 16, 16, 32, KN_F16));
  assert_non_null(find_mma(e, 32, 32, 16, KN_BF16));
  assert_non_null(find_mma(e, 32, 32, 16, KN_F8E4M3));
  assert_null(find_mma(e, 32, 32, 16, KN_F8E4M3FNUZ));
  /* CDNA 3 runs the 16-bit MFMAs at twice CDNA 2's rate */
  assert_int_equal(find_mma(a, 32, 32, 8, KN_F16)->cycles, 64);
  assert_int_equal(find_mma(c, 32, 32, 8, KN_F16)->cycles, 32);
}

static void test_occupancy_formula(void **state) {
  (void)state;
  const kn_arch *t = kn_arch_get("gfx942");
  kn_amdgpu_occupancy o;
  /* Triton's gfx942 attention kernel: 256 VGPRs -> 2 waves per SIMD */
  o = kn_amdgpu_occupancy_of(t, 256, 0, 60, 0, 256);
  assert_int_equal(o.unified_vgprs, 256);
  assert_int_equal(o.waves, 2);
  /* LLVM's agpr-register-count test: 9 VGPRs + 32 AGPRs -> .vgpr_count align(9,4)+32 = 44,
   * allocated 48, 8 waves */
  o = kn_amdgpu_occupancy_of(t, 44, 32, 10, 0, 64);
  assert_int_equal(o.unified_vgprs, 48);
  assert_int_equal(o.waves, 8);
  o = kn_amdgpu_occupancy_of(t, 256, 128, 10, 0, 64);
  assert_int_equal(o.unified_vgprs, 256);
  assert_int_equal(o.by_vgpr, 2);
  o = kn_amdgpu_occupancy_of(t, 512, 256, 10, 0, 64);
  assert_int_equal(o.waves, 1);
  assert_int_equal(kn_amdgpu_occupancy_of(t, 512, 200, 10, 0, 64).waves, 0);  /* 312 arch */
  o = kn_amdgpu_occupancy_of(t, 96, 0, 10, 0, 64);
  assert_int_equal(o.by_vgpr, 5);
  o = kn_amdgpu_occupancy_of(t, 1, 0, 102, 0, 64);
  assert_int_equal(o.by_sgpr, 7);
  /* .sgpr_count includes VCC, FLAT_SCRATCH and XNACK_MASK: 106 still launches, 109 cannot */
  assert_int_equal(kn_amdgpu_occupancy_of(t, 217, 0, 106, 32768, 256).waves, 2);
  assert_int_equal(kn_amdgpu_occupancy_of(t, 1, 0, 109, 0, 64).waves, 0);
  /* 16 KiB of LDS, 256 work-items: 4 workgroups per CU, 16 waves over 4 SIMDs */
  o = kn_amdgpu_occupancy_of(t, 32, 0, 20, 16384, 256);
  assert_int_equal(o.by_lds, 4);
  assert_int_equal(o.waves, 4);
  /* more LDS than a CU has, or a workgroup that cannot be resident at once: cannot launch */
  assert_int_equal(kn_amdgpu_occupancy_of(t, 32, 0, 20, 65537, 256).waves, 0);
  assert_int_equal(kn_amdgpu_occupancy_of(t, 256, 0, 20, 0, 1024).waves, 0);
  assert_int_equal(kn_amdgpu_occupancy_of(t, 257, 0, 20, 0, 64).waves, 0);
}

/* ---- the compiled code objects ---- */

static int count_mnemonic_lines(const char *text, const char *prefix) {
  int n = 0;
  for (const char *l = text; l && *l;) {
    const char *s = l;
    while (*s == ' ' || *s == '\t') s++;
    if (!strncmp(s, prefix, strlen(prefix))) n++;
    const char *nl = strchr(l, '\n');
    l = nl ? nl + 1 : NULL;
  }
  return n;
}

static void check_built(const built *b, bool linked) {
  const void *bytes = linked ? b->out.code_object : b->out.obj;
  size_t n = linked ? b->out.code_object_size : b->out.obj_size;
  assert_non_null(bytes);
  kn_codeobj co;
  kn_diag d = {0};
  int rc = kn_codeobj_parse(bytes, n, &co, &d);
  if (rc) fprintf(stderr, "%s", d.rendered);
  assert_int_equal(rc, 0);

  char table[4096];
  kn_codeobj_format_stats(&co, table, sizeof table);
  printf("%s\n", table);

  const uint8_t *e = bytes;
  assert_int_equal(e[EI_OSABI], 64);                        /* ELFOSABI_AMDGPU_HSA */
  assert_int_equal(e[18] | e[19] << 8, EM_AMDGPU);          /* e_machine */
  assert_int_equal(co.elf_type, linked ? ET_DYN : ET_REL);
  assert_int_equal(co.abi_version, 3);                      /* code object v5 */
  assert_int_equal(co.code_object_version, 5);
  assert_int_equal(co.meta_version[0], 1);
  assert_int_equal(co.meta_version[1], 2);
  assert_ptr_equal(co.target, b->t);
  /* sramecc and xnack "any": no feature suffix in the target ID; e_flags say ANY for both */
  char want[64];
  snprintf(want, sizeof want, "amdgcn-amd-amdhsa--%s", b->t->name);
  assert_string_equal(co.target_id, want);
  assert_int_equal(co.e_flags & 0xf00, 0x500);              /* XNACK_ANY_V4 | SRAMECC_ANY_V4 */

  bool fp8 = !strcmp(b->t->name, "gfx942");
  assert_int_equal(co.nkernels, fp8 ? 3 : 2);
  const kn_codeobj_kernel *loop = kn_codeobj_find(&co, "mfma_loop");
  const kn_codeobj_kernel *hog = kn_codeobj_find(&co, "reg_hog");
  assert_non_null(loop);
  assert_non_null(hog);
  int total_mfma = 0;
  for (int k = 0; k < co.nkernels; k++) {
    const kn_codeobj_kernel *kn = &co.kernels[k];
    /* the attributor's work: only the explicit arguments, no hidden_* ones */
    assert_int_equal(kn->nhidden, 0);
    assert_int_equal(kn->kernarg_size, kn->explicit_arg_bytes);
    assert_int_equal(kn->wavefront_size, 64);
    assert_int_equal(kn->max_flat_workgroup_size, 256);
    assert_true(kn->code_size > 0);
    assert_true(kn->mfma_count > 0);
    assert_true(kn->ninstr > kn->mfma_count);
    assert_true(kn->occupancy.waves >= 1);
    char kd[160];
    snprintf(kd, sizeof kd, "%s.kd", kn->name);
    assert_string_equal(kn->symbol, kd);
    total_mfma += kn->mfma_count;
  }
  assert_int_equal(loop->kernarg_size, 28);
  assert_int_equal(loop->nargs, 4);
  assert_string_equal(loop->args[0].name, "out");
  assert_string_equal(loop->args[0].value_kind, "global_buffer");
  assert_string_equal(loop->args[3].value_kind, "by_value");
  assert_int_equal(hog->kernarg_size, 20);
  /* the whole LDS array, 16 KiB, and its occupancy limit: 4 workgroups of 4 waves per CU */
  assert_int_equal(loop->lds_bytes, 16384);
  assert_int_equal(loop->occupancy.by_lds, 4);
  assert_int_equal(loop->vgpr_spill_count, 0);
  assert_int_equal(loop->scratch_bytes, 0);
  /* 640 accumulator registers do not fit in 512: spills, scratch, one wave per SIMD */
  assert_true(hog->vgpr_spill_count > 0);
  /* (.vgpr_spill_count is not scratch dwords: LLVM 22 reports 448 spills in 1028 bytes here) */
  assert_true(hog->scratch_bytes > 0);
  assert_int_equal(hog->vgpr_count, 512);  /* the whole unified file: 256 VGPRs + 256 AGPRs */
  assert_int_equal(hog->agpr_count, 256);
  assert_true(hog->mfma_count >= NHOG);
  assert_int_equal(hog->occupancy.by_vgpr, 1);
  if (fp8) {
    const kn_codeobj_kernel *f8 = kn_codeobj_find(&co, "mfma_fp8");
    assert_non_null(f8);
    assert_int_equal(f8->kernarg_size, 20);
  }

  /* the same count three ways: the inspector, the assembly text, llvm-objdump */
  assert_int_equal(total_mfma, count_mnemonic_lines(b->out.asm_text, "v_mfma"));
  int od = test_objdump_count(b->t->name, bytes, n, "v_mfma");
  printf("%s %s: v_mfma inspector %d, assembly %d, llvm-objdump %d%s\n", b->t->name,
         linked ? "ET_DYN" : "ET_REL", total_mfma, count_mnemonic_lines(b->out.asm_text, "v_mfma"),
         od, od < 0 ? " (not installed)" : "");
  if (od >= 0) assert_int_equal(total_mfma, od);
  /* the mnemonics are the ones the table names for this target */
  const kn_mma_instr *f16 = find_mma(b->t, 32, 32, 8, KN_F16);
  char needle[80];
  snprintf(needle, sizeof needle, "\t%s ", f16->mnemonic);
  assert_non_null(strstr(b->out.asm_text, needle));
  if (fp8) {
    snprintf(needle, sizeof needle, "\t%s ",
             find_mma(b->t, 32, 32, 16, KN_F8E4M3FNUZ)->mnemonic);
    assert_non_null(strstr(b->out.asm_text, needle));
  }
  kn_codeobj_free(&co);
}

static void test_gfx942_code_object(void **state) {
  (void)state;
  check_built(&gfx942, true);
}

static void test_gfx90a_code_object(void **state) {
  (void)state;
  check_built(&gfx90a, true);
}

static void test_relocatable_object(void **state) {
  (void)state;
  check_built(&gfx942, false);
}

/* ---- failures come back as errors ---- */

static void test_compile_errors(void **state) {
  (void)state;
  const kn_arch *t = kn_arch_get("gfx942");
  LLVMContextRef ctx = LLVMContextCreate();
  kn_amdgpu_output out;
  kn_diag d;

  /* no kernel */
  LLVMModuleRef m = parse_ir(ctx, "define void @f() {\n  ret void\n}\n");
  assert_non_null(m);
  assert_int_equal(kn_amdgpu_compile(t, m, NULL, &out, &d), -1);
  assert_non_null(strstr(d.message, "no amdgpu_kernel"));
  assert_null(out.obj);
  LLVMDisposeModule(m);

  /* a module that asks for code object v6 is refused, not silently changed */
  m = parse_ir(ctx, "define amdgpu_kernel void @k() {\n  ret void\n}\n"
                    "!llvm.module.flags = !{!0}\n"
                    "!0 = !{i32 1, !\"amdhsa_code_object_version\", i32 600}\n");
  assert_non_null(m);
  assert_int_equal(kn_amdgpu_compile(t, m, NULL, &out, &d), -1);
  assert_non_null(strstr(d.message, "code object version"));
  LLVMDisposeModule(m);

  /* an intrinsic the target lacks (gfx90a has no fp8 MFMA): LLVM's selector would exit the
   * process, so kiln refuses it before codegen */
  char *ir = test_ir(true);
  m = parse_ir(ctx, ir);
  free(ir);
  assert_non_null(m);
  assert_int_equal(kn_amdgpu_compile(kn_arch_get("gfx90a"), m, NULL, &out, &d), -1);
  assert_non_null(strstr(d.message, "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8"));
  printf("gfx90a with an fp8 MFMA: %s\n", d.message);
  LLVMDisposeModule(m);

  /* an unknown pass pipeline */
  m = parse_ir(ctx, "define amdgpu_kernel void @k() {\n  ret void\n}\n");
  kn_amdgpu_options bad = {.passes = "no-such-pass"};
  assert_int_equal(kn_amdgpu_compile(t, m, &bad, &out, &d), -1);
  assert_non_null(strstr(d.message, "optimisation failed"));
  LLVMDisposeModule(m);
  LLVMContextDispose(ctx);
}

static void test_link_errors(void **state) {
  (void)state;
  void *out = NULL;
  size_t n = 0;
  char err[512];
  static const char junk[] = "this is not an object file";
  assert_int_equal(kn_amdgpu_link(junk, sizeof junk, &out, &n, err, sizeof err), -1);
  assert_null(out);
  assert_true(strlen(err) > 0);
  printf("lld on junk: %s\n", err);
  /* lld is usable again after a failed link */
  assert_int_equal(kn_amdgpu_link(gfx942.out.obj, gfx942.out.obj_size, &out, &n, err, sizeof err),
                   0);
  assert_int_equal(n, gfx942.out.code_object_size);
  assert_memory_equal(out, gfx942.out.code_object, n);  /* and deterministic */
  free(out);
}

/* The link never looks at PATH: put a fake ld.lld first on PATH that leaves a marker and fails;
 * the link must succeed and the marker must not exist.  (By construction lld_link.cpp calls
 * lld::lldMain in-process and never execs anything.) */
static void test_link_ignores_path(void **state) {
  (void)state;
  char dir[] = "/tmp/kiln-test-path-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char fake[128], marker[128], script[512];
  snprintf(fake, sizeof fake, "%s/ld.lld", dir);
  snprintf(marker, sizeof marker, "%s/ran", dir);
  snprintf(script, sizeof script, "#!/bin/sh\ntouch %s\nexit 1\n", marker);
  FILE *f = fopen(fake, "w");
  assert_non_null(f);
  fputs(script, f);
  fclose(f);
  chmod(fake, 0700);
  const char *old = getenv("PATH");
  char *saved = old ? strdup(old) : NULL;
  setenv("PATH", dir, 1);

  void *out = NULL;
  size_t n = 0;
  char err[512];
  int rc = kn_amdgpu_link(gfx90a.out.obj, gfx90a.out.obj_size, &out, &n, err, sizeof err);

  if (saved) setenv("PATH", saved, 1);
  else unsetenv("PATH");
  free(saved);
  assert_int_equal(rc, 0);
  assert_int_equal(access(marker, F_OK), -1);
  free(out);
  unlink(fake);
  rmdir(dir);
}

/* ---- corrupt code objects ---- */

static void expect_error_or_sane(const uint8_t *p, size_t n) {
  kn_codeobj co;
  kn_diag d = {0};
  if (kn_codeobj_parse(p, n, &co, &d) == 0) {
    /* a flip that happens to leave a valid file: the result must still be self-consistent */
    for (int k = 0; k < co.nkernels; k++)
      assert_true(co.kernels[k].code_offset + co.kernels[k].code_size <= n);
    char table[4096];
    kn_codeobj_format_stats(&co, table, sizeof table);
    kn_codeobj_free(&co);
  } else {
    assert_true(strlen(d.message) > 0);
  }
}

static void put32(uint8_t *p, uint32_t v) {
  for (int k = 0; k < 4; k++) p[k] = (uint8_t)(v >> (8 * k));
}

static void test_corrupt_code_objects(void **state) {
  (void)state;
  const uint8_t *orig = gfx942.out.code_object;
  size_t n = gfx942.out.code_object_size;
  uint8_t *buf = malloc(n);
  assert_non_null(buf);
  kn_codeobj co;
  kn_diag d;

  /* truncations: every length in the first 512 bytes, then a few hundred spread over the rest */
  int errors = 0;
  for (size_t len = 0; len < n; len += len < 512 ? 1 : n / 300 + 1) {
    uint8_t *t = malloc(len ? len : 1);  /* exactly len bytes: ASan sees any over-read */
    memcpy(t, orig, len);
    if (kn_codeobj_parse(t, len, &co, &d) == 0) kn_codeobj_free(&co);
    else errors++;
    free(t);
  }
  assert_true(errors > 500);
  /* the section headers are at the end: any truncation loses them */
  assert_int_equal(kn_codeobj_parse(orig, n - 1, &co, &d), -1);

  /* random byte flips (fixed seed) */
  srand(42);
  for (int it = 0; it < 1500; it++) {
    memcpy(buf, orig, n);
    int flips = 1 + rand() % 4;
    for (int k = 0; k < flips; k++) buf[(size_t)rand() % n] ^= (uint8_t)(1 + rand() % 255);
    expect_error_or_sane(buf, n);
  }

  /* hostile header fields */
  static const struct { size_t off; int bytes; uint64_t v; } fields[] = {
      {offsetof(Elf64_Ehdr, e_shoff), 8, ~0ull},
      {offsetof(Elf64_Ehdr, e_shoff), 8, 1ull << 62},
      {offsetof(Elf64_Ehdr, e_shnum), 2, 0xffff},
      {offsetof(Elf64_Ehdr, e_shnum), 2, 0},
      {offsetof(Elf64_Ehdr, e_shentsize), 2, 1},
      {offsetof(Elf64_Ehdr, e_machine), 2, EM_X86_64},
      {EI_CLASS, 1, ELFCLASS32},
      {EI_OSABI, 1, 0},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    memcpy(buf, orig, n);
    for (int k = 0; k < fields[i].bytes; k++) buf[fields[i].off + (size_t)k] = (uint8_t)(fields[i].v >> (8 * k));
    assert_int_equal(kn_codeobj_parse(buf, n, &co, &d), -1);
  }

  /* hostile note: find the note section's header and grow descsz; then every section's size */
  uint64_t shoff = 0;
  memcpy(&shoff, orig + offsetof(Elf64_Ehdr, e_shoff), 8);
  uint16_t shnum = 0;
  memcpy(&shnum, orig + offsetof(Elf64_Ehdr, e_shnum), 2);
  for (unsigned i = 0; i < shnum; i++) {
    Elf64_Shdr sh;
    memcpy(&sh, orig + shoff + i * sizeof sh, sizeof sh);
    if (sh.sh_type == SHT_NOTE) {
      memcpy(buf, orig, n);
      put32(buf + sh.sh_offset + 4, 0xfffffff0u);  /* descsz */
      assert_int_equal(kn_codeobj_parse(buf, n, &co, &d), -1);
      /* every byte of the MessagePack payload set to a map32/array32 header with a huge count */
      for (uint64_t b = sh.sh_offset + 20; b + 5 < sh.sh_offset + sh.sh_size; b += 7) {
        memcpy(buf, orig, n);
        buf[b] = (b & 1) ? 0xdf : 0xdd;
        put32(buf + b + 1, 0xffffffffu);
        expect_error_or_sane(buf, n);
      }
    }
    memcpy(buf, orig, n);
    Elf64_Shdr bad = sh;
    bad.sh_size = ~0ull - 7;
    memcpy(buf + shoff + i * sizeof sh, &bad, sizeof bad);
    expect_error_or_sane(buf, n);
  }
  free(buf);
}

static void test_msgpack(void **state) {
  (void)state;
  /* {"a": [1, -2, "xy"], "b": 3.5} */
  static const uint8_t ok[] = {0x82, 0xa1, 'a', 0x93, 0x01, 0xfe, 0xa2, 'x', 'y',
                               0xa1, 'b', 0xcb, 0x40, 0x0c, 0, 0, 0, 0, 0, 0};
  kn_mp r;
  kn_mp_obj o;
  kn_mp_init(&r, ok, sizeof ok);
  assert_true(kn_mp_read(&r, &o));
  assert_int_equal(o.type, KN_MP_MAP);
  assert_int_equal(o.len, 2);
  assert_true(kn_mp_read(&r, &o) && kn_mp_str_is(&o, "a"));
  assert_true(kn_mp_skip(&r));
  assert_true(kn_mp_read(&r, &o) && kn_mp_str_is(&o, "b"));
  assert_true(kn_mp_read(&r, &o));
  assert_int_equal(o.type, KN_MP_FLOAT);
  assert_true(o.f == 3.5);
  assert_false(kn_mp_read(&r, &o));  /* the end */

  static const uint8_t neg[] = {0xd1, 0xff, 0x38};  /* int16 -200 */
  kn_mp_init(&r, neg, sizeof neg);
  assert_true(kn_mp_read(&r, &o));
  assert_int_equal(o.type, KN_MP_INT);
  assert_int_equal(o.i, -200);

  /* every truncation of a valid buffer fails cleanly */
  for (size_t len = 0; len < sizeof ok; len++) {
    uint8_t *t = malloc(len ? len : 1);
    memcpy(t, ok, len);
    kn_mp_init(&r, t, len);
    assert_false(kn_mp_skip(&r));
    free(t);
  }
  /* huge counts and lengths, the reserved byte */
  static const uint8_t bad[][6] = {
      {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}, {0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01},
      {0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},  {0xc6, 0x00, 0x00, 0x10, 0x00, 0},
      {0xc1, 0, 0, 0, 0, 0},                {0x91, 0x91, 0x91, 0x91, 0x91, 0x91},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kn_mp_init(&r, bad[i], sizeof bad[i]);
    assert_false(kn_mp_skip(&r));
    assert_true(r.error);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_targets),
      cmocka_unit_test(test_occupancy_formula),
      cmocka_unit_test(test_msgpack),
      cmocka_unit_test(test_gfx942_code_object),
      cmocka_unit_test(test_gfx90a_code_object),
      cmocka_unit_test(test_relocatable_object),
      cmocka_unit_test(test_compile_errors),
      cmocka_unit_test(test_link_errors),
      cmocka_unit_test(test_link_ignores_path),
      cmocka_unit_test(test_corrupt_code_objects),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
