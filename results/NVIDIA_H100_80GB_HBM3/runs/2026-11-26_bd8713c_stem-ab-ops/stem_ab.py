"""The ResNet-18 stem on the flat-K Triton conv2d vs cuDNN: kernel times of the stem alone (fwd, wgrad; both
backends, tuned), then the whole training step (batch 512, bf16, synthetic) of the triton backend with the stem
on cuDNN (A) and on the flat-K conv (B): eager calls interleaved in one process, and graph replays."""
import collections, json, os, statistics
import torch
from bench import resnet as R
from triton_kernels import conv2d

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "512"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
STEPS = int(os.environ.get("STEPS", "30"))
torch.backends.cudnn.benchmark = True
res = {}
cuda = dev.type == "cuda"


def kernel_us(fn, reps=10):
    for _ in range(3):
        fn()
    if not cuda:
        return {}
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    names = collections.defaultdict(float)
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            names[e.name[:80]] += e.device_time_total / reps
    return dict(names)


# --- the stem alone (bf16, channels_last, batch B)
dt = torch.bfloat16 if cuda else torch.float32
x = torch.randn(B, 3, 32, 32, device=dev).to(dt).contiguous(memory_format=torch.channels_last)
w = (torch.randn(64, 3, 3, 3, device=dev) / 27 ** 0.5).to(dt).contiguous(memory_format=torch.channels_last)
g = torch.randn(B, 64, 32, 32, device=dev).to(dt).contiguous(memory_format=torch.channels_last)
wp = conv2d.pack_weight(w)
parts = {
    "cudnn_fwd": lambda: torch.nn.functional.conv2d(x, w, None, 1, 1),
    "cudnn_wgrad": lambda: torch.ops.aten.convolution_backward(g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                               [False, True, False]),
    "flat_fwd": lambda: conv2d.conv2d_forward(x, wp, None, None, (1, 1), (1, 1), path="flat"),
    "tiled_fwd": lambda: conv2d.conv2d_forward(x, wp, None, None, (1, 1), (1, 1), path="tiled"),
    "flat_wgrad": lambda: conv2d.conv2d_weight_grad_flat(x, g, w, (1, 1), (1, 1)),
}
# correctness first, against float64
ref_y = torch.nn.functional.conv2d(x.double(), w.double(), None, 1, 1)
w64 = w.double().requires_grad_()
torch.nn.functional.conv2d(x.double(), w64, None, 1, 1).backward(g.double())
err = lambda a, b: ((a.double() - b).norm() / b.norm()).item()
res["check"] = {"flat_fwd_rel": err(parts["flat_fwd"](), ref_y), "cudnn_fwd_rel": err(parts["cudnn_fwd"](), ref_y),
                "flat_wgrad_rel": err(parts["flat_wgrad"](), w64.grad),
                "cudnn_wgrad_rel": err(parts["cudnn_wgrad"]()[1], w64.grad)}
print("check", res["check"], flush=True)
res["stem_kernels_us"] = {}
for name, fn in parts.items():
    k = kernel_us(fn)
    res["stem_kernels_us"][name] = k
    print(f"{name:12s} {sum(k.values()):8.1f} us  " + "; ".join(f"{n[:50]} {t:.1f}" for n, t in
                                                            sorted(k.items(), key=lambda kv: -kv[1])[:3]), flush=True)

# --- the whole step
xs = torch.randn(B, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
ys = torch.randint(0, 10, (B,), device=dev)


def trainer(backend, stem):
    args = R.parse_args(["--synthetic", "--amp", "bf16" if cuda else "none", "--batch-size", str(B),
                         "--backend", backend])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    model.conv1.impl = stem
    return R.Trainer(args, model, fwd, dev, 100000)


def step_ms(tr, steps):
    if not cuda:
        for _ in range(2):
            tr.step(xs, ys)
        return 0.0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        tr.step(xs, ys)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


for mode in ("triton", "triton+graph"):
    trs = {stem: trainer(mode, stem) for stem in ("cudnn", "triton")}
    for tr in trs.values():
        step_ms(tr, 20)
    times = {stem: [] for stem in trs}
    for r in range(ROUNDS):
        for stem, tr in trs.items():
            times[stem].append(step_ms(tr, STEPS))
    res[mode] = {stem: {"median_ms": statistics.median(t), "rounds": t} for stem, t in times.items()}
    print(mode, {s: round(v["median_ms"], 3) for s, v in res[mode].items()},
          "ratio cudnn/flat %.3f" % (res[mode]["cudnn"]["median_ms"] / max(res[mode]["triton"]["median_ms"], 1e-9)),
          flush=True)
    if mode == "triton":
        k = kernel_us(lambda: trs["triton"].step(xs, ys), reps=5)
        res["step_stem_kernels_us"] = {n: t for n, t in k.items() if "flat" in n or "conv2d" in n}
        print("in-step flat kernels", res["step_stem_kernels_us"], flush=True)
    del trs
json.dump(res, open(f"{OUT}/stem_ab.json", "w"), indent=1)
