"""triton_kernels/stream_buffers.py: the per-stream arrival counters and reused partials of the reductions."""
import torch

from triton_kernels import stream_buffers

from .conftest import DEVICE


def test_fast_path_buffers_are_per_thread_and_grow():
    """The eager fast paths reuse their scratch per (device, stream, host thread): the same buffers for a repeat
    request, larger ones when a request outgrows them, other ones on another thread (two threads on one stream
    must not share the dx coefficients between one thread's reduction and its dx launch); the partials and the
    coefficients never share memory, and the arrival counters are the stream's, zeroed."""
    import threading

    x = torch.zeros(4, device=DEVICE)
    part, counters, coef = stream_buffers.stream_buffers(x, 64, 8, 64)
    assert part.numel() >= 64 and coef.numel() >= 64 and counters.numel() >= 8 and int(counters.count_nonzero()) == 0
    assert part.data_ptr() != coef.data_ptr()
    again = stream_buffers.stream_buffers(x, 32, 4, 32)
    assert again[0].data_ptr() == part.data_ptr() and again[2].data_ptr() == coef.data_ptr()
    assert again[1].data_ptr() == counters.data_ptr() and stream_buffers.stream_buffers(x, 8, 4)[2] is None
    grown = stream_buffers.stream_buffers(x, 4096, 4, 16)
    assert grown[0].numel() >= 4096 and grown[2].numel() >= 16
    other = []
    thread = threading.Thread(target=lambda: other.append(stream_buffers.stream_buffers(x, 64, 8, 64)))
    thread.start()
    thread.join()
    assert other[0][2].data_ptr() != grown[2].data_ptr() and other[0][1].data_ptr() == counters.data_ptr()


def test_arrival_counters_are_the_streams_and_fresh_while_tracing():
    """Outside tracing the counters are the current stream's buffer (zeroed once, reused, grown when short);
    while torch.compile traces they are fresh zeros of their own."""
    x = torch.zeros(4, device=DEVICE)
    first = stream_buffers.arrival_counters(x, 8)
    assert first.numel() >= 8 and int(first.count_nonzero()) == 0
    assert stream_buffers.arrival_counters(x, 4).data_ptr() == first.data_ptr()
    grown = stream_buffers.arrival_counters(x, first.numel() + 1)
    assert grown.numel() > first.numel() and int(grown.count_nonzero()) == 0
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        traced = stream_buffers.arrival_counters(fake, 8)
    assert traced.shape == (8,) and traced.dtype == torch.int32
