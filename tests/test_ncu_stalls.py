"""bench.ncu_stalls on a small hand-made export of ncu's source page (no GPU, no ncu)."""
import json

import pytest

from bench import ncu_stalls

HDR = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
       '"Instructions Executed","stall_long_sb","stall_short_sb","stall_long_sb (Not Issued)"')


def _csv():
    k1 = ['"Kernel Name","fwd",', HDR,
          '"0x10","LDG.E R1, desc[UR4][R2.64]","2","1","100","0","2","0"',
          '"0x20","SHF.R.S32.HI R5, RZ, 0x1f, R1","6","6","100","6","0","6"',
          '"0x30","@P0 FFMA R3, R4, R5, R3","2","1","400","0","2","0"']
    k2 = ['"Kernel Name","bwd",', HDR, '"0x10","FADD R1, R2, R3","1","1","10","0","1","0"']
    return "\n".join(k1 + k2) + "\n"


def test_parse_and_summarise(tmp_path, capsys):
    src = tmp_path / "source.csv"
    src.write_text(_csv())
    out = tmp_path / "s.json"
    assert ncu_stalls.main([str(src), "--top", "2", "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert set(s) == {"fwd", "bwd"}
    f = s["fwd"]
    assert f["samples"] == 10 and f["warp_instructions"] == 600
    assert f["reasons"]["long_sb"] == pytest.approx(0.6) and f["reasons"]["short_sb"] == pytest.approx(0.4)
    assert f["opcodes"]["FFMA"] == {"share": pytest.approx(0.2), "executed": 400}  # predicate skipped
    assert f["top"][0]["source"].startswith("SHF") and f["top"][0]["reason"] == "long_sb"
    assert "long_sb 60.0%" in capsys.readouterr().out


def test_bad_inputs(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("not a report\n")
    with pytest.raises(ValueError, match="no kernel found"):
        ncu_stalls.main([str(bad)])
    with pytest.raises(SystemExit):
        ncu_stalls.main([str(tmp_path / "missing.csv")])
