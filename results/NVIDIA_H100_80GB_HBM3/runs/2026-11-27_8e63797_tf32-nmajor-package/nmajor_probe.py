"""tf32 C = A @ B, B row-major (N-major), n^3, on the package's path: cuBLAS (`a @ b`), gemm.gemm as tuned (which
kernel the tuner picked), and the Gluon kernel forced (each NMAJOR config); max error against float64 of max |C|,
GPU times (L2 flushed, 0.5 ms GPU lead: the host path hidden), and eager calls (back to back, L2 flushed)."""
import json, os, statistics, sys
sys.path.insert(0, ".")
import torch
from autotune import spaces
from triton_kernels import gemm
from triton_kernels.runtime import cuda_time_ms
torch.backends.cuda.matmul.allow_tf32 = True
OUT = os.environ.get("OUT", "/tmp")
rows = []


def med(fn, reps, lead=0.5):
    ts = []
    for _ in range(3):
        ts += cuda_time_ms(fn, warmup=2, rep=reps, flush_l2=True, lead_ms=lead)
    return statistics.median(ts) * 1e3


def picked():
    plans = [p for k, p in gemm._PLANS.items() if k[4] == "tf32"]
    return plans[-1].kernel.kernel.__name__ if plans else "?"


for n in (2048, 4096, 8192):
    reps = 20 if n == 8192 else 50
    g = torch.Generator(device="cuda").manual_seed(n)
    a = torch.randn(n, n, device="cuda", generator=g)
    b = torch.randn(n, n, device="cuda", generator=g)
    exact = a.double() @ b.double()
    scale = exact.abs().max().item()
    err = lambda c: (c.double() - exact).abs().max().item() / scale  # noqa: E731
    gemm._PLANS.clear()
    c_tuned = gemm.gemm(a, b, precision="tf32")
    cases = {"cublas": lambda: a @ b, "tuned": lambda: gemm.gemm(a, b, precision="tf32")}
    for cfg in spaces.GEMM_TF32_NMAJOR_CONFIGS:
        cases[f"nmajor_{cfg.num_stages}"] = (lambda cfg=cfg: gemm.gemm(a, b, precision="tf32", config=cfg))
    line = [f"n={n} tuned picks {picked()}"]
    for name, fn in cases.items():
        e = err(fn())
        gpu = med(fn, reps)
        eager = med(fn, reps, lead=0.0)
        rows.append(dict(n=n, what=name, gpu_us=gpu, eager_us=eager, err=e, picked=picked() if name == "tuned" else ""))
        line.append(f"{name} {gpu:.1f}/{eager:.1f} us err {e:.1e}")
    base = {r["what"]: r for r in rows if r["n"] == n}
    line.append("vs cuBLAS: " + ", ".join(f"{k} {base['cublas']['gpu_us'] / v['gpu_us']:.3f}x"
                                          for k, v in base.items() if k != "cublas"))
    print("; ".join(line), flush=True)
    del a, b, exact
    torch.cuda.empty_cache()
json.dump(rows, open(os.path.join(OUT, "nmajor_probe.json"), "w"), indent=1)
