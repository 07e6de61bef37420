"""Scratch that a reduction kernel's programs share across a launch: per-stream arrival counters, reused partials
buffers, and the last-arrival test (batch norm's reductions, the GEMM family's bias-gradient column sums).

A reduction over many programs writes one partial per program, then each program adds 1 to its block's arrival
counter; the program that arrives last sums the block's partials in a fixed order (deterministic whichever
program it is) and resets the counter, so every launch leaves its counters at zero. The counters (int32) are
zeroed once per device and stream; torch.compile tracing and CUDA-graph capture get fresh zeros per call.
"""
from __future__ import annotations

import threading

import torch
import triton
import triton.language as tl

from .launcher import _capturing
from .runtime import INTERPRET, is_tracing


@triton.jit
def last_arrival(count_ptr, GROUPS):
    """Whether this program is the last of its block's GROUPS programs (the block: program_id(1)) to finish its
    partials. Every thread's partial stores are done (barrier) before one atomic add publishes them (release);
    the last arrival acquires them, and resets the counter to 0 for the next launch."""
    tl.debug_barrier()
    arrived = tl.atomic_add(count_ptr + tl.program_id(1), 1, sem="acq_rel")
    last = arrived == GROUPS - 1
    if last:
        tl.store(count_ptr + tl.program_id(1), 0)
    return last


# arrival counters of the reductions per (device, stream): every launch leaves its counters at zero. A graph
# captured on a stream launches with that stream's buffer, so a buffer outgrown is kept alive, not freed.
_COUNTERS: dict[tuple, torch.Tensor] = {}
_OUTGROWN: list[torch.Tensor] = []


def arrival_counters(x: torch.Tensor, n: int) -> torch.Tensor:
    """n int32 zeros for a reduction over x: the current stream's reused buffer, or fresh zeros while
    torch.compile traces, or while a CUDA graph is captured on a stream without a large enough buffer (the
    graph then zeroes them on every replay)."""
    if is_tracing(x):
        return torch.zeros(n, device=x.device, dtype=torch.int32)
    return _stream_counters(x, n, _stream_key(x), _capturing_on(x))


def _stream_counters(x: torch.Tensor, n: int, key: tuple, capturing: bool) -> torch.Tensor:
    """The (device, stream) ``key``'s counters, made (and kept unless ``capturing``) when missing or short."""
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        if capturing:
            return torch.zeros(n, device=x.device, dtype=torch.int32)
        if buf is not None:
            _OUTGROWN.append(buf)
        buf = _COUNTERS[key] = torch.zeros(max(n, 256), device=x.device, dtype=torch.int32)
    return buf


def _stream_key(x: torch.Tensor) -> tuple:
    """(device, current stream) of x's device; stream 0 off the GPU and in the interpreter."""
    return x.device, 0 if INTERPRET or x.device.type != "cuda" else _current_stream(x.device.index)


def _capturing_on(x: torch.Tensor) -> bool:
    return x.device.type == "cuda" and _capturing()


# the eager fast path's scratch per (device, stream, host thread): a reduction's partials, the dx coefficients
_SCRATCH: dict[tuple, tuple] = {}


def stream_buffers(x: torch.Tensor, part: int, counters: int, coef: int = 0) -> tuple:
    """The buffers of one launch, found with one stream key and one capture check: (at least ``part`` fp32 values
    for a reduction's partials, the stream's arrival counters (at least ``counters`` int32 zeros, as
    ``arrival_counters``), at least ``coef`` fp32 values for the dx coefficients or None when 0). The scratch is
    kept per device, stream and host thread and reused, because kernels of one stream run in order (the partials
    are dead when their reduction ends, the coefficients when the dx kernel that the same thread launches next
    ends); fresh scratch while a CUDA graph is captured (the graph keeps it) or while torch.compile traces."""
    if is_tracing(x):
        return (x.new_empty(part, dtype=torch.float32), torch.zeros(counters, device=x.device, dtype=torch.int32),
                x.new_empty(coef, dtype=torch.float32) if coef else None)
    stream, capturing = _stream_key(x), _capturing_on(x)
    counter_buf = _stream_counters(x, counters, stream, capturing)
    if capturing:
        return (x.new_empty(part, dtype=torch.float32), counter_buf,
                x.new_empty(coef, dtype=torch.float32) if coef else None)
    key = (*stream, threading.get_ident())
    bufs = _SCRATCH.get(key)
    if bufs is None or bufs[0].numel() < part or bufs[1].numel() < coef:
        if bufs is None and len(_SCRATCH) >= 256:  # threads come and go: drop the old buffers
            _SCRATCH.clear()
        have = (bufs[0].numel(), bufs[1].numel()) if bufs is not None else (0, 0)
        bufs = _SCRATCH[key] = (x.new_empty(max(part, have[0], 1024), dtype=torch.float32),
                                x.new_empty(max(coef, have[1], 1024), dtype=torch.float32))
    return bufs[0], counter_buf, bufs[1] if coef else None


def _current_stream(index: int) -> int:
    return triton.runtime.driver.active.get_current_stream(index)
