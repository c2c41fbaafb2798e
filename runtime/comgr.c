/* comgr.c — libamd_comgr by dlopen (comgr.h).  Declared here by hand with the values of
 * amd_comgr.h (the same in ROCm 5.2's comgr 2 and ROCm 6's comgr 2 and 3): amd_comgr_status_t is
 * an int (0 = success), data and metadata handles structs of one uint64_t,
 * AMD_COMGR_DATA_KIND_EXECUTABLE = 0x8, amd_comgr_metadata_kind_t NULL 0, STRING 1, MAP 2,
 * LIST 3.  comgr hands every scalar of the note over as a string: numbers in decimal, booleans
 * as "0" / "1" (comgr 5.2.3; kn_codeobj_field_set also takes "true" / "false"). */
#include "comgr.h"

#include "codeobj.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t handle;
} kn_comgr_data;
typedef struct {
  uint64_t handle;
} kn_comgr_node;
enum { KN_COMGR_DATA_KIND_EXECUTABLE = 0x8 };
enum { KN_COMGR_META_STRING = 1, KN_COMGR_META_MAP = 2, KN_COMGR_META_LIST = 3 };

/* X(field, symbol, signature): every one required (all in comgr since its version 1.8) */
#define KN_COMGR_ENTRIES(X)                                                                  \
  X(create, "amd_comgr_create_data", int (*)(int, kn_comgr_data *))                          \
  X(release, "amd_comgr_release_data", int (*)(kn_comgr_data))                               \
  X(set, "amd_comgr_set_data", int (*)(kn_comgr_data, size_t, const char *))                 \
  X(isa, "amd_comgr_get_data_isa_name", int (*)(kn_comgr_data, size_t *, char *))            \
  X(metadata, "amd_comgr_get_data_metadata", int (*)(kn_comgr_data, kn_comgr_node *))        \
  X(destroy, "amd_comgr_destroy_metadata", int (*)(kn_comgr_node))                           \
  X(kind, "amd_comgr_get_metadata_kind", int (*)(kn_comgr_node, int *))                      \
  X(string, "amd_comgr_get_metadata_string", int (*)(kn_comgr_node, size_t *, char *))       \
  X(iterate, "amd_comgr_iterate_map_metadata",                                               \
    int (*)(kn_comgr_node, int (*)(kn_comgr_node, kn_comgr_node, void *), void *))           \
  X(lookup, "amd_comgr_metadata_lookup", int (*)(kn_comgr_node, const char *, kn_comgr_node *)) \
  X(list_size, "amd_comgr_get_metadata_list_size", int (*)(kn_comgr_node, size_t *))         \
  X(index, "amd_comgr_index_list_metadata", int (*)(kn_comgr_node, size_t, kn_comgr_node *))

static struct {
#define KN_FIELD(field, sym, ...) __typeof__(__VA_ARGS__) field; /* gnu17 */
  KN_COMGR_ENTRIES(KN_FIELD)
#undef KN_FIELD
  char library[256];
  char why[400];
} c;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  const char *env = getenv("KILN_COMGR_LIBRARY");
  static const char *const names[] = {"libamd_comgr.so.3", "libamd_comgr.so.2"};
  void *h = NULL;
  if (env && *env) {
    if (strcmp(env, "none")) h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    snprintf(c.library, sizeof c.library, "%s", env);
  } else {
    for (int i = 0; i < 2 && !h; i++) {
      h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
      snprintf(c.library, sizeof c.library, "%s", names[i]);
    }
  }
  if (!h) {
    snprintf(c.why, sizeof c.why, "no comgr (%s)",
             env && !strcmp(env, "none") ? "KILN_COMGR_LIBRARY=none" : c.library);
    c.library[0] = 0;
    return;
  }
  /* (a library that lacks one is left loaded: dlclose of one that may have started threads is
   * unsafe) */
#define KN_SYM(field, sym, ...)                                                       \
  {                                                                                   \
    void *p = dlsym(h, sym);                                                          \
    if (!p) {                                                                         \
      snprintf(c.why, sizeof c.why, "%s lacks %s", c.library, sym);                   \
      c.library[0] = 0;                                                               \
      return;                                                                         \
    }                                                                                 \
    memcpy(&c.field, &p, sizeof p);                                                   \
  }
  KN_COMGR_ENTRIES(KN_SYM)
#undef KN_SYM
}

const char *kn_comgr_library(void) {
  pthread_once(&once, load);
  return c.library;
}

bool kn_comgr_isa_name(const void *code, size_t n, char *out, size_t outn, kn_diag *why) {
  pthread_once(&once, load);
  if (!c.library[0]) {
    kn_diag_set(why, KN_E_UNSUPPORTED, "%s", c.why);
    return false;
  }
  kn_comgr_data d;
  size_t size = outn;
  why->message[0] = 0;
  out[0] = 0;
  bool ok = false;
  if (c.create(KN_COMGR_DATA_KIND_EXECUTABLE, &d)) {
    kn_diag_set(why, KN_E_UNSUPPORTED, "%s: amd_comgr_create_data failed", c.library);
    return false;
  }
  if (c.set(d, n, code) || c.isa(d, &size, NULL) || size > outn)
    kn_diag_set(why, KN_E_UNSUPPORTED, "%s cannot read the code object's ISA name (a chip or a code object "
                "version it does not know?)", c.library);
  else if (c.isa(d, &size, out))
    kn_diag_set(why, KN_E_UNSUPPORTED, "%s: amd_comgr_get_data_isa_name failed", c.library);
  else
    ok = out[0] != 0, out[outn - 1] = 0;
  if (!ok && !why->message[0]) kn_diag_set(why, KN_E_UNSUPPORTED, "%s: an empty ISA name", c.library);
  c.release(d);
  return ok;
}

/* ---- the metadata, read by comgr ---- */

typedef struct meta_walk {
  bool args;                /* filling an argument (else a kernel) */
  void *obj;                /* the kn_codeobj_kernel or kn_codeobj_arg */
  kn_codeobj_kernel *kn;    /* the kernel (for its .args) */
  char bad[160];            /* what could not be read */
} meta_walk;

/* the string of node n into buf (NUL-terminated) and its length; -1 when n is no string or is
 * longer than buf */
static long node_string(kn_comgr_node n, char *buf, size_t cap) {
  int kind = -1;
  size_t size = 0;
  if (c.kind(n, &kind) || kind != KN_COMGR_META_STRING || c.string(n, &size, NULL) || size == 0 ||
      size > cap)
    return -1;
  if (c.string(n, &size, buf)) return -1;
  buf[cap - 1] = 0;
  return (long)strnlen(buf, size);
}

static int walk_fields(kn_comgr_node map, meta_walk *w);

/* one key and value of a kernel's or an argument's map */
static int walk_entry(kn_comgr_node key, kn_comgr_node value, void *user) {
  meta_walk *w = user;
  char k[64], v[512];
  long kl = node_string(key, k, sizeof k);
  if (kl < 0) return snprintf(w->bad, sizeof w->bad, "a key that is not a string"), 1;
  const kn_codeobj_field *f = kn_codeobj_field_find(w->args, k, (size_t)kl);
  if (f) {
    long vl = node_string(value, v, sizeof v);
    if (vl < 0 || !kn_codeobj_field_set(f, w->obj, 0, v, (size_t)vl))
      return snprintf(w->bad, sizeof w->bad, "%s: %.60s", k, vl < 0 ? "not a string" : v), 1;
    return 0;
  }
  if (w->args || strcmp(k, ".args")) return 0; /* a field kiln does not read */
  int kind = -1;
  size_t len = 0;
  if (w->kn->args || c.kind(value, &kind) || kind != KN_COMGR_META_LIST ||
      c.list_size(value, &len) || len > 4096)
    return snprintf(w->bad, sizeof w->bad, ".args: not a list of at most 4096"), 1;
  w->kn->args = calloc(len ? len : 1, sizeof *w->kn->args);
  if (!w->kn->args) return snprintf(w->bad, sizeof w->bad, "out of memory"), 1;
  w->kn->nargs = (int)len;
  for (size_t i = 0; i < len; i++) {
    kn_comgr_node a;
    if (c.index(value, i, &a))
      return snprintf(w->bad, sizeof w->bad, ".args[%zu]: cannot be read", i), 1;
    meta_walk aw = {.args = true, .obj = &w->kn->args[i], .kn = w->kn};
    int r = walk_fields(a, &aw);
    c.destroy(a);
    if (r) return snprintf(w->bad, sizeof w->bad, ".args[%zu] %.120s", i, aw.bad), 1;
  }
  return 0;
}

static int walk_fields(kn_comgr_node map, meta_walk *w) {
  int kind = -1;
  if (c.kind(map, &kind) || kind != KN_COMGR_META_MAP)
    return snprintf(w->bad, sizeof w->bad, "not a map"), 1;
  int r = c.iterate(map, walk_entry, w);
  if (r && !w->bad[0]) snprintf(w->bad, sizeof w->bad, "amd_comgr_iterate_map_metadata failed");
  return r;
}

/* the top-level entries of the note: amdhsa.version, amdhsa.target, amdhsa.kernels */
static bool walk_root(kn_comgr_node root, kn_codeobj *co, char *bad, size_t badn) {
  kn_comgr_node n, e;
  char v[128];
  size_t len = 0;
  bool ok = true;
  if (!c.lookup(root, "amdhsa.version", &n)) {
    for (size_t i = 0; ok && i < 2; i++) {
      long vl = -1;
      if (c.list_size(n, &len) || len != 2 || c.index(n, i, &e)) {
        ok = false;
        break;
      }
      vl = node_string(e, v, sizeof v);
      c.destroy(e);
      kn_codeobj_field f = {"amdhsa.version", 'i', sizeof(int) * i, sizeof(int)};
      ok = vl >= 0 && kn_codeobj_field_set(&f, co->meta_version, 0, v, (size_t)vl);
    }
    c.destroy(n);
    if (!ok) return snprintf(bad, badn, "amdhsa.version is not a list of 2 numbers"), false;
  }
  if (!c.lookup(root, "amdhsa.target", &n)) {
    long vl = node_string(n, co->target_id, sizeof co->target_id);
    c.destroy(n);
    if (vl < 0) return snprintf(bad, badn, "amdhsa.target is not a string"), false;
  }
  if (c.lookup(root, "amdhsa.kernels", &n))
    return snprintf(bad, badn, "the metadata lists no kernels (amdhsa.kernels)"), false;
  if (c.list_size(n, &len) || len > 4096) {
    c.destroy(n);
    return snprintf(bad, badn, "amdhsa.kernels is not a list of at most 4096"), false;
  }
  co->kernels = calloc(len ? len : 1, sizeof *co->kernels);
  for (size_t i = 0; co->kernels && ok && i < len; i++) {
    co->nkernels = (int)i + 1; /* so that kn_codeobj_free frees a partial kernel's args */
    meta_walk w = {.obj = &co->kernels[i], .kn = &co->kernels[i]};
    ok = !c.index(n, i, &e);
    if (ok) {
      ok = !walk_fields(e, &w) && kn_codeobj_kernel_done(&co->kernels[i]);
      c.destroy(e);
    }
    if (!ok) snprintf(bad, badn, "kernel %zu: %.140s", i, w.bad[0] ? w.bad : "no .name");
  }
  c.destroy(n);
  if (!co->kernels) return snprintf(bad, badn, "out of memory"), false;
  return ok;
}

int kn_comgr_meta_reader(void *ctx, const void *data, size_t n, const uint8_t *note,
                         size_t note_n, kn_codeobj *co, kn_diag *d) {
  (void)ctx, (void)note, (void)note_n;
  pthread_once(&once, load);
  if (!c.library[0]) return kn_diag_set(d, KN_E_UNSUPPORTED, "%s", c.why), -1;
  kn_comgr_data data_h;
  kn_comgr_node root;
  char bad[200] = "";
  if (c.create(KN_COMGR_DATA_KIND_EXECUTABLE, &data_h))
    return kn_diag_set(d, KN_E_UNSUPPORTED, "%s: amd_comgr_create_data failed", c.library), -1;
  bool ok = false;
  if (c.set(data_h, n, data))
    snprintf(bad, sizeof bad, "amd_comgr_set_data failed");
  else if (c.metadata(data_h, &root))
    snprintf(bad, sizeof bad, "amd_comgr_get_data_metadata failed");
  else {
    int kind = -1;
    if (c.kind(root, &kind) || kind != KN_COMGR_META_MAP)
      snprintf(bad, sizeof bad, "the metadata is not a map");
    else
      ok = walk_root(root, co, bad, sizeof bad);
    c.destroy(root);
  }
  c.release(data_h);
  co->meta_reader = "comgr";
  if (!ok)
    return kn_diag_set(d, KN_E_UNSUPPORTED, "%s cannot read the code object's metadata: %s",
                       c.library, bad), -1;
  return 0;
}

int kn_comgr_codeobj_read(const void *data, size_t n, kn_codeobj *co, kn_diag *why, kn_diag *d) {
  pthread_once(&once, load);
  why->message[0] = 0;
  /* kiln's reader first: bytes it refuses (corrupt, truncated, not a code object) never reach
   * comgr, whose reading of hostile input kiln does not vouch for */
  if (kn_codeobj_read(data, n, co, d)) return -1;
  if (!c.library[0]) {
    kn_diag_set(why, KN_E_UNSUPPORTED, "%s", c.why);
    return 0;
  }
  kn_codeobj cm;
  if (kn_codeobj_read_with(data, n, &cm, kn_comgr_meta_reader, NULL, why)) return 0;
  kn_codeobj_free(co);
  *co = cm;
  return 0;
}

/* the processor and the features of a target ID, with or without the "amdgcn-amd-amdhsa--"
 * triple */
static const char *target_part(const char *id, size_t *plen) {
  const char *t = strstr(id, "--");
  const char *p = t ? t + 2 : id;
  *plen = strcspn(p, ":");
  return p;
}

/* the setting of feature f in target ID id: '+', '-', or 0 when it is not named */
static char feature_of(const char *id, const char *f) {
  size_t fl = strlen(f);
  for (const char *p = strchr(id, ':'); p; p = strchr(p + 1, ':'))
    if (!strncmp(p + 1, f, fl) && (p[1 + fl] == '+' || p[1 + fl] == '-')) return p[1 + fl];
  return 0;
}

kn_status kn_target_id_check(const char *code, const char *device, kn_diag *err) {
  size_t cl, dl;
  const char *cp = target_part(code, &cl), *dp = target_part(device, &dl);
  if (cl != dl || strncmp(cp, dp, cl))
    return kn_diag_set(err, KN_E_UNSUPPORTED, "the code object is for %.*s (%s), the device is "
                       "a %.*s (%s)", (int)cl, cp, code, (int)dl, dp, device);
  static const char *const features[] = {"sramecc", "xnack"};
  for (int i = 0; i < 2; i++) {
    char want = feature_of(cp, features[i]), have = feature_of(dp, features[i]);
    if (want && have && want != have)
      return kn_diag_set(err, KN_E_UNSUPPORTED, "the code object needs %s%c (%s), the device "
                         "runs %s%c (%s)", features[i], want, code, features[i], have, device);
  }
  return KN_OK;
}

void kn_codeobj_target_id(const kn_codeobj *co, char *out, size_t n) {
  /* EF_AMDGPU_FEATURE_SRAMECC_V4 0xc00 (any 0x400, off 0x800, on 0xc00); XNACK_V4 0x300 (any
   * 0x100, off 0x200, on 0x300) -- LLVM's ELF.h, code object v4 and later */
  unsigned sr = co->e_flags & 0xc00, xn = co->e_flags & 0x300;
  snprintf(out, n, "amdgcn-amd-amdhsa--%s%s%s", co->target ? co->target->name : "unknown",
           sr == 0xc00 ? ":sramecc+" : sr == 0x800 ? ":sramecc-" : "",
           xn == 0x300 ? ":xnack+" : xn == 0x200 ? ":xnack-" : "");
}
