/* codeobj.h — reading an AMDGPU code object without LLVM: the ELF headers, the metadata note
 * (kernels, their resources, their kernel arguments with offsets, sizes and value kinds, hidden
 * ones included), the kernel symbols, and the occupancy model of the registry's AMD chips.
 *
 * Library kiln_codeobj (codeobj.c, msgpack.c), which needs only the registry (kiln_arch) and the
 * IR's diagnostics: the compiler's inspector (amdgpu.h: kn_codeobj_parse adds the MFMA count from
 * LLVM's disassembler) and the HIP runtime (runtime/hip.c: kernarg packing from the metadata,
 * the target check before a load) both read code objects through it.  The metadata's fields are
 * one table (kn_codeobj_field_find) that kiln's MessagePack reader and the runtime's comgr
 * reader (runtime/comgr.c, through kn_codeobj_read_with) both fill a kn_codeobj from.
 */
#ifndef KILN_CODEOBJ_H
#define KILN_CODEOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- occupancy ------------------------------------------------------------------------------- */

/* How many waves of a kernel can be resident on one SIMD, and what limits it. */
typedef struct kn_amdgpu_occupancy {
  int unified_vgprs;  /* registers allocated per lane: vgpr rounded up to the granule */
  int by_vgpr;        /* waves per SIMD allowed by the register file */
  int by_sgpr;        /* ... by SGPRs */
  int by_lds;         /* ... by LDS and workgroup slots (for the given workgroup size) */
  int waves;          /* min of the above and max_waves_per_simd; 0: cannot launch */
} kn_amdgpu_occupancy;

/* vgpr, agpr and sgpr as the metadata note reports them: on gfx90a/gfx942 .vgpr_count is the
 * unified total align(arch VGPRs, 4) + AGPRs, and .agpr_count the AGPRs within it.  lds is in
 * bytes per workgroup, wg_size the work-items per workgroup (the kernel's
 * max_flat_workgroup_size when the launch size is not known).  Never fails: impossible inputs
 * give waves = 0. */
kn_amdgpu_occupancy kn_amdgpu_occupancy_of(const kn_arch *t, int vgpr, int agpr,
                                           int sgpr, uint32_t lds, int wg_size);

/* ---- the code object (codeobj.c) ----------------------------------------------------------- */

typedef struct kn_codeobj_arg {
  char name[64];          /* "" for hidden arguments */
  char value_kind[40];    /* "global_buffer", "by_value", "hidden_block_count_x", ... */
  uint32_t offset, size;
  bool hidden;
  char address_space[16]; /* "global", ... for pointers; "" when the note names none */
} kn_codeobj_arg;

typedef struct kn_codeobj_kernel {
  char name[128];
  char symbol[136];                 /* the kernel descriptor's symbol, "<name>.kd" */
  int vgpr_count;                   /* gfx90a/gfx942: align(arch VGPRs, 4) + AGPRs */
  int agpr_count, sgpr_count;       /* sgpr includes VCC, FLAT_SCRATCH, XNACK_MASK */
  int vgpr_spill_count, sgpr_spill_count;
  uint32_t lds_bytes;               /* .group_segment_fixed_size */
  uint32_t scratch_bytes;           /* .private_segment_fixed_size (spills, stack) */
  uint32_t kernarg_size, kernarg_align;
  uint32_t explicit_arg_bytes;      /* end of the last explicit argument */
  int wavefront_size, max_flat_workgroup_size;
  int uniform_work_group_size;      /* .uniform_work_group_size (1: whole workgroups only) */
  bool uses_dynamic_stack;
  int nargs, nhidden;
  kn_codeobj_arg *args;             /* nargs entries */
  uint64_t code_size;               /* the kernel symbol's st_size; 0 when not found */
  uint64_t code_offset;             /* file offset of its first instruction */
  int ninstr;                       /* instructions disassembled; -1 when not disassembled */
  int mfma_count;                   /* of them, mnemonics starting with v_mfma; -1 likewise */
  kn_amdgpu_occupancy occupancy;    /* for max_flat_workgroup_size; zero for unknown targets */
} kn_codeobj_kernel;

typedef struct kn_codeobj {
  int elf_type;                     /* ET_REL or ET_DYN */
  int abi_version;                  /* e_ident[EI_ABIVERSION]: 2 = v4, 3 = v5, 4 = v6 */
  int code_object_version;          /* 4, 5, 6 from abi_version; 0 when unknown */
  unsigned e_flags;
  int meta_version[2];              /* amdhsa.version (v5 and v6 both say 1.2) */
  char target_id[96];               /* amdhsa.target, e.g. "amdgcn-amd-amdhsa--gfx942" */
  const kn_arch *target;   /* from e_flags; NULL for a chip kiln does not describe */
  const char *meta_reader;          /* who read the metadata: "kiln" or "comgr" (static) */
  int nkernels;
  kn_codeobj_kernel *kernels;
} kn_codeobj;

/* Reads an AMDGPU ELF (relocatable or linked) from bytes: headers, the NT_AMDGPU_METADATA note,
 * the kernel symbols, and the occupancy each kernel's resources allow (known targets).  No
 * disassembly: ninstr and mfma_count are -1 (kn_codeobj_parse in amdgpu.h adds them).  Every
 * read is bounds-checked: a corrupt or truncated file gives -1 and *d, never a crash.  On
 * success the caller frees *co with kn_codeobj_free. */
int kn_codeobj_read(const void *data, size_t n, kn_codeobj *co, kn_diag *d);
void kn_codeobj_free(kn_codeobj *co);

/* A reader of the metadata note: fills co's meta_version, target_id, nkernels and kernels (their
 * fields of the note: name through uses_dynamic_stack, args, nargs, nhidden, explicit_arg_bytes;
 * kn_codeobj_field_set and kn_codeobj_kernel_done do the per-field work) and meta_reader, from the
 * note's bytes note[0..note_n) or from the whole object data[0..n) (comgr's reader, runtime/comgr.c).
 * 0, or -1 with *d; what it allocated is freed by kn_codeobj_free either way. */
typedef int (*kn_codeobj_meta_reader)(void *ctx, const void *data, size_t n, const uint8_t *note,
                                      size_t note_n, kn_codeobj *co, kn_diag *d);
/* kn_codeobj_read with the metadata read by `reader` (NULL: kiln's MessagePack reader); the ELF
 * headers, the kernel symbols and the occupancy are kiln's reading either way */
int kn_codeobj_read_with(const void *data, size_t n, kn_codeobj *co, kn_codeobj_meta_reader reader,
                         void *ctx, kn_diag *d);

/* The metadata fields kiln reads, one table for every reader: a kernel's (.vgpr_count, ...,
 * .kernarg_segment_size, ...) and an argument's (.name, .value_kind, .offset, ...).  A field is a
 * number ('i': int32 >= 0, 'u': uint32), a boolean ('b') or a string ('s'). */
typedef struct kn_codeobj_field {
  const char *key;
  char kind;
  size_t offset, size; /* in kn_codeobj_kernel or kn_codeobj_arg */
} kn_codeobj_field;
/* the field of the kernel (args false) or argument (args true) table named key; NULL if none */
const kn_codeobj_field *kn_codeobj_field_find(bool args, const char *key, size_t key_n);
/* stores a value into obj's field f: a number or boolean as num (str NULL), a string as
 * str[0..len), or a number written as a decimal string (comgr's way: "176", "0", "true");
 * false for a value of the wrong type or range */
bool kn_codeobj_field_set(const kn_codeobj_field *f, void *obj, uint64_t num, const char *str,
                          size_t len);
/* after a kernel's fields and arguments were read: the hidden flags, nhidden and
 * explicit_arg_bytes; false when the kernel has no name */
bool kn_codeobj_kernel_done(kn_codeobj_kernel *kn);
const kn_codeobj_kernel *kn_codeobj_find(const kn_codeobj *co, const char *name);

/* A readable table of co into buf (snprintf-like: returns the length it needed). */
int kn_codeobj_format_stats(const kn_codeobj *co, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
