/* runtime.c — the emulator's runtime: one workgroup's lanes as fibers, wave and workgroup
 * rendezvous, checked LDS and global memory, and kn_emu_run over a grid.
 *
 * Scheduling.  A workgroup of W waves is 64 * W fibers on one OS thread.  A lane runs until it
 * reaches an operation that needs other lanes: a cross-lane operation (MFMA, DPP, swizzle,
 * (b)permute, readlane, ballot) waits for the 64 lanes of its wave, s_barrier for every lane of
 * the workgroup.  The lane that completes a rendezvous computes the operation for everyone (with
 * the hardware's semantics, wave_ops.c), makes the others runnable and carries on; a lane that
 * waits hands the CPU straight to the next runnable lane (one switch, no trip through a
 * scheduler loop).  Lanes run in order, so within a wave lane 0 runs to the next rendezvous, then
 * lane 1..., and waves are interleaved only at barriers: this is how a barrier behaves on the
 * hardware, and it makes a missing barrier visible (below).
 *
 * Strictness.  kiln's lowering keeps cross-lane operations and barriers in uniform control flow,
 * so the emulator requires every lane of a wave at the same cross-lane call site and every lane of
 * the workgroup at the same s_barrier; anything else is an error, not a silent mis-pairing: lanes
 * of a wave at different cross-lane operations, waves at different barriers, and a workgroup in
 * which no lane can make progress (a barrier some wave never reaches because it finished or waits
 * elsewhere: a deadlock on hardware) — reported with where each wave's lanes are.
 *
 * Memory.  LDS is a per-workgroup buffer of the kernel's allocation, filled with 0xff bytes (NaN
 * in every float format) so reading bytes nobody wrote shows up in the results.  Every access is
 * checked against the allocation and the chip's 64 KiB, for the alignment the IR claims, and for
 * races between waves: a shadow word per byte remembers the barrier epoch and wave of the last
 * store and the waves that read it in this epoch, so a read of bytes another wave stored since
 * the last barrier, or a store over bytes another wave stored or read since then, is reported
 * (that is what a missing barrier looks like, whatever the schedule).  Global accesses must lie
 * in one of the caller's regions.  Masked-off accesses never reach the runtime (the lowering
 * branches around them), so any access outside is an unmasked out-of-bounds access.
 *
 * Errors end the workgroup at once: the failing fiber switches to the scheduler and no fiber is
 * resumed again; fibers hold no resources, so their stacks are simply reused.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emu_internal.h"

#define KN_EMU_STACK_BYTES ((size_t)256 << 10)
#define KN_EMU_MAX_WAVES 16

enum { L_READY, L_RUNNING, L_WAVE, L_BARRIER, L_DONE };
enum { OP_READFIRST = 1, OP_READLANE, OP_BPERMUTE, OP_PERMUTE, OP_SWIZZLE, OP_DPP, OP_BALLOT,
       OP_MFMA };

typedef struct wg wg;

typedef struct lane {
  kn_emu_fiber f;
  wg *w;
  int id;                  /* work-item id in the workgroup */
  int state, op, site;
  uint32_t x, y;           /* operands of the pending cross-lane op */
  uint32_t lds_seq;        /* LDS accesses since the last barrier (program order within a wave) */
  int32_t imm[4];          /* its immediates */
  const void *a, *b;       /* MFMA operands (on the lane's own stack) */
  float *cd;
  uint64_t result;
} lane;

/* within a wave: the lane and sequence number of the last store and of the latest read of a byte
 * in the current barrier epoch */
struct lds_order {
  uint32_t w_seq, r_seq;
  uint8_t w_lane, r_lane, r_multi;
};

typedef void (*entry_fn)(const void *args, int32_t px, int32_t py, int32_t pz, int32_t nx,
                         int32_t ny, int32_t nz);

/* one kn_emu_run: shared by its worker threads */
typedef struct launch {
  const kn_region *regions;
  int nregions;
  entry_fn entry;
  const kn_argval *args;
  int grid[3];
  long total;
  long next;               /* next linear workgroup id (atomic) */
  int failed;              /* atomic */
  pthread_mutex_t mu;
  kn_diag diag;            /* the first error */
  kn_emu_stats stats;
} launch;

/* a worker's workgroup state, reused from one workgroup to the next */
struct wg {
  launch *L;               /* NULL when run outside kn_emu_run */
  const kn_emu_info *info;
  const void *args;
  int pid[3];
  /* the hidden kernel arguments of code object v5 (llvm.amdgcn.implicitarg.ptr): the grid in
   * workgroups at bytes 0, 4, 8 (hidden_block_count_x/y/z), the workgroup size at 12, 14, 16
   * (hidden_group_size_x/y/z); the rest reads as 0 */
  uint32_t implicit[16];
  int nlanes, cap;
  lane *lanes;
  void **stacks;
  int *queue;              /* ring of runnable lanes (each at most once) */
  int qh, qn;
  lane *cur;
  kn_emu_fiber sched;
  int wave_arrived[KN_EMU_MAX_WAVES];
  int bar_arrived, done;
  uint8_t *lds;            /* the workgroup's LDS, and its shadow: */
  uint32_t *w_epoch, *r_epoch;
  uint8_t *w_wave;
  uint16_t *r_waves;
  struct lds_order *order; /* per byte: who, and at which lds_seq, stored / read it last */
  size_t lds_cap;
  uint32_t epoch;          /* barriers completed + 1 */
  bool failed;
  kn_diag diag;
  kn_emu_stats st;
};

static __thread wg *tls_worker;   /* the worker's state (kn_emu_run threads) */
static __thread wg *tls_running;  /* the workgroup whose lanes run on this thread */

static const kn_loc no_loc = {0};

/* ---- scheduling ---- */

static void push(wg *w, lane *l) {
  w->queue[(w->qh + w->qn) % w->nlanes] = l->id;
  w->qn++;
}

static lane *pop(wg *w) {
  if (!w->qn) return NULL;
  lane *l = &w->lanes[w->queue[w->qh]];
  w->qh = (w->qh + 1) % w->nlanes;
  w->qn--;
  return l;
}

/* the current lane gives the CPU to the next runnable lane (or back to the scheduler); returns
 * when someone makes it runnable again and switches to it */
static void yield(wg *w, lane *self) {
  lane *n = w->failed ? NULL : pop(w);
  w->st.switches++;
  w->cur = n;
  if (n) {
    n->state = L_RUNNING;
    kn_emu_fiber_switch(&self->f, &n->f);
  } else {
    kn_emu_fiber_switch(&self->f, &w->sched);
  }
}

static lane *cur_lane(void) {
  wg *w = tls_running;
  KN_ASSERT(w && w->cur);  /* runtime entry points are only called by emulated lanes */
  return w->cur;
}

static const char *site_name(const wg *w, int site) {
  return site >= 0 && site < w->info->nsites ? w->info->sites[site] : "?";
}

/* records the error (the first one) and ends the workgroup: never returns to the lane */
static void fail(wg *w, lane *l, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
static void fail(wg *w, lane *l, const char *fmt, ...) {
  if (!w->failed) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kn_error(&w->diag, NULL, no_loc, "emulated %s: @%s workgroup (%d,%d,%d) wave %d lane %d: %s",
             w->info->arch, w->info->kernel, w->pid[0], w->pid[1], w->pid[2], l->id / 64,
             l->id % 64, msg);
    w->failed = true;
  }
  w->cur = NULL;
  kn_emu_fiber_switch(&l->f, &w->sched);
  __builtin_unreachable();
}

static void lane_main(void *p) {
  kn_emu_fiber_begin();
  lane *l = p;
  wg *w = l->w;
  w->info->lane(w->args);
  l->state = L_DONE;
  w->done++;
  yield(w, l);
  KN_ASSERT(!"a finished lane was resumed");
}

/* ---- rendezvous ---- */

/* The lane arrives at a cross-lane op.  Returns the wave's first lane when it is the last to
 * arrive (the caller then computes the op for all 64 and calls wave_release), else NULL after
 * the op has been completed by another lane (the result is in l->result). */
static lane *wave_arrive(lane *l, int op, int site) {
  wg *w = l->w;
  int wv = l->id / 64;
  l->op = op;
  l->site = site;
  l->state = L_WAVE;
  if (++w->wave_arrived[wv] < 64) {
    yield(w, l);
    return NULL;
  }
  w->wave_arrived[wv] = 0;
  lane *g = &w->lanes[wv * 64];
  for (int i = 0; i < 64; i++)
    if (g[i].op != op || g[i].site != site)
      fail(w, l, "the lanes of the wave meet at different cross-lane operations (divergent control "
                 "flow): lane 0 at %s, lane %d at %s", site_name(w, g[0].site), i,
           site_name(w, g[i].site));
  return g;
}

static void wave_release(lane *self, lane *g) {
  wg *w = self->w;
  for (int i = 0; i < 64; i++) {
    g[i].op = 0;
    if (&g[i] != self) {
      g[i].state = L_READY;
      push(w, &g[i]);
    }
  }
  self->state = L_RUNNING;
  w->st.wave_ops++;
}

/* every lane's immediate k must be the same (they are the same call site, so this is a check on
 * the rewrite, and on values the hardware takes from scalar registers) */
static void uniform_imm(lane *l, lane *g, int k, const char *what) {
  for (int i = 1; i < 64; i++)
    if (g[i].imm[k] != g[0].imm[k])
      fail(l->w, l, "%s: %s differs between lanes (%d in lane 0, %d in lane %d); the hardware takes "
                    "it from a scalar register", site_name(l->w, l->site), what, g[0].imm[k],
           g[i].imm[k], i);
}

uint32_t kn_emu_rt_readfirstlane(uint32_t v, int32_t site) {
  lane *l = cur_lane(), *g;
  l->x = v;
  if ((g = wave_arrive(l, OP_READFIRST, site))) {
    for (int i = 0; i < 64; i++) g[i].result = g[0].x;
    wave_release(l, g);
  }
  return (uint32_t)l->result;
}

uint32_t kn_emu_rt_readlane(uint32_t v, int32_t src_lane, int32_t site) {
  lane *l = cur_lane(), *g;
  l->x = v;
  l->imm[0] = src_lane;
  if ((g = wave_arrive(l, OP_READLANE, site))) {
    uniform_imm(l, g, 0, "the lane index of readlane");
    for (int i = 0; i < 64; i++) g[i].result = g[g[0].imm[0] & 63].x;
    wave_release(l, g);
  }
  return (uint32_t)l->result;
}

static uint32_t permute(uint32_t addr, uint32_t v, int32_t site, int op) {
  lane *l = cur_lane(), *g;
  l->x = addr;
  l->y = v;
  if ((g = wave_arrive(l, op, site))) {
    uint32_t A[64], S[64], O[64];
    for (int i = 0; i < 64; i++) A[i] = g[i].x, S[i] = g[i].y;
    if (op == OP_BPERMUTE) kn_emu_bpermute_exec(A, S, O);
    else kn_emu_permute_exec(A, S, O);
    for (int i = 0; i < 64; i++) g[i].result = O[i];
    wave_release(l, g);
  }
  return (uint32_t)l->result;
}

uint32_t kn_emu_rt_bpermute(uint32_t addr, uint32_t v, int32_t site) {
  return permute(addr, v, site, OP_BPERMUTE);
}

uint32_t kn_emu_rt_permute(uint32_t addr, uint32_t v, int32_t site) {
  return permute(addr, v, site, OP_PERMUTE);
}

uint32_t kn_emu_rt_swizzle(uint32_t v, int32_t pattern, int32_t site) {
  lane *l = cur_lane(), *g;
  l->x = v;
  l->imm[0] = pattern;
  if ((g = wave_arrive(l, OP_SWIZZLE, site))) {
    uniform_imm(l, g, 0, "the swizzle pattern");
    uint32_t S[64], O[64];
    for (int i = 0; i < 64; i++) S[i] = g[i].x;
    kn_emu_swizzle_exec(S, g[0].imm[0], O);
    for (int i = 0; i < 64; i++) g[i].result = O[i];
    wave_release(l, g);
  }
  return (uint32_t)l->result;
}

uint32_t kn_emu_rt_dpp(uint32_t old, uint32_t src, int32_t ctrl, int32_t row_mask,
                       int32_t bank_mask, int32_t bound_ctrl, int32_t site) {
  lane *l = cur_lane(), *g;
  l->x = old;
  l->y = src;
  l->imm[0] = ctrl, l->imm[1] = row_mask, l->imm[2] = bank_mask, l->imm[3] = bound_ctrl;
  if ((g = wave_arrive(l, OP_DPP, site))) {
    for (int k = 0; k < 4; k++) uniform_imm(l, g, k, "a DPP control");
    uint32_t Old[64], S[64], O[64];
    for (int i = 0; i < 64; i++) Old[i] = g[i].x, S[i] = g[i].y;
    if (kn_emu_dpp_exec(Old, S, ctrl, row_mask, bank_mask, bound_ctrl != 0, O))
      fail(l->w, l, "%s: dpp_ctrl 0x%x is not a gfx9 DPP control", site_name(l->w, site), ctrl);
    for (int i = 0; i < 64; i++) g[i].result = O[i];
    wave_release(l, g);
  }
  return (uint32_t)l->result;
}

uint64_t kn_emu_rt_ballot(int32_t cond, int32_t site) {
  lane *l = cur_lane(), *g;
  l->x = cond != 0;
  if ((g = wave_arrive(l, OP_BALLOT, site))) {
    uint64_t m = 0;
    for (int i = 0; i < 64; i++) m |= (uint64_t)g[i].x << i;
    for (int i = 0; i < 64; i++) g[i].result = m;
    wave_release(l, g);
  }
  return l->result;
}

void kn_emu_rt_mfma(int32_t kind, const void *a, const void *b, float *cd, int32_t cbsz,
                    int32_t abid, int32_t blgp, int32_t site) {
  lane *l = cur_lane(), *g;
  wg *w = l->w;
  l->a = a;
  l->b = b;
  l->cd = cd;
  if ((g = wave_arrive(l, OP_MFMA, site))) {
    const kn_emu_mfma_desc *s = kn_emu_mfma_get((kn_emu_mfma_kind)kind);
    if (!s) fail(w, l, "%s: unknown MFMA", site_name(w, site));
    if (!kn_emu_mfma_on_chip((kn_emu_mfma_kind)kind, w->info->arch))
      fail(w, l, "%s: %s does not exist on %s", site_name(w, site), s->mnemonic, w->info->arch);
    if (cbsz || abid || blgp)
      fail(w, l, "%s: CBSZ/ABID/BLGP modifiers (%d/%d/%d) are not emulated", site_name(w, site),
           cbsz, abid, blgp);
    const void *A[64], *B[64];
    const float *C[64];
    float *D[64];
    for (int i = 0; i < 64; i++) A[i] = g[i].a, B[i] = g[i].b, C[i] = g[i].cd, D[i] = g[i].cd;
    kn_emu_mfma_exec((kn_emu_mfma_kind)kind, A, B, C, D, (unsigned)w->info->breaks);
    w->st.mfmas++;
    wave_release(l, g);
  }
}

void kn_emu_rt_barrier(int32_t site) {
  lane *l = cur_lane();
  wg *w = l->w;
  l->state = L_BARRIER;
  l->site = site;
  if (++w->bar_arrived < w->nlanes) {
    yield(w, l);
    return;
  }
  w->bar_arrived = 0;
  for (int i = 0; i < w->nlanes; i++)
    if (w->lanes[i].site != site)
      fail(w, l, "the waves reach different barriers: wave %d at %s, wave %d at %s", l->id / 64,
           site_name(w, site), i / 64, site_name(w, w->lanes[i].site));
  w->epoch++;
  w->st.barriers++;
  for (int i = 0; i < w->nlanes; i++) w->lanes[i].lds_seq = 0;
  for (int i = 0; i < w->nlanes; i++)
    if (&w->lanes[i] != l) {
      w->lanes[i].state = L_READY;
      push(w, &w->lanes[i]);
    }
  l->state = L_RUNNING;
}

int32_t kn_emu_rt_workitem_id(void) { return cur_lane()->id; }

int32_t kn_emu_rt_workgroup_id(int32_t dim) {
  lane *l = cur_lane();
  return dim >= 0 && dim < 3 ? l->w->pid[dim] : 0;
}

const void *kn_emu_rt_implicitarg(void) { return cur_lane()->w->implicit; }

uint32_t kn_emu_rt_mbcnt(int32_t hi, uint32_t mask, uint32_t acc) {
  int lane_in_wave = cur_lane()->id % 64;
  int bits = hi ? lane_in_wave - 32 : lane_in_wave;
  if (bits <= 0) return acc;
  uint32_t below = bits >= 32 ? mask : mask & ((1u << bits) - 1);
  return acc + (uint32_t)__builtin_popcount(below);
}

/* ---- memory ---- */

/* src: the bytes a store writes (NULL for a load) */
static void lds_check(lane *l, uint64_t off, int bytes, int align, int site, const uint8_t *src) {
  bool store = src != NULL;
  wg *w = l->w;
  const char *what = store ? "store" : "load";
  if (align > 1 && off % (uint64_t)align)
    fail(w, l, "%s: misaligned LDS %s of %d bytes at offset %llu (the IR claims %d-byte alignment)",
         site_name(w, site), what, bytes, (unsigned long long)off, align);
  if (off + (uint64_t)bytes > (uint64_t)w->info->lds_bytes || off > (uint64_t)1 << 40) {
    if (off + (uint64_t)bytes > (uint64_t)w->info->lds_limit || off > (uint64_t)1 << 40)
      fail(w, l, "%s: LDS %s of %d bytes at offset %lld is outside the %d KiB of LDS of %s",
           site_name(w, site), what, bytes, (long long)off, w->info->lds_limit / 1024,
           w->info->arch);
    fail(w, l, "%s: LDS %s of %d bytes at offset %llu is beyond the kernel's LDS allocation of "
               "%d bytes", site_name(w, site), what, bytes, (unsigned long long)off,
         w->info->lds_bytes);
  }
  int wv = l->id / 64, ln = l->id % 64;
  uint32_t e = w->epoch, seq = ++l->lds_seq;
  for (uint64_t b = off; b < off + (uint64_t)bytes; b++) {
    struct lds_order *o = &w->order[b];
    bool wrote = w->w_epoch[b] == e, read = w->r_epoch[b] == e;
    /* two waves storing the same bytes (layouts that replicate a tile do) is harmless */
    bool same = store && w->lds[b] == src[b - off];
    if (wrote && w->w_wave[b] != wv && !same)
      fail(w, l, "%s: LDS race at byte %llu: wave %d %s bytes wave %d stored since the last barrier "
                 "(a missing barrier?)", site_name(w, site), (unsigned long long)b, wv,
           store ? "overwrites" : "reads", w->w_wave[b]);
    /* Lanes of a wave run one after another between rendezvous points, not in lockstep: a value
     * one lane stores and another lane of the same wave reads without a barrier in between is
     * ordered by program position (lds_seq), and when the emulation order disagrees with it the
     * emulator says so instead of returning the wrong bytes. */
    if (store) {
      uint16_t others = read ? (uint16_t)(w->r_waves[b] & ~(1u << wv)) : 0;
      if (others)
        fail(w, l, "%s: LDS race at byte %llu: wave %d overwrites bytes wave %d read since the last "
                   "barrier (a missing barrier?)", site_name(w, site), (unsigned long long)b, wv,
             __builtin_ctz(others));
      if (read && !same && o->r_seq > seq && (o->r_multi || o->r_lane != ln))
        fail(w, l, "%s: LDS byte %llu is stored by lane %d after lane %d of the same wave read it at a "
                   "later program position, with no barrier between (a missing barrier?): the "
                   "emulator runs a wave's lanes one after another and cannot order this", site_name(w, site), (unsigned long long)b, ln,
             o->r_lane);
      w->w_epoch[b] = e;
      w->w_wave[b] = (uint8_t)wv;
      o->w_seq = seq;
      o->w_lane = (uint8_t)ln;
    } else {
      if (wrote && o->w_lane != ln && o->w_seq > seq)
        fail(w, l, "%s: LDS byte %llu is read by lane %d before (in program order) lane %d of the same "
                   "wave stores it, with no barrier between: the emulator cannot order this "
                   "intra-wave communication", site_name(w, site), (unsigned long long)b, ln, o->w_lane);
      if (!read) {
        w->r_epoch[b] = e, w->r_waves[b] = 0;
        o->r_seq = 0, o->r_lane = (uint8_t)ln, o->r_multi = 0;
      }
      w->r_waves[b] |= (uint16_t)(1u << wv);
      if (o->r_lane != ln) o->r_multi = 1;
      if (seq > o->r_seq) o->r_seq = seq, o->r_lane = (uint8_t)ln;
    }
  }
}

static void global_check(lane *l, uint64_t addr, int bytes, int align, int site, bool store) {
  wg *w = l->w;
  const char *what = store ? "store" : "load";
  if (align > 1 && addr % (uint64_t)align)
    fail(w, l, "%s: misaligned global %s of %d bytes at %#llx (the IR claims %d-byte alignment)",
         site_name(w, site), what, bytes, (unsigned long long)addr, align);
  if (!w->L || !w->L->regions) return;
  const kn_region *near = NULL;
  int near_i = -1;
  for (int i = 0; i < w->L->nregions; i++) {
    const kn_region *r = &w->L->regions[i];
    uint64_t base = (uint64_t)(uintptr_t)r->data;
    if (addr >= base && addr + (uint64_t)bytes <= base + r->bytes) return;
    if (base <= addr && (!near || base > (uint64_t)(uintptr_t)near->data)) near = r, near_i = i;
  }
  if (near) {
    uint64_t base = (uint64_t)(uintptr_t)near->data;
    fail(w, l, "%s: unmasked out-of-bounds global %s of %d bytes at %#llx: %lld bytes past the end "
               "of buffer %d (%zu bytes at %#llx)", site_name(w, site), what, bytes,
         (unsigned long long)addr, (long long)(addr + (uint64_t)bytes - (base + near->bytes)),
         near_i, near->bytes, (unsigned long long)base);
  }
  fail(w, l, "%s: unmasked out-of-bounds global %s of %d bytes at %#llx: in none of the %d buffers",
       site_name(w, site), what, bytes, (unsigned long long)addr, w->L->nregions);
}

void kn_emu_rt_load(int32_t as, uint64_t addr, void *dst, int32_t bytes, int32_t align,
                    int32_t site) {
  lane *l = cur_lane();
  if (as == KN_EMU_AS_LDS) {
    lds_check(l, addr, bytes, align, site, NULL);
    memcpy(dst, l->w->lds + addr, (size_t)bytes);
    l->w->st.lds_bytes += (uint64_t)bytes;
  } else {
    global_check(l, addr, bytes, align, site, false);
    memcpy(dst, (const void *)(uintptr_t)addr, (size_t)bytes);
    l->w->st.global_bytes += (uint64_t)bytes;
  }
}

void kn_emu_rt_store(int32_t as, uint64_t addr, const void *src, int32_t bytes, int32_t align,
                     int32_t site) {
  lane *l = cur_lane();
  if (as == KN_EMU_AS_LDS) {
    lds_check(l, addr, bytes, align, site, src);
    memcpy(l->w->lds + addr, src, (size_t)bytes);
    l->w->st.lds_bytes += (uint64_t)bytes;
  } else {
    global_check(l, addr, bytes, align, site, true);
    memcpy((void *)(uintptr_t)addr, src, (size_t)bytes);
    l->w->st.global_bytes += (uint64_t)bytes;
  }
}

static float flush_denormal(float x) {
  return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;
}

float kn_emu_rt_atomic_fadd(uint64_t addr, float v, int32_t align, int32_t ftz, int32_t site) {
  lane *l = cur_lane();
  global_check(l, addr, 4, align, site, true);
  l->w->st.global_bytes += 4;
  uint32_t *p = (uint32_t *)(uintptr_t)addr, old = __atomic_load_n(p, __ATOMIC_RELAXED), nw;
  float o, sum;
  do {
    memcpy(&o, &old, 4);
    sum = ftz ? flush_denormal(flush_denormal(o) + flush_denormal(v)) : o + v;
    memcpy(&nw, &sum, 4);
  } while (!__atomic_compare_exchange_n(p, &old, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return o;
}

/* A raw buffer load (stride 0, as kiln's resources are): the access is in range when
 * voff + bytes <= num_records, and then a global load of base + soff + voff (checked against
 * the launch's buffers and the alignment like any other); an access that is not is range-checked
 * per dword, as the hardware does (the LLVM AMDGPU backend's "buffer OOB" rules: the offset
 * unsigned, each 32-bit word on its own, soffset not in the check): a word past the end reads 0
 * and touches no memory. */
void kn_emu_rt_buffer_load(uint64_t rsrc, uint32_t voff, uint32_t soff, void *dst, int32_t bytes,
                           int32_t site) {
  lane *l = cur_lane();
  const uint64_t *v = (const uint64_t *)(uintptr_t)rsrc;
  uint64_t base = v[0], num = v[2];
  if (v[1] != 0)
    fail(l->w, l, "%s: a buffer resource with stride %llu is not emulated (raw buffers only)",
         site_name(l->w, site), (unsigned long long)v[1]);
  uint64_t off = voff;
  if (off + (uint64_t)bytes <= num) {
    kn_emu_rt_load(KN_EMU_AS_GLOBAL, base + soff + off, dst, bytes, bytes, site);
    return;
  }
  memset(dst, 0, (size_t)bytes);
  for (int32_t at = 0; at < bytes; at += 4) {
    int32_t n = bytes - at < 4 ? bytes - at : 4;
    if (off + (uint64_t)at + (uint64_t)n <= num)
      kn_emu_rt_load(KN_EMU_AS_GLOBAL, base + soff + off + (uint64_t)at, (char *)dst + at, n, n,
                     site);
  }
}

/* ---- one workgroup ---- */

static void wg_free(wg *w) {
  for (int i = 0; i < w->cap; i++) kn_emu_stack_free(w->stacks[i], KN_EMU_STACK_BYTES);
  free(w->stacks);
  free(w->lanes);
  free(w->queue);
  free(w->lds);
  free(w->w_epoch);
  free(w->r_epoch);
  free(w->w_wave);
  free(w->r_waves);
  free(w->order);
  memset(w, 0, sizeof *w);
}

static int wg_reserve(wg *w, int nlanes, size_t lds) {
  if (nlanes > w->cap) {
    void **st = realloc(w->stacks, sizeof *st * (size_t)nlanes);
    if (!st) return -1;
    w->stacks = st;
    for (int i = w->cap; i < nlanes; i++) w->stacks[i] = NULL;
    lane *ls = realloc(w->lanes, sizeof *ls * (size_t)nlanes);
    int *q = realloc(w->queue, sizeof *q * (size_t)nlanes);
    if (ls) w->lanes = ls;
    if (q) w->queue = q;
    if (!ls || !q) return -1;
    for (int i = w->cap; i < nlanes; i++)
      if (!(w->stacks[i] = kn_emu_stack_new(KN_EMU_STACK_BYTES))) return -1;
    w->cap = nlanes;
  }
  if (lds > w->lds_cap) {
    free(w->lds), free(w->w_epoch), free(w->r_epoch), free(w->w_wave), free(w->r_waves);
    free(w->order);
    w->order = malloc(lds * sizeof *w->order);
    w->lds = malloc(lds);
    w->w_epoch = malloc(lds * sizeof(uint32_t));
    w->r_epoch = malloc(lds * sizeof(uint32_t));
    w->w_wave = malloc(lds);
    w->r_waves = malloc(lds * sizeof(uint16_t));
    w->lds_cap = w->lds && w->w_epoch && w->r_epoch && w->w_wave && w->r_waves && w->order ? lds : 0;
    if (!w->lds_cap) return -1;
  }
  return 0;
}

/* "wave 0: lanes 0-63 at s_barrier #1; wave 1: lanes 0-63 finished" */
static void describe_lanes(const wg *w, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < w->nlanes && len + 1 < n;) {
    const lane *a = &w->lanes[i];
    int j = i + 1;
    while (j < w->nlanes && j % 64 && w->lanes[j].state == a->state &&
           (a->state == L_DONE || w->lanes[j].site == a->site))
      j++;
    const char *where = a->state == L_DONE ? "finished"
                        : a->state == L_BARRIER || a->state == L_WAVE ? "wait at"
                                                                      : "runnable";
    int k = snprintf(buf + len, n - len, "%swave %d lanes %d-%d %s%s%s", len ? "; " : "", i / 64,
                     i % 64, (j - 1) % 64, where,
                     a->state == L_BARRIER || a->state == L_WAVE ? " " : "",
                     a->state == L_BARRIER || a->state == L_WAVE ? site_name(w, a->site) : "");
    if (k < 0) break;
    len += (size_t)k;
    i = j;
  }
  if (len >= n) snprintf(buf + n - 5, 5, "...");
}

static void set_implicit(wg *w, const int grid[3], int wg_size) {
  memset(w->implicit, 0, sizeof w->implicit);
  for (int i = 0; i < 3; i++) w->implicit[i] = (uint32_t)grid[i];
  uint16_t size[3] = {(uint16_t)wg_size, 1, 1};
  memcpy((char *)w->implicit + 12, size, sizeof size);
}

static int run_workgroup(wg *w, const kn_emu_info *info, const void *args, const int pid[3],
                         const int grid[3]) {
  w->info = info;
  w->args = args;
  memcpy(w->pid, pid, sizeof w->pid);
  set_implicit(w, grid, info->wg_size);
  w->failed = false;
  int n = info->wg_size;
  if (info->magic != KN_EMU_MAGIC || n <= 0 || n % 64 || n > 64 * KN_EMU_MAX_WAVES)
    return kn_error(&w->diag, NULL, no_loc, "emulator: bad kernel description (workgroup size %d)", n);
  if (info->lds_bytes > info->lds_limit) {
    kn_error(&w->diag, NULL, no_loc,
             "emulated %s: @%s allocates %d bytes of LDS, more than the %d KiB of the chip",
             info->arch, info->kernel, info->lds_bytes, info->lds_limit / 1024);
    return -1;
  }
  size_t lds = info->lds_bytes > 0 ? (size_t)info->lds_bytes : 1;
  if (wg_reserve(w, n, lds))
    return kn_error(&w->diag, NULL, no_loc, "emulator: out of memory for %d lanes", n);
  w->nlanes = n;
  w->qh = w->qn = 0;
  w->bar_arrived = w->done = 0;
  memset(w->wave_arrived, 0, sizeof w->wave_arrived);
  memset(w->lds, 0xff, lds);
  memset(w->w_epoch, 0, lds * sizeof(uint32_t));
  memset(w->r_epoch, 0, lds * sizeof(uint32_t));
  w->epoch = 1;
  for (int i = 0; i < n; i++) {
    lane *l = &w->lanes[i];
    memset(l, 0, sizeof *l);
    l->w = w;
    l->id = i;
    l->state = L_READY;
    kn_emu_fiber_init(&l->f, w->stacks[i], KN_EMU_STACK_BYTES, lane_main, l);
    push(w, l);
  }
  wg *saved = tls_running;
  tls_running = w;
  lane *l;
  while (!w->failed && (l = pop(w))) {
    w->cur = l;
    l->state = L_RUNNING;
    w->st.switches++;
    kn_emu_fiber_switch(&w->sched, &l->f);
  }
  tls_running = saved;
  w->st.workgroups++;
  w->st.lanes += (uint64_t)n;
  if (!w->failed && w->done < n) {
    char where[360];
    describe_lanes(w, where, sizeof where);
    kn_error(&w->diag, NULL, no_loc,
             "emulated %s: @%s workgroup (%d,%d,%d): deadlock: no lane can make progress (a barrier "
             "or cross-lane operation that not every lane reaches): %s",
             info->arch, info->kernel, pid[0], pid[1], pid[2], where);
    w->failed = true;
  }
  return w->failed ? -1 : 0;
}

static void stats_add(kn_emu_stats *a, const kn_emu_stats *b) {
  a->workgroups += b->workgroups, a->lanes += b->lanes, a->switches += b->switches;
  a->wave_ops += b->wave_ops, a->mfmas += b->mfmas, a->barriers += b->barriers;
  a->lds_bytes += b->lds_bytes, a->global_bytes += b->global_bytes;
}

/* called by kiln_<name>, the JIT'ed entry point with the host kernel ABI */
void kn_emu_rt_workgroup(const kn_emu_info *info, const void *args, int32_t px, int32_t py,
                         int32_t pz, int32_t nx, int32_t ny, int32_t nz) {
  int pid[3] = {px, py, pz}, grid[3] = {nx, ny, nz};
  wg *w = tls_worker;
  if (w && w->L) {
    launch *L = w->L;
    if (__atomic_load_n(&L->failed, __ATOMIC_RELAXED)) return;
    if (run_workgroup(w, info, args, pid, grid)) {
      pthread_mutex_lock(&L->mu);
      if (!L->failed) L->diag = w->diag;
      __atomic_store_n(&L->failed, 1, __ATOMIC_RELAXED);
      pthread_mutex_unlock(&L->mu);
    }
    return;
  }
  /* outside kn_emu_run (e.g. kn_kernel_run_host): no buffer checks, errors as a status bit */
  wg tmp = {0};
  if (run_workgroup(&tmp, info, args, pid, grid))
    __atomic_fetch_or(info->status, KN_EMU_STATUS_ERROR, __ATOMIC_RELAXED);
  wg_free(&tmp);
}

/* ---- the grid ---- */

static void *worker(void *p) {
  launch *L = p;
  wg w = {0};
  w.L = L;
  tls_worker = &w;
  for (;;) {
    long i = __atomic_fetch_add(&L->next, 1, __ATOMIC_RELAXED);
    if (i >= L->total || __atomic_load_n(&L->failed, __ATOMIC_RELAXED)) break;
    int px = (int)(i % L->grid[0]), py = (int)(i / L->grid[0] % L->grid[1]),
        pz = (int)(i / L->grid[0] / L->grid[1]);
    L->entry(L->args, px, py, pz, L->grid[0], L->grid[1], L->grid[2]);
  }
  pthread_mutex_lock(&L->mu);
  stats_add(&L->stats, &w.st);
  pthread_mutex_unlock(&L->mu);
  tls_worker = NULL;
  wg_free(&w);
  return NULL;
}

int kn_emu_run(kn_kernel *k, const kn_argval *args, const int grid[3], const kn_region *regions,
               int nregions, const kn_emu_options *opt, kn_diag *d) {
  return kn_emu_run_entry(kn_kernel_entry(k), args, grid, regions, nregions, opt, d);
}

int kn_emu_run_entry(void *entry, const kn_argval *args, const int grid[3],
                     const kn_region *regions, int nregions, const kn_emu_options *opt, kn_diag *d) {
  if (!entry) return kn_error(d, NULL, no_loc, "kn_emu_run: the kernel is not runnable");
  if (grid[0] < 0 || grid[1] < 0 || grid[2] < 0)
    return kn_error(d, NULL, no_loc, "kn_emu_run: negative grid");
  launch L = {.regions = regions, .nregions = nregions, .args = args};
  L.entry = (entry_fn)(uintptr_t)entry;
  memcpy(L.grid, grid, sizeof L.grid);
  L.total = (long)grid[0] * grid[1] * grid[2];
  pthread_mutex_init(&L.mu, NULL);
  int threads = opt && opt->threads > 0 ? opt->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads < 1) threads = 1;
  if (threads > 64) threads = 64;
  if (threads > L.total) threads = L.total > 0 ? (int)L.total : 1;
  pthread_t tid[64];
  int started = 0;
  for (int i = 1; i < threads; i++)
    if (pthread_create(&tid[started], NULL, worker, &L) == 0) started++;
  worker(&L);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  pthread_mutex_destroy(&L.mu);
  if (opt && opt->stats) *opt->stats = L.stats;
  if (L.failed) {
    *d = L.diag;
    return -1;
  }
  return 0;
}
