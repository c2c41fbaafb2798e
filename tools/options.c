/* options.c — the `kiln` command line's option parsers (options.h): the kernel, variant, run,
 * compile and tune options into cli_options, and the cache command's.  Pure parsing: strings
 * to fields with range checks, messages to the caller's stream.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"


void cli_usage(FILE *f) {
  fputs("usage: kiln <command> [options]     (kiln --version: kiln's and LLVM's versions)\n"
        "commands:\n"
        "  targets                 list targets and devices\n"
        "  run   [--target T]      run the attention kernel on random inputs and check it;\n"
        "                          host, sm_80, sm_90a and auto run through the public API\n"
        "                          (kiln.h: disk cache, tuning records): --cache-dir DIR,\n"
        "                          --no-cache, --tune none|cached|auto (default cached);\n"
        "                          interp, the -emu targets and --ir FILE runs are\n"
        "                          not served by the API and run the kernel directly\n"
        "  dump  --stage S         print a stage: ir, layout (GPU), lowered, llvm (optimised), asm\n"
        "  compile --target T      ahead-of-time output: -o FILE, --emit hsaco|ptx|cubin|obj|asm|\n"
        "                          llvm|layout (default: hsaco, ptx, or asm on the host),\n"
        "                          --stats (registers, spills, LDS, occupancy, MFMA count)\n"
        "                          --loop (AMDGPU: the KV loop's instruction classes, llvm-mca cycles)\n"
        "  check FILE.tile         parse and verify a text IR file\n"
        "  inspect [--loop] FILE.hsaco  registers, spills, LDS, occupancy, MFMA count of a code\n"
        "                          object (or of each in an offload bundle, FILE.hipfb); --loop:\n"
        "                          each kernel's KV loop, instruction classes, llvm-mca cycles\n"
        "  tune  [--target T]      autotune the tiling for the kernel options and record it\n"
        "                          (host, sm_80, sm_90a, auto: the public API's tuner):\n"
        "                          --space \"block_m=32,64;block_n=32\", --cache-dir DIR,\n"
        "                          --seqlen-q N (the length tuned for), --repeats R\n"
        "  cache ls|verify|clear   the code cache and tuning records [--cache-dir DIR]\n"
        "  aot MANIFEST -o DIR     build a manifest's kernels into a bundle (docs/aot.md):\n"
        "                          offload bundles, PTX and cubins, index.kiln; -j N jobs,\n"
        "                          --emit-c NAME (NAME.h / NAME.c, a launcher), --cache-dir DIR\n"
        "                          (the tuning records \"config=tuned\" reads)\n"
        "kernel options:\n"
        "  --dtype f16|bf16|f32  --head-dim D  --batch B  --heads H  --kv-heads HK\n"
        "  --q-dtype FP8 --kv-dtype FP8 (fp8 inputs with descale factors: f8e4m3, f8e5m2,\n"
        "                   f8e4m3fnuz, f8e5m2fnuz; computed in --dtype f16|bf16)\n"
        "  --seqlen-q N  --seqlen-k M  --causal  --block-m BM  --block-n BN\n"
        "  --warps W  --stages S (not on the API path)  --seed S  --repeats R  --ir FILE.tile\n"
        "  --mma sync|wgmma (sm_90a: the dots as wgmma.mma_async; block_m = 16 x warps)\n"
        "  --dq atomic|deterministic (--backward: dQ added with atomics by the dK/dV kernel, or\n"
        "                  its own deterministic pass; default: kiln's choice)\n"
        "  --kv-loads buffer|global (AMDGPU: the KV loop's K/V loads as buffer loads, the\n"
        "                   default where the slabs span < 2^31 bytes, or masked global loads)\n"
        "  (with --ir, the file's kernel attrs decide; an option that contradicts them is an error)\n"
        "  --backward (run: the backward pass, dQ/dK/dV for a random dO, checked against\n"
        "  float64; interp, host, the -emu targets, sm_80, sm_90a, auto; docs/backward.md)\n"
        "  --decode (dump, compile: the split-KV decode kernel, attn_decode, at its decode\n"
        "  tiling; run and the API send calls of 1..16 query rows to it; docs/serving.md)\n"
        "  --decode-read any|in_page|gather|pages (--decode --paged: the split kernel of one\n"
        "  read mode, attn_decode_in_page, attn_decode_gather or attn_decode_pages at its own\n"
        "  tiling, as the API builds them; default any: attn_decode, both loops)\n"
        "  --dropout P (attention dropout, 0 <= P < 1: Philox 4x32-10 keyed by --seed)\n"
        "  --dropout-offset N (the generator's counter offset, default 0)\n"
        "  --check-bounds (run, host: check every load and store against the buffers;\n"
        "  always on for an --ir kernel)  --max-steps N (run, interp: the step budget, default\n"
        "  10^10 steps, 0 for none)\n"
        "variants (docs/variants.md; each a modifier of templates/mods/*.tile):\n"
        "  --causal-top-left  --window L,R (-1: unbounded)  --softcap C  --alibi\n"
        "  --bias (a random (B,H,Nq,Nk) tensor)  --documents K (K packed documents)\n"
        "  --prefix P (prefix-LM)  --mods FILE.tile (@score_mod, @mask_mod, @block_mask)\n"
        "  --varlen LENS[/LENS_K] (run: packed sequences of these lengths in one launch,\n"
        "  e.g. 1,17,0,300; sets --batch and the max lengths; docs/serving.md)\n"
        "  --paged PAGE_SIZE[:LENS] (a paged KV cache of pages of 1..256 rows in shuffled\n"
        "  order; LENS the cache lengths, e.g. 16:1,17,0,300, else --batch sequences of\n"
        "  --seqlen-k keys; the queries are each sequence's last --seqlen-q; docs/serving.md)\n"
        "  --mod-arg NAME=VALUE (a parameter of FILE's modifiers: a number, or rand:N[:LO:HI]\n"
        "  for a tensor of N random elements)\n"
        "targets: interp (the reference interpreter), auto (run: an NVIDIA sm_80+ GPU if\n"
        "         present, else the host), and the registry's: `kiln targets` lists them\n"
        "         (host; AMDGPU gfx90a, gfx942, gfx950 and their -emu twins; NVIDIA sm_80, sm_90a)\n",
        f);
}

static int parse_int(FILE *err, const char *opt, const char *s, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  /* strtol alone takes " 64" and "+64": a number here is an optional '-' and digits */
  bool digits = s && (s[0] == '-' ? s[1] : s[0]) >= '0' && (s[0] == '-' ? s[1] : s[0]) <= '9';
  long v = digits ? strtol(s, &end, 10) : 0;
  if (!digits || errno || *end || end == s || v < lo || v > hi) {
    fprintf(err, "kiln: error: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi,
            s ? s : "");
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* a 64-bit count (--seed, --max-steps): decimal digits only (strtoull alone takes "abc" as 0
 * and "-1" as 2^64-1) */
static int parse_u64(FILE *err, const char *opt, const char *s, unsigned long long *out) {
  char *end;
  errno = 0;
  unsigned long long v = s && *s >= '0' && *s <= '9' ? strtoull(s, &end, 10) : 0;
  if (!s || *s < '0' || *s > '9' || errno || *end) {
    fprintf(err, "kiln: error: %s expects a non-negative integer, got '%s'\n", opt,
            s ? s : "");
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_dtype(FILE *err, const char *s, kiln_dtype *out) {
  for (kiln_dtype t = KILN_F16; t <= KILN_F32; t++)
    if (!strcmp(s, kiln_dtype_name(t))) {
      *out = t;
      return 0;
    }
  fprintf(err, "kiln: error: unknown dtype '%s' (expected f16, bf16 or f32)\n", s);
  return -1;
}

/* --q-dtype / --kv-dtype: an fp8 format, the inputs' element type (docs/serving.md) */
static int parse_fp8(FILE *err, const char *opt, const char *s, kiln_dtype *out) {
  for (kiln_dtype t = KILN_F8E4M3; t <= KILN_F8E5M2FNUZ; t++)
    if (!strcmp(s, kiln_dtype_name(t))) {
      *out = t;
      return 0;
    }
  fprintf(err, "kiln: error: %s: unknown fp8 format '%s' (expected f8e4m3, f8e5m2, "
          "f8e4m3fnuz or f8e5m2fnuz)\n", opt, s);
  return -1;
}

static int parse_policy(FILE *err, const char *s, kiln_tune_policy *out) {
  static const struct { const char *name; kiln_tune_policy p; } policies[] = {
      {"none", KILN_TUNE_NONE}, {"cached", KILN_TUNE_CACHED}, {"auto", KILN_TUNE_AUTO}};
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
    if (!strcmp(s, policies[i].name)) {
      *out = policies[i].p;
      return 0;
    }
  fprintf(err, "kiln: error: --tune expects none, cached or auto, got '%s'\n", s);
  return -1;
}

/* --varlen "1,17,0,300" (keys as long as the queries) or "1,17/5,30" (their own lengths):
 * batch, the max lengths and the prefix sums of o->prob.  0, or -1 after a message */
static int parse_varlen(FILE *err, const char *v, cli_options *o) {
  const char *at = v;
  int n[2] = {0, 0}, most[2] = {0, 0};
  for (int w = 0; w < 2; w++) {
    o->cu[w][0] = 0;
    while (*at && *at != '/') {
      char *end;
      long len = strtol(at, &end, 10);
      if (end == at || len < 0 || len > (1 << 24) || (*end && *end != ',' && *end != '/') ||
          n[w] == KILN_CLI_MAX_SEQS || o->cu[w][n[w]] + len > INT32_MAX / 2) {
        fprintf(err, "kiln: error: --varlen wants lengths >= 0 separated by commas (at most "
                "%d), optionally /key lengths, e.g. 1,17,0,300 or 1,17/5,30; not '%s'\n",
                KILN_CLI_MAX_SEQS, v);
        return -1;
      }
      o->cu[w][n[w] + 1] = o->cu[w][n[w]] + (int32_t)len;
      n[w]++;
      if (len > most[w]) most[w] = (int)len;
      at = *end == ',' ? end + 1 : end;
    }
    if (w == 0 && *at == '/') {
      at++;
    } else if (w == 0) {  /* keys as long as the queries */
      memcpy(o->cu[1], o->cu[0], sizeof o->cu[0]);
      n[1] = n[0], most[1] = most[0];
      break;
    }
  }
  if (n[0] == 0 || n[0] != n[1]) {
    fprintf(err, "kiln: error: --varlen '%s': %d query lengths and %d key lengths (one of "
            "each per sequence)\n", v, n[0], n[1]);
    return -1;
  }
  o->desc.layout = KILN_LAYOUT_VARLEN;
  o->prob.batch = n[0], o->prob.seqlen_q = most[0], o->prob.seqlen_k = most[1];
  o->prob.cu_seqlens_q = o->cu[0], o->prob.cu_seqlens_k = o->cu[1];
  o->prob.total_q = o->cu[0][n[0]], o->prob.total_k = o->cu[1][n[1]];
  return 0;
}

/* --paged 16 or 16:1,17,0,300: the page size, the cache lengths (else --batch of --seqlen-k),
 * a block table naming each sequence's pages of a shuffled pool (from the seed) with one
 * unused entry per sequence holding a page that does not exist, and one spare page.  0, or -1
 * after a message */
static int parse_paged(FILE *err, const char *v, cli_options *o) {
  char *end;
  long ps = strtol(v, &end, 10);
  int n = 0;
  if (end == v || ps < 1 || ps > KN_ATTN_MAX_PAGE || (*end && *end != ':')) goto bad;
  if (*end == ':') {
    const char *at = end + 1;
    while (*at) {
      long len = strtol(at, &end, 10);
      if (end == at || len < 0 || len > (1 << 24) || (*end && *end != ',') ||
          n == KILN_CLI_MAX_SEQS)
        goto bad;
      o->cache_lens[n++] = (int32_t)len;
      at = *end == ',' ? end + 1 : end;
    }
    if (!n) goto bad;
  } else {
    if (o->prob.batch > KILN_CLI_MAX_SEQS) goto bad;
    for (n = 0; n < o->prob.batch; n++) o->cache_lens[n] = o->prob.seqlen_k;
  }
  int most = 0;
  int64_t pages = 1;  /* a spare one */
  for (int b = 0; b < n; b++) {
    int need = (int)((o->cache_lens[b] + ps - 1) / ps);
    if (need > most) most = need;
    pages += need;
  }
  int mp = most + 1;  /* an unused tail entry per sequence */
  if (pages > INT32_MAX / 2 || (int64_t)mp * ps > INT32_MAX / 2) goto bad;
  if ((int64_t)n * mp > KILN_CLI_MAX_TABLE) {  /* (a table no test needs: memory bounded) */
    fprintf(err, "kiln: error: --paged '%s': a block table of %d x %d entries; at most %d\n", v,
            n, mp, KILN_CLI_MAX_TABLE);
    return -1;
  }
  int32_t *perm = malloc(sizeof *perm * (size_t)pages);
  o->table = malloc(sizeof *o->table * (size_t)n * (size_t)mp);
  if (!perm || !o->table) {
    free(perm);
    fprintf(err, "kiln: error: out of host memory for the block table\n");
    return -1;
  }
  unsigned long long s = o->seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
  for (int64_t i = pages - 1; i > 0; i--) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int64_t j = (int64_t)((s >> 33) % (unsigned long long)(i + 1));
    int32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  int64_t at = 0;
  for (int b = 0; b < n; b++)
    for (int i = 0; i < mp; i++)
      o->table[(int64_t)b * mp + i] =
          i < (o->cache_lens[b] + ps - 1) / ps ? perm[at++] : (int32_t)pages + 7;
  free(perm);
  o->desc.layout = KILN_LAYOUT_PAGED;
  o->prob.batch = n, o->prob.seqlen_k = mp * (int)ps;
  o->prob.block_table = o->table, o->prob.cache_seqlens = o->cache_lens;
  o->prob.page_size = (int)ps, o->prob.num_pages = (int)pages, o->prob.max_pages = mp;
  return 0;
bad:
  fprintf(err, "kiln: error: --paged wants PAGE_SIZE (1..%d) or PAGE_SIZE:LENS with cache "
          "lengths >= 0 separated by commas (at most %d), e.g. 16:1,17,0,300; not '%s'\n",
          KN_ATTN_MAX_PAGE, KILN_CLI_MAX_SEQS, v);
  return -1;
}

void cli_options_free(cli_options *o) {
  free(o->table);
  o->table = NULL;
}

int cli_parse_options(int argc, char **argv, int first, cli_options *o, FILE *err) {
  memset(o, 0, sizeof *o);
  o->target = "auto";
  o->desc = (kiln_attn_desc){.dtype = KILN_F16, .head_dim = 64, .causal = 0, .has_lse = 1};
  o->prob = (kn_attn_problem){.batch = 1, .heads = 2, .kv_heads = 0, .seqlen_q = 128,
                              .seqlen_k = 128};
  o->seed = 1;
  o->repeats = 1;
  o->max_steps = 10000000000ull;
  const char *varlen = NULL, *paged = NULL;
  unsigned long long drop_offset = 0;
  for (int i = first; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    o->given.dtype |= !strcmp(a, "--dtype");
    o->given.head_dim |= !strcmp(a, "--head-dim");
    o->given.causal |= !strcmp(a, "--causal");
#define INTOPT(name, lo, hi, dst)                                   \
  if (!strcmp(a, name)) {                                           \
    if (parse_int(err, name, v, lo, hi, &(dst))) return -1;              \
    i++;                                                            \
    continue;                                                       \
  }
    INTOPT("--head-dim", 1, 4096, o->desc.head_dim)
    INTOPT("--batch", 1, 1 << 16, o->prob.batch)
    INTOPT("--heads", 1, 1 << 12, o->prob.heads)
    INTOPT("--kv-heads", 1, 1 << 12, o->prob.kv_heads)
    INTOPT("--seqlen-q", 1, 1 << 24, o->prob.seqlen_q)
    INTOPT("--seqlen-k", 1, 1 << 24, o->prob.seqlen_k)
    INTOPT("--block-m", 1, 4096, o->block_m)
    INTOPT("--block-n", 1, 4096, o->block_n)
    INTOPT("--warps", 1, 64, o->warps)
    INTOPT("--stages", 1, 16, o->stages)
    INTOPT("--repeats", 1, 1000, o->repeats)
#undef INTOPT
    const char **str = !strcmp(a, "--target")                       ? &o->target
                       : !strcmp(a, "--stage")                      ? &o->stage
                       : !strcmp(a, "-o") || !strcmp(a, "--output") ? &o->output
                       : !strcmp(a, "--emit")                       ? &o->emit
                       : !strcmp(a, "--ir")                         ? &o->ir_file
                       : !strcmp(a, "--cache-dir")                  ? &o->cache_dir
                       : !strcmp(a, "--space")                      ? &o->space
                                                                    : NULL;
    if (str && v) {
      *str = v;
      i++;
    } else if (!strcmp(a, "--mma") && v) {
      if (strcmp(v, "sync") && strcmp(v, "wgmma")) {
        fprintf(err, "kiln: error: --mma expects sync or wgmma, got '%s'\n", v);
        return -1;
      }
      o->wgmma = !strcmp(v, "wgmma");
      o->mma_sync = !o->wgmma;
      i++;
    } else if (!strcmp(a, "--dq") && v) {
      if (strcmp(v, "atomic") && strcmp(v, "deterministic")) {
        fprintf(err, "kiln: error: --dq expects atomic or deterministic, got '%s'\n", v);
        return -1;
      }
      o->backward_dq = !strcmp(v, "atomic") ? KILN_BWD_DQ_ATOMIC : KILN_BWD_DQ_DETERMINISTIC;
      i++;
    } else if (!strcmp(a, "--kv-loads") && v) {
      if (strcmp(v, "buffer") && strcmp(v, "global")) {
        fprintf(err, "kiln: error: --kv-loads expects buffer or global, got '%s'\n", v);
        return -1;
      }
      o->global_kv = !strcmp(v, "global");
      i++;
    } else if (!strcmp(a, "--causal")) {
      o->desc.causal = 1;
    } else if (!strcmp(a, "--causal-top-left")) {
      o->desc.causal = 2;
    } else if (!strcmp(a, "--window") && v) {
      char *end;
      long l = strtol(v, &end, 10), r = *end == ',' ? strtol(end + 1, &end, 10) : 0;
      if (*end || !strchr(v, ',') || l < -1 || r < -1 || l > INT32_MAX || r > INT32_MAX) {
        fprintf(err, "kiln: error: --window wants L,R (sizes >= 0, or -1 for unbounded), "
                "not '%s'\n", v);
        return -1;
      }
      o->var.window = true, o->var.window_left = (int)l, o->var.window_right = (int)r;
      i++;
    } else if (!strcmp(a, "--softcap") && v) {
      char *end;
      o->var.softcap_value = strtod(v, &end);
      if (*end || !(o->var.softcap_value > 0) || isinf(o->var.softcap_value)) {
        fprintf(err, "kiln: error: --softcap wants a positive number, not '%s'\n", v);
        return -1;
      }
      o->var.softcap = true;
      i++;
    } else if (!strcmp(a, "--backward")) {
      o->backward = true;
    } else if (!strcmp(a, "--decode")) {
      o->decode = true;
    } else if (!strcmp(a, "--decode-read") && v) {
      /* kn_decode_read's order */
      static const char *const reads[] = {"any", "in_page", "gather", "pages"};
      int r = 0;
      while (r < 4 && strcmp(v, reads[r])) r++;
      if (r == 4) {
        fprintf(err, "kiln: error: --decode-read expects any, in_page, gather or pages, got "
                "'%s'\n", v);
        return -1;
      }
      o->decode_read = (kn_decode_read)r, o->decode_read_given = true;
      i++;
    } else if (!strcmp(a, "--varlen") && v) {
      varlen = v;
      i++;
    } else if (!strcmp(a, "--paged") && v) {
      paged = v;
      i++;
    } else if (!strcmp(a, "--alibi")) {
      o->var.alibi = true;
    } else if (!strcmp(a, "--bias")) {
      o->var.bias = true;
    } else if (!strcmp(a, "--documents") && v) {
      if (parse_int(err, a, v, 1, 1 << 20, &o->var.documents)) return -1;
      i++;
    } else if (!strcmp(a, "--prefix") && v) {
      if (parse_int(err, a, v, 0, 1 << 24, &o->var.prefix_len)) return -1;
      o->var.prefix = true;
      i++;
    } else if (!strcmp(a, "--mods") && v) {
      o->var.mods_file = v;
      i++;
    } else if (!strcmp(a, "--mod-arg") && v) {
      if (!strchr(v, '=') || o->var.nmod_args == 16) {
        fprintf(err, "kiln: error: --mod-arg wants NAME=VALUE (at most 16), not '%s'\n", v);
        return -1;
      }
      o->var.mod_arg[o->var.nmod_args++] = v;
      i++;
    } else if (!strcmp(a, "--stats")) {
      o->stats = true;
    } else if (!strcmp(a, "--loop")) {
      o->loop = true;
    } else if (!strcmp(a, "--no-cache")) {
      o->no_cache = true;
    } else if (!strcmp(a, "--check-bounds")) {
      o->check_bounds = true;
    } else if (!strcmp(a, "--dropout") && v) {
      char *end;
      double pd = strtod(v, &end);
      if (*end || !*v || !(pd >= 0 && pd < 1)) {
        fprintf(err, "kiln: error: --dropout wants a probability in [0, 1), not '%s'\n", v);
        return -1;
      }
      o->desc.dropout_p = (float)pd;
      i++;
    } else if (!strcmp(a, "--dropout-offset") && v) {
      if (parse_u64(err, a, v, &drop_offset)) return -1;
      i++;
    } else if (!strcmp(a, "--seed") && v) {
      if (parse_u64(err, a, v, &o->seed)) return -1;
      i++;
    } else if (!strcmp(a, "--max-steps") && v) {
      if (parse_u64(err, a, v, &o->max_steps)) return -1;
      o->given.max_steps = true;
      i++;
    } else if (!strcmp(a, "--tune") && v) {
      if (parse_policy(err, v, &o->tune)) return -1;
      i++;
    } else if (!strcmp(a, "--dtype") && v) {
      if (parse_dtype(err, v, &o->desc.dtype)) return -1;
      i++;
    } else if ((!strcmp(a, "--q-dtype") || !strcmp(a, "--kv-dtype")) && v) {
      if (parse_fp8(err, a, v, a[2] == 'q' ? &o->desc.q_dtype : &o->desc.kv_dtype)) return -1;
      i++;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      return 1;
    } else {
      fprintf(err, "kiln: error: unknown or incomplete option '%s'\n", a);
      cli_usage(err);
      return -1;
    }
  }
  if (!o->prob.kv_heads) o->prob.kv_heads = o->prob.heads;
  /* dropout: Philox keyed by the run's seed (the inputs' too), at the offset given */
  if (o->desc.dropout_p != 0) o->prob.dropout_seed = o->seed, o->prob.dropout_offset = drop_offset;
  /* after the loop: the lengths decide batch and the max lengths, whatever else was given */
  if (varlen && paged) {
    fprintf(err, "kiln: error: --varlen and --paged are two call shapes: give one\n");
    return -1;
  }
  if (varlen && parse_varlen(err, varlen, o)) return -1;
  if (paged && parse_paged(err, paged, o)) return -1;
  if (o->backward_dq && !o->backward) {
    fprintf(err, "kiln: error: --dq picks how the backward sums dQ: it needs --backward\n");
    return -1;
  }
  if (o->decode_read_given && (!o->decode || !paged)) {
    fprintf(err, "kiln: error: --decode-read picks a paged split kernel: it needs --decode and "
            "--paged\n");
    return -1;
  }
  return 0;
}


int cli_parse_cache(int argc, char **argv, const char **sub, const char **dir, FILE *err) {
  *sub = argc >= 3 ? argv[2] : "";
  *dir = NULL;
  for (int i = 3; i < argc; i++) {
    if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc) {
      *dir = argv[++i];
    } else {
      fprintf(err, "kiln: error: unknown or incomplete option '%s'\n", argv[i]);
      return -1;
    }
  }
  if (strcmp(*sub, "ls") && strcmp(*sub, "verify") && strcmp(*sub, "clear")) {
    fprintf(err, "usage: kiln cache ls|verify|clear [--cache-dir DIR]\n");
    return -1;
  }
  return 0;
}
