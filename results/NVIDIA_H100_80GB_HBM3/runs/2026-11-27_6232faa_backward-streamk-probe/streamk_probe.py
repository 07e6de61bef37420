"""Stream-K against the tuned persistent TMA kernel and cuBLAS on the backward GEMMs of the studies' Linears.

CPU (TRITON_INTERPRET=1): correctness of the stream-K kernel on tiny shapes, every share layout.
GPU: kernel times (L2 flushed, GPU kept busy ahead) of dX = dZ @ W and dW = dZ^T @ X for fc1 (512 x 8704 -> 1024)
and the 4096-row Linear, over a few stream-K configs."""
import json, os, statistics
import torch
import triton
from triton_kernels import gemm
from triton_kernels.gemm_kernels import _gemm_streamk_kernel
from triton_kernels.launcher import bind
from triton_kernels.runtime import INTERPRET

OUT = os.environ.get("OUT", ".")
dev = torch.device("cpu" if INTERPRET else "cuda")


def streamk(a, b, progs, BM, BN, BK, warps=8, stages=4, group=8, bias=None, act="none"):
    """C = act(a @ b + bias) by the stream-K kernel; a, b: row-major or transposed views (TMA layouts)."""
    M, K = a.shape
    N = b.shape[1]
    a_t, b_t = a.stride(0) == 1, b.stride(0) == 1
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    progs = min(progs, tiles * triton.cdiv(K, BK))
    part = torch.full((2 * progs * BM * BN,), float("nan"), device=a.device, dtype=torch.float32)
    count = torch.zeros(tiles, device=a.device, dtype=torch.int32)
    if not INTERPRET:
        gemm._ensure_allocator()
    kernel = bind(_gemm_streamk_kernel, A_T=a_t, B_T=b_t, HAS_BIAS=bias is not None, HAS_RES=False, SAVE_Z=False,
                  ACT=act, PRECISION="ieee", INDEX_64=False, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=group,
                  num_warps=warps, num_stages=stages)
    args = dict(a_ptr=a, b_ptr=b, c_ptr=c, bias_ptr=bias if bias is not None else c, res_ptr=c, z_ptr=c,
                part_ptr=part, count_ptr=count, M=M, N=N, K=K, NUM_PROGS=progs,
                stride_a=a.stride(1) if a_t else a.stride(0), stride_b=b.stride(1) if b_t else b.stride(0),
                stride_cm=c.stride(0), stride_cn=c.stride(1), stride_bias=bias.stride(0) if bias is not None else 0,
                stride_rm=0, stride_rn=0, stride_zm=0, stride_zn=0)
    return kernel, (progs,), args, c, count


def run(a, b, **kw):
    kernel, grid, args, c, count = streamk(a, b, **kw)
    kernel.launch(grid, **args)
    return c, count


def cpu_check():
    torch.manual_seed(0)
    for (M, N, K, BM, BN, BK, progs) in [(40, 52, 68, 16, 16, 16, 4), (64, 64, 200, 32, 32, 16, 5),
                                           (36, 20, 40, 16, 16, 16, 7), (16, 16, 160, 16, 16, 16, 3),
                                           (48, 80, 48, 16, 32, 16, 13), (16, 16, 16, 16, 16, 16, 4)]:
        for at, bt in ((False, False), (True, False), (False, True)):
            a = torch.randn(K, M).t() if at else torch.randn(M, K)
            b = torch.randn(N, K).t() if bt else torch.randn(K, N)
            bias = torch.randn(N)
            for rep in range(2):  # the counters must come back to zero
                c, count = run(a, b, progs=progs, BM=BM, BN=BN, BK=BK, warps=4, stages=2, group=2, bias=bias,
                               act="relu")
                ref = torch.relu(a.double() @ b.double() + bias.double())
                err = (c.double() - ref).abs().max().item()
                assert err < 1e-4, (M, N, K, at, bt, err)
                assert int(count.abs().sum()) == 0
            print("ok", M, N, K, BM, BN, BK, progs, at, bt, f"{err:.2e}", flush=True)


FLUSH = None


def kernel_us(fn, rep=100):
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.empty(256 * 2**20, dtype=torch.int8, device=dev)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for i in range(rep):
        FLUSH.zero_()
        torch.cuda._sleep(200_000)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


CONFIGS = [(128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 4), (128, 128, 64, 4, 4),
           (128, 128, 64, 8, 5), (128, 256, 32, 8, 6), (64, 256, 64, 4, 4)]


def gpu_probe():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = {}
    for name, (M, K, N) in {"fc1": (512, 8704, 1024), "big": (4096, 8704, 1024)}.items():
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=g)
        w = torch.randn(N, K, device=dev, dtype=torch.bfloat16, generator=g) / K ** 0.5
        dz = torch.randn(M, N, device=dev, dtype=torch.bfloat16, generator=g)
        for prod, (a, b) in {"dX": (dz, w), "dW": (dz.t(), x)}.items():
            key = f"{name}/{prod}"
            ref = (a.double() @ b.double())
            row = {"cublas": kernel_us(lambda: torch.mm(a, b)),
                   "ours_tuned": kernel_us(lambda: gemm.gemm(a, b))}
            scale = ref.abs().max().item()
            for (BM, BN, BK, warps, stages) in CONFIGS:
                for progs in (sms,):
                    label = f"sk {BM}x{BN}x{BK} w{warps} s{stages} p{progs}"
                    try:
                        kernel, grid, args, c, count = streamk(a, b, progs, BM, BN, BK, warps, stages)
                        kernel.launch(grid, **args)
                        torch.cuda.synchronize()
                        err = (c.double() - ref).abs().max().item() / scale
                        kernel.launch(grid, **args)
                        c2 = c.clone()
                        kernel.launch(grid, **args)
                        same = bool(torch.equal(c, c2))
                        t = kernel_us(lambda: kernel.launch(grid, **args))
                        row[label] = t
                        row[label + " err"] = err
                        row[label + " repeat_equal"] = same
                        print(key, label, f"{t:.2f} us err {err:.2e} same {same}", flush=True)
                    except Exception as e:  # noqa: BLE001  (a config that does not compile: recorded)
                        row[label] = repr(e)[:200]
                        print(key, label, "FAILED", repr(e)[:200], flush=True)
            print(key, "cublas", f"{row['cublas']:.2f}", "ours_tuned", f"{row['ours_tuned']:.2f}", flush=True)
            res[key] = row
            with open(os.path.join(OUT, "streamk_probe.json"), "w") as f:
                json.dump(res, f, indent=1)


if __name__ == "__main__":
    cpu_check() if INTERPRET else gpu_probe()
