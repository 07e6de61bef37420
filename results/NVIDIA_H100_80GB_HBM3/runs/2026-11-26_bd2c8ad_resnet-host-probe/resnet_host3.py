"""Host cost pieces of the fused BN layer's fast path on the GPU box (small shape: host only)."""
import cProfile, io, json, os, pstats, statistics, time
import torch
from models.resnet import BatchNormAct2d
from triton_kernels import batchnorm_eager
from triton_kernels.batchnorm import stream_counters

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
OUT = os.environ.get("OUT", "/tmp")
DT = torch.bfloat16 if dev.type == "cuda" else torch.float32
N = int(os.environ.get("N", "2000"))
res = {}


def sync():
    if dev.type == "cuda":
        torch.cuda.synchronize()


def per_call(fn, n=N, rounds=7):
    for _ in range(50):
        fn()
    ts = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append(1e6 * (time.perf_counter() - t0) / n)
    sync()
    return statistics.median(ts)


def layer(fused, res_, shape):
    m = BatchNormAct2d(shape[1], relu=True).to(dev)
    m.fused = fused
    xx = torch.randn(shape, device=dev).contiguous(memory_format=torch.channels_last).to(DT).requires_grad_()
    rr = torch.randn_like(xx).requires_grad_() if res_ else None
    return m, xx, rr


for shape in [tuple(int(v) for v in s.split(",")) for s in os.environ.get("SHAPES", "2,64,4,4;8,64,32,32").split(";")]:
    for res_ in (False, True):
        out = {}
        for name, fused in (("ours", True), ("torch", False)):
            m, xx, rr = layer(fused, res_, shape)
            yy = m(xx, rr)
            g = torch.ones_like(yy)
            yy.backward(g)
            fwd = per_call(lambda: m(xx, rr))
            both = per_call(lambda: m(xx, rr).backward(g))
            with torch.no_grad():
                nograd = per_call(lambda: m(xx, rr))
            if dev.type == "cuda":
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                sync(); e0.record()
                for _ in range(200):
                    m(xx, rr).backward(g)
                e1.record(); sync()
                gpu = e0.elapsed_time(e1) * 1e3 / 200
            else:
                gpu = 0.0
            out[name] = {"fwd": fwd, "fwd+bwd": both, "fwd_nograd": nograd, "gpu_fwd+bwd_stream": gpu}
        res[f"layer{shape}/res={res_}"] = out
        print(f"{shape} residual={res_}: " + "; ".join(
            f"{k} fwd {v['fwd']:.1f} fwd+bwd {v['fwd+bwd']:.1f} no-grad fwd {v['fwd_nograd']:.1f} "
            f"(stream time per fwd+bwd {v['gpu_fwd+bwd_stream']:.1f}) us" for k, v in out.items()), flush=True)

# primitives, small shape
m, xx, rr = layer(True, True, (2, 64, 4, 4))
m(xx, rr).backward(torch.ones_like(xx))
fast = next(iter(batchnorm_eager._FAST.values()))
w, b = m.weight, m.bias
x0 = xx.detach()
prims = {
    "new_empty (5,C) f32": lambda: x0.new_empty((5, 64), dtype=torch.float32),
    "torch.empty (5,C) f32": lambda: torch.empty((5, 64), device=dev, dtype=torch.float32),
    "new_empty_strided y": lambda: x0.new_empty_strided(fast.shape, fast.out_strides),
    "stream_counters": lambda: stream_counters(x0, fast.stats.grid[1]),
    "_key": lambda: batchnorm_eager._key(x0, m.running_mean, m.running_var, w, b, rr, True),
    "fast.run (2 launches, 3 allocs)": lambda: fast.run(x0, w, b, rr.detach(), m.running_mean, m.running_var, 0.1, 1e-5),
    "num_batches_tracked.add_(1)": lambda: m.num_batches_tracked.add_(1),
    "torch.relu_ small": lambda: torch.relu_(x0.clone()) if False else x0.relu(),
    "empty tiny kernel launch (x0.zero_ on 4 floats)": lambda: stats.zero_(),
}
stats = x0.new_empty((4,), dtype=torch.float32)
y, st = fast.run(x0, w, b, rr.detach(), m.running_mean, m.running_var, 0.1, 1e-5)
plan = fast.stats
part = x0.new_empty((3, plan.groups, 64), dtype=torch.float32)
cnt = stream_counters(x0, plan.grid[1])
prims["stats launch (general launch)"] = lambda: plan.kernel.launch(
    plan.grid, x0, part, *fast.geo_args, *plan.scalars, cnt, w, b, st, m.running_mean, m.running_var,
    m.running_mean, m.running_var, fast.geo.M, 1e-5, 0.1)
for k, fn in prims.items():
    res[f"prim/{k}"] = per_call(fn)
    print(f"{k:50s} {res[f'prim/{k}']:.2f} us", flush=True)

torch.autograd.set_multithreading_enabled(False)
g = torch.ones_like(xx)
pr = cProfile.Profile()
pr.enable()
for _ in range(N):
    m(xx, rr).backward(g)
pr.disable()
sync()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(35)
open(f"{OUT}/cprofile_layer.txt", "w").write(s.getvalue())
json.dump(res, open(f"{OUT}/resnet_host3.json", "w"), indent=1)
