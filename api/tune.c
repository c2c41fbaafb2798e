/* tune.c — the autotuner: compile every candidate of a search space, prune by the resources the
 * compiled code reports, check each survivor against the float64 reference, time it, keep the
 * fastest in the tuning database and its code in the cache.
 *
 * Timing: one path for every device (api/device.c's calls): on the host the host's clock around
 * each (synchronous) launch; on CUDA and HIP the device's events around each launch, recorded
 * on the null stream, with the candidates reading device copies of the input sets and set 0's
 * output copied back for the check.  One problem, batch x heads x seqlen^2 at the
 * requested sequence length, on rotating input sets — enough copies of q/k/v/o that together
 * they exceed the last-level cache (up to ROTATE_BYTES, at most ROTATE_SETS_MAX sets), so a
 * candidate is never timed on inputs the previous launch left in the cache.  The first launch of
 * each candidate, on set 0, is also its correctness check against kn_attn_reference_v (computed
 * once); then warm-up launches, then `repeats` timed launches, each on the next set; the median
 * is the candidate's time (robust against the odd descheduled run), the min is reported too.
 *
 * Variants (docs/variants.md) are tuned on representative values, shared by every input set:
 * a window of 256 keys left of the diagonal and none right (or the options' sizes), a softcap of
 * 30, ALiBi's geometric slopes, a random N(0, 1) bias, four documents of random lengths, a prefix
 * of a quarter of the length.  The caller's own modifier parameters have no representative
 * value kiln could invent: their values come from kiln_prepare_options.tune_mod_args, and
 * without them such a variant is not tuned.  The tuning database keys records by the whole
 * descriptor key (modifier text hash included), so each variant tunes separately.
 *
 * Candidates are compiled with the same object path as prepare, outside the cache: only the
 * winner is stored, so a space of 16 candidates does not evict 15 useful entries.
 *
 * Progress.  A progress callback if the context has one; otherwise, unless KILN_TUNE_PROGRESS=0,
 * stderr: a bar rewritten in place when stderr is a terminal, one line per candidate when it is
 * not (a log file).  This is the one place the library writes to a stream: the issue asks for
 * it, tuning is something the caller asked for (KILN_AUTOTUNE=1, KILN_TUNE_AUTO, kiln_tune), and
 * minutes of silence would look like a hang.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "device.h"
#include "interp.h"
#include "numeric.h"

/* knobs of the timing method */
enum {
  ROTATE_SETS_MAX = 8,      /* input sets rotated through */
  DEFAULT_WARMUP = 2,       /* launches before timing (the check launch not counted) */
  DEFAULT_REPEATS = 7,      /* timed launches; the median is the result */
  DEFAULT_TUNE_HEADS = 8,   /* enough programs to occupy a host's workers at short lengths */
  MAX_LAUNCHES = 10000,     /* bound of tune_warmup and tune_repeats (each) */
  MAX_TUNE_SEQLEN = 1 << 20,
};
/* bound of the tuning problem's elements per tensor (q, k, v, o, a bias): its float64 twins
 * alone take 8 bytes an element */
#define MAX_TUNE_ELEMS ((int64_t)1 << 30)
#define ROTATE_BYTES ((size_t)64 << 20) /* rotate until this much input has been touched */

typedef struct io_set {
  void *q, *k, *v, *o;
  float *lse;
} io_set;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + 1e-3 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* splitmix64 + Box-Muller: the same inputs for every candidate of a run */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double rng_normal(uint64_t *s) {
  double u1 = ((double)(rng_next(s) >> 11) + 0.5) * 0x1p-53;
  double u2 = (double)(rng_next(s) >> 11) * 0x1p-53;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill(kn_scalar t, void *buf, double *twin, size_t n, uint64_t *s) {
  size_t es = kn_scalar_size(t);
  for (size_t i = 0; i < n; i++) {
    kn_store_elem(t, (char *)buf + i * es, rng_normal(s));
    if (twin) twin[i] = kn_load_elem(t, (char *)buf + i * es);
  }
}

/* ---- progress ---- */

static void progress_stderr(int done, int total, const kiln_tune_candidate *c) {
  char what[96];
  switch (c->state) {
  case KILN_CANDIDATE_TIMED: snprintf(what, sizeof what, "%.1f us", c->median_us); break;
  case KILN_CANDIDATE_INVALID: snprintf(what, sizeof what, "invalid"); break;
  case KILN_CANDIDATE_PRUNED: snprintf(what, sizeof what, "pruned"); break;
  case KILN_CANDIDATE_FAILED: snprintf(what, sizeof what, "failed"); break;
  case KILN_CANDIDATE_WRONG: snprintf(what, sizeof what, "WRONG"); break;
  }
  if (isatty(2)) {
    enum { W = 30 };
    char bar[W + 1];
    int fillw = total ? done * W / total : W;
    for (int i = 0; i < W; i++) bar[i] = i < fillw ? '#' : '.';
    bar[W] = 0;
    fprintf(stderr, "\rkiln tune [%s] %d/%d  block %3dx%-3d %-14s", bar, done, total, c->block_m,
            c->block_n, what);
    if (done == total) fputc('\n', stderr);
  } else {
    fprintf(stderr, "kiln tune: %d/%d block %dx%d warps %d stages %d: %s\n", done, total,
            c->block_m, c->block_n, c->warps, c->stages, what);
  }
  fflush(stderr);
}

static void report(kiln_context *ctx, int done, int total, const kiln_tune_candidate *c) {
  if (ctx->progress) ctx->progress(ctx->progress_user, done, total, c);
  else if (!ctx->progress_quiet) progress_stderr(done, total, c);
  if (c->state == KILN_CANDIDATE_TIMED)
    api_log(ctx, KILN_LOG_DEBUG, "tune candidate %dx%d: median %.1f us, min %.1f us",
            c->block_m, c->block_n, c->median_us, c->min_us);
  else
    api_log(ctx, KILN_LOG_DEBUG, "tune candidate %dx%d: %s", c->block_m, c->block_n, c->note);
}

/* ---- one candidate ---- */

typedef struct run {
  kiln_context *ctx;
  const kn_attn_desc *d;
  const kn_attn_sig *sig;
  kn_attn_vargs va;        /* the variant's values (one for every input set) */
  kn_attn_named_arg named[KN_ATTN_MAX_PARAMS];
  float *alibi;            /* the synthesised variant tensors (NULL when unused) */
  void *bias;
  int32_t *seg;
  kn_attn_problem p;
  const kn_space *space;
  io_set sets[ROTATE_SETS_MAX];
  int nsets;
  size_t nq, nk, nl;       /* elements of q/o, k/v, lse */
  double *ref_o, *ref_lse; /* the float64 reference on set 0 */
  int warmup, repeats;
  /* the sets and variant values the candidates read: on a GPU device copies of sets[] and of
   * the variant's tensors (dtensors), set 0's output copied back into sets[0] for the check; on
   * the host sets[] and va themselves */
  bool gpu;
  io_set dsets[ROTATE_SETS_MAX];
  kn_attn_vargs dva;
  void *dtensors[3];
} run;

/* the arguments of a launch on input set `set` (setup checked that every value is there) */
static void launch_args(const run *r, const kn_attn_config *c, int set, kn_argval *args,
                        int grid[3]) {
  const io_set *s = &r->dsets[set];
  kn_diag diag;
  int rc = kn_attn_fill_args(r->d, r->sig, c, &r->p, s->q, s->k, s->v, s->o, s->lse, &r->dva,
                             args, grid, &diag);
  KN_ASSERT(rc == 0);
  (void)rc;
}

/* output of set 0 against the reference; NULL when within tolerance */
static const char *check(const run *r, char *why, size_t n) {
  kn_scalar dt = r->d->dtype;
  size_t es = kn_scalar_size(dt);
  double err = 0, tol = kn_attn_tolerance_of(r->d), lerr = 0, ltol = kn_attn_lse_tolerance(dt);
  for (size_t i = 0; i < r->nq; i++) {
    double e = fabs(kn_load_elem(dt, (char *)r->sets[0].o + i * es) - r->ref_o[i]);
    if (!(e <= err)) err = e; /* NaN sticks */
  }
  for (size_t i = 0; r->d->has_lse && i < r->nl; i++) {
    double got = r->sets[0].lse[i], want = r->ref_lse[i];
    double e = isinf(want) && got == want ? 0 : fabs(got - want);
    if (!(e <= lerr)) lerr = e;
  }
  if (err <= tol && lerr <= ltol) return NULL;
  snprintf(why, n, "max_abs_err %.3g (tol %.3g), lse err %.3g (tol %.3g)", err, tol, lerr, ltol);
  return why;
}

kn_attn_config api_config_of(const kn_tune_config *tc) {
  return (kn_attn_config){.block_m = tc->block_m, .block_n = tc->block_n, .warps = tc->warps,
                          .stages = tc->stages,
                          .wgmma = !strncmp(tc->matrix_instr, "wgmma.", 6)};
}

/* loads the candidate's compiled code on the context's device, checks its first launch on set 0
 * (its output cleared first, so a kernel that writes nothing cannot pass on the previous
 * candidate's output; copied back from a GPU) against the reference, then times `repeats`
 * launches, each between the timer's start and stop, after `warmup` untimed ones, rotating the
 * input sets; on TIMED, *obj keeps the code */
static void time_candidate(run *r, const kn_attn_config *c, kiln_tune_candidate *out,
                           kn_artifact *obj) {
  kiln_context *ctx = r->ctx;
  kiln_kernel tk;
  memset(&tk, 0, sizeof tk);
  tk.ctx = ctx, tk.kname = "attn_fwd", tk.cfg = *c, tk.desc = *r->d, tk.sig = *r->sig;
  pthread_mutex_init(&tk.launch_mu, NULL);
  api_timer tm = {0};
  char why[300] = "";
  double *t = calloc((size_t)r->repeats, sizeof *t);
  kn_argval args[KN_ATTN_MAX_PARAMS];
  int grid[3];
  size_t ob = r->nq * kn_scalar_size(r->d->dtype);
  out->state = KILN_CANDIDATE_FAILED;
  /* each step runs only while nothing failed; a failure keeps its message in why */
#define STEP(call)                                                                           \
  do {                                                                                       \
    if (!why[0] && (call)) snprintf(why, sizeof why, "%.299s", kiln_last_error());           \
  } while (0)
  if (!t) snprintf(why, sizeof why, "out of memory");
  STEP(api_dev_load(ctx, &tk, obj));
  STEP(api_dev_clear(ctx, r->dsets[0].o, ob));
  launch_args(r, c, 0, args, grid);
  STEP(api_launch_kernel(&tk, args, grid, NULL));
  STEP(api_dev_sync(ctx, NULL));
  STEP(api_dev_get(ctx, r->sets[0].o, r->dsets[0].o, ob));
  STEP(api_dev_get(ctx, r->sets[0].lse, r->dsets[0].lse, r->nl * sizeof(float)));
  STEP(api_timer_open(ctx, &tm));
  if (!why[0] && check(r, out->note, sizeof out->note)) {
    out->state = KILN_CANDIDATE_WRONG;
  } else if (!why[0]) {
    int next = 1 % r->nsets;
    for (int i = 0; !why[0] && i < r->warmup + r->repeats; i++, next = (next + 1) % r->nsets) {
      bool timed = i >= r->warmup;
      launch_args(r, c, next, args, grid);
      if (timed) STEP(api_timer_start(ctx, &tm, NULL));
      STEP(api_launch_kernel(&tk, args, grid, NULL));
      if (timed) STEP(api_timer_stop(ctx, &tm, NULL, &t[i - r->warmup]));
    }
    if (!why[0]) {
      qsort(t, (size_t)r->repeats, sizeof *t, cmp_double);
      out->state = KILN_CANDIDATE_TIMED;
      out->median_us = t[r->repeats / 2];
      out->min_us = t[0];
    }
  }
#undef STEP
  if (why[0]) snprintf(out->note, sizeof out->note, "%.159s", why);
  api_timer_close(ctx, &tm);
  api_dev_unload(&tk);
  pthread_mutex_destroy(&tk.launch_mu);
  free(t);
  if (out->state != KILN_CANDIDATE_TIMED) kn_artifact_free(obj);
}

/* compiles, prunes, checks and times one candidate (a point kn_attn_check_on accepted: the
 * space offers no other); on TIMED, *obj keeps its object */
/* off32 (templates/attention.h) on the candidates as kiln_prepare sets it on the kernel it
 * serves (an AMD device), where the tuning problem's contiguous K/V slabs fit it: the kernel
 * timed and cached is the one the prepare after the tuning loads */
static bool run_off32(const run *r) {
  return kn_attn_off32_applies(r->ctx->target_arch, r->d) &&
         kn_attn_off32_fits(r->d, r->p.seqlen_k, r->d->head_dim, r->d->head_dim);
}

static void try_candidate(run *r, const kn_tune_config *tc, kiln_tune_candidate *out,
                          kn_artifact *obj) {
  memset(out, 0, sizeof *out);
  out->block_m = tc->block_m;
  out->block_n = tc->block_n;
  out->warps = tc->warps;
  out->stages = tc->stages;
  out->waves_per_eu = tc->waves_per_eu;
  snprintf(out->matrix_instr, sizeof out->matrix_instr, "%s", tc->matrix_instr);
  kn_attn_config c = api_config_of(tc);
  c.off32 = run_off32(r);
  kn_diag diag;
  memset(obj, 0, sizeof *obj);
  kn_module *m = api_build_module("attn_fwd", r->d, &c, &diag);
  double t0 = now_us();
  if (!m || api_the_compiler.compile(m, "attn_fwd", r->ctx->target_arch, obj, &diag)) {
    out->state = KILN_CANDIDATE_FAILED;
    snprintf(out->note, sizeof out->note, "%.159s", diag.message);
    kn_module_free(m);
    return;
  }
  kn_module_free(m);
  out->compile_ms = (now_us() - t0) * 1e-3;
  out->tile_bytes = obj->tile_bytes;
  atomic_fetch_add(&r->ctx->stats.candidates, 1);
  if (kn_space_prune(r->space, obj->tile_bytes, 0, 0, 0, out->note, sizeof out->note)) {
    out->state = KILN_CANDIDATE_PRUNED;
    kn_artifact_free(obj);
    return;
  }
  /* CUDA: more shared memory than a block may opt into on this GPU never launches */
  if (r->ctx->kind == KN_DEVICE_CUDA && obj->shared_bytes > r->ctx->cuda_smem_optin) {
    out->state = KILN_CANDIDATE_PRUNED;
    snprintf(out->note, sizeof out->note, "needs %lld bytes of shared memory per block; %.60s "
             "allows %lld", (long long)obj->shared_bytes, r->ctx->device_name,
             (long long)r->ctx->cuda_smem_optin);
    kn_artifact_free(obj);
    return;
  }
  time_candidate(r, &c, out, obj);
}

/* ---- the run ---- */

/* ALiBi's slopes for n heads (Press et al.; the reference implementation's get_slopes): the
 * geometric series 2^(-8 i / n) for a power of two n, else that of the power of two below n
 * followed by every other slope of the next power of two */
static void alibi_slopes(float *out, int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  for (int i = 0; i < p; i++) out[i] = (float)exp2(-8.0 * (i + 1) / p);
  for (int i = 0; i < n - p; i++) out[p + i] = (float)exp2(-8.0 * (2 * i + 1) / (2 * p));
}

/* the variant's representative values (see the top of the file) into r->va; tensors allocated
 * into r (freed by teardown) */
static kiln_status variant_values(run *r, const kiln_prepare_options *o, uint64_t *seed) {
  const kn_attn_desc *d = r->d;
  const int B = r->p.batch, H = r->p.heads, N = r->p.seqlen_q;
  kn_attn_vargs *va = &r->va;
  memset(va, 0, sizeof *va);
  bool user[KN_ATTN_MAX_PARAMS];
  int nuser = api_user_params(d, r->sig, user);
  const kiln_mod_arg *margs = o ? o->tune_mod_args : NULL;
  int nmargs = o ? o->tune_n_mod_args : 0;
  if (nuser && !nmargs)
    return api_fail(KILN_ERR_INVALID, "tuning: the kernel's modifiers take parameters, and kiln "
                    "cannot invent representative values for them: give them in "
                    "kiln_prepare_options.tune_mod_args");
  kiln_status s = api_mod_args(r->sig, user, margs, nmargs, r->named, "tuning",
                               "kiln_prepare_options.tune_mod_args");
  if (s) return s;
  for (int j = 0; j < nmargs; j++)
    if (margs[j].kind == KILN_MOD_ARG_PTR && !margs[j].bytes)
      return api_fail(KILN_ERR_INVALID, "tuning: the modifier tensor %%%s needs its size (bytes): "
                      "the reference checks every access against it", margs[j].name);
  va->mods = r->named;
  va->nmods = nmargs;
  if (d->window) {
    bool given = o && (o->tune_window_left || o->tune_window_right);
    va->window_left = given ? o->tune_window_left : 256;
    va->window_right = given ? o->tune_window_right : 0;
    if (va->window_left < -1 || va->window_right < -1)
      return api_fail(KILN_ERR_INVALID, "tuning: window sizes %d, %d: each is -1 (unbounded) or "
                      ">= 0", va->window_left, va->window_right);
  }
  va->softcap = 30;
  if (d->alibi) {
    if (!(r->alibi = malloc(sizeof *r->alibi * (size_t)H))) goto nomem;
    alibi_slopes(r->alibi, H);
    va->alibi_slopes = r->alibi;
    va->alibi_sb = 0;
  }
  if (d->bias) {
    size_t n = (size_t)B * H * N * N;
    if (!(r->bias = malloc(n * kn_scalar_size(d->dtype)))) goto nomem;
    fill(d->dtype, r->bias, NULL, n, seed);
    va->bias = r->bias;
    va->bias_sb = (int64_t)H * N * N, va->bias_sh = (int64_t)N * N, va->bias_sm = N;
  }
  if (d->document) {
    /* four documents per row, each at least one token where the length allows */
    if (!(r->seg = malloc(sizeof *r->seg * (size_t)B * N))) goto nomem;
    for (int b = 0; b < B; b++) {
      int cut[3];
      for (int c = 0; c < 3; c++)
        cut[c] = N > 4 ? 1 + (int)(rng_next(seed) % (uint64_t)(N - 1)) : c + 1;
      for (int c = 0; c < 2; c++) /* sorted */
        for (int e = c + 1; e < 3; e++)
          if (cut[e] < cut[c]) { int t = cut[c]; cut[c] = cut[e]; cut[e] = t; }
      for (int i = 0; i < N; i++)
        r->seg[(size_t)b * N + i] = (i >= cut[0]) + (i >= cut[1]) + (i >= cut[2]);
    }
    va->q_seg = va->k_seg = r->seg;
    va->q_seg_sb = va->k_seg_sb = N;
  }
  va->prefix_len = N / 4;
  return KILN_OK;
nomem:
  return api_fail(KILN_ERR_NOMEM, "out of memory for the variant's tuning values");
}

/* The options' tuning problem and launch counts (api.h), checked before anything is sized by
 * them. */
kiln_status api_tune_check(const kn_attn_desc *d, const kiln_prepare_options *o, int seqlen) {
  if (!o) return KILN_OK;
  const struct { const char *name; int v, hi; } n[] = {
      {"tune_batch", o->tune_batch, INT32_MAX}, {"tune_heads", o->tune_heads, INT32_MAX},
      {"tune_warmup", o->tune_warmup, MAX_LAUNCHES}, {"tune_repeats", o->tune_repeats, MAX_LAUNCHES}};
  for (size_t i = 0; i < sizeof n / sizeof n[0]; i++)
    if (n[i].v < 0 || n[i].v > n[i].hi)
      return api_fail(KILN_ERR_INVALID, "tuning: kiln_prepare_options.%s = %d is out of range "
                      "(0: the default, up to %d)", n[i].name, n[i].v, n[i].hi);
  if (seqlen <= 0 || seqlen > MAX_TUNE_SEQLEN) return KILN_OK; /* api_tune refuses it */
  int64_t B = o->tune_batch > 0 ? o->tune_batch : 1;
  int64_t H = o->tune_heads > 0 ? o->tune_heads : DEFAULT_TUNE_HEADS, e;
  int64_t last = d->bias && seqlen > d->head_dim ? seqlen : d->head_dim; /* (B, H, N, D|N) */
  if (__builtin_mul_overflow(B * H, (int64_t)seqlen * last, &e) || e > MAX_TUNE_ELEMS)
    return api_fail(KILN_ERR_INVALID, "tuning: the problem tune_batch %lld x tune_heads %lld x "
                    "seqlen %d x %lld is more than %lld elements a tensor", (long long)B,
                    (long long)H, seqlen, (long long)last, (long long)MAX_TUNE_ELEMS);
  return KILN_OK;
}

/* the sets and variant values the candidates read: on a GPU device copies of the input sets
 * and of the variant's tensors; on the host the sets themselves */
static kiln_status setup_device(run *r) {
  kiln_context *ctx = r->ctx;
  const kn_attn_desc *d = r->d;
  size_t es = kn_scalar_size(d->dtype);
  r->dva = r->va;
  if (!r->gpu) {
    memcpy(r->dsets, r->sets, sizeof r->dsets);
    return KILN_OK;
  }
  for (int j = 0; j < r->va.nmods; j++)
    if (r->named[j].bytes)
      return api_fail(KILN_ERR_UNSUPPORTED, "tuning on %s: a modifier tensor parameter (%%%s) "
                      "is not supported on GPUs yet", ctx->target_name, r->named[j].name);
  for (int i = 0; i < r->nsets; i++) {
    io_set *h = &r->sets[i], *g = &r->dsets[i];
    kiln_status s = api_dev_alloc(ctx, r->nq * es, &g->q);
    if (!s) s = api_dev_alloc(ctx, r->nk * es, &g->k);
    if (!s) s = api_dev_alloc(ctx, r->nk * es, &g->v);
    if (!s) s = api_dev_alloc(ctx, r->nq * es, &g->o);
    if (!s) s = api_dev_alloc(ctx, r->nl * sizeof(float), (void **)&g->lse);
    if (!s) s = api_dev_put(ctx, g->q, h->q, r->nq * es);
    if (!s) s = api_dev_put(ctx, g->k, h->k, r->nk * es);
    if (!s) s = api_dev_put(ctx, g->v, h->v, r->nk * es);
    if (s) return api_fail(s, "tuning on %s: %s", ctx->target_name, kiln_last_error());
  }
  const int B = r->p.batch, H = r->p.heads, N = r->p.seqlen_q;
  const struct { const void *host; size_t bytes; } t[3] = {
      {d->alibi ? r->alibi : NULL, sizeof(float) * (size_t)H},
      {d->bias ? r->bias : NULL, (size_t)B * H * N * N * es},
      {d->document ? r->seg : NULL, sizeof(int32_t) * (size_t)B * N}};
  for (int i = 0; i < 3; i++) {
    kiln_status s = KILN_OK;
    if (t[i].host && ((s = api_dev_alloc(ctx, t[i].bytes, &r->dtensors[i])) ||
                      (s = api_dev_put(ctx, r->dtensors[i], t[i].host, t[i].bytes))))
      return api_fail(s, "tuning on %s: %s", ctx->target_name, kiln_last_error());
  }
  if (d->alibi) r->dva.alibi_slopes = r->dtensors[0];
  if (d->bias) r->dva.bias = r->dtensors[1];
  if (d->document) r->dva.q_seg = r->dva.k_seg = r->dtensors[2];
  return KILN_OK;
}

/* The float64 reference of set 0 into ref_o / ref_lse.  Without modifiers every (batch, head)
 * slice is a problem of its own, and the slices are shared out to kn_host_threads() threads: at
 * a serving shape (4 x 32 heads x 4096^2) one thread takes minutes.  With modifiers (which see
 * the batch and head indices and the variant's tensors) one call over the whole problem. */
typedef struct ref_job {
  const run *r;
  const double *q, *k, *v;
  atomic_int next;
  atomic_int failed;
  kn_diag diag;  /* the first failure's */
} ref_job;

static void *ref_worker(void *arg) {
  ref_job *j = arg;
  const run *r = j->r;
  const size_t N = (size_t)r->p.seqlen_q, D = (size_t)r->d->head_dim;
  const int slices = r->p.batch * r->p.heads;
  kn_attn_problem one = {.batch = 1, .heads = 1, .kv_heads = 1, .seqlen_q = r->p.seqlen_q,
                         .seqlen_k = r->p.seqlen_k, .sm_scale = r->p.sm_scale};
  for (int i; (i = atomic_fetch_add(&j->next, 1)) < slices && !atomic_load(&j->failed);) {
    const size_t at = (size_t)i * N * D; /* (kv heads = heads in the tuning problem) */
    kn_diag diag;
    if (kn_attn_reference_v(r->d, NULL, &one, NULL, j->q + at, j->k + at, j->v + at,
                            r->ref_o + at, r->ref_lse + (size_t)i * N, &diag) &&
        atomic_exchange(&j->failed, 1) == 0)
      j->diag = diag;
  }
  return NULL;
}

static int reference(run *r, const double *q, const double *k, const double *v, kn_diag *diag) {
  int slices = r->p.batch * r->p.heads, nt = kn_host_threads();
  if (nt > slices) nt = slices;
  if (nt > 64) nt = 64;
  if (kn_attn_has_modifiers(r->d) || nt < 2)
    return kn_attn_reference_v(r->d, NULL, &r->p, &r->va, q, k, v, r->ref_o, r->ref_lse, diag);
  ref_job j = {.r = r, .q = q, .k = k, .v = v};
  atomic_init(&j.next, 0);
  atomic_init(&j.failed, 0);
  pthread_t th[64];
  int started = 0;
  for (; started < nt - 1; started++)
    if (pthread_create(&th[started], NULL, ref_worker, &j)) break;
  ref_worker(&j); /* this thread too (and alone if no thread could start) */
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  if (!atomic_load(&j.failed)) return 0;
  *diag = j.diag;
  return -1;
}

static kiln_status setup(run *r, const kiln_prepare_options *o, int seqlen) {
  const kn_attn_desc *d = r->d;
  r->p = (kn_attn_problem){.batch = o && o->tune_batch > 0 ? o->tune_batch : 1,
                           .heads = o && o->tune_heads > 0 ? o->tune_heads : DEFAULT_TUNE_HEADS,
                           .seqlen_q = seqlen, .seqlen_k = seqlen};
  r->p.kv_heads = r->p.heads;
  r->warmup = o && o->tune_warmup > 0 ? o->tune_warmup : DEFAULT_WARMUP;
  r->repeats = o && o->tune_repeats > 0 ? o->tune_repeats : DEFAULT_REPEATS;
  uint64_t seed = 0x6b696c6e74756e65ull; /* "kilntune" */
  kiln_status vs = variant_values(r, o, &seed);
  if (vs) return vs;
  size_t D = (size_t)d->head_dim, es = kn_scalar_size(d->dtype);
  r->nq = (size_t)r->p.batch * r->p.heads * (size_t)seqlen * D;  /* (B, H, N, D) */
  r->nk = r->nq;                                                 /* (B, HK, N, D), HK = H */
  r->nl = (size_t)r->p.batch * r->p.heads * (size_t)seqlen;      /* (B, H, N) */
  size_t set_bytes = (2 * r->nq + 2 * r->nk) * es + r->nl * sizeof(float);
  r->nsets = (int)((ROTATE_BYTES + set_bytes - 1) / set_bytes);
  if (r->nsets > ROTATE_SETS_MAX) r->nsets = ROTATE_SETS_MAX;
  if (r->nsets < 2) r->nsets = 2;
  double *qd = malloc(r->nq * 8), *kd = malloc(r->nk * 8), *vd = malloc(r->nk * 8);
  r->ref_o = malloc(r->nq * 8);
  r->ref_lse = malloc(r->nl * 8);
  bool ok = qd && kd && vd && r->ref_o && r->ref_lse;
  for (int i = 0; ok && i < r->nsets; i++) {
    io_set *s = &r->sets[i];
    s->q = kn_host_alloc(r->nq * es);
    s->k = kn_host_alloc(r->nk * es);
    s->v = kn_host_alloc(r->nk * es);
    s->o = kn_host_alloc(r->nq * es);
    s->lse = kn_host_alloc(r->nl * sizeof(float));
    ok = s->q && s->k && s->v && s->o && s->lse;
    if (ok) {
      fill(d->dtype, s->q, i ? NULL : qd, r->nq, &seed);
      fill(d->dtype, s->k, i ? NULL : kd, r->nk, &seed);
      fill(d->dtype, s->v, i ? NULL : vd, r->nk, &seed);
    }
  }
  kiln_status st = ok ? KILN_OK
                      : api_fail(KILN_ERR_NOMEM, "out of memory for the tuning problem (%d x %d x "
                                 "%d^2)", r->p.batch, r->p.heads, seqlen);
  kn_diag diag;
  if (!st && reference(r, qd, kd, vd, &diag))
    /* the variant's values do not fit its modifiers (a tensor too small, say) */
    st = api_fail(KILN_ERR_INVALID, "tuning: the float64 reference of the variant failed: %s",
                  diag.message);
  free(qd);
  free(kd);
  free(vd);
  if (!st) st = setup_device(r);
  return st;
}

static void teardown(run *r) {
  for (int i = 0; r->gpu && i < ROTATE_SETS_MAX; i++) {
    io_set *g = &r->dsets[i];
    void *p[5] = {g->q, g->k, g->v, g->o, g->lse};
    for (int j = 0; j < 5; j++) api_dev_free(r->ctx, p[j]);
  }
  for (int i = 0; r->gpu && i < 3; i++) api_dev_free(r->ctx, r->dtensors[i]);
  for (int i = 0; i < ROTATE_SETS_MAX; i++) {
    kn_host_free(r->sets[i].q);
    kn_host_free(r->sets[i].k);
    kn_host_free(r->sets[i].v);
    kn_host_free(r->sets[i].o);
    kn_host_free(r->sets[i].lse);
  }
  free(r->ref_o);
  free(r->ref_lse);
  free(r->alibi);
  free(r->bias);
  free(r->seg);
}

kiln_status api_tune(kiln_context *ctx, const kn_attn_desc *d, const kn_attn_sig *sig,
                     const kiln_prepare_options *o, int seqlen, int record, kiln_tune_result *res,
                     kn_attn_config *best) {
  double t_start = now_us();
  kn_space space;
  kn_diag why;
  if (seqlen <= 0 || seqlen > MAX_TUNE_SEQLEN)
    return api_fail(KILN_ERR_INVALID, "tuning sequence length %d out of range (1..%d)", seqlen,
                    MAX_TUNE_SEQLEN);
  kiln_status cs = api_tune_check(d, o, seqlen);
  if (cs) return cs;
  kn_status st = kn_space_default(&space, "fwd", ctx->target_arch, &why);
  if (st != KN_OK) return api_fail(api_status_of(st), "%s", why.message);
  /* the request's spec, else $KILN_TUNE_SPACE, each applied over the template's space */
  if (o && o->tune_space) {
    if ((st = kn_space_apply(&space, o->tune_space, &why)) != KN_OK)
      return api_fail(api_status_of(st), "%s", why.message);
  } else if (ctx->env_space[0] && (st = kn_space_apply(&space, ctx->env_space, &why)) != KN_OK) {
    return api_fail(api_status_of(st), "KILN_TUNE_SPACE: %s", why.message);
  }

  /* the points the template can compile on this target: the space never offers the others */
  int npoints = kn_space_size(&space), total = 0;
  int *points = malloc(sizeof *points * (size_t)(npoints ? npoints : 1));
  kiln_tune_candidate *cands = calloc((size_t)(npoints ? npoints : 1), sizeof *cands);
  if (!cands || !points) {
    free(points);
    free(cands);
    return api_fail(KILN_ERR_NOMEM, "out of memory");
  }
  /* and each tiling once: points that differ only in an axis the tiling does not take (a
   * matrix instruction of the other dtype, say: api_config_of) are one kernel */
  char first_why[300] = "";
  int accepted = 0;
  for (int i = 0; i < npoints; i++) {
    kn_tune_config tc;
    kn_space_point(&space, i, &tc);
    kn_attn_config c = api_config_of(&tc);
    kn_diag diag;
    if (kn_attn_check_on(ctx->target_arch, d, &c, &diag)) {
      if (!first_why[0]) snprintf(first_why, sizeof first_why, "%.299s", diag.message);
      continue;
    }
    accepted++;
    char ck[KN_ATTN_KEY_MAX], ok[KN_ATTN_KEY_MAX];
    kn_attn_config_key(&c, ck, sizeof ck);
    bool dup = false;
    for (int j = 0; j < total && !dup; j++) {
      kn_tune_config oc;
      kn_space_point(&space, points[j], &oc);
      kn_attn_config x = api_config_of(&oc);
      kn_attn_config_key(&x, ok, sizeof ok);
      dup = !strcmp(ck, ok);
    }
    if (!dup) points[total++] = i;
  }
  if (accepted < npoints)
    api_log(ctx, KILN_LOG_INFO, "tuning space: %d of %d points offered on %s (the others cannot "
            "compile there, e.g. %s)", accepted, npoints, ctx->target_name, first_why);
  if (total < accepted)
    api_log(ctx, KILN_LOG_INFO, "tuning space: %d of them are distinct tilings (the others "
            "differ only in axes the template's tiling does not take)", total);
  if (total == 0) {
    free(points);
    free(cands);
    /* a space none of whose points the template accepts is a bad request, not a failed run */
    return api_fail(KILN_ERR_INVALID, "none of the %d points of the tuning space is a tiling the "
                    "template accepts for %s D%d on %s (%s)", npoints, kn_scalar_name(d->dtype),
                    d->head_dim, ctx->target_name, first_why);
  }
  run r = {.ctx = ctx, .d = d, .sig = sig, .space = &space, .gpu = ctx->kind != KN_DEVICE_HOST};
  kiln_status s = setup(&r, o, seqlen);
  if (s) {
    teardown(&r);
    free(points);
    free(cands);
    return s;
  }
  atomic_fetch_add(&ctx->stats.tunings, 1);
  kn_tune_key key;
  api_tune_key(ctx, d, seqlen, &key);
  api_log(ctx, KILN_LOG_INFO, "tuning fwd [%s] bucket %d on %s: %d candidates, problem "
          "%dx%dx%d^2, %d input sets, %d warm-up + %d timed launches each", key.variant,
          key.seq_bucket, key.arch, total, r.p.batch, r.p.heads, seqlen, r.nsets, r.warmup,
          r.repeats);

  int ibest = -1;
  kn_artifact best_obj = {0};
  kn_tune_config best_tc = {0};
  for (int i = 0; i < total; i++) {
    kn_tune_config tc;
    kn_space_point(&space, points[i], &tc);
    kn_artifact obj;
    try_candidate(&r, &tc, &cands[i], &obj);
    if (cands[i].state == KILN_CANDIDATE_TIMED &&
        (ibest < 0 || cands[i].median_us < cands[ibest].median_us)) {
      ibest = i;
      kn_artifact_free(&best_obj);
      best_obj = obj;
      best_tc = tc;
    } else {
      kn_artifact_free(&obj);
    }
    report(ctx, i + 1, total, &cands[i]);
  }
  teardown(&r);

  kiln_status rc = KILN_OK;
  bool recorded = false;
  if (ibest < 0) {
    rc = api_fail(KILN_ERR_RUNTIME, "tuning fwd [%s]: none of %d candidates could be timed",
                  key.variant, total);
  } else {
    const kiln_tune_candidate *b = &cands[ibest];
    *best = api_config_of(&best_tc);
    kn_tunedb *db = record ? api_db(ctx) : NULL;
    if (db) {
      kn_tune_record rec = {.key = key, .config = best_tc, .time_us = b->median_us};
      kn_diag why;
      kn_status ps = kn_tunedb_put(db, &rec, record == 1, &why);
      recorded = ps == KN_OK;
      if (ps == KN_NOT_REPLACED) {
        /* another process recorded a faster tiling meanwhile: use that one, as it will */
        kn_tune_record theirs;
        if (kn_tunedb_get(db, &key, &theirs, NULL) == KN_OK)
          *best = api_config_of(&theirs.config);
      } else if (ps < 0) {
        char msg[1200];
        snprintf(msg, sizeof msg, "tuning result not recorded: %s", why.message);
        api_log_unwritable(ctx, msg);
      }
    }
    /* the winner's code goes to the cache: the prepare that follows is a cache hit */
    kn_attn_config sc = *best;
    sc.off32 = run_off32(&r);
    kn_module *m = api_build_module("attn_fwd", d, &sc, &(kn_diag){0});
    if (m && best->block_m == b->block_m && best->block_n == b->block_n &&
        best->wgmma == api_config_of(&best_tc).wgmma) {
      kn_cache_key ck = api_cache_key(ctx, "attn_fwd", d, &sc, m);
      api_dev_store(ctx, &ck, &best_obj);
    }
    kn_module_free(m);
    char ck[KN_ATTN_KEY_MAX];
    kn_attn_config_key(best, ck, sizeof ck);
    api_log(ctx, KILN_LOG_INFO, "tuned fwd [%s] bucket %d: [%s], %.1f us (%s)", key.variant,
            key.seq_bucket, ck, b->median_us, recorded ? "recorded" : "not recorded");
  }
  kn_artifact_free(&best_obj);
  free(points);
  if (res) {
    memset(res, 0, sizeof *res);
    res->ncandidates = total;
    res->candidates = cands;
    res->best = ibest;
    res->batch = r.p.batch;
    res->heads = r.p.heads;
    res->seqlen = seqlen;
    res->recorded = recorded;
    res->seconds = (now_us() - t_start) * 1e-6;
    kn_space_describe(&space, res->space, sizeof res->space);
  } else {
    free(cands);
  }
  return rc;
}

kiln_status kiln_tune(kiln_context *ctx, const kiln_attn_desc *desc,
                      const kiln_prepare_options *o, kiln_tune_result *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!ctx || !desc) return api_fail(KILN_ERR_INVALID, "kiln_tune: null context or descriptor");
  if (!api_the_compiler.present)
    return api_fail(KILN_ERR_UNSUPPORTED, "kiln_tune: tuning compiles every candidate, and this "
                    "library (%s) has no compiler; tune with libkiln or `kiln tune`, whose "
                    "records this library reads", api_the_compiler.library);
  kn_attn_desc d;
  kiln_status s = api_desc_from_public(desc, &d);
  if (s) return s;
  if (d.layout != KN_ATTN_DENSE || kn_attn_is_fp8(&d))
    return api_fail(KILN_ERR_UNSUPPORTED, "kiln_tune: %s kernels are not tuned yet (their "
                    "default tiling, or a forced one, runs)", kn_attn_is_fp8(&d) ? "fp8"
                    : d.layout == KN_ATTN_VARLEN ? "varlen" : "paged");
  kn_attn_config c = kn_attn_default_config(ctx->target_arch, &d);
  kn_diag diag;
  if (kn_attn_check_on(ctx->target_arch, &d, &c, &diag))
    return api_fail(KILN_ERR_UNSUPPORTED, "%s", diag.message);
  kn_attn_sig sig;
  if ((s = api_signature(&d, &sig))) return s;
  int seqlen = o && o->seqlen > 0 ? o->seqlen : 1024;
  kn_attn_config best;
  return api_tune(ctx, &d, &sig, o, seqlen, 2, out, &best);
}

void kiln_tune_result_free(kiln_tune_result *r) {
  if (!r) return;
  free(r->candidates);
  r->candidates = NULL;
  r->ncandidates = 0;
}
