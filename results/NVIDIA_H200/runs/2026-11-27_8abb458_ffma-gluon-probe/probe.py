"""Experiment (issue 22): a hand-tiled FFMA SGEMM in Gluon against cuBLAS's fp32 (tf32 off) and the production
ieee kernel (tuned), L2 flushed, medians of CUDA-event times; errors against float64."""
import statistics, sys, time
import torch
import triton
sys.path.insert(0, ".")
sys.path.insert(0, "probe_ffma")
from triton_kernels import gemm
from bench.harness import time_call
import ffma_gluon

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
KERNELS = [ffma_gluon.sgemm_ffma_kernel, ffma_gluon.sgemm_ffma2_kernel]
VARIANTS = [(0, 128, 128, 8, 4, 2, None)]


def run(v, a, b, c):
    kern, bm, bn, bk, wm, wn, reg = v[0], *v[1:]
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    opts = {"maxnreg": reg} if reg else {}
    KERNELS[kern][grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, WARPS_M=wm, WARPS_N=wn,
                        num_warps=wm * wn, **opts)
    return c


TMA_VARIANTS = [("tma", 128, 128, 16, 16, 4, 4, 2, 1, None), ("tma", 128, 128, 16, 16, 4, 4, 2, 1, 128),
                ("tma", 128, 128, 16, 16, 2, 4, 2, 1, 128), ("tma", 128, 128, 16, 16, 3, 4, 2, 1, 128),
                ("tma", 128, 128, 32, 16, 2, 4, 2, 1, None), ("tma", 128, 128, 16, 16, 5, 4, 2, 1, None),
                ("tma", 128, 128, 16, 16, 8, 4, 2, 1, None), ("tma", 128, 128, 16, 16, 4, 4, 2, 1, 168)]


def run_tma(v, a, b, c):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.experimental.gluon import language as gl
    _, bm, bn, bk, kc, st, wm, wn, rs, reg = v
    M, K = a.shape
    N = b.shape[1]
    la = gl.NVMMASharedLayout(swizzle_byte_width=min(128, bk * 4), element_bitwidth=32, rank=2)
    lb = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=2)
    da = TensorDescriptor(a, list(a.shape), list(a.stride()), [bm, bk], la)
    db = TensorDescriptor(b, list(b.shape), list(b.stride()), [bk, bn], lb)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    opts = {"maxnreg": reg} if reg else {}
    ffma_gluon.sgemm_fma_tma_kernel[grid](da, db, c, M, N, K, c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn,
                                          BLOCK_K=bk, KC=kc, STAGES=st, GROUP_M=8, WARPS_M=wm, WARPS_N=wn,
                                          ROWS_STRIDED=bool(rs), num_warps=wm * wn, **opts)
    return c


def any_run(v, a, b, c):
    return run_tma(v, a, b, c) if v[0] == "tma" else run(v, a, b, c)


def med(fn, rep):
    fn()
    torch.cuda.synchronize()
    return statistics.median(time_call(fn, rep, device=dev))


def rel_err(out, ref, rows):
    return float((out[:rows].double() - ref).abs().max() / ref.abs().max())


def main():
    g = torch.Generator(device=dev).manual_seed(0)
    print("== correctness on ragged shapes (max |err| / max |ref|, float64 reference)", flush=True)
    for (M, N, K) in ((1000, 777, 1333), (129, 130, 17), (1000, 780, 1336), (129, 132, 20), (4096, 4096, 4096)):
        a = torch.randn(M, K, device=dev, generator=g)
        b = torch.randn(K, N, device=dev, generator=g)
        rows = min(M, 512)
        ref = a[:rows].double() @ b.double()
        line = f"  {M}x{N}x{K}: cuBLAS {rel_err(a @ b, ref, rows):.1e}"
        aligned = K % 4 == 0 and N % 4 == 0
        for v in VARIANTS + (TMA_VARIANTS if aligned else []):
            c = torch.full((M, N), float("nan"), device=dev)
            line += f" | v{v} {rel_err(any_run(v, a, b, c), ref, rows):.1e}"
        at = a.t().contiguous().t()  # column-major A view
        c = torch.full((M, N), float("nan"), device=dev)
        line += f" | colmajorA {rel_err(run(VARIANTS[0], at, b, c), ref, rows):.1e}"
        print(line, flush=True)

    for n, rep in ((4096, 30), (8192, 10)):
        a = torch.randn(n, n, device=dev, generator=g)
        b = torch.randn(n, n, device=dev, generator=g)
        c = torch.empty(n, n, device=dev)
        flops = 2 * n ** 3
        t_cublas = med(lambda: torch.mm(a, b, out=c), rep)
        t_tuned = med(lambda: gemm.gemm(a, b), rep)
        print(f"=== {n}^3 fp32: cuBLAS {t_cublas:.4f} ms ({flops / t_cublas / 1e9:.1f} TFLOP/s); production ieee tuned "
              f"{t_tuned:.4f} ms = {t_cublas / t_tuned:.3f}x", flush=True)
        for v in VARIANTS + TMA_VARIANTS:
            t = med(lambda v=v: any_run(v, a, b, c), rep)
            print(f"  v{v}: {t:.4f} ms ({flops / t / 1e9:.1f} TFLOP/s) = {t_cublas / t:.3f}x cuBLAS", flush=True)
        t_again = med(lambda: torch.mm(a, b, out=c), rep)
        print(f"  cuBLAS again {t_again:.4f} ms", flush=True)


if __name__ == "__main__":
    main()
