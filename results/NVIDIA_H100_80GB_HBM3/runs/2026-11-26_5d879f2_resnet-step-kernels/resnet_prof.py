"""GPU kernel time per step by category (torch.profiler, eager calls, batch 512), triton and compile; plus the
replayed step of triton+graph and compile+graph with its kernel count."""
import collections, json, os, re
import torch
from bench import resnet as R

dev = torch.device("cuda")
OUT = os.environ.get("OUT", "/tmp")
BACKENDS = os.environ.get("BACKENDS", "triton,compile,eager").split(",")
B = int(os.environ.get("BATCH", "512"))
res = {}


def cat(name):
    n = name.lower()
    for key, pat in (("bn_stats", "_bn_stats"), ("bn_apply", "_bn_apply"), ("bn_bwd_reduce", "_bn_bwd_reduce"),
                     ("bn_bwd_dx", "_bn_bwd_dx"), ("pool_head", "pool_head"),
                     ("conv_dgrad", "dgrad"), ("conv_wgrad", "wgrad"), ("conv", "conv|sm90_xmma|cutlass|implicit|nhwc|cudnn|xmma"),
                     ("foreach/optim", "foreach|multi_tensor"), ("cast/copy", "copy|convert|cast"),
                     ("inductor_triton", "^triton_"), ("elementwise", "elementwise|vectorized|reduce|fill")):
        if re.search(pat, n):
            return key
    return "other"


x = torch.randn(B, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 10, (B,), device=dev)
for b in BACKENDS:
    args = R.parse_args(["--synthetic", "--amp", "bf16", "--batch-size", str(B), "--backend", b])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, b, dev)
    tr = R.Trainer(args, model, fwd, dev, 10000)
    for _ in range(20):
        tr.step(x, y)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(10):
            tr.step(x, y)
        torch.cuda.synchronize()
    by = collections.defaultdict(float)
    cnt = collections.Counter()
    names = collections.defaultdict(float)
    first = last = None
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            d = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            by[cat(e.name)] += d / 10
            cnt[cat(e.name)] += 1
            names[e.name[:90]] += d / 10
    tot = sum(by.values())
    res[b] = {"kernel_us_per_step": dict(by), "kernels_per_step": {k: v / 10 for k, v in cnt.items()},
              "top": sorted(names.items(), key=lambda kv: -kv[1])[:25]}
    print(f"== {b}: kernel time per step {tot / 1e3:.3f} ms, kernels {sum(cnt.values()) / 10:.0f}", flush=True)
    for k, v in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"   {k:16s} {v / 1e3:7.3f} ms  ({cnt[k] / 10:.0f} kernels)", flush=True)
    del tr, model, fwd
json.dump(res, open(f"{OUT}/resnet_prof.json", "w"), indent=1)
