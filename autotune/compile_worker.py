"""What a sweep's compile processes run: Triton's own compile of one captured kernel specialization.

The sweep's main process captures, for every config, the specialization Triton would compile at the first
launch (``triton.knobs.runtime.jit_cache_hook``: the kernel, its signature, constexprs, attributes and
options, serialized by Triton) without compiling or launching anything. A worker turns one capture back
into a compile with ``JITFunction.preload`` -- the same compile, the same cache key -- so the kernel lands in
Triton's on-disk cache, and the main process's first launch of that config only loads it.

This module imports nothing heavy at the top: in the CPU interpreter nothing is compiled (a job carries
no capture) and a worker starts in a fraction of a second.
"""
from __future__ import annotations

import importlib
import os
import time


def compile_spec(module: str | None, name: str | None, data: str | None) -> dict:
    """Compile one captured specialization (``module``/``name`` of the @triton.jit function, Triton's
    serialized ``data``); nothing when ``data`` is None. Returns seconds, the error (or None) and this
    worker's pid."""
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
