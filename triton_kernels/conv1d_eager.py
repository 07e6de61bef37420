"""The eager fast path of conv1d (triton_kernels/conv1d.py's ``conv1d``).

A call whose signature -- x's, the weight's and the bias's shape, strides, dtype and device; activation, pool
and the precision it runs at -- was seen before skips validation, torch's custom-op dispatch, the tuning-key
and plan lookups and the kernel-argument arithmetic: it allocates its output and launches through a function
with every non-tensor kernel argument fixed (launcher.BoundKernel.fix) for the plan conv1d_forward chose. When
a gradient is needed it runs in ``_Node`` (a runtime.EagerNode), whose backward launches the same way, per dy
layout and gradients wanted: the ReLU-backward / dbias pass (gemm.act_backward's kernel, dbias stored in the
bias's dtype), dx (conv1d_forward's plan for the full convolution) and dw (conv1d.weight_grad_plan's partials
and their sum into the weight's layout). Each fixed launch is made after the general function has run its
first call (which tunes), so both paths give the same outputs and gradients. A TMA weight-gradient plan met
with an operand whose address is not 16-byte aligned runs that call through conv1d.conv1d_weight_grad.

The first call of a signature takes the general path (which validates, so bad input raises a ValueError
naming the argument before any launch, and tunes) and is remembered here (at most runtime.MAX_CALL_SIGNATURES).
The general path runs instead while torch.compile traces, for tensor subclasses (fake tensors included), for
empty outputs, and for a pooled call that needs a gradient (the general path refuses it by name).
"""
from __future__ import annotations

from typing import Optional

import torch

from .conv1d import (_conv1d_backward_op, conv1d_forward, conv1d_weight_grad, forward_launch, forward_weight,
                     input_grads, weight_grad_launches, weight_grad_plan)
from .gemm import act_backward_buffers, act_backward_fixed
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
    """One call signature's forward and backward, their launches fixed on first use."""

    def __init__(self, activation: str, pool: int, precision: str) -> None:
        self.activation, self.pool, self.precision = activation, pool, precision
        self.forward_fixed = None  # (fixed launch, output shape, whether the weight is read through a copy)
        # (dy's strides and dtype, gradients wanted) -> [act pass, dx, dw partials, dw sum, partials' shape]
        self.backward_fixed: dict[tuple, list] = {}

    def run(self, x, weight, bias) -> torch.Tensor:
        y, self.forward_fixed = _convolve(self.forward_fixed, x, weight, bias, self.activation, self.pool,
                                          self.precision)
        return y

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
        key = (dy.stride(), dy.dtype, need_x, need_w, need_b)
        fixed = self.backward_fixed.get(key)
        if fixed is None:
            fixed = self.backward_fixed[key] = [None] * 5
        N = dy.shape[-1]
        dy2 = dy.reshape(-1, N)
        saved = y.reshape(-1, N) if y is not None else dy2
        dz2, dbias, part, counters = act_backward_buffers(dy2, self.activation, need_x or need_w, need_b,
                                                          ctx.bias_dtype)
        if dz2 is not None or dbias is not None:  # dz = dy * relu'(y) and / or dbias = colsum(dz)
            fixed[0] = act_backward_fixed(fixed[0], dy2, saved, dz2, dbias, part, counters, self.activation)
        dz = dz2.view(dy.shape) if dz2 is not None else dy
        return (self._grad_x(fixed, dz, weight) if need_x else None,
                self._grad_w(fixed, x, dz, weight) if need_w else None, dbias)

    def _grad_x(self, fixed: list, dz, weight):
        """dx: the full convolution of dz with the weight's taps flipped and its channel roles swapped."""
        dx, fixed[1] = _convolve(fixed[1], dz, weight, None, "none", 1, self.precision, pad=weight.shape[2] - 1,
                                 flip=True, swap_weight=True)
        return dx

    def _grad_w(self, fixed: list, x, dz, weight):
        """dw, shaped, laid out and typed like the weight: the partials, then their sum."""
        if fixed[2] is None:
            dw = conv1d_weight_grad(x, dz, weight.shape[2], weight.shape[1], self.precision, like=weight)
            plan = weight_grad_plan(x, dz, dw, self.precision)
            (kernel, grid, args), (reduce, sum_grid, sum_args) = weight_grad_launches(plan, x, dz, dw)
            fixed[2:] = kernel.fix(grid, **args), reduce.fix(sum_grid, **sum_args), (plan.tma, args["part_ptr"].shape)
            return dw
        tma, shape = fixed[4]
        if tma and (x.data_ptr() | dz.data_ptr()) & 15:  # TMA reads 16-byte aligned bases only
            return conv1d_weight_grad(x, dz, weight.shape[2], weight.shape[1], self.precision, like=weight)
        part = dz.new_empty(shape, dtype=torch.float32)
        dw = torch.empty_like(weight)
        fixed[2](x, dz, part)
        fixed[3](part, dw)
        return dw

    def general_backward(self, ctx, dy):
        """The registered op's backward function (conv1d._conv1d_backward_op): a double backward."""
        return input_grads(_conv1d_backward_op, dy, ctx.saved_tensors, ctx.needs_input_grad[1:4], ctx.bias_dtype,
                           self.activation, self.precision)


def _convolve(fixed, x, weight, bias, activation: str, pool: int, precision: str, **full) -> tuple:
    """(y, fixed): conv1d_forward of these tensors through ``fixed``, the launch this function returned at the
    first call of the same signature (every argument but the tensors fixed; with y's shape and whether the weight
    is read through forward_weight's copy), or where it is None through the general function, whose launch is
    then fixed and returned. ``full``: conv1d_forward's pad, flip and swap_weight (the input gradient)."""
    swap = full.get("swap_weight", False)
    if fixed is None:
        y = conv1d_forward(x, weight, bias, activation, pool, precision, **full)
        read = forward_weight(weight, precision, swap)
        kernel, grid, args = forward_launch(x, read, bias, y, activation, pool, precision, **full)
        return y, (kernel.fix(grid, **args), y.shape, read is not weight)
    launch, shape, copy = fixed
    y = x.new_empty(shape)
    launch(x, forward_weight(weight, precision, swap) if copy else weight, bias if bias is not None else y, y)
    return y, fixed


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
