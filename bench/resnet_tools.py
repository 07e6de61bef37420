"""bench.resnet's measurement modes: the training step per backend, the DataLoader worker sweep, DDP
scaling and its report. Called from ``python -m bench.resnet`` (see its docstring for the flags).

--bench-steps N: every backend starts from the same weights and trains on the same batches (the
GPU-resident path, batches built before each round so only the step is timed). After --warmup-iters
steps (compilation, autotuning), --bench-rounds rounds each time N back-to-back steps of every backend in
turn (CUDA events around each step); speedups come with a bootstrap CI over the rounds' medians. The
loss of every step is kept: each backend's curve is compared with eager's (largest relative difference)
and written to <out-dir>/resnet-steps-curves.json.

--scaling B1,B2,...: run under torchrun; for each per-GPU batch the step time of this world size (sharded
GPU-resident data), images/s, the epoch time, and the time of one all-reduce of the model's gradient
volume (NCCL, timed alone); the loss of every step (warm-up and timed) goes to
resnet_ddp-scaling-<model>-<backend>-<N>proc-curves.json. Under DDP the "+graph" backends replay the
model's forward and backward from CUDA graphs and all-reduce after the backward; the "+stepgraph" ones replay
forward, loss, backward and the all-reduces from one graph (--ddp-bucket-mb: DDP's bucket size, kept apart in
the rows and the report). --scaling-report ROWS...:
strong-scaling efficiency ips(g, G/g) / (g * ips(1, G)) at a fixed global batch G, weak-scaling efficiency
ips(g, b) / (g * ips(1, b)) at a fixed per-GPU batch b (the seed study's fixed-epoch scaling), the loss
curves of g GPUs x b against one GPU x g*b, and resnet_ddp_scaling.png.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from triton_kernels.runtime import CudaEventTimer, atomic_write_text

from . import resnet_data
from . import results
from .harness import _classify, bootstrap_ratio_ci, host_cores, median, quantile
from .resnet import (SUITE, Dist, Trainer, base_params, build_model, ddp_bucket_mb, new_model, run_tag, sgd_params,
                     seed_everything, sync)


def _step_times(trainer: Trainer, batches, device) -> tuple[list[float], list[torch.Tensor]]:
    """Per-step ms of back-to-back steps (CUDA events; perf_counter with a sync on the CPU) and the losses."""
    losses = []
    if device.type == "cuda":
        timer = CudaEventTimer()
        torch.cuda.synchronize(device)
        for x, y in batches:
            with timer.span():
                losses.append(trainer.step(x, y)[0])
        return timer.times_ms(), losses
    times = []
    for x, y in batches:
        t0 = time.perf_counter()
        losses.append(trainer.step(x, y)[0])
        times.append(1e3 * (time.perf_counter() - t0))
    return times, losses


def _init_state(args) -> dict:
    seed_everything(args.seed)
    return new_model(args).state_dict()


def _peak_mb(trainer: Trainer, batch, device) -> float | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    trainer.step(*batch)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) / 2**20


def bench_steps(args, dist: Dist) -> int:
    device = dist.device
    data = resnet_data.load(args.data, args.synthetic, args.train_limit, args.test_limit)
    loader = resnet_data.GpuLoader(data.train_images, data.train_labels, args.batch_size, args.seed, device,
                                   channels_last=args.channels_last)
    per_epoch = loader.steps
    if per_epoch == 0:
        raise SystemExit(f"--batch-size {args.batch_size} exceeds the {len(data.train_images)} training images")
    warm, timed, rounds = args.warmup_iters, args.bench_steps, args.bench_rounds

    def batch(i: int):
        return loader.batch(*divmod(i, per_epoch))

    init = _init_state(args)
    runs: dict[str, dict] = {}
    for b in args.backends:
        run = runs[b] = {"losses": [], "times": [], "round_medians": [], "status": "ok", "note": ""}
        try:
            model, forward = build_model(args, b, device)
            model.load_state_dict(init)
            run["trainer"] = Trainer(args, model, forward, device, args.epochs * per_epoch)
            t0 = time.perf_counter()
            for i in range(warm):
                run["losses"].append(run["trainer"].step(*batch(i))[0])
                if i == 0:
                    sync(device)
                    run["first_s"] = time.perf_counter() - t0
            sync(device)
            run["warmup_s"] = time.perf_counter() - t0
            print(f"[resnet] {b}: first step {run.get('first_s', 0):.1f} s, {warm} warm-up steps "
                  f"{run['warmup_s']:.1f} s", file=sys.stderr)
        except Exception as e:  # a failing backend becomes a row; the others go on
            run.update(status=_classify(e), note=f"{type(e).__name__}: {e}"[:300])
            run.pop("trainer", None)
            print(f"[resnet] {b}: {run['note']}", file=sys.stderr)
    ok = [b for b in args.backends if "trainer" in runs[b]]
    with host_cores(args.host_cores):
        for r in range(rounds):
            batches = [batch(warm + r * timed + i) for i in range(timed)]
            for b in ok:
                times, losses = _step_times(runs[b]["trainer"], batches, device)
                runs[b]["times"] += times
                runs[b]["round_medians"].append(median(times))
                runs[b]["losses"] += losses
    for b in ok:
        runs[b]["losses"] = [float(v) for v in torch.stack(runs[b]["losses"]).cpu()] if runs[b]["losses"] else []
        runs[b]["peak_mb"] = _peak_mb(runs[b]["trainer"], batch(warm + rounds * timed), device)
    rows = _step_rows(args, data, device, runs, timed, rounds)
    out = results.write_rows(rows, args.out_dir, SUITE, tag=run_tag(args, "steps"))
    curves = {b: runs[b]["losses"] for b in ok}
    curve_path = Path(args.out_dir or results.results_dir()) / f"resnet-{run_tag(args, 'steps')}-curves.json"
    curve_path.parent.mkdir(parents=True, exist_ok=True)
    curve_path.write_text(json.dumps({"steps": warm + rounds * timed, "warmup": warm, "losses": curves}))
    _print_steps(args, runs, device)
    print(f"rows -> {out}; loss curves -> {curve_path}", file=sys.stderr)
    return 0 if all(runs[b]["status"] == "ok" for b in args.backends) else 1


def _step_rows(args, data, device, runs, timed, rounds) -> list[dict]:
    params = dict(base_params(args, data.name, device), optimizer=args.optimizer, lr=args.lr,
                  warmup_steps=args.warmup_iters, timed_steps=timed * rounds, rounds=rounds)
    case, dtype = f"{args.model}_train_step", args.amp if args.amp != "none" else "float32"
    rows = []
    eager = runs.get("eager", {}).get("losses") or None
    for b, run in runs.items():
        own = dict(params, **sgd_params(args, b))

        def row(metric, value, unit, **kw):
            rows.append(results.make_row(SUITE, case, own, dtype, b, metric, value, unit, **kw))

        if not run["times"]:
            row("step_ms", None, "ms", status=run["status"] if run["status"] != "ok" else "error", note=run["note"])
            continue
        ts = run["times"]
        row("step_ms", median(ts), "ms", p20=quantile(ts, 0.2), p80=quantile(ts, 0.8),
            note=f"{len(ts)} back-to-back steps in {rounds} interleaved rounds, batches pre-built on the device")
        row("images_per_s", args.batch_size / median(ts) * 1e3, "inputs/s")
        row("first_step_s", run.get("first_s"), "s", note="first step: compilation and autotuning")
        if run.get("peak_mb") is not None:
            row("peak_mem_mb", run["peak_mb"], "MB")
        row("final_loss", run["losses"][-1], "nats")
        for ref in ("eager", "compile"):
            if ref != b and runs.get(ref, {}).get("round_medians"):
                est, lo, hi = bootstrap_ratio_ci(runs[ref]["round_medians"], run["round_medians"])
                row(f"speedup_vs_{ref}", est, "x", ci_low=lo, ci_high=hi,
                    note=f"95% bootstrap CI over {rounds} interleaved rounds")
        if eager and b != "eager":
            n = min(len(eager), len(run["losses"]))
            diffs = [abs(a - e) / max(abs(e), 1e-12) for a, e in zip(run["losses"][:n], eager[:n])]
            row("loss_max_rel_diff_vs_eager", max(diffs), "", note=f"largest relative loss difference over {n} steps")
    return rows


def _print_steps(args, runs, device) -> None:
    print(f"\n{args.model} training step, batch {args.batch_size}, amp {args.amp}, "
          f"{resnet_data.__name__.split('.')[-1]} on {device}"
          + ("  [CPU: not performance figures]" if device.type != "cuda" else ""))
    for b, run in runs.items():
        if run["times"]:
            ts = run["times"]
            print(f"  {b:<16} {median(ts):9.3f} ms  (p20 {quantile(ts, 0.2):.3f}, p80 {quantile(ts, 0.8):.3f})  "
                  f"final loss {run['losses'][-1]:.4f}")
        else:
            print(f"  {b:<16} {run['status']}: {run['note'][:120]}")


# --------------------------------------------------------------------------------------------------
# DataLoader worker sweep
# --------------------------------------------------------------------------------------------------
def _on_device(x: torch.Tensor, args, device) -> torch.Tensor:
    x = x.to(device, non_blocking=True)
    return x.contiguous(memory_format=torch.channels_last) if args.channels_last else x


def sweep_workers(args, dist: Dist) -> int:
    device = dist.device
    data = resnet_data.load(args.data, args.synthetic, args.train_limit, args.test_limit)
    if args.sweep_workers == "auto":
        counts, c = [0], 1
        while c <= (os.cpu_count() or 1):
            counts.append(c)
            c *= 2
    else:
        counts = [int(v) for v in args.sweep_workers.split(",")]
    model, forward = build_model(args, args.backends[0], device)
    n = len(data.train_images)
    trainer = Trainer(args, model, forward, device, 10**6)
    steps = min(args.sweep_steps, resnet_data.steps_per_epoch(n, args.batch_size) - 3)
    if steps < 1:
        raise SystemExit("--sweep-steps: the training set is too small for this batch size")
    measured = []
    for w in counts:
        sampler = resnet_data.PlannedBatchSampler(n, args.batch_size, args.seed)
        loader = resnet_data.make_cpu_loader(data.train_images, data.train_labels, sampler, w, device.type == "cuda")
        t0 = time.perf_counter()
        it = iter(loader)
        batches = [next(it)]
        startup = time.perf_counter() - t0
        for _ in range(2):  # warm-up: the model's first steps and the workers' queues
            x, y = batches[-1]
            trainer.step(_on_device(x, args, device), y.to(device))
            batches.append(next(it))
        sync(device)
        wait, t0 = 0.0, time.perf_counter()
        for _ in range(steps):
            t1 = time.perf_counter()
            x, y = next(it)
            wait += time.perf_counter() - t1
            trainer.step(_on_device(x, args, device), y.to(device, non_blocking=True))
        sync(device)
        train_s = time.perf_counter() - t0
        sampler.set_epoch(1)
        t0 = time.perf_counter()
        for i, _ in enumerate(loader):
            if i + 1 == steps:
                break
        load_s = time.perf_counter() - t0
        del it, loader
        measured.append({"workers": w, "images_per_s": steps * args.batch_size / train_s, "wait_s": wait / steps,
                         "loader_images_per_s": steps * args.batch_size / load_s, "startup_s": startup})
        print(f"[sweep] workers {w:>3}: {measured[-1]['images_per_s']:9.0f} images/s training, "
              f"{measured[-1]['loader_images_per_s']:9.0f} loading alone, {1e3 * wait / steps:.1f} ms wait/step",
              file=sys.stderr)
    best = max(measured, key=lambda r: r["images_per_s"])
    params = dict(base_params(args, data.name, device), data_path="cpu", sweep_steps=steps)
    rows = []
    for r in measured:
        p = dict(params, workers=r["workers"])
        for metric, unit in (("images_per_s", "inputs/s"), ("loader_images_per_s", "inputs/s"), ("wait_s", "s"),
                             ("startup_s", "s")):
            rows.append(results.make_row(SUITE, f"{args.model}_worker_sweep", p, args.amp, args.backends[0], metric,
                                         r[metric], unit))
    rows.append(results.make_row(SUITE, f"{args.model}_worker_sweep", params, args.amp, args.backends[0],
                                 "best_workers", best["workers"], "",
                                 note=f"{best['images_per_s']:.0f} images/s training"))
    print(f"best: {best['workers']} workers ({best['images_per_s']:.0f} images/s)")
    print(f"rows -> {results.write_rows(rows, args.out_dir, SUITE, tag=run_tag(args, 'workers'))}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------------------------------
# DDP scaling
# --------------------------------------------------------------------------------------------------
def _allreduce_ms(numel: int, dtype, device, reps: int = 10) -> float | None:
    if not torch.distributed.is_initialized():
        return None
    buf = torch.ones(numel, dtype=dtype, device=device)
    for _ in range(2):
        torch.distributed.all_reduce(buf)
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        torch.distributed.all_reduce(buf)
    sync(device)
    return 1e3 * (time.perf_counter() - t0) / reps


def _mean_over_ranks(losses: list[torch.Tensor], dist: Dist) -> list[float]:
    """Each step's loss averaged over the ranks: the loss of the global batch (one collective at the end)."""
    v = torch.stack(losses).float()
    dist.all_sum(v)
    return [float(x) for x in (v / dist.world).cpu()]


def scaling(args, dist: Dist) -> int:
    """Every per-GPU batch from the same initial weights: --warmup-iters steps, then --bench-steps timed
    back-to-back steps. The loss of each step (averaged over the ranks) is kept for the report's
    comparison of world sizes at one global batch."""
    device = dist.device
    data = resnet_data.load(args.data, args.synthetic, args.train_limit, args.test_limit)
    init = _init_state(args)
    numel = sum(v.numel() for k, v in init.items() if v.is_floating_point() and "running" not in k)
    grad_dtype = torch.bfloat16 if args.ddp_bf16_compress else torch.float32
    allreduce = _allreduce_ms(numel, grad_dtype, device)
    rows, curves, backend = [], {}, args.backends[0]
    timed = args.bench_steps or 20

    def measure(per_gpu: int) -> None:
        """Rows (and the loss curve) of one per-GPU batch size."""
        global_batch = per_gpu * dist.world
        params = dict(base_params(args, data.name, device, dist.world), batch=global_batch, batch_per_gpu=per_gpu,
                      global_batch=global_batch, data_path="gpu", timed_steps=timed, warmup_steps=args.warmup_iters)

        def row(metric, value, unit, **kw):
            rows.append(results.make_row("resnet_ddp", f"{args.model}_ddp", params, args.amp, backend,
                                         metric, value, unit, **kw))
        try:
            loader = resnet_data.GpuLoader(data.train_images, data.train_labels, global_batch,
                                           args.seed, device, dist.rank, dist.world, channels_last=args.channels_last)
            if loader.steps == 0:
                row("images_per_s", None, "inputs/s", status="unsupported", note="global batch > training set")
                return
            model, forward = build_model(args, backend, device, dist)
            model.load_state_dict(init)
            trainer = Trainer(args, model, forward, device, 10**6)
            losses = [trainer.step(*loader.batch(*divmod(i, loader.steps)))[0] for i in range(args.warmup_iters)]
            batches = [loader.batch(*divmod(args.warmup_iters + i, loader.steps)) for i in range(timed)]
            times, timed_losses = _step_times(trainer, batches, device)
            curves[f"{dist.world}x{per_gpu}"] = _mean_over_ranks(losses + timed_losses, dist)
            del trainer, model, forward, batches
        except torch.cuda.OutOfMemoryError as e:
            row("images_per_s", None, "inputs/s", status="oom", note=str(e)[:200])
            return
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
        ms = median(times)
        row("step_ms", ms, "ms", p20=quantile(times, 0.2), p80=quantile(times, 0.8))
        row("images_per_s", global_batch / ms * 1e3, "inputs/s")
        row("epoch_s", loader.steps * ms / 1e3, "s", note=f"{loader.steps} steps of the median step time")
        if allreduce is not None:
            row("allreduce_ms", allreduce, "ms", note=f"one all-reduce of {numel} {grad_dtype} values, timed alone")
        if dist.main:
            print(f"[scaling] {dist.world} x batch {per_gpu}: {ms:.2f} ms/step, {global_batch / ms * 1e3:.0f} images/s",
                  file=sys.stderr)

    path = None
    for per_gpu in [int(v) for v in args.scaling.split(",")]:
        measure(per_gpu)
        if dist.main:  # after each size: a run cut short keeps what it finished
            path = _save_scaling(args, backend, data.name, dist.world, rows, curves)
    if path is not None:
        print(f"rows -> {path}", file=sys.stderr)
    return 0


def _save_scaling(args, backend: str, data_name: str, world: int, rows: list[dict], curves: dict) -> Path:
    """Merge the rows into the run's file and the loss curves into its curves file (a rerun of some
    sizes keeps the others' curves when data, dtype and machine are the same); returns the rows' CSV path."""
    bucket = ddp_bucket_mb(args, world)
    tag = f"scaling-{args.model}-{backend}{f'-bucket{bucket:g}mb' if bucket else ''}-{world}proc".replace("+", "_")
    out = results.write_rows(rows, args.out_dir, "resnet_ddp", tag=tag)
    path = out.parent / f"resnet_ddp-{tag}-curves.json"
    head = {"backend": backend, "data": data_name, "dtype": args.amp, "machine": args.machine,
            **({"ddp_bucket_mb": bucket} if bucket else {})}
    old = json.loads(path.read_text()) if path.is_file() else {}
    kept = old.get("losses", {}) if all(old.get(k) == v for k, v in head.items()) else {}
    atomic_write_text(path, json.dumps({**head, "losses": {**kept, **curves}}))
    return out


def _curve_files(paths) -> list[Path]:
    """The --scaling runs' loss curves (resnet_ddp-*-curves.json) beside the given files or in the dirs."""
    out = []
    for p in map(Path, paths):
        d = p if p.is_dir() else p.parent
        out += sorted(f for f in d.rglob("resnet_ddp-*-curves.json") if "runs" not in f.relative_to(d).parts)
    return out


def scaling_report(args) -> int:
    """Strong and weak scaling efficiency from the images_per_s rows of --scaling runs; the loss curves of
    g GPUs x b images against one GPU x g*b images (the same global batch: same batches, same initial
    weights); a figure of images/s and efficiency per GPU count (resnet_ddp_scaling.png)."""
    sources = args.scaling_report or [str(results.results_dir())]
    df = results.read_results(sources)
    df = df[(df["suite"] == "resnet_ddp") & (df["metric"] == "images_per_s") & (df["status"] == "ok")]
    ips: dict[tuple, dict[tuple[int, int], float]] = {}
    machine: dict[tuple, object] = {}
    device: dict[tuple, str] = {}  # the report's rows carry the device the throughput was measured on
    for _, r in df.iterrows():
        p = json.loads(r["params"])
        key = (r["backend"], p.get("data"), str(r["dtype"]), p.get("ddp_bucket_mb"))
        ips.setdefault(key, {})[(int(p["gpus"] or p["processes"]), int(p["batch_per_gpu"]))] = float(r["value"])
        machine[key], device[key] = p.get("machine"), r.get("device")
    curves: dict[tuple, dict[str, list[float]]] = {}
    for f in _curve_files(sources):
        c = json.loads(f.read_text())
        curves.setdefault((c["backend"], c["data"], str(c["dtype"]), c.get("ddp_bucket_mb")), {}).update(c["losses"])
    for key in [k for k in ips if k[3] is not None]:  # one process has no DDP bucket: its rows serve every size
        plain = key[:3] + (None,)
        ips[key] = {**{gb: v for gb, v in ips.get(plain, {}).items() if gb[0] == 1}, **ips[key]}
        one_gpu = {n: c for n, c in curves.get(plain, {}).items() if n.startswith("1x")}
        curves[key] = {**one_gpu, **curves.get(key, {})}
    rows = []
    for key, table in ips.items():
        backend, data, dtype, bucket = key

        def row(g, b, metric, value, note):
            base = {"gpus": g, "batch_per_gpu": b, "global_batch": g * b, "data": data,
                    **({"machine": machine[key]} if machine[key] else {}),
                    **({"ddp_bucket_mb": bucket} if bucket else {})}
            rows.append(results.make_row("resnet_ddp", f"{args.model}_ddp", base, dtype, backend, metric, value, "",
                                         note=note, device=device[key] if isinstance(device[key], str) else None))
        for (g, b), v in sorted(table.items()):
            if g > 1 and (1, b) in table:
                row(g, b, "weak_scaling_efficiency", v / (g * table[(1, b)]),
                    f"ips({g}, {b}) / ({g} * ips(1, {b})): per-GPU batch fixed, as the study's fixed epoch")
            if g > 1 and (1, g * b) in table:
                row(g, b, "strong_scaling_efficiency", v / (g * table[(1, g * b)]),
                    f"ips({g}, {b}) / ({g} * ips(1, {g * b})): global batch {g * b} fixed")
        losses = curves.get(key, {})
        for g, b in _curve_pairs(losses):
            curve, one = losses[f"{g}x{b}"], losses[f"1x{g * b}"]
            n = min(len(one), len(curve))
            diffs = [abs(a - e) / max(abs(e), 1e-12) for a, e in zip(curve[:n], one[:n])]
            pair = f"{g} GPUs x {b} vs 1 GPU x {g * b} (batch-norm statistics are per GPU)"
            row(g, b, "loss_max_rel_diff_vs_1gpu", max(diffs),
                f"largest relative difference of the global-batch loss over {n} steps, {pair}")
            tail = max(1, n // 5)
            mean_g, mean_1 = sum(curve[n - tail:n]) / tail, sum(one[n - tail:n]) / tail
            row(g, b, "loss_tail_rel_diff_vs_1gpu", abs(mean_g - mean_1) / max(abs(mean_1), 1e-12),
                f"relative difference of the mean loss over steps {n - tail}..{n - 1}, {pair}")
    for r in rows:
        p = json.loads(r["params"])
        print(f"{_label(r['backend'], p.get('ddp_bucket_mb')):<13} {r['metric']:<26} gpus {p['gpus']} batch/gpu {p['batch_per_gpu']:>5}: "
              + (f"{100 * r['value']:.1f}%" if "efficiency" in r["metric"] else f"{r['value']:.4f}"))
    if not rows:
        print("no pairs of 1-GPU and multi-GPU images_per_s rows found", file=sys.stderr)
        return 1
    out = results.write_rows(rows, args.out_dir, "resnet_ddp", tag="scaling-report")
    print(f"rows -> {out}; figure -> {_scaling_figure(ips, curves, out.parent)}", file=sys.stderr)
    return 0


def _scaling_figure(ips: dict, curves: dict, out_dir: Path) -> Path:
    """Left: images/s against GPUs, one line per backend and per-GPU batch, with ideal scaling dotted.
    Right: the loss curves of the largest world size against one GPU at the same global batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for (backend, data, dtype, bucket), table in sorted(ips.items(), key=lambda kv: str(kv[0])):
        name = _label(backend, bucket)
        for b in sorted({b for _, b in table}):
            pts = sorted((g, v) for (g, bb), v in table.items() if bb == b)
            line, = left.plot([g for g, _ in pts], [v for _, v in pts], "o-", label=f"{name}, {b}/GPU")
            if (1, b) in table:
                left.plot([g for g, _ in pts], [g * table[(1, b)] for g, _ in pts], ":", color=line.get_color())
        losses = curves.get((backend, data, dtype, bucket), {})
        pairs = _curve_pairs(losses)
        if pairs:  # the largest world size at its largest global batch
            g, b = max(pairs)
            right.plot(_running_mean(losses[f"1x{g * b}"]), label=f"{name}: 1 GPU x {g * b}")
            right.plot(_running_mean(losses[f"{g}x{b}"]), "--", label=f"{name}: {g} GPUs x {b}")
    gpus = sorted({g for t in ips.values() for g, _ in t})
    left.set(xlabel="GPUs", ylabel="images/s", title="ResNet-18 DDP throughput (dotted: ideal)", yscale="log")
    left.set_xscale("log", base=2)
    left.set_xticks(gpus, [str(g) for g in gpus])
    left.legend(fontsize=7, ncol=2)
    right.set(xlabel="step", ylabel="training loss (global batch, running mean of 10)",
              title="same global batch and batches, 1 GPU vs several")
    right.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "resnet_ddp_scaling.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _label(backend: str, bucket: float | None) -> str:
    """A backend's name in the report and figure, with its DDP bucket size where one was set."""
    return backend + (f" (bucket {bucket:g} MB)" if bucket else "")


def _curve_pairs(losses: dict) -> list[tuple[int, int]]:
    """(g, b) for every curve of g > 1 GPUs x b images whose one-GPU twin (1 x g*b) is there too, sorted."""
    pairs = sorted(tuple(int(v) for v in name.split("x")) for name in losses)
    return [(g, b) for g, b in pairs if g > 1 and f"1x{g * b}" in losses]


def _running_mean(v: list[float], k: int = 10) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(v):
        acc += x - (v[i - k] if i >= k else 0.0)
        out.append(acc / min(i + 1, k))
    return out
