"""Conv2d as an implicit GEMM on NHWC (channels_last) activations, with a fused bias + residual + ReLU
epilogue and, as a separate variant, the batch-norm statistics of its output; backward through cuDNN,
except the weight gradient of layers with few input channels.

Shapes: x (B, C_in, H, W) read with its strides (channels_last is the fast layout; a contiguous NCHW x
works too, its channel loads strided; one sample under 2**31 elements), weight (C_out, C_in, KH, KW) as
nn.Conv2d's (any float dtype: cast to x's when packed), bias (C_out,),
residual (B, C_out, H_out, W_out) any strides, y (B, C_out, H_out, W_out) channels_last in x's dtype, with
H_out = (H + 2 pad_h - KH) // stride_h + 1 (likewise W_out); dilation 1, one group. Inputs fp32 / fp16 /
bf16 with fp32 accumulation (fp32: "ieee" or "tf32" dots); the CPU interpreter computes fp32 and fp16 only.

Math, for output pixel (b, oh, ow) and output channel n:
    z[b, n, oh, ow] = bias[n] + residual[b, n, oh, ow]
                      + sum_{kh, kw} sum_{c < C_in} x[b, c, oh*sh - ph + kh, ow*sw - pw + kw] * w[n, c, kh, kw]
    y = act(z)    (x outside [0, H) x [0, W) reads as 0: the zero padding)
The residual is added before the activation, as a ResNet block's relu(bn2(conv2(.)) + identity) does.
GEMM view: rows m = (b, oh, ow) over M = B * H_out * W_out, columns n over C_out, reduction over
K = KH * KW * C_in walked as (tap (kh, kw), block of C_in). For tap (kh, kw) the A tile is the NHWC row of
the input pixel under that tap for every output pixel of the tile (a gather of BLOCK_M rows, each
BLOCK_K contiguous channels); the B tile is rows (kh, kw, c-block) of the weight packed once as
(KH, KW, C_in, C_out) contiguous, so it is a plain (K, C_out) row-major matrix read coalesced.

Few input channels (C_in < 16, K = KH * KW * C_in <= 128: a network's stem) take the flat-K kernels
instead: K flattened into one gathered tile, forward and weight gradient (see the comment above
`_flat_columns` in conv2d_kernels.py, where every kernel of this file lives). 16-bit or tf32 layers with
many channels (see :func:`transposed_beats_tiled`), stride 1 with "same" padding or stride 2 with the padding
that halves the map, take the transposed kernel: out^T = W . X^T with the weight as (C_out, KH, KW, C_in) and
both operands through TMA (see the comment above `_conv2d_transposed_kernel`).

Backward (conv2d_backward.py): dx from cuDNN's ``aten.convolution_backward``, dw too except on the flat-K path.

Statistics variant (STATS): the epilogue also writes, per M-tile t and channel n, the fp32 sum of z over
the tile's rows and M2 = sum (z - tile mean)^2 (centred in the tile: no cancellation when the mean is
large against the spread); :func:`merge_tile_stats` combines them (Chan's formula) into the batch mean
and biased variance a training batch norm of y needs, without its reduction pass over y.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from autotune import spaces

from .conv2d_backward import BackwardSpec, conv2d_weight_grad_flat, input_grads  # noqa: F401  (re-exported)
from .conv2d_kernels import (_conv2d_epilogue, _conv2d_flat_kernel, _conv2d_kernel, _conv2d_transposed_kernel,
                             _flat_columns, _pixels, _taps, flat_k_pad)
from .tma import _ensure_allocator, _tma_device
from .gemm_kernels import _apply_act, _tile_coords
from .launcher import BoundKernel, bind
from .runtime import (INTERPRET, cdiv, Autotuner, Config, bucket, check_bias, check_choice, check_tensor,
                      config_from, config_str, is_fake, num_sms, register_op, register_tuner, torch_conv_precision)

ACTIVATIONS = ("none", "relu")
PRECISIONS = ("ieee", "tf32")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INTERPRETER_DTYPES = (torch.float32, torch.float16)  # no bf16 tl.dot in the interpreter


# ----------------------------------------------------------------------------------------------------
# Tuning: candidates from the declared conv2d space (autotune/spaces.py), one launch plan per key
# ----------------------------------------------------------------------------------------------------
class Conv2dKey(NamedTuple):
    """What a tuned conv2d config depends on (the cache entry's fields)."""
    m: int  # output pixels B x H_out x W_out, bucketed (next power of two)
    n: int  # output channels
    c: int  # input channels
    kh: int
    kw: int
    stride_h: int
    stride_w: int
    dtype: torch.dtype
    precision: str  # "ieee" | "tf32" (fp32 inputs; 16-bit inputs are always "ieee")
    activation: str
    has_bias: bool
    has_residual: bool
    stats: bool  # the epilogue also writes the batch-norm partial statistics


class Conv2dTransposedKey(NamedTuple):
    """What a tuned config of the transposed kernel depends on: its tiles are whole rows of the H x W input map
    seen at the stride."""
    m: int  # output pixels B x H_out x W_out, bucketed
    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    stride: int
    dtype: torch.dtype
    precision: str
    activation: str
    has_bias: bool
    has_residual: bool


class _Conv2dPlan(NamedTuple):
    """A key's tuned config bound to its compiled kernel (the launch path of every later call)."""
    kernel: BoundKernel
    block_m: int
    block_n: int
    flat: bool  # the flat-K kernel (C_in is its constexpr), else the tiled one


class _TransposedPlan(NamedTuple):
    """A transposed-kernel key's tuned config bound to its compiled kernel."""
    kernel: BoundKernel
    block_p: int
    block_n: int
    per_sm: int


# (Conv2dKey | Conv2dTransposedKey, padding, kind, device) -> plan, made at a key's first eager call
_PLANS: dict[tuple, "_Conv2dPlan | _TransposedPlan"] = {}

_tuner = register_tuner(Autotuner("conv2d", [_conv2d_kernel, _pixels, _conv2d_epilogue, _tile_coords, _apply_act],
                                  spaces.CONV2D_TUNER_CONFIGS, interpret_config=spaces.CONV2D_INTERPRET_CONFIG))
_flat_tuner = register_tuner(Autotuner("conv2d_flat", [_conv2d_flat_kernel, _flat_columns, _pixels, _taps,
                                                       _conv2d_epilogue, _tile_coords, _apply_act],
                                       spaces.CONV2D_FLAT_CONFIGS,
                                       interpret_config=spaces.CONV2D_FLAT_INTERPRET_CONFIG))
_transposed_tuner = register_tuner(Autotuner("conv2d_transposed", [_conv2d_transposed_kernel, _tile_coords, _apply_act],
                                             spaces.CONV2D_TRANSPOSED_TUNER_CONFIGS,
                                             interpret_config=spaces.CONV2D_TRANSPOSED_INTERPRET_CONFIG))

# The flat-K kernels serve layers with C_in under the tiled kernel's smallest K step and K = KH x KW x C_in
# up to FLAT_K_MAX ("auto"); path="flat" / "tiled" forces one (tests, benchmarks).
FLAT_C_MAX = 16
FLAT_K_MAX = 128
PATHS = ("auto", "flat", "tiled", "transposed")
# Where the transposed kernel was measured ahead of cuDNN's forward (the ResNet model's routing, `transposed_wins`):
# 16-bit, C_in >= 512 on maps of at most 16 pixels (results/NVIDIA_H100_80GB_HBM3/runs/
# 2026-11-27_3d22218_conv-transposed-probe: 1.33x at 512 channels 4 x 4).
TRANSPOSED_MIN_C = 512
TRANSPOSED_MAX_PIXELS = 16
# Where "auto" runs it rather than the tiled kernel (`transposed_beats_tiled`): 16-bit, or fp32 at tf32, with at
# least 64 input channels and 8192 output pixels (B x H x W). Measured on an H200, kernel times
# (results/NVIDIA_H200/runs/2026-11-28_39c6ac2_conv-auto-probe): at ResNet-18's 3 x 3 layers, batch 512 (8192 to
# 524288 pixels), the transposed kernel takes 0.66-0.82x the tiled one's time in bf16 and 0.60-0.70x at tf32
# (0.95-1.13x cuDNN's speed); at 16 samples of 8 x 8 (1024 pixels) the tiled kernel is 2-5 % ahead.
# At stride 2 (results/NVIDIA_H200/runs/2026-11-28_4059e14_conv-stride2-probe, ResNet-18's stride-2 layers): at
# tf32 the same rule holds (0.69-0.86x the tiled kernel's time from 8192 pixels on, 1.13x at 1024); in 16-bit
# the transposed kernel wins the 3 x 3 layers at batch 512 (0.74-0.87x; 9.7 G multiply-adds each) and loses at
# batch 64 (1.09x, 1.2 G) and on the 1 x 1 ones where they differ most (1.12x at 256 -> 512, 1.1 G): it needs
# TRANSPOSED_AUTO_MIN_MACS_16BIT multiply-adds there.
TRANSPOSED_AUTO_MIN_C = 64
TRANSPOSED_AUTO_MIN_PIXELS = 8192
TRANSPOSED_AUTO_MIN_MACS_16BIT = 2 ** 32


def uses_flat(C: int, KH: int, KW: int, path: str = "auto") -> bool:
    """Whether a layer with C input channels and a KH x KW kernel runs the flat-K kernels."""
    if path == "auto":
        return C < FLAT_C_MAX and KH * KW * C <= FLAT_K_MAX
    return path == "flat"


def transposed_wins(x) -> bool:
    """Whether x is of the inputs the transposed kernel was measured ahead of cuDNN on: 16-bit, at least
    TRANSPOSED_MIN_C channels, at most TRANSPOSED_MAX_PIXELS pixels per map."""
    return (x.element_size() == 2 and x.shape[1] >= TRANSPOSED_MIN_C
            and x.shape[-2] * x.shape[-1] <= TRANSPOSED_MAX_PIXELS)


def transposed_beats_tiled(x, KH: int, KW: int, N: int, stride: tuple, precision: str) -> bool:
    """Whether "auto" prefers the transposed kernel to the tiled one for x and a KH x KW x N weight (computed
    at ``precision``, which applies to fp32), as measured (see TRANSPOSED_AUTO_MIN_C): at stride 1, where it
    beats cuDNN (:func:`transposed_wins`); for 16-bit or fp32 at tf32, from TRANSPOSED_AUTO_MIN_C input channels
    and TRANSPOSED_AUTO_MIN_PIXELS output pixels on, and at stride 2 in 16-bit also from
    TRANSPOSED_AUTO_MIN_MACS_16BIT multiply-adds on."""
    stride = tuple(stride)
    if stride not in ((1, 1), (2, 2)):
        return False
    if stride == (1, 1) and transposed_wins(x):
        return True
    if x.dtype == torch.float32 and precision != "tf32":
        return False
    B, C, H, W = x.shape
    pixels = B * (H // stride[0]) * (W // stride[1])
    if C < TRANSPOSED_AUTO_MIN_C or pixels < TRANSPOSED_AUTO_MIN_PIXELS:
        return False
    return stride == (1, 1) or x.dtype == torch.float32 or pixels * C * KH * KW * N >= TRANSPOSED_AUTO_MIN_MACS_16BIT


def transposed_problem(x, KH: int, KW: int, N: int, stride: tuple, padding: tuple, residual, stats: bool) -> str | None:
    """Why the transposed kernel cannot compute this call (``residual``: the tensor or None), or None when it
    can."""
    B, C, H, W = x.shape
    sh, sw = stride
    problem = _transposed_geometry(H, W, KH, KW, stride, padding)
    if problem is not None:
        return problem
    if stats:
        return "it has no batch-norm statistics epilogue"
    if residual is not None and not residual.is_contiguous(memory_format=torch.channels_last):
        return "it reads the residual as a dense channels_last tensor"
    if is_fake(x) or torch.compiler.is_compiling():
        return "torch.compile is tracing it (compiled graphs run the tiled kernel, as the GEMM's run its pointer kernel)"
    if C % 16:
        return f"it needs C_in a multiple of 16, got {C}"
    if not INTERPRET and not _tma_device(x):
        return "it reads its operands through TMA: a GPU of compute capability 9 or more"
    if not _transposed_configs(B * H * W // sh // sw, N, C, H // sh, W // sw, KH * KW, x.element_size()):
        return f"none of its tiles (whole rows of a power-of-two W_out) tiles the {H // sh} x {W // sw} output map"
    if not x.is_contiguous(memory_format=torch.channels_last) or x.data_ptr() % 16:
        return "it reads x through TMA: a dense channels_last x, 16-byte aligned"
    return None


def _transposed_geometry(H: int, W: int, KH: int, KW: int, stride: tuple, padding: tuple) -> str | None:
    """Why the transposed kernel's indexing cannot serve this stride and padding on an H x W map, or None."""
    (sh, sw), (ph, pw) = stride, padding
    if sh != sw or sh not in (1, 2) or H % sh or W % sw or (out_size(H, KH, sh, ph), out_size(W, KW, sw, pw)) != (
            H // sh, W // sw):
        return ("it needs stride 1 or 2 in both dimensions, a map the stride divides and the padding that gives an "
                "(H / stride) x (W / stride) output ('same' padding at stride 1)")
    return None


def _transposed_configs(M: int, N: int, C: int, H: int, W: int, taps: int, elem: int) -> list[Config]:
    """The transposed kernel's candidates for an H x W output map (the interpreter: its one config, if it
    fits)."""
    if INTERPRET:
        cfg = spaces.CONV2D_TRANSPOSED_INTERPRET_CONFIG
        ok = C % cfg.kwargs["BLOCK_K"] == 0 and spaces.transposed_rows(cfg.kwargs["BLOCK_P"], H, W) is not None
        return [cfg] if ok else []
    return spaces.candidates("conv2d_transposed", M=M, N=N, C=C, H=H, W=W, taps=taps, dtype=elem)


def kernel_kind(x, KH: int, KW: int, N: int, stride: tuple, padding: tuple, precision: str, path: str = "auto",
                residual=None, stats: bool = False) -> str:
    """"flat", "tiled" or "transposed": the kernel a forward at ``precision`` (with ``residual``, a tensor or
    None) runs (``path`` "auto": the flat-K kernels for few input channels, the transposed one where it was
    measured to win, else the tiled one)."""
    if path != "auto":
        return path
    if uses_flat(x.shape[1], KH, KW):
        return "flat"
    if (transposed_beats_tiled(x, KH, KW, N, stride, precision)
            and transposed_problem(x, KH, KW, N, stride, padding, residual, stats) is None):
        return "transposed"
    return "tiled"


def _prune(M: int, N: int, C: int, taps: int, elem: int) -> list[Config]:
    """The declared conv2d space's candidates for this shape, best guess first: shared memory, registers,
    tiles not far larger than the problem, no wider than C_out, a K step no longer than C_in."""
    return spaces.candidates("conv2d", M=M, N=N, C=C, taps=taps, dtype=elem)


# ----------------------------------------------------------------------------------------------------
# The packed weight, cached per weight tensor
# ----------------------------------------------------------------------------------------------------
# weight -> (data_ptr, version, dtype, packed): weak keys, so an entry goes when its weight is freed. An entry
# is used only while the weight's storage (data_ptr) and version counter are unchanged: every in-place write
# through the tensor or a view of it (an optimizer step, load_state_dict, nn.init, `with no_grad(): w.mul_()`)
# bumps the version, and the next call repacks. A write through `w.data` is NOT seen (`.data` has a
# version counter of its own): call `clear_packed_weights()` after one.
_PACKED = WeakTensorKeyDictionary()


def pack_weight(weight: torch.Tensor, dtype: torch.dtype | None = None, transposed: bool = False) -> torch.Tensor:
    """The (C_out, C_in, KH, KW) weight as a (KH, KW, C_in, C_out) contiguous copy in ``dtype`` (default: its
    own), detached: one copy kernel, the cast included; ``transposed``: as (C_out, KH, KW, C_in), the
    transposed kernel's layout."""
    view = weight.detach().permute(0, 2, 3, 1) if transposed else weight.detach().permute(2, 3, 1, 0)
    return torch.empty(view.shape, device=weight.device, dtype=dtype or weight.dtype).copy_(view)


def packed_weight(weight: torch.Tensor, dtype: torch.dtype | None = None, transposed: bool = False) -> torch.Tensor:
    """pack_weight(weight, dtype, transposed), from the cache when the weight is unchanged since it was packed
    (in this dtype and layout); while torch.compile traces, the packing is traced (it runs, a small copy, in
    every compiled call), and an inference tensor (made under torch.inference_mode: no version counter) is
    packed on every call. A channels_last weight already in ``dtype`` is its own transposed layout: a view."""
    dtype = dtype or weight.dtype
    if transposed and weight.dtype == dtype and weight.permute(0, 2, 3, 1).is_contiguous():
        return weight.detach().permute(0, 2, 3, 1)
    if is_fake(weight) or torch.compiler.is_compiling() or weight.is_inference():
        return pack_weight(weight, dtype, transposed)
    hit = _PACKED.get(weight)
    ptr, version = weight.data_ptr(), weight._version
    if hit is not None and hit[0] == ptr and hit[1] == version and hit[2] == (dtype, transposed):
        return hit[3]
    packed = pack_weight(weight, dtype, transposed)
    _PACKED[weight] = (ptr, version, (dtype, transposed), packed)
    return packed


def forward_weight(weight: torch.Tensor, dtype: torch.dtype, transposed: bool, precision: str) -> torch.Tensor:
    """The packed weight a forward kernel reads (every kernel reads it by its strides): the transposed kernel's
    (C_out, KH, KW, C_in); for fp32 at tf32 that same memory seen as (KH, KW, C_in, C_out), so that each B tile
    is K-major, the order in which Hopper's tf32 tensor-core products read their B operand; else
    (KH, KW, C_in, C_out) contiguous."""
    if transposed:
        return packed_weight(weight, dtype, transposed=True)
    if dtype == torch.float32 and precision == "tf32":
        return packed_weight(weight, dtype, transposed=True).permute(1, 2, 3, 0)
    return packed_weight(weight, dtype)


def clear_packed_weights() -> None:
    """Forget every cached packed weight (after writes the version counter does not see: ``w.data``)."""
    _PACKED.clear()


# ----------------------------------------------------------------------------------------------------
# Launcher
# ----------------------------------------------------------------------------------------------------
def out_size(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def plan_key(x, KH: int, KW: int, N: int, stride: tuple, padding: tuple, activation: str, precision: str,
             has_bias: bool, has_res: bool, stats: bool, kind: str) -> tuple:
    """The (tuning key, padding, kind, device) a forward's plan is kept under (kind: see :func:`kernel_kind`);
    precision as the call asks it (the key holds it as the kernel runs it: "ieee" for 16-bit inputs)."""
    B, C, H, W = x.shape
    precision = precision if x.dtype == torch.float32 else "ieee"
    (sh, sw), (ph, pw) = stride, padding
    M = B * out_size(H, KH, sh, ph) * out_size(W, KW, sw, pw)
    if kind == "transposed":
        key = Conv2dTransposedKey(m=bucket(M), n=N, c=C, h=H, w=W, kh=KH, kw=KW, stride=sh, dtype=x.dtype,
                                  precision=precision, activation=activation, has_bias=has_bias,
                                  has_residual=has_res)
    else:
        key = Conv2dKey(m=bucket(M), n=N, c=C, kh=KH, kw=KW, stride_h=sh, stride_w=sw, dtype=x.dtype,
                        precision=precision, activation=activation, has_bias=has_bias, has_residual=has_res,
                        stats=bool(stats))
    return key, ph, pw, kind, x.device


def conv2d_forward(x, w_packed, bias=None, residual=None, stride=(1, 1), padding=(0, 0), activation="none",
                   precision="ieee", *, stats=False, out=None, path="auto", config: Config | None = None):
    """y (B, C_out, H_out, W_out) channels_last in x's dtype, from x and the PACKED weight (KH, KW, C_in,
    C_out) (see `_conv2d_kernel`); with ``stats``, (y, part): part (2, cdiv(M, BLOCK_M), C_out) fp32, each
    M-tile's per-channel sum and centred M2 of z (see :func:`merge_tile_stats`).

    out: the buffer y is written to (dense channels_last, x's dtype; tests poison it). path: "auto" (the
    flat-K kernel where :func:`uses_flat`, else the tiled one), "flat" or "tiled". config: force a launch
    configuration (tests; with path "auto" its knobs name the kernel: BLOCK_K is the tiled one's); default:
    the tuner's (persistent cache, launch plan)."""
    if path == "transposed":
        raise ValueError("path='transposed' is conv2d_transposed_forward's (its weight layout is another)")
    B, C, H, W = x.shape
    KH, KW, _, N = w_packed.shape
    (sh, sw), (ph, pw) = stride, padding
    H_out, W_out = out_size(H, KH, sh, ph), out_size(W, KW, sw, pw)
    y = _output(x, (B, N, H_out, W_out), out)
    M = B * H_out * W_out
    has_bias, has_res = bias is not None, residual is not None
    flat = "BLOCK_K" not in config.kwargs if config is not None and path == "auto" else uses_flat(C, KH, KW, path)
    if config is not None and ("BLOCK_K" in config.kwargs) == flat:
        raise ValueError(f"config {config} is not a {'flat-K' if flat else 'tiled'} conv2d config (path={path!r}: "
                         f"the tiled kernel's configs have BLOCK_K, the flat-K kernel's do not)")
    key = plan_key(x, KH, KW, N, (sh, sw), (ph, pw), activation, precision, has_bias, has_res, stats,
                   "flat" if flat else "tiled")
    fake = is_fake(x, w_packed)
    plan = _PLANS.get(key) if config is None else None
    if plan is None:
        flags = dict(KH=KH, KW=KW, STRIDE_H=sh, STRIDE_W=sw, PAD_H=ph, PAD_W=pw, HAS_BIAS=has_bias,
                     HAS_RES=has_res, ACT=activation, STATS=bool(stats), PRECISION=key[0].precision)
        kernel = _conv2d_flat_kernel if flat else _conv2d_kernel
        if flat:
            flags.update(C_IN=C, K_PAD=flat_k_pad(KH * KW * C))

        def bound(cfg: Config) -> _Conv2dPlan:
            return _Conv2dPlan(bind(kernel, **flags, **cfg.kwargs, num_warps=cfg.num_warps,
                                    num_stages=cfg.num_stages), cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"], flat)

        if config is None:
            if flat:
                tuner, listed = _flat_tuner, lambda: spaces.candidates(
                    "conv2d_flat", M=M, N=N, K=KH * KW * C, dtype=x.element_size(), stats=bool(stats))
            else:
                tuner, listed = _tuner, lambda: _prune(M, N, C, KH * KW, x.element_size())
            config = tuner.pick(key[0], lambda cfg: _launch(bound(cfg), x, w_packed, bias, residual, y, stats, M), listed,
                                tracing=fake)
            plan = bound(config)
            if not fake:
                _PLANS[key] = plan
        else:
            plan = bound(config)
    part = _launch(plan, x, w_packed, bias, residual, y, stats, M)
    return (y, part) if stats else y


def _output(x, shape: tuple, out):
    """The output buffer: ``out`` checked (dense channels_last, x's dtype, ``shape``), else a new one."""
    if out is None:
        return torch.empty(shape, device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    if tuple(out.shape) != shape or out.dtype != x.dtype or not out.is_contiguous(memory_format=torch.channels_last):
        raise ValueError(f"out must be a dense channels_last {x.dtype} tensor of shape {shape}")
    return out


def conv2d_transposed_forward(x, w_transposed, bias=None, activation="none", precision="ieee", *, residual=None,
                              stride=1, padding=None, out=None, config: Config | None = None):
    """y = act(conv2d + bias + residual), (B, C_out, H / stride, W / stride) channels_last in x's dtype, from the
    transposed kernel (stride 1 or 2; padding: default (KH // 2, KW // 2), it must give that output size; see
    :func:`transposed_problem` for what it needs): x dense channels_last, w_transposed the weight as (C_out, KH,
    KW, C_in) contiguous (``packed_weight(w, dtype, transposed=True)``), residual (optional) dense channels_last
    of y's shape. out, config: as :func:`conv2d_forward`'s (a config names BLOCK_P, BLOCK_N, BLOCK_K, GROUP_M and
    PER_SM)."""
    B, C, H, W = x.shape
    N, KH, KW, _ = w_transposed.shape
    stride = _pair("stride", stride, 1)
    padding = _pair("padding", (KH // 2, KW // 2) if padding is None else padding, 0)
    problem = _transposed_geometry(H, W, KH, KW, stride, padding)
    if problem is not None:
        raise ValueError(f"the transposed kernel cannot compute stride {stride}, padding {padding} on a {H} x {W} "
                         f"map: {problem}")
    (sh, sw), (ph, pw) = stride, padding
    H_out, W_out = H // sh, W // sw
    if residual is not None and (tuple(residual.shape) != (B, N, H_out, W_out) or residual.device != x.device
                                 or not residual.is_contiguous(memory_format=torch.channels_last)):
        raise ValueError(f"residual must be a dense channels_last tensor of the output's shape {(B, N, H_out, W_out)} "
                         f"on {x.device}, got shape {tuple(residual.shape)}, strides {residual.stride()}")
    y = _output(x, (B, N, H_out, W_out), out)
    M = B * H_out * W_out
    key = plan_key(x, KH, KW, N, stride, padding, activation, precision, bias is not None, residual is not None,
                   False, "transposed")
    fake = is_fake(x, w_transposed)
    plan = _PLANS.get(key) if config is None else None
    if plan is None:
        flags = dict(W=W, C=C, KH=KH, KW=KW, STRIDE=sh, PAD_H=ph, PAD_W=pw, HAS_BIAS=bias is not None,
                     HAS_RES=residual is not None, ACT=activation, PRECISION=key[0].precision)

        def bound(cfg: Config) -> _TransposedPlan:
            kw = dict(cfg.kwargs)
            per_sm, block_p = kw.pop("PER_SM", 1), kw.pop("BLOCK_P")
            rows = spaces.transposed_rows(block_p, H_out, W_out)
            if rows is None or C % kw["BLOCK_K"]:
                raise ValueError(f"config {cfg} does not fit this call: BLOCK_P must be whole rows tiling the "
                                 f"{H_out} x {W_out} output map and BLOCK_K must divide C_in = {C}")
            kernel = bind(_conv2d_transposed_kernel, **flags, BLOCK_B=rows[0], BLOCK_H=rows[1], **kw,
                          num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            return _TransposedPlan(kernel, block_p, kw["BLOCK_N"], per_sm)

        if config is None:
            config = _transposed_tuner.pick(
                key[0], lambda cfg: _launch_transposed(bound(cfg), x, w_transposed, bias, residual, y, M),
                lambda: _transposed_configs(M, N, C, H_out, W_out, KH * KW, x.element_size()), tracing=fake)
            plan = bound(config)
            if not fake:
                _PLANS[key] = plan
        else:
            plan = bound(config)
    _launch_transposed(plan, x, w_transposed, bias, residual, y, M)
    return y


def _launch_transposed(plan: _TransposedPlan, x, w, bias, residual, y, M: int) -> None:
    if M == 0 or y.shape[1] == 0:
        return
    grid, args = launch_args(plan, x, w, bias, residual, y, None, M)
    plan.kernel.launch(grid, **args)


def _launch(plan: _Conv2dPlan, x, w, bias, residual, y, stats: bool, M: int):
    """One launch of a plan (the tuner times its candidates through it); returns the statistics partials
    (or None)."""
    N = y.shape[1]
    part = torch.empty((2, cdiv(M, plan.block_m), N), device=x.device, dtype=torch.float32) if stats else None
    if M == 0 or N == 0:
        return part
    grid, args = launch_args(plan, x, w, bias, residual, y, part, M)
    plan.kernel.launch(grid, **args)
    return part


def launch_args(plan: _Conv2dPlan, x, w, bias, residual, y, part, M: int) -> tuple:
    """(grid, every kernel argument by name) of a plan's launch; absent bias / residual / partials point at
    y, unread."""
    B, C, H, W = x.shape
    if isinstance(plan, _TransposedPlan):  # persistent programs; on the GPU the descriptors need Triton's allocator
        if not INTERPRET:
            _ensure_allocator()
        N = y.shape[1]
        tiles = cdiv(M, plan.block_p) * cdiv(N, plan.block_n)
        programs = max(1, min(tiles, plan.per_sm * num_sms(x.device, default=2)))
        return (programs,), dict(x_ptr=x, w_ptr=w, bias_ptr=bias if bias is not None else y,
                                 res_ptr=residual if residual is not None else y, y_ptr=y, part_ptr=y, B=B, H=H, N=N,
                                 stride_bias=bias.stride(0) if bias is not None else 0, NUM_PROGRAMS=programs)
    N, H_out, W_out = y.shape[1], y.shape[2], y.shape[3]
    sxb, sxc, sxh, sxw = x.stride()
    swh, sww, swc, swn = w.stride()
    srb, srn, srh, srw = residual.stride() if residual is not None else (0, 0, 0, 0)
    args = dict(x_ptr=x, w_ptr=w, bias_ptr=bias if bias is not None else y,
                res_ptr=residual if residual is not None else y, y_ptr=y, part_ptr=part if part is not None else y,
                M=M, N=N, H=H, W=W, H_out=H_out, W_out=W_out, **({} if plan.flat else {"C": C}),
                stride_xb=sxb, stride_xc=sxc, stride_xh=sxh, stride_xw=sxw, stride_wh=swh, stride_ww=sww,
                stride_wc=swc, stride_wn=swn, stride_bias=bias.stride(0) if bias is not None else 0,
                stride_rb=srb, stride_rn=srn, stride_rh=srh, stride_rw=srw)
    return (cdiv(M, plan.block_m) * cdiv(N, plan.block_n),), args


def merge_tile_stats(part: torch.Tensor, M: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, biased variance) per channel, fp32, from the kernel's per-tile partials part (2, T, N) over
    M rows: Chan's merge, M2 = sum_t M2_t + sum_t count_t (mean_t - mean)^2. The tiles' BLOCK_M is a power
    of two, so T = cdiv(M, BLOCK_M) determines it when T >= 2: the next power of two of cdiv(M, T)."""
    tiles = part.shape[1]
    block_m = 1 << (cdiv(M, tiles) - 1).bit_length() if tiles > 1 else max(M, 1)
    counts = (M - torch.arange(tiles, device=part.device) * block_m).clamp(max=block_m).to(torch.float32)
    sums, m2 = part[0], part[1]
    mean = sums.sum(0) / M
    tile_mean = sums / counts[:, None]
    var = (m2.sum(0) + (counts[:, None] * (tile_mean - mean).square()).sum(0)) / M
    return mean, var


# ----------------------------------------------------------------------------------------------------
# torch ops + autograd (the backward is cuDNN's, see the module docstring)
# ----------------------------------------------------------------------------------------------------
def _conv2d_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
               residual: Optional[torch.Tensor], stride_h: int, stride_w: int, pad_h: int, pad_w: int,
               activation: str, precision: str, path: str, config: str) -> torch.Tensor:
    cfg = config_from(config)
    if cfg is not None and path == "auto":  # a forced config names its kernel
        transposed = "BLOCK_P" in cfg.kwargs
    else:
        transposed = kernel_kind(x, weight.shape[2], weight.shape[3], weight.shape[0], (stride_h, stride_w),
                                 (pad_h, pad_w), precision, path, residual) == "transposed"
    if transposed:
        return conv2d_transposed_forward(x, forward_weight(weight, x.dtype, True, precision), bias, activation,
                                         precision, residual=residual, stride=(stride_h, stride_w),
                                         padding=(pad_h, pad_w), config=cfg)
    return conv2d_forward(x, forward_weight(weight, x.dtype, False, precision), bias, residual, (stride_h, stride_w),
                          (pad_h, pad_w), activation, precision, path=path, config=cfg)


def _conv2d_stats_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                     residual: Optional[torch.Tensor], stride_h: int, stride_w: int, pad_h: int, pad_w: int,
                     activation: str, precision: str, path: str, config: str) -> list[torch.Tensor]:
    y, part = conv2d_forward(x, forward_weight(weight, x.dtype, False, precision), bias, residual, (stride_h, stride_w),
                             (pad_h, pad_w), activation, precision, stats=True, path=path, config=config_from(config))
    mean, var = merge_tile_stats(part, y.shape[0] * y.shape[2] * y.shape[3])
    return [y, mean, var]


def backward_spec(weight, bias, residual, stride, padding, precision: str, path: str) -> BackwardSpec:
    return BackwardSpec(list(stride), list(padding), precision,
                        uses_flat(weight.shape[1], weight.shape[2], weight.shape[3], path),
                        bias.dtype if bias is not None else None, residual.dtype if residual is not None else None)


def _setup_context(ctx, inputs, output):
    x, weight, bias, residual, stride_h, stride_w, pad_h, pad_w, activation, precision, path = inputs[:11]
    ctx.spec = backward_spec(weight, bias, residual, (stride_h, stride_w), (pad_h, pad_w), precision, path)
    ctx.save_for_backward(x, weight, output if activation == "relu" else None)


def _backward(ctx, dy):
    return input_grads(ctx.spec, dy, *ctx.saved_tensors, ctx.needs_input_grad[:4]) + (None,) * 8


_conv2d_call = register_op("tk::conv2d", _conv2d_op, setup_context=_setup_context, backward=_backward)
_conv2d_stats_call = register_op("tk::conv2d_stats", _conv2d_stats_op)


# ----------------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------------
def _pair(name: str, value, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each >= minimum, as a pair; else a ValueError naming the argument."""
    pair = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in pair):
        raise ValueError(f"{name} must be an int >= {minimum} or a pair of them, got {value!r}")
    return pair


def validate(x, weight, bias, stride, padding, residual, activation, precision, path="auto", stats=False):
    """Raise a ValueError naming the argument; returns (stride pair, padding pair)."""
    check_tensor("x", x, ndim=4, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_DTYPES)
    check_tensor("weight", weight, ndim=4, dtypes=DTYPES, device=x.device)
    B, C, H, W = x.shape
    C_out, C_in, KH, KW = weight.shape
    if C_in != C:
        raise ValueError(f"weight has shape {tuple(weight.shape)} (C_out, C_in, KH, KW): C_in must equal x's {C} "
                         f"channels (x is (B, C_in, H, W))")
    if min(C_out, KH, KW) < 1:
        raise ValueError(f"weight has shape {tuple(weight.shape)}: C_out, KH and KW must be >= 1")
    sh, sw = _pair("stride", stride, 1)
    ph, pw = _pair("padding", padding, 0)
    H_out, W_out = out_size(H, KH, sh, ph), out_size(W, KW, sw, pw)
    if H_out < 1 or W_out < 1:
        raise ValueError(f"x has spatial size {H} x {W}: with kernel {KH} x {KW}, stride {(sh, sw)} and padding "
                         f"{(ph, pw)} the output would be empty")
    if bias is not None:
        check_bias(bias, C_out, f"C_out={C_out}", DTYPES, x.device)
    if residual is not None:
        check_tensor("residual", residual, ndim=4, dtypes=DTYPES, device=x.device)
        if tuple(residual.shape) != (B, C_out, H_out, W_out):
            raise ValueError(f"residual has shape {tuple(residual.shape)}, expected the output's "
                             f"{(B, C_out, H_out, W_out)}")
    check_choice("activation", activation, ACTIVATIONS)
    check_choice("precision", precision, (*PRECISIONS, None))
    check_choice("path", path, PATHS)
    if path == "flat" and KH * KW * C_in > FLAT_K_MAX:
        raise ValueError(f"path='flat' needs KH x KW x C_in <= {FLAT_K_MAX}, got {KH} x {KW} x {C_in}")
    if path == "transposed":
        problem = transposed_problem(x, KH, KW, C_out, (sh, sw), (ph, pw), residual, stats)
        if problem is not None:
            raise ValueError(f"path='transposed' cannot run this call: {problem}")
    return (sh, sw), (ph, pw)


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1, padding=0,
           residual: torch.Tensor | None = None, activation: str = "none", *, precision: str | None = None,
           path: str = "auto", config: Config | None = None) -> torch.Tensor:
    """act(conv2d(x, weight, bias, stride, padding) + residual), as functional.conv2d (dilation 1, one
    group) followed by the add and the activation: x (B, C_in, H, W), channels_last preferred (any strides
    are read as they are); weight (C_out, C_in, KH, KW) as nn.Conv2d's, in x's dtype or another (an fp32
    master weight under bf16 activations, as autocast hands conv2d: it is cast to x's dtype when packed, once
    per version, see `packed_weight`, and its gradient comes back in its own dtype); residual (B, C_out,
    H_out, W_out); returns y channels_last in x's dtype.
    Differentiable in x, weight, bias and residual (backward behind the ReLU mask: the weight's gradient from
    the flat-K kernel on that path, the rest cuDNN's).
    precision applies to fp32 inputs: "ieee" (exact fp32), "tf32" (tensor cores) or None, what torch's own
    conv2d would use at each call ("tf32" where torch lets cuDNN use TF32 for convolutions, its default, e.g.
    torch.backends.cudnn.allow_tf32; else "ieee"; see runtime.torch_conv_precision). path: "auto" (the
    flat-K kernels for few input channels, the transposed kernel for stride-1 "same" and stride-2 convolutions
    of 16-bit or tf32 inputs with many channels, see :func:`kernel_kind`), "flat", "tiled" or "transposed".
    config: force a launch configuration (tests); default: the tuner's. A call whose signature was seen before takes the
    eager fast path (conv2d_eager.py)."""
    if precision is None:
        precision = torch_conv_precision(x)
    if config is None:
        y = conv2d_eager.fast_conv2d(x, weight, bias, residual, stride, padding, activation, precision, path)
        if y is not None:
            return y
    (sh, sw), (ph, pw) = validate(x, weight, bias, stride, padding, residual, activation, precision, path)
    y = _conv2d_call(x, weight, bias, residual, sh, sw, ph, pw, activation, precision, path,
                     config_str(config) if config is not None else "")
    if config is None and y.numel() > 0:
        conv2d_eager.remember(x, weight, bias, residual, stride, padding, (sh, sw), (ph, pw), activation, precision,
                              path)
    return y


def conv2d_bn_stats(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride=1, padding=0,
                    residual: torch.Tensor | None = None, activation: str = "none", *, precision: str | None = None,
                    path: str = "auto", config: Config | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, var): :func:`conv2d`'s output and the per-channel batch mean and biased variance (fp32) of
    its pre-activation z over (B, H_out, W_out), from the statistics the kernel's epilogue writes (the
    STATS variant) -- what a training BatchNorm2d of y needs, without a reduction pass over y. Not
    differentiable (call it under torch.no_grad()); not yet used by the ResNet model."""
    (sh, sw), (ph, pw) = validate(x, weight, bias, stride, padding, residual, activation, precision, path, stats=True)
    precision = torch_conv_precision(x) if precision is None else precision
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        raise ValueError("conv2d_bn_stats is not differentiable: call it under torch.no_grad()")
    y, mean, var = _conv2d_stats_call(x, weight, bias, residual, sh, sw, ph, pw, activation, precision, path,
                                      config_str(config) if config is not None else "")
    return y, mean, var


from . import conv2d_eager  # noqa: E402  (it builds on this module's launchers and plans)
