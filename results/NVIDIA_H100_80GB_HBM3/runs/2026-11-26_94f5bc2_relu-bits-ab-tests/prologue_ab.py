"""Variants of the triton backend's step: "base" (each layer casts its weight and counts its batches; autograd
adds the two gradients of each block input), "prologue" (every BN counter in one foreach add, every cuDNN conv
weight cast in one launch and their gradients cast back in one), "both" (prologue + the batch norms' two
aliased outputs, whose backward adds the two gradients in its kernels). Kernel time per step by category
(torch.profiler, eager calls) per variant, then the whole step, variants interleaved in one process (graph
replays, then eager calls)."""
import collections, json, os, re, statistics
import torch
from bench import resnet as R

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
cuda = dev.type == "cuda"
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "512"))
ROUNDS = int(os.environ.get("ROUNDS", "7"))
STEPS = int(os.environ.get("STEPS", "30"))
WIDTHS = os.environ.get("WIDTHS")
torch.backends.cudnn.benchmark = True
res = {}


def cat(name):
    n = name.lower()
    for key, pat in (("bn_stats", "_bn_stats"), ("bn_apply", "_bn_apply"), ("bn_bwd_reduce", "_bn_bwd_reduce"),
                     ("bn_bwd_dx", "_bn_bwd_dx"), ("pool_head", "pool_head"), ("flat_conv", "conv2d_flat|sum_partials"),
                     ("conv_dgrad", "dgrad"), ("conv_wgrad", "wgrad"), ("conv", "conv|sm90_xmma|cutlass|implicit|nhwc|cudnn|xmma"),
                     ("foreach/optim", "foreach_add|multi_tensor"), ("cast/copy", "copy|convert|cast"),
                     ("elementwise", "elementwise|vectorized|reduce|fill")):
        if re.search(pat, n):
            return key
    return "other"


xs = torch.randn(B, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
ys = torch.randint(0, 10, (B,), device=dev)


VARIANTS = {"base": (False, False), "prologue": (True, False), "both": (True, True)}


def trainer(backend, variant):
    prologue, two = VARIANTS[variant]
    argv = ["--synthetic", "--amp", "bf16" if cuda else "none", "--batch-size", str(B), "--backend", backend]
    if WIDTHS:
        argv += ["--widths", WIDTHS]
    args = R.parse_args(argv)
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
    model.one_launch_prologue = prologue
    for m in model.modules():
        if hasattr(m, "two_outputs"):
            m.two_outputs = m.two_outputs and two
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


def profile(tr, reps=10):
    for _ in range(5):
        tr.step(xs, ys)
    if not cuda:
        return {}
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            tr.step(xs, ys)
        torch.cuda.synchronize()
    by, cnt, names = collections.defaultdict(float), collections.Counter(), collections.defaultdict(float)
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by[cat(e.name)] += e.device_time_total / reps
            cnt[cat(e.name)] += 1 / reps
            names[e.name[:90]] += e.device_time_total / reps
    return {"kernel_us_per_step": dict(by), "kernels_per_step": dict(cnt),
            "top": sorted(names.items(), key=lambda kv: -kv[1])[:40]}


for variant in ("both", "base"):
    tr = trainer("triton", variant)
    prof = res[f"profile_{variant}"] = profile(tr)
    if prof:
        tot = sum(prof["kernel_us_per_step"].values())
        print(f"== {variant}: kernel time per step {tot / 1e3:.3f} ms, "
              f"{sum(prof['kernels_per_step'].values()):.0f} kernels", flush=True)
        for k, v in sorted(prof["kernel_us_per_step"].items(), key=lambda kv: -kv[1]):
            print(f"   {k:16s} {v:8.1f} us  ({prof['kernels_per_step'][k]:.0f} kernels)", flush=True)
    del tr

for mode in os.environ.get("MODES", "triton+graph,triton").split(","):
    trs = {v: trainer(mode, v) for v in VARIANTS}
    for tr in trs.values():
        step_ms(tr, 20)
    times = {p: [] for p in trs}
    for r in range(ROUNDS):
        for p, tr in trs.items():
            times[p].append(step_ms(tr, STEPS))
    res[mode] = {v: {"median_ms": statistics.median(t), "rounds": t} for v, t in times.items()}
    base = res[mode]["base"]["median_ms"]
    for v, t in times.items():
        med = res[mode][v]["median_ms"]
        print(f"{mode:13s} {v:9s} {med:7.3f} ms  base-this {base - med:+.3f} ms  rounds {[round(x, 3) for x in t]}",
              flush=True)
    del trs
json.dump(res, open(f"{OUT}/prologue_ab.json", "w"), indent=1)
