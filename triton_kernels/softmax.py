"""Softmax and log-softmax over the last dimension, forward and backward.

For a row x of length N (math in fp32 whatever the input dtype):
    m = max_j x_j,   s = sum_j exp(x_j - m)
    softmax:      y_j = exp(x_j - m) / s
    log-softmax:  y_j = x_j - m - log(s)
Backward, from the saved output y and the incoming gradient dy:
    softmax:      dx_j = y_j * (dy_j - sum_k dy_k y_k)
    log-softmax:  dx_j = dy_j - exp(y_j) * sum_k dy_k
In a double backward (create_graph=True) dx is this formula in torch's ops instead of the kernels, so
second (and higher) derivatives are right.

Two tilings, chosen by the row length:
* "row" kernels (next_pow2(N) <= MAX_FUSED_N): a program holds BLOCK_M whole rows in registers
  (BLOCK_N = next_pow2(N) columns), so every element is read once and written once.
* "looped" kernels (longer rows): one program per row walks the row in BLOCK_N chunks. The forward
  keeps an online (running) max and rescaled sum, then a second sweep writes y; the backward first
  reduces sum(dy*y) (or sum(dy)), then writes dx. The second sweep runs over the chunks in reverse
  order, so the chunks read last in the first sweep (most likely still in L2) are re-read first.

Which path runs: the row kernels when next_pow2(N) <= MAX_FUSED_N, else the looped ones; a launcher's
``config`` picks the path explicitly (a config naming BLOCK_M runs the row kernels, one naming BLOCK_N
the looped ones) as well as the tiling.

Strides: every tensor a kernel reads is indexed with both of its strides, so no input is copied by the
launchers: x (forward), dy and y (backward) may have any row and column strides, 0 included (a unit
column stride is specialised by Triton and gives 16-byte vector accesses). The public functions view the
input as (rows, N) rows with ``reshape``, which copies only when the leading dims cannot be merged
(e.g. softmax over dim 0 of a 3-D tensor). Outputs are contiguous, in the input dtype.

Special values, as torch: a NaN in a row makes the whole row NaN (it enters the sum); a row of all -inf
gives NaN (0 / 0), a +inf entry gives NaN in its row; finite logits up to the fp32 range (+-3e38) are
exact (the max is subtracted first). Empty rows or an empty batch give an empty result.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl
from torch.compiler import is_compiling

from autotune import spaces

from . import double_backward
from .launcher import BoundKernel, bind
from .runtime import cdiv, is_fake as _is_fake
from .runtime import (INTERPRETER_STORE_DTYPES, Autotuner, Config, EagerNode, bucket, check_tensor, config_from,
                      config_str, next_power_of_2, register_op, register_tuner, remember_call)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Longest row (rounded up to a power of two) handled by the one-block-per-row kernels; longer rows
# use the looped kernels. 16384 fp32 values per row = 64 KB of registers per program.
MAX_FUSED_N = 16384




# ----------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------
@triton.jit
def _softmax_fwd_row_kernel(
    x_ptr, y_ptr, M, N,
    stride_xm, stride_xn, stride_ym,
    LOG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y[rows] = (log-)softmax(x[rows]) for a BLOCK_M x BLOCK_N tile holding BLOCK_M whole rows.

    x: (M, N) with strides (stride_xm, stride_xn); y: (M, N) with strides (stride_ym, 1).
    """
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    r64 = rows[:, None].to(tl.int64)
    x = tl.load(x_ptr + r64 * stride_xm + cols[None, :] * stride_xn, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    m = tl.max(x, axis=1)
    m = tl.where(m == -float("inf"), 0.0, m)  # all -inf row (or padding row): avoid inf - inf
    z = x - m[:, None]
    e = tl.exp(z)
    s = tl.sum(e, axis=1)
    if LOG:
        y = z - tl.log(s)[:, None]
    else:
        y = e * (1.0 / s)[:, None]
    tl.store(y_ptr + r64 * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_fwd_looped_kernel(
    x_ptr, y_ptr, M, N,
    stride_xm, stride_xn, stride_ym,
    LOG: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per row of any length: online max / sum sweep, then a reverse sweep writing y."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    cols = tl.arange(0, BLOCK_N)
    m = -float("inf")
    s = 0.0
    for start in range(0, N, BLOCK_N):
        c = start + cols
        x = tl.load(x_row + c * stride_xn, mask=c < N, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(x - m_safe), axis=0)
        m = m_new
    m = tl.where(m == -float("inf"), 0.0, m)
    log_s = tl.log(s)
    inv_s = 1.0 / s
    n_chunks = tl.cdiv(N, BLOCK_N)
    for i in range(0, n_chunks):
        c = (n_chunks - 1 - i) * BLOCK_N + cols
        x = tl.load(x_row + c * stride_xn, mask=c < N, other=0.0).to(tl.float32)
        if LOG:
            y = x - m - log_s
        else:
            y = tl.exp(x - m) * inv_s
        tl.store(y_row + c, y.to(y_ptr.dtype.element_ty), mask=c < N)


@triton.jit
def _softmax_bwd_row_kernel(
    dy_ptr, y_ptr, dx_ptr, M, N,
    stride_dym, stride_dyn, stride_ym, stride_yn, stride_dxm,
    LOG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """dx[rows] from dy[rows] and y[rows] for BLOCK_M whole rows (see the module docstring)."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    r64 = rows[:, None].to(tl.int64)
    dy = tl.load(dy_ptr + r64 * stride_dym + cols[None, :] * stride_dyn, mask=mask, other=0.0).to(tl.float32)
    if LOG:
        y = tl.load(y_ptr + r64 * stride_ym + cols[None, :] * stride_yn, mask=mask, other=-float("inf"))
        y = y.to(tl.float32)
        dx = dy - tl.exp(y) * tl.sum(dy, axis=1)[:, None]
    else:
        y = tl.load(y_ptr + r64 * stride_ym + cols[None, :] * stride_yn, mask=mask, other=0.0).to(tl.float32)
        dx = y * (dy - tl.sum(dy * y, axis=1)[:, None])
    tl.store(dx_ptr + r64 * stride_dxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_looped_kernel(
    dy_ptr, y_ptr, dx_ptr, M, N,
    stride_dym, stride_dyn, stride_ym, stride_yn, stride_dxm,
    LOG: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """One program per row of any length: reduce sum(dy*y) (or sum(dy)), then a reverse sweep for dx."""
    row = tl.program_id(0).to(tl.int64)
    dy_row = dy_ptr + row * stride_dym
    y_row = y_ptr + row * stride_ym
    dx_row = dx_ptr + row * stride_dxm
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        dy = tl.load(dy_row + c * stride_dyn, mask=c < N, other=0.0).to(tl.float32)
        if LOG:
            acc += dy
        else:
            y = tl.load(y_row + c * stride_yn, mask=c < N, other=0.0).to(tl.float32)
            acc += dy * y
    total = tl.sum(acc, axis=0)
    n_chunks = tl.cdiv(N, BLOCK_N)
    for i in range(0, n_chunks):
        c = (n_chunks - 1 - i) * BLOCK_N + cols
        dy = tl.load(dy_row + c * stride_dyn, mask=c < N, other=0.0).to(tl.float32)
        y = tl.load(y_row + c * stride_yn, mask=c < N, other=0.0).to(tl.float32)
        if LOG:
            dx = dy - tl.exp(y) * total
        else:
            dx = y * (dy - total)
        tl.store(dx_row + c, dx.to(dx_ptr.dtype.element_ty), mask=c < N)


# ----------------------------------------------------------------------------------------------------
# Autotuning spaces
# ----------------------------------------------------------------------------------------------------
def _row_configs(M: int, N: int) -> list[Config]:
    """Candidates for the row kernels, best guess first (the first is used when autotuning is off): the
    declared softmax space's tuner list (autotune/spaces.py), rows per program x warps by the row length."""
    return spaces.candidates("softmax", M=M, N=N)


def _looped_configs() -> list[Config]:
    return spaces.candidates("softmax", M=1, N=2 * MAX_FUSED_N)


def _interpret_row_config(N: int) -> Config:
    return spaces.interpret_config("softmax", M=1, N=N)


_INTERPRET_LOOPED = spaces.interpret_config("softmax", M=1, N=2 * MAX_FUSED_N)

class SoftmaxKey(NamedTuple):
    """What a tuned softmax config depends on (its cache entry's fields)."""
    m: int                 # rows, bucketed to a power of two
    n: int                 # row length, bucketed
    dtype: torch.dtype
    grad_dtype: Optional[torch.dtype]  # the backward's incoming gradient; None for the forward
    log: bool              # log-softmax
    unit_stride: bool      # rows contiguous (stride 1 along the softmax dim)


_fwd_row_tuner = register_tuner(Autotuner("softmax_fwd_row", _softmax_fwd_row_kernel, _row_configs(1 << 14, 1024),
                                          interpret_config=Config({"BLOCK_M": 1}, 4, 1)))
_fwd_loop_tuner = register_tuner(Autotuner("softmax_fwd_looped", _softmax_fwd_looped_kernel, _looped_configs(),
                                           interpret_config=_INTERPRET_LOOPED))
_bwd_row_tuner = register_tuner(Autotuner("softmax_bwd_row", _softmax_bwd_row_kernel, _row_configs(1 << 14, 1024),
                                          interpret_config=Config({"BLOCK_M": 1}, 4, 1)))
_bwd_loop_tuner = register_tuner(Autotuner("softmax_bwd_looped", _softmax_bwd_looped_kernel, _looped_configs(),
                                           interpret_config=_INTERPRET_LOOPED))


def _pick(tuner: Autotuner, key, run, configs, interp_cfg: Config, fake: bool) -> Config:
    return tuner.pick(key, run, configs, tracing=fake, interpret_config=interp_cfg)


def check_config(config: Optional[Config]) -> None:
    """A launch config names exactly one of BLOCK_M (row kernels: rows per program) or BLOCK_N (looped
    kernels: chunk length), a power of two; raise a ValueError naming ``config`` otherwise."""
    if config is None:
        return
    if not isinstance(config, Config):
        raise ValueError(f"config must be a triton_kernels.runtime.Config or None, got {type(config).__name__}")
    keys = set(config.kwargs)
    if keys not in ({"BLOCK_M"}, {"BLOCK_N"}):
        raise ValueError(f"config must name exactly one of BLOCK_M (row kernels) or BLOCK_N (looped kernels), "
                         f"got {sorted(keys)}")
    block = next(iter(config.kwargs.values()))
    if not isinstance(block, int) or block < 1 or block & (block - 1):
        raise ValueError(f"config's {next(iter(keys))} must be a positive power of two, got {block!r}")


# ----------------------------------------------------------------------------------------------------
# Launchers (2-D inputs; the public functions below flatten any shape to rows)
# ----------------------------------------------------------------------------------------------------
def softmax_forward(x: torch.Tensor, log: bool = False, config: Optional[Config] = None) -> torch.Tensor:
    """(log-)softmax over the last dim of a 2-D tensor x of any strides (read in place, never copied);
    returns a contiguous tensor of x's dtype. ``config``: run this kernel path and tiling instead of the
    size-chosen, tuned one (see ``check_config``)."""
    M, N = x.shape
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return y
    _launch_planned(_FORWARD, (x, y, M, N, x.stride(0), x.stride(1), y.stride(0)),
                    M, N, x.dtype, x.dtype, log, x.stride(1) == 1, config)
    return y


def softmax_backward(dy: torch.Tensor, y: torch.Tensor, log: bool = False,
                     config: Optional[Config] = None) -> torch.Tensor:
    """dx for (log-)softmax from the output y and the incoming gradient dy (both 2-D, same shape, any
    strides: both are read in place); dx is contiguous. ``config`` as for ``softmax_forward``."""
    if y.ndim != 2 or dy.shape != y.shape:
        raise ValueError(f"dy and y must be 2-D of one shape, got {tuple(dy.shape)} and {tuple(y.shape)}")
    M, N = y.shape
    dx = torch.empty((M, N), device=y.device, dtype=y.dtype)
    if M == 0 or N == 0:
        return dx
    _launch_planned(_BACKWARD, (dy, y, dx, M, N, dy.stride(0), dy.stride(1), y.stride(0), y.stride(1), dx.stride(0)),
                    M, N, y.dtype, dy.dtype, log, dy.stride(1) == 1, config)
    return dx


class _Plan(NamedTuple):
    """A kernel bound to its config (launcher.bind) and the rows each program takes (0: one row per
    program, the looped kernel)."""

    kernel: BoundKernel
    rows: int

    def grid(self, M: int) -> tuple:
        return (cdiv(M, self.rows),) if self.rows else (M,)


# One plan per (direction, shape bucket, row block, dtypes, log, layout), found once (tuner or cache);
# every later call is a dict lookup and a direct launch.
_FORWARD = ("forward", _softmax_fwd_row_kernel, _softmax_fwd_looped_kernel, _fwd_row_tuner, _fwd_loop_tuner)
_BACKWARD = ("backward", _softmax_bwd_row_kernel, _softmax_bwd_looped_kernel, _bwd_row_tuner, _bwd_loop_tuner)
_PLANS: dict[tuple, _Plan] = {}


def _launch_planned(direction, args, M, N, dtype, grad_dtype, log, unit_stride, config) -> None:
    plan = _find_plan(direction, args, M, N, dtype, grad_dtype, log, unit_stride, config)
    plan.kernel.launch(plan.grid(M), *args)


def _find_plan(direction, args, M, N, dtype, grad_dtype, log, unit_stride, config) -> _Plan:
    """The kept plan of this call's key (made on its first call), or ``config``'s plan for this call."""
    block_n = next_power_of_2(N)
    key = (direction[0], bucket(M), block_n if block_n <= MAX_FUSED_N else 0, dtype, grad_dtype, log, unit_stride)
    plan = _PLANS.get(key) if config is None else None
    return plan if plan is not None else _make_plan(direction, key, args, M, N, block_n, config)


def _make_plan(direction, key, args, M, N, block_n, config) -> _Plan:
    """The row kernel (whole rows in registers) when the row fits, else the looped one, with the
    tuner's config for this key; a given ``config`` chooses the kernel (BLOCK_M: row, BLOCK_N: looped)
    and its tiling. Plans found while torch.compile traces are not kept (nothing could be timed)."""
    check_config(config)
    name, row_kernel, looped_kernel, row_tuner, loop_tuner = direction
    log = key[5]
    looped = "BLOCK_N" in config.kwargs if config is not None else block_n > MAX_FUSED_N
    kernel, constexprs = (looped_kernel, {"LOG": log}) if looped else (row_kernel, {"LOG": log, "BLOCK_N": block_n})

    def plan_for(cfg: Config) -> _Plan:
        bound = bind(kernel, **constexprs, **cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        return _Plan(bound, 0 if looped else cfg.kwargs["BLOCK_M"])

    def run(cfg: Config) -> None:  # one launch with cfg, timed by the tuner
        plan = plan_for(cfg)
        plan.kernel.launch(plan.grid(M), *args)

    tracing = _is_fake(args[0])
    if config is None:
        tune_key = SoftmaxKey(m=bucket(M), n=bucket(N), dtype=key[3], grad_dtype=key[4] if name == "backward" else None,
                              log=log, unit_stride=key[6])
        if looped:
            config = _pick(loop_tuner, tune_key, run, _looped_configs(), _INTERPRET_LOOPED, tracing)
        else:
            config = _pick(row_tuner, tune_key, run, lambda: _row_configs(M, N), _interpret_row_config(N), tracing)
        plan = plan_for(config)
        if not tracing:
            _PLANS[key] = plan
        return plan
    return plan_for(config)


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _softmax_op(x: torch.Tensor, log: bool, config: str) -> torch.Tensor:
    return softmax_forward(x, log, config_from(config))


def _softmax_backward_op(dy: torch.Tensor, y: torch.Tensor, log: bool, config: str) -> torch.Tensor:
    return softmax_backward(dy, y, log, config_from(config))


def _setup_context(ctx, inputs, output):
    ctx.log, ctx.config = inputs[1], inputs[2]
    ctx.save_for_backward(output)


def backward_ops(dy: torch.Tensor, y: torch.Tensor, log: bool, config: str) -> torch.Tensor:
    """dx from dy and the saved output y: the registered backward op, or in grad mode (a double backward,
    create_graph=True) the same formula in torch's ops, differentiable again in dy and y."""
    if torch.is_grad_enabled():
        return double_backward.softmax_backward(dy, y, log)
    return _softmax_backward_call(dy, y, log, config)


def _backward(ctx, dy):
    (y,) = ctx.saved_tensors
    if not ctx.needs_input_grad[0]:
        return None, None, None
    return backward_ops(dy, y, ctx.log, ctx.config), None, None


_softmax_backward_call = register_op("tk::softmax_backward", _softmax_backward_op)
_softmax_call = register_op("tk::softmax", _softmax_op, setup_context=_setup_context, backward=_backward)


# ----------------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------------
def _validate(x, dim, config) -> int:
    check_tensor("x", x, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_STORE_DTYPES)
    if x.ndim == 0:
        raise ValueError("x must have at least 1 dim, got a 0-dim tensor")
    if not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim must be an int in [{-x.ndim}, {x.ndim - 1}] for x of shape {tuple(x.shape)}, got {dim!r}")
    check_config(config)
    return dim % x.ndim


class _Node(EagerNode):
    """The autograd node of an eager (log-)softmax call."""


class _Call:
    """One (log-)softmax call signature (shape, strides, dtype and device of x; dim, log, config; whether
    x needs a gradient), validated once. Its first call finds the launch plan; a later one allocates the
    output and launches with the other kernel arguments fixed (launcher.BoundKernel.fix)."""

    def __init__(self, x: torch.Tensor, dim: int, log: bool, config: Optional[Config], grad: bool) -> None:
        self.dim, self.log, self.config, self.grad = dim, log, config, grad
        self.rows = dim == 1 and x.ndim == 2  # x is (M, N) rows: no reshapes
        self.last = dim == x.ndim - 1
        self.shape = x.movedim(dim, -1).shape  # of the rows before they are flattened
        self.M, self.N = math.prod(self.shape[:-1]), self.shape[-1]
        self.forward_launch = None
        self.backward_launches = {}  # (dy's strides, dtype) -> launch(dy, y, dx)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.rows:
            return _Node.run(self, x) if self.grad else self.run(x)
        # rows x N with both sizes spelled out (-1 is ambiguous when N == 0); a view when the layout
        # allows it, else one copy
        x2 = (x if self.last else x.movedim(self.dim, -1)).reshape(self.M, self.N)
        y = (_Node.run(self, x2) if self.grad else self.run(x2)).reshape(self.shape)
        return y if self.last else y.movedim(-1, self.dim)

    def run(self, x2: torch.Tensor) -> torch.Tensor:
        M, N = self.M, self.N
        y = x2.new_empty((M, N))
        if M and N:
            if self.forward_launch is None:
                args = (x2, y, M, N, x2.stride(0), x2.stride(1), y.stride(0))
                plan = _find_plan(_FORWARD, args, M, N, x2.dtype, x2.dtype, self.log, x2.stride(1) == 1, self.config)
                self.forward_launch = plan.kernel.fix(plan.grid(M), *args)
            self.forward_launch(x2, y)
        return y

    def forward(self, ctx, x2: torch.Tensor) -> torch.Tensor:
        y = self.run(x2)
        ctx.save_for_backward(y)
        return y

    def general_backward(self, ctx, dy: torch.Tensor) -> tuple:
        """The registered op's backward (backward_ops): a double backward."""
        (y,) = ctx.saved_tensors
        return (backward_ops(dy, y, self.log, config_str(self.config)),)

    def backward(self, ctx, dy: torch.Tensor) -> tuple:
        (y,) = ctx.saved_tensors
        M, N = self.M, self.N
        dx = y.new_empty((M, N))
        if M and N:
            launch = self.backward_launches.get((dy.stride(), dy.dtype))
            if launch is None:
                args = (dy, y, dx, M, N, dy.stride(0), dy.stride(1), y.stride(0), y.stride(1), dx.stride(0))
                plan = _find_plan(_BACKWARD, args, M, N, y.dtype, dy.dtype, self.log, dy.stride(1) == 1, self.config)
                launch = self.backward_launches[(dy.stride(), dy.dtype)] = plan.kernel.fix(plan.grid(M), *args)
            launch(dy, y, dx)
        return (dx,)


_CALLS: dict[tuple, _Call] = {}


def _apply(x: torch.Tensor, dim: int, log: bool, config: Optional[Config]) -> torch.Tensor:
    key = None
    if not is_compiling():
        try:  # the call signature: what validation, the launch plan and the kernel arguments depend on
            key = (x.__class__, x.shape, x.stride(), x.dtype, x.device, torch.is_grad_enabled() and x.requires_grad,
                   dim, log, config)
            call = _CALLS.get(key)
        except (AttributeError, TypeError):  # not a tensor, an unhashable argument: validated on every call
            key = call = None
        if call is not None:
            return call(x)
    dim = _validate(x, dim, config)
    if not is_compiling() and not _is_fake(x):  # eager: kept for this signature's later calls
        call = _Call(x, dim, log, config, torch.is_grad_enabled() and x.requires_grad)
        return remember_call(_CALLS, key, call)(x)
    # traced by torch.compile: the registered op
    if dim == 1 and x.ndim == 2:  # already rows x N: no reshapes
        return _softmax_call(x, log, config_str(config))
    xt = x.movedim(dim, -1) if dim != x.ndim - 1 else x
    shape = xt.shape
    x2 = xt.reshape(math.prod(shape[:-1]), shape[-1])
    y = _softmax_call(x2, log, config_str(config)).reshape(shape)
    return y if dim == x.ndim - 1 else y.movedim(-1, dim)


def softmax(x: torch.Tensor, dim: int = -1, *, config: Optional[Config] = None) -> torch.Tensor:
    """softmax(x) along ``dim`` (fp32 math), differentiable and torch.compile-friendly. ``config``
    chooses the kernel path and tiling (BLOCK_M: row kernels, BLOCK_N: looped kernels); default: tuned."""
    return _apply(x, dim, False, config)


def log_softmax(x: torch.Tensor, dim: int = -1, *, config: Optional[Config] = None) -> torch.Tensor:
    """log_softmax(x) along ``dim`` (fp32 math), differentiable and torch.compile-friendly. ``config``
    as for ``softmax``."""
    return _apply(x, dim, True, config)
