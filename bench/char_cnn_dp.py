"""Data-parallel Char-CNN inference with torch.distributed: the root reads and encodes the text, scatters
shards, every rank runs its part, the logits are gathered on the root -- the seed study's asynchronous
MPI scatter / compute / gather, with NCCL on GPUs and gloo on the CPU.

    torchrun --nproc-per-node 4 -m bench.char_cnn_dp [--batch 512[,2048,...]] [--shards 8] [--rounds 5]
             [--backend triton|compile|eager] [--dtype bfloat16] [--overlap both|on|off]
             [--weights PATH] [--data DIR] [--synthetic] [--machine KIND] [--out DIR]
    (several nodes: the same command with torchrun's --nnodes / --rdzv-endpoint rendezvous)

One round = ``shards`` steps; at each step every rank receives ``batch`` inputs (uint8 character
indices, 1 KB each: the root's scatter list holds world x batch rows) and returns its (batch, classes)
logits to the root. Overlapped (the study's asynchronous pipeline): the scatter of step s + 1 is issued
before step s computes, and step s's gather is issued without waiting, so transfers run on the
communication stream (NCCL) or threads (gloo) while the model computes; two receive buffers alternate.
Not overlapped: scatter, compute and gather one after another, each waited for and timed.

Rows (suite char_cnn_dp, params with "gpus" (the world size) and "batch" (per rank and step)):
inputs_per_s (world x batch x shards per median round), round_ms, the per-stage latency table
(case "stage": scatter / compute / gather per rank, not overlapped: the stage's mean per step), the
overlap's effect (overlap_speedup), speedup_vs_1gpu where a 1-process row of the same configuration is
in the output file, and predictions_match: the root runs every input of one round itself and the share of
gathered argmax predictions equal to its own (the single-process run) is reported; --dump PATH saves
both (tests).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from triton_kernels.runtime import INTERPRET, device_name  # (the interpreter switch before triton loads)
from models.char_cnn import CharCNN, encode

from . import results
from .harness import median

SUITE = "char_cnn_dp"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torchrun ... -m bench.char_cnn_dp", description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", default=None, help="inputs per rank per step, or several (512,2048,8192), each "
                   "measured in turn in the same processes (default 512; CPU 3)")
    p.add_argument("--shards", type=int, default=8, help="steps per round")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds (after one warm-up round)")
    p.add_argument("--backend", choices=("triton", "triton-per-op", "compile", "eager"), default=None,
                   help="default triton on GPUs, eager on the CPU")
    p.add_argument("--dtype", choices=tuple(DTYPES), default=None, help="default bfloat16 (CPU float32)")
    p.add_argument("--overlap", choices=("both", "on", "off"), default="both")
    p.add_argument("--weights", default=None, help="trained weights (default: bench.char_cnn's)")
    p.add_argument("--data", default=None)
    p.add_argument("--synthetic", action="store_true", help="random character indices")
    p.add_argument("--tiny", action="store_true", help="the tests' small model (length 123, 8 channels)")
    p.add_argument("--no-check", action="store_true", help="skip the single-process comparison")
    p.add_argument("--dump", default=None, help="root: save gathered and single-process logits here (.pt)")
    p.add_argument("--machine", default=None, help="the machine kind, recorded in every row's params "
                                                  "(e.g. nvidia-h200-x4)")
    p.add_argument("--out", default=None)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    cpu = not torch.cuda.is_available()
    try:
        a.batches = [int(b) for b in (a.batch or ("3" if cpu else "512")).split(",")]
    except ValueError:
        p.error(f"--batch: expected integers separated by commas, got {a.batch!r}")
    a.backend = a.backend or ("eager" if cpu else "triton")
    a.dtype = DTYPES[a.dtype or ("float32" if cpu else "bfloat16")]
    if min(a.batches) < 1 or a.shards < 1 or a.rounds < 1:
        p.error("--batch, --shards and --rounds must be positive")
    return a


def setup() -> tuple[int, int, torch.device]:
    """Join the process group torchrun (or the caller) described in the environment."""
    cuda = torch.cuda.is_available()
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def make_model(args, device) -> tuple[CharCNN, str]:
    """The same weights on every rank: the trained file, else the paper's initialisation from --seed."""
    from .char_cnn import FULL_DIMS, TINY_DIMS, load_weights

    dims = TINY_DIMS if (args.tiny or INTERPRET) else FULL_DIMS
    state, dims, note = load_weights(args.weights, dims, args.seed)
    model = CharCNN(**dims).to(device).eval().requires_grad_(False)
    model.load_state_dict(state)
    model.to(args.dtype)
    model.backend = args.backend
    return model, note


def root_inputs(args, model: CharCNN, total: int, device) -> tuple[torch.Tensor, str]:
    """(total, length) uint8 indices on the root: AG News text (train and eval rows, tiled), or random."""
    if args.synthetic:
        g = torch.Generator().manual_seed(args.seed)
        idx = torch.randint(0, 71, (total, model.length), generator=g, dtype=torch.uint8)
        return idx.to(device), "random character indices"
    from .char_cnn import load_text

    data = load_text(args.data)
    texts = data["train_texts"] + data["eval_texts"]
    idx = encode(texts, model.length)
    return idx[torch.arange(total) % idx.shape[0]].to(device), f"AG News text ({len(texts)} rows, tiled)"


def run_round(fn, data, recv, gather_out, rank: int, shards: int, overlap: bool, stage_ms: list | None) -> None:
    """One round: shards steps of scatter -> compute -> gather. data (shards, world, batch, L) on the root
    (None elsewhere); recv: two (batch, L) buffers; gather_out (shards, world, batch, classes) on the root.
    stage_ms (not overlapped): per-step [scatter, compute, gather] wall times are appended."""
    sync = (lambda: torch.cuda.synchronize()) if recv[0].is_cuda else (lambda: None)

    def scatter(s, buf, async_op):
        return dist.scatter(buf, list(data[s].unbind(0)) if rank == 0 else None, src=0, async_op=async_op)

    def gather(s, out, async_op):
        return dist.gather(out, list(gather_out[s].unbind(0)) if rank == 0 else None, dst=0, async_op=async_op)

    if not overlap:
        for s in range(shards):
            t0 = time.perf_counter()
            scatter(s, recv[0], False)
            sync()
            t1 = time.perf_counter()
            out = fn(recv[0]).float()
            sync()
            t2 = time.perf_counter()
            gather(s, out, False)
            sync()
            t3 = time.perf_counter()
            if stage_ms is not None:
                stage_ms.append([1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2)])
        return
    pending = []
    work = scatter(0, recv[0], True)
    for s in range(shards):
        nxt = scatter(s + 1, recv[(s + 1) % 2], True) if s + 1 < shards else None  # next transfer first
        work.wait()
        out = fn(recv[s % 2]).float()
        pending.append((gather(s, out, True), out))  # keep out alive until its gather is done
        work = nxt
    for w, _ in pending:
        w.wait()
    sync()


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world, device = setup()
    try:
        return _main(args, rank, world, device)
    finally:
        dist.destroy_process_group()


def _main(args, rank, world, device) -> int:
    model, weights_note = make_model(args, device)
    fn = (lambda idx: model(idx)) if args.backend != "eager" else (lambda idx: model.forward_eager(idx))
    ok = True
    for batch in args.batches:
        ok &= _measure(args, batch, model, fn, weights_note, rank, world, device)
    return 0 if ok else 1


def _measure(args, batch: int, model, fn, weights_note, rank, world, device) -> bool:
    """One per-rank batch size: warm-up round, timed rounds (overlapped and not), the single-process
    check and the rows (root). False if the gathered predictions differ from the single-process run."""
    S, B, L = args.shards, batch, model.length
    classes = model.fc3.out_features
    data = gather_out = None
    input_note = ""
    if rank == 0:
        flat, input_note = root_inputs(args, model, S * world * B, device)
        data = flat.view(S, world, B, L)
        gather_out = torch.empty((S, world, B, classes), device=device)
    recv = [torch.empty((B, L), dtype=torch.uint8, device=device) for _ in range(2)]
    modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.overlap]
    timings = {}
    with torch.no_grad():
        run_round(fn, data, recv, gather_out, rank, S, modes[0], None)  # warm-up: JIT, tuning, compile
        for overlap in modes:
            stage_ms: list = []
            walls = []
            for _ in range(args.rounds):
                dist.barrier()
                t0 = time.perf_counter()
                run_round(fn, data, recv, gather_out, rank, S, overlap, stage_ms if not overlap else None)
                walls.append(time.perf_counter() - t0)
            timings[overlap] = (walls, stage_ms)
    stages = _gather_stage_means(timings.get(False, (None, []))[1], world, device)
    if rank != 0:
        return True
    match = None
    if not args.no_check:
        with torch.no_grad():
            single = torch.cat([fn(chunk).float() for chunk in data.reshape(-1, B, L)])
        gathered = gather_out.reshape(-1, classes)
        match = 100.0 * (gathered.argmax(1) == single.argmax(1)).float().mean().item()
        if args.dump:
            torch.save({"gathered": gathered.cpu(), "single": single.cpu(), "indices": data.reshape(-1, L).cpu()},
                       args.dump)
    note = f"{weights_note}; input {input_note}; {'nccl' if device.type == 'cuda' else 'gloo'}"
    rows = _rows(args, B, world, timings, stages, match, note, S * world * B)
    _print(rows)
    if not args.no_write:
        path = results.write_rows(rows, args.out, SUITE)
        results.write_rows(_speedups(path), args.out, SUITE)
        print(f"rows -> {path}")
    del data, gather_out, recv
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return match in (None, 100.0)


def _gather_stage_means(stage_ms: list, world: int, device) -> torch.Tensor | None:
    """(world, 3) mean scatter / compute / gather ms per step of every rank, on the root (collective)."""
    mine = torch.tensor(stage_ms, dtype=torch.float64).mean(0) if stage_ms else torch.full((3,), float("nan"),
                                                                                           dtype=torch.float64)
    mine = mine.to(device)
    out = [torch.empty_like(mine) for _ in range(world)] if dist.get_rank() == 0 else None
    dist.gather(mine, out, dst=0)
    return torch.stack(out).cpu() if out is not None else None


def _rows(args, batch: int, world, timings, stages, match, note, per_round) -> list[dict]:
    base = {"gpus": world, "batch": batch, "shards": args.shards, "backend": args.backend,
            **({"machine": args.machine} if args.machine else {})}
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for overlap, (walls, _) in timings.items():
        params = {**base, "overlap": overlap}
        med = median(walls)
        mk = lambda metric, value, unit, **kw: results.make_row(SUITE, "inference", params, args.dtype, args.backend,
                                                                metric, value, unit, note=note, **kw)
        rows.append(mk("inputs_per_s", per_round / med, "inputs/s", p20=per_round / max(walls),
                       p80=per_round / min(walls)))
        rows.append(mk("round_ms", 1e3 * med, "ms", p20=1e3 * min(walls), p80=1e3 * max(walls)))
        if match is not None:
            rows.append(mk("predictions_match", match, "pct"))
    if True in timings and False in timings:
        ratio = median(timings[False][0]) / median(timings[True][0])
        rows.append(results.make_row(SUITE, "inference", {**base, "overlap": True}, args.dtype, args.backend,
                                     "overlap_speedup", ratio, "x", note=f"overlapped vs not, same process; {note}"))
    if stages is not None and not torch.isnan(stages).all():
        for rank in range(world):
            for i, stage in enumerate(("scatter", "compute", "gather")):
                rows.append(results.make_row(SUITE, "stage", {**base, "overlap": False, "rank": rank, "stage": stage},
                                             args.dtype, args.backend, "latency_ms", stages[rank, i].item(), "ms",
                                             note=f"mean per step, not overlapped, {dev} synchronised; {note}"))
    return rows


def _speedups(path: Path) -> list[dict]:
    """speedup_vs_1gpu rows for every inputs_per_s row whose 1-process twin (same params but gpus) is in
    the file."""
    import pandas as pd

    df = pd.read_csv(path)
    df = df[(df["metric"] == "inputs_per_s") & (df["status"] == "ok")]
    out = []
    for _, r in df.iterrows():
        p = json.loads(r["params"])
        one = json.dumps({**p, "gpus": 1}, sort_keys=True)
        twin = df[(df["params"] == one) & (df["dtype"] == r["dtype"])]
        if p["gpus"] != 1 and len(twin):
            out.append(results.make_row(SUITE, "inference", p, r["dtype"], r["backend"], "speedup_vs_1gpu",
                                        r["value"] / twin["value"].iloc[-1], "x",
                                        note="vs the 1-process row in the same file (separate runs)"))
    return out


def _print(rows: list[dict]) -> None:
    print(f"\nChar-CNN data-parallel inference on {device_name()}" + (f" [{results.CPU_NOTE}]" if INTERPRET else ""))
    for r in rows:
        p = json.loads(r["params"])
        extra = f" rank {p['rank']} {p['stage']}" if "stage" in p else f" overlap={p['overlap']}"
        print(f"  {r['case']:<9} gpus {p['gpus']} batch {p['batch']}{extra:<24} {r['metric']:<18} "
              f"{r['value']:.4g} {r['unit']}")


if __name__ == "__main__":
    sys.exit(main())
