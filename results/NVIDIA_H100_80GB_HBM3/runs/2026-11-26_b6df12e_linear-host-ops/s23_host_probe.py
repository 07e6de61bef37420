"""Linear(8704 -> 1024) + ReLU at 4096 rows, bf16, forward + backward (x, weight, bias grads), ours vs eager:
host time per call (perf_counter over back-to-back calls, then one sync) and GPU time per call (CUDA events
around the same calls queued behind a long sleep kernel, so the host's enqueue is hidden). An eager call is
host-bound where its host time exceeds its GPU time."""
import json, os, statistics, sys, time
import torch
sys.path.insert(0, ".")
from torch.nn import functional
from triton_kernels import gemm

OUT = os.environ.get("OUT", "/tmp")
g = torch.Generator(device="cuda").manual_seed(0)
M, K, N = 4096, 8704, 1024
rows = []
for act in ("relu", "gelu"):
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5).requires_grad_()
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    gy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g)
    f = torch.relu if act == "relu" else functional.gelu
    fns = {"eager": lambda: torch.autograd.grad(f(functional.linear(x, w, b)), (x, w, b), gy),
           "triton": lambda: torch.autograd.grad(gemm.linear(x, w, b, activation=act), (x, w, b), gy)}
    for fn in fns.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    res = {k: {"host_us": [], "gpu_us": []} for k in fns}
    for rnd in range(5):
        for name, fn in fns.items():
            n = 50
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            res[name]["host_us"].append((t1 - t0) / n * 1e6)
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU ahead of the calls
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(n):
                fn()
            e1.record()
            torch.cuda.synchronize()
            res[name]["gpu_us"].append(e0.elapsed_time(e1) / n * 1e3)
    for name in fns:
        r = {"act": act, "backend": name, "host_us": statistics.median(res[name]["host_us"]),
             "gpu_us": statistics.median(res[name]["gpu_us"]), "rounds": res[name]}
        rows.append(r); print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items() if k != "rounds"}), flush=True)
with open(os.path.join(OUT, "host_probe.json"), "w") as fh:
    json.dump(rows, fh, indent=1)
