"""The eager launch path: a steady-state call asks no tuner and builds no tuning key (launch plans are
kept per key), validates nothing (the op's prepared call is kept per call signature), and bench.overhead
writes its rows. Timings here are the interpreter's: not figures."""
import pytest
import torch

from bench import overhead
from bench.results import read_results
from models import layers
from triton_kernels import cross_entropy, layernorm, runtime
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


def test_bench_overhead_rounds_default_on_a_gpu():
    """bench.cli's --repeat defaults to None (the harness picks its rounds); bench.overhead times ROUNDS then."""
    assert overhead.timing_rounds(None, interpret=False) == overhead.ROUNDS
    assert overhead.timing_rounds(3, interpret=False) == 3
    assert overhead.timing_rounds(None, interpret=True) == 2


def test_bench_overhead_reports_rows_after_each_module():
    """A run cut short keeps the modules it finished: measure hands the rows so far to on_rows (where the
    CLI writes them) after each module."""
    modules = [m for m in overhead.build_modules(torch.device(DEVICE)) if m.case in ("softmax_128x10", "log_softmax_128x10")]
    seen = []
    rows = overhead.measure(modules, 2, 1, on_rows=lambda rows_so_far: seen.append(len(rows_so_far)))
    assert len(seen) == 2 and 0 < seen[0] < seen[1] == len(rows)


def _module_case(name: str, rows: int):
    """(op module, our nn.Module, its inputs) at a tiny shape of ``rows`` rows."""
    if name == "layernorm":
        return layernorm, layers.LayerNorm(24).to(DEVICE), (torch.randn(rows, 24, device=DEVICE),)
    if name == "cross_entropy":
        return cross_entropy, layers.CrossEntropyLoss(), (torch.randn(rows, 7, device=DEVICE),
                                                         torch.randint(0, 7, (rows,), device=DEVICE))
    module = layers.Softmax(dim=-1) if name == "softmax" else layers.LogSoftmax(dim=-1)
    return softmax_ops, module, (torch.randn(rows, 9, device=DEVICE),)


@pytest.mark.parametrize("name", ["layernorm", "cross_entropy", "softmax", "log_softmax"])
def test_steady_state_validates_once_per_signature(name, monkeypatch):
    """Once a call signature (shapes, strides, dtypes, devices, options, grad mode) has run, its eager
    calls, inference and training, validate nothing, ask no tuner and keep no new prepared call; a new
    signature is validated in full (so bad input still fails before any launch)."""
    ops, module, inputs = _module_case(name, 5)

    def step(inputs, train):
        if not train:
            with torch.no_grad():
                return module(*inputs)
        x = inputs[0].detach().requires_grad_()
        out = module(x, *inputs[1:])
        out.backward(torch.ones_like(out))
        return x.grad

    first = [step(inputs, train) for train in (False, True)]
    calls, picks = len(ops._CALLS), _picks()

    def no_validation(*args, **kwargs):
        raise AssertionError("validated again")
    monkeypatch.setattr(ops, "_validate", no_validation)
    for _ in range(3):
        for train, expected in zip((False, True), first):
            torch.testing.assert_close(step(inputs, train), expected)
    assert len(ops._CALLS) == calls and _picks() == picks
    with pytest.raises(AssertionError, match="validated again"):
        step(_module_case(name, 6)[2], False)  # a new shape


@pytest.mark.gpu
def test_gpu_bench_overhead_writes_rows(tmp_path):
    """On a GPU the suite times its default rounds (no ``--repeat``), the graph replays and the launch floors."""
    assert overhead.main(["--op", "softmax_128", "--calls", "20", "--out", str(tmp_path)]) == 0
    rows = read_results(tmp_path)
    assert {"call_us", "graph_us"} <= set(rows["metric"])
    assert {"torch", "triton", "floor-launch", "floor-direct"} <= set(rows["backend"])
    assert (rows["value"] > 0).all()
