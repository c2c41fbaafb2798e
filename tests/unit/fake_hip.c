/* fake_hip.c — a test-only stand-in for libamdhip64, loaded by runtime/hip.c unchanged through
 * KILN_HIP_LIBRARY (and by discovery, runtime/discover.c, which reads its ROCm 6 properties).
 *
 * One pretend AMD GPU (ROCm 6's symbols; ROCm 5's with -DKN_FAKE_HIP_ROCM5); "device memory" is host memory (malloc), every allocation remembered so a
 * launch can hand the emulator the buffers it may touch.  Every call is validated as a real
 * runtime would, and more strictly:
 *   - hipModuleLoadData: an AMDGPU ELF kiln's reader accepts (codeobj.h), linked (ET_DYN), code
 *     object v4-v6, for the device's chip (EF_AMDGPU_MACH), every kernel's LDS within the chip's
 *     (hipErrorInvalidImage / hipErrorNoBinaryForGpu otherwise);
 *   - hipModuleLaunchKernel: arguments only through `extra` (HIP_LAUNCH_PARAM_BUFFER_POINTER,
 *     _SIZE, _END; kernelParams must be NULL: kiln packs the kernarg segment itself), the buffer
 *     exactly .kernarg_segment_size bytes and aligned to .kernarg_segment_align, the workgroup
 *     equal to the kernel's (.max_flat_workgroup_size work-items), static + dynamic LDS within the
 *     chip's, a grid of 1 to 2^32-1 work-items per dimension, every hidden argument the launch
 *     describes (block counts, group sizes, remainders, grid dims, dynamic LDS size) equal to the
 *     launch's, a stream of this runtime or NULL.  Then the explicit arguments are decoded at
 *     the metadata's offsets and sizes and handed to the test's runner (fake_hip.h), which runs
 *     the emulated twin: a wrong offset, size or grid gives wrong numbers.
 * Why a call failed is kept (kn_fake_hip_last_error) and printed to stderr.
 *
 * Environment (read at every call, so a test may change it between calls):
 *   KILN_FAKE_HIP_ARCH   the device's gcnArchName (default "gfx942:sramecc+:xnack-")
 *   KILN_FAKE_HIP_FAULT  comma-separated faults: load (hipModuleLoadData fails,
 *                        hipErrorSharedObjectInitFailed), launch (hipModuleLaunchKernel fails,
 *                        hipErrorLaunchFailure), oom (hipMalloc fails, hipErrorOutOfMemory),
 *                        chip (the device's properties say one chip but the silicon is another:
 *                        gfx90a for a gfx942, else gfx942; loads fail with hipErrorNoBinaryForGpu),
 *                        nodev (hipGetDeviceCount: hipErrorNoDevice)
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_hip.h"

#define EXPORT __attribute__((visibility("default")))

enum {
  hipSuccess = 0,
  hipErrorInvalidValue = 1,
  hipErrorOutOfMemory = 2,
  hipErrorInvalidDeviceFunction = 98,
  hipErrorNoDevice = 100,
  hipErrorInvalidDevice = 101,
  hipErrorInvalidImage = 200,
  hipErrorNoBinaryForGpu = 209,
  hipErrorSharedObjectInitFailed = 303,
  hipErrorInvalidHandle = 400,
  hipErrorNotFound = 500,
  hipErrorLaunchFailure = 719,
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char last_error[2048];
static int launches;
static kn_fake_hip_runner runner;
static void *runner_user;

enum { MAX_ALLOCS = 4096 };
static kn_region allocs[MAX_ALLOCS];
static int nallocs;

typedef struct ffunc ffunc;
typedef struct fmodule {
  uint32_t magic;
  void *bytes;
  size_t size;
  kn_codeobj co;
  ffunc *funcs;   /* its function handles: the module owns them, as HIP's does */
} fmodule;
struct ffunc {
  uint32_t magic;
  fmodule *m;
  const kn_codeobj_kernel *meta;
  ffunc *next;
};
#define MOD_MAGIC 0x6d6f6446u
#define FN_MAGIC 0x6e754646u
static int stream_obj[64], event_obj[64];
static double event_ms[64]; /* when each event was recorded (the host's clock, ms) */

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&mu);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  fprintf(stderr, "fake libamdhip64: %s\n", last_error);
  pthread_mutex_unlock(&mu);
  va_end(ap);
  return code;
}

static int fault(const char *name) {
  const char *f = getenv("KILN_FAKE_HIP_FAULT");
  if (!f) return 0;
  size_t n = strlen(name);
  for (const char *p = f; (p = strstr(p, name)); p += n)
    if ((p == f || p[-1] == ',') && (p[n] == 0 || p[n] == ',')) return 1;
  return 0;
}

static const char *gcn_arch(void) {
  const char *a = getenv("KILN_FAKE_HIP_ARCH");
  return a && *a ? a : "gfx942:sramecc+:xnack-";
}
/* the chip the silicon is: the properties' one, unless the "chip" fault swaps it */
static void real_chip(char *out, size_t n) {
  const char *a = gcn_arch();
  snprintf(out, n, "%.*s", (int)strcspn(a, ":"), a);
  if (fault("chip")) snprintf(out, n, "%s", strcmp(out, "gfx90a") ? "gfx90a" : "gfx942");
}
/* LDS per workgroup of the chips (CDNA 2/3: 64 KiB; CDNA 4: 160 KiB), stated here on its own */
static uint32_t chip_lds(const char *chip) {
  return !strcmp(chip, "gfx950") ? 160u * 1024 : 64u * 1024;
}

EXPORT void kn_fake_hip_set_runner(kn_fake_hip_runner fn, void *user) {
  pthread_mutex_lock(&mu);
  runner = fn, runner_user = user;
  pthread_mutex_unlock(&mu);
}
EXPORT const char *kn_fake_hip_last_error(void) { return last_error; }
EXPORT int kn_fake_hip_launches(void) { return launches; }

/* ---- the runtime ---- */

EXPORT int hipInit(unsigned flags) { return flags ? hipErrorInvalidValue : hipSuccess; }
EXPORT int hipDriverGetVersion(int *v) { *v = 60342134; return hipSuccess; }
EXPORT const char *hipGetErrorName(int e) {
  switch (e) {
  case hipSuccess: return "hipSuccess";
  case hipErrorInvalidValue: return "hipErrorInvalidValue";
  case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
  case hipErrorInvalidDeviceFunction: return "hipErrorInvalidDeviceFunction";
  case hipErrorNoDevice: return "hipErrorNoDevice";
  case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
  case hipErrorInvalidImage: return "hipErrorInvalidImage";
  case hipErrorNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
  case hipErrorSharedObjectInitFailed: return "hipErrorSharedObjectInitFailed";
  case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
  case hipErrorNotFound: return "hipErrorNotFound";
  case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
  default: return "hipErrorUnknown";
  }
}
EXPORT const char *hipGetErrorString(int e) {
  switch (e) {
  case hipErrorNoDevice: return "no ROCm-capable device is detected";
  case hipErrorOutOfMemory: return "out of memory";
  case hipErrorNoBinaryForGpu: return "no kernel image is available for execution on the device";
  case hipErrorLaunchFailure: return "unspecified launch failure";
  default: return "fake libamdhip64 error";
  }
}
EXPORT int hipGetDeviceCount(int *n) {
  *n = 0;
  if (fault("nodev")) return hipErrorNoDevice;
  *n = 1;
  return hipSuccess;
}
static __thread int current;
EXPORT int hipSetDevice(int d) {
  if (d != 0) return hipErrorInvalidDevice;
  current = d;
  return hipSuccess;
}
EXPORT int hipGetDevice(int *d) { *d = current; return hipSuccess; }
EXPORT int hipDeviceSynchronize(void) { return hipSuccess; }

/* The device properties in the layout of the ROCm release the stand-in plays (runtime/
 * discover.c): ROCm 6 (hipGetDevicePropertiesR0600: totalGlobalMem at 288, multiProcessorCount
 * at 388, gcnArchName at 1160), or, built with KN_FAKE_HIP_ROCM5, ROCm 5 (only the unversioned
 * hipGetDeviceProperties: 256, 336, 396).  The name is at 0 in both. */
static int props(void *props, int d, size_t mem_at, size_t cus_at, size_t arch_at) {
  if (d != 0) return hipErrorInvalidDevice;
  char *p = props;
  char chip[64];
  snprintf(chip, sizeof chip, "%.*s", (int)strcspn(gcn_arch(), ":"), gcn_arch());
  snprintf(p, 256, "Fake AMD Instinct (%s)", chip);
  size_t mem = (size_t)64 << 30;
  int cus = 304;
  memcpy(p + mem_at, &mem, sizeof mem);
  memcpy(p + cus_at, &cus, sizeof cus);
  snprintf(p + arch_at, 256, "%s", gcn_arch());
  return hipSuccess;
}
#ifdef KN_FAKE_HIP_ROCM5
EXPORT int hipGetDeviceProperties(void *p, int d) { return props(p, d, 256, 336, 396); }
#else
EXPORT int hipGetDevicePropertiesR0600(void *p, int d) { return props(p, d, 288, 388, 1160); }
#endif

/* ---- memory ---- */

EXPORT int hipMalloc(void **p, size_t n) {
  *p = NULL;
  if (fault("oom")) return fail(hipErrorOutOfMemory, "hipMalloc(%zu): out of memory (injected)", n);
  void *m = malloc(n ? n : 1);
  if (!m) return hipErrorOutOfMemory;
  pthread_mutex_lock(&mu);
  if (nallocs == MAX_ALLOCS) {
    pthread_mutex_unlock(&mu);
    free(m);
    return hipErrorOutOfMemory;
  }
  allocs[nallocs++] = (kn_region){m, n};
  pthread_mutex_unlock(&mu);
  *p = m;
  return hipSuccess;
}
EXPORT int hipFree(void *p) {
  if (!p) return hipSuccess;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nallocs; i++)
    if (allocs[i].data == p) {
      allocs[i] = allocs[--nallocs];
      pthread_mutex_unlock(&mu);
      free(p);
      return hipSuccess;
    }
  pthread_mutex_unlock(&mu);
  return fail(hipErrorInvalidValue, "hipFree(%p): not an allocation of this runtime", p);
}
/* [p, p+n) inside one allocation? */
static int is_device(const void *p, size_t n) {
  pthread_mutex_lock(&mu);
  int ok = 0;
  for (int i = 0; i < nallocs && !ok; i++) {
    const char *b = allocs[i].data;
    ok = (const char *)p >= b && n <= allocs[i].bytes &&
         (size_t)((const char *)p - b) <= allocs[i].bytes - n;
  }
  pthread_mutex_unlock(&mu);
  return ok;
}
EXPORT int hipMemcpy(void *dst, const void *src, size_t n, int kind) {
  if ((kind == 1 && !is_device(dst, n)) || (kind == 2 && !is_device(src, n)) || kind < 0 ||
      kind > 4)
    return fail(hipErrorInvalidValue, "hipMemcpy(%p, %p, %zu, kind %d): not device memory", dst,
                src, n, kind);
  memmove(dst, src, n);
  return hipSuccess;
}
EXPORT int hipMemset(void *dst, int v, size_t n) {
  if (!is_device(dst, n)) return fail(hipErrorInvalidValue, "hipMemset(%p, %zu): not device memory", dst, n);
  memset(dst, v, n);
  return hipSuccess;
}

/* ---- streams and events (the work is done at the call: every stream is always idle) ---- */

static int known(const int *objs, const void *p) {
  return p >= (const void *)objs && p < (const void *)(objs + 64);
}
EXPORT int hipStreamCreateWithFlags(void **s, unsigned flags) {
  static int next;
  (void)flags;
  pthread_mutex_lock(&mu);
  *s = &stream_obj[next++ % 64];
  pthread_mutex_unlock(&mu);
  return hipSuccess;
}
EXPORT int hipStreamDestroy(void *s) { return known(stream_obj, s) ? hipSuccess : hipErrorInvalidHandle; }
EXPORT int hipStreamSynchronize(void *s) {
  return !s || known(stream_obj, s) ? hipSuccess : hipErrorInvalidHandle;
}
EXPORT int hipEventCreate(void **e) {
  static int next;
  pthread_mutex_lock(&mu);
  *e = &event_obj[next++ % 64];
  pthread_mutex_unlock(&mu);
  return hipSuccess;
}
EXPORT int hipEventDestroy(void *e) { return known(event_obj, e) ? hipSuccess : hipErrorInvalidHandle; }
/* Launches run inside hipModuleLaunchKernel, so an event recorded after one is recorded when
 * it finished: elapsed times measure the emulated runs, on the host's clock. */
EXPORT int hipEventRecord(void *e, void *s) {
  if (!known(event_obj, e) || (s && !known(stream_obj, s))) return hipErrorInvalidHandle;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  pthread_mutex_lock(&mu);
  event_ms[(int *)e - event_obj] = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
  pthread_mutex_unlock(&mu);
  return hipSuccess;
}
EXPORT int hipEventSynchronize(void *e) { return known(event_obj, e) ? hipSuccess : hipErrorInvalidHandle; }
EXPORT int hipEventElapsedTime(float *ms, void *a, void *b) {
  if (!known(event_obj, a) || !known(event_obj, b)) return hipErrorInvalidHandle;
  pthread_mutex_lock(&mu);
  *ms = (float)(event_ms[(int *)b - event_obj] - event_ms[(int *)a - event_obj]);
  pthread_mutex_unlock(&mu);
  return hipSuccess;
}

/* ---- modules ---- */

static uint64_t rd(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* hipModuleLoadData is given no size: the ELF's extent from its headers (sections and the
 * section header table; kiln's code objects end with the latter) */
static size_t elf_extent(const uint8_t *p) {
  if (memcmp(p, "\177ELF", 4) || p[4] != 2) return 0;
  uint64_t shoff = rd(p + 0x28, 8), phoff = rd(p + 0x20, 8);
  unsigned shentsize = (unsigned)rd(p + 0x3a, 2), shnum = (unsigned)rd(p + 0x3c, 2);
  unsigned phentsize = (unsigned)rd(p + 0x36, 2), phnum = (unsigned)rd(p + 0x38, 2);
  if (shentsize != 64 || shnum == 0 || shnum > 4096 || shoff > (1u << 30)) return 0;
  uint64_t end = shoff + (uint64_t)shnum * shentsize;
  if (phoff + (uint64_t)phnum * phentsize > end) end = phoff + (uint64_t)phnum * phentsize;
  for (unsigned i = 0; i < shnum; i++) {
    const uint8_t *s = p + shoff + (uint64_t)i * 64;
    uint32_t type = (uint32_t)rd(s + 4, 4);
    uint64_t off = rd(s + 0x18, 8), size = rd(s + 0x20, 8);
    if (type != 8 /* SHT_NOBITS */ && off + size > end && size < (1u << 30)) end = off + size;
  }
  return (size_t)end;
}

EXPORT int hipModuleLoadData(void **out, const void *image) {
  *out = NULL;
  if (!image) return fail(hipErrorInvalidValue, "hipModuleLoadData: no image");
  if (fault("load"))
    return fail(hipErrorSharedObjectInitFailed, "hipModuleLoadData: load failure (injected)");
  size_t n = elf_extent(image);
  if (!n) return fail(hipErrorInvalidImage, "hipModuleLoadData: not a 64-bit ELF image");
  fmodule *m = calloc(1, sizeof *m);
  if (!m || !(m->bytes = malloc(n))) {
    free(m);
    return hipErrorOutOfMemory;
  }
  memcpy(m->bytes, image, n);
  m->size = n;
  kn_diag d;
  int rc = hipSuccess;
  char chip[64];
  real_chip(chip, sizeof chip);
  if (kn_codeobj_read(m->bytes, n, &m->co, &d)) {
    free(m->bytes), free(m);
    return fail(hipErrorInvalidImage, "hipModuleLoadData: %s", d.message);
  }
  if (m->co.elf_type != 3)
    rc = fail(hipErrorInvalidImage, "hipModuleLoadData: a relocatable object, not a code object");
  else if (m->co.code_object_version < 4 || m->co.code_object_version > 6)
    rc = fail(hipErrorInvalidImage, "hipModuleLoadData: code object v%d", m->co.code_object_version);
  else if (!m->co.target || strcmp(m->co.target->name, chip))
    rc = fail(hipErrorNoBinaryForGpu, "hipModuleLoadData: a code object for %s on a %s",
              m->co.target ? m->co.target->name : "an unknown chip", chip);
  for (int k = 0; rc == hipSuccess && k < m->co.nkernels; k++)
    if (m->co.kernels[k].lds_bytes > chip_lds(chip))
      rc = fail(hipErrorInvalidImage, "hipModuleLoadData: kernel %s needs %u bytes of LDS; %s "
                "has %u", m->co.kernels[k].name, m->co.kernels[k].lds_bytes, chip, chip_lds(chip));
  if (rc != hipSuccess) {
    kn_codeobj_free(&m->co);
    free(m->bytes), free(m);
    return rc;
  }
  m->magic = MOD_MAGIC;
  *out = m;
  return hipSuccess;
}

EXPORT int hipModuleUnload(void *mod) {
  fmodule *m = mod;
  if (!m || m->magic != MOD_MAGIC) return fail(hipErrorInvalidHandle, "hipModuleUnload: not a module");
  m->magic = 0;
  for (ffunc *f = m->funcs, *n; f; f = n) {
    n = f->next;
    f->magic = 0;
    free(f);
  }
  kn_codeobj_free(&m->co);
  free(m->bytes);
  free(m);
  return hipSuccess;
}

EXPORT int hipModuleGetFunction(void **out, void *mod, const char *name) {
  fmodule *m = mod;
  *out = NULL;
  if (!m || m->magic != MOD_MAGIC) return fail(hipErrorInvalidHandle, "hipModuleGetFunction: not a module");
  const kn_codeobj_kernel *k = kn_codeobj_find(&m->co, name);
  if (!k) return fail(hipErrorNotFound, "hipModuleGetFunction: no kernel '%s'", name);
  ffunc *f = calloc(1, sizeof *f);
  if (!f) return hipErrorOutOfMemory;
  *f = (ffunc){FN_MAGIC, m, k, m->funcs};
  m->funcs = f; /* freed with the module (hipModuleUnload), as a real runtime's handles are */
  *out = f;
  return hipSuccess;
}

/* the value a hidden argument must have for this launch, or -1 for one the fake does not check */
static int64_t hidden_expected(const char *kind, const unsigned g[3], const unsigned b[3],
                               unsigned dyn) {
  size_t n = strlen(kind);
  int ax = n > 2 && kind[n - 2] == '_' && kind[n - 1] >= 'x' && kind[n - 1] <= 'z' ? kind[n - 1] - 'x' : -1;
  if (ax >= 0 && !strncmp(kind, "hidden_block_count_", 19)) return g[ax];
  if (ax >= 0 && !strncmp(kind, "hidden_group_size_", 18)) return b[ax];
  if (ax >= 0 && !strncmp(kind, "hidden_remainder_", 17)) return 0;
  if (!strcmp(kind, "hidden_grid_dims")) return g[2] > 1 ? 3 : g[1] > 1 ? 2 : 1;
  if (!strcmp(kind, "hidden_dynamic_lds_size")) return dyn;
  return -1;
}

EXPORT int hipModuleLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned dyn, void *stream,
                                 void **params, void **extra) {
  ffunc *f = fn;
  if (!f || f->magic != FN_MAGIC || f->m->magic != MOD_MAGIC)
    return fail(hipErrorInvalidDeviceFunction, "hipModuleLaunchKernel: not a function");
  const kn_codeobj_kernel *k = f->meta;
  if (stream && !known(stream_obj, stream))
    return fail(hipErrorInvalidHandle, "hipModuleLaunchKernel(%s): not a stream", k->name);
  if (params)
    return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): kernelParams given; kiln "
                "must pack the kernarg segment itself (extra)", k->name);
  if (!extra || extra[0] != (void *)1 || extra[2] != (void *)2 || extra[4] != (void *)3 ||
      !extra[1] || !extra[3])
    return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): extra is not {BUFFER_POINTER, "
                "p, BUFFER_SIZE, &size, END}", k->name);
  const uint8_t *buf = extra[1];
  size_t size = *(size_t *)extra[3];
  if (size != k->kernarg_size)
    return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): a kernarg buffer of %zu bytes; "
                "the kernel's segment is %u", k->name, size, k->kernarg_size);
  if (k->kernarg_align && (uintptr_t)buf % k->kernarg_align)
    return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): kernarg buffer %p not aligned "
                "to %u", k->name, (const void *)buf, k->kernarg_align);
  unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
  if ((uint64_t)bx * by * bz != (uint64_t)k->max_flat_workgroup_size)
    return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): workgroup %ux%ux%u; the kernel "
                "requires %d work-items", k->name, bx, by, bz, k->max_flat_workgroup_size);
  char chip[64];
  real_chip(chip, sizeof chip);
  if ((uint64_t)k->lds_bytes + dyn > chip_lds(chip))
    return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): %u + %u bytes of LDS; %s has %u",
                k->name, k->lds_bytes, dyn, chip, chip_lds(chip));
  for (int i = 0; i < 3; i++)
    if (g[i] == 0 || (uint64_t)g[i] * b[i] > UINT32_MAX)
      return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): grid %ux%ux%u beyond the "
                  "limits", k->name, gx, gy, gz);
  uint64_t values[256];
  int nv = 0;
  for (int i = 0; i < k->nargs; i++) {
    const kn_codeobj_arg *a = &k->args[i];
    if (a->size == 0 || a->size > 8 || (uint64_t)a->offset + a->size > size)
      return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): argument %d at %u+%u", k->name,
                  i, a->offset, a->size);
    uint64_t v = rd(buf + a->offset, (int)a->size);
    if (a->hidden) {
      int64_t want = hidden_expected(a->value_kind, g, b, dyn);
      if (want >= 0 && v != (uint64_t)want)
        return fail(hipErrorInvalidValue, "hipModuleLaunchKernel(%s): hidden argument %s at %u is "
                    "%llu; this launch needs %lld", k->name, a->value_kind, a->offset,
                    (unsigned long long)v, (long long)want);
      continue;
    }
    if (nv == 256) return fail(hipErrorInvalidValue, "too many arguments");
    values[nv++] = v;
  }
  if (fault("launch"))
    return fail(hipErrorLaunchFailure, "hipModuleLaunchKernel(%s): launch failure (injected)", k->name);
  pthread_mutex_lock(&mu);
  kn_fake_hip_runner run = runner;
  void *user = runner_user;
  kn_region regions[MAX_ALLOCS];
  int nr = nallocs;
  memcpy(regions, allocs, sizeof(kn_region) * (size_t)nr);
  pthread_mutex_unlock(&mu);
  if (!run) return fail(hipErrorLaunchFailure, "hipModuleLaunchKernel(%s): no runner registered "
                        "(kn_fake_hip_set_runner)", k->name);
  kn_fake_hip_launch l = {.code_object = f->m->bytes, .code_object_size = f->m->size, .meta = k,
                          .nvalues = nv, .values = values, .grid = {gx, gy, gz},
                          .block = {bx, by, bz}, .regions = regions, .nregions = nr};
  char why[1024] = "";
  if (run(user, &l, why, sizeof why))
    return fail(hipErrorLaunchFailure, "hipModuleLaunchKernel(%s): the emulated run failed: %s",
                k->name, why);
  pthread_mutex_lock(&mu);
  launches++;
  pthread_mutex_unlock(&mu);
  return hipSuccess;
}
