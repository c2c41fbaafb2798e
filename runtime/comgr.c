/* comgr.c — libamd_comgr by dlopen (comgr.h).  Declared here by hand with the values of
 * amd_comgr.h (the same in ROCm 5.2's comgr 2 and ROCm 6's comgr 2 and 3): amd_comgr_status_t is
 * an int (0 = success), a data handle a struct of one uint64_t, AMD_COMGR_DATA_KIND_EXECUTABLE
 * = 0x8. */
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
enum { KN_COMGR_DATA_KIND_EXECUTABLE = 0x8 };

static struct {
  int (*create)(int kind, kn_comgr_data *data);
  int (*release)(kn_comgr_data data);
  int (*set)(kn_comgr_data data, size_t size, const char *bytes);
  int (*isa)(kn_comgr_data data, size_t *size, char *name);
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
  void *p[4] = {dlsym(h, "amd_comgr_create_data"), dlsym(h, "amd_comgr_release_data"),
                dlsym(h, "amd_comgr_set_data"), dlsym(h, "amd_comgr_get_data_isa_name")};
  if (!p[0] || !p[1] || !p[2] || !p[3]) {
    snprintf(c.why, sizeof c.why, "%s lacks the data entry points", c.library);
    c.library[0] = 0;
    return; /* (left loaded: dlclose of a library that may have started threads is unsafe) */
  }
  memcpy(&c.create, &p[0], sizeof p[0]);
  memcpy(&c.release, &p[1], sizeof p[1]);
  memcpy(&c.set, &p[2], sizeof p[2]);
  memcpy(&c.isa, &p[3], sizeof p[3]);
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
