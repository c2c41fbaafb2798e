/* host_run.c — one launch of host-compiled code: the status word, and the checker of checked
 * mode (host_run.h describes both).
 *
 * The checker is one struct per launch, on the launching thread's stack, reached by the kernel
 * through its extra argument.  Its fast path (an access inside a region) only reads the caller's
 * region list, so the pool's threads share nothing writable while all is well; a violation takes
 * a mutex and keeps the one of the lowest linear program id (a program's accesses are in program
 * order on one thread, so the first one recorded for a program is its first).  Nothing is
 * printed: the launcher turns the record into a kn_diag once the grid has run.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "host_run.h"
#include "target.h"

typedef struct kn_host_check {
  const kn_region *regions;  /* NULL: nothing is checked */
  int nregions;
  int32_t nx, ny;            /* for the linear program id */
  pthread_mutex_t mu;
  int64_t first;             /* linear program id of the violation kept; INT64_MAX: none */
  const kn_check_site *site; /* the violation kept */
  uint64_t addr;
  int64_t bytes, i, j;
  int32_t pid[3];
} kn_host_check;

static const kn_loc no_loc = {0};

static bool inside(const kn_region *r, uint64_t addr, int64_t bytes) {
  uint64_t lo = (uint64_t)(uintptr_t)r->data, n = (uint64_t)bytes;
  return addr >= lo && n <= r->bytes && addr - lo <= r->bytes - n;
}

int32_t kn_rt_check_access(void *check, const kn_check_site *site, uint64_t addr, int64_t bytes,
                           int64_t i, int64_t j, int32_t px, int32_t py, int32_t pz) {
  kn_host_check *c = check;
  if (!c || !c->regions) return 1;
  for (int r = 0; r < c->nregions; r++)
    if (inside(&c->regions[r], addr, bytes)) return 1;
  int64_t prog = px + (int64_t)c->nx * (py + (int64_t)c->ny * pz);
  pthread_mutex_lock(&c->mu);
  if (prog < c->first) {
    c->first = prog;
    c->site = site;
    c->addr = addr;
    c->bytes = bytes;
    c->i = i;
    c->j = j;
    c->pid[0] = px, c->pid[1] = py, c->pid[2] = pz;
  }
  pthread_mutex_unlock(&c->mu);
  return 0;
}

/* "; the nearest is buffer 2 (4096 bytes at 0x...), 12 bytes past its end" */
static void nearest(const kn_host_check *c, char *out, size_t n) {
  int best = -1;
  uint64_t dist = 0, end = c->addr + (uint64_t)c->bytes;
  for (int r = 0; r < c->nregions; r++) {
    uint64_t lo = (uint64_t)(uintptr_t)c->regions[r].data, hi = lo + c->regions[r].bytes;
    uint64_t dr = c->addr < lo ? lo - c->addr : end > hi ? end - hi : 0;
    if (best < 0 || dr < dist) best = r, dist = dr;
  }
  if (best < 0) {
    snprintf(out, n, " (no buffers were given)");
    return;
  }
  const kn_region *r = &c->regions[best];
  uint64_t lo = (uint64_t)(uintptr_t)r->data;
  snprintf(out, n, "; the nearest is buffer %d (%zu bytes at 0x%llx), %llu bytes %s", best,
           r->bytes, (unsigned long long)lo, (unsigned long long)dist,
           c->addr < lo ? "before its start" : "past its end");
}

static int violation(const char *name, const kn_host_check *c, kn_diag *d) {
  const kn_check_site *s = c->site;
  char el[64], near[160];
  if (c->j < 0) snprintf(el, sizeof el, "[%lld]", (long long)c->i);
  else snprintf(el, sizeof el, "[%lld, %lld]", (long long)c->i, (long long)c->j);
  nearest(c, near, sizeof near);
  kn_loc loc = {s->file, s->line, s->col};
  kn_error(d, NULL, loc,
           "%s: %s out of bounds: element %s at address 0x%llx (program (%d,%d,%d)) is outside "
           "every buffer%s",
           name, s->op, el, (unsigned long long)c->addr, c->pid[0], c->pid[1], c->pid[2], near);
  /* the site's strings belong to the kernel's code, which may be freed before *d is read; the
   * rendered text keeps the file */
  if (d) d->loc.file = NULL;
  return -1;
}

int kn_host_run(const char *name, kn_host_kernel_fn fn, int *status, const kn_argval *args,
                int nparams, const int grid[3], bool checked, const kn_region *regions,
                int nregions, kn_diag *d) {
  if (!fn) return kn_error(d, NULL, no_loc, "%s is not runnable on the host", name);
  kn_host_check chk = {.regions = regions, .nregions = regions ? nregions : 0,
                       .nx = grid ? grid[0] : 0, .ny = grid ? grid[1] : 0, .first = INT64_MAX};
  kn_argval *ext = NULL;
  if (checked) {
    ext = malloc(((size_t)nparams + 1) * sizeof *ext);
    if (!ext) return kn_error(d, NULL, no_loc, "out of memory");
    if (nparams) memcpy(ext, args, (size_t)nparams * sizeof *ext);
    ext[nparams].p = &chk;
    pthread_mutex_init(&chk.mu, NULL);
  }
  /* the status word is per kernel: launches of one kernel are serialised by the pool, so the bits
   * read belong to this launch */
  if (status) __atomic_store_n(status, 0, __ATOMIC_RELAXED);
  kn_diag why;
  kn_status st = kn_host_launch(fn, checked ? ext : args, grid, &why);
  if (checked) {
    pthread_mutex_destroy(&chk.mu);
    free(ext);
  }
  if (st != KN_OK) return kn_error(d, NULL, no_loc, "host launch of %s: %s", name, why.message);
  if (chk.first != INT64_MAX) return violation(name, &chk, d);
  int bits = status ? __atomic_load_n(status, __ATOMIC_RELAXED) : 0;
  if (bits & KN_KSTATUS_DIV_ZERO)
    return kn_error(d, NULL, no_loc, "%s: integer division or remainder by zero", name);
  if (bits & KN_KSTATUS_SHIFT) return kn_error(d, NULL, no_loc, "%s: shift amount out of range", name);
  if (bits & KN_KSTATUS_STEP) return kn_error(d, NULL, no_loc, "%s: for step is not positive", name);
  return 0;
}
