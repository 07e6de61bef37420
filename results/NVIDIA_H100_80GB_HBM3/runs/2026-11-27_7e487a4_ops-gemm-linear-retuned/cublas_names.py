"""Which cuBLAS kernels torch runs for the op suite's tf32 / fp32 / bf16 GEMMs (N-major and K-major B)."""
import torch
from torch.profiler import profile, ProfilerActivity
torch.backends.cuda.matmul.allow_tf32 = True
for n in (4096, 8192):
    for dt, tf32 in ((torch.float32, True), (torch.float32, False), (torch.bfloat16, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device="cuda", dtype=dt)
        b = torch.randn(n, n, device="cuda", dtype=dt)
        for lay, fn in (("b N-major", lambda: a @ b), ("b K-major", lambda: a @ b.t())):
            fn(); torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as p:
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
            for e in p.key_averages():
                if e.device_type.name == "CUDA":
                    print(f"{n} {dt} tf32={tf32} {lay}: {e.key[:160]} {e.device_time / 1e3 if hasattr(e, 'device_time') else 0:.3f} ms")
