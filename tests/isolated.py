"""Run GPU test cases in a worker process, so that a device fault fails one test, not the whole run.

A CUDA fault ("misaligned address", "illegal memory access") poisons the process's CUDA context: every
later CUDA call in that process fails too. ``run_isolated("tests.test_gemm:view_case", ...)`` sends the
call to a long-lived worker process (spawned once, so the per-case cost is a pipe round trip, not a fresh
``import torch``); the worker imports the function, runs it and sends back ``None`` or the failure's
traceback. If the failure looks like a device fault, or the worker dies, the worker is replaced before
the next case. The calling test then fails with the worker's traceback.

Arguments and results cross a pipe, so they must pickle (strings, numbers, dtypes, small dataclasses).
"""
from __future__ import annotations

import importlib
import logging
import multiprocessing
import traceback

import pytest

_FAULT_MARKERS = ("CUDA error", "device-side assert", "illegal memory access", "misaligned address",
                  "unspecified launch failure", "CUBLAS_STATUS", "cudaError")
_worker = None  # (process, connection)


class MutationAnalysisWatch(logging.Handler):
    """``with MutationAnalysisWatch() as watch``: records each time torch.compile gives up its analysis of
    which arguments a traced Triton kernel writes (it then assumes every tensor argument is written, which
    computes wrong results when a kernel gets one tensor twice, see launcher.TRACED_OFF); ``watch.check()``
    raises an AssertionError naming them."""

    # where torch logs it: "torch._dynamo" (its triton_kernel_wrap module's logger), the module's own name too
    LOGGERS = ("torch._dynamo", "torch._higher_order_ops.triton_kernel_wrap")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "assuming every input is mutated" in record.getMessage():
            self.failures.append(repr(record.exc_info[1])[:300] if record.exc_info else record.getMessage())

    def __enter__(self) -> "MutationAnalysisWatch":
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)

    def check(self) -> None:
        if self.failures:
            raise AssertionError(f"torch.compile could not analyse {len(self.failures)} traced kernel launch(es) "
                                 f"(assumed every argument written): {self.failures[:3]}")


def _serve(conn) -> None:
    import os

    os.environ.setdefault("TRITON_PLAYGROUND_AUTOTUNE", "0")
    import torch

    import triton_kernels  # noqa: F401  (the interpreter switch, as in conftest)

    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        target, args, kwargs, seed = msg
        torch.manual_seed(seed)
        module_name, fn_name = target.split(":")
        try:
            fn = getattr(importlib.import_module(module_name), fn_name)
            with MutationAnalysisWatch() as watch:
                fn(*args, **kwargs)
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # a fault raised asynchronously must land on this case
            watch.check()
            conn.send(None)
        except BaseException:  # noqa: BLE001 - everything goes back to the test
            text = traceback.format_exc()
            conn.send(text)
            if any(m in text for m in _FAULT_MARKERS):
                return  # the context is poisoned: let the parent start a fresh worker


def _get_worker():
    global _worker
    if _worker is not None and _worker[0].is_alive():
        return _worker
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(child,), daemon=True)
    proc.start()
    child.close()
    _worker = (proc, parent)
    return _worker


def run_isolated(target: str, *args, seed: int = 0, timeout: float = 600.0, **kwargs) -> None:
    """Call ``module:function(*args, **kwargs)`` in the worker; fail the test with its traceback."""
    global _worker
    proc, conn = _get_worker()
    try:
        conn.send((target, args, kwargs, seed))
        if not conn.poll(timeout):
            proc.kill()
            _worker = None
            pytest.fail(f"{target}{args}: no answer from the worker in {timeout:.0f} s")
        reply = conn.recv()
    except (EOFError, BrokenPipeError, ConnectionResetError) as e:
        proc.join(timeout=5)
        _worker = None
        pytest.fail(f"{target}{args}: the worker process died ({type(e).__name__}, exit code {proc.exitcode})")
    if reply is not None:
        if not proc.is_alive() or any(m in reply for m in _FAULT_MARKERS):
            proc.join(timeout=5)
            _worker = None
        pytest.fail(f"{target}{args} failed in the worker:\n{reply}", pytrace=False)
