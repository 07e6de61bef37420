"""One SGD step over a network's parameters (momentum 0.9, Nesterov, weight decay 5e-4: the CIFAR recipe's):
triton_kernels.sgd (one launch) vs torch.optim.SGD's default (foreach) implementation, its fused one
(``eager-fused``) and torch.compile of the foreach step, on ResNet-18's parameters (fp32, channels_last
convolution weights).

sgd_step: p, grad, momentum buffer read, p and the buffer written     bytes = 5 x 4 per value   flops = 0

Each backend steps its own copy of the parameters and buffers, made at its first call (so every backend starts
from the same values and the check compares one step); the timed calls keep stepping that copy. No +graph
variants: a replay steps the copy again, so the harness's one-step check cannot hold.
"""
from __future__ import annotations

import torch
from torch.optim.sgd import sgd as torch_sgd

from triton_kernels import sgd

from ..harness import Case

HYPER = {"lr": 0.1, "momentum": 0.9, "dampening": 0.0, "weight_decay": 5e-4, "nesterov": True, "maximize": False}


def parameter_shapes(model: str) -> list[tuple]:
    from models.resnet import resnet

    return [tuple(p.shape) for p in resnet(model).parameters()]


def _stateful(step):
    """fn(*params, *grads, *bufs) that steps copies of the parameters and buffers, made at its first call per
    input set, and returns the parameters."""
    copies: dict[int, tuple] = {}

    def fn(*tensors):
        n = len(tensors) // 3
        key = id(tensors[0])
        if key not in copies:
            copies.clear()
            copies[key] = ([t.clone() for t in tensors[:n]], [t.clone() for t in tensors[2 * n:]])
        params, bufs = copies[key]
        step(params, list(tensors[n:2 * n]), bufs)
        return tuple(params)

    return fn


def _torch_step(fused: bool):
    def step(params, grads, bufs):
        torch_sgd(params, grads, bufs, **HYPER, fused=fused or None, foreach=None if fused else True)

    return step


def _triton_step(params, grads, bufs):
    sgd.sgd_step_(params, grads, bufs, **HYPER)


def sgd_case(model: str, shapes: list[tuple]) -> Case:
    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)

        def dense(s):
            t = torch.randn(s, device=device, generator=g)
            return t.contiguous(memory_format=torch.channels_last) if t.ndim == 4 else t

        return tuple([dense(s) for s in shapes] + [dense(s) * 0.01 for s in shapes] + [dense(s) * 0.01 for s in shapes])

    def reference(*tensors):  # one step in float64
        n = len(tensors) // 3
        params, grads, bufs = ([t.double() for t in tensors[i * n:(i + 1) * n]] for i in range(3))
        torch_sgd(params, grads, bufs, **HYPER, foreach=False)
        return tuple(params)

    values = sum(torch.Size(s).numel() for s in shapes)
    return Case(suite="ops", name="sgd_step", params={"model": model, "tensors": len(shapes), "values": values,
                                                      "momentum": 0.9, "nesterov": True},
                dtype=torch.float32, inputs=inputs, reference=reference, bytes=float(values * 5 * 4), graph_ok=False,
                fns={"eager": _stateful(_torch_step(False)), "eager-fused": _stateful(_torch_step(True)),
                     "compile": _stateful(torch.compile(_torch_step(False), dynamic=False)),
                     "triton": _stateful(_triton_step)})


def cases(quick: bool = False, dtypes=None, **_) -> list[Case]:
    from triton_kernels.runtime import INTERPRET

    shapes = [(4, 3, 3, 3), (8, 4, 3, 3), (8, 4, 1, 1), (5,)] if INTERPRET else parameter_shapes("resnet18")
    out = [sgd_case("tiny" if INTERPRET else "resnet18", shapes)]
    return [c for c in out if dtypes is None or c.dtype in dtypes]
