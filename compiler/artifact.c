/* artifact.c — what every target's compile produces (kn_artifact, compiler/pipeline.h), freed
 * and named.  Plain C beside the registry in kiln_arch, without LLVM, so that code which only
 * handles artefacts — the API without a compiler (libkiln_rt), a bundle loader — does not link
 * the compiler to free one.
 */
#include <stdlib.h>

#include "pipeline.h"

void kn_artifact_free(kn_artifact *a) {
  if (!a) return;
  free(a->data);
  a->data = NULL;
  a->size = 0;
}

const char *kn_artifact_kind_name(kn_artifact_kind k) {
  switch (k) {
  case KN_ARTIFACT_HOST_OBJECT: return "host object";
  case KN_ARTIFACT_CODE_OBJECT: return "code object";
  case KN_ARTIFACT_PTX: return "PTX";
  }
  return "?";
}
