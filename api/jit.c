/* jit.c — the one switch between the full library and a runtime without the compiler.
 *
 * libkiln compiles: a descriptor that the context's AOT bundle lacks (or any descriptor, without
 * a bundle) is compiled by the pipeline.  A library built without the compiler (kiln_rt: the
 * API, the runtime and the bundle reader, no LLVM) replaces this file with one returning false;
 * prepare then serves only what the bundle holds and refuses the rest with the reason
 * (api/kiln.c, kiln_prepare), exactly as kiln_context_options.bundle_only does here.
 */
#include "api.h"

bool api_jit_available(void) { return true; }
