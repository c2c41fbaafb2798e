/* loop.c — the KV loop of an AMDGPU kernel, statically: which instructions one iteration runs
 * and what llvm-mca's model of the chip says one iteration costs (`kiln inspect --loop`,
 * `kiln compile --loop`, docs/amdgpu.md "The KV loop").
 *
 * No AMD GPU exists where kiln is developed, so the speed of its gfx90a / gfx942 kernels is
 * judged on the code object: the kernel is disassembled (LLVM's MC disassembler, in a child
 * process: the bytes may come from anywhere, and LLVM 22's AMDGPU disassembler crashes on some
 * damaged code), every backward branch closes a loop [its target, the branch], and the loop with
 * the most MFMAs is the KV loop (ties: the shortest, the innermost).  Its instructions, all paths
 * of the body once (an edge block's mask included), are counted by class and handed to llvm-mca
 * as a straight-line block: llvm-mca's cycles per iteration are its scheduling model's steady
 * state for that block on one wave (waitcnts modelled, branches as instructions, no cache
 * misses, no other waves).  A model, not a measurement: good for comparing two schedules of the
 * same work, and for catching regressions.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <llvm-c/Disassembler.h>

#include "amdgpu.h"

static const kn_loc loop_loc = {"code object", 0, 0};

static bool starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static kn_icls classify(const char *m) {
  if (starts(m, "v_mfma")) return KN_ICLS_MFMA;
  if (starts(m, "v_cmp") || starts(m, "v_cndmask")) return KN_ICLS_CMP;
  static const char *trans[] = {"v_exp_", "v_log_", "v_rcp_", "v_rsq_", "v_sqrt_", "v_sin_",
                                "v_cos_"};
  for (size_t i = 0; i < sizeof trans / sizeof trans[0]; i++)
    if (starts(m, trans[i])) return KN_ICLS_TRANS;
  if (starts(m, "v_")) return KN_ICLS_VALU;
  if (starts(m, "ds_read") || starts(m, "ds_load")) return KN_ICLS_LDS_READ;
  if (starts(m, "ds_write") || starts(m, "ds_store")) return KN_ICLS_LDS_WRITE;
  if (starts(m, "ds_")) return KN_ICLS_LDS_OTHER;
  static const char *vmem[] = {"global_", "buffer_", "flat_", "scratch_"};
  for (size_t i = 0; i < sizeof vmem / sizeof vmem[0]; i++)
    if (starts(m, vmem[i])) return strstr(m, "_store") || strstr(m, "_atomic")
                                   ? KN_ICLS_VMEM_STORE : KN_ICLS_VMEM_LOAD;
  if (starts(m, "s_waitcnt")) return KN_ICLS_WAITCNT;
  if (starts(m, "s_branch") || starts(m, "s_cbranch")) return KN_ICLS_BRANCH;
  if (starts(m, "s_nop")) return KN_ICLS_NOP;
  if (starts(m, "s_barrier")) return KN_ICLS_BARRIER;
  if (starts(m, "s_load") || starts(m, "s_buffer_load")) return KN_ICLS_SMEM;
  if (starts(m, "s_")) return KN_ICLS_SALU;
  return KN_ICLS_OTHER;
}

static const char *const icls_name[KN_ICLS_COUNT] = {
    "mfma", "valu", "cmp/cndmask", "exp/trans", "salu", "smem", "ds_read", "ds_write",
    "ds_other", "vmem_load", "vmem_store", "waitcnt", "branch", "nop", "barrier", "other"};

/* one decoded instruction */
typedef struct {
  uint64_t pc;
  uint32_t len;
  uint32_t text;  /* offset of its text in the text buffer */
  kn_icls cls;
  int64_t target; /* a branch's target, else -1 */
} insn;

typedef struct {
  const char *cpu;
  const uint8_t *code;
  size_t n;
} loop_job;

/* what the child sends: this header, then the loop's text */
typedef struct {
  int ok, nloops, ninstr, count[KN_ICLS_COUNT];
  uint64_t begin, end, text_len;
} loop_head;

static int put(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w, n -= (size_t)w;
  }
  return 0;
}

/* in the child: decode everything, find the loops, send the chosen one */
static int loop_child(void *ctx, int fd) {
  const loop_job *j = ctx;
  loop_head h = {0};
  LLVMDisasmContextRef dc = LLVMCreateDisasmCPU("amdgcn-amd-amdhsa", j->cpu, NULL, 0, NULL, NULL);
  if (!dc) return put(fd, &h, sizeof h) ? 1 : 0;
  size_t cap = 1024, ni = 0, tcap = 65536, tlen = 0;
  insn *in = malloc(cap * sizeof *in);
  char *texts = malloc(tcap);
  if (!in || !texts) return 1;
  char text[256];
  for (size_t pc = 0; pc < j->n;) {
    size_t len = LLVMDisasmInstruction(dc, (uint8_t *)(uintptr_t)(j->code + pc), j->n - pc, pc,
                                       text, sizeof text);
    if (len == 0) {  /* data or padding: skipped a dword at a time, as the MFMA count does */
      pc += 4;
      continue;
    }
    const char *s = text;
    while (*s == ' ' || *s == '\t') s++;
    size_t sl = strlen(s);
    if (ni == cap && !(in = realloc(in, (cap *= 2) * sizeof *in))) return 1;
    if (tlen + sl + 2 > tcap && !(texts = realloc(texts, tcap = 2 * (tcap + sl + 2)))) return 1;
    insn *x = &in[ni++];
    x->pc = pc, x->len = (uint32_t)len, x->text = (uint32_t)tlen, x->cls = classify(s);
    x->target = -1;
    /* SOPP branches: the target is pc + 4 + 4 * simm16 (the low half of the word) */
    if (x->cls == KN_ICLS_BRANCH && len == 4) {
      int16_t simm = (int16_t)(j->code[pc] | (j->code[pc + 1] << 8));
      x->target = (int64_t)pc + 4 + 4 * (int64_t)simm;
    }
    memcpy(texts + tlen, s, sl);
    texts[tlen + sl] = '\n';
    tlen += sl + 1;
    pc += len;
  }
  LLVMDisasmDispose(dc);
  /* the loops: [target, branch] for every backward branch; the one with the most MFMAs */
  size_t best_lo = 0, best_hi = 0;
  int best_mfma = -1;
  for (size_t b = 0; b < ni; b++) {
    if (in[b].target < 0 || (uint64_t)in[b].target > in[b].pc) continue;
    h.nloops++;
    size_t lo = b;
    while (lo > 0 && in[lo - 1].pc >= (uint64_t)in[b].target) lo--;
    int mfma = 0;
    for (size_t i = lo; i <= b; i++) mfma += in[i].cls == KN_ICLS_MFMA;
    if (mfma > best_mfma || (mfma == best_mfma && b - lo < best_hi - best_lo)) {
      best_mfma = mfma, best_lo = lo, best_hi = b;
    }
  }
  h.ok = 1;
  size_t t0 = 0, t1 = 0;
  if (h.nloops) {
    h.begin = in[best_lo].pc, h.end = in[best_hi].pc;
    h.ninstr = (int)(best_hi - best_lo + 1);
    for (size_t i = best_lo; i <= best_hi; i++) h.count[in[i].cls]++;
    t0 = in[best_lo].text;
    t1 = best_hi + 1 < ni ? in[best_hi + 1].text : tlen;
    h.text_len = t1 - t0;
  }
  int rc = put(fd, &h, sizeof h) || put(fd, texts + t0, t1 - t0);
  free(in);
  free(texts);
  return rc;
}

int kn_amdgpu_find_loop(const char *cpu, const uint8_t *code, size_t n, kn_amdgpu_loop *out,
                        kn_diag *d) {
  memset(out, 0, sizeof *out);
  out->mca_cycles = -1;
  loop_job j = {cpu, code, n};
  char *buf;
  size_t len;
  int sig = 0;
  int rc = kn_amdgpu_isolated(loop_child, &j, &buf, &len, &sig);
  if (rc == -2) {
    kn_error(d, NULL, loop_loc, "LLVM's %s disassembler %s on %zu bytes of code (signal %d): "
             "the code object is damaged", cpu, sig == SIGALRM ? "did not finish" : "crashed",
             n, sig);
    return -1;
  }
  loop_head h;
  if (rc || len < sizeof h) {
    if (!rc) free(buf);
    kn_error(d, NULL, loop_loc, "could not disassemble %zu bytes of %s code (a child process "
             "runs LLVM's disassembler)", n, cpu);
    return -1;
  }
  memcpy(&h, buf, sizeof h);
  if (!h.ok || h.text_len != len - sizeof h) {
    free(buf);
    kn_error(d, NULL, loop_loc, "LLVM has no %s disassembler", cpu);
    return -1;
  }
  out->nloops = h.nloops, out->ninstr = h.ninstr, out->begin = h.begin, out->end = h.end;
  memcpy(out->count, h.count, sizeof out->count);
  out->text = malloc(h.text_len + 1);
  if (!out->text) {
    free(buf);
    kn_error(d, NULL, loop_loc, "out of memory");
    return -1;
  }
  memcpy(out->text, buf + sizeof h, h.text_len);
  out->text[h.text_len] = 0;
  free(buf);
  return 0;
}

void kn_amdgpu_loop_free(kn_amdgpu_loop *loop) {
  free(loop->text);
  loop->text = NULL;
}

/* ---- llvm-mca --------------------------------------------------------------------------------- */

#define MCA_ITERATIONS 100

/* the llvm-mca to run, into path; false (and why) when there is none */
static bool find_mca(char *path, size_t cap, char *why, size_t whycap) {
  const char *env = getenv("KILN_LLVM_MCA");
  if (env && *env) {
    if (!strcmp(env, "none")) {
      snprintf(why, whycap, "not run (KILN_LLVM_MCA=none)");
      return false;
    }
    snprintf(path, cap, "%s", env);
    if (access(path, X_OK)) {
      snprintf(why, whycap, "not run: KILN_LLVM_MCA=%s is not an executable file", env);
      return false;
    }
    return true;
  }
  const char *p = getenv("PATH");
  while (p && *p) {
    const char *e = strchr(p, ':');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l && l < cap - 16) {
      snprintf(path, cap, "%.*s/llvm-mca-22", (int)l, p);
      if (!access(path, X_OK)) return true;
    }
    p = e ? e + 1 : NULL;
  }
  snprintf(path, cap, "/usr/lib/llvm-22/bin/llvm-mca");
  if (!access(path, X_OK)) return true;
  snprintf(why, whycap, "not run: no llvm-mca-22 on PATH nor /usr/lib/llvm-22/bin/llvm-mca "
           "(KILN_LLVM_MCA names one)");
  return false;
}

void kn_amdgpu_loop_mca(const char *cpu, kn_amdgpu_loop *loop) {
  loop->mca_cycles = -1;
  char prog[320];
  if (!loop->text || !loop->ninstr) {
    snprintf(loop->mca, sizeof loop->mca, "not run: no loop");
    return;
  }
  if (!find_mca(prog, sizeof prog, loop->mca, sizeof loop->mca)) return;
  const char *tmp = getenv("TMPDIR");
  char file[600];
  snprintf(file, sizeof file, "%s/kiln-loop-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int tfd = mkstemp(file);
  if (tfd < 0) {
    snprintf(loop->mca, sizeof loop->mca, "not run: no temporary file (%s)", strerror(errno));
    return;
  }
  bool wrote = !put(tfd, loop->text, strlen(loop->text));
  close(tfd);
  int fds[2];
  if (!wrote || pipe(fds)) {
    unlink(file);
    snprintf(loop->mca, sizeof loop->mca, "not run: cannot write its input");
    return;
  }
  char mcpu[64], iters[32];
  snprintf(mcpu, sizeof mcpu, "-mcpu=%s", cpu);
  snprintf(iters, sizeof iters, "-iterations=%d", MCA_ITERATIONS);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[1]);
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, 0);
    alarm(KN_DISASM_SECONDS);
    char *argv[] = {prog, "-mtriple=amdgcn-amd-amdhsa", mcpu, iters, "-all-views=false",
                    "-summary-view", file, NULL};
    execv(prog, argv);
    _exit(127);
  }
  close(fds[1]);
  char out[8192];
  size_t len = 0;
  for (;;) {
    ssize_t got = read(fds[0], out + len, sizeof out - 1 - len);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    len += (size_t)got;
    if (len == sizeof out - 1) {  /* keep the head, drain the rest */
      char sink[4096];
      while (read(fds[0], sink, sizeof sink) > 0) {}
      break;
    }
  }
  out[len] = 0;
  close(fds[0]);
  int status = 0;
  if (pid > 0)
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  unlink(file);
  const char *tc = strstr(out, "Total Cycles:"), *it = strstr(out, "Iterations:");
  long cycles = 0, n = 0;
  if (pid > 0 && WIFEXITED(status) && !WEXITSTATUS(status) && tc && it &&
      sscanf(tc, "Total Cycles: %ld", &cycles) == 1 && sscanf(it, "Iterations: %ld", &n) == 1 &&
      n > 0) {
    loop->mca_cycles = (double)cycles / (double)n;
    snprintf(loop->mca, sizeof loop->mca, "%.300s", prog);
    return;
  }
  /* the first line of what it said */
  char *nl = strchr(out, '\n');
  if (nl) *nl = 0;
  snprintf(loop->mca, sizeof loop->mca, "%.300s failed (%s): %.200s", prog,
           pid < 0 ? "no process" : WIFSIGNALED(status) ? "killed" : "exit status", out);
}

void kn_amdgpu_loop_format(const char *kernel, const char *cpu, const kn_amdgpu_loop *loop,
                           char *buf, size_t cap) {
  size_t o = 0;
#define OUT(...) (o += (size_t)snprintf(buf + o, o < cap ? cap - o : 0, __VA_ARGS__))
  if (!loop->nloops) {
    OUT("kernel %s: no loop (no backward branch)\n", kernel);
    return;
  }
  OUT("kernel %s: KV loop 0x%llx-0x%llx (of %d loop%s, the most MFMAs): %d instructions per "
      "iteration\n", kernel, (unsigned long long)loop->begin, (unsigned long long)loop->end,
      loop->nloops, loop->nloops == 1 ? "" : "s", loop->ninstr);
  OUT(" ");
  for (int c = 0; c < KN_ICLS_COUNT; c++) OUT(" %s %d", icls_name[c], loop->count[c]);
  OUT("\n");
  if (loop->mca_cycles >= 0)
    OUT("  llvm-mca -mcpu=%s: %.1f cycles per iteration (%s, %d iterations)\n", cpu,
        loop->mca_cycles, loop->mca, MCA_ITERATIONS);
  else
    OUT("  llvm-mca -mcpu=%s: %s\n", cpu, loop->mca);
#undef OUT
  if (o >= cap && cap) buf[cap - 1] = 0;
}
