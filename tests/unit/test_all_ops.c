/* test_all_ops.c — every op of ir/ops.def on every target kiln has, against the interpreter.
 *
 * The cases below are small kernels in the text form, each written for one op (and using the
 * ops every kernel needs: program_id, const, load, store, return), with `$T` standing for the
 * element types it runs with (f16, bf16, f32 and the ints where the op takes them) and `$OP`
 * for the op, so one text serves a family (all binary ops, all unary ops).  Arrays are ragged
 * against the tiles (45 x 27 under 32 x 32 tiles, over a grid of two programs), so bounds, masks
 * and the dead elements of every tile are exercised too.
 *
 * For every case and type:
 *   - the interpreter runs it: the reference;
 *   - the host target (kn_compile + kn_kernel_run_host): bit for bit (any NaN equals any NaN);
 *   - the emulated AMDGPU targets gfx90a-emu and gfx942-emu (kiln's AMDGPU lowering run on the
 *     CPU by compiler/emu): within the kernel's exactness, the loosest column of ops.def over
 *     the ops it holds (kn_exactness_accepts); the cases of the reassociating ops (dot,
 *     reduce_sum) take small integers, whose partial sums are exact, so they too compare bit
 *     for bit;
 *   - the real AMDGPU targets gfx90a and gfx942: lowered, optimised, code generation and the
 *     lld link with --no-undefined (a libm call left in the code fails it);
 *   - NVPTX sm_80 and sm_90a: lowered to PTX (kn_nvptx_compile; an op NVPTX cannot select, or a
 *     libm call, aborts or fails there), assembled by ptxas where it is found (else that part is
 *     skipped with a message).
 * Every buffer, inputs included, is compared after every run; outputs start as NaN (floats) or
 * 0x5a bytes (ints), so an element a target never writes fails.
 *
 * What the GPU lowering refuses, and so no case asks for: arithmetic, compares and casts to fp8
 * on fp8 values (fp8 is storage and dot operands there, and casts to wider floats: test_emu_fp8
 * runs fp8 dots, test_fp8 the casts of every byte), and reductions
 * along a dim the warps are spread over (the layout pass lays warps along dim 0, so
 * reduce_axis0 runs with one warp).  Shapes are powers of two as the layouts want.
 *
 * Coverage: test_every_op_has_a_kernel walks the op table and fails for an op no case's module
 * holds, so a new op in ops.def fails this test until it has a kernel here.  The check itself
 * can fail: test_comparison_catches_errors perturbs reference results by what each exactness
 * class must refuse.
 *
 * KILN_TEST_VERBOSE=1 prints a line per case and target; KILN_TEST_ONLY=<substring> runs the
 * cases whose name holds it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "reduced.h"
#include "emu.h"
#include "gpu.h"
#include "interp.h"
#include "numeric.h"
#include "pipeline.h"
#include "target.h"
#include "ptxas.h"

/* ---- the cases ---------------------------------------------------------------------------- */

typedef struct tcase {
  const char *name;   /* also the op it is written for, or the family */
  const char *ops;    /* space-separated op names substituted for $OP ("" when none) */
  const char *types;  /* space-separated element types substituted for $T */
  const char *text;   /* the kernel @k ($T, $OP; $W: the bit width of $T minus 1) */
  const char *data;   /* buffers and scalars, see fill() */
  int grid[3];
} tcase;

/* the ragged array every elementwise case covers: 45 x 27 under 32 x 32 tiles, 2 programs */
#define ELEM_HEAD(params)                                                                        \
  "kernel @k(" params ", %m: i32, %n: i32) attrs {WARPS = 4} {\n"                              \
  "  %pid = program_id 0 : i32\n"                                                              \
  "  %c32 = const 32 : i32\n"                                                                  \
  "  %row = mul %pid, %c32 : i32\n"                                                            \
  "  %c0 = const 0 : i32\n"                                                                    \
  "  %c1 = const 1 : i32\n"
#define LOAD_TILE(v, p, other)                                                                   \
  "  %" v " = load %" p "[%row, %c0] strides [%n, %c1] bounds [%m, %n] other %" other             \
  " : tile<32x32x$T>\n"
#define STORE_TILE(v, p) "  store %" v ", %" p "[%row, %c0] strides [%n, %c1] bounds [%m, %n]\n"
#define LOAD_SCALAR(v, p) "  %" v " = load %" p "[%pid] strides [%c1] : $T\n"
#define ARRAY "m=45 n=27"
/* $OP on two tiles and on two scalars */
#define BINARY_TEXT                                                                              \
  ELEM_HEAD("%x: ptr<$T>, %y: ptr<$T>, %o: ptr<$T>, %s: ptr<$T>")                             \
  "  %one = const 1 : $T\n" LOAD_TILE("a", "x", "one") LOAD_TILE("b", "y", "one")             \
  "  %r = $OP %a, %b : tile<32x32x$T>\n" STORE_TILE("r", "o") LOAD_SCALAR("sa", "x")          \
  LOAD_SCALAR("sb", "y")                                                                        \
  "  %sr = $OP %sa, %sb : $T\n  store %sr, %s[%pid] strides [%c1]\n  return\n}\n"
/* $OP on a tile and on a scalar */
#define UNARY_TEXT                                                                               \
  ELEM_HEAD("%x: ptr<$T>, %o: ptr<$T>, %s: ptr<$T>")                                           \
  "  %one = const 1 : $T\n" LOAD_TILE("a", "x", "one")                                         \
  "  %r = $OP %a : tile<32x32x$T>\n" STORE_TILE("r", "o") LOAD_SCALAR("sa", "x")              \
  "  %sr = $OP %sa : $T\n  store %sr, %s[%pid] strides [%c1]\n  return\n}\n"
#define NE "1215"   /* 45 * 27 */

static const tcase cases[] = {
    /* elementwise: a tile op and a scalar op per kernel; dead elements take `other` (1 keeps
     * integer division defined there, 0 keeps shifts in range) */
    {"binary", "add sub mul max min", "f16 bf16 f32 i1 i32 i64",
     BINARY_TEXT,
     "x=mixed:" NE " y=mixed:" NE " o=out:" NE " s=out:2 " ARRAY, {2, 1, 1}},
    {"division", "div rem", "f16 bf16 f32 i32 i64",
     BINARY_TEXT,
     "x=mixed:" NE " y=nonzero:" NE " o=out:" NE " s=out:2 " ARRAY, {2, 1, 1}},
    {"bitwise", "and or xor", "i1 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %y: ptr<$T>, %o: ptr<$T>")
     "  %one = const 1 : $T\n" LOAD_TILE("a", "x", "one") LOAD_TILE("b", "y", "one")
     "  %r = $OP %a, %b : tile<32x32x$T>\n" STORE_TILE("r", "o") "  return\n}\n",
     "x=mixed:" NE " y=mixed:" NE " o=out:" NE " " ARRAY, {2, 1, 1}},
    {"shift", "shl shr", "i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %y: ptr<$T>, %o: ptr<$T>")
     "  %zero = const 0 : $T\n" LOAD_TILE("a", "x", "zero") LOAD_TILE("b", "y", "zero")
     "  %r = $OP %a, %b : tile<32x32x$T>\n" STORE_TILE("r", "o") "  return\n}\n",
     "x=mixed:" NE " y=rand:" NE ":0:$W o=out:" NE " " ARRAY, {2, 1, 1}},
    {"unary", "neg abs", "f16 bf16 f32 i32 i64",
     UNARY_TEXT,
     "x=mixed:" NE " o=out:" NE " s=out:2 " ARRAY, {2, 1, 1}},
    {"math", "exp exp2 log log2 sqrt rsqrt tanh", "f16 bf16 f32",
     UNARY_TEXT,
     "x=math:" NE " o=out:" NE " s=out:2 " ARRAY, {2, 1, 1}},
    {"not", "not", "i1 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %o: ptr<$T>")
     "  %one = const 1 : $T\n" LOAD_TILE("a", "x", "one")
     "  %r = not %a : tile<32x32x$T>\n" STORE_TILE("r", "o") "  return\n}\n",
     "x=mixed:" NE " o=out:" NE " " ARRAY, {2, 1, 1}},
    /* all six predicates; select on a tile condition and on a scalar one */
    {"cmp", "", "f16 bf16 f32 i1 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %y: ptr<$T>, %o: ptr<i1>")
     "  %one = const 1 : $T\n" LOAD_TILE("a", "x", "one") LOAD_TILE("b", "y", "one")
     "  %ne = const 1215 : i32\n"
     "  %p0 = cmp eq %a, %b : tile<32x32xi1>\n" STORE_TILE("p0", "o")
     "  %o1 = ptradd %o, %ne : ptr<i1>\n  %p1 = cmp ne %a, %b : tile<32x32xi1>\n" STORE_TILE("p1", "o1")
     "  %o2 = ptradd %o1, %ne : ptr<i1>\n  %p2 = cmp lt %a, %b : tile<32x32xi1>\n" STORE_TILE("p2", "o2")
     "  %o3 = ptradd %o2, %ne : ptr<i1>\n  %p3 = cmp le %a, %b : tile<32x32xi1>\n" STORE_TILE("p3", "o3")
     "  %o4 = ptradd %o3, %ne : ptr<i1>\n  %p4 = cmp gt %a, %b : tile<32x32xi1>\n" STORE_TILE("p4", "o4")
     "  %o5 = ptradd %o4, %ne : ptr<i1>\n  %p5 = cmp ge %a, %b : tile<32x32xi1>\n" STORE_TILE("p5", "o5")
     "  return\n}\n",
     "x=mixed:" NE " y=mixed:" NE " o=out:7290 " ARRAY, {2, 1, 1}},
    {"select", "", "f16 bf16 f32 i1 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %y: ptr<$T>, %c: ptr<i1>, %o: ptr<$T>, %s: ptr<$T>")
     "  %one = const 1 : $T\n  %t = const 1 : i1\n" LOAD_TILE("a", "x", "one")
     LOAD_TILE("b", "y", "one")
     "  %k = load %c[%row, %c0] strides [%n, %c1] bounds [%m, %n] other %t : tile<32x32xi1>\n"
     "  %r = select %k, %a, %b : tile<32x32x$T>\n" STORE_TILE("r", "o")
     "  %k0 = load %c[%pid] strides [%c1] : i1\n"
     "  %r2 = select %k0, %b, %a : tile<32x32x$T>\n" STORE_TILE("r2", "s") "  return\n}\n",
     "x=mixed:" NE " y=mixed:" NE " c=rand:" NE ":0:1 o=out:" NE " s=out:" NE " " ARRAY,
     {2, 1, 1}},
    /* every type to every type */
    {"cast", "", "f16 bf16 f32 i1 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %oh: ptr<f16>, %ob: ptr<bf16>, %of: ptr<f32>, %o1: ptr<i1>, "
               "%oi: ptr<i32>, %ol: ptr<i64>")
     "  %one = const 1 : $T\n" LOAD_TILE("a", "x", "one")
     "  %h = cast %a : tile<32x32xf16>\n" STORE_TILE("h", "oh")
     "  %b = cast %a : tile<32x32xbf16>\n" STORE_TILE("b", "ob")
     "  %f = cast %a : tile<32x32xf32>\n" STORE_TILE("f", "of")
     "  %t = cast %a : tile<32x32xi1>\n" STORE_TILE("t", "o1")
     "  %i = cast %a : tile<32x32xi32>\n" STORE_TILE("i", "oi")
     "  %l = cast %a : tile<32x32xi64>\n" STORE_TILE("l", "ol") "  return\n}\n",
     "x=casts:" NE " oh=out:" NE " ob=out:" NE " of=out:" NE " o1=out:" NE " oi=out:" NE
     " ol=out:" NE " " ARRAY, {2, 1, 1}},
    /* constants (tile and scalar), splat of a parameter, arange */
    {"const", "", "f16 bf16 f32 i32 i64",
     "kernel @k(%o: ptr<$T>, %s: ptr<$T>, %v: $T) attrs {WARPS = 4} {\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %c32 = const 32 : i32\n"
     "  %k = const 7 : tile<32x32x$T>\n  %sv = splat %v : tile<32x32x$T>\n"
     "  %r = add %k, %sv : tile<32x32x$T>\n"
     "  store %r, %o[%c0, %c0] strides [%c32, %c1]\n"
     "  %z = const -3 : $T\n  store %z, %s[%c0] strides [%c1]\n"
     "  store %v, %s[%c1] strides [%c1]\n  return\n}\n",
     "o=out:1024 s=out:2 v=5", {1, 1, 1}},
    {"const_float", "", "f16 bf16 f32",
     "kernel @k(%o: ptr<$T>) attrs {WARPS = 4} {\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %c64 = const 64 : i32\n"
     "  %a = const 0.1 : tile<4x64x$T>\n  %b = const -inf : tile<4x64x$T>\n"
     "  %c = const nan : $T\n  %d = const 1e-30 : $T\n  %e = const -0 : $T\n"
     "  %r = max %a, %b : tile<4x64x$T>\n  store %r, %o[%c0, %c0] strides [%c64, %c1]\n"
     "  %c256 = const 256 : i32\n  store %c, %o[%c256] strides [%c1]\n"
     "  %c257 = const 257 : i32\n  store %d, %o[%c257] strides [%c1]\n"
     "  %c258 = const 258 : i32\n  store %e, %o[%c258] strides [%c1]\n  return\n}\n",
     "o=out:259", {1, 1, 1}},
    {"arange", "", "i32",
     "kernel @k(%o: ptr<i32>, %n: i32) attrs {WARPS = 4} {\n"
     "  %pid = program_id 0 : i32\n  %c1 = const 1 : i32\n  %c64 = const 64 : i32\n"
     "  %start = mul %pid, %c64 : i32\n"
     "  %r = arange 3, 67 : tile<64xi32>\n  %s = splat %start : tile<64xi32>\n"
     "  %v = add %r, %s : tile<64xi32>\n"
     "  store %v, %o[%start] strides [%c1] bounds [%n]\n  return\n}\n",
     "o=out:100 n=100", {2, 1, 1}},
    /* shapes */
    {"broadcast", "", "f16 bf16 f32 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %y: ptr<$T>, %o: ptr<$T>")
     "  %one = const 1 : $T\n"
     "  %r0 = load %x[%c0, %c0] strides [%n, %c1] bounds [%m, %n] other %one : tile<1x32x$T>\n"
     "  %c32b = load %y[%row, %c0] strides [%c1, %c1] bounds [%m, %c1] other %one : tile<32x1x$T>\n"
     "  %a = broadcast %r0 : tile<32x32x$T>\n  %b = broadcast %c32b : tile<32x32x$T>\n"
     "  %r = add %a, %b : tile<32x32x$T>\n" STORE_TILE("r", "o") "  return\n}\n",
     "x=rand:" NE ":-8:8 y=rand:45:-8:8 o=out:" NE " " ARRAY, {2, 1, 1}},
    {"expand_dims", "", "i32",
     ELEM_HEAD("%o: ptr<i32>")
     "  %i = arange 0, 32 : tile<32xi32>\n  %j = arange 100, 132 : tile<32xi32>\n"
     "  %ic = expand_dims %i, 1 : tile<32x1xi32>\n  %jr = expand_dims %j, 0 : tile<1x32xi32>\n"
     "  %a = broadcast %ic : tile<32x32xi32>\n  %b = broadcast %jr : tile<32x32xi32>\n"
     "  %r = mul %a, %b : tile<32x32xi32>\n" STORE_TILE("r", "o") "  return\n}\n",
     "o=out:" NE " " ARRAY, {2, 1, 1}},
    {"reshape", "", "f16 bf16 f32 i32 i64",
     "kernel @k(%x: ptr<$T>, %o: ptr<$T>, %o2: ptr<$T>) attrs {WARPS = 4} {\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %c32 = const 32 : i32\n  %c64 = const 64 : i32\n"
     "  %a = load %x[%c0, %c0] strides [%c32, %c1] : tile<32x32x$T>\n"
     "  %r = reshape %a : tile<16x64x$T>\n  store %r, %o[%c0, %c0] strides [%c64, %c1]\n"
     "  %f = reshape %a : tile<1024x$T>\n  store %f, %o2[%c0] strides [%c1]\n  return\n}\n",
     "x=rand:1024:-50:50 o=out:1024 o2=out:1024", {1, 1, 1}},
    {"transpose", "", "f16 bf16 f32 i32 i64",
     "kernel @k(%x: ptr<$T>, %o: ptr<$T>) attrs {WARPS = 4} {\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %c16 = const 16 : i32\n  %c64 = const 64 : i32\n"
     "  %a = load %x[%c0, %c0] strides [%c16, %c1] : tile<64x16x$T>\n"
     "  %t = transpose %a : tile<16x64x$T>\n  store %t, %o[%c0, %c0] strides [%c64, %c1]\n"
     "  return\n}\n",
     "x=rand:1024:-50:50 o=out:1024", {1, 1, 1}},
    /* memory: pointer arithmetic, a mask and `other`, hints on the offsets */
    {"memory", "", "f16 bf16 f32 i1 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %k: ptr<i1>, %o: ptr<$T>")
     "  %z = const 0 : $T\n  %f = const 0 : i1\n"
     "  %base = mul %row, %n : i32\n  %xp = ptradd %x, %base : ptr<$T>\n  %mr = sub %m, %row : i32\n"
     "  %r16 = multiple_of %row, 16 : i32\n  %n8 = max_contiguous %n, 8 : i32\n"
     "  %mk = load %k[%r16, %c0] strides [%n8, %c1] bounds [%m, %n] other %f : tile<32x32xi1>\n"
     "  %a = load %xp[%c0, %c0] strides [%n, %c1] bounds [%mr, %n] mask %mk other %z : tile<32x32x$T>\n"
     "  store %a, %o[%row, %c0] strides [%n, %c1] bounds [%m, %n] mask %mk\n  return\n}\n",
     "x=mixed:" NE " k=rand:" NE ":0:1 o=out:" NE " " ARRAY, {2, 1, 1}},
    /* gather: offsets of -50..149 into a table of 100, masked where outside it (a dead element
     * must give `other` and touch nothing), and a rank-1 gather of i64 offsets without mask */
    {"gather", "", "f16 bf16 f32 i1 i32 i64",
     ELEM_HEAD("%t: ptr<$T>, %ix: ptr<i32>, %jx: ptr<i64>, %o: ptr<$T>, %o2: ptr<$T>")
     "  %one = const 1 : $T\n  %z = const 0 : tile<32x32xi32>\n"
     "  %c100 = const 100 : tile<32x32xi32>\n"
     "  %i = load %ix[%row, %c0] strides [%n, %c1] bounds [%m, %n] other %c0 : tile<32x32xi32>\n"
     "  %ge = cmp ge %i, %z : tile<32x32xi1>\n  %lt = cmp lt %i, %c100 : tile<32x32xi1>\n"
     "  %k = and %ge, %lt : tile<32x32xi1>\n"
     "  %g = gather %t[%i] mask %k other %one : tile<32x32x$T>\n" STORE_TILE("g", "o")
     "  %j = load %jx[%row] strides [%c1] : tile<32xi64>\n"
     "  %h = gather %t[%j] : tile<32x$T>\n  store %h, %o2[%row] strides [%c1]\n  return\n}\n",
     "t=mixed:100 ix=rand:" NE ":-50:149 jx=rand:64:0:99 o=out:" NE " o2=out:64 " ARRAY,
     {2, 1, 1}},
    /* rows whose constant stride (12) is not a multiple of a 16-byte vector of the type */
    {"strided", "", "f16 bf16 f32 i32 i64",
     "kernel @k(%x: ptr<$T>, %o: ptr<$T>) attrs {WARPS = 1} {\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %c12 = const 12 : i32\n"
     "  %a = load %x[%c0, %c0] strides [%c12, %c1] : tile<8x8x$T>\n"
     "  %r = add %a, %a : tile<8x8x$T>\n  store %r, %o[%c0, %c0] strides [%c12, %c1]\n"
     "  return\n}\n",
     "x=rand:96:-50:50 o=out:96", {1, 1, 1}},
    /* dot: small integers, so any order of the sums is exact */
    {"dot", "", "f16 bf16 f32",
     "kernel @k(%a: ptr<$T>, %b: ptr<$T>, %c: ptr<f32>, %o: ptr<f32>) attrs {WARPS = 2} {\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %c32 = const 32 : i32\n  %c64 = const 64 : i32\n"
     "  %x = load %a[%c0, %c0] strides [%c32, %c1] : tile<64x32x$T>\n"
     "  %y = load %b[%c0, %c0] strides [%c64, %c1] : tile<32x64x$T>\n"
     "  %z = load %c[%c0, %c0] strides [%c64, %c1] : tile<64x64xf32>\n"
     "  %r = dot %x, %y, %z : tile<64x64xf32>\n"
     "  store %r, %o[%c0, %c0] strides [%c64, %c1]\n  return\n}\n",
     "a=int:2048:-4:4 b=int:2048:-4:4 c=int:4096:-64:64 o=out:4096", {1, 1, 1}},
    /* reductions along the lanes' dim (4 warps) and along the warps' (1 warp), and of a rank-1
     * tile to a scalar */
    {"reduce", "reduce_max reduce_sum", "f16 bf16 f32 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %o: ptr<$T>, %s: ptr<$T>")
     "  %z = const 0 : $T\n" LOAD_TILE("a", "x", "z")
     "  %r = $OP %a, 1 : tile<32x$T>\n  store %r, %o[%row] strides [%c1] bounds [%m]\n"
     "  %v = load %x[%row] strides [%c1] bounds [%m] other %z : tile<32x$T>\n"
     "  %t = $OP %v, 0 : $T\n  store %t, %s[%pid] strides [%c1]\n  return\n}\n",
     "x=int:" NE ":-4:4 o=out:45 s=out:2 " ARRAY, {2, 1, 1}},
    {"reduce_axis0", "reduce_max reduce_sum", "f16 bf16 f32 i32 i64",
     "kernel @k(%x: ptr<$T>, %o: ptr<$T>, %m: i32, %n: i32) attrs {WARPS = 1} {\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %z = const 0 : $T\n"
     "  %a = load %x[%c0, %c0] strides [%n, %c1] bounds [%m, %n] other %z : tile<64x32x$T>\n"
     "  %r = $OP %a, 0 : tile<32x$T>\n  store %r, %o[%c0] strides [%c1] bounds [%n]\n"
     "  return\n}\n",
     "x=int:" NE ":-4:4 o=out:27 " ARRAY, {1, 1, 1}},
    /* control flow: a loop carrying a tile and a scalar, an if with results, a call */
    {"for", "", "f16 bf16 f32 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %o: ptr<$T>, %s: ptr<i32>")
     "  %z = const 0 : $T\n  %acc0 = const 0 : tile<32x32x$T>\n  %c3 = const 3 : i32\n"
     "  %acc, %cnt = for %i = %c0 to %c3 step %c1 iter (%t = %acc0, %q = %c0) : tile<32x32x$T>, i32 {\n"
     "    %a = load %x[%row, %c0] strides [%n, %c1] bounds [%m, %n] other %z : tile<32x32x$T>\n"
     "    %iv = splat %i : tile<32x32xi32>\n    %ivt = cast %iv : tile<32x32x$T>\n"
     "    %ai = mul %a, %ivt : tile<32x32x$T>\n    %t2 = add %t, %ai : tile<32x32x$T>\n"
     "    %q2 = add %q, %i : i32\n    yield %t2, %q2\n  }\n"
     STORE_TILE("acc", "o") "  store %cnt, %s[%pid] strides [%c1]\n  return\n}\n",
     "x=rand:" NE ":-8:8 o=out:" NE " s=out:2 " ARRAY, {2, 1, 1}},
    {"if", "", "f16 bf16 f32 i32 i64",
     ELEM_HEAD("%x: ptr<$T>, %o: ptr<$T>")
     "  %z = const 0 : $T\n" LOAD_TILE("a", "x", "z")
     "  %first = cmp eq %pid, %c0 : i1\n"
     "  %r, %w = if %first : tile<32x32x$T>, i32 {\n"
     "    %d = add %a, %a : tile<32x32x$T>\n    yield %d, %c1\n"
     "  } else {\n    %e = neg %a : tile<32x32x$T>\n    yield %e, %c32\n  }\n"
     STORE_TILE("r", "o") "  return\n}\n",
     "x=rand:" NE ":-8:8 o=out:" NE " " ARRAY, {2, 1, 1}},
    {"call", "", "f16 bf16 f32 i32 i64",
     "func @twice(%t: tile<32x32x$T>) -> (tile<32x32x$T>) {\n"
     "  %r = add %t, %t : tile<32x32x$T>\n  return %r\n}\n\n"
     ELEM_HEAD("%x: ptr<$T>, %o: ptr<$T>")
     "  %z = const 0 : $T\n" LOAD_TILE("a", "x", "z")
     "  %r = call @twice(%a) : tile<32x32x$T>\n" STORE_TILE("r", "o") "  return\n}\n",
     "x=rand:" NE ":-8:8 o=out:" NE " " ARRAY, {2, 1, 1}},
    /* the program grid in three dimensions */
    {"program", "", "i32",
     "kernel @k(%o: ptr<i32>, %t: ptr<i32>) attrs {WARPS = 4} {\n"
     "  %x = program_id 0 : i32\n  %y = program_id 1 : i32\n  %z = program_id 2 : i32\n"
     "  %nx = num_programs 0 : i32\n  %ny = num_programs 1 : i32\n  %nz = num_programs 2 : i32\n"
     "  %zy = mul %z, %ny : i32\n  %zyy = add %zy, %y : i32\n  %l0 = mul %zyy, %nx : i32\n"
     "  %lin = add %l0, %x : i32\n  %c4 = const 4 : i32\n  %at = mul %lin, %c4 : i32\n"
     "  %c0 = const 0 : i32\n  %c1 = const 1 : i32\n  %c2 = const 2 : i32\n  %c3 = const 3 : i32\n"
     "  %p = ptradd %o, %at : ptr<i32>\n  store %x, %p[%c0] strides [%c1]\n"
     "  store %y, %p[%c1] strides [%c1]\n  store %z, %p[%c2] strides [%c1]\n"
     "  %nn = mul %nx, %ny : i32\n  %nnn = mul %nn, %nz : i32\n  store %nnn, %p[%c3] strides [%c1]\n"
     "  %q = ptradd %t, %at : ptr<i32>\n  %v = arange 0, 4 : tile<4xi32>\n"
     "  %sl = splat %lin : tile<4xi32>\n  %tt = add %v, %sl : tile<4xi32>\n"
     "  store %tt, %q[%c0] strides [%c1]\n  return\n}\n",
     "o=out:48 t=out:48", {3, 2, 2}},
};

enum { NCASES = sizeof cases / sizeof cases[0] };

/* ---- text substitution --------------------------------------------------------------------- */

static int type_bits(const char *t) {
  int s = kn_scalar_from_name(t, strlen(t));
  return s < 0 ? 32 : kn_scalar_bits((kn_scalar)s);
}

/* text with $T, $OP and $W replaced (malloc'd) */
static char *subst(const char *text, const char *type, const char *op) {
  char w[16];
  snprintf(w, sizeof w, "%d", type_bits(type) - 1);
  size_t cap = strlen(text) * 2 + 64, n = 0;
  char *out = malloc(cap);
  assert_non_null(out);
  for (const char *p = text; *p;) {
    const char *rep = NULL;
    size_t skip = 1;
    if (!strncmp(p, "$OP", 3)) rep = op, skip = 3;
    else if (!strncmp(p, "$T", 2)) rep = type, skip = 2;
    else if (!strncmp(p, "$W", 2)) rep = w, skip = 2;
    size_t add = rep ? strlen(rep) : 1;
    if (n + add + 1 > cap) {
      cap = 2 * (n + add + 1);
      out = realloc(out, cap);
      assert_non_null(out);
    }
    if (rep) memcpy(out + n, rep, add);
    else out[n] = *p;
    n += add;
    p += skip;
  }
  out[n] = 0;
  return out;
}

/* the i-th space-separated word of list into buf; false past the end */
static bool word(const char *list, int i, char *buf, size_t n) {
  const char *p = list;
  for (;;) {
    while (*p == ' ') p++;
    if (!*p) return false;
    size_t len = strcspn(p, " ");
    if (i-- == 0) {
      snprintf(buf, n, "%.*s", (int)len, p);
      return true;
    }
    p += len;
  }
}

/* ---- data --------------------------------------------------------------------------------- */

static uint64_t rng;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
static double urange(double lo, double hi) { return lo + (hi - lo) * urand(); }
static int64_t irange(int64_t lo, int64_t hi) { return lo + (int64_t)(urand() * (double)(hi - lo + 1)); }

/* a value of generator g for element type t (before rounding to t) */
static double gen_value(const char *g, kn_scalar t, double lo, double hi, int64_t i) {
  bool fl = kn_scalar_is_float(t);
  double r = urand();
  if (!strcmp(g, "rand")) return fl ? urange(lo, hi) : (double)irange((int64_t)lo, (int64_t)hi);
  if (!strcmp(g, "int")) return (double)irange((int64_t)lo, (int64_t)hi);  /* whole numbers */
  if (!strcmp(g, "nonzero")) {
    double v = fl ? urange(-100, 100) : (double)irange(-300, 300);
    return v == 0 ? 7 : v;
  }
  if (!strcmp(g, "mixed")) {  /* mostly ordinary values, some specials and extremes */
    if (fl) {
      static const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-6, -3e4, 65504, 1e-40};
      if (r < 0.1) return sp[i % 9];
      return urange(-100, 100);
    }
    if (t == KN_I1) return (double)(i % 3 == 0);
    if (r < 0.05) return (double)(t == KN_I32 ? INT32_MIN : -(1ll << 62));
    return (double)irange(-100000, 100000);
  }
  if (!strcmp(g, "math")) {  /* the domains of exp/log/sqrt/tanh, their edges and specials */
    static const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -1.0, 1.0, 1e-5, -1e-7, 88.0};
    if (r < 0.1) return sp[i % 10];
    if (r < 0.4) return urange(-0.3, 0.3);  /* tanh's polynomial, log near 1 */
    return urange(-12, 12);
  }
  if (!strcmp(g, "casts")) {  /* fractions, halves (ties), ints beyond f32's 24 bits, extremes */
    static const double sp[] = {0.5, 1.5, 2.5, -0.5, -2.5, NAN, INFINITY, -INFINITY, 1e10,
                                -3e9, 1073741824.0 + 4194304.0 + 1.0, 16777217.0, 70000.0};
    if (r < 0.2) return fl ? sp[i % 13] : sp[9 + i % 4];
    return fl ? urange(-300, 300) : (double)irange(-3000000000ll, 3000000000ll);
  }
  return 0;
}

/* one buffer or scalar of the data string: name=gen:N[:lo:hi] or name=literal */
typedef struct arg {
  char name[32];
  bool buffer;
  kn_scalar t;
  size_t n;
  void *init;  /* the initial contents, copied for each run */
  double lit;
} arg;

static void fill_buffer(arg *a, const char *g, double lo, double hi) {
  size_t es = kn_scalar_size(a->t);
  a->init = malloc(a->n * es + 1);
  assert_non_null(a->init);
  for (size_t i = 0; i < a->n; i++) {
    char *p = (char *)a->init + i * es;
    if (!strcmp(g, "out")) {
      if (kn_scalar_is_float(a->t)) kn_store_elem(a->t, p, NAN);
      else memset(p, 0x5a, es);
      continue;
    }
    double v = gen_value(g, a->t, lo, hi, (int64_t)i);
    if (kn_scalar_is_float(a->t)) kn_store_elem(a->t, p, v);
    else if (a->t == KN_I1) kn_store_elem_i(a->t, p, v != 0);
    else kn_store_elem_i(a->t, p, v >= 0x1p63 ? INT64_MAX : v < -0x1p63 ? INT64_MIN : (int64_t)v);
  }
}

/* the kernel's arguments from the data string, in parameter order */
static int parse_data(const kn_func *k, const char *data, arg *args) {
  int np = kn_func_nparams(k);
  for (int i = 0; i < np; i++) {
    const kn_value *p = kn_func_param(k, i);
    arg *a = &args[i];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", p->name);
    char key[40], spec[80];
    snprintf(key, sizeof key, "%s=", p->name);
    const char *at = data;
    while ((at = strstr(at, key)) && at != data && at[-1] != ' ') at++;
    if (!at) fail_msg("no data for parameter %%%s", p->name);
    snprintf(spec, sizeof spec, "%.*s", (int)strcspn(at + strlen(key), " "), at + strlen(key));
    a->t = (kn_scalar)p->type.elem;
    if (p->type.kind != KN_TY_PTR) {
      a->lit = strtod(spec, NULL);
      continue;
    }
    char g[16];
    double lo = 0, hi = 0;
    int n = 0;
    if (sscanf(spec, "%15[a-z]:%d:%lf:%lf", g, &n, &lo, &hi) < 2 || n <= 0)
      fail_msg("bad data '%s'", spec);
    a->buffer = true;
    a->n = (size_t)n;
    fill_buffer(a, g, lo, hi);
  }
  return np;
}

/* ---- one case, one type ------------------------------------------------------------------- */

typedef struct prepared {
  char label[96];
  kn_module *m;
  int np;
  arg args[16];
  void *want[16];        /* the interpreter's buffers after the run */
  kn_exactness exact;    /* the loosest of the kernel's ops */
  int grid[3];
} prepared;

static void note_ops(const kn_block *b, bool *seen, kn_exactness *ex) {
  for (const kn_op *op = b->first; op; op = op->next) {
    seen[op->opc] = true;
    if (kn_opinfo_table[op->opc].exact > *ex) *ex = kn_opinfo_table[op->opc].exact;
    for (int r = 0; r < op->nregion; r++) note_ops(op->region[r], seen, ex);
  }
}

static size_t buf_bytes(const arg *a) { return a->n * kn_scalar_size(a->t); }

/* fresh copies of the inputs, as kernel arguments and regions */
static void make_args(const prepared *p, void **bufs, kn_argval *av, kn_region *re, int *nre) {
  *nre = 0;
  for (int i = 0; i < p->np; i++) {
    const arg *a = &p->args[i];
    if (!a->buffer) {
      if (kn_scalar_is_float(a->t)) av[i].f = a->lit;
      else av[i].i = (int64_t)a->lit;
      bufs[i] = NULL;
      continue;
    }
    bufs[i] = malloc(buf_bytes(a) + 1);
    assert_non_null(bufs[i]);
    memcpy(bufs[i], a->init, buf_bytes(a));
    av[i].p = bufs[i];
    re[(*nre)++] = (kn_region){bufs[i], buf_bytes(a)};
  }
}

static void free_bufs(const prepared *p, void **bufs) {
  for (int i = 0; i < p->np; i++) free(bufs[i]);
}

static bool prepare(const tcase *c, const char *type, const char *op, bool filter, bool *seen,
                    prepared *p) {
  memset(p, 0, sizeof *p);
  snprintf(p->label, sizeof p->label, "%s%s%s %s", c->name, *op ? "/" : "", op, type);
  const char *only = filter ? getenv("KILN_TEST_ONLY") : NULL;
  char *text = subst(c->text, type, op), *data = subst(c->data, type, op);
  kn_diag d;
  p->m = kn_parse(p->label, text, strlen(text), &d);
  if (!p->m || kn_verify(p->m, &d)) fail_msg("%s: %s\n%s", p->label, d.rendered, text);
  for (int f = 0; f < p->m->nfuncs; f++) note_ops(p->m->funcs[f]->body, seen, &p->exact);
  free(text);
  if (only && !strstr(p->label, only)) {
    free(data);
    kn_module_free(p->m);
    return false;
  }
  rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)strlen(p->label) * 0x100000001b3ull;
  for (const char *s = p->label; *s; s++) rng = (rng ^ (uint64_t)*s) * 0x100000001b3ull;
  kn_func *k = kn_module_find(p->m, "k");
  p->np = parse_data(k, data, p->args);
  free(data);
  memcpy(p->grid, c->grid, sizeof p->grid);
  /* the reference */
  void *bufs[16];
  kn_argval av[16];
  kn_region re[16];
  int nre;
  make_args(p, bufs, av, re, &nre);
  if (kn_interp_run(k, av, p->grid, re, nre, NULL, &d)) fail_msg("%s: interpreter: %s", p->label, d.rendered);
  memcpy(p->want, bufs, sizeof bufs);
  return true;
}

static void release(prepared *p) {
  for (int i = 0; i < p->np; i++) {
    free(p->args[i].init);
    free(p->want[i]);
  }
  kn_module_free(p->m);
}

/* the elements of the run's buffers that break exactness e, reported into msg; the count */
static int compare(const prepared *p, void **got, kn_exactness e, char *msg, size_t n) {
  int bad = 0;
  size_t len = 0;
  msg[0] = 0;
  for (int i = 0; i < p->np; i++) {
    const arg *a = &p->args[i];
    if (!a->buffer) continue;
    size_t es = kn_scalar_size(a->t);
    for (size_t j = 0; j < a->n; j++) {
      const char *w = (const char *)p->want[i] + j * es, *g = (const char *)got[i] + j * es;
      bool fl = kn_scalar_is_float(a->t);
      double wv = fl ? kn_load_elem(a->t, w) : (double)kn_load_elem_i(a->t, w);
      double gv = fl ? kn_load_elem(a->t, g) : (double)kn_load_elem_i(a->t, g);
      bool ok = fl ? kn_exactness_accepts(e, a->t, wv, gv)
                   : kn_load_elem_i(a->t, w) == kn_load_elem_i(a->t, g);
      if (ok) continue;
      if (bad++ < 4 && len < n)
        len += (size_t)snprintf(msg + len, n - len, "\n    %%%s[%zu]: want %.9g, got %.9g", a->name, j,
                                wv, gv);
    }
  }
  return bad;
}

static bool verbose(void) {
  const char *e = getenv("KILN_TEST_VERBOSE");
  return e && *e && strcmp(e, "0") != 0;
}

/* ---- the targets -------------------------------------------------------------------------- */

/* the targets are the registry's (compiler/targets.c): every one of them, so a new target is
 * covered without a line here.  Those that run in this process (host, emulated) run each kernel
 * and compare with the interpreter; the others compile it to their artefact (code object, PTX
 * assembled by ptxas where it is found). */
static bool have_ptxas(void) {
  char path[512];
  return kn_ptxas_find(path, sizeof path, NULL) == KN_OK;
}

static bool runs_here(const kn_target *t) { return t->emulated || t->arch->isa == KN_ISA_HOST; }

/* compiles (and where the target runs, runs and compares) p; 0, or -1 with msg */
static int on_target(prepared *p, const kn_target *t, char *msg, size_t n) {
  kn_diag d;
  if (!runs_here(t)) {
    kn_artifact a;
    int rc = kn_compile_artifact(p->m, "k", t, NULL, &a, &d);
    if (rc) snprintf(msg, n, "%.1400s", d.rendered[0] ? d.rendered : d.message);
    if (!rc && a.kind == KN_ARTIFACT_PTX && have_ptxas()) {
      kn_ptxas_options o = {.arch = t->name, .opt_level = 3};
      kn_ptxas_result r;
      memset(&r, 0, sizeof r);
      kn_diag why;
      rc = kn_ptxas_run(a.data, a.size, &o, &r, &why) == KN_OK ? 0 : -1;
      if (rc) snprintf(msg, n, "ptxas: %.1400s", why.rendered);
      kn_ptxas_result_free(&r);
    }
    kn_artifact_free(&a);
    return rc;
  }
  bool host = !t->emulated;
  kn_kernel *k = NULL;
  if (kn_compile(p->m, "k", t, NULL, &k, &d)) {
    snprintf(msg, n, "compile: %.1400s", d.rendered[0] ? d.rendered : d.message);
    return -1;
  }
  void *bufs[16];
  kn_argval av[16];
  kn_region re[16];
  int nre;
  make_args(p, bufs, av, re, &nre);
  int rc = host ? kn_kernel_run_host(k, av, p->grid, &d)
                : kn_emu_run(k, av, p->grid, re, nre, NULL, &d);
  if (rc) snprintf(msg, n, "run: %.500s", d.message);
  else if (compare(p, bufs, host ? KN_EXACT : p->exact, msg, n)) rc = -1;
  free_bufs(p, bufs);
  kn_kernel_free(k);
  return rc;
}

/* calls fn for every case, each of its types and each of its ops ("" when it has none) */
typedef void (*variant_fn)(const tcase *c, const char *type, const char *op, void *ctx);
static void each_variant(variant_fn fn, void *ctx) {
  for (int c = 0; c < NCASES; c++) {
    char type[16], op[32];
    for (int ti = 0; word(cases[c].types, ti, type, sizeof type); ti++)
      for (int oi = 0; oi == 0 || word(cases[c].ops, oi, op, sizeof op); oi++) {
        if (!word(cases[c].ops, oi, op, sizeof op)) op[0] = 0;
        fn(&cases[c], type, op, ctx);
      }
  }
}

typedef struct run_state {
  const kn_target *const *ts;
  int nts, runs, failures;
  int variant, rot;   /* the variant's index; the target's (the reduced set rotates with it) */
  char *report;
  size_t rlen;
} run_state;

static void run_variant(const tcase *c, const char *type, const char *op, void *ctx) {
  run_state *rs = ctx;
  static bool seen[KN_OP_COUNT];
  prepared p;
  /* reduced (KILN_TEST_REDUCED): every third (case, type, op) on each target, a different third
   * on the next one, so every op still runs on some of the targets */
  if (!test_keep(rs->variant++ + rs->rot, 3)) return;
  if (!prepare(c, type, op, true, seen, &p)) return;
  for (int i = 0; i < rs->nts; i++) {
    char msg[1600];
    int rc = on_target(&p, rs->ts[i], msg, sizeof msg);
    rs->runs++;
    if (verbose()) printf("  %-28s %-11s %s\n", p.label, rs->ts[i]->name, rc ? "FAIL" : "ok");
    if (rc && rs->rlen < 60000) {
      rs->failures++;
      rs->rlen += (size_t)snprintf(rs->report + rs->rlen, 65536 - rs->rlen, "%s on %s: %s\n",
                                   p.label, rs->ts[i]->name, msg);
    }
  }
  release(&p);
}

/* every case, type and op on the targets in ts[]; fails listing what failed */
static void run_all(const kn_target *const *ts, int nts, int rot) {
  run_state rs = {.ts = ts, .nts = nts, .rot = rot, .report = calloc(1, 65536)};
  assert_non_null(rs.report);
  each_variant(run_variant, &rs);
  printf("  %d runs, %d failed\n", rs.runs, rs.failures);
  if (rs.failures) fail_msg("%s", rs.report);
  free(rs.report);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void note_variant(const tcase *c, const char *type, const char *op, void *ctx) {
  char *text = subst(c->text, type, op);
  kn_diag d;
  kn_module *m = kn_parse(c->name, text, strlen(text), &d);
  if (!m || kn_verify(m, &d)) fail_msg("%s %s %s: %s", c->name, op, type, d.rendered);
  kn_exactness ex = KN_EXACT;
  for (int f = 0; f < m->nfuncs; f++) note_ops(m->funcs[f]->body, ctx, &ex);
  kn_module_free(m);
  free(text);
}

static void test_every_op_has_a_kernel(void **st) {
  (void)st;
  bool seen[KN_OP_COUNT] = {0};
  each_variant(note_variant, seen);
  for (int o = 0; o < KN_OP_COUNT; o++)
    if (!seen[o]) fail_msg("op '%s' of ops.def has no test kernel in test_all_ops.c", kn_opinfo_table[o].name);
}

/* one cmocka test per target of the registry: the state is the target */
static void test_target(void **st) {
  const kn_target *t = *st;
  if (t->artifact == KN_ARTIFACT_PTX && !have_ptxas())
    printf("  ptxas not found (set KILN_PTXAS): the PTX is not assembled\n");
  int ti = 0;
  while (kn_target_at(ti) && kn_target_at(ti) != t) ti++;
  run_all(&t, 1, ti);
}

/* the comparison refuses what each exactness class must: a wrong bit, a wrong NaN, 3 ulps */
static void test_comparison_catches_errors(void **st) {
  (void)st;
  bool seen[KN_OP_COUNT];
  prepared p;
  char msg[400];
  int c = 0;
  while (strcmp(cases[c].name, "math")) c++;
  assert_true(prepare(&cases[c], "f32", "tanh", false, seen, &p));
  void *got[16] = {0};
  for (int i = 0; i < p.np; i++)
    if (p.args[i].buffer) {
      got[i] = malloc(buf_bytes(&p.args[i]));
      memcpy(got[i], p.want[i], buf_bytes(&p.args[i]));
    }
  int o = 1;  /* %o: the tile result */
  assert_int_equal(compare(&p, got, KN_EXACT, msg, sizeof msg), 0);
  float *f = got[o];
  size_t j = 0;
  while (!(isfinite(f[j]) && fabsf(f[j]) > 0.1f)) j++;
  float keep = f[j];
  f[j] = nextafterf(keep, INFINITY);
  assert_int_equal(compare(&p, got, KN_EXACT, msg, sizeof msg), 1);
  assert_int_equal(compare(&p, got, KN_REASSOC, msg, sizeof msg), 1);
  assert_int_equal(compare(&p, got, KN_ULP, msg, sizeof msg), 0);
  f[j] = keep * (1 + 0x1p-14f);
  assert_int_equal(compare(&p, got, KN_ULP, msg, sizeof msg), 1);
  assert_int_equal(compare(&p, got, KN_APPROX, msg, sizeof msg), 1);
  f[j] = NAN;
  assert_int_equal(compare(&p, got, KN_APPROX, msg, sizeof msg), 1);
  for (int i = 0; i < p.np; i++) free(got[i]);
  release(&p);
}

int main(void) {
  enum { MAX = 64 };
  struct CMUnitTest tests[MAX] = {
      cmocka_unit_test(test_every_op_has_a_kernel),
      cmocka_unit_test(test_comparison_catches_errors),
  };
  int n = 2;
  for (int i = 0; kn_target_at(i) && n < MAX; i++) {
    const kn_target *t = kn_target_at(i);
    tests[n++] = (struct CMUnitTest){t->name, test_target, NULL, NULL, (void *)t};
  }
  return _cmocka_run_group_tests("test_all_ops", tests, (size_t)n, NULL, NULL);
}
