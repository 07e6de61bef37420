"""The op suite: every Triton op that exists, at the five studies' shapes plus square sweeps.

    python -m bench.ops [--quick] [--op gemm,softmax] [--backends eager,compile,triton] [--dtype bfloat16]
                        [--shapes 4096x4096x4096,16384x8192] [--full] [--out DIR] ...

--shapes builds exactly these shapes in every family that takes them (GEMM: MxNxK, or N for N^3;
softmax, cross-entropy and LayerNorm: MxN), in --dtype (default float32 in the CPU interpreter,
bfloat16 on a GPU). In the CPU interpreter the default is a set of tiny cases (about a minute);
--full runs the GPU sizes there (hours: an estimate is printed first).
"""
from __future__ import annotations

import importlib
import pkgutil
import sys

from . import cases as _cases_pkg
from .cli import main, run


def build(quick: bool = False, dtypes=None, shapes=None, tiny=None) -> list:
    """Cases from every module of bench/cases (each exports cases(quick, dtypes, shapes, tiny))."""
    out = []
    for m in sorted(pkgutil.iter_modules(_cases_pkg.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"{_cases_pkg.__name__}.{m.name}")
        if hasattr(mod, "cases"):
            out.extend(mod.cases(quick=quick, dtypes=dtypes, shapes=shapes, tiny=tiny))
    return out


def cli(argv=None) -> list[dict]:
    return main("ops", build, __doc__, argv, module="bench.ops")


if __name__ == "__main__":
    sys.exit(run(cli))
