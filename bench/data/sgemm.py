"""The UCI SGEMM GPU kernel performance data set (241,600 rows): a validated, split, standardised loader.

Each row: 14 kernel parameters (MWG, NWG, KWG, MDIMC, NDIMC, MDIMA, NDIMB, KWI, VWM, VWN, STRM, STRN,
SA, SB) and 4 run times in ms ("Run1 (ms)" .. "Run4 (ms)").

Choices (recorded in ``SgemmData.info`` and in each training session's config.json):
* target ``"log"`` (default): y = ln(mean of the four runs), as the data set's Readme advises (run
  times span 13 ms .. 3397 ms); ``"mean"``: the raw mean in ms.
* the target is then standardised with the TRAIN split's mean / std (so an MSE of 1.0 is "predicting the
  mean"; ``standardize_target=False`` keeps the raw units);
* features standardised with the TRAIN split's mean / std (never with validation or test rows);
* split: a seeded random permutation, 80 % train / 10 % validation / 10 % test by default.

Default location: an explicit path, else ``.data/sgemm`` in the repository if it holds the CSV, else
``../shared/data/sgemm`` next to the repository. A directory is searched for ``sgemm_product.csv.gz``
then ``sgemm_product.csv``. ``python -m bench.data.fetch sgemm`` downloads the UCI archive into
``.data/sgemm``.
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import math
import zlib
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from bench.data.common import DataError, DataNotFoundError, default_roots, fetch_hint, not_found_message

FEATURES = ("MWG", "NWG", "KWG", "MDIMC", "NDIMC", "MDIMA", "NDIMB", "KWI", "VWM", "VWN",
            "STRM", "STRN", "SA", "SB")
RUNS = ("Run1 (ms)", "Run2 (ms)", "Run3 (ms)", "Run4 (ms)")
TARGETS = ("log", "mean")
FILE_NAMES = ("sgemm_product.csv.gz", "sgemm_product.csv")
EXPECTED_ROWS = 241_600


class SgemmDataError(DataError):
    """The SGEMM file is missing, malformed or inconsistent (the message says what and where)."""


class SgemmNotFoundError(SgemmDataError, DataNotFoundError):
    """No SGEMM CSV where it was looked for (the message says how to fetch it)."""


def _csv_in(directory: Path) -> Optional[Path]:
    for name in FILE_NAMES:
        if (directory / name).is_file():
            return directory / name
    return None


def default_path() -> Path:
    """The first default directory holding the CSV (``.data/sgemm``, ``../shared/data/sgemm``)."""
    roots = default_roots("sgemm")
    for p in roots:
        if p.is_dir() and _csv_in(p) is not None:
            return p
    raise SgemmNotFoundError(not_found_message("SGEMM data (sgemm_product.csv[.gz])", "sgemm", roots))


def resolve(path: Union[str, Path, None] = None) -> Path:
    """The CSV (.gz) file to read for ``path`` (a file or a directory; None = the default location)."""
    p = Path(path) if path is not None else default_path()
    if p.is_dir():
        f = _csv_in(p)
        if f is None:
            raise SgemmNotFoundError(f"no {' or '.join(FILE_NAMES)} in directory {p}; {fetch_hint('sgemm')}")
        return f
    if not p.is_file():
        raise SgemmNotFoundError(f"SGEMM data not found at {p} (--data); {fetch_hint('sgemm')}")
    return p


def read_csv(path: Union[str, Path, None] = None) -> tuple[np.ndarray, np.ndarray]:
    """Read and validate the CSV: returns (features (n, 14) float64, run times (n, 4) float64)."""
    f = resolve(path)
    try:
        raw = f.read_bytes()
    except OSError as e:
        raise SgemmDataError(f"cannot read SGEMM file {f}: {e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:  # truncated (EOFError), bad CRC (OSError), bad deflate data
            raise SgemmDataError(f"{f}: corrupt gzip file ({e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SgemmDataError(f"{f}: not a UTF-8 text CSV ({e})") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise SgemmDataError(f"{f}: empty file (expected a header row and data rows)")
    header = [h.strip() for h in lines[0].split(",")]
    expected = list(FEATURES) + list(RUNS)
    if header != expected:
        missing = [c for c in expected if c not in header]
        extra = [c for c in header if c not in expected]
        raise SgemmDataError(f"{f}: header does not match the SGEMM layout; missing columns {missing}, "
                             f"unexpected columns {extra} (expected {','.join(expected)})")
    body = [ln for ln in lines[1:] if ln.strip()]
    if not body:
        raise SgemmDataError(f"{f}: no data rows after the header")
    try:
        data = np.loadtxt(io.StringIO("\n".join(body)), delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as e:
        # find the first bad line for a useful message
        for i, ln in enumerate(body):
            parts = ln.split(",")
            if len(parts) != len(expected):
                raise SgemmDataError(f"{f}: line {i + 2} has {len(parts)} fields, expected {len(expected)}") from None
            try:
                [float(p) for p in parts]
            except ValueError:
                raise SgemmDataError(f"{f}: line {i + 2} has a non-numeric value: {ln[:120]!r}") from None
        raise SgemmDataError(f"{f}: could not parse ({e})") from None
    if data.shape[1] != len(expected):
        raise SgemmDataError(f"{f}: rows have {data.shape[1]} fields, expected {len(expected)}")
    bad = ~np.isfinite(data)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise SgemmDataError(f"{f}: missing or non-finite value at line {r + 2}, column {expected[c]!r}")
    runs = data[:, len(FEATURES):]
    if (runs <= 0).any():
        r, c = np.argwhere(runs <= 0)[0]
        raise SgemmDataError(f"{f}: run time must be > 0 ms, got {runs[r, c]} at line {r + 2}, column {RUNS[c]!r}")
    return data[:, :len(FEATURES)], runs


@dataclasses.dataclass
class Split:
    x: torch.Tensor  # (n, 14) float32, standardised
    y: torch.Tensor  # (n,) float32

    def __len__(self) -> int:
        return self.x.shape[0]

    def to(self, device) -> "Split":
        return Split(self.x.to(device), self.y.to(device))


@dataclasses.dataclass
class SgemmData:
    train: Split
    val: Split
    test: Split
    info: dict  # path, target, fractions, seed, normalisation statistics

    def to(self, device) -> "SgemmData":
        return SgemmData(self.train.to(device), self.val.to(device), self.test.to(device), self.info)

    def unstandardize(self, y: torch.Tensor) -> torch.Tensor:
        """Back to the target's own units (log-ms or ms)."""
        return y * self.info["y_std"] + self.info["y_mean"]


def load(path: Union[str, Path, None] = None, *, target: str = "log", fractions=(0.8, 0.1, 0.1), seed: int = 0,
         standardize_target: bool = True, max_rows: Optional[int] = None, device=None) -> SgemmData:
    """Load, validate, split and standardise the SGEMM data (see the module docstring for the choices).

    max_rows: keep a seeded random subset of this many rows (quick runs); None = all.
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    fr = tuple(float(f) for f in fractions)
    if len(fr) != 3 or any(f < 0 for f in fr) or not math.isclose(sum(fr), 1.0, abs_tol=1e-9) or fr[0] <= 0:
        raise ValueError(f"fractions must be three non-negative numbers (train > 0) summing to 1, got {fractions}")
    feats, runs = read_csv(path)
    n_all = feats.shape[0]
    mean_run = runs.mean(axis=1)
    y = np.log(mean_run) if target == "log" else mean_run
    g = np.random.default_rng(seed)
    perm = g.permutation(n_all)
    if max_rows is not None:
        if max_rows < 3:
            raise ValueError(f"max_rows must be >= 3, got {max_rows}")
        perm = perm[:max_rows]
    n = len(perm)
    n_train = int(round(fr[0] * n))
    n_val = int(round(fr[1] * n))
    n_test = n - n_train - n_val
    if n_train < 2 or (fr[1] > 0 and n_val < 1) or (fr[2] > 0 and n_test < 1):
        raise SgemmDataError(f"{n} rows are too few for the split {fr}")
    idx_tr, idx_va, idx_te = perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]
    x_mean = feats[idx_tr].mean(axis=0)
    x_std = feats[idx_tr].std(axis=0)
    x_std = np.where(x_std > 0, x_std, 1.0)  # a constant column (tiny subsets) stays 0 after centring
    if standardize_target:
        y_mean, y_std = float(y[idx_tr].mean()), float(y[idx_tr].std()) or 1.0
    else:
        y_mean, y_std = 0.0, 1.0

    def mk(idx):
        x = torch.from_numpy((feats[idx] - x_mean) / x_std).float()
        yy = torch.from_numpy((y[idx] - y_mean) / y_std).float()
        s = Split(x.contiguous(), yy.contiguous())
        return s.to(device) if device is not None else s

    info = {
        "path": str(resolve(path)), "rows": n_all, "rows_used": n, "target": target,
        "target_definition": "ln(mean of Run1..Run4 in ms)" if target == "log" else "mean of Run1..Run4 in ms",
        "standardize_target": standardize_target, "y_mean": y_mean, "y_std": y_std,
        "x_mean": x_mean.tolist(), "x_std": x_std.tolist(), "fractions": list(fr), "seed": seed,
        "n_train": len(idx_tr), "n_val": len(idx_va), "n_test": len(idx_te), "features": list(FEATURES),
    }
    return SgemmData(mk(idx_tr), mk(idx_va), mk(idx_te), info)


def write_synthetic(path: Union[str, Path], rows: int = 200, seed: int = 0, gz: bool = True) -> Path:
    """Write a small SGEMM-shaped CSV (same header, plausible values) for tests and quick runs."""
    rng = np.random.default_rng(seed)
    choices = {"MWG": [16, 32, 64, 128], "NWG": [16, 32, 64, 128], "KWG": [16, 32], "MDIMC": [8, 16, 32],
               "NDIMC": [8, 16, 32], "MDIMA": [8, 16, 32], "NDIMB": [8, 16, 32], "KWI": [2, 8],
               "VWM": [1, 2, 4, 8], "VWN": [1, 2, 4, 8], "STRM": [0, 1], "STRN": [0, 1], "SA": [0, 1], "SB": [0, 1]}
    cols = np.stack([rng.choice(choices[f], rows) for f in FEATURES], axis=1).astype(np.float64)
    base = 20.0 * np.exp(0.01 * cols[:, 0] + 0.008 * cols[:, 1] - 0.02 * cols[:, 3] + 0.3 * cols[:, 12])
    runs = base[:, None] * rng.uniform(0.97, 1.03, (rows, 4))
    lines = [",".join(list(FEATURES) + list(RUNS))]
    for r in range(rows):
        lines.append(",".join([str(int(v)) for v in cols[r]] + [f"{v:.2f}" for v in runs[r]]))
    text = ("\n".join(lines) + "\n").encode()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(gzip.compress(text) if gz else text)
    return p
