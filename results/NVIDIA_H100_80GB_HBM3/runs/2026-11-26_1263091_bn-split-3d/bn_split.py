"""Experiment (issue 18): the BN statistics and backward sums as a high-occupancy partial pass (no in-kernel merge, many
programs, few tiles each) plus a separate merge kernel over channel blocks, against the tuned one-launch kernels, at
ResNet-18's four CIFAR shapes (batch 512, bf16, channels_last). One CUDA graph per variant (both launches), 256 MB read
flush before each replay; µs and GB/s of the bytes the pass must read. Outputs checked against the production kernels."""
import os, statistics, sys, time
import torch
import triton
import triton.language as tl
sys.path.insert(0, ".")
from triton_kernels import batchnorm as bn
from triton_kernels.batchnorm_kernels import _tile, _channel_stats, _centered, _masked_grad
from triton_kernels.runtime import Config, capture_graph, next_power_of_2, num_sms

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
DT = torch.bfloat16 if dev.type == "cuda" else torch.float32
SHAPES = [(512, 64, 32, 32), (512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)] if dev.type == "cuda" else [(8, 8, 6, 6)]


@triton.jit
def _stats_part(x_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c, TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS,
                BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    t_start = group * TILES_PER_GROUP
    t_end = tl.minimum(t_start + TILES_PER_GROUP, TILES)
    shift = tl.load(x_ptr + cols * stride_c, mask=cmask, other=0.0).to(tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    count = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for t in range(t_start, t_end):
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        x = tl.load(x_ptr + base + in_tile, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift[None, :], 0.0)
        acc1 += d
        acc2 += d * d
        count += pmask.to(tl.float32)
    n = tl.sum(count, axis=0)
    s1 = tl.sum(acc1, axis=0)
    s2 = tl.sum(acc2, axis=0)
    out = part_ptr + group * C + cols
    tl.store(out, tl.zeros((BLOCK_C,), dtype=tl.float32) + n, mask=cmask)
    tl.store(out + GROUPS * C, s1 / n, mask=cmask)
    tl.store(out + 2 * GROUPS * C, tl.maximum(s2 - s1 * (s1 / n), 0.0), mask=cmask)


@triton.jit
def _stats_merge(x_ptr, part_ptr, w_ptr, b_ptr, stats_ptr, rmean_ptr, rvar_ptr, C, stride_c, GROUPS, M, eps, momentum,
                 BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    shift = tl.load(x_ptr + cols * stride_c, mask=cmask, other=0.0).to(tl.float32)
    gs = tl.arange(0, BLOCK_G)
    acc = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        m = ((g0 + gs) < GROUPS)[:, None] & cmask[None, :]
        p = part_ptr + (g0 + gs)[:, None] * C + cols[None, :]
        acc += tl.load(p, mask=m, other=0.0) * tl.load(p + GROUPS * C, mask=m, other=0.0)
    Mf = M.to(tl.float32)
    offset = tl.sum(acc, axis=0) / Mf
    acc = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        m = ((g0 + gs) < GROUPS)[:, None] & cmask[None, :]
        p = part_ptr + (g0 + gs)[:, None] * C + cols[None, :]
        d = tl.load(p + GROUPS * C, mask=m, other=0.0) - offset[None, :]
        acc += tl.load(p + 2 * GROUPS * C, mask=m, other=0.0) + tl.load(p, mask=m, other=0.0) * d * d
    m2 = tl.sum(acc, axis=0)
    rstd = 1.0 / tl.sqrt(m2 / Mf + eps)
    scale = rstd * tl.load(w_ptr + cols, mask=cmask, other=0.0)
    beta = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    tl.store(stats_ptr + cols, shift, mask=cmask)
    tl.store(stats_ptr + C + cols, offset, mask=cmask)
    tl.store(stats_ptr + 2 * C + cols, rstd, mask=cmask)
    tl.store(stats_ptr + 3 * C + cols, scale, mask=cmask)
    tl.store(stats_ptr + 4 * C + cols, beta, mask=cmask)
    rm = tl.load(rmean_ptr + cols, mask=cmask, other=0.0)
    rv = tl.load(rvar_ptr + cols, mask=cmask, other=0.0)
    tl.store(rmean_ptr + cols, momentum * (shift + offset) + (1.0 - momentum) * rm, mask=cmask)
    tl.store(rvar_ptr + cols, momentum * (m2 / (Mf - 1.0)) + (1.0 - momentum) * rv, mask=cmask)


@triton.jit
def _reduce_part(dy_ptr, x_ptr, stats_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c,
                 TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    acc_g = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    acc_gx = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    t_start = group * TILES_PER_GROUP
    for t in range(t_start, tl.minimum(t_start + TILES_PER_GROUP, TILES)):
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        offs = base + in_tile
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, _centered(tl.load(x_ptr + offs, mask=mask, other=0.0), shift, offset), 0.0)
        g = _masked_grad(dy, xc, x_ptr, offs, mask, scale, beta, True, False)
        acc_g += g
        acc_gx += g * xc
    out = part_ptr + group * C + cols
    tl.store(out, tl.sum(acc_g, axis=0), mask=cmask)
    tl.store(out + GROUPS * C, tl.sum(acc_gx, axis=0), mask=cmask)


@triton.jit
def _stats_part_r(x_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c, TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS,
                  BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """as _stats_part, but each tile is summed over its pixels at once: (BLOCK_C,) accumulators, few registers."""
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    t_start = group * TILES_PER_GROUP
    t_end = tl.minimum(t_start + TILES_PER_GROUP, TILES)
    shift = tl.load(x_ptr + cols * stride_c, mask=cmask, other=0.0).to(tl.float32)
    acc1 = tl.zeros((BLOCK_C,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_C,), dtype=tl.float32)
    count = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for t in range(t_start, t_end):
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        x = tl.load(x_ptr + base + in_tile, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift[None, :], 0.0)
        acc1 += tl.sum(d, axis=0)
        acc2 += tl.sum(d * d, axis=0)
        count += pmask.to(tl.float32)
    n = tl.sum(count, axis=0)
    out = part_ptr + group * C + cols
    tl.store(out, tl.zeros((BLOCK_C,), dtype=tl.float32) + n, mask=cmask)
    tl.store(out + GROUPS * C, acc1 / n, mask=cmask)
    tl.store(out + 2 * GROUPS * C, tl.maximum(acc2 - acc1 * (acc1 / n), 0.0), mask=cmask)


@triton.jit
def _reduce_part_r(dy_ptr, x_ptr, stats_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c,
                   TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    acc_g = tl.zeros((BLOCK_C,), dtype=tl.float32)
    acc_gx = tl.zeros((BLOCK_C,), dtype=tl.float32)
    t_start = group * TILES_PER_GROUP
    for t in range(t_start, tl.minimum(t_start + TILES_PER_GROUP, TILES)):
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        offs = base + in_tile
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, _centered(tl.load(x_ptr + offs, mask=mask, other=0.0), shift, offset), 0.0)
        g = _masked_grad(dy, xc, x_ptr, offs, mask, scale, beta, True, False)
        acc_g += tl.sum(g, axis=0)
        acc_gx += tl.sum(g * xc, axis=0)
    out = part_ptr + group * C + cols
    tl.store(out, acc_g, mask=cmask)
    tl.store(out + GROUPS * C, acc_gx, mask=cmask)


@triton.jit
def _stats_part_i(x_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c, TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS,
                  BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """as _stats_part, but group g reads tiles g, g + GROUPS, g + 2 GROUPS, ...: the programs running at one time
    read neighbouring tiles (a window sweeping through memory, as the elementwise kernels do)."""
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift = tl.load(x_ptr + cols * stride_c, mask=cmask, other=0.0).to(tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    count = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for t in range(group, TILES, GROUPS):
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        x = tl.load(x_ptr + base + in_tile, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift[None, :], 0.0)
        acc1 += d
        acc2 += d * d
        count += pmask.to(tl.float32)
    n = tl.sum(count, axis=0)
    s1 = tl.sum(acc1, axis=0)
    s2 = tl.sum(acc2, axis=0)
    out = part_ptr + group * C + cols
    tl.store(out, tl.zeros((BLOCK_C,), dtype=tl.float32) + n, mask=cmask)
    tl.store(out + GROUPS * C, s1 / n, mask=cmask)
    tl.store(out + 2 * GROUPS * C, tl.maximum(s2 - s1 * (s1 / n), 0.0), mask=cmask)


@triton.jit
def _reduce_part_i(dy_ptr, x_ptr, stats_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c,
                   TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    acc_g = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    acc_gx = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    for t in range(group, TILES, GROUPS):
        base, pmask = _tile(t, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = pmask[:, None] & cmask[None, :]
        offs = base + in_tile
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, _centered(tl.load(x_ptr + offs, mask=mask, other=0.0), shift, offset), 0.0)
        g = _masked_grad(dy, xc, x_ptr, offs, mask, scale, beta, True, False)
        acc_g += g
        acc_gx += g * xc
    out = part_ptr + group * C + cols
    tl.store(out, tl.sum(acc_g, axis=0), mask=cmask)
    tl.store(out + GROUPS * C, tl.sum(acc_gx, axis=0), mask=cmask)


@triton.jit
def _stats_part_w(x_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c, TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS,
                  BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, SPLIT: tl.constexpr):
    """as _stats_part, but the tile is (SPLIT, BLOCK_M // SPLIT, BLOCK_C) and each tile is summed over its middle axis at
    once: (SPLIT, BLOCK_C) accumulators instead of (BLOCK_M, BLOCK_C), so fewer registers and more programs per SM."""
    ROWS: tl.constexpr = BLOCK_M // SPLIT
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    pix = tl.arange(0, SPLIT)[:, None, None] * ROWS + tl.arange(0, ROWS)[None, :, None]
    in_tile = pix * stride_hw + cols[None, None, :] * stride_c
    t_start = group * TILES_PER_GROUP
    t_end = tl.minimum(t_start + TILES_PER_GROUP, TILES)
    shift = tl.load(x_ptr + cols * stride_c, mask=cmask, other=0.0).to(tl.float32)
    acc1 = tl.zeros((SPLIT, BLOCK_C), dtype=tl.float32)
    acc2 = tl.zeros((SPLIT, BLOCK_C), dtype=tl.float32)
    count = tl.zeros((SPLIT, 1), dtype=tl.float32)
    for t in range(t_start, t_end):
        n = t // TILES_PER_SAMPLE
        hw0 = (t - n * TILES_PER_SAMPLE) * BLOCK_M
        base = n.to(tl.int64) * stride_n + hw0.to(tl.int64) * stride_hw
        pmask = (hw0 + pix) < HW
        mask = pmask & cmask[None, None, :]
        x = tl.load(x_ptr + base + in_tile, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - shift[None, None, :], 0.0)
        acc1 += tl.sum(d, axis=1)
        acc2 += tl.sum(d * d, axis=1)
        count += tl.sum(pmask.to(tl.float32), axis=1)
    n_tot = tl.sum(tl.sum(count, axis=1), axis=0)
    s1 = tl.sum(acc1, axis=0)
    s2 = tl.sum(acc2, axis=0)
    out = part_ptr + group * C + cols
    tl.store(out, tl.zeros((BLOCK_C,), dtype=tl.float32) + n_tot, mask=cmask)
    tl.store(out + GROUPS * C, s1 / n_tot, mask=cmask)
    tl.store(out + 2 * GROUPS * C, tl.maximum(s2 - s1 * (s1 / n_tot), 0.0), mask=cmask)


@triton.jit
def _reduce_part_w(dy_ptr, x_ptr, stats_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c,
                   TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr,
                   SPLIT: tl.constexpr):
    ROWS: tl.constexpr = BLOCK_M // SPLIT
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    pix = tl.arange(0, SPLIT)[:, None, None] * ROWS + tl.arange(0, ROWS)[None, :, None]
    in_tile = pix * stride_hw + cols[None, None, :] * stride_c
    shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    acc_g = tl.zeros((SPLIT, BLOCK_C), dtype=tl.float32)
    acc_gx = tl.zeros((SPLIT, BLOCK_C), dtype=tl.float32)
    t_start = group * TILES_PER_GROUP
    for t in range(t_start, tl.minimum(t_start + TILES_PER_GROUP, TILES)):
        n = t // TILES_PER_SAMPLE
        hw0 = (t - n * TILES_PER_SAMPLE) * BLOCK_M
        base = n.to(tl.int64) * stride_n + hw0.to(tl.int64) * stride_hw
        mask = ((hw0 + pix) < HW) & cmask[None, None, :]
        offs = base + in_tile
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        xc = (tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32) - shift[None, None, :]) - offset[None, None, :]
        xc = tl.where(mask, xc, 0.0)
        pre = xc * scale[None, None, :] + beta[None, None, :]
        g = tl.where(pre <= 0.0, 0.0, dy)
        acc_g += tl.sum(g, axis=1)
        acc_gx += tl.sum(g * xc, axis=1)
    out = part_ptr + group * C + cols
    tl.store(out, tl.sum(acc_g, axis=0), mask=cmask)
    tl.store(out + GROUPS * C, tl.sum(acc_gx, axis=0), mask=cmask)


@triton.jit
def _reduce_merge(part_ptr, stats_ptr, coef_ptr, dwb_ptr, C, GROUPS, M, BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    gs = tl.arange(0, BLOCK_G)
    acc_g = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    acc_gx = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
    for g0 in range(0, GROUPS, BLOCK_G):
        m = ((g0 + gs) < GROUPS)[:, None] & cmask[None, :]
        p = part_ptr + (g0 + gs)[:, None] * C + cols[None, :]
        acc_g += tl.load(p, mask=m, other=0.0)
        acc_gx += tl.load(p + GROUPS * C, mask=m, other=0.0)
    rstd = tl.load(stats_ptr + 2 * C + cols, mask=cmask, other=0.0)
    scale = tl.load(stats_ptr + 3 * C + cols, mask=cmask, other=0.0)
    dbias = tl.sum(acc_g, axis=0)
    dweight = tl.sum(acc_gx, axis=0) * rstd
    Mf = M.to(tl.float32)
    tl.store(dwb_ptr + cols, dweight, mask=cmask)
    tl.store(dwb_ptr + C + cols, dbias, mask=cmask)
    tl.store(coef_ptr + cols, scale * rstd * dweight / Mf, mask=cmask)
    tl.store(coef_ptr + C + cols, scale * dbias / Mf, mask=cmask)


_FLUSH = None


def timed(fn):
    global _FLUSH
    if dev.type != "cuda":
        fn()
        return float("nan")
    graph, _ = capture_graph(fn)
    if _FLUSH is None:
        _FLUSH = torch.ones(64 * 1024 * 1024, device=dev)
    out = []
    for _ in range(45):
        _FLUSH.sum()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    return statistics.median(out[5:])


def rel(a, r):
    return float(((a - r).abs() / (r.abs() + 1e-3)).max())


# SWEEP=merge: contiguous runs of tiles, three merge widths; SWEEP=tile: also per-tile sums (few registers);
# SWEEP=interleaved: also the interleaved tile order
SWEEP = os.environ.get("SWEEP", "interleaved")  # or "split": the (SPLIT, rows, C) tiles
ELEMS = {"merge": (4096, 8192), "tile": (2048, 4096, 8192, 16384), "interleaved": (4096, 8192, 16384),
         "split": (8192, 16384, 32768)}[SWEEP]
PER_SM = {"merge": (2, 4, 8, 16), "tile": (2, 4, 8, 16, 32), "interleaved": (1, 2, 4, 8), "split": (2, 4, 8)}[SWEEP]
KINDS = ((4, "acc"), (8, "acc")) + (((4, SWEEP), (8, SWEEP)) if SWEEP not in ("merge", "split") else ())
if SWEEP == "split":
    KINDS = ((4, "acc"), (8, "acc"), (4, "split4"), (4, "split8"), (8, "split8"), (8, "split16"))
MERGES = ((8, 256), (16, 128), (32, 64)) if SWEEP == "merge" else ((8, 256),)
PART = {"acc": (_stats_part, _reduce_part), "tile": (_stats_part_r, _reduce_part_r), "interleaved": (_stats_part_i, _reduce_part_i)}
for _s in (4, 8, 16):
    PART[f"split{_s}"] = (_stats_part_w, _reduce_part_w)
t0 = time.time()
sms = num_sms(dev, default=2)
for shape in SHAPES:
    N, C, H, W = shape
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(shape, device=dev, generator=g).to(DT).contiguous(memory_format=torch.channels_last) * 2 + 0.5
    dy = torch.randn(shape, device=dev, generator=g).to(DT).contiguous(memory_format=torch.channels_last)
    w = torch.rand(C, device=dev) + 0.5
    b = torch.randn(C, device=dev)
    rm, rv = torch.zeros(C, device=dev), torch.ones(C, device=dev)
    y, stats, _ = bn.batch_norm_train_forward(x, w, b, None, rm, rv, 0.1, 1e-5, True, True)  # tunes the plans
    bn.batch_norm_train_backward(dy, x, None, stats, True, True, False)
    (xp,), fmt, geo = bn._prepare(x)
    nbytes = x.numel() * x.element_size()
    # production kernels (tuned plans)
    ref_stats, rm0, rv0 = torch.empty((5, C), device=dev), torch.zeros(C, device=dev), torch.ones(C, device=dev)
    sp = bn._PLANS[bn.plan_key("stats", geo, DT, bn._stats_flags(True, True, True), x.device)]
    part_s = torch.empty((3, sp.groups, C), device=dev)
    cnt = torch.zeros(1024, device=dev, dtype=torch.int32)
    t_s = timed(lambda: sp.kernel.launch(sp.grid, xp, part_s, C, geo.HW, *geo.strides, *sp.scalars, cnt, w, b, ref_stats,
                                         rm0, rv0, rm0, rv0, geo.M, 1e-5, 0.1))
    rp = bn._PLANS[bn.plan_key("bwd_reduce", geo, DT, bn._reduce_flags(True, False, False), x.device)]
    part_r = torch.empty((2, rp.groups, C), device=dev)
    ref_coef, ref_dwb = torch.empty((2, C), device=dev), torch.empty((2, C), device=dev)
    t_r = timed(lambda: rp.kernel.launch(rp.grid, dy, xp, xp, dy, stats, part_r, C, geo.HW, *geo.strides, *rp.scalars,
                                         cnt, ref_coef, ref_dwb, geo.M))
    print(f"=== {shape}: tuned stats {t_s:.2f} us ({nbytes / t_s / 1e3:.0f} GB/s), backward sums {t_r:.2f} us "
          f"({2 * nbytes / t_r / 1e3:.0f} GB/s)", flush=True)
    bc = min(next_power_of_2(C), 128)
    rows_s, rows_r = [], []
    for elems in ELEMS if dev.type == "cuda" else (64,):
        bm = max(1, elems // bc)
        per_sample, tiles = geo.tiles(bm)
        cblocks = -(-C // bc)
        for per_sm in PER_SM if dev.type == "cuda" else (1, 10 ** 6):
            for warps, kind in KINDS:
                if time.time() - t0 > float(os.environ.get("BUDGET", "400")):
                    break
                want = max(1, min(tiles, -(-per_sm * sms // cblocks)))
                per_group = -(-tiles // want)
                groups = -(-tiles // per_group)
                part = torch.empty((3 * groups * C,), device=dev)
                split_kw = {"SPLIT": int(kind[5:])} if kind.startswith("split") else {}
                if split_kw and bm % split_kw["SPLIT"]:
                    continue
                for merge_bc, merge_g in MERGES:
                    st, rm1, rv1 = torch.full((5, C), float("nan"), device=dev), torch.zeros(C, device=dev), torch.ones(C, device=dev)

                    def run_s():
                        PART[kind][0][(groups, cblocks)](xp, part, C, geo.HW, *geo.strides, per_sample, tiles, per_group,
                                                       groups, BLOCK_M=bm, BLOCK_C=bc, num_warps=warps, **split_kw)
                        _stats_merge[(-(-C // merge_bc),)](xp, part, w, b, st, rm1, rv1, C, geo.strides[2], groups,
                                                           geo.M, 1e-5, 0.1, BLOCK_G=merge_g, BLOCK_C=merge_bc, num_warps=4)
                    t = timed(run_s)
                    rows_s.append((t, bm, per_sm, warps, groups, rel(st, ref_stats), f"{kind}, merge {merge_bc} channels"))
                    coef, dwb = torch.full((2, C), float("nan"), device=dev), torch.full((2, C), float("nan"), device=dev)

                    def run_r():
                        PART[kind][1][(groups, cblocks)](dy, xp, stats, part, C, geo.HW, *geo.strides, per_sample, tiles,
                                                        per_group, groups, BLOCK_M=bm, BLOCK_C=bc, num_warps=warps, **split_kw)
                        _reduce_merge[(-(-C // merge_bc),)](part, stats, coef, dwb, C, groups, geo.M, BLOCK_G=merge_g,
                                                            BLOCK_C=merge_bc, num_warps=4)
                    t = timed(run_r)
                    rows_r.append((t, bm, per_sm, warps, groups, max(rel(coef, ref_coef), rel(dwb, ref_dwb)), f"{kind}, merge {merge_bc} channels"))
    for name, rows, ref, read in (("stats", rows_s, t_s, nbytes), ("bwd sums", rows_r, t_r, 2 * nbytes)):
        for t, bm, per_sm, warps, groups, err, mbc in sorted(rows, key=lambda r: r[0])[:6]:
            print(f"  {name:8s} split {t:7.2f} us {read / t / 1e3:5.0f} GB/s {ref / t:.2f}x tuned  BLOCK_M {bm} per_sm {per_sm} "
                  f"w{warps} groups {groups} variant {mbc}  rel.err {err:.1e}", flush=True)
