#!/usr/bin/env python3
"""flex_anchor.py — PyTorch FlexAttention and SDPA on attention variants, on the GPU at hand.

The anchors of kiln's variant kernels (docs/variants.md, issue 11), measured in the same device
run as kiln's own figures (bench/h200/device_run.sh, step `flex`):

  window   sliding window, causal, window_left = W (default 1024), window_right = 0
  softcap  logit soft-capping cap * tanh(s / cap), cap 30, causal
  alibi    ALiBi, slopes 2^(-8 (h + 1) / H), causal

Backends:
  flex       torch.nn.attention.flex_attention.flex_attention under torch.compile, with a
             BlockMask from create_block_mask for the masks (block sparsity) and score_mod for
             softcap and ALiBi
  sdpa-mask  F.scaled_dot_product_attention with the equivalent dense mask: a (1, 1, N, N) bool
             mask for window, a (1, H, N, N) additive float bias for ALiBi (the efficient backend
             takes both); softcap has no dense equivalent and is reported n/a

Shapes: batch 4, 32 heads, head dim 128, N 4096 and 16384, f16, forward only.  TFLOP/s counts
the visited area a dense kernel would need: 4*B*H*N*N*D/2 for causal, and for the window
4*B*H*D * (the number of (q, k) pairs inside the window); all kernels are charged the same
flops, so the ratios are ratios of time.  Timing: CUDA events, warm-up, median of the repeats.
Before timing, each backend is compared with a float32 reference on one batch and two heads
(||out - ref|| / ||ref||).

Prints a markdown table; --csv also writes every number.
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
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--seqlens", default="4096,16384")
    p.add_argument("--window", type=int, default=1024)
    p.add_argument("--softcap", type=float, default=30.0)
    p.add_argument("--variants", default="window,softcap,alibi")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="N 4096 only, 3 repeats")
    p.add_argument("--csv", default=None)
    return p.parse_args()


def window_pairs(N, W):
    """(q, k) pairs with q - W <= k <= q, 0 <= k < N"""
    return sum(min(q, W) + 1 for q in range(N))


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as e:
        print(f"# flex anchor skipped: cannot import torch / flex_attention ({e})")
        return 0
    if not torch.cuda.is_available():
        print("# flex anchor skipped: torch sees no CUDA device")
        return 0
    if args.quick:
        args.seqlens, args.repeats = "4096", 3
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"# device: {props.name}; torch {torch.__version__}, CUDA {torch.version.cuda}")
    B, H, D, W, cap = args.batch, args.heads, args.head_dim, args.window, args.softcap
    dt = torch.float16
    flex = torch.compile(flex_attention, dynamic=False)
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / H) for h in range(H)], device=dev)
    rows = []

    def timed(fn, sets):
        for i in range(args.warmup):
            fn(*sets[i % len(sets)])
        torch.cuda.synchronize()
        ev = []
        for i in range(args.repeats):
            s, e = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            s.record()
            fn(*sets[i % len(sets)])
            e.record()
            ev.append((s, e))
        torch.cuda.synchronize()
        ms = sorted(s.elapsed_time(e) for s, e in ev)
        return ms[len(ms) // 2]

    for N in (int(x) for x in args.seqlens.split(",")):
        gen = torch.Generator(device=dev).manual_seed(4321 + N)
        sets = [tuple(torch.randn(B, H, N, D, device=dev, dtype=dt, generator=gen)
                      for _ in range(3)) for _ in range(2)]
        scale = 1.0 / math.sqrt(D)
        for var in args.variants.split(","):
            # FlexAttention's modifiers and the dense equivalents
            if var == "window":
                def mask_mod(b, h, q, k):
                    return (k <= q) & (q - k <= W)
                score_mod = None
                pairs = window_pairs(N, W)
            elif var == "softcap":
                def mask_mod(b, h, q, k):
                    return k <= q
                def score_mod(s, b, h, q, k):
                    return cap * torch.tanh(s / cap)
                pairs = N * (N + 1) // 2
            elif var == "alibi":
                def mask_mod(b, h, q, k):
                    return k <= q
                def score_mod(s, b, h, q, k):
                    return s - slopes[h] * (q - k).abs()
                pairs = N * (N + 1) // 2
            else:
                raise SystemExit(f"unknown variant {var}")
            flops = 4.0 * B * H * D * pairs
            row = {"variant": var, "N": N, "W": W if var == "window" else "", "flops": flops}
            # reference: float32 on (1, 2) heads, dense
            q0, k0, v0 = (t[:1, :2].float() for t in sets[0])
            qi = torch.arange(N, device=dev)[:, None]
            ki = torch.arange(N, device=dev)[None, :]
            s0 = (q0 @ k0.transpose(-1, -2)) * scale
            if var == "softcap":
                s0 = cap * torch.tanh(s0 / cap)
            if var == "alibi":
                s0 = s0 - slopes[:2, None, None] * (qi - ki).abs()
            live = (ki <= qi) & ((qi - ki <= W) if var == "window" else True)
            s0 = s0.masked_fill(~live, float("-inf"))
            ref = torch.softmax(s0, -1) @ v0
            del s0
            # flex
            try:
                bm = create_block_mask(mask_mod, None, None, N, N, device=dev)
                def run_flex(q, k, v):
                    return flex(q, k, v, score_mod=score_mod, block_mask=bm, scale=scale)
                out = run_flex(*sets[0])
                row["flex_relerr"] = ((out[:1, :2].float() - ref).norm() / ref.norm()).item()
                ms = timed(run_flex, sets)
                row["flex_ms"], row["flex_tflops"] = ms, flops / (ms * 1e-3) / 1e12
            except Exception as ex:
                row["flex_error"] = str(ex).splitlines()[0][:160]
            # SDPA with a dense mask / bias
            try:
                if var == "softcap":
                    raise RuntimeError("no dense equivalent of soft-capping")
                if var == "window":
                    mask = live[None, None]                       # (1, 1, N, N) bool
                else:
                    mask = (-(slopes[:, None, None] * (qi - ki).abs()).to(dt))[None]  # (1,H,N,N)
                    mask = mask.masked_fill(~live[None, None], float("-inf"))
                def run_sdpa(q, k, v):
                    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
                out = run_sdpa(*sets[0])
                row["sdpa_relerr"] = ((out[:1, :2].float() - ref).norm() / ref.norm()).item()
                ms = timed(run_sdpa, sets)
                row["sdpa_ms"], row["sdpa_tflops"] = ms, flops / (ms * 1e-3) / 1e12
                del mask
            except Exception as ex:
                row["sdpa_error"] = str(ex).splitlines()[0][:160]
            rows.append(row)
            torch.cuda.empty_cache()
            print(f"# done {var} N={N}", flush=True)
        del sets
        torch.cuda.empty_cache()

    print()
    print("| variant | N | flex ms | flex TFLOP/s | SDPA+mask ms | SDPA+mask TFLOP/s | rel err flex / sdpa |")
    print("|---|---|---|---|---|---|---|")

    def cell(r, k, f):
        return f.format(r[k]) if k in r else "n/a"
    for r in rows:
        print(f"| {r['variant']} | {r['N']} | {cell(r, 'flex_ms', '{:.2f}')} | "
              f"{cell(r, 'flex_tflops', '{:.0f}')} | {cell(r, 'sdpa_ms', '{:.2f}')} | "
              f"{cell(r, 'sdpa_tflops', '{:.0f}')} | {cell(r, 'flex_relerr', '{:.1e}')} / "
              f"{cell(r, 'sdpa_relerr', '{:.1e}')} |")
    for r in rows:
        for b in ("flex", "sdpa"):
            if b + "_error" in r:
                print(f"# {b} n/a for {r['variant']} N={r['N']}: {r[b + '_error']}")
    if args.csv:
        keys = sorted({k for r in rows for k in r})
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(rows)
    bad = [r for r in rows for b in ("flex", "sdpa") if r.get(b + "_relerr", 0) > 2e-2]
    return 1 if bad else 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"# flex anchor: {time.time() - t0:.0f} s")
    sys.exit(rc)
