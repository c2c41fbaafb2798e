/* lld_none.c — kn_amdgpu_link for builds without lld (KILN_LLVM_STATIC: lld's static archives
 * do not link against LLVM's static components yet, compiler/amdgpu/CMakeLists.txt says why).
 * Everything up to the relocatable object works; the link says clearly why it cannot. */
#include <stdio.h>

#include "amdgpu.h"

int kn_amdgpu_link(const void *obj, size_t n, void **out, size_t *out_n, char *err, size_t errn) {
  (void)obj;
  (void)n;
  *out = NULL;
  *out_n = 0;
  snprintf(err, errn, "this build of kiln has no AMDGPU linker (a static LLVM build links without "
           "lld); build against libLLVM-22.so for code objects");
  return -1;
}
