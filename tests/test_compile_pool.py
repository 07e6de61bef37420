"""triton_kernels/compile_pool.py: the worker processes that compile a tuning's candidates in parallel."""
import functools
import os
import random

import pytest
import torch

from triton_kernels import compile_pool
from triton_kernels.runtime import INTERPRET

import triton  # noqa: E402  (after triton_kernels: the interpreter switch)
import triton.language as tl  # noqa: E402


@triton.jit
def _salted_scale_kernel(x_ptr, y_ptr, SALT: tl.constexpr, BLOCK: tl.constexpr):
    # y = 2 x; SALT only makes a specialization no cache holds yet
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)


def test_worker_count_reads_the_environment(monkeypatch):
    monkeypatch.setenv(compile_pool.WORKERS_ENV, "3")
    assert compile_pool.worker_count() == 3
    monkeypatch.setenv(compile_pool.WORKERS_ENV, "0")
    assert compile_pool.worker_count() == 0
    monkeypatch.delenv(compile_pool.WORKERS_ENV)
    assert compile_pool.worker_count() == min(8, compile_pool.cores())
    monkeypatch.setenv(compile_pool.WORKERS_ENV, "many")
    with pytest.raises(ValueError, match=compile_pool.WORKERS_ENV):
        compile_pool.worker_count()


def test_workers_answer_jobs_and_a_dead_worker_is_replaced():
    """Two workers answer four empty jobs; a job that kills its worker comes back as a worker error, and the
    pool still answers afterwards."""
    pool = compile_pool.WorkerPool(2)
    try:
        out = pool.map([(None, None, None)] * 4)
        assert [r["error"] for r in out] == [None] * 4
        assert all(r["pid"] not in (None, os.getpid()) for r in out)
        dead = pool.run(("too", "many", "arguments", "for compile_spec"))
        assert dead["kind"] == "worker" and dead["pid"] is None
        again = pool.map([(None, None, None)] * 2)
        assert [r["error"] for r in again] == [None] * 2
    finally:
        pool.close()
    assert pool.procs == []


def test_compile_errors_are_results():
    out = compile_pool.compile_spec("triton_kernels.no_such_module", "kernel", "{}")
    assert out["kind"] == "compile-error" and "ModuleNotFoundError" in out["error"]


@pytest.mark.skipif(not INTERPRET, reason="the interpreter compiles nothing")
def test_precompile_in_the_interpreter_sends_nothing():
    calls = []
    assert compile_pool.precompile([lambda: calls.append(1)] * 3) == []


@pytest.mark.gpu
def test_gpu_precompile_compiles_every_candidate_in_the_workers():
    """Four configs of a kernel salted with a fresh constexpr (so nothing is in Triton's caches) are compiled
    in worker processes; each then launches (from the disk cache) and computes the right result."""
    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    salt = random.randrange(1 << 30)

    def launch(block, warps):
        _salted_scale_kernel[(x.numel() // block,)](x, y, SALT=salt, BLOCK=block, num_warps=warps)

    configs = [(256, 4), (512, 4), (1024, 4), (1024, 8)]
    out = compile_pool.precompile([functools.partial(launch, *c) for c in configs])
    assert len(out) == len(configs), out
    assert all(r["error"] is None and r["pid"] not in (None, os.getpid()) for r in out), out
    for c in configs:
        y.fill_(float("nan"))
        launch(*c)
        torch.testing.assert_close(y, 2.0 * x)


@pytest.mark.gpu
def test_gpu_capture_skips_this_threads_launches_only():
    """While a thread captures, its own launch of a new specialization is recorded and skipped, and another
    thread's launch (autograd's backward thread, say) compiles and runs as usual."""
    import threading

    x = torch.randn(1024, device="cuda")
    mine, theirs = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    salt = random.randrange(1 << 30)

    def launch(y, block):
        _salted_scale_kernel[(x.numel() // block,)](x, y, SALT=salt, BLOCK=block)

    def both():
        launch(mine, 256)
        other = threading.Thread(target=launch, args=(theirs, 512))
        other.start()
        other.join()

    specs = compile_pool.capture(both)
    torch.cuda.synchronize()
    assert len(specs) == 1 and specs[0][1] == "_salted_scale_kernel"
    assert bool(mine.isnan().all())
    torch.testing.assert_close(theirs, 2.0 * x)
