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
 *    errors; a for with step <= 0 is an error.
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
} kn_interp_stats;

/* Runs kernel `k` (a kernel of a verified module) over grid[0] x grid[1] x grid[2] program
 * instances, axis 0 fastest (a grid with a zero runs nothing).  args has kn_func_nparams(k)
 * entries.  stats may be NULL.  Returns 0, or -1 with the first error in *d (execution stops at
 * the first error; stores made before it stay in memory).  Numbers the values of every function
 * of k's module (kn_func_number) and keeps no state after it returns; not thread-safe on one
 * module (numbering writes to it), fine on different modules. */
int kn_interp_run(kn_func *k, const kn_argval *args, const int grid[3], const kn_region *regions,
                  int nregions, kn_interp_stats *stats, kn_diag *d);

#endif
