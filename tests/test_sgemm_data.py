"""SGEMM loader on tiny generated CSVs: target choice, train-statistics standardisation, seeded split,
clear errors for malformed files."""
import gzip
import math
import zlib

import numpy as np
import pytest
import torch

from bench.data import sgemm
from bench.data.common import DataNotFoundError


@pytest.fixture
def csv(tmp_path):
    return sgemm.write_synthetic(tmp_path / "sgemm_product.csv.gz", rows=200, seed=1)


def test_load_split_and_standardise(csv):
    d = sgemm.load(csv, seed=3)
    assert (len(d.train), len(d.val), len(d.test)) == (160, 20, 20)
    assert d.train.x.shape == (160, 14) and d.train.x.dtype == torch.float32
    # standardised with TRAIN statistics: train columns have mean 0 / std 1, the others only roughly
    assert d.train.x.double().mean(0).abs().max() < 1e-5
    assert (d.train.x.double().std(0, unbiased=False) - 1).abs().max() < 1e-4
    assert abs(d.train.y.double().mean().item()) < 1e-5
    # the target is ln(mean of the 4 runs), recoverable from the stored statistics
    feats, runs = sgemm.read_csv(csv)
    perm = np.random.default_rng(3).permutation(200)
    te = perm[180:]
    expect = np.log(runs[te].mean(1))
    assert np.allclose(d.unstandardize(d.test.y).double().numpy(), expect, rtol=1e-5)
    assert d.info["target"] == "log" and d.info["n_train"] == 160


def test_split_is_seeded_and_disjoint(csv):
    a, b, c = sgemm.load(csv, seed=0), sgemm.load(csv, seed=0), sgemm.load(csv, seed=1)
    assert torch.equal(a.test.y, b.test.y)
    assert not torch.equal(a.test.y, c.test.y)
    rows = lambda d: {tuple(r) for r in d.unstandardize(torch.cat([d.train.y, d.val.y, d.test.y]))[:, None].tolist()}
    assert len(rows(a)) == 200


def test_mean_target_plain_csv_and_directory(tmp_path):
    sgemm.write_synthetic(tmp_path / "sgemm_product.csv", rows=50, gz=False)
    d = sgemm.load(tmp_path, target="mean", standardize_target=False, fractions=(0.6, 0.2, 0.2))
    _, runs = sgemm.read_csv(tmp_path)
    assert d.info["y_mean"] == 0.0 and d.train.y.min() > 10  # raw milliseconds
    assert math.isclose(float(torch.cat([d.train.y, d.val.y, d.test.y]).double().sum()), runs.mean(1).sum(), rel_tol=1e-5)


def test_max_rows_subset(csv):
    d = sgemm.load(csv, max_rows=30)
    assert len(d.train) + len(d.val) + len(d.test) == 30


def _write(tmp_path, text, gz=True):
    p = tmp_path / ("x.csv.gz" if gz else "x.csv")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return p


HEADER = ",".join(sgemm.FEATURES + sgemm.RUNS)
ROW = ",".join(["16"] * 14 + ["20.5", "21", "19.9", "20.1"])


@pytest.mark.parametrize("text,match", [
    ("", "empty file"),
    ("a,b,c\n1,2,3\n", "header does not match"),
    (HEADER + "\n", "no data rows"),
    (HEADER + "\n" + ROW + "\n" + ROW[:-5] + "\n", "line 3 has 17 fields"),
    (HEADER + "\n" + ROW.replace("20.5", "abc") + "\n", "non-numeric"),
    (HEADER + "\n" + ROW.replace("20.5", "-1") + "\n", "run time must be > 0"),
    (HEADER + "\n" + ROW.replace("20.5", "nan") + "\n", "non-finite"),
])
def test_malformed_files(tmp_path, text, match):
    with pytest.raises(sgemm.SgemmDataError, match=match):
        sgemm.read_csv(_write(tmp_path, text))


def test_bad_arguments(tmp_path, csv):
    with pytest.raises(sgemm.SgemmDataError, match="not found"):
        sgemm.load(tmp_path / "nope.csv")
    with pytest.raises(sgemm.SgemmDataError, match="no sgemm_product"):
        sgemm.load(tmp_path / "empty_dir" if (tmp_path / "empty_dir").mkdir() is None else None)
    with pytest.raises(ValueError, match="target must be"):
        sgemm.load(csv, target="median")
    with pytest.raises(ValueError, match="fractions"):
        sgemm.load(csv, fractions=(0.5, 0.1, 0.1))
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b garbage")
    with pytest.raises(sgemm.SgemmDataError, match="corrupt gzip"):
        sgemm.read_csv(tmp_path / "bad.gz")


def test_real_data_if_present():
    try:
        path = sgemm.resolve()
    except sgemm.SgemmDataError:
        pytest.skip("real SGEMM data not available")
    feats, runs = sgemm.read_csv(path)
    assert feats.shape == (sgemm.EXPECTED_ROWS, 14) and runs.shape == (sgemm.EXPECTED_ROWS, 4)
    assert 13.0 < runs.min() and runs.max() < 3400.0


def test_corrupt_not_truncated_gzip_names_the_file(tmp_path, csv):
    """Damaged deflate data (the length is right): zlib.error inside gzip, reported as a data error."""
    good = csv.read_bytes()
    bad = tmp_path / "bad_sgemm.csv.gz"
    bad.write_bytes(good[:20] + bytes(b ^ 0xFF for b in good[20:40]) + good[40:])
    with pytest.raises(zlib.error):
        gzip.decompress(bad.read_bytes())
    with pytest.raises(sgemm.SgemmDataError, match=f"{bad}: corrupt gzip file"):
        sgemm.read_csv(bad)


def test_not_found_says_how_to_fetch(tmp_path):
    with pytest.raises(DataNotFoundError, match="SGEMM data not found at .*nope.csv .*python -m bench.data.fetch sgemm"):
        sgemm.load(tmp_path / "nope.csv")
    with pytest.raises(DataNotFoundError, match="no sgemm_product.csv.gz or sgemm_product.csv in directory .*fetch sgemm"):
        sgemm.read_csv(tmp_path)
