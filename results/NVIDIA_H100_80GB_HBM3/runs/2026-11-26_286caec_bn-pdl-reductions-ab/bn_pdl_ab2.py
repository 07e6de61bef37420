"""Experiment: the batch norm's reductions also launched as programmatic dependents of the kernel ahead (they wait
for it at their start: the gain can only be the launch's latency), against the production chaining (only the apply
and dx kernels), same configs, alternating CUDA-graph replays of the ResNet-18 step."""
import os, statistics, json
import torch
from bench import resnet as R
from triton_kernels import batchnorm as bn, batchnorm_eager as bne
import triton_kernels.launcher as L

dev = torch.device("cuda", 0)
OUT = os.environ.get("OUT", "/tmp")
ROUNDS, STEPS = 9, 30
torch.backends.cudnn.benchmark = True
os.environ["TRITON_PLAYGROUND_CACHE"] = f"/tmp/bnpdl2_{os.getpid()}"
_bind = L.bind


def bind_all(kernel, **kw):
    if kw.get("PDL") and kernel.__name__ in ("_bn_stats_kernel", "_bn_bwd_reduce_kernel"):
        kw["launch_pdl"] = True
    return _bind(kernel, **kw)


xs = torch.randn(512, 3, 32, 32, device=dev).contiguous(memory_format=torch.channels_last)
ys = torch.randint(0, 10, (512,), device=dev)


def trainer():
    args = R.parse_args(["--synthetic", "--model", "resnet18", "--amp", "bf16", "--batch-size", "512",
                         "--backend", "triton+graph"])
    torch.manual_seed(0)
    model, fwd = R.build_model(args, "triton+graph", dev)
    return R.Trainer(args, model, fwd, dev, 100000)


def step_ms(tr, steps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); s.record()
    for _ in range(steps):
        tr.step(xs, ys)
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / steps


graphs = {}
for variant in ("apply_dx", "all"):
    bn._PLANS.clear(); bne._FAST.clear(); bne._FAST_INFER.clear()
    bn.bind = bind_all if variant == "all" else _bind
    graphs[variant] = trainer()
    step_ms(graphs[variant], 20)
times = {v: [] for v in graphs}
for _ in range(ROUNDS):
    for v, tr in graphs.items():
        times[v].append(step_ms(tr, STEPS))
out = {v: {"median_ms": statistics.median(t), "rounds": t} for v, t in times.items()}
for v, r in out.items():
    print(f"triton+graph {v:9s} {r['median_ms']:.3f} ms  rounds {[round(x, 3) for x in r['rounds']]}", flush=True)
json.dump(out, open(f"{OUT}/bn_pdl_ab2.json", "w"), indent=1)
