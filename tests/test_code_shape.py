"""The shape rules of triton_kernels/ that keep it readable and compilable (CONTRIBUTING.md): no file over
700 lines, no kernel over 120 lines; and two rules from how Inductor compiles a user kernel under
torch.compile, by copying the kernel, the jit functions it calls and its constexpr globals into its own
generated file: no module-level constexpr holding a non-finite float (copied by repr, ``-inf`` is not a
Python name there: NameError on the H100), and no kernel calling a helper through another module of this
package (``grid_sync.exchange(...)``: the module is not copied, NameError 'grid_sync'); import the helper
by name instead. And one from how torch.compile analyses which arguments a traced kernel writes: inline PTX
makes that analysis give up (it then assumes every tensor argument is written, wrong for a tensor passed
twice), so every inline-PTX call sits under a hint flag that a traced launch turns off
(launcher.TRACED_OFF), and no scalar argument gets a tensor method (``M.to(tl.float32)``: torch 2.11's
analysis passes scalars as Python ints; ``tl.cast(M, tl.float32)`` takes both)."""
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


# inline PTX: Triton's grid-dependency controls and the package's own inline_asm_elementwise helpers
_PTX_CALLS = {"gdc_wait", "gdc_launch_dependents", "inline_asm_elementwise"}


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def test_inline_ptx_only_under_traced_off_flags():
    """Every kernel call that emits inline PTX (directly or through a jit helper that does) is inside
    ``if FLAG:`` with FLAG in launcher.TRACED_OFF; the helpers that wrap the PTX are checked at their calls."""
    from triton_kernels.launcher import TRACED_OFF

    kernels = list(_jit_functions().values())
    called = {_called_name(n) for k in kernels for n in ast.walk(k) if isinstance(n, ast.Call)}  # jit helpers
    ptx = set(_PTX_CALLS)
    while True:  # the helpers emitting PTX outside such a block join the PTX calls, to a fixed point
        ungated = {k.name for k in kernels if not _gated_only(k, ptx, TRACED_OFF)}
        if ungated & called <= ptx:
            break
        ptx |= ungated & called
    bad = sorted(ungated - called)  # launched kernels
    assert not bad, f"inline PTX outside an `if <one of {TRACED_OFF}>:` block in {bad}"


def _gated_only(function: ast.FunctionDef, ptx: set, flags: tuple) -> bool:
    """True when every call of ``ptx`` in ``function`` is inside ``if FLAG:`` with FLAG in ``flags``."""
    def visit(node, gated: bool) -> bool:
        if isinstance(node, ast.Call) and _called_name(node) in ptx and not gated:
            return False
        if isinstance(node, ast.If):
            flag = isinstance(node.test, ast.Name) and node.test.id in flags
            return (visit(node.test, gated) and all(visit(n, gated or flag) for n in node.body)
                    and all(visit(n, gated) for n in node.orelse))
        return all(visit(child, gated) for child in ast.iter_child_nodes(node))
    return all(visit(n, False) for n in function.body)


def _jit_functions() -> dict:
    """(file name, function name) -> the jit function's AST, over the package."""
    return {(path.name, k.name): k for path in FILES for k in _kernels(ast.parse(path.read_text()))}


def test_no_tensor_method_on_a_scalar_argument():
    """A launched kernel's scalar arguments (not constexpr, not ``*ptr`` or a ``*_desc`` tensor descriptor), and
    the jit helpers' parameters they are passed to as they are, get no method call (``M.to(...)``)."""
    functions = _jit_functions()
    names: dict = {}
    for key in functions:
        names.setdefault(key[1], []).append(key)

    def resolve(file: str, name: str):  # a helper of the same file, else the package's only one of that name
        return (file, name) if (file, name) in functions else names[name][0] if len(names.get(name, ())) == 1 else None

    calls = [(key, callee, node) for key, fn in functions.items() for node in ast.walk(fn)
             if isinstance(node, ast.Call) and (callee := resolve(key[0], _called_name(node))) is not None]
    # a Gluon kernel's warp-specialised partitions get its locals (shared-memory buffers, barriers), not arguments
    partitions = {resolve(key[0], name.id) for key, fn in functions.items() for node in ast.walk(fn)
                  if isinstance(node, ast.Call) and _called_name(node) == "warp_specialize"
                  for name in ast.walk(node) if isinstance(name, ast.Name)} - {None}
    helpers = {callee for _, callee, _ in calls} | partitions
    scalars = {key: {a.arg for a in fn.args.args if key not in helpers and not a.arg.endswith(("ptr", "_desc"))
                     and not (a.annotation is not None and "constexpr" in ast.unparse(a.annotation))}
               for key, fn in functions.items()}
    changed = True
    while changed:  # a scalar passed on as it is makes the helper's parameter a scalar too
        changed = False
        for caller, callee, node in calls:
            params = [a.arg for a in functions[callee].args.args]
            passed = list(zip(params, node.args)) + [(kw.arg, kw.value) for kw in node.keywords]
            for param, value in passed:
                if isinstance(value, ast.Name) and value.id in scalars[caller] and param not in scalars[callee]:
                    scalars[callee].add(param)
                    changed = True
    bad = [f"{key[0]}:{node.lineno} {ast.unparse(node)}" for key, fn in functions.items() for node in ast.walk(fn)
           if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
           and isinstance(node.func.value, ast.Name) and node.func.value.id in scalars[key]]
    assert not bad, f"a tensor method on a scalar argument (use tl.cast): {bad}"
