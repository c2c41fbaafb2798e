/* ptxas.c — running NVIDIA's ptxas on PTX text and reading its resource report (see ptxas.h).
 *
 * One run: make a private directory (mkdtemp, 0700) under $TMPDIR or /tmp, write the PTX to
 * in.ptx, posix_spawn `ptxas -arch=A -O3 -v [-maxrregcount=N] -o out.cubin in.ptx` with stdin
 * from /dev/null and stdout+stderr into one pipe, read the pipe to EOF, wait, then parse the log
 * and read the cubin; the directory is removed whatever happened.  ptxas needs a file to read
 * (it does not take PTX on stdin) and always writes an output file (elf.o in the current
 * directory unless told otherwise), hence the directory.  No shell is involved, so nothing in the
 * PTX or the options is ever interpreted; the pipe is O_CLOEXEC so concurrent spawns on other
 * threads do not inherit it (an inherited write end would keep our read from seeing EOF).
 *
 * The -v report has had the same shape since CUDA 5 (checked against 13.0):
 *   ptxas info    : Compiling entry function 'k' for 'sm_90a'
 *   ptxas info    : Function properties for k
 *       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 14 registers, used 0 barriers, 1024 bytes smem, 380 bytes cmem[0]
 * The "Used" line belongs to the entry being compiled; "Function properties" lines also appear
 * for non-inlined device functions, which get their own entries (registers 0).  The items of
 * the "Used" line vary between versions (barriers and smem are left out when unused by some), so
 * it is read item by item.
 */
#define _GNU_SOURCE /* pipe2 */
#include "ptxas.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* a log larger than this is cut (a runaway ptxas must not exhaust memory) */
#define KN_PTXAS_LOG_MAX ((size_t)16 << 20)

/* ---- finding ptxas ---- */

static bool executable(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

kn_status kn_ptxas_find(char *path, size_t path_size, kn_diag *d) {
  if (!path || path_size == 0) return kn_diag_set(d, KN_E_INVALID, "no path buffer");
  path[0] = '\0';
  const char *env = getenv("KILN_PTXAS");
  if (env && *env) {
    if (strcmp(env, "none") == 0)
      return kn_diag_set(d, KN_E_NODEV,
                  "ptxas not found (disabled by KILN_PTXAS=none)");
    if (!executable(env))
      return kn_diag_set(d, KN_E_NODEV,
                  "ptxas not found (KILN_PTXAS=%s is not an executable file; set KILN_PTXAS)",
                  env);
    if (strlen(env) >= path_size) return kn_diag_set(d, KN_E_INVALID, "path too long");
    strcpy(path, env);
    return KN_OK;
  }
  const char *pathvar = getenv("PATH");
  if (pathvar) {
    const char *p = pathvar;
    while (*p) {
      size_t n = strcspn(p, ":");
      char cand[4096];
      /* an empty PATH element means the current directory */
      if (n == 0) snprintf(cand, sizeof cand, "./ptxas");
      else if (n < sizeof cand - 7) snprintf(cand, sizeof cand, "%.*s/ptxas", (int)n, p);
      else cand[0] = '\0';
      if (cand[0] && executable(cand) && strlen(cand) < path_size) {
        strcpy(path, cand);
        return KN_OK;
      }
      p += n;
      if (*p == ':') p++;
    }
  }
  static const char fallback[] = "/usr/local/cuda/bin/ptxas";
  if (executable(fallback) && sizeof fallback <= path_size) {
    strcpy(path, fallback);
    return KN_OK;
  }
  return kn_diag_set(d, KN_E_NODEV,
              "ptxas not found (set KILN_PTXAS; searched PATH and %s)", fallback);
}

/* ---- parsing the -v report ---- */

typedef struct klist {
  kn_ptxas_kernel *v;
  int n, cap;
  unsigned char *has_used; /* per entry: 1 if a "Used" line was seen, 2 if not an entry */
} klist;

static int klist_find_or_add(klist *l, const char *name, size_t len, bool entry) {
  for (int i = 0; i < l->n; i++)
    if (strlen(l->v[i].name) == len && strncmp(l->v[i].name, name, len) == 0) {
      if (entry) l->has_used[i] = 0;
      return i;
    }
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 8;
    kn_ptxas_kernel *v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    unsigned char *h = realloc(l->has_used, (size_t)cap);
    if (!h) return -1;
    l->has_used = h;
    l->cap = cap;
  }
  kn_ptxas_kernel *k = &l->v[l->n];
  memset(k, 0, sizeof *k);
  snprintf(k->name, sizeof k->name, "%.*s", (int)len, name);
  l->has_used[l->n] = entry ? 0 : 2;
  return l->n++;
}

/* the quoted name after `key` in line ('name'), or NULL */
static const char *quoted_after(const char *line, const char *key, size_t *len) {
  const char *p = strstr(line, key);
  if (!p) return NULL;
  p += strlen(key);
  if (*p != '\'') return NULL;
  p++;
  const char *e = strchr(p, '\'');
  if (!e) return NULL;
  *len = (size_t)(e - p);
  return p;
}

/* reads the comma-separated "N unit" items of a "Used ..." line into k */
static void used_items(const char *s, kn_ptxas_kernel *k) {
  while (*s) {
    while (*s == ' ' || *s == ',') s++;
    /* "used N barriers" / "Used N registers" start with a word, "N bytes smem" with a number */
    const char *q = s;
    if (strncmp(q, "Used ", 5) == 0 || strncmp(q, "used ", 5) == 0) q += 5;
    if (!isdigit((unsigned char)*q)) {
      s += strcspn(s, ",");
      continue;
    }
    char *end;
    long v = strtol(q, &end, 10);
    while (*end == ' ') end++;
    if (strncmp(end, "registers", 9) == 0) k->registers = (int)v;
    else if (strncmp(end, "barriers", 8) == 0) k->barriers = (int)v;
    else if (strncmp(end, "bytes smem", 10) == 0) k->shared_bytes = (int)v;
    else if (strncmp(end, "bytes cmem[0]", 13) == 0) k->const_bytes = (int)v;
    s = end + strcspn(end, ",");
  }
}

/* "N bytes stack frame, N bytes spill stores, N bytes spill loads" */
static bool frame_line(const char *s, kn_ptxas_kernel *k) {
  int frame, st, ld;
  if (sscanf(s, " %d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &frame,
             &st, &ld) != 3)
    return false;
  k->stack_frame = frame;
  k->spill_stores = st;
  k->spill_loads = ld;
  return true;
}

kn_status kn_ptxas_parse(const char *log, kn_ptxas_kernel **out, int *n, kn_diag *d) {
  *out = NULL;
  *n = 0;
  klist l = {0};
  int entry = -1, props = -1;
  const char *line = log ? log : "";
  while (*line) {
    size_t len = strcspn(line, "\n");
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
    const char *name;
    size_t nlen;
    if ((name = quoted_after(buf, "Compiling entry function ", &nlen))) {
      entry = klist_find_or_add(&l, name, nlen, true);
      if (entry < 0) goto oom;
      size_t alen;
      const char *arch = quoted_after(buf + (name - buf) + nlen + 1, " for ", &alen);
      if (arch) snprintf(l.v[entry].arch, sizeof l.v[entry].arch, "%.*s", (int)alen, arch);
    } else if ((name = strstr(buf, "Function properties for "))) {
      name += strlen("Function properties for ");
      nlen = strcspn(name, " \r");
      props = klist_find_or_add(&l, name, nlen, false);
      if (props < 0) goto oom;
    } else if (strstr(buf, "bytes stack frame")) {
      if (props >= 0) frame_line(buf, &l.v[props]);
    } else if (strstr(buf, ": Used ") && entry >= 0) {
      used_items(strstr(buf, ": Used ") + 2, &l.v[entry]);
      l.has_used[entry] = 1;
    }
    line += len;
    if (*line == '\n') line++;
  }
  for (int i = 0; i < l.n; i++)
    if (l.has_used[i] == 0) {
      kn_diag_set(d, KN_E_CORRUPT, "the report of entry function '%s' has no \"Used\" line",
                  l.v[i].name);
      free(l.v);
      free(l.has_used);
      return KN_E_CORRUPT;
    }
  free(l.has_used);
  *out = l.v;
  *n = l.n;
  return KN_OK;
oom:
  free(l.v);
  free(l.has_used);
  return kn_diag_set(d, KN_E_NOMEM, "out of memory reading the ptxas report");
}

/* ---- running it ---- */

static bool arch_ok(const char *a) {
  if (!a || strncmp(a, "sm_", 3) != 0 || !isdigit((unsigned char)a[3])) return false;
  const char *p = a + 3;
  while (isdigit((unsigned char)*p)) p++;
  if (*p && !(islower((unsigned char)*p) && p[1] == '\0')) return false; /* sm_90a, sm_100f */
  return strlen(a) < 16;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* reads a whole file into malloc'd memory */
static int read_file(const char *path, void **out, size_t *size) {
  *out = NULL;
  *size = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) {
    fclose(f);
    return -1;
  }
  for (;;) {
    if (n == cap) {
      char *nb = realloc(buf, cap * 2);
      if (!nb) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = nb;
      cap *= 2;
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    return -1;
  }
  *out = buf;
  *size = n;
  return 0;
}

/* the error lines of a ptxas log (those with "error"/"fatal"), or the whole log when none */
static void error_lines(const char *log, char *out, size_t n) {
  size_t used = 0;
  out[0] = '\0';
  for (const char *line = log; *line && used + 1 < n;) {
    size_t len = strcspn(line, "\n");
    char buf[1024];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
    if (strstr(buf, "error") || strstr(buf, "fatal")) {
      int w = snprintf(out + used, n - used, "%s%s", used ? "\n" : "", buf);
      if (w < 0) break;
      used += (size_t)w;
      if (used >= n) used = n - 1;
    }
    line += len;
    if (*line == '\n') line++;
  }
  if (!out[0]) snprintf(out, n, "%s", log);
}

static void remove_dir(const char *dir, const char *in, const char *outp) {
  unlink(in);
  unlink(outp);
  rmdir(dir);
}

kn_status kn_ptxas_run(const char *ptx, size_t len, const kn_ptxas_options *opts,
                       kn_ptxas_result *out, kn_diag *d) {
  if (out) memset(out, 0, sizeof *out);
  kn_diag_clear(d);
  if (!ptx || !opts || !out) return kn_diag_set(d, KN_E_INVALID, "NULL argument");
  if (!arch_ok(opts->arch))
    return kn_diag_set(d, KN_E_INVALID, "bad ptxas architecture '%s'",
                opts->arch ? opts->arch : "(null)");
  char exe[512];
  kn_status st = kn_ptxas_find(exe, sizeof exe, d);
  if (st != KN_OK) return st;

  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  char dir[4096], in[4200], outp[4200];
  if (snprintf(dir, sizeof dir, "%s/kiln-ptxas-XXXXXX", tmp) >= (int)sizeof dir)
    return kn_diag_set(d, KN_E_IO, "TMPDIR too long");
  if (!mkdtemp(dir))
    return kn_diag_set(d, KN_E_IO, "mkdtemp %s: %s", dir, strerror(errno));
  snprintf(in, sizeof in, "%s/in.ptx", dir);
  snprintf(outp, sizeof outp, "%s/out.cubin", dir);

  int fd = open(in, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || write_all(fd, ptx, len) != 0 || close(fd) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    remove_dir(dir, in, outp);
    return kn_diag_set(d, KN_E_IO, "cannot write %s: %s", in, strerror(e));
  }

  char archopt[32], optopt[8], regopt[32];
  snprintf(archopt, sizeof archopt, "-arch=%s", opts->arch);
  int o = opts->opt_level >= 1 && opts->opt_level <= 3 ? opts->opt_level : 3;
  snprintf(optopt, sizeof optopt, "-O%d", o);
  char *argv[12];
  int argc = 0;
  argv[argc++] = exe;
  argv[argc++] = archopt;
  argv[argc++] = optopt;
  argv[argc++] = "-v";
  if (opts->max_registers > 0) {
    snprintf(regopt, sizeof regopt, "-maxrregcount=%d", opts->max_registers);
    argv[argc++] = regopt;
  }
  argv[argc++] = "-o";
  argv[argc++] = outp;
  argv[argc++] = in;
  argv[argc] = NULL;

  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    int e = errno;
    remove_dir(dir, in, outp);
    return kn_diag_set(d, KN_E_IO, "pipe: %s", strerror(e));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
  posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
  pid_t pid;
  int se = posix_spawn(&pid, exe, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(pfd[1]);
  if (se != 0) {
    close(pfd[0]);
    remove_dir(dir, in, outp);
    return kn_diag_set(d, KN_E_IO, "cannot run %s: %s", exe, strerror(se));
  }

  size_t cap = 4096, n = 0;
  char *log = malloc(cap);
  bool oom = !log;
  for (;;) {
    char chunk[4096];
    ssize_t r = read(pfd[0], chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (oom || n + (size_t)r + 1 > KN_PTXAS_LOG_MAX) continue; /* drain, keep what fits */
    if (n + (size_t)r + 1 > cap) {
      while (n + (size_t)r + 1 > cap) cap *= 2;
      char *nl = realloc(log, cap);
      if (!nl) {
        oom = true;
        continue;
      }
      log = nl;
    }
    memcpy(log + n, chunk, (size_t)r);
    n += (size_t)r;
  }
  close(pfd[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (oom) {
    free(log);
    remove_dir(dir, in, outp);
    return kn_diag_set(d, KN_E_NOMEM, "out of memory reading ptxas's output");
  }
  log[n] = '\0';

  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    char lines[3072];
    error_lines(log, lines, sizeof lines);
    if (WIFSIGNALED(wstatus))
      kn_diag_set(d, KN_E_COMPILE, "%s %s killed by signal %d:\n%s", exe, archopt,
           WTERMSIG(wstatus), lines);
    else
      kn_diag_set(d, KN_E_COMPILE, "%s %s failed (exit %d):\n%s", exe, archopt,
           WEXITSTATUS(wstatus), lines);
    free(log);
    remove_dir(dir, in, outp);
    return KN_E_COMPILE;
  }

  kn_diag why;
  st = kn_ptxas_parse(log, &out->kernels, &out->nkernels, &why);
  if (st != KN_OK) {
    kn_diag_set(d, st, "%s -v report: %s:\n%s", exe, why.message, log);
    free(log);
    remove_dir(dir, in, outp);
    return st;
  }
  if (opts->want_cubin && read_file(outp, &out->cubin, &out->cubin_size) != 0) {
    int e = errno;
    kn_ptxas_result_free(out);
    free(log);
    remove_dir(dir, in, outp);
    return kn_diag_set(d, KN_E_IO, "cannot read %s: %s", outp, strerror(e));
  }
  remove_dir(dir, in, outp);
  out->log = log;
  snprintf(out->ptxas, sizeof out->ptxas, "%s", exe);
  return KN_OK;
}

void kn_ptxas_result_free(kn_ptxas_result *r) {
  if (!r) return;
  free(r->kernels);
  free(r->cubin);
  free(r->log);
  memset(r, 0, sizeof *r);
}

const kn_ptxas_kernel *kn_ptxas_find_kernel(const kn_ptxas_result *r, const char *name) {
  if (!r || !name) return NULL;
  for (int i = 0; i < r->nkernels; i++)
    if (strcmp(r->kernels[i].name, name) == 0) return &r->kernels[i];
  return NULL;
}
