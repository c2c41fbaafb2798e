/* codeobj.c — read an AMDGPU code object back, without hardware: what the metadata note says
 * about each kernel (registers, spills, LDS, scratch, kernarg segment, arguments), how large its
 * code is, and the occupancy all that allows (the MFMA count, which needs LLVM's disassembler,
 * is added by kn_codeobj_parse in amdgpu_target.c).  No LLVM here (codeobj.h).
 *
 * Input is untrusted bytes (a cache entry, a file a user points at): every offset, size and
 * count is checked against the buffer before use, fields are read byte-wise in little-endian
 * order (no casts of unaligned pointers), and any inconsistency is an error with a message.
 * The note is MessagePack (code object v3 and later), read with msgpack.c.
 *
 * The code object version comes from the ELF header (e_ident[EI_ABIVERSION]: 2 = v4, 3 = v5,
 * 4 = v6), not from the note's amdhsa.version, which is 1.2 for both v5 and v6.  The target
 * comes from e_flags (EF_AMDGPU_MACH in the low byte); the note's amdhsa.target is reported as
 * written ("amdgcn-amd-amdhsa--gfx942" when sramecc and xnack are "any").
 */
#include <elf.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codeobj.h"
#include "msgpack.h"

#ifndef ELFOSABI_AMDGPU_HSA
#define ELFOSABI_AMDGPU_HSA 64
#endif
#define KN_NT_AMDGPU_METADATA 32   /* the note type of the MessagePack metadata (v3+) */
#define KN_EF_AMDGPU_MACH 0xffu

static const kn_loc co_loc = {"code object", 0, 0};

/* ---- occupancy ------------------------------------------------------------------------------------ */

static int align_up(int x, int a) { return (x + a - 1) / a * a; }
static int min_int(int a, int b) { return a < b ? a : b; }

kn_amdgpu_occupancy kn_amdgpu_occupancy_of(const kn_arch *t, int vgpr, int agpr,
                                           int sgpr, uint32_t lds, int wg_size) {
  kn_amdgpu_occupancy o = {0};
  if (!t || !t->amd || vgpr < 0 || agpr < 0 || sgpr < 0 || wg_size <= 0 || wg_size > 1024) return o;
  /* Registers.  On gfx90a and later VGPRs and AGPRs share one 512-entry file per lane; a wave's
   * AGPRs start at its VGPR count rounded up to 4, and the metadata's .vgpr_count is already
   * that total, align(arch, 4) + agpr (LLVM's TotalNumVgprs), so it is used as it is, rounded
   * up to the allocation granule. */
  if (agpr > t->amd->max_agprs || vgpr - agpr > t->amd->max_arch_vgprs || agpr > vgpr) return o;
  o.unified_vgprs = align_up(vgpr > 0 ? vgpr : 1, t->amd->vgpr_granule);
  if (o.unified_vgprs > t->amd->vgprs_per_lane) return o;
  o.by_vgpr = min_int(t->amd->max_waves_per_simd, t->amd->vgprs_per_lane / o.unified_vgprs);

  /* SGPRs: gfx9 steps.  The metadata's .sgpr_count adds the special registers (VCC,
   * FLAT_SCRATCH, XNACK_MASK: 6 more) to the up to 102 a kernel addresses, so a launchable
   * kernel reports up to 108; what lies above 100 gets the last step. */
  if (sgpr > t->amd->max_sgprs + 6) return o;
  o.by_sgpr = sgpr <= 80 ? 10 : sgpr <= 88 ? 9 : sgpr <= 100 ? 8 : 7;
  o.by_sgpr = min_int(o.by_sgpr, t->amd->max_waves_per_simd);

  /* LDS and workgroup slots: whole workgroups are resident on one CU, their waves spread over
   * its SIMDs; a workgroup of more than one wave also takes one of the CU's barriers. */
  int waves_per_wg = (wg_size + t->lanes - 1) / t->lanes;
  int wave_slots = t->amd->max_waves_per_simd * t->amd->simds_per_cu;
  int wgs = waves_per_wg > 1 ? min_int(wave_slots / waves_per_wg, t->amd->max_barriers_per_cu)
                             : wave_slots;
  if (lds > (uint32_t)t->shared_bytes) return o;
  if (lds > 0) {
    uint32_t rounded = (lds + (uint32_t)t->amd->lds_granule - 1) / (uint32_t)t->amd->lds_granule *
                       (uint32_t)t->amd->lds_granule;
    wgs = min_int(wgs, (int)((uint32_t)t->shared_bytes / rounded));
  }
  o.by_lds = min_int(t->amd->max_waves_per_simd, wgs * waves_per_wg / t->amd->simds_per_cu);

  o.waves = min_int(min_int(o.by_vgpr, o.by_sgpr), o.by_lds);
  /* a workgroup must fit at once: its waves need ceil(waves_per_wg / 4) slots on each SIMD */
  if (o.waves < (waves_per_wg + t->amd->simds_per_cu - 1) / t->amd->simds_per_cu) o.waves = 0;
  return o;
}

/* ---- bounds-checked little-endian reads ---- */

typedef struct elf_buf {
  const uint8_t *p;
  size_t n;
} elf_buf;

static bool in_bounds(const elf_buf *b, uint64_t off, uint64_t len) {
  return off <= b->n && len <= b->n - off;
}

static uint64_t rd(const elf_buf *b, uint64_t off, int bytes) {
  uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; k--) v = v << 8 | b->p[off + (uint64_t)k];
  return v;
}
#define RD(b, base, type, field) \
  rd((b), (base) + offsetof(type, field), (int)sizeof(((type *)0)->field))

typedef struct shdr {
  uint32_t name, type, link;
  uint64_t addr, offset, size;
} shdr;

typedef struct elf_file {
  elf_buf b;
  int type;
  uint64_t shoff;
  unsigned shnum;
} elf_file;

static int read_shdr(const elf_file *f, unsigned i, shdr *s, kn_diag *d) {
  uint64_t base = f->shoff + (uint64_t)i * sizeof(Elf64_Shdr);
  s->name = (uint32_t)RD(&f->b, base, Elf64_Shdr, sh_name);
  s->type = (uint32_t)RD(&f->b, base, Elf64_Shdr, sh_type);
  s->link = (uint32_t)RD(&f->b, base, Elf64_Shdr, sh_link);
  s->addr = RD(&f->b, base, Elf64_Shdr, sh_addr);
  s->offset = RD(&f->b, base, Elf64_Shdr, sh_offset);
  s->size = RD(&f->b, base, Elf64_Shdr, sh_size);
  if (s->type != SHT_NOBITS && s->type != SHT_NULL && !in_bounds(&f->b, s->offset, s->size))
    return kn_error(d, NULL, co_loc, "section %u lies outside the file (offset %llu, size %llu, "
                    "file %zu bytes)", i, (unsigned long long)s->offset,
                    (unsigned long long)s->size, f->b.n);
  return 0;
}

/* ---- the metadata note ---- */

static void copy_str(char *dst, size_t dn, const kn_mp_obj *o) {
  size_t n = o->type == KN_MP_STR && o->len < dn ? o->len : (o->type == KN_MP_STR ? dn - 1 : 0);
  memcpy(dst, o->str ? o->str : "", n);
  dst[n] = 0;
}

/* reads an integer value into *v; a value of another type is an error */
static bool mp_int(kn_mp *r, int32_t *v) {
  kn_mp_obj o;
  return kn_mp_read(r, &o) && kn_mp_as_int(&o, v);
}

/* ---- the fields (one table for kiln's reader and comgr's) ---- */

/* {in an argument?, metadata key, kind, the field's offset and size}: a kernel's fields (K,
 * kn_codeobj_kernel), then an argument's (A, kn_codeobj_arg) */
#define K(key, kind, f) {false, {key, kind, offsetof(kn_codeobj_kernel, f), \
                                 sizeof(((kn_codeobj_kernel *)0)->f)}}
#define A(key, kind, f) {true, {key, kind, offsetof(kn_codeobj_arg, f), \
                                sizeof(((kn_codeobj_arg *)0)->f)}}
static const struct {
  bool arg;
  kn_codeobj_field f;
} fields[] = {
    K(".name", 's', name),
    K(".symbol", 's', symbol),
    K(".vgpr_count", 'i', vgpr_count),
    K(".agpr_count", 'i', agpr_count),
    K(".sgpr_count", 'i', sgpr_count),
    K(".vgpr_spill_count", 'i', vgpr_spill_count),
    K(".sgpr_spill_count", 'i', sgpr_spill_count),
    K(".wavefront_size", 'i', wavefront_size),
    K(".max_flat_workgroup_size", 'i', max_flat_workgroup_size),
    K(".uniform_work_group_size", 'i', uniform_work_group_size),
    K(".group_segment_fixed_size", 'u', lds_bytes),
    K(".private_segment_fixed_size", 'u', scratch_bytes),
    K(".kernarg_segment_size", 'u', kernarg_size),
    K(".kernarg_segment_align", 'u', kernarg_align),
    K(".uses_dynamic_stack", 'b', uses_dynamic_stack),
    A(".name", 's', name),
    A(".value_kind", 's', value_kind),
    A(".address_space", 's', address_space),
    A(".offset", 'u', offset),
    A(".size", 'u', size),
};
#undef K
#undef A

const kn_codeobj_field *kn_codeobj_field_find(bool args, const char *key, size_t key_n) {
  for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
    if (fields[i].arg == args && strlen(fields[i].f.key) == key_n &&
        !memcmp(fields[i].f.key, key, key_n))
      return &fields[i].f;
  return NULL;
}

bool kn_codeobj_field_set(const kn_codeobj_field *f, void *obj, uint64_t num, const char *str,
                          size_t len) {
  char *dst = (char *)obj + f->offset;
  if (f->kind == 's') {
    if (!str) return false;
    size_t m = len < f->size ? len : f->size - 1;  /* (a longer name is cut, as before) */
    memcpy(dst, str, m);
    dst[m] = 0;
    return true;
  }
  if (str) { /* a number or boolean written as text */
    if (f->kind == 'b' && len == 4 && !memcmp(str, "true", 4)) num = 1;
    else if (f->kind == 'b' && len == 5 && !memcmp(str, "false", 5)) num = 0;
    else {
      if (len == 0 || len > 10) return false;
      num = 0;
      for (size_t i = 0; i < len; i++) {
        if (str[i] < '0' || str[i] > '9') return false;
        num = num * 10 + (uint64_t)(str[i] - '0');
      }
    }
  }
  if (f->kind == 'b') {
    if (num > 1) return false;
    *(bool *)(void *)dst = num != 0;
  } else {
    if (num > INT32_MAX) return false;
    if (f->kind == 'i') *(int32_t *)(void *)dst = (int32_t)num;
    else *(uint32_t *)(void *)dst = (uint32_t)num;
  }
  return true;
}

bool kn_codeobj_kernel_done(kn_codeobj_kernel *kn) {
  kn->nhidden = 0;
  kn->explicit_arg_bytes = 0;
  for (int a = 0; a < kn->nargs; a++) {
    kn_codeobj_arg *arg = &kn->args[a];
    arg->hidden = !strncmp(arg->value_kind, "hidden_", 7);
    if (arg->hidden) kn->nhidden++;
    else if (arg->offset + (uint64_t)arg->size > kn->explicit_arg_bytes)
      kn->explicit_arg_bytes = (uint32_t)(arg->offset + (uint64_t)arg->size);
  }
  return kn->name[0] != 0;
}

/* ---- the metadata note, kiln's reader (MessagePack) ---- */

/* one map of fields (a kernel's or an argument's) into obj; a kernel's .args into kn */
static bool parse_fields(kn_mp *r, bool args, void *obj, kn_codeobj_kernel *kn) {
  kn_mp_obj m, k, v;
  if (!kn_mp_read(r, &m) || m.type != KN_MP_MAP) return false;
  for (uint32_t i = 0; i < m.len; i++) {
    if (!kn_mp_read(r, &k) || k.type != KN_MP_STR) return false;
    const kn_codeobj_field *f = kn_codeobj_field_find(args, k.str, k.len);
    if (f) {
      if (!kn_mp_read(r, &v)) return false;
      bool num = v.type == KN_MP_UINT || (v.type == KN_MP_BOOL && f->kind == 'b');
      if ((f->kind == 's') != (v.type == KN_MP_STR) || (f->kind != 's' && !num) ||
          !kn_codeobj_field_set(f, obj, v.u, f->kind == 's' ? v.str : NULL, v.len))
        return false;
    } else if (!args && kn_mp_str_is(&k, ".args")) {
      if (!kn_mp_read(r, &v) || v.type != KN_MP_ARRAY) return false;
      /* each argument takes at least one byte: a larger count is corrupt (and no huge calloc) */
      if (kn->args || v.len > (size_t)(r->end - r->p)) return false;
      kn->args = calloc(v.len ? v.len : 1, sizeof *kn->args);
      if (!kn->args) return false;
      kn->nargs = (int)v.len;
      for (uint32_t a = 0; a < v.len; a++)
        if (!parse_fields(r, true, &kn->args[a], NULL)) return false;
    } else if (!kn_mp_skip(r)) {
      return false;
    }
  }
  return true;
}

static int parse_metadata(void *ctx, const void *data, size_t data_n, const uint8_t *p, size_t n,
                          kn_codeobj *co, kn_diag *d) {
  (void)ctx, (void)data, (void)data_n;
  kn_mp r;
  kn_mp_obj m, k, v;
  co->meta_reader = "kiln";
  kn_mp_init(&r, p, n);
  if (!kn_mp_read(&r, &m) || m.type != KN_MP_MAP)
    return kn_error(d, NULL, co_loc, "the AMDGPU metadata note is not a MessagePack map");
  bool have_kernels = false;
  for (uint32_t i = 0; i < m.len; i++) {
    if (!kn_mp_read(&r, &k)) goto corrupt;
    if (kn_mp_str_is(&k, "amdhsa.version")) {
      if (!kn_mp_read(&r, &v) || v.type != KN_MP_ARRAY || v.len != 2) goto corrupt;
      if (!mp_int(&r, &co->meta_version[0]) || !mp_int(&r, &co->meta_version[1])) goto corrupt;
    } else if (kn_mp_str_is(&k, "amdhsa.target")) {
      if (!kn_mp_read(&r, &v) || v.type != KN_MP_STR) goto corrupt;
      copy_str(co->target_id, sizeof co->target_id, &v);
    } else if (kn_mp_str_is(&k, "amdhsa.kernels")) {
      if (have_kernels || !kn_mp_read(&r, &v) || v.type != KN_MP_ARRAY) goto corrupt;
      if (v.len > (size_t)(r.end - r.p)) goto corrupt;
      have_kernels = true;
      co->kernels = calloc(v.len ? v.len : 1, sizeof *co->kernels);
      if (!co->kernels) return kn_error(d, NULL, co_loc, "out of memory");
      for (uint32_t j = 0; j < v.len; j++) {
        co->nkernels = (int)j + 1;  /* so that kn_codeobj_free frees a partial kernel's args */
        if (!parse_fields(&r, false, &co->kernels[j], &co->kernels[j]) ||
            !kn_codeobj_kernel_done(&co->kernels[j]))
          goto corrupt;
      }
    } else if (!kn_mp_skip(&r)) {
      goto corrupt;
    }
  }
  if (!have_kernels) return kn_error(d, NULL, co_loc, "the metadata note lists no kernels");
  return 0;
corrupt:
  return kn_error(d, NULL, co_loc, "corrupt AMDGPU metadata note (MessagePack, %zu bytes, "
                  "error near byte %zu)", n, (size_t)(r.p - p));
}

/* finds the NT_AMDGPU_METADATA note in the SHT_NOTE sections */
static int find_note(const elf_file *f, const uint8_t **desc, size_t *desc_n, kn_diag *d) {
  for (unsigned i = 0; i < f->shnum; i++) {
    shdr s;
    if (read_shdr(f, i, &s, d)) return -1;
    if (s.type != SHT_NOTE) continue;
    uint64_t off = s.offset, end = s.offset + s.size;
    while (end - off >= 12) {
      uint64_t namesz = rd(&f->b, off, 4), descsz = rd(&f->b, off + 4, 4);
      uint64_t type = rd(&f->b, off + 8, 4);
      uint64_t name_off = off + 12, desc_off = name_off + ((namesz + 3) & ~3ull);
      uint64_t next = desc_off + ((descsz + 3) & ~3ull);
      if (desc_off > end || descsz > end - desc_off)
        return kn_error(d, NULL, co_loc, "a note in section %u runs past its end", i);
      if (type == KN_NT_AMDGPU_METADATA && namesz == 7 &&
          !memcmp(f->b.p + name_off, "AMDGPU", 7)) {
        *desc = f->b.p + desc_off;
        *desc_n = (size_t)descsz;
        return 0;
      }
      if (next > end) break;
      off = next;
    }
  }
  return kn_error(d, NULL, co_loc, "no NT_AMDGPU_METADATA note (not an HSA code object v3+?)");
}

/* fills code_size / code_offset of each kernel from the symbol table (STT_FUNC, its name) */
static int find_code(const elf_file *f, kn_codeobj *co, kn_diag *d) {
  shdr symtab = {0};
  bool found = false;
  for (unsigned i = 0; i < f->shnum; i++) {
    shdr s;
    if (read_shdr(f, i, &s, d)) return -1;
    if (s.type == SHT_SYMTAB || (s.type == SHT_DYNSYM && !found)) {
      symtab = s;
      found = true;
    }
  }
  if (!found) return 0;  /* stripped: sizes stay 0 */
  if (symtab.link >= f->shnum)
    return kn_error(d, NULL, co_loc, "the symbol table's string table index is out of range");
  shdr strtab;
  if (read_shdr(f, symtab.link, &strtab, d)) return -1;
  if (strtab.type != SHT_STRTAB)  /* (only sections with contents were bounds-checked) */
    return kn_error(d, NULL, co_loc, "the symbol table's string table is not a string table");
  uint64_t nsym = symtab.size / sizeof(Elf64_Sym);
  for (uint64_t s = 0; s < nsym; s++) {
    uint64_t base = symtab.offset + s * sizeof(Elf64_Sym);
    uint64_t name = RD(&f->b, base, Elf64_Sym, st_name);
    unsigned info = (unsigned)RD(&f->b, base, Elf64_Sym, st_info);
    unsigned shndx = (unsigned)RD(&f->b, base, Elf64_Sym, st_shndx);
    uint64_t value = RD(&f->b, base, Elf64_Sym, st_value), size = RD(&f->b, base, Elf64_Sym, st_size);
    if (ELF64_ST_TYPE(info) != STT_FUNC || name >= strtab.size) continue;
    const char *nm = (const char *)f->b.p + strtab.offset + name;
    size_t maxlen = (size_t)(strtab.size - name);
    size_t len = strnlen(nm, maxlen);
    if (len == maxlen) continue;  /* not NUL-terminated inside the table */
    for (int k = 0; k < co->nkernels; k++) {
      kn_codeobj_kernel *kn = &co->kernels[k];
      if (strcmp(kn->name, nm)) continue;
      if (shndx == SHN_UNDEF || shndx >= f->shnum)
        return kn_error(d, NULL, co_loc, "kernel '%s' has no code section", kn->name);
      shdr text;
      if (read_shdr(f, shndx, &text, d)) return -1;
      if (text.type != SHT_PROGBITS)
        return kn_error(d, NULL, co_loc, "kernel '%s' is not in a section with code", kn->name);
      /* a relocatable object's symbol values are section offsets, a linked one's addresses */
      uint64_t rel = f->type == ET_REL ? value : value - text.addr;
      if ((f->type != ET_REL && value < text.addr) || rel > text.size || size > text.size - rel)
        return kn_error(d, NULL, co_loc, "kernel '%s' lies outside its section", kn->name);
      kn->code_offset = text.offset + rel;
      kn->code_size = size;
    }
  }
  return 0;
}

int kn_codeobj_read(const void *data, size_t n, kn_codeobj *co, kn_diag *d) {
  return kn_codeobj_read_with(data, n, co, NULL, NULL, d);
}

int kn_codeobj_read_with(const void *data, size_t n, kn_codeobj *co, kn_codeobj_meta_reader reader,
                         void *ctx, kn_diag *d) {
  memset(co, 0, sizeof *co);
  elf_file f = {.b = {data, n}};
  const elf_buf *b = &f.b;
  if (!data || n < sizeof(Elf64_Ehdr) || memcmp(b->p, ELFMAG, SELFMAG))
    return kn_error(d, NULL, co_loc, "not an ELF file (%zu bytes)", n);
  if (b->p[EI_CLASS] != ELFCLASS64 || b->p[EI_DATA] != ELFDATA2LSB)
    return kn_error(d, NULL, co_loc, "not a 64-bit little-endian ELF file");
  if (RD(b, 0, Elf64_Ehdr, e_machine) != EM_AMDGPU)
    return kn_error(d, NULL, co_loc, "not an AMDGPU ELF file (e_machine %u)",
                    (unsigned)RD(b, 0, Elf64_Ehdr, e_machine));
  if (b->p[EI_OSABI] != ELFOSABI_AMDGPU_HSA)
    return kn_error(d, NULL, co_loc, "not an HSA code object (OS ABI %u)", b->p[EI_OSABI]);
  co->abi_version = b->p[EI_ABIVERSION];
  co->code_object_version = co->abi_version >= 2 && co->abi_version <= 4 ? co->abi_version + 2 : 0;
  co->elf_type = (int)RD(b, 0, Elf64_Ehdr, e_type);
  co->e_flags = (unsigned)RD(b, 0, Elf64_Ehdr, e_flags);
  co->target = kn_arch_by_elf_mach(co->e_flags & KN_EF_AMDGPU_MACH);
  if (co->elf_type != ET_REL && co->elf_type != ET_DYN)
    return kn_error(d, NULL, co_loc, "ELF type %d is neither a relocatable object nor a shared "
                    "object", co->elf_type);

  f.type = co->elf_type;
  f.shoff = RD(b, 0, Elf64_Ehdr, e_shoff);
  f.shnum = (unsigned)RD(b, 0, Elf64_Ehdr, e_shnum);
  unsigned shentsize = (unsigned)RD(b, 0, Elf64_Ehdr, e_shentsize);
  if (f.shnum == 0 || shentsize != sizeof(Elf64_Shdr) ||
      !in_bounds(b, f.shoff, (uint64_t)f.shnum * sizeof(Elf64_Shdr)))
    return kn_error(d, NULL, co_loc, "section header table missing or outside the file "
                    "(offset %llu, %u entries of %u bytes, file %zu bytes)",
                    (unsigned long long)f.shoff, f.shnum, shentsize, n);

  const uint8_t *note = NULL;
  size_t note_n = 0;
  if (find_note(&f, &note, &note_n, d) ||
      (reader ? reader : parse_metadata)(ctx, data, n, note, note_n, co, d) ||
      find_code(&f, co, d)) {
    kn_codeobj_free(co);
    return -1;
  }

  for (int k = 0; k < co->nkernels; k++) {
    kn_codeobj_kernel *kn = &co->kernels[k];
    kn->ninstr = kn->mfma_count = -1;
    if (!co->target) continue;
    kn->occupancy = kn_amdgpu_occupancy_of(co->target, kn->vgpr_count, kn->agpr_count,
                                           kn->sgpr_count, kn->lds_bytes,
                                           kn->max_flat_workgroup_size);
  }
  return 0;
}

void kn_codeobj_free(kn_codeobj *co) {
  if (!co) return;
  for (int k = 0; co->kernels && k < co->nkernels; k++) free(co->kernels[k].args);
  free(co->kernels);
  memset(co, 0, sizeof *co);
}

const kn_codeobj_kernel *kn_codeobj_find(const kn_codeobj *co, const char *name) {
  for (int k = 0; co && k < co->nkernels; k++)
    if (!strcmp(co->kernels[k].name, name)) return &co->kernels[k];
  return NULL;
}

/* ---- the stats table ---- */

typedef struct sbuf {
  char *p;
  size_t cap, len;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = s->len < s->cap ? s->cap - s->len : 0;
  int w = vsnprintf(room ? s->p + s->len : NULL, room, fmt, ap);
  va_end(ap);
  if (w > 0) s->len += (size_t)w;
}

int kn_codeobj_format_stats(const kn_codeobj *co, char *buf, size_t n) {
  sbuf s = {buf, n, 0};
  if (buf && n) buf[0] = 0;
  put(&s, "code object: %s, v%d (ELF ABI version %d), metadata %d.%d, target %s",
      co->elf_type == ET_DYN ? "ET_DYN" : co->elf_type == ET_REL ? "ET_REL" : "?",
      co->code_object_version, co->abi_version, co->meta_version[0], co->meta_version[1],
      co->target_id[0] ? co->target_id : "?");
  if (co->target) put(&s, " (%s)", co->target->chip);
  put(&s, "\n%-24s %5s %5s %5s %5s %7s %6s %7s %7s %8s %4s %6s %6s %5s  %s\n", "kernel", "vgpr",
      "agpr", "regs", "sgpr", "spill", "lds", "scratch", "kernarg", "args", "wg", "code", "instr",
      "mfma", "waves/SIMD (vgpr sgpr lds)");
  for (int k = 0; k < co->nkernels; k++) {
    const kn_codeobj_kernel *kn = &co->kernels[k];
    char spill[24], args[24];
    snprintf(spill, sizeof spill, "%d/%d", kn->vgpr_spill_count, kn->sgpr_spill_count);
    snprintf(args, sizeof args, "%d(%dh)", kn->nargs, kn->nhidden);
    put(&s, "%-24s %5d %5d %5d %5d %7s %6u %7u %7u %8s %4d %6llu %6d %5d  %d (%d %d %d)\n",
        kn->name, kn->vgpr_count, kn->agpr_count, kn->occupancy.unified_vgprs, kn->sgpr_count,
        spill, kn->lds_bytes, kn->scratch_bytes, kn->kernarg_size, args,
        kn->max_flat_workgroup_size, (unsigned long long)kn->code_size, kn->ninstr,
        kn->mfma_count, kn->occupancy.waves, kn->occupancy.by_vgpr, kn->occupancy.by_sgpr,
        kn->occupancy.by_lds);
  }
  return s.len > (size_t)INT32_MAX ? INT32_MAX : (int)s.len;
}
