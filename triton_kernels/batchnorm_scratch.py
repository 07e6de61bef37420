"""The batch norm's per-stream buffers (triton_kernels/batchnorm.py): the reductions' arrival counters, left at
zero by every launch, and the eager fast path's scratch for partials and dx coefficients, reused per device,
stream and host thread; fresh ones while torch.compile traces or a CUDA graph is captured."""
from __future__ import annotations

import threading

import torch
import triton

from .launcher import _capturing
from .runtime import INTERPRET, is_tracing


# arrival counters of the reductions per (device, stream): every launch leaves its counters at zero. A graph
# captured on a stream launches with that stream's buffer, so a buffer outgrown is kept alive, not freed.
_COUNTERS: dict[tuple, torch.Tensor] = {}
_OUTGROWN: list[torch.Tensor] = []


def _counters(x: torch.Tensor, n: int) -> torch.Tensor:
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
    """The eager fast path's buffers for one launch (not tracing), found with one stream key and one capture
    check: (at least ``part`` fp32 values for a reduction's partials, the stream's arrival counters (at least
    ``counters`` int32 zeros, as ``_counters``), at least ``coef`` fp32 values for the dx coefficients or None
    when 0). The scratch is kept per device, stream and host thread and reused, because kernels of one stream
    run in order (the partials are dead when their reduction ends, the coefficients when the dx kernel that
    the same thread launches next ends); fresh scratch while a CUDA graph is captured (the graph keeps it)."""
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
