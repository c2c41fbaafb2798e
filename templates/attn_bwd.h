/* attn_bwd.h — the attention backward templates (FlashAttention 2) and their float64 reference.
 *
 * kn_attn_bwd_build() writes three kernels into a module from the forward's descriptor (the
 * backward of a variant is described by the descriptor its forward was built from) and a config:
 *   attn_bwd_pre    delta = rowsum(dO * O), f32 (B, H, Nq); grid (cdiv(Nq, BLOCK_M), B * H)
 *   attn_bwd_dkdv   one program per BLOCK_N keys of one (batch, kv head): loops over the query
 *                   heads of its group and their query blocks of BLOCK_M rows, recomputing P from
 *                   the forward's lse, and writes dK and dV (summed over the group: GQA/MQA);
 *                   grid (cdiv(Nk, BLOCK_N), B * HK)
 *   attn_bwd_dq     one program per BLOCK_N query rows of one (batch, head): loops over the key
 *                   blocks of BLOCK_M keys again and writes dQ; grid (cdiv(Nq, BLOCK_N), B * H)
 *                   (both kernels own BLOCK_N rows and step BLOCK_M: their dots have one pair
 *                   of shapes, BLOCK_N x BLOCK_M x D and BLOCK_N x D x BLOCK_M)
 * Every output element is written by exactly one program with a fixed order of sums: no atomics,
 * and results are bit-identical run to run.  Launched in that order (pre, then the other two,
 * which only read delta).
 * With the config's atomic_dq the dK/dV kernel also computes dQ^T = K^T dS^T per block pair and
 * adds it into the f32 workspace dq_acc with atomic adds (which attn_bwd_pre zeroes), and
 * attn_bwd_dq only scales and rounds those sums into dq: 5 dots per block pair instead of 7, the
 * order of dQ's sums (and so its last bits) left to the hardware; dK and dV stay deterministic.
 * Launched in the same order (pre, dK/dV, then dQ, which reads what dK/dV added).
 *
 * Kernel parameters (all three kernels take the same list; strides in elements, the head
 * dimension contiguous):
 *   q, k, v, o, do, dq, dk, dv   ptr<dtype>  q/o/do/dq (B, H, Nq, D), k/v/dk/dv (B, HK, Nk, D)
 *   lse, delta                   ptr<f32>    (B, H, Nq): the forward's natural-log lse; delta is
 *                                            a workspace the preprocess writes
 *   sm_scale f32; seqlen_q, seqlen_k, heads, kv_group i32
 *   the (batch, head, row) strides of q, k, v, o, do, dq, dk, dv and the (batch, head) strides
 *   of lse and delta, i64
 *   dq_acc                       ptr<f32>    atomic_dq's workspace: head_dim values per element of
 *                                            delta, in delta's layout (KN_ATTN_BWD_NPARAMS in all)
 * then the variant's parameters, as the forward's signature has them (kn_attn_signature).
 *
 * Variants: every mask (causal both ways, window, document, prefix, the user's @mask_mod) is
 * applied as in the forward; causal and window also bound the loops (blocks no live pair touches
 * are not visited).  Score modifiers (softcap, ALiBi, bias, the user's @score_mod) are
 * differentiated from their IR (kn_attn_mod_grad): the kernels apply dS * d(score_mod)/d(score).
 * Block predicates (@block_mask) only skip work in the forward; the backward applies the masks
 * without them.  Dropout (the descriptor's dropout, attention.h): the kernels regenerate the
 * forward's mask from the same dropout_seed / dropout_offset arguments.  Varlen (the
 * descriptor's layout KN_ATTN_VARLEN): the forward's packed buffers and its four parameters
 * first after the backward's own (cu_seqlens_q/k, max_seqlen_q/k; seqlen_q / seqlen_k the totals),
 * do/dq (total_q, H, D), dk/dv (total_k, HK, D), delta (H, total_q) as lse; the grids are the
 * max lengths', and a program past its sequence's end writes nothing.  Paged is refused.
 */
#ifndef KILN_ATTN_BWD_H
#define KILN_ATTN_BWD_H

#include "attention.h"

enum { KN_ATTN_BWD_NPARAMS = 44 };

/* the three kernels' names, in launch order */
enum { KN_BWD_PRE, KN_BWD_DKDV, KN_BWD_DQ, KN_BWD_NKERNELS };
extern const char *const kn_attn_bwd_kernels[KN_BWD_NKERNELS];

/* 0 when d and c are supported by the backward on arch (NULL: the host), else -1 with *diag */
int kn_attn_bwd_check_on(const kn_arch *arch, const kn_attn_desc *d, const kn_attn_config *c,
                         kn_diag *diag);
/* the default backward tiling for d on arch (NULL: the host): on sm_90a the wgmma tiling where
 * it was measured faster (dense, plain or causal, no dropout or other variant, f16 / bf16 at
 * padded head dims 64 and 128: 1.07-1.29x the mma.sync kernels on the H200, bench/RESULTS.md
 * 2026-12-03), else kn_attn_bwd_sync_config's */
kn_attn_config kn_attn_bwd_default_config(const kn_arch *arch, const kn_attn_desc *d);
/* the default tiling without wgmma: mma.sync (NVIDIA), MFMA (AMDGPU), the host's; what a forced
 * block_m / block_n or warps without wgmma starts from */
kn_attn_config kn_attn_bwd_sync_config(const kn_arch *arch, const kn_attn_desc *d);
/* the backward's wgmma tiling for d (sm_90a; kn_attn_bwd_check_on says where it does not
 * apply): block_n 64 with one warpgroup, block_m 64 at head dims up to 64 without dropout,
 * else 32 (the smallest S^T and dP^T tiles beside the two f32 accumulators: no spills) */
kn_attn_config kn_attn_bwd_wgmma_config(const kn_arch *arch, const kn_attn_desc *d);
/* sm_90a's wgmma tiling with atomic dQ (kn_attn_config.atomic_dq): block_n = warps x 16 = the
 * padded head dim (64 or 128: the rows of the dQ^T dot), block_m as kn_attn_bwd_wgmma_config */
kn_attn_config kn_attn_bwd_atomic_wgmma_config(const kn_arch *arch, const kn_attn_desc *d);
/* how dQ is summed: the default's choice, the separate deterministic pass, atomic adds */
enum { KN_BWD_DQ_DEFAULT = 0, KN_BWD_DQ_SEPARATE = 1, KN_BWD_DQ_ATOMIC = 2 };
/* the backward tiling a caller asks for, the one rule of kiln_prepare_backward and `kiln run
 * --backward`: wgmma's tiling when wgmma, else mma.sync's when sync or anything is forced, else
 * the default; dq (KN_BWD_DQ_*) SEPARATE turns an atomic default into wgmma's two-pass tiling,
 * ATOMIC turns a two-pass tiling into its atomic one (kn_attn_bwd_atomic_wgmma_config with
 * wgmma, else the first mma.sync / MFMA / host tiling that fits the third dot); then the forced
 * block_m / block_n / warps (0: not forced), and with wgmma a forced block_n without warps takes
 * one warpgroup per 64 rows (warps = block_n / 16) */
kn_attn_config kn_attn_bwd_config_for(const kn_arch *arch, const kn_attn_desc *d, bool wgmma,
                                      bool sync, int dq, int block_m, int block_n, int warps);
/* builds the three kernels into m (which may already hold d's modifier functions); -1 with *diag */
int kn_attn_bwd_build(kn_module *m, const kn_attn_desc *d, const kn_attn_config *c,
                      kn_diag *diag);

/* the buffers of one backward call (contiguous layouts for kn_attn_bwd_fill_args) */
typedef struct kn_attn_bwd_bufs {
  void *q, *k, *v, *o, *dout;   /* inputs: (B, H, Nq, D), (B, HK, Nk, D) x2, (B, H, Nq, D) x2 */
  float *lse;                   /* (B, H, Nq), the forward's */
  float *delta;                 /* (B, H, Nq) workspace */
  void *dq, *dk, *dv;           /* outputs */
  float *dq_acc;                /* atomic_dq: (B, H, Nq, D) f32 workspace (varlen (H, total_q,
                                   D)); else unused */
} kn_attn_bwd_bufs;

/* the backward signature of d: KN_ATTN_BWD_NPARAMS, then the variant's parameters */
int kn_attn_bwd_signature(const kn_attn_desc *d, kn_attn_sig *sig, kn_diag *diag);
/* the type of the backward's own parameter i (< KN_ATTN_BWD_NPARAMS) */
kn_type kn_attn_bwd_param_type(const kn_attn_desc *d, int i);
extern const char *const kn_attn_bwd_param_names[KN_ATTN_BWD_NPARAMS];

/* the arguments (sig->n of them, sig from kn_attn_bwd_signature) and the grid of each kernel for
 * contiguous buffers; -1 with *diag as kn_attn_fill_args */
int kn_attn_bwd_fill_args(const kn_attn_desc *d, const kn_attn_sig *sig, const kn_attn_config *c,
                          const kn_attn_problem *p, const kn_attn_bwd_bufs *b,
                          const kn_attn_vargs *va, kn_argval *out, int grid[KN_BWD_NKERNELS][3],
                          kn_diag *diag);

/* Float64 backward: dq, dk, dv of loss = sum(O * dO), O the attention of d (every modifier
 * evaluated by the interpreter in double; the derivative of the score modifiers by a central
 * difference, not from kn_attn_mod_grad, so the two are independent).  Contiguous layouts as
 * kn_attn_reference.  lowp: the same math with what the kernels round rounded to d's dtype (O,
 * P and dS before their products, the outputs), to measure the error low precision alone makes;
 * false: exact.  -1 with *diag when a modifier fails. */
int kn_attn_bwd_reference(const kn_attn_desc *d, kn_module *mods, const kn_attn_problem *p,
                          const kn_attn_vargs *va, const double *q, const double *k,
                          const double *v, const double *dout, bool lowp, double *dq,
                          double *dk, double *dv, kn_diag *diag);

/* The derivative of a score modifier with respect to its score, from its IR (forward mode):
 * a new function @<name>.grad in f's module, with f's parameters and two results (f's value,
 * d f / d score).  Ops the derivative goes through: add, sub, mul, div, neg, abs, max, min,
 * select, exp, exp2, log, log2, sqrt, rsqrt, tanh, float casts, and calls of functions it can
 * differentiate in turn; anything else the score reaches (an integer cast, a load at an address
 * computed from it, a comparison feeding a non-select use is fine) is -1 with *diag at the op. */
kn_func *kn_attn_mod_grad(kn_module *m, kn_func *f, kn_diag *diag);

/* absolute tolerances of dq/dk/dv (inputs ~ N(0,1), dO ~ N(0,1)); the rationale is in attn_bwd.c */
double kn_attn_bwd_tolerance(kn_scalar dtype);

#endif
