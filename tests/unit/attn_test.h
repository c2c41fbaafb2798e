/* attn_test.h — what the variant and varlen tests do alike with a built attention kernel:
 * random inputs, running it on a target by name (the interpreter, the host, an emulated AMD
 * target), and counting the spills of its compiled code as they bound them (an AMDGPU code
 * object's VGPR spills plus scratch bytes, from kiln's inspector; NVIDIA PTX's spill store and
 * load bytes, from ptxas).
 * Header-only, included by one test file each. */
#ifndef KILN_TEST_ATTN_TEST_H
#define KILN_TEST_ATTN_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "amdgpu.h"
#include "emu.h"
#include "interp.h"
#include "pipeline.h"
#include "ptxas.h"
#include "target.h"

/* random inputs (splitmix64 from seed0, which the test prints so a failure can be replayed) and
 * KILN_TEST_VERBOSE */
static uint64_t seed0, rng;

static uint64_t next(void) {
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double unif(double lo, double hi) { return lo + (hi - lo) * (double)(next() >> 11) * 0x1p-53; }
static int irand(int lo, int hi) { return lo + (int)(next() % (uint64_t)(hi - lo + 1)); }

static bool verbose(void) {
  const char *e = getenv("KILN_TEST_VERBOSE");
  return e && *e && strcmp(e, "0");
}

/* kernel f of module m on target (NULL: the interpreter, whose op counts go to *st when st is
 * not NULL); compile failures are cmocka failures naming `what`; 0 or -1 with *diag */
static int run_on_target(const char *target, kn_module *m, kn_func *f, const kn_argval *args,
                         const int grid[3], const kn_region *regions, int nreg,
                         kn_interp_stats *st, const char *what, kn_diag *diag) {
  if (!target) return kn_interp_run(f, args, grid, regions, nreg, st, diag);
  const kn_target *t = strstr(target, "-emu") ? kn_emu_target(target) : kn_target_get(target);
  assert_non_null(t);
  kn_kernel *kern = NULL;
  if (kn_compile(m, f->name, t, NULL, &kern, diag))  /* attn_fwd, or another kernel */
    fail_msg("%s on %s: compile: %s", what, target, diag->rendered);
  int rc;
  if (strstr(target, "-emu")) {
    kn_emu_options opt = {0};
    rc = kn_emu_run(kern, args, grid, regions, nreg, &opt, diag);
  } else {
    rc = kn_kernel_run_host(kern, args, grid, diag);
  }
  kn_kernel_free(kern);
  return rc;
}

/* the spill units of kernel `name` in artefact a, compiled for arch (cmocka failure if the
 * artefact cannot be read) */
static int artifact_spills(const kn_artifact *a, const kn_arch *arch, const char *name) {
  kn_diag d;
  int spills = 0;
  if (a->kind == KN_ARTIFACT_CODE_OBJECT) {
    kn_codeobj co;
    if (kn_codeobj_parse(a->data, a->size, &co, &d)) fail_msg("code object: %s", d.message);
    const kn_codeobj_kernel *k = kn_codeobj_find(&co, name);
    assert_non_null(k);
    spills = k->vgpr_spill_count + (int)k->scratch_bytes;
    kn_codeobj_free(&co);
  } else {
    kn_ptxas_options po = {.arch = arch->name};  /* the default: -O3, as the driver JITs PTX */
    kn_ptxas_result r;
    if (kn_ptxas_run(a->data, a->size, &po, &r, &d)) fail_msg("ptxas: %s", d.message);
    const kn_ptxas_kernel *k = kn_ptxas_find_kernel(&r, name);
    assert_non_null(k);
    spills = k->spill_stores + k->spill_loads;
    kn_ptxas_result_free(&r);
  }
  return spills;
}

#endif
