"""LayerNorm over the trailing dims (any normalized_shape, e.g. [8192] or Char-CNN's [256, 1008]),
forward and backward, and a fused LayerNorm([C, L]) -> ReLU -> MaxPool1d(k, stride=k) inference kernel.

The input is viewed as rows x (M, D), D = prod(normalized_shape); math in fp32. Every row is first
shifted by its own first value (x - x0 is exact for values within a factor of two of each other, so a
large common offset costs no precision, e.g. rows of 1e4 + 1e-3 * noise):
    x0 = x[0],  xs = x - x0,  mean_s = sum(xs) / D,  var = sum((xs - mean_s)^2) / D,  rstd = 1 / sqrt(var + eps)
    xhat = (xs - mean_s) * rstd,  y = xhat * w + b
The statistics saved for the backward are (mean_s, rstd): the mean of the *shifted* row (the mean of x
is x0 + mean_s), so the backward recomputes xhat = ((x - x0) - mean_s) * rstd exactly as the forward
did, re-reading x0 from x. Backward, with g = dy * w:
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (per row)
    dw = sum_rows(dy * xhat),  db = sum_rows(dy)             (per column)
In a double backward (create_graph=True) these formulas run in torch's ops on statistics recomputed from
x, so second (and higher) derivatives are right.

Tilings:
* Rows that fit a block (next_pow2(D) <= MAX_ROW_D): the forward holds BLOCK_M whole rows in registers
  (one read, one write). The backward runs a persistent grid of P programs; each walks rows
  pid, pid + P, ..., writes dx, and accumulates its dw / db partial sums in registers; it stores one
  (2, D) partial per program and `_sum_rows_kernel` adds the P partials -- no atomics.
* Long rows (e.g. 256 x 1008 = 258048 values): each row is cut into S segments so that M * S programs
  fill the GPU. The stats kernel gives each segment's (mean, M2) of the shifted values (Chan's parallel
  variance, merged chunk by chunk), and the consumer kernels merge the S partials of their row before
  normalising their segment. The backward reduces the two row sums per segment the same way; then one
  kernel over (column tile, row group) programs reads x and dy once more, writes dx and accumulates the
  group's dw / db partials in registers, and `_sum_rows_kernel` adds the few group partials.
* LayerNorm -> ReLU -> MaxPool1d over x (B, C, L): the long-row stats kernel, then one kernel whose
  programs each cover a segment of the (C, L // k) output: for every output it loads the k taps,
  normalises them, takes the max and then the ReLU (relu(max) = max(relu)), and stores it. The max
  and the ReLU keep NaN, as torch's max_pool1d and relu do.
A ``config`` chooses the path explicitly (``check_config``): BLOCK_D runs the long-row kernels with chunks
of BLOCK_D, BLOCK_M / PER_SM the row kernels. The kernels are in ``layernorm_kernels.py``; this file holds
their tuners (candidates from autotune/spaces.py), launch plans, launchers, torch ops and the public
functions; the eager calls (one prepared call per call signature) are in ``layernorm_eager.py``.

Inputs fp32 / fp16 / bf16; weight and bias any of those (or None); outputs in the input dtype, dw / db in
the parameters' dtype. Strides: weight and bias are indexed with their stride (any, 0 included) once
flattened to (D,) -- ``reshape`` copies a 2-D parameter only when its layout cannot be flattened to one
stride (e.g. a transposed one, or one expanded along one dim only); the fused kernel indexes a (C, L)
weight / bias with both strides. x and dy are read with any row stride; within a row they must be dense,
otherwise the launchers copy them once (``_rows`` for x, ``layer_norm_backward`` for dy). Outputs and the
saved statistics are contiguous buffers. Empty inputs give empty results (zero / empty gradients), as torch.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

import torch
from torch.compiler import is_compiling

from autotune import spaces

from . import double_backward
from .launcher import BoundKernel, bind
from .layernorm_kernels import (_ln_bwd_row_kernel, _ln_bwd_stats_kernel, _ln_bwd_tile_kernel, _ln_fwd_apply_kernel,
                                _ln_fwd_row_kernel, _ln_relu_pool_kernel, _ln_stats_kernel, _sum_rows_kernel)
from .runtime import cdiv, is_fake as _is_fake
from .runtime import (INTERPRET, INTERPRETER_STORE_DTYPES, Autotuner, Config, bucket, check_tensor, config_from,
                      config_str, next_power_of_2, register_op, register_tuner, remember_call, sm_count)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_ROW_D = 16384            # longest row (next power of two) kept in registers by the row kernels
LONG_BLOCK_D = 2048          # chunk of the long-row kernels on the GPU
INTERPRET_LONG_BLOCK_D = 256


# ----------------------------------------------------------------------------------------------------
# Autotuning spaces and launch heuristics
# ----------------------------------------------------------------------------------------------------
def _fwd_configs(M: int, D: int) -> list[Config]:
    """Candidates for the forward row kernel, best guess first (the first is used when autotuning is off):
    the declared layernorm_fwd space's tuner list (autotune/spaces.py), rows per program x warps."""
    return spaces.candidates("layernorm_fwd", M=M, D=D)


def _bwd_configs(D: int) -> list[Config]:
    """Candidates for the backward row kernel, best guess first: the declared layernorm_bwd space's tuner
    list (autotune/spaces.py), programs per SM x warps (it depends on the row length only)."""
    return spaces.candidates("layernorm_bwd", M=1, D=D)


class LayerNormForwardKey(NamedTuple):
    """What a tuned LayerNorm forward row config depends on."""
    m: int  # rows, bucketed
    d: int  # normalised length, bucketed
    dtype: torch.dtype
    has_weight: bool
    has_bias: bool
    save_stats: bool


class LayerNormBackwardKey(NamedTuple):
    """What a tuned LayerNorm backward row config depends on."""
    m: int
    d: int
    dtype: torch.dtype
    has_weight: bool
    need_dx: bool
    need_weight_partials: bool  # per-program partial sums for dweight / dbias


_fwd_tuner = register_tuner(Autotuner("layernorm_fwd_row", _ln_fwd_row_kernel, _fwd_configs(1 << 14, 1 << 13),
                                      interpret_config=spaces.interpret_config("layernorm_fwd", M=1 << 14, D=1 << 13)))
_bwd_tuner = register_tuner(Autotuner("layernorm_bwd_row", _ln_bwd_row_kernel, _bwd_configs(1 << 13),
                                      interpret_config=spaces.interpret_config("layernorm_bwd", M=1 << 14, D=1 << 13)))

_ROW_KEYS = frozenset({"BLOCK_M", "PER_SM"})
_LONG_KEYS = frozenset({"BLOCK_D"})
_POOL_KEYS = frozenset({"BLOCK_D", "BLOCK_O"})


def check_config(config: Optional[Config], fused_pool: bool = False) -> None:
    """A launch config. LayerNorm: either the row kernels' (BLOCK_M: rows per forward program, PER_SM:
    backward programs per SM; a missing one takes its default, 1 / 2) or the long-row kernels' (BLOCK_D:
    the chunk length). The fused LN -> ReLU -> MaxPool kernel (``fused_pool``): BLOCK_D (statistics
    chunk) and / or BLOCK_O (output chunk). Blocks are powers of two, PER_SM a positive int. Raise a
    ValueError naming ``config`` otherwise."""
    if config is None:
        return
    if not isinstance(config, Config):
        raise ValueError(f"config must be a triton_kernels.runtime.Config or None, got {type(config).__name__}")
    keys = set(config.kwargs)
    allowed = (_POOL_KEYS,) if fused_pool else (_ROW_KEYS, _LONG_KEYS)
    if not keys or not any(keys <= a for a in allowed):
        raise ValueError(f"config must name keys of one of {[sorted(a) for a in allowed]}, got {sorted(keys)}")
    for k, v in config.kwargs.items():
        block = k.startswith("BLOCK")
        if not isinstance(v, int) or v < 1 or (block and v & (v - 1)):
            raise ValueError(f"config's {k} must be a positive {'power of two' if block else 'int'}, got {v!r}")


def _use_long(config: Optional[Config], D: int) -> bool:
    """The long-row (segmented) kernels: when the config names BLOCK_D, else when a row does not fit."""
    return "BLOCK_D" in config.kwargs if config is not None else next_power_of_2(D) > MAX_ROW_D


def _row_config(config: Optional[Config], key: str, default: int) -> Config:
    """The row-kernel config ``{key: ...}`` taken from a user config (its warps and stages included)."""
    return Config({key: config.kwargs.get(key, default)}, config.num_warps, config.num_stages)


def _segments(M: int, D: int, block: int, sms: int) -> tuple[int, int]:
    """(SEG, S): each row cut into S segments of SEG values (a multiple of block); M * S fills ``sms`` SMs."""
    want = max(1, min(cdiv(4 * sms, max(M, 1)), cdiv(D, block), 64))
    seg = cdiv(cdiv(D, want), block) * block
    return seg, cdiv(D, seg)


def _long_block(config: Optional[Config] = None) -> int:
    default = INTERPRET_LONG_BLOCK_D if INTERPRET else LONG_BLOCK_D
    return config.kwargs.get("BLOCK_D", default) if config is not None else default


def _rows(x: torch.Tensor, M: int, D: int) -> torch.Tensor:
    """x viewed as (M, D) rows with a dense row (copied once when the layout does not allow it). Both
    sizes are given: -1 is ambiguous for an empty tensor."""
    x2 = x.reshape(M, D)
    return x2.contiguous() if D > 1 and x2.stride(1) != 1 else x2


# ----------------------------------------------------------------------------------------------------
# Launch plans: per key (shape bucket or shape, dtype, flags, device) the kernels bound to their configs
# once (launcher.bind, the tuner asked once). A ``config`` makes a plan for that call only. Plans found
# while torch.compile traces (fake tensors: nothing can be timed) are not kept.
# ----------------------------------------------------------------------------------------------------
class _RowForward(NamedTuple):
    """Rows that fit a block: the row kernel with its tuned BLOCK_M rows per program."""
    kernel: BoundKernel
    rows: int


class _LongForward(NamedTuple):
    """Long rows: the segment statistics kernel and the apply kernel, each row cut into S segments."""
    stats: BoundKernel
    apply: BoundKernel
    seg: int
    segments: int


class _RowBackward(NamedTuple):
    """The persistent row kernel (at most ``programs`` programs) and the partial-sum kernel."""
    kernel: BoundKernel
    programs: int
    sum_rows: BoundKernel
    sum_grid: tuple


class _LongBackward(NamedTuple):
    """Long rows: the segment sums (if dx is needed), the (column tile, row group) and partial-sum kernels."""
    stats: Optional[BoundKernel]
    tiles: BoundKernel
    seg: int
    segments: int
    grid: tuple
    rows_per_group: int
    sum_rows: BoundKernel
    sum_grid: tuple


class _Pool(NamedTuple):
    """LN -> ReLU -> MaxPool: the segment statistics kernel and the pooling kernel."""
    stats: BoundKernel
    pool: BoundKernel
    seg: int
    segments: int
    out_seg: int
    out_segments: int


_FORWARD_PLANS: dict[tuple, tuple] = {}
_BACKWARD_PLANS: dict[tuple, tuple] = {}
_POOL_PLANS: dict[tuple, _Pool] = {}


def _forward_plan(config, x2, w, b, y, mean, rstd, stride_w, stride_b, eps, has_w, has_b, save_stats):
    """This call's forward plan: without ``config`` the one kept for its key (made on the key's first call,
    where the tuner times its candidates on this call's arguments); with one, ``config``'s, for this call."""
    M, D = x2.shape
    # rows that fit a block share a plan per power of two of M; long rows have one per M (the segment
    # count depends on it); int(): a traced size may be symbolic, the key wants plain ints
    key = (int(M) if D > MAX_ROW_D else (int(M) - 1).bit_length(), int(D), x2.dtype, has_w, has_b, save_stats,
           x2.get_device())
    plan = _FORWARD_PLANS.get(key) if config is None else None
    if plan is not None:
        return plan
    flags = dict(HAS_W=has_w, HAS_B=has_b, STORE_STATS=save_stats)
    if _use_long(config, D):
        bd = _long_block(config)
        seg, S = _segments(M, D, bd, sm_count(x2))
        plan = _LongForward(bind(_ln_stats_kernel, BLOCK_D=bd, num_warps=8),
                            bind(_ln_fwd_apply_kernel, **flags, BLOCK_D=bd, BLOCK_S=next_power_of_2(S), num_warps=8),
                            seg, S)
    else:
        def plan_for(cfg: Config) -> _RowForward:
            return _RowForward(bind(_ln_fwd_row_kernel, **flags, BLOCK_D=next_power_of_2(D), **cfg.kwargs,
                                    num_warps=cfg.num_warps, num_stages=cfg.num_stages), cfg.kwargs["BLOCK_M"])

        def run(cfg: Config) -> None:  # one launch with cfg, timed by the tuner
            _launch_forward(plan_for(cfg), x2, w, b, y, mean, rstd, stride_w, stride_b, eps)

        tune_key = LayerNormForwardKey(m=bucket(M), d=bucket(D), dtype=x2.dtype, has_weight=has_w, has_bias=has_b,
                                       save_stats=save_stats)
        plan = plan_for(_row_config(config, "BLOCK_M", 1) if config is not None else _fwd_tuner.pick(
            tune_key, run, lambda: _fwd_configs(M, D), tracing=_is_fake(x2),
            interpret_config=spaces.interpret_config("layernorm_fwd", M=M, D=D)))
    if config is None and not _is_fake(x2):  # plans found while torch.compile traces are not kept
        _FORWARD_PLANS[key] = plan
    return plan


def _launch_forward(plan, x2, w, b, y, mean, rstd, stride_w, stride_b, eps) -> None:
    M, D = x2.shape
    if type(plan) is _RowForward:
        plan.kernel.launch(((M + plan.rows - 1) // plan.rows,), x_ptr=x2, w_ptr=w, b_ptr=b, y_ptr=y,
                           mean_ptr=mean, rstd_ptr=rstd, M=M, D=D, stride_xm=x2.stride(0), stride_ym=y.stride(0),
                           stride_w=stride_w, stride_b=stride_b, eps=eps)
        return
    S = plan.segments
    pmean = torch.empty((M, S), device=x2.device, dtype=torch.float32)
    pm2 = torch.empty((M, S), device=x2.device, dtype=torch.float32)
    plan.stats.launch((M, S), x_ptr=x2, pmean_ptr=pmean, pm2_ptr=pm2, D=D, stride_xm=x2.stride(0), SEG=plan.seg, S=S)
    plan.apply.launch((M, S), x_ptr=x2, w_ptr=w, b_ptr=b, y_ptr=y, pmean_ptr=pmean, pm2_ptr=pm2, mean_ptr=mean,
                      rstd_ptr=rstd, D=D, stride_xm=x2.stride(0), stride_ym=y.stride(0), stride_w=stride_w,
                      stride_b=stride_b, eps=eps, SEG=plan.seg, S=S)


def _sum_plan(D: int, sms: int) -> tuple[BoundKernel, tuple]:
    """The kernel adding the (P, 2 * D) partials of dw / db, and its grid: columns cut so that there are about as
    many programs as SMs (at least 16 columns, at most 256). Each program's loop over P is a chain of dependent
    loads, so the programs must be many: on an H100, 128 programs of 16 columns sum the 1056 x 2048 partials of
    D = 1024 three times as fast as 16 programs of 128."""
    if INTERPRET:
        return bind(_sum_rows_kernel, BLOCK_P=8, BLOCK_N=128, num_warps=4), (cdiv(2 * D, 128),)
    bn = min(256, max(16, next_power_of_2(2 * D // sms + 1) // 2))
    return bind(_sum_rows_kernel, BLOCK_P=64, BLOCK_N=bn, num_warps=4), (cdiv(2 * D, bn),)


def _sum_partials(plan, parts: torch.Tensor, D: int) -> torch.Tensor:
    """dw | db (2 * D,) fp32: the sum of a backward plan's (P, 2, D) partials."""
    out = torch.empty((2 * D,), device=parts.device, dtype=torch.float32)
    plan.sum_rows.launch(plan.sum_grid, part_ptr=parts, out_ptr=out, P=parts.shape[0], N=2 * D)
    return out


def _backward_plan(config, x2, w, dy, dx, mean, rstd, stride_w, has_w, need_dx, need_parts):
    """This call's backward plan, kept per key or ``config``'s, as for ``_forward_plan``."""
    M, D = x2.shape
    key = (int(M) if D > MAX_ROW_D else (int(M) - 1).bit_length(), int(D), x2.dtype, has_w, need_dx, need_parts,
           x2.get_device())
    plan = _BACKWARD_PLANS.get(key) if config is None else None
    if plan is not None:
        return plan
    sms = sm_count(x2)
    sum_rows, sum_grid = _sum_plan(D, sms)
    flags = dict(HAS_W=has_w, NEED_DX=need_dx, NEED_PARTS=need_parts)
    if _use_long(config, D):
        bd = _long_block(config)
        seg, S = _segments(M, D, bd, sms) if need_dx else (0, 1)
        stats = bind(_ln_bwd_stats_kernel, HAS_W=has_w, BLOCK_D=bd, num_warps=8) if need_dx else None
        # dx, dw and db in one sweep over (column tile, row group) programs: enough groups to give
        # ~4 programs per SM; the (G, 2, D) partials are few (G <= M) and summed after
        n_tiles = cdiv(D, bd)
        groups = max(1, min(M, cdiv(4 * sms, n_tiles)))
        rpg = cdiv(M, groups)
        tiles = bind(_ln_bwd_tile_kernel, **flags, BLOCK_D=bd, BLOCK_S=next_power_of_2(S),
                     num_warps=4 if INTERPRET else 8)
        plan = _LongBackward(stats, tiles, seg, S, (n_tiles, cdiv(M, rpg)), rpg, sum_rows, sum_grid)
    else:
        def plan_for(cfg: Config) -> _RowBackward:
            kernel = bind(_ln_bwd_row_kernel, **flags, BLOCK_D=next_power_of_2(D), num_warps=cfg.num_warps,
                          num_stages=cfg.num_stages)
            return _RowBackward(kernel, sms * cfg.kwargs["PER_SM"], sum_rows, sum_grid)

        def run(cfg: Config) -> None:  # one call with cfg, timed by the tuner: more programs, more partials to sum
            candidate = plan_for(cfg)
            parts = _launch_backward(candidate, x2, w, dy, dx, mean, rstd, stride_w, need_parts)
            if parts is not None:
                _sum_partials(candidate, parts, D)

        tune_key = LayerNormBackwardKey(m=bucket(M), d=bucket(D), dtype=x2.dtype, has_weight=has_w, need_dx=need_dx,
                                        need_weight_partials=need_parts)
        plan = plan_for(_row_config(config, "PER_SM", 2) if config is not None else _bwd_tuner.pick(
            tune_key, run, lambda: _bwd_configs(D), tracing=_is_fake(x2, dy),
            interpret_config=spaces.interpret_config("layernorm_bwd", M=M, D=D)))
    if config is None and not _is_fake(x2, dy):
        _BACKWARD_PLANS[key] = plan
    return plan


def _launch_backward(plan, x2, w, dy, dx, mean, rstd, stride_w, need_parts):
    """Launch a backward plan; returns the (P, 2, D) fp32 partials of dw / db (None without them)."""
    M, D = x2.shape
    dev = x2.device
    dx_ptr, stride_dxm = (dx, dx.stride(0)) if dx is not None else (x2, 0)
    if type(plan) is _RowBackward:
        P = max(1, min(M, plan.programs))
        parts = torch.empty((P, 2, D), device=dev, dtype=torch.float32) if need_parts else x2
        plan.kernel.launch((P,), x_ptr=x2, w_ptr=w, dy_ptr=dy, dx_ptr=dx_ptr, mean_ptr=mean, rstd_ptr=rstd,
                           part_ptr=parts, M=M, D=D, stride_xm=x2.stride(0), stride_dym=dy.stride(0),
                           stride_dxm=stride_dxm, stride_w=stride_w)
        return parts if need_parts else None
    pc1 = pc2 = x2  # dummies when dx is not needed
    S = plan.segments
    if plan.stats is not None:
        pc1 = torch.empty((M, S), device=dev, dtype=torch.float32)
        pc2 = torch.empty((M, S), device=dev, dtype=torch.float32)
        plan.stats.launch((M, S), x_ptr=x2, w_ptr=w, dy_ptr=dy, mean_ptr=mean, rstd_ptr=rstd, pc1_ptr=pc1,
                          pc2_ptr=pc2, D=D, stride_xm=x2.stride(0), stride_dym=dy.stride(0), stride_w=stride_w,
                          SEG=plan.seg, S=S)
    parts = torch.empty((plan.grid[1], 2, D), device=dev, dtype=torch.float32) if need_parts else x2
    plan.tiles.launch(plan.grid, x_ptr=x2, w_ptr=w, dy_ptr=dy, dx_ptr=dx_ptr, mean_ptr=mean, rstd_ptr=rstd,
                      pc1_ptr=pc1, pc2_ptr=pc2, part_ptr=parts, M=M, D=D, stride_xm=x2.stride(0),
                      stride_dym=dy.stride(0), stride_dxm=stride_dxm, stride_w=stride_w, S=S,
                      ROWS_PER_GROUP=plan.rows_per_group)
    return parts if need_parts else None


def _pool_plan(config: Optional[Config], B: int, D: int, NO: int, pool: int, has_w: bool, has_b: bool,
               sms: int) -> _Pool:
    bd = _long_block(config)
    seg, S = _segments(B, D, bd, sms)
    bo = (config.kwargs.get("BLOCK_O") if config is not None else None) or (128 if INTERPRET else 512)
    oseg, So = _segments(B, NO, bo, sms)
    return _Pool(bind(_ln_stats_kernel, BLOCK_D=bd, num_warps=8),
                 bind(_ln_relu_pool_kernel, HAS_W=has_w, HAS_B=has_b, POOL=pool, BLOCK_O=bo,
                      BLOCK_S=next_power_of_2(S), num_warps=4),
                 seg, S, oseg, So)


# ----------------------------------------------------------------------------------------------------
# Launchers on (M, D) rows
# ----------------------------------------------------------------------------------------------------
def _check_rows(x2: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor]) -> None:
    """The launchers' layout contract: x2 (M, D) with a unit column stride, weight / bias (D,)."""
    if x2.ndim != 2 or (x2.shape[1] > 1 and x2.stride(1) != 1):
        raise ValueError(f"x2 must be 2-D with a unit column stride, got shape {tuple(x2.shape)} strides "
                         f"{tuple(x2.stride())}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.ndim != 1 or t.shape[0] != x2.shape[1]):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({x2.shape[1]},)")


def layer_norm_forward(x2: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                       eps: float, save_stats: bool, config: Optional[Config] = None):
    """y (M, D) in x's dtype, and mean_s / rstd (M,) fp32 when save_stats (else None: nothing is
    allocated for them); mean_s is the mean of x - x[:, :1] (the module docstring says why). x2: (M, D)
    with a unit column stride (any row stride); weight, bias: (D,) of any stride. ``config``: the kernel
    path and tiling instead of the size-chosen, tuned one (``check_config``)."""
    check_config(config)
    M, D = x2.shape
    _check_rows(x2, weight, bias)
    y = torch.empty((M, D), device=x2.device, dtype=x2.dtype)
    # STORE_STATS=False: the kernels never touch the statistics' pointers (y stands in for them)
    mean = torch.empty((M,), device=x2.device, dtype=torch.float32) if save_stats else y
    rstd = torch.empty((M,), device=x2.device, dtype=torch.float32) if save_stats else y
    if M == 0 or D == 0:
        return (y, mean, rstd) if save_stats else (y, None, None)
    has_w, has_b = weight is not None, bias is not None
    w, b = (weight if has_w else x2), (bias if has_b else x2)
    stride_w, stride_b = (weight.stride(0) if has_w else 0), (bias.stride(0) if has_b else 0)
    plan = _forward_plan(config, x2, w, b, y, mean, rstd, stride_w, stride_b, eps, has_w, has_b, save_stats)
    _launch_forward(plan, x2, w, b, y, mean, rstd, stride_w, stride_b, eps)
    return (y, mean, rstd) if save_stats else (y, None, None)


def layer_norm_backward(dy: torch.Tensor, x2: torch.Tensor, weight: Optional[torch.Tensor], mean: torch.Tensor,
                        rstd: torch.Tensor, need_dx: bool, need_dw: bool, need_db: bool,
                        config: Optional[Config] = None):
    """(dx or None, dw fp32 (D,) or None, db fp32 (D,) or None) for rows x2 (M, D), from the statistics
    layer_norm_forward saved: mean_s, the mean of x - x[:, :1] (not torch's mean), and rstd. x2 as for
    the forward; dy (M, D) of any row stride (copied once when its column stride is not 1); weight (D,)
    of any stride; mean / rstd (M,) fp32 (copied when not contiguous). ``config`` as for the forward."""
    check_config(config)
    M, D = x2.shape
    _check_rows(x2, weight, None)
    if dy.ndim != 2 or dy.shape[0] != M or dy.shape[1] != D:
        raise ValueError(f"dy has shape {tuple(dy.shape)}, expected x2's {(M, D)}")
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t.ndim != 1 or t.shape[0] != M or t.dtype != torch.float32:
            raise ValueError(f"{name} must be the forward's ({M},) float32 statistic, got {t.dtype} {tuple(t.shape)}")
    # indexed as (M,) buffers: copied only when strided
    mean, rstd = ((t.contiguous() if M > 1 and t.stride(0) != 1 else t) for t in (mean, rstd))
    dev, need_parts = x2.device, need_dw or need_db
    dx = torch.empty((M, D), device=dev, dtype=x2.dtype) if need_dx else None
    if M == 0 or D == 0:
        z = torch.zeros((D,), device=dev, dtype=torch.float32)
        return dx, (z if need_dw else None), (z.clone() if need_db else None)
    if D > 1 and dy.stride(1) != 1:
        dy = dy.contiguous()
    has_w = weight is not None
    w, stride_w = (weight, weight.stride(0)) if has_w else (x2, 0)
    plan = _backward_plan(config, x2, w, dy, dx, mean, rstd, stride_w, has_w, need_dx, need_parts)
    parts = _launch_backward(plan, x2, w, dy, dx, mean, rstd, stride_w, need_parts)
    if not need_parts:
        return dx, None, None
    out = _sum_partials(plan, parts, D)
    return dx, (out[:D] if need_dw else None), (out[D:] if need_db else None)


def layer_norm_relu_maxpool_forward(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                                    eps: float, pool: int, config: Optional[Config] = None) -> torch.Tensor:
    """relu(max_pool1d(layer_norm(x, [C, L]), pool, pool)) for x (B, C, L); y (B, C, L // pool).
    x is read with any sample stride, each sample dense (else copied once); weight / bias (C, L) are read
    with both strides. ``config``: BLOCK_D (statistics chunk) and / or BLOCK_O (output chunk)."""
    check_config(config, fused_pool=True)
    B, C, L = x.shape
    LO, D = L // pool, C * L
    y = torch.empty((B, C, LO), device=x.device, dtype=x.dtype)
    if B == 0 or C * LO == 0:
        return y
    # the kernels read sample b at x + b * stride_xb: x itself when each sample is dense
    dense = (L == 1 or x.stride(2) == 1) and (C == 1 or x.stride(1) == L)
    x2 = x if dense else _rows(x, B, D)
    NO = C * LO
    has_w, has_b = weight is not None, bias is not None
    key = (int(B), int(C), int(L), pool, has_w, has_b, x.get_device())
    plan = _POOL_PLANS.get(key) if config is None else None
    if plan is None:
        plan = _pool_plan(config, B, D, NO, pool, has_w, has_b, sm_count(x))
        if config is None:
            _POOL_PLANS[key] = plan
    w, (w_stride_c, w_stride_l) = (weight, weight.stride()) if has_w else (x2, (0, 0))
    b, (b_stride_c, b_stride_l) = (bias, bias.stride()) if has_b else (x2, (0, 0))
    S = plan.segments
    pmean = torch.empty((B, S), device=x.device, dtype=torch.float32)
    pm2 = torch.empty((B, S), device=x.device, dtype=torch.float32)
    stride_xb = x2.stride(0)
    plan.stats.launch((B, S), x_ptr=x2, pmean_ptr=pmean, pm2_ptr=pm2, D=D, stride_xm=stride_xb, SEG=plan.seg, S=S)
    plan.pool.launch((B, plan.out_segments), x_ptr=x2, w_ptr=w, b_ptr=b, y_ptr=y, pmean_ptr=pmean, pm2_ptr=pm2,
                     L=L, LO=LO, D=D, stride_xb=stride_xb, stride_yb=y.stride(0), stride_wc=w_stride_c,
                     stride_wl=w_stride_l, stride_bc=b_stride_c, stride_bl=b_stride_l, eps=eps, SEG=plan.seg,
                     S=S, OSEG=plan.out_seg, NO=NO)
    return y


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _layer_norm_op(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float,
                   save_stats: bool, config: str) -> list[torch.Tensor]:
    y, mean, rstd = layer_norm_forward(x, weight, bias, eps, save_stats, config_from(config))
    if not save_stats:  # the op's outputs are always three tensors
        return [y, x.new_empty((0,), dtype=torch.float32), x.new_empty((0,), dtype=torch.float32)]
    return [y, mean, rstd]


def _layer_norm_backward_op(dy: torch.Tensor, x: torch.Tensor, weight: Optional[torch.Tensor], mean: torch.Tensor,
                            rstd: torch.Tensor, need_dx: bool, need_dw: bool, need_db: bool,
                            config: str) -> list[torch.Tensor]:
    dx, dw, db = layer_norm_backward(dy, x, weight, mean, rstd, need_dx, need_dw, need_db, config_from(config))
    if dw is not None and db is not None:
        db = db.clone()  # outputs must not share storage: dw and db are the two halves of one buffer
    return [dx if dx is not None else x.new_empty((0,)),
            dw if dw is not None else x.new_empty((0,), dtype=torch.float32),
            db if db is not None else x.new_empty((0,), dtype=torch.float32)]


def _ln_relu_pool_op(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float,
                     pool: int, config: str) -> torch.Tensor:
    return layer_norm_relu_maxpool_forward(x, weight, bias, eps, pool, config_from(config))


def _setup_context(ctx, inputs, output):
    x, weight, bias, eps, save_stats, config = inputs
    _, mean, rstd = output
    ctx.has_w, ctx.has_b = weight is not None, bias is not None
    ctx.w_dtype = weight.dtype if weight is not None else None
    ctx.b_dtype = bias.dtype if bias is not None else None
    ctx.eps, ctx.config = eps, config
    ctx.save_for_backward(x, weight, mean, rstd)


def backward_ops(dy, x2, weight, mean, rstd, needs: tuple, eps: float, config: str, dtypes: tuple) -> tuple:
    """(dx, dw, db) over rows x2 (M, D), None where ``needs`` (dx, dw, db) wants none, dw / db in ``dtypes``: the
    registered op from the saved statistics, or in grad mode (a double backward, create_graph=True) torch's
    ops on statistics recomputed from x2 (double_backward.layer_norm_backward), differentiable again."""
    need_x, need_w, need_b = needs
    if torch.is_grad_enabled():
        dx, dw, db = double_backward.layer_norm_backward(dy, x2, weight, eps, needs)
    elif mean.numel() != x2.shape[0]:
        raise RuntimeError("layer_norm ran without saving its statistics (save_stats=False)")
    else:
        dx, dw, db = _ln_backward_call(dy, x2, weight, mean, rstd, need_x, need_w, need_b, config)
    return (dx if need_x else None, dw.to(dtypes[0]) if need_w else None, db.to(dtypes[1]) if need_b else None)


def _backward(ctx, grads):
    x, weight, mean, rstd = ctx.saved_tensors
    need_x, need_w, need_b = ctx.needs_input_grad[:3]
    needs = (bool(need_x), bool(need_w and ctx.has_w), bool(need_b and ctx.has_b))
    return (*backward_ops(grads[0], x, weight, mean, rstd, needs, ctx.eps, ctx.config, (ctx.w_dtype, ctx.b_dtype)),
            None, None, None)


# torch.compile calls these ops; eager calls go through layernorm_eager._Call
_ln_backward_call = register_op("tk::layer_norm_backward", _layer_norm_backward_op)
_ln_call = register_op("tk::layer_norm", _layer_norm_op, setup_context=_setup_context, backward=_backward)
_ln_relu_pool_call = register_op("tk::layer_norm_relu_maxpool", _ln_relu_pool_op)


# ----------------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------------
def _validate(x, normalized_shape, weight, bias, eps, x_checked: bool = False) -> tuple[int, ...]:
    """normalized_shape as a tuple of ints; a ValueError naming the argument that does not fit.
    ``x_checked``: the caller has checked x with check_tensor already."""
    if not x_checked:
        check_tensor("x", x, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_STORE_DTYPES)
    if isinstance(normalized_shape, int):
        shape = (normalized_shape,)
    else:
        shape = tuple(normalized_shape) if type(normalized_shape) is torch.Size else tuple(map(int, normalized_shape))
    n = len(shape)
    if n == 0:
        raise ValueError("normalized_shape must have at least one dim")
    if x.ndim < n or x.shape[x.ndim - n:] != shape:
        raise ValueError(f"x has shape {tuple(x.shape)}, whose trailing dims must equal normalized_shape {shape}")
    if weight is not None:
        check_tensor("weight", weight, dtypes=DTYPES, device=x.device)
        if weight.shape != shape:
            raise ValueError(f"weight has shape {tuple(weight.shape)}, expected normalized_shape {shape}")
    if bias is not None:
        check_tensor("bias", bias, dtypes=DTYPES, device=x.device)
        if bias.shape != shape:
            raise ValueError(f"bias has shape {tuple(bias.shape)}, expected normalized_shape {shape}")
    if not (isinstance(eps, (int, float)) and eps >= 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return shape


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *,
               config: Optional[Config] = None) -> torch.Tensor:
    """torch.nn.functional.layer_norm in Triton (fp32 statistics), differentiable and compile-friendly.
    ``config`` chooses the kernel path and tiling (``check_config``: BLOCK_D runs the long-row kernels,
    BLOCK_M / PER_SM the row kernels); default: by row length, tuned."""
    key = None
    if not is_compiling():
        grad = torch.is_grad_enabled()
        if normalized_shape.__class__ is list:  # hashable in the call signature
            normalized_shape = tuple(normalized_shape)
        try:  # the call signature: what validation, the launch plans and the kernel arguments depend on
            key = (x.__class__, x.shape, x.stride(), x.dtype, x.device, grad and x.requires_grad, normalized_shape,
                   eps, config, weight is not None and (weight.shape, weight.stride(), weight.dtype, weight.device,
                                                        grad and weight.requires_grad),
                   bias is not None and (bias.shape, bias.stride(), bias.dtype, bias.device, grad and bias.requires_grad))
            call = _CALLS.get(key)
        except (AttributeError, TypeError):  # not a tensor, an unhashable argument: validated on every call
            key = call = None
        if call is not None:
            return call(x, weight, bias)
    shape = _validate(x, normalized_shape, weight, bias, eps)
    check_config(config)
    grad = torch.is_grad_enabled()
    needs = (grad and x.requires_grad, grad and weight is not None and weight.requires_grad,
             grad and bias is not None and bias.requires_grad)
    if not is_compiling() and not _is_fake(x, weight, bias):  # eager: kept for this signature's later calls
        call = _Call(x, shape, weight, bias, eps, config, needs if any(needs) else None)
        return remember_call(_CALLS, key, call)(x, weight, bias)
    # traced by torch.compile: the registered op
    if len(shape) == 1 and x.ndim == 2 and (shape[0] <= 1 or x.stride(1) == 1):
        x2, w, b = x, weight, bias  # already (M, D) rows with (D,) parameters: no reshapes
    else:
        D = math.prod(shape)
        x2 = _rows(x, math.prod(x.shape[: x.ndim - len(shape)]), D)
        w = weight.reshape(D) if weight is not None else None
        b = bias.reshape(D) if bias is not None else None
    y = _ln_call(x2, w, b, float(eps), any(needs), config_str(config))[0]
    return y if x2 is x else y.reshape(x.shape)


def layer_norm_relu_maxpool(x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                            eps: float = 1e-5, pool: int = 3, *, config: Optional[Config] = None) -> torch.Tensor:
    """Inference: relu(max_pool1d(layer_norm(x, x.shape[1:], weight, bias, eps), pool, stride=pool)).

    x (B, C, L) -> (B, C, L // pool). Not differentiable (use layer_norm + relu + max_pool1d to train).
    NaN propagates as in torch (a NaN tap makes its pooled output NaN). ``config``: BLOCK_D (statistics
    chunk) and / or BLOCK_O (output chunk).
    """
    check_tensor("x", x, ndim=3, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_STORE_DTYPES)
    _validate(x, x.shape[1:], weight, bias, eps, x_checked=True)
    if not isinstance(pool, int) or pool < 1:
        raise ValueError(f"pool must be a positive int, got {pool!r}")
    if x.shape[2] < pool:
        raise ValueError(f"x has length {x.shape[2]} < pool {pool}: the pooled output would be empty")
    if torch.is_grad_enabled() and (x.requires_grad or (weight is not None and weight.requires_grad)
                                    or (bias is not None and bias.requires_grad)):
        raise ValueError("layer_norm_relu_maxpool is an inference kernel: call it under torch.no_grad() "
                         "(or use layer_norm + relu + max_pool1d for training)")
    check_config(config, fused_pool=True)
    return _ln_relu_pool_call(x, weight, bias, float(eps), int(pool), config_str(config))


from .layernorm_eager import _CALLS, _Call  # noqa: E402  (it builds on this module's plans and launchers)
