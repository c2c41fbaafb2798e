/* emu.h — the emulated AMDGPU targets (gfx90a-emu, gfx942-emu): kiln's AMDGPU lowering run on the
 * CPU, with the few AMDGPU leaf operations implemented by a host runtime that has the hardware's
 * semantics.
 *
 * What is emulated and what is trusted (docs/emu.md has the whole story).  The emulated targets
 * take the LLVM module compiler/gpu produced for gfx90a / gfx942 *before* LLVM's AMDGPU code
 * generation: every layout, swizzle, barrier, mask, MFMA operand placement and LDS offset kiln
 * chose is in it.  An IR rewrite (rewrite.c) routes each leaf operation to this runtime — work-item
 * and workgroup ids, s_barrier, MFMA, DPP / ds_swizzle / ds_(b)permute / readlane, and every
 * load and store of LDS (addrspace 3) and global memory (addrspace 1) — and the module is JIT'ed
 * for the host.  Each lane of a workgroup then runs as a fiber (fiber.c); an operation that reads
 * other lanes is a rendezvous of the wave's 64 lanes, s_barrier one of the workgroup's lanes
 * (runtime.c).  Only LLVM's AMDGPU instruction selection is trusted.
 *
 * The hardware semantics live in wave_ops.c as pure functions over a wave's 64 lanes, so unit
 * tests can check them on hand-computed cases: the MFMA lane tables (taken from AMD's Matrix
 * Instruction Calculator, written independently of compiler/gpu's tables: the point is to check
 * kiln's tables against the hardware's), DPP, ds_swizzle, ds_bpermute / ds_permute.
 *
 * Errors are reported, never a hang or a crash: a barrier some waves never reach (or any state in
 * which no lane can make progress), lanes of a wave meeting at different cross-lane operations,
 * LDS accesses beyond the kernel's allocation or 64 KiB, LDS races between waves (an access to
 * bytes another wave wrote or read since the last barrier), misaligned accesses, and unmasked
 * global accesses outside the caller's buffers.  Each names the kernel, workgroup, wave, lane and
 * the operation.  The library never prints and never exits.
 */
#ifndef KILN_EMU_H
#define KILN_EMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "interp.h"    /* kn_argval, kn_region */
#include "pipeline.h"  /* kn_kernel */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kn_target kn_target;

/* ---- targets ------------------------------------------------------------------------------- */

/* "gfx90a-emu" or "gfx942-emu" -> the emulated target (compile with kn_compile, run with
 * kn_emu_run); NULL for any other name. */
const kn_target *kn_emu_target(const char *name);

/* Test-only perturbations of kiln's own decisions, applied by the emulated target so a test can
 * show that the numeric tests catch a broken layout decision.  Never set outside tests. */
enum {
  KN_EMU_BREAK_BARRIER = 1 << 0,   /* drop every s_barrier that directly follows LDS stores in
                                      its block: the barrier publishing a staged tile to the
                                      other waves goes missing */
  KN_EMU_BREAK_MFMA_AB = 1 << 1,   /* swap every MFMA's A and B operands (the transposition the
                                      lowering decided, inverted) */
  KN_EMU_BREAK_ACC_LANE = 1 << 2,  /* MFMA results land one lane-group off (lane ^ 32 for the
                                      32x32 shapes, ^ 16 for 16x16): kiln's accumulator table
                                      disagreeing with the hardware's */
  KN_EMU_BREAK_ALL = 7,
};
/* the target `name` with `breaks` (KN_EMU_BREAK_* bits) applied; NULL for an unknown name */
const kn_target *kn_emu_target_broken(const char *name, unsigned breaks);

/* ---- running --------------------------------------------------------------------------------- */

typedef struct kn_emu_stats {
  uint64_t workgroups;     /* workgroups run */
  uint64_t lanes;          /* fibers started */
  uint64_t switches;       /* fiber context switches */
  uint64_t wave_ops;       /* completed wave rendezvous (MFMA, cross-lane moves) */
  uint64_t mfmas;          /* of them, MFMAs */
  uint64_t barriers;       /* completed workgroup barriers */
  uint64_t lds_bytes;      /* LDS bytes loaded + stored */
  uint64_t global_bytes;   /* global bytes loaded + stored */
} kn_emu_stats;

typedef struct kn_emu_options {
  int threads;             /* worker threads for independent workgroups; 0: online CPUs */
  kn_emu_stats *stats;     /* filled when non-NULL */
} kn_emu_options;

/* Runs kernel k — compiled with kn_compile for an emulated target — over grid workgroups (axis 0
 * fastest).  args has one kn_argval per kernel parameter (as for the host target).  Every global
 * access a lane performs must lie inside one of regions[0..nregions) (regions == NULL: global
 * accesses are not checked).  opt may be NULL.  Returns 0, or -1 with the first error in *d; the
 * workgroups running when it occurs stop at once, no new ones start.  Thread-safe; kernels may
 * run concurrently.  A kernel compiled for another target must not be passed (kn_kernel does not
 * say which target it was compiled for). */
int kn_emu_run(kn_kernel *k, const kn_argval *args, const int grid[3], const kn_region *regions,
               int nregions, const kn_emu_options *opt, kn_diag *d);

/* Hand-written kernels (tests, experiments): LLVM IR text holding one amdgpu_kernel for
 * amdgcn-amd-amdhsa, written the way compiler/gpu lowers (llvm.amdgcn.* leaf intrinsics,
 * addrspace(1) global and addrspace(3) LDS pointers, amdgpu-flat-work-group-size "1,N" giving the
 * workgroup size N), rewritten, optimised and JIT'ed exactly like a lowered tile kernel. */
typedef struct kn_emu_ir_kernel kn_emu_ir_kernel;
int kn_emu_compile_ir(const char *llvm_ir, const char *arch, unsigned breaks, kn_emu_ir_kernel **out,
                      kn_diag *d);
int kn_emu_run_ir(kn_emu_ir_kernel *k, const kn_argval *args, const int grid[3],
                  const kn_region *regions, int nregions, const kn_emu_options *opt, kn_diag *d);
void kn_emu_ir_kernel_free(kn_emu_ir_kernel *k);

/* ---- the hardware's semantics, as pure functions over one wave (wave_ops.c) ------------------ */

typedef enum kn_emu_mfma_kind {
  KN_EMU_MFMA_32X32X8_F16,     /* v_mfma_f32_32x32x8f16 (gfx90a, gfx942) */
  KN_EMU_MFMA_32X32X8_BF16,    /* v_mfma_f32_32x32x8bf16_1k (gfx90a), _32x32x8_bf16 (gfx942) */
  KN_EMU_MFMA_16X16X16_F16,    /* v_mfma_f32_16x16x16f16 */
  KN_EMU_MFMA_16X16X16_BF16,   /* v_mfma_f32_16x16x16bf16_1k / _16x16x16_bf16 */
  KN_EMU_MFMA_32X32X16_FP8,    /* v_mfma_f32_32x32x16_fp8_fp8 (gfx942; fp8 = E4M3 "fnuz") */
  KN_EMU_MFMA_32X32X16_F16,    /* v_mfma_f32_32x32x16_f16 (gfx950) */
  KN_EMU_MFMA_32X32X16_BF16,   /* v_mfma_f32_32x32x16_bf16 (gfx950) */
  KN_EMU_MFMA_16X16X32_F16,    /* v_mfma_f32_16x16x32_f16 (gfx950) */
  KN_EMU_MFMA_16X16X32_BF16,   /* v_mfma_f32_16x16x32_bf16 (gfx950) */
  KN_EMU_MFMA_32X32X16_FP8_OCP, /* v_mfma_f32_32x32x16_fp8_fp8 (gfx950; fp8 = OCP E4M3) */
  KN_EMU_MFMA_COUNT
} kn_emu_mfma_kind;

typedef struct kn_emu_mfma_desc {
  const char *mnemonic;        /* as AMD's matrix instruction calculator names it */
  const char *intrinsic;       /* the LLVM intrinsic */
  int m, n, k;                 /* D (m x n) = A (m x k) * B (k x n) + C */
  kn_scalar in;                /* A and B element type */
  int in_per_lane;             /* A (and B) elements each lane holds */
  int acc_per_lane;            /* f32 registers of C/D per lane */
  const char *chips;           /* the chips that have it, space-separated */
} kn_emu_mfma_desc;

const kn_emu_mfma_desc *kn_emu_mfma_get(kn_emu_mfma_kind kind);
/* the kind whose intrinsic is `name` ("llvm.amdgcn.mfma.f32.32x32x8f16"), -1 when none */
int kn_emu_mfma_by_intrinsic(const char *name, const char *chip);
/* does chip ("gfx942") have the instruction? */
bool kn_emu_mfma_on_chip(kn_emu_mfma_kind kind, const char *chip);

/* Where the hardware keeps each element (the tables), and the inverse maps. */
void kn_emu_mfma_a_loc(kn_emu_mfma_kind kind, int i, int k, int *lane, int *elem);
void kn_emu_mfma_b_loc(kn_emu_mfma_kind kind, int k, int j, int *lane, int *elem);
void kn_emu_mfma_acc_loc(kn_emu_mfma_kind kind, int i, int j, int *lane, int *reg);
void kn_emu_mfma_a_coord(kn_emu_mfma_kind kind, int lane, int elem, int *i, int *k);
void kn_emu_mfma_b_coord(kn_emu_mfma_kind kind, int lane, int elem, int *k, int *j);
void kn_emu_mfma_acc_coord(kn_emu_mfma_kind kind, int lane, int reg, int *i, int *j);

/* One MFMA over a wave: a[l] / b[l] point at lane l's in_per_lane elements (raw bits: 2 bytes for
 * f16 / bf16, 1 for fp8, in register order), c[l] / d[l] at its acc_per_lane floats (d[l] may
 * equal c[l]).  Each D element is C plus the sum of the k products, computed exactly and rounded
 * once to f32 (the products of these formats are exact; the hardware's internal accumulation
 * order is unspecified, so kiln's tolerance must not depend on it).  breaks: KN_EMU_BREAK_*
 * (only KN_EMU_BREAK_ACC_LANE matters here). */
void kn_emu_mfma_exec(kn_emu_mfma_kind kind, const void *const a[64], const void *const b[64],
                      const float *const c[64], float *const d[64], unsigned breaks);

/* DPP move (v_mov_b32_dpp, llvm.amdgcn.update.dpp): out[l] = src of the lane dpp_ctrl selects, for
 * lanes whose row (row_mask bit l / 16) and bank (bank_mask bit (l / 4) % 4) are enabled; other
 * lanes keep old[l]; a lane whose source is out of range gets 0 when bound_ctrl, else keeps
 * old[l].  All 64 lanes active.  -1 for a dpp_ctrl value gfx9 does not define, else 0. */
int kn_emu_dpp_exec(const uint32_t old[64], const uint32_t src[64], int dpp_ctrl, int row_mask,
                    int bank_mask, bool bound_ctrl, uint32_t out[64]);
/* ds_swizzle_b32 with a 16-bit offset (quad permute, bit-mask, rotate and FFT modes) */
int kn_emu_swizzle_exec(const uint32_t src[64], int offset, uint32_t out[64]);
/* ds_bpermute_b32: out[l] = src[(addr[l] / 4) % 64] (all lanes active) */
void kn_emu_bpermute_exec(const uint32_t addr[64], const uint32_t src[64], uint32_t out[64]);
/* ds_permute_b32: out[(addr[l] / 4) % 64] = src[l], the highest source lane winning; lanes no
 * source selects get 0 */
void kn_emu_permute_exec(const uint32_t addr[64], const uint32_t src[64], uint32_t out[64]);

#ifdef __cplusplus
}
#endif
#endif
