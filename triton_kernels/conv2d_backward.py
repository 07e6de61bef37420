"""Conv2d's backward (see conv2d.py for the forward and its math): dz = dy * (y > 0) (relu; the mask from the
saved output, as torch's relu backward takes it), dbias = sum_{b, oh, ow} dz, dresidual = dz; dw from the
flat-K kernel on that path (layers with few input channels, `_conv2d_flat_dw_kernel` in conv2d_kernels.py,
its own op, so that torch.compile records its launches as it records the forward's); dx (and dw elsewhere) from
cuDNN's ``aten.convolution_backward``, the kernels torch's own conv2d backward runs.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from autotune import spaces

from .conv2d_kernels import (SUM_BLOCK_J, SUM_BLOCK_S, _conv2d_flat_dw_kernel, _flat_columns, _pixels,
                             _sum_partials_kernel, _taps, flat_k_pad)
from .launcher import BoundKernel, bind
from .runtime import Autotuner, Config, bucket, cdiv, is_fake, num_sms, register_op, register_tuner

_flat_dw_tuner = register_tuner(Autotuner("conv2d_flat_dw", [_conv2d_flat_dw_kernel, _flat_columns, _pixels, _taps],
                                          spaces.CONV2D_FLAT_DW_CONFIGS,
                                          interpret_config=spaces.CONV2D_FLAT_DW_INTERPRET_CONFIG))


class Conv2dWeightGradKey(NamedTuple):
    """What a tuned flat-K weight-gradient config depends on."""
    m: int  # output pixels, bucketed
    n: int
    c: int
    kh: int
    kw: int
    stride_h: int
    stride_w: int
    dtype: torch.dtype
    precision: str


class _WeightGradPlan(NamedTuple):
    """A weight-gradient key's tuned config bound to its compiled kernels."""
    kernel: BoundKernel
    reduce: BoundKernel
    programs: int
    n_blocks: int


# (Conv2dWeightGradKey, padding, weight dtype, device) -> _WeightGradPlan, made at a key's first eager call
_WEIGHT_GRAD_PLANS: dict[tuple, _WeightGradPlan] = {}


def conv2d_weight_grad_flat(x, dz, weight, stride=(1, 1), padding=(0, 0), precision="ieee", *,
                            config: Config | None = None) -> torch.Tensor:
    """The gradient of ``weight`` (C_out, C_in, KH, KW), shaped, laid out and typed like it, for the conv of
    x (B, C_in, H, W) whose pre-activation gradient is dz (B, C_out, H_out, W_out), both by strides: the
    flat-K kernel (see `_conv2d_flat_dw_kernel`) accumulates fp32 partials, `_sum_partials_kernel` sums them
    into the weight's layout. config: force the weight-gradient kernel's (tests)."""
    B, C, H, W = x.shape
    N, H_out, W_out = dz.shape[1], dz.shape[2], dz.shape[3]
    KH, KW = weight.shape[2], weight.shape[3]
    (sh, sw), (ph, pw) = stride, padding
    M, K = B * H_out * W_out, KH * KW * C
    dw = torch.empty_like(weight)
    if M == 0:
        return dw.zero_()
    prec = precision if dz.dtype == torch.float32 else "ieee"
    k_pad = flat_k_pad(K)
    key = Conv2dWeightGradKey(m=bucket(M), n=N, c=C, kh=KH, kw=KW, stride_h=sh, stride_w=sw, dtype=dz.dtype,
                              precision=prec)
    plan = _WEIGHT_GRAD_PLANS.get((key, ph, pw, weight.dtype, dz.device)) if config is None else None
    if plan is None:
        n_sms = num_sms(dz.device, default=2)
        flags = dict(KH=KH, KW=KW, STRIDE_H=sh, STRIDE_W=sw, PAD_H=ph, PAD_W=pw, PRECISION=prec, C_IN=C, K_PAD=k_pad)
        reduce = bind(_sum_partials_kernel, C_IN=C, KH=KH, KW=KW, BLOCK_S=SUM_BLOCK_S, BLOCK_J=SUM_BLOCK_J,
                      num_warps=4)

        def bound(cfg: Config) -> _WeightGradPlan:
            n_blocks = cdiv(N, cfg.kwargs["BLOCK_N"])
            # about 16 warps per SM (4 programs of 4 warps, 2 of 8), each walking every S-th row block
            programs = max(1, min(cdiv(M, cfg.kwargs["BLOCK_M"]), cdiv(max(1, 16 // cfg.num_warps) * n_sms, n_blocks)))
            return _WeightGradPlan(bind(_conv2d_flat_dw_kernel, **flags, **cfg.kwargs, num_warps=cfg.num_warps,
                                        num_stages=cfg.num_stages), reduce, programs, n_blocks)

        if config is None:
            config = _flat_dw_tuner.pick(
                key, lambda cfg: _weight_grad_launch(bound(cfg), x, dz, dw, M, k_pad),
                lambda: spaces.candidates("conv2d_flat_dw", M=M, N=N, K=K, dtype=dz.element_size()),
                tracing=is_fake(x, dz))
            plan = bound(config)
            if not is_fake(x, dz):
                _WEIGHT_GRAD_PLANS[(key, ph, pw, weight.dtype, dz.device)] = plan
        else:
            plan = bound(config)
    _weight_grad_launch(plan, x, dz, dw, M, k_pad)
    return dw


def _weight_grad_launch(plan: _WeightGradPlan, x, dz, dw, M: int, k_pad: int) -> None:
    """The two launches of a weight-gradient plan: the partials, then their sum into dw."""
    N = dz.shape[1]
    part = dz.new_empty((plan.programs, k_pad, N), dtype=torch.float32)
    plan.kernel.launch((plan.programs, plan.n_blocks), x_ptr=x, dz_ptr=dz, part_ptr=part, M=M, N=N, H=x.shape[2],
                       W=x.shape[3], H_out=dz.shape[2], W_out=dz.shape[3], stride_xb=x.stride(0),
                       stride_xc=x.stride(1), stride_xh=x.stride(2), stride_xw=x.stride(3), stride_zb=dz.stride(0),
                       stride_zn=dz.stride(1), stride_zh=dz.stride(2), stride_zw=dz.stride(3))
    swn, swc, swh, sww = dw.stride()
    plan.reduce.launch((cdiv(dw.numel(), SUM_BLOCK_J),), part_ptr=part, dw_ptr=dw, S=plan.programs, N=N,
                       stride_ps=k_pad * N, stride_wn=swn, stride_wc=swc, stride_wh=swh, stride_ww=sww)


def _weight_grad_flat_op(x: torch.Tensor, dz: torch.Tensor, weight: torch.Tensor, stride_h: int, stride_w: int,
                         pad_h: int, pad_w: int, precision: str) -> torch.Tensor:
    return conv2d_weight_grad_flat(x, dz, weight, (stride_h, stride_w), (pad_h, pad_w), precision)


_weight_grad_flat_call = register_op("tk::conv2d_weight_grad_flat", _weight_grad_flat_op)


class BackwardSpec(NamedTuple):
    """What a call's backward needs besides its saved tensors (x, weight, the output when activation is relu)."""
    stride: list
    padding: list
    precision: str
    flat: bool  # the weight gradient from the flat-K kernel
    bias_dtype: Optional[torch.dtype]
    res_dtype: Optional[torch.dtype]


def input_grads(spec: BackwardSpec, dy, x, weight, y, needs) -> tuple:
    """(dx, dw, dbias, dresidual), each None where ``needs`` (x, weight, bias, residual) says so: dz = dy behind
    the ReLU mask of the saved output y (None: no activation); dw from the flat-K kernel on that path (fp32,
    then the weight's dtype), else with dx from cuDNN's convolution backward (in x's dtype, dw then cast to
    the weight's, as autocast's cast of the weight would give); dbias a sum, dresidual = dz."""
    need_x, need_w, need_b, need_r = needs
    dz = torch.ops.aten.threshold_backward(dy, y, 0) if y is not None else dy
    dx = dw = None
    if need_w and spec.flat:
        dw = _weight_grad_flat_call(x, dz, weight, *spec.stride, *spec.padding, spec.precision)
        need_w = False
    if need_x or need_w:
        dx, dw_cudnn, _ = torch.ops.aten.convolution_backward(dz, x, weight.to(x.dtype), None, spec.stride,
                                                              spec.padding, [1, 1], False, [0, 0], 1,
                                                              [bool(need_x), bool(need_w), False])
        dw = dw_cudnn.to(weight.dtype) if dw_cudnn is not None else dw
    dbias = dz.sum((0, 2, 3), dtype=torch.float32).to(spec.bias_dtype) if need_b and spec.bias_dtype else None
    dres = dz.to(spec.res_dtype) if need_r and spec.res_dtype else None
    return dx, dw, dbias, dres
