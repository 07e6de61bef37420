"""tf32 C = A @ B, B row-major (N-major), n^3: the cooperative Gluon kernel (tf32_coop.py) against cuBLAS (`a @ b`)
and the production path (gemm.gemm: a K-major copy of B, then the TMA kernel); max error against float64 on
NaN-filled outputs, repeat bit-equality, GPU times (L2 flushed, 0.5 ms GPU lead: the host path hidden)."""
import json, os, statistics, sys
sys.path.insert(0, ".")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from triton_kernels import gemm
from triton_kernels.runtime import cuda_time_ms
import tf32_coop
torch.backends.cuda.matmul.allow_tf32 = True
OUT = os.environ.get("OUT", "/tmp")
gemm._ensure_allocator()
rows = []


def med(fn, reps):
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(fn, warmup=2, rep=reps, flush_l2=True, lead_ms=0.5)
    return statistics.median(ts) * 1e3


VARIANTS = [dict(pipe=2), dict(pipe=2, b_swizzle=64), dict(pipe=2, b_swizzle=32), dict(pipe=2, group_m=4),
            dict(pipe=2, store=False), dict(pipe=2, stages=3, store=False)]
for n in (4096, 8192):
    reps = 20 if n == 8192 else 50
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g)
    b = torch.randn(n, n, device="cuda", generator=g)
    exact = a.double() @ b.double()
    scale = exact.abs().max().item()
    c = torch.empty(n, n, device="cuda")
    cub = med(lambda: torch.mm(a, b, out=c), reps)
    gemm.gemm(a, b, precision="tf32")  # tune
    prod = med(lambda: gemm.gemm(a, b, precision="tf32"), reps)
    prod_err = (gemm.gemm(a, b, precision="tf32").double() - exact).abs().max().item() / scale
    print(f"n={n}: cuBLAS {cub:.1f} us; production (copy + K-major) {prod:.1f} us ({cub / prod:.3f}x, err {prod_err:.1e})",
          flush=True)
    rows += [dict(n=n, what="cublas", us=cub), dict(n=n, what="production", us=prod, err=prod_err)]
    for kw in VARIANTS:
        call = lambda: tf32_coop.launch(a, b, c, **kw)
        try:
            outs, errs = [], []
            for _ in range(4):
                c.fill_(float("nan")); call(); torch.cuda.synchronize()
                errs.append((c.double() - exact).abs().max().item() / scale); outs.append(c.clone())
            same = all(torch.equal(outs[0], o) for o in outs[1:])
            del outs
            us = med(call, reps)
            if not kw.get("store", True):
                same, errs = True, [float("nan")]
        except Exception as e:  # noqa: BLE001
            print("  ", kw, "failed:", type(e).__name__, str(e)[:300], flush=True)
            continue
        rows.append(dict(n=n, what="coop", cfg=kw, us=us, err=max(errs), same=same))
        print(f"  coop {kw}: {us:8.1f} us  {cub / us:.3f}x cuBLAS  err {max(errs):.1e}  repeat-equal {same}",
              flush=True)
    del a, b, exact, c
    torch.cuda.empty_cache()
json.dump(rows, open(os.path.join(OUT, "coop_probe.json"), "w"), indent=1)
