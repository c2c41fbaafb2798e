/* admin.c — the cache directory through the public API: list its entries and tuning records,
 * verify, clear (include/kiln.h; what `kiln cache ls|verify|clear` prints).
 *
 * The context owns the cache handle (opened, and checked for safety, at creation), so these are
 * thin: they call the storage layers (runtime/cache.h, autotune/tunedb.h) on it and copy the
 * results into the public structs, statuses into kiln_status with the layer's message.  Listing
 * changes nothing: the tuning database is opened read-only, only when it exists, and a bad one is
 * a warning, not moved aside (api_db would create or replace it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

static kiln_status need_cache(kiln_context *ctx, const char *what) {
  if (!ctx) return api_fail(KILN_ERR_INVALID, "%s: null context", what);
  if (!ctx->cache) return api_fail(KILN_ERR_INVALID, "%s: the context has no cache directory", what);
  return KILN_OK;
}

static kiln_status layer_fail(kn_status st, const char *what, const kn_diag *why) {
  return api_fail(api_status_of(st), "%s: %s", what, why->message);
}

_Static_assert(sizeof(((kiln_tuning_record *)0)->variant) >= KN_TUNE_VARIANT_MAX &&
                   KN_TUNE_VARIANT_MAX >= KN_ATTN_KEY_MAX,
               "a tuning record's variant holds a whole descriptor key");

static void copy_record(const kn_tune_record *t, kiln_tuning_record *r) {
  memset(r, 0, sizeof *r);
  snprintf(r->template_name, sizeof r->template_name, "%s", t->key.template_name);
  snprintf(r->variant, sizeof r->variant, "%s", t->key.variant);
  snprintf(r->dtype, sizeof r->dtype, "%s", t->key.dtype);
  r->head_dim = t->key.head_dim;
  r->seq_bucket = t->key.seq_bucket;
  snprintf(r->arch, sizeof r->arch, "%s", t->key.arch);
  snprintf(r->kiln_version, sizeof r->kiln_version, "%s", t->key.kiln_version);
  r->block_m = t->config.block_m;
  r->block_n = t->config.block_n;
  r->warps = t->config.warps;
  r->stages = t->config.stages;
  r->time_us = t->time_us;
  r->tuned_at = t->tuned_at;
}

/* the records of an existing tuning database into *l: none when there is no file; a file that
 * cannot be read is a warning to the log, and stays as it is (listing changes nothing) */
static kiln_status list_records(kiln_context *ctx, kiln_cache_listing *l) {
  char path[sizeof l->tuning_db];
  snprintf(path, sizeof path, "%s/%s", ctx->cache_dir, KN_TUNEDB_FILE);
  kn_tunedb *db;
  kn_diag why;
  kn_status st = kn_tunedb_open_existing(kn_cache_dir_fd(ctx->cache), KN_TUNEDB_FILE, path, &db,
                                         &why);
  if (st == KN_MISS) return KILN_OK;
  if (kn_status_failed(st)) {
    api_log(ctx, KILN_LOG_WARN, "%s", why.message);
    return KILN_OK;
  }
  snprintf(l->tuning_db, sizeof l->tuning_db, "%s", path);
  kn_tune_record *recs = NULL;
  size_t n = 0;
  kiln_status s = KILN_OK;
  if ((st = kn_tunedb_list(db, &recs, &n, &why)) != KN_OK) {
    s = layer_fail(st, path, &why);
  } else if (n && !(l->records = calloc(n, sizeof *l->records))) {
    s = api_fail(KILN_ERR_NOMEM, "out of memory");
  } else {
    for (size_t i = 0; i < n; i++) copy_record(&recs[i], &l->records[i]);
    l->nrecords = n;
  }
  free(recs);
  kn_tunedb_close(db);
  return s;
}

kiln_status kiln_cache_list(kiln_context *ctx, kiln_cache_listing *out) {
  if (!out) return api_fail(KILN_ERR_INVALID, "kiln_cache_list: null output");
  memset(out, 0, sizeof *out);
  kiln_status s = need_cache(ctx, "kiln_cache_list");
  if (s) return s;
  out->max_bytes = kn_cache_max_bytes(ctx->cache);
  kn_cache_entry *e;
  size_t n;
  kn_diag why;
  kn_status st = kn_cache_list(ctx->cache, &e, &n, &why);
  if (st != KN_OK) return layer_fail(st, "listing the cache", &why);
  if (n && !(out->entries = calloc(n, sizeof *out->entries))) {
    free(e);
    return api_fail(KILN_ERR_NOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    kn_cache_key_hex(&e[i].key, out->entries[i].key);
    out->entries[i].bytes = e[i].file_bytes;
    out->entries[i].last_used = e[i].last_used;
  }
  out->nentries = n;
  free(e);
  s = list_records(ctx, out);
  if (s) kiln_cache_listing_free(out);
  return s;
}

void kiln_cache_listing_free(kiln_cache_listing *l) {
  if (!l) return;
  free(l->entries);
  free(l->records);
  l->entries = NULL;
  l->records = NULL;
  l->nentries = l->nrecords = 0;
}

static void copy_report(const kn_cache_report *r, kiln_cache_report *out) {
  if (!out) return;
  *out = (kiln_cache_report){.entries = r->entries, .valid = r->valid,
                             .removed_corrupt = r->removed_corrupt,
                             .removed_temp = r->removed_temp, .removed = r->removed_evicted,
                             .bytes = r->bytes, .corrupt_kept = r->corrupt_kept,
                             .kept_temp = r->kept_temp};
}

/* verify or clear: the storage layer's operation on the context's cache, its report copied */
static kiln_status cache_op(kiln_context *ctx,
                            kn_status (*op)(kn_cache *, kn_cache_report *, kn_diag *),
                            const char *what, kiln_cache_report *out) {
  if (out) memset(out, 0, sizeof *out);
  kiln_status s = need_cache(ctx, what);
  if (s) return s;
  kn_cache_report r;
  kn_diag why;
  kn_status st = op(ctx->cache, &r, &why);
  if (st != KN_OK) return layer_fail(st, what, &why);
  copy_report(&r, out);
  return KILN_OK;
}

kiln_status kiln_cache_verify(kiln_context *ctx, kiln_cache_report *out) {
  return cache_op(ctx, kn_cache_verify, "verifying the cache", out);
}

kiln_status kiln_cache_clear(kiln_context *ctx, kiln_cache_report *out) {
  return cache_op(ctx, kn_cache_clear, "clearing the cache", out);
}
