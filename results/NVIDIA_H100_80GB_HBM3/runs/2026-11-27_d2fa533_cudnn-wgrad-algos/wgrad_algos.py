"""Experiment (issue 18): cuDNN's weight and input gradients at every ResNet-18 CIFAR conv (batch 512, bf16,
channels_last) under three algorithm searches: the default (benchmark, limit 10), benchmark_limit=0 (every
algorithm), deterministic=True. Kernel time per call from torch.profiler (the mean of 10 calls, every kernel
of the call: the split-K workspace initialisation and reduction included). One setting per process:
`python wgrad_algos.py default|all|deterministic`."""
import sys
from collections import defaultdict

import torch

LAYERS = [  # name, x shape, C_out, kernel, stride (the shortcuts as they run now: 1x1 stride 1 on y[::2, ::2])
    ("l1", (512, 64, 32, 32), 64, 3, 1), ("l2.0.conv1", (512, 64, 32, 32), 128, 3, 2),
    ("l2", (512, 128, 16, 16), 128, 3, 1), ("l3.0.conv1", (512, 128, 16, 16), 256, 3, 2),
    ("l3", (512, 256, 8, 8), 256, 3, 1), ("l4.0.conv1", (512, 256, 8, 8), 512, 3, 2),
    ("l4", (512, 512, 4, 4), 512, 3, 1), ("l2.ds", (512, 64, 16, 16), 128, 1, 1),
    ("l3.ds", (512, 128, 8, 8), 256, 1, 1), ("l4.ds", (512, 256, 4, 4), 512, 1, 1)]

mode = sys.argv[1]
torch.backends.cudnn.benchmark = True
if mode == "all":
    torch.backends.cudnn.benchmark_limit = 0
if mode == "deterministic":
    torch.backends.cudnn.deterministic = True
dev = "cuda"
for name, shape, cout, k, s in LAYERS:
    x = torch.randn(shape, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(cout, shape[1], k, k, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    pad = k // 2
    y = torch.nn.functional.conv2d(x, w, None, s, pad)
    dy = torch.randn_like(y)
    results = {}
    for what, mask in (("dgrad", [True, False, False]), ("wgrad", [False, True, False])):
        def call():
            return torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [pad, pad], [1, 1], False, [0, 0], 1,
                                                       mask)
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                call()
            torch.cuda.synchronize()
        per = defaultdict(float)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name[:60]] += e.device_time / 10
        results[what] = per
    line = f"{mode:13s} {name:11s}"
    for what, per in results.items():
        line += f"  {what} {sum(per.values()):7.1f} us ["
        line += "; ".join(f"{n} {t:.1f}" for n, t in sorted(per.items(), key=lambda kv: -kv[1])) + "]"
    print(line, flush=True)
