"""MNIST IDX loader: tiny files built in tmp dirs (gzip and raw), and every way a file can be wrong."""
import gzip
import struct

import numpy as np
import pytest
import torch

from bench.data import mnist as mnist_data
from bench.data.common import DataNotFoundError


def _write_split(root, n_train=5, n_test=3, gz=True, rng=None):
    rng = rng or np.random.default_rng(0)
    ext = ".gz" if gz else ""
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        img_stem, lab_stem = mnist_data.SPLITS[split]
        imgs = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labs = rng.integers(0, 10, size=(n,), dtype=np.uint8)
        mnist_data.write_idx(root / (img_stem + ext), imgs, gz=gz)
        mnist_data.write_idx(root / (lab_stem + ext), labs, gz=gz)
        out[split] = (imgs, labs)
    return out


@pytest.mark.parametrize("gz", [True, False])
def test_roundtrip(tmp_path, gz):
    data = _write_split(tmp_path, gz=gz)
    train, test = mnist_data.load(tmp_path)
    imgs, labs = data["train"]
    assert train.images.shape == (5, 784) and train.images.dtype == torch.float32
    assert torch.equal(train.images, torch.from_numpy(imgs.reshape(5, -1)).float() / 255.0)
    assert float(train.images.min()) >= 0.0 and float(train.images.max()) <= 1.0
    assert torch.equal(train.labels, torch.from_numpy(labs.astype(np.int64)))
    assert len(test) == 3
    raw = mnist_data.load_split("train", tmp_path, raw=True, limit=2)
    assert raw.images.dtype == torch.uint8 and raw.images.shape == (2, 784)


def _rewrite(path, data: bytes):
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def _raw(path):
    b = path.read_bytes()
    return gzip.decompress(b) if path.suffix == ".gz" else b


def test_bad_magic(tmp_path):
    _write_split(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    _rewrite(p, struct.pack(">I", 2049) + _raw(p)[4:])
    with pytest.raises(mnist_data.MnistFormatError, match="train-images.*magic number 2049, expected 2051"):
        mnist_data.load_split("train", tmp_path)


def test_truncated_payload(tmp_path):
    _write_split(tmp_path, gz=False)
    p = tmp_path / "t10k-images-idx3-ubyte"
    _rewrite(p, _raw(p)[:-7])
    with pytest.raises(mnist_data.MnistFormatError, match="t10k-images.*truncated"):
        mnist_data.load_split("test", tmp_path)


def test_truncated_header_and_empty(tmp_path):
    _write_split(tmp_path, gz=False)
    p = tmp_path / "train-labels-idx1-ubyte"
    _rewrite(p, _raw(p)[:6])
    with pytest.raises(mnist_data.MnistFormatError, match="train-labels.*truncated"):
        mnist_data.load_split("train", tmp_path)
    _rewrite(p, b"")
    with pytest.raises(mnist_data.MnistFormatError, match="train-labels.*truncated"):
        mnist_data.load_split("train", tmp_path)


def test_corrupt_gzip(tmp_path):
    _write_split(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    b = p.read_bytes()
    p.write_bytes(b[: len(b) // 2])
    with pytest.raises(mnist_data.MnistFormatError, match="corrupt gzip .*train-images"):
        mnist_data.load_split("train", tmp_path)


def test_trailing_bytes(tmp_path):
    _write_split(tmp_path)
    p = tmp_path / "train-labels-idx1-ubyte.gz"
    _rewrite(p, _raw(p) + b"\x00\x01")
    with pytest.raises(mnist_data.MnistFormatError, match="train-labels.*trailing"):
        mnist_data.load_split("train", tmp_path)


def test_count_mismatch(tmp_path):
    _write_split(tmp_path)
    mnist_data.write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(4, np.uint8))
    with pytest.raises(mnist_data.MnistFormatError, match="5 images but .*train-labels.* 4 labels"):
        mnist_data.load_split("train", tmp_path)


def test_wrong_image_size_and_label_range(tmp_path):
    _write_split(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    p.write_bytes(gzip.compress(struct.pack(">IIII", 2051, 5, 27, 28) + bytes(5 * 27 * 28)))
    with pytest.raises(mnist_data.MnistFormatError, match="27x28"):
        mnist_data.load_split("train", tmp_path)
    _write_split(tmp_path)
    mnist_data.write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.full(5, 11, np.uint8))
    with pytest.raises(mnist_data.MnistFormatError, match="label 11"):
        mnist_data.load_split("train", tmp_path)


def test_missing(tmp_path):
    _write_split(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(mnist_data.MnistFormatError, match="missing MNIST file .*t10k-labels"):
        mnist_data.load_split("test", tmp_path)
    with pytest.raises(mnist_data.MnistFormatError, match="does not exist"):
        mnist_data.load_split("train", tmp_path / "nope")
    with pytest.raises(ValueError, match="split"):
        mnist_data.load_split("valid", tmp_path)


def test_subset_of_real_files(tmp_path):
    try:
        mnist_data.find_root()
    except mnist_data.MnistFormatError:
        pytest.skip("real MNIST files not available")
    mnist_data.write_subset(tmp_path, 64, 32)
    train, test = mnist_data.load(tmp_path)
    full = mnist_data.load_split("test", limit=32)
    assert len(train) == 64 and torch.equal(test.images, full.images) and torch.equal(test.labels, full.labels)
    assert train.labels[:8].tolist() == [5, 0, 4, 1, 9, 2, 1, 3]  # the canonical first training labels


def test_not_found_says_how_to_fetch(tmp_path):
    with pytest.raises(DataNotFoundError, match=r"MNIST directory .*nope does not exist .*python -m bench.data.fetch mnist"):
        mnist_data.load_split("train", tmp_path / "nope")
    _write_split(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataNotFoundError, match="missing MNIST file .*train-labels.*python -m bench.data.fetch mnist"):
        mnist_data.load_split("train", tmp_path)
