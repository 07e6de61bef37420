"""Where an eager batch norm + ReLU fwd+bwd call (training mode, ResNet-18 CIFAR shapes, batch 512, bf16,
channels-last) spends its host time: wall time per call of 200 back-to-back calls then one synchronize, median and
min of 5 repetitions, ours and eager interleaved; then a cProfile of 200 of ours at 256 channels (the backward on
the calling thread)."""
import cProfile
import io
import pstats
import statistics
import time

import torch
from torch.nn import functional

from triton_kernels import batchnorm


def wall_us(fn, calls=200):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


for N, C, H, W in ((512, 64, 32, 32), (512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)):
    cl = torch.channels_last
    x = (torch.randn(N, C, H, W, device="cuda") * 2 + 0.5).bfloat16().contiguous(memory_format=cl).requires_grad_()
    w = (torch.rand(C, device="cuda") + 0.5).requires_grad_()
    b = torch.randn(C, device="cuda").requires_grad_()
    rm, rv = torch.zeros(C, device="cuda"), torch.ones(C, device="cuda")
    dy = torch.randn(N, C, H, W, device="cuda").bfloat16().contiguous(memory_format=cl)

    def eager():
        y = functional.relu(functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5))
        return torch.autograd.grad(y, (x, w, b), dy)

    def ours():
        y = batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, relu=True)
        return torch.autograd.grad(y, (x, w, b), dy)

    def ours_fwd():
        return batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, relu=True)

    def eager_fwd():
        return functional.relu(functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5))

    fns = {"eager fwd+bwd": eager, "ours fwd+bwd": ours, "eager fwd (graph)": eager_fwd, "ours fwd (node)": ours_fwd}
    for fn in fns.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(5):
        for name, fn in fns.items():
            times[name].append(wall_us(fn))
    for name, ts in times.items():
        print(f"C{C} {name:18s} median {statistics.median(ts):7.1f} us  min {min(ts):7.1f} us", flush=True)
    if C == 256:
        torch.autograd.set_multithreading_enabled(False)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            ours()
        torch.cuda.synchronize()
        prof.disable()
        torch.autograd.set_multithreading_enabled(True)
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        print(s.getvalue()[:5000])
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(35)
        print(s.getvalue()[:6000])
