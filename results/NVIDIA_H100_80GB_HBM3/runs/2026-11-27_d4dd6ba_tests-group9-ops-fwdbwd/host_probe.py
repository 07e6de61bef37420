"""Host time per eager call (perf_counter, GPU kept busy ahead by a sleep kernel so no call waits on it):
Linear forward + autograd.grad for the op suite's fwd+bwd rows, ours vs torch's; then ours split into
forward and the grad call."""
import json, os, statistics, sys, time
sys.path.insert(0, ".")
import torch
from torch.nn import functional
from triton_kernels import gemm
OUT = os.environ.get("OUT", "/tmp")
rows = []
for name, (M, K, N, dt, act) in {"linear_relu_4096": (4096, 8704, 1024, torch.bfloat16, "relu"),
                                  "fc1": (512, 8704, 1024, torch.bfloat16, "relu"),
                                  "fc3": (512, 1024, 4, torch.bfloat16, "none"),
                                  "mnist": (128, 784, 10, torch.float32, "none")}.items():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=dt, generator=g).requires_grad_()
    w = (torch.randn(N, K, device="cuda", dtype=dt, generator=g) / K ** 0.5).requires_grad_()
    b = torch.randn(N, device="cuda", dtype=dt, generator=g).requires_grad_()
    gy = torch.randn(M, N, device="cuda", dtype=dt, generator=g)
    f = {"relu": torch.relu, "none": lambda t: t}[act]
    fns = {"eager": lambda: torch.autograd.grad(f(functional.linear(x, w, b)), (x, w, b), gy),
           "triton": lambda: torch.autograd.grad(gemm.linear(x, w, b, activation=act), (x, w, b), gy),
           "eager_fwd": lambda: f(functional.linear(x, w, b)),
           "triton_fwd": lambda: gemm.linear(x, w, b, activation=act)}
    for fn in fns.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    res = {k: [] for k in fns}
    for rnd in range(7):
        for k, fn in fns.items():
            torch.cuda.synchronize()
            torch.cuda._sleep(100_000_000)  # ~50 ms of GPU ahead
            ts = []
            for _ in range(30):
                t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
            res[k].append(statistics.median(ts) * 1e6)
    torch.cuda.synchronize()
    r = {"case": name, **{k: round(statistics.median(v), 1) for k, v in res.items()}}
    rows.append(r); print(json.dumps(r), flush=True)
json.dump(rows, open(os.path.join(OUT, "host_probe.json"), "w"), indent=1)
