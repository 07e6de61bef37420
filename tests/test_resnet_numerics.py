"""bench.resnet_numerics on the CPU (interpreter, tiny shapes): the loss trajectories, including the
row-permutation baseline, run for both families and report what the study's notes quote."""
import pytest
import torch

from bench import cli
from bench import resnet_numerics
from bench.data import sgemm as sgemm_data


@pytest.fixture
def data(tmp_path, device):
    return sgemm_data.load(sgemm_data.write_synthetic(tmp_path / "sgemm_product.csv.gz", rows=120, seed=2),
                           device=device)


@pytest.mark.parametrize("name", ["ResNetMLP4", "GloNet4"])
def test_trajectories_report_permutation_baseline(data, name, device):
    rows = resnet_numerics.trajectories(name, data, 3, device, B=32)
    assert [r["step"] for r in rows] == [1, 3]
    keys = {"eager32_vs_fp64", "fused_vs_fp64", "fused_vs_eager32", "eager32_vs_eager32_permuted",
            "fused_vs_fused_permuted", "loss_fp64"}
    for r in rows:
        assert keys <= set(r)
        assert all(r[k] >= 0 for k in keys)
    # step 1 starts from the same weights: every fp32 variant is within rounding of float64
    assert max(rows[0][k] for k in keys - {"loss_fp64"}) < 1e-5


def test_trajectories_without_permutation(data, device):
    rows = resnet_numerics.trajectories("ResNetMLP4", data, 1, device, B=16, permuted=False)
    assert "eager32_vs_eager32_permuted" not in rows[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message of a machine without a GPU")
def test_command_says_it_needs_a_gpu(capsys):
    assert cli.run(resnet_numerics.main, []) == 1
    out, err = capsys.readouterr()
    assert not out and err.count("\n") == 1 and "bench.resnet_numerics needs a CUDA GPU" in err
