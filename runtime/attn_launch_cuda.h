/* attn_launch_cuda.h — launching the attention template's kernel through the CUDA driver.
 *
 * The template describes its 24 parameters as kn_argval values (templates/attention.h: pointers
 * in .p, sm_scale in .f as a double, integers in .i as int64); the driver's cuLaunchKernel wants
 * `kernelParams`, an array of pointers to each parameter's value in the width the PTX declares
 * (.u64 pointers, .f32, .u32 / .u64 integers).  This is the one place that translation lives:
 * the public API's CUDA path (api/), `kiln run --target sm_*` (tools/), the NVPTX tests and the
 * H200 benchmark all pack and launch through it.
 *
 * Why in runtime/ but in a small library of its own (kiln_attn_cuda): launches live in runtime/,
 * but this one needs the argument type of the IR layer (kn_argval, ir/interp.h) and the
 * template's parameter count besides the CUDA device (cuda_device.h), and kiln_cuda must stay
 * free of IR internals; the templates' library must not pull libdl and the driver loader into
 * every IR-only binary either.  It knows nothing of LLVM or of the compiler.
 *
 * The widths follow the template's parameter order (5 pointers, f32 sm_scale, 4 x i32, 14 x i64);
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
    float f;      /* sm_scale */
    int32_t i32;  /* seqlen_q, seqlen_k, heads, kv_group */
    int64_t i64;  /* strides */
  } vals[KN_ATTN_NPARAMS];
  void *params[KN_ATTN_NPARAMS];
} kn_attn_cuda_params;

/* the size in bytes of parameter i in the PTX signature (8, 4 or 0 for i out of range) */
int kn_attn_cuda_param_bytes(int i);

/* Packs args (kn_attn_fill_args' output, pointers being device addresses) into *out. */
void kn_attn_cuda_pack(const kn_argval *args, kn_attn_cuda_params *out);

/* The launch facts of a compiled attention kernel: exactly `threads` threads per block (the
 * PTX's .reqntid) and `smem_bytes` of dynamic shared memory. */
typedef struct kn_attn_cuda_launch_info {
  int threads;
  int64_t smem_bytes;
} kn_attn_cuda_launch_info;

/* Packs args and launches k over grid (kn_attn_fill_args' grid) on `stream` (NULL: the legacy
 * default stream); asynchronous, as kn_cuda_launch.  Grids the hardware cannot launch (a y
 * dimension above 65535, i.e. batch * heads too large) are KN_E_UNSUPPORTED with a message,
 * before the driver is asked.  Returns a kn_status; err (may be NULL) gets the message. */
kn_status kn_attn_cuda_launch(kn_cuda_kernel *k, const kn_attn_cuda_launch_info *li,
                              const kn_argval *args, const int grid[3], kn_cuda_stream stream,
                              kn_diag *err);

#endif
