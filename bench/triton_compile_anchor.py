"""triton_compile_anchor.py — Triton's compile latency on this machine: the anchor for kiln's.

Compiles one FlashAttention-2 style forward kernel (written here for the comparison, in Triton's
Python DSL) for gfx942, gfx90a and sm_90 without a GPU (Triton compiles for any target it knows),
cold each time (a fresh cache directory per compile), and prints the median and min per target.
Needs `pip install triton==3.6.0`.  Usage: python3 bench/triton_compile_anchor.py [repeats [DIR]]
(with DIR, Triton's AMDGPU code objects are written there, for `kiln inspect`: triton_T.hsaco of
the single-loop kernel and triton_T_split.hsaco of attn_fwd_split, the causal loop split as the
Triton tutorial's kernel splits it, whose interior loop is the issue's loop anchor).
"""
import os, statistics, sys, tempfile, time

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def attn_fwd(Q, K, V, O, sm_scale, seqlen, stride_m, stride_h,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
             CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    base = head * stride_h
    q = tl.load(Q + base + rows[:, None] * stride_m + dims[None, :], mask=rows[:, None] < seqlen, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    hi = tl.minimum(seqlen, (pid_m + 1) * BLOCK_M) if CAUSAL else seqlen
    for n0 in range(0, hi, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        kt = tl.load(K + base + cols[None, :] * stride_m + dims[:, None], mask=cols[None, :] < seqlen, other=0.0)
        s = tl.dot(q, kt) * qk_scale
        valid = cols[None, :] < seqlen
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + cols[:, None] * stride_m + dims[None, :], mask=cols[:, None] < seqlen, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(O + base + rows[:, None] * stride_m + dims[None, :], out.to(tl.float16), mask=rows[:, None] < seqlen)


@triton.jit
def _attn_block(acc, l_i, m_i, q, K, V, base, stride_m, dims, rows, n0, qk_scale,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr):
    cols = n0 + tl.arange(0, BLOCK_N)
    k = tl.load(K + base + cols[:, None] * stride_m + dims[None, :])  # rows: 16-byte loads
    s = tl.dot(q, tl.trans(k)) * qk_scale
    if MASKED:
        s = tl.where(cols[None, :] <= rows[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    v = tl.load(V + base + cols[:, None] * stride_m + dims[None, :])
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return acc, l_i, m_new


@triton.jit
def attn_fwd_split(Q, K, V, O, sm_scale, seqlen, stride_m, stride_h,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                   CAUSAL: tl.constexpr):
    """causal with the loop split as the Triton tutorial's kernel does: the blocks below the
    diagonal without any mask, then the diagonal's blocks with the causal mask (seqlen a
    multiple of the blocks: no bound masks)"""
    pid_m = tl.program_id(0)
    head = tl.program_id(1)
    stride_m = tl.multiple_of(stride_m, 16)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    base = head * stride_h
    q = tl.load(Q + base + rows[:, None] * stride_m + dims[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    for n0 in range(0, pid_m * BLOCK_M, BLOCK_N):
        acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, K, V, base, stride_m, dims, rows, n0,
                                    qk_scale, BLOCK_N, False)
    for n0 in range(pid_m * BLOCK_M, (pid_m + 1) * BLOCK_M, BLOCK_N):
        acc, l_i, m_i = _attn_block(acc, l_i, m_i, q, K, V, base, stride_m, dims, rows, n0,
                                    qk_scale, BLOCK_N, True)
    out = acc / l_i[:, None]
    tl.store(O + base + rows[:, None] * stride_m + dims[None, :], out.to(tl.float16))


def compile_once(target, causal, fn=None, options=None):
    src = ASTSource(
        fn=fn or attn_fwd,
        signature={"Q": "*fp16", "K": "*fp16", "V": "*fp16", "O": "*fp16", "sm_scale": "fp32",
                   "seqlen": "i32", "stride_m": "i32", "stride_h": "i32",
                   "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "HEAD_DIM": "constexpr",
                   "CAUSAL": "constexpr"},
        constexprs={"BLOCK_M": 128, "BLOCK_N": 64, "HEAD_DIM": 128, "CAUSAL": causal},
        # what Triton's launcher specializes for real tensors: 16-byte aligned pointers and
        # strides divisible by 16 (tt.divisibility), so its loads can be vectorized
        attrs={(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 6, 7)},
    )
    with tempfile.TemporaryDirectory() as d:
        os.environ["TRITON_CACHE_DIR"] = d
        t0 = time.perf_counter()
        k = triton.compile(src, target=target, options=options or {"num_warps": 4})
        return time.perf_counter() - t0, k


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    hsaco_dir = sys.argv[2] if len(sys.argv) > 2 else None  # keep Triton's code objects there
    targets = [("gfx942", GPUTarget("hip", "gfx942", 64)), ("gfx90a", GPUTarget("hip", "gfx90a", 64)),
               ("sm_90", GPUTarget("cuda", 90, 32))]
    print(f"triton {triton.__version__}, attention fwd BLOCK 128x64 D 128 f16 causal, 4 warps, "
          f"{os.cpu_count()} CPUs")
    for name, tgt in targets:
        try:
            _, k = compile_once(tgt, True)  # warm Python imports and the backend once
            if hsaco_dir and "hsaco" in k.asm:
                with open(os.path.join(hsaco_dir, f"triton_{name}.hsaco"), "wb") as f:
                    f.write(k.asm["hsaco"])
                # the split-loop kernel too (the loop anchor): its interior loop, with
                # the AMD tuning of the Triton tutorial (2 waves per EU; 1: 352 VGPRs, 996 cycles)
                _, ks = compile_once(tgt, True, attn_fwd_split, {"num_warps": 4, "waves_per_eu": 2})
                with open(os.path.join(hsaco_dir, f"triton_{name}_split.hsaco"), "wb") as f:
                    f.write(ks.asm["hsaco"])
            ts = [compile_once(tgt, True)[0] for _ in range(repeats)]
            print(f"{name}: median {statistics.median(ts)*1e3:.0f} ms, min {min(ts)*1e3:.0f} ms "
                  f"over {repeats} cold compiles")
        except Exception as e:  # a backend missing on this machine: say so and go on
            print(f"{name}: failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    main()
