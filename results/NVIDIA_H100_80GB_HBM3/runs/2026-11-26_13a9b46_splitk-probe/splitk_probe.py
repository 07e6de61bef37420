"""Experiment (issue 22): Char-CNN fc1 (512 x 8704 -> 1024, bf16, Linear+ReLU) replayed from CUDA graphs:
cuBLAS, the tuned Triton plan, and split-K with TMA loads (bigger tiles, fewer L2 reads of A and B) + the
production reduce kernel. Also fc2 (512 x 1024 -> 1024)."""
import statistics, sys
import torch, triton, triton.language as tl
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.gemm_kernels import _tile_coords, _gemm_splitk_reduce_kernel
from triton_kernels.runtime import Config, capture_graph, cuda_time_ms


@triton.jit
def tma_splitk_partial(a_ptr, b_ptr, part_ptr, M, N, K, K_PER_SPLIT, stride_a, stride_b,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_b, 1], block_shape=[BLOCK_N, BLOCK_K])
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    k_start = tl.program_id(1) * K_PER_SPLIT
    k_stop = tl.minimum(K, k_start + K_PER_SPLIT)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_start, k_stop, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([pid_n * BLOCK_N, k]).T
        acc = tl.dot(a, b, acc)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    part = part_ptr + tl.program_id(1).to(tl.int64) * M * N
    tl.store(part + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def splitk(x, w, bias, bm, bn, bk, split, warps, stages, part=None):
    M, K = x.shape
    N = w.shape[0]
    kps = triton.cdiv(triton.cdiv(K, bk), split) * bk
    splits = triton.cdiv(K, kps)
    part = torch.empty((splits, M, N), device=x.device, dtype=torch.float32) if part is None else part
    c = torch.empty((M, N), device=x.device, dtype=x.dtype)
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    tma_splitk_partial[(tiles, splits)](x, w, part, M, N, K, kps, x.stride(0), w.stride(0), BLOCK_M=bm, BLOCK_N=bn,
                                        BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages)
    _gemm_splitk_reduce_kernel[(triton.cdiv(M, 32) * triton.cdiv(N, 128),)](
        part, c, bias, c, c, M, N, splits, c.stride(0), c.stride(1), bias.stride(0), 0, 0, 0, 0,
        HAS_BIAS=True, HAS_RES=False, SAVE_Z=False, ACT="relu", INDEX_64=False, BLOCK_M=32, BLOCK_N=128, num_warps=4)
    return c


def replayed(fn, rep=200):
    graph, _ = capture_graph(fn)
    return statistics.median(cuda_time_ms(graph.replay, warmup=10, rep=rep)) * 1e3


triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
dev, bf16 = torch.device("cuda"), torch.bfloat16
for M, K, N, variants in (
        (512, 8704, 1024, [(128, 128, 64, 4, 8, 4), (128, 128, 64, 4, 4, 4), (128, 128, 128, 4, 8, 3),
                           (128, 128, 64, 4, 8, 6), (128, 64, 64, 2, 4, 6), (128, 64, 128, 2, 4, 4),
                           (64, 128, 64, 2, 4, 6), (64, 128, 128, 2, 4, 4), (128, 256, 64, 8, 8, 3),
                           (128, 128, 64, 2, 8, 4), (64, 64, 128, 2, 4, 6), (128, 128, 64, 8, 8, 4),
                           (64, 128, 64, 4, 4, 6), (128, 64, 64, 4, 4, 6)]),
        (512, 1024, 1024, [(128, 128, 64, 4, 8, 4), (64, 128, 64, 2, 4, 4), (128, 64, 64, 2, 4, 4),
                           (64, 64, 64, 2, 4, 4), (128, 128, 64, 2, 8, 3)])):
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, device=dev, dtype=bf16, generator=g)
    w = torch.randn(N, K, device=dev, dtype=bf16, generator=g) / K ** 0.5
    b = torch.randn(N, device=dev, dtype=bf16, generator=g)
    ref = torch.relu(x.double() @ w.double().T + b.double())
    gemm.linear(x, w, b, "relu"); torch.cuda.synchronize()
    rows = [("cuBLAS + relu", replayed(lambda: torch.relu(torch.nn.functional.linear(x, w, b)))),
            ("ours, tuned", replayed(lambda: gemm.linear(x, w, b, "relu")))]
    for v in variants:
        try:
            y = splitk(x, w, b, *v); torch.cuda.synchronize()
            err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
            bm, bn, bk, split = v[:4]
            kps = triton.cdiv(triton.cdiv(K, bk), split) * bk
            part = torch.empty((triton.cdiv(K, kps), M, N), device=dev, dtype=torch.float32)
            rows.append((f"TMA split-K {v} (err {err:.1e})", replayed(lambda v=v: splitk(x, w, b, *v))))
        except Exception as e:
            print(v, type(e).__name__, str(e)[:200], flush=True)
    for c in (Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 4}, 8, 4),
              Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "SPLIT_K": 2}, 4, 4)):
        try:
            gemm.linear(x, w, b, "relu", config=c); torch.cuda.synchronize()
            rows.append((f"pointer split-K {c.kwargs} w{c.num_warps} s{c.num_stages}",
                         replayed(lambda c=c: gemm.linear(x, w, b, "relu", config=c))))
        except Exception as e:
            print(c, type(e).__name__, str(e)[:200], flush=True)
    base = rows[0][1]
    print(f"=== {M}x{K}->{N}")
    for name, t in sorted(rows, key=lambda r: r[1]):
        print(f"{t:7.2f} us  {base / t:5.3f}x cuBLAS  {name}", flush=True)
