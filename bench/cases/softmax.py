"""Softmax / log-softmax cases: Triton vs eager torch.softmax (and torch.compile, added by the harness).

softmax_fwd:     y = softmax(x)            bytes = read x + write y
softmax_bwd:     dx from (dy, y)           bytes = read dy, y + write dx
softmax_fwdbwd:  y and dx = d(y . dy)/dx   bytes = the two above
"""
from __future__ import annotations

import torch

from triton_kernels import softmax

from ..harness import Case


def _es(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def softmax_case(M: int, N: int, dtype: torch.dtype, mode: str = "fwd", log: bool = False) -> Case:
    name = ("log_softmax" if log else "softmax") + "_" + mode
    torch_fn = torch.log_softmax if log else torch.softmax
    ours = softmax.log_softmax if log else softmax.softmax

    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        x = (torch.randn(M, N, device=device, generator=g) * 3).to(dtype)
        dy = torch.randn(M, N, device=device, generator=g).to(dtype)
        if mode == "fwd":
            return (x,)
        if mode == "bwd":
            return dy, torch_fn(x.float(), -1).to(dtype)
        return x.requires_grad_(), dy

    if mode == "fwd":
        fns = {"eager": lambda x: torch_fn(x, -1), "triton": lambda x: ours(x, -1)}

        def reference(x):
            return torch_fn(x.double(), -1)
    elif mode == "bwd":
        fns = {"eager": lambda dy, y: torch._softmax_backward_data(dy, y, -1, y.dtype) if not log
               else torch._log_softmax_backward_data(dy, y, -1, y.dtype),
               "triton": lambda dy, y: softmax.softmax_backward(dy, y, log)}

        def reference(dy, y):
            dy64, y64 = dy.double(), y.double()
            if log:
                return dy64 - y64.exp() * dy64.sum(-1, keepdim=True)
            return y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
    else:
        def make(f):
            def fn(x, dy):
                y = f(x, -1)
                return y, torch.autograd.grad(y, x, dy)[0]
            return fn

        fns = {"eager": make(torch_fn), "triton": make(ours)}

        def reference(x, dy):
            x64 = x.detach().double().requires_grad_()
            with torch.enable_grad():
                y = torch_fn(x64, -1)
                return y.detach(), torch.autograd.grad(y, x64, dy.double())[0]

    n = M * N
    moved = {"fwd": 2, "bwd": 3, "fwdbwd": 5}[mode]
    flops = {"fwd": 5, "bwd": 4, "fwdbwd": 9}[mode] * n
    return Case(suite="ops", name=name, params={"M": M, "N": N}, dtype=dtype, inputs=inputs, fns=fns,
                reference=reference, flops=float(flops), bytes=float(moved * n * _es(dtype)),
                backward=mode != "fwd", graph_ok=mode != "fwdbwd")


def cases(quick: bool = False, dtypes=None, shapes=None, tiny=None) -> list[Case]:
    from . import is_tiny, keep_dtypes, of_rank, shape_dtypes

    keep = (lambda dt: dtypes is None or dt in dtypes)
    f32, bf16 = torch.float32, torch.bfloat16
    if shapes:  # exactly these MxN shapes: forward and backward
        return [softmax_case(M, N, dt, mode) for M, N in of_rank(shapes, 2) for dt in shape_dtypes(dtypes)
                for mode in ("fwd", "bwd")]
    if is_tiny(tiny):
        return keep_dtypes([softmax_case(33, 100, f32), softmax_case(17, 300, f32, "bwd"),
                            softmax_case(9, 64, f32, "fwdbwd", log=True), softmax_case(2, 17000, f32)], dtypes)
    out = []
    for M, N in ((16384, 8192), (65536, 1024)):  # acceptance sizes
        for dt in (f32, bf16):
            out += [softmax_case(M, N, dt, "fwd"), softmax_case(M, N, dt, "bwd")]
    if not quick:
        for M, N in ((16384, 8192), (65536, 1024)):
            out.append(softmax_case(M, N, bf16, "fwdbwd"))
        out += [softmax_case(128, 10, f32, "fwd"), softmax_case(128, 10, f32, "fwdbwd"),     # MNIST
                softmax_case(8192, 32000, f32, "fwd"), softmax_case(8192, 32000, bf16, "fwd"),  # LLM vocab
                softmax_case(8192, 32000, bf16, "fwd", log=True), softmax_case(512, 4, f32, "fwd"),  # Char-CNN
                softmax_case(512, 10, f32, "fwd"),                                              # ResNet head
                softmax_case(64, 262144, f32, "fwd"), softmax_case(64, 262144, f32, "bwd")]  # looped kernel
    return [c for c in out if keep(c.dtype)]
