"""The SGEMM depth study: GloNet vs ResNet-MLP vs MLP, width 16, depth 10 .. 1000, on UCI SGEMM.

    python -m bench.sgemm --model GloNet1000 --epochs 200 --backend triton [--batch 1024] [--lr 1e-3]
                          [--weight-decay 0] [--width 16] [--precision ieee|tf32] [--graph]
                          [--target log|mean] [--data PATH] [--seed 0] [--resume]
    python -m bench.sgemm --suite depth    [--backend triton] [--epochs 200] [--models GloNet,ResNetMLP,MLP]
                                           [--depths 10,24,50,100,200,600,1000]
    python -m bench.sgemm --suite steptime [--depths ...] [--backends eager,triton,triton+graph] [--steps 100]
    add --quick for a smoke run (tiny data subset, 1 epoch, depths 2 and 4; --suite train without
    --model trains GloNet4). In the CPU interpreter every suite defaults to that smoke configuration
    (about a minute); --full runs the real sizes there (an estimate is printed first). --download
    fetches the UCI SGEMM data into .data/sgemm first (skipped when it is there).

Training (one model = one session): MSE loss, Adam (L2 weight decay as torch.optim.Adam), batches of
--batch rows from a seeded per-epoch permutation of the training split (the last partial batch is
dropped, so every step has the same shape and a CUDA graph can replay it), validation MSE every epoch,
test MSE at the end. The data: bench/data/sgemm.py (target ln(mean run time), standardised with train
statistics; 80/10/10 seeded split); MSEs are in standardised target units (``test_mse``) and in the
target's own units (``test_mse_log``: squared error of ln(ms)).

Each session writes ``<results-dir>/<Model>/session_<N>/`` (default training_results/; smoke runs -- --quick, or the CPU
interpreter's default -- go to .local/training_results/, git-ignored): config.json, parameters.pt (the final
state_dict), metrics.csv (per epoch) + metrics.json (summary, per-block L1 norms), curves.png,
l1_norms.png, report.pdf; checkpoint.pt (git-ignored) after every epoch, written atomically;
``--resume`` continues the latest session of that model from its checkpoint.

Backends: ``eager`` (nn.Modules + torch.optim.Adam), ``compile`` (torch.compile of the forward),
``triton`` (the fused kernels through models.deep_mlp.FusedTrainer: forward kernel, backward kernel,
fused Adam; ``--graph`` replays each step from a CUDA graph).

--suite steptime times one training step (batch 1024, Adam) per model, depth and backend through the
shared harness (eager, compile up to --compile-max-depth, triton, triton+graph) and, before timing,
checks that Triton and eager losses agree within 1e-4 relative after --steps steps from the same
initial weights on the same batches (status "wrong" otherwise). Rows: results/<device>/sgemm*.csv.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

import torch

import triton_kernels  # noqa: F401  (interpreter switch before triton loads)
from bench.data import sgemm as sgemm_data
from models.deep_mlp import FusedTrainer, build_model, canonical_name, parse_name
from triton_kernels.runtime import INTERPRET, atomic_write_text, default_device, device_name

from ..cli import argument_parser, cpu_notice, guard_cpu
from ..results import CPU_NOTE, local_dir

SUITE = "sgemm"
REPO = Path(__file__).resolve().parents[2]
TRAINING_RESULTS = REPO / "training_results"
DEPTHS = (10, 24, 50, 100, 200, 600, 1000)
STUDY_MODELS = ("GloNet", "ResNetMLP", "MLP")
LOSS_AGREEMENT = 1e-4
CHAOS_FACTOR = 3.0  # see loss_agreement

# The seed study's figures (200 epochs, width 16): test MSE per depth and training time (s).
SEED_MSE = {"GloNet": {d: "0.021-0.022" for d in DEPTHS}, "ResNetMLP": {10: "0.018", 1000: "0.048"}}
SEED_TIME_S = {"GloNet": {1000: 289.0}, "ResNetMLP": {1000: 675.0}}
SEED_STEP_MS = {"GloNet": {1000: 228.0}, "ResNetMLP": {1000: 405.0}}  # eager, one H100 today
SMOKE_MODEL = "GloNet4"                     # --suite train without --model, in a smoke run
SMOKE = {"epochs": 1, "depths": [2, 4], "steps": 3}   # a smoke run (--quick)
SMOKE_INTERPRETER = {"max_rows": 240, "batch": 32, "depths": [2]}  # ... in the CPU interpreter (about a minute)
INTERPRETER_LAYER_ROW_S = 2e-3  # rough: one layer of one row of a fused training step in the CPU interpreter


# ----------------------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    p = argument_parser("bench.sgemm", __doc__.split("\n\n")[0], raw=False)
    p.add_argument("--suite", choices=("train", "depth", "steptime", "report"), default="train",
                   help="report: the depth study's tables from the finished sessions under --results-dir")
    p.add_argument("--model", default=None, help="e.g. GloNet1000, ResNetMLP100, MLP10 (--suite train)")
    p.add_argument("--models", default=",".join(STUDY_MODELS), help="model families for the suites")
    p.add_argument("--depths", default=None, help=f"comma-separated depths (default {','.join(map(str, DEPTHS))})")
    p.add_argument("--epochs", type=int, default=None, help="default 200 (smoke run: 1)")
    p.add_argument("--backend", choices=("eager", "compile", "triton"), default="triton")
    p.add_argument("--backends", default=None, help="steptime: comma-separated harness backends")
    p.add_argument("--graph", action="store_true", help="triton: replay each training step from a CUDA graph")
    p.add_argument("--batch", type=int, default=None, help="default 1024 (smoke run in the interpreter: 32)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0, help="L2 regularisation (added to the gradient)")
    p.add_argument("--width", type=int, default=16, choices=(16, 32, 64))
    p.add_argument("--precision", choices=("ieee", "tf32"), default="ieee", help="fp32 dot precision (triton)")
    p.add_argument("--target", choices=sgemm_data.TARGETS, default="log")
    p.add_argument("--data", default=None, help="SGEMM csv(.gz) or directory (default .data/sgemm, "
                                                "then ../shared/data/sgemm)")
    p.add_argument("--download", action="store_true", help="fetch the SGEMM data into .data/sgemm first "
                                                           "(skipped when present)")
    p.add_argument("--max-rows", type=int, default=None, help="use a seeded subset of N rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue the latest session from its checkpoint")
    p.add_argument("--results-dir", default=None, help="where session folders go (default training_results/; "
                                                       "smoke runs: .local/training_results/)")
    p.add_argument("--steps", type=int, default=None, help="steptime: steps of the loss-agreement check (100)")
    p.add_argument("--compile-max-depth", type=int, default=100, help="steptime: compile only up to this depth")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny subset, 1 epoch, depths 2,4 (--suite "
                                                        f"train: {SMOKE_MODEL} unless --model)")
    p.add_argument("--out", default=None, help="rows directory (default results/<device>/)")
    p.add_argument("--show", action="store_true", help="print the committed GPU results instead of running")
    p.add_argument("--no-write", action="store_true", help="rows: print only")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    a.tiny = INTERPRET and not a.full
    a.smoke = a.quick or a.tiny
    if a.suite == "train" and not a.model and not a.show:
        if not a.smoke:
            p.error("--model is required (e.g. --model GloNet1000), or use --quick, --suite depth / steptime")
        a.model = SMOKE_MODEL
    if a.model:
        try:
            parse_name(a.model)
        except ValueError as e:
            p.error(str(e))
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    for m in a.models:
        try:
            parse_name(f"{m}2")
        except ValueError:
            p.error(f"--models: unknown family {m!r} (GloNet, ResNetMLP, MLP)")
    if a.depths:
        try:
            a.depths = [int(d) for d in a.depths.split(",")]
        except ValueError:
            p.error(f"--depths: expected comma-separated integers, got {a.depths!r}")
    else:
        a.depths = list((SMOKE_INTERPRETER if INTERPRET else SMOKE)["depths"]) if a.smoke else list(DEPTHS)
    if a.epochs is None:
        a.epochs = SMOKE["epochs"] if a.smoke else 200
    interpreter_smoke = a.smoke and INTERPRET
    if a.max_rows is None and interpreter_smoke:
        a.max_rows = SMOKE_INTERPRETER["max_rows"]
    if a.batch is None:
        a.batch = SMOKE_INTERPRETER["batch"] if interpreter_smoke else 1024
    if a.steps is None:
        a.steps = SMOKE["steps"] if (a.smoke or INTERPRET) else 100
    if a.batch < 2:
        p.error("--batch must be >= 2")
    if a.graph and not torch.cuda.is_available():
        a.graph = False  # no CUDA graphs in the interpreter
    if a.download and a.data:
        p.error("--download fetches into .data/sgemm; leave out --data")
    if a.results_dir is None:
        a.results_dir = str(local_dir("training_results") if a.smoke else TRAINING_RESULTS)
    return a


# ----------------------------------------------------------------------------------------------------
# One training session
# ----------------------------------------------------------------------------------------------------
def _session_dir(root: Path, model: str, resume: bool) -> Path:
    d = root / model
    existing = sorted((int(p.name.split("_")[1]), p) for p in d.glob("session_*") if p.name.split("_")[1].isdigit())
    if resume:
        for _, p in reversed(existing):
            if (p / "checkpoint.pt").exists():
                return p
        print(f"--resume: no checkpoint under {d}; starting a new session", file=sys.stderr)
    n = existing[-1][0] + 1 if existing else 1
    return d / f"session_{n}"


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


class _Runner:
    """The per-backend training step and evaluation for one model."""

    def __init__(self, model, backend, args, device):
        self.model, self.backend, self.device = model, backend, device
        self.graph = None
        if backend == "triton":
            model.backend = "triton"
            self.trainer = FusedTrainer(model, lr=args.lr, weight_decay=args.weight_decay, precision=args.precision)
        else:
            model.backend = backend
            self.opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        self.use_graph = bool(args.graph and backend == "triton" and device.type == "cuda")

    def step(self, x, t):
        if self.backend == "triton":
            if self.use_graph:
                if self.graph is None:
                    self.xs, self.ts = x.clone(), t.clone()
                    self.graph, self.loss = self.trainer.capture(self.xs, self.ts)
                    return self.trainer.warm_loss  # capture ran one real step
                self.xs.copy_(x)
                self.ts.copy_(t)
                self.graph.replay()
                return self.loss
            return self.trainer.step(x, t)
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(self.model(x), t)
        loss.backward()
        self.opt.step()
        return loss.detach()

    @torch.no_grad()
    def predict(self, x):
        if self.backend == "triton":
            return self.trainer.predict(x)
        self.model.eval()
        out = torch.cat([self.model.forward_eager(x[i:i + 8192]) for i in range(0, x.shape[0], 8192)])
        self.model.train()
        return out

    def opt_state(self):
        return self.trainer.state_dict() if self.backend == "triton" else self.opt.state_dict()

    def load_opt_state(self, sd):
        (self.trainer if self.backend == "triton" else self.opt).load_state_dict(sd)


def train_session(args, name: str, backend: str | None = None, progress: bool = True) -> dict:
    """Train one model; writes the session folder; returns the summary (metrics.json)."""
    from .. import results as R

    backend = backend or args.backend
    name = canonical_name(name)
    device = default_device()
    root = Path(args.results_dir)
    sdir = _session_dir(root, name, args.resume)
    ckpt_path = sdir / "checkpoint.pt"
    config = {
        "model": name, "backend": backend, "graph": bool(args.graph), "epochs": args.epochs, "batch": args.batch,
        "lr": args.lr, "weight_decay": args.weight_decay, "width": args.width, "precision": args.precision,
        "target": args.target, "seed": args.seed, "max_rows": args.max_rows, "loss": "mse",
        "optimizer": "adam (L2 weight decay added to the gradient)", "drop_last": True,
        "device": device_name() if (torch.cuda.is_available() or args.backend == "triton") else "cpu (eager)",
        "torch": torch.__version__, "triton": triton_kernels.runtime.triton.__version__,
        "provenance": R.provenance(),
    }
    resumed = None
    if ckpt_path.exists():
        resumed = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        config = dict(resumed["config"], epochs=args.epochs)
    data = sgemm_data.load(args.data, target=config["target"], seed=config["seed"], max_rows=config["max_rows"],
                           device=device)
    config["data"] = {k: v for k, v in data.info.items() if k not in ("x_mean", "x_std")}
    sdir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(sdir / "config.json", json.dumps(config, indent=1))

    model = build_model(name, width=config["width"], seed=config["seed"], device=device)
    history: list[dict] = []
    start_epoch = 0
    if resumed is not None:
        model.load_state_dict(resumed["model"])
    runner = _Runner(model, backend, argparse.Namespace(**{**vars(args), **{k: config[k] for k in (
        "lr", "weight_decay", "precision", "graph")}}), device)
    if resumed is not None:
        runner.load_opt_state(resumed["optimizer"])
        history, start_epoch = resumed["history"], resumed["epoch"] + 1
    n_train = len(data.train)
    B = min(config["batch"], n_train)
    steps = n_train // B
    train_time = sum(h["epoch_s"] for h in history)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=config["epochs"], initial=start_epoch, desc=f"{name} [{backend}]", unit="epoch",
                   dynamic_ncols=True)
    for epoch in range(start_epoch, config["epochs"]):
        g = torch.Generator(device="cpu").manual_seed(config["seed"] * 100003 + epoch)
        perm = torch.randperm(n_train, generator=g).to(device)
        xp, tp = data.train.x[perm], data.train.y[perm]
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for s in range(steps):
            loss_sum += runner.step(xp[s * B:(s + 1) * B], tp[s * B:(s + 1) * B])
        if device.type == "cuda":
            torch.cuda.synchronize()
        epoch_s = time.perf_counter() - t0
        train_time += epoch_s
        if backend == "triton":
            runner.trainer.check()  # a fused ResNet step that timed out in an exchange is an error, not data
        val = torch.mean((runner.predict(data.val.x) - data.val.y) ** 2).item() if len(data.val) else float("nan")
        rec = {"epoch": epoch, "train_loss": loss_sum.item() / steps, "val_mse": val, "epoch_s": epoch_s,
               "train_time_s": train_time}
        history.append(rec)
        _atomic_save({"model": model.state_dict(), "optimizer": runner.opt_state(), "epoch": epoch,
                      "history": history, "config": config}, ckpt_path)
        if bar is not None:
            bar.set_postfix(loss=f"{rec['train_loss']:.4f}", val=f"{val:.4f}", s=f"{epoch_s:.1f}")
            bar.update(1)
    if bar is not None:
        bar.close()

    pred = runner.predict(data.test.x)
    test_mse = torch.mean((pred - data.test.y) ** 2).item()
    test_mse_units = torch.mean((data.unstandardize(pred) - data.unstandardize(data.test.y)) ** 2).item()
    blocks_w = model.block_l1().cpu().tolist()
    sub = data.test.x[:4096]
    model.eval()
    blocks_out = model.block_outputs_l1(sub).cpu().tolist()
    model.train()
    summary = {
        "model": name, "backend": backend, "epochs": config["epochs"], "test_mse": test_mse,
        "test_mse_target_units": test_mse_units, "target": config["target"],
        "best_val_mse": min((h["val_mse"] for h in history), default=float("nan")),
        "train_time_s": train_time, "mean_epoch_s": train_time / max(len(history), 1),
        "median_epoch_s": _median_epoch(history),
        "steps_per_epoch": steps, "block_weight_l1": blocks_w, "block_output_l1": blocks_out,
        "blocks_used_99pct_output_l1": _blocks_for_fraction(blocks_out, 0.99),
        "session": str(sdir.relative_to(root.parent) if sdir.is_relative_to(root.parent) else sdir),
        "device": config["device"],
    }
    torch.save(model.state_dict(), sdir / "parameters.pt")
    _write_metrics(sdir, history, summary)
    _plots(sdir, name, config, history, summary)
    return summary


def _blocks_for_fraction(xs, frac):
    tot = sum(xs)
    if tot <= 0:
        return 0
    acc = 0.0
    for i, v in enumerate(xs):
        acc += v
        if acc >= frac * tot:
            return i + 1
    return len(xs)


def _median_epoch(history) -> float:
    """Median epoch time: the steady state (the first epoch also compiles and tunes the kernels)."""
    ts = sorted(h["epoch_s"] for h in history)
    return ts[len(ts) // 2] if ts else float("nan")


def _knee(xs, frac):
    """The last block whose value is at least ``frac`` of the largest: every later block stays below."""
    top = max(xs, default=0.0)
    return max((i + 1 for i, v in enumerate(xs) if v >= frac * top), default=0)


def _tail_level(xs, k):
    """Mean of the values after the first k, relative to the largest value (nan if there are none)."""
    tail, top = xs[k:], max(xs, default=0.0)
    return sum(tail) / len(tail) / top if tail and top > 0 else float("nan")


def _mass_share(xs, k):
    tot = sum(xs)
    return sum(xs[:k]) / tot if tot > 0 else 0.0


def _write_metrics(sdir: Path, history, summary):
    lines = ["epoch,train_loss,val_mse,epoch_s,train_time_s"]
    lines += [f"{h['epoch']},{h['train_loss']:.8g},{h['val_mse']:.8g},{h['epoch_s']:.6g},{h['train_time_s']:.6g}"
              for h in history]
    atomic_write_text(sdir / "metrics.csv", "\n".join(lines) + "\n")
    atomic_write_text(sdir / "metrics.json", json.dumps(summary, indent=1))


def _plots(sdir: Path, name, config, history, summary):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    ep = [h["epoch"] + 1 for h in history]
    fig1, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ep, [h["train_loss"] for h in history], label="train loss (MSE)")
    ax.plot(ep, [h["val_mse"] for h in history], label="validation MSE")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("MSE (standardised target)")
    cpu = config.get("device") == "cpu-interpreter"
    ax.set_title(f"{name} [{config['backend']}]: test MSE {summary['test_mse']:.4f}"
                 + (f"\n({CPU_NOTE})" if cpu else ""), fontsize=10 if cpu else None)
    ax.legend()
    fig1.tight_layout()
    fig1.savefig(sdir / "curves.png", dpi=110)

    fig2, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "block_weight_l1", "L1 norm of each block's weights"),
                           (axes[1], "block_output_l1", "mean L1 norm of each block's output")):
        vals = summary[key]
        ax.bar(range(1, len(vals) + 1), vals, width=1.0)
        ax.set_xlabel("block")
        ax.set_title(title, fontsize=10)
        if len(vals) > 50:
            ax.set_xscale("log")
    fig2.suptitle(f"{name}: 99% of the output L1 mass in the first {summary['blocks_used_99pct_output_l1']} blocks")
    fig2.tight_layout()
    fig2.savefig(sdir / "l1_norms.png", dpi=110)

    with PdfPages(sdir / "report.pdf") as pdf:
        fig0 = plt.figure(figsize=(8.27, 11.69))
        lines = [f"SGEMM depth study: {name}", *([f"({CPU_NOTE}: smoke run)"] if cpu else []), ""]
        lines += [f"{k}: {v}" for k, v in config.items() if k != "data"]
        lines += ["", "data:"] + [f"  {k}: {v}" for k, v in config.get("data", {}).items()]
        lines += ["", "results:"] + [f"  {k}: {v:.6g}" if isinstance(v, float) else f"  {k}: {v}"
                                     for k, v in summary.items() if not isinstance(v, list)]
        fig0.text(0.05, 0.97, "\n".join(lines), va="top", family="monospace", fontsize=7)
        pdf.savefig(fig0)
        pdf.savefig(fig1)
        pdf.savefig(fig2)
        plt.close(fig0)
    plt.close(fig1)
    plt.close(fig2)


# ----------------------------------------------------------------------------------------------------
# Suites
# ----------------------------------------------------------------------------------------------------
def _family_depths(args):
    out = []
    for fam in args.models:
        for d in args.depths:
            if fam.lower().startswith("resnet") and d % 2:
                continue
            out.append(f"{fam}{d}")
    return out


def suite_report(args) -> list[dict]:
    """The depth study's tables and rows from the finished sessions under --results-dir (latest per model)."""
    latest = {}
    for f in sorted(Path(args.results_dir).rglob("session_*/metrics.json")):
        s = json.loads(f.read_text())
        cfg = f.parent / "config.json"
        c = json.loads(cfg.read_text()) if cfg.exists() else {}
        s["device"] = c.get("device", "")
        s["config"] = c
        s["provenance"] = dict(c.get("provenance") or {}, device=c.get("device", ""), torch=c.get("torch", ""),
                               triton=c.get("triton", ""))
        if "median_epoch_s" not in s and (f.parent / "metrics.csv").exists():  # sessions written before it existed
            with open(f.parent / "metrics.csv") as fh:
                s["median_epoch_s"] = _median_epoch([{"epoch_s": float(r["epoch_s"])} for r in csv.DictReader(fh)])
        latest[s["model"]] = s
    if not latest:
        raise SystemExit(f"no finished session under {args.results_dir}")

    def order(s):
        cls, depth = parse_name(s["model"])
        return cls.__name__, depth

    summaries = sorted(latest.values(), key=order)
    args.models = sorted({parse_name(s["model"])[0].__name__ for s in summaries})
    args.backend = ",".join(sorted({s["backend"] for s in summaries}))
    args.epochs = ",".join(str(e) for e in sorted({s["epochs"] for s in summaries}))
    batches = sorted({s["config"].get("batch") for s in summaries if s["config"].get("batch")})
    if batches:  # the tables' title says the sessions' batch, not this command's default
        args.batch = batches[0] if len(batches) == 1 else ",".join(map(str, batches))
    return _depth_rows(summaries, args)


def suite_depth(args) -> list[dict]:
    summaries = [train_session(args, name, progress=not args.no_progress) for name in _family_depths(args)]
    return _depth_rows(summaries, args)


def _depth_rows(summaries, args) -> list[dict]:
    from .. import results as R

    rows = []
    for s in summaries:
        s["steady_train_time_s"] = s.get("median_epoch_s", float("nan")) * s.get("epochs", 0)
        cls, depth = parse_name(s["model"])
        c = s.get("config") or {}  # a session's own settings, where the report read them
        params = {"model": cls.__name__, "depth": depth, "width": c.get("width", args.width),
                  "batch": c.get("batch", args.batch), "epochs": s.get("epochs", args.epochs),
                  "target": c.get("target", args.target), "precision": c.get("precision", args.precision)}
        backend = s.get("backend", args.backend)
        where = s.get("device") or ("cpu (eager)" if backend == "eager" and not torch.cuda.is_available() else "")
        # labelled by where the session trained, not where this report runs
        interpreted = where == "cpu-interpreter"
        note = "cpu-interpreter smoke run, tiny subset" if interpreted else f"trained on {where}"
        for metric, key, unit in (("test_mse", "test_mse", "mse"), ("test_mse_target_units", "test_mse_target_units", "mse"),
                                  ("train_time_s", "train_time_s", "s"),
                                  ("steady_train_time_s", "steady_train_time_s", "s"),
                                  ("blocks_used_99pct", "blocks_used_99pct_output_l1", "blocks")):
            row = R.make_row(SUITE, "depth_study", params, "float32", backend, metric, s[key], unit)
            row["note"] = (f"{CPU_NOTE}; " if interpreted and unit == "s" else "") + note
            if s.get("provenance"):  # rebuilt from a session: where it trained, not where the report ran
                row.update({k: s["provenance"].get(k, "") for k in ("device", "sm_count", "torch", "triton", "cuda",
                                                                   "driver", "git_commit")})
                row["note"] += f"; session {s.get('session', '')}"
            rows.append(row)
    md = depth_tables(summaries, args)
    print(md)
    root = Path(args.results_dir)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / f"depth_study_{args.backend.replace(',', '_')}.md", md)
    return rows


def depth_tables(summaries, args) -> str:
    by = {}
    for s in summaries:
        cls, d = parse_name(s["model"])
        by[(cls.__name__, d)] = s
    fams = []
    for f in args.models:
        n = parse_name(f"{f}2")[0].__name__
        if n not in fams:
            fams.append(n)
    depths = sorted({d for (_, d) in by})
    def table(title, ours, seed):
        """One markdown table: per depth, ours(summary) and seed(family, depth) for every family."""
        rows = [title, "", "| depth | " + " | ".join(f"{f} ours | {f} seed" for f in fams) + " |",
                "|---:|" + "---:|---:|" * len(fams)]
        for d in depths:
            cells = []
            for f in fams:
                s = by.get((f, d))
                cells += [ours(s) if s else "-", seed(f, d)]
            rows.append(f"| {d} | " + " | ".join(cells) + " |")
        return rows

    def seed_time(f, d):
        t = SEED_TIME_S.get(f, {}).get(d)
        return f"{t:.0f}" if t else "-"

    out = table(f"## Test MSE (standardised ln run time; [{args.backend}], {args.epochs} epochs, batch {args.batch})",
                lambda s: f"{s['test_mse']:.4f}", lambda f, d: SEED_MSE.get(f, {}).get(d, "-"))
    out += [""] + table("## Training time (s): total, and (epochs x median epoch) without the first epoch's "
                        "kernel compile and autotuning", lambda s: f"{s['train_time_s']:.1f} "
                        f"({s.get('median_epoch_s', float('nan')) * s.get('epochs', 0):.1f})", seed_time)
    glo = [(d, by[("GloNet", d)]) for d in depths if ("GloNet", d) in by]
    out += ["", "Blocks holding 99% of GloNet's block-output L1 mass: " + ", ".join(
        f"depth {d}: {s['blocks_used_99pct_output_l1']}" for d, s in glo)]
    out += ["", "GloNet's block-output L1 falls below 20% of its largest block for good after block: " + ", ".join(
        f"depth {d}: {_knee(s['block_output_l1'], 0.2)}" for d, s in glo)
        + "; share of the L1 mass in the blocks up to there: " + ", ".join(
        f"{100 * _mass_share(s['block_output_l1'], _knee(s['block_output_l1'], 0.2)):.0f}%" for d, s in glo)]
    out += ["", "GloNet's first 15 blocks: their share of the block-output L1 mass, and the mean L1 of the blocks "
            "after them relative to the largest block: " + ", ".join(
                f"depth {d}: {100 * _mass_share(s['block_output_l1'], 15):.0f}% / "
                f"{_tail_level(s['block_output_l1'], 15):.2f}" for d, s in glo)]
    devices = sorted({s.get("device") for s in summaries if s.get("device")}) or [device_name()]
    if "cpu-interpreter" in devices:
        out = [f"**{CPU_NOTE}**: a CPU-interpreter smoke run on a data subset; its times and MSEs are no "
               "study result.", ""] + out
    out += ["", f"Device: {', '.join(devices)}. MSE units: the target ln(mean run time) standardised with train "
            "statistics; test_mse_target_units in metrics.json is in (ln ms)^2."]
    return "\n".join(out) + "\n"


def _step_fns(name, args, device):
    """Backend -> step(x, t) -> loss, each with its own copy of the same initial model."""

    def eager(compile_forward=False, dtype=torch.float32):
        m = build_model(name, width=args.width, seed=args.seed, device=device).to(dtype)
        if compile_forward:
            m.backend = "compile"
        opt = torch.optim.Adam(m.parameters(), lr=args.lr, weight_decay=args.weight_decay)

        def step(x, t):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(m(x.to(dtype)), t.to(dtype))
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    def triton():
        m = build_model(name, width=args.width, seed=args.seed, device=device)
        tr = FusedTrainer(m, lr=args.lr, weight_decay=args.weight_decay, precision=args.precision)
        return tr._step if not INTERPRET else tr.step

    return {"eager": eager, "compile": lambda: eager(True), "triton": triton,
            "eager64": lambda: eager(dtype=torch.float64)}


def batch_starts(n: int, B: int, steps: int) -> list[int]:
    """First row of each of ``steps`` consecutive training batches of B rows (wrapping round n rows): the
    order every loss comparison trains in."""
    return [(s * B) % max(n - B + 1, 1) for s in range(steps)]


def rel_diff(a: float, b: float) -> float:
    """|a - b| / |b|: a loss's relative distance from the reference loss b."""
    return abs(a - b) / max(abs(b), 1e-30)


def loss_agreement(name, args, device, data) -> dict:
    """Train the same model (seed, data, order) for --steps steps with eager fp32 and the fused kernels.

    Passes when the losses after the last step agree within LOSS_AGREEMENT (1e-4) relative. Where they do
    not, the same steps are run in float64 (the exact computation): a batch-norm ResNet amplifies fp32
    rounding as it trains (ReLU units near 0 flip, and BN couples every row), so two correct fp32 runs
    drift apart. The fused run then passes when its largest loss deviation from float64 over the run is
    within CHAOS_FACTOR x eager fp32's own (bench.resnet_numerics shows the drift step by step).
    Returns rel (fused vs eager fp32, last step), le, lt, status, note.
    """
    fns = _step_fns(name, args, device)
    fe, ft = fns["eager"](), fns["triton"]()
    n = len(data.train)
    B = min(args.batch, n)
    batches = batch_starts(n, B, args.steps)
    le_hist, lt_hist = [], []
    for i in batches:
        x, t = data.train.x[i:i + B], data.train.y[i:i + B]
        le_hist.append(fe(x, t))
        lt_hist.append(ft(x, t))
    if hasattr(ft, "__self__"):
        ft.__self__.check()
    le_hist = [float(v) for v in le_hist]
    lt_hist = [float(v) for v in lt_hist]
    le, lt = le_hist[-1], lt_hist[-1]
    rel = rel_diff(lt, le)
    out = {"rel": rel, "le": le, "lt": lt, "status": "ok" if rel <= LOSS_AGREEMENT else "wrong",
           "note": f"eager {le:.7g} vs triton {lt:.7g}, tolerance {LOSS_AGREEMENT:g}"}
    if rel > LOSS_AGREEMENT:
        f64 = fns["eager64"]()
        l64 = [float(v) for v in [f64(data.train.x[i:i + B], data.train.y[i:i + B]) for i in batches]]
        dev_t = max(rel_diff(a, b) for a, b in zip(lt_hist, l64))
        dev_e = max(rel_diff(a, b) for a, b in zip(le_hist, l64))
        ok = dev_t <= max(LOSS_AGREEMENT, CHAOS_FACTOR * dev_e)
        out["status"] = "ok" if ok else "wrong"
        out["note"] += (f"; float64 run: largest deviation over {args.steps} steps triton {dev_t:.2e}, eager fp32 "
                        f"{dev_e:.2e} (pass: triton <= {CHAOS_FACTOR:g}x eager's: rounding-limited, "
                        f"{'holds' if ok else 'fails'})")
    return out


def suite_steptime(args) -> list[dict]:
    from .. import harness as H
    from .. import results as R

    device = default_device()
    default = "eager,triton" if INTERPRET else "eager,compile,triton,triton+graph"
    backends = [b.strip() for b in (args.backends or default).split(",") if b.strip()]
    data = sgemm_data.load(args.data, target=args.target, seed=args.seed, max_rows=args.max_rows, device=device)
    rows: list[dict] = []
    cfg = H.RunConfig(backends=[b for b in backends], rounds=3 if torch.cuda.is_available() else 1,
                      target_ms=200.0, rep=2 if INTERPRET else None)
    for name in _family_depths(args):  # agreement, then timing, then save: one model at a time
        cls, depth = parse_name(name)
        B = min(args.batch, len(data.train))
        params = {"model": cls.__name__, "depth": depth, "width": args.width, "batch": B,
                  "precision": args.precision}
        agree = loss_agreement(name, args, device, data)
        rel, status = agree["rel"], agree["status"]
        rows.append(R.make_row(SUITE, "loss_agreement", params, "float32", "triton", f"loss_rel_diff_{args.steps}_steps",
                               rel, "", error_vs_fp64=None, status=status, note=agree["note"]))
        print(f"{name}: loss agreement after {args.steps} steps: rel diff {rel:.3g} ({status}) {agree['note']}",
              flush=True)
        fns = _step_fns(name, args, device)
        built = {}
        for b in ("eager", "compile", "triton"):
            if b == "compile" and depth > args.compile_max_depth:
                continue
            if status == "wrong" and b == "triton":
                continue
            built[b] = _lazy(fns[b])
        W, L = args.width, depth
        flops = 3 * 2 * B * W * W * L  # forward + two backward GEMMs per layer
        case = H.Case(
            suite=SUITE, name="train_step", params=params, dtype=torch.float32,
            inputs=lambda seed, dev, B=B: (data.train.x[:B].contiguous(), data.train.y[:B].contiguous()),
            fns=built, reference=None, flops=flops, bytes=0.0, kind="model", backward=True,
            graph_ok=True)
        rows += H.run_cases([case], cfg)
        if not args.no_write:  # keep every finished model if the run is cut short
            R.write_rows(rows, args.out, SUITE, tag=args.suite)
    for r in rows:  # the seed's eager step time beside ours
        if r["case"] == "train_step" and r["metric"] == "time_ms" and r["backend"] == "eager":
            p = json.loads(r["params"])
            seed = SEED_STEP_MS.get(p["model"], {}).get(p["depth"])
            if seed:
                r["note"] = (r["note"] or "") + f"; H100 eager reference {seed} ms"
    return rows


def _lazy(factory):
    """Build the step function on first call (so unused backends cost nothing)."""
    state = {}

    def fn(*a):
        if "f" not in state:
            state["f"] = factory()
        return state["f"](*a)

    return fn


def estimate_s(args) -> float:
    """Rough CPU-interpreter time of the run: fused training steps cost ~ depth x rows (eager is cheap)."""
    rows = (args.max_rows or 241600) * 0.8
    if args.suite == "train":
        names = [args.model]
    else:
        names = _family_depths(args)
    depth = sum(parse_name(n)[1] for n in names)
    if args.suite == "steptime":
        return depth * args.batch * INTERPRETER_LAYER_ROW_S * (2 * args.steps + 8)
    if args.backend != "triton":
        return 0.0
    return depth * rows * args.epochs * INTERPRETER_LAYER_ROW_S


def steptime_lines(rows: list[dict]) -> list[str]:
    """The step-time suite's table: a header, then one line per time, speedup and loss check."""
    out = [f"{'model':>10} {'depth':>5} {'backend':>14} {'metric':>24} {'value':>10} status"]
    if INTERPRET:
        out.insert(0, f"({CPU_NOTE}: every time below)")
    for r in rows:
        if r["metric"] in ("time_ms", "speedup_vs_eager") or r["metric"].startswith("loss_rel"):
            p = json.loads(r["params"])
            v = r["value"]
            out.append(f"{p['model']:>10} {p['depth']:>5} {r['backend']:>14} {r['metric']:>24} "
                       f"{'-' if v is None else f'{v:.4g}':>10} {r['status']}")
    return out


def data_path(args) -> str | None:
    """--data, or with --download the folder bench.data.fetch puts the SGEMM data in (fetched if missing)."""
    if not args.download:
        return args.data
    from bench.data.fetch import fetch  # (imported only when asked for)

    return str(fetch("sgemm", REPO / ".data"))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.show:
        from ..cli import show

        return show("sgemm", None)
    from .. import results as R

    args.data = data_path(args)
    if INTERPRET and args.suite != "report":
        what = {"train": f"{args.model}", "depth": f"{len(_family_depths(args))} models",
                "steptime": f"{len(_family_depths(args))} models"}[args.suite]
        what += f", {args.epochs} epoch(s)" if args.suite != "steptime" else f", {args.steps} check steps"
        what += f", {args.max_rows or 'all'} rows, batch {args.batch}"
        if args.tiny:
            cpu_notice("bench.sgemm", f"--suite {args.suite}: {what}; sessions in {args.results_dir}"
                       if args.suite != "steptime" else f"--suite steptime: {what}")
        else:
            guard_cpu(estimate_s(args), f"--suite {args.suite}: {what}", True, "bench.sgemm")
    if args.suite == "train":
        s = train_session(args, args.model, progress=not args.no_progress)
        print(json.dumps({k: v for k, v in s.items() if not isinstance(v, list)}, indent=1))
        return 0
    rows = {"depth": suite_depth, "report": suite_report}.get(args.suite, suite_steptime)(args)
    if args.suite == "steptime":
        print("\n".join(steptime_lines(rows)))
    if not args.no_write:
        path = R.write_rows(rows, args.out, SUITE, tag=args.suite)
        print(f"wrote {len(rows)} rows to {path}")
    return 0

