"""AG's News topic classification (Zhang, Zhao & LeCun 2015) in its ``ag_news_csv`` layout.

Files: ``train.csv`` and ``test.csv`` (each optionally ``.gz``): no header, three quoted columns (class
index 1..4, title, description; ``""`` is a quote, the text is kept as stored), and ``classes.txt`` (one
class name per line: World, Sports, Business, Sci/Tech). The canonical files have 120,000 and 7,600
rows; their md5s (of the uncompressed CSV) are checked by default (``expected_md5``).

``../shared/data/ag_news`` holds the test split only. Without ``train.csv`` :func:`load` returns a seeded,
class-stratified split of the test rows, ``eval_rows`` (1,000) to evaluate and the rest (6,600) to train,
and says so in ``AgNews.source`` (a smoke-test substitute, not the benchmark's split).

Search order: an explicit path (``--data``), ``.data/ag_news``, ``../shared/data/ag_news``.
``python -m bench.data.fetch ag_news`` downloads the full archive into ``.data/ag_news``.
Every problem raises :class:`AgNewsDataError` (one line, naming the file).
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import hashlib
import io
import zlib
from pathlib import Path
from typing import Mapping, Optional, Union

import numpy as np

from bench.data.common import DataError, DataNotFoundError, fetch_hint, find_dir

MD5 = {"train.csv": "b1a00f826fdfbd249f79597b59e1dc12", "test.csv": "d52ea96a97a2d943681189a97654912d"}
CANONICAL_ROWS = {"train.csv": 120_000, "test.csv": 7_600}
EVAL_ROWS = 1_000


class AgNewsDataError(DataError):
    """A missing, corrupt or inconsistent AG News file (the message names the file)."""


class AgNewsNotFoundError(AgNewsDataError, DataNotFoundError):
    """No AG News files where they were looked for (the message says how to fetch them)."""


@dataclasses.dataclass
class TextSplit:
    """titles and descriptions as stored; labels int64 (N,) in 0..num_classes-1 (the file's index - 1)."""

    titles: list[str]
    descriptions: list[str]
    labels: np.ndarray
    name: str

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def texts(self, separator: str = " ") -> list[str]:
        """Title and description joined, the input of the character-level models."""
        return [t + separator + d for t, d in zip(self.titles, self.descriptions)]

    def take(self, index: np.ndarray, name: str) -> "TextSplit":
        return TextSplit([self.titles[i] for i in index], [self.descriptions[i] for i in index],
                         self.labels[index], name)


@dataclasses.dataclass
class AgNews:
    train: TextSplit
    test: TextSplit
    classes: tuple[str, ...]
    path: Path
    source: str  # where train/test came from, e.g. the seeded split of test.csv when train.csv is absent
    split_of_test: bool = False  # True: train.csv is absent, both parts come from test.csv


def _find(directory: Path, name: str) -> Optional[Path]:
    for candidate in (directory / name, directory / (name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def find_root(path: Union[str, Path, None] = None) -> Path:
    return find_dir("ag_news", "AG News", path, lambda p: _find(p, "test.csv") is not None,
                    error=AgNewsNotFoundError)


def _read_text(path: Path, expected_md5: Optional[str]) -> str:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise AgNewsDataError(f"cannot read AG News file {path}: {e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise AgNewsDataError(f"corrupt gzip in AG News file {path}: {e}") from None
    if expected_md5 is not None:
        actual = hashlib.md5(raw).hexdigest()
        if actual != expected_md5:
            raise AgNewsDataError(f"AG News file {path} has md5 {actual} (uncompressed), expected {expected_md5}: "
                                  f"not the canonical file (pass expected_md5={{}} to read it anyway)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise AgNewsDataError(f"AG News file {path} is not UTF-8 text: {e}") from None


def read_classes(path: Union[str, Path]) -> tuple[str, ...]:
    path = Path(path)
    names = tuple(line.strip() for line in _read_text(path, None).splitlines() if line.strip())
    if len(names) < 2:
        raise AgNewsDataError(f"AG News file {path} names {len(names)} classes, expected one per line")
    return names


def read_csv(path: Union[str, Path], num_classes: int, expected_md5: Optional[str] = None,
             name: str = "") -> TextSplit:
    """Parse one ``train.csv`` / ``test.csv`` (optionally .gz)."""
    path = Path(path)
    text = _read_text(path, expected_md5)
    titles, descriptions, labels = [], [], []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            if not row:
                continue
            if len(row) != 3:
                raise AgNewsDataError(f"AG News file {path}, line {reader.line_num}: {len(row)} fields, "
                                      f"expected 3 (class, title, description)")
            if not row[0].strip().isdigit() or not 1 <= int(row[0]) <= num_classes:
                raise AgNewsDataError(f"AG News file {path}, line {reader.line_num}: class {row[0][:20]!r}, "
                                      f"expected 1..{num_classes}")
            labels.append(int(row[0]) - 1)
            titles.append(row[1])
            descriptions.append(row[2])
    except csv.Error as e:
        raise AgNewsDataError(f"AG News file {path}, line {reader.line_num}: {e}") from None
    if not labels:
        raise AgNewsDataError(f"AG News file {path} has no rows")
    return TextSplit(titles, descriptions, np.asarray(labels, dtype=np.int64), name or path.name.split(".")[0])


def stratified_split(labels: np.ndarray, n_eval: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train index, eval index): ``n_eval`` rows drawn per class in proportion to its count (largest
    remainders get the rounding), each part in a seeded random order."""
    n = len(labels)
    if not 0 < n_eval < n:
        raise ValueError(f"eval_rows must be in 1..{n - 1} for {n} rows, got {n_eval}")
    rng = np.random.default_rng(seed)
    counts = np.bincount(labels)
    quota = counts * n_eval / n
    take = np.floor(quota).astype(np.int64)
    take[np.argsort(-(quota - take), kind="stable")[: n_eval - int(take.sum())]] += 1
    eval_index, train_index = [], []
    for c, k in enumerate(take):
        rows = rng.permutation(np.flatnonzero(labels == c))
        eval_index.append(rows[:k])
        train_index.append(rows[k:])
    return rng.permutation(np.concatenate(train_index)), rng.permutation(np.concatenate(eval_index))


def load(path: Union[str, Path, None] = None, *, eval_rows: int = EVAL_ROWS, seed: int = 0,
         expected_md5: Mapping[str, str] = MD5) -> AgNews:
    """Train and test splits. ``expected_md5``: file name -> md5 of the uncompressed CSV to insist on
    ({} checks nothing). Without ``train.csv``: a seeded stratified split of ``test.csv`` (see module)."""
    root = find_root(path)
    classes_file = root / "classes.txt"
    if not classes_file.is_file():
        raise AgNewsNotFoundError(f"missing AG News file {classes_file}; {fetch_hint('ag_news')}")
    classes = read_classes(classes_file)
    test_file = _find(root, "test.csv")
    if test_file is None:
        raise AgNewsNotFoundError(f"missing AG News file {root / 'test.csv'} (nor .gz); {fetch_hint('ag_news')}")
    test = read_csv(test_file, len(classes), expected_md5.get("test.csv"), "test")
    train_file = _find(root, "train.csv")
    if train_file is not None:
        train = read_csv(train_file, len(classes), expected_md5.get("train.csv"), "train")
        return AgNews(train, test, classes, root, f"{train_file.name} and {test_file.name}")
    train_index, eval_index = stratified_split(test.labels, eval_rows, seed)
    source = (f"{root / 'train.csv'} is absent: a seeded (seed {seed}) class-stratified split of "
              f"{test_file.name}, {len(train_index)} rows to train and {len(eval_index)} to evaluate; "
              f"not the benchmark's split (`python -m bench.data.fetch ag_news` gets the full train.csv)")
    return AgNews(test.take(train_index, "train (from test.csv)"), test.take(eval_index, "test (from test.csv)"),
                  classes, root, source, split_of_test=True)
