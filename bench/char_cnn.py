"""The Char-CNN study (Zhang, Zhao & LeCun 2015, small model, AG News): inference throughput and latency
per batch size, dtype and backend, checked against eager fp32 on real text; the optimisation ladder; the
per-layer latency breakdown; and the training that makes the weights.

    python -m bench.char_cnn [--batches 64,128,256,512,1024,2048] [--dtype bfloat16]
                             [--backends eager,compile,triton,triton+graph] [--ladder-batch 512]
                             [--no-ladder] [--no-layers] [--weights PATH] [--data DIR] [--synthetic]
                             [--repeat 5] [--out DIR] [--tag NAME] [--show]
    python -m bench.char_cnn train [--epochs 60] [--batch 128] [--lr 3e-5] [--optimizer adam|sgd]
                             [--schedule cosine|halve] [--shift 100] [--weight-decay 0] [--init gaussian|he]
                             [--init-std 0.02] [--backend eager|triton] [--weights PATH] [--checkpoint PATH]
                             [--restart]

Inference rows (suite char_cnn, case "inference", params with "batch"): latency_ms (one batch, median of
interleaved rounds with the L2 flushed before each call: the harness's time_ms), inputs_per_s, the
harness's TFLOP/s (useful FLOPs: the first layer counted as a gather, 0.49 GFLOP per input), GB/s, % of
the roofline (limit_inputs_per_s: the input rate at max(FLOPs / bf16 GEMM peak, bytes / copy bandwidth)
with the activations written and read once), speedups (same process), and on the eval rows of AG News:
argmax_agreement and logit_rel_err against eager fp32 (TF32 off), accuracy against the labels. The timed
input is the eval text, encoded and tiled to the batch: eager and compile read its one-hot (B, 70, 1014)
made beforehand, the Triton backends its uint8 indices (1 KB per input). --synthetic: random indices,
no data needed (agreement then on random text).

The ladder (case "ladder", at --ladder-batch): eager fp32 -> eager bf16 -> torch.compile -> Triton per-op
-> Triton fused -> + CUDA graph, with the seed study's figures beside it (2.12 inputs/s at its start,
15,872 at its end on 4 nodes x 4 GPUs); several GPUs: bench/char_cnn_dp.py (suite char_cnn_dp).
The per-layer breakdown (case "layer"): each stage of the forward (models.char_cnn.CharCNN.blocks) timed
on its own input, replayed from a CUDA graph (device time: small stages timed from Python would show the
host's launch time), eager and both Triton paths.

Weights: --weights (default .data/char_cnn/weights.pt, made by `train`); without the file the paper's
random initialisation (every row says so). `train` trains on AG News's train.csv when present, else
(the shared data) on a seeded 6,600-row part of the test split, evaluating on the other 1,000 rows,
and every accuracy row says which (the paper's small model: 84.35 % with the full train set).
In the CPU interpreter both default to a tiny model and configuration (not performance figures).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional

from triton_kernels.runtime import INTERPRET, atomic_write_text, default_device, device_name
from models.char_cnn import LENGTH, PAD, CharCNN, encode, one_hot
from triton_kernels.testing import rel_err

from . import results
from .harness import (CudaGraphed, RunConfig, load_ceilings, median, quantile, register_backend, roofline_floor_ms,
                      run_case, time_call, Case)

SUITE = "char_cnn"
REPO = Path(__file__).resolve().parents[1]
DEFAULT_WEIGHTS = REPO / ".data" / "char_cnn" / "weights.pt"
DEFAULT_CHECKPOINT = REPO / "training_results" / "char_cnn" / "checkpoint.pt"
PAPER_ACCURACY = 84.35  # small model, full AG News train set (Zhang et al. 2015, Table 4: 15.65 % error)
SEED_STUDY = ((0, "seed study start (one GPU, per-op CUDA kernels, unbatched)", 2.12),
              (6, "seed study end (4 nodes x 4 GPUs, batched, async MPI scatter/compute/gather)", 15872.0))
LADDER = (("eager fp32", torch.float32, "eager"), ("eager bf16", torch.bfloat16, "eager"),
          ("torch.compile bf16", torch.bfloat16, "compile"), ("Triton per-op bf16", torch.bfloat16, "triton-per-op"),
          ("Triton fused bf16", torch.bfloat16, "triton"), ("+ CUDA graph", torch.bfloat16, "triton+graph"),
          ("several GPUs", torch.bfloat16, "char_cnn_dp"))
FULL_DIMS = {"length": LENGTH, "channels": 256, "fc": 1024, "num_classes": 4}
TINY_DIMS = {"length": 123, "channels": 8, "fc": 16, "num_classes": 4}  # CPU interpreter
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "fp32": torch.float32,
          "bf16": torch.bfloat16, "fp16": torch.float16}


@register_backend("triton-per-op")
def _per_op(case: Case):
    return case.fns.get("triton-per-op")


# ----------------------------------------------------------------------------------------------------
# Data and weights
# ----------------------------------------------------------------------------------------------------
def load_text(data: str | None, eval_rows: int = 1000, seed: int = 0) -> dict:
    """AG News train / eval texts and labels, and the sentence that says where they came from."""
    from bench.data import ag_news

    ds = ag_news.load(data, eval_rows=eval_rows, seed=seed)
    return {"train_texts": ds.train.texts(), "train_labels": torch.from_numpy(ds.train.labels),
            "eval_texts": ds.test.texts(), "eval_labels": torch.from_numpy(ds.test.labels),
            "classes": ds.classes, "source": ds.source, "split_of_test": ds.split_of_test, "seed": seed}


def how_trained(data: dict, n_train: int, n_eval: int) -> str:
    """The sentence every accuracy carries: which rows trained the weights and which evaluated them."""
    if data["split_of_test"]:
        return (f"trained on {n_train} rows of AG News's test split, evaluated on {n_eval} other rows of it "
                f"(seeded class-stratified split, seed {data['seed']}; train.csv absent)")
    return f"trained on {n_train} rows of AG News train.csv, evaluated on {n_eval} rows of test.csv"


def save_atomic(obj, path: Path) -> None:
    """torch.save to a temporary file beside ``path``, then rename: a reader never sees a partial file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_weights(path: str | Path | None, dims: dict, seed: int = 0) -> tuple[dict, dict, str]:
    """(state_dict, dims, provenance sentence): the trained weights at ``path`` if it exists, else the
    paper's Gaussian initialisation with ``seed``."""
    p = Path(path) if path else DEFAULT_WEIGHTS
    if p.is_file():
        blob = torch.load(p, map_location="cpu", weights_only=False)
        prov = blob.get("provenance", {})
        how = prov.get("how", "unknown training")
        acc = prov.get("eval_accuracy")
        note = f"weights {p.name}: {how}" + (f"; held-out accuracy {acc:.2f} %" if acc is not None else "")
        return blob["state_dict"], blob["dims"], note
    if path:
        raise SystemExit(f"--weights {p}: no such file (make it with `python -m bench.char_cnn train`)")
    torch.manual_seed(seed)
    model = CharCNN(**dims)
    return model.state_dict(), dims, f"untrained weights (the paper's N(0, 0.05^2) initialisation, seed {seed})"


# ----------------------------------------------------------------------------------------------------
# Inference cases
# ----------------------------------------------------------------------------------------------------
def _inference_fns(model: CharCNN, compile_fn) -> dict:
    """Backend name -> fn(indices, onehot) -> logits, all on the SAME parameters, under no_grad."""
    def mode(name):
        blocks = model.blocks(name)

        def fn(idx, oh):
            with torch.no_grad():
                h = idx if name != "eager" else oh
                for _, block in blocks:
                    h = block(h)
                return h
        return fn

    return {"eager": mode("eager"), "compile": compile_fn, "triton": mode("triton"),
            "triton-per-op": mode("triton-per-op")}


class _LazyCompile:
    """torch.compile(the eager forward, dynamic=False), built at the first call after a dynamo reset, so the
    harness's first-call time is this case's compile time alone."""

    def __init__(self, model: CharCNN):
        self.model, self.fn = model, None

    def __call__(self, idx, oh):
        if self.fn is None:
            torch._dynamo.reset()
            self.fn = torch.compile(self.model.forward_eager, dynamic=False)
        with torch.no_grad():
            return self.fn(oh)


def build_case(model: CharCNN, ref: CharCNN, dtype, batch: int, text_idx: torch.Tensor, input_name: str) -> Case:
    """The inference case: a batch of ``text_idx`` rows (tiled), reference = eager fp32 logits."""
    es = torch.tensor([], dtype=dtype).element_size()
    n_params = model.parameter_count()

    def inputs(seed, device):
        rows = (torch.arange(batch) + seed * batch) % text_idx.shape[0]
        idx = text_idx[rows.to(text_idx.device)].to(device)
        return idx, one_hot(idx, dtype, model.alphabet_size)

    def reference(idx, oh):
        with torch.no_grad():
            return ref.forward_eager(idx).double()

    act = model.activation_bytes_per_input(es)
    return Case(suite=SUITE, name="inference",
                params={"batch": batch, "length": model.length, "input": input_name}, dtype=dtype,
                inputs=inputs, fns=_inference_fns(model, _LazyCompile(model)), reference=reference,
                error=lambda out, r: rel_err(out.float(), r),
                tol=1e-3 if dtype == torch.float32 else 0.1, kind="model",
                flops=model.flops_per_input() * batch,
                bytes=float(batch * (2 * act + model.length) + n_params * es))


def derived_rows(rows: list[dict], case: Case, note: str) -> list[dict]:
    """inputs_per_s and latency_ms from each time_ms row; limit_inputs_per_s from the ceilings."""
    batch = case.params["batch"]
    out = []
    floor = roofline_floor_ms(case, load_ceilings()) if torch.cuda.is_available() else None
    for r in rows:
        r["note"] = f"{r['note']}; {note}" if r.get("note") else note
        if r["metric"] != "time_ms" or r["value"] is None:
            continue
        t, p20, p80 = r["value"], r["p20"], r["p80"]
        mk = lambda metric, value, unit, lo=None, hi=None: results.make_row(
            SUITE, case.name, case.params, case.dtype, r["backend"], metric, value, unit, p20=lo, p80=hi,
            error_vs_fp64=r["error_vs_fp64"], status=r["status"], note=r["note"])
        out.append(mk("inputs_per_s", batch / (t * 1e-3), "inputs/s", batch / (p80 * 1e-3), batch / (p20 * 1e-3)))
        out.append(mk("latency_ms", t, "ms", p20, p80))
        if floor:
            out.append(mk("limit_inputs_per_s", batch / (floor * 1e-3), "inputs/s"))
    return out


def eval_logits(fn, idx: torch.Tensor, batch: int, dtype, alphabet: int) -> torch.Tensor:
    """fn over every row of idx in chunks of ``batch`` (the last chunk padded by wrapping, so every call
    has the timed shape); fp32 logits (N, classes)."""
    n = idx.shape[0]
    rows = torch.arange(math.ceil(n / batch) * batch, device=idx.device) % n
    outs = []
    for s in range(0, rows.numel(), batch):
        chunk = idx[rows[s:s + batch]]
        outs.append(fn(chunk, one_hot(chunk, dtype, alphabet)).float())
    return torch.cat(outs)[:n]


def agreement_rows(case: Case, backends, fns, eval_idx, eval_labels, ref_logits, note: str,
                   alphabet: int) -> list[dict]:
    """argmax_agreement (%), logit_rel_err vs eager fp32 and accuracy (%) on the eval rows, per backend
    (a +graph variant replays the same kernels: its rows are its base backend's)."""
    out = []
    for b in backends:
        base = b.split("#")[0].replace("+graph", "")
        if base != b or base not in fns:
            continue
        try:
            logits = eval_logits(fns[base], eval_idx, case.params["batch"], case.dtype, alphabet)
        except Exception as e:  # noqa: BLE001 - a failing backend already has its timing row
            out.append(results.make_row(SUITE, case.name, case.params, case.dtype, b, "argmax_agreement", None, "pct",
                                        status="error", note=f"{type(e).__name__}: {e}"[:300]))
            continue
        agree = 100.0 * (logits.argmax(1) == ref_logits.argmax(1)).float().mean().item()
        err = rel_err(logits, ref_logits)
        kw = dict(error_vs_fp64=err, note=f"{len(eval_idx)} eval rows vs eager fp32; {note}")
        out.append(results.make_row(SUITE, case.name, case.params, case.dtype, b, "argmax_agreement",
                                    agree, "pct", **kw))
        out.append(results.make_row(SUITE, case.name, case.params, case.dtype, b, "logit_rel_err", err, "", **kw))
        if eval_labels is not None:
            acc = 100.0 * (logits.argmax(1).cpu() == eval_labels).float().mean().item()
            out.append(results.make_row(SUITE, case.name, case.params, case.dtype, b, "accuracy", acc, "pct", **kw))
    return out


def ladder_rows(rows: list[dict], batch: int) -> list[dict]:
    """The ladder as rows: each rung's inputs_per_s at ``batch`` (from the inference rows), the seed
    study's figures beside (reference_inputs_per_s)."""
    out = []
    for i, (label, dtype, backend) in enumerate(LADDER):
        params = {"batch": batch, "rung": i, "label": label}
        hit = [r for r in rows if r["case"] == "inference" and r["metric"] == "inputs_per_s"
               and r["backend"] == backend and r["dtype"] == str(dtype).replace("torch.", "")
               and json.loads(r["params"])["batch"] == batch]
        if hit:
            r = hit[-1]
            out.append(results.make_row(SUITE, "ladder", params, dtype, backend, "inputs_per_s", r["value"], "inputs/s",
                                        p20=r["p20"], p80=r["p80"],
                                        error_vs_fp64=r["error_vs_fp64"], status=r["status"], note=label))
        else:
            why = ("torchrun ... -m bench.char_cnn_dp (suite char_cnn_dp)" if backend == "char_cnn_dp"
                   else "not run in this invocation")
            out.append(results.make_row(SUITE, "ladder", params, dtype, backend, "inputs_per_s", None, "inputs/s",
                                        status="unsupported", note=f"{label}: {why}"))
    for rung, label, value in SEED_STUDY:
        out.append(results.make_row(SUITE, "ladder", {"batch": batch, "rung": rung, "label": label}, "", "seed study",
                                    "reference_inputs_per_s", value, "inputs/s", note=label))
    return out


def _stage_call(block, x):
    """The stage as a zero-argument call: on a GPU replayed from a CUDA graph (its device time, without the
    host's launch time, which would dominate small stages timed alone), else called directly."""
    if not torch.cuda.is_available():
        return lambda: block(x)
    graph = CudaGraphed(lambda t: block(t), (x,))
    return lambda: graph(x)


def layer_rows(model: CharCNN, dtype, batch: int, text_idx: torch.Tensor, rep: int) -> list[dict]:
    """Each stage of the forward timed on its own input (captured by one forward pass), per mode."""
    device = default_device()
    idx = text_idx[torch.arange(batch) % text_idx.shape[0]].to(device)
    flops = model.block_flops()
    how = "stage alone, CUDA-graph replay, L2 flushed" if torch.cuda.is_available() else "stage alone"
    out = []
    for mode in ("eager", "triton-per-op", "triton"):
        try:
            h = one_hot(idx, dtype, model.alphabet_size) if mode == "eager" else idx
            stages = []
            with torch.no_grad():
                for name, block in model.blocks(mode):
                    stages.append((name, block, h))
                    h = block(h)
                times = {name: time_call(_stage_call(block, x), rep) for name, block, x in stages}
        except Exception as e:  # noqa: BLE001 - a failing mode is a row; the others go on
            out.append(results.make_row(SUITE, "layer", {"batch": batch, "layer": "all"}, dtype,
                                        mode, "latency_ms", None,
                                        "ms", status="error", note=f"{type(e).__name__}: {e}"[:300]))
            continue
        total = sum(median(ts) for ts in times.values())
        for name, ts in list(times.items()) + [("total", None)]:
            params = {"batch": batch, "layer": name}
            if ts is None:
                out.append(results.make_row(SUITE, "layer", params, dtype, mode, "latency_ms", total, "ms",
                                            note="sum of the stage medians"))
                continue
            med = median(ts)
            out.append(results.make_row(SUITE, "layer", params, dtype, mode, "latency_ms", med, "ms",
                                        p20=quantile(ts, 0.2), p80=quantile(ts, 0.8), note=how))
            out.append(results.make_row(SUITE, "layer", params, dtype, mode, "share_pct", 100 * med / total, "%"))
            out.append(results.make_row(SUITE, "layer", params, dtype, mode, "tflops", flops[name] * batch / med / 1e9,
                                        "TFLOP/s", note="useful FLOPs (block 1 as a gather)"))
    return out


# ----------------------------------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------------------------------
def bench_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.char_cnn", description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default=None, help="comma-separated (default 64,...,2048; CPU: 2)")
    p.add_argument("--dtype", default=None, help="comma-separated (default bfloat16; CPU: float32)")
    p.add_argument("--backends", default=None,
                   help="default eager,compile,triton,triton+graph (CPU: eager,triton,triton-per-op)")
    p.add_argument("--ladder-batch", type=int, default=None, help="batch of the ladder and per-layer rows (512)")
    p.add_argument("--no-ladder", action="store_true")
    p.add_argument("--no-layers", action="store_true")
    p.add_argument("--weights", default=None, help=f"trained weights (default {DEFAULT_WEIGHTS.relative_to(REPO)})")
    p.add_argument("--data", default=None, help="AG News directory (default .data/ag_news, ../shared/data/ag_news)")
    p.add_argument("--synthetic", action="store_true", help="random indices: timing without data")
    p.add_argument("--eval-rows", type=int, default=None, help="eval rows for agreement (default all 1,000; CPU 6)")
    p.add_argument("--repeat", type=int, default=None, help="interleaved timing rounds (default: the harness's)")
    p.add_argument("--out", default=None, help="results directory (default results/<device>/)")
    p.add_argument("--tag", default=None, help="write char_cnn-<tag>.csv (default char_cnn.csv)")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--show", action="store_true", help="print the committed GPU rows of the suite")
    p.add_argument("--full", action="store_true", help="CPU interpreter: the full model (default: a tiny one)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    cpu = not torch.cuda.is_available()
    a.batches = [int(b) for b in (a.batches or ("2" if cpu else "64,128,256,512,1024,2048")).split(",")]
    a.dtypes = [DTYPES[d.strip()] for d in (a.dtype or ("float32" if cpu else "bfloat16")).split(",")]
    a.backends = [b.strip() for b in (a.backends or ("eager,triton,triton-per-op" if cpu else
                                                    "eager,compile,triton,triton+graph")).split(",")]
    a.ladder_batch = a.ladder_batch or (a.batches[-1] if cpu else 512)
    a.eval_rows = a.eval_rows or (6 if cpu else None)
    return a


def plan(args) -> list[tuple[torch.dtype, int, list[str]]]:
    """(dtype, batch, backends) of every case: the sweep, plus what the ladder needs at its batch (eager
    fp32, the per-op rung)."""
    out = [(dt, b, list(args.backends)) for dt in args.dtypes for b in args.batches]
    if not args.no_ladder:
        for _, dtype, backend in LADDER:
            if backend == "char_cnn_dp" or (INTERPRET and "graph" in backend) or (INTERPRET and dtype != torch.float32):
                continue
            hit = [e for e in out if e[0] == dtype and e[1] == args.ladder_batch]
            if hit and backend not in hit[0][2]:
                hit[0][2].append(backend)
            elif not hit:
                out.append((dtype, args.ladder_batch, [backend]))
    return out


def bench_main(argv) -> int:
    args = bench_args(argv)
    if args.show:
        from .cli import show

        return show(SUITE, args.out)
    device = default_device()
    torch.backends.cuda.matmul.allow_tf32 = False  # eager fp32 is the reference: true fp32
    torch.backends.cudnn.allow_tf32 = False
    dims = TINY_DIMS if INTERPRET and not args.full else FULL_DIMS
    state, dims, weights_note = load_weights(args.weights, dims, args.seed)
    eval_labels = None
    if args.synthetic:
        g = torch.Generator().manual_seed(args.seed)
        text_idx = torch.randint(0, 71, (args.eval_rows or 1000, dims["length"]), generator=g, dtype=torch.uint8)
        input_name, data_note = "synthetic", "random character indices"
    else:
        data = load_text(args.data)
        text_idx = encode(data["eval_texts"], dims["length"])
        eval_labels = data["eval_labels"]
        if args.eval_rows:
            text_idx, eval_labels = text_idx[:args.eval_rows], eval_labels[:args.eval_rows]
        input_name, data_note = "ag_news", f"AG News eval rows ({data['source']})"
    text_idx = text_idx.to(device)
    note = f"{weights_note}; input {data_note}"
    ref = CharCNN(**dims).to(device).eval().requires_grad_(False)
    ref.load_state_dict(state)
    with torch.no_grad():
        ref_logits = eval_logits(lambda idx, oh: ref.forward_eager(oh), text_idx, 256, torch.float32,
                                 ref.alphabet_size)
    models = {}
    rows: list[dict] = []
    save = (lambda: None) if args.no_write else (lambda: results.write_rows(rows, args.out, SUITE, tag=args.tag))
    print(f"Char-CNN on {device_name(device)}: {note}" + (f"  [{results.CPU_NOTE}]" if INTERPRET else ""), flush=True)
    for dtype, batch, backends in plan(args):
        if dtype not in models:
            models[dtype] = CharCNN(**dims).to(device).eval().requires_grad_(False)
            models[dtype].load_state_dict(state)
            models[dtype].to(dtype)
        case = build_case(models[dtype], ref, dtype, batch, text_idx, input_name)
        print(f"[char_cnn] batch {batch} {str(dtype)[6:]}: {', '.join(backends)}", flush=True)
        got = run_case(case, RunConfig(backends=backends, rounds=args.repeat, seed=args.seed))
        rows += got + derived_rows(got, case, note)
        rows += agreement_rows(case, backends, case.fns, text_idx, eval_labels, ref_logits, note, ref.alphabet_size)
        save()
    if not args.no_ladder:
        rows += ladder_rows(rows, args.ladder_batch)
    if not args.no_layers:
        dtype = next((d for d in args.dtypes if d != torch.float32), args.dtypes[0])
        rows += layer_rows(models[dtype], dtype, args.ladder_batch, text_idx, 2 if INTERPRET else 20)
    save()
    print_summary(rows)
    return 0 if all(r["status"] in ("ok", "unsupported") for r in rows) else 1


def print_summary(rows: list[dict]) -> None:
    import pandas as pd

    df = pd.DataFrame(rows)
    df["batch"] = df["params"].map(lambda p: json.loads(p).get("batch"))
    inf = df[(df["case"] == "inference") & df["metric"].isin(["inputs_per_s", "latency_ms", "argmax_agreement",
                                                             "pct_roofline", "speedup_vs_compile"])]
    if not inf.empty:
        wide = inf.pivot_table(index=["dtype", "batch", "backend"], columns="metric", values="value", aggfunc="last")
        with pd.option_context("display.width", 200, "display.float_format", lambda v: f"{v:.4g}"):
            print("\n== inference", "(CPU interpreter: not performance figures)" if INTERPRET else "", "==")
            print(wide.to_string())
    lad = df[(df["case"] == "ladder")]
    if not lad.empty:
        print("\n== ladder ==")
        for _, r in lad.iterrows():
            v = f"{r['value']:.4g}" if r["value"] is not None and r["value"] == r["value"] else "-"
            print(f"  {json.loads(r['params'])['label']:<70} {v:>10} inputs/s  {r['status']}")
    lay = df[(df["case"] == "layer") & (df["metric"] == "latency_ms")].copy()
    if not lay.empty:
        lay["layer"] = lay["params"].map(lambda p: json.loads(p)["layer"])
        print("\n== per-layer latency (ms) ==")
        print(lay.pivot_table(index="layer", columns="backend", values="value", aggfunc="last", sort=False)
              .to_string(float_format=lambda v: f"{v:.4g}"))


# ----------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------
def train_args(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.char_cnn train",
                                description="Train the small Char-CNN on AG News and save the benchmark's weights")
    p.add_argument("--epochs", type=int, default=None, help="default 60 with adam, 30 with sgd (CPU interpreter: 1)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=None, help="default 3e-5 (adam), 0.01 (sgd)")
    p.add_argument("--momentum", type=float, default=0.9, help="sgd only")
    p.add_argument("--halve-every", type=int, default=None,
                   help="epochs between halvings of the lr, at most 10 halvings (default 5 for adam, 3 for sgd)")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                   help="adam (default); sgd is the paper's recipe (momentum 0.9, lr 0.01 halved every 3 epochs), "
                        "which on 6,600 rows collapsed to a constant prediction (loss ln 4) within 6 epochs on an "
                        "H100")
    p.add_argument("--init-std", type=float, default=0.02,
                   help="std of the Gaussian initialisation of every conv / linear weight and bias (default 0.02, "
                        "the paper's large model's: with its small model's 0.05 training stays at chance, "
                        "results/NOTES.md)")
    p.add_argument("--init", choices=("gaussian", "he"), default="gaussian",
                   help="gaussian: N(0, --init-std^2) for every conv / linear weight and bias, as the paper; he: "
                        "N(0, 2 / fan_in) weights and zero biases")
    p.add_argument("--schedule", choices=("halve", "cosine"), default=None,
                   help="halve: the lr halves every --halve-every epochs (the paper's form; default with sgd); "
                        "cosine: from --lr to 0 over --epochs (default with adam; a resumed run follows the --epochs it is "
                        "given)")
    p.add_argument("--weight-decay", type=float, default=0.0,
                   help="decoupled weight decay (AdamW) with adam, L2 with sgd (default 0)")
    p.add_argument("--shift", type=int, default=None,
                   help="augmentation: move each training text a random 0..N characters later in its window "
                        "(the padding moves to the front; default 100 with adam, 0 with sgd)")
    p.add_argument("--backend", choices=("eager", "triton"), default="eager")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--weights", default=None, help=f"where to save (default {DEFAULT_WEIGHTS.relative_to(REPO)})")
    p.add_argument("--save-dtype", choices=("bfloat16", "float32"), default="bfloat16",
                   help="dtype of the saved weights (default bfloat16: the numbers the bf16 backends run, so eager "
                        "fp32 and every bf16 backend start from the same weights; the held-out accuracy is measured "
                        "after the rounding; the checkpoint keeps full precision)")
    p.add_argument("--checkpoint", default=None, help=f"default {DEFAULT_CHECKPOINT.relative_to(REPO)}")
    p.add_argument("--restart", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--data", default=None)
    p.add_argument("--train-limit", type=int, default=None, help="use the first N training rows")
    p.add_argument("--eval-limit", type=int, default=None, help="use the first N eval rows")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", default=None, help="results directory for the training rows")
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--full", action="store_true", help="CPU: the full model and data (default: a tiny model, "
                                                       "16 training rows)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    sgd = a.optimizer == "sgd"
    if a.epochs is None:
        a.epochs = 1 if INTERPRET else 30 if sgd else 60
    if a.lr is None:
        a.lr = 0.01 if sgd else 3e-5
    if a.schedule is None:
        a.schedule = "halve" if sgd else "cosine"
    if a.shift is None:
        a.shift = 0 if sgd else 100
    if a.halve_every is None:
        a.halve_every = 3 if sgd else 5
    if a.epochs < 1 or a.batch < 1 or not a.lr > 0 or not a.init_std > 0:
        p.error("--epochs, --batch, --lr and --init-std must be positive")
    if a.weight_decay < 0 or a.shift < 0:
        p.error("--weight-decay and --shift must not be negative")
    if INTERPRET and not a.full:
        a.train_limit = a.train_limit or 16
        a.eval_limit = a.eval_limit or 8
    return a


def shifted(idx: torch.Tensor, max_shift: int, generator: torch.Generator) -> torch.Tensor:
    """Each row of the (B, L) character indices moved a random 0..max_shift positions later in its window
    (characters pushed past the end drop off; the vacated front is padding)."""
    if max_shift == 0:
        return idx
    shift = torch.randint(0, max_shift + 1, (idx.shape[0], 1), generator=generator).to(idx.device)
    pos = torch.arange(idx.shape[1], device=idx.device)[None, :] - shift
    return torch.where(pos >= 0, idx.gather(1, pos.clamp(min=0)), torch.full_like(idx, PAD))


def recipe(args: argparse.Namespace) -> str:
    """The training recipe in words (it goes into the weights' provenance and every row that uses them)."""
    schedule = (f"halved every {args.halve_every} epochs" if args.schedule == "halve" else "cosine to 0")
    init = f"init N(0, {args.init_std}^2)" if args.init == "gaussian" else "He init"
    extra = (f", weight decay {args.weight_decay}" if args.weight_decay else "") + (
        f", random shift 0-{args.shift}" if args.shift else "")
    return (f"{args.epochs} epochs, batch {args.batch}, {args.optimizer} lr {args.lr} {schedule}, {init}{extra}, "
            f"{args.backend} {args.dtype}")


def lr_at(args: argparse.Namespace, epoch: int) -> float:
    if args.schedule == "cosine":
        return args.lr * 0.5 * (1.0 + math.cos(math.pi * epoch / args.epochs))
    return args.lr * 0.5 ** min(epoch // args.halve_every, 10)


@torch.no_grad()
def accuracy(model: CharCNN, idx: torch.Tensor, labels: torch.Tensor, chunk: int = 500) -> float:
    was = model.training
    model.eval()
    correct = sum((model(idx[s:s + chunk]).argmax(1) == labels[s:s + chunk]).sum().item()
                  for s in range(0, idx.shape[0], chunk))
    model.train(was)
    return 100.0 * correct / max(1, idx.shape[0])


def train_main(argv) -> int:
    from tqdm import tqdm

    args = train_args(argv)
    device = default_device()
    dtype = DTYPES[args.dtype]
    dims = TINY_DIMS if INTERPRET and not args.full else FULL_DIMS
    data = load_text(args.data, seed=args.seed)
    x_train, y_train = encode(data["train_texts"], dims["length"]), data["train_labels"]
    x_eval, y_eval = encode(data["eval_texts"], dims["length"]), data["eval_labels"]
    if args.train_limit:
        x_train, y_train = x_train[:args.train_limit], y_train[:args.train_limit]
    if args.eval_limit:
        x_eval, y_eval = x_eval[:args.eval_limit], y_eval[:args.eval_limit]
    x_train, y_train, x_eval, y_eval = (t.to(device) for t in (x_train, y_train, x_eval, y_eval))
    config = {k: getattr(args, k) for k in ("batch", "lr", "momentum", "halve_every", "optimizer", "init_std",
                                            "init", "schedule", "weight_decay", "shift",
                                            "backend", "dtype", "seed", "train_limit", "eval_limit")}
    config.update(dims=dims, n_train=len(x_train), n_eval=len(x_eval))
    torch.manual_seed(args.seed)
    model = CharCNN(**dims, init_std=args.init_std, backend=args.backend)
    if args.init == "he":
        model.init_he()
    model.to(device=device, dtype=dtype)
    opt = (torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
           if args.optimizer == "sgd" else torch.optim.AdamW(model.parameters(), lr=args.lr,
                                                              weight_decay=args.weight_decay))
    ckpt = Path(args.checkpoint) if args.checkpoint else DEFAULT_CHECKPOINT
    start, log = 0, []
    if ckpt.is_file() and not args.restart:
        blob = torch.load(ckpt, map_location=device, weights_only=False)
        if blob["config"] != config:
            raise SystemExit(f"checkpoint {ckpt} was made with another configuration ({blob['config']}); pass "
                             f"--restart to start over or --checkpoint for another file")
        model.load_state_dict(blob["model"])
        opt.load_state_dict(blob["optimizer"])
        start, log = blob["epoch"], blob["log"]
        torch.set_rng_state(blob["rng"]["cpu"])
        if device.type == "cuda" and blob["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(blob["rng"]["cuda"])
        print(f"resuming from {ckpt} after epoch {start}", flush=True)
    n = x_train.shape[0]
    t_start = time.perf_counter()
    for epoch in range(start, args.epochs):
        lr = lr_at(args, epoch)
        for group in opt.param_groups:
            group["lr"] = lr
        epoch_rng = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        perm = torch.randperm(n, generator=epoch_rng).to(device)
        model.train()
        loss_sum = torch.zeros((), device=device)
        bar = tqdm(range(0, n, args.batch), desc=f"epoch {epoch + 1}/{args.epochs}", disable=args.no_progress,
                   leave=False, file=sys.stderr)
        for step, s in enumerate(bar):
            rows = perm[s:s + args.batch]
            x = shifted(x_train[rows], args.shift, epoch_rng)
            loss = functional.cross_entropy(model(x).float(), y_train[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * rows.numel()
            if step % 10 == 0:
                bar.set_postfix(loss=f"{loss.item():.4f}")
        entry = {"epoch": epoch + 1, "lr": lr, "train_loss": loss_sum.item() / n,
                 "eval_accuracy": accuracy(model, x_eval, y_eval), "seconds": time.perf_counter() - t_start}
        log.append(entry)
        print(f"epoch {epoch + 1}: lr {lr:.5f} train loss {entry['train_loss']:.4f} eval accuracy "
              f"{entry['eval_accuracy']:.2f} %", flush=True)
        rng = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state() if device.type == "cuda" else None}
        save_atomic({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1, "log": log,
                     "config": config, "rng": rng}, ckpt)
    final = log[-1]
    state = {k: v.detach().to(DTYPES[args.save_dtype]).cpu() for k, v in model.state_dict().items()}
    how, stored_accuracy = f"{how_trained(data, n, len(x_eval))}; {recipe(args)}", final["eval_accuracy"]
    if DTYPES[args.save_dtype] != dtype:  # (--dtype takes aliases such as fp32)
        model.load_state_dict(state)  # the saved numbers, cast back to the training dtype exactly
        stored_accuracy = accuracy(model, x_eval, y_eval)
        how += f"; stored in {args.save_dtype} ({final['eval_accuracy']:.2f} % held-out before the rounding)"
    prov = {"how": how, "eval_accuracy": stored_accuracy, "paper_accuracy": PAPER_ACCURACY, "log": log,
            "config": config, "save_dtype": args.save_dtype, "source": data["source"], **results.provenance()}
    weights = Path(args.weights) if args.weights else DEFAULT_WEIGHTS
    save_atomic({"state_dict": state, "dims": dims, "provenance": prov}, weights)
    print(f"weights -> {weights}: held-out accuracy {stored_accuracy:.2f} % ({how}; the paper's small "
          f"model: {PAPER_ACCURACY} % with the full train set)")
    if not args.no_write:
        note = f"{how}; the paper's small model: {PAPER_ACCURACY} % with the full train set"
        params = {"epochs": args.epochs, "batch": args.batch, "n_train": n, "n_eval": len(x_eval)}
        mk = lambda metric, value, unit: results.make_row(SUITE, "train", params, dtype, args.backend,
                                                          metric, value, unit, note=note)
        rows = [mk("eval_accuracy", stored_accuracy, "pct"), mk("train_loss", final["train_loss"], "nats"),
                mk("train_s", final["seconds"], "s")]
        path = results.write_rows(rows, args.out, SUITE, tag="train")
        atomic_write_text(path.with_name("char_cnn-weights.json"), json.dumps(prov, indent=1, default=str))
        print(f"rows -> {path}")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        return train_main(argv[1:])
    return bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
