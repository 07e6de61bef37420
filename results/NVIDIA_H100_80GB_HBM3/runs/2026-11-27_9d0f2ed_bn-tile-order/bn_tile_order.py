"""Experiment (issue 18): the order in which the batch-norm reductions read their tiles, and the L2.

In the training step a convolution writes x (67 MB at ResNet-18's widest layer, more than the 50 MB L2) from
front to back; the statistics kernel then reads it, the apply kernel reads it again. Today each reduction
program reads one contiguous chunk of tiles (chunk g = tiles [g * per_group, (g + 1) * per_group)), so all
chunks advance together and the L2's most recent lines (the back of x) are evicted by the misses at the
front before they are read. Variants of the two reduction kernels, made from batchnorm_kernels.py's source:

    chunked              today's kernels
    interleaved          program g reads tiles g, g + G, g + 2G, ...: the read front sweeps x front to back
    interleaved-reverse  program g reads tiles T-1-g, T-1-g-G, ...: back to front, the last-written lines first

With the reverse order a reduction reads what its producer wrote last while the L2 still holds it, and ends at
the front, which the forward-order elementwise kernel after it (apply, dx) reads first. Prediction: on the
512 x 64 x 32 x 32 layers (5 per step) the statistics and the backward sums read ~40 % of their bytes from
the L2 instead of HBM: ~10-20 us less per launch, ~0.1-0.2 ms per step; no change on the smaller layers, which
the L2 holds whatever the order.

    python -m bench.bn_tile_order --probe     each layer shape: a forward-writing copy into x (dy), then the
                                              batch norm's forward (backward), replayed from CUDA graphs; the
                                              chain's time less the copy's, per variant
    python -m bench.bn_tile_order --step OUT  the ResNet-18 step (triton+stepgraph, batch 512 bf16, synthetic)
                                              per variant, two interleaved rounds, compile+stepgraph beside in the first
    python -m bench.bn_tile_order --check     every variant against float64 (CPU interpreter or GPU)

Each variant tunes the two reductions into a cache file of its own. Delete this module once it has spoken.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from triton_kernels import batchnorm, batchnorm_eager, batchnorm_kernels
from triton_kernels.graphs import capture_graph
from triton_kernels.runtime import Config, cuda_time_ms

_LOOPS = {  # the two reduction kernels' tile loops, as batchnorm_kernels.py writes them
    "    t_start = group * TILES_PER_GROUP\n    t_end = tl.minimum(t_start + TILES_PER_GROUP, TILES)\n":
        "",
    "    for t in range(t_start, t_end):\n": "{loop}",
    "    t_start = group * TILES_PER_GROUP\n"
    "    for t in range(t_start, tl.minimum(t_start + TILES_PER_GROUP, TILES)):\n": "{loop}",
}
_ORDERS = {"interleaved": "group + k * GROUPS", "interleaved-reverse": "TILES - 1 - group - k * GROUPS"}
VARIANTS = ("chunked", "interleaved", "interleaved-reverse")
_KERNELS: dict[str, tuple] = {}


def _scratch() -> Path:
    """A temporary folder of this process (the variants' kernel sources, the check's tuning files)."""
    global _SCRATCH
    if _SCRATCH is None:
        _SCRATCH = Path(tempfile.mkdtemp(prefix="bn_tile_order_"))
    return _SCRATCH


_SCRATCH = None


def kernels(variant: str) -> tuple:
    """(statistics kernel, backward-sums kernel) of a variant."""
    if variant == "chunked":
        return batchnorm_kernels._bn_stats_kernel, batchnorm_kernels._bn_bwd_reduce_kernel
    if variant not in _KERNELS:
        source = Path(batchnorm_kernels.__file__).read_text()
        loop = (f"    for k in range(0, (TILES - group + GROUPS - 1) // GROUPS):\n"
                f"        t = {_ORDERS[variant]}\n")
        for old, new in _LOOPS.items():
            if old not in source:
                raise RuntimeError(f"batchnorm_kernels.py no longer has the loop this experiment rewrites: {old!r}")
            source = source.replace(old, new.format(loop=loop))
        name = "bn_kernels_" + variant.replace("-", "_")
        path = _scratch() / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _KERNELS[variant] = (module._bn_stats_kernel, module._bn_bwd_reduce_kernel)
    return _KERNELS[variant]


def use(variant: str, cache_dir: Path | None) -> None:
    """Route batch_norm's two reductions to a variant's kernels, with fresh plans and a tuning cache of its own
    in ``cache_dir`` (None: the tuners' own caches)."""
    batchnorm._bn_stats_kernel, batchnorm._bn_bwd_reduce_kernel = kernels(variant)
    for name in ("stats", "bwd_reduce"):
        tuner = batchnorm._tuners[name]
        tuner.clear_memory()
        if cache_dir is None:
            vars(tuner).pop("cache_path", None)
        else:
            tuner.cache_path = lambda name=name: cache_dir / f"batchnorm_{name}-{variant}.json"
    batchnorm._PLANS.clear()
    batchnorm_eager._FAST.clear()


def restore() -> None:
    """batch_norm back to its own kernels and tuning caches."""
    use("chunked", None)


def check(device: str) -> None:
    """Each variant's forward and every gradient (residual, relu, several groups and channel blocks, partial
    tiles) against float64."""
    torch.manual_seed(0)
    config = Config({"BLOCK_M": 16, "BLOCK_C": 16, "ACC_ROWS": 4, "PER_SM": 2}, 4, 1)
    x = (torch.randn(5, 40, 7, 9, device=device) * 2 + 1).to(memory_format=torch.channels_last)
    res, g = torch.randn_like(x), torch.randn_like(x)
    w, b = torch.rand(40, device=device) + 0.5, torch.randn(40, device=device)
    leaves = [t.double().requires_grad_() for t in (x, res, w, b)]
    ref = torch.relu(torch.nn.functional.batch_norm(leaves[0], None, None, leaves[2], leaves[3], True) + leaves[1])
    ref_grads = torch.autograd.grad(ref, leaves, g.double())
    try:
        for variant in VARIANTS:
            use(variant, _scratch())
            inputs = [t.clone().requires_grad_() for t in (x, res, w, b)]
            y = batchnorm.batch_norm(inputs[0], None, None, inputs[2], inputs[3], residual=inputs[1], relu=True,
                                     config=config)
            grads = torch.autograd.grad(y, inputs, g)
            errors = [float((a.detach().double() - e.detach()).abs().max())
                      for a, e in zip((y, *grads), (ref, *ref_grads))]
            print(f"{variant:20s} max |error| y, dx, dres, dw, db: " + ", ".join(f"{e:.1e}" for e in errors))
            if max(errors) > 1e-4:
                raise AssertionError(f"{variant}: off float64 by {max(errors):.1e}")
    finally:
        restore()


def probe(cache_dir: Path) -> None:
    """Per layer shape and variant: (copy into x, then forward) less (copy), and (copy into dy, then backward)
    less (copy), each the median of interleaved graph replays (us)."""
    shapes = [(512, 64, 32, 32), (512, 128, 16, 16), (512, 256, 8, 8), (512, 512, 4, 4)]
    print(f"{'shape':22s} {'variant':20s} {'fwd us':>8s} {'bwd us':>8s}  (copy alone: fwd, bwd us)")
    for shape in shapes:
        x = torch.randn(shape, device="cuda").to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
        src, dy, dy_src = torch.randn_like(x), torch.empty_like(x), torch.randn_like(x)
        w, b = torch.rand(shape[1], device="cuda") + 0.5, torch.randn(shape[1], device="cuda")
        rm, rv = torch.zeros(shape[1], device="cuda"), torch.ones(shape[1], device="cuda")
        for variant in VARIANTS:
            use(variant, cache_dir)
            stats = batchnorm.batch_norm_train_forward(x, w, b, None, rm, rv, 0.1, 1e-5, True, True)[1]

            def forward():
                x.copy_(src)
                batchnorm.batch_norm_train_forward(x, w, b, None, rm, rv, 0.1, 1e-5, True, True)

            def backward():
                dy.copy_(dy_src)
                batchnorm.batch_norm_train_backward(dy, x, None, stats, True, True, False)

            graphs = {k: capture_graph(fn)[0] for k, fn in (("copy_x", lambda: x.copy_(src)), ("fwd", forward),
                                                              ("copy_dy", lambda: dy.copy_(dy_src)), ("bwd", backward))}
            times = {k: [] for k in graphs}
            for _ in range(5):  # interleaved rounds
                for k, graph in graphs.items():
                    times[k] += cuda_time_ms(graph.replay, warmup=1, rep=50, flush_l2=False)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(f"{str(shape):22s} {variant:20s} {med['fwd'] - med['copy_x']:8.1f} {med['bwd'] - med['copy_dy']:8.1f}"
                  f"  ({med['copy_x']:.1f}, {med['copy_dy']:.1f})", flush=True)


def step(out: Path) -> None:
    import bench.resnet as bench_resnet

    for rnd in range(2):
        for variant in VARIANTS:
            use(variant, out)
            backends = "triton+stepgraph,compile+stepgraph" if (variant, rnd) == ("chunked", 0) else "triton+stepgraph"
            print(f"=== round {rnd} variant {variant}", flush=True)
            bench_resnet.main(["--model", "resnet18", "--synthetic", "--batch-size", "512", "--amp", "bf16", "--sgd",
                               "fused", "--backend", backends, "--bench-steps", "50", "--bench-rounds", "3",
                               "--warmup-iters", "60", "--no-progress", "--out-dir", f"{out}/{variant}-{rnd}"])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--probe", action="store_true")
    mode.add_argument("--step", metavar="OUT")
    args = parser.parse_args(argv)
    if args.check:
        check("cuda" if torch.cuda.is_available() else "cpu")
    elif args.probe:
        check("cuda")
        probe(_scratch())
    else:
        out = Path(args.step)
        out.mkdir(parents=True, exist_ok=True)
        step(out)


if __name__ == "__main__":
    main()
