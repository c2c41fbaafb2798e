/* attn_test.h — what the variant and varlen tests do alike with a built attention kernel:
 * random inputs, running it on a target by name (the interpreter, the host, an emulated AMD
 * target), running the split-KV decode kernels (split, then combine, through a NaN-filled
 * workspace; test_decode and test_fp8), and counting the spills of its compiled code as they bound them (an AMDGPU code
 * object's VGPR spills plus scratch bytes, from kiln's inspector; NVIDIA PTX's spill store and
 * load bytes, from ptxas).
 * Header-only, included by one test file each. */
#ifndef KILN_TEST_ATTN_TEST_H
#define KILN_TEST_ATTN_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "amdgpu.h"
#include "attn_decode.h"
#include "attn_internal.h"
#include "emu.h"
#include "interp.h"
#include "pipeline.h"
#include "ptxas.h"
#include "reduced.h"
#include "target.h"
#include "test_mods.h"

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

/* seeds the random inputs from KILN_TEST_SEED, else the time, and prints how to replay them */
static inline void seed_from_env(const char *who) {
  const char *e = getenv("KILN_TEST_SEED");
  seed0 = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL);
  rng = seed0;
  printf("[ %s ] seed %llu (KILN_TEST_SEED replays)\n", who, (unsigned long long)seed0);
}

static bool verbose(void) {
  const char *e = getenv("KILN_TEST_VERBOSE");
  return e && *e && strcmp(e, "0");
}

/* The variants the layout tests (test_decode, test_paged, test_varlen) sweep, over base: the
 * seven every layout serves (plain, causal both ways, a window with and without causal, softcap,
 * ALiBi), then those `extra` names, in its order (NULL-terminated: "prefix", "document",
 * "bias+causal", "user-mask(chunks)" a user mask with its block predicate, "head-temp" a user
 * score modifier reading a per-head tensor %temp), then no-lse (causal).  out has room for 16;
 * returns the count. */
typedef struct test_variant {
  const char *name;
  kn_attn_desc desc;
} test_variant;

static inline int test_variant_list(kn_attn_desc base, const char *const *extra,
                                    test_variant *out) {
  int n = 0;
#define TV(nm_, ...)                                    \
  do {                                                  \
    out[n] = (test_variant){.name = nm_, .desc = base}; \
    kn_attn_desc *d_ = &out[n].desc;                    \
    __VA_ARGS__;                                        \
    (void)d_;                                           \
    n++;                                                \
  } while (0)
  TV("plain");
  TV("causal", d_->causal = KN_CAUSAL_BOTTOM_RIGHT);
  TV("causal-top-left", d_->causal = KN_CAUSAL_TOP_LEFT);
  TV("window+causal", d_->window = true; d_->causal = KN_CAUSAL_BOTTOM_RIGHT);
  TV("window", d_->window = true);
  TV("softcap+causal", d_->softcap = true; d_->causal = KN_CAUSAL_BOTTOM_RIGHT);
  TV("alibi+causal", d_->alibi = true; d_->causal = KN_CAUSAL_BOTTOM_RIGHT);
  for (int i = 0; extra && extra[i]; i++) {
    const char *e = extra[i];
    if (!strcmp(e, "prefix")) TV("prefix", d_->prefix = true);
    else if (!strcmp(e, "document")) TV("document", d_->document = true);
    else if (!strcmp(e, "bias+causal"))
      TV("bias+causal", d_->bias = true; d_->causal = KN_CAUSAL_BOTTOM_RIGHT);
    else if (!strcmp(e, "user-mask(chunks)"))
      TV("user-mask(chunks)", d_->mods = TEST_CHUNK_MASK_MOD; d_->mods_file = "chunk.tile");
    else if (!strcmp(e, "head-temp"))
      TV("head-temp", d_->mods = TEST_HEAD_TEMP_SCORE_MOD; d_->mods_file = "temp.tile");
    else
      fail_msg("test_variant_list: no variant '%s'", e);
  }
  TV("no-lse", d_->has_lse = false; d_->causal = KN_CAUSAL_BOTTOM_RIGHT);
#undef TV
  return n;
}

/* the registry's target of a test's target name: the emulated "-emu" ones or the compile
 * targets; NULL for NULL (the interpreter) */
static inline const kn_target *target_named(const char *target) {
  return !target ? NULL : strstr(target, "-emu") ? kn_emu_target(target) : kn_target_get(target);
}

/* kernel `name` of module m on target (NULL: the interpreter, whose op counts go to *st when st
 * is not NULL); compile failures are cmocka failures naming `what`; 0 or -1 with *diag */
static inline int run_named_on_target(const char *target, kn_module *m, const char *name,
                                      const kn_argval *args, const int grid[3],
                                      const kn_region *regions, int nreg, kn_interp_stats *st,
                                      const char *what, kn_diag *diag) {
  if (!target) return kn_interp_run(kn_module_find(m, name), args, grid, regions, nreg, st, diag);
  const kn_target *t = target_named(target);
  assert_non_null(t);
  kn_kernel *kern = NULL;
  if (kn_compile(m, name, t, NULL, &kern, diag))
    fail_msg("%s on %s: compile %s: %s", what, target, name, diag->rendered);
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

/* kernel f of m (attn_fwd, or another kernel) on target, as run_named_on_target */
static inline int run_on_target(const char *target, kn_module *m, kn_func *f,
                                const kn_argval *args, const int grid[3],
                                const kn_region *regions, int nreg, kn_interp_stats *st,
                                const char *what, kn_diag *diag) {
  if (!target) return kn_interp_run(f, args, grid, regions, nreg, st, diag);
  return run_named_on_target(target, m, f->name, args, grid, regions, nreg, st, what, diag);
}

/* the registry entry and compile target of architecture `name` for a code test: false, with a
 * line saying so, when it is an NVIDIA one and ptxas (which counts the spills) is not found */
static inline bool code_target(const char *name, const kn_arch **arch, const kn_target **t) {
  *arch = kn_arch_get(name);
  assert_non_null(*arch);
  char ptxas[512];
  kn_diag pd;
  if ((*arch)->isa == KN_ISA_NVPTX && kn_ptxas_find(ptxas, sizeof ptxas, &pd) != KN_OK) {
    printf("  %s: ptxas not found, skipped\n", name);
    return false;
  }
  *t = kn_target_get(name);
  return true;
}

/* The split-KV decode kernels of d at tiling cfg (templates/attn_decode.c) on target (NULL: the
 * interpreter) for problem p with the variant's values va: both kernels built, `splits` pieces
 * planned (0: the heuristic's for 4 compute units), the split kernel run, then the combine, over
 * a workspace that starts as NaN (a slot the combine reads and the split kernel did not write
 * shows in o).  io[0..4] are q, k, v, o and lse as the caller allocated them (every access is
 * checked against them on the interpreter and the emulators).  Failures are cmocka failures
 * naming `what`; returns the plan's piece count. */
/* the read mode of the split kernel run_decode_on_target built last, and whether its paged
 * calls alternate the runtime's pick with the versioned kernel (1) or always take the pick (0) */
static kn_decode_read test_decode_read_last = KN_DECODE_READ_ANY;
static int test_decode_alternate = 1;

static inline int run_decode_on_target(const char *target, const kn_attn_desc *d,
                                       const kn_attn_config *cfg, const kn_attn_problem *p,
                                       const kn_attn_vargs *va, int splits, const kn_region io[5],
                                       const char *what) {
  kn_decode_plan plan = kn_attn_decode_plan(d, cfg, p, 4, splits);
  float *ws_o = malloc(plan.ws_o_bytes + 16), *ws_lse = malloc(plan.ws_lse_bytes + 16);
  assert_true(ws_o && ws_lse);
  for (size_t i = 0; i < plan.ws_o_bytes / 4; i++) ws_o[i] = NAN;
  for (size_t i = 0; i < plan.ws_lse_bytes / 4; i++) ws_lse[i] = NAN;
  kn_diag diag;
  kn_module *ms = kn_module_new("<decode>"), *mc = kn_module_new("<combine>");
  /* paged: every other call (every call without test_decode_alternate) the kernel of the read
   * mode the runtime picks for this page size (kn_attn_decode_read_for: in-page where BLOCK_N
   * divides it, pages where 16 does, else gather; here at one tiling), the others the
   * versioned kernel with both loops (the CLI's): both kinds run on every target's cases */
  static int calls;
  kn_decode_read read = KN_DECODE_READ_ANY;
  if (d->layout == KN_ATTN_PAGED && (!test_decode_alternate || calls++ % 2))
    read = kn_attn_decode_read_for(p->page_size, cfg->block_n, cfg->block_n);
  test_decode_read_last = read;
  kn_func *fs = kn_attn_decode_build(ms, d, cfg, read, &diag);
  if (!fs) fail_msg("%s: build: %s", what, diag.rendered);
  kn_func *fc = kn_attn_decode_combine_build(mc, d, &diag);
  if (!fc) fail_msg("%s: combine build: %s", what, diag.rendered);
  kn_attn_sig sig;
  if (kn_attn_signature(d, &sig, &diag)) fail_msg("%s: signature: %s", what, diag.message);
  assert_int_equal(kn_func_nparams(fs), sig.n + KN_DECODE_NPARAMS);
  kn_argval sa[KN_ATTN_MAX_PARAMS + KN_DECODE_NPARAMS], ca[KN_DECODE_COMBINE_NPARAMS];
  int sg[3], cg[3];
  if (kn_attn_decode_fill_args(d, &sig, cfg, p, &plan, io[0].data, io[1].data, io[2].data,
                               io[3].data, io[4].data, ws_o, ws_lse, va, sa, sg, ca, cg, &diag))
    fail_msg("%s: args: %s", what, diag.message);
  kn_region regions[KN_ATTN_MAX_PARAMS + 8];
  memcpy(regions, io, sizeof *io * 5);
  regions[5] = (kn_region){ws_o, plan.ws_o_bytes};
  regions[6] = (kn_region){ws_lse, plan.ws_lse_bytes};
  int nreg = 7;
  kn_argval scratch[KN_ATTN_MAX_PARAMS];
  memcpy(scratch, sa, sizeof scratch);
  int n = kn_attn_fill_vargs(d, &sig, p, va, scratch, regions + nreg, &diag);
  if (n < 0) fail_msg("%s: variant arguments: %s", what, diag.message);
  nreg += n;
  const char *tn = target ? target : "interp";
  if (run_on_target(target, ms, fs, sa, sg, regions, nreg, NULL, what, &diag))
    fail_msg("%s on %s (seed %llu): split: %s", what, tn, (unsigned long long)seed0,
             diag.message);
  if (run_on_target(target, mc, fc, ca, cg, regions, nreg, NULL, what, &diag))
    fail_msg("%s on %s (seed %llu): combine: %s", what, tn, (unsigned long long)seed0,
             diag.message);
  kn_module_free(ms), kn_module_free(mc);
  free(ws_o), free(ws_lse);
  return plan.splits;
}

/* the spill units of kernel `name` in artefact a, compiled for arch (cmocka failure if the
 * artefact cannot be read); with KILN_TEST_VERBOSE an AMDGPU code object's static report (the
 * inspector's table: registers, spills, LDS, occupancy), or ptxas's registers and spills, is
 * printed */
static inline int artifact_spills(const kn_artifact *a, const kn_arch *arch, const char *name) {
  kn_diag d;
  int spills = 0;
  if (a->kind == KN_ARTIFACT_CODE_OBJECT) {
    kn_codeobj co;
    if (kn_codeobj_parse(a->data, a->size, &co, &d)) fail_msg("code object: %s", d.message);
    const kn_codeobj_kernel *k = kn_codeobj_find(&co, name);
    assert_non_null(k);
    spills = k->vgpr_spill_count + (int)k->scratch_bytes;
    if (verbose()) {
      char tab[4096];
      kn_codeobj_format_stats(&co, tab, sizeof tab);
      printf("%s", tab);
    }
    kn_codeobj_free(&co);
  } else {
    kn_ptxas_options po = {.arch = arch->name};  /* the default: -O3, as the driver JITs PTX */
    kn_ptxas_result r;
    if (kn_ptxas_run(a->data, a->size, &po, &r, &d)) fail_msg("ptxas: %s", d.message);
    const kn_ptxas_kernel *k = kn_ptxas_find_kernel(&r, name);
    assert_non_null(k);
    spills = k->spill_stores + k->spill_loads;
    if (verbose())
      printf("    ptxas %s %s: %d registers, spill stores %d bytes, loads %d bytes\n", arch->name,
             name, k->registers, k->spill_stores, k->spill_loads);
    kn_ptxas_result_free(&r);
  }
  return spills;
}

/* A shuffled page pool and its block table for `batch` sequences of len[b] keys in pages of
 * page_size: each sequence's pages drawn from a random permutation of the pool (so pages are in
 * no order), `tail` unused entries past what each row needs holding garbage (negative numbers
 * or pages past the pool, which no kernel may read), and `spare` pages no sequence uses.
 * Returns the (batch, *max_pages) table (malloc'd); *num_pages gets the pool's size. */
static inline int32_t *test_page_table(int batch, const int *len, int page_size, int tail,
                                       int spare, int *max_pages, int *num_pages) {
  int need = 0, mp = 0;
  for (int b = 0; b < batch; b++) {
    int n = (len[b] + page_size - 1) / page_size;
    need += n;
    if (n > mp) mp = n;
  }
  mp += tail;
  const int np = need + spare;
  int *perm = malloc(sizeof *perm * (size_t)(np + 1));
  for (int i = 0; i < np; i++) perm[i] = i;
  for (int i = np - 1; i > 0; i--) {
    int j = irand(0, i), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  int32_t *table = malloc(sizeof *table * (size_t)(batch * mp + 1));
  int at = 0;
  for (int b = 0; b < batch; b++)
    for (int i = 0; i < mp; i++)
      table[b * mp + i] = i < (len[b] + page_size - 1) / page_size
                              ? perm[at++]
                              : (irand(0, 1) ? -1 - irand(0, 9) : np + irand(0, 1000));
  free(perm);
  *max_pages = mp, *num_pages = np;
  return table;
}

#endif
