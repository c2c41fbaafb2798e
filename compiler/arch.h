/* arch.h — the one registry of kiln's targets: every fact about an architecture, in one table.
 *
 * An architecture (kn_arch) is everything the rest of kiln needs to know about a chip family to
 * compile for it, check what it compiled, find it at run time and tune on it: the LLVM triple,
 * CPU and features, the wave / warp width, the shared memory one program may use, the matrix
 * instructions (one kn_mma_instr table per architecture, in the order the layout pass prefers
 * them), the register and occupancy facts of AMDGPU chips, the compute capability NVIDIA code
 * needs, whether the AMDGPU emulator can run it, and the measured default tilings.  The layout
 * pass and the GPU lowering read the instruction table, the code-object inspector the occupancy
 * facts, discovery the names and compute capabilities, the tuner's space the instruction names
 * and the defaults, the command line the list.  Nothing else in kiln spells a target name.
 *
 * Adding a chip of a known ISA is one entry in arch.c (plus lane tables in compiler/gpu/layout.c
 * and emulator semantics in compiler/emu/wave_ops.c only for an instruction shape kiln has not
 * seen before).  The compile targets (compiler/target.h: what runs the pipeline's steps) are
 * made from these entries by compiler/targets.c, one per architecture, plus "<name>-emu" for
 * the AMDGPU ones the emulator can run.
 *
 * This file is pure data: no LLVM, no I/O; every library may link it (kiln_arch).
 */
#ifndef KILN_ARCH_H
#define KILN_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_isa {
  KN_ISA_HOST = 0,   /* the CPU kiln runs on (LLVM's native target) */
  KN_ISA_AMDGPU,     /* amdgcn-amd-amdhsa, wave64, MFMA */
  KN_ISA_NVPTX,      /* nvptx64-nvidia-cuda, warps of 32, mma.sync */
} kn_isa;

/* The lane tables of an instruction shape (compiler/gpu/layout.c keeps them): which elements of
 * A, B and the accumulator each lane holds.  Several instructions share one shape (f16 and bf16,
 * CDNA3 and CDNA4 spellings). */
typedef enum kn_mma_id {
  KN_MMA_MFMA_32X32X8,     /* wave64: 4 A / 4 B / 16 acc per lane */
  KN_MMA_MFMA_16X16X16,    /* wave64: 4 / 4 / 4 */
  KN_MMA_MFMA_32X32X16,    /* wave64: 8 / 8 / 16 (gfx942 fp8; gfx950 f16, bf16, fp8) */
  KN_MMA_MFMA_16X16X32,    /* wave64: 8 / 8 / 4 (gfx950 f16, bf16) */
  KN_MMA_NV_16X8X16,       /* mma.sync.m16n8k16: warp32, 8 A / 4 B / 4 acc */
  KN_MMA_NV_WG64,          /* wgmma.mma_async m64nNk16 (sm_90a): per warp of a warpgroup the
                            * m16n8k16 tables (A: 8 per k step; acc: 4 per 8 columns); B is read
                            * from shared memory through a descriptor, never from registers */
  KN_MMA_FMA_16X32,        /* no instruction: per-thread f32 FMAs over a 16x32 block per wave,
                            * k step 1 (f32 dots on AMDGPU): wave64, 2 A / 4 B / 8 acc */
  KN_MMA_FMA_16X16,        /* the same over a 16x16 block per warp of 32 (f32 dots on NVPTX):
                            * warp32, 2 A / 4 B / 8 acc */
  KN_MMA_FMA_16X16_W64,    /* the same over a 16x16 block per wave of 64 (f32 dots on AMDGPU
                            * whose n is not a multiple of 32: head dims 48, 80, ...; block_n
                            * 16): wave64, 2 A / 2 B / 4 acc */
  KN_MMA_COUNT
} kn_mma_id;

/* How the lowering hands a lane's operand elements to the intrinsic. */
typedef enum kn_mma_operands {
  KN_MMA_VEC = 0,       /* a vector of the element type (<4 x half>, <8 x bfloat>) */
  KN_MMA_VEC_I16,       /* a vector of i16 (the bf16 "_1k" MFMAs of CDNA 2/3) */
  KN_MMA_PACKED_I64,    /* 8 one-byte elements packed into an i64 (fp8 MFMAs) */
  KN_MMA_PAIRS_NV,      /* mma.sync: pairs of 16-bit elements per 32-bit register */
  KN_MMA_FMA,           /* no intrinsic: scalar FMAs (KN_MMA_FMA_16X32 and the others) */
  KN_MMA_WGMMA,         /* inline PTX wgmma.mma_async: A as four 32-bit pairs per k step, B as a
                         * 64-bit shared-memory matrix descriptor, the accumulator N/2 f32 */
} kn_mma_operands;

/* One matrix instruction of an architecture: D(m x n) = A(m x k) B(k x n) + C. */
typedef struct kn_mma_instr {
  const char *mnemonic;    /* as LLVM's disassembler spells it on this arch; NULL: none (FMA) */
  const char *intrinsic;   /* the LLVM intrinsic; NULL for KN_MMA_FMA */
  kn_mma_id shape;         /* lane tables */
  int m, n, k;
  kn_scalar a, b, acc;     /* operand and accumulator element types */
  kn_mma_operands operands;
  int cycles;              /* AMDGPU: issue-to-issue cycles of independent MFMAs (0: unknown) */
} kn_mma_instr;

/* AMDGPU register file, LDS and occupancy facts (compiler/amdgpu's occupancy model) */
typedef struct kn_amd_facts {
  unsigned elf_mach;       /* EF_AMDGPU_MACH_* in e_flags & 0xff */
  int simds_per_cu;        /* 4 */
  int max_waves_per_simd;  /* 8 */
  int vgprs_per_lane;      /* 512: the unified VGPR+AGPR file, per lane, per SIMD */
  int max_arch_vgprs;      /* 256 architectural VGPRs per wave */
  int max_agprs;           /* 256 accumulation VGPRs per wave */
  int vgpr_granule;        /* VGPRs are allocated in blocks of this many */
  int agpr_offset_align;   /* AGPRs start at the VGPR count rounded up to this */
  int max_sgprs;           /* addressable SGPRs per wave (VCC etc. come on top) */
  int lds_granule;         /* LDS allocation unit in bytes */
  int max_barriers_per_cu; /* multi-wave workgroups resident on one CU */
  /* the fourth dword of a raw buffer resource (V#) for dword loads: DATA_FORMAT 32 (bits
   * 15-18 = 4) on GFX9-family chips, without which the hardware reads nothing; the off32
   * loads' llvm.amdgcn.make.buffer.rsrc flags (compiler/gpu/lower_amdgpu.c) */
  unsigned buffer_word3;
} kn_amd_facts;

/* The default tiling for head dims up to max_head_dim (the first row that covers the head dim
 * wins; the template looks rows up by its padded head dim, a multiple of 16).  Measured per
 * architecture where a device was at hand (bench/RESULTS.md says where).  A row marked
 * unaligned is only for head dims whose rows are not 16-byte aligned (f16/bf16: 8 does not
 * divide D; f32: 4), whose K and V tiles cannot be copied in 16-byte chunks (NVPTX: no
 * cp.async) and go through registers; the other rows are for every head dim. */
typedef struct kn_arch_default {
  int max_head_dim;
  int block_m, block_n, warps;
  bool unaligned;
} kn_arch_default;

typedef struct kn_arch {
  const char *name;        /* what --target names; the LLVM CPU of GPU targets */
  kn_isa isa;
  const char *chip;        /* "CDNA 3 (MI300)", "Hopper (H100, H200)" */
  const char *triple;      /* NULL: the host's */
  const char *features;    /* LLVM target features ("+ptx80"); NULL: the host CPU's */
  int lanes;               /* wave / warp width; 1 on the host */
  int64_t shared_bytes;    /* LDS / shared memory one program may use; 0 on the host */
  const kn_mma_instr *mma; /* matrix instructions, preferred first for each operand type */
  int nmma;
  const kn_amd_facts *amd; /* AMDGPU only */
  int cc_major, cc_minor;  /* NVIDIA: the compute capability the code needs */
  bool cc_exact;           /* NVIDIA: runs only on exactly that capability ("a" targets) */
  bool emulated;           /* AMDGPU: the emulator runs it (target "<name>-emu") */
  const char *why_not_emulated; /* AMDGPU, when !emulated: the reason, for messages */
  const kn_arch_default *defaults; /* by head dim, ascending; the last row covers the rest */
  int ndefaults;
} kn_arch;

/* the registry itself (kn_archs[0] is the host), for static initialisers */
extern const kn_arch kn_archs[];
extern const int kn_narchs;
/* the registry: i-th architecture (NULL past the end), by name, by AMDGPU ELF machine */
const kn_arch *kn_arch_at(int i);
const kn_arch *kn_arch_get(const char *name);
const kn_arch *kn_arch_by_elf_mach(unsigned mach);
/* the host architecture */
const kn_arch *kn_arch_host(void);
/* "host", "AMDGPU", "NVPTX" */
const char *kn_isa_name(kn_isa isa);
/* What GPU code for a depends on besides its IR, as cache keys name it: "<name>;<triple>;
 * <features>;llvm-<llvm_version>" (name: the compile target's, "gfx942" or "gfx942-emu").  Pure
 * data plus the version of the LLVM that generates the code, so the API without a compiler
 * (libkiln_rt) computes the same keys as the compiler's kn_object_target_id. */
int kn_arch_code_id(const char *name, const kn_arch *a, const char *llvm_version, char *out,
                    size_t size);

/* The instruction a kernel whose dots take `a` operands uses: the first entry of arch's table
 * with operands of type a (and m == want_m when want_m is nonzero) that fits every dot
 * (fits(ctx, instr) true), or NULL.  With fits NULL: the first entry of that type. */
const kn_mma_instr *kn_arch_pick_mma(const kn_arch *arch, kn_scalar a, int want_m,
                                     bool (*fits)(void *ctx, const kn_mma_instr *i), void *ctx);
/* Does instruction i fit a dot of M x N x K run by `warps` warps stacked along M?  wgmma
 * (KN_MMA_WGMMA, m = 64 per warpgroup of 4 warps): exactly one 64-row slab per warpgroup
 * (M = 16 * warps, warps a multiple of 4), N a multiple of 8 up to 256, K of 16. */
bool kn_mma_fits(const kn_mma_instr *i, int M, int N, int K, int warps);
/* the default tiling row for head dim d on arch (never NULL); aligned: rows of that head dim
 * are 16-byte aligned (the rows marked unaligned are skipped) */
const kn_arch_default *kn_arch_default_for(const kn_arch *arch, int head_dim, bool aligned);

#ifdef __cplusplus
}
#endif
#endif
