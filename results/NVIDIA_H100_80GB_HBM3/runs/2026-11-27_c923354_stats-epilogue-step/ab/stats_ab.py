"""Experiment (issue 18): which layers gain from the statistics epilogue in the step? triton+stepgraph with
STATS_EPILOGUE_SHAPES = none / the stem / the stem + the three 1x1 stride-2 shortcuts, compile+stepgraph beside,
one process, ResNet-18 batch 512 bf16 synthetic, rounds interleaved by running the variants twice."""
import sys
import models.resnet as resnet_model
import bench.resnet as bench_resnet

STEM = (3, 1, 3, 64)
SHORTCUTS = {(1, 2, 64, 128), (1, 2, 128, 256), (1, 2, 256, 512)}
VARIANTS = {"none": frozenset(), "stem": frozenset({STEM}), "stem+shortcuts": frozenset({STEM} | SHORTCUTS),
            "shortcuts": frozenset(SHORTCUTS)}
out = sys.argv[1]
for rnd in range(2):
    for name, shapes in VARIANTS.items():
        resnet_model.STATS_EPILOGUE_SHAPES = shapes
        backends = "triton+stepgraph,compile+stepgraph" if name == "none" else "triton+stepgraph"
        print(f"=== round {rnd} variant {name}", flush=True)
        bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                           "fused", "--backend", backends, "--bench-steps", "50", "--bench-rounds", "3",
                           "--warmup-iters", "60", "--no-progress", "--out-dir", f"{out}/{name}-{rnd}"])
