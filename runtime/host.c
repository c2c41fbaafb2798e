/* host.c — the host device: memory and a thread pool that runs a kernel over a grid.
 *
 * The pool is created on the first launch with one worker per online CPU ($KILN_HOST_THREADS
 * overrides) and lives until the process ends or kn_host_set_threads() replaces it.  A launch
 * publishes one job (function, arguments, grid) under the pool's mutex and bumps a generation
 * counter; worker w runs the contiguous chunk [w*P/n, (w+1)*P/n) of the P linearised program ids
 * (x fastest, then y, then z), so neighbouring programs (which usually share K/V rows) run on one
 * thread in order.  The launching thread only waits: kernels keep their tile buffers on the
 * stack, and the workers' stacks are sized for that (KN_HOST_STACK_BYTES; pages are committed
 * only when touched) while the caller's may be small.
 *
 * Launches are serialised by a second mutex: a host "device" runs one grid at a time.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"

void *kn_host_alloc(size_t bytes) {
  size_t n = (bytes + 63) & ~(size_t)63;
  if (n < bytes) return NULL;
  void *p = aligned_alloc(64, n ? n : 64);
  if (p) memset(p, 0, n ? n : 64);
  return p;
}

void kn_host_free(void *p) { free(p); }

/* ---- the pool ---- */

typedef struct pool {
  int n;                 /* workers started */
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work;   /* a new generation (job) or stop */
  pthread_cond_t done;   /* pending reached 0 */
  uint64_t gen;
  int pending;           /* workers still running the current job */
  bool stop;
  /* the current job */
  kn_host_kernel_fn fn;
  const void *args;
  int32_t grid[3];
  int64_t total;
} pool;

static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;
static pool *the_pool;     /* guarded by launch_mu */
static int wanted_threads; /* 0: default; guarded by launch_mu */

typedef struct worker_arg {
  pool *p;
  int index;
} worker_arg;

static void run_chunk(const pool *p, int w) {
  int64_t lo = p->total * w / p->n, hi = p->total * (w + 1) / p->n;
  int32_t nx = p->grid[0], ny = p->grid[1], nz = p->grid[2];
  for (int64_t l = lo; l < hi; l++) {
    int32_t px = (int32_t)(l % nx), py = (int32_t)(l / nx % ny), pz = (int32_t)(l / nx / ny);
    p->fn(p->args, px, py, pz, nx, ny, nz);
  }
}

static void *worker_main(void *arg) {
  worker_arg wa = *(worker_arg *)arg;
  free(arg);
  pool *p = wa.p;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->gen == seen) pthread_cond_wait(&p->work, &p->mu);
    if (p->stop) break;
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, wa.index); /* the job fields do not change until pending reaches 0 */
    pthread_mutex_lock(&p->mu);
    if (--p->pending == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static int default_threads(void) {
  const char *e = getenv("KILN_HOST_THREADS");
  if (e && atoi(e) > 0) return atoi(e);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)(n > 1024 ? 1024 : n) : 1;
}

static void pool_destroy(pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done);
  free(p->threads);
  free(p);
}

static kn_status pool_create(int n, pool **out, kn_diag *d) {
  pool *p = calloc(1, sizeof *p);
  if (!p) return kn_diag_set(d, KN_E_NOMEM, "out of memory for the host thread pool");
  p->threads = calloc((size_t)n, sizeof *p->threads);
  if (!p->threads) {
    free(p);
    return kn_diag_set(d, KN_E_NOMEM, "out of memory for the host thread pool");
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, KN_HOST_STACK_BYTES);
  kn_status st = KN_OK;
  for (int i = 0; i < n; i++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) {
      st = kn_diag_set(d, KN_E_NOMEM, "out of memory for the host thread pool");
      break;
    }
    *wa = (worker_arg){p, i};
    int e = pthread_create(&p->threads[i], &attr, worker_main, wa);
    if (e != 0) {
      free(wa);
      st = kn_diag_set(d, KN_E_RUNTIME, "cannot start host worker thread %d of %d: %s", i + 1, n,
                       strerror(e));
      break;
    }
    p->n++;
  }
  pthread_attr_destroy(&attr);
  if (st != KN_OK) {
    pool_destroy(p);
    return st;
  }
  *out = p;
  return KN_OK;
}

kn_status kn_host_launch(kn_host_kernel_fn fn, const void *args, const int grid[3], kn_diag *d) {
  if (!fn || !grid || grid[0] < 0 || grid[1] < 0 || grid[2] < 0)
    return kn_diag_set(d, KN_E_INVALID, "invalid host launch (a negative grid or no kernel)");
  int64_t total = (int64_t)grid[0] * grid[1] * grid[2];
  if (total == 0) return KN_OK;
  pthread_mutex_lock(&launch_mu);
  if (!the_pool) {
    kn_status st = pool_create(wanted_threads > 0 ? wanted_threads : default_threads(), &the_pool, d);
    if (st != KN_OK) {
      the_pool = NULL;
      pthread_mutex_unlock(&launch_mu);
      return st;
    }
  }
  pool *p = the_pool;
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->args = args;
  for (int i = 0; i < 3; i++) p->grid[i] = grid[i];
  p->total = total;
  p->pending = p->n;
  p->gen++;
  pthread_cond_broadcast(&p->work);
  while (p->pending > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&launch_mu);
  return KN_OK;
}

int kn_host_threads(void) {
  pthread_mutex_lock(&launch_mu);
  int n = the_pool ? the_pool->n : wanted_threads > 0 ? wanted_threads : default_threads();
  pthread_mutex_unlock(&launch_mu);
  return n;
}

void kn_host_set_threads(int n) {
  pthread_mutex_lock(&launch_mu);
  pool_destroy(the_pool);
  the_pool = NULL;
  wanted_threads = n > 0 ? n : 0;
  pthread_mutex_unlock(&launch_mu);
}
