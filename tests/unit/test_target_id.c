/* test_target_id.c — the target ID rule (runtime/comgr.h) a code object must meet to load on a
 * HIP device, kiln's own reading of a code object's target ID from its ELF header, and ROCm's
 * comgr where it is installed (Debian's libamd-comgr2: it knows gfx90a, not gfx942).
 * The HIP stand-in's tests (test_api_hip_fake, as "gfx942:sramecc+:xnack-") load kiln's code
 * objects through the same check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "codeobj.h"
#include "comgr.h"
#include "pipeline.h"
#include "target.h"

static void ok(const char *code, const char *dev) {
  kn_diag e;
  if (kn_target_id_check(code, dev, &e) != KN_OK) fail_msg("%s on %s: %s", code, dev, e.message);
}

static void refused(const char *code, const char *dev, const char *why) {
  kn_diag e;
  assert_int_equal(kn_target_id_check(code, dev, &e), KN_E_UNSUPPORTED);
  if (!strstr(e.message, why)) fail_msg("%s on %s: '%s' lacks '%s'", code, dev, e.message, why);
}

static void test_rule(void **state) {
  (void)state;
  ok("amdgcn-amd-amdhsa--gfx942", "gfx942:sramecc+:xnack-");   /* features unset: any */
  ok("amdgcn-amd-amdhsa--gfx942:xnack-", "gfx942:sramecc+:xnack-");
  ok("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-");
  ok("amdgcn-amd-amdhsa--gfx90a:xnack+", "gfx90a");             /* the device names none */
  ok("gfx90a", "gfx90a:sramecc-:xnack-");
  refused("amdgcn-amd-amdhsa--gfx942:xnack+", "gfx942:sramecc+:xnack-", "needs xnack+");
  refused("amdgcn-amd-amdhsa--gfx90a:sramecc+", "gfx90a:sramecc-:xnack-", "needs sramecc+");
  refused("amdgcn-amd-amdhsa--gfx90a", "gfx942:sramecc+:xnack-", "is for gfx90a");
  refused("amdgcn-amd-amdhsa--gfx94", "gfx942", "is for gfx94");  /* a prefix is not the chip */
}

/* a small attention kernel's code object for an AMD target */
static kn_artifact code_object(const char *target) {
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 64, .causal = true};
  kn_attn_config c = {.block_m = 64, .block_n = 32, .warps = 4, .stages = 2};
  kn_diag e;
  kn_module *m = kn_module_new("<attn>");
  assert_non_null(kn_attn_fwd_build(m, &d, &c, &e));
  kn_artifact a;
  if (kn_compile_artifact(m, "attn_fwd", kn_target_get(target), NULL, &a, &e))
    fail_msg("%s: %s", target, e.message);
  kn_module_free(m);
  assert_int_equal(a.kind, KN_ARTIFACT_CODE_OBJECT);
  return a;
}

static void test_own_reader(void **state) {
  (void)state;
  kn_artifact a = code_object("gfx942");
  kn_codeobj co;
  kn_diag e;
  assert_int_equal(kn_codeobj_read(a.data, a.size, &co, &e), 0);
  char id[128];
  kn_codeobj_target_id(&co, id, sizeof id);
  printf("  kiln's gfx942 code object: %s (e_flags 0x%x)\n", id, co.e_flags);
  assert_string_equal(id, "amdgcn-amd-amdhsa--gfx942"); /* kiln sets no xnack / sramecc */
  ok(id, "gfx942:sramecc+:xnack-");
  /* the same object with xnack on in its header: refused on an xnack- device */
  co.e_flags = (co.e_flags & ~0x300u) | 0x300u;
  kn_codeobj_target_id(&co, id, sizeof id);
  assert_string_equal(id, "amdgcn-amd-amdhsa--gfx942:xnack+");
  refused(id, "gfx942:sramecc+:xnack-", "needs xnack+");
  co.e_flags = (co.e_flags & ~0xf00u) | 0x800u | 0x200u;
  kn_codeobj_target_id(&co, id, sizeof id);
  assert_string_equal(id, "amdgcn-amd-amdhsa--gfx942:sramecc-:xnack-");
  kn_codeobj_free(&co);
  kn_artifact_free(&a);
}

static void test_comgr(void **state) {
  (void)state;
  kn_artifact a = code_object("gfx90a");
  char isa[128];
  kn_diag why;
  if (!kn_comgr_library()[0]) {
    kn_comgr_isa_name(a.data, a.size, isa, sizeof isa, &why);
    printf("  (%s: kiln's reader serves)\n", why.message);
    kn_artifact_free(&a);
    skip();
  }
  if (!kn_comgr_isa_name(a.data, a.size, isa, sizeof isa, &why)) {
    /* ROCm 5's comgr reads ISA names of code object v4 at most; kiln's are v5 (EI_ABIVERSION
     * 3).  The loader then uses kiln's reader; the call itself is checked on a v4 header. */
    printf("  comgr (%s) on kiln's v5 code object: %s\n", kn_comgr_library(), why.message);
    ((unsigned char *)a.data)[8] = 2;
    if (!kn_comgr_isa_name(a.data, a.size, isa, sizeof isa, &why)) fail_msg("%s", why.message);
  }
  printf("  comgr (%s) on kiln's gfx90a code object: %s\n", kn_comgr_library(), isa);
  assert_non_null(strstr(isa, "amdgcn-amd-amdhsa--gfx90a"));
  ok(isa, "gfx90a:sramecc-:xnack-");
  kn_artifact_free(&a);
  /* bytes that are no code object: comgr refuses, the loader would use kiln's reader (which
   * refuses them too) */
  static const char junk[64] = "not an ELF";
  assert_false(kn_comgr_isa_name(junk, sizeof junk, isa, sizeof isa, &why));
  assert_true(why.message[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule),
      cmocka_unit_test(test_own_reader),
      cmocka_unit_test(test_comgr),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
