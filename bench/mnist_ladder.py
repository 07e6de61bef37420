"""The MNIST study's ladder: the ways to train softmax regression (models/softmax_regression.py), from a
DataLoader-fed eager loop to a fused Triton step replayed in a CUDA graph. bench/mnist.py runs them.

Every trainer runs the same algorithm on the same batches: for each epoch the caller hands in a
permutation of the training rows; step s uses rows perm[s*B : (s+1)*B] (the last batch may be short);
the loss is the batch mean, the update W -= lr * dW, b -= lr * db. Per-example loss and correct-count
sums are accumulated on the device and read by the host only in :meth:`Trainer.read_stats`.

    ladder (VARIANTS)    what changes
    eager-dataloader     DataLoader over CPU tensors (pinned on GPU), copy per batch, loss read every epoch
    eager-preloaded      the data set lives on the device; batches are gathered there (no host sync)
    compile              + torch.compile(dynamic=False) of forward + loss
    compile+amp          + bf16 autocast in the forward
    eager+graph          the eager step captured in a CUDA graph (device-side step counter; the short
                         last batch has its own graph), replayed once per step
    triton               the fused Triton step (triton_kernels/softmax_regression.py): ONE kernel per step,
                         launched from Python every step
    triton+graph         that one-kernel step captured in a CUDA graph, replayed once per step
    triton+persistent    one persistent launch per epoch: the same kernel runs every step of the epoch
                         (programs exchange logits through device memory each step; no launch between)
    triton+epoch-graph   that persistent launch captured in a CUDA graph, replayed once per epoch
"""
from __future__ import annotations

import torch

from models.softmax_regression import SoftmaxRegression
from triton_kernels import softmax_regression
from triton_kernels.runtime import capture_graph

VARIANTS = ("eager-dataloader", "eager-preloaded", "compile", "compile+amp", "eager+graph", "triton",
            "triton+graph", "triton+persistent", "triton+epoch-graph")
GRAPH_VARIANTS = ("eager+graph", "triton+graph", "triton+epoch-graph")


# ----------------------------------------------------------------------------------------------------
# The eager step (shared by the eager, compile and graph rungs)
# ----------------------------------------------------------------------------------------------------
def _loss_and_correct(x, y, weight, bias):
    logits = torch.nn.functional.linear(x, weight, bias)
    loss = torch.nn.functional.cross_entropy(logits.float(), y, reduction="sum")
    return loss, (logits.argmax(1) == y).sum()


def _sgd_step(fwd, x, y, weight, bias, lr, loss_sum, correct_sum):
    """One SGD step on the mean loss of (x, y); loss/correct sums added on the device, no host sync."""
    loss, correct = fwd(x, y, weight, bias)
    gw, gb = torch.autograd.grad(loss, (weight, bias))
    with torch.no_grad():
        scale = -lr / x.shape[0]  # the gradient of the batch-mean loss
        torch._foreach_add_([weight, bias], [gw, gb], alpha=scale)
        loss_sum += loss.detach()
        correct_sum += correct


class Trainer:
    """Base of the ladder. ``train`` holds the CPU tensors (images (N, 784) float32, labels (N,) int64)."""

    name = "base"

    def __init__(self, model: SoftmaxRegression, train_x: torch.Tensor, train_y: torch.Tensor, batch_size: int,
                 lr: float, device: torch.device | str | None = None) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        if train_x.ndim != 2 or train_x.shape[1] != model.in_features:
            raise ValueError(f"train_x has shape {tuple(train_x.shape)}, expected (N, {model.in_features})")
        if train_y.shape != (train_x.shape[0],):
            raise ValueError(f"train_y has shape {tuple(train_y.shape)}, expected ({train_x.shape[0]},)")
        self.device = torch.device(device) if device is not None else model.weight.device
        self.model = model.to(self.device)
        self.batch_size, self.lr = batch_size, float(lr)
        self.n = train_x.shape[0]
        self.n_steps = -(-self.n // batch_size)
        self.cpu_x, self.cpu_y = train_x, train_y
        self.loss_sum = torch.zeros((), device=self.device)
        self.correct_sum = torch.zeros((), dtype=torch.int64, device=self.device)
        self.examples = 0

    @property
    def weight(self) -> torch.Tensor:
        return self.model.weight

    @property
    def bias(self) -> torch.Tensor:
        return self.model.bias

    def prepare(self) -> None:
        """One-off work before the first timed epoch (compilation, graph capture); weights unchanged."""

    def train_epoch(self, perm: torch.Tensor) -> None:
        raise NotImplementedError

    def read_stats(self) -> tuple[float, float]:
        """(mean training loss, training accuracy) since the last read: the only host sync."""
        loss, correct = self._read_sums()
        n = max(1, self.examples)
        self.examples = 0
        return loss / n, correct / n

    def _read_sums(self) -> tuple[float, int]:
        loss, correct = self.loss_sum.item(), int(self.correct_sum.item())
        self.loss_sum.zero_()
        self.correct_sum.zero_()
        return loss, correct

    def _batches(self, perm: torch.Tensor):
        for s in range(self.n_steps):
            yield perm[s * self.batch_size:(s + 1) * self.batch_size]


class EagerDataLoaderTrainer(Trainer):
    """Rung 1: a torch DataLoader over the CPU tensors, each batch copied to the device."""

    name = "eager-dataloader"

    def train_epoch(self, perm: torch.Tensor) -> None:
        ds = torch.utils.data.TensorDataset(self.cpu_x, self.cpu_y)
        pin = self.device.type == "cuda"
        loader = torch.utils.data.DataLoader(ds, batch_size=self.batch_size, sampler=perm.tolist(),
                                             pin_memory=pin, num_workers=0)
        w, b = self.weight, self.bias
        for x, y in loader:
            x, y = x.to(self.device, non_blocking=pin), y.to(self.device, non_blocking=pin)
            _sgd_step(_loss_and_correct, x, y, w, b, self.lr, self.loss_sum, self.correct_sum)
        self.examples += self.n


class PreloadedTrainer(Trainer):
    """Rung 2: the whole data set preloaded on the device; batches gathered there."""

    name = "eager-preloaded"

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.x = self.cpu_x.to(self.device)
        self.y = self.cpu_y.to(self.device)
        self.fwd = _loss_and_correct

    def train_epoch(self, perm: torch.Tensor) -> None:
        perm = perm.to(self.device, non_blocking=True)
        w, b = self.weight, self.bias
        for idx in self._batches(perm):
            _sgd_step(self.fwd, self.x[idx], self.y[idx], w, b, self.lr, self.loss_sum, self.correct_sum)
        self.examples += self.n


class CompileTrainer(PreloadedTrainer):
    """Rungs 3-4: forward + loss through torch.compile(dynamic=False), optionally under bf16 autocast."""

    def __init__(self, *args, amp: bool = False, **kw) -> None:
        super().__init__(*args, **kw)
        self.amp = amp
        self.name = "compile+amp" if amp else "compile"
        compiled = torch.compile(_loss_and_correct, dynamic=False)
        dev_type = self.device.type

        def fwd(x, y, w, b):
            with torch.autocast(dev_type, dtype=torch.bfloat16, enabled=amp):
                return compiled(x, y, w, b)

        self.fwd = fwd

    def prepare(self) -> None:
        """Compile for the full and the short last batch (weights and sums restored afterwards)."""
        state = [self.weight, self.bias, self.loss_sum, self.correct_sum]
        snap = _snapshot(state)
        for s in {self.batch_size, self.n - (self.n_steps - 1) * self.batch_size}:
            idx = torch.arange(s, device=self.device)
            _sgd_step(self.fwd, self.x[idx], self.y[idx], self.weight, self.bias, self.lr, self.loss_sum,
                      self.correct_sum)
        _restore(state, snap)


def _snapshot(ts):
    return [t.detach().clone() for t in ts]


def _restore(ts, snap):
    with torch.no_grad():
        for t, s in zip(ts, snap):
            t.copy_(s)


class EagerGraphTrainer(PreloadedTrainer):
    """Rung 5: the eager step captured in a CUDA graph. The batch rows come from a device-side step
    counter (perm viewed as (steps, B)), so one graph replays every full batch; the short last batch,
    if any, has a second graph."""

    name = "eager+graph"

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        if self.device.type != "cuda":
            raise RuntimeError("eager+graph needs a CUDA device")
        B = self.batch_size
        self.n_full = self.n // B
        self.perm = torch.arange(self.n, device=self.device)
        self.counter = torch.zeros(1, dtype=torch.int64, device=self.device)
        self.graphs: list[torch.cuda.CUDAGraph] = []

    def _full_step(self):
        B = self.batch_size
        idx = self.perm[: self.n_full * B].view(self.n_full, B).index_select(0, self.counter).view(B)
        _sgd_step(self.fwd, self.x[idx], self.y[idx], self.weight, self.bias, self.lr, self.loss_sum,
                  self.correct_sum)
        self.counter += 1

    def _tail_step(self):
        idx = self.perm[self.n_full * self.batch_size:]
        _sgd_step(self.fwd, self.x[idx], self.y[idx], self.weight, self.bias, self.lr, self.loss_sum,
                  self.correct_sum)

    def prepare(self) -> None:
        state = [self.weight, self.bias, self.loss_sum, self.correct_sum, self.counter]
        snap = _snapshot(state)
        steps = [self._full_step] if self.n_full else []
        if self.n % self.batch_size:
            steps.append(self._tail_step)
        pool = None
        for f in steps:
            g, _ = capture_graph(self._rewinding(f), warmup=3, pool=pool)
            pool = g.pool()
            self.graphs.append(g)
        _restore(state, snap)

    def _rewinding(self, step):
        """``step`` for capture_graph: each warm-up call rewinds the batch counter after it (so the
        warm-ups index the first batch, never past the last), the captured call does not."""
        def run():
            step()
            if not torch.cuda.is_current_stream_capturing():
                self.counter.zero_()
        return run

    def train_epoch(self, perm: torch.Tensor) -> None:
        if not self.graphs:
            self.prepare()
        self.perm.copy_(perm, non_blocking=True)
        self.counter.zero_()
        full = self.graphs[0] if self.n_full else None
        for _ in range(self.n_full):
            full.replay()
        if self.n % self.batch_size:
            self.graphs[-1].replay()
        self.examples += self.n


class TritonTrainer(Trainer):
    """Rungs 6-9: the fused one-kernel Triton step, launched from Python once per step (``graph=None``),
    captured per step (``graph="step"``), one persistent launch per epoch (``graph="persistent"``), or
    that launch captured in a graph (``graph="epoch"``). All four run the same arithmetic (bitwise)."""

    NAMES = {None: "triton", "step": "triton+graph", "persistent": "triton+persistent", "epoch": "triton+epoch-graph"}

    def __init__(self, *args, graph: str | None = None, precision: str = "ieee", x_dtype=torch.float32,
                 **kw) -> None:
        super().__init__(*args, **kw)
        if graph not in self.NAMES:
            raise ValueError(f"graph must be one of {tuple(self.NAMES)}, got {graph!r}")
        if graph in ("step", "epoch") and self.device.type != "cuda":
            raise RuntimeError("CUDA-graph variants need a CUDA device")
        self.graph_mode = graph
        self.name = self.NAMES[graph]
        x = self.cpu_x if x_dtype == torch.float32 else (self.cpu_x * 255).round().to(torch.uint8)
        self.x = x.to(self.device)
        self.y = self.cpu_y.to(self.device)
        self.fused = softmax_regression.FusedSGDStep(self.weight, self.bias, self.x, self.y, self.batch_size, self.lr,
                                      precision=precision)
        self.graph: torch.cuda.CUDAGraph | None = None

    def prepare(self) -> None:
        state = [self.weight, self.bias, *self.fused.buf.tensors()]
        snap = _snapshot(state)
        self.fused.step()  # JIT-compile (and autotune) outside any capture
        if self.graph_mode in ("step", "epoch"):
            torch.cuda.synchronize()
            captured = self.fused.step if self.graph_mode == "step" else self.fused.epoch
            self.graph, _ = capture_graph(captured, warmup=0)  # the step above compiled and tuned
        _restore(state, snap)
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def train_epoch(self, perm: torch.Tensor) -> None:
        if self.graph_mode in ("step", "epoch") and self.graph is None:
            self.prepare()
        self.fused.set_perm(perm.to(self.device, non_blocking=True))
        if self.graph_mode is None:
            self.fused.epoch_stepwise()
        elif self.graph_mode == "persistent":
            self.fused.epoch()
        elif self.graph_mode == "step":
            for _ in range(self.n_steps):
                self.graph.replay()
        else:
            self.graph.replay()
        self.examples += self.n

    def _read_sums(self) -> tuple[float, int]:
        return self.fused.read_stats(reset=True)


def make_trainer(variant: str, model: SoftmaxRegression, train_x: torch.Tensor, train_y: torch.Tensor,
                 batch_size: int, lr: float, device=None, **kw) -> Trainer:
    """The trainer of one rung of the ladder (see VARIANTS)."""
    args = (model, train_x, train_y, batch_size, lr, device)
    if variant == "eager-dataloader":
        return EagerDataLoaderTrainer(*args)
    if variant == "eager-preloaded":
        return PreloadedTrainer(*args)
    if variant in ("compile", "compile+amp"):
        return CompileTrainer(*args, amp=variant == "compile+amp")
    if variant == "eager+graph":
        return EagerGraphTrainer(*args)
    if variant.startswith("triton"):
        kw = {k: v for k, v in kw.items() if k in ("precision", "x_dtype")}
    else:
        kw = {}
    if variant == "triton":
        return TritonTrainer(*args, **kw)
    if variant == "triton+graph":
        return TritonTrainer(*args, graph="step", **kw)
    if variant == "triton+persistent":
        return TritonTrainer(*args, graph="persistent", **kw)
    if variant == "triton+epoch-graph":
        return TritonTrainer(*args, graph="epoch", **kw)
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
