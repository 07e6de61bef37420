"""CIFAR-10 loader on tiny generated files in its three forms (python batches, binary batches, WebP-lossless
sprite shards + labels.npz), both layouts, and every way a file can be wrong."""
import hashlib
import pickle

import numpy as np
import pytest

from bench.data import cifar10
from bench.data.common import DataNotFoundError, default_roots


def _images(rng, n):
    return rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)


def _write_batches(directory, writer, suffix="", sizes=(2, 3, 2, 1, 2, 4), seed=0):
    """Five train batches and a test batch; returns (train images NCHW, labels), (test images, labels)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    parts = []
    for name, n in zip(names, sizes):
        images, labels = _images(rng, n), rng.integers(0, 10, n)
        writer(directory / (name + suffix), images, labels)
        parts.append((images, labels))
    train = (np.concatenate([p[0] for p in parts[:5]]), np.concatenate([p[1] for p in parts[:5]]))
    return train, parts[5]


def _write_webp(directory, columns=3, rows=2, seed=0):
    """Shards of rows x columns tiles; labels.npz as in ../shared/data/cifar10."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    per = rows * columns
    train = _images(rng, 5 * per).transpose(0, 2, 3, 1)
    test = _images(rng, per).transpose(0, 2, 3, 1)
    for k in range(5):
        cifar10.write_shard(directory / f"train_{k}.webp", train[k * per:(k + 1) * per], columns)
    cifar10.write_shard(directory / "test.webp", test, columns)
    labels = {"train_labels": rng.integers(0, 10, len(train)).astype(np.uint8),
              "test_labels": rng.integers(0, 10, len(test)).astype(np.uint8),
              "train_canonical_index": np.where(np.arange(len(train)) < 4, np.arange(len(train)), -1).astype(np.int32),
              "test_canonical_index": np.full(len(test), -1, np.int32),
              "train_filenames": np.array([f"t{i}.png" for i in range(len(train))]),
              "test_filenames": np.array([f"e{i}.png" for i in range(len(test))])}
    np.savez(directory / "labels.npz", **labels)
    return (train, labels["train_labels"]), (test, labels["test_labels"]), labels


@pytest.mark.parametrize("fmt", ["python", "binary"])
@pytest.mark.parametrize("subfolder", [False, True])
def test_batches_roundtrip_both_layouts(tmp_path, fmt, subfolder):
    writer, suffix = (cifar10.write_python_batch, "") if fmt == "python" else (cifar10.write_binary_batch, ".bin")
    directory = tmp_path / cifar10.SUBFOLDERS[fmt] if subfolder else tmp_path
    (train_images, train_labels), (test_images, test_labels) = _write_batches(directory, writer, suffix)
    data = cifar10.load(tmp_path)
    assert data.format == fmt and data.original_order
    assert data.train.images.dtype == np.uint8 and data.train.images.shape == (10, 3, 32, 32)
    assert np.array_equal(data.train.images, train_images) and np.array_equal(data.test.images, test_images)
    assert data.train.labels.dtype == np.int64 and np.array_equal(data.train.labels, train_labels)
    assert np.array_equal(data.test.labels, test_labels) and np.array_equal(data.train.canonical_index, np.arange(10))
    nhwc = cifar10.load_split("test", tmp_path, layout="NHWC")
    assert nhwc.images.flags["C_CONTIGUOUS"] and np.array_equal(nhwc.images, test_images.transpose(0, 2, 3, 1))


def test_webp_shards_lossless_and_sorted_order_flagged(tmp_path):
    (train, train_labels), (test, test_labels), table = _write_webp(tmp_path)
    data = cifar10.load(tmp_path, layout="NHWC")
    assert data.format == "webp" and not data.original_order
    assert np.array_equal(data.train.images, train) and np.array_equal(data.test.images, test)  # lossless
    assert np.array_equal(data.train.labels, train_labels) and data.test.labels.dtype == np.int64
    assert np.array_equal(data.train.canonical_index, table["train_canonical_index"])
    nchw = cifar10.load_split("train", tmp_path)
    assert nchw.images.shape == (30, 3, 32, 32) and np.array_equal(nchw.images, train.transpose(0, 3, 1, 2))


def test_format_preference_and_explicit_format(tmp_path):
    _write_webp(tmp_path)
    _write_batches(tmp_path, cifar10.write_binary_batch, ".bin")
    assert cifar10.detect(tmp_path)[0] == "binary"
    assert len(cifar10.load_split("test", tmp_path, format="webp")) == 6
    with pytest.raises(cifar10.Cifar10NotFoundError, match="missing CIFAR-10 file .*data_batch_1 .python format"):
        cifar10.load_split("train", tmp_path, format="python")


def test_python_batch_errors(tmp_path):
    _write_batches(tmp_path, cifar10.write_python_batch)
    path = tmp_path / "data_batch_2"
    cifar10.write_python_batch(path, np.zeros((2, 3, 32, 32), np.uint8) + 7, [3, 12])
    with pytest.raises(cifar10.Cifar10DataError, match="data_batch_2 has label 12, expected 0..9"):
        cifar10.load_split("train", tmp_path)
    cifar10.write_python_batch(path, np.ones((2, 3, 32, 32), np.uint8), [3])
    with pytest.raises(cifar10.Cifar10DataError, match="data_batch_2 holds 2 images but 1 labels"):
        cifar10.load_split("train", tmp_path)
    with open(path, "wb") as f:
        pickle.dump({b"data": np.ones((2, 3000), np.uint8), b"labels": [1, 2]}, f, protocol=2)
    with pytest.raises(cifar10.Cifar10DataError,
                       match=r"data_batch_2: data is uint8 \(2, 3000\), expected uint8 \(N, 3072\)"):
        cifar10.load_split("train", tmp_path)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(cifar10.Cifar10DataError, match="data_batch_2 is not a readable python batch"):
        cifar10.load_split("train", tmp_path)


def test_python_batch_written_by_numpy_1(tmp_path):
    """The canonical batches name numpy 1's module (numpy.core.multiarray), which numpy 2 keeps elsewhere."""
    (train_images, _), _ = _write_batches(tmp_path, cifar10.write_python_batch)
    path = tmp_path / "data_batch_1"
    data = path.read_bytes()
    if b"cnumpy._core.multiarray\n" in data:
        path.write_bytes(data.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n"))
    assert b"cnumpy.core.multiarray\n" in path.read_bytes()
    assert np.array_equal(cifar10.load_split("train", tmp_path).images, train_images)


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_python_batch_refuses_other_objects(tmp_path, capsys):
    _write_batches(tmp_path, cifar10.write_python_batch)
    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump({b"data": _Evil(), b"labels": []}, f, protocol=2)
    with pytest.raises(cifar10.Cifar10DataError, match="test_batch .*refusing to load .*print"):
        cifar10.load_split("test", tmp_path)
    assert "must never run" not in capsys.readouterr().out


def test_binary_and_webp_errors(tmp_path):
    _write_batches(tmp_path / "bin", cifar10.write_binary_batch, ".bin")
    path = tmp_path / "bin" / "test_batch.bin"
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(cifar10.Cifar10DataError, match="test_batch.bin has 12287 bytes, not a whole number of 3073"):
        cifar10.load_split("test", tmp_path / "bin")
    _write_webp(tmp_path / "webp")
    npz = tmp_path / "webp" / "labels.npz"
    table = dict(np.load(npz))
    np.savez(npz, **{**table, "test_labels": table["test_labels"][:-1]})
    with pytest.raises(cifar10.Cifar10DataError,
                       match="labels.npz holds 5 labels but the shards test.webp hold 6 images"):
        cifar10.load_split("test", tmp_path / "webp")
    np.savez(npz, **{k: v for k, v in table.items() if k != "train_labels"})
    with pytest.raises(cifar10.Cifar10DataError, match="labels.npz lacks the array 'train_labels'"):
        cifar10.load_split("train", tmp_path / "webp")
    (tmp_path / "webp" / "train_3.webp").write_bytes(b"RIFF....WEBPVP8L garbage")
    with pytest.raises(cifar10.Cifar10DataError, match="shard .*train_3.webp cannot be decoded"):
        cifar10.load_split("train", tmp_path / "webp")
    (tmp_path / "webp" / "train_3.webp").unlink()
    with pytest.raises(DataNotFoundError, match="missing CIFAR-10 file .*train_3.webp .*python -m bench.data.fetch cifar10"):
        cifar10.load_split("train", tmp_path / "webp")


def test_not_found_and_bad_arguments(tmp_path):
    with pytest.raises(cifar10.Cifar10NotFoundError, match="no CIFAR-10 files in .*bench.data.fetch cifar10"):
        cifar10.load(tmp_path)
    with pytest.raises(cifar10.Cifar10NotFoundError, match="does not exist"):
        cifar10.load(tmp_path / "absent")
    with pytest.raises(ValueError, match="layout must be one of"):
        cifar10.load_split("train", tmp_path, layout="CHW")
    with pytest.raises(ValueError, match="split must be one of"):
        cifar10.load_split("valid", tmp_path)


def test_synthetic():
    a, b = cifar10.synthetic(7), cifar10.synthetic(7, layout="NHWC")
    assert a.images.shape == (7, 3, 32, 32) and b.images.shape == (7, 32, 32, 3) and a.images.dtype == np.uint8
    assert a.labels.dtype == np.int64 and a.labels.min() >= 0 and a.labels.max() <= 9
    assert np.array_equal(cifar10.synthetic(7).images, a.images) and len(cifar10.synthetic(0)) == 0


def test_shared_test_shard_if_present():
    """The test shard of ../shared/data/cifar10 decodes to the raw pixels whose sha256 its README gives."""
    root = default_roots("cifar10")[1]
    if not (root / "test.webp").is_file():
        pytest.skip("shared CIFAR-10 shards not available")
    test = cifar10.load_split("test", root, layout="NHWC")
    assert hashlib.sha256(test.images.tobytes()).hexdigest() == \
        "52a9dc125982c0440d5eed87474b2f521e96c45a98df08e4329aa42c692b9d9d"
    assert np.bincount(test.labels).tolist() == [1000] * 10 and test.canonical_index[:1000].max() >= 0
