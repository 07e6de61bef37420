"""bench.roofline draws hand-given points (--point AI GFLOPS --label NAME) on the measured roofline."""
import json

import pytest

from bench import roofline


def test_hand_given_points_are_drawn(tmp_path):
    (tmp_path / "ceilings.json").write_text(json.dumps(
        {"device": "test GPU", "copy_gbps": 3000.0, "gemm_tflops": {"bfloat16": 800.0}}))
    png = tmp_path / "roof.png"
    assert roofline.main(["--plot", str(tmp_path), "--png", str(png), "--point", "12.5", "4000",
                          "--label", "conv", "--point", "0.5", "900", "--label", "bn"]) == 0
    assert png.stat().st_size > 0


def test_more_labels_than_points_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="more --label than --point"):
        roofline.main(["--point", "1", "1", "--label", "a", "--label", "b", "--out", str(tmp_path)])
