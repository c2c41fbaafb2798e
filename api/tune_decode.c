/* tune_decode.c — tuning decode (docs/serving.md) on the caller's own call: the keys per block
 * of the split kernel and the number of pieces the KV range is cut into.
 *
 * The prefill tuner (tune.c) times square problems it makes itself; decode's best tiling
 * depends on the batch, the kv heads and the cache length of the call (how many programs there
 * are against the device's units), so kiln_tune_decode times the caller's call, on its buffers
 * and stream, through kiln_forward: every block_n the decode check accepts ({16, 32, 64, 128})
 * crossed with the heuristic's piece count and the powers of two 1..128 (duplicates of the
 * heuristic's skipped, counts above one piece per KV block clamped by the plan).  Each
 * candidate's output is compared with the default decode kernels' (the ones test_decode and the
 * H200 bench check against float64) within twice the dtype's tolerance before it is timed: a
 * candidate that differs more is WRONG and never chosen.  Time: the device's timer
 * (api/device.c, the prefill tuner's too): the host's clock around the synchronous forward,
 * CUDA / HIP events on the caller's stream; warm-up launches, then the median of the repeats.  The winner stays with the kernel (its split kernel and, for this problem's
 * batch x kv heads, seqlen_k and seqlen_q, its piece count); it is not written to the tuning
 * database yet (the database's key has no batch or kv heads).
 *
 * The caller's o and lse are overwritten (with the right answer, last).  Forwards of the same
 * kernel must not run concurrently with its tuning.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "numeric.h"

static double wall_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* the bytes o spans from its pointer (its strides or the contiguous layout) */
static size_t o_span(const kiln_attn_args *a, int D, size_t es) {
  int64_t st[3] = {a->o_stride[0], a->o_stride[1], a->o_stride[2]};
  if (!st[0] && !st[1] && !st[2])
    st[0] = (int64_t)a->heads * a->seqlen_q * D, st[1] = (int64_t)a->seqlen_q * D, st[2] = D;
  int64_t last = (a->batch - 1) * st[0] + (a->heads - 1) * st[1] + (a->seqlen_q - 1) * st[2] + D;
  return (size_t)last * es;
}

/* copies o back to the host (from device memory, once the stream's work is done) */
static kiln_status fetch_o(kiln_context *ctx, const kiln_attn_args *a, void *stream, void *dst,
                           size_t n) {
  kiln_status s = api_dev_sync(ctx, stream);
  if (!s) s = api_dev_get(ctx, dst, a->o, n);
  return s ? api_fail(s, "kiln_tune_decode: %s", kiln_last_error()) : KILN_OK;
}

/* the largest difference between two copies of o at its rows' elements */
static double o_diff(const kiln_attn_args *a, int D, kn_scalar t, const char *x, const char *y) {
  int64_t st[3] = {a->o_stride[0], a->o_stride[1], a->o_stride[2]};
  if (!st[0] && !st[1] && !st[2])
    st[0] = (int64_t)a->heads * a->seqlen_q * D, st[1] = (int64_t)a->seqlen_q * D, st[2] = D;
  size_t es = kn_scalar_size(t);
  double m = 0;
  for (int b = 0; b < a->batch; b++)
    for (int h = 0; h < a->heads; h++)
      for (int i = 0; i < a->seqlen_q; i++)
        for (int d = 0; d < D; d++) {
          size_t at = (size_t)(b * st[0] + h * st[1] + i * st[2] + d) * es;
          double v = fabs(kn_load_elem(t, x + at) - kn_load_elem(t, y + at));
          if (!(v <= m)) m = isnan(v) ? INFINITY : v;
        }
  return m;
}

/* one timed candidate: the median and the least of `repeats` forwards, in microseconds (the
 * device's timer around each forward on the caller's stream) */
static kiln_status time_forward(kiln_kernel *k, const kiln_attn_args *a, void *stream, int warmup,
                                int repeats, double *median, double *least) {
  kiln_context *ctx = k->ctx;
  double *us = malloc(sizeof *us * (size_t)repeats);
  if (!us) return api_fail(KILN_ERR_NOMEM, "out of memory");
  api_timer tm;
  kiln_status s = api_timer_open(ctx, &tm);
  for (int r = -warmup; r < repeats && !s; r++) {
    double t = 0;
    s = api_timer_start(ctx, &tm, stream);
    if (!s) s = kiln_forward(k, a, stream);
    if (!s) s = api_timer_stop(ctx, &tm, stream, &t);
    if (!s && r >= 0) us[r] = t;
  }
  api_timer_close(ctx, &tm);
  if (s) s = api_fail(s, "kiln_tune_decode: %s", kiln_last_error());
  if (!s) {
    for (int i = 1; i < repeats; i++)
      for (int j = i; j > 0 && us[j] < us[j - 1]; j--) {
        double x = us[j];
        us[j] = us[j - 1], us[j - 1] = x;
      }
    *median = us[repeats / 2];
    *least = us[0];
  }
  free(us);
  return s;
}

kiln_status kiln_tune_decode(kiln_kernel *k, const kiln_attn_args *a, void *stream,
                             const kiln_prepare_options *o, kiln_tune_result *out) {
  if (out) memset(out, 0, sizeof *out);
  if (!k || !a) return api_fail(KILN_ERR_INVALID, "kiln_tune_decode: null kernel or arguments");
  if (k->kind != API_FWD) return api_fail(KILN_ERR_INVALID, "kiln_tune_decode: not a forward kernel");
  if (!api_decode_wanted(k, a))
    return api_fail(KILN_ERR_INVALID, "kiln_tune_decode: the call is not one the decode kernels "
                    "serve (dense or paged, seqlen_q 1..%d, a variant without a block predicate, "
                    "KILN_DECODE not 0)", KN_DECODE_MAX_Q);
  if (getenv("KILN_DECODE_SPLITS"))
    return api_fail(KILN_ERR_INVALID, "kiln_tune_decode: KILN_DECODE_SPLITS forces the pieces; "
                    "unset it to tune them");
  int warmup = o && o->tune_warmup ? o->tune_warmup : 2;
  int repeats = o && o->tune_repeats ? o->tune_repeats : 7;
  if (warmup < 0 || repeats < 1 || warmup > 10000 || repeats > 10000)
    return api_fail(KILN_ERR_INVALID, "kiln_tune_decode: tune_warmup %d / tune_repeats %d out "
                    "of range", warmup, repeats);
  double t_start = wall_us();
  int nc = 0, best = -1;
  kiln_context *ctx = k->ctx;
  const kn_attn_desc *d = &k->desc;
  /* the default's output: the check of every candidate (and a validation of the call) */
  kiln_status s = kiln_forward(k, a, stream);
  if (s) return s;
  size_t es = kn_scalar_size(d->dtype), n = o_span(a, d->head_dim, es);
  char *ref = malloc(n), *got = malloc(n);
  kiln_tune_candidate *cand = calloc(4 * 9, sizeof *cand);
  if (!ref || !got || !cand) {
    free(ref), free(got), free(cand);
    return api_fail(KILN_ERR_NOMEM, "out of memory");
  }
  if ((s = fetch_o(ctx, a, stream, ref, n))) goto done;
  /* the split kernel this call launches (a paged call's page size picks in-page, pages or
   * gather) */
  const int slot = api_decode_slot(k, a->page_size);
  const api_kind kind = api_decode_kind(k, slot);
  if ((s = api_decode_kernels(k, slot))) goto done;
  pthread_mutex_lock(&k->decode_mu);
  kiln_kernel *dflt = k->decode[slot];
  pthread_mutex_unlock(&k->decode_mu);
  /* (paged: the keys are the table's capacity, as kiln_forward's problem has them) */
  const int nk = d->layout == KN_ATTN_PAGED ? a->max_pages * a->page_size : a->seqlen_k;
  kn_attn_problem p = {.batch = a->batch, .heads = a->heads, .kv_heads = a->kv_heads,
                       .seqlen_q = a->seqlen_q, .seqlen_k = nk};
  kn_attn_sig sig;
  kn_diag diag;
  if (kn_attn_decode_signature(d, 0, &sig, &diag)) {
    s = api_fail(KILN_ERR_INVALID, "kiln_tune_decode: %s", diag.message);
    goto done;
  }
  static const int bns[] = {16, 32, 64, 128}, pieces[] = {0, 1, 2, 4, 8, 16, 32, 64, 128};
  kiln_kernel *best_k = dflt;
  int best_splits = 0;
  for (size_t i = 0; i < sizeof bns / sizeof bns[0]; i++) {
    kn_attn_config c = dflt->cfg;
    c.block_n = bns[i];
    if (kn_attn_decode_check(ctx->target_arch, d, &c, &diag)) continue;
    /* an in-page kernel reads whole blocks from one page: its block_n divides the page size */
    if (slot == API_SPLIT_IN_PAGE && a->page_size % c.block_n) continue;
    /* a pages kernel reads chunks of 16 keys: its block_n a multiple of 16 */
    if (slot == API_SPLIT_PAGES && c.block_n % KN_DECODE_CHUNK) continue;
    kiln_kernel *ks = NULL;
    double t0 = wall_us();
    kiln_status bs = api_get_kernel(ctx, d, &sig, &c, false, kind, &ks);
    double compile_ms = (wall_us() - t0) / 1e3;
    int heur = kn_attn_decode_plan(d, &c, &p, ctx->compute_units, 0).splits;
    for (size_t j = 0; j < sizeof pieces / sizeof pieces[0]; j++) {
      int want = pieces[j] ? kn_attn_decode_plan(d, &c, &p, ctx->compute_units, pieces[j]).splits
                           : heur;
      if (pieces[j] && want == heur) continue;
      bool dup = false;  /* the clamp may map two counts to one */
      for (int x = 0; x < nc; x++)
        dup |= cand[x].block_n == c.block_n && cand[x].decode_splits == want;
      if (dup) continue;
      kiln_tune_candidate *cd = &cand[nc++];
      cd->block_m = c.block_m, cd->block_n = c.block_n, cd->warps = c.warps;
      cd->stages = c.stages, cd->decode_splits = want, cd->compile_ms = compile_ms;
      snprintf(cd->matrix_instr, sizeof cd->matrix_instr, "decode");
      if (bs) {
        cd->state = KILN_CANDIDATE_FAILED;
        snprintf(cd->note, sizeof cd->note, "%s", kiln_last_error());
        continue;
      }
      pthread_mutex_lock(&k->decode_mu);
      k->decode[slot] = ks;
      k->tuned_splits = want, k->tuned_bk = a->batch * a->kv_heads;
      k->tuned_nk = nk, k->tuned_nq = a->seqlen_q;
      pthread_mutex_unlock(&k->decode_mu);
      kiln_status rs = kiln_forward(k, a, stream);
      if (!rs) rs = fetch_o(ctx, a, stream, got, n);
      double diff = rs ? INFINITY : o_diff(a, d->head_dim, d->dtype, ref, got);
      if (rs) {
        cd->state = KILN_CANDIDATE_FAILED;
        snprintf(cd->note, sizeof cd->note, "%s", kiln_last_error());
      } else if (!(diff <= 2 * kn_attn_tolerance(d->dtype))) {
        cd->state = KILN_CANDIDATE_WRONG;
        snprintf(cd->note, sizeof cd->note, "differs from the default decode kernels by %.3g",
                 diff);
      } else if ((rs = time_forward(k, a, stream, warmup, repeats, &cd->median_us,
                                    &cd->min_us))) {
        cd->state = KILN_CANDIDATE_FAILED;
        snprintf(cd->note, sizeof cd->note, "%s", kiln_last_error());
      } else {
        cd->state = KILN_CANDIDATE_TIMED;
        snprintf(cd->note, sizeof cd->note, "%d pieces%s", want, pieces[j] ? "" : " (heuristic)");
        if (best < 0 || cd->median_us < cand[best].median_us) {
          best = nc - 1;
          best_k = ks;
          best_splits = want;
        }
      }
      api_log(ctx, KILN_LOG_INFO, "tune decode: block_n %d, %d pieces: %s", c.block_n, want,
              cd->note);
    }
  }
  pthread_mutex_lock(&k->decode_mu);
  k->decode[slot] = best >= 0 ? best_k : dflt;
  k->tuned_splits = best >= 0 ? best_splits : 0;
  pthread_mutex_unlock(&k->decode_mu);
  if (best < 0) {
    s = api_fail(KILN_ERR_RUNTIME, "kiln_tune_decode: no candidate could be timed");
  } else {
    s = kiln_forward(k, a, stream);  /* o and lse: the winner's */
    api_log(ctx, KILN_LOG_INFO, "tune decode: B %d x %d kv heads, Nk %d, Nq %d -> block_n %d, "
            "%d pieces (%.1f us)", a->batch, a->kv_heads, nk, a->seqlen_q,
            cand[best].block_n, best_splits, cand[best].median_us);
  }
done:
  if (out && !s) {
    out->ncandidates = nc, out->candidates = cand, out->best = best;
    out->batch = a->batch, out->heads = a->heads, out->seqlen = a->seqlen_k;
    out->seconds = (wall_us() - t_start) / 1e6;
    snprintf(out->space, sizeof out->space, "decode: block_n=16,32,64,128; pieces=heuristic,"
             "1,2,4,...,128");
    cand = NULL;
  }
  free(cand), free(ref), free(got);
  return s;
}
