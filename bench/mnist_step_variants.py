"""Time the fused softmax-regression step per launch mode and per tuning config, on the real MNIST shape.

    python -m bench.mnist_step_variants [--data DIR] [--batch 128] [--epochs 5] [--out DIR]

For every config of triton_kernels.softmax_regression.STEP_CONFIGS (K slice per program -> number of
programs, warps), x in fp32 and uint8, prints microseconds per training step for:
  graph-step    one single-step launch captured in a CUDA graph, replayed once per step (triton+graph)
  persistent    one launch per epoch running every step (grid barrier per step; triton+persistent)
  graph-epoch   that launch captured in a graph, replayed once per epoch (triton+epoch-graph)
  python-step   one launch per step from Python (host launch overhead included; triton)
Each figure is the median over --epochs epochs (CUDA events around a whole epoch, divided by its steps),
after a warm-up epoch. With --out, also writes the table as JSON (mnist_step_variants.json).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import triton_kernels  # noqa: F401
from triton_kernels import softmax_regression as S
from triton_kernels.runtime import device_name


def _time_epochs(fn, epochs: int) -> list[float]:
    fn()  # warm-up
    torch.cuda.synchronize()
    out = []
    for _ in range(epochs):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e))
    return out


def measure(x, y, batch: int, lr: float, cfg, precision: str, epochs: int) -> dict:
    w = (torch.randn(10, x.shape[1], device="cuda") * 0.01)
    b = torch.zeros(10, device="cuda")
    t = S.FusedSGDStep(w, b, x, y, batch, lr, precision=precision, config=cfg)
    t.set_perm(torch.randperm(x.shape[0], device="cuda"))
    n = t.n_steps
    t.step()
    torch.cuda.synchronize()
    g_step = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_step):
        t.step()
    g_epoch = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_epoch):
        t.epoch()

    def graph_step():
        for _ in range(n):
            g_step.replay()

    res = {"config": str(cfg), "programs": t.programs, "x_dtype": str(x.dtype).replace("torch.", ""),
           "precision": precision, "steps_per_epoch": n}
    for name, fn in (("graph-step", graph_step), ("persistent", t.epoch), ("graph-epoch", g_epoch.replay),
                     ("python-step", t.epoch_stepwise)):
        ms = _time_epochs(fn, epochs if name != "python-step" else 2)
        res[name + "_us"] = 1e3 * statistics.median(ms) / n
        res[name + "_epoch_ms"] = statistics.median(ms)
    loss, correct = t.read_stats()  # raises if a barrier ever timed out
    res["train_acc_last_epochs"] = correct / (n * batch * 1.0)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=None)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--configs", default="all", help="'all' or comma-separated indices into STEP_CONFIGS")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 1
    from bench.data import mnist as mnist_data

    try:
        train = mnist_data.load_split("train", a.data)
        x, y = train.images.cuda(), train.labels.cuda()
    except mnist_data.MnistFormatError as e:
        print(f"MNIST not found ({e}); random data of the same shape", file=sys.stderr)
        x, y = torch.rand(60000, 784, device="cuda"), torch.randint(0, 10, (60000,), device="cuda")
    xu8 = (x * 255).round().to(torch.uint8)
    cfgs = S.STEP_CONFIGS if a.configs == "all" else [S.STEP_CONFIGS[int(i)] for i in a.configs.split(",")]
    rows = []
    print(f"{device_name()}  batch {a.batch}  (us per step; epoch = {-(-x.shape[0] // a.batch)} steps)")
    hdr = f"{'config':<34} {'progs':>5} {'x':>5} {'prec':>5} {'graph-step':>10} {'persistent':>10} " \
          f"{'graph-epoch':>11} {'python-step':>11}"
    print(hdr)
    print("-" * len(hdr))
    jobs = [(c, xx, "ieee") for c in cfgs for xx in (x, xu8)] + [(cfgs[0], x, "tf32")]
    for cfg, xx, prec in jobs:
        try:
            r = measure(xx, y, a.batch, a.lr, cfg, prec, a.epochs)
        except Exception as e:  # a config that fails is reported, the sweep goes on
            r = {"config": str(cfg), "error": f"{type(e).__name__}: {str(e)[:200]}"}
            print(f"{str(cfg):<34} ERROR {r['error']}", flush=True)
            rows.append(r)
            continue
        rows.append(r)
        print(f"{r['config']:<34} {r['programs']:>5} {r['x_dtype'][:5]:>5} {prec:>5} {r['graph-step_us']:>10.2f} "
              f"{r['persistent_us']:>10.2f} {r['graph-epoch_us']:>11.2f} {r['python-step_us']:>11.2f}", flush=True)
    if a.out:
        path = Path(a.out) / "mnist_step_variants.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"device": device_name(), "batch": a.batch, "rows": rows}, indent=1))
        print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
