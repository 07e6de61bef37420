"""Experiment (issue 22): tf32 C = A @ B with N-major B (the op suite's nn layout) without the copy of B.

wgmma reads tf32 operands from shared memory K-major only. In C = A @ B an N-major B is MN-major, so the
production kernel copies B (0.136 ms at 4096^3). Here: (1) the swapped problem C^T = B^T A^T, whose first
operand (B^T, MN-major) wgmma may take from registers, (2) a tiled transposing copy instead of torch's.
"""
import sys, statistics, torch, triton, triton.language as tl
sys.path.insert(0, ".")
from triton_kernels import gemm
from bench.harness import time_call

@triton.jit
def _swapped(a_ptr, b_ptr, c_ptr, M, N, K, NUM_PROGS, stride_a, stride_b, stride_c,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_N: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_a, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_b, 1], block_shape=[BLOCK_K, BLOCK_N])
    grid_n = tl.cdiv(N, BLOCK_N); grid_m = tl.cdiv(M, BLOCK_M)
    num_tiles = grid_m * grid_n
    for tile in range(tl.program_id(0), num_tiles, NUM_PROGS):
        group = tile // (GROUP_N * grid_m)
        first_n = group * GROUP_N
        size = min(grid_n - first_n, GROUP_N)
        pid_n = first_n + (tile % size)
        pid_m = (tile % (GROUP_N * grid_m)) // size
        off_m = pid_m * BLOCK_M; off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([off_m, k])
            b = b_desc.load([k, off_n])
            acc = tl.dot(b.T, a.T, acc, input_precision="tf32")
        offs_n = off_n + tl.arange(0, BLOCK_N); offs_m = off_m + tl.arange(0, BLOCK_M)
        ptrs = c_ptr + offs_m[None, :].to(tl.int64) * stride_c + offs_n[:, None]
        tl.store(ptrs, acc, mask=(offs_m[None, :] < M) & (offs_n[:, None] < N))

@triton.jit
def _transpose(x_ptr, y_ptr, R, C, stride_x, stride_y, BLOCK: tl.constexpr):
    """y (C, R) = x (R, C)^T, one BLOCK x BLOCK tile per program."""
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK); c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = (r[:, None] < R) & (c[None, :] < C)
    t = tl.load(x_ptr + r[:, None].to(tl.int64) * stride_x + c[None, :], mask=m)
    tl.store(y_ptr + c[None, :].to(tl.int64) * stride_y + r[:, None], t, mask=m)

def transpose(x, block=64):
    R, C = x.shape
    y = torch.empty((C, R), device=x.device, dtype=x.dtype)
    _transpose[(triton.cdiv(R, block), triton.cdiv(C, block))](x, y, R, C, x.stride(0), y.stride(0), BLOCK=block, num_warps=4)
    return y

def swapped(a, b, bm, bn, bk, warps, stages, group=8):
    M, K = a.shape; N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    progs = min(tiles, sms)
    k = _swapped[(progs,)](a, b, c, M, N, K, progs, a.stride(0), b.stride(0), c.stride(0),
                           BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_N=group, num_warps=warps, num_stages=stages)
    return c, k

def med(fn, rep=40):
    return statistics.median(time_call(fn, rep, device=torch.device("cuda")))

def main():
    gemm._ensure_allocator()
    torch.backends.cuda.matmul.allow_tf32 = True
    for n in (4096, 8192):
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(n, n, device="cuda", generator=g); b = torch.randn(n, n, device="cuda", generator=g)
        ref = (a.double() @ b.double())
        scale = ref.abs().max().item()
        bt_km = b.t().contiguous().t()  # K-major copy
        print(f"== {n}^3 tf32")
        res = {}
        res["cublas nn"] = med(lambda: a @ b)
        res["cublas nt"] = med(lambda: a @ bt_km)
        res["ours nn (gemm, copy of B)"] = med(lambda: gemm.gemm(a, b, precision="tf32"))
        res["ours nt (gemm, K-major B)"] = med(lambda: gemm.gemm(a, bt_km, precision="tf32"))
        res["torch transpose copy"] = med(lambda: b.t().contiguous())
        for blk in (32, 64):
            y = transpose(b, blk); assert torch.equal(y, b.t())
            res[f"triton transpose copy {blk}"] = med(lambda: transpose(b, blk))
        res["triton copy64 + ours nt"] = med(lambda: gemm.gemm(a, transpose(b).t(), precision="tf32"))
        for bm, bn, bk, w, s in ((128, 128, 32, 4, 4), (128, 128, 32, 8, 4), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3),
                                 (128, 256, 32, 8, 4), (128, 128, 64, 8, 3), (64, 256, 32, 4, 4)):
            try:
                c, k = swapped(a, b, bm, bn, bk, w, s)
                torch.cuda.synchronize()
                err = ((c.double() - ref).abs().max().item()) / scale
                ptx = k.asm.get("ptx", "")
                tag = f"swapped {bm}x{bn}x{bk} w{w} s{s}"
                res[tag] = med(lambda: swapped(a, b, bm, bn, bk, w, s))
                print(f"   {tag}: err {err:.2e} wgmma {ptx.count('wgmma.mma_async')} "
                      f"mma.sync {ptx.count('mma.sync')} regsA {'wgmma.mma_async.sync.aligned' in ptx and '{%r' in ptx}")
            except Exception as e:
                print(f"   swapped {bm}x{bn}x{bk} w{w} s{s}: {type(e).__name__}: {str(e)[:200]}")
        base = res["cublas nn"]
        for k_, v in res.items():
            print(f"{k_:<36} {v:8.4f} ms  {2*n**3/v/1e9:7.1f} TFLOP/s  cublas-nn/this {base/v:5.2f}")

if __name__ == "__main__":
    main()
