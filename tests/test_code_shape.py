"""The shape rules of triton_kernels/ that keep it readable and compilable (CONTRIBUTING.md): no file over
700 lines, no kernel over 120 lines; and two rules from how Inductor compiles a user kernel under
torch.compile, by copying the kernel, the jit functions it calls and its constexpr globals into its own
generated file: no module-level constexpr holding a non-finite float (copied by repr, ``-inf`` is not a
Python name there: NameError on the H100), and no kernel calling a helper through another module of this
package (``grid_sync.exchange(...)``: the module is not copied, NameError 'grid_sync'); import the helper
by name instead."""
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


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_kernels_call_helpers_by_name(path):
    import types

    module = __import__(f"triton_kernels.{path.stem}", fromlist=["_"])
    for kernel in _kernels(ast.parse(path.read_text())):
        for node in ast.walk(kernel):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = vars(module).get(node.value.id)
                if isinstance(target, types.ModuleType) and target.__name__.startswith("triton_kernels"):
                    pytest.fail(f"{path.name}: kernel {kernel.name} calls {node.value.id}.{node.attr}: "
                                f"import {node.attr} by name")
