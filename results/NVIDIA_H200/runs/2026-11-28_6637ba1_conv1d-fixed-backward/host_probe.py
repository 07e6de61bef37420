"""Where an eager conv1d fwd+bwd call spends its host time (Char-CNN L 110 / L 336, bf16, batch 128, C = N = 256).
Wall time per call of 200 back-to-back calls (GPU work per call < host work, so wall / calls = host time),
median of 5 repetitions; then a cProfile of ours with the backward on the calling thread."""
import cProfile
import io
import pstats
import statistics
import sys
import threading
import time

import torch
from torch.nn import functional

from triton_kernels import conv1d


def wall_us(fn, calls=200, reps=5):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(out), min(out)




print("threads:", [t.name for t in threading.enumerate()], "switchinterval", sys.getswitchinterval(), flush=True)
mode = sys.argv[1] if len(sys.argv) > 1 else "all"
for B, L, C, N, k in ((128, 110, 256, 256, 3), (128, 336, 256, 256, 7)):
    L_out = L - k + 1
    tag = f"L{L}"
    x = torch.randn(B, C, L, device="cuda").bfloat16().requires_grad_()
    w = (torch.randn(N, C, k, device="cuda") / (C * k) ** 0.5).bfloat16().requires_grad_()
    b = torch.randn(N, device="cuda").bfloat16().requires_grad_()
    dy = torch.randn(B, N, L_out, device="cuda").bfloat16()
    x_cl = x.detach().transpose(1, 2).contiguous().requires_grad_()
    w_p = conv1d.pack_weight(w.detach(), "ieee").detach().requires_grad_()
    dy_cl = dy.transpose(1, 2).contiguous()
    xd, wd = x_cl.detach(), w_p.detach()
    with torch.no_grad():
        y = conv1d.conv1d(xd, wd, b.detach(), "relu", precision="ieee")

    def eager():
        yy = functional.relu(functional.conv1d(x, w, b))
        return torch.autograd.grad(yy, (x, w, b), dy)

    def ours():
        yy = conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")
        return torch.autograd.grad(yy, (x_cl, w_p, b), dy_cl)

    def ours_fwd():
        return conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")

    def ours_fwd_nograd():
        with torch.no_grad():
            return conv1d.conv1d(xd, wd, b, "relu", precision="ieee")

    def ours_body():
        return conv1d._conv1d_backward_op(dy_cl, xd, wd, y, "relu", "ieee", True, True, True)

    pieces = {"eager fwd+bwd": eager, "ours fwd+bwd": ours, "ours fwd (node)": ours_fwd,
              "ours fwd (no grad)": ours_fwd_nograd, "ours backward body": ours_body,
              "bias_relu_backward": lambda: conv1d.bias_relu_backward(dy_cl, y, "relu", True, True),
              "dx conv1d_forward": lambda: conv1d.conv1d_forward(dy_cl, wd, None, "none", 1, "ieee", pad=k - 1,
                                                                 flip=True, swap_weight=True),
              "dw conv1d_weight_grad": lambda: conv1d.conv1d_weight_grad(xd, dy_cl, k, C, "ieee"),
              "torch.empty_like(x)": lambda: torch.empty_like(xd)}
    for name, fn in pieces.items():
        med, low = wall_us(fn)
        print(f"{tag} {name:32s} {med:8.1f} us per call (min {low:.1f})", flush=True)
    torch.autograd.set_multithreading_enabled(False)
    for name in ("eager fwd+bwd", "ours fwd+bwd"):
        med, low = wall_us(pieces[name])
        print(f"{tag} {name + ' (1 thread)':32s} {med:8.1f} us per call (min {low:.1f})", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        ours()
    torch.cuda.synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(30)
    print(s.getvalue()[:6000])
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40)
    print(s.getvalue()[:7000])
    torch.autograd.set_multithreading_enabled(True)
