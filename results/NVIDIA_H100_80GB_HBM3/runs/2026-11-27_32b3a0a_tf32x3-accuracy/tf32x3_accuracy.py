"""Experiment (issue 22): is tf32x3 as accurate as cuBLAS's fp32 (ieee)? Errors against float64 and times (L2
flushed, medians) at 4096^3 and 8192^3, normal entries and entries spread over ~6 decades."""
import statistics
import sys
import torch
sys.path.insert(0, ".")
from triton_kernels import gemm
from triton_kernels.runtime import cuda_time_ms

dev = torch.device("cuda")
print(torch.cuda.get_device_name(dev))
for n, rep in ((4096, 20), (8192, 6)):
    for dist in ("normal", "wide"):
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn(n, n, device=dev, generator=g)
        b = torch.randn(n, n, device=dev, generator=g)
        if dist == "wide":
            a = a * torch.exp(2 * torch.randn(n, n, device=dev, generator=g))
            b = b * torch.exp(2 * torch.randn(n, n, device=dev, generator=g))
        rows = 256
        ref = a[:rows].double() @ b.double()
        scale = ref.abs().max()

        def err(c):
            d = (c[:rows].double() - ref).abs()
            return float(d.max() / scale), float((d / ref.abs().clamp_min(1e-30)).median())

        cases = {}
        torch.backends.cuda.matmul.allow_tf32 = False
        cases["cuBLAS fp32 (ieee)"] = lambda: a @ b
        cases["ours ieee"] = lambda: gemm.gemm(a, b, precision="ieee")
        cases["ours tf32x3"] = lambda: gemm.gemm(a, b, precision="tf32x3")
        cases["ours tf32"] = lambda: gemm.gemm(a, b, precision="tf32")
        line = f"{n}^3 {dist}:"
        base = None
        for name, fn in cases.items():
            c = fn()
            torch.cuda.synchronize()
            e_max, e_med = err(c)
            t = statistics.median(cuda_time_ms(fn, warmup=2, rep=rep))
            base = base or t
            print(f"  {n}^3 {dist:6s} {name:20s} max err {e_max:.2e} (of max |ref|), median rel err {e_med:.2e}, "
                  f"{t:.3f} ms = {base / t:.2f}x cuBLAS fp32", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = True
        c = a @ b
        e_max, e_med = err(c)
        print(f"  {n}^3 {dist:6s} {'cuBLAS tf32':20s} max err {e_max:.2e}, median rel err {e_med:.2e}", flush=True)
        torch.backends.cuda.matmul.allow_tf32 = False
