/* space.c — default search spaces, their text form, enumeration and resource pruning.
 *
 * The defaults are deliberately small: the space is the cross product of the axes, and every
 * point costs a compile (~0.1 s on the host) plus timed runs.  The host space varies only the
 * tile shape, which is all that changes host code; GPU spaces add warps and pipeline depth (and
 * waves_per_eu on AMD), which change the code objects' register and LDS use — the resources
 * kn_space_prune() compares against the limits.  Everything here is data: a new knob is a new
 * axis with a name, a new limit a new field with a name.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space.h"

static const char *const axis_names[KN_AXIS_COUNT] = {
    [KN_AXIS_BLOCK_M] = "block_m",   [KN_AXIS_BLOCK_N] = "block_n",
    [KN_AXIS_WARPS] = "warps",       [KN_AXIS_STAGES] = "stages",
    [KN_AXIS_WAVES_PER_EU] = "waves_per_eu", [KN_AXIS_MATRIX] = "matrix_instr",
};

static void set_axis(kn_space *s, kn_space_axis_id id, int n, const int *v) {
  kn_space_axis *a = &s->axis[id];
  a->name = axis_names[id];
  a->n = n;
  memcpy(a->values, v, sizeof *v * (size_t)n);
}

kn_status kn_space_default(kn_space *s, const char *template_name, const kn_arch *arch,
                           kn_diag *d) {
  memset(s, 0, sizeof *s);
  if (strcmp(template_name, "fwd") != 0)
    return kn_diag_set(d, KN_E_UNSUPPORTED, "no tuning space for template %s", template_name);
  snprintf(s->template_name, sizeof s->template_name, "%s", template_name);
  static const int tiles[] = {16, 32, 64, 128}, one[] = {1}, four[] = {4}, zero[] = {0};
  set_axis(s, KN_AXIS_BLOCK_M, 4, tiles);
  set_axis(s, KN_AXIS_BLOCK_N, 4, tiles);
  if (!arch) arch = kn_arch_host();
  bool host = arch->isa == KN_ISA_HOST;
  bool amd = arch->isa == KN_ISA_AMDGPU;
  if (host) {
    set_axis(s, KN_AXIS_WARPS, 1, four);
    set_axis(s, KN_AXIS_STAGES, 1, one);
    set_axis(s, KN_AXIS_WAVES_PER_EU, 1, zero);
    s->limits.max_tile_bytes = KN_SPACE_HOST_TILE_BYTES;
  } else {
    static const int warps[] = {4, 8}, stages[] = {1, 2, 3}, waves[] = {0, 1, 2};
    static const int gtiles[] = {32, 64, 128};
    set_axis(s, KN_AXIS_BLOCK_M, 3, gtiles);
    set_axis(s, KN_AXIS_BLOCK_N, 3, gtiles);
    set_axis(s, KN_AXIS_WARPS, 2, warps);
    set_axis(s, KN_AXIS_STAGES, 3, stages);
    set_axis(s, KN_AXIS_WAVES_PER_EU, amd ? 3 : 1, amd ? waves : zero);
  }
  /* the matrix-instruction axis: the registry's instructions of the arch (the names its
   * disassembler uses), or "" on the host */
  int nmatrix = 0;
  for (int i = 0; i < arch->nmma && nmatrix < KN_SPACE_MAX_VALUES; i++)
    if (arch->mma[i].mnemonic) nmatrix++;
  s->nmatrix = nmatrix > 0 ? nmatrix : 1;
  int idx[KN_SPACE_MAX_VALUES];
  for (int i = 0, j = 0; i < s->nmatrix; i++, j++) {
    idx[i] = i;
    while (nmatrix && !arch->mma[j].mnemonic) j++;
    snprintf(s->matrix_names[i], KN_TUNE_NAME_MAX, "%s", nmatrix ? arch->mma[j].mnemonic : "");
  }
  set_axis(s, KN_AXIS_MATRIX, s->nmatrix, idx);
  return KN_OK;
}

kn_status kn_space_apply(kn_space *s, const char *spec, kn_diag *d) {
  if (!spec) return KN_OK;
  char buf[1024];
  if (snprintf(buf, sizeof buf, "%s", spec) >= (int)sizeof buf)
    return kn_diag_set(d, KN_E_INVALID, "tuning space spec too long");
  /* items split by ';' and values by ',' by hand: strtok would pass over empty ones
   * ("block_m=16,,32", ";;;") as if they were not there */
  int nitems = 0;
  for (char *item = buf, *next; item; item = next) {
    if ((next = strchr(item, ';'))) *next++ = 0;
    while (*item == ' ') item++;
    if (!*item && !next && nitems) break; /* one ';' ending the spec */
    if (!*item && !next)
      return kn_diag_set(d, KN_E_INVALID, "tuning space: '%s' names no knob (KNOB=V1,V2;...)",
                         spec);
    if (!*item)
      return kn_diag_set(d, KN_E_INVALID, "tuning space: an empty item in '%s' (two ';' in a "
                         "row, or nothing but ';')", spec);
    nitems++;
    char *eq = strchr(item, '=');
    if (!eq) return kn_diag_set(d, KN_E_INVALID, "tuning space: '%s' is not name=values", item);
    *eq = 0;
    const char *name = item, *vals = eq + 1;
    if (!strncmp(name, "max_", 4)) {
      char *end;
      errno = 0;
      unsigned long long v = strtoull(vals, &end, 10);
      if (errno || end == vals || *end)
        return kn_diag_set(d, KN_E_INVALID, "tuning space: limit %s=%s is not a number", name, vals);
      if (!strcmp(name, "max_tile_bytes")) s->limits.max_tile_bytes = v;
      else if (!strcmp(name, "max_vgprs")) s->limits.max_vgprs = (int)v;
      else if (!strcmp(name, "max_lds_bytes")) s->limits.max_lds_bytes = v;
      else if (!strcmp(name, "max_spill_bytes")) s->limits.max_spill_bytes = v;
      else return kn_diag_set(d, KN_E_INVALID, "tuning space: unknown limit '%s'", name);
      continue;
    }
    int id = -1;
    for (int i = 0; i < KN_AXIS_COUNT; i++)
      if (!strcmp(name, axis_names[i])) id = i;
    if (id < 0) return kn_diag_set(d, KN_E_INVALID, "tuning space: unknown knob '%s'", name);
    int v[KN_SPACE_MAX_VALUES], n = 0;
    char vbuf[sizeof buf];
    snprintf(vbuf, sizeof vbuf, "%s", vals);
    for (char *t = vbuf, *tnext; t; t = tnext) {
      if ((tnext = strchr(t, ','))) *tnext++ = 0;
      if (!*t)
        return kn_diag_set(d, KN_E_INVALID, "tuning space: an empty value for %s in '%s'", name,
                           vals);
      if (n == KN_SPACE_MAX_VALUES)
        return kn_diag_set(d, KN_E_INVALID, "tuning space: too many values for %s", name);
      if (id == KN_AXIS_MATRIX) {
        int found = -1;
        for (int m = 0; m < s->nmatrix; m++)
          if (!strcmp(t, s->matrix_names[m])) found = m;
        if (found < 0)
          return kn_diag_set(d, KN_E_INVALID,
                             "tuning space: the target has no matrix instruction '%s'", t);
        v[n++] = found;
        continue;
      }
      char *end;
      errno = 0;
      long x = strtol(t, &end, 10);
      if (errno || end == t || *end || x < 0 || x > 1 << 20)
        return kn_diag_set(d, KN_E_INVALID, "tuning space: bad value '%s' for %s", t, name);
      v[n++] = (int)x;
    }
    if (!n) return kn_diag_set(d, KN_E_INVALID, "tuning space: no values for %s", name);
    set_axis(s, (kn_space_axis_id)id, n, v);
  }
  if (kn_space_size(s) > KN_SPACE_MAX_CANDIDATES)
    return kn_diag_set(d, KN_E_INVALID, "tuning space: more than 4096 candidates");
  return KN_OK;
}

int kn_space_size(const kn_space *s) {
  long n = 1;
  for (int i = 0; i < KN_AXIS_COUNT; i++) {
    n *= s->axis[i].n;
    if (n > KN_SPACE_MAX_CANDIDATES * 16L) return KN_SPACE_MAX_CANDIDATES + 1;
  }
  return (int)n;
}

void kn_space_point(const kn_space *s, int i, kn_tune_config *out) {
  int v[KN_AXIS_COUNT];
  for (int a = KN_AXIS_COUNT - 1; a >= 0; a--) {
    int n = s->axis[a].n;
    v[a] = s->axis[a].values[i % n];
    i /= n;
  }
  memset(out, 0, sizeof *out);
  out->block_m = v[KN_AXIS_BLOCK_M];
  out->block_n = v[KN_AXIS_BLOCK_N];
  out->warps = v[KN_AXIS_WARPS];
  out->stages = v[KN_AXIS_STAGES];
  out->waves_per_eu = v[KN_AXIS_WAVES_PER_EU];
  int m = v[KN_AXIS_MATRIX];
  snprintf(out->matrix_instr, sizeof out->matrix_instr, "%s",
           m >= 0 && m < s->nmatrix ? s->matrix_names[m] : "");
}

const char *kn_space_prune(const kn_space *s, uint64_t tile_bytes, int vgprs, uint64_t lds_bytes,
                           uint64_t spill_bytes, char *why, size_t whysize) {
  const kn_space_limits *l = &s->limits;
  if (l->max_tile_bytes && tile_bytes > l->max_tile_bytes)
    snprintf(why, whysize, "tiles need %llu bytes > max_tile_bytes %llu",
             (unsigned long long)tile_bytes, (unsigned long long)l->max_tile_bytes);
  else if (l->max_vgprs && vgprs > l->max_vgprs)
    snprintf(why, whysize, "%d registers > max_vgprs %d", vgprs, l->max_vgprs);
  else if (l->max_lds_bytes && lds_bytes > l->max_lds_bytes)
    snprintf(why, whysize, "LDS %llu bytes > max_lds_bytes %llu", (unsigned long long)lds_bytes,
             (unsigned long long)l->max_lds_bytes);
  else if (l->max_spill_bytes && spill_bytes > l->max_spill_bytes)
    snprintf(why, whysize, "spills %llu bytes > max_spill_bytes %llu",
             (unsigned long long)spill_bytes, (unsigned long long)l->max_spill_bytes);
  else
    return NULL;
  return why;
}

int kn_space_describe(const kn_space *s, char *out, size_t size) {
  size_t len = 0;
  out[0] = 0;
  for (int a = 0; a < KN_AXIS_COUNT; a++) {
    len += (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%s=", a ? ";" : "",
                            axis_names[a]);
    for (int i = 0; i < s->axis[a].n; i++) {
      if (a == KN_AXIS_MATRIX)
        len += (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%s", i ? "," : "",
                                s->matrix_names[s->axis[a].values[i]]);
      else
        len += (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%d", i ? "," : "",
                                s->axis[a].values[i]);
    }
  }
  if (s->limits.max_tile_bytes)
    len += (size_t)snprintf(out + len, len < size ? size - len : 0, ";max_tile_bytes=%llu",
                            (unsigned long long)s->limits.max_tile_bytes);
  return len < size ? 0 : -1;
}
