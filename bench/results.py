"""Tidy results: one row per (suite, case, backend, metric), with provenance, written as CSV + JSON
under results/<device>/. Every bench module writes through :func:`write_rows`, which merges: a row
replaces the row of the file with the same key (suite, case, params, dtype, backend, metric) and every
other row is kept, so a filtered run (``--op X``) never loses the rows it did not measure.

CPU-interpreter runs write under .local/results/cpu-interpreter/ (git-ignored): their timings are not
performance figures and never sit beside a GPU's rows."""
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
LOCAL = REPO / ".local"  # git-ignored: what CPU-interpreter runs write (results, training sessions, plots)
CPU_DEVICE = "cpu-interpreter"
KEY = ("suite", "case", "params", "dtype", "backend", "metric")

COLUMNS = [
    "suite", "case", "params", "dtype", "backend", "metric", "value", "p20", "p80", "unit",
    "ci_low", "ci_high", "error_vs_fp64", "status", "note", "device", "sm_count", "torch", "triton", "cuda", "driver", "git_commit",
    "timestamp",
]
STATUSES = ("ok", "wrong", "oom", "compile-error", "unsupported", "error")
CPU_NOTE = "cpu-interpreter, not a performance figure"
_TIMED_UNITS = ("ms", "us", "s", "TFLOP/s", "GB/s", "%", "x", "inputs/s")


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
             note: str = "", ci_low: Any = None, ci_high: Any = None, device: str | None = None) -> dict:
    """One long-format row with provenance filled in. ``device`` names the device a figure was measured on
    when that is not this process's (rows copied back from a GPU, an ncu report parsed elsewhere): the row
    keeps it and is never marked as a CPU-interpreter figure."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    here = device is None or device == CPU_DEVICE
    row = {
        "suite": suite, "case": case,
        "params": params if isinstance(params, str) else json.dumps(params, sort_keys=True, default=str),
        "dtype": str(dtype).replace("torch.", ""), "backend": backend, "metric": metric,
        "value": value, "p20": p20, "p80": p80, "ci_low": ci_low, "ci_high": ci_high, "unit": unit, "error_vs_fp64": error_vs_fp64, "status": status,
        "note": (CPU_NOTE + ("; " + note if note else ""))
        if INTERPRET and here and unit in _TIMED_UNITS and not str(note).startswith(CPU_NOTE) else note,
        "timestamp": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    row.update(provenance())
    if not here:
        row.update(device=device, sm_count=None, cuda=None, driver=None)
    return {k: row.get(k) for k in COLUMNS}


def normalise(rows: Iterable[dict], suite: str) -> list[dict]:
    """Fill missing columns (provenance, note, timestamp) of rows built by hand. A row that names its device
    (e.g. read back from a GPU run's CSV) keeps it, and its note as it was."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("suite", suite)
        device = None if _missing(r.get("device")) else str(r["device"])
        base = make_row(r["suite"], r.get("case", ""), r.get("params", {}), r.get("dtype", ""), r.get("backend", ""),
                        r.get("metric", ""), r.get("value"), r.get("unit", ""), r.get("p20"), r.get("p80"),
                        r.get("error_vs_fp64"), r.get("status", "ok"), r.get("note") or "", device=device)
        base.update({k: v for k, v in r.items() if k in COLUMNS and v is not None and k != "params"})
        out.append(base)
    return out


def results_dir(out: str | Path | None = None) -> Path:
    """results/<device>/ on a GPU; .local/results/cpu-interpreter/ (git-ignored) in the CPU interpreter;
    `out` overrides (e.g. $OUT on the GPU box)."""
    if out is not None:
        return Path(out)
    if INTERPRET:
        return LOCAL / "results" / CPU_DEVICE
    return RESULTS / device_slug()


def local_dir(*parts: str) -> Path:
    """A folder under .local/ (git-ignored): where CPU runs put what they make by default."""
    return LOCAL.joinpath(*parts)


def row_key(row: dict) -> tuple:
    """The identity of a row: (suite, case, params, dtype, backend, metric), as strings."""
    return tuple("" if _missing(row.get(k)) else str(row.get(k)) for k in KEY)


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def _existing_rows(csv: Path) -> list[dict]:
    """The rows already written at csv: from its JSON twin (exact types) when that parses and agrees in
    length, else from the CSV itself."""
    import pandas as pd

    twin = csv.with_suffix(".json")
    n_csv = None
    if csv.exists():
        try:
            df = pd.read_csv(csv, dtype={"params": str, "dtype": str, "case": str, "backend": str})
        except (ValueError, OSError, pd.errors.ParserError) as e:
            raise ValueError(f"cannot merge into {csv}: it is not a results CSV ({e}); move it away first") from None
        n_csv = len(df)
    if twin.exists():
        try:
            rows = json.loads(twin.read_text())
            if isinstance(rows, list) and all(isinstance(r, dict) for r in rows) and n_csv in (None, len(rows)):
                return rows
        except (ValueError, OSError):
            pass
    if n_csv is None:
        return []
    return [{k: (None if _missing(v) else v) for k, v in r.items()} for r in df.to_dict("records")]


def merge_rows(old: list[dict], new: list[dict]) -> list[dict]:
    """Every old row whose key no new row has, in its place, then the new rows: a run replaces exactly the
    rows it measured. Within ``new``, the last row of a key wins."""
    latest = {}
    for r in new:
        latest[row_key(r)] = r
    kept = [r for r in old if row_key(r) not in latest]
    return kept + list(latest.values())


def write_rows(rows: list[dict], out: str | Path | None, suite: str, tag: str | None = None,
               merge: bool = True) -> Path:
    """Write rows as <dir>/<suite>[-tag].csv and .json (atomically); returns the CSV path. With ``merge``
    (the default) the rows already in the file stay unless a new row has their key (:func:`merge_rows`);
    ``merge=False`` replaces the file."""
    import pandas as pd

    rows = normalise(rows, suite)
    d = results_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    stem = suite + (f"-{tag}" if tag else "")
    csv = d / f"{stem}.csv"
    if merge:
        old = _existing_rows(csv)
        _refuse_mixing(old, rows, csv)
        rows = merge_rows(old, rows)
    rows = [{k: r.get(k) for k in COLUMNS} for r in rows]
    df = pd.DataFrame(rows, columns=COLUMNS)
    atomic_write_text(csv, df.to_csv(index=False))
    atomic_write_text(d / f"{stem}.json", json.dumps(rows, indent=1, default=str))
    return csv


def _refuse_mixing(old: list[dict], new: list[dict], csv: Path) -> None:
    """CPU-interpreter rows and a GPU's rows never share a file."""
    def kinds(rows):
        return {str(r.get("device")) == CPU_DEVICE for r in rows if not _missing(r.get("device"))}

    if len(kinds(old) | kinds(new)) > 1:
        theirs = sorted({str(r.get("device")) for r in old if not _missing(r.get("device"))})
        raise ValueError(f"{csv} holds rows of {', '.join(theirs)}: rows of another kind of device "
                         f"(cpu-interpreter vs GPU) are never mixed into it; pass another --out")


def is_cpu_interpreter(df) -> "pd.Series":  # noqa: F821
    """Per row of a results table: whether it came from the CPU interpreter (not a performance figure)."""
    dev = df["device"].astype(str) if "device" in df else ""
    note = df["note"].astype(str) if "note" in df else ""
    return (dev == CPU_DEVICE) | note.str.startswith(CPU_NOTE)


def read_results(paths: Iterable[str | Path] | str | Path) -> "pd.DataFrame":  # noqa: F821
    """Concatenate results CSVs (files, or directories searched recursively except their runs/)."""
    import pandas as pd

    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        # a directory: its current rows, not the superseded runs kept under runs/
        files.extend(sorted(f for f in p.rglob("*.csv") if "runs" not in f.relative_to(p).parts)
                     if p.is_dir() else [p])
    frames = [pd.read_csv(f) for f in files if f.suffix == ".csv"]
    frames = [f for f in frames if set(["suite", "metric", "value"]).issubset(f.columns)]
    if not frames:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(frames, ignore_index=True)

