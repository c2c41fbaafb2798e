/* attn_launch_cuda.h — launching the attention template's kernel through the CUDA driver.
 *
 * The template describes its parameters as kn_argval values (templates/attention.h: pointers in
 * .p, floats in .f as a double, integers in .i as int64): its own 24, then those of a variant's
 * modifiers (kn_attn_sig: window sizes, softcap, tensors, the user's parameters).  The driver's
 * cuLaunchKernel wants `kernelParams`, an array of pointers to each parameter's value in the
 * width the PTX declares (.u64 pointers, .f32, .u32 / .u64 integers).  This is the one place that translation lives:
 * the public API's CUDA path (api/), `kiln run --target sm_*` (tools/), the NVPTX tests and the
 * H200 benchmark all pack and launch through it.
 *
 * Why in runtime/ but in a small library of its own (kiln_attn_cuda): launches live in runtime/,
 * but this one needs the argument type of the IR layer (kn_argval, ir/interp.h) and the
 * template's parameter count besides the CUDA device (cuda_device.h), and kiln_cuda must stay
 * free of IR internals; the templates' library must not pull libdl and the driver loader into
 * every IR-only binary either.  It knows nothing of LLVM or of the compiler.
 *
 * The widths follow the kernel's signature (the template's own: 5 pointers, f32 sm_scale,
 * 4 x i32, 14 x i64; then the variant's, each i32, i64, f32 or a pointer);
 * kn_attn_cuda_param_bytes() exposes them so a test can check them against the built kernel's
 * signature (tests/unit/test_nvptx_attn.c does).
 */
#ifndef KILN_ATTN_LAUNCH_CUDA_H
#define KILN_ATTN_LAUNCH_CUDA_H

#include <stdint.h>

#include "attention.h"
#include "cuda_device.h"
#include "interp.h"

/* The driver's kernelParams for one launch: params[i] points at vals[i].  Keep the struct
 * alive (and unmoved) until cuLaunchKernel returns; the driver copies the values at launch. */
typedef struct kn_attn_cuda_params {
  union {
    uint64_t p;   /* device pointer */
    float f;      /* sm_scale, softcap, ... */
    int32_t i32;  /* seqlen_q, seqlen_k, heads, kv_group, window sizes, ... */
    int64_t i64;  /* strides */
  } vals[KN_ATTN_MAX_PARAMS];
  void *params[KN_ATTN_MAX_PARAMS];
  int n;
} kn_attn_cuda_params;

/* the size in bytes of parameter i of a kernel of signature sig (NULL: the template's own
 * KN_ATTN_NPARAMS) in the PTX: 8 (pointers, i64), 4 (f32, i32), or 0 for a type the launch does
 * not pass (i1, f16, ...) or i out of range */
int kn_attn_cuda_param_bytes(const kn_attn_sig *sig, int i);

/* Packs args (kn_attn_fill_args' output for signature sig, pointers being device addresses; sig
 * NULL: the template's own parameters) into *out.  0, or -1 when a parameter's type is none the
 * launch passes (kn_attn_cuda_param_bytes 0). */
int kn_attn_cuda_pack(const kn_attn_sig *sig, const kn_argval *args, kn_attn_cuda_params *out);

/* The launch facts of a compiled attention kernel: exactly `threads` threads per block (the
 * PTX's .reqntid) and `smem_bytes` of dynamic shared memory. */
typedef struct kn_attn_cuda_launch_info {
  int threads;
  int64_t smem_bytes;
} kn_attn_cuda_launch_info;

/* Packs args (for signature sig, NULL: the template's own) and launches k over grid
 * (kn_attn_fill_args' grid) on `stream` (NULL: the legacy default stream); asynchronous, as
 * kn_cuda_launch.  Grids the hardware cannot launch (a y dimension above 65535, i.e. batch *
 * heads too large) and parameters it cannot pass are KN_E_UNSUPPORTED with a message, before
 * the driver is asked.  Returns a kn_status; err (may be NULL) gets the message. */
kn_status kn_attn_cuda_launch(kn_cuda_kernel *k, const kn_attn_cuda_launch_info *li,
                              const kn_attn_sig *sig, const kn_argval *args, const int grid[3],
                              kn_cuda_stream stream, kn_diag *err);

#endif
