"""CIFAR-10 (60,000 32x32 RGB images, 10 classes) as uint8 arrays, from any of its three stored forms.

Formats, in the order they are looked for in a directory (or in its ``cifar-10-batches-py`` /
``cifar-10-batches-bin`` subfolder):

* ``python``: the python batches ``data_batch_1`` .. ``data_batch_5``, ``test_batch`` (pickled dicts,
  ``data`` (N, 3072) uint8 with the 1024 red, 1024 green, 1024 blue values of each image, ``labels``).
  They are read with an unpickler that accepts nothing but numpy arrays, lists and strings.
* ``binary``: ``data_batch_1.bin`` .. ``data_batch_5.bin``, ``test_batch.bin``: records of 1 label byte
  followed by the same 3072 bytes.
* ``webp``: the lossless sprite shards of ``../shared/data/cifar10`` (``train_0.webp`` .. ``train_4.webp``,
  ``test.webp``: image i of a shard is the 32x32 tile at row i // (width / 32), column i % (width / 32))
  with ``labels.npz`` (``*_labels``, ``*_filenames``, ``*_canonical_index``). Their rows are sorted by
  class, not in the original order: shuffle before training. Decoding needs Pillow.

Search order: an explicit path (``--data``), ``.data/cifar10``, ``../shared/data/cifar10``.
``python -m bench.data.fetch cifar10`` downloads the python batches into ``.data/cifar10``.
Every problem raises :class:`Cifar10DataError` (one line, naming the file).
"""
from __future__ import annotations

import dataclasses
import pickle
import zipfile
from pathlib import Path
from typing import Optional, Union

import numpy as np

from bench.data.common import DataError, DataNotFoundError, fetch_hint, find_dir

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
SPLITS = ("train", "test")
LAYOUTS = ("NCHW", "NHWC")
FORMATS = ("python", "binary", "webp")
IMAGE_BYTES = 3 * 32 * 32
FILES = {
    "python": {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
    "binary": {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]},
    "webp": {"train": [f"train_{i}.webp" for i in range(5)], "test": ["test.webp"]},
}
SUBFOLDERS = {"python": "cifar-10-batches-py", "binary": "cifar-10-batches-bin", "webp": None}


class Cifar10DataError(DataError):
    """A missing, corrupt or inconsistent CIFAR-10 file (the message names the file)."""


class Cifar10NotFoundError(Cifar10DataError, DataNotFoundError):
    """No CIFAR-10 files where they were looked for (the message says how to fetch them)."""


@dataclasses.dataclass
class Cifar10Split:
    """images: uint8 (N, 3, 32, 32) for NCHW or (N, 32, 32, 3) for NHWC; labels: int64 (N,) in 0..9.
    canonical_index: each row's position in the original order (-1 where unknown), None if not known."""

    images: np.ndarray
    labels: np.ndarray
    name: str
    layout: str
    canonical_index: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclasses.dataclass
class Cifar10:
    train: Cifar10Split
    test: Cifar10Split
    path: Path
    format: str
    original_order: bool  # False for the WebP shards: their rows are sorted by class
    classes: tuple = CLASSES


def _layout(images: np.ndarray, have: str, want: str) -> np.ndarray:
    if have == want:
        return np.ascontiguousarray(images)
    axes = (0, 2, 3, 1) if want == "NHWC" else (0, 3, 1, 2)
    return np.ascontiguousarray(images.transpose(axes))


def _check_labels(labels: np.ndarray, path: Path) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise Cifar10DataError(f"CIFAR-10 file {path}: labels must be a 1-D integer array, got "
                               f"{labels.dtype} {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        bad = labels[(labels < 0) | (labels > 9)][0]
        raise Cifar10DataError(f"CIFAR-10 file {path} has label {bad}, expected 0..9")
    return labels.astype(np.int64)


# --------------------------------------------------------------------------------------------------
# The three formats; each reader returns (images in its native layout, labels, canonical index | None).
# --------------------------------------------------------------------------------------------------
class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts of numpy arrays, lists, numbers and strings; refuses any other global."""

    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
               ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        if module == "numpy.core.multiarray":  # the name numpy 1 wrote; numpy 2 keeps it in numpy._core
            module = "numpy._core.multiarray" if hasattr(np, "_core") else module
        return super().find_class(module, name)


def _read_python_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as e:
        raise Cifar10DataError(f"CIFAR-10 file {path} is not a readable python batch: {e}") from None
    if not isinstance(batch, dict):
        raise Cifar10DataError(f"CIFAR-10 file {path} holds a {type(batch).__name__}, expected a dict")
    batch = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in batch or "labels" not in batch:
        raise Cifar10DataError(f"CIFAR-10 file {path} has keys {sorted(batch)}, expected 'data' and 'labels'")
    data = np.asarray(batch["data"])
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != IMAGE_BYTES:
        raise Cifar10DataError(f"CIFAR-10 file {path}: data is {data.dtype} {data.shape}, "
                               f"expected uint8 (N, {IMAGE_BYTES})")
    labels = _check_labels(np.asarray(batch["labels"]), path)
    if labels.shape[0] != data.shape[0]:
        raise Cifar10DataError(f"CIFAR-10 file {path} holds {data.shape[0]} images but {labels.shape[0]} labels")
    return data.reshape(-1, 3, 32, 32), labels


def _read_binary_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise Cifar10DataError(f"cannot read CIFAR-10 file {path}: {e}") from None
    record = 1 + IMAGE_BYTES
    if raw.size == 0 or raw.size % record:
        raise Cifar10DataError(f"CIFAR-10 file {path} has {raw.size} bytes, not a whole number of "
                               f"{record}-byte records (truncated?)")
    rows = raw.reshape(-1, record)
    return rows[:, 1:].reshape(-1, 3, 32, 32), _check_labels(rows[:, 0], path)


def _read_shard(path: Path) -> np.ndarray:
    """(N, 32, 32, 3) uint8 tiles of one WebP sprite."""
    try:
        from PIL import Image
    except ImportError:
        raise Cifar10DataError(f"reading the CIFAR-10 WebP shard {path} needs Pillow (pip install pillow)") from None
    try:
        with Image.open(path) as img:
            tiles = np.asarray(img.convert("RGB"))
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise Cifar10DataError(f"CIFAR-10 shard {path} cannot be decoded: {e}") from None
    height, width, _ = tiles.shape
    if height % 32 or width % 32:
        raise Cifar10DataError(f"CIFAR-10 shard {path} is {width}x{height} pixels, not a grid of 32x32 tiles")
    rows, cols = height // 32, width // 32
    return tiles.reshape(rows, 32, cols, 32, 3).transpose(0, 2, 1, 3, 4).reshape(-1, 32, 32, 3)


def _read_webp(directory: Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shards = [directory / f for f in FILES["webp"][split]]
    images = np.concatenate([_read_shard(p) for p in shards])
    npz = directory / "labels.npz"
    try:
        with np.load(npz, allow_pickle=False) as table:
            if f"{split}_labels" not in table:
                raise Cifar10DataError(f"CIFAR-10 file {npz} lacks the array '{split}_labels'")
            labels = table[f"{split}_labels"]
            index = table[f"{split}_canonical_index"] if f"{split}_canonical_index" in table else None
    except Cifar10DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise Cifar10DataError(f"CIFAR-10 file {npz} cannot be read: {e}") from None
    labels = _check_labels(labels, npz)
    if labels.shape[0] != images.shape[0]:
        raise Cifar10DataError(f"CIFAR-10 {split}: {npz} holds {labels.shape[0]} labels but the shards "
                               f"{', '.join(p.name for p in shards)} hold {images.shape[0]} images")
    if index is not None and index.shape != labels.shape:
        raise Cifar10DataError(f"CIFAR-10 file {npz}: {split}_canonical_index has shape {index.shape}, "
                               f"expected {labels.shape}")
    return images, labels, (index.astype(np.int64) if index is not None else None)


# --------------------------------------------------------------------------------------------------
# Finding and loading
# --------------------------------------------------------------------------------------------------
def _format_dir(directory: Path, fmt: str) -> Optional[Path]:
    """Where the files of ``fmt`` lie under ``directory`` (itself or its standard subfolder), if anywhere."""
    needed = FILES[fmt]["train"] + FILES[fmt]["test"] + (["labels.npz"] if fmt == "webp" else [])
    sub = SUBFOLDERS[fmt]
    for d in (directory, directory / sub) if sub else (directory,):
        if any((d / f).is_file() for f in needed):
            return d
    return None


def detect(directory: Union[str, Path]) -> tuple[str, Path]:
    """(format, folder) of the CIFAR-10 files in ``directory``; the first of FORMATS present."""
    directory = Path(directory)
    for fmt in FORMATS:
        d = _format_dir(directory, fmt)
        if d is not None:
            return fmt, d
    raise Cifar10NotFoundError(f"no CIFAR-10 files in {directory} (python batches, binary batches or WebP "
                               f"shards + labels.npz); {fetch_hint('cifar10')}")


def find_root(path: Union[str, Path, None] = None) -> Path:
    return find_dir("cifar10", "CIFAR-10", path,
                    lambda p: any(_format_dir(p, f) is not None for f in FORMATS), error=Cifar10NotFoundError)


def load_split(split: str = "train", path: Union[str, Path, None] = None, *, layout: str = "NCHW",
               format: Optional[str] = None) -> Cifar10Split:
    """One split ("train": 5 batches or shards joined; "test") as uint8 images in ``layout``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if format is not None and format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS} or None, got {format!r}")
    root = find_root(path)
    if format is None:
        format, directory = detect(root)
    else:
        directory = _format_dir(root, format) or root
    files = [directory / f for f in FILES[format][split]]
    missing = [p for p in files if not p.is_file()]
    if format == "webp" and not (directory / "labels.npz").is_file():
        missing.append(directory / "labels.npz")
    if missing:
        raise Cifar10NotFoundError(f"missing CIFAR-10 file {missing[0]} ({format} format, {split} split); "
                                   + fetch_hint("cifar10"))
    if format == "webp":
        images, labels, index = _read_webp(directory, split)
        return Cifar10Split(_layout(images, "NHWC", layout), labels, split, layout, index)
    read = _read_python_batch if format == "python" else _read_binary_batch
    parts = [read(p) for p in files]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return Cifar10Split(_layout(images, "NCHW", layout), labels, split, layout, np.arange(len(labels)))


def load(path: Union[str, Path, None] = None, *, layout: str = "NCHW", format: Optional[str] = None) -> Cifar10:
    """Both splits; see :func:`load_split`."""
    root = find_root(path)
    fmt = format or detect(root)[0]
    train = load_split("train", root, layout=layout, format=fmt)
    test = load_split("test", root, layout=layout, format=fmt)
    return Cifar10(train, test, root, fmt, original_order=fmt != "webp")


def synthetic(n: int, *, layout: str = "NCHW", seed: int = 0, name: str = "synthetic") -> Cifar10Split:
    """``n`` random uint8 images of CIFAR-10's shape with random labels 0..9 (tests, CPU smoke runs)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    rng = np.random.default_rng(seed)
    shape = (n, 3, 32, 32) if layout == "NCHW" else (n, 32, 32, 3)
    return Cifar10Split(rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 10, n).astype(np.int64),
                        name, layout)


def write_python_batch(path: Union[str, Path], images_nchw: np.ndarray, labels: np.ndarray) -> Path:
    """Write a python batch as the original files are laid out (tests and small subsets)."""
    images_nchw = np.ascontiguousarray(images_nchw, dtype=np.uint8)
    batch = {b"batch_label": b"written by bench.data.cifar10", b"labels": [int(v) for v in labels],
             b"data": images_nchw.reshape(len(images_nchw), IMAGE_BYTES),
             b"filenames": [f"image_{i:05d}.png".encode() for i in range(len(images_nchw))]}
    path = Path(path)
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)
    return path


def write_binary_batch(path: Union[str, Path], images_nchw: np.ndarray, labels: np.ndarray) -> Path:
    """Write a binary batch (1 label byte + 3072 image bytes per record)."""
    images_nchw = np.ascontiguousarray(images_nchw, dtype=np.uint8)
    rows = np.concatenate([np.asarray(labels, np.uint8)[:, None], images_nchw.reshape(len(images_nchw), -1)], 1)
    path = Path(path)
    rows.tofile(path)
    return path


def write_shard(path: Union[str, Path], images_nhwc: np.ndarray, columns: int) -> Path:
    """Write images (N, 32, 32, 3), N a multiple of ``columns``, as one WebP-lossless sprite."""
    from PIL import Image

    images_nhwc = np.ascontiguousarray(images_nhwc, dtype=np.uint8)
    rows = len(images_nhwc) // columns
    if rows * columns != len(images_nhwc):
        raise ValueError(f"{len(images_nhwc)} images do not fill rows of {columns} columns")
    tiles = images_nhwc.reshape(rows, columns, 32, 32, 3).transpose(0, 2, 1, 3, 4).reshape(rows * 32, columns * 32, 3)
    path = Path(path)
    Image.fromarray(tiles, "RGB").save(path, format="WEBP", lossless=True, quality=100, method=0)
    return path
