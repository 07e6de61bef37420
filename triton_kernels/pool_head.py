"""Global average pooling + linear classifier (a ResNet's head), forward and backward.

Math (fp32 accumulation whatever the activation dtype; dots in ieee fp32):
    pooled[n, c] = sum_hw x[n, c, hw] / HW
    logits[n, k] = sum_c pooled[n, c] * W[k, c] + b[k]
Backward, with dl = dlogits:
    dW = dl^T @ pooled,   db = sum_n dl,   dx[n, c, hw] = (dl @ W)[n, c] / HW   (the same value at every pixel)

Tiling (x addressed as (N, HW, C) with strides; channels_last puts the C values of a pixel together):
    _pool_kernel       program (BLOCK_N samples, BLOCK_C channels): sums the HW pixels in registers,
                       writes pooled (N, C) fp32 (kept for the backward).
    _head_kernel       program per BLOCK_N samples: logits = pooled @ W^T + b over channel chunks (tl.dot,
                       the K classes padded to BLOCK_K >= 16).
    _head_dx_kernel    program (BLOCK_N samples, BLOCK_C channels): dpool = dl @ W[:, chunk] / HW, stored at
                       each of the HW pixels.
    _head_dw_kernel    program per BLOCK_C channels: dW[:, chunk] = sum over sample blocks of dl^T @ pooled,
                       and db = sum_n dl (program 0).
x may be channels_last or NCHW dense (any other layout is copied once to channels_last); dx takes x's
layout. Logits are in x's dtype (as an autocast linear gives), dW / db in the parameters' dtypes.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .batchnorm import _dense_strides, _memory_format, _pixel_strides
from .runtime import INTERPRETER_STORE_DTYPES, cdiv, check_tensor, next_power_of_2, register_op
from .runtime import launch as _launch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_CLASSES = 256  # the (BLOCK_N, BLOCK_K) logits tile lives in registers
BLOCK_N = 16
BLOCK_C = 64


@triton.jit
def _pool_kernel(x_ptr, pooled_ptr, N, C, HW, stride_n, stride_hw, stride_c,
                 BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr):
    """pooled[n, c] = sum_hw x[n, hw, c] / HW for a (BLOCK_N, BLOCK_C) block, fp32."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows < N)[:, None] & (cols < C)[None, :]
    ptrs = x_ptr + rows[:, None].to(tl.int64) * stride_n + cols[None, :] * stride_c
    acc = tl.zeros((BLOCK_N, BLOCK_C), dtype=tl.float32)
    for hw in range(0, HW):
        acc += tl.load(ptrs + hw * stride_hw, mask=mask, other=0.0).to(tl.float32)
    tl.store(pooled_ptr + rows[:, None] * C + cols[None, :], acc / HW, mask=mask)


@triton.jit
def _head_kernel(pooled_ptr, w_ptr, b_ptr, out_ptr, N, C, K, stride_wk, stride_wc,
                 HAS_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):
    """logits (BLOCK_N, K) = pooled @ W^T + b, accumulated over BLOCK_C channel chunks."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    rmask, kmask = rows < N, ks < K
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        cmask = cols < C
        p = tl.load(pooled_ptr + rows[:, None] * C + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0)
        w = tl.load(w_ptr + ks[None, :] * stride_wk + cols[:, None] * stride_wc, mask=cmask[:, None] & kmask[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.dot(p, w, input_precision="ieee")
    if HAS_B:
        acc += tl.load(b_ptr + ks, mask=kmask, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None] * K + ks[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=rmask[:, None] & kmask[None, :])


@triton.jit
def _head_dx_kernel(dl_ptr, w_ptr, dx_ptr, N, C, HW, K, stride_n, stride_hw, stride_c, stride_dln, stride_dlk,
                    stride_wk, stride_wc, BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):
    """dx[n, hw, c] = (dl @ W)[n, c] / HW for a (BLOCK_N, BLOCK_C) block, written at every pixel."""
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ks = tl.arange(0, BLOCK_K)
    rmask, cmask, kmask = rows < N, cols < C, ks < K
    dl = tl.load(dl_ptr + rows[:, None] * stride_dln + ks[None, :] * stride_dlk, mask=rmask[:, None] & kmask[None, :],
                 other=0.0).to(tl.float32)
    w = tl.load(w_ptr + ks[:, None] * stride_wk + cols[None, :] * stride_wc, mask=kmask[:, None] & cmask[None, :],
                other=0.0).to(tl.float32)
    dpool = (tl.dot(dl, w, input_precision="ieee") / HW).to(dx_ptr.dtype.element_ty)
    mask = rmask[:, None] & cmask[None, :]
    ptrs = dx_ptr + rows[:, None].to(tl.int64) * stride_n + cols[None, :] * stride_c
    for hw in range(0, HW):
        tl.store(ptrs + hw * stride_hw, dpool, mask=mask)


@triton.jit
def _head_dw_kernel(dl_ptr, pooled_ptr, dw_ptr, db_ptr, N, C, K, stride_dln, stride_dlk,
                    BLOCK_N: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr):
    """dW[:, chunk] (K, BLOCK_C) = sum over sample blocks of dl^T @ pooled[:, chunk] (fp32); program 0
    also writes db = sum_n dl."""
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    ks = tl.arange(0, BLOCK_K)
    cmask, kmask = cols < C, ks < K
    acc = tl.zeros((BLOCK_K, BLOCK_C), dtype=tl.float32)
    db = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        rows = n0 + tl.arange(0, BLOCK_N)
        rmask = rows < N
        dl = tl.load(dl_ptr + rows[:, None] * stride_dln + ks[None, :] * stride_dlk,
                     mask=rmask[:, None] & kmask[None, :], other=0.0).to(tl.float32)
        p = tl.load(pooled_ptr + rows[:, None] * C + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0)
        acc += tl.dot(tl.trans(dl), p, input_precision="ieee")
        db += tl.sum(dl, axis=0)
    tl.store(dw_ptr + ks[:, None] * C + cols[None, :], acc, mask=kmask[:, None] & cmask[None, :])
    if tl.program_id(0) == 0:
        tl.store(db_ptr + ks, db, mask=kmask)


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def _pixels(x: torch.Tensor):
    """(x, memory format, (stride_n, stride_hw, stride_c)): x copied once to channels_last when its H and W
    cannot be addressed with one stride."""
    strides = _pixel_strides(x)
    fmt = _memory_format(x)
    if strides is None:
        x = x.contiguous(memory_format=fmt)
        strides = _pixel_strides(x)
    return x, fmt, strides


def _block_k(K: int) -> int:
    return max(16, next_power_of_2(K))


def pool_head_forward(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]):
    """(logits (N, K) in x's dtype, pooled (N, C) fp32); the bias is copied when not contiguous."""
    x, _, (sn, shw, sc) = _pixels(x)
    N, C, H, W = x.shape
    K = weight.shape[0]
    bias = bias.contiguous() if bias is not None else None
    pooled = torch.empty((N, C), device=x.device, dtype=torch.float32)
    logits = torch.empty((N, K), device=x.device, dtype=x.dtype)
    if N == 0:
        return logits, pooled
    _launch(_pool_kernel, (cdiv(N, BLOCK_N), cdiv(C, BLOCK_C)), x, pooled, N, C, H * W, sn, shw, sc,
            BLOCK_N=BLOCK_N, BLOCK_C=BLOCK_C, num_warps=4)
    _launch(_head_kernel, (cdiv(N, BLOCK_N),), pooled, weight, bias if bias is not None else weight, logits,
            N, C, K, weight.stride(0), weight.stride(1), HAS_B=bias is not None, BLOCK_N=BLOCK_N, BLOCK_C=BLOCK_C,
            BLOCK_K=_block_k(K), num_warps=4)
    return logits, pooled


def pool_head_backward(dlogits: torch.Tensor, x: torch.Tensor, pooled: torch.Tensor, weight: torch.Tensor,
                       need_dx: bool):
    """(dx in x's layout or None, dW (K, C) fp32, db (K,) fp32)."""
    N, C, H, W = x.shape
    K = weight.shape[0]
    dev = x.device
    dw = torch.empty((K, C), device=dev, dtype=torch.float32)
    dx = None
    if need_dx:
        fmt = _memory_format(x)
        dx = torch.empty_strided(x.shape, _dense_strides(tuple(x.shape), fmt), device=dev, dtype=x.dtype)
        sn, shw, sc = _pixel_strides(dx)
        if N:
            _launch(_head_dx_kernel, (cdiv(N, BLOCK_N), cdiv(C, BLOCK_C)), dlogits, weight, dx, N, C,
                    H * W, K, sn, shw, sc, dlogits.stride(0), dlogits.stride(1), weight.stride(0), weight.stride(1),
                    BLOCK_N=BLOCK_N, BLOCK_C=BLOCK_C, BLOCK_K=_block_k(K), num_warps=4)
    if C == 0:  # no channel block, so no program of the kernel below to write db
        return dx, dw, dlogits.sum(0, dtype=torch.float32)
    db = torch.empty((K,), device=dev, dtype=torch.float32)
    _launch(_head_dw_kernel, (cdiv(C, BLOCK_C),), dlogits, pooled, dw, db, N, C, K, dlogits.stride(0),
            dlogits.stride(1), BLOCK_N=BLOCK_N, BLOCK_C=BLOCK_C, BLOCK_K=_block_k(K), num_warps=4)
    return dx, dw, db


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _pool_head_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> list[torch.Tensor]:
    logits, pooled = pool_head_forward(x, weight, bias)
    return [logits, pooled]


def _pool_head_backward_op(dlogits: torch.Tensor, x: torch.Tensor, pooled: torch.Tensor, weight: torch.Tensor,
                           need_dx: bool) -> list[torch.Tensor]:
    dx, dw, db = pool_head_backward(dlogits, x, pooled, weight, need_dx)
    return [dx if dx is not None else x.new_empty((0,)), dw, db]


def _setup_context(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.w_dtype = weight.dtype
    ctx.b_dtype = bias.dtype if bias is not None else None
    ctx.save_for_backward(x, output[1], weight)  # x only for its shape and layout (dx is written, not read)


def _backward(ctx, grads):
    x, pooled, weight = ctx.saved_tensors
    need_x, need_w, need_b = (bool(n) for n in ctx.needs_input_grad[:3])
    dx, dw, db = _pool_head_backward_call(grads[0], x, pooled, weight, need_x)
    return (dx if need_x else None, dw.to(ctx.w_dtype) if need_w else None,
            db.to(ctx.b_dtype) if need_b and ctx.b_dtype is not None else None)


_pool_head_backward_call = register_op("tk::pool_head_backward", _pool_head_backward_op)
_pool_head_call = register_op("tk::pool_head", _pool_head_op, setup_context=_setup_context, backward=_backward)


def pool_head(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``F.linear(F.adaptive_avg_pool2d(x, 1).flatten(1), weight, bias)`` for x (N, C, H, W) fp32 / fp16 /
    bf16 and weight (K, C), K <= 256; differentiable in x, weight and bias; logits in x's dtype."""
    check_tensor("x", x, ndim=4, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_STORE_DTYPES)
    check_tensor("weight", weight, ndim=2, dtypes=DTYPES, device=x.device)
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"weight has {weight.shape[1]} input features but x has {x.shape[1]} channels")
    if not 1 <= weight.shape[0] <= MAX_CLASSES:
        raise ValueError(f"weight has {weight.shape[0]} classes; pool_head supports 1..{MAX_CLASSES}")
    if bias is not None:
        check_tensor("bias", bias, ndim=1, dtypes=DTYPES, device=x.device)
        if bias.shape[0] != weight.shape[0]:
            raise ValueError(f"bias has {bias.shape[0]} values but weight has {weight.shape[0]} classes")
    if x.shape[2] * x.shape[3] == 0:
        raise ValueError(f"x has no pixels to average (shape {tuple(x.shape)})")
    return _pool_head_call(x, weight, bias)[0]
