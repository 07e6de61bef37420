"""How repeatable is the batch-norm reductions' tuning? The backward-sums kernel of ResNet-18's 4x4 layer (512 x 512
x 4 x 4, bf16, relu) and the statistics kernel of the 32x32 layer, tuned 3 times from an empty cache under each way
of timing a trial: today's (256 MB written before each of 10 reps), a 256 MB read instead, no flush. Prints each config's trial time per tuning and the pick."""
import functools
import json
import statistics
import sys
from pathlib import Path

import torch

from triton_kernels import batchnorm, runtime

tmp = Path("/tmp/tuner_noise")
tmp.mkdir(exist_ok=True)
orig = runtime.cuda_time_ms
_READ = None


def read_flush_time(fn, *, warmup=3, rep=10, flush_l2=True):
    global _READ
    if _READ is None:
        _READ = torch.ones(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    timer = runtime.CudaEventTimer()
    for _ in range(rep):
        _READ.amax()
        with timer.span():
            fn()
    return timer.times_ms()


METHODS = {"write-flush": orig, "read-flush": read_flush_time,
           "no-flush": functools.partial(orig, flush_l2=False)}


def case(kind):
    torch.manual_seed(0)
    if kind == "bwd_reduce 4x4":
        shape = (512, 512, 4, 4)
    else:
        shape = (512, 64, 32, 32)
    mk = lambda: torch.randn(shape, device="cuda").bfloat16().contiguous(memory_format=torch.channels_last)
    x, dy = mk(), mk()
    C = shape[1]
    w, b = torch.rand(C, device="cuda") + 0.5, torch.randn(C, device="cuda")
    rm, rv = torch.zeros(C, device="cuda"), torch.ones(C, device="cuda")
    y, stats, _, _ = batchnorm.batch_norm_train_forward(x, w, b, None, rm, rv, 0.1, 1e-5, True, True)
    if kind == "bwd_reduce 4x4":
        return "bwd_reduce", lambda: batchnorm.batch_norm_train_backward(dy, x, None, stats, True, True, False)
    return "stats", lambda: batchnorm.batch_norm_train_forward(x, w, b, None, rm, rv, 0.1, 1e-5, True, True)


for kind in ("bwd_reduce 4x4", "stats 32x32"):
    name, call = case(kind)
    tuner = batchnorm._tuners[name]
    for method, timer in METHODS.items():
        picks, table = [], {}
        for t in range(3):
            runtime.cuda_time_ms = timer
            path = tmp / f"{name}-{method}-{t}.json"
            tuner.cache_path = lambda path=path: path
            tuner.clear_memory()
            batchnorm._PLANS.clear()
            call()
            torch.cuda.synchronize()
            data = json.loads(path.read_text())
            entry = next(e for k, e in data.items() if k.startswith("{"))
            picks.append(json.dumps(entry["best"]["kwargs"], sort_keys=True) + f" w{entry['best']['num_warps']}"
                         f" s{entry['best']['num_stages']}")
            for tr in entry["trials"]:
                c = tr["config"]
                key = json.dumps(c["kwargs"], sort_keys=True) + f" w{c['num_warps']} s{c['num_stages']}"
                table.setdefault(key, []).append(tr["ms"] * 1e3 if tr["ms"] else float("nan"))
        runtime.cuda_time_ms = orig
        spread = [max(v) / min(v) for v in table.values()]
        print(f"== {kind}, {method}: median spread (max/min over 3 tunings) {statistics.median(spread):.2f}, "
              f"max {max(spread):.2f}", flush=True)
        for k, v in table.items():
            print(f"   {k:75s} " + " ".join(f"{t:7.1f}" for t in v))
        for p in picks:
            print(f"   pick: {p}  (its times: {' '.join(f'{t:.1f}' for t in table[p])})")
