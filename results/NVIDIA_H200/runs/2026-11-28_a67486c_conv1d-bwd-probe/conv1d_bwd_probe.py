"""conv1d forward + backward at the Char-CNN training shapes (bench/cases/conv1d.py's conv1d_fwdbwd, bf16, batch
128): eager (cuDNN) against ours given dy as the case gives it (a channels-first tensor seen channels-last) and as a
channels-last tensor; then ours piece by piece (forward, bias/ReLU backward, dx, dw) and cuDNN's forward and its
convolution_backward; eager calls (lead 0) and kernel time (lead spin 0.3 ms), L2 flushed."""
import statistics
import torch
from torch.nn import functional
from triton_kernels import conv1d
from triton_kernels.runtime import cuda_time_ms


def med(fn, lead):
    return statistics.median(cuda_time_ms(fn, warmup=5, rep=40, lead_ms=lead))


for B, L, C, N, k in ((128, 336, 256, 256, 7), (128, 110, 256, 256, 3)):
    L_out = L - k + 1
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(B, C, L, device="cuda", generator=g).bfloat16().requires_grad_()
    w = (torch.randn(N, C, k, device="cuda", generator=g) / (C * k) ** 0.5).bfloat16().requires_grad_()
    b = torch.randn(N, device="cuda", generator=g).bfloat16().requires_grad_()
    dy = torch.randn(B, N, L_out, device="cuda", generator=g).bfloat16()
    x_cl = x.detach().transpose(1, 2).contiguous().requires_grad_()
    w_p = conv1d.pack_weight(w.detach(), "ieee").detach().requires_grad_()
    dy_view, dy_cl = dy.transpose(1, 2), dy.transpose(1, 2).contiguous()

    def eager():
        y = functional.relu(functional.conv1d(x, w, b))
        return torch.autograd.grad(y, (x, w, b), dy)

    def ours(d):
        y = conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")
        return torch.autograd.grad(y, (x_cl, w_p, b), d)

    with torch.no_grad():
        y = conv1d.conv1d(x_cl, w_p, b, "relu", precision="ieee")
        z = functional.conv1d(x, w, b)
    parts = {
        "eager fwd+bwd": eager, "ours fwd+bwd (dy as the case: strided view)": lambda: ours(dy_view),
        "ours fwd+bwd (dy channels-last)": lambda: ours(dy_cl),
        "ours fwd": lambda: conv1d.conv1d(x_cl.detach(), w_p.detach(), b.detach(), "relu", precision="ieee"),
        "ours dx": lambda: conv1d.conv1d_forward(dy_cl, w_p.detach(), None, "none", 1, "ieee", pad=k - 1, flip=True,
                                                 swap_weight=True),
        "ours dw": lambda: conv1d.conv1d_weight_grad(x_cl.detach(), dy_cl, k, C, "ieee"),
        "cudnn fwd": lambda: functional.conv1d(x.detach(), w.detach(), b.detach()),
        "cudnn bwd (dx, dw)": lambda: torch.ops.aten.convolution_backward(
            dy, x.detach(), w.detach(), None, [1], [0], [1], False, [0], 1, [True, True, False]),
    }
    for name, fn in parts.items():
        try:
            print(f"B{B} L{L} k{k} {name:48s} call {med(fn, 0.0):.4f} ms  kernel {med(fn, 0.3):.4f} ms", flush=True)
        except Exception as e:
            print(f"B{B} L{L} k{k} {name:48s} {type(e).__name__}: {str(e)[:200]}", flush=True)
