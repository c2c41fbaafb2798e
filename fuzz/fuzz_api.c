/* fuzz_api.c — libFuzzer target: the public API's argument checks (api/args.c) on descriptors
 * and launch arguments decoded from bytes, with the reference interpreter as the launch: the
 * forward's (dense, varlen, paged), decode's split and combine kernels (a dense forward of
 * 1..KN_DECODE_MAX_Q query rows, as kiln_forward serves it), and the backward's three kernels.
 *
 * The input is read field by field (a short input reads zeros after its end): a kiln_attn_desc
 * (dtype, head dim, causal, lse, the six built-in variants, the layout, one of a few
 * modifier texts: none, a mask with an i32 parameter, a score with a tensor parameter, a
 * malformed one, and dropout: none, 0.17 or any float's bits), then a kiln_attn_args for it: small sizes or raw 32-bit ones, strides zero
 * (contiguous) or small or raw 64-bit, variant values, dropout's seed and offset, modifier values by name and kind, varlen
 * prefix sums, a paged call's pool, block table (mostly pages of the pool), cache lengths and
 * new rows, and a described capacity (q_numel ...) for every buffer (among the small sizes,
 * batch x heads at most MAX_ROWS: the interpreter's work, below).  Each buffer is
 * allocated with exactly its described capacity (at most 2^16 elements), so ASan sees any read
 * of kiln's C code past it.
 *
 * One bit of the input makes a dense or varlen call a backward (kiln_backward): then dO, dQ,
 * dK, dV and the delta workspace are decoded too (strides, capacities) and api_backward_args
 * checks them with the forward's arguments, against the backward's tiling and signature.
 *
 * What must hold: api_desc_from_public and api_signature accept or refuse with a message; for an
 * accepted descriptor api_forward_args (everything kiln_forward checks, on the host, CUDA or HIP
 * device kind; api_backward_args for a backward) accepts or refuses with a message; and an
 * accepted launch, run on the reference
 * interpreter over the template kernel with each buffer as its only memory, never reads or
 * writes outside a buffer (an "out of bounds" error is a crash: the checks let through a launch
 * that does not fit what the caller described); a paged call's append, on the host kind, runs
 * too (api_paged_append_host, before the launch as kiln_forward does it), within the buffers.  The template is kiln's IR for the kernel
 * every device runs, so this also holds the GPU kinds to kiln.h's promise that bad varlen
 * prefix sums give wrong rows, never accesses outside the buffers.  A step budget bounds each
 * run.  No context, no compile, no LLVM: the host's compiled code is the interpreter's twin
 * (test_host holds it so, bit for bit).  A descriptor's signature and template modules are
 * computed once per process ("once per process", below).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "interp.h"

static void check(int ok, const char *what, const char *detail) {
  if (ok) return;
  fprintf(stderr, "fuzz_api: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* ---- reading the input ---- */

typedef struct reader {
  const uint8_t *p;
  size_t n;
} reader;

static uint32_t u8(reader *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}
static uint32_t u32(reader *r) { return u8(r) | u8(r) << 8 | u8(r) << 16 | (uint32_t)u8(r) << 24; }
static uint64_t u64(reader *r) { return u32(r) | (uint64_t)u32(r) << 32; }

/* a size: mostly small (lo..lo+span-1), one in 16 a raw 32-bit value */
static int size_of(reader *r, int lo, int span) {
  uint32_t b = u8(r);
  return (b & 15) == 15 ? (int)u32(r) : lo + (int)((b >> 4) % (uint32_t)span);
}

/* a stride: mostly small (0..63, or -1), one in 16 a raw 64-bit value */
static int64_t stride_of(reader *r) {
  uint32_t b = u8(r);
  if ((b & 15) == 15) return (int64_t)u64(r);
  return (b & 15) == 14 ? -1 : (int64_t)(b >> 2);
}

/* ---- buffers: exactly the described capacity ---- */

enum { MAX_ELEMS = 1 << 16, MAX_BUFS = 32, MAX_ROWS = 6 };

typedef struct buffers {
  void *p[MAX_BUFS];
  size_t bytes[MAX_BUFS];
  int n;
} buffers;

/* a buffer of numel elements of es bytes (at least one element), zeroed */
static void *buffer(buffers *b, int64_t numel, size_t es) {
  size_t bytes = (size_t)(numel > 0 ? numel : 1) * es;
  void *p = calloc(1, bytes);
  check(p != NULL && b->n < MAX_BUFS, "out of memory", NULL);
  b->p[b->n] = p, b->bytes[b->n++] = bytes;
  return p;
}

/* the elements of a contiguous a x b x c x e shape; MAX_ELEMS + 1 for any more (or negative) */
static int64_t dense(int64_t a, int64_t b, int64_t c, int64_t e) {
  int64_t n;
  if (a < 0 || b < 0 || c < 0 || e < 0 || __builtin_mul_overflow(a, b, &n) ||
      __builtin_mul_overflow(n, c, &n) || __builtin_mul_overflow(n, e, &n) || n > MAX_ELEMS)
    return MAX_ELEMS + 1;
  return n;
}

/* a capacity for a buffer whose contiguous shape holds `dense` elements: mostly exactly that,
 * sometimes a little less or more, sometimes anything up to MAX_ELEMS */
static int64_t capacity(reader *r, int64_t dense) {
  uint32_t b = u8(r);
  int64_t n = dense;
  switch (b & 7) {
  case 5: n = dense - 1 - (b >> 3); break;
  case 6: n = dense + 1 + (b >> 3); break;
  case 7: n = 1 + (int64_t)(u32(r) % MAX_ELEMS); break;
  default: break;
  }
  if (n < 1 || dense < 0 || dense > MAX_ELEMS) n = n < 1 ? 1 : n;
  return n > MAX_ELEMS ? MAX_ELEMS : n;
}

/* ---- the modifier texts and the template kernels ---- */

static const char *const mods[] = {
    NULL,
    "func @mask_mod(%b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, %chunk: i32) -> (i1) {\n"
    "  %qc = div %q_idx, %chunk : i32\n"
    "  %kc = div %kv_idx, %chunk : i32\n"
    "  %live = cmp le %kc, %qc : i1\n"
    "  return %live\n"
    "}\n",
    "func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, "
    "%temp: ptr<f32>) -> (f32) {\n"
    "  %c1 = const 1 : i64\n"
    "  %h64 = cast %h : i64\n"
    "  %t = load %temp[%h64] strides [%c1] : f32\n"
    "  %out = mul %score, %t : f32\n"
    "  return %out\n"
    "}\n",
    "func @score_mod(%score: f32) -> (f32) {\n  return %nothing\n}\n",
};
static const char *const mod_names[] = {"chunk", "temp", "bogus", NULL};

/* ---- what depends on the descriptor alone: once per process ----
 *
 * A descriptor's signature (api_signature; kn_attn_bwd_signature for a backward) parses and
 * verifies the modifier library's texts and the user's: a fifth of the target's time when each
 * execution did it (perf, bench/RESULTS.md 2026-12-02), yet its answer is a function of the
 * descriptor's key (kn_attn_desc_key names every field it reads; the texts by their hash).  So
 * each key's answer is computed, and checked, the first time it comes and kept, as the
 * template modules built for the launches are (by descriptor and tiling).  Both are
 * open-addressed tables of KEYS slots, so that a module is built once per process, not again
 * each time it has left a table of 64 (a module built during an execution leaves it with more
 * mallocs than frees, which makes libFuzzer run the input again to look for a leak: a fifth of
 * the time with the 64 of before, a tenth still from the keys that keep coming: raw head dims
 * and dropout probabilities).  The signatures live in static storage (no malloc); a full table
 * is emptied and refilled. */
enum { KEYS = 2048, KEY_TEXT = 2 * KN_ATTN_KEY_MAX + 8 };
static long nsigned, nbuilds; /* signatures computed, modules built (KILN_FUZZ_API_STATS) */

static uint64_t key_hash(const char *k) { /* FNV-1a */
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *k; k++) h = (h ^ (uint8_t)*k) * 0x100000001b3ull;
  return h;
}

/* the slot of key k in a table of KEYS keys (each KEY_TEXT bytes, "" when empty, `used` of them
 * taken): its own, or the empty one where it goes; -1 when k is not there and the table is full
 * (three quarters taken) */
static int key_slot(char (*keys)[KEY_TEXT], int used, const char *k) {
  unsigned i = (unsigned)key_hash(k) % KEYS;
  while (keys[i][0] && strcmp(keys[i], k)) i = (i + 1) % KEYS;
  return !keys[i][0] && used >= KEYS * 3 / 4 ? -1 : (int)i;
}

static void refused(kiln_status s) {
  check(s != KILN_OK, "refused with KILN_OK", NULL);
  check(kiln_last_error()[0] != 0, "refused without a message", NULL);
}

/* api_signature's answer for d (status, signature), computed and checked once per key; its
 * kn_attn_bwd_signature too, when a backward first asks */
static char sig_keys[KEYS][KEY_TEXT];
static struct sig_memo {
  kiln_status s;
  int bwd;  /* kn_attn_bwd_signature: 0 not yet asked, 1 accepted, -1 refused */
  kn_attn_sig sig, bsig;
} sig_memo[KEYS];
static int nsigs;

static struct sig_memo *signature(const kn_attn_desc *d) {
  char k[KEY_TEXT];
  kn_attn_desc_key(d, k, sizeof k);
  int i = key_slot(sig_keys, nsigs, k);
  if (i < 0) { /* full: start again */
    memset(sig_keys, 0, sizeof sig_keys);
    nsigs = 0;
    i = key_slot(sig_keys, nsigs, k);
  }
  struct sig_memo *e = &sig_memo[i];
  if (!sig_keys[i][0]) {
    snprintf(sig_keys[i], KEY_TEXT, "%s", k);
    nsigs++;
    e->bwd = 0, nsigned++;
    if ((e->s = api_signature(d, &e->sig))) refused(e->s);
  }
  return e;
}

/* the template modules built so far, by kind (0 the forward, 1 decode's split kernel, 2 its
 * combine kernel, 3 the backward's three kernels) and their descriptor's and tiling's keys */
static char built_keys[KEYS][KEY_TEXT];
static kn_module *built[KEYS];
static int nbuilt;

static kn_func *kernel_for(int kind, const char *name, const kn_attn_desc *d,
                           const kn_attn_config *c) {
  char key[KEY_TEXT], dk[KN_ATTN_KEY_MAX], ck[KN_ATTN_KEY_MAX];
  kn_attn_desc_key(d, dk, sizeof dk);
  kn_attn_config_key(c, ck, sizeof ck);
  snprintf(key, sizeof key, "%d|%s|%s", kind, dk, ck);
  int i = key_slot(built_keys, nbuilt, key);
  if (i < 0) { /* full: forget them all */
    for (int j = 0; j < KEYS; j++) kn_module_free(built[j]), built[j] = NULL;
    memset(built_keys, 0, sizeof built_keys);
    nbuilt = 0;
    i = key_slot(built_keys, nbuilt, key);
  }
  if (!built[i]) {
    kn_diag diag;
    kn_module *m = kn_module_new("<fuzz_api>");
    check(m != NULL, "out of memory", NULL);
    bool ok = kind == 0   ? kn_attn_fwd_build(m, d, c, &diag) != NULL
              : kind == 1 ? kn_attn_decode_build(m, d, c, KN_DECODE_READ_ANY, &diag) != NULL
              : kind == 2 ? kn_attn_decode_combine_build(m, d, &diag) != NULL
                          : kn_attn_bwd_build(m, d, c, &diag) == 0;
    check(ok, "the template refused an accepted descriptor", diag.message);
    check(kn_verify(m, &diag) == 0, "the template kernel does not verify", diag.message);
    snprintf(built_keys[i], KEY_TEXT, "%s", key);
    built[i] = m;
    nbuilt++, nbuilds++;
  }
  kn_func *f = kn_module_find(built[i], name);
  check(f != NULL, "the template module lacks its kernel", name);
  return f;
}

/* launches run so far per kind (forward, decode split, decode combine, backward): with
 * KILN_FUZZ_API_STATS set, printed at exit (how often an input reaches each path) */
static long launches[4];

static void print_stats(void) {
  fprintf(stderr, "fuzz_api: launches: forward %ld, decode %ld + combine %ld, backward %ld; "
          "%ld signatures, %ld modules built\n", launches[0], launches[1], launches[2],
          launches[3], nsigned, nbuilds);
}

/* one launch on the interpreter: every buffer is a region, nothing else is memory; an access
 * outside them is a crash (the checks let through a launch that does not fit what the caller
 * described) */
static void launch(int kind, kn_func *k, const kn_argval *args, const int grid[3],
                   const buffers *bufs) {
  static bool registered;
  if (!registered && getenv("KILN_FUZZ_API_STATS")) atexit(print_stats);
  registered = true;
  launches[kind]++;
  kn_region regions[MAX_BUFS];
  for (int i = 0; i < bufs->n; i++) regions[i] = (kn_region){bufs->p[i], bufs->bytes[i]};
  kn_diag diag;
  if (kn_interp_run_budget(k, 0, 2000000, args, grid, regions, bufs->n, NULL, &diag))
    check(!strstr(diag.message, "out of bounds"), "an accepted launch reads or writes outside "
          "the buffers it described", diag.rendered);
}

/* ---- one input ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size};
  /* the descriptor */
  static const kiln_dtype dtypes[] = {KILN_F16, KILN_BF16, KILN_F32, (kiln_dtype)7};
  uint32_t flags = u32(&r);
  /* dropout (bits 26-27): none, 0.17, or the raw bits of a float (NaN, negative, >= 1 ...) */
  float drop = 0;
  if ((flags >> 26) & 1) {
    uint32_t w = (flags >> 27) & 1 ? u32(&r) : 0;
    if (w) memcpy(&drop, &w, sizeof drop);
    else drop = 0.17f;
  }
  kiln_attn_desc pub = {
      .dtype = dtypes[flags & 3],
      .head_dim = size_of(&r, 1, 48),
      .causal = (int)((flags >> 2) & 3) - ((flags >> 4) & 1 ? 1 : 0),
      .has_lse = (flags >> 5) & 1,
      .window = (flags >> 6) & 1, .softcap = (flags >> 7) & 1, .alibi = (flags >> 8) & 1,
      .bias = (flags >> 9) & 1, .document = (flags >> 10) & 1, .prefix = (flags >> 11) & 1,
      .layout = (int)((flags >> 12) & 3) % 3,
      .mods = mods[(flags >> 14) & 3],
      .mods_name = "<fuzz mods>",
      .dropout_p = drop,
  };
  kn_attn_desc d;
  kiln_status s = api_desc_from_public(&pub, &d);
  if (s) return refused(s), 0;
  struct sig_memo *memo = signature(&d);
  if (memo->s) return 0;
  const kn_attn_sig *sig = &memo->sig;
  bool user[KN_ATTN_MAX_PARAMS];
  api_user_params(&d, sig, user);
  /* the tiling: small blocks keep the interpreter fast */
  kn_attn_config c = kn_attn_default_config(NULL, &d);
  c.block_m = c.block_n = 16;
  kn_diag diag;
  if (kn_attn_check_on(NULL, &d, &c, &diag)) c = kn_attn_default_config(NULL, &d);
  /* a backward (kiln_prepare_backward: its own tiling, dense or varlen) */
  const bool bwd = (flags >> 24) & 1;
  if (bwd) {
    if (d.layout == KN_ATTN_PAGED) return 0;  /* (prepare refuses it) */
    c = kn_attn_bwd_default_config(NULL, &d);
    c.block_m = c.block_n = 16;
    if (kn_attn_bwd_check_on(NULL, &d, &c, &diag)) c = kn_attn_bwd_default_config(NULL, &d);
    if (kn_attn_bwd_check_on(NULL, &d, &c, &diag)) return 0;
    if (!memo->bwd) memo->bwd = kn_attn_bwd_signature(&d, &memo->bsig, &diag) ? -1 : 1;
    if (memo->bwd < 0) return 0;
  }
  static const kn_device_kind kinds[] = {KN_DEVICE_HOST, KN_DEVICE_CUDA, KN_DEVICE_HIP};
  api_launch_view view = {&d, sig, &c, user, kinds[((flags >> 16) & 3) % 3], NULL, bwd};

  /* the arguments */
  kiln_attn_args a = {0};
  a.batch = size_of(&r, 0, 4);
  a.kv_heads = size_of(&r, 1, 3);
  int64_t group = (int64_t)a.kv_heads * size_of(&r, 1, 3);
  a.heads = group > INT32_MAX || group < INT32_MIN ? a.kv_heads : (int)group;
  if ((flags >> 18) & 1) a.heads = size_of(&r, 0, 8);  /* not a multiple, 0, ... */
  /* the interpreter's work grows with batch x heads (each (batch, head) is programs of its
   * own) and no check needs both large: among the small values, batch is cut to keep the
   * product at most MAX_ROWS (every batch and every head count stays reachable, a batch of 2
   * or more with up to 3 heads); raw values are left alone */
  if (a.batch > 1 && a.heads > 0 && a.batch < 4 && a.heads <= 9 && a.batch * a.heads > MAX_ROWS)
    a.batch = MAX_ROWS / a.heads > 1 ? MAX_ROWS / a.heads : 1;
  a.seqlen_q = size_of(&r, 0, 24);
  a.seqlen_k = size_of(&r, 0, 24);
  a.sm_scale = (flags >> 19) & 1 ? (float)(int32_t)u32(&r) / 1024.0f : 0.0f;
  if ((flags >> 20) & 1) a.sm_scale = (flags >> 21) & 1 ? NAN : -INFINITY;
  const bool varlen = d.layout == KN_ATTN_VARLEN;
  int64_t *strides[] = {a.q_stride, a.k_stride, a.v_stride, a.o_stride};
  for (int i = 0; i < 4; i++)
    if (u8(&r) & 1)
      for (int j = 0; j < 3; j++) strides[i][j] = stride_of(&r);
  if (u8(&r) & 1) a.lse_stride[0] = stride_of(&r), a.lse_stride[1] = stride_of(&r);
  buffers bufs = {.n = 0};
  int32_t *cu[2] = {NULL, NULL};
  if (varlen) { /* batch + 1 prefix sums each (the caller's promise: at most 64 here), mostly
                 * non-decreasing */
    if (a.batch > 63) a.batch = 63;
    int nb = a.batch >= 0 ? a.batch : 0;
    for (int w = 0; w < 2; w++) {
      cu[w] = buffer(&bufs, nb + 1, sizeof(int32_t));
      for (int b = 0; b < nb; b++) {
        uint32_t x = u8(&r);
        cu[w][b + 1] = (x & 7) == 7 ? (int32_t)u32(&r)
                                     : (int32_t)((int64_t)cu[w][b] + (x >> 3) % 25 > INT32_MAX
                                                     ? INT32_MAX : cu[w][b] + (x >> 3) % 25);
      }
    }
    a.cu_seqlens_q = cu[0], a.cu_seqlens_k = cu[1];
    a.total_q = (u8(&r) & 3) == 3 ? size_of(&r, 0, 64) : cu[0][nb];
    a.total_k = (u8(&r) & 3) == 3 ? size_of(&r, 0, 64) : cu[1][nb];
  }
  const bool paged = d.layout == KN_ATTN_PAGED;
  if (paged) { /* the caller's promise: a table of batch rows of block_table_stride (or
                * max_pages) entries, batch cache lengths; their values anything */
    if (a.batch > 16) a.batch = 16;
    int nb = a.batch >= 0 ? a.batch : 0;
    a.page_size = size_of(&r, 1, 20);
    a.num_pages = size_of(&r, 0, 16);
    a.max_pages = size_of(&r, 0, 6);
    if (a.max_pages > 64) a.max_pages = 64;  /* (raw ones: the table is allocated) */
    uint32_t pf = u8(&r);
    a.block_table_stride = (pf & 3) == 3 ? a.max_pages + (int64_t)(pf >> 2) % 4 - 1 : 0;
    int64_t ts = a.block_table_stride > 0 ? a.block_table_stride : a.max_pages;
    int32_t *table = buffer(&bufs, nb * ts, sizeof(int32_t));
    int np = a.num_pages > 0 && a.num_pages < 64 ? a.num_pages : 1;
    for (int64_t i = 0; i < nb * ts; i++) { /* mostly pages of the pool, some -1 or num_pages */
      uint32_t x = u8(&r);
      table[i] = (x & 15) == 15 ? (int32_t)u32(&r) : (int32_t)((x >> 4) % (uint32_t)(np + 2)) - 1;
    }
    int32_t *lens = buffer(&bufs, nb, sizeof(int32_t));
    int64_t cap = (int64_t)a.max_pages * a.page_size;
    for (int b = 0; b < nb; b++) {
      uint32_t x = u8(&r);
      lens[b] = (x & 7) == 7 ? (int32_t)u32(&r) : cap > 0 ? (int32_t)((x >> 3) % (cap + 1)) : 0;
    }
    a.block_table = table, a.cache_seqlens = lens;
    a.block_table_numel = (pf >> 4) & 1 ? capacity(&r, nb * ts) : 0;
    if ((pf >> 5) & 1) a.seqlen_k = cap > INT32_MAX ? 0 : (int)cap;
    a.seqlen_new = (pf >> 6) & 1 ? size_of(&r, 0, 4) : 0;
  }
  /* the capacities, against the contiguous shapes (sizes clamped: big ones get a capacity
   * of their own choosing, the checks must refuse them) */
  const int64_t B = a.batch, H = a.heads, HK = a.kv_heads, Nq = a.seqlen_q, Nk = a.seqlen_k,
                D = d.head_dim, es = (int64_t)kn_scalar_size(d.dtype);
  int64_t rows_q = varlen ? a.total_q : dense(B, Nq, 1, 1),
          rows_k = varlen ? a.total_k
                   : paged ? dense(a.num_pages, a.page_size, 1, 1) : dense(B, Nk, 1, 1);
  int64_t dq = dense(rows_q, H, D, 1), dk = dense(rows_k, HK, D, 1);
  a.q_numel = capacity(&r, dq), a.k_numel = capacity(&r, dk), a.v_numel = capacity(&r, dk);
  a.o_numel = capacity(&r, dq);
  a.q = buffer(&bufs, a.q_numel, es), a.k = buffer(&bufs, a.k_numel, es);
  a.v = buffer(&bufs, a.v_numel, es), a.o = buffer(&bufs, a.o_numel, es);
  if (d.has_lse || (flags >> 22) & 1) {
    a.lse_numel = capacity(&r, varlen ? dense(H, a.total_q, 1, 1) : dense(B, H, Nq, 1));
    a.lse = buffer(&bufs, a.lse_numel, sizeof(float));
  }
  /* the variant's values: given for the variants prepared and, one in 8, for others too */
  uint32_t vflags = u8(&r);
  bool stray = (vflags & 7) == 7;
  if (d.window || stray) a.window_left = size_of(&r, -1, 20), a.window_right = size_of(&r, -1, 20);
  if (d.softcap || stray) a.softcap = (flags >> 23) & 1 ? (float)(u8(&r) + 1) : -1.0f;
  if (d.alibi || (stray && (vflags & 8))) {
    a.alibi_stride = (vflags & 16) ? stride_of(&r) : 0;
    a.alibi_numel = capacity(&r, a.alibi_stride ? dense(B, H, 1, 1) : dense(H, 1, 1, 1));
    a.alibi_slopes = buffer(&bufs, a.alibi_numel, sizeof(float));
  }
  if (d.bias || (stray && (vflags & 32))) {
    if (u8(&r) & 1)
      for (int j = 0; j < 3; j++) a.bias_stride[j] = stride_of(&r);
    a.bias_numel = capacity(&r, dense(B, H, Nq, Nk));
    a.bias = buffer(&bufs, a.bias_numel, es);
  }
  if (d.document || (stray && (vflags & 64))) {
    if (u8(&r) & 1) a.q_seg_stride = stride_of(&r), a.k_seg_stride = stride_of(&r);
    a.q_seg_numel = capacity(&r, dense(B, Nq, 1, 1));
    a.k_seg_numel = capacity(&r, dense(B, Nk, 1, 1));
    a.q_seg = buffer(&bufs, a.q_seg_numel, sizeof(int32_t));
    a.k_seg = buffer(&bufs, a.k_seg_numel, sizeof(int32_t));
  }
  if (d.prefix || (stray && (vflags & 128))) a.prefix_len = size_of(&r, -1, 30);
  if (d.dropout != 0 || (stray && (flags >> 28) & 1)) a.dropout_seed = u64(&r), a.dropout_offset = u64(&r);
  if (paged && a.seqlen_new > 0 && (u8(&r) & 1)) { /* new rows to append */
    int64_t *ns[2] = {a.k_new_stride, a.v_new_stride};
    for (int w = 0; w < 2; w++)
      if (u8(&r) & 1)
        for (int j = 0; j < 3; j++) ns[w][j] = stride_of(&r);
    int64_t dn = dense(B, a.seqlen_new, HK, D);
    a.k_new_numel = capacity(&r, dn), a.v_new_numel = capacity(&r, dn);
    a.k_new = buffer(&bufs, a.k_new_numel, es), a.v_new = buffer(&bufs, a.v_new_numel, es);
  }
  /* the modifier values: a tensor sized for every head (kiln_forward does not know its size:
   * the caller's to get right), integers of either sign */
  kiln_mod_arg margs[4];
  a.n_mod_args = (int)(u8(&r) % 4);
  a.mod_args = margs;
  for (int i = 0; i < a.n_mod_args; i++) {
    uint32_t b = u8(&r);
    margs[i] = (kiln_mod_arg){.name = mod_names[b & 3], .kind = (kiln_mod_arg_kind)((b >> 2) & 3),
                              .i = (int32_t)u32(&r), .f = 0.5};
    if (margs[i].kind == KILN_MOD_ARG_PTR)
      margs[i].p = buffer(&bufs, H > 0 && H <= MAX_ELEMS ? H : 1, sizeof(float));
  }

  /* a backward's gradients (dO, dQ like q; dK, dV like k) and its delta workspace */
  kiln_backward_args ba = {.fwd = a};
  if (bwd) {
    int64_t *gs[4] = {ba.dout_stride, ba.dq_stride, ba.dk_stride, ba.dv_stride};
    int64_t *gn[4] = {&ba.dout_numel, &ba.dq_numel, &ba.dk_numel, &ba.dv_numel};
    void *gp[4];
    for (int i = 0; i < 4; i++) {
      if (u8(&r) & 1)
        for (int j = 0; j < 3; j++) gs[i][j] = stride_of(&r);
      *gn[i] = capacity(&r, i < 2 ? dq : dk);
      gp[i] = buffer(&bufs, *gn[i], es);
    }
    ba.dout = gp[0], ba.dq = gp[1], ba.dk = gp[2], ba.dv = gp[3];
    ba.delta_numel = capacity(&r, varlen ? dense(H, a.total_q, 1, 1) : dense(B, H, Nq, 1));
    ba.delta = buffer(&bufs, ba.delta_numel, sizeof(float));
  }
  const int cus = 1 + (int)(u8(&r) % 132);  /* decode's split heuristic: the device's units */

  api_call call;
  if (bwd) {
    kn_argval args[KN_ATTN_MAX_PARAMS];
    int grid[KN_BWD_NKERNELS][3];
    s = api_backward_args(&view, &memo->bsig, &ba, &call, args, grid);
    if (s) {
      refused(s);
    } else {
      for (int w = 0; w < KN_BWD_NKERNELS; w++)  /* (kiln_backward skips an empty grid) */
        if (grid[w][0] && grid[w][1])
          launch(3, kernel_for(3, kn_attn_bwd_kernels[w], &d, &c), args, grid[w], &bufs);
    }
    for (int i = 0; i < bufs.n; i++) free(bufs.p[i]);
    return 0;
  }
  s = api_forward_args(&view, &a, "kiln_forward", &call);
  if (s) {
    refused(s);
  } else if (call.append && view.kind == KN_DEVICE_HOST) {  /* kiln_forward's, before the launch */
    s = api_paged_append_host(&d, &call.a, call.args);
    check(s == KILN_OK, "the append refused what api_forward_args accepted", kiln_last_error());
  }
  /* decode serves dense forwards of 1..KN_DECODE_MAX_Q query rows (api_decode_wanted) */
  kn_attn_config dc = kn_attn_decode_default_config(NULL, &d);
  dc.block_n = 16;
  if (kn_attn_decode_check(NULL, &d, &dc, &diag)) dc = kn_attn_decode_default_config(NULL, &d);
  bool decode = d.layout == KN_ATTN_DENSE && a.seqlen_q >= 1 && a.seqlen_q <= KN_DECODE_MAX_Q &&
                kn_attn_decode_check(NULL, &d, &dc, &diag) == 0;
  if (!s && !call.empty && decode) {
    int want = (flags >> 25) & 1 ? (int)u8(&r) % 8 : 0;  /* KILN_DECODE_SPLITS */
    kn_decode_plan plan = kn_attn_decode_plan(&d, &dc, &call.p, cus, want);
    float *ws_o = buffer(&bufs, (int64_t)(plan.ws_o_bytes / sizeof(float)), sizeof(float));
    float *ws_lse = buffer(&bufs, (int64_t)(plan.ws_lse_bytes / sizeof(float)), sizeof(float));
    kn_argval sa[KN_ATTN_MAX_PARAMS + KN_DECODE_NPARAMS], ca[KN_DECODE_COMBINE_NPARAMS];
    int sg[3], cg[3];
    s = api_decode_args(&view, &dc, &call, &plan, ws_o, ws_lse, sa, sg, ca, cg);
    check(s == KILN_OK, "decode's arguments refused what api_forward_args accepted",
          kiln_last_error());
    launch(1, kernel_for(1, "attn_decode", &d, &dc), sa, sg, &bufs);
    const kn_attn_config cc = {.block_m = 16, .block_n = 16, .warps = 1, .stages = 1};
    launch(2, kernel_for(2, "attn_decode_combine", &d, &cc), ca, cg, &bufs);
  } else if (!s && !call.empty) {
    launch(0, kernel_for(0, "attn_fwd", &d, &c), call.args, call.grid, &bufs);
  }
  for (int i = 0; i < bufs.n; i++) free(bufs.p[i]);
  return 0;
}
