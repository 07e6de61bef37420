"""A learned cost model for autotuning: predict a config's run time from shape and config features, and
measure only the configs it ranks first.

    python -m autotune.cost_model --kernel gemm [--trials results/<device>/sweeps/gemm.csv[.gz]] \\
        [--learners ridge,glonet,mlp] [--budget 0.1] [--folds 4] [--save-model PATH] [--out DIR]
    python -m autotune.cost_model --synthetic            # on a generated landscape (CPU demo)
    python -m autotune.cost_model --compare --model PATH --shapes random:3:99   # GPU: vs cuBLAS, max-autotune

Target: log run time (ms) of the configs that ran (failed configs are never the best and cost a trial
when a pruner picks them). Features (``features``): log sizes, log tiles, tiles per SM (waves) and the
last wave's occupancy, padding waste per dim, K steps, shared memory, accumulators per thread, the tile's
arithmetic intensity, TMA flags, operand layouts, warps and stages.

Learners: ``ridge`` (numpy: standardised features and their pairwise products, the penalty chosen by
generalised cross-validation) and the playground's own networks from the depth study, ``glonet`` and
``mlp`` (models/deep_mlp.py), trained on standardised features with Adam -- through the fused Triton
training path (FusedTrainer) on a GPU, eagerly on the CPU.

Evaluation (``evaluate``): K folds over shapes, so every shape is predicted by a model that never saw it.
Per held-out case (shape x dtype x variant) with n measured configs and a budget of k = ceil(budget x n)
trials: the model measures its k best-ranked configs; ``random`` draws k at random (the share within 5 % and
the trials to 5 % as exact expectations, the regret as the median over 200 draws);
``default`` measures the runtime tuner's fixed list (its own length). Metrics: share of cases whose pick
is within 5 % of the exhaustive best (share_within_5pct), regret (pick / best - 1, median over cases),
trials to land within 5 % of the best (median), Kendall tau between predicted and measured times per case.
Rows go to cost_model.csv (suite=cost_model, backend=model|random|default); the per-case table, the
per-trial predictions and the regret curves (share within 5 % vs budget) go beside it for the notebook.

The pruner: ``top_configs(model, kernel, shape, dtype, variant, ctx, configs, k)`` (the sweep's
``--prune model``), ``pruned_candidates(kernel, k, model=..., **shape)`` (the tuner's candidates or the full
space ranked by the model, cut to k) and ``runtime_candidates(kernel, **shape)`` for the runtime tuner:
its list, pruned when $TRITON_PLAYGROUND_COST_MODEL names a saved model.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

SMS_DEFAULT = 132  # H100 SXM; the trial table's sm_count column overrides it
LEARNERS = ("ridge", "glonet", "mlp")
WITHIN = 0.05


# ----------------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------------
def _log2(x: float) -> float:
    return math.log2(max(float(x), 1e-9))


def gemm_features(shape: dict, elem: int, variant: dict, kwargs: dict, warps: int, stages: int,
                  sms: int = SMS_DEFAULT) -> dict[str, float]:
    M, N, K = shape["M"], shape["N"], shape["K"]
    bm, bn, bk, group = kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["BLOCK_K"], kwargs.get("GROUP_M", 8)
    tma, relayout = int(kwargs.get("TMA", 0) or 0), int(kwargs.get("B_RELAYOUT", 0) or 0)
    split = int(kwargs.get("SPLIT_K", 1) or 1)  # split-K: programs per tile, each over a slice of K
    tiles_m, tiles_n, k_steps = math.ceil(M / bm), math.ceil(N / bn), math.ceil(K / bk)
    tiles = tiles_m * tiles_n * split
    waves = math.ceil(tiles / sms)
    layout = str(variant.get("layout", "nn"))
    return {
        "log_m": _log2(M), "log_n": _log2(N), "log_k": _log2(K), "log_flops": _log2(2.0 * M * N * K),
        "log_bytes": _log2((M * K + K * N + M * N) * elem), "elem": float(elem),
        "log_bm": _log2(bm), "log_bn": _log2(bn), "log_bk": _log2(bk), "log_group": _log2(group),
        "log_warps": _log2(warps), "stages": float(stages), "tma": float(tma), "relayout": float(relayout),
        "f64": float(kwargs.get("F64", 0) or 0),  # the fp64-accumulating kernel (fp32 "ieee" on Hopper)
        "a_t": float(layout[0] == "t"), "b_t": float(layout[1] == "t"),
        "log_tiles": _log2(tiles), "log_waves": _log2(tiles / sms), "last_wave": tiles / (waves * sms),
        "pad_m": _log2(tiles_m * bm / M), "pad_n": _log2(tiles_n * bn / N), "pad_k": _log2(k_steps * bk / K),
        "log_split_k": _log2(split), "log_k_steps": _log2(k_steps / split), "log_smem": _log2(stages * (bm * bk + bk * bn) * elem),
        "log_acc_per_thread": _log2(bm * bn / (32 * warps)), "log_tile_intensity": _log2(bm * bn / (bm + bn)),
        "log_tile_work": _log2(bm * bn * bk),
    }


def generic_features(shape: dict, elem: int, variant: dict, kwargs: dict, warps: int, stages: int,
                     sms: int = SMS_DEFAULT) -> dict[str, float]:
    out = {f"log_{k}": _log2(v) for k, v in shape.items()}
    out["log_size"] = _log2(math.prod(shape.values()))
    out["elem"] = float(elem)
    for k, v in kwargs.items():
        out[f"log_{k}" if v and v > 1 else k] = _log2(v) if v and v > 1 else float(v or 0)
    out.update({"log_warps": _log2(warps), "stages": float(stages)})
    for k, v in variant.items():
        if isinstance(v, bool) or isinstance(v, (int, float)):
            out[f"v_{k}"] = float(v)
    return out


def features(kernel: str, shape: dict, dtype: str, variant: dict, config: Any, sms: int = SMS_DEFAULT) -> dict:
    """The feature dict of one (shape, config); ``config`` a runtime Config or its JSON dict."""
    from .spaces import elem_bytes

    cj = config if isinstance(config, dict) else config.to_json()
    f = gemm_features if kernel in ("gemm", "conv1d") and "BLOCK_K" in cj["kwargs"] else generic_features
    if kernel == "conv1d":  # the implicit GEMM: M = B x L_out, N = C_out, K = k x C_in
        B, L, C, N, k = (shape[d] for d in ("B", "L", "C", "N", "k"))
        shape = {"M": B * (L - k + 1), "N": N, "K": k * C}
    return f(shape, elem_bytes(dtype), variant, cj["kwargs"], cj["num_warps"], cj["num_stages"], sms)


def _trial_frame(df, kernel: str):
    """(feature matrix, feature names, log ms (NaN where the config failed)) of a trial table."""
    from .kernels import adapter

    a = adapter(kernel)
    rows = []
    for r in df.itertuples(index=False):
        r = r._asdict()
        shape = {d: int(r[d]) for d in a.dims}
        variant = {k: r[k] for k in a.variant if k in r}
        sms = int(r["sm_count"]) if r.get("sm_count") and not _nan(r.get("sm_count")) and int(r["sm_count"]) > 0 \
            else SMS_DEFAULT
        rows.append(features(kernel, shape, str(r["dtype"]), variant, json.loads(r["config"]), sms))
    names = list(rows[0]) if rows else []
    X = np.array([[row.get(n, 0.0) for n in names] for row in rows], dtype=np.float64)
    ms = np.array([float(v) if str(s) == "ok" else np.nan for v, s in zip(df["ms"], df["status"])], dtype=np.float64)
    return X, names, np.log(ms)


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


# ----------------------------------------------------------------------------------------------------
# Learners
# ----------------------------------------------------------------------------------------------------
def _pairwise(Z: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(Z.shape[1])
    return np.concatenate([Z, Z[:, i] * Z[:, j]], axis=1)


def fit_ridge(Z: np.ndarray, y: np.ndarray, lams: Sequence[float] = tuple(10.0 ** np.arange(-3, 4))) -> dict:
    """Ridge on standardised features and their pairwise products; the penalty minimises the
    generalised cross-validation error (one SVD)."""
    P = _pairwise(Z)
    mu, sd = P.mean(0), P.std(0) + 1e-9
    P = (P - mu) / sd
    U, s, Vt = np.linalg.svd(P, full_matrices=False)
    uty = U.T @ y
    n = len(y)
    best = None
    for lam in lams:
        d = s / (s ** 2 + lam)
        w = Vt.T @ (d * uty)
        resid = y - P @ w
        dof = float(np.sum(s ** 2 / (s ** 2 + lam)))
        gcv = float(resid @ resid) / n / max(1e-12, (1 - dof / n)) ** 2
        if best is None or gcv < best[0]:
            best = (gcv, lam, w)
    return {"w": best[2], "p_mean": mu, "p_std": sd, "lam": best[1]}


def _predict_ridge(params: dict, Z: np.ndarray) -> np.ndarray:
    P = (_pairwise(Z) - params["p_mean"]) / params["p_std"]
    return P @ params["w"]


NETS = {"glonet": ("GloNet16", 64), "mlp": ("MLP4", 64)}
SMALL_NETS = {"glonet": ("GloNet4", 16), "mlp": ("MLP2", 16)}


def fit_net(kind: str, Z: np.ndarray, y: np.ndarray, *, steps: int = 3000, batch: int = 256, lr: float = 2e-3,
            seed: int = 0, small: bool = False, device: str | None = None) -> dict:
    """A GloNet or MLP of models/deep_mlp.py regressing y on Z: the fused Triton training path
    (FusedTrainer: forward, backward and Adam kernels) on a GPU, eager torch with torch.optim.Adam on the
    CPU; cosine-decayed learning rate."""
    import torch

    import triton_kernels  # noqa: F401  (the interpreter switch)
    from models.deep_mlp import FusedTrainer, build_model

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    name, width = (SMALL_NETS if small else NETS)[kind]
    fused = device != "cpu"
    model = build_model(name, width=width, in_features=Z.shape[1], backend="triton" if fused else "eager",
                        device=device, seed=seed)
    x_all = torch.tensor(Z, dtype=torch.float32, device=device)
    y_all = torch.tensor(y, dtype=torch.float32, device=device)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    batch = min(batch, len(y))
    if fused:
        trainer = FusedTrainer(model, lr=lr)
        opt = None
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    threads = torch.get_num_threads()
    if not fused:
        torch.set_num_threads(1)  # a network this small trains fastest on one thread (no sync per op)
    try:
        for step in range(steps):
            rate = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
            idx = torch.randint(0, len(y), (batch,), device=device, generator=g)
            xb, yb = x_all[idx].contiguous(), y_all[idx].contiguous()
            if fused:
                trainer.opt.lr = rate
                trainer.step(xb, yb)
            else:
                for group in opt.param_groups:
                    group["lr"] = rate
                loss = torch.nn.functional.mse_loss(model(xb), yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return {"name": name, "width": width, "in_features": Z.shape[1], "state": state}


def _predict_net(params: dict, Z: np.ndarray) -> np.ndarray:
    import torch

    from models.deep_mlp import build_model

    model = build_model(params["name"], width=params["width"], in_features=params["in_features"], backend="eager")
    model.load_state_dict(params["state"])
    model.eval()
    with torch.no_grad():
        return model(torch.tensor(Z, dtype=torch.float32)).double().numpy()


@dataclasses.dataclass
class CostModel:
    """A trained predictor of log run time (ms) for one kernel."""

    kernel: str
    learner: str
    feature_names: list[str]
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float
    y_std: float
    params: dict

    def _z(self, X: np.ndarray) -> np.ndarray:
        return (X - self.x_mean) / self.x_std

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predicted log ms for feature rows X (columns in ``feature_names`` order)."""
        Z = self._z(np.asarray(X, dtype=np.float64))
        out = _predict_ridge(self.params, Z) if self.learner == "ridge" else _predict_net(self.params, Z)
        return out * self.y_std + self.y_mean

    def predict_rows(self, rows: Sequence[dict]) -> np.ndarray:
        return self.predict(np.array([[r.get(n, 0.0) for n in self.feature_names] for r in rows], dtype=np.float64))

    def save(self, path: str | Path) -> Path:
        import torch

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        params = {k: (torch.from_numpy(v) if isinstance(v, np.ndarray) else v.item() if isinstance(v, np.generic) else v)
                  for k, v in self.params.items()}
        torch.save({"kernel": self.kernel, "learner": self.learner, "feature_names": self.feature_names,
                    "x_mean": torch.from_numpy(self.x_mean), "x_std": torch.from_numpy(self.x_std),
                    "y_mean": self.y_mean, "y_std": self.y_std, "params": params}, path)
        return path


def load(path: str | Path) -> CostModel:
    import torch

    d = torch.load(Path(path), map_location="cpu", weights_only=True)
    params = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in d["params"].items()}
    return CostModel(d["kernel"], d["learner"], list(d["feature_names"]), d["x_mean"].numpy(), d["x_std"].numpy(),
                     float(d["y_mean"]), float(d["y_std"]), params)


def fit(kernel: str, X: np.ndarray, names: list[str], y: np.ndarray, learner: str = "ridge", **kw) -> CostModel:
    """Fit a learner on feature rows X and log ms y (rows with NaN y -- failed configs -- are dropped)."""
    if learner not in LEARNERS:
        raise ValueError(f"learner must be one of {LEARNERS}, got {learner!r}")
    keep = np.isfinite(y)
    X, y = X[keep], y[keep]
    if len(y) < 2:
        raise ValueError("fewer than 2 configs ran: nothing to learn")
    x_mean, x_std = X.mean(0), X.std(0) + 1e-9
    y_mean, y_std = float(y.mean()), float(y.std() + 1e-9)
    Z, t = (X - x_mean) / x_std, (y - y_mean) / y_std
    params = fit_ridge(Z, t) if learner == "ridge" else fit_net(learner, Z, t, **kw)
    return CostModel(kernel, learner, list(names), x_mean, x_std, y_mean, y_std, params)


# ----------------------------------------------------------------------------------------------------
# The pruner
# ----------------------------------------------------------------------------------------------------
def budget_of(n: int, k: float) -> int:
    """Trials kept of n: k itself when k >= 1, else ceil(k x n); at least 1, at most n."""
    return max(1, min(n, int(k) if k >= 1 else math.ceil(k * n)))


def _fraction(n: int, share: float) -> int:
    return max(1, min(n, math.ceil(share * n)))


def top_configs(model: CostModel, kernel: str, shape: dict, dtype: str, variant: dict, ctx: dict,
                configs: Sequence, k: float | None) -> list:
    """``configs`` ranked by predicted run time, fastest first, cut to k (all when k is None)."""
    if not configs:
        return []
    if model.kernel != kernel:
        raise ValueError(f"the cost model is for {model.kernel}, not {kernel}")
    pred = model.predict_rows([features(kernel, shape, dtype, variant, c) for c in configs])
    order = np.argsort(pred, kind="stable")
    ranked = [configs[i] for i in order]
    return ranked if k is None else ranked[:budget_of(len(ranked), k)]


def pruned_candidates(kernel: str, k: float | None = 8, *, model: CostModel | str | Path | None = None,
                      space: str = "tuner", variant: dict | None = None, **shape: Any) -> list:
    """For the runtime tuner: its candidates (``space="tuner"``) or the valid full space for this shape,
    ranked by a cost model and cut to k (None: all, ranked); the candidates unchanged when no model is given.

        pruned_candidates("gemm", 6, model=path, M=M, N=N, K=K, dtype=a.dtype, tma=tma, relayout=relayout)
    """
    from . import spaces

    sp = spaces.space(kernel)
    configs = list(sp.tuner(sp.context(**shape))) if space == "tuner" else spaces.full(kernel, **shape)
    if model is None:
        return configs
    model = load(model) if isinstance(model, (str, Path)) else model
    ctx = spaces.context(kernel, **shape)
    dims = {d: shape[d] for d in ("M", "N", "K", "D", "V", "B", "L", "C", "k") if d in shape}
    dtype = str(shape.get("dtype", "float32")).replace("torch.", "")
    return top_configs(model, kernel, dims, dtype, variant or {}, ctx, configs, k)


MODEL_ENV = "TRITON_PLAYGROUND_COST_MODEL"  # a saved model: the runtime tuner times only its top-k candidates
TOP_K_ENV = "TRITON_PLAYGROUND_PRUNE_K"    # k (default 4; < 1: a fraction of the list)
_LOADED: dict[str, CostModel] = {}


def prune_listed(kernel: str, listed: Sequence, **shape: Any) -> list:
    """The runtime tuner's ``listed`` candidates ranked by the model $TRITON_PLAYGROUND_COST_MODEL names and
    cut to $TRITON_PLAYGROUND_PRUNE_K; ``listed`` unchanged when no model is named or it is another
    kernel's. ``spaces.candidates`` -- what the kernels' tuners call -- applies it."""
    import os

    from . import spaces

    path = os.environ.get(MODEL_ENV)
    if not path or not listed:
        return list(listed)
    model = _LOADED.get(path)
    if model is None:
        model = _LOADED[path] = load(path)
    if model.kernel != kernel:
        return list(listed)
    ctx = spaces.context(kernel, **shape)
    dims = {d: shape[d] for d in ("M", "N", "K", "D", "V", "B", "L", "C", "k") if d in shape}
    dtype = shape.get("dtype", "float32")
    if isinstance(dtype, int) and not isinstance(dtype, bool):  # the kernels pass the element size
        dtype = {2: "bfloat16", 4: "float32"}.get(dtype, "float32")
    dtype = str(dtype).replace("torch.", "")
    return top_configs(model, kernel, dims, dtype, {}, ctx, list(listed), float(os.environ.get(TOP_K_ENV, "4")))


def runtime_candidates(kernel: str, **shape: Any) -> list:
    """What the runtime tuner times for this shape: ``spaces.candidates`` -- its fixed list, best guess first,
    or, when $TRITON_PLAYGROUND_COST_MODEL names a saved model of this kernel, that list ranked by the model
    and cut to $TRITON_PLAYGROUND_PRUNE_K (the kernels' tuners call spaces.candidates, e.g. gemm's _prune)."""
    from . import spaces

    return spaces.candidates(kernel, **shape)


# ----------------------------------------------------------------------------------------------------
# Evaluation on held-out shapes
# ----------------------------------------------------------------------------------------------------
def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b (ties counted as in scipy); NaN for fewer than 2 points."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(x) < 2:
        return float("nan")
    i, j = np.triu_indices(len(x), 1)
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    n0 = len(i)
    den = math.sqrt(float(n0 - np.sum(dx == 0)) * float(n0 - np.sum(dy == 0)))
    return float(np.sum(dx * dy) / den) if den else float("nan")


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) if 0 <= k <= n else -math.inf


def random_share(n: int, good: int, k: int) -> float:
    """Probability that k configs drawn at random (without replacement) of n include one of ``good``."""
    if good <= 0:
        return 0.0
    if n - good < k:
        return 1.0
    return 1.0 - math.exp(_log_comb(n - good, k) - _log_comb(n, k))


def pick_stats(ms: np.ndarray, order: np.ndarray, k: int) -> dict:
    """Regret, within-5 % and trials-to-5 % of measuring ``order`` (indices into ms; inf = failed) up to k."""
    best = np.min(ms)
    chosen = ms[order[:k]]
    pick = float(np.min(chosen)) if len(chosen) else math.inf
    hits = np.nonzero(ms[order] <= (1 + WITHIN) * best)[0]
    return {"regret": pick / best - 1 if math.isfinite(pick) else math.inf, "within": float(pick <= (1 + WITHIN) * best),
            "trials_to_5pct": float(hits[0] + 1) if len(hits) else math.inf}


def case_columns(df, kernel: str) -> list[str]:
    from .kernels import adapter

    return ["shape", "dtype"] + [c for c in adapter(kernel).variant if c in df.columns]


def evaluate(df, kernel: str, learners: Sequence[str] = ("ridge",), budget: float = 0.1, folds: int = 4,
             seed: int = 0, curve_budgets: Sequence[float] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0),
             random_draws: int = 200, **fit_kw):
    """K-fold evaluation over shapes (see the module docstring). Returns (cases, predictions, curves):
    one row per (held-out case, backend[, learner]); one per (trial, learner) with the predicted and
    measured log ms; share within 5 % and median regret per budget."""
    import pandas as pd

    df = df.reset_index(drop=True)
    X, names, y = _trial_frame(df, kernel)
    ms = np.exp(y)
    ms[~np.isfinite(ms)] = np.inf
    keys = case_columns(df, kernel)
    case_id = df[keys].astype(str).agg("|".join, axis=1).to_numpy()
    shapes = sorted(df["shape"].astype(str).unique())
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(shapes))
    fold_of = {shapes[i]: f % max(1, min(folds, len(shapes))) for f, i in enumerate(perm)}
    fold = df["shape"].astype(str).map(fold_of).to_numpy()
    tuner_rank = pd.to_numeric(df["tuner_rank"], errors="coerce").fillna(-1).to_numpy()
    case_rows, pred_rows, curve_rows = [], [], []
    preds: dict[str, np.ndarray] = {lr: np.full(len(df), np.nan) for lr in learners}
    for f in sorted(set(fold)):
        train, test = fold != f, fold == f
        for lr in learners:
            if not np.isfinite(y[train]).sum() >= 2:
                continue
            model = fit(kernel, X[train], names, y[train], lr, **({} if lr == "ridge" else dict(fit_kw, seed=seed)))
            preds[lr][test] = model.predict(X[test])
    for cid in sorted(set(case_id)):
        idx = np.nonzero(case_id == cid)[0]
        m = ms[idx]
        if not np.isfinite(m).any():
            continue
        n, best = len(idx), float(np.min(m))
        k = budget_of(n, budget)
        good = int(np.sum(m <= (1 + WITHIN) * best))
        info = {"case": cid, "shape": df["shape"].iloc[idx[0]], "fold": int(fold[idx[0]]), "configs": n, "budget": k,
                "best_ms": best}
        for lr in learners:
            p = preds[lr][idx]
            if np.isnan(p).any():
                continue
            order = np.argsort(p, kind="stable")
            st = pick_stats(m, order, k)
            ok = np.isfinite(m)
            case_rows.append({**info, "backend": "model", "learner": lr, **st, "trials": k,
                              "kendall_tau": kendall_tau(p[ok], np.log(m[ok]))})
            for j in range(n):
                pred_rows.append({"trial_id": df["trial_id"].iloc[idx[j]], "case": cid, "learner": lr,
                                  "fold": int(fold[idx[j]]), "predicted_log_ms": float(p[j]),
                                  "measured_log_ms": float(np.log(m[j])) if np.isfinite(m[j]) else np.nan})
            for b in curve_budgets:
                kb = _fraction(n, b)
                curve_rows.append({"case": cid, "backend": "model", "learner": lr, "budget": b, "trials": kb,
                                   **pick_stats(m, order, kb)})
        draws = [rng.permutation(n) for _ in range(random_draws)]
        reg = [pick_stats(m, d, k)["regret"] for d in draws]
        case_rows.append({**info, "backend": "random", "learner": "", "within": random_share(n, good, k),
                          "regret": float(np.median(reg)), "trials": k,
                          "trials_to_5pct": (n + 1) / (good + 1), "kendall_tau": np.nan})
        for b in curve_budgets:
            kb = _fraction(n, b)
            curve_rows.append({"case": cid, "backend": "random", "learner": "", "budget": b, "trials": kb,
                               "within": random_share(n, good, kb),
                               "regret": float(np.median([pick_stats(m, d, kb)["regret"] for d in draws[:50]])),
                               "trials_to_5pct": (n + 1) / (good + 1)})
        listed = idx[tuner_rank[idx] >= 0]
        if len(listed):
            order_default = np.array([int(np.nonzero(idx == i)[0][0]) for i in listed[np.argsort(tuner_rank[listed])]])
            st = pick_stats(m, order_default, len(order_default))
            case_rows.append({**info, "backend": "default", "learner": "", **st, "trials": len(order_default),
                              "kendall_tau": np.nan})
    return pd.DataFrame(case_rows), pd.DataFrame(pred_rows), pd.DataFrame(curve_rows)


def summarize(cases) -> list[dict]:
    """(backend, learner, metric, value) per backend: share within 5 %, median regret, median trials to
    5 %, median Kendall tau, mean trials measured."""
    out = []
    for (backend, learner), g in cases.groupby(["backend", "learner"], dropna=False):
        base = {"backend": backend, "learner": learner, "cases": len(g)}
        out.append({**base, "metric": "share_within_5pct", "value": float(g["within"].mean()), "unit": ""})
        out.append({**base, "metric": "regret", "value": float(np.median(g["regret"])), "unit": "",
                    "p20": float(np.quantile(g["regret"], 0.2)), "p80": float(np.quantile(g["regret"], 0.8))})
        out.append({**base, "metric": "trials_to_5pct", "value": float(np.median(g["trials_to_5pct"])), "unit": "trials"})
        out.append({**base, "metric": "trials", "value": float(g["trials"].mean()), "unit": "trials"})
        if backend == "model":
            out.append({**base, "metric": "kendall_tau", "value": float(np.nanmedian(g["kendall_tau"])), "unit": ""})
    return out


# ----------------------------------------------------------------------------------------------------
# A synthetic landscape (tests, the CPU demo): a roofline with tile, wave and padding effects and noise
# ----------------------------------------------------------------------------------------------------
def synthetic_landscape(n_shapes: int = 16, n_configs: int = 80, seed: int = 0, noise: float = 0.03):
    """A GEMM trial table (the sweep's columns that evaluation reads) whose times follow the structure
    real landscapes have -- compute time shrinking with the tile's intensity, waves, padding, a shared
    memory sweet spot -- with lognormal noise; a few configs fail."""
    import pandas as pd

    from . import spaces
    from .shapes import random_shapes

    rng = np.random.default_rng(seed)
    rows = []
    space = spaces.space("gemm")
    pool = space.valid(spaces.context("gemm", M=8192, N=8192, K=8192, dtype="bfloat16", tma=True), kinds=("hardware",))
    for (M, N, K) in random_shapes(n_shapes, seed, lo=256, hi=8192):
        ctx = spaces.context("gemm", M=M, N=N, K=K, dtype="bfloat16", tma=True, relayout=False)
        tuner = spaces.candidates("gemm", M=M, N=N, K=K, dtype="bfloat16", tma=True)
        chosen = [pool[i] for i in rng.choice(len(pool), size=min(4 * n_configs, len(pool)), replace=False)]
        chosen = [c for c in chosen if not space.broken(c, ctx)][:n_configs]
        configs = list(dict.fromkeys(chosen + tuner))
        rank = {c: i for i, c in enumerate(tuner)}
        for c in configs:
            kw = c.kwargs
            bm, bn, bk = kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"]
            tiles = math.ceil(M / bm) * math.ceil(N / bn)
            waves = math.ceil(tiles / SMS_DEFAULT)
            work = waves * SMS_DEFAULT * bm * bn * math.ceil(K / bk) * bk * 2.0
            eff = (bm * bn / (bm + bn)) / 64.0 * (1.2 if kw.get("TMA") else 1.0) * min(1.0, c.num_stages / 3)
            eff *= 1.0 / (1 + abs(math.log2(c.num_warps * 1024 / (bm * bn / 4 + 1))) * 0.15)
            ms = work / (SMS_DEFAULT * 4e9 * min(eff, 2.5)) + 0.005
            ms *= math.exp(rng.normal(0, noise))
            status = "ok" if rng.random() > 0.02 else "out-of-resources"
            rows.append({"trial_id": f"{M}x{N}x{K}:{json.dumps(c.to_json(), sort_keys=True)}", "kernel": "gemm",
                         "shape": f"{M}x{N}x{K}", "M": M, "N": N, "K": K, "dtype": "bfloat16", "layout": "nn",
                         "act": "none", "precision": "ieee", "bias": True,
                         "config": json.dumps(c.to_json(), sort_keys=True), "tuner_rank": rank.get(c, -1),
                         "status": status, "ms": ms if status == "ok" else np.nan, "sm_count": SMS_DEFAULT,
                         "tma_ctx": ctx["tma"]})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------------
# GPU: the pruned tuner against cuBLAS and torch.compile(max-autotune), in one process
# ----------------------------------------------------------------------------------------------------
def compare(model: CostModel, shape_list, dtype, k: float, *, sample: int = 150, seed: int = 0, rep: int = 20,
            out_dir: Path | None = None, workers: int | None = None, model_path: str | Path | None = None,
            max_autotune: bool = True) -> list[dict]:
    """Per held-out shape: the model-pruned tuner -- the k configs it ranks first among the landscape's
    candidates for the shape (the same ``sample`` of the full space plus the tuner's list) -- and the
    runtime tuner's fixed list (``default``), compiled in parallel, checked and timed by the sweep (their
    trials appended to sweeps/gemm-compare.csv); then each one's pick timed against cuBLAS (torch.addmm)
    and torch.compile(mode="max-autotune") on the same operands, in this one process; and the runtime
    tuner itself with the model named ($TRITON_PLAYGROUND_COST_MODEL: it times its top 4, ``tuner-model``)."""
    import os
    import tempfile

    import torch

    from bench import results
    from bench.harness import median, quantile, time_call

    from . import kernels, spaces, store, sweep

    device = torch.device("cuda")
    variant = dict(kernels.GEMM.variant)
    cases = [sweep.Case("gemm", {"M": M, "N": N, "K": K}, dtype, variant,
                        kernels.GEMM.plan({"M": M, "N": N, "K": K}, dtype, variant, device)) for M, N, K in shape_list]
    sp = spaces.space("gemm")
    trials, picked = [], {}
    for case in cases:
        listed = list(sp.tuner(case.plan.ctx))
        pool = list(dict.fromkeys(sweep.sampled(sp, case.plan.ctx, sample, seed) + listed))
        ranked = top_configs(model, "gemm", case.shape, sweep._dtype_name(dtype), variant, case.plan.ctx, pool, k)
        rank = {c: i for i, c in enumerate(listed)}
        ids: dict[str, set] = {"model": set(), "default": set()}
        for cfg, label, who in ([(c, f"full-sample{sample}+model-top{k:g}", "model") for c in ranked]
                                + [(c, "tuner", "default") for c in listed]):
            tid = store.trial_id("gemm", case.shape, sweep._dtype_name(dtype), variant, cfg.to_json())
            if tid not in ids["model"] | ids["default"]:
                trials.append(sweep.Trial(tid, case, cfg, rank.get(cfg, -1), label))
            ids[who].add(tid)
        picked[id(case)] = (ids["model"], ids["default"])
    out_dir = Path(out_dir) if out_dir is not None else results.results_dir()
    trial_store = store.TrialStore(out_dir / "sweeps" / "gemm-compare.csv", sweep.trial_columns("gemm"))
    trial_store.open()
    recorded = trial_store.recorded()
    t0 = time.perf_counter()
    sweep.run_trials([t for t in trials if t.id not in recorded], trial_store,
                     sweep.Options(rep=rep, workers=workers or sweep.cores(), seed=seed), device)
    tune_s = time.perf_counter() - t0
    measured = store.read_trials(trial_store.path)
    rows = []
    for case in cases:
        M, N, K = (case.shape[d] for d in ("M", "N", "K"))
        ok = measured[measured["status"] == "ok"]
        model_ids, default_ids = picked[id(case)]
        problem = kernels.GEMM.problem(case.shape, dtype, variant, device, seed)
        params = {"M": M, "N": N, "K": K, "top_k": k, "sample": sample, "learner": model.learner,
                  "measured_model": len(model_ids), "measured_default": len(default_ids),
                  "tune_s_all_shapes": round(tune_s, 1)}
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        a = torch.randn(M, K, device=device, dtype=dtype, generator=g)
        b = torch.randn(K, N, device=device, dtype=dtype, generator=g) / K ** 0.5
        bias = torch.randn(N, device=device, dtype=dtype, generator=g)
        ref = a.double() @ b.double() + bias.double()

        def timed(backend, fn, extra=None):
            try:
                err = kernels.device_rel_err(fn(), ref)
            except Exception as e:  # noqa: BLE001  (a backend that fails is a row, the others still run)
                rows.append(results.make_row("cost_model", "gemm_vs_libraries", dict(params, **(extra or {})), dtype,
                                             backend, "time_ms", None, "ms", status="error",
                                             note=f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]))
                return
            ts = time_call(fn, rep, device=device)
            med = median(ts)
            p = dict(params, **(extra or {}))
            status = "ok" if err <= problem.tolerance else "wrong"
            rows.append(results.make_row("cost_model", "gemm_vs_libraries", p, dtype, backend, "time_ms", med, "ms",
                                         p20=quantile(ts, 0.2), p80=quantile(ts, 0.8),
                                         error_vs_fp64=err, status=status))
            rows.append(results.make_row("cost_model", "gemm_vs_libraries", p, dtype, backend, "tflops",
                                         2.0 * M * N * K / med / 1e9, "TFLOP/s", error_vs_fp64=err, status=status))

        from triton_kernels import gemm

        for backend, ids in (("model-pruned", model_ids), ("default", default_ids)):
            mine = ok[ok["trial_id"].isin(ids)]
            if len(mine):
                cfg = _config_from_json(mine.loc[mine["ms"].astype(float).idxmin(), "config"])
                timed(backend, lambda cfg=cfg: gemm.gemm_forward(a, b, bias, config=cfg)[0],
                      {"config": json.dumps(cfg.to_json(), sort_keys=True)})
        if model_path is not None:  # the runtime tuner itself, told to time only the model's top 4 of its list
            from triton_kernels.runtime import ALL_TUNERS, CACHE_ENV, TUNE_ENV

            saved = {n: os.environ.get(n) for n in (MODEL_ENV, TOP_K_ENV, TUNE_ENV, CACHE_ENV)}
            os.environ.update({MODEL_ENV: str(model_path), TOP_K_ENV: "4", TUNE_ENV: "1",
                               CACHE_ENV: tempfile.mkdtemp(prefix="tuner-model-cache-")})
            try:
                gemm._PLANS.clear()
                before = set(ALL_TUNERS["gemm"].trials)
                t1 = time.perf_counter()
                gemm.gemm_forward(a, b, bias)
                torch.cuda.synchronize()
                tried = [len(v) for key, v in ALL_TUNERS["gemm"].trials.items() if key not in before]
                timed("tuner-model", lambda: gemm.gemm_forward(a, b, bias)[0],
                      {"tune_s": round(time.perf_counter() - t1, 2), "tried": tried[0] if tried else None})
            finally:
                for n, v in saved.items():
                    if v is None:
                        os.environ.pop(n, None)
                    else:
                        os.environ[n] = v
                gemm._PLANS.clear()
        timed("cublas", lambda: torch.addmm(bias, a, b))
        if max_autotune:
            torch._dynamo.reset()
            compiled = torch.compile(lambda x, w, c: torch.addmm(c, x, w), mode="max-autotune", dynamic=False)
            t1 = time.perf_counter()
            try:
                compiled(a, b, bias)
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001  (timed() records the failure as a row)
                pass
            timed("compile-max-autotune", lambda: compiled(a, b, bias), {"compile_s": round(time.perf_counter() - t1, 1)})
        results.write_rows(rows, out_dir, "cost_model", tag="compare")  # each shape's rows kept as it ends
        print(f"compare {M}x{N}x{K}: done ({time.perf_counter() - t0:.0f} s since the start)", flush=True)
    return rows


def _config_from_json(text: str):
    from triton_kernels.runtime import Config

    return Config.from_json(json.loads(text))


# ----------------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    import pandas as pd

    import triton_kernels  # noqa: F401  (the interpreter switch)
    from bench import results
    from bench.cli import argument_parser

    from . import store

    p = argument_parser("autotune.cost_model", __doc__, full=False)
    p.add_argument("--kernel", default="gemm")
    p.add_argument("--trials", default=None, help="trial table (default <out>/sweeps/<kernel>.csv, else .csv.gz)")
    p.add_argument("--synthetic", action="store_true", help="evaluate on a generated landscape")
    p.add_argument("--learners", default="ridge,glonet,mlp")
    p.add_argument("--budget", type=float, default=0.1, help="configs measured per held-out case (< 1: a fraction)")
    p.add_argument("--folds", type=int, default=4)
    p.add_argument("--steps", type=int, default=None, help="network training steps (default 3000; CPU 300)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=None, help="only trials of this dtype")
    p.add_argument("--save-model", default=None, help="train on every case and save (learner: --save-learner)")
    p.add_argument("--save-learner", default=None, help="default: the learner with the best share within 5 %%")
    p.add_argument("--compare", action="store_true", help="GPU: the pruned tuner vs the default tuner, cuBLAS and "
                                                          "torch.compile(max-autotune) on --shapes")
    p.add_argument("--model", default=None, help="--compare: a saved model")
    p.add_argument("--shapes", default="random:3:99", help="--compare: GEMM shapes (sets as in autotune.sweep; "
                                                         "held out: not in the landscape the model learnt from)")
    p.add_argument("--sample", type=int, default=150, help="--compare: the landscape's --sample (candidate pool)")
    p.add_argument("--top-k", type=float, default=0.1, help="--compare: configs measured (< 1: a fraction)")
    p.add_argument("--no-max-autotune", action="store_true", help="--compare: leave torch.compile(max-autotune) out")
    p.add_argument("--out", default=None, help="results folder (default results/<device>/; CPU: .local/...)")
    args = p.parse_args(argv)
    learners = [x.strip() for x in args.learners.split(",") if x.strip()]
    bad = [x for x in learners if x not in LEARNERS]
    if bad:
        p.error(f"--learners: unknown {bad}; known: {', '.join(LEARNERS)}")
    out_dir = results.results_dir(args.out)
    import torch

    if args.compare:
        if not torch.cuda.is_available():
            raise SystemExit("autotune.cost_model --compare needs a CUDA GPU; nothing was run")
        if not args.model:
            p.error("--compare needs --model PATH")
        from .shapes import gemm_shapes
        from .sweep import DTYPES

        rows = compare(load(args.model), gemm_shapes(args.shapes), DTYPES[args.dtype or "bfloat16"], args.top_k,
                       sample=args.sample, seed=args.seed, out_dir=out_dir, model_path=args.model,
                       max_autotune=not args.no_max_autotune)
        path = results.write_rows(rows, out_dir, "cost_model", tag="compare")
        t = pd.DataFrame(rows)
        print(t[t["metric"] == "tflops"][["params", "backend", "value"]].to_string(index=False))
        print(f"wrote {len(rows)} rows to {path}")
        return 0
    if args.synthetic:
        df = synthetic_landscape(seed=args.seed)
        source = "synthetic"
    else:
        path = Path(args.trials) if args.trials else out_dir / "sweeps" / f"{args.kernel}.csv"
        if not args.trials and not path.exists() and path.with_suffix(".csv.gz").exists():
            path = path.with_suffix(".csv.gz")
        if not path.exists():
            raise SystemExit(f"autotune.cost_model: no trial table at {path}; run python -m autotune.sweep first "
                             "(or pass --trials PATH, or --synthetic)")
        df = store.read_trials(path)
        source = path.name
    if args.dtype:
        df = df[df["dtype"] == args.dtype]
    if "kernel" in df:
        df = df[df["kernel"] == args.kernel]
    if df.empty:
        raise SystemExit(f"autotune.cost_model: no {args.kernel} trials in {source}")
    cpu = not torch.cuda.is_available()
    fit_kw = {"steps": args.steps or (300 if cpu else 3000), "small": cpu}
    t0 = time.perf_counter()
    cases, preds, curves = evaluate(df, args.kernel, learners, args.budget, args.folds, args.seed, **fit_kw)
    summary = summarize(cases)
    dtype = str(df["dtype"].iloc[0])
    base = {"budget": args.budget, "folds": args.folds, "source": source, "shapes": int(df["shape"].nunique()),
            "trials": int(len(df))}
    rows = [results.make_row("cost_model", args.kernel,
                             dict(base, learner=s["learner"] or None, cases=s["cases"]), dtype,
                             s["backend"], s["metric"], s["value"], s["unit"], p20=s.get("p20"), p80=s.get("p80"),
                             note="synthetic landscape" if args.synthetic else "")
            for s in summary]
    tag = args.kernel + ("-synthetic" if args.synthetic else "")
    path = results.write_rows(rows, out_dir, "cost_model", tag=tag)
    for name, frame in (("cases", cases), ("predictions", preds), ("curves", curves)):
        frame.to_csv(out_dir / f"cost_model-{tag}-{name}.csv", index=False)
    table = pd.DataFrame(summary)
    table = table[table["metric"].isin(["share_within_5pct", "regret", "trials_to_5pct", "kendall_tau", "trials"])]
    print(table.pivot_table(index=["backend", "learner"], columns="metric", values="value").to_string())
    print(f"{len(cases['case'].unique()) if len(cases) else 0} held-out cases in {args.folds} folds, budget "
          f"{args.budget:g}, {time.perf_counter() - t0:.1f} s; wrote {path}")
    if args.save_model:
        shares = {s["learner"]: s["value"] for s in summary if s["backend"] == "model" and s["metric"] == "share_within_5pct"}
        learner = args.save_learner or max(shares, key=shares.get)
        X, names, y = _trial_frame(df, args.kernel)
        model = fit(args.kernel, X, names, y, learner, **(dict(fit_kw, seed=args.seed) if learner != "ridge" else {}))
        print(f"saved the {learner} model (trained on every case) to {model.save(args.save_model)}")
    return 0


if __name__ == "__main__":
    from bench.cli import run as _run

    sys.exit(_run(main))
