/* kiln.c — the `kiln` command line.
 *
 * The contract (ARCHITECTURE.md, docs/cli.md) that tests, benchmarks and users rely on:
 *   kiln targets                          targets compiled in, devices present
 *   kiln run   [--target T] [options]     random inputs, run, compare with the float64 reference
 *   kiln dump  --stage S [options]        print a stage of the compile (ir|lowered|llvm|asm)
 *   kiln check FILE.tile                  parse and verify a text IR file
 *   kiln tune  [--target T] [options]     autotune the tiling through the JIT service (kiln.h)
 *   kiln cache ls|verify|clear            the code cache and tuning records (runtime/cache.h)
 * `kiln run` ends with one line `max_abs_err=<x> rel_err=<x> tol=<x> PASS|FAIL`.
 * Exit codes: 0 success / PASS, 1 FAIL (a result outside tolerance), 2 bad usage or bad input
 * (malformed IR, unsupported shape or dtype), 3 the target or device is not available.
 *
 * The tool only parses options and prints; building, running and checking live in the library.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sys/stat.h>

#include "attention.h"
#include "attn_launch_cuda.h"
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

enum { EXIT_PASS = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_NODEV = 3 };

/* ---- options ------------------------------------------------------------------------------ */

typedef struct options {
  const char *target;
  const char *stage;
  const char *ir_file;
  const char *output;  /* compile: -o FILE */
  const char *emit;    /* compile: --emit KIND */
  bool stats;          /* compile: --stats */
  bool check_bounds;   /* run: --check-bounds (host: every global access checked) */
  kn_attn_desc desc;
  kn_attn_config cfg;
  kn_attn_problem prob;
  unsigned long long seed;
  int repeats;
  const char *cache_dir; /* tune, cache: --cache-dir DIR (else $KILN_CACHE_DIR, ...) */
  const char *space;     /* tune: --space SPEC (autotune/space.h) */
} options;

static void usage(FILE *f) {
  fputs("usage: kiln <command> [options]\n"
        "commands:\n"
        "  targets                 list targets and devices\n"
        "  run   [--target T]      run the attention kernel on random inputs and check it\n"
        "  dump  --stage S         print a stage: ir, layout (GPU), lowered, llvm (optimised), asm\n"
        "  compile --target T      ahead-of-time output: -o FILE, --emit hsaco|asm|llvm|layout,\n"
        "                          --stats (registers, spills, LDS, occupancy, MFMA count)\n"
        "  check FILE.tile         parse and verify a text IR file\n"
        "  inspect FILE.hsaco      registers, spills, LDS, occupancy, MFMA count of a code object\n"
        "  tune  [--target T]      autotune the tiling for the kernel options and record it:\n"
        "                          --space \"block_m=32,64;block_n=32\", --cache-dir DIR,\n"
        "                          --seqlen-q N (the length tuned for), --repeats R\n"
        "  cache ls|verify|clear   the code cache and tuning records [--cache-dir DIR]\n"
        "kernel options:\n"
        "  --dtype f16|bf16|f32  --head-dim D  --batch B  --heads H  --kv-heads HK\n"
        "  --seqlen-q N  --seqlen-k M  --causal  --block-m BM  --block-n BN\n"
        "  --warps W  --stages S  --seed S  --repeats R  --ir FILE.tile\n"
        "  --check-bounds (run, host: check every load and store against the buffers)\n"
        "targets: interp (reference interpreter), host (CPU through LLVM ORC JIT),\n"
        "         gfx90a, gfx942 (AMDGPU code objects; compile only: no AMD GPU here),\n"
        "         gfx90a-emu, gfx942-emu (the AMDGPU lowering run by the emulator on the CPU),\n"
        "         sm_80, sm_90a (NVIDIA PTX; run on an NVIDIA GPU where one is present),\n"
        "         auto (run: an NVIDIA sm_80+ GPU if present, else the host)\n",
        f);
}

static int parse_int(const char *opt, const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || errno || *end || end == s || v < lo || v > hi) {
    fprintf(stderr, "kiln: error: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi,
            s ? s : "");
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* 0 ok, -1 bad usage (message printed) */
static int parse_options(int argc, char **argv, int first, options *o) {
  memset(o, 0, sizeof *o);
  o->target = "auto";
  o->desc = (kn_attn_desc){.dtype = KN_F16, .head_dim = 64, .causal = false, .has_lse = true};
  o->prob = (kn_attn_problem){.batch = 1, .heads = 2, .kv_heads = 0, .seqlen_q = 128,
                              .seqlen_k = 128};
  o->seed = 1;
  o->repeats = 1;
  int bm = 0, bn = 0, warps = 0, stages = 0;
  for (int i = first; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define INTOPT(name, lo, hi, dst)                                   \
  if (!strcmp(a, name)) {                                           \
    if (parse_int(name, v, lo, hi, &(dst))) return -1;              \
    i++;                                                            \
    continue;                                                       \
  }
    INTOPT("--head-dim", 1, 4096, o->desc.head_dim)
    INTOPT("--batch", 1, 1 << 16, o->prob.batch)
    INTOPT("--heads", 1, 1 << 12, o->prob.heads)
    INTOPT("--kv-heads", 1, 1 << 12, o->prob.kv_heads)
    INTOPT("--seqlen-q", 1, 1 << 24, o->prob.seqlen_q)
    INTOPT("--seqlen-k", 1, 1 << 24, o->prob.seqlen_k)
    INTOPT("--block-m", 1, 4096, bm)
    INTOPT("--block-n", 1, 4096, bn)
    INTOPT("--warps", 1, 64, warps)
    INTOPT("--stages", 1, 16, stages)
    INTOPT("--repeats", 1, 1000, o->repeats)
#undef INTOPT
    if (!strcmp(a, "--causal")) {
      o->desc.causal = true;
    } else if (!strcmp(a, "--seed") && v) {
      o->seed = strtoull(v, NULL, 10);
      i++;
    } else if (!strcmp(a, "--target") && v) {
      o->target = v;
      i++;
    } else if (!strcmp(a, "--stage") && v) {
      o->stage = v;
      i++;
    } else if (!strcmp(a, "--stats")) {
      o->stats = true;
    } else if (!strcmp(a, "--check-bounds")) {
      o->check_bounds = true;
    } else if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) {
      o->output = v;
      i++;
    } else if (!strcmp(a, "--emit") && v) {
      o->emit = v;
      i++;
    } else if (!strcmp(a, "--ir") && v) {
      o->ir_file = v;
      i++;
    } else if (!strcmp(a, "--cache-dir") && v) {
      o->cache_dir = v;
      i++;
    } else if (!strcmp(a, "--space") && v) {
      o->space = v;
      i++;
    } else if (!strcmp(a, "--dtype") && v) {
      int s = kn_scalar_from_name(v, strlen(v));
      if (s < 0) {
        fprintf(stderr, "kiln: error: unknown dtype '%s' (expected f16, bf16 or f32)\n", v);
        return -1;
      }
      o->desc.dtype = (kn_scalar)s;
      i++;
    } else {
      fprintf(stderr, "kiln: error: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return -1;
    }
  }
  if (!o->prob.kv_heads) o->prob.kv_heads = o->prob.heads;
  o->cfg = kn_attn_default_config(&o->desc);
  if (bm) o->cfg.block_m = bm;
  if (bn) o->cfg.block_n = bn;
  if (warps) o->cfg.warps = warps;
  if (stages) o->cfg.stages = stages;
  return 0;
}

/* ---- helpers ------------------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  if (ferror(f)) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *len = n;
  return buf;
}

/* parse + verify a file; NULL after printing the diagnostic */
static kn_module *load_ir(const char *path) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) {
    fprintf(stderr, "kiln: error: cannot read '%s': %s\n", path, strerror(errno));
    return NULL;
  }
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

/* the kernel to run: the template, or the first kernel of --ir FILE (checked against the
 * template's parameter list so the same arguments and reference apply) */
static kn_func *get_kernel(options *o, kn_module **mout) {
  kn_diag d;
  *mout = NULL;
  kn_module *m = NULL;
  kn_func *k = NULL;
  if (o->ir_file) {
    if (!(m = load_ir(o->ir_file))) return NULL;
    for (int i = 0; i < m->nfuncs && !k; i++)
      if (m->funcs[i]->is_kernel) k = m->funcs[i];
    if (!k) {
      fprintf(stderr, "kiln: error: %s: no kernel in the file\n", o->ir_file);
      kn_module_free(m);
      return NULL;
    }
    /* a kernel written for the attention signature records its tiling as attrs: those decide
     * the grid and the reference, whatever the command line said */
    int64_t v;
    if (kn_func_get_meta(k, "HEAD_DIM", &v)) o->desc.head_dim = (int)v;
    if (kn_func_get_meta(k, "CAUSAL", &v)) o->desc.causal = v != 0;
    if (kn_func_get_meta(k, "HAS_LSE", &v)) o->desc.has_lse = v != 0;
    if (kn_func_get_meta(k, "BLOCK_M", &v)) o->cfg.block_m = (int)v;
    if (kn_func_get_meta(k, "BLOCK_N", &v)) o->cfg.block_n = (int)v;
  }
  if (kn_attn_check(&o->desc, &o->cfg, &d)) {
    fprintf(stderr, "kiln: error: unsupported attention request: %s\n", d.message);
    kn_module_free(m);
    return NULL;
  }
  if (o->ir_file) {
    /* compare with the template's signature */
    kn_module *ref = kn_module_new(NULL);
    kn_func *t = kn_attn_fwd_build(ref, &o->desc, &o->cfg, &d);
    bool same = t && kn_func_nparams(t) == kn_func_nparams(k);
    for (int i = 0; same && i < kn_func_nparams(t); i++)
      same = kn_ty_eq(kn_func_param(t, i)->type, kn_func_param(k, i)->type);
    kn_module_free(ref);
    if (!same) {
      fprintf(stderr,
              "kiln: error: %s: kernel @%s does not take the attention forward parameters "
              "(see templates/attention.h) for dtype %s\n",
              o->ir_file, k->name, kn_scalar_name(o->desc.dtype));
      kn_module_free(m);
      return NULL;
    }
  } else {
    m = kn_module_new("<attn_fwd>");
    k = kn_attn_fwd_build(m, &o->desc, &o->cfg, &d);
    if (!k || kn_verify(m, &d)) {
      fprintf(stderr, "kiln: internal error: the attention template is invalid:\n%s", d.rendered);
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

/* ---- commands ----------------------------------------------------------------------------- */

/* a compiled target by name ("auto": the best device present); NULL after a message */
static const char *auto_target(void);

static const kn_target *find_target(const char *name) {
  if (!strcmp(name, "auto")) name = auto_target();
  if (!strcmp(name, "host")) return kn_host_target();
  const kn_target *g = kn_gpu_target_by_name(name);
  if (g) return g;
  if ((g = kn_emu_target(name))) return g;
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

/* `auto`: the best device present (kn_discover_best) whose target kiln can run here.  Runs on
 * GPUs are not wired into the command line yet, so a GPU found is named and the host used. */
static const char *auto_target(void) {
  const kn_device_info *best = kn_discover_best(devices());
  if (best->kind != KN_DEVICE_HOST)
    fprintf(stderr, "kiln: note: %s (target %s) found; running on GPUs is not wired into the "
            "command line yet, using the host\n", best->name,
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

/* `kiln run --target auto`: an NVIDIA GPU kiln can run on, else the host (AMD GPUs run only
 * under emulation from the command line) */
static const char *run_auto_target(void) {
  const kn_device_info *d = cuda_device_for("sm_80");
  if (d) return d->target;
  return auto_target();
}

static void print_driver(const char *what, const kn_driver_report *r) {
  if (r->status == KN_OK)
    printf("  %-6s driver %s, version %d, %d device(s)\n", what, r->library, r->version,
           r->device_count);
  else
    printf("  %-6s not present: %s\n", what, r->why.message);
}

static int cmd_targets(void) {
  printf("targets compiled in:\n");
  printf("  interp   reference interpreter\n");
  printf("  host     the host CPU, LLVM ORC JIT\n");
  static const char *const gpu[] = {"gfx90a", "gfx942", "sm_80", "sm_90a"};
  for (size_t i = 0; i < sizeof gpu / sizeof gpu[0]; i++)
    if (kn_gpu_target_by_name(gpu[i]))
      printf("  %-8s GPU code (compile%s)\n", gpu[i],
             kn_nvptx_target_by_name(gpu[i]) ? "; run where an NVIDIA GPU is present" : "");
  static const char *const emu[] = {"gfx90a-emu", "gfx942-emu"};
  for (size_t i = 0; i < sizeof emu / sizeof emu[0]; i++)
    if (kn_emu_target(emu[i]))
      printf("  %-10s the %.6s lowering run on the CPU by the AMDGPU emulator\n", emu[i], emu[i]);
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
    printf("auto = %s (%s; `kiln run`, the API; dump and tune use the host)\n", cu->target,
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

static int cmd_compile(options *o);

static int cmd_dump(options *o) {
  if (o->stage && !strcmp(o->stage, "layout")) {
    if (!kn_gpu_target_by_name(o->target)) {
      fprintf(stderr, "kiln: error: --stage layout is a stage of GPU targets (gfx90a, gfx942), "
                      "not of '%s'\n", o->target);
      return EXIT_USAGE;
    }
    o->emit = "layout";
    return cmd_compile(o);
  }
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
static int inputs_make(const options *o, run_inputs *in) {
  const kn_attn_problem *p = &o->prob;
  const int D = o->desc.head_dim;
  kn_scalar dt = o->desc.dtype;
  size_t es = kn_scalar_size(dt);
  memset(in, 0, sizeof *in);
  in->nq = (size_t)p->batch * p->heads * p->seqlen_q * D;
  in->nk = (size_t)p->batch * p->kv_heads * p->seqlen_k * D;
  in->nl = (size_t)p->batch * p->heads * p->seqlen_q;
  in->q = malloc(in->nq * es), in->k = malloc(in->nk * es), in->v = malloc(in->nk * es);
  in->out = calloc(in->nq, es), in->lse = calloc(in->nl, sizeof(float));
  in->qd = malloc(in->nq * 8), in->kd = malloc(in->nk * 8), in->vd = malloc(in->nk * 8);
  if (!in->q || !in->k || !in->v || !in->out || !in->lse || !in->qd || !in->kd || !in->vd) {
    inputs_free(in);
    fprintf(stderr, "kiln: error: out of host memory for this problem size\n");
    return -1;
  }
  unsigned long long s = o->seed;
  fill_random(dt, in->q, in->qd, in->nq, &s);
  fill_random(dt, in->k, in->kd, in->nk, &s);
  fill_random(dt, in->v, in->vd, in->nk, &s);
  return 0;
}

/* what every run does first: the problem's sanity and the kernel (template or --ir file);
 * NULL after a message */
static kn_func *run_kernel(options *o, kn_module **m, double *t_build) {
  const kn_attn_problem *p = &o->prob;
  if (p->heads % p->kv_heads) {
    fprintf(stderr, "kiln: error: --heads %d is not a multiple of --kv-heads %d\n", p->heads,
            p->kv_heads);
    return NULL;
  }
  double t0 = now_s();
  kn_func *k = get_kernel(o, m);
  *t_build = now_s() - t0;
  return k;
}

/* compares the kernel's output (and lse) with the float64 reference and prints the contract's
 * last line; EXIT_PASS or EXIT_FAIL */
static int check_and_report(const options *o, const void *out, const float *lse,
                            const double *qd, const double *kd, const double *vd) {
  const kn_attn_problem *p = &o->prob;
  const int D = o->desc.head_dim;
  kn_scalar dt = o->desc.dtype;
  size_t es = kn_scalar_size(dt);
  size_t nq = (size_t)p->batch * p->heads * p->seqlen_q * D, nl = (size_t)p->batch * p->heads * p->seqlen_q;
  double *od = malloc(nq * 8), *lsed = malloc(nl * 8);
  if (!od || !lsed) {
    free(od), free(lsed);
    fprintf(stderr, "kiln: error: out of host memory for the reference\n");
    return EXIT_USAGE;
  }
  kn_attn_reference(p, D, o->desc.causal, qd, kd, vd, od, lsed);
  double max_err = 0, max_ref = 0, lse_err = 0;
  for (size_t i = 0; i < nq; i++) {
    double got = kn_load_elem(dt, (const char *)out + i * es);
    double e = fabs(got - od[i]);
    if (!(e <= max_err)) max_err = e; /* NaN sticks */
    if (fabs(od[i]) > max_ref) max_ref = fabs(od[i]);
  }
  for (size_t i = 0; o->desc.has_lse && i < nl; i++) {
    double e = isinf(lsed[i]) && lse[i] == lsed[i] ? 0 : fabs(lse[i] - lsed[i]);
    if (!(e <= lse_err)) lse_err = e;
  }
  double tol = kn_attn_tolerance(dt);
  double lse_tol = kn_attn_lse_tolerance(dt);
  bool pass = max_err <= tol && lse_err <= lse_tol;
  if (o->desc.has_lse) printf("lse: max_abs_err=%.3g tol=%.3g\n", lse_err, lse_tol);
  printf("max_abs_err=%.3g rel_err=%.3g tol=%.3g %s\n", max_err,
         max_ref > 0 ? max_err / max_ref : max_err, tol, pass ? "PASS" : "FAIL");
  free(od), free(lsed);
  return pass ? EXIT_PASS : EXIT_FAIL;
}

static int cmd_run_cuda(options *o, const kn_target *t);

static int cmd_run(options *o) {
  const kn_target *t = NULL;
  if (!strcmp(o->target, "auto")) o->target = run_auto_target();
  if (strcmp(o->target, "interp") && !(t = find_target(o->target))) return EXIT_NODEV;
  const char *target = t ? t->name : "interp";
  bool emu = t && kn_emu_target(t->name) == t;
  if (o->check_bounds && t && t != kn_host_target() && !emu) {
    fprintf(stderr, "kiln: error: --check-bounds is for --target host (interp and the -emu "
            "targets always check)\n");
    return EXIT_USAGE;
  }
  if (t && kn_nvptx_target_by_name(t->name) == t) return cmd_run_cuda(o, t);
  if (t && t != kn_host_target() && !emu) {
    fprintf(stderr,
            "kiln: error: no %s device is present to run on (compile for it with `kiln compile "
            "--target %s`, or run its lowering under emulation with --target %s-emu)\n",
            t->name, t->name, t->name);
    return EXIT_NODEV;
  }
  const kn_attn_problem *p = &o->prob;
  kn_module *m;
  double t_build, t_compile = 0;
  kn_func *k = run_kernel(o, &m, &t_build);
  if (!k) return EXIT_USAGE;
  kn_kernel *compiled = NULL;
  if (t) {
    kn_diag d;
    double t1 = now_s();
    kn_compile_options copts = {.check_bounds = o->check_bounds && !emu};
    if (kn_compile(m, k->name, t, &copts, &compiled, &d)) {
      fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
      kn_module_free(m);
      return EXIT_USAGE;
    }
    t_compile = now_s() - t1;
  }

  const int D = o->desc.head_dim;
  kn_scalar dt = o->desc.dtype;
  size_t es = kn_scalar_size(dt);
  run_inputs in;
  if (inputs_make(o, &in)) {
    kn_kernel_free(compiled);
    kn_module_free(m);
    return EXIT_USAGE;
  }

  kn_argval args[KN_ATTN_NPARAMS];
  int grid[3];
  kn_attn_fill_args(&o->desc, &o->cfg, p, in.q, in.k, in.v, in.out, in.lse, args, grid);
  kn_region regions[] = {{in.q, in.nq * es}, {in.k, in.nk * es}, {in.v, in.nk * es},
                         {in.out, in.nq * es}, {in.lse, in.nl * sizeof(float)}};
  printf("kiln run: target=%s kernel=%s dtype=%s B=%d H=%d HK=%d Nq=%d Nk=%d D=%d causal=%d "
         "block=%dx%d seed=%llu\n",
         target, k->name, kn_scalar_name(dt), p->batch, p->heads, p->kv_heads, p->seqlen_q,
         p->seqlen_k, D, o->desc.causal, o->cfg.block_m, o->cfg.block_n, o->seed);

  int rc = EXIT_PASS;
  double best = INFINITY;
  for (int r = 0; r < o->repeats; r++) {
    kn_diag d;
    double t1 = now_s();
    /* the emulator checks every global access against the caller's buffers, like the
     * interpreter; the host target runs unchecked at full speed unless --check-bounds */
    int err = emu        ? kn_emu_run(compiled, args, grid, regions, 5, NULL, &d)
              : compiled ? kn_kernel_run_host_checked(compiled, args, grid,
                                                      o->check_bounds ? regions : NULL, 5, &d)
                         : kn_interp_run(k, args, grid, regions, 5, NULL, &d);
    if (err) {
      fprintf(stderr, "kiln: error: the kernel failed to run:\n%s", d.rendered);
      rc = EXIT_USAGE;
      goto done;
    }
    double t = now_s() - t1;
    if (t < best) best = t;
  }
  double flops = 4.0 * p->batch * p->heads * (double)p->seqlen_q * p->seqlen_k * D;
  if (o->desc.causal) flops *= 0.5;
  printf("build: %.3f ms  compile: %.1f ms  run: %.3f ms (best of %d)  %.3f GFLOP/s\n",
         t_build * 1e3, t_compile * 1e3, best * 1e3, o->repeats, flops / best * 1e-9);

  rc = check_and_report(o, in.out, in.lse, in.qd, in.kd, in.vd);
done:
  inputs_free(&in);
  kn_kernel_free(compiled);
  kn_module_free(m);
  return rc;
}

/* `kiln run --target sm_80|sm_90a` on an NVIDIA GPU: PTX from kn_nvptx_compile, loaded by the
 * driver JIT, launched through the launch helper the API uses (templates/attn_launch_cuda.h) on
 * device buffers (the output and lse filled with NaN bytes first, so an unwritten element fails),
 * timed with CUDA events (one untimed launch, then --repeats timed ones; the best is reported),
 * checked against the float64 reference.  Exit 3 without a suitable GPU; driver failures after
 * the compile are FAIL (1). */
static int cmd_run_cuda(options *o, const kn_target *t) {
  const kn_device_info *di = cuda_device_for(t->name);
  if (!di) {
    const kn_device_list *l = devices();
    fprintf(stderr, "kiln: error: no %s device is present to run on (%s); compile for it with "
            "`kiln compile --target %s`\n", t->name,
            l->cuda.status != KN_OK ? l->cuda.why.message
            : !strcmp(t->name, "sm_90a") ? "sm_90a needs a compute capability 9.0 GPU"
                                          : "kiln needs an NVIDIA GPU of compute capability 8.0+",
            t->name);
    return EXIT_NODEV;
  }
  const kn_attn_problem *p = &o->prob;
  kn_module *m;
  double t_build;
  kn_func *k = run_kernel(o, &m, &t_build);
  if (!k) return EXIT_USAGE;
  double t1 = now_s();
  kn_nvptx_compiled c;
  kn_diag d;
  if (kn_nvptx_compile(m, k->name, t->name, false, &c, &d)) {
    fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
    kn_module_free(m);
    return EXIT_USAGE;
  }
  double t_compile = now_s() - t1;

  const int D = o->desc.head_dim;
  kn_scalar dt = o->desc.dtype;
  size_t es = kn_scalar_size(dt);
  run_inputs in;
  if (inputs_make(o, &in)) {
    kn_nvptx_compiled_free(&c);
    kn_module_free(m);
    return EXIT_USAGE;
  }
  size_t nq = in.nq, nk = in.nk, nl = in.nl;
  kn_cuda_device *dev = NULL;
  kn_cuda_module *mod = NULL;
  kn_cuda_event ev[2] = {NULL, NULL};
  kn_cuda_ptr dq = 0, dk = 0, dv = 0, dout = 0, dl = 0;
  kn_diag e = {0};
  int rc = EXIT_FAIL;

  kn_cuda_kernel *fn;
  double t2 = now_s();
  if (kn_cuda_device_open(di->ordinal, &dev, &e) ||
      kn_cuda_module_load_ptx(dev, c.ptx, &mod, &e) ||
      kn_cuda_module_kernel(mod, k->name, &fn, &e))
    goto driver_error;
  double t_load = now_s() - t2;
  if (kn_cuda_alloc(dev, nq * es, &dq, &e) || kn_cuda_alloc(dev, nk * es, &dk, &e) ||
      kn_cuda_alloc(dev, nk * es, &dv, &e) || kn_cuda_alloc(dev, nq * es, &dout, &e) ||
      kn_cuda_alloc(dev, nl * sizeof(float), &dl, &e) ||
      kn_cuda_copy_htod(dev, dq, in.q, nq * es, &e) ||
      kn_cuda_copy_htod(dev, dk, in.k, nk * es, &e) ||
      kn_cuda_copy_htod(dev, dv, in.v, nk * es, &e) ||
      kn_cuda_memset8(dev, dout, 0xff, nq * es, &e) ||
      kn_cuda_memset8(dev, dl, 0xff, nl * sizeof(float), &e) ||
      kn_cuda_event_create(dev, &ev[0], &e) || kn_cuda_event_create(dev, &ev[1], &e))
    goto driver_error;

  kn_argval args[KN_ATTN_NPARAMS];
  int grid[3];
  kn_attn_fill_args(&o->desc, &o->cfg, p, (void *)(uintptr_t)dq, (void *)(uintptr_t)dk,
                    (void *)(uintptr_t)dv, (void *)(uintptr_t)dout, (float *)(uintptr_t)dl, args,
                    grid);
  kn_attn_cuda_launch_info li = {.threads = c.threads, .smem_bytes = c.smem_bytes};
  printf("kiln run: target=%s device=%s kernel=%s dtype=%s B=%d H=%d HK=%d Nq=%d Nk=%d D=%d "
         "causal=%d block=%dx%d warps=%d smem=%lld seed=%llu\n",
         t->name, di->name, k->name, kn_scalar_name(dt), p->batch, p->heads, p->kv_heads,
         p->seqlen_q, p->seqlen_k, D, o->desc.causal, o->cfg.block_m, o->cfg.block_n,
         c.threads / 32, (long long)c.smem_bytes, o->seed);
  /* the first launch is the one checked (and warms the module up); then the timed ones */
  if (kn_attn_cuda_launch(fn, &li, args, grid, NULL, &e) || kn_cuda_device_sync(dev, &e) ||
      kn_cuda_copy_dtoh(dev, in.out, dout, nq * es, &e) ||
      kn_cuda_copy_dtoh(dev, in.lse, dl, nl * sizeof(float), &e))
    goto driver_error;
  float best = INFINITY;
  for (int r = 0; r < o->repeats; r++) {
    float ms;
    if (kn_cuda_event_record(dev, ev[0], NULL, &e) ||
        kn_attn_cuda_launch(fn, &li, args, grid, NULL, &e) ||
        kn_cuda_event_record(dev, ev[1], NULL, &e) || kn_cuda_event_sync(dev, ev[1], &e) ||
        kn_cuda_event_elapsed(dev, ev[0], ev[1], &ms, &e))
      goto driver_error;
    if (ms < best) best = ms;
  }
  double flops = 4.0 * p->batch * p->heads * (double)p->seqlen_q * p->seqlen_k * D;
  if (o->desc.causal) flops *= 0.5;
  printf("build: %.3f ms  compile: %.1f ms  load: %.1f ms  run: %.3f ms (best of %d, CUDA events)"
         "  %.3f TFLOP/s\n", t_build * 1e3, t_compile * 1e3, t_load * 1e3, best, o->repeats,
         flops / (best * 1e-3) * 1e-12);
  rc = check_and_report(o, in.out, in.lse, in.qd, in.kd, in.vd);
  goto done;
driver_error:
  fprintf(stderr, "kiln: %s", e.rendered); /* "error: ...\n", a JIT log whole */
  rc = EXIT_FAIL;
done:
  if (dev) {
    kn_cuda_ptr bufs[] = {dq, dk, dv, dout, dl};
    for (int i = 0; i < 5; i++)
      if (bufs[i]) kn_cuda_free(dev, bufs[i], NULL);
    for (int i = 0; i < 2; i++)
      if (ev[i]) kn_cuda_event_destroy(dev, ev[i]);
    if (mod) kn_cuda_module_unload(mod);
    kn_cuda_device_close(dev);
  }
  inputs_free(&in);
  kn_nvptx_compiled_free(&c);
  kn_module_free(m);
  return rc;
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

/* kiln inspect FILE: the resources of any AMDGPU code object (kiln's or another compiler's) */
static int cmd_inspect(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: kiln inspect FILE.hsaco\n");
    return EXIT_USAGE;
  }
  size_t n;
  char *data = read_file(argv[2], &n);
  if (!data) {
    fprintf(stderr, "kiln: error: cannot read '%s': %s\n", argv[2], strerror(errno));
    return EXIT_USAGE;
  }
  kn_codeobj co;
  kn_diag d;
  int rc = EXIT_PASS;
  if (kn_codeobj_parse(data, n, &co, &d)) {
    fprintf(stderr, "kiln: error: %s: not a code object kiln can read: %s\n", argv[2], d.message);
    rc = EXIT_USAGE;
  } else {
    char buf[16384];
    kn_codeobj_format_stats(&co, buf, sizeof buf);
    fputs(buf, stdout);
    kn_codeobj_free(&co);
  }
  free(data);
  return rc;
}

/* kiln compile for sm_80 / sm_90a: PTX from LLVM's NVPTX backend; a cubin and the register and
 * spill report from ptxas where the CUDA toolkit is installed */
static int compile_nvptx(options *o, const kn_target *t, kn_module *m, kn_func *k) {
  const char *emit = o->emit ? o->emit : "ptx";
  if (strcmp(emit, "ptx") && strcmp(emit, "cubin") && strcmp(emit, "layout")) {
    fprintf(stderr, "kiln: error: --emit %s is not available for target %s (ptx, cubin, layout, "
                    "asm, llvm)\n", emit, t->name);
    return EXIT_USAGE;
  }
  kn_diag d;
  kn_nvptx_compiled c;
  if (kn_nvptx_compile(m, k->name, t->name, false, &c, &d)) {
    fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
    return EXIT_USAGE;
  }
  int rc = EXIT_PASS;
  bool cubin = !strcmp(emit, "cubin");
  if (!strcmp(emit, "layout")) rc = write_out(o->output, c.layout_text, strlen(c.layout_text));
  else if (!cubin) rc = write_out(o->output, c.ptx, c.ptx_size);
  if (rc == 0 && (cubin || o->stats)) {
    kn_ptxas_options po = {.arch = t->name, .opt_level = 3, .want_cubin = cubin};
    kn_ptxas_result r;
    kn_diag why;
    if (kn_ptxas_run(c.ptx, c.ptx_size, &po, &r, &why) != KN_OK) {
      fprintf(stderr, "kiln: ptxas: %s", why.rendered); /* "error: ...\n", ptxas's lines whole */
      rc = cubin ? EXIT_NODEV : EXIT_PASS;  /* --stats without ptxas: the PTX is still written */
    } else {
      if (cubin) rc = write_out(o->output, r.cubin, r.cubin_size);
      const kn_ptxas_kernel *pk = kn_ptxas_find_kernel(&r, k->name);
      FILE *sf = !o->output || !strcmp(o->output, "-") ? stderr : stdout;
      if (o->stats && pk)
        fprintf(sf, "%s %s: %d registers, spill stores %d B, spill loads %d B, stack frame %d B, "
                    "dynamic shared %lld B, %d threads per block (%s)\n",
                k->name, t->name, pk->registers, pk->spill_stores, pk->spill_loads,
                pk->stack_frame, (long long)c.smem_bytes, c.threads, r.ptxas);
      kn_ptxas_result_free(&r);
    }
    if (rc < 0) rc = EXIT_USAGE;
  }
  if (rc < 0) rc = EXIT_USAGE;
  kn_nvptx_compiled_free(&c);
  return rc;
}

/* kiln compile: ahead-of-time output for a target (AMDGPU: the linked code object) */
static int cmd_compile(options *o) {
  if (!strcmp(o->target, "auto") || !strcmp(o->target, "interp")) {
    fprintf(stderr, "kiln: error: compile needs --target (host, gfx90a, gfx942)\n");
    return EXIT_USAGE;
  }
  const kn_target *t = find_target(o->target);
  if (!t) return EXIT_NODEV;
  /* asm and llvm come straight from the pipeline for every target (below) */
  bool text_stage = o->emit && (!strcmp(o->emit, "asm") || !strcmp(o->emit, "llvm")) && !o->stats;
  if (kn_nvptx_target_by_name(t->name) && !text_stage) {
    kn_module *m;
    kn_func *k = get_kernel(o, &m);
    if (!k) return EXIT_USAGE;
    int rc = compile_nvptx(o, t, m, k);
    kn_module_free(m);
    return rc;
  }
  if (kn_emu_target(t->name) == t) {
    fprintf(stderr, "kiln: error: %s runs under `kiln run`; compile for %.6s instead\n", t->name,
            t->name);
    return EXIT_USAGE;
  }
  bool gpu = t != kn_host_target();
  const char *emit = o->emit ? o->emit : gpu ? "hsaco" : "asm";
  int stage = !strcmp(emit, "llvm") ? KN_STAGE_LLVM : !strcmp(emit, "asm") ? KN_STAGE_ASM : 0;
  if (!stage && !(gpu && (!strcmp(emit, "hsaco") || !strcmp(emit, "layout")))) {
    fprintf(stderr, "kiln: error: --emit %s is not available for target %s (%s)\n", emit,
            t->name, gpu ? "hsaco, asm, llvm, layout" : "asm, llvm");
    return EXIT_USAGE;
  }
  kn_module *m;
  kn_func *k = get_kernel(o, &m);
  if (!k) return EXIT_USAGE;
  int rc = EXIT_PASS;
  kn_diag d;
  if (stage && !o->stats) {
    /* a text stage straight from the pipeline */
    FILE *f = !o->output || !strcmp(o->output, "-") ? stdout : fopen(o->output, "w");
    if (!f) {
      fprintf(stderr, "kiln: error: cannot write '%s': %s\n", o->output, strerror(errno));
      rc = EXIT_USAGE;
    } else {
      if (kn_pipeline_dump(m, k->name, t, (kn_stage)stage, f, &d)) {
        fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
        rc = EXIT_USAGE;
      }
      if (f != stdout && fclose(f)) rc = EXIT_USAGE;
    }
  } else if (gpu) {
    kn_gpu_compiled c;
    if (kn_gpu_compile(m, k->name, t->name, false, &c, &d)) {
      fprintf(stderr, "kiln: error: compiling for %s failed:\n%s", t->name, d.rendered);
      rc = EXIT_USAGE;
    } else {
      if (!strcmp(emit, "layout")) {
        if (write_out(o->output, c.layout_text, strlen(c.layout_text))) rc = EXIT_USAGE;
      } else if (!strcmp(emit, "hsaco")) {
        if (write_out(o->output, c.code_object, c.code_object_size)) rc = EXIT_USAGE;
      }
      if (o->stats) {
        kn_codeobj co;
        char buf[8192];
        if (kn_codeobj_parse(c.code_object, c.code_object_size, &co, &d)) {
          fprintf(stderr, "kiln: error: reading the code object: %s\n", d.message);
          rc = EXIT_USAGE;
        } else {
          kn_codeobj_format_stats(&co, buf, sizeof buf);
          /* the stats go to stderr when the code object itself went to stdout */
          fputs(buf, !o->output || !strcmp(o->output, "-") ? stderr : stdout);
          kn_codeobj_free(&co);
        }
        fprintf(!o->output || !strcmp(o->output, "-") ? stderr : stdout,
                "compile: lower %.1f ms, optimise %.1f ms, codegen %.1f ms, link %.1f ms; "
                "LDS plan %lld bytes\n",
                c.ms_lower, c.ms_optimize, c.ms_codegen, c.ms_link, (long long)c.lds_plan_bytes);
      }
      if (stage) {
        /* --stats with a text stage: print the stage as well */
        if (kn_pipeline_dump(m, k->name, t, (kn_stage)stage, stdout, &d)) rc = EXIT_USAGE;
      }
      kn_gpu_compiled_free(&c);
    }
  } else {
    fprintf(stderr, "kiln: error: --stats is available for GPU targets\n");
    rc = EXIT_USAGE;
  }
  kn_module_free(m);
  return rc;
}

/* ---- tune and cache (the JIT service, include/kiln.h) ----------------------------------- */

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

static int cmd_tune(options *o) {
  const char *target = !strcmp(o->target, "auto") ? auto_target() : o->target;
  if (strcmp(target, "host")) {
    fprintf(stderr, "kiln: error: target '%s': tuning runs on the host only so far\n", target);
    return EXIT_NODEV;
  }
  if (o->ir_file) {
    fprintf(stderr, "kiln: error: kiln tune tunes the attention template (no --ir)\n");
    return EXIT_USAGE;
  }
  kiln_context_options co = {.cache_dir = o->cache_dir, .device = "host", .log = cli_log};
  kiln_context *ctx;
  kiln_status s = kiln_context_create(&co, &ctx);
  if (s) {
    fprintf(stderr, "kiln: error: %s\n", kiln_last_error());
    return exit_of(s);
  }
  kiln_attn_desc d = {.dtype = o->desc.dtype == KN_BF16  ? KILN_BF16
                               : o->desc.dtype == KN_F32 ? KILN_F32
                                                         : KILN_F16,
                      .head_dim = o->desc.head_dim, .causal = o->desc.causal,
                      .has_lse = o->desc.has_lse};
  if (o->desc.dtype != KN_F16 && o->desc.dtype != KN_BF16 && o->desc.dtype != KN_F32) {
    fprintf(stderr, "kiln: error: kiln tune serves f16, bf16 and f32\n");
    kiln_context_destroy(ctx);
    return EXIT_USAGE;
  }
  int seqlen = o->prob.seqlen_q > o->prob.seqlen_k ? o->prob.seqlen_q : o->prob.seqlen_k;
  kiln_prepare_options po = {.seqlen = seqlen, .tune_space = o->space,
                             .tune_batch = o->prob.batch, .tune_heads = o->prob.heads,
                             .tune_repeats = o->repeats > 1 ? o->repeats : 0};
  printf("kiln tune: target=host device=%s kernel=attn_fwd dtype=%s D=%d causal=%d lse=%d "
         "seqlen=%d (bucket %d) cache=%s\n",
         kiln_context_device_name(ctx), kn_scalar_name(o->desc.dtype), d.head_dim, d.causal,
         d.has_lse, seqlen, kn_tune_seq_bucket(seqlen), kiln_context_cache_dir(ctx));
  fflush(stdout);
  kiln_tune_result r;
  s = kiln_tune(ctx, &d, &po, &r);
  if (r.candidates) {
    printf("space: %s\nproblem: batch %d x heads %d x %d^2\n", r.space, r.batch, r.heads,
           r.seqlen);
    printf("%7s %7s %5s %6s %12s %10s %11s %11s  %s\n", "block_m", "block_n", "warps", "stages",
           "tile_bytes", "compile_ms", "median_us", "min_us", "state");
    for (int i = 0; i < r.ncandidates; i++) {
      const kiln_tune_candidate *c = &r.candidates[i];
      printf("%7d %7d %5d %6d %12llu %10.1f ", c->block_m, c->block_n, c->warps, c->stages,
             (unsigned long long)c->tile_bytes, c->compile_ms);
      if (c->state == KILN_CANDIDATE_TIMED) printf("%11.1f %11.1f  timed%s\n", c->median_us,
                                                  c->min_us, i == r.best ? " *best*" : "");
      else printf("%11s %11s  %s: %s\n", "-", "-", state_name(c->state), c->note);
    }
  }
  if (s) {
    fprintf(stderr, "kiln: error: %s\n", kiln_last_error());
  } else {
    const kiln_tune_candidate *b = &r.candidates[r.best];
    printf("best: block_m=%d block_n=%d warps=%d stages=%d median_us=%.1f (%s)\n", b->block_m,
           b->block_n, b->warps, b->stages, b->median_us,
           r.recorded ? "recorded in the tuning database" : "not recorded");
    printf("tuning time: %.2f s\n", r.seconds);
  }
  kiln_tune_result_free(&r);
  kiln_context_destroy(ctx);
  return exit_of(s);
}

static int cmd_cache(int argc, char **argv) {
  const char *sub = argc >= 3 ? argv[2] : "", *dir = NULL;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc) {
      dir = argv[++i];
    } else {
      fprintf(stderr, "kiln: error: unknown or incomplete option '%s'\n", argv[i]);
      return EXIT_USAGE;
    }
  }
  if (strcmp(sub, "ls") && strcmp(sub, "verify") && strcmp(sub, "clear")) {
    fprintf(stderr, "usage: kiln cache ls|verify|clear [--cache-dir DIR]\n");
    return EXIT_USAGE;
  }
  kn_cache_config cc = {.dir = dir};
  kn_cache *c;
  kn_diag why;
  if (kn_cache_open(&cc, &c, &why) != KN_OK) {
    fprintf(stderr, "kiln: error: %s\n", why.message);
    return EXIT_USAGE;
  }
  int rc = EXIT_PASS;
  kn_cache_report r;
  if (!strcmp(sub, "ls")) {
    kn_cache_entry *e;
    size_t n;
    if (kn_cache_list(c, &e, &n, &why) != KN_OK) {
      fprintf(stderr, "kiln: error: %s\n", why.message);
      kn_cache_close(c);
      return EXIT_USAGE;
    }
    printf("cache %s (bound %llu bytes)\n", kn_cache_dir(c),
           (unsigned long long)kn_cache_max_bytes(c));
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
      char hex[33], when[32];
      kn_cache_key_hex(&e[i].key, hex);
      time_t t = (time_t)e[i].last_used;
      strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
      printf("  %s  %10llu bytes  last used %s\n", hex, (unsigned long long)e[i].file_bytes,
             when);
      total += e[i].file_bytes;
    }
    printf("%zu entries, %llu bytes\n", n, (unsigned long long)total);
    free(e);
    /* tuning records, only if the database exists (ls must not create one) */
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", kn_cache_dir(c), KN_TUNEDB_FILE);
    kn_tunedb *db;
    if (stat(path, &st) == 0 && !kn_status_failed(kn_tunedb_open(path, &db, NULL))) {
      kn_tune_record *recs;
      size_t nr = 0;
      if (kn_tunedb_list(db, &recs, &nr, NULL) == KN_OK) {
        printf("tuning records (%s):\n", path);
        for (size_t i = 0; i < nr; i++) {
          const kn_tune_record *t = &recs[i];
          printf("  %s %s %s D%d bucket %d %s kiln %s: block %dx%d warps %d stages %d, %.1f us\n",
                 t->key.template_name, t->key.variant, t->key.dtype, t->key.head_dim,
                 t->key.seq_bucket, t->key.arch, t->key.kiln_version, t->config.block_m,
                 t->config.block_n, t->config.warps, t->config.stages, t->time_us);
        }
        free(recs);
      }
      kn_tunedb_close(db);
    }
  } else if (!strcmp(sub, "verify")) {
    if (kn_cache_verify(c, &r, &why) != KN_OK) {
      fprintf(stderr, "kiln: error: %s\n", why.message);
      rc = EXIT_USAGE;
    } else {
      printf("cache %s: %zu entries, %zu valid, %zu corrupt removed, %zu stale temp files "
             "removed, %llu bytes\n", kn_cache_dir(c), r.entries, r.valid, r.removed_corrupt,
             r.removed_temp, (unsigned long long)r.bytes);
      if (r.removed_corrupt) rc = EXIT_FAIL;
    }
  } else {
    if (kn_cache_clear(c, &r, &why) != KN_OK) {
      fprintf(stderr, "kiln: error: %s\n", why.message);
      rc = EXIT_USAGE;
    } else {
      printf("cache %s: removed %zu entries and %zu temp files (tuning records kept: %s/%s)\n",
             kn_cache_dir(c), r.removed_evicted, r.removed_temp, kn_cache_dir(c),
             KN_TUNEDB_FILE);
    }
  }
  kn_cache_close(c);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : EXIT_PASS;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "targets")) return cmd_targets();
  if (!strcmp(cmd, "check")) return cmd_check(argc, argv);
  if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
  if (!strcmp(cmd, "cache")) return cmd_cache(argc, argv);
  options o;
  if (!strcmp(cmd, "run") || !strcmp(cmd, "dump") || !strcmp(cmd, "compile") ||
      !strcmp(cmd, "tune")) {
    if (parse_options(argc, argv, 2, &o)) return EXIT_USAGE;
    if (!strcmp(cmd, "tune")) return cmd_tune(&o);
    if (!strcmp(cmd, "compile")) return cmd_compile(&o);
    return !strcmp(cmd, "run") ? cmd_run(&o) : cmd_dump(&o);
  }
  fprintf(stderr, "kiln: error: unknown command '%s'\n", cmd);
  usage(stderr);
  return EXIT_USAGE;
}
