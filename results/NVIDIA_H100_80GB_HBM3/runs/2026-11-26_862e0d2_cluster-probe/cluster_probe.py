"""Experiment (issue 22): does a CTA cluster (num_ctas=2: each program's tile split over two SMs, the shared
operand's tiles multicast by TMA) take the Char-CNN fc1 Linear+ReLU (512 x 8704 -> 1024 bf16) to cuBLAS's
30 us? cuBLAS runs it as 64 x 64 tiles on 2 x 1 clusters. Replayed from CUDA graphs."""
import statistics, sys
import torch, triton
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.gemm_kernels import _gemm_tma_kernel
from triton_kernels.runtime import capture_graph, cuda_time_ms

triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda", dtype=torch.int8))
SMS = torch.cuda.get_device_properties(0).multi_processor_count


def run(x, w, b, c, bm, bn, bk, warps, stages, ctas):
    M, K = x.shape
    N = w.shape[0]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    progs = min(tiles, SMS // ctas)
    _gemm_tma_kernel[(progs,)](x, w, c, b, c, c, M, N, K, progs, x.stride(0), w.stride(0), c.stride(0), c.stride(1),
                               b.stride(0), 0, 0, 0, 0, A_T=False, B_T=True, HAS_BIAS=True, HAS_RES=False,
                               SAVE_Z=False, ACT="relu", PRECISION="ieee", INDEX_64=False, BLOCK_M=bm, BLOCK_N=bn,
                               BLOCK_K=bk, GROUP_M=8, num_warps=warps, num_stages=stages, num_ctas=ctas)
    return c


def replayed(fn, rep=200):
    graph, _ = capture_graph(fn)
    return statistics.median(cuda_time_ms(graph.replay, warmup=10, rep=rep)) * 1e3


dev, bf16 = torch.device("cuda"), torch.bfloat16
for M, K, N in ((512, 8704, 1024), (512, 1024, 1024)):
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, device=dev, dtype=bf16, generator=g)
    w = torch.randn(N, K, device=dev, dtype=bf16, generator=g) / K ** 0.5
    b = torch.randn(N, device=dev, dtype=bf16, generator=g)
    c = torch.empty(M, N, device=dev, dtype=bf16)
    ref = torch.relu(x.double() @ w.double().T + b.double())
    gemm.linear(x, w, b, "relu"); torch.cuda.synchronize()
    rows = [("cuBLAS + relu", replayed(lambda: torch.relu(torch.nn.functional.linear(x, w, b)))),
            ("ours, tuned", replayed(lambda: gemm.linear(x, w, b, "relu")))]
    for v in [(64, 64, 128, 4, 6, 1), (128, 64, 128, 4, 6, 2), (128, 64, 64, 4, 10, 2), (128, 64, 128, 8, 6, 2),
              (64, 128, 128, 4, 6, 2), (64, 128, 64, 4, 10, 2), (128, 128, 64, 8, 6, 2), (128, 128, 128, 8, 4, 2),
              (128, 64, 128, 4, 4, 2), (128, 64, 64, 4, 12, 2), (256, 64, 64, 8, 6, 2), (64, 64, 128, 4, 6, 2)]:
        try:
            c.fill_(float("nan"))
            run(x, w, b, c, *v); torch.cuda.synchronize()
            err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
            rows.append((f"TMA {v[:3]} w{v[3]} s{v[4]} ctas{v[5]} (err {err:.1e})",
                         replayed(lambda v=v: run(x, w, b, c, *v))))
        except Exception as e:
            print(v, type(e).__name__, str(e)[:300], flush=True)
    base = rows[0][1]
    print(f"=== {M}x{K}->{N}")
    for name, t in sorted(rows, key=lambda r: r[1]):
        print(f"{t:7.2f} us  {base / t:5.3f}x cuBLAS  {name}", flush=True)
