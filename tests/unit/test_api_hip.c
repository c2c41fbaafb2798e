/* test_api_hip.c — the HIP device (runtime/hip.c) and the public API on it (device "hip",
 * "gfx90a", "gfx942", "auto").
 *
 * Three ways this binary runs:
 *   - Everywhere: without a HIP runtime (a child re-run with KILN_HIP_LIBRARY pointing at a
 *     missing library, or at the stand-in reporting no device), "hip", "gfx942" and "hip:3" are
 *     KILN_ERR_NO_DEVICE with the reason, "auto" falls back to the host.
 *   - Under ctest as test_api_hip_fake (gfx942) and test_api_hip_fake_gfx90a: KILN_HIP_LIBRARY
 *     is the stand-in libamdhip64 (fake_hip.c; KILN_FAKE_HIP_ARCH picks its chip).  The code
 *     objects are really compiled, cached and loaded; the runtime packs the kernarg segment from
 *     their metadata; the stand-in checks the launch against the code object and decodes the
 *     segment by the metadata's argument list, and this test's runner (run_twin) executes the
 *     *emulated twin* on the decoded values: the same kernel (descriptor, tiling) compiled for
 *     <chip>-emu, after checking that compiling it for <chip> gives exactly the bytes that were
 *     launched.  So the numbers, compared with the float64 reference, prove the packing: a wrong
 *     offset, size or grid gives a wrong answer or an emulator error.  Fault injection
 *     (KILN_FAKE_HIP_FAULT): module load failure, launch failure, out of memory, a code object
 *     for the wrong chip — each a clear error.
 *   - On an AMD GPU (none exists where kiln is built): the same tests on the real runtime, minus
 *     the stand-in's own checks.
 * KILN_TEST_SEED replays the inputs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp, RTLD_NOLOAD */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "attention.h"
#include "comgr.h"
#include "emu.h"
#include "fake_hip.h"
#include "hip_device.h"
#include "kiln.h"
#include "numeric.h"
#include "space.h"
#include "target.h"
#include "test_api_util.h"
#include "twin_args.h"

static const char *self_path;
static uint64_t seed = 1;
static kn_hip_device *dev;     /* opened once, for buffers */
static char chip[16];          /* the device's chip: gfx942, gfx90a */
static bool fake;              /* the stand-in is loaded */
static kn_fake_hip_last_error_fn fake_error;

/* ---- helpers ---- */


/* ---- the emulated twin (the stand-in's runner) ---- */

typedef struct twin {
  api_kind kind;       /* the forward kernel or one of decode's two */
  kn_attn_desc desc;
  kn_attn_config cfg;
  kn_attn_sig sig;
  char *mods;
  void *code;          /* the code object the same kernel compiles to for the chip */
  size_t code_n;
  kn_kernel *emu;      /* compiled for <chip>-emu */
  struct twin *next;
} twin;
static pthread_mutex_t twin_mu = PTHREAD_MUTEX_INITIALIZER;
static twin *twins;
static int twin_runs;

/* remembers a kernel (descriptor, tiling, signature) for the runner */
static void twin_add_of(api_kind kind, const kn_attn_desc *d, const kn_attn_config *c,
                        const kn_attn_sig *sig) {
  pthread_mutex_lock(&twin_mu);
  for (twin *t = twins; t; t = t->next)
    if (t->kind == kind && !memcmp(&t->cfg, c, sizeof t->cfg) && t->desc.dtype == d->dtype) {
      char a[KN_ATTN_KEY_MAX], b[KN_ATTN_KEY_MAX];
      kn_attn_desc_key(&t->desc, a, sizeof a);
      kn_attn_desc_key(d, b, sizeof b);
      if (!strcmp(a, b)) {
        pthread_mutex_unlock(&twin_mu);
        return;
      }
    }
  twin *t = calloc(1, sizeof *t);
  assert_non_null(t);
  t->kind = kind;
  t->desc = *d;
  t->cfg = *c;
  t->sig = *sig;
  t->mods = d->mods ? strdup(d->mods) : NULL;
  t->desc.mods = t->mods;
  t->next = twins;
  twins = t;
  pthread_mutex_unlock(&twin_mu);
}
static void twin_add(const kn_attn_desc *d, const kn_attn_config *c, const kn_attn_sig *sig) {
  twin_add_of(API_FWD, d, c, sig);
}

/* a forward kernel, and the decode kernels its forwards of up to 16 query rows launch (the
 * API's decode tiling; the combine kernel's fixed one) */
static void twin_note(const kiln_kernel *k) {
  twin_add(&k->desc, &k->cfg, &k->sig);
  const kn_arch *arch = kn_arch_get(chip);
  const kn_attn_config cc = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
  kn_attn_sig sig;
  kn_diag e;
  /* a dense descriptor's split kernel, or a paged one's three (in-page, gather, pages) */
  const bool paged = k->desc.layout == KN_ATTN_PAGED;
  for (int read = paged; read <= (paged ? KN_DECODE_READ_PAGES : 0); read++) {
    kn_attn_config c = kn_attn_decode_read_config(arch, &k->desc, (kn_decode_read)read);
    if (kn_attn_decode_check(arch, &k->desc, &c, &e)) return;
    if (kn_attn_decode_signature(&k->desc, 0, &sig, &e) == 0)
      twin_add_of(!paged                          ? API_DECODE
                  : read == KN_DECODE_READ_IN_PAGE ? API_DECODE_IN_PAGE
                  : read == KN_DECODE_READ_PAGES   ? API_DECODE_PAGES
                                                   : API_DECODE_GATHER,
                  &k->desc, &c, &sig);
  }
  if (kn_attn_decode_signature(&k->desc, 1, &sig, &e) == 0)
    twin_add_of(API_COMBINE, &k->desc, &cc, &sig);
}

/* every tiling the tuner may try for d under the space spec (its candidates: with off32, as the
 * tuner compiles them for the kernel prepare will load) */
static void twin_note_space(const kiln_attn_desc *pd, const char *spec) {
  kn_attn_desc d;
  kn_attn_sig sig;
  if (api_desc_from_public(pd, &d) || api_signature(&d, &sig)) fail_msg("%s", kiln_last_error());
  kn_space sp;
  kn_diag e;
  if (kn_space_default(&sp, "fwd", kn_arch_get(chip), &e) || kn_space_apply(&sp, spec, &e))
    fail_msg("space: %s", e.message);
  for (int i = 0; i < kn_space_size(&sp); i++) {
    kn_tune_config tc;
    kn_space_point(&sp, i, &tc);
    kn_attn_config c = {.block_m = tc.block_m, .block_n = tc.block_n, .warps = tc.warps,
                        .stages = tc.stages, .off32 = kn_attn_off32_applies(kn_arch_get(chip), &d)};
    if (kn_attn_check_on(kn_arch_get(chip), &d, &c, &e) == 0) twin_add(&d, &c, &sig);
  }
}

static int run_twin(void *user, const kn_fake_hip_launch *l, char *why, size_t n) {
  (void)user;
  pthread_mutex_lock(&twin_mu);
  twin *t = twins;
  kn_diag d;
  int rc = -1;
  for (; t; t = t->next) {
    if (!t->code) {
      kn_module *m = api_build_module_of(t->kind, &t->desc, &t->cfg, &d);
      kn_artifact a;
      if (!m || kn_compile_artifact(m, api_kind_symbol(t->kind), kn_target_get(chip), NULL, &a,
                                    &d)) {
        snprintf(why, n, "twin: %s", d.message);
        kn_module_free(m);
        goto out;
      }
      t->code = a.data, t->code_n = a.size;
      a.data = NULL;
      kn_artifact_free(&a);
      kn_module_free(m);
    }
    if (t->code_n <= l->code_object_size && !memcmp(t->code, l->code_object, t->code_n)) break;
  }
  if (!t) {
    snprintf(why, n, "the launched code object is none of the kernels the test prepared");
    goto out;
  }
  if (!t->emu) {
    char emu[32];
    snprintf(emu, sizeof emu, "%s-emu", chip);
    kn_module *m = api_build_module_of(t->kind, &t->desc, &t->cfg, &d);
    int bad = !m || kn_compile(m, api_kind_symbol(t->kind), kn_emu_target(emu), NULL, &t->emu,
                               &d);
    kn_module_free(m);
    if (bad) {
      snprintf(why, n, "twin for %s: %s", emu, d.message);
      goto out;
    }
  }
  if (l->nvalues != t->sig.n) {
    snprintf(why, n, "%d explicit arguments decoded; the kernel has %d", l->nvalues, t->sig.n);
    goto out;
  }
  kn_argval args[KN_ATTN_MAX_PARAMS + KN_DECODE_NPARAMS];
  twin_decode(&t->sig, l->values, args);
  int grid[3] = {(int)l->grid[0], (int)l->grid[1], (int)l->grid[2]};
  if (kn_emu_run(t->emu, args, grid, l->regions, l->nregions, NULL, &d)) {
    snprintf(why, n, "%s", d.message);
    goto out;
  }
  twin_runs++;
  rc = 0;
out:
  pthread_mutex_unlock(&twin_mu);
  return rc;
}

/* a HIP device present (real, or the stand-in)?  Opens `dev` the first time. */
static bool have_gpu(void) {
  static int state;
  if (state) return state > 0;
  state = -1;
  kn_device_list l;
  kn_discover(&l);
  const kn_device_info *di = NULL;
  for (int i = 0; i < l.n && !di; i++)
    if (l.dev[i].kind == KN_DEVICE_HIP && l.dev[i].target[0]) di = &l.dev[i];
  kn_diag e;
  if (!di) {
    printf("  (no AMD GPU with a kiln target: %s)\n", l.hip.why.message);
    return false;
  }
  if (kn_hip_device_open(di->ordinal, di->arch, &dev, &e) != KN_OK) {
    printf("  (HIP device: %s)\n", e.message);
    return false;
  }
  snprintf(chip, sizeof chip, "%s", di->target);
  const char *lib = getenv("KILN_HIP_LIBRARY");
  void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  kn_fake_hip_set_runner_fn set = h ? (kn_fake_hip_set_runner_fn)dlsym(h, "kn_fake_hip_set_runner") : NULL;
  if (set) {
    set(run_twin, NULL);
    fake = true;
    fake_error = (kn_fake_hip_last_error_fn)dlsym(h, "kn_fake_hip_last_error");
  }
  printf("  HIP device %d: %s (%s%s%s)%s\n", di->ordinal, di->name, di->arch,
         di->arch_features[0] ? ":" : "", di->arch_features, fake ? ", the stand-in" : "");
  state = 1;
  return true;
}

static kiln_context *hip_ctx(const char *dir, const char *device) {
  kiln_context_options o = {.cache_dir = dir, .device = device, .no_cache = dir == NULL,
                            .tune_policy = KILN_TUNE_NONE};
  kiln_context *ctx = NULL;
  if (kiln_context_create(&o, &ctx)) fail_msg("context: %s", kiln_last_error());
  return ctx;
}

static kiln_kernel *prepare(kiln_context *ctx, const kiln_attn_desc *d) {
  kiln_kernel *k;
  if (kiln_prepare(ctx, d, NULL, &k)) fail_msg("prepare: %s", kiln_last_error());
  twin_note(k);
  return k;
}

static void *dalloc(size_t n) {
  void *p;
  kn_diag e;
  if (kn_hip_alloc(dev, n, &p, &e)) fail_msg("%s", e.message);
  return p;
}
static void *upload(const void *host, size_t n) {
  void *p = dalloc(n);
  kn_diag e;
  if (kn_hip_copy_htod(dev, p, host, n, &e)) fail_msg("%s", e.message);
  return p;
}

typedef struct shape {
  int batch, heads, kv_heads, seqlen_q, seqlen_k;
  int bshd;     /* q/k/v/o stored as (B, N, H, D) through strides */
} shape;

/* One forward on device buffers against the float64 reference (kn_attn_reference_v, so a
 * variant's window and softcap too); 0 when within the dtype's tolerance.  The output and lse
 * start as NaN bytes, so a row never written fails. */
static int check_forward(kiln_kernel *k, shape s, const kn_attn_vargs *vin, const kiln_attn_args *extra,
                         uint64_t sd, kn_hip_stream stream, char *why, size_t nwhy) {
  const kn_attn_desc *id = &k->desc;
  kn_scalar t = id->dtype;
  size_t es = kn_scalar_size(t), D = (size_t)id->head_dim;
  /* fp8 inputs (docs/serving.md): q / k / v in their formats, quantised with a descale per
   * (batch, kv head); x holds the dequantised values, the reference's inputs */
  const kn_scalar ta[3] = {kn_attn_q_type(id), kn_attn_kv_type(id), kn_attn_kv_type(id)};
  const size_t esa[3] = {kn_scalar_size(ta[0]), kn_scalar_size(ta[1]), kn_scalar_size(ta[2])};
  float *ds[3] = {NULL, NULL, NULL};
  for (int a = 0; a < 3; a++) {
    if (!kn_scalar_is_fp8(ta[a])) continue;
    ds[a] = malloc(sizeof(float) * (size_t)(s.batch * s.kv_heads));
    for (int i = 0; i < s.batch * s.kv_heads; i++)
      ds[a][i] = (float)((1.0 + 0.125 * ((i + a) % 5)) * 4 / kn_max_finite(ta[a]));
  }
  size_t nq = (size_t)s.batch * s.heads * s.seqlen_q * D;
  size_t nk = (size_t)s.batch * s.kv_heads * s.seqlen_k * D;
  size_t nl = (size_t)s.batch * s.heads * s.seqlen_q;
  char *h[3] = {malloc(nq * esa[0]), malloc(nk * esa[1]), malloc(nk * esa[2])},
       *ho = malloc(nq * es);
  double *x[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)}, *ro = malloc(nq * 8);
  double *rl = malloc(nl * 8);
  float *hl = malloc(nl * 4);
  size_t cnt[3] = {nq, nk, nk};
  int heads[3] = {s.heads, s.kv_heads, s.kv_heads}, len[3] = {s.seqlen_q, s.seqlen_k, s.seqlen_k};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < cnt[a]; i++) {
      size_t dd = i % D, r = i / D, n = r % len[a], hb = r / len[a], hh = hb % heads[a],
             b = hb / heads[a];
      size_t at = s.bshd ? ((b * len[a] + n) * heads[a] + hh) * D + dd : i;
      if (ds[a]) {
        size_t hk = a ? hh : hh / (size_t)(s.heads / s.kv_heads);
        double sc = ds[a][b * (size_t)s.kv_heads + hk];
        uint8_t byte = (uint8_t)kn_encode(ta[a], normal(&sd) / sc);
        h[a][at] = (char)byte;
        x[a][i] = kn_decode(ta[a], byte) * sc;
        continue;
      }
      x[a][i] = kn_round(t, normal(&sd));
      kn_store_elem(t, h[a] + at * es, x[a][i]);
    }
  void *dq = upload(h[0], nq * esa[0]), *dk = upload(h[1], nk * esa[1]),
       *dv = upload(h[2], nk * esa[2]);
  void *dds[3] = {NULL, NULL, NULL};
  for (int a = 0; a < 3; a++)
    if (ds[a]) dds[a] = upload(ds[a], sizeof(float) * (size_t)(s.batch * s.kv_heads));
  void *dout = dalloc(nq * es), *dl = id->has_lse ? dalloc(nl * 4) : NULL;
  kn_diag e;
  if (kn_hip_memset8(dev, dout, 0xff, nq * es, &e) || (dl && kn_hip_memset8(dev, dl, 0xff, nl * 4, &e)))
    fail_msg("%s", e.message);
  kiln_attn_args a = extra ? *extra : (kiln_attn_args){0};
  a.q = dq, a.k = dk, a.v = dv, a.o = dout, a.lse = dl;
  a.batch = s.batch, a.heads = s.heads, a.kv_heads = s.kv_heads;
  a.seqlen_q = s.seqlen_q, a.seqlen_k = s.seqlen_k;
  a.q_descale = dds[0], a.k_descale = dds[1], a.v_descale = dds[2];
  if (s.bshd) {
    int64_t Dq = (int64_t)D;
    a.q_stride[0] = a.o_stride[0] = (int64_t)s.seqlen_q * s.heads * Dq;
    a.q_stride[1] = a.o_stride[1] = Dq;
    a.q_stride[2] = a.o_stride[2] = (int64_t)s.heads * Dq;
    a.k_stride[0] = a.v_stride[0] = (int64_t)s.seqlen_k * s.kv_heads * Dq;
    a.k_stride[1] = a.v_stride[1] = Dq;
    a.k_stride[2] = a.v_stride[2] = (int64_t)s.kv_heads * Dq;
  }
  kiln_status st = kiln_forward(k, &a, (void *)stream);
  double err = 0, lerr = 0, tol = kn_attn_tolerance(t), ltol = kn_attn_lse_tolerance(t);
  if (st) {
    /* a failed launch (the emulator's error) is a wrong result, not the end of the test */
    snprintf(why, nwhy, "forward: %.150s", kiln_last_error());
  } else {
    if (kn_hip_stream_sync(dev, stream, &e)) fail_msg("sync: %s", e.message);
    if (kn_hip_copy_dtoh(dev, ho, dout, nq * es, &e) ||
        (dl && kn_hip_copy_dtoh(dev, hl, dl, nl * 4, &e)))
      fail_msg("%s", e.message);
    kn_attn_problem p = {.batch = s.batch, .heads = s.heads, .kv_heads = s.kv_heads,
                         .seqlen_q = s.seqlen_q, .seqlen_k = s.seqlen_k};
    kn_attn_vargs va = vin ? *vin : (kn_attn_vargs){.window_left = -1, .window_right = -1};
    /* a paged call here reads the dense k / v as pages in order (test_paged_hip): its
     * reference is the dense one */
    kn_attn_desc rd = *id;
    if (rd.layout == KN_ATTN_PAGED) rd.layout = KN_ATTN_DENSE;
    if (kn_attn_reference_v(&rd, NULL, &p, &va, x[0], x[1], x[2], ro, rl, &e))
      fail_msg("reference: %s", e.message);
    for (size_t i = 0; i < nq; i++) {
      size_t dd = i % D, r = i / D, n = r % s.seqlen_q, hb = r / s.seqlen_q, hh = hb % s.heads,
             b = hb / s.heads;
      size_t at = s.bshd ? ((b * s.seqlen_q + n) * s.heads + hh) * D + dd : i;
      double y = fabs(kn_load_elem(t, ho + at * es) - ro[i]);
      if (!(y <= err)) err = y; /* NaN sticks */
    }
    for (size_t i = 0; dl && i < nl; i++) {
      double y = isinf(rl[i]) && hl[i] == rl[i] ? 0 : fabs(hl[i] - rl[i]);
      if (!(y <= lerr)) lerr = y;
    }
    snprintf(why, nwhy, "max|dO| %.2e (tol %.0e), max|dlse| %.2e (tol %.0e)", err, tol, lerr,
             ltol);
  }
  void *bufs[] = {dq, dk, dv, dout, dl, dds[0], dds[1], dds[2]};
  for (int i = 0; i < 8; i++)
    if (bufs[i]) kn_hip_free(dev, bufs[i], NULL);
  for (int i = 0; i < 3; i++) free(h[i]), free(x[i]), free(ds[i]);
  free(ho), free(ro), free(rl), free(hl);
  return !st && err <= tol && lerr <= ltol ? 0 : -1;
}

/* ---- no device ---- */

static int child_nodev(void) {
  kiln_context *ctx = NULL;
  kiln_context_options o = {.device = "hip", .no_cache = 1};
  int bad = 0;
  const char *want = getenv("NODEV_WANT");
  if (kiln_context_create(&o, &ctx) != KILN_ERR_NO_DEVICE || !strstr(kiln_last_error(), want)) {
    fprintf(stderr, "hip: %s\n", kiln_last_error());
    bad++;
  }
  const char *names[] = {"gfx942", "gfx90a", "hip:3"};
  for (int i = 0; i < 3; i++) {
    o.device = names[i];
    if (kiln_context_create(&o, &ctx) != KILN_ERR_NO_DEVICE) bad++;
  }
  o.device = "gfx1100";
  if (kiln_context_create(&o, &ctx) != KILN_ERR_UNSUPPORTED) bad++;
  /* the runtime's own loader says the same */
  kn_diag e;
  if (kn_hip_init(&e) != KN_E_NODEV || !strstr(e.message, want)) {
    fprintf(stderr, "kn_hip_init: %s\n", e.message);
    bad++;
  }
  o.device = "auto";
  if (kiln_context_create(&o, &ctx) != KILN_OK || strcmp(kiln_context_target(ctx), "host")) bad++;
  kiln_context_destroy(ctx);
  printf("child nodev (%s): %d wrong\n", want, bad);
  return bad ? 1 : 0;
}

static void run_child(const char *lib, const char *fault, const char *want) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("KILN_HIP_LIBRARY", lib, 1);
    setenv("KILN_CUDA_LIBRARY", "none", 1);
    setenv("NODEV_WANT", want, 1);
    if (fault) setenv("KILN_FAKE_HIP_FAULT", fault, 1);
    execl(self_path, self_path, "--child", "nodev", (char *)NULL);
    _exit(127);
  }
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_no_device(void **state) {
  (void)state;
  run_child("/nonexistent/libamdhip64.so", NULL, "/nonexistent/libamdhip64.so");
  const char *lib = getenv("KILN_HIP_LIBRARY");
  if (lib && strstr(lib, "fake")) run_child(lib, "nodev", "hipError 100");
}

/* ---- the runtime: code objects, bundles, kernarg packing ---- */

static void *compile_for(const char *target, const kiln_attn_desc *pd, size_t *n) {
  kn_attn_desc d;
  if (api_desc_from_public(pd, &d)) fail_msg("%s", kiln_last_error());
  kn_attn_config c = kn_attn_default_config(kn_arch_get(target), &d);
  kn_diag e;
  kn_module *m = api_build_module("attn_fwd", &d, &c, &e);
  kn_artifact a;
  if (!m || kn_compile_artifact(m, "attn_fwd", kn_target_get(target), NULL, &a, &e))
    fail_msg("compile: %s", e.message);
  kn_module_free(m);
  *n = a.size;
  return a.data;
}

/* a clang offload bundle of the given entries (id, bytes) */
static void *bundle(int n, const char **ids, void **code, const size_t *sizes, size_t *out_n) {
  size_t head = 24 + 8, at;
  for (int i = 0; i < n; i++) head += 24 + strlen(ids[i]);
  size_t total = head;
  for (int i = 0; i < n; i++) total += sizes[i];
  uint8_t *b = calloc(1, total);
  memcpy(b, "__CLANG_OFFLOAD_BUNDLE__", 24);
  uint64_t cnt = (uint64_t)n;
  memcpy(b + 24, &cnt, 8);
  at = 32;
  size_t data = head;
  for (int i = 0; i < n; i++) {
    uint64_t v[3] = {data, sizes[i], strlen(ids[i])};
    memcpy(b + at, v, 24);
    memcpy(b + at + 24, ids[i], strlen(ids[i]));
    at += 24 + strlen(ids[i]);
    memcpy(b + data, code[i], sizes[i]);
    data += sizes[i];
  }
  *out_n = total;
  return b;
}

static void test_runtime(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  const char *other = strcmp(chip, "gfx90a") ? "gfx90a" : "gfx942";
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = 64, .causal = 1, .has_lse = 1};
  size_t n, no;
  void *co = compile_for(chip, &pd, &n), *co_other = compile_for(other, &pd, &no);
  kn_diag e;
  kn_hip_module *m = NULL;
  /* the wrong chip: refused before the runtime sees it, both named */
  assert_int_equal(kn_hip_module_load(dev, co_other, no, &m, &e), KN_E_UNSUPPORTED);
  print_message("wrong chip: %s\n", e.message);
  assert_non_null(strstr(e.message, other));
  assert_non_null(strstr(e.message, chip));
  /* not a code object */
  assert_int_equal(kn_hip_module_load(dev, "hello, world", 12, &m, &e), KN_E_INVALID);
  assert_non_null(strstr(e.message, "not an ELF"));
  /* an offload bundle: the device's entry is taken; one without it is refused, entries named */
  char id_this[64], id_other[64];
  snprintf(id_this, sizeof id_this, "hipv4-amdgcn-amd-amdhsa--%s:sramecc+:xnack-", chip);
  snprintf(id_other, sizeof id_other, "hipv4-amdgcn-amd-amdhsa--%s", other);
  const char *ids[3] = {"host-x86_64-unknown-linux-gnu-", id_other, id_this};
  void *codes[3] = {"", co_other, co};
  size_t sizes[3] = {0, no, n}, bn;
  void *b = bundle(3, ids, codes, sizes, &bn);
  if (kn_hip_module_load(dev, b, bn, &m, &e)) fail_msg("bundle: %s", e.message);
  kn_hip_module_unload(m);
  free(b);
  b = bundle(2, ids, codes, sizes, &bn);
  assert_int_equal(kn_hip_module_load(dev, b, bn, &m, &e), KN_E_UNSUPPORTED);
  print_message("bundle without %s: %s\n", chip, e.message);
  assert_non_null(strstr(e.message, id_other));
  free(b);

  /* the kernarg segment: every explicit value at its metadata offset, hidden ones from the
   * launch, and mismatches refused */
  if (kn_hip_module_load(dev, co, n, &m, &e)) fail_msg("load: %s", e.message);
  /* who read the metadata: comgr where it loads (it reads kiln's v5 objects, docs/amdgpu.md),
   * kiln's reader with KILN_COMGR_LIBRARY=none; the packing below and every launch of this run
   * use that reading */
  const char *why, *reader = kn_hip_module_meta_reader(m, &why);
  const char *cl = getenv("KILN_COMGR_LIBRARY");
  bool comgr = kn_comgr_library()[0] != 0;
  print_message("metadata read by %s%s%s\n", reader, why[0] ? ": " : "", why);
  assert_string_equal(reader, comgr ? "comgr" : "kiln");
  if (cl && !strcmp(cl, "none")) assert_false(comgr);
  kn_hip_kernel *k;
  if (kn_hip_module_kernel(m, "attn_fwd", &k, &e)) fail_msg("%s", e.message);
  assert_int_equal(kn_hip_module_kernel(m, "nope", &k, &e), KN_E_INVALID);
  if (kn_hip_module_kernel(m, "attn_fwd", &k, &e)) fail_msg("%s", e.message);
  const kn_codeobj_kernel *meta = kn_hip_kernel_meta(k);
  int nexp = meta->nargs - meta->nhidden;
  assert_int_equal(nexp, KN_ATTN_NPARAMS);
  uint64_t vals[KN_ATTN_MAX_PARAMS];
  kn_hip_arg args[KN_ATTN_MAX_PARAMS];
  int ai = 0;
  for (int i = 0; i < meta->nargs; i++) {
    if (meta->args[i].hidden) continue;
    vals[ai] = 0x0102030405060708ull * (uint64_t)(ai + 1);
    args[ai] = (kn_hip_arg){&vals[ai], meta->args[i].size};
    ai++;
  }
  _Alignas(16) uint8_t buf[KN_HIP_KERNARG_MAX];
  size_t size;
  unsigned grid[3] = {7, 12, 1}, block[3] = {(unsigned)meta->max_flat_workgroup_size, 1, 1};
  if (kn_hip_pack_kernargs(meta, grid, block, 0, args, nexp, buf, &size, &e))
    fail_msg("pack: %s", e.message);
  assert_int_equal(size, meta->kernarg_size);
  ai = 0;
  for (int i = 0; i < meta->nargs; i++) {
    const kn_codeobj_arg *a = &meta->args[i];
    if (a->hidden) {
      if (!strcmp(a->value_kind, "hidden_block_count_y"))
        assert_int_equal(buf[a->offset], 12);
      if (!strcmp(a->value_kind, "hidden_group_size_x"))
        assert_int_equal(buf[a->offset] | buf[a->offset + 1] << 8, block[0]);
      continue;
    }
    assert_memory_equal(buf + a->offset, &vals[ai], a->size);
    ai++;
  }
  args[5].size = 8; /* sm_scale is an f32: 4 bytes */
  assert_int_equal(kn_hip_pack_kernargs(meta, grid, block, 0, args, nexp, buf, &size, &e),
                   KN_E_INVALID);
  print_message("wrong size: %s\n", e.message);
  assert_non_null(strstr(e.message, "4 bytes in the code object; 8 given"));
  assert_int_equal(kn_hip_pack_kernargs(meta, grid, block, 0, args, nexp - 1, buf, &size, &e),
                   KN_E_INVALID);
  args[5].size = 4;
  /* the stand-in checks what it is given: a segment one byte short, a workgroup other than the
   * kernel's, arguments through kernelParams — each refused, named */
  if (fake) {
    void *h = dlopen(getenv("KILN_HIP_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
    int (*launch)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                  void *, void **, void **) = NULL;
    int (*getfn)(void **, void *, const char *) = NULL;
    int (*load)(void **, const void *) = NULL, (*unload)(void *) = NULL;
    *(void **)&unload = dlsym(h, "hipModuleUnload");
    *(void **)&launch = dlsym(h, "hipModuleLaunchKernel");
    *(void **)&getfn = dlsym(h, "hipModuleGetFunction");
    *(void **)&load = dlsym(h, "hipModuleLoadData");
    void *fm, *ff;
    assert_int_equal(load(&fm, co), 0);
    assert_int_equal(getfn(&ff, fm, "attn_fwd"), 0);
    if (kn_hip_pack_kernargs(meta, grid, block, 0, args, nexp, buf, &size, &e))
      fail_msg("pack: %s", e.message);
    size_t shorter = size - 1;
    void *x1[] = {(void *)1, buf, (void *)2, &shorter, (void *)3};
    assert_int_equal(launch(ff, 7, 12, 1, block[0], 1, 1, 0, NULL, NULL, x1), 1);
    print_message("stand-in, short segment: %s\n", fake_error());
    assert_non_null(strstr(fake_error(), "kernarg buffer of"));
    void *x2[] = {(void *)1, buf, (void *)2, &size, (void *)3};
    assert_int_equal(launch(ff, 7, 12, 1, 64, 1, 1, 0, NULL, NULL, x2), 1);
    print_message("stand-in, workgroup of 64: %s\n", fake_error());
    assert_non_null(strstr(fake_error(), "requires 256 work-items"));
    void *params[1] = {buf};
    assert_int_equal(launch(ff, 7, 12, 1, block[0], 1, 1, 0, NULL, params, NULL), 1);
    assert_non_null(strstr(fake_error(), "kernelParams"));
    assert_int_equal(unload(fm), 0);
  }
  /* launches the runtime must refuse: a workgroup of the wrong size, too much LDS */
  unsigned small[3] = {64, 1, 1};
  assert_int_equal(kn_hip_launch(k, grid, small, 0, NULL, args, nexp, &e), KN_E_INVALID);
  assert_non_null(strstr(e.message, "work-items"));
  assert_int_equal(kn_hip_launch(k, grid, block, 1u << 20, NULL, args, nexp, &e), KN_E_UNSUPPORTED);
  assert_non_null(strstr(e.message, "LDS"));
  /* events time a stream */
  kn_hip_event e0, e1;
  float ms = 0;
  if (kn_hip_event_create(dev, &e0, &e) || kn_hip_event_create(dev, &e1, &e) ||
      kn_hip_event_record(dev, e0, NULL, &e) || kn_hip_event_record(dev, e1, NULL, &e) ||
      kn_hip_event_sync(dev, e1, &e) || kn_hip_event_elapsed(dev, e0, e1, &ms, &e))
    fail_msg("events: %s", e.message);
  assert_true(ms >= 0);
  kn_hip_event_destroy(dev, e0), kn_hip_event_destroy(dev, e1);
  kn_hip_module_unload(m);
  free(co), free(co_other);
}

/* The hidden arguments: kiln's attention kernels have none (the AMDGPU attributor trims those a
 * kernel does not read: `kiln compile --stats` shows 24(0h)), so their packing is checked on the
 * metadata of a kernel that reads them, written out here as a compiler would report it. */
static void test_hidden_args(void **state) {
  (void)state;
  kn_codeobj_arg args[] = {
      {"p", "global_buffer", 0, 8, false, "global"},     {"n", "by_value", 8, 4, false, ""},
      {"", "hidden_block_count_x", 16, 4, true, ""}, {"", "hidden_block_count_y", 20, 4, true, ""},
      {"", "hidden_block_count_z", 24, 4, true, ""}, {"", "hidden_group_size_x", 28, 2, true, ""},
      {"", "hidden_group_size_y", 30, 2, true, ""},  {"", "hidden_group_size_z", 32, 2, true, ""},
      {"", "hidden_remainder_x", 34, 2, true, ""},   {"", "hidden_grid_dims", 80, 2, true, ""},
      {"", "hidden_dynamic_lds_size", 136, 4, true, ""}, {"", "hidden_queue_ptr", 144, 8, true, ""},
  };
  kn_codeobj_kernel k = {.name = "k", .kernarg_size = 272, .kernarg_align = 8,
                         .max_flat_workgroup_size = 128, .nargs = 12, .nhidden = 10,
                         .args = args};
  uint64_t p = 0x1122334455667788ull;
  uint32_t n = 0xdeadbeef;
  kn_hip_arg in[2] = {{&p, 8}, {&n, 4}};
  _Alignas(16) uint8_t buf[KN_HIP_KERNARG_MAX];
  memset(buf, 0xaa, sizeof buf);
  size_t size;
  unsigned grid[3] = {70000, 3, 1}, block[3] = {128, 1, 1};
  kn_diag e;
  if (kn_hip_pack_kernargs(&k, grid, block, 512, in, 2, buf, &size, &e)) fail_msg("%s", e.message);
  assert_int_equal(size, 272);
  uint8_t want[272] = {0};
  memcpy(want, &p, 8);
  memcpy(want + 8, &n, 4);
  uint32_t bc[3] = {70000, 3, 1};
  uint16_t gs[3] = {128, 1, 1}, dims = 2;
  uint32_t lds = 512;
  memcpy(want + 16, bc, 12);
  memcpy(want + 28, gs, 6);
  memcpy(want + 80, &dims, 2);
  memcpy(want + 136, &lds, 4);
  assert_memory_equal(buf, want, 272); /* everything else zero: remainders, the queue pointer */
  /* an argument outside the segment is refused, not written */
  args[11].offset = 268;
  assert_int_equal(kn_hip_pack_kernargs(&k, grid, block, 0, in, 2, buf, &size, &e), KN_E_INVALID);
  assert_non_null(strstr(e.message, "outside"));
}

/* ---- the API on the device ---- */

#define DESC(t, d, c, l) {.dtype = t, .head_dim = d, .causal = c, .has_lse = l}

static void test_forward(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  kiln_context *ctx = hip_ctx(dir, "hip");
  assert_string_equal(kiln_context_target(ctx), chip);
  assert_int_equal(kiln_context_device_ordinal(ctx), 0);
  kn_hip_stream stream;
  kn_diag e;
  if (kn_hip_stream_create(dev, &stream, &e)) fail_msg("%s", e.message);
  const struct { kiln_attn_desc d; shape s; } cases[] = {
      {DESC(KILN_F16, 64, 1, 1), {1, 2, 2, 129, 77, 0}},
      {DESC(KILN_F16, 64, 1, 1), {2, 4, 2, 100, 171, 1}},   /* GQA, (B, N, H, D) strides */
      {DESC(KILN_BF16, 128, 0, 0), {1, 2, 1, 17, 300, 0}},  /* no lse */
      {DESC(KILN_BF16, 128, 1, 1), {1, 3, 3, 200, 33, 0}},  /* rows that see no key */
      {DESC(KILN_F16, 72, 0, 1), {2, 2, 1, 1, 1, 1}},       /* the padded head tile */
  };
  int failures = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_kernel *k = prepare(ctx, &cases[i].d);
    kiln_kernel_info info;
    assert_int_equal(kiln_kernel_get_info(k, &info), KILN_OK);
    assert_string_equal(info.target, chip);
    char why[160];
    int bad = check_forward(k, cases[i].s, NULL, NULL, seed + i, i % 2 ? stream : NULL, why,
                            sizeof why);
    const shape *s = &cases[i].s;
    printf("  %s %s %s D%d causal=%d lse=%d B%d H%d HK%d N(%d,%d)%s: %s\n", bad ? "FAIL" : "PASS",
           chip, cases[i].d.dtype == KILN_F16 ? "f16" : "bf16", cases[i].d.head_dim,
           cases[i].d.causal, cases[i].d.has_lse, s->batch, s->heads, s->kv_heads, s->seqlen_q,
           s->seqlen_k, s->bshd ? " BNHD" : "", why);
    failures += bad != 0;
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  /* the first two cases share a kernel; the last (one query row) also builds decode's two */
  assert_int_equal(st.compiles, 6);
  assert_int_equal(st.cache_hits, 0);
  assert_int_equal(st.launches, 5);

  /* a second context, named by the chip, loads from the cache: no compile */
  kiln_context *ctx2 = hip_ctx(dir, chip);
  kiln_kernel *k = prepare(ctx2, &cases[1].d);
  char why[160];
  failures += check_forward(k, cases[1].s, NULL, NULL, seed + 99, NULL, why, sizeof why) != 0;
  kiln_context_stats(ctx2, &st);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.cache_hits, 1);
  /* "auto" picks the AMD GPU; the other chip is not present */
  kiln_context *c3 = hip_ctx(NULL, "auto");
  assert_string_equal(kiln_context_target(c3), chip);
  kiln_context_destroy(c3);
  kiln_context_options o = {.no_cache = 1, .device = strcmp(chip, "gfx90a") ? "gfx90a" : "gfx942"};
  assert_int_equal(kiln_context_create(&o, &c3), KILN_ERR_NO_DEVICE);
  print_message("the other chip: %s\n", kiln_last_error());
  assert_non_null(strstr(kiln_last_error(), chip));
  /* misaligned rows are refused before any launch, as on CUDA */
  kiln_attn_args m = {.q = (void *)18, .k = (void *)16, .v = (void *)16, .o = (void *)16,
                      .batch = 1, .heads = 2, .kv_heads = 2, .seqlen_q = 4, .seqlen_k = 4};
  kiln_kernel *kb = prepare(ctx2, &cases[3].d);
  m.lse = (float *)16;
  assert_int_equal(kiln_forward(kb, &m, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "q must be"));
  kiln_context_destroy(ctx2);
  kiln_context_destroy(ctx);
  kn_hip_stream_destroy(dev, stream);
  rm_dir(dir);
  assert_int_equal(failures, 0);
}

/* off32 (templates/attention.h, docs/amdgpu.md): the kernel kiln_prepare gives an AMD GPU reads
 * its K and V blocks with buffer loads (its config key names off32=1; test_forward ran such
 * kernels against float64); a launch whose (batch, kv head) slab of k or v spans 2^31 bytes or
 * more must take the kernel without it (32-bit offsets would wrap).  Checked on the launch's
 * arguments and the kernel it picks, not run: nothing here has buffers of 2^31 bytes. */
static void test_off32(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  kiln_context *ctx = hip_ctx(NULL, "hip");
  kiln_attn_desc pd = DESC(KILN_F16, 128, 1, 1);
  kiln_kernel *k = prepare(ctx, &pd);
  assert_true(k->cfg.off32);
  char what[2 * KN_ATTN_KEY_MAX + 32];
  api_describe(k->kname, &k->desc, &k->cfg, what, sizeof what);
  assert_non_null(strstr(what, ";off32=1]"));
  const api_launch_view v = {&k->desc, &k->sig, &k->cfg, k->user_param, KN_DEVICE_HIP, chip, false};
  char *p = (char *)(uintptr_t)4096;  /* aligned; never read */
  /* f16, D 128: a contiguous row is 256 bytes, so 2^23 rows are exactly 2^31 bytes */
  const struct { int seqlen_k; int64_t k_row, v_row; bool fits; } cases[] = {
      {(1 << 23) - 1, 0, 0, true},          /* 2^31 - 256 bytes: the last slab that fits */
      {1 << 23, 0, 0, false},               /* 2^31 bytes */
      {129, INT64_C(1) << 23, 0, false},    /* k's rows 2^24 bytes apart: 2^31 + 256 */
      {129, 0, (INT64_C(1) << 23) - 128, true},   /* v's: 128 rows of 2^24 - 256, plus one row */
      {129, 0, INT64_C(1) << 23, false},    /* v's alone past */
      {1, INT64_C(1) << 40, INT64_C(1) << 40, true},  /* one row: the stride never multiplies */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_attn_args a = {.q = p, .k = p, .v = p, .o = p, .lse = (float *)p, .batch = 2,
                        .heads = 2, .kv_heads = 2, .seqlen_q = 64, .seqlen_k = cases[i].seqlen_k};
    if (cases[i].k_row) {
      a.k_stride[2] = cases[i].k_row;
      a.k_stride[1] = a.k_stride[2] * cases[i].seqlen_k;
      a.k_stride[0] = a.k_stride[1] * 2;
    }
    if (cases[i].v_row) {
      a.v_stride[2] = cases[i].v_row;
      a.v_stride[1] = a.v_stride[2] * cases[i].seqlen_k;
      a.v_stride[0] = a.v_stride[1] * 2;
    }
    api_call c;
    if (api_forward_args(&v, &a, "test", &c)) fail_msg("case %zu: %s", i, kiln_last_error());
    kiln_kernel *run = NULL;
    if (api_forward_kernel(k, &c, &run)) fail_msg("case %zu: %s", i, kiln_last_error());
    api_describe(run->kname, &run->desc, &run->cfg, what, sizeof what);
    printf("  seqlen_k %d, row strides %lld / %lld: %s\n", cases[i].seqlen_k,
           (long long)cases[i].k_row, (long long)cases[i].v_row, what);
    assert_int_equal(c.off32, cases[i].fits);
    assert_int_equal(run->cfg.off32, cases[i].fits);
    assert_true((run == k) == cases[i].fits);
    assert_int_equal(strstr(what, "off32") != NULL, cases[i].fits);
  }
  /* the kernel without off32 is built once and shared: one compile for the prepare, one for it */
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 2);
  kiln_context_destroy(ctx);
}

/* the packing broken on purpose (kn_hip_test_swap: two explicit arguments exchanged, as a wrong
 * offset would) must give a failed check: an out-of-bounds access the emulator reports, or wrong
 * numbers */
static void test_broken_packing(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  kiln_context *ctx = hip_ctx(NULL, "hip");
  kiln_attn_desc d = DESC(KILN_F16, 64, 1, 1);
  kiln_kernel *k = prepare(ctx, &d);
  /* (lse's strides with B = H = 2: every row still inside the buffer, at another (b, h): wrong
   * numbers, not an out-of-bounds access) */
  const struct { int swap; const char *what; int batch; } breaks[] = {
      {11, "q's head and row strides", 1}, {6, "seqlen_q and seqlen_k", 1},
      {22, "lse's batch and head strides", 2}};
  for (int i = 0; i < 3; i++) {
    char why[200];
    kn_hip_test_swap = breaks[i].swap;
    int bad = check_forward(k, (shape){breaks[i].batch, 2, 2, 40, 70, 0}, NULL, NULL,
                            seed + 50 + (uint64_t)i, NULL, why, sizeof why);
    kn_hip_test_swap = 0;
    printf("  %s swapped: %s (%s)\n", breaks[i].what, bad ? "caught" : "NOT CAUGHT", why);
    assert_int_not_equal(bad, 0);
  }
  char why[200];
  assert_int_equal(check_forward(k, (shape){1, 2, 2, 40, 70, 0}, NULL, NULL, seed, NULL, why,
                                 sizeof why), 0);
  kiln_context_destroy(ctx);
}

/* a variant's parameters after the template's: a window (two i32) and a softcap (an f32), then
 * ALiBi slopes (a pointer and an i64 stride) */
static void test_variants(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  kiln_context *ctx = hip_ctx(NULL, "hip");
  kiln_attn_desc d1 = {.dtype = KILN_F16, .head_dim = 64, .causal = 1, .has_lse = 1,
                       .window = 1, .softcap = 1};
  kiln_kernel *k = prepare(ctx, &d1);
  kiln_attn_args a = {.window_left = 32, .window_right = 0, .softcap = 20};
  kn_attn_vargs va = {.window_left = 32, .window_right = 0, .softcap = 20};
  char why[160];
  int bad = check_forward(k, (shape){2, 4, 2, 150, 133, 0}, &va, &a, seed + 7, NULL, why, sizeof why);
  printf("  %s window+softcap: %s\n", bad ? "FAIL" : "PASS", why);
  int failures = bad != 0;
  kiln_attn_desc d2 = {.dtype = KILN_BF16, .head_dim = 128, .has_lse = 1, .alibi = 1};
  k = prepare(ctx, &d2);
  float slopes[2 * 3];
  for (int i = 0; i < 6; i++) slopes[i] = 0.05f * (float)(i + 1);
  void *ds = upload(slopes, sizeof slopes);
  kiln_attn_args b = {.alibi_slopes = ds, .alibi_stride = 3};
  kn_attn_vargs vb = {.window_left = -1, .window_right = -1, .alibi_slopes = slopes, .alibi_sb = 3};
  bad = check_forward(k, (shape){2, 3, 1, 70, 90, 1}, &vb, &b, seed + 8, NULL, why, sizeof why);
  printf("  %s alibi: %s\n", bad ? "FAIL" : "PASS", why);
  failures += bad != 0;
  kn_hip_free(dev, ds, NULL);
  kiln_context_destroy(ctx);
  assert_int_equal(failures, 0);
}

/* ---- decode: forwards of up to 16 query rows (docs/serving.md) ---- */

/* the split and combine kernels through the HIP path, each launch run by its emulated twin:
 * GQA with packed rows, (B, N, H, D) strides, forced pieces, and ALiBi (each packed row's own
 * head's slope) */
static void test_decode_hip(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  kiln_context *ctx = hip_ctx(NULL, "hip");
  int runs0 = twin_runs;
  kiln_kernel *k = prepare(ctx, &(kiln_attn_desc)DESC(KILN_F16, 64, 1, 1));
  char why[160];
  int failures = 0;
  setenv("KILN_DECODE_SPLITS", "3", 1);
  int bad = check_forward(k, (shape){2, 8, 2, 4, 300, 1}, NULL, NULL, seed + 21, NULL, why,
                          sizeof why);
  unsetenv("KILN_DECODE_SPLITS");
  printf("  %s decode GQA 8/2 Nq 4 Nk 300 BNHD, 3 pieces: %s\n", bad ? "FAIL" : "PASS", why);
  failures += bad != 0;
  bad = check_forward(k, (shape){1, 4, 1, 1, 65, 0}, NULL, NULL, seed + 22, NULL, why, sizeof why);
  printf("  %s decode MQA Nq 1 Nk 65: %s\n", bad ? "FAIL" : "PASS", why);
  failures += bad != 0;
  kiln_attn_desc da = {.dtype = KILN_BF16, .head_dim = 64, .has_lse = 1, .alibi = 1};
  k = prepare(ctx, &da);
  float slopes[2 * 4];
  for (int i = 0; i < 8; i++) slopes[i] = 0.07f * (float)(i + 1);
  void *ds = upload(slopes, sizeof slopes);
  kiln_attn_args b = {.alibi_slopes = ds, .alibi_stride = 4};
  kn_attn_vargs vb = {.window_left = -1, .window_right = -1, .alibi_slopes = slopes,
                      .alibi_sb = 4};
  bad = check_forward(k, (shape){2, 4, 2, 2, 90, 0}, &vb, &b, seed + 23, NULL, why, sizeof why);
  printf("  %s decode alibi GQA 4/2 Nq 2: %s\n", bad ? "FAIL" : "PASS", why);
  failures += bad != 0;
  kn_hip_free(dev, ds, NULL);
  assert_int_equal(twin_runs - runs0, 6);  /* a split and a combine launch per forward */
  kiln_context_destroy(ctx);
  assert_int_equal(failures, 0);
}

/* A paged KV kernel through HIP (its six parameters after the template's packed from the code
 * object's metadata): one kv head's dense (B, 1, Nk, D) keys read as pages of 13 rows in order
 * through a block table on the device, every sequence Nk long, so the dense reference is its
 * answer; causal, MQA; 40 query rows (the paged prefill kernel) and 4 (the split-KV decode
 * kernels reading the same pages) */
static void test_paged_hip(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  kiln_context *ctx = hip_ctx(NULL, "hip");
  kiln_attn_desc d = {.dtype = KILN_F16, .head_dim = 64, .causal = 1, .has_lse = 1,
                      .layout = KILN_LAYOUT_PAGED};
  kiln_kernel *k = prepare(ctx, &d);
  enum { B = 2, NK = 91, PS = 13, NPB = NK / PS, MP = NPB };  /* seqlen_k = MP * PS */
  int32_t table[B * MP], lens[B] = {NK, NK};
  for (int b = 0; b < B; b++)
    for (int i = 0; i < MP; i++) table[b * MP + i] = b * NPB + i;
  void *dt = upload(table, sizeof table), *dlens = upload(lens, sizeof lens);
  kiln_attn_args a = {.block_table = dt, .cache_seqlens = dlens, .page_size = PS,
                      .num_pages = B * NPB, .max_pages = MP,
                      .k_stride = {PS * 64, (int64_t)NK * 64, 64},
                      .v_stride = {PS * 64, (int64_t)NK * 64, 64}};
  char why[160];
  int bad = 0;
  for (int nq = 40; nq > 0; nq -= 36) {  /* 40 rows: the paged prefill kernel; 4: decode's */
    int b1 = check_forward(k, (shape){B, 4, 1, nq, NK, 0}, NULL, &a, seed + 9 + nq, NULL, why,
                           sizeof why);
    printf("  %s paged (page %d, %d query rows): %s\n", b1 ? "FAIL" : "PASS", PS, nq, why);
    bad += b1;
  }
  kn_hip_free(dev, dt, NULL);
  kn_hip_free(dev, dlens, NULL);
  kiln_context_destroy(ctx);
  assert_int_equal(bad, 0);
}

/* fp8 inputs (docs/serving.md) through HIP: the descale pointers and the fp8 q / k / v packed
 * from the code object's metadata like every argument, run by the emulated twin; the last two
 * cases are decode-shaped, so the split-KV decode kernels serve them */
static void test_fp8_hip(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  kiln_context *ctx = hip_ctx(NULL, "hip");
  const struct { kiln_attn_desc d; shape s; } cases[] = {
      {{.dtype = KILN_F16, .head_dim = 64, .causal = 1, .has_lse = 1,
        .q_dtype = KILN_F8E4M3FNUZ, .kv_dtype = KILN_F8E4M3FNUZ}, {2, 4, 2, 70, 33, 0}},
      {{.dtype = KILN_BF16, .head_dim = 32, .has_lse = 1, .kv_dtype = KILN_F8E5M2FNUZ},
       {1, 2, 1, 17, 100, 1}},  /* f16 q, (B, N, H, D) strides */
      /* decode-shaped (4 and 1 query rows): the split-KV decode kernels over fp8 KV */
      {{.dtype = KILN_F16, .head_dim = 64, .causal = 1, .has_lse = 1,
        .kv_dtype = KILN_F8E4M3FNUZ}, {2, 8, 2, 4, 300, 0}},
      {{.dtype = KILN_BF16, .head_dim = 64, .has_lse = 1, .q_dtype = KILN_F8E4M3FNUZ,
        .kv_dtype = KILN_F8E4M3FNUZ}, {3, 4, 1, 1, 129, 1}},
  };
  int failures = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_kernel *k = prepare(ctx, &cases[i].d);
    char why[160];
    int bad = check_forward(k, cases[i].s, NULL, NULL, seed + 40 + i, NULL, why, sizeof why);
    printf("  %s fp8 %s case %zu: %s\n", bad ? "FAIL" : "PASS", chip, i, why);
    failures += bad != 0;
  }
  kiln_context_destroy(ctx);
  assert_int_equal(failures, 0);
}

/* ---- tuning on the device: candidates timed with the runtime's events ---- */

static void test_tune(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  char *dir = fresh_dir();
  setenv("KILN_TUNE_PROGRESS", "0", 1);
  kiln_context *ctx = hip_ctx(dir, "hip");
  unsetenv("KILN_TUNE_PROGRESS");
  kiln_attn_desc d = DESC(KILN_BF16, 64, 1, 1);
  /* (the tuner builds its tiling from block_m, block_n, warps and stages: one value of the
   * other axes, so each candidate is a different kernel) */
  kn_space sp;
  kn_diag e;
  if (kn_space_default(&sp, "fwd", kn_arch_get(chip), &e)) fail_msg("%s", e.message);
  char spec[256];
  snprintf(spec, sizeof spec, "block_m=64,128;block_n=32,64;warps=4;stages=2;waves_per_eu=0;"
           "matrix_instr=%s", sp.matrix_names[0]);
  twin_note_space(&d, spec);
  kiln_prepare_options po = {.seqlen = 128, .tune_space = spec, .tune_heads = 2, .tune_repeats = 3,
                             .tune_warmup = 1};
  kiln_tune_result res;
  if (kiln_tune(ctx, &d, &po, &res)) fail_msg("tune: %s", kiln_last_error());
  int timed = 0;
  for (int i = 0; i < res.ncandidates; i++) {
    const kiln_tune_candidate *c = &res.candidates[i];
    printf("  candidate %dx%d w%d s%d: state %d, median %.1f us %s\n", c->block_m, c->block_n,
           c->warps, c->stages, (int)c->state, c->median_us, c->note);
    timed += c->state == KILN_CANDIDATE_TIMED;
  }
  assert_true(res.ncandidates >= 2);
  assert_int_equal(timed, res.ncandidates); /* every candidate checked against the reference */
  assert_true(res.best >= 0 && res.recorded);
  assert_true(res.candidates[res.best].median_us > 0);
  const kiln_tune_candidate *b = &res.candidates[res.best];
  /* the record is used by the next prepare, whose code comes from the cache */
  kiln_kernel *k = prepare_tuned(ctx, &d, 128, b);
  char why[160];
  int bad = check_forward(k, (shape){1, 2, 1, 100, 77, 0}, NULL, NULL, seed + 11, NULL, why,
                          sizeof why);
  printf("  %s the tuned kernel: %s\n", bad ? "FAIL" : "PASS", why);
  assert_int_equal(bad, 0);
  kiln_tune_result_free(&res);
  /* a variant with tensors (ALiBi slopes, a bias, document ids): the tuner's device copies are
   * what the candidates read (host pointers would be outside device memory: the emulator's
   * error), checked against the reference */
  kiln_attn_desc dv = {.dtype = KILN_F16, .head_dim = 64, .has_lse = 1, .alibi = 1, .bias = 1,
                       .document = 1};
  snprintf(spec, sizeof spec, "block_m=64;block_n=32,64;warps=4;stages=2;waves_per_eu=0;"
           "matrix_instr=%s", sp.matrix_names[0]);
  twin_note_space(&dv, spec);
  po.tune_space = spec;
  if (kiln_tune(ctx, &dv, &po, &res)) fail_msg("tune: %s", kiln_last_error());
  for (int i = 0; i < res.ncandidates; i++) {
    const kiln_tune_candidate *c = &res.candidates[i];
    printf("  variant candidate %dx%d: state %d, median %.1f us %s\n", c->block_m, c->block_n,
           (int)c->state, c->median_us, c->note);
    assert_int_equal(c->state, KILN_CANDIDATE_TIMED);
  }
  assert_int_equal(res.ncandidates, 2);
  kiln_tune_result_free(&res);
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* ---- faults (the stand-in's KILN_FAKE_HIP_FAULT) ---- */

static void test_faults(void **state) {
  (void)state;
  if (!have_gpu() || !fake) {
    skip();
    return;
  }
  kiln_attn_desc d = DESC(KILN_F16, 64, 0, 1);
  kiln_kernel *k;
  /* a module load failure: prepare fails with the runtime's error, nothing cached */
  char *dir = fresh_dir();
  kiln_context *ctx = hip_ctx(dir, "hip");
  setenv("KILN_FAKE_HIP_FAULT", "load", 1);
  assert_int_equal(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_COMPILE);
  print_message("load fault: %s\n", kiln_last_error());
  assert_non_null(strstr(kiln_last_error(), "hipModuleLoadData: hipErrorSharedObjectInitFailed"));
  /* a code object for another chip than the silicon: the runtime's refusal, named */
  setenv("KILN_FAKE_HIP_FAULT", "chip", 1);
  assert_int_equal(kiln_prepare(ctx, &d, NULL, &k), KILN_ERR_COMPILE);
  print_message("chip fault: %s\n", kiln_last_error());
  assert_non_null(strstr(kiln_last_error(), "hipErrorNoBinaryForGpu"));
  assert_non_null(strstr(fake_error(), chip));
  unsetenv("KILN_FAKE_HIP_FAULT");
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.not_stored, 0);
  k = prepare(ctx, &d);
  /* a launch failure: forward fails with the runtime's error; the next launch works */
  char why[160];
  setenv("KILN_FAKE_HIP_FAULT", "launch", 1);
  kiln_attn_args a = {.q = (void *)16, .k = (void *)16, .v = (void *)16, .o = (void *)16,
                      .lse = (float *)16, .batch = 1, .heads = 1, .kv_heads = 1, .seqlen_q = 4,
                      .seqlen_k = 4};
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_RUNTIME);
  print_message("launch fault: %s\n", kiln_last_error());
  assert_non_null(strstr(kiln_last_error(), "hipErrorLaunchFailure"));
  unsetenv("KILN_FAKE_HIP_FAULT");
  assert_int_equal(check_forward(k, (shape){1, 2, 2, 33, 65, 0}, NULL, NULL, seed, NULL, why,
                                 sizeof why), 0);
  /* out of memory: a clear KN_E_NOMEM */
  setenv("KILN_FAKE_HIP_FAULT", "oom", 1);
  void *p;
  kn_diag e;
  assert_int_equal(kn_hip_alloc(dev, 1 << 20, &p, &e), KN_E_NOMEM);
  print_message("oom: %s\n", e.message);
  assert_non_null(strstr(e.message, "hipErrorOutOfMemory"));
  unsetenv("KILN_FAKE_HIP_FAULT");
  /* a buffer outside device memory: the emulator names the access, the launch fails */
  assert_int_equal(kiln_forward(k, &a, NULL), KILN_ERR_RUNTIME);
  print_message("bad buffer: %s\n", kiln_last_error());
  kiln_context_destroy(ctx);
  rm_dir(dir);
}

/* 4 threads on one context, each on its own stream */
typedef struct tharg {
  kiln_context *ctx;
  int id, bad;
} tharg;

static void *thread_main(void *p) {
  tharg *t = p;
  kn_hip_stream s;
  kn_diag e;
  if (kn_hip_stream_create(dev, &s, &e)) {
    t->bad++;
    return NULL;
  }
  kiln_attn_desc d = DESC(t->id % 2 ? KILN_BF16 : KILN_F16, 64, t->id / 2, 1);
  kiln_kernel *k;
  if (kiln_prepare(t->ctx, &d, NULL, &k)) {
    t->bad++;
  } else {
    twin_note(k);
    char why[160];
    t->bad += check_forward(k, (shape){1, 2, 1, 40 + t->id, 50, t->id % 2}, NULL, NULL,
                            seed + 100 * (uint64_t)t->id, s, why, sizeof why) != 0;
  }
  kn_hip_stream_destroy(dev, s);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  if (!have_gpu()) {
    skip();
    return;
  }
  kiln_context *ctx = hip_ctx(NULL, "hip");
  pthread_t th[4];
  tharg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (tharg){.ctx = ctx, .id = i};
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &a[i]), 0);
  }
  int bad = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    bad += a[i].bad;
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  printf("  4 threads: %d wrong, %llu compiles, %llu launches, %d emulated runs in all\n", bad,
         (unsigned long long)st.compiles, (unsigned long long)st.launches, twin_runs);
  assert_int_equal(bad, 0);
  assert_int_equal(st.launches, 4);
  kiln_context_destroy(ctx);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  self_path = argv[0];
  if (argc == 3 && !strcmp(argv[1], "--child") && !strcmp(argv[2], "nodev")) return child_nodev();
  const char *env = getenv("KILN_TEST_SEED");
  seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
  printf("seed %llu (KILN_TEST_SEED replays)\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_no_device), cmocka_unit_test(test_hidden_args),
      cmocka_unit_test(test_runtime),
      cmocka_unit_test(test_forward),   cmocka_unit_test(test_off32),
      cmocka_unit_test(test_broken_packing),
      cmocka_unit_test(test_variants),  cmocka_unit_test(test_decode_hip),
      cmocka_unit_test(test_paged_hip),  cmocka_unit_test(test_fp8_hip),
      cmocka_unit_test(test_tune),
      cmocka_unit_test(test_faults),    cmocka_unit_test(test_threads),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  if (dev) kn_hip_device_close(dev);
  return rc;
}
