/* attn_launch_cuda.c — kn_argval -> cuLaunchKernel's kernelParams for the attention template,
 * and the launch (see attn_launch_cuda.h for why this file exists and where it sits).
 *
 * The parameter widths are a table indexed by the template's parameter order rather than a type
 * query on a built kernel: the launch path must not need the IR module (the API launches kernels
 * loaded from the cache, whose IR was never built in this process).  test_nvptx_attn checks the
 * table against kn_attn_fwd_build's signature, so a change of the template breaks a test, not a
 * launch.
 */
#include <stdio.h>
#include <string.h>

#include "attn_launch_cuda.h"

/* parameter kinds in template order (templates/attention.h) */
enum { PK_PTR, PK_F32, PK_I32, PK_I64 };
static const unsigned char kinds[KN_ATTN_NPARAMS] = {
    PK_PTR, PK_PTR, PK_PTR, PK_PTR, PK_PTR,   /* q, k, v, o, lse */
    PK_F32,                                   /* sm_scale */
    PK_I32, PK_I32, PK_I32, PK_I32,           /* seqlen_q, seqlen_k, heads, kv_group */
    PK_I64, PK_I64, PK_I64, PK_I64, PK_I64, PK_I64, PK_I64, /* q_sb .. v_sb */
    PK_I64, PK_I64, PK_I64, PK_I64, PK_I64, PK_I64, PK_I64, /* v_sh .. lse_sh */
};
_Static_assert(KN_ATTN_NPARAMS == 24, "the attention template's parameter list changed: update "
                                      "the kinds table");

int kn_attn_cuda_param_bytes(int i) {
  if (i < 0 || i >= KN_ATTN_NPARAMS) return 0;
  return kinds[i] == PK_F32 || kinds[i] == PK_I32 ? 4 : 8;
}

void kn_attn_cuda_pack(const kn_argval *args, kn_attn_cuda_params *out) {
  memset(out->vals, 0, sizeof out->vals);
  for (int i = 0; i < KN_ATTN_NPARAMS; i++) {
    switch (kinds[i]) {
    case PK_PTR: out->vals[i].p = (uint64_t)(uintptr_t)args[i].p; break;
    case PK_F32: out->vals[i].f = (float)args[i].f; break;
    case PK_I32: out->vals[i].i32 = (int32_t)args[i].i; break;
    default: out->vals[i].i64 = args[i].i; break;
    }
    out->params[i] = &out->vals[i];
  }
}

kn_status kn_attn_cuda_launch(kn_cuda_kernel *k, const kn_attn_cuda_launch_info *li,
                              const kn_argval *args, const int grid[3], kn_cuda_stream stream,
                              kn_diag *err) {
  /* CUDA's grid limits: x < 2^31, y and z <= 65535.  grid.y is batch * heads. */
  if (grid && grid[1] > 65535)
    return kn_diag_set(err, KN_E_UNSUPPORTED,
                       "attention launch: batch * heads = %d exceeds the CUDA grid's y limit "
                       "(65535)", grid[1]);
  if (!k || !li || !args || !grid || li->threads <= 0 || li->smem_bytes < 0 ||
      li->smem_bytes > INT32_MAX || grid[0] < 0 || grid[1] < 0 || grid[2] != 1)
    return kn_diag_set(err, KN_E_INVALID, "attention launch: bad arguments");
  kn_attn_cuda_params p;
  kn_attn_cuda_pack(args, &p);
  unsigned g3[3] = {(unsigned)grid[0], (unsigned)grid[1], (unsigned)grid[2]};
  unsigned b3[3] = {(unsigned)li->threads, 1, 1};
  return kn_cuda_launch(k, g3, b3, (unsigned)li->smem_bytes, stream, p.params, err);
}
