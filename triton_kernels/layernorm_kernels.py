"""The LayerNorm kernels (triton_kernels/layernorm.py holds their launchers, launch plans and torch ops, and
its docstring the math and the tilings): the row kernels, which keep whole rows in registers (forward,
persistent backward, the partial-sum kernel), and the long-row kernels, which cut each row into segments
(segment statistics merged with Chan's formula, apply, backward segment sums and (column tile, row group)
tiles) and the fused LayerNorm -> ReLU -> MaxPool1d kernel.
"""
from __future__ import annotations

import triton
import triton.language as tl


# ----------------------------------------------------------------------------------------------------
# Kernels: rows that fit in registers
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _ln_fwd_row_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr,
    M, D, stride_xm, stride_ym, stride_w, stride_b, eps,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, STORE_STATS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """y = LayerNorm(x) for BLOCK_M whole rows. x, y: (M, D), unit column stride; w, b: (D,) with
    strides stride_w / stride_b; mean (of x - x0), rstd: (M,) fp32, stored when the backward needs them."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    rmask = rows < M
    cmask = cols < D
    mask = rmask[:, None] & cmask[None, :]
    r64 = rows[:, None].to(tl.int64)
    x = tl.load(x_ptr + r64 * stride_xm + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    # shift by the row's first value before summing (see the module docstring)
    x0 = tl.load(x_ptr + rows.to(tl.int64) * stride_xm, mask=rmask, other=0.0).to(tl.float32)
    xs = tl.where(mask, x - x0[:, None], 0.0)
    mean_s = tl.sum(xs, axis=1) / D
    xc = tl.where(mask, xs - mean_s[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / D + eps)
    y = xc * rstd[:, None]
    if HAS_W:
        y = y * tl.load(w_ptr + cols * stride_w, mask=cmask, other=0.0).to(tl.float32)[None, :]
    if HAS_B:
        y = y + tl.load(b_ptr + cols * stride_b, mask=cmask, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + r64 * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_STATS:
        tl.store(mean_ptr + rows, mean_s, mask=rmask)
        tl.store(rstd_ptr + rows, rstd, mask=rmask)


@triton.jit
def _load_dy_xhat(x_ptr, dy_ptr, mean_ptr, rstd_ptr, row, stride_xm, stride_dym, cols, cmask):
    """Row `row` on `cols`: dy, xhat = ((x - x0) - mean_s) * rstd (0 outside the row), and the row's
    rstd (fp32); x0 = x[row, 0] is the forward's shift, mean_s the mean it saved."""
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cmask, other=0.0).to(tl.float32)
    x0 = tl.load(x_ptr + row * stride_xm).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride_dym + cols, mask=cmask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(cmask, ((x - x0) - tl.load(mean_ptr + row)) * rstd, 0.0)
    return dy, xhat, rstd


@triton.jit
def _ln_bwd_row_kernel(
    x_ptr, w_ptr, dy_ptr, dx_ptr, mean_ptr, rstd_ptr, part_ptr,
    M, D, stride_xm, stride_dym, stride_dxm, stride_w,
    HAS_W: tl.constexpr, NEED_DX: tl.constexpr, NEED_PARTS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Rows pid, pid + P, ...: dx, plus this program's dw / db partials -> part (P, 2, D) fp32."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    cmask = cols < D
    w = 1.0
    if HAS_W:
        w = tl.load(w_ptr + cols * stride_w, mask=cmask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db_acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    row64 = pid.to(tl.int64) - nprog
    for _ in range(pid, M, nprog):
        row64 += nprog
        dy, xhat, rstd = _load_dy_xhat(x_ptr, dy_ptr, mean_ptr, rstd_ptr, row64, stride_xm, stride_dym, cols, cmask)
        if NEED_DX:
            g = dy * w
            c1 = tl.sum(g * xhat, axis=0) / D
            c2 = tl.sum(g, axis=0) / D
            dx = (g - xhat * c1 - c2) * rstd
            tl.store(dx_ptr + row64 * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=cmask)
        if NEED_PARTS:
            dw_acc += dy * xhat
            db_acc += dy
    if NEED_PARTS:
        _store_partials(part_ptr, pid, D, cols, cmask, dw_acc, db_acc)


@triton.jit
def _store_partials(part_ptr, group, D, cols, cmask, dw, db):
    """This program's dW and dB partial sums into row `group` of the (groups, 2 * D) fp32 buffer."""
    base = part_ptr + group.to(tl.int64) * 2 * D
    tl.store(base + cols, dw, mask=cmask)
    tl.store(base + D + cols, db, mask=cmask)


@triton.jit
def _sum_rows_kernel(part_ptr, out_ptr, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[n] = sum_p part[p, n] for a (P, N) fp32 buffer; one program per BLOCK_N columns."""
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.arange(0, BLOCK_P)
    acc = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
    for start in range(0, P, BLOCK_P):
        r = start + rows
        m = (r[:, None] < P) & (cols[None, :] < N)
        acc += tl.load(part_ptr + r[:, None].to(tl.int64) * N + cols[None, :], mask=m, other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=cols < N)


# ----------------------------------------------------------------------------------------------------
# Kernels: long rows (segments of a row in parallel)
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _ln_stats_kernel(x_ptr, pmean_ptr, pm2_ptr, D, stride_xm, SEG, S, BLOCK_D: tl.constexpr):
    """Program (row, s): mean and M2 = sum (xs - mean)^2 of xs = x - x0 on x[row, s*SEG : (s+1)*SEG]
    -> (M, S) buffers (x0 = x[row, 0], the row's shift); chunks of BLOCK_D are merged with Chan's
    formula (no cancellation)."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    cols = tl.arange(0, BLOCK_D)
    x_row = x_ptr + row * stride_xm
    start = s * SEG
    end = tl.minimum(start + SEG, D)
    x0 = tl.load(x_row).to(tl.float32)
    n = 0.0
    mean = 0.0
    m2 = 0.0
    for off in range(start, end, BLOCK_D):
        c = off + cols
        mask = c < end
        x = tl.where(mask, tl.load(x_row + c, mask=mask, other=0.0).to(tl.float32) - x0, 0.0)
        nb = tl.minimum(end - off, BLOCK_D).to(tl.float32)
        mb = tl.sum(x, axis=0) / nb
        d = tl.where(mask, x - mb, 0.0)
        m2b = tl.sum(d * d, axis=0)
        tot = n + nb
        delta = mb - mean
        mean = mean + delta * (nb / tot)
        m2 = m2 + m2b + delta * delta * (n * nb / tot)
        n = tot
    tl.store(pmean_ptr + row * S + s, mean)
    tl.store(pm2_ptr + row * S + s, m2)


@triton.jit
def _merge_stats(pmean_ptr, pm2_ptr, row, D, SEG, S, eps, BLOCK_S: tl.constexpr):
    """mean_s (the mean of x - x0) and rstd of a row from its S segment partials (segment s holds
    min(SEG, D - s*SEG) values)."""
    offs = tl.arange(0, BLOCK_S)
    smask = offs < S
    pm = tl.load(pmean_ptr + row * S + offs, mask=smask, other=0.0)
    pq = tl.load(pm2_ptr + row * S + offs, mask=smask, other=0.0)
    ns = tl.where(smask, tl.minimum(D - offs * SEG, SEG), 0).to(tl.float32)
    mean = tl.sum(ns * pm, axis=0) / D
    d = tl.where(smask, pm - mean, 0.0)
    m2 = tl.sum(pq + ns * d * d, axis=0)
    rstd = 1.0 / tl.sqrt(m2 / D + eps)
    return mean, rstd


@triton.jit
def _ln_fwd_apply_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, pmean_ptr, pm2_ptr, mean_ptr, rstd_ptr,
    D, stride_xm, stride_ym, stride_w, stride_b, eps, SEG, S,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, STORE_STATS: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """Program (row, s): merge the row's statistics and normalise segment s of the row,
    y = ((x - x0) - mean_s) * rstd * w + b."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    x0 = tl.load(x_ptr + row * stride_xm).to(tl.float32)
    mean_s, rstd = _merge_stats(pmean_ptr, pm2_ptr, row, D, SEG, S, eps, BLOCK_S)
    if STORE_STATS:
        if s == 0:
            tl.store(mean_ptr + row, mean_s)
            tl.store(rstd_ptr + row, rstd)
    cols = tl.arange(0, BLOCK_D)
    start = s * SEG
    end = tl.minimum(start + SEG, D)
    for off in range(start, end, BLOCK_D):
        c = off + cols
        mask = c < end
        x = tl.load(x_ptr + row * stride_xm + c, mask=mask, other=0.0).to(tl.float32)
        y = ((x - x0) - mean_s) * rstd
        if HAS_W:
            y = y * tl.load(w_ptr + c * stride_w, mask=mask, other=0.0).to(tl.float32)
        if HAS_B:
            y = y + tl.load(b_ptr + c * stride_b, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_ym + c, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ln_bwd_stats_kernel(
    x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, pc1_ptr, pc2_ptr,
    D, stride_xm, stride_dym, stride_w, SEG, S, HAS_W: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Program (row, s): sum(g * xhat) and sum(g) over segment s of the row (g = dy * w,
    xhat = ((x - x0) - mean_s) * rstd)."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    x0 = tl.load(x_ptr + row * stride_xm).to(tl.float32)
    mean_s = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    cols = tl.arange(0, BLOCK_D)
    a1 = tl.zeros((BLOCK_D,), dtype=tl.float32)
    a2 = tl.zeros((BLOCK_D,), dtype=tl.float32)
    start = s * SEG
    end = tl.minimum(start + SEG, D)
    for off in range(start, end, BLOCK_D):
        c = off + cols
        mask = c < end
        x = tl.load(x_ptr + row * stride_xm + c, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(dy_ptr + row * stride_dym + c, mask=mask, other=0.0).to(tl.float32)
        if HAS_W:
            g = g * tl.load(w_ptr + c * stride_w, mask=mask, other=0.0).to(tl.float32)
        a1 += tl.where(mask, g * ((x - x0) - mean_s) * rstd, 0.0)
        a2 += g
    tl.store(pc1_ptr + row * S + s, tl.sum(a1, axis=0))
    tl.store(pc2_ptr + row * S + s, tl.sum(a2, axis=0))


@triton.jit
def _ln_bwd_tile_kernel(
    x_ptr, w_ptr, dy_ptr, dx_ptr, mean_ptr, rstd_ptr, pc1_ptr, pc2_ptr, part_ptr,
    M, D, stride_xm, stride_dym, stride_dxm, stride_w, S, ROWS_PER_GROUP,
    HAS_W: tl.constexpr, NEED_DX: tl.constexpr, NEED_PARTS: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """Program (column tile, row group): for each row of the group, dx on BLOCK_D columns (from the
    row's summed segment partials pc1 / pc2, (M, S)), while dw = sum dy * xhat and db = sum dy over the
    group's rows accumulate in registers -> part (G, 2, D) fp32. One read of x and dy serves dx, dw and
    db; the group's partial row is summed over G by _sum_rows_kernel."""
    pid_d = tl.program_id(0)
    gid = tl.program_id(1)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    cmask = cols < D
    offs = tl.arange(0, BLOCK_S)
    w = 1.0
    if HAS_W:
        w = tl.load(w_ptr + cols * stride_w, mask=cmask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_D,), dtype=tl.float32)
    db = tl.zeros((BLOCK_D,), dtype=tl.float32)
    r_start = gid * ROWS_PER_GROUP
    r_end = tl.minimum(r_start + ROWS_PER_GROUP, M)
    row = r_start.to(tl.int64) - 1  # 64-bit row index (rows * stride can exceed 2**31)
    for _ in range(r_start, r_end):
        row += 1
        dy, xhat, rstd = _load_dy_xhat(x_ptr, dy_ptr, mean_ptr, rstd_ptr, row, stride_xm, stride_dym, cols, cmask)
        if NEED_DX:
            c1 = tl.sum(tl.load(pc1_ptr + row * S + offs, mask=offs < S, other=0.0), axis=0) / D
            c2 = tl.sum(tl.load(pc2_ptr + row * S + offs, mask=offs < S, other=0.0), axis=0) / D
            dx = (dy * w - xhat * c1 - c2) * rstd
            tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=cmask)
        if NEED_PARTS:
            dw += dy * xhat
            db += dy
    if NEED_PARTS:
        _store_partials(part_ptr, gid, D, cols, cmask, dw, db)


@triton.jit
def _ln_relu_pool_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, pmean_ptr, pm2_ptr,
    L, LO, D, stride_xb, stride_yb, stride_wc, stride_wl, stride_bc, stride_bl, eps, SEG, S, OSEG, NO,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, POOL: tl.constexpr,
    BLOCK_O: tl.constexpr, BLOCK_S: tl.constexpr,
):
    """Program (b, s): outputs o in [s*OSEG, (s+1)*OSEG) of the flattened (C, LO) output of sample b:
    y[b, c, j] = relu(max_{k < POOL} LN(x)[b, c, POOL*j + k]),  c = o // LO, j = o % LO,
    LN(x) = ((x - x0) - mean_s) * rstd * w + b. x: (B, C, L) dense per sample (D = C * L); w, b: (C, L)
    with strides (stride_wc, stride_wl) / (stride_bc, stride_bl); y: (B, C, LO) dense per sample.
    The max and the ReLU propagate NaN (torch's max_pool1d and relu do)."""
    bid = tl.program_id(0).to(tl.int64)
    s = tl.program_id(1)
    x0 = tl.load(x_ptr + bid * stride_xb).to(tl.float32)
    mean_s, rstd = _merge_stats(pmean_ptr, pm2_ptr, bid, D, SEG, S, eps, BLOCK_S)
    offs = tl.arange(0, BLOCK_O)
    start = s * OSEG
    end = tl.minimum(start + OSEG, NO)
    for off in range(start, end, BLOCK_O):
        o = off + offs
        mask = o < end
        c = o // LO
        j = o - c * LO
        best = tl.full((BLOCK_O,), -float("inf"), tl.float32)
        for k in tl.static_range(POOL):
            t = j * POOL + k
            x = tl.load(x_ptr + bid * stride_xb + c * L + t, mask=mask, other=0.0).to(tl.float32)
            v = ((x - x0) - mean_s) * rstd
            if HAS_W:
                v = v * tl.load(w_ptr + c * stride_wc + t * stride_wl, mask=mask, other=0.0).to(tl.float32)
            if HAS_B:
                v = v + tl.load(b_ptr + c * stride_bc + t * stride_bl, mask=mask, other=0.0).to(tl.float32)
            best = tl.maximum(best, v, propagate_nan=tl.PropagateNan.ALL)
        y = tl.where(best < 0.0, 0.0, best)  # relu that keeps NaN (NaN < 0 is false)
        tl.store(y_ptr + bid * stride_yb + o, y.to(y_ptr.dtype.element_ty), mask=mask)
