/* arch.c — the registry of architectures (arch.h): one entry per chip family kiln compiles for.
 *
 * Sources of the facts (numbers only, no code taken):
 *  - AMD Matrix Instruction Calculator (ROCm/amd_matrix_instruction_calculator) and the CDNA 2 /
 *    CDNA 3 / CDNA 4 ISA reference guides: MFMA shapes, operand types, cycle counts (a pass is 4
 *    cycles).  LLVM 22's IntrinsicsAMDGPU.td for the intrinsic names and operand types (the
 *    "_1k" bf16 forms take <N x i16>, the CDNA 4 bf16 forms <8 x bfloat>, fp8 an i64).
 *  - LLVM's AMDGPUUsage and AMDGPUBaseInfo (LLVM 22): 512 unified VGPR+AGPR per lane per SIMD on
 *    gfx90a and later, granule 8, AGPRs at align(vgpr, 4), 8 waves per SIMD, 102 SGPRs, 16
 *    barriers per CU; LDS 64 KiB in 128-dword blocks on gfx90a/gfx942, 160 KiB in 320-dword
 *    blocks on gfx950; EF_AMDGPU_MACH 0x3f / 0x4c / 0x4f.
 *  - CUDA programming guide, "Technical specifications per compute capability": 163 KiB of
 *    shared memory per block on 8.0, 227 KiB on 9.0; PTX ISA 7.0 is the first with sm_80, 8.0
 *    the first with sm_90a.
 *
 * gfx950 (CDNA 4) is here as the registry's proof: the CDNA 3 instructions plus 16x16x32 and
 * 32x32x16 f16/bf16 MFMAs (two new lane-table shapes) and fp8 in the OCP encoding (e4m3fn), with
 * 160 KiB of LDS.
 */
#include <stdio.h>
#include <string.h>

#include "arch.h"

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- matrix instructions ----------------------------------------------------------------- */

/* no matrix instruction: f32 dots as per-thread FMAs (compiler/gpu/layout.c, fma_16x32); where
 * a dot's n is not a multiple of 32 (head dims 48, 80, ... ; block_n 16), over 16x16 blocks
 * (fma_16x16_w64) */
#define FMA_F32                                                                               \
  {NULL, NULL, KN_MMA_FMA_16X32, 16, 32, 1, KN_F32, KN_F32, KN_F32, KN_MMA_FMA, 0},            \
  {NULL, NULL, KN_MMA_FMA_16X16_W64, 16, 16, 1, KN_F32, KN_F32, KN_F32, KN_MMA_FMA, 0}

/* CDNA 2: f16 and bf16 at 1024 flop/cycle/CU (64 cycles for 32x32x8) */
static const kn_mma_instr gfx90a_mma[] = {
    {"v_mfma_f32_32x32x8f16", "llvm.amdgcn.mfma.f32.32x32x8f16", KN_MMA_MFMA_32X32X8, 32, 32, 8,
     KN_F16, KN_F16, KN_F32, KN_MMA_VEC, 64},
    {"v_mfma_f32_32x32x8bf16_1k", "llvm.amdgcn.mfma.f32.32x32x8bf16.1k", KN_MMA_MFMA_32X32X8, 32,
     32, 8, KN_BF16, KN_BF16, KN_F32, KN_MMA_VEC_I16, 64},
    {"v_mfma_f32_16x16x16f16", "llvm.amdgcn.mfma.f32.16x16x16f16", KN_MMA_MFMA_16X16X16, 16, 16,
     16, KN_F16, KN_F16, KN_F32, KN_MMA_VEC, 32},
    {"v_mfma_f32_16x16x16bf16_1k", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k", KN_MMA_MFMA_16X16X16,
     16, 16, 16, KN_BF16, KN_BF16, KN_F32, KN_MMA_VEC_I16, 32},
    FMA_F32,
};

/* CDNA 3: the same instructions at twice the rate (the assembler drops "_1k" and adds an
 * underscore before the type), plus fp8 in AMD's "fnuz" encoding */
#define CDNA3_F16_BF16                                                                          \
  {"v_mfma_f32_32x32x8_f16", "llvm.amdgcn.mfma.f32.32x32x8f16", KN_MMA_MFMA_32X32X8, 32, 32, 8, \
   KN_F16, KN_F16, KN_F32, KN_MMA_VEC, 32},                                                     \
  {"v_mfma_f32_32x32x8_bf16", "llvm.amdgcn.mfma.f32.32x32x8bf16.1k", KN_MMA_MFMA_32X32X8, 32,  \
   32, 8, KN_BF16, KN_BF16, KN_F32, KN_MMA_VEC_I16, 32},                                        \
  {"v_mfma_f32_16x16x16_f16", "llvm.amdgcn.mfma.f32.16x16x16f16", KN_MMA_MFMA_16X16X16, 16, 16, \
   16, KN_F16, KN_F16, KN_F32, KN_MMA_VEC, 16},                                                 \
  {"v_mfma_f32_16x16x16_bf16", "llvm.amdgcn.mfma.f32.16x16x16bf16.1k", KN_MMA_MFMA_16X16X16,   \
   16, 16, 16, KN_BF16, KN_BF16, KN_F32, KN_MMA_VEC_I16, 16}

static const kn_mma_instr gfx942_mma[] = {
    CDNA3_F16_BF16,
    {"v_mfma_f32_32x32x16_fp8_fp8", "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8", KN_MMA_MFMA_32X32X16,
     32, 32, 16, KN_F8E4M3FNUZ, KN_F8E4M3FNUZ, KN_F32, KN_MMA_PACKED_I64, 32},
    FMA_F32,
};

/* CDNA 4: twice the k of CDNA 3's f16/bf16 shapes at the same issue rate (preferred), CDNA 3's
 * shapes still there, fp8 in the OCP encoding */
static const kn_mma_instr gfx950_mma[] = {
    {"v_mfma_f32_32x32x16_f16", "llvm.amdgcn.mfma.f32.32x32x16.f16", KN_MMA_MFMA_32X32X16, 32, 32,
     16, KN_F16, KN_F16, KN_F32, KN_MMA_VEC, 32},
    {"v_mfma_f32_32x32x16_bf16", "llvm.amdgcn.mfma.f32.32x32x16.bf16", KN_MMA_MFMA_32X32X16, 32,
     32, 16, KN_BF16, KN_BF16, KN_F32, KN_MMA_VEC, 32},
    {"v_mfma_f32_16x16x32_f16", "llvm.amdgcn.mfma.f32.16x16x32.f16", KN_MMA_MFMA_16X16X32, 16, 16,
     32, KN_F16, KN_F16, KN_F32, KN_MMA_VEC, 16},
    {"v_mfma_f32_16x16x32_bf16", "llvm.amdgcn.mfma.f32.16x16x32.bf16", KN_MMA_MFMA_16X16X32, 16,
     16, 32, KN_BF16, KN_BF16, KN_F32, KN_MMA_VEC, 16},
    CDNA3_F16_BF16,
    {"v_mfma_f32_32x32x16_fp8_fp8", "llvm.amdgcn.mfma.f32.32x32x16.fp8.fp8", KN_MMA_MFMA_32X32X16,
     32, 32, 16, KN_F8E4M3, KN_F8E4M3, KN_F32, KN_MMA_PACKED_I64, 32},
    FMA_F32,
};

/* NVIDIA: LLVM 22 names the f16 form by its D and C types (.f32.f32), the bf16 form .bf16 */
#define NV_MMA_SYNC                                                                            \
  {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "llvm.nvvm.mma.m16n8k16.row.col.f32.f32", \
   KN_MMA_NV_16X8X16, 16, 8, 16, KN_F16, KN_F16, KN_F32, KN_MMA_PAIRS_NV, 0},                  \
  {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "llvm.nvvm.mma.m16n8k16.row.col.bf16", \
   KN_MMA_NV_16X8X16, 16, 8, 16, KN_BF16, KN_BF16, KN_F32, KN_MMA_PAIRS_NV, 0}
/* no instruction: f32 dots as per-thread FMAs over 16x16 blocks per warp */
#define NV_FMA_F32 {NULL, NULL, KN_MMA_FMA_16X16, 16, 16, 1, KN_F32, KN_F32, KN_F32, KN_MMA_FMA, 0}

static const kn_mma_instr nv_mma[] = {NV_MMA_SYNC, NV_FMA_F32};

/* Hopper adds the warpgroup instruction wgmma.mma_async.m64nNk16 (PTX ISA 8.0, "Asynchronous
 * Warpgroup Level Matrix Multiply-Accumulate"): 4 warps, 64 rows, N = 8..256 per instruction,
 * B from shared memory.  LLVM 22 has no intrinsic for it (inline PTX, compiler/gpu/lower_gpu.c).
 * After mma.sync, so that kn_arch_pick_mma's first fit stays mma.sync; a kernel asks for it with
 * the meta key WGMMA (kn_attn_config.wgmma), which picks by m = 64.  The n of the entry is the
 * step of N, the lane tables' 8 columns. */
static const kn_mma_instr sm90_mma[] = {
    NV_MMA_SYNC,
    {"wgmma.mma_async.sync.aligned.m64nNk16.f32.f16.f16", NULL, KN_MMA_NV_WG64, 64, 8, 16,
     KN_F16, KN_F16, KN_F32, KN_MMA_WGMMA, 0},
    {"wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16", NULL, KN_MMA_NV_WG64, 64, 8, 16,
     KN_BF16, KN_BF16, KN_F32, KN_MMA_WGMMA, 0},
    NV_FMA_F32,
};

/* ---- AMDGPU register and LDS facts ------------------------------------------------------- */

static const kn_amd_facts gfx90a_facts = {
    .elf_mach = 0x3f, .simds_per_cu = 4, .max_waves_per_simd = 8, .vgprs_per_lane = 512,
    .max_arch_vgprs = 256, .max_agprs = 256, .vgpr_granule = 8, .agpr_offset_align = 4,
    .max_sgprs = 102, .lds_granule = 512, .max_barriers_per_cu = 16,
    .buffer_word3 = 0x00020000};
static const kn_amd_facts gfx942_facts = {
    .elf_mach = 0x4c, .simds_per_cu = 4, .max_waves_per_simd = 8, .vgprs_per_lane = 512,
    .max_arch_vgprs = 256, .max_agprs = 256, .vgpr_granule = 8, .agpr_offset_align = 4,
    .max_sgprs = 102, .lds_granule = 512, .max_barriers_per_cu = 16,
    .buffer_word3 = 0x00020000};
static const kn_amd_facts gfx950_facts = {
    .elf_mach = 0x4f, .simds_per_cu = 4, .max_waves_per_simd = 8, .vgprs_per_lane = 512,
    .max_arch_vgprs = 256, .max_agprs = 256, .vgpr_granule = 8, .agpr_offset_align = 4,
    .max_sgprs = 102, .lds_granule = 1280, .max_barriers_per_cu = 16,
    .buffer_word3 = 0x00020000};

/* ---- default tilings ------------------------------------------------------------------------
 * Every row up to D 256 must compile for every dtype (tests/unit/test_defaults.c compiles each;
 * above 256 kn_attn_check_on refuses f32 on GPUs and every NVIDIA tiling): on GPUs the
 * rows per warp (block_m / warps) must be a multiple of the matrix instruction's m.  Above
 * D 128 the Q tile, the accumulator and the K/V tiles of a 128-row block do not fit registers
 * and shared memory, so both block dims halve. */
static const kn_arch_default host_defaults[] = {{128, 128, 64, 4, false}, {256, 64, 32, 4, false}};
/* AMDGPU: 4 waves of 32 rows (one 32x32 MFMA row block per wave) up to D 128, the configuration
 * measured against Triton's in bench/RESULTS.md (no spills at D 128), except at padded head dim
 * 112, where it sits at 252-256 VGPRs and spilled at D 97 (gfx90a) and 112 (gfx950), and 8
 * waves (16 rows per wave) take 168; above D 128, 16 rows per wave (16x16 MFMAs) with 4 waves,
 * except at padded head dims 208 and 240, where that spilled 26-67 VGPRs on every chip (a wave
 * of a 4-wave workgroup has 256 registers: the kernel asks for 2 waves per SIMD) and 32x32 with
 * 2 waves (512 registers per lane) has none; above D 256 (f16 and bf16 only:
 * kn_attn_check_on), 32x16 with 2 waves, the largest block whose Q, K and V fit 64 KiB of LDS
 * and whose accumulator (128 registers per lane) fits a wave of a 2-wave workgroup.  The
 * exceptions and the rows above 256 are compile measurements (no VGPR spills on gfx90a, gfx942
 * and gfx950, f16 and bf16, causal or not, at the padded head dims and at D one above the
 * previous row), not timings: there is no AMD GPU */
static const kn_arch_default amd_defaults[] = {
    {96, 128, 64, 4, false}, {112, 128, 64, 8, false}, {128, 128, 64, 4, false},
    {192, 64, 32, 4, false}, {208, 32, 32, 2, false}, {224, 64, 32, 4, false},
    {240, 32, 32, 2, false}, {256, 64, 32, 4, false}, {512, 32, 16, 2, false}};
/* NVIDIA, measured on an H200 (bench/RESULTS.md, 2026-12-01, kiln_attn_bench --defaults: f16,
 * B4 H32 N 4096, 8 tilings per head dim): 128x64 with 4 warps is the fastest at D 64, 96 and 128
 * (8 warps were 1.27x slower at D 128 and 1.4-1.6x at D 96, even though 4 warps spill 12-28
 * bytes under ptxas at D 128); 64x64 with 4 warps above D 128 (1.06-1.14x faster than 64x32) */
static const kn_arch_default nv_defaults[] = {
    /* head dims whose rows are not 16-byte aligned (D 59, 111, 255): K and V are loaded into
     * registers and stored to shared memory (no cp.async), and the rows below spilled under
     * ptxas (sm_90a: 28-40 bytes at D 59, 96 at D 111, ~500 at D 255); these spill nothing or
     * a few words (compiled, not timed: docs/gpu.md), except at padded head dim 240 (D 225-239:
     * 200-252 bytes, as every tiling tried).  8 warps were slower than 4 at aligned D 96 and
     * 128 (above); whether they are here, against a few spilled words, is for an H200 to say */
    {128, 128, 64, 8, true}, {256, 64, 32, 4, true},
    {128, 128, 64, 4, false}, {256, 64, 64, 4, false}};

/* ---- the registry ------------------------------------------------------------------------- */

const kn_arch kn_archs[] = {
    {.name = "host", .isa = KN_ISA_HOST, .chip = "the host CPU", .lanes = 1,
     .defaults = host_defaults, .ndefaults = NELEM(host_defaults)},
    {.name = "gfx90a", .isa = KN_ISA_AMDGPU, .chip = "CDNA 2 (MI200)", .triple = "amdgcn-amd-amdhsa",
     .features = "", .lanes = 64, .shared_bytes = 65536, .mma = gfx90a_mma,
     .nmma = NELEM(gfx90a_mma), .amd = &gfx90a_facts, .emulated = true,
     .defaults = amd_defaults, .ndefaults = NELEM(amd_defaults)},
    {.name = "gfx942", .isa = KN_ISA_AMDGPU, .chip = "CDNA 3 (MI300)", .triple = "amdgcn-amd-amdhsa",
     .features = "", .lanes = 64, .shared_bytes = 65536, .mma = gfx942_mma,
     .nmma = NELEM(gfx942_mma), .amd = &gfx942_facts, .emulated = true,
     .defaults = amd_defaults, .ndefaults = NELEM(amd_defaults)},
    {.name = "gfx950", .isa = KN_ISA_AMDGPU, .chip = "CDNA 4 (MI350)", .triple = "amdgcn-amd-amdhsa",
     .features = "", .lanes = 64, .shared_bytes = 163840, .mma = gfx950_mma,
     .nmma = NELEM(gfx950_mma), .amd = &gfx950_facts, .emulated = true,
     .defaults = amd_defaults, .ndefaults = NELEM(amd_defaults)},
    {.name = "sm_80", .isa = KN_ISA_NVPTX, .chip = "Ampere and later (A100; PTX JIT-compiled "
     "for newer GPUs)", .triple = "nvptx64-nvidia-cuda", .features = "+ptx70", .lanes = 32,
     .shared_bytes = 166912, .mma = nv_mma, .nmma = NELEM(nv_mma), .cc_major = 8, .cc_minor = 0,
     .defaults = nv_defaults, .ndefaults = NELEM(nv_defaults)},
    {.name = "sm_90a", .isa = KN_ISA_NVPTX, .chip = "Hopper (H100, H200)",
     .triple = "nvptx64-nvidia-cuda", .features = "+ptx80", .lanes = 32, .shared_bytes = 232448,
     .mma = sm90_mma, .nmma = NELEM(sm90_mma), .cc_major = 9, .cc_minor = 0, .cc_exact = true,
     .defaults = nv_defaults, .ndefaults = NELEM(nv_defaults)},
};

const int kn_narchs = NELEM(kn_archs);

const kn_arch *kn_arch_at(int i) { return i >= 0 && i < NELEM(kn_archs) ? &kn_archs[i] : NULL; }

const kn_arch *kn_arch_host(void) { return &kn_archs[0]; }

const kn_arch *kn_arch_get(const char *name) {
  for (int i = 0; name && i < NELEM(kn_archs); i++)
    if (!strcmp(kn_archs[i].name, name)) return &kn_archs[i];
  return NULL;
}

const kn_arch *kn_arch_by_elf_mach(unsigned mach) {
  for (int i = 0; i < NELEM(kn_archs); i++)
    if (kn_archs[i].amd && kn_archs[i].amd->elf_mach == mach) return &kn_archs[i];
  return NULL;
}

const char *kn_isa_name(kn_isa isa) {
  switch (isa) {
  case KN_ISA_HOST: return "host";
  case KN_ISA_AMDGPU: return "AMDGPU";
  case KN_ISA_NVPTX: return "NVPTX";
  }
  return "?";
}

int kn_arch_code_id(const char *name, const kn_arch *a, const char *llvm_version, char *out,
                    size_t size) {
  int n = snprintf(out, size, "%s;%s;%s;llvm-%s", name, a->triple ? a->triple : "",
                   a->features ? a->features : "", llvm_version);
  return n >= 0 && (size_t)n < size ? 0 : -1;
}

bool kn_mma_fits(const kn_mma_instr *i, int M, int N, int K, int warps) {
  if (i->operands == KN_MMA_WGMMA)
    return warps % 4 == 0 && M == 16 * warps && N % 8 == 0 && N <= 256 && K % 16 == 0;
  return warps > 0 && M % warps == 0 && (M / warps) % i->m == 0 && N % i->n == 0 && K % i->k == 0;
}

const kn_mma_instr *kn_arch_pick_mma(const kn_arch *arch, kn_scalar a, int want_m,
                                     bool (*fits)(void *ctx, const kn_mma_instr *i), void *ctx) {
  for (int i = 0; arch && i < arch->nmma; i++) {
    const kn_mma_instr *in = &arch->mma[i];
    if (in->a != a || in->b != a || (want_m && in->m != want_m)) continue;
    if (!fits || fits(ctx, in)) return in;
  }
  return NULL;
}

const kn_arch_default *kn_arch_default_for(const kn_arch *arch, int head_dim, bool aligned) {
  if (!arch || !arch->ndefaults) arch = kn_arch_host();
  const kn_arch_default *last = NULL;
  for (int i = 0; i < arch->ndefaults; i++) {
    const kn_arch_default *r = &arch->defaults[i];
    if (aligned && r->unaligned) continue;
    if (head_dim <= r->max_head_dim) return r;
    last = r;
  }
  return last ? last : &arch->defaults[arch->ndefaults - 1];
}
