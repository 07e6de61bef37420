"""Softmax at the MNIST shapes (N = 4, 10): kernel time by rows per program and warps; the host path of the
tiny fwd+bwd calls (softmax, cross-entropy) against torch's, and a do-nothing autograd.Function's."""
import json, os, statistics, time
import torch
from torch.nn import functional
from triton_kernels import softmax, cross_entropy
from triton_kernels.runtime import Config, cuda_time_ms

out = {}
def med(fn, lead=0.0, rep=100):
    return statistics.median(cuda_time_ms(fn, warmup=10, rep=rep, lead_ms=lead))

# ---- part 1: softmax fwd / bwd kernel times at narrow rows
for (M, N) in [(128, 10), (512, 10), (512, 4), (1024, 10), (2048, 10), (8192, 10), (512, 64), (4096, 128)]:
    x = torch.randn(M, N, device="cuda") * 3
    dy = torch.randn(M, N, device="cuda")
    y = torch.softmax(x, -1)
    r = {"fwd": {}, "bwd": {}}
    r["fwd"]["eager_call"] = med(lambda: torch.softmax(x, -1))
    r["fwd"]["ours_call"] = med(lambda: softmax.softmax(x, -1))
    r["fwd"]["eager_kernel"] = med(lambda: torch.softmax(x, -1), 0.3)
    r["fwd"]["ours_kernel"] = med(lambda: softmax.softmax(x, -1), 0.3)
    r["bwd"]["eager_kernel"] = med(lambda: torch._softmax_backward_data(dy, y, -1, y.dtype), 0.3)
    r["bwd"]["ours_kernel"] = med(lambda: softmax.softmax_backward(dy, y), 0.3)

    plans = {k: (v.rows, v.kernel.options.get("num_warps")) for k, v in softmax._PLANS.items()
             if k[1] == softmax.bucket(M) and k[2] == softmax.next_power_of_2(N)}
    r["plans"] = {str(k[0]): v for k, v in plans.items()}
    bn = softmax.next_power_of_2(N)
    for bm in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        if bm > max(M, 1) or bm * bn > 16384:
            continue
        for w in (1, 2, 4, 8):
            if w * 32 > max(bm * bn, 32) * 2:
                continue
            c = Config({"BLOCK_M": bm}, w, 1)
            r["fwd"][f"{bm}/{w}"] = med(lambda: softmax.softmax_forward(x, config=c), 0.3, rep=40)
            r["bwd"][f"{bm}/{w}"] = med(lambda: softmax.softmax_backward(dy, y, config=c), 0.3, rep=40)
    out[f"softmax_{M}x{N}"] = r
    for d in ("fwd", "bwd"):
        forced = sorted((v, k) for k, v in r[d].items() if "/" in k)
        print(M, N, d, {k: round(v * 1e3, 2) for k, v in r[d].items() if "/" not in k}, "plan", r["plans"],
              "best", [(k, round(v * 1e3, 2)) for v, k in forced[:4]], flush=True)

# ---- part 2: host path of tiny fwd+bwd calls
class Ident(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.clone()

def host_us(fn, rep=300):
    ts = []
    for _ in range(rep):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e6

def loop_us(fn, n=300):  # back-to-back calls, per call
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6

x = (torch.randn(128, 10, device="cuda") * 3).requires_grad_()
dy = torch.randn(128, 10, device="cuda")
t = torch.randint(0, 10, (128,), device="cuda")
calls = {
    "softmax_eager": lambda: torch.autograd.grad(torch.softmax(x, -1), x, dy),
    "softmax_ours": lambda: torch.autograd.grad(softmax.softmax(x, -1), x, dy),
    "ce_eager": lambda: torch.autograd.grad(functional.cross_entropy(x, t), x),
    "ce_ours": lambda: torch.autograd.grad(cross_entropy.cross_entropy(x, t, check_target=False), x),
    "clone_eager": lambda: torch.autograd.grad(x.clone(), x, dy),
    "clone_function": lambda: torch.autograd.grad(Ident.apply(x), x, dy),
    "softmax_fwd_eager": lambda: torch.softmax(x.detach(), -1),
    "softmax_fwd_ours": lambda: softmax.softmax(x.detach(), -1),
}
host = {}
for rnd in range(3):
    for k, f in calls.items():
        f()
        host.setdefault(k, {"host_us": [], "loop_us": [], "event_ms": []})
        host[k]["host_us"].append(host_us(f))
        host[k]["loop_us"].append(loop_us(f))
        host[k]["event_ms"].append(med(f, rep=100))
out["host"] = host
for k, v in host.items():
    print(k, {m: [round(a, 4 if m == "event_ms" else 1) for a in xs] for m, xs in v.items()}, flush=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "small_probe.json"), "w"), indent=1)
