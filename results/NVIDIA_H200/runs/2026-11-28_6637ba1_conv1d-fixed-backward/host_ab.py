"""Host time per eager call of conv1d fwd+bwd (Char-CNN L 110 / L 336, bf16, batch 128, C = N = 256), ours against
eager PyTorch (cuDNN), in one process: wall time of 200 back-to-back calls then one synchronize (the kernels of a
call take less than its host work, so wall / calls is the host time), median and min of 7 repetitions, the
backends interleaved. Run from the tree under test (PYTHONPATH)."""
import statistics
import sys
import time

import torch
from torch.nn import functional

import triton_kernels
from triton_kernels import conv1d

label = sys.argv[1]
print(label, "runs", triton_kernels.__file__, flush=True)


def wall_us(fn, calls=200):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


for B, L, C, N, k in ((128, 110, 256, 256, 3), (128, 336, 256, 256, 7)):
    L_out = L - k + 1
    x = torch.randn(B, C, L, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(N, C, k, device="cuda") / (C * k) ** 0.5).bfloat16().requires_grad_()
    b = torch.randn(N, device="cuda").bfloat16().requires_grad_()
    dy = torch.randn(B, N, L_out, device="cuda").bfloat16()
    x_cl = x.detach().transpose(1, 2).contiguous().requires_grad_()
    w_p = conv1d.pack_weight(w.detach(), "ieee").detach().requires_grad_()
    dy_cl = dy.transpose(1, 2).contiguous()

    def eager():
        return torch.autograd.grad(functional.relu(functional.conv1d(x, w, b)), (x, w, b), dy)

    def ours():
        return torch.autograd.grad(conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee"), (x_cl, w_p, b), dy_cl)

    def ours_fwd():
        with torch.no_grad():
            return conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")

    fns = {"eager fwd+bwd": eager, "ours fwd+bwd": ours, "ours fwd (no grad)": ours_fwd}
    for fn in fns.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(7):
        for name, fn in fns.items():
            times[name].append(wall_us(fn))
    for name, ts in times.items():
        print(f"{label} L{L} {name:20s} median {statistics.median(ts):7.1f} us  min {min(ts):7.1f} us", flush=True)
    e, o = statistics.median(times["eager fwd+bwd"]), statistics.median(times["ours fwd+bwd"])
    print(f"{label} L{L} eager / ours (host, fwd+bwd): {e / o:.3f}", flush=True)
