"""Linear + ReLU 4096 x 8704 -> 1024 bf16, forward + autograd.grad as the op suite calls it (L2 flush, start event,
call, end event, queued back to back): per call the GPU span and the host time, ours and torch's; then cProfile of
200 such calls of each (host time by function; the GPU kept busy ahead so no launch waits)."""
import cProfile, io, json, os, pstats, statistics, sys, time
sys.path.insert(0, ".")
import torch
from torch.nn import functional
from triton_kernels import gemm
from triton_kernels.runtime import CudaEventTimer
M, K, N = 4096, 8704, 1024
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5).requires_grad_()
b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
gy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g)
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
fns = {"eager": lambda: torch.autograd.grad(torch.relu(functional.linear(x, w, b)), (x, w, b), gy),
       "triton": lambda: torch.autograd.grad(gemm.linear(x, w, b, activation="relu"), (x, w, b), gy),
       "triton_fwd": lambda: gemm.linear(x, w, b, activation="relu"),
       "eager_fwd": lambda: torch.relu(functional.linear(x, w, b))}
OUT = os.environ.get("OUT", "/tmp")
out = {}
for name, fn in fns.items():
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    timer, host = CudaEventTimer(), []
    for _ in range(60):
        flush.zero_()
        t0 = time.perf_counter()
        with timer.span():
            fn()
        host.append((time.perf_counter() - t0) * 1e6)
    spans = [t * 1e3 for t in timer.times_ms()]
    out[name] = dict(span_us=round(statistics.median(spans), 1), host_us=round(statistics.median(host), 1))
    print(name, out[name], flush=True)
for name in ("triton", "eager"):
    fn = fns[name]
    torch.cuda._sleep(2_000_000_000 // 1000 * 400)  # ~0.4 s of GPU work ahead
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        fn()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    text = s.getvalue()
    out[name + "_profile"] = text
    print(name, "profile\n", "\n".join(l[:150] for l in text.splitlines()[:40]), flush=True)
    torch.cuda.synchronize()
json.dump(out, open(os.path.join(OUT, "host_profile.json"), "w"), indent=1)
