"""The op suite's eager-call loop (L2 flush, start event, call, end event, queued back to back) with the host's
time per repetition recorded too, for Linear + ReLU 4096 x 8704 -> 1024 bf16 forward + autograd.grad, ours and
torch's; NOCHAIN=1 turns off the backward's dependent launch (gemm_eager.CHAIN_MIN_FLOPS) for this process."""
import gc, json, os, statistics, sys, time
sys.path.insert(0, ".")
import torch
from torch.nn import functional
from triton_kernels import gemm, gemm_eager
from triton_kernels.runtime import CudaEventTimer
if os.environ.get("NOCHAIN"):
    gemm_eager.CHAIN_MIN_FLOPS = 2 ** 62
M, K, N = 4096, 8704, 1024
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
w = (torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5).requires_grad_()
b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
gy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16, generator=g)
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
fns = {"eager": lambda: torch.autograd.grad(torch.relu(functional.linear(x, w, b)), (x, w, b), gy),
       "triton": lambda: torch.autograd.grad(gemm.linear(x, w, b, activation="relu"), (x, w, b), gy),
       "triton_fwd_only": lambda: gemm.linear(x, w, b, activation="relu"),
       "eager_fwd_only": lambda: torch.relu(functional.linear(x, w, b))}
tag = "nochain" if os.environ.get("NOCHAIN") else "chain"
out = {}
for name, fn in fns.items():
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    for mode in ("flush", "noflush", "sync"):
        timer, host = CudaEventTimer(), []
        for _ in range(40):
            if mode == "sync":
                torch.cuda.synchronize()
            if mode != "noflush":
                flush.zero_()
            t0 = time.perf_counter()
            with timer.span():
                fn()
            host.append((time.perf_counter() - t0) * 1e6)
        spans = [t * 1e3 for t in timer.times_ms()]
        out[f"{name}/{mode}"] = dict(span_us=round(statistics.median(spans), 1), host_us=round(statistics.median(host), 1))
        print(tag, name, mode, out[f"{name}/{mode}"], flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), f"eager_call_host_{tag}.json"), "w"), indent=1)
