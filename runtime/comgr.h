/* comgr.h — ROCm's code object manager (libamd_comgr), dlopen'ed where it is present, and the
 * target ID rule a code object must meet to load on a device.
 *
 * A target ID is "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-" (a code object's ISA name) or
 * "gfx942:sramecc+:xnack-" (a device's gcnArchName): the processor, then features with their
 * setting.  A code object runs on a device when the processors are equal and every feature the
 * code object sets (+ or -) is set the same way on the device; a feature the code object leaves
 * out means "any" (LLVM AMDGPUUsage, "Target ID").  kiln's own code objects set none.
 *
 * The runtime asks comgr for a code object's ISA name when libamd_comgr loads
 * ($KILN_COMGR_LIBRARY names it, "none" turns it off; else libamd_comgr.so.3, .so.2) and the
 * comgr knows the chip; otherwise kiln's own reader's (compiler/amdgpu/codeobj.c, the
 * amdhsa.target of the metadata) serves.  Debian 12's comgr 5.2 knows gfx90a but not gfx942.
 */
#ifndef KILN_COMGR_H
#define KILN_COMGR_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

/* the ISA name comgr reads from the code object (n bytes) into out; false (why in *why) when
 * comgr is absent or cannot read it */
bool kn_comgr_isa_name(const void *code, size_t n, char *out, size_t outn, kn_diag *why);

/* the library comgr was loaded from, or "" when it was not */
const char *kn_comgr_library(void);

/* kiln's own reading of a code object's target ID, from its ELF header: the chip
 * (EF_AMDGPU_MACH) and the xnack / sramecc settings of code object v4+ (EF_AMDGPU_FEATURE_*:
 * on or off; "any" and "unsupported" name no feature), "amdgcn-amd-amdhsa--gfx90a:xnack-" */
struct kn_codeobj;
void kn_codeobj_target_id(const struct kn_codeobj *co, char *out, size_t n);

/* KN_OK when code object target ID `code` may run on a device of target ID `device` (the rule
 * above); KN_E_UNSUPPORTED naming the processor or the feature that differs */
kn_status kn_target_id_check(const char *code, const char *device, kn_diag *err);

#endif
