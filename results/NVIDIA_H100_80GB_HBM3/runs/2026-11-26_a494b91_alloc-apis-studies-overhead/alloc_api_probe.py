"""Experiment (issue 22, host path): what each allocation API costs from Python on the main thread and on
autograd's thread (inside a backward), three (512, 1024) bf16 allocations per timed call."""
import statistics, time
import torch

dev = torch.device("cuda")
dc = torch.randn(512, 4, device=dev, dtype=torch.bfloat16)
dt, f32, s = torch.bfloat16, torch.float32, (512, 1024)
strides = (1024, 1)
APIS = {
    "dc.device (x3)": lambda: (dc.device, dc.device, dc.device),
    "torch.empty(device=dc.device)": lambda: [torch.empty(s, device=dc.device, dtype=dt) for _ in range(3)],
    "torch.empty(device=kept object)": lambda: [torch.empty(s, device=dev, dtype=dt) for _ in range(3)],
    "torch.empty(device='cuda:0')": lambda: [torch.empty(s, device="cuda:0", dtype=dt) for _ in range(3)],
    "torch.zeros(device=kept object)": lambda: [torch.zeros(s, device=dev, dtype=dt) for _ in range(3)],
    "torch.empty_strided(device=kept)": lambda: [torch.empty_strided(s, strides, device=dev, dtype=dt) for _ in range(3)],
    "torch.empty_like(dc)": lambda: [torch.empty_like(dc) for _ in range(3)],
    "dc.new_empty(s)": lambda: [dc.new_empty(s) for _ in range(3)],
    "dc.new_empty(s, dtype=f32)": lambda: [dc.new_empty(s, dtype=f32) for _ in range(3)],
    "dc.new_empty_strided(s, st)": lambda: [dc.new_empty_strided(s, strides) for _ in range(3)],
    "dc.new_zeros(s)": lambda: [dc.new_zeros(s) for _ in range(3)],
}


def per_call(fn, n=1000):
    for _ in range(100):
        fn()
    out = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)


class Probe(torch.autograd.Function):
    result = {}

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        for name, fn in APIS.items():
            Probe.result[name] = per_call(fn, 300)
        return g


x = torch.randn(4, device=dev, requires_grad=True)
Probe.apply(x).sum().backward()
for name, fn in APIS.items():
    print(f"{name:34s} main thread {per_call(fn):6.1f} us, autograd thread {Probe.result[name]:6.1f} us per three")
