"""Tidy results: one row per (suite, case, backend, metric), with provenance, written as CSV + JSON
under results/<device>/. Every bench module writes through :func:`write_rows`."""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterable

import torch
import triton

from triton_kernels.runtime import INTERPRET, atomic_write_text, default_device, device_name, device_slug

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"

COLUMNS = [
    "suite", "case", "params", "dtype", "backend", "metric", "value", "p20", "p80", "unit",
    "ci_low", "ci_high", "error_vs_fp64", "status", "note", "device", "sm_count", "torch", "triton", "cuda", "driver", "git_commit",
    "timestamp",
]
STATUSES = ("ok", "wrong", "oom", "compile-error", "unsupported", "error")
CPU_NOTE = "cpu-interpreter, not a performance figure"
_TIMED_UNITS = ("ms", "s", "TFLOP/s", "GB/s", "%", "x", "inputs/s")


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    """Device, software versions and git commit, gathered once per process."""
    dev = default_device()
    p = {
        "device": device_name(dev),
        "sm_count": torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 0,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda or "",
        "driver": _driver(),
        "git_commit": _git_commit(),
    }
    return p


def _driver() -> str:
    if not torch.cuda.is_available():
        return ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _git_commit() -> str:
    """HEAD's short hash (+dirty); $TRITON_PLAYGROUND_COMMIT when set (bench/gpu_run.sh sets it from the
    .git_commit stamp shipped with a copy of the tree: a copy's own .git, if any, can be stale); where
    the tree has no .git, the hash written to .git_commit beside the code, marked "+copy"."""
    if os.environ.get("TRITON_PLAYGROUND_COMMIT"):
        return os.environ["TRITON_PLAYGROUND_COMMIT"]
    stamp = REPO / ".git_commit"
    if not (REPO / ".git").exists() and stamp.exists():
        return stamp.read_text().strip() + "+copy"
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10)
        commit = out.stdout.strip() if out.returncode == 0 else ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return commit + ("+dirty" if commit and dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def make_row(suite: str, case: str, params: dict | str, dtype: Any, backend: str, metric: str, value: Any,
             unit: str = "", p20: Any = None, p80: Any = None, error_vs_fp64: Any = None, status: str = "ok",
             note: str = "", ci_low: Any = None, ci_high: Any = None) -> dict:
    """One long-format row with provenance filled in."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    row = {
        "suite": suite, "case": case,
        "params": params if isinstance(params, str) else json.dumps(params, sort_keys=True, default=str),
        "dtype": str(dtype).replace("torch.", ""), "backend": backend, "metric": metric,
        "value": value, "p20": p20, "p80": p80, "ci_low": ci_low, "ci_high": ci_high, "unit": unit, "error_vs_fp64": error_vs_fp64, "status": status,
        "note": (CPU_NOTE + ("; " + note if note else ""))
        if INTERPRET and unit in _TIMED_UNITS and not str(note).startswith(CPU_NOTE) else note,
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    row.update(provenance())
    return {k: row.get(k) for k in COLUMNS}


def normalise(rows: Iterable[dict], suite: str) -> list[dict]:
    """Fill missing columns (provenance, note, timestamp) of rows built by hand."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("suite", suite)
        base = make_row(r["suite"], r.get("case", ""), r.get("params", {}), r.get("dtype", ""), r.get("backend", ""),
                        r.get("metric", ""), r.get("value"), r.get("unit", ""), r.get("p20"), r.get("p80"),
                        r.get("error_vs_fp64"), r.get("status", "ok"), r.get("note", ""))
        base.update({k: v for k, v in r.items() if k in COLUMNS and v is not None and k != "params"})
        out.append(base)
    return out


def results_dir(out: str | Path | None = None) -> Path:
    """results/<device>/ by default; `out` overrides (e.g. $OUT on the GPU box)."""
    if out is not None:
        return Path(out)
    slug = device_slug() if not INTERPRET else "cpu-interpreter"
    return RESULTS / slug


def write_rows(rows: list[dict], out: str | Path | None, suite: str, tag: str | None = None) -> Path:
    """Write rows as <dir>/<suite>[-tag].csv and .json (atomically); returns the CSV path."""
    import pandas as pd

    rows = normalise(rows, suite)
    d = results_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    stem = suite + (f"-{tag}" if tag else "")
    df = pd.DataFrame(rows, columns=COLUMNS)
    csv = d / f"{stem}.csv"
    atomic_write_text(csv, df.to_csv(index=False))
    atomic_write_text(d / f"{stem}.json", json.dumps(rows, indent=1, default=str))
    return csv


def read_results(paths: Iterable[str | Path] | str | Path) -> "pd.DataFrame":  # noqa: F821
    """Concatenate results CSVs (files or directories searched recursively)."""
    import pandas as pd

    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.rglob("*.csv")) if p.is_dir() else [p])
    frames = [pd.read_csv(f) for f in files if f.suffix == ".csv"]
    frames = [f for f in frames if set(["suite", "metric", "value"]).issubset(f.columns)]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)

