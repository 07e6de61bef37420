"""One SGD step over ResNet-18's parameters (fp32, momentum 0.9, Nesterov, wd 5e-4): GPU time from a CUDA-graph
replay, eager back-to-back calls, and the host time of one call, for triton_kernels.sgd and torch's foreach and
fused steps, called as functions and as optimizers' step(). Run from the repository root:
PYTHONPATH=. python3 <this file>."""
import json
import statistics
import time

import torch
from torch.optim.sgd import sgd as torch_sgd

from bench.cases.sgd import HYPER, parameter_shapes
from triton_kernels import sgd

shapes = parameter_shapes("resnet18")


def dense(s):
    t = torch.randn(s, device="cuda")
    return t.contiguous(memory_format=torch.channels_last) if t.ndim == 4 else t


P, G, B = ([dense(s) for s in shapes] for _ in range(3))
steps = {"triton": lambda: sgd.sgd_step_(P, G, B, **HYPER),
         "torch-fused": lambda: torch_sgd(P, G, B, **HYPER, fused=True),
         "torch-foreach": lambda: torch_sgd(P, G, B, **HYPER, foreach=True)}
optimizer_kw = {k: HYPER[k] for k in ("lr", "momentum", "weight_decay", "nesterov")}
for name, make in (("triton SGD.step", lambda ps: sgd.SGD(ps, **optimizer_kw)),
                   ("torch-fused SGD.step", lambda ps: torch.optim.SGD(ps, **optimizer_kw, fused=True))):
    ps = [torch.nn.Parameter(p.clone()) for p in P]
    for p, g in zip(ps, G):
        p.grad = g
    steps[name] = make(ps).step
rows = []
for name, step in steps.items():
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    host = []
    for _ in range(50):  # host time of one call: the GPU idle before it
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        host.append(1e3 * (time.perf_counter() - t))
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    def timed(fn, n=100):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / n

    replay = statistics.median(timed(graph.replay) for _ in range(7))
    eager = statistics.median(timed(step) for _ in range(7))
    row = {"sgd": name, "graph_replay_ms": round(replay, 4), "eager_calls_ms": round(eager, 4),
           "host_ms_median": round(statistics.median(host), 4),
           "gbps_replay": round(sum(torch.Size(s).numel() for s in shapes) * 20 / replay / 1e6, 1)}
    rows.append(row)
    print(json.dumps(row), flush=True)
