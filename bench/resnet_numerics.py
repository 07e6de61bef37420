"""Why do the fused ResNet-MLP and eager fp32 disagree on the GPU? Separates rounding chaos from a bug.

    python -m bench.resnet_numerics [--depths 10,100] [--steps 100]

1. One step of ResNetMLP200 (B = 129 and 1024): relative error of every gradient against float64 for the
   fused kernels and for eager fp32, and the number of ReLU units (rows x units x layers) whose on/off
   state differs from float64's in each (a flipped unit changes a gradient discontinuously).
2. 100 steps of Adam on real SGEMM batches, three ways: eager float64 (the truth), eager fp32, fused fp32:
   the relative loss difference of each pair at steps 1, 10, 30, 100. If eager fp32 drifts from float64
   as far as the fused kernels do, the drift is the network's sensitivity to rounding, not a kernel error.
   Also eager fp32 and fused fp32 against themselves with each batch's rows shuffled: the same exact
   computation in another order of fp32 additions, so the smallest "fused vs eager" any fp32 kernel can
   promise.
3. Fused step time from a CUDA graph (median of 50 replays) at each depth, every tiling the tuner
   tried, and the timed build's account of the time (the same kernels compiled with grid_sync's timed
   exchange): how long a program waits in each exchange and how many polls that takes.
4. ``--only tilings``: forward and backward kernels timed separately in one run for the tilings given
   (``--fwd 64/4,32/8``, ``--bwd 32/4``: BLOCK_M/warps) and precisions (``--precisions ieee,tf32x3``),
   each checked against the first, plus the evaluation-mode forward (running statistics: the same
   dots, BN and stores with no exchange), which separates the exchanges' cost from the rest.
5. ``--only once``: one forward + backward pair at the first of ``--time-depths`` with fixed tilings
   (after a warm-up launch pair that compiles), for a profiler:
       ncu --clock-control none -k regex:_resnet_ --launch-skip 2 --launch-count 2 \
           --section WarpStateStats --section SourceCounters -o resnet \
           python -m bench.resnet_numerics --only once --time-depths 100
       python -m bench.ncu_stalls resnet.ncu-rep
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys

import torch

from bench.cli import argument_parser, needs_gpu, run
from bench.data import sgemm as sgemm_data
from bench.results import provenance
from bench.sgemm.suites import batch_starts, rel_diff, step_fns
from models.deep_mlp import FusedTrainer, build_model
from triton_kernels import fused_mlp, fused_resnet, grid_sync
from triton_kernels.runtime import Config, atomic_write_text, cuda_time_ms
from triton_kernels.testing import rel_err


def _relu_states_eager(model, x):
    """On/off state of every ReLU of the ResNet's blocks (a: first layer, h: block output) for x."""
    h = model.stem(x)
    out = []
    for blk in model.blocks:
        a = torch.relu(blk.bn1(blk.lin1(h)))
        h = torch.relu(h + blk.bn2(blk.lin2(a)))
        out += [a > 0, h > 0]
    return torch.stack(out).cpu()


def one_step(name, B, dev):
    model = build_model(name, seed=B, device=dev)
    ref = copy.deepcopy(model).cpu().double()
    e32 = copy.deepcopy(ref).float().to(dev)
    x, t = torch.randn(B, 14, device=dev), torch.randn(B, device=dev)
    flat, run = model.flatten_(), model.running_buffer()
    out = fused_mlp.forward(model.layout, x, flat, target=t, running=run.clone(), update_running=False)
    res = fused_mlp.backward(model.layout, x, flat, out, target=t)
    nb = model.depth // 2
    ours = torch.stack([s for j in range(nb) for s in (out["a"][j] > 0, out["hs"][j + 1] > 0)]).cpu()
    with torch.no_grad():
        s64 = _relu_states_eager(ref, x.double().cpu())
        s32 = _relu_states_eager(e32, x)
    yr = ref(x.double().cpu())
    ((yr - t.double().cpu()) ** 2).mean().backward()
    ye = e32(x)
    ((ye - t) ** 2).mean().backward()
    g64 = torch.cat([p.grad.reshape(-1) for _, _, p in ref.layout_parameters()])
    g32 = torch.cat([p.grad.reshape(-1) for _, _, p in e32.layout_parameters()])
    views = lambda g: model.layout.views(g)  # noqa: E731
    rows = {}
    for k in ("w_in", "w_hid", "gamma", "beta", "w_head"):
        rows[k] = (rel_err(views(res["grad"])[k], views(g64)[k]), rel_err(views(g32)[k], views(g64)[k]))
    print(f"{name} B={B}: y ours {rel_err(out['y'], yr):.2e} eager {rel_err(ye, yr):.2e}; "
          f"ReLU states differing from fp64: ours {(ours != s64).sum().item()}, eager fp32 {(s32 != s64).sum().item()}"
          f" of {s64.numel()}")
    for k, (o, e) in rows.items():
        print(f"   grad {k:7s} ours {o:.2e}  eager fp32 {e:.2e}")
    return {"model": name, "B": B, "flips_ours": int((ours != s64).sum()), "flips_eager32": int((s32 != s64).sum()),
            "grad_rel_err": rows}


def trajectories(name, data, steps, dev, B=1024, permuted=True):
    """The same ``steps`` Adam steps (seed 0, lr 1e-3, fp32 ieee, consecutive batches of B rows) run as
    eager float64 (the truth), eager fp32 and fused fp32, and with ``permuted`` also eager fp32 and fused
    fp32 on the same batches with their rows shuffled (a fresh seeded permutation each step). Row order
    cannot change the exact result (batch statistics and the MSE are sums over rows), so the permuted
    runs measure how far a network amplifies nothing but the order of fp32 additions: a baseline for
    "fused vs eager" that no fp32 implementation summing in its own order can beat."""
    # the same step functions as bench.sgemm's loss check
    make = step_fns(name, argparse.Namespace(width=16, seed=0, lr=1e-3, weight_decay=0.0, precision="ieee"),
                    dev)
    fused = make["triton"]()
    fns = {"fp64": make["eager64"](), "eager32": make["eager"](), "fused": fused}
    if permuted:
        fns.update(eager32_perm=make["eager"](), fused_perm=make["triton"]())
    gen = torch.Generator().manual_seed(1)
    marks, out = {1, 10, 30, 100, steps}, []
    B = min(B, len(data.train))
    rel = rel_diff
    for s, i in enumerate(batch_starts(len(data.train), B, steps)):
        x, t = data.train.x[i:i + B], data.train.y[i:i + B]
        p = torch.randperm(B, generator=gen).to(x.device)
        ls = {k: float(f(x[p], t[p]) if k.endswith("_perm") else f(x, t)) for k, f in fns.items()}
        if s + 1 in marks:
            r = {"step": s + 1, "eager32_vs_fp64": rel(ls["eager32"], ls["fp64"]),
                 "fused_vs_fp64": rel(ls["fused"], ls["fp64"]),
                 "fused_vs_eager32": rel(ls["fused"], ls["eager32"]), "loss_fp64": ls["fp64"]}
            if permuted:
                r.update(eager32_vs_eager32_permuted=rel(ls["eager32_perm"], ls["eager32"]),
                         fused_vs_fused_permuted=rel(ls["fused_perm"], ls["fused"]))
            out.append(r)
            print(f"{name} step {s + 1:4d}: eager32-fp64 {r['eager32_vs_fp64']:.2e}  fused-fp64 "
                  f"{r['fused_vs_fp64']:.2e}  fused-eager32 {r['fused_vs_eager32']:.2e}"
                  + (f"  eager32-eager32(rows permuted) {r['eager32_vs_eager32_permuted']:.2e}  "
                     f"fused-fused(rows permuted) {r['fused_vs_fused_permuted']:.2e}" if permuted else "")
                  + f"  (loss {ls['fp64']:.5f})", flush=True)
    for f in (fns["fused"], fns.get("fused_perm")):
        if f is not None and hasattr(f, "__self__"):
            f.__self__.check()
    return out


def graph_ms(name, data, dev, B=1024, reps=50):
    tr = FusedTrainer(build_model(name, seed=0, device=dev))
    x, t = data.train.x[:B].contiguous(), data.train.y[:B].contiguous()
    g, _ = tr.capture(x, t)
    ts = sorted(cuda_time_ms(g.replay, warmup=5, rep=reps, flush_l2=False))
    tr.check()
    cfg = (tr._fwd[B]["config"], tr._bwd[B]["config"])
    print(f"{name}: fused step from a graph {ts[len(ts) // 2]:.3f} ms (p10 {ts[len(ts) // 10]:.3f}); "
          f"configs fwd {cfg[0]} bwd {cfg[1]}", flush=True)
    return ts[len(ts) // 2]


def profile(name, data, dev, B=1024):
    """Per-exchange wait and polls of the tuned fused ResNet kernels (their timed build: the same kernels
    compiled with grid_sync's timed exchange, fused_resnet.timed_forward / timed_backward)."""
    tr = FusedTrainer(build_model(name, seed=0, device=dev))
    x, t = data.train.x[:B].contiguous(), data.train.y[:B].contiguous()
    tr._step(x, t)
    fcfg, bcfg = tr._fwd[B]["config"], tr._bwd[B]["config"]
    lay, flat = tr.layout, tr.flat
    res = {}
    for kind, cfg in (("forward", fcfg), ("backward", bcfg)):
        n_prog = -(-B // cfg.kwargs["BLOCK_M"])
        for _ in range(3):  # the last launch's numbers are kept
            out = fused_mlp.forward(lay, x, flat, target=t, running=tr.running.clone(), update_running=False,
                                    config=fcfg)
            if kind == "forward":
                p = fused_resnet.timed_forward(lay, x, flat, out, target=t, running=tr.running.clone())
            else:
                p = fused_resnet.timed_backward(lay, x, flat, out, target=t, config=bcfg)
        wait_ns, polls, kern_ns = (p[:, 0] >> 20).double(), (p[:, 0] & ((1 << 20) - 1)).double(), p[:, 1].double()
        n_ex = lay.depth
        r = {"config": str(cfg), "programs": n_prog, "kernel_us": kern_ns.mean().item() / 1e3,
             "wait_us_per_exchange": wait_ns.mean().item() / n_ex / 1e3,
             "other_us_per_layer": (kern_ns - wait_ns).mean().item() / n_ex / 1e3,
             "polls_per_exchange": polls.mean().item() / n_ex}
        res[kind] = r
        print(f"{name} {kind:8s} [{r['config']}, {n_prog} programs]: kernel {r['kernel_us']:.1f} us; per layer: "
              f"waiting {r['wait_us_per_exchange']:.3f} us ({r['polls_per_exchange']:.2f} polls), "
              f"the rest {r['other_us_per_layer']:.3f} us", flush=True)
    for tuner in (fused_resnet.forward_tuner, fused_resnet.backward_tuner):
        for k, trials in tuner.trials.items():
            if f"'{lay.kind}'" in k or lay.kind in k:
                print(f"  {tuner.name} {k}: " + ", ".join(
                    f"{t['config'].get('kwargs', {}).get('BLOCK_M')}/{t['config'].get('num_warps')}w "
                    f"{t['ms']:.3f}" if t.get("ms") else "err" for t in trials), flush=True)
    return res


def _median_ms(fn, reps=15):
    """Median CUDA-event time of ``fn`` (3 warm-up calls, no L2 flush: the kernels' data is L2-resident
    in a training step too)."""
    return statistics.median(cuda_time_ms(fn, warmup=3, rep=reps, flush_l2=False))


def _max_rel_diff(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _tiling(spec):
    bm, w = spec.split("/")
    return Config({"BLOCK_M": int(bm)}, int(w), 1)


def tilings(name, data, dev, fwd, bwd, precisions, B=1024):
    """Forward / backward kernel times (median of 15 launches) per tiling and precision, same run; the
    first variant is the reference of the max relative differences reported (y, xh; gradient). A
    variant that fails (e.g. a tile that does not fit the shared memory) gets a row saying why."""
    tr = FusedTrainer(build_model(name, seed=0, device=dev))
    lay, flat = tr.layout, tr.flat
    x, t = data.train.x[:B].contiguous(), data.train.y[:B].contiguous()
    run0 = tr.running.clone()
    ref_o = fused_mlp.forward(lay, x, flat, target=t, running=run0.clone(), update_running=False,
                              config=_tiling(fwd[0]))
    ref_g = fused_mlp.backward(lay, x, flat, ref_o, target=t, config=_tiling(bwd[0]))
    grid_sync.check_sync(ref_o, ref_g["sync"])

    def forward_row(c, prec, train):
        o = fused_mlp.forward(lay, x, flat, target=t, running=run0.clone(), update_running=False, config=c,
                              precision=prec, training=train)
        ms = _median_ms(lambda: fused_mlp.forward(lay, x, flat, target=t, running=run0, update_running=False, config=c,
                                                  out=o, precision=prec, training=train))
        grid_sync.check_sync(o)
        r = {"ms": ms}
        if train:
            r.update(rel_diff_y=_max_rel_diff(o["y"], ref_o["y"]), rel_diff_xh=_max_rel_diff(o["xh"], ref_o["xh"]))
        return r

    def backward_row(c, prec, _train):
        g = fused_mlp.backward(lay, x, flat, ref_o, target=t, config=c, precision=prec)
        ms = _median_ms(lambda: fused_mlp.backward(lay, x, flat, ref_o, target=t, config=c, reduce=False,
                                                   partials=g["partials"], sync=g["sync"], precision=prec))
        grid_sync.check_sync(g["sync"])
        return {"ms": ms, "rel_diff_grad": _max_rel_diff(g["grad"], ref_g["grad"])}

    variants = ([("forward", forward_row, f, p, True) for p in precisions for f in fwd]
                + [("forward, evaluation mode (no exchange)", forward_row, fwd[0], precisions[0], False)]
                + [("backward", backward_row, b, p, True) for p in precisions for b in bwd])
    rows = []
    for kernel, measure, spec, prec, train in variants:
        r = {"model": name, "kernel": kernel, "tiling": spec, "precision": prec}
        try:
            r.update(measure(_tiling(spec), prec, train))
            r["us_per_layer"] = r["ms"] * 1e3 / lay.depth
            print(f"{name} {kernel:40s} {spec:7s} {prec:7s} {r['ms']:.3f} ms ({r['us_per_layer']:.2f} us/layer)",
                  flush=True)
        except Exception as e:
            r["error"] = repr(e)[:300]
            print(f"{name} {kernel} {spec} {prec}: {r['error']}", flush=True)
        rows.append(r)
    return rows


def once(name, data, dev, fwd, bwd, B=1024):
    """Two forward + backward launch pairs with fixed tilings (the first compiles): for a profiler."""
    tr = FusedTrainer(build_model(name, seed=0, device=dev))
    x, t = data.train.x[:B].contiguous(), data.train.y[:B].contiguous()
    for _ in range(2):
        o = fused_mlp.forward(tr.layout, x, tr.flat, target=t, running=tr.running.clone(), update_running=False,
                              config=_tiling(fwd))
        g = fused_mlp.backward(tr.layout, x, tr.flat, o, target=t, config=_tiling(bwd))
    torch.cuda.synchronize()
    grid_sync.check_sync(o, g["sync"])


def main(argv=None):
    p = argument_parser("bench.resnet_numerics", __doc__, full=False)
    p.add_argument("--depths", default="10,100")
    p.add_argument("--time-depths", default="10,100,1000")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--families", default="ResNetMLP,GloNet")
    p.add_argument("--profile-depths", default="100,1000")
    p.add_argument("--only", default="one_step,trajectories,graph,profile",
                   help="parts to run (also: tilings, once)")
    p.add_argument("--fwd", default="64/4,128/4,32/4", help="forward tilings BLOCK_M/warps (tilings, once)")
    p.add_argument("--bwd", default="32/4,64/4", help="backward tilings BLOCK_M/warps (tilings, once)")
    p.add_argument("--precisions", default="ieee", help="dot precisions (tilings)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    needs_gpu("bench.resnet_numerics", "it compares the fused kernels with eager fp32 on the device; the CPU test "
                                       "tests/test_resnet_numerics.py runs its trajectories in the interpreter")
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    parts = a.only.split(",")
    rep = {}

    def save():
        if a.json:
            atomic_write_text(a.json, json.dumps(dict(rep, provenance=provenance()), indent=1, default=str))

    if "one_step" in parts:
        rep["one_step"] = [one_step("ResNetMLP200", B, dev) for B in (129, 1024)]
    data = sgemm_data.load(None, device=dev)
    if "trajectories" in parts:
        rep["trajectories"] = {}
        for f in a.families.split(","):
            for d in map(int, a.depths.split(",")):
                rep["trajectories"][f"{f}{d}"] = trajectories(f"{f}{d}", data, a.steps, dev)
                save()  # a run cut short keeps the models it finished
    if "graph" in parts:
        rep["graph_ms"] = {f"ResNetMLP{d}": graph_ms(f"ResNetMLP{d}", data, dev)
                           for d in map(int, a.time_depths.split(","))}
    if "profile" in parts:
        rep["profile"] = {f"ResNetMLP{d}": profile(f"ResNetMLP{d}", data, dev)
                          for d in map(int, a.profile_depths.split(","))}
    if "tilings" in parts:
        rep["tilings"] = [r for d in map(int, a.time_depths.split(","))
                          for r in tilings(f"ResNetMLP{d}", data, dev, a.fwd.split(","), a.bwd.split(","),
                                           a.precisions.split(","))]
    if "once" in parts:
        once(f"ResNetMLP{int(a.time_depths.split(',')[0])}", data, dev, a.fwd.split(",")[0], a.bwd.split(",")[0])
    save()


if __name__ == "__main__":
    sys.exit(run(main))
