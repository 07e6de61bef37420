"""Experiment (issue 18): the batch-norm reductions' tile loop pipelined (tl.range's num_stages from the config:
the next tiles' loads in flight as asynchronous copies into shared memory) against the same kernels unpipelined
(every reduction config at 1 stage, as before f61a1bf), ResNet-18 step, triton+stepgraph, one process,
interleaved rounds, compile+stepgraph beside; batch 512 bf16 synthetic. Each variant tunes the two reductions
into a cache file of its own (in OUT); the pipelined variant's trials (the tuner's hot-L2 times, every config of
both kinds) then give each key's best 1-stage and best pipelined time. Run: python pipeline_ab.py OUT"""
import json
import sys
from pathlib import Path

import bench.resnet as bench_resnet
from triton_kernels import batchnorm, batchnorm_eager
from triton_kernels.runtime import Config

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
pipelined = batchnorm._reduce_configs


def one_stage(geo):
    configs = []
    for c in pipelined(geo):
        c1 = Config(dict(c.kwargs), c.num_warps, 1)
        if c1 not in configs:
            configs.append(c1)
    return configs


VARIANTS = {"pipelined": pipelined, "one-stage": one_stage}
TUNERS = [batchnorm._tuners["stats"], batchnorm._tuners["bwd_reduce"]]


def use(name):
    batchnorm._reduce_configs = VARIANTS[name]
    for tuner in TUNERS:
        tuner.clear_memory()
        tuner.cache_path = lambda tuner=tuner, name=name: out / f"{tuner.name}-{name}.json"
    batchnorm._PLANS.clear()
    batchnorm_eager._FAST.clear()


for rnd in range(2):
    for name in ("pipelined", "one-stage"):
        use(name)
        backends = "triton+stepgraph,compile+stepgraph" if name == "pipelined" else "triton+stepgraph"
        print(f"=== round {rnd} variant {name}", flush=True)
        bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                           "fused", "--backend", backends, "--bench-steps", "50", "--bench-rounds", "3",
                           "--warmup-iters", "60", "--no-progress", "--out-dir", f"{out}/{name}-{rnd}"])

for tuner in TUNERS:
    path = out / f"{tuner.name}-pipelined.json"
    if not path.exists():
        continue
    for key, entry in json.loads(path.read_text()).items():
        best = {}
        for trial in entry["trials"]:
            ms = trial.get("final_ms") or trial.get("ms")
            if ms is None:
                continue
            kind = "1-stage" if trial["config"]["num_stages"] == 1 else "pipelined"
            if kind not in best or ms < best[kind][0]:
                best[kind] = (ms, trial["config"])
        k = entry["key"]
        shape = f"{k['pixels']}px x {k['channels']}ch" if isinstance(k, dict) else str(k)
        one, pipe = best.get("1-stage", (float("nan"), None)), best.get("pipelined", (float("nan"), None))
        print(f"{tuner.name:20s} {shape:22s} 1-stage {one[0] * 1e3:7.1f} us  pipelined {pipe[0] * 1e3:7.1f} us  "
              f"({one[0] / pipe[0]:.2f}x)  picked {entry['best']}  flags {k.get('flags') if isinstance(k, dict) else ''}")
