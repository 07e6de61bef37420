"""Char-CNN's first layer as a gather-sum over character indices, and LayerNorm -> ReLU -> MaxPool1d on
channels-last conv outputs, with the LayerNorm statistics computed tile by tile.

The first layer convolves a one-hot input (alphabet of C characters, k taps): one-hot column c of
position i is 1 where index[b, i] == c, so the convolution is a sum of k weight columns:
    z[b, l, n] = bias[n] + sum_{t < k} w[n, index[b, l + t], t]      (an index >= C is "no character": 0)
Inputs: indices (B, L) uint8 (or int32 / int64), weight (C_out, C, k) and bias as nn.Conv1d's, any strides
(the Char-CNN model keeps the weight as (k, C, C_out) in memory, so w[:, c, t] is one contiguous row).
Output z (B, L - k + 1, C_out) channels-last, in the weight's dtype. Backward: dw by
conv1d._conv1d_dw_kernel with the one-hot built in registers; dbias by column sums.

LayerNorm([C_out, L_out]) -> ReLU -> MaxPool1d(P) over a sample's whole (L_out, C_out) block:
    mean, var over the block;  y[b, j, n] = relu(max_{p < P} ((z[b, P*j + p, n] - mean) * rstd * g[n, P*j + p]
                                                               + h[n, P*j + p]))
with g, h the LayerNorm's (C_out, L_out) weight and bias (nn layout, read with their strides). Two kernels:
a statistics kernel writes each tile's (count, mean, M2) (Chan's parallel statistics);
`_ln_relu_pool_kernel` merges its sample's tiles and normalises, pools and stores. The values come from a
conv output x (B, L_out, C_out) (GATHER = False), or are recomputed from the indices by the gather
(GATHER = True): the first layer's (B, 1008, 256) output then never goes through memory.

Statistics of a conv output x: `_ln_stats_kernel` reads (L-tile x C-tile) tiles. Statistics of the gather
(`_gather_moments_kernel`) need no gather at all. With W_t[a] the weight row of tap t and character a (the
zero row for "no character"), the channel mean of a position and the channels' squared deviation from it are
    mean_l = mean(bias) + sum_t mu[t, a_t],                 mu[t, a] = mean_n W_t[a, n]
    M2_l   = sum_n (b~_n + sum_t W~_t[a_t, n])^2            (~: each row minus its own channel mean)
           = sum_t (2 b~ . W~_t[a_t] + |b~|^2 / k) + sum_t sum_u G[(t, a_t), (u, a_u)],   G = W~ W~^T
so one program sums, per position, k table entries and k (k + 1) / 2 entries of the Gram table G
((k (C + 1))^2 fp32: 1 MB for Char-CNN, each (t, u) block of it 20 KB), built once per weight in float64
(`gather_moment_tables`). The centred rows keep M2 free of the cancellation of sum z^2 - n mean^2. The output may
be written channels-last (B, LO, C_out) or channels-first (B, C_out, LO) (any strides: Char-CNN flattens
the last block channels-first, as torch does). Inference only (no backward); fp32 statistics.

Tile order: the C_out tile is the slowest grid axis, so the programs resident at one time gather from
one k x C x BLOCK_N slice of the weight, small enough to stay in L1.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .conv1d import (ACTIVATIONS, DTYPES, INDEX_DTYPES, bias_relu_backward,
                     conv1d_weight_grad, needs_grad, validate_weight)
from .gemm_kernels import _apply_act
from .runtime import (INTERPRETER_STORE_DTYPES, cdiv, Autotuner, Config, bucket, check_tensor, is_fake, launch,
                      next_power_of_2, register_op, register_tuner)


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _gather_sum(idx_ptrs, l_ok, w_ptr, offs_n, n_ok, C, stride_il, stride_wn, stride_wc, stride_wt,
                KSIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """sum_t w[n, index[l + t], t] on a BLOCK_M x BLOCK_N tile, fp32: idx_ptrs (BLOCK_M,) point at each
    row's index[b, l]; indices outside [0, C) add nothing (their one-hot column is zero)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for t in tl.static_range(KSIZE):
        raw = tl.load(idx_ptrs + t * stride_il, mask=l_ok, other=0)
        ok = l_ok & (raw >= 0) & (raw < C)  # in the index's own dtype: an int64 beyond int32 is out of range too
        ch = raw.to(tl.int32)  # (read only where ok)
        acc += tl.load(w_ptr + ch[:, None] * stride_wc + offs_n[None, :] * stride_wn + t * stride_wt,
                       mask=ok[:, None] & n_ok[None, :], other=0.0).to(tl.float32)
    return acc


@triton.jit
def _tile_values(src_ptr, w_ptr, bias_ptr, b, l, l_ok, offs_n, n_ok, C, stride_sb, stride_sl, stride_sn,
                 stride_wn, stride_wc, stride_wt, stride_bias,
                 KSIZE: tl.constexpr, GATHER: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """z[b, l, n] on a tile of sample b, fp32: recomputed from the indices src (B, L) by the gather
    (GATHER, + bias), else loaded from the conv output src (B, L_out, C_out)."""
    row = src_ptr + b.to(tl.int64) * stride_sb
    if GATHER:
        v = _gather_sum(row + l * stride_sl, l_ok, w_ptr, offs_n, n_ok, C, stride_sl, stride_wn, stride_wc,
                        stride_wt, KSIZE, BLOCK_M, BLOCK_N)
        v += tl.load(bias_ptr + offs_n * stride_bias, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    else:
        v = tl.load(row + l[:, None] * stride_sl + offs_n[None, :] * stride_sn, mask=l_ok[:, None] & n_ok[None, :],
                    other=0.0).to(tl.float32)
    return v


@triton.jit
def _gather_conv_kernel(
    idx_ptr, w_ptr, bias_ptr, y_ptr,
    M, N, C, L_out, stride_ib, stride_il, stride_wn, stride_wc, stride_wt, stride_bias,
    stride_yb, stride_yl, stride_yn,
    KSIZE: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program: y = act(bias + gather-sum) on BLOCK_M rows m = (b, l) of B * L_out by BLOCK_N output
    channels; the channel tile is the slowest grid axis (see the module docstring)."""
    num_m = tl.cdiv(M, BLOCK_M)
    offs_m = (tl.program_id(0) % num_m) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (tl.program_id(0) // num_m) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    rows = tl.where(m_ok, offs_m, 0)
    b = (rows // L_out).to(tl.int64)
    l = rows - b * L_out
    acc = _gather_sum(idx_ptr + b * stride_ib + l * stride_il, m_ok, w_ptr, offs_n, n_ok, C, stride_il, stride_wn,
                      stride_wc, stride_wt, KSIZE, BLOCK_M, BLOCK_N)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n * stride_bias, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    acc = _apply_act(acc, ACT)
    y_ptrs = y_ptr + (b * stride_yb + l * stride_yl)[:, None] + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _ln_stats_kernel(
    src_ptr, part_ptr, B, N, L_out, stride_sb, stride_sl, stride_sn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program (C_out tile, sample b, L tile) of a conv output src (B, L_out, C_out): the tile's count, mean
    and M2 = sum (z - mean)^2 (centred on the tile's own mean) -> part[0..2, b, q], q = n_tile * num_l +
    l_tile; (3, B, P) fp32."""
    num_l = tl.cdiv(L_out, BLOCK_M)
    pid_n = tl.program_id(0) // (B * num_l)
    rest = tl.program_id(0) % (B * num_l)
    b = rest // num_l
    l_tile = rest % num_l
    l = l_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (l < L_out)[:, None] & (offs_n < N)[None, :]
    v = tl.load(src_ptr + b.to(tl.int64) * stride_sb + l[:, None] * stride_sl + offs_n[None, :] * stride_sn,
                mask=ok, other=0.0).to(tl.float32)
    count = tl.sum(tl.sum(ok.to(tl.float32), axis=1), axis=0)
    mean = tl.sum(tl.sum(v, axis=1), axis=0) / count
    d = tl.where(ok, v - mean, 0.0)
    m2 = tl.sum(tl.sum(d * d, axis=1), axis=0)
    P = tl.cdiv(N, BLOCK_N) * num_l
    q = b.to(tl.int64) * P + pid_n * num_l + l_tile
    tl.store(part_ptr + q, count)
    tl.store(part_ptr + B * P + q, mean)
    tl.store(part_ptr + 2 * B * P + q, m2)


@triton.jit
def _table_row(idx_row, t, stride_il, l_ok, C):
    """Row t * (C + 1) + a of the moment tables for tap t, a = index[l + t] (C: outside [0, C))."""
    raw = tl.load(idx_row + t * stride_il, mask=l_ok, other=0)
    return t * (C + 1) + tl.where((raw >= 0) & (raw < C), raw, C).to(tl.int32)


@triton.jit
def _gather_moments_kernel(
    idx_ptr, mu_ptr, cross_ptr, gram_ptr, part_ptr, B, N, C, L_out, stride_ib, stride_il,
    KSIZE: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Program (sample b, L tile) of the gather conv: the tile's count, mean and M2 over all C_out channels
    from the tables (module docstring) -> part[0..2, b, l_tile]; (3, B, P) fp32, P = number of L tiles.
    Table row of (tap t, character a): t * (C + 1) + a, a = C for an index outside [0, C)."""
    num_l = tl.cdiv(L_out, BLOCK_M)
    b = tl.program_id(0) // num_l
    l_tile = tl.program_id(0) % num_l
    l = l_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    l_ok = l < L_out
    idx_row = idx_ptr + b.to(tl.int64) * stride_ib + tl.where(l_ok, l, 0) * stride_il
    R = KSIZE * (C + 1)
    mean = tl.zeros((BLOCK_M,), dtype=tl.float32)
    m2 = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for t in tl.static_range(KSIZE):
        r = _table_row(idx_row, t, stride_il, l_ok, C)
        mean += tl.load(mu_ptr + r)
        m2 += tl.load(cross_ptr + r) + tl.load(gram_ptr + r * R + r)
        for u in tl.static_range(t + 1, KSIZE):  # the index loads repeat: L1 hits, not worth registers
            m2 += 2.0 * tl.load(gram_ptr + r * R + _table_row(idx_row, u, stride_il, l_ok, C))
    n_pos = tl.sum(l_ok.to(tl.float32), axis=0)
    tile_mean = tl.sum(tl.where(l_ok, mean, 0.0), axis=0) / n_pos
    d = mean - tile_mean
    tile_m2 = tl.sum(tl.where(l_ok, m2 + N * d * d, 0.0), axis=0)
    q = b.to(tl.int64) * num_l + l_tile
    tl.store(part_ptr + q, n_pos * N)
    tl.store(part_ptr + B * num_l + q, tile_mean)
    tl.store(part_ptr + 2 * B * num_l + q, tile_m2)


@triton.jit
def _merge_stats(part_ptr, b, B, P, eps, BLOCK_P: tl.constexpr):
    """mean and rstd of sample b from its P tile partials (Chan: M2 = sum M2_q + n_q (mean_q - mean)^2)."""
    offs = tl.arange(0, BLOCK_P)
    ok = offs < P
    base = part_ptr + b.to(tl.int64) * P + offs
    n = tl.load(base, mask=ok, other=0.0)
    mu = tl.load(base + B * P, mask=ok, other=0.0)
    m2 = tl.load(base + 2 * B * P, mask=ok, other=0.0)
    total = tl.sum(n, axis=0)
    mean = tl.sum(n * mu, axis=0) / total
    d = mu - mean
    var = tl.sum(m2 + n * d * d, axis=0) / total
    return mean, 1.0 / tl.sqrt(var + eps)


@triton.jit
def _ln_relu_pool_kernel(
    src_ptr, w_ptr, bias_ptr, g_ptr, h_ptr, part_ptr, y_ptr,
    B, N, C, L_out, LO, P, eps,
    stride_sb, stride_sl, stride_sn, stride_wn, stride_wc, stride_wt, stride_bias, stride_gn, stride_gl,
    stride_hn, stride_hl, stride_yb, stride_yl, stride_yn,
    KSIZE: tl.constexpr, GATHER: tl.constexpr, POOL: tl.constexpr, HAS_G: tl.constexpr, HAS_H: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Program (C_out tile, tile of BLOCK_M pooled rows j, sample b): merge the sample's statistics, then
    for each pool phase p normalise z[b, POOL*j + p, n] with the LayerNorm's affine g, h; max over the
    phases (NaN propagates), ReLU, store y[b, j, n]. The sample is the fastest grid axis: programs running
    together read the same tile of g and h (the same for every sample) and the same weight slice."""
    num_j = tl.cdiv(LO, BLOCK_M)
    pid_n = tl.program_id(0) // (B * num_j)
    rest = tl.program_id(0) % (B * num_j)
    b = rest % B
    j = (rest // B) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    j_ok = j < LO
    n_ok = offs_n < N
    ok = j_ok[:, None] & n_ok[None, :]
    mean, rstd = _merge_stats(part_ptr, b, B, P, eps, BLOCK_P)
    for p in tl.static_range(POOL):
        l = tl.where(j_ok, j * POOL + p, 0)
        v = _tile_values(src_ptr, w_ptr, bias_ptr, b, l, j_ok, offs_n, n_ok, C, stride_sb, stride_sl, stride_sn,
                         stride_wn, stride_wc, stride_wt, stride_bias, KSIZE, GATHER, BLOCK_M, BLOCK_N)
        v = (v - mean) * rstd
        if HAS_G:
            v *= tl.load(g_ptr + offs_n[None, :] * stride_gn + l[:, None] * stride_gl, mask=ok, other=0.0
                         ).to(tl.float32)
        if HAS_H:
            v += tl.load(h_ptr + offs_n[None, :] * stride_hn + l[:, None] * stride_hl, mask=ok, other=0.0
                         ).to(tl.float32)
        if p == 0:
            best = v
        else:
            best = tl.maximum(best, v, propagate_nan=tl.PropagateNan.ALL)
    best = tl.where(best < 0.0, 0.0, best)  # ReLU after the max (relu(max) = max(relu)); NaN stays NaN
    y_ptrs = y_ptr + b.to(tl.int64) * stride_yb + j[:, None] * stride_yl + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, best.to(y_ptr.dtype.element_ty), mask=ok)


# ----------------------------------------------------------------------------------------------------
# Autotuning spaces (tile of positions x output channels, warps); first = best guess
# ----------------------------------------------------------------------------------------------------
TILE_CONFIGS = [Config({"BLOCK_M": bm, "BLOCK_N": bn}, w, 1) for bm, bn, w in (
    (64, 64, 4), (128, 64, 4), (32, 64, 2), (64, 128, 4), (128, 128, 8), (32, 128, 4), (64, 32, 2), (128, 32, 4),
    (64, 256, 8), (16, 256, 4))]
INTERPRET_TILE = Config({"BLOCK_M": 32, "BLOCK_N": 32}, 4, 1)

class GatherConvKey(NamedTuple):
    """What a tuned embedding-gather convolution config depends on."""
    m: int  # output positions, bucketed
    n: int  # output channels
    c: int  # embedding width
    kernel_size: int
    dtype: torch.dtype
    activation: str
    has_bias: bool


MOMENT_CONFIGS = [Config({"BLOCK_M": bm}, w, 1) for bm, w in (
    (128, 4), (64, 2), (256, 4), (32, 1), (128, 2), (256, 8), (512, 8))]
INTERPRET_MOMENTS = Config({"BLOCK_M": 16}, 1, 1)


class LayerNormStatsKey(NamedTuple):
    """What a tuned config of the LayerNorm statistics pass over a conv output depends on."""
    batch: int  # bucketed
    length: int  # convolution output length
    n: int
    dtype: torch.dtype


class GatherMomentsKey(NamedTuple):
    """What a tuned config of the gather conv's statistics from the moment tables depends on."""
    batch: int  # bucketed
    length: int  # convolution output length
    c: int  # embedding width
    kernel_size: int
    index_dtype: torch.dtype


class LayerNormPoolKey(NamedTuple):
    """What a tuned config of the fused convolution + LayerNorm + ReLU + max-pool pass depends on."""
    batch: int
    length: int
    n: int
    c: int
    kernel_size: int
    pool: int
    dtype: torch.dtype
    gather: bool
    channels_first: bool  # the output's layout


_conv_tuner = register_tuner(Autotuner("conv1d_gather", [_gather_conv_kernel, _gather_sum, _apply_act], TILE_CONFIGS,
                                       interpret_config=INTERPRET_TILE))
_stats_tuner = register_tuner(Autotuner("conv1d_ln_stats", [_ln_stats_kernel], TILE_CONFIGS,
                                        interpret_config=INTERPRET_TILE))
_moments_tuner = register_tuner(Autotuner("conv1d_gather_moments", [_gather_moments_kernel, _table_row],
                                          MOMENT_CONFIGS, interpret_config=INTERPRET_MOMENTS))
_pool_tuner = register_tuner(Autotuner("conv1d_ln_relu_pool", [_ln_relu_pool_kernel, _tile_values, _gather_sum,
                                                               _merge_stats], TILE_CONFIGS,
                                       interpret_config=INTERPRET_TILE))


def _prune(rows: int, N: int) -> list[Config]:
    out = [c for c in TILE_CONFIGS if c.kwargs["BLOCK_M"] <= 2 * bucket(rows) and c.kwargs["BLOCK_N"] <= 2 * bucket(N)]
    return out or [INTERPRET_TILE]


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def _weight_args(weight, bias) -> dict:
    return dict(stride_wn=weight.stride(0), stride_wc=weight.stride(1), stride_wt=weight.stride(2),
                stride_bias=bias.stride(0) if bias is not None else 0)


def gather_conv_forward(indices, weight, bias, activation="none", config: Config | None = None) -> torch.Tensor:
    """z (B, L - k + 1, C_out) = act(bias + sum_t w[:, index[b, l + t], t]) in the weight's dtype."""
    B, L = indices.shape
    N, C, k = weight.shape
    L_out = L - k + 1
    y = torch.empty((B, L_out, N), device=weight.device, dtype=weight.dtype)
    M = B * L_out
    if M == 0 or N == 0:
        return y

    def run(cfg: Config):
        grid = (cdiv(M, cfg.kwargs["BLOCK_M"]) * cdiv(N, cfg.kwargs["BLOCK_N"]),)
        launch(_gather_conv_kernel, grid, indices, weight, bias if bias is not None else weight, y,
               M=M, N=N, C=C, L_out=L_out, stride_ib=indices.stride(0), stride_il=indices.stride(1),
               **_weight_args(weight, bias), stride_yb=y.stride(0), stride_yl=y.stride(1), stride_yn=y.stride(2),
               KSIZE=k, HAS_BIAS=bias is not None, ACT=activation, **cfg.kwargs,
               num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    if config is None:
        key = GatherConvKey(m=bucket(M), n=N, c=C, kernel_size=k, dtype=weight.dtype, activation=activation,
                            has_bias=bias is not None)
        config = _conv_tuner.pick(key, run, lambda: _prune(M, N), tracing=is_fake(indices, weight))
    run(config)
    return y


def gather_moment_tables(weight: torch.Tensor, bias: Optional[torch.Tensor]) -> tuple:
    """(mu, cross, gram) of the module docstring for a gather conv weight (C_out, C, k) and bias, fp32 on the
    weight's device, computed in float64: mu and cross (k * (C + 1),) with mean(bias) / k and |b~|^2 / k
    folded in (every position sums exactly k rows), gram (k * (C + 1), k * (C + 1))."""
    N, C, k = weight.shape
    w = weight.new_zeros((k, C + 1, N), dtype=torch.float64)
    w[:, :C] = weight.permute(2, 1, 0)
    mu = w.mean(dim=2)
    centred = (w - mu[..., None]).reshape(k * (C + 1), N)
    b = bias.double() if bias is not None else w.new_zeros(N)
    b_centred = b - b.mean()
    cross = 2.0 * (centred @ b_centred) + b_centred.dot(b_centred) / k
    mu = mu.reshape(-1) + b.mean() / k
    return mu.float(), cross.float(), (centred @ centred.t()).float()


def ln_relu_pool_forward(src, weight, bias, ln_weight, ln_bias, eps: float, pool: int, channels_first: bool,
                         *, moments: tuple | None = None, stats_config: Config | None = None,
                         config: Config | None = None) -> torch.Tensor:
    """relu(max_pool1d(LayerNorm([C_out, L_out])(z), pool)) with z the gather conv of indices src (B, L) when
    weight is given, else the conv output src (B, L_out, C_out). y (B, L_out // pool, C_out), or
    (B, C_out, L_out // pool) when channels_first. moments: ``gather_moment_tables(weight, bias)`` when the
    caller keeps them (else computed here, a few small torch ops)."""
    gather = weight is not None
    if gather:
        B, L = src.shape
        N, C, k = weight.shape
        L_out, dtype = L - k + 1, weight.dtype
        w_args = _weight_args(weight, bias)
        s_args = dict(stride_sb=src.stride(0), stride_sl=src.stride(1), stride_sn=0)
    else:
        B, L_out, N = src.shape
        C, k, dtype = 0, 1, src.dtype
        w_args = dict(stride_wn=0, stride_wc=0, stride_wt=0, stride_bias=0)
        s_args = dict(stride_sb=src.stride(0), stride_sl=src.stride(1), stride_sn=src.stride(2))
    LO = L_out // pool
    y = torch.empty((B, N, LO) if channels_first else (B, LO, N), device=src.device, dtype=dtype)
    if B == 0 or N == 0 or LO == 0:
        return y
    y_strides = (y.stride(0), y.stride(2), y.stride(1)) if channels_first else tuple(y.stride())
    wt = weight if gather else src
    # the gather adds bias_ptr[n * stride_bias] to z: with no bias, a zero (stride 0)
    bs = bias if bias is not None else (weight.new_zeros(1) if gather else wt)
    common = dict(B=B, N=N, C=C, L_out=L_out, **s_args, **w_args, KSIZE=k, GATHER=gather)
    fake = is_fake(src, wt)

    if gather:
        mu, cross, gram = moments if moments is not None else gather_moment_tables(weight, bias)

        def run_stats(cfg: Config):
            part = torch.empty((3, B, cdiv(L_out, cfg.kwargs["BLOCK_M"])), device=src.device, dtype=torch.float32)
            launch(_gather_moments_kernel, (part.shape[1] * part.shape[2],), src, mu, cross, gram, part, B=B, N=N,
                   C=C, L_out=L_out, stride_ib=src.stride(0), stride_il=src.stride(1), KSIZE=k, **cfg.kwargs,
                   num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            return part

        if stats_config is None:
            key = GatherMomentsKey(batch=bucket(B), length=L_out, c=C, kernel_size=k, index_dtype=src.dtype)
            stats_config = _moments_tuner.pick(key, run_stats, lambda: MOMENT_CONFIGS, tracing=fake)
    else:
        def run_stats(cfg: Config):
            bm, bn = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"]
            part = torch.empty((3, B, cdiv(N, bn) * cdiv(L_out, bm)), device=src.device, dtype=torch.float32)
            launch(_ln_stats_kernel, (part.shape[1] * part.shape[2],), src, part, B=B, N=N, L_out=L_out, **s_args,
                   **cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            return part

        if stats_config is None:
            key = LayerNormStatsKey(batch=bucket(B), length=L_out, n=N, dtype=dtype)
            stats_config = _stats_tuner.pick(key, run_stats, lambda: _prune(L_out, N), tracing=fake)
    part = run_stats(stats_config)
    P = part.shape[2]
    g = ln_weight if ln_weight is not None else wt
    h = ln_bias if ln_bias is not None else wt

    def run(cfg: Config):
        grid = (cdiv(N, cfg.kwargs["BLOCK_N"]) * B * cdiv(LO, cfg.kwargs["BLOCK_M"]),)
        launch(_ln_relu_pool_kernel, grid, src, wt, bs, g, h, part, y, **common, LO=LO, P=P, eps=eps,
               stride_gn=g.stride(0) if ln_weight is not None else 0,
               stride_gl=g.stride(1) if ln_weight is not None else 0,
               stride_hn=h.stride(0) if ln_bias is not None else 0,
               stride_hl=h.stride(1) if ln_bias is not None else 0,
               stride_yb=y_strides[0], stride_yl=y_strides[1], stride_yn=y_strides[2], POOL=pool,
               HAS_G=ln_weight is not None, HAS_H=ln_bias is not None, BLOCK_P=next_power_of_2(P), **cfg.kwargs,
               num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    if config is None:
        key = LayerNormPoolKey(batch=bucket(B), length=L_out, n=N, c=C, kernel_size=k, pool=pool, dtype=dtype,
                               gather=gather, channels_first=channels_first)
        config = _pool_tuner.pick(key, run, lambda: _prune(LO, N), tracing=fake)
    run(config)
    return y


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _gather_conv_op(indices: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                    activation: str) -> torch.Tensor:
    return gather_conv_forward(indices, weight, bias, activation)


def _gather_conv_backward_op(dy: torch.Tensor, indices: torch.Tensor, weight: torch.Tensor, y: torch.Tensor,
                             activation: str, need_w: bool, need_b: bool) -> list[torch.Tensor]:
    N, C, k = weight.shape
    dz, dbias = bias_relu_backward(dy, y, activation, need_w, need_b)
    dw = conv1d_weight_grad(indices, dz, k, C, x_is_index=True, like=weight) if need_w else weight.new_empty((0,))
    return [dw, dbias if dbias is not None else weight.new_empty((0,), dtype=torch.float32)]


def _setup_context(ctx, inputs, output):
    indices, weight, bias, activation = inputs
    ctx.activation = activation
    ctx.bias_dtype = bias.dtype if bias is not None else None
    ctx.save_for_backward(indices, weight, output if activation == "relu" else None)


def _backward(ctx, dy):
    indices, weight, y = ctx.saved_tensors
    need_w, need_b = bool(ctx.needs_input_grad[1]), bool(ctx.needs_input_grad[2] and ctx.bias_dtype is not None)
    dw, dbias = _gather_backward_call(dy, indices, weight, y if y is not None else dy.new_empty((0,)),
                                      ctx.activation, need_w, need_b)
    return None, (dw if need_w else None), (dbias.to(ctx.bias_dtype) if need_b else None), None


def _gather_ln_relu_pool_op(indices: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                            ln_weight: Optional[torch.Tensor], ln_bias: Optional[torch.Tensor], eps: float,
                            pool: int, mu: Optional[torch.Tensor], cross: Optional[torch.Tensor],
                            gram: Optional[torch.Tensor]) -> torch.Tensor:
    moments = (mu, cross, gram) if mu is not None else None
    return ln_relu_pool_forward(indices, weight, bias, ln_weight, ln_bias, eps, pool, False, moments=moments)


def _ln_relu_pool_op(x: torch.Tensor, ln_weight: Optional[torch.Tensor], ln_bias: Optional[torch.Tensor], eps: float,
                     pool: int, channels_first: bool) -> torch.Tensor:
    return ln_relu_pool_forward(x, None, None, ln_weight, ln_bias, eps, pool, channels_first)


_gather_backward_call = register_op("tk::conv1d_gather_backward", _gather_conv_backward_op)
_gather_call = register_op("tk::conv1d_gather", _gather_conv_op, setup_context=_setup_context, backward=_backward)
_gather_ln_call = register_op("tk::conv1d_gather_ln_relu_pool", _gather_ln_relu_pool_op)
_ln_call = register_op("tk::ln_relu_pool_channels_last", _ln_relu_pool_op)


# ----------------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------------
def _check_indices(indices, weight) -> int:
    """Validate (B, L) indices against the weight; returns L_out."""
    check_tensor("indices", indices, ndim=2, dtypes=INDEX_DTYPES, device=weight.device)
    L_out = indices.shape[1] - weight.shape[2] + 1
    if L_out < 1:
        raise ValueError(f"indices has length {indices.shape[1]} < kernel size {weight.shape[2]}")
    return L_out


def _check_ln(ln_weight, ln_bias, shape, eps, pool, L_out, device) -> None:
    for name, p in (("ln_weight", ln_weight), ("ln_bias", ln_bias)):
        if p is not None:
            check_tensor(name, p, ndim=2, dtypes=DTYPES, device=device)
            if tuple(p.shape) != shape:
                raise ValueError(f"{name} has shape {tuple(p.shape)}, expected (C_out, L_out) = {shape} "
                                 f"(nn.LayerNorm([C_out, L_out])'s)")
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    if not isinstance(pool, int) or isinstance(pool, bool) or pool < 1:
        raise ValueError(f"pool must be a positive int, got {pool!r}")
    if L_out < pool:
        raise ValueError(f"the conv output has length {L_out} < pool {pool}: the pooled output would be empty")


def conv1d_gather(indices: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  activation: str = "none") -> torch.Tensor:
    """act(conv1d(one_hot(indices), weight, bias)) without the one-hot: indices (B, L) uint8 / int32 / int64
    (an index outside [0, C_in) is an all-zero column), weight (C_out, C_in, k) -> (B, L - k + 1, C_out)
    channels-last, in the weight's dtype. Differentiable in weight and bias."""
    validate_weight(weight, bias, activation, 1)  # bf16 refused in the interpreter (its stores truncate)
    _check_indices(indices, weight)
    return _gather_call(indices, weight, bias, activation)


def conv1d_gather_ln_relu_pool(indices: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                               ln_weight: torch.Tensor | None, ln_bias: torch.Tensor | None, eps: float = 1e-5,
                               pool: int = 3, moments: tuple | None = None) -> torch.Tensor:
    """Inference: relu(max_pool1d(layer_norm(conv1d(one_hot(indices), weight, bias), [C_out, L_out], ln_weight,
    ln_bias, eps), pool)) -> (B, L_out // pool, C_out) channels-last; the conv output is never stored (the
    statistics come from the weight's moment tables, then one gather pass normalises and pools). ln_weight /
    ln_bias (C_out, L_out) or None. moments: ``gather_moment_tables(weight, bias)``, for a caller that keeps
    them across calls (else they are computed on each call)."""
    validate_weight(weight, bias, "none", pool)
    L_out = _check_indices(indices, weight)
    _check_ln(ln_weight, ln_bias, (weight.shape[0], L_out), eps, pool, L_out, weight.device)
    if needs_grad(weight, bias, ln_weight, ln_bias):
        raise ValueError("conv1d_gather_ln_relu_pool is an inference kernel: call it under torch.no_grad() (or use "
                         "conv1d_gather + layer_norm + relu + max_pool1d to train)")
    rows = weight.shape[2] * (weight.shape[1] + 1)
    if moments is not None:
        if len(moments) != 3:
            raise ValueError("moments must be the (mu, cross, gram) of gather_moment_tables(weight, bias)")
        for name, t, shape in zip(("mu", "cross", "gram"), moments, ((rows,), (rows,), (rows, rows))):
            check_tensor(f"moments {name}", t, dtypes=(torch.float32,), device=weight.device)
            if tuple(t.shape) != shape or not t.is_contiguous():
                raise ValueError(f"moments {name} has shape {tuple(t.shape)}, expected a contiguous {shape} "
                                 f"(gather_moment_tables(weight, bias))")
    mu, cross, gram = moments if moments is not None else (None, None, None)
    return _gather_ln_call(indices, weight, bias, ln_weight, ln_bias, float(eps), int(pool), mu, cross, gram)


def layer_norm_relu_maxpool_cl(x: torch.Tensor, ln_weight: torch.Tensor | None, ln_bias: torch.Tensor | None,
                               eps: float = 1e-5, pool: int = 3, channels_first: bool = False) -> torch.Tensor:
    """Inference: relu(max_pool1d(layer_norm(x, [C, L]), pool)) for a channels-last x (B, L, C) (the
    LayerNorm's ln_weight / ln_bias in nn layout (C, L)); y (B, L // pool, C), or (B, C, L // pool) with
    channels_first (the layout torch flattens)."""
    check_tensor("x", x, ndim=3, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_STORE_DTYPES)
    B, L, C = x.shape
    _check_ln(ln_weight, ln_bias, (C, L), eps, pool, L, x.device)
    if needs_grad(x, ln_weight, ln_bias):
        raise ValueError("layer_norm_relu_maxpool_cl is an inference kernel: call it under torch.no_grad()")
    return _ln_call(x, ln_weight, ln_bias, float(eps), int(pool), bool(channels_first))
