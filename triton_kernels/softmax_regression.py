"""SGD training of softmax regression (a single linear layer + softmax cross-entropy), fused in ONE kernel.

Math, for the batch rows i = perm[s*B : s*B + n] of step s (n = B, or fewer for the last batch):
    z_i   = W x_i + b                          W (C, K), b (C,), x_i (K,)      (C <= 16 classes)
    p_i   = softmax(z_i),  loss_i = logsumexp(z_i) - z_i[y_i],  correct_i = [argmax z_i == y_i]
    dz_i  = (p_i - onehot(y_i)) / n            (gradient of the batch-mean loss)
    dW    = sum_i dz_i x_i^T,   db = sum_i dz_i
    W    -= lr * dW,            b -= lr * db
The bias is handled as the weights of a constant feature: x_i gets a (K+1)-th entry 1 and W^T a row b,
so z = [x, 1] [W, b]^T and [dW, db] = dz^T [x, 1], both inside the same two matrix products.
Per-row running sums of loss_i and correct_i stay on the device; the host reads them when it wants to.

Why one kernel, split over K. At batch 128 a step moves 401 KB of X (100 KB as uint8) and does ~4 MFLOP:
nothing for an H100, so a step is pure latency (dependent loads, launches, cross-program reductions,
and the instructions each program issues). The kernel `_sr_train_kernel` runs `n_run` consecutive steps
(1 for a step, all of them for an epoch) with a grid of S = cdiv(K+1, BLOCK_K) programs, S <= the SM
count so that all are resident at once. Program s owns the feature slice [s*BLOCK_K, (s+1)*BLOCK_K)
(the last one also the constant feature K): its slice of [W, b]^T (BLOCK_K x 16) lives in registers
for the whole run, and every step it
  1. gathers X[batch rows, slice] (BLOCK_B x BLOCK_K, through perm: no shuffled copy of X; prefetched
     during the previous step's wait, since it does not depend on W) and forms the partial logits
     Z_s = X_slice W_slice^T (BLOCK_B x 16, tl.dot);
  2. adds Z_s to a shared accumulator with one int64 atomic per (row, real class), packed as
     (int64(Z_s * 2^40) with its low 8 bits cleared) + 1: the value in the high 56 bits (a multiple of
     2^-32), a count of contributions in the low 8.
     Integer addition is associative, so the sum is exact and independent of the order in which programs
     arrive (bitwise reproducible, unlike fp32 atomics), with an absolute resolution of S * 2^-32 on the
     logits. The packed value holds |logits| < 2^23: each program checks that its partial logits stay
     below 2^23 / S (which guarantees it for their sum; NaN fails the check) and otherwise sets an
     error flag. Rows past the batch add 0 (and their count);
  3. polls the accumulator (volatile loads, L1 bypassed) until every element's count says that all S
     programs have added theirs: the data is its own barrier, with no fence, flag or counter, and one
     L2 round trip when the others are already done (a flag or counter would need a release fence after
     the atomics and a second round trip for the data);
  4. computes softmax and dz for the whole batch from the full Z (redundantly in every program: cheaper
     than another exchange), and updates its slice in registers, W_s^T -= lr * X_slice^T dz (tl.dot).
Layout. The accumulator is stored class-major (element (row, class) at class * BLOCK_B + row), so with
BLOCK_B = 32 * num_warps (batch 128, 4 warps) each thread holds whole rows: the softmax's row max / sum, argmax and the
label pick are in-thread (no shuffles), and the class count C is a compile-time constant, so padded
classes cost nothing. Program 0 alone adds the loss / accuracy statistics of step i while it waits for
step i+1's exchange (they are off every program's critical path).
Precision. The two products run on the tensor cores: "tf32" (10-bit mantissas), "tf32x3" (fp32
accuracy from split operands: a = a_hi + a_lo in tf32; for uint8 X, whose pixel values 0..255 are exact
in tf32, only the other operand is split, two products instead of three), or "ieee" (fp32 FMAs, slower).
uint8 X is used as integers 0..255 (the constant feature is 255) and the scale x_scale = 1/255 goes on
the products' results.
The accumulators are never cleared: step i uses buffer i % 2, and each program subtracts what the
buffer held before (two's-complement wrap-around keeps the difference exact). Two buffers suffice: a
program can add step i+2's partial to buffer i % 2 only once every program has added step i+1's,
i.e. once every program has finished reading step i. A launch takes its starting values from a
snapshot the previous launch left (program 0 writes it last), not from the buffers themselves, to which
programs that start early may already have added. The step index lives in device memory, so the
same launch (or graph replay) serves every step and nothing needs a host sync.

In the CPU interpreter programs run one after another, so there the kernel runs with one program
(BLOCK_K >= K+1; the count is then complete at once). The poll loop is bounded (grid_sync.MAX_SPIN polls):
should the programs ever not be co-resident, the kernel sets an error flag instead of hanging. (The
exchange is an all-reduce by exact integer atomics, unlike grid_sync's all-gather of tagged words, which
the ResNet kernels use because they merge every program's statistics in a fixed order rather than sum
them: see grid_sync.py.)

Error flags (bits of state[1], set on the device, never cleared by the kernel): ERR_TIMEOUT (a wait gave
up), ERR_FIXED_POINT (partial logits reached 2^23 / S: the exchange would be wrong), ERR_LABEL (a label
outside [0, C), counted by program 0 with the loss statistics). Checking them costs a host sync, so no
step does: :meth:`StepBuffers.check` raises, and :meth:`FusedSGDStep.read_stats` (the trainer's one sync
per epoch, when it reads the loss) calls it first. The trainer validates its labels once, on the host,
when it is built; the label flag catches labels changed afterwards, and those of the functional
:func:`sgd_step` with labels on the GPU (checked on the host when they are on the CPU).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .grid_sync import MAX_SPIN
from .runtime import cdiv, is_fake as _is_fake, is_tracing, launch as _launch
from .runtime import (INTERPRET, Autotuner, Config, bucket, check_choice, check_tensor, define_op, first_outside,
                      num_sms, register_tuner)

BLOCK_C = 16  # classes padded to the smallest tl.dot tile
MAX_BATCH = 1024  # the whole batch is one register tile of each program
FIX_SCALE = tl.constexpr(2.0 ** 40)  # fixed point of the exchange: value * 2^40, low 8 bits = count
FIX_LIMIT = tl.constexpr(2.0 ** 23)  # |logits| the exchange holds: int64(z * 2^40) must not overflow
ERR_TIMEOUT, ERR_FIXED_POINT, ERR_LABEL = 1, 2, 4  # bits of the error flags state[1]
_ERR_TIMEOUT, _ERR_FIXED_POINT, _ERR_LABEL = tl.constexpr(1), tl.constexpr(2), tl.constexpr(4)
X_DTYPES = (torch.float32, torch.uint8)
INDEX_DTYPES = (torch.int32, torch.int64)
PRECISIONS = ("ieee", "tf32", "tf32x3")
U8_SCALE = 1.0 / 255.0  # uint8 X holds pixel values 0..255: x = x_u8 * U8_SCALE


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _next_step(s, n_epoch_steps):
    """(s + 1) mod n_epoch_steps for 0 <= s < n_epoch_steps (no integer division)."""
    s = s + 1
    return tl.where(s >= n_epoch_steps, s - n_epoch_steps, s)


@triton.jit
def _batch_rows(perm_ptr, s, valid, N, B, offs_b):
    """Step s's batch: dataset row indices perm[s*B + r] (int64), row mask, row count (0 if not valid)."""
    start = s.to(tl.int64) * B
    left = N - start
    n_rows = tl.where(left < B, left, B).to(tl.int32)  # the last batch of an epoch may be partial
    n_rows = tl.where(valid, n_rows, 0)  # valid: this step is part of the run
    row_ok = offs_b < n_rows
    idx = tl.load(perm_ptr + start + offs_b, mask=row_ok, other=0).to(tl.int64)
    return idx, row_ok, n_rows


@triton.jit
def _batch_data(x_ptr, y_ptr, idx, row_ok, stride_xn, stride_xk, stride_yn, offs_k, k_ok, is_one):
    """X[idx, slice] in x's own dtype (BLOCK_B x BLOCK_K; the constant feature, 1 or 255 for uint8, where
    is_one; 0 in rows past the batch) and the labels y[idx]."""
    label = tl.load(y_ptr + idx * stride_yn, mask=row_ok, other=0).to(tl.int32)
    one = (row_ok[:, None] & is_one[None, :]).to(x_ptr.dtype.element_ty)
    if x_ptr.dtype.element_ty == tl.uint8:
        one = one * 255
    x = tl.load(x_ptr + idx[:, None] * stride_xn + offs_k[None, :] * stride_xk,
                mask=row_ok[:, None] & k_ok[None, :], other=one)
    return x, label


@triton.jit
def _dot(a, b, PRECISION: tl.constexpr, A_EXACT: tl.constexpr):
    """a @ b with fp32 accumulation. tf32x3 with `a` exact in tf32 (A_EXACT: integers 0..255): b is split
    into b_hi (b with the 13 low mantissa bits cleared, exact in tf32) + b_lo = b - b_hi (exact in fp32),
    two tf32 products (Triton chains them through one accumulator)."""
    if (PRECISION == "tf32x3") and A_EXACT:
        b_hi = (b.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
        return tl.dot(a, b - b_hi, input_precision="tf32") + tl.dot(a, b_hi, input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision=PRECISION)


@triton.jit
def _row_stats(z, m, ssum, label, row_ok, offs_c, C: tl.constexpr):
    """Per row: loss = m + log(sum) - z[label], correct = [argmax z == label] and bad = [label outside
    [0, C)] (all 0 for rows past the batch)."""
    z_y = tl.sum(tl.where(offs_c[None, :] == label[:, None], z, 0.0), axis=1)
    loss = tl.where(row_ok, m + tl.log(ssum) - z_y, 0.0)
    correct = ((tl.argmax(z, axis=1) == label) & row_ok).to(tl.int32)
    bad = (((label < 0) | (label >= C)) & row_ok).to(tl.int32)
    return loss, correct, bad


@triton.jit
def _batch_softmax_grad(packed, c_ok, row_ok, n_rows, label, offs_c):
    """The batch's full logits z (BLOCK_B x BLOCK_C, padded classes -inf) from what the accumulator gained
    this step (packed: the S fixed-point partials' sum, their count in the low 8 bits), the row max m and
    sum of exponentials ssum, and the gradient of the batch-mean loss dz = (softmax(z) - onehot(label)) / n
    (0 in rows past the batch)."""
    z = (packed & -256).to(tl.float32) * (1.0 / FIX_SCALE)
    z = tl.where(c_ok[None, :], z, float("-inf"))
    m = tl.max(z, axis=1)
    e = tl.exp(z - m[:, None])
    ssum = tl.sum(e, axis=1)
    inv_row = tl.where(row_ok, 1.0 / tl.maximum(n_rows, 1).to(tl.float32), 0.0)  # 1/n, 0 past the batch
    dz = e * (inv_row / ssum)[:, None] - tl.where(offs_c[None, :] == label[:, None], inv_row[:, None], 0.0)
    return z, m, ssum, dz


@triton.jit(do_not_specialize=["n_run"])  # one compiled kernel for steps and epochs (the same arithmetic)
def _sr_train_kernel(
    x_ptr, y_ptr, perm_ptr, w_ptr, b_ptr,
    state_ptr, zacc_ptr, zsnap_ptr, loss_sum_ptr, correct_sum_ptr,
    N, K, B, n_epoch_steps, n_run, lr, x_scale, max_spin,
    stride_xn, stride_xk, stride_yn, stride_wc, stride_wk,
    C: tl.constexpr, X_IS_U8: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """n_run SGD steps from the device step counter; program s owns features [s*BLOCK_K, (s+1)*BLOCK_K)
    of [W, b] (feature K is the constant 1 whose weights are b).

    x_ptr: (N, K) fp32 (or uint8 pixel values, times x_scale) dataset, y_ptr: (N,) labels (stride
    stride_yn), perm_ptr: (N,) order (contiguous), w_ptr: (C, K) fp32, b_ptr: (C,) fp32, contiguous (both
    updated in place), state_ptr: (2,) int32 [step within the epoch, error flags (ERR_* bits)],
    zacc_ptr: (2, BLOCK_C, BLOCK_B) int64 packed logit accumulators, class-major (never cleared),
    zsnap_ptr: (2, BLOCK_C, BLOCK_B) int64: what the accumulators held at the end of the last launch,
    loss_sum_ptr: (BLOCK_B,) fp32, correct_sum_ptr: (BLOCK_B,) int32 running sums per batch row.
    """
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    step0 = tl.load(state_ptr)

    offs_b = tl.arange(0, BLOCK_B)
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = pid * BLOCK_K + tl.arange(0, BLOCK_K)
    c_ok = offs_c < C
    k_ok = offs_k < K
    is_one = offs_k == K  # the constant feature (in the last program's slice)
    # this program's slice of [W, b]^T (BLOCK_K x BLOCK_C): registers for the whole run
    wt_ptrs = w_ptr + offs_c[None, :] * stride_wc + offs_k[:, None] * stride_wk
    wt_mask = c_ok[None, :] & k_ok[:, None]
    wt = tl.load(wt_ptrs, mask=wt_mask, other=0.0)
    bias = tl.load(b_ptr + offs_c, mask=c_ok, other=0.0)
    wt = tl.where(is_one[:, None], bias[None, :], wt)
    x_scale = tl.cast(x_scale, tl.float32)  # (torch.compile passes Python floats as fp64)
    lr_x = tl.cast(lr, tl.float32) * x_scale  # dW = x_scale * (X^T dz) for uint8 X (x_scale = 1 for fp32)
    # step i adds to buffer i % 2 and takes the difference from what that buffer held before. The
    # starting values come from the snapshot the last launch left (the buffers themselves may already
    # hold this launch's first contributions of programs that started earlier)
    z_offs = offs_c[None, :] * BLOCK_B + offs_b[:, None]
    zmask = c_ok[None, :] & (offs_b >= 0)[:, None]  # real classes, every row (rows past the batch add 0)
    base = tl.load(zsnap_ptr + z_offs, mask=zmask, other=0)
    base_next = tl.load(zsnap_ptr + BLOCK_B * BLOCK_C + z_offs, mask=zmask, other=0)
    failed = step0 * 0  # 1 once a wait timed out: later steps then do not wait either
    # a partial logit at or past 2^23 / S (or NaN): the sum of the S partials could leave the fixed
    # point's range. Marked per element over the steps (a select, no reduction in the loop), flagged at the end
    fix_bound = FIX_LIMIT / n_programs
    fix_over = tl.zeros([BLOCK_B, BLOCK_C], dtype=tl.int32)
    bad_labels = tl.zeros([BLOCK_B], dtype=tl.int32)
    loss_acc = tl.load(loss_sum_ptr + offs_b)  # per-row running sums continued step by step: the same
    correct_acc = tl.load(correct_sum_ptr + offs_b)  # rounding however the steps are split into launches

    # software pipeline: the rows of step i+1 and the indices of step i+2 are in flight during step i
    idx, row_ok, n_rows = _batch_rows(perm_ptr, step0, n_run > 0, N, B, offs_b)
    x, label = _batch_data(x_ptr, y_ptr, idx, row_ok, stride_xn, stride_xk, stride_yn, offs_k, k_ok, is_one)
    s_n = _next_step(step0, n_epoch_steps)
    idx_n, row_ok_n, n_rows_n = _batch_rows(perm_ptr, s_n, n_run > 1, N, B, offs_b)
    s_nn = _next_step(s_n, n_epoch_steps)
    # the previous step's logits, row max / sum, labels: program 0 adds their statistics while it waits
    z_p = tl.zeros([BLOCK_B, BLOCK_C], dtype=tl.float32)
    m_p = tl.zeros([BLOCK_B], dtype=tl.float32)
    ssum_p = tl.zeros([BLOCK_B], dtype=tl.float32) + 1.0
    label_p = tl.zeros([BLOCK_B], dtype=tl.int32)  # (not `label`: a variable that starts as an alias of
    row_ok_p = offs_b < 0                          # another loop-carried one is not carried by Triton 3.6)
    for i in range(0, n_run):
        zbuf = zacc_ptr + (i % 2) * (BLOCK_B * BLOCK_C) + z_offs
        # 1-2. partial logits of this slice, packed with a count of 1, into the shared accumulator
        xf = x.to(tl.float32)
        zp = _dot(xf, wt, PRECISION, X_IS_U8)
        if X_IS_U8:
            zp = zp * x_scale
        fix_over = tl.where(tl.abs(zp) < fix_bound, fix_over, 1)
        tl.atomic_add(zbuf, ((zp * FIX_SCALE).to(tl.int64) & -256) | 1, mask=zmask, sem="relaxed", scope="gpu")
        # issue the next step's loads (they do not depend on W) before waiting for the other programs
        x_n, label_n = _batch_data(x_ptr, y_ptr, idx_n, row_ok_n, stride_xn, stride_xk, stride_yn, offs_k, k_ok,
                                   is_one)
        idx_nn, row_ok_nn, n_rows_nn = _batch_rows(perm_ptr, s_nn, i + 2 < n_run, N, B, offs_b)
        s_nn = _next_step(s_nn, n_epoch_steps)
        if pid == 0:  # statistics of the previous step, in the wait
            loss_i, correct_i, bad_i = _row_stats(z_p, m_p, ssum_p, label_p, row_ok_p, offs_c, C)
            loss_acc += loss_i
            correct_acc += correct_i
            bad_labels += bad_i
        # 3. wait until every element of the batch holds all n_programs contributions (bounded)
        tot = tl.load(zbuf, mask=zmask, other=0, volatile=True)
        lacking = tl.min(tl.where(zmask, ((tot - base) & 255).to(tl.int32), n_programs)) < n_programs
        spins = 0
        while lacking & (spins < max_spin) & (failed == 0):
            tot = tl.load(zbuf, mask=zmask, other=0, volatile=True)
            lacking = tl.min(tl.where(zmask, ((tot - base) & 255).to(tl.int32), n_programs)) < n_programs
            spins += 1
        if lacking:  # the programs were not all resident: flag it, and never wait again
            tl.atomic_or(state_ptr + 1, _ERR_TIMEOUT)
            failed = failed + 1
        # 4. full logits (bias included) -> softmax cross-entropy gradient dz (fp32, the whole batch)
        z, m, ssum, dz = _batch_softmax_grad(tot - base, c_ok, row_ok, n_rows, label, offs_c)
        base, base_next = base_next, tot
        # SGD on this program's slice of [W, b]
        wt -= lr_x * _dot(tl.trans(xf), dz, PRECISION, X_IS_U8)
        z_p, m_p, ssum_p, label_p, row_ok_p = z, m, ssum, label, row_ok
        x, label, row_ok, n_rows = x_n, label_n, row_ok_n, n_rows_n
        idx_n, row_ok_n, n_rows_n = idx_nn, row_ok_nn, n_rows_nn

    if tl.max(tl.max(fix_over, axis=1), axis=0) > 0:
        tl.atomic_or(state_ptr + 1, _ERR_FIXED_POINT)
    tl.store(wt_ptrs, wt, mask=wt_mask)
    if (pid * BLOCK_K <= K) & (K < pid * BLOCK_K + BLOCK_K):  # the program holding the bias
        tl.store(b_ptr + offs_c, tl.sum(tl.where(is_one[:, None], wt, 0.0), axis=0), mask=c_ok)
    if pid == 0:  # every program read step0 and the snapshot before its first contribution, which
        # program 0 has seen complete; the buffers' final values: base = buffer n_run % 2, base_next the other
        loss_i, correct_i, bad_i = _row_stats(z_p, m_p, ssum_p, label_p, row_ok_p, offs_c, C)  # the last step's
        tl.store(loss_sum_ptr + offs_b, loss_acc + loss_i)
        tl.store(correct_sum_ptr + offs_b, correct_acc + correct_i)
        if tl.max(bad_labels + bad_i, axis=0) > 0:
            tl.atomic_or(state_ptr + 1, _ERR_LABEL)
        tl.store(zsnap_ptr + (n_run % 2) * (BLOCK_B * BLOCK_C) + z_offs, base, mask=zmask)
        tl.store(zsnap_ptr + ((n_run + 1) % 2) * (BLOCK_B * BLOCK_C) + z_offs, base_next, mask=zmask)
        tl.store(state_ptr, (step0 + n_run) % n_epoch_steps)


# ----------------------------------------------------------------------------------------------------
# Autotuning space: feature slice per program (S = cdiv(K+1, BLOCK_K) programs) and warps.
# At batch 128, K = 784 on an H100: BLOCK_K 16 -> 50 programs, 32 -> 25 (64 -> 13 spilled registers).
# Every program does the whole batch's softmax; fewer programs: fewer atomics, larger products per
# program. 4 warps hold one batch row per thread (BLOCK_B = 128); 8 warps split each row over two warps
# (cross-warp row sums, but two warps per scheduler to hide latency).
# ----------------------------------------------------------------------------------------------------
def _cfg(bk, warps):
    return Config({"BLOCK_K": bk}, warps, 1)


STEP_CONFIGS = [_cfg(16, 4), _cfg(16, 8), _cfg(32, 4), _cfg(32, 8)]
INTERPRET_CONFIG = _cfg(0, 4)  # BLOCK_K 0: one program over all of K (the interpreter runs programs in turn)
class SoftmaxRegressionKey(NamedTuple):
    """What a tuned training-step config depends on."""
    batch: int  # bucketed
    features: int
    classes: int
    x_dtype: torch.dtype
    precision: str


_tuner = register_tuner(Autotuner("softmax_regression_train", _sr_train_kernel, STEP_CONFIGS,
                                  interpret_config=INTERPRET_CONFIG))


def block_k_for(cfg: Config, K: int, device) -> int:
    """The feature slice of one program (K features + the constant one): the config's, widened so that
    the grid fits on the SMs at once (one program in the interpreter, where programs run in turn)."""
    if INTERPRET or cfg.kwargs["BLOCK_K"] == 0:
        return max(16, triton.next_power_of_2(K + 1))
    return max(cfg.kwargs["BLOCK_K"], triton.next_power_of_2(cdiv(K + 1, num_sms(device, default=1))))


def n_programs_for(K: int, block_k: int) -> int:
    return cdiv(K + 1, block_k)


def block_b_for(batch_size: int) -> int:
    return max(16, triton.next_power_of_2(batch_size))


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def validate(weight, bias, x, y, perm, batch_size, lr, precision="ieee") -> None:
    """Check every argument of a step; raises ValueError naming the argument (no launch happens). The
    label and permutation values are not read here (that needs a host sync): see :func:`check_labels` and
    :func:`check_perm`."""
    check_tensor("weight", weight, ndim=2, dtypes=(torch.float32,))
    dev = weight.device
    check_tensor("bias", bias, ndim=1, dtypes=(torch.float32,), device=dev)
    check_tensor("x", x, ndim=2, dtypes=X_DTYPES, device=dev)
    check_tensor("y", y, ndim=1, dtypes=INDEX_DTYPES, device=dev)
    check_tensor("perm", perm, ndim=1, dtypes=INDEX_DTYPES, device=dev)
    C, K = weight.shape
    if not 1 <= C <= BLOCK_C:
        raise ValueError(f"weight has {C} classes (rows); this kernel supports 1..{BLOCK_C}")
    if K < 1:
        raise ValueError(f"weight has {K} features; need at least 1")
    if bias.shape[0] != C:
        raise ValueError(f"bias has {bias.shape[0]} elements, expected {C} (weight {tuple(weight.shape)})")
    if not bias.is_contiguous():
        raise ValueError("bias must be contiguous")
    if x.shape[1] != K:
        raise ValueError(f"x has {x.shape[1]} features but weight expects {K}")
    N = x.shape[0]
    if N < 1:
        raise ValueError("x is empty: need at least one example")
    if y.shape[0] != N:
        raise ValueError(f"y has {y.shape[0]} labels but x has {N} rows")
    if perm.shape[0] != N or not perm.is_contiguous():
        raise ValueError(f"perm must be a contiguous permutation of the {N} rows of x, got shape {tuple(perm.shape)}")
    if not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise ValueError(f"batch_size must be an int in 1..{MAX_BATCH} (the batch is one register tile), "
                         f"got {batch_size!r}")
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    check_choice("precision", precision, PRECISIONS)


def check_labels(y: torch.Tensor, num_classes: int) -> None:
    """Raise ValueError naming y if a label is outside [0, num_classes) (torch's cross-entropy raises
    too). Reads the labels: one host sync for labels on the GPU."""
    first = first_outside(y, num_classes)
    if first is not None:
        raise ValueError(f"y holds label {first} outside [0, {num_classes}) "
                         f"(weight has {num_classes} classes)")


def check_perm(perm: torch.Tensor, rows: int) -> None:
    """Raise ValueError naming perm if a row index is outside [0, rows) (the kernel would read past x). Reads
    perm: one host sync for a perm on the GPU."""
    first = first_outside(perm, rows)
    if first is not None:
        raise ValueError(f"perm holds row index {first} outside [0, {rows}) (x has {rows} rows)")


@dataclasses.dataclass
class StepBuffers:
    """Static device state of the fused training (allocated once, zeroed; nothing is allocated per step)."""

    state: torch.Tensor         # (2,) int32: [step within the epoch, error flags (ERR_* bits)]
    loss_sum: torch.Tensor      # (BLOCK_B,) fp32: running sums of per-example losses, per batch row
    correct_sum: torch.Tensor   # (BLOCK_B,) int32: running counts of correct predictions, per batch row
    zacc: torch.Tensor          # (2, 16, BLOCK_B) int64: packed logit accumulators (value * 256 + count)
    zsnap: torch.Tensor         # (2, 16, BLOCK_B) int64: their values at the end of the last launch

    @classmethod
    def allocate(cls, batch_size: int, device) -> "StepBuffers":
        i32 = dict(device=device, dtype=torch.int32)
        bb = block_b_for(batch_size)
        return cls(torch.zeros(2, **i32), torch.zeros(bb, device=device, dtype=torch.float32),
                   torch.zeros(bb, **i32), torch.zeros(2, BLOCK_C, bb, device=device, dtype=torch.int64),
                   torch.zeros(2, BLOCK_C, bb, device=device, dtype=torch.int64))

    @property
    def step(self) -> torch.Tensor:
        """(1,) view of the step counter."""
        return self.state[:1]

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def clone(self) -> "StepBuffers":
        return StepBuffers(*(t.clone() for t in self.tensors()))

    def check(self) -> None:
        """Raise if a launch since these buffers were allocated set an error flag (one host sync): a label
        outside the classes (ValueError naming y), partial logits past the fixed point's range, or a wait
        for the other programs that timed out (RuntimeError). The weights are then unreliable; the flags
        stay set."""
        flags = int(self.state[1].item())
        if flags & ERR_LABEL:
            raise ValueError("fused softmax-regression step: y holds a label outside [0, C) (C = the weight's "
                             "rows); the weights are unreliable")
        if flags & ERR_FIXED_POINT:
            raise RuntimeError("fused softmax-regression step: logits past the exchange's fixed-point range, "
                               "|logits| < 2**23 (each of the S programs' partial logits must stay below "
                               "2**23 / S); the weights are unreliable")
        if flags & ERR_TIMEOUT:
            raise RuntimeError("fused softmax-regression step: the wait for the other programs timed out "
                               "(programs not co-resident?); the weights are unreliable")


def launch(weight, bias, x, y, perm, buf: StepBuffers, batch_size: int, lr: float, cfg: Config,
           precision: str = "ieee", n_run: int = 1, *, block_k: Optional[int] = None,
           max_spin: int = MAX_SPIN) -> None:
    """Launch the kernel for ``n_run`` consecutive steps (no validation, no allocation, no host sync).
    ``block_k`` overrides the feature slice per program (S = cdiv(K+1, block_k) programs must be
    co-resident)."""
    N, K = x.shape
    C = weight.shape[0]
    bk = block_k or block_k_for(cfg, K, x.device)
    u8 = x.dtype == torch.uint8
    _launch(_sr_train_kernel, (n_programs_for(K, bk),),
            x, y, perm, weight, bias, buf.state, buf.zacc, buf.zsnap, buf.loss_sum, buf.correct_sum,
            N, K, batch_size, cdiv(N, batch_size), n_run, float(lr), U8_SCALE if u8 else 1.0, max_spin,
            x.stride(0), x.stride(1), y.stride(0), weight.stride(0), weight.stride(1),
            C=C, X_IS_U8=u8, PRECISION=precision,
            BLOCK_B=block_b_for(batch_size), BLOCK_K=bk, BLOCK_C=BLOCK_C,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def launch_step(weight, bias, x, y, perm, buf: StepBuffers, batch_size: int, lr: float, cfg: Config,
                precision: str = "ieee") -> None:
    """One step: one kernel launch."""
    launch(weight, bias, x, y, perm, buf, batch_size, lr, cfg, precision, n_run=1)


def pick_config(weight, bias, x, y, perm, batch_size: int, lr: float, precision: str = "ieee") -> Config:
    """The tuned config for this shape; tuning runs on clones, so the real weights are untouched."""
    if INTERPRET:
        return INTERPRET_CONFIG
    key = SoftmaxRegressionKey(batch=bucket(batch_size), features=x.shape[1], classes=weight.shape[0], x_dtype=x.dtype,
                               precision=precision)
    scratch = None

    def run(cfg: Config):
        nonlocal scratch
        if scratch is None:
            scratch = (weight.detach().clone(), bias.detach().clone(), StepBuffers.allocate(batch_size, x.device))
        w, b, buf = scratch  # timed on a whole epoch (up to 512 steps): the launch the epoch rungs make
        n_run = min(512, cdiv(x.shape[0], batch_size))
        launch(w, b, x, y, perm, buf, batch_size, 1e-6, cfg, precision, n_run=n_run)

    return _tuner.pick(key, run, STEP_CONFIGS, tracing=_is_fake(weight, x))


class FusedSGDStep:
    """Fused softmax-regression SGD training on (x, y), batches drawn through ``perm``.

    Validates once at construction and owns static buffers, so :meth:`step` (one step) and
    :meth:`epoch` (every step of an epoch, in one persistent launch) each launch exactly one kernel,
    with no allocation and no host synchronisation: safe to capture in a CUDA graph. Loss / accuracy
    sums stay on the device until :meth:`read_stats`, which also raises on the kernel's error flags
    (a label outside [0, C), logits past the fixed point's 2**23, a timed-out wait: see the module
    docstring). The labels are checked once, here (one host sync): a label outside [0, C) is refused
    before any launch.

        trainer = FusedSGDStep(model.weight, model.bias, x_gpu, y_gpu, batch_size=128, lr=0.1)
        trainer.set_perm(torch.randperm(len(x)))
        trainer.epoch()
        loss_sum, correct = trainer.read_stats()
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                 batch_size: int, lr: float, *, perm: Optional[torch.Tensor] = None, precision: str = "ieee",
                 config: Optional[Config] = None) -> None:
        weight, bias = weight.data if isinstance(weight, torch.nn.Parameter) else weight, \
            bias.data if isinstance(bias, torch.nn.Parameter) else bias
        if perm is None:
            perm = torch.arange(x.shape[0] if isinstance(x, torch.Tensor) and x.ndim >= 1 else 0,
                                dtype=torch.int32, device=getattr(x, "device", None))
        validate(weight, bias, x, y, perm, batch_size, lr, precision)
        check_labels(y, weight.shape[0])  # once per data set, not per step
        check_perm(perm, x.shape[0])
        self.weight, self.bias, self.x, self.y = weight, bias, x, y
        self.perm = perm.clone()  # static buffer: set_perm copies into it
        self.batch_size, self.lr, self.precision = batch_size, float(lr), precision
        self.n_steps = cdiv(x.shape[0], batch_size)
        self.buf = StepBuffers.allocate(batch_size, x.device)
        self.config = config or pick_config(weight, bias, x, y, self.perm, batch_size, lr, precision)

    @property
    def programs(self) -> int:
        """Programs per launch (= feature slices)."""
        K = self.x.shape[1]
        return n_programs_for(K, block_k_for(self.config, K, self.x.device))

    def set_perm(self, perm: torch.Tensor) -> None:
        """Copy a new batch order into the static permutation buffer (e.g. once per epoch)."""
        check_tensor("perm", perm, ndim=1, dtypes=INDEX_DTYPES)
        if perm.shape != self.perm.shape:
            raise ValueError(f"perm has shape {tuple(perm.shape)}, expected {tuple(self.perm.shape)}")
        if perm.device.type == "cpu":  # on the GPU reading it would be a host sync: a GPU perm's values are trusted
            check_perm(perm, self.x.shape[0])
        self.perm.copy_(perm, non_blocking=True)

    def _launch(self, n_run: int) -> None:
        launch(self.weight, self.bias, self.x, self.y, self.perm, self.buf, self.batch_size, self.lr,
               self.config, self.precision, n_run=n_run)

    def step(self) -> None:
        """One SGD step (one kernel launch)."""
        self._launch(1)

    def steps(self, n: int) -> None:
        """n consecutive SGD steps in one launch (wrapping into the next epoch's order if n runs past it)."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        self._launch(n)

    def epoch(self) -> None:
        """The remaining steps of the epoch (all of them from a fresh epoch) in one persistent launch.
        Launched from a step counter that is not at 0, the device decides nothing: n_steps steps run."""
        self._launch(self.n_steps)

    def epoch_stepwise(self) -> None:
        """An epoch as n_steps single-step launches (the same arithmetic as :meth:`epoch`)."""
        for _ in range(self.n_steps):
            self._launch(1)

    def read_stats(self, reset: bool = True) -> tuple[float, int]:
        """(sum of per-example losses, number correct) since the last reset; one host sync. Raises first
        if a launch set an error flag (:meth:`StepBuffers.check`)."""
        self.buf.check()
        loss, correct = float(self.buf.loss_sum.double().sum().item()), int(self.buf.correct_sum.sum().item())
        if reset:
            self.reset_stats()
        return loss, correct

    def reset_stats(self) -> None:
        self.buf.loss_sum.zero_()
        self.buf.correct_sum.zero_()


# ----------------------------------------------------------------------------------------------------
# torch op registration (so torch.compile(fullgraph=True) traces through a training step)
# ----------------------------------------------------------------------------------------------------
def _sgd_step_op(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor,
                 state: torch.Tensor, loss_sum: torch.Tensor, correct_sum: torch.Tensor, zacc: torch.Tensor,
                 zsnap: torch.Tensor, batch_size: int, lr: float, precision: str) -> None:
    buf = StepBuffers(state, loss_sum, correct_sum, zacc, zsnap)
    cfg = pick_config(weight, bias, x, y, perm, batch_size, lr, precision)
    launch_step(weight, bias, x, y, perm, buf, batch_size, lr, cfg, precision)


define_op("tk::softmax_regression_sgd_step", _sgd_step_op,
          mutates_args=("weight", "bias", "state", "loss_sum", "correct_sum", "zacc", "zsnap"))


def sgd_step(weight: torch.Tensor, bias: torch.Tensor, x: torch.Tensor, y: torch.Tensor, perm: torch.Tensor,
             buf: StepBuffers, batch_size: int, lr: float, precision: str = "ieee") -> None:
    """One validated fused SGD step as a torch op (updates weight, bias and ``buf`` in place). Labels and perm
    on the CPU are checked here; on the GPU that would be a host sync per step, so the kernel flags an
    out-of-range label instead and ``buf.check()`` raises (a GPU perm's values are trusted)."""
    validate(weight, bias, x, y, perm, batch_size, lr, precision)
    if y.device.type == "cpu" and not is_tracing(y):
        check_labels(y, weight.shape[0])
        check_perm(perm, x.shape[0])
    if tuple(buf.zacc.shape) != (2, BLOCK_C, block_b_for(batch_size)):
        raise ValueError(f"buf was allocated for another batch size: zacc {tuple(buf.zacc.shape)}")
    torch.ops.tk.softmax_regression_sgd_step(weight, bias, x, y, perm, *buf.tensors(), batch_size,
                                             float(lr), precision)
