"""The eager fast path of conv2d (triton_kernels/conv2d.py's ``conv2d``).

A call whose signature -- every tensor's shape, strides, dtype and device; stride, padding, activation,
precision and path -- was seen before skips validation and the tuning-key and plan lookups: it packs the
weight (cached per weight version, conv2d.packed_weight), allocates the output and launches through a
function with every non-tensor kernel argument fixed (launcher.BoundKernel.fix), for the plan the general
path chose. Its backward runs in ``_Node`` (a runtime.EagerNode) through conv2d.input_grads, the general
path's backward, so both paths give the same gradients.

The first call of a signature takes the general path (which validates, so bad input raises a ValueError
naming the argument before any launch, and tunes) and is remembered here (at most
runtime.MAX_CALL_SIGNATURES). The general path runs instead while torch.compile traces, for tensor
subclasses (fake tensors included), for empty outputs and under a forced config.
"""
from __future__ import annotations

from typing import Optional

import torch

from .conv2d import (_PLANS, _TransposedPlan, backward_spec, forward_weight, input_grads, kernel_kind, launch_args,
                     out_size, plan_key)
from .tma import _ensure_allocator
from .runtime import INTERPRET, EagerNode, are_plain, remember_call, tensor_signature


def _key(x, weight, bias, residual, stride, padding, activation, precision, path) -> Optional[tuple]:
    """A call's signature, or None when an argument is unhashable (a list given as stride or padding is
    turned into a tuple)."""
    try:
        key = (tensor_signature(x), tensor_signature(weight), tensor_signature(bias), tensor_signature(residual),
               tuple(stride) if isinstance(stride, list) else stride,
               tuple(padding) if isinstance(padding, list) else padding, activation, precision, path)
        hash(key)
        return key
    except TypeError:
        return None


class _FastConv:
    """One call signature's forward: the general path's plan, launched through a fixed launch function
    made at the signature's first fast call; the backward's spec (conv2d.BackwardSpec)."""

    def __init__(self, plan, x, weight, bias, residual, stride: tuple, padding: tuple, activation: str,
                 precision: str, path: str) -> None:
        B, C, H, W = x.shape
        N, _, KH, KW = weight.shape
        H_out, W_out = out_size(H, KH, stride[0], padding[0]), out_size(W, KW, stride[1], padding[1])
        self.plan, self.M, self.shape = plan, B * H_out * W_out, (B, N, H_out, W_out)
        self.strides = (H_out * W_out * N, 1, W_out * N, N)  # dense channels_last, as the general path's
        self.relu = activation == "relu"
        self.transposed = isinstance(plan, _TransposedPlan)  # its weight layout, and TMA descriptors
        self.spec = backward_spec(weight, bias, residual, stride, padding, precision, path)
        self.launch = None

    def run(self, x, weight, bias, residual) -> torch.Tensor:
        w = forward_weight(weight, x.dtype, self.transposed, self.spec.precision)
        if self.transposed and not INTERPRET:
            _ensure_allocator()
        y = x.new_empty_strided(self.shape, self.strides)
        if self.launch is None:
            grid, args = launch_args(self.plan, x, w, bias, residual, y, None, self.M)
            self.launch = self.plan.kernel.fix(grid, **args)
        self.launch(x, w, bias if bias is not None else y, residual if residual is not None else y, y, y)
        return y

    # the autograd node's (_Node, a runtime.EagerNode) forward and backwards, on (x, weight, bias, residual)
    def forward(self, ctx, x, weight, bias, residual):
        y = self.run(x, weight, bias, residual)
        ctx.save_for_backward(x, weight, y if self.relu else None)
        return y

    def backward(self, ctx, dy):
        return input_grads(self.spec, dy, *ctx.saved_tensors, ctx.needs_input_grad[1:5])

    general_backward = backward  # a double backward: as the general path's (the same function)


class _Node(EagerNode):
    """The autograd node of an eager conv2d call of a known signature."""


_FAST: dict[tuple, _FastConv] = {}


def fast_conv2d(x, weight, bias, residual, stride, padding, activation, precision, path) -> Optional[torch.Tensor]:
    """The output of a call through the fast path, or None when it must take the general one."""
    if torch.compiler.is_compiling() or not are_plain(x, weight):
        return None
    key = _key(x, weight, bias, residual, stride, padding, activation, precision, path)
    fast = _FAST.get(key) if key is not None else None
    if fast is None:
        return None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        return _Node.run(fast, x, weight, bias, residual)
    return fast.run(x, weight, bias, residual)


def remember(x, weight, bias, residual, stride, padding, stride_pair: tuple, padding_pair: tuple, activation: str,
             precision: str, path: str) -> None:
    """After a general-path call of plain tensors: keep its signature with the plan it ran."""
    if torch.compiler.is_compiling() or not are_plain(x, weight, bias, residual):
        return
    N, C, KH, KW = weight.shape
    kind = kernel_kind(x, KH, KW, N, stride_pair, padding_pair, precision, path, residual)
    plan = _PLANS.get(plan_key(x, KH, KW, N, stride_pair, padding_pair, activation, precision, bias is not None,
                               residual is not None, False, kind))
    key = _key(x, weight, bias, residual, stride, padding, activation, precision, path)
    if plan is None or key is None:
        return
    remember_call(_FAST, key, _FastConv(plan, x, weight, bias, residual, stride_pair, padding_pair, activation,
                                        precision, path))
