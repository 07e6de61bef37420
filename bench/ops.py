"""The op suite: every Triton op that exists, at the five studies' shapes plus square sweeps.

    python -m bench.ops [--quick] [--op gemm,softmax] [--backends eager,compile,triton] [--dtype bfloat16] ...
"""
from __future__ import annotations

import importlib
import pkgutil

from . import cases as _cases_pkg
from .cli import main


def build(quick: bool = False, dtypes=None) -> list:
    """Cases from every module of bench/cases (each exports cases(quick, ...))."""
    out = []
    for m in sorted(pkgutil.iter_modules(_cases_pkg.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"{_cases_pkg.__name__}.{m.name}")
        if hasattr(mod, "cases"):
            out.extend(mod.cases(quick=quick))
    return out


if __name__ == "__main__":
    main("ops", build, __doc__)
