"""The trial table of a sweep: one CSV line per trial, appended as it is measured, never rewritten.

``results/<device>/sweeps/<kernel>.csv`` (CPU interpreter: under the git-ignored .local/). A line is written
in one ``write`` under an exclusive lock (several worker processes append to one file), then flushed and
fsynced, so a sweep killed at any point keeps every trial it recorded; a line cut short by the kill is
dropped when the file is next opened (``repair``), and that trial runs again. A trial's id is a hash of
what it measures (kernel, shape, dtype, variant, config), so a resumed sweep skips exactly the recorded ones.
"""
from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any, Iterable

STATUSES = ("ok", "wrong", "out-of-resources", "compile-error", "error")

# columns before the kernel's shape dims / variant / knob columns, and after them
HEAD = ["trial_id", "kernel", "shape"]
MIDDLE = ["dtype"]
CONFIG = ["space", "config", "tuner_rank", "tune_key"]
MEASURED = ["status", "ms", "ms_p20", "ms_p80", "reps", "tflops", "gbps", "error_vs_fp64", "compile_s", "load_s",
            "worker", "note"]
PROVENANCE = ["device", "sm_count", "torch", "triton", "cuda", "driver", "git_commit", "timestamp"]


def columns(dims: Iterable[str], variant: Iterable[str], knobs: Iterable[str]) -> list[str]:
    """The columns of a kernel's trial table."""
    return HEAD + list(dims) + MIDDLE + list(variant) + CONFIG + list(knobs) + ["num_warps", "num_stages"] \
        + MEASURED + PROVENANCE


def trial_id(kernel: str, shape: dict, dtype: str, variant: dict, config: dict) -> str:
    """A stable id of what a trial measures (16 hex digits)."""
    key = json.dumps({"kernel": kernel, "shape": shape, "dtype": dtype, "variant": variant, "config": config},
                     sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(key.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(f):
    try:
        import fcntl

        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    except ImportError:  # pragma: no cover - non-POSIX
        yield


class TrialStore:
    """The append-only CSV of one kernel's trials (see the module docstring)."""

    def __init__(self, path: str | Path, cols: list[str]) -> None:
        self.path = Path(path)
        self.columns = list(cols)

    def _line(self, row: dict) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(["" if row.get(c) is None else row.get(c) for c in self.columns])
        return buf.getvalue()

    def open(self) -> int:
        """Create the file with its header, or check the header of an existing one and drop a last line
        cut short by a kill. Returns the bytes dropped."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as f, _locked(f):
            dropped = _repair(f)
            f.seek(0)
            first = f.readline().decode()
            header = self._line(dict(zip(self.columns, self.columns)))
            if not first:
                f.write(header.encode())
                f.flush()
                os.fsync(f.fileno())
            elif first != header:
                raise ValueError(f"{self.path} holds trials with other columns ({first.strip()[:120]}...); "
                                 "pass another --out")
        return dropped

    def append(self, row: dict) -> None:
        """Append one trial: one write under the lock, flushed and fsynced."""
        line = self._line(row).encode()
        with open(self.path, "ab") as f, _locked(f):
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def recorded(self) -> dict[str, str]:
        """trial_id -> status of every complete line."""
        return {r["trial_id"]: r["status"] for r in self.rows()}

    def rows(self) -> list[dict[str, str]]:
        return list(csv.DictReader(io.StringIO(self.text())))

    def text(self) -> str:
        """The file's complete lines (a last line still being written, or cut short, left out)."""
        if not self.path.exists():
            return ""
        with open(self.path, newline="") as f:
            text = f.read()
        return text[: text.rfind("\n") + 1]


def _repair(f) -> int:
    """Truncate an open binary file after its last newline; returns the bytes dropped."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size == 0:
        return 0
    pos = size
    block = 4096
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        chunk = f.read(pos - start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            end = start + i + 1
            if end != size:
                f.truncate(end)
            return size - end
        pos = start
    f.truncate(0)
    return size


_TEXT_COLUMNS = {"trial_id": str, "shape": str, "config": str, "tune_key": str, "note": str, "git_commit": str}


def read_trials(path: str | Path) -> "pd.DataFrame":  # noqa: F821
    """A trial table (.csv as a sweep writes it, or .csv.gz as committed) as a DataFrame; a last line cut
    short by a kill is left out."""
    import pandas as pd

    path = Path(path)
    if path.suffix == ".gz":
        return pd.read_csv(path, dtype=_TEXT_COLUMNS, keep_default_na=False, na_values=[""])
    text = TrialStore(path, []).text()
    if not text:
        return pd.DataFrame()
    return pd.read_csv(io.StringIO(text), dtype=_TEXT_COLUMNS, keep_default_na=False, na_values=[""])


def as_dict(value: Any) -> dict:
    return json.loads(value) if isinstance(value, str) else dict(value)
