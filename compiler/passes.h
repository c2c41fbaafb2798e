/* passes.h — the kiln passes on the tile IR, one per file, each with one entry point.
 *
 * Every pass takes a verified module and leaves a verified module (pipeline.c checks that with
 * kn_verify between passes in debug builds or with KILN_VERIFY_EACH=1).  Passes allocate from the
 * module's arena and never free; a dropped op simply stays unreachable in the arena.
 */
#ifndef KILN_PASSES_H
#define KILN_PASSES_H

#include "ir.h"

/* clone.c: a deep copy of src (functions, blocks, values, metadata); call ops point at the copy's
 * functions.  The pipeline works on a copy so that compiling never changes the caller's module. */
kn_module *kn_module_clone(const kn_module *src);

/* clone.c: appends to b's block copies of the ops of src from `first` up to (not including)
 * `stop` (NULL: to the end).  map[v->id] gives the new value for every value v of src's function
 * defined before `first` (e.g. its params); the copies' new values are added to map.  Calls keep
 * their callee pointers.  kn_func_number() must be current on src's function. */
void kn_clone_ops(kn_builder *b, const kn_op *first, const kn_op *stop, kn_value **map);

/* fold.c: folds ops on scalar int constants into constants and deletes pure ops whose results are
 * unused.  Returns the number of ops changed. */
int kn_fold(kn_module *m);

/* inline.c: replaces every call in the module's kernels by the body of its callee; an elemental
 * call's callee is lifted to the call's tile shape (uniform values stay scalars, varying loads
 * become gathers).  Returns 0, or -1 with *d filled (recursion, unresolved callee). */
int kn_inline(kn_module *m, kn_diag *d);

/* scale.c: folds chains of uniform f32 scalings, (x * u) * w -> x * (u * w) and
 * (a +- x * u) * w -> a * w +- x * (u * w), where the inner values have no other use, in the
 * kernels whose attribute REASSOC is 1.  Returns the number of rewrites. */
int kn_fold_scale(kn_module *m);

#endif
