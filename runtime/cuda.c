/* cuda.c — the CUDA device through the driver API, dlopen'ed (see cuda_device.h for the contract).
 *
 * The driver's types and constants used here are declared below by hand, with the values the
 * CUDA Driver API reference gives (docs.nvidia.com/cuda/cuda-driver-api, "Data types used by
 * CUDA driver" and the module, execution control, memory, stream and event sections); they have
 * been stable since CUDA 4.0 and are ABI, so a newer driver keeps them.  Where the API versioned
 * an entry point (the _v2 suffix, e.g. when CUdeviceptr became 64-bit or cuEventElapsedTime
 * changed its recording rules) we ask dlsym for the versioned symbol, which is what cuda.h's
 * macros map the plain names to; for cuEventElapsedTime the unversioned symbol is the fallback
 * for drivers older than 12.8.
 *
 * Initialisation runs once under pthread_once and its outcome (the table of entry points, or
 * the reason the device is not present) is immutable afterwards, so every later call reads it
 * without locking.  The hot path (kn_cuda_launch) takes no lock of ours: the only shared
 * mutable state is a kernel's "dynamic shared memory limit already raised to" value, read
 * atomically and raised under the kernel's mutex.
 */
#include "cuda_device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver's ABI, declared here (CUDA Driver API reference) ---- */

typedef int CUresult;              /* enum cudaError_enum; 0 = CUDA_SUCCESS */
typedef int CUdevice;              /* an ordinal-like handle */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on 64-bit hosts */

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_NOT_FOUND = 500,
};

/* CUdevice_attribute */
enum {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

/* CUfunction_attribute */
enum {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

/* CUjit_option: the value of each is passed cast to void* (a pointer or an integer) */
typedef int CUjit_option;
enum {
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_LOG_VERBOSE = 12,
};

enum { CU_STREAM_NON_BLOCKING = 1, CU_EVENT_DEFAULT = 0 };

/* a block gets this much shared memory without opting in (all architectures since Fermi) */
#define KN_CUDA_DEFAULT_SHARED (48 * 1024)
/* the JIT's log buffers; PTX errors for kiln kernels fit easily, longer logs are cut */
#define KN_CUDA_JIT_LOG_BYTES (16 * 1024)

/* ---- the entry points ---- */

/* X(field, symbol, required, signature...) */
#define KN_CUDA_ENTRIES(X)                                                                   \
  X(Init, "cuInit", true, CUresult (*)(unsigned))                                            \
  X(DriverGetVersion, "cuDriverGetVersion", true, CUresult (*)(int *))                       \
  X(GetErrorName, "cuGetErrorName", true, CUresult (*)(CUresult, const char **))             \
  X(GetErrorString, "cuGetErrorString", true, CUresult (*)(CUresult, const char **))         \
  X(DeviceGetCount, "cuDeviceGetCount", true, CUresult (*)(int *))                           \
  X(DeviceGet, "cuDeviceGet", true, CUresult (*)(CUdevice *, int))                           \
  X(DeviceGetName, "cuDeviceGetName", true, CUresult (*)(char *, int, CUdevice))             \
  X(DeviceGetAttribute, "cuDeviceGetAttribute", true, CUresult (*)(int *, int, CUdevice))    \
  X(DeviceTotalMem, "cuDeviceTotalMem_v2", true, CUresult (*)(size_t *, CUdevice))           \
  X(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", true, CUresult (*)(CUcontext *, CUdevice)) \
  X(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", true, CUresult (*)(CUdevice))         \
  X(CtxGetCurrent, "cuCtxGetCurrent", true, CUresult (*)(CUcontext *))                       \
  X(CtxPushCurrent, "cuCtxPushCurrent_v2", true, CUresult (*)(CUcontext))                    \
  X(CtxPopCurrent, "cuCtxPopCurrent_v2", true, CUresult (*)(CUcontext *))                    \
  X(CtxSynchronize, "cuCtxSynchronize", true, CUresult (*)(void))                            \
  X(ModuleLoadDataEx, "cuModuleLoadDataEx", true,                                            \
    CUresult (*)(CUmodule *, const void *, unsigned, CUjit_option *, void **))               \
  X(ModuleUnload, "cuModuleUnload", true, CUresult (*)(CUmodule))                            \
  X(ModuleGetFunction, "cuModuleGetFunction", true,                                          \
    CUresult (*)(CUfunction *, CUmodule, const char *))                                      \
  X(FuncGetAttribute, "cuFuncGetAttribute", true, CUresult (*)(int *, int, CUfunction))      \
  X(FuncSetAttribute, "cuFuncSetAttribute", true, CUresult (*)(CUfunction, int, int))        \
  X(LaunchKernel, "cuLaunchKernel", true,                                                    \
    CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,     \
                 unsigned, CUstream, void **, void **))                                      \
  X(MemAlloc, "cuMemAlloc_v2", true, CUresult (*)(CUdeviceptr *, size_t))                    \
  X(MemFree, "cuMemFree_v2", true, CUresult (*)(CUdeviceptr))                                \
  X(MemcpyHtoD, "cuMemcpyHtoD_v2", true, CUresult (*)(CUdeviceptr, const void *, size_t))    \
  X(MemcpyDtoH, "cuMemcpyDtoH_v2", true, CUresult (*)(void *, CUdeviceptr, size_t))          \
  X(MemcpyDtoD, "cuMemcpyDtoD_v2", true, CUresult (*)(CUdeviceptr, CUdeviceptr, size_t))     \
  X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", true,                                           \
    CUresult (*)(CUdeviceptr, const void *, size_t, CUstream))                               \
  X(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", true,                                           \
    CUresult (*)(void *, CUdeviceptr, size_t, CUstream))                                     \
  X(MemsetD8, "cuMemsetD8_v2", true, CUresult (*)(CUdeviceptr, unsigned char, size_t))       \
  X(StreamCreate, "cuStreamCreate", true, CUresult (*)(CUstream *, unsigned))                \
  X(StreamDestroy, "cuStreamDestroy_v2", true, CUresult (*)(CUstream))                       \
  X(StreamSynchronize, "cuStreamSynchronize", true, CUresult (*)(CUstream))                  \
  X(EventCreate, "cuEventCreate", true, CUresult (*)(CUevent *, unsigned))                   \
  X(EventDestroy, "cuEventDestroy_v2", true, CUresult (*)(CUevent))                          \
  X(EventRecord, "cuEventRecord", true, CUresult (*)(CUevent, CUstream))                     \
  X(EventSynchronize, "cuEventSynchronize", true, CUresult (*)(CUevent))                     \
  X(EventElapsedTime, "cuEventElapsedTime_v2", false, CUresult (*)(float *, CUevent, CUevent))

typedef struct kn_cuda_api {
#define KN_FIELD(field, sym, req, ...) __typeof__(__VA_ARGS__) field; /* gnu17 */
  KN_CUDA_ENTRIES(KN_FIELD)
#undef KN_FIELD
} kn_cuda_api;

/* written once by driver_init (under pthread_once), read-only afterwards */
static struct {
  kn_cuda_api api;
  void *handle;
  bool present;
  int count;
  int version;
  char library[512];
  char reason[1024];
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

struct kn_cuda_device {
  int ordinal;
  CUdevice dev;
  CUcontext ctx;
  kn_cuda_props props;
};

struct kn_cuda_kernel {
  CUfunction fn;
  kn_cuda_device *dev;
  char *name;
  _Atomic int dyn_limit;    /* the MAX_DYNAMIC_SHARED_SIZE_BYTES set so far (0: the default) */
  pthread_mutex_t raise_mu; /* serialises raising it, so it never goes down */
  struct kn_cuda_kernel *next;
};

struct kn_cuda_module {
  kn_cuda_device *dev;
  CUmodule mod;
  char *log;
  pthread_mutex_t mu;       /* guards the kernel list */
  struct kn_cuda_kernel *kernels;
};

/* ---- errors: kn_status, the message in the caller's kn_diag `err` (base/status.h) ---- */

/* "CUDA_ERROR_X (text)" for a CUresult, from the driver when it can say */
static void describe(CUresult r, char *buf, size_t n) {
  const char *name = NULL, *text = NULL;
  if (g.api.GetErrorName) g.api.GetErrorName(r, &name);
  if (g.api.GetErrorString) g.api.GetErrorString(r, &text);
  if (!name) {
    /* a stub or broken driver may not name its own errors; these are the ones met at init */
    switch (r) {
    case 3: name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case 34: name = "CUDA_ERROR_STUB_LIBRARY"; text = "the stub libcuda of the toolkit, not a driver"; break;
    case 35: name = "CUDA_ERROR_INSUFFICIENT_DRIVER"; break;
    case 100: name = "CUDA_ERROR_NO_DEVICE"; break;
    case 999: name = "CUDA_ERROR_UNKNOWN"; break;
    default: break;
    }
  }
  if (name && text) snprintf(buf, n, "%s (%s)", name, text);
  else if (name) snprintf(buf, n, "%s", name);
  else snprintf(buf, n, "CUresult %d", r);
}

/* the status a failed driver call maps to, with "call: CUDA_ERROR_X (text)" */
static kn_status driver_err(kn_diag *err, const char *call, CUresult r) {
  char what[256];
  describe(r, what, sizeof what);
  kn_status status = r == CUDA_ERROR_OUT_OF_MEMORY ? KN_E_NOMEM : KN_E_RUNTIME;
  return kn_diag_set(err, status, "%s: %s", call, what);
}

/* ---- initialisation ---- */

static void driver_init(void) {
  const char *lib = getenv("KILN_CUDA_LIBRARY");
  if (!lib || !*lib) lib = "libcuda.so.1";
  snprintf(g.library, sizeof g.library, "%s", lib);
  if (strcmp(lib, "none") == 0) {
    snprintf(g.reason, sizeof g.reason, "CUDA disabled by KILN_CUDA_LIBRARY=none");
    return;
  }
  /* RTLD_LOCAL: the driver's symbols must not satisfy lookups of other libraries */
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    snprintf(g.reason, sizeof g.reason, "cannot load the CUDA driver: %s",
             e ? e : lib);
    /* dlerror usually names the file; make sure the message does */
    if (e && !strstr(e, lib)) {
      size_t used = strlen(g.reason);
      snprintf(g.reason + used, sizeof g.reason - used, " (library %s)", lib);
    }
    return;
  }
  kn_cuda_api api;
  memset(&api, 0, sizeof api);
  /* dlsym returns void*; converting it to a function pointer is what POSIX guarantees works */
#define KN_RESOLVE(field, sym, req, ...)                                                     \
  {                                                                                          \
    void *p = dlsym(h, sym);                                                                 \
    if (!p && (req)) {                                                                       \
      snprintf(g.reason, sizeof g.reason, "%s lacks the entry point %s (driver too old?)",  \
               lib, sym);                                                                    \
      dlclose(h);                                                                            \
      return;                                                                                \
    }                                                                                        \
    memcpy(&api.field, &p, sizeof p);                                                        \
  }
  KN_CUDA_ENTRIES(KN_RESOLVE)
#undef KN_RESOLVE
  if (!api.EventElapsedTime) {
    void *p = dlsym(h, "cuEventElapsedTime");
    if (!p) {
      snprintf(g.reason, sizeof g.reason, "%s lacks the entry point cuEventElapsedTime", lib);
      dlclose(h);
      return;
    }
    memcpy(&api.EventElapsedTime, &p, sizeof p);
  }
  g.api = api;
  /* From here on the library stays loaded, whatever happens (see cuda_device.h). */
  g.handle = h;
  CUresult r = g.api.Init(0);
  if (r != CUDA_SUCCESS) {
    char what[256];
    describe(r, what, sizeof what);
    snprintf(g.reason, sizeof g.reason, "cuInit: %s (library %s)", what, lib);
    return;
  }
  g.api.DriverGetVersion(&g.version);
  int n = 0;
  r = g.api.DeviceGetCount(&n);
  if (r != CUDA_SUCCESS) {
    char what[256];
    describe(r, what, sizeof what);
    snprintf(g.reason, sizeof g.reason, "cuDeviceGetCount: %s", what);
    return;
  }
  if (n <= 0) {
    snprintf(g.reason, sizeof g.reason, "the CUDA driver (%s) reports no device", lib);
    return;
  }
  g.count = n;
  g.present = true;
}

kn_status kn_cuda_init(kn_diag *err) {
  pthread_once(&g_once, driver_init);
  if (!g.present)
    return kn_diag_set(err, KN_E_NODEV, "CUDA device not present: %s",
                   g.reason);
  kn_diag_clear(err);
  return KN_OK;
}

int kn_cuda_device_count(void) {
  pthread_once(&g_once, driver_init);
  return g.present ? g.count : 0;
}

int kn_cuda_driver_version(void) {
  pthread_once(&g_once, driver_init);
  return g.present ? g.version : 0;
}

const char *kn_cuda_library(void) {
  pthread_once(&g_once, driver_init);
  return g.library;
}

/* ---- contexts ---- */

/* Makes dev's context current for this thread if it is not; *pushed says whether to pop. */
static kn_status ctx_enter(kn_cuda_device *dev, bool *pushed, kn_diag *err) {
  *pushed = false;
  CUcontext cur = NULL;
  CUresult r = g.api.CtxGetCurrent(&cur);
  if (r != CUDA_SUCCESS) return driver_err(err, "cuCtxGetCurrent", r);
  if (cur == dev->ctx) return KN_OK;
  r = g.api.CtxPushCurrent(dev->ctx);
  if (r != CUDA_SUCCESS) return driver_err(err, "cuCtxPushCurrent_v2", r);
  *pushed = true;
  return KN_OK;
}

static void ctx_leave(bool pushed) {
  if (pushed) {
    CUcontext popped;
    g.api.CtxPopCurrent(&popped);
  }
}

/* Checks the driver and dev, enters dev's context; on failure returns the status. */
#define ENTER(dev, err)                                                                  \
  bool pushed_;                                                                          \
  do {                                                                                   \
    if (!(dev)) return kn_diag_set(err, KN_E_INVALID, "%s: no device", __func__);        \
    kn_status st_ = ctx_enter(dev, &pushed_, err);                                       \
    if (st_ != KN_OK) return st_;                                                        \
  } while (0)
#define LEAVE() ctx_leave(pushed_)

/* one driver call inside dev's context: returns OK or the mapped error */
#define CALL(dev, err, call, ...)                                                        \
  do {                                                                                   \
    ENTER(dev, err);                                                                     \
    CUresult r_ = g.api.call(__VA_ARGS__);                                               \
    LEAVE();                                                                             \
    if (r_ != CUDA_SUCCESS) return driver_err(err, "cu" #call, r_);                      \
    kn_diag_clear(err);                                                                  \
    return KN_OK;                                                                        \
  } while (0)

/* ---- devices ---- */

static kn_status check_ordinal(int ordinal, CUdevice *out, kn_diag *err) {
  kn_status st = kn_cuda_init(err);
  if (st != KN_OK) return st;
  if (ordinal < 0 || ordinal >= g.count)
    return kn_diag_set(err, KN_E_INVALID, "CUDA device %d does not exist (%d present)",
                   ordinal, g.count);
  CUresult r = g.api.DeviceGet(out, ordinal);
  if (r != CUDA_SUCCESS) return driver_err(err, "cuDeviceGet", r);
  return KN_OK;
}

kn_status kn_cuda_device_props(int ordinal, kn_cuda_props *out, kn_diag *err) {
  if (!out) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_device_props: out is NULL");
  memset(out, 0, sizeof *out);
  CUdevice d;
  kn_status st = check_ordinal(ordinal, &d, err);
  if (st != KN_OK) return st;
  CUresult r = g.api.DeviceGetName(out->name, (int)sizeof out->name - 1, d);
  if (r != CUDA_SUCCESS) return driver_err(err, "cuDeviceGetName", r);
  static const struct {
    int attr;
    size_t offset;
    const char *name;
  } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, offsetof(kn_cuda_props, cc_major),
       "COMPUTE_CAPABILITY_MAJOR"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, offsetof(kn_cuda_props, cc_minor),
       "COMPUTE_CAPABILITY_MINOR"},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, offsetof(kn_cuda_props, sm_count),
       "MULTIPROCESSOR_COUNT"},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
       offsetof(kn_cuda_props, max_threads_per_block), "MAX_THREADS_PER_BLOCK"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
       offsetof(kn_cuda_props, shared_per_block), "MAX_SHARED_MEMORY_PER_BLOCK"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
       offsetof(kn_cuda_props, shared_per_block_optin), "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, offsetof(kn_cuda_props, warp_size), "WARP_SIZE"},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    int v = 0;
    r = g.api.DeviceGetAttribute(&v, attrs[i].attr, d);
    if (r != CUDA_SUCCESS) {
      char call[96];
      snprintf(call, sizeof call, "cuDeviceGetAttribute(%s)", attrs[i].name);
      return driver_err(err, call, r);
    }
    memcpy((char *)out + attrs[i].offset, &v, sizeof v);
  }
  size_t mem = 0;
  r = g.api.DeviceTotalMem(&mem, d);
  if (r != CUDA_SUCCESS) return driver_err(err, "cuDeviceTotalMem_v2", r);
  out->total_memory = mem;
  kn_diag_clear(err);
  return KN_OK;
}

kn_status kn_cuda_device_open(int ordinal, kn_cuda_device **out, kn_diag *err) {
  if (!out) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_device_open: out is NULL");
  *out = NULL;
  CUdevice d;
  kn_status st = check_ordinal(ordinal, &d, err);
  if (st != KN_OK) return st;
  kn_cuda_device *dev = calloc(1, sizeof *dev);
  if (!dev) return kn_diag_set(err, KN_E_NOMEM, "kn_cuda_device_open: out of memory");
  st = kn_cuda_device_props(ordinal, &dev->props, err);
  if (st != KN_OK) {
    free(dev);
    return st;
  }
  CUresult r = g.api.PrimaryCtxRetain(&dev->ctx, d);
  if (r != CUDA_SUCCESS) {
    free(dev);
    return driver_err(err, "cuDevicePrimaryCtxRetain", r);
  }
  dev->ordinal = ordinal;
  dev->dev = d;
  *out = dev;
  kn_diag_clear(err);
  return KN_OK;
}

void kn_cuda_device_close(kn_cuda_device *dev) {
  if (!dev) return;
  g.api.PrimaryCtxRelease(dev->dev);
  free(dev);
}

const kn_cuda_props *kn_cuda_device_get_props(const kn_cuda_device *dev) {
  return dev ? &dev->props : NULL;
}

void *kn_cuda_device_context(const kn_cuda_device *dev) { return dev ? dev->ctx : NULL; }

kn_status kn_cuda_device_sync(kn_cuda_device *dev, kn_diag *err) {
  CALL(dev, err, CtxSynchronize);
}

/* ---- modules ---- */

/* a trimmed copy of a JIT log (the driver NUL-terminates within the size it was given) */
static void trim_log(char *log) {
  size_t n = strlen(log);
  while (n > 0 && (log[n - 1] == '\n' || log[n - 1] == ' ' || log[n - 1] == '\r')) log[--n] = 0;
}

static kn_status module_load(kn_cuda_device *dev, const void *image, bool is_ptx,
                             kn_cuda_module **out, kn_diag *err) {
  if (!out) return kn_diag_set(err, KN_E_INVALID, "module load: out is NULL");
  *out = NULL;
  if (!image) return kn_diag_set(err, KN_E_INVALID, "module load: no image");
  kn_cuda_module *m = calloc(1, sizeof *m);
  char *info = calloc(1, KN_CUDA_JIT_LOG_BYTES);
  char *elog = calloc(1, KN_CUDA_JIT_LOG_BYTES);
  if (!m || !info || !elog) {
    free(m);
    free(info);
    free(elog);
    return kn_diag_set(err, KN_E_NOMEM, "module load: out of memory");
  }
  /* The log sizes are in/out: on return they hold the bytes the driver wrote. */
  CUjit_option opts[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                         CU_JIT_LOG_VERBOSE};
  void *vals[] = {info, (void *)(uintptr_t)(KN_CUDA_JIT_LOG_BYTES - 1), elog,
                  (void *)(uintptr_t)(KN_CUDA_JIT_LOG_BYTES - 1), (void *)(uintptr_t)1};
  bool pushed;
  kn_status st = ctx_enter(dev, &pushed, err);
  if (st != KN_OK) {
    free(m);
    free(info);
    free(elog);
    return st;
  }
  CUresult r = g.api.ModuleLoadDataEx(&m->mod, image, 5, opts, vals);
  ctx_leave(pushed);
  trim_log(info);
  trim_log(elog);
  if (r != CUDA_SUCCESS) {
    char what[256];
    describe(r, what, sizeof what);
    st = r == CUDA_ERROR_OUT_OF_MEMORY ? KN_E_NOMEM : KN_E_COMPILE;
    kn_diag_set(err, st, "cuModuleLoadDataEx (%s, sm_%d%d): %s%s%s", is_ptx ? "PTX" : "cubin",
            dev->props.cc_major, dev->props.cc_minor, what, elog[0] ? "\nJIT log:\n" : "",
            elog);
    free(m);
    free(info);
    free(elog);
    return st;
  }
  free(elog);
  m->dev = dev;
  m->log = info;
  pthread_mutex_init(&m->mu, NULL);
  *out = m;
  kn_diag_clear(err);
  return KN_OK;
}

kn_status kn_cuda_module_load_ptx(kn_cuda_device *dev, const char *ptx, kn_cuda_module **out,
                                  kn_diag *err) {
  if (!dev) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_module_load_ptx: no device");
  return module_load(dev, ptx, true, out, err);
}

kn_status kn_cuda_module_load_cubin(kn_cuda_device *dev, const void *image, size_t size,
                                    kn_cuda_module **out, kn_diag *err) {
  if (!dev) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_module_load_cubin: no device");
  /* The driver reads the ELF header for the size; check it is one before handing it over. */
  if (!image || size < 64 || memcmp(image, "\177ELF", 4) != 0)
    return kn_diag_set(err, KN_E_INVALID, "kn_cuda_module_load_cubin: not an ELF cubin");
  return module_load(dev, image, false, out, err);
}

const char *kn_cuda_module_log(const kn_cuda_module *m) { return m && m->log ? m->log : ""; }

void kn_cuda_module_unload(kn_cuda_module *m) {
  if (!m) return;
  bool pushed;
  if (ctx_enter(m->dev, &pushed, NULL) == KN_OK) {
    g.api.ModuleUnload(m->mod);
    ctx_leave(pushed);
  }
  for (kn_cuda_kernel *k = m->kernels, *next; k; k = next) {
    next = k->next;
    pthread_mutex_destroy(&k->raise_mu);
    free(k->name);
    free(k);
  }
  pthread_mutex_destroy(&m->mu);
  free(m->log);
  free(m);
}

kn_status kn_cuda_module_kernel(kn_cuda_module *m, const char *name, kn_cuda_kernel **out,
                                kn_diag *err) {
  if (!m || !name || !out)
    return kn_diag_set(err, KN_E_INVALID, "kn_cuda_module_kernel: NULL argument");
  *out = NULL;
  pthread_mutex_lock(&m->mu);
  for (kn_cuda_kernel *k = m->kernels; k; k = k->next)
    if (strcmp(k->name, name) == 0) {
      *out = k;
      pthread_mutex_unlock(&m->mu);
      kn_diag_clear(err);
      return KN_OK;
    }
  CUfunction fn = NULL;
  bool pushed;
  kn_status st = ctx_enter(m->dev, &pushed, err);
  if (st != KN_OK) {
    pthread_mutex_unlock(&m->mu);
    return st;
  }
  CUresult r = g.api.ModuleGetFunction(&fn, m->mod, name);
  ctx_leave(pushed);
  if (r != CUDA_SUCCESS) {
    pthread_mutex_unlock(&m->mu);
    if (r == CUDA_ERROR_NOT_FOUND) {
      char what[256];
      describe(r, what, sizeof what);
      return kn_diag_set(err, KN_E_INVALID, "cuModuleGetFunction(\"%s\"): %s", name, what);
    }
    return driver_err(err, "cuModuleGetFunction", r);
  }
  kn_cuda_kernel *k = calloc(1, sizeof *k);
  char *copy = strdup(name);
  if (!k || !copy) {
    pthread_mutex_unlock(&m->mu);
    free(k);
    free(copy);
    return kn_diag_set(err, KN_E_NOMEM, "kn_cuda_module_kernel: out of memory");
  }
  k->fn = fn;
  k->dev = m->dev;
  k->name = copy;
  atomic_init(&k->dyn_limit, 0);
  pthread_mutex_init(&k->raise_mu, NULL);
  k->next = m->kernels;
  m->kernels = k;
  pthread_mutex_unlock(&m->mu);
  *out = k;
  kn_diag_clear(err);
  return KN_OK;
}

kn_status kn_cuda_kernel_attrs_get(const kn_cuda_kernel *k, kn_cuda_kernel_attrs *out,
                                   kn_diag *err) {
  if (!k || !out) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_kernel_attrs_get: NULL");
  static const struct {
    int attr;
    size_t offset;
  } attrs[] = {
      {CU_FUNC_ATTRIBUTE_NUM_REGS, offsetof(kn_cuda_kernel_attrs, num_regs)},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, offsetof(kn_cuda_kernel_attrs, local_bytes)},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, offsetof(kn_cuda_kernel_attrs, static_shared_bytes)},
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
       offsetof(kn_cuda_kernel_attrs, max_threads_per_block)},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    int v = 0;
    CUresult r = g.api.FuncGetAttribute(&v, attrs[i].attr, k->fn);
    if (r != CUDA_SUCCESS) return driver_err(err, "cuFuncGetAttribute", r);
    memcpy((char *)out + attrs[i].offset, &v, sizeof v);
  }
  kn_diag_clear(err);
  return KN_OK;
}

/* ---- launch ---- */

/* Raises k's dynamic shared memory limit to at least `bytes` (never lowers it: another thread
 * may be launching with a larger size). */
static kn_status raise_dyn_limit(kn_cuda_kernel *k, int bytes, kn_diag *err) {
  if (atomic_load_explicit(&k->dyn_limit, memory_order_acquire) >= bytes) return KN_OK;
  pthread_mutex_lock(&k->raise_mu);
  kn_status st = KN_OK;
  if (atomic_load_explicit(&k->dyn_limit, memory_order_relaxed) < bytes) {
    CUresult r = g.api.FuncSetAttribute(k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        bytes);
    if (r != CUDA_SUCCESS) {
      char call[160];
      snprintf(call, sizeof call,
               "cuFuncSetAttribute(%s, MAX_DYNAMIC_SHARED_SIZE_BYTES=%d; device opt-in max %d)",
               k->name, bytes, k->dev->props.shared_per_block_optin);
      st = driver_err(err, call, r);
    } else {
      atomic_store_explicit(&k->dyn_limit, bytes, memory_order_release);
    }
  }
  pthread_mutex_unlock(&k->raise_mu);
  return st;
}

kn_status kn_cuda_launch(kn_cuda_kernel *k, const unsigned grid[3], const unsigned block[3],
                         unsigned dyn_shared, kn_cuda_stream stream, void **params, kn_diag *err) {
  if (!k || !grid || !block)
    return kn_diag_set(err, KN_E_INVALID, "kn_cuda_launch: NULL kernel, grid or block");
  if (dyn_shared > (unsigned)INT32_MAX)
    return kn_diag_set(err, KN_E_INVALID, "kn_cuda_launch: dynamic shared memory too large");
  ENTER(k->dev, err);
  kn_status st = KN_OK;
  if (dyn_shared > KN_CUDA_DEFAULT_SHARED) st = raise_dyn_limit(k, (int)dyn_shared, err);
  CUresult r = CUDA_SUCCESS;
  if (st == KN_OK)
    r = g.api.LaunchKernel(k->fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                           dyn_shared, (CUstream)stream, params, NULL);
  LEAVE();
  if (st != KN_OK) return st;
  if (r != CUDA_SUCCESS) {
    char what[256];
    describe(r, what, sizeof what);
    return kn_diag_set(err, r == CUDA_ERROR_OUT_OF_MEMORY ? KN_E_NOMEM : KN_E_RUNTIME,
                       "cuLaunchKernel(%s, grid %ux%ux%u, block %ux%ux%u, dynamic shared %u): %s",
                       k->name, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                       dyn_shared, what);
  }
  kn_diag_clear(err);
  return KN_OK;
}

/* ---- memory ---- */

kn_status kn_cuda_alloc(kn_cuda_device *dev, size_t bytes, kn_cuda_ptr *out, kn_diag *err) {
  if (!out) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_alloc: out is NULL");
  *out = 0;
  CUdeviceptr p = 0;
  ENTER(dev, err);
  CUresult r = g.api.MemAlloc(&p, bytes ? bytes : 1);
  LEAVE();
  if (r != CUDA_SUCCESS) {
    char call[64];
    snprintf(call, sizeof call, "cuMemAlloc_v2(%zu bytes)", bytes);
    return driver_err(err, call, r);
  }
  *out = p;
  kn_diag_clear(err);
  return KN_OK;
}

kn_status kn_cuda_free(kn_cuda_device *dev, kn_cuda_ptr p, kn_diag *err) {
  if (!p) {
    kn_diag_clear(err);
    return KN_OK;
  }
  CALL(dev, err, MemFree, (CUdeviceptr)p);
}

kn_status kn_cuda_copy_htod(kn_cuda_device *dev, kn_cuda_ptr dst, const void *src, size_t bytes,
                            kn_diag *err) {
  CALL(dev, err, MemcpyHtoD, (CUdeviceptr)dst, src, bytes);
}

kn_status kn_cuda_copy_dtoh(kn_cuda_device *dev, void *dst, kn_cuda_ptr src, size_t bytes,
                            kn_diag *err) {
  CALL(dev, err, MemcpyDtoH, dst, (CUdeviceptr)src, bytes);
}

kn_status kn_cuda_copy_dtod(kn_cuda_device *dev, kn_cuda_ptr dst, kn_cuda_ptr src, size_t bytes,
                            kn_diag *err) {
  CALL(dev, err, MemcpyDtoD, (CUdeviceptr)dst, (CUdeviceptr)src, bytes);
}

kn_status kn_cuda_memset8(kn_cuda_device *dev, kn_cuda_ptr dst, unsigned char value, size_t bytes,
                          kn_diag *err) {
  CALL(dev, err, MemsetD8, (CUdeviceptr)dst, value, bytes);
}

kn_status kn_cuda_copy_htod_async(kn_cuda_device *dev, kn_cuda_ptr dst, const void *src,
                                  size_t bytes, kn_cuda_stream stream, kn_diag *err) {
  CALL(dev, err, MemcpyHtoDAsync, (CUdeviceptr)dst, src, bytes, (CUstream)stream);
}

kn_status kn_cuda_copy_dtoh_async(kn_cuda_device *dev, void *dst, kn_cuda_ptr src, size_t bytes,
                                  kn_cuda_stream stream, kn_diag *err) {
  CALL(dev, err, MemcpyDtoHAsync, dst, (CUdeviceptr)src, bytes, (CUstream)stream);
}

/* ---- streams and events ---- */

kn_status kn_cuda_stream_create(kn_cuda_device *dev, kn_cuda_stream *out, kn_diag *err) {
  if (!out) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_stream_create: out is NULL");
  *out = NULL;
  CALL(dev, err, StreamCreate, (CUstream *)out, CU_STREAM_NON_BLOCKING);
}

void kn_cuda_stream_destroy(kn_cuda_device *dev, kn_cuda_stream s) {
  if (!dev || !s) return;
  bool pushed;
  if (ctx_enter(dev, &pushed, NULL) != KN_OK) return;
  g.api.StreamDestroy((CUstream)s);
  ctx_leave(pushed);
}

kn_status kn_cuda_stream_sync(kn_cuda_device *dev, kn_cuda_stream s, kn_diag *err) {
  CALL(dev, err, StreamSynchronize, (CUstream)s);
}

kn_status kn_cuda_event_create(kn_cuda_device *dev, kn_cuda_event *out, kn_diag *err) {
  if (!out) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_event_create: out is NULL");
  *out = NULL;
  CALL(dev, err, EventCreate, (CUevent *)out, CU_EVENT_DEFAULT);
}

void kn_cuda_event_destroy(kn_cuda_device *dev, kn_cuda_event e) {
  if (!dev || !e) return;
  bool pushed;
  if (ctx_enter(dev, &pushed, NULL) != KN_OK) return;
  g.api.EventDestroy((CUevent)e);
  ctx_leave(pushed);
}

kn_status kn_cuda_event_record(kn_cuda_device *dev, kn_cuda_event e, kn_cuda_stream s,
                               kn_diag *err) {
  CALL(dev, err, EventRecord, (CUevent)e, (CUstream)s);
}

kn_status kn_cuda_event_sync(kn_cuda_device *dev, kn_cuda_event e, kn_diag *err) {
  CALL(dev, err, EventSynchronize, (CUevent)e);
}

kn_status kn_cuda_event_elapsed(kn_cuda_device *dev, kn_cuda_event start, kn_cuda_event end,
                                float *ms, kn_diag *err) {
  if (!ms) return kn_diag_set(err, KN_E_INVALID, "kn_cuda_event_elapsed: ms is NULL");
  *ms = 0;
  CALL(dev, err, EventElapsedTime, ms, (CUevent)start, (CUevent)end);
}
