"""Every bench module as a command on a CPU: tiny defaults that finish and say so, --full with an estimate
first, one-line errors (--debug for the traceback), GPU-only tools that say so, usage lines that name the
module, results written where CPU runs belong and merged, never overwritten."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from autotune import sweep
from bench import cli, gemm, mnist, mnist_step_variants, ncu_stalls, ops, plot, resnet_numerics
from bench import results
from bench import roofline, sgemm
from bench.data import mnist as mnist_data
from bench.data import sgemm as sgemm_data

GPU = torch.cuda.is_available()
REPO = Path(__file__).resolve().parents[1]
cpu_only = pytest.mark.skipif(GPU, reason="the CPU interpreter's defaults and messages")
NOTICE = "CPU interpreter, tiny configuration"

MODULES = {"bench.ops": ops.cli, "bench.gemm": gemm.cli, "bench.mnist": mnist.main, "bench.sgemm": sgemm.main,
           "bench.roofline": roofline.main, "bench.plot": plot.main,
           "bench.resnet_numerics": resnet_numerics.main, "bench.ncu_stalls": ncu_stalls.main,
           "bench.mnist_step_variants": mnist_step_variants.main, "autotune.sweep": sweep.main}


def command(main, argv, capsys):
    """Run ``main`` as its command does (cli.run): (exit status, stdout, stderr)."""
    rc = cli.run(main, [str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def mnist_dir(tmp_path):
    """A learnable MNIST-format data set (class c lights up row block c), so every rung agrees."""
    rng = np.random.default_rng(0)
    root = tmp_path / "mnist"
    root.mkdir()
    for split, n in (("train", 300), ("test", 120)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(labels):
            images[i, 2 * c:2 * c + 3, :] = 250
        stem_images, stem_labels = mnist_data.SPLITS[split]
        mnist_data.write_idx(root / f"{stem_images}.gz", images)
        mnist_data.write_idx(root / f"{stem_labels}.gz", labels)
    return root


@pytest.fixture
def sgemm_file(tmp_path):
    return sgemm_data.write_synthetic(tmp_path / "sgemm_product.csv.gz", rows=300, seed=3)


# --------------------------------------------------------------------------------------------------
# usage lines, GPU-only tools, one-line errors
# --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", sorted(MODULES))
def test_usage_names_the_module(module, capsys):
    rc, out, _ = command(MODULES[module], ["--help"], capsys)
    assert rc == 0 and out.startswith(f"usage: python -m {module}") and "--debug" in out


@cpu_only
@pytest.mark.parametrize("module,argv", [("bench.mnist_step_variants", []), ("bench.ncu_stalls", []),
                                         ("bench.roofline", ["--measure"])])
def test_gpu_only_tools_say_so_in_one_line(module, argv, capsys):
    rc, out, err = command(MODULES[module], argv, capsys)
    assert rc != 0 and "needs a CUDA GPU" in one_line(err) and not out


def test_usage_error_is_one_line(capsys):
    rc, _, err = command(sgemm.main, ["--models", "Transformer"], capsys)
    assert rc == 2 and one_line(err).startswith("python -m bench.sgemm: error: --models")
    rc, _, err = command(ops.cli, ["--backends", "eager,warp-drive"], capsys)
    assert rc == 1 and "unknown backend 'warp-drive'" in one_line(err)


def test_data_error_is_one_line_and_debug_shows_traceback(tmp_path, capsys):
    argv = ["--data", tmp_path / "absent.csv.gz", "--results-dir", tmp_path, "--no-write"]
    rc, _, err = command(sgemm.main, argv, capsys)
    assert rc == 2 and one_line(err).startswith("error: ") and "absent.csv.gz" in err
    with pytest.raises(ValueError, match="absent.csv.gz"):
        cli.run(sgemm.main, [str(a) for a in argv] + ["--debug"])


def test_command_line_error_is_one_line(tmp_path):
    """The same through `python -m` (the modules' __main__ goes through cli.run)."""
    p = subprocess.run([sys.executable, "-m", "bench.mnist", "--data", str(tmp_path / "nowhere")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "nowhere" in one_line(p.stderr)


# --------------------------------------------------------------------------------------------------
# tiny CPU defaults that finish and say so; --full with an estimate first
# --------------------------------------------------------------------------------------------------
@cpu_only
def test_cpu_defaults_go_under_local():
    assert results.results_dir() == results.LOCAL / "results" / "cpu-interpreter"
    assert Path(sgemm.parse_args(["--quick"]).results_dir) == results.LOCAL / "training_results"
    assert Path(sgemm.parse_args(["--model", "MLP10", "--results-dir", "elsewhere"]).results_dir) == Path("elsewhere")
    if (REPO / ".git").exists():
        paths = [".local/results/cpu-interpreter/ops.csv", ".local/training_results/GloNet4/session_1/metrics.json"]
        probe = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, capture_output=True, text=True)
        assert probe.stdout.split() == paths, ".local/ must be git-ignored"


@cpu_only
def test_ops_default_is_tiny_and_labelled(tmp_path, capsys):
    rc, out, _ = command(ops.cli, ["--out", tmp_path], capsys)
    assert rc == 0 and NOTICE in out and results.CPU_NOTE in out
    df = pd.read_csv(tmp_path / "ops.csv")
    assert set(df["device"]) == {"cpu-interpreter"} and df["case"].str.startswith("gemm").any()


@cpu_only
def test_gemm_default_is_tiny(tmp_path, capsys):
    rc, out, _ = command(gemm.cli, ["--out", tmp_path, "--backends", "triton"], capsys)
    assert rc == 0 and NOTICE in out and (tmp_path / "gemm.csv").exists()


def test_two_filtered_runs_keep_each_others_rows(tmp_path, capsys):
    """The README's reproduce list runs two filtered bench.ops in a row: the second keeps the first's rows."""
    for op in ("softmax_fwd", "layernorm_fwd"):
        assert command(ops.cli, ["--op", op, "--backends", "eager", "--out", tmp_path], capsys)[0] == 0
    df = pd.read_csv(tmp_path / "ops.csv")
    assert {"softmax_fwd", "layernorm_fwd"} <= set(df["case"])
    assert not df.duplicated(list(results.KEY)).any()


@cpu_only
def test_ops_no_match_lists_what_there_is(tmp_path, capsys):
    rc, _, err = command(ops.cli, ["--dtype", "bfloat16", "--out", tmp_path], capsys)
    line = one_line(err)
    assert rc == 1 and "no case matches --dtype bfloat16" in line
    assert "softmax_fwd" in line and "float32" in line and "33x100" in line and "bfloat16" in line
    rc, _, err = command(ops.cli, ["--op", "softmax", "--shapes", "2x3x4x5", "--out", tmp_path], capsys)
    assert rc == 1 and "no case matches --op softmax, --shapes 2x3x4x5" in one_line(err) and "gemm" in err


def test_ops_builds_the_shapes_and_dtypes_asked_for(tmp_path, capsys):
    cases = ops.build(shapes=[(8, 40), (16, 8, 24)], dtypes=[torch.float32])
    got = {(c.name, cli.shape_of(c)) for c in cases}
    assert ("softmax_fwd", (8, 40)) in got and ("cross_entropy_fwdbwd", (8, 40)) in got
    assert ("layernorm_fwd", (8, 40)) in got and ("gemm", (16, 8, 24)) in got
    assert {c.dtype for c in cases} == {torch.float32}
    rc, _, _ = command(ops.cli, ["--op", "softmax_fwd", "--shapes", "8x40", "--dtype", "float16", "--backends",
                                 "eager,triton", "--out", tmp_path], capsys)
    df = pd.read_csv(tmp_path / "ops.csv")
    assert rc == 0 and set(df["params"]) == {'{"M": 8, "N": 40}'} and set(df["dtype"]) == {"float16"}


@cpu_only
def test_large_shapes_need_full_and_full_prints_an_estimate(capsys):
    rc, _, err = command(ops.cli, ["--shapes", "4096x4096x4096"], capsys)
    assert rc == 1 and "pass --full" in one_line(err) and "CPU interpreter" in err
    cli.guard_cpu(7200.0, "a study", True, "bench.x")
    assert "estimated 2.0 h" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="pass --full"):
        cli.guard_cpu(7200.0, "a study", False, "bench.x")


@cpu_only
def test_mnist_default_is_tiny_and_labelled(mnist_dir, tmp_path, capsys):
    rc, out, _ = command(mnist.main, ["--data", mnist_dir, "--out", tmp_path], capsys)
    assert rc == 0 and NOTICE in out and results.CPU_NOTE in out
    df = pd.read_csv(tmp_path / "mnist.csv")
    assert set(df["device"]) == {"cpu-interpreter"} and (df.loc[df["metric"] == "epoch_ms", "status"] != "wrong").all()


@cpu_only
def test_mnist_full_prints_an_estimate_first(tmp_path, capsys):
    rc, out, err = command(mnist.main, ["--full", "--data", tmp_path / "nowhere"], capsys)
    assert "--full in the CPU interpreter" in out and "estimated" in out
    assert rc == 2 and "nowhere" in one_line(err)


def test_download_flag_fetches_into_dot_data(mnist_dir, tmp_path, capsys, monkeypatch):
    fetch = pytest.importorskip("bench.data.fetch")
    calls = []
    monkeypatch.setattr(fetch, "fetch", lambda name, root: calls.append((name, Path(root))) or mnist_dir)
    rc, _, _ = command(mnist.main, ["--download", "--variants", "eager-preloaded", "--epochs", "1", "--out", tmp_path],
                       capsys)
    assert rc == 0 and calls == [("mnist", REPO / ".data")]
    rc, _, err = command(mnist.main, ["--download", "--data", mnist_dir], capsys)
    assert rc == 2 and "--download" in one_line(err)
    assert sgemm.data_path(sgemm.parse_args(["--quick"])) is None  # without --download: the usual search


def test_sgemm_quick_alone_trains_the_smoke_model(sgemm_file, tmp_path, capsys):
    args = sgemm.parse_args(["--quick"])
    assert args.model == sgemm.SMOKE_MODEL and args.epochs == 1
    rc, out, _ = command(sgemm.main, ["--quick", "--data", sgemm_file, "--results-dir", tmp_path, "--no-progress"],
                         capsys)
    assert rc == 0 and (tmp_path / sgemm.SMOKE_MODEL / "session_1" / "metrics.json").exists()
    if not GPU:
        assert NOTICE in out
    with pytest.raises(SystemExit):  # a full-size training run still names its model
        sgemm.parse_args([] if GPU else ["--full"])


@cpu_only
def test_sgemm_full_prints_an_estimate_first(tmp_path, capsys):
    rc, out, err = command(sgemm.main, ["--suite", "depth", "--full", "--data", tmp_path / "none.csv"], capsys)
    assert "--full in the CPU interpreter" in out and "days" in out  # 21 models x 200 epochs
    assert rc == 2 and "none.csv" in one_line(err)


@cpu_only
@pytest.mark.slow
def test_sgemm_depth_default_is_tiny_and_labelled(sgemm_file, tmp_path, capsys):
    rc, out, _ = command(sgemm.main, ["--suite", "depth", "--data", sgemm_file, "--results-dir", tmp_path,
                                      "--out", tmp_path, "--no-progress"], capsys)
    assert rc == 0 and NOTICE in out
    md = (tmp_path / "depth_study_triton.md").read_text()
    assert md.startswith(f"**{results.CPU_NOTE}**")
    df = pd.read_csv(tmp_path / "sgemm-depth.csv")
    assert set(df["device"]) == {"cpu-interpreter"}
    assert df.loc[df["unit"] == "s", "note"].str.startswith(results.CPU_NOTE).all()


@cpu_only
@pytest.mark.slow
def test_sgemm_steptime_default_has_header_and_label(sgemm_file, tmp_path, capsys):
    rc, out, _ = command(sgemm.main, ["--suite", "steptime", "--data", sgemm_file, "--out", tmp_path], capsys)
    assert rc == 0 and NOTICE in out
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.split()[:6] == ["model", "depth", "backend", "metric", "value",
                                                                     "status"])
    assert results.CPU_NOTE in lines[i - 1] and "GloNet" in lines[i + 1]


def test_steptime_and_depth_report_label_by_where_sessions_trained():
    row = results.make_row("sgemm", "train_step", {"model": "GloNet", "depth": 2}, "float32", "eager",
                           "time_ms", 1.0, "ms")
    lines = sgemm.steptime_lines([row])
    assert lines[-2].split() == ["model", "depth", "backend", "metric", "value", "status"]
    assert (results.CPU_NOTE in lines[0]) == (not GPU)


@cpu_only
def test_roofline_default_draws_committed_results_elsewhere(tmp_path, capsys):
    tracked = REPO / "results" / "NVIDIA_H100_80GB_HBM3" / "roofline.png"
    before = tracked.read_bytes() if tracked.exists() else None
    rc, out, _ = command(roofline.main, ["--out", tmp_path], capsys)
    if not roofline.committed_gpu_dirs():
        pytest.skip("no committed GPU results")
    assert rc == 0 and "no GPU here" in out
    assert list(tmp_path.glob("*.png")) and (tracked.read_bytes() if tracked.exists() else None) == before


@cpu_only
@pytest.mark.slow
def test_plot_default_finishes(tmp_path, capsys):
    rc, out, _ = command(plot.main, ["--out", tmp_path], capsys)
    assert rc == 0 and "no GPU here" in out and list(tmp_path.rglob("*.png"))


def test_plot_says_when_nothing_can_be_drawn(tmp_path):
    """Rows no plot uses (bench.overhead's) end in a one-line message, not a silent run that writes nothing."""
    row = results.make_row("overhead", "softmax_128x10", {"mode": "inference"}, torch.float32, "torch", "call_us",
                           12.0, "us")
    results.write_rows([row], tmp_path / "rows", "overhead")
    with pytest.raises(SystemExit, match="nothing to draw .*suites: overhead"):
        plot.main([str(tmp_path / "rows"), "--out", str(tmp_path / "png")])
    assert not list((tmp_path / "png").rglob("*.png"))


def test_plot_output_folder_and_cpu_label(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    assert plot.default_out([str(tmp_path / "a")],
                            None) == (results.local_dir("plots", "a") if not GPU else tmp_path / "a")
    assert plot.default_out([str(tmp_path / "a")], str(tmp_path / "b")) == tmp_path / "b"
    fig, ax = plt.subplots()
    ax.set_title("softmax_fwd float32")
    plot._label_cpu(fig, ax, True)
    assert results.CPU_NOTE in ax.get_title() and any(results.CPU_NOTE in t.get_text() for t in fig.texts)
    plt.close(fig)


def test_gpu_run_script_parses_and_has_every_stage_it_lists():
    """bench/gpu_run.sh only runs on a GPU box: here, that bash parses it and that every stage its header
    lists has a branch (and every branch is listed)."""
    import re
    import shutil
    import subprocess

    script = Path(__file__).resolve().parents[1] / "bench" / "gpu_run.sh"
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    listed = set(re.findall(r"^#   ([a-z][a-z0-9-]*)\s", text, re.M)) - {"bash"}  # minus the usage line
    branches = set(re.findall(r"^    ([a-z][a-z0-9-]*)\)", text, re.M))
    assert listed and listed == branches, (listed ^ branches)
