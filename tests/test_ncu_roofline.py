"""bench.ncu_roofline on small hand-made ncu CSV exports (raw page with a units row, and the details
page), no GPU and no ncu: FLOP counting, unit scaling, per-kernel sums, calibration, plot and rows."""
import json

import pytest

from bench import ncu_roofline

META = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Device","CC"'
METRICS = ["gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
           "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
           "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
           "sm__inst_executed_pipe_tensor.sum"]
DEV = "NVIDIA H100 80GB HBM3"


def _raw_csv():
    """Three launches: bn kernel twice (2 us each), a GEMM once (10 us); bytes in Kbyte / Mbyte units."""
    head = META + "," + ",".join(f'"{m}"' for m in METRICS)
    units = '"","","","","","","","",""' + ',"usecond","Mbyte","Kbyte","inst","inst","inst","inst","inst"'
    def launch(i, name, t, rd, wr, fadd, fmul, ffma, hfma, tensor):
        return (f'"{i}","1","python","host","{name}","1","7","{DEV}","9.0",'
                f'"{t}","{rd}","{wr}","{fadd}","{fmul}","{ffma}","{hfma}","{tensor}"')
    return "\n".join(["==PROF== Connected to process 1", head, units,
                      launch(0, "_bn_apply_kernel", 2, 4, 4000, 1000, 0, "1,000", 0, 0),
                      launch(1, "sm90_xmma_gemm_bf16", 10, 1, 1000, 0, 0, 0, 0, 2000),
                      launch(2, "_bn_apply_kernel", 2, 4, 4000, 1000, 0, 1000, 500, 0)]) + "\n"


def test_raw_page(tmp_path):
    launches = ncu_roofline.parse(_raw_csv())
    assert len(launches) == 3 and launches[0]["gpu__time_duration.sum"] == pytest.approx(2e-6)
    assert launches[0]["dram__bytes_read.sum"] == pytest.approx(4e6) and launches[0]["dram__bytes_write.sum"] == 4e6
    points = {p["kernel"]: p for p in ncu_roofline.kernel_points(launches, ncu_roofline.factors(4096.0))}
    bn, gemm = points["_bn_apply_kernel"], points["sm90_xmma_gemm_bf16"]
    assert bn["launches"] == 2 and bn["flops"] == pytest.approx(2 * (1000 + 2 * 1000) + 2 * 500)
    assert bn["bytes"] == pytest.approx(16e6) and bn["time_s"] == pytest.approx(4e-6)
    assert bn["ai"] == pytest.approx(bn["flops"] / 16e6) and bn["gflops"] == pytest.approx(bn["flops"] / 4e-6 / 1e9)
    assert gemm["tensor_flops"] == pytest.approx(2000 * 4096) and gemm["share"] == pytest.approx(10 / 14)
    assert ncu_roofline.calibrate(launches, "xmma_gemm:4096000") == ("inst", pytest.approx(2048.0))
    launches.append(dict(launches[1], id="3"))  # a calibration GEMM as the last launch
    assert ncu_roofline.calibrate(launches, "@last:2048000") == ("inst", pytest.approx(1024.0))


def test_details_page_and_ops_counters():
    head = META + ',"Section Name","Metric Name","Metric Unit","Metric Value"'
    base = f'"0","1","python","host","conv_kernel","1","7","{DEV}","9.0","Command line profiler metrics"'
    text = "\n".join([head, base + ',"gpu__time_duration.sum","nsecond","5,000"',
                      base + ',"dram__bytes.sum","Gbyte","0.001"',
                      base + ',"sm__ops_path_tensor_src_bf16_dst_fp32.sum","","1000000"',
                      base + ',"sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum","","900000"',
                      base + ',"sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32_sparsity_off.sum","","900000"',
                      base + ',"sm__ops_path_tensor_op_hmma_src_bf16_dst_fp32.sum","","100000"',
                      base + ',"sm__inst_executed_pipe_tensor.sum","inst","10"'])
    launches = ncu_roofline.parse(text)
    assert len(launches) == 1 and launches[0]["gpu__time_duration.sum"] == pytest.approx(5e-6)
    (p,) = ncu_roofline.kernel_points(launches, ncu_roofline.factors(4096.0))
    # the per-source counter alone (the per-instruction and sparsity splits count the same ops again), one FLOP
    # per op, not inst x 4096
    assert p["tensor_flops"] == pytest.approx(1e6) and p["bytes"] == pytest.approx(1e6)
    per_op = {k: v for k, v in launches[0].items() if "_src_bf16_dst_fp32.sum" not in k or "_op_" in k}
    assert ncu_roofline.tensor_counts(per_op) == ("ops", pytest.approx(1e6))  # hgmma + hmma, no sparsity split
    assert ncu_roofline.calibrate(launches, "conv:3000000") == ("ops", pytest.approx(3.0))  # per op, from a known count


def test_main_plot_rows_and_errors(tmp_path, capsys):
    csv = tmp_path / "step.csv"
    csv.write_text(_raw_csv())
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps({"device": DEV, "copy_gbps": 3000.0, "gemm_tflops": {"bfloat16": 800.0}}))
    assert ncu_roofline.main([str(csv), "--ceilings", str(ceilings), "--png", str(tmp_path / "r.png"), "--out",
                              str(tmp_path / "rows"), "--json", str(tmp_path / "p.json")]) == 0
    assert (tmp_path / "r.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "whole step" in out and "_bn_apply_kernel" in out
    rows = json.loads((tmp_path / "rows" / "ncu_roofline-step.json").read_text())
    assert {r["metric"] for r in rows} == {"arithmetic_intensity", "gflops", "duration_us", "dram_mb"}
    assert json.loads((tmp_path / "p.json").read_text())[-1]["kernel"] == "whole step"
    bad = tmp_path / "bad.csv"
    bad.write_text("not a report\n")
    with pytest.raises(ValueError, match="Kernel Name"):
        ncu_roofline.main([str(bad)])
    gemm_last = tmp_path / "gemm_last.csv"
    lines = _raw_csv().splitlines()
    gemm_last.write_text("\n".join(lines[:3] + [lines[3], lines[5], lines[4]]) + "\n")
    assert ncu_roofline.main([str(gemm_last), "--calibrate", "@last:4096000", "--json", str(tmp_path / "q.json")]) == 0
    q = json.loads((tmp_path / "q.json").read_text())
    assert [p["kernel"] for p in q] == ["_bn_apply_kernel", "whole step"]  # the GEMM was the calibration
    with pytest.raises(ValueError, match="no kernel name contains"):
        ncu_roofline.main([str(csv), "--calibrate", "absent:100"])
    with pytest.raises(SystemExit):
        ncu_roofline.main([str(tmp_path / "missing.csv")])


def test_raw_page_device_name_and_label_file_name(tmp_path):
    """ncu's raw page writes the device index under "Device"; the name comes from the
    device__attribute_display_name column when the export has it, and a label with spaces and commas
    still gives a plain file name for the rows."""
    text = _raw_csv().replace('"CC",', '"CC","device__attribute_display_name",', 1)
    lines = text.splitlines()
    lines[2] = lines[2].replace('"","","","","","","","",""', '"","","","","","","","","",""', 1)  # units row
    lines[3:] = [ln.replace(f'"{DEV}","9.0",', f'"0","9.0","{DEV}",', 1) for ln in lines[3:]]
    launches = ncu_roofline.parse("\n".join(lines) + "\n")
    assert {x["device"] for x in launches} == {DEV}
    csv = tmp_path / "step.csv"
    csv.write_text("\n".join(lines) + "\n")
    assert ncu_roofline.main([str(csv), "--out", str(tmp_path), "--label", "resnet18 step, eager",
                              "--tensor-flops-per-inst", "4096"]) == 0
    assert (tmp_path / "ncu_roofline-resnet18-step--eager.csv").exists()


def test_list_metrics_names_every_counter_the_parser_reads(capsys):
    assert ncu_roofline.main(["--list-metrics"]) == 0
    listed = capsys.readouterr().out.strip().split(",")
    assert "gpu__time_duration.sum" in listed and "dram__bytes_read.sum" in listed
    assert all(f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" in listed for op in ncu_roofline.SCALAR_FLOPS)
    with pytest.raises(SystemExit):
        ncu_roofline.main([])
