"""The shape rules of triton_kernels/ that keep it readable and compilable (CONTRIBUTING.md): no file over
700 lines, no kernel over 120 lines, and no module-level constexpr holding a non-finite float (Inductor
copies a kernel's globals into its generated code by repr, and ``-inf`` is not a Python name there: a
NameError under torch.compile)."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "triton_kernels"
FILES = sorted(ROOT.glob("*.py"))


def _kernels(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            yield node


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_file_and_kernel_lengths(path):
    lines = path.read_text().count("\n")
    assert lines <= 700, f"{path.name} has {lines} lines (limit 700: split it by concern)"
    for kernel in _kernels(ast.parse(path.read_text())):
        n = kernel.end_lineno - kernel.lineno + 1
        assert n <= 120, f"{path.name}: kernel {kernel.name} has {n} lines (limit 120)"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_non_finite_global_constexpr(path):
    module = __import__(f"triton_kernels.{path.stem}", fromlist=["_"])
    import triton.language as tl

    for name, value in vars(module).items():
        if isinstance(value, tl.constexpr) and isinstance(value.value, float):
            assert math.isfinite(value.value), f"{path.name}: global constexpr {name} = {value.value}"
