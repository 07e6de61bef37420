"""The command line every bench module shares: the same flags, the same table, the same files.

    --op/--case NAME[,NAME]   only cases whose name contains one of these
    --backends a,b,c          eager, compile, compile-max-autotune, triton, and <any>+graph;
                              "triton#2" times a backend a second time as its own row
    --dtype float32,bfloat16  only these input dtypes
    --shapes 4096x4096x4096   only cases whose shape (params joined by 'x') is listed; builders that
                              take shapes build exactly these
    --quick                   small sizes (CPU interpreter: tiny sizes)
    --repeat N                interleaved timing rounds (speedup CI)
    --out DIR                 where CSV + JSON go (default results/<device>/)
    --show                    print the committed GPU results of this suite instead of running
"""
from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Callable, Sequence

import torch

from triton_kernels.runtime import INTERPRET, device_name

from . import results as R
from .harness import BACKENDS, DEFAULT_BACKENDS, Case, RunConfig, base_backend, run_cases

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--op", "--case", dest="op", default=None, help="comma-separated case names (substring match)")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated; default {','.join(DEFAULT_BACKENDS)} (CPU: eager,triton)")
    p.add_argument("--dtype", default=None, help="comma-separated dtypes, e.g. bfloat16,float32")
    p.add_argument("--shapes", default=None, help="comma-separated shapes, e.g. 8192x8192x8192")
    p.add_argument("--quick", action="store_true", help="small sizes (tiny in the CPU interpreter)")
    p.add_argument("--repeat", type=int, default=5, help="interleaved timing rounds (default 5)")
    p.add_argument("--out", default=None, help="output directory (default results/<device>/)")
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
    return tuple(v for v in case.params.values() if isinstance(v, int) and not isinstance(v, bool))


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
        print(f"NOTE: {R.CPU_NOTE} (every timing below)")
    if table.empty:
        print("(no rows)")
        return
    with pd.option_context("display.max_rows", 500, "display.max_columns", 20, "display.width", 200,
                           "display.float_format", lambda v: f"{v:.4g}"):
        print(table.to_string(index=False))


def show(suite: str, out: str | None) -> int:
    """Print the committed GPU results of a suite (for CPU-only machines)."""
    root = Path(out) if out else R.RESULTS
    files = sorted(p for p in root.rglob(f"{suite}*.csv") if "cpu-interpreter" not in p.parts and "history" not in p.parts)
    if not files:
        print(f"no committed GPU results for suite {suite!r} under {root}")
        return 1
    for f in files:
        df = R.read_results([f])
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
            rows.append(R.make_row(suite, "autotune", {"kernel": name}, "", name, "cache_hits", hits, "count"))
            rows.append(R.make_row(suite, "autotune", {"kernel": name}, "", name, "tuned", tuned, "count"))
    return rows


def main(suite: str, build: Callable[..., list[Case]], description: str, argv: Sequence[str] | None = None,
         tag: str | None = None) -> list[dict]:
    """Parse the shared flags, build and filter cases, run them, print the table, write the rows."""
    args = parser(description).parse_args(argv)
    if args.show:
        sys.exit(show(suite, args.out))
    dtypes, shapes = parse_dtypes(args.dtype), parse_shapes(args.shapes)
    kw = {}
    sig = inspect.signature(build).parameters
    if "shapes" in sig:
        kw["shapes"] = shapes
    if "dtypes" in sig:
        kw["dtypes"] = dtypes
    cases = select(build(quick=args.quick or INTERPRET, **kw), args.op, dtypes, None if "shapes" in sig else shapes)
    if not cases:
        raise SystemExit("no case matches the filters")
    cfg = RunConfig(backends=parse_backends(args.backends), rounds=args.repeat, seed=args.seed)
    rows = run_cases(cases, cfg, on_rows=lambda rs: R.write_rows(rs, args.out, suite, tag=tag))
    rows += autotune_rows(suite)
    print_table([r for r in rows if r["case"] != "autotune"], suite)
    path = R.write_rows(rows, args.out, suite, tag=tag)
    print(f"\nwrote {len(rows)} rows to {path}")
    return rows
