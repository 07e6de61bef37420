"""The depth study's outputs: a session's metrics files and plots (metrics.csv/json, curves.png,
l1_norms.png, report.pdf), the depth tables and rows (``--suite report`` rebuilds them from finished
sessions), and the step-time suite's printed table."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

from models.deep_mlp import parse_name
from triton_kernels.runtime import INTERPRET, atomic_write_text, device_name

from ..results import CPU_NOTE
from .study import SEED_MSE, SEED_TIME_S, SUITE


def median_epoch(history) -> float:
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


def write_metrics(sdir: Path, history, summary):
    lines = ["epoch,train_loss,val_mse,epoch_s,train_time_s"]
    lines += [f"{h['epoch']},{h['train_loss']:.8g},{h['val_mse']:.8g},{h['epoch_s']:.6g},{h['train_time_s']:.6g}"
              for h in history]
    atomic_write_text(sdir / "metrics.csv", "\n".join(lines) + "\n")
    atomic_write_text(sdir / "metrics.json", json.dumps(summary, indent=1))


def write_plots(sdir: Path, name, config, history, summary):
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
                s["median_epoch_s"] = median_epoch([{"epoch_s": float(r["epoch_s"])} for r in csv.DictReader(fh)])
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
    return depth_rows(summaries, args)


def depth_rows(summaries, args) -> list[dict]:
    from .. import results

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
            row = results.make_row(SUITE, "depth_study", params, "float32", backend, metric, s[key], unit)
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

