"""python_binding.py — python/kiln.py on the host device, standard library only.

Host buffers are ctypes arrays wrapped in a tiny duck-typed tensor (.data_ptr(), .shape,
.stride(), .dtype, .device, .is_cuda), so attention() runs exactly as it would on torch CPU
tensors, without torch or numpy.  Inputs are N(0,1) rounded to the dtype; the reference is a
plain-Python float64 attention with the kernel's masking rules; tolerances are the template's
(templates/attn_fwd.c).  Checked: f32 / f16 / bf16, ragged lengths, causal (bottom-right, with
query rows that see no key), GQA, lse, a (B, N, H, D) layout through strides, the low-level
Context/Kernel API (info, stats, memo), and the error paths (bad dtype, head dim, shapes, a CUDA
device where there is none) as KilnError with the C status and message.  Variants (docs/
variants.md) through kiln.attention against the same float64 formula with the variant's score
and mask written out here: a sliding window with softcap, ALiBi with top-left causal, a bias
broadcast over heads with document masking, prefix-LM, and a score_mod with a per-head tensor
parameter plus a mask_mod with a block_mask and an int parameter; and their errors (a malformed
modifier text with its <mods>:line:col, a missing parameter, a wrong shape).  Varlen through
kiln.attention_varlen (ragged packed sequences with an empty one and length 1, GQA, causal both
ways, a window, lse) against a per-sequence float64 reference, and its errors (a buffer smaller
than its shape, decreasing cu_seqlens, a dropout_p of 1.5).  The backward (docs/backward.md)
through kiln.attention_backward after kiln.attention: dq, dk, dv against a plain-Python float64
backward (GQA, causal, ragged lengths, a softcap, dropout 0.17 with the mask from a Python
Philox 4x32-10 written here, the forward's O checked too), and its errors (a wrong gradient
shape, a missing lse, dropout without the forward's seed); the varlen backward through
kiln.attention_varlen_backward after kiln.attention_varlen (ragged lengths with an empty
sequence and length 1, GQA, causal, softcap, dropout) against the same float64 backward run on
each sequence, the tokens of no sequence left unwritten, and its errors.
A paged KV cache through kiln.attention_with_kvcache (its decode-shaped calls through the split-KV
decode kernels; pools of page sizes 1, 5 and 16 with pages
in shuffled order, a block table with unused tail entries, new rows k / v appended first, an
empty sequence, GQA, causal, a window, lse) against a float64 reference over each sequence's
keys, and its errors (a page outside the pool, a cache length past the table, rotary
embeddings).  fp8 inputs (docs/serving.md): kiln.attention and kiln.attention_varlen on
float8_e4m3fn q, k, v with q_descale / k_descale / v_descale (GQA, causal, ragged) and
kiln.attention_with_kvcache over
float8_e4m3fn pages with an f16 q, against the float64 reference on the dequantised inputs, and
a descale given to a kernel without fp8 inputs and one smaller than its (B, HK) shape (errors).
The plan cache (docs/api.md "The plan cache"): a hit hands C the struct the uncached call does,
byte for byte, and the fields the binding's mapping says (addresses, storage sizes, dropout seed
and offset), for dense, variant, modifier, dropout, fp8, varlen and paged calls, on another set
of tensors with larger storages than the call that made the plan; each key field (strides,
shape, dtype, lse, sm_scale, the window, softcap, causal, an option's type, the context) misses
and its call is right against float64; errors (Python checks and kiln_forward's) are never kept
and a hit's data errors are the uncached call's; the LRU bound; six threads on three shapes.
"""
import ctypes
import math
import os
import random
import struct
import sys
import tempfile
import threading
from fractions import Fraction

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kiln  # noqa: E402

TOL = {"float32": 1e-4, "float16": 4e-3, "bfloat16": 3e-2}
LSE_TOL = 1e-4


def to_bits(dtype, x):
    if dtype == "float16":
        return struct.unpack("<H", struct.pack("<e", x))[0]
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16  # bf16: round to nearest even


def from_bits(dtype, h):
    if dtype == "float16":
        return struct.unpack("<e", struct.pack("<H", h))[0]
    return struct.unpack("<f", struct.pack("<I", h << 16))[0]


class Dev:
    type, index = "cpu", None


class Tensor:
    """A host buffer with torch's tensor surface (the part kiln.attention uses)."""

    def __init__(self, dtype, shape, strides=None):
        self.dtype, self.shape = dtype, tuple(shape)
        n = 1
        for s in shape:
            n *= s
        self._strides = strides or tuple(
            int(math.prod(shape[i + 1:])) for i in range(len(shape)))
        ctype = {"float32": ctypes.c_float, "int32": ctypes.c_int32}.get(dtype, ctypes.c_uint16)
        self.buf = (ctype * n)()
        self.device, self.is_cuda = Dev(), False

    def data_ptr(self):
        return ctypes.addressof(self.buf)

    def untyped_storage(self):  # the buffer's size, as torch reports it
        class Storage:
            nbytes = staticmethod(lambda: ctypes.sizeof(self.buf))
        return Storage()

    def storage_offset(self):
        return 0

    def stride(self):
        return self._strides

    def _off(self, idx):
        return sum(i * s for i, s in zip(idx, self._strides))

    def get(self, idx):
        x = self.buf[self._off(idx)]
        return x if self.dtype in ("float32", "int32") else from_bits(self.dtype, x)

    def set(self, idx, x):
        self.buf[self._off(idx)] = x if self.dtype in ("float32", "int32") else \
            to_bits(self.dtype, x)


def f8_decode(b):
    """an OCP e4m3 (float8_e4m3fn) byte's value"""
    sign = -1.0 if b & 0x80 else 1.0
    e, m = (b >> 3) & 15, b & 7
    if e == 15 and m == 7:
        return math.nan
    return sign * (m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))


F8_VALUES = sorted((f8_decode(b), b) for b in range(256) if not math.isnan(f8_decode(b)))


class F8Tensor(Tensor):
    """float8_e4m3fn bytes with per-(batch, kv head) descales: get() is the dequantised value
    (what the reference reads), set() quantises x / descale to the nearest byte"""

    def __init__(self, shape, descale, head_axis, group=1, batch_axis=0):
        Tensor.__init__(self, "float8_e4m3fn", shape)
        self.buf = (ctypes.c_uint8 * len(self.buf))()
        self.descale, self.head_axis, self.group, self.batch_axis = \
            descale, head_axis, group, batch_axis

    def _scale(self, idx):
        b = idx[self.batch_axis] if self.batch_axis is not None else 0
        return self.descale.get((b, idx[self.head_axis] // self.group))

    def get(self, idx):
        return f8_decode(self.buf[self._off(idx)]) * self._scale(idx)

    def set(self, idx, x):
        y = x / self._scale(idx)
        self.buf[self._off(idx)] = min(F8_VALUES, key=lambda vb: abs(vb[0] - y))[1]


def indices(shape):
    if not shape:
        yield ()
        return
    for i in range(shape[0]):
        for rest in indices(shape[1:]):
            yield (i,) + rest


def randn(rng, dtype, shape, bnhd=False):
    if bnhd:  # stored as (B, N, H, D), viewed as (B, H, N, D)
        B, H, N, D = shape
        t = Tensor(dtype, shape, strides=(N * H * D, D, H * D, 1))
    else:
        t = Tensor(dtype, shape)
    for idx in indices(shape):
        t.set(idx, rng.gauss(0, 1))
    return t


def reference(q, k, v, causal, scale, score=None, mask=None):
    """float64 attention; score(s, b, h, i, j) modifies a scaled score, mask(b, h, i, j) says
    whether query i sees key j (besides causal, bottom-right)"""
    B, H, Nq, D = q.shape
    HK, Nk = k.shape[1], k.shape[2]
    o, lse = {}, {}
    for b in range(B):
        for h in range(H):
            hk = h // (H // HK)
            for i in range(Nq):
                last = i + Nk - Nq if causal else Nk - 1
                js = [j for j in range(min(last + 1, Nk)) if mask is None or mask(b, h, i, j)]
                s = [sum(q.get((b, h, i, d)) * k.get((b, hk, j, d)) for d in range(D)) * scale
                     for j in js]
                if score:
                    s = [score(x, b, h, i, j) for x, j in zip(s, js)]
                if not s:
                    for d in range(D):
                        o[(b, h, i, d)] = 0.0
                    lse[(b, h, i)] = -math.inf
                    continue
                m = max(s)
                p = [math.exp(x - m) for x in s]
                l = sum(p)
                for d in range(D):
                    o[(b, h, i, d)] = sum(p[n] * v.get((b, hk, j, d)) for n, j in enumerate(js)) / l
                lse[(b, h, i)] = m + math.log(l)
    return o, lse


failures = 0


def check(name, ok, detail=""):
    global failures
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail))
    failures += not ok


def run_case(rng, dtype, B, H, HK, Nq, Nk, D, causal, with_lse, bnhd=False, scale=None):
    q = randn(rng, dtype, (B, H, Nq, D), bnhd)
    k = randn(rng, dtype, (B, HK, Nk, D), bnhd)
    v = randn(rng, dtype, (B, HK, Nk, D), bnhd)
    out = Tensor(dtype, (B, H, Nq, D))
    lse = Tensor("float32", (B, H, Nq)) if with_lse else None
    r = kiln.attention(q, k, v, causal=causal, sm_scale=scale, out=out, lse=lse)
    ro, rl = reference(q, k, v, causal, scale if scale else 1 / math.sqrt(D))
    err = max(abs(out.get(i) - ro[i]) for i in ro)
    lerr = 0.0
    if with_lse:
        for i in rl:
            got = lse.get(i)
            lerr = max(lerr, 0.0 if got == rl[i] else abs(got - rl[i]))
    check("attention %s B%d H%d HK%d N(%d,%d) D%d causal=%d lse=%d%s" %
          (dtype, B, H, HK, Nq, Nk, D, causal, with_lse, " BNHD" if bnhd else ""),
          r is out and err <= TOL[dtype] and lerr <= LSE_TOL,
          "max|dO| %.2e (tol %.0e) max|dlse| %.2e" % (err, TOL[dtype], lerr))


SCORE_MOD = """
// a per-head temperature (a tensor parameter)
func @score_mod(%score: f32, %b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, %temp: ptr<f32>) -> (f32) {
  %c1 = const 1 : i64
  %h64 = cast %h : i64
  %t = load %temp[%h64] strides [%c1] : f32
  %out = mul %score, %t : f32
  return %out
}
"""
MASK_MOD = """
func @mask_mod(%b: i32, %h: i32, %q_idx: i32, %kv_idx: i32, %chunk: i32) -> (i1) {
  %qc = div %q_idx, %chunk : i32
  %kc = div %kv_idx, %chunk : i32
  %live = cmp le %kc, %qc : i1
  return %live
}
func @block_mask(%b: i32, %h: i32, %q_lo: i32, %q_hi: i32, %kv_lo: i32, %kv_hi: i32, %chunk: i32) -> (i1) {
  %c1 = const 1 : i32
  %q_end = sub %q_hi, %c1 : i32
  %qc = div %q_end, %chunk : i32
  %kc = div %kv_lo, %chunk : i32
  %live = cmp le %kc, %qc : i1
  return %live
}
"""


def segments(rng, B, N, ndocs):
    t = Tensor("int32", (B, N))
    for b in range(B):
        for i, x in enumerate(sorted(rng.randrange(ndocs) for _ in range(N))):
            t.set((b, i), x)
    return t


def run_variant(rng, name, dtype, B, H, HK, Nq, Nk, D, score=None, mask=None, causal=False,
                **kw):
    """kiln.attention with the variant arguments kw against reference() with score/mask"""
    q = randn(rng, dtype, (B, H, Nq, D))
    k = randn(rng, dtype, (B, HK, Nk, D))
    v = randn(rng, dtype, (B, HK, Nk, D))
    out = Tensor(dtype, (B, H, Nq, D))
    lse = Tensor("float32", (B, H, Nq))
    bc = causal is True or causal == "bottom_right"
    kiln.attention(q, k, v, causal=causal, out=out, lse=lse, **kw)
    ro, rl = reference(q, k, v, bc, 1 / math.sqrt(D), score, mask)
    err = max(abs(out.get(i) - ro[i]) for i in ro)
    lerr = max(0.0 if lse.get(i) == rl[i] else abs(lse.get(i) - rl[i]) for i in rl)
    check("variant %s %s B%d H%d HK%d N(%d,%d) D%d" % (name, dtype, B, H, HK, Nq, Nk, D),
          err <= TOL[dtype] and lerr <= LSE_TOL,
          "max|dO| %.2e (tol %.0e) max|dlse| %.2e" % (err, TOL[dtype], lerr))


def variants(rng):
    # a sliding window with softcap (bottom-right aligned diagonal)
    wl, wr, cap = 3, 1, 5.0
    run_variant(rng, "window+softcap", "float32", 1, 2, 1, 9, 13, 32,
                window_size=(wl, wr), softcap=cap,
                score=lambda s, b, h, i, j: cap * math.tanh(s / cap),
                mask=lambda b, h, i, j: -wl <= j - (i + 13 - 9) <= wr)
    # ALiBi, one slope per head, with top-left causal
    slopes = Tensor("float32", (2,))
    for h in range(2):
        slopes.set((h,), 0.1 + 0.3 * rng.random())
    run_variant(rng, "alibi+top_left", "float16", 1, 2, 2, 11, 7, 32, causal="top_left",
                alibi_slopes=slopes,
                score=lambda s, b, h, i, j: s - slopes.get((h,)) * abs(i + 7 - 11 - j),
                mask=lambda b, h, i, j: j <= i)
    # a bias broadcast over heads (B, 1, Nq, Nk), with packed documents
    bias = randn(rng, "bfloat16", (2, 1, 5, 8))
    qs, ks = segments(rng, 2, 5, 3), segments(rng, 2, 8, 3)
    run_variant(rng, "bias+document", "bfloat16", 2, 2, 1, 5, 8, 32, bias=bias,
                document_ids=(qs, ks),
                score=lambda s, b, h, i, j: s + bias.get((b, 0, i, j)),
                mask=lambda b, h, i, j: qs.get((b, i)) == ks.get((b, j)))
    # prefix-LM
    run_variant(rng, "prefix", "float32", 1, 1, 1, 10, 12, 32, prefix_len=4,
                mask=lambda b, h, i, j: j < 4 or j <= i + 12 - 10)
    # the caller's modifiers: a tensor and an int parameter
    temp = Tensor("float32", (3,))
    for h in range(3):
        temp.set((h,), 0.5 + rng.random())
    chunk = 4
    run_variant(rng, "score_mod+mask_mod", "float16", 1, 3, 1, 12, 12, 32,
                score_mod=SCORE_MOD, mask_mod=MASK_MOD, params={"temp": temp, "chunk": chunk},
                score=lambda s, b, h, i, j: s * temp.get((h,)),
                mask=lambda b, h, i, j: j // chunk <= i // chunk)

    q = Tensor("float16", (1, 1, 4, 32))
    bad = SCORE_MOD.replace("%out = mul", "%out = fooo")
    expect_error("malformed score_mod", kiln.ERR_INVALID,
                 lambda: kiln.attention(q, q, q, out=q, score_mod=bad, params={"temp": temp}),
                 "<mods>:7:")
    expect_error("missing modifier parameter", kiln.ERR_INVALID,
                 lambda: kiln.attention(q, q, q, out=Tensor("float16", (1, 1, 4, 32)),
                                        mask_mod=MASK_MOD), "%chunk (i32) has no value")
    expect_error("alibi_slopes shape", kiln.ERR_INVALID,
                 lambda: kiln.attention(q, q, q, out=Tensor("float16", (1, 1, 4, 32)),
                                        alibi_slopes=Tensor("float32", (3,))), "alibi_slopes")
    expect_error("causal 5", kiln.ERR_INVALID,
                 lambda: kiln.attention(q, q, q, out=Tensor("float16", (1, 1, 4, 32)),
                                        causal=5), "causal")


def varlen(rng):
    """attention_varlen against a float64 reference run sequence by sequence: ragged lengths
    with an empty sequence and length 1, GQA, causal both ways, a window, lse, fp8 inputs
    (float8_e4m3fn q, k, v with descales per kv head); then its errors"""
    for dtype, lq, lk, causal, window, f8 in (
            ("float32", [1, 5, 0, 9], [1, 7, 3, 9], True, None, False),
            ("float16", [4, 0, 17], [2, 6, 20], "top_left", None, False),
            ("float32", [6, 11], [9, 11], False, (3, 1), False),
            ("float16", [3, 0, 12], [5, 2, 12], True, None, True)):
        B, H, HK, D = len(lq), 2, 1, 16
        cq, ck = [0], [0]
        for a, b in zip(lq, lk):
            cq.append(cq[-1] + a)
            ck.append(ck[-1] + b)
        Tq, Tk = cq[-1], ck[-1]
        descales = {}
        if f8:  # the same descale for every sequence: an element's kv head decides it
            ds = [Tensor("float32", (B, HK)) for _ in range(3)]
            for w, t in enumerate(ds):
                for idx in indices((B, HK)):
                    t.set(idx, (1 + 0.25 * w) * 4 / 448)
            q = F8Tensor((Tq, H, D), ds[0], 1, H // HK, batch_axis=None)
            k = F8Tensor((Tk, HK, D), ds[1], 1, batch_axis=None)
            v = F8Tensor((Tk, HK, D), ds[2], 1, batch_axis=None)
            for t in (q, k, v):
                for idx in indices(t.shape):
                    t.set(idx, rng.gauss(0, 1))
            descales = dict(q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
        else:
            q, k, v = (randn(rng, dtype, (Tq, H, D)), randn(rng, dtype, (Tk, HK, D)),
                       randn(rng, dtype, (Tk, HK, D)))
        out, lse = Tensor(dtype, (Tq, H, D)), Tensor("float32", (H, Tq))
        cu_q, cu_k = Tensor("int32", (B + 1,)), Tensor("int32", (B + 1,))
        for i in range(B + 1):
            cu_q.set((i,), cq[i])
            cu_k.set((i,), ck[i])
        kiln.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                              window_size=window or (-1, -1), out=out, lse=lse, **descales)
        err = lerr = 0.0
        for b in range(B):
            nq, nk = lq[b], lk[b]
            for h in range(H):
                for i in range(nq):
                    diag = i + (nk - nq if causal != "top_left" else 0)
                    js = [j for j in range(nk) if (not causal or j <= diag) and
                          (window is None or -window[0] <= j - (i + nk - nq) <= window[1])]
                    s = [sum(q.get((cq[b] + i, h, d)) * k.get((ck[b] + j, h // (H // HK), d))
                             for d in range(D)) / math.sqrt(D) for j in js]
                    m = max(s) if s else -math.inf
                    p = [math.exp(x - m) for x in s]
                    l = sum(p)
                    for d in range(D):
                        want = sum(p[n] * v.get((ck[b] + j, h // (H // HK), d))
                                   for n, j in enumerate(js)) / l if s else 0.0
                        err = max(err, abs(out.get((cq[b] + i, h, d)) - want))
                    want = m + math.log(l) if s else -math.inf
                    got = lse.get((h, cq[b] + i))
                    lerr = max(lerr, 0.0 if got == want else abs(got - want))
        check("varlen %s%s lens %s/%s causal %s window %s"
              % (dtype, " from float8_e4m3fn" if f8 else "", lq, lk, causal, window),
              err <= TOL[dtype] and lerr <= LSE_TOL, "err %.3g lse %.3g" % (err, lerr))
    q = randn(rng, "float32", (5, 2, 16))
    kv = randn(rng, "float32", (5, 1, 16))
    cu = Tensor("int32", (3,))
    for i, x in enumerate((0, 2, 5)):
        cu.set((i,), x)
    small = Tensor("float32", (5, 2, 16))
    small.buf = (ctypes.c_float * 100)()  # holds less than its shape says
    expect_error("varlen: out too small", kiln.ERR_INVALID,
                 lambda: kiln.attention_varlen(q, kv, kv, cu, cu, 3, 3, out=small), "o holds")
    bad = Tensor("int32", (3,))
    for i, x in enumerate((0, 4, 2)):
        bad.set((i,), x)
    expect_error("varlen: decreasing cu_seqlens", kiln.ERR_INVALID,
                 lambda: kiln.attention_varlen(q, kv, kv, bad, cu, 4, 3,
                                               out=Tensor("float32", (5, 2, 16))),
                 "cu_seqlens_q[1..2]")
    expect_error("varlen: dropout_p 1.5", kiln.ERR_INVALID,
                 lambda: kiln.attention_varlen(q, kv, kv, cu, cu, 3, 3, dropout_p=1.5, seed=1,
                                               out=Tensor("float32", (5, 2, 16))),
                 "not a probability")


M32 = (1 << 32) - 1


def philox4x32_10(ctr, key):
    """Philox 4x32-10 (Salmon et al., SC 2011), written here from the paper for the reference"""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & M32, (p0 >> 32) ^ c3 ^ k1, p0 & M32
    return c0, c1, c2, c3


def dropout_scale(p, seed, offset, bh, i, j):
    """Z of pair (i, j) of query head bh: 1 / (1 - p) when kept, else 0 (attention.h)"""
    pf = struct.unpack("<f", struct.pack("<f", p))[0]  # the descriptor's float
    o = (offset + bh) & ((1 << 64) - 1)
    x = philox4x32_10((j, i, o & M32, o >> 32), (seed & M32, seed >> 32))[0]
    return 1 / (1 - pf) if x >= math.floor(pf * 2.0 ** 32) else 0.0


def reference_backward(q, k, v, dout, causal, scale, cap=0.0, drop=None):
    """float64 dq, dk, dv of sum(O * dO) and O (causal bottom-right; cap: softcap's
    c tanh(s / c); drop: dropout's (p, seed, offset))"""
    B, H, Nq, D = q.shape
    HK, Nk = k.shape[1], k.shape[2]
    dq, dk, dv, out = {}, {}, {}, {}
    for idx in indices(q.shape):
        dq[idx] = out[idx] = 0.0
    for idx in indices(k.shape):
        dk[idx] = dv[idx] = 0.0
    for b in range(B):
        for h in range(H):
            hk = h // (H // HK)
            for i in range(Nq):
                last = i + Nk - Nq if causal else Nk - 1
                js = list(range(min(last + 1, Nk)))
                if not js:
                    continue
                x = [sum(q.get((b, h, i, d)) * k.get((b, hk, j, d)) for d in range(D)) * scale
                     for j in js]
                z = [cap * math.tanh(t / cap) for t in x] if cap else x
                fp = [1 - math.tanh(t / cap) ** 2 for t in x] if cap else [1.0] * len(x)
                m = max(z)
                p = [math.exp(t - m) for t in z]
                l = sum(p)
                p = [t / l for t in p]
                zs = [dropout_scale(drop[0], drop[1], drop[2], b * H + h, i, j) if drop else 1.0
                      for j in js]
                o = [sum(p[n] * zs[n] * v.get((b, hk, j, d)) for n, j in enumerate(js))
                     for d in range(D)]
                for d in range(D):
                    out[(b, h, i, d)] = o[d]
                delta = sum(o[d] * dout.get((b, h, i, d)) for d in range(D))
                for n, j in enumerate(js):
                    dp = sum(dout.get((b, h, i, d)) * v.get((b, hk, j, d)) for d in range(D))
                    ds = p[n] * (dp * zs[n] - delta) * fp[n]
                    for d in range(D):
                        dq[(b, h, i, d)] += scale * ds * k.get((b, hk, j, d))
                        dk[(b, hk, j, d)] += scale * ds * q.get((b, h, i, d))
                        dv[(b, hk, j, d)] += p[n] * zs[n] * dout.get((b, h, i, d))
    return dq, dk, dv, out


def run_backward(rng, dtype, B, H, HK, Nq, Nk, D, causal, softcap=None, dropout_p=0.0):
    q = randn(rng, dtype, (B, H, Nq, D))
    k = randn(rng, dtype, (B, HK, Nk, D))
    v = randn(rng, dtype, (B, HK, Nk, D))
    dout = randn(rng, dtype, (B, H, Nq, D))
    out, lse = Tensor(dtype, (B, H, Nq, D)), Tensor("float32", (B, H, Nq))
    drop = dict(dropout_p=dropout_p, seed=rng.getrandbits(64), offset=rng.getrandbits(64)) \
        if dropout_p else {}
    kiln.attention(q, k, v, causal=causal, softcap=softcap, out=out, lse=lse, **drop)
    dq, dk, dv = Tensor(dtype, q.shape), Tensor(dtype, k.shape), Tensor(dtype, k.shape)
    delta = Tensor("float32", (B, H, Nq))
    r = kiln.attention_backward(q, k, v, out, lse, dout, causal=causal, softcap=softcap, dq=dq,
                                dk=dk, dv=dv, delta=delta, **drop)
    ref = reference_backward(q, k, v, dout, causal, 1 / math.sqrt(D), softcap or 0.0,
                             (dropout_p, drop["seed"], drop["offset"]) if drop else None)
    tol = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 6e-2}[dtype]
    errs = []
    for got, want in zip((dq, dk, dv, out), ref):
        big = max([abs(x) for x in want.values()] + [1.0])
        errs.append(max(abs(got.get(i) - want[i]) for i in want) / big)
    check("backward %s B%d H%d HK%d N(%d,%d) D%d causal=%d softcap=%s dropout=%g" %
          (dtype, B, H, HK, Nq, Nk, D, causal, softcap, dropout_p),
          r[0] is dq and r[1] is dk and all(e <= tol for e in errs),
          "rel errs dq %.2e dk %.2e dv %.2e out %.2e (tol %.0e)" % (errs[0], errs[1], errs[2],
                                                                   errs[3], tol))


def backward(rng):
    run_backward(rng, "float32", 1, 2, 1, 7, 5, 16, causal=True)
    run_backward(rng, "float16", 2, 2, 2, 9, 12, 24, causal=False)
    run_backward(rng, "bfloat16", 1, 4, 2, 6, 6, 16, causal=True, softcap=2.0)
    # dropout: the forward and the backward regenerate one mask from (seed, offset)
    run_backward(rng, "float32", 2, 4, 2, 9, 13, 16, causal=True, dropout_p=0.17)
    run_backward(rng, "float16", 1, 2, 2, 11, 7, 24, causal=False, dropout_p=0.17)
    q32 = randn(rng, "float32", (1, 1, 4, 16))
    o32, l32 = Tensor("float32", (1, 1, 4, 16)), Tensor("float32", (1, 1, 4))
    expect_error("backward dropout without the seed", kiln.ERR_INVALID,
                 lambda: kiln.attention_backward(q32, q32, q32, o32, l32, o32, dropout_p=0.1),
                 "needs the forward's seed")
    expect_error("dropout_p 1", kiln.ERR_INVALID,
                 lambda: kiln.attention(q32, q32, q32, dropout_p=1.0, seed=3, out=o32),
                 "not a probability")
    q = randn(rng, "float16", (1, 1, 4, 16))
    good = Tensor("float16", (1, 1, 4, 16))
    lse = Tensor("float32", (1, 1, 4))
    expect_error("backward dq shape", kiln.ERR_INVALID,
                 lambda: kiln.attention_backward(q, q, q, good, lse, good,
                                                 dq=Tensor("float16", (1, 1, 4, 8)), dk=good,
                                                 dv=good, delta=lse), "dq must be")
    expect_error("backward lse dtype", kiln.ERR_INVALID,
                 lambda: kiln.attention_backward(q, q, q, good, good, good, dq=good, dk=good,
                                                 dv=good, delta=lse), "lse must be float32")
    # atomic dQ (prepare_backward(dq="atomic")): the kernel says so in info(), and its backward
    # without the dq_accum workspace is refused (the ctypes mirrors of kiln.h's structs agree)
    ctx = kiln._contexts["host"]
    ka = ctx.prepare_backward("float16", 16, dq="atomic")
    kd = ctx.prepare_backward("float16", 16, dq="deterministic")
    check("backward atomic_dq info", ka.info()["atomic_dq"] and not kd.info()["atomic_dq"])
    expect_error("backward atomic without dq_accum", kiln.ERR_INVALID,
                 lambda: ka.backward(q.data_ptr(), q.data_ptr(), q.data_ptr(), good.data_ptr(),
                                     lse.data_ptr(), good.data_ptr(), good.data_ptr(),
                                     good.data_ptr(), good.data_ptr(), lse.data_ptr(), 1, 1, 1,
                                     4, 4), "null dq_accum")
    expect_error("backward dq mode", kiln.ERR_INVALID,
                 lambda: ctx.prepare_backward("float16", 16, dq="sometimes"), "not 'default'")


class SeqView:
    """sequence b of a packed (total, H, D) tensor as a (1, H, n, D) one (reference_backward's
    view of it)"""

    def __init__(self, t, start, n):
        self.t, self.start = t, start
        self.shape = (1, int(t.shape[1]), n, int(t.shape[2]))

    def get(self, idx):
        return self.t.get((self.start + idx[2], idx[1], idx[3]))


def varlen_backward(rng):
    """attention_varlen then attention_varlen_backward: dq, dk, dv (and O) against the float64
    backward of each sequence on its own (ragged lengths with an empty sequence and length 1,
    GQA, causal, softcap, dropout with the mask counted from each sequence's first token and
    query head b * H + h); tokens of no sequence stay unwritten; then its errors"""
    for dtype, lq, lk, causal, cap, p in (
            ("float32", [1, 5, 0, 9], [1, 7, 3, 9], True, None, 0.0),
            ("float16", [4, 0, 11], [6, 2, 13], False, 2.0, 0.0),
            ("float32", [7, 1, 10], [9, 4, 6], True, None, 0.17)):
        B, H, HK, D = len(lq), 4, 2, 16
        cq, ck = [0], [0]
        for a, b in zip(lq, lk):
            cq.append(cq[-1] + a)
            ck.append(ck[-1] + b)
        Tq, Tk = cq[-1] + 2, ck[-1] + 1  # a few tokens of no sequence at the end
        q, k, v = (randn(rng, dtype, (Tq, H, D)), randn(rng, dtype, (Tk, HK, D)),
                   randn(rng, dtype, (Tk, HK, D)))
        dout = randn(rng, dtype, (Tq, H, D))
        cu_q, cu_k = Tensor("int32", (B + 1,)), Tensor("int32", (B + 1,))
        for i in range(B + 1):
            cu_q.set((i,), cq[i])
            cu_k.set((i,), ck[i])
        drop = dict(dropout_p=p, seed=rng.getrandbits(64), offset=rng.getrandbits(64)) if p else {}
        out, lse = Tensor(dtype, (Tq, H, D)), Tensor("float32", (H, Tq))
        kiln.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                              softcap=cap or 0.0, out=out, lse=lse, **drop)
        dq, dk, dv = Tensor(dtype, q.shape), Tensor(dtype, k.shape), Tensor(dtype, k.shape)
        for t in (dq, dk, dv):
            for idx in indices(t.shape):
                t.set(idx, 1e4)  # tokens of no sequence keep it
        r = kiln.attention_varlen_backward(q, k, v, out, lse, dout, cu_q, cu_k, max(lq), max(lk),
                                           causal=causal, softcap=cap or 0.0, dq=dq, dk=dk,
                                           dv=dv, delta=Tensor("float32", (H, Tq)), **drop)
        tol = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 6e-2}[dtype]
        errs, big = [0.0] * 4, [1.0] * 4
        for b in range(B):
            views = [SeqView(q, cq[b], lq[b]), SeqView(k, ck[b], lk[b]), SeqView(v, ck[b], lk[b]),
                     SeqView(dout, cq[b], lq[b])]
            # the counter's query head is b * H + h: the offset of sequence b's view
            dr = (p, drop["seed"], drop["offset"] + b * H) if p else None
            ref = reference_backward(*views, causal, 1 / math.sqrt(D), cap or 0.0, dr)
            for w, (got, start) in enumerate(((dq, cq[b]), (dk, ck[b]), (dv, ck[b]),
                                              (out, cq[b]))):
                for (_, h, i, d), want in ref[w].items():
                    big[w] = max(big[w], abs(want))
                    errs[w] = max(errs[w], abs(got.get((start + i, h, d)) - want))
        untouched = all(t.get((i, h, d)) == 1e4 for t, first, n in
                        ((dq, cq[-1], Tq), (dk, ck[-1], Tk), (dv, ck[-1], Tk))
                        for i in range(first, n) for h in range(int(t.shape[1]))
                        for d in range(D))
        rel = [e / m for e, m in zip(errs, big)]
        check("varlen backward %s lens %s/%s causal %s softcap %s dropout %g"
              % (dtype, lq, lk, causal, cap, p),
              r[0] is dq and untouched and all(e <= tol for e in rel),
              "rel errs dq %.2e dk %.2e dv %.2e out %.2e (tol %.0e) padding untouched %s"
              % (rel[0], rel[1], rel[2], rel[3], tol, untouched))
    q = randn(rng, "float32", (5, 2, 16))
    kv = randn(rng, "float32", (5, 1, 16))
    cu = Tensor("int32", (3,))
    for i, x in enumerate((0, 2, 5)):
        cu.set((i,), x)
    o, l = Tensor("float32", (5, 2, 16)), Tensor("float32", (2, 5))
    expect_error("varlen backward dk shape", kiln.ERR_INVALID,
                 lambda: kiln.attention_varlen_backward(q, kv, kv, o, l, o, cu, cu, 3, 3,
                                                        dq=o, dk=o, dv=kv, delta=l),
                 "dk must be")
    expect_error("varlen backward lse shape", kiln.ERR_INVALID,
                 lambda: kiln.attention_varlen_backward(q, kv, kv, o, Tensor("float32", (1, 2, 5)),
                                                        o, cu, cu, 3, 3, dq=o, dk=kv, dv=kv,
                                                        delta=l), "lse must be float32")
    expect_error("varlen backward dropout without the seed", kiln.ERR_INVALID,
                 lambda: kiln.attention_varlen_backward(q, kv, kv, o, l, o, cu, cu, 3, 3,
                                                        dropout_p=0.1, dq=o, dk=kv, dv=kv,
                                                        delta=l), "needs the forward's seed")


def page_table(rng, lens, ps, spare):
    """a block table over shuffled pages for sequences of lens keys (pages of ps rows), one
    unused tail entry per sequence naming no page, `spare` pages no sequence uses: (bt, cs, MP,
    P)"""
    B = len(lens)
    need = [-(-n // ps) for n in lens]
    MP, P = max(need) + 1, sum(need) + spare
    pages = list(range(P))
    rng.shuffle(pages)
    bt, cs = Tensor("int32", (B, MP)), Tensor("int32", (B,))
    at = 0
    for b in range(B):
        for i in range(MP):
            bt.set((b, i), pages[at] if i < need[b] else 1000 + i)
            at += i < need[b]
    return bt, cs, MP, P


def paged(rng):
    """attention_with_kvcache against a float64 reference over each sequence's keys (the cache's
    then the appended ones): shuffled pages, unused tail entries, page sizes off the blocks"""
    for dtype, ps, lens, nn, Nq, causal, window in (
            ("float32", 5, [7, 0, 12], 2, 3, True, None),
            ("float16", 16, [40, 1], 1, 1, True, (8, 0)),
            ("float32", 1, [3, 6], 0, 4, False, None)):
        B, H, HK, D = len(lens), 4, 2, 16
        bt, cs, MP, P = page_table(rng, [n + nn for n in lens], ps, 2)
        for b in range(B):
            cs.set((b,), lens[b])
        kc, vc = randn(rng, dtype, (P, ps, HK, D)), randn(rng, dtype, (P, ps, HK, D))
        q = randn(rng, dtype, (B, Nq, H, D))
        kn = randn(rng, dtype, (B, nn, HK, D)) if nn else None
        vn = randn(rng, dtype, (B, nn, HK, D)) if nn else None

        def key(t, new, b, j, hk, d):  # key j of sequence b: the cache's, then the new rows
            if j >= lens[b]:
                return new.get((b, j - lens[b], hk, d))
            return t.get((bt.get((b, j // ps)), j % ps, hk, d))
        want_k = {(b, j, hk, d): key(kc, kn, b, j, hk, d) for b in range(B)
                  for j in range(lens[b] + nn) for hk in range(HK) for d in range(D)}
        want_v = {(b, j, hk, d): key(vc, vn, b, j, hk, d) for b in range(B)
                  for j in range(lens[b] + nn) for hk in range(HK) for d in range(D)}
        out, lse = Tensor(dtype, (B, Nq, H, D)), Tensor("float32", (B, H, Nq))
        st0 = kiln._context_for("host").stats()
        kiln.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=cs, block_table=bt,
                                    causal=causal, window_size=window or (-1, -1), out=out,
                                    lse=lse)
        st1 = kiln._context_for("host").stats()
        # Nq <= 16: the split-KV decode kernels read the pages (docs/serving.md), two kernels
        # beside the paged prefill kernel the descriptor prepares (each descriptor is new here)
        built = sum(st1[n] - st0[n] for n in ("compiles", "cache_hits"))
        check("paged %s Nq %d: decode kernels" % (dtype, Nq), built == 3,
              "%d kernels built or loaded" % built)
        err = lerr = 0.0
        for b in range(B):
            nk = lens[b] + nn
            for h in range(H):
                hk = h // (H // HK)
                for i in range(Nq):
                    diag = i + nk - Nq
                    js = [j for j in range(nk) if (not causal or j <= diag) and
                          (window is None or -window[0] <= j - diag <= window[1])]
                    s = [sum(q.get((b, i, h, d)) * want_k[(b, j, hk, d)] for d in range(D))
                         / math.sqrt(D) for j in js]
                    m = max(s) if s else -math.inf
                    p = [math.exp(x - m) for x in s]
                    l = sum(p)
                    for d in range(D):
                        want = sum(p[n] * want_v[(b, j, hk, d)] for n, j in enumerate(js)) / l \
                            if s else 0.0
                        err = max(err, abs(out.get((b, i, h, d)) - want))
                    want = m + math.log(l) if s else -math.inf
                    got = lse.get((b, h, i))
                    lerr = max(lerr, 0.0 if got == want else abs(got - want))
        check("paged %s page %d lens %s + %d causal %s window %s" % (dtype, ps, lens, nn, causal,
                                                                      window),
              err <= TOL[dtype] and lerr <= LSE_TOL, "err %.3g lse %.3g" % (err, lerr))
    # errors: a page outside the pool, a length past the table, rotary embeddings
    kc = randn(rng, "float32", (3, 4, 1, 16))
    q = randn(rng, "float32", (1, 1, 2, 16))
    bt, cs = Tensor("int32", (1, 2)), Tensor("int32", (1,))
    bt.set((0, 0), 2)
    bt.set((0, 1), 3)
    cs.set((0,), 6)
    expect_error("paged: page outside the pool", kiln.ERR_INVALID,
                 lambda: kiln.attention_with_kvcache(q, kc, kc, cache_seqlens=cs, block_table=bt,
                                                     out=Tensor("float32", (1, 1, 2, 16))),
                 "block_table[0, 1] = 3")
    cs.set((0,), 9)
    expect_error("paged: length past the table", kiln.ERR_INVALID,
                 lambda: kiln.attention_with_kvcache(q, kc, kc, cache_seqlens=cs, block_table=bt,
                                                     out=Tensor("float32", (1, 1, 2, 16))),
                 "cache_seqlens[0] = 9")
    expect_error("paged: rotary", kiln.ERR_UNSUPPORTED,
                 lambda: kiln.attention_with_kvcache(q, kc, kc, rotary_cos=q, cache_seqlens=cs,
                                                     block_table=bt), "rotary_cos")


def fp8(rng):
    """fp8 inputs: q, k, v in float8_e4m3fn (dense) and fp8 KV pages (attention_with_kvcache)"""
    B, H, HK, Nq, Nk, D = 2, 4, 2, 5, 9, 16
    ds = []
    for _ in range(3):
        t = Tensor("float32", (B, HK))
        for idx in indices((B, HK)):
            t.set(idx, rng.uniform(0.5, 1.5) * 4 / 448)
        ds.append(t)
    q = F8Tensor((B, H, Nq, D), ds[0], 1, H // HK)
    k, v = F8Tensor((B, HK, Nk, D), ds[1], 1), F8Tensor((B, HK, Nk, D), ds[2], 1)
    for t in (q, k, v):
        for idx in indices(t.shape):
            t.set(idx, rng.gauss(0, 1))
    out, lse = Tensor("float16", (B, H, Nq, D)), Tensor("float32", (B, H, Nq))
    kiln.attention(q, k, v, causal=True, out=out, lse=lse, q_descale=ds[0], k_descale=ds[1],
                   v_descale=ds[2])
    ro, rl = reference(q, k, v, True, 1 / math.sqrt(D))
    err = max(abs(out.get(i) - ro[i]) for i in ro)
    lerr = max(0.0 if lse.get(i) == rl[i] else abs(lse.get(i) - rl[i]) for i in rl)
    check("attention fp8 e4m3 q/k/v B%d H%d/%d N(%d,%d) causal" % (B, H, HK, Nq, Nk),
          err <= TOL["float16"] and lerr <= LSE_TOL, "max|dO| %.2e max|dlse| %.2e" % (err, lerr))
    # fp8 pages, an f16 q; the pool's descales per kv head (the same for every sequence)
    ps, lens, Nq = 4, [6, 0, 11], 2
    B = len(lens)
    bt, cs, MP, P = page_table(rng, lens, ps, 1)
    for b in range(B):
        cs.set((b,), lens[b])
    kd, vd = Tensor("float32", (B, HK)), Tensor("float32", (B, HK))
    for hk in range(HK):
        for b in range(B):
            kd.set((b, hk), (1 + hk) * 2 / 448)
            vd.set((b, hk), (2 - 0.5 * hk) * 2 / 448)
    kc = F8Tensor((P, ps, HK, D), kd, 2, batch_axis=None)
    vc = F8Tensor((P, ps, HK, D), vd, 2, batch_axis=None)
    for t in (kc, vc):
        for idx in indices(t.shape):
            t.set(idx, rng.gauss(0, 1))
    q = randn(rng, "float16", (B, Nq, H, D))
    out = Tensor("float16", (B, Nq, H, D))
    kiln.attention_with_kvcache(q, kc, vc, cache_seqlens=cs, block_table=bt, causal=True,
                                out=out, k_descale=kd, v_descale=vd)
    err = 0.0
    for b in range(B):
        for h in range(H):
            hk = h // (H // HK)
            for i in range(Nq):
                diag = i + lens[b] - Nq
                js = [j for j in range(lens[b]) if j <= diag]
                kv = lambda t, j, d: t.get((bt.get((b, j // ps)), j % ps, hk, d))
                s = [sum(q.get((b, i, h, d)) * kv(kc, j, d) for d in range(D)) / math.sqrt(D)
                     for j in js]
                m = max(s) if s else 0.0
                p = [math.exp(x - m) for x in s]
                for d in range(D):
                    want = sum(pj * kv(vc, j, d) for pj, j in zip(p, js)) / sum(p) if p else 0.0
                    err = max(err, abs(out.get((b, i, h, d)) - want))
    check("attention_with_kvcache fp8 e4m3 pages, f16 q", err <= TOL["float16"],
          "max|dO| %.2e" % err)
    a = Tensor("float16", (1, 1, 4, 16))
    expect_error("descale without fp8", kiln.ERR_INVALID,
                 lambda: kiln.attention(a, a, a, out=a, k_descale=kd), "not fp8")
    short = Tensor("float32", (B, HK))
    short.buf = (ctypes.c_float * (B * HK - 1))()  # one scale short of its (B, HK) shape
    expect_error("descale smaller than (B, HK)", kiln.ERR_INVALID,
                 lambda: kiln.attention_with_kvcache(q, kc, vc, cache_seqlens=cs, block_table=bt,
                                                     out=out, k_descale=kd, v_descale=short),
                 "v_descale holds 5 scales")


# ---- the plan cache (docs/api.md "The plan cache") ----

def padded(t, extra):
    """t with `extra` more elements of storage past its shape (its data kept): another storage
    size, so a plan that kept the first call's sizes would show"""
    buf = (type(t.buf)._type_ * (len(t.buf) + extra))()
    ctypes.memmove(buf, t.buf, ctypes.sizeof(t.buf))
    t.buf = buf
    return t


class Recorder:
    """kiln_forward replaced, while inside, by one that records what each call hands C (the
    kiln_attn_args bytes with mod_args zeroed, and the modifier arguments decoded: their arrays
    and names are made per call) and then runs the real one"""

    def __enter__(self):
        self.lib = kiln.library()
        self.real, self.calls = self.lib.kiln_forward, []

        def record(kern, pa, stream):
            a = kiln._AttnArgs.from_buffer_copy(pa._obj)
            margs = [(m.name, m.kind, m.i, m.f, m.p, m.bytes)
                     for m in (a.mod_args[i] for i in range(a.n_mod_args))]
            a.mod_args = None
            self.calls.append((kern.value, bytes(a), margs, stream))
            return self.real(kern, pa, stream)
        self.lib.kiln_forward = record
        return self

    def __exit__(self, *exc):
        self.lib.kiln_forward = self.real


def cache_delta(fn):
    """(hits, misses, size) the plan cache gained over fn()"""
    a = kiln.plan_cache_info()
    fn()
    b = kiln.plan_cache_info()
    return b["hits"] - a["hits"], b["misses"] - a["misses"], b["size"] - a["size"]


NUMEL_FIELDS = ("q", "k", "v", "o", "lse", "block_table", "k_new", "v_new", "q_descale",
                "k_descale", "v_descale")


def fields_ok(rec, fields):
    """the struct rec (a Recorder's call) holds fields ({kiln_attn_args field: tensor or int}):
    a tensor's address, and its storage's elements as the field's _numel where the binding
    passes one; an int as it is -- the binding's mapping written out independently"""
    a = kiln._AttnArgs.from_buffer_copy(rec[1])
    for n, x in fields.items():
        if isinstance(x, int):
            if getattr(a, n) != x:
                return "%s %d, not %d" % (n, getattr(a, n), x)
        elif getattr(a, n) != x.data_ptr():
            return "%s is not the tensor's address" % n
        elif n in NUMEL_FIELDS and getattr(a, n + "_numel") != len(x.buf):
            return "%s_numel %d, not %d" % (n, getattr(a, n + "_numel"), len(x.buf))
    return None


def same_as_uncached(name, make):
    """make(i) -> (call, outputs, fields) on tensors of its own (i = 1: other data, larger
    storages); the call with the cache off, then set 1's call (a miss: kept), then set 0's again
    (a hit) must hand C the same struct, byte for byte, holding fields (fields_ok), and write the
    same outputs"""
    call, outs, fields = make(0)
    other, _, other_fields = make(1)
    kiln.plan_cache_clear()
    kiln.set_plan_cache_size(0)
    with Recorder() as slow:
        call()
    want = [bytes(t.buf) for t in outs]
    kiln.set_plan_cache_size(256)
    for t in outs:
        ctypes.memset(t.buf, 0, ctypes.sizeof(t.buf))
    with Recorder() as fast:
        miss = cache_delta(other)
        hit = cache_delta(call)
    got = [bytes(t.buf) for t in outs]
    same = fast.calls[-1] == slow.calls[-1]
    bad = fields_ok(fast.calls[-1], fields) or fields_ok(fast.calls[0], other_fields)
    check("plan cache %s: a hit hands C what the uncached call does" % name,
          miss == (0, 1, 1) and hit == (1, 0, 0) and same and not bad and
          len(slow.calls) == 1 and got == want,
          "miss %s hit %s, struct %s, %s, outputs %s"
          % (miss, hit, "same" if same else "differs", bad or "fields right", got == want))


def dense_call(rng, dtype, B, H, HK, Nq, Nk, D, pad=0, bnhd=False, **kw):
    """(call, outputs, fields) of kiln.attention on fresh tensors; kw: its options, where a
    callable value is called with (rng, pad) for a tensor of its own"""
    q = padded(randn(rng, dtype, (B, H, Nq, D), bnhd), pad)
    k = padded(randn(rng, dtype, (B, HK, Nk, D), bnhd), pad)
    v = padded(randn(rng, dtype, (B, HK, Nk, D), bnhd), pad)
    out = padded(Tensor(dtype, (B, H, Nq, D)), pad)
    lse = padded(Tensor("float32", (B, H, Nq)), pad)
    kw = {n: x(rng, pad) if callable(x) else x for n, x in kw.items()}
    fields = dict(q=q, k=k, v=v, o=out, lse=lse)
    for n in ("alibi_slopes", "bias", "q_descale", "k_descale", "v_descale"):
        if n in kw:
            fields[n] = kw[n]
    if "document_ids" in kw:
        fields["q_seg"], fields["k_seg"] = kw["document_ids"]
    if "dropout_p" in kw:
        fields["dropout_seed"], fields["dropout_offset"] = kw["seed"], kw["offset"]
    return (lambda: kiln.attention(q, k, v, out=out, lse=lse, **kw)), [out, lse], fields


def plan_cache(rng):
    """the plan cache: hits hand C what the uncached path does (every slot refilled), each key
    field misses, errors are never kept, bounded, concurrent calls of several shapes"""
    # 1. hits against the uncached path, for every kind of call (kernels of the tests above)
    def slopes(r, pad):
        t = padded(Tensor("float32", (2,)), pad)
        for h in range(2):
            t.set((h,), 0.1 + 0.3 * r.random())
        return t
    same_as_uncached("f32 causal", lambda i: dense_call(rng, "float32", 1, 2, 1, 5, 7, 32, 3 * i,
                                                        causal=True))
    same_as_uncached("bf16 BNHD", lambda i: dense_call(rng, "bfloat16", 2, 2, 1, 3, 11, 32, i,
                                                       bnhd=True))
    same_as_uncached("window+softcap", lambda i: dense_call(
        rng, "float32", 1, 2, 1, 9, 13, 32, i, window_size=(3, 1), softcap=5.0))
    same_as_uncached("alibi+top_left", lambda i: dense_call(
        rng, "float16", 1, 2, 2, 11, 7, 32, i, causal="top_left", alibi_slopes=slopes))
    same_as_uncached("bias+document", lambda i: dense_call(
        rng, "bfloat16", 2, 2, 1, 5, 8, 32, i,
        bias=lambda r, pad: padded(randn(r, "bfloat16", (2, 1, 5, 8)), pad),
        document_ids=lambda r, pad: (padded(segments(r, 2, 5, 3), pad),
                                     padded(segments(r, 2, 8, 3), pad))))
    same_as_uncached("prefix", lambda i: dense_call(rng, "float32", 1, 1, 1, 10, 12, 32, i,
                                                    prefix_len=4))

    def temp(r, pad):
        t = padded(Tensor("float32", (3,)), pad)
        for h in range(3):
            t.set((h,), 0.5 + r.random())
        return t
    same_as_uncached("score_mod+mask_mod", lambda i: dense_call(
        rng, "float16", 1, 3, 1, 12, 12, 32, i, score_mod=SCORE_MOD, mask_mod=MASK_MOD,
        params=lambda r, pad: {"temp": temp(r, pad), "chunk": 4 + pad}))
    same_as_uncached("dropout", lambda i: dense_call(
        rng, "float32", 2, 4, 2, 9, 13, 16, i, causal=True, dropout_p=0.17,
        seed=rng.getrandbits(64), offset=rng.getrandbits(64)))

    def fp8_call(i):
        ds = [padded(Tensor("float32", (2, 2)), i) for _ in range(3)]
        for t in ds:
            for idx in indices((2, 2)):
                t.set(idx, rng.uniform(0.5, 1.5) * 4 / 448)
        q = F8Tensor((2, 4, 5, 16), ds[0], 1, 2)
        k, v = F8Tensor((2, 2, 9, 16), ds[1], 1), F8Tensor((2, 2, 9, 16), ds[2], 1)
        for t in (q, k, v):
            for idx in indices(t.shape):
                t.buf[t._off(idx)] = rng.randrange(0x78)  # finite e4m3 bytes
        out, lse = Tensor("float16", (2, 4, 5, 16)), Tensor("float32", (2, 4, 5))
        return (lambda: kiln.attention(q, k, v, causal=True, out=out, lse=lse, q_descale=ds[0],
                                       k_descale=ds[1], v_descale=ds[2])), [out, lse], \
            dict(q=q, k=k, v=v, o=out, lse=lse, q_descale=ds[0], k_descale=ds[1],
                 v_descale=ds[2])
    same_as_uncached("fp8 with descales", fp8_call)

    def varlen_call(i, cq=(0, 1, 6, 6, 15), ck=(0, 1, 8, 11, 20)):
        B, H, HK, D = len(cq) - 1, 2, 1, 16
        lq, lk = [b - a for a, b in zip(cq, cq[1:])], [b - a for a, b in zip(ck, ck[1:])]
        cu_q, cu_k = padded(Tensor("int32", (B + 1,)), i), padded(Tensor("int32", (B + 1,)), i)
        for b in range(B + 1):
            cu_q.set((b,), cq[b])
            cu_k.set((b,), ck[b])
        q = padded(randn(rng, "float32", (sum(lq), H, D)), i)
        k, v = (padded(randn(rng, "float32", (sum(lk), HK, D)), i) for _ in range(2))
        out, lse = padded(Tensor("float32", (sum(lq), H, D)), i), Tensor("float32", (H, sum(lq)))
        return (lambda: kiln.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True,
                                              out=out, lse=lse)), [out, lse], \
            dict(q=q, k=k, v=v, o=out, lse=lse, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    same_as_uncached("varlen", varlen_call)

    def paged_call(i):
        bt, cs, MP, P = page_table(rng, [9, 2, 14], 5, 2)  # the keys with the 2 new rows
        for b, n in enumerate((7, 0, 12)):
            cs.set((b,), n)
        kc, vc = (padded(randn(rng, "float32", (P, 5, 2, 16)), i) for _ in range(2))
        q = randn(rng, "float32", (3, 3, 4, 16))
        kn, vn = (padded(randn(rng, "float32", (3, 2, 2, 16)), i) for _ in range(2))
        out, lse = Tensor("float32", (3, 3, 4, 16)), Tensor("float32", (3, 4, 3))
        bt = padded(bt, i)
        return (lambda: kiln.attention_with_kvcache(q, kc, vc, kn, vn, cache_seqlens=cs,
                                                    block_table=bt, causal=True, out=out,
                                                    lse=lse)), [out, lse], \
            dict(q=q, k=kc, v=vc, o=out, lse=lse, block_table=bt, cache_seqlens=cs, k_new=kn,
                 v_new=vn)
    same_as_uncached("paged, new rows appended", paged_call)

    # 2. each key field misses, and the call it plans is right (against float64)
    wl, wr, cap = 3, 1, 5.0
    base = dict(window_size=(wl, wr), softcap=cap)
    q, k, v = (randn(rng, "float32", s) for s in ((1, 2, 9, 32), (1, 1, 13, 32), (1, 1, 13, 32)))
    out, lse = Tensor("float32", (1, 2, 9, 32)), Tensor("float32", (1, 2, 9))

    def right(q, k, v, out, causal=False, scale=None, w=(wl, wr), c=cap):
        Nq, Nk = q.shape[2], k.shape[2]
        ro, _ = reference(q, k, v, causal, scale or 1 / math.sqrt(32),
                          score=lambda s, b, h, i, j: c * math.tanh(s / c) if c else s,
                          mask=lambda b, h, i, j: -w[0] <= j - (i + Nk - Nq) <= w[1])
        return max(abs(out.get(i) - ro[i]) for i in ro) <= TOL[q.dtype]

    kiln.plan_cache_clear()
    first = cache_delta(lambda: kiln.attention(q, k, v, out=out, lse=lse, **base))
    again = cache_delta(lambda: kiln.attention(q, k, v, out=out, lse=lse, **base))
    check("plan cache: a repeated call hits", first == (0, 1, 1) and again == (1, 0, 0) and
          right(q, k, v, out), "first %s again %s" % (first, again))
    qb = randn(rng, "float32", (1, 2, 9, 32), bnhd=True)
    ob = Tensor("float32", (1, 9, 2, 32))
    ob.shape, ob._strides = (1, 2, 9, 32), (9 * 2 * 32, 32, 64, 1)  # (B, N, H, D) memory
    qs = randn(rng, "float32", (1, 2, 8, 32))
    q16, k16, v16 = (randn(rng, "float16", t.shape) for t in (q, k, v))
    o16 = Tensor("float16", out.shape)
    o8, l8 = Tensor("float32", (1, 2, 8, 32)), Tensor("float32", (1, 2, 8))
    for name, (tq, tk, tv, to, tl), kw, ok in (
            ("q's strides", (qb, k, v, out, lse), {}, None),
            ("out's strides", (q, k, v, ob, lse), {}, None),
            ("q's shape", (qs, k, v, o8, l8), {}, None),
            ("the dtype", (q16, k16, v16, o16, lse), {}, None),
            ("no lse", (q, k, v, out, None), {}, None),
            ("sm_scale", (q, k, v, out, lse), {"sm_scale": 0.3}, {"scale": 0.3}),
            ("sm_scale 0.3 -> 0.31", (q, k, v, out, lse), {"sm_scale": 0.31}, {"scale": 0.31}),
            ("the window", (q, k, v, out, lse), {"window_size": (3, 2)}, {"w": (3, 2)}),
            ("the window as a list", (q, k, v, out, lse), {"window_size": [3, 2]}, {"w": (3, 2)}),
            ("softcap", (q, k, v, out, lse), {"softcap": 4.0}, {"c": 4.0}),
            ("softcap 4 (an int)", (q, k, v, out, lse), {"softcap": 4}, {"c": 4.0}),
            ("causal", (q, k, v, out, lse), {"causal": True}, {"causal": True})):
        kw = dict(base, **kw)
        d = cache_delta(lambda: kiln.attention(tq, tk, tv, out=to, lse=tl, **kw))
        check("plan cache: %s misses" % name,
              d == (0, 1, 1) and right(tq, tk, tv, to, **(ok or {})), "delta %s" % (d,))
    # the context: a plan of another context is not used
    saved = kiln._contexts["host"]
    kiln._contexts["host"] = kiln.Context(device="host")
    try:
        d = cache_delta(lambda: kiln.attention(q, k, v, out=out, lse=lse, **base))
        check("plan cache: another context replans", d[0] == 0 and right(q, k, v, out),
              "delta %s" % (d,))
    finally:
        kiln._contexts["host"].close()
        kiln._contexts["host"] = saved
    # an option that is no plain value is not cached, and still right
    d = cache_delta(lambda: kiln.attention(q, k, v, out=out, lse=lse, sm_scale=Fraction(1, 3),
                                           **base))
    check("plan cache: a Fraction sm_scale is not kept", d == (0, 0, 0) and
          right(q, k, v, out, scale=1 / 3), "delta %s" % (d,))

    # 3. errors are never kept; a hit's data errors are the uncached call's
    def twice(name, status, fn, needle):
        d = cache_delta(lambda: (expect_error(name, status, fn, needle),
                                 expect_error(name + " (again)", status, fn, needle)))
        check("plan cache: %s is not kept" % name, d[0] == 0 and d[2] == 0, "delta %s" % (d,))
    kiln.attention(q, k, v, out=out, lse=lse, **base)
    xla = randn(rng, "float32", (1, 2, 9, 32))
    xla.device = type("Xla", (), {"type": "xla", "index": None})()
    twice("a device kiln does not run", kiln.ERR_UNSUPPORTED,
          lambda: kiln.attention(xla, k, v, out=out, lse=lse, **base), "device 'xla'")
    twice("k of another dtype", kiln.ERR_INVALID,
          lambda: kiln.attention(q, k16, v, out=out, lse=lse, **base), "k has dtype float16")
    g, h = Tensor("float32", (1, 3, 9, 32)), Tensor("float32", (1, 2, 13, 32))
    twice("heads not a multiple (kiln_forward's check)", kiln.ERR_INVALID,
          lambda: kiln.attention(g, h, h, out=Tensor("float32", (1, 3, 9, 32)), **base),
          "multiple of kv_heads")
    raised = []
    for _ in range(2):  # not the plan of the same call without document_ids
        try:
            kiln.attention(q, k, v, out=out, lse=lse, document_ids=[q, q, q], **base)
            raised.append("no error")
        except Exception as e:
            raised.append(type(e).__name__)
    check("plan cache: document_ids of three entries", raised == ["ValueError"] * 2,
          "%s" % raised)
    small = Tensor("float32", (1, 2, 9, 32))
    small.buf = (ctypes.c_float * 100)()
    kiln.set_plan_cache_size(0)  # (which forgets every plan)
    try:
        kiln.attention(q, k, v, out=small, lse=lse, **base)
    except kiln.KilnError as e:
        want = e.message
    kiln.set_plan_cache_size(256)
    kiln.attention(q, k, v, out=out, lse=lse, **base)
    d = cache_delta(lambda: expect_error("plan cache: a hit on a too small out", kiln.ERR_INVALID,
                                         lambda: kiln.attention(q, k, v, out=small, lse=lse,
                                                                **base), want))
    check("plan cache: that was a hit", d == (1, 0, 0), "delta %s" % (d,))
    bad = varlen_call(0, cq=(0, 6, 1, 6, 15))[0]  # cu_seqlens_q decreasing at [1..2]
    kiln.set_plan_cache_size(0)
    try:
        bad()
        want = "no error"
    except kiln.KilnError as e:
        want = e.message
    kiln.set_plan_cache_size(256)
    varlen_call(0)[0]()  # kept: the same shapes, good lengths
    d = cache_delta(lambda: expect_error("plan cache: a hit on decreasing cu_seqlens",
                                         kiln.ERR_INVALID, bad, want))
    check("plan cache: decreasing cu_seqlens was a hit", d == (1, 0, 0) and
          "cu_seqlens_q[1..2]" in want, "delta %s, %s" % (d, want))

    # 4. bounded: the least recently used plan goes first
    kiln.plan_cache_clear()
    kiln.set_plan_cache_size(2)
    for sc in (0.1, 0.2, 0.1, 0.3):  # 0.2 is the least recent when 0.3 comes
        kiln.attention(q, k, v, out=out, lse=lse, sm_scale=sc, **base)
    d1 = cache_delta(lambda: kiln.attention(q, k, v, out=out, lse=lse, sm_scale=0.1, **base))
    d2 = cache_delta(lambda: kiln.attention(q, k, v, out=out, lse=lse, sm_scale=0.2, **base))
    info = kiln.plan_cache_info()
    check("plan cache: bounded LRU", d1 == (1, 0, 0) and d2 == (0, 1, 0) and info["size"] == 2,
          "0.1 %s, 0.2 %s, %s" % (d1, d2, info))
    expect_error("plan cache size -1", kiln.ERR_INVALID, lambda: kiln.set_plan_cache_size(-1),
                 "negative")

    # 5. threads: concurrent calls of three shapes (two threads each), the cache large and tiny
    shapes = [(9, 13), (5, 7), (12, 12)]
    work = []
    for t in range(6):
        nq, nk = shapes[t % 3]
        tq, tk, tv = (randn(rng, "float32", s) for s in ((1, 2, nq, 32), (1, 1, nk, 32),
                                                          (1, 1, nk, 32)))
        to, tl = Tensor("float32", (1, 2, nq, 32)), Tensor("float32", (1, 2, nq))
        kiln.attention(tq, tk, tv, out=to, lse=tl, **base)
        work.append((tq, tk, tv, to, tl, bytes(to.buf) + bytes(tl.buf)))
    for size in (256, 1):
        kiln.plan_cache_clear()
        kiln.set_plan_cache_size(size)
        bad = []

        def worker(tq, tk, tv, to, tl, want):
            for _ in range(40):
                ctypes.memset(to.buf, 0, ctypes.sizeof(to.buf))
                kiln.attention(tq, tk, tv, out=to, lse=tl, **base)
                if bytes(to.buf) + bytes(tl.buf) != want:
                    bad.append(tq.shape)
        threads = [threading.Thread(target=worker, args=w) for w in work]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        info = kiln.plan_cache_info()
        check("plan cache: 6 threads x 40 calls, 3 shapes, cache of %d" % size,
              not bad and info["hits"] + info["misses"] == 240 and info["size"] <= size,
              "%d wrong, %s" % (len(bad), info))
    kiln.set_plan_cache_size(256)


def expect_error(name, status, fn, needle=""):
    try:
        fn()
    except kiln.KilnError as e:
        check(name, e.status == status and needle in e.message,
              "%s: %s" % (e.status_name, e.message))
        return
    check(name, False, "no KilnError raised")


def main():
    cache = tempfile.mkdtemp(prefix="kiln-py-")
    os.environ["KILN_CACHE_DIR"] = cache
    seed = int(os.environ.get("KILN_TEST_SEED", "7"))
    rng = random.Random(seed)
    print("libkiln: %s, seed %d" % (kiln.library()._name, seed))

    run_case(rng, "float32", 1, 2, 1, 5, 7, 32, causal=True, with_lse=True)
    run_case(rng, "float16", 1, 2, 2, 9, 4, 32, causal=True, with_lse=True)  # rows see no key
    run_case(rng, "bfloat16", 2, 2, 1, 3, 11, 32, causal=False, with_lse=False, bnhd=True)
    run_case(rng, "float16", 1, 1, 1, 17, 17, 48, causal=False, with_lse=True, scale=0.3)
    variants(rng)
    varlen(rng)
    backward(rng)
    varlen_backward(rng)
    paged(rng)
    fp8(rng)
    plan_cache(rng)

    # the low-level API: one context, memo, info, stats
    with kiln.Context(device="host", cache_dir=cache) as ctx:
        k1 = ctx.prepare("float16", 64, causal=True)
        k2 = ctx.prepare(kiln.F16, 64, causal=True)
        info = k1.info()
        st = ctx.stats()
        check("context", ctx.target == "host" and info["target"] == "host" and
              info["head_dim"] == 64 and info["causal"] and info["source"] in ("compiled", "cache")
              and st["prepares"] == 2 and st["memo_hits"] == 1 and k1._h.value == k2._h.value,
              "%s %s" % (info, st))
        # a forced tiling with warps: its own kernel (warps are part of the keys)
        k3 = ctx.prepare("float16", 64, causal=True, block_m=32, block_n=32, warps=2)
        i3 = k3.info()
        check("forced warps", i3["warps"] == 2 and i3["block_m"] == 32 and
              k3._h.value != k1._h.value, "%s" % i3)
        check("info wgmma", i3["wgmma"] is False, "%s" % i3)
        # wgmma (kiln_prepare_options.wgmma, the struct's last field) is sm_90a's: refused here
        expect_error("wgmma on host", kiln.ERR_UNSUPPORTED,
                     lambda: ctx.prepare("float16", 64, wgmma=True), "wgmma is not available")

    # errors: Python-side checks and the C library's statuses, both as KilnError
    f64 = Tensor("float32", (1, 1, 4, 32))
    f64.dtype = "float64"
    expect_error("bad dtype", kiln.ERR_UNSUPPORTED, lambda: kiln.attention(f64, f64, f64),
                 "float64")
    a = Tensor("float16", (1, 1, 4, 32))
    b = Tensor("float16", (1, 1, 4, 16))
    expect_error("shape mismatch", kiln.ERR_INVALID,
                 lambda: kiln.attention(a, b, b, out=a), "expected")
    c = Tensor("float16", (1, 1, 4, 600))
    expect_error("head dim 600", kiln.ERR_UNSUPPORTED, lambda: kiln.attention(c, c, c, out=c),
                 "head dim 600")
    g = Tensor("float16", (1, 3, 4, 32))
    h = Tensor("float16", (1, 2, 4, 32))
    expect_error("heads not a multiple", kiln.ERR_INVALID,
                 lambda: kiln.attention(g, h, h, out=Tensor("float16", (1, 3, 4, 32))),
                 "multiple of kv_heads")
    try:
        kiln.Context(device="cuda", no_cache=True).close()
        print("SKIP no-device (a CUDA device is present)")
    except kiln.KilnError as e:
        check("no CUDA device", e.status == kiln.ERR_NO_DEVICE, e.message)
    expect_error("unknown device", kiln.ERR_NO_DEVICE, lambda: kiln.Context(device="tpu"), "tpu")

    # AOT bundles (docs/aot.md): a malformed index refuses the context with its line:col; a
    # bundle holds GPU kernels only, so on the host bundle_only refuses every descriptor
    bundle = os.path.join(cache, "bundle")
    os.mkdir(bundle)
    with open(os.path.join(bundle, "index.kiln"), "w") as f:
        f.write("kiln-aot-index 1\nentry name=x colour=red\n")
    expect_error("malformed bundle index", kiln.ERR_IO,
                 lambda: kiln.Context(device="host", no_cache=True, bundle=bundle),
                 "index.kiln:2:14: unknown field 'colour'")
    with open(os.path.join(bundle, "index.kiln"), "w") as f:
        f.write("kiln-aot-index 1\n")
    with kiln.Context(device="host", no_cache=True, bundle=bundle, bundle_only=True) as bctx:
        expect_error("bundle_only without the kernel", kiln.ERR_UNSUPPORTED,
                     lambda: bctx.prepare("float16", 64), "has no kernel for [dtype=f16;d=64")

    for root, dirs, files in os.walk(cache, topdown=False):
        for f in files:
            os.remove(os.path.join(root, f))
        for d in dirs:
            os.rmdir(os.path.join(root, d))
    os.rmdir(cache)
    print("python_binding: %d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
