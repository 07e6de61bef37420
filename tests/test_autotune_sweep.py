"""The GEMM sweep records one checked, timed row per config (CPU: interpreter, tiny shape)."""
import pandas as pd

from autotune import sweep


def test_sweep_records_every_trial(tmp_path):
    assert sweep.main(["--layouts", "nn,tt", "--act", "gelu", "--rep", "1", "--out", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "autotune-gemm.csv")
    t = df[df["metric"] == "time_ms"]
    assert len(t) >= 2 and (t["status"] == "ok").all() and (t["error_vs_fp64"] < 1e-5).all()
