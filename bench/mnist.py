"""The MNIST softmax-regression study: the optimisation ladder, one epoch-scale case per rung.

    python -m bench.mnist [--data DIR] [--epochs 10] [--batch 128] [--lr 0.1] [--variants a,b,...]
                          [--precision ieee|tf32|tf32x3] [--x-dtype float32|uint8]
                          [--log-every N] [--quick] [--out DIR] [--seed 0]

Every variant trains the same model (same initial weights, same per-epoch permutations, batch 128,
plain SGD) for --epochs epochs; loss and accuracy are accumulated on the device and read by the host
every --log-every epochs (every epoch for eager-dataloader, as in the seed study's baseline). Every rung
but eager-dataloader gets the per-epoch orders already on the device (preloaded with the data, before
the clock starts: a 480 KB host-to-device copy per epoch would otherwise cost more than a fused
epoch). Printed
and written (long-format rows, results/<device>/mnist[-<precision>][-u8].csv): the average epoch time over
the latter half of training (wall clock, the device synchronised at each epoch end; every epoch is
timed whole: the copy of its order into the trainer's buffer, the steps, and for the last epoch the
one host read of the loss / accuracy sums), p20/p80 of those epochs, the same epochs' time on the
device (CUDA events around each epoch: device_epoch_ms, which leaves out the host's launch and sync
latency), the total wall time, one-off setup time (compilation, graph capture, autotuning), the final
test accuracy, and the relative difference of the final weights from a float64 run on the same batches
(error_vs_fp64). The Triton rungs' tuned config (feature slice per program, warps) is in the note.
A variant whose test accuracy is more than 0.3 points from eager's gets status "wrong".

--precision and --x-dtype apply to the Triton rungs only (the eager rungs train on float32 X with ieee
fp32 matmuls): uint8 X holds the pixel values 0..255 (x = x_u8 / 255, a quarter of the bytes to gather).

--quick: 2 epochs. In the CPU interpreter the default is tiny (2 epochs on the first 1024 train / 512
test examples, about a minute); --full trains on the whole data set there (an estimate is printed
first); CUDA-graph variants are "unsupported" and no time is a performance figure. --download fetches
MNIST into .data/mnist first (skipped when it is there).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
import traceback

import torch

# (the interpreter switch before triton loads)
from triton_kernels.runtime import INTERPRET, CudaEventTimer, default_device, device_name
from bench.data import mnist as mnist_data
from bench.mnist_ladder import GRAPH_VARIANTS, VARIANTS, make_trainer
from models.softmax_regression import SoftmaxRegression
from triton_kernels.testing import rel_err

from . import results
from .cli import argument_parser, cpu_notice, guard_cpu, run
from .harness import quantile

SUITE = "mnist"
ACC_TOLERANCE_POINTS = 0.3
CPU_TRAIN, CPU_TEST, CPU_EPOCHS = 1024, 512, 2  # the CPU interpreter's default subset
INTERPRETER_STEP_S = 0.15  # rough: one fused step of batch 128 in the CPU interpreter (for --full's estimate)

# Figures quoted beside ours (ms per epoch, batch 128).
SEED_STUDY = {
    "eager-dataloader": ("seed study, best PyTorch", 600.0),
    "eager-preloaded": ("H100 eager, data on GPU", 209.0),
    "compile": ("H100 torch.compile", 398.0),
    "eager+graph": ("H100 CUDA-graphed eager step", 19.6),
    "triton": ("seed study, hand-written CUDA C++", 17.0),
    "triton+graph": ("seed study, hand-written CUDA C++", 17.0),
    "triton+persistent": ("target for the Triton backend", 2.0),
    "triton+epoch-graph": ("target for the Triton backend", 2.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argument_parser("bench.mnist", __doc__.split("\n\n")[0], raw=False)
    p.add_argument("--data", default=None, help="directory with the MNIST IDX files (default .data/mnist, "
                                                "then ../shared/data/mnist)")
    p.add_argument("--download", action="store_true", help="fetch MNIST into .data/mnist first (skipped when "
                                                           "present)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default 10; --quick and the CPU "
                                                            "interpreter 2)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--variants", default=None, help=f"comma-separated subset of {','.join(VARIANTS)}")
    p.add_argument("--log-every", type=int, default=None,
                   help="read loss/accuracy every N epochs (default: only after the last epoch)")
    p.add_argument("--train-limit", type=int, default=None, help="use the first N training examples")
    p.add_argument("--test-limit", type=int, default=None, help="use the first N test examples")
    p.add_argument("--precision", default="ieee", choices=("ieee", "tf32", "tf32x3"),
                   help="fp32 dot precision of the Triton variants (eager matmuls stay ieee fp32)")
    p.add_argument("--x-dtype", default="float32", choices=("float32", "uint8"),
                   help="dtype of the data set on the device for the Triton variants")
    p.add_argument("--quick", action="store_true", help="2 epochs")
    p.add_argument("--out", default=None, help="output directory (default results/<device>/)")
    p.add_argument("--show", action="store_true", help="print the committed GPU results instead of running")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.variants:
        a.variants = [v.strip() for v in a.variants.split(",") if v.strip()]
        bad = [v for v in a.variants if v not in VARIANTS]
        if bad:
            p.error(f"--variants: unknown {bad}; known: {', '.join(VARIANTS)}")
    else:
        a.variants = list(VARIANTS)
    a.tiny = INTERPRET and not a.full
    if a.epochs is None:
        a.epochs = CPU_EPOCHS if (a.quick or a.tiny) else 10
    if a.tiny:
        a.train_limit = a.train_limit or CPU_TRAIN
        a.test_limit = a.test_limit or CPU_TEST
    if a.epochs < 1 or a.batch < 1 or not a.lr > 0:
        p.error("--epochs, --batch and --lr must be positive")
    if a.download and a.data:
        p.error("--download fetches into .data/mnist; leave out --data")
    a.log_every = a.log_every or a.epochs
    return a


def permutations(n: int, epochs: int, seed: int) -> list[torch.Tensor]:
    """The batch order of every epoch, identical for every variant."""
    return [torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + e)) for e in range(epochs)]


def fp64_reference(init: dict, train, perms, batch: int, lr: float, device) -> torch.Tensor:
    """Final weights (W | b) of the same training in float64 (same batches, same order)."""
    x, y = train.images.to(device, torch.float64), train.labels.to(device)
    w = init["weight"].to(device, torch.float64).clone()
    b = init["bias"].to(device, torch.float64).clone()
    for perm in perms:
        perm = perm.to(device)
        for s in range(0, len(perm), batch):
            idx = perm[s:s + batch]
            xb = x[idx]
            p = torch.softmax(xb @ w.T + b, dim=1)
            p[torch.arange(len(idx), device=device), y[idx]] -= 1.0
            p /= len(idx)
            w -= lr * (p.T @ xb)
            b -= lr * p.sum(0)
    return torch.cat([w, b[:, None]], dim=1)


def run_variant(variant: str, args, train, test, init, perms, ref_w, device) -> dict:
    """Train one rung; returns its measurements (or a status on failure)."""
    out = {"variant": variant, "status": "ok", "note": ""}
    if variant in GRAPH_VARIANTS and device.type != "cuda":
        out.update(status="unsupported", note="CUDA graphs need a CUDA device")
        return out
    try:
        torch._dynamo.reset()
        model = SoftmaxRegression(device=device)
        model.load_state_dict(init)
        t0 = time.perf_counter()
        trainer = make_trainer(variant, model, train.images, train.labels, args.batch, args.lr, device,
                               precision=args.precision, x_dtype=getattr(torch, args.x_dtype))
        trainer.prepare()
        _sync(device)
        out["setup_s"] = time.perf_counter() - t0
        fused = getattr(trainer, "fused", None)
        if fused is not None:
            out["note"] = f"config {fused.config} ({fused.programs} programs), x {args.x_dtype}, {args.precision}"
        epoch_ms, log = [], []
        wall0 = time.perf_counter()
        if variant != "eager-dataloader":  # the epoch orders are preloaded to the device, like the data
            perms = [p.to(device) for p in perms]
            _sync(device)
        cuda = device.type == "cuda"
        timer = CudaEventTimer() if cuda else None
        for e, perm in enumerate(perms):
            with timer.span() if cuda else contextlib.nullcontext():
                t = time.perf_counter()
                trainer.train_epoch(perm)
                if variant == "eager-dataloader" or (e + 1) % args.log_every == 0 or e + 1 == len(perms):
                    loss, acc = trainer.read_stats()
                    log.append({"epoch": e + 1, "train_loss": loss, "train_acc": acc})
            _sync(device)
            epoch_ms.append(1e3 * (time.perf_counter() - t))
        dev_ms = timer.times_ms() if cuda else []
        out["total_s"] = time.perf_counter() - wall0
        half = epoch_ms[len(epoch_ms) // 2:]
        out.update(epoch_ms=sum(half) / len(half), p20=quantile(half, 0.2), p80=quantile(half, 0.8),
                   epochs_ms=epoch_ms, log=log, train_loss=log[-1]["train_loss"], train_acc=log[-1]["train_acc"])
        if dev_ms:
            dhalf = dev_ms[len(dev_ms) // 2:]
            out.update(device_epoch_ms=sum(dhalf) / len(dhalf), device_p20=quantile(dhalf, 0.2),
                       device_p80=quantile(dhalf, 0.8), device_epochs_ms=dev_ms)
        out["test_acc"] = 100.0 * model.accuracy(test.images, test.labels)
        w = torch.cat([model.weight.detach(), model.bias.detach()[:, None]], dim=1)
        out["err_fp64"] = rel_err(w, ref_w)
        if not all(math.isfinite(r["train_loss"]) for r in log):
            out["status"] = "wrong"
    except torch.cuda.OutOfMemoryError:
        out.update(status="oom", note=traceback.format_exc(limit=1)[-300:])
    except Exception as e:  # a failing rung becomes a row; the study goes on
        status = "compile-error" if "compile" in variant and "dynamo" in type(e).__module__ + str(e) else "error"
        out.update(status=status, note=f"{type(e).__name__}: {str(e)[:300]}")
        traceback.print_exc(file=sys.stderr)
    return out


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def to_rows(outcomes: list[dict], params: dict) -> list[dict]:
    rows = []
    for r in outcomes:
        v, st, note = r["variant"], r["status"], r.get("note", "")
        if v.startswith("triton"):
            tags = [t for t in (params.get("precision"), params.get("x_dtype")) if t not in (None, "ieee", "float32")]
            v += f"[{','.join(tags)}]" if tags else ""
        p = json.dumps(params, sort_keys=True)
        def mk(metric, value, unit, **kw):
            kw.setdefault("note", note)
            return results.make_row(SUITE, "epoch", p, torch.float32, v, metric, value, unit, status=st, **kw)

        if "epoch_ms" not in r:
            rows.append(mk("epoch_ms", None, "ms"))
            continue
        err = r.get("err_fp64")
        rows += [
            mk("epoch_ms", r["epoch_ms"], "ms", p20=r["p20"], p80=r["p80"], error_vs_fp64=err),
            *([mk("device_epoch_ms", r["device_epoch_ms"], "ms", p20=r["device_p20"], p80=r["device_p80"])]
              if "device_epoch_ms" in r else []),
            mk("total_s", r["total_s"], "s"),
            mk("setup_s", r["setup_s"], "s"),
            mk("test_acc", r["test_acc"], "pct", error_vs_fp64=err),
            mk("train_loss", r["train_loss"], "nats"),
        ]
        ref = SEED_STUDY.get(v)
        if ref:
            rows.append(mk("reference_epoch_ms", ref[1], "ms", note=ref[0]))
    return rows


def print_table(outcomes: list[dict], args, device) -> None:
    print(f"\nMNIST softmax regression, batch {args.batch}, lr {args.lr}, {args.epochs} epochs, "
          f"Triton dot precision {args.precision}, Triton x {args.x_dtype}, "
          f"{device_name(device)}" + (f"  [{results.CPU_NOTE}]" if INTERPRET else ""))
    hdr = f"{'variant':<20} {'epoch ms':>10} {'p20-p80':>17} {'device ms':>9} {'total s':>8} {'test acc':>8} " \
          f"{'vs fp64':>9} {'status':<12} reference"
    print(hdr)
    print("-" * len(hdr))
    for r in outcomes:
        ref = SEED_STUDY.get(r["variant"])
        ref_s = f"{ref[1]:g} ms ({ref[0]})" if ref else ""
        if "epoch_ms" in r:
            dev = f"{r['device_epoch_ms']:>9.3f}" if "device_epoch_ms" in r else f"{'-':>9}"
            print(f"{r['variant']:<20} {r['epoch_ms']:>10.3f} {r['p20']:>8.3f}-{r['p80']:<8.3f} {dev} "
                  f"{r['total_s']:>8.3f} {r['test_acc']:>7.2f}% {r['err_fp64']:>9.2e} {r['status']:<12} {ref_s}"
                  + (f"  [{r['note']}]" if r.get("note") and r["variant"].startswith("triton") else ""))
        else:
            print(f"{r['variant']:<20} {'-':>10} {'-':>17} {'-':>8} {'-':>8} {'-':>9} {r['status']:<12} {ref_s}"
                  + (f"  ({r['note'][:80]})" if r.get("note") else ""))


def data_root(args) -> str | None:
    """--data, or with --download the folder bench.data.fetch puts MNIST in (fetched if missing)."""
    if not args.download:
        return args.data
    from bench.data.fetch import fetch  # (imported only when asked for)

    return str(fetch("mnist", results.REPO / ".data"))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.show:
        from .cli import show

        return show("mnist", None)
    args.data = data_root(args)
    if INTERPRET:
        n_triton = sum(1 for v in args.variants if v.startswith("triton") and v not in GRAPH_VARIANTS)
        steps = (args.train_limit or 60000) // args.batch * args.epochs
        if args.tiny:
            cpu_notice("bench.mnist", f"{args.epochs} epochs on {args.train_limit} train / {args.test_limit} test "
                                      f"examples, about a minute")
        else:
            guard_cpu(steps * INTERPRETER_STEP_S * max(n_triton, 1), f"{args.epochs} epochs x {steps // args.epochs} "
                      f"steps x {len(args.variants)} variants", True, "bench.mnist")
    device = default_device()
    pin = device.type == "cuda"
    train = mnist_data.load_split("train", args.data, limit=args.train_limit, pin_memory=pin)
    test = mnist_data.load_split("test", args.data, limit=args.test_limit)
    perms = permutations(len(train), args.epochs, args.seed)
    torch.manual_seed(args.seed)
    init = {k: v.clone() for k, v in SoftmaxRegression().state_dict().items()}
    ref_w = fp64_reference(init, train, perms, args.batch, args.lr, device)
    params = {"batch": args.batch, "epochs": args.epochs, "lr": args.lr, "n_train": len(train),
              "n_test": len(test), "log_every": args.log_every, "seed": args.seed, "precision": args.precision}
    if args.x_dtype != "float32":
        params["x_dtype"] = args.x_dtype

    outcomes = []
    for v in args.variants:
        r = run_variant(v, args, train, test, init, perms, ref_w, device)
        outcomes.append(r)
        print(f"[mnist] {v}: {r['status']}" + (f", {r['epoch_ms']:.3f} ms/epoch, test acc {r['test_acc']:.2f}%"
                                              if "epoch_ms" in r else f" {r.get('note', '')[:120]}"),
              file=sys.stderr)
    eager = next((r for r in outcomes if r["variant"] in ("eager-preloaded", "eager-dataloader")
                  and "test_acc" in r), None)
    if eager is not None:
        for r in outcomes:
            if "test_acc" in r and r["status"] == "ok" and abs(r["test_acc"] - eager["test_acc"]) > ACC_TOLERANCE_POINTS:
                r["status"] = "wrong"
                r["note"] = f"test accuracy {r['test_acc']:.2f}% vs eager {eager['test_acc']:.2f}%"
    print_table(outcomes, args, device)
    if not args.no_write:
        tags = [t for t in (args.precision, "u8" if args.x_dtype == "uint8" else None) if t not in (None, "ieee")]
        path = results.write_rows(to_rows(outcomes, params), args.out, SUITE, tag="-".join(tags) or None)
        print(f"rows -> {path}")
    return 0 if all(r["status"] in ("ok", "unsupported") for r in outcomes) else 1


if __name__ == "__main__":
    sys.exit(run(main))
