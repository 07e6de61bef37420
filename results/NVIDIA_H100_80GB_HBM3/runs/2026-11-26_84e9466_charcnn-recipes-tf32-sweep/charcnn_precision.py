#!/usr/bin/env python3
"""Issue 17 diagnosis: where does the Char-CNN's bf16 argmax agreement with eager fp32 get lost?

Reference: eager fp32 (TF32 off for matmul and cuDNN) on the held-out AG News rows, chosen, encoded and
batched exactly as `python -m bench.char_cnn` does (bench.char_cnn.load_text / load_weights / eval_logits,
models.char_cnn.encode / one_hot; reference chunks of 256 rows as bench_main uses).

Every emulated variant runs the model's OWN eager forward (CharCNN.blocks("eager"), the stages the bench's
eager backend runs) in fp32 math, with
  * the parameters of chosen layers rounded to bf16 / fp16 and back to fp32 (state_dict values), and
  * forward hooks that round chosen layer outputs to bf16 / fp16 and back: module outputs (conv1..conv6,
    ln1, ln6, fc1..fc3, pre-activation) and the pooled block outputs (pool1 = block1, pool2 = block2,
    pool6 = block6 output; eval mode, so dropout is the identity).
Round-to-nearest is monotone and keeps 0, so it commutes with ReLU and MaxPool: rounding ln1 equals rounding
pool1, conv2 equals pool2, ln6 equals pool6 (a built-in check: those pairs must report identical rows).

Variants (ids as printed):
  ref-hooked  no rounding, through the hook machinery at the bench batch (sanity: 100 %, ~1e-7)
  a           weights bf16-rounded, activations fp32
  a16         weights fp16-rounded, activations fp32                                  (extra)
  b           weights fp32, every layer output rounded to bf16
  c:<point>   weights fp32, only <point>'s output rounded to bf16, for each point
  cw:<layer>  only <layer>'s parameters rounded to bf16, activations fp32             (extra)
  d           weights bf16-rounded, every layer output rounded to fp16
  e           eager bf16: model.to(torch.bfloat16), forward_eager (as the bench's eager bf16 backend)
  f           eager fp16: model.to(torch.float16)
  g           weights bf16-rounded, every layer output rounded to bf16, fp32 math
              (= the Triton per-op backend's rounding points: every kernel stores bf16, accumulates fp32)
  g-fused     as g without rounding conv1's output (the fused Triton block 1 never stores it)   (extra)
  g-keep:<s>  g with one stored tensor left fp32 (conv1, block1 = ln1/pool1, conv2 = conv2/pool2, conv3..6,
              block6 = ln6/pool6, fc1..3): which single fp32 intermediate would help        (extra)
  h           weights fp16-rounded, every layer output rounded to fp16, fp32 math (Triton fp16)  (extra)
  triton-*    the real Triton backends (bf16 fused / per-op, fp16 fused), GPU only, unless --no-triton

Per variant: argmax agreement (% of rows whose argmax equals the reference's) and the count of
disagreements ("flips"), the per-row relative logit error ||l - ref||_2 / ||ref||_2 (max, median), the
bench's global rel_err, and for the flipped rows the reference's top-2 margin (absolute and relative to the
row's logit scale max_j |ref_j|), plus how many of its flipped rows the eager bf16 (e) and Triton bf16
variants also flip. The reference margin distribution: rows whose relative margin is below 1e-3 / 1e-2 / 1e-1.

    PYTHONPATH=. python3 .cache/diag/charcnn_precision.py [--weights W] [--out DIR]
    PYTHONPATH=. python3 .cache/diag/charcnn_precision.py --cpu-smoke [--full-dims] [--rows 8]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

from bench.char_cnn import DEFAULT_WEIGHTS, FULL_DIMS, TINY_DIMS, eval_logits, load_text, load_weights
from models.char_cnn import CharCNN, encode
from triton_kernels.testing import rel_err

# Rounding points in forward order. Module points round a module's output (pre-ReLU); block points round a
# stage's output (after ReLU + MaxPool).
POINTS = ("conv1", "ln1", "pool1", "conv2", "pool2", "conv3", "conv4", "conv5", "conv6", "ln6", "pool6",
          "fc1", "fc2", "fc3")
MODULE_POINTS = ("conv1", "ln1", "conv2", "conv3", "conv4", "conv5", "conv6", "ln6", "fc1", "fc2", "fc3")
BLOCK_POINTS = {"block1": "pool1", "block2": "pool2", "block6": "pool6"}
LAYERS = ("conv1", "ln1", "conv2", "conv3", "conv4", "conv5", "conv6", "ln6", "fc1", "fc2", "fc3")  # parameters
FUSED_POINTS = tuple(p for p in POINTS if p != "conv1")  # fused Triton: conv1's output stays in registers
# The tensors a layer-by-layer backend stores, each with the points whose rounding is the same rounding
# (ReLU and MaxPool commute with it): leaving one of them fp32 means leaving all its points fp32.
STORED = {"conv1": ("conv1",), "block1": ("ln1", "pool1"), "conv2": ("conv2", "pool2"), "conv3": ("conv3",),
          "conv4": ("conv4",), "conv5": ("conv5",), "conv6": ("conv6",), "block6": ("ln6", "pool6"),
          "fc1": ("fc1",), "fc2": ("fc2",), "fc3": ("fc3",)}
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
REL_MARGIN_THRESHOLDS = (1e-3, 1e-2, 1e-1)


def rnd(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t rounded to dtype (round to nearest even) and back to t's dtype."""
    return t.to(dtype).to(t.dtype)


def make_model(state: dict, dims: dict, device, weight_round: dict[str, torch.dtype] | None = None,
               dtype: torch.dtype = FP32) -> CharCNN:
    """A CharCNN in eval mode with ``state``; parameters of the layers in ``weight_round`` rounded to their
    dtype (values stay fp32); ``dtype``: the whole model cast (model.to(dtype), as the bench does)."""
    weight_round = weight_round or {}
    st = {}
    for k, v in state.items():
        layer = k.split(".")[0]
        st[k] = rnd(v.float(), weight_round[layer]) if layer in weight_round else v
    model = CharCNN(**dims).to(device).eval().requires_grad_(False)
    model.load_state_dict(st)
    return model.to(dtype)


def hooked_fn(model: CharCNN, act_round: dict[str, torch.dtype]):
    """fn(idx, onehot) -> logits: the model's eager stages, with outputs at ``act_round``'s points rounded."""
    for name in MODULE_POINTS:
        if name in act_round:
            dt = act_round[name]
            getattr(model, name).register_forward_hook(lambda m, i, o, dt=dt: rnd(o, dt))
    blocks = model.blocks("eager")

    def fn(idx, oh):
        with torch.no_grad():
            h = oh
            for name, block in blocks:
                h = block(h)
                point = BLOCK_POINTS.get(name)
                if point in act_round:
                    h = rnd(h, act_round[point])
            return h
    return fn


def eager_fn(model: CharCNN):
    def fn(idx, oh):
        with torch.no_grad():
            return model.forward_eager(oh)
    return fn


def triton_fn(model: CharCNN, mode: str):
    """As bench.char_cnn._inference_fns: the stages of model.blocks(mode) on the uint8 indices."""
    blocks = model.blocks(mode)

    def fn(idx, oh):
        with torch.no_grad():
            h = idx
            for _, block in blocks:
                h = block(h)
            return h
    return fn


def margins(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(top1 - top2, max_j |logit_j|) per row, float64."""
    top2 = logits.double().topk(2, dim=1).values
    return top2[:, 0] - top2[:, 1], logits.double().abs().amax(1).clamp_min(1e-30)


def measure(logits: torch.Tensor, ref: torch.Tensor, ref_margin, ref_scale) -> dict:
    logits, ref = logits.double().cpu(), ref.double().cpu()
    finite = bool(torch.isfinite(logits).all())
    pred, rp = logits.argmax(1), ref.argmax(1)
    flipped = (pred != rp).nonzero().flatten()
    row_err = (logits - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-30)
    n = ref.shape[0]
    own_margin, _ = margins(logits)
    fm = ref_margin[flipped]
    return {
        "agreement_pct": 100.0 * (n - flipped.numel()) / n,
        "flips": int(flipped.numel()),
        "finite": finite,
        "row_rel_err_max": float(row_err.max()),
        "row_rel_err_median": float(row_err.median()),
        "rel_err": rel_err(logits, ref),
        "max_abs_err": float((logits - ref).abs().max()),
        "flipped_rows": flipped.tolist(),
        "flipped_ref_margin": fm.tolist(),
        "flipped_ref_rel_margin": (fm / ref_scale[flipped]).tolist(),
        "flipped_ref_class": rp[flipped].tolist(),
        "flipped_pred_class": pred[flipped].tolist(),
        "flipped_own_margin": own_margin[flipped].tolist(),
        "flipped_row_rel_err": row_err[flipped].tolist(),
    }


def build_variants(triton: bool) -> list[tuple[str, str, dict]]:
    """(id, description, spec); spec: weight_round / act_round / dtype / triton."""
    every = lambda dt, pts=POINTS: {p: dt for p in pts}
    wall = lambda dt: {layer: dt for layer in LAYERS}
    v = [("ref-hooked", "no rounding, hooked eager stages at the bench batch (sanity)", {}),
         ("a", "weights bf16, activations fp32", {"weight_round": wall(BF16)}),
         ("a16", "weights fp16, activations fp32", {"weight_round": wall(FP16)}),
         ("b", "weights fp32, every layer output bf16", {"act_round": every(BF16)})]
    v += [(f"c:{p}", f"weights fp32, only {p} output bf16", {"act_round": {p: BF16}}) for p in POINTS]
    v += [(f"cw:{layer}", f"only {layer} parameters bf16, activations fp32", {"weight_round": {layer: BF16}})
          for layer in LAYERS]
    v += [("d", "weights bf16, every layer output fp16", {"weight_round": wall(BF16), "act_round": every(FP16)}),
          ("e", "eager bf16 (model.to(bfloat16))", {"dtype": BF16}),
          ("f", "eager fp16 (model.to(float16))", {"dtype": FP16}),
          ("g", "weights bf16, every output bf16, fp32 math (Triton per-op numerics)",
           {"weight_round": wall(BF16), "act_round": every(BF16)}),
          ("g-fused", "g without conv1's output rounding (Triton fused numerics)",
           {"weight_round": wall(BF16), "act_round": every(BF16, FUSED_POINTS)})]
    v += [(f"g-keep:{k}", f"g with {'/'.join(pts)} output kept fp32",
           {"weight_round": wall(BF16), "act_round": every(BF16, tuple(q for q in POINTS if q not in pts))})
          for k, pts in STORED.items()]
    v += [("h", "weights fp16, every output fp16, fp32 math (Triton fp16 numerics)",
           {"weight_round": wall(FP16), "act_round": every(FP16)})]
    if triton:
        v += [("triton-bf16", "Triton fused backend, bf16", {"dtype": BF16, "triton": "triton"}),
              ("triton-per-op-bf16", "Triton per-op backend, bf16", {"dtype": BF16, "triton": "triton-per-op"}),
              ("triton-fp16", "Triton fused backend, fp16", {"dtype": FP16, "triton": "triton"})]
    return v


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", default=None,
                   help=f"weights from `python -m bench.char_cnn train` (default {DEFAULT_WEIGHTS})")
    p.add_argument("--out", default=".cache/diag/charcnn_precision_out", help="directory for the JSON")
    p.add_argument("--data", default=None, help="AG News directory (as bench.char_cnn --data)")
    p.add_argument("--batch", type=int, default=512, help="batch of the variants (the issue's 512)")
    p.add_argument("--ref-batch", type=int, default=256, help="batch of the reference (bench_main uses 256)")
    p.add_argument("--rows", type=int, default=None, help="first N held-out rows only (default all 1,000)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="CPU, randomly initialised model, 8 rows, tiny dims (unless --full-dims), batch 4")
    p.add_argument("--full-dims", action="store_true", help="smoke: the full-size model")
    p.add_argument("--random-weights", action="store_true", help="the paper's random init instead of --weights")
    p.add_argument("--synthetic", action="store_true", help="random character indices instead of AG News")
    p.add_argument("--no-triton", action="store_true", help="skip the real Triton backends (GPU only anyway)")
    p.add_argument("--only", default=None, help="comma-separated variant ids (prefix match), for quick runs")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)

    device = torch.device("cpu") if a.cpu_smoke or not torch.cuda.is_available() else torch.device("cuda")
    if a.cpu_smoke:
        a.rows = a.rows or 8
        a.batch, a.ref_batch = min(a.batch, 4), min(a.ref_batch, 4)
        a.random_weights = True
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is true fp32, as in bench_main
    torch.backends.cudnn.allow_tf32 = False
    t0 = time.perf_counter()

    # -- weights and data, through bench.char_cnn's own functions ---------------------------------------
    if a.random_weights:
        dims = dict(FULL_DIMS if (a.full_dims or not a.cpu_smoke) else TINY_DIMS)
        torch.manual_seed(a.seed)
        state = CharCNN(**dims).state_dict()
        weights_note = f"random weights (the paper's N(0, 0.05^2) init, seed {a.seed})"
    else:
        w = Path(a.weights) if a.weights else DEFAULT_WEIGHTS
        if not w.is_file():
            raise SystemExit(f"no weights at {w}: run `python3 -m bench.char_cnn train --no-progress` first "
                             f"(or pass --random-weights / --cpu-smoke)")
        state, dims, weights_note = load_weights(w, FULL_DIMS, a.seed)
    labels = None
    if a.synthetic:
        g = torch.Generator().manual_seed(a.seed)
        idx = torch.randint(0, 71, (a.rows or 1000, dims["length"]), generator=g, dtype=torch.uint8)
        data_note = "random character indices"
    else:
        data = load_text(a.data)  # seed 0, 1,000 eval rows: bench_main's call
        idx, labels = encode(data["eval_texts"], dims["length"]), data["eval_labels"]
        data_note = f"AG News eval rows ({data['source']})"
    if a.rows:
        idx = idx[:a.rows]
        labels = labels[:a.rows] if labels is not None else None
    idx = idx.to(device)
    n = idx.shape[0]
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor()})"
    print(f"Char-CNN precision diagnosis on {dev_name}, torch {torch.__version__}: {n} rows, dims {dims}",
          flush=True)
    print(f"  {weights_note}\n  input: {data_note}", flush=True)

    # -- reference: eager fp32, TF32 off, as bench_main -----------------------------------------------------
    ref_model = make_model(state, dims, device)
    ref = eval_logits(eager_fn(ref_model), idx, a.ref_batch, FP32, ref_model.alphabet_size).double().cpu()
    del ref_model
    ref_margin, ref_scale = margins(ref)
    rel_margin = ref_margin / ref_scale
    ref_acc = 100.0 * (ref.argmax(1) == labels).double().mean().item() if labels is not None else None
    margin_info = {
        "definition": "margin = top1 - top2 reference logit; relative margin = margin / max_j |ref logit_j| (per row)",
        "rows": n,
        "rel_margin_below": {f"{t:g}": int((rel_margin < t).sum()) for t in REL_MARGIN_THRESHOLDS},
        "abs_margin_quantiles": {f"q{int(q * 100)}": float(ref_margin.quantile(q))
                                 for q in (0.0, 0.01, 0.05, 0.1, 0.5)},
        "rel_margin_quantiles": {f"q{int(q * 100)}": float(rel_margin.quantile(q))
                                 for q in (0.0, 0.01, 0.05, 0.1, 0.5)},
        "logit_scale_median": float(ref_scale.median()),
        "logit_rms": float(ref.pow(2).mean().sqrt()),
        "ref_accuracy_pct": ref_acc,
    }
    print(f"  reference accuracy vs labels: {ref_acc if ref_acc is None else round(ref_acc, 2)} %; "
          f"logit scale (median max|logit|) {margin_info['logit_scale_median']:.4g}", flush=True)
    print("  reference rows with relative top-2 margin below "
          + ", ".join(f"{k}: {v}" for k, v in margin_info["rel_margin_below"].items())
          + f"  (smallest abs margins: q1 {margin_info['abs_margin_quantiles']['q1']:.3g}, "
            f"q5 {margin_info['abs_margin_quantiles']['q5']:.3g})", flush=True)

    # -- variants ---------------------------------------------------------------------------------------
    triton_ok = device.type == "cuda" and not a.no_triton
    variants = build_variants(triton_ok)
    if a.only:
        keys = [k.strip() for k in a.only.split(",")]
        variants = [v for v in variants if any(v[0].startswith(k) for k in keys)]
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out_path = out_dir / "charcnn_precision.json"
    results = []

    def write():
        blob = {"meta": {"device": dev_name, "torch": torch.__version__, "dims": dims, "weights": weights_note,
                         "input": data_note, "rows": n, "batch": a.batch, "ref_batch": a.ref_batch,
                         "tf32": False, "seconds": time.perf_counter() - t0, "argv": sys.argv[1:]},
                "reference_margins": margin_info, "variants": results}
        out_path.write_text(json.dumps(blob, indent=1))

    for vid, desc, spec in variants:
        t1 = time.perf_counter()
        try:
            dt = spec.get("dtype", FP32)
            model = make_model(state, dims, device, spec.get("weight_round"), dt)
            if "triton" in spec:
                fn = triton_fn(model, spec["triton"])
            elif dt != FP32:
                fn = eager_fn(model)
            else:
                fn = hooked_fn(model, spec.get("act_round", {}))
            logits = eval_logits(fn, idx, a.batch, dt, model.alphabet_size)
            if device.type == "cuda":
                torch.cuda.synchronize()
            row = {"id": vid, "desc": desc, "status": "ok", **measure(logits, ref, ref_margin, ref_scale)}
            del model, logits
        except Exception as e:  # noqa: BLE001 - one failing variant is a row, the rest go on
            row = {"id": vid, "desc": desc, "status": "error", "error": f"{type(e).__name__}: {e}"[:400]}
        row["seconds"] = time.perf_counter() - t1
        results.append(row)
        write()

    # -- flip-set overlaps with eager bf16 and the Triton bf16 backend ------------------------------------
    by_id = {r["id"]: r for r in results if r["status"] == "ok"}
    for other in ("e", "triton-bf16"):
        if other not in by_id:
            continue
        s_other = set(by_id[other]["flipped_rows"])
        for r in by_id.values():
            r[f"shared_flips_with_{other}"] = len(set(r["flipped_rows"]) & s_other)
    write()
    print_table(results, by_id)
    print(f"\nJSON -> {out_path}  ({time.perf_counter() - t0:.1f} s)")
    return 0 if all(r["status"] == "ok" for r in results) else 1


def print_table(results: list[dict], by_id: dict) -> None:
    extra = [k for k in ("e", "triton-bf16") if k in by_id]
    head = (f"{'variant':<20} {'agree%':>7} {'flips':>5} {'rowrel max':>10} {'rowrel med':>10} {'rel_err':>9} "
            f"{'flip margin med (rel)':>22} {'flip rel max':>12}"
            + "".join(f" {'&' + k:>12}" for k in extra) + "  description")
    print("\n" + head + "\n" + "-" * len(head))
    for r in results:
        if r["status"] != "ok":
            print(f"{r['id']:<20} ERROR {r['error']}")
            continue
        fm, frm = r["flipped_ref_margin"], r["flipped_ref_rel_margin"]
        med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")
        margin = f"{med(fm):.3g} ({med(frm):.2g})" if fm else "-"
        print(f"{r['id']:<20} {r['agreement_pct']:>7.2f} {r['flips']:>5d} {r['row_rel_err_max']:>10.3g} "
              f"{r['row_rel_err_median']:>10.3g} {r['rel_err']:>9.3g} {margin:>22} "
              f"{(f'{max(frm):.3g}' if frm else '-'):>12}"
              + "".join(f" {r.get('shared_flips_with_' + k, 0):>12d}" for k in extra)
              + f"  {r['desc']}" + ("" if r["finite"] else "  [NON-FINITE]"))


if __name__ == "__main__":
    sys.exit(main())
