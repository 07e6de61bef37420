"""Fully fused deep-narrow MLPs (GloNet, plain MLP, ResNet-MLP with batch norm): the whole stack's
forward in one kernel, its backward in one kernel, weight-gradient partials reduced across row tiles.

The networks (width W in {16, 32, 64}, any depth, fp32):

    GloNet / MLP, N dense layers:     h_0 = relu(x W_0^T + b_0)            x: (B, IN), W_0: (W, IN)
                                      h_l = relu(h_{l-1} W_l^T + b_l)      l = 1 .. N-1, W_l: (W, W)
        GloNet:  g = sum_l h_l  (the "GloNet layer"),  y = g . w_head + b_head
        MLP:     y = h_{N-1} . w_head + b_head

    ResNet-MLP, a stem and N/2 blocks of two dense layers with batch norm (BN):
                                      h_0 = x W_s^T + b_s
        block j:  a = relu(BN_{2j}(h_j W_{2j}^T + b_{2j}))
                  h_{j+1} = relu(h_j + BN_{2j+1}(a W_{2j+1}^T + b_{2j+1}))
                  y = h_{N/2} . w_head + b_head
        BN_l(z) = gamma_l * (z - mu) * rstd + beta_l, with (mu, rstd) the batch statistics in training
        (biased variance; running stats updated with the unbiased one, momentum as nn.BatchNorm1d) and
        the running statistics in evaluation.

Parameters live in ONE flat fp32 buffer (see :class:`Layout`): [W_0 | b_0 | W_1..W_L stacked | b_1..
b_L stacked | (gamma | beta) | w_head | b_head]. Kernels address it with offsets; a model's nn.Linear
parameters can be views into it (so the fused Adam of adam.py updates everything in one launch).

Tiling
------
* GloNet / MLP (``_mlp_fwd_kernel``, ``_mlp_bwd_kernel``): program p owns rows [p*BLOCK_M, (p+1)*BLOCK_M)
  for the WHOLE depth: the (BLOCK_M, W) activation tile stays in registers from layer to layer; each layer
  is one tl.dot (BLOCK_M x W x W) + bias + ReLU, and the next layer's W x W weights (1-16 KB) are loaded
  one iteration ahead so their latency hides behind the current layer. The GloNet sum g is a register
  accumulator. Each layer's output is stored (L, B, W) for the backward (it is both the ReLU mask and the
  next layer's input). The 14 input features are zero-padded to KIN = max(16, next_pow2(IN)) in the
  masked load (tl.dot needs K >= 16).
  The backward walks the layers in reverse with dh in registers: dz = dh * [h > 0], the program's
  partial dW_l = dz^T h_{l-1} (a (W, BLOCK_M) x (BLOCK_M, W) dot) and db_l = colsum(dz) go to a
  (num_programs, P) partial buffer in the flat layout, dh_{l-1} = dz W_l (+ dg for GloNet, since every
  h_l also feeds the sum). The partials are summed over programs by ``_colsum_kernel`` (or inside the
  fused Adam, adam.py), deterministically.
* ResNet-MLP in training mode (``_resnet_fwd_kernel``, ``_resnet_bwd_kernel``): batch statistics need
  every row of the batch at every layer. The kernels keep the row tiles (cdiv(B, BLOCK_M) programs, all
  resident at once: at most one per SM) and exchange, per BN layer, two (W,) vectors per program through
  global memory (``_exchange``: 64-bit words tagged with the barrier number, so the data is its own
  barrier; bounded polling with an error flag instead of a hang). Forward: each program publishes the
  mean and sum of squared deviations of its rows; every program combines all of them in the same fixed
  order (Chan's formula: deterministic, two-pass accurate) into the batch mean / variance. Backward: each
  program publishes its partial sums of dbn and dbn * xh (its partial dbeta / dgamma), whose batch totals
  the BN backward dz = rstd (dxh - mean(dxh) - xh mean(dxh xh)) needs. So BN, ReLU, the residual add, the
  running-stat update (program 0) and the BN backward stay fused, at one exchange (~1-2 us: an L2 round
  trip or two) per BN layer and direction: that latency, not arithmetic, sets the step time of a deep
  ResNet. In the CPU interpreter programs run one after another, so there ONE program owns the batch.
  In evaluation mode BN is affine and no exchange is needed.

Launches per training step: forward, backward, (partials reduction fused into) Adam, plus the step
counter: all capturable in one CUDA graph (no host syncs, static shapes).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from .runtime import is_fake as _is_fake, launch as _launch
from .runtime import INTERPRET, Autotuner, Config, bucket, check_tensor, next_power_of_2, num_sms, register_op
from .runtime import register_tuner

KINDS = ("glonet", "mlp", "resnet")
WIDTHS = (16, 32, 64)
PRECISIONS = ("ieee", "tf32", "tf32x3")
MAX_BN_TILE = 16384  # rows * width of the single training-mode ResNet program in the interpreter
MAX_BN_ROWS = 128  # rows per program of the training-mode ResNet on the GPU (the grid must fit on the SMs)
MAX_BN_VALUES = 4096  # rows * width of one such program
MAX_SPIN = 1 << 20  # polls of a grid-wide exchange before giving up (~1 s; only if programs are not resident)


# ----------------------------------------------------------------------------------------------------
# Flat parameter layout
# ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Layout:
    """Offsets of every parameter in the flat buffer.

    kind: "glonet" | "mlp" | "resnet"; in_features: IN; width: W; depth: N, the number of dense layers
    (GloNet/MLP: including the first IN -> W layer; ResNet: the 2 * N/2 block layers, plus a stem).
    ``n_hidden`` is the number of stacked W x W layers: N - 1 (GloNet/MLP) or N (ResNet).
    """

    kind: str
    in_features: int
    width: int
    depth: int

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.width not in WIDTHS:
            raise ValueError(f"width must be one of {WIDTHS}, got {self.width}")
        if self.in_features < 1:
            raise ValueError(f"in_features must be >= 1, got {self.in_features}")
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        if self.kind == "resnet" and self.depth % 2:
            raise ValueError(f"depth of a ResNet-MLP must be even (N/2 blocks of two layers), got {self.depth}")

    @property
    def n_hidden(self) -> int:
        return self.depth if self.kind == "resnet" else self.depth - 1

    @property
    def n_bn(self) -> int:
        return self.depth if self.kind == "resnet" else 0

    @property
    def kin(self) -> int:
        return max(16, next_power_of_2(self.in_features))

    @property
    def offsets(self) -> dict:
        W, IN, H = self.width, self.in_features, self.n_hidden
        o = {"w_in": 0}
        o["b_in"] = o["w_in"] + W * IN
        o["w_hid"] = o["b_in"] + W
        o["b_hid"] = o["w_hid"] + H * W * W
        o["gamma"] = o["b_hid"] + H * W
        o["beta"] = o["gamma"] + self.n_bn * W
        o["w_head"] = o["beta"] + self.n_bn * W
        o["b_head"] = o["w_head"] + W
        o["end"] = o["b_head"] + 1
        return o

    @property
    def numel(self) -> int:
        return self.offsets["end"]

    def views(self, flat: torch.Tensor) -> dict:
        """Named views into a flat buffer: w_in (W, IN), b_in (W,), w_hid (H, W, W), b_hid (H, W),
        gamma / beta (n_bn, W), w_head (1, W), b_head (1,)."""
        if flat.ndim != 1 or flat.numel() != self.numel:
            raise ValueError(f"flat buffer must be 1-D with {self.numel} elements, got shape {tuple(flat.shape)}")
        o, W, IN, H = self.offsets, self.width, self.in_features, self.n_hidden
        return {
            "w_in": flat[o["w_in"]:o["b_in"]].view(W, IN),
            "b_in": flat[o["b_in"]:o["w_hid"]],
            "w_hid": flat[o["w_hid"]:o["b_hid"]].view(H, W, W),
            "b_hid": flat[o["b_hid"]:o["gamma"]].view(H, W),
            "gamma": flat[o["gamma"]:o["beta"]].view(self.n_bn, W),
            "beta": flat[o["beta"]:o["w_head"]].view(self.n_bn, W),
            "w_head": flat[o["w_head"]:o["b_head"]].view(1, W),
            "b_head": flat[o["b_head"]:o["end"]],
        }


# ----------------------------------------------------------------------------------------------------
# Kernels: GloNet / MLP (row tiles)
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN: tl.constexpr):
    """The program's rows of x (any strides) as fp32, the IN features zero-padded to KIN columns."""
    kin = tl.arange(0, KIN)
    return tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + kin[None, :] * stride_xk,
                   mask=rmask[:, None] & (kin[None, :] < IN), other=0.0).to(tl.float32)


@triton.jit
def _mlp_fwd_kernel(
    x_ptr, t_ptr, p_ptr, acts_ptr, g_ptr, y_ptr, loss_ptr,
    B, IN, NH, stride_xm, stride_xk,
    OFF_WHID, OFF_BHID, OFF_WHEAD, OFF_BHEAD,
    GLONET: tl.constexpr, WITH_LOSS: tl.constexpr, SAVE: tl.constexpr, PRECISION: tl.constexpr,
    W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Forward of the whole stack for BLOCK_M rows.

    x: (B, IN) any strides; t: (B,) targets (WITH_LOSS); p: flat params (Layout); acts: (NH+1, B, W)
    layer outputs; g: (B, W) GloNet sum; y: (B,) predictions; loss: (num_programs,) sum of squared errors.
    """
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < B
    cols = tl.arange(0, W)
    kin = tl.arange(0, KIN)
    BW = B * W
    act_offs = rows[:, None] * W + cols[None, :]
    x = _load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
    # layer 0: W_0 is (W, IN) row-major; read W_0^T as a (KIN, W) tile, zero-padded rows k >= IN
    w0t = tl.load(p_ptr + cols[None, :] * IN + kin[:, None], mask=kin[:, None] < IN, other=0.0)
    b0 = tl.load(p_ptr + W * IN + cols)
    # prefetch hidden layer 0 (masked off when there is none)
    w_lim = W * tl.minimum(NH, 1)  # W when there is a hidden layer, else 0 (mask everything off)
    wt_n = tl.load(p_ptr + OFF_WHID + cols[None, :] * W + cols[:, None], mask=cols[:, None] < w_lim, other=0.0)
    b_n = tl.load(p_ptr + OFF_BHID + cols, mask=cols < w_lim, other=0.0)
    h = tl.maximum(tl.dot(x, w0t, input_precision=PRECISION) + b0[None, :], 0.0)
    if SAVE:
        tl.store(acts_ptr + act_offs, h, mask=rmask[:, None])
    g = h
    for l in range(0, NH):
        wt = wt_n
        bl = b_n
        nxt = tl.minimum(l + 1, NH - 1)  # next layer's weights, loaded while this one computes
        wt_n = tl.load(p_ptr + OFF_WHID + nxt * (W * W) + cols[None, :] * W + cols[:, None])
        b_n = tl.load(p_ptr + OFF_BHID + nxt * W + cols)
        h = tl.maximum(tl.dot(h, wt, input_precision=PRECISION) + bl[None, :], 0.0)
        if SAVE:
            tl.store(acts_ptr + (l + 1) * BW + act_offs, h, mask=rmask[:, None])
        if GLONET:
            g += h
    wh = tl.load(p_ptr + OFF_WHEAD + cols)
    bh = tl.load(p_ptr + OFF_BHEAD)
    if GLONET:
        feat = g
        if SAVE:
            tl.store(g_ptr + act_offs, g, mask=rmask[:, None])
    else:
        feat = h
    y = tl.sum(feat * wh[None, :], axis=1) + bh
    tl.store(y_ptr + rows, y, mask=rmask)
    if WITH_LOSS:
        t = tl.load(t_ptr + rows, mask=rmask, other=0.0)
        d = tl.where(rmask, y - t, 0.0)
        tl.store(loss_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def _upstream_grad(y_ptr, t_ptr, dy_ptr, dy_scale, rows, rmask, LOSS_GRAD: tl.constexpr):
    """dL/dy for the program's rows: dy_scale * (y - t) for the fused MSE loss (LOSS_GRAD), else loaded."""
    if LOSS_GRAD:
        y = tl.load(y_ptr + rows, mask=rmask, other=0.0)
        t = tl.load(t_ptr + rows, mask=rmask, other=0.0)
        dy = tl.where(rmask, dy_scale * (y - t), 0.0)
    else:
        dy = tl.load(dy_ptr + rows, mask=rmask, other=0.0)
    return dy


@triton.jit
def _mlp_bwd_kernel(
    x_ptr, t_ptr, dy_ptr, p_ptr, acts_ptr, g_ptr, y_ptr, part_ptr,
    B, IN, NH, P, stride_xm, stride_xk, dy_scale,
    OFF_WHID, OFF_BHID, OFF_WHEAD, OFF_BHEAD,
    GLONET: tl.constexpr, LOSS_GRAD: tl.constexpr, PRECISION: tl.constexpr,
    W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Backward of the whole stack for BLOCK_M rows; writes this program's gradient partials.

    dy: (B,) upstream gradient of y, or (LOSS_GRAD) dy = dy_scale * (y - t) computed here (MSE: 2/B).
    part: (num_programs, P) partial gradients in the flat layout of p.
    """
    pid = tl.program_id(0)
    # Python floats can arrive as fp64 under torch.compile: keep every scalar (and loop-carried value) fp32
    dy_scale = tl.cast(dy_scale, tl.float32)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < B
    cols = tl.arange(0, W)
    kin = tl.arange(0, KIN)
    BW = B * W
    act_offs = rows[:, None] * W + cols[None, :]
    part = part_ptr + pid.to(tl.int64) * P
    dy = _upstream_grad(y_ptr, t_ptr, dy_ptr, dy_scale, rows, rmask, LOSS_GRAD)
    h = tl.load(acts_ptr + NH * BW + act_offs, mask=rmask[:, None], other=0.0)
    if GLONET:
        feat = tl.load(g_ptr + act_offs, mask=rmask[:, None], other=0.0)
    else:
        feat = h
    wh = tl.load(p_ptr + OFF_WHEAD + cols)
    tl.store(part + OFF_WHEAD + cols, tl.sum(dy[:, None] * feat, axis=0))
    tl.store(part + OFF_BHEAD, tl.sum(dy, axis=0))
    dg = dy[:, None] * wh[None, :]
    dh = dg
    # prefetch layer NH's weights (as stored, (W_out, W_in)) and its input h_{NH-1}
    top = tl.maximum(NH - 1, 0)
    w_lim = W * tl.minimum(NH, 1)  # W when there is a hidden layer, else 0 (mask everything off)
    w_n = tl.load(p_ptr + OFF_WHID + top * (W * W) + cols[:, None] * W + cols[None, :],
                  mask=cols[:, None] < w_lim, other=0.0)
    hp_n = tl.load(acts_ptr + top * BW + act_offs, mask=rmask[:, None] & (cols[None, :] < w_lim), other=0.0)
    for i in range(0, NH):
        l = NH - i  # layer l (hidden index l - 1), its input is h_{l-1}
        w = w_n
        hp = hp_n
        nxt = tl.maximum(l - 2, 0)
        w_n = tl.load(p_ptr + OFF_WHID + nxt * (W * W) + cols[:, None] * W + cols[None, :])
        hp_n = tl.load(acts_ptr + nxt * BW + act_offs, mask=rmask[:, None], other=0.0)
        dz = tl.where(h > 0.0, dh, 0.0)
        dw = tl.dot(tl.trans(dz), hp, input_precision=PRECISION)
        tl.store(part + OFF_WHID + (l - 1) * (W * W) + cols[:, None] * W + cols[None, :], dw)
        tl.store(part + OFF_BHID + (l - 1) * W + cols, tl.sum(dz, axis=0))
        dh = tl.dot(dz, w, input_precision=PRECISION)
        if GLONET:
            dh += dg
        h = hp
    # layer 0: input x (zero-padded to KIN columns)
    dz = tl.where(h > 0.0, dh, 0.0)
    x = _load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
    dw0 = tl.dot(tl.trans(dz), x, input_precision=PRECISION)  # (W, KIN)
    tl.store(part + cols[:, None] * IN + kin[None, :], dw0, mask=kin[None, :] < IN)
    tl.store(part + W * IN + cols, tl.sum(dz, axis=0))


# ----------------------------------------------------------------------------------------------------
# Kernels: ResNet-MLP with batch norm
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _bar_tag(base, k):
    """Tag of barrier k of a launch whose first barrier follows ``base``: 1 .. 2**31 - 2, never 0 (the
    value the exchange buffer starts with), and different from the last few barriers' tags."""
    return (base + k) % 2147483646 + 1


@triton.jit
def _exchange(sync_ptr, tag, k, va, vb, pid, n_prog, failed, prof, max_spin,
              NP: tl.constexpr, W: tl.constexpr, PROF: tl.constexpr):
    """Grid-wide exchange of two (W,) fp32 vectors per program: program ``pid`` publishes (va, vb) for
    barrier ``k`` and waits until every program has published its own; returns the (NP, W) tiles of all
    programs' va and vb (rows >= n_prog are 0) and the updated per-word timeout flags ``failed`` (and
    ``prof``).

    Each value travels as one 64-bit word (tag << 32) | bits(value): a reader that sees the barrier's tag
    in a word also sees its value (64-bit stores are single-copy atomic), so the data is its own barrier:
    one plain store, then volatile loads (L1 bypassed) until every word carries the tag, with no counter
    or fence. A program's words are interleaved (va[c], vb[c]) so one (NP, W, 2) load polls everything.
    Barrier k uses buffer k % 2: a program can write barrier k+2's words only after it has read every
    program's words of barrier k+1, which each program wrote after it had read barrier k's.
    The poll is bounded (``max_spin``): if the programs are not all resident it flags the missing words
    in ``failed`` (never waited for again) and stops waiting (the results are then wrong, and the launcher reports it) instead of hanging.
    PROF: ``prof`` accumulates (ns spent waiting) * 2**20 + (polls issued), read by bench.resnet_numerics.
    """
    _publish(sync_ptr, tag, k, va, vb, pid, NP, W)
    return _gather(sync_ptr, tag, k, n_prog, failed, prof, max_spin, NP, W, PROF)


@triton.jit
def _publish(sync_ptr, tag, k, va, vb, pid, NP: tl.constexpr, W: tl.constexpr):
    """First half of _exchange: store this program's tagged words for barrier k (returns at once)."""
    cols = tl.arange(0, W)
    e = tl.arange(0, 2)
    slot = sync_ptr + (k % 2) * (NP * 2 * W)
    words = (tag.to(tl.int64) << 32) | (tl.join(va, vb).to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
    tl.store(slot + pid * (2 * W) + 2 * cols[:, None] + e[None, :], words)  # (W, 2): va[c], vb[c] interleaved


@triton.jit
def _any(flags):
    """Whether any element of an (NP, W, 2) 0/1 tile is set (one block-wide reduction)."""
    return tl.max(tl.max(tl.max(flags, axis=2), axis=1), axis=0) > 0


@triton.jit
def _lacking(got, qmask, tag):
    """Per word: 1 where an (unmasked) exchange word does not carry ``tag`` yet."""
    return tl.where(qmask & ((got >> 32) != tag), 1, 0)


@triton.jit
def _gather(sync_ptr, tag, k, n_prog, failed, prof, max_spin, NP: tl.constexpr, W: tl.constexpr,
            PROF: tl.constexpr):
    """Second half of _exchange: poll until every program's words of barrier k carry ``tag``; unpack.
    ``failed`` is per word (NP, W, 2): a word that timed out once is not waited for again."""
    cols = tl.arange(0, W)
    e = tl.arange(0, 2)
    q = tl.arange(0, NP)
    slot = sync_ptr + (k % 2) * (NP * 2 * W)
    if PROF:
        t0 = tl.extra.cuda.globaltimer()
    offs = q[:, None, None] * (2 * W) + 2 * cols[None, :, None] + e[None, None, :]
    qmask = (q < n_prog)[:, None, None]
    got = tl.load(slot + offs, mask=qmask, other=0, volatile=True)
    spins = 0
    while _any(_lacking(got, qmask, tag) * (1 - failed)) & (spins < max_spin):
        got = tl.load(slot + offs, mask=qmask, other=0, volatile=True)
        spins += 1
    failed = failed | _lacking(got, qmask, tag)
    if PROF:
        prof += ((tl.extra.cuda.globaltimer() - t0) << 20) + spins + 1
    vals = tl.where(qmask, (got & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), 0.0)
    a, b = tl.split(vals)
    return a, b, failed, prof


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
def _bn_batch_stats(z, rmask, pid, n_prog, B, inv_n, sync_ptr, tag, k, failed, prof, max_spin,
                    BLOCK_M: tl.constexpr, NP: tl.constexpr, W: tl.constexpr, PROF: tl.constexpr):
    """Batch mean and biased variance of the columns of z over ALL B rows, the rows spread over n_prog
    programs of BLOCK_M: each program summarises its own rows as (mean, M2 = sum of squared deviations),
    the programs exchange the summaries, and every program merges all of them in the same order, so all
    hold identical values. Both the local summary and the merge are ONE reduction each whose combine is
    Chan et al.'s pairwise update (n = na + nb, mean = ma + d nb / n, M2 = M2a + M2b + d^2 na nb / n with
    d = mb - ma): as stable as two passes, without the second pass's dependent reduction."""
    ones = tl.where(rmask[:, None], 1.0, 0.0) + tl.zeros_like(z)
    _, mean_p, m2_p = tl.reduce((ones, tl.where(rmask[:, None], z, 0.0), tl.zeros_like(z)), 0, _chan)
    means, m2s, failed, prof = _exchange(sync_ptr, tag, k, mean_p, m2_p, pid, n_prog, failed, prof, max_spin,
                                         NP, W, PROF)
    q = tl.arange(0, NP)
    cnt = tl.minimum(tl.maximum(B - q * BLOCK_M, 0), BLOCK_M).to(tl.float32)
    _, mean, m2 = tl.reduce((cnt[:, None] + tl.zeros_like(means), means, m2s), 0, _chan)
    var = m2 * inv_n
    return mean, var, failed, prof


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
                  run_ptr, rstd_ptr, xh_ptr, bstat_ptr, xh_offs, sync_ptr, tag, failed, prof, max_spin,
                  TRAIN: tl.constexpr, UPDATE_RUNNING: tl.constexpr, SAVE: tl.constexpr,
                  PRECISION: tl.constexpr, W: tl.constexpr, BLOCK_M: tl.constexpr, NP: tl.constexpr,
                  PROF: tl.constexpr):
    """One dense layer + batch norm: returns BN(hin W_l^T + b_l) (before the ReLU), saving xh and rstd;
    TRAIN: batch statistics through one exchange (program 0 records them and moves the running ones)."""
    cols = tl.arange(0, W)
    z = tl.dot(hin, wt, input_precision=PRECISION) + bl[None, :]
    if TRAIN:
        mean, var, failed, prof = _bn_batch_stats(z, rmask, pid, n_prog, B, inv_n, sync_ptr, tag, l, failed,
                                                  prof, max_spin, BLOCK_M, NP, W, PROF)
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
    return xh * gamma[None, :] + beta[None, :], failed, prof


@triton.jit
def _resnet_fwd_kernel(
    x_ptr, t_ptr, p_ptr, run_ptr, rstd_ptr, hs_ptr, xh_ptr, a_ptr, y_ptr, loss_ptr, bstat_ptr,
    sync_ptr, state_ptr, prof_ptr,
    B, IN, NBLK, stride_xm, stride_xk, inv_n, unbias, momentum, eps, max_spin,
    OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, OFF_WHEAD, OFF_BHEAD,
    TRAIN: tl.constexpr, UPDATE_RUNNING: tl.constexpr, WITH_LOSS: tl.constexpr, SAVE: tl.constexpr,
    PRECISION: tl.constexpr, W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr, NP: tl.constexpr,
    PROF: tl.constexpr = False,
):
    """ResNet-MLP forward over row tiles of BLOCK_M. TRAIN: batch statistics through a grid-wide
    exchange per BN layer (all programs resident; see _exchange); else the running statistics.

    Block j: a = relu(BN_{2j}(h_j W_{2j}^T + b)), h_{j+1} = relu(h_j + BN_{2j+1}(a W_{2j+1}^T + b)); the loop
    runs a block per iteration (two layers written out, no per-layer selects or masked stores).

    run: (2, L, W) running mean / var (read in eval; updated in place by program 0 when UPDATE_RUNNING);
    rstd: (L, W) saved 1/sqrt(var + eps); bstat: (2, L, W) batch mean / biased var (TRAIN);
    hs: (NBLK+1, B, W) block inputs and the final output; xh: (L, B, W) normalised pre-activations;
    a: (NBLK, B, W) first-layer outputs of each block; y: (B,); loss: (num_programs,);
    sync: (2, NP, 2W) int64 exchange words; state: (2,) int32 [barriers so far, error flag] (TRAIN);
    prof: (num_programs, 2) int64 [wait ns * 2**20 + polls, kernel ns] when PROF (instrumented build).
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
    base, failed, prof, t_start = _barriers_begin(state_ptr, TRAIN, PROF, NP, W)
    x = _load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
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
        bn1, failed, prof = _bn_fwd_layer(
            h, w1, b1, g1, e1, m1, v1, 2 * j, L, rmask, pid, n_prog, B, inv_n, unbias, momentum, eps,
            run_ptr, rstd_ptr, xh_ptr, bstat_ptr, (2 * j) * BW + act_offs, sync_ptr, _bar_tag(base, 2 * j),
            failed, prof, max_spin, TRAIN, UPDATE_RUNNING, SAVE, PRECISION, W, BLOCK_M, NP, PROF)
        a = tl.maximum(bn1, 0.0)
        if SAVE:
            tl.store(a_ptr + j * BW + act_offs, a, mask=rmask[:, None])
        bn2, failed, prof = _bn_fwd_layer(
            a, w2, b2, g2, e2, m2, v2, 2 * j + 1, L, rmask, pid, n_prog, B, inv_n, unbias, momentum, eps,
            run_ptr, rstd_ptr, xh_ptr, bstat_ptr, (2 * j + 1) * BW + act_offs, sync_ptr,
            _bar_tag(base, 2 * j + 1), failed, prof, max_spin, TRAIN, UPDATE_RUNNING, SAVE, PRECISION, W,
            BLOCK_M, NP, PROF)
        h = tl.maximum(h + bn2, 0.0)
    if SAVE:
        tl.store(hs_ptr + NBLK * BW + act_offs, h, mask=rmask[:, None])
    y = tl.sum(h * tl.load(p_ptr + OFF_WHEAD + cols)[None, :], axis=1) + tl.load(p_ptr + OFF_BHEAD)
    tl.store(y_ptr + rows, y, mask=rmask)
    if WITH_LOSS:
        t = tl.load(t_ptr + rows, mask=rmask, other=0.0)
        d = tl.where(rmask, y - t, 0.0)
        tl.store(loss_ptr + pid, tl.sum(d * d, axis=0))
    _barriers_end(state_ptr, prof_ptr, base, L, failed, prof, t_start, pid, TRAIN, PROF)


@triton.jit
def _barriers_begin(state_ptr, TRAIN: tl.constexpr, PROF: tl.constexpr, NP: tl.constexpr, W: tl.constexpr):
    """Before the first exchange: (barrier count so far, per-word timeout flags, profile accumulator, start
    time)."""
    if TRAIN:
        base = tl.load(state_ptr)
    else:
        base = tl.zeros([], dtype=tl.int32)
    t_start = tl.zeros([], dtype=tl.int64)
    if PROF:
        t_start = tl.extra.cuda.globaltimer()
    return base, tl.zeros([NP, W, 2], dtype=tl.int32), tl.zeros([], dtype=tl.int64), t_start


@triton.jit
def _barriers_end(state_ptr, prof_ptr, base, n_bar, failed, prof, t_start, pid, TRAIN: tl.constexpr,
                  PROF: tl.constexpr):
    """After the last exchange: program 0 advances the barrier count (every program has read ``base`` by
    then), any program whose wait timed out raises the error flag; PROF: each program's counters."""
    if TRAIN:
        if pid == 0:
            tl.store(state_ptr, (base + n_bar) % 2147483646)
        if _any(failed):
            tl.store(state_ptr + 1, 1)
    if PROF:
        tl.store(prof_ptr + 2 * pid, prof)
        tl.store(prof_ptr + 2 * pid + 1, tl.extra.cuda.globaltimer() - t_start)


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
    x_ptr, t_ptr, dy_ptr, p_ptr, rstd_ptr, hs_ptr, xh_ptr, a_ptr, y_ptr, part_ptr, sync_ptr, state_ptr, prof_ptr,
    B, IN, NBLK, P, stride_xm, stride_xk, dy_scale, inv_n, max_spin,
    OFF_WHID, OFF_BHID, OFF_GAMMA, OFF_BETA, OFF_WHEAD, OFF_BHEAD,
    TRAIN: tl.constexpr, LOSS_GRAD: tl.constexpr, PRECISION: tl.constexpr,
    W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr, NP: tl.constexpr, PROF: tl.constexpr = False,
):
    """ResNet-MLP backward (same grid as the forward); writes gradient partials (num_programs, P).

    Per block, from dh = dL/dh_{j+1}:  dpre = dh [h_{j+1} > 0];  BN_{2j+1} backward -> dz2;
    dW_{2j+1} = dz2^T a;  da = dz2 W_{2j+1};  dr = da [a > 0];  BN_{2j} backward -> dz1;
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
    base, failed, prof, t_start = _barriers_begin(state_ptr, TRAIN, PROF, NP, W)
    dy = _upstream_grad(y_ptr, t_ptr, dy_ptr, dy_scale, rows, rmask, LOSS_GRAD)
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
        # second layer: dbn2 = dL/d(BN_{2j+1} output) = dh [h_{j+1} > 0] (the residual ReLU)
        dpre = tl.where(h > 0.0, dh, 0.0)
        dbn2 = tl.where(rmask[:, None], dpre, 0.0)
        db2, dg2 = _sum2(dbn2, dbn2 * xh2, 0)  # this program's dbeta / dgamma (xh2 is 0 on masked rows)
        if TRAIN:
            _publish(sync_ptr, _bar_tag(base, 2 * i), 2 * i, db2, dg2, pid, NP, W)
        if i > 0:  # block j+1's first layer: its input is h (= h_{j+1})
            _store_dw(part, l1 + 2, dz1_p, h, OFF_WHID, OFF_BHID, PRECISION, W)
        sb2, sg2 = db2, dg2
        if TRAIN:
            dbs, dgs, failed, prof = _gather(sync_ptr, _bar_tag(base, 2 * i), 2 * i, n_prog, failed, prof, max_spin,
                                             NP, W, PROF)
            sb2, sg2 = _sum2(dbs, dgs, 0)
        dz2 = _bn_dz(dbn2, xh2, g2, r2, sb2, sg2, inv_n, rmask, TRAIN)
        # first layer: dbn1 = (dz2 W_{2j+1}) [a > 0]
        dbn1 = tl.where(rmask[:, None] & (a > 0.0), tl.dot(dz2, w2, input_precision=PRECISION), 0.0)
        db1, dg1 = _sum2(dbn1, dbn1 * xh1, 0)
        if TRAIN:
            _publish(sync_ptr, _bar_tag(base, 2 * i + 1), 2 * i + 1, db1, dg1, pid, NP, W)
        _store_dw(part, l2, dz2, a, OFF_WHID, OFF_BHID, PRECISION, W)
        tl.store(part + OFF_GAMMA + l2 * W + cols, dg2)
        tl.store(part + OFF_BETA + l2 * W + cols, db2)
        tl.store(part + OFF_GAMMA + l1 * W + cols, dg1)
        tl.store(part + OFF_BETA + l1 * W + cols, db1)
        sb1, sg1 = db1, dg1
        if TRAIN:
            dbs, dgs, failed, prof = _gather(sync_ptr, _bar_tag(base, 2 * i + 1), 2 * i + 1, n_prog, failed, prof,
                                             max_spin, NP, W, PROF)
            sb1, sg1 = _sum2(dbs, dgs, 0)
        dz1 = _bn_dz(dbn1, xh1, g1, r1, sb1, sg1, inv_n, rmask, TRAIN)
        dh = dpre + tl.dot(dz1, w1, input_precision=PRECISION)
        dz1_p = dz1
        h = hin
    if NBLK > 0:  # block 0's first layer (input h_0, the stem output)
        _store_dw(part, 0, dz1_p, h, OFF_WHID, OFF_BHID, PRECISION, W)
    x = _load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
    dh = tl.where(rmask[:, None], dh, 0.0)
    tl.store(part + cols[:, None] * IN + kin[None, :], tl.dot(tl.trans(dh), x, input_precision=PRECISION),
             mask=kin[None, :] < IN)
    tl.store(part + W * IN + cols, tl.sum(dh, axis=0))
    _barriers_end(state_ptr, prof_ptr, base, 2 * NBLK, failed, prof, t_start, pid, TRAIN, PROF)


@triton.jit
def _colsum_kernel(part_ptr, out_ptr, NP, P, BLOCK: tl.constexpr):
    """out[i] = sum_r part[r, i]: the deterministic reduction of gradient partials over row tiles."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < P
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r in range(0, NP):
        acc += tl.load(part_ptr + r * P + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, acc, mask=mask)


# ----------------------------------------------------------------------------------------------------
# Autotuning spaces
# ----------------------------------------------------------------------------------------------------
def _rcfg(bm, warps):
    return Config({"BLOCK_M": bm}, warps, 1)


# row tiles: 1024 rows / 16 = 64 programs ... enough to keep the dependent chains of many SMs busy;
# small warps counts keep the per-layer dot + layout shuffle short (latency, not throughput, matters)
ROW_CONFIGS = [_rcfg(bm, w) for bm in (16, 32, 64) for w in (1, 2, 4)]
ROW_INTERPRET = _rcfg(16, 4)
# training-mode ResNet: row tiles that exchange batch statistics, so cdiv(B, BLOCK_M) programs must all be
# resident (<= the SM count). Each BN layer costs one exchange (~an L2 round trip): fewer, fatter tiles
# cost more per-layer math, more, thinner ones more polling traffic. 64 rows / 2 warps first.
BN_CONFIGS = [_rcfg(bm, w) for bm in (64, 32, 128, 16) for w in (2, 4, 1)]
BN_INTERPRET = Config({}, 4, 1)  # no BLOCK_M: the interpreter runs programs in turn, so ONE owns the batch

_fwd_tuner = register_tuner(Autotuner("fused_mlp_fwd", _mlp_fwd_kernel, ROW_CONFIGS, interpret_config=ROW_INTERPRET))
_bwd_tuner = register_tuner(Autotuner("fused_mlp_bwd", _mlp_bwd_kernel, ROW_CONFIGS, interpret_config=ROW_INTERPRET))
_rfwd_tuner = register_tuner(Autotuner("fused_resnet_fwd", _resnet_fwd_kernel, BN_CONFIGS + ROW_CONFIGS,
                                       interpret_config=BN_INTERPRET))
_rbwd_tuner = register_tuner(Autotuner("fused_resnet_bwd", _resnet_bwd_kernel, BN_CONFIGS + ROW_CONFIGS,
                                       interpret_config=BN_INTERPRET))


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def validate(layout: Layout, x, params, target=None, running=None, precision="ieee", training=True):
    """Check every input of the fused ops; ValueErrors name the argument (nothing is launched)."""
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a Layout, got {type(layout).__name__}")
    check_tensor("x", x, ndim=2, dtypes=(torch.float32,))
    check_tensor("params", params, ndim=1, dtypes=(torch.float32,), device=x.device)
    if x.shape[1] != layout.in_features:
        raise ValueError(f"x has {x.shape[1]} features but the network expects in_features={layout.in_features}")
    if x.shape[0] < 1:
        raise ValueError("x must have at least one row")
    if params.numel() != layout.numel:
        raise ValueError(f"params has {params.numel()} elements, the {layout.kind} layout needs {layout.numel}")
    if not params.is_contiguous():
        raise ValueError("params must be contiguous (one flat buffer)")
    if target is not None:
        check_tensor("target", target, ndim=1, dtypes=(torch.float32,), device=x.device)
        if target.shape[0] != x.shape[0]:
            raise ValueError(f"target has {target.shape[0]} rows but x has {x.shape[0]}")
        if not target.is_contiguous():
            raise ValueError("target must be contiguous")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if (layout.n_hidden + 2) * x.shape[0] * layout.width >= 2**31:
        raise ValueError(f"x has {x.shape[0]} rows: the saved activations of this network would exceed 2**31 "
                         "elements (32-bit offsets); use smaller batches")
    if layout.kind == "resnet":
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


def _sync_buffers(n_prog: int, width: int, device) -> dict:
    """The exchange words (2 buffers x NP programs x 2W, int64, tag 0 = nothing) and [barrier count,
    error flag] of a training-mode ResNet kernel; reused across launches (the count keeps tags fresh)."""
    NP = next_power_of_2(n_prog)
    return {"sync": torch.zeros(2 * NP * 2 * width, device=device, dtype=torch.int64),
            "state": torch.zeros(2, device=device, dtype=torch.int32), "_np": NP}


def check_sync(*bufs) -> None:
    """Raise if a training-mode ResNet launch gave up waiting for its programs (one host sync)."""
    for b in bufs:
        st = b.get("state") if isinstance(b, dict) else None
        if st is not None and int(st[1].item()):
            raise RuntimeError("a fused ResNet launch timed out in a grid-wide exchange (its programs were not "
                               "all resident at once, e.g. another kernel held the SMs); its results are invalid")


def _key(layout: Layout, B: int, precision: str, extra=()):
    return (layout.kind, layout.width, layout.kin, bucket(B), bucket(max(layout.n_hidden, 1), 1), precision) + tuple(extra)


def forward(layout: Layout, x: torch.Tensor, params: torch.Tensor, *, target: Optional[torch.Tensor] = None,
            running: Optional[torch.Tensor] = None, training: bool = True, update_running: bool = True,
            precision: str = "ieee", save: bool = True, momentum: float = 0.1, eps: float = 1e-5,
            out: Optional[dict] = None, config: Optional[Config] = None,
            profile: Optional[torch.Tensor] = None) -> dict:
    """Run the fused forward. Returns a dict with y (B,), loss_partials (num_programs,) when ``target`` is
    given, the saved activations, and the config used. ``out``: preallocated buffers to reuse (CUDA graphs).
    ``profile``: an int64 (num_programs, 2) tensor; a training-mode ResNet then runs its instrumented build
    and writes [wait ns * 2**20 + polls, kernel ns] per program (see _exchange)."""
    B = x.shape[0]
    W, KIN, NH = layout.width, layout.kin, layout.n_hidden
    o = layout.offsets
    dev = x.device
    bn_train = layout.kind == "resnet" and training

    def buffers(cfg):
        bm = _block_m(layout, B, cfg, bn_train)
        n_prog = triton.cdiv(B, bm)
        if out is not None and out.get("_n_prog") == n_prog:
            return out
        f32 = dict(device=dev, dtype=torch.float32)
        buf = {"_n_prog": n_prog, "y": torch.empty(B, **f32), "loss_partials": torch.empty(n_prog, **f32)}
        if layout.kind == "resnet":
            nb, L = layout.depth // 2, layout.depth
            buf.update(hs=torch.empty((nb + 1, B, W) if save else (1,), **f32),
                       xh=torch.empty((L, B, W) if save else (1,), **f32),
                       a=torch.empty((nb, B, W) if save else (1,), **f32),
                       rstd=torch.empty((L, W), **f32), bstat=torch.empty((2, L, W), **f32))
            buf.update(_sync_buffers(n_prog if bn_train else 1, W, dev))
        else:
            buf.update(acts=torch.empty((NH + 1, B, W) if save else (1,), **f32),
                       g=torch.empty((B, W) if (save and layout.kind == "glonet") else (1,), **f32))
        return buf

    def run(cfg, update=update_running):
        buf = buffers(cfg)
        bm = _block_m(layout, B, cfg, bn_train)
        grid = (triton.cdiv(B, bm),)
        t = target if target is not None else buf["y"]
        common = dict(PRECISION=precision, W=W, KIN=KIN, BLOCK_M=bm, num_warps=cfg.num_warps, num_stages=1)
        if layout.kind == "resnet":
            _launch(_resnet_fwd_kernel, grid, x, t, params, running, buf["rstd"], buf["hs"], buf["xh"], buf["a"],
                    buf["y"], buf["loss_partials"], buf["bstat"], buf["sync"], buf["state"],
                    profile if profile is not None else buf["sync"],
                    B, layout.in_features, layout.depth // 2,
                    x.stride(0), x.stride(1), 1.0 / B, B / max(B - 1, 1), momentum, eps, MAX_SPIN,
                    o["w_hid"], o["b_hid"], o["gamma"], o["beta"], o["w_head"], o["b_head"],
                    TRAIN=bn_train, UPDATE_RUNNING=bool(bn_train and update), WITH_LOSS=target is not None,
                    SAVE=save, NP=buf["_np"], PROF=profile is not None, **common)
        else:
            _launch(_mlp_fwd_kernel, grid, x, t, params, buf["acts"], buf["g"], buf["y"], buf["loss_partials"],
                    B, layout.in_features, NH, x.stride(0), x.stride(1),
                    o["w_hid"], o["b_hid"], o["w_head"], o["b_head"],
                    GLONET=layout.kind == "glonet", WITH_LOSS=target is not None, SAVE=save, **common)
        return buf

    if config is None:
        tuner = _rfwd_tuner if layout.kind == "resnet" else _fwd_tuner
        config = tuner.pick(_key(layout, B, precision, (bn_train, save)), lambda c: run(c, update=False),
                            lambda: _configs(layout, B, bn_train, dev), tracing=_is_fake(x, params))
    buf = run(config)
    buf = dict(buf)
    buf["config"] = config
    return buf


def _block_m(layout, B, cfg, bn_train):
    if bn_train and "BLOCK_M" not in cfg.kwargs:  # the interpreter's config: one program, the whole batch
        return max(16, next_power_of_2(B))
    return cfg.kwargs.get("BLOCK_M", 16 if INTERPRET else 64)


def _configs(layout, B, bn_train, device):
    if layout.kind == "resnet":
        if not bn_train:
            return ROW_CONFIGS
        rows = _bn_rows(layout.width)
        fit = [c for c in BN_CONFIGS
               if triton.cdiv(B, c.kwargs["BLOCK_M"]) <= num_sms(device) and c.kwargs["BLOCK_M"] <= rows]
        return fit or [_rcfg(rows, 4)]
    return [c for c in ROW_CONFIGS if c.kwargs["BLOCK_M"] <= max(16, next_power_of_2(B))]


def backward(layout: Layout, x: torch.Tensor, params: torch.Tensor, saved: dict, *,
             dy: Optional[torch.Tensor] = None, target: Optional[torch.Tensor] = None, training: bool = True,
             precision: str = "ieee", grad_out: Optional[torch.Tensor] = None, reduce: bool = True,
             partials: Optional[torch.Tensor] = None, sync: Optional[dict] = None,
             config: Optional[Config] = None, profile: Optional[torch.Tensor] = None) -> dict:
    """Run the fused backward from the forward's ``saved`` dict.

    The upstream gradient is ``dy`` (B,), or with ``target`` the MSE gradient 2 (y - t) / B computed in
    the kernel. Returns {"partials": (num_programs, P), "grad": (P,) when ``reduce``, "config", and for a
    ResNet the exchange buffers "sync" (pass them back as ``sync`` to reuse them)}.
    """
    B = x.shape[0]
    W, KIN, NH, P = layout.width, layout.kin, layout.n_hidden, layout.numel
    o = layout.offsets
    bn_train = layout.kind == "resnet" and training
    if dy is None and target is None:
        raise ValueError("backward needs dy or target")
    if dy is not None:
        check_tensor("dy", dy, ndim=1, dtypes=(torch.float32,), device=x.device)
        if dy.shape[0] != B:
            raise ValueError(f"dy has {dy.shape[0]} rows but x has {B}")
        dy = dy.contiguous()

    def run(cfg, part=None):
        bm = _block_m(layout, B, cfg, bn_train)
        n_prog = triton.cdiv(B, bm)
        if part is None or part.shape != (n_prog, P):
            part = torch.empty((n_prog, P), device=x.device, dtype=torch.float32)
        t = target if target is not None else saved["y"]
        d = dy if dy is not None else saved["y"]
        common = dict(LOSS_GRAD=dy is None, PRECISION=precision, W=W, KIN=KIN, BLOCK_M=bm,
                      num_warps=cfg.num_warps, num_stages=1)
        if layout.kind == "resnet":
            nonlocal sync
            if sync is None or sync["_np"] != next_power_of_2(n_prog if bn_train else 1):
                sync = _sync_buffers(n_prog if bn_train else 1, W, x.device)
            _launch(_resnet_bwd_kernel, (n_prog,), x, t, d, params, saved["rstd"], saved["hs"], saved["xh"],
                    saved["a"], saved["y"], part, sync["sync"], sync["state"],
                    profile if profile is not None else sync["sync"],
                    B, layout.in_features, layout.depth // 2, P,
                    x.stride(0), x.stride(1), 2.0 / B, 1.0 / B, MAX_SPIN,
                    o["w_hid"], o["b_hid"], o["gamma"], o["beta"], o["w_head"], o["b_head"],
                    TRAIN=bn_train, NP=sync["_np"], PROF=profile is not None, **common)
        else:
            _launch(_mlp_bwd_kernel, (n_prog,), x, t, d, params, saved["acts"], saved["g"], saved["y"], part,
                    B, layout.in_features, NH, P, x.stride(0), x.stride(1), 2.0 / B,
                    o["w_hid"], o["b_hid"], o["w_head"], o["b_head"],
                    GLONET=layout.kind == "glonet", **common)
        return part

    if config is None:
        tuner = _rbwd_tuner if layout.kind == "resnet" else _bwd_tuner
        config = tuner.pick(_key(layout, B, precision, (bn_train,)), run,
                            lambda: _configs(layout, B, bn_train, x.device), tracing=_is_fake(x, params))
    part = run(config, partials)
    res = {"partials": part, "config": config, "sync": sync}
    if reduce:
        res["grad"] = reduce_partials(part, grad_out)
    return res


def reduce_partials(part: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Sum (num_programs, P) gradient partials over programs (one launch; a copy-free view when 1 program)."""
    n_prog, P = part.shape
    if out is None:
        if n_prog == 1:
            return part[0]
        out = torch.empty(P, device=part.device, dtype=torch.float32)
    BLOCK = 1024
    _launch(_colsum_kernel, (triton.cdiv(P, BLOCK),), part, out, n_prog, P, BLOCK=BLOCK, num_warps=4)
    return out


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
_SAVED_NAMES = {"resnet": ("rstd", "hs", "xh", "a", "bstat"), "glonet": ("acts", "g"), "mlp": ("acts", "g")}


def _fused_mlp_op(x: torch.Tensor, params: torch.Tensor, running: torch.Tensor, kind: str, in_features: int,
                  width: int, depth: int, training: bool, precision: str, save: bool) -> list[torch.Tensor]:
    layout = Layout(kind, in_features, width, depth)
    buf = forward(layout, x, params, running=running if kind == "resnet" else None, training=training,
                  update_running=False, precision=precision, save=save)
    return [buf["y"]] + [buf[n] for n in _SAVED_NAMES[kind]]


def _fused_mlp_backward_op(x: torch.Tensor, params: torch.Tensor, dy: torch.Tensor, saved: list[torch.Tensor],
                           kind: str, in_features: int, width: int, depth: int, training: bool,
                           precision: str) -> torch.Tensor:
    layout = Layout(kind, in_features, width, depth)
    sv = dict(zip(_SAVED_NAMES[kind], saved))
    sv["y"] = dy  # only read when the loss gradient is computed in-kernel (not here)
    res = backward(layout, x, params, sv, dy=dy, training=training, precision=precision)
    g = res["grad"]
    return g.clone() if res["partials"].shape[0] == 1 else g  # one program: grad is a view of the partials


def _setup_context(ctx, inputs, output):
    x, params, running, kind, in_features, width, depth, training, precision, save = inputs
    ctx.meta = (kind, in_features, width, depth, training, precision)
    ctx.save_for_backward(x, params, *output[1:])


def _backward(ctx, grads):
    dy = grads[0]
    x, params, *saved = ctx.saved_tensors
    gp = None
    if ctx.needs_input_grad[1]:
        if dy is None:
            dy = torch.zeros(x.shape[0], device=x.device, dtype=torch.float32)
        gp = _fused_mlp_backward_call(x, params, dy.contiguous(), list(saved), *ctx.meta)
    return None, gp, None, None, None, None, None, None, None, None


_fused_mlp_backward_call = register_op("tk::fused_mlp_backward", _fused_mlp_backward_op)
_fused_mlp_call = register_op("tk::fused_mlp", _fused_mlp_op, setup_context=_setup_context, backward=_backward)


def fused_mlp(layout: Layout, x: torch.Tensor, params: torch.Tensor, running: Optional[torch.Tensor] = None,
              training: bool = True, precision: str = "ieee") -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """y = net(x) for the network described by ``layout`` with flat ``params``; differentiable w.r.t.
    ``params`` and torch.compile-friendly. x is data: the kernels compute no gradient for it, so an x
    that requires grad (with grad mode on) is refused with a ValueError rather than left without one.

    Returns (y (B,), batch_stats (2, n_bn, W) mean / biased variance or None). For a ResNet in training
    mode the caller updates the running statistics from batch_stats (see models/deep_mlp.py); the fused
    trainer's kernel does that in place instead.
    """
    if layout.kind != "resnet":
        running = params.new_empty((0,)) if running is None else running
    validate(layout, x, params, running=running, precision=precision, training=training)
    if torch.is_grad_enabled() and x.requires_grad:
        raise ValueError("x requires grad, but the fused MLP computes gradients for params only: pass "
                         "x.detach() (x is data), or use the eager backend for a gradient with respect to x")
    save = torch.is_grad_enabled() and params.requires_grad
    outs = _fused_mlp_call(x, params, running, layout.kind, layout.in_features, layout.width,
                                  layout.depth, training, precision, save)
    stats = outs[5] if (layout.kind == "resnet" and training) else None
    return outs[0], stats
