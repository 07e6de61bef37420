"""Experiment (issue 22): fp32 (ieee, FFMA) C = A @ B at 4096^3 / 8192^3, forced configs of the pointer and
the persistent TMA kernel against cuBLAS's fp32 (tf32 off), L2 flushed, medians of CUDA-event times."""
import statistics, sys, time
import torch
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.runtime import Config
from bench.harness import time_call

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")


def cfg(bm, bn, bk, w, s, g=8, tma=0):
    kw = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": g}
    if tma:
        kw["TMA"] = 1
    return Config(kw, w, s)


POINTER = [cfg(256, 128, 16, 8, 3), cfg(128, 256, 16, 8, 3), cfg(128, 256, 32, 8, 4), cfg(256, 128, 32, 8, 3),
           cfg(128, 128, 16, 8, 3), cfg(128, 128, 32, 8, 3), cfg(128, 128, 8, 4, 4), cfg(256, 128, 8, 8, 4),
           cfg(128, 256, 8, 8, 4), cfg(256, 256, 16, 16, 3), cfg(256, 256, 8, 16, 3), cfg(64, 256, 16, 4, 3),
           cfg(256, 64, 16, 4, 3), cfg(128, 64, 32, 4, 4), cfg(64, 128, 32, 4, 4), cfg(256, 128, 16, 8, 2),
           cfg(256, 128, 16, 8, 4), cfg(256, 128, 16, 8, 3, g=4), cfg(256, 128, 16, 8, 3, g=16),
           cfg(128, 128, 16, 4, 3)]
TMA = [cfg(256, 128, 16, 8, 3, tma=1), cfg(128, 256, 16, 8, 3, tma=1), cfg(128, 128, 32, 8, 3, tma=1),
       cfg(256, 128, 32, 8, 3, tma=1), cfg(128, 128, 16, 4, 4, tma=1), cfg(256, 256, 16, 16, 3, tma=1)]


def med(fn, rep):
    fn()
    torch.cuda.synchronize()
    return statistics.median(time_call(fn, rep, device=dev))


t_start = time.time()
for n, rep, configs in ((4096, 25, POINTER + TMA), (8192, 8, None)):
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, generator=g)
    b = torch.randn(n, n, device=dev, generator=g)
    ref = (a[:256].double() @ b.double())
    t_cublas = med(lambda: a @ b, rep)
    t_tuned = med(lambda: gemm.gemm(a, b), rep)
    t_x3 = med(lambda: gemm.gemm(a, b, precision="tf32x3"), rep)
    print(f"=== {n}^3 fp32: cuBLAS {t_cublas:.3f} ms; ours tuned (ieee) {t_tuned:.3f} ms = {t_cublas / t_tuned:.3f}x; "
          f"tf32x3 {t_x3:.3f} ms = {t_cublas / t_x3:.3f}x", flush=True)
    if configs is None:
        configs = [c for _, c in sorted(results)[:4]]
    results = []
    for c in configs:
        if time.time() - t_start > 400:
            print("time budget reached"); break
        try:
            out = gemm.gemm(a, b, config=c)
            torch.cuda.synchronize()
            err = float((out[:256].double() - ref).abs().max() / ref.abs().max())
            t = med(lambda c=c: gemm.gemm(a, b, config=c), rep)
            results.append((t, c))
            print(f"  {t:.3f} ms  {t_cublas / t:.3f}x cuBLAS  err {err:.1e}  {c.kwargs} w{c.num_warps} s{c.num_stages}",
                  flush=True)
        except Exception as e:
            print(f"  failed {c.kwargs} w{c.num_warps} s{c.num_stages}: {type(e).__name__} {str(e)[:150]}", flush=True)
