#!/usr/bin/env python3
"""py_overhead.py — the host cost of one kiln.attention call on the host device, no GPU, no torch.

The local counterpart of bench/h200/api_overhead.py: tensors are tests/python_binding.py's
duck-typed host Tensor (ctypes buffers), so the Python binding runs as on torch CPU tensors.
Per call, the wall time and the CPU time of the calling thread (each the best of 21 runs of
`--calls` calls, after a warm-up: on a shared machine the best run is the least disturbed; the
thread's CPU time leaves out the host kernel's worker threads, so for the real forward read the
wall time) of:

  - kiln.attention(q, k, v, out=o) with the C kiln_forward replaced by a no-op: the Python side
    alone, through the plan cache (docs/api.md "The plan cache") and with it off
    (set_plan_cache_size(0): every call planned, as before the cache);
  - the same for a variant call (window, softcap, ALiBi, an lse), attention_varlen and
    attention_with_kvcache;
  - kiln.attention through the real kiln_forward (the host kernel of the tiny shape), the
    prepared Kernel.forward on raw addresses, and Context.prepare alone (a memo hit).

usage: KILN_LIBRARY=build/api/libkiln.so python3 bench/py_overhead.py [--calls N] [--profile]
KILN_PYTHON=DIR: the kiln.py of DIR instead of python/ (another checkout's, to compare).
Not a test: figures only.
"""
import cProfile
import io
import os
import pstats
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tests"))
sys.path.insert(0, os.environ.get("KILN_PYTHON") or os.path.join(here, "..", "python"))
import kiln  # noqa: E402
from python_binding import Tensor as TestTensor  # noqa: E402


class Tensor(TestTensor):
    """the test's host tensor with its storage made once (the test's makes a class per call,
    which would dominate here; torch's is a C call) and torch's requires_grad"""
    requires_grad = False

    def __init__(self, *a, **kw):
        TestTensor.__init__(self, *a, **kw)
        self._storage = TestTensor.untyped_storage(self)

    def untyped_storage(self):
        return self._storage


def per_call_us(fn, calls, runs=21):
    """(wall, CPU time of this thread) per call in us, each the best of `runs` runs"""
    for _ in range(min(200, calls)):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(calls):
            fn()
        wall.append((time.perf_counter() - t0) / calls * 1e6)
        cpu.append((time.thread_time() - c0) / calls * 1e6)
    return min(wall), min(cpu)


class NoForward:
    """kiln_forward replaced by a no-op while inside (the Python side alone)"""

    def __enter__(self):
        lib = kiln.library()
        self.real, lib.kiln_forward = lib.kiln_forward, lambda *a: 0

    def __exit__(self, *exc):
        kiln.library().kiln_forward = self.real


def cache_off():
    """a context manager turning the plan cache off, or none where this kiln has no cache"""
    class Off:
        def __enter__(self):
            self.size = kiln.plan_cache_info()["maxsize"]
            kiln.set_plan_cache_size(0)

        def __exit__(self, *exc):
            kiln.set_plan_cache_size(self.size)
    return Off() if hasattr(kiln, "set_plan_cache_size") else None


def main():
    calls = int(sys.argv[sys.argv.index("--calls") + 1]) if "--calls" in sys.argv else 1000
    B, H, N, D = 1, 1, 64, 64
    q, k, v, o = (Tensor("float16", (B, H, N, D)) for _ in range(4))
    lse = Tensor("float32", (B, H, N))
    slopes = Tensor("float32", (H,))
    T = 3 * 16
    vq, vk, vv, vo = (Tensor("float16", (T, H, D)) for _ in range(4))
    cu = Tensor("int32", (4,))
    for i, x in enumerate((0, 16, 32, 48)):
        cu.set((i,), x)
    kc, vc = Tensor("float16", (8, 16, H, D)), Tensor("float16", (8, 16, H, D))
    pq, po = Tensor("float16", (2, 1, H, D)), Tensor("float16", (2, 1, H, D))
    bt, cs = Tensor("int32", (2, 4)), Tensor("int32", (2,))
    for b in range(2):
        cs.set((b,), 40)
        for i in range(4):
            bt.set((b, i), 4 * b + i)
    ctx = kiln._context_for("host")
    kern = ctx.prepare("float16", D, seqlen=N)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())
    plain = lambda: kiln.attention(q, k, v, out=o)  # noqa: E731
    variant = lambda: kiln.attention(q, k, v, out=o, lse=lse, window_size=(16, 0),  # noqa: E731
                                     softcap=30.0, alibi_slopes=slopes)
    varlen = lambda: kiln.attention_varlen(vq, vk, vv, cu, cu, 16, 16, out=vo)  # noqa: E731
    paged = lambda: kiln.attention_with_kvcache(pq, kc, vc, cache_seqlens=cs,  # noqa: E731
                                                block_table=bt, out=po)
    rows = []
    off = cache_off()
    for name, fn in (("attention(out=)", plain), ("attention, window+softcap+alibi+lse", variant),
                     ("attention_varlen(out=)", varlen), ("attention_with_kvcache(out=)", paged)):
        with NoForward():
            rows.append((name + ", C forward a no-op (Python alone)", per_call_us(fn, calls)))
            if off is not None:
                with off:
                    rows.append((name + ", C forward a no-op, plan cache off",
                                 per_call_us(fn, calls)))
    rows.append(("attention(out=), real host forward", per_call_us(plain, calls // 5)))
    rows.append(("Kernel.forward (prepared, raw addresses)",
                 per_call_us(lambda: kern.forward(*ptrs, B, H, H, N, N), calls // 5)))
    rows.append(("Context.prepare (memo hit)",
                 per_call_us(lambda: ctx.prepare("float16", D, seqlen=N), calls)))
    print("# python %s; kiln %s; B %d H %d N %d D %d f16 on the host; best of 21 x %d calls"
          % (sys.version.split()[0], "with plan cache" if off else "without plan cache",
             B, H, N, D, calls))
    print("| call | wall us / call | CPU us / call (this thread) |\n|---|---|---|")
    for name, (wall, cpu) in rows:
        print("| %s | %.1f | %.1f |" % (name, wall, cpu))
    if "--profile" in sys.argv:
        pr = cProfile.Profile()
        with NoForward():
            pr.enable()
            for _ in range(calls):
                plain()
            pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(12)
        print(s.getvalue())


if __name__ == "__main__":
    main()
