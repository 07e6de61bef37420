"""The shared harness: statistics, row schema, failure rows, correctness gate, CLI."""
import dataclasses
import json
import os
import threading

import pytest
import torch

from bench import cli, harness, results


def _case(fns, reference=lambda x: x.double() * 2, **kw):
    return harness.Case(suite="unit", name="double", params={"N": 8}, dtype=torch.float32,
                        inputs=lambda seed, dev: (torch.randn(8, device=dev),), fns=fns, reference=reference,
                        flops=8, bytes=64, **kw)


def test_quantiles_and_median():
    xs = [5, 1, 4, 2, 3]
    assert harness.median(xs) == 3 and harness.quantile(xs, 0.0) == 1 and harness.quantile(xs, 1.0) == 5
    assert harness.quantile([1, 2], 0.5) == 1.5
    with pytest.raises(ValueError):
        harness.quantile([], 0.5)


def test_bootstrap_ratio_ci_brackets_estimate():
    num, den = [2.0, 2.1, 1.9, 2.05, 1.95], [1.0, 1.02, 0.98, 1.01, 0.99]
    est, lo, hi = harness.bootstrap_ratio_ci(num, den)
    assert lo <= est <= hi and 1.8 < lo and hi < 2.2
    assert harness.bootstrap_ratio_ci([1.0] * 4, [1.0] * 4) == (1.0, 1.0, 1.0)


def test_round_plan_interleaves_fine_on_the_gpu():
    cfg = harness.RunConfig()
    # ~ROUND_CALLS calls a round for the backend with fewest calls, the others' calls spread over the same rounds
    rounds, reps = harness.round_plan({"eager": 530, "triton": 1000}, cfg, True, ["eager", "triton"])
    assert rounds == 132 and reps == {"eager": 4, "triton": 8}
    # slow cases keep at least 5 rounds; many calls at most MAX_ROUNDS
    assert harness.round_plan({"eager": 50}, cfg, True, ["eager"]) == (12, {"eager": 4})
    assert harness.round_plan({"eager": 5}, cfg, True, ["eager"]) == (5, {"eager": 1})
    assert harness.round_plan({"eager": 10**6}, cfg, True, ["eager"])[0] == harness.MAX_ROUNDS
    # given rounds (--repeat) or calls per round are kept; the CPU runs one round
    assert harness.round_plan({"eager": 1000}, harness.RunConfig(rounds=5), True, ["eager"]) == (5, {"eager": 200})
    assert harness.round_plan({}, harness.RunConfig(rep=3), True, ["eager"]) == (5, {"eager": 3})
    assert harness.round_plan({"eager": 2}, cfg, False, ["eager"]) == (1, {"eager": 2})
    assert harness.round_plan({"eager": 2}, harness.RunConfig(rep=1), False, ["eager"]) == (1, {"eager": 1})


def test_time_rounds_takes_turns_and_splits_rounds():
    order = []
    calls = {"eager": lambda: order.append("e"), "triton": lambda: order.append("t")}
    got = harness.time_rounds(calls, {"eager": 2, "triton": 1}, 3, torch.device("cpu"))
    assert order == ["e", "e", "t"] * 3
    assert [len(r) for r in got["eager"]] == [2, 2, 2] and [len(r) for r in got["triton"]] == [1, 1, 1]
    assert all(t >= 0 for rounds in got.values() for r in rounds for t in r)
    # a turn's lead calls run but are not kept
    order.clear()
    got = harness.time_rounds(calls, {"eager": 2, "triton": 1}, 2, torch.device("cpu"), lead=3)
    assert order == ["e"] * 5 + ["t"] * 4 + ["e"] * 5 + ["t"] * 4
    assert [len(r) for r in got["eager"]] == [2, 2] and [len(r) for r in got["triton"]] == [1, 1]


def test_rows_have_schema_and_provenance():
    rows = harness.run_case(_case({"eager": lambda x: x * 2, "triton": lambda x: x + x}),
                            harness.RunConfig(backends=["eager", "triton"]))
    assert rows and all(list(r) == results.COLUMNS for r in rows)
    metrics = {(r["backend"], r["metric"]) for r in rows}
    assert {("eager", "time_ms"), ("triton", "time_ms"), ("triton", "speedup_vs_eager"), ("eager", "gbps")} <= metrics
    r = next(r for r in rows if r["metric"] == "time_ms")
    assert r["status"] == "ok" and r["error_vs_fp64"] < 1e-6 and r["torch"] == torch.__version__
    assert json.loads(r["params"]) == {"N": 8}
    if not torch.cuda.is_available():
        assert r["note"].startswith(results.CPU_NOTE)


def test_rows_copied_from_a_gpu_keep_their_device_and_note(tmp_path):
    """Rows read back from a GPU run and merged by a CPU process are not marked as interpreter figures."""
    gpu = {"suite": "ops", "case": "gemm", "params": "{}", "dtype": "bfloat16", "backend": "triton",
           "metric": "tflops", "value": 700.0, "unit": "TFLOP/s", "note": None, "device": "NVIDIA H100 80GB HBM3",
           "sm_count": 132}
    csv = results.write_rows([gpu], tmp_path, "ops")
    (row,) = results._existing_rows(csv)
    assert row["device"] == "NVIDIA H100 80GB HBM3" and not str(row["note"] or "").startswith(results.CPU_NOTE)
    assert row["sm_count"] == 132
    here = results.make_row("ops", "gemm", {}, "bfloat16", "triton", "tflops", 1.0, "TFLOP/s")
    if not torch.cuda.is_available():
        assert here["note"].startswith(results.CPU_NOTE)


def test_wrong_result_is_not_timed():
    rows = harness.run_case(_case({"eager": lambda x: x * 2, "triton": lambda x: x * 3}),
                            harness.RunConfig(backends=["eager", "triton"]))
    bad = [r for r in rows if r["backend"] == "triton"]
    assert [r["status"] for r in bad if r["metric"] == "time_ms"] == ["wrong"]
    assert not any(r["metric"] == "tflops" for r in bad)


def test_failures_become_rows_and_run_goes_on():
    def boom(x):
        raise NotImplementedError("bf16 unsupported here")

    def oom(x):
        raise RuntimeError("CUDA out of memory. Tried to allocate")

    rows = harness.run_case(_case({"eager": lambda x: x * 2, "triton": boom}),
                            harness.RunConfig(backends=["eager", "triton", "compile-max-autotune"]))
    st = {r["backend"]: r["status"] for r in rows if r["metric"] == "time_ms"}
    assert st["eager"] == "ok" and st["triton"] == "unsupported"
    rows = harness.run_case(_case({"eager": lambda x: x * 2, "triton": oom}),
                            harness.RunConfig(backends=["eager", "triton"]))
    assert {r["status"] for r in rows if r["backend"] == "triton"} == {"oom"}
    if not torch.cuda.is_available():
        rows = harness.run_case(_case({"eager": lambda x: x * 2}), harness.RunConfig(backends=["eager+graph"]))
        assert rows[0]["status"] == "unsupported"
    many = harness.run_cases([_case({"eager": boom}), _case({"eager": lambda x: x * 2})],
                             harness.RunConfig(backends=["eager"]), progress=False)
    assert {r["status"] for r in many if r["metric"] == "time_ms"} == {"unsupported", "ok"}


def test_unknown_backend_and_register():
    with pytest.raises(ValueError, match="unknown backend"):
        harness.build_backend("nope", _case({"eager": lambda x: x}))
    harness.register_backend("negate-twice")(lambda case: (lambda x: -(-case.fns["eager"](x))))
    try:
        rows = harness.run_case(_case({"eager": lambda x: x * 2}), harness.RunConfig(backends=["negate-twice"]))
        assert rows[-1]["status"] == "ok"
    finally:
        harness.BACKENDS.pop("negate-twice")


def test_make_row_rejects_bad_status():
    with pytest.raises(ValueError, match="status"):
        results.make_row("s", "c", {}, "float32", "eager", "time_ms", 1.0, "ms", status="great")


def test_write_and_read_rows(tmp_path):
    rows = [results.make_row("unit", "c", {"N": 1}, torch.float32, "eager", "time_ms", 1.5, "ms")]
    path = results.write_rows(rows + [{"case": "hand", "metric": "x", "value": 2}], tmp_path, "unit")
    df = results.read_results(tmp_path)
    assert path.exists() and (tmp_path / "unit.json").exists() and len(df) == 2
    assert list(df.columns) == results.COLUMNS and df["suite"].eq("unit").all()


def test_cli_flags_and_table(tmp_path, capsys):
    assert cli.parse_shapes("8x16x32,4x4x4") == [(8, 16, 32), (4, 4, 4)]
    assert cli.parse_dtypes("bf16,float32") == [torch.bfloat16, torch.float32]
    with pytest.raises(SystemExit):
        cli.parse_backends("eager,warp-drive")
    assert cli.parse_backends("eager,triton+graph") == ["eager", "triton+graph"]

    def build(quick):
        return [_case({"eager": lambda x: x * 2, "triton": lambda x: x + x})]

    rows = cli.main("unit", build, "d", ["--backends", "eager,triton", "--repeat", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "== unit on" in out and "double" in out and (tmp_path / "unit.csv").exists()
    if not torch.cuda.is_available():
        assert results.CPU_NOTE in out
    with pytest.raises(SystemExit):
        cli.main("unit", build, "d", ["--op", "nothing-matches", "--out", str(tmp_path)])
    assert rows


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="sched_setaffinity is Linux's")
def test_host_cores_one_pins_every_thread_and_restores():
    """host_cores("one") pins the threads already running and those started inside the block to one core
    (the highest-numbered), and gives every thread its own set back afterwards; a core number pins to that
    core; "all" changes nothing; a bad setting or a core the process may not use is an error."""
    before = os.sched_getaffinity(0)
    started, release, tids = threading.Event(), threading.Event(), []

    def wait():
        tids.append(threading.get_native_id())
        started.set()
        release.wait()

    old = threading.Thread(target=wait)
    old.start()
    started.wait()
    try:
        with harness.host_cores("one") as core:
            assert core == max(before)
            assert os.sched_getaffinity(0) == {core} and os.sched_getaffinity(tids[0]) == {core}
            seen = []
            new = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
            new.start()
            new.join()
            assert seen == [{core}]
        assert os.sched_getaffinity(0) == before and os.sched_getaffinity(tids[0]) == before
    finally:
        release.set()
        old.join()
    with harness.host_cores("all") as core:
        assert core is None and os.sched_getaffinity(0) == before
    with harness.host_cores(str(min(before))) as core:
        assert core == min(before) and os.sched_getaffinity(0) == {core}
    assert os.sched_getaffinity(0) == before
    for bad in ("two", str(max(before) + 1)):
        with pytest.raises(ValueError, match="host_cores"):
            harness.pinned_core(bad)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="sched_setaffinity is Linux's")
def test_host_cores_rows_say_so(tmp_path):
    """--host-cores one|N: the rows carry the setting in their params (their own key); the default's do not."""
    def build(quick):
        return [_case({"eager": lambda x: x * 2, "triton": lambda x: x + x})]

    for mode in ("all", "one", str(min(os.sched_getaffinity(0)))):
        rows = cli.main("unit", build, "d", ["--backends", "eager,triton", "--repeat", "1", "--host-cores", mode,
                                             "--out", str(tmp_path / mode)])
        assert {json.loads(r["params"]).get("host_cores") for r in rows if r["case"] == "double"} == \
            {None if mode == "all" else mode}
    with pytest.raises(SystemExit):
        cli.main("unit", build, "d", ["--host-cores", "two", "--out", str(tmp_path)])


def test_cli_show_reads_committed(tmp_path, capsys):
    d = tmp_path / "NVIDIA_X"
    results.write_rows([results.make_row("unit", "c", {"N": 1}, "float32", "eager", "time_ms", 1.0, "ms")], d, "unit")
    assert cli.show("unit", str(tmp_path)) == 0
    assert "unit" in capsys.readouterr().out
    assert cli.show("absent", str(tmp_path)) == 1


def test_ops_quick_builds_every_family():
    from bench import ops

    names = {c.name for c in ops.build(quick=True)}
    assert {"gemm", "linear_relu"} <= names
    assert any(n.startswith("softmax") for n in names) and any(n.startswith("cross_entropy") for n in names)
    assert any(n.startswith("layernorm") for n in names)


def test_plot_writes_pngs(tmp_path):
    from bench import plot

    rows = []
    for n in (8, 16, 32):
        for b, t in (("eager", 2.0), ("triton", 1.0)):
            rows.append(results.make_row("unit", "c", {"N": n}, "float32", b, "time_ms", t * n, "ms"))
        rows.append(results.make_row("unit", "c", {"N": n}, "float32", "triton", "speedup_vs_eager", 2.0, "x"))
    results.write_rows(rows, tmp_path, "unit")
    out = tmp_path / "figures"
    assert plot.main([str(tmp_path), "--out", str(out)]) == 0
    assert (out / "speedup_vs_eager.png").exists() and (out / "latency_c_float32.png").exists()
    assert not list(tmp_path.glob("*.png"))  # --out is where they go, nowhere else


def test_roofline_floor_of_an_fp32_case_counts_the_fp64_units():
    """An fp32 case's FLOP ceiling is the faster of the fp32 and fp64 GEMM peaks (fp32 products are exact in fp64, and
    the GEMM's F64 tiles run there); tf32 and 16-bit cases keep their own; without an fp64 peak, fp32's alone."""
    case = harness.Case(suite="unit", name="g", params={"N": 1}, dtype=torch.float32, inputs=lambda seed, dev: (),
                        fns={}, reference=None, flops=1e12, bytes=1.0)
    ceilings = {"copy_gbps": 3000.0, "gemm_tflops": {"float32": 50.0, "fp32_on_fp64": 64.0, "tf32": 400.0}}
    assert harness.roofline_floor_ms(case, ceilings) == pytest.approx(1e3 / 64.0)
    assert harness.roofline_floor_ms(case, {**ceilings, "gemm_tflops": {"float32": 50.0}}) == pytest.approx(1e3 / 50.0)
    tf32 = dataclasses.replace(case, tf32=True)
    assert harness.roofline_floor_ms(tf32, ceilings) == pytest.approx(1e3 / 400.0)


def test_roofline_points_and_plot(tmp_path):
    from bench import roofline

    (tmp_path / "ceilings.json").write_text(json.dumps({"copy_gbps": 3000, "gemm_tflops": {"bfloat16": 800}}))
    rows = [results.make_row("unit", "g", {"N": 1}, "bfloat16", "triton", "tflops", 700, "TFLOP/s"),
            results.make_row("unit", "g", {"N": 1}, "bfloat16", "triton", "gbps", 300, "GB/s")]
    results.write_rows(rows, tmp_path, "unit")
    pts = roofline.points(results.read_results(tmp_path))
    assert len(pts) == 1 and abs(pts["intensity"].iloc[0] - 700e12 / 300e9) < 1e-6
    png = roofline.plot([str(tmp_path)], None, None)
    assert png.exists()


def test_roofline_plot_honours_out(tmp_path):
    """`bench.roofline --plot DIR --out X` writes X (a .png path, or a folder), never beside the ceilings."""
    from bench import roofline

    src = tmp_path / "results"
    src.mkdir()
    (src / "ceilings.json").write_text(json.dumps({"device": "GPU-X", "copy_gbps": 3000, "gemm_tflops": {"bf16": 800}}))
    results.write_rows([{**results.make_row("unit", "g", {"N": 1}, "bfloat16", "triton", m, v, u), "device": "GPU-X"}
                        for m, v, u in (("tflops", 700, "TFLOP/s"), ("gbps", 300, "GB/s"))], src, "unit")
    assert roofline.main(["--plot", str(src), "--out", str(tmp_path / "mine.png")]) == 0
    assert roofline.main(["--plot", str(src), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "mine.png").exists() and (tmp_path / "figs" / "roofline.png").exists()
    assert not (src / "roofline.png").exists()


def _row(case, value, params=None, device=None, metric="time_ms"):
    r = results.make_row("unit", case, params or {"N": 8}, "float32", "triton", metric, value, "ms")
    return {**r, "device": device} if device else r


def test_write_rows_merges_by_key(tmp_path):
    """A filtered run replaces exactly the rows it measured (same suite, case, params, dtype, backend,
    metric) and keeps every other row of the file."""
    results.write_rows([_row("a", 1.0), _row("b", 2.0), _row("b", 3.0, {"N": 16})], tmp_path, "unit")
    results.write_rows([_row("b", 20.0), _row("c", 4.0)], tmp_path, "unit")
    df = results.read_results(tmp_path / "unit.csv")
    got = {(r.case, r.params): r.value for r in df.itertuples()}
    assert got == {("a", '{"N": 8}'): 1.0, ("b", '{"N": 8}'): 20.0, ("b", '{"N": 16}'): 3.0, ("c", '{"N": 8}'): 4.0}
    twin = json.loads((tmp_path / "unit.json").read_text())
    assert {(r["case"], r["params"]): r["value"] for r in twin} == got  # the JSON twin says the same
    results.write_rows([_row("z", 9.0)], tmp_path, "unit", merge=False)  # replace on purpose
    assert list(results.read_results(tmp_path / "unit.csv")["case"]) == ["z"]


def test_write_rows_merges_from_the_csv_alone(tmp_path):
    results.write_rows([_row("a", 1.0), _row("b", 2.0)], tmp_path, "unit")
    (tmp_path / "unit.json").unlink()
    results.write_rows([_row("b", 5.0)], tmp_path, "unit")
    df = results.read_results(tmp_path / "unit.csv")
    assert dict(zip(df["case"], df["value"])) == {"a": 1.0, "b": 5.0}


def test_cpu_and_gpu_rows_never_share_a_file(tmp_path):
    results.write_rows([_row("a", 1.0, device="NVIDIA H100 80GB HBM3")], tmp_path, "unit")
    with pytest.raises(ValueError, match="never mixed"):
        results.write_rows([_row("a", 9.0, device=results.CPU_DEVICE)], tmp_path, "unit")
    assert results.read_results(tmp_path / "unit.csv")["value"].tolist() == [1.0]


def test_cpu_results_go_under_an_ignored_folder():
    from triton_kernels.runtime import INTERPRET

    d = results.results_dir()
    assert (d == results.LOCAL / "results" / "cpu-interpreter") if INTERPRET else (d.parent == results.RESULTS)
    assert ".local/" in (results.REPO / ".gitignore").read_text().split()


def test_interpreter_warnings_are_filtered_by_message_only():
    import tomllib
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli.quiet_interpreter_warnings()
        for message, module in (("invalid value encountered in divide", "triton.runtime.interpreter"),
                                ("overflow encountered in exp", "triton.runtime.interpreter"),
                                ("invalid value encountered in divide", "mine"),
                                ("something else", "triton.runtime.interpreter")):
            warnings.warn_explicit(message, RuntimeWarning, "f.py", 1, module=module)
    assert [(str(w.message)) for w in caught] == ["invalid value encountered in divide", "something else"]
    ini = tomllib.loads((results.REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert f"ignore:{cli.INTERPRETER_WARNINGS}:RuntimeWarning:{cli.INTERPRETER_MODULE}" in ini["filterwarnings"]


def test_same_backend_twice_is_its_own_row():
    rows = harness.run_case(_case({"eager": lambda x: x * 2, "triton": lambda x: x + x}),
                            harness.RunConfig(backends=["eager", "triton", "triton#2"]))
    t = {r["backend"]: r for r in rows if r["metric"] == "time_ms"}
    assert {"triton", "triton#2"} <= set(t) and t["triton#2"]["status"] == "ok"
    assert cli.parse_backends("triton#2,eager+graph#2") == ["triton#2", "eager+graph#2"]
    assert harness.base_backend("eager+graph#2") == "eager" and harness.is_graphed("eager+graph#2")


def test_every_tiny_op_suite_case_is_correct():
    """Every case of the op suite (its interpreter sizes) gives status ok for ours against float64: a
    case that feeds our launcher inputs in another convention (torch's saved LayerNorm mean, where ours
    saves the shifted one) is caught here, not on the GPU."""
    from bench import ops

    cfg = harness.RunConfig(backends=["eager", "triton"], rounds=1, rep=1)
    for case in ops.build(tiny=True):
        for row in harness.run_case(case, cfg):
            if row["metric"] == "time_ms" and row["backend"] == "triton":
                assert row["status"] == "ok", (case.name, case.params, row["error_vs_fp64"])
