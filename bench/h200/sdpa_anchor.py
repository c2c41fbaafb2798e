#!/usr/bin/env python3
"""sdpa_anchor.py — torch SDPA's flash (FA2) and cuDNN backends timed on the GPU at hand.

The anchor kiln's attention kernels are compared with, measured in the same device run
(bench/h200/device_run.sh) so that both see the same card, clocks and driver.  The shapes are
those of the H200 anchors of bench/RESULTS.md: batch 4, 32 heads, head dim 64 and 128, sequence
length 1k/4k/16k, causal off/on, f16 and bf16, forward only.

TFLOP/s counts 4*B*H*N*N*D (QK^T and PV, two flops a multiply-add), halved for causal.
Timing: CUDA events around each call after a warm-up, median of the repeats, rotating over
three input sets so that the small sizes do not run out of L2 alone.  Before timing, each
backend's output is compared with the math backend in float32 on a small slice
(||out - ref|| / ||ref||); a backend the build or the card lacks is reported "n/a" with the reason.

Prints a markdown table (one row per dtype, D, causal, N) and, with --csv, writes every number.

--decode: the decode table of bench/h200/kiln_decode_bench.c instead: one query row per sequence,
B {1, 16, 64} x Nk {4k, 32k, 128k}, 32 query heads on 8 kv heads (enable_gqa=True), D 128, f16;
TB/s counts the unique bytes of K and V (2 x B x 8 x Nk x 128 x 2), each backend checked first
against the float32 math backend on batch 1 (with the kv heads repeated).

--varlen FILE: the varlen prefill mix of bench/h200/kiln_serve_bench.c (the comma-separated
lengths it wrote to FILE): bf16, D 128, 32 query heads on 8 kv heads, causal, run by SDPA on the
padded batch (every sequence padded to the longest; enable_gqa=True), and, where this torch has
it, by torch.nn.attention.varlen.varlen_attn on the packed tokens.  TFLOP/s counts the useful
work, sum of 4 x H x L^2 x D / 2, as kiln_serve_bench does.

--kiln: the forward table gets a column for kiln as a user calls it: kiln.attention(q, k, v,
causal=...) through the Python binding (python/kiln.py on the libkiln.so that KILN_LIBRARY
names), on torch's current stream, at the API's default configuration (no tuning, no forced
tiling); checked and timed exactly like the SDPA backends, the first call (the JIT compile) kept
out of the timing by the warm-up.  The ratios kiln / FA2 and kiln / cuDNN come from the same run.
"""
import argparse
import csv
import math
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--seqlens", default="1024,4096,16384")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="N 1k/4k, 5 repeats (a smoke run)")
    p.add_argument("--csv", default=None, help="also write the results here")
    p.add_argument("--decode", action="store_true", help="the decode table (see above)")
    p.add_argument("--varlen", default=None, metavar="FILE", help="the varlen mix (see above)")
    p.add_argument("--kiln", action="store_true",
                   help="also time kiln.attention (the Python binding, its default config)")
    return p.parse_args()


def decode_table(args, torch, F, SDPBackend, sdpa_kernel):
    dev = torch.device("cuda")
    H, HK, D, dt = 32, 8, 128, torch.float16
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    Bs, Ns = ([1, 16], [4096, 32768]) if args.quick else ([1, 16, 64], [4096, 32768, 131072])
    rows = []

    def run(backend, q, k, v):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    for B in Bs:
        for N in Ns:
            gen = torch.Generator(device=dev).manual_seed(4321 + N + B)
            kv_bytes = 2 * B * HK * N * D * 2
            nsets = 1 if kv_bytes > (256 << 20) else 3
            sets = [(torch.randn(B, H, 1, D, device=dev, dtype=dt, generator=gen),
                     torch.randn(B, HK, N, D, device=dev, dtype=dt, generator=gen),
                     torch.randn(B, HK, N, D, device=dev, dtype=dt, generator=gen))
                    for _ in range(nsets)]
            q0, k0, v0 = (t[:1].float() for t in sets[0])
            with sdpa_kernel([SDPBackend.MATH]):
                ref = F.scaled_dot_product_attention(q0, k0.repeat_interleave(H // HK, 1),
                                                     v0.repeat_interleave(H // HK, 1))
            row = {"B": B, "N": N}
            for bname, backend in backends:
                try:
                    out = run(backend, *sets[0])
                    err = ((out[:1].float() - ref).norm() / ref.norm()).item()
                    for i in range(args.warmup):
                        run(backend, *sets[i % nsets])
                    torch.cuda.synchronize()
                    times = []
                    for i in range(args.repeats):
                        s, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                        s.record()
                        run(backend, *sets[i % nsets])
                        e.record()
                        times.append((s, e))
                    torch.cuda.synchronize()
                    ms = sorted(s.elapsed_time(e) for s, e in times)
                    med = ms[len(ms) // 2]
                    row[bname + "_ms"] = med
                    row[bname + "_tbs"] = kv_bytes / (med * 1e-3) / 1e12
                    row[bname + "_relerr"] = err
                except Exception as ex:
                    row[bname + "_tbs"] = math.nan
                    row[bname + "_error"] = str(ex).splitlines()[0][:120]
            rows.append(row)
            del sets
            torch.cuda.empty_cache()
            print(f"# done decode B={B} N={N}", flush=True)
    print()
    print("| B | Nk | SDPA flash ms | flash TB/s | SDPA cuDNN ms | cuDNN TB/s | rel err flash / cuDNN |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        def cell(b, k, f):
            x = r.get(b + k, math.nan)
            return "n/a" if math.isnan(x) else f.format(x)

        def err(b):
            return f"{r[b + '_relerr']:.1e}" if b + "_relerr" in r else "-"
        print(f"| {r['B']} | {r['N']} | {cell('flash', '_ms', '{:.4f}')} | "
              f"{cell('flash', '_tbs', '{:.2f}')} | {cell('cudnn', '_ms', '{:.4f}')} | "
              f"{cell('cudnn', '_tbs', '{:.2f}')} | {err('flash')} / {err('cudnn')} |")
    for r in rows:
        for b in ("flash", "cudnn"):
            if b + "_error" in r:
                print(f"# {b} n/a at decode B={r['B']} N={r['N']}: {r[b + '_error']}")
    if args.csv:
        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    bad = [r for r in rows for b in ("flash", "cudnn") if r.get(b + "_relerr", 0) > 2e-2]
    return 1 if bad else 0


def median_ms(torch, fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        s, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        s.record()
        fn()
        e.record()
        times.append((s, e))
    torch.cuda.synchronize()
    ms = sorted(s.elapsed_time(e) for s, e in times)
    return ms[len(ms) // 2]


def varlen_table(args, torch, F, SDPBackend, sdpa_kernel):
    dev = torch.device("cuda")
    H, HK, D, dt = 32, 8, 128, torch.bfloat16
    with open(args.varlen) as f:
        lens = [int(x) for x in f.read().strip().split(",")]
    B, N, T = len(lens), max(lens), sum(lens)
    useful = sum(4.0 * H * L * L * D * 0.5 for L in lens)
    gen = torch.Generator(device=dev).manual_seed(77)
    q = torch.randn(B, H, N, D, device=dev, dtype=dt, generator=gen)
    k = torch.randn(B, HK, N, D, device=dev, dtype=dt, generator=gen)
    v = torch.randn(B, HK, N, D, device=dev, dtype=dt, generator=gen)
    print(f"# varlen mix: {B} sequences, {T} tokens, longest {N}")
    rows = []
    # the reference for the check: the shortest non-trivial sequence on its own, float32 math
    i0 = min(range(B), key=lambda i: lens[i] if lens[i] > 1 else 1 << 30)
    L0 = lens[i0]
    with sdpa_kernel([SDPBackend.MATH]):
        ref = F.scaled_dot_product_attention(
            q[i0:i0 + 1, :, :L0].float(), k[i0:i0 + 1, :, :L0].float().repeat_interleave(H // HK, 1),
            v[i0:i0 + 1, :, :L0].float().repeat_interleave(H // HK, 1), is_causal=True)
    for bname, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def run():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        try:
            out = run()
            err = ((out[i0:i0 + 1, :, :L0].float() - ref).norm() / ref.norm()).item()
            ms = median_ms(torch, run, args.warmup, args.repeats)
            rows.append((f"SDPA {bname} on the padded batch ({B} x {N})", ms, err))
        except Exception as ex:
            rows.append((f"SDPA {bname} on the padded batch: n/a ({str(ex).splitlines()[0][:100]})",
                         math.nan, math.nan))
    try:
        from torch.nn.attention.varlen import varlen_attn
        qp = torch.cat([q[i, :, :L].transpose(0, 1) for i, L in enumerate(lens)])  # (T, H, D)
        kp = torch.cat([k[i, :, :L].transpose(0, 1) for i, L in enumerate(lens)])
        vp = torch.cat([v[i, :, :L].transpose(0, 1) for i, L in enumerate(lens)])
        kp, vp = kp.repeat_interleave(H // HK, 1), vp.repeat_interleave(H // HK, 1)
        cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(B)], device=dev, dtype=torch.int32)

        # causal: window_size=(-1, 0) in torch 2.10+, is_causal=True in 2.9
        causal_kw = {"window_size": (-1, 0)}

        def runv():
            return varlen_attn(qp, kp, vp, cu, cu, N, N, **causal_kw)
        try:
            out = runv()
        except TypeError:
            causal_kw = {"is_causal": True}
            out = runv()
        s0 = sum(lens[:i0])
        err = ((out[s0:s0 + L0].transpose(0, 1).unsqueeze(0).float() - ref).norm() / ref.norm()).item()
        ms = median_ms(torch, runv, args.warmup, args.repeats)
        rows.append(("torch varlen_attn on the packed tokens (kv heads repeated)", ms, err))
    except Exception as ex:
        rows.append((f"torch varlen_attn: n/a ({str(ex).splitlines()[0][:100]})", math.nan, math.nan))
    print()
    print("| call | ms | useful TFLOP/s | rel err |")
    print("|---|---|---|---|")
    for name, ms, err in rows:
        tf = "n/a" if math.isnan(ms) else f"{useful / (ms * 1e-3) / 1e12:.0f}"
        ms_s = "n/a" if math.isnan(ms) else f"{ms:.3f}"
        print(f"| {name} | {ms_s} | {tf} | {err:.1e} |")
    return 1 if any(e > 2e-2 for _, _, e in rows if not math.isnan(e)) else 0


def main():
    args = parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except Exception as e:  # no torch: nothing to anchor against
        print(f"# sdpa anchor skipped: cannot import torch ({e})")
        return 0
    if not torch.cuda.is_available():
        print("# sdpa anchor skipped: torch sees no CUDA device")
        return 0
    if args.quick:
        args.seqlens, args.repeats = "1024,4096", 5
    if args.varlen:
        props = torch.cuda.get_device_properties(0)
        print(f"# device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()} (varlen)")
        return varlen_table(args, torch, F, SDPBackend, sdpa_kernel)
    if args.decode:
        props = torch.cuda.get_device_properties(0)
        print(f"# device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()} (decode)")
        return decode_table(args, torch, F, SDPBackend, sdpa_kernel)

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"# device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    kiln = None
    if args.kiln:
        try:
            import kiln
            backends.append(("kiln", None))
            print(f"# kiln: {kiln.library()._name}")
        except Exception as e:  # the column says why
            print(f"# kiln column skipped: cannot load the binding ({e})")
    names = [b for b, _ in backends]
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16}
    B, H = args.batch, args.heads
    rows = []

    def run(backend, q, k, v, causal):
        if backend is None:
            return kiln.attention(q, k, v, causal=causal)
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    for dname in args.dtypes.split(","):
        dt = dtypes[dname]
        for D in (int(x) for x in args.head_dims.split(",")):
            for causal in (False, True):
                for N in (int(x) for x in args.seqlens.split(",")):
                    flops = 4.0 * B * H * N * N * D * (0.5 if causal else 1.0)
                    gen = torch.Generator(device=dev).manual_seed(1234 + N + D)
                    sets = [tuple(torch.randn(B, H, N, D, device=dev, dtype=dt, generator=gen)
                                  for _ in range(3)) for _ in range(3)]  # (q, k, v) x 3
                    # reference on one batch and two heads, float32 math backend
                    q0, k0, v0 = (t[:1, :2].float() for t in sets[0])
                    with sdpa_kernel([SDPBackend.MATH]):
                        ref = F.scaled_dot_product_attention(q0, k0, v0, is_causal=causal)
                    row = {"dtype": dname, "D": D, "causal": int(causal), "N": N}
                    for bname, backend in backends:
                        try:
                            out = run(backend, *sets[0], causal)
                            err = ((out[:1, :2].float() - ref).norm() / ref.norm()).item()
                            for i in range(args.warmup):
                                run(backend, *sets[i % 3], causal)
                            torch.cuda.synchronize()
                            times = []
                            for i in range(args.repeats):
                                s, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                                q, k, v = sets[i % 3]
                                s.record()
                                run(backend, q, k, v, causal)
                                e.record()
                                times.append((s, e))
                            torch.cuda.synchronize()
                            ms = sorted(s.elapsed_time(e) for s, e in times)
                            med = ms[len(ms) // 2]
                            row[bname + "_ms"] = med
                            row[bname + "_tflops"] = flops / (med * 1e-3) / 1e12
                            row[bname + "_relerr"] = err
                            row[bname + "_spread"] = (ms[-1] - ms[0]) / med
                        except Exception as ex:  # backend unavailable for this shape/card
                            row[bname + "_tflops"] = math.nan
                            row[bname + "_error"] = str(ex).splitlines()[0][:120]
                    rows.append(row)
                    del sets
                    torch.cuda.empty_cache()
                    print(f"# done {dname} D={D} causal={int(causal)} N={N}", flush=True)

    print()
    has_kiln = "kiln" in names
    print("| dtype | D | causal | N | SDPA flash TFLOP/s | SDPA cuDNN TFLOP/s |"
          + (" kiln (API default) TFLOP/s | kiln / FA2 | kiln / cuDNN |" if has_kiln else "")
          + " rel err " + " / ".join(names) + " |")
    print("|---|---|---|---|---|---|" + ("---|---|---|" if has_kiln else "") + "---|")
    for r in rows:
        def tf(b):
            return r.get(b + "_tflops", math.nan)

        def cell(b):
            return "n/a" if math.isnan(tf(b)) else f"{tf(b):.0f}"

        def ratio(a, b):
            x = tf(a) / tf(b) if tf(b) else math.nan
            return "n/a" if math.isnan(x) else f"{x:.2f}"

        def err(b):
            return f"{r[b + '_relerr']:.1e}" if b + "_relerr" in r else "-"
        kcols = (f" {cell('kiln')} | {ratio('kiln', 'flash')} | {ratio('kiln', 'cudnn')} |"
                 if has_kiln else "")
        print(f"| {r['dtype']} | {r['D']} | {'yes' if r['causal'] else 'no'} | {r['N']} | "
              f"{cell('flash')} | {cell('cudnn')} |{kcols} {' / '.join(err(b) for b in names)} |")
    for r in rows:
        for b in names:
            if b + "_error" in r:
                print(f"# {b} n/a at {r['dtype']} D={r['D']} causal={r['causal']} N={r['N']}: "
                      f"{r[b + '_error']}")
    if args.csv:
        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    bad = [r for r in rows for b in names
           if r.get(b + "_relerr", 0) > 2e-2 or (b + "_relerr" in r and math.isnan(r[b + "_relerr"]))]
    if bad:
        print(f"# {len(bad)} result(s) disagree with the float32 reference by more than 2e-2")
        return 1
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"# sdpa anchor: {time.time() - t0:.0f} s")
    sys.exit(rc)
