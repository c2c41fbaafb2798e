/* arena.c — bump allocation for IR lifetimes, string maps in arenas, internal-error aborts, and
 * diagnostics.
 *
 * An arena is a list of chunks; allocations are zeroed and 16-byte aligned; everything goes at
 * once in kn_arena_free().  A kn_strmap is an open-addressing hash table (FNV-1a, linear
 * probing, at most half full) whose tables are arena memory: growing leaves the old table in the
 * arena, which at most doubles what the map takes.  Out of memory in an arena is treated as an internal failure (abort),
 * since IR for a kernel is small: the caller's data is never in an arena.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

void kn_die(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "kiln: internal error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

typedef struct kn_chunk {
  struct kn_chunk *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} kn_chunk;

struct kn_arena {
  kn_chunk *head;
};

kn_arena *kn_arena_new(void) {
  kn_arena *a = calloc(1, sizeof *a);
  if (!a) kn_die(__FILE__, __LINE__, "out of memory");
  return a;
}

void kn_arena_free(kn_arena *a) {
  if (!a) return;
  for (kn_chunk *c = a->head, *n; c; c = n) {
    n = c->next;
    free(c);
  }
  free(a);
}

void *kn_arena_alloc(kn_arena *a, size_t bytes) {
  bytes = (bytes + 15) & ~(size_t)15;
  kn_chunk *c = a->head;
  if (!c || c->cap - c->used < bytes) {
    size_t cap = bytes > 65536 ? bytes : 65536;
    c = malloc(sizeof *c + cap);
    if (!c) kn_die(__FILE__, __LINE__, "out of memory (%zu bytes)", bytes);
    c->used = 0;
    c->cap = cap;
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += bytes;
  memset(p, 0, bytes);
  return p;
}

char *kn_arena_strndup(kn_arena *a, const char *s, size_t n) {
  char *p = kn_arena_alloc(a, n + 1);
  memcpy(p, s, n);
  p[n] = 0;
  return p;
}

char *kn_arena_strdup(kn_arena *a, const char *s) { return kn_arena_strndup(a, s, strlen(s)); }

/* The source line holding loc, for the caret display; n = its length. */
static const char *source_line(const char *src, int line, size_t *n) {
  const char *p = src;
  for (int l = 1; l < line && *p; p++)
    if (*p == '\n') l++;
  const char *e = strchr(p, '\n');
  *n = e ? (size_t)(e - p) : strlen(p);
  return p;
}

int kn_error(kn_diag *d, const kn_module *m, kn_loc loc, const char *fmt, ...) {
  if (!d) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->message, sizeof d->message, fmt, ap);
  va_end(ap);
  d->loc = loc;
  const char *file = loc.file ? loc.file : (m && m->filename ? m->filename : "<built>");
  int w;
  if (loc.line > 0)
    w = snprintf(d->rendered, sizeof d->rendered, "%s:%d:%d: error: %s\n", file, loc.line,
                 loc.col, d->message);
  else
    w = snprintf(d->rendered, sizeof d->rendered, "%s: error: %s\n", file, d->message);
  if (w < 0 || (size_t)w >= sizeof d->rendered) return -1;
  if (m && m->source && loc.line > 0) {
    size_t n;
    const char *l = source_line(m->source, loc.line, &n);
    if (n > 300) n = 300;
    size_t left = sizeof d->rendered - (size_t)w;
    int col = loc.col > 0 ? loc.col : 1;
    if ((size_t)col > n + 1) col = (int)n + 1;
    /* the caret line copies the tabs of the source line so the caret lands under the column */
    char pad[320];
    int k = 0;
    for (; k < col - 1 && k < (int)sizeof pad - 1; k++) pad[k] = l[k] == '\t' ? '\t' : ' ';
    pad[k] = 0;
    snprintf(d->rendered + w, left, "%.*s\n%s^\n", (int)n, l, pad);
  }
  return -1;
}

/* ---- string maps ---- */

struct kn_strmap_ent {
  const char *s; /* NULL: empty */
  size_t n;
  int value;
};

static uint32_t strmap_hash(const char *s, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

/* the entry holding s, or the empty one where it would go (the table is never full) */
static struct kn_strmap_ent *strmap_slot(const kn_strmap *m, const char *s, size_t n) {
  uint32_t mask = m->cap - 1, i = strmap_hash(s, n) & mask;
  for (;; i = (i + 1) & mask) {
    struct kn_strmap_ent *e = &m->ent[i];
    if (!e->s || (e->n == n && memcmp(e->s, s, n) == 0)) return e;
  }
}

int kn_strmap_get(const kn_strmap *m, const char *s, size_t n) {
  if (!m->cap) return -1;
  const struct kn_strmap_ent *e = strmap_slot(m, s, n);
  return e->s ? e->value : -1;
}

int kn_strmap_put(kn_strmap *m, const char *s, size_t n, int value) {
  if ((m->count + 1) * 2 > m->cap) {
    struct kn_strmap_ent *old = m->ent;
    uint32_t oldcap = m->cap;
    m->cap = oldcap ? oldcap * 2 : 16;
    m->ent = kn_arena_alloc(m->arena, sizeof *m->ent * m->cap);
    for (uint32_t i = 0; i < oldcap; i++)
      if (old[i].s) *strmap_slot(m, old[i].s, old[i].n) = old[i];
  }
  struct kn_strmap_ent *e = strmap_slot(m, s, n);
  if (e->s) return e->value;
  *e = (struct kn_strmap_ent){s, n, value};
  m->count++;
  return -1;
}
