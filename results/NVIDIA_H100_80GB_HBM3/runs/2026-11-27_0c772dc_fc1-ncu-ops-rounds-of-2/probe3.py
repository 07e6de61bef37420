"""fc1 forward under Nsight Compute: cuBLAS (addmm, relu; mm), the production kernel and the sliced probe kernel,
each launched once inside the profiled range after a warm-up (tuning) outside it."""
import os, sys
import torch
sys.path.insert(0, os.path.dirname(__file__))
from sliced import sliced_kernel
from triton_kernels import gemm

dev = torch.device("cuda")
gemm._ensure_allocator()
M, K, N = 512, 8704, 1024
x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
w = torch.randn(N, K, device=dev, dtype=torch.bfloat16) / K ** 0.5
b = torch.randn(N, device=dev, dtype=torch.bfloat16)
c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)


def sliced():
    sliced_kernel[(128,)](x, w, c, b, M, N, K, x.stride(0), w.stride(0), c.stride(0), c.stride(1), HAS_BIAS=True,
                          ACT="relu", BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, STAGES=12, SLICES=1, GROUP_M=8, num_warps=4)


fns = [lambda: torch.relu(torch.addmm(b, x, w.t())), lambda: torch.mm(x, w.t()),
       lambda: gemm.linear(x, w, b, activation="relu"), sliced]
for fn in fns:
    fn(); fn()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for fn in fns:
    fn()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
