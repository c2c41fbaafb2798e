/* test_comgr_meta.c — the kernels' metadata as ROCm's comgr reads it (runtime/comgr.c:
 * amd_comgr_get_data_metadata and the metadata node API) against kiln's own MessagePack reader
 * (compiler/amdgpu/codeobj.c): both fill one kn_codeobj, and for every kernel kiln builds for
 * gfx90a and gfx942 -- the forward (plain, causal, a variant, varlen), decode's two kernels, the
 * backward's three -- and a hand-written kernel that keeps its hidden arguments, the two readings
 * must agree field by field: every argument's name, value kind, address space, offset and size,
 * the hidden ones, the kernarg segment's size and alignment, LDS, scratch, the workgroup size,
 * registers.  The loader's choice (kn_comgr_codeobj_read) is checked too: comgr where it loads,
 * kiln's reader with KILN_COMGR_LIBRARY=none (test_comgr_meta_kiln) or on bytes kiln refuses.
 * Skips the comparison where libamd_comgr is absent.  The launches on each reading are
 * test_api_hip_fake (comgr's) and test_api_hip_fake_kiln_meta (kiln's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>

#include "amdgpu.h"
#include "attention.h"
#include "attn_bwd.h"
#include "attn_decode.h"
#include "codeobj.h"
#include "comgr.h"
#include "pipeline.h"
#include "target.h"

typedef struct object {
  char what[96];
  kn_artifact a;
  void *code; /* a.data, or a hand-written kernel's code object (malloc'd) */
  size_t n;
} object;

static object objs[64];
static int nobjs;

static void add_kernels(kn_module *m, const char *what, const char *target, int nk,
                        const char *const *names) {
  for (int i = 0; i < nk; i++) {
    object *o = &objs[nobjs++];
    kn_diag e;
    if (kn_compile_artifact(m, names[i], kn_target_get(target), NULL, &o->a, &e))
      fail_msg("%s %s %s: %s", target, what, names[i], e.message);
    assert_int_equal(o->a.kind, KN_ARTIFACT_CODE_OBJECT);
    o->code = o->a.data;
    o->n = o->a.size;
    snprintf(o->what, sizeof o->what, "%s %s %s", target, what, names[i]);
  }
}

static void add_fwd(const char *target, const char *what, kn_attn_desc d) {
  const kn_arch *arch = kn_arch_get(target);
  kn_attn_config c = kn_attn_default_config(arch, &d);
  kn_diag e;
  kn_module *m = kn_module_new("<attn>");
  if (!kn_attn_fwd_build(m, &d, &c, &e)) fail_msg("%s %s: %s", target, what, e.message);
  static const char *const names[] = {"attn_fwd"};
  add_kernels(m, what, target, 1, names);
  kn_module_free(m);
}

static void add_decode(const char *target, kn_attn_desc d) {
  kn_attn_config c = kn_attn_decode_default_config(kn_arch_get(target), &d);
  kn_diag e;
  kn_module *m = kn_module_new("<decode>");
  if (!kn_attn_decode_build(m, &d, &c, KN_DECODE_READ_ANY, &e) || !kn_attn_decode_combine_build(m, &d, &e))
    fail_msg("%s decode: %s", target, e.message);
  static const char *const names[] = {"attn_decode", "attn_decode_combine"};
  add_kernels(m, "decode", target, 2, names);
  kn_module_free(m);
}

static void add_bwd(const char *target, kn_attn_desc d) {
  kn_attn_config c = kn_attn_bwd_default_config(kn_arch_get(target), &d);
  kn_diag e;
  kn_module *m = kn_module_new("<bwd>");
  if (kn_attn_bwd_build(m, &d, &c, &e)) fail_msg("%s backward: %s", target, e.message);
  add_kernels(m, "backward", target, KN_BWD_NKERNELS, kn_attn_bwd_kernels);
  kn_module_free(m);
}

/* a kernel that reads its launch through the implicit argument pointer (block count, group
 * size, the dynamic LDS size): the attributor cannot trim the hidden arguments, so the
 * metadata lists them (kiln's own kernels have none).  v5: through kn_amdgpu_compile (which
 * pins code object v5); v4 (metadata 1.1, v4's hidden kinds): the module asks for it and is
 * only code-generated and linked, as llc and ld.lld would (kiln itself emits v5 only). */
static void add_hidden(const char *target, int version) {
  static const char ir[] =
      "define amdgpu_kernel void @hidden_args(ptr addrspace(1) %%out, i32 %%n) #0 {\n"
      "  %%ia = call ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()\n"
      "  %%bc = load i32, ptr addrspace(4) %%ia, align 4\n"
      "  %%gp = getelementptr i8, ptr addrspace(4) %%ia, i64 12\n"
      "  %%gs = load i16, ptr addrspace(4) %%gp, align 2\n"
      "  %%lp = getelementptr i8, ptr addrspace(4) %%ia, i64 120\n"
      "  %%ls = load i32, ptr addrspace(4) %%lp, align 4\n"
      "  %%g = zext i16 %%gs to i32\n"
      "  %%s1 = add i32 %%bc, %%g\n"
      "  %%s2 = add i32 %%s1, %%ls\n"
      "  %%s3 = add i32 %%s2, %%n\n"
      "  store i32 %%s3, ptr addrspace(1) %%out, align 4\n"
      "  ret void\n"
      "}\n"
      "declare ptr addrspace(4) @llvm.amdgcn.implicitarg.ptr()\n"
      "attributes #0 = { \"amdgpu-flat-work-group-size\"=\"1,128\" }\n"
      "%s";
  char text[2048];
  snprintf(text, sizeof text, ir, version == 4 ? "!llvm.module.flags = !{!0}\n"
           "!0 = !{i32 1, !\"amdhsa_code_object_version\", i32 400}\n" : "");
  const kn_arch *t = kn_arch_get(target);
  LLVMContextRef ctx = LLVMContextCreate();
  LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(text, strlen(text), "h.ll");
  LLVMModuleRef mod = NULL;
  char *msg = NULL;
  if (LLVMParseIRInContext(ctx, buf, &mod, &msg)) fail_msg("IR: %s", msg ? msg : "?");
  object *o = &objs[nobjs++];
  kn_diag d = {0};
  if (version == 5) {
    kn_amdgpu_options opt = {.link = true};
    kn_amdgpu_output out;
    if (kn_amdgpu_compile(t, mod, &opt, &out, &d)) fail_msg("%s", d.rendered);
    o->code = out.code_object;
    o->n = out.code_object_size;
    out.code_object = NULL;
    kn_amdgpu_output_free(&out);
  } else {
    LLVMSetTarget(mod, "amdgcn-amd-amdhsa");
    LLVMTargetMachineRef tm = kn_amdgpu_machine(t, "", &d);
    void *obj;
    size_t on;
    char err[512];
    if (!tm || kn_amdgpu_emit(mod, tm, false, &obj, &on, &d)) fail_msg("%s", d.message);
    if (kn_amdgpu_link(obj, on, &o->code, &o->n, err, sizeof err)) fail_msg("link: %s", err);
    free(obj);
    LLVMDisposeTargetMachine(tm);
    assert_int_equal(((uint8_t *)o->code)[8], 2); /* EI_ABIVERSION 2: v4 */
  }
  LLVMDisposeModule(mod);
  LLVMContextDispose(ctx);
  snprintf(o->what, sizeof o->what, "%s hand-written hidden_args v%d", target, version);
}

static int setup(void **state) {
  (void)state;
  static const char *const targets[] = {"gfx90a", "gfx942"};
  for (int t = 0; t < 2; t++) {
    const char *tg = targets[t];
    add_fwd(tg, "f16 D64", (kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .has_lse = true});
    add_fwd(tg, "bf16 D128 causal", (kn_attn_desc){.dtype = KN_BF16, .head_dim = 128,
                                                    .causal = 1, .has_lse = true});
    add_fwd(tg, "f16 D64 window+softcap+alibi",
            (kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .causal = 1, .window = true,
                           .softcap = true, .alibi = true});
    add_fwd(tg, "f16 D64 varlen", (kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .causal = 1,
                                                 .has_lse = true, .layout = KN_ATTN_VARLEN});
    add_decode(tg, (kn_attn_desc){.dtype = KN_F16, .head_dim = 128, .has_lse = true});
    add_bwd(tg, (kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .causal = 1, .has_lse = true});
    add_hidden(tg, 5);
    add_hidden(tg, 4);
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < nobjs; i++) {
    if (objs[i].a.data) kn_artifact_free(&objs[i].a);
    else free(objs[i].code);
  }
  return 0;
}

#define SAME_INT(lbl, f)                                                                    \
  do {                                                                                       \
    if ((long long)a->f != (long long)b->f)                                                  \
      fail_msg("%s: %s %s: kiln %lld, comgr %lld", o->what, lbl, #f, (long long)a->f,      \
               (long long)b->f);                                                             \
  } while (0)
#define SAME_STR(lbl, f)                                                                    \
  do {                                                                                       \
    if (strcmp(a->f, b->f))                                                                  \
      fail_msg("%s: %s %s: kiln '%s', comgr '%s'", o->what, lbl, #f, a->f, b->f);          \
  } while (0)

/* every field of the two readings of object o */
static void same_codeobj(const object *o, const kn_codeobj *ca, const kn_codeobj *cb) {
  {
    const kn_codeobj *a = ca, *b = cb;
    SAME_STR("object", target_id);
    SAME_INT("object", meta_version[0]);
    SAME_INT("object", meta_version[1]);
    SAME_INT("object", nkernels);
    SAME_INT("object", e_flags);
    SAME_INT("object", code_object_version);
  }
  for (int k = 0; k < ca->nkernels; k++) {
    const kn_codeobj_kernel *a = &ca->kernels[k], *b = &cb->kernels[k];
    const char *w = a->name;
    SAME_STR(w, name);
    SAME_STR(w, symbol);
    SAME_INT(w, vgpr_count);
    SAME_INT(w, agpr_count);
    SAME_INT(w, sgpr_count);
    SAME_INT(w, vgpr_spill_count);
    SAME_INT(w, sgpr_spill_count);
    SAME_INT(w, lds_bytes);
    SAME_INT(w, scratch_bytes);
    SAME_INT(w, kernarg_size);
    SAME_INT(w, kernarg_align);
    SAME_INT(w, explicit_arg_bytes);
    SAME_INT(w, wavefront_size);
    SAME_INT(w, max_flat_workgroup_size);
    SAME_INT(w, uniform_work_group_size);
    SAME_INT(w, uses_dynamic_stack);
    SAME_INT(w, nargs);
    SAME_INT(w, nhidden);
    SAME_INT(w, code_size);
    SAME_INT(w, code_offset);
    SAME_INT(w, occupancy.waves);
    const kn_codeobj_kernel *ka = a;
    for (int i = 0; i < ka->nargs; i++) {
      const kn_codeobj_arg *a = &ka->args[i], *b = &cb->kernels[k].args[i];
      char wa[200];
      snprintf(wa, sizeof wa, "%s argument %d", w, i);
      SAME_STR(wa, name);
      SAME_STR(wa, value_kind);
      SAME_STR(wa, address_space);
      SAME_INT(wa, offset);
      SAME_INT(wa, size);
      SAME_INT(wa, hidden);
    }
  }
}

/* what the metadata must say whoever read it: arguments inside the segment, naturally aligned
 * (sizes 1..8) and not overlapping, the segment's alignment a power of two its size is a
 * multiple of, the workgroup size what kiln launches */
static void sane(const object *o, const kn_codeobj *co) {
  assert_int_equal(co->nkernels, 1);
  const kn_codeobj_kernel *k = &co->kernels[0];
  assert_true(k->kernarg_align >= 4 && !(k->kernarg_align & (k->kernarg_align - 1)));
  assert_int_equal(k->kernarg_size % k->kernarg_align, 0);
  assert_true(k->max_flat_workgroup_size >= 64 && k->max_flat_workgroup_size <= 1024);
  assert_int_equal(k->wavefront_size, 64);
  uint32_t end = 0;
  for (int i = 0; i < k->nargs; i++) {
    const kn_codeobj_arg *a = &k->args[i];
    uint32_t al = a->size >= 8 ? 8 : a->size;
    if (a->offset < end || a->offset % al || a->offset + a->size > k->kernarg_size)
      fail_msg("%s: argument %d (%s %s) at %u+%u (previous end %u, segment %u)", o->what, i,
               a->value_kind, a->name, a->offset, a->size, end, k->kernarg_size);
    end = a->offset + a->size;
  }
  if (strstr(o->what, "hidden_args")) {
    assert_true(k->nhidden >= 3); /* v5: block count, group size, dynamic LDS size at least */
    assert_int_equal(k->nargs - k->nhidden, 2);
    assert_int_equal(k->explicit_arg_bytes, 12);
  } else {
    assert_int_equal(k->nhidden, 0); /* (the attributor's work: docs/amdgpu.md) */
  }
}

static void test_readers_agree(void **state) {
  (void)state;
  bool have = kn_comgr_library()[0] != 0;
  int compared = 0;
  for (int i = 0; i < nobjs; i++) {
    const object *o = &objs[i];
    kn_codeobj own, cg;
    kn_diag e, why;
    if (kn_codeobj_read(o->code, o->n, &own, &e)) fail_msg("%s: %s", o->what, e.message);
    assert_string_equal(own.meta_reader, "kiln");
    sane(o, &own);
    /* the loader's choice */
    if (kn_comgr_codeobj_read(o->code, o->n, &cg, &why, &e)) fail_msg("%s: %s", o->what, e.message);
    assert_string_equal(cg.meta_reader, have ? "comgr" : "kiln");
    if (!have) assert_true(why.message[0]);
    same_codeobj(o, &own, &cg);
    kn_codeobj_free(&cg);
    if (have) {
      /* comgr's reading as such; then on the same object with the header's EI_ABIVERSION made
       * code object v4 (2) and v6 (4): comgr 5.2.3 reads the note whatever the version says */
      if (kn_codeobj_read_with(o->code, o->n, &cg, kn_comgr_meta_reader, NULL, &e))
        fail_msg("%s: %s", o->what, e.message);
      assert_string_equal(cg.meta_reader, "comgr");
      sane(o, &cg);
      same_codeobj(o, &own, &cg);
      kn_codeobj_free(&cg);
      uint8_t *copy = malloc(o->n);
      memcpy(copy, o->code, o->n);
      for (int v = 2; v <= 4; v += 2) {
        copy[8] = (uint8_t)v;
        kn_codeobj kv;
        if (kn_codeobj_read_with(copy, o->n, &cg, kn_comgr_meta_reader, NULL, &e))
          fail_msg("%s as abi %d: %s", o->what, v, e.message);
        assert_int_equal(kn_codeobj_read(copy, o->n, &kv, &e), 0);
        same_codeobj(o, &kv, &cg);
        kn_codeobj_free(&kv);
        kn_codeobj_free(&cg);
      }
      free(copy);
      compared++;
    }
    if (have && strstr(o->what, " v4")) {
      /* comgr's ISA name: code object v4 only, and only for chips it knows (5.2.3: gfx90a, not
       * gfx942); kiln's v5 objects it cannot name at all (test_target_id) */
      char isa[128];
      bool named = kn_comgr_isa_name(o->code, o->n, isa, sizeof isa, &why);
      printf("  comgr's ISA name of %s: %s\n", o->what, named ? isa : why.message);
      if (!strncmp(o->what, "gfx90a", 6)) assert_true(named);
    }
    const kn_codeobj_kernel *k = &own.kernels[0];
    printf("  %-40s %2d args (%d hidden), kernarg %u/%u, LDS %u, wg %d: %s\n", o->what,
           k->nargs, k->nhidden, k->kernarg_size, k->kernarg_align, k->lds_bytes,
           k->max_flat_workgroup_size, have ? "kiln == comgr" : "kiln only");
    kn_codeobj_free(&own);
  }
  if (!have) {
    kn_diag why;
    kn_codeobj cg;
    kn_comgr_codeobj_read(objs[0].code, objs[0].n, &cg, &why, &why);
    kn_codeobj_free(&cg);
    printf("  (comgr: %s)\n", why.message);
    skip();
  }
  printf("  %d code objects read alike by kiln and %s\n", compared, kn_comgr_library());
}

/* bytes kiln refuses never reach comgr; a corrupt note is kiln's error, as it was */
static void test_refused(void **state) {
  (void)state;
  kn_codeobj co;
  kn_diag why, e;
  static const char junk[64] = "not an ELF";
  assert_int_equal(kn_comgr_codeobj_read(junk, sizeof junk, &co, &why, &e), -1);
  assert_non_null(strstr(e.message, "not an ELF"));
  /* a truncated object */
  assert_int_equal(kn_comgr_codeobj_read(objs[0].code, objs[0].n / 2, &co, &why, &e), -1);
  assert_true(e.message[0]);
  /* comgr's reader alone on junk: a clear error, never a crash */
  if (kn_comgr_library()[0]) {
    memset(&co, 0, sizeof co);
    assert_int_equal(kn_comgr_meta_reader(NULL, junk, sizeof junk, NULL, 0, &co, &e), -1);
    kn_codeobj_free(&co);
    printf("  comgr on junk: %s\n", e.message);
    assert_true(e.message[0]);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_readers_agree),
      cmocka_unit_test(test_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
