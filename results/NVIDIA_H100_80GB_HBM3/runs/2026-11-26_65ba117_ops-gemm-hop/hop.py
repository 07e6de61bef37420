# Issue 23: what a Python autograd.Function costs in a training call, and how much of it is the
# backward's hop to autograd's device thread. Per-call wall time of back-to-back fwd+bwd calls.
import time, sys, torch
from torch import nn
from torch.nn import functional as F
from models import layers

dev = "cuda"
def per_call(fn, calls=1000, rounds=3):
    for _ in range(200): fn()
    torch.cuda.synchronize(); out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls): fn()
        torch.cuda.synchronize(); out.append((time.perf_counter() - t) / calls * 1e6)
    return sorted(out)[len(out) // 2]

class PyLN(torch.autograd.Function):  # torch's own kernels behind a Python autograd node
    @staticmethod
    def forward(ctx, x, w, b):
        y, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, 1e-5)
        ctx.save_for_backward(x, w, b, mean, rstd); return y
    @staticmethod
    def backward(ctx, gy):
        x, w, b, mean, rstd = ctx.saved_tensors
        return torch.ops.aten.native_layer_norm_backward(gy, x, [x.shape[-1]], mean, rstd, w, b, [True, True, True])

class PyId(torch.autograd.Function):  # nothing but the node
    @staticmethod
    def forward(ctx, x): return x.view_as(x)
    @staticmethod
    def backward(ctx, g): return g

x = torch.randn(64, 1024, device=dev, requires_grad=True); g = torch.randn(64, 1024, device=dev)
tln = nn.LayerNorm(1024).to(dev); ours = layers.LayerNorm(1024).to(dev); ours.load_state_dict(tln.state_dict())
w, b = tln.weight, tln.bias
cases = {
    "torch LayerNorm": lambda: tln(x).backward(g),
    "ours LayerNorm": lambda: ours(x).backward(g),
    "torch kernels in a Python Function": lambda: PyLN.apply(x, w, b).backward(g),
    "identity Python Function": lambda: PyId.apply(x).backward(g),
    "x * 1 (C++ node)": lambda: (x * 1).backward(g),
}
for rnd in range(2):
    for mt in (True, False):
        torch.autograd.set_multithreading_enabled(mt)
        for name, fn in cases.items():
            print(f"round {rnd} threads={'on ' if mt else 'off'} {name:38s} {per_call(fn):8.1f} us", flush=True)
    torch.autograd.set_multithreading_enabled(True)
