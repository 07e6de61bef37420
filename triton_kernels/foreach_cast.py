"""Dtype casts of many tensors in one launch: a network's mixed-precision weight casts.

Under autocast every convolution casts its fp32 weight to bf16 in a launch of its own, and autograd casts
each bf16 weight gradient back to fp32 in another: two launches per layer and step, each a few hundred KB
to a few MB, too small to reach the copy bandwidth. :func:`cast_parameters` casts a list of parameters in
one launch forward and their gradients in one launch backward.

Math: dst = src rounded to dst's dtype (round to nearest even, as ``Tensor.to``).

Tiling: the tensors are laid end to end and cut into BLOCK-element chunks, one program per chunk.
``block_starts[i]`` is tensor i's first chunk; a program finds its tensor by comparing its id with each
start (the tuple of tensors is unrolled at compile time, so this is a chain of scalar compares) and copies
its chunk with vector loads and stores. Each tensor is copied in its storage order, so a destination has
its source's strides: every tensor must be dense (contiguous or channels_last).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import torch
import triton
import triton.language as tl

from .runtime import (INTERPRET, Autotuner, Config, bucket, cdiv, check_dense, check_tensor, dtype_name, is_dense,
                      register_tuner)


@triton.jit
def _foreach_cast_kernel(srcs, dsts, block_starts, numels, BLOCK: tl.constexpr):
    """srcs, dsts: tuples of dense tensors (dst i has src i's shape and strides); block_starts: each
    tensor's first chunk, then the total chunk count; numels: each tensor's element count (< 2**31)."""
    pid = tl.program_id(0)
    for i in tl.static_range(len(srcs)):
        if (pid >= block_starts[i]) & (pid < block_starts[i + 1]):
            offs = (pid - block_starts[i]) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < numels[i]
            values = tl.load(srcs[i] + offs, mask=mask)
            tl.store(dsts[i] + offs, values.to(dsts[i].dtype.element_ty), mask=mask)


CONFIGS = [Config({"BLOCK": b}, w, 1) for b, w in ((2048, 4), (4096, 4), (4096, 8), (8192, 8), (1024, 4))]
INTERPRET_CONFIG = Config({"BLOCK": 256}, 4, 1)
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INTERPRETER_DTYPES = (torch.float32, torch.float16, torch.float64)  # no bf16 rounding in the interpreter
MAX_TENSORS = 64  # tensors per launch (the kernel unrolls its tensor loop); longer lists take several launches
_ALIGN = 16  # elements between tensors in an output buffer: 32-byte aligned starts for any dtype


class ForeachCastKey(NamedTuple):
    """What a tuned cast config depends on."""
    n: int          # elements in all, bucketed
    tensors: int    # tensors per launch, bucketed
    src_dtype: str  # the first source's dtype
    dst_dtype: str


_tuner = register_tuner(Autotuner("foreach_cast", _foreach_cast_kernel, CONFIGS, interpret_config=INTERPRET_CONFIG))


def _check(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> None:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"tensors must be a non-empty list or tuple of tensors, got {tensors!r}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype}")
    if INTERPRET and dtype not in INTERPRETER_DTYPES:
        raise ValueError(f"dtype {dtype}: Triton's CPU interpreter cannot round to it; use "
                         f"{INTERPRETER_DTYPES} on the CPU, or run on a CUDA GPU")
    device = tensors[0].device if isinstance(tensors[0], torch.Tensor) else None
    for i, t in enumerate(tensors):
        check_tensor(f"tensors[{i}]", t, dtypes=DTYPES, device=device, interpreter_dtypes=INTERPRETER_DTYPES)
        check_dense(f"tensors[{i}]", t)


def _launch_group(srcs: list[torch.Tensor], dsts: list[torch.Tensor], config: Optional[Config]) -> None:
    numels = tuple(s.numel() for s in srcs)

    def run(cfg: Config) -> None:
        starts = [0]
        for n in numels:
            starts.append(starts[-1] + cdiv(n, cfg.kwargs["BLOCK"]))
        # a tuple argument: Triton's own launch (the bound launcher takes tensors and scalars only)
        _foreach_cast_kernel[(starts[-1],)](tuple(srcs), tuple(dsts), tuple(starts), numels,
                                            num_warps=cfg.num_warps, num_stages=cfg.num_stages, **cfg.kwargs)

    if config is None:
        key = ForeachCastKey(n=bucket(sum(numels), 1 << 16), tensors=bucket(len(srcs), 4),
                             src_dtype=dtype_name(srcs[0].dtype), dst_dtype=dtype_name(dsts[0].dtype))
        config = _tuner.pick(key, run)
    run(config)


def foreach_cast(tensors: Sequence[torch.Tensor], dtype: torch.dtype, *,
                 config: Optional[Config] = None) -> list[torch.Tensor]:
    """Each tensor cast to ``dtype``, with its shape and strides (dense tensors: contiguous or channels_last),
    in one launch per MAX_TENSORS tensors. The results are views of one new buffer. ``config`` forces a
    launch config (tests); by default the tuner picks one per ForeachCastKey."""
    _check(tensors, dtype)
    return _cast(tensors, dtype, config)


def _cast(tensors: Sequence[torch.Tensor], dtype: torch.dtype, config: Optional[Config] = None) -> list[torch.Tensor]:
    """foreach_cast on tensors already checked."""
    offsets, total = [], 0
    for t in tensors:
        offsets.append(total)
        total += cdiv(t.numel(), _ALIGN) * _ALIGN
    flat = torch.empty(total, dtype=dtype, device=tensors[0].device)
    outs = [flat.as_strided(t.shape, t.stride(), off) for t, off in zip(tensors, offsets)]
    pairs = [(t, o) for t, o in zip(tensors, outs) if t.numel()]
    for g in range(0, len(pairs), MAX_TENSORS):
        group = pairs[g:g + MAX_TENSORS]
        _launch_group([t for t, _ in group], [o for _, o in group], config)
    return outs


def _grad_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype t's gradient is kept in: its ``grad_dtype`` (a leaf may take a narrower gradient than itself;
    None: any dtype, so the gradient stays as it comes), else t's own dtype."""
    return getattr(t, "grad_dtype", t.dtype) if t.is_leaf and t.requires_grad else t.dtype


class _CastParameters(torch.autograd.Function):
    """Forward: the tensors cast to one dtype; backward: each gradient cast back to its tensor's gradient dtype
    (``_grad_dtype``: a gradient already in it is passed on as it is, e.g. the bf16 weight gradient of an fp32
    parameter whose grad_dtype is bf16) in one launch per target dtype; a gradient whose strides differ from
    its tensor's is cast by torch into the tensor's layout, so autograd can keep it as ``.grad`` without a
    copy."""

    @staticmethod
    def forward(ctx, dtype: torch.dtype, *tensors: torch.Tensor):
        ctx.set_materialize_grads(False)
        ctx.layouts = [(_grad_dtype(t), t.stride()) for t in tensors]
        return tuple(_cast(tensors, dtype))  # cast_parameters checked them

    @staticmethod
    def backward(ctx, *grads):
        out: list[Optional[torch.Tensor]] = [None] * len(grads)
        by_dtype: dict[torch.dtype, list[int]] = {}
        for i, (g, (dtype, stride)) in enumerate(zip(grads, ctx.layouts)):
            if g is None:
                continue
            dtype = g.dtype if dtype is None else dtype
            if g.stride() == stride and is_dense(g):
                if g.dtype == dtype:
                    out[i] = g
                else:
                    by_dtype.setdefault(dtype, []).append(i)
            else:
                out[i] = torch.empty_strided(g.shape, stride, dtype=dtype, device=g.device).copy_(g)
        for dtype, idx in by_dtype.items():  # dense gradients of the checked outputs' shapes and dtype
            for i, cast in zip(idx, _cast([grads[i] for i in idx], dtype)):
                out[i] = cast
        return (None, *out)


def cast_parameters(tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``tuple(t.to(dtype) for t in tensors)`` with autograd, in one launch forward (each result keeps its
    tensor's strides) and one backward (each gradient returns in its tensor's dtype and strides): what
    autocast's per-layer weight casts do, for a whole network at once."""
    _check(tensors, dtype)
    return _CastParameters.apply(dtype, *tensors)
