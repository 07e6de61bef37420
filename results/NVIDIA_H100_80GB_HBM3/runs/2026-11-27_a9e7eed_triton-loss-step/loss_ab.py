"""Experiment (issue 18): the ResNet-18 step of the triton backend with the Triton cross-entropy (today's
bench.resnet.build_criterion) against torch's (patched back), triton+stepgraph, one process, interleaved
rounds, compile+stepgraph beside; batch 512 bf16 synthetic, label smoothing 0 (bench's default)."""
import sys

import torch

import bench.resnet as bench_resnet

original = bench_resnet.build_criterion


def torch_loss(args, backend="eager"):
    return torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)


out = sys.argv[1]
for rnd in range(2):
    for name in ("triton-loss", "torch-loss"):
        bench_resnet.build_criterion = original if name == "triton-loss" else torch_loss
        backends = "triton+stepgraph,compile+stepgraph" if name == "triton-loss" else "triton+stepgraph"
        print(f"=== round {rnd} variant {name}", flush=True)
        bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                           "fused", "--backend", backends, "--bench-steps", "50", "--bench-rounds", "3",
                           "--warmup-iters", "60", "--no-progress", "--out-dir", f"{out}/{name}-{rnd}"])
bench_resnet.build_criterion = original
