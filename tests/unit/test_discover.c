/* test_discover.c — device discovery without (and with pretend) GPUs.
 *
 * On the build machine there is normally no GPU: discovery must list the host, and report HIP
 * and CUDA as not present with a reason, never crash.  The ROCm 5/6 property-struct handling
 * and the CUDA path are exercised with fake driver libraries built from this same file
 * (-DKN_FAKE_DRIVER=n, loaded through $KILN_HIP_LIBRARY / $KILN_CUDA_LIBRARY):
 *   1  HIP of ROCm 6: hipGetDevicePropertiesR0600 (new layout) AND an unversioned
 *      hipGetDeviceProperties filling the old layout, as real ROCm 6 libraries export; two
 *      devices, a gfx942 and a gfx1030 (which kiln does not target)
 *   2  HIP of ROCm 5: only hipGetDeviceProperties, old layout; one gfx90a
 *   3  HIP with no device: hipGetDeviceCount fails with hipErrorNoDevice
 *   4  CUDA driver with one compute capability 9.0 GPU
 *   5  CUDA driver whose cuInit fails with CUDA_ERROR_NO_DEVICE
 *   6  HIP of ROCm 6 whose struct field holds garbage instead of an arch name
 * The fakes write the struct fields at the offsets documented in runtime/discover.c; a
 * discovery reading the wrong layout would see an empty or garbage arch.
 */
#if defined(KN_FAKE_DRIVER)
/* ---------------- the fake driver libraries ---------------- */
#include <stdint.h>
#include <string.h>

#define FAKE_HIP (KN_FAKE_DRIVER <= 3 || KN_FAKE_DRIVER == 6)

#if FAKE_HIP
static void fill(char *props, size_t mem_at, size_t cu_at, size_t arch_at, int dev) {
  static const char *const names[] = {"Fake Instinct MI300X", "Fake Radeon RX 6800"};
  static const char *const archs[] = {"gfx942:sramecc+:xnack-", "gfx1030"};
  uint64_t mem = (uint64_t)(dev + 1) << 34;
  int cus = dev ? 60 : 304;
  strcpy(props, names[dev]);
  memcpy(props + mem_at, &mem, sizeof mem);
  memcpy(props + cu_at, &cus, sizeof cus);
  if (KN_FAKE_DRIVER == 6) memset(props + arch_at, 0x7f, 256); /* no NUL, not printable */
  else strcpy(props + arch_at, KN_FAKE_DRIVER == 2 ? "gfx90a:sramecc+:xnack+" : archs[dev]);
}

int hipGetDeviceCount(int *n) {
  if (KN_FAKE_DRIVER == 3) return 100;
  *n = KN_FAKE_DRIVER == 1 ? 2 : 1;
  return 0;
}
const char *hipGetErrorString(int e) { return e == 100 ? "no ROCm-capable device is detected" : "fake error"; }
int hipDriverGetVersion(int *v) {
  *v = KN_FAKE_DRIVER == 2 ? 50221153 : 60342134;
  return 0;
}
/* the old layout (792 bytes): what ROCm 5 and the unversioned ROCm 6 export fill */
int hipGetDeviceProperties(void *p, int dev) {
  memset(p, 0, 792);
  fill(p, 256, 336, 396, dev);
  return 0;
}
#if KN_FAKE_DRIVER != 2
/* the new layout (1472 bytes) */
int hipGetDevicePropertiesR0600(void *p, int dev) {
  memset(p, 0, 1472);
  fill(p, 288, 388, 1160, dev);
  return 0;
}
#endif
#else
int cuInit(unsigned flags) {
  (void)flags;
  return KN_FAKE_DRIVER == 5 ? 100 : 0;
}
int cuGetErrorString(int e, const char **s) {
  *s = e == 100 ? "no CUDA-capable device is detected" : "fake error";
  return 0;
}
int cuDriverGetVersion(int *v) {
  *v = 12080;
  return 0;
}
int cuDeviceGetCount(int *n) {
  *n = 1;
  return 0;
}
int cuDeviceGet(int *d, int ordinal) {
  *d = ordinal + 1000; /* a handle is not the ordinal */
  return 0;
}
int cuDeviceGetName(char *name, int len, int dev) {
  if (dev != 1000) return 101;
  strncpy(name, "Fake H200", (size_t)len);
  return 0;
}
int cuDeviceGetAttribute(int *v, int attr, int dev) {
  if (dev != 1000) return 101;
  switch (attr) {
  case 75: *v = 9; return 0;
  case 76: *v = 0; return 0;
  case 16: *v = 132; return 0;
  default: return 1;
  }
}
int cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  if (dev != 1000) return 101;
  *bytes = (size_t)141 << 30;
  return 0;
}
#endif

#else
/* ---------------- the tests ---------------- */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"

static void print_list(const kn_device_list *l) {
  bool hip = l->hip.status == KN_OK, cuda = l->cuda.status == KN_OK;
  print_message("[ devices  ] hip: %s%s  cuda: %s%s\n", hip ? "present " : "not present: ",
                hip ? l->hip.library : l->hip.why.message, cuda ? "present " : "not present: ",
                cuda ? l->cuda.library : l->cuda.why.message);
  for (int i = 0; i < l->n; i++) {
    const kn_device_info *d = &l->dev[i];
    print_message("[ devices  ] %s %d: %s, arch %s%s%s, target %s, %d units, %llu MiB\n",
                  kn_device_kind_str(d->kind), d->ordinal, d->name, d->arch,
                  d->arch_features[0] ? ":" : "", d->arch_features, d->target[0] ? d->target : "(none)",
                  d->compute_units, (unsigned long long)(d->memory_bytes >> 20));
  }
}

static int clear_env(void **state) {
  (void)state;
  unsetenv("KILN_HIP_LIBRARY");
  unsetenv("KILN_CUDA_LIBRARY");
  return 0;
}

static void check_host_last(const kn_device_list *l) {
  assert_true(l->n >= 1);
  const kn_device_info *h = &l->dev[l->n - 1];
  assert_int_equal(h->kind, KN_DEVICE_HOST);
  assert_string_equal(h->target, "host");
  assert_true(h->name[0] != 0);
  assert_true(h->arch[0] != 0);
  assert_true(h->compute_units >= 1);
  assert_true(h->memory_bytes > 0);
}

/* whatever this machine has: the host always, GPUs reported either way with a reason */
static void test_this_machine(void **state) {
  (void)state;
  kn_device_list l;
  kn_discover(&l);
  print_list(&l);
  check_host_last(&l);
  if (l.hip.status != KN_OK) assert_true(l.hip.why.message[0] != 0);
  if (l.cuda.status != KN_OK) assert_true(l.cuda.why.message[0] != 0);
  const kn_device_info *best = kn_discover_best(&l);
  assert_non_null(best);
  if (l.hip.status != KN_OK && l.cuda.status != KN_OK) assert_int_equal(best->kind, KN_DEVICE_HOST);
}

static void test_missing_libraries(void **state) {
  (void)state;
  setenv("KILN_HIP_LIBRARY", "/nonexistent/libamdhip64.so.6", 1);
  setenv("KILN_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  kn_device_list l;
  kn_discover(&l);
  assert_false(l.hip.loaded);
  assert_int_equal(l.hip.status, KN_E_NODEV);
  assert_non_null(strstr(l.hip.why.message, "/nonexistent/libamdhip64.so.6"));
  assert_non_null(strstr(l.hip.why.message, "No such file"));
  assert_int_equal(l.cuda.status, KN_E_NODEV);
  assert_non_null(strstr(l.cuda.why.message, "/nonexistent/libcuda.so.1"));
  assert_int_equal(l.n, 1);
  check_host_last(&l);
  assert_int_equal(kn_discover_best(&l)->kind, KN_DEVICE_HOST);

  setenv("KILN_HIP_LIBRARY", "none", 1);
  kn_discover(&l);
  assert_non_null(strstr(l.hip.why.message, "disabled by KILN_HIP_LIBRARY=none"));

  /* a library that loads but is not a HIP runtime */
  setenv("KILN_HIP_LIBRARY", "libc.so.6", 1);
  setenv("KILN_CUDA_LIBRARY", "libc.so.6", 1);
  kn_discover(&l);
  assert_false(l.hip.loaded);
  assert_non_null(strstr(l.hip.why.message, "no symbol hipGetDeviceCount"));
  assert_false(l.cuda.loaded);
  assert_non_null(strstr(l.cuda.why.message, "no symbol cuInit"));
}

static void test_fake_rocm6(void **state) {
  (void)state;
  setenv("KILN_HIP_LIBRARY", KN_FAKE_1, 1);
  setenv("KILN_CUDA_LIBRARY", "none", 1);
  kn_device_list l;
  kn_discover(&l);
  print_list(&l);
  assert_int_equal(l.hip.status, KN_OK);
  assert_int_equal(l.hip.device_count, 2);
  assert_int_equal(l.hip.version, 60342134);
  assert_int_equal(l.n, 3);
  assert_int_equal(l.dev[0].kind, KN_DEVICE_HIP);
  assert_string_equal(l.dev[0].name, "Fake Instinct MI300X");
  assert_string_equal(l.dev[0].arch, "gfx942");
  assert_string_equal(l.dev[0].arch_features, "sramecc+:xnack-");
  assert_string_equal(l.dev[0].target, "gfx942");
  assert_int_equal(l.dev[0].compute_units, 304);
  assert_int_equal(l.dev[0].memory_bytes, (uint64_t)1 << 34);
  assert_string_equal(l.dev[1].arch, "gfx1030");
  assert_string_equal(l.dev[1].target, ""); /* present, but kiln has no target for it */
  assert_int_equal(l.dev[1].ordinal, 1);
  check_host_last(&l);
  assert_ptr_equal(kn_discover_best(&l), &l.dev[0]);
}

static void test_fake_rocm5(void **state) {
  (void)state;
  setenv("KILN_HIP_LIBRARY", KN_FAKE_2, 1);
  setenv("KILN_CUDA_LIBRARY", "none", 1);
  kn_device_list l;
  kn_discover(&l);
  assert_int_equal(l.hip.status, KN_OK);
  assert_int_equal(l.n, 2);
  assert_string_equal(l.dev[0].arch, "gfx90a");
  assert_string_equal(l.dev[0].arch_features, "sramecc+:xnack+");
  assert_string_equal(l.dev[0].target, "gfx90a");
  assert_int_equal(l.dev[0].compute_units, 304);
  assert_ptr_equal(kn_discover_best(&l), &l.dev[0]);
}

static void test_fake_no_devices(void **state) {
  (void)state;
  setenv("KILN_HIP_LIBRARY", KN_FAKE_3, 1);
  setenv("KILN_CUDA_LIBRARY", KN_FAKE_5, 1);
  kn_device_list l;
  kn_discover(&l);
  print_list(&l);
  assert_true(l.hip.loaded);
  assert_int_equal(l.hip.status, KN_E_NODEV);
  assert_non_null(strstr(l.hip.why.message, "no AMD GPU"));
  assert_non_null(strstr(l.hip.why.message, "no ROCm-capable device is detected"));
  assert_true(l.cuda.loaded);
  assert_int_equal(l.cuda.status, KN_E_NODEV);
  assert_non_null(strstr(l.cuda.why.message, "no NVIDIA GPU"));
  assert_non_null(strstr(l.cuda.why.message, "no CUDA-capable device is detected"));
  assert_int_equal(l.n, 1);
  check_host_last(&l);
}

static void test_fake_cuda(void **state) {
  (void)state;
  setenv("KILN_HIP_LIBRARY", KN_FAKE_6, 1); /* an AMD GPU whose arch cannot be read */
  setenv("KILN_CUDA_LIBRARY", KN_FAKE_4, 1);
  kn_device_list l;
  kn_discover(&l);
  print_list(&l);
  assert_int_equal(l.n, 3);
  assert_string_equal(l.dev[0].arch, "unknown");
  assert_string_equal(l.dev[0].target, "");
  const kn_device_info *g = &l.dev[1];
  assert_int_equal(g->kind, KN_DEVICE_CUDA);
  assert_string_equal(g->name, "Fake H200");
  assert_string_equal(g->arch, "sm_90");
  assert_string_equal(g->target, "sm_90a");
  assert_int_equal(g->cc_major, 9);
  assert_int_equal(g->compute_units, 132);
  assert_int_equal(g->memory_bytes, (uint64_t)141 << 30);
  assert_int_equal(l.cuda.version, 12080);
  /* the AMD GPU has no supported target, so the NVIDIA one is the best */
  assert_ptr_equal(kn_discover_best(&l), g);
}

static void test_targets(void **state) {
  (void)state;
  assert_string_equal(kn_discover_amd_target("gfx942"), "gfx942");
  assert_string_equal(kn_discover_amd_target("gfx90a"), "gfx90a");
  assert_string_equal(kn_discover_amd_target("gfx950"), "gfx950");  /* a registry entry: found */
  assert_string_equal(kn_discover_amd_target("gfx908"), "");
  assert_string_equal(kn_discover_amd_target("sm_80"), "");
  assert_string_equal(kn_discover_cuda_target(9, 0), "sm_90a");
  assert_string_equal(kn_discover_cuda_target(8, 6), "sm_80");
  assert_string_equal(kn_discover_cuda_target(10, 0), "sm_80");
  assert_string_equal(kn_discover_cuda_target(7, 5), "");
  /* best: an sm_75 GPU is not used; the host is */
  kn_device_list l = {0};
  l.n = 2;
  l.dev[0].kind = KN_DEVICE_CUDA;
  snprintf(l.dev[0].target, sizeof l.dev[0].target, "%s", kn_discover_cuda_target(7, 5));
  l.dev[1].kind = KN_DEVICE_HOST;
  assert_ptr_equal(kn_discover_best(&l), &l.dev[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_this_machine, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_missing_libraries, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_fake_rocm6, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_fake_rocm5, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_fake_no_devices, clear_env, clear_env),
      cmocka_unit_test_setup_teardown(test_fake_cuda, clear_env, clear_env),
      cmocka_unit_test(test_targets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
