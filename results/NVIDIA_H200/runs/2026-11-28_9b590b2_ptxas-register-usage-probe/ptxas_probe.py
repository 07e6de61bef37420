"""Experiment (issue 22): does ptxas's --register-usage-level (PTXAS_OPTIONS, read when triton is imported) move
the fp32 ieee (FFMA) GEMM? Forced configs at 4096^3 / 8192^3 against cuBLAS's fp32 (tf32 off) in the same
process, eager calls, L2 flushed, medians of CUDA-event times."""
import os, statistics, sys
import torch
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.runtime import Config
from bench.harness import time_call

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
label = os.environ.get("PTXAS_OPTIONS") or "default"
CONFIGS = [Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, 4, 4),
           Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, 8, 3)]


def med(fn, rep):
    fn()
    torch.cuda.synchronize()
    return statistics.median(time_call(fn, rep, device=dev))


for n, rep in ((4096, 30), (8192, 8)):
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, n, device=dev, generator=g)
    b = torch.randn(n, n, device=dev, generator=g)
    ref = a[:128].double() @ b.double()
    t_cublas = med(lambda: a @ b, rep)
    for c in CONFIGS:
        out = gemm.gemm(a, b, config=c, precision="ieee")
        err = float((out[:128].double() - ref).abs().max() / ref.abs().max())
        t = med(lambda c=c: gemm.gemm(a, b, config=c, precision="ieee"), rep)
        t_cublas2 = med(lambda: a @ b, rep)
        print(f"[{label}] {n}^3 {c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}x{c.kwargs['BLOCK_K']} w{c.num_warps} "
              f"s{c.num_stages}: {t:.3f} ms, cuBLAS {t_cublas:.3f}/{t_cublas2:.3f} ms, "
              f"{statistics.mean([t_cublas, t_cublas2]) / t:.3f}x, err {err:.1e}", flush=True)
