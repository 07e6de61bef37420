"""Probe: cuDNN's ResNet-18 3x3 stride-1 convolutions (batch 512, bf16, channels_last): forward, data and weight
gradient, once each inside a cudaProfilerStart/Stop range, for ncu's L2 / DRAM / tensor-pipe counters."""
import torch

torch.backends.cudnn.benchmark = True
dev = torch.device("cuda")
cases = []
for C, H in ((64, 32), (128, 16), (256, 8), (512, 4)):
    x = torch.randn(512, C, H, H, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    w = (torch.randn(C, C, 3, 3, device=dev) / (9 * C) ** 0.5).to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    w.requires_grad_(True)
    g = torch.randn(512, C, H, H, device=dev, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    cases.append((C, H, x, w, g))


def run(C, H, x, w, g):
    y = torch.nn.functional.conv2d(x, w, None, 1, 1)
    y.backward(g)


for c in cases:  # cuDNN's benchmark picks, then warm
    for _ in range(3):
        run(*c)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for c in cases:
    torch.cuda.nvtx.range_push(f"conv C={c[0]} H={c[1]}")
    run(*c)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
for C, H, *_ in cases:
    print(f"C={C} H={H}: input {512 * C * H * H * 2 / 1e6:.1f} MB, {2 * 512 * H * H * C * C * 9 / 1e9:.1f} GFLOP per pass")
