"""The command line every bench module shares: the same flags, the same table, the same files, the same
errors.

    --op/--case NAME[,NAME]   only cases whose name contains one of these
    --backends a,b,c          eager, compile, compile-max-autotune, triton, and <any>+graph;
                              "triton#2" times a backend a second time as its own row
    --dtype float32,bfloat16  only these input dtypes (with --shapes: build the shapes in these dtypes)
    --shapes 4096x4096x4096   build exactly these shapes (each case builder says which ranks it takes)
    --quick                   small sizes (GPU: the acceptance sizes)
    --full                    in the CPU interpreter: the GPU sizes (prints an estimate first; hours)
    --repeat N                interleaved timing rounds (speedup CI)
    --host-cores one|N        time with every thread of the process on one core (rows say host_cores: one|N)
    --out DIR                 where CSV + JSON go (default results/<device>/; CPU interpreter:
                              .local/results/cpu-interpreter/, git-ignored); rows merge by key
    --show                    print the committed GPU results of this suite instead of running
    --debug                   a failure prints its traceback (default: one line)

Every module's entry point is ``sys.exit(run(main))``: an error prints one line (``error: ...``) and
exits non-zero; ``--debug`` shows the traceback. In the CPU interpreter every module defaults to a tiny
configuration that finishes in about a minute and says so in one line (:func:`cpu_notice`); a larger
one needs ``--full`` and prints an estimate first (:func:`guard_cpu`).
"""
from __future__ import annotations

import argparse
import inspect
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from triton_kernels.runtime import INTERPRET, device_name

from . import results
from .harness import (BACKENDS, DEFAULT_BACKENDS, HOST_CORES, Case, RunConfig, base_backend, pinned_core,
                      run_cases)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}

# numpy's floating-point warnings from inside Triton's interpreter (a kernel's masked lanes compute on
# padding; NaN/inf inputs are tests' own): noise, never a result. Only these, matched by message.
INTERPRETER_WARNINGS = r"(invalid value|divide by zero|overflow|underflow) encountered"
INTERPRETER_MODULE = r"triton\.runtime\.interpreter"

# Rough speed of Triton's CPU interpreter, for the estimate printed before a --full run: FLOP/s of
# tl.dot work and bytes/s of element-wise work (measured on the tiny cases; within ~10x).
INTERPRETER_FLOPS = 1e7
INTERPRETER_BYTES = 2e6
CPU_BUDGET_S = 60.0


def quiet_interpreter_warnings() -> None:
    """Ignore the interpreter's numpy floating-point RuntimeWarnings (only those, by message and module)."""
    warnings.filterwarnings("ignore", message=INTERPRETER_WARNINGS, category=RuntimeWarning,
                            module=INTERPRETER_MODULE)


class Parser(argparse.ArgumentParser):
    """argparse with ``python -m <module>`` as the program name and one-line usage errors."""

    def error(self, message: str):  # noqa: D102  (argparse's usage + error is two lines)
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def argument_parser(module: str, description: str | None, *, full: bool = True, raw: bool = True) -> Parser:
    """The parser of ``python -m <module>`` with the flags every module has: --debug, and --full where the
    module has CPU-interpreter defaults."""
    p = Parser(prog=f"python -m {module}", description=description,
               formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter)
    p.add_argument("--debug", action="store_true", help="on an error, print the traceback (default: one line)")
    if full:
        p.add_argument("--full", action="store_true",
                       help="CPU interpreter: run the full (GPU) sizes instead of the tiny defaults "
                            "(prints an estimate first; hours)")
    return p


def run(main: Callable[[list[str]], Any], argv: Sequence[str] | None = None) -> int:
    """Call ``main(argv)`` as a command: an exception prints ``error: <message>`` on one line (with
    ``--debug`` in argv it propagates with its traceback), a SystemExit with a message prints it on one
    line; returns the exit status (a main that returns no int succeeded)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    quiet_interpreter_warnings()
    try:
        rc = main(argv)
    except SystemExit as e:
        if isinstance(e.code, str):
            print(one_line(e.code), file=sys.stderr)
            return 1
        return 0 if e.code is None else int(e.code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  (every failure is one line unless --debug)
        if debug:
            raise
        data_error = _is_data_error(e)
        what = one_line(str(e)) if data_error or isinstance(e, ValueError) else f"{type(e).__name__}: {one_line(str(e))}"
        print(f"error: {what} (--debug for the traceback)", file=sys.stderr)
        return 2 if data_error else 1
    return rc if isinstance(rc, int) else 0


def _is_data_error(e: BaseException) -> bool:
    try:
        from bench.data.common import DataError
    except ImportError:  # pragma: no cover - older tree
        return False
    return isinstance(e, DataError)


def one_line(text: str, limit: int = 2000) -> str:
    """A message on one line (newlines joined), cut at ``limit`` characters."""
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def needs_gpu(tool: str, why: str = "") -> None:
    """Exit with one line when there is no CUDA GPU (for GPU-only tools)."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{tool} needs a CUDA GPU" + (f" ({why})" if why else "") + "; nothing was run")


def cpu_notice(tool: str, what: str) -> None:
    """The one line a CPU-interpreter default run prints first."""
    if INTERPRET:
        print(f"{tool}: CPU interpreter, tiny configuration: {what} ({results.CPU_NOTE}; --full for the GPU sizes)",
              flush=True)


def interpreter_seconds(flops: float = 0.0, nbytes: float = 0.0, calls: float = 1.0) -> float:
    """A rough time in the CPU interpreter for work of these FLOPs and bytes, ``calls`` times."""
    return calls * max(flops / INTERPRETER_FLOPS, nbytes / INTERPRETER_BYTES)


def duration(seconds: float) -> str:
    """45 s, 12 min, 3.2 h, 4 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def guard_cpu(estimate_s: float, what: str, full: bool, tool: str) -> None:
    """In the CPU interpreter: refuse work estimated over a minute unless ``full``; with ``full`` print
    the estimate first. No-op on a GPU."""
    if not INTERPRET:
        return
    if full:
        print(f"{tool} --full in the CPU interpreter: {what}, estimated {duration(estimate_s)} (rough; Ctrl-C "
              f"stops it; {results.CPU_NOTE})", flush=True)
    elif estimate_s > CPU_BUDGET_S:
        raise SystemExit(f"{tool}: {what} would take about {duration(estimate_s)} in the CPU interpreter; "
                         f"pass --full to run it anyway")


def parser(description: str, module: str = "bench") -> argparse.ArgumentParser:
    p = argument_parser(module, description)
    p.add_argument("--op", "--case", dest="op", default=None, help="comma-separated case names (substring match)")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated; default {','.join(DEFAULT_BACKENDS)} (CPU: eager,triton)")
    p.add_argument("--dtype", default=None, help="comma-separated dtypes, e.g. bfloat16,float32")
    p.add_argument("--shapes", default=None, help="comma-separated shapes to build, e.g. 8192x8192x8192")
    p.add_argument("--quick", action="store_true", help="small sizes (GPU: the acceptance sizes)")
    p.add_argument("--repeat", type=int, default=None,
                   help="interleaved timing rounds (default: rounds of ~4 calls a backend, 5-250 of them)")
    p.add_argument("--host-cores", default="all", metavar="|".join(HOST_CORES),
                   help="one (the highest-numbered core the process may use) or a core number: the timing runs "
                        "with every thread of the process (autograd's device threads too) on that core, as under "
                        "taskset -c N; its rows say host_cores: one|N (default all: as scheduled)")
    p.add_argument("--out", default=None, help="output directory (default results/<device>/; CPU: "
                                               ".local/results/cpu-interpreter/); rows merge by key")
    p.add_argument("--show", action="store_true", help="print committed results instead of running")
    p.add_argument("--seed", type=int, default=0)
    return p


def parse_backends(spec: str | None) -> list[str]:
    if spec is None:
        return list(DEFAULT_BACKENDS) if torch.cuda.is_available() else ["eager", "triton"]
    out = [b.strip() for b in spec.split(",") if b.strip()]
    for b in out:
        base = base_backend(b)
        if base not in BACKENDS:
            raise SystemExit(f"--backends: unknown backend {b!r}; known: {', '.join(sorted(BACKENDS))} (+graph)")
    return out


def parse_dtypes(spec: str | None) -> list[torch.dtype] | None:
    if spec is None:
        return None
    out = []
    for d in spec.split(","):
        d = d.strip()
        if d not in DTYPES:
            raise SystemExit(f"--dtype: unknown dtype {d!r}; known: {', '.join(sorted(DTYPES))}")
        out.append(DTYPES[d])
    return out


def parse_shapes(spec: str | None) -> list[tuple[int, ...]] | None:
    if spec is None:
        return None
    try:
        return [tuple(int(x) for x in s.lower().split("x")) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--shapes: expected e.g. 4096x4096x4096[,1024x1024x1024], got {spec!r}") from None


def shape_of(case: Case) -> tuple[int, ...]:
    """A case's shape: its integer parameters in order (list parameters such as LayerNorm's normalised
    shape flattened in)."""
    out: list[int] = []
    for v in case.params.values():
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, int) and not isinstance(x, bool):
                out.append(x)
    return tuple(out)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def no_match_message(cases: Sequence[Case], ops: str | None, dtypes, shapes) -> str:
    """One line: which filters matched nothing, and the case names, dtypes and shapes there are."""
    asked = ", ".join(f"{k} {v}" for k, v in (("--op", ops), ("--dtype", ",".join(map(_dtype_name, dtypes or []))),
                                               ("--shapes", ",".join("x".join(map(str, s)) for s in shapes or [])))
                      if v)
    names = sorted({c.name for c in cases})
    dts = sorted({_dtype_name(c.dtype) for c in cases})
    shp = sorted({"x".join(map(str, shape_of(c))) for c in cases}, key=lambda s: (len(s), s))
    where = "in the CPU interpreter (tiny cases; --full for the GPU list)" if INTERPRET else "here"
    msg = (f"no case matches {asked or 'the filters'}; available {where}: cases {', '.join(names) or '-'}; "
           f"dtypes {', '.join(dts) or '-'}; shapes {', '.join(shp[:24]) or '-'}"
           + (" ..." if len(shp) > 24 else ""))
    if INTERPRET and dtypes and torch.bfloat16 in dtypes:
        msg += "; the CPU interpreter has no bfloat16 dot (--shapes MxN builds softmax, cross-entropy and " \
               "LayerNorm cases in bfloat16)"
    return msg


def select(cases: Sequence[Case], ops: str | None, dtypes, shapes) -> list[Case]:
    out = list(cases)
    if ops:
        names = [o.strip() for o in ops.split(",") if o.strip()]
        out = [c for c in out if any(n in c.name for n in names)]
    if dtypes:
        out = [c for c in out if c.dtype in dtypes]
    if shapes:
        out = [c for c in out if shape_of(c) in shapes]
    return out


def summary_table(rows: list[dict]) -> "pd.DataFrame":  # noqa: F821
    """One line per (case, params, dtype, backend): time, rates, % roofline, speedups, status."""
    import pandas as pd

    df = pd.DataFrame(rows)
    if df.empty:
        return df
    keys = ["case", "params", "dtype", "backend"]
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    wide = df.groupby(keys + ["metric"], sort=False)["value"].first().unstack("metric")
    status = df.groupby(keys)["status"].agg(lambda s: "ok" if (s == "ok").all() else ",".join(sorted(set(s) - {"ok"})))
    err = pd.to_numeric(df["error_vs_fp64"], errors="coerce").groupby([df[k] for k in keys]).max()
    wide = wide.join(status).join(err.rename("rel_err"))
    main = ("time_ms", "tflops", "gbps", "pct_roofline", "speedup_vs_eager", "speedup_vs_compile", "compile_s")
    extra = [c for c in wide.columns if c not in main and c not in ("rel_err", "status", "first_call_s",
                                                                  "time_warm_ms", "peak_mem_mb")]
    cols = [c for c in main if c in wide.columns] + extra[:6] + ["rel_err", "status"]
    out = wide[cols].reset_index()
    out["params"] = out["params"].str.replace(r'[{}"]', "", regex=True).str.replace(": ", "=")
    return out


def print_table(rows: list[dict], title: str, committed: bool = False) -> None:
    import pandas as pd

    table = summary_table(rows)
    print(f"\n== {title}" + ("" if committed else f" on {device_name()}") + " ==")
    if INTERPRET and not committed:
        print(f"NOTE: {results.CPU_NOTE} (every timing below)")
    if table.empty:
        print("(no rows)")
        return
    with pd.option_context("display.max_rows", 500, "display.max_columns", 20, "display.width", 200,
                           "display.float_format", lambda v: f"{v:.4g}"):
        print(table.to_string(index=False))


def show(suite: str, out: str | None) -> int:
    """Print the committed GPU results of a suite (for CPU-only machines)."""
    root = Path(out) if out else results.RESULTS
    files = sorted(p for p in root.rglob(f"{suite}*.csv") if "cpu-interpreter" not in p.parts and "runs" not in p.parts)
    if not files:
        print(f"no committed GPU results for suite {suite!r} under {root}")
        return 1
    for f in files:
        df = results.read_results([f])
        print_table(df.to_dict("records"), f"{suite}: {f.relative_to(root.parent) if root.parent in f.parents else f}",
                    committed=True)
        print(f"(device {df['device'].iloc[0]}, commit {df['git_commit'].iloc[0]}, {df['timestamp'].iloc[0]})")
    return 0


def autotune_rows(suite: str) -> list[dict]:
    """Say, per tuned kernel, how many keys came from the persistent cache and how many were tuned."""
    from triton_kernels.runtime import ALL_TUNERS, cache_dir

    rows = []
    for name, t in sorted(ALL_TUNERS.items()):
        hits = sum(1 for _, what in t.events if what == "hit")
        tuned = sum(1 for _, what in t.events if what == "tuned")
        if hits or tuned:
            print(f"autotune {name}: {hits} key(s) from the persistent cache, {tuned} tuned now ({cache_dir()})")
            rows.append(results.make_row(suite, "autotune", {"kernel": name}, "", name, "cache_hits", hits, "count"))
            rows.append(results.make_row(suite, "autotune", {"kernel": name}, "", name, "tuned", tuned, "count"))
    return rows


def estimate_cases_s(cases: Sequence[Case], backends: Sequence[str]) -> float:
    """Rough CPU-interpreter time of a run: per case and backend, a check call and a few timed calls."""
    per_call = sum(interpreter_seconds(c.flops, c.bytes) for c in cases)
    return per_call * 6 * max(1, sum(1 for b in backends if "triton" in b))


def main(suite: str, build: Callable[..., list[Case]], description: str, argv: Sequence[str] | None = None,
         tag: str | None = None, module: str | None = None) -> list[dict]:
    """Parse the shared flags, build and filter cases, run them, print the table, write the rows."""
    quiet_interpreter_warnings()
    module = module or f"bench.{suite}"
    args = parser(description, module).parse_args(argv)
    if args.show:
        sys.exit(show(suite, args.out))
    dtypes, shapes = parse_dtypes(args.dtype), parse_shapes(args.shapes)
    kw = {}
    sig = inspect.signature(build).parameters
    if "shapes" in sig:
        kw["shapes"] = shapes
    if "dtypes" in sig:
        kw["dtypes"] = dtypes
    tiny = INTERPRET and not args.full
    if "tiny" in sig:
        kw["tiny"] = tiny
    built = build(quick=args.quick or tiny, **kw)
    cases = select(built, args.op, dtypes, None if "shapes" in sig else shapes)
    if not cases:  # list what the defaults offer (the builders filter by --shapes / --dtype themselves)
        offered = build(quick=args.quick or tiny, **{k: (None if k in ("shapes", "dtypes") else v)
                                                     for k, v in kw.items()})
        raise SystemExit(f"{module}: " + no_match_message(offered, args.op, dtypes, shapes))
    backends = parse_backends(args.backends)
    if INTERPRET:
        if args.full or shapes:
            guard_cpu(estimate_cases_s(cases, backends), f"{len(cases)} case(s)", args.full, module)
        if not args.full:
            cpu_notice(module, f"{len(cases)} " + ("case(s) at the requested shapes" if shapes else
                                                    "tiny case(s), about a minute"))
    try:
        pinned_core(args.host_cores)
    except ValueError as e:
        raise SystemExit(f"--host-cores: {e}") from None
    cfg = RunConfig(backends=backends, rounds=args.repeat, seed=args.seed, host_cores=args.host_cores)
    rows = run_cases(cases, cfg, on_rows=lambda rs: results.write_rows(rs, args.out, suite, tag=tag))
    rows += autotune_rows(suite)
    print_table([r for r in rows if r["case"] != "autotune"], suite)
    path = results.write_rows(rows, args.out, suite, tag=tag)
    print(f"\nwrote {len(rows)} rows to {path} (merged by key with the rows already there)")
    return rows
