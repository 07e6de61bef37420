"""Experiment (session 53): how much of an eager batch norm + ReLU fwd+bwd call's host time is the Python autograd
node itself? Training mode, batch 512, bf16, channels-last, at the host-bound layers (128-512 channels). Wall time
per call of 200 back-to-back calls then one synchronize, median and min of 7 repetitions, variants interleaved:
eager torch; ours; "pynode", a Python autograd.Function around torch's own native batch norm kernels (the same
kernels as eager, behind a Python node as ours are); each also with autograd's device threads off (the backward on
the calling thread)."""
import statistics
import time

import torch
from torch.nn import functional

from triton_kernels import batchnorm

aten = torch.ops.aten


class PyNode(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, rm, rv):
        z, mean, invstd = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)[:3]
        y = torch.relu(z)
        ctx.save_for_backward(x, w, y, mean, invstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, y, mean, invstd = ctx.saved_tensors
        dz = aten.threshold_backward(dy, y, 0)
        dx, dw, db = aten.native_batch_norm_backward(dz, x, w, None, None, mean, invstd, True, 1e-5,
                                                     [True, True, True])
        return dx, dw, db, None, None


def wall_us(fn, calls=200):
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


for N, C, H, W in ((512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)):
    cl = torch.channels_last
    x = (torch.randn(N, C, H, W, device="cuda") * 2 + 0.5).bfloat16().contiguous(memory_format=cl).requires_grad_()
    w = (torch.rand(C, device="cuda") + 0.5).requires_grad_()
    b = torch.randn(C, device="cuda").requires_grad_()
    rm, rv = torch.zeros(C, device="cuda"), torch.ones(C, device="cuda")
    dy = torch.randn(N, C, H, W, device="cuda").bfloat16().contiguous(memory_format=cl)
    fns = {
        "eager": lambda: torch.autograd.grad(functional.relu(functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)),
                                             (x, w, b), dy),
        "ours": lambda: torch.autograd.grad(batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, relu=True),
                                            (x, w, b), dy),
        "pynode": lambda: torch.autograd.grad(PyNode.apply(x, w, b, rm, rv), (x, w, b), dy),
        "ours fwd": lambda: batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, relu=True),
        "eager fwd": lambda: functional.relu(functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)),
    }
    ref = fns["eager"]()
    for name in ("ours", "pynode"):
        try:
            got = fns[name]()
        except Exception as e:  # noqa: BLE001  (a probe: say why and go on without it)
            print(f"C{C} {name} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            del fns[name]
            continue
        err = max(float((g.float() - r.float()).norm() / r.float().norm()) for g, r in zip(got, ref))
        print(f"C{C} {name} vs eager: largest relative gradient difference {err:.1e}", flush=True)
    for fn in fns.values():
        for _ in range(5):
            fn()
    torch.cuda.synchronize()
    for threads in (True, False):
        torch.autograd.set_multithreading_enabled(threads)
        times = {name: [] for name in fns}
        for _ in range(7):
            for name, fn in fns.items():
                times[name].append(wall_us(fn))
        for name, ts in times.items():
            print(f"C{C} device threads {'on ' if threads else 'off'} {name:10s} median {statistics.median(ts):7.1f} us"
                  f"  min {min(ts):7.1f} us", flush=True)
    torch.autograd.set_multithreading_enabled(True)
