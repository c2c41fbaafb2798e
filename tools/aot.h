/* aot.h — `kiln aot`: the manifest, the parallel build of its kernels into a bundle directory,
 * and the generated C launcher (docs/aot.md is the contract: the manifest's grammar, the files,
 * the index, the launcher's functions).
 *
 * tools/aot.c reads the manifest and builds; tools/aot_emit.c writes NAME.h / NAME.c from what
 * was built.  Both live in tools/ because they are the compiler's side of AOT: the reading side
 * (runtime/bundle.c, api/bundle.c) needs no LLVM.
 */
#ifndef KILN_AOT_H
#define KILN_AOT_H

#include <stddef.h>

#include "attention.h"
#include "bundle.h"

enum { AOT_MAX_ARCHS = 8 };

/* one manifest line: a kernel for a list of architectures */
typedef struct aot_kernel {
  char name[64];               /* a C identifier: the launch function's name */
  char symbol[128];            /* the kernel's unique symbol: attn_fwd_<name>[_<lo>_<hi>] */
  kn_attn_desc desc;
  int narchs;
  const char *archs[AOT_MAX_ARCHS];  /* the registry's names (static strings) */
  enum { AOT_DEFAULT, AOT_TUNED, AOT_FORCED } config;
  kn_attn_config forced;       /* AOT_FORCED */
  int seqlen_lo, seqlen_hi;    /* the seqlen_q range served */
  int line;                    /* in the manifest */
} aot_kernel;

/* what one (kernel, arch) compiled to */
typedef struct aot_object {
  kn_attn_config cfg;
  int tuned;
  void *code;                  /* code object or PTX (malloc'd) */
  size_t code_n;
  void *cubin;                 /* NVIDIA with ptxas, else NULL */
  size_t cubin_n;
  int threads;
  long long shared;
  double ms;                   /* compile time */
  char error[600];             /* "" when it compiled */
} aot_object;

typedef struct aot_build {
  int n;
  aot_kernel *k;               /* malloc'd */
  aot_object *obj;             /* n x AOT_MAX_ARCHS, [i * AOT_MAX_ARCHS + a] */
  kn_aot_index index;          /* the entries written (dir = the output directory) */
} aot_build;

/* Parses a manifest (text of len bytes, named file in messages).  0, or -1 with the message
 * ("file:line:col: ...") in err (size n). */
int aot_manifest_parse(const char *file, const char *text, size_t len, aot_build *b, char *err,
                       size_t n);
void aot_build_free(aot_build *b);

/* tools/aot_emit.c: writes <out_dir>/<name>.h and .c for the built kernels.  0, or -1 with the
 * message in err. */
int aot_emit_c(const aot_build *b, const char *out_dir, const char *name, char *err, size_t n);

/* the command: kiln aot MANIFEST -o DIR [-j N] [--emit-c NAME] [--cache-dir DIR] */
int aot_main(int argc, char **argv);

#endif
