"""python_torch_check.py — the Python binding on torch CUDA tensors (run on the H200).

kiln.attention on (B, H, N, D) torch tensors (device pointers, torch's current stream) against a
float64 reference computed with torch on the GPU, for f16/bf16, D 64/128, causal on and off,
ragged lengths and GQA.  Prints one PASS/FAIL line per case and a summary; exit 1 on a failure.
Usage: KILN_LIBRARY=.../libkiln.so.0 python3 bench/h200/python_torch_check.py
"""
import math, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import torch  # noqa: E402
import kiln  # noqa: E402


def reference(q, k, v, causal, scale):
    """float64 attention with kiln's masking (bottom-right causal, rows without keys -> 0)."""
    B, H, Nq, D = q.shape
    HK, Nk = k.shape[1], k.shape[2]
    kk = k.double().repeat_interleave(H // HK, dim=1)
    vv = v.double().repeat_interleave(H // HK, dim=1)
    s = torch.matmul(q.double(), kk.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(Nq, device=q.device)[:, None]
        j = torch.arange(Nk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (Nk - Nq), float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.matmul(p, vv)


def main():
    torch.manual_seed(0)
    cases, fails = 0, 0
    for dt, tol in ((torch.float16, 4e-3), (torch.bfloat16, 3e-2)):
        for D in (64, 128):
            for causal in (False, True):
                for (Nq, Nk, H, HK) in ((77, 77, 4, 4), (1000, 1000, 2, 1), (64, 1000, 4, 2),
                                        (1000, 64, 2, 2)):
                    q = torch.randn(2, H, Nq, D, device="cuda", dtype=dt)
                    k = torch.randn(2, HK, Nk, D, device="cuda", dtype=dt)
                    v = torch.randn(2, HK, Nk, D, device="cuda", dtype=dt)
                    o = kiln.attention(q, k, v, causal=causal)
                    torch.cuda.synchronize()
                    ref = reference(q, k, v, causal, 1.0 / math.sqrt(D))
                    err = (o.double() - ref).abs().max().item()
                    ok = err <= tol
                    cases += 1
                    fails += not ok
                    print(f"{'PASS' if ok else 'FAIL'} {str(dt)[6:]} D{D} causal={int(causal)} "
                          f"Nq={Nq} Nk={Nk} H={H}/{HK}: max_abs_err={err:.3g} tol={tol}")
    try:
        kiln.attention(torch.zeros(1, 1, 4, 20, device="cuda", dtype=torch.float16),
                       torch.zeros(1, 1, 4, 20, device="cuda", dtype=torch.float16),
                       torch.zeros(1, 1, 4, 20, device="cuda", dtype=torch.float16))
        print("FAIL head dim 20 was accepted"); fails += 1
    except kiln.KilnError as e:
        print(f"PASS head dim 20 refused: {e}")
    print(f"python binding on CUDA tensors: {cases - fails} of {cases} cases passed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
