/* kiln.c — the `kiln` command line.
 *
 * The contract that tests, benchmarks and users rely on (docs/cli.md, checked against this
 * tool's --help by tests/docs.sh; the design: docs/architecture.md):
 *   kiln targets                          targets compiled in, devices present
 *   kiln run   [--target T] [options]     random inputs, run, compare with the float64 reference
 *   kiln dump  --stage S [options]        print a stage of the compile (ir|layout|lowered|llvm|asm)
 *   kiln compile --target T [options]     ahead-of-time output (-o FILE, --emit KIND, --stats)
 *   kiln check FILE.tile                  parse and verify a text IR file
 *   kiln inspect [--loop] FILE.hsaco      the resources of an AMDGPU code object (--loop: its
 *                                         KV loop's instructions and llvm-mca cycles)
 *   kiln tune  [--target T] [options]     autotune the tiling through the JIT service (kiln.h)
 *   kiln cache ls|verify|clear            the code cache and tuning records (kiln.h)
 *   kiln --version                        kiln's and LLVM's versions
 * `kiln run` ends with one line `max_abs_err=<x> rel_err=<x> tol=<x> PASS|FAIL`.
 * Exit codes: 0 success / PASS, 1 FAIL (a result outside tolerance), 2 bad usage or bad input
 * (malformed IR, unsupported shape or dtype, an option an --ir file contradicts), 3 the target
 * or device is not available.
 *
 * Layering: run (on host, sm_80, sm_90a, auto), tune and cache are clients of the public API
 * (include/kiln.h), so they use the disk cache and the tuning records exactly as an embedding
 * process does; the descriptor is kiln.h's kiln_attn_desc, turned into the template's by the
 * API's one conversion (api_desc_from_public).  What the API does not serve — the interpreter,
 * the emulated AMDGPU targets, kernels read from --ir files, and the compile/dump paths — uses
 * the layers below directly, with the same inputs, report lines and reference check.
 *
 * The tool only parses options and prints; building, running and checking live in the library.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amdgpu.h"
#include "aot.h"
#include "attention.h"
#include "attn_bwd.h"
#include "attn_decode.h"
#include "bundle.h"
#include "cache.h"
#include "cuda_device.h"
#include "device.h"
#include "discover.h"
#include "emu.h"
#include "gpu.h"
#include "interp.h"
#include "ir.h"
#include "kiln.h"
#include "numeric.h"
#include "pipeline.h"
#include "ptxas.h"
#include "target.h"
#include "tunedb.h"

#include "api.h" /* api_desc_from_public: the one descriptor conversion */
#include "options.h"

enum { EXIT_PASS = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_NODEV = 3 };

static char *read_file(const char *path, size_t *len);

/* o->cfg: a template's default tiling `base` with the block sizes and warps given */
static void given_tiling(cli_options *o, kn_attn_config base) {
  o->cfg = base;
  if (o->block_m) o->cfg.block_m = o->block_m;
  if (o->block_n) o->cfg.block_n = o->block_n;
  if (o->warps) o->cfg.warps = o->warps;
}

/* o->attn and o->cfg from the options: the descriptor through the API's one conversion, the
 * template's default tiling with what was given.  -1 after a message (unsupported). */
static int resolve_attn(cli_options *o) {
  /* the variant options, on the public descriptor: the one conversion below makes the
   * template's */
  o->desc.window |= o->var.window;
  o->desc.softcap |= o->var.softcap;
  o->desc.alibi |= o->var.alibi;
  o->desc.bias |= o->var.bias;
  o->desc.document |= o->var.documents > 0;
  o->desc.prefix |= o->var.prefix;
  if (o->var.mods_file && !o->var.mods_text) {
    size_t len;
    if (!(o->var.mods_text = read_file(o->var.mods_file, &len))) return -1;
    if (memchr(o->var.mods_text, 0, len)) {
      fprintf(stderr, "kiln: error: cannot read '%s': it holds a NUL byte\n", o->var.mods_file);
      return -1;
    }
    char *t = realloc(o->var.mods_text, len + 1);
    if (!t) return -1;
    t[len] = 0;
    o->var.mods_text = t;
  }
  o->desc.mods = o->var.mods_text;
  o->desc.mods_name = o->var.mods_file;
  if (api_desc_from_public(&o->desc, &o->attn)) {
    fprintf(stderr, "kiln: error: unsupported attention request: %s\n", kiln_last_error());
    return -1;
  }
  kn_diag diag;
  if (!o->ir_file && kn_attn_signature(&o->attn, &o->var.sig, &diag)) {
    fputs(diag.rendered, stderr);
    return -1;
  }
  const kn_target *dt = kn_target_get(o->target);
  given_tiling(o, kn_attn_default_config(dt ? dt->arch : NULL, &o->attn));
  if (o->stages) o->cfg.stages = o->stages;
  /* off32 as the API sets it (kiln_prepare, kiln_forward): AMDGPU dense and varlen kernels whose
   * K/V slabs (contiguous rows of the problem's seqlen_k) span less than 2^31 bytes */
  o->cfg.off32 = !o->global_kv && kn_attn_off32_applies(dt ? dt->arch : NULL, &o->attn) &&
                 kn_attn_off32_fits(&o->attn, o->prob.seqlen_k, o->attn.head_dim,
                                    o->attn.head_dim);
  if (o->wgmma) {  /* as kiln_prepare_options.wgmma: block_m = 16 x warps */
    o->cfg.wgmma = true;
    if (o->block_m && !o->warps) o->cfg.warps = o->cfg.block_m / 16;
    else if (!o->block_m && o->warps) o->cfg.block_m = 16 * o->cfg.warps;
    else if (!o->block_m) o->cfg.warps = o->cfg.block_m / 16;
  }
  return 0;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The whole of a regular file of at most KN_PARSE_MAX_BYTES (IR text, a code object); NULL
 * after printing why not: it cannot be opened, it is not a regular file (reading a FIFO would
 * wait for a writer, /dev/zero would never end) or it is larger. */
static char *read_file(const char *path, size_t *len) {
  const char *why = NULL;
  char big[64];
  snprintf(big, sizeof big, "larger than the %zu MiB kiln reads", KN_PARSE_MAX_BYTES >> 20);
  struct stat st;
  char *buf = NULL;
  size_t n = 0, cap = 0;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st)) why = strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "not a regular file (kiln reads files, not FIFOs or devices)";
  else if ((uint64_t)st.st_size > KN_PARSE_MAX_BYTES) why = big;
  /* (read to the end, not to st_size: the file may be growing, and /proc reports size 0) */
  while (!why) {
    if (n == cap) {
      char *nb = n > KN_PARSE_MAX_BYTES ? NULL : realloc(buf, cap = cap ? cap * 2 : 1 << 16);
      if (!nb) {
        why = n > KN_PARSE_MAX_BYTES ? big : "out of memory";
        break;
      }
      buf = nb;
    }
    ssize_t got = read(fd, buf + n, cap - n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) why = strerror(errno);
    if (got <= 0) break;
    n += (size_t)got;
  }
  if (fd >= 0) close(fd);
  if (why) {
    fprintf(stderr, "kiln: error: cannot read '%s': %s\n", path, why);
    free(buf);
    return NULL;
  }
  *len = n;
  return buf ? buf : malloc(1);
}

/* parse + verify a file; NULL after printing the diagnostic */
static kn_module *load_ir(const char *path) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) return NULL;
  kn_diag d;
  kn_module *m = kn_parse(path, text, len, &d);
  free(text);
  if (!m || kn_verify(m, &d)) {
    fputs(d.rendered, stderr);
    kn_module_free(m);
    return NULL;
  }
  return m;
}

/* An --ir file's kernel records what it computes as attrs (HEAD_DIM, CAUSAL, HAS_LSE, BLOCK_M,
 * BLOCK_N, WARPS, STAGES) and its dtype in its parameter types: those decide the grid and the
 * reference.  An option given on the command line that says otherwise is an error naming both
 * values; one that agrees is fine.  -1 after a message. */
static int apply_ir_attrs(cli_options *o, kn_func *k) {
  const struct { const char *attr, *opt; int *dst; int given; } ints[] = {
      {"HEAD_DIM", "--head-dim", &o->attn.head_dim, o->given.head_dim},
      {"BLOCK_M", "--block-m", &o->cfg.block_m, o->block_m},
      {"BLOCK_N", "--block-n", &o->cfg.block_n, o->block_n},
      {"WARPS", "--warps", &o->cfg.warps, o->warps},
      {"STAGES", "--stages", &o->cfg.stages, o->stages}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
    int64_t v;
    if (!kn_func_get_meta(k, ints[i].attr, &v)) continue;
    if (ints[i].given && v != *ints[i].dst) {
      fprintf(stderr, "kiln: error: %s: %s %d conflicts with the kernel's %s = %lld (leave the "
              "option out or give the file's value)\n", o->ir_file, ints[i].opt, *ints[i].dst,
              ints[i].attr, (long long)v);
      return -1;
    }
    *ints[i].dst = (int)v;
  }
  int64_t v;
  if (kn_func_get_meta(k, "CAUSAL", &v)) {
    if (o->given.causal && !v) {
      fprintf(stderr, "kiln: error: %s: --causal conflicts with the kernel's CAUSAL = 0\n",
              o->ir_file);
      return -1;
    }
    o->attn.causal = (int)v;
  }
  if (kn_func_get_meta(k, "HAS_LSE", &v)) o->attn.has_lse = v != 0;
  /* the call shape is the kernel's parameters: the options must give the same one */
  int64_t layout = 0;
  kn_func_get_meta(k, "LAYOUT", &layout);
  if (layout != o->attn.layout) {
    static const char *const names[] = {"dense", "varlen", "paged", "unknown"};
    static const char *const needs[] = {"and --varlen / --paged run those kernels only",
                                        "so the run needs --varlen LENS",
                                        "so the run needs --paged PAGE_SIZE[:LENS]",
                                        "which kiln does not know"};
    int li = layout >= 0 && layout <= 2 ? (int)layout : 3;
    fprintf(stderr, "kiln: error: %s: the kernel's LAYOUT is %lld (%s), %s\n", o->ir_file,
            (long long)layout, names[li], needs[li]);
    return -1;
  }
  /* the variant the kernel says it computes decides the reference; its values come from the
   * options (variant_make says which are missing) */
  const struct { const char *attr; bool *dst; } flags[] = {
      {"WINDOW", &o->attn.window}, {"SOFTCAP", &o->attn.softcap}, {"ALIBI", &o->attn.alibi},
      {"BIAS", &o->attn.bias}, {"DOCUMENT", &o->attn.document}, {"PREFIX", &o->attn.prefix}};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (kn_func_get_meta(k, flags[i].attr, &v)) *flags[i].dst = v != 0;
  kn_type q = kn_func_nparams(k) > 0 ? kn_func_param(k, 0)->type : (kn_type){0};
  if (q.kind == KN_TY_PTR) {
    if (o->given.dtype && q.elem != o->attn.dtype) {
      fprintf(stderr, "kiln: error: %s: --dtype %s conflicts with the kernel's element type %s "
              "(ptr<%s> q)\n", o->ir_file, kn_scalar_name(o->attn.dtype),
              kn_scalar_name((kn_scalar)q.elem), kn_scalar_name((kn_scalar)q.elem));
      return -1;
    }
    o->attn.dtype = (kn_scalar)q.elem;
  }
  return 0;
}

/* the kernel to run: the template, or the first kernel of --ir FILE (checked against the
 * template's parameter list so the same arguments and reference apply); resolves o->attn and
 * o->cfg */
static kn_func *get_kernel(cli_options *o, kn_module **mout) {
  kn_diag d;
  *mout = NULL;
  kn_module *m = NULL;
  kn_func *k = NULL;
  if (resolve_attn(o)) return NULL;
  if (o->ir_file) {
    if (!(m = load_ir(o->ir_file))) return NULL;
    for (int i = 0; i < m->nfuncs && !k; i++)
      if (m->funcs[i]->is_kernel) k = m->funcs[i];
    if (!k) {
      fprintf(stderr, "kiln: error: %s: no kernel in the file\n", o->ir_file);
      kn_module_free(m);
      return NULL;
    }
    if (apply_ir_attrs(o, k)) {
      kn_module_free(m);
      return NULL;
    }
  }
  const kn_target *tt = o->ir_file ? NULL : kn_target_get(o->target);
  if (o->decode) {  /* the decode kernel at its own tiling, with what was given */
    if (o->ir_file || o->wgmma || o->stages) {
      fprintf(stderr, "kiln: error: --decode builds the decode template: not with --ir, "
              "--mma wgmma or --stages\n");
      return NULL;
    }
    /* a read mode's kernel at the tiling the API gives it (kn_attn_decode_read_config) */
    given_tiling(o, kn_attn_decode_read_config(tt ? tt->arch : NULL, &o->attn, o->decode_read));
    m = kn_module_new("<attn_decode>");
    if (kn_attn_decode_check(tt ? tt->arch : NULL, &o->attn, &o->cfg, &d) ||
        !(k = kn_attn_decode_build(m, &o->attn, &o->cfg, o->decode_read, &d)) || kn_verify(m, &d)) {
      fprintf(stderr, "kiln: error: unsupported decode request: %s\n", d.message);
      kn_module_free(m);
      return NULL;
    }
    *mout = m;
    return k;
  }
  if (kn_attn_check_on(tt ? tt->arch : NULL, &o->attn, &o->cfg, &d)) {
    fprintf(stderr, "kiln: error: unsupported attention request: %s\n", d.message);
    kn_module_free(m);
    return NULL;
  }
  if (o->ir_file) {
    /* compare with the template's signature for the variant the file names (its modifier
     * functions are in the file) */
    kn_attn_sig *sig = &o->var.sig;
    bool same = kn_attn_signature_in(m, &o->attn, sig, &d) == 0;
    if (!same) {
      /* a kernel written without the library's functions (by hand, or dumped before variants
       * were modifiers: its causal mask inline): the library's stand for them in the reference */
      o->var.ref_from_library = same = kn_attn_signature(&o->attn, sig, &d) == 0;
      if (!same) fprintf(stderr, "%s", d.rendered);
    }
    same = same && sig->n == kn_func_nparams(k);
    for (int i = 0; same && i < sig->n; i++)
      same = kn_ty_eq(sig->type[i], kn_func_param(k, i)->type);
    if (!same) {
      fprintf(stderr,
              "kiln: error: %s: kernel @%s does not take the attention forward parameters "
              "(see templates/attention.h) of its variant for dtype %s\n",
              o->ir_file, k->name, kn_scalar_name(o->attn.dtype));
      kn_module_free(m);
      return NULL;
    }
  } else {
    m = kn_module_new("<attn_fwd>");
    k = kn_attn_fwd_build(m, &o->attn, &o->cfg, &d);
    if (!k || kn_verify(m, &d)) {
      /* with the user's modifiers in it, the error is most likely theirs (an op that cannot
       * run per element, say): it names their file, line and column */
      fprintf(stderr, o->attn.mods ? "kiln: error: the modifiers of %s do not fit the kernel:\n%s"
                                   : "kiln: internal error: the attention template is invalid:%s\n%s",
              o->attn.mods ? o->attn.mods_file : "", d.rendered);
      kn_module_free(m);
      return NULL;
    }
  }
  *mout = m;
  return k;
}

/* splitmix64 + Box-Muller: reproducible N(0,1) from --seed */
static unsigned long long rng_next(unsigned long long *s) {
  unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_normal(unsigned long long *s) {
  double u1 = ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53;
  double u2 = (double)(rng_next(s) >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* fills a device-format buffer and its rounded float64 twin */
static void fill_random(kn_scalar t, void *buf, double *twin, size_t n, unsigned long long *s) {
  size_t es = kn_scalar_size(t);
  for (size_t i = 0; i < n; i++) {
    kn_store_elem(t, (char *)buf + i * es, rng_normal(s));
    twin[i] = kn_load_elem(t, (char *)buf + i * es);
  }
}

/* fp8 inputs (docs/serving.md): the descale factor of tensor w (0 q, 1 k, 2 v) of kv head hk in
 * format t, the same for every batch: raw values span about a quarter of the format's range
 * times 1..1.5 */
static double run_descale(kn_scalar t, int w, int hk) {
  return 4.0 * (1.0 + 0.25 * ((hk + w) % 3)) / kn_max_finite(t);
}

/* fill_random for fp8 tensor w of the run: N(0,1) values quantised with the descale of each
 * element's kv head, the twins dequantised.  Head of element i: (b, h, row, D) dense, (token,
 * h, D) varlen and paged pools; q heads map to kv heads by the group. */
static void fill_fp8(kn_scalar t, int w, void *buf, double *twin, size_t n, bool by_row,
                     int64_t rows, int heads, int group, int D, unsigned long long *s) {
  for (size_t i = 0; i < n; i++) {
    int64_t h = by_row ? (int64_t)(i / (size_t)D) % heads
                       : (int64_t)(i / ((size_t)rows * (size_t)D)) % heads;
    double ds = run_descale(t, w, (int)(h / group));
    uint8_t byte = (uint8_t)kn_encode(t, rng_normal(s) / ds);
    ((uint8_t *)buf)[i] = byte;
    twin[i] = kn_decode(t, byte) * ds;
  }
}

/* ---- commands ----------------------------------------------------------------------------- */

/* a compiled target by name ("auto": the best device present); NULL after a message */
static const char *auto_target(void);

static const kn_target *find_target(const char *name) {
  if (!strcmp(name, "auto")) name = auto_target();
  const kn_target *t = kn_target_get(name);
  if (t) return t;
  fprintf(stderr, "kiln: error: target '%s' is not available in this build (run `kiln targets`)\n",
          name);
  return NULL;
}

/* The device list, found once by dlopen of the GPU drivers (runtime/discover.h). */
static const kn_device_list *devices(void) {
  static kn_device_list list;
  static bool done;
  if (!done) {
    kn_discover(&list);
    done = true;
  }
  return &list;
}

/* `auto` for the commands that work on the host only (dump; `kiln run` and `kiln tune` resolve
 * auto through the API, api_context: an NVIDIA GPU when one is present): a GPU found is named
 * and the host used. */
static const char *auto_target(void) {
  const kn_device_info *best = kn_discover_best(devices());
  if (best->kind != KN_DEVICE_HOST)
    fprintf(stderr, "kiln: note: %s (target %s) found; this command uses the host for auto "
            "(kiln run and kiln tune use the GPU)\n", best->name,
            best->target[0] ? best->target : "none");
  return "host";
}

/* the NVIDIA device `kiln run` uses for target t (sm_80: any sm_80+ GPU; sm_90a: compute
 * capability 9.0), or NULL */
static const kn_device_info *cuda_device_for(const char *target) {
  const kn_device_list *l = devices();
  for (int i = 0; i < l->n; i++) {
    const kn_device_info *d = &l->dev[i];
    if (d->kind == KN_DEVICE_CUDA && d->target[0] &&
        (!strcmp(target, "sm_80") || !strcmp(d->target, target)))
      return d;
  }
  return NULL;
}

static void print_driver(const char *what, const kn_driver_report *r) {
  if (r->status == KN_OK)
    printf("  %-6s driver %s, version %d, %d device(s)\n", what, r->library, r->version,
           r->device_count);
  else
    printf("  %-6s not present: %s\n", what, r->why.message);
}

static int cmd_targets(void) {
  printf("targets compiled in (the registry, compiler/arch.c):\n");
  printf("  %-11s the reference interpreter\n", "interp");
  for (int i = 0; kn_target_at(i); i++) {
    const kn_target *t = kn_target_at(i);
    const kn_arch *a = t->arch;
    if (t->emulated)
      printf("  %-11s the %s lowering run on the CPU by the AMDGPU emulator\n", t->name, a->name);
    else if (a->isa == KN_ISA_HOST)
      printf("  %-11s the host CPU, LLVM ORC JIT\n", t->name);
    else
      printf("  %-11s %s, %s, %s (%s; %s)\n", t->name, kn_isa_name(a->isa), a->chip,
             kn_artifact_kind_name(t->artifact), a->isa == KN_ISA_NVPTX
             ? "run where an NVIDIA GPU is present" : "compile only: no AMD GPU here",
             a->emulated ? "emulated as well" : a->why_not_emulated ? a->why_not_emulated
                                                                    : "not emulated");
  }
  const kn_device_list *l = devices();
  printf("drivers:\n");
  print_driver("hip", &l->hip);
  print_driver("cuda", &l->cuda);
  printf("devices present:\n");
  for (int i = 0; i < l->n; i++) {
    const kn_device_info *d = &l->dev[i];
    if (d->kind == KN_DEVICE_HOST)
      printf("  host     %s, %s, %d CPUs (%d worker threads), %llu MiB\n", d->name, d->arch,
             d->compute_units, kn_host_threads(), (unsigned long long)(d->memory_bytes >> 20));
    else
      printf("  %-8s %s %d: %s, arch %s%s%s, %d units, %llu MiB\n",
             d->target[0] ? d->target : "-", kn_device_kind_str(d->kind), d->ordinal, d->name,
             d->arch, d->arch_features[0] ? ":" : "", d->arch_features, d->compute_units,
             (unsigned long long)(d->memory_bytes >> 20));
  }
  const kn_device_info *best = kn_discover_best(l), *cu = cuda_device_for("sm_80");
  if (cu)
    printf("auto = %s (%s; `kiln run` and `kiln tune`, the API; dump uses the host)\n", cu->target,
           cu->name);
  else
    printf("auto = host%s%s%s\n", best->kind != KN_DEVICE_HOST ? " (best device: " : "",
           best->kind != KN_DEVICE_HOST ? best->name : "",
           best->kind != KN_DEVICE_HOST ? ")" : "");
  return EXIT_PASS;
}

static int cmd_check(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: kiln check FILE.tile\n");
    return EXIT_USAGE;
  }
  kn_module *m = load_ir(argv[2]);
  if (!m) return EXIT_USAGE;
  int kernels = 0;
  for (int i = 0; i < m->nfuncs; i++) kernels += m->funcs[i]->is_kernel;
  printf("%s: ok (%d functions, %d kernels)\n", argv[2], m->nfuncs, kernels);
  kn_module_free(m);
  return EXIT_PASS;
}

static int cmd_dump(cli_options *o) {
  int stage = o->stage ? kn_stage_parse(o->stage) : -1;
  if (stage <= 0 || (stage & (stage - 1))) {
    fprintf(stderr, "kiln: error: --stage %s is not a stage (ir, layout, lowered, llvm, asm)\n",
            o->stage ? o->stage : "(missing)");
    return EXIT_USAGE;
  }
  const kn_target *t = NULL;
  if (strcmp(o->target, "interp") && !(t = find_target(o->target))) return EXIT_NODEV;
  kn_module *m;
  kn_func *k = get_kernel(o, &m);
  if (!k) return EXIT_USAGE;
  int rc = EXIT_PASS;
  if (!t) {
    if (stage != KN_STAGE_IR) {
      fprintf(stderr, "kiln: error: target interp has only the stage ir\n");
      rc = EXIT_USAGE;
    } else {
      char *s = kn_print(m);
      fputs(s, stdout);
      free(s);
    }
  } else {
    kn_diag d;
    if (kn_pipeline_dump(m, k->name, t, (kn_stage)stage, stdout, &d)) {
      fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
      rc = EXIT_USAGE;
    }
  }
  kn_module_free(m);
  return rc;
}

/* ---- run ---------------------------------------------------------------------------------
 * Two ways to a kernel, one of everything else.  Through the public API (host, sm_80, sm_90a,
 * auto; no --ir): kiln_context_create on the device, kiln_prepare (memo, disk cache, tuning
 * records, tuning policy), kiln_forward on host buffers or on device buffers allocated here.
 * Directly (interp, the emulated gfx targets, and any --ir file, which the API does not serve):
 * the kernel is built (or read), compiled for the target and run by the interpreter, the
 * emulator or the host device.  Both make the same random inputs, print the same report lines
 * and check against the same float64 reference (inputs_make, print_header, print_timing,
 * check_and_report). */

static void cli_log(void *user, kiln_log_level level, const char *msg) {
  (void)user;
  if (level <= KILN_LOG_WARN)
    fprintf(stderr, "kiln: %s: %s\n", level == KILN_LOG_ERROR ? "error" : "warning", msg);
}

static int exit_of(kiln_status s) {
  switch (s) {
  case KILN_OK: return EXIT_PASS;
  case KILN_ERR_NO_DEVICE: return EXIT_NODEV;
  case KILN_ERR_RUNTIME: return EXIT_FAIL;
  default: return EXIT_USAGE;
  }
}

/* a failed API call: its message, and the exit code of its status */
static int fail_api(kiln_status s) {
  fprintf(stderr, "kiln: error: %s\n", kiln_last_error());
  return exit_of(s);
}

/* the random inputs of a run: buffers in the kernel's dtype and their float64 twins (what the
 * reference sees), plus the output and lse buffers on the host */
typedef struct run_inputs {
  size_t nq, nk, nl;       /* elements: (B, H, Nq, D), (B, HK, Nk, D), (B, H, Nq) */
  void *q, *k, *v, *out;   /* dtype */
  float *lse;
  double *qd, *kd, *vd;    /* the rounded inputs as doubles */
} run_inputs;

static void inputs_free(run_inputs *in) {
  free(in->q), free(in->k), free(in->v), free(in->out), free(in->lse);
  free(in->qd), free(in->kd), free(in->vd);
  memset(in, 0, sizeof *in);
}

/* 0, or -1 after a message (out of host memory) */
static int inputs_make(const cli_options *o, run_inputs *in) {
  const kn_attn_problem *p = &o->prob;
  const int D = o->attn.head_dim;
  kn_scalar dt = o->attn.dtype, qt = kn_attn_q_type(&o->attn), kt = kn_attn_kv_type(&o->attn);
  size_t es = kn_scalar_size(dt), qs = kn_scalar_size(qt), ks = kn_scalar_size(kt);
  memset(in, 0, sizeof *in);
  /* rows of the buffers: batch x length, or the packed tokens of a varlen run */
  const bool varlen = o->attn.layout == KN_ATTN_VARLEN;
  const size_t rq = varlen ? (size_t)p->total_q : (size_t)p->batch * p->seqlen_q;
  const size_t rk = varlen ? (size_t)p->total_k
                   : o->attn.layout == KN_ATTN_PAGED ? (size_t)p->num_pages * p->page_size
                                                     : (size_t)p->batch * p->seqlen_k;
  in->nq = rq * p->heads * D;
  in->nk = rk * p->kv_heads * D;
  in->nl = rq * p->heads;
  in->q = malloc(in->nq * qs + 1), in->k = malloc(in->nk * ks + 1), in->v = malloc(in->nk * ks + 1);
  in->out = calloc(in->nq, es), in->lse = calloc(in->nl, sizeof(float));
  in->qd = malloc(in->nq * 8), in->kd = malloc(in->nk * 8), in->vd = malloc(in->nk * 8);
  if (!in->q || !in->k || !in->v || !in->out || !in->lse || !in->qd || !in->kd || !in->vd) {
    inputs_free(in);
    fprintf(stderr, "kiln: error: out of host memory for this problem size\n");
    return -1;
  }
  unsigned long long s = o->seed;
  const int group = p->heads / p->kv_heads;
  const bool dense_k = o->attn.layout == KN_ATTN_DENSE;
  const bool dense_q = o->attn.layout != KN_ATTN_VARLEN;
  if (kn_scalar_is_fp8(qt))
    fill_fp8(qt, 0, in->q, in->qd, in->nq, !dense_q, p->seqlen_q, p->heads, group, D, &s);
  else
    fill_random(qt, in->q, in->qd, in->nq, &s);
  for (int w = 1; w < 3; w++) {
    void *b = w == 1 ? in->k : in->v;
    double *tw = w == 1 ? in->kd : in->vd;
    if (kn_scalar_is_fp8(kt))
      fill_fp8(kt, w, b, tw, in->nk, !dense_k, p->seqlen_k, p->kv_heads, 1, D, &s);
    else
      fill_random(kt, b, tw, in->nk, &s);
  }
  return 0;
}

/* the first line of every run: where, what (the descriptor's and tiling's keys), the problem */
static void print_header(const cli_options *o, const char *kname, const char *target,
                         const char *device) {
  const kn_attn_problem *p = &o->prob;
  char what[2 * KN_ATTN_KEY_MAX + 16];
  api_describe(kname, &o->attn, &o->cfg, what, sizeof what);
  printf("kiln run: target=%s device=%s kernel=%s B=%d H=%d HK=%d Nq=%d Nk=%d seed=%llu", target,
         device, what, p->batch, p->heads, p->kv_heads, p->seqlen_q, p->seqlen_k, o->seed);
  if (o->attn.layout == KN_ATTN_VARLEN)  /* Nq, Nk: the longest sequence's */
    printf(" varlen total_q=%d total_k=%d", p->total_q, p->total_k);
  if (o->attn.layout == KN_ATTN_PAGED)  /* Nk: the table's capacity */
    printf(" paged page_size=%d num_pages=%d max_pages=%d", p->page_size, p->num_pages,
           p->max_pages);
  printf("\n");
}

/* "<how the kernel was had>  run: <best> ms (best of R<, clock>)  <rate> GFLOP/s<what>", the
 * forward's FLOPs times `times` (the backward counts 2.5x, as FlashAttention's benchmarks) */
static void print_timing(const cli_options *o, const char *had, double best_ms, const char *clock,
                         double times, const char *what) {
  const kn_attn_problem *p = &o->prob;
  double pairs = (double)p->batch * p->seqlen_q * p->seqlen_k;  /* query-key pairs per head */
  if (o->attn.layout == KN_ATTN_VARLEN) {
    pairs = 0;
    for (int b = 0; b < p->batch; b++)
      pairs += (double)(p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b]) *
               (p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b]);
  }
  if (o->attn.layout == KN_ATTN_PAGED) {
    pairs = 0;
    for (int b = 0; b < p->batch; b++) pairs += (double)p->seqlen_q * p->cache_seqlens[b];
  }
  double flops = times * 4.0 * p->heads * pairs * o->attn.head_dim;
  if (o->attn.causal) flops *= 0.5;
  printf("%s  run: %.3f ms (best of %d%s)  %.3f GFLOP/s%s\n", had, best_ms, o->repeats, clock,
         flops / (best_ms * 1e-3) * 1e-9, what);
}

/* ---- the variant's values (docs/variants.md) ---------------------------------------------------- */

/* the values of a run's variant parameters: kn_attn_vargs, the user's by name, and the host
 * tensors behind them (with their bytes: the interpreter, the emulator and --check-bounds check
 * accesses against them) */
typedef struct variant_values {
  const float *descale[3];  /* fp8 inputs: q, k, v (B, HK), among buf[] */
  kn_attn_vargs va;
  kn_attn_named_arg named[16];
  char kind[16];        /* of each named value: 'i', 'f' or 'p' */
  void *buf[24];
  size_t bytes[24];
  int nbuf;
} variant_values;

static void variant_free(variant_values *vv) {
  for (int i = 0; i < vv->nbuf; i++) free(vv->buf[i]);
  memset(vv, 0, sizeof *vv);
}

static void *variant_buf(variant_values *vv, size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  if (!p || vv->nbuf == 24) {
    free(p);
    return NULL;
  }
  vv->buf[vv->nbuf] = p, vv->bytes[vv->nbuf++] = bytes;
  return p;
}

/* 0, or -1 after a message: a value the variant needs is missing or malformed */
static int variant_make(const cli_options *o, const kn_attn_sig *sig, variant_values *vv) {
  const kn_attn_desc *d = &o->attn;
  const kn_attn_problem *p = &o->prob;
  const int B = p->batch, H = p->heads, Nq = p->seqlen_q, Nk = p->seqlen_k;
  unsigned long long s = o->seed ^ 0x5eedull;
  memset(vv, 0, sizeof *vv);
  kn_attn_vargs *va = &vv->va;
  const char *missing = d->window && !o->var.window     ? "--window L,R"
                        : d->softcap && !o->var.softcap ? "--softcap C"
                        : d->prefix && !o->var.prefix   ? "--prefix P"
                        : d->document && !o->var.documents ? "--documents K"
                                                        : NULL;
  if (missing) {
    fprintf(stderr, "kiln: error: the kernel's variant needs %s\n", missing);
    return -1;
  }
  /* fp8 inputs: the descales inputs_make quantised with (run_descale), as (B, HK) tensors */
  const kn_scalar in_t[3] = {kn_attn_q_type(d), kn_attn_kv_type(d), kn_attn_kv_type(d)};
  for (int w = 0; w < 3 && kn_attn_is_fp8(d); w++) {
    if (!kn_scalar_is_fp8(in_t[w])) continue;
    float *ds = variant_buf(vv, sizeof(float) * (size_t)B * (size_t)p->kv_heads);
    if (!ds) goto oom;
    for (int b = 0; b < B; b++)
      for (int hk = 0; hk < p->kv_heads; hk++)
        ds[b * p->kv_heads + hk] = (float)run_descale(in_t[w], w, hk);
    vv->descale[w] = ds;
  }
  va->window_left = o->var.window_left, va->window_right = o->var.window_right;
  va->softcap = (float)o->var.softcap_value;
  va->prefix_len = o->var.prefix_len;
  if (d->alibi) { /* the slopes of the ALiBi paper: 2^(-8 (h + 1) / H), one set for every batch */
    float *sl = variant_buf(vv, sizeof(float) * (size_t)H);
    if (!sl) goto oom;
    for (int h = 0; h < H; h++) sl[h] = (float)exp2(-8.0 * (h + 1) / H);
    va->alibi_slopes = sl, va->alibi_sb = 0;
  }
  if (d->bias) {
    size_t n = (size_t)B * H * Nq * Nk, es = kn_scalar_size(d->dtype);
    char *x = variant_buf(vv, n * es);
    if (!x) goto oom;
    for (size_t i = 0; i < n; i++) kn_store_elem(d->dtype, x + i * es, rng_normal(&s));
    va->bias = x;
    va->bias_sb = (int64_t)H * Nq * Nk, va->bias_sh = (int64_t)Nq * Nk, va->bias_sm = Nk;
  }
  if (d->document) {
    /* K documents packed into the keys' stream, cut at random places; the queries are its last
     * Nq tokens (the whole stream when Nq = Nk) */
    int32_t *ks = variant_buf(vv, sizeof(int32_t) * (size_t)B * Nk);
    int32_t *qs = variant_buf(vv, sizeof(int32_t) * (size_t)B * Nq);
    if (!ks || !qs) goto oom;
    for (int b = 0; b < B; b++) {
      for (int j = 0, id = 0; j < Nk; j++) {
        ks[(size_t)b * Nk + j] = id;
        if (id + 1 < o->var.documents && rng_next(&s) % (unsigned)(Nk / o->var.documents + 1) == 0)
          id++;
      }
      for (int i = 0; i < Nq; i++)
        qs[(size_t)b * Nq + i] = Nq <= Nk ? ks[(size_t)b * Nk + Nk - Nq + i]
                                          : ks[(size_t)b * Nk + (long)i * Nk / Nq];
    }
    va->q_seg = qs, va->k_seg = ks, va->q_seg_sb = Nq, va->k_seg_sb = Nk;
  }
  /* the user's parameters: those of the signature no built-in provides */
  for (int a = 0; a < o->var.nmod_args; a++) {
    const char *arg = o->var.mod_arg[a], *eq = strchr(arg, '=');
    size_t nl = (size_t)(eq - arg);
    int at = -1;
    for (int i = KN_ATTN_NPARAMS; i < sig->n; i++)
      if (strlen(sig->name[i]) == nl && !strncmp(sig->name[i], arg, nl)) at = i;
    if (at < 0) {
      fprintf(stderr, "kiln: error: --mod-arg %s: the modifiers have no parameter %%%.*s\n", arg,
              (int)nl, arg);
      return -1;
    }
    kn_type t = sig->type[at];
    kn_attn_named_arg *na = &vv->named[va->nmods++];
    na->name = sig->name[at];
    const char *val = eq + 1;
    char *end = NULL;
    if (t.kind == KN_TY_PTR) {
      long n = 0;
      double lo = -1, hi = 1;
      if (strncmp(val, "rand:", 5) || (n = strtol(val + 5, &end, 10)) <= 0 ||
          (*end == ':' && (lo = strtod(end + 1, &end), *end != ':' ||
                           (hi = strtod(end + 1, &end), false))) || *end) {
        fprintf(stderr, "kiln: error: --mod-arg %s: %%%s is a tensor (%s): give rand:N or "
                "rand:N:LO:HI\n", arg, na->name, kn_scalar_name((kn_scalar)t.elem));
        return -1;
      }
      size_t es = kn_scalar_size((kn_scalar)t.elem);
      char *x = variant_buf(vv, (size_t)n * es);
      if (!x) goto oom;
      bool is_int = t.elem == KN_I32 || t.elem == KN_I64 || t.elem == KN_I1;
      for (long i = 0; i < n; i++) {
        double u = lo + (hi - lo) * (double)(rng_next(&s) >> 11) * 0x1p-53;
        kn_store_elem((kn_scalar)t.elem, x + i * es, is_int ? floor(u) : u);
      }
      na->value.p = x, na->bytes = (size_t)n * es;
      vv->kind[va->nmods - 1] = 'p';
    } else if (t.elem == KN_F32 || t.elem == KN_F16 || t.elem == KN_BF16) {
      na->value.f = strtod(val, &end);
      vv->kind[va->nmods - 1] = 'f';
    } else {
      na->value.i = strtoll(val, &end, 0);
      vv->kind[va->nmods - 1] = 'i';
    }
    if (end && *end) {
      fprintf(stderr, "kiln: error: --mod-arg %s: '%s' is not a value of type %s\n", arg, val,
              kn_scalar_name((kn_scalar)t.elem));
      return -1;
    }
  }
  va->mods = vv->named;
  return 0;
oom:
  fprintf(stderr, "kiln: error: out of host memory for the variant's tensors\n");
  return -1;
}

/* compares the kernel's output (and lse) with the float64 reference and prints the contract's
 * last line; EXIT_PASS or EXIT_FAIL */
static int check_and_report(const cli_options *o, kn_module *mods, const variant_values *vv,
                            const run_inputs *in) {
  const kn_attn_problem *p = &o->prob;
  kn_scalar dt = o->attn.dtype;
  size_t es = kn_scalar_size(dt), nq = in->nq, nl = in->nl;
  double *od = malloc(nq * 8), *lsed = malloc(nl * 8);
  if (!od || !lsed) {
    free(od), free(lsed);
    fprintf(stderr, "kiln: error: out of host memory for the reference\n");
    return EXIT_USAGE;
  }
  kn_diag d;
  if (kn_attn_reference_v(&o->attn, mods, p, &vv->va, in->qd, in->kd, in->vd, od, lsed, &d)) {
    fprintf(stderr, "kiln: error: the float64 reference failed: %s\n", d.message);
    free(od), free(lsed);
    return EXIT_USAGE;
  }
  double max_err = 0, max_ref = 0, lse_err = 0;
  for (size_t i = 0; i < nq; i++) {
    double got = kn_load_elem(dt, (const char *)in->out + i * es);
    double e = fabs(got - od[i]);
    if (!(e <= max_err)) max_err = e; /* NaN sticks */
    if (fabs(od[i]) > max_ref) max_ref = fabs(od[i]);
  }
  for (size_t i = 0; o->attn.has_lse && i < nl; i++) {
    double e = isinf(lsed[i]) && in->lse[i] == lsed[i] ? 0 : fabs(in->lse[i] - lsed[i]);
    if (!(e <= lse_err)) lse_err = e;
  }
  double tol = kn_attn_tolerance_of(&o->attn);
  double lse_tol = kn_attn_lse_tolerance(dt);
  bool pass = max_err <= tol && lse_err <= lse_tol;
  if (o->attn.has_lse) printf("lse: max_abs_err=%.3g tol=%.3g\n", lse_err, lse_tol);
  printf("max_abs_err=%.3g rel_err=%.3g tol=%.3g %s\n", max_err,
         max_ref > 0 ? max_err / max_ref : max_err, tol, pass ? "PASS" : "FAIL");
  free(od), free(lsed);
  return pass ? EXIT_PASS : EXIT_FAIL;
}

/* the direct path: interp (t NULL), an emulated target, or the host with an --ir file */
static int run_direct(cli_options *o, const kn_target *t) {
  bool emu = t && t->emulated;
  kn_module *m;
  double t0 = now_s(), t_compile = 0;
  kn_func *k = get_kernel(o, &m);
  if (!k) return EXIT_USAGE;
  double t_build = now_s() - t0;
  kn_kernel *compiled = NULL;
  if (t) {
    kn_diag d;
    double t1 = now_s();
    /* an --ir kernel is the user's: its accesses are checked as on the interpreter */
    kn_compile_options copts = {.check_bounds = (o->check_bounds || o->ir_file) && !emu};
    if (kn_compile(m, k->name, t, &copts, &compiled, &d)) {
      fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
      kn_module_free(m);
      return EXIT_USAGE;
    }
    t_compile = now_s() - t1;
  }
  size_t es = kn_scalar_size(o->attn.dtype);
  run_inputs in;
  if (inputs_make(o, &in)) {
    kn_kernel_free(compiled);
    kn_module_free(m);
    return EXIT_USAGE;
  }
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[3];
  variant_values vv = {0};
  kn_diag fd = {0};
  const size_t qs = kn_scalar_size(kn_attn_q_type(&o->attn)),
               ks = kn_scalar_size(kn_attn_kv_type(&o->attn));
  kn_region regions[5 + 24 + 2] = {{in.q, in.nq * qs}, {in.k, in.nk * ks}, {in.v, in.nk * ks},
                               {in.out, in.nq * es}, {in.lse, in.nl * sizeof(float)}};
  int nregions = 5;
  kn_module *ref_mods = o->var.ref_from_library ? NULL : m;
  int vrc = variant_make(o, &o->var.sig, &vv);
  /* fp8 inputs: the kernel reads the descales (among the variant's buffers) */
  o->prob.q_descale = vv.descale[0], o->prob.k_descale = vv.descale[1];
  o->prob.v_descale = vv.descale[2];
  if (vrc ||
      kn_attn_fill_args(&o->attn, &o->var.sig, &o->cfg, &o->prob, in.q, in.k, in.v, in.out, in.lse,
                        &vv.va, args, grid, &fd)) {
    if (fd.message[0]) fprintf(stderr, "kiln: error: %s\n", fd.message); /* a missing value */
    variant_free(&vv);
    inputs_free(&in);
    kn_kernel_free(compiled);
    kn_module_free(m);
    return EXIT_USAGE;
  }
  for (int i = 0; i < vv.nbuf; i++) regions[nregions++] = (kn_region){vv.buf[i], vv.bytes[i]};
  for (int w = 0; o->attn.layout == KN_ATTN_VARLEN && w < 2; w++)
    regions[nregions++] = (kn_region){o->cu[w], sizeof(int32_t) * (size_t)(o->prob.batch + 1)};
  if (o->attn.layout == KN_ATTN_PAGED) {
    regions[nregions++] = (kn_region){o->table, sizeof(int32_t) * (size_t)o->prob.batch *
                                                    (size_t)o->prob.max_pages};
    regions[nregions++] = (kn_region){o->cache_lens, sizeof(int32_t) * (size_t)o->prob.batch};
  }
  char device[96];
  if (!t) snprintf(device, sizeof device, "interpreter");
  else if (emu) snprintf(device, sizeof device, "emulator");
  else kn_host_cpu_name(device, sizeof device);
  print_header(o, "attn_fwd", t ? t->name : "interp", device);

  int rc = EXIT_PASS;
  double best = INFINITY;
  for (int r = 0; r < o->repeats; r++) {
    kn_diag d;
    double t1 = now_s();
    /* the emulator checks every global access against the caller's buffers, like the
     * interpreter; the host target runs the template unchecked at full speed unless
     * --check-bounds, an --ir kernel always checked; the interpreter within --max-steps */
    int err = emu ? kn_emu_run(compiled, args, grid, regions, nregions, NULL, &d)
              : compiled
                  ? kn_kernel_run_host_checked(compiled, args, grid,
                                               o->check_bounds || o->ir_file ? regions : NULL,
                                               nregions, &d)
                  : kn_interp_run_budget(k, 0, o->max_steps, args, grid, regions, nregions, NULL,
                                         &d);
    if (err) {
      fprintf(stderr, "kiln: error: the kernel failed to run:\n%s", d.rendered);
      rc = EXIT_USAGE;
      goto done;
    }
    double dt = now_s() - t1;
    if (dt < best) best = dt;
  }
  char had[96];
  snprintf(had, sizeof had, "build: %.3f ms  compile: %.1f ms", t_build * 1e3, t_compile * 1e3);
  print_timing(o, had, best * 1e3, "", 1, "");
  rc = check_and_report(o, ref_mods, &vv, &in);
done:
  variant_free(&vv);
  inputs_free(&in);
  kn_kernel_free(compiled);
  kn_module_free(m);
  return rc;
}

/* the public arguments of a run; the variant's tensors through `dev` (host pointer -> the
 * pointer the kernel reads: itself on the host, its device copy on CUDA) */
typedef struct ptr_map {
  const void *host[26];
  const void *dev[26];
  int n;
} ptr_map;

static const void *mapped(const ptr_map *m, const void *p) {
  for (int i = 0; m && i < m->n; i++)
    if (m->host[i] == p) return m->dev[i];
  return p;
}

static kiln_attn_args attn_args(const cli_options *o, const variant_values *vv, const ptr_map *pm,
                                kiln_mod_arg *margs, const void *q, const void *k, const void *v,
                                void *out, float *lse) {
  const kn_attn_problem *p = &o->prob;
  const kn_attn_vargs *va = &vv->va;
  const kn_attn_desc *d = &o->attn;
  kiln_attn_args a = {.q = q, .k = k, .v = v, .o = out, .lse = o->attn.has_lse ? lse : NULL,
                      .batch = p->batch, .heads = p->heads, .kv_heads = p->kv_heads,
                      .seqlen_q = p->seqlen_q, .seqlen_k = p->seqlen_k};
  if (d->window) a.window_left = va->window_left, a.window_right = va->window_right;
  if (d->softcap) a.softcap = va->softcap;
  if (d->alibi) a.alibi_slopes = mapped(pm, va->alibi_slopes), a.alibi_stride = va->alibi_sb;
  if (d->bias) {
    a.bias = mapped(pm, va->bias);
    a.bias_stride[0] = va->bias_sb, a.bias_stride[1] = va->bias_sh, a.bias_stride[2] = va->bias_sm;
  }
  if (d->document) {
    a.q_seg = mapped(pm, va->q_seg), a.k_seg = mapped(pm, va->k_seg);
    a.q_seg_stride = va->q_seg_sb, a.k_seg_stride = va->k_seg_sb;
  }
  if (d->prefix) a.prefix_len = va->prefix_len;
  a.q_descale = mapped(pm, vv->descale[0]), a.k_descale = mapped(pm, vv->descale[1]);
  a.v_descale = mapped(pm, vv->descale[2]);
  a.dropout_seed = p->dropout_seed, a.dropout_offset = p->dropout_offset;
  const int64_t nds = (int64_t)p->batch * p->kv_heads;  /* (B, HK) each, contiguous */
  a.q_descale_numel = a.q_descale ? nds : 0, a.k_descale_numel = a.k_descale ? nds : 0;
  a.v_descale_numel = a.v_descale ? nds : 0;
  if (d->layout == KN_ATTN_VARLEN) {
    a.cu_seqlens_q = mapped(pm, p->cu_seqlens_q), a.cu_seqlens_k = mapped(pm, p->cu_seqlens_k);
    a.total_q = p->total_q, a.total_k = p->total_k;
  }
  if (d->layout == KN_ATTN_PAGED) {
    a.block_table = mapped(pm, p->block_table), a.cache_seqlens = mapped(pm, p->cache_seqlens);
    a.page_size = p->page_size, a.num_pages = p->num_pages, a.max_pages = p->max_pages;
    a.block_table_numel = (int64_t)p->batch * p->max_pages;
  }
  for (int i = 0; i < va->nmods; i++) {
    const kn_attn_named_arg *na = &va->mods[i];
    kiln_mod_arg *m = &margs[i];
    *m = (kiln_mod_arg){.name = na->name};
    if (vv->kind[i] == 'p')
      m->kind = KILN_MOD_ARG_PTR, m->p = mapped(pm, na->value.p), m->bytes = na->bytes;
    else if (vv->kind[i] == 'f') m->kind = KILN_MOD_ARG_FLOAT, m->f = na->value.f;
    else m->kind = KILN_MOD_ARG_INT, m->i = na->value.i;
  }
  a.mod_args = margs, a.n_mod_args = va->nmods;
  return a;
}

/* kiln_forward on the host: host buffers, wall-clock time; *best_ms the best of --repeats */
static int forward_host(const cli_options *o, const variant_values *vv, kiln_kernel *k,
                        run_inputs *in, double *best_ms) {
  kiln_mod_arg margs[16];
  kiln_attn_args a = attn_args(o, vv, NULL, margs, in->q, in->k, in->v, in->out, in->lse);
  a.q_numel = a.o_numel = (int64_t)in->nq, a.k_numel = a.v_numel = (int64_t)in->nk;
  a.lse_numel = (int64_t)in->nl;
  *best_ms = INFINITY;
  for (int r = 0; r < o->repeats; r++) {
    double t1 = now_s();
    kiln_status s = kiln_forward(k, &a, NULL);
    if (s) return fail_api(s);
    double ms = (now_s() - t1) * 1e3;
    if (ms < *best_ms) *best_ms = ms;
  }
  return EXIT_PASS;
}

/* copies the variant's tensors to the device (dvar: room for vv->nbuf) and maps them in pm;
 * 0, or -1 with the driver's message in *e */
static int upload_variants(kn_cuda_device *dev, const variant_values *vv, kn_cuda_ptr *dvar,
                           ptr_map *pm, kn_diag *e) {
  for (int i = 0; i < vv->nbuf; i++) {
    if (kn_cuda_alloc(dev, vv->bytes[i] ? vv->bytes[i] : 1, &dvar[i], e) ||
        kn_cuda_copy_htod(dev, dvar[i], vv->buf[i], vv->bytes[i], e))
      return -1;
    pm->host[pm->n] = vv->buf[i], pm->dev[pm->n++] = (const void *)(uintptr_t)dvar[i];
  }
  return 0;
}

/* varlen: the prefix sums on the device (the kernels read them), in dv[0..1], mapped in pm */
static int upload_cu_seqlens(kn_cuda_device *dev, const cli_options *o, kn_cuda_ptr dv[2],
                             ptr_map *pm, kn_diag *e) {
  for (int w = 0; o->attn.layout == KN_ATTN_VARLEN && w < 2; w++) {
    size_t bytes = sizeof(int32_t) * (size_t)(o->prob.batch + 1);
    if (kn_cuda_alloc(dev, bytes, &dv[w], e) || kn_cuda_copy_htod(dev, dv[w], o->cu[w], bytes, e))
      return -1;
    pm->host[pm->n] = o->cu[w], pm->dev[pm->n++] = (const void *)(uintptr_t)dv[w];
  }
  return 0;
}

/* kiln_forward on a CUDA device: device buffers (the output and lse filled with NaN bytes first,
 * so an unwritten element fails), one checked launch, then --repeats launches timed with CUDA
 * events; driver failures are FAIL (1) */
static int forward_cuda(const cli_options *o, const variant_values *vv, kiln_kernel *k, int ordinal,
                        run_inputs *in, double *best_ms) {
  size_t es = kn_scalar_size(o->attn.dtype), nq = in->nq, nk = in->nk, nl = in->nl;
  size_t qs = kn_scalar_size(kn_attn_q_type(&o->attn)), ks = kn_scalar_size(kn_attn_kv_type(&o->attn));
  kn_cuda_device *dev = NULL;
  kn_cuda_event ev[2] = {NULL, NULL};
  kn_cuda_ptr dq = 0, dk = 0, dv = 0, dout = 0, dl = 0, dvar[26] = {0};
  ptr_map pm = {.n = 0};
  kiln_mod_arg margs[16];
  kn_diag e = {0};
  kiln_status s = KILN_OK;
  int rc = EXIT_FAIL;
  *best_ms = INFINITY;
  if (kn_cuda_device_open(ordinal, &dev, &e) || kn_cuda_alloc(dev, nq * qs, &dq, &e) ||
      kn_cuda_alloc(dev, nk * ks, &dk, &e) || kn_cuda_alloc(dev, nk * ks, &dv, &e) ||
      kn_cuda_alloc(dev, nq * es, &dout, &e) || kn_cuda_alloc(dev, nl * sizeof(float), &dl, &e) ||
      kn_cuda_copy_htod(dev, dq, in->q, nq * qs, &e) ||
      kn_cuda_copy_htod(dev, dk, in->k, nk * ks, &e) ||
      kn_cuda_copy_htod(dev, dv, in->v, nk * ks, &e) ||
      kn_cuda_memset8(dev, dout, 0xff, nq * es, &e) ||
      kn_cuda_memset8(dev, dl, 0xff, nl * sizeof(float), &e) ||
      kn_cuda_event_create(dev, &ev[0], &e) || kn_cuda_event_create(dev, &ev[1], &e))
    goto driver_error;
  /* the variant's tensors on the device */
  if (upload_variants(dev, vv, dvar, &pm, &e)) goto driver_error;
  if (upload_cu_seqlens(dev, o, dvar + 24, &pm, &e)) goto driver_error;
  /* paged: the block table and the cache lengths (the same two slots: one call shape) */
  for (int w = 0; o->attn.layout == KN_ATTN_PAGED && w < 2; w++) {
    const int32_t *h = w ? o->cache_lens : o->table;
    size_t bytes = sizeof(int32_t) * (size_t)o->prob.batch * (size_t)(w ? 1 : o->prob.max_pages);
    if (kn_cuda_alloc(dev, bytes ? bytes : 4, &dvar[24 + w], &e) ||
        kn_cuda_copy_htod(dev, dvar[24 + w], h, bytes, &e))
      goto driver_error;
    pm.host[pm.n] = h, pm.dev[pm.n++] = (const void *)(uintptr_t)dvar[24 + w];
  }
  kiln_attn_args a = attn_args(o, vv, &pm, margs, (void *)(uintptr_t)dq, (void *)(uintptr_t)dk,
                               (void *)(uintptr_t)dv, (void *)(uintptr_t)dout,
                               (float *)(uintptr_t)dl);
  a.q_numel = a.o_numel = (int64_t)nq, a.k_numel = a.v_numel = (int64_t)nk;
  a.lse_numel = (int64_t)nl;
  /* the first launch is the one checked (and warms the module up); then the timed ones */
  if ((s = kiln_forward(k, &a, NULL))) goto api_error;
  if (kn_cuda_device_sync(dev, &e) || kn_cuda_copy_dtoh(dev, in->out, dout, nq * es, &e) ||
      kn_cuda_copy_dtoh(dev, in->lse, dl, nl * sizeof(float), &e))
    goto driver_error;
  for (int r = 0; r < o->repeats; r++) {
    float ms;
    if (kn_cuda_event_record(dev, ev[0], NULL, &e)) goto driver_error;
    if ((s = kiln_forward(k, &a, NULL))) goto api_error;
    if (kn_cuda_event_record(dev, ev[1], NULL, &e) || kn_cuda_event_sync(dev, ev[1], &e) ||
        kn_cuda_event_elapsed(dev, ev[0], ev[1], &ms, &e))
      goto driver_error;
    if (ms < *best_ms) *best_ms = ms;
  }
  rc = EXIT_PASS;
  goto done;
api_error:
  rc = fail_api(s);
  goto done;
driver_error:
  fprintf(stderr, "kiln: %s", e.rendered); /* "error: ...\n", a JIT log whole */
done:
  if (dev) {
    kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dl};
    for (int i = 0; i < 5; i++)
      if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
    for (int i = 0; i < 26; i++)
      if (dvar[i]) kn_cuda_free(dev, dvar[i], NULL);
    for (int i = 0; i < 2; i++)
      if (ev[i]) kn_cuda_event_destroy(dev, ev[i]);
    kn_cuda_device_close(dev);
  }
  return rc;
}

/* A context of `kiln run` and `kiln tune` on target ("host", "sm_80", "sm_90a", "auto"): *ctx,
 * or the exit code.  The API's "auto" prefers an AMD GPU, which the command line has no buffers
 * for yet: its own auto stays an NVIDIA sm_80+ GPU, else the host. */
static int api_context(const cli_options *o, const char *target, const char *what,
                       kiln_context **ctx) {
  const char *device = target;
  if (!strcmp(target, "auto")) device = cuda_device_for("sm_80") ? "cuda" : "host";
  kiln_context_options co = {.cache_dir = o->cache_dir, .no_cache = o->no_cache,
                             .device = device, .log = cli_log, .tune_policy = o->tune};
  kiln_status s = kiln_context_create(&co, ctx);
  if (s == KILN_ERR_NO_DEVICE) {
    fprintf(stderr, "kiln: error: no %s device is present to %s on (%s); compile for it with "
            "`kiln compile --target %s`\n", target, what, kiln_last_error(), target);
    return EXIT_NODEV;
  }
  return s ? fail_api(s) : EXIT_PASS;
}

/* the API path: target is the device ("host", "sm_80", "sm_90a", "auto") */
static int run_api(cli_options *o, const char *target) {
  if (o->stages) {
    fprintf(stderr, "kiln: error: --stages is not a prepare option of the API (runs on host, "
            "sm_80, sm_90a and auto go through it); use --target interp or an emulated target\n");
    return EXIT_USAGE;
  }
  if (resolve_attn(o)) return EXIT_USAGE;
  kiln_context *ctx;
  int crc = api_context(o, target, "run", &ctx);
  if (crc) return crc;
  kiln_status s;
  const kn_attn_problem *p = &o->prob;
  bool blocks = o->block_m || o->block_n;
  kiln_prepare_options po = {.seqlen = p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k,
                             .block_m = blocks ? o->cfg.block_m : 0,
                             .block_n = blocks ? o->cfg.block_n : 0, .warps = o->warps,
                             .wgmma = o->wgmma};
  kiln_kernel *k;
  kiln_kernel_info info;
  run_inputs in = {0};
  variant_values vv = {0};
  int rc = EXIT_USAGE;
  if ((s = kiln_prepare(ctx, &o->desc, &po, &k)) || (s = kiln_kernel_get_info(k, &info))) {
    rc = fail_api(s);
    goto done;
  }
  o->cfg.block_m = info.block_m, o->cfg.block_n = info.block_n;
  o->cfg.warps = info.warps, o->cfg.stages = info.stages, o->cfg.wgmma = info.wgmma;
  if (inputs_make(o, &in)) goto done;
  if (variant_make(o, &o->var.sig, &vv)) goto done;
  print_header(o, "attn_fwd", kiln_context_target(ctx), kiln_context_device_name(ctx));
  int ordinal = kiln_context_device_ordinal(ctx);
  double best;
  rc = ordinal < 0 ? forward_host(o, &vv, k, &in, &best)
                   : forward_cuda(o, &vv, k, ordinal, &in, &best);
  if (rc == EXIT_PASS) {
    char had[96];
    snprintf(had, sizeof had, "prepare: %s %.1f ms (%s tiling)",
             info.source == KILN_SOURCE_CACHE ? "cache hit" : "compiled", info.prepare_ms,
             info.tuned ? "tuned" : blocks || o->warps ? "forced" : "default");
    print_timing(o, had, best, ordinal < 0 ? "" : ", CUDA events", 1, "");
    rc = check_and_report(o, NULL, &vv, &in);
  }
done:
  variant_free(&vv);
  inputs_free(&in);
  kiln_context_destroy(ctx);
  return rc;
}

/* ---- run --backward (docs/backward.md) ------------------------------------------------------- */

/* the backward's buffers: dO random, O and lse from the forward's float64 reference as a forward
 * kernel stores them (dtype, f32), dQ/dK/dV and delta written by the kernels */
typedef struct bwd_bufs {
  void *dout, *o, *dq, *dk, *dv;
  float *delta;
  float *dq_acc;  /* atomic dQ's workspace: head_dim floats per element of delta */
  double *doutd;
} bwd_bufs;

static void bwd_bufs_free(bwd_bufs *b) {
  free(b->dout), free(b->o), free(b->dq), free(b->dk), free(b->dv), free(b->delta), free(b->dq_acc),
      free(b->doutd);
  memset(b, 0, sizeof *b);
}

/* 0, or -1 after a message */
static int bwd_bufs_make(const cli_options *o, const variant_values *vv, run_inputs *in, bwd_bufs *b) {
  kn_scalar dt = o->attn.dtype;
  size_t es = kn_scalar_size(dt);
  memset(b, 0, sizeof *b);
  double *od = malloc(in->nq * 8 + 8), *lsed = malloc(in->nl * 8 + 8);
  b->dout = malloc(in->nq * es + 1), b->o = malloc(in->nq * es + 1);
  b->dq = malloc(in->nq * es + 1), b->dk = malloc(in->nk * es + 1), b->dv = malloc(in->nk * es + 1);
  b->delta = malloc(in->nl * 4 + 4), b->doutd = malloc(in->nq * 8 + 8);
  b->dq_acc = malloc(in->nq * 4 + 4);
  if (!od || !lsed || !b->dout || !b->o || !b->dq || !b->dk || !b->dv || !b->delta || !b->doutd ||
      !b->dq_acc) {
    free(od), free(lsed), bwd_bufs_free(b);
    fprintf(stderr, "kiln: error: out of host memory for this problem size\n");
    return -1;
  }
  unsigned long long s = o->seed ^ 0xd0d0ull;
  fill_random(dt, b->dout, b->doutd, in->nq, &s);
  kn_diag d;
  if (kn_attn_reference_v(&o->attn, NULL, &o->prob, &vv->va, in->qd, in->kd, in->vd, od, lsed, &d)) {
    fprintf(stderr, "kiln: error: the float64 forward failed: %s\n", d.message);
    free(od), free(lsed), bwd_bufs_free(b);
    return -1;
  }
  for (size_t i = 0; i < in->nq; i++) kn_store_elem(dt, (char *)b->o + i * es, od[i]);
  for (size_t i = 0; i < in->nl; i++) in->lse[i] = (float)lsed[i];
  memset(b->dq, 0xff, in->nq * es), memset(b->dk, 0xff, in->nk * es);
  memset(b->dv, 0xff, in->nk * es);  /* NaN bytes: an unwritten element fails */
  memset(b->dq_acc, 0xff, in->nq * 4);  /* and so does a sum the preprocess did not zero */
  free(od), free(lsed);
  return 0;
}

/* dQ, dK, dV against the float64 backward; the contract's PASS/FAIL line */
static int bwd_check(const cli_options *o, const variant_values *vv, const run_inputs *in,
                     const bwd_bufs *b) {
  kn_scalar dt = o->attn.dtype;
  size_t es = kn_scalar_size(dt), n[3] = {in->nq, in->nk, in->nk};
  double *ref[3] = {malloc(n[0] * 8 + 8), malloc(n[1] * 8 + 8), malloc(n[2] * 8 + 8)};
  int rc = EXIT_USAGE;
  kn_diag d;
  if (!ref[0] || !ref[1] || !ref[2]) {
    fprintf(stderr, "kiln: error: out of host memory for the reference\n");
    goto out;
  }
  if (kn_attn_bwd_reference(&o->attn, NULL, &o->prob, &vv->va, in->qd, in->kd, in->vd, b->doutd,
                            false, ref[0], ref[1], ref[2], &d)) {
    fprintf(stderr, "kiln: error: the float64 backward failed: %s\n", d.message);
    goto out;
  }
  const void *got[3] = {b->dq, b->dk, b->dv};
  const char *names[3] = {"dq", "dk", "dv"};
  double worst = 0, worst_ref = 0, tol = 0;
  bool pass = true;
  for (int t = 0; t < 3; t++) {
    double e = 0, big = 0;
    for (size_t i = 0; i < n[t]; i++) {
      double g = kn_load_elem(dt, (const char *)got[t] + i * es), x = fabs(g - ref[t][i]);
      if (!(x <= e)) e = x;  /* NaN sticks */
      if (fabs(ref[t][i]) > big) big = fabs(ref[t][i]);
    }
    /* the tolerance scales with the largest gradient (dK and dV are sums over the rows) */
    double tt = kn_attn_bwd_tolerance(dt) * (big > 1 ? big : 1);
    printf("%s: max_abs_err=%.3g max_ref=%.3g tol=%.3g\n", names[t], e, big, tt);
    pass &= e <= tt;
    if (!(e <= worst)) worst = e, worst_ref = big, tol = tt;
  }
  printf("max_abs_err=%.3g rel_err=%.3g tol=%.3g %s\n", worst,
         worst_ref > 0 ? worst / worst_ref : worst, tol, pass ? "PASS" : "FAIL");
  rc = pass ? EXIT_PASS : EXIT_FAIL;
out:
  free(ref[0]), free(ref[1]), free(ref[2]);
  return rc;
}

/* the backward on the interpreter or an emulated target: the three kernels run directly */
static int bwd_direct(const cli_options *o, const kn_target *t, const variant_values *vv,
                      run_inputs *in, bwd_bufs *b, double *best_ms) {
  kn_diag d;
  kn_module *m = kn_module_new("<attn_bwd>");
  kn_attn_sig sig;
  kn_kernel *ks[KN_BWD_NKERNELS] = {NULL};
  int rc = EXIT_USAGE;
  if (kn_attn_bwd_build(m, &o->attn, &o->cfg, &d) || kn_attn_bwd_signature(&o->attn, &sig, &d)) {
    fprintf(stderr, "kiln: error: %s\n", d.message);
    goto out;
  }
  for (int w = 0; t && w < KN_BWD_NKERNELS; w++)
    if (kn_compile(m, kn_attn_bwd_kernels[w], t, NULL, &ks[w], &d)) {
      fprintf(stderr, "kiln: error: compiling %s for %s failed:\n%s", kn_attn_bwd_kernels[w],
              t->name, d.rendered);
      goto out;
    }
  size_t es = kn_scalar_size(o->attn.dtype);
  kn_attn_bwd_bufs bb = {in->q,  in->k,     in->v, b->o,  b->dout, in->lse,
                         b->delta, b->dq, b->dk, b->dv, b->dq_acc};
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[KN_BWD_NKERNELS][3];
  if (kn_attn_bwd_fill_args(&o->attn, &sig, &o->cfg, &o->prob, &bb, &vv->va, args, grid, &d)) {
    fprintf(stderr, "kiln: error: %s\n", d.message);
    goto out;
  }
  kn_region regions[11 + 24] = {
      {in->q, in->nq * es}, {in->k, in->nk * es}, {in->v, in->nk * es}, {b->o, in->nq * es},
      {b->dout, in->nq * es}, {b->dq, in->nq * es}, {b->dk, in->nk * es}, {b->dv, in->nk * es},
      {in->lse, in->nl * 4}, {b->delta, in->nl * 4}, {b->dq_acc, in->nq * 4}};
  int nreg = 11;
  for (int i = 0; i < vv->nbuf; i++) regions[nreg++] = (kn_region){vv->buf[i], vv->bytes[i]};
  for (int w = 0; o->attn.layout == KN_ATTN_VARLEN && w < 2; w++)
    regions[nreg++] = (kn_region){(void *)o->cu[w], sizeof(int32_t) * (size_t)(o->prob.batch + 1)};
  *best_ms = INFINITY;
  for (int r = 0; r < o->repeats; r++) {
    double t1 = now_s();
    for (int w = 0; w < KN_BWD_NKERNELS; w++) {
      if (!grid[w][0] || !grid[w][1]) continue;
      int err = !t ? kn_interp_run_budget(kn_module_find(m, kn_attn_bwd_kernels[w]), 0,
                                          o->max_steps, args, grid[w], regions, nreg, NULL, &d)
                   : kn_emu_run(ks[w], args, grid[w], regions, nreg, NULL, &d);
      if (err) {
        fprintf(stderr, "kiln: error: %s failed to run:\n%s", kn_attn_bwd_kernels[w], d.rendered);
        goto out;
      }
    }
    double ms = (now_s() - t1) * 1e3;
    if (ms < *best_ms) *best_ms = ms;
  }
  rc = EXIT_PASS;
out:
  for (int w = 0; w < KN_BWD_NKERNELS; w++) kn_kernel_free(ks[w]);
  kn_module_free(m);
  return rc;
}

/* kiln_backward's arguments over the buffers (host or device pointers), in the order
 * q, k, v, o, dout, dq, dk, dv, lse, delta, dq_acc */
enum { BWD_NBUF = 11 };
static kiln_backward_args bwd_args(const cli_options *o, const variant_values *vv, const ptr_map *pm,
                                   kiln_mod_arg *margs, void *const p[BWD_NBUF], const run_inputs *in) {
  kiln_backward_args a = {.fwd = attn_args(o, vv, pm, margs, p[0], p[1], p[2], p[3], p[8]),
                          .dout = p[4], .dq = p[5], .dk = p[6], .dv = p[7], .delta = p[9],
                          .dq_accum = p[10], .dq_accum_numel = (int64_t)in->nq};
  a.fwd.lse = p[8];
  a.fwd.q_numel = a.fwd.o_numel = (int64_t)in->nq, a.fwd.k_numel = a.fwd.v_numel = (int64_t)in->nk;
  a.fwd.lse_numel = (int64_t)in->nl;
  a.dout_numel = a.dq_numel = (int64_t)in->nq, a.dk_numel = a.dv_numel = (int64_t)in->nk;
  a.delta_numel = (int64_t)in->nl;
  return a;
}

/* kiln_backward on the host, or on a CUDA device (buffers copied there and back; timed with
 * CUDA events after one checked launch) */
static int bwd_api(const cli_options *o, const variant_values *vv, kiln_kernel *k, int ordinal,
                   run_inputs *in, bwd_bufs *b, double *best_ms) {
  size_t es = kn_scalar_size(o->attn.dtype);
  kiln_mod_arg margs[16];
  *best_ms = INFINITY;
  void *host[BWD_NBUF] = {in->q,  in->k,  in->v,  b->o,    b->dout,  b->dq,
                          b->dk, b->dv, in->lse, b->delta, b->dq_acc};
  if (ordinal < 0) {
    kiln_backward_args a = bwd_args(o, vv, NULL, margs, host, in);
    for (int r = 0; r < o->repeats; r++) {
      double t1 = now_s();
      kiln_status s = kiln_backward(k, &a, NULL);
      if (s) return fail_api(s);
      double ms = (now_s() - t1) * 1e3;
      if (ms < *best_ms) *best_ms = ms;
    }
    return EXIT_PASS;
  }
  const size_t bytes[BWD_NBUF] = {in->nq * es, in->nk * es, in->nk * es, in->nq * es,
                                  in->nq * es, in->nq * es, in->nk * es, in->nk * es,
                                  in->nl * 4,  in->nl * 4,  in->nq * 4};
  kn_cuda_device *dev = NULL;
  kn_cuda_event ev[2] = {NULL, NULL};
  kn_cuda_ptr dp[BWD_NBUF] = {0}, dvar[26] = {0};
  void *p[BWD_NBUF];
  ptr_map pm = {.n = 0};
  kn_diag e = {0};
  kiln_status s = KILN_OK;
  int rc = EXIT_FAIL;
  if (kn_cuda_device_open(ordinal, &dev, &e) || kn_cuda_event_create(dev, &ev[0], &e) ||
      kn_cuda_event_create(dev, &ev[1], &e))
    goto driver_error;
  for (int i = 0; i < BWD_NBUF; i++) {
    if (kn_cuda_alloc(dev, bytes[i] ? bytes[i] : 1, &dp[i], &e)) goto driver_error;
    if ((i >= 5 && i <= 7) || i == 10 ? kn_cuda_memset8(dev, dp[i], 0xff, bytes[i], &e)
                         : kn_cuda_copy_htod(dev, dp[i], host[i], bytes[i], &e))
      goto driver_error;
    p[i] = (void *)(uintptr_t)dp[i];
  }
  if (upload_variants(dev, vv, dvar, &pm, &e) || upload_cu_seqlens(dev, o, dvar + 24, &pm, &e))
    goto driver_error;
  kiln_backward_args a = bwd_args(o, vv, &pm, margs, p, in);
  if ((s = kiln_backward(k, &a, NULL))) goto api_error;
  if (kn_cuda_device_sync(dev, &e)) goto driver_error;
  for (int i = 5; i <= 7; i++)
    if (kn_cuda_copy_dtoh(dev, host[i], dp[i], bytes[i], &e)) goto driver_error;
  for (int r = 0; r < o->repeats; r++) {
    float ms;
    if (kn_cuda_event_record(dev, ev[0], NULL, &e)) goto driver_error;
    if ((s = kiln_backward(k, &a, NULL))) goto api_error;
    if (kn_cuda_event_record(dev, ev[1], NULL, &e) || kn_cuda_event_sync(dev, ev[1], &e) ||
        kn_cuda_event_elapsed(dev, ev[0], ev[1], &ms, &e))
      goto driver_error;
    if (ms < *best_ms) *best_ms = ms;
  }
  rc = EXIT_PASS;
  goto done;
api_error:
  rc = fail_api(s);
  goto done;
driver_error:
  fprintf(stderr, "kiln: %s", e.rendered);
done:
  if (dev) {
    for (int i = 0; i < BWD_NBUF; i++)
      if (dp[i]) kn_cuda_free(dev, dp[i], NULL);
    for (int i = 0; i < 26; i++)
      if (dvar[i]) kn_cuda_free(dev, dvar[i], NULL);
    for (int i = 0; i < 2; i++)
      if (ev[i]) kn_cuda_event_destroy(dev, ev[i]);
    kn_cuda_device_close(dev);
  }
  return rc;
}

/* kiln run --backward: random q, k, v, dO; O and lse from the float64 forward; the three
 * backward kernels; dQ, dK, dV against the float64 backward */
static int run_backward(cli_options *o) {
  const char *tg = o->target;
  const kn_target *named = kn_target_get(tg);
  bool api = !strcmp(tg, "host") || !strcmp(tg, "auto") || (named && named->arch->isa == KN_ISA_NVPTX);
  if (o->ir_file || o->check_bounds || o->stages ||
      o->attn.layout == KN_ATTN_PAGED || o->desc.layout == KILN_LAYOUT_PAGED || o->desc.q_dtype ||
      o->desc.kv_dtype) {
    fprintf(stderr, "kiln: error: --backward runs the backward template: not with --ir, "
            "--check-bounds, --stages, --paged, --q-dtype or --kv-dtype\n");
    return EXIT_USAGE;
  }
  if (!api && (o->cache_dir || o->no_cache || o->tune)) {
    fprintf(stderr, "kiln: error: --cache-dir, --no-cache and --tune apply to runs through the "
            "API (--target host, sm_80, sm_90a or auto)\n");
    return EXIT_USAGE;
  }
  const kn_target *t = NULL;
  if (!api && strcmp(tg, "interp")) {
    if (!(t = find_target(tg))) return EXIT_NODEV;
    if (!t->emulated) {
      fprintf(stderr, "kiln: error: no %s device is present to run on (run its lowering under "
              "emulation with --target %s-emu)\n", t->name, t->name);
      return EXIT_NODEV;
    }
  }
  if (resolve_attn(o)) return EXIT_USAGE;
  /* the tiling asked for, by kiln_prepare_backward's rule (--mma wgmma: the backward's wgmma
   * tiling, or the blocks given with block_n / 16 warps) */
  const kn_arch *barch = named ? named->arch : NULL;
  o->cfg = kn_attn_bwd_config_for(barch, &o->attn, o->wgmma, o->mma_sync, o->backward_dq,
                                  o->block_m, o->block_n, o->warps);
  kn_diag d;
  if (kn_attn_bwd_check_on(named ? named->arch : NULL, &o->attn, &o->cfg, &d)) {
    fprintf(stderr, "kiln: error: %s\n", d.message);
    return EXIT_USAGE;
  }
  kiln_context *ctx = NULL;
  kiln_kernel *k = NULL;
  kiln_kernel_info info = {0};
  int ordinal = -1;
  char device[128] = "interpreter";
  if (t) snprintf(device, sizeof device, "emulator");
  if (api) {
    int crc = api_context(o, tg, "run", &ctx);
    if (crc) return crc;
    kiln_status s;
    bool blocks = o->block_m || o->block_n || o->mma_sync;  /* --mma sync: its tiling, forced */
    kiln_prepare_options po = {.block_m = blocks ? o->cfg.block_m : 0,
                               .block_n = blocks ? o->cfg.block_n : 0, .warps = o->warps,
                               .wgmma = o->wgmma, .backward_dq = o->backward_dq};
    if ((s = kiln_prepare_backward(ctx, &o->desc, &po, &k)) || (s = kiln_kernel_get_info(k, &info))) {
      int rc = fail_api(s);
      kiln_context_destroy(ctx);
      return rc;
    }
    ordinal = kiln_context_device_ordinal(ctx);
    tg = kiln_context_target(ctx);
    snprintf(device, sizeof device, "%s", kiln_context_device_name(ctx));
  }
  run_inputs in = {0};
  variant_values vv = {0};
  bwd_bufs b = {0};
  int rc = EXIT_USAGE;
  double best = INFINITY;
  if (inputs_make(o, &in) || variant_make(o, &o->var.sig, &vv) || bwd_bufs_make(o, &vv, &in, &b))
    goto done;
  print_header(o, "attn_bwd", tg, device);
  rc = api ? bwd_api(o, &vv, k, ordinal, &in, &b, &best) : bwd_direct(o, t, &vv, &in, &b, &best);
  if (rc == EXIT_PASS) {
    /* FLOPs counted as 2.5x the forward's (the convention of FlashAttention's benchmarks) */
    print_timing(o, api ? (info.source == KILN_SOURCE_CACHE ? "prepare: cache hit"
                                                            : "prepare: compiled")
                        : "direct",
                 best, ordinal >= 0 ? ", CUDA events" : "", 2.5, " (2.5x forward FLOPs)");
    rc = bwd_check(o, &vv, &in, &b);
  }
done:
  bwd_bufs_free(&b);
  variant_free(&vv);
  inputs_free(&in);
  if (ctx) kiln_context_destroy(ctx);
  return rc;
}

static int cmd_run(cli_options *o) {
  const kn_attn_problem *p = &o->prob;
  if (p->heads % p->kv_heads) {
    fprintf(stderr, "kiln: error: --heads %d is not a multiple of --kv-heads %d\n", p->heads,
            p->kv_heads);
    return EXIT_USAGE;
  }
  if (o->decode) {
    fprintf(stderr, "kiln: error: --decode is for dump and compile: run sends calls of 1..16 "
            "query rows to the decode kernel itself\n");
    return EXIT_USAGE;
  }
  if (o->backward) return run_backward(o);
  const char *tg = o->target;
  const kn_target *named = kn_target_get(tg);
  bool cuda = named && named->arch->isa == KN_ISA_NVPTX;
  if (o->given.max_steps && strcmp(tg, "interp")) {
    fprintf(stderr, "kiln: error: --max-steps is the interpreter's step budget (--target interp)\n");
    return EXIT_USAGE;
  }
  if (o->check_bounds && strcmp(tg, "host") && strcmp(tg, "interp") && !(named && named->emulated)) {
    fprintf(stderr, "kiln: error: --check-bounds is for --target host (interp and the -emu "
            "targets always check)\n");
    return EXIT_USAGE;
  }
  /* checked host code is not what the API caches: --check-bounds runs on the direct path */
  if (!o->ir_file && !o->check_bounds && (cuda || !strcmp(tg, "host") || !strcmp(tg, "auto")))
    return run_api(o, tg);
  /* not served by the API: the direct path */
  if (o->cache_dir || o->no_cache || o->tune) {
    fprintf(stderr, "kiln: error: --cache-dir, --no-cache and --tune apply to runs through the "
            "API (--target host, sm_80, sm_90a or auto, without --ir or --check-bounds)\n");
    return EXIT_USAGE;
  }
  if (cuda) {
    fprintf(stderr, "kiln: error: --ir runs on interp, host and the emulated targets (on %s, "
            "kiln run goes through the API, which runs the template)\n", tg);
    return EXIT_USAGE;
  }
  if (!strcmp(tg, "interp")) return run_direct(o, NULL);
  const kn_target *t = find_target(tg);
  if (!t) return EXIT_NODEV;
  if (t->arch->isa != KN_ISA_HOST && !t->emulated) {
    fprintf(stderr,
            "kiln: error: no %s device is present to run on (compile for it with `kiln compile "
            "--target %s`, or run its lowering under emulation with --target %s-emu)\n",
            t->name, t->name, t->name);
    return EXIT_NODEV;
  }
  return run_direct(o, t);
}

/* writes n bytes to path, or to stdout when path is NULL or "-" */
static int write_out(const char *path, const void *data, size_t n) {
  FILE *f = !path || !strcmp(path, "-") ? stdout : fopen(path, "wb");
  if (!f) {
    fprintf(stderr, "kiln: error: cannot write '%s': %s\n", path, strerror(errno));
    return -1;
  }
  bool ok = fwrite(data, 1, n, f) == n;
  if (f != stdout) ok = (fclose(f) == 0) && ok;
  else ok = (fflush(f) == 0) && ok;
  if (!ok) fprintf(stderr, "kiln: error: writing '%s' failed: %s\n", path ? path : "-",
                   strerror(errno));
  return ok ? 0 : -1;
}

/* --loop: each kernel's KV loop (loop.c) to f; 0, or -1 after a message */
static int print_loops(const kn_codeobj *co, const uint8_t *data, FILE *f) {
  if (!co->target) {
    fprintf(stderr, "kiln: error: --loop: target %s is not one kiln describes\n", co->target_id);
    return -1;
  }
  for (int i = 0; i < co->nkernels; i++) {
    const kn_codeobj_kernel *kn = &co->kernels[i];
    if (!kn->code_size) continue;
    kn_amdgpu_loop loop;
    kn_diag d;
    if (kn_amdgpu_find_loop(co->target->name, data + kn->code_offset, (size_t)kn->code_size,
                            &loop, &d)) {
      fprintf(stderr, "kiln: error: kernel '%s': %s\n", kn->name, d.message);
      return -1;
    }
    kn_amdgpu_loop_mca(co->target->name, &loop);
    char buf[4096];
    kn_amdgpu_loop_format(kn->name, co->target->name, &loop, buf, sizeof buf);
    fputs(buf, f);
    kn_amdgpu_loop_free(&loop);
  }
  return 0;
}

/* one code object's stats (and loops) on stdout; EXIT_PASS or EXIT_USAGE after a message */
static int inspect_one(const char *file, const char *what /* NULL: the file */, const void *data, size_t n, bool loop) {
  kn_codeobj co;
  kn_diag d;
  if (kn_codeobj_parse(data, n, &co, &d)) {
    fprintf(stderr, "kiln: error: %s: %s%snot a code object kiln can read: %s\n", file,
            what ? what : "", what ? " is " : "", d.message);
    return EXIT_USAGE;
  }
  char buf[16384];
  kn_codeobj_format_stats(&co, buf, sizeof buf);
  fputs(buf, stdout);
  int rc = loop && print_loops(&co, data, stdout) ? EXIT_USAGE : EXIT_PASS;
  kn_codeobj_free(&co);
  return rc;
}

/* kiln inspect [--loop] FILE: the resources of any AMDGPU code object (kiln's or another
 * compiler's) */
static int cmd_inspect(int argc, char **argv) {
  bool loop = argc >= 3 && !strcmp(argv[2], "--loop");
  if (argc != 3 + loop) {
    fprintf(stderr, "usage: kiln inspect [--loop] FILE.hsaco|FILE.hipfb\n");
    return EXIT_USAGE;
  }
  const char *file = argv[2 + loop];
  size_t n;
  char *data = read_file(file, &n);
  if (!data) return EXIT_USAGE;
  kn_diag d;
  int rc = EXIT_PASS;
  if (kn_bundle_is(data, n)) {
    /* a clang offload bundle (kiln aot's .hipfb): each code object in turn */
    kn_bundle_part parts[64];
    size_t idl[64];
    int count;
    if (kn_bundle_entries(data, n, parts, idl, 64, &count, &d) != KN_OK) {
      fprintf(stderr, "kiln: error: %s: %s\n", file, d.message);
      rc = EXIT_USAGE;
    }
    for (int i = 0; rc == EXIT_PASS && i < count; i++) {
      printf("bundle entry %.*s: %zu bytes\n", (int)idl[i], parts[i].id, parts[i].size);
      if (!parts[i].size) continue;
      char what[160];
      snprintf(what, sizeof what, "entry %.*s", (int)idl[i], parts[i].id);
      rc = inspect_one(file, what, parts[i].data, parts[i].size, loop);
    }
  } else {
    rc = inspect_one(file, NULL, data, n, loop);
  }
  free(data);
  return rc;
}

/* the --emit kinds of a target: the artefact's own first (the default), then the text stages */
static const char *emit_kinds(const kn_target *t) {
  switch (t->artifact) {
  case KN_ARTIFACT_CODE_OBJECT: return "hsaco, asm, llvm, layout";
  case KN_ARTIFACT_PTX: return "ptx, cubin, asm, llvm, layout";
  case KN_ARTIFACT_HOST_OBJECT: return "asm, obj, llvm";
  }
  return "";
}

/* resources of the artefact: the code-object inspector (AMDGPU), ptxas (NVIDIA), the tile
 * storage (host); to f.  0, or an exit code after a message */
static int print_stats(const kn_kernel *k, const cli_options *o, FILE *f) {
  const kn_artifact *a = kn_kernel_artifact(k);
  const kn_target *t = kn_kernel_target(k);
  const kn_compile_times *tm = kn_kernel_times(k);
  int rc = EXIT_PASS;
  kn_diag d;
  if (o->loop && a->kind != KN_ARTIFACT_CODE_OBJECT) {
    fprintf(stderr, "kiln: error: --loop reads AMDGPU code objects; %s makes none\n", t->name);
    return EXIT_USAGE;
  }
  if (a->kind == KN_ARTIFACT_CODE_OBJECT) {
    kn_codeobj co;
    char buf[8192];
    if (kn_codeobj_parse(a->data, a->size, &co, &d)) {
      fprintf(stderr, "kiln: error: reading the code object: %s\n", d.message);
      return EXIT_USAGE;
    }
    kn_codeobj_format_stats(&co, buf, sizeof buf);
    fputs(buf, f);
    rc = o->loop && print_loops(&co, a->data, f) ? EXIT_USAGE : rc;
    kn_codeobj_free(&co);
    if (rc) return rc;
  } else if (a->kind == KN_ARTIFACT_PTX) {
    kn_ptxas_options po = {.arch = t->name, .opt_level = 3};
    kn_ptxas_result r;
    kn_diag why;
    if (kn_ptxas_run(a->data, a->size, &po, &r, &why) != KN_OK) {
      fprintf(stderr, "kiln: ptxas: %s", why.rendered);  /* the PTX is still written */
    } else {
      const kn_ptxas_kernel *pk = kn_ptxas_find_kernel(&r, kn_kernel_name(k));
      if (pk)
        fprintf(f, "%s %s: %d registers, spill stores %d B, spill loads %d B, stack frame %d B, "
                   "dynamic shared %lld B, %d threads per block (%s)\n", kn_kernel_name(k),
                t->name, pk->registers, pk->spill_stores, pk->spill_loads, pk->stack_frame,
                (long long)a->shared_bytes, a->threads, r.ptxas);
      kn_ptxas_result_free(&r);
    }
  } else {
    fprintf(f, "%s host: object %zu B, tile storage %llu B\n", kn_kernel_name(k), a->size,
            (unsigned long long)a->tile_bytes);
  }
  (void)o;
  fprintf(f, "compile: front %.1f ms, layout %.1f ms, lower %.1f ms, optimise %.1f ms, codegen "
          "%.1f ms, link %.1f ms", tm->front, tm->layout, tm->lower, tm->optimize, tm->codegen,
          tm->link);
  if (a->kind != KN_ARTIFACT_HOST_OBJECT) fprintf(f, "; shared memory plan %lld bytes",
                                                  (long long)a->shared_bytes);
  fputc('\n', f);
  return rc;
}

/* kiln compile: ahead-of-time output for a target, through the one pipeline: the artefact
 * (code object, PTX, cubin from it by ptxas, host object) or a text stage of the same compile */
static int cmd_compile(cli_options *o) {
  if (!strcmp(o->target, "auto") || !strcmp(o->target, "interp")) {
    fprintf(stderr, "kiln: error: compile needs --target (run `kiln targets` for the list)\n");
    return EXIT_USAGE;
  }
  const kn_target *t = find_target(o->target);
  if (!t) return EXIT_NODEV;
  if (t->emulated) {
    fprintf(stderr, "kiln: error: %s runs under `kiln run`; compile for %s instead\n", t->name,
            t->arch->name);
    return EXIT_USAGE;
  }
  const char *emit = o->emit ? o->emit
                     : t->artifact == KN_ARTIFACT_CODE_OBJECT ? "hsaco"
                     : t->artifact == KN_ARTIFACT_PTX ? "ptx" : "asm";
  int stage = 0;
  bool artefact = false, cubin = false;
  if (!strcmp(emit, "asm")) stage = KN_STAGE_ASM;
  else if (!strcmp(emit, "llvm")) stage = KN_STAGE_LLVM;
  else if (!strcmp(emit, "layout") && t->arch->isa != KN_ISA_HOST) stage = KN_STAGE_LAYOUT;
  else if (!strcmp(emit, "hsaco") && t->artifact == KN_ARTIFACT_CODE_OBJECT) artefact = true;
  else if (!strcmp(emit, "ptx") && t->artifact == KN_ARTIFACT_PTX) artefact = true;
  else if (!strcmp(emit, "obj") && t->artifact == KN_ARTIFACT_HOST_OBJECT) artefact = true;
  else if (!strcmp(emit, "cubin") && t->artifact == KN_ARTIFACT_PTX) cubin = true;
  else {
    fprintf(stderr, "kiln: error: --emit %s is not available for target %s (%s)\n", emit,
            t->name, emit_kinds(t));
    return EXIT_USAGE;
  }
  kn_module *m;
  kn_func *k = get_kernel(o, &m);
  if (!k) return EXIT_USAGE;
  bool to_stdout = !o->output || !strcmp(o->output, "-");
  FILE *text = NULL;
  if (stage) {
    text = to_stdout ? stdout : fopen(o->output, "w");
    if (!text) {
      fprintf(stderr, "kiln: error: cannot write '%s': %s\n", o->output, strerror(errno));
      kn_module_free(m);
      return EXIT_USAGE;
    }
  }
  kn_compile_options co = {.dump_stages = (unsigned)stage, .dump_file = text, .no_load = true};
  kn_kernel *kk = NULL;
  kn_diag d;
  int rc = EXIT_PASS;
  if (kn_compile(m, k->name, t, &co, &kk, &d)) {
    fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
    rc = EXIT_USAGE;
  } else {
    const kn_artifact *a = kn_kernel_artifact(kk);
    if (artefact && write_out(o->output, a->data, a->size)) rc = EXIT_USAGE;
    if (cubin) {
      kn_ptxas_options po = {.arch = t->name, .opt_level = 3, .want_cubin = true};
      kn_ptxas_result r;
      kn_diag why;
      if (kn_ptxas_run(a->data, a->size, &po, &r, &why) != KN_OK) {
        fprintf(stderr, "kiln: ptxas: %s", why.rendered);
        rc = EXIT_NODEV;
      } else {
        if (write_out(o->output, r.cubin, r.cubin_size)) rc = EXIT_USAGE;
        kn_ptxas_result_free(&r);
      }
    }
    /* the stats go to stderr when the output itself went to stdout */
    if (rc == EXIT_PASS && (o->stats || o->loop)) rc = print_stats(kk, o, to_stdout ? stderr : stdout);
  }
  if (text && text != stdout && fclose(text)) rc = EXIT_USAGE;
  kn_kernel_free(kk);
  kn_module_free(m);
  return rc;
}

/* ---- tune and cache (the JIT service, include/kiln.h) ----------------------------------- */

static const char *state_name(kiln_candidate_state s) {
  switch (s) {
  case KILN_CANDIDATE_TIMED: return "timed";
  case KILN_CANDIDATE_INVALID: return "invalid";
  case KILN_CANDIDATE_PRUNED: return "pruned";
  case KILN_CANDIDATE_FAILED: return "failed";
  case KILN_CANDIDATE_WRONG: return "WRONG";
  }
  return "?";
}

static int cmd_tune(cli_options *o) {
  /* the API's devices of `kiln run`: the host or an NVIDIA GPU (candidates timed with CUDA
   * events on it) */
  const char *target = o->target;
  const kn_target *named = kn_target_get(target);
  if (strcmp(target, "host") && strcmp(target, "auto") &&
      !(named && named->arch->isa == KN_ISA_NVPTX && !named->emulated)) {
    fprintf(stderr, "kiln: error: target '%s': kiln tune runs on host, sm_80, sm_90a or auto\n",
            target);
    return EXIT_NODEV;
  }
  if (o->ir_file) {
    fprintf(stderr, "kiln: error: kiln tune tunes the attention template (no --ir)\n");
    return EXIT_USAGE;
  }
  if (resolve_attn(o)) return EXIT_USAGE;
  kiln_context *ctx;
  int crc = api_context(o, target, "tune", &ctx);
  if (crc) return crc;
  kiln_status s;
  int seqlen = o->prob.seqlen_q > o->prob.seqlen_k ? o->prob.seqlen_q : o->prob.seqlen_k;
  kiln_prepare_options po = {.seqlen = seqlen, .tune_space = o->space,
                             .tune_batch = o->prob.batch, .tune_heads = o->prob.heads,
                             .tune_repeats = o->repeats > 1 ? o->repeats : 0};
  char dk[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(&o->attn, dk, sizeof dk);
  printf("kiln tune: target=%s device=%s kernel=attn_fwd [%s] seqlen=%d (bucket %d) cache=%s\n",
         kiln_context_target(ctx), kiln_context_device_name(ctx), dk, seqlen,
         kn_tune_seq_bucket(seqlen), kiln_context_cache_dir(ctx));
  fflush(stdout);
  kiln_tune_result r;
  s = kiln_tune(ctx, &o->desc, &po, &r);
  if (r.candidates) {
    printf("space: %s\nproblem: batch %d x heads %d x %d^2\n", r.space, r.batch, r.heads,
           r.seqlen);
    printf("%7s %7s %5s %6s %12s %10s %11s %11s  %s\n", "block_m", "block_n", "warps", "stages",
           "tile_bytes", "compile_ms", "median_us", "min_us", "state");
    for (int i = 0; i < r.ncandidates; i++) {
      const kiln_tune_candidate *c = &r.candidates[i];
      printf("%7d %7d %5d %6d %12llu %10.1f ", c->block_m, c->block_n, c->warps, c->stages,
             (unsigned long long)c->tile_bytes, c->compile_ms);
      /* (sm_90a's wgmma tilings are the same shapes as its mma.sync ones: marked) */
      const char *mma = strncmp(c->matrix_instr, "wgmma.", 6) ? "" : " wgmma";
      if (c->state == KILN_CANDIDATE_TIMED) printf("%11.1f %11.1f  timed%s%s\n", c->median_us,
                                                  c->min_us, mma, i == r.best ? " *best*" : "");
      else printf("%11s %11s  %s%s: %s\n", "-", "-", state_name(c->state), mma, c->note);
    }
  }
  if (s) {
    fprintf(stderr, "kiln: error: %s\n", kiln_last_error());
  } else {
    const kiln_tune_candidate *b = &r.candidates[r.best];
    printf("best: block_m=%d block_n=%d warps=%d stages=%d%s median_us=%.1f (%s)\n", b->block_m,
           b->block_n, b->warps, b->stages,
           strncmp(b->matrix_instr, "wgmma.", 6) ? "" : " mma=wgmma", b->median_us,
           r.recorded ? "recorded in the tuning database" : "not recorded");
    printf("tuning time: %.2f s\n", r.seconds);
  }
  kiln_tune_result_free(&r);
  kiln_context_destroy(ctx);
  return exit_of(s);
}

/* kiln cache ls: the entries and the tuning records (kiln_cache_list) */
static int cache_ls(kiln_context *ctx) {
  kiln_cache_listing l;
  kiln_status s = kiln_cache_list(ctx, &l);
  if (s) return fail_api(s);
  printf("cache %s (bound %llu bytes)\n", kiln_context_cache_dir(ctx),
         (unsigned long long)l.max_bytes);
  uint64_t total = 0;
  for (size_t i = 0; i < l.nentries; i++) {
    char when[32];
    time_t t = (time_t)l.entries[i].last_used;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
    printf("  %s  %10llu bytes  last used %s\n", l.entries[i].key,
           (unsigned long long)l.entries[i].bytes, when);
    total += l.entries[i].bytes;
  }
  printf("%zu entries, %llu bytes\n", l.nentries, (unsigned long long)total);
  if (l.tuning_db[0]) printf("tuning records (%s):\n", l.tuning_db);
  for (size_t i = 0; i < l.nrecords; i++) {
    const kiln_tuning_record *t = &l.records[i];
    printf("  %s %s %s D%d bucket %d %s kiln %s: block %dx%d warps %d stages %d, %.1f us\n",
           t->template_name, t->variant, t->dtype, t->head_dim, t->seq_bucket, t->arch,
           t->kiln_version, t->block_m, t->block_n, t->warps, t->stages, t->time_us);
  }
  kiln_cache_listing_free(&l);
  return EXIT_PASS;
}

/* kiln cache ls|verify|clear, through the public API on a host context of the directory */
static int cmd_cache(int argc, char **argv) {
  const char *sub, *dir;
  if (cli_parse_cache(argc, argv, &sub, &dir, stderr)) return EXIT_USAGE;
  /* looking at a cache creates nothing: a directory that is not there holds nothing */
  char resolved[4096];
  kn_diag dd;
  if (!dir && kn_cache_default_dir(resolved, sizeof resolved, &dd) == KN_OK) dir = resolved;
  struct stat st;
  if (dir && stat(dir, &st) != 0 && errno == ENOENT) {
    printf("cache %s: no such directory (nothing cached; not created)\n", dir);
    return EXIT_PASS;
  }
  kiln_context_options co = {.cache_dir = dir, .device = "host", .log = cli_log,
                             .tune_policy = KILN_TUNE_NONE};
  kiln_context *ctx;
  kiln_status s = kiln_context_create(&co, &ctx);
  if (s) return fail_api(s);
  int rc = EXIT_PASS;
  kiln_cache_report r;
  const char *d = kiln_context_cache_dir(ctx);
  if (!strcmp(sub, "ls")) {
    rc = cache_ls(ctx);
  } else if (!strcmp(sub, "verify")) {
    if ((s = kiln_cache_verify(ctx, &r))) {
      rc = fail_api(s);
    } else {
      printf("cache %s: %zu entries, %zu valid, %zu corrupt removed, %zu stale temp files "
             "removed, %llu bytes\n", d, r.entries, r.valid, r.removed_corrupt, r.removed_temp,
             (unsigned long long)r.bytes);
      if (r.corrupt_kept)
        printf("cache %s: %zu corrupt entries could not be removed (see the warnings)\n", d,
               r.corrupt_kept);
      if (r.removed_corrupt || r.corrupt_kept) rc = EXIT_FAIL;
    }
  } else if ((s = kiln_cache_clear(ctx, &r))) {
    rc = fail_api(s);
  } else {
    printf("cache %s: removed %zu entries and %zu temp files (tuning records kept: %s/%s)\n", d,
           r.removed, r.removed_temp, d, KN_TUNEDB_FILE);
    if (r.kept_temp)
      printf("cache %s: %zu temp files younger than an hour left alone (writes that may be in "
             "flight)\n", d, r.kept_temp);
  }
  kiln_context_destroy(ctx);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    cli_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : EXIT_PASS;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("kiln %s (LLVM %s)\n", kiln_version(), kiln_llvm_version());
    return EXIT_PASS;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "targets")) return cmd_targets();
  if (!strcmp(cmd, "check")) return cmd_check(argc, argv);
  if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
  if (!strcmp(cmd, "cache")) return cmd_cache(argc, argv);
  if (!strcmp(cmd, "aot")) return aot_main(argc, argv);
  cli_options o;
  if (!strcmp(cmd, "run") || !strcmp(cmd, "dump") || !strcmp(cmd, "compile") ||
      !strcmp(cmd, "tune")) {
    int po = cli_parse_options(argc, argv, 2, &o, stderr);
    if (po > 0) cli_usage(stdout);
    int rc = po > 0 ? EXIT_PASS : po < 0 ? EXIT_USAGE
             : !strcmp(cmd, "tune")    ? cmd_tune(&o)
             : !strcmp(cmd, "compile") ? cmd_compile(&o)
             : !strcmp(cmd, "run")     ? cmd_run(&o)
                                       : cmd_dump(&o);
    cli_options_free(&o);  /* (--paged's block table: LeakSanitizer in build-asan) */
    return rc;
  }
  fprintf(stderr, "kiln: error: unknown command '%s'\n", cmd);
  cli_usage(stderr);
  return EXIT_USAGE;
}
