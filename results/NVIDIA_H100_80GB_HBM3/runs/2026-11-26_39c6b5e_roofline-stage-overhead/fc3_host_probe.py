"""Experiment (issue 22, host path): where an eager fc3 (bf16 512x1024->4, bias) forward + autograd.grad(x, W, b)
spends its host time on the GPU box, ours against torch's; pieces timed by perf_counter wrappers (the autograd
thread included)."""
import collections, statistics, sys, time
import torch
from torch import nn
sys.path.insert(0, ".")
from models import layers
from triton_kernels import gemm_backward, gemm_eager, eager_node

dev = torch.device("cuda")
acc, cnt = collections.defaultdict(float), collections.Counter()

def wrap(owner, name, label):
    f = getattr(owner, name)
    def w(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t0
            cnt[label] += 1
    setattr(owner, name, w)

def timed(fn, n=300):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6

ours, twin = layers.Linear(1024, 4).to(dev, torch.bfloat16), nn.Linear(1024, 4).to(dev, torch.bfloat16)
x = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16, requires_grad=True)
g = torch.randn(512, 4, device=dev, dtype=torch.bfloat16)
steps = {"ours": lambda: torch.autograd.grad(ours(x), (x, ours.weight, ours.bias), g),
         "torch": lambda: torch.autograd.grad(twin(x), (x, twin.weight, twin.bias), g),
         "ours fwd": lambda: ours(x), "torch fwd": lambda: twin(x)}
for f in steps.values():
    for _ in range(30):
        f()
res = collections.defaultdict(list)
for r in range(7):
    for k, f in steps.items():
        res[k].append(timed(f))
print("interleaved medians (us per call):", {k: round(statistics.median(v), 1) for k, v in res.items()})
wrap(gemm_eager, "lookup", "lookup")
wrap(gemm_eager._Call, "__call__", "_Call.__call__ (fwd, incl. node)")
wrap(gemm_eager._Call, "run", "_Call.run (alloc + launch)")
wrap(gemm_eager._Call, "backward", "_Call.backward")
wrap(gemm_eager._Call, "_fused_backward", "_Call._fused_backward")
wrap(gemm_backward, "buffers", "gemm_backward.buffers")
wrap(gemm_eager._FixedGemm, "__call__", "_FixedGemm.__call__")
wrap(eager_node.EagerNode, "backward", "EagerNode.backward (staticmethod)") if False else None
for _ in range(30):
    steps["ours"]()
acc.clear(); cnt.clear()
n = 500
t = timed(steps["ours"], n)
print(f"ours fwd+grad with wrappers: {t:.1f} us per step")
for k in sorted(acc, key=lambda k: -acc[k]):
    print(f"  {k:36s} {acc[k] / n * 1e6:7.1f} us per step  ({cnt[k] / n:g} calls)")
