"""Experiment (issue 18): the ResNet-18 step with the pair's backward in two launches (today's
_FastPair.backward: PAIR reduce and dx kernels) against the block's two launches then the shortcut's two
(patched back here), triton+stepgraph, one process, interleaved rounds, compile+stepgraph beside; batch 512
bf16 synthetic."""
import sys

import bench.resnet as bench_resnet
from triton_kernels import batchnorm_eager

fused = batchnorm_eager._FastPair.backward


def sequential(self, ctx, dy, dy2=None):
    x, bits, stats, res_x, res_stats = ctx.saved_tensors
    need = [bool(n) for n in ctx.needs_input_grad[1:7]]
    main = self.main
    dx, g, dwb, _, _ = main.run_backward(dy, x, bits, stats, need[0], True, dy2)
    dres_x, _, res_dwb, _, _ = self.res.run_backward(g, res_x, None, res_stats, need[3], False)
    return (dx, *main.param_grads(dwb, need[1], need[2]), dres_x,
            *self.res.param_grads(res_dwb, need[4], need[5])) + (None,) * 8


out = sys.argv[1]
for rnd in range(2):
    for name in ("fused-backward", "sequential-backward"):
        batchnorm_eager._FastPair.backward = fused if name == "fused-backward" else sequential
        backends = "triton+stepgraph,compile+stepgraph" if name == "fused-backward" else "triton+stepgraph"
        print(f"=== round {rnd} variant {name}", flush=True)
        bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                           "fused", "--backend", backends, "--bench-steps", "50", "--bench-rounds", "3",
                           "--warmup-iters", "60", "--no-progress", "--out-dir", f"{out}/{name}-{rnd}"])
batchnorm_eager._FastPair.backward = fused
