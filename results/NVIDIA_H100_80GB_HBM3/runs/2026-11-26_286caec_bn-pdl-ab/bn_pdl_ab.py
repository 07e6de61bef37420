"""The batch norm's apply and dx kernels as programmatic dependent launches of the reductions ahead of them ("on")
against plain launches ("off"), in one process: per variant the tuner runs from an empty cache, the step's kernels
are profiled by category (eager calls; with PDL a dependent kernel's time includes its wait), and a triton+graph
trainer is captured; then the two graphs' replays alternate, ROUNDS rounds of STEPS steps. SAME_CONFIGS=1: the tuner
runs once (first variant) and the second variant keeps its picks, so the two differ only in the launch."""
import collections, json, os, re, statistics
import torch
from bench import resnet as R
from triton_kernels import batchnorm as bn, batchnorm_eager as bne

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
cuda = dev.type == "cuda"
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "512"))
ROUNDS = int(os.environ.get("ROUNDS", "7"))
STEPS = int(os.environ.get("STEPS", "30"))
WIDTHS = os.environ.get("WIDTHS")
MODEL = os.environ.get("MODEL", "resnet18")
torch.backends.cudnn.benchmark = True
res = {}


SAME = os.environ.get("SAME_CONFIGS") == "1"


def reset(variant):
    bn._PLANS.clear()
    bne._FAST.clear()
    bne._FAST_INFER.clear()
    for t in bn._tuners.values():
        if not (SAME and variant == "on"):
            t._memory.clear()
        t.trials.clear()
    if not (SAME and variant == "on"):
        os.environ["TRITON_PLAYGROUND_CACHE"] = f"/tmp/bnpdl_cache_{variant}_{os.getpid()}"
    for d in (torch.device("cuda", 0), torch.device("cuda")) if cuda else ():
        bn._PDL[d] = variant == "on"


def cat(name):
    n = name.lower()
    for key, pat in (("bn_stats", "_bn_stats"), ("bn_apply", "_bn_apply"), ("bn_bwd_reduce", "_bn_bwd_reduce"),
                     ("bn_bwd_dx", "_bn_bwd_dx"), ("conv", "conv|sm90_xmma|cutlass|implicit|nhwc|cudnn|xmma|dgrad|wgrad")):
        if re.search(pat, n):
            return key
    return "other"


xs = torch.randn(B, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
ys = torch.randint(0, 10, (B,), device=dev)


def trainer(backend):
    argv = ["--synthetic", "--model", MODEL, "--amp", "bf16" if cuda else "none", "--batch-size", str(B),
            "--backend", backend]
    if WIDTHS:
        argv += ["--widths", WIDTHS]
    args = R.parse_args(argv)
    torch.manual_seed(0)
    model, fwd = R.build_model(args, backend, dev)
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
    by, cnt = collections.defaultdict(float), collections.Counter()
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            by[cat(e.name)] += e.device_time_total / reps
            cnt[cat(e.name)] += 1 / reps
    return {"kernel_us_per_step": dict(by), "kernels_per_step": dict(cnt)}


graphs = {}
for variant in ("off", "on"):
    reset(variant)
    tr = trainer("triton")
    prof = res[f"profile_{variant}"] = profile(tr)
    res[f"picks_{variant}"] = {name: {k: sorted(v, key=lambda r: r.get("ms", 1e9))[:3] for k, v in t.trials.items()}
                               for name, t in bn._tuners.items() if name in ("stats", "bwd_reduce")}
    if prof:
        tot = sum(prof["kernel_us_per_step"].values())
        print(f"== {variant}: kernel time per step {tot / 1e3:.3f} ms", flush=True)
        for k, v in sorted(prof["kernel_us_per_step"].items(), key=lambda kv: -kv[1]):
            print(f"   {k:14s} {v:8.1f} us  ({prof['kernels_per_step'][k]:.0f} kernels)", flush=True)
    for name in ("stats", "bwd_reduce"):
        for k, rows in res[f"picks_{variant}"][name].items():
            best = rows[0] if rows else {}
            print(f"   {name:10s} {k[:90]}  best {best.get('config')} {best.get('ms')}", flush=True)
    del tr
    graphs[variant] = trainer("triton+graph" if cuda else "triton")
    step_ms(graphs[variant], 20)

times = {v: [] for v in graphs}
for r in range(ROUNDS):
    for v, tr in graphs.items():
        times[v].append(step_ms(tr, STEPS))
res["triton+graph"] = {v: {"median_ms": statistics.median(t), "rounds": t} for v, t in times.items()}
base = res["triton+graph"]["off"]["median_ms"]
for v, t in times.items():
    med = res["triton+graph"][v]["median_ms"]
    print(f"triton+graph {v:9s} {med:7.3f} ms  off-this {base - med:+.3f} ms  rounds {[round(x, 3) for x in t]}",
          flush=True)
json.dump(res, open(f"{OUT}/bn_pdl_ab_{MODEL}{'_same' if SAME else ''}.json", "w"), indent=1, default=str)
