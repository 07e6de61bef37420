"""Sweep the GEMM config space on chosen shapes and layouts, recording every trial (one row per config).

    python -m autotune.sweep --shapes 4096x1024x8704 --dtype bfloat16 --layouts nn,nt --act relu [--out DIR]

Layouts name how A and B are stored: n = row-major as used (A (M,K), B (K,N)), t = stored transposed
(A as (K,M), B as (N,K) -- nn.Linear's weight). Each config is checked against float64 before it is timed;
the table ends with the best config per (shape, layout) and what the tuner would pick.

In the CPU interpreter the default is one tiny shape (40x24x33, float32, the interpreter's one config);
--shapes are honoured when they are small enough to finish in about a minute (else --full, which
prints an estimate first); bfloat16 is refused there (the interpreter has no bfloat16 dot).
"""
from __future__ import annotations

import sys

import torch

from bench import results as R
from bench.cli import DTYPES, argument_parser, cpu_notice, guard_cpu, interpreter_seconds, parse_shapes, run
from bench.harness import median, quantile, time_call
from triton_kernels import gemm as G
from triton_kernels.runtime import INTERPRET
from triton_kernels.testing import rel_err, tolerance


GPU_SHAPES, GPU_DTYPE = "4096x1024x8704", "bfloat16"
CPU_SHAPES, CPU_DTYPE = [(40, 24, 33)], "float32"


def _operands(M, N, K, dtype, layout, device):
    a = torch.randn(K, M, device=device, dtype=dtype).t() if layout[0] == "t" else torch.randn(M, K, device=device, dtype=dtype)
    b = torch.randn(N, K, device=device, dtype=dtype).t() if layout[1] == "t" else torch.randn(K, N, device=device, dtype=dtype)
    return a, b / K ** 0.5, torch.randn(N, device=device, dtype=dtype)


def sweep(shapes, dtype, layouts, act="none", rep=20, configs=None) -> list[dict]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for (M, N, K) in shapes:
        for layout in layouts:
            a, b, bias = _operands(M, N, K, dtype, layout, device)
            z = a.double() @ b.double() + bias.double()
            ref = {"none": z, "relu": torch.relu(z), "gelu": torch.nn.functional.gelu(z)}[act]
            tma = G._tma_eligible(a, b, M, N, K)
            space = configs or (G._prune(M, N, K, a.element_size(), tma) if not INTERPRET else [G.INTERPRET_CONFIG])
            params = {"M": M, "N": N, "K": K, "layout": layout, "act": act}
            for cfg in space:
                p = dict(params, config=str(cfg))
                try:
                    out, _ = G.gemm_forward(a, b, bias, activation=act, config=cfg)
                    err = rel_err(out, ref)
                    if not err <= tolerance(dtype):
                        rows.append(R.make_row("autotune", "gemm", p, dtype, "triton", "time_ms", None, "ms",
                                               error_vs_fp64=err, status="wrong"))
                        continue
                    ts = time_call(lambda: G.gemm_forward(a, b, bias, activation=act, config=cfg), rep)
                except Exception as e:  # out of resources etc.: a row, and on to the next config
                    rows.append(R.make_row("autotune", "gemm", p, dtype, "triton", "time_ms", None, "ms",
                                           status="error", note=f"{type(e).__name__}: {e}"[:200]))
                    continue
                med = median(ts)
                rows.append(R.make_row("autotune", "gemm", p, dtype, "triton", "time_ms", med, "ms",
                                       p20=quantile(ts, 0.2), p80=quantile(ts, 0.8), error_vs_fp64=err))
                rows.append(R.make_row("autotune", "gemm", p, dtype, "triton", "tflops", 2 * M * N * K / med / 1e9,
                                       "TFLOP/s", error_vs_fp64=err))
            if device == "cuda":  # cuBLAS on the same operands, for scale
                f = {"none": lambda: torch.addmm(bias, a, b), "relu": lambda: torch.relu(torch.addmm(bias, a, b)),
                     "gelu": lambda: torch.nn.functional.gelu(torch.addmm(bias, a, b))}[act]
                f()
                med = median(time_call(f, rep))
                rows.append(R.make_row("autotune", "gemm", dict(params, config="cublas"), dtype, "eager", "time_ms", med, "ms"))
                rows.append(R.make_row("autotune", "gemm", dict(params, config="cublas"), dtype, "eager", "tflops",
                                       2 * M * N * K / med / 1e9, "TFLOP/s"))
    return rows


def main(argv=None) -> int:
    p = argument_parser("autotune.sweep", __doc__)
    p.add_argument("--shapes", default=None, help=f"MxNxK[,...] (default {GPU_SHAPES}; CPU interpreter "
                                                  f"{'x'.join(map(str, CPU_SHAPES[0]))})")
    p.add_argument("--dtype", default=None, choices=sorted(DTYPES),
                   help=f"default {GPU_DTYPE} ({CPU_DTYPE} in the CPU interpreter)")
    p.add_argument("--layouts", default="nn,nt")
    p.add_argument("--act", default="none", choices=G.ACTIVATIONS)
    p.add_argument("--rep", type=int, default=20)
    p.add_argument("--out", default=None, help="default results/<device>/ (CPU: .local/results/cpu-interpreter/)")
    args = p.parse_args(argv)
    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    bad = [x for x in layouts if len(x) != 2 or set(x) - {"n", "t"}]
    if bad:
        p.error(f"--layouts: each layout is two letters of n/t (nn, nt, tn, tt), got {','.join(bad)}")
    if INTERPRET:
        shapes = parse_shapes(args.shapes or (GPU_SHAPES if args.full else None)) or CPU_SHAPES
        if any(len(s) != 3 for s in shapes):
            p.error("--shapes: each shape is MxNxK")
        dtype = DTYPES[args.dtype or CPU_DTYPE]
        if dtype == torch.bfloat16:
            raise SystemExit("autotune.sweep: the CPU interpreter has no bfloat16 dot; pass --dtype float32 or "
                             "float16 here (bfloat16 on a GPU)")
        what = f"{', '.join('x'.join(map(str, s)) for s in shapes)} {str(dtype)[6:]}, layouts {','.join(layouts)}"
        if args.shapes or args.full:
            est = interpreter_seconds(sum(2 * m * n * k for m, n, k in shapes), calls=len(layouts) * (args.rep + 2))
            guard_cpu(est, what, args.full, "autotune.sweep")
        if not args.full:
            cpu_notice("autotune.sweep", what + " (the interpreter's one config)")
    else:
        shapes = parse_shapes(args.shapes or GPU_SHAPES)
        dtype = DTYPES[args.dtype or GPU_DTYPE]
    rows = sweep(shapes, dtype, layouts, args.act, args.rep)
    import pandas as pd

    df = pd.DataFrame(rows)
    t = df[df["metric"] == "tflops"].copy()
    if INTERPRET:
        print(f"({R.CPU_NOTE}: every figure below)")
    if not t.empty:
        t["value"] = pd.to_numeric(t["value"])
        t["params"] = t["params"].str.replace(r'[{}"]', "", regex=True)
        with pd.option_context("display.width", 220, "display.max_colwidth", 160, "display.max_rows", 200):
            print(t.sort_values("value", ascending=False)[["params", "backend", "value"]]
                  .rename(columns={"value": "TFLOP/s"}).to_string(index=False))
    bad = df[df["status"] != "ok"]
    if len(bad):
        print(f"{len(bad)} configs failed or were wrong:", bad["status"].value_counts().to_dict())
    path = R.write_rows(rows, args.out, "autotune", tag="gemm")
    print(f"wrote {len(rows)} rows to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
