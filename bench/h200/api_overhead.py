#!/usr/bin/env python3
"""api_overhead.py — the host cost of one attention call, kiln's Python binding vs SDPA (issue 15).

At N = 1024 the forward table's times are flat across the mask and noisy (spread 0.5-1.0 of the
median), as if the host, not the GPU, set the pace.  This measures the host side alone:

  - per-call wall time of a call whose GPU work is tiny (B 1, H 1, N 64, D 64), 2000 calls after
    a warm-up, the GPU queue never waited on: kiln.attention (the public API, through its plan
    cache, docs/api.md "The plan cache"), the prepared Kernel.forward on raw addresses,
    Context.prepare alone, kiln.attention with the plan cache off (every call planned), and
    with the C kiln_forward replaced by a no-op (the Python side alone; out given or made;
    cache on and off), SDPA flash and cuDNN;
  - the same at the table's B 4 x H 32 x N 1024 x D 64, by CUDA events over 200 back-to-back
    calls (the GPU's time per call when the host keeps ahead) and by wall time per call;
  - a cProfile of kiln.attention's Python frames (top 12 by own time).

Run with the pack's binding (device_run.sh step `overhead`).  Not a test: figures only.
"""
import cProfile
import io
import pstats
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import kiln


def wall_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def gpu_us(fn, n=200):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3


def sdpa(backend, q, k, v, causal):
    def f():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return f


def main():
    dev = torch.device("cuda")
    print(f"# device: {torch.cuda.get_device_name()}; torch {torch.__version__}; python "
          f"{sys.version.split()[0]}")
    for (B, H, N, D) in ((1, 1, 64, 64), (4, 32, 1024, 64), (4, 32, 1024, 128)):
        for causal in (False, True):
            q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=torch.float16) for _ in range(3))
            o = torch.empty_like(q)
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            err = ((kiln.attention(q, k, v, causal=causal).float() - ref).norm() / ref.norm()).item()
            ctx = kiln._context_for("cuda:0")
            kern = ctx.prepare("float16", D, causal=causal, seqlen=N)
            stream = torch.cuda.current_stream().cuda_stream or None
            ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
            cases = [
                ("kiln.attention", lambda: kiln.attention(q, k, v, causal=causal)),
                ("kiln.attention(out=)", lambda: kiln.attention(q, k, v, causal=causal, out=o)),
                ("Kernel.forward", lambda: kern.forward(*ptrs, B, H, H, N, N, stream=stream)),
                ("Context.prepare", lambda: ctx.prepare("float16", D, causal=causal, seqlen=N)),
                ("SDPA flash", sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal)),
                ("SDPA cuDNN", sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)),
            ]
            print(f"\n## B {B} H {H} N {N} D {D} causal {int(causal)} (kiln rel err {err:.1e})")
            print("| call | wall us / call | GPU us / call (events over 200 calls) |")
            print("|---|---|---|")
            for name, fn in cases:
                try:
                    w = wall_us(fn)
                    g = gpu_us(fn) if name != "Context.prepare" else float("nan")
                    print(f"| {name} | {w:.1f} | {g:.1f} |")
                except Exception as ex:  # a backend unavailable for this shape
                    print(f"| {name} | error: {str(ex).splitlines()[0][:80]} | |")
            kiln.set_plan_cache_size(0)
            try:
                w = wall_us(lambda: kiln.attention(q, k, v, causal=causal))
                g = gpu_us(lambda: kiln.attention(q, k, v, causal=causal))
            finally:
                kiln.set_plan_cache_size(256)
            print(f"| kiln.attention, plan cache off (every call planned) | {w:.1f} | {g:.1f} |")
            lib = kiln.library()
            real = lib.kiln_forward
            lib.kiln_forward = lambda *a: 0
            try:
                w = wall_us(lambda: kiln.attention(q, k, v, causal=causal))
                wo = wall_us(lambda: kiln.attention(q, k, v, causal=causal, out=o))
                kiln.set_plan_cache_size(0)
                w0 = wall_us(lambda: kiln.attention(q, k, v, causal=causal))
            finally:
                lib.kiln_forward = real
                kiln.set_plan_cache_size(256)
            print(f"| kiln.attention, C kiln_forward a no-op (Python alone) | {w:.1f} | |")
            print(f"| kiln.attention(out=), C kiln_forward a no-op (Python alone) | {wo:.1f} | |")
            print(f"| kiln.attention, C kiln_forward a no-op, plan cache off | {w0:.1f} | |")
    # where the Python time goes
    q, k, v = (torch.randn(1, 1, 64, 64, device=dev, dtype=torch.float16) for _ in range(3))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        kiln.attention(q, k, v)
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12)
    print("\n# cProfile of 2000 kiln.attention calls (B1 H1 N64 D64), by own time")
    print(s.getvalue())


if __name__ == "__main__":
    main()
