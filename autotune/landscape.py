"""A sweep's trial table as a data set: check it, pack it as gzip CSV, and write its data card.

    python -m autotune.landscape --kernel gemm [--out DIR] [--pack] [--card]

``--out``: the results folder of the sweep (default results/<device>/; CPU: .local/results/cpu-interpreter/).
Prints the counts (rows, distinct trial ids, duplicates, statuses, shapes, configs) and, from the run log
``sweeps/<kernel>-runs.jsonl``, every run: trials recorded before it, trials it added, how it ended (a run
killed before its end line shows as "killed"). ``--pack`` writes ``sweeps/<kernel>.csv.gz`` (complete lines
only), ``--card`` fills autotune/DATA_CARD.md into ``sweeps/<kernel>-DATA_CARD.md``. Exits non-zero when
a trial id appears twice.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

COLUMN_DOCS = {
    "trial_id": "hash of (kernel, shape, dtype, variant, config): the resume key",
    "kernel": "the kernel family (spaces.py name)",
    "shape": "the problem shape as text (gemm: MxNxK)",
    "M": "rows of A and C", "N": "columns of B and C", "K": "the reduction length",
    "dtype": "input dtype (fp32 accumulation)",
    "layout": "gemm: how A and B are stored (n: as used, t: transposed; nt = B as nn.Linear's weight)",
    "act": "gemm epilogue activation", "precision": "fp32 dot precision (ieee / tf32)", "bias": "gemm: + bias",
    "space": "how the config was chosen (tuner list, full space sample, model-pruned)",
    "config": "the launch config as JSON (runtime.Config.to_json)",
    "tuner_rank": "position in the runtime tuner's list for this shape (-1: not in it)",
    "tune_key": "the runtime tuner's cache key for this case",
    "BLOCK_M": "tile rows", "BLOCK_N": "tile columns", "BLOCK_K": "K step", "GROUP_M": "tile-rows per group (L2 order)",
    "TMA": "1: the persistent TMA kernel", "B_RELAYOUT": "1: TMA kernel on a re-laid-out copy of B",
    "SPLIT_K": "programs per C tile, each over a slice of K (fp32 partials added by a second kernel)",
    "F64": "1: fp32 'ieee' with exact products summed in fp64 (the fp64 tensor cores; Hopper)",
    "num_warps": "warps per program", "num_stages": "pipeline stages",
    "status": "ok / wrong / out-of-resources / compile-error / error",
    "ms": "median time per call (ms)", "ms_p20": "20th percentile (ms)", "ms_p80": "80th percentile (ms)",
    "reps": "timed calls", "tflops": "2 M N K / time", "gbps": "bytes moved / time (memory-bound kernels)",
    "error_vs_fp64": "relative error vs the float64 reference", "compile_s": "compile seconds of its kernels",
    "load_s": "first launch in the timing process (s)", "worker": "which GPU worker ran it", "note": "why it failed",
    "device": "GPU", "sm_count": "streaming multiprocessors", "torch": "torch version", "triton": "Triton version",
    "cuda": "CUDA version", "driver": "driver version", "git_commit": "commit of the code", "timestamp": "when",
}


def runs(log: Path) -> list[dict]:
    """One entry per run of the log: its start, and its end when it got there."""
    out: list[dict] = []
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "start":
            out.append({"start": e})
        elif e.get("event") == "end" and out and "end" not in out[-1]:
            out[-1]["end"] = e
    return out


def run_lines(entries: list[dict]) -> list[str]:
    lines = []
    for i, r in enumerate(entries):
        s, e = r["start"], r.get("end")
        after = e["recorded_after"] if e else (entries[i + 1]["start"]["recorded_before"] if i + 1 < len(entries) else None)
        how = f"{e['stopped_by']}, {e['wall_s']:.0f} s, {e['mode']}" if e else "killed (no end line)"
        added = (after - s["recorded_before"]) if after is not None else "?"
        lines.append(f"- run {i + 1} ({s['time']}): {s['recorded_before']} recorded before, {s['pending']} pending; "
                     f"+{added} trials -> {after if after is not None else '?'}; {how}")
    return lines


def check(df) -> dict:
    counts = {"rows": len(df), "unique": int(df["trial_id"].nunique()) if len(df) else 0}
    counts["duplicates"] = counts["rows"] - counts["unique"]
    counts["statuses"] = df["status"].value_counts().to_dict() if len(df) else {}
    counts["shapes"] = int(df["shape"].nunique()) if len(df) else 0
    counts["configs"] = int(df["config"].nunique()) if len(df) else 0
    return counts


def _join(values, limit: int = 12) -> str:
    values = [str(v) for v in values]
    return ", ".join(values[:limit]) + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def card(df, kernel: str, file: str, entries: list[dict]) -> str:
    template = (Path(__file__).with_name("DATA_CARD.md")).read_text()
    template = template.split("-->", 1)[1].lstrip("\n") if "<!--" in template else template
    c = check(df)
    first = df.iloc[0] if len(df) else {}
    variant_cols = [k for k in ("layout", "act", "precision", "bias") if k in df.columns]
    commands = "\n".join(f"    python -m autotune.sweep {' '.join(r['start']['argv'])}"
                         for r in entries[:1] + [r for r in entries[1:] if r["start"]["argv"] != entries[0]["start"]["argv"]])
    fields = {
        "title": f"Triton {kernel} on {first.get('device', '?')}", "kernel": kernel, "file": file, "rows": c["rows"],
        "device": first.get("device", "?"), "sm_count": first.get("sm_count", "?"),
        "torch": first.get("torch", "?"), "triton": first.get("triton", "?"), "cuda": first.get("cuda", "?"),
        "driver": first.get("driver", "?"), "commits": _join(sorted(df["git_commit"].astype(str).unique())) if len(df) else "",
        "first": df["timestamp"].min() if len(df) else "", "last": df["timestamp"].max() if len(df) else "",
        "shapes": c["shapes"], "shape_list": _join(sorted(df["shape"].unique(), key=lambda s: [int(x) for x in s.split("x")])) if len(df) else "",
        "dtypes": _join(sorted(df["dtype"].unique())) if len(df) else "",
        "variants": _join(sorted({"/".join(str(v) for v in row) for row in df[variant_cols].values})) if variant_cols and len(df) else "-",
        "configs": c["configs"], "statuses": ", ".join(f"{k} {v}" for k, v in c["statuses"].items()),
        "commands": commands or "    (no run log)", "runs": "\n".join(run_lines(entries)) or "- (no run log)",
        "unique": c["unique"], "duplicates": c["duplicates"],
        "columns": "\n".join(f"- `{col}`: {COLUMN_DOCS.get(col, '')}" for col in df.columns),
    }
    return template.format(**fields)


def main(argv=None) -> int:
    import triton_kernels  # noqa: F401  (the interpreter switch)
    from bench import results
    from bench.cli import argument_parser

    from .store import TrialStore, read_trials

    p = argument_parser("autotune.landscape", __doc__, full=False)
    p.add_argument("--kernel", default="gemm")
    p.add_argument("--out", default=None)
    p.add_argument("--pack", action="store_true")
    p.add_argument("--card", action="store_true")
    args = p.parse_args(argv)
    sweeps = results.results_dir(args.out) / "sweeps"
    csv = sweeps / f"{args.kernel}.csv"
    gz = csv.with_suffix(".csv.gz")
    if not csv.exists() and not gz.exists():
        raise SystemExit(f"autotune.landscape: no trial table at {csv}; run python -m autotune.sweep first")
    df = read_trials(csv if csv.exists() else gz)
    entries = runs(sweeps / f"{args.kernel}-runs.jsonl")
    c = check(df)
    print(f"{csv if csv.exists() else gz}: {c['rows']} rows, {c['unique']} distinct trial ids, {c['duplicates']} "
          f"duplicates; {c['shapes']} shapes, {c['configs']} configs; statuses {c['statuses']}")
    for line in run_lines(entries):
        print(line)
    if args.pack and csv.exists():
        data = TrialStore(csv, []).text().encode()
        with open(gz, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
            z.write(data)
        print(f"packed {gz} ({gz.stat().st_size / 1e6:.2f} MB)")
    if args.card:
        path = sweeps / f"{args.kernel}-DATA_CARD.md"
        path.write_text(card(df, args.kernel, gz.name, entries))
        print(f"wrote {path}")
    return 1 if c["duplicates"] else 0


if __name__ == "__main__":
    from bench.cli import run as _run

    sys.exit(_run(main))
