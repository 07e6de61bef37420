"""MNIST in its original IDX format (gzip or raw), validated, as float32 tensors in [0, 1].

IDX layout (big-endian): magic (uint32) = 0x00000803 = 2051 for images (then count, rows, cols) or
0x00000801 = 2049 for labels (then count), followed by the uint8 payload. Every problem (missing file,
bad magic, wrong dims, truncated payload, trailing bytes, images/labels count mismatch, labels out of
0..9) raises :class:`MnistFormatError` (a ValueError) naming the file.

Where the files are looked for (first that holds IDX files): the ``root`` argument (``--data``),
``.data/mnist`` under the repository root, then ``../shared/data/mnist`` relative to the repository root.
``python -m bench.data.fetch mnist`` downloads the four canonical files into ``.data/mnist``.
"""
from __future__ import annotations

import dataclasses
import gzip
import struct
import zlib
from pathlib import Path

import numpy as np
import torch

from bench.data.common import DataError, DataNotFoundError, default_roots, find_dir, fetch_hint

IMAGES_MAGIC = 2051
LABELS_MAGIC = 2049
SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
DEFAULT_ROOTS = default_roots("mnist")


class MnistFormatError(DataError):
    """A missing, corrupt or inconsistent MNIST file (the message names the file)."""


class MnistNotFoundError(MnistFormatError, DataNotFoundError):
    """No MNIST directory or file where it was looked for (the message says how to fetch it)."""


@dataclasses.dataclass
class MnistSplit:
    """One split: images (N, 784) float32 in [0, 1] (or uint8 0..255 when raw=True), labels (N,) int64."""

    images: torch.Tensor
    labels: torch.Tensor
    name: str

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def to(self, device, non_blocking: bool = False) -> "MnistSplit":
        return MnistSplit(self.images.to(device, non_blocking=non_blocking),
                          self.labels.to(device, non_blocking=non_blocking), self.name)

    def pin_memory(self) -> "MnistSplit":
        return MnistSplit(self.images.pin_memory(), self.labels.pin_memory(), self.name)

    def subset(self, n: int) -> "MnistSplit":
        return MnistSplit(self.images[:n].clone(), self.labels[:n].clone(), self.name)


def find_root(root: str | Path | None = None) -> Path:
    """The directory holding the IDX files: ``root`` if given, else the first default holding any."""
    def has_idx(p: Path) -> bool:
        return any(_find(p, stem) is not None for stems in SPLITS.values() for stem in stems)

    return find_dir("mnist", "MNIST", root, has_idx, error=MnistNotFoundError)


def _find(root: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem, stem.replace("-idx", ".idx")):
        p = root / name
        if p.is_file():
            return p
    return None


def _locate(root: Path, stem: str) -> Path:
    p = _find(root, stem)
    if p is None:
        raise MnistNotFoundError(f"missing MNIST file {root / (stem + '.gz')} (nor {stem} raw) in {root}; "
                                 + fetch_hint("mnist"))
    return p


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise MnistFormatError(f"cannot read MNIST file {path}: {e}") from e
    if raw[:2] == b"\x1f\x8b":  # gzip magic
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise MnistFormatError(f"corrupt gzip in MNIST file {path}: {e}") from e
    return raw


def read_idx(path: str | Path, expect_magic: int) -> np.ndarray:
    """Parse one IDX file into a uint8 array: (N, rows, cols) for images, (N,) for labels."""
    path = Path(path)
    data = _read_bytes(path)
    ndim = 3 if expect_magic == IMAGES_MAGIC else 1
    header = 4 + 4 * ndim
    if len(data) < 4:
        raise MnistFormatError(f"MNIST file {path} is truncated: {len(data)} bytes, no IDX header")
    (magic,) = struct.unpack(">I", data[:4])
    if magic != expect_magic:
        raise MnistFormatError(f"MNIST file {path} has magic number {magic}, expected {expect_magic} "
                               f"({'images' if expect_magic == IMAGES_MAGIC else 'labels'})")
    if len(data) < header:
        raise MnistFormatError(f"MNIST file {path} is truncated inside its header ({len(data)} bytes)")
    dims = struct.unpack(">" + "I" * ndim, data[4:header])
    if ndim == 3 and dims[1:] != (28, 28):
        raise MnistFormatError(f"MNIST file {path} has images of {dims[1]}x{dims[2]}, expected 28x28")
    expected = int(np.prod(dims)) + header
    if len(data) < expected:
        raise MnistFormatError(f"MNIST file {path} is truncated: {len(data)} bytes, header says {expected}")
    if len(data) > expected:
        raise MnistFormatError(f"MNIST file {path} has {len(data) - expected} trailing bytes after "
                               f"{dims[0]} records")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load_split(split: str = "train", root: str | Path | None = None, *, limit: int | None = None,
               raw: bool = False, device: str | torch.device | None = None, pin_memory: bool = False
               ) -> MnistSplit:
    """Load one split ("train" or "test").

    limit: keep the first ``limit`` examples. raw: keep images as uint8 (0..255) instead of float32/255.
    pin_memory: page-lock the CPU tensors (fast, asynchronous host->device copies).
    device: preload onto this device (e.g. "cuda": the whole train set is 188 MB in float32).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {tuple(SPLITS)}, got {split!r}")
    r = find_root(root)
    img_path, lab_path = (_locate(r, s) for s in SPLITS[split])
    images = read_idx(img_path, IMAGES_MAGIC)
    labels = read_idx(lab_path, LABELS_MAGIC)
    if images.shape[0] != labels.shape[0]:
        raise MnistFormatError(f"MNIST {split}: {img_path} holds {images.shape[0]} images but {lab_path} "
                               f"holds {labels.shape[0]} labels")
    if labels.size and int(labels.max()) > 9:
        raise MnistFormatError(f"MNIST file {lab_path} has label {int(labels.max())}, expected 0..9")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.reshape(images.shape[0], -1).copy())
    if not raw:
        x = x.to(torch.float32).div_(255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    out = MnistSplit(x, y, split)
    if pin_memory and torch.cuda.is_available():
        out = out.pin_memory()
    if device is not None:
        out = out.to(device, non_blocking=pin_memory)
    return out


def load(root: str | Path | None = None, *, limit_train: int | None = None, limit_test: int | None = None,
         **kw) -> tuple[MnistSplit, MnistSplit]:
    """(train, test) splits; keyword arguments as :func:`load_split`."""
    return (load_split("train", root, limit=limit_train, **kw), load_split("test", root, limit=limit_test, **kw))


def write_idx(path: str | Path, array: np.ndarray, *, gz: bool | None = None) -> Path:
    """Write a uint8 array as an IDX file (images (N, 28, 28) or labels (N,)); gzip if the name ends .gz.
    Used to build small real-format subsets (CI) and test files."""
    path = Path(path)
    array = np.ascontiguousarray(array, dtype=np.uint8)
    magic = IMAGES_MAGIC if array.ndim == 3 else LABELS_MAGIC
    data = struct.pack(">I", magic) + struct.pack(">" + "I" * array.ndim, *array.shape) + array.tobytes()
    if gz if gz is not None else path.suffix == ".gz":
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return path


def write_subset(dst: str | Path, n_train: int, n_test: int, root: str | Path | None = None) -> Path:
    """Copy the first n_train / n_test examples of the real files into ``dst`` as IDX .gz files."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    r = find_root(root)
    for split, n in (("train", n_train), ("test", n_test)):
        img_stem, lab_stem = SPLITS[split]
        write_idx(dst / (img_stem + ".gz"), read_idx(_locate(r, img_stem), IMAGES_MAGIC)[:n])
        write_idx(dst / (lab_stem + ".gz"), read_idx(_locate(r, lab_stem), LABELS_MAGIC)[:n])
    return dst
