"""Per-kernel arithmetic intensity and achieved FLOP/s from an Nsight Compute CSV export, on the measured roofline.

    python -m bench.ncu_roofline REPORT.csv [--ceilings results/<device>/ceilings.json] [--png out.png]
                                 [--out DIR] [--top 25] [--tensor-flops-per-inst F | --calibrate NAME:FLOPS]
    python -m bench.ncu_roofline --list-metrics     # the counters it reads, comma-separated, for ncu --metrics

The CSV is what ``ncu --csv --page raw`` (one row per kernel launch, a units row under the header) or
plain ``ncu --csv`` (the details page: one row per launch and metric) writes. Collect (``--list-metrics``
prints the counters below; add the device's ``sm__ops_path_tensor_src_*`` counters from ``ncu --query-metrics``,
as ``bash bench/gpu_run.sh resnet-roofline`` does), e.g. for the NVTX-marked step of
``python -m bench.resnet --profile-one-step``:

    ncu --profile-from-start off --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\\
smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum,\\
smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_hadd_pred_on.sum,\\
smsp__sass_thread_inst_executed_op_hmul_pred_on.sum,smsp__sass_thread_inst_executed_op_hfma_pred_on.sum,\\
sm__inst_executed_pipe_tensor.sum --csv --page raw python -m bench.resnet --profile-one-step ... > step.csv

Per launch:
    FLOPs = fadd + fmul + 2 ffma  (+ the same for the h* (fp16 / bf16 pairs count as executed) and d* counters)
            + tensor FLOPs: the per-source sm__ops_path_tensor_src_* counters when present (one count is one
              FLOP: a 4096^3 GEMM counts 2 * 4096^3 on an H100), else tensor-pipe instructions
              (sm__inst_executed_pipe_tensor*) x --tensor-flops-per-inst
    bytes = dram__bytes_read + dram__bytes_write (or dram__bytes),  time = gpu__time_duration
A tensor instruction's FLOPs depend on its shape (HMMA m16n8k16: 4096; Hopper's warpgroup GMMA more), and
what an "op" counts is the profiler's, so the factor of whichever counter is present can be measured:
``--calibrate gemm_kernel_substring:FLOPS`` derives it from one kernel of known FLOPs in the same export,
``--calibrate @last:FLOPS`` from the last launch (``bench.resnet --profile-one-step`` ends its profiled
range with a 4096^3 bf16 GEMM: @last:137438953472), which is then left out. Launches are summed per
kernel name; AI = FLOPs / DRAM bytes, achieved = FLOPs / time. The plot draws the ceilings of
``bench.roofline --measure`` (copy bandwidth, GEMM peak per dtype) and one point per kernel, sized by its
share of the time, plus the whole step.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from pathlib import Path

from triton_kernels.runtime import atomic_write_text

SCALAR_FLOPS = {"fadd": 1, "fmul": 1, "ffma": 2, "hadd": 1, "hmul": 1, "hfma": 2, "dadd": 1, "dmul": 1, "dfma": 2}
BASE_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
                "sm__inst_executed_pipe_tensor.sum")


def metric_names() -> list[str]:
    """The counters this parser reads (time, DRAM bytes, tensor-pipe instructions, every scalar FLOP op)."""
    return [*BASE_METRICS, *(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in SCALAR_FLOPS)]


META = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
        "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")
PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
TIME_UNITS = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0, "ns": 1e-9, "us": 1e-6, "ms": 1e-3}


def _number(text: str) -> float:
    t = str(text).strip().replace(",", "")
    if t in ("", "n/a", "N/A"):
        return float("nan")
    return float(t)


def _scale(unit: str, metric: str) -> float:
    """Factor to SI base units (bytes, seconds, counts) for ncu's unit strings (Kbyte, usecond, Minst, ...)."""
    unit = (unit or "").strip()
    if unit in TIME_UNITS:
        return TIME_UNITS[unit]
    m = re.fullmatch(r"([KMGT]?)(byte|inst|warp|cycle)?", unit)
    if m:
        return PREFIX[m.group(1)]
    if "time" in metric and not unit:
        return 1e-9  # gpu__time_duration without a unit row: ncu's default is nanoseconds
    return 1.0


def _device(header: list[str], row: list[str]) -> str:
    """The launch's device: its name where the export has one (the raw page's
    device__attribute_display_name), else the "Device" column (ncu writes the device index there)."""
    for name in ("device__attribute_display_name", "Device"):
        if name in header and row[header.index(name)].strip():
            return row[header.index(name)].strip()
    return ""


def parse(text: str) -> list[dict]:
    """One dict per kernel launch: {"id", "kernel", "device", metric name: value in base units}."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]  # drop ncu's ==PROF== chatter
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows or "Kernel Name" not in rows[0]:
        raise ValueError("no 'Kernel Name' column: is this an `ncu --csv` export?")
    header = rows[0]
    launches: dict[str, dict] = {}
    if "Metric Name" in header:  # details page: one row per (launch, metric)
        col = {h: i for i, h in enumerate(header)}
        for r in rows[1:]:
            if len(r) != len(header):
                continue
            launch = launches.setdefault(r[col["ID"]], {"id": r[col["ID"]], "kernel": r[col["Kernel Name"]],
                                                        "device": r[col["Device"]] if "Device" in col else ""})
            name = r[col["Metric Name"]]
            launch[name] = _number(r[col["Metric Value"]]) * _scale(r[col["Metric Unit"]], name)
        return list(launches.values())
    body = rows[1:]
    units = body[0] if body and not body[0][header.index("ID")].strip() else [""] * len(header)
    if body and units is body[0]:
        body = body[1:]
    metrics = [(i, h) for i, h in enumerate(header) if h not in META]
    out = []
    for r in body:
        if len(r) != len(header):
            continue
        launch = {"id": r[header.index("ID")], "kernel": r[header.index("Kernel Name")], "device": _device(header, r)}
        for i, h in metrics:
            try:
                launch[h] = _number(r[i]) * _scale(units[i], h)
            except ValueError:
                continue
        out.append(launch)
    return out


def _sum(launch: dict, pattern: str) -> float:
    return sum(v for k, v in launch.items() if re.fullmatch(pattern, k) and v == v)


# ncu reports each tensor op under several names: per source type (sm__ops_path_tensor_src_bf16_dst_fp32), per
# instruction family (..._op_hgmma_src_bf16_dst_fp32, ..._op_hmma_...) and again split by sparsity. Summing all of
# them counts one op three or four times, so only one partition is summed: the per-source counters, else the
# per-instruction ones, never the sparsity splits.
TENSOR_OPS = (r"sm__ops_path_tensor_src_[a-z0-9]+(_dst_[a-z0-9]+)?\.sum",
              r"sm__ops_path_tensor_op_[a-z]+_src_[a-z0-9]+(_dst_[a-z0-9]+)?\.sum")


def tensor_counts(launch: dict) -> tuple[str, float]:
    """("ops", tensor math ops) from sm__ops_path_tensor_* counters, else ("inst", tensor-pipe instructions)."""
    for pattern in TENSOR_OPS:
        if any(re.fullmatch(pattern, k) for k in launch):
            return "ops", _sum(launch, pattern)
    if "sm__inst_executed_pipe_tensor.sum" in launch:
        return "inst", launch["sm__inst_executed_pipe_tensor.sum"]
    return "inst", _sum(launch, r"sm__inst_executed_pipe_tensor_op_.*\.sum")


def factors(tensor_flops_per_inst: float = 4096.0) -> dict[str, float]:
    """FLOPs per tensor counter unit: per op (1) and per tensor-pipe instruction."""
    return {"ops": 1.0, "inst": tensor_flops_per_inst}


def flops(launch: dict, per_unit: dict[str, float]) -> tuple[float, float]:
    """(scalar FLOPs, tensor FLOPs) of one launch; ``per_unit`` as :func:`factors` gives."""
    scalar = sum(f * _sum(launch, rf"smsp__sass_thread_inst_executed_op_{op}_pred_on\.sum")
                 for op, f in SCALAR_FLOPS.items())
    kind, count = tensor_counts(launch)
    return scalar, count * per_unit[kind]


def dram_bytes(launch: dict) -> float:
    if "dram__bytes_read.sum" in launch or "dram__bytes_write.sum" in launch:
        return launch.get("dram__bytes_read.sum", 0.0) + launch.get("dram__bytes_write.sum", 0.0)
    return launch.get("dram__bytes.sum", float("nan"))


def calibrate(launches: list[dict], spec: str) -> tuple[str, float]:
    """(counter kind, FLOPs per unit of it) from ``NAME:FLOPS``: the (first) kernel whose name contains NAME,
    or with NAME = ``@last`` the last launch (bench.resnet --profile-one-step ends with a GEMM of known FLOPs)."""
    name, _, value = spec.rpartition(":")
    for launch in (launches[-1:] if name == "@last" else launches):
        if name == "@last" or (name and name in launch["kernel"]):
            kind, count = tensor_counts(launch)
            if count <= 0:
                raise ValueError(f"--calibrate: kernel {launch['kernel']!r} has no tensor counters")
            scalar = flops(launch, {"ops": 0.0, "inst": 0.0})[0]
            return kind, (float(value) - scalar) / count
    raise ValueError(f"--calibrate: no kernel name contains {name!r}")


def kernel_points(launches: list[dict], per_unit: dict[str, float]) -> list[dict]:
    """Per kernel name: launches, FLOPs (scalar, tensor), DRAM bytes, time, AI, achieved GFLOP/s, time share."""
    by_name: dict[str, dict] = {}
    for launch in launches:
        scalar, tensor = flops(launch, per_unit)
        k = by_name.setdefault(launch["kernel"], {"kernel": launch["kernel"], "launches": 0, "scalar_flops": 0.0,
                                                  "tensor_flops": 0.0, "bytes": 0.0, "time_s": 0.0})
        k["launches"] += 1
        k["scalar_flops"] += scalar
        k["tensor_flops"] += tensor
        k["bytes"] += dram_bytes(launch)
        k["time_s"] += launch.get("gpu__time_duration.sum", float("nan"))
    total = sum(k["time_s"] for k in by_name.values() if k["time_s"] == k["time_s"]) or float("nan")
    out = []
    for k in by_name.values():
        f = k["scalar_flops"] + k["tensor_flops"]
        k.update(flops=f, ai=f / k["bytes"] if k["bytes"] > 0 else float("nan"),
                 gflops=f / k["time_s"] / 1e9 if k["time_s"] > 0 else float("nan"), share=k["time_s"] / total)
        out.append(k)
    return sorted(out, key=lambda k: -k["time_s"])


def step_point(points: list[dict]) -> dict:
    f, b, t = (sum(p[key] for p in points) for key in ("flops", "bytes", "time_s"))
    return {"kernel": "whole step", "launches": sum(p["launches"] for p in points), "flops": f, "bytes": b,
            "time_s": t, "ai": f / b if b else float("nan"), "gflops": f / t / 1e9 if t else float("nan"), "share": 1.0}


def find_ceilings(device: str, explicit: str | None) -> Path | None:
    """results/<device slug>/ceilings.json (the slug rule of triton_kernels.runtime.device_slug)."""
    if explicit:
        return Path(explicit)
    slug = "".join(c if c.isalnum() else "_" for c in device).strip("_")
    while "__" in slug:
        slug = slug.replace("__", "_")
    cand = Path(__file__).resolve().parents[1] / "results" / slug / "ceilings.json"
    return cand if cand.exists() else None


def draw_points(ax, points: list[tuple[float, float, str]]) -> None:
    """Hand-given (arithmetic intensity FLOP/B, achieved GFLOP/s, label) points as labelled stars on a
    roofline axis in TFLOP/s (what ``bench.roofline --point AI GFLOPS --label NAME`` would draw)."""
    for ai, gflops, label in points:
        ax.scatter([ai], [gflops / 1e3], marker="*", s=250, color="k", zorder=5)
        ax.annotate(label, (ai, gflops / 1e3), textcoords="offset points", xytext=(6, 6), fontsize=8)


def plot(points: list[dict], ceilings: dict, png: Path, title: str, label_top: int = 8) -> Path:
    """Roofline (TFLOP/s vs FLOP/byte) with the measured ceilings and one point per kernel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(10, 6.5))
    ai = np.logspace(-3, 4, 300)
    bw = ceilings["copy_gbps"] * 1e9
    for name, peak in ceilings["gemm_tflops"].items():
        ax.plot(ai, np.minimum(peak, bw * ai / 1e12), lw=1, label=f"roof {name} ({peak:.0f} TFLOP/s)")
    good = [p for p in points if p["ai"] == p["ai"] and p["gflops"] == p["gflops"] and p["ai"] > 0 and p["gflops"] > 0]
    kernels = [p for p in good if p["kernel"] != "whole step"]
    if kernels:
        ax.scatter([p["ai"] for p in kernels], [p["gflops"] / 1e3 for p in kernels],
                   s=[20 + 600 * p["share"] for p in kernels], alpha=0.6, label="kernels (area ~ time share)")
        for p in kernels[:label_top]:
            ax.annotate(p["kernel"][:40], (p["ai"], p["gflops"] / 1e3), fontsize=6, alpha=0.8)
    draw_points(ax, [(p["ai"], p["gflops"], "whole step") for p in good if p["kernel"] == "whole step"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return png


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("report", nargs="?", help="ncu --csv export")
    p.add_argument("--list-metrics", action="store_true", help="print the counters read, comma-separated, and stop")
    p.add_argument("--ceilings", default=None, help="ceilings.json (default results/<the CSV's device>/ceilings.json)")
    p.add_argument("--png", default=None, help="plot (default <report>.roofline.png)")
    p.add_argument("--out", default=None, help="directory for long-format rows (suite ncu_roofline)")
    p.add_argument("--json", default=None, help="per-kernel points as JSON")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--tensor-flops-per-inst", type=float, default=4096.0,
                   help="FLOPs per tensor-pipe instruction (default 4096: one HMMA m16n8k16 per warp)")
    p.add_argument("--calibrate", default=None, help="NAME:FLOPS: the factor from a kernel of known FLOPs "
                   "(NAME @last: the last launch, which is then left out of the points)")
    p.add_argument("--label", default=None, help="title / case label (default: the CSV's name)")
    args = p.parse_args(argv)
    if args.list_metrics:
        print(",".join(metric_names()))
        return 0
    if args.report is None:
        p.error("the ncu --csv export is required")
    path = Path(args.report)
    if not path.is_file():
        raise SystemExit(f"no such file: {path}")
    launches = parse(path.read_text(errors="replace"))
    per_unit = factors(args.tensor_flops_per_inst)
    if args.calibrate:
        kind, per_unit[kind] = calibrate(launches, args.calibrate)
        if args.calibrate.startswith("@last:"):
            launches = launches[:-1]  # the calibration GEMM is not part of the step
    points = kernel_points(launches, per_unit)
    points.append(step_point(points))
    label = args.label or path.stem
    print(f"{len(launches)} launches, {len(points) - 1} kernels; tensor FLOPs per instruction {per_unit['inst']:g}, "
          f"per op {per_unit['ops']:g}")
    print(f"{'time us':>10} {'share':>6} {'n':>4} {'GFLOP':>9} {'MB':>9} {'AI':>8} {'GFLOP/s':>9}  kernel")
    for q in points[: args.top] + [points[-1]]:
        print(f"{q['time_s'] * 1e6:10.1f} {100 * q['share']:5.1f}% {q['launches']:4d} {q['flops'] / 1e9:9.3f} "
              f"{q['bytes'] / 1e6:9.2f} {q['ai']:8.2f} {q['gflops']:9.1f}  {q['kernel'][:90]}")
    device = next((x["device"] for x in launches if x.get("device")), "")
    cpath = find_ceilings(device, args.ceilings)
    if cpath is not None and cpath.exists():
        png = Path(args.png) if args.png else path.with_suffix(".roofline.png")
        plot(points, json.loads(cpath.read_text()), png, f"{label}: {len(points) - 1} kernels on {device or '?'}")
        print(f"plot -> {png} (ceilings {cpath})")
    else:
        print("no ceilings.json for this device: run `python -m bench.roofline --measure` there (or pass "
              "--ceilings); no plot", file=sys.stderr)
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(points, indent=1))
    if args.out:
        from . import results

        rows = []
        for q in points:
            params = {"report": path.name, "launches": q["launches"], "tensor_flops_per_unit": per_unit}
            for metric, value, unit in (("arithmetic_intensity", q["ai"], "FLOP/B"), ("gflops", q["gflops"], "GFLOP/s"),
                                        ("duration_us", q["time_s"] * 1e6, "us"), ("dram_mb", q["bytes"] / 1e6, "MB")):
                rows.append(results.make_row("ncu_roofline", q["kernel"][:200], params, "", "ncu", metric,
                                             value if value == value else None, unit, note=label,
                                             device=device or None))
        tag = "".join(c if c.isalnum() or c in "-_" else "-" for c in label).strip("-")  # a file name
        print(f"rows -> {results.write_rows(rows, args.out, 'ncu_roofline', tag=tag)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
