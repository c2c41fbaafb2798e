/* target_amdgpu.c — the gfx90a and gfx942 kn_targets, and kn_gpu_compile (tile IR -> code object).
 *
 * The kn_target functions follow compiler/target.h: lower = layout pass + shared-memory plan +
 * lower_gpu.c; machine = compiler/amdgpu's target machine; optimize = default<O3> with that
 * machine attached (triple, data layout, code object v5 pinned by kn_amdgpu_compile later);
 * load = codegen and the in-process lld link.  No AMD GPU is present on any machine kiln is
 * built on here, so `load` produces the code object and keeps it (entry stays NULL): running it
 * is the HIP runtime's business (or the emulated target's, docs/gpu.md).
 *
 * kn_gpu_compile does the whole path in one call for tests and tools: copy the module, fold,
 * inline, lay out, plan LDS, lower, then kn_amdgpu_compile (verify, v5, O3 with the target
 * machine, codegen, link).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Core.h>

#include "gpu.h"
#include "passes.h"

static const kn_loc tgt_loc = {"amdgpu", 0, 0};

static const kn_amdgpu_target *amd_of(const kn_target *t) { return kn_amdgpu_target_by_name(t->name); }

static void arch_of(const kn_amdgpu_target *a, kn_gpu_arch *out) {
  out->name = a->name;
  out->lanes = a->wave_size;
  out->lds_bytes = a->lds_bytes;
  out->amd = a;
  out->isa = KN_GPU_AMDGPU;
}

static int gpu_lower(const kn_target *t, kn_func *k, LLVMContextRef ctx, LLVMModuleRef *out,
                     kn_diag *d) {
  const kn_amdgpu_target *a = amd_of(t);
  if (!a) return kn_error(d, NULL, tgt_loc, "unknown AMDGPU target %s", t->name);
  kn_gpu_arch arch;
  arch_of(a, &arch);
  kn_layout_plan plan;
  int rc = kn_assign_layouts(k, &arch, &plan, d);
  if (!rc) rc = kn_plan_shared(&plan, d);
  if (!rc) rc = kn_lower_amdgpu(&plan, ctx, out, d);
  kn_layout_plan_free(&plan);
  return rc;
}

static LLVMTargetMachineRef gpu_machine(const kn_target *t, kn_diag *d) {
  const kn_amdgpu_target *a = amd_of(t);
  if (!a) {
    kn_error(d, NULL, tgt_loc, "unknown AMDGPU target %s", t->name);
    return NULL;
  }
  return kn_amdgpu_machine(a, NULL, d);
}

/* what `load` keeps: the code object */
typedef struct gpu_loaded {
  void *code_object;
  size_t size;
} gpu_loaded;

static int gpu_load(const kn_target *t, LLVMContextRef ctx, LLVMModuleRef mod,
                    const char *kernel_name, kn_loaded *out, kn_diag *d) {
  (void)kernel_name;
  memset(out, 0, sizeof *out);
  kn_amdgpu_options o = {.passes = "verify", .link = true};  /* already optimised */
  kn_amdgpu_output res;
  int rc = kn_amdgpu_compile(amd_of(t), mod, &o, &res, d);
  LLVMDisposeModule(mod);
  kn_llvm_context_forget(ctx);
  LLVMContextDispose(ctx);
  if (rc) return -1;
  gpu_loaded *l = calloc(1, sizeof *l);
  if (!l) {
    kn_amdgpu_output_free(&res);
    return kn_error(d, NULL, tgt_loc, "out of memory");
  }
  l->code_object = res.code_object;
  l->size = res.code_object_size;
  res.code_object = NULL;
  kn_amdgpu_output_free(&res);
  out->impl = l;
  return 0;
}

static void gpu_unload(const kn_target *t, kn_loaded *l) {
  (void)t;
  if (!l || !l->impl) return;
  gpu_loaded *g = l->impl;
  free(g->code_object);
  free(g);
  l->impl = NULL;
}

/* the matrix instructions the layout pass uses (kn_matrix_instr of target.h) */
static const kn_matrix_instr amd_matrix[] = {
    {"v_mfma_f32_32x32x8f16", 32, 32, 8, KN_F16, KN_F16, KN_F32, 64},
    {"v_mfma_f32_32x32x8bf16_1k", 32, 32, 8, KN_BF16, KN_BF16, KN_F32, 64},
    {"v_mfma_f32_16x16x16f16", 16, 16, 16, KN_F16, KN_F16, KN_F32, 64},
    {"v_mfma_f32_16x16x16bf16_1k", 16, 16, 16, KN_BF16, KN_BF16, KN_F32, 64},
};

#define GPU_TARGET(n)                                                                          \
  {.name = n, .triple = "amdgcn-amd-amdhsa", .cpu = n, .features = "", .pointer_bits = 64,     \
   .vector_bits = 128, .matrix = amd_matrix, .nmatrix = 4, .lower = gpu_lower,                 \
   .machine = gpu_machine, .optimize = kn_target_optimize_o3,                                  \
   .emit_asm = kn_target_emit_asm, .load = gpu_load, .unload = gpu_unload}

const kn_target kn_target_gfx90a = GPU_TARGET("gfx90a");
const kn_target kn_target_gfx942 = GPU_TARGET("gfx942");

const kn_target *kn_gpu_target_by_name(const char *name) {
  if (name && !strcmp(name, "gfx90a")) return &kn_target_gfx90a;
  if (name && !strcmp(name, "gfx942")) return &kn_target_gfx942;
  return kn_nvptx_target_by_name(name);  /* sm_80, sm_90a (target_nvptx.c) */
}

/* ---- one call: tile IR -> code object ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int kn_gpu_compile(const kn_module *src, const char *kernel, const char *arch_name, bool keep_llvm,
                   kn_gpu_compiled *out, kn_diag *d) {
  memset(out, 0, sizeof *out);
  const kn_amdgpu_target *a = kn_amdgpu_target_by_name(arch_name);
  if (!a) return kn_error(d, NULL, tgt_loc, "unknown AMDGPU target '%s'", arch_name ? arch_name : "");
  double t0 = now_ms();
  kn_module *m = kn_module_clone(src);
  int rc = -1;
  kn_layout_plan plan = {0};
  LLVMContextRef ctx = NULL;
  LLVMModuleRef mod = NULL;
  if (kn_verify(m, d)) goto done;
  kn_func *k = kn_module_find(m, kernel);
  if (!k || !k->is_kernel) {
    kn_error(d, m, tgt_loc, "no kernel named '@%s' in the module", kernel);
    goto done;
  }
  kn_fold(m);
  if (kn_inline(m, d)) goto done;
  kn_fold(m);
  kn_gpu_arch arch;
  arch_of(a, &arch);
  if (kn_assign_layouts(k, &arch, &plan, d)) goto done;
  if (kn_plan_shared(&plan, d)) goto done;
  out->layout_text = kn_layout_plan_format(&plan);
  out->lds_plan_bytes = plan.lds_bytes;
  kn_amdgpu_init();
  ctx = LLVMContextCreate();
  if (kn_lower_amdgpu(&plan, ctx, &mod, d)) goto done;
  if (keep_llvm) out->llvm_text = LLVMPrintModuleToString(mod);
  out->ms_lower = now_ms() - t0;
  kn_amdgpu_options o = {.link = true};
  kn_amdgpu_output res;
  if (kn_amdgpu_compile(a, mod, &o, &res, d)) goto done;
  out->code_object = res.code_object;
  out->code_object_size = res.code_object_size;
  out->ms_optimize = res.ms_optimize;
  out->ms_codegen = res.ms_codegen;
  out->ms_link = res.ms_link;
  res.code_object = NULL;
  kn_amdgpu_output_free(&res);
  rc = 0;
done:
  kn_layout_plan_free(&plan);
  if (mod) LLVMDisposeModule(mod);
  if (ctx) LLVMContextDispose(ctx);
  kn_module_free(m);
  if (rc) kn_gpu_compiled_free(out);
  return rc;
}

void kn_gpu_compiled_free(kn_gpu_compiled *c) {
  if (!c) return;
  free(c->code_object);
  free(c->layout_text);
  if (c->llvm_text) LLVMDisposeMessage(c->llvm_text);
  memset(c, 0, sizeof *c);
}
