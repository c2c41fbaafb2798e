/* test_elemental.c — an attention variant's score and mask functions, called on whole tiles
 * (elemental calls), end to end on every kind of target.
 *
 * The kernel loads a (32 x 32) tile of scores per (q block, kv block, head) program and calls
 *   @score_mod: a per-head ALiBi slope (a load at the uniform head index: it must stay one
 *               scalar load), a bias table indexed by q * nk + kv (a varying load: a gather,
 *               its bounds a mask), a per-kv bias through a pointer made varying by ptradd,
 *               the bias table again through such a pointer with a row stride and bounds, a
 *               soft cap with tanh in a nested function, and a select on a compare;
 *   @mask_mod:  causal and a sliding window, returning i1;
 * then stores the masked scores and the mask for the whole padded grid.  Sizes are ragged
 * against the tiles (45 x 37), so the functions also run on the padding elements, where the
 * loads' bounds keep the gathers inside their table (and give 0, which the outputs show).
 *
 * Checks: the interpreter, running the elemental calls element by element on the module as
 * written, against plain C on the same inputs (f32 arithmetic in the IR's order, tanh in double
 * rounded once); the inliner's result (no call left, the slope a scalar load, two gathers);
 * host (plain and checked mode) bit for bit, gfx90a-emu and gfx942-emu within the kernel's
 * exactness (tanh is approximate on GPUs), every global access checked against the buffers;
 * a gfx942 code object and sm_90a PTX (assembled by ptxas when it is found, else skipped).
 * Inputs are fresh random numbers each run (the seed is printed).  KILN_TEST_VERBOSE=1 prints
 * the inlined module.
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

#include "emu.h"
#include "interp.h"
#include "numeric.h"
#include "passes.h"
#include "pipeline.h"
#include "ptxas.h"
#include "target.h"

#include "kbuild.h"

static const char *const text =
    "func @soft_cap(%x: f32, %cap: f32) -> (f32) {\n"
    "  %t = div %x, %cap : f32\n"
    "  %th = tanh %t : f32\n"
    "  %r = mul %th, %cap : f32\n"
    "  return %r\n"
    "}\n"
    "\n"
    "func @score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %slopes: ptr<f32>, "
    "%bias: ptr<f32>, %nb: i32, %kvb: ptr<f32>, %nq: i32, %nk: i32) -> (f32) {\n"
    "  %c0 = const 0 : i32\n"
    "  %c1 = const 1 : i32\n"
    "  %slope = load %slopes[%h] strides [%c1] : f32\n"
    "  %row = mul %q, %nk : i32\n"
    "  %off = add %row, %kv : i32\n"
    "  %x = load %bias[%off] strides [%c1] bounds [%nb] : f32\n"
    "  %kp = ptradd %kvb, %kv : ptr<f32>\n"
    "  %y = load %kp[%c0] strides [%c1] : f32\n"
    "  %d = sub %q, %kv : i32\n"
    "  %df = cast %d : f32\n"
    "  %al = mul %slope, %df : f32\n"
    "  %s1 = add %score, %al : f32\n"
    "  %s2 = add %s1, %x : f32\n"
    "  %s3 = add %s2, %y : f32\n"
    "  %bp = ptradd %bias, %kv : ptr<f32>\n"
    "  %x2 = load %bp[%q] strides [%nk] bounds [%nq] : f32\n"
    "  %s4 = sub %s3, %x2 : f32\n"
    "  %cap = const 20 : f32\n"
    "  %sc = call @soft_cap(%s4, %cap) : f32\n"
    "  %far = cmp gt %d, %c1 : i1\n"
    "  %r = select %far, %sc, %s4 : f32\n"
    "  return %r\n"
    "}\n"
    "\n"
    "func @mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32, %w: i32) -> (i1) {\n"
    "  %causal = cmp le %kv, %q : i1\n"
    "  %d = sub %q, %kv : i32\n"
    "  %near = cmp lt %d, %w : i1\n"
    "  %m = and %causal, %near : i1\n"
    "  return %m\n"
    "}\n"
    "\n"
    "kernel @k(%s: ptr<f32>, %slopes: ptr<f32>, %bias: ptr<f32>, %kvb: ptr<f32>, %o: ptr<f32>, "
    "%mo: ptr<i1>, %nq: i32, %nk: i32, %w: i32) attrs {WARPS = 4} {\n"
    "  %pm = program_id 0 : i32\n"
    "  %pn = program_id 1 : i32\n"
    "  %h = program_id 2 : i32\n"
    "  %c32 = const 32 : i32\n"
    "  %c1 = const 1 : i32\n"
    "  %q0 = mul %pm, %c32 : i32\n"
    "  %k0 = mul %pn, %c32 : i32\n"
    "  %nb = mul %nq, %nk : i32\n"
    "  %hb = mul %h, %nb : i32\n"
    "  %sh = ptradd %s, %hb : ptr<f32>\n"
    "  %c64 = const 64 : i32\n"
    "  %c4096 = const 4096 : i32\n"
    "  %ho = mul %h, %c4096 : i32\n"
    "  %oh = ptradd %o, %ho : ptr<f32>\n"
    "  %mh = ptradd %mo, %ho : ptr<i1>\n"
    "  %zf = const 0 : f32\n"
    "  %sc = load %sh[%q0, %k0] strides [%nk, %c1] bounds [%nq, %nk] other %zf : tile<32x32xf32>\n"
    "  %ar = arange 0, 32 : tile<32xi32>\n"
    "  %q0s = splat %q0 : tile<32xi32>\n"
    "  %qa = add %ar, %q0s : tile<32xi32>\n"
    "  %qe = expand_dims %qa, 1 : tile<32x1xi32>\n"
    "  %qt = broadcast %qe : tile<32x32xi32>\n"
    "  %k0s = splat %k0 : tile<32xi32>\n"
    "  %ka = add %ar, %k0s : tile<32xi32>\n"
    "  %ke = expand_dims %ka, 0 : tile<1x32xi32>\n"
    "  %kt = broadcast %ke : tile<32x32xi32>\n"
    "  %b = const 0 : i32\n"
    "  %r = call @score_mod(%sc, %b, %h, %qt, %kt, %slopes, %bias, %nb, %kvb, %nq, %nk) : tile<32x32xf32>\n"
    "  %m = call @mask_mod(%b, %h, %qt, %kt, %w) : tile<32x32xi1>\n"
    "  %big = const -1000000 : tile<32x32xf32>\n"
    "  %rm = select %m, %r, %big : tile<32x32xf32>\n"
    "  store %rm, %oh[%q0, %k0] strides [%c64, %c1]\n"
    "  store %m, %mh[%q0, %k0] strides [%c64, %c1]\n"
    "  return\n"
    "}\n";

/* the scores are H x NQ x NK; the outputs the whole padded grid, H x 64 x 64 */
enum { H = 3, NQ = 45, NK = 37, PAD = 64, W = 9, NE = H * NQ * NK, NO = H * PAD * PAD };

typedef struct data {  /* (aligned as the GPU lowering's vector accesses expect buffers) */
  _Alignas(64) float s[NE];
  _Alignas(64) float slopes[H];
  _Alignas(64) float bias[NQ * NK + PAD];
  _Alignas(64) float kvb[PAD];
  _Alignas(64) float o[NO];
  _Alignas(64) uint8_t mo[NO];
} data;

static void fill(data *x) {
  for (int i = 0; i < NE; i++) x->s[i] = (float)urand(-30, 30);
  for (int i = 0; i < H; i++) x->slopes[i] = (float)urand(-1, 1);
  for (int i = 0; i < NQ * NK + PAD; i++) x->bias[i] = (float)urand(-5, 5);
  for (int i = 0; i < PAD; i++) x->kvb[i] = (float)urand(-2, 2);
  for (int i = 0; i < NO; i++) x->o[i] = NAN, x->mo[i] = 0x5a;
}

static void args_of(data *x, kn_argval *av, kn_region *re) {
  void *p[6] = {x->s, x->slopes, x->bias, x->kvb, x->o, x->mo};
  size_t n[6] = {sizeof x->s, sizeof x->slopes, sizeof x->bias, sizeof x->kvb, sizeof x->o,
                 sizeof x->mo};
  for (int i = 0; i < 6; i++) {
    av[i].p = p[i];
    re[i] = (kn_region){p[i], n[i]};
  }
  av[6].i = NQ, av[7].i = NK, av[8].i = W;
}

static const int grid[3] = {PAD / 32, PAD / 32, H};

static kn_module *parse_text(void) {
  kn_diag d;
  kn_module *m = kn_parse("elemental.tile", text, strlen(text), &d);
  if (!m || kn_verify(m, &d)) fail_msg("%s", d.rendered);
  return m;
}

static uint64_t seed;

/* the interpreter's run (elemental calls element by element) of the module as written */
static void reference(const data *in, data *want) {
  kn_module *m = parse_text();
  *want = *in;
  kn_argval av[9];
  kn_region re[6];
  args_of(want, av, re);
  kn_diag d;
  if (kn_interp_run(kn_module_find(m, "k"), av, grid, re, 6, NULL, &d))
    fail_msg("interp: %s", d.rendered);
  kn_module_free(m);
}

/* the same in plain C: f32 arithmetic in the order of the IR, tanh in double rounded once */
static void test_interp_against_c(void **st) {
  (void)st;
  static data in, want;
  fill(&in);
  reference(&in, &want);
  int checked = 0;
  for (int h = 0; h < H; h++)
    for (int q = 0; q < PAD; q++)
      for (int kv = 0; kv < PAD; kv++) {
        /* the padding: a score of 0 (the load's other), bias elements out of bounds 0 */
        int e = (h * PAD + q) * PAD + kv, d = q - kv;
        float sc0 = q < NQ && kv < NK ? in.s[(h * NQ + q) * NK + kv] : 0.0f;
        float x = q * NK + kv < NQ * NK ? in.bias[q * NK + kv] : 0.0f;
        float x2 = q < NQ ? in.bias[kv + q * NK] : 0.0f;
        float al = in.slopes[h] * (float)d;
        float s3 = ((sc0 + al) + x) + in.kvb[kv];
        float s4 = s3 - x2;
        float t = s4 / 20.0f;
        float sc = (float)tanh((double)t) * 20.0f;
        float r = d > 1 ? sc : s4;
        bool m = kv <= q && d < W;
        float o = m ? r : -1000000.0f;
        if (want.mo[e] != m) fail_msg("mask [%d,%d,%d]: %d, want %d", h, q, kv, want.mo[e], m);
        if (memcmp(&want.o[e], &o, 4))
          fail_msg("score [%d,%d,%d]: %.9g, want %.9g (seed %llu)", h, q, kv, want.o[e], o,
                   (unsigned long long)seed);
        checked += m;
      }
  assert_true(checked > 100);  /* the mask lets through enough scores to test them */
}

static void count_ops(const kn_block *b, int *n) {
  for (const kn_op *op = b->first; op; op = op->next) {
    n[op->opc]++;
    if (op->opc == KN_OP_LOAD && op->res[0]->type.kind == KN_TY_SCALAR) n[KN_OP_COUNT]++;
    for (int r = 0; r < op->nregion; r++) count_ops(op->region[r], n);
  }
}

/* after inlining: no call; the slope (uniform head) one scalar load; the bias and the per-kv
 * bias gathers; the result verifies */
static void test_inlined_shape(void **st) {
  (void)st;
  kn_module *m = parse_text();
  kn_diag d;
  if (kn_inline(m, &d)) fail_msg("inline: %s", d.rendered);
  kn_fold(m);
  if (kn_verify(m, &d)) fail_msg("inlined module: %s", d.rendered);
  const char *v = getenv("KILN_TEST_VERBOSE");
  if (v && *v && strcmp(v, "0")) {  /* the lifted kernel, to read */
    char *txt = kn_print(m);
    printf("%s", txt);
    free(txt);
  }
  int n[KN_OP_COUNT + 1] = {0};
  count_ops(kn_module_find(m, "k")->body, n);
  assert_int_equal(n[KN_OP_CALL], 0);
  assert_int_equal(n[KN_OP_COUNT], 1);   /* scalar loads: the slope */
  assert_int_equal(n[KN_OP_GATHER], 3);
  assert_int_equal(n[KN_OP_TANH], 1);
  kn_module_free(m);
}

/* compares a run's outputs with the reference: the mask exactly, scores within e */
static void compare(const data *want, const data *got, kn_exactness e, const char *who) {
  int bad = 0;
  for (int i = 0; i < NO; i++) {
    bool ok = want->mo[i] == got->mo[i] && kn_exactness_accepts(e, KN_F32, want->o[i], got->o[i]);
    if (!ok && bad++ < 4)
      printf("  %s: element %d: score %.9g (want %.9g), mask %d (want %d)\n", who, i, got->o[i],
             want->o[i], got->mo[i], want->mo[i]);
  }
  if (bad) fail_msg("%s: %d elements differ from the interpreter (seed %llu)", who, bad,
                    (unsigned long long)seed);
}

static void run_on(const char *target, kn_exactness e) {
  static data in, want, got;
  fill(&in);
  reference(&in, &want);
  kn_module *m = parse_text();
  const kn_target *t = kn_target_get(target);
  assert_non_null(t);
  for (int checked = 0; checked < (t->emulated ? 1 : 2); checked++) {
    kn_compile_options opt = {.check_bounds = checked};
    kn_kernel *k = NULL;
    kn_diag d;
    if (kn_compile(m, "k", t, &opt, &k, &d)) fail_msg("%s: compile: %s", target, d.rendered);
    got = in;
    kn_argval av[9];
    kn_region re[6];
    args_of(&got, av, re);
    int rc = t->emulated ? kn_emu_run(k, av, grid, re, 6, NULL, &d)
             : checked   ? kn_kernel_run_host_checked(k, av, grid, re, 6, &d)
                         : kn_kernel_run_host(k, av, grid, &d);
    if (rc) fail_msg("%s: run: %s", target, d.rendered);
    compare(&want, &got, e, target);
    kn_kernel_free(k);
  }
  kn_module_free(m);
}

static void test_host(void **st) {
  (void)st;
  run_on("host", KN_EXACT);
}

/* the emulated AMD targets: tanh is computed from exp2 there (KN_APPROX in ops.def) */
static void test_gfx90a_emu(void **st) {
  (void)st;
  run_on("gfx90a-emu", kn_opinfo_table[KN_OP_TANH].exact);
}
static void test_gfx942_emu(void **st) {
  (void)st;
  run_on("gfx942-emu", kn_opinfo_table[KN_OP_TANH].exact);
}

static void test_code_objects(void **st) {
  (void)st;
  kn_module *m = parse_text();
  kn_diag d;
  kn_artifact a;
  if (kn_compile_artifact(m, "k", kn_target_get("gfx942"), NULL, &a, &d))
    fail_msg("gfx942: %s", d.rendered);
  assert_true(a.size > 0);
  kn_artifact_free(&a);
  if (kn_compile_artifact(m, "k", kn_target_get("sm_90a"), NULL, &a, &d))
    fail_msg("sm_90a: %s", d.rendered);
  assert_int_equal(a.kind, KN_ARTIFACT_PTX);
  char path[512];
  if (kn_ptxas_find(path, sizeof path, NULL) != KN_OK) {
    printf("  ptxas not found (set KILN_PTXAS): the PTX is not assembled\n");
  } else {
    kn_ptxas_options o = {.arch = "sm_90a", .opt_level = 3};
    kn_ptxas_result r;
    memset(&r, 0, sizeof r);
    kn_diag why;
    if (kn_ptxas_run(a.data, a.size, &o, &r, &why) != KN_OK) fail_msg("ptxas: %s", why.rendered);
    kn_ptxas_result_free(&r);
  }
  kn_artifact_free(&a);
  kn_module_free(m);
}

int main(void) {
  seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
  if (getenv("KILN_TEST_SEED")) seed = strtoull(getenv("KILN_TEST_SEED"), NULL, 0);
  rng_state = seed | 1;
  printf("  seed %llu (KILN_TEST_SEED replays it)\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_interp_against_c), cmocka_unit_test(test_inlined_shape),
      cmocka_unit_test(test_host),             cmocka_unit_test(test_gfx90a_emu),
      cmocka_unit_test(test_gfx942_emu),       cmocka_unit_test(test_code_objects),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
