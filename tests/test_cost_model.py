"""The cost model: learners beat random sampling on a landscape with structure (held-out shapes), the
evaluation's statistics are exact, a saved model prunes the sweep and the tuner's list, and the command
writes the cost_model rows (CPU: ridge and eagerly trained GloNet / MLP; GPU: the fused training path)."""
import itertools
import math
import random

import numpy as np
import pandas as pd
import pytest
import torch

from autotune import cost_model, spaces, store, sweep

LANDSCAPE = cost_model.synthetic_landscape(n_shapes=10, n_configs=50, seed=1)


def _shares(cases) -> dict:
    s = {(r["backend"], r["learner"]): r["value"] for r in cost_model.summarize(cases) if r["metric"] == "share_within_5pct"}
    return {("model" if b == "model" else b) + (f":{lr}" if lr else ""): v for (b, lr), v in s.items()}


def test_ridge_beats_random_and_the_default_budget_on_held_out_shapes():
    cases, preds, curves = cost_model.evaluate(LANDSCAPE, "gemm", ["ridge"], budget=0.1, folds=5)
    shares = _shares(cases)
    assert shares["model:ridge"] >= 0.8 and shares["model:ridge"] > shares["random"] + 0.3
    model = cases[cases["backend"] == "model"]
    rand = cases[cases["backend"] == "random"]
    assert model["regret"].median() < rand["regret"].median()
    assert model["trials_to_5pct"].median() < rand["trials_to_5pct"].median()
    assert model["kendall_tau"].median() > 0.6
    assert set(cases["backend"]) == {"model", "random", "default"}
    assert (model["trials"] <= np.ceil(0.1 * model["configs"])).all()
    # every trial predicted once, by a model that never saw its shape
    assert len(preds) == len(LANDSCAPE) and preds["trial_id"].is_unique
    full = curves[(curves["budget"] == 1.0)]
    assert (full["within"] == 1.0).all()


def test_networks_train_eagerly_on_the_cpu_and_beat_random():
    cases, _, _ = cost_model.evaluate(LANDSCAPE, "gemm", ["glonet", "mlp"], budget=0.1, folds=2, steps=200, small=True)
    shares = _shares(cases)
    assert shares["model:glonet"] > shares["random"] and shares["model:mlp"] > shares["random"]


def test_statistics_are_exact():
    rng = random.Random(0)
    x = [rng.randint(0, 5) for _ in range(30)]
    y = [v + rng.randint(0, 3) for v in x]
    concordant = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in itertools.combinations(range(30), 2))
    n0 = 30 * 29 / 2
    tx = sum(1 for i, j in itertools.combinations(range(30), 2) if x[i] == x[j])
    ty = sum(1 for i, j in itertools.combinations(range(30), 2) if y[i] == y[j])
    assert cost_model.kendall_tau(x, y) == pytest.approx(concordant / math.sqrt((n0 - tx) * (n0 - ty)))
    assert cost_model.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    # P(k random picks of n include one of g good ones), against enumeration
    n, g, k = 9, 2, 3
    hits = sum(1 for s in itertools.combinations(range(n), k) if any(i < g for i in s))
    assert cost_model.random_share(n, g, k) == pytest.approx(hits / math.comb(n, k))
    ms = np.array([5.0, 1.0, 1.04, np.inf, 2.0])
    st = cost_model.pick_stats(ms, np.array([3, 4, 2, 1, 0]), 2)
    assert st == {"regret": 1.0, "within": 0.0, "trials_to_5pct": 3.0}
    assert cost_model.budget_of(95, 0.1) == 10 and cost_model.budget_of(5, 0.1) == 1 and cost_model.budget_of(5, 8) == 5


def test_a_saved_model_prunes_the_sweep_and_the_tuners_list(tmp_path, monkeypatch):
    X, names, y = cost_model._trial_frame(LANDSCAPE, "gemm")
    model = cost_model.fit("gemm", X, names, y, "ridge")
    path = model.save(tmp_path / "gemm.pt")
    loaded = cost_model.load(path)
    assert np.allclose(loaded.predict(X[:20]), model.predict(X[:20]))
    shape = dict(M=4096, N=1024, K=8704, dtype="bfloat16", tma=True, relayout=False)
    listed = spaces.candidates("gemm", **shape)
    assert cost_model.pruned_candidates("gemm", 4, **shape) == listed  # no model: the list as it is
    pruned = cost_model.pruned_candidates("gemm", 4, model=path, **shape)
    assert len(pruned) == 4 and set(pruned) <= set(listed)
    ranked = cost_model.pruned_candidates("gemm", None, model=loaded, space="full", **shape)
    pred = loaded.predict_rows([cost_model.features("gemm", {"M": 4096, "N": 1024, "K": 8704}, "bfloat16", {}, c)
                                for c in ranked])
    assert len(ranked) > 1000 and (np.diff(pred) >= 0).all()
    # the runtime tuner's entry: its list, or the model's top k of it when a model is named
    assert cost_model.runtime_candidates("gemm", **shape) == listed
    monkeypatch.setenv(cost_model.MODEL_ENV, str(path))
    monkeypatch.setenv(cost_model.TOP_K_ENV, "3")
    assert cost_model.runtime_candidates("gemm", **shape) == pruned[:3]
    from triton_kernels import gemm  # the GEMM tuner's own candidate function: what it times

    assert gemm._prune(4096, 1024, 8704, 2, True, False) == pruned[:3]
    monkeypatch.delenv(cost_model.MODEL_ENV)
    assert gemm._prune(4096, 1024, 8704, 2, True, False) == listed
    # --prune model in a sweep: only the top 2 configs per shape are measured
    argv = ["--shapes", "40x24x33", "--dtype", "float32", "--space", "full", "--sample", "8", "--prune", "model",
            "--model", str(path), "--top-k", "2", "--rep", "1", "--serial", "--no-cache", "--no-progress",
            "--out", str(tmp_path)]
    assert sweep.main(argv) == 0
    df = store.read_trials(tmp_path / "sweeps" / "gemm.csv")
    assert len(df) == 2 and df["space"].str.endswith("+model-top2").all() and (df["status"] == "ok").all()


def test_command_writes_the_cost_model_rows(tmp_path):
    assert cost_model.main(["--synthetic", "--learners", "ridge", "--folds", "3", "--out", str(tmp_path),
                            "--save-model", str(tmp_path / "m.pt")]) == 0
    rows = pd.read_csv(tmp_path / "cost_model-gemm-synthetic.csv")
    assert set(rows["suite"]) == {"cost_model"} and set(rows["backend"]) == {"model", "random", "default"}
    assert {"share_within_5pct", "regret", "trials_to_5pct"} <= set(rows["metric"])
    for name in ("cases", "predictions", "curves"):
        assert len(pd.read_csv(tmp_path / f"cost_model-gemm-synthetic-{name}.csv"))
    assert cost_model.load(tmp_path / "m.pt").learner == "ridge"


@pytest.mark.gpu
def test_gpu_glonet_trains_through_the_fused_path_and_beats_random():
    cases, _, _ = cost_model.evaluate(LANDSCAPE, "gemm", ["glonet"], budget=0.1, folds=3, steps=1500)
    shares = _shares(cases)
    assert shares["model:glonet"] > shares["random"] + 0.2
    model = cost_model.fit_net("glonet", np.random.randn(300, 27), np.random.randn(300), steps=10, device="cuda")
    assert model["name"] == cost_model.NETS["glonet"][0] and torch.cuda.is_available()
