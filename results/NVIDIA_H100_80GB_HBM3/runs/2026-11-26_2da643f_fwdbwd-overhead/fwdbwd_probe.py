"""Experiment (issue 22): the backward's GEMMs alone, and Linear forward + backward called back to back
(host time included) and with the L2 flushed before each call, ours vs eager."""
import sys, statistics, torch
sys.path.insert(0, ".")
from triton_kernels import gemm
from bench.harness import time_call

def med(fn, rep=50, flush=True):
    return statistics.median(time_call(fn, rep, flush=flush, device=torch.device("cuda"))) * 1e3

dev, bf16 = torch.device("cuda"), torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
dz = torch.randn(4096, 1024, device=dev, dtype=bf16, generator=g); X = torch.randn(4096, 8704, device=dev, dtype=bf16, generator=g)
W = torch.randn(1024, 8704, device=dev, dtype=bf16, generator=g)
for label, ours, ref in (("dX = dZ W", lambda: gemm.gemm(dz, W), lambda: dz @ W),
                         ("dW = dZ^T X", lambda: gemm.gemm(dz.t(), X), lambda: dz.t() @ X)):
    out = ours(); torch.cuda.synchronize()
    err = ((out.float() - ref().float()).abs().max() / ref().float().abs().max()).item()
    print(f"{label}: eager {med(ref):.1f} us, ours {med(ours):.1f} us (max err {err:.1e})")
for act in ("relu", "gelu"):
    for M, K, N in ((4096, 8704, 1024), (512, 8704, 1024)):
        xg = torch.randn(M, K, device=dev, dtype=bf16, requires_grad=True); wg = (torch.randn(N, K, device=dev, dtype=bf16) / 93).requires_grad_()
        bg = torch.randn(N, device=dev, dtype=bf16, requires_grad=True); gy = torch.randn(M, N, device=dev, dtype=bf16)
        f = {"relu": torch.relu, "gelu": torch.nn.functional.gelu}[act]
        fns = {"eager": lambda: torch.autograd.grad(f(torch.nn.functional.linear(xg, wg, bg)), (xg, wg, bg), gy),
               "triton": lambda: torch.autograd.grad(gemm.linear(xg, wg, bg, act), (xg, wg, bg), gy)}
        res = {}
        for name, fn in fns.items():
            for _ in range(5): fn()
            torch.cuda.synchronize()
            res[name] = (med(fn, 30, flush=False), med(fn, 30))
        print(f"fwd+bwd {act} {M}x{K}->{N}: eager {res['eager'][0]:.1f} / {res['eager'][1]:.1f} us, ours "
              f"{res['triton'][0]:.1f} / {res['triton'][1]:.1f} us (back to back / L2 flushed): "
              f"{res['eager'][0] / res['triton'][0]:.3f}x / {res['eager'][1] / res['triton'][1]:.3f}x")
