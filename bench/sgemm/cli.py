"""The SGEMM depth study: GloNet vs ResNet-MLP vs MLP, width 16, depth 10 .. 1000, on UCI SGEMM.

    python -m bench.sgemm --model GloNet1000 --epochs 200 --backend triton [--batch 1024] [--lr 1e-3]
                          [--weight-decay 0] [--width 16] [--precision ieee|tf32] [--graph]
                          [--target log|mean] [--data PATH] [--seed 0] [--resume]
    python -m bench.sgemm --suite depth    [--backend triton] [--epochs 200] [--models GloNet,ResNetMLP,MLP]
                                           [--depths 10,24,50,100,200,600,1000]
    python -m bench.sgemm --suite steptime [--depths ...] [--backends eager,triton,triton+graph] [--steps 100]
    add --quick for a smoke run (tiny data subset, 1 epoch, depths 2 and 4; --suite train without
    --model trains GloNet4). In the CPU interpreter every suite defaults to that smoke configuration
    (about a minute); --full runs the real sizes there (an estimate is printed first). --download
    fetches the UCI SGEMM data into .data/sgemm first (skipped when it is there).

Training (one model = one session): MSE loss, Adam (L2 weight decay as torch.optim.Adam), batches of
--batch rows from a seeded per-epoch permutation of the training split (the last partial batch is
dropped, so every step has the same shape and a CUDA graph can replay it), validation MSE every epoch,
test MSE at the end. The data: bench/data/sgemm.py (target ln(mean run time), standardised with train
statistics; 80/10/10 seeded split); MSEs are in standardised target units (``test_mse``) and in the
target's own units (``test_mse_log``: squared error of ln(ms)).

Each session writes ``<results-dir>/<Model>/session_<N>/`` (default training_results/; smoke runs -- --quick, or the CPU
interpreter's default -- go to .local/training_results/, git-ignored): config.json, parameters.pt (the final
state_dict), metrics.csv (per epoch) + metrics.json (summary, per-block L1 norms), curves.png,
l1_norms.png, report.pdf; checkpoint.pt (git-ignored) after every epoch, written atomically;
``--resume`` continues the latest session of that model from its checkpoint.

Backends: ``eager`` (nn.Modules + torch.optim.Adam), ``compile`` (torch.compile of the forward),
``triton`` (the fused kernels through models.deep_mlp.FusedTrainer: forward kernel, backward kernel,
fused Adam; ``--graph`` replays each step from a CUDA graph).

--suite steptime times one training step (batch 1024, Adam) per model, depth and backend through the
shared harness (eager, compile up to --compile-max-depth, triton, triton+graph) and, before timing,
checks that Triton and eager losses agree within 1e-4 relative after --steps steps from the same
initial weights on the same batches (status "wrong" otherwise). Rows: results/<device>/sgemm*.csv.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import triton_kernels  # noqa: F401  (interpreter switch before triton loads)
from bench.data import sgemm as sgemm_data
from models.deep_mlp import parse_name
from triton_kernels.runtime import INTERPRET

from ..cli import argument_parser, cpu_notice, guard_cpu
from ..results import local_dir
from .report import steptime_lines, suite_report
from .session import train_session
from .study import DEPTHS, STUDY_MODELS, SUITE, family_depths
from .suites import suite_depth, suite_steptime

REPO = Path(__file__).resolve().parents[2]
TRAINING_RESULTS = REPO / "training_results"
SMOKE_MODEL = "GloNet4"                     # --suite train without --model, in a smoke run
SMOKE = {"epochs": 1, "depths": [2, 4], "steps": 3}   # a smoke run (--quick)
SMOKE_INTERPRETER = {"max_rows": 240, "batch": 32, "depths": [2]}  # ... in the CPU interpreter (about a minute)
INTERPRETER_LAYER_ROW_S = 2e-3  # rough: one layer of one row of a fused training step in the CPU interpreter


def parse_args(argv=None) -> argparse.Namespace:
    p = argument_parser("bench.sgemm", __doc__.split("\n\n")[0], raw=False)
    p.add_argument("--suite", choices=("train", "depth", "steptime", "report"), default="train",
                   help="report: the depth study's tables from the finished sessions under --results-dir")
    p.add_argument("--model", default=None, help="e.g. GloNet1000, ResNetMLP100, MLP10 (--suite train)")
    p.add_argument("--models", default=",".join(STUDY_MODELS), help="model families for the suites")
    p.add_argument("--depths", default=None, help=f"comma-separated depths (default {','.join(map(str, DEPTHS))})")
    p.add_argument("--epochs", type=int, default=None, help="default 200 (smoke run: 1)")
    p.add_argument("--backend", choices=("eager", "compile", "triton"), default="triton")
    p.add_argument("--backends", default=None, help="steptime: comma-separated harness backends")
    p.add_argument("--graph", action="store_true", help="triton: replay each training step from a CUDA graph")
    p.add_argument("--batch", type=int, default=None, help="default 1024 (smoke run in the interpreter: 32)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0, help="L2 regularisation (added to the gradient)")
    p.add_argument("--width", type=int, default=16, choices=(16, 32, 64))
    p.add_argument("--precision", choices=("ieee", "tf32"), default="ieee", help="fp32 dot precision (triton)")
    p.add_argument("--target", choices=sgemm_data.TARGETS, default="log")
    p.add_argument("--data", default=None, help="SGEMM csv(.gz) or directory (default .data/sgemm, "
                                                "then ../shared/data/sgemm)")
    p.add_argument("--download", action="store_true", help="fetch the SGEMM data into .data/sgemm first "
                                                           "(skipped when present)")
    p.add_argument("--max-rows", type=int, default=None, help="use a seeded subset of N rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue the latest session from its checkpoint")
    p.add_argument("--results-dir", default=None, help="where session folders go (default training_results/; "
                                                       "smoke runs: .local/training_results/)")
    p.add_argument("--steps", type=int, default=None, help="steptime: steps of the loss-agreement check (100)")
    p.add_argument("--compile-max-depth", type=int, default=100, help="steptime: compile only up to this depth")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny subset, 1 epoch, depths 2,4 (--suite "
                                                        f"train: {SMOKE_MODEL} unless --model)")
    p.add_argument("--out", default=None, help="rows directory (default results/<device>/)")
    p.add_argument("--show", action="store_true", help="print the committed GPU results instead of running")
    p.add_argument("--no-write", action="store_true", help="rows: print only")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    a.tiny = INTERPRET and not a.full
    a.smoke = a.quick or a.tiny
    if a.suite == "train" and not a.model and not a.show:
        if not a.smoke:
            p.error("--model is required (e.g. --model GloNet1000), or use --quick, --suite depth / steptime")
        a.model = SMOKE_MODEL
    if a.model:
        try:
            parse_name(a.model)
        except ValueError as e:
            p.error(str(e))
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    for m in a.models:
        try:
            parse_name(f"{m}2")
        except ValueError:
            p.error(f"--models: unknown family {m!r} (GloNet, ResNetMLP, MLP)")
    if a.depths:
        try:
            a.depths = [int(d) for d in a.depths.split(",")]
        except ValueError:
            p.error(f"--depths: expected comma-separated integers, got {a.depths!r}")
    else:
        a.depths = list((SMOKE_INTERPRETER if INTERPRET else SMOKE)["depths"]) if a.smoke else list(DEPTHS)
    if a.epochs is None:
        a.epochs = SMOKE["epochs"] if a.smoke else 200
    interpreter_smoke = a.smoke and INTERPRET
    if a.max_rows is None and interpreter_smoke:
        a.max_rows = SMOKE_INTERPRETER["max_rows"]
    if a.batch is None:
        a.batch = SMOKE_INTERPRETER["batch"] if interpreter_smoke else 1024
    if a.steps is None:
        a.steps = SMOKE["steps"] if (a.smoke or INTERPRET) else 100
    if a.batch < 2:
        p.error("--batch must be >= 2")
    if a.graph and not torch.cuda.is_available():
        a.graph = False  # no CUDA graphs in the interpreter
    if a.download and a.data:
        p.error("--download fetches into .data/sgemm; leave out --data")
    if a.results_dir is None:
        a.results_dir = str(local_dir("training_results") if a.smoke else TRAINING_RESULTS)
    return a


def estimate_s(args) -> float:
    """Rough CPU-interpreter time of the run: fused training steps cost ~ depth x rows (eager is cheap)."""
    rows = (args.max_rows or 241600) * 0.8
    if args.suite == "train":
        names = [args.model]
    else:
        names = family_depths(args)
    depth = sum(parse_name(n)[1] for n in names)
    if args.suite == "steptime":
        return depth * args.batch * INTERPRETER_LAYER_ROW_S * (2 * args.steps + 8)
    if args.backend != "triton":
        return 0.0
    return depth * rows * args.epochs * INTERPRETER_LAYER_ROW_S


def data_path(args) -> str | None:
    """--data, or with --download the folder bench.data.fetch puts the SGEMM data in (fetched if missing)."""
    if not args.download:
        return args.data
    from bench.data.fetch import fetch  # (imported only when asked for)

    return str(fetch("sgemm", REPO / ".data"))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.show:
        from ..cli import show

        return show("sgemm", None)
    from .. import results

    args.data = data_path(args)
    if INTERPRET and args.suite != "report":
        what = {"train": f"{args.model}", "depth": f"{len(family_depths(args))} models",
                "steptime": f"{len(family_depths(args))} models"}[args.suite]
        what += f", {args.epochs} epoch(s)" if args.suite != "steptime" else f", {args.steps} check steps"
        what += f", {args.max_rows or 'all'} rows, batch {args.batch}"
        if args.tiny:
            cpu_notice("bench.sgemm", f"--suite {args.suite}: {what}; sessions in {args.results_dir}"
                       if args.suite != "steptime" else f"--suite steptime: {what}")
        else:
            guard_cpu(estimate_s(args), f"--suite {args.suite}: {what}", True, "bench.sgemm")
    if args.suite == "train":
        s = train_session(args, args.model, progress=not args.no_progress)
        print(json.dumps({k: v for k, v in s.items() if not isinstance(v, list)}, indent=1))
        return 0
    rows = {"depth": suite_depth, "report": suite_report}.get(args.suite, suite_steptime)(args)
    if args.suite == "steptime":
        print("\n".join(steptime_lines(rows)))
    if not args.no_write:
        path = results.write_rows(rows, args.out, SUITE, tag=args.suite)
        print(f"wrote {len(rows)} rows to {path}")
    return 0

