/* fuzz_cli.c — libFuzzer target: the `kiln` command line's option parsers (tools/options.c) on
 * any argument vector.
 *
 * The input is an argument vector, its arguments separated by NUL bytes (at most 64).  When the
 * first is `cache` it goes to cli_parse_cache as `kiln cache ...`, else to cli_parse_options as
 * the options of `kiln run`.  What must hold: the parsers return (never crash, never read past
 * an argument), a refusal (-1) has written a message, --help (1) was asked for, and an accepted
 * vector (0) leaves only values the rest of the tool may trust: every number within its
 * option's documented range, strings pointing into the vector, at most 16 --mod-arg of the form
 * NAME=VALUE, and with --varlen prefix sums that start at 0, never decrease, and agree with the
 * batch, the longest lengths and the totals; with --paged a block table whose used entries are
 * distinct pages of the pool, enough for each cache length, and a capacity that is seqlen_k.
 * Messages go to a memory stream, not the
 * terminal.  Seeds: fuzz/run.sh writes command lines of docs/cli.md's kinds.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

enum { MAX_ARGS = 64 };

static void check(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "fuzz_cli: %s\n", what);
  abort();
}

static char **argv_lo, **argv_hi;
static const char *text_lo, *text_hi;

/* NULL or a pointer to the start of an argument of the vector */
static int from_argv(const char *s) {
  if (!s) return 1;
  for (char **a = argv_lo; a < argv_hi; a++)
    if (*a == s) return 1;
  return s >= text_lo && s < text_hi;  /* (or inside one: --mods FILE is the whole argument) */
}

static void check_options(const cli_options *o, int nargs) {
  const kiln_attn_desc *d = &o->desc;
  check(d->head_dim >= 1 && d->head_dim <= 4096, "head_dim out of range");
  check(d->dtype >= KILN_F16 && d->dtype <= KILN_F32, "dtype out of range");
  check(d->causal >= 0 && d->causal <= 2, "causal out of range");
  check(o->prob.heads >= 1 && o->prob.heads <= 4096, "heads out of range");
  check(o->prob.kv_heads >= 1 && o->prob.kv_heads <= 4096, "kv_heads out of range");
  check(o->repeats >= 1 && o->repeats <= 1000, "repeats out of range");
  check(o->block_m >= 0 && o->block_m <= 4096 && o->block_n >= 0 && o->block_n <= 4096,
        "block sizes out of range");
  check(o->warps >= 0 && o->warps <= 64 && o->stages >= 0 && o->stages <= 16,
        "warps/stages out of range");
  check(!o->var.window || (o->var.window_left >= -1 && o->var.window_right >= -1),
        "window out of range");
  check(!o->var.softcap || (o->var.softcap_value > 0 && !isinf(o->var.softcap_value)),
        "softcap not a positive finite number");
  check(o->var.documents >= 0 && o->var.documents <= 1 << 20, "documents out of range");
  check(o->var.prefix_len >= 0 && o->var.prefix_len <= 1 << 24, "prefix out of range");
  check(o->var.nmod_args >= 0 && o->var.nmod_args <= 16 && o->var.nmod_args <= nargs,
        "too many --mod-arg");
  for (int i = 0; i < o->var.nmod_args; i++)
    check(from_argv(o->var.mod_arg[i]) && strchr(o->var.mod_arg[i], '='),
          "a --mod-arg without NAME=VALUE");
  const char *strs[] = {o->target, o->stage, o->ir_file, o->output, o->emit, o->cache_dir,
                        o->space, o->var.mods_file};
  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    check(i == 0 ? o->target != NULL : 1, "no target");
  for (size_t i = 1; i < sizeof strs / sizeof strs[0]; i++)
    check(from_argv(strs[i]), "a string option not from the vector");
  if (d->layout == KILN_LAYOUT_VARLEN) {
    const kn_attn_problem *p = &o->prob;
    check(p->batch >= 1 && p->batch <= KILN_CLI_MAX_SEQS, "varlen batch out of range");
    check(p->cu_seqlens_q == o->cu[0] && p->cu_seqlens_k == o->cu[1], "prefix sums elsewhere");
    for (int w = 0; w < 2; w++) {
      const int32_t *cu = o->cu[w];
      int most = 0;
      check(cu[0] == 0, "prefix sums not from 0");
      for (int b = 0; b < p->batch; b++) {
        check(cu[b + 1] >= cu[b], "prefix sums decrease");
        if (cu[b + 1] - cu[b] > most) most = cu[b + 1] - cu[b];
      }
      check(most == (w ? p->seqlen_k : p->seqlen_q), "longest length is not the max seqlen");
      check(cu[p->batch] == (w ? p->total_k : p->total_q), "total is not the last prefix sum");
    }
  } else if (d->layout == KILN_LAYOUT_PAGED) {
    const kn_attn_problem *p = &o->prob;
    check(p->batch >= 1 && p->batch <= KILN_CLI_MAX_SEQS, "paged batch out of range");
    check(p->block_table == o->table && p->cache_seqlens == o->cache_lens, "table elsewhere");
    check(p->page_size >= 1 && p->page_size <= KN_ATTN_MAX_PAGE, "page size out of range");
    check(p->max_pages >= 1 && (int64_t)p->batch * p->max_pages <= KILN_CLI_MAX_TABLE,
          "table size out of range");
    check(p->seqlen_k == p->max_pages * p->page_size, "seqlen_k is not the table's capacity");
    check(p->seqlen_q >= 1 && p->seqlen_q <= 1 << 24, "seqlen_q out of range");
    unsigned char *used = calloc((size_t)p->num_pages, 1);
    check(used != NULL, "out of memory");
    for (int b = 0; b < p->batch; b++) {
      int32_t len = p->cache_seqlens[b];
      check(len >= 0 && len <= p->seqlen_k, "a cache length out of the table's capacity");
      for (int i = 0; i < (len + p->page_size - 1) / p->page_size; i++) {
        int32_t pg = p->block_table[(int64_t)b * p->max_pages + i];
        check(pg >= 0 && pg < p->num_pages, "a used table entry is not a page of the pool");
        check(!used[pg], "a page used twice");
        used[pg] = 1;
      }
    }
    free(used);
  } else {
    check(o->prob.batch >= 1 && o->prob.batch <= 1 << 16, "batch out of range");
    check(o->prob.seqlen_q >= 1 && o->prob.seqlen_q <= 1 << 24 && o->prob.seqlen_k >= 1 &&
          o->prob.seqlen_k <= 1 << 24, "seqlen out of range");
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char msgs[1 << 14];
  static FILE *err;
  if (!err && !(err = fmemopen(msgs, sizeof msgs, "w"))) abort();
  char *text = malloc(size + 1);  /* exactly the input: ASan sees any read past it */
  check(text != NULL, "out of memory");
  memcpy(text, data, size);
  text[size] = 0;
  char *argv[MAX_ARGS + 3] = {"kiln", "run"};
  int argc = 2;
  for (char *at = text; at <= text + size && argc < MAX_ARGS + 2; at += strlen(at) + 1)
    argv[argc++] = at;
  argv[argc] = NULL;
  argv_lo = argv + 2, argv_hi = argv + argc;
  text_lo = text, text_hi = text + size + 1;
  rewind(err);
  int rc;
  if (!strcmp(argv[2], "cache")) {
    const char *sub, *dir;
    rc = cli_parse_cache(argc - 1, argv + 1, &sub, &dir, err);
    check(rc != 0 || (!strcmp(sub, "ls") || !strcmp(sub, "verify") || !strcmp(sub, "clear")),
          "an unknown cache command accepted");
    check(rc != 0 || from_argv(dir), "the cache directory not from the vector");
  } else {
    static cli_options o;
    rc = cli_parse_options(argc, argv, 2, &o, err);
    if (rc == 0) check_options(&o, argc - 2);
    cli_options_free(&o);
    if (rc == 1) {
      int help = 0;
      for (int i = 2; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
      check(help, "--help answered without --help");
    }
  }
  fflush(err);
  check(rc >= 0 || ftell(err) > 0, "refused without a message");
  free(text);
  return 0;
}
