"""Sweep a kernel's config space on chosen shapes, recording every trial; resumable, compiled in parallel.

    python -m autotune.sweep --kernel gemm --dtype bf16 --shapes square,studies,random:16 --space full \\
        --sample 150 [--workers 16] [--gpus N] [--time-budget 540] [--out DIR]

Per (shape, variant) the configs come from the kernel's declared space (autotune/spaces.py):
``--space tuner`` is exactly the runtime tuner's candidate list for that shape (TMA and re-laid-out-B
candidates included where the tuner tries them); ``--space full`` the whole valid space (``--sample N``: N
configs of it, the same N for every shape of a dtype, plus the tuner's list); ``--prune model --model PATH
--top-k K`` keeps the K (or the fraction K < 1) configs a trained cost model predicts fastest.

How it runs: the main process captures, per config, the kernel specialization Triton would compile at the
first launch (nothing is compiled or launched); a pool of ``--workers`` processes (default: one per CPU
core) compiles them with Triton's own compiler into Triton's on-disk cache; the main process then times
the configs one at a time on the GPU with the harness's timer (L2 flushed, median / p20 / p80 of adaptive
repetitions), after checking each result against float64. ``--serial`` compiles one at a time in the main
process instead (the first launch compiles), for the wall-time comparison. ``--gpus N``: the trials split
over N worker processes, one per GPU (several on one GPU when it has fewer; for testing).

Every trial (ok, wrong, out-of-resources, compile-error, error) is appended as one line to
``<out>/sweeps/<kernel>.csv`` (default results/<device>/; CPU interpreter: .local/results/cpu-interpreter/;
``--trials PATH``: another table, its run log beside it), flushed at once: a killed sweep resumes where it
stopped when run again with the same arguments (recorded trials are skipped). ``--time-budget S`` stops
starting trials after S seconds (for calls with a time limit). At the end the best config per tuning key
goes into the runtime's persistent autotune cache (``--no-cache`` to skip), a run log line into
``sweeps/<kernel>-runs.jsonl`` and the run's wall time as a row of ``autotune_sweep.csv``.

In the CPU interpreter the default is one tiny shape per kernel (timings are no performance figure;
bfloat16 GEMM / conv1d are refused: the interpreter has no bfloat16 dot).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

import triton_kernels  # noqa: F401  (the interpreter switch before triton)
from triton_kernels.compile_pool import capture, compile_spec, cores  # noqa: F401  (cores: sweep.cores)
from triton_kernels.runtime import ALL_TUNERS, INTERPRET, Autotuner, Config, synchronize

from . import kernels, shapes as shape_sets, spaces, store

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
GPU_DEFAULT_SHAPES = {"gemm": "4096x1024x8704", "conv1d": "512x1014x256x256x7", "softmax": "4096x8192",
                      "layernorm_fwd": "16384x4096", "cross_entropy": "8192x32000"}
CPU_DEFAULT_SHAPES = {"gemm": "40x24x33", "conv1d": "2x20x8x16x3", "softmax": "8x40", "layernorm_fwd": "8x48",
                      "cross_entropy": "8x40"}
NEEDS_DOT = ("gemm", "conv1d")  # bfloat16 dots are refused in the interpreter


# ----------------------------------------------------------------------------------------------------
# Planning: cases (shape x variant) and their trials
# ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    kernel: str
    shape: dict
    dtype: torch.dtype
    variant: dict
    plan: kernels.Plan


@dataclasses.dataclass
class Trial:
    id: str
    case: Case
    config: Config
    tuner_rank: int   # position in the runtime tuner's list for this shape (-1: not in it)
    space: str


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _config_key(config: Config) -> dict:
    return config.to_json()


def sampled(space: spaces.Space, ctx: dict, n: int, seed: int) -> list[Config]:
    """n configs of the space, drawn among those that pass the hardware rules for ctx, by a hash of the
    config and the seed: the same draw for every shape whose context allows the same configs (the shape
    rules are applied after the draw)."""
    pool = space.valid(ctx, kinds=("hardware",))

    def rank(c: Config) -> str:
        return hashlib.sha1(f"{seed}:{json.dumps(c.to_json(), sort_keys=True)}".encode()).hexdigest()

    chosen = sorted(pool, key=rank)[:n]
    return [c for c in chosen if not space.broken(c, ctx)]


def plan_trials(kernel: str, cases: Sequence[Case], space_name: str, *, sample: int | None = None,
                include_tuner: bool = True, seed: int = 0, model: Any = None, top_k: float | None = None) -> list[Trial]:
    """The trials of a sweep, case by case: the configs of ``space_name`` ("tuner" or "full", optionally
    ``sample``d), ranked by a cost ``model`` and cut to ``top_k`` when given."""
    sp = spaces.space(kernel)
    trials: list[Trial] = []
    for case in cases:
        ctx = case.plan.ctx
        tuner = sp.tuner(ctx)
        if space_name == "tuner":
            configs = list(tuner)
        elif space_name == "full":
            configs = sampled(sp, ctx, sample, seed) if sample else sp.valid(ctx)
            if include_tuner:
                configs = list(dict.fromkeys(configs + list(tuner)))
        else:
            raise ValueError(f"--space must be tuner or full, got {space_name!r}")
        label = space_name + (f"-sample{sample}" if space_name == "full" and sample else "")
        if model is not None:
            from . import cost_model

            configs = cost_model.top_configs(model, kernel, case.shape, _dtype_name(case.dtype), case.variant, ctx,
                                             configs, top_k)
            label += f"+model-top{top_k:g}"
        rank = {c: i for i, c in enumerate(tuner)}
        for cfg in configs:
            tid = store.trial_id(kernel, case.shape, _dtype_name(case.dtype), case.variant, _config_key(cfg))
            trials.append(Trial(tid, case, cfg, rank.get(cfg, -1), label))
    seen: set[str] = set()
    return [t for t in trials if not (t.id in seen or seen.add(t.id))]


def knob_columns(kernel: str) -> list[str]:
    out: list[str] = []
    for v in spaces.space(kernel).variants:
        for name in [n for n, _ in v.knobs] + [n for n, _ in v.fixed]:
            if name not in out:
                out.append(name)
    return out


def trial_columns(kernel: str) -> list[str]:
    a = kernels.adapter(kernel)
    return store.columns(a.dims, list(a.variant), knob_columns(kernel))


# ----------------------------------------------------------------------------------------------------
# Measuring one trial
# ----------------------------------------------------------------------------------------------------
class SweepAborted(RuntimeError):
    """The device is unusable (a fault poisoned the CUDA context): run the same command again to resume."""


@dataclasses.dataclass
class Options:
    rep: int = 10          # at most this many timed calls per trial
    min_rep: int = 3
    target_ms: float = 40.0  # timed calls sized to about this much GPU time per trial
    workers: int = 1
    serial: bool = False
    time_budget: float | None = None
    max_trials: int | None = None
    progress: bool = True
    seed: int = 0


def classify(e: BaseException) -> str:
    name, msg = type(e).__name__, str(e)
    if "OutOfResources" in name or "out of resource" in msg.lower():
        return "out-of-resources"
    if "Compilation" in name or type(e).__module__.startswith("triton.compiler"):
        return "compile-error"
    return "error"


def _context_alive(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        return True
    except Exception:  # noqa: BLE001  (a sticky CUDA error)
        return False


def measure(problem: kernels.Problem, cfg: Config, opts: Options, device: torch.device) -> dict:
    """Check one config against float64, then time it: the fields of its trial row."""
    from bench.harness import median, quantile, time_call

    t0 = time.perf_counter()
    out = problem.call(cfg)
    synchronize(device)
    first_s = time.perf_counter() - t0
    err = problem.error(out)
    if not err <= problem.tolerance:
        return {"status": "wrong", "error_vs_fp64": err, "first_s": first_s,
                "note": f"relative error {err:.3g} > tolerance {problem.tolerance:g}"}

    def fn():
        return problem.call(cfg)

    if INTERPRET:
        reps = opts.rep
    else:
        fn()
        probe = time_call(fn, 1, device=device)[0]
        reps = max(opts.min_rep, min(opts.rep, int(opts.target_ms / max(probe, 1e-4))))
    ts = time_call(fn, reps, device=device)
    ms = median(ts)
    return {"status": "ok", "ms": ms, "ms_p20": quantile(ts, 0.2), "ms_p80": quantile(ts, 0.8), "reps": reps,
            "tflops": problem.flops / ms / 1e9 if problem.flops else None,
            "gbps": problem.bytes / ms / 1e6 if problem.bytes else None, "error_vs_fp64": err, "first_s": first_s}


def trial_row(trial: Trial, result: dict, *, compile_s=None, load_s=None, worker: str = "") -> dict:
    from bench.results import provenance

    case, cfg = trial.case, trial.config
    a = kernels.adapter(case.kernel)
    row = {"trial_id": trial.id, "kernel": case.kernel, "shape": a.shape_text(case.shape), **case.shape,
           "dtype": _dtype_name(case.dtype), **case.variant, "space": trial.space,
           "config": json.dumps(cfg.to_json(), sort_keys=True), "tuner_rank": trial.tuner_rank,
           "tune_key": Autotuner.key_str(case.plan.tune_key) if case.plan.tune_key is not None else None,
           **cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
           "compile_s": compile_s, "load_s": load_s, "worker": worker}
    row.update({k: v for k, v in result.items() if k != "first_s"})
    row.update(provenance())
    row["timestamp"] = datetime.datetime.now().isoformat(timespec="seconds")
    if INTERPRET:
        row["note"] = "cpu-interpreter, not a performance figure" + (f"; {row['note']}" if row.get("note") else "")
    return row


# ----------------------------------------------------------------------------------------------------
# Running trials on one device
# ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class RunStats:
    done: int = 0
    stopped_by: str = "done"
    compile_cpu_s: float = 0.0   # seconds the compile workers spent (sum over distinct kernels)
    specs: int = 0               # distinct kernel specializations compiled
    pids: list = dataclasses.field(default_factory=list)     # the compile processes that ran jobs
    pool_restarts: int = 0       # compile pools replaced after a process died
    workers: list = dataclasses.field(default_factory=list)  # the per-GPU worker processes


def _pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    return concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _stop_pool(pool) -> None:
    if pool is None:
        return
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:  # compiles still running: not needed any more
        if p.is_alive():
            p.terminate()


def run_trials(trials: Sequence[Trial], trial_store: store.TrialStore, opts: Options, device: torch.device,
               worker: str = "", on_trial: Callable[[Trial, dict], None] | None = None,
               progress: Callable[[int], None] | None = None) -> RunStats:
    """Compile (in parallel unless ``opts.serial``), check and time ``trials`` on ``device``, appending one
    row per trial. ``on_trial(trial, row)`` runs after each row is written; ``progress(n)`` counts trials."""
    stats = RunStats()
    t_start = time.perf_counter()
    cases: dict[int, list[Trial]] = {}
    for t in trials:
        cases.setdefault(id(t.case), []).append(t)
    groups = list(cases.values())
    pool = None if opts.serial else _pool(max(1, opts.workers))
    jobs: dict[str, concurrent.futures.Future] = {}
    job_args: dict[str, tuple] = {}
    needs: dict[str, list[str]] = {}
    restarts = 0

    def compiled(key: str) -> dict | None:
        """The compile job's result; a pool whose process died (killed, crashed) is replaced and its
        unfinished jobs resubmitted, at most 3 times; then None (the first launch compiles in-process)."""
        nonlocal pool, restarts
        while True:
            try:
                return jobs[key].result()
            except concurrent.futures.process.BrokenProcessPool:
                if restarts >= 3:
                    return None
                restarts += 1
                print(f"autotune.sweep: a compile process died; restarting the pool ({restarts}/3)", file=sys.stderr,
                      flush=True)
                _stop_pool(pool)
                pool = _pool(max(1, opts.workers))
                for k, f in list(jobs.items()):
                    if not f.done() or f.exception() is not None:
                        jobs[k] = pool.submit(compile_spec, *job_args[k])

    try:
        if pool is not None:  # capture every config's specializations, then compile them all in the pool
            for group in groups:
                problem = None if INTERPRET else kernels.adapter(group[0].case.kernel).problem(
                    group[0].case.shape, group[0].case.dtype, group[0].case.variant, device, opts.seed)
                for t in group:
                    if problem is None:  # the interpreter compiles nothing: an empty job per trial
                        specs = [(None, None, None)]
                    else:
                        try:
                            specs = capture(lambda: problem.call(t.config))
                        except Exception:  # noqa: BLE001  (the launcher refused it: the timing pass says why)
                            specs = []
                    needs[t.id] = []
                    for module, name, data in specs:
                        key = data if data is not None else f"none:{t.id}"
                        if key not in jobs:
                            job_args[key] = (module, name, data)
                            jobs[key] = pool.submit(compile_spec, module, name, data)
                        needs[t.id].append(key)
                problem = None  # the inputs of one case at a time
        for group in groups:
            case = group[0].case
            problem = kernels.adapter(case.kernel).problem(case.shape, case.dtype, case.variant, device, opts.seed)
            for t in group:
                if opts.time_budget is not None and time.perf_counter() - t_start > opts.time_budget:
                    stats.stopped_by = "time-budget"
                    return stats
                if opts.max_trials is not None and stats.done >= opts.max_trials:
                    stats.stopped_by = "max-trials"
                    return stats
                compile_s, failure = None, None
                if pool is not None:
                    compile_s = 0.0
                    for key in needs.get(t.id, []):
                        res = compiled(key)
                        if res is None:
                            continue
                        compile_s += res["seconds"]
                        if res["error"] and failure is None:
                            failure = res
                try:
                    if failure is not None:
                        result = {"status": failure["kind"], "note": failure["error"]}
                    else:
                        result = measure(problem, t.config, opts, device)
                except Exception as e:  # noqa: BLE001  (a config that fails is a result)
                    result = {"status": classify(e), "note": f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]}
                first = result.get("first_s")
                row = trial_row(t, result, compile_s=compile_s if pool is not None else first,
                                load_s=first if pool is not None else None, worker=worker)
                trial_store.append(row)
                stats.done += 1
                if progress is not None:
                    progress(1)
                if on_trial is not None:
                    on_trial(t, row)
                if result["status"] != "ok" and not _context_alive(device):
                    raise SweepAborted(f"the CUDA context is unusable after trial {t.id} ({result.get('note')}); "
                                       "it is recorded: run the same command again to resume")
            problem = None
    except KeyboardInterrupt:
        stats.stopped_by = "interrupted"
        raise
    finally:
        if pool is not None:
            done = [f.result() for f in jobs.values() if f.done() and not f.cancelled() and f.exception() is None]
            stats.pool_restarts = restarts
            stats.compile_cpu_s = sum(r["seconds"] for r in done if r["pid"] is not None)
            stats.specs = sum(1 for k in jobs if not k.startswith("none:"))
            stats.pids = sorted({r["pid"] for r in done})
        _stop_pool(pool)
    return stats


def _gpu_worker(index: int, device_index: int, trials: list[Trial], path: str, columns: list[str], opts: Options,
                queue) -> None:
    """One worker process of a multi-GPU sweep: its share of the trials on its device."""
    device = torch.device("cuda", device_index) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        stats = run_trials(trials, store.TrialStore(path, columns), opts, device, worker=str(index),
                           progress=lambda n: queue.put(("trial", n)))
        queue.put(("done", index, dataclasses.asdict(stats)))
    except BaseException as e:  # noqa: BLE001  (reported to the coordinator, which exits non-zero)
        queue.put(("failed", index, f"{type(e).__name__}: {e}"))


def run_on_gpus(trials: Sequence[Trial], trial_store: store.TrialStore, opts: Options, gpus: int,
                progress: Callable[[int], None] | None = None) -> RunStats:
    """Split the trials over ``gpus`` worker processes (cases kept whole where there are enough of them),
    one per GPU (round-robin over the GPUs there are)."""
    by_case: dict[int, list[Trial]] = {}
    for t in trials:
        by_case.setdefault(id(t.case), []).append(t)
    groups = sorted(by_case.values(), key=len, reverse=True)
    shares: list[list[Trial]] = [[] for _ in range(gpus)]
    if len(groups) >= gpus:
        for g in groups:  # largest case first onto the lightest share
            min(shares, key=len).extend(g)
    else:
        for i, t in enumerate(trials):
            shares[i % gpus].append(t)
    n_dev = torch.cuda.device_count() if torch.cuda.is_available() else 1
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    worker_opts = dataclasses.replace(opts, workers=max(1, opts.workers // gpus), progress=False)
    procs = [ctx.Process(target=_gpu_worker, args=(i, i % n_dev, share, str(trial_store.path), trial_store.columns,
                                                   worker_opts, queue), daemon=False)
             for i, share in enumerate(shares) if share]
    for p in procs:
        p.start()
    stats, finished, failures = RunStats(), 0, []
    while finished < len(procs):
        try:
            msg = queue.get(timeout=5)
        except Exception:  # noqa: BLE001  (queue.Empty: check the workers are alive)
            if all(not p.is_alive() for p in procs):
                break
            continue
        if msg[0] == "trial":
            stats.done += msg[1]
            if progress is not None:
                progress(msg[1])
        else:
            finished += 1
            if msg[0] == "failed":
                failures.append(f"worker {msg[1]}: {msg[2]}")
            else:
                s = msg[2]
                stats.compile_cpu_s += s["compile_cpu_s"]
                stats.specs += s["specs"]
                stats.pids += s["pids"]
                stats.pool_restarts += s["pool_restarts"]
                if s["stopped_by"] != "done":
                    stats.stopped_by = s["stopped_by"]
    for p in procs:
        p.join()
    stats.workers = [p.pid for p in procs]
    if failures or any(p.exitcode for p in procs):
        raise RuntimeError("; ".join(failures) or f"a worker exited with {[p.exitcode for p in procs]}")
    return stats


# ----------------------------------------------------------------------------------------------------
# The persistent cache: the best config per tuning key
# ----------------------------------------------------------------------------------------------------
def best_per_key(df) -> dict[tuple[str, str], tuple[Config, float, list[dict]]]:
    """(tuner, tuning key) -> (best config, its time, the key's trials), from ok trials. A key spanning
    several shapes takes the config with the least geometric-mean time over the shapes where every
    candidate was measured."""
    out = {}
    ok = df[df["status"] == "ok"]
    for (tuner, key), g in ok.groupby(["tuner", "tune_key"]):
        n_shapes = g["shape"].nunique()
        per_cfg = g.groupby("config").agg(n=("shape", "nunique"), logms=("ms", lambda s: float(sum(map(math.log, s)) / len(s))))
        full = per_cfg[per_cfg["n"] == n_shapes]
        pick = (full if len(full) else per_cfg).sort_values("logms").index[0]
        shape = g.groupby("shape").size().idxmax()
        trials = [{"config": json.loads(c), "ms": float(m)} for c, m in g[g["shape"] == shape][["config", "ms"]].values]
        out[(tuner, key)] = (Config.from_json(json.loads(pick)), math.exp(per_cfg.loc[pick, "logms"]), trials)
    return out


def write_cache(df, cases: Sequence[Case]) -> list[str]:
    """Store the best config of every tuning key of ``cases`` in the runtime's persistent cache (the
    tuner's own file and format). Returns the keys written."""
    import importlib

    import pandas as pd

    for case in cases[:1]:  # the kernel's module registers its tuners
        importlib.import_module(kernels.adapter(case.kernel).module)
    tuner_of = {Autotuner.key_str(c.plan.tune_key): c.plan.tuner for c in cases if c.plan.tune_key is not None}
    df = df[df["tune_key"].isin(list(tuner_of))].copy()
    if df.empty:
        return []
    df["tuner"] = df["tune_key"].map(tuner_of)
    df["ms"] = pd.to_numeric(df["ms"], errors="coerce")
    written = []
    for (tuner_name, key), (cfg, ms, trials) in best_per_key(df).items():
        tuner: Autotuner | None = ALL_TUNERS.get(tuner_name)
        if tuner is None:
            continue
        tuner._store(key, cfg, ms, trials, 0.0)  # the column holds the cache's own key string
        written.append(key)
    return written


# ----------------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------------
def _parse_variants(kernel: str, args) -> list[dict]:
    """GEMM: --layouts x --act (x --precision); other kernels: --variant name=v1|v2,... (a product)."""
    a = kernels.adapter(kernel)
    lists: dict[str, list] = {}
    if kernel == "gemm":
        lists["layout"] = [x.strip() for x in args.layouts.split(",") if x.strip()]
        lists["act"] = [x.strip() for x in args.act.split(",") if x.strip()]
        lists["precision"] = [args.precision]
        lists["bias"] = [not args.no_bias]
    for item in (args.variant or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise ValueError(f"--variant takes name=value[|value...], got {item!r}")
        name, values = item.split("=", 1)
        default = a.variant.get(name.strip())
        conv = (lambda s: s.lower() in ("1", "true", "yes")) if isinstance(default, bool) else \
            (int if isinstance(default, int) else str)
        lists[name.strip()] = [conv(v.strip()) for v in values.split("|")]
    names = list(lists)
    return [a.check_variant(dict(zip(names, combo))) for combo in itertools.product(*lists.values())] or \
        [a.check_variant({})]


def _shapes(kernel: str, spec: str | None) -> list[dict]:
    a = kernels.adapter(kernel)
    spec = spec or (CPU_DEFAULT_SHAPES if INTERPRET else GPU_DEFAULT_SHAPES)[kernel]
    if kernel == "gemm":
        return [dict(zip(a.dims, s)) for s in shape_sets.gemm_shapes(spec)]
    return [a.parse_shape(s.strip()) for s in spec.split(",") if s.strip()]


def _plan_hash(trials: Sequence[Trial]) -> str:
    return hashlib.sha1(",".join(sorted(t.id for t in trials)).encode()).hexdigest()[:12]


def _log(path: Path, entry: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(entry, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def main(argv=None, on_trial: Callable[[Trial, dict], None] | None = None) -> int:
    from bench import results
    from bench.cli import argument_parser, cpu_notice, guard_cpu, interpreter_seconds

    p = argument_parser("autotune.sweep", __doc__)
    p.add_argument("--kernel", default="gemm", choices=sorted(kernels.ADAPTERS))
    p.add_argument("--shapes", default=None, help="comma-separated shapes (gemm: MxNxK or the sets square, skinny, "
                                                  "studies, random[:n[:seed]]; conv1d: BxLxCxNxk; softmax, "
                                                  "cross_entropy: MxN / MxV; layernorm_fwd: MxD)")
    p.add_argument("--dtype", default=None, choices=sorted(DTYPES), help="default bfloat16 (CPU: float32)")
    p.add_argument("--space", default="tuner", choices=("tuner", "full"))
    p.add_argument("--sample", type=int, default=None, help="--space full: this many configs of it (plus the tuner's)")
    p.add_argument("--no-tuner-configs", action="store_true", help="--space full: leave the tuner's list out")
    p.add_argument("--seed", type=int, default=0, help="sample draw and inputs")
    p.add_argument("--prune", default=None, choices=("model",), help="measure only the top-k by a cost model")
    p.add_argument("--model", default=None, help="--prune model: a model saved by python -m autotune.cost_model")
    p.add_argument("--top-k", type=float, default=0.1, help="--prune model: configs kept per shape (< 1: a fraction)")
    p.add_argument("--layouts", default="nn", help="gemm: n/t per operand, comma-separated (nn,nt,tn,tt)")
    p.add_argument("--act", default="none", help="gemm: none, relu, gelu (comma-separated)")
    p.add_argument("--precision", default="ieee", choices=("ieee", "tf32"), help="gemm / conv1d with float32")
    p.add_argument("--no-bias", action="store_true", help="gemm: C = A @ B without bias")
    p.add_argument("--variant", default=None, help="other knobs, e.g. direction=forward|backward,log=false")
    p.add_argument("--rep", type=int, default=10, help="at most this many timed calls per trial")
    p.add_argument("--target-ms", type=float, default=40.0, help="timed calls sized to about this much time")
    p.add_argument("--workers", type=int, default=cores(), help="compile processes (default: the cores this "
                                                                "process may use)")
    p.add_argument("--serial", action="store_true", help="compile one config at a time in this process")
    p.add_argument("--gpus", type=int, default=1, help="worker processes, one per GPU")
    p.add_argument("--time-budget", type=float, default=None, help="start no trial after this many seconds")
    p.add_argument("--max-trials", type=int, default=None, help="stop after this many new trials")
    p.add_argument("--fresh-triton-cache", action="store_true",
                   help="compile into a new empty Triton cache (for wall-time comparisons)")
    p.add_argument("--no-cache", action="store_true", help="do not write the best configs into the autotune cache")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", default=None, help="results folder (default results/<device>/; CPU: "
                                               ".local/results/cpu-interpreter/); trials go to <out>/sweeps/")
    p.add_argument("--trials", default=None, help="trial table (default <out>/sweeps/<kernel>.csv; its run log "
                                                  "beside it): e.g. a separate table for a wall-time comparison")
    args = p.parse_args(argv)
    t_start = time.perf_counter()
    kernel = args.kernel
    dtype = DTYPES[args.dtype] if args.dtype else (torch.float32 if INTERPRET else torch.bfloat16)
    if INTERPRET and dtype == torch.bfloat16 and kernel in NEEDS_DOT:
        raise SystemExit("autotune.sweep: the CPU interpreter has no bfloat16 dot; pass --dtype float32 or "
                         "float16 here (bfloat16 on a GPU)")
    if args.prune and not args.model:
        p.error("--prune model needs --model PATH")
    if args.sample is not None and args.space != "full":
        p.error("--sample draws from --space full")
    if args.gpus < 1 or args.workers < 1:
        p.error("--gpus and --workers must be >= 1")
    try:
        shape_list = _shapes(kernel, args.shapes)
        variants = _parse_variants(kernel, args)
    except ValueError as e:
        p.error(str(e))
    a = kernels.adapter(kernel)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    cases = [Case(kernel, s, dtype, v, a.plan(s, dtype, v, device)) for s in shape_list for v in variants]
    model = None
    if args.prune:
        from . import cost_model

        model = cost_model.load(args.model)
    trials = plan_trials(kernel, cases, args.space, sample=args.sample, include_tuner=not args.no_tuner_configs,
                         seed=args.seed, model=model, top_k=args.top_k if args.prune else None)
    shapes_text = ",".join(a.shape_text(s) for s in shape_list)
    if INTERPRET:
        if args.shapes or args.full:
            work = 0.0
            for t in trials:
                problem_flops = 2.0 * math.prod(t.case.shape.values())
                work += interpreter_seconds(problem_flops, calls=args.rep + 1)
            guard_cpu(work, f"{kernel} {shapes_text} ({len(trials)} trials)", args.full, "autotune.sweep")
        else:
            cpu_notice("autotune.sweep", f"{kernel} {shapes_text} {_dtype_name(dtype)}, {len(trials)} trials")
    if args.fresh_triton_cache:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cache-")
    out_dir = results.results_dir(args.out)
    table = Path(args.trials) if args.trials else out_dir / "sweeps" / f"{kernel}.csv"
    trial_store = store.TrialStore(table, trial_columns(kernel))
    dropped = trial_store.open()
    recorded = trial_store.recorded()
    pending = [t for t in trials if t.id not in recorded]
    print(f"autotune.sweep {kernel}: {len(trials)} trials planned ({len(cases)} cases), {len(trials) - len(pending)} "
          f"already recorded in {trial_store.path}, {len(pending)} to run"
          + (f" (a line cut short by a kill dropped: {dropped} bytes)" if dropped else ""), flush=True)
    mode = "serial" if args.serial else (f"gpus-{args.gpus}" if args.gpus > 1 else f"parallel-{args.workers}")
    plan_hash = _plan_hash(trials)
    run_log = table.with_name(table.name[: -len(".csv")] + "-runs.jsonl" if table.name.endswith(".csv")
                              else table.name + "-runs.jsonl")
    _log(run_log, {"event": "start", "time": datetime.datetime.now().isoformat(timespec="seconds"),
                   "argv": list(argv if argv is not None else sys.argv[1:]), "planned": len(trials),
                   "recorded_before": len(recorded), "pending": len(pending), "plan": plan_hash, "mode": mode,
                   "dropped_bytes": dropped})
    opts = Options(rep=args.rep, target_ms=args.target_ms, workers=args.workers, serial=args.serial,
                   time_budget=None if args.time_budget is None else max(0.0, args.time_budget - (time.perf_counter() - t_start)),
                   max_trials=args.max_trials, progress=not args.no_progress, seed=args.seed)
    from tqdm import tqdm

    bar = tqdm(total=len(pending), desc=f"sweep {kernel}", unit="trial", disable=args.no_progress or not pending,
               file=sys.stderr, smoothing=0.05)
    t_run = time.perf_counter()
    try:
        if args.gpus > 1 and pending:
            stats = run_on_gpus(pending, trial_store, opts, args.gpus, progress=bar.update)
        else:
            stats = run_trials(pending, trial_store, opts, device, worker="0", on_trial=on_trial, progress=bar.update)
    finally:
        bar.close()
    wall = time.perf_counter() - t_run
    df = store.read_trials(trial_store.path)
    counts = df["status"].value_counts().to_dict() if len(df) else {}
    in_plan = int(df["trial_id"].isin([t.id for t in trials]).sum()) if len(df) else 0
    duplicates = int(df["trial_id"].duplicated().sum()) if len(df) else 0
    written = [] if args.no_cache or not len(df) else write_cache(df, cases)
    _log(run_log, {"event": "end", "time": datetime.datetime.now().isoformat(timespec="seconds"), "plan": plan_hash,
                   "new_trials": stats.done, "stopped_by": stats.stopped_by, "wall_s": wall, "mode": mode,
                   "compile_cpu_s": stats.compile_cpu_s, "specs": stats.specs,
                   "compile_processes": len(set(stats.pids)), "pool_restarts": stats.pool_restarts, "gpu_workers": len(stats.workers), "recorded_after": len(df),
                   "planned_recorded": in_plan, "duplicates": duplicates, "cache_keys": len(written)})
    params = {"kernel": kernel, "shapes": shapes_text, "space": trials[0].space if trials else args.space,
              "plan": plan_hash, "planned": len(trials), "new_trials": stats.done, "stopped_by": stats.stopped_by,
              "fresh_triton_cache": args.fresh_triton_cache}
    rows = [results.make_row("autotune_sweep", kernel, params, dtype, mode, "wall_s", wall, "s"),
            results.make_row("autotune_sweep", kernel, params, dtype, mode, "compile_cpu_s", stats.compile_cpu_s, "s")]
    results.write_rows(rows, out_dir, "autotune_sweep")
    print(f"ran {stats.done} trials in {wall:.1f} s ({mode}; stopped by {stats.stopped_by}); {in_plan}/{len(trials)} "
          f"of the plan recorded, {duplicates} duplicate ids; statuses {counts}; "
          f"{len(written)} tuning keys written to the autotune cache")
    _summary(df[df["trial_id"].isin([t.id for t in trials])] if len(df) else df, a)
    return 0 if in_plan == len(trials) or stats.stopped_by != "done" else 1


def _summary(df, a: kernels.Adapter) -> None:
    """Per case: the best config, and the best of the tuner's list."""
    import pandas as pd

    ok = df[df["status"] == "ok"].copy() if len(df) else df
    if not len(ok):
        return
    ok["ms"] = pd.to_numeric(ok["ms"])
    keys = ["shape", "dtype"] + [c for c in a.variant if c in ok.columns]
    lines = []
    for key, g in ok.groupby(keys):
        best = g.loc[g["ms"].idxmin()]
        tuner = g[pd.to_numeric(g["tuner_rank"]) >= 0]
        line = f"  {' '.join(map(str, key))}: best {best['ms']:.4g} ms {best['config']}"
        if len(tuner):
            tb = tuner.loc[tuner["ms"].idxmin()]
            line += f"; tuner's list best {tb['ms']:.4g} ms ({tb['ms'] / best['ms']:.2f}x)"
        lines.append(line + f" [{len(g)} ok]")
    print("\n".join(lines[:40]) + (f"\n  ... {len(lines) - 40} more" if len(lines) > 40 else ""))
    if INTERPRET:
        print("(cpu-interpreter, not a performance figure: every time above)")


if __name__ == "__main__":
    from bench.cli import run as _run

    sys.exit(_run(main))
