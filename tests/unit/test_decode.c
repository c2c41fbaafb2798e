/* test_decode.c — the split-KV decode kernels (templates/attn_decode.c, docs/serving.md) against
 * the float64 reference, on every target that runs here.
 *
 * 1. The kernels on the interpreter, the host, gfx90a-emu and gfx942-emu: query rows 1, 4 and 16
 *    per sequence (speculative decoding), key lengths 1, 7, block boundaries (63, 64, 65, 128) and
 *    1000, GQA (8/2, 32/8), MQA and MHA, pieces from 1 to one per KV block (and the heuristic's
 *    count), plain, causal both ways, window, softcap, ALiBi, prefix and a user score modifier
 *    that reads a per-head tensor (each packed row must see its own head), with and without lse,
 *    fresh random inputs each run.  The partial outputs go through a workspace that starts as
 *    NaN, so a slot the combine reads and the split kernel did not write fails the check.
 * 2. The split-count heuristic: one piece when the device is full, more when it is not, never
 *    an empty piece, never more than the KV blocks.
 * 3. Refusals: varlen, the document mask, a user @block_mask, seqlen_q above 16: each a clear
 *    error, never a kernel.
 * 4. The API on the host: kiln_forward with seqlen_q <= 16 goes through the decode kernels
 *    (two more compiles at the first call, none after), q in a (B, N, H, D) layout and a
 *    GQA 32/8 problem against the reference, KILN_DECODE_SPLITS forcing pieces, KILN_DECODE=0
 *    serving it with the prefill kernel, seqlen_q 17 the prefill kernel; kiln_tune_decode over
 *    block_n and pieces, its winner then checked against the reference, its refusals; four
 *    threads decoding through one kernel (one workspace) at once.
 * 5. Code: the default decode kernels (the paged ones of every read mode too) compile for
 *    gfx90a / gfx942 without VGPR spills and for sm_80 / sm_90a (ptxas, when installed) without
 *    spills, at head dims 64 and 128.
 *
 * KILN_TEST_SEED=<n> replays the random inputs; KILN_TEST_VERBOSE=1 prints each case;
 * KILN_TEST_FILTER=test_api* runs the tests whose names match.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "attn_decode.h"
#include "attn_internal.h"
#include "kiln.h"
#include "numeric.h"
#include "attn_test.h"
#include "test_mods.h"

typedef struct dc_case {
  const char *name;
  kn_attn_desc desc;
  int batch, heads, kv_heads, nq, nk;
  int splits;  /* 0: the heuristic's (for 4 compute units) */
  /* paged (desc.layout KN_ATTN_PAGED): pages of page_size, sequence b's cache length len[b]
   * (nk is then the table's capacity), `tail` unused table entries, `spare` unused pages */
  int page_size, len[8], tail, spare;
  kn_attn_vargs va;
  kn_attn_named_arg named[2];
  void *buf[2];
} dc_case;

static void dc_prepare(dc_case *c) {
  kn_attn_vargs *va = &c->va;
  memset(va, 0, sizeof *va);
  memset(c->buf, 0, sizeof c->buf);
  const kn_attn_desc *d = &c->desc;
  int B = c->batch, H = c->heads;
  if (d->window) {
    va->window_left = irand(-1, 3) < 0 ? -1 : irand(0, 300);
    va->window_right = irand(-1, 3) < 0 ? -1 : irand(0, 10);
  }
  if (d->softcap) va->softcap = (float)unif(0.5, 3);
  if (d->alibi) {
    float *s = malloc(sizeof *s * (size_t)(B * H));
    for (int i = 0; i < B * H; i++) s[i] = (float)unif(0.01, 0.6);
    va->alibi_slopes = s, va->alibi_sb = H;
    c->buf[0] = s;
  }
  if (d->prefix) va->prefix_len = irand(0, c->nk);
  if (d->mods) {
    float *t = malloc(sizeof *t * (size_t)H);
    for (int i = 0; i < H; i++) t[i] = (float)unif(0.2, 3);
    c->named[0] = (kn_attn_named_arg){"temp", {.p = t}, sizeof *t * (size_t)H};
    va->mods = c->named, va->nmods = 1;
    c->buf[1] = t;
  }
}

static double abs_err(double got, double want) {
  if (isinf(want) || isinf(got)) return got == want ? 0 : INFINITY;
  double e = fabs(got - want);
  return e == e ? e : INFINITY;
}

static void fill_rand(kn_scalar dt, void *p, double *pd, size_t n) {
  size_t es = kn_scalar_size(dt);
  for (size_t i = 0; i < n; i++) {
    kn_store_elem(dt, (char *)p + i * es, unif(-2, 2));
    pd[i] = kn_load_elem(dt, (char *)p + i * es);
  }
}

static void run_case(const char *target, dc_case *c, const kn_attn_config *cfg) {
  const kn_attn_desc *d = &c->desc;
  const bool paged = d->layout == KN_ATTN_PAGED;
  int32_t *table = NULL;
  int max_pages = 0, num_pages = 0;
  if (paged) {  /* the pool (num_pages, page_size, HK, D); nk: the table's capacity */
    table = test_page_table(c->batch, c->len, c->page_size, c->tail, c->spare, &max_pages,
                            &num_pages);
    c->nk = max_pages * c->page_size;
  }
  dc_prepare(c);
  const kn_scalar dt = d->dtype;
  const int D = d->head_dim, B = c->batch, H = c->heads, HK = c->kv_heads;
  const size_t es = kn_scalar_size(dt), nq = (size_t)B * H * c->nq * D,
               nk = paged ? (size_t)num_pages * c->page_size * HK * D : (size_t)B * HK * c->nk * D,
               nl = (size_t)B * H * c->nq;
  void *q = malloc(nq * es + 16), *k = malloc(nk * es + 16), *v = malloc(nk * es + 16),
       *o = malloc(nq * es + 16);
  float *lse = malloc(nl * 4 + 16);
  double *qd = malloc(nq * 8 + 8), *kd = malloc(nk * 8 + 8), *vd = malloc(nk * 8 + 8),
         *od = malloc(nq * 8 + 8), *ld = malloc(nl * 8 + 8);
  assert_true(q && k && v && o && lse && qd && kd && vd && od && ld);
  fill_rand(dt, q, qd, nq);
  fill_rand(dt, k, kd, nk);
  fill_rand(dt, v, vd, nk);
  for (size_t i = 0; i < nq; i++) kn_store_elem(dt, (char *)o + i * es, NAN);
  for (size_t i = 0; i < nl; i++) lse[i] = NAN;

  kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = c->nq,
                       .seqlen_k = c->nk};
  if (paged) {
    p.block_table = table, p.cache_seqlens = c->len, p.page_size = c->page_size;
    p.num_pages = num_pages, p.max_pages = max_pages;
  }
  const kn_region io[5] = {{q, nq * es}, {k, nk * es}, {v, nk * es}, {o, nq * es}, {lse, nl * 4}};
  const int splits = run_decode_on_target(target, d, cfg, &p, &c->va, c->splits, io, c->name);
  const char *tn = target ? target : "interp";
  kn_diag diag;
  if (kn_attn_reference_v(d, NULL, &p, &c->va, qd, kd, vd, od, d->has_lse ? ld : NULL, &diag))
    fail_msg("%s: reference: %s", c->name, diag.message);
  double err = 0, lerr = 0;
  for (size_t i = 0; i < nq; i++) {
    double e = abs_err(kn_load_elem(dt, (char *)o + i * es), od[i]);
    if (e > err) err = e;
  }
  if (d->has_lse)
    for (size_t i = 0; i < nl; i++) {
      double e = abs_err(lse[i], ld[i]);
      if (e > lerr) lerr = e;
    }
  double tol = kn_attn_tolerance(dt), ltol = kn_attn_lse_tolerance(dt) * 4;
  char pg[96] = "";
  for (int b = 0, at = 0; paged && b < B && at < 80; b++)
    at += snprintf(pg + at, sizeof pg - (size_t)at, "%s%d", b ? "," : " page lens ", c->len[b]);
  if (verbose())
    printf("    %-16s %-10s %s D%d B%d H%d/%d Nq %d Nk %d%s%s%.0d %dx%d splits %d: err %.3g "
           "lse %.3g\n", c->name, tn, kn_scalar_name(dt), D, B, H, HK, c->nq, c->nk, pg,
           paged ? " ps " : "", c->page_size, cfg->block_m, cfg->block_n, splits, err, lerr);
  if (!(err <= tol) || !(lerr <= ltol))
    fail_msg("%s on %s (seed %llu, %s D%d B%d H%d/%d Nq %d Nk %d%s%s%.0d, %dx%d, %d splits): "
             "err O %.3g (tol %.3g), lse %.3g", c->name, tn, (unsigned long long)seed0,
             kn_scalar_name(dt), D, B, H, HK, c->nq, c->nk, pg, paged ? " ps " : "",
             c->page_size, cfg->block_m, cfg->block_n, splits, err, tol, lerr);
  free(q), free(k), free(v), free(o), free(lse);
  free(qd), free(kd), free(vd), free(od), free(ld);
  free(c->buf[0]), free(c->buf[1]), free(table);
}

static int case_list(dc_case *out, kn_scalar dt, int D) {
  static const char *const extra[] = {"prefix", "head-temp", NULL};
  test_variant v[16];
  kn_attn_desc base = {.dtype = dt, .head_dim = D, .has_lse = true};
  int n = test_variant_list(base, extra, v);
  for (int i = 0; i < n; i++) out[i] = (dc_case){.name = v[i].name, .desc = v[i].desc};
  return n;
}

/* shapes: (B, H, HK, Nq, Nk, splits) */
static const struct { int B, H, HK, nq, nk, splits; } shapes[] = {
    {2, 8, 2, 1, 1000, 0},  {1, 8, 2, 4, 65, 3},    {3, 4, 4, 1, 7, 0},   {2, 4, 1, 16, 128, 2},
    {1, 8, 2, 16, 64, 1},   {2, 6, 3, 4, 1, 0},     {1, 4, 1, 1, 63, 100}, {1, 8, 8, 4, 300, 5},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0] };

/* paged shapes (B, H, HK, Nq, page size, cache lengths, unused table entries, spare pages,
 * pieces): page sizes 1, 16, 64 and 256, empty sequences, length 1, lengths on and next to page
 * boundaries, pages shuffled (test_page_table), garbage tail entries, GQA 4:1 and 32/8 scaled to
 * 8/2, MQA, MHA, Nq 1 / 4 / 16, pieces from one to one per block */
static const struct { int B, H, HK, nq, ps, len[4], tail, spare, splits; } pshapes[] = {
    {4, 8, 2, 1, 16, {0, 1, 32, 45}, 2, 3, 0},    {3, 4, 1, 4, 1, {33, 0, 7}, 1, 5, 3},
    {3, 8, 2, 16, 64, {64, 129, 2}, 1, 0, 2},     {2, 8, 2, 1, 256, {256, 300}, 1, 1, 100},
    {2, 4, 1, 4, 16, {16, 700}, 3, 2, 0},         {3, 4, 4, 2, 64, {65, 0, 128}, 0, 1, 4},
};
enum { NPSHAPES = sizeof pshapes / sizeof pshapes[0] };

/* the variants over nshapes shapes on target (NULL: the interpreter): dense shapes[], or the
 * paged layout over pshapes[] */
static void sweep_layout(const char *target, kn_scalar dt, int D, int nshapes, bool paged) {
  dc_case cs[16];
  int n = case_list(cs, dt, D);
  clock_t t0 = clock();
  const kn_target *t = target_named(target);
  for (int i = 0; i < n; i++)
    for (int s = 0; s < nshapes; s++) {
      /* reduced (KILN_TEST_REDUCED): every third (variant, shape), rotating over the sweeps */
      if (!test_take(3)) continue;
      dc_case c = cs[i];
      if (paged) {
        int w = (s + 2 * i) % NPSHAPES;
        c.desc.layout = KN_ATTN_PAGED;
        c.batch = pshapes[w].B, c.heads = pshapes[w].H, c.kv_heads = pshapes[w].HK;
        c.nq = pshapes[w].nq, c.page_size = pshapes[w].ps, c.splits = pshapes[w].splits;
        c.tail = pshapes[w].tail, c.spare = pshapes[w].spare;
        memcpy(c.len, pshapes[w].len, sizeof pshapes[w].len);
      } else {
        int w = (s + 3 * i) % NSHAPES;
        c.batch = shapes[w].B, c.heads = shapes[w].H, c.kv_heads = shapes[w].HK;
        c.nq = shapes[w].nq, c.nk = shapes[w].nk, c.splits = shapes[w].splits;
      }
      kn_attn_config cfg = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 2};
      if ((s + i) % 2) cfg = kn_attn_decode_default_config(t ? t->arch : NULL, &c.desc);
      run_case(target, &c, &cfg);
    }
  printf("[ decode ] %-11s %s D%d%s: %d variants x %d shapes, %.1f s\n",
         target ? target : "interp", kn_scalar_name(dt), D, paged ? " paged" : "", n, nshapes,
         (double)(clock() - t0) / CLOCKS_PER_SEC);
}

static void sweep(const char *target, kn_scalar dt, int D, int nshapes) {
  sweep_layout(target, dt, D, nshapes, false);
}
static void paged_sweep(const char *target, kn_scalar dt, int D, int nshapes) {
  sweep_layout(target, dt, D, nshapes, true);
}


static void test_interp(void **state) {
  (void)state;
  sweep(NULL, KN_F32, 24, 2);
  sweep(NULL, KN_F16, 40, 2);
}

static void test_host(void **state) {
  (void)state;
  sweep("host", KN_F16, 64, NSHAPES);
  sweep("host", KN_BF16, 128, 3);
  sweep("host", KN_F32, 33, 2);
}

/* the serving shape: GQA 32/8, head dim 128, Nq 1 / 4 / 16, block-boundary lengths, many pieces */
static void test_host_gqa_32_8(void **state) {
  (void)state;
  static const int nqs[] = {1, 4, 16}, nks[] = {1, 64, 1000, 129};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) {
      dc_case c = {.name = "gqa-32/8", .desc = {.dtype = KN_F16, .head_dim = 128, .has_lse = true,
                                                .causal = (i + j) % 2}};
      c.batch = 2, c.heads = 32, c.kv_heads = 8, c.nq = nqs[i], c.nk = nks[j];
      c.splits = j == 2 ? 16 : 0;
      kn_attn_config cfg = kn_attn_decode_default_config(NULL, &c.desc);
      run_case("host", &c, &cfg);
    }
}

static void test_emu(void **state) {
  (void)state;
  sweep("gfx90a-emu", KN_F16, 64, 2);
  sweep("gfx942-emu", KN_BF16, 64, 2);
}

/* paged: the split kernel reading K and V through the block table, each sequence its own length */
static void test_paged_interp(void **state) {
  (void)state;
  paged_sweep(NULL, KN_F32, 24, 2);
  paged_sweep(NULL, KN_F16, 40, NPSHAPES);
}

static void test_paged_host(void **state) {
  (void)state;
  paged_sweep("host", KN_F16, 64, 2);
  paged_sweep("host", KN_BF16, 128, 1);
}

static void test_paged_emu(void **state) {
  (void)state;
  paged_sweep("gfx90a-emu", KN_F16, 64, 1);
  paged_sweep("gfx942-emu", KN_BF16, 32, 1);
}

/* the serving shape through pages of 16: GQA 32/8, D 128, Nq 1 / 4 / 16, ragged lengths */
static void test_paged_gqa_32_8(void **state) {
  (void)state;
  static const int nqs[] = {1, 4, 16}, pss[] = {16, 1, 256};
  for (int i = 0; i < 3; i++) {
    dc_case c = {.name = "paged-gqa-32/8", .desc = {.dtype = KN_F16, .head_dim = 128,
                 .has_lse = true, .causal = i % 2, .layout = KN_ATTN_PAGED}};
    c.batch = 3, c.heads = 32, c.kv_heads = 8, c.nq = nqs[i], c.page_size = pss[i];
    c.len[0] = 0, c.len[1] = 1 + i * 255, c.len[2] = 1000;
    c.tail = 1, c.spare = 2, c.splits = i == 1 ? 16 : 0;
    /* the host's tiling, then the GPUs' paged ones (sm_90a's 16x32 with one warp runs on the
     * host; gfx942's 32x16 with 2 waves on its emulated twin) */
    kn_attn_config cfg = kn_attn_decode_default_config(NULL, &c.desc);
    run_case("host", &c, &cfg);
    cfg = kn_attn_decode_default_config(kn_target_get("sm_90a")->arch, &c.desc);
    run_case("host", &c, &cfg);
    if (i == 0) {
      cfg = kn_attn_decode_default_config(kn_emu_target("gfx942-emu")->arch, &c.desc);
      run_case("gfx942-emu", &c, &cfg);
    }
  }
}

/* page sizes off the tested ones (primes, and next to powers of two up to the largest, 256):
 * kn_paged_block finds each key's table entry by a multiply and shift with the page size's
 * reciprocal, exact for pages of 1..256 only by arithmetic; and the in-page loop steps its slot
 * through pages of several blocks.  On the host: the gather kernel at 16x32 (every size), the
 * in-page one at 16x16 where the page size is a multiple of 16 (run_decode_on_target picks it
 * every other call), lengths around page boundaries, shuffled pages; every fifth size also on
 * the interpreter */
static void test_paged_page_sizes(void **state) {
  (void)state;
  static const int pss[] = {2, 3, 7, 13, 17, 31, 33, 48, 63, 97, 127, 129, 160, 191, 251, 255};
  clock_t t0 = clock();
  for (int i = 0; i < (int)(sizeof pss / sizeof pss[0]); i++) {
    const int ps = pss[i];
    dc_case c = {.name = "paged-sizes", .desc = {.dtype = KN_F16, .head_dim = 32,
                 .has_lse = true, .causal = i % 2, .layout = KN_ATTN_PAGED}};
    c.batch = 3, c.heads = 8, c.kv_heads = 2, c.nq = 1 + 3 * (i % 2), c.page_size = ps;
    c.len[0] = ps - 1, c.len[1] = 2 * ps + 1 + irand(0, ps), c.len[2] = irand(0, 700);
    c.tail = 1, c.spare = 1, c.splits = i % 3 ? 0 : 3;
    kn_attn_config cfg = {.block_m = 16, .block_n = ps % 16 ? 32 : 16, .warps = 1, .stages = 2};
    run_case("host", &c, &cfg);
    run_case("host", &c, &cfg);
    if (i % 5 == 0) {  /* the interpreter checks every access against the buffers */
      c.len[2] = irand(0, 100);
      run_case(NULL, &c, &cfg);
    }
  }
  printf("[ decode ] host paged page sizes: %d sizes, %.1f s\n", (int)(sizeof pss / sizeof pss[0]),
         (double)(clock() - t0) / CLOCKS_PER_SEC);
}

/* the pages kernel (page sizes that are multiples of 16 but not of BLOCK_N: each block read as
 * chunks of 16 keys, one table entry each) beside in-page and gather at one tiling, 16x64:
 * page sizes 1 / 8 (gather), 16 / 32 / 48 (pages), 64 / 256 (in-page), GQA 8/2 and MQA 4/1,
 * Nq 1 / 4 / 16, ragged lengths (empty, one key, next to page and block boundaries), shuffled
 * pages and garbage tail entries, against float64; each call asserts the mode the runtime's
 * pick gave.  On the host (f16 D 64), the interpreter (f32 D 24, shorter sequences: it checks
 * every access) and gfx942-emu (bf16 D 64 at gfx942's pages tiling) */
static void test_paged_chunks(void **state) {
  (void)state;
  static const int pss[] = {1, 8, 16, 32, 48, 64, 256};
  static const int nqs[] = {1, 4, 16};
  clock_t t0 = clock();
  test_decode_alternate = 0;
  int pages_runs = 0;
  for (int tgt = 0; tgt < 3; tgt++) {
    const char *target = tgt == 0 ? "host" : tgt == 1 ? NULL : "gfx942-emu";
    for (int i = 0; i < (int)(sizeof pss / sizeof pss[0]); i++) {
      if (tgt == 2 && i % 2 == 0 && pss[i] != 16) continue;  /* the emulator: fewer sizes */
      const int ps = pss[i];
      const bool mqa = (i + tgt) % 2;
      dc_case c = {.name = "paged-chunks",
                   .desc = {.dtype = tgt == 1 ? KN_F32 : tgt == 2 ? KN_BF16 : KN_F16,
                            .head_dim = tgt == 1 ? 24 : 64, .has_lse = true, .causal = i % 3 == 1,
                            .layout = KN_ATTN_PAGED}};
      c.batch = 3, c.heads = mqa ? 4 : 8, c.kv_heads = mqa ? 1 : 2;
      c.nq = nqs[(i + tgt) % 3], c.page_size = ps;
      const int most = tgt == 0 ? 900 : 200;
      c.len[0] = i % 2 ? 0 : 1, c.len[1] = 64 * (1 + i % 3) + (i % 2 ? -1 : 17);
      c.len[2] = irand(1, most);
      c.tail = 2, c.spare = 3, c.splits = i % 3 == 2 ? 3 : 0;
      kn_attn_config cfg = {.block_m = 16, .block_n = 64, .warps = 1, .stages = 2};
      if (tgt == 2)
        cfg = kn_attn_decode_read_config(kn_emu_target("gfx942-emu")->arch, &c.desc,
                                         KN_DECODE_READ_PAGES);
      run_case(target, &c, &cfg);
      const kn_decode_read want = ps % cfg.block_n == 0 ? KN_DECODE_READ_IN_PAGE
                                  : ps % 16 == 0        ? KN_DECODE_READ_PAGES
                                                        : KN_DECODE_READ_GATHER;
      if (test_decode_read_last != want)
        fail_msg("page size %d, block_n %d: read mode %d, not %d", ps, cfg.block_n,
                 test_decode_read_last, want);
      pages_runs += want == KN_DECODE_READ_PAGES;
    }
  }
  test_decode_alternate = 1;
  assert_true(pages_runs >= 7);
  printf("[ decode ] paged chunks: %d pages-kernel runs, %.1f s\n", pages_runs,
         (double)(clock() - t0) / CLOCKS_PER_SEC);
}

static void test_plan(void **state) {
  (void)state;
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 128};
  kn_attn_config c = {.block_m = 16, .block_n = 64, .warps = 1, .stages = 2};
  /* a full device: one piece */
  kn_attn_problem p = {.batch = 128, .heads = 32, .kv_heads = 8, .seqlen_q = 1, .seqlen_k = 4096};
  kn_decode_plan r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_int_equal(r.splits, 1);
  assert_int_equal(r.split_len, 4096);
  /* batch 1: as many pieces as fill the device, none empty */
  p.batch = 1, p.seqlen_k = 32768;
  r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_true(r.splits > 8 && r.splits <= KN_DECODE_MAX_SPLITS);
  assert_true((int64_t)(r.splits - 1) * r.split_len < p.seqlen_k);
  assert_int_equal(r.split_len % 64, 0);
  /* at least KN_DECODE_MIN_BLOCKS blocks a piece; forced counts at most one piece a block */
  p.seqlen_k = 100;
  r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_int_equal(r.splits, 1);
  p.seqlen_k = 1000;  /* 16 blocks */
  r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_int_equal(r.splits, 16 / KN_DECODE_MIN_BLOCKS);
  r = kn_attn_decode_plan(&d, &c, &p, 132, 1000);
  assert_int_equal(r.splits, 16);
  p.seqlen_k = 0;
  r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_int_equal(r.splits, 1);
  /* rows: GQA 4 x 4 query rows = 16, one block; 16 query rows of 4 heads: 64 rows, 4 blocks */
  p.seqlen_q = 4, p.seqlen_k = 1000;
  r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_int_equal(r.row_blocks, 1);
  p.seqlen_q = 16;
  r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_int_equal(r.row_blocks, 4);
  assert_int_equal(r.ws_rows, 64);
  assert_int_equal(r.ws_lse_bytes, (size_t)8 * r.splits * 64 * 4);
  p.seqlen_q = 1;  /* GQA 4: 4 live rows of the 16, only they are stored */
  r = kn_attn_decode_plan(&d, &c, &p, 132, 0);
  assert_int_equal(r.ws_rows, 4);
  assert_int_equal(r.ws_o_bytes, (size_t)8 * r.splits * 4 * 128 * 4);
}

static void test_refusals(void **state) {
  (void)state;
  kn_diag diag;
  kn_attn_config c = {.block_m = 16, .block_n = 32, .warps = 1, .stages = 2};
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 64, .layout = KN_ATTN_VARLEN};
  assert_int_equal(kn_attn_decode_check(NULL, &d, &c, &diag), -1);
  assert_non_null(strstr(diag.message, "dense"));
  d.layout = KN_ATTN_DENSE, d.document = true;
  assert_int_equal(kn_attn_decode_check(NULL, &d, &c, &diag), -1);
  assert_non_null(strstr(diag.message, "block predicate"));
  d.document = false, d.mods = TEST_CHUNK_MASK_MOD;
  kn_module *m = kn_module_new("<r>");
  assert_null(kn_attn_decode_build(m, &d, &c, KN_DECODE_READ_ANY, &diag));
  kn_module_free(m);
  d.mods = NULL;
  kn_attn_sig sig;
  assert_int_equal(kn_attn_signature(&d, &sig, &diag), 0);
  kn_attn_problem p = {.batch = 1, .heads = 2, .kv_heads = 1, .seqlen_q = 17, .seqlen_k = 5};
  kn_decode_plan plan = kn_attn_decode_plan(&d, &c, &p, 4, 0);
  kn_argval sa[KN_ATTN_MAX_PARAMS], ca[KN_DECODE_COMBINE_NPARAMS];
  int sg[3], cg[3];
  char x[16];
  assert_int_equal(kn_attn_decode_fill_args(&d, &sig, &c, &p, &plan, x, x, x, x, NULL,
                                            (float *)x, (float *)x, NULL, sa, sg, ca, cg, &diag),
                   -1);
  assert_non_null(strstr(diag.message, "seqlen_q 17"));
}

/* ---- the API ---------------------------------------------------------------------------------- */

/* one kiln_forward on the host against the reference; q is (B, N, H, D) when `bnhd` */
static void api_case(kiln_kernel *kern, const kn_attn_desc *d, int B, int H, int HK, int nq,
                     int nk, bool bnhd, const kiln_attn_args *extra) {
  const kn_scalar dt = d->dtype;
  const int D = d->head_dim;
  const size_t es = kn_scalar_size(dt), n_q = (size_t)B * H * nq * D,
               n_k = (size_t)B * HK * nk * D, n_l = (size_t)B * H * nq;
  void *q = malloc(n_q * es + 16), *k = malloc(n_k * es + 16), *v = malloc(n_k * es + 16),
       *o = malloc(n_q * es + 16);
  float *lse = malloc(n_l * 4 + 16);
  double *qd = malloc(n_q * 8 + 8), *kd = malloc(n_k * 8 + 8), *vd = malloc(n_k * 8 + 8),
         *od = malloc(n_q * 8 + 8), *ld = malloc(n_l * 8 + 8), *qc = malloc(n_q * 8 + 8);
  assert_true(q && k && v && o && lse && qd && kd && vd && od && ld && qc);
  fill_rand(dt, q, qd, n_q);
  fill_rand(dt, k, kd, n_k);
  fill_rand(dt, v, vd, n_k);
  kiln_attn_args a = extra ? *extra : (kiln_attn_args){0};
  a.q = q, a.k = k, a.v = v, a.o = o, a.lse = d->has_lse ? lse : NULL;
  a.batch = B, a.heads = H, a.kv_heads = HK, a.seqlen_q = nq, a.seqlen_k = nk;
  /* the reference reads (B, H, N, D): q's values in that order */
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < nq; i++)
        for (int x = 0; x < D; x++) {
          size_t at = (((size_t)b * H + h) * nq + i) * D + x;
          size_t from = bnhd ? (((size_t)b * nq + i) * H + h) * D + x : at;
          qc[at] = qd[from];
        }
  if (bnhd) {
    a.q_stride[0] = (int64_t)nq * H * D, a.q_stride[1] = D, a.q_stride[2] = (int64_t)H * D;
  }
  kiln_status st = kiln_forward(kern, &a, NULL);
  if (st) fail_msg("kiln_forward (B%d H%d/%d Nq %d Nk %d): %s", B, H, HK, nq, nk,
                   kiln_last_error());
  kn_attn_problem p = {.batch = B, .heads = H, .kv_heads = HK, .seqlen_q = nq, .seqlen_k = nk};
  kn_attn_vargs va = {.window_left = a.window_left, .window_right = a.window_right,
                      .softcap = a.softcap};
  kn_diag diag;
  if (kn_attn_reference_v(d, NULL, &p, &va, qc, kd, vd, od, d->has_lse ? ld : NULL, &diag))
    fail_msg("reference: %s", diag.message);
  double err = 0, lerr = 0;
  for (size_t i = 0; i < n_q; i++) {
    double e = abs_err(kn_load_elem(dt, (char *)o + i * es), od[i]);
    if (e > err) err = e;
  }
  for (size_t i = 0; d->has_lse && i < n_l; i++) {
    double e = abs_err(lse[i], ld[i]);
    if (e > lerr) lerr = e;
  }
  if (verbose())
    printf("    api B%d H%d/%d Nq %d Nk %d%s: err %.3g lse %.3g\n", B, H, HK, nq, nk,
           bnhd ? " bnhd" : "", err, lerr);
  if (!(err <= kn_attn_tolerance(dt)) || !(lerr <= 4 * kn_attn_lse_tolerance(dt)))
    fail_msg("api (seed %llu) B%d H%d/%d Nq %d Nk %d%s: err %.3g lse %.3g",
             (unsigned long long)seed0, B, H, HK, nq, nk, bnhd ? " bnhd" : "", err, lerr);
  free(q), free(k), free(v), free(o), free(lse), free(qd), free(kd), free(vd), free(od), free(ld);
  free(qc);
}

static void test_api_host(void **state) {
  (void)state;
  kiln_context_options co = {.no_cache = 1, .device = "host"};
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&co, &ctx), KILN_OK);
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = 64, .causal = KILN_CAUSAL_BOTTOM_RIGHT,
                       .has_lse = 1};
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 64, .causal = KN_CAUSAL_BOTTOM_RIGHT,
                    .has_lse = true};
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx, &pd, NULL, &k), KILN_OK);
  kiln_stats s0, s1, s2;
  kiln_context_stats(ctx, &s0);
  api_case(k, &d, 2, 8, 2, 1, 1000, false, NULL);
  kiln_context_stats(ctx, &s1);
  assert_int_equal(s1.compiles, s0.compiles + 2);  /* the split and combine kernels */
  api_case(k, &d, 1, 8, 2, 4, 65, true, NULL);
  api_case(k, &d, 3, 4, 1, 16, 7, false, NULL);
  api_case(k, &d, 1, 32, 8, 1, 129, false, NULL);
  setenv("KILN_DECODE_SPLITS", "5", 1);
  api_case(k, &d, 2, 4, 4, 2, 333, true, NULL);
  unsetenv("KILN_DECODE_SPLITS");
  kiln_context_stats(ctx, &s2);
  assert_int_equal(s2.compiles, s1.compiles);  /* built once */
  /* the prefill kernel: KILN_DECODE=0, and above 16 query rows */
  setenv("KILN_DECODE", "0", 1);
  api_case(k, &d, 1, 8, 2, 3, 100, false, NULL);
  unsetenv("KILN_DECODE");
  api_case(k, &d, 1, 4, 2, 17, 40, false, NULL);
  /* a window and a softcap: the variant's arguments reach the split kernel */
  kiln_attn_desc pw = {.dtype = KILN_F16, .head_dim = 64, .window = 1, .softcap = 1,
                       .has_lse = 1};
  kn_attn_desc dw = {.dtype = KN_F16, .head_dim = 64, .window = true, .softcap = true,
                     .has_lse = true};
  assert_int_equal(kiln_prepare(ctx, &pw, NULL, &k), KILN_OK);
  kiln_attn_args ex = {.window_left = 50, .window_right = -1, .softcap = 2.5f};
  api_case(k, &dw, 2, 8, 2, 4, 500, false, &ex);
  kiln_context_destroy(ctx);
}

/* four threads decoding through one kernel on the host (one workspace: their split and combine
 * launches must not interleave), each checked against its own float64 reference.  (Without
 * decode_launch_mu this still passed here: the host runs its launches in the order they come,
 * and a thread's combine came right after its split; the lock is for the orders that do not.) */
typedef struct th_job {
  kiln_kernel *k;
  int id, bad;
} th_job;

static void *th_main(void *arg) {
  th_job *j = arg;
  enum { B = 2, HH = 8, HKK = 2, DD = 32 };
  int nk = 300 + 50 * j->id;
  size_t nq = (size_t)B * HH * DD, nkk = (size_t)B * HKK * nk * DD;
  uint16_t *q = malloc(nq * 2), *k = malloc(nkk * 2), *v = malloc(nkk * 2), *o = malloc(nq * 2);
  double *qd = malloc(nq * 8), *kd = malloc(nkk * 8), *vd = malloc(nkk * 8), *od = malloc(nq * 8);
  uint64_t s = 0x51ed + (uint64_t)j->id;
  for (size_t i = 0; i < nq; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    kn_store_elem(KN_F16, q + i, (double)(s >> 40) / (1 << 23) - 1);
    qd[i] = kn_load_elem(KN_F16, q + i);
  }
  for (size_t i = 0; i < nkk; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    kn_store_elem(KN_F16, k + i, (double)(s >> 40) / (1 << 23) - 1);
    kd[i] = kn_load_elem(KN_F16, k + i);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    kn_store_elem(KN_F16, v + i, (double)(s >> 40) / (1 << 23) - 1);
    vd[i] = kn_load_elem(KN_F16, v + i);
  }
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = DD};
  kn_attn_problem p = {.batch = B, .heads = HH, .kv_heads = HKK, .seqlen_q = 1, .seqlen_k = nk};
  kn_attn_reference(&d, &p, qd, kd, vd, od, NULL);
  for (int r = 0; r < 6; r++) {
    kiln_attn_args a = {.q = q, .k = k, .v = v, .o = o, .batch = B, .heads = HH,
                        .kv_heads = HKK, .seqlen_q = 1, .seqlen_k = nk};
    if (kiln_forward(j->k, &a, NULL)) {
      j->bad++;
      continue;
    }
    for (size_t i = 0; i < nq; i++)
      if (!(fabs(kn_load_elem(KN_F16, o + i) - od[i]) <= kn_attn_tolerance(KN_F16))) {
        j->bad++;
        break;
      }
  }
  free(q), free(k), free(v), free(o), free(qd), free(kd), free(vd), free(od);
  return NULL;
}

static void test_api_threads(void **state) {
  (void)state;
  kiln_context_options co = {.no_cache = 1, .device = "host"};
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&co, &ctx), KILN_OK);
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = 32};
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx, &pd, NULL, &k), KILN_OK);
  pthread_t t[4];
  th_job j[4];
  for (int i = 0; i < 4; i++) {
    j[i] = (th_job){.k = k, .id = i};
    assert_int_equal(pthread_create(&t[i], NULL, th_main, &j[i]), 0);
  }
  int bad = 0;
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL), bad += j[i].bad;
  assert_int_equal(bad, 0);
  kiln_stats st;
  kiln_context_stats(ctx, &st);
  assert_int_equal(st.launches, 24);
  kiln_context_destroy(ctx);
}

/* kiln_tune_decode on the host: candidates over block_n and pieces, the winner kept for the
 * problem (the forward after it is right), bad calls refused */
static void test_api_tune(void **state) {
  (void)state;
  kiln_context_options co = {.no_cache = 1, .device = "host"};
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&co, &ctx), KILN_OK);
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = 64, .has_lse = 1};
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 64, .has_lse = true};
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx, &pd, NULL, &k), KILN_OK);
  enum { B = 2, HH = 8, HKK = 2, NK = 700, DD = 64 };
  size_t nq = (size_t)B * HH * DD, nk = (size_t)B * HKK * NK * DD;
  uint16_t *q = calloc(nq, 2), *kk = calloc(nk, 2), *v = calloc(nk, 2), *o = calloc(nq, 2);
  float *lse = calloc((size_t)B * HH, 4);
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8);
  fill_rand(KN_F16, q, qd, nq), fill_rand(KN_F16, kk, kd, nk), fill_rand(KN_F16, v, vd, nk);
  kiln_attn_args a = {.q = q, .k = kk, .v = v, .o = o, .lse = lse, .batch = B, .heads = HH,
                      .kv_heads = HKK, .seqlen_q = 1, .seqlen_k = NK};
  kiln_prepare_options po = {.tune_warmup = 1, .tune_repeats = 3};
  kiln_tune_result r;
  if (kiln_tune_decode(k, &a, NULL, &po, &r)) fail_msg("tune: %s", kiln_last_error());
  assert_true(r.ncandidates >= 8);
  assert_true(r.best >= 0 && r.candidates[r.best].state == KILN_CANDIDATE_TIMED);
  int timed = 0;
  for (int i = 0; i < r.ncandidates; i++) {
    timed += r.candidates[i].state == KILN_CANDIDATE_TIMED;
    assert_true(r.candidates[i].decode_splits >= 1);
  }
  assert_int_equal(timed, r.ncandidates);  /* every one agreed with the default */
  printf("[ decode ] tune: %d candidates, best block_n %d, %d pieces, %.0f us\n", r.ncandidates,
         r.candidates[r.best].block_n, r.candidates[r.best].decode_splits,
         r.candidates[r.best].median_us);
  kiln_tune_result_free(&r);
  /* the winner serves the same problem: against float64 */
  api_case(k, &d, B, HH, HKK, 1, NK, false, NULL);
  /* refused: a prefill call, forced pieces */
  a.seqlen_q = 40;
  assert_int_equal(kiln_tune_decode(k, &a, NULL, NULL, NULL), KILN_ERR_INVALID);
  assert_non_null(strstr(kiln_last_error(), "not one the decode kernels serve"));
  a.seqlen_q = 1;
  setenv("KILN_DECODE_SPLITS", "2", 1);
  assert_int_equal(kiln_tune_decode(k, &a, NULL, NULL, NULL), KILN_ERR_INVALID);
  unsetenv("KILN_DECODE_SPLITS");
  free(q), free(kk), free(v), free(o), free(lse), free(qd), free(kd), free(vd);
  kiln_context_destroy(ctx);
}

/* kiln_tune_decode on a paged call (pages of 16 in shuffled order, ragged lengths, a k_new row
 * appended at every run): candidates timed, the winner's output against float64 */
static void test_api_tune_paged(void **state) {
  (void)state;
  kiln_context_options co = {.no_cache = 1, .device = "host"};
  kiln_context *ctx;
  assert_int_equal(kiln_context_create(&co, &ctx), KILN_OK);
  kiln_attn_desc pd = {.dtype = KILN_F16, .head_dim = 32, .has_lse = 1, .causal = 1,
                       .layout = KILN_LAYOUT_PAGED};
  kn_attn_desc d = {.dtype = KN_F16, .head_dim = 32, .has_lse = true, .causal = 1,
                    .layout = KN_ATTN_PAGED};
  kiln_kernel *k;
  assert_int_equal(kiln_prepare(ctx, &pd, NULL, &k), KILN_OK);
  enum { B = 2, HH = 8, HKK = 2, DD = 32, PS = 16, NQ = 2 };
  int len[B] = {600, 129}, mp, np;  /* the lengths after the append */
  int32_t *table = test_page_table(B, len, PS, 1, 1, &mp, &np);
  int32_t cs[B] = {len[0] - 1, len[1] - 1};
  size_t nq = (size_t)B * HH * NQ * DD, nk = (size_t)np * PS * HKK * DD, nn = (size_t)B * HKK * DD;
  uint16_t *q = calloc(nq, 2), *kk = calloc(nk, 2), *v = calloc(nk, 2), *o = calloc(nq, 2);
  uint16_t *kn = calloc(nn, 2), *vn = calloc(nn, 2);
  float *lse = calloc((size_t)B * HH * NQ, 4);
  double *qd = malloc(nq * 8), *kd = malloc(nk * 8), *vd = malloc(nk * 8), *od = malloc(nq * 8);
  double *knd = malloc(nn * 8), *vnd = malloc(nn * 8), *ld = malloc((size_t)B * HH * NQ * 8);
  fill_rand(KN_F16, q, qd, nq), fill_rand(KN_F16, kk, kd, nk), fill_rand(KN_F16, v, vd, nk);
  fill_rand(KN_F16, kn, knd, nn), fill_rand(KN_F16, vn, vnd, nn);
  kiln_attn_args a = {.q = q, .k = kk, .v = v, .o = o, .lse = lse, .batch = B, .heads = HH,
                      .kv_heads = HKK, .seqlen_q = NQ, .block_table = table,
                      .cache_seqlens = cs, .page_size = PS, .num_pages = np, .max_pages = mp,
                      .k_new = kn, .v_new = vn, .seqlen_new = 1};
  kiln_prepare_options po = {.tune_warmup = 1, .tune_repeats = 3};
  kiln_tune_result r;
  if (kiln_tune_decode(k, &a, NULL, &po, &r)) fail_msg("tune: %s", kiln_last_error());
  assert_true(r.ncandidates >= 8 && r.best >= 0);
  for (int i = 0; i < r.ncandidates; i++)
    assert_int_equal(r.candidates[i].state, KILN_CANDIDATE_TIMED);
  printf("[ decode ] tune paged: %d candidates, best block_n %d, %d pieces\n", r.ncandidates,
         r.candidates[r.best].block_n, r.candidates[r.best].decode_splits);
  kiln_tune_result_free(&r);
  /* the reference: the appended row is each sequence's last key (row (b, hk) of k_new) */
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HKK; h++) {
      int j = cs[b];
      size_t row = ((size_t)table[b * mp + j / PS] * PS + (size_t)(j % PS)) * HKK + h;
      memcpy(kd + row * DD, knd + ((size_t)b * HKK + h) * DD, sizeof(double) * DD);
      memcpy(vd + row * DD, vnd + ((size_t)b * HKK + h) * DD, sizeof(double) * DD);
    }
  kn_attn_problem p = {.batch = B, .heads = HH, .kv_heads = HKK, .seqlen_q = NQ,
                       .seqlen_k = mp * PS, .block_table = table, .cache_seqlens = cs,
                       .page_size = PS, .num_pages = np, .max_pages = mp, .seqlen_new = 1};
  kn_attn_reference(&d, &p, qd, kd, vd, od, ld);
  double err = 0;
  for (size_t i = 0; i < nq; i++) err = fmax(err, abs_err(kn_load_elem(KN_F16, o + i), od[i]));
  if (!(err <= kn_attn_tolerance(KN_F16)))
    fail_msg("tuned paged decode (seed %llu): err %.3g", (unsigned long long)seed0, err);
  free(q), free(kk), free(v), free(o), free(kn), free(vn), free(lse), free(qd), free(kd);
  free(vd), free(od), free(knd), free(vnd), free(ld), free(table);
  kiln_context_destroy(ctx);
}

/* the default decode kernels' code: no spills on the AMD chips and (ptxas) on NVIDIA */
static void test_code(void **state) {
  (void)state;
  static const char *const targets[] = {"gfx90a", "gfx942", "sm_80", "sm_90a"};
  static const int dims[] = {64, 128};
  char ptxas[512];
  kn_diag pd;
  bool have_ptxas = kn_ptxas_find(ptxas, sizeof ptxas, &pd) == KN_OK;
  for (size_t t = 0; t < 4; t++) {
    const kn_target *tg = kn_target_get(targets[t]);
    assert_non_null(tg);
    bool nv = tg->arch->isa == KN_ISA_NVPTX;
    if (nv && !have_ptxas) {
      printf("[ decode ] %s: ptxas not installed, spills not checked\n", targets[t]);
      continue;
    }
    for (size_t i = 0; i < 2; i++)
      for (int causal = 0; causal < 3; causal++) {
        /* causal 2: the paged split kernels the runtime launches, in-page, gather and pages,
         * each at its own tiling (not causal; their combine kernel is dense's) */
        const bool paged = causal == 2;
        kn_attn_desc d = {.dtype = KN_F16, .head_dim = dims[i], .has_lse = true,
                          .causal = causal == 1, .layout = paged ? KN_ATTN_PAGED : 0};
        kn_diag diag;
        /* reduced (KILN_TEST_REDUCED): 2 of the 6 (dim, layout) pairs of each target */
        if (!test_keep((int)(i * 3 + (size_t)causal + t), 3)) continue;
        for (int which = 0; which < (paged ? 3 : 2); which++) {
          const bool comb = which && !paged;
          const kn_decode_read read = !paged       ? KN_DECODE_READ_ANY
                                      : which == 2 ? KN_DECODE_READ_PAGES
                                      : which      ? KN_DECODE_READ_GATHER
                                                   : KN_DECODE_READ_IN_PAGE;
          kn_attn_config c = comb ? (kn_attn_config){.block_m = 16, .block_n = 16, .warps = 1}
                                  : kn_attn_decode_read_config(tg->arch, &d, read);
          kn_module *m = kn_module_new("<code>");
          kn_func *f = comb ? kn_attn_decode_combine_build(m, &d, &diag)
                            : kn_attn_decode_build(m, &d, &c, read, &diag);
          if (!f) fail_msg("%s D%d: %s", targets[t], dims[i], diag.message);
          const char *name = comb ? "attn_decode_combine" : kn_attn_decode_symbol(read);
          kn_artifact a;
          if (kn_compile_artifact(m, name, tg, NULL, &a, &diag))
            fail_msg("%s on %s D%d: %s", name, targets[t], dims[i], diag.rendered);
          int sp = artifact_spills(&a, tg->arch, name);  /* (verbose: the static report) */
          printf("[ decode ] %-6s D%-3d %-8s %-20s %dx%d w%d: %d spills\n", targets[t],
                 dims[i], causal == 2 ? "paged" : causal ? "causal" : "plain", name, c.block_m,
                 c.block_n, c.warps, sp);
          if (sp) fail_msg("%s on %s D%d spills %d", name, targets[t], dims[i], sp);
          kn_artifact_free(&a);
          kn_module_free(m);
        }
      }
  }
}

int main(void) {
  const char *s = getenv("KILN_TEST_SEED");
  seed0 = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
  rng = seed0;
  printf("[ decode ] seed %llu (KILN_TEST_SEED replays it)\n", (unsigned long long)seed0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan),   cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_interp), cmocka_unit_test(test_host),
      cmocka_unit_test(test_host_gqa_32_8), cmocka_unit_test(test_emu),
      cmocka_unit_test(test_paged_interp), cmocka_unit_test(test_paged_host),
      cmocka_unit_test(test_paged_gqa_32_8), cmocka_unit_test(test_paged_emu),
      cmocka_unit_test(test_paged_page_sizes), cmocka_unit_test(test_paged_chunks),
      cmocka_unit_test(test_api_host), cmocka_unit_test(test_api_threads),
      cmocka_unit_test(test_api_tune), cmocka_unit_test(test_api_tune_paged),
      cmocka_unit_test(test_code),
  };
  if (getenv("KILN_TEST_FILTER")) cmocka_set_test_filter(getenv("KILN_TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
