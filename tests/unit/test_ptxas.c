/* test_ptxas.c — the ptxas check (compiler/ptxas.c).
 *
 * The parser is tested everywhere on captured -v reports (CUDA 13.0's shape, plus older and
 * odder ones).  The tests that run ptxas skip (cmocka skip()) when it is not found; where it is
 * (this build machine has CUDA 13.0; the H200 image too) they assemble a hand-written PTX vector
 * add for sm_80 and sm_90a (registers > 0, no spills, a cubin), a kernel that must spill (more
 * live values than registers, under a register cap), one with a local array (stack frame), and
 * malformed PTX (ptxas's error lines come back).  $KILN_PTXAS is honoured, so
 * KILN_PTXAS=none runs the skip path on purpose.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ptxas.h"

#include "test_ptx.h"

/* A kernel that must spill: V volatile loads (volatile, so ptxas may neither reorder nor merge
 * them) all issued before the first use, then combined in reverse order, so all V values are
 * live at once; with a cap of 32 registers they cannot all stay in registers. */
static char *spill_ptx(int v) {
  size_t cap = 256 + (size_t)v * 96;
  char *s = malloc(cap);
  assert_non_null(s);
  size_t n = (size_t)snprintf(s, cap,
                              ".version 8.0\n.target sm_80\n.address_size 64\n"
                              ".visible .entry kn_spill(.param .u64 pa)\n{\n"
                              "  .reg .f32 %%f<%d>;\n  .reg .b64 %%rd<3>;\n"
                              "  ld.param.u64 %%rd1, [pa];\n"
                              "  cvta.to.global.u64 %%rd2, %%rd1;\n",
                              2 * v + 2);
  for (int i = 0; i < v; i++)
    n += (size_t)snprintf(s + n, cap - n, "  ld.volatile.global.f32 %%f%d, [%%rd2+%d];\n", i,
                          4 * i);
  n += (size_t)snprintf(s + n, cap - n, "  mov.f32 %%f%d, 0f00000000;\n", v);
  for (int i = v - 1; i >= 0; i--)
    n += (size_t)snprintf(s + n, cap - n, "  fma.rn.f32 %%f%d, %%f%d, %%f%d, %%f%d;\n",
                          2 * v - i, 2 * v - i - 1, 2 * v - i - 1, i);
  snprintf(s + n, cap - n, "  st.global.f32 [%%rd2], %%f%d;\n  ret;\n}\n", 2 * v);
  return s;
}

/* a 4 KiB per-thread array indexed at run time: it lives in local memory (a stack frame) */
static const char local_ptx[] =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry kn_local(.param .u64 pa, .param .u32 pi)\n"
    "{\n"
    "  .local .align 4 .b8 arr[4096];\n"
    "  .reg .b32 %r<4>;\n"
    "  .reg .b64 %rd<6>;\n"
    "  ld.param.u64 %rd1, [pa];\n"
    "  ld.param.u32 %r1, [pi];\n"
    "  and.b32 %r2, %r1, 1023;\n"
    "  mul.wide.u32 %rd2, %r2, 4;\n"
    "  mov.u64 %rd3, arr;\n"
    "  add.s64 %rd4, %rd3, %rd2;\n"
    "  st.local.u32 [%rd4], %r1;\n"
    "  xor.b32 %r3, %r2, 7;\n"
    "  mul.wide.u32 %rd2, %r3, 4;\n"
    "  add.s64 %rd4, %rd3, %rd2;\n"
    "  ld.local.u32 %r3, [%rd4];\n"
    "  cvta.to.global.u64 %rd5, %rd1;\n"
    "  st.global.u32 [%rd5], %r3;\n"
    "  ret;\n"
    "}\n";

/* ---- the parser, on captured reports (runs everywhere) ---- */

static void test_parse_cuda13(void **state) {
  (void)state;
  static const char log[] =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'kn_attn_fwd' for 'sm_90a'\n"
      "ptxas info    : Function properties for kn_attn_fwd\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 168 registers, used 1 barriers, 33792 bytes smem, 400 bytes "
      "cmem[0], 8 bytes cmem[2]\n"
      "ptxas info    : Function properties for kn_helper\n"
      "    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'kn_vadd' for 'sm_90a'\n"
      "ptxas info    : Function properties for kn_vadd\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 12 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 2.522 ms\n";
  kn_ptxas_kernel *k;
  int n;
  assert_int_equal(kn_ptxas_parse(log, &k, &n, NULL), KN_OK);
  assert_int_equal(n, 3);
  assert_string_equal(k[0].name, "kn_attn_fwd");
  assert_string_equal(k[0].arch, "sm_90a");
  assert_int_equal(k[0].registers, 168);
  assert_int_equal(k[0].barriers, 1);
  assert_int_equal(k[0].shared_bytes, 33792);
  assert_int_equal(k[0].const_bytes, 400);
  assert_int_equal(k[0].stack_frame, 8);
  assert_int_equal(k[0].spill_stores, 4);
  assert_int_equal(k[0].spill_loads, 12);
  assert_string_equal(k[1].name, "kn_helper"); /* a device function: frame only */
  assert_int_equal(k[1].stack_frame, 16);
  assert_int_equal(k[1].registers, 0);
  assert_string_equal(k[2].name, "kn_vadd");
  assert_int_equal(k[2].registers, 12);
  assert_int_equal(k[2].shared_bytes, 0);
  free(k);
}

static void test_parse_older_and_broken(void **state) {
  (void)state;
  /* CUDA 10-style: no barriers item, cmem only; CRLF line ends */
  static const char older[] =
      "ptxas info    : Compiling entry function 'k' for 'sm_70'\r\n"
      "ptxas info    : Function properties for k\r\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\r\n"
      "ptxas info    : Used 10 registers, 356 bytes cmem[0]\r\n";
  kn_ptxas_kernel *k;
  int n;
  assert_int_equal(kn_ptxas_parse(older, &k, &n, NULL), KN_OK);
  assert_int_equal(n, 1);
  assert_string_equal(k[0].name, "k");
  assert_int_equal(k[0].registers, 10);
  assert_int_equal(k[0].const_bytes, 356);
  free(k);
  /* an entry without its "Used" line is a report we cannot trust */
  static const char cut[] =
      "ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
      "ptxas info    : Function properties for k\n";
  kn_diag why;
  assert_int_equal(kn_ptxas_parse(cut, &k, &n, &why), KN_E_CORRUPT);
  assert_non_null(strstr(why.message, "entry function 'k'"));
  assert_null(k);
  assert_int_equal(kn_ptxas_parse("", &k, &n, NULL), KN_OK);
  assert_int_equal(n, 0);
  free(k);
}

static void test_bad_arguments(void **state) {
  (void)state;
  kn_diag msg;
  kn_ptxas_result r;
  kn_ptxas_options o = {.arch = "sm_80 -o /etc/passwd"};
  assert_int_equal(kn_ptxas_run(vadd_ptx, sizeof vadd_ptx - 1, &o, &r, &msg),
                   KN_E_INVALID);
  assert_non_null(strstr(msg.rendered, "bad ptxas architecture"));
  o.arch = "compute_90";
  assert_int_equal(kn_ptxas_run(vadd_ptx, sizeof vadd_ptx - 1, &o, &r, &msg),
                   KN_E_INVALID);
  assert_int_equal(kn_ptxas_run(NULL, 0, &o, &r, &msg), KN_E_INVALID);
}

/* KILN_PTXAS pointing nowhere is "not found", naming the variable */
static void test_not_found(void **state) {
  (void)state;
  const char *old = getenv("KILN_PTXAS");
  char *saved = old ? strdup(old) : NULL;
  setenv("KILN_PTXAS", "/nonexistent/ptxas", 1);
  char path[512];
  kn_diag msg;
  assert_int_equal(kn_ptxas_find(path, sizeof path, &msg), KN_E_NODEV);
  assert_non_null(strstr(msg.rendered, "ptxas not found"));
  assert_non_null(strstr(msg.rendered, "KILN_PTXAS"));
  kn_ptxas_result r;
  kn_ptxas_options o = {.arch = "sm_80"};
  assert_int_equal(kn_ptxas_run(vadd_ptx, sizeof vadd_ptx - 1, &o, &r, &msg),
                   KN_E_NODEV);
  assert_null(r.cubin);
  if (saved) {
    setenv("KILN_PTXAS", saved, 1);
    free(saved);
  } else {
    unsetenv("KILN_PTXAS");
  }
}

/* ---- with ptxas ---- */

static void need_ptxas(void) {
  char path[512];
  kn_diag msg;
  if (kn_ptxas_find(path, sizeof path, &msg) != KN_OK) {
    print_message("%s: skipping\n", msg.message);
    skip();
  }
}

static void vadd_for(const char *arch) {
  kn_diag msg;
  kn_ptxas_result r;
  kn_ptxas_options o = {.arch = arch, .opt_level = 3, .want_cubin = true};
  int st = kn_ptxas_run(vadd_ptx, sizeof vadd_ptx - 1, &o, &r, &msg);
  if (st != KN_OK) fail_msg("ptxas %s: %s", arch, msg.rendered);
  const kn_ptxas_kernel *k = kn_ptxas_find_kernel(&r, "kn_vadd");
  assert_non_null(k);
  print_message("%s kn_vadd: %d registers, %d/%d spill bytes, %d frame, %d smem, cubin %zu "
                "bytes (%s)\n",
                arch, k->registers, k->spill_stores, k->spill_loads, k->stack_frame,
                k->shared_bytes, r.cubin_size, r.ptxas);
  assert_string_equal(k->arch, arch);
  assert_true(k->registers > 0);
  assert_int_equal(k->spill_stores, 0);
  assert_int_equal(k->spill_loads, 0);
  assert_int_equal(k->stack_frame, 0);
  assert_non_null(r.cubin);
  assert_true(r.cubin_size > 64);
  assert_memory_equal(r.cubin, "\177ELF", 4);
  assert_non_null(strstr(r.log, "Compiling entry function 'kn_vadd'"));
  kn_ptxas_result_free(&r);
  /* without want_cubin nothing is kept */
  o.want_cubin = false;
  assert_int_equal(kn_ptxas_run(vadd_ptx, sizeof vadd_ptx - 1, &o, &r, &msg),
                   KN_OK);
  assert_null(r.cubin);
  assert_int_equal(r.nkernels, 1);
  kn_ptxas_result_free(&r);
}

static void test_vadd_sm80(void **state) {
  (void)state;
  need_ptxas();
  vadd_for("sm_80");
}

static void test_vadd_sm90a(void **state) {
  (void)state;
  need_ptxas();
  vadd_for("sm_90a");
}

static void test_spills(void **state) {
  (void)state;
  need_ptxas();
  char *ptx = spill_ptx(300);
  kn_diag msg;
  kn_ptxas_result r;
  kn_ptxas_options o = {.arch = "sm_90a", .opt_level = 3, .max_registers = 32};
  int st = kn_ptxas_run(ptx, strlen(ptx), &o, &r, &msg);
  if (st != KN_OK) fail_msg("ptxas: %s", msg.rendered);
  const kn_ptxas_kernel *k = kn_ptxas_find_kernel(&r, "kn_spill");
  assert_non_null(k);
  print_message("kn_spill (300 live values, cap 32): %d registers, %d/%d spill bytes, %d "
                "frame\n",
                k->registers, k->spill_stores, k->spill_loads, k->stack_frame);
  assert_true(k->registers <= 32);
  assert_true(k->spill_stores > 0);
  assert_true(k->spill_loads > 0);
  assert_true(k->stack_frame > 0);
  kn_ptxas_result_free(&r);
  free(ptx);

  o = (kn_ptxas_options){.arch = "sm_80"};
  st = kn_ptxas_run(local_ptx, sizeof local_ptx - 1, &o, &r, &msg);
  if (st != KN_OK) fail_msg("ptxas: %s", msg.rendered);
  k = kn_ptxas_find_kernel(&r, "kn_local");
  assert_non_null(k);
  print_message("kn_local: %d frame bytes, %d/%d spill bytes\n", k->stack_frame,
                k->spill_stores, k->spill_loads);
  assert_true(k->stack_frame >= 4096);
  kn_ptxas_result_free(&r);
}

static void test_malformed(void **state) {
  (void)state;
  need_ptxas();
  kn_diag msg;
  kn_ptxas_result r;
  kn_ptxas_options o = {.arch = "sm_80", .want_cubin = true};
  int st = kn_ptxas_run(bad_ptx, sizeof bad_ptx - 1, &o, &r, &msg);
  print_message("malformed: %s\n", msg.message);
  assert_int_equal(st, KN_E_COMPILE);
  assert_non_null(strstr(msg.rendered, "line 9"));
  assert_non_null(strstr(msg.rendered, "Unknown symbol 'bogus'"));
  assert_null(r.cubin);
  assert_null(r.kernels);
  /* not PTX at all */
  st = kn_ptxas_run("hello", 5, &o, &r, &msg);
  assert_int_equal(st, KN_E_COMPILE);
  assert_non_null(strstr(msg.message, "error"));
  /* an architecture ptxas does not know is ptxas's error, reported as such */
  o.arch = "sm_1";
  st = kn_ptxas_run(vadd_ptx, sizeof vadd_ptx - 1, &o, &r, &msg);
  assert_int_equal(st, KN_E_COMPILE);
  print_message("sm_1: %s\n", msg.message);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_cuda13),
      cmocka_unit_test(test_parse_older_and_broken),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_not_found),
      cmocka_unit_test(test_vadd_sm80),
      cmocka_unit_test(test_vadd_sm90a),
      cmocka_unit_test(test_spills),
      cmocka_unit_test(test_malformed),
  };
  return cmocka_run_group_tests_name("ptxas", tests, NULL, NULL);
}
