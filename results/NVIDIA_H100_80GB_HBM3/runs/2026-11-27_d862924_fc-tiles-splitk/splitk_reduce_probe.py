"""fc1 (512 x 8704 -> 1024, bf16, + bias, ReLU) as a TMA split-K GEMM whose last-arriving program of each C tile
sums the tile's fp32 partials in a fixed order (deterministic) and runs the epilogue: one launch, no reduction
kernel. Timed partial-only (no reduction: what the GEMM part costs) and whole, against cuBLAS + relu and the
tuned 64 x 64 x 128 plan, replayed from CUDA graphs (so the per-tile counters must reset themselves)."""
import json, os, statistics, sys
sys.path.insert(0, ".")
import torch
import triton
import triton.language as tl
from torch.nn import functional
from triton_kernels.runtime import cuda_time_ms
from triton_kernels.gemm import _ensure_allocator
from triton_kernels.gemm_kernels import _gemm_tma_kernel, _tile_coords
from triton_kernels.graphs import capture_graph
OUT = os.environ.get("OUT", "/tmp")


@triton.jit
def splitk_kernel(a_ptr, w_ptr, c_ptr, bias_ptr, part_ptr, count_ptr, M, N, K, K_PER_SPLIT,
                  SPLIT: tl.constexpr, REDUCE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tile = pid // SPLIT
    s = pid % SPLIT
    pid_m, pid_n = _tile_coords(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k0 = s * K_PER_SPLIT
    for k in range(k0, tl.minimum(k0 + K_PER_SPLIT, K), BLOCK_K):
        acc = tl.dot(a_desc.load([off_m, k]), w_desc.load([off_n, k]).T, acc)
    rows = off_m + tl.arange(0, BLOCK_M)
    cols = off_n + tl.arange(0, BLOCK_N)
    tile_part = part_ptr + tile * (SPLIT * BLOCK_M * BLOCK_N) + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(tile_part + s * (BLOCK_M * BLOCK_N), acc)
    if REDUCE:
        tl.debug_barrier()  # every thread's partial stores issued before the arrival (CTA scope) ...
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")  # ... released at GPU scope
        if arrived == SPLIT - 1:
            tl.debug_barrier()
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for j in tl.static_range(SPLIT):  # fixed order: the same sum whichever program came last
                total += tl.load(tile_part + j * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
            total += tl.load(bias_ptr + cols).to(tl.float32)[None, :]
            total = tl.where(total < 0.0, 0.0, total)
            tl.store(c_ptr + rows[:, None] * N + cols[None, :], total.to(c_ptr.dtype.element_ty))
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next launch


def med(fn, reps=200):
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(fn, warmup=3, rep=reps, flush_l2=True)
    return statistics.median(ts) * 1e3


_ensure_allocator()
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for name, (M, K, N) in (("fc1", (512, 8704, 1024)), ("fc2", (512, 1024, 1024))):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16, generator=g)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=g) / K ** 0.5
    b = torch.randn(N, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = torch.relu(functional.linear(x.double(), w.double(), b.double()))
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    graph, _ = capture_graph(lambda: torch.relu(functional.linear(x, w, b)), warmup=3)
    cub = med(graph.replay)
    progs = min(8 * 16, SMS)
    def prod():
        _gemm_tma_kernel[(progs,)](a_ptr=x, b_ptr=w, c_ptr=c, bias_ptr=b, res_ptr=c, z_ptr=c, M=M, N=N, K=K,
                                   NUM_PROGS=progs, stride_a=K, stride_b=K, stride_cm=N, stride_cn=1, stride_bias=1,
                                   stride_rm=0, stride_rn=0, stride_zm=0, stride_zn=0, A_T=False, B_T=True,
                                   HAS_BIAS=True, HAS_RES=False, SAVE_Z=False, ACT="relu", PRECISION="ieee",
                                   INDEX_64=False, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, PDL=False,
                                   num_warps=4, num_stages=6)
    pg, _ = capture_graph(prod, warmup=2)
    base = med(pg.replay)
    print(f"{name}: cuBLAS + relu {cub:.2f} us, tuned 64x64x128 plan {base:.2f} us ({cub / base:.3f}x)", flush=True)
    rows.append(dict(case=name, what="cublas", us=cub)); rows.append(dict(case=name, what="plan", us=base))
    for bm, bn, bk, split, warps, stages in [(128, 128, 64, 4, 4, 4), (128, 128, 64, 4, 8, 4), (128, 128, 64, 4, 4, 6),
                                             (128, 128, 64, 4, 8, 6), (128, 128, 128, 4, 8, 3), (128, 128, 128, 4, 4, 3),
                                             (64, 128, 128, 2, 4, 4), (128, 64, 128, 2, 4, 4), (64, 128, 64, 2, 4, 6),
                                             (64, 64, 128, 2, 4, 4), (64, 64, 128, 2, 4, 3), (128, 128, 64, 2, 8, 4),
                                             (128, 256, 64, 8, 8, 3), (128, 256, 64, 4, 8, 3)]:
        tiles = (M // bm) * (N // bn)
        kps = triton.cdiv(triton.cdiv(K, bk), split) * bk
        part = torch.empty(tiles * split * bm * bn, device="cuda", dtype=torch.float32)
        count = torch.zeros(tiles, device="cuda", dtype=torch.int32)
        for reduce in (False, True):
            def call():
                splitk_kernel[(tiles * split,)](x, w, c, b, part, count, M, N, K, kps, SPLIT=split, REDUCE=reduce,
                                                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps,
                                                num_stages=stages)
            try:
                c.fill_(float("nan")); call(); torch.cuda.synchronize()
                g2, _ = capture_graph(call, warmup=2)
                us = med(g2.replay)
                if reduce:
                    c.fill_(float("nan")); g2.replay(); torch.cuda.synchronize()
                    first = c.clone(); g2.replay(); g2.replay(); torch.cuda.synchronize()
                    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
                    same = bool(torch.equal(first, c)) and int(count.sum()) == 0
                else:
                    err, same = None, None
            except Exception as e:
                print("  ", (bm, bn, bk, split, warps, stages, reduce), "failed:", str(e).splitlines()[0][:100], flush=True)
                continue
            rows.append(dict(case=name, what="splitk", cfg=(bm, bn, bk, split, warps, stages), reduce=reduce, us=us, err=err, same=same))
            print(f"  {(bm, bn, bk, split, warps, stages)} {'whole' if reduce else 'partials only'}: {us:6.2f} us "
                  f"{cub / us:.3f}x" + (f"  err {err:.1e} repeat-equal {same}" if reduce else ""), flush=True)
json.dump(rows, open(os.path.join(OUT, "splitk_reduce_probe.json"), "w"), indent=1)
