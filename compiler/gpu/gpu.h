/* gpu.h — kiln's GPU lowering: the layout pass, the shared-memory plan, the AMDGPU lowering and
 * targets, as one small internal interface of compiler/gpu.
 *
 * The layout pass (assign_layouts.c) leaves the tile IR untouched: it fills a side table,
 * value id -> layout, and a list of conversions, one per (user op, operand) whose value lives in
 * another layout than the user needs.  A conversion is free (a register renaming), staged
 * eagerly through LDS (store, barrier, every thread loads its new registers: used for values
 * defined outside the loop that uses them, such as Q), or staged lazily (the dot that uses the
 * operand reads each instruction's fragment from LDS when it issues it: K^T and V).  No
 * convert_layout op is needed in the IR; the conversions are the lowering's business.
 *
 * The shared-memory plan (plan_shared.c) gives every staged conversion an LDS buffer.  Every
 * staging starts with a barrier (no thread still reads the bytes from an earlier use) and ends
 * with one (every thread's stores are visible), so a buffer is live only from its stores to its
 * last read; buffers whose live ranges do not overlap share bytes.
 *
 * kn_gpu_test_breaks (layout.h, test-only: never set outside tests) makes the layout evaluation
 * or the lowering get one decision wrong on purpose (KN_GPU_BREAK_*).
 */
#ifndef KILN_GPU_H
#define KILN_GPU_H

#include <stdio.h>

#include <llvm-c/Types.h>

#include "ir.h"
#include "layout.h"
#include "target.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kn_conv_kind {
  KN_CONV_FREE,     /* register renaming (regmap) */
  KN_CONV_EAGER,    /* through LDS right after the value is defined */
  KN_CONV_LAZY,     /* dot operand: fragments read from LDS by the dot */
  KN_CONV_PERMUTE,  /* the operand of a reshape or transpose, through LDS by that op: stored at
                     * its row-major offsets (transpose: column-major), the result's registers
                     * read at theirs; dst is the result's layout, on the result's shape */
} kn_conv_kind;

/* How a lazily staged dot operand gets into shared memory (NVPTX only; AMDGPU is always
 * KN_STAGE_AT_DOT).  The cp.async kinds copy global memory straight into the shared layout
 * (16 bytes per copy, zero-filled past the load's bounds): the load itself produces no
 * registers, and its value has no other user.  In a loop with two or more streamed operands
 * (K^T, then V) the first is the *head*: its copy for the next iteration is issued at the last
 * streamed dot of this one, so it overlaps that dot and the softmax; the others are issued at
 * the first streamed dot, overlapping it (FlashAttention 2's schedule).  Where the head's
 * addresses cannot be recomputed for the next iteration (ASYNC_LEAD), all are issued at the
 * first streamed dot, which waits for its own copies only.  Each streamed buffer lives across
 * the whole loop.  Where the first streamed dots all read one other operand (a KV block read as
 * chunks, each chunk's K^T against Q: templates/attn_decode.c's pages loop) they are all heads,
 * issued together one iteration ahead. */
typedef enum kn_stage_kind {
  KN_STAGE_AT_DOT = 0,    /* registers -> shared at the dot (barrier, stores, barrier) */
  KN_STAGE_ONCE,          /* loop-invariant operand: registers -> shared once, right after
                           * its definition; the dots of the loop read fragments from it */
  KN_STAGE_ASYNC_AT_DOT,  /* cp.async at the dot, waited for at once (no overlap) */
  KN_STAGE_ASYNC_HEAD,    /* cp.async, one iteration ahead (prologue before the loop) */
  KN_STAGE_ASYNC_EARLY,   /* cp.async at the loop's first streamed dot */
  KN_STAGE_ASYNC_LEAD,    /* the first streamed dot of a loop that cannot issue the next
                           * iteration's copy early (its addresses are a tile of this
                           * iteration: a paged row gather): cp.async at this dot for itself
                           * and the loop's EARLY operands, waiting for its own only */
} kn_stage_kind;

typedef struct kn_conversion {
  kn_op *user;
  int opnd;               /* operand index in user */
  kn_value *value;
  const kn_layout *dst;
  kn_conv_kind kind;
  kn_layout shared;       /* eager / lazy: the LDS layout */
  int buffer;             /* eager / lazy: index into the plan's buffers */
  /* NVPTX, lazy dot operands: fragments read with ldmatrix (.trans when the shared layout's
   * contiguous dim is not the operand's k), from a 16-byte-chunk XOR-swizzled layout */
  bool ldsm;
  /* NVPTX, wgmma's B operand: never read into registers; the instruction reads it through a
   * matrix descriptor from wgmma's canonical swizzled layout (kn_layout_shared_wgmma) */
  bool desc;
  kn_stage_kind stage;
  kn_op *loop;            /* ONCE / ASYNC_*: the `for` whose iterations read the buffer */
  bool issue_head;        /* ASYNC_EARLY: this dot is the loop's last streamed one, where the
                           * heads' copies for the next iteration are issued */
  bool follow;            /* ASYNC_HEAD / ASYNC_EARLY of a loop with several heads: not the
                           * first of its kind, its copy landed with the first's (that dot
                           * waited for its group), so its dot waits for nothing */
  int same;               /* eager: 1 + the index of an earlier eager conversion of the same
                           * value to the same layout, whose registers this one reads (one
                           * conversion per value and layout: Q against several K chunks);
                           * 0: its own */
} kn_conversion;

typedef struct kn_lds_buffer {
  int conv;               /* the conversion it stages */
  int64_t bytes, offset;
  int first, last;        /* live range in op positions (program order) */
} kn_lds_buffer;

struct kn_layout_plan {
  kn_arena *arena;        /* layouts, tables (freed by kn_layout_plan_free) */
  kn_func *k;
  const kn_arch *arch;     /* the registry entry (compiler/arch.h) */
  const kn_mma_instr *instr; /* the kernel's matrix instruction (NULL without dots) */
  int warps;
  int nvalues;
  const kn_layout **lay;  /* per value id: its layout (tiles), NULL for scalars */
  int *pos;               /* per value id: position of its definition (op order) */
  int nconv;
  kn_conversion *conv;
  int nbuf;
  kn_lds_buffer *buf;
  int64_t lds_bytes;      /* total after reuse */
};

/* assign_layouts.c: the layout pass.  0, or -1 with *d (an op or shape the target cannot lay
 * out).  Free the plan with kn_layout_plan_free (also after a failure). */
int kn_assign_layouts(kn_func *k, const kn_arch *arch, kn_layout_plan *plan, kn_diag *d);
void kn_layout_plan_free(kn_layout_plan *plan);
/* finds the conversion of (user, opnd), or NULL when the operand is used as it is */
const kn_conversion *kn_plan_conversion(const kn_layout_plan *p, const kn_op *user, int opnd);

/* lower_gpu.c: a divisor every value of the scalar v is known to be a multiple of (constants,
 * multiple_of hints, sums and products of them); 1 when nothing is known */
long long kn_gpu_known_multiple(const kn_value *v);
/* lower_gpu.c: may a load/store access groups of v elements along dim contig as aligned vectors
 * (offset and bound along contig known multiples of v, no constant stride of another dim that
 * is not)? */
bool kn_gpu_vec_aligned(const kn_mem_operands *mo, int contig, int v);

/* gather.c: the axis along which a gather's offsets run in unit steps (base + position, the
 * base constant along it: a row gather), or -1; the layout pass anchors such a gather with a
 * blocked layout along that axis, as a load along its contiguous dim */
int kn_gpu_gather_axis(const kn_op *gather);
/* gather.c: the widest w <= maxvec (a power of two) such that groups of w elements along ax,
 * starting at multiples of w, are contiguous in memory, start at offsets that are multiples of
 * w, and share one mask value; 1 when nothing is known */
int kn_gpu_gather_vec(const kn_op *gather, int ax, int maxvec);

/* plan_shared.c: LDS buffers and offsets; -1 with *d (the plan printed) over the limit */
int kn_plan_shared(kn_layout_plan *plan, kn_diag *d);

/* the plan as text (stage "layout"): every tile value with its layout, the conversions and the
 * LDS buffers; malloc'd, the caller frees */
char *kn_layout_plan_format(const kn_layout_plan *plan);

/* lower_gpu.c: kernel k (verified, inlined) with its plan -> an LLVM module for the plan's
 * arch (AMDGPU or NVPTX, by arch->isa), with the arch's triple set */
int kn_lower_gpu(const kn_layout_plan *plan, LLVMContextRef ctx, LLVMModuleRef *out, kn_diag *d);

#ifdef __cplusplus
}
#endif
#endif
