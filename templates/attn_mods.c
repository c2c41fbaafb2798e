/* attn_mods.c — the variants of the attention template: which modifier functions a descriptor
 * applies, in which order, and which kernel parameters they take (docs/variants.md).
 *
 * The library's modifiers are text (templates/mods/ *.tile files, embedded by the build); the user's
 * are text too.  kn_attn_mods_text() puts the two together, the parser reads them into the
 * kernel's module, and kn_attn_plan_make() turns the functions into the ordered list of calls
 * and the kernel signature that the kernel builder, kn_attn_fill_args and the reference share.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_internal.h"

/* ---- which functions, in which order ----------------------------------------------------------- */

/* when an entry applies: a descriptor field, or the user's text defining the function */
typedef enum {
  ON_CAUSAL_BR, ON_CAUSAL_TL, ON_WINDOW, ON_SOFTCAP, ON_ALIBI, ON_BIAS, ON_DOCUMENT, ON_PREFIX,
  ON_USER
} when;

typedef struct entry {
  when on;
  kn_attn_mod_kind kind;
  const char *fname;  /* without '@' */
  const char *file;   /* the library file defining it (NULL: the user's) */
} entry;

/* the order of application: docs/variants.md, "Order of application" */
static const entry order[] = {
    {ON_SOFTCAP, KN_MOD_SCORE, "kiln.softcap", "softcap"},
    {ON_ALIBI, KN_MOD_SCORE, "kiln.alibi", "alibi"},
    {ON_BIAS, KN_MOD_SCORE, "kiln.bias", "bias"},
    {ON_USER, KN_MOD_SCORE, "score_mod", NULL},
    {ON_CAUSAL_BR, KN_MOD_MASK, "kiln.causal", "causal"},
    {ON_CAUSAL_TL, KN_MOD_MASK, "kiln.causal_top_left", "causal"},
    {ON_WINDOW, KN_MOD_MASK, "kiln.window", "window"},
    {ON_DOCUMENT, KN_MOD_MASK, "kiln.document", "document"},
    {ON_PREFIX, KN_MOD_MASK, "kiln.prefix", "prefix"},
    {ON_USER, KN_MOD_MASK, "mask_mod", NULL},
    {ON_DOCUMENT, KN_MOD_BLOCK, "kiln.document_block", "document"},
    {ON_USER, KN_MOD_BLOCK, "block_mask", NULL},
};
enum { NORDER = sizeof order / sizeof order[0] };

static bool field_on(const kn_attn_desc *d, when w) {
  switch (w) {
  case ON_CAUSAL_BR: return d->causal == KN_CAUSAL_BOTTOM_RIGHT;
  case ON_CAUSAL_TL: return d->causal == KN_CAUSAL_TOP_LEFT;
  case ON_WINDOW: return d->window;
  case ON_SOFTCAP: return d->softcap;
  case ON_ALIBI: return d->alibi;
  case ON_BIAS: return d->bias;
  case ON_DOCUMENT: return d->document;
  case ON_PREFIX: return d->prefix;
  case ON_USER: return false;
  }
  return false;
}

static const char *lib_text(const char *name) {
  for (int i = 0; i < kn_attn_nlib; i++)
    if (!strcmp(kn_attn_lib[i].name, name)) return kn_attn_lib[i].text;
  KN_ASSERT(!"modifier library file missing");
  return "";
}

/* ---- the text -------------------------------------------------------------------------------- */

typedef struct strbuf {
  char *p;
  size_t n, cap;
} strbuf;

static void sb_add(strbuf *s, const char *t, size_t n) {
  if (s->n + n + 1 > s->cap) {
    s->cap = (s->n + n + 1) * 2;
    s->p = realloc(s->p, s->cap);
    KN_ASSERT(s->p);
  }
  memcpy(s->p + s->n, t, n);
  s->n += n;
  s->p[s->n] = 0;
}

/* t with every DTYPE replaced by the dtype's name */
static void sb_add_lib(strbuf *s, const char *t, kn_scalar dtype) {
  const char *name = kn_scalar_name(dtype);
  for (const char *at; (at = strstr(t, "DTYPE")); t = at + 5) {
    sb_add(s, t, (size_t)(at - t));
    sb_add(s, name, strlen(name));
  }
  sb_add(s, t, strlen(t));
}

char *kn_attn_mods_text(const kn_attn_desc *d) {
  strbuf s = {0};
  if (d->mods && d->mods[0]) {
    sb_add(&s, d->mods, strlen(d->mods));
    if (d->mods[strlen(d->mods) - 1] != '\n') sb_add(&s, "\n", 1);
  }
  const char *done[NORDER];
  int ndone = 0;
  /* prefix calls @kiln.causal: it needs causal.tile too */
  kn_attn_desc dd = *d;
  if (dd.prefix && dd.causal == KN_CAUSAL_NONE) dd.causal = KN_CAUSAL_BOTTOM_RIGHT;
  for (int i = 0; i < NORDER; i++) {
    if (!order[i].file || !field_on(&dd, order[i].on)) continue;
    bool seen = false;
    for (int j = 0; j < ndone; j++) seen |= !strcmp(done[j], order[i].file);
    if (seen) continue;
    done[ndone++] = order[i].file;
    sb_add(&s, "\n", 1);
    sb_add_lib(&s, lib_text(order[i].file), d->dtype);
  }
  return s.p;
}

int kn_attn_mods_parse(kn_module *m, const kn_attn_desc *d, kn_diag *diag) {
  char *text = kn_attn_mods_text(d);
  if (!text) return 0;
  const char *file = d->mods_file ? d->mods_file : "<mods>";
  int rc = kn_parse_into(m, file, text, strlen(text), diag);
  free(text);
  if (rc && diag) diag->loc.file = d->mods_file ? d->mods_file : "<mods>";
  return rc;
}

/* ---- the plan -------------------------------------------------------------------------------- */

static const char *kind_name(kn_attn_mod_kind k) {
  return k == KN_MOD_SCORE ? "score modifier" : k == KN_MOD_MASK ? "mask modifier"
                                                                 : "block predicate";
}

/* the fixed parameters of a kind, and their names for messages */
static int fixed_params(kn_attn_mod_kind k, kn_type *t, const char **names) {
  static const char *const score[] = {"score", "b", "h", "q_idx", "kv_idx"};
  static const char *const mask[] = {"b", "h", "q_idx", "kv_idx"};
  static const char *const block[] = {"b", "h", "q_lo", "q_hi", "kv_lo", "kv_hi"};
  const char *const *src = k == KN_MOD_SCORE ? score : k == KN_MOD_MASK ? mask : block;
  int n = k == KN_MOD_SCORE ? KN_MOD_FIXED_SCORE : k == KN_MOD_MASK ? KN_MOD_FIXED_MASK
                                                                    : KN_MOD_FIXED_BLOCK;
  for (int i = 0; i < n; i++) {
    t[i] = kn_ty_scalar(KN_I32);
    names[i] = src[i];
  }
  if (k == KN_MOD_SCORE) t[0] = kn_ty_scalar(KN_F32);
  return n;
}

static bool same_type(kn_type a, kn_type b) { return kn_ty_eq(a, b); }

static const char *type_text(kn_type t, char *buf, size_t n) {
  kn_ty_format(t, buf, n);
  return buf;
}

/* the signature index of the parameter `name` of type t: an existing one of that name (same
 * type), else a new one; -1 with *diag */
static int bind_param(kn_attn_sig *sig, kn_module *m, kn_func *f, int pi, kn_diag *diag) {
  kn_value *p = kn_func_param(f, pi);
  const char *name = p->name ? p->name : "";
  char a[48], b[48];
  for (int i = 0; i < sig->n; i++) {
    if (strcmp(sig->name[i], name)) continue;
    if (!same_type(sig->type[i], p->type))
      return kn_error(diag, m, f->loc, "@%s: parameter %%%s is %s, but the kernel's %%%s is %s",
                      f->name, name, type_text(p->type, a, sizeof a), name,
                      type_text(sig->type[i], b, sizeof b));
    return i;
  }
  if (p->type.kind == KN_TY_TILE)
    return kn_error(diag, m, f->loc, "@%s: parameter %%%s is a tile; modifier parameters are "
                    "scalars or pointers", f->name, name);
  if (sig->n >= KN_ATTN_MAX_PARAMS)
    return kn_error(diag, m, f->loc, "@%s: more than %d kernel parameters", f->name,
                    KN_ATTN_MAX_PARAMS);
  if (strlen(name) >= sizeof sig->name[0])
    return kn_error(diag, m, f->loc, "@%s: parameter name %%%s is longer than %d characters",
                    f->name, name, (int)sizeof sig->name[0] - 1);
  sig->type[sig->n] = p->type;
  snprintf(sig->name[sig->n], sizeof sig->name[0], "%s", name);
  return sig->n++;
}

static int check_signature(kn_module *m, kn_func *f, kn_attn_mod_kind k, kn_diag *diag) {
  kn_type t[KN_MOD_FIXED_BLOCK];
  const char *names[KN_MOD_FIXED_BLOCK];
  int n = fixed_params(k, t, names);
  char a[48], b[48];
  if (f->is_kernel)
    return kn_error(diag, m, f->loc, "@%s is a kernel; a %s is a func", f->name, kind_name(k));
  if (kn_func_nparams(f) < n)
    return kn_error(diag, m, f->loc, "@%s: a %s takes at least %d parameters (%s%s%s, %s, ...), "
                    "found %d", f->name, kind_name(k), n, k == KN_MOD_SCORE ? "score, " : "",
                    "b, h", k == KN_MOD_BLOCK ? ", q_lo, q_hi, kv_lo, kv_hi" : ", q_idx, kv_idx",
                    "params", kn_func_nparams(f));
  for (int i = 0; i < n; i++)
    if (!same_type(kn_func_param(f, i)->type, t[i]))
      return kn_error(diag, m, f->loc, "@%s: parameter %d (%s) of a %s must be %s, found %s",
                      f->name, i + 1, names[i], kind_name(k), type_text(t[i], a, sizeof a),
                      type_text(kn_func_param(f, i)->type, b, sizeof b));
  kn_type want = kn_ty_scalar(k == KN_MOD_SCORE ? KN_F32 : KN_I1);
  if (f->nret != 1 || !same_type(f->ret[0], want))
    return kn_error(diag, m, f->loc, "@%s: a %s returns one %s", f->name, kind_name(k),
                    type_text(want, a, sizeof a));
  return n;
}

int kn_attn_plan_make(kn_module *m, const kn_attn_desc *d, kn_attn_plan *p, kn_diag *diag) {
  kn_loc nowhere = {0};
  memset(p, 0, sizeof *p);
  /* the template's own parameters: attn_fwd.c's types, by name, so modifiers can share them */
  kn_attn_sig *sig = &p->sig;
  for (int i = 0; i < KN_ATTN_NPARAMS; i++) {
    snprintf(sig->name[i], sizeof sig->name[0], "%s", kn_attn_param_names[i]);
    sig->type[i] = kn_attn_param_type(d, i);
  }
  sig->n = KN_ATTN_NPARAMS;
  /* varlen: the sequences' token ranges follow the template's own (attention.h) */
  if (d->layout == KN_ATTN_VARLEN)
    for (int i = 0; i < KN_ATTN_CU_NPARAMS; i++) {
      snprintf(sig->name[sig->n], sizeof sig->name[0], "%s", kn_attn_cu_names[i]);
      sig->type[sig->n++] = i < 2 ? kn_ty_ptr(KN_I32) : kn_ty_scalar(KN_I32);
    }
  /* paged: the block table, the cache lengths and the pool's shape (attention.h) */
  if (d->layout == KN_ATTN_PAGED)
    for (int i = 0; i < KN_ATTN_PAGED_NPARAMS; i++) {
      snprintf(sig->name[sig->n], sizeof sig->name[0], "%s", kn_attn_paged_names[i]);
      sig->type[sig->n++] = i < 2 ? kn_ty_ptr(KN_I32) : i < 5 ? kn_ty_scalar(KN_I32)
                                                              : kn_ty_scalar(KN_I64);
    }
  /* fp8 inputs: the descale factors, their batch stride and counts (attention.h) */
  if (kn_attn_is_fp8(d))
    for (int i = 0; i < KN_ATTN_FP8_NPARAMS; i++) {
      snprintf(sig->name[sig->n], sizeof sig->name[0], "%s", kn_attn_fp8_names[i]);
      sig->type[sig->n++] = i < 3 ? kn_ty_ptr(KN_F32) : kn_ty_scalar(KN_I64);
    }
  /* dropout: Philox's seed and counter offset (attention.h, "Dropout") */
  if (d->dropout != 0)
    for (int i = 0; i < KN_ATTN_DROPOUT_NPARAMS; i++) {
      snprintf(sig->name[sig->n], sizeof sig->name[0], "%s", kn_attn_dropout_names[i]);
      sig->type[sig->n++] = kn_ty_scalar(KN_I64);
    }
  if (d->prefix && d->causal)
    return kn_error(diag, NULL, nowhere, "attention: prefix already includes its causal part; "
                    "leave causal off with prefix");
  bool user_any = false;
  for (int i = 0; i < NORDER; i++) {
    const entry *e = &order[i];
    kn_func *f = NULL;
    if (e->on == ON_USER) {
      f = kn_module_find(m, e->fname);
      if (!f) continue;
      user_any = true;
    } else {
      if (!field_on(d, e->on)) continue;
      f = kn_module_find(m, e->fname);
      if (!f)
        return kn_error(diag, m, nowhere, "attention: the variant needs @%s (templates/mods/"
                        "%s.tile), which the module does not define", e->fname, e->file);
    }
    int nfixed = check_signature(m, f, e->kind, diag);
    if (nfixed < 0) return -1;
    if (p->nmods >= KN_ATTN_MAX_MODS)
      return kn_error(diag, m, f->loc, "attention: more than %d modifiers", KN_ATTN_MAX_MODS);
    kn_attn_mod *mod = &p->mod[p->nmods++];
    mod->kind = e->kind;
    mod->f = f;
    for (int j = nfixed; j < kn_func_nparams(f); j++)
      if ((mod->arg[j - nfixed] = bind_param(sig, m, f, j, diag)) < 0) return -1;
  }
  if (d->mods && d->mods[0] && !user_any)
    return kn_error(diag, m, nowhere, "attention: the modifier text defines none of @score_mod, "
                    "@mask_mod, @block_mask");
  return 0;
}

int kn_attn_signature_in(kn_module *m, const kn_attn_desc *d, kn_attn_sig *sig, kn_diag *diag) {
  kn_attn_plan *p = malloc(sizeof *p);
  KN_ASSERT(p);
  int rc = kn_attn_plan_make(m, d, p, diag);
  if (rc == 0) *sig = p->sig;
  free(p);
  return rc;
}

int kn_attn_signature(const kn_attn_desc *d, kn_attn_sig *sig, kn_diag *diag) {
  kn_module *m = kn_module_new(d->mods_file ? d->mods_file : "<mods>");
  kn_attn_plan p;
  int rc = kn_attn_mods_parse(m, d, diag);
  if (rc == 0) rc = kn_verify(m, diag);
  if (rc == 0) rc = kn_attn_plan_make(m, d, &p, diag);
  if (rc == 0) *sig = p.sig;
  kn_module_free(m);
  return rc;
}

/* ---- the values of the variant's parameters ------------------------------------------------------ */

/* a built-in parameter: its name in the library, the field that enables it, where kn_attn_vargs
 * keeps its value, and what it is (i: integer, f: float, p: pointer) */
typedef struct builtin_arg {
  const char *name;
  when on;
  char kind;
  size_t off;
} builtin_arg;

#define VA(field) offsetof(kn_attn_vargs, field)
static const builtin_arg builtin_args[] = {
    {"window_left", ON_WINDOW, 'i', VA(window_left)},
    {"window_right", ON_WINDOW, 'i', VA(window_right)},
    {"softcap", ON_SOFTCAP, 'f', VA(softcap)},
    {"alibi_slopes", ON_ALIBI, 'p', VA(alibi_slopes)},
    {"alibi_sb", ON_ALIBI, 'I', VA(alibi_sb)},
    {"bias", ON_BIAS, 'p', VA(bias)},
    {"bias_sb", ON_BIAS, 'I', VA(bias_sb)},
    {"bias_sh", ON_BIAS, 'I', VA(bias_sh)},
    {"bias_sm", ON_BIAS, 'I', VA(bias_sm)},
    {"q_seg", ON_DOCUMENT, 'p', VA(q_seg)},
    {"k_seg", ON_DOCUMENT, 'p', VA(k_seg)},
    {"q_seg_sb", ON_DOCUMENT, 'I', VA(q_seg_sb)},
    {"k_seg_sb", ON_DOCUMENT, 'I', VA(k_seg_sb)},
    {"prefix_len", ON_PREFIX, 'i', VA(prefix_len)},
};
#undef VA

const char *const kn_attn_cu_names[KN_ATTN_CU_NPARAMS] = {"cu_seqlens_q", "cu_seqlens_k",
                                                        "max_seqlen_q", "max_seqlen_k"};

/* a varlen kernel's parameter of kn_attn_cu_names (its index), else -1 */
static int cu_param(const kn_attn_desc *d, const char *name) {
  for (int i = 0; d->layout == KN_ATTN_VARLEN && i < KN_ATTN_CU_NPARAMS; i++)
    if (!strcmp(name, kn_attn_cu_names[i])) return i;
  return -1;
}

const char *const kn_attn_paged_names[KN_ATTN_PAGED_NPARAMS] = {
    "block_table", "cache_seqlens", "page_size", "num_pages", "seqlen_new", "block_table_sb"};

/* a paged kernel's parameter of kn_attn_paged_names, else -1 */
static int paged_param(const kn_attn_desc *d, const char *name) {
  for (int i = 0; d->layout == KN_ATTN_PAGED && i < KN_ATTN_PAGED_NPARAMS; i++)
    if (!strcmp(name, kn_attn_paged_names[i])) return i;
  return -1;
}

const char *const kn_attn_fp8_names[KN_ATTN_FP8_NPARAMS] = {
    "q_descale", "k_descale", "v_descale", "descale_sb", "q_descale_n", "k_descale_n",
    "v_descale_n"};

/* an fp8 kernel's parameter of kn_attn_fp8_names, else -1 */
static int fp8_param(const kn_attn_desc *d, const char *name) {
  for (int i = 0; kn_attn_is_fp8(d) && i < KN_ATTN_FP8_NPARAMS; i++)
    if (!strcmp(name, kn_attn_fp8_names[i])) return i;
  return -1;
}

const char *const kn_attn_dropout_names[KN_ATTN_DROPOUT_NPARAMS] = {"dropout_seed",
                                                                     "dropout_offset"};

/* a dropout kernel's parameter of kn_attn_dropout_names, else -1 */
static int dropout_param(const kn_attn_desc *d, const char *name) {
  for (int i = 0; d->dropout != 0 && i < KN_ATTN_DROPOUT_NPARAMS; i++)
    if (!strcmp(name, kn_attn_dropout_names[i])) return i;
  return -1;
}

bool kn_attn_param_builtin(const kn_attn_desc *d, const char *name) {
  if (cu_param(d, name) >= 0 || paged_param(d, name) >= 0 || fp8_param(d, name) >= 0 ||
      dropout_param(d, name) >= 0)
    return true;
  for (size_t j = 0; j < sizeof builtin_args / sizeof builtin_args[0]; j++)
    if (!strcmp(builtin_args[j].name, name) && field_on(d, builtin_args[j].on)) return true;
  return false;
}

/* the bytes a built-in tensor spans for problem p (the reference's memory regions) */
static size_t builtin_bytes(const char *name, const kn_attn_desc *d, const kn_attn_problem *p,
                            const kn_attn_vargs *va) {
  int64_t B = p->batch, H = p->heads, Nq = p->seqlen_q, Nk = p->seqlen_k;
  if (!strcmp(name, "alibi_slopes")) return (size_t)((B - 1) * va->alibi_sb + H) * 4;
  if (!strcmp(name, "bias"))
    return (size_t)((B - 1) * va->bias_sb + (H - 1) * va->bias_sh + (Nq - 1) * va->bias_sm + Nk) *
           (size_t)kn_scalar_size(d->dtype);
  if (!strcmp(name, "q_seg")) return (size_t)((B - 1) * va->q_seg_sb + Nq) * 4;
  if (!strcmp(name, "k_seg")) return (size_t)((B - 1) * va->k_seg_sb + Nk) * 4;
  return 0;
}

int kn_attn_fill_vargs(const kn_attn_desc *d, const kn_attn_sig *sig, const kn_attn_problem *p,
                       const kn_attn_vargs *va, kn_argval *out, kn_region *regions,
                       kn_diag *diag) {
  kn_loc nowhere = {0};
  int nreg = 0;
  for (int i = KN_ATTN_NPARAMS; i < sig->n; i++) {
    const char *name = sig->name[i];
    bool is_ptr = sig->type[i].kind == KN_TY_PTR;
    bool done = false;
    int cu = cu_param(d, name);
    if (cu >= 2) {  /* the max lengths: the problem's seqlen_q / seqlen_k */
      out[i].i = cu == 2 ? p->seqlen_q : p->seqlen_k;
      done = true;
    } else if (cu >= 0) {  /* the problem's, not the variant's */
      out[i].p = (void *)(cu ? p->cu_seqlens_k : p->cu_seqlens_q);
      if (!out[i].p)
        return kn_error(diag, NULL, nowhere, "attention: varlen, but %s is NULL", name);
      if (regions) regions[nreg++] = (kn_region){out[i].p, (size_t)(p->batch + 1) * 4};
      done = true;
    }
    int pg = paged_param(d, name);
    if (pg >= 0) {  /* the problem's too: a contiguous (B, max_pages) table */
      const int32_t *t[2] = {p->block_table, p->cache_seqlens};
      const size_t bytes[2] = {(size_t)p->batch * (size_t)p->max_pages * 4, (size_t)p->batch * 4};
      if (pg < 2) {
        out[i].p = (void *)t[pg];
        if (!out[i].p)
          return kn_error(diag, NULL, nowhere, "attention: paged, but %s is NULL", name);
        if (regions) regions[nreg++] = (kn_region){out[i].p, bytes[pg]};
      } else {
        const int64_t v[] = {0, 0, p->page_size, p->num_pages, p->seqlen_new, p->max_pages};
        out[i].i = v[pg];
      }
      done = true;
    }
    int f8 = fp8_param(d, name);
    if (f8 >= 0) {  /* the problem's: (B, HK) f32 each, NULL is 1 (a count of 0) */
      const float *t[3] = {p->q_descale, p->k_descale, p->v_descale};
      const int64_t sb = p->descale_sb ? p->descale_sb : p->kv_heads;
      const int64_t n = p->batch > 0 ? (p->batch - 1) * sb + p->kv_heads : 0;
      if (f8 < 3) {
        out[i].p = (void *)t[f8];
        if (regions && t[f8]) regions[nreg++] = (kn_region){out[i].p, (size_t)n * 4};
      } else {
        out[i].i = f8 == 3 ? sb : t[f8 - 4] ? n : 0;
      }
      done = true;
    }
    int dr = dropout_param(d, name);
    if (dr >= 0) {  /* the problem's: the generator's seed and offset */
      out[i].i = (int64_t)(dr ? p->dropout_offset : p->dropout_seed);
      done = true;
    }
    for (size_t j = 0; j < sizeof builtin_args / sizeof builtin_args[0] && !done; j++) {
      const builtin_arg *a = &builtin_args[j];
      if (strcmp(a->name, name) || !field_on(d, a->on)) continue;
      if (!va)
        return kn_error(diag, NULL, nowhere, "attention: the variant's parameter %s has no value "
                        "(no variant arguments given)", name);
      const char *at = (const char *)va + a->off;
      switch (a->kind) {
      case 'i': out[i].i = *(const int *)at; break;
      case 'I': out[i].i = *(const int64_t *)at; break;
      case 'f': out[i].f = *(const float *)at; break;
      case 'p':
        out[i].p = *(void *const *)at;
        if (!out[i].p)
          return kn_error(diag, NULL, nowhere, "attention: the variant's tensor %s is NULL", name);
        if (regions) regions[nreg++] = (kn_region){out[i].p, builtin_bytes(name, d, p, va)};
        break;
      }
      done = true;
    }
    for (int j = 0; !done && va && j < va->nmods; j++) {
      if (!va->mods[j].name || strcmp(va->mods[j].name, name)) continue;
      out[i] = va->mods[j].value;
      if (is_ptr && !out[i].p)
        return kn_error(diag, NULL, nowhere, "attention: the modifier tensor %s is NULL", name);
      if (is_ptr && regions) regions[nreg++] = (kn_region){out[i].p, va->mods[j].bytes};
      done = true;
    }
    if (!done)
      return kn_error(diag, NULL, nowhere, "attention: the modifier parameter %s has no value",
                      name);
  }
  return nreg;
}
