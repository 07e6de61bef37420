"""The Triton kernels of conv2d (triton_kernels/conv2d.py holds the math, the layout, the tuning and the
launchers): the tiled implicit GEMM, the transposed (TMA) forward for small maps with many channels, the
flat-K forward and weight gradient for few input channels, the partials' sum, and the jit helpers they
share (output-row and tap decompositions, the im2col gather of the flat-K kernels, the epilogue).
"""
from __future__ import annotations

import triton
import triton.language as tl

from .gemm_kernels import _apply_act, _tile_coords
from .runtime import next_power_of_2


def flat_k_pad(K: int) -> int:
    """The flat-K kernels' reduction length K = KH * KW * C_in padded to a power of two (at least 16, one
    tensor-core step): the K_PAD constexpr, which the tuning spaces size their tiles by too."""
    return max(16, next_power_of_2(K))


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _pixels(offs_m, m_ok, H_out, W_out):
    """(b, oh, ow) of output rows m = (b * H_out + oh) * W_out + ow (rows past M read as row 0)."""
    rows = tl.where(m_ok, offs_m, 0)
    return (rows // W_out) // H_out, (rows // W_out) % H_out, rows % W_out


@triton.jit
def _taps(k, C_IN: tl.constexpr, KW: tl.constexpr):
    """(kh, kw, c) of flattened reduction indices k = (kh * KW + kw) * C_IN + c."""
    tap = k // C_IN
    kh = tap // KW
    return kh, tap - kh * KW, k - tap * C_IN


@triton.jit
def _conv2d_epilogue(acc, pid_m, offs_m, offs_n, m_ok, n_ok, b, oh, ow, M, N, bias_ptr, res_ptr, y_ptr, part_ptr,
                     stride_bias, stride_rb, stride_rn, stride_rh, stride_rw,
                     HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr, STATS: tl.constexpr,
                     BLOCK_M: tl.constexpr):
    """The tile's epilogue, on the fp32 accumulator: + bias + residual, the STATS partials of z, act, the cast
    and the dense channels_last store (both conv2d kernels end here)."""
    mask = m_ok[:, None] & n_ok[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n * stride_bias, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if HAS_RES:
        r_rows = res_ptr + b.to(tl.int64) * stride_rb + oh * stride_rh + ow * stride_rw
        acc += tl.load(r_rows[:, None] + offs_n[None, :] * stride_rn, mask=mask, other=0.0).to(tl.float32)
    if STATS:
        count = tl.minimum(M - pid_m * BLOCK_M, BLOCK_M).to(tl.float32)
        total = tl.sum(tl.where(m_ok[:, None], acc, 0.0), axis=0)
        dev = tl.where(m_ok[:, None], acc - (total / count)[None, :], 0.0)
        part = part_ptr + pid_m * N + offs_n
        tl.store(part, total, mask=n_ok)
        tl.store(part + tl.cdiv(M, BLOCK_M) * N, tl.sum(dev * dev, axis=0), mask=n_ok)
    acc = _apply_act(acc, ACT)
    y_ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


# One program computes a BLOCK_M x BLOCK_N tile of y: BLOCK_M output pixels (consecutive in (b, oh, ow)
# order, crossing rows and samples) x BLOCK_N output channels. Its K loop is flat, KH * KW * cdiv(C_in,
# BLOCK_K) steps, so Triton software-pipelines it as one loop over num_stages shared-memory buffers:
#
#     step kk -> tap = kk // n_cb, (kh, kw) = divmod(tap, KW), channels c0 = (kk % n_cb) * BLOCK_K
#     A = x[b, c0:c0+BLOCK_K, oh*sh - ph + kh, ow*sw - pw + kw]  per row: BLOCK_K contiguous NHWC values,
#                                                                  0 where the pixel is in the padding
#     B = w_packed[kh, kw, c0:c0+BLOCK_K, n-block]               BLOCK_K x BLOCK_N, row-major
#     acc += A @ B                                               tensor cores, fp32 accumulator
#
# Neighbouring taps read overlapping pixels (a 3x3 window re-reads each input pixel up to 9 times), which
# come from L1/L2, not HBM. Tiles are visited in grouped order (GROUP_M tile-rows at a time, see
# `_tile_coords`) so tiles running together share weight columns and input rows in L2.
@triton.jit
def _conv2d_kernel(
    x_ptr, w_ptr, bias_ptr, res_ptr, y_ptr, part_ptr,
    M, N, C, H, W, H_out, W_out,
    stride_xb, stride_xc, stride_xh, stride_xw,
    stride_wh, stride_ww, stride_wc, stride_wn, stride_bias,
    stride_rb, stride_rn, stride_rh, stride_rw,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, STRIDE_W: tl.constexpr,
    PAD_H: tl.constexpr, PAD_W: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr, STATS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """y[m, n] (channels_last: offset m * N + n) = act(z), z = sum_k A[m, k] B[k, n] + bias + residual.

    x: (B, C, H, W) by strides; w: packed (KH, KW, C, N) by strides; bias (N,); res (B, N, H_out, W_out) by
    strides; y dense channels_last. STATS: part (2, cdiv(M, BLOCK_M), N) fp32 receives each tile's
    per-channel sum of z and sum of (z - tile mean)^2 over its valid rows (z before the activation).
    """
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    b, oh, ow = _pixels(offs_m, m_ok, H_out, W_out)
    ih0 = oh * STRIDE_H - PAD_H  # input pixel under tap (0, 0)
    iw0 = ow * STRIDE_W - PAD_W
    x_rows = x_ptr + b.to(tl.int64) * stride_xb + ih0 * stride_xh + iw0 * stride_xw
    w_cols = w_ptr + offs_n * stride_wn
    n_cb = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, KH * KW * n_cb):
        tap = kk // n_cb
        cc = (kk - tap * n_cb) * BLOCK_K + offs_k
        kh = tap // KW
        kw = tap - kh * KW
        ih = ih0 + kh
        iw = iw0 + kw
        row_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        c_ok = cc < C
        a = tl.load(x_rows[:, None] + (kh * stride_xh + kw * stride_xw) + cc[None, :] * stride_xc,
                    mask=row_ok[:, None] & c_ok[None, :], other=0.0)
        wt = tl.load(w_cols[None, :] + (kh * stride_wh + kw * stride_ww) + cc[:, None] * stride_wc,
                     mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, wt, acc, input_precision=PRECISION)

    _conv2d_epilogue(acc, pid_m, offs_m, offs_n, m_ok, n_ok, b, oh, ow, M, N, bias_ptr, res_ptr, y_ptr, part_ptr,
                     stride_bias, stride_rb, stride_rn, stride_rh, stride_rw, HAS_BIAS, HAS_RES, ACT, STATS, BLOCK_M)



# Layers with many channels, stride S = 1 or 2 with the padding that gives an (H / S) x (W / S) output (for
# S = 1 "same" padding). The tiled kernel's tile is 128 output pixels x BLOCK_N channels; here the tile is
# computed transposed,
#
#     acc[n, p] += W[n-block, (tap, c-block)] @ X_tap[p-block, c-block]^T     (BLOCK_N x BLOCK_K) . (BLOCK_K x BLOCK_P)
#     y[p, n] = act(acc^T + bias + residual[p, n])
#
# so the BLOCK_P output pixels are the tensor cores' wide dimension (up to 256 per instruction) and the weight
# rows their 64-row one: each weight tile serves BLOCK_P pixels. Both operands come through TMA: the weight as
# the (C_out, KH * KW * C_in) matrix of its (C_out, KH, KW, C_in) layout, X_tap as a box of the NHWC input (at
# S = 1 the map itself, [BLOCK_B samples, BLOCK_H rows, all W columns, BLOCK_K channels]; at S = 2 the input seen
# as [B, H / S, S, W / S, S * C], input row ih = S * r + s_h, column iw = S * q + s_w: the stride's phases as
# dimensions of their own, and the box [BLOCK_B, BLOCK_H, one row phase, all W / S columns, BLOCK_K channels]):
# for tap (kh, kw) the input pixel of output (oh, ow) is ih = S * oh - PAD_H + kh, i.e. row r = oh + dh with
# (dh, s_h) = divmod(kh - PAD_H, S), and likewise (dw, s_w) for the columns, the column phase selecting the
# channel block s_w * C + c0 of the last dimension. Rows and columns outside the map are filled with zeros by
# the descriptor, which is the padding. A tile is whole output rows (BLOCK_P = BLOCK_B * BLOCK_H * W / S, a
# power of two), so pixel p of the tile is (b0 + p // (BLOCK_H * W_OUT), h0 + p // W_OUT % BLOCK_H,
# p % W_OUT). NUM_PROGRAMS persistent programs walk the tiles in grouped order (`_tile_coords`, pixel blocks
# as its rows).
@triton.jit
def _conv2d_transposed_kernel(
    x_ptr, w_ptr, bias_ptr, res_ptr, y_ptr, part_ptr,
    B, H, N, stride_bias, NUM_PROGRAMS,
    W: tl.constexpr, C: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, STRIDE: tl.constexpr,
    PAD_H: tl.constexpr, PAD_W: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """y (dense channels_last, B x H / STRIDE x W / STRIDE pixels x N channels) = act(conv2d(x, w) + bias
    + residual). x: dense channels_last (B, C, H, W), H and W multiples of STRIDE; w: (N, KH, KW, C)
    contiguous; C a multiple of BLOCK_K; the residual dense channels_last, as y. part_ptr is unused (the other
    conv2d kernels' argument order)."""
    W_OUT: tl.constexpr = W // STRIDE
    BLOCK_P: tl.constexpr = BLOCK_B * BLOCK_H * W_OUT
    H_OUT = H // STRIDE
    M = B * H_OUT * W_OUT
    if STRIDE == 1:  # the map itself, [B, H, W, C]
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[B, H, W, C], strides=[H * W * C, W * C, C, 1],
                                           block_shape=[BLOCK_B, BLOCK_H, W, BLOCK_K])
    else:
        x_desc = tl.make_tensor_descriptor(x_ptr, shape=[B, H_OUT, STRIDE, W_OUT, STRIDE * C],
                                           strides=[H * W * C, STRIDE * W * C, W * C, STRIDE * C, 1],
                                           block_shape=[BLOCK_B, BLOCK_H, 1, W_OUT, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, KH * KW * C], strides=[KH * KW * C, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    CB: tl.constexpr = C // BLOCK_K
    num_tiles = tl.cdiv(M, BLOCK_P) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_PROGRAMS, flatten=True):
        pid_p, pid_n = _tile_coords(tile, M, N, BLOCK_P, BLOCK_N, GROUP_M)
        p0 = pid_p * BLOCK_P
        n0 = pid_n * BLOCK_N
        b0 = p0 // (H_OUT * W_OUT)
        h0 = (p0 - b0 * H_OUT * W_OUT) // W_OUT
        acc = tl.zeros((BLOCK_N, BLOCK_P), dtype=tl.float32)
        for kk in range(KH * KW * CB):
            tap = kk // CB
            c0 = (kk - tap * CB) * BLOCK_K
            kh = tap // KW
            kw = tap - kh * KW
            w = w_desc.load([n0, tap * C + c0])
            if STRIDE == 1:
                x = x_desc.load([b0, h0 + kh - PAD_H, kw - PAD_W, c0]).reshape(BLOCK_P, BLOCK_K)
            else:
                th = kh + (STRIDE - 1) * PAD_H  # kh - PAD_H + STRIDE * PAD_H >= 0: its // and % are floor's
                tw = kw + (STRIDE - 1) * PAD_W
                x = x_desc.load([b0, h0 + th // STRIDE - PAD_H, th % STRIDE, tw // STRIDE - PAD_W,
                                 (tw % STRIDE) * C + c0]).reshape(BLOCK_P, BLOCK_K)
            acc = tl.dot(w, tl.trans(x), acc, input_precision=PRECISION)
        offs_n = n0 + tl.arange(0, BLOCK_N)
        offs_p = p0 + tl.arange(0, BLOCK_P)
        n_ok = offs_n < N
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n * stride_bias, mask=n_ok, other=0.0).to(tl.float32)[:, None]
        z = tl.trans(acc)  # (BLOCK_P, BLOCK_N): y's and the residual's rows of channels
        offsets = offs_p.to(tl.int64)[:, None] * N + offs_n[None, :]
        mask = (offs_p < M)[:, None] & n_ok[None, :]
        if HAS_RES:
            z += tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + offsets, _apply_act(z, ACT).to(y_ptr.dtype.element_ty), mask=mask)

# Few input channels (a network's stem: 3 colour channels). The tiled kernel above pads each tap's C_in to
# BLOCK_K >= 16, so at C_in = 3 it runs 9 dots of which 81 % is padding. Here the reduction is flattened,
# k = (kh * KW + kw) * C_in + c over K = KH * KW * C_in, padded to K_PAD = next power of two (27 -> 32):
#
#     A[m, k] = x[b, c, oh*sh - ph + kh, ow*sw - pw + kw]     gathered once per tile (0 in the padding, k >= K)
#     B[k, n] = w_packed[kh, kw, c, n]                         the packed weight read as a (K, N) matrix
#     y = epilogue(A @ B)                                      one tl.dot per tile
#
# so the layer costs about its output store. The weight gradient reuses the gather:
#
#     dW[k, n] = sum_m A[m, k] dz[m, n]
#
# each of S programs walks every S-th BLOCK_M block of rows, accumulating A^T @ dz (K_PAD x BLOCK_N, fp32)
# in registers, and writes it to part[s]; `_sum_partials_kernel` sums part over s (in a fixed order).
@triton.jit
def _flat_columns(x_ptr, b, oh, ow, m_ok, H, W, stride_xb, stride_xc, stride_xh, stride_xw,
                  C_IN: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr,
                  STRIDE_W: tl.constexpr, PAD_H: tl.constexpr, PAD_W: tl.constexpr, K_PAD: tl.constexpr):
    """The (BLOCK_M, K_PAD) im2col tile A of output pixels (b, oh, ow): see the comment above. C_IN is a
    constexpr, so k's split into (kh, kw, c) is by constants; a row's offsets are its sample's int64 base plus
    int32 row and column parts (one sample is under 2**31 elements), one add per element; "0 <= ih < H" is
    one unsigned compare."""
    k = tl.arange(0, K_PAD)
    kh, kw, c = _taps(k, C_IN, KW)
    ih0 = oh * STRIDE_H - PAD_H
    iw0 = ow * STRIDE_W - PAD_W
    ih = ih0[:, None] + kh[None, :]
    iw = iw0[:, None] + kw[None, :]
    ok = m_ok[:, None] & (k < KH * KW * C_IN)[None, :] & (ih.to(tl.uint32) < H) & (iw.to(tl.uint32) < W)
    base = x_ptr + b.to(tl.int64) * stride_xb
    offsets = (ih0 * stride_xh + iw0 * stride_xw)[:, None] + (kh * stride_xh + kw * stride_xw + c * stride_xc)[None, :]
    return tl.load(base[:, None] + offsets, mask=ok, other=0.0)


@triton.jit
def _conv2d_flat_kernel(
    x_ptr, w_ptr, bias_ptr, res_ptr, y_ptr, part_ptr,
    M, N, H, W, H_out, W_out,
    stride_xb, stride_xc, stride_xh, stride_xw,
    stride_wh, stride_ww, stride_wc, stride_wn, stride_bias,
    stride_rb, stride_rn, stride_rh, stride_rw,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, STRIDE_W: tl.constexpr,
    PAD_H: tl.constexpr, PAD_W: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr, STATS: tl.constexpr,
    PRECISION: tl.constexpr, C_IN: tl.constexpr, K_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
):
    """`_conv2d_kernel`'s output tile (its arguments, C_in as the constexpr C_IN, and its epilogue) with the
    whole K in one gathered tile."""
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    b, oh, ow = _pixels(offs_m, m_ok, H_out, W_out)
    a = _flat_columns(x_ptr, b, oh, ow, m_ok, H, W, stride_xb, stride_xc, stride_xh, stride_xw,
                      C_IN, KH, KW, STRIDE_H, STRIDE_W, PAD_H, PAD_W, K_PAD)
    k = tl.arange(0, K_PAD)
    kh, kw, c = _taps(k, C_IN, KW)
    w_rows = kh * stride_wh + kw * stride_ww + c * stride_wc
    wt = tl.load(w_ptr + w_rows[:, None] + offs_n[None, :] * stride_wn,
                 mask=(k < KH * KW * C_IN)[:, None] & n_ok[None, :], other=0.0)
    acc = tl.dot(a, wt, input_precision=PRECISION)
    _conv2d_epilogue(acc, pid_m, offs_m, offs_n, m_ok, n_ok, b, oh, ow, M, N, bias_ptr, res_ptr, y_ptr, part_ptr,
                     stride_bias, stride_rb, stride_rn, stride_rh, stride_rw, HAS_BIAS, HAS_RES, ACT, STATS, BLOCK_M)


@triton.jit
def _conv2d_flat_dw_kernel(
    x_ptr, dz_ptr, part_ptr,
    M, N, H, W, H_out, W_out,
    stride_xb, stride_xc, stride_xh, stride_xw, stride_zb, stride_zn, stride_zh, stride_zw,
    KH: tl.constexpr, KW: tl.constexpr, STRIDE_H: tl.constexpr, STRIDE_W: tl.constexpr,
    PAD_H: tl.constexpr, PAD_W: tl.constexpr, PRECISION: tl.constexpr, C_IN: tl.constexpr, K_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Program (s, n-block): part[s, k, n] = sum of A[m, k] dz[m, n] over the rows m of blocks s, s + S, ...
    (S = the grid's first size); dz (B, N, H_out, W_out) by strides; part (S, K_PAD, N) fp32."""
    s = tl.program_id(0)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    acc = tl.zeros((K_PAD, BLOCK_N), dtype=tl.float32)
    for block in range(s, tl.cdiv(M, BLOCK_M), tl.num_programs(0)):
        offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < M
        b, oh, ow = _pixels(offs_m, m_ok, H_out, W_out)
        a = _flat_columns(x_ptr, b, oh, ow, m_ok, H, W, stride_xb, stride_xc, stride_xh, stride_xw,
                          C_IN, KH, KW, STRIDE_H, STRIDE_W, PAD_H, PAD_W, K_PAD)
        z_rows = b.to(tl.int64) * stride_zb + oh * stride_zh + ow * stride_zw
        dz = tl.load(dz_ptr + z_rows[:, None] + offs_n[None, :] * stride_zn, mask=m_ok[:, None] & n_ok[None, :],
                     other=0.0)
        acc = tl.dot(tl.trans(a), dz, acc, input_precision=PRECISION)
    k = tl.arange(0, K_PAD)
    tl.store(part_ptr + (s * K_PAD + k).to(tl.int64)[:, None] * N + offs_n[None, :], acc, mask=n_ok[None, :])


SUM_BLOCK_S, SUM_BLOCK_J = 64, 32  # the partials' sum: 64 x 32 fp32 tiles (8 KB a step)


@triton.jit
def _sum_partials_kernel(part_ptr, dw_ptr, S, N, stride_ps, stride_wn, stride_wc, stride_wh, stride_ww,
                         C_IN: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                         BLOCK_S: tl.constexpr, BLOCK_J: tl.constexpr):
    """dw[n, c, kh, kw] (the weight's layout and dtype) = sum_s part[s, k, n], k = (kh * KW + kw) * C_IN + c,
    for a BLOCK_J-wide strip of the flattened j = k * N + n < K * N, BLOCK_S partials (rows stride_ps apart)
    per step, in a fixed order (the same gradient on every run)."""
    J = KH * KW * C_IN * N
    j = tl.program_id(0) * BLOCK_J + tl.arange(0, BLOCK_J)
    j_ok = j < J
    acc = tl.zeros((BLOCK_S, BLOCK_J), dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        acc += tl.load(part_ptr + s.to(tl.int64)[:, None] * stride_ps + j[None, :],
                       mask=(s < S)[:, None] & j_ok[None, :], other=0.0)
    k = j // N
    kh, kw, c = _taps(k, C_IN, KW)
    out = dw_ptr + (j - k * N) * stride_wn + c * stride_wc + kh * stride_wh + kw * stride_ww
    tl.store(out, tl.sum(acc, axis=0).to(dw_ptr.dtype.element_ty), mask=j_ok)
