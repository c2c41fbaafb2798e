/* aot.c — `kiln aot MANIFEST -o DIR [-j N] [--emit-c NAME]`: ahead-of-time bundles.
 *
 * The manifest (docs/aot.md) lists kernels, one per line: a name, the descriptor (dtype, head
 * dim, variant), the architectures, the tiling ("default", "tuned" or forced) and the seqlen_q
 * range it serves.  Every (kernel, architecture) pair is one job; N threads take jobs from one
 * counter, each compiling with the one pipeline (kn_compile_artifact) into memory.  Compiles
 * share nothing, except lld: AMDGPU links are serialised inside kn_amdgpu_link (lld keeps global
 * state), so on many cores the links queue while the rest runs in parallel.  ptxas, when found,
 * runs per NVIDIA job in its own process and directory.
 *
 * Each kernel gets a unique symbol (attn_fwd_<name>, with the range when it has one): the
 * template's "attn_fwd" is renamed in the module before compiling, so code objects and PTX of
 * many kernels can be loaded side by side and a symbol says which entry it is.  The outputs,
 * written only after every job succeeded (a failed job fails the command and writes nothing
 * but its message): per kernel one clang offload bundle with every AMD architecture
 * (<symbol>.hipfb, runtime/bundle.h), per NVIDIA architecture the PTX (<symbol>.<sm>.ptx) and,
 * with ptxas, the cubin (<symbol>.<sm>.cubin), and index.kiln saying which entry serves which
 * descriptor and shape and how to launch it (tiling, grid rule, threads, shared memory).
 */
#include "aot.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch.h"
#include "cache.h"
#include "codeobj.h"
#include "ir.h"
#include "kiln.h"
#include "pipeline.h"
#include "ptxas.h"
#include "target.h"
#include "tunedb.h"

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2 };

/* ---- the manifest ---- */

typedef struct mcur {
  const char *file, *line_start;
  int line;
  char *err;
  size_t n;
} mcur;

__attribute__((format(printf, 3, 4))) static int merr(const mcur *c, const char *at,
                                                     const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(c->err, c->n, "%s:%d:%d: %s", c->file, c->line, (int)(at - c->line_start) + 1, msg);
  return -1;
}

static bool word(const char *s, const char *e, const char *w) {
  return (size_t)(e - s) == strlen(w) && !memcmp(s, w, (size_t)(e - s));
}

static int int_of(const char *s, const char *e, int lo, int hi, int *out) {
  if (s == e || e - s > 10) return -1;
  long long v = 0;
  for (const char *q = s; q < e; q++) {
    if (*q < '0' || *q > '9') return -1;
    v = v * 10 + (*q - '0');
  }
  if (v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* variant=w1,w2,...: the descriptor's flags */
static int parse_variant(const mcur *c, const char *v, const char *ve, kn_attn_desc *d) {
  for (const char *w = v; w < ve;) {
    const char *we = memchr(w, ',', (size_t)(ve - w));
    if (!we) we = ve;
    if (word(w, we, "none")) {
    } else if (word(w, we, "causal")) d->causal = 1;
    else if (word(w, we, "causal_top_left")) d->causal = 2;
    else if (word(w, we, "lse")) d->has_lse = true;
    else if (word(w, we, "window")) d->window = true;
    else if (word(w, we, "softcap")) d->softcap = true;
    else if (word(w, we, "alibi")) d->alibi = true;
    else if (word(w, we, "bias")) d->bias = true;
    else if (word(w, we, "document")) d->document = true;
    else if (word(w, we, "prefix")) d->prefix = true;
    else if (word(w, we, "varlen") || word(w, we, "paged")) {
      int layout = word(w, we, "varlen") ? KN_ATTN_VARLEN : KN_ATTN_PAGED;
      if (d->layout && d->layout != layout)
        return merr(c, w, "varlen and paged are two call shapes; a kernel has one");
      d->layout = layout;
    } else
      return merr(c, w, "unknown variant '%.*s' (none, causal, causal_top_left, lse, window, "
                  "softcap, alibi, bias, document, prefix, varlen, paged)", (int)(we - w), w);
    w = we + 1;
  }
  return 0;
}

/* config=default|tuned|block_m=64,block_n=64[,warps=4][,stages=2][,wgmma=1] */
static int parse_config(const mcur *c, const char *v, const char *ve, aot_kernel *k) {
  if (word(v, ve, "default")) return k->config = AOT_DEFAULT, 0;
  if (word(v, ve, "tuned")) return k->config = AOT_TUNED, 0;
  k->config = AOT_FORCED;
  k->forced = (kn_attn_config){0};
  for (const char *w = v; w < ve;) {
    const char *we = memchr(w, ',', (size_t)(ve - w));
    if (!we) we = ve;
    const char *eq = memchr(w, '=', (size_t)(we - w));
    int x;
    if (!eq || int_of(eq + 1, we, 0, 1 << 20, &x))
      return merr(c, w, "config is default, tuned, or block_m=N,block_n=N[,warps=N][,stages=N]"
                  "[,wgmma=0|1]");
    if (word(w, eq, "block_m")) k->forced.block_m = x;
    else if (word(w, eq, "block_n")) k->forced.block_n = x;
    else if (word(w, eq, "warps")) k->forced.warps = x;
    else if (word(w, eq, "stages")) k->forced.stages = x;
    else if (word(w, eq, "wgmma")) k->forced.wgmma = x != 0;
    else return merr(c, w, "unknown tiling field '%.*s'", (int)(eq - w), w);
    w = we + 1;
  }
  if (!k->forced.block_m || !k->forced.block_n)
    return merr(c, v, "a forced tiling needs block_m and block_n");
  return 0;
}

static int parse_archs(const mcur *c, const char *v, const char *ve, aot_kernel *k) {
  for (const char *w = v; w < ve;) {
    const char *we = memchr(w, ',', (size_t)(ve - w));
    if (!we) we = ve;
    char name[32];
    snprintf(name, sizeof name, "%.*s", (int)(we - w < 31 ? we - w : 31), w);
    const kn_arch *a = kn_arch_get(name);
    if (!a || a->isa == KN_ISA_HOST || (size_t)(we - w) > 31)
      return merr(c, w, "'%.*s' is not a GPU target of this kiln (kiln targets lists them)",
                  (int)(we - w), w);
    for (int i = 0; i < k->narchs; i++)
      if (k->archs[i] == a->name) return merr(c, w, "%s is listed twice", a->name);
    if (k->narchs == AOT_MAX_ARCHS) return merr(c, w, "at most %d architectures", AOT_MAX_ARCHS);
    k->archs[k->narchs++] = a->name;
    w = we + 1;
  }
  return k->narchs ? 0 : merr(c, v, "archs= names no architecture");
}

static int parse_kernel(const mcur *c, const char *q, const char *le, aot_kernel *k) {
  memset(k, 0, sizeof *k);
  k->line = c->line;
  k->seqlen_lo = 1, k->seqlen_hi = 2147483647;
  /* the name */
  while (q < le && *q == ' ') q++;
  const char *ne = q;
  while (ne < le && *ne != ' ' && *ne != '\t') ne++;
  bool ident = ne > q && ne - q < (int)sizeof k->name - 12 && !(*q >= '0' && *q <= '9');
  for (const char *p = q; p < ne && ident; p++)
    ident = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '_';
  if (!ident) return merr(c, q, "a kernel's name is a C identifier of at most %zu characters",
                          sizeof k->name - 13);
  memcpy(k->name, q, (size_t)(ne - q));
  bool dtype = false, head_dim = false, archs = false, seqlen = false;
  for (q = ne; q < le;) {
    while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
    if (q == le || *q == '#') break;
    const char *te = q;
    while (te < le && *te != ' ' && *te != '\t' && *te != '\r') te++;
    const char *eq = memchr(q, '=', (size_t)(te - q));
    if (!eq) return merr(c, q, "expected key=value");
    const char *v = eq + 1;
    if (word(q, eq, "dtype")) {
      int s = kn_scalar_from_name(v, (size_t)(te - v));
      if (s != KN_F16 && s != KN_BF16 && s != KN_F32)
        return merr(c, v, "dtype is f16, bf16 or f32");
      k->desc.dtype = (kn_scalar)s;
      dtype = true;
    } else if (word(q, eq, "head_dim")) {
      if (int_of(v, te, 1, KN_ATTN_MAX_HEAD_DIM, &k->desc.head_dim))
        return merr(c, v, "head_dim is 1..%d", KN_ATTN_MAX_HEAD_DIM);
      head_dim = true;
    } else if (word(q, eq, "variant")) {
      if (parse_variant(c, v, te, &k->desc)) return -1;
    } else if (word(q, eq, "archs")) {
      if (parse_archs(c, v, te, k)) return -1;
      archs = true;
    } else if (word(q, eq, "config")) {
      if (parse_config(c, v, te, k)) return -1;
    } else if (word(q, eq, "seqlen")) {
      const char *dash = memchr(v, '-', (size_t)(te - v));
      if (!dash || int_of(v, dash, 1, 2147483647, &k->seqlen_lo) ||
          int_of(dash + 1, te, 1, 2147483647, &k->seqlen_hi) || k->seqlen_lo > k->seqlen_hi)
        return merr(c, v, "seqlen is LO-HI (the seqlen_q range served, 1 <= LO <= HI)");
      seqlen = true;
    } else {
      return merr(c, q, "unknown field '%.*s' (dtype, head_dim, variant, archs, config, seqlen)",
                  (int)(eq - q), q);
    }
    q = te;
  }
  if (!dtype || !head_dim || !archs)
    return merr(c, c->line_start, "kernel %s needs %s", k->name,
                !dtype ? "dtype=" : !head_dim ? "head_dim=" : "archs=");
  if (k->desc.prefix && k->desc.causal)
    return merr(c, c->line_start, "prefix includes its causal part: leave causal out with prefix");
  if (seqlen) snprintf(k->symbol, sizeof k->symbol, "attn_fwd_%s_%d_%d", k->name, k->seqlen_lo,
                       k->seqlen_hi);
  else snprintf(k->symbol, sizeof k->symbol, "attn_fwd_%s", k->name);
  kn_attn_config dc = kn_attn_default_config(NULL, &k->desc);
  kn_diag d;
  if (kn_attn_check(&k->desc, &dc, &d)) return merr(c, c->line_start, "%s", d.message);
  return 0;
}

int aot_manifest_parse(const char *file, const char *t, size_t len, aot_build *b, char *err,
                       size_t n) {
  memset(b, 0, sizeof *b);
  mcur c = {.file = file, .err = err, .n = n};
  bool magic = false;
  int cap = 0;
  for (const char *p = t, *end = t + len; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
    c.line++, c.line_start = p;
    const char *q = p;
    p = le + 1;
    while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
    if (q == le || *q == '#') continue;
    if (memchr(q, 0, (size_t)(le - q))) return merr(&c, q, "a NUL byte: not a manifest");
    if (!magic) {
      if (!word(q, q + 8 <= le ? q + 8 : le, "kiln-aot") ||
          !(q + 10 <= le && q[8] == ' ' && q[9] == '1' && (q + 10 == le || q[10] == ' ' ||
                                                          q[10] == '\r')))
        return merr(&c, q, "a manifest starts with the line 'kiln-aot 1'");
      magic = true;
      continue;
    }
    if (le - q < 7 || memcmp(q, "kernel ", 7))
      return merr(&c, q, "expected 'kernel NAME key=value ...'");
    if (b->n == cap) {
      cap = cap ? 2 * cap : 16;
      aot_kernel *nk = realloc(b->k, sizeof *nk * (size_t)cap);
      if (!nk) return snprintf(err, n, "out of memory"), -1;
      b->k = nk;
    }
    if (parse_kernel(&c, q + 7, le, &b->k[b->n])) return -1;
    /* a name used twice: the same descriptor, disjoint ranges (the launcher picks by shape) */
    aot_kernel *k = &b->k[b->n];
    for (int i = 0; i < b->n; i++) {
      if (strcmp(b->k[i].name, k->name)) continue;
      char a[KN_ATTN_KEY_MAX], bb[KN_ATTN_KEY_MAX];
      kn_attn_desc_key(&b->k[i].desc, a, sizeof a);
      kn_attn_desc_key(&k->desc, bb, sizeof bb);
      if (strcmp(a, bb))
        return merr(&c, q + 7, "kernel %s (line %d) has another descriptor; one name is one "
                    "variant", k->name, b->k[i].line);
      if (k->seqlen_lo <= b->k[i].seqlen_hi && b->k[i].seqlen_lo <= k->seqlen_hi)
        return merr(&c, q + 7, "kernel %s: seqlen %d-%d overlaps line %d's %d-%d", k->name,
                    k->seqlen_lo, k->seqlen_hi, b->k[i].line, b->k[i].seqlen_lo,
                    b->k[i].seqlen_hi);
    }
    b->n++;
  }
  if (!magic) {
    c.line = 1, c.line_start = t;
    return merr(&c, t, "empty manifest (it starts with the line 'kiln-aot 1')");
  }
  if (!b->n) return snprintf(err, n, "%s: the manifest lists no kernel", file), -1;
  b->obj = calloc((size_t)b->n * AOT_MAX_ARCHS, sizeof *b->obj);
  if (!b->obj) return snprintf(err, n, "out of memory"), -1;
  return 0;
}

void aot_build_free(aot_build *b) {
  if (b->obj)
    for (int i = 0; i < b->n * AOT_MAX_ARCHS; i++) {
      free(b->obj[i].code);
      free(b->obj[i].cubin);
    }
  free(b->obj);
  free(b->k);
  kn_aot_index_free(&b->index);
  memset(b, 0, sizeof *b);
}

/* ---- the build ---- */

typedef struct job_queue {
  aot_build *b;
  atomic_int next;
  int njobs;
  int (*jobs)[2];         /* (kernel, arch) */
  bool ptxas;
  kn_tunedb *db;
  pthread_mutex_t db_mu;
} job_queue;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* "tuned": the tuning record for (descriptor, the range's bucket) measured on a GPU of this
 * target by this kiln version; 0 with *c, or -1 (none) */
static int tuned_config(job_queue *q, const aot_kernel *k, const kn_arch *a, kn_attn_config *c) {
  if (!q->db) return -1;
  kn_tune_record *r = NULL;
  size_t n = 0;
  pthread_mutex_lock(&q->db_mu);
  kn_status s = kn_tunedb_list(q->db, &r, &n, NULL);
  pthread_mutex_unlock(&q->db_mu);
  if (s != KN_OK) return -1;
  char dk[KN_ATTN_KEY_MAX], prefix[40];
  kn_attn_desc_key(&k->desc, dk, sizeof dk);
  snprintf(prefix, sizeof prefix, "%s-", a->name);
  int bucket = kn_tune_seq_bucket(k->seqlen_hi < 1 << 30 ? k->seqlen_hi : 1024);
  int found = -1;
  double best = 0;
  for (size_t i = 0; i < n; i++) {
    const kn_tune_key *key = &r[i].key;
    if (strcmp(key->template_name, "fwd") || strcmp(key->variant, dk) ||
        key->seq_bucket != bucket || strncmp(key->arch, prefix, strlen(prefix)) ||
        strcmp(key->kiln_version, KILN_VERSION_STRING))
      continue;
    kn_attn_config t = {.block_m = r[i].config.block_m, .block_n = r[i].config.block_n,
                        .warps = r[i].config.warps, .stages = r[i].config.stages,
                        .wgmma = !strncmp(r[i].config.matrix_instr, "wgmma.", 6)};
    if (kn_attn_check_on(a, &k->desc, &t, NULL)) continue;
    if (found < 0 || r[i].time_us < best) *c = t, best = r[i].time_us, found = 0;
  }
  free(r);
  return found;
}

static void run_job(job_queue *q, int ki, int ai) {
  aot_kernel *k = &q->b->k[ki];
  aot_object *o = &q->b->obj[ki * AOT_MAX_ARCHS + ai];
  const kn_target *t = kn_target_get(k->archs[ai]);
  const kn_arch *a = t->arch;
  double t0 = now_ms();
  kn_diag d;
  o->cfg = kn_attn_default_config(a, &k->desc);
  if (k->config == AOT_FORCED) {
    kn_attn_config c = o->cfg;
    c.block_m = k->forced.block_m, c.block_n = k->forced.block_n;
    if (k->forced.warps) c.warps = k->forced.warps;
    if (k->forced.stages) c.stages = k->forced.stages;
    c.wgmma = k->forced.wgmma;
    o->cfg = c;
  } else if (k->config == AOT_TUNED) {
    kn_attn_config c;
    if (tuned_config(q, k, a, &c) == 0) o->cfg = c, o->tuned = 1;
    else
      fprintf(stderr, "kiln: warning: no tuning record for %s on %s (this kiln's, seqlen bucket "
              "of %d): the default tiling\n", k->name, a->name, k->seqlen_hi < 1 << 30 ?
              k->seqlen_hi : 1024);
  }
  if (kn_attn_check_on(a, &k->desc, &o->cfg, &d)) {
    snprintf(o->error, sizeof o->error, "%s", d.message);
    return;
  }
  kn_module *m = kn_module_new("<attn_fwd>");
  kn_func *f = m ? kn_attn_fwd_build(m, &k->desc, &o->cfg, &d) : NULL;
  if (!f || kn_func_rename(f, k->symbol)) {
    snprintf(o->error, sizeof o->error, "%s", f ? "cannot rename the kernel" : d.message);
    kn_module_free(m);
    return;
  }
  kn_artifact art;
  int rc = kn_compile_artifact(m, k->symbol, t, NULL, &art, &d);
  kn_module_free(m);
  if (rc) {
    snprintf(o->error, sizeof o->error, "%s", d.message);
    return;
  }
  o->code = art.data, o->code_n = art.size;
  o->threads = art.threads;
  o->shared = a->isa == KN_ISA_NVPTX ? (long long)art.shared_bytes : 0;
  art.data = NULL;
  kn_artifact_free(&art);
  if (a->isa == KN_ISA_AMDGPU) {
    /* the launch facts from the code object itself, as the runtime will read them */
    kn_codeobj co;
    if (kn_codeobj_read(o->code, o->code_n, &co, &d)) {
      snprintf(o->error, sizeof o->error, "reading the code object back: %s", d.message);
      return;
    }
    const kn_codeobj_kernel *ck = kn_codeobj_find(&co, k->symbol);
    if (!ck || ck->max_flat_workgroup_size != o->threads)
      snprintf(o->error, sizeof o->error, "the code object's %s does not run %d work-items",
               k->symbol, o->threads);
    kn_codeobj_free(&co);
  } else if (q->ptxas) {
    kn_ptxas_options po = {.arch = a->name, .opt_level = 3, .want_cubin = true};
    kn_ptxas_result r;
    if (kn_ptxas_run(o->code, o->code_n, &po, &r, &d) != KN_OK) {
      snprintf(o->error, sizeof o->error, "ptxas: %s", d.message);
      return;
    }
    o->cubin = r.cubin, o->cubin_n = r.cubin_size;
    r.cubin = NULL;
    kn_ptxas_result_free(&r);
  }
  o->ms = now_ms() - t0;
}

static void *worker(void *arg) {
  job_queue *q = arg;
  for (int j; (j = atomic_fetch_add(&q->next, 1)) < q->njobs;) run_job(q, q->jobs[j][0], q->jobs[j][1]);
  return NULL;
}

static int write_file(const char *dir, const char *name, const void *data, size_t n, char *err,
                      size_t en) {
  char path[4400], tmp[4500];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  bool ok = f && fwrite(data, 1, n, f) == n;
  if (f && fclose(f)) ok = false;
  if (!ok || rename(tmp, path)) {
    snprintf(err, en, "cannot write %.900s: %s", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* writes the bundles, PTX, cubins and the index; fills b->index */
static int write_outputs(aot_build *b, const char *dir, char *err, size_t en) {
  char *text = NULL;
  size_t tlen = 0;
  kn_diag d;
  int rc = 0;
  kn_aot_index *ix = &b->index;
  memset(ix, 0, sizeof *ix);
  snprintf(ix->dir, sizeof ix->dir, "%s", dir);
  snprintf(ix->path, sizeof ix->path, "%s/%s", dir, KN_AOT_INDEX_FILE);
  ix->e = calloc((size_t)b->n * AOT_MAX_ARCHS, sizeof *ix->e);
  if (!ix->e) return snprintf(err, en, "out of memory"), -1;
  for (int i = 0; i < b->n && !rc; i++) {
    aot_kernel *k = &b->k[i];
    /* one offload bundle with every AMD architecture of the kernel */
    kn_bundle_part parts[AOT_MAX_ARCHS];
    char ids[AOT_MAX_ARCHS][64];
    int np = 0;
    for (int a = 0; a < k->narchs; a++)
      if (kn_arch_get(k->archs[a])->isa == KN_ISA_AMDGPU) {
        aot_object *o = &b->obj[i * AOT_MAX_ARCHS + a];
        kn_bundle_amd_id(k->archs[a], ids[np], sizeof ids[np]);
        parts[np] = (kn_bundle_part){ids[np], o->code, o->code_n};
        np++;
      }
    kn_aot_file hipfb = {0};
    if (np) {
      void *bundle;
      size_t bn;
      char name[160];
      snprintf(name, sizeof name, "%s.hipfb", k->symbol);
      if (kn_bundle_write(parts, np, &bundle, &bn, &d)) {
        snprintf(err, en, "%s", d.message);
        free(text);
        return -1;
      }
      rc = write_file(dir, name, bundle, bn, err, en);
      kn_aot_file_describe(&hipfb, name, bundle, bn);
      free(bundle);
    }
    for (int a = 0; a < k->narchs && !rc; a++) {
      const kn_arch *arch = kn_arch_get(k->archs[a]);
      aot_object *o = &b->obj[i * AOT_MAX_ARCHS + a];
      kn_aot_entry *e = &ix->e[ix->n++];
      memset(e, 0, sizeof *e);
      snprintf(e->name, sizeof e->name, "%s", k->name);
      snprintf(e->symbol, sizeof e->symbol, "%s", k->symbol);
      snprintf(e->arch, sizeof e->arch, "%s", arch->name);
      kn_attn_desc_key(&k->desc, e->desc, sizeof e->desc);
      e->seqlen_lo = k->seqlen_lo, e->seqlen_hi = k->seqlen_hi;
      e->block_m = o->cfg.block_m, e->block_n = o->cfg.block_n, e->warps = o->cfg.warps;
      e->stages = o->cfg.stages, e->mfma = o->cfg.mfma, e->wgmma = o->cfg.wgmma;
      e->threads = o->threads, e->shared = o->shared, e->tuned = o->tuned;
      if (arch->isa == KN_ISA_AMDGPU) {
        e->file = hipfb;
      } else {
        char name[160];
        snprintf(name, sizeof name, "%s.%s.ptx", k->symbol, arch->name);
        rc = write_file(dir, name, o->code, o->code_n, err, en);
        kn_aot_file_describe(&e->file, name, o->code, o->code_n);
        if (!rc && o->cubin) {
          snprintf(name, sizeof name, "%s.%s.cubin", k->symbol, arch->name);
          rc = write_file(dir, name, o->cubin, o->cubin_n, err, en);
          kn_aot_file_describe(&e->cubin, name, o->cubin, o->cubin_n);
        }
      }
      if (!rc && kn_aot_index_append(&text, &tlen, e, &d)) {
        snprintf(err, en, "%s", d.message);
        rc = -1;
      }
    }
  }
  /* the index last: a reader never sees one naming files not written yet */
  if (!rc) rc = write_file(dir, KN_AOT_INDEX_FILE, text, tlen, err, en);
  free(text);
  return rc;
}

static int usage_error(const char *msg) {
  fprintf(stderr, "kiln: error: %s\nusage: kiln aot MANIFEST -o DIR [-j N] [--emit-c NAME] "
          "[--cache-dir DIR]\n", msg);
  return EXIT_USAGE;
}

static kn_tunedb *open_tunedb(const char *cache_dir) {
  char dir[4096];
  if (cache_dir) snprintf(dir, sizeof dir, "%s", cache_dir);
  else if (kn_cache_default_dir(dir, sizeof dir, NULL) != KN_OK) return NULL;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return NULL;
  char shown[4200];
  snprintf(shown, sizeof shown, "%s/%s", dir, KN_TUNEDB_FILE);
  kn_tunedb *db = NULL;
  if (kn_tunedb_open_existing(fd, KN_TUNEDB_FILE, shown, &db, NULL) != KN_OK) db = NULL;
  close(fd);
  return db;
}

int aot_main(int argc, char **argv) {
  const char *manifest = NULL, *out = NULL, *emit = NULL, *cache_dir = NULL;
  int jobs = (int)sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "-o") && has) out = argv[++i];
    else if (!strcmp(a, "--emit-c") && has) emit = argv[++i];
    else if (!strcmp(a, "--cache-dir") && has) cache_dir = argv[++i];
    else if (!strcmp(a, "-j") && has) {
      const char *v = argv[++i];
      if (int_of(v, v + strlen(v), 1, 256, &jobs)) return usage_error("-j takes 1..256");
    } else if (a[0] == '-') {
      char msg[300];
      snprintf(msg, sizeof msg, "unknown or incomplete option '%.200s'", a);
      return usage_error(msg);
    } else if (!manifest) manifest = a;
    else return usage_error("one manifest only");
  }
  if (!manifest || !out) return usage_error("aot needs a MANIFEST and -o DIR");
  if (jobs < 1) jobs = 1;
  if (emit) {
    bool ident = *emit && !(*emit >= '0' && *emit <= '9') && strlen(emit) < 48;
    for (const char *p = emit; *p && ident; p++)
      ident = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_';
    if (!ident) return usage_error("--emit-c takes a C identifier (the files' and functions' prefix)");
  }
  FILE *f = fopen(manifest, "rb");
  if (!f) {
    fprintf(stderr, "kiln: error: cannot open %s: %s\n", manifest, strerror(errno));
    return EXIT_USAGE;
  }
  char *text = NULL;
  size_t len = 0, cap = 0;
  for (size_t got; ; len += got) {
    if (cap - len < 4096) {
      char *t = realloc(text, cap = cap * 2 + 8192);
      if (!t) {
        fclose(f);
        free(text);
        return usage_error("out of memory");
      }
      text = t;
    }
    if (!(got = fread(text + len, 1, cap - len, f))) break;
  }
  fclose(f);
  aot_build b;
  char err[1024];
  int parsed = aot_manifest_parse(manifest, text, len, &b, err, sizeof err);
  free(text);
  if (parsed) {
    fprintf(stderr, "kiln: error: %s\n", err);
    aot_build_free(&b);
    return EXIT_USAGE;
  }
  if (mkdir(out, 0755) && errno != EEXIST) {
    fprintf(stderr, "kiln: error: cannot create %s: %s\n", out, strerror(errno));
    aot_build_free(&b);
    return EXIT_USAGE;
  }
  job_queue q = {.b = &b};
  pthread_mutex_init(&q.db_mu, NULL);
  char ptxas[512];
  kn_diag d;
  bool any_nv = false, any_tuned = false;
  for (int i = 0; i < b.n; i++) {
    any_tuned |= b.k[i].config == AOT_TUNED;
    for (int a = 0; a < b.k[i].narchs; a++) any_nv |= kn_arch_get(b.k[i].archs[a])->isa == KN_ISA_NVPTX;
  }
  if (any_nv) {
    q.ptxas = kn_ptxas_find(ptxas, sizeof ptxas, &d) == KN_OK;
    if (!q.ptxas) fprintf(stderr, "kiln: note: %s; NVIDIA kernels as PTX only (no cubin)\n", d.message);
  }
  if (any_tuned) q.db = open_tunedb(cache_dir);
  q.jobs = malloc(sizeof *q.jobs * (size_t)b.n * AOT_MAX_ARCHS);
  if (!q.jobs) {
    aot_build_free(&b);
    return usage_error("out of memory");
  }
  for (int i = 0; i < b.n; i++)
    for (int a = 0; a < b.k[i].narchs; a++) q.jobs[q.njobs][0] = i, q.jobs[q.njobs++][1] = a;
  if (jobs > q.njobs) jobs = q.njobs;
  double t0 = now_ms();
  pthread_t th[256];
  int started = 0;
  for (; started < jobs - 1; started++)
    if (pthread_create(&th[started], NULL, worker, &q)) break;
  worker(&q);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  double wall = now_ms() - t0, cpu = 0;
  int rc = EXIT_OK;
  for (int i = 0; i < b.n; i++)
    for (int a = 0; a < b.k[i].narchs; a++) {
      aot_object *o = &b.obj[i * AOT_MAX_ARCHS + a];
      cpu += o->ms;
      if (o->error[0]) {
        fprintf(stderr, "kiln: error: %s:%d: kernel %s for %s: %s\n", manifest, b.k[i].line,
                b.k[i].name, b.k[i].archs[a], o->error);
        rc = EXIT_USAGE;
      }
    }
  if (rc == EXIT_OK && write_outputs(&b, out, err, sizeof err)) {
    fprintf(stderr, "kiln: error: %s\n", err);
    rc = EXIT_FAILED;
  }
  if (rc == EXIT_OK && emit && aot_emit_c(&b, out, emit, err, sizeof err)) {
    fprintf(stderr, "kiln: error: --emit-c: %s\n", err);
    rc = EXIT_FAILED;
  }
  if (rc == EXIT_OK) {
    for (int i = 0; i < b.n; i++) {
      printf("%s", b.k[i].symbol);
      for (int a = 0; a < b.k[i].narchs; a++) {
        aot_object *o = &b.obj[i * AOT_MAX_ARCHS + a];
        printf("%s %s %dx%d/%dw%s%s", a ? "," : ":", b.k[i].archs[a], o->cfg.block_m,
               o->cfg.block_n, o->cfg.warps, o->cubin ? "+cubin" : "", o->tuned ? " tuned" : "");
      }
      printf("\n");
    }
    printf("kiln aot: %d kernel%s, %d objects in %s/%s, %.1f s (-j %d; %.1f s of compiles)\n",
           b.n, b.n == 1 ? "" : "s", q.njobs, out, KN_AOT_INDEX_FILE, wall / 1e3, jobs,
           cpu / 1e3);
  }
  if (q.db) kn_tunedb_close(q.db);
  pthread_mutex_destroy(&q.db_mu);
  free(q.jobs);
  aot_build_free(&b);
  return rc;
}
