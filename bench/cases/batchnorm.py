"""BatchNorm2d (+ ReLU, + residual add) and the pool + linear head: Triton vs eager torch (and
torch.compile, added by the harness), at ResNet-18's CIFAR shapes (batch 512, channels_last).

bn_act_fwd:      y = act(batch_norm(x) [+ residual]), training mode (batch statistics, running update)
                 bytes = read x (+ residual) + write y     flops = 10 per value (+1 add, +1 relu)
bn_act_fwdbwd:   y and the gradients of x, weight, bias (and residual) for an upstream dy
                 bytes = the forward's + read dy, x (+ the relu mask after an add, one bit per value) + write dx
                 (+ d residual)
                 flops = the forward's + 12 per value
pool_head_fwdbwd: logits = linear(mean over H, W of x) and the gradients of x, weight, bias
                 bytes = read x + write dx (+ the fp32 (K, C) weight and its gradient)
                 flops = N C HW (the pooling sums) + 3 x 2 N C K (logits, d pooled, d weight)
Bytes count the fewest that must move (a statistics pass re-reading x is not counted), so the
roofline figure of a two-pass kernel is at most ~2/3 for the forward.
"""
from __future__ import annotations

import torch
from torch.nn import functional

from triton_kernels import batchnorm
from triton_kernels import pool_head

from ..harness import Case

RESNET_SHAPES = [(512, 64, 32, 32), (512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)]


def _es(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def _eager(x, w, b, res, rm, rv, relu):
    y = functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)
    if res is not None:
        y = y + res
    return functional.relu(y) if relu else y


def _triton(x, w, b, res, rm, rv, relu):
    return batchnorm.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5, residual=res, relu=relu)


def _reference(x, w, b, res, relu):
    y = functional.batch_norm(x.double(), None, None, w.double(), b.double(), True)
    if res is not None:
        y = y + res.double()
    return functional.relu(y) if relu else y


def bn_act_case(shape: tuple, dtype: torch.dtype, relu: bool = True, residual: bool = False,
                mode: str = "fwd") -> Case:
    N, C, H, W = shape

    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)

        def act():
            t = torch.randn(shape, device=device, generator=g) * 2 + 0.5
            return t.to(dtype).contiguous(memory_format=torch.channels_last)

        x = act()
        w = torch.rand(C, device=device, generator=g) + 0.5
        b = torch.randn(C, device=device, generator=g)
        res = act() if residual else None
        rm, rv = torch.zeros(C, device=device), torch.ones(C, device=device)
        if mode == "fwd":
            return x, w, b, res, rm, rv
        dy = act()
        leaves = [t.requires_grad_() for t in (x, w, b) + ((res,) if residual else ())]
        return (*leaves, dy, rm, rv)

    if mode == "fwd":
        fns = {name: (lambda x, w, b, res, rm, rv, f=f: f(x, w, b, res, rm, rv, relu))
               for name, f in (("eager", _eager), ("triton", _triton))}

        def reference(x, w, b, res, rm, rv):
            return _reference(x, w, b, res, relu)
    else:
        def make(f):
            def fn(*args):
                *leaves, dy, rm, rv = args
                x, w, b = leaves[:3]
                y = f(x, w, b, leaves[3] if residual else None, rm, rv, relu)
                return (y, *torch.autograd.grad(y, leaves, dy))
            return fn

        fns = {"eager": make(_eager), "triton": make(_triton)}

        def reference(*args):
            *leaves, dy, _, _ = args
            leaves64 = [t.detach().double().requires_grad_() for t in leaves]
            with torch.enable_grad():
                y = _reference(leaves64[0], leaves64[1], leaves64[2], leaves64[3] if residual else None, relu)
                return (y.detach(), *torch.autograd.grad(y, leaves64, dy.double()))

    values, es = N * C * H * W, _es(dtype)
    fwd_bytes = (2 + residual) * values * es
    bwd_bytes = (3 + residual) * values * es + (residual and relu) * values / 8
    fwd_flops = (10 + residual + relu) * values
    moved = fwd_bytes + (bwd_bytes if mode == "fwdbwd" else 0)
    flops = fwd_flops + (12 * values if mode == "fwdbwd" else 0)
    name = "bn" + ("_add" if residual else "") + ("_relu" if relu else "") + f"_{mode}"
    return Case(suite="ops", name=name, params={"N": N, "C": C, "H": H, "W": W, "layout": "channels_last"},
                dtype=dtype, inputs=inputs, fns=fns, reference=reference, flops=float(flops), bytes=float(moved),
                backward=mode != "fwd", graph_ok=mode == "fwd")


def pool_head_case(N: int, C: int, H: int, W: int, K: int, dtype: torch.dtype) -> Case:
    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        x = torch.randn(N, C, H, W, device=device, generator=g).to(dtype).contiguous(memory_format=torch.channels_last)
        w = torch.randn(K, C, device=device, generator=g) / C ** 0.5
        b = torch.randn(K, device=device, generator=g)
        dl = torch.randn(N, K, device=device, generator=g).to(dtype)
        return x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), dl

    def make(f):
        def fn(x, w, b, dl):
            y = f(x, w, b)
            return (y, *torch.autograd.grad(y, (x, w, b), dl))
        return fn

    def eager(x, w, b):
        return functional.linear(functional.adaptive_avg_pool2d(x, 1).flatten(1), w.to(x.dtype), b.to(x.dtype))

    def reference(x, w, b, dl):
        leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
        with torch.enable_grad():
            y = functional.linear(functional.adaptive_avg_pool2d(leaves[0], 1).flatten(1), leaves[1], leaves[2])
            return (y.detach(), *torch.autograd.grad(y, leaves, dl.double()))

    es = _es(dtype)
    flops = N * C * H * W + 6 * N * C * K
    return Case(suite="ops", name="pool_head_fwdbwd", params={"N": N, "C": C, "H": H, "W": W, "K": K},
                dtype=dtype, inputs=inputs, fns={"eager": make(eager), "triton": make(pool_head.pool_head)},
                reference=reference, flops=float(flops), bytes=float(2 * N * C * H * W * es + 2 * K * C * 4),
                backward=True, graph_ok=False)


def cases(quick: bool = False, dtypes=None, **_) -> list[Case]:
    from triton_kernels.runtime import INTERPRET

    keep = (lambda dt: dtypes is None or dt in dtypes)
    f32, bf16 = torch.float32, torch.bfloat16
    if INTERPRET:
        out = [bn_act_case((3, 20, 5, 7), f32), bn_act_case((3, 20, 5, 7), f32, residual=True, mode="fwdbwd"),
               pool_head_case(17, 24, 2, 2, 10, f32)]
        return [c for c in out if keep(c.dtype)]
    out = [bn_act_case(RESNET_SHAPES[0], bf16), bn_act_case(RESNET_SHAPES[0], bf16, residual=True),
           bn_act_case(RESNET_SHAPES[0], bf16, mode="fwdbwd"),
           bn_act_case(RESNET_SHAPES[0], bf16, residual=True, mode="fwdbwd")]
    if not quick:
        for shape in RESNET_SHAPES[1:]:
            out += [bn_act_case(shape, bf16), bn_act_case(shape, bf16, residual=True),
                    bn_act_case(shape, bf16, mode="fwdbwd"), bn_act_case(shape, bf16, residual=True, mode="fwdbwd"),
                    bn_act_case(shape, bf16, relu=False, mode="fwdbwd")]
        out += [bn_act_case(RESNET_SHAPES[0], f32, residual=True, mode="fwdbwd"),
                pool_head_case(512, 512, 4, 4, 10, bf16)]
    return [c for c in out if keep(c.dtype)]
