"""Sliced-K Gluon Linear (sliced.py) against cuBLAS and the production kernel: kernel times after the harness's L2
flush (GPU spin ahead), and CUDA-graph replays, for the Char-CNN's fc1 / fc2 and the 4096 x 8704 -> 1024 Linear."""
import json, os, sys
import torch
import triton
sys.path.insert(0, os.path.dirname(__file__))
from sliced import sliced_kernel
from triton_kernels import gemm

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
gemm._ensure_allocator()
FLUSH = torch.empty(256 * 2**20, dtype=torch.int8, device=dev)


def gpu_us(fn, rep=200):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    st = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    en = [torch.cuda.Event(enable_timing=True) for _ in range(rep)]
    for i in range(rep):
        FLUSH.zero_()
        torch.cuda._sleep(400_000)
        st[i].record(); fn(); en[i].record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(st, en))
    return ts[len(ts) // 2]


def graph_us(fn, rep=200):
    fn(); torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return gpu_us(g.replay, rep)


VARIANTS = [(64, 64, 64, 8, 1), (64, 64, 64, 12, 1), (64, 64, 64, 6, 2), (64, 64, 64, 8, 2), (64, 64, 64, 12, 2),
            (64, 128, 64, 7, 2), (128, 64, 64, 6, 2), (128, 128, 64, 4, 2)]
res = {}
for name, (M, K, N) in {"fc1": (512, 8704, 1024), "fc2": (512, 1024, 1024), "big": (4096, 8704, 1024)}.items():
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=g)
    w = torch.randn(N, K, device=dev, dtype=torch.bfloat16, generator=g) / K ** 0.5
    b = torch.randn(N, device=dev, dtype=torch.bfloat16, generator=g)
    ref = torch.relu(x.double() @ w.double().t() + b.double())
    fns = {"cublas addmm+relu": lambda: torch.relu(torch.addmm(b, x, w.t())), "cublas mm": lambda: torch.mm(x, w.t()),
           "ours (production)": lambda: gemm.linear(x, w, b, activation="relu")}
    for (bm, bn, bk, st, sl) in VARIANTS:
        c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

        def run(c=c, grid=grid, bm=bm, bn=bn, bk=bk, st=st, sl=sl):
            sliced_kernel[grid](x, w, c, b, M, N, K, x.stride(0), w.stride(0), c.stride(0), c.stride(1),
                                HAS_BIAS=True, ACT="relu", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=st, SLICES=sl,
                                GROUP_M=8, num_warps=4)
            return c
        try:
            c.fill_(float("nan")); run(); torch.cuda.synchronize()
            err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
        except Exception as e:
            print(name, (bm, bn, bk, st, sl), "FAILED", str(e)[:500], flush=True); continue
        fns[f"sliced {bm}x{bn}x{bk} s{st} x{sl} (err {err:.1e})"] = run
    row = {}
    for k, fn in fns.items():
        try:
            row[k] = (gpu_us(fn), graph_us(fn))
        except Exception as e:
            row[k] = str(e)[:200]
        print(name, k, row[k], flush=True)
    res[name] = row
    with open(os.path.join(OUT, "probe2.json"), "w") as f:
        json.dump(res, f, indent=1)
