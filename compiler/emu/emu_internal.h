/* emu_internal.h — what the pieces of compiler/emu share: fibers, the kernel description the IR
 * rewrite embeds in the JIT'ed module, and the runtime entry points the rewritten code calls.
 *
 * The JIT'ed code reaches the runtime through absolute addresses baked into the module (the JIT
 * runs in this process), so no symbol needs to be exported by the executable.  Every runtime
 * entry point takes the id of its call site, which indexes kn_emu_info.sites for diagnostics.
 */
#ifndef KILN_EMU_INTERNAL_H
#define KILN_EMU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <llvm-c/Types.h>

#include "emu.h"

#if !defined(__x86_64__) || defined(KN_EMU_UCONTEXT)
#include <ucontext.h>
#endif

/* ---- fibers (fiber.c) ---- */

/* built with AddressSanitizer: fiber switches are announced to it (fiber.c) */
#if defined(__SANITIZE_ADDRESS__)
#define KN_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KN_EMU_ASAN 1
#endif
#endif

typedef struct kn_emu_fiber {
#if defined(__x86_64__) && !defined(KN_EMU_UCONTEXT)
  void *sp;
#else
  ucontext_t uc;
#endif
#ifdef KN_EMU_ASAN
  const void *stack;  /* its stack's lowest byte and size; the scheduler's (the thread's own) are */
  size_t stack_size;  /* learnt when it first switches away */
  void *fake_stack;   /* ASan's fake frames while switched away */
#endif
} kn_emu_fiber;

void kn_emu_fiber_init(kn_emu_fiber *f, void *stack, size_t size, void (*fn)(void *), void *arg);
void kn_emu_fiber_switch(kn_emu_fiber *from, kn_emu_fiber *to);
/* the first thing a fiber's function does (ASan learns that the switch into it ended) */
void kn_emu_fiber_begin(void);
#if !defined(__x86_64__) || defined(KN_EMU_UCONTEXT)
void kn_emu_fiber_entry(unsigned fh, unsigned fl, unsigned ah, unsigned al);
#endif
void *kn_emu_stack_new(size_t size);
void kn_emu_stack_free(void *stack, size_t size);

/* ---- the kernel description (an LLVM constant built by rewrite.c; keep the layouts equal) ---- */

#define KN_EMU_MAGIC 0x6b6e656d  /* "knem" */

typedef struct kn_emu_info {
  int32_t magic;
  int32_t wg_size;        /* work-items per workgroup: 64 * waves */
  int32_t lds_bytes;      /* the kernel's LDS allocation */
  int32_t lds_limit;      /* the chip's: 65536 */
  int32_t nsites;
  int32_t breaks;         /* KN_EMU_BREAK_* applied at run time */
  int32_t pad0, pad1;
  const char *kernel;     /* "attn_fwd" */
  const char *arch;       /* "gfx942" */
  const char *const *sites;          /* nsites descriptions, e.g. "s_barrier #2" */
  void (*lane)(const void *args);    /* runs one lane of the kernel */
  int32_t *status;        /* kiln_<name>.status (bit KN_EMU_STATUS_ERROR) */
} kn_emu_info;

/* set in kiln_<name>.status when a workgroup run outside kn_emu_run fails */
#define KN_EMU_STATUS_ERROR (1 << 16)

/* ---- runtime entry points called by the JIT'ed code (runtime.c) ---- */

enum { KN_EMU_AS_GLOBAL = 1, KN_EMU_AS_LDS = 3 };

void kn_emu_rt_workgroup(const kn_emu_info *info, const void *args, int32_t px, int32_t py,
                         int32_t pz, int32_t nx, int32_t ny, int32_t nz);
int32_t kn_emu_rt_workitem_id(void);
int32_t kn_emu_rt_workgroup_id(int32_t dim);
/* the workgroup's hidden kernel arguments (code object v5 layout; runtime.c says which) */
const void *kn_emu_rt_implicitarg(void);
uint32_t kn_emu_rt_mbcnt(int32_t hi, uint32_t mask, uint32_t acc);
uint32_t kn_emu_rt_readfirstlane(uint32_t v, int32_t site);
uint32_t kn_emu_rt_readlane(uint32_t v, int32_t lane, int32_t site);
uint32_t kn_emu_rt_bpermute(uint32_t addr, uint32_t v, int32_t site);
uint32_t kn_emu_rt_permute(uint32_t addr, uint32_t v, int32_t site);
uint32_t kn_emu_rt_swizzle(uint32_t v, int32_t pattern, int32_t site);
uint32_t kn_emu_rt_dpp(uint32_t old, uint32_t src, int32_t ctrl, int32_t row_mask,
                       int32_t bank_mask, int32_t bound_ctrl, int32_t site);
uint64_t kn_emu_rt_ballot(int32_t cond, int32_t site);
void kn_emu_rt_mfma(int32_t kind, const void *a, const void *b, float *cd, int32_t cbsz,
                    int32_t abid, int32_t blgp, int32_t site);
void kn_emu_rt_barrier(int32_t site);
void kn_emu_rt_load(int32_t as, uint64_t addr, void *dst, int32_t bytes, int32_t align,
                    int32_t site);
void kn_emu_rt_store(int32_t as, uint64_t addr, const void *src, int32_t bytes, int32_t align,
                     int32_t site);
/* global_atomic_add_f32: *addr += v atomically (checked as a global store of 4 bytes); ftz:
 * flush f32 denormal inputs and result to signed zero (gfx90a); returns the old value */
float kn_emu_rt_atomic_fadd(uint64_t addr, float v, int32_t align, int32_t ftz, int32_t site);

/* llvm.amdgcn.raw.ptr.buffer.load of `bytes` at voff (+ soff, which the range check leaves
 * out) through resource rsrc (the address of the lane's {base, stride, num_records, flags}) */
void kn_emu_rt_buffer_load(uint64_t rsrc, uint32_t voff, uint32_t soff, void *dst, int32_t bytes,
                           int32_t site);

/* kn_emu_run for the JIT'ed entry point kiln_<name> itself */
int kn_emu_run_entry(void *entry, const kn_argval *args, const int grid[3],
                     const kn_region *regions, int nregions, const kn_emu_options *opt, kn_diag *d);

/* ---- the IR rewrite (rewrite.c) ---- */

/* Rewrites a module lowered for amdgcn-amd-amdhsa (one amdgpu_kernel) into a host module that
 * defines kiln_<name> with the host kernel ABI (running one workgroup under emulation) and
 * kiln_<name>.status.  arch: "gfx90a" / "gfx942"; breaks: KN_EMU_BREAK_*.  -1 with *d when the
 * module uses something the emulator does not implement. */
int kn_emu_rewrite(LLVMModuleRef mod, const char *arch, int lds_limit, unsigned breaks, kn_diag *d);

#endif
