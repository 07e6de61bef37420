"""Experiment (issue 18): the ResNet-18 step with the shortcuts' subsampled input (second_stride 2 on the three
batch norms that feed a downsampling block, models.resnet.ResNet.set_backend) against without (every
second_stride back to 1: the shortcut convolves the full-size output at stride 2). triton+stepgraph, one
process, the two variants interleaved over rounds, compile+stepgraph beside; batch 512 bf16 synthetic."""
import sys

import bench.resnet as bench_resnet
import models.resnet as resnet_model

original = resnet_model.ResNet.set_backend


def without(self, backend):
    out = original(self, backend)
    for m in self._norms:
        m.second_stride = 1
    return out


out = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
for rnd in range(rounds):
    for name in ("on", "off"):
        resnet_model.ResNet.set_backend = original if name == "on" else without
        backends = "triton+stepgraph,compile+stepgraph" if name == "on" else "triton+stepgraph"
        print(f"=== round {rnd} variant {name}", flush=True)
        bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                           "fused", "--backend", backends, "--bench-steps", "50", "--bench-rounds", "3",
                           "--warmup-iters", "60", "--no-progress", "--out-dir", f"{out}/{name}-{rnd}"])
resnet_model.ResNet.set_backend = original
