/* wave_ops.c — what the AMDGPU cross-lane instructions compute, as pure functions over one wave.
 *
 * MFMA lane tables.  Taken from AMD's Matrix Instruction Calculator (github.com/ROCm/
 * amd_matrix_instruction_calculator, matrix_calculator.py: the gfx9 input and output register
 * layouts behind `--register-layout` / `--matrix-layout`, instruction table entries
 * v_mfma_f32_32x32x8f16, _32x32x8bf16_1k, _16x16x16f16, _16x16x16bf16_1k (CDNA2) and
 * _32x32x16_fp8_fp8 (CDNA3, "amd_fp8" = E4M3 fnuz), all single-block; CDNA4's 32x32x16 and
 * 16x16x32 f16/bf16 and OCP fp8 follow the same formulas with 8 k per lane) and the CDNA3 ISA guide's
 * chapter on matrix arithmetic instructions (MFMA operand and result layouts).  For the single-block
 * instructions kiln uses (CBSZ = ABID = BLGP = 0) they reduce to:
 *
 *   inputs, A (m x k) and B (k x n) alike (for B read "column j" for "row i"):
 *     each lane holds K_L = k / (64 / m) consecutive k's of one row;
 *     A[i][k] is in lane i + m * (k / K_L), element k % K_L of the lane's register group
 *     (element e of a 16-bit type is bits [16e%32 + 15 : 16e%32] of VGPR e/2; of fp8, byte e).
 *   outputs, C and D (m x n), f32:
 *     D[i][j] is in register (i / (4 * G)) * 4 + i % 4 of lane j + n * ((i / 4) % G), G = 64 / n:
 *     rows come in groups of 4 registers; the G lane groups of n lanes take turns.
 *
 * So for v_mfma_f32_32x32x8f16: A[i][k] in lane i + 32 * (k / 4), element k % 4; D[i][j] in lane
 * j + 32 * ((i / 4) % 2), register 4 * (i / 8) + i % 4.  These are written here from the
 * calculator's formulas, not shared with compiler/gpu/layout.c: the emulator checks kiln's tables
 * against them.
 *
 * Arithmetic.  Each product of two f16, bf16 or fp8 values is exact in double; the k products
 * and C are summed in long double (64-bit significand on x86-64) and rounded once to f32:
 * D = f32(C + sum of products).  AMD does not specify the order or the intermediate rounding of
 * the hardware's accumulation, so a correct kernel must not depend on them; rounding once is
 * within what kiln's attention tolerance already allows, and it is exact for the small-integer
 * matrices of the unit tests.
 *
 * DPP, ds_swizzle, ds_bpermute and ds_permute follow the pseudocode of the CDNA3 ISA guide
 * (sections "DPP" of the VOP encodings, and 12.12 "LDS instructions": DS_SWIZZLE_B32,
 * DS_PERMUTE_B32, DS_BPERMUTE_B32).  The emulator runs these only when all 64 lanes of the wave
 * take part (it reports divergent cross-lane operations instead), so EXEC is all ones here.
 */
#include <math.h>
#include <string.h>

#include "emu.h"
#include "numeric.h"

static const kn_emu_mfma_desc mfma_descs[KN_EMU_MFMA_COUNT] = {
    [KN_EMU_MFMA_32X32X8_F16] = {"v_mfma_f32_32x32x8f16", "llvm.amdgcn.mfma.f32.32x32x8f16", 32, 32,
                                 8, KN_F16, 4, 16, "gfx90a gfx942 gfx950"},
    [KN_EMU_MFMA_32X32X8_BF16] = {"v_mfma_f32_32x32x8bf16_1k", "llvm.amdgcn.mfma.f32.32x32x8bf16.1k",
                                  32, 32, 8, KN_BF16, 4, 16, "gfx90a gfx942 gfx950"},
    [KN_EMU_MFMA_16X16X16_F16] = {"v_mfma_f32_16x16x16f16", "llvm.amdgcn.mfma.f32.16x16x16f16", 16,
                                  16, 16, KN_F16, 4, 4, "gfx90a gfx942 gfx950"},
    [KN_EMU_MFMA_16X16X16_BF16] = {"v_mfma_f32_16x16x16bf16_1k",
                                   "llvm.amdgcn.mfma.f32.16x16x16bf16.1k", 16, 16, 16, KN_BF16, 4, 4,
                                   "gfx90a gfx942 gfx950"},
    [KN_EMU_MFMA_32X32X16_FP8] = {"v_mfma_f32_32x32x16_fp8_fp8", "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8",
                                  32, 32, 16, KN_F8E4M3FNUZ, 8, 16, "gfx942"},
    /* CDNA 4: the same single-block formulas with K_L = 8 k per lane (ISA guide, "MFMA" operand
     * layouts of the 16x16x32 and 32x32x16 shapes); fp8 in the OCP encoding */
    [KN_EMU_MFMA_32X32X16_F16] = {"v_mfma_f32_32x32x16_f16", "llvm.amdgcn.mfma.f32.32x32x16.f16",
                                  32, 32, 16, KN_F16, 8, 16, "gfx950"},
    [KN_EMU_MFMA_32X32X16_BF16] = {"v_mfma_f32_32x32x16_bf16", "llvm.amdgcn.mfma.f32.32x32x16.bf16",
                                   32, 32, 16, KN_BF16, 8, 16, "gfx950"},
    [KN_EMU_MFMA_16X16X32_F16] = {"v_mfma_f32_16x16x32_f16", "llvm.amdgcn.mfma.f32.16x16x32.f16",
                                  16, 16, 32, KN_F16, 8, 4, "gfx950"},
    [KN_EMU_MFMA_16X16X32_BF16] = {"v_mfma_f32_16x16x32_bf16", "llvm.amdgcn.mfma.f32.16x16x32.bf16",
                                   16, 16, 32, KN_BF16, 8, 4, "gfx950"},
    [KN_EMU_MFMA_32X32X16_FP8_OCP] = {"v_mfma_f32_32x32x16_fp8_fp8",
                                      "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8", 32, 32, 16, KN_F8E4M3,
                                      8, 16, "gfx950"},
};

/* is chip one of the space-separated names in chips? */
static bool has_chip(const char *chips, const char *chip) {
  size_t n = chip ? strlen(chip) : 0;
  for (const char *p = chips; n && (p = strstr(p, chip)); p += n)
    if ((p == chips || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return true;
  return false;
}

bool kn_emu_mfma_on_chip(kn_emu_mfma_kind kind, const char *chip) {
  return (unsigned)kind < KN_EMU_MFMA_COUNT && has_chip(mfma_descs[kind].chips, chip);
}

const kn_emu_mfma_desc *kn_emu_mfma_get(kn_emu_mfma_kind kind) {
  return (unsigned)kind < KN_EMU_MFMA_COUNT ? &mfma_descs[kind] : NULL;
}

int kn_emu_mfma_by_intrinsic(const char *name, const char *chip) {
  /* one intrinsic may mean different instructions on different chips (fp8: fnuz on gfx942, OCP
   * on gfx950); without a chip, the first */
  for (int i = 0; i < KN_EMU_MFMA_COUNT; i++)
    if (name && !strcmp(name, mfma_descs[i].intrinsic) && (!chip || has_chip(mfma_descs[i].chips, chip)))
      return i;
  return -1;
}

/* ---- the tables (single block: 64 = m * (k / K_L)) ---- */

static int k_per_lane(const kn_emu_mfma_desc *s) { return s->k / (64 / s->m); }

void kn_emu_mfma_a_loc(kn_emu_mfma_kind kind, int i, int k, int *lane, int *elem) {
  const kn_emu_mfma_desc *s = &mfma_descs[kind];
  int kl = k_per_lane(s);
  *lane = i + s->m * (k / kl);
  *elem = k % kl;
}

void kn_emu_mfma_b_loc(kn_emu_mfma_kind kind, int k, int j, int *lane, int *elem) {
  const kn_emu_mfma_desc *s = &mfma_descs[kind];
  int kl = k_per_lane(s);
  *lane = j + s->n * (k / kl);
  *elem = k % kl;
}

void kn_emu_mfma_acc_loc(kn_emu_mfma_kind kind, int i, int j, int *lane, int *reg) {
  const kn_emu_mfma_desc *s = &mfma_descs[kind];
  int groups = 64 / s->n;
  *reg = (i / (4 * groups)) * 4 + i % 4;
  *lane = j + s->n * ((i / 4) % groups);
}

void kn_emu_mfma_a_coord(kn_emu_mfma_kind kind, int lane, int elem, int *i, int *k) {
  const kn_emu_mfma_desc *s = &mfma_descs[kind];
  *i = lane % s->m;
  *k = (lane / s->m) * k_per_lane(s) + elem;
}

void kn_emu_mfma_b_coord(kn_emu_mfma_kind kind, int lane, int elem, int *k, int *j) {
  const kn_emu_mfma_desc *s = &mfma_descs[kind];
  *j = lane % s->n;
  *k = (lane / s->n) * k_per_lane(s) + elem;
}

void kn_emu_mfma_acc_coord(kn_emu_mfma_kind kind, int lane, int reg, int *i, int *j) {
  const kn_emu_mfma_desc *s = &mfma_descs[kind];
  int groups = 64 / s->n;
  *j = lane % s->n;
  *i = (reg / 4) * 4 * groups + (lane / s->n) * 4 + reg % 4;
}

/* ---- MFMA arithmetic ---- */

static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return h & 0x8000 ? -v : v;
}

static double bf16_value(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static double in_value(kn_scalar t, const uint8_t *p, int e) {
  if (t == KN_F16 || t == KN_BF16) {
    uint16_t h;
    memcpy(&h, p + 2 * e, 2);
    return t == KN_F16 ? f16_value(h) : bf16_value(h);
  }
  return kn_decode(t, p[e]);
}

void kn_emu_mfma_exec(kn_emu_mfma_kind kind, const void *const a[64], const void *const b[64],
                      const float *const c[64], float *const d[64], unsigned breaks) {
  const kn_emu_mfma_desc *s = &mfma_descs[kind];
  enum { MAXD = 32 * 32, MAXK = 32 };
  /* gather A (m x k), B (k x n) and C (m x n) through the tables */
  double A[32][MAXK], B[MAXK][32];
  float C[MAXD], D[MAXD];
  for (int l = 0; l < 64; l++)
    for (int e = 0; e < s->in_per_lane; e++) {
      int i, k, j;
      kn_emu_mfma_a_coord(kind, l, e, &i, &k);
      A[i][k] = in_value(s->in, a[l], e);
      kn_emu_mfma_b_coord(kind, l, e, &k, &j);
      B[k][j] = in_value(s->in, b[l], e);
    }
  for (int l = 0; l < 64; l++)
    for (int r = 0; r < s->acc_per_lane; r++) {
      int i, j;
      kn_emu_mfma_acc_coord(kind, l, r, &i, &j);
      C[i * s->n + j] = c[l][r];
    }
  for (int i = 0; i < s->m; i++)
    for (int j = 0; j < s->n; j++) {
      long double acc = C[i * s->n + j];
      for (int k = 0; k < s->k; k++) acc += (long double)(A[i][k] * B[k][j]);
      D[i * s->n + j] = (float)acc;
    }
  /* scatter D; the test-only break moves results one lane group over */
  int flip = (breaks & KN_EMU_BREAK_ACC_LANE) ? s->n : 0;
  for (int l = 0; l < 64; l++)
    for (int r = 0; r < s->acc_per_lane; r++) {
      int i, j;
      kn_emu_mfma_acc_coord(kind, l ^ flip, r, &i, &j);
      d[l][r] = D[i * s->n + j];
    }
}

/* ---- DPP ---- */

int kn_emu_dpp_exec(const uint32_t old[64], const uint32_t src[64], int ctrl, int row_mask,
                    int bank_mask, bool bound_ctrl, uint32_t out[64]) {
  for (int l = 0; l < 64; l++) {
    int row = l >> 4, r = l & 15, base = l & ~15;
    int from = -1;  /* -1: the source lane is out of range */
    if (ctrl >= 0x000 && ctrl <= 0x0ff) {
      from = (l & ~3) + ((ctrl >> (2 * (l & 3))) & 3);
    } else if (ctrl >= 0x101 && ctrl <= 0x10f) {        /* row_shl: read the lane n above */
      int n = ctrl & 15;
      from = r + n < 16 ? l + n : -1;
    } else if (ctrl >= 0x111 && ctrl <= 0x11f) {        /* row_shr: read the lane n below */
      int n = ctrl & 15;
      from = r - n >= 0 ? l - n : -1;
    } else if (ctrl >= 0x121 && ctrl <= 0x12f) {        /* row_ror: rotate right within the row */
      int n = ctrl & 15;
      from = base + ((r - n + 16) & 15);
    } else if (ctrl == 0x130) {                         /* wave_shl:1 */
      from = l + 1 < 64 ? l + 1 : -1;
    } else if (ctrl == 0x134) {                         /* wave_rol:1 */
      from = (l + 1) & 63;
    } else if (ctrl == 0x138) {                         /* wave_shr:1 */
      from = l - 1;
    } else if (ctrl == 0x13c) {                         /* wave_ror:1 */
      from = (l + 63) & 63;
    } else if (ctrl == 0x140) {                         /* row_mirror */
      from = base + 15 - r;
    } else if (ctrl == 0x141) {                         /* row_half_mirror */
      from = (l & ~7) + 7 - (l & 7);
    } else if (ctrl == 0x142) {                         /* row_bcast:15: lane 15 of the row below */
      from = row > 0 ? base - 1 : -1;
    } else if (ctrl == 0x143) {                         /* row_bcast:31: lane 31 to rows 2, 3 */
      from = row > 1 ? 31 : -1;
    } else {
      return -1;
    }
    bool enabled = ((row_mask >> row) & 1) && ((bank_mask >> ((l >> 2) & 3)) & 1);
    if (!enabled) out[l] = old[l];
    else if (from >= 0) out[l] = src[from];
    else out[l] = bound_ctrl ? 0 : old[l];
  }
  return 0;
}

/* ---- LDS-unit permutes ---- */

static int bit_reverse5(int x) {
  int r = 0;
  for (int b = 0; b < 5; b++) r |= ((x >> b) & 1) << (4 - b);
  return r;
}

int kn_emu_swizzle_exec(const uint32_t src[64], int offset, uint32_t out[64]) {
  offset &= 0xffff;
  for (int i = 0; i < 64; i++) {
    int j;
    if (offset >= 0xe000) {            /* FFT decomposition */
      int mask = offset & 31;
      j = bit_reverse5(i & 31) >> __builtin_popcount((unsigned)mask);
      j |= i & mask;
      j |= i & 32;
    } else if (offset >= 0xc000) {     /* rotate within 32 */
      int rot = (offset >> 5) & 31, mask = offset & 31;
      if (offset & (1 << 10)) rot = -rot;
      j = ((i & mask) | ((i + rot) & ~mask)) & 31;
      j |= i & 32;
    } else if (offset & 0x8000) {      /* full permute within groups of 4 */
      j = (i & ~3) + ((offset >> (2 * (i & 3))) & 3);
    } else {                           /* bit masks within groups of 32 */
      int and_m = offset & 31, or_m = (offset >> 5) & 31, xor_m = (offset >> 10) & 31;
      j = ((((i & 31) & and_m) | or_m) ^ xor_m) | (i & 32);
    }
    out[i] = src[j & 63];
  }
  return 0;
}

void kn_emu_bpermute_exec(const uint32_t addr[64], const uint32_t src[64], uint32_t out[64]) {
  for (int i = 0; i < 64; i++) out[i] = src[(addr[i] / 4u) % 64u];
}

void kn_emu_permute_exec(const uint32_t addr[64], const uint32_t src[64], uint32_t out[64]) {
  uint32_t tmp[64] = {0};
  for (int i = 0; i < 64; i++) tmp[(addr[i] / 4u) % 64u] = src[i];  /* later lanes win */
  memcpy(out, tmp, sizeof tmp);
}
