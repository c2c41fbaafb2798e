/* bundle.h — ahead-of-time bundles: clang offload bundles of AMDGPU code objects, and the index
 * of a bundle directory (which kernel serves which descriptor).  No LLVM, no IR, no compiler:
 * this is what a runtime without the compiler (kiln_rt) reads, and what `kiln aot` writes.
 *
 * Offload bundles (LLVM's ClangOffloadBundler, the uncompressed binary format that
 * hipModuleLoadData takes natively):
 *
 *   "__CLANG_OFFLOAD_BUNDLE__"           24 bytes, the magic
 *   number of entries                    u64 little-endian
 *   per entry: offset u64, size u64, id length u64, id (no NUL)
 *   the code objects, each at its offset (kiln aligns them to 4096, as clang's HIP driver does)
 *
 * An entry id is "<kind>-<triple>-<target id>": kiln writes "host-x86_64-unknown-linux-gnu-"
 * (empty, as clang does) and one "hipv4-amdgcn-amd-amdhsa--<chip>" per code object.  The reader
 * checks every field against the file's size before it trusts it: a truncated or damaged bundle
 * is an error naming what is wrong, never a read outside the bytes.
 *
 * The index (docs/aot.md has the whole format): a text file "index.kiln" in the bundle directory,
 * first line "kiln-aot-index 1", then one "entry" line per (kernel, architecture) of
 * space-separated key=value fields; every file it names carries its size and XXH3-64, checked
 * when the file is read, so a truncated or corrupted file is refused with its name.
 */
#ifndef KILN_BUNDLE_H
#define KILN_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_BUNDLE_MAGIC "__CLANG_OFFLOAD_BUNDLE__"
#define KN_BUNDLE_ALIGN 4096

/* ---- offload bundles ---- */

typedef struct kn_bundle_part {
  const char *id;      /* "hipv4-amdgcn-amd-amdhsa--gfx942" */
  const void *data;
  size_t size;
} kn_bundle_part;

/* the id of an AMDGPU chip's entry: "hipv4-amdgcn-amd-amdhsa--<chip>" */
void kn_bundle_amd_id(const char *chip, char *out, size_t n);

/* Writes a bundle of n parts (a host entry of size 0 first, then the parts) into a malloc'd
 * buffer.  KN_OK or KN_E_NOMEM. */
kn_status kn_bundle_write(const kn_bundle_part *parts, int n, void **out, size_t *size,
                          kn_diag *err);

/* whether p starts with the bundle magic */
int kn_bundle_is(const void *p, size_t n);

/* Every entry of the bundle (at most max into parts, ids pointing into p: not NUL-terminated,
 * so each id's length is in idlen[]).  KN_OK with *count, or KN_E_CORRUPT naming the problem. */
kn_status kn_bundle_entries(const void *p, size_t n, kn_bundle_part *parts, size_t *idlen,
                            int max, int *count, kn_diag *err);

/* The code object of chip in the bundle (an id "hip[v4]-amdgcn-amd-amdhsa-[-]<chip>[:features]").
 * KN_OK; KN_E_CORRUPT for a damaged bundle; KN_E_UNSUPPORTED when it holds no entry for chip
 * (the message lists the entries it holds). */
kn_status kn_bundle_find(const void *p, size_t n, const char *chip, const void **code,
                         size_t *size, kn_diag *err);

/* ---- the index of a bundle directory ---- */

#define KN_AOT_INDEX_FILE "index.kiln"
#define KN_AOT_INDEX_MAGIC "kiln-aot-index 1"

typedef struct kn_aot_file {
  char name[128];          /* relative to the directory; "" when absent */
  uint64_t bytes;
  uint64_t xxh64;          /* XXH3-64 of the bytes */
} kn_aot_file;

typedef struct kn_aot_entry {
  char name[64];           /* the manifest's name (a C identifier): the launch function */
  char symbol[128];        /* the kernel's symbol in the code object / PTX */
  char arch[16];           /* "gfx942", "sm_90a" */
  char desc[256];          /* the descriptor's canonical key (templates/attention.h) */
  int seqlen_lo, seqlen_hi;/* the seqlen_q range this entry serves (inclusive) */
  int block_m, block_n, warps, stages, mfma, wgmma;  /* the tiling */
  int threads;             /* work-items (threads) per workgroup (block) */
  int64_t shared;          /* dynamic shared memory to launch with (NVIDIA; 0 on AMD) */
  int tuned;               /* the tiling came from a tuning record */
  kn_aot_file file;        /* AMD: the offload bundle; NVIDIA: the PTX */
  kn_aot_file cubin;       /* NVIDIA: the cubin (name "" when ptxas was absent) */
} kn_aot_entry;

typedef struct kn_aot_index {
  char dir[4096];          /* the directory the files are in */
  char path[4200];         /* the index file */
  int n;
  kn_aot_entry *e;         /* malloc'd */
} kn_aot_index;

/* Reads the index at path: a directory (its index.kiln) or the index file itself.  KN_OK;
 * KN_E_IO when it cannot be read; KN_E_CORRUPT for a malformed index, the message starting with
 * "<file>:<line>:<col>: ". */
kn_status kn_aot_index_read(const char *path, kn_aot_index *out, kn_diag *err);
/* parses index text (the same checks); dir is where its files are */
kn_status kn_aot_index_parse(const char *text, size_t len, const char *file, const char *dir,
                             kn_aot_index *out, kn_diag *err);
void kn_aot_index_free(kn_aot_index *ix);
/* appends the entry line of e to a malloc'd text (*text, *len; *text NULL to start) */
kn_status kn_aot_index_append(char **text, size_t *len, const kn_aot_entry *e, kn_diag *err);

/* The bytes of f (an entry's file) in ix's directory, malloc'd, checked against the index's
 * size and XXH3-64: KN_OK; KN_E_IO (cannot read), KN_E_CORRUPT (truncated, grown, checksum). */
kn_status kn_aot_file_read(const kn_aot_index *ix, const kn_aot_file *f, void **out,
                           size_t *size, kn_diag *err);
/* fills f's size and checksum for bytes */
void kn_aot_file_describe(kn_aot_file *f, const char *name, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
