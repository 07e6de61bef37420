"""ResNet-MLP with batch norm, fully fused: the whole stack's forward in one kernel, its backward in one;
the flat parameter layout, the shared row-tile helpers and the op are fused_mlp.py's.

The network (width W in {16, 32, 64}, a stem and N/2 blocks of two dense layers, fp32):

                                      h_0 = x W_s^T + b_s
        block j:  a = relu(BN_{2j}(h_j W_{2j}^T + b_{2j}))
                  h_{j+1} = relu(h_j + BN_{2j+1}(a W_{2j+1}^T + b_{2j+1}))
                  y = h_{N/2} . w_head + b_head
        BN_l(z) = gamma_l * (z - mu) * rstd + beta_l, with (mu, rstd) the batch statistics in training
        (biased variance; running stats updated with the unbiased one, momentum as nn.BatchNorm1d) and
        the running statistics in evaluation.

Tiling
------
In training mode (``_resnet_fwd_kernel``, ``_resnet_bwd_kernel``) batch statistics need every row of the
batch at every layer. The kernels keep the row tiles (cdiv(B, BLOCK_M) programs, all resident at once: at
most one per SM) and exchange, per BN layer, two (W,) vectors per program through global memory
(grid_sync.py: 64-bit words tagged with the barrier number, so the data is its own barrier; bounded
polling with an error flag instead of a hang). Forward: each program publishes the mean and sum of
squared deviations of its rows; every program combines all of them in the same fixed order (Chan's
formula: deterministic, two-pass accurate) into the batch mean / variance. Backward: each program
publishes its partial sums of dbn and dbn * xh (its partial dbeta / dgamma), whose batch totals the BN
backward dz = rstd (dxh - mean(dxh) - xh mean(dxh xh)) needs. So BN, ReLU, the residual add, the
running-stat update (program 0) and the BN backward stay fused, at one exchange (~1-2 us: an L2 round
trip or two) per BN layer and direction: that latency, not arithmetic, sets the step time of a deep
ResNet. In the CPU interpreter programs run one after another, so there ONE program owns the batch.
In evaluation mode BN is affine and no exchange is needed.
"""
from __future__ import annotations

import functools
import sys
from typing import Optional

import torch
import triton
import triton.language as tl

from . import grid_sync
from .grid_sync import barrier_tag, barriers_begin, barriers_end, exchange, gather, publish
from .fused_mlp import ROW_CONFIGS, Layout, load_x, rcfg, relu, tile_rows, upstream_grad
from .launcher import bind
from .runtime import cdiv, INTERPRET, Autotuner, Config, check_tensor, next_power_of_2, num_sms, register_tuner

MAX_BN_TILE = 16384  # rows * width of the single training-mode ResNet program in the interpreter
MAX_BN_ROWS = 128  # rows per program of the training-mode ResNet on the GPU (the grid must fit on the SMs)
MAX_BN_VALUES = 4096  # rows * width of one such program


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _chan(na, ma, qa, nb, mb, qb):
    """Merge two (count, mean, M2) summaries (Chan et al.): the combine of the one-reduction batch stats."""
    n = na + nb
    d = mb - ma
    r = tl.where(n > 0.0, nb / tl.maximum(n, 1.0), 0.0)
    return n, ma + d * r, qa + qb + d * d * (na * r)


@triton.jit
def _add2(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


@triton.jit
def _sum2(a, b, axis: tl.constexpr):
    """Column sums of two tiles in ONE reduction (one cross-warp round trip instead of two)."""
    return tl.reduce((a, b), axis, _add2)


@triton.jit
def _bn_batch_stats(z, rmask, pid, n_prog, B, inv_n, sync_ptr, tag, k, failed, max_spin,
                    BLOCK_M: tl.constexpr, NP: tl.constexpr, W: tl.constexpr):
    """Batch mean and biased variance of the columns of z over ALL B rows, the rows spread over n_prog
    programs of BLOCK_M: each program summarises its own rows as (mean, M2 = sum of squared deviations),
    the programs exchange the summaries, and every program merges all of them in the same order, so all
    hold identical values. Both the local summary and the merge are ONE reduction each whose combine is
    Chan et al.'s pairwise update (n = na + nb, mean = ma + d nb / n, M2 = M2a + M2b + d^2 na nb / n with
    d = mb - ma): as stable as two passes, without the second pass's dependent reduction."""
    ones = tl.where(rmask[:, None], 1.0, 0.0) + tl.zeros_like(z)
    _, mean_p, m2_p = tl.reduce((ones, tl.where(rmask[:, None], z, 0.0), tl.zeros_like(z)), 0, _chan)
    means, m2s, failed = exchange(sync_ptr, tag, k, mean_p, m2_p, pid, n_prog, failed, max_spin, NP, W)
    q = tl.arange(0, NP)
    cnt = tl.minimum(tl.maximum(B - q * BLOCK_M, 0), BLOCK_M).to(tl.float32)
    _, mean, m2 = tl.reduce((cnt[:, None] + tl.zeros_like(means), means, m2s), 0, _chan)
    var = m2 * inv_n
    return mean, var, failed


@triton.jit
def _layer_params(p_ptr, l, OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W: tl.constexpr, TRANS: tl.constexpr):
    """Layer l's weights ((W_in, W_out) = W_l^T when TRANS, else as stored), bias, BN gamma and beta."""
    cols = tl.arange(0, W)
    if TRANS:
        w = tl.load(p_ptr + OFF_WHID + l * (W * W) + cols[None, :] * W + cols[:, None])
    else:
        w = tl.load(p_ptr + OFF_WHID + l * (W * W) + cols[:, None] * W + cols[None, :])
    return (w, tl.load(p_ptr + OFF_BHID + l * W + cols), tl.load(p_ptr + OFF_GAMMA + l * W + cols),
            tl.load(p_ptr + OFF_BETA + l * W + cols))


@triton.jit
def _fwd_params(p_ptr, run_ptr, l, L, OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W: tl.constexpr):
    """What forward layer l reads: W_l^T, bias, gamma, beta and its running mean / variance."""
    cols = tl.arange(0, W)
    wt, b, g, be = _layer_params(p_ptr, l, OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W, True)
    return wt, b, g, be, tl.load(run_ptr + l * W + cols), tl.load(run_ptr + L * W + l * W + cols)


@triton.jit
def _bn_fwd_layer(hin, wt, bl, gamma, beta, rm, rv, l, L, rmask, pid, n_prog, B, inv_n, unbias, momentum, eps,
                  run_ptr, rstd_ptr, xh_ptr, bstat_ptr, xh_offs, sync_ptr, tag, failed, max_spin,
                  TRAIN: tl.constexpr, UPDATE_RUNNING: tl.constexpr, SAVE: tl.constexpr,
                  PRECISION: tl.constexpr, W: tl.constexpr, BLOCK_M: tl.constexpr, NP: tl.constexpr):
    """One dense layer + batch norm: returns BN(hin W_l^T + b_l) (before the ReLU), saving xh and rstd;
    TRAIN: batch statistics through one exchange (program 0 records them and moves the running ones)."""
    cols = tl.arange(0, W)
    z = tl.dot(hin, wt, input_precision=PRECISION) + bl[None, :]
    if TRAIN:
        mean, var, failed = _bn_batch_stats(z, rmask, pid, n_prog, B, inv_n, sync_ptr, tag, l, failed, max_spin,
                                            BLOCK_M, NP, W)
        if pid == 0:
            if UPDATE_RUNNING:
                tl.store(run_ptr + l * W + cols, rm + momentum * (mean - rm))
                tl.store(run_ptr + L * W + l * W + cols, rv + momentum * (var * unbias - rv))
            tl.store(bstat_ptr + l * W + cols, mean)
            tl.store(bstat_ptr + L * W + l * W + cols, var)
    else:
        mean = rm
        var = rv
    rstd = tl.div_rn(1.0 + tl.zeros([W], tl.float32), tl.sqrt_rn(var + eps))
    xh = (z - mean[None, :]) * rstd[None, :]
    if SAVE:
        tl.store(xh_ptr + xh_offs, xh, mask=rmask[:, None])
        if pid == 0:
            tl.store(rstd_ptr + l * W + cols, rstd)
    return xh * gamma[None, :] + beta[None, :], failed


@triton.jit
def _resnet_fwd_kernel(
    x_ptr, t_ptr, p_ptr, run_ptr, rstd_ptr, hs_ptr, xh_ptr, a_ptr, y_ptr, loss_ptr, bstat_ptr,
    sync_ptr, state_ptr,
    B, IN, NBLK, stride_xm, stride_xk, inv_n, unbias, momentum, eps, max_spin,
    OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, OFF_WHEAD, OFF_BHEAD,
    TRAIN: tl.constexpr, UPDATE_RUNNING: tl.constexpr, WITH_LOSS: tl.constexpr, SAVE: tl.constexpr,
    PRECISION: tl.constexpr, W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr, NP: tl.constexpr,
):
    """ResNet-MLP forward over row tiles of BLOCK_M. TRAIN: batch statistics through a grid-wide
    exchange per BN layer (all programs resident; see grid_sync.exchange); else the running statistics.

    Block j: a = relu(BN_{2j}(h_j W_{2j}^T + b)), h_{j+1} = relu(h_j + BN_{2j+1}(a W_{2j+1}^T + b)); the loop
    runs a block per iteration (two layers written out, no per-layer selects or masked stores).

    run: (2, L, W) running mean / var (read in eval; updated in place by program 0 when UPDATE_RUNNING);
    rstd: (L, W) saved 1/sqrt(var + eps); bstat: (2, L, W) batch mean / biased var (TRAIN);
    hs: (NBLK+1, B, W) block inputs and the final output; xh: (L, B, W) normalised pre-activations;
    a: (NBLK, B, W) first-layer outputs of each block; y: (B,); loss: (num_programs,);
    sync: (2, NP, 2W) int64 exchange words; state: (2,) int32 [barriers so far, error flag] (TRAIN).
    """
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    # Python floats can arrive as fp64 under torch.compile: keep every scalar (and loop-carried value) fp32
    inv_n = tl.cast(inv_n, tl.float32)
    unbias = tl.cast(unbias, tl.float32)
    momentum = tl.cast(momentum, tl.float32)
    eps = tl.cast(eps, tl.float32)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < B
    cols = tl.arange(0, W)
    kin = tl.arange(0, KIN)
    BW = B * W
    L = 2 * NBLK
    act_offs = rows[:, None] * W + cols[None, :]
    base, failed = barriers_begin(state_ptr, TRAIN, NP, W)
    x = load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
    wst = tl.load(p_ptr + cols[None, :] * IN + kin[:, None], mask=kin[:, None] < IN, other=0.0)
    h = tl.dot(x, wst, input_precision=PRECISION) + tl.load(p_ptr + W * IN + cols)[None, :]
    # the next block's parameters (and running statistics: program 0's read-modify-write of them would
    # otherwise put an L2 round trip on its path every layer) are loaded while this block computes
    w1n, b1n, g1n, e1n, m1n, v1n = _fwd_params(p_ptr, run_ptr, 0, L, OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W)
    w2n, b2n, g2n, e2n, m2n, v2n = _fwd_params(p_ptr, run_ptr, 1, L, OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W)
    for j in range(0, NBLK):
        w1, b1, g1, e1, m1, v1 = w1n, b1n, g1n, e1n, m1n, v1n
        w2, b2, g2, e2, m2, v2 = w2n, b2n, g2n, e2n, m2n, v2n
        nxt = 2 * tl.minimum(j + 1, NBLK - 1)
        w1n, b1n, g1n, e1n, m1n, v1n = _fwd_params(p_ptr, run_ptr, nxt, L, OFF_WHID, OFF_BHID, OFF_GAMMA,
                                                   OFF_BETA, W)
        w2n, b2n, g2n, e2n, m2n, v2n = _fwd_params(p_ptr, run_ptr, nxt + 1, L, OFF_WHID, OFF_BHID, OFF_GAMMA,
                                                   OFF_BETA, W)
        if SAVE:
            tl.store(hs_ptr + j * BW + act_offs, h, mask=rmask[:, None])
        bn1, failed = _bn_fwd_layer(
            h, w1, b1, g1, e1, m1, v1, 2 * j, L, rmask, pid, n_prog, B, inv_n, unbias, momentum, eps,
            run_ptr, rstd_ptr, xh_ptr, bstat_ptr, (2 * j) * BW + act_offs, sync_ptr,
            barrier_tag(base, 2 * j), failed, max_spin, TRAIN, UPDATE_RUNNING, SAVE, PRECISION, W,
            BLOCK_M, NP)
        a = relu(bn1)
        if SAVE:
            tl.store(a_ptr + j * BW + act_offs, a, mask=rmask[:, None])
        bn2, failed = _bn_fwd_layer(
            a, w2, b2, g2, e2, m2, v2, 2 * j + 1, L, rmask, pid, n_prog, B, inv_n, unbias, momentum, eps,
            run_ptr, rstd_ptr, xh_ptr, bstat_ptr, (2 * j + 1) * BW + act_offs, sync_ptr,
            barrier_tag(base, 2 * j + 1), failed, max_spin, TRAIN, UPDATE_RUNNING, SAVE, PRECISION, W,
            BLOCK_M, NP)
        h = relu(h + bn2)
    if SAVE:
        tl.store(hs_ptr + NBLK * BW + act_offs, h, mask=rmask[:, None])
    y = tl.sum(h * tl.load(p_ptr + OFF_WHEAD + cols)[None, :], axis=1) + tl.load(p_ptr + OFF_BHEAD)
    tl.store(y_ptr + rows, y, mask=rmask)
    if WITH_LOSS:
        t = tl.load(t_ptr + rows, mask=rmask, other=0.0)
        d = tl.where(rmask, y - t, 0.0)
        tl.store(loss_ptr + pid, tl.sum(d * d, axis=0))
    barriers_end(state_ptr, base, L, failed, pid, TRAIN)


@triton.jit
def _bn_dz(dbn, xh, gamma, rstd, sum_dbn, sum_dbn_xh, inv_n, rmask, TRAIN: tl.constexpr):
    """BN backward to the pre-activation z, given dL/d(BN output) (masked rows 0) and, in training mode,
    the batch sums of dbn and dbn * xh (the batch's dbeta and dgamma):
    dz = rstd (dxh - mean(dxh) - xh mean(dxh xh)) with dxh = gamma dbn; in evaluation dz = rstd dxh."""
    dxh = dbn * gamma[None, :]
    if TRAIN:
        m1 = sum_dbn * gamma * inv_n          # mean(dxh) over the batch
        m2 = sum_dbn_xh * gamma * inv_n       # mean(dxh * xh)
        dz = rstd[None, :] * (dxh - m1[None, :] - xh * m2[None, :])
        return tl.where(rmask[:, None], dz, 0.0)
    return dxh * rstd[None, :]


@triton.jit
def _store_dw(part, l, dz, hin, OFF_WHID, OFF_BHID, PRECISION: tl.constexpr, W: tl.constexpr):
    """This program's partial gradients of hidden layer l: dW_l = dz^T hin (a (W, BLOCK_M) x (BLOCK_M, W)
    dot) and db_l = colsum(dz)."""
    cols = tl.arange(0, W)
    tl.store(part + OFF_WHID + l * (W * W) + cols[:, None] * W + cols[None, :],
             tl.dot(tl.trans(dz), hin, input_precision=PRECISION))
    tl.store(part + OFF_BHID + l * W + cols, tl.sum(dz, axis=0))


@triton.jit
def _block_saved(hs_ptr, a_ptr, xh_ptr, rstd_ptr, p_ptr, j, BW, act_offs, rmask,
                 OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W: tl.constexpr):
    """What block j's backward reads: its input h_j, first-layer output a, both normalised pre-activations,
    both layers' weights (as stored), gammas and saved 1/std."""
    cols = tl.arange(0, W)
    m = rmask[:, None]
    w1, _, g1, _ = _layer_params(p_ptr, 2 * j, OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W, False)
    w2, _, g2, _ = _layer_params(p_ptr, 2 * j + 1, OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, W, False)
    return (tl.load(hs_ptr + j * BW + act_offs, mask=m, other=0.0),
            tl.load(a_ptr + j * BW + act_offs, mask=m, other=0.0),
            tl.load(xh_ptr + (2 * j) * BW + act_offs, mask=m, other=0.0),
            tl.load(xh_ptr + (2 * j + 1) * BW + act_offs, mask=m, other=0.0),
            w1, w2, g1, g2, tl.load(rstd_ptr + (2 * j) * W + cols), tl.load(rstd_ptr + (2 * j + 1) * W + cols))


@triton.jit
def _resnet_bwd_kernel(
    x_ptr, t_ptr, dy_ptr, p_ptr, rstd_ptr, hs_ptr, xh_ptr, a_ptr, y_ptr, part_ptr, sync_ptr, state_ptr,
    B, IN, NBLK, P, stride_xm, stride_xk, dy_scale, inv_n, max_spin,
    OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, OFF_WHEAD, OFF_BHEAD,
    TRAIN: tl.constexpr, LOSS_GRAD: tl.constexpr, PRECISION: tl.constexpr,
    W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr, NP: tl.constexpr,
):
    """ResNet-MLP backward (same grid as the forward); writes gradient partials (num_programs, P).

    Per block, from dh = dL/dh_{j+1}:  dpre = dh [h_{j+1} != 0];  BN_{2j+1} backward -> dz2;
    dW_{2j+1} = dz2^T a;  da = dz2 W_{2j+1};  dr = da [a != 0];  BN_{2j} backward -> dz1;
    dW_{2j} = dz1^T h_j;  dh_j = dpre + dz1 W_{2j}.  In training mode each BN backward is one exchange.
    """
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    # Python floats can arrive as fp64 under torch.compile: keep every scalar (and loop-carried value) fp32
    dy_scale = tl.cast(dy_scale, tl.float32)
    inv_n = tl.cast(inv_n, tl.float32)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < B
    cols = tl.arange(0, W)
    kin = tl.arange(0, KIN)
    BW = B * W
    act_offs = rows[:, None] * W + cols[None, :]
    part = part_ptr + pid.to(tl.int64) * P
    base, failed = barriers_begin(state_ptr, TRAIN, NP, W)
    dy = upstream_grad(y_ptr, t_ptr, dy_ptr, dy_scale, rows, rmask, LOSS_GRAD)
    h = tl.load(hs_ptr + NBLK * BW + act_offs, mask=rmask[:, None], other=0.0)
    tl.store(part + OFF_WHEAD + cols, tl.sum(dy[:, None] * h, axis=0))
    tl.store(part + OFF_BHEAD, tl.sum(dy, axis=0))
    dh = dy[:, None] * tl.load(p_ptr + OFF_WHEAD + cols)[None, :]
    # block j's saved tensors and parameters; block j - 1's are loaded while block j computes
    # (individual names, not a tuple: every loop-carried value its own variable)
    hin_n, a_n, xh1_n, xh2_n, w1_n, w2_n, g1_n, g2_n, r1_n, r2_n = _block_saved(
        hs_ptr, a_ptr, xh_ptr, rstd_ptr, p_ptr, NBLK - 1, BW, act_offs, rmask, OFF_WHID, OFF_BHID, OFF_GAMMA,
        OFF_BETA, W)
    # Each BN layer's exchange is split into publish / gather, and work that does not need the batch
    # sums runs in between, while the other programs catch up: the previous layer's weight gradient
    # (a dot) and the partial-gradient stores. Only dz -> dz W -> mask -> local sums is serial.
    dz1_p = tl.zeros([BLOCK_M, W], dtype=tl.float32)  # the previous block's first-layer dz (deferred dW)
    for i in range(0, NBLK):
        j = NBLK - 1 - i
        l1 = 2 * j
        l2 = 2 * j + 1
        hin, a, xh1, xh2, w1, w2, g1, g2, r1, r2 = hin_n, a_n, xh1_n, xh2_n, w1_n, w2_n, g1_n, g2_n, r1_n, r2_n
        hin_n, a_n, xh1_n, xh2_n, w1_n, w2_n, g1_n, g2_n, r1_n, r2_n = _block_saved(
            hs_ptr, a_ptr, xh_ptr, rstd_ptr, p_ptr, tl.maximum(j - 1, 0), BW, act_offs, rmask, OFF_WHID, OFF_BHID,
            OFF_GAMMA, OFF_BETA, W)
        # second layer: dbn2 = dL/d(BN_{2j+1} output) = dh [h_{j+1} != 0] (the residual ReLU; NaN passes)
        dpre = tl.where(h != 0.0, dh, 0.0)
        dbn2 = tl.where(rmask[:, None], dpre, 0.0)
        db2, dg2 = _sum2(dbn2, dbn2 * xh2, 0)  # this program's dbeta / dgamma (xh2 is 0 on masked rows)
        if TRAIN:
            publish(sync_ptr, barrier_tag(base, 2 * i), 2 * i, db2, dg2, pid, NP, W)
        if i > 0:  # block j+1's first layer: its input is h (= h_{j+1})
            _store_dw(part, l1 + 2, dz1_p, h, OFF_WHID, OFF_BHID, PRECISION, W)
        sb2, sg2 = db2, dg2
        if TRAIN:
            dbs, dgs, failed = gather(sync_ptr, barrier_tag(base, 2 * i), 2 * i, n_prog, failed,
                                                max_spin, NP, W)
            sb2, sg2 = _sum2(dbs, dgs, 0)
        dz2 = _bn_dz(dbn2, xh2, g2, r2, sb2, sg2, inv_n, rmask, TRAIN)
        # first layer: dbn1 = (dz2 W_{2j+1}) [a != 0]
        dbn1 = tl.where(rmask[:, None] & (a != 0.0), tl.dot(dz2, w2, input_precision=PRECISION), 0.0)
        db1, dg1 = _sum2(dbn1, dbn1 * xh1, 0)
        if TRAIN:
            publish(sync_ptr, barrier_tag(base, 2 * i + 1), 2 * i + 1, db1, dg1, pid, NP, W)
        _store_dw(part, l2, dz2, a, OFF_WHID, OFF_BHID, PRECISION, W)
        tl.store(part + OFF_GAMMA + l2 * W + cols, dg2)
        tl.store(part + OFF_BETA + l2 * W + cols, db2)
        tl.store(part + OFF_GAMMA + l1 * W + cols, dg1)
        tl.store(part + OFF_BETA + l1 * W + cols, db1)
        sb1, sg1 = db1, dg1
        if TRAIN:
            dbs, dgs, failed = gather(sync_ptr, barrier_tag(base, 2 * i + 1), 2 * i + 1, n_prog,
                                                failed, max_spin, NP, W)
            sb1, sg1 = _sum2(dbs, dgs, 0)
        dz1 = _bn_dz(dbn1, xh1, g1, r1, sb1, sg1, inv_n, rmask, TRAIN)
        dh = dpre + tl.dot(dz1, w1, input_precision=PRECISION)
        dz1_p = dz1
        h = hin
    if NBLK > 0:  # block 0's first layer (input h_0, the stem output)
        _store_dw(part, 0, dz1_p, h, OFF_WHID, OFF_BHID, PRECISION, W)
    x = load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
    dh = tl.where(rmask[:, None], dh, 0.0)
    tl.store(part + cols[:, None] * IN + kin[None, :], tl.dot(tl.trans(dh), x, input_precision=PRECISION),
             mask=kin[None, :] < IN)
    tl.store(part + W * IN + cols, tl.sum(dh, axis=0))
    barriers_end(state_ptr, base, 2 * NBLK, failed, pid, TRAIN)

# ----------------------------------------------------------------------------------------------------
# Autotuning space: row tiles that exchange batch statistics, so cdiv(B, BLOCK_M) programs must all be
# resident (<= the SM count). Each BN layer costs one exchange (~an L2 round trip): fewer, fatter tiles
# cost more per-layer math, more, thinner ones more polling traffic. 64 rows / 2 warps first. In
# evaluation mode (no exchange) the row tiles of the GloNet / MLP kernels.
# ----------------------------------------------------------------------------------------------------
BN_CONFIGS = [rcfg(bm, w) for bm in (64, 32, 128, 16) for w in (2, 4, 1)]
BN_INTERPRET = Config({}, 4, 1)  # no BLOCK_M: the interpreter runs programs in turn, so ONE owns the batch

forward_tuner = register_tuner(Autotuner("fused_resnet_fwd", _resnet_fwd_kernel, BN_CONFIGS + ROW_CONFIGS,
                                         interpret_config=BN_INTERPRET))
backward_tuner = register_tuner(Autotuner("fused_resnet_bwd", _resnet_bwd_kernel, BN_CONFIGS + ROW_CONFIGS,
                                          interpret_config=BN_INTERPRET))


# ----------------------------------------------------------------------------------------------------
# Launchers (fused_mlp.forward / backward validate, tune and allocate, then call these)
# ----------------------------------------------------------------------------------------------------
def validate_running(layout: Layout, x: torch.Tensor, running, training: bool) -> None:
    """The ResNet-only checks of fused_mlp.validate: the running statistics, and in training mode a batch
    that batch norm can use and the fused kernels can hold (ValueErrors name the argument)."""
    check_tensor("running", running, ndim=1, dtypes=(torch.float32,), device=x.device)
    if running.numel() != 2 * layout.n_bn * layout.width or not running.is_contiguous():
        raise ValueError(f"running must be a contiguous buffer of 2 * {layout.n_bn} * {layout.width} "
                         f"running means and variances, got shape {tuple(running.shape)}")
    if training:
        if x.shape[0] < 2:
            raise ValueError("x must have at least 2 rows for batch norm in training mode")
        limit = max_bn_rows(layout, x.device)
        if x.shape[0] > limit:
            raise ValueError(f"x has {x.shape[0]} rows: training-mode batch norm is fused for batches of at "
                             f"most {limit} rows on this device (every row tile must be resident at once)")


def max_bn_rows(layout: Layout, device) -> int:
    """Largest training batch of the fused ResNet: _bn_rows(width) rows per SM on the GPU; one program of
    at most MAX_BN_TILE values in the interpreter."""
    if INTERPRET or torch.device(device).type != "cuda":
        return MAX_BN_TILE // layout.width
    return _bn_rows(layout.width) * num_sms(device)


def _bn_rows(width: int) -> int:
    """Rows of the largest training-mode ResNet tile: MAX_BN_ROWS, and at most MAX_BN_VALUES values (a
    128 x 64 tile's backward spills and takes ptxas minutes to compile)."""
    return min(MAX_BN_ROWS, MAX_BN_VALUES // width)


def configs(layout: Layout, B: int, bn_train: bool, device) -> list:
    """The tilings the tuner tries: in training mode those whose grid fits on the SMs at once."""
    if not bn_train:
        return ROW_CONFIGS
    rows = _bn_rows(layout.width)
    fit = [c for c in BN_CONFIGS
           if cdiv(B, c.kwargs["BLOCK_M"]) <= num_sms(device) and c.kwargs["BLOCK_M"] <= rows]
    return fit or [rcfg(rows, 4)]


def forward_buffers(layout: Layout, B: int, n_exchanging: int, save: bool, device) -> dict:
    """The forward's saved tensors (block inputs hs, normalised pre-activations xh, first-layer outputs a,
    1/std rstd, batch statistics bstat; placeholders when not ``save``) and the exchange buffers of
    ``n_exchanging`` programs (1 when nothing is exchanged)."""
    f32 = dict(device=device, dtype=torch.float32)
    nb, L, W = layout.depth // 2, layout.depth, layout.width
    buf = dict(hs=torch.empty((nb + 1, B, W) if save else (1,), **f32),
               xh=torch.empty((L, B, W) if save else (1,), **f32),
               a=torch.empty((nb, B, W) if save else (1,), **f32),
               rstd=torch.empty((L, W), **f32), bstat=torch.empty((2, L, W), **f32))
    buf.update(grid_sync.buffers(n_exchanging, W, device))
    return buf


def launch_forward(layout: Layout, x, target, params, running, buf: dict, *, block_m: int, num_warps: int,
                   train: bool, update_running: bool, with_loss: bool, save: bool, precision: str, momentum: float,
                   eps: float, kernel=_resnet_fwd_kernel) -> None:
    """Launch the forward over cdiv(B, block_m) row tiles on ``buf`` (forward_buffers plus y and
    loss_partials). ``kernel``: this file's, or its timed build (:func:`timed_forward`)."""
    B = x.shape[0]
    o = layout.offsets
    bound = bind(kernel, TRAIN=train, UPDATE_RUNNING=update_running, WITH_LOSS=with_loss, SAVE=save,
                 PRECISION=precision, W=layout.width, KIN=layout.kin, BLOCK_M=block_m, NP=buf["_np"],
                 num_warps=num_warps, num_stages=1)
    bound.launch((cdiv(B, block_m),),
                 x_ptr=x, t_ptr=target, p_ptr=params, run_ptr=running, rstd_ptr=buf["rstd"], hs_ptr=buf["hs"],
                 xh_ptr=buf["xh"], a_ptr=buf["a"], y_ptr=buf["y"], loss_ptr=buf["loss_partials"],
                 bstat_ptr=buf["bstat"], sync_ptr=buf["sync"], state_ptr=buf["state"],
                 B=B, IN=layout.in_features, NBLK=layout.depth // 2, stride_xm=x.stride(0), stride_xk=x.stride(1),
                 inv_n=1.0 / B, unbias=B / max(B - 1, 1), momentum=momentum, eps=eps, max_spin=grid_sync.MAX_SPIN,
                 OFF_WHID=o["w_hid"], OFF_BHID=o["b_hid"], OFF_GAMMA=o["gamma"], OFF_BETA=o["beta"],
                 OFF_WHEAD=o["w_head"], OFF_BHEAD=o["b_head"])


def launch_backward(layout: Layout, x, target, dy, params, saved: dict, part, sync: dict, *, block_m: int,
                    num_warps: int, train: bool, loss_grad: bool, precision: str,
                    kernel=_resnet_bwd_kernel) -> None:
    """Launch the backward over cdiv(B, block_m) row tiles: gradient partials into ``part`` (num_programs,
    P), exchanging through ``sync`` (grid_sync.buffers). ``kernel``: this file's, or its timed build."""
    B = x.shape[0]
    o = layout.offsets
    bound = bind(kernel, TRAIN=train, LOSS_GRAD=loss_grad, PRECISION=precision, W=layout.width, KIN=layout.kin,
                 BLOCK_M=block_m, NP=sync["_np"], num_warps=num_warps, num_stages=1)
    bound.launch((cdiv(B, block_m),),
                 x_ptr=x, t_ptr=target, dy_ptr=dy, p_ptr=params, rstd_ptr=saved["rstd"], hs_ptr=saved["hs"],
                 xh_ptr=saved["xh"], a_ptr=saved["a"], y_ptr=saved["y"], part_ptr=part, sync_ptr=sync["sync"],
                 state_ptr=sync["state"],
                 B=B, IN=layout.in_features, NBLK=layout.depth // 2, P=layout.numel, stride_xm=x.stride(0),
                 stride_xk=x.stride(1), dy_scale=2.0 / B, inv_n=1.0 / B, max_spin=grid_sync.MAX_SPIN,
                 OFF_WHID=o["w_hid"], OFF_BHID=o["b_hid"], OFF_GAMMA=o["gamma"], OFF_BETA=o["beta"],
                 OFF_WHEAD=o["w_head"], OFF_BHEAD=o["b_head"])


# ----------------------------------------------------------------------------------------------------
# The timed build (bench.resnet_numerics only): the same two kernels compiled with grid_sync's timed
# exchange, launched on a training-mode step's buffers; the kernels above have no timing code
# ----------------------------------------------------------------------------------------------------
@functools.cache
def timed_kernels() -> tuple:
    """(forward, backward) kernels compiled from this file's source with grid_sync.timed()'s exchange
    functions in place of grid_sync's (see grid_sync.rebind)."""
    timed = grid_sync.timed()
    twin = grid_sync.rebind(sys.modules[__name__], "timed", exchange=timed.exchange, gather=timed.gather,
                            barriers_begin=timed.barriers_begin, barriers_end=timed.barriers_end)
    return twin._resnet_fwd_kernel, twin._resnet_bwd_kernel


def timed_forward(layout: Layout, x, params, out: dict, *, target, running, precision: str = "ieee",
                  momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """Run the timed forward once on the buffers of a training-mode forward ``out`` (fused_mlp.forward's
    result: its tiling and saved tensors; the running statistics are not moved) with fresh exchange
    buffers; returns per program [ns waiting in exchanges * 2**20 + polls, kernel ns] (int64, after a
    device sync)."""
    cfg = out["config"]
    sync = grid_sync.timed_buffers(out["_n_prog"], layout.width, x.device)
    launch_forward(layout, x, target, params, running, {**out, **sync},
                   block_m=tile_rows(layout, x.shape[0], cfg, True), num_warps=cfg.num_warps, train=True,
                   update_running=False, with_loss=True, save=True, precision=precision, momentum=momentum, eps=eps,
                   kernel=timed_kernels()[0])
    return grid_sync.counters(sync)


def timed_backward(layout: Layout, x, params, saved: dict, *, target, config: Config, precision: str = "ieee",
                   partials: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Run the timed backward once (MSE gradient against ``target``) from a training-mode forward's
    ``saved`` buffers with tiling ``config``, its gradient partials into ``partials`` (num_programs, P) if
    given; returns its per-program counters as :func:`timed_forward`."""
    block_m = tile_rows(layout, x.shape[0], config, True)
    n_prog = cdiv(x.shape[0], block_m)
    part = partials if partials is not None else torch.empty((n_prog, layout.numel), device=x.device,
                                                             dtype=torch.float32)
    sync = grid_sync.timed_buffers(n_prog, layout.width, x.device)
    launch_backward(layout, x, target, saved["y"], params, saved, part, sync, block_m=block_m,
                    num_warps=config.num_warps, train=True, loss_grad=True, precision=precision,
                    kernel=timed_kernels()[1])
    return grid_sync.counters(sync)

