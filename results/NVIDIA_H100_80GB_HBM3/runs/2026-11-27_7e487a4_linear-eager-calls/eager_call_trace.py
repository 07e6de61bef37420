"""Why ours is slower than its host and GPU times as an eager call: the op suite's timing loop (L2 flush, start
event, Linear + ReLU 4096 x 8704 -> 1024 bf16 forward + autograd.grad, end event), ours and torch's, under the
profiler; writes both traces (gzipped) and a summary of each span: kernels, their GPU start/end, and the
host's launch times relative to the start event's record."""
import gzip, json, os, shutil, statistics, sys
sys.path.insert(0, ".")
import torch
from torch.nn import functional
from torch.profiler import profile, ProfilerActivity
from triton_kernels import gemm
from triton_kernels.runtime import cuda_time_ms
OUT = os.environ.get("OUT", "/tmp")
M, K, N = (int(v) for v in os.environ.get("SHAPE", "4096,8704,1024").split(","))
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5).requires_grad_()
b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
gy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g)
fns = {"eager": lambda: torch.autograd.grad(torch.relu(functional.linear(x, w, b)), (x, w, b), gy),
       "triton": lambda: torch.autograd.grad(gemm.linear(x, w, b, activation="relu"), (x, w, b), gy)}
for name, fn in fns.items():
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = cuda_time_ms(fn, warmup=3, rep=50, flush_l2=True)
    print(name, "eager-call median ms", round(statistics.median(ts), 4), "min", round(min(ts), 4), flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        cuda_time_ms(fn, warmup=0, rep=12, flush_l2=True)
    path = os.path.join(OUT, f"trace_{name}.json")
    prof.export_chrome_trace(path)
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)
