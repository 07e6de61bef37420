"""The eager launch path: a steady-state call asks no tuner and builds no tuning key (launch plans are
kept per key), and bench.overhead writes its rows. Timings here are the interpreter's: not figures."""
import torch

from bench import overhead
from bench.results import read_results
from triton_kernels import runtime
from triton_kernels import softmax as softmax_ops

from .conftest import DEVICE


def _picks():
    return sum(t.picks for t in runtime.ALL_TUNERS.values())


def test_steady_state_softmax_asks_no_tuner():
    x = torch.randn(6, 10, device=DEVICE, requires_grad=True)
    y = softmax_ops.softmax(x)  # first call: the plan is found (tuner or cache)
    y.backward(torch.ones_like(y))
    before = _picks()
    for _ in range(5):
        y = softmax_ops.log_softmax(x) if _ % 2 else softmax_ops.softmax(x)
        y.backward(torch.ones_like(y))
    # log_softmax's plans were made in the loop's first odd call: one forward and one backward pick
    assert _picks() - before == 2
    before = _picks()
    for _ in range(5):
        softmax_ops.log_softmax(x).backward(torch.ones_like(x))
        softmax_ops.softmax(x).backward(torch.ones_like(x))
    assert _picks() == before


def test_bench_overhead_writes_rows(tmp_path):
    assert overhead.main(["--op", "softmax_128", "--calls", "2", "--out", str(tmp_path)]) == 0
    rows = read_results(tmp_path)
    assert set(rows["suite"]) == {"overhead"}
    assert {"torch", "triton"} <= set(rows["backend"]) and set(rows["metric"]) == {"call_us"}
    assert rows["note"].str.contains("not a performance figure").all()


def test_bench_overhead_reports_rows_after_each_module():
    """A run cut short keeps the modules it finished: measure hands the rows so far to on_rows (where the
    CLI writes them) after each module."""
    modules = [m for m in overhead.build_modules(torch.device(DEVICE)) if m.case in ("softmax_128x10", "log_softmax_128x10")]
    seen = []
    rows = overhead.measure(modules, 2, 1, on_rows=lambda rows_so_far: seen.append(len(rows_so_far)))
    assert len(seen) == 2 and 0 < seen[0] < seen[1] == len(rows)
