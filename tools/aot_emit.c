/* aot_emit.c — `kiln aot --emit-c NAME`: a C launcher for the bundle, NAME.h and NAME.c.
 *
 * The generated C needs a C11 compiler, the C library, libdl and pthreads — neither kiln nor
 * LLVM nor ROCm's or CUDA's headers: it declares the few driver entry points it calls itself and
 * finds the runtime at run time by dlopen (HIP: $KILN_HIP_LIBRARY, else libamdhip64.so, .7, .6,
 * .5; CUDA: $KILN_CUDA_LIBRARY, else libcuda.so.1), so the same object runs on either vendor's
 * machine.  The files of the bundle are in it as string literals (octal escapes: compilers read
 * them much faster than brace lists of numbers).
 *
 * What is decided here, at build time, so the launcher decides nothing it could get wrong: for
 * every (kernel, arch) the symbol, the tiling's block_m (the grid rule), the threads per block,
 * the dynamic shared memory, and on AMD the kernarg segment's layout read from the code object's
 * own metadata (each explicit argument's offset and size, the hidden ones kiln's kernels may
 * have, the segment's size and alignment) — the launcher packs the segment as runtime/hip.c
 * does and passes it through hipModuleLaunchKernel's `extra`.  The parameters' values are
 * computed in the kernel signature's order from NAME_args (the template's 24, then the
 * variants' — window, softcap, ALiBi, bias, documents, prefix — each checked before a launch;
 * for a varlen kernel the packed buffers' strides and rows, cu_seqlens and the longest lengths,
 * for a paged one the pools' strides, the block table, the lengths and the table's capacity;
 * another parameter, a caller's modifier's, is refused here with its name).
 *
 * Per variant (manifest name) one function NAME_<variant>(args, stream) picks, for the device's
 * arch, the entry whose seqlen_q range holds the call's (else the arch's first), loads its module
 * on first use (HIP: the chip's code object from the offload bundle; CUDA: the cubin when built
 * for exactly the device's compute capability, else the PTX through the driver's JIT) and
 * launches asynchronously on the caller's stream.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aot.h"
#include "arch.h"
#include "attn_launch_cuda.h"
#include "codeobj.h"
#include "kiln.h"

/* a string literal of n bytes, 72 bytes of escapes per line */
static void emit_bytes(FILE *f, const unsigned char *p, size_t n) {
  size_t col = 0;
  fputs("  \"", f);
  for (size_t i = 0; i < n; i++) {
    unsigned c = p[i];
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '?') {
      fputc((int)c, f);
      col++;
      /* a digit after an octal escape would extend it */
    } else {
      fprintf(f, "\\%03o", c);
      col += 4;
    }
    if (col >= 72 && i + 1 < n) {
      fputs("\"\n  \"", f);
      col = 0;
    }
  }
  fputs("\"", f);
}

/* the C expression of parameter i of sig for the generated argument struct `a` */
static int param_expr(const kn_attn_sig *sig, int i, int head_dim, int layout, char *out,
                      size_t n) {
  const bool varlen = layout == KN_ATTN_VARLEN;
  static const char *const base[KN_ATTN_NPARAMS] = {
      "(uint64_t)(uintptr_t)a->q", "(uint64_t)(uintptr_t)a->k", "(uint64_t)(uintptr_t)a->v",
      "(uint64_t)(uintptr_t)a->o", "(uint64_t)(uintptr_t)a->lse", NULL /* sm_scale */,
      "(uint32_t)a->seqlen_q", "(uint32_t)a->seqlen_k", "(uint32_t)a->heads",
      "(uint32_t)(a->heads / a->kv_heads)",
      "(uint64_t)qs[0]", "(uint64_t)qs[1]", "(uint64_t)qs[2]",
      "(uint64_t)ks[0]", "(uint64_t)ks[1]", "(uint64_t)ks[2]",
      "(uint64_t)vs[0]", "(uint64_t)vs[1]", "(uint64_t)vs[2]",
      "(uint64_t)os[0]", "(uint64_t)os[1]", "(uint64_t)os[2]",
      "(uint64_t)ls[0]", "(uint64_t)ls[1]"};
  if (i == 5) return snprintf(out, n, "f32(a->sm_scale != 0 ? a->sm_scale : %.9gf)",
                              1.0 / __builtin_sqrt((double)head_dim)), 0;
  /* varlen: the kernel's seqlen_q / seqlen_k are the packed buffers' rows (attention.h) */
  if (varlen && (i == 6 || i == 7))
    return snprintf(out, n, "(uint32_t)a->total_%c", i == 6 ? 'q' : 'k'), 0;
  /* paged: the kernel's seqlen_k is the table's capacity (attention.h) */
  if (layout == KN_ATTN_PAGED && i == 7)
    return snprintf(out, n, "(uint32_t)((int64_t)a->max_pages * a->page_size)"), 0;
  if (i < KN_ATTN_NPARAMS) return snprintf(out, n, "%s", base[i]), 0;
  const char *name = sig->name[i];
  if (!strcmp(name, "window_left")) return snprintf(out, n, "(uint32_t)a->window_left"), 0;
  if (!strcmp(name, "window_right")) return snprintf(out, n, "(uint32_t)a->window_right"), 0;
  if (!strcmp(name, "softcap")) return snprintf(out, n, "f32(a->softcap)"), 0;
  static const char *const vars[][2] = {
      {"alibi_slopes", "(uint64_t)(uintptr_t)a->alibi_slopes"},
      {"alibi_sb", "(uint64_t)a->alibi_stride"},
      {"bias", "(uint64_t)(uintptr_t)a->bias"},
      /* contiguous (all zero): H * Nq * Nk, Nq * Nk, Nk, as kiln_forward forms them */
      {"bias_sb", "(uint64_t)(bias_dense ? (int64_t)a->heads * a->seqlen_q * a->seqlen_k "
                  ": a->bias_stride[0])"},
      {"bias_sh", "(uint64_t)(bias_dense ? (int64_t)a->seqlen_q * a->seqlen_k : a->bias_stride[1])"},
      {"bias_sm", "(uint64_t)(bias_dense ? (int64_t)a->seqlen_k : a->bias_stride[2])"},
      {"q_seg", "(uint64_t)(uintptr_t)a->q_seg"},
      {"k_seg", "(uint64_t)(uintptr_t)a->k_seg"},
      {"q_seg_sb", "(uint64_t)(a->q_seg_stride ? a->q_seg_stride : (int64_t)a->seqlen_q)"},
      {"k_seg_sb", "(uint64_t)(a->k_seg_stride ? a->k_seg_stride : (int64_t)a->seqlen_k)"},
      {"prefix_len", "(uint32_t)a->prefix_len"},
      {"cu_seqlens_q", "(uint64_t)(uintptr_t)a->cu_seqlens_q"},
      {"cu_seqlens_k", "(uint64_t)(uintptr_t)a->cu_seqlens_k"},
      {"max_seqlen_q", "(uint32_t)a->seqlen_q"},
      {"max_seqlen_k", "(uint32_t)a->seqlen_k"},
      {"block_table", "(uint64_t)(uintptr_t)a->block_table"},
      {"cache_seqlens", "(uint64_t)(uintptr_t)a->cache_seqlens"},
      {"page_size", "(uint32_t)a->page_size"},
      {"num_pages", "(uint32_t)a->num_pages"},
      {"seqlen_new", "(uint32_t)a->seqlen_new"},
      {"block_table_sb",
       "(uint64_t)(a->block_table_stride ? a->block_table_stride : (int64_t)a->max_pages)"}};
  for (size_t j = 0; j < sizeof vars / sizeof vars[0]; j++)
    if (!strcmp(name, vars[j][0])) return snprintf(out, n, "%s", vars[j][1]), 0;
  return -1;
}

/* the check a variant's tensor needs before a launch ("" for a parameter that is none) */
static const char *param_check(const char *name) {
  if (!strcmp(name, "alibi_slopes"))
    return "  if (!a->alibi_slopes || a->alibi_stride < 0) return @_fail(\"alibi: NULL slopes or "
           "a negative stride\");\n";
  if (!strcmp(name, "bias"))
    return "  if (!a->bias || a->bias_stride[0] < 0 || a->bias_stride[1] < 0 || "
           "a->bias_stride[2] < 0) return @_fail(\"bias: NULL or a negative stride\");\n";
  if (!strcmp(name, "q_seg"))
    return "  if (!a->q_seg || !a->k_seg || a->q_seg_stride < 0 || a->k_seg_stride < 0) return "
           "@_fail(\"document: NULL segment ids or a negative stride\");\n";
  if (!strcmp(name, "prefix_len"))
    return "  if (a->prefix_len < 0) return @_fail(\"prefix: prefix_len %d is negative\", "
           "a->prefix_len);\n";
  if (!strcmp(name, "softcap"))
    return "  if (!(a->softcap > 0)) return @_fail(\"softcap: %g is not > 0\", (double)a->softcap);\n";
  return "";
}

/* the launcher's runtime half (tools/aot_launcher.c, made a byte string by the build) */
static const char RUNTIME[] = {
#include "aot_launcher.inc"
};

/* writes text with every occurrence of `from` replaced by `to` */
static void put_renamed(FILE *f, const char *text, const char *from, const char *to) {
  size_t fl = strlen(from);
  for (const char *p = text; *p;) {
    const char *q = strstr(p, from);
    if (!q) {
      fputs(p, f);
      break;
    }
    fwrite(p, 1, (size_t)(q - p), f);
    fputs(to, f);
    p = q + fl;
  }
}

/* fprintf, then "@" replaced by the launcher's name */
static const char *g_name;
__attribute__((format(printf, 2, 3))) static void emitf(FILE *f, const char *fmt, ...) {
  char buf[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  put_renamed(f, buf, "@", g_name);
}

int aot_emit_c(const aot_build *b, const char *out_dir, const char *name, char *err, size_t n) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s.h", out_dir, name);
  FILE *h = fopen(path, "w");
  snprintf(path, sizeof path, "%s/%s.c", out_dir, name);
  FILE *c = h ? fopen(path, "w") : NULL;
  if (!h || !c) {
    if (h) fclose(h);
    return snprintf(err, n, "cannot write %.300s", path), -1;
  }
  int rc = 0;
  g_name = name;
  /* ---- the header ---- */
  fprintf(h,
          "/* %s.h — the launcher `kiln aot --emit-c %s` generated (kiln %s; docs/aot.md).\n"
          " * Do not edit: rebuild the bundle.  Compile %s.c with any C11 compiler; link -ldl\n"
          " * -lpthread.  HIP or CUDA is found at run time (dlopen), nothing else is needed. */\n"
          "#ifndef %s_H\n#define %s_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n#ifdef __cplusplus\n"
          "extern \"C\" {\n#endif\n\n"
          "/* one attention forward: q, o (batch, heads, seqlen_q, head_dim); k, v (batch, "
          "kv_heads,\n * seqlen_k, head_dim); lse (batch, heads, seqlen_q) f32 or NULL; device "
          "pointers.  Strides in\n * elements {batch, head, row} (all 0: contiguous), head_dim "
          "contiguous; sm_scale 0:\n * 1/sqrt(head_dim); window_left/right (-1: unbounded) and "
          "softcap for those variants. */\n"
          "typedef struct %s_args {\n  const void *q, *k, *v;\n  void *o;\n  float *lse;\n"
          "  int batch, heads, kv_heads, seqlen_q, seqlen_k;\n  float sm_scale;\n"
          "  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3], lse_stride[2];\n"
          "  int window_left, window_right;\n  float softcap;\n"
          "  /* alibi: f32 slopes (batch, heads), alibi_stride its batch stride (0: one (heads)\n"
          "   * vector for every batch); bias: (batch, heads, seqlen_q, seqlen_k) of the kernel's\n"
          "   * dtype, strides {batch, head, row} (zeros: contiguous); document: int32 segment ids\n"
          "   * (batch, seqlen_q) and (batch, seqlen_k), batch strides (0: contiguous); prefix:\n"
          "   * keys [0, prefix_len) visible to every query.  Device pointers. */\n"
          "  const float *alibi_slopes;\n  int64_t alibi_stride;\n  const void *bias;\n"
          "  int64_t bias_stride[3];\n  const int32_t *q_seg, *k_seg;\n"
          "  int64_t q_seg_stride, k_seg_stride;\n  int prefix_len;\n"
          "  /* varlen kernels: q, o packed (total_q, heads, head_dim), k, v (total_k, kv_heads,\n"
          "   * head_dim), lse (heads, total_q); sequence b owns tokens [cu_seqlens_q[b],\n"
          "   * cu_seqlens_q[b + 1]) of q and o, [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v\n"
          "   * (int32, batch + 1 prefix sums each, device memory); seqlen_q / seqlen_k the longest\n"
          "   * sequence's lengths; strides {0, head, token}, lse {0, head} (zeros: packed). */\n"
          "  const int32_t *cu_seqlens_q, *cu_seqlens_k;\n  int total_q, total_k;\n"
          "  /* paged kernels (a KV cache): k, v page pools (num_pages, page_size, kv_heads,\n"
          "   * head_dim), strides {page, head, row} (zeros: contiguous); sequence b's key j is\n"
          "   * row j %% page_size of page block_table[b * block_table_stride + j / page_size]\n"
          "   * (int32, device memory; stride 0: max_pages); cache_seqlens (batch) int32 its keys,\n"
          "   * plus seqlen_new rows the caller already wrote; seqlen_k is ignored (the table's\n"
          "   * capacity max_pages * page_size); q, o, lse dense as above. */\n"
          "  const int32_t *block_table, *cache_seqlens;\n  int64_t block_table_stride;\n"
          "  int page_size, num_pages, max_pages, seqlen_new;\n} %s_args;\n\n"
          "/* Loads the runtime: \"hip\", \"cuda\", or NULL/\"auto\" (HIP when it has a device of "
          "an arch in\n * the bundle, else CUDA); device 0.  0, or -1 (%s_error() says why). */\n"
          "int %s_init(const char *runtime);\n"
          "/* the arch the launcher runs (\"gfx942\", \"sm_90a\"), \"\" before init */\n"
          "const char *%s_arch(void);\n"
          "/* why the last call on this thread failed */\nconst char *%s_error(void);\n\n"
          "/* Device memory through the runtime init loaded (hipMalloc / cuMemAlloc, ...), for a\n"
          " * program without HIP or CUDA headers; 0 or -1 (%s_error()).  sync waits for the\n"
          " * stream's launches (NULL: the default stream). */\n"
          "int %s_alloc(void **p, size_t bytes);\nint %s_free(void *p);\n"
          "int %s_upload(void *dev, const void *host, size_t bytes);\n"
          "int %s_download(void *host, const void *dev, size_t bytes);\n"
          "int %s_sync(void *stream);\n\n",
          name, name, KILN_VERSION_STRING, name, name, name, name, name, name, name, name,
          name, name, name, name, name, name, name);
  /* ---- the blobs and tables ---- */
  fprintf(c, "/* %s.c — generated by `kiln aot --emit-c %s` (kiln %s; docs/aot.md).  Do not "
          "edit.\n * What follows the runtime below: the bundle's bytes, its tables, one function "
          "per variant. */\n", name, name, KILN_VERSION_STRING);
  put_renamed(c, RUNTIME, "kn_aotl", name);
  int nobj = 0, ix = 0;
  for (int i = 0; i < b->n && !rc; i++) {
    const aot_kernel *k = &b->k[i];
    kn_attn_sig sig;
    kn_diag d;
    if (kn_attn_signature(&k->desc, &sig, &d)) {
      rc = -1;
      snprintf(err, n, "kernel %s: %s", k->name, d.message);
      break;
    }
    /* the parameter values of this kernel */
    fprintf(c, "\nstatic int %s_v%d(const %s_args *a, uint64_t *v) {\n", name, i, name);
    emitf(c, "  int64_t qs[3] = {0}, ks[3] = {0}, vs[3] = {0}, os[3] = {0}, ls[2] = {0};\n"
          "  if (@_strides%s(a, %d, qs, ks, vs, os, ls)) return -1;\n",
          k->desc.layout == KN_ATTN_VARLEN ? "_varlen" : k->desc.layout == KN_ATTN_PAGED ?
          "_paged" : "", k->desc.head_dim);
    if (k->desc.bias)
      fprintf(c, "  const int bias_dense = !a->bias_stride[0] && !a->bias_stride[1] && "
              "!a->bias_stride[2];\n");
    for (int p = KN_ATTN_NPARAMS; p < sig.n; p++) emitf(c, "%s", param_check(sig.name[p]));
    for (int p = 0; p < sig.n && !rc; p++) {
      char e[160];
      if (param_expr(&sig, p, k->desc.head_dim, k->desc.layout, e, sizeof e)) {
        rc = -1;
        snprintf(err, n, "kernel %s: the launcher does not pass the variant parameter %%%s yet "
                 "(the API does: kiln_context_options.bundle)", k->name, sig.name[p]);
        break;
      }
      fprintf(c, "  v[%d] = %s;\n", p, e);
    }
    fprintf(c, "  return %d;\n}\n", sig.n);
    /* one bundle per kernel; PTX and cubin per NVIDIA arch */
    bool amd_blob = false;
    for (int a = 0; a < k->narchs; a++) {
      const aot_object *o = &b->obj[i * AOT_MAX_ARCHS + a];
      const kn_arch *arch = kn_arch_get(k->archs[a]);
      if (arch->isa == KN_ISA_AMDGPU && !amd_blob) {
        /* the bundle file written to the directory: the index's entry names it */
        amd_blob = true;
        void *bytes;
        size_t nb;
        const kn_aot_entry *e = NULL;
        for (int j = 0; j < b->index.n && !e; j++)
          if (!strcmp(b->index.e[j].symbol, k->symbol) && !strcmp(b->index.e[j].arch, arch->name))
            e = &b->index.e[j];
        if (!e || kn_aot_file_read(&b->index, &e->file, &bytes, &nb, &d)) {
          rc = -1;
          snprintf(err, n, "reading back %s: %s", k->symbol, e ? d.message : "not in the index");
          break;
        }
        fprintf(c, "static const char %s_hip%d[] =\n", name, i);
        emit_bytes(c, bytes, nb);
        fprintf(c, ";\n");
        free(bytes);
      } else if (arch->isa == KN_ISA_NVPTX) {
        fprintf(c, "static const char %s_ptx%d_%d[] =\n", name, i, a);
        emit_bytes(c, o->code, o->code_n);
        fprintf(c, ";\n");
        if (o->cubin) {
          fprintf(c, "static const char %s_cubin%d_%d[] =\n", name, i, a);
          emit_bytes(c, o->cubin, o->cubin_n);
          fprintf(c, ";\n");
        }
      }
    }
    for (int a = 0; a < k->narchs && !rc; a++) {
      const aot_object *o = &b->obj[i * AOT_MAX_ARCHS + a];
      const kn_arch *arch = kn_arch_get(k->archs[a]);
      char args[4096] = "";
      unsigned ksize = 0, kalign = 0;
      int nargs = 0;
      if (arch->isa == KN_ISA_AMDGPU) {
        kn_codeobj co;
        if (kn_codeobj_read(o->code, o->code_n, &co, &d)) {
          rc = -1;
          snprintf(err, n, "%s for %s: %s", k->symbol, arch->name, d.message);
          break;
        }
        const kn_codeobj_kernel *ck = kn_codeobj_find(&co, k->symbol);
        ksize = ck->kernarg_size, kalign = ck->kernarg_align;
        int e = 0;
        for (int j = 0; j < ck->nargs && !rc; j++) {
          const kn_codeobj_arg *ca = &ck->args[j];
          /* which value: an explicit parameter, or a hidden kind the launch knows (else 0) */
          int what = ca->hidden ? -1 : e++;
          if (ca->hidden) {
            static const char *const kinds[] = {
                "hidden_block_count_x", "hidden_block_count_y", "hidden_block_count_z",
                "hidden_group_size_x", "hidden_group_size_y", "hidden_group_size_z",
                "hidden_grid_dims"};
            for (int q = 0; q < 7; q++)
              if (!strcmp(ca->value_kind, kinds[q])) what = -2 - q;
          } else if (kn_attn_cuda_param_bytes(&sig, what) != (int)ca->size) {
            rc = -1;
            snprintf(err, n, "%s for %s: argument %d is %u bytes in the code object", k->symbol,
                     arch->name, what, ca->size);
          }
          size_t used = strlen(args);
          snprintf(args + used, sizeof args - used, "{%u, %u, %d}, ", ca->offset, ca->size, what);
        }
        nargs = ck->nargs;
        kn_codeobj_free(&co);
        if (!rc && nargs)
          emitf(c, "static const struct @_arg @_args%d_%d[] = {%s};\n", i, a, args);
      }
      if (rc) break;
      bool amd = arch->isa == KN_ISA_AMDGPU;
      char blob[64], cubin[64] = "NULL", cubin_n[32] = "0", argt[64] = "NULL";
      if (amd) snprintf(blob, sizeof blob, "%s_hip%d", name, i);
      else snprintf(blob, sizeof blob, "%s_ptx%d_%d", name, i, a);
      if (o->cubin) {
        snprintf(cubin, sizeof cubin, "%s_cubin%d_%d", name, i, a);
        snprintf(cubin_n, sizeof cubin_n, "%zu", o->cubin_n);
      }
      if (nargs) snprintf(argt, sizeof argt, "%s_args%d_%d", name, i, a);
      emitf(c, "static struct @_obj @_obj%d = {.arch = \"%s\", .amd = %d, .cc = %d, .blob = %s, "
            ".blob_n = sizeof %s - 1, .cubin = %s, .cubin_n = %s, .symbol = \"%s\", "
            ".seqlen_lo = %d, .seqlen_hi = %d, .block_m = %d, .threads = %d, .shared = %lld, "
            ".kernarg_size = %u, .kernarg_align = %u, .nargs = %d, .args = %s, .values = @_v%d};\n",
            ix++, arch->name, amd, arch->cc_major * 10 + arch->cc_minor, blob, blob, cubin,
            cubin_n, k->symbol, k->seqlen_lo, k->seqlen_hi, o->cfg.block_m, o->threads,
            (long long)o->shared, ksize, kalign, nargs, argt, i);
      nobj++;
    }
  }
  /* one function per variant: its objects */
  for (int i = 0, at = 0; i < b->n && !rc; i++) {
    const aot_kernel *k = &b->k[i];
    bool first = true;
    for (int j = 0; j < i; j++) first &= strcmp(b->k[j].name, k->name) != 0;
    int start = at;
    at += k->narchs;
    if (!first) continue;
    emitf(c, "\nint @_%s(const @_args *a, void *stream) {\n  static struct @_obj *const "
          "objs[] = {", k->name);
    int count = 0, o2 = 0;
    for (int j = 0; j < b->n; j++) {
      for (int a = 0; a < b->k[j].narchs; a++, o2++)
        if (!strcmp(b->k[j].name, k->name)) fprintf(c, "%s&%s_obj%d", count++ ? ", " : "", name, o2);
    }
    (void)start;
    emitf(c, "};\n  return @_launch(objs, %d, a, stream);\n}\n", count);
    fprintf(h, "/* %s: %s, head dim %d */\nint %s_%s(const %s_args *a, void *stream);\n",
            k->name, kn_scalar_name(k->desc.dtype), k->desc.head_dim, name, k->name, name);
  }
  /* every object, for the arch checks of init */
  emitf(c, "\nstatic struct @_obj *const *@_objs(int *n) {\n  static struct @_obj *const all[] = {");
  for (int i = 0; i < ix; i++) emitf(c, "%s&@_obj%d", i ? ", " : "", i);
  emitf(c, "};\n  *n = %d;\n  return all;\n}\n", ix);
  fprintf(h, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
  if (fclose(h)) rc = -1;
  if (fclose(c)) rc = -1;
  if (rc && !err[0]) snprintf(err, n, "writing %s failed", path);
  (void)nobj;
  return rc;
}
