"""One training session of the depth study: a model trained on UCI SGEMM with one backend, its session
folder (config, checkpoint after every epoch, resume), the summary it returns."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

import triton_kernels
from bench.data import sgemm as sgemm_data
from models.deep_mlp import FusedTrainer, build_model, canonical_name
from triton_kernels.runtime import atomic_write_text, default_device, device_name

from .report import median_epoch, write_metrics, write_plots


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
    from .. import results

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
        "provenance": results.provenance(),
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
        "median_epoch_s": median_epoch(history),
        "steps_per_epoch": steps, "block_weight_l1": blocks_w, "block_output_l1": blocks_out,
        "blocks_used_99pct_output_l1": _blocks_for_fraction(blocks_out, 0.99),
        "session": str(sdir.relative_to(root.parent) if sdir.is_relative_to(root.parent) else sdir),
        "device": config["device"],
    }
    torch.save(model.state_dict(), sdir / "parameters.pt")
    write_metrics(sdir, history, summary)
    write_plots(sdir, name, config, history, summary)
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

