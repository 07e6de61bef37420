"""ResNet-18/34 on CIFAR-10: the studies' training recipe and tooling, one command.

    python -m bench.resnet --model resnet18 --epochs 30 --batch-size 512 --lr 0.4 --optimizer sgd-nesterov \\
        --amp bf16 --label-smoothing 0.1 --warmup 200 --backend triton --out-dir runs/r18 [--data DIR | --synthetic]
    torchrun --nproc-per-node 4 -m bench.resnet ...            (DDP: NCCL on GPUs, gloo on CPUs)

Modes (one per call; the default trains):
    (train)            epochs of training with evaluation after each; rows: test_acc, epoch_s, step_ms, ...
    --bench-steps N    the training step alone, timed per backend in one process (--backend eager,compile,triton),
                       every backend from the same weights on the same batches; rows: step_ms, speedups, the
                       loss curves' largest difference from eager's
    --sweep-workers    DataLoader workers (the CPU data path) vs images/s; rows and the best count
    --scaling          per-GPU batch sizes under the current torchrun world size (bench.resnet_tools)
    --scaling-report   strong/weak scaling efficiency from the rows of several --scaling runs

Data: real CIFAR-10 (bench.data.cifar10: the python / binary batches or the WebP shards; --data DIR or
the default search) or --synthetic (random images, same shapes); every row says which ("data" param).
--data-path gpu keeps the training set on the device and augments there (random crop, pad 4, + flip);
--data-path cpu uses a DataLoader with --workers processes (default: gpu on a GPU, cpu otherwise).

Checkpoints (rank 0, written atomically into --out-dir): last.pt every --save-every steps and at each
epoch end (full state: model, optimizer, scheduler, scaler, RNG states, position in the epoch, partial
epoch sums, history), best.pt (full state at the best test accuracy), final.pt (weights only), history.json
(per epoch: losses, accuracies, times, and every step's training loss).
--resume PATH|auto continues a run with identical dynamics (the data order is a function of seed and
epoch, so the position in the epoch is all the sampler needs).

Profiling: --run-profiler writes a Chrome trace (torch.profiler) of steps --warmup-iters .. +--profile-steps
to --trace-file-name and stops; --profile-one-step brackets step --profile-iter with cudaProfilerStart/Stop
and an NVTX range "train_step" (for `ncu --profile-from-start off` or `nsys --capture-range=cudaProfilerApi`),
then one 4096^3 bf16 GEMM inside the range for bench.ncu_roofline's calibration, and stops.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import torch

from triton_kernels.runtime import INTERPRET, device_name  # (the interpreter switch before triton loads)
from triton_kernels.graphs import capture_graph, own_cublas_workspaces
from models.resnet import BACKENDS, resnet

from . import resnet_data
from . import results
from .harness import HOST_CORES, pinned_core, quantile

SUITE = "resnet"
OPTIMIZERS = ("sgd", "sgd-nesterov", "adagrad", "adadelta", "adam")
SGD_IMPLS = ("auto", "fused", "torch", "torch-fused", "triton")
DEFAULT_LR = {"sgd": 0.1, "sgd-nesterov": 0.1, "adagrad": 0.01, "adadelta": 1.0, "adam": 1e-3}
AMP = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}
STUDY_EPOCH_S = 18.07  # one V100, batch 512 (the profiling study's figure), quoted beside ours
# "+graph": the model's forward and backward captured in CUDA graphs (torch.cuda.make_graphed_callables;
# the optimiser step stays eager); "compile+graph" is torch.compile(mode="reduce-overhead"); "+stepgraph":
# forward, loss and backward in one CUDA graph, DDP's all-reduces included (StepGraph; "compile+stepgraph"
# captures the torch.compile'd model, one process)
RUN_BACKENDS = BACKENDS + ("eager+graph", "triton+graph", "compile+graph", "eager+stepgraph", "triton+stepgraph",
                           "compile+stepgraph")
STEP_GRAPH_WARMUP = 11  # eager steps before a "+stepgraph" capture (DDP's first iterations must run eagerly)
CALIBRATION_GEMM = 4096  # --profile-one-step ends its profiled range with one n^3 bf16 GEMM (2 n^3 FLOPs)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    a = p.add_argument
    a("--model", default="resnet18", choices=("resnet18", "resnet34"))
    a("--epochs", type=int, default=30)
    a("--batch-size", type=int, default=512, help="global batch (split over DDP processes)")
    a("--lr", type=float, default=None, help="peak learning rate (default per optimizer: %s)" % DEFAULT_LR)
    a("--optimizer", default="sgd", choices=OPTIMIZERS)
    a("--momentum", type=float, default=0.9)
    a("--sgd", default="auto", choices=SGD_IMPLS, help="the sgd optimizers' step: torch.optim.SGD as torch runs it by "
      "default (foreach on a GPU), torch's fused=True, or triton_kernels.sgd.SGD (one launch per group); auto: "
      "triton on the triton backends, torch elsewhere; fused: triton on the triton backends, torch-fused elsewhere "
      "(every backend's one-launch step: the fair comparison of step times)")
    a("--weight-decay", type=float, default=5e-4)
    a("--data", default=None, help="CIFAR-10 directory (python/binary batches or WebP shards)")
    a("--synthetic", action="store_true", help="random images of CIFAR-10's shapes (timing only)")
    a("--train-limit", type=int, default=None, help="use the first N training images (after shuffling)")
    a("--test-limit", type=int, default=None)
    a("--data-path", choices=("gpu", "cpu"), default=None, help="default: gpu on a GPU, cpu otherwise")
    a("--workers", type=int, default=4, help="DataLoader workers of the cpu data path")
    a("--out-dir", default=None, help="checkpoints, history and rows (default: results/<device>/ for rows only)")
    a("--amp", nargs="?", const="bf16", default="none", choices=tuple(AMP), help="autocast dtype (--amp = bf16)")
    a("--label-smoothing", type=float, default=0.0)
    a("--warmup", type=int, default=0, help="linear warmup steps, then cosine decay to 0")
    a("--seed", type=int, default=0)
    a("--resume", default=None, help="checkpoint to continue from, or 'auto' (<out-dir>/last.pt if present)")
    a("--save-every", type=int, default=0, help="write <out-dir>/last.pt every N steps and each epoch end")
    a("--eval-every", type=int, default=1, help="evaluate every N epochs (and after the last)")
    a("--target-acc", type=float, default=94.0, help="report the wall time to this test accuracy (%%)")
    a("--no-batch-norm", action="store_true")
    a("--widths", default="64,128,256,512", help="channels of the four stages (smaller: tests, CPU smoke runs)")
    a("--backend", default="eager", help=f"one of {RUN_BACKENDS}; --bench-steps takes a comma-separated list")
    a("--compile-mode", default=None, help="torch.compile mode (default: torch's default)")
    a("--no-channels-last", action="store_true", help="NCHW activations (channels_last is used on GPUs only: "
      "torch's CPU convolutions are very slow in it at small widths)")
    a("--profile-one-step", action="store_true")
    a("--warmup-iters", type=int, default=10, help="steps before a profiled / timed step")
    a("--profile-iter", type=int, default=None,
      help="global step profiled by --profile-one-step (default: --warmup-iters)")
    a("--run-profiler", action="store_true")
    a("--profile-steps", type=int, default=5)
    a("--trace-file-name", default=None, help="Chrome trace of --run-profiler (default <out-dir>/trace.json)")
    a("--bench-steps", type=int, default=0, help="time the training step: N timed steps per backend (per batch "
      "size with --scaling)")
    a("--bench-rounds", type=int, default=5, help="interleaved timing rounds of --bench-steps")
    a("--sweep-workers", nargs="?", const="auto", default=None, help="worker counts, e.g. 0,2,4,8 (default: auto)")
    a("--sweep-steps", type=int, default=40)
    a("--scaling", nargs="?", const="32,128,512,2048,8192", default=None, help="per-GPU batch sizes")
    a("--scaling-report", nargs="*", default=None, help="rows (CSV files or dirs) of --scaling runs")
    a("--ddp-bf16-compress", action="store_true", help="bf16 gradient compression hook (DDP)")
    a("--ddp-bucket-mb", type=float, default=None, help="DDP's bucket_cap_mb (default DDP's 25); at least the "
      "gradients' size: one all-reduce after the backward (and the one-launch prologue kept)")
    a("--machine", default=None, help="the machine kind, recorded in every row's params (e.g. nvidia-h100-x4)")
    a("--no-cudnn-benchmark", action="store_true", help="keep cuDNN's heuristic algorithm choice")
    a("--autograd-threads", choices=("on", "off"), default="on", help="off: the backward runs on the calling thread "
      "(torch.autograd.set_multithreading_enabled(False)) instead of autograd's device thread: no hand-off to another "
      "thread and back per backward call; torch's default is on")
    a("--host-cores", default="all", metavar="|".join(HOST_CORES), help="with --bench-steps, one (the "
      "highest-numbered core the process may use) or a core number: the timing rounds run with every thread of the "
      "process (autograd's device threads too) on that core, as under taskset -c N, after the warm-up (tuning, "
      "compilation) on all; the rows say host_cores: one|N (default all: as scheduled)")
    a("--no-progress", action="store_true")
    a("--log-every", type=int, default=50, help="progress-bar loss update every N steps (a host sync)")
    a("--debug-kill-at-step", type=int, default=None, help=argparse.SUPPRESS)  # tests: SIGKILL after step N
    args = p.parse_args(argv)
    if args.lr is None:
        args.lr = DEFAULT_LR[args.optimizer]
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    bad = [b for b in backends if b not in RUN_BACKENDS]
    if bad or not backends:
        p.error(f"--backend: unknown {bad}; known: {', '.join(RUN_BACKENDS)}")
    if len(backends) > 1 and not args.bench_steps:
        p.error("several --backend values are for --bench-steps only")
    repeated = sorted({b for b in backends if backends.count(b) > 1})
    if repeated:
        p.error(f"--backend: {repeated} named more than once (--bench-rounds repeats the timing)")
    if "compile+stepgraph" in backends and args.compile_mode in ("reduce-overhead", "max-autotune"):
        p.error(f"--compile-mode {args.compile_mode} makes CUDA graphs of its own, which compile+stepgraph's "
                "graph cannot hold; use the default or max-autotune-no-cudagraphs")
    args.backends = backends
    if args.host_cores != "all":
        if not args.bench_steps:
            p.error("--host-cores: the setting applies to the timing rounds of --bench-steps")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            p.error("--host-cores: one process's setting; under torchrun every rank would run on the same core")
        try:
            pinned_core(args.host_cores)
        except ValueError as e:
            p.error(f"--host-cores: {e}")
    if args.epochs < 1 or args.batch_size < 1 or not args.lr > 0:
        p.error("--epochs, --batch-size and --lr must be positive")
    try:
        args.widths = tuple(int(w) for w in args.widths.split(","))
    except ValueError:
        p.error(f"--widths: expected four integers, got {args.widths!r}")
    if len(args.widths) != 4 or min(args.widths) < 1:
        p.error(f"--widths: expected four positive integers, got {args.widths}")
    args.channels_last = not args.no_channels_last and torch.cuda.is_available()
    if args.profile_iter is None:
        args.profile_iter = args.warmup_iters
    return args


# --------------------------------------------------------------------------------------------------
# Processes, model, optimiser
# --------------------------------------------------------------------------------------------------
class Dist:
    """rank / world / device of this process; starts torch.distributed under torchrun (NCCL on CUDA,
    gloo on the CPU)."""

    def __init__(self) -> None:
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(self.local_rank)
        self.device = torch.device("cuda", self.local_rank) if cuda else torch.device("cpu")
        if self.world > 1 and not torch.distributed.is_initialized():
            torch.distributed.init_process_group("nccl" if cuda else "gloo")
        self.main = self.rank == 0

    def all_sum(self, *values: torch.Tensor) -> list[torch.Tensor]:
        if self.world > 1:
            for v in values:
                torch.distributed.all_reduce(v)
        return list(values)

    def close(self) -> None:
        if self.world > 1 and torch.distributed.is_initialized():
            for graph in list(_STEP_GRAPHS):  # a live graph with captured collectives hangs the teardown
                graph.release()
            torch.distributed.barrier()  # no rank tears down while a peer is still in a collective with it
            torch.distributed.destroy_process_group()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def new_model(args, backend: str = "eager"):
    return resnet(args.model, no_batch_norm=args.no_batch_norm, backend=backend, widths=args.widths)


class GraphedModel:
    """The model's training forward and backward replayed from CUDA graphs, captured at the first call
    (torch.cuda.make_graphed_callables, under the training autocast with its cache off); eval-mode calls
    run the model itself. ``wrap`` (DDP) is applied to the graphed module after the capture: DDP's
    gradient hooks then fire as the graphed backward hands the parameters their gradients, so the
    all-reduces run eagerly after each replayed backward instead of overlapping it."""

    def __init__(self, model, amp, wrap=None) -> None:
        self.model, self.amp, self.wrap, self.graphed = model, amp, wrap, None

    def __call__(self, x):
        if self.graphed is None:
            with torch.autocast("cuda", dtype=self.amp or torch.float32, enabled=self.amp is not None,
                                cache_enabled=False), own_cublas_workspaces():
                graphed = torch.cuda.make_graphed_callables(self.model, (x.detach().clone(),))
            self.graphed = self.wrap(graphed) if self.wrap is not None else graphed
        return self.graphed(x)


class StepGraph:
    """Forward, loss and backward of a training step replayed from one CUDA graph (the "+stepgraph" backends).
    Under DDP the gradient all-reduces are captured too: no host launches, and with DDP's default buckets
    they overlap the backward (one bucket: one all-reduce at its end, see --ddp-bucket-mb).

    The first STEP_GRAPH_WARMUP calls run eagerly on the capture stream (tuning, DDP's first iterations: DDP
    is built on that stream too); the next one captures and replays, later ones copy the batch into the
    captured inputs and replay. The gradients are set to None before the capture, so the captured backward
    allocates them (DDP: its buckets) and every replay rewrites that memory, which ``.grad`` keeps; the
    optimiser, scaler and scheduler run eagerly after each replay."""

    def __init__(self, module, stream: torch.cuda.Stream) -> None:
        self.module, self.stream = module, stream
        self.calls, self.graph = 0, None
        self.inputs = self.outputs = None
        _STEP_GRAPHS.add(self)

    def release(self) -> None:
        """Free the graph (Dist.close calls this before the process group goes); a later call captures anew."""
        if self.graph is not None:
            torch.cuda.synchronize(self.inputs[0].device)
            self.graph.reset()
        self.graph = self.inputs = self.outputs = None

    def __call__(self, trainer: "Trainer", x: torch.Tensor, y: torch.Tensor):
        """(logits, loss) of this step's batch, its gradients in every ``.grad``."""
        current = torch.cuda.current_stream(x.device)
        if self.graph is None:
            self.stream.wait_stream(current)
            self.calls += 1
            if self.calls <= STEP_GRAPH_WARMUP:
                with torch.cuda.stream(self.stream):
                    out = trainer.forward_backward(self.module, x, y)
                current.wait_stream(self.stream)
                return out
            self.inputs = (x.clone(), y.clone())
            trainer.optimizer.zero_grad(set_to_none=True)  # freed outside the capture
            self.graph, self.outputs = capture_graph(lambda: trainer.forward_backward(self.module, *self.inputs),
                                                     warmup=0, stream=self.stream)
        else:
            for static, new in zip(self.inputs, (x, y)):
                if new.shape != static.shape or new.dtype != static.dtype:
                    raise ValueError(f"a +stepgraph backend replays the batch shape it captured, "
                                     f"{tuple(static.shape)} {static.dtype}; got {tuple(new.shape)} {new.dtype}")
                static.copy_(new)
        self.graph.replay()
        out, loss = self.outputs
        return out, loss.clone()  # the captured loss tensor is overwritten by the next replay


_STEP_GRAPHS: "weakref.WeakSet[StepGraph]" = weakref.WeakSet()  # the live ones (see Dist.close)


def wrap_ddp(model, args, dist: Dist, device):
    """DistributedDataParallel with gradient_as_bucket_view and static_graph, optionally bf16-compressed."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    wrapped = DDP(model, device_ids=[dist.local_rank] if device.type == "cuda" else None,
                  gradient_as_bucket_view=True, static_graph=True,
                  **({"bucket_cap_mb": args.ddp_bucket_mb} if args.ddp_bucket_mb else {}))
    if args.ddp_bf16_compress:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        wrapped.register_comm_hook(None, default_hooks.bf16_compress_hook)
    return wrapped


def build_model(args, backend: str, device, dist: Dist | None = None):
    """(raw model, the callable to train: DDP, torch.compile and CUDA-graph wrappers applied). Under DDP,
    "+graph" captures the model alone and DDP wraps the graphed module (GraphedModel), "+stepgraph" builds
    DDP on the capture stream of a StepGraph; "compile+graph" and "compile+stepgraph" need one process."""
    step_graph = backend.endswith("+stepgraph")
    graph = backend.endswith("+graph")
    base = backend.rsplit("+", 1)[0] if graph or step_graph else backend
    ddp = dist is not None and dist.world > 1
    if (graph or step_graph) and (device.type != "cuda" or (ddp and base == "compile")):
        raise SystemExit(f"--backend {backend}: CUDA graphs need a CUDA device"
                         + (f" (and one process for {backend})" if ddp else ""))
    model = new_model(args, base).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    one_bucket = args.ddp_bucket_mb is not None and args.ddp_bucket_mb * 2**20 >= 4 * sum(
        p.numel() for p in model.parameters())
    if ddp and not graph and not one_bucket:
        # one cast node for every conv weight would hand DDP all their gradients at the end of the backward,
        # leaving no all-reduce to overlap with it: each layer casts its own weight under DDP (the model-only
        # graph hands over every gradient at its end anyway, so "+graph" keeps the one launch, as does a
        # bucket that holds every gradient)
        model.one_launch_prologue = False
    if graph and base != "compile":
        return model, GraphedModel(model, AMP[args.amp], (lambda m: wrap_ddp(m, args, dist, device)) if ddp else None)
    if step_graph:  # DDP is built on the stream its graph is captured on
        stream = torch.cuda.Stream(device)
        with torch.cuda.stream(stream):
            wrapped = wrap_ddp(model, args, dist, device) if ddp else model
        if base == "compile":  # captured inside the step's graph (parse_args refuses modes with graphs of their own)
            wrapped = torch.compile(wrapped, **({"mode": args.compile_mode} if args.compile_mode else {}))
        return model, StepGraph(wrapped, stream)
    wrapped = wrap_ddp(model, args, dist, device) if ddp else model
    if base.endswith("compile"):
        mode = "reduce-overhead" if graph else args.compile_mode
        wrapped = torch.compile(wrapped, **({"mode": mode} if mode else {}))
    return model, wrapped


def sgd_impl(args, backend: str) -> str | None:
    """The SGD step a backend's optimizer runs (--sgd; "auto": "triton" on the triton backends, else "torch";
    "fused": "triton" there, else "torch-fused"); None for the other optimizers."""
    if args.optimizer not in ("sgd", "sgd-nesterov"):
        return None
    if args.sgd not in ("auto", "fused"):
        return args.sgd
    if backend.startswith("triton"):
        return "triton"
    return "torch" if args.sgd == "auto" else "torch-fused"


def sgd_params(args, backend: str) -> dict:
    """The rows' record of the SGD step a backend ran: {"sgd": impl}, or {} for the other optimizers."""
    impl = sgd_impl(args, backend)
    return {"sgd": impl} if impl is not None else {}


def build_optimizer(args, params, backend: str = "eager"):
    kw = {"lr": args.lr, "weight_decay": args.weight_decay}
    impl = sgd_impl(args, backend)
    if impl is not None:
        kw.update(momentum=args.momentum, nesterov=args.optimizer == "sgd-nesterov")
        if impl == "triton":
            from triton_kernels import sgd

            return sgd.SGD(params, **kw)
        return torch.optim.SGD(params, **kw, **({"fused": True} if impl == "torch-fused" else {}))
    return {"adagrad": torch.optim.Adagrad, "adadelta": torch.optim.Adadelta, "adam": torch.optim.Adam}[args.optimizer](
        params, **kw)


def warmup_cosine(total_steps: int, warmup: int):
    """LambdaLR factor: linear from 1/warmup to 1 over ``warmup`` steps, then cosine to 0 at ``total_steps``."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


class Trainer:
    """One training step (autocast, GradScaler for fp16, scheduler per step) and the evaluation."""

    def __init__(self, args, model, forward, device, total_steps: int) -> None:
        self.model, self.forward, self.device = model, forward, device
        self.amp = AMP[args.amp]
        self.optimizer = build_optimizer(args, model.parameters(), getattr(model, "backend", "eager"))
        # the Triton SGD reads the bf16 weight gradients as the convolutions make them (no cast back to fp32); not
        # under DDP (its buckets all-reduce the parameters' own dtype), fp16's GradScaler (fp32 grads) or
        # torch.compile (which casts the weights itself)
        if hasattr(model, "low_precision_grads"):
            model.low_precision_grads = (sgd_impl(args, model.backend) == "triton" and self.amp is torch.bfloat16
                                         and "compile" not in model.backend
                                         and not torch.distributed.is_initialized())
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, warmup_cosine(total_steps, args.warmup))
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.amp is torch.float16)
        self.criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
        # graphs need the autocast cache off
        self.autocast_cache = not isinstance(forward, (GraphedModel, StepGraph))
        self.autograd_threads = args.autograd_threads == "on"

    def forward_backward(self, module, x, y):
        """(logits, loss) of ``module`` on a batch, the gradients of the (scaled) loss in every ``.grad``."""
        with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None,
                            cache_enabled=self.autocast_cache):
            out = module(x)
            loss = self.criterion(out, y)
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autograd.set_multithreading_enabled(self.autograd_threads):
            self.scaler.scale(loss).backward()
        return out, loss

    def step(self, x, y):
        """One optimiser step in training mode (evaluate() restores it); returns (loss, number correct) as
        device tensors (no host sync)."""
        if isinstance(self.forward, StepGraph):
            out, loss = self.forward(self, x, y)
        else:
            out, loss = self.forward_backward(self.forward, x, y)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return loss.detach(), (out.detach().argmax(1) == y).sum()

    @torch.no_grad()
    def evaluate(self, x, y, batch: int = 1000):
        """(loss sum, correct) over a test shard; eval mode (running statistics)."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), device=self.device, dtype=torch.int64)
        for s in range(0, len(x), batch):
            with torch.autocast(self.device.type, dtype=self.amp or torch.float32, enabled=self.amp is not None):
                out = self.model(x[s:s + batch])
            loss_sum += torch.nn.functional.cross_entropy(out.float(), y[s:s + batch], reduction="sum")
            correct += (out.argmax(1) == y[s:s + batch]).sum()
        self.model.train()
        return loss_sum, correct


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------
def atomic_save(obj, path: Path) -> None:
    """torch.save to a temporary file in the same folder, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def full_state(trainer: Trainer, progress: dict, args) -> dict:
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {"model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(), "scaler": trainer.scaler.state_dict(),
            "progress": progress, "rng": rng, "args": vars(args)}


RESUME_MUST_MATCH = ("model", "widths", "batch_size", "optimizer", "lr", "seed", "epochs", "warmup", "no_batch_norm",
                     "label_smoothing", "weight_decay", "momentum", "synthetic", "train_limit")


def load_state(path: Path, trainer: Trainer, args) -> dict:
    state = torch.load(path, map_location=trainer.device, weights_only=False)
    saved = state.get("args", {})
    diff = {k: (saved.get(k), getattr(args, k)) for k in RESUME_MUST_MATCH if saved.get(k) != getattr(args, k)}
    if diff:
        raise SystemExit(f"--resume {path}: the run was started with other settings {diff} (saved, now)")
    trainer.model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    trainer.scaler.load_state_dict(state["scaler"])
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state["progress"]


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------
def fresh_progress() -> dict:
    return {"epoch": 0, "step": 0, "global_step": 0, "best_acc": -1.0, "history": [], "train_s": 0.0,
            "time_to_target_s": None, "accum": {"loss": 0.0, "correct": 0, "count": 0, "elapsed_s": 0.0,
                                                "data_s": 0.0, "step_losses": []}}


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def data_path(args, device) -> str:
    return args.data_path or ("gpu" if device.type == "cuda" else "cpu")


def make_batches(args, data: resnet_data.Data, dist: Dist, device):
    """fn(epoch, start_step) -> iterator of (x, y) on the device, for the chosen data path."""
    cl = args.channels_last
    if data_path(args, device) == "gpu":
        loader = resnet_data.GpuLoader(data.train_images, data.train_labels, args.batch_size,
                                       args.seed, device, dist.rank, dist.world, channels_last=cl)
        return loader.epoch
    sampler = resnet_data.PlannedBatchSampler(len(data.train_images), args.batch_size, args.seed, dist.rank, dist.world)
    dl = resnet_data.make_cpu_loader(data.train_images, data.train_labels, sampler, args.workers, device.type == "cuda")

    def epoch(e: int, start: int):
        sampler.set_epoch(e, start)
        for x, y in dl:
            x = x.to(device, non_blocking=True)
            yield (x.contiguous(memory_format=torch.channels_last) if cl else x), y.to(device, non_blocking=True)
    return epoch


class StepProfiler:
    """--run-profiler (torch.profiler Chrome trace of a few steps) and --profile-one-step (NVTX range +
    cudaProfilerStart/Stop around one step); ``done`` tells the loop to stop."""

    def __init__(self, args, device, out_dir) -> None:
        self.args, self.device, self.done, self.prof = args, device, False, None
        self.trace = Path(args.trace_file_name or (out_dir or Path(".")) / "trace.json")

    def before(self, global_step: int) -> None:
        a = self.args
        if a.run_profiler and global_step == a.warmup_iters:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.__enter__()
        if a.profile_one_step and global_step == a.profile_iter and self.device.type == "cuda":
            n = CALIBRATION_GEMM  # its operands are made outside the profiled range
            self.gemm = [torch.randn(n, n, device=self.device, dtype=torch.bfloat16) for _ in range(2)]
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push("train_step")

    def after(self, global_step: int) -> None:
        a = self.args
        if a.profile_one_step and global_step == a.profile_iter:
            if self.device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
                # the profiled range ends with one GEMM of known FLOPs, the last launch: bench.ncu_roofline
                # --calibrate @last:FLOPS derives the FLOPs of a tensor-core instruction from it
                torch.cuda.nvtx.range_push("calibration_gemm")
                self.gemm[0] @ self.gemm[1]
                torch.cuda.synchronize()
                torch.cuda.nvtx.range_pop()
                torch.cuda.profiler.stop()
            print(f"profiled step {global_step} (NVTX range 'train_step'), then a {CALIBRATION_GEMM}^3 bf16 GEMM: "
                  f"--calibrate @last:{2 * CALIBRATION_GEMM ** 3}", file=sys.stderr)
            self.done = True
        if self.prof is not None and global_step == a.warmup_iters + a.profile_steps - 1:
            sync(self.device)
            self.prof.__exit__(None, None, None)
            self.trace.parent.mkdir(parents=True, exist_ok=True)
            self.prof.export_chrome_trace(str(self.trace))
            averages = self.prof.key_averages()
            for sort in (("device_time_total", "cuda_time_total") if self.device.type == "cuda" else ()) + \
                    ("cpu_time_total",):
                try:
                    print(averages.table(sort_by=sort, row_limit=25))
                    break
                except (AttributeError, KeyError, ValueError):
                    continue
            print(f"Chrome trace of steps {a.warmup_iters}..{global_step} -> {self.trace}", file=sys.stderr)
            self.prof, self.done = None, True


def _drain(pending: list, into: list) -> None:
    """Move the pending device-side step losses to ``into`` as floats (one sync for all of them)."""
    if pending:
        into.extend(torch.stack(pending).float().tolist())
        pending.clear()


def run_training(args, dist: Dist) -> int:
    device = dist.device
    seed_everything(args.seed)
    data = resnet_data.load(args.data, args.synthetic, args.train_limit, args.test_limit)
    model, forward = build_model(args, args.backends[0], device, dist)
    steps = resnet_data.steps_per_epoch(len(data.train_images), args.batch_size)
    if steps == 0:
        raise SystemExit(f"--batch-size {args.batch_size} exceeds the {len(data.train_images)} training images")
    trainer = Trainer(args, model, forward, device, steps * args.epochs)
    out_dir = Path(args.out_dir) if args.out_dir else None
    resume = Path(args.resume) if args.resume and args.resume != "auto" else None
    if args.resume == "auto" and out_dir is not None and (out_dir / "last.pt").exists():
        resume = out_dir / "last.pt"
    progress = load_state(resume, trainer, args) if resume else fresh_progress()
    if resume and dist.main:
        print(f"resumed from {resume} at epoch {progress['epoch']}, step {progress['step']}", file=sys.stderr)
    batches = make_batches(args, data, dist, device)
    test_x, test_y = resnet_data.test_tensors(data, device, dist.rank, dist.world, args.channels_last)
    profiler = StepProfiler(args, device, out_dir)
    from tqdm import tqdm

    bar = tqdm(total=steps * args.epochs, initial=progress["global_step"], disable=not dist.main or args.no_progress,
               desc=f"{args.model} {args.backends[0]}", unit="step", dynamic_ncols=True,
               mininterval=0.1 if sys.stderr.isatty() else 30.0)
    wall0 = time.perf_counter()

    def save(name: str) -> None:
        if dist.main and out_dir is not None:
            atomic_save(full_state(trainer, progress, args), out_dir / name)

    for epoch in range(progress["epoch"], args.epochs):
        acc = progress["accum"]
        loss_sum = torch.tensor(acc["loss"], device=device)
        correct = torch.tensor(acc["correct"], device=device)
        count, data_s, t_epoch = acc["count"], acc["data_s"], time.perf_counter() - acc["elapsed_s"]
        step_losses = list(acc.get("step_losses", []))  # this epoch's per-step losses, before a resume
        pending = []  # since then, as device tensors (read once per checkpoint / epoch end: no per-step sync)
        it = batches(epoch, progress["step"])
        for step in range(progress["step"], steps):
            t0 = time.perf_counter()
            x, y = next(it)
            data_s += time.perf_counter() - t0
            profiler.before(progress["global_step"])
            loss, n_correct = trainer.step(x, y)
            profiler.after(progress["global_step"])
            loss_sum += loss * len(y)
            pending.append(loss)
            correct += n_correct
            count += len(y)
            progress["global_step"] += 1
            progress["step"] = step + 1
            bar.update(1)
            if not bar.disable and args.log_every and progress["global_step"] % args.log_every == 0:
                bar.set_postfix(loss=f"{loss.item():.3f}")
            if profiler.done:
                bar.close()
                return 0
            if args.save_every and progress["global_step"] % args.save_every == 0 and step + 1 < steps:
                _drain(pending, step_losses)
                progress["accum"] = {"loss": loss_sum.item(), "correct": int(correct.item()), "count": count,
                                     "elapsed_s": time.perf_counter() - t_epoch, "data_s": data_s,
                                     "step_losses": step_losses}
                save("last.pt")
            if args.debug_kill_at_step == progress["global_step"]:
                os.kill(os.getpid(), signal.SIGKILL)
        sync(device)
        epoch_s = time.perf_counter() - t_epoch
        progress["train_s"] += epoch_s
        count_t = torch.tensor(count, device=device)
        loss_sum, correct, count_t = dist.all_sum(loss_sum, correct, count_t)
        record = {"epoch": epoch + 1, "train_loss": loss_sum.item() / count_t.item(),
                  "train_acc": 100.0 * correct.item() / count_t.item(), "epoch_s": epoch_s, "data_s": data_s,
                  "compute_s": epoch_s - data_s, "steps": steps}
        _drain(pending, step_losses)
        if (epoch + 1) % args.eval_every == 0 or epoch + 1 == args.epochs:
            t_sum, t_correct = trainer.evaluate(test_x, test_y)
            n_test = torch.tensor(len(test_y), device=device)
            t_sum, t_correct, n_test = dist.all_sum(t_sum, t_correct, n_test)
            record.update(test_loss=t_sum.item() / n_test.item(), test_acc=100.0 * t_correct.item() / n_test.item())
            if record["test_acc"] >= args.target_acc and progress["time_to_target_s"] is None:
                progress["time_to_target_s"] = progress["train_s"]
                record["wall_to_target_s"] = time.perf_counter() - wall0
        record["step_losses"] = step_losses  # this process's batch losses (its shard under DDP)
        progress["history"].append(record)
        progress.update(epoch=epoch + 1, step=0, accum=fresh_progress()["accum"])
        if dist.main:
            bar.write(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in record.items()
                                 if k != "step_losses"}))
        if record.get("test_acc", -1) > progress["best_acc"]:
            progress["best_acc"] = record["test_acc"]
            save("best.pt")
        if args.save_every:
            save("last.pt")
    bar.close()
    progress["wall_s"] = time.perf_counter() - wall0
    if dist.main:
        if out_dir is not None:
            atomic_save(model.state_dict(), out_dir / "final.pt")
            (out_dir / "history.json").write_text(json.dumps(progress["history"], indent=1))
        rows = training_rows(args, data, device, progress, dist)
        path = results.write_rows(rows, args.out_dir, SUITE, tag=run_tag(args, "train"))
        print(f"rows -> {path}", file=sys.stderr)
    return 0


def run_tag(args, mode: str) -> str:
    parts = [mode, args.model, "-".join(args.backends), args.optimizer] + (["nobn"] if args.no_batch_norm else []) + \
        (["synthetic"] if args.synthetic else [])
    return "-".join(parts).replace("+", "_")


def base_params(args, data_name: str, device, world: int = 1) -> dict:
    widths = {} if args.widths == (64, 128, 256, 512) else {"widths": list(args.widths)}
    bucket = ddp_bucket_mb(args, world)
    return {**widths, "batch": args.batch_size, "data": data_name, "amp": args.amp, "channels_last": args.channels_last,
            "data_path": data_path(args, device), "gpus": world if device.type == "cuda" else 0,
            "processes": world, "no_batch_norm": args.no_batch_norm,
            **({"machine": args.machine} if args.machine else {}),
            **({"ddp_bucket_mb": bucket} if bucket else {}),
            **({"autograd_threads": "off"} if args.autograd_threads == "off" else {}),
            **({"host_cores": args.host_cores} if args.host_cores != "all" else {})}


def ddp_bucket_mb(args, world: int) -> float | None:
    """--ddp-bucket-mb where DDP runs (several processes); None otherwise (one process has no bucket)."""
    return args.ddp_bucket_mb if world > 1 else None


def training_rows(args, data: resnet_data.Data, device, progress: dict, dist: Dist) -> list[dict]:
    hist = progress["history"]
    params = dict(base_params(args, data.name, device, dist.world), optimizer=args.optimizer, lr=args.lr,
                  epochs=args.epochs, warmup=args.warmup, label_smoothing=args.label_smoothing, seed=args.seed,
                  workers=args.workers, weight_decay=args.weight_decay, n_train=len(data.train_images))
    case, backend = f"{args.model}_train_step", args.backends[0]
    params.update(sgd_params(args, backend))

    def row(metric, value, unit, **kw):
        return results.make_row(SUITE, case, kw.pop("params", params), args.amp if args.amp != "none" else "float32",
                                backend, metric, value, unit, **kw)

    steady = [h["epoch_s"] for h in (hist[1:] if len(hist) > 1 else hist)]
    out = []
    if steady:
        med = quantile(steady, 0.5)
        out += [row("epoch_s", med, "s", p20=quantile(steady, 0.2), p80=quantile(steady, 0.8),
                    note="median over epochs after the first (wall clock, data + compute)"),
                row("step_ms", 1e3 * med / hist[-1]["steps"], "ms", note="epoch_s / steps"),
                row("data_s", quantile([h["data_s"] for h in hist[1:] or hist], 0.5), "s",
                    note="host time waiting for batches per epoch (median)"),
                row("reference_epoch_s", STUDY_EPOCH_S, "s", note="study: one V100, batch 512")]
    last_eval = [h for h in hist if "test_acc" in h]
    if last_eval:
        out += [row("test_acc", last_eval[-1]["test_acc"], "pct"), row("best_test_acc", progress["best_acc"], "pct"),
                row("test_loss", last_eval[-1]["test_loss"], "nats")]
    out += [row("train_s", progress["train_s"], "s", note="training time of all epochs (no evaluation)")]
    if hist:
        out.append(row("train_loss", hist[-1]["train_loss"], "nats"))
    if progress["time_to_target_s"] is not None:
        out.append(row("time_to_target_s", progress["time_to_target_s"], "s",
                       note=f"training time (epochs, no evaluation) until test accuracy >= {args.target_acc}%"))
        wall = [h["wall_to_target_s"] for h in hist if "wall_to_target_s" in h]
        if wall:
            out.append(row("wall_to_target_s", wall[0], "s", note="wall clock from the first step (compilation, "
                           f"autotuning and evaluations included) until test accuracy >= {args.target_acc}%"))
    if "wall_s" in progress:
        out.append(row("wall_s", progress["wall_s"], "s", note="wall clock of this process's training loop"))
    for h in hist:
        p = dict(params, epoch=h["epoch"])
        for metric, unit in (("epoch_train_loss", "nats"), ("epoch_test_acc", "pct"), ("epoch_time_s", "s"),
                             ("epoch_data_s", "s")):
            key = {"epoch_train_loss": "train_loss", "epoch_test_acc": "test_acc", "epoch_time_s": "epoch_s",
                   "epoch_data_s": "data_s"}[metric]
            if key in h:
                out.append(row(metric, h[key], unit, params=p))
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.scaling_report is not None:
        from .resnet_tools import scaling_report

        return scaling_report(args)
    from bench.data.common import one_line_errors

    # cuDNN picks each convolution's algorithm by timing it once per shape (every backend alike)
    torch.backends.cudnn.benchmark = torch.cuda.is_available() and not args.no_cudnn_benchmark
    dist = Dist()
    try:
        with one_line_errors():
            if args.scaling is not None:
                from .resnet_tools import scaling

                return scaling(args, dist)
            if args.bench_steps:
                from .resnet_tools import bench_steps

                return bench_steps(args, dist)
            if args.sweep_workers is not None:
                from .resnet_tools import sweep_workers

                return sweep_workers(args, dist)
            return run_training(args, dist)
    finally:
        dist.close()


def exit_process(code) -> None:
    """The process's exit. Under torchrun it leaves through os._exit once its output is flushed: its work is
    written by then (rows and checkpoints atomically, the process group destroyed), while gloo's threads can
    still be joinable when the interpreter's exit-time destructors run, which aborts the process (SIGABRT,
    "terminate called without an active exception") and would fail a finished run."""
    if torch.distributed.is_torchelastic_launched():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code or 0))
    sys.exit(code)


if __name__ == "__main__":
    exit_process(main())
