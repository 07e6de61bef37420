"""Old tree against new, one process per tree and round (python ab_probe.py TREE LABEL): cross-entropy fwd+bwd
at the suite's 8192 x 32000 (fp32, bf16) and the fused deep-MLP training forward + backward (GloNet-1000,
ResNet-MLP-1000, batch 1024), median of triton.testing.do_bench (L2 flushed), ms."""
import sys
sys.path.insert(0, sys.argv[1])
import torch
import triton
from triton_kernels import cross_entropy
from models.deep_mlp import build_model

label = sys.argv[2]
torch.manual_seed(0)
rows = []
for dtype in (torch.float32, torch.bfloat16):
    x = (torch.randn(8192, 32000, device="cuda") * 3).to(dtype).requires_grad_()
    t = torch.randint(0, 32000, (8192,), device="cuda")

    def ce():
        loss = cross_entropy.cross_entropy(x, t)
        loss.backward()
        x.grad = None
    ms = triton.testing.do_bench(ce, warmup=50, rep=400, return_mode="median")
    rows.append((f"ce_fwdbwd_8192x32000_{str(dtype)[6:]}", ms))
for name in ("GloNet1000", "ResNetMLP1000"):
    model = build_model(name, width=16, seed=0, device="cuda", backend="triton")
    xb, tb = torch.randn(1024, 14, device="cuda"), torch.randn(1024, device="cuda")

    def step():
        y = model(xb)
        ((y - tb) ** 2).mean().backward()
        for p in model.parameters():
            p.grad = None
    ms = triton.testing.do_bench(step, warmup=20, rep=300, return_mode="median")
    rows.append((f"{name}_fwdbwd_b1024", ms))
for case, ms in rows:
    print(f"{label} {case:32s} {ms:.4f} ms", flush=True)
