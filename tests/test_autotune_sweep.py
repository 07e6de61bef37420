"""The GEMM sweep records one checked, timed row per config (CPU: interpreter, tiny shape)."""
import pandas as pd
import pytest
import torch

from autotune import sweep
from bench import cli
from bench.results import CPU_NOTE

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU interpreter's defaults and messages")


def test_sweep_records_every_trial(tmp_path):
    assert sweep.main(["--layouts", "nn,tt", "--act", "gelu", "--rep", "1", "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "autotune-gemm.csv")
    t = df[df["metric"] == "time_ms"]
    assert len(t) >= 2 and (t["status"] == "ok").all() and (t["error_vs_fp64"] < 1e-5).all()


@cpu_only
def test_cpu_default_says_so_and_honours_small_shapes(tmp_path, capsys):
    assert cli.run(sweep.main, ["--rep", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CPU interpreter, tiny configuration: 40x24x33 float32" in out and CPU_NOTE in out
    assert cli.run(sweep.main, ["--shapes", "8x16x24", "--dtype", "float16", "--layouts", "nt", "--rep", "1",
                                "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "autotune-gemm.csv")
    assert {"float16", "float32"} == set(df["dtype"])  # merged with the first run's rows
    assert df["params"].str.contains('"M": 8, "N": 16').any()


@cpu_only
def test_cpu_refuses_what_it_cannot_do_in_one_line(capsys):
    assert cli.run(sweep.main, ["--shapes", "4096x1024x8704"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --full" in err and "4096x1024x8704" in err
    assert cli.run(sweep.main, ["--dtype", "bfloat16"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no bfloat16 dot" in err
