"""The autograd node of the eager fast paths (an op's prepared call per call signature), the bounded cache of
those calls and the tensors' part of a signature; re-exported by runtime.py, where the ops import them from."""
from __future__ import annotations

from typing import Any

import torch

_FUNCTION_APPLY = torch._C._FunctionBase.__dict__.get("apply")  # autograd.Function.apply's C part


class EagerNode(torch.autograd.Function):
    """The autograd node of an eager call through a cached call signature (softmax, layernorm, cross-entropy,
    gemm, batch norm, conv2d, conv1d): ``Node.run(call, *inputs)`` returns ``call.forward(ctx, *inputs)``; its
    backward is ``call.backward(ctx, *grads)``, one gradient (or None) per input, or in a double backward
    (create_graph) ``call.general_backward(ctx, *grads)``: the general path's, differentiable again or raising as
    that is.
    Each op subclasses it (the node's name in a profile). Under torch.compile the registered autograd runs."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._apply = _FUNCTION_APPLY.__get__(None, cls) if _FUNCTION_APPLY is not None else cls.apply

    @classmethod
    def run(cls, *args):
        """``apply`` without its Python layer (~2 us a call on a CPU) outside functorch transforms (vmap,
        grad: those go through ``apply``). What that layer does there -- binding default arguments (a
        node without setup_context has none) and unwrapping tensors left over from a finished functorch
        transform -- eager calls of these ops do not need."""
        if torch._C._are_functorch_transforms_active():
            return cls.apply(*args)
        return cls._apply(*args)

    @staticmethod
    def forward(ctx, call, *inputs):
        ctx.call = call
        return call.forward(ctx, *inputs)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():  # create_graph: as the general path
            return None, *ctx.call.general_backward(ctx, *grads)
        return None, *ctx.call.backward(ctx, *grads)


PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # the tensor classes the fast paths launch on


def are_plain(*tensors) -> bool:
    """Whether every tensor given (None allowed) is of PLAIN_TENSORS exactly (no subclass, fake tensors
    included)."""
    return all(t is None or type(t) in PLAIN_TENSORS for t in tensors)


def tensor_signature(t: Any):
    """A tensor's part of a call signature: its class, shape, strides, dtype and device (None for None)."""
    return None if t is None else (type(t), t.shape, t.stride(), t.dtype, t.device)


MAX_CALL_SIGNATURES = 512  # per op: a cache of validated call signatures is emptied when it reaches this size


def remember_call(calls: dict, key: Any, call: Any) -> Any:
    """Keep ``call`` (an op's prepared call for one signature) under ``key`` unless key is None (an
    unhashable argument); returns call."""
    if key is not None:
        if len(calls) >= MAX_CALL_SIGNATURES:
            calls.clear()
        calls[key] = call
    return call
