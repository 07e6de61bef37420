"""Where one eager call's host time goes: cProfile of back-to-back steady-state calls of a module.

    python -m bench.profile_call [--case linear_relu_4096x8704x1024,softmax_128x10] [--mode inference,training]
        [--calls 200] [--top 25]

The case names are bench.overhead's (exact names). The module is built and called until its launch plans exist, then
``--calls`` calls run under cProfile (no synchronisation inside; one at the end), in inference
(``torch.no_grad()``) and / or training (forward + backward, the backward on the calling thread so the
profiler sees it; ``--mode``). Prints the functions by own time and by cumulative time. CPU: the interpreter's
costs, not the GPU launch path.
"""
from __future__ import annotations

import cProfile
import io
import pstats

import torch

from triton_kernels.runtime import default_device

from . import overhead
from .cli import parser, run


def profile(case: str, calls: int, top: int, mode: str = "inference") -> str:
    modules = {m.case: m for m in overhead.build_modules(default_device())}
    if case not in modules:
        raise SystemExit(f"unknown case {case!r}; known: {', '.join(sorted(modules))}")
    m = modules[case]
    if mode == "training" and not m.train:
        return f"=== {case}: no training mode\n"
    step = overhead._step(m.ours(), m.inputs(), mode == "training")
    # training: the backward runs on this thread (autograd's device threads are invisible to cProfile)
    torch.autograd.set_multithreading_enabled(False)
    try:
        for _ in range(5):  # tuning, compilation, launch plans
            step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            step()
        profiler.disable()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    finally:
        torch.autograd.set_multithreading_enabled(True)
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    out.write(f"=== {case} {mode}: {calls} calls, by own time\n")
    stats.sort_stats("tottime").print_stats(top)
    out.write(f"=== {case} {mode}: by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    p = parser(__doc__.splitlines()[0], "bench.profile_call")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--mode", default="inference", help="inference, training, or both (comma-separated)")
    args = p.parse_args(argv)
    for case in (args.op or "linear_relu_4096x8704x1024").split(","):
        for mode in args.mode.split(","):
            print(profile(case.strip(), args.calls, args.top, mode.strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(run(main))
