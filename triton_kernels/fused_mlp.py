"""Fully fused deep-narrow MLPs (GloNet, plain MLP; the ResNet-MLP with batch norm in fused_resnet.py):
the whole stack's forward in one kernel, its backward in one kernel, weight-gradient partials reduced
across row tiles. This file holds what the three share: the flat parameter layout, the launchers
(validation, tuning, allocation) and the differentiable op.

The networks (width W in {16, 32, 64}, any depth, fp32):

    GloNet / MLP, N dense layers:     h_0 = relu(x W_0^T + b_0)            x: (B, IN), W_0: (W, IN)
                                      h_l = relu(h_{l-1} W_l^T + b_l)      l = 1 .. N-1, W_l: (W, W)
        GloNet:  g = sum_l h_l  (the "GloNet layer"),  y = g . w_head + b_head
        MLP:     y = h_{N-1} . w_head + b_head

    ResNet-MLP, a stem and N/2 blocks of two dense layers with batch norm: see fused_resnet.py.

Parameters live in ONE flat fp32 buffer (see :class:`Layout`): [W_0 | b_0 | W_1..W_L stacked | b_1..
b_L stacked | (gamma | beta) | w_head | b_head]. Kernels address it with offsets; a model's nn.Linear
parameters can be views into it (so the fused Adam of adam.py updates everything in one launch).

Tiling
------
GloNet / MLP (``_mlp_fwd_kernel``, ``_mlp_bwd_kernel``): program p owns rows [p*BLOCK_M, (p+1)*BLOCK_M)
for the WHOLE depth: the (BLOCK_M, W) activation tile stays in registers from layer to layer; each layer
is one tl.dot (BLOCK_M x W x W) + bias + ReLU, and the next layer's W x W weights (1-16 KB) are loaded
one iteration ahead so their latency hides behind the current layer. The GloNet sum g is a register
accumulator. Each layer's output is stored (L, B, W) for the backward (it is both the ReLU mask and the
next layer's input). The 14 input features are zero-padded to KIN = max(16, next_pow2(IN)) in the
masked load (tl.dot needs K >= 16).
The backward walks the layers in reverse with dh in registers: dz = dh * [h != 0] (h > 0 or NaN, as torch's
relu backward passes the gradient wherever relu's output is not <= 0), the program's
partial dW_l = dz^T h_{l-1} (a (W, BLOCK_M) x (BLOCK_M, W) dot) and db_l = colsum(dz) go to a
(num_programs, P) partial buffer in the flat layout, dh_{l-1} = dz W_l (+ dg for GloNet, since every
h_l also feeds the sum). The partials are summed over programs by ``_colsum_kernel`` (or inside the
fused Adam, adam.py), deterministically.

Launches per training step: forward, backward, (partials reduction fused into) Adam, plus the step
counter: all capturable in one CUDA graph (no host syncs, static shapes).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from . import grid_sync
from .launcher import bind
from .runtime import cdiv, is_fake as _is_fake, launch as _launch
from .runtime import INTERPRET, Autotuner, Config, bucket, check_choice, check_tensor, next_power_of_2, register_op
from .runtime import register_tuner

KINDS = ("glonet", "mlp", "resnet")
WIDTHS = (16, 32, 64)
PRECISIONS = ("ieee", "tf32", "tf32x3")


# ----------------------------------------------------------------------------------------------------
# Flat parameter layout
# ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Layout:
    """Offsets of every parameter in the flat buffer.

    kind: "glonet" | "mlp" | "resnet"; in_features: IN; width: W; depth: N, the number of dense layers
    (GloNet/MLP: including the first IN -> W layer; ResNet: the 2 * N/2 block layers, plus a stem).
    ``n_hidden`` is the number of stacked W x W layers: N - 1 (GloNet/MLP) or N (ResNet).
    """

    kind: str
    in_features: int
    width: int
    depth: int

    def __post_init__(self):
        check_choice("kind", self.kind, KINDS)
        if self.width not in WIDTHS:
            raise ValueError(f"width must be one of {WIDTHS}, got {self.width}")
        if self.in_features < 1:
            raise ValueError(f"in_features must be >= 1, got {self.in_features}")
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        if self.kind == "resnet" and self.depth % 2:
            raise ValueError(f"depth of a ResNet-MLP must be even (N/2 blocks of two layers), got {self.depth}")

    @property
    def n_hidden(self) -> int:
        return self.depth if self.kind == "resnet" else self.depth - 1

    @property
    def n_bn(self) -> int:
        return self.depth if self.kind == "resnet" else 0

    @property
    def kin(self) -> int:
        return max(16, next_power_of_2(self.in_features))

    @property
    def offsets(self) -> dict:
        W, IN, H = self.width, self.in_features, self.n_hidden
        o = {"w_in": 0}
        o["b_in"] = o["w_in"] + W * IN
        o["w_hid"] = o["b_in"] + W
        o["b_hid"] = o["w_hid"] + H * W * W
        o["gamma"] = o["b_hid"] + H * W
        o["beta"] = o["gamma"] + self.n_bn * W
        o["w_head"] = o["beta"] + self.n_bn * W
        o["b_head"] = o["w_head"] + W
        o["end"] = o["b_head"] + 1
        return o

    @property
    def numel(self) -> int:
        return self.offsets["end"]

    def views(self, flat: torch.Tensor) -> dict:
        """Named views into a flat buffer: w_in (W, IN), b_in (W,), w_hid (H, W, W), b_hid (H, W),
        gamma / beta (n_bn, W), w_head (1, W), b_head (1,)."""
        if flat.ndim != 1 or flat.numel() != self.numel:
            raise ValueError(f"flat buffer must be 1-D with {self.numel} elements, got shape {tuple(flat.shape)}")
        o, W, IN, H = self.offsets, self.width, self.in_features, self.n_hidden
        return {
            "w_in": flat[o["w_in"]:o["b_in"]].view(W, IN),
            "b_in": flat[o["b_in"]:o["w_hid"]],
            "w_hid": flat[o["w_hid"]:o["b_hid"]].view(H, W, W),
            "b_hid": flat[o["b_hid"]:o["gamma"]].view(H, W),
            "gamma": flat[o["gamma"]:o["beta"]].view(self.n_bn, W),
            "beta": flat[o["beta"]:o["w_head"]].view(self.n_bn, W),
            "w_head": flat[o["w_head"]:o["b_head"]].view(1, W),
            "b_head": flat[o["b_head"]:o["end"]],
        }


# ----------------------------------------------------------------------------------------------------
# Kernels: GloNet / MLP (row tiles)
# ----------------------------------------------------------------------------------------------------
@triton.jit
def relu(z):
    """max(z, 0) that keeps NaN, as torch.relu (tl.maximum alone returns 0 for NaN)."""
    return tl.maximum(z, 0.0, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN: tl.constexpr):
    """The program's rows of x (any strides) as fp32, the IN features zero-padded to KIN columns."""
    kin = tl.arange(0, KIN)
    return tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_xm + kin[None, :] * stride_xk,
                   mask=rmask[:, None] & (kin[None, :] < IN), other=0.0).to(tl.float32)


@triton.jit
def _mlp_fwd_kernel(
    x_ptr, t_ptr, p_ptr, acts_ptr, g_ptr, y_ptr, loss_ptr,
    B, IN, NH, stride_xm, stride_xk,
    OFF_WHID, OFF_BHID, OFF_WHEAD, OFF_BHEAD,
    GLONET: tl.constexpr, WITH_LOSS: tl.constexpr, SAVE: tl.constexpr, PRECISION: tl.constexpr,
    W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Forward of the whole stack for BLOCK_M rows.

    x: (B, IN) any strides; t: (B,) targets (WITH_LOSS); p: flat params (Layout); acts: (NH+1, B, W)
    layer outputs; g: (B, W) GloNet sum; y: (B,) predictions; loss: (num_programs,) sum of squared errors.
    """
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < B
    cols = tl.arange(0, W)
    kin = tl.arange(0, KIN)
    BW = B * W
    act_offs = rows[:, None] * W + cols[None, :]
    x = load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
    # layer 0: W_0 is (W, IN) row-major; read W_0^T as a (KIN, W) tile, zero-padded rows k >= IN
    w0t = tl.load(p_ptr + cols[None, :] * IN + kin[:, None], mask=kin[:, None] < IN, other=0.0)
    b0 = tl.load(p_ptr + W * IN + cols)
    # prefetch hidden layer 0 (masked off when there is none)
    w_lim = W * tl.minimum(NH, 1)  # W when there is a hidden layer, else 0 (mask everything off)
    wt_n = tl.load(p_ptr + OFF_WHID + cols[None, :] * W + cols[:, None], mask=cols[:, None] < w_lim, other=0.0)
    b_n = tl.load(p_ptr + OFF_BHID + cols, mask=cols < w_lim, other=0.0)
    h = relu(tl.dot(x, w0t, input_precision=PRECISION) + b0[None, :])
    if SAVE:
        tl.store(acts_ptr + act_offs, h, mask=rmask[:, None])
    g = h
    for l in range(0, NH):
        wt = wt_n
        bl = b_n
        nxt = tl.minimum(l + 1, NH - 1)  # next layer's weights, loaded while this one computes
        wt_n = tl.load(p_ptr + OFF_WHID + nxt * (W * W) + cols[None, :] * W + cols[:, None])
        b_n = tl.load(p_ptr + OFF_BHID + nxt * W + cols)
        h = relu(tl.dot(h, wt, input_precision=PRECISION) + bl[None, :])
        if SAVE:
            tl.store(acts_ptr + (l + 1) * BW + act_offs, h, mask=rmask[:, None])
        if GLONET:
            g += h
    wh = tl.load(p_ptr + OFF_WHEAD + cols)
    bh = tl.load(p_ptr + OFF_BHEAD)
    if GLONET:
        feat = g
        if SAVE:
            tl.store(g_ptr + act_offs, g, mask=rmask[:, None])
    else:
        feat = h
    y = tl.sum(feat * wh[None, :], axis=1) + bh
    tl.store(y_ptr + rows, y, mask=rmask)
    if WITH_LOSS:
        t = tl.load(t_ptr + rows, mask=rmask, other=0.0)
        d = tl.where(rmask, y - t, 0.0)
        tl.store(loss_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def upstream_grad(y_ptr, t_ptr, dy_ptr, dy_scale, rows, rmask, LOSS_GRAD: tl.constexpr):
    """dL/dy for the program's rows: dy_scale * (y - t) for the fused MSE loss (LOSS_GRAD), else loaded."""
    if LOSS_GRAD:
        y = tl.load(y_ptr + rows, mask=rmask, other=0.0)
        t = tl.load(t_ptr + rows, mask=rmask, other=0.0)
        dy = tl.where(rmask, dy_scale * (y - t), 0.0)
    else:
        dy = tl.load(dy_ptr + rows, mask=rmask, other=0.0)
    return dy


@triton.jit
def _mlp_bwd_kernel(
    x_ptr, t_ptr, dy_ptr, p_ptr, acts_ptr, g_ptr, y_ptr, part_ptr,
    B, IN, NH, P, stride_xm, stride_xk, dy_scale,
    OFF_WHID, OFF_BHID, OFF_WHEAD, OFF_BHEAD,
    GLONET: tl.constexpr, LOSS_GRAD: tl.constexpr, PRECISION: tl.constexpr,
    W: tl.constexpr, KIN: tl.constexpr, BLOCK_M: tl.constexpr,
):
    """Backward of the whole stack for BLOCK_M rows; writes this program's gradient partials.

    dy: (B,) upstream gradient of y, or (LOSS_GRAD) dy = dy_scale * (y - t) computed here (MSE: 2/B).
    part: (num_programs, P) partial gradients in the flat layout of p.
    """
    pid = tl.program_id(0)
    # Python floats can arrive as fp64 under torch.compile: keep every scalar (and loop-carried value) fp32
    dy_scale = tl.cast(dy_scale, tl.float32)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < B
    cols = tl.arange(0, W)
    kin = tl.arange(0, KIN)
    BW = B * W
    act_offs = rows[:, None] * W + cols[None, :]
    part = part_ptr + pid.to(tl.int64) * P
    dy = upstream_grad(y_ptr, t_ptr, dy_ptr, dy_scale, rows, rmask, LOSS_GRAD)
    h = tl.load(acts_ptr + NH * BW + act_offs, mask=rmask[:, None], other=0.0)
    if GLONET:
        feat = tl.load(g_ptr + act_offs, mask=rmask[:, None], other=0.0)
    else:
        feat = h
    wh = tl.load(p_ptr + OFF_WHEAD + cols)
    tl.store(part + OFF_WHEAD + cols, tl.sum(dy[:, None] * feat, axis=0))
    tl.store(part + OFF_BHEAD, tl.sum(dy, axis=0))
    dg = dy[:, None] * wh[None, :]
    dh = dg
    # prefetch layer NH's weights (as stored, (W_out, W_in)) and its input h_{NH-1}
    top = tl.maximum(NH - 1, 0)
    w_lim = W * tl.minimum(NH, 1)  # W when there is a hidden layer, else 0 (mask everything off)
    w_n = tl.load(p_ptr + OFF_WHID + top * (W * W) + cols[:, None] * W + cols[None, :],
                  mask=cols[:, None] < w_lim, other=0.0)
    hp_n = tl.load(acts_ptr + top * BW + act_offs, mask=rmask[:, None] & (cols[None, :] < w_lim), other=0.0)
    for i in range(0, NH):
        l = NH - i  # layer l (hidden index l - 1), its input is h_{l-1}
        w = w_n
        hp = hp_n
        nxt = tl.maximum(l - 2, 0)
        w_n = tl.load(p_ptr + OFF_WHID + nxt * (W * W) + cols[:, None] * W + cols[None, :])
        hp_n = tl.load(acts_ptr + nxt * BW + act_offs, mask=rmask[:, None], other=0.0)
        dz = tl.where(h != 0.0, dh, 0.0)
        dw = tl.dot(tl.trans(dz), hp, input_precision=PRECISION)
        tl.store(part + OFF_WHID + (l - 1) * (W * W) + cols[:, None] * W + cols[None, :], dw)
        tl.store(part + OFF_BHID + (l - 1) * W + cols, tl.sum(dz, axis=0))
        dh = tl.dot(dz, w, input_precision=PRECISION)
        if GLONET:
            dh += dg
        h = hp
    # layer 0: input x (zero-padded to KIN columns)
    dz = tl.where(h != 0.0, dh, 0.0)
    x = load_x(x_ptr, rows, rmask, stride_xm, stride_xk, IN, KIN)
    dw0 = tl.dot(tl.trans(dz), x, input_precision=PRECISION)  # (W, KIN)
    tl.store(part + cols[:, None] * IN + kin[None, :], dw0, mask=kin[None, :] < IN)
    tl.store(part + W * IN + cols, tl.sum(dz, axis=0))


@triton.jit
def _colsum_kernel(part_ptr, out_ptr, NP, P, BLOCK: tl.constexpr):
    """out[i] = sum_r part[r, i]: the deterministic reduction of gradient partials over row tiles."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < P
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r in range(0, NP):
        acc += tl.load(part_ptr + r * P + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, acc, mask=mask)

# ----------------------------------------------------------------------------------------------------
# Autotuning space
# ----------------------------------------------------------------------------------------------------
def rcfg(bm, warps):
    """A row-tile config: BLOCK_M rows per program, ``warps`` warps, one stage."""
    return Config({"BLOCK_M": bm}, warps, 1)


# row tiles: 1024 rows / 16 = 64 programs ... enough to keep the dependent chains of many SMs busy;
# small warps counts keep the per-layer dot + layout shuffle short (latency, not throughput, matters)
ROW_CONFIGS = [rcfg(bm, w) for bm in (16, 32, 64) for w in (1, 2, 4)]
ROW_INTERPRET = rcfg(16, 4)

_fwd_tuner = register_tuner(Autotuner("fused_mlp_fwd", _mlp_fwd_kernel, ROW_CONFIGS, interpret_config=ROW_INTERPRET))
_bwd_tuner = register_tuner(Autotuner("fused_mlp_bwd", _mlp_bwd_kernel, ROW_CONFIGS, interpret_config=ROW_INTERPRET))


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
def validate(layout: Layout, x, params, target=None, running=None, precision="ieee", training=True):
    """Check every input of the fused ops; ValueErrors name the argument (nothing is launched)."""
    if not isinstance(layout, Layout):
        raise ValueError(f"layout must be a Layout, got {type(layout).__name__}")
    check_tensor("x", x, ndim=2, dtypes=(torch.float32,))
    check_tensor("params", params, ndim=1, dtypes=(torch.float32,), device=x.device)
    if x.shape[1] != layout.in_features:
        raise ValueError(f"x has {x.shape[1]} features but the network expects in_features={layout.in_features}")
    if x.shape[0] < 1:
        raise ValueError("x must have at least one row")
    if params.numel() != layout.numel:
        raise ValueError(f"params has {params.numel()} elements, the {layout.kind} layout needs {layout.numel}")
    if not params.is_contiguous():
        raise ValueError("params must be contiguous (one flat buffer)")
    if target is not None:
        check_tensor("target", target, ndim=1, dtypes=(torch.float32,), device=x.device)
        if target.shape[0] != x.shape[0]:
            raise ValueError(f"target has {target.shape[0]} rows but x has {x.shape[0]}")
        if not target.is_contiguous():
            raise ValueError("target must be contiguous")
    check_choice("precision", precision, PRECISIONS)
    if (layout.n_hidden + 2) * x.shape[0] * layout.width >= 2**31:
        raise ValueError(f"x has {x.shape[0]} rows: the saved activations of this network would exceed 2**31 "
                         "elements (32-bit offsets); use smaller batches")
    if layout.kind == "resnet":
        fused_resnet.validate_running(layout, x, running, training)


class FusedMLPKey(NamedTuple):
    """What a tuned fused deep-MLP config depends on."""
    kind: str        # the layout's family (GloNet, MLP)
    width: int
    inputs: int      # input features
    batch: int       # bucketed
    hidden_layers: int  # bucketed
    precision: str
    batch_norm_training: bool
    save: Optional[bool]  # forward: keep the activations for a backward (None for the backward's key)


def _key(layout: Layout, B: int, precision: str, bn_train: bool, save: Optional[bool] = None) -> FusedMLPKey:
    return FusedMLPKey(kind=layout.kind, width=layout.width, inputs=layout.kin, batch=bucket(B),
                       hidden_layers=bucket(max(layout.n_hidden, 1), 1), precision=precision,
                       batch_norm_training=bn_train, save=save)


def forward(layout: Layout, x: torch.Tensor, params: torch.Tensor, *, target: Optional[torch.Tensor] = None,
            running: Optional[torch.Tensor] = None, training: bool = True, update_running: bool = True,
            precision: str = "ieee", save: bool = True, momentum: float = 0.1, eps: float = 1e-5,
            out: Optional[dict] = None, config: Optional[Config] = None) -> dict:
    """Run the fused forward. Returns a dict with y (B,), loss_partials (num_programs,) when ``target`` is
    given, the saved activations, and the config used. ``out``: preallocated buffers to reuse (CUDA graphs)."""
    B = x.shape[0]
    W, KIN, NH = layout.width, layout.kin, layout.n_hidden
    o = layout.offsets
    dev = x.device
    bn_train = layout.kind == "resnet" and training

    def buffers(cfg):
        bm = tile_rows(layout, B, cfg, bn_train)
        n_prog = cdiv(B, bm)
        if out is not None and out.get("_n_prog") == n_prog:
            return out
        f32 = dict(device=dev, dtype=torch.float32)
        buf = {"_n_prog": n_prog, "y": torch.empty(B, **f32), "loss_partials": torch.empty(n_prog, **f32)}
        if layout.kind == "resnet":
            buf.update(fused_resnet.forward_buffers(layout, B, n_prog if bn_train else 1, save, dev))
        else:
            buf.update(acts=torch.empty((NH + 1, B, W) if save else (1,), **f32),
                       g=torch.empty((B, W) if (save and layout.kind == "glonet") else (1,), **f32))
        return buf

    def run(cfg, update=update_running):
        buf = buffers(cfg)
        bm = tile_rows(layout, B, cfg, bn_train)
        grid = (cdiv(B, bm),)
        t = target if target is not None else buf["y"]
        if layout.kind == "resnet":
            fused_resnet.launch_forward(layout, x, t, params, running, buf, block_m=bm, num_warps=cfg.num_warps,
                                        train=bn_train, update_running=bool(bn_train and update),
                                        with_loss=target is not None, save=save, precision=precision,
                                        momentum=momentum, eps=eps)
        else:
            bound = bind(_mlp_fwd_kernel, GLONET=layout.kind == "glonet", WITH_LOSS=target is not None, SAVE=save,
                         PRECISION=precision, W=W, KIN=KIN, BLOCK_M=bm, num_warps=cfg.num_warps, num_stages=1)
            bound.launch(grid, x_ptr=x, t_ptr=t, p_ptr=params, acts_ptr=buf["acts"], g_ptr=buf["g"], y_ptr=buf["y"],
                         loss_ptr=buf["loss_partials"], B=B, IN=layout.in_features, NH=NH, stride_xm=x.stride(0),
                         stride_xk=x.stride(1), OFF_WHID=o["w_hid"], OFF_BHID=o["b_hid"], OFF_WHEAD=o["w_head"],
                         OFF_BHEAD=o["b_head"])
        return buf

    if config is None:
        tuner = fused_resnet.forward_tuner if layout.kind == "resnet" else _fwd_tuner
        config = tuner.pick(_key(layout, B, precision, bn_train, save), lambda c: run(c, update=False),
                            lambda: _configs(layout, B, bn_train, dev), tracing=_is_fake(x, params))
    buf = run(config)
    buf = dict(buf)
    buf["config"] = config
    return buf


def tile_rows(layout, B, cfg, bn_train):
    """BLOCK_M, the rows per program, of ``cfg``."""
    if bn_train and "BLOCK_M" not in cfg.kwargs:  # the interpreter's config: one program, the whole batch
        return max(16, next_power_of_2(B))
    return cfg.kwargs.get("BLOCK_M", 16 if INTERPRET else 64)


def _configs(layout, B, bn_train, device):
    if layout.kind == "resnet":
        return fused_resnet.configs(layout, B, bn_train, device)
    return [c for c in ROW_CONFIGS if c.kwargs["BLOCK_M"] <= max(16, next_power_of_2(B))]


def backward(layout: Layout, x: torch.Tensor, params: torch.Tensor, saved: dict, *,
             dy: Optional[torch.Tensor] = None, target: Optional[torch.Tensor] = None, training: bool = True,
             precision: str = "ieee", grad_out: Optional[torch.Tensor] = None, reduce: bool = True,
             partials: Optional[torch.Tensor] = None, sync: Optional[dict] = None,
             config: Optional[Config] = None) -> dict:
    """Run the fused backward from the forward's ``saved`` dict.

    The upstream gradient is ``dy`` (B,), or with ``target`` the MSE gradient 2 (y - t) / B computed in
    the kernel. Returns {"partials": (num_programs, P), "grad": (P,) when ``reduce``, "config", and for a
    ResNet the exchange buffers "sync" (pass them back as ``sync`` to reuse them)}.
    """
    B = x.shape[0]
    W, KIN, NH, P = layout.width, layout.kin, layout.n_hidden, layout.numel
    o = layout.offsets
    bn_train = layout.kind == "resnet" and training
    if dy is None and target is None:
        raise ValueError("backward needs dy or target")
    if dy is not None:
        check_tensor("dy", dy, ndim=1, dtypes=(torch.float32,), device=x.device)
        if dy.shape[0] != B:
            raise ValueError(f"dy has {dy.shape[0]} rows but x has {B}")
        dy = dy.contiguous()

    def run(cfg, part=None):
        bm = tile_rows(layout, B, cfg, bn_train)
        n_prog = cdiv(B, bm)
        if part is None or part.shape != (n_prog, P):
            part = torch.empty((n_prog, P), device=x.device, dtype=torch.float32)
        t = target if target is not None else saved["y"]
        d = dy if dy is not None else saved["y"]
        if layout.kind == "resnet":
            nonlocal sync
            if sync is None or sync["_np"] != next_power_of_2(n_prog if bn_train else 1):
                sync = grid_sync.buffers(n_prog if bn_train else 1, W, x.device)
            fused_resnet.launch_backward(layout, x, t, d, params, saved, part, sync, block_m=bm,
                                         num_warps=cfg.num_warps, train=bn_train, loss_grad=dy is None,
                                         precision=precision)
        else:
            bound = bind(_mlp_bwd_kernel, GLONET=layout.kind == "glonet", LOSS_GRAD=dy is None, PRECISION=precision,
                         W=W, KIN=KIN, BLOCK_M=bm, num_warps=cfg.num_warps, num_stages=1)
            bound.launch((n_prog,), x_ptr=x, t_ptr=t, dy_ptr=d, p_ptr=params, acts_ptr=saved["acts"], g_ptr=saved["g"],
                         y_ptr=saved["y"], part_ptr=part, B=B, IN=layout.in_features, NH=NH, P=P,
                         stride_xm=x.stride(0), stride_xk=x.stride(1), dy_scale=2.0 / B, OFF_WHID=o["w_hid"],
                         OFF_BHID=o["b_hid"], OFF_WHEAD=o["w_head"], OFF_BHEAD=o["b_head"])
        return part

    if config is None:
        tuner = fused_resnet.backward_tuner if layout.kind == "resnet" else _bwd_tuner
        config = tuner.pick(_key(layout, B, precision, bn_train), run,
                            lambda: _configs(layout, B, bn_train, x.device), tracing=_is_fake(x, params))
    part = run(config, partials)
    res = {"partials": part, "config": config, "sync": sync}
    if reduce:
        res["grad"] = reduce_partials(part, grad_out)
    return res


def reduce_partials(part: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Sum (num_programs, P) gradient partials over programs (one launch; a copy-free view when 1 program)."""
    n_prog, P = part.shape
    if out is None:
        if n_prog == 1:
            return part[0]
        out = torch.empty(P, device=part.device, dtype=torch.float32)
    BLOCK = 1024
    _launch(_colsum_kernel, (cdiv(P, BLOCK),), part, out, n_prog, P, BLOCK=BLOCK, num_warps=4)
    return out


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
_SAVED_NAMES = {"resnet": ("rstd", "hs", "xh", "a", "bstat"), "glonet": ("acts", "g"), "mlp": ("acts", "g")}


def _fused_mlp_op(x: torch.Tensor, params: torch.Tensor, running: torch.Tensor, kind: str, in_features: int,
                  width: int, depth: int, training: bool, precision: str, save: bool) -> list[torch.Tensor]:
    layout = Layout(kind, in_features, width, depth)
    buf = forward(layout, x, params, running=running if kind == "resnet" else None, training=training,
                  update_running=False, precision=precision, save=save)
    return [buf["y"]] + [buf[n] for n in _SAVED_NAMES[kind]]


def _fused_mlp_backward_op(x: torch.Tensor, params: torch.Tensor, dy: torch.Tensor, saved: list[torch.Tensor],
                           kind: str, in_features: int, width: int, depth: int, training: bool,
                           precision: str) -> torch.Tensor:
    layout = Layout(kind, in_features, width, depth)
    sv = dict(zip(_SAVED_NAMES[kind], saved))
    sv["y"] = dy  # only read when the loss gradient is computed in-kernel (not here)
    res = backward(layout, x, params, sv, dy=dy, training=training, precision=precision)
    g = res["grad"]
    return g.clone() if res["partials"].shape[0] == 1 else g  # one program: grad is a view of the partials


def _setup_context(ctx, inputs, output):
    x, params, running, kind, in_features, width, depth, training, precision, save = inputs
    ctx.meta = (kind, in_features, width, depth, training, precision)
    ctx.save_for_backward(x, params, *output[1:])


def _backward(ctx, grads):
    dy = grads[0]
    x, params, *saved = ctx.saved_tensors
    gp = None
    if ctx.needs_input_grad[1]:
        if dy is None:
            dy = torch.zeros(x.shape[0], device=x.device, dtype=torch.float32)
        gp = _fused_mlp_backward_call(x, params, dy.contiguous(), list(saved), *ctx.meta)
    return None, gp, None, None, None, None, None, None, None, None


_fused_mlp_backward_call = register_op("tk::fused_mlp_backward", _fused_mlp_backward_op)
_fused_mlp_call = register_op("tk::fused_mlp", _fused_mlp_op, setup_context=_setup_context, backward=_backward)


def fused_mlp(layout: Layout, x: torch.Tensor, params: torch.Tensor, running: Optional[torch.Tensor] = None,
              training: bool = True, precision: str = "ieee") -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """y = net(x) for the network described by ``layout`` with flat ``params``; differentiable w.r.t.
    ``params`` and torch.compile-friendly. x is data: the kernels compute no gradient for it, so an x
    that requires grad (with grad mode on) is refused with a ValueError rather than left without one.

    Returns (y (B,), batch_stats (2, n_bn, W) mean / biased variance or None). For a ResNet in training
    mode the caller updates the running statistics from batch_stats (see models/deep_mlp.py); the fused
    trainer's kernel does that in place instead.
    """
    if layout.kind != "resnet":
        running = params.new_empty((0,)) if running is None else running
    validate(layout, x, params, running=running, precision=precision, training=training)
    if torch.is_grad_enabled() and x.requires_grad:
        raise ValueError("x requires grad, but the fused MLP computes gradients for params only: pass "
                         "x.detach() (x is data), or use the eager backend for a gradient with respect to x")
    save = torch.is_grad_enabled() and params.requires_grad
    outs = _fused_mlp_call(x, params, running, layout.kind, layout.in_features, layout.width,
                                  layout.depth, training, precision, save)
    stats = outs[5] if (layout.kind == "resnet" and training) else None
    return outs[0], stats


# fused_resnet builds on this file's layout, row-tile helpers and configs (it imports them), so it is
# imported last; validate, forward and backward reach the ResNet kernels through it
from . import fused_resnet  # noqa: E402
