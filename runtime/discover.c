/* discover.c — finding HIP, CUDA and host devices at run time (see discover.h).
 *
 * Only a handful of driver entry points are used, declared here with the C types of their ABI
 * (enums and handles are ints), resolved by dlsym.  Nothing from a vendor header is included,
 * so kiln builds on a machine with neither SDK.
 *
 * HIP device properties and the ROCm 5 -> 6 ABI break.  The AMD arch name ("gfx942:sramecc+:
 * xnack-") is only available as hipDeviceProp_t::gcnArchName, and ROCm 6.0 changed that struct:
 * it grew CUDA 12's fields (uuid, luid, many texture limits, reserved[63], hipReserved[32]) and
 * moved the HIP-only members to its end.  The header now maps hipGetDeviceProperties to a
 * versioned symbol hipGetDevicePropertiesR0600 (struct hipDeviceProp_tR0600), while the
 * library keeps exporting the unversioned hipGetDeviceProperties (and
 * hipGetDevicePropertiesR0000) with the old layout — see ROCm/ROCm#2728 ("When an application
 * loads the HIP runtime library dynamically from ROCm 6.0 ... [it] incorrectly uses the
 * hipDeviceGetProperties API from a previous ROCm release"), ROCm/clr#151 (the unversioned
 * export still fills the ROCm 5 layout) and llvm/llvm-project#167695 (offload-arch crashed
 * on this; gcnArchName moved "from 396 to 1160 bytes").  A dlopen'ing caller must therefore
 * pick the symbol and the layout together:
 *   hipGetDevicePropertiesR0600 present (ROCm >= 6): R0600 layout
 *       name @0, totalGlobalMem @288, multiProcessorCount @388, gcnArchName @1160, size 1472
 *   otherwise hipGetDeviceProperties (ROCm 5): R0000 layout
 *       name @0, totalGlobalMem @256, multiProcessorCount @336, gcnArchName @396, size 792
 * (offsets of the x86-64 layout; R0000 checked against the hip_runtime_api.h of Debian 12's
 * libamdhip64-dev 5.2.3, R0600 computed from the field list of hipDeviceProp_tR0600.)  The
 * call writes into an 8 KiB zeroed buffer, larger than either struct, so a runtime whose
 * struct grew again cannot write past it; and the fields read are checked for sanity (NUL
 * terminated, arch beginning with "gfx") before they are believed — a failed check reports
 * the device with an unknown arch instead of guessing.  The ABI-stable calls (hipGetDeviceCount,
 * hipDriverGetVersion, hipGetErrorString) are used for everything else.
 *
 * CUDA: cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute (compute
 * capability = attributes 75/76, SM count = 16), cuDeviceTotalMem_v2: all stable since CUDA 4.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "arch.h"
#include "discover.h"

#define PER_DRIVER_MAX 16

const char *kn_device_kind_str(kn_device_kind kind) {
  switch (kind) {
  case KN_DEVICE_HOST: return "host";
  case KN_DEVICE_HIP: return "hip";
  case KN_DEVICE_CUDA: return "cuda";
  }
  return "?";
}

const char *kn_discover_amd_target(const char *gfx) {
  /* the AMDGPU targets of the registry (compiler/arch.c) */
  const kn_arch *a = kn_arch_get(gfx);
  return a && a->isa == KN_ISA_AMDGPU ? a->name : "";
}

const char *kn_discover_cuda_target(int major, int minor) {
  /* the registry's NVIDIA targets: one for exactly this capability ("a" targets use
   * instructions of that generation only) wins over one for any later GPU (sm_80: PTX the
   * driver JIT-compiles for whatever GPU it runs on); the newest such first */
  const kn_arch *any = NULL;
  for (int i = 0; kn_arch_at(i); i++) {
    const kn_arch *a = kn_arch_at(i);
    if (a->isa != KN_ISA_NVPTX) continue;
    if (a->cc_exact && a->cc_major == major && a->cc_minor == minor) return a->name;
    bool fits = !a->cc_exact && (major > a->cc_major || (major == a->cc_major && minor >= a->cc_minor));
    if (fits && (!any || a->cc_major > any->cc_major)) any = a;
  }
  return any ? any->name : "";
}

/* copies, truncating to size - 1 bytes (names from drivers are bounded by our buffers) */
static void copy_str(char *dst, size_t size, const char *src) {
  size_t n = 0;
  for (; src && src[n] && n + 1 < size; n++) dst[n] = src[n];
  dst[n] = 0;
}

/* the library named by the override variable, or the candidates in order; returns the handle
 * or NULL with r->library/why filled */
static void *load_driver(kn_driver_report *r, const char *env, const char *const *candidates,
                         int ncand) {
  const char *over = getenv(env);
  if (over && *over) {
    if (!strcmp(over, "none")) {
      copy_str(r->library, sizeof r->library, "none");
      kn_diag_set(&r->why, KN_E_NODEV, "disabled by %s=none", env);
      return NULL;
    }
    candidates = &over;
    ncand = 1;
  }
  char last[384] = "";
  for (int i = 0; i < ncand; i++) {
    copy_str(r->library, sizeof r->library, candidates[i]);
    void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    const char *e = dlerror();
    copy_str(last, sizeof last, e ? e : "unknown dlopen error");
  }
  if (ncand == 1)
    kn_diag_set(&r->why, KN_E_NODEV, "cannot load %s: %s", candidates[0], last);
  else
    kn_diag_set(&r->why, KN_E_NODEV, "cannot load %s (nor %d other names; last error: %s)",
                candidates[0], ncand - 1, last);
  return NULL;
}

static void *sym(void *lib, const char *name, kn_driver_report *r) {
  void *p = dlsym(lib, name);
  if (!p && !r->why.message[0])
    kn_diag_set(&r->why, KN_E_NODEV, "%s has no symbol %s", r->library, name);
  return p;
}

/* ---- HIP ---- */

typedef int (*hip_count_fn)(int *count);
typedef int (*hip_version_fn)(int *version);
typedef int (*hip_props_fn)(void *props, int ordinal);
typedef const char *(*hip_errstr_fn)(int err);

typedef struct hip_layout {
  const char *symbol;
  size_t total_mem, cu_count, arch_name; /* byte offsets, see the file comment */
} hip_layout;

static const hip_layout kHipR0600 = {"hipGetDevicePropertiesR0600", 288, 388, 1160};
static const hip_layout kHipR0000 = {"hipGetDeviceProperties", 256, 336, 396};

/* a NUL-terminated string of printable characters within n bytes */
static bool sane_string(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  if (len == 0 || len == n) return false;
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return false;
  return true;
}

static void discover_hip(kn_device_list *out) {
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                                      "libamdhip64.so.5"};
  kn_driver_report *r = &out->hip;
  void *lib = load_driver(r, "KILN_HIP_LIBRARY", names, 4);
  if (!lib) return;
  hip_count_fn count = (hip_count_fn)sym(lib, "hipGetDeviceCount", r);
  hip_errstr_fn errstr = (hip_errstr_fn)dlsym(lib, "hipGetErrorString");
  hip_version_fn version = (hip_version_fn)dlsym(lib, "hipDriverGetVersion");
  const hip_layout *layout = &kHipR0600;
  hip_props_fn props = (hip_props_fn)dlsym(lib, kHipR0600.symbol);
  if (!props) {
    layout = &kHipR0000;
    props = (hip_props_fn)sym(lib, kHipR0000.symbol, r);
  }
  if (!count || !props) {
    dlclose(lib); /* nothing was called, so nothing was started: safe to unload */
    return;
  }
  r->loaded = true;
  if (version) version(&r->version);
  int n = 0, err = count(&n);
  if (err != 0) {
    kn_diag_set(&r->why, KN_E_NODEV, "no AMD GPU: hipGetDeviceCount failed: %s (hipError %d)",
                errstr ? errstr(err) : "unknown error", err);
    return;
  }
  if (n <= 0) {
    kn_diag_set(&r->why, KN_E_NODEV, "no AMD GPU: the HIP runtime reports 0 devices");
    return;
  }
  r->device_count = n;
  /* 8 KiB, larger than any hipDeviceProp_t so far (1472 bytes); aligned for its size_t fields */
  enum { PROPS_BYTES = 8192 };
  char *buf = aligned_alloc(64, PROPS_BYTES);
  if (!buf) {
    r->status = kn_diag_set(&r->why, KN_E_NOMEM, "out of memory reading HIP device properties");
    return;
  }
  r->status = KN_OK;
  for (int i = 0; i < n && i < PER_DRIVER_MAX && out->n < KN_MAX_DEVICES - 1; i++) {
    kn_device_info *d = &out->dev[out->n++];
    memset(d, 0, sizeof *d);
    d->kind = KN_DEVICE_HIP;
    d->ordinal = i;
    memset(buf, 0, PROPS_BYTES);
    int e = props(buf, i);
    if (e != 0) {
      snprintf(d->name, sizeof d->name, "AMD GPU %d (%s failed: %s)", i, layout->symbol,
               errstr ? errstr(e) : "unknown error");
      copy_str(d->arch, sizeof d->arch, "unknown");
      continue;
    }
    copy_str(d->name, sizeof d->name, sane_string(buf, 256) ? buf : "AMD GPU");
    const char *gcn = buf + layout->arch_name;
    if (sane_string(gcn, 256) && !strncmp(gcn, "gfx", 3)) {
      /* "gfx90a:sramecc+:xnack-": the processor, then target features */
      size_t base = strcspn(gcn, ":");
      snprintf(d->arch, sizeof d->arch, "%.*s", (int)base, gcn);
      if (gcn[base] == ':') copy_str(d->arch_features, sizeof d->arch_features, gcn + base + 1);
      copy_str(d->target, sizeof d->target, kn_discover_amd_target(d->arch));
    } else {
      copy_str(d->arch, sizeof d->arch, "unknown");
    }
    uint64_t mem;
    int cus;
    memcpy(&mem, buf + layout->total_mem, sizeof mem);
    memcpy(&cus, buf + layout->cu_count, sizeof cus);
    d->memory_bytes = mem;
    d->compute_units = cus > 0 && cus < 65536 ? cus : 0;
  }
  free(buf);
}

/* ---- CUDA ---- */

typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_int_fn)(int *v);
typedef int (*cu_get_fn)(int *dev, int ordinal);
typedef int (*cu_name_fn)(char *name, int len, int dev);
typedef int (*cu_attr_fn)(int *v, int attr, int dev);
typedef int (*cu_mem_fn)(size_t *bytes, int dev);
typedef int (*cu_errstr_fn)(int err, const char **s);

enum { /* CUdevice_attribute values */
  CU_ATTR_SM_COUNT = 16,
  CU_ATTR_CC_MAJOR = 75,
  CU_ATTR_CC_MINOR = 76,
};

static const char *cu_error(cu_errstr_fn f, int err) {
  const char *s = NULL;
  if (f && f(err, &s) == 0 && s) return s;
  return "unknown error";
}

static void discover_cuda(kn_device_list *out) {
  static const char *const names[] = {"libcuda.so.1", "libcuda.so"};
  kn_driver_report *r = &out->cuda;
  void *lib = load_driver(r, "KILN_CUDA_LIBRARY", names, 2);
  if (!lib) return;
  cu_init_fn init = (cu_init_fn)sym(lib, "cuInit", r);
  cu_int_fn version = (cu_int_fn)sym(lib, "cuDriverGetVersion", r);
  cu_int_fn count = (cu_int_fn)sym(lib, "cuDeviceGetCount", r);
  cu_get_fn get = (cu_get_fn)sym(lib, "cuDeviceGet", r);
  cu_name_fn name = (cu_name_fn)sym(lib, "cuDeviceGetName", r);
  cu_attr_fn attr = (cu_attr_fn)sym(lib, "cuDeviceGetAttribute", r);
  cu_mem_fn mem = (cu_mem_fn)sym(lib, "cuDeviceTotalMem_v2", r);
  cu_errstr_fn errstr = (cu_errstr_fn)dlsym(lib, "cuGetErrorString");
  if (!init || !version || !count || !get || !name || !attr || !mem) {
    dlclose(lib);
    return;
  }
  r->loaded = true;
  int err = init(0);
  if (err != 0) {
    kn_diag_set(&r->why, KN_E_NODEV, "no NVIDIA GPU: cuInit failed: %s (CUresult %d)",
                cu_error(errstr, err), err);
    return;
  }
  version(&r->version);
  int n = 0;
  if ((err = count(&n)) != 0) {
    kn_diag_set(&r->why, KN_E_NODEV, "no NVIDIA GPU: cuDeviceGetCount failed: %s (CUresult %d)",
                cu_error(errstr, err), err);
    return;
  }
  if (n <= 0) {
    kn_diag_set(&r->why, KN_E_NODEV, "no NVIDIA GPU: the CUDA driver reports 0 devices");
    return;
  }
  r->device_count = n;
  r->status = KN_OK;
  for (int i = 0; i < n && i < PER_DRIVER_MAX && out->n < KN_MAX_DEVICES - 1; i++) {
    kn_device_info *d = &out->dev[out->n++];
    memset(d, 0, sizeof *d);
    d->kind = KN_DEVICE_CUDA;
    d->ordinal = i;
    int dev = 0;
    if ((err = get(&dev, i)) != 0) {
      snprintf(d->name, sizeof d->name, "NVIDIA GPU %d (cuDeviceGet failed: %s)", i, cu_error(errstr, err));
      copy_str(d->arch, sizeof d->arch, "unknown");
      continue;
    }
    if (name(d->name, (int)sizeof d->name, dev) != 0) copy_str(d->name, sizeof d->name, "NVIDIA GPU");
    d->name[sizeof d->name - 1] = 0;
    int v = 0;
    if (attr(&v, CU_ATTR_CC_MAJOR, dev) == 0) d->cc_major = v;
    if (attr(&v, CU_ATTR_CC_MINOR, dev) == 0) d->cc_minor = v;
    if (attr(&v, CU_ATTR_SM_COUNT, dev) == 0) d->compute_units = v;
    size_t bytes = 0;
    if (mem(&bytes, dev) == 0) d->memory_bytes = bytes;
    if (d->cc_major > 0) {
      snprintf(d->arch, sizeof d->arch, "sm_%d%d", d->cc_major, d->cc_minor);
      copy_str(d->target, sizeof d->target, kn_discover_cuda_target(d->cc_major, d->cc_minor));
    } else {
      copy_str(d->arch, sizeof d->arch, "unknown");
    }
  }
}

/* ---- host ---- */

static void discover_host(kn_device_info *d) {
  memset(d, 0, sizeof *d);
  d->kind = KN_DEVICE_HOST;
  struct utsname u;
  copy_str(d->arch, sizeof d->arch, uname(&u) == 0 ? u.machine : "unknown");
  copy_str(d->target, sizeof d->target, "host");
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  d->compute_units = cpus > 0 ? (int)cpus : 1;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) d->memory_bytes = (uint64_t)pages * (uint64_t)page;
  /* "model name : ..." on x86; arm64 kernels have no such line, and the arch name stands in */
  copy_str(d->name, sizeof d->name, d->arch);
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *v = strchr(line, ':');
    if (!v) continue;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    size_t len = strcspn(v, "\n");
    if (len) snprintf(d->name, sizeof d->name, "%.*s", (int)len, v);
    break;
  }
  fclose(f);
}

void kn_discover(kn_device_list *out) {
  memset(out, 0, sizeof *out);
  out->hip.status = out->cuda.status = KN_E_NODEV; /* until a driver shows a device */
  discover_hip(out);
  discover_cuda(out);
  discover_host(&out->dev[out->n++]);
}

const kn_device_info *kn_discover_best(const kn_device_list *l) {
  const kn_device_info *host = NULL;
  for (int i = 0; i < l->n; i++)
    if (l->dev[i].kind == KN_DEVICE_HIP && l->dev[i].target[0]) return &l->dev[i];
  for (int i = 0; i < l->n; i++)
    if (l->dev[i].kind == KN_DEVICE_CUDA && l->dev[i].target[0]) return &l->dev[i];
  for (int i = 0; i < l->n; i++)
    if (l->dev[i].kind == KN_DEVICE_HOST) host = &l->dev[i];
  return host;
}
