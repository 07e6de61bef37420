"""Experiment (issue 22): forced GEMM configs for the studies' shapes and the backward's GEMMs, and
back-to-back forward+backward eager calls (host stalls show as time beyond the kernels)."""
import sys, statistics, torch
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.runtime import Config
from bench.harness import time_call

def cfg(bm, bn, bk, w, s, g=8, **extra):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g, **extra}, w, s)

def med(fn, rep=50, flush=True):
    return statistics.median(time_call(fn, rep, flush=flush, device=torch.device("cuda")))

def try_configs(label, fn_of_cfg, configs, ref_fn):
    print(f"== {label}: eager {med(ref_fn) * 1e3:.1f} us")
    rows = []
    for c in configs:
        try:
            fn_of_cfg(c)(); torch.cuda.synchronize()
            rows.append((med(fn_of_cfg(c)) * 1e3, c))
        except Exception as e:
            print(f"   {c.kwargs} w{c.num_warps} s{c.num_stages}: {type(e).__name__} {str(e)[:120]}")
    for t, c in sorted(rows, key=lambda r: r[0])[:10]:
        print(f"   {t:7.1f} us  {c.kwargs} w{c.num_warps} s{c.num_stages}")

dev = torch.device("cuda"); bf16 = torch.bfloat16
g = torch.Generator(device=dev).manual_seed(0)
# fc1 forward: 512 x 8704 -> 1024, relu (cuBLAS: 64x64 tiles, 13 stages, no split)
x = torch.randn(512, 8704, device=dev, dtype=bf16, generator=g); w = torch.randn(1024, 8704, device=dev, dtype=bf16, generator=g) / 93
b = torch.randn(1024, device=dev, dtype=bf16, generator=g)
configs = [cfg(64, 64, 64, 4, s, TMA=1) for s in (4, 6, 8, 10, 12)] + [cfg(64, 128, 64, 4, s, TMA=1) for s in (4, 6, 8)] \
        + [cfg(128, 64, 64, 4, s, TMA=1) for s in (4, 6, 8)] + [cfg(64, 64, 128, 4, s, TMA=1) for s in (3, 4, 6)] \
        + [cfg(64, 64, 64, 4, s) for s in (4, 6, 8, 10)] + [cfg(64, 128, 64, 4, s, TMA=1, SPLIT_K=2) for s in (4,)] \
        + [cfg(64, 64, 64, 4, s, SPLIT_K=2) for s in (4, 6)]
try_configs("fc1 512x8704->1024 relu", lambda c: (lambda: gemm.linear(x, w, b, "relu", config=c)), configs,
            lambda: torch.relu(torch.nn.functional.linear(x, w, b)))
# fc3: 512 x 1024 -> 4
x3 = torch.randn(512, 1024, device=dev, dtype=bf16, generator=g); w3 = torch.randn(4, 1024, device=dev, dtype=bf16, generator=g); b3 = torch.randn(4, device=dev, dtype=bf16)
configs = [cfg(32, 16, 128, 4, 4), cfg(32, 16, 128, 2, 4), cfg(16, 16, 128, 2, 4), cfg(32, 16, 256, 4, 3), cfg(64, 16, 128, 4, 4),
           cfg(32, 16, 64, 2, 4, SPLIT_K=2), cfg(32, 16, 128, 4, 3, SPLIT_K=2), cfg(16, 16, 256, 4, 2), cfg(32, 16, 128, 4, 2)]
try_configs("fc3 512x1024->4", lambda c: (lambda: gemm.linear(x3, w3, b3, config=c)), configs,
            lambda: torch.nn.functional.linear(x3, w3, b3))
# the backward's GEMMs at 4096 x 8704 -> 1024: dX = dZ W (nn), dW = dZ^T X (A MN-major)
dz = torch.randn(4096, 1024, device=dev, dtype=bf16, generator=g); X = torch.randn(4096, 8704, device=dev, dtype=bf16, generator=g)
W = torch.randn(1024, 8704, device=dev, dtype=bf16, generator=g)
big = [cfg(128, 256, 64, 8, s, TMA=1) for s in (3, 4)] + [cfg(256, 128, 64, 8, s, TMA=1) for s in (3, 4)] \
    + [cfg(128, 128, 64, 8, 4, TMA=1), cfg(128, 128, 64, 4, 4, TMA=1), cfg(128, 256, 64, 8, 3), cfg(128, 256, 64, 8, 4),
       cfg(128, 128, 64, 8, 4), cfg(256, 128, 64, 8, 3), cfg(128, 128, 64, 8, 4, g=16), cfg(128, 256, 64, 8, 3, TMA=1, g=16)]
try_configs("dX = dZ W 4096x1024x8704", lambda c: (lambda: gemm.gemm(dz, W, config=c)), big, lambda: dz @ W)
try_configs("dW = dZ^T X 1024x4096x8704", lambda c: (lambda: gemm.gemm(dz.t(), X, config=c)), big, lambda: dz.t() @ X)
# back-to-back forward + backward, eager calls (no flush: host time included), per backend
for act in ("relu", "gelu"):
    xg = torch.randn(4096, 8704, device=dev, dtype=bf16, requires_grad=True); wg = (torch.randn(1024, 8704, device=dev, dtype=bf16) / 93).requires_grad_()
    bg = torch.randn(1024, device=dev, dtype=bf16, requires_grad=True); gy = torch.randn(4096, 1024, device=dev, dtype=bf16)
    f = {"relu": torch.relu, "gelu": torch.nn.functional.gelu}[act]
    fns = {"eager": lambda: torch.autograd.grad(f(torch.nn.functional.linear(xg, wg, bg)), (xg, wg, bg), gy),
           "triton": lambda: torch.autograd.grad(gemm.linear(xg, wg, bg, act), (xg, wg, bg), gy)}
    for name, fn in fns.items():
        for _ in range(5): fn()
        torch.cuda.synchronize()
        print(f"fwd+bwd {act} {name}: back-to-back {med(fn, 30, flush=False) * 1e3:.1f} us, flushed {med(fn, 30) * 1e3:.1f} us")
