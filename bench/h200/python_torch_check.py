"""python_torch_check.py — the Python binding on torch CUDA tensors (run on the H200).

kiln.attention on (B, H, N, D) torch tensors (device pointers, torch's current stream) against a
float64 reference computed with torch on the GPU, for f16/bf16, D 64/128, causal on and off,
ragged lengths and GQA; then the backward (docs/backward.md): kiln.attention in a torch autograd
graph (q, k, v requiring grad), its dq/dk/dv against torch's float64 autograd of the reference,
GQA, causal, ragged lengths, D 64/128/59, and a softcap on the CPU as well; and dropout 0.17 in
the autograd graph (the seed and offset the forward took regenerate its mask in the backward),
against the reference with the mask of a Philox 4x32-10 written here in torch integer ops; and
kiln.attention_varlen in the autograd graph (ragged packed sequences, GQA, causal, dropout)
against the reference run on each sequence; and the plan cache on CUDA (the stream it reads is
torch's current one; hits on a side stream write what uncached calls do).  Prints
one PASS/FAIL line per case and a summary; exit 1 on a failure.
Usage: KILN_LIBRARY=.../libkiln.so.0 python3 bench/h200/python_torch_check.py
"""
import math, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import torch  # noqa: E402
import kiln  # noqa: E402


M32 = (1 << 32) - 1


def dropout_z(p, seed, offset, B, H, Nq, Nk, device):
    """Z = keep / (1 - p) of kiln's dropout (templates/attn_dropout.c): Philox 4x32-10 of the
    counter (key column, query row, offset + b * H + h) under the key seed, kept when its first
    word >= floor(p * 2^32); (B, H, Nq, Nk) float64"""
    i64 = dict(dtype=torch.int64, device=device)
    o = (offset + torch.arange(B * H, **i64).view(B, H, 1, 1))  # offsets below 2^62 here
    c0 = torch.arange(Nk, **i64).view(1, 1, 1, Nk).expand(B, H, Nq, Nk)
    c1 = torch.arange(Nq, **i64).view(1, 1, Nq, 1).expand(B, H, Nq, Nk)
    c2, c3 = (o & M32).expand(B, H, Nq, Nk), (o >> 32).expand(B, H, Nq, Nk)
    k0, k1 = seed & M32, seed >> 32
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2  # wraps in int64; the bits are right
        c0, c1, c2, c3 = ((p1 >> 32) & M32) ^ c1 ^ k0, p1 & M32, ((p0 >> 32) & M32) ^ c3 ^ k1, \
            p0 & M32
    pf = torch.tensor(p, dtype=torch.float32).item()
    keep = c0 >= math.floor(pf * 2.0 ** 32)
    return keep.double() / (1 - pf)


def reference(q, k, v, causal, scale, softcap=0.0, z=None):
    """float64 attention with kiln's masking (bottom-right causal, rows without keys -> 0);
    z: dropout's keep / (1 - p) of each weight"""
    B, H, Nq, D = q.shape
    HK, Nk = k.shape[1], k.shape[2]
    kk = k.double().repeat_interleave(H // HK, dim=1)
    vv = v.double().repeat_interleave(H // HK, dim=1)
    s = torch.matmul(q.double(), kk.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if not causal:
        p = torch.softmax(s, dim=-1)
        return torch.matmul(p * z if z is not None else p, vv)
    i = torch.arange(Nq, device=q.device)[:, None]
    j = torch.arange(Nk, device=q.device)[None, :]
    masked = j > i + (Nk - Nq)
    # rows without a key: p = 0 (finite through autograd, unlike softmax of all -inf)
    has = (~masked).any(dim=-1, keepdim=True)
    s = torch.where(has, s.masked_fill(masked, float("-inf")), torch.zeros_like(s))
    p = torch.softmax(s, dim=-1) * has
    return torch.matmul(p * z if z is not None else p, vv)


def rel_errs(got, ref):
    """max |got - ref| over max(|ref|, 1), per tensor pair"""
    return [((g.double() - r).abs().max() / r.abs().max().clamp(min=1)).item()
            for g, r in zip(got, ref)]


def verdict(what, dt, names, errs):
    """one case's PASS/FAIL line (names label errs); True when it passed"""
    tol = 1e-2 if dt == torch.float16 else 6e-2
    ok = all(e <= tol for e in errs)
    print(f"{'PASS' if ok else 'FAIL'} {what}: rel err "
          + " ".join(f"{n} {e:.2e}" for n, e in zip(names, errs)) + f" tol={tol}")
    return ok


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
    # a head dim the NVIDIA prefill kernel does not take (1..256 there; up to 512 on the host
    # and AMD), at 64 query rows (up to 16 rows go to the decode kernels, which take it)
    try:
        kiln.attention(torch.zeros(1, 1, 64, 320, device="cuda", dtype=torch.float16),
                       torch.zeros(1, 1, 64, 320, device="cuda", dtype=torch.float16),
                       torch.zeros(1, 1, 64, 320, device="cuda", dtype=torch.float16))
        print("FAIL head dim 320 was accepted on CUDA"); fails += 1
    except kiln.KilnError as e:
        print(f"PASS head dim 320 refused on CUDA: {e}")
    # the backward: kiln.attention as a torch.autograd.Function
    for dev, dt, D, causal, (Nq, Nk, H, HK), cap in (
            ("cuda", torch.float16, 64, True, (1000, 1000, 4, 2), 0.0),
            ("cuda", torch.bfloat16, 128, False, (301, 517, 4, 4), 0.0),
            ("cuda", torch.float16, 128, True, (517, 301, 2, 1), 0.0),
            ("cuda", torch.float16, 59, True, (200, 333, 4, 2), 20.0),
            ("cpu", torch.float16, 32, True, (77, 90, 2, 1), 5.0)):
        q = torch.randn(2, H, Nq, D, device=dev, dtype=dt, requires_grad=True)
        k = torch.randn(2, HK, Nk, D, device=dev, dtype=dt, requires_grad=True)
        v = torch.randn(2, HK, Nk, D, device=dev, dtype=dt, requires_grad=True)
        do = torch.randn(2, H, Nq, D, device=dev, dtype=dt)
        o = kiln.attention(q, k, v, causal=causal, softcap=cap or None)
        got = torch.autograd.grad(o, (q, k, v), do)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref = torch.autograd.grad(reference(qd, kd, vd, causal, 1.0 / math.sqrt(D), cap),
                                  (qd, kd, vd), do.double())
        cases += 1
        fails += not verdict(f"backward {dev} {str(dt)[6:]} D{D} causal={int(causal)} "
                             f"softcap={cap} Nq={Nq} Nk={Nk} H={H}/{HK}", dt, ("dq", "dk", "dv"),
                             rel_errs(got, ref))
    # dropout in the autograd graph: one mask from (seed, offset) in the forward and the backward
    for dev, dt, D, causal, (Nq, Nk, H, HK) in (
            ("cuda", torch.float16, 64, True, (1000, 1000, 4, 2)),
            ("cuda", torch.bfloat16, 128, False, (301, 517, 4, 4)),
            ("cpu", torch.float16, 32, True, (77, 90, 2, 1))):
        seed, offset, pd = 0x0123456789abcdef, 12345, 0.17
        q = torch.randn(2, H, Nq, D, device=dev, dtype=dt, requires_grad=True)
        k = torch.randn(2, HK, Nk, D, device=dev, dtype=dt, requires_grad=True)
        v = torch.randn(2, HK, Nk, D, device=dev, dtype=dt, requires_grad=True)
        do = torch.randn(2, H, Nq, D, device=dev, dtype=dt)
        o = kiln.attention(q, k, v, causal=causal, dropout_p=pd, seed=seed, offset=offset)
        got = (o,) + torch.autograd.grad(o, (q, k, v), do)
        z = dropout_z(pd, seed, offset, 2, H, Nq, Nk, dev)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        od = reference(qd, kd, vd, causal, 1.0 / math.sqrt(D), 0.0, z)
        ref = (od.detach(),) + torch.autograd.grad(od, (qd, kd, vd), do.double())
        cases += 1
        fails += not verdict(f"dropout {pd} {dev} {str(dt)[6:]} D{D} causal={int(causal)} "
                             f"Nq={Nq} Nk={Nk} H={H}/{HK}", dt, ("o", "dq", "dk", "dv"),
                             rel_errs(got, ref))
    # varlen (docs/backward.md, "Varlen"): kiln.attention_varlen in the autograd graph, packed
    # sequences of ragged lengths (an empty one, length 1, no keys, tokens of no sequence at the
    # end) against the reference run on each sequence (dropout: the mask of query head b * H + h)
    def seq(t, c, n):  # tokens c .. c + n - 1 of a packed (T, H, D) tensor as (1, H, n, D)
        return t[c:c + n].transpose(0, 1).unsqueeze(0)
    for dev, dt, D, causal, lq, lk, H, HK, pd in (
            ("cuda", torch.float16, 64, True, [1, 300, 0, 77], [1, 280, 5, 77], 4, 2, 0.0),
            ("cuda", torch.bfloat16, 128, False, [130, 9, 200], [64, 40, 0], 4, 4, 0.0),
            ("cuda", torch.float16, 64, True, [97, 1, 64], [130, 1, 64], 4, 2, 0.17),
            ("cpu", torch.float16, 32, True, [20, 0, 33], [25, 4, 40], 2, 1, 0.17)):
        seed, offset = 0x0123456789abcdef, 777
        cq, ck = [0], [0]
        for a, b in zip(lq, lk):
            cq.append(cq[-1] + a)
            ck.append(ck[-1] + b)
        Tq, Tk = cq[-1] + 3, ck[-1] + 2
        cu_q = torch.tensor(cq, dtype=torch.int32, device=dev)
        cu_k = torch.tensor(ck, dtype=torch.int32, device=dev)
        q = torch.randn(Tq, H, D, device=dev, dtype=dt, requires_grad=True)
        k = torch.randn(Tk, HK, D, device=dev, dtype=dt, requires_grad=True)
        v = torch.randn(Tk, HK, D, device=dev, dtype=dt, requires_grad=True)
        do = torch.randn(Tq, H, D, device=dev, dtype=dt)
        drop = dict(dropout_p=pd, seed=seed, offset=offset) if pd else {}
        o = kiln.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal, **drop)
        got = (o,) + torch.autograd.grad(o, (q, k, v), do)
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        od = torch.zeros(Tq, H, D, dtype=torch.float64, device=dev)
        loss = torch.zeros((), dtype=torch.float64, device=dev)
        for b in range(len(lq)):
            if not lq[b]:
                continue
            z = dropout_z(pd, seed, offset + b * H, 1, H, lq[b], lk[b], dev) if pd else None
            ob = reference(seq(qd, cq[b], lq[b]), seq(kd, ck[b], lk[b]), seq(vd, ck[b], lk[b]),
                           causal, 1.0 / math.sqrt(D), 0.0, z)[0].transpose(0, 1)
            od[cq[b]:cq[b] + lq[b]] = ob.detach()
            loss = loss + (ob * do[cq[b]:cq[b] + lq[b]].double()).sum()
        grads = torch.autograd.grad(loss, (qd, kd, vd), allow_unused=True)
        ref = (od,) + tuple(g if g is not None else torch.zeros_like(x)
                            for g, x in zip(grads, (qd, kd, vd)))
        n = cq[-1]  # o's rows of no sequence are not written (dq/dk/dv's are zeros)
        cases += 1
        fails += not verdict(f"varlen backward {dev} {str(dt)[6:]} D{D} causal={int(causal)} "
                             f"dropout={pd} lens {lq}/{lk} H={H}/{HK}", dt,
                             ("o", "dq", "dk", "dv"),
                             rel_errs((got[0][:n],) + got[1:], (ref[0][:n],) + ref[1:]))
    # the plan cache (docs/api.md "The plan cache"): kiln's stream is torch's current one, and
    # hits on a side stream (out made per call; a dense cache's block table and int lengths
    # made per call) write what the uncached calls wrote
    side = torch.cuda.Stream()
    ok_stream = kiln._cuda_stream(0) == (torch.cuda.current_stream(0).cuda_stream or None)
    with torch.cuda.stream(side):
        ok_stream = ok_stream and kiln._cuda_stream(0) == side.cuda_stream
    q, k, v = (torch.randn(2, 4, 333, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    qd = torch.randn(2, 1, 4, 64, device="cuda", dtype=torch.float16)
    kc, vc = (torch.randn(2, 256, 2, 64, device="cuda", dtype=torch.float16) for _ in range(2))
    kiln.set_plan_cache_size(0)
    want = kiln.attention(q, k, v, causal=True)
    want_kv = kiln.attention_with_kvcache(qd, kc, vc, cache_seqlens=200, causal=True)
    kiln.set_plan_cache_size(256)
    hits = kiln.plan_cache_info()["hits"]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        outs = [kiln.attention(q, k, v, causal=True) for _ in range(3)]
        kvs = [kiln.attention_with_kvcache(qd, kc, vc, cache_seqlens=200, causal=True)
               for _ in range(3)]
    side.synchronize()
    hits = kiln.plan_cache_info()["hits"] - hits
    same = all(torch.equal(o, want) for o in outs) and all(torch.equal(o, want_kv) for o in kvs)
    cases += 1
    fails += not (ok_stream and hits == 4 and same)
    print(f"{'PASS' if ok_stream and hits == 4 and same else 'FAIL'} plan cache on CUDA: the "
          f"current stream {'read' if ok_stream else 'WRONG'}, {hits} hits of 4 on a side "
          f"stream, outputs {'the uncached ones' if same else 'DIFFER'}")
    print(f"python binding on CUDA tensors: {cases - fails} of {cases} cases passed")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
