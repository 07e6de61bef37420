"""Experiment (host cost of a training step, eager calls): where ours loses to torch.nn. Per module at a tiny shape:
forward with grad enabled alone, and forward + backward, back-to-back calls (no sync in the loop), torch vs ours;
then a torch.profiler table of one module's 200 training steps (CPU self time per op / Python function)."""
import statistics, sys, time
import torch
from torch import nn
sys.path.insert(0, ".")
from models import layers

dev = torch.device("cuda")

def per_call(fn, calls=300, rounds=5):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out)

cases = {
    "softmax 128x10": (lambda: nn.Softmax(-1), lambda: layers.Softmax(-1), (128, 10)),
    "layernorm 64x1024": (lambda: nn.LayerNorm(1024), lambda: layers.LayerNorm(1024), (64, 1024)),
    "linear 128x784->10": (lambda: nn.Linear(784, 10), lambda: layers.Linear(784, 10), (128, 784)),
    "bf16 fc1 512x8704->1024": (lambda: nn.Linear(8704, 1024), lambda: layers.Linear(8704, 1024), (512, 8704)),
    "bf16 fc3 512x1024->4": (lambda: nn.Linear(1024, 4), lambda: layers.Linear(1024, 4), (512, 1024)),
}
for name, (twin, ours, shape) in cases.items():
    for label, make in (("torch", twin), ("ours", ours)):
        dtype = torch.bfloat16 if name.startswith("bf16") else torch.float32
        m = make().to(dev, dtype)
        x = torch.randn(*shape, device=dev, dtype=dtype, requires_grad=True)
        g = torch.randn_like(m(x))
        fwd = lambda: m(x)
        step = lambda: m(x).backward(g)
        grad = lambda: torch.autograd.grad(m(x), (x,), g)
        print(f"{name:20s} {label:6s} fwd(grad on) {per_call(fwd):6.1f} us  fwd+backward() {per_call(step):6.1f} us"
              f"  fwd+autograd.grad(x) {per_call(grad):6.1f} us", flush=True)

from torch.profiler import profile, ProfilerActivity
m = layers.Softmax(-1).to(dev)
x = torch.randn(128, 10, device=dev, requires_grad=True)
g = torch.randn(128, 10, device=dev)
for _ in range(50):
    m(x).backward(g)
with profile(activities=[ProfilerActivity.CPU], with_stack=False) as prof:
    for _ in range(200):
        m(x).backward(g)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
