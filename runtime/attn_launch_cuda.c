/* attn_launch_cuda.c — kn_argval -> cuLaunchKernel's kernelParams for the attention template,
 * and the launch (see attn_launch_cuda.h for why this file exists and where it sits).
 *
 * The parameter widths come from the kernel's signature (kn_attn_sig, which kiln_prepare keeps
 * with the kernel), not from a type query on a built kernel: the launch path must not need the
 * IR module (the API launches kernels loaded from the cache, whose IR was never built in this
 * process).  Without a signature, the template's own parameters (kn_attn_param_type).
 * test_nvptx_attn checks the widths against kn_attn_fwd_build's signatures, plain and variant,
 * so a change of the template breaks a test, not a launch.
 */
#include <stdio.h>
#include <string.h>

#include "attn_launch_cuda.h"

/* parameter i's type: the signature's, or the template's own */
static kn_type param_type(const kn_attn_sig *sig, int i) {
  if (sig) return sig->type[i];
  kn_attn_desc any = {.dtype = KN_F16}; /* the dtype changes only what pointers point at */
  return kn_attn_param_type(&any, i);
}

int kn_attn_cuda_param_bytes(const kn_attn_sig *sig, int i) {
  if (i < 0 || i >= (sig ? sig->n : KN_ATTN_NPARAMS)) return 0;
  kn_type t = param_type(sig, i);
  if (t.kind == KN_TY_PTR) return 8;
  if (t.kind != KN_TY_SCALAR) return 0;
  switch (t.elem) {
  case KN_F32: case KN_I32: return 4;
  case KN_I64: return 8;
  default: return 0; /* i1, f16, ...: not a kernel parameter the launch passes */
  }
}

int kn_attn_cuda_pack(const kn_attn_sig *sig, const kn_argval *args, kn_attn_cuda_params *out) {
  memset(out, 0, sizeof *out);
  out->n = sig ? sig->n : KN_ATTN_NPARAMS;
  for (int i = 0; i < out->n; i++) {
    kn_type t = param_type(sig, i);
    int bytes = kn_attn_cuda_param_bytes(sig, i);
    if (!bytes) return -1;
    if (t.kind == KN_TY_PTR) out->vals[i].p = (uint64_t)(uintptr_t)args[i].p;
    else if (t.elem == KN_F32) out->vals[i].f = (float)args[i].f;
    else if (bytes == 4) out->vals[i].i32 = (int32_t)args[i].i;
    else out->vals[i].i64 = args[i].i;
    out->params[i] = &out->vals[i];
  }
  return 0;
}

kn_status kn_attn_cuda_launch(kn_cuda_kernel *k, const kn_attn_cuda_launch_info *li,
                              const kn_attn_sig *sig, const kn_argval *args, const int grid[3],
                              kn_cuda_stream stream, kn_diag *err) {
  /* CUDA's grid limits: x < 2^31, y and z <= 65535.  grid.y is batch * heads. */
  if (grid && grid[1] > 65535)
    return kn_diag_set(err, KN_E_UNSUPPORTED,
                       "attention launch: batch * heads = %d exceeds the CUDA grid's y limit "
                       "(65535)", grid[1]);
  if (!k || !li || !args || !grid || li->threads <= 0 || li->smem_bytes < 0 ||
      li->smem_bytes > INT32_MAX || grid[0] < 0 || grid[1] < 0 || grid[2] != 1)
    return kn_diag_set(err, KN_E_INVALID, "attention launch: bad arguments");
  kn_attn_cuda_params p;
  if (kn_attn_cuda_pack(sig, args, &p))
    return kn_diag_set(err, KN_E_UNSUPPORTED, "attention launch: a kernel parameter's type is "
                       "none of i32, i64, f32 or a pointer");
  unsigned g3[3] = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
  unsigned b3[3] = {(unsigned)li->threads, 1, 1};
  return kn_cuda_launch(k, g3, b3, (unsigned)li->smem_bytes, stream, p.params, err);
}
