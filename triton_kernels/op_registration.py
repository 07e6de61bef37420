"""Op registration: each op family's launcher as a torch op for the compiler, and a light
``torch.autograd.Function`` for eager calls (:func:`register_op`).

On the GPU an op is a ``torch.library.triton_op``: torch.compile traces its implementation, and each
launch in it is recorded through ``torch.library.wrap_triton``. The CPU interpreter cannot be recorded
that way (its launches need the tensors' data), so there the op is an opaque ``custom_op``: the compiled
graph calls it as a whole, and its fake implementation, which gives the compiler the outputs' shapes, is
the implementation itself with every launch skipped (:func:`traced_interpreter_launch`).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from .double_backward import without_derivative
from .runtime import _TRACING_TENSORS, INTERPRET, is_fake

_SHAPES_ONLY = threading.local()  # depth of the fake implementations running on this thread


def traced_interpreter_launch(*args: Any) -> bool:
    """In the interpreter: True for a launch to skip, one over fake tensors (torch.compile tracing) inside a
    registered op's fake implementation, where only the outputs' shapes are wanted; a RuntimeError for one
    traced anywhere else, which skipping would leave unwritten. False for a launch over real tensors."""
    if not is_fake(*(a for a in args if isinstance(a, torch.Tensor))):
        return False
    if getattr(_SHAPES_ONLY, "depth", 0):
        return True
    raise RuntimeError("a Triton kernel was launched while torch.compile traced, outside a registered op: the CPU "
                       "interpreter runs kernels only inside ops (triton_kernels.runtime.register_op)")


def _shapes_only(impl: Callable) -> Callable:
    """impl run for its outputs' shapes and dtypes alone: its launches skipped (the interpreter's fake
    implementation of an op)."""

    def fake(*args):
        _SHAPES_ONLY.depth = getattr(_SHAPES_ONLY, "depth", 0) + 1
        try:
            return impl(*args)
        finally:
            _SHAPES_ONLY.depth -= 1

    return fake


def define_op(name: str, impl: Callable, mutates_args: tuple = ()) -> None:
    """Define the torch op ``name`` computed by ``impl``: a ``triton_op`` on the GPU; in the interpreter an
    opaque ``custom_op`` whose fake implementation is ``impl`` with its launches skipped."""
    if INTERPRET:
        torch.library.custom_op(name, mutates_args=mutates_args)(impl)
        torch.library.register_fake(name)(_shapes_only(impl))
    else:
        torch.library.triton_op(name, mutates_args=mutates_args)(impl)


def register_op(name: str, impl: Callable, *, setup_context: Callable | None = None,
                backward: Callable | None = None, eager: Callable | None = None) -> Callable:
    """Register ``impl`` as the torch op ``name`` (:func:`define_op` + ``register_autograd``) and return the
    function the public API calls (its first argument must be a tensor).

    Under torch.compile (or while fake tensors are being traced) that function calls the registered op,
    so the compiler sees one opaque, differentiable node and ``fullgraph=True`` holds. In eager mode it
    skips the custom-op dispatcher, which costs ~70 us of host time per call -- as long as a 0.1 ms GEMM
    takes on the GPU: it calls ``impl`` directly when no gradient is needed, else a plain
    ``torch.autograd.Function`` built from the SAME ``setup_context`` / ``backward`` the op registers.

    ``eager``: what an eager call without autograd runs instead of ``impl`` (same arguments, same
    outputs, except None where the op must return a placeholder tensor it does not compute): the
    launcher itself, with nothing allocated for outputs nobody reads. An op without ``backward`` called in grad
    mode on a tensor needing a gradient (a double backward) gives outputs whose backward raises, never detached.
    """
    define_op(name, impl)
    if backward is not None:
        torch.library.register_autograd(name, backward, setup_context=setup_context)
    ns, opname = name.split("::")
    op = getattr(getattr(torch.ops, ns), opname)

    fn = None
    if backward is not None:
        def _forward(ctx, *inputs):
            out = impl(*inputs)
            setup_context(ctx, inputs, out)
            ctx.list_output = isinstance(out, list)
            return tuple(out) if ctx.list_output else out

        def _backward(ctx, *grads):
            return backward(ctx, list(grads) if ctx.list_output else grads[0])

        fn = type(f"Eager_{ns}_{opname}", (torch.autograd.Function,),
                  {"forward": staticmethod(_forward), "backward": staticmethod(_backward)})

    tracing_types, is_compiling, grad_enabled, tensor = _TRACING_TENSORS, torch.compiler.is_compiling, \
        torch.is_grad_enabled, torch.Tensor
    direct = eager if eager is not None else impl

    def call(*args):
        # while torch.compile traces, every tensor input is fake or functional: the first one tells
        if is_compiling() or isinstance(args[0], tracing_types):
            return op(*args)
        if grad_enabled() and any(a.requires_grad for a in args if isinstance(a, tensor)):
            if fn is None:  # no derivative: outputs whose backward raises
                return without_derivative(name, direct, *args)
            out = fn.apply(*args)
            return list(out) if isinstance(out, tuple) else out
        return direct(*args)

    call.__name__ = call.__qualname__ = f"call_{opname}"
    call.op = op
    return call
