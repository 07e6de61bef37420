"""Experiment (issue 18): the batch-norm reduction kernels (statistics; backward sums) at ResNet-18's four
CIFAR shapes (batch 512, bf16, channels_last): the tuned plan against forced tilings with more programs per SM,
larger tiles and deeper pipelining. CUDA-graph replays of one launch, L2 flushed before each: GB/s of the bytes
the kernel must read (x: stats; dy and x: backward) against the DRAM ceiling."""
import os, statistics, sys, time
import torch
sys.path.insert(0, ".")
from triton_kernels import batchnorm as bn
from triton_kernels.batchnorm_kernels import _bn_stats_kernel, _bn_bwd_reduce_kernel
from triton_kernels.runtime import Config, capture_graph, cuda_time_ms, next_power_of_2

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
DT = torch.bfloat16 if dev.type == "cuda" else torch.float32
SHAPES = [(512, 64, 32, 32), (512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)][:2 if os.environ.get("PER_SM_SCAN") else 4] if dev.type == "cuda" \
    else [(4, 8, 4, 4)]
t0 = time.time()


_READ_FLUSH = None


def timed(fn):
    """µs per replay, median of 40. The harness's flush writes 256 MB (dirty L2 lines are written back while the
    kernel runs); READ_FLUSH=1 flushes by reading 256 MB instead, which leaves the L2 clean."""
    global _READ_FLUSH
    if dev.type != "cuda":
        fn()
        return float("nan")
    graph, _ = capture_graph(fn)
    if not os.environ.get("READ_FLUSH"):
        return statistics.median(cuda_time_ms(graph.replay, warmup=5, rep=40, flush_l2=True)) * 1e3
    if _READ_FLUSH is None:
        _READ_FLUSH = torch.ones(64 * 1024 * 1024, device=dev)  # 256 MB of fp32
    out = []
    for _ in range(45):
        _READ_FLUSH.sum()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        out.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(out[5:])


def configs(C):
    bc = min(next_power_of_2(C), 128)
    if os.environ.get("PER_SM_SCAN"):  # one tile, programs per SM 1..32: the merge's cost against the group count
        return [Config({"BLOCK_M": 8192 // bc, "BLOCK_C": bc, "PER_SM": p}, 8 if bc == 64 else 4, 1)
                for p in (1, 2, 4, 8, 16, 32)]
    out = []
    for elems in (4096, 8192):
        for per_sm in (2, 4, 8, 16):
            for w, st in ((4, 1), (8, 1), (4, 3), (8, 3), (4, 4)):
                out.append(Config({"BLOCK_M": max(1, elems // bc), "BLOCK_C": bc, "PER_SM": per_sm}, w, st))
    return out if dev.type == "cuda" else out[:2]


for shape in SHAPES:
    N, C, H, W = shape
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(shape, device=dev, generator=g).to(DT).contiguous(memory_format=torch.channels_last)
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
    coef = torch.empty((2, C), device=dev)
    dwb = torch.empty((2, C), device=dev)
    tail_s = (w, b, stats.clone(), rm, rv, rm, rv, geo.M, 1e-5, 0.1)

    def launcher(name, plan):
        part = torch.empty((plan.rows, plan.groups, C), device=dev, dtype=torch.float32)
        cnt = torch.zeros(max(plan.grid[1], 256), device=dev, dtype=torch.int32)
        if name == "stats":
            return lambda: plan.kernel.launch(plan.grid, xp, part, C, geo.HW, *geo.strides, *plan.scalars, cnt, *tail_s)
        return lambda: plan.kernel.launch(plan.grid, dy, xp, xp, dy, stats, part, C, geo.HW, *geo.strides,
                                          *plan.scalars, cnt, coef, dwb, geo.M)

    for name, kernel, flags, read in (("stats", _bn_stats_kernel, flags_s, nbytes),
                                      ("bwd_reduce", _bn_bwd_reduce_kernel, flags_r, 2 * nbytes)):
        tuned = bn._PLANS[bn.plan_key(name, geo, DT, flags, x.device)]
        t_tuned = timed(launcher(name, tuned))
        print(f"=== {shape} {name}: tuned {t_tuned:.2f} us = {read / t_tuned / 1e3:.0f} GB/s "
              f"(grid {tuned.grid}, {tuned.kernel.constexprs if hasattr(tuned.kernel, 'constexprs') else ''})",
              flush=True)
        rows = []
        for cfg in configs(C):
            if time.time() - t0 > 420:
                print("time budget reached", flush=True)
                break
            try:
                plan = bn._make_plan(name, kernel, geo, cfg, flags, x.device)
                t = timed(launcher(name, plan))
                rows.append((t, cfg, plan.grid))
            except Exception as e:
                print(f"  failed {cfg}: {type(e).__name__} {str(e)[:120]}", flush=True)
        for t, cfg, grid in (rows if os.environ.get("PER_SM_SCAN") else sorted(rows, key=lambda r: r[0])[:6]):
            print(f"  {t:7.2f} us  {read / t / 1e3:5.0f} GB/s  {t_tuned / t:.2f}x tuned  {cfg}  grid {grid}", flush=True)
