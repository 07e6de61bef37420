"""CUDA-graph capture: :func:`capture_graph`, which every capture of the playground's kernels goes through, and
:func:`own_cublas_workspaces`, which also wraps the captures torch makes for us (``make_graphed_callables``, a
whole training step under ``torch.cuda.graph``)."""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch


def drop_cublas_workspaces() -> None:
    """Free cuBLAS's workspaces, which it keeps one per stream in the caching allocator. Called around a CUDA-graph
    capture: a capture that finds one made outside its graph's memory pool (by a warm-up on the capture stream)
    writes to it on every replay, also after someone frees it (torch.compile's CUDA graphs drop them all: the
    replays then write to freed memory, an illegal-address fault once the cache returns it). Dropped first, the
    capture allocates its own in the graph's pool, as torch.compile's graphs do; dropped after, no later eager
    call runs in that pool's memory."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None and torch.cuda.is_initialized():
        clear()


@contextlib.contextmanager
def own_cublas_workspaces() -> Iterator[None]:
    """Around a CUDA-graph capture: the captured GEMMs get cuBLAS workspaces of the graph's own (see
    :func:`drop_cublas_workspaces`)."""
    drop_cublas_workspaces()
    try:
        yield
    finally:
        drop_cublas_workspaces()


def capture_graph(fn: Callable[[], Any], *, warmup: int = 3, pool: Any = None,
                  stream: torch.cuda.Stream | None = None) -> tuple[torch.cuda.CUDAGraph, Any]:
    """Capture ``fn()`` in a CUDA graph; returns ``(graph, output of the captured call)``.

    ``fn`` runs ``warmup`` times on a side stream first (JIT compilation, autotuning and the caching
    allocator's first allocations must not happen during capture), then once under capture. Replaying
    the graph reruns the captured kernels on the same memory: refresh inputs in place, read the returned
    output after ``graph.replay()``. ``pool``: a memory pool to share with other graphs
    (``torch.cuda.graph_pool_handle()`` or another graph's ``pool()``). ``stream``: the stream to capture on
    (default: torch's capture stream), for a caller that warmed ``fn`` up there itself (``warmup=0``). The
    capture gets its own cuBLAS workspaces (:func:`own_cublas_workspaces`)."""
    if warmup:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with own_cublas_workspaces(), torch.cuda.graph(graph, pool=pool, stream=stream):
        output = fn()
    return graph, output
