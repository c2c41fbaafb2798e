/* space.h — autotuning search spaces as data: named axes (knobs) and named limits.
 *
 * A space is a list of axes, each a named knob with the values to try (block_m, block_n, warps,
 * stages, waves_per_eu, matrix_instr), plus named limits used to prune candidates once their
 * compiled code reports its resources (max_tile_bytes on the host; max_vgprs, max_lds_bytes,
 * max_spill_bytes for GPU code objects later).  A candidate is one point of the cross product,
 * a kn_tune_config (tunedb.h).  Whether a point is valid for a template (e.g. block sizes the
 * attention template accepts) is the caller's business: this layer knows no IR.
 *
 * Knobs that do not matter on a target (warps, stages, waves_per_eu on the host) stay in the
 * space with one value, so records and reports have the same shape on every target.
 *
 * Text form (KILN_TUNE_SPACE, `kiln tune --space`): semicolon-separated `name=v1,v2,...`, e.g.
 *   "block_m=32,64;block_n=32;max_tile_bytes=1048576"
 * Each named axis replaces the default values of that axis; a limit sets that limit.
 *
 * Errors: a kn_status with the message in the caller's kn_diag (base/status.h).
 */
#ifndef KILN_SPACE_H
#define KILN_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"

#include "tunedb.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KN_SPACE_MAX_VALUES 16
#define KN_SPACE_MAX_CANDIDATES 4096

typedef enum kn_space_axis_id {
  KN_AXIS_BLOCK_M,      /* query rows per program */
  KN_AXIS_BLOCK_N,      /* keys per inner-loop step */
  KN_AXIS_WARPS,        /* GPU warps / waves per program */
  KN_AXIS_STAGES,       /* GPU software-pipeline depth */
  KN_AXIS_WAVES_PER_EU, /* AMD occupancy hint (0: none) */
  KN_AXIS_MATRIX,       /* matrix instruction, by index into matrix_names ("" on the host) */
  KN_AXIS_COUNT
} kn_space_axis_id;

typedef struct kn_space_axis {
  const char *name;                /* the knob's name in the text form */
  int n;
  int values[KN_SPACE_MAX_VALUES];
} kn_space_axis;

typedef struct kn_space_limits {
  uint64_t max_tile_bytes;   /* host: stack slots per program (0: no limit) */
  int max_vgprs;             /* GPU (later): registers per lane (0: no limit) */
  uint64_t max_lds_bytes;    /* GPU (later): shared memory per workgroup (0: no limit) */
  uint64_t max_spill_bytes;  /* GPU (later): scratch per lane (0: no limit) */
} kn_space_limits;

typedef struct kn_space {
  char template_name[KN_TUNE_NAME_MAX];
  kn_space_axis axis[KN_AXIS_COUNT];
  int nmatrix;
  char matrix_names[KN_SPACE_MAX_VALUES][KN_TUNE_NAME_MAX];
  kn_space_limits limits;
} kn_space;

/* host tile budget per program: larger tiles spill out of L2 and stop paying for themselves */
#define KN_SPACE_HOST_TILE_BYTES ((uint64_t)4 << 20)

/* The default space of a template ("fwd") for an architecture of the registry (NULL: the host;
 * the matrix-instruction axis lists the arch's instructions).  The space is a cross product:
 * the tuner drops the points the template cannot compile on the arch (kn_attn_check_on) before
 * counting candidates.  Returns KN_OK, or KN_E_UNSUPPORTED for an unknown template. */
kn_status kn_space_default(kn_space *s, const char *template_name, const kn_arch *arch,
                           kn_diag *d);

/* Applies a text spec ("block_m=32,64;max_tile_bytes=1000000") to s.  Returns KN_OK, or
 * KN_E_INVALID with the message in *d (unknown knob, bad or too many values, a matrix name the
 * space lacks, an empty item or value: "block_m=16,,32", ";;;" or "" name nothing and are
 * errors; one ';' may end the spec). */
kn_status kn_space_apply(kn_space *s, const char *spec, kn_diag *d);

/* number of points in the cross product */
int kn_space_size(const kn_space *s);
/* the i-th point (0 <= i < kn_space_size), block_m varying slowest */
void kn_space_point(const kn_space *s, int i, kn_tune_config *out);

/* the limit a candidate's reported resources exceed, written to why (NULL when within every
 * limit); tile_bytes etc. are what the compiled code reports (0 = not reported) */
const char *kn_space_prune(const kn_space *s, uint64_t tile_bytes, int vgprs, uint64_t lds_bytes,
                           uint64_t spill_bytes, char *why, size_t whysize);

/* "block_m=16,32,64,128;block_n=...;max_tile_bytes=4194304" */
int kn_space_describe(const kn_space *s, char *out, size_t size);

#ifdef __cplusplus
}
#endif
#endif
