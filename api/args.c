/* args.c — the public API's arguments, checked: the descriptor's one conversion between kiln.h's
 * and the template's (api_desc_from_public), the modifier text's signature and the modifier
 * values, and everything kiln_forward and kiln_backward check before a launch
 * (api_forward_args, api_backward_args): sizes, the variant's values, varlen's prefix sums, a
 * paged call's block table, cache lengths and pools, the reach of every described buffer, the
 * GPU vector alignment; then the kernels' argument lists and grids (also decode's split and
 * combine kernels', api_decode_args).  Also a paged call's append on the host
 * (api_paged_append_host): plain C over the caller's buffers, which fuzz_api runs on what these
 * checks accept.
 *
 * Kept apart from kiln.c (contexts, the memo, the cache, compiling) so that nothing here needs a
 * context, a device or LLVM: a kernel is seen through api_launch_view (its descriptor,
 * signature, tiling and device kind), and fuzz/fuzz_api.c drives these checks on decoded bytes
 * with the reference interpreter as the launch, whose every access is checked against the
 * buffers the arguments describe.  Every rejection is api_fail's status and thread-local
 * message; nothing is printed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* ---- the descriptor: the one conversion between kiln.h's and the template's ---- */

/* the public dtypes and the template's scalar types, both ways */
static const struct { kiln_dtype pub; kn_scalar s; } dtypes[] = {
    {KILN_F16, KN_F16}, {KILN_BF16, KN_BF16}, {KILN_F32, KN_F32},
    {KILN_F8E4M3, KN_F8E4M3}, {KILN_F8E5M2, KN_F8E5M2}, {KILN_F8E4M3FNUZ, KN_F8E4M3FNUZ},
    {KILN_F8E5M2FNUZ, KN_F8E5M2FNUZ}};
enum { NDTYPES = sizeof dtypes / sizeof dtypes[0] };

const char *kiln_dtype_name(kiln_dtype t) {
  for (int i = 0; i < NDTYPES; i++)
    if (dtypes[i].pub == t) return kn_scalar_name(dtypes[i].s);
  return NULL;
}

kiln_status api_desc_from_public(const kiln_attn_desc *in, kn_attn_desc *out) {
  if (!in) return api_fail(KILN_ERR_INVALID, "null descriptor");
  memset(out, 0, sizeof *out);
  int i = 0;
  while (i < NDTYPES && dtypes[i].pub != in->dtype) i++;
  if (i == NDTYPES)
    return api_fail(KILN_ERR_UNSUPPORTED, "dtype %d is not a kiln_dtype", (int)in->dtype);
  if (in->causal < KILN_CAUSAL_NONE || in->causal > KILN_CAUSAL_TOP_LEFT)
    return api_fail(KILN_ERR_INVALID, "causal %d is not KILN_CAUSAL_NONE (0), "
                    "KILN_CAUSAL_BOTTOM_RIGHT (1) or KILN_CAUSAL_TOP_LEFT (2)", in->causal);
  if (in->prefix && in->causal)
    return api_fail(KILN_ERR_INVALID, "prefix includes its causal part: leave causal 0 with "
                    "prefix");
  if (in->layout != KILN_LAYOUT_DENSE && in->layout != KILN_LAYOUT_VARLEN &&
      in->layout != KILN_LAYOUT_PAGED)
    return api_fail(KILN_ERR_INVALID, "layout %d is not KILN_LAYOUT_DENSE (0), "
                    "KILN_LAYOUT_VARLEN (1) or KILN_LAYOUT_PAGED (2)", in->layout);
  out->dtype = dtypes[i].s;
  /* fp8 inputs: 0 (unset, KN_I1 in the template) or a kiln_dtype; kn_attn_check says which */
  const kiln_dtype in_t[2] = {in->q_dtype, in->kv_dtype};
  kn_scalar *out_t[2] = {&out->q_dtype, &out->kv_dtype};
  for (int w = 0; w < 2; w++) {
    int j = 0;
    while (in_t[w] && j < NDTYPES && dtypes[j].pub != in_t[w]) j++;
    if (j == NDTYPES)
      return api_fail(KILN_ERR_UNSUPPORTED, "%s %d is not a kiln_dtype", w ? "kv_dtype" : "q_dtype",
                      (int)in_t[w]);
    *out_t[w] = in_t[w] && dtypes[j].s != out->dtype ? dtypes[j].s : KN_I1;
  }
  out->head_dim = in->head_dim;
  out->causal = in->causal;
  out->has_lse = in->has_lse != 0;
  out->window = in->window != 0;
  out->softcap = in->softcap != 0;
  out->alibi = in->alibi != 0;
  out->bias = in->bias != 0;
  out->document = in->document != 0;
  out->prefix = in->prefix != 0;
  out->mods = in->mods && in->mods[0] ? in->mods : NULL;
  out->mods_file = in->mods_name;
  out->layout = in->layout;
  if (!(in->dropout_p >= 0 && in->dropout_p < 1))
    return api_fail(KILN_ERR_INVALID, "dropout_p %g is not a probability in [0, 1)",
                    (double)in->dropout_p);
  out->dropout = in->dropout_p;
  kn_attn_config c = kn_attn_default_config(NULL, out);
  kn_diag diag;
  if (kn_attn_check(out, &c, &diag)) return api_fail(KILN_ERR_UNSUPPORTED, "%s", diag.message);
  return KILN_OK;
}

kiln_attn_desc api_desc_to_public(const kn_attn_desc *d) {
  kiln_attn_desc out = {.head_dim = d->head_dim, .causal = d->causal, .has_lse = d->has_lse,
                        .window = d->window, .softcap = d->softcap, .alibi = d->alibi,
                        .bias = d->bias, .document = d->document, .prefix = d->prefix,
                        .mods = d->mods, .mods_name = d->mods_file, .layout = d->layout,
                        .dropout_p = d->dropout};
  for (int i = 0; i < NDTYPES; i++) {
    if (dtypes[i].s == d->dtype) out.dtype = dtypes[i].pub;
    if (d->q_dtype != KN_I1 && dtypes[i].s == d->q_dtype) out.q_dtype = dtypes[i].pub;
    if (d->kv_dtype != KN_I1 && dtypes[i].s == d->kv_dtype) out.kv_dtype = dtypes[i].pub;
  }
  return out;
}

/* ---- the modifier text and its values ---- */

const char *api_diag_text(const kn_diag *d, char *buf, size_t n) {
  if (d->loc.line <= 0) {
    snprintf(buf, n, "%s", d->message);
    return buf;
  }
  snprintf(buf, n, "%s", d->rendered);
  size_t len = strlen(buf);
  while (len && buf[len - 1] == '\n') buf[--len] = 0;
  return buf;
}

kiln_status api_signature(const kn_attn_desc *d, kn_attn_sig *sig) {
  kn_diag diag;
  if (kn_attn_signature(d, sig, &diag) == 0) return KILN_OK;
  char msg[API_ERROR_MAX];
  return api_fail(KILN_ERR_INVALID, "%s", api_diag_text(&diag, msg, sizeof msg));
}

int api_user_params(const kn_attn_desc *d, const kn_attn_sig *sig, bool *user) {
  int n = 0;
  for (int i = 0; i < sig->n; i++) {
    user[i] = i >= KN_ATTN_NPARAMS && !kn_attn_param_builtin(d, sig->name[i]);
    n += user[i];
  }
  return n;
}

/* the kn_argval of a for a parameter of type t; NULL, or why not */
static const char *mod_value(const kiln_mod_arg *a, kn_type t, kn_argval *out, char *why,
                             size_t n) {
  char ty[48];
  kn_ty_format(t, ty, sizeof ty);
  if (t.kind == KN_TY_PTR) {
    if (a->kind != KILN_MOD_ARG_PTR) snprintf(why, n, "is %s: give a KILN_MOD_ARG_PTR", ty);
    else if (!a->p) snprintf(why, n, "(%s) is NULL", ty);
    else return out->p = (void *)a->p, NULL;
    return why;
  }
  if (t.kind == KN_TY_SCALAR && kn_scalar_is_float((kn_scalar)t.elem)) {
    if (a->kind == KILN_MOD_ARG_FLOAT) out->f = a->f;
    else if (a->kind == KILN_MOD_ARG_INT) out->f = (double)a->i;
    else return snprintf(why, n, "is %s: give a KILN_MOD_ARG_FLOAT", ty), why;
    return NULL;
  }
  if (t.kind != KN_TY_SCALAR || !kn_scalar_is_int((kn_scalar)t.elem))
    return snprintf(why, n, "has type %s, which takes no value", ty), why;
  if (a->kind != KILN_MOD_ARG_INT)
    return snprintf(why, n, "is %s: give a KILN_MOD_ARG_INT", ty), why;
  int bits = t.elem == KN_I1 ? 1 : 8 * (int)kn_scalar_size((kn_scalar)t.elem);
  if (bits < 64) {
    int64_t lo = bits == 1 ? 0 : -((int64_t)1 << (bits - 1)),
            hi = bits == 1 ? 1 : ((int64_t)1 << (bits - 1)) - 1;
    if (a->i < lo || a->i > hi)
      return snprintf(why, n, "is %s: %lld is out of its range", ty, (long long)a->i), why;
  }
  out->i = a->i;
  return NULL;
}

kiln_status api_mod_args(const kn_attn_sig *sig, const bool *user, const kiln_mod_arg *args,
                         int nargs, kn_attn_named_arg *out, const char *who, const char *from) {
  if (nargs < 0 || (nargs > 0 && !args))
    return api_fail(KILN_ERR_INVALID, "%s: %d modifier arguments at %p", who, nargs,
                    (const void *)args);
  bool seen[KN_ATTN_MAX_PARAMS] = {0};
  int nuser = 0;
  for (int i = 0; i < sig->n; i++) nuser += user[i];
  for (int j = 0; j < nargs; j++) {
    const kiln_mod_arg *a = &args[j];
    if (!nuser)
      return api_fail(KILN_ERR_INVALID, "%s: modifier arguments given, but the kernel's modifiers "
                      "take no parameters", who);
    int i = 0;
    while (i < sig->n && !(user[i] && a->name && !strcmp(sig->name[i], a->name))) i++;
    if (i == sig->n) {
      char names[400] = "";
      for (int u = 0; u < sig->n; u++)
        if (user[u] && strlen(names) + strlen(sig->name[u]) + 4 < sizeof names)
          strcat(strcat(names, names[0] ? ", %" : "%"), sig->name[u]);
      return api_fail(KILN_ERR_INVALID, "%s: '%s' is not a parameter of the kernel's modifiers "
                      "(they take %s)", who, a->name ? a->name : "(null)", names);
    }
    if (seen[i])
      return api_fail(KILN_ERR_INVALID, "%s: the modifier parameter %%%s is given twice", who,
                      a->name);
    seen[i] = true;
    char why[120];
    kn_argval v = {.i = 0};
    if (mod_value(a, sig->type[i], &v, why, sizeof why))
      return api_fail(KILN_ERR_INVALID, "%s: the modifier parameter %%%s %s", who, a->name, why);
    out[j] = (kn_attn_named_arg){.name = sig->name[i], .value = v, .bytes = a->bytes};
  }
  for (int i = 0; i < sig->n; i++)
    if (user[i] && !seen[i]) {
      char ty[48];
      kn_ty_format(sig->type[i], ty, sizeof ty);
      return api_fail(KILN_ERR_INVALID, "%s: the modifier parameter %%%s (%s) has no value (%s)",
                      who, sig->name[i], ty, from);
    }
  return KILN_OK;
}

/* ---- forward ---- */

/* parameter indices of the template's strides (templates/attention.h order) */
enum { ARG_Q_SB = 10, ARG_K_SB = 13, ARG_V_SB = 16, ARG_O_SB = 19, ARG_LSE_SB = 22 };

static bool all_zero(const int64_t *s, int n) {
  for (int i = 0; i < n; i++)
    if (s[i]) return false;
  return true;
}

/* The variant's values of a: va for kn_attn_fill_args (named: room for its mods).  The fields of
 * a variant the kernel lacks must be zero; those it has are checked for range here, NULL tensors
 * and missing values by kn_attn_fill_args. */
static kiln_status variant_args(const api_launch_view *k, const kiln_attn_args *a,
                                kn_attn_vargs *va, kn_attn_named_arg *named, const char *who) {
  const kn_attn_desc *d = k->desc;
  memset(va, 0, sizeof *va);
  const struct { bool on, given; const char *what, *fields; } v[] = {
      {d->window, a->window_left || a->window_right, "window", "window_left/window_right"},
      {d->softcap, a->softcap != 0, "softcap", "softcap"},
      {d->alibi, a->alibi_slopes || a->alibi_stride, "alibi", "alibi_slopes/alibi_stride"},
      {d->bias, a->bias || !all_zero(a->bias_stride, 3), "bias", "bias/bias_stride"},
      {d->document, a->q_seg || a->k_seg || a->q_seg_stride || a->k_seg_stride, "document",
       "q_seg/k_seg"},
      {d->prefix, a->prefix_len != 0, "prefix", "prefix_len"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    if (!v[i].on && v[i].given)
      return api_fail(KILN_ERR_INVALID, "%s: %s given, but the kernel was not prepared with the "
                      "%s variant", who, v[i].fields, v[i].what);
  const int64_t H = a->heads, Nq = a->seqlen_q, Nk = a->seqlen_k;
  if (d->layout != KN_ATTN_VARLEN &&
      (a->cu_seqlens_q || a->cu_seqlens_k || a->total_q || a->total_k))
    return api_fail(KILN_ERR_INVALID, "%s: cu_seqlens_q/cu_seqlens_k/total_q/total_k given, but "
                    "the kernel was not prepared with layout KILN_LAYOUT_VARLEN", who);
  if (d->layout != KN_ATTN_PAGED &&
      (a->block_table || a->cache_seqlens || a->block_table_stride || a->page_size ||
       a->num_pages || a->max_pages || a->k_new || a->v_new || a->seqlen_new))
    return api_fail(KILN_ERR_INVALID, "%s: block_table/cache_seqlens/page_size/num_pages/"
                    "max_pages/k_new/v_new/seqlen_new given, but the kernel was not prepared "
                    "with layout KILN_LAYOUT_PAGED", who);
  if (d->window && (a->window_left < -1 || a->window_right < -1))
    return api_fail(KILN_ERR_INVALID, "%s: window sizes %d, %d: each is -1 (unbounded) or >= 0",
                    who, a->window_left, a->window_right);
  va->window_left = a->window_left;
  va->window_right = a->window_right;
  if (d->softcap && !(a->softcap > 0 && !isinf(a->softcap)))
    return api_fail(KILN_ERR_INVALID, "%s: softcap %g must be finite and > 0", who, a->softcap);
  va->softcap = a->softcap;
  if (a->alibi_stride < 0 || a->q_seg_stride < 0 || a->k_seg_stride < 0 ||
      a->bias_stride[0] < 0 || a->bias_stride[1] < 0 || a->bias_stride[2] < 0)
    return api_fail(KILN_ERR_INVALID, "%s: negative variant tensor stride", who);
  va->alibi_slopes = a->alibi_slopes;
  va->alibi_sb = a->alibi_stride;
  va->bias = a->bias;
  bool contiguous = all_zero(a->bias_stride, 3);
  if (d->bias) { /* (check_extents, called first, bounded these products) */
    va->bias_sb = contiguous ? H * Nq * Nk : a->bias_stride[0];
    va->bias_sh = contiguous ? Nq * Nk : a->bias_stride[1];
    va->bias_sm = contiguous ? Nk : a->bias_stride[2];
  }
  va->q_seg = a->q_seg;
  va->k_seg = a->k_seg;
  va->q_seg_sb = a->q_seg_stride ? a->q_seg_stride : Nq;
  va->k_seg_sb = a->k_seg_stride ? a->k_seg_stride : Nk;
  if (d->prefix && a->prefix_len < 0)
    return api_fail(KILN_ERR_INVALID, "%s: prefix_len %d is negative", who, a->prefix_len);
  va->prefix_len = a->prefix_len;
  kiln_status s = api_mod_args(k->sig, k->user_param, a->mod_args, a->n_mod_args, named, who,
                               "kiln_attn_args.mod_args");
  va->mods = named;
  va->nmods = a->n_mod_args;
  return s;
}

/* ---- capacities (kiln.h, docs/api.md: "Capacities") ---- */

/* the elements a view of n dims (sizes, strides) plus `inner` contiguous ones reaches from its
 * pointer: 0 when it is empty, -1 when a stride is negative, INT64_MAX when the span does not
 * fit in int64 (more than any described capacity: the caller's check then refuses it) */
static int64_t view_span(const int64_t *size, const int64_t *stride, int n, int64_t inner) {
  int64_t end = inner;
  for (int i = 0; i < n; i++) {
    if (size[i] == 0) return 0;
    if (stride[i] < 0) return -1;
  }
  for (int i = 0; i < n; i++) {
    int64_t step;
    if (size[i] < 1 || __builtin_mul_overflow(size[i] - 1, stride[i], &step) ||
        __builtin_add_overflow(end, step, &end))
      return INT64_MAX;
  }
  return end;
}

/* a buffer that its layout reaches past (only when its size is described) */
static kiln_status check_span(const char *who, const char *name, int64_t numel,
                              const int64_t *size, const int64_t *stride, int n, int64_t inner) {
  if (numel < 0)
    return api_fail(KILN_ERR_INVALID, "%s: %s_numel %lld is negative", who, name,
                    (long long)numel);
  if (!numel) return KILN_OK;
  int64_t span = view_span(size, stride, n, inner);
  if (span < 0)
    return api_fail(KILN_ERR_INVALID, "%s: %s has a negative stride; a described "
                    "capacity (%s_numel) needs strides >= 0", who, name, name);
  if (span == INT64_MAX)
    return api_fail(KILN_ERR_INVALID, "%s: %s's shape and strides reach past 2^63 elements, "
                    "more than any buffer holds (%s_numel %lld)", who, name, name,
                    (long long)numel);
  if (span > numel)
    return api_fail(KILN_ERR_INVALID, "%s: %s holds %lld elements (%s_numel), but the "
                    "shape and strides described reach %lld", who, name, (long long)numel, name,
                    (long long)span);
  return KILN_OK;
}

/* A buffer kiln writes (o, lse; the backward's dq, dk, dv): no two of its elements may share an
 * address, or programs race on them and the result depends on which wrote last (a zero head
 * stride over many heads once made a 2^28-head decode call fit a 64-element o, and its
 * workspace 18 GB: fuzz_api).  The dims of size > 1, innermost stride first, each step at
 * least the span of those inside it (`inner` contiguous elements innermost): the sufficient
 * rule that every strided layout of a real tensor meets ((B, H, N, D), (B, N, H, D), padded
 * rows or heads). */
static kiln_status check_apart(const char *who, const char *name, const int64_t *size,
                               const int64_t *stride, int n, int64_t inner) {
  int idx[4], m = 0;
  for (int i = 0; i < n && m < 4; i++)
    if (size[i] > 1) idx[m++] = i;
  for (int i = 1; i < m; i++)  /* by stride, ascending (at most four dims) */
    for (int j = i; j > 0 && stride[idx[j]] < stride[idx[j - 1]]; j--) {
      int t = idx[j];
      idx[j] = idx[j - 1], idx[j - 1] = t;
    }
  int64_t span = inner;
  for (int i = 0; i < m; i++) {
    const int64_t st = stride[idx[i]], sz = size[idx[i]];
    int64_t step;
    if (st < span)
      return api_fail(KILN_ERR_INVALID, "%s: %s is written, and its stride %lld over a dim of "
                      "%lld is less than the %lld elements inside it: rows would overlap", who,
                      name, (long long)st, (long long)sz, (long long)span);
    if (__builtin_mul_overflow(sz - 1, st, &step) || __builtin_add_overflow(span, step, &span))
      return KILN_OK;  /* past 2^63: check_span's to refuse where a size is described */
  }
  return KILN_OK;
}

/* A buffer kiln writes: it holds what its layout reaches, and no two of its elements share an
 * address (one call, so the two rules cannot drift apart at the sites of o, lse, dq, dk, dv) */
static kiln_status check_written(const char *who, const char *name, int64_t numel,
                                 const int64_t *size, const int64_t *stride, int n, int64_t inner) {
  kiln_status s = check_span(who, name, numel, size, stride, n, inner);
  return s ? s : check_apart(who, name, size, stride, n, inner);
}

/* Every described buffer holds what its layout reaches, and zero strides are not read over a
 * dense q/k/v/o larger than its contiguous shape (the zero-stride trap).  args: the kernel's
 * arguments with the effective strides; va: the variant's; lse_read: a backward, which reads lse
 * whether or not the descriptor's forward writes it. */
static kiln_status check_capacities(const kn_attn_desc *d, const kiln_attn_args *a,
                                    const kn_argval *args, const kn_attn_vargs *va,
                                    const char *who, bool lse_read) {
  const bool varlen = d->layout == KN_ATTN_VARLEN;
  const int64_t D = d->head_dim, B = a->batch, H = a->heads, HK = a->kv_heads;
  static const char *const names[] = {"q", "k", "v", "o"};
  const int64_t numel[] = {a->q_numel, a->k_numel, a->v_numel, a->o_numel};
  const int64_t *given[] = {a->q_stride, a->k_stride, a->v_stride, a->o_stride};
  kiln_status s;
  for (int i = 0; i < 4; i++) {
    bool qo = i == 0 || i == 3;
    const int64_t heads = qo ? H : HK, rows = qo ? a->seqlen_q : a->seqlen_k;
    const kn_argval *st = args + ARG_Q_SB + 3 * i;  /* {batch, head, row} */
    if (varlen) {  /* (total, heads, D) with {token, head} */
      int64_t size[2] = {qo ? a->total_q : a->total_k, heads}, stride[2] = {st[2].i, st[1].i};
      if ((s = (i == 3 ? check_written : check_span)(who, names[i], numel[i], size, stride, 2, D)))
        return s;
      continue;
    }
    if (d->layout == KN_ATTN_PAGED && !qo) {  /* a pool: {page, head, row}, no trap to fall in */
      int64_t size[3] = {a->num_pages, heads, a->page_size}, stride[3] = {st[0].i, st[1].i, st[2].i};
      if ((s = check_span(who, names[i], numel[i], size, stride, 3, D))) return s;
      continue;
    }
    int64_t size[3] = {B, heads, rows}, stride[3] = {st[0].i, st[1].i, st[2].i};
    if ((s = (i == 3 ? check_written : check_span)(who, names[i], numel[i], size, stride, 3, D)))
      return s;
    int64_t dense = B * heads * rows * D;
    if (numel[i] > dense && all_zero(given[i], 3) && B * heads > 1)
      return api_fail(KILN_ERR_INVALID, "%s: %s holds %lld elements (%s_numel), more "
                      "than the contiguous (%lld, %lld, %lld, %lld) its zero strides describe: "
                      "rows would be read %lld apart; give %s_stride (a buffer of C rows per "
                      "head: {%lld*C*%lld, C*%lld, %lld})", who, names[i], (long long)numel[i],
                      names[i], (long long)B, (long long)heads, (long long)rows, (long long)D,
                      (long long)D, names[i], (long long)heads, (long long)D, (long long)D,
                      (long long)D);
  }
  if (d->has_lse || lse_read) {
    int64_t size[2] = {varlen ? 1 : B, H}, stride[2] = {args[ARG_LSE_SB].i, args[ARG_LSE_SB + 1].i};
    if ((s = (d->has_lse ? check_written : check_span)(who, "lse", a->lse_numel, size, stride, 2,
                                                       varlen ? a->total_q : a->seqlen_q)))
      return s;
  }
  if (d->alibi) {
    int64_t size[2] = {B, H}, stride[2] = {va->alibi_sb, 1};
    if ((s = check_span(who, "alibi", a->alibi_numel, size, stride, 2, 1))) return s;
  }
  if (d->bias) {
    int64_t size[3] = {B, H, a->seqlen_q}, stride[3] = {va->bias_sb, va->bias_sh, va->bias_sm};
    if ((s = check_span(who, "bias", a->bias_numel, size, stride, 3, a->seqlen_k))) return s;
  }
  if (d->layout == KN_ATTN_PAGED) {
    int64_t size[1] = {B}, st[1] = {a->block_table_stride ? a->block_table_stride : a->max_pages};
    if ((s = check_span(who, "block_table", a->block_table_numel, size, st, 1, a->max_pages)))
      return s;
    for (int w = 0; w < 2 && a->seqlen_new; w++) {
      const int64_t *g = w ? a->v_new_stride : a->k_new_stride;
      int64_t nsize[3] = {B, HK, a->seqlen_new};
      int64_t nst[3] = {g[0], g[1], g[2]};
      if (all_zero(g, 3))
        nst[0] = (int64_t)a->seqlen_new * HK * D, nst[1] = D, nst[2] = HK * D;
      if ((s = check_span(who, w ? "v_new" : "k_new", w ? a->v_new_numel : a->k_new_numel, nsize,
                          nst, 3, D)))
        return s;
    }
  }
  if (d->document) {
    int64_t size[1] = {B}, sq[1] = {va->q_seg_sb}, sk[1] = {va->k_seg_sb};
    if ((s = check_span(who, "q_seg", a->q_seg_numel, size, sq, 1, a->seqlen_q))) return s;
    if ((s = check_span(who, "k_seg", a->k_seg_numel, size, sk, 1, a->seqlen_k))) return s;
  }
  return KILN_OK;
}

/* Varlen arguments: the prefix sums are given, total_q/total_k are not negative, the batch
 * stride slots are 0 (a packed buffer has no batch axis); on the host (cu_seqlens readable)
 * each sequence is a range of at most seqlen_q / seqlen_k tokens within the totals. */
static kiln_status check_varlen(const api_launch_view *k, const kiln_attn_args *a) {
  if (!a->cu_seqlens_q || !a->cu_seqlens_k)
    return api_fail(KILN_ERR_INVALID, "kiln_forward: a varlen kernel needs cu_seqlens_q and "
                    "cu_seqlens_k (batch + 1 prefix sums each)");
  if (a->total_q < 0 || a->total_k < 0)
    return api_fail(KILN_ERR_INVALID, "kiln_forward: total_q %d, total_k %d: negative",
                    a->total_q, a->total_k);
  if (a->q_stride[0] || a->k_stride[0] || a->v_stride[0] || a->o_stride[0] || a->lse_stride[0])
    return api_fail(KILN_ERR_INVALID, "kiln_forward: varlen buffers have no batch axis: their "
                    "strides are {0, head, token} (lse {0, head})");
  /* On CUDA the prefix sums are device memory kiln does not read: the kernel clamps every
   * sequence into total_q / total_k and its lengths into max_seqlen_q / max_seqlen_k (the
   * call's seqlen_q / seqlen_k, the rows of bias and document tensors), so bad values give
   * wrong rows and no access outside q, k, v, o or those tensors (fuzz_api found the reads
   * past a bias before the kernel had the max lengths). */
  if (k->kind == KN_DEVICE_CUDA) return KILN_OK;  /* device memory: the kernel clamps */
  const int32_t *cu[2] = {a->cu_seqlens_q, a->cu_seqlens_k};
  const int total[2] = {a->total_q, a->total_k}, most[2] = {a->seqlen_q, a->seqlen_k};
  for (int w = 0; w < 2; w++) {
    const char *nm = w ? "cu_seqlens_k" : "cu_seqlens_q";
    if (cu[w][0] < 0)
      return api_fail(KILN_ERR_INVALID, "kiln_forward: %s[0] = %d is negative", nm, cu[w][0]);
    for (int b = 0; b < a->batch; b++) {
      int lo = cu[w][b], hi = cu[w][b + 1];
      if (hi < lo || hi > total[w] || hi - lo > most[w])
        return api_fail(KILN_ERR_INVALID, "kiln_forward: %s[%d..%d] = %d..%d: each sequence must "
                        "be a non-decreasing range of at most %s %d tokens within %s %d", nm, b,
                        b + 1, lo, hi, w ? "seqlen_k (max_seqlen_k)" : "seqlen_q (max_seqlen_q)",
                        most[w], w ? "total_k" : "total_q", total[w]);
    }
  }
  return KILN_OK;
}

/* Paged arguments (kiln.h): the table and lengths are given, the pools' shape is in range,
 * seqlen_k is 0 or the table's capacity, k_new and v_new come together; on the host (where
 * they can be read) every sequence's length after the append fits its table row and every
 * page it uses is a page of the pool.  The kernel clamps all of it again (attn_paged.c). */
static kiln_status check_paged(const api_launch_view *k, const kiln_attn_args *a) {
  const char *who = "kiln_forward";
  if (!a->block_table || !a->cache_seqlens)
    return api_fail(KILN_ERR_INVALID, "%s: a paged kernel needs block_table (batch, max_pages) "
                    "and cache_seqlens (batch)", who);
  if (a->page_size < 1 || a->page_size > KN_ATTN_MAX_PAGE)
    return api_fail(KILN_ERR_INVALID, "%s: page_size %d is not in 1..%d", who, a->page_size,
                    KN_ATTN_MAX_PAGE);
  if (a->num_pages < 0 || a->max_pages < 0 || a->seqlen_new < 0)
    return api_fail(KILN_ERR_INVALID, "%s: num_pages %d, max_pages %d, seqlen_new %d: negative",
                    who, a->num_pages, a->max_pages, a->seqlen_new);
  const int64_t cap = (int64_t)a->max_pages * a->page_size;
  if (cap > INT32_MAX)
    return api_fail(KILN_ERR_INVALID, "%s: max_pages %d x page_size %d keys per sequence exceed "
                    "2^31", who, a->max_pages, a->page_size);
  if (a->seqlen_k != 0 && a->seqlen_k != cap)
    return api_fail(KILN_ERR_INVALID, "%s: seqlen_k %d: a paged kernel's keys are cache_seqlens "
                    "(+ seqlen_new); seqlen_k must be 0 or max_pages * page_size = %lld", who,
                    a->seqlen_k, (long long)cap);
  if (a->block_table_stride != 0 && a->block_table_stride < a->max_pages)
    return api_fail(KILN_ERR_INVALID, "%s: block_table_stride %lld is less than max_pages %d",
                    who, (long long)a->block_table_stride, a->max_pages);
  if (!a->k_new != !a->v_new)
    return api_fail(KILN_ERR_INVALID, "%s: k_new and v_new come together (one is NULL)", who);
  if (a->k_new && a->seqlen_new == 0)
    return api_fail(KILN_ERR_INVALID, "%s: k_new given with seqlen_new 0", who);
  if (!a->k_new && (!all_zero(a->k_new_stride, 3) || !all_zero(a->v_new_stride, 3)))
    return api_fail(KILN_ERR_INVALID, "%s: k_new_stride/v_new_stride given without k_new", who);
  if (k->kind != KN_DEVICE_HOST) {
    if (a->k_new && k->kind != KN_DEVICE_CUDA)
      return api_fail(KILN_ERR_UNSUPPORTED, "%s: appending k_new/v_new on %s is not implemented "
                      "yet: write the new rows into the pages yourself and pass seqlen_new "
                      "with k_new NULL (docs/serving.md)", who,
                      k->target_name ? k->target_name
                      : k->kind == KN_DEVICE_HIP ? "hip" : "this device");
    return KILN_OK;  /* device memory: the kernels clamp */
  }
  const int64_t ts = a->block_table_stride ? a->block_table_stride : a->max_pages;
  for (int b = 0; b < a->batch; b++) {
    int64_t n = (int64_t)a->cache_seqlens[b] + a->seqlen_new;
    if (a->cache_seqlens[b] < 0 || n > cap)
      return api_fail(KILN_ERR_INVALID, "%s: cache_seqlens[%d] = %d (+ seqlen_new %d) is not in "
                      "0..%lld, what max_pages %d pages of %d address", who, b,
                      a->cache_seqlens[b], a->seqlen_new, (long long)cap, a->max_pages,
                      a->page_size);
    for (int64_t i = 0; i < (n + a->page_size - 1) / a->page_size; i++) {
      int32_t pg = a->block_table[(int64_t)b * ts + i];
      if (pg < 0 || pg >= a->num_pages)
        return api_fail(KILN_ERR_INVALID, "%s: block_table[%d, %lld] = %d is not a page of the "
                        "pool (0..%d, num_pages %d)", who, b, (long long)i, pg,
                        a->num_pages - 1, a->num_pages);
    }
  }
  return KILN_OK;
}

/* GPU kernels access the head dimension in vectors of up to 16 bytes, as wide as the head dim's
 * alignment allows (compiler/gpu/lower_gpu.c, kn_gpu_vec_aligned: 8 elements of f16 at D 72, 4
 * at D 60, 1 at D 59): the buffers' row, head and batch strides must keep every row that
 * aligned.  Contiguous layouts always do.  0, or KILN_ERR_INVALID naming the buffer. */
static kiln_status check_alignment(const kn_attn_desc *d, const kiln_attn_args *a,
                                   const kn_argval *args) {
  static const char *const names[] = {"q", "k", "v", "o"};
  const void *ptrs[] = {a->q, a->k, a->v, a->o};
  const kn_scalar types[] = {kn_attn_q_type(d), kn_attn_kv_type(d), kn_attn_kv_type(d), d->dtype};
  for (int i = 0; i < 4; i++) {
    int64_t es = (int64_t)kn_scalar_size(types[i]), v = 16 / es;  /* fp8: up to 16 elements */
    while (v > 1 && d->head_dim % v) v /= 2;
    bool qo = i == 0 || i == 3;
    /* the strides of dims of size 1 are never multiplied by anything but 0 */
    int tokens = qo ? a->total_q : a->total_k;  /* varlen: the batch slot is the token stride */
    int sizes[3] = {d->layout == KN_ATTN_VARLEN ? tokens : a->batch, qo ? a->heads : a->kv_heads,
                    d->layout == KN_ATTN_VARLEN ? tokens : qo ? a->seqlen_q : a->seqlen_k};
    if (d->layout == KN_ATTN_PAGED && !qo) sizes[0] = a->num_pages, sizes[2] = a->page_size;
    bool ok = (uintptr_t)ptrs[i] % (uintptr_t)(v * es) == 0;
    for (int j = 0; j < 3; j++) ok &= sizes[j] <= 1 || args[ARG_Q_SB + 3 * i + j].i % v == 0;
    if (!ok)
      return api_fail(KILN_ERR_INVALID, "kiln_forward: %s must be %lld-byte aligned with strides "
                      "that are multiples of %lld elements at head dim %d (the kernel's vector "
                      "accesses)", names[i], (long long)(v * es), (long long)v, d->head_dim);
  }
  return KILN_OK;
}

/* Sizes no buffer can have: kn_attn_check_sizes for every layout (it bounds each product of the
 * sizes the later checks form: variant_args's contiguous bias strides), and for the layouts with
 * caller strides the same bound (2^63 bytes) on the span those strides address; beyond it the
 * kernel's 64-bit offsets would wrap around to any address. */
static kiln_status check_extents(const kn_attn_desc *d, const kiln_attn_args *a,
                                 const kn_attn_problem *p) {
  kn_diag diag;
  if (kn_attn_check_sizes(d, p, &diag))
    return api_fail(KILN_ERR_INVALID, "kiln_forward: %s", diag.message);
  if (d->layout == KN_ATTN_VARLEN) return KILN_OK;  /* (packed: check_capacities bounds them) */
  const int64_t es = (int64_t)kn_scalar_size(d->dtype), D = d->head_dim;
  const int64_t qs = (int64_t)kn_scalar_size(kn_attn_q_type(d)),
                ks = (int64_t)kn_scalar_size(kn_attn_kv_type(d));
  const bool paged = d->layout == KN_ATTN_PAGED;
  const struct { const char *name; const int64_t *s; int n; int64_t dims[3], row, es; } t[] = {
      {"q", a->q_stride, 3, {a->batch, a->heads, a->seqlen_q}, D, qs},
      {"k", a->k_stride, 3, {paged ? a->num_pages : a->batch, a->kv_heads,
                             paged ? a->page_size : a->seqlen_k}, D, ks},
      {"v", a->v_stride, 3, {paged ? a->num_pages : a->batch, a->kv_heads,
                             paged ? a->page_size : a->seqlen_k}, D, ks},
      {"k_new", a->k_new_stride, 3, {a->batch, a->kv_heads, a->seqlen_new}, D, ks},
      {"v_new", a->v_new_stride, 3, {a->batch, a->kv_heads, a->seqlen_new}, D, ks},
      {"o", a->o_stride, 3, {a->batch, a->heads, a->seqlen_q}, D, es},
      {"lse", a->lse_stride, 2, {a->batch, a->heads}, a->seqlen_q, 4},
      {"bias", a->bias_stride, 3, {a->batch, a->heads, a->seqlen_q}, a->seqlen_k, es},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    int64_t span = t[i].row, m;
    bool ovf = false;
    for (int j = 0; !ovf && j < t[i].n; j++) {
      int64_t st = t[i].s[j], last = t[i].dims[j] > 1 ? t[i].dims[j] - 1 : 0;
      ovf = st == INT64_MIN || __builtin_mul_overflow(last, st < 0 ? -st : st, &m) ||
            __builtin_add_overflow(span, m, &span);
    }
    ovf = ovf || __builtin_mul_overflow(span, t[i].es, &span);
    if (ovf)
      return api_fail(KILN_ERR_INVALID, "kiln_forward: the strides of %s address more than 2^63 "
                      "bytes: no buffer is that large", t[i].name);
  }
  return KILN_OK;
}

/* the index of kernel parameter `name` (the paged ones are always there) */
static int sig_at(const kn_attn_sig *sig, const char *name) {
  for (int i = 0; i < sig->n; i++)
    if (!strcmp(sig->name[i], name)) return i;
  KN_ASSERT(!"kernel parameter missing");
  return 0;
}

/* flash_attn_with_kvcache's append on the host: k_new / v_new into the pools through the
 * table, before the launch (check_paged checked the positions and pages) */
kiln_status api_paged_append_host(const kn_attn_desc *d, const kiln_attn_args *a,
                                  const kn_argval *args) {
  const int64_t HK = a->kv_heads, D = d->head_dim, N = a->seqlen_new;
  kn_paged_append ap = {
      .batch = a->batch, .kv_heads = a->kv_heads, .head_dim = d->head_dim,
      .seqlen_new = a->seqlen_new, .page_size = a->page_size, .num_pages = a->num_pages,
      .max_pages = a->max_pages, .elem_size = kn_scalar_size(kn_attn_kv_type(d)),
      .block_table = a->block_table, .cache_seqlens = a->cache_seqlens,
      .table_stride = a->block_table_stride ? a->block_table_stride : a->max_pages,
      .k_pool = (void *)a->k, .v_pool = (void *)a->v, .k_new = a->k_new, .v_new = a->v_new};
  for (int i = 0; i < 3; i++) {
    ap.k_pool_stride[i] = args[ARG_K_SB + i].i;
    ap.v_pool_stride[i] = args[ARG_V_SB + i].i;
  }
  const int64_t dense[3] = {N * HK * D, D, HK * D};  /* (batch, seqlen_new, kv_heads, D) */
  memcpy(ap.k_new_stride, all_zero(a->k_new_stride, 3) ? dense : a->k_new_stride, sizeof dense);
  memcpy(ap.v_new_stride, all_zero(a->v_new_stride, 3) ? dense : a->v_new_stride, sizeof dense);
  kn_diag diag;
  if (kn_attn_paged_append(&ap, &diag))
    return api_fail(KILN_ERR_INVALID, "kiln_forward: %s", diag.message);
  return KILN_OK;
}

/* fp8 descales (kiln.h): each a (batch, kv_heads) f32 tensor with batch stride descale_stride
 * (0: kv_heads).  A stride below kv_heads would overlap the rows of two sequences, and a
 * described capacity (q_descale_numel, ...) must hold the furthest scale the rows reach,
 * (batch - 1) * stride + kv_heads; a capacity given for a NULL descale describes nothing. */
static kiln_status check_descales(const kiln_attn_args *a, const char *who) {
  if (a->descale_stride < 0)
    return api_fail(KILN_ERR_INVALID, "%s: descale_stride %lld is negative", who,
                    (long long)a->descale_stride);
  const int64_t HK = a->kv_heads, sb = a->descale_stride ? a->descale_stride : HK;
  if (a->batch > 1 && sb < HK)
    return api_fail(KILN_ERR_INVALID, "%s: descale_stride %lld is below kv_heads %lld: the "
                    "(batch, kv_heads) descale rows of two sequences would overlap (0 is "
                    "contiguous)", who, (long long)sb, (long long)HK);
  if (a->batch > 1 && sb > (INT64_MAX / 4 - HK) / (a->batch - 1))
    return api_fail(KILN_ERR_INVALID, "%s: descale_stride %lld addresses more than 2^63 bytes "
                    "over batch %d: no buffer is that large", who, (long long)sb, a->batch);
  static const char *const names[] = {"q_descale", "k_descale", "v_descale"};
  const float *t[] = {a->q_descale, a->k_descale, a->v_descale};
  const int64_t numel[] = {a->q_descale_numel, a->k_descale_numel, a->v_descale_numel};
  for (int i = 0; i < 3; i++) {
    if (numel[i] < 0)
      return api_fail(KILN_ERR_INVALID, "%s: %s_numel %lld is negative", who, names[i],
                      (long long)numel[i]);
    if (numel[i] && !t[i])
      return api_fail(KILN_ERR_INVALID, "%s: %s_numel %lld given, but %s is NULL (a NULL "
                      "descale is 1 and has no capacity)", who, names[i], (long long)numel[i],
                      names[i]);
    int64_t size[1] = {a->batch}, stride[1] = {sb};
    if (!numel[i] || a->batch == 0) continue;
    if (view_span(size, stride, 1, HK) > numel[i])
      return api_fail(KILN_ERR_INVALID, "%s: %s holds %lld scales (%s_numel), but batch %d x "
                      "kv_heads %lld at descale_stride %lld reach %lld (one scale per (batch, kv "
                      "head))", who, names[i], (long long)numel[i], names[i], a->batch,
                      (long long)HK, (long long)sb, (long long)view_span(size, stride, 1, HK));
  }
  return KILN_OK;
}

kiln_status api_forward_args(const api_launch_view *k, const kiln_attn_args *a, const char *who,
                             api_call *c) {
  const kn_attn_desc *d = k->desc;
  c->empty = c->append = false;
  if (!a) return api_fail(KILN_ERR_INVALID, "%s: null kernel or arguments", who);
  if (a->batch < 0 || a->heads <= 0 || a->kv_heads <= 0 || a->seqlen_q < 0 || a->seqlen_k < 0)
    return api_fail(KILN_ERR_INVALID, "%s: bad sizes (batch %d, heads %d, kv_heads %d, "
                    "seqlen_q %d, seqlen_k %d)", who, a->batch, a->heads, a->kv_heads, a->seqlen_q,
                    a->seqlen_k);
  if (a->heads % a->kv_heads)
    return api_fail(KILN_ERR_INVALID, "%s: heads %d is not a multiple of kv_heads %d", who,
                    a->heads, a->kv_heads);
  if (!a->q || !a->k || !a->v || !a->o)
    return api_fail(KILN_ERR_INVALID, "%s: null q, k, v or o", who);
  if (d->has_lse && !a->lse)
    return api_fail(KILN_ERR_INVALID, "%s: the kernel %s lse, but lse is null", who,
                    k->backward ? "reads" : "writes");
  if (!(a->sm_scale >= 0) || isinf(a->sm_scale))
    return api_fail(KILN_ERR_INVALID, "%s: sm_scale must be finite and >= 0", who);
  if ((int64_t)a->batch * a->heads > INT32_MAX)
    return api_fail(KILN_ERR_UNSUPPORTED, "%s: batch * heads exceeds the grid", who);
  const bool varlen = d->layout == KN_ATTN_VARLEN, paged = d->layout == KN_ATTN_PAGED;
  kiln_status s;
  if (paged && (s = check_paged(k, a))) return s;
  c->a = *a;
  a = &c->a;
  if (paged) c->a.seqlen_k = a->max_pages * a->page_size;  /* the table's capacity (kiln.h) */
  kn_attn_problem *p = &c->p;
  *p = (kn_attn_problem){.batch = a->batch, .heads = a->heads, .kv_heads = a->kv_heads,
                         .seqlen_q = a->seqlen_q, .seqlen_k = a->seqlen_k,
                         .sm_scale = a->sm_scale, .cu_seqlens_q = a->cu_seqlens_q,
                         .cu_seqlens_k = a->cu_seqlens_k, .total_q = a->total_q,
                         .total_k = a->total_k, .block_table = a->block_table,
                         .cache_seqlens = a->cache_seqlens, .page_size = a->page_size,
                         .num_pages = a->num_pages, .max_pages = a->max_pages,
                         .seqlen_new = a->seqlen_new, .q_descale = a->q_descale,
                         .k_descale = a->k_descale, .v_descale = a->v_descale,
                         .descale_sb = a->descale_stride, .dropout_seed = a->dropout_seed,
                         .dropout_offset = a->dropout_offset};
  if (d->dropout == 0 && (a->dropout_seed || a->dropout_offset))
    return api_fail(KILN_ERR_INVALID, "%s: dropout_seed / dropout_offset given, but the kernel "
                    "was not prepared with dropout (kiln_attn_desc.dropout_p)", who);
  if (!kn_attn_is_fp8(d) && (a->q_descale || a->k_descale || a->v_descale || a->descale_stride ||
                             a->q_descale_numel || a->k_descale_numel || a->v_descale_numel))
    return api_fail(KILN_ERR_INVALID, "%s: q_descale/k_descale/v_descale/descale_stride given, "
                    "but the kernel was not prepared with fp8 inputs (q_dtype / kv_dtype)", who);
  if ((s = check_descales(a, who))) return s;
  /* the sizes first: variant_args multiplies them (a bias's contiguous strides) */
  if ((s = check_extents(d, a, p))) return s;
  if ((s = variant_args(k, a, &c->va, c->named, who))) return s;
  if (varlen && (s = check_varlen(k, a))) return s;
  kn_argval *args = c->args;
  kn_diag diag;
  if (kn_attn_fill_args(d, k->sig, k->cfg, p, (void *)a->q, (void *)a->k, (void *)a->v, a->o,
                        a->lse, &c->va, args, c->grid, &diag))
    return api_fail(KILN_ERR_INVALID, "%s: %s", who, diag.message);
  /* (a backward with no query row still writes dK = dV = 0; an append still happens without
   * queries) */
  c->empty = a->batch == 0 || a->seqlen_q == 0;
  if (!k->backward && (a->batch == 0 || (a->seqlen_q == 0 && !(paged && a->k_new))))
    return KILN_OK;
  /* the caller's strides replace the contiguous ones kn_attn_fill_args computed */
  const struct { const int64_t *s; int n, at; } strides[] = {
      {a->q_stride, 3, ARG_Q_SB}, {a->k_stride, 3, ARG_K_SB}, {a->v_stride, 3, ARG_V_SB},
      {a->o_stride, 3, ARG_O_SB}, {a->lse_stride, 2, ARG_LSE_SB}};
  for (int i = 0; i < 5; i++)
    if (!all_zero(strides[i].s, strides[i].n))
      for (int j = 0; j < strides[i].n; j++) args[strides[i].at + j].i = strides[i].s[j];
  if (varlen) {
    /* the kernel's batch stride of a packed buffer is its token stride; lse's tokens are
     * contiguous (attention.h) */
    for (int i = 0; i < 4; i++) args[strides[i].at].i = args[strides[i].at + 2].i;
    args[ARG_LSE_SB].i = 1;
  }
  if (paged && a->block_table_stride)
    args[sig_at(k->sig, "block_table_sb")].i = a->block_table_stride;
  if ((s = check_capacities(d, a, args, &c->va, who, k->backward))) return s;
  if (k->kind != KN_DEVICE_HOST && (s = check_alignment(d, a, args))) return s;
  c->append = paged && a->k_new;
  /* the rows of a slab: seqlen_k (varlen: the longest sequence's; the kernel clamps each
   * sequence's length into it), at the resolved row strides */
  c->off32 = kn_attn_off32_fits(d, p->seqlen_k, args[ARG_K_SB + 2].i, args[ARG_V_SB + 2].i);
  return KILN_OK;
}

/* ---- backward ---- */

/* the backward's own parameter indices (templates/attn_bwd.h order) */
enum { BARG_DO = 4, BARG_DQ = 5, BARG_DK = 6, BARG_DV = 7, BARG_DO_SB = 27, BARG_DQ_SB = 30,
       BARG_DK_SB = 33, BARG_DV_SB = 36 };

kiln_status api_backward_args(const api_launch_view *k, const kn_attn_sig *bsig,
                              const kiln_backward_args *a, api_call *c, kn_argval *args,
                              int grid[][3]) {
  const char *who = "kiln_backward";
  c->empty = c->append = false;
  if (!a) return api_fail(KILN_ERR_INVALID, "%s: null kernel or arguments", who);
  const kiln_attn_args *f = &a->fwd;
  if (!f->lse) return api_fail(KILN_ERR_INVALID, "%s: null lse (the forward's log-sum-exp)", who);
  if (!a->dout || !a->dq || !a->dk || !a->dv || !a->delta)
    return api_fail(KILN_ERR_INVALID, "%s: null dout, dq, dk, dv or delta", who);
  kiln_status s = api_forward_args(k, f, who, c);
  if (s) return s;
  kn_diag diag;
  if (k->cfg->atomic_dq && !a->dq_accum)
    return api_fail(KILN_ERR_INVALID, "%s: null dq_accum: this kernel adds dQ with atomics "
                    "(kiln_kernel_info.atomic_dq) into a workspace of batch * heads * seqlen_q * "
                    "head_dim f32 (varlen: heads * total_q * head_dim); prepare it with "
                    "backward_dq = KILN_BWD_DQ_DETERMINISTIC to do without", who);
  kn_attn_bwd_bufs bufs = {(void *)f->q, (void *)f->k, (void *)f->v, f->o, (void *)a->dout,
                           f->lse, a->delta, a->dq, a->dk, a->dv, a->dq_accum};
  if (kn_attn_bwd_fill_args(k->desc, bsig, k->cfg, &c->p, &bufs, &c->va, args, grid, &diag))
    return api_fail(KILN_ERR_INVALID, "%s: %s", who, diag.message);
  /* the forward's arguments (with the caller's strides) by name, then the gradients' strides */
  for (int i = 0; i < k->sig->n && i < KN_ATTN_NPARAMS; i++)
    for (int j = 0; j < KN_ATTN_BWD_NPARAMS; j++)
      if (!strcmp(k->sig->name[i], bsig->name[j])) args[j] = c->args[i];
  const struct { const char *name; const int64_t *s; int64_t numel; int at; bool qo; } g[] = {
      {"dout", a->dout_stride, a->dout_numel, BARG_DO_SB, true},
      {"dq", a->dq_stride, a->dq_numel, BARG_DQ_SB, true},
      {"dk", a->dk_stride, a->dk_numel, BARG_DK_SB, false},
      {"dv", a->dv_stride, a->dv_numel, BARG_DV_SB, false}};
  const int64_t D = k->desc->head_dim;
  const bool varlen = k->desc->layout == KN_ATTN_VARLEN;
  for (int i = 0; i < 4; i++) {
    if (varlen && g[i].s[0])
      return api_fail(KILN_ERR_INVALID, "%s: varlen buffers have no batch axis: %s_stride is "
                      "{0, head, token}", who, g[i].name);
    if (!all_zero(g[i].s, 3))
      for (int j = 0; j < 3; j++) args[g[i].at + j].i = g[i].s[j];
    /* varlen: (total, heads, D) with {token, head} strides, the batch slot the token stride
     * (as the forward's, api_forward_args) */
    if (varlen) args[g[i].at].i = args[g[i].at + 2].i;
    const int64_t tokens = g[i].qo ? f->total_q : f->total_k;
    int64_t size[3] = {varlen ? 1 : f->batch, g[i].qo ? f->heads : f->kv_heads,
                       varlen ? tokens : g[i].qo ? f->seqlen_q : f->seqlen_k};
    int64_t st[3] = {args[g[i].at].i, args[g[i].at + 1].i, args[g[i].at + 2].i};
    if ((s = (i > 0 ? check_written : check_span)(who, g[i].name, g[i].numel, size, st, 3, D)))
      return s;
    /* the vector accesses of a GPU kernel (check_alignment's rule) */
    if (k->kind != KN_DEVICE_HOST) {
      int64_t es = (int64_t)kn_scalar_size(k->desc->dtype), v = 16 / es;
      while (v > 1 && D % v) v /= 2;
      const void *ptr = args[BARG_DO + i].p;
      bool ok = (uintptr_t)ptr % (uintptr_t)(v * es) == 0;
      for (int j = 0; j < 3; j++) ok &= size[j] <= 1 || st[j] % v == 0;
      if (!ok)
        return api_fail(KILN_ERR_INVALID, "%s: %s must be %lld-byte aligned with strides that "
                        "are multiples of %lld elements at head dim %d", who, g[i].name,
                        (long long)(v * es), (long long)v, k->desc->head_dim);
    }
  }
  /* delta: (batch, heads, seqlen_q) contiguous, varlen (heads, total_q) as lse */
  const int64_t rows = varlen ? f->total_q : f->seqlen_q;
  int64_t size[2] = {varlen ? 1 : f->batch, f->heads}, st[2] = {(int64_t)f->heads * rows, rows};
  if ((s = check_span(who, "delta", a->delta_numel, size, st, 2, rows)) || !k->cfg->atomic_dq)
    return s;
  /* dq_accum: head_dim values per element of delta, in delta's layout */
  int64_t asize[3] = {size[0], size[1], rows}, ast[3] = {st[0] * D, st[1] * D, D};
  return check_span(who, "dq_accum", a->dq_accum_numel, asize, ast, 3, D);
}

/* ---- decode ---- */

kiln_status api_decode_args(const api_launch_view *k, const kn_attn_config *split_cfg,
                            const api_call *c, const kn_decode_plan *plan, float *ws_o,
                            float *ws_lse, kn_argval *sa, int sg[3], kn_argval *ca, int cg[3]) {
  const kn_argval *args = c->args;
  kn_diag diag;
  if (kn_attn_decode_fill_args(k->desc, k->sig, split_cfg, &c->p, plan, args[0].p, args[1].p,
                               args[2].p, args[3].p, args[4].p, ws_o, ws_lse, &c->va, sa, sg, ca,
                               cg, &diag))
    return api_fail(KILN_ERR_INVALID, "kiln_forward: %s", diag.message);
  /* the caller's strides and the variant's values, as forward computed them */
  memcpy(sa, args, sizeof *args * (size_t)k->sig->n);
  for (int i = 0; i < 5; i++) ca[KN_DECODE_C_O_SB + i].i = args[ARG_O_SB + i].i;
  return KILN_OK;
}
