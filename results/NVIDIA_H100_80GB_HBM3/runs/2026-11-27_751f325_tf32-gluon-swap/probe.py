"""tf32 C = A @ B, row-major (N-major) B: the Gluon swapped kernel (tf32_gluon.py, B^T as wgmma's register
operand, the operands of the products in flight named in each wait) against cuBLAS (torch.matmul, tf32 allowed)
and today's production path (gemm.gemm: a K-major copy of B, then the K-major kernel), and the K-major kernel alone
(B already K-major). Per variant: max relative error against float64 over 8 launches on NaN-filled outputs, whether
the 8 results are equal bit for bit, and the times replayed from a CUDA graph (L2 flushed)."""
import json, os, statistics, sys, time
import torch
sys.path.insert(0, ".")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from triton_kernels import gemm
from triton_kernels.runtime import capture_graph, cuda_time_ms
import tf32_gluon

OUT = os.environ.get("OUT", "/tmp")
torch.backends.cuda.matmul.allow_tf32 = True
gemm._ensure_allocator()
# (BLOCK_M, BLOCK_N, BLOCK_K, STAGES, IN_FLIGHT, warps, B's swizzle in bytes, GROUP_M)
VARIANTS = [(256, 128, 32, 4, 1, 8, 128, 8), (256, 128, 32, 4, 1, 8, 32, 8), (256, 128, 32, 4, 1, 8, 64, 8),
            (256, 128, 32, 4, 1, 8, 32, 16), (256, 128, 32, 4, 1, 8, 32, 4), (256, 128, 32, 3, 1, 8, 32, 8),
            (128, 128, 32, 4, 1, 4, 32, 8)]
SIZES = [int(s) for s in os.environ.get("SIZES", "1024 2048 4096 8192").split()]
rows = []
t0 = time.time()


def emit(r):
    rows.append(r)
    print(json.dumps(r), flush=True)
    with open(os.path.join(OUT, "gluon_probe.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


for n in SIZES:
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g)
    b = torch.randn(n, n, device="cuda", generator=g)
    exact = a.double() @ b.double()
    scale = exact.abs().max().item()
    b_k = b.t().contiguous().t()  # the same values, K-major
    rep = 20 if n == 8192 else 60

    def replayed(fn):
        graph, _ = capture_graph(fn)
        return statistics.median(cuda_time_ms(graph.replay, warmup=3, rep=rep))

    def eager(fn):
        return statistics.median(cuda_time_ms(fn, warmup=3, rep=rep))

    cub = replayed(lambda: torch.matmul(a, b))
    cub_err = (torch.matmul(a, b).double() - exact).abs().max().item() / scale
    emit(dict(n=n, variant="cublas", ms=cub, eager_ms=eager(lambda: torch.matmul(a, b)), max_err=cub_err))
    for name, fn in (("production (copy of B)", lambda: gemm.gemm(a, b, precision="tf32")),
                     ("K-major kernel alone", lambda: gemm.gemm(a, b_k, precision="tf32"))):
        c = fn()
        err = (c.double() - exact).abs().max().item() / scale
        ms = replayed(fn)
        emit(dict(n=n, variant=name, ms=ms, ratio=cub / ms, max_err=err, eager_ms=eager(fn)))
    for v in VARIANTS:
        bm, bn, bk, st, fl, w, sw, gm = v
        c = torch.empty((n, n), device="cuda")

        def launch():
            tf32_gluon.launch(a, b, c, block_m=bm, block_n=bn, block_k=bk, stages=st, in_flight=fl, num_warps=w,
                              b_swizzle=sw, group_m=gm)
        name = f"gluon {bm}x{bn}x{bk} s{st} inflight{fl} w{w} bswizzle{sw} group{gm}"
        try:
            errs, outs = [], []
            for _ in range(8):
                c.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                errs.append((c.double() - exact).abs().max().item() / scale)
                outs.append(c.clone())
            same = all(torch.equal(outs[0], o) for o in outs[1:])
            del outs
            ms = replayed(launch)
            r = dict(n=n, variant=name, ms=ms, ratio=cub / ms, max_err=max(errs), bit_equal=same,
                     eager_ms=eager(launch))
        except Exception as e:  # noqa: BLE001
            r = dict(n=n, variant=name, error=f"{type(e).__name__}: {str(e)[:300]}")
        emit(r)
    del a, b, b_k, exact
    torch.cuda.empty_cache()
    print(f"[{time.time() - t0:.0f} s] n={n} done", flush=True)
