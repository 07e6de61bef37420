"""Host time per call of conv1d's fwd+bwd pieces (Char-CNN L 110 and L 336, bf16, batch 128): wall time of 10
back-to-back calls queued behind a 30 ms GPU spin (so no call waits for the GPU and the launch queue stays short),
median of 15 repetitions; then whether ours' fwd+bwd synchronizes (torch.cuda.set_sync_debug_mode)."""
import warnings
import statistics
import time

import torch
from torch.nn import functional

from triton_kernels import conv1d


def host_us(fn, calls=10, reps=15):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        torch.cuda._sleep(int(2e9 * 0.03))  # 30 ms of GPU spin ahead of the calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


for B, L, C, N, k in ((128, 110, 256, 256, 3), (128, 336, 256, 256, 7)):
    L_out = L - k + 1
    tag = f"B{B} L{L} k{k}"
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

    def eager_fwd():
        return functional.relu(functional.conv1d(x, w, b))

    def ours():
        yy = conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")
        return torch.autograd.grad(yy, (x_cl, w_p, b), dy_cl)

    def ours_fwd():
        return conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")

    pieces = {
        "eager fwd+bwd": eager, "eager fwd (graph built)": eager_fwd, "ours fwd+bwd": ours,
        "ours fwd (node built)": ours_fwd,
        "ours backward body (_conv1d_backward_op)": lambda: conv1d._conv1d_backward_op(
            dy_cl, xd, wd, y, "relu", "ieee", True, True, True),
        "bias_relu_backward": lambda: conv1d.bias_relu_backward(dy_cl, y, "relu", True, True),
        "dx conv1d_forward": lambda: conv1d.conv1d_forward(dy_cl, wd, None, "none", 1, "ieee", pad=k - 1, flip=True,
                                                           swap_weight=True),
        "dw conv1d_weight_grad (auto)": lambda: conv1d.conv1d_weight_grad(xd, dy_cl, k, C, "ieee"),
        "dw conv1d_weight_grad (pointer)": lambda: conv1d.conv1d_weight_grad(xd, dy_cl, k, C, "ieee", path="pointer"),
        "dw into a weight-shaped out (auto)": lambda: conv1d.conv1d_weight_grad(xd, dy_cl, k, C, "ieee",
                                                                                out=torch.empty_like(wd)),
        "torch.empty (k, C, N) fp32": lambda: torch.empty(k, C, N, device="cuda"),
        "part.sum(0) of (19, k, C, N)": (lambda p=torch.empty(19, k, C, N, device="cuda"): p.sum(0)),
    }
    for name, fn in pieces.items():
        print(f"{tag} {name:44s} {host_us(fn):8.1f} us host per call", flush=True)
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours()
        eager()
    torch.cuda.set_sync_debug_mode(0)
    print(f"{tag} synchronizing calls in one fwd+bwd of ours and eager: {[str(w.message)[:120] for w in caught]}")
