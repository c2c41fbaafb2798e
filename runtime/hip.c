/* hip.c — the HIP device through libamdhip64, dlopen'ed (see hip_device.h for the contract).
 *
 * The runtime's types and constants used here are declared below by hand, with the values of
 * hip_runtime_api.h / driver_types.h (checked against Debian 12's libamdhip64-dev 5.2.3; the
 * same in ROCm 6 and 7): hipError_t is an int (0 = hipSuccess), handles are pointers,
 * hipMemcpyKind 1 = host to device, 2 = device to host, hipStreamNonBlocking = 1, and
 * hipModuleLaunchKernel's `extra` keys HIP_LAUNCH_PARAM_BUFFER_POINTER = (void *)1,
 * HIP_LAUNCH_PARAM_BUFFER_SIZE = (void *)2, HIP_LAUNCH_PARAM_END = (void *)3.
 *
 * Initialisation runs once under pthread_once; its outcome is immutable afterwards and read
 * without locking, as in cuda.c.  A library that was initialised stays loaded (the runtime starts
 * threads).  The hot path (kn_hip_launch) packs on the caller's stack and takes no lock.
 *
 * The kernarg segment (code object v5, LLVM's AMDGPUUsage "Code Object V5 Metadata" and "Kernel
 * Argument Layout"): explicit arguments at their .offset; the hidden ones by .value_kind:
 * hidden_block_count_{x,y,z} u32 (workgroups per dimension), hidden_group_size_{x,y,z} u16,
 * hidden_remainder_{x,y,z} u16 (work-items of the last, partial workgroup: 0 for kiln's grids,
 * which are whole workgroups), hidden_grid_dims u16, hidden_global_offset_{x,y,z} u64 (0),
 * hidden_dynamic_lds_size u32; the runtime-owned pointers (queue, printf, hostcall, heap,
 * multigrid sync, completion action, private/shared bases) are written as 0 — the HIP runtime
 * fills those it needs itself.  A hidden argument of a kind not listed is written as 0 too.
 */
#include "hip_device.h"

#include "bundle.h"
#include "comgr.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the runtime's ABI, declared here (hip_runtime_api.h) ---- */

typedef int hipError_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;

enum { hipSuccess = 0, hipErrorOutOfMemory = 2 };
enum { hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2 };
enum { hipStreamNonBlocking = 1 };
#define KN_HIP_PARAM_BUFFER_POINTER ((void *)0x01)
#define KN_HIP_PARAM_BUFFER_SIZE ((void *)0x02)
#define KN_HIP_PARAM_END ((void *)0x03)

/* X(field, symbol, signature...): every one required, same in ROCm 5, 6 and 7 */
#define KN_HIP_ENTRIES(X)                                                                    \
  X(Init, "hipInit", hipError_t (*)(unsigned))                                               \
  X(DriverGetVersion, "hipDriverGetVersion", hipError_t (*)(int *))                          \
  X(GetErrorName, "hipGetErrorName", const char *(*)(hipError_t))                            \
  X(GetErrorString, "hipGetErrorString", const char *(*)(hipError_t))                        \
  X(GetDeviceCount, "hipGetDeviceCount", hipError_t (*)(int *))                              \
  X(SetDevice, "hipSetDevice", hipError_t (*)(int))                                          \
  X(GetDevice, "hipGetDevice", hipError_t (*)(int *))                                        \
  X(DeviceSynchronize, "hipDeviceSynchronize", hipError_t (*)(void))                         \
  X(ModuleLoadData, "hipModuleLoadData", hipError_t (*)(hipModule_t *, const void *))        \
  X(ModuleUnload, "hipModuleUnload", hipError_t (*)(hipModule_t))                            \
  X(ModuleGetFunction, "hipModuleGetFunction",                                               \
    hipError_t (*)(hipFunction_t *, hipModule_t, const char *))                              \
  X(ModuleLaunchKernel, "hipModuleLaunchKernel",                                             \
    hipError_t (*)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
                   unsigned, hipStream_t, void **, void **))                                 \
  X(Malloc, "hipMalloc", hipError_t (*)(void **, size_t))                                    \
  X(Free, "hipFree", hipError_t (*)(void *))                                                 \
  X(Memcpy, "hipMemcpy", hipError_t (*)(void *, const void *, size_t, int))                  \
  X(Memset, "hipMemset", hipError_t (*)(void *, int, size_t))                                \
  X(StreamCreateWithFlags, "hipStreamCreateWithFlags", hipError_t (*)(hipStream_t *, unsigned)) \
  X(StreamDestroy, "hipStreamDestroy", hipError_t (*)(hipStream_t))                          \
  X(StreamSynchronize, "hipStreamSynchronize", hipError_t (*)(hipStream_t))                  \
  X(EventCreate, "hipEventCreate", hipError_t (*)(hipEvent_t *))                             \
  X(EventDestroy, "hipEventDestroy", hipError_t (*)(hipEvent_t))                             \
  X(EventRecord, "hipEventRecord", hipError_t (*)(hipEvent_t, hipStream_t))                  \
  X(EventSynchronize, "hipEventSynchronize", hipError_t (*)(hipEvent_t))                     \
  X(EventElapsedTime, "hipEventElapsedTime", hipError_t (*)(float *, hipEvent_t, hipEvent_t))

typedef struct kn_hip_api {
#define KN_FIELD(field, sym, ...) __typeof__(__VA_ARGS__) field; /* gnu17 */
  KN_HIP_ENTRIES(KN_FIELD)
#undef KN_FIELD
} kn_hip_api;

static struct {
  kn_hip_api api;
  bool present;
  int count, version;
  char library[512];
  char reason[1024];
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

struct kn_hip_device {
  int ordinal;
  const kn_arch *arch;
  char target_id[64];  /* "gfx942:sramecc+:xnack-" as discovery read it, or just the chip */
};

struct kn_hip_kernel {
  hipFunction_t fn;
  kn_hip_module *mod;
  const kn_codeobj_kernel *meta;
  struct kn_hip_kernel *next;
};

struct kn_hip_module {
  kn_hip_device *dev;
  hipModule_t mod;
  kn_codeobj co;           /* the metadata, read once */
  char meta_why[200];      /* why comgr did not read it ("" when it did) */
  pthread_mutex_t mu;      /* guards the kernel list */
  struct kn_hip_kernel *kernels;
};

/* ---- errors ---- */

static kn_status hip_err(kn_diag *err, const char *call, hipError_t r) {
  const char *name = g.api.GetErrorName ? g.api.GetErrorName(r) : NULL;
  const char *text = g.api.GetErrorString ? g.api.GetErrorString(r) : NULL;
  kn_status s = r == hipErrorOutOfMemory ? KN_E_NOMEM : KN_E_RUNTIME;
  return kn_diag_set(err, s, "%s: %s (%s, hipError %d)", call, name ? name : "hipError",
                     text ? text : "no description", r);
}

/* ---- initialisation ---- */

static void try_load(const char *lib, void **h) {
  *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  snprintf(g.library, sizeof g.library, "%s", lib);
}

static void runtime_init(void) {
  const char *lib = getenv("KILN_HIP_LIBRARY");
  void *h = NULL;
  if (lib && *lib) {
    if (!strcmp(lib, "none")) {
      snprintf(g.library, sizeof g.library, "none");
      snprintf(g.reason, sizeof g.reason, "HIP disabled by KILN_HIP_LIBRARY=none");
      return;
    }
    try_load(lib, &h);
  } else {
    static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.7",
                                        "libamdhip64.so.6", "libamdhip64.so.5"};
    for (int i = 0; i < 4 && !h; i++) try_load(names[i], &h);
  }
  if (!h) {
    const char *e = dlerror();
    snprintf(g.reason, sizeof g.reason, "cannot load the HIP runtime %s: %s", g.library,
             e ? e : "not found");
    return;
  }
  kn_hip_api api;
  memset(&api, 0, sizeof api);
#define KN_RESOLVE(field, sym, ...)                                                          \
  {                                                                                          \
    void *p = dlsym(h, sym);                                                                 \
    if (!p) {                                                                                \
      snprintf(g.reason, sizeof g.reason, "%s lacks the entry point %s", g.library, sym);    \
      dlclose(h);                                                                            \
      return;                                                                                \
    }                                                                                        \
    memcpy(&api.field, &p, sizeof p);                                                        \
  }
  KN_HIP_ENTRIES(KN_RESOLVE)
#undef KN_RESOLVE
  g.api = api;
  hipError_t r = g.api.Init(0);
  if (r != hipSuccess) {
    kn_diag d;
    hip_err(&d, "hipInit", r);
    snprintf(g.reason, sizeof g.reason, "%.500s (library %.500s)", d.message, g.library);
    return;
  }
  g.api.DriverGetVersion(&g.version);
  int n = 0;
  r = g.api.GetDeviceCount(&n);
  if (r != hipSuccess || n <= 0) {
    kn_diag d;
    if (r != hipSuccess) hip_err(&d, "hipGetDeviceCount", r);
    snprintf(g.reason, sizeof g.reason, "%.500s (library %.500s)",
             r != hipSuccess ? d.message : "the HIP runtime reports no device", g.library);
    return;
  }
  g.count = n;
  g.present = true;
}

kn_status kn_hip_init(kn_diag *err) {
  pthread_once(&g_once, runtime_init);
  if (!g.present) return kn_diag_set(err, KN_E_NODEV, "HIP device not present: %s", g.reason);
  kn_diag_clear(err);
  return KN_OK;
}

int kn_hip_device_count(void) {
  pthread_once(&g_once, runtime_init);
  return g.present ? g.count : 0;
}
int kn_hip_driver_version(void) {
  pthread_once(&g_once, runtime_init);
  return g.present ? g.version : 0;
}
const char *kn_hip_library(void) {
  pthread_once(&g_once, runtime_init);
  return g.library;
}

/* ---- devices ---- */

/* makes dev the calling thread's current device */
static kn_status enter(kn_hip_device *dev, kn_diag *err) {
  if (!dev) return kn_diag_set(err, KN_E_INVALID, "no HIP device");
  int cur = -1;
  if (g.api.GetDevice(&cur) == hipSuccess && cur == dev->ordinal) return KN_OK;
  hipError_t r = g.api.SetDevice(dev->ordinal);
  return r == hipSuccess ? KN_OK : hip_err(err, "hipSetDevice", r);
}

#define CALL(dev, err, name, ...)                                                            \
  do {                                                                                       \
    kn_status st_ = enter(dev, err);                                                         \
    if (st_ != KN_OK) return st_;                                                            \
    hipError_t r_ = g.api.name(__VA_ARGS__);                                                 \
    if (r_ != hipSuccess) return hip_err(err, "hip" #name, r_);                              \
    return KN_OK;                                                                            \
  } while (0)

kn_status kn_hip_device_open(int ordinal, const char *arch, kn_hip_device **out, kn_diag *err) {
  *out = NULL;
  kn_status s = kn_hip_init(err);
  if (s != KN_OK) return s;
  if (ordinal < 0 || ordinal >= g.count)
    return kn_diag_set(err, KN_E_INVALID, "no HIP device with ordinal %d (%d present)", ordinal,
                       g.count);
  /* arch: the chip, or the device's whole target ID (the chip, then its features) */
  char chip[32] = "";
  if (arch) snprintf(chip, sizeof chip, "%.*s", (int)strcspn(arch, ":"), arch);
  const kn_arch *a = arch ? kn_arch_get(chip) : NULL;
  if (!a || a->isa != KN_ISA_AMDGPU)
    return kn_diag_set(err, KN_E_UNSUPPORTED, "HIP device %d is a %s; kiln has no target for it",
                       ordinal, arch ? arch : "chip of unknown kind");
  kn_hip_device *d = calloc(1, sizeof *d);
  if (!d) return kn_diag_set(err, KN_E_NOMEM, "out of memory");
  d->ordinal = ordinal;
  d->arch = a;
  snprintf(d->target_id, sizeof d->target_id, "%s", arch);
  s = enter(d, err);
  if (s != KN_OK) {
    free(d);
    return s;
  }
  *out = d;
  return KN_OK;
}

void kn_hip_device_close(kn_hip_device *dev) { free(dev); }
const kn_arch *kn_hip_device_arch(const kn_hip_device *dev) { return dev ? dev->arch : NULL; }

/* ---- modules ---- */

kn_status kn_hip_module_load(kn_hip_device *dev, const void *data, size_t n, kn_hip_module **out,
                             kn_diag *err) {
  *out = NULL;
  if (!dev || !data) return kn_diag_set(err, KN_E_INVALID, "kn_hip_module_load: no device or data");
  const uint8_t *code = data;
  size_t size = n;
  if (kn_bundle_is(data, n)) {
    const void *c;
    kn_status bs = kn_bundle_find(data, n, dev->arch->name, &c, &size, err);
    if (bs != KN_OK) return bs;
    code = c;
  }
  kn_hip_module *m = calloc(1, sizeof *m);
  if (!m) return kn_diag_set(err, KN_E_NOMEM, "out of memory");
  kn_diag d, meta_why;
  if (kn_comgr_codeobj_read(code, size, &m->co, &meta_why, &d)) {
    free(m);
    return kn_diag_set(err, KN_E_INVALID, "not a loadable AMDGPU code object: %s", d.message);
  }
  kn_status s = KN_OK;
  if (m->co.elf_type != 3 /* ET_DYN */)
    s = kn_diag_set(err, KN_E_INVALID, "the code object is a relocatable object, not linked "
                    "(ET_DYN) code");
  else if (m->co.target != dev->arch)
    s = kn_diag_set(err, KN_E_UNSUPPORTED, "the code object is for %s (%s), but HIP device %d "
                    "is a %s", m->co.target ? m->co.target->name : "an unknown chip",
                    m->co.target_id[0] ? m->co.target_id : "no target id", dev->ordinal,
                    dev->arch->name);
  /* (the metadata: comgr's reading where it could, else kiln's -- the same kn_codeobj) */
  /* the target ID's features (xnack, sramecc): the code object's ISA name from comgr where it
   * is present and knows the chip, else from kiln's reader (comgr.h) */
  if (s == KN_OK) {
    char isa[128];
    kn_diag why;
    if (!kn_comgr_isa_name(code, size, isa, sizeof isa, &why))
      kn_codeobj_target_id(&m->co, isa, sizeof isa);
    const char *code_id = isa;
    if (code_id[0]) {
      kn_diag te;
      if (kn_target_id_check(code_id, dev->target_id, &te) != KN_OK)
        s = kn_diag_set(err, KN_E_UNSUPPORTED, "HIP device %d cannot run this code object: %s",
                        dev->ordinal, te.message);
    }
  }
  if (s == KN_OK) s = enter(dev, err);
  if (s == KN_OK) {
    hipError_t r = g.api.ModuleLoadData(&m->mod, code);
    if (r != hipSuccess) s = hip_err(err, "hipModuleLoadData", r);
  }
  if (s != KN_OK) {
    kn_codeobj_free(&m->co);
    free(m);
    return s;
  }
  m->dev = dev;
  snprintf(m->meta_why, sizeof m->meta_why, "%.190s", meta_why.message);
  pthread_mutex_init(&m->mu, NULL);
  *out = m;
  return KN_OK;
}

void kn_hip_module_unload(kn_hip_module *m) {
  if (!m) return;
  if (m->mod && enter(m->dev, NULL) == KN_OK) g.api.ModuleUnload(m->mod);
  for (kn_hip_kernel *k = m->kernels, *n; k; k = n) {
    n = k->next;
    free(k);
  }
  kn_codeobj_free(&m->co);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

kn_status kn_hip_module_kernel(kn_hip_module *m, const char *name, kn_hip_kernel **out,
                               kn_diag *err) {
  *out = NULL;
  if (!m || !name) return kn_diag_set(err, KN_E_INVALID, "kn_hip_module_kernel: no module or name");
  const kn_codeobj_kernel *meta = kn_codeobj_find(&m->co, name);
  if (!meta) return kn_diag_set(err, KN_E_INVALID, "the code object has no kernel '%s'", name);
  kn_status s = KN_OK;
  pthread_mutex_lock(&m->mu);
  kn_hip_kernel *k = m->kernels;
  while (k && k->meta != meta) k = k->next;
  if (!k) {
    hipFunction_t fn = NULL;
    hipError_t r = hipSuccess;
    s = enter(m->dev, err);
    if (s == KN_OK) r = g.api.ModuleGetFunction(&fn, m->mod, name);
    if (s == KN_OK && r != hipSuccess) {
      char call[200];
      snprintf(call, sizeof call, "hipModuleGetFunction(\"%.128s\")", name);
      s = hip_err(err, call, r);
    } else if (s == KN_OK && !(k = calloc(1, sizeof *k))) {
      s = kn_diag_set(err, KN_E_NOMEM, "out of memory");
    } else if (s == KN_OK) {
      *k = (kn_hip_kernel){.fn = fn, .mod = m, .meta = meta, .next = m->kernels};
      m->kernels = k;
    }
  }
  pthread_mutex_unlock(&m->mu);
  if (s == KN_OK) *out = k;
  return s;
}

const kn_codeobj_kernel *kn_hip_kernel_meta(const kn_hip_kernel *k) { return k ? k->meta : NULL; }

const char *kn_hip_module_meta_reader(const kn_hip_module *m, const char **why) {
  if (why) *why = m->meta_why;
  return m->co.meta_reader;
}

/* ---- the kernarg segment ---- */

static void put(uint8_t *p, uint64_t v, uint32_t bytes) {
  for (uint32_t i = 0; i < bytes && i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* the value of a hidden argument of this launch; 0 for those the runtime owns */
static uint64_t hidden_value(const char *kind, const unsigned grid[3], const unsigned block[3],
                             unsigned dyn_lds) {
  static const char *const axes = "xyz";
  size_t n = strlen(kind);
  int ax = n > 2 && kind[n - 2] == '_' && strchr(axes, kind[n - 1]) ? (int)(kind[n - 1] - 'x') : -1;
  if (ax >= 0 && !strncmp(kind, "hidden_block_count_", 19)) return grid[ax];
  if (ax >= 0 && !strncmp(kind, "hidden_group_size_", 18)) return block[ax];
  if (!strcmp(kind, "hidden_grid_dims")) return grid[2] > 1 ? 3 : grid[1] > 1 ? 2 : 1;
  if (!strcmp(kind, "hidden_dynamic_lds_size")) return dyn_lds;
  /* hidden_remainder_*: whole workgroups; hidden_global_offset_*: none; the rest: the runtime's */
  return 0;
}

int kn_hip_test_swap;

kn_status kn_hip_pack_kernargs(const kn_codeobj_kernel *meta, const unsigned grid[3],
                               const unsigned block[3], unsigned dyn_lds, const kn_hip_arg *args,
                               int nargs, uint8_t *buf, size_t *size, kn_diag *err) {
  if (meta->kernarg_size > KN_HIP_KERNARG_MAX)
    return kn_diag_set(err, KN_E_UNSUPPORTED, "kernel %s: a kernarg segment of %u bytes (kiln "
                       "packs at most %d)", meta->name, meta->kernarg_size, KN_HIP_KERNARG_MAX);
  if (meta->kernarg_align > 16 || (meta->kernarg_align & (meta->kernarg_align - 1)))
    return kn_diag_set(err, KN_E_UNSUPPORTED, "kernel %s: kernarg segment alignment %u",
                       meta->name, meta->kernarg_align);
  int explicit_n = meta->nargs - meta->nhidden;
  if (nargs != explicit_n)
    return kn_diag_set(err, KN_E_INVALID, "kernel %s takes %d arguments; %d given", meta->name,
                       explicit_n, nargs);
  memset(buf, 0, meta->kernarg_size);
  int e = 0;
  for (int i = 0; i < meta->nargs; i++) {
    const kn_codeobj_arg *a = &meta->args[i];
    if ((uint64_t)a->offset + a->size > meta->kernarg_size || a->size == 0)
      return kn_diag_set(err, KN_E_INVALID, "kernel %s: argument %d (%s) at %u+%u lies outside "
                         "the %u-byte kernarg segment", meta->name, i, a->value_kind, a->offset,
                         a->size, meta->kernarg_size);
    if (a->hidden) {
      put(buf + a->offset, hidden_value(a->value_kind, grid, block, dyn_lds), a->size);
      continue;
    }
    if (!args[e].value || args[e].size != a->size)
      return kn_diag_set(err, KN_E_INVALID, "kernel %s: argument %d (%s%s%s) is %u bytes in the "
                         "code object; %u given", meta->name, e, a->value_kind,
                         a->name[0] ? " " : "", a->name, a->size, args[e].size);
    int from = e;
    if (kn_hip_test_swap > 0 && kn_hip_test_swap + 1 < nargs &&
        args[kn_hip_test_swap].size == args[kn_hip_test_swap + 1].size)
      from = e == kn_hip_test_swap ? e + 1 : e == kn_hip_test_swap + 1 ? e - 1 : e;
    memcpy(buf + a->offset, args[from].value, a->size);
    e++;
  }
  *size = meta->kernarg_size;
  return KN_OK;
}

kn_status kn_hip_launch(kn_hip_kernel *k, const unsigned grid[3], const unsigned block[3],
                        unsigned dyn_lds, kn_hip_stream stream, const kn_hip_arg *args,
                        int nargs, kn_diag *err) {
  if (!k || !grid || !block || (nargs && !args))
    return kn_diag_set(err, KN_E_INVALID, "kn_hip_launch: bad arguments");
  const kn_codeobj_kernel *meta = k->meta;
  const kn_arch *arch = k->mod->dev->arch;
  uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
  if (threads != (uint64_t)meta->max_flat_workgroup_size)
    return kn_diag_set(err, KN_E_INVALID, "kernel %s runs in workgroups of exactly %d "
                       "work-items; launched with %ux%ux%u", meta->name,
                       meta->max_flat_workgroup_size, block[0], block[1], block[2]);
  if ((uint64_t)meta->lds_bytes + dyn_lds > (uint64_t)arch->shared_bytes)
    return kn_diag_set(err, KN_E_UNSUPPORTED, "kernel %s needs %u + %u bytes of LDS; %s has %lld",
                       meta->name, meta->lds_bytes, dyn_lds, arch->name,
                       (long long)arch->shared_bytes);
  for (int i = 0; i < 3; i++)
    if (grid[i] == 0 || (uint64_t)grid[i] * block[i] > UINT32_MAX)
      return kn_diag_set(err, KN_E_UNSUPPORTED, "kernel %s: grid %ux%ux%u of %ux%ux%u "
                         "workgroups is beyond HIP's (1 to 2^32-1 work-items per dimension)",
                         meta->name, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
  _Alignas(16) uint8_t buf[KN_HIP_KERNARG_MAX];
  size_t size = 0;
  kn_status s = kn_hip_pack_kernargs(meta, grid, block, dyn_lds, args, nargs, buf, &size, err);
  if (s != KN_OK) return s;
  s = enter(k->mod->dev, err);
  if (s != KN_OK) return s;
  void *extra[] = {KN_HIP_PARAM_BUFFER_POINTER, buf, KN_HIP_PARAM_BUFFER_SIZE, &size,
                   KN_HIP_PARAM_END};
  hipError_t r = g.api.ModuleLaunchKernel(k->fn, grid[0], grid[1], grid[2], block[0], block[1],
                                          block[2], dyn_lds, (hipStream_t)stream, NULL, extra);
  if (r != hipSuccess) {
    char call[256];
    snprintf(call, sizeof call, "hipModuleLaunchKernel(%.128s, grid %ux%ux%u, block %ux%ux%u)",
             meta->name, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    return hip_err(err, call, r);
  }
  return KN_OK;
}

/* ---- memory, streams, events ---- */

kn_status kn_hip_alloc(kn_hip_device *dev, size_t bytes, void **out, kn_diag *err) {
  *out = NULL;
  CALL(dev, err, Malloc, out, bytes);
}
kn_status kn_hip_free(kn_hip_device *dev, void *p, kn_diag *err) { CALL(dev, err, Free, p); }
kn_status kn_hip_copy_htod(kn_hip_device *dev, void *dst, const void *src, size_t bytes,
                           kn_diag *err) {
  CALL(dev, err, Memcpy, dst, src, bytes, hipMemcpyHostToDevice);
}
kn_status kn_hip_copy_dtoh(kn_hip_device *dev, void *dst, const void *src, size_t bytes,
                           kn_diag *err) {
  CALL(dev, err, Memcpy, dst, src, bytes, hipMemcpyDeviceToHost);
}
kn_status kn_hip_memset8(kn_hip_device *dev, void *dst, unsigned char v, size_t bytes,
                         kn_diag *err) {
  CALL(dev, err, Memset, dst, v, bytes);
}
kn_status kn_hip_stream_create(kn_hip_device *dev, kn_hip_stream *out, kn_diag *err) {
  CALL(dev, err, StreamCreateWithFlags, (hipStream_t *)out, hipStreamNonBlocking);
}
void kn_hip_stream_destroy(kn_hip_device *dev, kn_hip_stream s) {
  if (s && enter(dev, NULL) == KN_OK) g.api.StreamDestroy((hipStream_t)s);
}
kn_status kn_hip_stream_sync(kn_hip_device *dev, kn_hip_stream s, kn_diag *err) {
  CALL(dev, err, StreamSynchronize, (hipStream_t)s);
}
kn_status kn_hip_device_sync(kn_hip_device *dev, kn_diag *err) {
  CALL(dev, err, DeviceSynchronize);
}
kn_status kn_hip_event_create(kn_hip_device *dev, kn_hip_event *out, kn_diag *err) {
  CALL(dev, err, EventCreate, (hipEvent_t *)out);
}
void kn_hip_event_destroy(kn_hip_device *dev, kn_hip_event e) {
  if (e && enter(dev, NULL) == KN_OK) g.api.EventDestroy((hipEvent_t)e);
}
kn_status kn_hip_event_record(kn_hip_device *dev, kn_hip_event e, kn_hip_stream s, kn_diag *err) {
  CALL(dev, err, EventRecord, (hipEvent_t)e, (hipStream_t)s);
}
kn_status kn_hip_event_sync(kn_hip_device *dev, kn_hip_event e, kn_diag *err) {
  CALL(dev, err, EventSynchronize, (hipEvent_t)e);
}
kn_status kn_hip_event_elapsed(kn_hip_device *dev, kn_hip_event a, kn_hip_event b, float *ms,
                               kn_diag *err) {
  CALL(dev, err, EventElapsedTime, ms, (hipEvent_t)a, (hipEvent_t)b);
}
