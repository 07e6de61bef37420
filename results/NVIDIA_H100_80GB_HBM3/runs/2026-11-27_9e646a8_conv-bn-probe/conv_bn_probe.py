"""Experiment (ResNet, issue 18): would batch norm's statistics from the conv's epilogue shorten the step?

    PYTHONPATH=. python3 <this folder>/conv_bn_probe.py [--batch 512] [--out DIR]   (from the repository root)

Today each ResNet-18 convolution is followed by batch norm's statistics kernel, which reads the conv's output
once more. The tiled conv2d can write per-tile partial statistics in its epilogue instead (conv2d_forward's
``stats``), at the cost of running our conv rather than cuDNN's (or the transposed kernel) forward. Per layer
shape (batch, bf16, channels_last, every ResNet-18 CIFAR conv that a batch norm follows), graph replays with
the L2 flushed:

    current     the forward the triton backend runs now (cuDNN's; the stem's flat-K and the 512-channel
                layers' transposed kernel are ours) + the statistics kernel over its output
    fused       the tiled (stem: flat-K) kernel with the statistics epilogue
    merge       conv2d.merge_tile_stats in torch ops (a production merge would be one small kernel)

and the per-step sum over the layers (each shape times its count in ResNet-18). ``gain_bound_ms`` =
sum(current - fused) is what the fusion could take off a step at most; 1.15x over compile needs ~0.13 ms
(results/NOTES.md, session 29). Every fused output and its statistics are checked against the unfused
output. Its result is in this folder's README.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

import torch
from torch.nn import functional

from bench.harness import time_call
from triton_kernels import conv2d
from triton_kernels.batchnorm import _launch_planned, _prepare, _stats_flags
from triton_kernels.batchnorm_kernels import _bn_stats_kernel

# (name, C_in, C_out, input H = W, kernel, stride, layers of this shape in ResNet-18)
LAYERS = [("stem 3->64", 3, 64, 32, 3, 1, 1), ("64 3x3", 64, 64, 32, 3, 1, 4),
          ("64->128 s2", 64, 128, 32, 3, 2, 1), ("64->128 1x1 s2", 64, 128, 32, 1, 2, 1),
          ("128 3x3", 128, 128, 16, 3, 1, 3), ("128->256 s2", 128, 256, 16, 3, 2, 1),
          ("128->256 1x1 s2", 128, 256, 16, 1, 2, 1), ("256 3x3", 256, 256, 8, 3, 1, 3),
          ("256->512 s2", 256, 512, 8, 3, 2, 1), ("256->512 1x1 s2", 256, 512, 8, 1, 2, 1),
          ("512 3x3", 512, 512, 4, 3, 1, 3)]


def statistics_kernel(y: torch.Tensor, weight, bias, running_mean, running_var) -> torch.Tensor:
    """Batch norm's statistics launch alone (the first half of batchnorm.batch_norm_train_forward)."""
    (y,), _, geo = _prepare(y)
    stats = torch.empty((5, geo.C), device=y.device, dtype=torch.float32)
    tail = (weight, bias, stats, running_mean, running_var, running_mean, running_var, geo.M, 1e-5, 0.1)
    _launch_planned("stats", _bn_stats_kernel, geo, (y,), y.dtype, _stats_flags(True, True, True), y.device,
                    None, tail)
    return stats


def replay_ms(fn, rep: int = 60) -> float:
    """Median ms of a CUDA-graph replay of fn (captured after two eager calls), the L2 flushed before each."""
    fn(), fn()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return statistics.median(time_call(graph.replay, rep, flush=True))


def probe(name: str, c_in: int, c_out: int, size: int, k: int, stride: int, batch: int,
          device=torch.device("cuda"), dtype=torch.bfloat16, timer=replay_ms) -> dict:
    x = torch.randn(batch, c_in, size, size, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(c_out, c_in, k, k, device=device) / (c_in * k * k) ** 0.5).to(dtype).contiguous(
        memory_format=torch.channels_last)
    bn = [torch.ones(c_out, device=device), torch.zeros(c_out, device=device), torch.zeros(c_out, device=device),
          torch.ones(c_out, device=device)]
    pad, path = k // 2, ("flat" if conv2d.uses_flat(c_in, k, k) else "tiled")
    ours = path == "flat" or conv2d.transposed_wins(x) and stride == 1 and k == 3
    current_conv = (lambda: conv2d.conv2d(x, w, None, stride, pad)) if ours else (
        lambda: functional.conv2d(x, w, None, stride, pad))
    y = current_conv()
    packed = conv2d.pack_weight(w)
    fused = lambda: conv2d.conv2d_forward(x, packed, None, None, (stride, stride), (pad, pad),  # noqa: E731
                                          stats=True, path=path)
    z, part = fused()
    M = z.shape[0] * z.shape[2] * z.shape[3]
    mean, var = conv2d.merge_tile_stats(part, M)
    zf = z.float()
    row = {"layer": name, "current_kernel": ("ours" if ours else "cudnn"), "fused_kernel": path,
           "conv_us": 1e3 * timer(current_conv), "stats_us": 1e3 * timer(lambda: statistics_kernel(y, *bn)),
           "fused_us": 1e3 * timer(fused), "merge_us": 1e3 * timer(lambda: conv2d.merge_tile_stats(part, M)),
           "z_rel_err": float((zf - y.float()).abs().max() / y.float().abs().max()),
           "mean_err": float((mean - zf.mean((0, 2, 3))).abs().max()),
           "var_rel_err": float(((var - zf.var((0, 2, 3), unbiased=False)).abs() / zf.var((0, 2, 3))).max())}
    row["gain_us"] = row["conv_us"] + row["stats_us"] - row["fused_us"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--out", default=None, help="folder for conv_bn_probe.json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("conv_bn_probe times GPU kernels: it needs a CUDA device")
    torch.backends.cudnn.benchmark = True
    rows = []
    for name, c_in, c_out, size, k, stride, count in LAYERS:
        row = probe(name, c_in, c_out, size, k, stride, args.batch)
        row["count"] = count
        rows.append(row)
        print(json.dumps({key: round(v, 3) if isinstance(v, float) else v for key, v in row.items()}), flush=True)
    total = {"gain_bound_ms": sum(r["count"] * r["gain_us"] for r in rows) / 1e3,
             "gain_bound_where_positive_ms": sum(r["count"] * max(r["gain_us"], 0.0) for r in rows) / 1e3,
             "merge_ms": sum(r["count"] * r["merge_us"] for r in rows) / 1e3}
    print(json.dumps({key: round(v, 4) for key, v in total.items()}))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "conv_bn_probe.json"), "w") as f:
            json.dump({"batch": args.batch, "device": torch.cuda.get_device_name(), "rows": rows, **total}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
