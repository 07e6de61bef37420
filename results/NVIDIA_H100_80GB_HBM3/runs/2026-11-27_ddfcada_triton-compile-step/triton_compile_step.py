"""Experiment (issue 18): the triton model compiled by torch.compile (inductor fuses what is not ours: the loss,
the casts, the glue) inside one CUDA graph per step, "triton+compile+stepgraph", beside triton+stepgraph and
compile+stepgraph; ResNet-18, batch 512, bf16, synthetic, one process, bench.resnet's step timing."""
import sys
import torch
import bench.resnet as bench_resnet
import bench.resnet_tools as resnet_tools

NEW = "triton+compile+stepgraph"
bench_resnet.RUN_BACKENDS = bench_resnet.RUN_BACKENDS + (NEW,)
original = bench_resnet.build_model


def build_model(args, backend, device, dist=None):
    if backend != NEW:
        return original(args, backend, device, dist)
    model, step = original(args, "triton+stepgraph", device, dist)  # model is the triton model; step a StepGraph
    step.module = torch.compile(step.module)  # captured inside the step's graph, as compile+stepgraph's
    return model, step


bench_resnet.build_model = build_model
resnet_tools.build_model = build_model
sys.exit(bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                            "fused", "--backend", f"triton+stepgraph,{NEW},compile+stepgraph", "--bench-steps", "50",
                            "--bench-rounds", "5", "--warmup-iters", "100", "--no-progress", "--out-dir", sys.argv[1]]))
