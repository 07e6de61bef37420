"""Host cost of the stem conv per eager call (batch 8: GPU work negligible), under bf16 autocast with an fp32
weight as in the ResNet step: cuDNN (functional.conv2d) vs the Triton flat-K conv, forward and forward +
weight gradient (autograd.grad), interleaved rounds, median per call."""
import json, os, statistics, time
import torch
from torch.nn import functional
from models.resnet import CONV_IMPLEMENTATIONS, Conv2d

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
cuda = dev.type == "cuda"
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "8"))
N_CALLS, ROUNDS = (200, 7) if cuda else (3, 1)
conv = Conv2d(3, 64, 3, 1, 1, bias=False).to(dev).to(memory_format=torch.channels_last)
x = torch.randn(B, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
amp = torch.bfloat16 if cuda else torch.float16
res = {}


def sync():
    if cuda:
        torch.cuda.synchronize()


def fwd(impl):
    with torch.autocast(dev.type, dtype=amp):
        return CONV_IMPLEMENTATIONS[impl](conv, x)


def fwdbwd(impl):
    y = fwd(impl)
    return torch.autograd.grad(y, conv.weight, torch.ones_like(y))


for name, fn in (("fwd", fwd), ("fwdbwd", fwdbwd)):
    times = {impl: [] for impl in ("cudnn", "triton")}
    for impl in times:
        for _ in range(20):
            fn(impl)
    sync()
    for _ in range(ROUNDS):
        for impl in times:
            sync()
            t0 = time.perf_counter()
            for _ in range(N_CALLS):
                fn(impl)
            t1 = time.perf_counter()
            sync()
            times[impl].append((t1 - t0) / N_CALLS * 1e6)
    res[name] = {impl: {"median_us": statistics.median(t), "rounds": t} for impl, t in times.items()}
    print(name, {impl: round(v["median_us"], 1) for impl, v in res[name].items()}, flush=True)
json.dump(res, open(f"{OUT}/stem_host.json", "w"), indent=1)
