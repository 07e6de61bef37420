"""Measure the device's ceilings and draw the roofline.

    python -m bench.roofline --measure     copy bandwidth + GEMM peak per dtype -> results/<device>/ceilings.json
    python -m bench.roofline --plot [CSV or DIR ...] [--out DIR_OR_PNG] [--point AI GFLOPS --label NAME ...]
                                           every case of the results as a point -> roofline.png (beside
                                           the ceilings, or --out: a folder or a .png path)

On a machine without a GPU there are no ceilings to measure: with no flags (or --plot and no sources)
it draws the committed GPU results (results/<device>/ with a ceilings.json) into .local/plots/<device>/
(git-ignored), never over the committed roofline.png. Only rows of the ceilings' device are drawn.

Copy bandwidth counts bytes read + written of a large device-to-device copy; GEMM peaks are cuBLAS
8192^3 products on random data (bf16, fp16, tf32, fp32 ieee; "fp32_on_fp64": fp64 products of fp64 copies of fp32
data, the work the GEMM's F64 tiles give the fp64 tensor cores; full-mantissa fp64 data draws more power and ran ~12 %
slower on an H200). % of roofline for a case is max(FLOPs / peak[dtype], bytes / copy bandwidth) / measured time; an
fp32 case's peak is the faster of "float32" and "fp32_on_fp64" (fp32 products are exact in fp64).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from triton_kernels.runtime import INTERPRET, atomic_write_text, device_name

from . import results
from .cli import argument_parser, needs_gpu, run
from .harness import median, quantile, time_call


def measure(out: str | None = None, size_gb: float = 2.0, n: int = 8192) -> dict:
    needs_gpu("bench.roofline --measure", "ceilings are measured per device")
    rows = []
    numel = int(size_gb * 1e9) // 4
    src = torch.randn(numel, device="cuda")
    dst = torch.empty_like(src)
    time_call(lambda: dst.copy_(src), 3, flush=False)  # warm-up
    ts = time_call(lambda: dst.copy_(src), 30, flush=False)
    copy_gbps = 2 * src.numel() * 4 / (median(ts) * 1e-3) / 1e9
    rows.append(results.make_row("roofline", "copy", {"bytes": 2 * numel * 4}, "float32", "torch", "gbps", copy_gbps,
                                 "GB/s", p20=2 * numel * 4 / (quantile(ts, 0.8) * 1e-3) / 1e9,
                                 p80=2 * numel * 4 / (quantile(ts, 0.2) * 1e-3) / 1e9))
    del src, dst
    peaks = {}
    for name, dtype, tf32 in (("bfloat16", torch.bfloat16, False), ("float16", torch.float16, False),
                              ("tf32", torch.float32, True), ("float32", torch.float32, False),
                              ("fp32_on_fp64", torch.float64, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device="cuda").to(dtype)  # fp32 data: for fp32_on_fp64, fp64 copies of it
        b = torch.randn(n, n, device="cuda").to(dtype)
        c = torch.empty(n, n, device="cuda", dtype=dtype)
        time_call(lambda: torch.matmul(a, b, out=c), 2)  # warm-up (cuBLAS handle, heuristics)
        ts = time_call(lambda: torch.matmul(a, b, out=c), 5 if name in ("float32", "fp32_on_fp64") else 20)
        peaks[name] = 2 * n ** 3 / (median(ts) * 1e-3) / 1e12
        rows.append(results.make_row("roofline", "gemm_peak", {"M": n, "N": n, "K": n}, name, "cublas", "tflops",
                                     peaks[name], "TFLOP/s", p20=2 * n ** 3 / (quantile(ts, 0.8) * 1e-3) / 1e12,
                                     p80=2 * n ** 3 / (quantile(ts, 0.2) * 1e-3) / 1e12))
        del a, b, c
    torch.backends.cuda.matmul.allow_tf32 = False
    ceilings = {"device": device_name(), "copy_gbps": copy_gbps, "gemm_tflops": peaks, **results.provenance()}
    d = results.results_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    atomic_write_text(d / "ceilings.json", json.dumps(ceilings, indent=1))
    results.write_rows(rows, out, "roofline")
    print(json.dumps({"copy_gbps": round(copy_gbps, 1), "gemm_tflops": {k: round(v, 1) for k, v in peaks.items()}}))
    return ceilings


def points(df) -> "pd.DataFrame":  # noqa: F821
    """(case, backend, dtype) -> arithmetic intensity and achieved TFLOP/s from a results table."""
    import pandas as pd

    ok = df[(df["status"] == "ok") & df["metric"].isin(["tflops", "gbps"])].copy()
    ok["value"] = pd.to_numeric(ok["value"], errors="coerce")
    keys = ["suite", "case", "params", "dtype", "backend"]
    wide = ok.groupby(keys + ["metric"])["value"].first().unstack("metric")
    if not {"tflops", "gbps"} <= set(wide.columns):  # no timed case (e.g. only hand-given points)
        return pd.DataFrame(columns=keys + ["tflops", "gbps", "intensity"])
    wide = wide.dropna(subset=["tflops", "gbps"])
    wide["intensity"] = wide["tflops"] * 1e12 / (wide["gbps"] * 1e9)
    return wide.reset_index()


def committed_gpu_dirs() -> list[Path]:
    """results/<device>/ folders with a ceilings.json (what GPU runs committed)."""
    if not results.RESULTS.is_dir():
        return []
    return sorted(d for d in results.RESULTS.iterdir() if d.is_dir() and (d / "ceilings.json").exists()
                  and not d.name.startswith("cpu"))


def png_path(out: str | Path | None, default_dir: Path) -> Path:
    """--out as a .png path, or a folder to put roofline.png in; else default_dir/roofline.png."""
    if out is None:
        return default_dir / "roofline.png"
    out = Path(out)
    return out if out.suffix.lower() == ".png" else out / "roofline.png"


def plot(sources: list[str], ceilings_path: str | None, png: str | None, out: str | None = None,
         marks: list[tuple[float, float, str]] = ()) -> Path:
    """Draw the roofline of the ceilings and every (case, backend) of the sources on that device; write
    it to ``png``, else under ``out`` (folder or .png), else beside the ceilings. Returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    srcs = sources or [str(results.results_dir())]
    df = results.read_results(srcs)
    cpath = Path(ceilings_path) if ceilings_path else None
    if cpath is None:
        for s in srcs:
            p = Path(s)
            cand = (p if p.is_dir() else p.parent) / "ceilings.json"
            if cand.exists():
                cpath = cand
                break
    if cpath is None or not cpath.exists():
        raise SystemExit("bench.roofline: no ceilings.json beside the results: run `python -m bench.roofline "
                         "--measure` on the GPU first, or pass --ceilings FILE")
    ceil = json.loads(cpath.read_text())
    if len(df) and ceil.get("device") and "device" in df:
        df = df[df["device"] == ceil["device"]]  # one device per roofline: never another's rows
    pts = points(df)
    fig, ax = plt.subplots(figsize=(9, 6))
    ai = np.logspace(-2, 4, 200)
    bw = ceil["copy_gbps"] * 1e9
    for name, peak in ceil["gemm_tflops"].items():
        ax.plot(ai, np.minimum(peak, bw * ai / 1e12), lw=1, label=f"roof {name} ({peak:.0f} TFLOP/s)")
    markers = {"eager": "o", "compile": "s", "triton": "^"}
    for (backend,), g in pts.groupby(["backend"]):
        ax.scatter(g["intensity"], g["tflops"], marker=markers.get(backend.split("+")[0], "x"), s=28,
                   label=backend, alpha=0.8)
    if marks:  # hand-given (AI, GFLOP/s, label) points, e.g. one kernel read off a profiler
        from .ncu_roofline import draw_points

        draw_points(ax, list(marks))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline on {ceil.get('device', '?')} (copy {ceil['copy_gbps']:.0f} GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    dest = Path(png) if png else png_path(out, cpath.parent)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(dest, dpi=120)
    plt.close(fig)
    print(f"wrote {dest} ({len(pts)} points)")
    return dest


def main(argv=None) -> int:
    p = argument_parser("bench.roofline", __doc__, full=False)
    p.add_argument("--measure", action="store_true", help="measure this GPU's ceilings (needs a CUDA GPU)")
    p.add_argument("--plot", nargs="*", metavar="CSV_OR_DIR", help="draw the roofline of these results")
    p.add_argument("--ceilings", default=None, help="ceilings.json to draw (default: beside the results)")
    p.add_argument("--png", default=None, help="the PNG to write (default: --out, else beside the ceilings)")
    p.add_argument("--out", default=None, help="--measure: the results folder; --plot: a folder or a .png path")
    p.add_argument("--point", nargs=2, type=float, action="append", default=[], metavar=("AI", "GFLOPS"),
                   help="also draw a hand-given point: arithmetic intensity (FLOP/byte) and achieved GFLOP/s "
                        "(repeatable; each takes the next --label)")
    p.add_argument("--label", action="append", default=[], help="the label of each --point, in order")
    args = p.parse_args(argv)
    if len(args.label) > len(args.point):
        raise SystemExit("bench.roofline: more --label than --point")
    marks = [(ai, gflops, args.label[i] if i < len(args.label) else f"point {i + 1}")
             for i, (ai, gflops) in enumerate(args.point)]
    if marks and args.plot is None:
        args.plot = []
    if args.measure:
        measure(args.out)
    if args.plot is None and not args.measure:
        if not INTERPRET:
            p.print_help()
            return 2
        args.plot = []
    if args.plot is not None:
        if args.plot or not INTERPRET:
            plot(args.plot, args.ceilings, args.png, args.out, marks)
            return 0
        dirs = committed_gpu_dirs()  # no GPU here: draw what the GPU runs committed, into .local/
        if not dirs:
            raise SystemExit("bench.roofline: no GPU here and no committed results/<device>/ceilings.json to draw")
        print(f"bench.roofline: no GPU here: drawing the committed GPU results of {', '.join(d.name for d in dirs)}"
              f" into {args.out or args.png or results.local_dir('plots')} (not over the committed roofline.png)")
        for d in dirs:
            plot([str(d)], args.ceilings, args.png, args.out or results.local_dir("plots", d.name), marks)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
