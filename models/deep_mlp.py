"""Deep narrow fully connected regressors for the SGEMM depth study: GloNet, ResNetMLP, MLP.

Every model is a plain ``torch.nn.Module`` of ``nn.Linear`` / ``nn.BatchNorm1d`` children (its
state_dict is an ordinary torch one and loads into the eager model), with a backend switch:

* ``eager``   the modules called one by one (thousands of tiny kernels per step at depth 1000);
* ``compile`` ``torch.compile(dynamic=False)`` of the same forward;
* ``triton``  the fully fused kernels of ``triton_kernels/fused_mlp.py`` (forward of the whole stack in one
              kernel, backward in one), differentiable through ``torch.ops.tk.fused_mlp`` with respect to
              the parameters; an input that requires grad is refused (ValueError naming x).

For training at full speed use :class:`FusedTrainer`: it points every parameter into one flat buffer
(``flatten_``) and runs a step as forward kernel -> backward kernel -> fused Adam (which also reduces
the weight-gradient partials) with no autograd, capturable in a CUDA graph.

Models are built from names: ``build_model("GloNet50")``, ``"ResNetMLP100"`` (alias ``"ResNet100"``),
``"MLP10"``; the number is the depth N (dense layers besides the head).
"""
from __future__ import annotations

import re
from typing import Optional

import torch
from torch import nn

from triton_kernels import fused_mlp
from triton_kernels import grid_sync
from triton_kernels.adam import FlatAdam
from triton_kernels.runtime import capture_graph, check_choice

BACKENDS = ("eager", "compile", "triton")
IN_FEATURES = 14


class _DeepMLPBase(nn.Module):
    kind = ""

    def __init__(self, depth: int, in_features: int = IN_FEATURES, width: int = 16, backend: str = "eager",
                 precision: str = "ieee") -> None:
        super().__init__()
        check_choice("backend", backend, BACKENDS)
        check_choice("precision", precision, fused_mlp.PRECISIONS)
        self.layout = fused_mlp.Layout(self.kind, in_features, width, depth)  # validates depth / width
        self.depth, self.in_features, self.width = depth, in_features, width
        self.backend, self.precision = backend, precision
        self._compiled = None
        self._flat: Optional[torch.Tensor] = None
        self._running: Optional[torch.Tensor] = None

    # -- the flat layout ----------------------------------------------------------------------------
    def layout_parameters(self) -> list[tuple[str, int, torch.Tensor]]:
        """(layout name, index, parameter) in the flat buffer's order (index into stacked views)."""
        raise NotImplementedError

    def flat_parameters(self) -> torch.Tensor:
        """All parameters concatenated in the fused layout (differentiable; one copy)."""
        params = [p for _, _, p in self.layout_parameters()]
        if self._flat is not None:
            # under torch.compile no data pointers can be compared: trust the flat buffer if it is on the
            # parameters' device (a model moved after flattening is caught by the eager check)
            ok = (self._flat.device == params[0].device) if torch.compiler.is_compiling() else self._is_flat()
            if ok:
                return _FlatView.apply(self._flat, self._flat_offsets, *params)
        return torch.cat([p.reshape(-1) for p in params])

    def _is_flat(self) -> bool:
        views = self.layout.views(self._flat)
        for name, i, p in self.layout_parameters():
            v = views[name][i] if name in ("w_hid", "b_hid", "gamma", "beta") else views[name]
            if p.data_ptr() != v.data_ptr():
                return False
        return True

    def flatten_(self) -> torch.Tensor:
        """Move every parameter into one contiguous flat buffer (parameters become views of it; values
        unchanged) and, for BN, the running statistics into one (2, L, W) buffer. Returns the flat buffer."""
        if self._flat is not None and self._is_flat():
            return self._flat
        ref = next(self.parameters())
        flat = torch.empty(self.layout.numel, device=ref.device, dtype=torch.float32)
        views = self.layout.views(flat)
        for name, i, p in self.layout_parameters():
            v = views[name][i] if name in ("w_hid", "b_hid", "gamma", "beta") else views[name]
            v.copy_(p.detach().reshape(v.shape))
            p.data = v.view(p.shape)
        self._flat = flat
        self._flat_offsets = tuple((p.data_ptr() - flat.data_ptr()) // 4 for _, _, p in self.layout_parameters())
        self._flatten_running()
        return flat

    def _flatten_running(self) -> None:
        pass

    def running_buffer(self) -> torch.Tensor:
        return torch.empty(0, device=next(self.parameters()).device)

    # -- forward ------------------------------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Predictions (B,) for features x (B, in_features)."""
        if self.backend == "triton":
            return self.forward_triton(x)
        if self.backend == "compile":
            if self._compiled is None:
                self._compiled = torch.compile(self.forward_eager, dynamic=False)
            return self._compiled(x)
        return self.forward_eager(x)

    def forward_eager(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward_triton(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = fused_mlp.fused_mlp(self.layout, x, self.flat_parameters(), self.running_buffer(), self.training,
                                   self.precision)
        return y

    @torch.no_grad()
    def block_l1(self) -> torch.Tensor:
        """L1 norm of each block's weights (the first layer / block included), (n_blocks,)."""
        raise NotImplementedError

    @torch.no_grad()
    def block_outputs_l1(self, x: torch.Tensor) -> torch.Tensor:
        """Mean over rows of the L1 norm of each block's output (GloNet/MLP: h_l; ResNet: the residual
        branch added by each block), (n_blocks,): how much each block contributes."""
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"depth={self.depth}, width={self.width}, backend={self.backend}, precision={self.precision}"


class _FlatView(torch.autograd.Function):
    """Return the flat buffer itself (no copy) as a function of the parameters viewing into it, so the
    gradient w.r.t. the flat buffer flows back to every parameter."""

    @staticmethod
    def forward(ctx, flat, offsets, *params):
        ctx.shapes = offsets, [p.shape for p in params]
        return flat.view_as(flat)

    @staticmethod
    def backward(ctx, g):
        offs, shapes = ctx.shapes
        out = []
        for o, s in zip(offs, shapes):
            n = 1
            for d in s:
                n *= d
            out.append(g[o:o + n].view(s))
        return (None, None, *out)


class GloNet(_DeepMLPBase):
    """GloNet: N blocks (Linear + ReLU; the first maps in_features -> width), a "GloNet layer" summing
    EVERY block's output, g = sum_l h_l, and a head Linear(width, 1) reading g. No batch norm.
    Because the head sees every block directly, depth cannot hurt much: the network can use its first
    blocks and leave the rest near zero (the per-block L1 norms show which ones it uses)."""

    kind = "glonet"

    def __init__(self, depth: int, in_features: int = IN_FEATURES, width: int = 16, **kw) -> None:
        super().__init__(depth, in_features, width, **kw)
        self.blocks = nn.ModuleList([nn.Linear(in_features if i == 0 else width, width) for i in range(depth)])
        self.head = nn.Linear(width, 1)

    def layout_parameters(self):
        out = [("w_in", 0, self.blocks[0].weight), ("b_in", 0, self.blocks[0].bias)]
        out += [("w_hid", i - 1, b.weight) for i, b in enumerate(self.blocks) if i > 0]
        out += [("b_hid", i - 1, b.bias) for i, b in enumerate(self.blocks) if i > 0]
        return out + [("w_head", 0, self.head.weight), ("b_head", 0, self.head.bias)]

    def hidden(self, x):
        h, g, hs = x, 0, []
        for blk in self.blocks:
            h = torch.relu(blk(h))
            g = g + h
            hs.append(h)
        return g, hs

    def forward_eager(self, x):
        return self.head(self.hidden(x)[0]).squeeze(-1)

    @torch.no_grad()
    def block_l1(self):
        return torch.stack([b.weight.abs().sum() + b.bias.abs().sum() for b in self.blocks])

    @torch.no_grad()
    def block_outputs_l1(self, x):
        return torch.stack([h.abs().sum(1).mean() for h in self.hidden(x)[1]])


class MLP(GloNet):
    """Plain MLP: N blocks (Linear + ReLU; the first maps in_features -> width) in sequence and a head
    Linear(width, 1) on the last one. No skip connections, no batch norm."""

    kind = "mlp"

    def forward_eager(self, x):
        h = x
        for blk in self.blocks:
            h = torch.relu(blk(h))
        return self.head(h).squeeze(-1)


class ResidualBlock(nn.Module):
    """h -> relu(h + BN2(Linear2(relu(BN1(Linear1(h))))))  (the ResNet basic block, dense)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.lin1, self.bn1 = nn.Linear(width, width), nn.BatchNorm1d(width)
        self.lin2, self.bn2 = nn.Linear(width, width), nn.BatchNorm1d(width)

    def branch(self, h):
        return self.bn2(self.lin2(torch.relu(self.bn1(self.lin1(h)))))

    def forward(self, h):
        return torch.relu(h + self.branch(h))


class ResNetMLP(_DeepMLPBase):
    """ResNet-MLP: a stem Linear(in_features, width), N/2 residual blocks of two dense layers with batch
    norm, h <- relu(h + BN(Linear(relu(BN(Linear(h)))))), and a head Linear(width, 1). N must be even.
    Batch norm in training mode uses the batch statistics (the fused kernels' row tiles exchange them
    once per BN layer; see triton_kernels/fused_resnet.py)."""

    kind = "resnet"

    def __init__(self, depth: int, in_features: int = IN_FEATURES, width: int = 16, **kw) -> None:
        super().__init__(depth, in_features, width, **kw)
        self.stem = nn.Linear(in_features, width)
        self.blocks = nn.ModuleList([ResidualBlock(width) for _ in range(depth // 2)])
        self.head = nn.Linear(width, 1)

    def _bns(self):
        return [bn for b in self.blocks for bn in (b.bn1, b.bn2)]

    def _lins(self):
        return [lin for b in self.blocks for lin in (b.lin1, b.lin2)]

    def layout_parameters(self):
        out = [("w_in", 0, self.stem.weight), ("b_in", 0, self.stem.bias)]
        out += [("w_hid", i, lin.weight) for i, lin in enumerate(self._lins())]
        out += [("b_hid", i, lin.bias) for i, lin in enumerate(self._lins())]
        out += [("gamma", i, bn.weight) for i, bn in enumerate(self._bns())]
        out += [("beta", i, bn.bias) for i, bn in enumerate(self._bns())]
        return out + [("w_head", 0, self.head.weight), ("b_head", 0, self.head.bias)]

    def _flatten_running(self):
        L, W = self.layout.n_bn, self.width
        ref = self.stem.weight
        run = torch.empty(2 * L * W, device=ref.device, dtype=torch.float32)
        v = run.view(2, L, W)
        nbt = torch.zeros(L, device=ref.device, dtype=torch.long)
        for i, bn in enumerate(self._bns()):
            v[0, i].copy_(bn.running_mean)
            v[1, i].copy_(bn.running_var)
            nbt[i] = bn.num_batches_tracked
            bn.running_mean.data = v[0, i]
            bn.running_var.data = v[1, i]
            bn.num_batches_tracked.data = nbt[i]
        self._running, self._nbt = run, nbt

    def running_buffer(self):
        if torch.compiler.is_compiling():
            if self._running is None:
                raise RuntimeError("call the model once outside torch.compile (or model.flatten_()) before "
                                   "compiling it with backend='triton': the running statistics must be flat")
            return self._running
        if self._running is None or self._running.data_ptr() != self._bns()[0].running_mean.data_ptr():
            self.flatten_() if self._flat is None else self._flatten_running()
        return self._running

    def forward_triton(self, x):
        run = self.running_buffer()
        y, stats = fused_mlp.fused_mlp(self.layout, x, self.flat_parameters(), run, self.training, self.precision)
        if self.training and stats is not None:
            with torch.no_grad():
                note_batch(run, stats, x.shape[0], self._bns()[0].momentum)
                self._nbt += 1
        return y

    def forward_eager(self, x):
        h = self.stem(x)
        for blk in self.blocks:
            h = blk(h)
        return self.head(h).squeeze(-1)

    @torch.no_grad()
    def block_l1(self):
        return torch.stack([sum(p.abs().sum() for p in b.parameters()) for b in self.blocks])

    @torch.no_grad()
    def block_outputs_l1(self, x):
        h, out = self.stem(x), []
        for blk in self.blocks:
            u = blk.branch(h)
            out.append(u.abs().sum(1).mean())
            h = torch.relu(h + u)
        return torch.stack(out)


def note_batch(running: torch.Tensor, stats: torch.Tensor, n: int, momentum: float) -> None:
    """Running-stat update of nn.BatchNorm1d from batch (mean, biased var): unbiased var, momentum."""
    r = running.view(2, -1)
    s = stats.reshape(2, -1)
    r[0].lerp_(s[0], momentum)
    r[1].lerp_(s[1] * (n / max(n - 1, 1)), momentum)


_NAME = re.compile(r"^(GloNet|ResNetMLP|ResNet|MLP)(\d+)$", re.IGNORECASE)
_CLASSES = {"glonet": GloNet, "resnetmlp": ResNetMLP, "resnet": ResNetMLP, "mlp": MLP}


def parse_name(name: str) -> tuple[type, int]:
    m = _NAME.match(name.strip()) if isinstance(name, str) else None
    if not m:
        raise ValueError(f"model name must look like GloNet50, ResNetMLP100 (or ResNet100) or MLP10, got {name!r}")
    depth = int(m.group(2))
    if depth < 1:
        raise ValueError(f"model depth must be >= 1, got {name!r}")
    return _CLASSES[m.group(1).lower()], depth


def canonical_name(name: str) -> str:
    cls, depth = parse_name(name)
    return f"{cls.__name__}{depth}"


def build_model(name: str, width: int = 16, in_features: int = IN_FEATURES, backend: str = "eager",
                precision: str = "ieee", device=None, seed: Optional[int] = None) -> _DeepMLPBase:
    """``build_model("GloNet50", width=16)``; with ``seed`` the initialisation is reproducible (and the
    same for every backend)."""
    cls, depth = parse_name(name)
    if seed is not None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(depth, in_features, width, backend=backend, precision=precision)
    else:
        model = cls(depth, in_features, width, backend=backend, precision=precision)
    model = model.to(device) if device is not None else model
    if backend == "triton":  # parameters as views of one flat buffer (needed under torch.compile)
        model.flatten_()
    return model


class FusedTrainer:
    """Train a model with the fused kernels: per step forward kernel -> backward kernel -> Adam kernel
    (which sums the backward's per-row-tile gradient partials) + the device step counter. No autograd,
    no host sync; ``capture`` records a step in a CUDA graph for replay.

    MSE loss, Adam with L2 weight decay exactly as torch.optim.Adam. ``step`` returns the loss as a
    device scalar (computed from the forward's per-tile partial sums: one more small launch).
    """

    def __init__(self, model: _DeepMLPBase, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, precision: Optional[str] = None) -> None:
        self.model = model
        self.layout = model.layout
        self.precision = precision or model.precision
        self.flat = model.flatten_()
        self.running = model.running_buffer() if model.kind == "resnet" else None
        self.opt = FlatAdam(self.flat, lr, betas, eps, weight_decay)
        self._fwd: dict = {}
        self._bwd: dict = {}
        self.graph = None

    def _step(self, x, t, with_loss=True):
        L = self.layout
        B = x.shape[0]
        fb = self._fwd.get(B)
        fwd = fused_mlp.forward(L, x, self.flat, target=t, running=self.running, training=True, update_running=True,
                                precision=self.precision, out=fb, config=fb["config"] if fb else None)
        self._fwd[B] = fwd
        bb = self._bwd.get(B)
        bwd = fused_mlp.backward(L, x, self.flat, fwd, target=t, training=True, precision=self.precision, reduce=False,
                                 partials=bb["partials"] if bb else None, sync=bb["sync"] if bb else None,
                                 config=bb["config"] if bb else None)
        self._bwd[B] = bwd
        self.opt.step(bwd["partials"])
        if L.kind == "resnet":
            self.model._nbt += 1
        return fwd["loss_partials"].sum() / B if with_loss else None

    def step(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """One training step on (x (B, IN), target (B,)); returns the batch MSE (device scalar, before
        the update, as loss.item() after a torch step would)."""
        fused_mlp.validate(self.layout, x, self.flat, target, self.running, self.precision, training=True)
        return self._step(x, target)

    def capture(self, x: torch.Tensor, target: torch.Tensor):
        """Capture one step on the static tensors (x, target) in a CUDA graph (after a warm-up step that
        tunes and allocates). Returns (graph, loss tensor). Replaying advances the training by one step; the warm-up
        step's loss is ``self.warm_loss``."""
        fused_mlp.validate(self.layout, x, self.flat, target, self.running, self.precision, training=True)
        losses = []  # the warm-up step's loss (tunes + allocates: a real step), then the captured one

        def step():
            losses.append(self._step(x, target))
            return losses[-1]

        g, loss = capture_graph(step, warmup=1)
        self.warm_loss = losses[0]
        self.graph = g
        return g, loss

    def check(self) -> None:
        """Raise if a fused ResNet launch timed out waiting for its programs (reads two flags: one sync)."""
        grid_sync.check_sync(*self._fwd.values(), *[b["sync"] for b in self._bwd.values() if b.get("sync")])

    def state_dict(self) -> dict:
        return {"adam": self.opt.state_dict()}

    def load_state_dict(self, sd: dict) -> None:
        self.opt.load_state_dict(sd["adam"])

    @torch.no_grad()
    def predict(self, x: torch.Tensor, batch: int = 8192) -> torch.Tensor:
        """Evaluation-mode predictions with the fused forward (BN uses running statistics)."""
        outs = []
        for i in range(0, x.shape[0], batch):
            xb = x[i:i + batch]
            buf = fused_mlp.forward(self.layout, xb, self.flat, running=self.running, training=False, save=False,
                                    precision=self.precision)
            outs.append(buf["y"].clone())
        return torch.cat(outs)
