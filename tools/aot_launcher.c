/* aot_launcher.c — the runtime half of every launcher `kiln aot --emit-c NAME` writes.
 *
 * This file is not compiled into kiln: the build turns it into a byte string (tools/
 * CMakeLists.txt), and tools/aot_emit.c copies it into NAME.c with every "kn_aotl" replaced by
 * NAME, followed by the bundle's bytes, its tables and one function per variant.  It must
 * therefore compile on its own terms wherever NAME.c goes: C11, the C library, libdl and
 * pthreads, no kiln, LLVM, ROCm or CUDA header.  The driver entry points are declared here with
 * the ABI values runtime/hip.c and runtime/cuda.c document (hipError_t / CUresult are ints,
 * handles pointers, hipModuleLaunchKernel's `extra` keys 1, 2, 3).
 *
 * The device: HIP first (unless asked for CUDA), its arch from the device properties as kiln's
 * discovery reads them (hipGetDevicePropertiesR0600's gcnArchName at byte 1160 in ROCm 6+, the
 * unversioned call's at 396 in ROCm 5; an 8 KiB buffer either way), else CUDA, whose compute
 * capability picks the arch: an entry built for exactly it, else the newest entry for every later
 * GPU (sm_80).  Modules are loaded on first use under one mutex; launches take no lock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_aotl.h"

struct kn_aotl_arg {
  unsigned offset, size;
  int what; /* >= 0: that parameter; -2..-4 block counts x..z, -5..-7 group sizes, -8 grid dims */
};

struct kn_aotl_obj {
  const char *arch;
  int amd, cc;
  const char *blob;            /* AMD: the offload bundle; NVIDIA: the PTX (NUL-terminated) */
  size_t blob_n;
  const char *cubin;
  size_t cubin_n;
  const char *symbol;
  int seqlen_lo, seqlen_hi, block_m, threads;
  long long shared;
  unsigned kernarg_size, kernarg_align;
  int nargs;
  const struct kn_aotl_arg *args;
  int (*values)(const kn_aotl_args *a, uint64_t *v);
  void *fn;                    /* loaded: hipFunction_t / CUfunction */
};

static struct {
  int kind; /* 0 none, 1 HIP, 2 CUDA */
  char arch[32];
  int cc;
  void *ctx;
  int (*hipSetDevice)(int);
  int (*hipModuleLoadData)(void **, const void *);
  int (*hipModuleGetFunction)(void **, void *, const char *);
  int (*hipModuleLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, unsigned, void *, void **, void **);
  const char *(*hipGetErrorName)(int);
  int (*hipMalloc)(void **, size_t);
  int (*hipFree)(void *);
  int (*hipMemcpy)(void *, const void *, size_t, int);
  int (*hipStreamSynchronize)(void *);
  int (*cuCtxPushCurrent)(void *);
  int (*cuCtxPopCurrent)(void **);
  int (*cuModuleLoadDataEx)(void **, const void *, unsigned, int *, void **);
  int (*cuModuleGetFunction)(void **, void *, const char *);
  int (*cuFuncSetAttribute)(void *, int, int);
  int (*cuLaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
  int (*cuGetErrorName)(int, const char **);
  int (*cuMemAlloc)(unsigned long long *, size_t);
  int (*cuMemFree)(unsigned long long);
  int (*cuMemcpyHtoD)(unsigned long long, const void *, size_t);
  int (*cuMemcpyDtoH)(void *, unsigned long long, size_t);
  int (*cuStreamSynchronize)(void *);
} kn_aotl_g;
static pthread_mutex_t kn_aotl_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char kn_aotl_err[512];

const char *kn_aotl_error(void) { return kn_aotl_err; }
const char *kn_aotl_arch(void) { return kn_aotl_g.arch; }

__attribute__((format(printf, 1, 2))) static int kn_aotl_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(kn_aotl_err, sizeof kn_aotl_err, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *kn_aotl_hiperr(int r) {
  const char *s = kn_aotl_g.hipGetErrorName ? kn_aotl_g.hipGetErrorName(r) : NULL;
  return s ? s : "hipError";
}
static const char *kn_aotl_cuerr(int r) {
  const char *s = NULL;
  if (kn_aotl_g.cuGetErrorName) kn_aotl_g.cuGetErrorName(r, &s);
  return s ? s : "CUresult";
}

/* dlopen of $env (unless "none") or the first of names that loads */
static void *kn_aotl_open(const char *env, const char *const *names, int n) {
  const char *e = getenv(env);
  if (e && *e) return strcmp(e, "none") ? dlopen(e, RTLD_NOW | RTLD_LOCAL) : NULL;
  void *h = NULL;
  for (int i = 0; i < n && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  return h;
}

#define KN_AOTL_SYM(h, field, name)                                                        \
  do {                                                                                      \
    void *p_ = dlsym(h, name);                                                              \
    if (!p_) return kn_aotl_fail("%s lacks %s", #h, name);                                  \
    memcpy(&kn_aotl_g.field, &p_, sizeof p_);                                               \
  } while (0)

/* every object of the bundle (written after the tables, by aot_emit.c) */
static struct kn_aotl_obj *const *kn_aotl_objs(int *n);

static int kn_aotl_has_arch(const char *arch) {
  int n;
  struct kn_aotl_obj *const *all = kn_aotl_objs(&n);
  for (int i = 0; i < n; i++)
    if (!strcmp(all[i]->arch, arch)) return 1;
  return 0;
}

/* CUDA: the arch an entry must have on this device (exactly its compute capability, else the
 * newest one built for every later GPU, whose name has no "a") */
static int kn_aotl_serves(const struct kn_aotl_obj *o) {
  if (kn_aotl_g.kind == 1) return o->amd && !strcmp(o->arch, kn_aotl_g.arch) ? 2 : 0;
  if (kn_aotl_g.kind != 2 || o->amd) return 0;
  if (o->cc == kn_aotl_g.cc) return 2;
  size_t n = strlen(o->arch);
  return o->cc < kn_aotl_g.cc && o->arch[n - 1] != 'a' ? 1 : 0;
}

static int kn_aotl_init_hip(void) {
  static const char *const names[] = {"libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                                      "libamdhip64.so.5"};
  void *hip = kn_aotl_open("KILN_HIP_LIBRARY", names, 4);
  if (!hip) return kn_aotl_fail("no HIP runtime (libamdhip64)");
  int (*init)(unsigned), (*count)(int *), (*props)(void *, int);
  void *p = dlsym(hip, "hipInit");
  memcpy(&init, &p, sizeof p);
  p = dlsym(hip, "hipGetDeviceCount");
  memcpy(&count, &p, sizeof p);
  size_t arch_at = 1160; /* ROCm 6+: hipGetDevicePropertiesR0600 */
  p = dlsym(hip, "hipGetDevicePropertiesR0600");
  if (!p) p = dlsym(hip, "hipGetDeviceProperties"), arch_at = 396; /* ROCm 5 */
  memcpy(&props, &p, sizeof p);
  KN_AOTL_SYM(hip, hipSetDevice, "hipSetDevice");
  KN_AOTL_SYM(hip, hipModuleLoadData, "hipModuleLoadData");
  KN_AOTL_SYM(hip, hipModuleGetFunction, "hipModuleGetFunction");
  KN_AOTL_SYM(hip, hipModuleLaunchKernel, "hipModuleLaunchKernel");
  KN_AOTL_SYM(hip, hipGetErrorName, "hipGetErrorName");
  KN_AOTL_SYM(hip, hipMalloc, "hipMalloc");
  KN_AOTL_SYM(hip, hipFree, "hipFree");
  KN_AOTL_SYM(hip, hipMemcpy, "hipMemcpy");
  KN_AOTL_SYM(hip, hipStreamSynchronize, "hipStreamSynchronize");
  int n = 0;
  if (!init || !count || !props || init(0) || count(&n) || n < 1)
    return kn_aotl_fail("the HIP runtime reports no device");
  static char buf[8192];
  memset(buf, 0, sizeof buf);
  if (props(buf, 0)) return kn_aotl_fail("hipGetDeviceProperties failed");
  buf[arch_at + 63] = 0;
  const char *arch = buf + arch_at;
  size_t len = strcspn(arch, ":");
  if (strncmp(arch, "gfx", 3) || len >= sizeof kn_aotl_g.arch)
    return kn_aotl_fail("cannot read the HIP device's arch");
  memcpy(kn_aotl_g.arch, arch, len);
  kn_aotl_g.arch[len] = 0;
  if (!kn_aotl_has_arch(kn_aotl_g.arch)) {
    int r = kn_aotl_fail("the HIP device is a %s; the bundle has no code for it", kn_aotl_g.arch);
    kn_aotl_g.arch[0] = 0;
    return r;
  }
  kn_aotl_g.kind = 1;
  return 0;
}

static int kn_aotl_init_cuda(void) {
  static const char *const names[] = {"libcuda.so.1"};
  void *cu = kn_aotl_open("KILN_CUDA_LIBRARY", names, 1);
  if (!cu) return kn_aotl_fail("no CUDA driver (libcuda.so.1)");
  int (*init)(unsigned), (*get)(int *, int), (*attr)(int *, int, int), (*retain)(void **, int);
  void *p = dlsym(cu, "cuInit");
  memcpy(&init, &p, sizeof p);
  p = dlsym(cu, "cuDeviceGet");
  memcpy(&get, &p, sizeof p);
  p = dlsym(cu, "cuDeviceGetAttribute");
  memcpy(&attr, &p, sizeof p);
  p = dlsym(cu, "cuDevicePrimaryCtxRetain");
  memcpy(&retain, &p, sizeof p);
  KN_AOTL_SYM(cu, cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  KN_AOTL_SYM(cu, cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  KN_AOTL_SYM(cu, cuModuleLoadDataEx, "cuModuleLoadDataEx");
  KN_AOTL_SYM(cu, cuModuleGetFunction, "cuModuleGetFunction");
  KN_AOTL_SYM(cu, cuFuncSetAttribute, "cuFuncSetAttribute");
  KN_AOTL_SYM(cu, cuLaunchKernel, "cuLaunchKernel");
  KN_AOTL_SYM(cu, cuGetErrorName, "cuGetErrorName");
  KN_AOTL_SYM(cu, cuMemAlloc, "cuMemAlloc_v2");
  KN_AOTL_SYM(cu, cuMemFree, "cuMemFree_v2");
  KN_AOTL_SYM(cu, cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  KN_AOTL_SYM(cu, cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  KN_AOTL_SYM(cu, cuStreamSynchronize, "cuStreamSynchronize");
  int dev, major = 0, minor = 0;
  if (!init || !get || !attr || !retain || init(0) || get(&dev, 0) || attr(&major, 75, dev) ||
      attr(&minor, 76, dev))
    return kn_aotl_fail("the CUDA driver reports no device");
  kn_aotl_g.cc = major * 10 + minor;
  if (retain(&kn_aotl_g.ctx, dev)) return kn_aotl_fail("cuDevicePrimaryCtxRetain failed");
  kn_aotl_g.kind = 2;
  /* the arch named in messages: the best entry's */
  int n, best = 0, best_cc = -1;
  struct kn_aotl_obj *const *all = kn_aotl_objs(&n);
  for (int i = 0; i < n; i++) {
    int s = kn_aotl_serves(all[i]);
    if (s > best || (s && s == best && all[i]->cc > best_cc)) {
      best = s, best_cc = all[i]->cc;
      snprintf(kn_aotl_g.arch, sizeof kn_aotl_g.arch, "%s", all[i]->arch);
    }
  }
  if (!best) {
    kn_aotl_g.kind = 0;
    return kn_aotl_fail("the CUDA device (compute capability %d.%d) runs nothing in the bundle",
                        major, minor);
  }
  return 0;
}

int kn_aotl_init(const char *runtime) {
  pthread_mutex_lock(&kn_aotl_mu);
  int rc = 0;
  if (!kn_aotl_g.kind) {
    int want_hip = !runtime || !strcmp(runtime, "auto") || !strcmp(runtime, "hip");
    int want_cuda = !runtime || !strcmp(runtime, "auto") || !strcmp(runtime, "cuda");
    if (!want_hip && !want_cuda) rc = kn_aotl_fail("runtime '%s' is not hip, cuda or auto", runtime);
    else if (!(want_hip && kn_aotl_init_hip() == 0) && !(want_cuda && kn_aotl_init_cuda() == 0))
      rc = -1;
  }
  pthread_mutex_unlock(&kn_aotl_mu);
  return rc;
}

/* Device memory through the runtime init loaded, for a program with neither HIP's nor CUDA's
 * headers (a serving engine passes its own buffers instead).  op: 0 alloc, 1 free, 2 host to
 * device, 3 device to host, 4 synchronize the stream. */
static int kn_aotl_mem(int op, void **p, void *dst, const void *src, size_t n, void *stream) {
  static const char *const what[] = {"alloc", "free", "upload", "download", "sync"};
  if (!kn_aotl_g.kind) return kn_aotl_fail("call kn_aotl_init first");
  int r;
  if (kn_aotl_g.kind == 1) {
    r = op == 0 ? kn_aotl_g.hipMalloc(p, n) : op == 1 ? kn_aotl_g.hipFree(dst)
      : op == 4 ? kn_aotl_g.hipStreamSynchronize(stream)
                : kn_aotl_g.hipMemcpy(dst, src, n, op == 2 ? 1 : 2);
    if (r) return kn_aotl_fail("%s of %zu bytes: %s", what[op], n, kn_aotl_hiperr(r));
    return 0;
  }
  void *old;
  unsigned long long d = 0;
  r = kn_aotl_g.cuCtxPushCurrent(kn_aotl_g.ctx);
  if (!r)
    r = op == 0 ? kn_aotl_g.cuMemAlloc(&d, n)
      : op == 1 ? kn_aotl_g.cuMemFree((unsigned long long)(uintptr_t)dst)
      : op == 2 ? kn_aotl_g.cuMemcpyHtoD((unsigned long long)(uintptr_t)dst, src, n)
      : op == 3 ? kn_aotl_g.cuMemcpyDtoH(dst, (unsigned long long)(uintptr_t)src, n)
                : kn_aotl_g.cuStreamSynchronize(stream);
  kn_aotl_g.cuCtxPopCurrent(&old);
  if (r) return kn_aotl_fail("%s of %zu bytes: %s", what[op], n, kn_aotl_cuerr(r));
  if (op == 0) *p = (void *)(uintptr_t)d;
  return 0;
}
int kn_aotl_alloc(void **p, size_t bytes) {
  *p = NULL;
  return kn_aotl_mem(0, p, NULL, NULL, bytes, NULL);
}
int kn_aotl_free(void *p) { return p ? kn_aotl_mem(1, NULL, p, NULL, 0, NULL) : 0; }
int kn_aotl_upload(void *dev, const void *host, size_t bytes) {
  return kn_aotl_mem(2, NULL, dev, host, bytes, NULL);
}
int kn_aotl_download(void *host, const void *dev, size_t bytes) {
  return kn_aotl_mem(3, NULL, host, dev, bytes, NULL);
}
int kn_aotl_sync(void *stream) { return kn_aotl_mem(4, NULL, NULL, NULL, 0, stream); }

/* the chip's code object in an uncompressed clang offload bundle */
static const void *kn_aotl_bundle_find(const char *p, size_t n, const char *chip) {
  if (n < 32 || memcmp(p, "__CLANG_OFFLOAD_BUNDLE__", 24)) return NULL;
  uint64_t count, at = 32;
  memcpy(&count, p + 24, 8);
  size_t cl = strlen(chip);
  for (uint64_t i = 0; i < count && at + 24 <= n; i++) {
    uint64_t off, size, idl;
    memcpy(&off, p + at, 8), memcpy(&size, p + at + 8, 8), memcpy(&idl, p + at + 16, 8);
    at += 24;
    if (idl > n - at || off > n || size > n - off) return NULL;
    const char *id = p + at, *end = id + idl;
    at += idl;
    for (const char *q = id; q + cl <= end; q++)
      if (q > id && q[-1] == '-' && !memcmp(q, chip, cl) && (q + cl == end || q[cl] == ':') &&
          size)
        return p + off;
  }
  return NULL;
}

static int kn_aotl_load(struct kn_aotl_obj *o) {
  if (o->fn) return 0;
  pthread_mutex_lock(&kn_aotl_mu);
  int rc = 0;
  void *mod = NULL, *fn = NULL;
  if (o->fn) {
  } else if (kn_aotl_g.kind == 1) {
    const void *code = kn_aotl_bundle_find(o->blob, o->blob_n, kn_aotl_g.arch);
    int r;
    if (!code) rc = kn_aotl_fail("%s: the bundle has no %s code object", o->symbol, o->arch);
    else if ((r = kn_aotl_g.hipSetDevice(0)) || (r = kn_aotl_g.hipModuleLoadData(&mod, code)) ||
             (r = kn_aotl_g.hipModuleGetFunction(&fn, mod, o->symbol)))
      rc = kn_aotl_fail("loading %s for %s: %s", o->symbol, o->arch, kn_aotl_hiperr(r));
  } else {
    void *old;
    int r = kn_aotl_g.cuCtxPushCurrent(kn_aotl_g.ctx);
    if (!r && o->cubin && o->cc == kn_aotl_g.cc &&
        kn_aotl_g.cuModuleLoadDataEx(&mod, o->cubin, 0, NULL, NULL))
      mod = NULL; /* the driver refused the cubin: the PTX */
    if (!r && !mod) r = kn_aotl_g.cuModuleLoadDataEx(&mod, o->blob, 0, NULL, NULL);
    if (!r) r = kn_aotl_g.cuModuleGetFunction(&fn, mod, o->symbol);
    if (!r && o->shared > 48 * 1024) r = kn_aotl_g.cuFuncSetAttribute(fn, 8, (int)o->shared);
    kn_aotl_g.cuCtxPopCurrent(&old);
    if (r) rc = kn_aotl_fail("loading %s for %s: %s", o->symbol, o->arch, kn_aotl_cuerr(r));
  }
  if (!rc && !o->fn) o->fn = fn;
  pthread_mutex_unlock(&kn_aotl_mu);
  return rc;
}

/* the strides of a in elements (zeros: contiguous); -1 for a bad shape */
static int kn_aotl_strides(const kn_aotl_args *a, int d, int64_t *qs, int64_t *ks, int64_t *vs,
                           int64_t *os, int64_t *ls) {
  if (a->batch < 1 || a->heads < 1 || a->kv_heads < 1 || a->heads % a->kv_heads ||
      a->seqlen_q < 1 || a->seqlen_k < 1 || !a->q || !a->k || !a->v || !a->o)
    return kn_aotl_fail("bad shape or NULL buffer (batch %d, heads %d, kv_heads %d, seqlen %d x "
                        "%d)", a->batch, a->heads, a->kv_heads, a->seqlen_q, a->seqlen_k);
  const int64_t H = a->heads, HK = a->kv_heads, Nq = a->seqlen_q, Nk = a->seqlen_k, D = d;
  const int64_t dq[3] = {H * Nq * D, Nq * D, D}, dk[3] = {HK * Nk * D, Nk * D, D},
                dl[2] = {H * Nq, Nq};
  const int64_t *in[4] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride};
  int64_t *out[4] = {qs, ks, vs, os};
  for (int t = 0; t < 4; t++) {
    int zero = !in[t][0] && !in[t][1] && !in[t][2];
    for (int i = 0; i < 3; i++) {
      out[t][i] = zero ? (t == 1 || t == 2 ? dk : dq)[i] : in[t][i];
      if (out[t][i] < 0) return kn_aotl_fail("a negative stride");
    }
  }
  int zero = !a->lse_stride[0] && !a->lse_stride[1];
  for (int i = 0; i < 2; i++) ls[i] = zero ? dl[i] : a->lse_stride[i];
  return 0;
}

/* a varlen kernel's strides: packed q, o (total_q, heads, D), k, v (total_k, kv_heads, D), lse
 * (heads, total_q); the caller's {0, head, token} (zeros: contiguous) become the kernel's
 * {token, head, token} (the batch slot of a packed buffer is its token stride), lse {1, head}.
 * (inline: a bundle without varlen kernels does not call it, and must compile without a warning) */
static inline int kn_aotl_strides_varlen(const kn_aotl_args *a, int d, int64_t *qs, int64_t *ks,
                                  int64_t *vs, int64_t *os, int64_t *ls) {
  if (a->batch < 1 || a->heads < 1 || a->kv_heads < 1 || a->heads % a->kv_heads ||
      a->seqlen_q < 1 || a->seqlen_k < 1 || a->total_q < 0 || a->total_k < 0 || !a->q || !a->k ||
      !a->v || !a->o)
    return kn_aotl_fail("bad shape or NULL buffer (batch %d, heads %d, kv_heads %d, seqlen %d x "
                        "%d, total %d x %d)", a->batch, a->heads, a->kv_heads, a->seqlen_q,
                        a->seqlen_k, a->total_q, a->total_k);
  if (!a->cu_seqlens_q || !a->cu_seqlens_k)
    return kn_aotl_fail("varlen: NULL cu_seqlens_q or cu_seqlens_k (batch + 1 prefix sums each)");
  const int64_t H = a->heads, HK = a->kv_heads, D = d;
  const int64_t *in[4] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride};
  int64_t *out[4] = {qs, ks, vs, os};
  for (int t = 0; t < 4; t++) {
    int kv = t == 1 || t == 2, zero = !in[t][1] && !in[t][2];
    if (in[t][0] || in[t][1] < 0 || in[t][2] < 0)
      return kn_aotl_fail("varlen buffers have no batch axis: strides {0, head, token}, none "
                          "negative");
    out[t][1] = zero ? D : in[t][1];
    out[t][0] = out[t][2] = zero ? (kv ? HK : H) * D : in[t][2];
  }
  if (a->lse_stride[0] || a->lse_stride[1] < 0)
    return kn_aotl_fail("varlen lse has no batch axis: strides {0, head}");
  ls[0] = 1;
  ls[1] = a->lse_stride[1] ? a->lse_stride[1] : a->total_q;
  return 0;
}

/* a paged kernel's strides: q, o, lse dense (kn_aotl_strides), k and v page pools (num_pages,
 * page_size, kv_heads, D) with {page, head, row} strides (zeros: contiguous).  (inline: as
 * above) */
static inline int kn_aotl_strides_paged(const kn_aotl_args *a, int d, int64_t *qs, int64_t *ks,
                                        int64_t *vs, int64_t *os, int64_t *ls) {
  if (!a->block_table || !a->cache_seqlens)
    return kn_aotl_fail("paged: NULL block_table or cache_seqlens");
  if (a->page_size < 1 || a->page_size > 256 || a->num_pages < 1 || a->max_pages < 1 ||
      (int64_t)a->max_pages * a->page_size > 0x7fffffff || a->seqlen_new < 0 ||
      a->block_table_stride < 0)
    return kn_aotl_fail("paged: page_size %d (1..256), num_pages %d, max_pages %d, seqlen_new "
                        "%d, block_table_stride %lld", a->page_size, a->num_pages, a->max_pages,
                        a->seqlen_new, (long long)a->block_table_stride);
  kn_aotl_args dense = *a;
  dense.seqlen_k = a->max_pages * a->page_size;
  if (kn_aotl_strides(&dense, d, qs, ks, vs, os, ls)) return -1;
  const int64_t pool[3] = {(int64_t)a->page_size * a->kv_heads * d, d, (int64_t)a->kv_heads * d};
  const int64_t *in[2] = {a->k_stride, a->v_stride};
  int64_t *out[2] = {ks, vs};
  for (int t = 0; t < 2; t++)
    if (!in[t][0] && !in[t][1] && !in[t][2])
      for (int i = 0; i < 3; i++) out[t][i] = pool[i];
  return 0;
}

static uint64_t f32(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

static int kn_aotl_launch(struct kn_aotl_obj *const *objs, int n, const kn_aotl_args *a,
                          void *stream) {
  if (!kn_aotl_g.kind) return kn_aotl_fail("call kn_aotl_init first");
  struct kn_aotl_obj *o = NULL;
  int best = 0;
  for (int i = 0; i < n; i++) {
    int s = kn_aotl_serves(objs[i]);
    if (!s) continue;
    s = s * 2 + (a->seqlen_q >= objs[i]->seqlen_lo && a->seqlen_q <= objs[i]->seqlen_hi);
    if (s > best) o = objs[i], best = s;
  }
  if (!o) return kn_aotl_fail("the bundle has no kernel of this variant for %s", kn_aotl_g.arch);
  uint64_t v[64];
  int nv = o->values(a, v);
  if (nv < 0) return -1;
  if (kn_aotl_load(o)) return -1;
  unsigned gx = (unsigned)((a->seqlen_q + o->block_m - 1) / o->block_m);
  unsigned gy = (unsigned)a->batch * (unsigned)a->heads;
  if (gy > 65535 && kn_aotl_g.kind == 2) return kn_aotl_fail("batch x heads above 65535");
  int r;
  if (kn_aotl_g.kind == 1) {
    _Alignas(16) unsigned char buf[4096];
    size_t size = o->kernarg_size;
    if (size > sizeof buf) return kn_aotl_fail("kernarg segment too large");
    memset(buf, 0, size);
    for (int i = 0; i < o->nargs; i++) {
      const struct kn_aotl_arg *g = &o->args[i];
      uint64_t x = g->what >= 0 && g->what < nv ? v[g->what]
                 : g->what == -2 ? gx : g->what == -3 ? gy : g->what == -4 ? 1
                 : g->what == -5 ? (uint64_t)o->threads : g->what == -6 || g->what == -7 ? 1
                 : g->what == -8 ? (gy > 1 ? 2 : 1) : 0;
      memcpy(buf + g->offset, &x, g->size); /* (little-endian: the low bytes) */
    }
    void *extra[] = {(void *)1, buf, (void *)2, &size, (void *)3};
    r = kn_aotl_g.hipModuleLaunchKernel(o->fn, gx, gy, 1, (unsigned)o->threads, 1, 1, 0, stream,
                                        NULL, extra);
    if (r) return kn_aotl_fail("hipModuleLaunchKernel(%s): %s", o->symbol, kn_aotl_hiperr(r));
    return 0;
  }
  void *params[64], *old;
  for (int i = 0; i < nv; i++) params[i] = &v[i]; /* (little-endian: 4-byte values too) */
  r = kn_aotl_g.cuCtxPushCurrent(kn_aotl_g.ctx);
  if (!r) r = kn_aotl_g.cuLaunchKernel(o->fn, gx, gy, 1, (unsigned)o->threads, 1, 1,
                                       (unsigned)o->shared, stream, params, NULL);
  kn_aotl_g.cuCtxPopCurrent(&old);
  if (r) return kn_aotl_fail("cuLaunchKernel(%s): %s", o->symbol, kn_aotl_cuerr(r));
  return 0;
}
