"""The shared benchmark harness: cases -> backends -> checked, timed, tidy rows.

A :class:`Case` is a named workload: an input factory (fresh random inputs per seed), a float64
reference, analytic FLOP and byte counts, and one callable per backend that has its own
implementation (at least ``eager``; ``triton`` for our kernels). Derived backends are built here:

* ``compile``               torch.compile(eager fn, dynamic=False), dynamo reset per case, compile time
                            measured separately;
* ``compile-max-autotune``  the same with mode="max-autotune" (opt-in: slow);
* ``<backend>+graph``       the backend captured once in a CUDA graph and replayed.

For every (case, backend): correctness first (relative error vs float64; a wrong result is a row with
status ``wrong`` and no timing), then the time (median, p20, p80; L2 flushed = cold, and warm for small
working sets), TFLOP/s, GB/s, % of the measured roofline, speedup vs eager and vs compile with a
confidence interval from interleaved repeats, peak memory, compile/autotune time, provenance.
Failures (OOM, compile error, unsupported dtype) become rows with a status; the run goes on.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import traceback
from typing import Any, Callable, Sequence

import numpy
import torch

from triton_kernels.runtime import capture_graph, cuda_time_ms, default_device
from triton_kernels.testing import rel_err, tolerance

from . import results

Fn = Callable[..., Any]


@dataclasses.dataclass
class Case:
    """A named workload.

    suite:     "ops", "mnist", "sgemm", ...
    name:      case name, e.g. "gemm", "softmax_fwd", "epoch"
    params:    shape and options (JSON-able); goes into the row's params column
    dtype:     the input dtype (sets the tolerance and the roofline ceiling)
    inputs:    inputs(seed, device) -> tuple of arguments (fresh random data for each seed)
    fns:       backend name -> fn(*inputs) -> output (tensor or tuple of tensors). "eager" is the
               reference implementation compile backends are derived from; "triton" our kernels.
    reference: reference(*inputs) -> float64 output(s), computed on the inputs' device; None = no check
    flops, bytes: analytic counts for one call (bytes: the fewest bytes that must move)
    tf32:      fp32 case computed with tf32 tensor cores (looser tolerance)
    tol:       override the tolerance (default: the project's table for dtype)
    error:     error(out, ref) -> float, for outputs that need a custom comparison
    graph_ok:  whether CUDA-graph variants apply (no host syncs, static shapes)
    kind:      "op" | "model" (model-level cases: a training step, an epoch, an inference batch)
    backward:  whether fns include the backward pass
    """

    suite: str
    name: str
    params: dict
    dtype: torch.dtype
    inputs: Callable[[int, torch.device], tuple]
    fns: dict[str, Fn]
    reference: Callable[..., Any] | None = None
    flops: float = 0.0
    bytes: float = 0.0
    tf32: bool = False
    tol: float | None = None
    error: Callable[[Any, Any], float] | None = None
    graph_ok: bool = True
    kind: str = "op"
    backward: bool = False

    @property
    def label(self) -> str:
        shape = ",".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.name}[{shape}]"

    def tolerance(self) -> float:
        return self.tol if self.tol is not None else tolerance(self.dtype, self.tf32)


# ----------------------------------------------------------------------------------------------------
# Backends: registered by name; each builder returns a callable for a case, or None (not applicable).
# ----------------------------------------------------------------------------------------------------
BACKENDS: dict[str, Callable[[Case], Fn | None]] = {}
GRAPH_SUFFIX = "+graph"


def register_backend(name: str):
    """Decorator: ``@register_backend("mine")`` over ``builder(case) -> fn | None``."""

    def deco(builder):
        BACKENDS[name] = builder
        return builder

    return deco


@register_backend("eager")
def _eager(case: Case):
    return case.fns.get("eager")


@register_backend("triton")
def _triton(case: Case):
    return case.fns.get("triton")


@register_backend("eager-fused")
def _eager_fused(case: Case):
    """torch's fused implementation, where a case has one (the optimizers' ``fused=True``)."""
    return case.fns.get("eager-fused")


def _compiled(mode: str | None):
    def build(case: Case):
        if (mode is None and "compile" in case.fns):
            return case.fns["compile"]
        base = case.fns.get("eager")
        if base is None:
            return None
        torch._dynamo.reset()  # a fresh cache per case, so compile time is this case's alone
        return torch.compile(base, dynamic=False, mode=mode)

    return build


register_backend("compile")(_compiled(None))
register_backend("compile-max-autotune")(_compiled("max-autotune"))

DEFAULT_BACKENDS = ("eager", "compile", "triton")


REPEAT_MARK = "#"  # "eager#2": the same backend timed again as its own row (checks the timing's spread)


def base_backend(name: str) -> str:
    """The registered backend behind a name: strips a repeat mark ("#2") and the "+graph" suffix."""
    name = name.split(REPEAT_MARK, 1)[0]
    return name[: -len(GRAPH_SUFFIX)] if name.endswith(GRAPH_SUFFIX) else name


def is_graphed(name: str) -> bool:
    return name.split(REPEAT_MARK, 1)[0].endswith(GRAPH_SUFFIX)


def build_backend(name: str, case: Case) -> Fn | None:
    base = base_backend(name)
    if base not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; registered: {', '.join(sorted(BACKENDS))} (+graph variants)")
    return BACKENDS[base](case)


class CudaGraphed:
    """Capture ``fn(*inputs)`` once in a CUDA graph; calling it replays the graph (same inputs)."""

    def __init__(self, fn: Fn, inputs: tuple, warmup: int = 3):
        self.graph, self.out = capture_graph(lambda: fn(*inputs), warmup=warmup)

    def __call__(self, *inputs):
        self.graph.replay()
        return self.out


# ----------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------
HOST_CORES = ("all", "one", "N")  # N: a core number


def pinned_core(mode: str) -> int | None:
    """The core a host_cores setting pins to (None for "all"), or a clear error where this machine cannot apply
    it: "one" is the highest-numbered core the process may use, a number is that core."""
    if mode == "all":
        return None
    if mode != "one" and not str(mode).isdigit():
        raise ValueError(f"host_cores: expected all, one or a core number, got {mode!r}")
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        raise ValueError(f"host_cores {mode!r} needs Linux (os.sched_setaffinity on every thread of the process)")
    allowed = os.sched_getaffinity(0)
    if mode == "one":
        return max(allowed)
    if int(mode) not in allowed:
        raise ValueError(f"host_cores: core {mode} is not one this process may use ({sorted(allowed)})")
    return int(mode)


@contextlib.contextmanager
def host_cores(mode: str = "all"):
    """Run the block with every thread of this process on the cores ``mode`` names, then restore each
    thread's own set: "all" leaves them as they are; "one" or a core number pins every thread (autograd's
    device threads included, and any thread started inside the block) to one core (pinned_core), as
    ``taskset -c N`` would. An eager fwd+bwd call's host path hands the backward to autograd's device thread
    and back; on a many-core host the scheduler may run the two threads on different cores, which a user can
    avoid this way. Linux only."""
    core = pinned_core(mode)
    if core is None:
        yield None
        return
    tasks = "/proc/self/task"
    process_cores = os.sched_getaffinity(0)
    saved = {}
    for tid in map(int, os.listdir(tasks)):
        try:
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {core})
        except ProcessLookupError:  # the thread ended meanwhile
            saved.pop(tid, None)
    try:
        yield core
    finally:
        for tid in map(int, os.listdir(tasks)):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, saved.get(tid, process_cores))


def time_call(fn: Callable[[], Any], rep: int, *, flush: bool = True, device: torch.device | None = None) -> list[float]:
    """``rep`` per-call times in ms: CUDA events (L2 flushed before each call when ``flush``), or
    perf_counter on the CPU (interpreter: not a performance figure)."""
    device = device or default_device()
    if device.type == "cuda":
        return cuda_time_ms(fn, warmup=0, rep=rep, flush_l2=flush)
    out = []
    for _ in range(rep):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def time_rounds(calls: dict[str, Callable[[], Any]], reps: dict[str, int], rounds: int,
                device: torch.device, lead: int = 0) -> dict[str, list[list[float]]]:
    """{backend: per round, its calls' times in ms}: the backends take turns, ``reps[b]`` timed calls each a
    round (time_call's). On a GPU each turn starts on an idle GPU (time_call synchronises), so no backend's
    queued work hides the host time of the next one's calls. Each turn's first ``lead`` calls are not kept:
    during them the host, where it is the faster, gets ahead of the GPU as in a user's loop of calls, so the
    kept calls pay less of the turn's idle start (what remains: see LEAD_CALLS)."""
    out: dict[str, list[list[float]]] = {b: [] for b in calls}
    for _ in range(rounds):
        for b, call in calls.items():
            out[b].append(time_call(call, lead + reps[b], device=device)[lead:])
    return out


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]) of a non-empty sequence."""
    ys = sorted(xs)
    if not ys:
        raise ValueError("quantile of an empty sequence")
    pos = q * (len(ys) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def median(xs: Sequence[float]) -> float:
    return quantile(xs, 0.5)


def bootstrap_ratio_ci(num: Sequence[float], den: Sequence[float], n: int = 2000, alpha: float = 0.05,
                       seed: int = 0) -> tuple[float, float, float]:
    """Ratio median(num)/median(den) with a percentile-bootstrap CI; num/den are per-round medians from
    interleaved repeats (round i of each measured back to back)."""
    if len(num) != len(den) or not num:
        raise ValueError("num and den must be non-empty and of equal length")
    est = median(num) / median(den)
    rng = numpy.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(n, len(num)))  # n resamples of the rounds, the same for both sides
    boots = numpy.median(numpy.asarray(num)[idx], axis=1) / numpy.median(numpy.asarray(den)[idx], axis=1)
    lo, hi = numpy.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return est, float(lo), float(hi)


# ----------------------------------------------------------------------------------------------------
# Ceilings (measured per device by bench.roofline --measure)
# ----------------------------------------------------------------------------------------------------
def load_ceilings() -> dict | None:
    import json

    p = results.results_dir() / "ceilings.json"
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except ValueError:
        return None


def roofline_floor_ms(case: Case, ceilings: dict | None) -> float | None:
    """The fastest possible time for the case's FLOPs and bytes on the measured ceilings."""
    if not ceilings or (not case.flops and not case.bytes):
        return None
    key = "tf32" if case.tf32 else str(case.dtype).replace("torch.", "")
    peaks = ceilings.get("gemm_tflops", {})
    peak = peaks.get(key)
    if key == "float32" and peaks.get("fp32_on_fp64"):  # fp32 products are exact in fp64: the fp64 units count too
        peak = max(peak or 0.0, peaks["fp32_on_fp64"])
    bw = ceilings.get("copy_gbps")
    t_f = case.flops / (peak * 1e12) * 1e3 if (peak and case.flops) else 0.0
    t_b = case.bytes / (bw * 1e9) * 1e3 if (bw and case.bytes) else 0.0
    return max(t_f, t_b) or None


# ----------------------------------------------------------------------------------------------------
# Running cases
# ----------------------------------------------------------------------------------------------------
CPU_REPS = 2  # timed calls per backend on the CPU (interpreter timings are no performance figure)
# GPU: each backend's timed calls (~target_ms of them, within these bounds) are spread over rounds of
# ROUND_CALLS calls, the backends taking turns (time_rounds), so a host whose speed drifts (other tenants,
# clocks) moves every backend alike. Measured on H100 boxes, three trials each, host-bound eager calls
# (forward + backward of the Char-CNN's fc1 and of Linear+ReLU 4096 x 8704 -> 1024): in 5 rounds of 200 calls
# the ratio to eager ranged 0.75-1.09x, CIs as wide as [0.45, 1.14]; in rounds of 4, 1.010-1.040x and
# 0.979-0.987x, every CI within [0.95, 1.07]. Without the synchronisation before each turn, the backend
# after a graph replay's turn had its host time hidden (fc1: torch 0.25 ms, ours 0.66 ms, 0.53x). Each turn
# starts with LEAD_CALLS calls that are not kept, so the host gets ahead first: with none, torch.compile's
# LN -> ReLU -> MaxPool1d (133 us of host work a call for 127 us of GPU work) took 158 us in a turn's calls 2-4
# against 127 us in a loop of 200; with 2 the op suite reads 126 us. Calls whose host work is as long as their
# GPU work (Linear+ReLU 4096 x 8704 -> 1024 fwd+bwd) stay ~15 % slower than in a loop, for every backend
LEAD_CALLS = 2
MIN_CALLS, MAX_CALLS, ROUND_CALLS, MAX_ROUNDS = 50, 1000, 4, 250


@dataclasses.dataclass
class RunConfig:
    backends: Sequence[str] = DEFAULT_BACKENDS
    rounds: int | None = None   # interleaved rounds (speedup CI); None: rounds of ROUND_CALLS calls
    rep: int | None = None      # timed calls per round (None: adaptive, ~target_ms per backend in all)
    target_ms: float = 500.0
    warm_limit_bytes: float = 16e6  # also time warm (no flush) below this working set
    seed: int = 0
    check: bool = True
    host_cores: str = "all"     # "one" / a core number: the timing runs with every thread on one core; rows say so


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _error(case: Case, out, ref) -> float:
    if case.error is not None:
        return float(case.error(out, ref))
    outs, refs = _as_tuple(out), _as_tuple(ref)
    if len(outs) != len(refs):
        raise ValueError(f"{case.label}: {len(outs)} outputs but {len(refs)} references")
    return max(rel_err(o, r) for o, r in zip(outs, refs))


def _classify(e: BaseException) -> str:
    name = type(e).__name__
    msg = str(e)
    if isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in msg.lower():
        return "oom"
    if isinstance(e, NotImplementedError) or "unsupported" in msg.lower() or "not supported" in msg.lower():
        return "unsupported"
    mod = type(e).__module__
    if "dynamo" in mod or "inductor" in mod or "Compilation" in name or "triton" in mod:
        return "compile-error"
    return "error"


def _case_row(case: Case, backend: str, metric: str, value, unit: str, **kw) -> dict:
    return results.make_row(case.suite, case.name, dict(case.params), case.dtype, backend, metric, value, unit, **kw)


def run_case(case: Case, cfg: RunConfig) -> list[dict]:
    """Check and time one case on every requested backend; returns long-format rows (the check's rows,
    then the timing's)."""
    device = default_device()
    if cfg.host_cores != "all":  # its own rows: the setting is part of their key
        case = dataclasses.replace(case, params={**case.params, "host_cores": cfg.host_cores})
    try:
        inputs = case.inputs(cfg.seed, device)
    except Exception as e:  # e.g. OOM building inputs
        return [_case_row(case, b, "time_ms", None, "ms", status=_classify(e),
                          note=f"inputs: {type(e).__name__}: {e}"[:300]) for b in cfg.backends]
    ready, errors, rows = check_case(case, cfg, inputs, device)
    if ready:
        with host_cores(cfg.host_cores):
            rows += time_case(case, cfg, inputs, ready, errors, device)
    return rows


def check_case(case: Case, cfg: RunConfig, inputs: tuple,
               device: torch.device) -> tuple[dict[str, Fn], dict[str, float | None], list[dict]]:
    """Build every requested backend, make its first call (compile / autotune / capture time) and check
    its output against the float64 reference. Returns the backends ready to time, their errors, and the
    rows: first-call times, and a time_ms row with its status for each backend that cannot be timed."""
    is_cuda = device.type == "cuda"
    rows: list[dict] = []

    def row(backend, metric, value, unit, **kw):
        rows.append(_case_row(case, backend, metric, value, unit, **kw))

    ref = None
    if cfg.check and case.reference is not None:
        with torch.no_grad():
            ref = case.reference(*inputs)  # float64, on the inputs' device (fast fp64 on the GPU)
    ready: dict[str, Fn] = {}
    errors: dict[str, float | None] = {}
    for b in cfg.backends:
        if is_graphed(b) and (not is_cuda or not case.graph_ok):
            row(b, "time_ms", None, "ms", status="unsupported",
                note="CUDA graphs need a GPU" if not is_cuda else "case not graph-capturable")
            continue
        try:
            fn = build_backend(b, case)
            if fn is None:
                row(b, "time_ms", None, "ms", status="unsupported", note="no implementation for this case")
                continue
            if is_cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            if is_graphed(b):
                fn = CudaGraphed(fn, inputs)
            out = fn(*inputs)
            if is_cuda:
                torch.cuda.synchronize()
            first_s = time.perf_counter() - t0
            err = _error(case, out, ref) if ref is not None else None
            errors[b] = err
            del out
        except Exception as e:  # the run goes on: a failing backend is a row with its status
            row(b, "time_ms", None, "ms", status=_classify(e), note=f"{type(e).__name__}: {e}"[:300])
            if is_cuda:
                torch.cuda.empty_cache()
            continue
        if "compile" in base_backend(b):
            row(b, "compile_s", first_s, "s", note="torch.compile time (first call)")
        else:
            row(b, "first_call_s", first_s, "s", note="first call: JIT compile, autotuning, graph capture")
        if err is not None and not (err <= case.tolerance()):
            row(b, "time_ms", None, "ms", error_vs_fp64=err, status="wrong",
                note=f"relative error {err:.3e} > tolerance {case.tolerance():.1e}: not timed")
            continue
        ready[b] = fn
    return ready, errors, rows


def round_plan(total: dict[str, int], cfg: RunConfig, is_cuda: bool, backends: Sequence[str]) -> tuple:
    """(rounds, {backend: timed calls per round}) from each backend's ``total`` timed calls: cfg.rounds
    rounds where given, else rounds of ~ROUND_CALLS calls (5 to MAX_ROUNDS of them); cfg.rep calls per round
    where given (then 5 rounds unless cfg.rounds). On the CPU, one round."""
    if not is_cuda:
        rounds = 1
    elif cfg.rounds:
        rounds = cfg.rounds
    else:
        rounds = 5 if cfg.rep else min(MAX_ROUNDS, max(5, min(total.values()) // ROUND_CALLS))
    return rounds, {b: cfg.rep or max(1, round(total[b] / rounds)) for b in backends}


def time_case(case: Case, cfg: RunConfig, inputs: tuple, ready: dict[str, Fn], errors: dict[str, float | None],
              device: torch.device) -> list[dict]:
    """Time the checked backends on ``inputs``: interleaved rounds, cold (L2 flushed), and warm for small
    working sets; returns the rows: time, throughput, share of the roofline, speedups with a bootstrap CI
    over the rounds, peak memory."""
    is_cuda = device.type == "cuda"
    ceilings = load_ceilings() if is_cuda else None
    rows: list[dict] = []

    def row(backend, metric, value, unit, **kw):
        rows.append(_case_row(case, backend, metric, value, unit, **kw))

    calls = {b: (lambda fn=fn: fn(*inputs)) for b, fn in ready.items()}
    total = {}  # timed calls per backend, over all rounds
    for b, call in calls.items():
        if not is_cuda:  # CPU (interpreter): no performance figure, so no estimate; a few calls
            total[b] = CPU_REPS
        elif not cfg.rep:
            est = median(time_call(call, 3, device=device))
            total[b] = int(min(MAX_CALLS, max(MIN_CALLS, cfg.target_ms / max(est, 1e-3))))
    rounds, reps = round_plan(total, cfg, is_cuda, list(calls))
    lead = LEAD_CALLS if is_cuda else 0  # the CPU (interpreter) queues nothing for the host to get ahead of
    per_round = time_rounds(calls, reps, rounds, device, lead=lead)
    samples = {b: [t for ts in per_round[b] for t in ts] for b in calls}
    round_medians = {b: [median(ts) for ts in per_round[b]] for b in calls}
    warm = {}
    if is_cuda and case.bytes and case.bytes < cfg.warm_limit_bytes:
        for b, call in calls.items():
            warm[b] = time_call(call, max(reps[b], total.get(b, 0) // 5), flush=False, device=device)

    floor = roofline_floor_ms(case, ceilings)
    for b in calls:
        ts = samples[b]
        med = median(ts)
        err = errors.get(b)
        kw = dict(error_vs_fp64=err)
        row(b, "time_ms", med, "ms", p20=quantile(ts, 0.2), p80=quantile(ts, 0.8),
            note="cold L2" + (f", {len(ts)} calls in {rounds} interleaved rounds, each after {lead} untimed"
                              if is_cuda else ""), **kw)
        if b in warm:
            w = warm[b]
            row(b, "time_warm_ms", median(w), "ms", p20=quantile(w, 0.2), p80=quantile(w, 0.8), **kw)
        if case.flops:
            row(b, "tflops", case.flops / (med * 1e-3) / 1e12, "TFLOP/s", **kw)
        if case.bytes:
            row(b, "gbps", case.bytes / (med * 1e-3) / 1e9, "GB/s", **kw)
        if floor is not None:
            row(b, "pct_roofline", 100.0 * floor / med, "%", **kw)
        for ref_b in ("eager", "compile"):
            if ref_b in calls and ref_b != b:
                est, lo, hi = bootstrap_ratio_ci(round_medians[ref_b], round_medians[b])
                row(b, f"speedup_vs_{ref_b}", est, "x", ci_low=lo, ci_high=hi,
                    note=f"95% bootstrap CI over {rounds} interleaved rounds", **kw)
    if is_cuda:
        for b, call in calls.items():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            call()
            torch.cuda.synchronize()
            row(b, "peak_mem_mb", (torch.cuda.max_memory_allocated() - base) / 2**20, "MB")
    return rows


def run_cases(cases: Sequence[Case], cfg: RunConfig, progress: bool = True,
              on_rows: Callable[[list[dict]], Any] | None = None) -> list[dict]:
    """Run every case; ``on_rows(all_rows_so_far)`` is called after each case (the CLI saves there, so
    an interrupted run keeps every finished case)."""
    rows: list[dict] = []
    for i, case in enumerate(cases):
        if progress:
            print(f"[{i + 1}/{len(cases)}] {case.suite}/{case.label} {str(case.dtype).replace('torch.', '')}",
                  flush=True)
        try:
            rows.extend(run_case(case, cfg))
        except Exception as e:  # never lose the rows of the other cases
            traceback.print_exc()
            rows.append(results.make_row(case.suite, case.name, case.params, case.dtype, "-", "time_ms", None, "ms",
                                         status=_classify(e), note=f"{type(e).__name__}: {e}"[:300]))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if on_rows is not None:
            on_rows(rows)
    return rows
