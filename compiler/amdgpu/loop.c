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
  int ok, nloops, ninstr, count[KN_ICLS_COUNT], hot_ninstr, hot_count[KN_ICLS_COUNT];
  uint64_t begin, end, text_len, hot_text_len;
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

/* The control-flow graph of the decoded kernel: basic blocks (a leader at the first
 * instruction, at every branch target, after every branch and after s_endpgm), block x holding
 * instructions [first[x], first[x + 1]); succ[2x], succ[2x + 1] its successors (-1: none): the
 * next block unless it ends in s_branch or s_endpgm, and a branch's target block. */
typedef struct {
  int nb;
  size_t *first;
  int *succ;
} cfg;

/* the block starting exactly at pc, or -1 */
static int block_at(const cfg *g, const insn *in, uint64_t pc) {
  int lo = 0, hi = g->nb - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    uint64_t p = in[g->first[mid]].pc;
    if (p == pc) return mid;
    if (p < pc) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

static bool is_text(const char *texts, const insn *x, const char *m) {
  return starts(texts + x->text, m);
}

static int cfg_build(cfg *g, const insn *in, size_t ni, const char *texts) {
  bool *lead = calloc(ni + 1, sizeof *lead);
  if (!lead) return -1;
  lead[0] = true;
  for (size_t i = 0; i < ni; i++) {
    bool ends = in[i].cls == KN_ICLS_BRANCH || is_text(texts, &in[i], "s_endpgm");
    if (ends) lead[i + 1] = true;
    if (in[i].target < 0) continue;
    size_t lo = 0, hi = ni;  /* the target's instruction: pcs ascend */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (in[mid].pc < (uint64_t)in[i].target) lo = mid + 1;
      else hi = mid;
    }
    if (lo < ni && in[lo].pc == (uint64_t)in[i].target) lead[lo] = true;
  }
  g->nb = 0;
  for (size_t i = 0; i < ni; i++) g->nb += lead[i];
  g->first = malloc(((size_t)g->nb + 1) * sizeof *g->first);
  g->succ = malloc(2 * (size_t)g->nb * sizeof *g->succ);
  if (!g->first || !g->succ) {
    free(lead);
    return -1;
  }
  int x = 0;
  for (size_t i = 0; i < ni; i++)
    if (lead[i]) g->first[x++] = i;
  g->first[g->nb] = ni;
  free(lead);
  for (x = 0; x < g->nb; x++) {
    const insn *last = &in[g->first[x + 1] - 1];
    bool uncond = is_text(texts, last, "s_branch") || is_text(texts, last, "s_endpgm");
    g->succ[2 * x] = !uncond && x + 1 < g->nb ? x + 1 : -1;
    g->succ[2 * x + 1] = last->target >= 0 ? block_at(g, in, (uint64_t)last->target) : -1;
  }
  return 0;
}

/* The loop of header hb into set[]: the blocks reachable from hb that reach one of its back
 * edges (a block at or after hb branching to it) without passing through hb again; every path
 * of one iteration.  So a loop whose blocks LLVM laid out after its first backward branch (an
 * edge path placed past the latch, with a back edge of its own) is whole, while the code before
 * it (which may enter it past hb) and after it (the exit) is not in it.  fwd: room for g->nb. */
static void loop_blocks(const cfg *g, const insn *in, int hb, bool *set, bool *fwd) {
  memset(set, 0, (size_t)g->nb * sizeof *set);
  memset(fwd, 0, (size_t)g->nb * sizeof *fwd);
  fwd[hb] = true;
  for (bool grew = true; grew;) {  /* successors from hb, to a fixed point (few blocks) */
    grew = false;
    for (int y = 0; y < g->nb; y++)
      for (int e = 0; fwd[y] && e < 2; e++) {
        int s = g->succ[2 * y + e];
        if (s >= 0 && !fwd[s]) fwd[s] = grew = true;
      }
  }
  set[hb] = true;
  for (int x = hb; x < g->nb; x++)
    if (fwd[x] && g->succ[2 * x + 1] == hb && in[g->first[x + 1] - 1].pc >= in[g->first[hb]].pc)
      set[x] = true;
  for (bool grew = true; grew;) {  /* predecessors of the set, from hb's reach, not through hb */
    grew = false;
    for (int y = 0; y < g->nb; y++)
      for (int e = 0; fwd[y] && !set[y] && e < 2; e++) {
        int s = g->succ[2 * y + e];
        if (s >= 0 && s != hb && set[s]) set[y] = grew = true;
      }
  }
}

/* The interior path of the loop (set[], header hb): a depth-first walk over the loop's blocks
 * from hb to a back edge, each path scored by its MFMAs (most first) and then its instructions
 * (fewest); an s_cbranch_execz is followed only to its next block, an s_cbranch_execnz only to
 * its target.  A block appears once per path; the walk is bounded (KN_HOT_PATHS paths).  The
 * best path's blocks go to best[] in order, their count to *nbest. */
enum { KN_HOT_PATHS = 1 << 16 };
typedef struct {
  const cfg *g;
  const insn *in;
  const char *texts;
  const bool *set;
  int hb, *path, *best, nbest, best_mfma, best_n, walked;
  bool *on;
} hot_walk;

static void hot_dfs(hot_walk *w, int x, int depth, int mfma, int n) {
  if (w->walked >= KN_HOT_PATHS) return;
  w->path[depth++] = x;
  w->on[x] = true;
  for (size_t i = w->g->first[x]; i < w->g->first[x + 1]; i++)
    mfma += w->in[i].cls == KN_ICLS_MFMA, n++;
  const insn *last = &w->in[w->g->first[x + 1] - 1];
  bool execz = is_text(w->texts, last, "s_cbranch_execz"),
       execnz = is_text(w->texts, last, "s_cbranch_execnz");
  for (int e = 0; e < 2; e++) {
    int s = w->g->succ[2 * x + e];
    if (s < 0 || (execz && e == 1) || (execnz && e == 0 && w->g->succ[2 * x + 1] >= 0)) continue;
    if (s == w->hb) {  /* a back edge: one iteration */
      w->walked++;
      if (mfma > w->best_mfma || (mfma == w->best_mfma && n < w->best_n)) {
        w->best_mfma = mfma, w->best_n = n, w->nbest = depth;
        memcpy(w->best, w->path, (size_t)depth * sizeof *w->best);
      }
    } else if (w->set[s] && !w->on[s]) {
      hot_dfs(w, s, depth, mfma, n);
    }
  }
  w->on[x] = false;
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
  cfg g = {0};
  if (ni && cfg_build(&g, in, ni, texts)) return 1;
  /* the loops: one per header (the target of a backward branch), its blocks the natural
   * loop's; the one with the most MFMAs */
  int best = -1, best_mfma = -1, best_n = 0;
  bool *in_loop = calloc(g.nb ? g.nb : 1, sizeof *in_loop);
  bool *best_set = calloc(g.nb ? g.nb : 1, sizeof *best_set);
  bool *fwd = calloc(g.nb ? g.nb : 1, sizeof *fwd);
  if (!in_loop || !best_set || !fwd) return 1;
  for (size_t b = 0; b < ni; b++) {
    if (in[b].target < 0 || (uint64_t)in[b].target > in[b].pc) continue;
    h.nloops++;
    int hb = block_at(&g, in, (uint64_t)in[b].target);
    if (hb < 0 || (hb == best && best >= 0)) continue;
    int mfma = 0, n = 0;
    loop_blocks(&g, in, hb, in_loop, fwd);
    for (int x = 0; x < g.nb; x++)
      for (size_t i = g.first[x]; in_loop[x] && i < g.first[x + 1]; i++)
        mfma += in[i].cls == KN_ICLS_MFMA, n++;
    if (mfma > best_mfma || (mfma == best_mfma && n < best_n)) {
      best_mfma = mfma, best_n = n, best = hb;
      memcpy(best_set, in_loop, (size_t)g.nb * sizeof *best_set);
    }
  }
  h.ok = 1;
  char *out = malloc(2 * tlen + 1);
  if (!out) return 1;
  size_t olen = 0;
  if (best >= 0) {  /* the loop's blocks in address order, as one straight block */
    h.begin = in[g.first[best]].pc;
    for (int x = 0; x < g.nb; x++)
      for (size_t i = g.first[x]; best_set[x] && i < g.first[x + 1]; i++) {
        h.count[in[i].cls]++, h.ninstr++, h.end = in[i].pc;
        size_t t1 = i + 1 < ni ? in[i + 1].text : tlen;
        memcpy(out + olen, texts + in[i].text, t1 - in[i].text);
        olen += t1 - in[i].text;
      }
    h.text_len = olen;
    /* the interior path, its text after the loop's */
    int *path = malloc(2 * (size_t)g.nb * sizeof *path);
    bool *on = calloc((size_t)g.nb, sizeof *on);
    if (!path || !on) return 1;
    hot_walk w = {&g, in, texts, best_set, best, path, path + g.nb, 0, -1, 0, 0, on};
    hot_dfs(&w, best, 0, 0, 0);
    for (int k = 0; k < w.nbest; k++)
      for (size_t i = g.first[w.best[k]]; i < g.first[w.best[k] + 1]; i++) {
        h.hot_count[in[i].cls]++, h.hot_ninstr++;
        size_t t1 = i + 1 < ni ? in[i + 1].text : tlen;
        memcpy(out + olen, texts + in[i].text, t1 - in[i].text);
        olen += t1 - in[i].text;
      }
    h.hot_text_len = olen - h.text_len;
    free(path);
    free(on);
  }
  int rc = put(fd, &h, sizeof h) || put(fd, out, olen);
  free(out);
  free(in_loop);
  free(best_set);
  free(fwd);
  free(g.first);
  free(g.succ);
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
  if (!h.ok || h.text_len + h.hot_text_len != len - sizeof h) {
    free(buf);
    kn_error(d, NULL, loop_loc, "LLVM has no %s disassembler", cpu);
    return -1;
  }
  out->nloops = h.nloops, out->ninstr = h.ninstr, out->begin = h.begin, out->end = h.end;
  out->hot_ninstr = h.hot_ninstr;
  memcpy(out->count, h.count, sizeof out->count);
  memcpy(out->hot_count, h.hot_count, sizeof out->hot_count);
  out->text = malloc(h.text_len + 1);
  out->hot_text = malloc(h.hot_text_len + 1);
  if (!out->text || !out->hot_text) {
    free(buf);
    kn_amdgpu_loop_free(out);
    kn_error(d, NULL, loop_loc, "out of memory");
    return -1;
  }
  memcpy(out->text, buf + sizeof h, h.text_len);
  out->text[h.text_len] = 0;
  memcpy(out->hot_text, buf + sizeof h + h.text_len, h.hot_text_len);
  out->hot_text[h.hot_text_len] = 0;
  free(buf);
  return 0;
}

void kn_amdgpu_loop_free(kn_amdgpu_loop *loop) {
  free(loop->text);
  free(loop->hot_text);
  loop->text = loop->hot_text = NULL;
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

/* llvm-mca program prog on text: its cycles per iteration, or < 0 with why[] */
static double run_mca(char *prog, const char *cpu, const char *text, char *why, size_t whycap) {
  const char *tmp = getenv("TMPDIR");
  char file[600];
  snprintf(file, sizeof file, "%s/kiln-loop-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  int tfd = mkstemp(file);
  if (tfd < 0) {
    snprintf(why, whycap, "not run: no temporary file (%s)", strerror(errno));
    return -1;
  }
  bool wrote = !put(tfd, text, strlen(text));
  close(tfd);
  int fds[2];
  if (!wrote || pipe(fds)) {
    unlink(file);
    snprintf(why, whycap, "not run: cannot write its input");
    return -1;
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
    snprintf(why, whycap, "%.300s", prog);
    return (double)cycles / (double)n;
  }
  /* the first line of what it said */
  char *nl = strchr(out, '\n');
  if (nl) *nl = 0;
  snprintf(why, whycap, "%.300s failed (%s): %.200s", prog,
           pid < 0 ? "no process" : WIFSIGNALED(status) ? "killed" : "exit status", out);
  return -1;
}

void kn_amdgpu_loop_mca(const char *cpu, kn_amdgpu_loop *loop) {
  loop->mca_cycles = loop->hot_mca_cycles = -1;
  char prog[320], why[sizeof loop->mca];
  if (!loop->text || !loop->ninstr) {
    snprintf(loop->mca, sizeof loop->mca, "not run: no loop");
    return;
  }
  if (!find_mca(prog, sizeof prog, loop->mca, sizeof loop->mca)) return;
  loop->mca_cycles = run_mca(prog, cpu, loop->text, loop->mca, sizeof loop->mca);
  if (loop->mca_cycles >= 0 && loop->hot_text && loop->hot_ninstr)
    loop->hot_mca_cycles = loop->hot_ninstr == loop->ninstr
                               ? loop->mca_cycles
                               : run_mca(prog, cpu, loop->hot_text, why, sizeof why);
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
  if (loop->hot_ninstr && loop->hot_ninstr != loop->ninstr) {
    OUT("  interior iteration (the path with every MFMA, edge-only blocks skipped): %d "
        "instructions", loop->hot_ninstr);
    if (loop->hot_mca_cycles >= 0) OUT(", llvm-mca %.1f cycles", loop->hot_mca_cycles);
    OUT("\n ");
    for (int c = 0; c < KN_ICLS_COUNT; c++) OUT(" %s %d", icls_name[c], loop->hot_count[c]);
    OUT("\n");
  }
#undef OUT
  if (o >= cap && cap) buf[cap - 1] = 0;
}
