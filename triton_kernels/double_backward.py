"""A double backward: a gradient of a gradient (``torch.autograd.grad(..., create_graph=True)``, then a
gradient of the result). The first backward then runs in grad mode, and what it computes must be
differentiable again. The kernels' backward launches are not, so in grad mode the ops' backwards run:
* softmax / log-softmax, LayerNorm and the GEMM's activation / bias pass: the same formulas in torch's
  ops (fp32 math, below), whose derivatives torch knows -- second and higher derivatives are right;
* an op without a derivative (a registered op with no ``backward``, runtime.register_op): outputs whose
  own backward raises a RuntimeError naming the op (``without_derivative``), never outputs detached from
  the graph, which would make a second derivative silently zero;
* cross-entropy, whose gradient the forward kernel writes: a RuntimeError (``unsupported``) at once.
"""
from __future__ import annotations

from typing import Any, Callable

import torch


def unsupported(name: str, reason: str) -> RuntimeError:
    """The error of a double backward through ``name``, which cannot differentiate its backward again."""
    return RuntimeError(f"double backward is not supported by {name}: {reason}")


class _NoDerivative(torch.autograd.Function):
    """The outputs of an op that has no derivative: the forward runs the op, the backward raises."""

    @staticmethod
    def forward(ctx, name, compute, *inputs):
        ctx.name = name
        out = compute(*inputs)
        return tuple(out) if isinstance(out, list) else out

    @staticmethod
    def backward(ctx, *grads):
        raise unsupported(ctx.name, "it has no derivative, so a gradient computed with create_graph=True cannot be "
                                    "differentiated again through it")


def without_derivative(name: str, compute: Callable, *inputs: Any) -> Any:
    """``compute(*inputs)`` (a tensor, or a list of tensors and None) with outputs that raise a RuntimeError
    naming ``name`` when a gradient flows back through them; nothing raises where none does (no input
    requires a gradient, or the second derivative is taken through other paths only)."""
    out = _NoDerivative.apply(name, compute, *inputs)
    return list(out) if isinstance(out, tuple) else out


def softmax_backward(dy: torch.Tensor, y: torch.Tensor, log: bool) -> torch.Tensor:
    """dx of (log-)softmax over the last dim from dy and the saved output y, in y's dtype:
    softmax: y * (dy - sum(dy * y)); log-softmax: dy - exp(y) * sum(dy)."""
    dy32, y32 = dy.float(), y.float()
    if log:
        dx = dy32 - y32.exp() * dy32.sum(-1, keepdim=True)
    else:
        dx = y32 * (dy32 - (dy32 * y32).sum(-1, keepdim=True))
    return dx.to(y.dtype)


def layer_norm_backward(dy: torch.Tensor, x2: torch.Tensor, weight, eps: float, needs: tuple) -> tuple:
    """(dx in x2's dtype, dw fp32, db fp32) of LayerNorm over rows x2 (M, D), None where ``needs`` (dx, dw,
    db) wants none. The statistics are recomputed from x2 (each row shifted by its first value, as the
    forward), so the result is differentiable in x2 too; with g = dy * weight:
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dw = sum_rows(dy * xhat), db = sum_rows(dy)."""
    need_x, need_w, need_b = needs
    x32, dy32 = x2.float(), dy.float()
    shifted = x32 - x32[:, :1].detach()
    centered = shifted - shifted.mean(1, keepdim=True)
    rstd = torch.rsqrt((centered * centered).mean(1, keepdim=True) + eps)
    xhat = centered * rstd
    g = dy32 * weight.float() if weight is not None else dy32
    dx = rstd * (g - g.mean(1, keepdim=True) - xhat * (g * xhat).mean(1, keepdim=True)) if need_x else None
    return (dx.to(x2.dtype) if need_x else None, (dy32 * xhat).sum(0) if need_w else None,
            dy32.sum(0) if need_b else None)


def act_backward(dc: torch.Tensor, z, activation: str, need_dbias: bool, bias_dtype: torch.dtype) -> tuple:
    """(dZ = dC * act'(Z) in dC's dtype, dbias = colsum(dZ) in ``bias_dtype`` or None) as the GEMM's
    activation-backward kernel computes them (relu reads the sign of Z, or of relu's output)."""
    dz = dc
    if activation == "relu":  # torch's threshold_backward: the gradient passes unless z <= 0
        dz = torch.where(z <= 0, torch.zeros_like(dc), dc)
    elif activation != "none":
        z32 = z.float()
        if activation == "gelu":  # d/dz z Phi(z) = Phi(z) + z phi(z)
            cdf = 0.5 * (1.0 + torch.erf(z32 * 0.7071067811865476))
            slope = cdf + z32 * torch.exp(-0.5 * z32 * z32) * 0.3989422804014327
        else:  # gelu_tanh: d/dz z s(z), s = sigmoid(2u): s + z s (1 - s) 2u', 2u' = 2 sqrt(2/pi) (1 + 3 0.044715 z^2)
            s = torch.sigmoid(z32 * (1.5957691216057308 + 0.07135481627260025 * z32 * z32))
            slope = s + z32 * s * (1.0 - s) * (1.5957691216057308 + 0.21406444881780076 * z32 * z32)
        dz = (dc.float() * slope).to(dc.dtype)
    return dz, (dz.float().sum(0).to(bias_dtype) if need_dbias else None)
