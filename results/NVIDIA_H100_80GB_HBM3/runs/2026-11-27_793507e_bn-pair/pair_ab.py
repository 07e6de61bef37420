"""Experiment (issue 18): the ResNet-18 step with a block's bn2 and its shortcut's batch norm as one pair
(models.resnet.BatchNormAct2d.pairs_with, today's) against the two calls (pairs_with patched to False), each
with the subsampled shortcut input; triton+stepgraph, one process, interleaved rounds, compile+stepgraph
beside; batch 512 bf16 synthetic."""
import sys

import bench.resnet as bench_resnet
import models.resnet as resnet_model

original = resnet_model.BatchNormAct2d.pairs_with
out = sys.argv[1]
for rnd in range(2):
    for name in ("pair", "two-calls"):
        resnet_model.BatchNormAct2d.pairs_with = original if name == "pair" else (lambda self, shortcut: False)
        backends = "triton+stepgraph,compile+stepgraph" if name == "pair" else "triton+stepgraph"
        print(f"=== round {rnd} variant {name}", flush=True)
        bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                           "fused", "--backend", backends, "--bench-steps", "50", "--bench-rounds", "3",
                           "--warmup-iters", "60", "--no-progress", "--out-dir", f"{out}/{name}-{rnd}"])
resnet_model.BatchNormAct2d.pairs_with = original
