"""Experiment (issue 18): the BN reductions with the next tile's loads issued before the current tile is summed
(register prefetch), and with the merge reading more groups per step (BLOCK_G), at ResNet-18's four CIFAR shapes
(batch 512, bf16, channels_last). CUDA-graph replay of one launch after a 256 MB read flush; µs and GB/s of the
bytes the kernel must read. Also checks each variant's outputs against the production kernel's."""
import os, statistics, sys, time
import torch
import triton
import triton.language as tl
sys.path.insert(0, ".")
from triton_kernels import batchnorm as bn
from triton_kernels.batchnorm_kernels import (_bn_stats_kernel, _bn_bwd_reduce_kernel, _tile, _last_arrival, _merge_stats,
                                              _merge_grads, _channel_stats, _centered, _masked_grad)
from triton_kernels.runtime import Config, capture_graph, next_power_of_2

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
DT = torch.bfloat16 if dev.type == "cuda" else torch.float32
SHAPES = [(512, 64, 32, 32), (512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)] if dev.type == "cuda" else [(8, 8, 6, 6)]


@triton.jit
def _stats_pf(
    x_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c, TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS,
    count_ptr, w_ptr, b_ptr, stats_ptr, rmean_ptr, rvar_ptr, rmean_out_ptr, rvar_out_ptr, M, eps, momentum,
    HAS_W: tl.constexpr, HAS_B: tl.constexpr, UPDATE_RUNNING: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr,
):
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
    base, pmask = _tile(t_start, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
    mask = pmask[:, None] & cmask[None, :]
    x_next = tl.load(x_ptr + base + in_tile, mask=mask, other=0.0)
    for t in range(t_start, t_end):
        x = x_next
        cur_mask = mask
        cur_p = pmask
        base, pmask = _tile(t + 1, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        pmask = pmask & ((tl.arange(0, BLOCK_M) * 0 + t + 1) < t_end)
        mask = pmask[:, None] & cmask[None, :]
        x_next = tl.load(x_ptr + base + in_tile, mask=mask, other=0.0)
        d = tl.where(cur_mask, x.to(tl.float32) - shift[None, :], 0.0)
        acc1 += d
        acc2 += d * d
        count += cur_p.to(tl.float32)
    n = tl.sum(count, axis=0)
    s1 = tl.sum(acc1, axis=0)
    s2 = tl.sum(acc2, axis=0)
    out = part_ptr + group * C + cols
    tl.store(out, tl.zeros((BLOCK_C,), dtype=tl.float32) + n, mask=cmask)
    tl.store(out + GROUPS * C, s1 / n, mask=cmask)
    tl.store(out + 2 * GROUPS * C, tl.maximum(s2 - s1 * (s1 / n), 0.0), mask=cmask)
    if _last_arrival(count_ptr, GROUPS):
        _merge_stats(part_ptr, shift, w_ptr, b_ptr, stats_ptr, rmean_ptr, rvar_ptr, rmean_out_ptr, rvar_out_ptr,
                     cols, cmask, C, GROUPS, M, eps, momentum, HAS_W, HAS_B, UPDATE_RUNNING, BLOCK_G, BLOCK_C)


@triton.jit
def _reduce_pf(
    dy_ptr, x_ptr, y_ptr, g_ptr, stats_ptr, part_ptr, C, HW, stride_n, stride_hw, stride_c,
    TILES_PER_SAMPLE, TILES, TILES_PER_GROUP, GROUPS, count_ptr, coef_ptr, dwb_ptr, M,
    RELU: tl.constexpr, MASK_FROM_Y: tl.constexpr, STORE_G: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr,
):
    group = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    in_tile = tl.arange(0, BLOCK_M)[:, None] * stride_hw + cols[None, :] * stride_c
    shift, offset, scale, beta = _channel_stats(stats_ptr, C, cols, cmask)
    acc_g = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    acc_gx = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    t_start = group * TILES_PER_GROUP
    t_end = tl.minimum(t_start + TILES_PER_GROUP, TILES)
    base, pmask = _tile(t_start, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
    mask = pmask[:, None] & cmask[None, :]
    offs = base + in_tile
    dy_next = tl.load(dy_ptr + offs, mask=mask, other=0.0)
    x_next = tl.load(x_ptr + offs, mask=mask, other=0.0)
    for t in range(t_start, t_end):
        dy_raw = dy_next
        x_raw = x_next
        cur_mask = mask
        cur_offs = offs
        base, pmask = _tile(t + 1, TILES_PER_SAMPLE, HW, stride_n, stride_hw, BLOCK_M)
        mask = (pmask & ((tl.arange(0, BLOCK_M) * 0 + t + 1) < t_end))[:, None] & cmask[None, :]
        offs = base + in_tile
        dy_next = tl.load(dy_ptr + offs, mask=mask, other=0.0)
        x_next = tl.load(x_ptr + offs, mask=mask, other=0.0)
        xc = tl.where(cur_mask, _centered(x_raw, shift, offset), 0.0)
        g = _masked_grad(dy_raw.to(tl.float32), xc, y_ptr, cur_offs, cur_mask, scale, beta, RELU, MASK_FROM_Y)
        if STORE_G:
            tl.store(g_ptr + cur_offs, g.to(g_ptr.dtype.element_ty), mask=cur_mask)
        acc_g += g
        acc_gx += g * xc
    out = part_ptr + group * C + cols
    tl.store(out, tl.sum(acc_g, axis=0), mask=cmask)
    tl.store(out + GROUPS * C, tl.sum(acc_gx, axis=0), mask=cmask)
    if _last_arrival(count_ptr, GROUPS):
        _merge_grads(part_ptr, stats_ptr, coef_ptr, dwb_ptr, cols, cmask, C, GROUPS, M, BLOCK_G, BLOCK_C)


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


def configs(C, tuned_cfg):
    bc = min(next_power_of_2(C), 128)
    out = [tuned_cfg]
    for elems in (8192, 16384):
        for per_sm, w in ((1, 8), (2, 4), (2, 8)):
            cfg = Config({"BLOCK_M": max(1, elems // bc), "BLOCK_C": bc, "PER_SM": per_sm}, w, 1)
            if cfg.kwargs != tuned_cfg.kwargs or cfg.num_warps != tuned_cfg.num_warps:
                out.append(cfg)
    if dev.type != "cuda":
        return [Config({"BLOCK_M": 4, "BLOCK_C": bc, "PER_SM": 1}, 4, 1), Config({"BLOCK_M": 16, "BLOCK_C": bc, "PER_SM": 1}, 4, 1)]
    return out


t0 = time.time()
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
    flags_s = bn._stats_flags(True, True, True)
    flags_r = bn._reduce_flags(True, False, False)

    def launcher(name, plan, outs):
        part = torch.empty((plan.rows, plan.groups, C), device=dev, dtype=torch.float32)
        cnt = torch.zeros(max(plan.grid[1], 256), device=dev, dtype=torch.int32)
        if name == "stats":
            st, rm2, rv2 = outs
            return lambda: plan.kernel.launch(plan.grid, xp, part, C, geo.HW, *geo.strides, *plan.scalars, cnt, w, b,
                                              st, rm, rv, rm2, rv2, geo.M, 1e-5, 0.1)
        coef, dwb = outs
        return lambda: plan.kernel.launch(plan.grid, dy, xp, xp, dy, stats, part, C, geo.HW, *geo.strides,
                                          *plan.scalars, cnt, coef, dwb, geo.M)

    def new_outs(name):
        if name == "stats":
            return (torch.full((5, C), float("nan"), device=dev), torch.full((C,), float("nan"), device=dev),
                    torch.full((C,), float("nan"), device=dev))
        return torch.full((2, C), float("nan"), device=dev), torch.full((2, C), float("nan"), device=dev)

    for name, base_k, pf_k, flags, read in (("stats", _bn_stats_kernel, _stats_pf, flags_s, nbytes),
                                            ("bwd_reduce", _bn_bwd_reduce_kernel, _reduce_pf, flags_r, 2 * nbytes)):
        tuned = bn._PLANS[bn.plan_key(name, geo, DT, flags, x.device)]
        ref_outs = new_outs(name)
        t_tuned = timed(launcher(name, tuned, ref_outs))
        tuned_cfg = None
        # recover the tuned config from the bound kernel
        kw = dict(tuned.kernel.constexprs) if hasattr(tuned.kernel, "constexprs") else {}
        print(f"=== {shape} {name}: tuned {t_tuned:.2f} us = {read / t_tuned / 1e3:.0f} GB/s grid {tuned.grid} {kw}",
              flush=True)
        bc = min(next_power_of_2(C), 128)
        rows = []
        for cfg in configs(C, Config({"BLOCK_M": 8192 // bc, "BLOCK_C": bc, "PER_SM": 2}, 4, 1)):
            for merge_g in (32, 128):
                for variant, kern in (("base", base_k), ("prefetch", pf_k)):
                    if time.time() - t0 > float(os.environ.get("BUDGET", "420")):
                        break
                    if merge_g != 32 and variant == "base":
                        continue
                    try:
                        bn._MERGE_BLOCK_G = merge_g
                        plan = bn._make_plan(name, kern, geo, cfg, flags, x.device)
                        outs = new_outs(name)
                        t = timed(launcher(name, plan, outs))
                        err = max(float(((a - r).abs() / (r.abs() + 1e-3)).max()) for a, r in zip(outs, ref_outs))
                        rows.append((t, variant, merge_g, cfg, plan.grid, err))
                    except Exception as e:
                        print(f"  failed {variant} {cfg}: {type(e).__name__} {str(e)[:200]}", flush=True)
                    finally:
                        bn._MERGE_BLOCK_G = 32
        for t, variant, merge_g, cfg, grid, err in sorted(rows, key=lambda r: r[0])[:8]:
            print(f"  {t:7.2f} us {read / t / 1e3:5.0f} GB/s {t_tuned / t:.2f}x tuned  {variant:8s} merge_g {merge_g:3d} "
                  f"{cfg.kwargs} w{cfg.num_warps} grid {grid} rel.err vs tuned {err:.1e}", flush=True)
        best_base = min((r for r in rows if r[1] == "base"), key=lambda r: r[0], default=None)
        best_pf = min((r for r in rows if r[1] == "prefetch"), key=lambda r: r[0], default=None)
        if best_base and best_pf:
            print(f"  best base {best_base[0]:.2f} us, best prefetch {best_pf[0]:.2f} us ({best_base[0] / best_pf[0]:.2f}x)",
                  flush=True)
