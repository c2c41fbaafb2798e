/* twin_args.h — what the HIP stand-in's runners share (test_api_hip.c, test_aot.c): the decoded
 * kernarg values (fake_hip.h: each zero-extended to 64 bits, in the metadata's order) as the
 * kn_argval of the kernel signature's parameters, for the emulated twin.  Every function is
 * static. */
#ifndef KILN_TWIN_ARGS_H
#define KILN_TWIN_ARGS_H

#include <stdint.h>
#include <string.h>

#include "attention.h"

static void twin_decode(const kn_attn_sig *sig, const uint64_t *values, kn_argval *args) {
  for (int i = 0; i < sig->n; i++) {
    kn_type ty = sig->type[i];
    uint64_t v = values[i];
    if (ty.kind == KN_TY_PTR) {
      args[i].p = (void *)(uintptr_t)v;
    } else if (ty.elem == KN_F32) {
      uint32_t b = (uint32_t)v;
      float f;
      memcpy(&f, &b, 4);
      args[i].f = f;
    } else if (ty.elem == KN_I32) {
      args[i].i = (int32_t)(uint32_t)v;
    } else {
      args[i].i = (int64_t)v;
    }
  }
}

#endif
