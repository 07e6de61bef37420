"""Plots from results CSVs: speedup bars per case and latency vs size per backend, one set per device.

    python -m bench.plot [CSV_OR_DIR ...] [--suite ops] [--out DIR]

PNGs go to --out (default: beside the first source on a GPU machine; on a machine without a GPU,
.local/plots/<source folder>/, git-ignored, so committed figures are never overwritten). Results of
several devices are drawn separately (a subfolder per device). With no sources: results/<device>/ on
a GPU; without a GPU, the CPU interpreter's own rows (.local/results/cpu-interpreter/) when there are
any, else the committed GPU results. Figures of CPU-interpreter rows say so in their title and footer:
they are not performance figures.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from triton_kernels.runtime import INTERPRET

from . import results
from .cli import argument_parser, run


def _shape_size(params: str) -> float:
    """A scalar size for a case's params (product of its integer parameters)."""
    try:
        p = json.loads(params)
    except (TypeError, ValueError):
        return float("nan")
    size = 1.0
    for v in p.values():
        if isinstance(v, int) and not isinstance(v, bool):
            size *= v
    return size


def _label_cpu(fig, ax, cpu: bool) -> None:
    """CPU-interpreter figures carry the label in the title and a footer."""
    if not cpu:
        return
    ax.set_title((ax.get_title() + "\n" if ax.get_title() else "") + f"[{results.CPU_NOTE}]", fontsize=9)
    fig.text(0.01, 0.005, results.CPU_NOTE, fontsize=8, color="firebrick", ha="left", va="bottom")


def speedup_bars(df: pd.DataFrame, out: Path, ref: str = "eager") -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = df[(df["metric"] == f"speedup_vs_{ref}") & (df["status"] == "ok")].copy()
    if d.empty:
        return None
    cpu = bool(results.is_cpu_interpreter(d).any())
    d["value"] = pd.to_numeric(d["value"])
    d["label"] = d["case"] + " " + d["dtype"] + " " + d["params"].str.replace(r'[{}" ]', "", regex=True).str[:40]
    wide = d.pivot_table(index="label", columns="backend", values="value", aggfunc="first")
    fig, ax = plt.subplots(figsize=(10, max(3, 0.35 * len(wide))))
    wide.plot.barh(ax=ax)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel(f"speedup vs {ref} (median; >1 is faster)")
    ax.set_ylabel("")
    devices = sorted(d["device"].dropna().astype(str).unique()) if "device" in d else []
    ax.set_title(", ".join(devices))
    _label_cpu(fig, ax, cpu)
    fig.tight_layout()
    path = out / f"speedup_vs_{ref}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_vs_size(df: pd.DataFrame, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = df[(df["metric"] == "time_ms") & (df["status"] == "ok")].copy()
    d["value"] = pd.to_numeric(d["value"])
    d["size"] = d["params"].map(_shape_size)
    paths = []
    for (case, dtype), g in d.groupby(["case", "dtype"]):
        if g["size"].nunique() < 3:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for backend, gb in g.sort_values("size").groupby("backend"):
            ax.plot(gb["size"], gb["value"], marker="o", label=backend)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("problem size (product of shape parameters)")
        ax.set_ylabel("median time (ms)")
        devices = sorted(g["device"].dropna().astype(str).unique()) if "device" in g else []
        ax.set_title(f"{case} {dtype}" + (f" ({', '.join(devices)})" if devices else ""))
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        _label_cpu(fig, ax, bool(results.is_cpu_interpreter(g).any()))
        fig.tight_layout()
        path = out / f"latency_{case}_{dtype}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def default_sources() -> list[str]:
    """results/<device>/ on a GPU; without one, the CPU interpreter's rows if any, else the committed GPU
    results (every results/<device>/ but cpu-*)."""
    own = results.results_dir()
    if not INTERPRET or (own.exists() and not results.read_results(own).empty):
        return [str(own)]
    gpu = sorted(d for d in results.RESULTS.iterdir() if d.is_dir() and not d.name.startswith("cpu")
                 and any(d.glob("*.csv"))) if results.RESULTS.is_dir() else []
    return [str(d) for d in gpu]


def default_out(sources: list[str], out: str | None) -> Path:
    """--out; else on a GPU machine the first source's folder; without a GPU .local/plots/<that folder's
    name>/ (git-ignored: committed figures are never overwritten by a CPU run)."""
    if out:
        return Path(out)
    first = Path(sources[0])
    first_dir = first if first.is_dir() or not first.suffix else first.parent
    return results.local_dir("plots", first_dir.name) if INTERPRET else first_dir


def draw(df: pd.DataFrame, out: Path) -> list[Path]:
    """Every plot of df into out, one subfolder per device when there are several."""
    devices = sorted(df["device"].dropna().astype(str).unique()) if "device" in df else []
    made: list[Path | None] = []
    groups = [(out, df)] if len(devices) <= 1 else [
        (out / "".join(c if c.isalnum() else "_" for c in dev), df[df["device"] == dev]) for dev in devices]
    for folder, g in groups:
        folder.mkdir(parents=True, exist_ok=True)
        made += [speedup_bars(g, folder, "eager"), speedup_bars(g, folder, "compile"), *latency_vs_size(g, folder)]
    return [m for m in made if m is not None]


def main(argv=None) -> int:
    p = argument_parser("bench.plot", __doc__, full=False)
    p.add_argument("sources", nargs="*", help="results CSVs or directories (default: see above)")
    p.add_argument("--suite", default=None)
    p.add_argument("--out", default=None, help="directory for the PNGs (default: see above)")
    args = p.parse_args(argv)
    srcs = args.sources or default_sources()
    if not srcs:
        raise SystemExit("bench.plot: no results to plot (run a bench module first, or pass a results folder)")
    df = results.read_results(srcs)
    if args.suite:
        df = df[df["suite"] == args.suite]
    if df.empty:
        raise SystemExit(f"bench.plot: no rows to plot in {', '.join(srcs)}"
                         + (f" for --suite {args.suite}" if args.suite else ""))
    out = default_out(srcs, args.out)
    if INTERPRET and not args.sources:
        print(f"bench.plot: no GPU here: plotting {', '.join(srcs)} into {out}"
              + (f" ({results.CPU_NOTE})" if results.is_cpu_interpreter(df).any() else ""))
    made = draw(df, out)
    if not made:
        suites = ", ".join(sorted(df["suite"].dropna().astype(str).unique()))
        raise SystemExit(f"bench.plot: nothing to draw from {', '.join(srcs)} (suites: {suites}): the plots need "
                         "speedup_vs_eager / speedup_vs_compile rows, or time_ms rows of one case at three or more sizes")
    for m in made:
        print(f"wrote {m}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
