/* attn_fwd.c — the FlashAttention-2 style forward template, built with the IR builder.
 *
 * One program instance owns BLOCK_M query rows of one (batch, head) and walks the keys in blocks
 * of BLOCK_N, keeping a running row max m_i, a running row sum l_i and an unnormalised output
 * accumulator acc (all f32) as loop-carried values of one `for`.  It assumes the layouts and
 * parameters documented in attention.h (head dimension contiguous, strides in elements) and
 * produces IR only: it never prints, and a bad descriptor or config is a -1 / NULL with a kn_diag.
 *
 * Algorithm (online softmax in the exp2 domain).  With qk_scale = sm_scale * log2(e), the scaled
 * score s = qk_scale * (q . k) satisfies exp(sm_scale * q.k) = 2^s, so every exponential is an
 * exp2 (one hardware instruction on every target).  Per KV block:
 *     s      = qk_scale * dot(Q, K^T)                 masked entries set to -inf
 *     m_new  = max(m_i, rowmax(s))
 *     p      = 2^(s - m_new)         alpha = 2^(m_i - m_new)
 *     l_i    = alpha * l_i + rowsum(p)
 *     acc    = alpha * acc + dot(cast(p, dtype), V)
 * and at the end O = acc / l_i and lse = ln(2) * (m_i + log2(l_i)) = ln(sum_j exp(sm_scale q.k_j)).
 * A row that has seen no live key yet has m_new = -inf, and -inf - -inf would be NaN; such rows
 * subtract 0 instead, so p = 2^-inf = 0 and alpha = 0 keep l_i = 0 and acc = 0.  Rows that never
 * see a key end with l_i = 0: they divide by 1 instead (acc is 0, so O = 0) and log2(1) = 0 makes
 * their lse -inf + 0 = -inf.
 *
 * Masking math.  Query row r (absolute, 0-based) and key column c are live together iff
 *     c < seqlen_k                                   (ragged last KV block)
 *     and, when causal, c <= r + (seqlen_k - seqlen_q)   (bottom-right alignment, FA2)
 * Rows r >= seqlen_q of the last query block are computed but never stored (store bounds).
 * A causal program's live rows end at r_last = min(row0 + BLOCK_M, seqlen_q) - 1, and no live row
 * sees a key beyond r_last + (seqlen_k - seqlen_q), so the KV loop runs over
 *     [0, hi),  hi = clamp(min(row0 + BLOCK_M, seqlen_q) + (seqlen_k - seqlen_q), 0, seqlen_k)
 * Every block it visits contains the live pair (r_last, start_n), and every block it skips is
 * fully masked; hi may be 0 (seqlen_q > seqlen_k: the whole program sees no key), then the loop
 * does not run and the rows get O = 0, lse = -inf.  Non-causal kernels use hi = seqlen_k.
 * Only the blocks on the edges of that range need the element mask: interior blocks skip it
 * (kv_blocks; the bounds in attn_fwd_build).
 *
 * Out-of-range K/V elements are loaded as 0 through the load bounds (never read), so a masked
 * column contributes p = 0 times a finite 0 and cannot turn into NaN.
 *
 * Varlen (attention.h, docs/serving.md) changes only the per-program setup: the program reads its
 * sequence's token ranges from cu_seqlens_q/k (clamped into the packed buffers), starts its base
 * pointers there, and from then on seqlen_q / seqlen_k are the sequence's own lengths (a program
 * past its sequence's end gets seqlen_k = 0: no key block, no store).  The KV loop is the dense
 * one.
 *
 * Paged (attention.h, docs/serving.md) changes the setup and the two KV loads: the program's
 * keys are its sequence's cache length (kn_paged_len), and each block's K^T and V tiles are
 * gathers through the block table (kn_paged_block, kn_paged_gather in attn_paged.c, which a
 * decode template can share) instead of 2-D block loads; masks, bounds and the softmax are the
 * dense kernel's.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL /* the key hash, header only */
#include <xxhash.h>

#include "attn_gen.h"
#include "attn_internal.h"
#include "interp.h"

/* ---- descriptor / config --------------------------------------------------------------------- */

/* the canonical keys: one "name=value" per field of the list, ';'-separated, snprintf-like */
typedef struct keytext {
  char *buf;
  size_t n;
  int len;
} keytext;

static void key_put(keytext *k, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void key_put(keytext *k, const char *name, const char *fmt, ...) {
  size_t at = (size_t)k->len < k->n ? (size_t)k->len : k->n;
  char *p = k->n > at ? k->buf + at : NULL;
  size_t room = k->n - at;
  int w = snprintf(p, room, "%s%s=", k->len ? ";" : "", name);
  if (w < 0) return;
  k->len += w;
  at = (size_t)k->len < k->n ? (size_t)k->len : k->n;
  p = k->n > at ? k->buf + at : NULL;
  room = k->n - at;
  va_list ap;
  va_start(ap, fmt);
  w = vsnprintf(p, room, fmt, ap);
  va_end(ap);
  if (w > 0) k->len += w;
}

static void key_num(keytext *k, int kind, const char *name, long v) {
  if (kind == KN_ATTN_FIELD_SCALAR_OPT) {  /* unset (0): not in the key at all */
    if (v) key_put(k, name, "%s", kn_scalar_name((kn_scalar)v));
    return;
  }
  if (kind == KN_ATTN_FIELD_BOOL_OPT) {  /* false: not in the key */
    if (v) key_put(k, name, "1");
    return;
  }
  if (kind == KN_ATTN_FIELD_SCALAR) key_put(k, name, "%s", kn_scalar_name((kn_scalar)v));
  else key_put(k, name, "%ld", v);
}

/* a text field: the hash of its bytes, so the key stays short and any edit changes it */
static void key_text(keytext *k, int kind, const char *name, const char *t) {
  (void)kind;
  if (!t || !t[0]) key_put(k, name, "0");
  else key_put(k, name, "%016llx", (unsigned long long)XXH3_64bits(t, strlen(t)));
}

/* a float: unset (0) not in the key; else the fewest digits that read back as the same float */
static void key_flt(keytext *k, int kind, const char *name, float v) {
  (void)kind;
  if (v == 0) return;
  char buf[32];
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
    if (strtof(buf, NULL) == v || v != v) break;
  }
  key_put(k, name, "%s", buf);
}

#define KEY_FIELD(kind, type, field, name) \
  _Generic(x->field, const char *: key_text, float: key_flt, default: key_num)(&k, kind, name, \
                                                                               x->field);

int kn_attn_desc_key(const kn_attn_desc *x, char *buf, size_t n) {
  keytext k = {.buf = buf, .n = n};
  if (buf && n) buf[0] = 0;
  KN_ATTN_DESC_FIELDS(KEY_FIELD)
  return k.len;
}

int kn_attn_config_key(const kn_attn_config *x, char *buf, size_t n) {
  keytext k = {.buf = buf, .n = n};
  if (buf && n) buf[0] = 0;
  KN_ATTN_CONFIG_FIELDS(KEY_FIELD)
  return k.len;
}
#undef KEY_FIELD

bool kn_attn_off32_applies(const kn_arch *arch, const kn_attn_desc *d) {
  return arch && arch->isa == KN_ISA_AMDGPU && d->layout != KN_ATTN_PAGED;
}

/* one slab's span in bytes below 2^31 (computed without overflow) */
static bool slab_fits(int64_t rows, int64_t stride, int64_t cols, int64_t esz) {
  if (rows <= 0) return true;
  int64_t span;
  if (stride < 0 || __builtin_mul_overflow(rows - 1, stride, &span) ||
      __builtin_add_overflow(span, cols, &span) || __builtin_mul_overflow(span, esz, &span))
    return false;
  return span < (INT64_C(1) << 31);
}

bool kn_attn_off32_fits(const kn_attn_desc *d, int64_t seqlen_k, int64_t k_sn, int64_t v_sn) {
  const int64_t esz = (int64_t)kn_scalar_size(kn_attn_kv_type(d));
  return slab_fits(seqlen_k, k_sn, d->head_dim, esz) && slab_fits(seqlen_k, v_sn, d->head_dim, esz);
}

static bool is_pow2_in(int x, int lo, int hi) { return x >= lo && x <= hi && (x & (x - 1)) == 0; }

/* is `in` the instruction the layout pass would take for this kernel's two dots? */
typedef struct fit_ctx {
  const kn_attn_desc *d;
  const kn_attn_config *c;
} fit_ctx;

static bool fits_both_dots(void *p, const kn_mma_instr *in) {
  const fit_ctx *f = p;
  int bm = f->c->block_m, bn = f->c->block_n, w = f->c->warps;
  int hd = kn_attn_head_pad(f->d->head_dim);  /* the tiles' head dimension */
  return kn_mma_fits(in, bm, bn, hd, w) && kn_mma_fits(in, bm, hd, bn, w); /* S = QK^T, O = PV */
}

/* "59 (padded to 64)", or "64" when the head dim is its own tile dimension */
static const char *head_text(const kn_attn_desc *d, char *buf, size_t n) {
  int pad = kn_attn_head_pad(d->head_dim);
  if (pad == d->head_dim) snprintf(buf, n, "%d", d->head_dim);
  else snprintf(buf, n, "%d (padded to %d)", d->head_dim, pad);
  return buf;
}

int kn_attn_check_on(const kn_arch *arch, const kn_attn_desc *d, const kn_attn_config *c,
                     kn_diag *diag) {
  kn_loc nowhere = {0};
  if (kn_attn_check(d, c, diag)) return -1;
  const kn_mma_instr *wg = c->wgmma ? kn_arch_pick_mma(arch, d->dtype, 64, NULL, NULL) : NULL;
  if (c->wgmma && (!wg || wg->operands != KN_MMA_WGMMA))
    return kn_error(diag, NULL, nowhere, "attention: wgmma is not available on %s for %s "
                    "(sm_90a, f16 and bf16)", arch ? arch->name : "host",
                    kn_scalar_name(d->dtype));
  if (!arch || arch->isa == KN_ISA_HOST) return 0;
  char hd[40];
  const int dp = kn_attn_head_pad(d->head_dim);
  fit_ctx f = {d, c};
  int want = arch->isa == KN_ISA_AMDGPU ? c->mfma : 0;
  const kn_mma_instr *in = kn_arch_pick_mma(arch, d->dtype, 0, NULL, NULL);
  if (!in)
    return kn_error(diag, NULL, nowhere, "attention: %s has no matrix instruction for %s",
                    arch->name, kn_scalar_name(d->dtype));
  if (in->operands == KN_MMA_FMA) want = 0;  /* f32 on AMDGPU: FMAs, MFMA ignored */
  if (c->wgmma) {  /* sm_90a's wgmma: one 64-row slab per warpgroup of 4 warps */
    if (!kn_arch_pick_mma(arch, d->dtype, 64, fits_both_dots, &f))
      return kn_error(diag, NULL, nowhere, "attention: block %dx%d with %d warps does not fit "
                      "wgmma at head dim %s (block_m must be 16 x warps, warps a multiple of 4: "
                      "one 64-row slab per warpgroup)", c->block_m, c->block_n, c->warps,
                      head_text(d, hd, sizeof hd));
    want = 64;
  }
  if (!kn_arch_pick_mma(arch, d->dtype, want, fits_both_dots, &f))
    return kn_error(diag, NULL, nowhere,
                    "attention: block %dx%d with %d warps does not fit a matrix instruction of %s "
                    "for %s at head dim %s (the rows per warp, block_m / warps, must be a "
                    "multiple of the instruction's m; block_n and the head dim of its n and k)",
                    c->block_m, c->block_n, c->warps, arch->name, kn_scalar_name(d->dtype),
                    head_text(d, hd, sizeof hd));
  /* Above head dim 256 the registers decide as well: each thread holds its share of the f32
   * accumulator (block_m x DP over the program's threads) and of Q (16-bit: two per register),
   * and these may take at most half of what a thread may use (AMDGPU: the 512 unified VGPRs and
   * AGPRs of a lane, 256 with 4 or more waves, whose kernels ask for 2 waves per SIMD; NVIDIA:
   * 255), so that S, P and the addresses fit beside them.  Measured at D 512 (docs/gpu.md): the
   * configs this accepts compile to gfx90a/gfx942/gfx950 code objects without VGPR spills;
   * those it refuses spilled (gfx942 32x16 with 1 wave: 3 VGPRs; gfx950 64x32 with 4 waves:
   * 77).  On NVIDIA a warp's rows are at least the instruction's 16, 256 accumulator registers
   * per thread at D 512 (ptxas spilled 650-990 bytes): no tiling fits above 256.  f32 dots are
   * per-thread FMAs whose A fragments hold whole rows of Q per lane: refused too (754 VGPR
   * spills on gfx950). */
  int64_t regs = 0, budget = 0;
  if (dp > 256) {
    if (in->operands == KN_MMA_FMA)
      return kn_error(diag, NULL, nowhere, "attention: head dim %s is not supported for %s on "
                      "%s (above 256 only with a matrix instruction: the f32 FMA dots hold "
                      "whole rows of Q per thread)", head_text(d, hd, sizeof hd),
                      kn_scalar_name(d->dtype), arch->name);
    int64_t per_reg = 4 / (int64_t)kn_scalar_size(d->dtype);  /* Q elements per register */
    int m = in->m;  /* the fewest rows a warp can hold: the smallest m of an instruction */
    for (int i = 0; i < arch->nmma; i++)
      if (arch->mma[i].a == d->dtype && arch->mma[i].m < m) m = arch->mma[i].m;
    int64_t least = (int64_t)m * dp / arch->lanes;
    int64_t most = arch->isa == KN_ISA_AMDGPU ? arch->amd->vgprs_per_lane : 255;
    if (least + least / per_reg > most / 2)
      return kn_error(diag, NULL, nowhere, "attention: head dim %s is not supported on %s: "
                      "a warp holds at least %d rows of the f32 accumulator and Q, %lld "
                      "registers per thread, more than half of its %lld (head dims above 256 "
                      "are not supported there)", head_text(d, hd, sizeof hd), arch->name, m,
                      (long long)(least + least / per_reg), (long long)most);
    int64_t acc = (int64_t)c->block_m * dp / ((int64_t)c->warps * arch->lanes);
    regs = acc + acc / per_reg;
    budget = arch->isa == KN_ISA_AMDGPU ? most / (c->warps >= 4 ? 2 : 1) : most;
  }
  /* Q staged once, K and V tiles through shared memory: the plan's size when nothing shares
   * bytes (what the NVPTX plan needs; AMDGPU's reuses some, so a few configs that would fit
   * are not offered) */
  int64_t need = ((int64_t)c->block_m + 2 * (int64_t)c->block_n) * dp *
                 (int64_t)kn_scalar_size(d->dtype);
  if (c->wgmma)  /* K and V in column blocks of 64, each buffer 1024-byte aligned */
    need = ((int64_t)c->block_m * dp + 2 * (int64_t)c->block_n * ((dp + 63) / 64 * 64)) *
               (int64_t)kn_scalar_size(d->dtype) + 2048;
  if (need > arch->shared_bytes)
    return kn_error(diag, NULL, nowhere, "attention: block %dx%d at head dim %s needs up to %lld "
                    "bytes of shared memory for Q, K and V; %s has %lld", c->block_m,
                    c->block_n, head_text(d, hd, sizeof hd), (long long)need, arch->name,
                    (long long)arch->shared_bytes);
  if (regs > budget / 2)
    return kn_error(diag, NULL, nowhere, "attention: block %dx%d with %d warps at head dim %s "
                    "needs %lld registers per thread for the f32 accumulator and Q; above head "
                    "dim 256 at most half of the %lld a thread has on %s (fewer rows per warp: "
                    "a smaller block_m or more warps)", c->block_m, c->block_n, c->warps,
                    head_text(d, hd, sizeof hd), (long long)regs, (long long)budget, arch->name);
  return 0;
}

bool kn_attn_has_modifiers(const kn_attn_desc *d) {
  return d->window || d->softcap || d->alibi || d->bias || d->document || d->prefix ||
         (d->mods && d->mods[0]);
}

kn_attn_config kn_attn_default_config(const kn_arch *arch, const kn_attn_desc *d) {
  /* the registry's measured row for the padded head dim (compiler/arch.c); when it does not
   * fit this dtype or head dim (f32 tiles take twice the shared memory), the nearest smaller
   * shape that does */
  const int64_t chunk = 16 / (int64_t)kn_scalar_size(d->dtype);  /* elements per 16 bytes */
  const kn_arch_default *r =
      kn_arch_default_for(arch, kn_attn_head_pad(d->head_dim), d->head_dim % chunk == 0);
  kn_attn_config c = {.block_m = r->block_m, .block_n = r->block_n, .warps = r->warps, .stages = 2};
  /* A variant beyond causal adds (BM, BN) tiles of indices and mask terms that stay live across
   * the KV loop; at 128x64 they push D128 kernels past the register file (gfx90a/gfx942: 1 to
   * 12 VGPR spills for window or ALiBi; sm_90a: 60 to 900 spill bytes for bias, window +
   * softcap, documents), while 64x32 blocks hold every built-in variant without spills up to head dim 128 on all of
   * them, and at 256 on the AMD chips (sm_80/sm_90a: a few hundred bytes for the document mask,
   * whose block predicate wraps the loop body in an `if`); measured with kiln compile --stats,
   * test_variants keeps it true. */
  if (kn_attn_has_modifiers(d) && arch && arch->isa != KN_ISA_HOST) {
    if (c.block_m > 64) c.block_m = 64;
    if (c.block_n > 32) c.block_n = 32;
  }
  /* Varlen on NVIDIA: the sequence's offsets and lengths are registers where a dense kernel's
   * are parameters ptxas reloads at will, and at 32 rows per warp that tips the D128 128x64
   * kernels from 12-28 bytes of spills to 2 KB (sm_80 and sm_90a; 64x64 with 4 warps: 76-330
   * bytes).  16 rows per warp (128x64 with 8 warps) compile without spills; test_varlen keeps it
   * true.  fp8 inputs likewise: the conversions of the K and V tiles to f16 took the dense
   * sm_90a D128 causal kernel at 128x64 with 4 warps to 252 bytes of spills (test_fp8). */
  if ((d->layout != KN_ATTN_DENSE || kn_attn_is_fp8(d)) && arch && arch->isa == KN_ISA_NVPTX &&
      c.block_m / c.warps > 16)
    c.warps = c.block_m / 16;
  kn_diag diag;
  /* Paged on NVIDIA: the K and V tiles are row gathers (compiler/gpu/gather.c), read in 16-byte
   * vectors like a load's rows.  128x64 with 8 warps (16 rows per warp, the varlen default)
   * compiles without spills at D 64 and 128 on sm_80 and sm_90a for every built-in variant
   * (kiln compile --stats, ptxas -O3; test_paged keeps it true), and on the H200 (B 4, N 4096,
   * bf16 D128 causal, pages of 16 or 256 shuffled; bench/RESULTS.md, session 23) ran in 2.55 ms
   * against 3.22 ms at 128x32 with 8 warps, the default while each gathered element was a
   * scalar load (then 128x64 spilled 364 bytes on sm_80); dense: 1.67 ms. */
  /* Paged on AMDGPU: the dense defaults.  While each gathered element was a scalar load with
   * its i64 offset, gfx942 D128 causal at 128x64 took 352 VGPRs and 96 AGPRs (one wave per SIMD,
   * 46 SGPR spills) and paged kernels above head dim 64 ran at 64x32; as row gathers (16-byte
   * vectors, compiler/gpu/gather.c) the same kernel takes 230 VGPRs and no AGPRs, two waves per
   * SIMD like the dense one (218), and no gfx90a / gfx942 default at D 64, 128, 256 spills
   * (kiln compile --stats; static figures, no AMD GPU here). */
  if (d->layout == KN_ATTN_PAGED && arch && arch->isa == KN_ISA_NVPTX) {
    kn_attn_config t = {.block_m = 128, .block_n = 64, .warps = 8, .stages = 2};
    if (kn_attn_check_on(arch, d, &t, &diag) == 0) return t;
  }
  /* Variants on sm_90a at head dim 128 (padded): wgmma, 64x64 with one warpgroup.  Measured on
   * the H200 (bench/RESULTS.md, 2026-12-01, N 4096, each checked against float64 first): window
   * 0.761 ms against 0.984 at 64x32 mma.sync, softcap 2.324 against 2.823, ALiBi 1.699 against
   * 2.275 -- as fast as FlexAttention (0.76 / 2.96 / 1.65).  Other head dims keep mma.sync
   * until measured. */
  /* Dropout on GPUs: the Philox rounds hold four i32 words per element of the (BM, BN) scores
   * through ten rounds, and at 128x64 with 4 warps (64 elements per thread) that spilled
   * 164-280 bytes (sm_80, sm_90a) and 219-269 VGPRs (gfx90a, gfx942) at D 64 and 128; with 8
   * warps (16 rows per warp, 32 elements per thread) none of them spills (kiln compile --stats,
   * test_dropout).  With other modifiers: their 64x32 above (0 spills as well).  Not on wgmma
   * until measured. */
  if (d->dropout != 0 && arch && arch->isa != KN_ISA_HOST) {
    kn_attn_config t = {.block_m = 128, .block_n = 64, .warps = 8, .stages = 2};
    if (!kn_attn_has_modifiers(d) && kn_attn_check_on(arch, d, &t, &diag) == 0) return t;
    if (c.block_m > 64) c.block_m = 64;
    if (c.block_n > 32) c.block_n = 32;
  }
  /* The plain dense kernel too (f16 / bf16 inputs, causal or not): the tuner on the H200
   * (bench/RESULTS.md, session 24: kiln_tune at B 4 x H 32 x N 4096, every candidate checked
   * against float64) chose wgmma 64x64 with 4 warps over the mma.sync 128x64 default: 456
   * against 356 TFLOP/s without a mask, 343 against 321 causal. */
  bool plain = d->layout == KN_ATTN_DENSE && !kn_attn_is_fp8(d);
  if ((kn_attn_has_modifiers(d) || plain) && d->dropout == 0 && arch &&
      arch->isa == KN_ISA_NVPTX && kn_attn_head_pad(d->head_dim) == 128) {
    kn_attn_config w = {.block_m = 64, .block_n = 64, .warps = 4, .stages = 2, .wgmma = true};
    if (kn_attn_check_on(arch, d, &w, &diag) == 0) return w;
  }
  /* At head dim 64 (padded) the plain kernel takes wgmma 64x128 with 4 warps: the CUDA tuner's
   * choice on the H200 (bench/RESULTS.md, session 25: B 4 x H 32 x N 4096 f16, 39 candidates
   * checked against float64; 397 against 290 TFLOP/s without a mask, 288 against 257 causal;
   * `kiln run` at that tiling PASS on ragged D 64 / 59 shapes).  The variants keep their
   * tilings until measured. */
  if (plain && d->dropout == 0 && !kn_attn_has_modifiers(d) && arch &&
      arch->isa == KN_ISA_NVPTX && kn_attn_head_pad(d->head_dim) == 64) {
    kn_attn_config w = {.block_m = 64, .block_n = 128, .warps = 4, .stages = 2, .wgmma = true};
    if (kn_attn_check_on(arch, d, &w, &diag) == 0) return w;
  }
  if (kn_attn_check_on(arch, d, &c, &diag) == 0) return c;
  for (int bm = c.block_m; bm >= 16; bm /= 2)
    for (int bn = c.block_n; bn >= 16; bn /= 2)
      for (int w = r->warps; w >= 1; w /= 2) {
        kn_attn_config t = {.block_m = bm, .block_n = bn, .warps = w, .stages = 2};
        if (kn_attn_check_on(arch, d, &t, &diag) == 0) return t;
      }
  return c;  /* nothing fits: the caller's check reports why */
}

int kn_attn_check(const kn_attn_desc *d, const kn_attn_config *c, kn_diag *diag) {
  kn_loc nowhere = {0};
  if (d->dtype != KN_F16 && d->dtype != KN_BF16 && d->dtype != KN_F32)
    return kn_error(diag, NULL, nowhere, "attention: dtype %s is not supported (f16, bf16 or f32%s)",
                    (unsigned)d->dtype < KN_SCALAR_COUNT ? kn_scalar_name(d->dtype) : "?",
                    kn_scalar_is_fp8(d->dtype) ? "; fp8 inputs are q_dtype / kv_dtype, the "
                    "output stays f16 or bf16" : "");
  /* fp8 inputs: q or k / v in an fp8 format, computed in f16 or bf16 (attention.h) */
  const kn_scalar in[2] = {d->q_dtype, d->kv_dtype};
  for (int i = 0; i < 2; i++) {
    if (in[i] == KN_I1 || in[i] == d->dtype) continue;
    if ((unsigned)in[i] >= KN_SCALAR_COUNT || !kn_scalar_is_fp8(in[i]))
      return kn_error(diag, NULL, nowhere, "attention: %s %s is not supported (an fp8 format: "
                      "f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz; or the dtype)",
                      i ? "kv_dtype" : "q_dtype",
                      (unsigned)in[i] < KN_SCALAR_COUNT ? kn_scalar_name(in[i]) : "?");
    if (d->dtype != KN_F16 && d->dtype != KN_BF16)
      return kn_error(diag, NULL, nowhere, "attention: fp8 inputs (%s %s) are computed in f16 "
                      "or bf16, not %s", i ? "kv_dtype" : "q_dtype", kn_scalar_name(in[i]),
                      kn_scalar_name(d->dtype));
  }
  if (d->head_dim < 1 || d->head_dim > KN_ATTN_MAX_HEAD_DIM)
    return kn_error(diag, NULL, nowhere, "attention: head dim %d is not supported (1..%d)",
                    d->head_dim, KN_ATTN_MAX_HEAD_DIM);
  if (d->causal < KN_CAUSAL_NONE || d->causal > KN_CAUSAL_TOP_LEFT)
    return kn_error(diag, NULL, nowhere, "attention: causal %d is not 0 (none), 1 (bottom-right) "
                    "or 2 (top-left)", d->causal);
  if (d->prefix && d->causal)
    return kn_error(diag, NULL, nowhere, "attention: prefix already includes its causal part; "
                    "leave causal off with prefix");
  if (d->layout != KN_ATTN_DENSE && d->layout != KN_ATTN_VARLEN && d->layout != KN_ATTN_PAGED)
    return kn_error(diag, NULL, nowhere, "attention: layout %d is not 0 (dense), 1 (varlen) or "
                    "2 (paged)", d->layout);
  if (!(d->dropout >= 0 && d->dropout < 1))
    return kn_error(diag, NULL, nowhere, "attention: dropout probability %g is not in [0, 1)",
                    (double)d->dropout);
  if (d->dropout != 0 && d->layout == KN_ATTN_PAGED)
    return kn_error(diag, NULL, nowhere, "attention: dropout is not supported with a paged KV "
                    "cache (dense or varlen layouts: dropout is for training)");
  if (d->dropout != 0 && kn_attn_is_fp8(d))
    return kn_error(diag, NULL, nowhere, "attention: dropout is not supported with fp8 inputs "
                    "(dropout is for training, which reads f16 / bf16 / f32)");
  if (!is_pow2_in(c->block_m, 16, 256))
    return kn_error(diag, NULL, nowhere,
                    "attention: BLOCK_M %d is not a power of two in 16..256", c->block_m);
  if (!is_pow2_in(c->block_n, 16, 256))
    return kn_error(diag, NULL, nowhere,
                    "attention: BLOCK_N %d is not a power of two in 16..256", c->block_n);
  if (!is_pow2_in(c->warps, 1, 16))
    return kn_error(diag, NULL, nowhere, "attention: warps %d is not a power of two in 1..16",
                    c->warps);
  if (c->stages < 1 || c->stages > 8)
    return kn_error(diag, NULL, nowhere, "attention: stages %d is not in 1..8", c->stages);
  if (c->mfma != 0 && c->mfma != 16 && c->mfma != 32)
    return kn_error(diag, NULL, nowhere, "attention: mfma %d is not 0, 16 or 32", c->mfma);
  return 0;
}

/* ---- kernel builder ---------------------------------------------------------------------------- */

/* parameter indices, in the order of attention.h */
enum {
  P_Q, P_K, P_V, P_O, P_LSE, P_SM_SCALE, P_SEQLEN_Q, P_SEQLEN_K, P_HEADS, P_KV_GROUP,
  P_Q_SB, P_Q_SH, P_Q_SM, P_K_SB, P_K_SH, P_K_SN, P_V_SB, P_V_SH, P_V_SN,
  P_O_SB, P_O_SH, P_O_SM, P_LSE_SB, P_LSE_SH, P_COUNT
};
_Static_assert((int)P_COUNT == (int)KN_ATTN_NPARAMS, "parameter list and KN_ATTN_NPARAMS disagree");
_Static_assert((int)P_SEQLEN_Q == (int)KN_ATTN_P_SEQLEN_Q &&
                   (int)P_SEQLEN_K == (int)KN_ATTN_P_SEQLEN_K,
               "attn_internal.h's parameter indices disagree");

const char *const kn_attn_param_names[P_COUNT] = {
    "q", "k", "v", "o", "lse", "sm_scale", "seqlen_q", "seqlen_k", "heads", "kv_group",
    "q_sb", "q_sh", "q_sm", "k_sb", "k_sh", "k_sn", "v_sb", "v_sh", "v_sn",
    "o_sb", "o_sh", "o_sm", "lse_sb", "lse_sh"};

kn_type kn_attn_param_type(const kn_attn_desc *d, int i) {
  switch (i) {
  case P_Q: return kn_ty_ptr(kn_attn_q_type(d));
  case P_K: case P_V: return kn_ty_ptr(kn_attn_kv_type(d));
  case P_O: return kn_ty_ptr(d->dtype);
  case P_LSE: return kn_ty_ptr(KN_F32);
  case P_SM_SCALE: return kn_ty_scalar(KN_F32);
  case P_SEQLEN_Q: case P_SEQLEN_K: case P_HEADS: case P_KV_GROUP: return kn_ty_scalar(KN_I32);
  default: return kn_ty_scalar(KN_I64);  /* the strides */
  }
}

/* Does f (or a function it calls) read memory at an address that depends on the parameters
 * `idx` marks (a modifier's q_idx and kv_idx)?  Those need their indices clamped into range; a
 * load at uniform indices (ALiBi's slope of (b, h)) does not.  Values derived from a marked
 * parameter are tainted, in program order (modifiers are straight-line code: an op with regions
 * is answered with yes). */
typedef struct taint {
  const kn_value *v[256];
  int n;
  bool overflow;  /* more tainted values than the set holds: assume every load is indexed */
} taint;

static bool tainted(const taint *t, const kn_value *v) {
  for (int i = 0; i < t->n; i++)
    if (t->v[i] == v) return true;
  return t->overflow;
}

static void taint_add(taint *t, const kn_value *v) {
  if (t->n < (int)(sizeof t->v / sizeof t->v[0])) t->v[t->n++] = v;
  else t->overflow = true;
}

static bool indexed_read(const kn_func *f, const bool *idx, int depth) {
  if (depth >= 16) return true;
  taint t = {.n = 0};
  for (int i = 0; i < kn_func_nparams(f); i++)
    if (idx[i]) taint_add(&t, f->body->args[i]);
  for (const kn_op *op = f->body->first; op; op = op->next) {
    bool any = false;
    for (int i = 0; i < op->nopnd; i++) any |= tainted(&t, op->opnd[i]);
    if ((op->opc == KN_OP_LOAD || op->opc == KN_OP_GATHER) && any) return true;
    if (op->opc == KN_OP_CALL && op->callee) {
      bool sub[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK] = {false};
      int n = op->nopnd < (int)(sizeof sub / sizeof sub[0]) ? op->nopnd : (int)(sizeof sub / sizeof sub[0]);
      for (int i = 0; i < n; i++) sub[i] = tainted(&t, op->opnd[i]);
      if (indexed_read(op->callee, sub, depth + 1)) return true;
    } else if (op->nregion) {
      return true;  /* not in modifiers the verifier accepts; stay safe */
    }
    if (any)
      for (int r = 0; r < op->nres; r++) taint_add(&t, op->res[r]);
  }
  return false;
}

/* what the KV loop's body reads from the program around it */
typedef struct kv_loop {
  const kn_attn_desc *d;
  const kn_attn_plan *plan;
  kn_value *const *P;
  kn_scalar dt;
  int BM, BN, D, DP, nscore, nblock;
  bool clamp;
  kn_scalar kvt;  /* the element type of k and v in memory (fp8 inputs: converted to dt) */
  kn_value *sm_scale;  /* the score scale: sm_scale, times q and k's descales for fp8 inputs */
  kn_value *c0, *c1, *c_d, *c_bn, *one64, *seqlen_k, *seqlen_k_s, *qk_scale_s, *neg_inf_s,
      *zero_s, *neg_inf_r, *zero_r, *col_range, *q_tile, *k_base, *v_base, *q_idx, *bidx, *hidx,
      *row0, *row_end;
  const kn_paged_kv *paged;  /* a paged kernel's block table and lengths, else NULL */
  bool off32;  /* the config's off32: the K and V block loads carry the off32 clause */
  /* dropout: the (BM, BN) query rows, the program's b * heads + h, Philox's seed and offset */
  kn_value *drop_rows, *drop_bh, *drop_seed, *drop_offset;
} kv_loop;

/* a tile loaded in its memory type (fp8 inputs) converted to the compute dtype: exact, since
 * every fp8 value is an f16 and a bf16 */
static kn_value *to_compute(gen *g, kn_value *t, kn_scalar dt, const char *name) {
  return t->type.elem == dt ? t : named(g, kn_b_cast(&g->b, t, dt), name);
}

/* fp8 inputs: the descale factor of (b, hk) from parameter `name` (f32 (B, HK), batch stride
 * descale_sb), or 1 when its count parameter `name`_n is 0 (the caller gave none): a scalar load
 * bounded by the count, whose `other` is 1 */
static kn_value *descale(kn_builder *b, const kn_attn_sig *sig, kn_value *const *P, kn_value *off,
                         const char *name) {
  char nn[32];
  snprintf(nn, sizeof nn, "%s_n", name);
  kn_value *one = kn_b_const_f(b, kn_ty_scalar(KN_F32), 1.0);
  kn_value *c1 = kn_b_const_i(b, kn_ty_scalar(KN_I64), 1);
  kn_value_set_name(b->m, one, "c1_descale");
  kn_value_set_name(b->m, c1, "c1_descale_i64");
  kn_value *v = kn_b_load(b, kn_ty_scalar(KN_F32), P[sig_index(sig, name)], &off, &c1,
                          (kn_value *[]){P[sig_index(sig, nn)]}, NULL, one);
  kn_value_set_name(b->m, v, name);
  return v;
}

void kn_attn_fp8_scales(kn_builder *b, const kn_attn_sig *sig, kn_value *const *P,
                        kn_value *b64, kn_value *hk64, kn_value **qk, kn_value **v) {
  kn_value *row = kn_b_binary(b, KN_OP_MUL, b64, P[sig_index(sig, "descale_sb")]);
  kn_value_set_name(b->m, row, "descale_row");
  kn_value *off = kn_b_binary(b, KN_OP_ADD, row, hk64);
  kn_value_set_name(b->m, off, "descale_off");
  *qk = kn_b_binary(b, KN_OP_MUL, descale(b, sig, P, off, "q_descale"),
                    descale(b, sig, P, off, "k_descale"));
  kn_value_set_name(b->m, *qk, "qk_descale");
  *v = descale(b, sig, P, off, "v_descale");
}

/* a mask of the library whose live region the interior bounds already know (attn_fwd_build) */
static bool bounded_mask(const kn_attn_mod *mod) {
  static const char *const names[] = {"kiln.causal", "kiln.causal_top_left", "kiln.window",
                                      "kiln.prefix"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (mod->f->name && !strcmp(mod->f->name, names[i])) return true;
  return false;
}

/* the (BM, BN) tile of key indices of the block starting at n0 */
static kn_value *block_cols(gen *g, const kv_loop *L, kn_value *n0) {
  kn_value *cols = bin(g, KN_OP_ADD, L->col_range, splat1(g, n0, L->BN, "n0_v"), "cols");
  return rows_of(g, cols, L->BM, "cols_s");
}

/* The `for` over the KV blocks [lo, hi), carrying (m_i, l_i, acc) in and out of carry[].  The
 * blocks outside [ilo, ihi) are edge blocks: only they evaluate the key bound and the masks
 * bounded_mask knows, under a branch on the block start that is uniform over the program (one
 * loop with a branch rather than three loops: NVPTX kernels with a loop per range kept more
 * registers live across them, ptxas spilled 100-150 bytes at D 128).  Other masks apply to every
 * block. */
static void kv_blocks(gen *g, const kv_loop *L, kn_value *lo, kn_value *hi, kn_value *ilo,
                      kn_value *ihi, bool edge_lo, kn_value *carry[3]) {
  const kn_attn_plan *plan = L->plan;
  kn_value *const *P = L->P;
  const kn_scalar dt = L->dt;
  const int BM = L->BM, BN = L->BN, DP = L->DP;
  const kn_type row_f32 = kn_ty_tile1(KN_F32, BM), s_f32 = kn_ty_tile2(KN_F32, BM, BN),
                acc_f32 = kn_ty_tile2(KN_F32, BM, DP), f32 = kn_ty_scalar(KN_F32);
  kn_builder body;
  kn_op *loop = kn_b_for(&g->b, lo, hi, L->c_bn, 3, carry, &body);
  kn_value *start_n = named(g, loop->region[0]->args[0], "start_n");
  kn_value *m_i = named(g, loop->region[0]->args[1], "m_i");   /* (BM) running max, exp2 units */
  kn_value *l_i = named(g, loop->region[0]->args[2], "l_i");   /* (BM) running sum of p */
  kn_value *acc = named(g, loop->region[0]->args[3], "acc");   /* (BM, DP) unnormalised O */
  kn_builder outer = g->b;
  g->b = body;
  kn_builder loop_body = body;
  kn_op *skip = NULL;
  kn_value *n0 = named(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF, start_n, BN), "n0");
  if (L->nblock) {
    /* the block predicates: skip the block when any says no live pair is in it */
    kn_value *kv_end = bin(g, KN_OP_MIN, bin(g, KN_OP_ADD, n0, L->c_bn, "n0_end"), L->seqlen_k,
                           "kv_end_blk");
    kn_value *live_blk = NULL;
    for (int i = 0; i < plan->nmods; i++) {
      if (plan->mod[i].kind != KN_MOD_BLOCK) continue;
      kn_value *fixed[KN_MOD_FIXED_BLOCK] = {L->bidx, L->hidx, L->row0, L->row_end, n0, kv_end};
      kn_value *r = call_mod(g, &plan->mod[i], fixed, KN_MOD_FIXED_BLOCK, P,
                             kn_ty_scalar(KN_I1), "block_live");
      live_blk = live_blk ? bin(g, KN_OP_AND, live_blk, r, "block_live_all") : r;
    }
    kn_builder then_b, else_b;
    skip = kn_b_if(&g->b, live_blk, 3, (kn_type[]){row_f32, row_f32, acc_f32}, &then_b, &else_b);
    kn_b_yield(&else_b, 3, (kn_value *[]){m_i, l_i, acc});
    g->b = then_b;
  }
  /* K^T: (DP, BN), element (d, j) = K[n0 + j, d]; keys past seqlen_k, d past D read as 0.  A
   * paged kernel gathers the block's rows through the block table (attn_paged.c) */
  kn_paged_rows pr;
  if (L->paged) kn_paged_block(&g->b, L->paged, n0, BN, false, &pr);
  kn_value *kt = L->paged
      ? kn_paged_gather(&g->b, L->kvt, L->k_base, &pr, P[P_K_SB], P[P_K_SN], L->D, DP, true,
                        "k_tile")
      : named(g, kn_b_load(&g->b, kn_ty_tile2(L->kvt, DP, BN), L->k_base,
                           (kn_value *[]){L->c0, n0}, (kn_value *[]){L->one64, P[P_K_SN]},
                           (kn_value *[]){L->c_d, L->seqlen_k}, NULL, NULL),
              "k_tile");
  if (L->off32 && !L->paged) kn_load_set_off32(kt);
  /* a paged kernel gathers V here too: its addresses are known before the first dot, so
   * NVIDIA GPUs copy both blocks together (cp.async, compiler/gpu/assign_layouts.c), V in
   * flight during QK^T and the softmax.  Not fp8 pages: their V is converted before the dot,
   * so it is read into registers, and held there across the softmax it spills on gfx942 */
  bool v_early = L->paged && L->kvt == dt;
  kn_value *vt_paged = v_early ? kn_paged_gather(&g->b, L->kvt, L->v_base, &pr, P[P_V_SB],
                                                  P[P_V_SN], L->D, DP, false, "v_tile")
                                : NULL;
  kt = to_compute(g, kt, dt, "k_conv");
  kn_value *qk = named(g, kn_b_dot(&g->b, L->q_tile, kt, L->zero_s), "qk");   /* (BM, BN) */
  /* without score modifiers, straight to exp2 units */
  kn_value *s = L->nscore ? NULL : bin(g, KN_OP_MUL, qk, L->qk_scale_s, "s");
  int nfree = 0;  /* masks of every block */
  for (int i = 0; i < plan->nmods; i++)
    nfree += plan->mod[i].kind == KN_MOD_MASK && !bounded_mask(&plan->mod[i]);
  kn_value *cols_s = NULL, *kv_idx = NULL;
  if (L->nscore || nfree) {
    cols_s = block_cols(g, L, n0);
    kv_idx = cols_s;
    if (L->clamp) {
      kn_value *k_last = bin(g, KN_OP_SUB, L->seqlen_k, L->c1, "k_last");
      kv_idx = bin(g, KN_OP_MIN, cols_s, splat2(g, k_last, BM, BN, "k_last_s"), "kv_idx");
    }
  }
  if (L->nscore) {
    /* the score modifiers see the scaled score in natural units (exp, not exp2) */
    kn_value *sc = bin(g, KN_OP_MUL, qk, splat2(g, L->sm_scale, BM, BN, "sm_scale_s"), "score");
    for (int i = 0; i < plan->nmods; i++) {
      if (plan->mod[i].kind != KN_MOD_SCORE) continue;
      kn_value *fixed[KN_MOD_FIXED_SCORE] = {sc, L->bidx, L->hidx, L->q_idx, kv_idx};
      sc = call_mod(g, &plan->mod[i], fixed, KN_MOD_FIXED_SCORE, P, s_f32, "score_mod");
    }
    s = bin(g, KN_OP_MUL, sc, splat2(g, cf(g, f32, M_LOG2E, "c_log2e_s"), BM, BN, "log2e_s"),
            "s");
  }
  if (nfree) {
    kn_value *live = NULL;
    for (int i = 0; i < plan->nmods; i++) {
      if (plan->mod[i].kind != KN_MOD_MASK || bounded_mask(&plan->mod[i])) continue;
      kn_value *fixed[KN_MOD_FIXED_MASK] = {L->bidx, L->hidx, L->q_idx, kv_idx};
      kn_value *vis = call_mod(g, &plan->mod[i], fixed, KN_MOD_FIXED_MASK, P,
                               kn_ty_tile2(KN_I1, BM, BN), "visible");
      live = live ? bin(g, KN_OP_AND, live, vis, "live") : vis;
    }
    s = named(g, kn_b_select(&g->b, live, s, L->neg_inf_s), "s_live");
  }
  /* an edge block: the key bound and the bounded masks */
  kn_value *edge = named(g, kn_b_cmp(&g->b, KN_PRED_GE, n0, ihi), "edge_hi");
  if (edge_lo)
    edge = bin(g, KN_OP_OR, named(g, kn_b_cmp(&g->b, KN_PRED_LT, n0, ilo), "edge_lo"), edge,
               "edge");
  kn_builder then_b, else_b;
  kn_op *on_edge = kn_b_if(&g->b, edge, 1, &s_f32, &then_b, &else_b);
  kn_b_yield(&else_b, 1, &s);
  {
    kn_builder inner = g->b;
    g->b = then_b;
    if (!cols_s) cols_s = block_cols(g, L, n0);
    kn_value *live = named(g, kn_b_cmp(&g->b, KN_PRED_LT, cols_s, L->seqlen_k_s), "in_k");
    for (int i = 0; i < plan->nmods; i++) {
      if (plan->mod[i].kind != KN_MOD_MASK || !bounded_mask(&plan->mod[i])) continue;
      kn_value *fixed[KN_MOD_FIXED_MASK] = {L->bidx, L->hidx, L->q_idx, cols_s};
      kn_value *vis = call_mod(g, &plan->mod[i], fixed, KN_MOD_FIXED_MASK, P,
                               kn_ty_tile2(KN_I1, BM, BN), "visible");
      live = bin(g, KN_OP_AND, live, vis, "live");
    }
    kn_b_yield(&g->b, 1, (kn_value *[]){named(g, kn_b_select(&g->b, live, s, L->neg_inf_s),
                                              "s_edge")});
    g->b = inner;
  }
  s = named(g, on_edge->res[0], "s_masked");
  kn_value *m_blk = named(g, kn_b_reduce(&g->b, KN_OP_REDUCE_MAX, s, 1), "m_blk");
  kn_value *m_new = bin(g, KN_OP_MAX, m_i, m_blk, "m_new");
  /* rows that have seen no live key: subtract 0, not -inf (-inf - -inf = NaN) */
  kn_value *dead = named(g, kn_b_cmp(&g->b, KN_PRED_EQ, m_new, L->neg_inf_r), "no_key");
  kn_value *m_sub = named(g, kn_b_select(&g->b, dead, L->zero_r, m_new), "m_sub");
  kn_value *p = named(
      g, kn_b_unary(&g->b, KN_OP_EXP2, bin(g, KN_OP_SUB, s, cols_of(g, m_sub, BN, "m_sub_s"),
                                           "s_shift")),
      "p");
  kn_value *alpha =
      named(g, kn_b_unary(&g->b, KN_OP_EXP2, bin(g, KN_OP_SUB, m_i, m_sub, "m_diff")), "alpha");
  kn_value *l_blk = named(g, kn_b_reduce(&g->b, KN_OP_REDUCE_SUM, p, 1), "l_blk");
  kn_value *l_new = bin(g, KN_OP_ADD, bin(g, KN_OP_MUL, l_i, alpha, "l_scaled"), l_blk, "l_new");
  kn_value *acc_scaled = bin(g, KN_OP_MUL, acc, cols_of(g, alpha, DP, "alpha_s"), "acc_scaled");
  /* dropout: the weights of PV are the kept ones (l_i sums them all: lse is the undropped
   * one); 1 / (1 - p) is applied with the normalisation at the end */
  kn_value *p_pv = p;
  if (L->drop_rows) {
    kn_value *keep = kn_dropout_keep_tile(&g->b, L->drop_seed, L->drop_offset, L->drop_bh,
                                          L->drop_rows, block_cols(g, L, n0), L->d->dropout);
    p_pv = named(g, kn_b_select(&g->b, keep, p, L->zero_s), "p_dropped");
  }
  /* P is rounded to the input dtype so the second dot is a dtype x dtype matrix product */
  kn_value *p_in = dt == KN_F32 ? p_pv : named(g, kn_b_cast(&g->b, p_pv, dt), "p_cast");
  kn_value *vt = v_early ? vt_paged
      : L->paged
      ? kn_paged_gather(&g->b, L->kvt, L->v_base, &pr, P[P_V_SB], P[P_V_SN], L->D, DP, false,
                        "v_tile")
      : named(g, kn_b_load(&g->b, kn_ty_tile2(L->kvt, BN, DP), L->v_base,
                           (kn_value *[]){n0, L->c0}, (kn_value *[]){P[P_V_SN], L->one64},
                           (kn_value *[]){L->seqlen_k, L->c_d}, NULL, NULL),
              "v_tile");
  if (L->off32 && !L->paged) kn_load_set_off32(vt);
  vt = to_compute(g, vt, dt, "v_conv");
  kn_value *acc_new = named(g, kn_b_dot(&g->b, p_in, vt, acc_scaled), "acc_new");
  kn_b_yield(&g->b, 3, (kn_value *[]){m_new, l_new, acc_new});
  if (skip) {
    kn_value *r[3];
    for (int i = 0; i < 3; i++) r[i] = skip->res[i];
    named(g, r[0], "m_blk_new");
    named(g, r[1], "l_blk_new");
    named(g, r[2], "acc_blk_new");
    kn_b_yield(&loop_body, 3, r);
  }
  g->b = outer;
  for (int i = 0; i < 3; i++) carry[i] = loop->res[i];
}

/* Varlen: sequence b's token range [start, end) from cu = cu_seqlens_(q|k) of b64, both clamped
 * into [0, total] with start <= end (so no cu_seqlens value makes the program leave the packed
 * buffer); *len = end - start, and the start (i64) is returned: it takes the batch index's place
 * in the base offsets (the batch stride of a varlen buffer is its token stride) */
static kn_value *seq_range(gen *g, kn_value *cu, kn_value *b64, kn_value *total, kn_value *c0,
                           const char *nm, kn_value **len) {
  char name[32];
  kn_value *one = ci(g, kn_ty_scalar(KN_I64), 1, "c1_cu");
  kn_type i32 = kn_ty_scalar(KN_I32);
  kn_value *b1 = bin_sfx(g, KN_OP_ADD, b64, one, nm, "b1");
  snprintf(name, sizeof name, "%s_cu0", nm);
  kn_value *s0 = named(g, kn_b_load(&g->b, i32, cu, &b64, &one, NULL, NULL, NULL), name);
  snprintf(name, sizeof name, "%s_cu1", nm);
  kn_value *e0 = named(g, kn_b_load(&g->b, i32, cu, &b1, &one, NULL, NULL, NULL), name);
  kn_value *start = bin_sfx(g, KN_OP_MIN, bin_sfx(g, KN_OP_MAX, s0, c0, nm, "lo"), total, nm,
                            "start");
  kn_value *end = bin_sfx(g, KN_OP_MIN, bin_sfx(g, KN_OP_MAX, e0, start, nm, "hi"), total, nm,
                          "end");
  *len = bin_sfx(g, KN_OP_SUB, end, start, nm, "len");
  snprintf(name, sizeof name, "%s_start64", nm);
  return named(g, kn_b_cast(&g->b, start, KN_I64), name);
}

void kn_attn_varlen_open(kn_builder *b, const kn_attn_sig *sig, kn_value *const *P,
                         kn_value *b64, kn_value **q_start, kn_value **k_start,
                         kn_value **len_q, kn_value **len_k) {
  gen G = {.b = *b}, *g = &G;
  kn_value *z = ci(g, kn_ty_scalar(KN_I32), 0, "c0_cu");
  *q_start = seq_range(g, P[sig_index(sig, "cu_seqlens_q")], b64, P[KN_ATTN_P_SEQLEN_Q], z,
                       "seq_q", len_q);
  *k_start = seq_range(g, P[sig_index(sig, "cu_seqlens_k")], b64, P[KN_ATTN_P_SEQLEN_K], z,
                       "seq_k", len_k);
  /* and each length into the max lengths: the rows of bias and document tensors (and the
   * grid) are max_seqlen_q x max_seqlen_k, so a sequence longer than them (cu_seqlens in
   * device memory, unchecked) attends over its first max_seqlen tokens only and reads
   * nothing past those tensors' rows */
  *len_q = bin(g, KN_OP_MIN, *len_q, bin(g, KN_OP_MAX, P[sig_index(sig, "max_seqlen_q")], z,
                                         "max_q0"), "seq_q_len_c");
  *len_k = bin(g, KN_OP_MIN, *len_k, bin(g, KN_OP_MAX, P[sig_index(sig, "max_seqlen_k")], z,
                                         "max_k0"), "seq_k_len_c");
  *b = g->b;
}

kn_func *kn_attn_fwd_build(kn_module *m, const kn_attn_desc *d, const kn_attn_config *c,
                           kn_diag *diag) {
  if (kn_attn_check(d, c, diag) != 0) return NULL;
  const kn_scalar dt = d->dtype;
  /* D is the head dim the caller's rows have; DP, D rounded up to the matrix instructions' k
   * step, is the head dimension of every tile: the loads read columns D..DP-1 as 0 (they add 0
   * to QK^T and give O columns that are never stored) */
  const int BM = c->block_m, BN = c->block_n, D = d->head_dim, DP = kn_attn_head_pad(D);
  const kn_type i32 = kn_ty_scalar(KN_I32), i64 = kn_ty_scalar(KN_I64), f32 = kn_ty_scalar(KN_F32);
  const kn_type row_f32 = kn_ty_tile1(KN_F32, BM);        /* (BM) per query row */
  const kn_type s_f32 = kn_ty_tile2(KN_F32, BM, BN);      /* (BM, BN) scores */
  const kn_type acc_f32 = kn_ty_tile2(KN_F32, BM, DP);    /* (BM, DP) output accumulator */

  /* the variant's modifiers (parsed into m unless the caller put them there) and the kernel
   * signature they make: the template's parameters, then theirs */
  if (!m->source && kn_attn_mods_parse(m, d, diag)) return NULL;
  if (m->nfuncs && kn_verify(m, diag)) return NULL;
  kn_attn_plan *plan = kn_arena_alloc(m->arena, sizeof *plan);
  if (kn_attn_plan_make(m, d, plan, diag)) return NULL;
  const kn_attn_sig *sig = &plan->sig;
  const char *pnames[KN_ATTN_MAX_PARAMS];
  for (int i = 0; i < sig->n; i++) pnames[i] = sig->name[i];

  kn_func *f = kn_func_new(m, "attn_fwd", true, sig->n, sig->type, pnames, 0, NULL);
  kn_func_set_meta(f, "BLOCK_M", BM);
  kn_func_set_meta(f, "BLOCK_N", BN);
  kn_func_set_meta(f, "HEAD_DIM", D);
  kn_func_set_meta(f, "CAUSAL", d->causal);
  kn_func_set_meta(f, "HAS_LSE", d->has_lse);
  if (d->layout) kn_func_set_meta(f, "LAYOUT", d->layout);  /* only when set, as the flags below */
  kn_func_set_meta(f, "WARPS", c->warps);
  kn_func_set_meta(f, "STAGES", c->stages);
  /* uniform scalings may be reassociated (compiler/scale.c): the modifiers' score in natural
   * units times log2(e) becomes one multiply per element */
  kn_func_set_meta(f, "REASSOC", 1);
  /* the row max may ignore a NaN score (maxnum, one instruction on AMDGPU instead of four): a
   * NaN score still reaches its row's output, through p = exp2(NaN - m) = NaN in l and acc.
   * Not with score modifiers, whose own float max / min keep the IR's NaN-propagating meaning
   * (masks compute booleans, from indices). */
  bool score_mod = false;
  for (int i = 0; i < plan->nmods; i++) score_mod |= plan->mod[i].kind == KN_MOD_SCORE;
  if (!score_mod) kn_func_set_meta(f, "MAXNUM", 1);
  /* only when asked for: the default config's IR (golden files, cache keys) stays as it was */
  if (c->mfma) kn_func_set_meta(f, "MFMA", c->mfma);
  if (c->wgmma) kn_func_set_meta(f, "WGMMA", 1);
  /* the variant's kinds, only when set (the IR of plain attention stays as it was); `kiln run
   * --ir` reads them back to know which reference to check against */
  static const struct { const char *key; size_t off; } flags[] = {
      {"WINDOW", offsetof(kn_attn_desc, window)},   {"SOFTCAP", offsetof(kn_attn_desc, softcap)},
      {"ALIBI", offsetof(kn_attn_desc, alibi)},     {"BIAS", offsetof(kn_attn_desc, bias)},
      {"DOCUMENT", offsetof(kn_attn_desc, document)}, {"PREFIX", offsetof(kn_attn_desc, prefix)}};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    if (*(const bool *)((const char *)d + flags[i].off)) kn_func_set_meta(f, flags[i].key, 1);

  gen G = {.b = kn_builder_at_end(m, f->body)}, *g = &G;
  kn_value *P[KN_ATTN_MAX_PARAMS];
  for (int i = 0; i < sig->n; i++) P[i] = kn_func_param(f, i);
  kn_value *seqlen_q = P[P_SEQLEN_Q], *seqlen_k = P[P_SEQLEN_K];

  /* which rows, which (batch, head), which kv head */
  kn_value *pid_m = named(g, kn_b_program_id(&g->b, 0), "pid_m");
  kn_value *pid_bh = named(g, kn_b_program_id(&g->b, 1), "pid_bh");
  kn_value *bidx = bin(g, KN_OP_DIV, pid_bh, P[P_HEADS], "b");
  kn_value *hidx = bin(g, KN_OP_REM, pid_bh, P[P_HEADS], "h");
  kn_value *hkidx = bin(g, KN_OP_DIV, hidx, P[P_KV_GROUP], "hk");
  kn_value *c_bm = ci(g, i32, BM, "c_block_m");
  kn_value *row0 = bin(g, KN_OP_MUL, pid_m, c_bm, "row0_raw");
  row0 = named(g, kn_b_hint(&g->b, KN_OP_MULTIPLE_OF, row0, BM), "row0");

  /* (batch, head) base pointers; the products are i64 because B*H*N*D overflows i32 */
  kn_value *b64 = named(g, kn_b_cast(&g->b, bidx, KN_I64), "b64");
  kn_value *h64 = named(g, kn_b_cast(&g->b, hidx, KN_I64), "h64");
  kn_value *hk64 = named(g, kn_b_cast(&g->b, hkidx, KN_I64), "hk64");
  /* what the batch strides multiply: the batch index, or for varlen the first token of the
   * program's sequence in q/o/lse and in k/v.  Varlen programs then see their sequence's own
   * lengths everywhere below (masks, loop bounds, modifiers: P[] is what the calls bind), and a
   * program whose rows start past its sequence's end gets no keys (its loop runs no block) and
   * stores nothing (its rows are past seqlen_q) */
  kn_value *qb64 = b64, *kb64 = b64;
  if (d->layout == KN_ATTN_VARLEN) {
    kn_value *len_q, *len_k, *z = ci(g, i32, 0, "c0_cu");
    kn_attn_varlen_open(&g->b, sig, P, b64, &qb64, &kb64, &len_q, &len_k);
    kn_value *has_rows = named(g, kn_b_cmp(&g->b, KN_PRED_LT, row0, len_q), "has_rows");
    P[P_SEQLEN_Q] = seqlen_q = len_q;
    P[P_SEQLEN_K] = seqlen_k = named(g, kn_b_select(&g->b, has_rows, len_k, z), "seq_k_live");
  }
  /* paged: the pools have no batch axis (k_sb, v_sb are page strides, used by the gathers),
   * and the sequence's keys are its cache length, clamped into what its table row addresses */
  kn_paged_kv pg_kv, *paged = NULL;
  if (d->layout == KN_ATTN_PAGED) {
    pg_kv = kn_paged_open(&g->b, sig, P, b64, seqlen_k);
    P[P_SEQLEN_K] = seqlen_k = pg_kv.len;
    kb64 = ci(g, i64, 0, "c0_page");
    paged = &pg_kv;
  }
  kn_value *q_base = head_base(g, P[P_Q], qb64, P[P_Q_SB], h64, P[P_Q_SH], "q");   /* (Nq, D) */
  kn_value *k_base = head_base(g, P[P_K], kb64, P[P_K_SB], hk64, P[P_K_SH], "k");  /* (Nk, D) */
  kn_value *v_base = head_base(g, P[P_V], kb64, P[P_V_SB], hk64, P[P_V_SH], "v");  /* (Nk, D) */
  kn_value *o_base = head_base(g, P[P_O], qb64, P[P_O_SB], h64, P[P_O_SH], "o");   /* (Nq, D) */
  kn_value *lse_base =                                                                /* (Nq) */
      d->has_lse ? head_base(g, P[P_LSE], qb64, P[P_LSE_SB], h64, P[P_LSE_SH], "lse") : NULL;

  kn_value *c0 = ci(g, i32, 0, "c0");
  kn_value *c_d = ci(g, i32, D, "c_head_dim");
  kn_value *one64 = ci(g, i64, 1, "c1_i64");
  /* fp8 inputs (attention.h): the tiles are dequantised by folding the descales of (b, hk)
   * into the score scale (q's and k's) and into the output (v's) */
  kn_value *sm_scale = P[P_SM_SCALE], *v_scale = NULL;
  if (kn_attn_is_fp8(d)) {
    kn_value *qk_d;
    kn_attn_fp8_scales(&g->b, sig, P, b64, hk64, &qk_d, &v_scale);
    sm_scale = bin(g, KN_OP_MUL, sm_scale, qk_d, "sm_scale_d");
  }
  kn_value *qk_scale = bin(g, KN_OP_MUL, sm_scale, cf(g, f32, M_LOG2E, "c_log2e"), "qk_scale");

  /* Q: (BM, DP), loaded once; rows past seqlen_q and columns past D read as 0 */
  kn_value *q_tile = named(
      g,
      kn_b_load(&g->b, kn_ty_tile2(kn_attn_q_type(d), BM, DP), q_base, (kn_value *[]){row0, c0},
                (kn_value *[]){P[P_Q_SM], one64}, (kn_value *[]){seqlen_q, c_d}, NULL, NULL),
      "q_tile");
  q_tile = to_compute(g, q_tile, dt, "q_conv");

  /* loop invariants: row indices, constants of tile shape */
  kn_value *m_range = named(g, kn_b_arange(&g->b, 0, BM), "m_range");
  kn_value *rows = bin(g, KN_OP_ADD, m_range, splat1(g, row0, BM, "row0_v"), "rows"); /* (BM) */
  kn_value *col_range = named(g, kn_b_arange(&g->b, 0, BN), "n_range");     /* (BN) */
  kn_value *seqlen_k_s = splat2(g, seqlen_k, BM, BN, "seqlen_k_s");         /* (BM, BN) */
  kn_value *qk_scale_s = splat2(g, qk_scale, BM, BN, "qk_scale_s");
  kn_value *neg_inf_s = cf(g, s_f32, -INFINITY, "neg_inf_s");
  kn_value *zero_s = cf(g, s_f32, 0.0, "zero_s");
  kn_value *neg_inf_r = cf(g, row_f32, -INFINITY, "neg_inf_r");
  kn_value *zero_r = cf(g, row_f32, 0.0, "zero_r");
  kn_value *one_r = cf(g, row_f32, 1.0, "one_r");
  kn_value *zero_acc = cf(g, acc_f32, 0.0, "zero_acc");

  /* the modifiers' view of the tile: (BM, BN) query and key indices and the scalar (b, h).  When
   * a modifier reads memory the indices are clamped into range, so it may index a tensor with
   * them unchecked (the padding rows are never stored and the padding columns are masked
   * below, so what it computes there is discarded); pure arithmetic needs no clamp */
  int nscore = 0, nmask = 0, nblock = 0;
  for (int i = 0; i < plan->nmods; i++) {
    nscore += plan->mod[i].kind == KN_MOD_SCORE;
    nmask += plan->mod[i].kind == KN_MOD_MASK;
    nblock += plan->mod[i].kind == KN_MOD_BLOCK;
  }
  /* clamping costs registers, and only a modifier that reads memory at the indices needs it */
  bool clamp = false;
  for (int i = 0; i < plan->nmods; i++) {
    bool idx[KN_ATTN_MAX_PARAMS + KN_MOD_FIXED_BLOCK] = {false};
    if (plan->mod[i].kind == KN_MOD_SCORE) idx[3] = idx[4] = true;       /* q_idx, kv_idx */
    else if (plan->mod[i].kind == KN_MOD_MASK) idx[2] = idx[3] = true;
    else continue;
    clamp |= indexed_read(plan->mod[i].f, idx, 0);
  }
  kn_value *c1 = clamp ? ci(g, i32, 1, "c1") : NULL;
  kn_value *q_idx = NULL;
  if (nscore + nmask) {
    kn_value *qi = rows;
    if (clamp) {
      kn_value *q_last = bin(g, KN_OP_SUB, seqlen_q, c1, "q_last");
      qi = bin(g, KN_OP_MIN, rows, splat1(g, q_last, BM, "q_last_v"), "q_idx_rows");
    }
    q_idx = cols_of(g, qi, BN, "q_idx");
  }

  /* KV loop bounds [lo, hi) from the built-in masks (the masking math above; docs/variants.md):
   * every block outside them is fully masked for every live row of this program */
  kn_value *diag_off = NULL, *row_end = NULL;  /* Nk - Nq; the end of the live rows */
  if (d->causal || d->prefix || d->window || nblock) {
    diag_off = bin(g, KN_OP_SUB, seqlen_k, seqlen_q, "diag_off");
    row_end = bin(g, KN_OP_MIN, bin(g, KN_OP_ADD, row0, c_bm, "row0_end"), seqlen_q, "row_end");
  }
  kn_value *hi = seqlen_k, *lo = c0;
  /* the window's sizes, and where its edges start for the first and the last live row (the
   * loop bounds and the interior below both use them) */
  kn_value *wl = NULL, *wr = NULL, *w_no_left = NULL, *w_no_right = NULL, *w_diag0 = NULL,
           *w_diag_end = NULL;
  /* clamp(x, 0, seqlen_k) */
#define CLAMP_K(x, nm) bin(g, KN_OP_MIN, bin(g, KN_OP_MAX, (x), c0, nm "_pos"), seqlen_k, nm)
  if (d->causal || d->prefix) {
    kn_value *end = d->causal == KN_CAUSAL_TOP_LEFT
                        ? row_end : bin(g, KN_OP_ADD, row_end, diag_off, "kv_end");
    hi = CLAMP_K(end, "kv_hi");
    if (d->prefix) /* the prefix is visible to every row */
      hi = bin(g, KN_OP_MAX, hi, CLAMP_K(P[sig_index(sig, "prefix_len")], "prefix_hi"), "kv_hi_p");
  }
  if (d->window) {
    /* sizes above seqlen_q + seqlen_k mean unbounded and keep the sums below in i32 */
    kn_value *span = bin(g, KN_OP_ADD, seqlen_q, seqlen_k, "span");
    wl = bin(g, KN_OP_MIN, P[sig_index(sig, "window_left")], span, "wl");
    wr = bin(g, KN_OP_MIN, P[sig_index(sig, "window_right")], span, "wr");
    w_diag_end = bin(g, KN_OP_ADD, row_end, diag_off, "w_diag_end");
    kn_value *last = bin(g, KN_OP_ADD, w_diag_end, wr, "w_end");
    kn_value *w_hi = CLAMP_K(last, "w_hi");
    w_no_right = named(g, kn_b_cmp(&g->b, KN_PRED_LT, wr, c0), "w_no_right");
    hi = bin(g, KN_OP_MIN, hi, named(g, kn_b_select(&g->b, w_no_right, seqlen_k, w_hi), "w_hi_s"),
             "kv_hi_w");
    /* the first key row0 may see, rounded down to a block start */
    w_diag0 = bin(g, KN_OP_ADD, row0, diag_off, "w_diag0");
    kn_value *first = bin(g, KN_OP_SUB, w_diag0, wl, "w_first");
    first = bin(g, KN_OP_MAX, first, c0, "w_first_pos");
    first = bin(g, KN_OP_MUL, bin(g, KN_OP_DIV, first, ci(g, i32, BN, "c_bn_w"), "w_blk"),
                ci(g, i32, BN, "c_bn_w2"), "w_lo");
    w_no_left = named(g, kn_b_cmp(&g->b, KN_PRED_LT, wl, c0), "w_no_left");
    lo = named(g, kn_b_select(&g->b, w_no_left, c0, first), "kv_lo");
  }
#undef CLAMP_K
  kn_value *c_bn = ci(g, i32, BN, "c_block_n");

  /* The interior of [lo, hi): the blocks in which every key is below seqlen_k and inside every
   * built-in mask for every live row of the program, so they need no element mask (docs/
   * variants.md, "Interior and edge blocks").  For the rows [row0, row_end) and the keys
   * [n0, n0 + BN) that is n0 + BN <= e and n0 >= a with
   *   e = min(seqlen_k; causal: row0 + diag_off + 1 (top-left: row0 + 1); prefix: max(prefix_len,
   *       row0 + diag_off + 1); window: row0 + diag_off + wr + 1 when wr >= 0)
   *   a = window: row_end - 1 + diag_off - wl when wl >= 0; else lo
   * The loop masks the blocks in [lo, ilo) and [ihi, hi), not those in [ilo, ihi): ilo is the first
   * block start at or above a, ihi the end of the blocks from ilo that end at or below e, both
   * clamped into [lo, hi).  User masks (and the document mask) have no interior and are applied
   * in every block. */
  kv_loop L = {.d = d, .plan = plan, .P = P, .dt = dt, .kvt = kn_attn_kv_type(d),
               .sm_scale = sm_scale, .BM = BM, .BN = BN, .D = D, .DP = DP,
               .nscore = nscore, .nblock = nblock, .clamp = clamp, .c0 = c0, .c1 = c1,
               .c_d = c_d, .c_bn = c_bn, .one64 = one64, .seqlen_k = seqlen_k,
               .seqlen_k_s = seqlen_k_s, .qk_scale_s = qk_scale_s, .neg_inf_s = neg_inf_s,
               .zero_s = zero_s, .neg_inf_r = neg_inf_r, .zero_r = zero_r, .col_range = col_range,
               .q_tile = q_tile, .k_base = k_base, .v_base = v_base, .q_idx = q_idx,
               .bidx = bidx, .hidx = hidx, .row0 = row0, .row_end = row_end,
               .paged = paged, .off32 = c->off32 && !paged};
  if (d->dropout != 0) {
    L.drop_rows = cols_of(g, rows, BN, "drop_rows");
    L.drop_bh = bin(g, KN_OP_ADD, bin(g, KN_OP_MUL, bidx, P[P_HEADS], "drop_b_h"), hidx, "drop_bh");
    L.drop_seed = P[sig_index(sig, "dropout_seed")];
    L.drop_offset = P[sig_index(sig, "dropout_offset")];
  }
  kn_value *e = seqlen_k, *a = NULL;
  kn_value *c1i = ci(g, i32, 1, "c1_i");
  if (d->causal || d->prefix) {
    kn_value *diag = d->causal == KN_CAUSAL_TOP_LEFT
                         ? row0 : bin(g, KN_OP_ADD, row0, diag_off, "i_diag0");
    kn_value *ce = bin(g, KN_OP_ADD, diag, c1i, "i_causal_end");
    if (d->prefix) ce = bin(g, KN_OP_MAX, ce, P[sig_index(sig, "prefix_len")], "i_prefix_end");
    e = bin(g, KN_OP_MIN, e, ce, "i_end_c");
  }
  if (d->window) {
    kn_value *we = bin(g, KN_OP_ADD, bin(g, KN_OP_ADD, w_diag0, wr, "i_wr_end0"), c1i, "i_w_end");
    e = bin(g, KN_OP_MIN, e, named(g, kn_b_select(&g->b, w_no_right, e, we), "i_w_end_s"),
            "i_end_w");
    kn_value *last = bin(g, KN_OP_SUB, w_diag_end, c1i, "i_w_last");
    kn_value *wa = bin(g, KN_OP_SUB, last, wl, "i_w_first");
    a = named(g, kn_b_select(&g->b, w_no_left, lo, wa), "i_first");
  }
  /* ilo = lo + ceil(max(a - lo, 0) / BN) * BN, at most hi */
  kn_value *ilo = lo;
  if (a) {
    kn_value *ra = bin(g, KN_OP_MAX, bin(g, KN_OP_SUB, a, lo, "i_a_rel"), c0, "i_a_pos");
    kn_value *nb = bin(g, KN_OP_DIV, bin(g, KN_OP_ADD, ra, ci(g, i32, BN - 1, "c_bn_m1"), "i_a_up"),
                       c_bn, "i_a_blocks");
    ilo = bin(g, KN_OP_MIN, bin(g, KN_OP_ADD, lo, bin(g, KN_OP_MUL, nb, c_bn, "i_a_len"),
                                "i_lo_raw"), hi, "i_lo");
  }
  /* ihi = ilo + floor(max(min(e, hi) - ilo, 0) / BN) * BN */
  kn_value *re = bin(g, KN_OP_MAX, bin(g, KN_OP_SUB, bin(g, KN_OP_MIN, e, hi, "i_e_hi"), ilo,
                                       "i_e_rel"), c0, "i_e_pos");
  kn_value *ihi = bin(g, KN_OP_ADD, ilo, bin(g, KN_OP_MUL, bin(g, KN_OP_DIV, re, c_bn, "i_e_blocks"),
                                             c_bn, "i_e_len"), "i_hi");
  kn_value *carry[3] = {neg_inf_r, zero_r, zero_acc};
  kv_blocks(g, &L, lo, hi, ilo, ihi, a != NULL, carry);
  kn_value *m_fin = named(g, carry[0], "m_final");
  kn_value *l_fin = named(g, carry[1], "l_final");
  kn_value *acc_fin = named(g, carry[2], "acc_final");

  /* O = acc * (1 / l): one division per row, then a multiply per element (a correctly rounded
   * division per element was 64 div.rn.f32 per thread at D 128 on NVIDIA, about ten
   * instructions each); rows that saw no key have acc = 0 and l = 0: divide by 1 */
  kn_value *l_zero = named(g, kn_b_cmp(&g->b, KN_PRED_EQ, l_fin, zero_r), "l_zero");
  kn_value *l_safe = named(g, kn_b_select(&g->b, l_zero, one_r, l_fin), "l_safe");
  kn_value *inv_l = bin(g, KN_OP_DIV, one_r, l_safe, "inv_l");
  if (v_scale) inv_l = bin(g, KN_OP_MUL, inv_l, splat1(g, v_scale, BM, "v_descale_r"), "inv_l_v");
  if (d->dropout != 0)
    inv_l = bin(g, KN_OP_MUL, inv_l, cf(g, row_f32, kn_dropout_scale(d->dropout), "drop_scale_r"),
                "inv_l_drop");
  kn_value *out = bin(g, KN_OP_MUL, acc_fin, cols_of(g, inv_l, DP, "inv_l_s"), "out");
  if (dt != KN_F32) out = named(g, kn_b_cast(&g->b, out, dt), "out_cast");
  /* rows past seqlen_q and the padding columns past D are not written */
  kn_b_store(&g->b, out, o_base, (kn_value *[]){row0, c0}, (kn_value *[]){P[P_O_SM], one64},
             (kn_value *[]){seqlen_q, c_d}, NULL);

  if (d->has_lse) {
    /* natural-log lse; no-key rows: m = -inf, log2(1) = 0 -> -inf */
    kn_value *lg = named(g, kn_b_unary(&g->b, KN_OP_LOG2, l_safe), "log2_l");
    kn_value *lse2 = bin(g, KN_OP_ADD, m_fin, lg, "lse2");
    kn_value *lse = bin(g, KN_OP_MUL, lse2, cf(g, row_f32, M_LN2, "ln2_r"), "lse_rows");
    kn_b_store(&g->b, lse, lse_base, (kn_value *[]){row0}, (kn_value *[]){one64},
               (kn_value *[]){seqlen_q}, NULL);
  }
  kn_b_return(&g->b, 0, NULL);
  return f;
}

/* ---- arguments ----------------------------------------------------------------------------------- */

int kn_attn_check_sizes(const kn_attn_desc *d, const kn_attn_problem *p, kn_diag *diag) {
  const int64_t es = (int64_t)kn_scalar_size(d->dtype);
  const bool paged = d->layout == KN_ATTN_PAGED;
  if (paged && (p->page_size < 1 || p->page_size > KN_ATTN_MAX_PAGE || p->num_pages < 0 ||
                p->max_pages < 0 || (int64_t)p->max_pages * p->page_size > INT32_MAX))
    return kn_error(diag, NULL, (kn_loc){0}, "attention: paged KV with page size %d, %d pages "
                    "and %d pages per sequence: the page size must be 1..%d, the counts >= 0 "
                    "and max_pages * page_size below 2^31", p->page_size, p->num_pages,
                    p->max_pages, KN_ATTN_MAX_PAGE);
  const struct { const char *name; bool on; int64_t es, dims[4]; } t[] = {
      {"q/o", true, es, {p->batch, p->heads, p->seqlen_q, d->head_dim}},
      {"k/v", true, (int64_t)kn_scalar_size(kn_attn_kv_type(d)),
       {paged ? p->num_pages : p->batch, p->kv_heads,
                         paged ? p->page_size : p->seqlen_k, d->head_dim}},
      {"lse", d->has_lse, 4, {p->batch, p->heads, p->seqlen_q, 1}},
      {"bias", d->bias, es, {p->batch, p->heads, p->seqlen_q, p->seqlen_k}},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    int64_t n = t[i].es;
    bool ovf = false;
    /* (an empty dim still multiplies the strides of the dims before it) */
    for (int j = 0; j < 4; j++) ovf |= __builtin_mul_overflow(n, t[i].dims[j] ? t[i].dims[j] : 1, &n);
    if (t[i].on && ovf)
      return kn_error(diag, NULL, (kn_loc){0}, "attention: the %s tensor of %lld x %lld x %lld "
                      "x %lld elements is larger than any buffer can be (2^63 bytes)", t[i].name,
                      (long long)t[i].dims[0], (long long)t[i].dims[1], (long long)t[i].dims[2],
                      (long long)t[i].dims[3]);
  }
  return 0;
}

int kn_attn_fill_args(const kn_attn_desc *d, const kn_attn_sig *sig, const kn_attn_config *c,
                      const kn_attn_problem *p, void *q, void *k, void *v, void *o, float *lse,
                      const kn_attn_vargs *va, kn_argval *out, int grid[3], kn_diag *diag) {
  if (kn_attn_check_sizes(d, p, diag)) return -1;
  const int64_t D = d->head_dim, H = p->heads, HK = p->kv_heads, Nq = p->seqlen_q,
                Nk = p->seqlen_k;
  memset(out, 0, sizeof *out * (size_t)(sig ? sig->n : KN_ATTN_NPARAMS));
  out[P_Q].p = q;    /* (B, H, Nq, D) */
  out[P_K].p = k;    /* (B, HK, Nk, D) */
  out[P_V].p = v;    /* (B, HK, Nk, D) */
  out[P_O].p = o;    /* (B, H, Nq, D) */
  out[P_LSE].p = lse; /* (B, H, Nq) */
  out[P_SM_SCALE].f = p->sm_scale != 0 ? p->sm_scale : 1.0 / sqrt((double)D);
  out[P_SEQLEN_Q].i = Nq;
  out[P_SEQLEN_K].i = Nk;
  out[P_HEADS].i = H;
  out[P_KV_GROUP].i = HK > 0 ? H / HK : 1;
  out[P_Q_SB].i = H * Nq * D, out[P_Q_SH].i = Nq * D, out[P_Q_SM].i = D;
  out[P_K_SB].i = HK * Nk * D, out[P_K_SH].i = Nk * D, out[P_K_SN].i = D;
  out[P_V_SB].i = HK * Nk * D, out[P_V_SH].i = Nk * D, out[P_V_SN].i = D;
  out[P_O_SB].i = H * Nq * D, out[P_O_SH].i = Nq * D, out[P_O_SM].i = D;
  out[P_LSE_SB].i = H * Nq, out[P_LSE_SH].i = Nq;
  if (d->layout == KN_ATTN_VARLEN) {
    /* packed (total, heads, D): the batch stride is the token stride (attention.h) */
    const int64_t Tq = p->total_q, Tk = p->total_k;
    out[P_SEQLEN_Q].i = Tq;
    out[P_SEQLEN_K].i = Tk;
    out[P_Q_SB].i = out[P_Q_SM].i = out[P_O_SB].i = out[P_O_SM].i = H * D;
    out[P_Q_SH].i = out[P_O_SH].i = D;
    out[P_K_SB].i = out[P_K_SN].i = out[P_V_SB].i = out[P_V_SN].i = HK * D;
    out[P_K_SH].i = out[P_V_SH].i = D;
    out[P_LSE_SB].i = 1, out[P_LSE_SH].i = Tq;  /* (H, total_q) */
  }
  if (d->layout == KN_ATTN_PAGED) {
    /* the pools (num_pages, page_size, HK, D): {page, head, row} strides; seqlen_k is what a
     * table row addresses (kn_attn_check_sizes bounded it) */
    const int64_t PS = p->page_size;
    out[P_SEQLEN_K].i = (int64_t)p->max_pages * PS;
    out[P_K_SB].i = out[P_V_SB].i = PS * HK * D;
    out[P_K_SH].i = out[P_V_SH].i = D;
    out[P_K_SN].i = out[P_V_SN].i = HK * D;
  }
  grid[0] = (int)((Nq + c->block_m - 1) / c->block_m);
  grid[1] = (int)(p->batch * H);
  grid[2] = 1;
  if (sig && kn_attn_fill_vargs(d, sig, p, va, out, NULL, diag) < 0) return -1;
  return 0;
}

/* ---- tolerances ----------------------------------------------------------------------------------- */

/* The kernel and the reference read the same rounded inputs, so input rounding is not an error
 * source.  What remains, for N(0,1) inputs and sm_scale = 1/sqrt(D) (|O| <~ max|V| ~ 4.5):
 *  - f32: scores, exp2 and both dots in f32: relative errors of a few ulp of f32 (~1e-7) grown
 *    by sums of up to seqlen_k terms.  Measured (interpreter, D 64/128, up to 1000 x 1000, 12
 *    seeds): max 2e-6.  1e-4 leaves room for other summation orders on the GPU targets (tree
 *    reductions, split dots, exp2 approximations of a few ulp).
 *  - f16: O is rounded to f16 at the end (half an ulp: 2^-11 |O|, up to 1e-3 for |O| in [2, 4),
 *    2e-3 above 4; exact where one key dominates and O = V), and P is rounded to f16 before PV
 *    (relative 2^-11 per weight with random sign, so ~2^-11 |V| / sqrt(#keys), much smaller).
 *    Measured max 1.07e-3, i.e. the output rounding; 4e-3 is twice the worst half-ulp.
 *  - bf16: the same two sources with 2^-8 instead of 2^-11 (8x).  Measured max 8.9e-3 (half an
 *    ulp of |O| in [2, 4) is 7.8e-3); 3e-2 covers |O| up to 8 plus the P rounding.
 * lse is computed in f32 from f32 scores for every dtype: measured max 1.5e-6 for |lse| < ~15;
 * 1e-4 as for f32 outputs. */
double kn_attn_tolerance(kn_scalar dtype) {
  switch (dtype) {
  case KN_F32: return 1e-4;
  case KN_F16: return 4e-3;
  case KN_BF16: return 3e-2;
  default: return 0;
  }
}

double kn_attn_tolerance_of(const kn_attn_desc *d) {
  return kn_attn_tolerance(d->dtype) * kn_dropout_scale(d->dropout);
}

double kn_attn_lse_tolerance(kn_scalar dtype) {
  (void)dtype;  /* the lse path is f32 throughout */
  return 1e-4;
}
