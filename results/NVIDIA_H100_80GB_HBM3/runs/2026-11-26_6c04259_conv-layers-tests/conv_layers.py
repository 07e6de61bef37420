"""Per-layer cuDNN kernel time of ResNet-18 CIFAR's convolutions at batch 512 bf16 channels_last:
forward, dgrad (input gradient) and wgrad (weight gradient) separately, kernel names included, against the
layer's FLOP and byte floors. torch.profiler device time summed per call (what a graph replay pays)."""
import collections, json, os
import torch

dev = torch.device(os.environ.get("PROBE_DEVICE", "cuda"))
OUT = os.environ.get("OUT", "/tmp")
B = int(os.environ.get("BATCH", "512"))
torch.backends.cudnn.benchmark = True
# (name, count per ResNet-18 step, C_in, C_out, k, stride, H_in)
LAYERS = [("stem", 1, 3, 64, 3, 1, 32), ("l1", 4, 64, 64, 3, 1, 32),
          ("l2.0.conv1", 1, 64, 128, 3, 2, 32), ("l2.conv", 3, 128, 128, 3, 1, 16), ("l2.ds", 1, 64, 128, 1, 2, 32),
          ("l3.0.conv1", 1, 128, 256, 3, 2, 16), ("l3.conv", 3, 256, 256, 3, 1, 8), ("l3.ds", 1, 128, 256, 1, 2, 16),
          ("l4.0.conv1", 1, 256, 512, 3, 2, 8), ("l4.conv", 3, 512, 512, 3, 1, 4), ("l4.ds", 1, 256, 512, 1, 2, 8)]
PEAK, BW = 700e12, 3.0e12
res = []


def kernel_time(fn, reps=5):
    for _ in range(3):
        fn()
    if dev.type != "cuda":
        return 0.0, {}
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    names = collections.defaultdict(float)
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            names[e.name[:100]] += e.device_time_total / reps
    return sum(names.values()), dict(names)


tot = collections.defaultdict(float)
for name, count, ci, co, k, s, h in LAYERS:
    pad = k // 2
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    x = torch.randn(B, ci, h, h, device=dev, dtype=dtype).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(co, ci, k, k, device=dev, dtype=dtype) * 0.1).contiguous(memory_format=torch.channels_last)
    y = torch.nn.functional.conv2d(x, w, None, s, pad)
    g = torch.randn_like(y)
    ho = y.shape[2]
    flops = 2 * B * ho * ho * co * ci * k * k
    bytes_x, bytes_y, bytes_w = x.numel() * 2, y.numel() * 2, w.numel() * 2
    fwd = lambda: torch.nn.functional.conv2d(x, w, None, s, pad)
    bwd = lambda mask: (lambda: torch.ops.aten.convolution_backward(g, x, w, None, [s, s], [pad, pad], [1, 1], False,
                                                                    [0, 0], 1, mask))
    row = {"layer": name, "count": count, "shape": [B, ci, co, k, s, h], "gflop": flops / 1e9}
    for part, fn, floor_bytes in (("fwd", fwd, bytes_x + bytes_y + bytes_w), ("dgrad", bwd([True, False, False]), bytes_x + bytes_y + bytes_w),
                                  ("wgrad", bwd([False, True, False]), bytes_x + bytes_y + bytes_w)):
        us, names = kernel_time(fn)
        floor = max(flops / PEAK, floor_bytes / BW) * 1e6
        row[part] = {"us": us, "floor_us": floor, "kernels": names}
        tot[part] += us * count
        print(f"{name:11s} x{count} {part:5s} {us:8.1f} us  floor {floor:6.1f} us  ({us / max(floor, 1e-9):4.1f}x)  "
              + "; ".join(f"{n[:60]} {t:.0f}" for n, t in sorted(names.items(), key=lambda kv: -kv[1])[:3]), flush=True)
    res.append(row)
print({k: round(v) for k, v in tot.items()}, "per step (stem dgrad not needed:", round(res[0]["dgrad"]["us"]), ")")
json.dump({"layers": res, "per_step_us": tot}, open(f"{OUT}/conv_layers.json", "w"), indent=1)
