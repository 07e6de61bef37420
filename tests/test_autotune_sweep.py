"""Sweeps record every trial, checked against float64, one line each; a killed sweep resumes with nothing
lost or repeated; configs compile in a process pool; several worker processes share the trials; the best
configs land in the runtime's cache (CPU: interpreter, tiny shapes; GPU: compiles, timings, cache hits)."""
import json
import os

import pandas as pd
import pytest
import torch

from autotune import landscape, spaces, store, sweep
from bench import cli
from bench.results import CPU_NOTE
from triton_kernels.runtime import ALL_TUNERS, CACHE_ENV, TUNE_ENV, Autotuner, Config, read_json

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU interpreter's defaults and messages")
TINY = ["--shapes", "40x24x33,24x40x16", "--dtype", "float32", "--rep", "1", "--no-progress"]


def _runs(out):
    return [json.loads(x) for x in (out / "sweeps" / "gemm-runs.jsonl").read_text().splitlines()]


def test_sweep_records_every_trial_and_writes_the_cache(tmp_path, monkeypatch):
    """Two compile processes; every planned trial one ok row, checked against float64; the best config
    per tuning key in the runtime's cache file, in its format."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    argv = TINY[:1] + ["40x24x33"] + TINY[2:] + ["--space", "full", "--sample", "3", "--workers", "2",
                                                  "--out", str(tmp_path)]
    assert sweep.main(argv) == 0
    df = store.read_trials(tmp_path / "sweeps" / "gemm.csv")
    tuner = spaces.candidates("gemm", M=40, N=24, K=33, dtype="float32")
    assert len(df) == df["trial_id"].nunique() >= len(tuner) + 1
    assert (df["status"] == "ok").all() and (df["error_vs_fp64"] < 1e-5).all() and df["note"].str.startswith(CPU_NOTE).all()
    assert sorted(df.loc[df["tuner_rank"] >= 0, "tuner_rank"]) == list(range(len(tuner)))
    end = _runs(tmp_path)[-1]
    assert end["event"] == "end" and end["new_trials"] == len(df) and end["duplicates"] == 0
    assert end["compile_processes"] >= 1 and end["cache_keys"] == 1  # the pool ran the (empty) compile jobs
    key = df["tune_key"].iloc[0]
    assert json.loads(key)["dtype"] == "float32"  # a readable object of the key's fields
    entry = read_json(ALL_TUNERS["gemm"].cache_path())[key]
    best = df.loc[df["ms"].idxmin(), "config"]
    assert Config.from_json(entry["best"]) == Config.from_json(json.loads(best)) and len(entry["trials"]) == len(df)
    rows = pd.read_csv(tmp_path / "autotune_sweep.csv")
    assert set(rows["metric"]) == {"wall_s", "compile_cpu_s"} and (rows["backend"] == "parallel-2").all()


def test_killed_sweep_resumes_with_nothing_lost_or_repeated(tmp_path):
    """Killed after 3 trials, with a fourth line half written: the rerun drops the half line, runs exactly
    the trials not recorded (the 3 recorded rows untouched), and a third run has nothing left to do."""
    argv = ["--shapes", "24x40x16"] + TINY[2:] + ["--space", "tuner", "--serial", "--no-cache", "--out", str(tmp_path)]

    def kill_after_three(trial, row):
        if sum(1 for _ in open(tmp_path / "sweeps" / "gemm.csv")) == 1 + 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.main(argv, on_trial=kill_after_three)
    path = tmp_path / "sweeps" / "gemm.csv"
    before = store.read_trials(path)
    with open(path, "a") as f:
        f.write(before.iloc[0]["trial_id"][:8] + "0123456789abcdef,gemm,40x2")  # a kill mid-write
    assert len(before) == 3
    assert cli.run(sweep.main, argv) == 0
    after = store.read_trials(path)
    planned = _runs(tmp_path)[-2]["planned"]
    assert len(after) == after["trial_id"].nunique() == planned > 3
    pd.testing.assert_frame_equal(after.iloc[:3], before)  # recorded trials kept as they were
    start = _runs(tmp_path)[-2]
    assert start["recorded_before"] == 3 and start["pending"] == planned - 3 and start["dropped_bytes"] > 0
    assert cli.run(sweep.main, argv) == 0
    assert _runs(tmp_path)[-1]["new_trials"] == 0 and len(store.read_trials(path)) == planned
    lines = landscape.run_lines(landscape.runs(tmp_path / "sweeps" / "gemm-runs.jsonl"))
    assert "killed" in lines[0] and f"+{planned - 3} trials -> {planned}" in lines[1] and "+0" in lines[2]


def test_two_workers_split_the_trials(tmp_path):
    """--gpus 2: two worker processes (here both in the interpreter) share the trials, appending to one
    file under its lock; nothing is lost or repeated."""
    argv = TINY + ["--space", "full", "--sample", "2", "--no-tuner-configs", "--gpus", "2", "--workers", "2",
                   "--no-cache", "--out", str(tmp_path)]
    assert sweep.main(argv) == 0
    df = store.read_trials(tmp_path / "sweeps" / "gemm.csv")
    assert len(df) == df["trial_id"].nunique() == _runs(tmp_path)[0]["planned"] >= 3
    assert set(df["worker"].astype(str)) == {"0", "1"} and (df["status"] == "ok").all()
    assert _runs(tmp_path)[-1]["gpu_workers"] == 2


def test_a_separate_trial_table_keeps_its_own_run_log(tmp_path):
    """--trials PATH (a wall-time comparison's table): trials and run log there, the wall-time rows in --out,
    the landscape's table untouched."""
    table = tmp_path / "compile" / "serial.csv"
    argv = ["--shapes", "40x24x33"] + TINY[2:] + ["--space", "full", "--sample", "2", "--no-tuner-configs", "--serial",
                                                  "--no-cache", "--out", str(tmp_path), "--trials", str(table)]
    assert sweep.main(argv) == 0
    assert len(store.read_trials(table)) >= 1 and not (tmp_path / "sweeps").exists()
    log = [json.loads(x) for x in (tmp_path / "compile" / "serial-runs.jsonl").read_text().splitlines()]
    assert [e["event"] for e in log] == ["start", "end"] and log[-1]["pool_restarts"] == 0
    assert set(pd.read_csv(tmp_path / "autotune_sweep.csv")["backend"]) == {"serial"}


def test_trial_store_keeps_complete_lines_only(tmp_path):
    s = store.TrialStore(tmp_path / "t.csv", ["trial_id", "status", "ms"])
    assert s.open() == 0
    s.append({"trial_id": "a", "status": "ok", "ms": 1.5})
    with open(s.path, "a") as f:
        f.write("b,o")
    assert list(s.recorded()) == ["a"] and s.open() == 3 and s.path.read_text().endswith("1.5\n")
    with pytest.raises(ValueError, match="other columns"):
        store.TrialStore(s.path, ["trial_id", "status"]).open()


@cpu_only
def test_cpu_default_says_so(tmp_path, capsys):
    assert cli.run(sweep.main, ["--rep", "1", "--no-progress", "--no-cache", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CPU interpreter, tiny configuration: gemm 40x24x33 float32" in out and CPU_NOTE in out


@cpu_only
def test_cpu_refuses_what_it_cannot_do_in_one_line(capsys):
    assert cli.run(sweep.main, ["--shapes", "4096x1024x8704", "--dtype", "float32"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pass --full" in err and "4096x1024x8704" in err
    assert cli.run(sweep.main, ["--dtype", "bfloat16"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no bfloat16 dot" in err
    assert cli.run(sweep.main, ["--shapes", "12x34"]) == 2
    assert "MxNxK" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------
# GPU
# ----------------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_configs_compile_in_the_pool_and_the_timing_process_only_loads(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    argv = ["--shapes", "1024x1024x1024", "--dtype", "bf16", "--space", "full", "--sample", "6", "--no-tuner-configs",
            "--workers", "4", "--fresh-triton-cache", "--no-progress", "--out", str(tmp_path)]
    assert sweep.main(argv) == 0
    df = store.read_trials(tmp_path / "sweeps" / "gemm.csv")
    ok = df[df["status"] == "ok"]
    assert len(ok) >= 6 and (ok["error_vs_fp64"] < 2e-2).all() and (ok["tflops"] > 1).all()
    # the timing process loads what the pool compiled: its load times add up to a fraction of the compile
    # times (per trial they need not be smaller: a 1 s compile's load once took 2.6 s under 16 test processes;
    # and one trial's compile can be a cache hit of a worker that built the same binary: 0.18 s once)
    assert ok["compile_s"].median() > 0.2 and ok["load_s"].sum() < ok["compile_s"].sum() / 4
    end = _runs(tmp_path)[-1]
    assert end["specs"] >= len(ok) and end["compile_processes"] >= 2


def tried_by_the_tuner(M, N, K, dtype_name, layout, precision, cache_dir):
    """In a fresh process: the configs the runtime tuner timed for one call, and spaces.candidates for
    the flags the sweep derives from the same operands."""
    os.environ[CACHE_ENV], os.environ[TUNE_ENV] = cache_dir, "1"
    from autotune import kernels
    from triton_kernels import gemm

    dtype = getattr(torch, dtype_name)
    a = torch.randn(K, M, device="cuda", dtype=dtype).t() if layout[0] == "t" else torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(N, K, device="cuda", dtype=dtype).t() if layout[1] == "t" else torch.randn(K, N, device="cuda", dtype=dtype)
    gemm.gemm_forward(a, b, precision=precision)
    tuner = ALL_TUNERS["gemm"]
    (trials,) = tuner.trials.values()
    flags = kernels.gemm_layout_flags(a, b, precision, kernels.tma_device(a.device))
    want = spaces.candidates("gemm", M=M, N=N, K=K, dtype=dtype, tma=flags["tma"], relayout=flags["relayout"],
                             nmajor=flags["nmajor"], nmajor_copy_a=flags["nmajor_copy_a"], activation="none",
                             f64=flags["f64"])
    return [t["config"] for t in trials], [c.to_json() for c in want]


@pytest.mark.gpu
@pytest.mark.parametrize("M,N,K,dtype,layout,precision", [(4096, 1024, 8704, "bfloat16", "nt", "ieee"),
                                                          (2048, 2048, 512, "float32", "nn", "tf32"),
                                                          (1024, 1024, 1024, "float32", "nn", "ieee"),
                                                          (96, 200, 40, "float16", "nn", "ieee")])
def test_gpu_tuner_space_is_what_the_tuner_tries(M, N, K, dtype, layout, precision, tmp_path):
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        tried, want = pool.submit(tried_by_the_tuner, M, N, K, dtype, layout, precision, str(tmp_path)).result()
    assert tried == want


def cache_hit_after_sweep(cache_dir):
    os.environ[CACHE_ENV], os.environ[TUNE_ENV] = cache_dir, "1"
    from triton_kernels import gemm

    a = torch.randn(768, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 640, device="cuda", dtype=torch.bfloat16)
    gemm.gemm_forward(a, b, torch.randn(640, device="cuda", dtype=torch.bfloat16))
    return [e[1] for e in ALL_TUNERS["gemm"].events]


@pytest.mark.gpu
def test_gpu_sweep_cache_is_what_the_runtime_reads(tmp_path):
    import concurrent.futures
    import multiprocessing

    argv = ["--shapes", "768x640x512", "--dtype", "bf16", "--no-progress", "--out", str(tmp_path)]
    os.environ[CACHE_ENV] = str(tmp_path / "cache")
    try:
        assert sweep.main(argv) == 0
    finally:
        del os.environ[CACHE_ENV]
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        events = pool.submit(cache_hit_after_sweep, str(tmp_path / "cache")).result()
    assert events == ["hit"]
