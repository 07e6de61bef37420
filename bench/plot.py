"""Plots from results CSVs: speedup bars per case and latency vs size per backend.

    python -m bench.plot [CSV_OR_DIR ...] [--suite ops] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from . import results as R


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


def speedup_bars(df: pd.DataFrame, out: Path, ref: str = "eager") -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = df[(df["metric"] == f"speedup_vs_{ref}") & (df["status"] == "ok")].copy()
    if d.empty:
        return None
    d["value"] = pd.to_numeric(d["value"])
    d["label"] = d["case"] + " " + d["dtype"] + " " + d["params"].str.replace(r'[{}" ]', "", regex=True).str[:40]
    wide = d.pivot_table(index="label", columns="backend", values="value", aggfunc="first")
    fig, ax = plt.subplots(figsize=(10, max(3, 0.35 * len(wide))))
    wide.plot.barh(ax=ax)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xlabel(f"speedup vs {ref} (median; >1 is faster)")
    ax.set_ylabel("")
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
        ax.set_title(f"{case} {dtype}")
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        path = out / f"latency_{case}_{dtype}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sources", nargs="*", help="results CSVs or directories (default results/<device>/)")
    p.add_argument("--suite", default=None)
    p.add_argument("--out", default=None, help="directory for the PNGs (default: beside the first source)")
    args = p.parse_args(argv)
    srcs = args.sources or [str(R.results_dir())]
    df = R.read_results(srcs)
    if args.suite:
        df = df[df["suite"] == args.suite]
    if df.empty:
        print("no rows to plot")
        return 1
    first = Path(srcs[0])
    out = Path(args.out) if args.out else (first if first.is_dir() else first.parent)
    out.mkdir(parents=True, exist_ok=True)
    made = [speedup_bars(df, out, "eager"), speedup_bars(df, out, "compile"), *latency_vs_size(df, out)]
    for m in made:
        if m is not None:
            print(f"wrote {m}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
