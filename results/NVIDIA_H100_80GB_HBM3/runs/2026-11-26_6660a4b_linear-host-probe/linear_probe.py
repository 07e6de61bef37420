# Why Linear(784 -> 10) fp32 at batch 128 costs ~70 us a call back to back when its graph replay is 22 us.
import time, torch
from torch import nn
from models import layers
from triton_kernels import launcher
dev = "cuda"
tl_ = nn.Linear(784, 10).to(dev); ours = layers.Linear(784, 10).to(dev); ours.load_state_dict(tl_.state_dict())
ln_t = nn.LayerNorm(1024).to(dev); ln_o = layers.LayerNorm(1024).to(dev)
x = torch.randn(128, 784, device=dev); xl = torch.randn(64, 1024, device=dev)
def per_call(fn, n=2000):
    with torch.no_grad():
        for _ in range(200): fn()
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(n): fn()
        torch.cuda.synchronize(); wall = (time.perf_counter() - t) / n * 1e6
        torch.cuda._sleep(int(3e9)); t = time.perf_counter()
        for _ in range(500): fn()
        host = (time.perf_counter() - t) / 500 * 1e6
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(500): fn(); torch.cuda.synchronize()
        synced = (time.perf_counter() - t) / 500 * 1e6
    return wall, host, synced
for name, fn in (("torch Linear", lambda: tl_(x)), ("ours Linear", lambda: ours(x)),
                 ("torch LayerNorm", lambda: ln_t(xl)), ("ours LayerNorm", lambda: ln_o(xl))):
    w, h, s = per_call(fn)
    print(f"{name:16s} back-to-back {w:7.2f} us   host enqueue only {h:7.2f} us   with a sync each {s:7.2f} us", flush=True)
# the generated launchers' hit rate: count misses over 1000 calls
misses = {"n": 0}
orig = launcher.BoundKernel._miss
def counting(self, *a, **k):
    misses["n"] += 1; return orig(self, *a, **k)
launcher.BoundKernel._miss = counting
with torch.no_grad():
    for _ in range(1000): ours(x)
print("BoundKernel misses in 1000 Linear calls:", misses["n"])
from torch.profiler import profile, ProfilerActivity
with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for _ in range(50): ours(x)
    torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="count", row_limit=25, max_name_column_width=60))
