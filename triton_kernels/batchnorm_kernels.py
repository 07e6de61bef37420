"""The Triton kernels of the fused batch norm (triton_kernels/batchnorm.py holds the math, the passes
over memory, the tiling and the launchers): the statistics reduction (its last program per channel block
merges the partials), the apply kernel (normalise, residual, ReLU), and the backward's reduction (merged
the same way) and dx kernel, with the small jit helpers they share.
"""
from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .stream_buffers import last_arrival


# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M: tl.constexpr):
    """Tile t covers pixels [hw0, hw0 + BLOCK_M) of sample n (n = t // TILES_PER_SAMPLE,
    hw0 = (t % TILES_PER_SAMPLE) * BLOCK_M): its int64 base offset and the mask of its pixels."""
    n = t // TILES_PER_SAMPLE
    hw0 = (t - n * TILES_PER_SAMPLE) * BLOCK_M
    base = n.to(tl.int64) * stride_n + hw0.to(tl.int64) * stride_hw
    return base, hw0 + tl.arange(0, BLOCK_M) < HW


@triton.jit
def _group_tiles(group, TILES, GROUPS):
    """How many tiles reduction program ``group`` reads: every GROUPS-th tile, back to front (_group_tile)."""
    return (TILES - group + GROUPS - 1) // GROUPS


@triton.jit
def _group_tile(group, k, TILES, GROUPS):
    """The k-th tile program ``group`` reads: TILES - 1 - group - k * GROUPS. The programs sweep x back to front
    together: x's producer wrote its back last, so those lines are read while the L2 still holds them."""
    return TILES - 1 - group - k * GROUPS


@triton.jit
def _bit_offsets(t, TILES_PER_SAMPLE, HW, C, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """Tile t's relu bits: their byte offsets (BLOCK_M, BLOCK_C // G) and mask, G = min(8, BLOCK_C) channels
    per byte. Pixel p = n * HW + hw keeps cdiv(C, 8) bytes, channel c in bit c % 8 of byte c // 8."""
    G: tl.constexpr = BLOCK_C if BLOCK_C < 8 else 8
    n = t // TILES_PER_SAMPLE
    hw = (t - n * TILES_PER_SAMPLE) * BLOCK_M + tl.arange(0, BLOCK_M)
    first = tl.program_id(1) * BLOCK_C // 8 + tl.arange(0, BLOCK_C // G)
    offs = (n.to(tl.int64) * HW + hw)[:, None] * ((C + 7) // 8) + first[None, :]
    return offs, (hw < HW)[:, None] & (first * 8 < C)[None, :]


@triton.jit
def _second_rows(t, TILES_PER_SAMPLE, HW, IMG_H, IMG_W, STRIDE: tl.constexpr, BLOCK_M: tl.constexpr):
    """Tile t's pixels in y2 = y[:, :, ::STRIDE, ::STRIDE], a dense channels_last tensor of its own (C values
    per pixel): each pixel's index there, and whether it is there (its h and w multiples of STRIDE). A tile
    row is pixel hw of sample n; with samples merged (n = 0) hw runs over the images, img = hw // (H * W)."""
    n = t // TILES_PER_SAMPLE
    hw = (t - n * TILES_PER_SAMPLE) * BLOCK_M + tl.arange(0, BLOCK_M)
    img = hw // (IMG_H * IMG_W)
    r = hw - img * (IMG_H * IMG_W)
    h = r // IMG_W
    w = r - h * IMG_W
    h2, w2 = (IMG_H + STRIDE - 1) // STRIDE, (IMG_W + STRIDE - 1) // STRIDE
    rows = ((n + img).to(tl.int64) * h2 + h // STRIDE) * w2 + w // STRIDE
    return rows, (hw < HW) & (h % STRIDE == 0) & (w % STRIDE == 0)


@triton.jit
def _pack_bits(keep, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """(BLOCK_M, BLOCK_C) booleans -> (BLOCK_M, BLOCK_C // G) bytes, channel j of a byte's G in bit j."""
    G: tl.constexpr = BLOCK_C if BLOCK_C < 8 else 8
    bits = tl.reshape(keep.to(tl.int32), (BLOCK_M, BLOCK_C // G, G)) << tl.arange(0, G)[None, None, :]
    return tl.sum(bits, axis=2).to(tl.uint8)


@triton.jit
def _unpack_bits(packed, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """_pack_bits' inverse: (BLOCK_M, BLOCK_C // G) bytes -> (BLOCK_M, BLOCK_C) booleans."""
    G: tl.constexpr = BLOCK_C if BLOCK_C < 8 else 8
    bits = (packed.to(tl.int32)[:, :, None] >> tl.arange(0, G)[None, None, :]) & 1
    return tl.reshape(bits, (BLOCK_M, BLOCK_C)) != 0


@triton.jit
def _fold_rows(v, ACC_ROWS: tl.constexpr):
    """A (BLOCK_M, BLOCK_C) tile summed down to (ACC_ROWS, BLOCK_C): pixel p adds into row p % ACC_ROWS. The
    tile's low pixel bits are spread over threads and warps, its high bits over each thread's registers,
    so with ACC_ROWS at least the pixels one pass of the warps covers the sum stays inside each thread, and
    a reduction keeps ACC_ROWS x BLOCK_C accumulators instead of one per tile element (ACC_ROWS = BLOCK_M:
    no folding)."""
    return tl.sum(tl.reshape(v, (v.shape[0] // ACC_ROWS, ACC_ROWS, v.shape[1])), axis=0)


@triton.jit
def _bn_stats_kernel(
    x_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c, TILES_PER_SAMPLE, TILES, GROUPS,
    count_ptr, w_ptr, b_ptr, stats_ptr, rmean_ptr, rvar_ptr, rmean_out_ptr, rvar_out_ptr, M, eps, momentum,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, UPDATE_RUNNING: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, ACC_ROWS: tl.constexpr, BLOCK_G: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Program (group, channel block): count, mean of x - s and M2 = sum (x - mean)^2 over the tiles
    TILES - 1 - group, TILES - 1 - group - GROUPS, ... -> part (3, GROUPS, C) fp32; s = x at the batch's first
    pixel. The programs sweep x back to front together: the producer of x (a convolution) wrote its back last,
    so those lines are read while the L2 still holds them, and the sweep ends at the front, which the apply
    kernel reads first. Sums are kept in (ACC_ROWS, BLOCK_C) registers (`_fold_rows`) and reduced over the
    pixels once at the end. The last program of the channel block to finish then merges all GROUPS partials
    (_merge_stats), so one launch gives the batch statistics. PDL: once its tiles are summed, a program lets
    the apply kernel, a programmatic dependent launch, start (it loads its tiles, then waits for this grid to
    end)."""
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift = tl.load(x_ptr + cols * stride_c, mask=cmask, other=0.0).to(tl.float32)
    acc1 = tl.zeros((ACC_ROWS, BLOCK_C), dtype=tl.float32)
    acc2 = tl.zeros((ACC_ROWS, BLOCK_C), dtype=tl.float32)
    n = 0.0
    for k in range(0, _group_tiles(group, TILES, GROUPS)):
        t = _group_tile(group, k, TILES, GROUPS)
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        x = tl.load(x_ptr + base + in_tile, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift[None, :], 0.0)
        acc1 += _fold_rows(d, ACC_ROWS)
        acc2 += _fold_rows(d * d, ACC_ROWS)
        n += tl.sum(pmask.to(tl.float32), axis=0)
    if PDL:
        gdc_launch_dependents()
    s1 = tl.sum(acc1, axis=0)
    s2 = tl.sum(acc2, axis=0)
    out = part_ptr + group * C + cols
    tl.store(out, tl.zeros((BLOCK_C,), dtype=tl.float32) + n, mask=cmask)
    tl.store(out + GROUPS * C, s1 / n, mask=cmask)
    tl.store(out + 2 * GROUPS * C, tl.maximum(s2 - s1 * (s1 / n), 0.0), mask=cmask)
    if last_arrival(count_ptr, GROUPS):
        _merge_stats(part_ptr, shift, w_ptr, b_ptr, stats_ptr, rmean_ptr, rvar_ptr, rmean_out_ptr, rvar_out_ptr,
                     cols, cmask, C, GROUPS, M, eps, momentum, HAS_W, HAS_B, UPDATE_RUNNING, BLOCK_G, BLOCK_C)


@triton.jit
def _merge_stats(part_ptr, shift, w_ptr, b_ptr, stats_ptr, rmean_ptr, rvar_ptr, rmean_out_ptr, rvar_out_ptr,
                 cols, cmask, C, GROUPS, M, eps, momentum, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                 UPDATE_RUNNING: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr):
    """Merge the GROUPS partials (count, offset, M2) of channels ``cols`` into the batch statistics, in a
    fixed order whichever program runs it: offset = sum n_g offset_g / M, M2 = sum (M2_g + n_g (offset_g -
    offset)^2), mean = s + offset. Writes stats (5, C) fp32 = (s, offset, rstd, scale = w * rstd, beta = b)
    and the new running statistics. Partials are read from L2 (.cg): other SMs wrote them."""
    gs = tl.arange(0, BLOCK_G)
    acc = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        m = ((g0 + gs) < GROUPS)[:, None] & cmask[None, :]
        p = part_ptr + (g0 + gs)[:, None] * C + cols[None, :]
        acc += (tl.load(p, mask=m, other=0.0, cache_modifier=".cg")
                * tl.load(p + GROUPS * C, mask=m, other=0.0, cache_modifier=".cg"))
    Mf = tl.cast(M, tl.float32)  # not M.to(): torch.compile's analysis passes M as an int
    offset = tl.sum(acc, axis=0) / Mf
    acc = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        m = ((g0 + gs) < GROUPS)[:, None] & cmask[None, :]
        p = part_ptr + (g0 + gs)[:, None] * C + cols[None, :]
        d = tl.load(p + GROUPS * C, mask=m, other=0.0, cache_modifier=".cg") - offset[None, :]
        acc += (tl.load(p + 2 * GROUPS * C, mask=m, other=0.0, cache_modifier=".cg")
                + tl.load(p, mask=m, other=0.0, cache_modifier=".cg") * d * d)
    m2 = tl.sum(acc, axis=0)
    rstd = 1.0 / tl.sqrt(m2 / Mf + eps)
    scale = rstd
    if HAS_W:
        scale = rstd * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    beta = tl.zeros((BLOCK_C,), dtype=tl.float32)
    if HAS_B:
        beta = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    tl.store(stats_ptr + cols, shift, mask=cmask)
    tl.store(stats_ptr + C + cols, offset, mask=cmask)
    tl.store(stats_ptr + 2 * C + cols, rstd, mask=cmask)
    tl.store(stats_ptr + 3 * C + cols, scale, mask=cmask)
    tl.store(stats_ptr + 4 * C + cols, beta, mask=cmask)
    if UPDATE_RUNNING:
        rm = tl.load(rmean_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        rv = tl.load(rvar_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        rm = momentum * (shift + offset) + (1.0 - momentum) * rm
        rv = momentum * (m2 / (Mf - 1.0)) + (1.0 - momentum) * rv
        tl.store(rmean_out_ptr + cols, rm.to(rmean_out_ptr.dtype.element_ty), mask=cmask)
        tl.store(rvar_out_ptr + cols, rv.to(rvar_out_ptr.dtype.element_ty), mask=cmask)


@triton.jit
def _channel_stats(stats_ptr, C, cols, cmask):
    """Per-channel (s, offset, scale, beta) vectors from stats (5, C) fp32."""
    shift = tl.load(stats_ptr + cols, mask=cmask, other=0.0)
    offset = tl.load(stats_ptr + C + cols, mask=cmask, other=0.0)
    scale = tl.load(stats_ptr + 3 * C + cols, mask=cmask, other=0.0)
    beta = tl.load(stats_ptr + 4 * C + cols, mask=cmask, other=0.0)
    return shift, offset, scale, beta


@triton.jit
def _centered(x, shift, offset):
    """x - mean as (x - s) - offset in fp32 (exact first step for x near the mean)."""
    return (x.to(tl.float32) - shift[None, :]) - offset[None, :]


@triton.jit
def _bn_apply_kernel(
    x_ptr, res_ptr, y_ptr, bits_ptr, y2_ptr, stats_ptr, res_stats_ptr, C, HW, stride_n, stride_hw, stride_c,
    TILES_PER_SAMPLE, rmean_ptr, rvar_ptr, w_ptr, b_ptr, eps, IMG_H, IMG_W,
    HAS_RES: tl.constexpr, RELU: tl.constexpr, FROM_RUNNING: tl.constexpr, HAS_W: tl.constexpr,
    HAS_B: tl.constexpr, STORE_BITS: tl.constexpr, SECOND_STRIDE: tl.constexpr, RES_NORM: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, PDL: tl.constexpr = False,
):
    """Program (tile, channel block): y = act((x - mean) * scale + beta [+ residual]); one read of x
    (and the residual), one write of y; with STORE_BITS also the relu's mask, one bit per value (pre-activation
    > 0, or NaN), for the backward; with SECOND_STRIDE > 1 also y2 = y[:, :, ::S, ::S] as a tensor of its own
    (IMG_H x IMG_W images; what a 1x1 stride-S convolution reads); with RES_NORM the residual is normalised
    here, (res - mean_r) * scale_r + beta_r from res_stats (5, C) (a shortcut's batch norm whose output only
    this add reads, so it is never written). Per-channel vectors from stats (5, C)
    (training), or with FROM_RUNNING from the running statistics (inference): mean = running_mean,
    scale = w / sqrt(running_var + eps), beta = b. PDL (training): launched as a programmatic dependent of the
    statistics kernel, which may still run; the program loads its tiles (written before that kernel started),
    then waits for it to end (gdc_wait) before it reads the statistics and stores anything."""
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    base, pmask = _tile(tl.program_id(0), TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
    mask = pmask[:, None] & cmask[None, :]
    offs = base + tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if HAS_RES:
        res = tl.load(res_ptr + offs, mask=mask, other=0.0)
    if PDL:
        gdc_wait()
    if FROM_RUNNING:
        shift = tl.load(rmean_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        offset = tl.zeros((BLOCK_C,), dtype=tl.float32)
        scale = 1.0 / tl.sqrt(tl.load(rvar_ptr + cols, mask=cmask, other=1.0).to(tl.float32) + eps)
        if HAS_W:
            scale = scale * tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        beta = tl.zeros((BLOCK_C,), dtype=tl.float32)
        if HAS_B:
            beta = tl.load(b_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    else:
        shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    y = _centered(x, shift, offset) * scale[None, :] + beta[None, :]
    if RES_NORM:
        shift_r, offset_r, scale_r, beta_r = _channel_stats(res_stats_ptr, C, cols, cmask)
        y += _centered(res, shift_r, offset_r) * scale_r[None, :] + beta_r[None, :]
    elif HAS_RES:
        y += res.to(tl.float32)
    if RELU:
        if STORE_BITS:
            bit_offs, bit_mask = _bit_offsets(tl.program_id(0), TILES_PER_SAMPLE, HW, C, BLOCK_M, BLOCK_C)
            tl.store(bits_ptr + bit_offs, _pack_bits(~(y <= 0.0), BLOCK_M, BLOCK_C), mask=bit_mask)
        y = tl.where(y <= 0.0, 0.0, y)  # NaN stays NaN, as torch.relu
    y = y.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs, y, mask=mask)
    if SECOND_STRIDE > 1:
        rows, keep = _second_rows(tl.program_id(0), TILES_PER_SAMPLE, HW, IMG_H, IMG_W, SECOND_STRIDE, BLOCK_M)
        tl.store(y2_ptr + rows[:, None] * C + cols[None, :], y, mask=keep[:, None] & cmask[None, :])


@triton.jit
def _load_dy(dy_ptr, dy2_ptr, offs, mask, t, TILES_PER_SAMPLE, HW, C, cols, cmask, IMG_H, IMG_W,
             HAS_DY2: tl.constexpr, SECOND_STRIDE: tl.constexpr, BLOCK_M: tl.constexpr):
    """Tile t's output gradient in fp32: dy, or dy + dy2 when it comes in two parts (the sum rounded once, to
    fp32, where autograd would have added the two in the activation dtype); dy2 in dy's layout, or with
    SECOND_STRIDE > 1 the gradient of y2 = y[:, :, ::S, ::S] (dense channels_last), added where it lands."""
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if HAS_DY2:
        if SECOND_STRIDE > 1:
            rows, keep = _second_rows(t, TILES_PER_SAMPLE, HW, IMG_H, IMG_W, SECOND_STRIDE, BLOCK_M)
            dy += tl.load(dy2_ptr + rows[:, None] * C + cols[None, :], mask=keep[:, None] & cmask[None, :],
                          other=0.0).to(tl.float32)
        else:
            dy += tl.load(dy2_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    return dy


@triton.jit
def _masked_grad(dy, x_minus_mean, bits_ptr, t, TILES_PER_SAMPLE, HW, C, scale, beta,
                 RELU: tl.constexpr, MASK_FROM_BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """g = dy where tile t's forward pre-activation was > 0 (relu): from the bits the apply kernel stored (a
    residual was added), or recomputed from x."""
    if RELU:
        if MASK_FROM_BITS:
            bit_offs, bit_mask = _bit_offsets(t, TILES_PER_SAMPLE, HW, C, BLOCK_M, BLOCK_C)
            keep = _unpack_bits(tl.load(bits_ptr + bit_offs, mask=bit_mask, other=0), BLOCK_M, BLOCK_C)
        else:
            keep = ~(x_minus_mean * scale[None, :] + beta[None, :] <= 0.0)
        dy = tl.where(keep, dy, 0.0)
    return dy


@triton.jit
def _bn_bwd_reduce_kernel(
    dy_ptr, dy2_ptr, x_ptr, bits_ptr, g_ptr, stats_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c,
    TILES_PER_SAMPLE, TILES, GROUPS, count_ptr, coef_ptr, dwb_ptr, M, IMG_H, IMG_W,
    res_x_ptr, res_stats_ptr, res_coef_ptr, res_dwb_ptr,
    RELU: tl.constexpr, MASK_FROM_BITS: tl.constexpr, STORE_G: tl.constexpr, HAS_DY2: tl.constexpr,
    SECOND_STRIDE: tl.constexpr, PAIR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
    ACC_ROWS: tl.constexpr, BLOCK_G: tl.constexpr, PDL: tl.constexpr = False,
):
    """Program (group, channel block): sum(g) and sum(g * (x - mean)) over the group's tiles (every GROUPS-th
    tile, back to front, as _bn_stats_kernel reads them: dy's producer wrote its back last), kept in
    (ACC_ROWS, BLOCK_C) registers (`_fold_rows`) -> part (2, GROUPS, C) fp32; with STORE_G also writes g (the
    residual's gradient). HAS_DY2: the output's gradient comes in two parts (its two outputs), dy = dy + dy2
    as it is loaded (_load_dy; SECOND_STRIDE: y2 is y[:, :, ::S, ::S]). The last program of the channel block
    to finish merges the partials (_merge_grads). PAIR: g is also the output gradient of the batch norm of
    res_x (statistics res_stats) whose output was this layer's residual (batch_norm_pair): sum(g * (res_x -
    mean_r)) is summed as well (a third partial row), and the merge writes that batch norm's coefficients and
    dweight, dbias too. PDL: once its tiles are summed, a program lets the dx kernel (a programmatic dependent
    launch) start."""
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    if PAIR:
        shift_r, offset_r, scale_r, beta_r = _channel_stats(res_stats_ptr, C, cols, cmask)
    acc_g = tl.zeros((ACC_ROWS, BLOCK_C), dtype=tl.float32)
    acc_gx = tl.zeros((ACC_ROWS, BLOCK_C), dtype=tl.float32)
    acc_gxr = tl.zeros((ACC_ROWS, BLOCK_C), dtype=tl.float32)
    for k in range(0, _group_tiles(group, TILES, GROUPS)):
        t = _group_tile(group, k, TILES, GROUPS)
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        offs = base + in_tile
        dy = _load_dy(dy_ptr, dy2_ptr, offs, mask, t, TILES_PER_SAMPLE, HW, C, cols, cmask, IMG_H, IMG_W, HAS_DY2,
                      SECOND_STRIDE, BLOCK_M)
        xc = tl.where(mask, _centered(tl.load(x_ptr + offs, mask=mask, other=0.0), shift, offset), 0.0)
        g = _masked_grad(dy, xc, bits_ptr, t, TILES_PER_SAMPLE, HW, C, scale, beta, RELU, MASK_FROM_BITS,
                         BLOCK_M, BLOCK_C)
        if STORE_G:
            tl.store(g_ptr + offs, g.to(g_ptr.dtype.element_ty), mask=mask)
        acc_g += _fold_rows(g, ACC_ROWS)
        acc_gx += _fold_rows(g * xc, ACC_ROWS)
        if PAIR:
            xr = tl.where(mask, _centered(tl.load(res_x_ptr + offs, mask=mask, other=0.0), shift_r, offset_r), 0.0)
            acc_gxr += _fold_rows(g * xr, ACC_ROWS)
    if PDL:
        gdc_launch_dependents()
    out = part_ptr + group * C + cols
    tl.store(out, tl.sum(acc_g, axis=0), mask=cmask)
    tl.store(out + GROUPS * C, tl.sum(acc_gx, axis=0), mask=cmask)
    if PAIR:
        tl.store(out + 2 * GROUPS * C, tl.sum(acc_gxr, axis=0), mask=cmask)
    if last_arrival(count_ptr, GROUPS):
        _merge_grads(part_ptr, stats_ptr, coef_ptr, dwb_ptr, cols, cmask, C, GROUPS, M, 1, BLOCK_G, BLOCK_C)
        if PAIR:
            _merge_grads(part_ptr, res_stats_ptr, res_coef_ptr, res_dwb_ptr, cols, cmask, C, GROUPS, M, 2, BLOCK_G,
                         BLOCK_C)


@triton.jit
def _merge_grads(part_ptr, stats_ptr, coef_ptr, dwb_ptr, cols, cmask, C, GROUPS, M, GX_ROW,
                 BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr):
    """Sum the GROUPS partials of channels ``cols`` in a fixed order; dweight = rstd * sum g (x - mean) (the
    partials' row GX_ROW), dbias = sum g (row 0) -> dwb (2, C) fp32; dx coefficients k, c (see batchnorm.py's
    docstring) -> coef (2, C)."""
    gs = tl.arange(0, BLOCK_G)
    acc_g = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    acc_gx = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        m = ((g0 + gs) < GROUPS)[:, None] & cmask[None, :]
        p = part_ptr + (g0 + gs)[:, None] * C + cols[None, :]
        acc_g += tl.load(p, mask=m, other=0.0, cache_modifier=".cg")
        acc_gx += tl.load(p + GX_ROW * GROUPS * C, mask=m, other=0.0, cache_modifier=".cg")
    rstd = tl.load(stats_ptr + 2 * C + cols, mask=cmask, other=0.0)
    scale = tl.load(stats_ptr + 3 * C + cols, mask=cmask, other=0.0)
    dbias = tl.sum(acc_g, axis=0)
    dweight = tl.sum(acc_gx, axis=0) * rstd
    Mf = tl.cast(M, tl.float32)  # not M.to(): torch.compile's analysis passes M as an int
    tl.store(dwb_ptr + cols, dweight, mask=cmask)
    tl.store(dwb_ptr + C + cols, dbias, mask=cmask)
    tl.store(coef_ptr + cols, scale * rstd * dweight / Mf, mask=cmask)
    tl.store(coef_ptr + C + cols, scale * dbias / Mf, mask=cmask)


@triton.jit
def _bn_bwd_dx_kernel(
    dy_ptr, dy2_ptr, g_ptr, x_ptr, bits_ptr, dx_ptr, stats_ptr, coef_ptr, C, HW, stride_n, stride_hw, stride_c,
    TILES_PER_SAMPLE, IMG_H, IMG_W, res_x_ptr, res_stats_ptr, res_coef_ptr, res_dx_ptr,
    RELU: tl.constexpr, MASK_FROM_BITS: tl.constexpr, LOAD_G: tl.constexpr, HAS_DY2: tl.constexpr,
    SECOND_STRIDE: tl.constexpr, PAIR: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Program (tile, channel block): dx = scale * g - k * (x - mean) - c, with g read back (LOAD_G: the
    reduce kernel stored it) or formed from dy (+ dy2) and the relu mask. PDL: launched as a programmatic
    dependent of the reduce kernel, which may still run; the program reads what was written before that
    kernel started (x, dy, the forward's statistics and relu bits), then waits for it to end (gdc_wait)
    before it reads the coefficients (and g) and stores dx. PAIR (see the reduce kernel): also the input gradient
    of the batch norm of res_x, res_dx = scale_r * g - k_r * (res_x - mean_r) - c_r, from the same g."""
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    base, pmask = _tile(tl.program_id(0), TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
    mask = pmask[:, None] & cmask[None, :]
    offs = base + tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    xc = _centered(tl.load(x_ptr + offs, mask=mask, other=0.0), shift, offset)
    if PAIR:
        shift_r, offset_r, scale_r, beta_r = _channel_stats(res_stats_ptr, C, cols, cmask)
        xr = _centered(tl.load(res_x_ptr + offs, mask=mask, other=0.0), shift_r, offset_r)
    if not LOAD_G:
        dy = _load_dy(dy_ptr, dy2_ptr, offs, mask, tl.program_id(0), TILES_PER_SAMPLE, HW, C, cols, cmask, IMG_H,
                      IMG_W, HAS_DY2, SECOND_STRIDE, BLOCK_M)
        g = _masked_grad(dy, xc, bits_ptr, tl.program_id(0), TILES_PER_SAMPLE, HW, C, scale, beta, RELU,
                         MASK_FROM_BITS, BLOCK_M, BLOCK_C)
    if PDL:
        gdc_wait()
    if LOAD_G:
        g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    k = tl.load(coef_ptr + cols, mask=cmask, other=0.0)
    c = tl.load(coef_ptr + C + cols, mask=cmask, other=0.0)
    dx = scale[None, :] * g - k[None, :] * xc - c[None, :]
    tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    if PAIR:
        k = tl.load(res_coef_ptr + cols, mask=cmask, other=0.0)
        c = tl.load(res_coef_ptr + C + cols, mask=cmask, other=0.0)
        dx = scale_r[None, :] * g - k[None, :] * xr - c[None, :]
        tl.store(res_dx_ptr + offs, dx.to(res_dx_ptr.dtype.element_ty), mask=mask)
