/* ir.h — the kiln tile IR: types, values, ops, blocks, functions, modules, and the builder.
 *
 * A module holds functions; a kernel is a function the runtime can launch over a grid.  A function
 * body is a block of ops on SSA values; `for` and `if` ops own nested blocks (regions).  Values are
 * scalars, pointers into global memory, or tiles (rank-1/rank-2 arrays of a scalar type with a
 * static shape; a tile has no memory location, where its elements live is the compiler's choice).
 *
 * Memory: everything of a module (ops, values, blocks, names, the parsed source text) comes from
 * the module's arena and is freed at once by kn_module_free(); passes never call free().  The IR is
 * a small pointer graph inside that arena rather than QBE-style index arrays: attention kernels are
 * a few hundred ops, and pointers keep the builder, parser and interpreter short.  Every value also
 * carries a dense per-function id (kn_func_number()) for passes that want side arrays.
 *
 * Errors: user errors (bad text, a verifier rule) come back as -1 with a kn_diag holding
 * "file:line:col: error: message" plus the source line and a caret (kn_diag, the message carrier
 * of every layer: base/status.h); internal invariant failures abort through KN_ASSERT with
 * file:line.
 */
#ifndef KILN_IR_H
#define KILN_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- internal invariants ------------------------------------------------------------------ */

void kn_die(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define KN_ASSERT(c) ((c) ? (void)0 : kn_die(__FILE__, __LINE__, "assertion failed: %s", #c))

/* ---- arena ------------------------------------------------------------------------------------ */

typedef struct kn_arena kn_arena;
kn_arena *kn_arena_new(void);
void kn_arena_free(kn_arena *a);
void *kn_arena_alloc(kn_arena *a, size_t bytes);     /* zeroed, 16-byte aligned; aborts on OOM */
char *kn_arena_strdup(kn_arena *a, const char *s);
char *kn_arena_strndup(kn_arena *a, const char *s, size_t n);

/* A map from strings (pointer and length; not copied, they must outlive the map) to ints, in an
 * arena: the front end's name lookups and duplicate checks in constant time, so that a text of
 * 60,000 functions or 30,000 attributes costs linear time (docs/hostile_inputs.md).  Zero
 * initialise it with its arena; kn_strmap_put maps s to value unless s is there already and
 * returns the value s had before (-1: it was not there).  kn_strmap_get: s's value or -1. */
typedef struct kn_strmap {
  kn_arena *arena;
  struct kn_strmap_ent *ent;
  uint32_t cap, count;
} kn_strmap;
int kn_strmap_put(kn_strmap *m, const char *s, size_t n, int value);
int kn_strmap_get(const kn_strmap *m, const char *s, size_t n);

/* ---- scalar element types ----------------------------------------------------------------------- */

typedef enum kn_scalar {
  KN_I1,          /* boolean; stored as one byte in memory */
  KN_I32,         /* signed 32-bit integer */
  KN_I64,         /* signed 64-bit integer */
  KN_F16,         /* IEEE binary16 */
  KN_BF16,        /* bfloat16: binary32 with 7 mantissa bits */
  KN_F32,         /* IEEE binary32 */
  KN_F8E4M3,      /* OCP E4M3FN: bias 7, no infinities, max 448, NaN = S.1111.111 */
  KN_F8E5M2,      /* OCP E5M2: bias 15, IEEE-like with infinities, max 57344 */
  KN_F8E4M3FNUZ,  /* AMD gfx942 E4M3 "fnuz": bias 8, no inf, no -0, NaN = 0x80, max 240 */
  KN_F8E5M2FNUZ,  /* AMD gfx942 E5M2 "fnuz": bias 16, no inf, no -0, NaN = 0x80, max 57344 */
  KN_SCALAR_COUNT
} kn_scalar;

const char *kn_scalar_name(kn_scalar s);          /* "f16", "f8e4m3fnuz", ... */
int kn_scalar_from_name(const char *s, size_t n); /* -1 when unknown */
size_t kn_scalar_size(kn_scalar s);               /* bytes in memory */
bool kn_scalar_is_float(kn_scalar s);
bool kn_scalar_is_int(kn_scalar s);               /* i1, i32, i64 */
int kn_scalar_bits(kn_scalar s);                  /* 1, 32, 64, 16, 8 ... */

/* ---- value types ------------------------------------------------------------------------------- */

#define KN_MAX_RANK 2

typedef enum kn_type_kind {
  KN_TY_VOID,    /* no value (not a valid value type; used for "none") */
  KN_TY_SCALAR,  /* elem */
  KN_TY_PTR,     /* pointer to global memory holding elem */
  KN_TY_TILE,    /* rank-1 or rank-2 array of elem, shape[0..rank) */
} kn_type_kind;

typedef struct kn_type {
  uint8_t kind;  /* kn_type_kind */
  uint8_t elem;  /* kn_scalar */
  uint8_t rank;  /* tiles only: 1 or 2 */
  int32_t shape[KN_MAX_RANK];
} kn_type;

kn_type kn_ty_scalar(kn_scalar s);
kn_type kn_ty_ptr(kn_scalar s);
kn_type kn_ty_tile1(kn_scalar s, int n);
kn_type kn_ty_tile2(kn_scalar s, int m, int n);
kn_type kn_ty_tile(kn_scalar s, int rank, const int32_t *shape);
kn_type kn_ty_with_elem(kn_type t, kn_scalar s);  /* same shape, other element type */
bool kn_ty_eq(kn_type a, kn_type b);
int64_t kn_ty_numel(kn_type t);                     /* 1 for scalars */
/* "f32", "ptr<f16>", "tile<64x64xf32>"; returns the length written (snprintf-like) */
int kn_ty_format(kn_type t, char *buf, size_t n);

/* ---- opcodes ------------------------------------------------------------------------------------ */

/* flags (ops.def, column 5) and who reads them */
enum {
  KN_PURE = 1 << 0,        /* no side effects: fold.c deletes it when unused */
  KN_BINARY = 1 << 1,      /* binary elementwise (kn_op_is_binary) */
  KN_UNARY = 1 << 2,       /* unary elementwise (kn_op_is_unary) */
  KN_INT_ONLY = 1 << 3,    /* integer element types only (verifier) */
  KN_FLOAT_ONLY = 1 << 4,  /* float element types only (verifier) */
  KN_REDUCE = 1 << 5,      /* reduction along iattr[0] (kn_op_is_reduce) */
  KN_REGION = 1 << 6,      /* owns nested blocks (verifier) */
  KN_TERMINATOR = 1 << 7,  /* must end its block (verifier) */
};

/* How the parser reads and the printer writes an op (ops.def, column 6).  One form per class:
 *   INT          %r = op <int> : T                  (iattr[0])
 *   CONST        %r = const <number> : T            (fattr for float types, else iattr[0])
 *   RANGE        %r = op <int>, <int> : T           (iattr[0], iattr[1])
 *   OPERANDS     %r = op %a[, %b[, %c]] : T         (the table's fixed operand count, 1..3)
 *   OPERAND_INT  %r = op %a, <int> : T              (iattr[0])
 *   CMP          %r = cmp <pred> %a, %b : T         (iattr[0] = kn_pred)
 *   MEM          load / store with their clauses    (iattr[0] = rank, iattr[1] = clauses)
 *   GATHER       %r = gather %p[%offs] [mask %m] [other %x] : T   (iattr[0] = clauses)
 *   FOR, IF, CALL                                   (regions, iter values, callee)
 *   VALUES       op [%a, ...]                       (no results, no types) */
typedef enum kn_syntax {
  KN_SYN_INT, KN_SYN_CONST, KN_SYN_RANGE, KN_SYN_OPERANDS, KN_SYN_OPERAND_INT, KN_SYN_CMP,
  KN_SYN_MEM, KN_SYN_GATHER, KN_SYN_FOR, KN_SYN_IF, KN_SYN_CALL, KN_SYN_VALUES,
} kn_syntax;

/* how a float function is computed (ops.def, column 7: KN_MATH(name, host, gpu)) */
typedef enum kn_math_via {
  KN_VIA_NONE,   /* not a float function */
  KN_VIA_LIBM,   /* the C library's double `name` (host only: GPUs have no libm) */
  KN_VIA_LLVM,   /* llvm.<name>.f64 on the host, llvm.<name>.f32 (or the target's leaf) on GPUs */
  KN_VIA_KILN,   /* kiln's own expansion `name` in the target's lowering */
} kn_math_via;

typedef struct kn_math {
  const char *name;   /* "exp", "tanh", ...; NULL for KN_NOMATH */
  uint8_t host, gpu;  /* kn_math_via */
} kn_math;

/* What a GPU target promises against the interpreter (ops.def, column 8); the host target is
 * bit-exact for every op.  kn_exactness_accepts() (numeric.h) is the check. */
typedef enum kn_exactness {
  KN_EXACT,    /* bit for bit (any NaN equals any NaN) */
  KN_REASSOC,  /* may combine in another order (a tree, a matrix instruction): bit for bit when
                * every partial result is exact, else within the reordering's rounding error */
  KN_ULP,      /* computed in f32 with more than one rounding: within 2 ulps of the format */
  KN_APPROX,   /* approximate hardware (NVPTX .approx): within 2 ulps, or 2^-16 relative, or
                * 2^-20 absolute */
} kn_exactness;

typedef enum kn_opcode {
#define KN_OP(e, ...) KN_OP_##e,
#include "ops.def"
#undef KN_OP
} kn_opcode;

/* the number of opcodes (not an enumerator: a switch over kn_opcode names real ops only) */
enum {
  KN_OP_COUNT = 0
#define KN_OP(e, ...) + 1
#include "ops.def"
#undef KN_OP
};

typedef struct kn_opinfo {
  const char *name;
  int nopnd;   /* -1: decided by the op's own rule */
  int nres;    /* -1: decided by the op's own rule */
  unsigned flags;
  kn_syntax syntax;
  kn_math math;
  kn_exactness exact;
} kn_opinfo;

extern const kn_opinfo kn_opinfo_table[KN_OP_COUNT];
int kn_opcode_from_name(const char *s, size_t n);  /* -1 when unknown */
static inline bool kn_op_is_binary(kn_opcode o) { return kn_opinfo_table[o].flags & KN_BINARY; }
static inline bool kn_op_is_unary(kn_opcode o) { return kn_opinfo_table[o].flags & KN_UNARY; }
static inline bool kn_op_is_reduce(kn_opcode o) { return kn_opinfo_table[o].flags & KN_REDUCE; }

/* comparison predicates (iattr[0] of cmp); floats compare ordered (false if either is NaN, except
 * ne which is true), integers compare signed. */
typedef enum kn_pred { KN_PRED_EQ, KN_PRED_NE, KN_PRED_LT, KN_PRED_LE, KN_PRED_GT, KN_PRED_GE,
                       KN_PRED_COUNT } kn_pred;
const char *kn_pred_name(kn_pred p);               /* "eq", "ne", "lt", "le", "gt", "ge" */
int kn_pred_from_name(const char *s, size_t n);    /* -1 when unknown */

/* load/store optional clauses (iattr[1]) */
enum {
  KN_MEM_BOUNDS = 1 << 0,  /* bounds [b0, b1]: element (i,j) is live iff off0+i < b0 && off1+j < b1 (and >= 0) */
  KN_MEM_MASK = 1 << 1,    /* mask %m: an i1 tile of the result shape, ANDed with the bounds */
  KN_MEM_OTHER = 1 << 2,   /* other %x: scalar of the element type, the value of dead elements (load) */
  /* off32 (load only, the last clause): every live element lies at a byte offset in [0, 2^31)
   * from the base, a promise of whoever builds the load (the interpreter checks it); AMDGPU
   * then reads it through a buffer resource with 32-bit offsets (docs/ir.md) */
  KN_MEM_OFF32 = 1 << 3,
  /* atomic_add (store only, the last clause): each live element does *addr += value as one
   * relaxed atomic read-modify-write instead of a write; f32 only (the verifier's rule).  The
   * order of the adds is unspecified, so sums may differ in their last bits run to run; a dead
   * element adds nothing (docs/ir.md) */
  KN_MEM_ATOMIC_ADD = 1 << 4,
};

/* ---- source locations and diagnostics: kn_loc and kn_diag (base/status.h) ------------------------ */

/* ---- the IR graph -------------------------------------------------------------------------------- */

typedef struct kn_value kn_value;
typedef struct kn_op kn_op;
typedef struct kn_block kn_block;
typedef struct kn_func kn_func;
typedef struct kn_module kn_module;

struct kn_value {
  kn_type type;
  const char *name;   /* text name without '%', or NULL (the printer then numbers it) */
  kn_op *def;         /* defining op, or NULL for a block argument */
  kn_block *owner;    /* block argument: its block; else NULL */
  int index;          /* result index in def, or argument index in owner */
  int id;             /* dense id within its function, set by kn_func_number() */
};

struct kn_op {
  kn_opcode opc;
  kn_loc loc;               /* the op name in the text (for ops without results too) */
  int nopnd;
  kn_value **opnd;
  kn_loc *opnd_loc;         /* where each operand was written (parsed IR), or NULL (built IR) */
  int nres;
  kn_value **res;
  int64_t iattr[3];         /* meaning per op, see ops.def */
  double fattr;             /* const of a float type */
  int nregion;              /* for: 1, if: 2 */
  kn_block *region[2];
  const char *callee_name;  /* call: name without '@' */
  kn_func *callee;          /* call: resolved by the verifier (or the builder) */
  kn_block *parent;
  kn_op *prev, *next;
};

struct kn_block {
  int nargs;
  kn_value **args;
  kn_op *first, *last;
  kn_op *parent_op;     /* the for/if owning this region, or NULL for a function body */
  kn_func *parent_func; /* the function this block belongs to (set for every block) */
};

typedef struct kn_meta {
  const char *key;  /* e.g. "BLOCK_M" */
  int64_t value;
} kn_meta;

struct kn_func {
  const char *name;   /* without '@' */
  bool is_kernel;     /* "kernel" (launchable, returns nothing) or "func" */
  kn_loc loc;
  kn_block *body;     /* params are body->args */
  int nret;
  kn_type *ret;       /* func result types */
  int nmeta, capmeta;
  kn_meta *meta;      /* compile-time parameters, printed as attrs {BLOCK_M = 64, ...} */
  int nvalues;        /* after kn_func_number() */
  kn_module *module;
  int index;          /* module->funcs[index] == this function */
};

struct kn_module {
  kn_arena *arena;
  int nfuncs, capfuncs;
  kn_func **funcs;
  kn_strmap func_names; /* name -> index of the first function of that name */
  const char *filename;  /* for diagnostics; "<built>" for built IR */
  const char *source;    /* parsed text (arena copy) so diagnostics can show the line, or NULL */
};

/* ---- module / function API ----------------------------------------------------------------------- */

kn_module *kn_module_new(const char *filename);
void kn_module_free(kn_module *m);
kn_func *kn_module_find(const kn_module *m, const char *name);
/* gives f another name (an AOT kernel's unique symbol); -1 when m has a function of that name.
 * The old name then finds nothing, and no function added later may take it. */
int kn_func_rename(kn_func *f, const char *name);

/* a new function at the end of m; params get names pnames[i] (may be NULL, or pnames[i] NULL) */
kn_func *kn_func_new(kn_module *m, const char *name, bool is_kernel, int nparams,
                     const kn_type *ptypes, const char *const *pnames, int nret, const kn_type *ret);
void kn_func_set_meta(kn_func *f, const char *key, int64_t value);  /* replaces key's value */
void kn_func_add_meta(kn_func *f, const char *key, int64_t value);  /* appends (key not there) */
bool kn_func_get_meta(const kn_func *f, const char *key, int64_t *value);
static inline int kn_func_nparams(const kn_func *f) { return f->body->nargs; }
static inline kn_value *kn_func_param(const kn_func *f, int i) { return f->body->args[i]; }
/* gives every value of f a dense id (params first, then in program order); returns nvalues */
int kn_func_number(kn_func *f);

/* format a diagnostic at loc (m may be NULL); always returns -1 so callers can `return kn_error(...)` */
int kn_error(kn_diag *d, const kn_module *m, kn_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- memory op operands --------------------------------------------------------------------------- */

/* Operand order of load:  base, off[rank], stride[rank], [bound[rank]], [mask], [other]
 *              of store: base, off[rank], stride[rank], [bound[rank]], value, [mask]
 * Element (i, j) of the tile lives at base + (off0 + i) * stride0 + (off1 + j) * stride1 (in
 * elements).  It is live iff the bounds (when present) hold and the mask (when present) is true;
 * a dead element is not accessed: a load gives `other` (0 when absent), a store skips it. */
typedef struct kn_mem_operands {
  int rank;
  kn_value *base;
  kn_value *off[KN_MAX_RANK];
  kn_value *stride[KN_MAX_RANK];
  kn_value *bound[KN_MAX_RANK];  /* NULL without bounds */
  kn_value *value;               /* store only */
  kn_value *mask;                /* or NULL */
  kn_value *other;               /* load only, or NULL */
} kn_mem_operands;
void kn_mem_operands_get(const kn_op *op, kn_mem_operands *out);

/* Operand order of gather: base, offsets, [mask], [other] (iattr[0]: KN_MEM_MASK, KN_MEM_OTHER).
 * Element i of the result is base[offsets[i]] (element offsets, i32 or i64, of the result's
 * shape); it is live iff the mask (when present) is true; a dead element is not accessed and
 * gives `other` (0 when absent). */
typedef struct kn_gather_operands {
  kn_value *base, *offsets;
  kn_value *mask;   /* NULL without a mask */
  kn_value *other;  /* NULL without other */
} kn_gather_operands;
void kn_gather_operands_get(const kn_op *op, kn_gather_operands *out);

/* ---- elemental calls ------------------------------------------------------------------------- */

/* A call of a `func` whose params are scalars or pointers may pass tiles for scalar params: an
 * elemental call, the callee applied to each element (docs/ir.md, "Elemental calls").  This
 * returns the first tile argument standing for a scalar param of callee (its type gives the
 * shape), or NULL for an ordinary call. */
const kn_value *kn_call_elemental_arg(const kn_op *call, const kn_func *callee);

/* ---- builder ----------------------------------------------------------------------------------- */

/* Appends ops at the end of `block`.  Builders do no checking beyond what they need to infer
 * result types; run kn_verify() on the finished module. */
typedef struct kn_builder {
  kn_module *m;
  kn_block *block;
  kn_loc loc;  /* given to new ops */
} kn_builder;

kn_builder kn_builder_at_end(kn_module *m, kn_block *block);
void kn_value_set_name(kn_module *m, kn_value *v, const char *name);

/* generic: an op with the given operands and result types, appended to b's block */
kn_op *kn_build_op(kn_builder *b, kn_opcode opc, int nopnd, kn_value *const *opnd, int nres,
                   const kn_type *rtypes);

kn_value *kn_b_program_id(kn_builder *b, int axis);
kn_value *kn_b_num_programs(kn_builder *b, int axis);
kn_value *kn_b_const_i(kn_builder *b, kn_type t, int64_t v);   /* t: int scalar or tile */
kn_value *kn_b_const_f(kn_builder *b, kn_type t, double v);    /* t: float scalar or tile */
kn_value *kn_b_arange(kn_builder *b, int start, int end);
kn_value *kn_b_splat(kn_builder *b, kn_value *x, int rank, const int32_t *shape);
kn_value *kn_b_broadcast(kn_builder *b, kn_value *x, int rank, const int32_t *shape);
kn_value *kn_b_expand_dims(kn_builder *b, kn_value *x, int axis);
kn_value *kn_b_reshape(kn_builder *b, kn_value *x, int rank, const int32_t *shape);
kn_value *kn_b_transpose(kn_builder *b, kn_value *x);
kn_value *kn_b_binary(kn_builder *b, kn_opcode opc, kn_value *x, kn_value *y);
kn_value *kn_b_unary(kn_builder *b, kn_opcode opc, kn_value *x);
kn_value *kn_b_cmp(kn_builder *b, kn_pred p, kn_value *x, kn_value *y);
kn_value *kn_b_select(kn_builder *b, kn_value *c, kn_value *x, kn_value *y);
kn_value *kn_b_cast(kn_builder *b, kn_value *x, kn_scalar to);
kn_value *kn_b_ptradd(kn_builder *b, kn_value *p, kn_value *off);
kn_value *kn_b_dot(kn_builder *b, kn_value *a, kn_value *bm, kn_value *acc);
kn_value *kn_b_reduce(kn_builder *b, kn_opcode opc, kn_value *x, int axis);
kn_value *kn_b_hint(kn_builder *b, kn_opcode opc, kn_value *x, int64_t v);
/* bound, mask, other may be NULL (bound: an array of rank values, or NULL for no bounds) */
kn_value *kn_b_load(kn_builder *b, kn_type result, kn_value *base, kn_value *const *off,
                    kn_value *const *stride, kn_value *const *bound, kn_value *mask, kn_value *other);
/* marks load result `load` (a kn_b_load's) with the off32 clause (KN_MEM_OFF32) */
void kn_load_set_off32(kn_value *load);
kn_op *kn_b_store(kn_builder *b, kn_value *value, kn_value *base, kn_value *const *off,
                  kn_value *const *stride, kn_value *const *bound, kn_value *mask);
/* marks store `store` (a kn_b_store's) with the atomic_add clause (KN_MEM_ATOMIC_ADD) */
void kn_store_set_atomic_add(kn_op *store);
/* result: a tile of the offsets' shape; mask, other may be NULL */
kn_value *kn_b_gather(kn_builder *b, kn_type result, kn_value *base, kn_value *offsets,
                      kn_value *mask, kn_value *other);
/* for: results have the types of init[]; *body receives a builder for the loop body, whose block
 * args are (iv, iter_0, ...); end the body with kn_b_yield(). */
kn_op *kn_b_for(kn_builder *b, kn_value *lo, kn_value *hi, kn_value *step, int ninit,
                kn_value *const *init, kn_builder *body);
/* if: *then_b and *else_b receive builders for the two regions; end each with kn_b_yield(). */
kn_op *kn_b_if(kn_builder *b, kn_value *cond, int nres, const kn_type *rtypes, kn_builder *then_b,
               kn_builder *else_b);
kn_op *kn_b_yield(kn_builder *b, int n, kn_value *const *v);
kn_op *kn_b_call(kn_builder *b, kn_func *callee, int n, kn_value *const *args);
kn_op *kn_b_return(kn_builder *b, int n, kn_value *const *v);

/* ---- text form, verifier ---------------------------------------------------------------------- */

/* the largest text the parser takes (bytes): a kernel's IR is kilobytes, and the bound keeps
 * a hostile input under about 2 s and 400 MB (200,000 functions) */
#define KN_PARSE_MAX_BYTES ((size_t)16 << 20)

/* parse text (its own copy is kept in the module); NULL with *d filled on a syntax error or a
 * text longer than KN_PARSE_MAX_BYTES.  The result is not verified: call kn_verify(). */
kn_module *kn_parse(const char *filename, const char *text, size_t len, kn_diag *d);
/* parses text into m, which must not hold parsed text yet (its functions may be built ones); its
 * locations name `filename` (NULL: m's).  0, or -1 with *d (m then holds what parsed before the
 * error: the caller frees it) */
int kn_parse_into(kn_module *m, const char *filename, const char *text, size_t len, kn_diag *d);
/* print the module in the canonical text form (malloc'd string; the caller frees) */
char *kn_print(const kn_module *m);
/* the deepest chain of calls the verifier accepts (a call graph deeper than this is an error:
 * the interpreter, the inliner and the verifier itself recurse along it) */
#define KN_MAX_CALL_DEPTH 1000

/* check the module; 0 when valid, else -1 and the first error in *d */
int kn_verify(kn_module *m, kn_diag *d);

#ifdef __cplusplus
}
#endif
#endif
