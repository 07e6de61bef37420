"""Cross-entropy over logits (M, V), forward and backward in one pass, plus the argmax-accuracy count.

Per row i with target t (weights w_c, default 1; smoothing eps; W = sum_c w_c):
    m = max_c x_c,  s = sum_c exp(x_c - m),  lse = m + log s   (online max / rescaled sum over chunks)
    loss_i = (1 - eps) * w_t * (lse - x_t)  +  (eps / V) * sum_c w_c * (lse - x_c)
           = (1 - eps) * w_t * ((m - x_t) + log s)  +  (eps / V) * (sum_c w_c (m - x_c)  +  W log s)
(the smoothing sum is taken over the shifted logits m - x_c >= 0: no cancellation when the logits share
a large offset, and no overflow of W * lse near the fp32 maximum), which is torch's definition (nll_loss
on log_softmax, plus the smoothing term of torch.nn.functional.cross_entropy). Rows whose target is
ignore_index contribute 0 to the loss, 0 to the denominator and a zero gradient. Reductions:
"none" -> loss_i; "sum" -> sum_i loss_i; "mean" -> sum_i loss_i / sum_{i not ignored} w_{t_i} (NaN when
every row is ignored, as torch).
The gradient of the reduced loss with respect to the logits, with p_c = exp(x_c - lse) and
scale = 1 / denominator for "mean", 1 otherwise:
    dx_c = scale * [ ((1 - eps) w_t + (eps / V) W) p_c  -  (1 - eps) w_t [c == t]  -  (eps / V) w_c ]
It is written DURING the forward (from registers, or for long rows by reading the logits once more from
the same program, usually from L2), so the backward is only a multiplication by the incoming gradient --
done in place, and skipped on the device (no host sync) when that gradient is 1, as it is after
`loss.backward()`.
The same sweep counts the rows whose argmax (first maximal index, as torch.argmax) equals the target.

Tiling: a persistent grid of P programs (a few per SM) walks the rows (row = pid, pid + P, ...), with one
of two kernels, which share the per-row terms (small jit helpers):
* `_ce_fwd_row_kernel`: a row of at most BLOCK_V classes held in registers (BLOCK_V up to 32768:
  16 warps x 32 threads x 64 values): one read, one exp per element, one write -- no re-read.
* `_ce_fwd_chunked_kernel`: longer rows (vocabularies up to 256k and beyond) in BLOCK_V chunks: an
  online sweep for the statistics, then a second sweep, over the chunks in reverse order (the most
  recently read first, while they are still in L2), for the gradient.
Each program keeps its loss / weight / correct sums in registers and writes one partial per program; a
one-program finalize kernel adds the P partials -- no atomics, deterministic. For "mean" with a gradient,
the denominator sum_i w_{t_i} is needed before the first gradient is written: each program computes it
from the targets (cheap while M * P is small) or a one-program prologue kernel writes it to device memory.
The tuner (`_configs`) picks the kernel and its tiling per shape and dtype, a launch plan keeps the choice
per key (`_PLANS`), and ``config=`` chooses them explicitly (`check_config`).
"""
from __future__ import annotations

import functools
import json
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .launcher import BoundKernel, bind
from .runtime import is_fake as _is_fake
from .runtime import (INTERPRET, Autotuner, Config, bucket, check_tensor, next_power_of_2, num_sms, register_op,
                      register_tuner)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TARGET_DTYPES = (torch.int64, torch.int32)
REDUCTIONS = ("none", "sum", "mean")
MAX_ONE_CHUNK_V = 8192  # rows up to this many classes (next power of two): only one-chunk configs
MAX_REG_ROW_V = 32768   # rows up to this many classes may be held whole in registers (16 warps: 64 per thread)
PF_MAX_BYTES = 1 << 17  # the next row is prefetched into L2 only when a row is at most this large
LOG2E = tl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * LOG2E)
NEG_INF = tl.constexpr(-float("inf"))
BLOCK_T = 1024          # targets per step when summing the denominator
MAX_PARTIALS = 4096     # upper bound on the persistent grid (finalize loads all partials in one block)
DENOM_IN_KERNEL_MAX = 1 << 22  # each program sums the M targets itself while M * programs <= this


# ----------------------------------------------------------------------------------------------------
# Kernels. The fused kernels' arguments: logits (M, V) strides (stride_lm, stride_lv); target (M,)
# stride stride_t; weight (V,) fp32 stride stride_w; grad (M, V) strides (stride_gm, 1); row_loss (M,)
# (REDUCTION "none"); part (3 P + 1,) fp32: per-program partial loss, weight and correct-count sums at
# [0, P), [P, 2 P), [2 P, 3 P), and at 3 P the "mean" denominator when the prologue kernel wrote it.
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _target_weight_sum(target_ptr, weight_ptr, M, V, stride_t, stride_w, ignore_index, HAS_WEIGHT: tl.constexpr,
                       BLOCK: tl.constexpr):
    """sum over rows i with target[i * stride_t] != ignore_index of weight[target * stride_w] (or 1): the
    "mean" denominator."""
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, M, BLOCK):
        i = start + offs
        t = tl.load(target_ptr + i.to(tl.int64) * stride_t, mask=i < M, other=ignore_index).to(tl.int32)
        valid = (t != ignore_index) & (i < M)
        if HAS_WEIGHT:
            ok = valid & (t >= 0) & (t < V)
            w = tl.load(weight_ptr + tl.where(ok, t, 0) * stride_w, mask=ok, other=0.0)
            acc += tl.where(valid, w, 0.0)
        else:
            acc += tl.where(valid, 1.0, 0.0)
    return tl.sum(acc, axis=0)


@triton.jit
def _ce_denominator_kernel(target_ptr, weight_ptr, denom_ptr, M, V, stride_t, stride_w, ignore_index,
                           HAS_WEIGHT: tl.constexpr, BLOCK: tl.constexpr):
    """One program: denom_ptr[0] = the "mean" denominator (see _target_weight_sum)."""
    tl.store(denom_ptr, _target_weight_sum(target_ptr, weight_ptr, M, V, stride_t, stride_w, ignore_index,
                                           HAS_WEIGHT, BLOCK))


@triton.jit
def _prefetch_l2(ptr, nbytes):
    """Ask L2 to fetch the bytes [ptr, ptr + nbytes) from device memory and return at once: no registers,
    no completion to wait for (cp.async.bulk.prefetch.L2, sm_90). Warp w of the program asks for the
    16 KB slice w, so a 128 KB row costs 8 instructions; the range is widened to 16-byte boundaries, as the
    instruction requires. nbytes <= 0: nothing. GPU only (PTX): the interpreter never reaches it."""
    a = ptr.to(tl.int64, bitcast=True)
    a0 = a & -16
    n = tl.where(nbytes > 0, ((a + nbytes + 15) & -16) - a0, 0).to(tl.int32)
    tl.inline_asm_elementwise(
        """{ .reg .pred p; .reg .u32 w, off, sz; .reg .u64 addr;
        mov.u32 w, %tid.x; shr.u32 w, w, 5; shl.b32 off, w, 14;
        setp.lt.u32 p, off, $2; sub.u32 sz, $2, off; min.u32 sz, sz, 16384;
        cvt.u64.u32 addr, off; add.u64 addr, addr, $1;
        @p cp.async.bulk.prefetch.L2.global [addr], sz; mov.u32 $0, 0; }""",
        "=r,l,r", [a0, n], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _program_terms(target_ptr, weight_ptr, part_ptr, M, V, stride_t, stride_w, ignore_index, HAS_WEIGHT: tl.constexpr,
                   SMOOTH: tl.constexpr, COMPUTE_GRAD: tl.constexpr, REDUCTION: tl.constexpr,
                   DENOM_IN_KERNEL: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_T: tl.constexpr):
    """The program's first row (a 64-bit index: rows * stride can exceed 2**31) and its target; the
    gradient's scale (1 / the "mean" denominator, 0 when every row is ignored, as torch; else 1); and
    W = sum_c w_c (V without class weights)."""
    row64 = tl.program_id(0).to(tl.int64)
    t_first = tl.load(target_ptr + row64 * stride_t)
    scale = 1.0
    if COMPUTE_GRAD and REDUCTION == "mean":
        if DENOM_IN_KERNEL:
            denom = _target_weight_sum(target_ptr, weight_ptr, M, V, stride_t, stride_w, ignore_index, HAS_WEIGHT,
                                       BLOCK_T)
        else:
            denom = tl.load(part_ptr + 3 * tl.num_programs(0))
        scale = tl.where(denom == 0.0, 0.0, 1.0 / denom)
    w_total = V * 1.0
    if HAS_WEIGHT and SMOOTH:
        cols = tl.arange(0, BLOCK_V)
        wacc = tl.zeros((BLOCK_V,), dtype=tl.float32)
        for start in range(0, V, BLOCK_V):
            c = start + cols
            wacc += tl.load(weight_ptr + c * stride_w, mask=c < V, other=0.0)
        w_total = tl.sum(wacc, axis=0)
    return row64, t_first, scale, w_total


@triton.jit
def _row_target(logits_ptr, target_ptr, weight_ptr, row64, t_next, nprog, M, V, stride_lm, stride_lv, stride_t,
                stride_w, ignore_index, row_bytes, HAS_WEIGHT: tl.constexpr, PREFETCH: tl.constexpr):
    """Row row64's target t (loaded one row ahead) and the next row's (loaded now: its latency hides
    behind this row's work; PREFETCH: the next row's row_bytes asked of L2, see the row kernel), the row's
    pointer, valid (not ignored), in_range (0 <= t < V), t_safe (t, or 0 out of range), w_t (t's class
    weight, 0 when ignored), w_t_class (t_safe's, 1 without weights) and x_t (the target logit, fp32)."""
    nxt = row64 + nprog
    t = t_next.to(tl.int32)
    t_next = tl.load(target_ptr + tl.where(nxt < M, nxt, row64) * stride_t)
    if PREFETCH:
        _prefetch_l2(logits_ptr + nxt * stride_lm, tl.where(nxt < M, row_bytes, 0))
    x_row = logits_ptr + row64 * stride_lm
    valid = t != ignore_index
    in_range = (t >= 0) & (t < V)
    t_safe = tl.where(in_range, t, 0)
    w_t_class = 1.0
    if HAS_WEIGHT:
        w_t_class = tl.load(weight_ptr + t_safe * stride_w)
    w_t = tl.where(valid, w_t_class, 0.0)
    x_t = tl.load(x_row + t_safe.to(tl.int64) * stride_lv).to(tl.float32)
    return nxt, t, t_next, x_row, valid, in_range, t_safe, w_t, w_t_class, x_t


@triton.jit
def _class_weights(weight_ptr, c, stride_w, mask, HAS_WEIGHT: tl.constexpr):
    """w_c at the classes c (0 where masked), or 1 without class weights (w * 1 is exact)."""
    wc = 1.0
    if HAS_WEIGHT:
        wc = tl.load(weight_ptr + c * stride_w, mask=mask, other=0.0)
    return wc


@triton.jit
def _first_index_of(values, value, index, NONE: tl.constexpr):
    """The argmax / correct-count search: the smallest index among the lanes where values == value (NONE
    when no lane holds it)."""
    return tl.min(tl.where(values == value, index, NONE), axis=0)


@triton.jit
def _row_loss(row_loss_ptr, row64, m_safe, x_t, log_s, sd, w_t, w_total, valid, in_range, hit, scale, eps, V,
              loss_acc, wsum_acc, correct_acc, SMOOTH: tl.constexpr, REDUCTION: tl.constexpr):
    """loss_i = (1 - eps) w_t ((m - x_t) + log s) + (eps / V)(sd + W log s), sd = sum_c w_c (m - x_c):
    lse = m + log s kept apart (with logits of magnitude 1e4 an fp32 lse has an ulp of ~1e-3, so x - lse
    would lose that much), smoothing terms >= 0; 0 for an ignored row, NaN for an out-of-range target (it
    poisons the reduction). Stored for "none". Returns the program's sums with this row, and the
    gradient's coefficients, dx_c = coef_p p_c - coef_t [c == t] - coef_u w_c, the reduction's scale
    folded in (coef_p NaN for an out-of-range target; unused ones cost nothing: compiled away)."""
    loss = w_t * ((m_safe - x_t) + log_s)
    if SMOOTH:
        loss = (1.0 - eps) * loss + tl.where(valid, (eps / V) * (sd + w_total * log_s), 0.0)
    bad = valid & (in_range == 0)
    loss = tl.where(bad, float("nan"), loss)
    if REDUCTION == "none":
        tl.store(row_loss_ptr + row64, loss.to(row_loss_ptr.dtype.element_ty))
    coef_t = scale * (1.0 - eps) * w_t
    coef_u = tl.where(valid, scale * eps / V, 0.0)
    coef_p = tl.where(bad, float("nan"), coef_t + coef_u * w_total)
    return loss_acc + loss, wsum_acc + w_t, correct_acc + tl.where(hit, 1, 0), coef_t, coef_u, coef_p


@triton.jit
def _store_grad(g_ptr, g, coef_u, wc, mask, SMOOTH: tl.constexpr):
    """Store g - coef_u w_c (the smoothing term, with label smoothing) at g_ptr in the gradient's dtype."""
    if SMOOTH:
        g -= coef_u * wc
    tl.store(g_ptr, g.to(g_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _store_partials(part_ptr, pid, nprog, loss_acc, wsum_acc, correct_acc):
    """The program's partial sums into part (see above)."""
    tl.store(part_ptr + pid, loss_acc)
    tl.store(part_ptr + nprog + pid, wsum_acc)
    tl.store(part_ptr + 2 * nprog + pid, correct_acc.to(tl.float32))  # exact: < 2**24 rows per program


@triton.jit
def _ce_fwd_row_kernel(
    logits_ptr, target_ptr, weight_ptr, grad_ptr, row_loss_ptr, part_ptr,
    M, V, stride_lm, stride_lv, stride_gm, stride_t, stride_w, ignore_index, eps,
    HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr, COMPUTE_GRAD: tl.constexpr, REDUCTION: tl.constexpr,
    DENOM_IN_KERNEL: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_T: tl.constexpr, PREFETCH: tl.constexpr,
):
    """Loss, gradient and correct count of the rows pid, pid + P, ... (P programs), V <= BLOCK_V.

    Math: the row x in registers; m = max x, e = exp(x - m), s = sum e, loss from (m - x_t) + log s;
    dx = coef_p e / s - coef_u w (p = e / s: no second exp), then the target column's - coef_t, one scalar
    store after a barrier (no per-element column compare). The first argmax is t iff x_t is the maximum
    and no earlier class holds it: no index tracking, and the search runs only when x_t is the maximum.
    Tiling: one (BLOCK_V,) block per row: one read, one write. While a program reduces its row, device
    memory has nothing of its to fetch; with PREFETCH the program first asks L2 for its next row
    (cp.async.bulk.prefetch.L2: no registers, no wait), so device memory keeps streaming during the
    reductions (132 programs x one 128 KB row ahead = 17 MB of the 50 MB L2).
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_V)
    eps = tl.cast(eps, tl.float32)  # under torch.compile a Python float argument can arrive as fp64
    ROW_BYTES = V * (logits_ptr.dtype.element_ty.primitive_bitwidth // 8)
    if PREFETCH:
        _prefetch_l2(logits_ptr + pid.to(tl.int64) * stride_lm, ROW_BYTES)
    row64, t_next, scale, w_total = _program_terms(target_ptr, weight_ptr, part_ptr, M, V, stride_t, stride_w,
                                                   ignore_index, HAS_WEIGHT, SMOOTH, COMPUTE_GRAD, REDUCTION,
                                                   DENOM_IN_KERNEL, BLOCK_V, BLOCK_T)
    loss_acc = 0.0
    wsum_acc = 0.0
    correct_acc = 0
    for _ in range(pid, M, nprog):
        nxt, t, t_next, x_row, valid, in_range, t_safe, w_t, w_t_class, x_t = _row_target(
            logits_ptr, target_ptr, weight_ptr, row64, t_next, nprog, M, V, stride_lm, stride_lv, stride_t, stride_w,
            ignore_index, ROW_BYTES, HAS_WEIGHT, PREFETCH)
        # The column offsets get a per-row zero the compiler cannot see through: hoisted out of the row
        # loop, they would hold two registers per four values and spill the row.
        zero = tl.multiple_of((row64 >> 62).to(tl.int32), BLOCK_V)  # rows < 2**62: always 0
        cr = cols + zero
        mask = cr < V
        x = tl.load(x_row + cr * stride_lv, mask=mask, other=NEG_INF, eviction_policy="evict_first").to(tl.float32)
        m = tl.max(x, axis=0)
        m_safe = tl.where(m == NEG_INF, 0.0, m)
        hit = valid & in_range & (x_t == m)
        if hit:
            hit = _first_index_of(x, m, cr, BLOCK_V) == t
        wc = 1.0
        sd = 0.0  # the smoothing sum, sum_c w_c (m - x_c)
        if SMOOTH:
            wc = _class_weights(weight_ptr, cr, stride_w, mask, HAS_WEIGHT)
            sd = tl.sum(tl.where(mask, wc * (m_safe - x), 0.0), axis=0)
        e = tl.exp2((x - m_safe) * LOG2E)  # masked lanes: exp2(-inf) = 0
        s = tl.sum(e, axis=0)
        log_s = tl.log(s)
        loss_acc, wsum_acc, correct_acc, coef_t, coef_u, coef_p = _row_loss(
            row_loss_ptr, row64, m_safe, x_t, log_s, sd, w_t, w_total, valid, in_range, hit, scale, eps, V, loss_acc,
            wsum_acc, correct_acc, SMOOTH, REDUCTION)
        if COMPUTE_GRAD:
            g_row = grad_ptr + row64 * stride_gm
            _store_grad(g_row + cr, e * (coef_p / s), coef_u, wc, mask, SMOOTH)
            if valid & in_range:
                g_t = coef_p * tl.exp2(((x_t - m_safe) - log_s) * LOG2E) - coef_t
                tl.debug_barrier()  # every thread's row store lands before the target column's
                _store_grad(g_row + t_safe, g_t, coef_u, w_t_class, None, SMOOTH)
        row64 = nxt
    _store_partials(part_ptr, pid, nprog, loss_acc, wsum_acc, correct_acc)


@triton.jit
def _chunked_row_stats(x_row, weight_ptr, V, stride_lv, stride_w, SMOOTH: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                       BLOCK_V: tl.constexpr, REG_DB: tl.constexpr):
    """Sweep 1 of a row in BLOCK_V chunks: m, m_safe (m, or 0 for a row of -inf), s, sd, the first argmax.

    Per lane (column of the chunk): the running max, the rescaled sum of exponentials (one exp per
    element: exp(-|x - m|) rescales whichever side is smaller), the first index of the maximum and the
    smoothing sum d = sum over the lane's classes so far of w_c (m_lane - x_c) (terms >= 0, rebased when
    the lane maximum rises) -- no cross-warp reduction inside the loop, so warps stream independently;
    the lanes are merged once per row. REG_DB: chunk i + 1 is loaded before chunk i is reduced."""
    cols = tl.arange(0, BLOCK_V)
    m_vec = tl.full((BLOCK_V,), NEG_INF, tl.float32)
    s_vec = tl.zeros((BLOCK_V,), dtype=tl.float32)
    i_vec = tl.zeros((BLOCK_V,), dtype=tl.int32)
    d_vec = tl.zeros((BLOCK_V,), dtype=tl.float32)
    # the lane's weight so far (with no class weights: the number of chunks seen, since only the last
    # chunk has masked lanes)
    wl_vec = tl.zeros((BLOCK_V,), dtype=tl.float32)
    n_seen = tl.cast(0.0, tl.float32)
    if REG_DB:
        x_nxt = tl.load(x_row + cols * stride_lv, mask=cols < V, other=NEG_INF)
    for start in range(0, V, BLOCK_V):
        c = start + cols
        mask = c < V
        if REG_DB:  # chunk i + 1 is in flight while chunk i is reduced
            xc = x_nxt.to(tl.float32)
            cn = c + BLOCK_V
            x_nxt = tl.load(x_row + cn * stride_lv, mask=cn < V, other=NEG_INF)
        else:
            xc = tl.load(x_row + c * stride_lv, mask=mask, other=NEG_INF).to(tl.float32)
        up = xc > m_vec  # strict: a lane keeps its first maximum
        hi = tl.maximum(m_vec, xc)
        lo = tl.minimum(m_vec, xc)
        e = tl.exp2((lo - tl.where(hi == NEG_INF, 0.0, hi)) * LOG2E)  # both -inf: exp2(-inf) = 0
        s_vec = tl.where(up, s_vec * e + 1.0, s_vec + e)
        i_vec = tl.where(up, c, i_vec)
        if SMOOTH:
            if HAS_WEIGHT:
                wc = tl.load(weight_ptr + c * stride_w, mask=mask, other=0.0)
                w_old = wl_vec
                wl_vec += wc
            else:
                wc = 1.0
                w_old = n_seen
                n_seen += 1.0
            # zero terms are skipped, so that a -inf logit gives torch's inf rather than 0 * inf
            d_vec += (tl.where(hi == m_vec, 0.0, tl.where(w_old == 0.0, 0.0, w_old * (hi - m_vec)))
                      + tl.where(mask & (xc != hi), wc * (hi - xc), 0.0))
        m_vec = hi
    m = tl.max(m_vec, axis=0)
    # first maximal index: the smallest lane-first index among lanes holding the row maximum
    best = _first_index_of(m_vec, m, i_vec, 2147483647)
    m_safe = tl.where(m == NEG_INF, 0.0, m)
    s = tl.sum(s_vec * tl.exp2((m_vec - m_safe) * LOG2E), axis=0)
    sd = 0.0
    if SMOOTH:  # merge the lanes: rebase each to the row maximum
        if HAS_WEIGHT:
            wl = wl_vec
        else:
            n_chunks = tl.cdiv(V, BLOCK_V)
            wl = tl.where(cols < V - (n_chunks - 1) * BLOCK_V, n_chunks, n_chunks - 1).to(tl.float32)
        sd = tl.sum(d_vec + tl.where((m_vec == m) | (wl == 0.0), 0.0, wl * (m_safe - m_vec)), axis=0)
    return m_safe, s, sd, best


@triton.jit
def _ce_fwd_chunked_kernel(
    logits_ptr, target_ptr, weight_ptr, grad_ptr, row_loss_ptr, part_ptr,
    M, V, stride_lm, stride_lv, stride_gm, stride_t, stride_w, ignore_index, eps,
    HAS_WEIGHT: tl.constexpr, SMOOTH: tl.constexpr, COMPUTE_GRAD: tl.constexpr, REDUCTION: tl.constexpr,
    DENOM_IN_KERNEL: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_T: tl.constexpr, REG_DB: tl.constexpr,
):
    """Loss, gradient and correct count of the rows pid, pid + P, ... (P programs), any V.

    Math: sweep 1 (_chunked_row_stats) keeps m_j, s_j = sum exp(x - m_j) and the first argmax online per
    lane j and merges them: m = max_j m_j, s = sum_j s_j exp(m_j - m); loss from (m - x_t) + log s;
    sweep 2 writes dx_c = coef_p exp((x_c - m) - log s) - coef_t [c == t] - coef_u w_c.
    Tiling: (BLOCK_V,) chunks; sweep 2 re-reads the row in reverse chunk order (the chunks read last are
    the likeliest to be still in L2). REG_DB: each sweep loads chunk i + 1 into registers before reducing
    chunk i (register double-buffering).
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_V)
    eps = tl.cast(eps, tl.float32)  # under torch.compile a Python float argument can arrive as fp64
    row64, t_next, scale, w_total = _program_terms(target_ptr, weight_ptr, part_ptr, M, V, stride_t, stride_w,
                                                   ignore_index, HAS_WEIGHT, SMOOTH, COMPUTE_GRAD, REDUCTION,
                                                   DENOM_IN_KERNEL, BLOCK_V, BLOCK_T)
    loss_acc = 0.0
    wsum_acc = 0.0
    correct_acc = 0
    for _ in range(pid, M, nprog):
        nxt, t, t_next, x_row, valid, in_range, t_safe, w_t, w_t_class, x_t = _row_target(
            logits_ptr, target_ptr, weight_ptr, row64, t_next, nprog, M, V, stride_lm, stride_lv, stride_t, stride_w,
            ignore_index, 0, HAS_WEIGHT, False)
        m_safe, s, sd, best = _chunked_row_stats(x_row, weight_ptr, V, stride_lv, stride_w, SMOOTH, HAS_WEIGHT,
                                                 BLOCK_V, REG_DB)
        log_s = tl.log(s)
        loss_acc, wsum_acc, correct_acc, coef_t, coef_u, coef_p = _row_loss(
            row_loss_ptr, row64, m_safe, x_t, log_s, sd, w_t, w_total, valid, in_range, valid & (best == t), scale,
            eps, V, loss_acc, wsum_acc, correct_acc, SMOOTH, REDUCTION)
        if COMPUTE_GRAD:  # sweep 2, in reverse chunk order
            g_row = grad_ptr + row64 * stride_gm
            n_chunks = tl.cdiv(V, BLOCK_V)
            if REG_DB:
                cl = (n_chunks - 1) * BLOCK_V + cols
                x_nxt = tl.load(x_row + cl * stride_lv, mask=cl < V, other=0.0)
            for i in range(0, n_chunks):
                c = (n_chunks - 1 - i) * BLOCK_V + cols
                mask = c < V
                if REG_DB:
                    xc = x_nxt.to(tl.float32)
                    cp = c - BLOCK_V
                    x_nxt = tl.load(x_row + cp * stride_lv, mask=cp >= 0, other=0.0)
                else:
                    xc = tl.load(x_row + c * stride_lv, mask=mask, other=0.0).to(tl.float32)
                g = coef_p * tl.exp2(((xc - m_safe) - log_s) * LOG2E) - tl.where(c == t, coef_t, 0.0)
                wc = 1.0
                if SMOOTH:
                    wc = _class_weights(weight_ptr, c, stride_w, mask, HAS_WEIGHT)
                _store_grad(g_row + c, g, coef_u, wc, mask, SMOOTH)
        row64 = nxt
    _store_partials(part_ptr, pid, nprog, loss_acc, wsum_acc, correct_acc)


@triton.jit
def _ce_finalize_kernel(part_ptr, loss_ptr, correct_ptr, P, REDUCTION: tl.constexpr, BLOCK_P: tl.constexpr):
    """One program: loss = sum of partial losses (/ sum of partial weights for "mean"), correct = sum
    (the layout of part_ptr is the fused kernels')."""
    offs = tl.arange(0, BLOCK_P)
    mask = offs < P
    correct = tl.sum(tl.load(part_ptr + 2 * P + offs, mask=mask, other=0.0).to(tl.int32), axis=0)
    tl.store(correct_ptr, correct.to(tl.int64))
    if REDUCTION != "none":
        loss = tl.sum(tl.load(part_ptr + offs, mask=mask, other=0.0), axis=0)
        if REDUCTION == "mean":
            loss = loss / tl.sum(tl.load(part_ptr + P + offs, mask=mask, other=0.0), axis=0)
        tl.store(loss_ptr, loss.to(loss_ptr.dtype.element_ty))


@triton.jit
def _ce_scale_grad_kernel(grad_ptr, go_ptr, M, V, stride_gm, stride_go, BLOCK_V: tl.constexpr):
    """In place: grad[row, :] *= go[row * stride_go] (stride_go = 0: one scalar). Rows whose factor is
    exactly 1 are skipped without touching memory, so `loss.backward()` costs one tiny launch."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_V)
    row64 = pid.to(tl.int64) - nprog
    for _ in range(pid, M, nprog):
        row64 += nprog
        f = tl.load(go_ptr + row64 * stride_go).to(tl.float32)
        if f != 1.0:
            g_row = grad_ptr + row64 * stride_gm
            for start in range(0, V, BLOCK_V):
                c = start + cols
                g = tl.load(g_row + c, mask=c < V, other=0.0).to(tl.float32)
                tl.store(g_row + c, (g * f).to(grad_ptr.dtype.element_ty), mask=c < V)


# ----------------------------------------------------------------------------------------------------
# Configs: the kernel (row or chunked), chunk size, warps, programs per SM (the persistent grid)
# ----------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _configs(V: int, elem_bytes: int = 4) -> tuple[Config, ...]:
    """Candidates, measured best first (the first runs when tuning is off and under torch.compile tracing).

    Rule (H100 timings: results/NOTES.md, memory-bound kernels; results/NVIDIA_H100_80GB_HBM3/
    ce_variants.csv): a row of at most 32768 classes is held in registers by 16 warps (64 values per thread,
    one program per SM; fewer warps need more registers than leave room for a second program, 32 warps
    spill), the L2 prefetch of the next row first for rows of at most 64 KB; longer rows are chunked,
    register double-buffering first, with one 16-warp program per SM and 8192-wide chunks so that the
    rows in flight stay well inside L2 for the gradient sweep's re-read.
    """
    npow = next_power_of_2(V)
    if npow <= MAX_ONE_CHUNK_V:
        return tuple(Config({"BLOCK_V": npow, "PER_SM": p}, w, 1) for w in (4, 2, 1, 8, 16) for p in (8, 4, 16, 32)
                     if w * 32 <= max(npow // 4, 32) and w * p <= 64)
    out = []
    if npow <= MAX_REG_ROW_V:  # the whole row in registers: 16 warps, at most 64 values per thread
        pf_first = V * elem_bytes <= (1 << 16)
        out += [Config({"BLOCK_V": npow, "PER_SM": 1, "PREFETCH": int(pf)}, 16, 1) for pf in (pf_first, not pf_first)]
    out += [Config({"BLOCK_V": bv, "PER_SM": p, "REG_DB": db}, w, st)
            for bv, w, p, db, st in ((8192, 16, 1, 1, 1), (8192, 16, 1, 0, 1), (4096, 8, 2, 0, 2), (4096, 8, 2, 1, 1))]
    return tuple(out)


def _interpret_config(V: int) -> Config:
    """The interpreter's config: the row in one block up to 1024 classes, longer rows in chunks of 1024."""
    return Config({"BLOCK_V": min(1024, next_power_of_2(V)), "PER_SM": 2}, 4, 1)


_tuner = register_tuner(Autotuner("cross_entropy", [_ce_fwd_row_kernel, _ce_fwd_chunked_kernel], _configs(1 << 15),
                                  interpret_config=_interpret_config(1 << 15)))
_FLAGS = ("PREFETCH", "REG_DB", "DENOM_IN_KERNEL")


def check_config(config: Optional[Config], V: Optional[int] = None) -> None:
    """A launch config names BLOCK_V (a power of two: rows of at most BLOCK_V classes run the row kernel,
    longer ones the chunked kernel in chunks of BLOCK_V) and PER_SM (programs per SM), and may set the 0/1
    flags PREFETCH (row kernel, GPU, unit class stride: ask L2 for the next row), REG_DB (chunked kernel:
    register double-buffering) and DENOM_IN_KERNEL (the "mean" denominator summed by every program, or by
    a prologue kernel; default: by M x programs). Else a ValueError naming ``config`` (V: the classes)."""
    if config is None:
        return
    if not isinstance(config, Config):
        raise ValueError(f"config must be a triton_kernels.runtime.Config or None, got {type(config).__name__}")
    if not {"BLOCK_V", "PER_SM"} <= set(config.kwargs) <= {"BLOCK_V", "PER_SM", *_FLAGS}:
        raise ValueError(f"config must name BLOCK_V and PER_SM and may name {', '.join(_FLAGS)}; "
                         f"got {sorted(config.kwargs)}")
    bv, per_sm = config.kwargs["BLOCK_V"], config.kwargs["PER_SM"]
    if not isinstance(bv, int) or bv < 1 or bv & (bv - 1) or not isinstance(per_sm, int) or per_sm < 1:
        raise ValueError(f"config's BLOCK_V must be a positive power of two and PER_SM a positive int, got "
                         f"BLOCK_V={bv!r}, PER_SM={per_sm!r}")
    if any(config.kwargs.get(flag, 0) not in (0, 1) for flag in _FLAGS):
        raise ValueError(f"config's {', '.join(_FLAGS)} must be 0 or 1, got {config}")
    if V is not None and config.kwargs.get("PREFETCH", 0) and V > bv:
        raise ValueError(f"config's PREFETCH is for rows held whole (V <= BLOCK_V), got BLOCK_V={bv}, V={V}")


def _config_str(config: Optional[Config]) -> str:
    """A config as the string the torch op carries ("" = the tuned one)."""
    return "" if config is None else json.dumps(config.to_json(), sort_keys=True)


def _config_from(text: str) -> Optional[Config]:
    return Config.from_json(json.loads(text)) if text else None


# ----------------------------------------------------------------------------------------------------
# Launchers: per key a plan (the kernels bound to their config, launcher.bind), found once
# ----------------------------------------------------------------------------------------------------
class _Plan(NamedTuple):
    fused: tuple[BoundKernel, BoundKernel]  # the row or chunked kernel, with DENOM_IN_KERNEL False / True
    denominator: BoundKernel  # the "mean" denominator's prologue
    finalize: BoundKernel
    programs: int  # of the persistent grid, at most
    need_denom: bool  # the gradient of a "mean"
    denom_max: float  # every program sums the denominator itself while M x programs <= this


# (M and V rounded up to powers of two, dtype, weighted, smoothed, gradient, reduction, unit class stride,
# device) -> plan: within a key, the kernel, its constexprs and the finalize block hold for every M and V
# (BLOCK_V and the prefetch bound are powers of two).
_PLANS: dict[tuple, _Plan] = {}
_SCALE_PLANS: dict[tuple, tuple[BoundKernel, int]] = {}


def _make_plan(key: tuple, config: Optional[Config], logits, target, weight, grad, loss, ignore_index, eps) -> _Plan:
    """The plan of ``config``, or of the tuner's config for ``key`` (timed on this call's arguments; kept
    unless torch.compile is tracing)."""
    block_m, block_v, dtype, has_weight, smooth, compute_grad, reduction, unit_stride, device = key
    flags = dict(HAS_WEIGHT=has_weight, SMOOTH=smooth, COMPUTE_GRAD=compute_grad, REDUCTION=reduction)
    sms = num_sms(device, default=2)

    def plan_for(cfg: Config) -> _Plan:
        bv = cfg.kwargs["BLOCK_V"]
        if block_v <= bv:  # V <= BLOCK_V: the row in registers
            prefetch = (bool(cfg.kwargs.get("PREFETCH", 0)) and not INTERPRET and unit_stride
                        and block_v * dtype.itemsize <= PF_MAX_BYTES)
            kernel, option = _ce_fwd_row_kernel, {"PREFETCH": prefetch}
        else:
            kernel, option = _ce_fwd_chunked_kernel, {"REG_DB": bool(cfg.kwargs.get("REG_DB", 0))}
        fused = tuple(bind(kernel, **flags, DENOM_IN_KERNEL=in_kernel, BLOCK_V=bv, BLOCK_T=BLOCK_T, **option,
                           num_warps=cfg.num_warps, num_stages=cfg.num_stages) for in_kernel in (False, True))
        programs = max(1, min(sms * cfg.kwargs["PER_SM"], MAX_PARTIALS))
        forced = cfg.kwargs.get("DENOM_IN_KERNEL")
        return _Plan(fused, bind(_ce_denominator_kernel, HAS_WEIGHT=has_weight, BLOCK=BLOCK_T, num_warps=4),
                     bind(_ce_finalize_kernel, REDUCTION=reduction, BLOCK_P=next_power_of_2(min(block_m, programs)),
                          num_warps=4),
                     programs, compute_grad and reduction == "mean",
                     DENOM_IN_KERNEL_MAX if forced is None else (float("inf") if forced else -1))

    if config is not None:
        return plan_for(config)

    def run(cfg: Config) -> None:  # one launch with cfg, timed by the tuner
        _launch_fused(plan_for(cfg), logits, target, weight, grad, loss, ignore_index, eps)

    M, V = logits.shape
    tracing = _is_fake(logits, target)
    # the tuning key as before: shape buckets, dtype, flags, the reduction as its index in REDUCTIONS
    tune_key = (bucket(M), bucket(V), str(dtype), has_weight, smooth, compute_grad, REDUCTIONS.index(reduction),
                unit_stride)
    cfg = _tuner.pick(tune_key, run, lambda: _configs(V, dtype.itemsize), tracing=tracing,
                      interpret_config=_interpret_config(V))
    plan = plan_for(cfg)
    if not tracing:
        _PLANS[key] = plan
    return plan


def _launch_fused(plan: _Plan, logits, target, weight, grad, loss, ignore_index, eps) -> tuple[int, torch.Tensor]:
    """The prologue (when the kernel does not sum the "mean" denominator) and the fused kernel; returns
    the number of programs P and the (3 P + 1,) partials."""
    M, V = logits.shape
    P = min(M, plan.programs)
    in_kernel = plan.need_denom and M * P <= plan.denom_max
    part = torch.empty((3 * P + 1,), device=logits.device, dtype=torch.float32)
    w = weight if weight is not None else logits  # dummy pointer when there is no weight
    stride_w = weight.stride(0) if weight is not None else 0
    if plan.need_denom and not in_kernel:
        plan.denominator.launch((1,), target_ptr=target, weight_ptr=w, denom_ptr=part[3 * P:], M=M, V=V,
                                stride_t=target.stride(0), stride_w=stride_w, ignore_index=ignore_index)
    plan.fused[in_kernel].launch(
        (P,), logits_ptr=logits, target_ptr=target, weight_ptr=w, grad_ptr=grad if grad is not None else logits,
        row_loss_ptr=loss, part_ptr=part, M=M, V=V, stride_lm=logits.stride(0), stride_lv=logits.stride(1),
        stride_gm=grad.stride(0) if grad is not None else 0, stride_t=target.stride(0), stride_w=stride_w,
        ignore_index=ignore_index, eps=eps)
    return P, part


def cross_entropy_forward(logits: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor] = None,
                          ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                          compute_grad: bool = True, config: Optional[Config] = None):
    """Launch the fused kernel on 2-D logits (M, V) and targets (M,).

    Every layout is read in place with its strides (logits, target, weight: expanded, sliced, offset
    views included); a weight that is not fp32 is converted (a copy). The gradient is allocated
    contiguous. config: run this kernel and tiling instead of the tuned one (see ``check_config``).

    Returns (loss, n_correct, grad): loss 0-dim ("mean"/"sum") or (M,) ("none") in the logits dtype;
    n_correct a 0-dim int64 tensor on the device; grad (M, V) in the logits dtype -- the gradient of the
    reduced loss for an incoming gradient of 1 -- or None.
    """
    M, V = logits.shape
    if config is not None:
        check_config(config, V)
    dev = logits.device
    loss = torch.empty((M,) if reduction == "none" else (), device=dev, dtype=logits.dtype)
    correct = torch.empty((), device=dev, dtype=torch.int64)
    grad = torch.empty((M, V), device=dev, dtype=logits.dtype) if compute_grad else None
    if weight is not None and weight.dtype != torch.float32:
        weight = weight.to(torch.float32)
    if M == 0:
        if reduction == "none":
            return loss, correct.zero_(), grad
        return loss.fill_(float("nan") if reduction == "mean" else 0.0), correct.zero_(), grad
    eps = float(label_smoothing)
    key = (next_power_of_2(M), next_power_of_2(V), logits.dtype, weight is not None, eps > 0.0, compute_grad,
           reduction, logits.stride(1) == 1, dev)
    plan = _PLANS.get(key) if config is None else None
    if plan is None:
        plan = _make_plan(key, config, logits, target, weight, grad, loss, ignore_index, eps)
    P, part = _launch_fused(plan, logits, target, weight, grad, loss, ignore_index, eps)
    plan.finalize.launch((1,), part_ptr=part, loss_ptr=loss, correct_ptr=correct, P=P)
    return loss, correct, grad


def scale_grad_(grad: torch.Tensor, grad_output: torch.Tensor) -> torch.Tensor:
    """grad *= grad_output (0-dim, or (M,) per row) in place; skipped on the device where the factor is 1."""
    M, V = grad.shape
    if M == 0 or V == 0:
        return grad
    key = (next_power_of_2(V), grad.device)
    plan = _SCALE_PLANS.get(key)
    if plan is None:
        plan = _SCALE_PLANS[key] = (bind(_ce_scale_grad_kernel, BLOCK_V=min(256 if INTERPRET else 4096, key[0]),
                                         num_warps=8), num_sms(grad.device, default=2) * 8)
    plan[0].launch((min(M, plan[1]),), grad_ptr=grad, go_ptr=grad_output.reshape(1) if grad_output.ndim == 0
                   else grad_output, M=M, V=V, stride_gm=grad.stride(0),
                   stride_go=0 if grad_output.ndim == 0 else grad_output.stride(0))
    return grad


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _cross_entropy_op(logits: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor],
                      ignore_index: int, reduction: str, label_smoothing: float,
                      compute_grad: bool, config: str) -> list[torch.Tensor]:
    loss, correct, grad = cross_entropy_forward(logits, target, weight, ignore_index, reduction, label_smoothing,
                                                compute_grad, _config_from(config))
    return [loss, correct, grad if grad is not None else logits.new_empty((0,))]


def _setup_context(ctx, inputs, output):
    ctx.reduction = inputs[4]
    ctx.compute_grad = inputs[6]
    ctx.save_for_backward(output[2])
    ctx.used = False
    # the (M, V) gradient output gets no incoming gradient; autograd would otherwise materialize one as
    # zeros on every backward (a memset as large as the logits)
    ctx.set_materialize_grads(False)


def _backward(ctx, grads):
    dloss = grads[0]
    (grad,) = ctx.saved_tensors
    if not ctx.needs_input_grad[0]:
        return (None,) * 8
    if not ctx.compute_grad:
        raise RuntimeError("cross_entropy ran without computing its gradient (compute_grad=False)")
    if dloss is None:
        return (None,) * 8
    go = dloss if ctx.reduction != "none" else dloss.reshape(-1)
    if _is_fake(grad, dloss):
        # traced (torch.compile): a functional multiply, fused by the compiler
        dx = grad * (go[:, None] if go.ndim == 1 else go).to(grad.dtype)
    else:
        if ctx.used:
            raise RuntimeError("cross_entropy's gradient is computed in the forward and scaled in place: "
                               "its backward can run only once (retain_graph is not supported)")
        ctx.used = True
        dx = scale_grad_(grad, go)  # the kernel reads go in its own dtype: no conversion launch
    return dx, None, None, None, None, None, None, None


# torch.compile calls the registered op; eager calls skip the custom-op dispatcher (runtime.register_op)
_cross_entropy_call = register_op("tk::cross_entropy", _cross_entropy_op, setup_context=_setup_context,
                                  backward=_backward)


# ----------------------------------------------------------------------------------------------------
# Public function
# ----------------------------------------------------------------------------------------------------
def _validate(logits, target, weight, ignore_index, reduction, label_smoothing, config):
    check_tensor("logits", logits, dtypes=DTYPES)
    if logits.ndim == 0:
        raise ValueError("logits must have at least 1 dim (classes), got a 0-dim tensor")
    if not isinstance(target, torch.Tensor):
        raise ValueError(f"target must be a torch.Tensor, got {type(target).__name__}")
    if target.is_floating_point():
        raise ValueError(f"target must hold integer class indices (int64 or int32), got dtype {target.dtype}; "
                         "class-probability targets are not supported")
    check_tensor("target", target, dtypes=TARGET_DTYPES, device=logits.device)
    expect = () if logits.ndim == 1 else (logits.shape[0], *logits.shape[2:])
    if tuple(target.shape) != tuple(expect):
        raise ValueError(f"target has shape {tuple(target.shape)} but logits of shape {tuple(logits.shape)} "
                         f"need target of shape {tuple(expect)}")
    V = logits.shape[0 if logits.ndim == 1 else 1]
    if weight is not None:
        check_tensor("weight", weight, ndim=1, dtypes=DTYPES, device=logits.device)
        if weight.shape[0] != V:
            raise ValueError(f"weight has {weight.shape[0]} elements but logits have {V} classes")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not isinstance(ignore_index, int):
        raise ValueError(f"ignore_index must be an int, got {ignore_index!r}")
    if not 0.0 <= float(label_smoothing) <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    check_config(config, V)


def check_targets(target: torch.Tensor, num_classes: int, ignore_index: int = -100) -> None:
    """Raise ValueError if a target (other than ignore_index) is outside [0, num_classes). Host sync."""
    bad = ((target < 0) | (target >= num_classes)) & (target != ignore_index)
    if bool(bad.any()):
        first = target[bad].reshape(-1)[0].item()
        raise ValueError(f"target holds class index {first} outside [0, {num_classes}) "
                         f"(and not ignore_index={ignore_index})")


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                  return_correct: bool = False, check_target: bool | None = None, *,
                  config: Optional[Config] = None):
    """torch.nn.functional.cross_entropy (class-index targets) in one fused pass over the logits.

    logits (N, C) / (C,) / (N, C, d1, ...), target (N,) / () / (N, d1, ...) of int64 or int32.
    return_correct: also return the number of non-ignored rows whose argmax equals the target, as a
    0-dim int64 tensor on the device (no host sync): ``loss, n_correct = cross_entropy(..., return_correct=True)``.
    check_target: verify targets are in range on the host (a device sync); default: only for CPU
    tensors. Unchecked out-of-range targets give a NaN loss and NaN gradient rows.
    config: run this kernel and tiling instead of the tuned one (see ``check_config``).
    """
    _validate(logits, target, weight, ignore_index, reduction, label_smoothing, config)
    V = logits.shape[0 if logits.ndim == 1 else 1]
    if check_target or (check_target is None and target.device.type == "cpu"):
        check_targets(target, V, ignore_index)
    if logits.ndim == 1:
        x2, t2 = logits.unsqueeze(0), target.reshape(1)
    elif logits.ndim == 2:
        x2, t2 = logits, target
    else:  # (N, C, d1, ...) -> (N * d1 * ..., C)
        x2, t2 = logits.movedim(1, -1).reshape(-1, V), target.reshape(-1)
    w = weight.to(torch.float32) if weight is not None else None  # any layout: read with its stride
    compute_grad = torch.is_grad_enabled() and logits.requires_grad
    loss, correct, _ = _cross_entropy_call(x2, t2, w, ignore_index, reduction, float(label_smoothing),
                                           compute_grad, _config_str(config))
    if reduction == "none":
        loss = loss.reshape(target.shape)
    return (loss, correct) if return_correct else loss
