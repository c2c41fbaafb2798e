/* options.h — the `kiln` command line's options: what they are (cli_options) and their parsers.
 *
 * Parsing is kept apart from tools/kiln.c so that it can be called without running anything:
 * fuzz/fuzz_cli.c hands these parsers arbitrary argument vectors.  The parsers only parse and
 * check ranges (a number is digits with an optional '-', in the option's range; a list has no
 * empty items); they read no file and touch no device, and every complaint goes to the given
 * stream, never to stdout.  The descriptor is kiln.h's kiln_attn_desc (the API's one conversion
 * makes the template's later, in kiln.c's resolve_attn).
 */
#ifndef KILN_TOOLS_OPTIONS_H
#define KILN_TOOLS_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "attn_decode.h"
#include "attention.h"
#include "kiln.h"

enum { KILN_CLI_MAX_SEQS = 4096,       /* --varlen, --paged */
       KILN_CLI_MAX_TABLE = 1 << 24 };   /* --paged: block table entries */

typedef struct cli_options {
  const char *target;
  const char *stage;
  const char *ir_file;
  const char *output;  /* compile: -o FILE */
  const char *emit;    /* compile: --emit KIND */
  bool stats;          /* compile: --stats */
  bool loop;           /* compile: --loop (AMDGPU: the KV loop's instructions and llvm-mca cycles) */
  kiln_attn_desc desc; /* what the options ask for, as the public API takes it */
  int block_m, block_n, warps, stages; /* the tiling asked for (0: not given) */
  bool wgmma;                           /* --mma wgmma */
  bool mma_sync;                        /* --mma sync (the backward's default is wgmma on sm_90a) */
  int backward_dq;                      /* --dq atomic|deterministic: KILN_BWD_DQ_* (0: default) */
  bool global_kv;                       /* --kv-loads global: no off32 (AMDGPU) */
  bool backward;                        /* run: --backward (dQ, dK, dV; docs/backward.md) */
  bool decode;                          /* dump, compile: --decode (the split-KV decode kernel;
                                           run and the API choose it themselves) */
  kn_decode_read decode_read;           /* --decode-read any|in_page|gather|pages (--paged): which
                                           split kernel; KN_DECODE_READ_ANY, the versioned one */
  bool decode_read_given;
  struct {
    bool dtype, head_dim, causal, max_steps;
  } given;             /* options given on the command line (--ir checks the descriptor's) */
  kn_attn_desc attn;   /* get_kernel / resolve_attn: the descriptor the kernel computes */
  kn_attn_config cfg;  /* ... and its tiling */
  bool check_bounds;   /* run: --check-bounds (host: every global access checked; always for
                          an --ir kernel, which nothing vouches for) */
  unsigned long long max_steps; /* run on interp: the step budget (--max-steps; 0: none) */
  kn_attn_problem prob;
  unsigned long long seed;
  int repeats;
  const char *cache_dir; /* run, tune, cache: --cache-dir DIR (else $KILN_CACHE_DIR, ...) */
  bool no_cache;         /* run: --no-cache */
  kiln_tune_policy tune; /* run: --tune none|cached|auto (default: the API's, cached) */
  const char *space;     /* tune: --space SPEC (autotune/space.h) */
  struct {               /* the variant options (docs/variants.md) and their values */
    bool window, softcap, alibi, bias, prefix;
    int window_left, window_right, documents, prefix_len;
    double softcap_value;
    const char *mods_file;
    char *mods_text;         /* the file's text, read by resolve_attn */
    bool ref_from_library;   /* --ir: the file lacks the library functions its attrs name */
    kn_attn_sig sig;         /* the kernel's parameters: resolve_attn (the template's) or
                                get_kernel (an --ir file's) */
    const char *mod_arg[16]; /* NAME=VALUE */
    int nmod_args;
  } var;
  /* run: --varlen LENS[/LENS_K] (docs/serving.md): the sequences' prefix sums (prob points at
   * them) */
  int32_t cu[2][KILN_CLI_MAX_SEQS + 1];
  /* run: --paged PAGE_SIZE[:LENS] (docs/serving.md): the cache lengths, and the block table
   * (prob points at both; the table is malloc'd: cli_options_free, or the process's exit) */
  int32_t cache_lens[KILN_CLI_MAX_SEQS];
  int32_t *table;
} cli_options;

/* the usage text (kiln --help) */
void cli_usage(FILE *f);
/* The options of run, dump, compile and tune from argv[first..argc): 0, -1 after a message on
 * err (bad usage: an unknown option, a malformed or out-of-range value; the usage too for an
 * unknown option), or 1 for --help (nothing printed).  o is reset first (free a parsed one's
 * table with cli_options_free before reusing it); it points into argv (strings), into itself
 * (varlen's prefix sums, paged's cache lengths) and at its malloc'd block table (--paged). */
int cli_parse_options(int argc, char **argv, int first, cli_options *o, FILE *err);
/* frees what cli_parse_options allocated (the --paged block table); o stays parsed otherwise */
void cli_options_free(cli_options *o);
/* `kiln cache SUB [--cache-dir DIR]`: *sub (ls, verify or clear) and *dir (NULL: the default);
 * 0, or -1 after a message on err */
int cli_parse_cache(int argc, char **argv, const char **sub, const char **dir, FILE *err);

#endif
