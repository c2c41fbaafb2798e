/* test_aot.c — AOT bundles: the offload bundle and index readers (runtime/bundle.c), and kernels
 * loaded through the public API from the bundle `kiln aot` built (api/bundle.c), on the HIP
 * stand-in and the fake CUDA driver, against the float64 reference.
 *
 * Ways it runs (tests/CMakeLists.txt):
 *   - test_aot: the readers alone (no device): a bundle written and read back, cut at every
 *     length and with every header byte damaged (each a KN_E_CORRUPT with its reason, never a
 *     read outside the bytes), and malformed index lines (file:line:col).
 *   - test_aot_hip_fake (gfx942), test_aot_hip_fake_gfx90a, test_aot_cuda_fake: KILN_AOT_DIR is
 *     the bundle of tests/aot/attention16.manifest (16 kernels x gfx90a, gfx942, sm_80, sm_90a,
 *     built by the aot_bundle fixture).  A context with bundle = that directory and bundle_only
 *     prepares all 16 without compiling (source KILN_SOURCE_BUNDLE, 0 compiles), and each runs on
 *     ragged GQA inputs against kn_attn_reference_v: on HIP through the stand-in, whose runner
 *     executes the emulated twin of the kernel the launched symbol names (so the code object's
 *     metadata, the kernarg packing and the grid are what is checked); on CUDA through the fake
 *     driver's float64 attention, which reads the launch's parameters.  Then: a descriptor the
 *     bundle lacks (an error with bundle_only, compiled without), and a copy of the bundle with a
 *     flipped byte, a truncated file and a malformed index: each a clear error.
 *   - The generated C launcher (kiln aot --emit-c, docs/aot.md): when KILN_AOT_DIR holds
 *     kiln_aot.c, it is compiled by the system's C compiler with no include path and linked into
 *     a shared object (no kiln, no LLVM), loaded here, and its launch functions run on the same
 *     device against the same reference.
 *   - test_aot_rt_cuda_fake (and on the H200, bench/h200/device_run.sh step aot): this file built
 *     with KILN_TEST_RT against libkiln_rt's objects, the API without the compiler, so LLVM is
 *     not linked: the bundle is what a serving process with libkiln_rt loads.  CUDA only (the
 *     HIP stand-in runs the kernels' emulated twins, which need the compiler); a kernel the
 *     bundle lacks is refused there instead of compiled.
 * KILN_TEST_SEED replays the inputs.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NOLOAD */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "attention.h"
#include "bundle.h"
#ifndef KILN_TEST_RT
#include "emu.h"
#endif
#include "fake_hip.h"
#include "kiln.h"
#include "numeric.h"
#ifndef KILN_TEST_RT
#include "target.h"
#endif
#include "test_api_util.h"
#ifndef KILN_TEST_RT
#include "twin_args.h"
#endif

static uint64_t seed = 1;
static const char *aot_dir;

/* ---- the readers, without a device ---- */

static void test_bundle_round_trip(void **state) {
  (void)state;
  static const char a[] = "code object for gfx90a", b[] = "gfx942's";
  kn_bundle_part parts[2] = {{"hipv4-amdgcn-amd-amdhsa--gfx90a", a, sizeof a},
                             {"hipv4-amdgcn-amd-amdhsa--gfx942", b, sizeof b}};
  void *buf;
  size_t n;
  kn_diag e;
  assert_int_equal(kn_bundle_write(parts, 2, &buf, &n, &e), KN_OK);
  assert_true(kn_bundle_is(buf, n));
  const void *code;
  size_t size;
  assert_int_equal(kn_bundle_find(buf, n, "gfx942", &code, &size, &e), KN_OK);
  assert_int_equal(size, sizeof b);
  assert_memory_equal(code, b, sizeof b);
  assert_int_equal((size_t)((const char *)code - (const char *)buf) % KN_BUNDLE_ALIGN, 0);
  assert_int_equal(kn_bundle_find(buf, n, "gfx90a", &code, &size, &e), KN_OK);
  assert_memory_equal(code, a, sizeof a);
  /* a chip it lacks: the entries named (the host entry too) */
  assert_int_equal(kn_bundle_find(buf, n, "gfx950", &code, &size, &e), KN_E_UNSUPPORTED);
  assert_non_null(strstr(e.message, "hipv4-amdgcn-amd-amdhsa--gfx942"));
  assert_non_null(strstr(e.message, "host-x86_64-unknown-linux-gnu-"));
  /* cut at every length: an error with the reason, never a read past the bytes (each cut is a
   * fresh allocation of exactly that size, so ASan would see one) */
  for (size_t cut = 0; cut < n; cut += cut < 256 ? 1 : 509) {
    void *c = malloc(cut ? cut : 1);
    memcpy(c, buf, cut);
    kn_status s = kn_bundle_find(c, cut, "gfx942", &code, &size, &e);
    if (s == KN_OK) assert_true((const char *)code + size <= (const char *)c + cut);
    else assert_true(e.message[0]);
    /* the last entry's bytes cut off is always an error */
    if (cut < n - KN_BUNDLE_ALIGN + sizeof b) assert_int_not_equal(s, KN_OK);
    free(c);
  }
  /* every header byte damaged: found, or refused with a reason */
  uint8_t *p = buf;
  for (size_t i = 0; i < 200; i++) {
    uint8_t keep = p[i];
    p[i] ^= 0xa5;
    kn_status s = kn_bundle_find(buf, n, "gfx942", &code, &size, &e);
    if (s == KN_OK) assert_true((const uint8_t *)code + size <= p + n);
    else assert_true(e.message[0]);
    p[i] = keep;
  }
  free(buf);
}

static void expect_index_error_n(const char *text, size_t n, const char *where,
                                 const char *what) {
  kn_aot_index ix;
  kn_diag e;
  assert_int_equal(kn_aot_index_parse(text, n, "t/index.kiln", "t", &ix, &e), KN_E_CORRUPT);
  if (!strstr(e.message, where) || !strstr(e.message, what))
    fail_msg("index error '%s': wanted %s ... %s", e.message, where, what);
}
static void expect_index_error(const char *text, const char *where, const char *what) {
  expect_index_error_n(text, strlen(text), where, what);
}

#define ENTRY "entry name=x symbol=attn_fwd_x arch=gfx942 desc=dtype=f16 seqlen=1-9 block_m=64 " \
              "block_n=64 warps=4 stages=2 mfma=0 wgmma=0 threads=256 shared=0 file=x.hipfb " \
              "bytes=10 xxh64=0123456789abcdef"

static void test_index_errors(void **state) {
  (void)state;
  kn_aot_index ix;
  kn_diag e;
  const char *good = "# a comment\nkiln-aot-index 1\n" ENTRY "\n";
  assert_int_equal(kn_aot_index_parse(good, strlen(good), "t/index.kiln", "t", &ix, &e), KN_OK);
  assert_int_equal(ix.n, 1);
  assert_string_equal(ix.e[0].symbol, "attn_fwd_x");
  assert_int_equal(ix.e[0].file.xxh64, 0x0123456789abcdefull);
  kn_aot_index_free(&ix);
  expect_index_error("", "t/index.kiln:1:1:", "empty index");
  expect_index_error("kiln-aot-index 2\n", "t/index.kiln:1:1:", "another version");
  expect_index_error("kiln-aot-index 1\nkernel x\n", ":2:1:", "expected an 'entry' line");
  expect_index_error("kiln-aot-index 1\n" ENTRY " colour=red\n", ":2:", "unknown field 'colour'");
  expect_index_error("kiln-aot-index 1\nentry name=x\n", ":2:1:", "the entry has no symbol");
  expect_index_error("kiln-aot-index 1\nentry name=x threads=0\n", ":2:22:", "threads must be");
  expect_index_error("kiln-aot-index 1\nentry file=../x\n", ":2:12:", "a file name");
  expect_index_error("kiln-aot-index 1\nentry seqlen=9-1\n", ":2:14:", "seqlen must be");
  expect_index_error("kiln-aot-index 1\nentry xxh64=12\n", ":2:13:", "16 lowercase hex");
  expect_index_error("kiln-aot-index 1\nentry grid=rows\n", ":2:12:", "grid rule");
  expect_index_error("kiln-aot-index 1\nentry name\n", ":2:7:", "key=value");
  expect_index_error_n("kiln-aot-index 1\n\0", 18, ":1:1:", "NUL");
}

/* the unique symbols: kn_func_rename on the template's kernel */
static void test_rename(void **state) {
  (void)state;
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 64, .window = true}; /* + a library function */
  kn_attn_config c = kn_attn_default_config(NULL, &d);
  kn_diag e;
  kn_module *m = api_build_module("attn_fwd", &d, &c, &e);
  assert_non_null(m);
  kn_func *f = kn_module_find(m, "attn_fwd");
  assert_non_null(f);
  assert_int_equal(kn_func_rename(f, "attn_fwd_x"), 0);
  assert_ptr_equal(kn_module_find(m, "attn_fwd_x"), f);
  assert_null(kn_module_find(m, "attn_fwd"));
  /* a name another function has is refused */
  assert_true(m->nfuncs > 1);
  kn_func *g = m->funcs[0] == f ? m->funcs[1] : m->funcs[0];
  assert_int_equal(kn_func_rename(f, g->name), -1);
  assert_string_equal(f->name, "attn_fwd_x");
  kn_module_free(m);
}

/* ---- the device: the HIP stand-in or the fake CUDA driver ---- */

static kn_device_kind kind;
static kn_hip_device *hdev;
static kn_cuda_device *cdev;
static char chip[16];
static void (*fake_cuda_attn)(int, int, int, int);
static void (*fake_cuda_variant)(int, int);

#ifdef KILN_TEST_RT
/* test_aot_rt: this file against libkiln_rt's objects (no compiler, no LLVM: the link fails if
 * anything here needs them).  No emulated twins, so no HIP stand-in runs: CUDA only. */
static void twin_note(const char *symbol, const kiln_kernel *k) {
  (void)symbol, (void)k;
}
#else
/* the stand-in's runner: the emulated twin of the kernel the launched symbol names */
typedef struct twin {
  char symbol[128];
  kn_attn_desc desc;
  kn_attn_config cfg;
  kn_attn_sig sig;
  kn_kernel *emu;
} twin;
static twin twins[64];
static int ntwins;
static pthread_mutex_t twin_mu = PTHREAD_MUTEX_INITIALIZER;

static void twin_note(const char *symbol, const kiln_kernel *k) {
  pthread_mutex_lock(&twin_mu);
  int i = 0;
  while (i < ntwins && strcmp(twins[i].symbol, symbol)) i++;
  if (i == ntwins && ntwins < 64) {
    twin *t = &twins[ntwins++];
    snprintf(t->symbol, sizeof t->symbol, "%s", symbol);
    t->desc = k->desc, t->cfg = k->cfg, t->sig = k->sig;
  }
  pthread_mutex_unlock(&twin_mu);
}

static int run_twin(void *user, const kn_fake_hip_launch *l, char *why, size_t n) {
  (void)user;
  pthread_mutex_lock(&twin_mu);
  int rc = -1, i = 0;
  while (i < ntwins && strcmp(twins[i].symbol, l->meta->name)) i++;
  twin *t = i < ntwins ? &twins[i] : NULL;
  kn_diag d;
  if (!t) {
    snprintf(why, n, "the launched kernel %s is none the test prepared", l->meta->name);
    goto out;
  }
  if (!t->emu) {
    char emu[32];
    snprintf(emu, sizeof emu, "%s-emu", chip);
    kn_module *m = api_build_module("attn_fwd", &t->desc, &t->cfg, &d);
    int bad = !m || kn_compile(m, "attn_fwd", kn_emu_target(emu), NULL, &t->emu, &d);
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
  kn_argval args[KN_ATTN_MAX_PARAMS];
  twin_decode(&t->sig, l->values, args);
  int grid[3] = {(int)l->grid[0], (int)l->grid[1], (int)l->grid[2]};
  if (kn_emu_run(t->emu, args, grid, l->regions, l->nregions, NULL, &d)) {
    snprintf(why, n, "%s", d.message);
    goto out;
  }
  rc = 0;
out:
  pthread_mutex_unlock(&twin_mu);
  return rc;
}
#endif

static bool open_device(void) {
  static int state;
  if (state) return state > 0;
  state = -1;
  if (!aot_dir) {
    printf("  (KILN_AOT_DIR not set: no bundle to load)\n");
    return false;
  }
  kn_device_list l;
  kn_discover(&l);
  const kn_device_info *di = NULL;
  for (int i = 0; i < l.n && !di; i++)
    if ((l.dev[i].kind == KN_DEVICE_HIP || l.dev[i].kind == KN_DEVICE_CUDA) && l.dev[i].target[0])
      di = &l.dev[i];
  if (!di) {
    printf("  (no GPU: %s; %s)\n", l.hip.why.message, l.cuda.why.message);
    return false;
  }
  kn_diag e;
  kind = di->kind;
  snprintf(chip, sizeof chip, "%s", di->target);
#ifdef KILN_TEST_RT
  if (kind == KN_DEVICE_HIP) {
    printf("  (libkiln_rt build: the HIP stand-in needs the emulated twins, a compiler's)\n");
    return false;
  }
#endif
  if (kind == KN_DEVICE_HIP) {
    if (kn_hip_device_open(di->ordinal, di->arch, &hdev, &e)) fail_msg("%s", e.message);
    const char *lib = getenv("KILN_HIP_LIBRARY");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    kn_fake_hip_set_runner_fn set =
        h ? (kn_fake_hip_set_runner_fn)dlsym(h, "kn_fake_hip_set_runner") : NULL;
#ifndef KILN_TEST_RT
    if (set) set(run_twin, NULL);
#else
    (void)set;
#endif
  } else {
    if (kn_cuda_device_open(di->ordinal, &cdev, &e)) fail_msg("%s", e.message);
    const char *lib = getenv("KILN_CUDA_LIBRARY");
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (h) {
      *(void **)&fake_cuda_attn = dlsym(h, "kn_fake_cuda_attn");
      *(void **)&fake_cuda_variant = dlsym(h, "kn_fake_cuda_attn_variant");
    }
  }
  printf("  %s device %d: %s (%s)\n", kind == KN_DEVICE_HIP ? "HIP" : "CUDA", di->ordinal,
         di->name, chip);
  state = 1;
  return true;
}

static void *dalloc(size_t n) {
  kn_diag e;
  if (kind == KN_DEVICE_HIP) {
    void *p;
    if (kn_hip_alloc(hdev, n, &p, &e)) fail_msg("%s", e.message);
    return p;
  }
  kn_cuda_ptr p;
  if (kn_cuda_alloc(cdev, n, &p, &e)) fail_msg("%s", e.message);
  return (void *)(uintptr_t)p;
}
static void dfree(void *p) {
  if (!p) return;
  if (kind == KN_DEVICE_HIP) kn_hip_free(hdev, p, NULL);
  else kn_cuda_free(cdev, (kn_cuda_ptr)(uintptr_t)p, NULL);
}
static void *upload(const void *h, size_t n) {
  void *p = dalloc(n);
  kn_diag e;
  kn_status s = kind == KN_DEVICE_HIP ? kn_hip_copy_htod(hdev, p, h, n, &e)
                                      : kn_cuda_copy_htod(cdev, (kn_cuda_ptr)(uintptr_t)p, h, n, &e);
  if (s) fail_msg("%s", e.message);
  return p;
}
static void download(void *h, const void *p, size_t n) {
  kn_diag e;
  kn_status s = kind == KN_DEVICE_HIP ? kn_hip_device_sync(hdev, &e) : kn_cuda_device_sync(cdev, &e);
  if (!s) s = kind == KN_DEVICE_HIP ? kn_hip_copy_dtoh(hdev, h, p, n, &e)
                                    : kn_cuda_copy_dtoh(cdev, h, (kn_cuda_ptr)(uintptr_t)p, n, &e);
  if (s) fail_msg("%s", e.message);
}

/* the 16 kernels of tests/aot/attention16.manifest */
typedef struct kcase {
  char name[48];
  kn_attn_desc d;
} kcase;

static kcase case_at(int i) {
  kcase c;
  memset(&c, 0, sizeof c);
  c.d.dtype = i & 8 ? KN_BF16 : KN_F16;
  c.d.head_dim = i & 4 ? 128 : 64;
  c.d.causal = (i >> 1) & 1;
  c.d.window = i & 1;
  c.d.has_lse = !c.d.window;
  snprintf(c.name, sizeof c.name, "%s_d%d%s_%s", kn_scalar_name(c.d.dtype), c.d.head_dim,
           c.d.causal ? "_causal" : "", c.d.window ? "window" : "lse");
  return c;
}

/* the launch under test: the API's kernel, or the generated launcher's function */
typedef int (*launch_fn)(void *user, const kiln_attn_args *a);

/* inputs for (d) at the shape, one launch, compared with the float64 reference; the message
 * in why */
static int check_launch(const kn_attn_desc *d, launch_fn launch, void *user, char *why, size_t nwhy) {
  int B = 1, H = 2, HK = 1, NQ = 70, NK = 90;
  /* varlen: three packed sequences of ragged lengths (the longest NQ x NK), fresh each call */
  const bool varlen = d->layout == KN_ATTN_VARLEN;
  int32_t cuq[4] = {0}, cuk[4] = {0};
  if (varlen) {
    B = 3;
    int lq[3] = {NQ, 1 + (int)(seed % 37), 23}, lk[3] = {13, NK, 1 + (int)(seed / 7 % 61)};
    for (int b = 0; b < B; b++) cuq[b + 1] = cuq[b] + lq[b], cuk[b + 1] = cuk[b] + lk[b];
  }
  /* paged: B 2 sequences of ragged cached lengths in pools of 16-row pages, the table a
   * seed-drawn permutation of the pool (every sequence's pages scattered) */
  const bool paged = d->layout == KN_ATTN_PAGED;
  enum { PS = 16, MP = 8, NPG = 2 * MP };
  int32_t table[2 * MP], lens[2] = {0};
  if (paged) {
    B = 2;
    lens[0] = NK, lens[1] = 1 + (int)(seed % (MP * PS));
    for (int i = 0; i < NPG; i++) table[i] = i;
    for (int i = NPG - 1; i > 0; i--) {
      int j = (int)(normal(&seed) * 1e6) % (i + 1);
      j = j < 0 ? -j : j;
      int t0 = table[i];
      table[i] = table[j], table[j] = t0;
    }
  }
  const int TQ = varlen ? cuq[B] : B * NQ, TK = varlen ? cuk[B] : paged ? NPG * PS : B * NK;
  kn_scalar t = d->dtype;
  size_t es = kn_scalar_size(t), D = (size_t)d->head_dim;
  size_t nq = (size_t)TQ * H * D, nk = (size_t)TK * HK * D, nl = (size_t)H * TQ;
  char *h[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)}, *ho = malloc(nq * es);
  double *x[3] = {malloc(nq * 8), malloc(nk * 8), malloc(nk * 8)}, *ro = malloc(nq * 8);
  double *rl = malloc(nl * 8);
  float *hl = malloc(nl * 4);
  size_t cnt[3] = {nq, nk, nk};
  for (int a = 0; a < 3; a++)
    for (size_t i = 0; i < cnt[a]; i++) {
      x[a][i] = kn_round(t, normal(&seed));
      kn_store_elem(t, h[a] + i * es, x[a][i]);
    }
  void *dq = upload(h[0], nq * es), *dk = upload(h[1], nk * es), *dv = upload(h[2], nk * es);
  memset(ho, 0xff, nq * es);
  memset(hl, 0xff, nl * 4);
  void *dout = upload(ho, nq * es), *dl = d->has_lse ? upload(hl, nl * 4) : NULL;
  kiln_attn_args a = {.q = dq, .k = dk, .v = dv, .o = dout, .lse = dl, .batch = B, .heads = H,
                      .kv_heads = HK, .seqlen_q = NQ, .seqlen_k = NK};
  kn_attn_vargs va = {.window_left = -1, .window_right = -1};
  if (d->window) a.window_left = va.window_left = 24, a.window_right = va.window_right = 3;
  /* the other variants' values (tests/aot/variants.manifest): host copies for the reference */
  float slopes[2] = {0.5f, 0.0625f};
  int32_t qseg[70], kseg[90];
  char *hb = NULL;
  void *dsl = NULL, *dbias = NULL, *dqs = NULL, *dks = NULL;
  if (d->softcap) a.softcap = va.softcap = 20;
  if (d->alibi) /* one (heads) vector for every batch: strides 0 */
    dsl = upload(slopes, sizeof slopes), a.alibi_slopes = dsl, va.alibi_slopes = slopes;
  if (d->bias) {
    size_t nb = (size_t)B * H * NQ * NK;
    hb = malloc(nb * es);
    for (size_t i = 0; i < nb; i++) kn_store_elem(t, hb + i * es, normal(&seed));
    dbias = upload(hb, nb * es), a.bias = dbias, va.bias = hb;
    va.bias_sb = (int64_t)H * NQ * NK, va.bias_sh = (int64_t)NQ * NK, va.bias_sm = NK;
  }
  if (d->document) { /* three documents, packed in order */
    for (int i = 0; i < NQ; i++) qseg[i] = i * 3 / NQ;
    for (int j = 0; j < NK; j++) kseg[j] = j * 3 / NK;
    dqs = upload(qseg, sizeof qseg), dks = upload(kseg, sizeof kseg);
    a.q_seg = dqs, a.k_seg = dks, va.q_seg = qseg, va.k_seg = kseg;
    va.q_seg_sb = NQ, va.k_seg_sb = NK;
  }
  if (d->prefix) a.prefix_len = va.prefix_len = 20;
  void *dcq = NULL, *dck = NULL;
  if (varlen) {
    dcq = upload(cuq, sizeof cuq), dck = upload(cuk, sizeof cuk);
    a.cu_seqlens_q = dcq, a.cu_seqlens_k = dck, a.total_q = TQ, a.total_k = TK;
  }
  if (paged) {
    dcq = upload(table, sizeof table), dck = upload(lens, sizeof lens);
    a.block_table = dcq, a.cache_seqlens = dck, a.page_size = PS, a.num_pages = NPG;
    a.max_pages = MP, a.seqlen_k = MP * PS;
  }
  if (fake_cuda_attn) fake_cuda_attn((int)es, t == KN_BF16, d->head_dim, d->causal);
  if (fake_cuda_variant) fake_cuda_variant(d->window, 0);
  int rc = launch(user, &a);
  double err = 0, lerr = 0, tol = kn_attn_tolerance(t), ltol = kn_attn_lse_tolerance(t);
  if (rc) {
    snprintf(why, nwhy, "launch: %.300s", kiln_last_error());
  } else {
    download(ho, dout, nq * es);
    if (dl) download(hl, dl, nl * 4);
    kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = NQ, .seqlen_k = NK};
    if (varlen)
      p.cu_seqlens_q = cuq, p.cu_seqlens_k = cuk, p.total_q = TQ, p.total_k = TK;
    if (paged) {
      p.block_table = table, p.cache_seqlens = lens, p.page_size = PS, p.num_pages = NPG;
      p.max_pages = MP, p.seqlen_k = MP * PS;
    }
    kn_diag e;
    if (kn_attn_reference_v(d, NULL, &p, &va, x[0], x[1], x[2], ro, rl, &e))
      fail_msg("reference: %s", e.message);
    for (size_t i = 0; i < nq; i++) {
      double y = fabs(kn_load_elem(t, ho + i * es) - ro[i]);
      if (!(y <= err)) err = y;
    }
    for (size_t i = 0; dl && i < nl; i++) {
      double y = isinf(rl[i]) && hl[i] == rl[i] ? 0 : fabs(hl[i] - rl[i]);
      if (!(y <= lerr)) lerr = y;
    }
    snprintf(why, nwhy, "max|dO| %.2e (tol %.0e), max|dlse| %.2e (tol %.0e)", err, tol, lerr, ltol);
  }
  void *bufs[] = {dq, dk, dv, dout, dl, dsl, dbias, dqs, dks, dcq, dck};
  for (int i = 0; i < 11; i++) dfree(bufs[i]);
  for (int i = 0; i < 3; i++) free(h[i]), free(x[i]);
  free(ho), free(ro), free(rl), free(hl), free(hb);
  return !rc && err <= tol && lerr <= ltol ? 0 : -1;
}

static int api_launch(void *user, const kiln_attn_args *a) {
  return kiln_forward(user, a, NULL) ? -1 : 0;
}

static kiln_context *bundle_ctx(const char *bundle, int only, kiln_status want) {
  kiln_context_options o = {.device = kind == KN_DEVICE_HIP ? "hip" : "cuda", .no_cache = 1,
                            .tune_policy = KILN_TUNE_NONE, .bundle = bundle, .bundle_only = only};
  kiln_context *ctx = NULL;
  kiln_status s = kiln_context_create(&o, &ctx);
  if (s != want) fail_msg("context on %s: %d, %s", bundle, s, kiln_last_error());
  return ctx;
}

static kiln_status prepare(kiln_context *ctx, const kn_attn_desc *d, kiln_kernel **k) {
  kiln_attn_desc pd = api_desc_to_public(d);
  return kiln_prepare(ctx, &pd, NULL, k);
}

static void test_bundle_api(void **state) {
  (void)state;
  if (!open_device()) skip();
  kiln_context *ctx = bundle_ctx(aot_dir, 1, KILN_OK);
  int bad = 0;
  double load_ms = 0, load_max = 0;
  for (int i = 0; i < 16; i++) {
    kcase c = case_at(i);
    kiln_kernel *k;
    if (prepare(ctx, &c.d, &k)) fail_msg("prepare %s: %s", c.name, kiln_last_error());
    kiln_kernel_info info;
    kiln_kernel_get_info(k, &info);
    assert_int_equal(info.source, KILN_SOURCE_BUNDLE);
    load_ms += info.prepare_ms;
    if (info.prepare_ms > load_max) load_max = info.prepare_ms;
    char symbol[128];
    snprintf(symbol, sizeof symbol, "attn_fwd_%s", c.name);
    twin_note(symbol, k);
    char why[400];
    int r = check_launch(&c.d, api_launch, k, why, sizeof why);
    printf("  %-24s %s [%s]: %s %s\n", c.name, chip, info.target, why, r ? "FAIL" : "ok");
    bad += r != 0;
  }
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);
  assert_int_equal(st.bundle_loads, 16);
  printf("  bundle load (prepare from the bundle): mean %.3f ms, max %.3f ms per kernel\n",
         load_ms / 16, load_max);
  /* a descriptor the bundle lacks: refused with bundle_only, naming the bundle */
  kcase c = case_at(0);
  c.d.head_dim = 96;
  kiln_kernel *k;
  assert_int_equal(prepare(ctx, &c.d, &k), KILN_ERR_UNSUPPORTED);
  assert_non_null(strstr(kiln_last_error(), "has no kernel for [dtype=f16;d=96"));
  kiln_context_destroy(ctx);
  /* ... and compiled (JIT) in the full library without it; libkiln_rt has no compiler */
  ctx = bundle_ctx(aot_dir, 0, KILN_OK);
#ifdef KILN_TEST_RT
  assert_int_equal(prepare(ctx, &c.d, &k), KILN_ERR_UNSUPPORTED);
  printf("  libkiln_rt, a kernel the bundle lacks: %s\n", kiln_last_error());
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 0);
#else
  assert_int_equal(prepare(ctx, &c.d, &k), KILN_OK);
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.compiles, 1);
#endif
  assert_int_equal(st.bundle_loads, 0);
  kiln_context_destroy(ctx);
  assert_int_equal(bad, 0);
}

/* a copy of the bundle directory, damaged by `how` (a shell command run in it) */
static char *damaged_copy(const char *how) {
  char *dir = fresh_dir(), cmd[9000];
  snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s' && cd '%s' && %s", aot_dir, dir, dir, how);
  if (system(cmd)) fail_msg("%s failed", cmd);
  return dir;
}

static void test_bundle_damaged(void **state) {
  (void)state;
  if (!open_device()) skip();
  kcase c = case_at(5); /* f16_d128_window */
  const char *file = kind == KN_DEVICE_HIP ? "attn_fwd_f16_d128_window.hipfb"
                     : !strcmp(chip, "sm_90a") ? "attn_fwd_f16_d128_window.sm_90a.*"
                                               : "attn_fwd_f16_d128_window.sm_80.*";
  struct {
    const char *how, *want;
    kiln_status at_create, at_prepare;
  } cases[] = {
      /* one byte flipped in the middle of the file */
      {"for f in %s; do printf '\\377' | dd of=$f bs=1 seek=3000 conv=notrunc status=none; done",
       "checksum mismatch", KILN_OK, KILN_ERR_IO},
      {"for f in %s; do truncate -s 2000 $f; done", "truncated", KILN_OK, KILN_ERR_IO},
      {"for f in %s; do rm $f; done", "cannot open", KILN_OK, KILN_ERR_IO},
      {"echo 'entry name=broken symbol' >> index.kiln; : %s", "index.kiln:66:19: expected key=value", KILN_ERR_IO, 0},
      {"printf 'kiln-aot-index 7\\n' > index.kiln; : %s", "index.kiln:1:1:", KILN_ERR_IO, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char how[600];
    snprintf(how, sizeof how, cases[i].how, file);
    char *dir = damaged_copy(how);
    kiln_context *ctx = bundle_ctx(dir, 1, cases[i].at_create);
    if (cases[i].at_create) {
      printf("  %-32.32s -> %s\n", how, kiln_last_error());
      assert_non_null(strstr(kiln_last_error(), cases[i].want));
    } else {
      kiln_kernel *k;
      kiln_status s = prepare(ctx, &c.d, &k);
      printf("  %-32.32s -> %s\n", how, kiln_last_error());
      assert_int_equal(s, cases[i].at_prepare);
      assert_non_null(strstr(kiln_last_error(), cases[i].want));
      /* the others still load */
      kcase other = case_at(0);
      assert_int_equal(prepare(ctx, &other.d, &k), KILN_OK);
      kiln_context_destroy(ctx);
    }
    rm_dir(dir);
  }
}

/* ---- the generated launcher ---- */

/* kiln_aot_args of the generated kiln_aot.h (tools/aot_emit.c writes that struct; a field out of
 * place gives wrong numbers below) */
typedef struct launcher_args {
  const void *q, *k, *v;
  void *o;
  float *lse;
  int batch, heads, kv_heads, seqlen_q, seqlen_k;
  float sm_scale;
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3], lse_stride[2];
  int window_left, window_right;
  float softcap;
  const float *alibi_slopes;
  int64_t alibi_stride;
  const void *bias;
  int64_t bias_stride[3];
  const int32_t *q_seg, *k_seg;
  int64_t q_seg_stride, k_seg_stride;
  int prefix_len;
  const int32_t *cu_seqlens_q, *cu_seqlens_k;
  int total_q, total_k;
  const int32_t *block_table, *cache_seqlens;
  int64_t block_table_stride;
  int page_size, num_pages, max_pages, seqlen_new;
} launcher_args;
typedef int (*variant_fn)(const launcher_args *a, void *stream);
static const char *(*launcher_error)(void);

static int launcher_launch(void *user, const kiln_attn_args *a) {
  launcher_args l = {.q = a->q, .k = a->k, .v = a->v, .o = a->o, .lse = a->lse,
                     .batch = a->batch, .heads = a->heads, .kv_heads = a->kv_heads,
                     .seqlen_q = a->seqlen_q, .seqlen_k = a->seqlen_k, .sm_scale = a->sm_scale,
                     .window_left = a->window_left, .window_right = a->window_right,
                     .softcap = a->softcap, .alibi_slopes = a->alibi_slopes,
                     .alibi_stride = a->alibi_stride, .bias = a->bias,
                     .bias_stride = {a->bias_stride[0], a->bias_stride[1], a->bias_stride[2]},
                     .q_seg = a->q_seg, .k_seg = a->k_seg, .q_seg_stride = a->q_seg_stride,
                     .k_seg_stride = a->k_seg_stride, .prefix_len = a->prefix_len,
                     .cu_seqlens_q = a->cu_seqlens_q, .cu_seqlens_k = a->cu_seqlens_k,
                     .total_q = a->total_q, .total_k = a->total_k,
                     .block_table = a->block_table, .cache_seqlens = a->cache_seqlens,
                     .block_table_stride = a->block_table_stride, .page_size = a->page_size,
                     .num_pages = a->num_pages, .max_pages = a->max_pages,
                     .seqlen_new = a->seqlen_new};
  int rc = ((variant_fn)user)(&l, NULL);
  if (rc) api_fail(KILN_ERR_RUNTIME, "%s", launcher_error());
  return rc;
}

/* the 6 kernels of tests/aot/variants.manifest: the variant parameters beyond a window's, and
 * the varlen and paged call shapes */
static kcase vcase_at(int i) {
  static const char *const names[] = {"f16_d64_causal_alibi", "f16_d64_bias", "bf16_d128_document",
                                      "f16_d64_prefix_softcap", "f16_d64_varlen_causal",
                                      "f16_d64_paged_causal"};
  kcase c;
  memset(&c, 0, sizeof c);
  snprintf(c.name, sizeof c.name, "%s", names[i]);
  c.d.dtype = i == 2 ? KN_BF16 : KN_F16;
  c.d.head_dim = i == 2 ? 128 : 64;
  c.d.causal = i == 0;
  c.d.has_lse = i == 0;
  c.d.alibi = i == 0, c.d.bias = i == 1, c.d.document = i == 2, c.d.prefix = c.d.softcap = i == 3;
  if (i >= 4) c.d.causal = 1, c.d.has_lse = true;
  c.d.layout = i == 4 ? KN_ATTN_VARLEN : i == 5 ? KN_ATTN_PAGED : KN_ATTN_DENSE;
  return c;
}

/* The launcher NAME.c of bundle directory dir, compiled by a plain C compiler (no include path,
 * no kiln, no LLVM) into a shared object, loaded, and its function for each of the n cases run
 * on the device against the reference.  0 when every case passed; skips (1) without a
 * compiler or the source. */
static int run_launcher(const char *dir, const char *name, kcase (*at)(int), int n, int *bad) {
  char src[4200];
  snprintf(src, sizeof src, "%s/%s.c", dir, name);
  if (access(src, R_OK)) {
    printf("  (no %s: the bundle was built without --emit-c)\n", src);
    return 1;
  }
  /* the twins of the HIP stand-in learn the kernels from a bundle context (no compile) */
  kiln_context *ctx = bundle_ctx(dir, 1, KILN_OK);
  for (int i = 0; i < n; i++) {
    kcase c = at(i);
    kiln_kernel *k;
    if (prepare(ctx, &c.d, &k)) fail_msg("%s", kiln_last_error());
    char symbol[128];
    snprintf(symbol, sizeof symbol, "attn_fwd_%s", c.name);
    twin_note(symbol, k);
  }
  const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
  char cmd[9000], so[4300], sym[128];
  snprintf(cmd, sizeof cmd, "%s --version >/dev/null 2>&1", cc);
  if (system(cmd)) {
    printf("  (no C compiler '%s' here: the launcher is not built)\n", cc);
    kiln_context_destroy(ctx);
    return 1;
  }
  char *tmp = fresh_dir();
  snprintf(so, sizeof so, "%s/lib%s.so", tmp, name);
  snprintf(cmd, sizeof cmd, "%s -std=c11 -O1 -Wall -Wextra -Werror -fPIC -shared -o '%s' '%s' "
           "-ldl -lpthread", cc, so, src);
  printf("  %s\n", cmd);
  if (system(cmd)) fail_msg("the generated launcher does not compile");
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  if (!h) fail_msg("%s", dlerror());
  int (*init)(const char *);
  const char *(*arch)(void);
  snprintf(sym, sizeof sym, "%s_init", name);
  *(void **)&init = dlsym(h, sym);
  snprintf(sym, sizeof sym, "%s_arch", name);
  *(void **)&arch = dlsym(h, sym);
  snprintf(sym, sizeof sym, "%s_error", name);
  *(void **)&launcher_error = dlsym(h, sym);
  assert_non_null(init);
  assert_int_equal(init("metal"), -1);
  assert_non_null(strstr(launcher_error(), "not hip, cuda or auto"));
  if (init(kind == KN_DEVICE_HIP ? "hip" : "cuda")) fail_msg("init: %s", launcher_error());
  assert_string_equal(arch(), chip);
  for (int i = 0; i < n; i++) {
    kcase c = at(i);
    snprintf(sym, sizeof sym, "%s_%s", name, c.name);
    void *f = dlsym(h, sym);
    if (!f) fail_msg("the launcher has no %s", sym);
    char why[400];
    int r = check_launch(&c.d, launcher_launch, f, why, sizeof why);
    printf("  %-24s %s (launcher): %s %s\n", c.name, arch(), why, r ? "FAIL" : "ok");
    *bad += r != 0;
  }
  /* a bad shape, and a variant tensor missing: refused before any launch */
  snprintf(sym, sizeof sym, "%s_%s", name, at(0).name);
  variant_fn f0 = (variant_fn)dlsym(h, sym);
  launcher_args l = {.batch = 1, .heads = 3, .kv_heads = 2, .seqlen_q = 4, .seqlen_k = 4};
  assert_int_equal(f0(&l, NULL), -1);
  assert_non_null(strstr(launcher_error(), "bad shape"));
  if (at(0).d.alibi) {
    char buf[8];
    launcher_args m = {.q = buf, .k = buf, .v = buf, .o = buf, .lse = (float *)buf, .batch = 1,
                       .heads = 1, .kv_heads = 1, .seqlen_q = 1, .seqlen_k = 1};
    assert_int_equal(f0(&m, NULL), -1);
    assert_non_null(strstr(launcher_error(), "alibi: NULL slopes"));
  }
  for (int i = 0; i < n; i++) { /* a varlen kernel without its prefix sums */
    if (at(i).d.layout != KN_ATTN_VARLEN) continue;
    snprintf(sym, sizeof sym, "%s_%s", name, at(i).name);
    char buf[8];
    launcher_args m = {.q = buf, .k = buf, .v = buf, .o = buf, .lse = (float *)buf, .batch = 1,
                       .heads = 1, .kv_heads = 1, .seqlen_q = 1, .seqlen_k = 1, .total_q = 1,
                       .total_k = 1};
    assert_int_equal(((variant_fn)dlsym(h, sym))(&m, NULL), -1);
    assert_non_null(strstr(launcher_error(), "NULL cu_seqlens_q"));
    int32_t cu[2] = {0, 1};
    m.cu_seqlens_q = m.cu_seqlens_k = cu;
    m.q_stride[0] = 64;
    assert_int_equal(((variant_fn)dlsym(h, sym))(&m, NULL), -1);
    assert_non_null(strstr(launcher_error(), "no batch axis"));
  }
  for (int i = 0; i < n; i++) { /* a paged kernel without its table, or with a page too big */
    if (at(i).d.layout != KN_ATTN_PAGED) continue;
    snprintf(sym, sizeof sym, "%s_%s", name, at(i).name);
    char buf[8];
    int32_t t1[1] = {0};
    launcher_args m = {.q = buf, .k = buf, .v = buf, .o = buf, .lse = (float *)buf, .batch = 1,
                       .heads = 1, .kv_heads = 1, .seqlen_q = 1, .page_size = 16,
                       .num_pages = 1, .max_pages = 1};
    assert_int_equal(((variant_fn)dlsym(h, sym))(&m, NULL), -1);
    assert_non_null(strstr(launcher_error(), "NULL block_table"));
    m.block_table = m.cache_seqlens = t1;
    m.page_size = 512;
    assert_int_equal(((variant_fn)dlsym(h, sym))(&m, NULL), -1);
    assert_non_null(strstr(launcher_error(), "page_size 512"));
  }
  kiln_context_destroy(ctx);
  rm_dir(tmp);
  return 0;
}

static void test_launcher(void **state) {
  (void)state;
  if (!open_device()) skip();
  int bad = 0;
  if (run_launcher(aot_dir, "kiln_aot", case_at, 16, &bad)) skip();
  assert_int_equal(bad, 0);
}

/* the variants' parameters through a launcher (ALiBi, bias, documents, prefix with softcap):
 * KILN_AOT_VARIANTS_DIR, the bundle of tests/aot/variants.manifest.  Not on the fake CUDA
 * driver, whose float64 attention knows only the window and the softcap: on the HIP stand-in
 * (the emulated twins) and on a GPU. */
static void test_launcher_variants(void **state) {
  (void)state;
  const char *dir = getenv("KILN_AOT_VARIANTS_DIR");
  if (!dir || !*dir || !open_device()) skip();
  if (fake_cuda_attn) {
    printf("  (the fake CUDA driver computes no ALiBi, bias, documents or prefix)\n");
    skip();
  }
  int bad = 0;
  if (run_launcher(dir, "kiln_aotv", vcase_at, 6, &bad)) skip();
  assert_int_equal(bad, 0);
}

int main(void) {
  const char *s = getenv("KILN_TEST_SEED");
  if (s) seed = strtoull(s, NULL, 0);
  aot_dir = getenv("KILN_AOT_DIR");
  if (aot_dir && !*aot_dir) aot_dir = NULL;
  printf("seed %llu (KILN_TEST_SEED replays)\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bundle_round_trip),
      cmocka_unit_test(test_index_errors),
      cmocka_unit_test(test_rename),
      cmocka_unit_test(test_bundle_api),
      cmocka_unit_test(test_bundle_damaged),
      cmocka_unit_test(test_launcher),
      cmocka_unit_test(test_launcher_variants),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
