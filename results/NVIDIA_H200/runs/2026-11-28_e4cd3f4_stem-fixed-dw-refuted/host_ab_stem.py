"""Host time per eager call of the ResNet stem's forward + weight gradient (conv2d 3 -> 64, 3x3, 32x32, batch 512,
bf16, channels-last; x needs no gradient), ours against eager PyTorch (cuDNN), in one process: wall time of 200
back-to-back calls then one synchronize, median and min of 7 repetitions, the backends interleaved. Run from the
tree under test (PYTHONPATH)."""
import statistics
import sys
import time

import torch
from torch.nn import functional

import triton_kernels
from triton_kernels import conv2d

label = sys.argv[1]
print(label, "runs", triton_kernels.__file__, flush=True)
torch.backends.cudnn.benchmark = True


def wall_us(fn, calls=200):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


cl = torch.channels_last
x = torch.randn(512, 3, 32, 32, device="cuda").bfloat16().contiguous(memory_format=cl)
w = (torch.randn(64, 3, 3, 3, device="cuda") / 27 ** 0.5).bfloat16().contiguous(memory_format=cl).requires_grad_()
dy = torch.randn(512, 64, 32, 32, device="cuda").bfloat16().contiguous(memory_format=cl)


def eager():
    return torch.autograd.grad(functional.conv2d(x, w, None, 1, 1), w, dy)


def ours():
    return torch.autograd.grad(conv2d.conv2d(x, w, None, 1, 1, precision="ieee"), w, dy)


fns = {"eager fwd+dw": eager, "ours fwd+dw": ours}
for fn in fns.values():
    for _ in range(5):
        fn()
torch.cuda.synchronize()
times = {name: [] for name in fns}
for _ in range(7):
    for name, fn in fns.items():
        times[name].append(wall_us(fn))
for name, ts in times.items():
    print(f"{label} stem {name:14s} median {statistics.median(ts):7.1f} us  min {min(ts):7.1f} us", flush=True)
e, o = statistics.median(times["eager fwd+dw"]), statistics.median(times["ours fwd+dw"])
print(f"{label} stem eager / ours (host, fwd+dw): {e / o:.3f}", flush=True)
