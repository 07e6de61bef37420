"""Why batch norm + ReLU fwd+bwd reads slower as the op suite times it (L2 flushed before each call, CUDA events
around it) than in a tight loop, for ours and not for eager: per backend at 256 and 512 channels (batch 512, bf16,
channels-last), the median of 100 event-timed calls with and without the flush, the tight loop's wall time per call,
and torch.cuda.set_sync_debug_mode("warn") over one call of each."""
import statistics
import time
import warnings

import torch
from torch.nn import functional

from triton_kernels import batchnorm

flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")


def events_ms(fn, flush_l2, n=100):
    pairs = []
    for _ in range(n):
        if flush_l2:
            flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        pairs.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3


def loop_us(fn, calls=200):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


for N, C, H, W in ((512, 256, 8, 8), (512, 512, 4, 4)):
    cl = torch.channels_last
    x = (torch.randn(N, C, H, W, device="cuda") * 2 + 0.5).bfloat16().contiguous(memory_format=cl).requires_grad_()
    w = (torch.rand(C, device="cuda") + 0.5).requires_grad_()
    b = torch.randn(C, device="cuda").requires_grad_()
    rm, rv = torch.zeros(C, device="cuda"), torch.ones(C, device="cuda")
    dy = torch.randn(N, C, H, W, device="cuda").bfloat16().contiguous(memory_format=cl)

    def eager():
        y = functional.relu(functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5))
        return (y, *torch.autograd.grad(y, (x, w, b), dy))

    def ours():
        y = batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, relu=True)
        return (y, *torch.autograd.grad(y, (x, w, b), dy))

    for name, fn in (("eager", eager), ("ours", ours)):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        syncs = [str(c.message)[:100] for c in caught]
        res = []
        for _ in range(3):
            res.append((events_ms(fn, True), events_ms(fn, False), loop_us(fn)))
        for r in res:
            print(f"C{C} {name:5s} events+flush {r[0]:7.1f} us  events {r[1]:7.1f} us  loop {r[2]:7.1f} us", flush=True)
        print(f"C{C} {name:5s} syncs: {syncs}", flush=True)
