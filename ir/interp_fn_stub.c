/* TEMPORARY stub of the `ir` branch's kn_interp_fn API (see interp.h); reverted before the
 * merge of `ir`. */
#include "interp.h"

kn_interp_fn *kn_interp_fn_new(kn_func *f, int flags, const kn_region *regions, int nregions,
                               kn_diag *d) {
  (void)f, (void)flags, (void)regions, (void)nregions;
  kn_loc nowhere = {0};
  kn_error(d, NULL, nowhere, "kn_interp_fn is not available on this branch yet (stub)");
  return NULL;
}
int kn_interp_fn_call(kn_interp_fn *fn, const kn_argval *args, kn_argval *results, kn_diag *d) {
  (void)fn, (void)args, (void)results, (void)d;
  return -1;
}
void kn_interp_fn_free(kn_interp_fn *fn) { (void)fn; }
