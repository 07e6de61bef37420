"""Experiment (issue 22, host path of the TMA GEMM): where an eager fc1 (bf16 512x8704->1024) forward / forward+
backward spends its host time on the GPU box. Pieces timed by perf_counter wrappers (accumulated across the
autograd thread too), then the same steps with the descriptor scratch from a per-(size, stream) cache instead of
torch.empty at each launch."""
import collections, statistics, sys, time
import torch
from torch import nn
sys.path.insert(0, ".")
import triton
from triton.backends.nvidia import driver as nvdriver
from models import layers
from triton_kernels import gemm, gemm_eager

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
    return f

def per_call(fn, n=300, rounds=5):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(out)

def cases():
    out = {}
    for name, K, N in (("fc1", 8704, 1024), ("fc3", 1024, 4)):
        for label, make in (("torch", nn.Linear), ("ours", layers.Linear)):
            m = make(K, N).to(dev, torch.bfloat16)
            x = torch.randn(512, K, device=dev, dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(512, N, device=dev, dtype=torch.bfloat16)
            out[f"{name} {label}"] = (m, x, g)
    return out

def steps(tag):
    for key, (m, x, g) in cases().items():
        fwd = per_call(lambda: m(x))
        step = per_call(lambda: m(x).backward(g))
        grads = per_call(lambda: torch.autograd.grad(m(x), (x, m.weight, m.bias), g))
        print(f"[{tag}] {key:10s} fwd {fwd:6.1f} us  fwd+backward() {step:6.1f} us  fwd+autograd.grad(all) {grads:6.1f} us",
              flush=True)

steps("plain")
# pieces
orig_scratch = gemm._tma_scratch
wrap(gemm, "_tma_scratch", "scratch alloc (torch.empty)")
gemm._ALLOCATOR_SET = gemm.contextvars.ContextVar("reset", default=False)  # re-register the wrapped allocator
wrap(nvdriver.CudaLauncher, "__call__", "CudaLauncher.__call__ (incl. launch)")
wrap(gemm_eager._FixedGemm, "__call__", "_FixedGemm.__call__")
wrap(gemm_eager._Call, "forward", "_Call.forward")
wrap(gemm_eager._Call, "backward", "_Call.backward")
wrap(gemm_eager, "lookup", "lookup")
wrap(gemm, "act_backward_buffers", "act_backward_buffers") if hasattr(gemm, "act_backward_buffers") else None
wrap(gemm_eager, "act_backward_buffers", "gemm_eager.act_backward_buffers") if hasattr(gemm_eager, "act_backward_buffers") else None
m, x, g = cases()["fc1 ours"]
for _ in range(30):
    m(x).backward(g)
torch.cuda.synchronize()
acc.clear(); cnt.clear()
n = 300
t0 = time.perf_counter()
for _ in range(n):
    m(x).backward(g)
torch.cuda.synchronize()
total = (time.perf_counter() - t0) / n * 1e6
print(f"fc1 ours fwd+backward() with wrappers: {total:.1f} us per step")
for k in sorted(acc, key=lambda k: -acc[k]):
    print(f"  {k:40s} {acc[k] / n * 1e6:7.1f} us per step  ({cnt[k] / n:g} calls)")

# a cached scratch buffer per (size, stream)
cache = {}
def cached_scratch(size, alignment, stream):
    buf = cache.get((size, stream))
    if buf is None:
        buf = cache[(size, stream)] = torch.empty(size, device="cuda", dtype=torch.int8)
    return buf
gemm._tma_scratch = cached_scratch
gemm._ALLOCATOR_SET = gemm.contextvars.ContextVar("reset2", default=False)
steps("cached scratch")
