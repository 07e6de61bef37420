"""tf32 C = A @ B with an N-major B (torch.matmul's layout) on the production TMA kernel: the swapped-product
tiles (SWAP_AB) forced one by one, the tuner's pick (which now has them), the copy-of-B candidates, and cuBLAS.
Replayed from CUDA graphs, L2 flushed before each replay; each result against float64."""
import json, os, statistics, sys
import torch
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.runtime import Config, capture_graph, cuda_time_ms
from autotune import spaces

OUT = os.environ.get("OUT", "/tmp")
torch.backends.cuda.matmul.allow_tf32 = True
rows = []


def emit(**r):
    rows.append(r); print(json.dumps(r), flush=True)


def cfg(bm, bn, bk, w, st, **extra):
    return Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "TMA": 1, **extra}, w, st)


SWAPS = [cfg(*t, SWAP_AB=1) for t in ((256, 128, 32, 8, 3), (256, 128, 32, 8, 4), (256, 64, 32, 4, 4), (256, 64, 32, 4, 5),
                                      (256, 64, 64, 4, 3), (128, 64, 32, 4, 5), (128, 64, 32, 4, 6), (128, 128, 32, 8, 4),
                                      (256, 128, 64, 8, 2), (128, 64, 64, 4, 3), (256, 128, 16, 8, 6), (128, 128, 32, 4, 4))]
COPIES = [c for c in spaces.GEMM_FP32_CONFIGS if c.kwargs.get("B_RELAYOUT")]
for n in (1024, 2048, 4096, 8192):
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g); b = torch.randn(n, n, device="cuda", generator=g)
    exact = a.double() @ b.double(); scale = exact.abs().max().item()
    rep = 20 if n == 8192 else 60

    def timed(name, fn, **extra):
        out = fn(); torch.cuda.synchronize()
        err = (out.double() - exact).abs().max().item() / scale
        graph, _ = capture_graph(fn)
        us = statistics.median(cuda_time_ms(graph.replay, warmup=3, rep=rep)) * 1e3
        emit(n=n, variant=name, us=us, err=err, **extra)
        return us
    cub = timed("cublas", lambda: torch.matmul(a, b))
    tuned = timed("ours tuned", lambda: gemm.gemm(a, b, precision="tf32"))
    key = [k for k in gemm._PLANS if k[4] == "tf32" and k[0] == (n - 1).bit_length()]
    plan = gemm._PLANS[key[0]] if key else None
    emit(n=n, variant="tuned plan", plan=str(plan.kernel.constexprs) + str(plan.kernel.options) if plan else None,
         relayout=plan.relayout if plan else None, ratio=cub / tuned)
    for c in SWAPS + COPIES:
        name = "x".join(str(c.kwargs[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) + f" w{c.num_warps}s{c.num_stages}"
        name += " swap" if c.kwargs.get("SWAP_AB") else " copy"
        try:
            us = timed(name, lambda: gemm.gemm_forward(a, b, precision="tf32", config=c)[0])
            rows[-1]["ratio"] = cub / us
        except Exception as e:  # noqa: BLE001
            emit(n=n, variant=name, error=str(e)[:300])
    del a, b, exact
    torch.cuda.empty_cache()
with open(os.path.join(OUT, "swap_sweep.json"), "w") as fh:
    json.dump(rows, fh, indent=1)
