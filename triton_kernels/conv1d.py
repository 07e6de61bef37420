"""Conv1d (stride 1, no padding) as an implicit GEMM on channels-last activations, forward and backward,
with a fused bias + ReLU (+ MaxPool1d) epilogue; and a channels-last MaxPool1d for the unfused path.

Shapes: x (B, L, C_in) channels-last, weight (C_out, C_in, k) as nn.Conv1d's, bias (C_out,),
y (B, L_out, C_out) with L_out = L - k + 1; with pool P: y (B, L_out // P, C_out). Every operand is read
with its strides; the Char-CNN model keeps its weights in memory as (k, C_in, C_out), so a weight tile's
rows are contiguous. Inputs fp32 / fp16 / bf16 with fp32 accumulation (fp32: "ieee" or "tf32" dots); the
CPU interpreter computes fp32 and fp16 only (it has no bf16 dot).

Math, for output row l of sample b and output channel n:
    z[b, l, n] = bias[n] + sum_{t < k} sum_{c < C_in} x[b, l + t, c] * w[n, c, t]
    y = act(z),  or with pooling  y[b, j, n] = act(bias[n] + max_{p < P} (z - bias)[b, P*j + p, n])
(max-pool commutes with the per-channel bias and the monotone ReLU, so the pool is taken on the raw sums).
GEMM view: rows m = (b, l) over B * L_out, columns n over C_out, reduction over K = k * C_in walked as
(tap t, channel block). The A tile of tap t is the x rows l + t: shifted windows of one channels-last
block, so the k taps re-read the same rows from L1/L2 rather than HBM.

Backward, with dz = dy * act'(z):
    dx[b, i, c] = sum_t sum_n dz[b, i - t, n] * w[n, c, t]   the same kernel on dz, padded by k - 1 rows
                                                              and the taps flipped (a "full" convolution)
    dw[n, c, t] = sum_{b, l} x[b, l + t, c] * dz[b, l, n]     one GEMM per tap over all rows (split-K)
    dbias[n]    = sum_{b, l} dz[b, l, n]                      (gemm.act_backward's column sums)

The first Char-CNN layer reads uint8 character indices instead of a one-hot x; its kernels (a gather-sum
with fused LayerNorm statistics, ReLU and MaxPool) are in :mod:`triton_kernels.conv1d_gather`, and its
weight gradient is `_conv1d_dw_kernel` with the one-hot built in registers (X_IS_INDEX).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from autotune import spaces

from .gemm import act_backward
from .gemm_kernels import _apply_act, _tile_coords
from .conv2d_kernels import SUM_BLOCK_J, SUM_BLOCK_S, _sum_partials_kernel
from .launcher import BoundKernel, bind
from .tma import _tma_device
from .runtime import (cdiv, INTERPRET, Autotuner, Config, bucket, check_bias, check_choice, check_tensor, is_fake,
                      launch, register_op, register_tuner, sm_count, torch_conv_precision)

ACTIVATIONS = ("none", "relu")
PRECISIONS = ("ieee", "tf32")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INTERPRETER_DTYPES = (torch.float32, torch.float16)  # no bf16 tl.dot in the interpreter
INDEX_DTYPES = (torch.uint8, torch.int32, torch.int64)


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _conv1d_kernel(
    x_ptr, w_ptr, bias_ptr, y_ptr,
    M, N, C, L_in, LP, PAD,
    stride_xb, stride_xl, stride_xc, stride_wn, stride_wc, stride_wt, stride_bias,
    stride_yb, stride_yl, stride_yn,
    KSIZE: tl.constexpr, FLIP: tl.constexpr, POOL: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One program: a BLOCK_M x BLOCK_N tile of y, rows m = (b, j) over M = B * LP, columns n < N.

    For each pool phase p the program walks K = KSIZE * cdiv(C, BLOCK_K) steps (tap t, channel block):
    A = x[b, POOL*j + p + t - PAD, c-block] (BLOCK_M x BLOCK_K; rows outside [0, L_in) read as 0),
    B = w[n-block, c-block, t] (BLOCK_K x BLOCK_N; tap KSIZE-1-t when FLIP), acc += A @ B on tensor cores
    in fp32; the phases' sums are max-reduced. Epilogue: + bias, activation, one store.
    Forward: PAD = 0, FLIP = False. Input gradient: x = dz, PAD = KSIZE - 1, FLIP, w's n / c strides swapped.
    """
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    rows = tl.where(m_ok, offs_m, 0)
    b = rows // LP
    j = rows - b * LP
    x_rows = x_ptr + b.to(tl.int64) * stride_xb
    w_cols = w_ptr + offs_n[None, :] * stride_wn
    n_kb = tl.cdiv(C, BLOCK_K)
    for p in tl.static_range(POOL):
        l0 = j * POOL + p - PAD  # input row of tap 0
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(0, KSIZE * n_kb):
            t = kk // n_kb
            cc = (kk - t * n_kb) * BLOCK_K + offs_k
            li = l0 + t
            a_mask = (m_ok & (li >= 0) & (li < L_in))[:, None] & (cc[None, :] < C)
            a = tl.load(x_rows[:, None] + li[:, None] * stride_xl + cc[None, :] * stride_xc, mask=a_mask, other=0.0)
            tw = KSIZE - 1 - t if FLIP else t
            wt = tl.load(w_cols + cc[:, None] * stride_wc + tw * stride_wt, mask=(cc[:, None] < C) & n_ok[None, :],
                         other=0.0)
            acc = tl.dot(a, wt, acc, input_precision=PRECISION)
        if p == 0:
            best = acc
        else:
            best = tl.maximum(best, acc, propagate_nan=tl.PropagateNan.ALL)
    if HAS_BIAS:
        best += tl.load(bias_ptr + offs_n * stride_bias, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    best = _apply_act(best, ACT)
    y_ptrs = y_ptr + (b.to(tl.int64) * stride_yb + j * stride_yl)[:, None] + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, best.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _conv1d_dw_kernel(
    x_ptr, dz_ptr, part_ptr,
    M, N, C, L_out, ROWS_PER_SPLIT,
    stride_xb, stride_xl, stride_xc, stride_zb, stride_zl, stride_zn,
    KSIZE: tl.constexpr, X_IS_INDEX: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Program (c-block x n-block, tap t, split s): part[s, t, c, n] = sum_m x[b, l + t, c] * dz[b, l, n]
    over the rows m = b * L_out + l of split s (ROWS_PER_SPLIT rows, a multiple of BLOCK_M).

    Each step loads x^T (BLOCK_C x BLOCK_M, the rows shifted by t) and dz (BLOCK_M x BLOCK_N) and
    accumulates their product in fp32; part (S, KSIZE, C, N) is summed over S by the launcher.
    X_IS_INDEX: x holds character indices (B, L) and x[b, i, c] = (x[b, i] == c), the one-hot column
    built in registers (exact in any dtype), so the first layer's weight gradient needs no one-hot tensor.
    """
    n_nb = tl.cdiv(N, BLOCK_N)
    pid_c = tl.program_id(0) // n_nb
    pid_n = tl.program_id(0) % n_nb
    t = tl.program_id(1)
    s = tl.program_id(2)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = offs_c < C
    n_ok = offs_n < N
    start = s * ROWS_PER_SPLIT
    end = tl.minimum(start + ROWS_PER_SPLIT, M)
    acc = tl.zeros((BLOCK_C, BLOCK_N), dtype=tl.float32)
    for m0 in range(start, end, BLOCK_M):
        m = m0 + tl.arange(0, BLOCK_M)
        m_ok = m < end
        rows = tl.where(m_ok, m, 0)
        b = (rows // L_out).to(tl.int64)
        l = rows - b * L_out
        dz = tl.load(dz_ptr + (b * stride_zb + l * stride_zl)[:, None] + offs_n[None, :] * stride_zn,
                     mask=m_ok[:, None] & n_ok[None, :], other=0.0)
        x_off = b * stride_xb + (l + t) * stride_xl
        if X_IS_INDEX:
            raw = tl.load(x_ptr + x_off, mask=m_ok, other=0).to(tl.int64)  # (any index dtype: uint8 too)
            ch = tl.where((raw >= 0) & (raw < C), raw, -1).to(tl.int32)  # outside [0, C): matches no channel
            xt = (offs_c[:, None] == ch[None, :]).to(dz.dtype)
        else:
            xt = tl.load(x_ptr + x_off[None, :] + offs_c[:, None] * stride_xc, mask=c_ok[:, None] & m_ok[None, :],
                         other=0.0)
        acc = tl.dot(xt, dz, acc, input_precision=PRECISION)
    part = part_ptr + ((s * KSIZE + t) * C).to(tl.int64) * N
    tl.store(part + offs_c[:, None] * N + offs_n[None, :], acc, mask=c_ok[:, None] & n_ok[None, :])


@triton.jit
def _conv1d_dw_tma_kernel(
    x_desc, dz_desc, part_ptr, C, N, L, L_BLOCKS, STEPS, STEPS_PER_SPLIT,
    KSIZE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """`_conv1d_dw_kernel`'s partials, its operands read through TMA descriptors (Hopper).

    The rows are walked a sample at a time: step j is sample b = j // L_BLOCKS and its rows l0 = (j % L_BLOCKS) *
    BLOCK_M onwards, L_BLOCKS = cdiv(L_out, BLOCK_M). dz's descriptor is 3-D (B, L_out, N), so the TMA engine
    zero-fills the rows of a block past L_out; x's is 2-D over its (B * L, C) rows, so the x block of tap t starts at
    row b * L + l0 + t whatever sample it runs into (rows multiplied by zeros). No index arithmetic per row and no
    masks: the loads are bulk copies into shared memory that the pipeline overlaps with the tensor-core products.
    Program (c-block x n-block, tap t, split s) sums the steps of split s (STEPS_PER_SPLIT of the STEPS = B *
    L_BLOCKS)."""
    n_nb = tl.cdiv(N, BLOCK_N)
    pid_c = tl.program_id(0) // n_nb
    pid_n = tl.program_id(0) % n_nb
    t = tl.program_id(1)
    s = tl.program_id(2)
    acc = tl.zeros((BLOCK_C, BLOCK_N), dtype=tl.float32)
    for j in range(s * STEPS_PER_SPLIT, tl.minimum(s * STEPS_PER_SPLIT + STEPS_PER_SPLIT, STEPS)):
        b = j // L_BLOCKS
        l0 = (j - b * L_BLOCKS) * BLOCK_M
        xa = x_desc.load([b * L + l0 + t, pid_c * BLOCK_C])
        dz = dz_desc.load([b, l0, pid_n * BLOCK_N]).reshape(BLOCK_M, BLOCK_N)
        acc = tl.dot(tl.trans(xa), dz, acc, input_precision=PRECISION)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    part = part_ptr + ((s * KSIZE + t) * C).to(tl.int64) * N
    tl.store(part + offs_c[:, None] * N + offs_n[None, :], acc, mask=(offs_c < C)[:, None] & (offs_n < N)[None, :])


@triton.jit
def _max_pool_kernel(
    x_ptr, y_ptr, M, N, LO, stride_xb, stride_xl, stride_xn, stride_yb, stride_yl, stride_yn,
    POOL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """MaxPool1d(POOL, stride POOL) on channels-last x (B, L, N): y[b, j, n] = max_{p < POOL} x[b, POOL*j + p, n]
    on a BLOCK_M x BLOCK_N tile of rows m = (b, j) over M = B * LO (NaN propagates, as in torch)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    rows = tl.where(offs_m < M, offs_m, 0)
    b = (rows // LO).to(tl.int64)
    j = rows - b * LO
    x_ptrs = x_ptr + (b * stride_xb + j * POOL * stride_xl)[:, None] + offs_n[None, :] * stride_xn
    best = tl.load(x_ptrs, mask=mask, other=0.0)
    for p in tl.static_range(1, POOL):
        best = tl.maximum(best, tl.load(x_ptrs + p * stride_xl, mask=mask, other=0.0),
                          propagate_nan=tl.PropagateNan.ALL)
    tl.store(y_ptr + (b * stride_yb + j * stride_yl)[:, None] + offs_n[None, :] * stride_yn, best, mask=mask)


# ----------------------------------------------------------------------------------------------------
# Autotuning spaces
# ----------------------------------------------------------------------------------------------------
def _cfg(bm, bn, bk, warps, stages, group=8):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group}, warps, stages)


# best guess first (Hopper, 16-bit: wgmma tiles of 128 x 128..256, K step 64)
CONV_CONFIGS = [
    _cfg(128, 256, 64, 8, 3), _cfg(128, 128, 64, 8, 4), _cfg(128, 128, 64, 4, 4), _cfg(256, 128, 64, 8, 3),
    _cfg(64, 256, 64, 8, 3), _cfg(128, 64, 64, 4, 4), _cfg(64, 128, 64, 4, 4), _cfg(64, 64, 64, 4, 4),
    _cfg(128, 128, 32, 8, 3), _cfg(64, 64, 32, 4, 3), _cfg(32, 64, 32, 4, 4), _cfg(32, 32, 32, 4, 3),
]
CONV_INTERPRET_CONFIG = _cfg(32, 32, 32, 4, 1)
DW_CONFIGS = [Config({"BLOCK_C": bc, "BLOCK_N": bn, "BLOCK_M": bm}, w, s) for bc, bn, bm, w, s in (
    (128, 128, 64, 8, 3), (128, 128, 32, 4, 4), (64, 128, 64, 4, 3), (128, 64, 64, 4, 3), (64, 64, 64, 4, 3),
    (128, 256, 64, 8, 3), (64, 64, 32, 4, 4))]
DW_INTERPRET_CONFIG = Config({"BLOCK_C": 32, "BLOCK_N": 32, "BLOCK_M": 32}, 4, 1)
DW_PATHS = ("auto", "pointer", "tma")
SMEM_LIMIT = 220 * 1024
MAX_ACC_REGS = 128  # fp32 accumulator registers per thread a config may use

class ConvKey(NamedTuple):
    """What a tuned conv1d forward config depends on."""
    m: int  # output positions (batch x length), bucketed
    n: int  # output channels
    c: int  # input channels
    kernel_size: int
    pool: int
    pad: int
    dtype: torch.dtype
    precision: str
    activation: str
    has_bias: bool


class ConvWeightGradKey(NamedTuple):
    """What a tuned conv1d weight-gradient config depends on."""
    m: int
    n: int
    c: int
    kernel_size: int
    dtype: torch.dtype
    precision: str
    x_is_index: bool


class _DwPlan(NamedTuple):
    """A weight-gradient key's tuned config bound to its compiled kernels: the partials' and their sum's."""
    kernel: BoundKernel
    reduce: BoundKernel
    config: Config
    tma: bool
    x_is_index: bool


class _ConvPlan(NamedTuple):
    """A key's tuned config bound to its compiled kernel (the launch path of every later call)."""
    kernel: BoundKernel
    block_m: int
    block_n: int


# (ConvKey, flip, swap_weight, device) -> _ConvPlan, made at a key's first eager call
_PLANS: dict[tuple, _ConvPlan] = {}
# (ConvWeightGradKey, the TMA path, device) -> _DwPlan, made at a key's first eager call
_DW_PLANS: dict[tuple, _DwPlan] = {}

_conv_tuner = register_tuner(Autotuner("conv1d", [_conv1d_kernel, _tile_coords, _apply_act], CONV_CONFIGS,
                                       interpret_config=CONV_INTERPRET_CONFIG))
_dw_tuner = register_tuner(Autotuner("conv1d_dw", _conv1d_dw_kernel, DW_CONFIGS, interpret_config=DW_INTERPRET_CONFIG))
# the TMA kernel's configs are declared in autotune/spaces.py ("conv1d_dw_tma"), where its candidates come from
_dw_tma_tuner = register_tuner(Autotuner("conv1d_dw_tma", _conv1d_dw_tma_kernel,
                                          spaces.CONV1D_DW_TMA_CONFIGS,
                                          interpret_config=spaces.CONV1D_DW_TMA_INTERPRET_CONFIG))


def _prune_conv(M: int, N: int, C: int, elem: int, pool: int) -> list[Config]:
    """Configs that fit shared memory and registers (pooling keeps two accumulators live) and are not far
    larger than the problem."""
    out = []
    for c in CONV_CONFIGS:
        bm, bn, bk = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]
        if c.num_stages * (bm * bk + bk * bn) * elem > SMEM_LIMIT:
            continue
        if bm * bn * (2 if pool > 1 else 1) > MAX_ACC_REGS * 32 * c.num_warps:
            continue
        if bm > 2 * bucket(M) or bn > 2 * bucket(N) or bk > 2 * bucket(C):
            continue
        out.append(c)
    return out or [CONV_INTERPRET_CONFIG]


def _prune_dw(C: int, N: int, elem: int) -> list[Config]:
    out = [c for c in DW_CONFIGS
           if c.num_stages * (c.kwargs["BLOCK_C"] + c.kwargs["BLOCK_N"]) * c.kwargs["BLOCK_M"] * elem <= SMEM_LIMIT
           and c.kwargs["BLOCK_C"] <= 2 * bucket(C) and c.kwargs["BLOCK_N"] <= 2 * bucket(N)]
    return out or [DW_INTERPRET_CONFIG]


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def conv1d_forward(x, weight, bias, activation="none", pool=1, precision="ieee", *, pad=0, flip=False,
                   swap_weight=False, config: Config | None = None) -> torch.Tensor:
    """y (B, (L + 2 * pad - k + 1) // pool, C_out) in x's dtype; see `_conv1d_kernel`.

    pad / flip / swap_weight serve the input gradient (a full convolution with the weight's taps flipped
    and its channel roles swapped). config: force a launch configuration (tests); default: the tuner's."""
    B, L, C = x.shape
    k = weight.shape[2]
    n_dim, c_dim = (1, 0) if swap_weight else (0, 1)
    N = weight.shape[n_dim]
    LP = (L + 2 * pad - k + 1) // pool
    y = torch.empty((B, LP, N), device=x.device, dtype=x.dtype)
    M = B * LP
    if M == 0 or N == 0:
        return y
    prec = precision if x.dtype == torch.float32 else "ieee"
    weight = forward_weight(weight, prec, swap_weight)
    plan_key = _plan_key(x, k, y, bias, activation, pool, prec, pad, flip, swap_weight)
    plan = _PLANS.get(plan_key) if config is None else None
    if plan is not None:  # steady state: the tuned config's compiled kernel, launched directly
        plan.kernel.launch((cdiv(M, plan.block_m) * cdiv(N, plan.block_n),),
                           **_runtime_args(x, weight, bias, y, pad, swap_weight))
        return y
    flags = dict(KSIZE=k, FLIP=flip, POOL=pool, HAS_BIAS=bias is not None, ACT=activation, PRECISION=prec)

    def run(cfg: Config):
        grid = (cdiv(M, cfg.kwargs["BLOCK_M"]) * cdiv(N, cfg.kwargs["BLOCK_N"]),)
        launch(_conv1d_kernel, grid, **_runtime_args(x, weight, bias, y, pad, swap_weight), **flags, **cfg.kwargs,
               num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    if config is None:
        fake = is_fake(x, weight)
        config = _conv_tuner.pick(plan_key[0], run, lambda: _prune_conv(M, N, C, x.element_size(), pool),
                                  tracing=fake)
        if not fake:
            _PLANS[plan_key] = _ConvPlan(bind(_conv1d_kernel, **flags, **config.kwargs, num_warps=config.num_warps,
                                              num_stages=config.num_stages),
                                         config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"])
    run(config)
    return y


def forward_weight(weight: torch.Tensor, precision: str, swap_weight: bool = False) -> torch.Tensor:
    """The weight as `conv1d_forward` reads it: itself, or at "tf32" (fp32) a copy with the input channels of the
    product innermost where they are not (Hopper's tf32 tensor-core products read their B operand K-major; an
    N-major B tile halved conv2d's tf32 rate)."""
    c_dim = 0 if swap_weight else 1
    if precision == "tf32" and weight.dtype == torch.float32 and weight.stride(c_dim) != 1:
        return _input_channels_innermost(weight, c_dim)
    return weight


def forward_launch(x, weight, bias, y, activation: str, pool: int, precision: str, *, pad=0, flip=False,
                   swap_weight=False) -> tuple:
    """(bound kernel, grid, runtime arguments by name): `conv1d_forward`'s launch into y for these tensors,
    once a call of theirs has tuned it (KeyError before); weight as `forward_weight` gives it."""
    prec = precision if x.dtype == torch.float32 else "ieee"
    plan = _PLANS[_plan_key(x, weight.shape[2], y, bias, activation, pool, prec, pad, flip, swap_weight)]
    M, N = y.shape[0] * y.shape[1], y.shape[2]
    return (plan.kernel, (cdiv(M, plan.block_m) * cdiv(N, plan.block_n),),
            _runtime_args(x, weight, bias, y, pad, swap_weight))


def _plan_key(x, k: int, y, bias, activation: str, pool: int, prec: str, pad: int, flip: bool,
              swap_weight: bool) -> tuple:
    """The key of _PLANS for a forward of x into y: (ConvKey, flip, swap_weight, device)."""
    key = ConvKey(m=bucket(y.shape[0] * y.shape[1]), n=y.shape[2], c=x.shape[2], kernel_size=k, pool=pool, pad=pad,
                  dtype=x.dtype, precision=prec, activation=activation, has_bias=bias is not None)
    return key, flip, swap_weight, x.device


def _runtime_args(x, weight, bias, y, pad: int, swap_weight: bool) -> dict:
    """`_conv1d_kernel`'s runtime arguments by name for a forward of x into y (absent bias: y, unread)."""
    B, LP, N = y.shape
    n_dim, c_dim = (1, 0) if swap_weight else (0, 1)
    return dict(x_ptr=x, w_ptr=weight, bias_ptr=bias if bias is not None else y, y_ptr=y, M=B * LP, N=N,
                C=x.shape[2], L_in=x.shape[1], LP=LP, PAD=pad, stride_xb=x.stride(0), stride_xl=x.stride(1),
                stride_xc=x.stride(2), stride_wn=weight.stride(n_dim), stride_wc=weight.stride(c_dim),
                stride_wt=weight.stride(2), stride_bias=bias.stride(0) if bias is not None else 0,
                stride_yb=y.stride(0), stride_yl=y.stride(1), stride_yn=y.stride(2))


def max_pool_forward(x: torch.Tensor, pool: int) -> torch.Tensor:
    """y (B, L // pool, N) = MaxPool1d(pool) of channels-last x (B, L, N) (fixed tiles: a copy-like kernel)."""
    B, L, N = x.shape
    LO = L // pool
    y = torch.empty((B, LO, N), device=x.device, dtype=x.dtype)
    if B * LO == 0 or N == 0:
        return y
    bm, bn = (32, 32) if INTERPRET else (32, 128)
    launch(_max_pool_kernel, (cdiv(B * LO, bm), cdiv(N, bn)), x, y, M=B * LO, N=N, LO=LO,
           stride_xb=x.stride(0), stride_xl=x.stride(1), stride_xn=x.stride(2), stride_yb=y.stride(0),
           stride_yl=y.stride(1), stride_yn=y.stride(2), POOL=pool, BLOCK_M=bm, BLOCK_N=bn, num_warps=4)
    return y


def _dw_tma_readable(x: torch.Tensor, dz: torch.Tensor) -> bool:
    """Whether the weight gradient's operands can be read through `_conv1d_dw_tma_kernel`'s descriptors: x's
    (B * L, C) rows one 2-D matrix and dz (B, L_out, N), both with unit channel stride, 16-byte aligned bases and
    strides (TMA's rules)."""
    es = x.element_size()
    return (x.stride(2) == 1 and dz.stride(2) == 1 and x.stride(0) == x.shape[1] * x.stride(1)
            and all(v > 0 and (v * es) % 16 == 0 for v in (x.stride(1), dz.stride(0), dz.stride(1)))
            and x.data_ptr() % 16 == 0 and dz.data_ptr() % 16 == 0)


def conv1d_weight_grad(x, dz, k: int, C: int, precision="ieee", *, x_is_index=False, path: str = "auto",
                       config: Config | None = None, like: torch.Tensor | None = None) -> torch.Tensor:
    """dw[t, c, n] = sum_{b, l} x[b, l + t, c] * dz[b, l, n], for dz (B, L_out, N) and x (B, L_out + k - 1, C)
    dense, or character indices (B, L_out + k - 1) with x_is_index (x[b, i, c] is then 1 where the index equals
    c): (k, C, N) fp32, or with ``like`` (an (N, C, k) weight) shaped, laid out and typed like it. The partials
    of `_conv1d_dw_kernel` (path "pointer") or `_conv1d_dw_tma_kernel` ("tma": dense x only, operands
    TMA-readable) are summed by conv2d's `_sum_partials_kernel` in a fixed order. "auto": the TMA kernel for 16-bit
    operands it can read on a device of compute capability 9 or more (measured there; fp32 keeps the pointer
    kernel), else the pointer one."""
    check_choice("path", path, DW_PATHS)
    B, L_out, N = dz.shape
    out = torch.empty_like(like) if like is not None else torch.empty((k, C, N), device=dz.device,
                                                                      dtype=torch.float32)
    if B * L_out == 0 or C == 0 or N == 0:
        return out.zero_()
    dw = out if like is not None else out.permute(2, 1, 0)
    plan = weight_grad_plan(x, dz, dw, precision, x_is_index=x_is_index, path=path, config=config)
    for kernel, grid, args in weight_grad_launches(plan, x, dz, dw):
        kernel.launch(grid, **args)
    return out


def weight_grad_plan(x, dz, dw, precision="ieee", *, x_is_index=False, path: str = "auto",
                     config: Config | None = None) -> _DwPlan:
    """`conv1d_weight_grad`'s plan for these operands and dw (N, C, k): its tuned config (tuned at the key's first
    call, launching into dw) bound to the kernels of its path, kept per key; or the given config's."""
    check_choice("path", path, DW_PATHS)
    if path == "tma" and (x_is_index or not _dw_tma_readable(x, dz)):
        raise ValueError("path='tma' reads x (B, L, C) as one (B * L, C) matrix and dz (B, L_out, N), channels "
                         "innermost, 16-byte aligned: x or dz is not such a tensor (or x holds indices)")
    B, L_out, N = dz.shape
    C, k = dw.shape[1], dw.shape[2]
    fake = is_fake(x, dz)
    if path == "auto":
        path = "tma" if (dz.dtype != torch.float32 and not x_is_index and not fake and _tma_device(dz)
                         and _dw_tma_readable(x, dz)) else "pointer"
    tma = path == "tma"
    key = ConvWeightGradKey(m=bucket(B * L_out), n=N, c=C, kernel_size=k, dtype=dz.dtype,
                            precision=precision if dz.dtype == torch.float32 else "ieee", x_is_index=x_is_index)
    if config is not None:
        return _dw_plan(config, tma, key)
    plan = _DW_PLANS.get((key, tma, dz.device))
    if plan is None:
        def run(cfg: Config):  # the partials alone: what the tuner times
            kernel, grid, args = weight_grad_launches(_dw_plan(cfg, tma, key), x, dz, dw)[0]
            kernel.launch(grid, **args)

        tuner = _dw_tma_tuner if tma else _dw_tuner
        space = ((lambda: spaces.candidates("conv1d_dw_tma", C=C, N=N, dtype=dz.element_size())) if tma
                 else (lambda: _prune_dw(C, N, dz.element_size())))
        plan = _dw_plan(tuner.pick(key, run, space, tracing=fake), tma, key)
        if not fake:
            _DW_PLANS[(key, tma, dz.device)] = plan
    return plan


def _dw_plan(cfg: Config, tma: bool, key: ConvWeightGradKey) -> _DwPlan:
    """A config bound to the partials' kernel of its path and to the sum of the partials."""
    options = dict(KSIZE=key.kernel_size, PRECISION=key.precision, **cfg.kwargs, num_warps=cfg.num_warps,
                   num_stages=cfg.num_stages)
    kernel = (bind(_conv1d_dw_tma_kernel, **options) if tma
              else bind(_conv1d_dw_kernel, X_IS_INDEX=key.x_is_index, **options))
    reduce = bind(_sum_partials_kernel, C_IN=key.c, KH=1, KW=key.kernel_size, BLOCK_S=SUM_BLOCK_S,
                  BLOCK_J=SUM_BLOCK_J, num_warps=4)
    return _DwPlan(kernel, reduce, cfg, tma, key.x_is_index)


def weight_grad_launches(plan: _DwPlan, x, dz, dw) -> list:
    """A plan's two launches into dw (the (N, C, k) gradient, any layout and dtype), each (bound kernel, grid,
    runtime arguments by name): the fp32 partials (S, k, C, N), allocated here, then their sum. The rows are
    split so that tiles * k * splits fills the GPU about four times over."""
    B, L_out, N = dz.shape
    C, k = dw.shape[1], dw.shape[2]
    cfg = plan.config.kwargs
    bc, bn, bm = cfg["BLOCK_C"], cfg["BLOCK_N"], cfg["BLOCK_M"]
    tiles = cdiv(C, bc) * cdiv(N, bn)
    # steps: a sample's block of BLOCK_M rows (TMA), or BLOCK_M of the B * L_out rows (pointer)
    steps = B * cdiv(L_out, bm) if plan.tma else cdiv(B * L_out, bm)
    per_split = cdiv(steps, max(1, min(steps, cdiv(4 * sm_count(dz), tiles * k))))
    splits = cdiv(steps, per_split)
    part = torch.empty((splits, k, C, N), device=dz.device, dtype=torch.float32)
    if plan.tma:
        L = x.shape[1]
        args = dict(x_desc=TensorDescriptor(x, [B * L, C], [x.stride(1), 1], [bm, bc]),
                    dz_desc=TensorDescriptor(dz, [B, L_out, N], [dz.stride(0), dz.stride(1), 1], [1, bm, bn]),
                    part_ptr=part, C=C, N=N, L=L, L_BLOCKS=cdiv(L_out, bm), STEPS=steps, STEPS_PER_SPLIT=per_split)
    else:
        sx = (x.stride(0), x.stride(1), 0) if plan.x_is_index else tuple(x.stride())
        args = dict(x_ptr=x, dz_ptr=dz, part_ptr=part, M=B * L_out, N=N, C=C, L_out=L_out,
                    ROWS_PER_SPLIT=per_split * bm, stride_xb=sx[0], stride_xl=sx[1], stride_xc=sx[2],
                    stride_zb=dz.stride(0), stride_zl=dz.stride(1), stride_zn=dz.stride(2))
    return [(plan.kernel, (tiles, k, splits), args),
            (plan.reduce, (cdiv(dw.numel(), SUM_BLOCK_J),), dict(
                part_ptr=part, dw_ptr=dw, S=splits, N=N, stride_ps=k * C * N, stride_wn=dw.stride(0),
                stride_wc=dw.stride(1), stride_wh=0, stride_ww=dw.stride(2)))]


def bias_relu_backward(dy: torch.Tensor, y: Optional[torch.Tensor], activation: str, need_dz: bool,
                       need_dbias: bool):
    """(dz (B, L, N) or None, dbias fp32 (N,) or None) from dy and the saved output y (ReLU's sign is
    the output's), through gemm.act_backward on the (B * L, N) view."""
    N = dy.shape[-1]
    dy2 = dy.reshape(-1, N)
    saved = y.reshape(-1, N) if activation == "relu" else None
    dz2, dbias = act_backward(dy2, saved, activation, need_dz=need_dz, need_dbias=need_dbias)
    return (dz2.view(dy.shape) if dz2 is not None else None), dbias


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _conv1d_op(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], activation: str, pool: int,
               precision: str) -> torch.Tensor:
    return conv1d_forward(x, weight, bias, activation, pool, precision)


def _conv1d_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, activation: str,
                        precision: str, need_x: bool, need_w: bool, need_b: bool) -> list[torch.Tensor]:
    k = weight.shape[2]
    dz, dbias = bias_relu_backward(dy, y, activation, need_x or need_w, need_b)
    empty = x.new_empty((0,))
    dx = conv1d_forward(dz, weight, None, "none", 1, precision, pad=k - 1, flip=True, swap_weight=True) \
        if need_x else empty
    dw = conv1d_weight_grad(x, dz, k, x.shape[2], precision, like=weight) if need_w else empty.clone()
    return [dx, dw, dbias if dbias is not None else x.new_empty((0,), dtype=torch.float32)]


def _setup_context(ctx, inputs, output):
    x, weight, bias, activation, pool, precision = inputs
    ctx.activation, ctx.precision = activation, precision
    ctx.bias_dtype = bias.dtype if bias is not None else None
    ctx.save_for_backward(x, weight, output if activation == "relu" else None)


def input_grads(backward, dy, saved: tuple, needs: tuple, bias_dtype, activation: str, precision: str) -> tuple:
    """(dx, dw, dbias), None where ``needs`` (x, weight, bias) says so (and dbias where there is no bias), from
    ``backward``: the registered backward op or its function (_conv1d_backward_op); saved: (x, weight, y or None);
    dbias in the bias's dtype."""
    x, weight, y = saved
    need_x, need_w, need_b = (bool(n) for n in needs)
    need_b = need_b and bias_dtype is not None
    dx, dw, dbias = backward(dy, x, weight, y if y is not None else dy.new_empty((0,)), activation, precision,
                             need_x, need_w, need_b)
    return dx if need_x else None, dw if need_w else None, dbias.to(bias_dtype) if need_b else None


def _backward(ctx, dy):
    return *input_grads(_conv1d_backward_call, dy, ctx.saved_tensors, ctx.needs_input_grad[:3], ctx.bias_dtype,
                        ctx.activation, ctx.precision), None, None, None


def _max_pool_op(x: torch.Tensor, pool: int) -> torch.Tensor:
    return max_pool_forward(x, pool)


_max_pool_call = register_op("tk::max_pool1d_channels_last", _max_pool_op)
_conv1d_backward_call = register_op("tk::conv1d_backward", _conv1d_backward_op)
_conv1d_call = register_op("tk::conv1d", _conv1d_op, setup_context=_setup_context, backward=_backward)


# ----------------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------------
def needs_grad(*ts) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def validate_weight(weight, bias, activation, pool, *, dtype=None, device=None, in_channels=None,
                    interpreter_dtypes=INTERPRETER_DTYPES):
    """Checks shared by the conv1d ops; errors name weight / bias / activation / pool. interpreter_dtypes:
    the weight dtypes the op computes in the interpreter (None: all; kernels without tl.dot)."""
    check_tensor("weight", weight, ndim=3, dtypes=DTYPES, device=device, interpreter_dtypes=interpreter_dtypes)
    if dtype is not None and weight.dtype != dtype:
        raise ValueError(f"weight has dtype {weight.dtype} but x has {dtype}")
    if in_channels is not None and weight.shape[1] != in_channels:
        raise ValueError(f"weight has shape {tuple(weight.shape)} (C_out, C_in, k): C_in must equal x's "
                         f"{in_channels} channels (x is channels-last, (B, L, C_in))")
    if weight.shape[0] < 1 or weight.shape[1] < 1:
        raise ValueError(f"weight has shape {tuple(weight.shape)} (C_out, C_in, k): a conv needs at least one output "
                         "and one input channel (torch's conv1d refuses no output channels)")
    if weight.shape[2] < 1:
        raise ValueError(f"weight has kernel size {weight.shape[2]}; it must be >= 1")
    if bias is not None:
        check_bias(bias, weight.shape[0], f"C_out={weight.shape[0]}", DTYPES, weight.device)
    check_choice("activation", activation, ACTIVATIONS)
    if not isinstance(pool, int) or isinstance(pool, bool) or pool < 1:
        raise ValueError(f"pool must be a positive int, got {pool!r}")


def conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none",
           pool: int = 1, precision: str | None = None) -> torch.Tensor:
    """max_pool1d(act(conv1d(x, weight, bias)), pool) on channels-last x (B, L, C_in) -> (B, L_out // pool,
    C_out), L_out = L - k + 1; weight (C_out, C_in, k) as nn.Conv1d's, any strides. Differentiable in x,
    weight and bias for pool == 1; pool > 1 is an inference epilogue (call it under torch.no_grad()).
    precision applies to fp32 inputs: "ieee" (exact fp32), "tf32" (tensor cores) or None, what torch's own
    conv1d would use at each call ("tf32" where torch lets cuDNN use TF32 for convolutions, its default; else
    "ieee"; see runtime.torch_conv_precision). A call whose signature was seen before takes the eager fast path
    (conv1d_eager.py)."""
    if precision is None and isinstance(x, torch.Tensor):
        precision = torch_conv_precision(x)
    y = conv1d_eager.fast_conv1d(x, weight, bias, activation, pool, precision)
    if y is not None:
        return y
    check_tensor("x", x, ndim=3, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_DTYPES)
    validate_weight(weight, bias, activation, pool, dtype=x.dtype, device=x.device, in_channels=x.shape[2])
    check_choice("precision", precision, PRECISIONS)
    L_out = x.shape[1] - weight.shape[2] + 1
    if L_out < pool:
        raise ValueError(f"x has length {x.shape[1]}: with kernel size {weight.shape[2]} and pool {pool} the "
                         f"output would be empty")
    if pool > 1 and needs_grad(x, weight, bias):
        raise ValueError("conv1d with pool > 1 is an inference epilogue: call it under torch.no_grad() (or use "
                         "pool=1 followed by max_pool1d to train)")
    y = _conv1d_call(x, weight, bias, activation, int(pool), precision)
    if y.numel() > 0:
        conv1d_eager.remember(x, weight, bias, activation, pool, precision)
    return y


def pack_weight(weight: torch.Tensor, precision: str = "ieee") -> torch.Tensor:
    """A copy of the (C_out, C_in, k) weight laid out for the forward kernel's B tiles (the same shape and
    values): in memory as (k, C_in, C_out), each tap's (C_in, C_out) slice a row-major matrix the tiles read
    coalesced; an fp32 weight at precision "tf32" as (C_out, k, C_in), input channels innermost, the K-major B
    Hopper's tf32 tensor-core products read (`conv1d_forward` copies any other layout to that one at every tf32
    call; the input gradient reads the first layout as it is). Differentiable (the gradient flows back to
    ``weight``)."""
    if precision == "tf32" and weight.dtype == torch.float32:
        return _input_channels_innermost(weight, 1)
    return weight.permute(2, 1, 0).contiguous().permute(2, 1, 0)


def _input_channels_innermost(weight: torch.Tensor, c_dim: int) -> torch.Tensor:
    """A copy of the weight (same shape and values) whose dimension c_dim (the input channels of the product
    that reads it) is innermost in memory: the K-major B of a tf32 tensor-core product."""
    return weight.movedim(c_dim, -1).contiguous().movedim(-1, c_dim)


def max_pool1d_cl(x: torch.Tensor, pool: int = 3) -> torch.Tensor:
    """Inference: MaxPool1d(pool, stride=pool) over the length of a channels-last x (B, L, C) ->
    (B, L // pool, C) (the Triton per-op path's pool; the fused path pools in the conv epilogue)."""
    check_tensor("x", x, ndim=3, dtypes=DTYPES)
    if not isinstance(pool, int) or isinstance(pool, bool) or pool < 1:
        raise ValueError(f"pool must be a positive int, got {pool!r}")
    if x.shape[1] < pool:
        raise ValueError(f"x has length {x.shape[1]} < pool {pool}: the pooled output would be empty")
    if needs_grad(x):
        raise ValueError("max_pool1d_cl is an inference kernel: call it under torch.no_grad()")
    return _max_pool_call(x, int(pool))


from . import conv1d_eager  # noqa: E402  (it builds on this module's launchers)
