"""AG News loader on tiny generated CSVs in the ag_news_csv layout (plain and .gz): parsing, the md5 check,
the seeded stratified split of test.csv when train.csv is absent, and every way a file can be wrong."""
import gzip
import hashlib

import numpy as np
import pytest

from bench.data import ag_news
from bench.data.common import DataNotFoundError, default_roots

CLASSES = b"World\nSports\nBusiness\nSci/Tech\n"


def _rows(n, offset=0):
    return "".join(f'"{1 + i % 4}","Title {offset + i}, ""quoted""","Line one\\line two {offset + i}"\n'
                   for i in range(n)).encode()


def _write(directory, train=12, test=40, gz=False):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "classes.txt").write_bytes(CLASSES)
    files = {}
    for name, n, offset in (("train.csv", train, 0), ("test.csv", test, 1000)):
        if n:
            data = _rows(n, offset)
            (directory / (name + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)
            files[name] = hashlib.md5(data).hexdigest()
    return files


@pytest.mark.parametrize("gz", [False, True])
def test_full_layout(tmp_path, gz):
    md5 = _write(tmp_path, gz=gz)
    data = ag_news.load(tmp_path, expected_md5=md5)
    assert not data.split_of_test and data.classes == ("World", "Sports", "Business", "Sci/Tech")
    assert len(data.train) == 12 and len(data.test) == 40 and data.train.labels.dtype == np.int64
    assert data.train.labels[:5].tolist() == [0, 1, 2, 3, 0]
    assert data.train.titles[1] == 'Title 1, "quoted"' and data.test.descriptions[0] == "Line one\\line two 1000"
    assert data.train.texts()[0] == 'Title 0, "quoted" Line one\\line two 0'


def test_md5_checked_by_default(tmp_path):
    md5 = _write(tmp_path)
    with pytest.raises(ag_news.AgNewsDataError,
                       match=f"train.csv has md5 {md5['train.csv']} .*expected {ag_news.MD5['train.csv']}"):
        ag_news.load(tmp_path, expected_md5={"train.csv": ag_news.MD5["train.csv"]})
    with pytest.raises(ag_news.AgNewsDataError, match="test.csv has md5"):
        ag_news.load(tmp_path)  # the canonical md5s: these tiny files are not the canonical ones
    assert len(ag_news.load(tmp_path, expected_md5={}).train) == 12


def test_without_train_csv_a_seeded_stratified_split_of_test(tmp_path):
    _write(tmp_path, train=0, test=40, gz=True)
    data = ag_news.load(tmp_path, eval_rows=8, seed=3, expected_md5={})
    assert data.split_of_test and "train.csv is absent" in data.source and "8 to evaluate" in data.source
    assert (len(data.train), len(data.test)) == (32, 8)
    assert np.bincount(data.test.labels).tolist() == [2, 2, 2, 2]  # stratified: 10 rows per class
    assert not set(data.train.titles) & set(data.test.titles)
    assert set(data.train.titles) | set(data.test.titles) == {f'Title {1000 + i}, "quoted"' for i in range(40)}
    again = ag_news.load(tmp_path, eval_rows=8, seed=3, expected_md5={})
    other = ag_news.load(tmp_path, eval_rows=8, seed=4, expected_md5={})
    assert again.test.titles == data.test.titles and other.test.titles != data.test.titles
    with pytest.raises(ValueError, match="eval_rows must be in 1..39 for 40 rows, got 40"):
        ag_news.load(tmp_path, eval_rows=40, expected_md5={})


@pytest.mark.parametrize("text,match", [
    (b'"1","a"\n', r"test.csv, line 1: 2 fields, expected 3"),
    (b'"1","a","b"\n"5","a","b"\n', r"test.csv, line 2: class '5', expected 1..4"),
    (b'"x","a","b"\n', r"test.csv, line 1: class 'x'"),
    (b"", "test.csv has no rows"),
    (b'"1","caf\xe9","b"\n', "test.csv is not UTF-8"),
])
def test_malformed_csv(tmp_path, text, match):
    _write(tmp_path, train=0, test=4)
    (tmp_path / "test.csv").write_bytes(text)
    with pytest.raises(ag_news.AgNewsDataError, match=match):
        ag_news.load(tmp_path, expected_md5={})


def test_corrupt_gzip_and_missing_files(tmp_path):
    _write(tmp_path, gz=True)
    good = (tmp_path / "train.csv.gz").read_bytes()
    (tmp_path / "train.csv.gz").write_bytes(good[:12] + bytes(b ^ 0x55 for b in good[12:40]) + good[40:])
    with pytest.raises(ag_news.AgNewsDataError, match="corrupt gzip in AG News file .*train.csv.gz"):
        ag_news.load(tmp_path, expected_md5={})
    (tmp_path / "classes.txt").unlink()
    with pytest.raises(DataNotFoundError, match="missing AG News file .*classes.txt.*bench.data.fetch ag_news"):
        ag_news.load(tmp_path, expected_md5={})
    with pytest.raises(DataNotFoundError, match="AG News directory .*absent does not exist"):
        ag_news.load(tmp_path / "absent")


def test_shared_test_split_if_present():
    root = default_roots("ag_news")[1]
    if not (root / "test.csv.gz").is_file() or (root / "train.csv").exists():
        pytest.skip("the shared test-only AG News copy is not available")
    data = ag_news.load(root)  # test.csv's canonical md5 is checked
    assert data.split_of_test and (len(data.train), len(data.test)) == (6600, 1000)
    assert np.bincount(data.test.labels).tolist() == [250] * 4
