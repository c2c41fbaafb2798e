/* plan_shared.c — LDS buffers for the conversions the layout pass sends through shared memory.
 *
 * One buffer per staged conversion (kn_shared_size elements: the tile, plus the row padding of
 * a dot operand's layout; an XOR swizzle permutes within the tile and needs none).  Its live
 * range is where the lowering stages it: an eager conversion right after its value is defined,
 * a lazy one (a dot operand) at the dot, a permute at its reshape or transpose.  Because
 * every staging begins with a barrier (all reads of an earlier use are done) and ends with one,
 * buffers used at different points of the program may share bytes; a linear scan over the
 * live ranges in program order places each buffer at the lowest 16-byte aligned offset (1024
 * for wgmma's swizzled operands) free of every buffer live at the same time.  NVPTX's cp.async streams and operands staged once
 * before a loop outlive an iteration: their ranges are stretched to the whole loop
 * (conv_range).
 * The total must fit the target's LDS (64 KiB on gfx90a / gfx942), else the compile fails with
 * the plan printed in the diagnostic.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"

static int conv_pos(const kn_layout_plan *p, const kn_conversion *c) {
  if (c->kind == KN_CONV_LAZY || c->kind == KN_CONV_PERMUTE) {
    /* position of the user: the plan numbered values, so use the user's first result */
    return c->user->nres ? p->pos[c->user->res[0]->id] : p->pos[c->value->id];
  }
  return p->pos[c->value->id];
}

/* the last position of a value defined inside block b (nested blocks included) */
static int block_end(const kn_layout_plan *p, const kn_block *b, int end) {
  for (int a = 0; a < b->nargs; a++)
    if (p->pos[b->args[a]->id] > end) end = p->pos[b->args[a]->id];
  for (const kn_op *op = b->first; op; op = op->next) {
    for (int r = 0; r < op->nres; r++)
      if (p->pos[op->res[r]->id] > end) end = p->pos[op->res[r]->id];
    for (int r = 0; r < op->nregion; r++) end = block_end(p, op->region[r], end);
  }
  return end;
}

/* the outermost `for` around loop that does not hold the definition of v: a loop-invariant
 * operand staged once before nested loops (K and V of the backward's dK/dV kernel, defined
 * before the loop over the group's heads and read in its loop over query blocks) is read again
 * in every iteration of the outer loops, so its buffer lives until the outermost one ends */
static const kn_op *outer_loop(const kn_layout_plan *p, const kn_op *loop, const kn_value *v) {
  for (;;) {
    const kn_op *po = loop->parent ? loop->parent->parent_op : NULL;
    if (!po || po->opc != KN_OP_FOR || !po->region[0]->nargs ||
        p->pos[v->id] >= p->pos[po->region[0]->args[0]->id])
      return loop;
    loop = po;
  }
}

/* the live range of c's buffer.  Staged at the dot: that one position.  Staged once before a
 * loop: from the definition to the end of the outermost loop around the dot that does not
 * hold the definition.  cp.async streams: the whole loop, from the
 * prologue before it (their copies for the next use are in flight while other buffers of the
 * loop are read, so nothing in the loop may share their bytes). */
static void conv_range(const kn_layout_plan *p, const kn_conversion *c, int *first, int *last) {
  *first = *last = conv_pos(p, c);
  if (!c->loop || c->kind != KN_CONV_LAZY) return;
  int lend = block_end(p, c->loop->region[0], *last);
  switch (c->stage) {
  case KN_STAGE_ONCE:
    *first = p->pos[c->value->id];
    *last = block_end(p, outer_loop(p, c->loop, c->value)->region[0], lend);
    break;
  case KN_STAGE_ASYNC_HEAD:
  case KN_STAGE_ASYNC_EARLY:
  case KN_STAGE_ASYNC_LEAD:
    *first = p->pos[c->loop->region[0]->args[0]->id];
    *last = lend;
    break;
  default: break;
  }
}

int kn_plan_shared(kn_layout_plan *p, kn_diag *d) {
  int n = 0;
  for (int i = 0; i < p->nconv; i++) n += p->conv[i].kind != KN_CONV_FREE && !p->conv[i].same;
  p->buf = calloc((size_t)(n ? n : 1), sizeof *p->buf);
  KN_ASSERT(p->buf);
  p->nbuf = 0;
  for (int i = 0; i < p->nconv; i++) {
    kn_conversion *c = &p->conv[i];
    if (c->kind == KN_CONV_FREE || c->same) continue;  /* same: the first's registers */
    kn_lds_buffer *b = &p->buf[p->nbuf];
    b->conv = i;
    int shape[2] = {c->value->type.shape[0], c->value->type.rank == 2 ? c->value->type.shape[1] : 1};
    b->bytes = kn_shared_size(&c->shared, shape) * (int64_t)kn_scalar_size(c->value->type.elem);
    conv_range(p, c, &b->first, &b->last);
    c->buffer = p->nbuf++;
  }
  /* linear scan in program order; each buffer goes at the lowest offset that overlaps no
   * buffer already placed whose live range meets its own */
  int *order = malloc(sizeof(int) * (size_t)(p->nbuf ? p->nbuf : 1));
  KN_ASSERT(order);
  for (int i = 0; i < p->nbuf; i++) order[i] = i;
  for (int i = 1; i < p->nbuf; i++)
    for (int j = i; j > 0 && p->buf[order[j]].first < p->buf[order[j - 1]].first; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  p->lds_bytes = 0;
  for (int i = 0; i < p->nbuf; i++) {
    kn_lds_buffer *b = &p->buf[order[i]];
    /* wgmma's canonical 128-byte swizzle repeats every 1024 bytes and is applied to the
     * address bits themselves: such a buffer starts on a 1024-byte boundary */
    int64_t align = p->conv[b->conv].shared.cblock ? 1024 : 16, off = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (int j = 0; j < i; j++) {
        kn_lds_buffer *o = &p->buf[order[j]];
        bool live = o->first <= b->last && b->first <= o->last;
        bool overlap = o->offset < off + b->bytes && off < o->offset + o->bytes;
        if (live && overlap) {
          off = (o->offset + o->bytes + align - 1) / align * align;
          moved = true;
        }
      }
    }
    b->offset = off;
    if (off + b->bytes > p->lds_bytes) p->lds_bytes = off + b->bytes;
  }
  free(order);
  if (p->lds_bytes > p->arch->shared_bytes) {
    char *text = kn_layout_plan_format(p);
    kn_error(d, p->k->module, p->k->loc, "the shared-memory plan of @%s needs %lld bytes of LDS, "
             "more than the %d of %s:\n%.300s", p->k->name, (long long)p->lds_bytes,
             (int)p->arch->shared_bytes, p->arch->name, text ? text : "");
    free(text);
    return -1;
  }
  return 0;
}

/* ---- the "layout" dump ---- */

typedef struct sbuf {
  char *s;
  size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list aq;
  va_copy(aq, ap);
  int need = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (need < 0) need = 0;
  if (b->n + (size_t)need + 1 > b->cap) {
    b->cap = (b->n + (size_t)need + 1) * 2;
    b->s = realloc(b->s, b->cap);
    KN_ASSERT(b->s);
  }
  vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
  b->n += (size_t)need;
  va_end(ap);
}

static const char *vname(const kn_value *v, char *buf, size_t n) {
  if (v->name) snprintf(buf, n, "%%%s", v->name);
  else snprintf(buf, n, "%%v%d", v->id);
  return buf;
}

static void dump_block(const kn_layout_plan *p, sbuf *b, const kn_block *blk, int depth) {
  char name[96], ty[64], lay[320];
  for (int a = 0; a < blk->nargs; a++) {
    const kn_value *v = blk->args[a];
    if (v->type.kind != KN_TY_TILE || !p->lay[v->id]) continue;
    kn_ty_format(v->type, ty, sizeof ty);
    kn_layout_format(p->lay[v->id], lay, sizeof lay);
    put(b, "%*s%s : %s  %s\n", 2 * depth, "", vname(v, name, sizeof name), ty, lay);
  }
  for (const kn_op *op = blk->first; op; op = op->next) {
    for (int r = 0; r < op->nres; r++) {
      const kn_value *v = op->res[r];
      if (v->type.kind != KN_TY_TILE || !p->lay[v->id]) continue;
      kn_ty_format(v->type, ty, sizeof ty);
      kn_layout_format(p->lay[v->id], lay, sizeof lay);
      put(b, "%*s%s = %s : %s  %s\n", 2 * depth, "", vname(v, name, sizeof name),
          kn_opinfo_table[op->opc].name, ty, lay);
    }
    for (int r = 0; r < op->nregion; r++) dump_block(p, b, op->region[r], depth + 1);
  }
}

char *kn_layout_plan_format(const kn_layout_plan *p) {
  sbuf b = {0};
  char name[96], lay[320];
  put(&b, "// kiln: layouts of @%s on %s (%d warps of %d lanes)\n", p->k->name, p->arch->name,
      p->warps, p->arch->lanes);
  dump_block(p, &b, p->k->body, 1);
  static const char *kinds[] = {"free", "eager", "lazy", "permute"};
  for (int i = 0; i < p->nconv; i++) {
    const kn_conversion *c = &p->conv[i];
    kn_layout_format(c->dst, lay, sizeof lay);
    put(&b, "convert %s -> %s (operand %d of %s at %d): %s", vname(c->value, name, sizeof name),
        lay, c->opnd, kn_opinfo_table[c->user->opc].name, p->pos[c->value->id], kinds[c->kind]);
    if (c->same) {
      put(&b, " as conversion %d (its registers)", c->same - 1);
    } else if (c->kind != KN_CONV_FREE) {
      kn_layout_format(&c->shared, lay, sizeof lay);
      put(&b, " via lds[%d] %s", c->buffer, lay);
      static const char *stages[] = {"", ", staged once", ", cp.async at the dot",
                                     ", cp.async one iteration ahead", ", cp.async early",
                                     ", cp.async at the dot, with the loop's early ones"};
      if (c->ldsm || c->desc)
        put(&b, ", %s%s%s", c->desc ? "wgmma descriptor" : "ldmatrix", stages[c->stage],
            c->follow ? " (with the first)" : "");
    }
    put(&b, "\n");
  }
  for (int i = 0; i < p->nbuf; i++)
    put(&b, "lds[%d]: offset %lld, %lld bytes, live [%d, %d]\n", i,
        (long long)p->buf[i].offset, (long long)p->buf[i].bytes, p->buf[i].first, p->buf[i].last);
  put(&b, "lds total: %lld bytes\n", (long long)p->lds_bytes);
  return b.s;
}
