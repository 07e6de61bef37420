"""Host cost per call: every public module, called the way a user calls it, against its torch.nn twin.

    python -m bench.overhead [--op softmax,linear] [--calls N] [--repeat N] [--out DIR] [--show]

``--calls``: calls per timing round (2000 on a GPU, a fiftieth of it for the large shapes); ``--repeat``: the
rounds per module, torch's and ours alternating (5 on a GPU; 2 of 5 calls in the interpreter).

For each module at a tiny shape (launch-bound) and one large shape (GPU-bound), in inference
(``torch.no_grad()``) and training (forward + backward through autograd):
    call_us   wall time per call of back-to-back eager calls, no sync inside the loop, once the queue is
              steady (what a user who puts the module in a model gets);
    graph_us  the same calls captured once in a CUDA graph and replayed (GPU time, no host path).
Backends: ``torch`` (the torch.nn twin), ``triton`` (ours), and two floors for the same number of kernel
arguments as our module's main kernel: ``floor-launch`` (Triton's own ``kernel[grid](...)`` of an empty
kernel) and ``floor-direct`` (that kernel's compiled launcher called directly, everything else prepared:
Triton 3.6's C entry point, as the playground's launches call it).
On a CPU the modules run in Triton's interpreter at the tiny shapes only: not performance figures.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from triton_kernels import launcher
from triton_kernels.runtime import INTERPRET, capture_graph, default_device

from . import results
from .cli import parser, run

SUITE = "overhead"
ROUNDS = 5  # alternating timing rounds per module on a GPU, unless --repeat says otherwise


@dataclasses.dataclass
class Module:
    """One module at one shape: builders for ours and the twin (same parameters), an input factory, and
    the number of arguments of our module's main kernel (for the floors)."""

    case: str
    ours: Callable[[], nn.Module]
    twin: Callable[[], nn.Module]
    inputs: Callable[[], tuple]
    kernel_args: int
    dtype: torch.dtype
    large: bool = False
    train: bool = True


def build_modules(device) -> list[Module]:
    """Every module case of the suite (tiny shapes; on a GPU also one large shape each)."""
    from models import layers

    def pair(ours_cls, twin_cls, *args, dtype=torch.float32, **kw):
        def make_twin():
            return twin_cls(*args, **kw).to(device=device, dtype=dtype)

        def make_ours():
            twin = make_twin()
            ours = ours_cls(*args, **kw).to(device=device, dtype=dtype)
            ours.load_state_dict(twin.state_dict())
            return ours
        return make_ours, make_twin

    def rand(*shape, dtype=torch.float32):
        return lambda: (torch.randn(*shape, device=device, dtype=dtype),)

    out = []
    lin_o, lin_t = pair(layers.Linear, nn.Linear, 784, 10)
    out.append(Module("linear_128x784x10", lin_o, lin_t, rand(128, 784), 19, torch.float32))
    sm_o, sm_t = pair(layers.Softmax, nn.Softmax, dim=-1)
    out.append(Module("softmax_128x10", sm_o, sm_t, rand(128, 10), 7, torch.float32))
    lsm_o, lsm_t = pair(layers.LogSoftmax, nn.LogSoftmax, dim=-1)
    out.append(Module("log_softmax_128x10", lsm_o, lsm_t, rand(128, 10), 7, torch.float32))
    ln_o, ln_t = pair(layers.LayerNorm, nn.LayerNorm, 1024)
    out.append(Module("layernorm_64x1024", ln_o, ln_t, rand(64, 1024), 12, torch.float32))
    ce_o, ce_t = pair(layers.CrossEntropyLoss, nn.CrossEntropyLoss)
    out.append(Module("cross_entropy_128x10", ce_o, ce_t,
                      lambda: (torch.randn(128, 10, device=device),
                               torch.randint(0, 10, (128,), device=device)), 14, torch.float32))
    class LayerNormReLUMaxPoolTwin(nn.Sequential):
        def __init__(self, shape, pool=3):
            super().__init__(nn.LayerNorm(shape), nn.ReLU(), nn.MaxPool1d(pool, pool))

    def lnrm_pair(shape):
        def make_twin():
            return LayerNormReLUMaxPoolTwin(shape).to(device)

        def make_ours():
            ours = layers.LayerNormReLUMaxPool(shape).to(device)
            ours.load_state_dict(make_twin()[0].state_dict())
            return ours
        return make_ours, make_twin
    lo, lt = lnrm_pair([256, 102])
    out.append(Module("ln_relu_maxpool_8x256x102", lo, lt, rand(8, 256, 102), 10, torch.float32, train=False))

    def bn_pair(channels, dtype=torch.float32):
        from models.resnet import BatchNormAct2d

        def make_twin():  # the same module on torch's path: batch_norm, then an in-place ReLU
            return BatchNormAct2d(channels).to(device=device, dtype=dtype)

        def make_ours():
            ours = make_twin()
            ours.fused = True
            return ours
        return make_ours, make_twin

    def channels_last(*shape, dtype=torch.float32):
        return lambda: (torch.randn(*shape, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last),)
    bo, bt = bn_pair(64)
    out.append(Module("batchnorm_relu_32x64x8x8", bo, bt, channels_last(32, 64, 8, 8), 10, torch.float32))
    if not INTERPRET:
        bf = torch.bfloat16

        class LinearReLU(nn.Sequential):
            def __init__(self, fin, fout):
                super().__init__(nn.Linear(fin, fout), nn.ReLU())

        def lin_relu_pair():
            def make_twin():
                return LinearReLU(8704, 1024).to(device=device, dtype=bf)

            def make_ours():
                twin = make_twin()
                ours = layers.Linear(8704, 1024, activation="relu").to(device=device, dtype=bf)
                ours.load_state_dict(twin[0].state_dict())
                return ours
            return make_ours, make_twin
        lo, lt = lin_relu_pair()
        out.append(Module("linear_relu_4096x8704x1024", lo, lt, rand(4096, 8704, dtype=bf), 19, bf, large=True))
        sm_o, sm_t = pair(layers.Softmax, nn.Softmax, dim=-1, dtype=bf)
        out.append(Module("softmax_16384x8192", sm_o, sm_t, rand(16384, 8192, dtype=bf), 7, bf, large=True))
        bo, bt = bn_pair(64, bf)
        out.append(Module("batchnorm_relu_256x64x32x32", bo, bt, channels_last(256, 64, 32, 32, dtype=bf), 10, bf,
                          large=True))
        ln_o, ln_t = pair(layers.LayerNorm, nn.LayerNorm, 8192, dtype=bf)
        out.append(Module("layernorm_16384x8192", ln_o, ln_t, rand(16384, 8192, dtype=bf), 12, bf, large=True))
        ce_o, ce_t = pair(layers.CrossEntropyLoss, nn.CrossEntropyLoss)
        out.append(Module("cross_entropy_8192x32000", ce_o, ce_t,
                          lambda: (torch.randn(8192, 32000, device=device),
                                   torch.randint(0, 32000, (8192,), device=device)), 14, torch.float32,
                          large=True))
    return out


# ----------------------------------------------------------------------------------------------------
# Timing: back-to-back calls, and CUDA-graph replays of the same calls
# ----------------------------------------------------------------------------------------------------
def per_call_us(fn: Callable[[], object], calls: int, rounds: int) -> list[float]:
    """Per-call wall time (us) of ``calls`` back-to-back calls, synchronised only at the end; one value
    per round, after a warm-up round."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(max(3, calls // 10)):
        fn()
    sync()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        out.append((time.perf_counter() - t0) / calls * 1e6)
    return out


def graph_us(fn: Callable[[], object], calls: int, rounds: int, per_graph: int = 20) -> list[float]:
    """Per-call time (us) of ``per_graph`` calls captured in one CUDA graph, replayed."""
    def captured():
        for _ in range(per_graph):
            fn()

    graph, _ = capture_graph(captured, warmup=1)  # warm-up (JIT, autotune, allocator): one round of per_graph calls
    replays = max(1, calls // per_graph)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / (replays * per_graph) * 1e6)
    return out


def _step(module: nn.Module, inputs: tuple, train: bool) -> Callable[[], object]:
    if not train:
        def infer():
            with torch.no_grad():
                return module(*inputs)
        return infer
    inputs = tuple(t.detach().requires_grad_() if t.is_floating_point() else t for t in inputs)
    grad = None

    def train_step():
        nonlocal grad
        y = module(*inputs)
        if grad is None:
            grad = torch.randn_like(y)
        y.backward(grad)
    return train_step


# ----------------------------------------------------------------------------------------------------
# Floors: an empty kernel with the same number of arguments
# ----------------------------------------------------------------------------------------------------
_EMPTY: dict[int, object] = {}


def empty_kernel(n_args: int):
    """An empty ``@triton.jit`` kernel of ``n_args`` arguments (2 pointers, the rest ints), written to a
    temporary file so Triton can read its source."""
    if n_args not in _EMPTY:
        names = ", ".join(f"a{i}" for i in range(n_args))
        src = f"import triton\n\n@triton.jit\ndef empty_{n_args}({names}):\n    pass\n"
        path = Path(tempfile.mkdtemp()) / f"empty_kernel_{n_args}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = mod
        spec.loader.exec_module(mod)
        _EMPTY[n_args] = getattr(mod, f"empty_{n_args}")
    return _EMPTY[n_args]


def floors(n_args: int, device, calls: int, rounds: int) -> dict[str, list[float]]:
    kernel = empty_kernel(n_args)
    a = torch.empty(16, device=device)
    args = (a, a) + tuple(range(1, n_args - 1))
    compiled = kernel[(1,)](*args)
    stream = torch.cuda.current_stream().cuda_stream
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    entry, before = launcher._entry(run)  # what BoundKernel calls: the C entry point where it can
    return {
        "floor-launch": per_call_us(lambda: kernel[(1,)](*args), calls, rounds),
        "floor-direct": per_call_us(lambda: entry(1, 1, 1, stream, function, *before, metadata, None, None, None,
                                                  *args), calls, rounds),
    }


# ----------------------------------------------------------------------------------------------------
def measure(modules: list[Module], calls: int, rounds: int,
            on_rows: Callable[[list[dict]], object] | None = None) -> list[dict]:
    """Rows of every module; ``on_rows(rows so far)`` after each module (the CLI saves there, so a run
    cut short keeps every module it finished).

    Every step of every module is run (tuned, compiled, its launch plans made) before anything is timed,
    and a module's torch and triton steps are timed in alternating rounds: a box's host speed drifts within
    a process (the first module measured used to run slower), and alternation spreads that over both."""
    rows = []
    device = default_device()

    def add(m: Module, mode: str, backend: str, metric: str, values: list[float], note: str = ""):
        values = sorted(values)
        rows.append(results.make_row(SUITE, m.case, {"mode": mode, "large": m.large}, m.dtype, backend, metric,
                                     values[len(values) // 2], "us", p20=values[int(0.2 * (len(values) - 1))],
                                     p80=values[int(0.8 * (len(values) - 1))], note=note))

    steps = {}  # (case, mode) -> [(backend, step)], every step warmed before any timing
    for m in modules:
        inputs = m.inputs()
        for mode in ("inference", "training") if m.train else ("inference",):
            steps[m.case, mode] = [(backend, _step(make(), inputs, mode == "training"))
                                   for backend, make in (("torch", m.twin), ("triton", m.ours))]
            for _, fn in steps[m.case, mode]:
                per_call_us(fn, 3, 1)
    floor_cache: dict[int, dict] = {}
    for m in modules:
        for mode in ("inference", "training") if m.train else ("inference",):
            n = calls if not m.large else max(20, calls // 50)
            timed: dict[str, list[float]] = {backend: [] for backend, _ in steps[m.case, mode]}
            for _ in range(rounds):  # alternating rounds
                for backend, fn in steps[m.case, mode]:
                    timed[backend] += per_call_us(fn, n, 1)
            for backend, fn in steps[m.case, mode]:
                add(m, mode, backend, "call_us", timed[backend])
                if torch.cuda.is_available():
                    add(m, mode, backend, "graph_us", graph_us(fn, n, rounds))
            if torch.cuda.is_available() and not m.large:
                if m.kernel_args not in floor_cache:
                    floor_cache[m.kernel_args] = floors(m.kernel_args, device, calls, rounds)
                for backend, values in floor_cache[m.kernel_args].items():
                    add(m, mode, backend, "call_us", values, note=f"empty kernel, {m.kernel_args} arguments")
        print(f"  {m.case} done", file=sys.stderr)
        if on_rows is not None:
            on_rows(rows)
    return rows


def table(rows: list[dict]) -> str:
    import pandas as pd

    df = pd.DataFrame(rows)
    df["mode"] = df["params"].map(lambda p: "train" if '"training"' in p else "infer")
    df["col"] = df["backend"] + " " + df["metric"].str.replace("_us", "")
    pivot = df.pivot_table(index=["case", "mode"], columns="col", values="value", aggfunc="first")
    if "triton call" in pivot and "torch call" in pivot:
        pivot["ours/torch"] = pivot["triton call"] / pivot["torch call"]
    return pivot.round(2).to_string()


def timing_rounds(repeat: int | None, interpret: bool = INTERPRET) -> int:
    """The alternating rounds per module: 2 in the interpreter, else ``--repeat`` or ROUNDS."""
    return 2 if interpret else repeat or ROUNDS


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], "bench.overhead")
    p.add_argument("--calls", type=int, default=None, help="calls per timing round (default 2000; CPU 5)")
    args = p.parse_args(argv)
    if args.show:
        path = results.RESULTS
        files = sorted(path.glob(f"*/{SUITE}.csv"))
        if not files:
            print(f"no committed {SUITE} results under {path}")
            return 1
        for f in files:
            print(f"{f.parent.name}:\n{table(results.read_results(f).to_dict('records'))}")
        return 0
    calls = args.calls or (5 if INTERPRET else 2000)
    rounds = timing_rounds(args.repeat)
    modules = build_modules(default_device())
    if args.op:
        wanted = [w.strip() for w in args.op.split(",") if w.strip()]
        modules = [m for m in modules if any(w in m.case for w in wanted)]
    if INTERPRET:
        print(f"bench.overhead: {results.CPU_NOTE} (tiny shapes, {calls} calls per round)")
    def save(rows: list[dict]) -> None:  # merged by key, so rewriting the rows so far is harmless
        results.write_rows(rows, args.out, SUITE)

    rows = measure(modules, calls, rounds, on_rows=save)
    path = results.results_dir(args.out) / f"{SUITE}.csv"
    print(table(rows))
    print(f"rows: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
