"""Time the fused softmax-regression step per launch mode, tuning config, x dtype and dot precision, on
the real MNIST shape.

    python -m bench.mnist_step_variants [--data DIR] [--batch 128] [--epochs 5] [--out DIR]
        [--configs all|0,2] [--x-dtypes float32,uint8] [--precisions ieee,tf32,tf32x3]
        [--modes graph-epoch,persistent,graph-step,python-step] [--check]

For every config of triton_kernels.softmax_regression.STEP_CONFIGS (feature slice per program ->
number of programs, warps), each x dtype and each precision, prints microseconds per training step for:
  graph-epoch   one persistent launch per epoch captured in a CUDA graph, replayed once per epoch
                (triton+epoch-graph): the in-kernel step time
  persistent    that launch from Python (triton+persistent)
  graph-step    one single-step launch captured in a CUDA graph, replayed once per step (triton+graph)
  python-step   one launch per step from Python (host launch overhead included; triton)
Each figure is the median over --epochs epochs (CUDA events around a whole epoch, divided by its steps),
after a warm-up epoch. --check also trains one epoch from the same start in every row and reports the
relative distance of its weights from a float64 epoch on the same batches (err_fp64) and its training
accuracy. With --out, also writes the table as JSON (mnist_step_variants.json).

Timings are not kept in this docstring: results/NOTES.md quotes the GPU runs (the MNIST section).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

from triton_kernels import softmax_regression  # (first: the interpreter switch before triton loads)
from triton_kernels.runtime import CudaEventTimer, capture_graph, device_name

from .cli import argument_parser, needs_gpu, run
from triton_kernels.testing import rel_err

MODES = ("graph-epoch", "persistent", "graph-step", "python-step")


def _time_epochs(fn, epochs: int) -> list[float]:
    fn()  # warm-up
    torch.cuda.synchronize()
    timer = CudaEventTimer()
    for _ in range(epochs):
        with timer.span():
            fn()
        torch.cuda.synchronize()
    return timer.times_ms()


def fp64_epoch(x, y, w, b, perm, batch: int, lr: float, scale: float):
    """One epoch of the same SGD in float64 (W, b after it)."""
    x64, w, b = x.double() * scale, w.double().clone(), b.double().clone()
    for s in range(0, len(perm), batch):
        idx = perm[s:s + batch]
        xb = x64[idx]
        p = torch.softmax(xb @ w.T + b, dim=1)
        p[torch.arange(len(idx), device=x.device), y[idx]] -= 1.0
        p /= len(idx)
        w -= lr * (p.T @ xb)
        b -= lr * p.sum(0)
    return torch.cat([w, b[:, None]], 1)


def measure(x, y, batch: int, lr: float, cfg, precision: str, epochs: int, modes, check: bool, init) -> dict:
    w, b = init[0].clone(), init[1].clone()
    t = softmax_regression.FusedSGDStep(w, b, x, y, batch, lr, precision=precision, config=cfg)
    perm = torch.randperm(x.shape[0], device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    t.set_perm(perm)
    n = t.n_steps
    res = {"config": str(cfg), "programs": t.programs, "x_dtype": str(x.dtype).replace("torch.", ""),
           "precision": precision, "steps_per_epoch": n}
    if check:  # one epoch from the common start, vs float64
        t.epoch()
        scale = softmax_regression.U8_SCALE if x.dtype == torch.uint8 else 1.0
        ref = fp64_epoch(x, y, init[0], init[1], perm.long(), batch, lr, scale)
        res["err_fp64"] = rel_err(torch.cat([w, b[:, None]], 1), ref)
        loss, correct = t.read_stats()
        res["train_acc_epoch1"] = correct / x.shape[0]
    t.step()
    torch.cuda.synchronize()
    graphs = {}  # captured without a warm-up of their own: the step above compiled and tuned
    if "graph-step" in modes:
        graphs["step"], _ = capture_graph(t.step, warmup=0)
    if "graph-epoch" in modes:
        graphs["epoch"], _ = capture_graph(t.epoch, warmup=0)

    def graph_step():
        for _ in range(n):
            graphs["step"].replay()

    fns = {"graph-epoch": lambda: graphs["epoch"].replay(), "persistent": t.epoch, "graph-step": graph_step,
           "python-step": t.epoch_stepwise}
    for name in modes:
        ms = _time_epochs(fns[name], epochs if name != "python-step" else 2)
        res[name + "_us"] = 1e3 * statistics.median(ms) / n
        res[name + "_epoch_ms"] = statistics.median(ms)
        res[name + "_epoch_ms_all"] = ms
    t.read_stats()  # raises if a wait ever timed out
    return res


def main(argv=None) -> int:
    p = argument_parser("bench.mnist_step_variants", __doc__.split("\n\n")[0], full=False, raw=False)
    p.add_argument("--data", default=None)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--configs", default="all", help="'all' or comma-separated indices into STEP_CONFIGS")
    p.add_argument("--x-dtypes", default="float32,uint8")
    p.add_argument("--precisions", default=",".join(softmax_regression.PRECISIONS))
    p.add_argument("--modes", default="graph-epoch,persistent", help=f"comma-separated subset of {MODES}")
    p.add_argument("--check", action="store_true", help="also one epoch vs float64 per row")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    needs_gpu("bench.mnist_step_variants", "it times CUDA graphs and CUDA events; bench.mnist runs the same "
                                           "trainers in the CPU interpreter")
    from bench.data import mnist as mnist_data

    try:
        train = mnist_data.load_split("train", a.data)
        x, y = train.images.cuda(), train.labels.cuda()
    except mnist_data.MnistFormatError as e:
        print(f"MNIST not found ({e}); random data of the same shape", file=sys.stderr)
        x, y = torch.rand(60000, 784, device="cuda"), torch.randint(0, 10, (60000,), device="cuda")
    xs = {"float32": x, "uint8": (x * 255).round().to(torch.uint8)}
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"--modes: unknown {bad}")
    configs = softmax_regression.STEP_CONFIGS
    cfgs = configs if a.configs == "all" else [configs[int(i)] for i in a.configs.split(",")]
    torch.manual_seed(0)
    init = (torch.randn(10, x.shape[1], device="cuda") * 0.01, torch.zeros(10, device="cuda"))
    rows = []
    print(f"{device_name()}  batch {a.batch}  (us per step; epoch = {-(-x.shape[0] // a.batch)} steps)")
    hdr = f"{'config':<34} {'progs':>5} {'x':>5} {'prec':>6} " + " ".join(f"{m:>11}" for m in modes) \
        + ("   err_fp64  acc_ep1" if a.check else "")
    print(hdr)
    print("-" * len(hdr))
    jobs = [(c, xd, prec) for c in cfgs for xd in a.x_dtypes.split(",") for prec in a.precisions.split(",")]
    for cfg, xd, prec in jobs:
        try:
            r = measure(xs[xd], y, a.batch, a.lr, cfg, prec, a.epochs, modes, a.check, init)
        except Exception as e:  # a config that fails is reported, the sweep goes on
            r = {"config": str(cfg), "x_dtype": xd, "precision": prec, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            print(f"{str(cfg):<34} {xd[:5]:>11} {prec:>6} ERROR {r['error']}", flush=True)
            rows.append(r)
            continue
        rows.append(r)
        line = f"{r['config']:<34} {r['programs']:>5} {xd[:5]:>5} {prec:>6} " \
            + " ".join(f"{r[m + '_us']:>11.2f}" for m in modes)
        if a.check:
            line += f"   {r['err_fp64']:.2e}  {r['train_acc_epoch1']:.4f}"
        print(line, flush=True)
    if a.out:
        path = Path(a.out) / "mnist_step_variants.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"device": device_name(), "batch": a.batch, "torch": torch.__version__,
                                    "rows": rows}, indent=1))
        print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
