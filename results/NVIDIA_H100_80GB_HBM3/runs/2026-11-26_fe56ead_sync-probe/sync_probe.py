"""Experiment (host cost of a training step): does our fwd+backward() wait for the GPU? Per case, ours and torch's:
the host time of one call without a sync (mean of 200, after warm-up), the same with a sync after each call, and the
CUDA runtime / driver calls per fwd+backward() from torch.profiler (a sync or a device-to-host copy shows there)."""
import collections, statistics, sys, time
import torch
from torch import nn
from torch.profiler import profile, ProfilerActivity
sys.path.insert(0, ".")
from models import layers

dev = torch.device("cuda")
cases = {
    "softmax 128x10": (lambda: nn.Softmax(-1), lambda: layers.Softmax(-1), (128, 10), torch.float32),
    "layernorm 64x1024": (lambda: nn.LayerNorm(1024), lambda: layers.LayerNorm(1024), (64, 1024), torch.float32),
    "linear 128x784->10": (lambda: nn.Linear(784, 10), lambda: layers.Linear(784, 10), (128, 784), torch.float32),
    "fc1 512x8704->1024": (lambda: nn.Linear(8704, 1024), lambda: layers.Linear(8704, 1024), (512, 8704), torch.bfloat16),
    "fc3 512x1024->4": (lambda: nn.Linear(1024, 4), lambda: layers.Linear(1024, 4), (512, 1024), torch.bfloat16),
}

def host_us(fn, sync, n=200):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        if sync:
            torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)

for name, (twin, ours, shape, dtype) in cases.items():
    for label, make in (("torch", twin), ("ours", ours)):
        m = make().to(dev, dtype)
        x = torch.randn(*shape, device=dev, dtype=dtype, requires_grad=True)
        g = torch.randn_like(m(x))
        step = lambda: m(x).backward(g)
        fwd = lambda: m(x)
        a, b = host_us(step, False), host_us(step, True)
        f = host_us(fwd, False)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                step()
            torch.cuda.synchronize()
        calls = collections.Counter()
        gpu_us = 0.0
        for e in prof.events():
            if e.name.startswith(("cuda", "cu")) and "Synchronize" not in e.name or "Synchronize" in e.name or "Memcpy" in e.name:
                calls[e.name] += 1
            if e.device_type.name == "CUDA":
                gpu_us += e.device_time if hasattr(e, "device_time") else e.cuda_time
        per = ", ".join(f"{k} {v / 20:g}" for k, v in sorted(calls.items()))
        print(f"{name:20s} {label:6s} fwd host {f:6.1f} us | fwd+backward host {a:6.1f} us, synced {b:6.1f} us, "
              f"GPU {gpu_us / 20:6.1f} us | per step: {per}", flush=True)

import os
out = os.environ.get("OUT")
if out:
    for label, make in (("torch", lambda: nn.Linear(8704, 1024)), ("ours", lambda: layers.Linear(8704, 1024))):
        m = make().to(dev, torch.bfloat16)
        x = torch.randn(512, 8704, device=dev, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)
        for _ in range(30):
            m(x).backward(g)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
            for _ in range(6):
                m(x).backward(g)
            torch.cuda.synchronize()
        prof.export_chrome_trace(f"{out}/trace_fc1_{label}.json")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
