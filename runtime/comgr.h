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
 *
 * The kernels' metadata (arguments with offsets, sizes, value kinds and address spaces, hidden
 * ones included; kernarg segment size and alignment; LDS, scratch, workgroup size, registers)
 * is read by comgr likewise where it loads and can read the object
 * (amd_comgr_get_data_metadata and the metadata node API), else by kiln's MessagePack reader:
 * both fill the same kn_codeobj (codeobj.h, the one field table), so the launch path does not
 * care which did.  comgr 5.2.3 reads the metadata of kiln's v5 objects for gfx90a and gfx942
 * alike (docs/amdgpu.md "Pitfalls").
 */
#ifndef KILN_COMGR_H
#define KILN_COMGR_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>

#include "status.h"

/* the ISA name comgr reads from the code object (n bytes) into out; false (why in *why) when
 * comgr is absent or cannot read it */
bool kn_comgr_isa_name(const void *code, size_t n, char *out, size_t outn, kn_diag *why);

/* the library comgr was loaded from, or "" when it was not */
const char *kn_comgr_library(void);

struct kn_codeobj;

/* comgr's reader of the metadata (a kn_codeobj_meta_reader): -1 with *d when comgr is absent or
 * cannot read the object */
int kn_comgr_meta_reader(void *ctx, const void *data, size_t n, const uint8_t *note,
                         size_t note_n, struct kn_codeobj *co, kn_diag *d);

/* Reads code object data[0..n) into *co as kn_codeobj_read does (kiln's reader validates it
 * first: -1 with *d when it refuses the bytes), with the kernels' metadata from comgr where it
 * loads and reads it (co->meta_reader "comgr"), else from kiln's reader ("kiln", and *why says
 * why not comgr).  The caller frees *co with kn_codeobj_free. */
int kn_comgr_codeobj_read(const void *data, size_t n, struct kn_codeobj *co, kn_diag *why,
                          kn_diag *d);

/* kiln's own reading of a code object's target ID, from its ELF header: the chip
 * (EF_AMDGPU_MACH) and the xnack / sramecc settings of code object v4+ (EF_AMDGPU_FEATURE_*:
 * on or off; "any" and "unsupported" name no feature), "amdgcn-amd-amdhsa--gfx90a:xnack-" */
void kn_codeobj_target_id(const struct kn_codeobj *co, char *out, size_t n);

/* KN_OK when code object target ID `code` may run on a device of target ID `device` (the rule
 * above); KN_E_UNSUPPORTED naming the processor or the feature that differs */
kn_status kn_target_id_check(const char *code, const char *device, kn_diag *err);

#endif
