"""Every kernel compiled for Hopper (sm_90) by the installed Triton, on a machine without a GPU.

The CPU tests run the kernels in Triton's interpreter, which never meets the GPU compiler: a Triton release
that renames or changes an API a kernel uses (Gluon's and TMA's change between releases) passes them and fails
at the first call on a GPU. So test_offline_compile.py compiles, for sm_90 and with the Triton installed here,
a set of specializations of every ``*_kernel`` in triton_kernels:

* the ones in ``sm90_specializations.json`` (beside this file): of the launches the CPU test suite makes, per
  kernel the fewest that take every value of each of its mode arguments at least once (string and bool
  constexprs, None, each pointer's dtype), the smallest tiles where several do. ``python -m
  tests.offline_compile --record`` writes it anew: it runs the CPU suite (~7 minutes) with :class:`Recorder`;
* the kernels no CPU test launches (gemm_gluon's, GPU-only): :func:`gpu_only_specs`.

A spec is JSON: the kernel's module and name, its arguments as the JIT specialises them (a pointer's dtype and
16-byte alignment, an int's value, which also says whether it is 1 or a multiple of 16, constexpr values, a
descriptor's block, tuples of these) and the launch options. The compiles run in child processes with
``TRITON_INTERPRET=0`` (:func:`compile_all`; ``python -m tests.offline_compile`` reads specs on stdin and
prints the failures as JSON); every kernel :func:`defined_kernels` lists must have a spec.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

SPECS_FILE = Path(__file__).with_name("sm90_specializations.json")
REPO = Path(__file__).resolve().parents[1]
RECORD_ENV = "TRITON_PLAYGROUND_RECORD_SPECS"  # set by --record: the file the pytest plugin below writes
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
REGENERATE = "python -m tests.offline_compile --record"
_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "int64": "i64",
           "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "i1"}


# ------------------------------------------------------------------------------------ recording (CPU)
def arg_spec(value) -> dict:
    """What the JIT specialises a kernel argument on, as JSON."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    if isinstance(value, torch.Tensor):
        return {"t": "ptr", "dtype": str(value.dtype).removeprefix("torch."), "div16": value.data_ptr() % 16 == 0}
    if isinstance(value, TensorDescriptor):
        return {"t": "desc", "dtype": str(value.base.dtype).removeprefix("torch."), "block": list(value.block_shape)}
    if isinstance(value, bool):
        return {"t": "bool"}
    if isinstance(value, int):
        return {"t": "int", "v": value}
    if isinstance(value, float):
        return {"t": "float"}
    if value is None:
        return {"t": "none"}
    if isinstance(value, (tuple, list)):
        return {"t": "tuple", "items": [arg_spec(v) for v in value]}
    raise TypeError(f"no spec for a kernel argument of type {type(value).__name__}")


class Recorder:
    """``with Recorder() as rec``: every kernel the interpreter launches meanwhile, as a spec in ``rec.specs``
    (one per distinct spec)."""

    def __init__(self) -> None:
        self.specs: dict[str, dict] = {}

    def __enter__(self) -> "Recorder":
        from triton.runtime.interpreter import InterpretedFunction

        self._original = original = InterpretedFunction.run
        recorder = self

        def run(function, *args, grid, warmup, **kwargs):
            recorder.add(function.fn, args, kwargs)
            return original(function, *args, grid=grid, warmup=warmup, **kwargs)

        InterpretedFunction.run = run
        return self

    def __exit__(self, *exc) -> None:
        from triton.runtime.interpreter import InterpretedFunction

        InterpretedFunction.run = self._original

    def add(self, fn, args: tuple, kwargs: dict) -> None:
        kwargs = dict(kwargs)
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTIONS}
        kwargs.pop("launch_pdl", None)
        signature = inspect.signature(fn)
        bound = signature.bind(*args, **kwargs)
        spec_args = {}
        for name, param in signature.parameters.items():
            value = bound.arguments.get(name, param.default)
            if "constexpr" in str(param.annotation):
                if not isinstance(value, (int, float, str, bool, type(None))):
                    raise TypeError(f"{fn.__name__}: constexpr {name} = {value!r} is not a JSON value")
                spec_args[name] = {"t": "constexpr", "v": value}
            else:
                spec_args[name] = arg_spec(value)
        spec = {"module": fn.__module__, "name": fn.__name__, "args": spec_args, "options": options}
        self.specs.setdefault(json.dumps(spec, sort_keys=True), spec)


def _modes(spec: dict) -> set:
    """The (argument, value) pairs of a spec that choose code paths: non-int constexprs, None, dtypes."""
    out = set()
    for name, arg in spec["args"].items():
        if arg["t"] == "constexpr" and (isinstance(arg["v"], (bool, str)) or arg["v"] is None):
            out.add((name, json.dumps(arg["v"])))
        elif arg["t"] == "none":
            out.add((name, "None"))
        elif arg["t"] in ("ptr", "desc"):
            out.add((name, arg["dtype"]))
    return out


def _size(spec: dict) -> int:
    """Tile volume times warps: a proxy for a specialization's compile time."""
    ints = [a["v"] for a in spec["args"].values()
            if a["t"] == "constexpr" and type(a["v"]) is int and a["v"] > 0]
    return math.prod(ints) * spec["options"].get("num_warps", 4)


def reduce_specs(specs) -> list[dict]:
    """Per kernel of triton_kernels, the fewest specs (greedy) that take every mode value of its specs at
    least once, the smallest where several cover as much."""
    by_kernel = defaultdict(list)
    for spec in specs:
        if spec["module"].startswith("triton_kernels."):
            by_kernel[spec["module"], spec["name"]].append(spec)
    chosen = []
    for _, group in sorted(by_kernel.items()):
        uncovered = set().union(*map(_modes, group))
        while True:
            best = min(group, key=lambda s: (-len(_modes(s) & uncovered), _size(s), json.dumps(s, sort_keys=True)))
            chosen.append(best)
            uncovered -= _modes(best)
            if not uncovered:
                break
    return chosen


def write_specs(specs, path: Path = SPECS_FILE) -> None:
    """One spec a line (a readable diff when kernels change), written atomically."""
    from triton_kernels.runtime import atomic_write_text

    atomic_write_text(path, "[\n" + ",\n".join(json.dumps(s, sort_keys=True) for s in specs) + "\n]\n")


# the pytest plugin of --record: active only with RECORD_ENV set
_session_recorder: Recorder | None = None


def pytest_configure(config) -> None:
    global _session_recorder
    if os.environ.get(RECORD_ENV):
        _session_recorder = Recorder().__enter__()


def pytest_unconfigure(config) -> None:
    if _session_recorder is not None:
        _session_recorder.__exit__(None, None, None)
        specs = reduce_specs(_session_recorder.specs.values())
        write_specs(specs, Path(os.environ[RECORD_ENV]))
        print(f"\nwrote {len(specs)} specializations to {os.environ[RECORD_ENV]}")


# ------------------------------------------------------------------------------------ specs the CPU never records
def gpu_only_specs() -> list[dict]:
    """gemm_gluon's kernel (Hopper only) as gemm.plan_launches launches it: fp32 operands, 16-byte aligned, the
    output's column strides 1; the first and last of the tuner's configs, with the epilogues between them (none
    where this Triton lacks the kernel's API: gemm_gluon.AVAILABLE)."""
    from autotune import spaces
    from triton_kernels import gemm_gluon

    def spec(config, has_bias, has_res, save_z, act):
        args = {}
        for name in ("a_ptr", "b_ptr", "c_ptr", "bias_ptr", "res_ptr", "z_ptr"):
            args[name] = {"t": "ptr", "dtype": "float32", "div16": True}
        for name in ("M", "N", "K", "NUM_PROGS", "stride_a", "stride_b", "stride_cm", "stride_bias", "stride_rm",
                     "stride_zm"):
            args[name] = {"t": "int", "v": 4096 if name != "NUM_PROGS" else 132}
        for name in ("stride_cn", "stride_rn", "stride_zn"):
            args[name] = {"t": "int", "v": 1}
        tiles = {k: config.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
        constexprs = dict(HAS_BIAS=has_bias, HAS_RES=has_res, SAVE_Z=save_z, ACT=act, **tiles,
                          STAGES=config.num_stages)
        args.update({k: {"t": "constexpr", "v": v} for k, v in constexprs.items()})
        return {"module": "triton_kernels.gemm_gluon", "name": "_gemm_tf32_nmajor_kernel", "args": args,
                "options": {"num_warps": 4}, "gluon": True}

    if not gemm_gluon.AVAILABLE:
        return []
    configs = spaces.GEMM_TF32_NMAJOR_CONFIGS
    return [spec(configs[0], True, False, False, "relu"), spec(configs[-1], True, True, True, "gelu_tanh")]


# ------------------------------------------------------------------------------------ compiling (TRITON_INTERPRET=0)
def _signature_type(arg: dict) -> str | tuple:
    kind = arg["t"]
    if kind == "ptr":
        return "*" + _DTYPES[arg["dtype"]]
    if kind == "desc":
        return f"tensordesc<{_DTYPES[arg['dtype']]}{arg['block']}>"
    if kind == "int":
        return "i32" if -2**31 <= arg["v"] < 2**31 else "i64"
    if kind == "bool":
        return "i1"
    if kind == "float":
        return "fp32"
    if kind == "tuple":
        return tuple(_signature_type(item) for item in arg["items"])
    raise ValueError(f"no signature type for {arg}")


def _aligned(arg: dict) -> bool:
    return (arg["t"] == "ptr" and arg["div16"]) or (arg["t"] == "int" and arg["v"] % 16 == 0)


def source_of(spec: dict):
    """The compiler's source of a spec: the signature, constexprs and divisibility attributes the JIT would
    derive for such a launch (an int equal to 1 becomes the constant 1, as the JIT specialises it)."""
    import triton

    kernel = getattr(importlib.import_module(spec["module"]), spec["name"])
    if set(kernel.arg_names) != set(spec["args"]):
        raise LookupError(f"the spec's arguments {sorted(spec['args'])} are not the kernel's "
                          f"{sorted(kernel.arg_names)}: regenerate the specs ({REGENERATE})")
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(kernel.arg_names):  # (a spec's arguments are kept in any order)
        arg = spec["args"][name]
        if arg["t"] in ("constexpr", "none") or (arg["t"] == "int" and arg["v"] == 1):
            signature[name], constexprs[name] = "constexpr", arg.get("v")
            continue
        signature[name] = _signature_type(arg)
        if arg["t"] == "tuple":
            attrs.update({(i, j): [["tt.divisibility", 16]] for j, item in enumerate(arg["items"]) if _aligned(item)})
        elif _aligned(arg):
            attrs[(i,)] = [["tt.divisibility", 16]]
    if spec.get("gluon"):
        from triton.experimental.gluon._runtime import GluonASTSource
        return GluonASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)


def compile_specs(specs) -> list[str]:
    """Compile each spec for sm_90 (an H100's target: warps of 32 threads); the failures, one line each."""
    import triton
    from triton.backends.compiler import GPUTarget

    failures = []
    for spec in specs:
        options = {k: v for k, v in spec["options"].items() if k in OPTIONS}
        try:
            triton.compile(source_of(spec), target=GPUTarget("cuda", 90, 32), options=options)
        except Exception as e:  # every failure is reported, not the first only
            failures.append(f"{spec['module']}.{spec['name']} {json.dumps(_modes_dict(spec))}: {_reason(e)}")
    return failures


def _reason(error: Exception) -> str:
    """A compile failure in a line: the innermost cause (a CompilationError's own text is the source excerpt),
    with where in the kernel the compiler met it."""
    cause = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    where = str(error).strip().splitlines()[0].rstrip(":") if str(error).strip() else ""
    text = " ".join(str(cause).split()) if cause is not error else where
    return f"{type(error).__name__}{' ' + where if cause is not error else ''}: {type(cause).__name__}: {text}"[:500]


def _modes_dict(spec: dict) -> dict:
    return {name: value for name, value in sorted(_modes(spec))}


def defined_kernels() -> list[str]:
    """module.name of every jit function of triton_kernels named ``*_kernel`` (test_code_shape's list), but those
    of a module that says this Triton lacks their API (``AVAILABLE = False``)."""
    from .test_code_shape import _jit_functions

    names = []
    for file, name in _jit_functions():
        module = f"triton_kernels.{file.removesuffix('.py')}"
        if name.endswith("_kernel") and getattr(importlib.import_module(module), "AVAILABLE", True):
            names.append(f"{module}.{name}")
    return sorted(names)


def compile_all(specs, workers: int = 2, timeout: float = 900.0) -> dict:
    """Compile the specs in ``workers`` child processes (TRITON_INTERPRET=0, a Triton cache of their own:
    every spec is compiled, none loaded); returns {"triton": version, "failures": [...]}."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": os.path.join(scratch, "cache"),
               "PYTHONPATH": str(REPO)}
        children = []
        for i in range(workers):  # each child reads its share from a file: all of them compile at once
            share = Path(scratch, f"share{i}.json")
            share.write_text(json.dumps(specs[i::workers]))
            with share.open() as stdin:
                children.append(subprocess.Popen([sys.executable, "-m", "tests.offline_compile"], cwd=REPO, env=env,
                                                 stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                 text=True))
        try:
            outputs = [child.communicate(timeout=timeout) for child in children]
        finally:  # a hung compile: no child outlives the test
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    result = {"failures": []}
    for child, (out, err) in zip(children, outputs):
        if child.returncode != 0 or not out.strip():
            raise RuntimeError(f"the compiling process failed ({child.returncode}): {err[-3000:]}")
        part = json.loads(out.strip().splitlines()[-1])
        result["triton"] = part["triton"]
        result["failures"] += part["failures"]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true",
                        help=f"run the CPU test suite (on a machine without a GPU) and write {SPECS_FILE.name} anew "
                             "from its launches")
    args = parser.parse_args(argv)
    if args.record:
        import torch

        if torch.cuda.is_available():
            parser.error("record on a machine without a GPU: the specs are the CPU tests' interpreter launches")
        env = {**os.environ, RECORD_ENV: str(SPECS_FILE), "TRITON_INTERPRET": "1"}
        return subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "tests.offline_compile", "tests"],
                               cwd=REPO, env=env)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        parser.error("compiling needs TRITON_INTERPRET=0 (the interpreter's kernels are not compiled)")
    import triton

    specs = json.loads(sys.stdin.read())
    print(json.dumps({"triton": triton.__version__, "failures": compile_specs(specs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
