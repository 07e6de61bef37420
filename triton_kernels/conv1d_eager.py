"""The eager fast path of conv1d (triton_kernels/conv1d.py's ``conv1d``).

A call whose signature -- x's, the weight's and the bias's shape, strides, dtype and device; activation, pool
and the precision it runs at -- was seen before skips validation and torch's custom-op dispatch: its forward
calls conv1d.conv1d_forward (the tuned plan's launch) and, when a gradient is needed, runs in ``_Node`` (a
runtime.EagerNode) whose backward is the registered op's backward function itself (conv1d._conv1d_backward_op,
called without the dispatcher), so both paths give the same outputs and gradients.

The first call of a signature takes the general path (which validates, so bad input raises a ValueError
naming the argument before any launch, and tunes) and is remembered here (at most runtime.MAX_CALL_SIGNATURES).
The general path runs instead while torch.compile traces, for tensor subclasses (fake tensors included), for
empty outputs, and for a pooled call that needs a gradient (the general path refuses it by name).
"""
from __future__ import annotations

from typing import Optional

import torch

from .conv1d import _conv1d_backward_op, conv1d_forward
from .runtime import EagerNode, are_plain, remember_call, tensor_signature


def _key(x, weight, bias, activation, pool, precision) -> Optional[tuple]:
    """A call's signature, or None when an argument is unhashable."""
    try:
        key = (tensor_signature(x), tensor_signature(weight), tensor_signature(bias), activation, pool, precision)
        hash(key)
        return key
    except TypeError:
        return None


class _FastConv1d:
    """One call signature's forward (conv1d_forward) and backward (the registered op's backward function)."""

    def __init__(self, activation: str, pool: int, precision: str) -> None:
        self.activation, self.pool, self.precision = activation, pool, precision

    def run(self, x, weight, bias) -> torch.Tensor:
        return conv1d_forward(x, weight, bias, self.activation, self.pool, self.precision)

    # the autograd node's (_Node, a runtime.EagerNode) forward and backwards, on (x, weight, bias)
    def forward(self, ctx, x, weight, bias):
        y = self.run(x, weight, bias)
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.save_for_backward(x, weight, y if self.activation == "relu" else None)
        return y

    def backward(self, ctx, dy):
        x, weight, y = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[1:4]
        need_b = bool(need_b and ctx.bias_dtype is not None)
        dx, dw, dbias = _conv1d_backward_op(dy, x, weight, y if y is not None else dy.new_empty((0,)),
                                            self.activation, self.precision, bool(need_x), bool(need_w), need_b)
        return dx if need_x else None, dw if need_w else None, dbias.to(ctx.bias_dtype) if need_b else None

    general_backward = backward  # a double backward: as the general path's (the same function)


class _Node(EagerNode):
    """The autograd node of an eager conv1d call of a known signature."""


_FAST: dict[tuple, _FastConv1d] = {}


def fast_conv1d(x, weight, bias, activation, pool, precision) -> Optional[torch.Tensor]:
    """The output of a call through the fast path, or None when it must take the general one."""
    if torch.compiler.is_compiling() or not are_plain(x, weight):
        return None
    key = _key(x, weight, bias, activation, pool, precision)
    fast = _FAST.get(key) if key is not None else None
    if fast is None:
        return None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _Node.run(fast, x, weight, bias) if pool == 1 else None
    return fast.run(x, weight, bias)


def remember(x, weight, bias, activation: str, pool: int, precision: str) -> None:
    """After a general-path call of plain tensors: keep its signature."""
    if torch.compiler.is_compiling() or not are_plain(x, weight, bias):
        return
    remember_call(_FAST, _key(x, weight, bias, activation, pool, precision), _FastConv1d(activation, pool, precision))
