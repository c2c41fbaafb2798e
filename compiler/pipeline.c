/* pipeline.c — the compiler's pass list, in one place.
 *
 * compile() below is the whole pipeline, read top to bottom:
 *   copy the module -> verify the input -> canonicalize (fold) -> inline calls -> canonicalize
 *   -> lower to LLVM IR for the target -> verify the LLVM module -> LLVM optimisation with the
 *   target machine -> (assembly, for dumps) -> codegen and load.
 * Later GPU work slots in between inlining and lowering (layout assignment, shared-memory plan,
 * software pipelining), each one more line here.
 *
 * The kiln verifier runs on the input always (the input is the user's), and between kiln passes
 * in debug builds, with KILN_VERIFY_EACH=1, or with options.verify_each: a pass that breaks the
 * IR is then reported as an internal error naming the pass.
 *
 * Dumps: KILN_DUMP=ir,lowered,llvm,asm (or options.dump_stages) prints those stages as they are
 * produced, to stderr or options.dump_file, each preceded by one comment line naming it.
 *
 * Checked mode (options.check_bounds) swaps the target's `lower` for its `lower_checked` (a target
 * without one refuses); everything else is the same pipeline.  Host launches go through
 * host_run.c, which also decodes the status word and runs the checker.
 */
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "device.h"
#include "host_run.h"
#include "passes.h"
#include "pipeline.h"
#include "target.h"

struct kn_kernel {
  const kn_target *target;
  char name[128];
  int nparams;
  bool checked;          /* compiled with check_bounds: runs with the checker argument */
  kn_loaded loaded;
};

const kn_target *kn_host_target(void) { return &kn_target_host; }

int kn_stage_parse(const char *s) {
  static const struct { const char *name; int bit; } stages[] = {
      {"ir", KN_STAGE_IR}, {"lowered", KN_STAGE_LOWERED}, {"llvm", KN_STAGE_LLVM},
      {"asm", KN_STAGE_ASM}, {"all", KN_STAGE_IR | KN_STAGE_LOWERED | KN_STAGE_LLVM | KN_STAGE_ASM}};
  int mask = 0;
  while (s && *s) {
    size_t n = strcspn(s, ",");
    bool found = false;
    for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++)
      if (strlen(stages[i].name) == n && strncmp(stages[i].name, s, n) == 0) {
        mask |= stages[i].bit;
        found = true;
      }
    if (!found && n) return -1;
    s += n;
    if (*s == ',') s++;
  }
  return mask;
}

typedef struct compile {
  const kn_target *t;
  kn_module *m;          /* the compile's own copy */
  kn_func *k;
  unsigned dump;         /* kn_stage bits to print */
  FILE *out;
  bool verify_each;
  bool check_bounds;
  unsigned stop_after;   /* a kn_stage bit, or 0 to go all the way to loading */
  kn_diag *d;
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMTargetMachineRef tm;
} compile;

static const kn_loc no_loc = {0};

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
  fprintf(c->out, "; kiln: %s of @%s\n%s", what, c->k->name, text);
  LLVMDisposeMessage(text);
}

static int compile_run(compile *c, const kn_module *src, const char *name, kn_kernel **out) {
  kn_diag *d = c->d;
  const kn_target *t = c->t;

  c->m = kn_module_clone(src);
  if (kn_verify(c->m, d)) return -1;
  c->k = kn_module_find(c->m, name);
  if (!c->k || !c->k->is_kernel)
    return kn_error(d, c->m, no_loc, "no kernel named '@%s' in the module", name);

  /* kiln passes on the tile IR */
  kn_fold(c->m);
  if (check(c, "fold")) return -1;
  if (kn_inline(c->m, d)) return -1;
  if (check(c, "inline")) return -1;
  kn_fold(c->m);
  if (check(c, "fold")) return -1;
  dump_ir(c);
  if (c->stop_after == KN_STAGE_IR) return 0;

  /* to LLVM */
  c->ctx = kn_llvm_context_new();
  int (*lower)(const kn_target *, kn_func *, LLVMContextRef, LLVMModuleRef *, kn_diag *) =
      c->check_bounds ? t->lower_checked : t->lower;
  if (!lower)
    return kn_error(d, NULL, no_loc, "target %s has no checked mode (check_bounds)", t->name);
  if (lower(t, c->k, c->ctx, &c->mod, d)) return -1;
  dump_llvm(c, KN_STAGE_LOWERED, "LLVM IR as lowered");
  if (kn_llvm_verify(c->mod, d)) return -1;
  if (c->stop_after == KN_STAGE_LOWERED) return 0;
  if (!(c->tm = t->machine(t, d))) return -1;
  if (t->optimize(t, c->mod, c->tm, d)) return -1;
  dump_llvm(c, KN_STAGE_LLVM, "LLVM IR after optimisation");
  if (c->stop_after == KN_STAGE_LLVM) return 0;
  if (c->dump & KN_STAGE_ASM) {
    fprintf(c->out, "# kiln: %s assembly of @%s\n", t->name, c->k->name);
    if (t->emit_asm(t, c->mod, c->tm, c->out, d)) return -1;
  }
  if (c->stop_after == KN_STAGE_ASM) return 0;

  /* codegen and load: the target takes the context and module */
  kn_kernel *kk = calloc(1, sizeof *kk);
  if (!kk) return kn_error(d, NULL, no_loc, "out of memory");
  LLVMContextRef ctx = c->ctx;
  LLVMModuleRef mod = c->mod;
  c->ctx = NULL;
  c->mod = NULL;
  if (t->load(t, ctx, mod, c->k->name, &kk->loaded, d)) {
    free(kk);
    return -1;
  }
  kk->target = t;
  snprintf(kk->name, sizeof kk->name, "%s", c->k->name);
  kk->nparams = kn_func_nparams(c->k);
  kk->checked = c->check_bounds;
  *out = kk;
  return 0;
}

static void compile_cleanup(compile *c) {
  if (c->tm) LLVMDisposeTargetMachine(c->tm);
  if (c->mod) LLVMDisposeModule(c->mod);
  if (c->ctx) {
    kn_llvm_context_forget(c->ctx);
    LLVMContextDispose(c->ctx);
  }
  kn_module_free(c->m);
}

static unsigned env_dump(void) {
  const char *e = getenv("KILN_DUMP");
  int mask = e ? kn_stage_parse(e) : 0;
  return mask > 0 ? (unsigned)mask : 0;
}

int kn_compile(const kn_module *m, const char *name, const kn_target *t,
               const kn_compile_options *opts, kn_kernel **out, kn_diag *d) {
  *out = NULL;
  compile c = {.t = t, .d = d};
  c.dump = env_dump() | (opts ? opts->dump_stages : 0);
  c.out = opts && opts->dump_file ? opts->dump_file : stderr;
  c.verify_each = env_verify_each() || (opts && opts->verify_each);
  c.check_bounds = opts && opts->check_bounds;
  int rc = compile_run(&c, m, name, out);
  compile_cleanup(&c);
  return rc;
}

int kn_pipeline_dump(const kn_module *m, const char *name, const kn_target *t, kn_stage stage,
                     FILE *out, kn_diag *d) {
  /* several stages may be asked for at once: stop after the last of them */
  unsigned last = 0;
  for (unsigned bit = KN_STAGE_IR; bit <= KN_STAGE_ASM; bit <<= 1)
    if ((unsigned)stage & bit) last = bit;
  compile c = {.t = t, .d = d, .dump = (unsigned)stage, .out = out, .stop_after = last};
  c.verify_each = env_verify_each();
  kn_kernel *k = NULL;
  int rc = compile_run(&c, m, name, &k);
  compile_cleanup(&c);
  kn_kernel_free(k);
  return rc;
}

void kn_kernel_free(kn_kernel *k) {
  if (!k) return;
  k->target->unload(k->target, &k->loaded);
  free(k);
}

void *kn_kernel_entry(const kn_kernel *k) { return k ? k->loaded.entry : NULL; }
const char *kn_kernel_name(const kn_kernel *k) { return k ? k->name : NULL; }

int kn_kernel_run_host_checked(kn_kernel *k, const kn_argval *args, const int grid[3],
                               const kn_region *regions, int nregions, kn_diag *d) {
  if (!k || !k->loaded.entry)
    return kn_error(d, NULL, no_loc, "kernel is not runnable on the host");
  if (regions && !k->checked)
    return kn_error(d, NULL, no_loc, "@%s was compiled without check_bounds: nothing to check "
                    "its accesses with", k->name);
  char name[136];
  snprintf(name, sizeof name, "@%s", k->name);
  return kn_host_run(name, (kn_host_kernel_fn)k->loaded.entry, k->loaded.status, args,
                     k->nparams, grid, k->checked, regions, nregions, d);
}

int kn_kernel_run_host(kn_kernel *k, const kn_argval *args, const int grid[3], kn_diag *d) {
  return kn_kernel_run_host_checked(k, args, grid, NULL, 0, d);
}
