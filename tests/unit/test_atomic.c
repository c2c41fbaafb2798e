/* test_atomic.c — the store's atomic_add clause (docs/ir.md) on every target that runs here,
 * and the instructions the GPU targets emit for it.
 *
 * 1. Many programs add into one buffer: 37 programs each add a 16x32 tile of random f32 values
 *    at an offset of their own (rows pid % 5, columns 3 pid % 7: the tiles overlap), under 2-D
 *    bounds that cut the last row and columns and a mask ((i + j) % 3 != 0), plus a rank-1 tile
 *    and a scalar of ones into counters.  On the interpreter, the host (threads, checked and
 *    unchecked) and the emulated gfx90a / gfx942 targets, every element is compared with a
 *    float64 sum the test computes itself, within the reordering's rounding bound; elements no
 *    live lane adds to keep their bits.  A plain store in place of the adds would fail it (the
 *    last program's value instead of the sum), and so would an element added twice.
 * 2. Replication: small tiles (8x8, 1x64, 64x1, 2x2, 4, a broadcast row) over 4 warps, where
 *    the layouts hand an element to several threads or registers, add ones once per element
 *    on the emulated targets: exactly the interpreter's counts.
 * 3. The code: gfx942's, gfx90a's and gfx950's code objects hold global_atomic_add_f32 and no
 *    global_atomic_cmpswap (in the assembly, and in llvm-objdump's disassembly where it is
 *    installed); sm_80's and sm_90a's PTX holds atom.global.add.f32 (or red.global.add.f32),
 *    assembled by ptxas where it is found (else skipped with a message).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "emu.h"
#include "interp.h"
#include "objdump.h"
#include "pipeline.h"
#include "ptxas.h"
#include "target.h"

/* ---- 1. many programs into one buffer ---- */

enum { NPROG = 37, TM = 16, TN = 32, M = 19, N = 35, LD = 37, NSRC = NPROG * TM * TN, NCNT = 64 };

static const char *acc_text =
    "kernel @acc(%src: ptr<f32>, %dst: ptr<f32>, %cnt: ptr<f32>, %m: i32, %n: i32, %ld: i32) "
    "attrs {WARPS = 4} {\n"
    "  %pid = program_id 0 : i32\n"
    "  %c0 = const 0 : i32\n"
    "  %c1 = const 1 : i32\n"
    "  %c3 = const 3 : i32\n"
    "  %c5 = const 5 : i32\n"
    "  %c7 = const 7 : i32\n"
    "  %c16 = const 16 : i32\n"
    "  %c32 = const 32 : i32\n"
    "  %c40 = const 40 : i32\n"
    "  %row0 = mul %pid, %c16 : i32\n"
    "  %a = load %src[%row0, %c0] strides [%c32, %c1] : tile<16x32xf32>\n"
    "  %o0 = rem %pid, %c5 : i32\n"
    "  %p3 = mul %pid, %c3 : i32\n"
    "  %o1 = rem %p3, %c7 : i32\n"
    "  %ri = arange 0, 16 : tile<16xi32>\n"
    "  %cj = arange 0, 32 : tile<32xi32>\n"
    "  %ri2 = expand_dims %ri, 1 : tile<16x1xi32>\n"
    "  %cj2 = expand_dims %cj, 0 : tile<1x32xi32>\n"
    "  %ib = broadcast %ri2 : tile<16x32xi32>\n"
    "  %jb = broadcast %cj2 : tile<16x32xi32>\n"
    "  %ij = add %ib, %jb : tile<16x32xi32>\n"
    "  %three = const 3 : tile<16x32xi32>\n"
    "  %zero = const 0 : tile<16x32xi32>\n"
    "  %r3 = rem %ij, %three : tile<16x32xi32>\n"
    "  %mask = cmp ne %r3, %zero : tile<16x32xi1>\n"
    "  store %a, %dst[%o0, %o1] strides [%ld, %c1] bounds [%m, %n] mask %mask atomic_add\n"
    "  %ones = const 1 : tile<64xf32>\n"
    "  store %ones, %cnt[%c0] strides [%c1] bounds [%c40] atomic_add\n"
    "  %one = const 1 : f32\n"
    "  store %one, %cnt[%c40] strides [%c1] atomic_add\n"
    "  return\n"
    "}\n";

static uint64_t rng = 0x243f6a8885a308d3ull;
static float frand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 40) / (double)(1ull << 24) * 8.0 - 4.0);
}

typedef struct acc_data {
  float src[NSRC], dst0[M * LD], cnt0[NCNT];
  double want[M * LD], bound[M * LD];  /* float64 sum; the rounding bound of any order */
  int adds[M * LD];                    /* live adds per element */
} acc_data;

static acc_data A;

static void acc_reference(void) {
  for (int i = 0; i < NSRC; i++) A.src[i] = frand();
  for (int i = 0; i < M * LD; i++) {
    A.dst0[i] = frand();
    A.want[i] = A.dst0[i];
    A.bound[i] = fabs(A.dst0[i]);
    A.adds[i] = 0;
  }
  for (int i = 0; i < NCNT; i++) A.cnt0[i] = (float)i;
  for (int p = 0; p < NPROG; p++) {
    int o0 = p % 5, o1 = p * 3 % 7;
    for (int i = 0; i < TM; i++)
      for (int j = 0; j < TN; j++) {
        int r = o0 + i, c = o1 + j;
        if (r >= M || c >= N || (i + j) % 3 == 0) continue;
        double v = A.src[(p * TM + i) * TN + j];
        A.want[r * LD + c] += v;
        A.bound[r * LD + c] += fabs(v);
        A.adds[r * LD + c]++;
      }
  }
}

/* runs @acc of m on t (NULL: the interpreter), checked when asked (host), into dst and cnt */
static void launch_acc(const kn_module *m, const kn_target *t, bool checked, float *dst,
                       float *cnt) {
  static float src[NSRC];
  memcpy(src, A.src, sizeof src);
  memcpy(dst, A.dst0, sizeof A.dst0);
  memcpy(cnt, A.cnt0, sizeof A.cnt0);
  kn_argval av[6] = {{.p = src}, {.p = dst}, {.p = cnt}, {.i = M}, {.i = N}, {.i = LD}};
  kn_region re[3] = {{src, sizeof src}, {dst, sizeof A.dst0}, {cnt, sizeof A.cnt0}};
  int grid[3] = {NPROG, 1, 1};
  kn_diag d;
  const char *name = t ? t->name : "interp";
  int rc;
  if (!t) {
    rc = kn_interp_run(kn_module_find(m, "acc"), av, grid, re, 3, NULL, &d);
  } else {
    kn_compile_options o = {.check_bounds = checked};
    kn_kernel *k;
    if (kn_compile(m, "acc", t, &o, &k, &d)) fail_msg("%s: compile: %s", name, d.rendered);
    rc = t->emulated ? kn_emu_run(k, av, grid, re, 3, NULL, &d)
         : checked   ? kn_kernel_run_host_checked(k, av, grid, re, 3, &d)
                     : kn_kernel_run_host(k, av, grid, &d);
    kn_kernel_free(k);
  }
  if (rc) fail_msg("%s: run: %s", name, d.rendered[0] ? d.rendered : d.message);
}

/* runs @acc and compares with the float64 sums */
static void run_acc(const kn_module *m, const kn_target *t, bool checked) {
  static float dst[M * LD], cnt[NCNT];
  const char *name = t ? t->name : "interp";
  launch_acc(m, t, checked, dst, cnt);
  int touched = 0;
  for (int e = 0; e < M * LD; e++) {
    if (!A.adds[e]) {
      if (memcmp(&dst[e], &A.dst0[e], 4))
        fail_msg("%s: dst[%d] (row %d col %d) no live lane adds to changed: %.9g, was %.9g", name,
                 e, e / LD, e % LD, dst[e], A.dst0[e]);
      continue;
    }
    touched++;
    /* any order of n f32 adds: within about n ulps of the sum of magnitudes (and f32 of the
     * exact sum rounds once more) */
    double tol = (A.adds[e] + 2) * 0x1p-24 * A.bound[e];
    if (!(fabs(dst[e] - A.want[e]) <= tol))
      fail_msg("%s: dst[%d] (row %d col %d, %d adds): %.9g, float64 sum %.9g (tolerance %.3g)",
               name, e, e / LD, e % LD, A.adds[e], dst[e], A.want[e], tol);
  }
  for (int i = 0; i < NCNT; i++) {
    float want = (float)i + (i <= 40 ? (float)NPROG : 0.0f);
    if (cnt[i] != want) fail_msg("%s: cnt[%d] = %.9g, want %.9g", name, i, cnt[i], want);
  }
  printf("  %-11s %d elements added to by up to %d programs: within the float64 bound\n", name,
         touched, NPROG);
}

static kn_module *parse(const char *text) {
  kn_diag d;
  kn_module *m = kn_parse("<test>", text, strlen(text), &d);
  if (!m || kn_verify(m, &d)) fail_msg("%s", d.rendered);
  return m;
}

static void test_many_programs(void **st) {
  (void)st;
  acc_reference();
  /* the overlaps are real: some element gets an add from several programs */
  int most = 0;
  for (int e = 0; e < M * LD; e++) most = A.adds[e] > most ? A.adds[e] : most;
  assert_true(most >= 10);
  kn_module *m = parse(acc_text);
  run_acc(m, NULL, false);
  run_acc(m, kn_host_target(), false);
  run_acc(m, kn_host_target(), true);
  const char *emu[] = {"gfx90a-emu", "gfx942-emu"};
  for (int i = 0; i < 2; i++) run_acc(m, kn_target_get(emu[i]), false);
  kn_module_free(m);
}

/* the check can fail: the sums of a plain store (the clause dropped) are refused */
static void test_plain_store_is_caught(void **st) {
  (void)st;
  acc_reference();
  char *text = strdup(acc_text);
  for (char *s; (s = strstr(text, " atomic_add"));) memmove(s, s + 11, strlen(s + 11) + 1);
  kn_module *m = parse(text);
  static float dst[M * LD], cnt[NCNT];
  launch_acc(m, NULL, false, dst, cnt);
  int off = 0;
  for (int e = 0; e < M * LD; e++)
    if (A.adds[e] > 1 &&
        !(fabs(dst[e] - A.want[e]) <= (A.adds[e] + 2) * 0x1p-24 * A.bound[e]))
      off++;
  assert_true(off > 100);
  kn_module_free(m);
  free(text);
}

/* ---- 2. replication ---- */

/* each case adds ones (and 2 at element 0, so an element's adds cannot hide in its neighbours')
 * into a zeroed buffer of the tile's size, over `grid` programs */
typedef struct rep_case {
  const char *name, *type, *shape_opnd;
  int numel;
  const char *body;  /* ops producing %v of `type` */
} rep_case;

static const rep_case rep_cases[] = {
    {"8x8", "tile<8x8xf32>", "[%c0, %c0] strides [%c8, %c1]", 64,
     "  %v = const 1 : tile<8x8xf32>\n"},
    {"2x2", "tile<2x2xf32>", "[%c0, %c0] strides [%c2, %c1]", 4,
     "  %v = const 1 : tile<2x2xf32>\n"},
    {"1x64", "tile<1x64xf32>", "[%c0, %c0] strides [%c64, %c1]", 64,
     "  %v = load %src[%c0, %c0] strides [%c64, %c1] : tile<1x64xf32>\n"},
    {"64x1", "tile<64x1xf32>", "[%c0, %c0] strides [%c1, %c1]", 64,
     "  %v = load %src[%c0, %c0] strides [%c1, %c1] : tile<64x1xf32>\n"},
    {"4", "tile<4xf32>", "[%c0] strides [%c1]", 4,
     "  %v = load %src[%c0] strides [%c1] : tile<4xf32>\n"},
    {"bcast16x64", "tile<16x64xf32>", "[%c0, %c0] strides [%c64, %c1]", 1024,
     "  %r = load %src[%c0, %c0] strides [%c64, %c1] : tile<1x64xf32>\n"
     "  %v = broadcast %r : tile<16x64xf32>\n"},
};

static void run_rep(const rep_case *c, const kn_target *t, int grid0) {
  char text[2048];
  snprintf(text, sizeof text,
           "kernel @rep(%%src: ptr<f32>, %%dst: ptr<f32>) attrs {WARPS = 4} {\n"
           "  %%c0 = const 0 : i32\n  %%c1 = const 1 : i32\n  %%c2 = const 2 : i32\n"
           "  %%c8 = const 8 : i32\n  %%c64 = const 64 : i32\n"
           "%s"
           "  store %%v, %%dst%s atomic_add\n"
           "  return\n}\n",
           c->body, c->shape_opnd);
  kn_module *m = parse(text);
  float src[1024], want[1024], got[1024];
  for (int i = 0; i < 1024; i++) src[i] = i == 0 ? 2.0f : 1.0f;
  int grid[3] = {grid0, 1, 1};
  kn_diag d;
  for (int pass = 0; pass < 2; pass++) {
    float *dst = pass ? got : want;
    memset(dst, 0, sizeof want);
    kn_argval av[2] = {{.p = src}, {.p = dst}};
    kn_region re[2] = {{src, sizeof src}, {dst, (size_t)c->numel * 4}};
    int rc;
    if (!pass) {
      rc = kn_interp_run(kn_module_find(m, "rep"), av, grid, re, 2, NULL, &d);
    } else {
      kn_kernel *k;
      if (kn_compile(m, "rep", t, NULL, &k, &d))
        fail_msg("%s on %s: compile: %s", c->name, t->name, d.rendered);
      rc = kn_emu_run(k, av, grid, re, 2, NULL, &d);
      kn_kernel_free(k);
    }
    if (rc) fail_msg("%s: run: %s", c->name, d.rendered[0] ? d.rendered : d.message);
  }
  for (int e = 0; e < c->numel; e++)
    if (got[e] != want[e])
      fail_msg("%s on %s: dst[%d] = %g, the interpreter's %g (%g times as many adds)", c->name,
               t->name, e, got[e], want[e], got[e] / want[e]);
  kn_module_free(m);
}

static void test_replicated_layouts(void **st) {
  (void)st;
  const char *emu[] = {"gfx90a-emu", "gfx942-emu"};
  for (int i = 0; i < 2; i++)
    for (size_t c = 0; c < sizeof rep_cases / sizeof *rep_cases; c++) {
      run_rep(&rep_cases[c], kn_target_get(emu[i]), 3);
      printf("  %-11s %-10s each element added once per program\n", emu[i], rep_cases[c].name);
    }
}

/* ---- 3. the instructions ---- */

static char *dump_asm(const kn_module *m, const char *name, const kn_target *t, kn_artifact *a) {
  char *text = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&text, &n);
  assert_non_null(f);
  kn_compile_options o = {.dump_stages = KN_STAGE_ASM, .dump_file = f};
  kn_diag d;
  if (kn_compile_artifact(m, name, t, &o, a, &d)) fail_msg("%s: %s", t->name, d.rendered);
  fclose(f);
  return text;
}

static int count_lines(const char *text, const char *word) {
  int n = 0;
  for (const char *s = text; (s = strstr(s, word)); s += strlen(word)) n++;
  return n;
}

static void test_amdgpu_instruction(void **st) {
  (void)st;
  kn_module *m = parse(acc_text);
  const char *chips[] = {"gfx942", "gfx90a", "gfx950"};
  for (int i = 0; i < 3; i++) {
    kn_artifact a;
    char *text = dump_asm(m, "acc", kn_target_get(chips[i]), &a);
    int adds = count_lines(text, "global_atomic_add_f32"), cas = count_lines(text, "cmpswap");
    int od = test_objdump_count(chips[i], a.data, a.size, "global_atomic_add_f32");
    int odcas = test_objdump_count(chips[i], a.data, a.size, "global_atomic_cmpswap");
    printf("  %s: %d global_atomic_add_f32, %d cmpswap in the assembly; llvm-objdump: %d, %d%s\n",
           chips[i], adds, cas, od, odcas, od < 0 ? " (not installed)" : "");
    assert_true(adds > 0);
    assert_int_equal(cas, 0);
    if (od >= 0) {
      assert_true(od > 0);
      assert_int_equal(odcas, 0);
    }
    free(text);
    kn_artifact_free(&a);
  }
  kn_module_free(m);
}

static void test_ptx_instruction(void **st) {
  (void)st;
  kn_module *m = parse(acc_text);
  char path[512];
  bool ptxas = kn_ptxas_find(path, sizeof path, NULL) == KN_OK;
  if (!ptxas) printf("  ptxas not found (set KILN_PTXAS): the PTX is not assembled\n");
  const char *archs[] = {"sm_90a", "sm_80"};
  for (int i = 0; i < 2; i++) {
    kn_artifact a;
    kn_diag d;
    if (kn_compile_artifact(m, "acc", kn_target_get(archs[i]), NULL, &a, &d))
      fail_msg("%s: %s", archs[i], d.rendered);
    const char *ptx = a.data;
    int n = count_lines(ptx, "atom.global.add.f32") + count_lines(ptx, "red.global.add.f32");
    printf("  %s: %d atom/red.global.add.f32, %d cas\n", archs[i], n, count_lines(ptx, ".cas."));
    assert_true(n > 0);
    assert_int_equal(count_lines(ptx, ".cas."), 0);
    if (ptxas) {
      kn_ptxas_options o = {.arch = archs[i], .opt_level = 3};
      kn_ptxas_result r;
      memset(&r, 0, sizeof r);
      kn_diag why;
      if (kn_ptxas_run(a.data, a.size, &o, &r, &why) != KN_OK)
        fail_msg("%s: ptxas: %s", archs[i], why.rendered);
      kn_ptxas_result_free(&r);
    }
    kn_artifact_free(&a);
  }
  kn_module_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_many_programs),      cmocka_unit_test(test_plain_store_is_caught),
      cmocka_unit_test(test_replicated_layouts), cmocka_unit_test(test_amdgpu_instruction),
      cmocka_unit_test(test_ptx_instruction),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
