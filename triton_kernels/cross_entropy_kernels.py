"""The Triton kernels of the fused cross-entropy (triton_kernels/cross_entropy.py, which holds the math,
the tiling, the configs and the launchers): the row kernel and the chunked kernel with the per-row jit
helpers they share, the "mean" denominator's prologue, the finalize kernel that adds the per-program
partials, and the in-place scaling of the gradient by the incoming one.
"""
from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # exp(x) = exp2(x * LOG2E)


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
        loss = (1.0 - eps) * loss + (eps / V) * (sd + w_total * log_s)
    loss = tl.where(valid, loss, 0.0)  # exactly 0 whatever the row holds (NaN or inf logits included), as torch
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
        x = tl.load(x_row + cr * stride_lv, mask=mask, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        m = tl.max(x, axis=0)
        m_safe = tl.where(m == float("-inf"), 0.0, m)
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
    m_vec = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    s_vec = tl.zeros((BLOCK_V,), dtype=tl.float32)
    i_vec = tl.zeros((BLOCK_V,), dtype=tl.int32)
    d_vec = tl.zeros((BLOCK_V,), dtype=tl.float32)
    # the lane's weight so far (with no class weights: the number of chunks seen, since only the last
    # chunk has masked lanes)
    wl_vec = tl.zeros((BLOCK_V,), dtype=tl.float32)
    n_seen = tl.cast(0.0, tl.float32)
    if REG_DB:
        x_nxt = tl.load(x_row + cols * stride_lv, mask=cols < V, other=float("-inf"))
    for start in range(0, V, BLOCK_V):
        c = start + cols
        mask = c < V
        if REG_DB:  # chunk i + 1 is in flight while chunk i is reduced
            xc = x_nxt.to(tl.float32)
            cn = c + BLOCK_V
            x_nxt = tl.load(x_row + cn * stride_lv, mask=cn < V, other=float("-inf"))
        else:
            xc = tl.load(x_row + c * stride_lv, mask=mask, other=float("-inf")).to(tl.float32)
        up = xc > m_vec  # strict: a lane keeps its first maximum
        hi = tl.maximum(m_vec, xc, propagate_nan=tl.PropagateNan.ALL)  # a NaN logit makes the lane's m, s NaN
        lo = tl.minimum(m_vec, xc, propagate_nan=tl.PropagateNan.ALL)
        e = tl.exp2((lo - tl.where(hi == float("-inf"), 0.0, hi)) * LOG2E)  # both -inf: exp2(-inf) = 0
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
    m_safe = tl.where(m == float("-inf"), 0.0, m)
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
