/* pipeline.c — the compiler's pass list, in one place, for every target.
 *
 * compile_run() below is the whole pipeline, read top to bottom:
 *
 *   copy the module, verify the input, fold, inline calls, fold, scale fold (kiln passes, tile IR)
 *   GPU ISAs: assign layouts, plan shared memory                       (compiler/gpu)
 *   lower to LLVM IR for the target, verify the LLVM module
 *   LLVM's optimisation pipeline of the target, with its machine attached (target.h's
 *   `passes`: default<O3>, AMDGPU its own O3 pipeline, compiler/amdgpu/amdgpu_target.c)
 *   (assembly, when dumped)
 *   codegen to the artefact: host object, AMDGPU object, PTX
 *   link (AMDGPU: lld, in process) -> code object
 *   load (host and emulated targets: the object linked into a fresh LLJIT)
 *
 * Which steps a target has is the target's table (compiler/target.h); which facts they use is
 * the registry (compiler/arch.h).  The emulated AMDGPU targets run the AMDGPU layout and
 * lowering and then the host's codegen and load.  A new pass is one more line here.
 *
 * The kiln verifier runs on the input always (the input is the user's), and between kiln passes
 * in debug builds, with KILN_VERIFY_EACH=1, or with options.verify_each: a pass that breaks the
 * IR is then reported as an internal error naming the pass.
 *
 * Dumps: KILN_DUMP=ir,layout,lowered,llvm,asm (or options.dump_stages) print those stages as they
 * are produced, to stderr or options.dump_file, each preceded by one comment line naming it.  An
 * unknown word in KILN_DUMP fails the compile with the list of stages.
 *
 * Checked mode (options.check_bounds, the host only) swaps the target's `lower` for its
 * `lower_checked`: every load and store then asks host_run.c's checker first; a target without
 * one refuses.  Everything else is the same pipeline.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Core.h>

#include "gpu.h"
#include "host_run.h"
#include "passes.h"
#include "pipeline.h"
#include "target.h"

struct kn_kernel {
  const kn_target *target;
  char name[128];
  kn_artifact art;
  int nparams;
  bool checked;          /* compiled with check_bounds: runs with the checker argument */
  kn_loaded loaded;
  bool is_loaded;
  char *layout_text;
  kn_compile_times times;
};

const kn_target *kn_host_target(void) { return kn_target_get("host"); }

/* ---- stages ---- */

static const struct {
  const char *name;
  unsigned bit;
} stages[] = {{"ir", KN_STAGE_IR},         {"layout", KN_STAGE_LAYOUT}, {"lowered", KN_STAGE_LOWERED},
              {"llvm", KN_STAGE_LLVM},     {"asm", KN_STAGE_ASM},       {"all", KN_STAGE_ALL}};

const char *kn_stage_names(void) { return "ir, layout, lowered, llvm, asm, all"; }

int kn_stage_parse(const char *s) {
  int mask = 0;
  while (s && *s) {
    size_t n = strcspn(s, ",");
    bool found = false;
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
      if (strlen(stages[i].name) == n && strncmp(stages[i].name, s, n) == 0) {
        mask |= (int)stages[i].bit;
        found = true;
      }
    if (!found && n) return -1;
    s += n;
    if (*s == ',') s++;
  }
  return mask;
}

/* ---- one compile ---- */

typedef struct compile {
  const kn_target *t;
  kn_module *m;          /* the compile's own copy */
  kn_func *k;
  unsigned dump;         /* kn_stage bits to print */
  FILE *out;
  bool verify_each;
  bool no_load;
  bool keep_layout;
  bool check_bounds;
  unsigned stop_after;   /* a kn_stage bit, or 0 to go all the way */
  kn_diag *d;
  kn_layout_plan plan;
  bool has_plan;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMTargetMachineRef tm;
  kn_kernel *kk;         /* the result, filled as the steps go */
  double t0;
} compile;

static const kn_loc no_loc = {0};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ms since the last call (the step just done) */
static double lap(compile *c) {
  double t = now_ms(), dt = t - c->t0;
  c->t0 = t;
  return dt;
}

static bool env_verify_each(void) {
#ifndef NDEBUG
  return true;
#else
  const char *e = getenv("KILN_VERIFY_EACH");
  return e && *e && strcmp(e, "0") != 0;
#endif
}

/* after a kiln pass: the IR must still verify */
static int check(compile *c, const char *pass) {
  if (!c->verify_each) return 0;
  kn_diag v;
  if (kn_verify(c->m, &v) == 0) return 0;
  return kn_error(c->d, NULL, no_loc, "internal error: IR invalid after pass '%s': %s", pass,
                  v.message);
}

static void dump_ir(compile *c) {
  if (!(c->dump & KN_STAGE_IR)) return;
  char *text = kn_print(c->m);
  fprintf(c->out, "// kiln: tile IR of @%s after kiln passes\n%s", c->k->name, text ? text : "");
  free(text);
}

static void dump_llvm(compile *c, kn_stage stage, const char *what) {
  if (!(c->dump & stage)) return;
  char *text = LLVMPrintModuleToString(c->mod);
  fprintf(c->out, "; kiln: %s of @%s for %s\n%s", what, c->k->name, c->t->name, text);
  LLVMDisposeMessage(text);
}

/* the kiln passes on the tile IR */
static int front(compile *c, const kn_module *src, const char *name) {
  c->m = kn_module_clone(src);
  if (!c->m) return kn_error(c->d, NULL, no_loc, "out of memory");
  if (kn_verify(c->m, c->d)) return -1;
  c->k = kn_module_find(c->m, name);
  if (!c->k || !c->k->is_kernel)
    return kn_error(c->d, c->m, no_loc, "no kernel named '@%s' in the module", name);
  kn_fold(c->m);
  if (check(c, "fold")) return -1;
  if (kn_inline(c->m, c->d)) return -1;
  if (check(c, "inline")) return -1;
  kn_fold(c->m);
  if (check(c, "fold")) return -1;
  kn_fold_scale(c->m);
  if (check(c, "scale")) return -1;
  dump_ir(c);
  return 0;
}

/* GPU ISAs: every tile value gets a layout, every staged conversion a shared-memory buffer */
static int layout(compile *c) {
  if (c->t->arch->isa == KN_ISA_HOST) return 0;
  c->has_plan = true;
  if (kn_assign_layouts(c->k, c->t->arch, &c->plan, c->d)) return -1;
  if (kn_plan_shared(&c->plan, c->d)) return -1;
  if ((c->dump & KN_STAGE_LAYOUT) || c->keep_layout) {
    char *text = kn_layout_plan_format(&c->plan);
    if (c->dump & KN_STAGE_LAYOUT)
      fprintf(c->out, "// kiln: layouts of @%s for %s\n%s", c->k->name, c->t->name,
              text ? text : "");
    if (c->keep_layout) c->kk->layout_text = text;
    else free(text);
  }
  c->kk->art.shared_bytes = c->plan.lds_bytes;
  c->kk->art.threads = c->t->arch->lanes * c->plan.warps;
  return 0;
}

/* the bytes of the kernel function's stack slots (tiles and scalar slots) before optimisation:
 * the host's resource for the autotuner (an upper bound of the stack a program needs) */
static uint64_t measure_tile_bytes(LLVMModuleRef mod, LLVMTargetMachineRef tm, const char *sym) {
  LLVMValueRef f = LLVMGetNamedFunction(mod, sym);
  if (!f) return 0;
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  uint64_t total = 0;
  for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb))
    for (LLVMValueRef i = LLVMGetFirstInstruction(bb); i; i = LLVMGetNextInstruction(i))
      if (LLVMIsAAllocaInst(i)) total += LLVMABISizeOfType(td, LLVMGetAllocatedType(i));
  LLVMDisposeTargetData(td);
  return total;
}

static int compile_run(compile *c, const kn_module *src, const char *name) {
  const kn_target *t = c->t;
  kn_diag *d = c->d;
  kn_kernel *kk = c->kk;
  c->t0 = now_ms();

  if (front(c, src, name)) return -1;
  snprintf(kk->name, sizeof kk->name, "%s", c->k->name);
  kk->nparams = kn_func_nparams(c->k);
  kk->checked = c->check_bounds;
  snprintf(kk->art.symbol, sizeof kk->art.symbol, t->arch->isa == KN_ISA_HOST || t->emulated
           ? "kiln_%s" : "%s", c->k->name);
  kk->times.front = lap(c);
  if (c->stop_after == KN_STAGE_IR) return 0;

  if (layout(c)) return -1;
  kk->times.layout = lap(c);
  if (c->stop_after == KN_STAGE_LAYOUT) return 0;

  c->ctx = kn_llvm_context_new();
  int (*lower)(const kn_target *, kn_func *, const kn_layout_plan *, LLVMContextRef,
               LLVMModuleRef *, kn_diag *) = c->check_bounds ? t->lower_checked : t->lower;
  if (!lower)
    return kn_error(d, NULL, no_loc, "target %s has no checked mode (check_bounds)", t->name);
  if (lower(t, c->k, c->has_plan ? &c->plan : NULL, c->ctx, &c->mod, d)) return -1;
  dump_llvm(c, KN_STAGE_LOWERED, "LLVM IR as lowered");
  if (kn_llvm_verify(c->mod, d)) return -1;
  if (!(c->tm = t->machine(t, d))) return -1;
  if (t->arch->isa == KN_ISA_HOST) kk->art.tile_bytes = measure_tile_bytes(c->mod, c->tm, kk->art.symbol);
  kk->times.lower = lap(c);
  if (c->stop_after == KN_STAGE_LOWERED) return 0;

  if (kn_llvm_run_passes(c->mod, c->tm, t->passes ? t->passes : "default<O3>", d)) return -1;
  dump_llvm(c, KN_STAGE_LLVM, "LLVM IR after optimisation");
  kk->times.optimize = lap(c);
  if (c->stop_after == KN_STAGE_LLVM) return 0;

  if (c->dump & KN_STAGE_ASM) {
    fprintf(c->out, "# kiln: %s assembly of @%s\n", t->name, c->k->name);
    if (kn_llvm_emit_asm(c->mod, c->tm, c->out, d)) return -1;
  }
  if (c->stop_after == KN_STAGE_ASM) return 0;

  if (t->codegen(t, c->mod, c->tm, &kk->art, d)) return -1;
  kk->times.codegen = lap(c);
  if (t->link && t->link(t, &kk->art, d)) return -1;
  kk->times.link = lap(c);

  if (t->load && !c->no_load) {
    if (t->load(t, &kk->art, &kk->loaded, d)) return -1;
    kk->is_loaded = true;
  }
  kk->times.load = lap(c);
  return 0;
}

static void compile_cleanup(compile *c) {
  if (c->has_plan) kn_layout_plan_free(&c->plan);
  if (c->tm) LLVMDisposeTargetMachine(c->tm);
  if (c->mod) LLVMDisposeModule(c->mod);
  if (c->ctx) {
    kn_llvm_context_forget(c->ctx);
    LLVMContextDispose(c->ctx);
  }
  kn_module_free(c->m);
}

/* $KILN_DUMP: 0 with its stages in *mask, -1 with *d when it names something else */
static int env_dump(unsigned *mask, kn_diag *d) {
  const char *e = getenv("KILN_DUMP");
  *mask = 0;
  if (!e || !*e) return 0;
  int m = kn_stage_parse(e);
  if (m < 0)
    return kn_error(d, NULL, no_loc, "KILN_DUMP=%s: not a list of stages (%s)", e,
                    kn_stage_names());
  *mask = (unsigned)m;
  return 0;
}

static int run(compile *c, const kn_module *m, const char *name, kn_kernel **out) {
  *out = NULL;
  if (!c->t || !c->t->arch) return kn_error(c->d, NULL, no_loc, "no target");
  c->kk = calloc(1, sizeof *c->kk);
  if (!c->kk) return kn_error(c->d, NULL, no_loc, "out of memory");
  c->kk->target = c->t;
  c->kk->art.kind = c->t->artifact;
  int rc = compile_run(c, m, name);
  compile_cleanup(c);
  if (rc) {
    kn_kernel_free(c->kk);
    return -1;
  }
  *out = c->kk;
  return 0;
}

int kn_compile(const kn_module *m, const char *name, const kn_target *t,
               const kn_compile_options *opts, kn_kernel **out, kn_diag *d) {
  compile c = {.t = t, .d = d};
  unsigned env;
  *out = NULL;
  if (env_dump(&env, d)) return -1;
  c.dump = env | (opts ? opts->dump_stages : 0);
  c.out = opts && opts->dump_file ? opts->dump_file : stderr;
  c.verify_each = env_verify_each() || (opts && opts->verify_each);
  c.no_load = opts && opts->no_load;
  c.keep_layout = opts && opts->keep_layout;
  c.check_bounds = opts && opts->check_bounds;
  return run(&c, m, name, out);
}

int kn_compile_artifact(const kn_module *m, const char *name, const kn_target *t,
                        const kn_compile_options *opts, kn_artifact *out, kn_diag *d) {
  kn_compile_options o = opts ? *opts : (kn_compile_options){0};
  o.no_load = true;
  kn_kernel *k;
  memset(out, 0, sizeof *out);
  /* checked code takes the checker as an extra argument: its artefact would not run like others */
  if (o.check_bounds)
    return kn_error(d, NULL, no_loc, "artefacts are compiled unchecked (check_bounds is for "
                    "kn_compile and kn_kernel_run_host_checked)");
  if (kn_compile(m, name, t, &o, &k, d)) return -1;
  kn_kernel_take_artifact(k, out);
  kn_kernel_free(k);
  return 0;
}

int kn_pipeline_dump(const kn_module *m, const char *name, const kn_target *t, kn_stage stage,
                     FILE *out, kn_diag *d) {
  /* several stages may be asked for at once: stop after the last of them */
  unsigned last = 0;
  for (unsigned bit = KN_STAGE_IR; bit <= KN_STAGE_ASM; bit <<= 1)
    if ((unsigned)stage & bit) last = bit;
  if (t && t->arch && t->arch->isa == KN_ISA_HOST && (stage & KN_STAGE_LAYOUT))
    return kn_error(d, NULL, no_loc, "layout is a stage of GPU targets, not of %s",
                    t->name);
  compile c = {.t = t, .d = d, .dump = (unsigned)stage, .out = out, .stop_after = last,
               .no_load = true};
  c.verify_each = env_verify_each();
  kn_kernel *k = NULL;
  int rc = run(&c, m, name, &k);
  kn_kernel_free(k);
  return rc;
}

/* ---- the compiled kernel ---- */

void kn_kernel_free(kn_kernel *k) {
  if (!k) return;
  if (k->is_loaded && k->target->unload) k->target->unload(k->target, &k->loaded);
  kn_artifact_free(&k->art);
  free(k->layout_text);
  free(k);
}

const char *kn_kernel_name(const kn_kernel *k) { return k ? k->name : NULL; }
const kn_target *kn_kernel_target(const kn_kernel *k) { return k ? k->target : NULL; }
const kn_artifact *kn_kernel_artifact(const kn_kernel *k) { return k ? &k->art : NULL; }
const kn_compile_times *kn_kernel_times(const kn_kernel *k) { return k ? &k->times : NULL; }
const char *kn_kernel_layout_text(const kn_kernel *k) { return k ? k->layout_text : NULL; }
void *kn_kernel_entry(const kn_kernel *k) { return k && k->is_loaded ? k->loaded.entry : NULL; }
int *kn_kernel_status_word(const kn_kernel *k) { return k && k->is_loaded ? k->loaded.status : NULL; }
int kn_kernel_nparams(const kn_kernel *k) { return k ? k->nparams : 0; }
bool kn_kernel_checked(const kn_kernel *k) { return k && k->checked; }

void kn_kernel_take_artifact(kn_kernel *k, kn_artifact *out) {
  *out = k->art;
  k->art.data = NULL;
  k->art.size = 0;
}
