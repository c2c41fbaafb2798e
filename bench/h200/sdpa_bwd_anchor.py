#!/usr/bin/env python3
"""sdpa_bwd_anchor.py — torch SDPA's flash (FA2) and cuDNN backward timed on the GPU at hand.

The anchor of kiln's backward table (bench/h200/kiln_bwd_bench.c), measured in the same device
run (bench/h200/device_run.sh, step "backward"): batch 4, 32 heads, head dim 64 and 128, N
1k/4k/16k, causal off/on, f16 and bf16.  One device call per backward: the forward runs once
with autograd, then torch.autograd.grad(out, (q, k, v), dout, retain_graph=True) is timed with
CUDA events (warm-up, median of the repeats) -- the backward kernels only, as kiln_bwd_bench
times kiln_backward.  TFLOP/s counts 2.5x the forward's 4*B*H*N*N*D (halved for causal).
Before timing, each backend's dq/dk/dv are compared with the math backend in float32 on one
batch and two heads (||g - ref|| / ||ref||); a backend the build or card lacks is "n/a".

Prints a markdown table and, with --csv, writes every number.  With --kiln (kiln's python
binding on the path, KILN_LIBRARY set), kiln.attention's autograd backward is timed the same way
in a third column, after its gradients are checked against the math backend.  With --dropout P
every backend runs attention dropout P (torch's own generator for SDPA, kiln.attention's seed
for kiln); the masks differ, so the math-backend check is skipped ("-"): kiln's dropout is
checked by kiln_bwd_bench --dropout and python_torch_check.py.
"""
import argparse
import csv
import math
import os
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--head-dims", default="64,128")
    p.add_argument("--seqlens", default="1024,4096,16384")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="N 1k/4k, f16, 3 repeats")
    p.add_argument("--kiln", action="store_true", help="also kiln.attention's autograd backward")
    p.add_argument("--dropout", type=float, default=0.0, help="attention dropout probability")
    p.add_argument("--csv", default=None)
    return p.parse_args()


def main():
    args = parse_args()
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        import torch.nn.functional as F
    except Exception as e:
        print(f"# sdpa backward anchor skipped: cannot import torch ({e})")
        return 0
    if not torch.cuda.is_available():
        print("# sdpa backward anchor skipped: torch sees no CUDA device")
        return 0
    if args.quick:
        args.seqlens, args.dtypes, args.repeats = "1024,4096", "f16", 3
    kiln = None
    if args.kiln:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "python"))
        import kiln  # noqa: F811
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"# device: {props.name}; torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]
    if kiln:
        backends.append(("kiln", None))
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16}
    B, H = args.batch, args.heads
    rows = []

    def forward(backend, q, k, v, causal):
        if backend is None:
            return kiln.attention(q, k, v, causal=causal, dropout_p=args.dropout,
                                  seed=1234 if args.dropout else None)
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  dropout_p=args.dropout)

    for dname in args.dtypes.split(","):
        dt = dtypes[dname]
        for D in (int(x) for x in args.head_dims.split(",")):
            for causal in (False, True):
                for N in (int(x) for x in args.seqlens.split(",")):
                    flops = 2.5 * 4.0 * B * H * N * N * D * (0.5 if causal else 1.0)
                    gen = torch.Generator(device=dev).manual_seed(4321 + N + D)
                    q, k, v, do = (torch.randn(B, H, N, D, device=dev, dtype=dt, generator=gen)
                                   for _ in range(4))
                    q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
                    # the reference gradients: one batch, two heads, float32 math backend
                    q0, k0, v0 = (t[:1, :2].detach().float().requires_grad_() for t in (q, k, v))
                    with sdpa_kernel([SDPBackend.MATH]):
                        o0 = F.scaled_dot_product_attention(q0, k0, v0, is_causal=causal)
                    ref = torch.autograd.grad(o0, (q0, k0, v0), do[:1, :2].float())
                    row = {"dtype": dname, "D": D, "causal": int(causal), "N": N}
                    for bname, backend in backends:
                        try:
                            out = forward(backend, q, k, v, causal)
                            g = torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
                            if not args.dropout:  # (with dropout the masks differ)
                                row[bname + "_relerr"] = max(
                                    ((a[:1, :2].float() - r).norm() / r.norm()).item()
                                    for a, r in zip(g, ref))
                            for _ in range(args.warmup):
                                torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
                            torch.cuda.synchronize()
                            times = []
                            for _ in range(args.repeats):
                                s, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                                s.record()
                                torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
                                e.record()
                                times.append((s, e))
                            torch.cuda.synchronize()
                            ms = sorted(s.elapsed_time(e) for s, e in times)
                            med = ms[len(ms) // 2]
                            row[bname + "_ms"] = med
                            row[bname + "_tflops"] = flops / (med * 1e-3) / 1e12
                            del out, g
                        except Exception as ex:
                            row[bname + "_tflops"] = math.nan
                            row[bname + "_error"] = str(ex).splitlines()[0][:120]
                    rows.append(row)
                    del q, k, v, do
                    torch.cuda.empty_cache()
                    print(f"# done {dname} D={D} causal={int(causal)} N={N}", flush=True)

    names = [b for b, _ in backends]
    print()
    print("| dtype | D | causal | N | " + " | ".join(f"{b} bwd TFLOP/s" for b in names) +
          " | rel err " + " / ".join(names) + " |")
    print("|---|---|---|---|" + "---|" * (len(names) + 1))
    for r in rows:
        cells = []
        for b in names:
            t = r.get(b + "_tflops", math.nan)
            cells.append("n/a" if math.isnan(t) else f"{t:.0f}")
        errs = " / ".join(f"{r[b + '_relerr']:.1e}" if b + "_relerr" in r else "-" for b in names)
        print(f"| {r['dtype']} | {r['D']} | {'yes' if r['causal'] else 'no'} | {r['N']} | " +
              " | ".join(cells) + f" | {errs} |")
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
    bad = [r for r in rows for b in names if r.get(b + "_relerr", 0) > 3e-2]
    if bad:
        print(f"# {len(bad)} result(s) disagree with the float32 reference by more than 3e-2")
        return 1
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"# sdpa backward anchor: {time.time() - t0:.0f} s")
    sys.exit(rc)
