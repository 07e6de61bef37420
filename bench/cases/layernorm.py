"""LayerNorm cases: Triton vs eager functional.layer_norm (and torch.compile, added by the harness).

layernorm_fwd:    y                    bytes = read x + write y (+ w, b)
layernorm_bwd:    dx, dw, db from (dy, x, saved mean / rstd)
                                       bytes = read dy, x + write dx (+ w, dw, db)
layernorm_fwdbwd: y, dx, dw, db        bytes = the two above
ln_relu_maxpool:  relu(max_pool1d(layer_norm(x, [C, L]), 3, 3)) (Char-CNN blocks 1 and 6, inference)
                                       bytes = read x + write y (+ w, b)
"""
from __future__ import annotations

import math

import torch
from torch.nn import functional

from triton_kernels import layernorm

from ..harness import Case


def _es(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def layernorm_case(M: int, shape: tuple, dtype: torch.dtype, mode: str = "fwd", eps: float = 1e-5) -> Case:
    D = math.prod(shape)

    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        x = (torch.randn(M, *shape, device=device, generator=g) * 2 + 1).to(dtype)
        w = (torch.randn(*shape, device=device, generator=g) * 0.5 + 1).to(dtype)
        b = torch.randn(*shape, device=device, generator=g).to(dtype)
        if mode == "fwd":
            return x, w, b
        dy = torch.randn(M, *shape, device=device, generator=g).to(dtype)
        if mode == "bwd":  # each backend gets the statistics its own forward saves
            _, mean, rstd = torch.native_layer_norm(x, shape, w, b, eps)
            _, mean_s, rstd_s = layernorm.layer_norm_forward(x.reshape(M, D), w.reshape(D), b.reshape(D), eps, True)
            return dy, x, w, b, (mean, rstd), (mean_s, rstd_s)
        return x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), dy

    if mode == "fwd":
        fns = {"eager": lambda x, w, b: functional.layer_norm(x, shape, w, b, eps),
               "triton": lambda x, w, b: layernorm.layer_norm(x, shape, w, b, eps)}

        def reference(x, w, b):
            return functional.layer_norm(x.double(), shape, w.double(), b.double(), eps)
    elif mode == "bwd":
        def eager(dy, x, w, b, torch_stats, our_stats):
            mean, rstd = torch_stats
            return torch.ops.aten.native_layer_norm_backward(dy, x, list(shape), mean, rstd, w, b,
                                                             [True, True, True])

        def ours(dy, x, w, b, torch_stats, our_stats):
            # our forward saves mean_s, the mean of x - x[:, :1] (layernorm.layer_norm_forward), not torch's mean
            mean_s, rstd = our_stats
            dx, dw, db = layernorm.layer_norm_backward(dy.reshape(M, D), x.reshape(M, D), w.reshape(D),
                                                       mean_s, rstd, True, True, True)
            return dx.reshape(x.shape), dw.reshape(shape).to(w.dtype), db.reshape(shape).to(b.dtype)

        fns = {"eager": eager, "triton": ours}

        def reference(dy, x, w, b, torch_stats, our_stats):
            x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
            with torch.enable_grad():
                y = functional.layer_norm(x64, shape, w64, b64, eps)
                return torch.autograd.grad(y, (x64, w64, b64), dy.double())
    else:
        def make(f):
            def fn(x, w, b, dy):
                y = f(x, shape, w, b, eps)
                return (y, *torch.autograd.grad(y, (x, w, b), dy))
            return fn

        fns = {"eager": make(functional.layer_norm), "triton": make(layernorm.layer_norm)}

        def reference(x, w, b, dy):
            x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
            with torch.enable_grad():
                y = functional.layer_norm(x64, shape, w64, b64, eps)
                return (y.detach(), *torch.autograd.grad(y, (x64, w64, b64), dy.double()))

    es = _es(dtype)
    fwd_bytes = 2 * M * D * es + 2 * D * es
    bwd_bytes = 3 * M * D * es + 3 * D * es
    moved = {"fwd": fwd_bytes, "bwd": bwd_bytes, "fwdbwd": fwd_bytes + bwd_bytes}[mode]
    flops = {"fwd": 8, "bwd": 11, "fwdbwd": 19}[mode] * M * D
    return Case(suite="ops", name=f"layernorm_{mode}", params={"M": M, "shape": list(shape)}, dtype=dtype,
                inputs=inputs, fns=fns, reference=reference, flops=float(flops), bytes=float(moved),
                backward=mode != "fwd", graph_ok=mode != "fwdbwd")


def ln_relu_maxpool_case(B: int, C: int, L: int, dtype: torch.dtype, pool: int = 3, eps: float = 1e-5) -> Case:
    def inputs(seed, device):
        g = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(B, C, L, device=device, generator=g).to(dtype),
                torch.randn(C, L, device=device, generator=g).to(dtype),
                torch.randn(C, L, device=device, generator=g).to(dtype))

    def eager(x, w, b):
        return functional.max_pool1d(functional.relu(functional.layer_norm(x, (C, L), w, b, eps)), pool, pool)

    def ours(x, w, b):
        with torch.no_grad():
            return layernorm.layer_norm_relu_maxpool(x, w, b, eps, pool)

    def reference(x, w, b):
        y = functional.layer_norm(x.double(), (C, L), w.double(), b.double(), eps)
        return functional.max_pool1d(functional.relu(y), pool, pool)

    es = _es(dtype)
    return Case(suite="ops", name="ln_relu_maxpool", params={"B": B, "C": C, "L": L, "pool": pool}, dtype=dtype,
                inputs=inputs, fns={"eager": eager, "triton": ours}, reference=reference,
                flops=float(10 * B * C * L), bytes=float(es * (B * C * L + B * C * (L // pool) + 2 * C * L)))


def cases(quick: bool = False, dtypes=None, shapes=None, tiny=None) -> list[Case]:
    from . import is_tiny, of_rank, shape_dtypes

    keep = (lambda dt: dtypes is None or dt in dtypes)
    f32, bf16 = torch.float32, torch.bfloat16
    if shapes:  # exactly these MxD shapes (rows x normalised width): forward and backward
        return [layernorm_case(M, (D,), dt, mode) for M, D in of_rank(shapes, 2) for dt in shape_dtypes(dtypes)
                for mode in ("fwd", "bwd")]
    if is_tiny(tiny):
        out = [layernorm_case(33, (100,), f32), layernorm_case(17, (64,), f32, "bwd"),
               layernorm_case(9, (8, 40), f32, "fwdbwd"), ln_relu_maxpool_case(2, 8, 63, f32)]
        return [c for c in out if keep(c.dtype)]
    out = [layernorm_case(16384, (8192,), bf16, "fwd"), layernorm_case(16384, (8192,), bf16, "bwd"),  # acceptance
           layernorm_case(128, (256, 1008), bf16, "fwd"), layernorm_case(128, (256, 1008), bf16, "bwd"),  # Char-CNN
           ln_relu_maxpool_case(128, 256, 1008, bf16)]
    if not quick:
        out += [layernorm_case(16384, (8192,), bf16, "fwdbwd"), layernorm_case(16384, (8192,), f32, "fwd"),
                layernorm_case(16384, (8192,), f32, "bwd"), layernorm_case(8192, (1024,), bf16, "fwd"),
                layernorm_case(8192, (1024,), bf16, "bwd"),
                layernorm_case(128, (256, 1008), f32, "fwd"), layernorm_case(128, (256, 1008), bf16, "fwdbwd"),
                ln_relu_maxpool_case(512, 256, 1008, bf16),  # Char-CNN block 1 at the study's batch
                ln_relu_maxpool_case(512, 256, 30, bf16),    # Char-CNN block 6
                ln_relu_maxpool_case(128, 256, 1008, f32)]
    return [c for c in out if keep(c.dtype)]
