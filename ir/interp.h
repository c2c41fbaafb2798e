/* interp.h — the reference interpreter: the numeric oracle for every kiln target.
 *
 * kn_interp_run() executes one kernel of a verified module over a grid of program instances,
 * one instance after another, on host memory.  Semantics (also in docs/ir.md):
 *  - every float value is held as a double rounded to its type after every op (kn_round), so each
 *    elementwise op is correctly rounded in its own format; exp/exp2/log/log2/tanh/rsqrt are
 *    computed in double and rounded once;
 *  - dot accumulates in f32: acc = f32(acc + f32(a[i][k] * b[k][j])) for k = 0, 1, ... in order;
 *  - reduce_sum adds in the element type of its operand, in index order; reduce_max is
 *    NaN-propagating like max;
 *  - casts round to nearest even (see numeric.h for overflow and fp8 saturation); float to int
 *    truncates toward zero (NaN -> 0, out of range saturates); int to int wraps;
 *  - a load's dead elements (outside bounds or mask) give `other` (0 when absent) and touch no
 *    memory; a live element outside every registered memory region is an error naming the op's
 *    location, the element and the address, never a crash;
 *  - integer division or remainder by zero, and shifts by an amount outside [0, width), are
 *    errors; a for with step <= 0 is an error; a run may have a step budget
 *    (kn_interp_run_budget), whose end is an error;
 *  - an elemental call (tiles for a func's scalar params) runs the callee once per element;
 *    a gather reads base[offsets[i]] for each live element (dead ones give `other`, touch
 *    nothing).
 *
 * kn_interp_fn calls one function of scalars and pointers many times (the float64 reference
 * evaluates a variant's score and mask functions per element this way); KN_INTERP_F64 runs
 * without rounding floats to their types.
 */
#ifndef KILN_INTERP_H
#define KILN_INTERP_H

#include "ir.h"

/* one kernel argument, matching the type of the kernel parameter at the same index */
typedef struct kn_argval {
  union {
    int64_t i;  /* i1, i32, i64 */
    double f;   /* float scalars (rounded to the parameter's type on entry) */
    void *p;    /* pointers */
  };
} kn_argval;

/* host memory the kernel may touch; accesses outside every region are errors */
typedef struct kn_region {
  void *data;
  size_t bytes;
} kn_region;

/* filled (not added to) by kn_interp_run, also when it fails: counts up to the failure */
typedef struct kn_interp_stats {
  uint64_t ops[KN_OP_COUNT];   /* ops executed, by opcode: a `for` counts once each time the loop
                                  runs, its body's ops (and yield) once per iteration; yield and
                                  return count too */
  uint64_t loop_iterations;    /* bodies of `for` executed */
  uint64_t programs;           /* program instances run */
  uint64_t steps;              /* the step budget's count (kn_interp_run_budget): up to the
                                  failing op's when the budget ends; 0 when the run has none */
} kn_interp_stats;

/* Runs kernel `k` (a kernel of a verified module) over grid[0] x grid[1] x grid[2] program
 * instances, axis 0 fastest (a grid with a zero runs nothing).  args has kn_func_nparams(k)
 * entries.  stats may be NULL.  Returns 0, or -1 with the first error in *d (execution stops at
 * the first error; stores made before it stay in memory).  Numbers the values of every function
 * of k's module (kn_func_number) and keeps no state after it returns; not thread-safe on one
 * module (numbering writes to it), fine on different modules. */
int kn_interp_run(kn_func *k, const kn_argval *args, const int grid[3], const kn_region *regions,
                  int nregions, kn_interp_stats *stats, kn_diag *d);

/* flags of kn_interp_run_flags and kn_interp_fn_new */
enum {
  /* Floats are held as doubles and never rounded to their type: every f16/bf16/f32/fp8 op
   * computes in double (a const is its literal, a cast between float types keeps the value, an
   * int becomes the nearest double, dot and reduce_sum accumulate in double, float arguments
   * are taken as given).  Memory keeps its formats: a load reads the stored format and widens
   * it exactly, a store rounds to the format.  Integer semantics are unchanged. */
  KN_INTERP_F64 = 1,
};

/* kn_interp_run with flags (0: the IR's semantics, as kn_interp_run) */
int kn_interp_run_flags(kn_func *k, int flags, const kn_argval *args, const int grid[3],
                        const kn_region *regions, int nregions, kn_interp_stats *stats,
                        kn_diag *d);

/* kn_interp_run_flags with a step budget: each op executed costs one step plus one per element
 * of its tile result (every program and callee together, a loop body's ops once per iteration,
 * yields and returns included); the op that takes the total past max_steps (0: no budget)
 * stops the run with an error naming it, so a loop that does not end (say, for 0 to 2^63 - 1)
 * is an error rather than a hang */
int kn_interp_run_budget(kn_func *k, int flags, uint64_t max_steps, const kn_argval *args,
                         const int grid[3], const kn_region *regions, int nregions,
                         kn_interp_stats *stats, kn_diag *d);

/* A prepared function: f (a func or kernel of a verified module whose params and results are
 * scalars or pointers) with its frames, numbered and allocated once, so that a call costs the
 * ops it runs and no allocation (the frames are reused; a tile inside f keeps its buffer).  The
 * regions are copied.  The module must not change while the kn_interp_fn lives (value ids are
 * taken at creation).  kn_interp_fn_new numbers the module's functions, so it is not
 * thread-safe on one module; calls on different kn_interp_fn objects are independent.  NULL
 * with *d filled on failure. */
typedef struct kn_interp_fn kn_interp_fn;
kn_interp_fn *kn_interp_fn_new(kn_func *f, int flags, const kn_region *regions, int nregions,
                               kn_diag *d);
/* args: one per param (.i ints, .f floats, rounded to the type unless KN_INTERP_F64, .p
 * pointers); results: one per result, written the same way.  0, or -1 with the error in *d
 * (messages name the op's location, without a program instance). */
int kn_interp_fn_call(kn_interp_fn *fn, const kn_argval *args, kn_argval *results, kn_diag *d);
void kn_interp_fn_free(kn_interp_fn *fn);

#endif
