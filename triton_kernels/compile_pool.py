"""Compiling autotuning candidates in parallel, before they are timed.

Triton compiles a kernel specialization at its first launch, in the launching process: ~0.3-1 s of CPU
each. Tuning a key launches every candidate config, so with a cold tuning cache most of the tuning time is
compiles run one after another. Before it times a key's candidates the tuner (runtime.Autotuner) calls
:func:`precompile`, which

1. runs each candidate's launch with Triton's compile step replaced by a record of what it would compile
   (:func:`capture`: ``triton.knobs.runtime.jit_cache_hook`` gets the serialized specialization and
   skips the compile and the launch),
2. hands the distinct records to worker processes that compile them into Triton's on-disk cache
   (:func:`compile_spec`: ``JITFunction.preload``, the same compile and the same cache key), and waits;

the timing loop's first launch of each config then loads the binary from that cache.

The workers are ``python -m triton_kernels.compile_pool`` processes reading one JSON job per line on
stdin (never a re-import of the caller's ``__main__``, which multiprocessing's spawn would do), started at
the first tuning that has two or more new specializations and kept until the process exits.
``$TRITON_PLAYGROUND_COMPILE_WORKERS`` sets their number (default: min(8, the cores this process may use);
0 compiles in-process, one config after another). If a worker cannot start or dies, the remaining compiles
are left to the first launches, as without the pool.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import importlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, Callable, Iterable

WORKERS_ENV = "TRITON_PLAYGROUND_COMPILE_WORKERS"
JOB_TIMEOUT_S = 600.0  # one specialization's compile; a worker that takes longer is killed


def cores() -> int:
    """The CPU cores this process may run on (a container's share, not the host's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def worker_count() -> int:
    """$TRITON_PLAYGROUND_COMPILE_WORKERS, else min(8, cores())."""
    value = os.environ.get(WORKERS_ENV)
    if value is None or value.strip() == "":
        return min(8, cores())
    try:
        return max(0, int(value))
    except ValueError:
        raise ValueError(f"${WORKERS_ENV} must be a whole number of processes, got {value!r}") from None


def capture(fn: Callable[[], Any]) -> list[tuple[str, str, str]]:
    """Run ``fn`` with Triton's compile step replaced by a record of what it would compile: (module, name,
    serialized specialization) per kernel not yet in memory. Nothing is compiled or launched; kernels
    already compiled in this process launch as usual, and so do other threads' launches (the hook is
    process-wide: autograd's backward thread, say, compiles and launches while this one captures)."""
    import triton

    found: list[tuple[str, str, str]] = []
    thread = threading.get_ident()

    def hook(*args, **kwargs):
        if threading.get_ident() != thread:
            return False
        info, comp = kwargs.get("fn"), kwargs.get("compile") or {}
        data = comp.get("specialization_data")
        if info is None or data is None:
            return False  # an unknown Triton: compile as usual
        module = info.module if isinstance(info.module, str) else info.module.__name__
        found.append((module, info.name, data))
        return True  # skip the compile (and the launch)

    runtime = triton.knobs.runtime
    old = runtime.jit_cache_hook
    runtime.jit_cache_hook = hook
    try:
        fn()
    finally:
        runtime.jit_cache_hook = old
    return found


def compile_spec(module: str | None, name: str | None, data: str | None) -> dict:
    """Compile one captured specialization (``module``/``name`` of the @triton.jit function, Triton's
    serialized ``data``); nothing when ``data`` is None. Returns seconds, the error (or None) and this
    process's pid."""
    t0 = time.perf_counter()
    error = kind = None
    if data is not None:
        try:
            import triton_kernels  # noqa: F401  (the interpreter switch before triton, as everywhere)

            kernel = getattr(importlib.import_module(module), name)
            kernel.preload(data)
        except Exception as e:  # noqa: BLE001  (a config that does not compile is a result)
            kind = "out-of-resources" if "OutOfResources" in type(e).__name__ else "compile-error"
            error = f"{type(e).__name__}: {' '.join(str(e).split())}"[:300]
    return {"seconds": time.perf_counter() - t0, "error": error, "kind": kind, "pid": os.getpid()}


class WorkerPool:
    """``size`` compile processes, each answering one JSON job line with one JSON result line."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.idle: queue.Queue = queue.Queue()
        self.procs: list[subprocess.Popen] = []
        self.lock = threading.Lock()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.pop("TRITON_INTERPRET", None)
        self.env = env
        for _ in range(size):
            self.idle.put(self._start())

    def _start(self) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, bufsize=1, env=self.env)
        with self.lock:
            self.procs.append(proc)
        return proc

    def run(self, job: tuple) -> dict:
        """Compile one (module, name, data) job in an idle worker; a worker that dies (or hangs past
        JOB_TIMEOUT_S) is replaced and the job's error says so."""
        proc = self.idle.get()
        try:
            proc.stdin.write(json.dumps(job) + "\n")
            proc.stdin.flush()
            timer = threading.Timer(JOB_TIMEOUT_S, proc.kill)
            timer.start()
            try:
                line = proc.stdout.readline()
            finally:
                timer.cancel()
            if not line:
                raise OSError("the compile worker exited")
            return json.loads(line)
        except (OSError, ValueError) as e:
            proc.kill()
            proc = self._start()
            return {"seconds": 0.0, "error": f"{type(e).__name__}: {e}", "kind": "worker", "pid": None}
        finally:
            self.idle.put(proc)

    def map(self, jobs: list[tuple]) -> list[dict]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.size) as threads:
            return list(threads.map(self.run, jobs))

    def close(self) -> None:
        with self.lock:
            procs, self.procs = self.procs, []
        for proc in procs:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()


_POOL: WorkerPool | None = None


def pool(size: int) -> WorkerPool:
    """The process's worker pool, started at the first call (``size`` workers) and closed at exit."""
    global _POOL
    if _POOL is None:
        _POOL = WorkerPool(size)
        atexit.register(_POOL.close)
    return _POOL


def precompile(launches: Iterable[Callable[[], Any]]) -> list[dict]:
    """Compile in the worker pool what the ``launches`` (each one kernel launch, or a few) would compile at
    their first call; returns one result per distinct specialization (empty when nothing was sent: fewer
    than two new ones, no workers configured, the interpreter). A launch that raises is skipped: its first
    real call raises again where the caller records it."""
    from .runtime import INTERPRET

    size = worker_count()
    launches = list(launches)
    if INTERPRET or size == 0 or len(launches) < 2:  # one launch: nothing to compile beside it
        return []
    jobs: dict[str, tuple] = {}
    for launch in launches:
        try:
            for module, name, data in capture(launch):
                jobs.setdefault(data, (module, name, data))
        except Exception:  # noqa: BLE001  (the timing loop launches it again and records why)
            continue
    if len(jobs) < 2:
        return []
    try:
        return pool(size).map(list(jobs.values()))
    except OSError as e:  # no process could be started: the first launches compile, as without a pool
        warnings.warn(f"compile workers unavailable ({e}); compiling in-process", RuntimeWarning, stacklevel=2)
        return []


def _serve() -> None:
    """A worker's loop: one JSON job (module, name, data) per stdin line, one JSON result per stdout line."""
    out, sys.stdout = sys.stdout, sys.stderr  # whatever a compile prints stays out of the replies
    for line in sys.stdin:
        if line.strip():
            out.write(json.dumps(compile_spec(*json.loads(line))) + "\n")
            out.flush()


if __name__ == "__main__":
    _serve()
