"""BatchNorm2d fused with ReLU and with a residual add, forward and backward (training mode: batch
statistics; inference mode: running statistics), and BatchNorm folded into a convolution for inference.

Math, per channel c over the M = N * H * W values of the batch, in fp32 whatever the activation dtype:
    mean = sum(x) / M,   var = sum((x - mean)^2) / M,   rstd = 1 / sqrt(var + eps)
    y    = act((x - mean) * scale + beta [+ residual]),   scale = w * rstd,  beta = b,  act = relu | identity
    running_mean <- (1 - momentum) * running_mean + momentum * mean
    running_var  <- (1 - momentum) * running_var  + momentum * sum((x - mean)^2) / (M - 1)   (unbiased, as torch)
Backward, with g = dy where the pre-activation was > 0 (relu; NaN counts as > 0, as in torch), else g = dy:
    dbias = sum(g),   dweight = rstd * sum(g * (x - mean))
    dx = scale * g - k * (x - mean) - c,   k = scale * rstd * dweight / M,   c = scale * dbias / M
    dresidual = g

Passes over memory (kernels in batchnorm_kernels.py; the layout the kernels are written for is channels_last: the C values of a pixel
are adjacent, so a tile row is one vector load):
    forward : _bn_stats_kernel (read x; its last programs merge the statistics) -> _bn_apply_kernel
              (read x [+ residual], write y [+ the relu bits])
    backward: _bn_bwd_reduce_kernel (read dy, x [+ the relu bits]; write g = dresidual when there is a
              residual; its last programs merge dweight, dbias and the dx coefficients) -> _bn_bwd_dx_kernel
              (read g or dy, x; write dx)
The relu mask comes from bits the apply kernel stores when a residual was added (one bit per value: 1/16
of a bf16 y, which the backward would otherwise read), else it is recomputed from x with the forward's own
expression. dy may come in two parts (two_outputs), added as they are loaded; the second part may be the
gradient of y[:, :, ::s, ::s], which the apply kernel then writes too (second_stride). batch_norm_pair
normalises a residual that is itself a batch norm's raw input inside the apply (RES_NORM), and its backward
sums and differentiates both from one g (PAIR). On sm_90 and later the apply and dx kernels are programmatic
dependent launches of the reductions ahead of them (``_make_plan``).

Tiling: every tensor is addressed as (N, HW, C) with strides (stride_n, stride_hw, stride_c); a tile is
BLOCK_M pixels of one sample x BLOCK_C channels. When the N and HW strides merge (channels_last
dense) the launcher makes them one pixel dim (N = 1, HW = N * H * W) so tiles run across samples.
Reductions use a grid of (group, channel block) programs: a group walks every GROUPS-th tile, keeping fp32
sums of x - s in ACC_ROWS x BLOCK_C registers (each tile's pixels folded onto ACC_ROWS rows; ACC_ROWS =
BLOCK_M keeps one per element), s = the channel's value at the first pixel of the batch, and writes one
partial (count, mean of x - s, M2) per channel, then adds 1 to its channel block's arrival counter; the
program that arrives last merges all partials (two passes: the mean offset, then sum M2_g + n_g (offset_g -
offset)^2) in a fixed order, so results are deterministic whichever program it is, and resets the counter.
The counters (int32, one per channel block) are zeroed once per device and stream and left at zero by
every launch (torch.compile and CUDA-graph capture get fresh zeros per call). The mean is kept as s + offset and the kernels centre x as (x - s) - offset: x - s is exact for
values near the mean, so a large mean costs no precision (stats rows: s, offset, rstd, scale, beta).

Layouts: x may be channels_last or NCHW dense (any base offset); any other x (H and W that cannot be
flattened into one stride, or overlapping strides) is copied once to channels_last. Outputs take x's
layout; a residual or dy in another layout is copied once into it. weight / bias are copied when not
contiguous (C values). Running statistics are updated in place in eager mode; while torch.compile
traces, the op returns them and :func:`batch_norm` copies them into the buffers (the op itself never
mutates its inputs there).
"""
from __future__ import annotations

import json
from typing import NamedTuple, Optional

import torch

from .batchnorm_fold import DTYPES, fold_into_conv  # noqa: F401  (fold_into_conv: a public function of this family)
from .batchnorm_kernels import _bn_apply_kernel, _bn_bwd_dx_kernel, _bn_bwd_reduce_kernel, _bn_stats_kernel
from .launcher import BoundKernel, bind
from .runtime import cdiv, is_fake as _is_fake, is_tracing
from .runtime import (INTERPRETER_STORE_DTYPES, Autotuner, Config, check_tensor, dependent_launch, next_power_of_2,
                      num_sms, register_op, register_tuner)
from .stream_buffers import arrival_counters as _counters


# ----------------------------------------------------------------------------------------------------
# Layout: every tensor of one call shares the (N, HW, C) strides of the output
# ----------------------------------------------------------------------------------------------------
def _pixel_strides(t: torch.Tensor, strides: Optional[tuple] = None) -> Optional[tuple[int, int, int]]:
    """(stride_n, stride_hw, stride_c) of a 4-D tensor (or of ``strides`` for its shape) whose H and W
    flatten into one stride, else None. The stride of a dim of size 1 is irrelevant and reported as 0,
    so equal triples address alike."""
    N, C, H, W = t.shape
    sn, sc, sh, sw = strides if strides is not None else t.stride()
    if H == 1 or W == 1:
        shw = sw if H == 1 else sh
    elif sh == W * sw:
        shw = sw
    else:
        return None
    return (sn if N > 1 else 0, shw if H * W > 1 else 0, sc if C > 1 else 0)


def _memory_format(x: torch.Tensor) -> torch.memory_format:
    """x's own dense layout (channels_last first), or channels_last for any other layout."""
    if x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format if x.is_contiguous() else torch.channels_last


def _in_layout(t: torch.Tensor, strides: tuple, fmt: torch.memory_format) -> torch.Tensor:
    """t itself when it has the call's pixel strides, else a copy in the call's layout."""
    return t if _pixel_strides(t) == strides else t.contiguous(memory_format=fmt)


class _Geometry:
    """x (N, C, H, W) as (N, HW, C) pixels with strides; N and HW merged into one pixel dim when the
    strides allow (channels_last dense), so tiles run across samples."""

    def __init__(self, shape: tuple, strides: tuple):
        N, C, H, W = shape
        self.C, self.M = C, N * H * W
        self.image = (H, W)  # an image's height and width (a second output's kernels map pixels with them)
        self.stride_n, self.stride_hw, self.stride_c = strides
        self.N, self.HW = N, H * W
        if N > 1 and self.stride_n == self.HW * self.stride_hw:
            self.N, self.HW, self.stride_n = 1, N * H * W, 0
        self.strides = (self.stride_n, self.stride_hw, self.stride_c)

    def tiles(self, block_m: int) -> tuple[int, int]:
        """(tiles per sample, tiles) for BLOCK_M pixels per tile."""
        per_sample = cdiv(self.HW, block_m)
        return per_sample, self.N * per_sample


# ----------------------------------------------------------------------------------------------------
# Autotuning spaces: tiles of 2048-8192 values, BLOCK_C up to 128 channels (channels_last rows)
# ----------------------------------------------------------------------------------------------------
def _tile_shapes(geo: _Geometry, sizes=(4096, 8192, 2048)) -> list[tuple[int, int]]:
    block_c = min(next_power_of_2(geo.C), 128)
    out = []
    for elems in sizes:
        block_m = max(1, min(elems // block_c, next_power_of_2(geo.HW)))
        if (block_m, block_c) not in out:
            out.append((block_m, block_c))
    return out


def _stream_configs(geo: _Geometry) -> list[Config]:
    return [Config({"BLOCK_M": m, "BLOCK_C": c}, w, 1) for m, c in _tile_shapes(geo) for w in (4, 8)]


def _reduce_configs(geo: _Geometry) -> list[Config]:
    # Unfolded (ACC_ROWS = BLOCK_M): two fp32 accumulators per tile element live in registers (8192 values:
    # 64 per thread at 4 warps); stages > 1 let Triton issue the next tile's loads before the current one
    # is summed. Folded (ACC_ROWS rows of accumulators, _fold_rows): larger tiles for the same registers.
    # More programs per SM mean more partials for the last program of a channel block to merge, one after
    # another
    unfolded = [Config({"BLOCK_M": m, "BLOCK_C": c, "ACC_ROWS": m, "PER_SM": p}, w, st)
                for m, c in _tile_shapes(geo, (8192, 4096, 2048))
                for p, w, st in ((2, 4, 1), (2, 8, 1), (2, 4, 3), (4, 4, 1))]
    folded = [Config({"BLOCK_M": m, "BLOCK_C": c, "ACC_ROWS": a, "PER_SM": p}, w, 1)
              for m, c in _tile_shapes(geo, (16384, 32768, 8192)) for a, p, w in ((16, 2, 4), (32, 2, 8), (32, 4, 8))
              if a < m]
    return unfolded + [c for c in folded if c not in unfolded]


# the interpreter pays per program, not per value: few large tiles; a reduction still splits into several
# groups when there are several tiles, so tests cover partial tiles and the merges
_INTERPRET_STREAM = Config({"BLOCK_M": 64, "BLOCK_C": 32}, 4, 1)
_INTERPRET_REDUCE = Config({"BLOCK_M": 32, "BLOCK_C": 32, "ACC_ROWS": 8, "PER_SM": 2}, 4, 1)
_SAMPLE = _Geometry((512, 64, 32, 32), (65536, 64, 1))  # ResNet-18's widest layer, for the default lists
_tuners = {name: register_tuner(Autotuner(f"batchnorm_{name}", kernel, configs(_SAMPLE), interpret_config=interp))
           for name, kernel, configs, interp in (
               ("stats", _bn_stats_kernel, _reduce_configs, _INTERPRET_REDUCE),
               ("apply", _bn_apply_kernel, _stream_configs, _INTERPRET_STREAM),
               ("bwd_reduce", _bn_bwd_reduce_kernel, _reduce_configs, _INTERPRET_REDUCE),
               ("bwd_dx", _bn_bwd_dx_kernel, _stream_configs, _INTERPRET_STREAM))}


def check_config(config: Optional[Config]) -> None:
    """A tiling for every kernel of a call: BLOCK_M (pixels) and BLOCK_C (channels) per tile, powers of two,
    and optionally PER_SM (reduction programs per SM, default 2) and ACC_ROWS (a power of two: the
    reductions' rows of accumulators, default BLOCK_M; at most BLOCK_M); the kernels that write or read the
    relu bits take at least 8 channels per block when C > BLOCK_C. Raise a ValueError naming ``config``."""
    if config is None:
        return
    if not isinstance(config, Config):
        raise ValueError(f"config must be a triton_kernels.runtime.Config or None, got {type(config).__name__}")
    keys = set(config.kwargs)
    if not {"BLOCK_M", "BLOCK_C"} <= keys <= {"BLOCK_M", "BLOCK_C", "PER_SM", "ACC_ROWS"}:
        raise ValueError(f"config must name BLOCK_M and BLOCK_C (and optionally PER_SM, ACC_ROWS), got {sorted(keys)}")
    for k, v in config.kwargs.items():
        if not isinstance(v, int) or v < 1 or (k != "PER_SM" and v & (v - 1)):
            what = "positive int" if k == "PER_SM" else "positive power of two"
            raise ValueError(f"config's {k} must be a {what}, got {v!r}")
    if config.kwargs.get("ACC_ROWS", 1) > config.kwargs["BLOCK_M"]:
        raise ValueError(f"config's ACC_ROWS ({config.kwargs['ACC_ROWS']}) must be at most its BLOCK_M "
                         f"({config.kwargs['BLOCK_M']})")


def _config_str(config: Optional[Config]) -> str:
    """A config as the string the torch ops carry ("" = the tuned ones)."""
    return "" if config is None else json.dumps(config.to_json(), sort_keys=True)


def _config_from(text: str) -> Optional[Config]:
    return Config.from_json(json.loads(text)) if text else None


class BatchNormKey(NamedTuple):
    """What a tuned batch-norm tiling depends on (one tuner per kernel)."""
    samples: int  # N, or 1 when samples and pixels merge (channels_last dense)
    pixels: int   # H*W per sample (all N*H*W when merged)
    channels: int
    channels_contiguous: bool
    dtype: torch.dtype
    flags: tuple  # the kernel's constexpr flags as (name, value) pairs, e.g. (("HAS_RES", True), ("RELU", False))


def _pick(name: str, geo: _Geometry, dtype: torch.dtype, constexprs: dict, run, tensors,
          config: Optional[Config] = None) -> Config:
    if config is not None:
        kw = dict(config.kwargs)
        if name in ("stats", "bwd_reduce"):
            kw.setdefault("PER_SM", 2)
            kw.setdefault("ACC_ROWS", kw["BLOCK_M"])
        else:
            kw.pop("PER_SM", None)
            kw.pop("ACC_ROWS", None)
        if (constexprs.get("STORE_BITS") or constexprs.get("MASK_FROM_BITS")) and kw["BLOCK_C"] < min(8, geo.C):
            kw["BLOCK_C"] = 8  # a byte of relu bits holds 8 channels: one program writes or reads it whole
        return Config(kw, config.num_warps, config.num_stages)
    configs = _reduce_configs if name in ("stats", "bwd_reduce") else _stream_configs
    key = BatchNormKey(samples=geo.N, pixels=geo.HW, channels=geo.C, channels_contiguous=geo.stride_c == 1,
                       dtype=dtype, flags=tuple(constexprs.items()))
    return _tuners[name].pick(key, run, lambda: configs(geo), tracing=_is_fake(*tensors))


def _groups(geo: _Geometry, cfg: Config, device) -> tuple[int, int, int, int]:
    """(tiles per sample, tiles, groups, channel blocks) of a reduction config: about PER_SM programs per
    SM, never an empty group."""
    block_m, block_c = cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_C"]
    per_sample, tiles = geo.tiles(block_m)
    channel_blocks = cdiv(geo.C, block_c)
    want = max(1, min(tiles, cdiv(cfg.kwargs["PER_SM"] * num_sms(device, default=2), channel_blocks)))
    per_group = cdiv(tiles, want)  # tiles a program reads, at most (it reads every groups-th one)
    return per_sample, tiles, cdiv(tiles, per_group), channel_blocks


_MERGE_BLOCK_G = 32  # partials merged per step by a reduction's last program


# ----------------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------------
class _Plan(NamedTuple):
    """One kernel of a call bound to its config (launcher.bind), its grid, the ints that follow the
    strides in its arguments (per_sample, and for a reduction tiles, groups), and a
    reduction's partial buffer: rows (3 for the statistics, 2 for the backward, 3 for a pair's backward) x
    groups (0 x 0 for an elementwise kernel)."""

    kernel: BoundKernel
    grid: tuple
    scalars: tuple
    rows: int
    groups: int


# One plan per (kernel, geometry, dtype, flags, device), found once (tuner or cache): later calls are a
# dict lookup and a direct launch
_PLANS: dict[tuple, _Plan] = {}


def _make_plan(name, kernel, geo, cfg: Config, constexprs: dict, device, dependent: bool = False) -> _Plan:
    """``dependent``: chain a training call's kernels by programmatic dependent launch (runtime.dependent_launch):
    the apply and dx kernels are launched as dependents of the reduction ahead of them, so they start while its
    last programs merge, load their tiles and wait for it (the kernels' PDL flag); never for an inference
    apply, which follows a convolution."""
    pdl = dependent and not constexprs.get("FROM_RUNNING")
    if name in ("stats", "bwd_reduce"):  # (group, channel block) programs
        per_sample, tiles, groups, channel_blocks = _groups(geo, cfg, device)
        kw = {k: v for k, v in cfg.kwargs.items() if k != "PER_SM"}  # ACC_ROWS: in every config (_pick)
        bound = bind(kernel, **constexprs, **kw, BLOCK_G=min(next_power_of_2(groups), _MERGE_BLOCK_G), PDL=pdl,
                     num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        return _Plan(bound, (groups, channel_blocks), (per_sample, tiles, groups),
                     3 if name == "stats" or constexprs.get("PAIR") else 2, groups)
    per_sample, tiles = geo.tiles(cfg.kwargs["BLOCK_M"])  # (tile, channel block) programs
    bound = bind(kernel, **constexprs, **cfg.kwargs, PDL=pdl, **({"launch_pdl": True} if pdl else {}),
                 num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    return _Plan(bound, (tiles, cdiv(geo.C, cfg.kwargs["BLOCK_C"])), (per_sample,), 0, 0)


def _run(plan: _Plan, geo: _Geometry, inputs: tuple, device, tail: tuple = ()) -> None:
    """Launch a plan: ``inputs`` (the leading pointers), the geometry, the plan's scalars, then for a
    reduction its partials (rows x groups x C fp32) and its arrival counters, then ``tail``."""
    if not plan.rows:
        plan.kernel.launch(plan.grid, *inputs, geo.C, geo.HW, *geo.strides, *plan.scalars, *tail)
        return
    part = torch.empty((plan.rows, plan.groups, geo.C), device=device, dtype=torch.float32)
    plan.kernel.launch(plan.grid, *inputs, part, geo.C, geo.HW, *geo.strides, *plan.scalars,
                       _counters(inputs[0], plan.grid[1]), *tail)


def plan_key(name: str, geo: _Geometry, dtype: torch.dtype, constexprs: dict, device) -> tuple:
    """The key of a kernel's plan in _PLANS: kernel name, geometry, dtype, constexpr flag values, device."""
    return (name, geo.N, geo.HW, geo.C, geo.strides, dtype, tuple(constexprs.values()), device)


def _launch_planned(name, kernel, geo, inputs, dtype, constexprs, device, config=None, tail=(), trial_tail=None):
    """Run one kernel of a call over the whole tensor with its plan (made on the first call with this
    key: the tuned config, or ``config``). ``inputs``: the kernel's leading pointer arguments; ``tail``: its
    arguments after the geometry (a reduction's: after its counters); ``trial_tail``: the tail the tuner's trial launches use
    instead, made only when trials run (a function: outputs that must not be updated more than once, e.g.
    the running statistics)."""
    key = plan_key(name, geo, dtype, constexprs, device)
    plan = _PLANS.get(key) if config is None else None
    if plan is None:
        tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
        trial = tail if trial_tail is None else trial_tail()
        fake = _is_fake(*tensors)  # torch.compile orders and launches the kernels its own way: no chaining
        dependent = dependent_launch(device) and not fake
        cfg = _pick(name, geo, dtype, constexprs,
                    lambda c: _run(_make_plan(name, kernel, geo, c, constexprs, device, dependent), geo, inputs,
                                   device, trial),
                    tensors, config)
        plan = _make_plan(name, kernel, geo, cfg, constexprs, device, dependent)
        if config is None and not fake:
            _PLANS[key] = plan
    _run(plan, geo, inputs, device, tail)


def _dense_strides(shape: tuple, fmt: torch.memory_format) -> tuple[int, int, int, int]:
    N, C, H, W = shape
    return (C * H * W, 1, W * C, C) if fmt == torch.channels_last else (C * H * W, H * W, W, 1)


def _prepare(x: torch.Tensor, *others: Optional[torch.Tensor]):
    """([x, *others] in one layout, its memory format, the geometry): x is copied once when it is not
    dense (channels_last or NCHW), each other tensor when its pixel strides differ from x's."""
    fmt = _memory_format(x)
    ref = _pixel_strides(x, _dense_strides(tuple(x.shape), fmt))
    if _pixel_strides(x) != ref:
        x = x.contiguous(memory_format=fmt)
    out = [x] + [_in_layout(t, ref, fmt) if t is not None else None for t in others]
    return out, fmt, _Geometry(tuple(x.shape), ref)


def _empty_like_layout(x: torch.Tensor, fmt: torch.memory_format, dtype=None) -> torch.Tensor:
    return torch.empty_strided(x.shape, _dense_strides(tuple(x.shape), fmt), device=x.device, dtype=dtype or x.dtype)


def relu_bits(x: torch.Tensor, geo: "_Geometry") -> torch.Tensor:
    """The relu bits' buffer of a call over x: (N*H*W, cdiv(C, 8)) uint8 (see batchnorm_kernels._bit_offsets)."""
    return x.new_empty((geo.M, cdiv(geo.C, 8)), dtype=torch.uint8)


def batch_norm_train_forward(x, weight, bias, residual, running_mean, running_var, momentum: float, eps: float,
                             relu: bool, update_in_place: bool, config: Optional[Config] = None):
    """Training-mode forward: (y, stats (5, C) fp32 = s, offset, rstd, scale, beta; running (2, C) = the new
    running statistics when they are not updated in place (then the buffers must be contiguous), else an
    empty tensor; bits = the relu's mask when a residual was added, else None). weight / bias are copied
    when not contiguous."""
    (x, residual), fmt, geo = _prepare(x, residual)
    dev = x.device
    weight, bias = (t.contiguous() if t is not None else None for t in (weight, bias))
    stats = torch.empty((5, geo.C), device=dev, dtype=torch.float32)
    has_running = running_mean is not None
    if has_running and not update_in_place:  # read-only: any layout will do
        running_mean, running_var = running_mean.contiguous(), running_var.contiguous()
    running = torch.empty((0,), device=dev, dtype=running_mean.dtype if has_running else torch.float32)
    if has_running and not update_in_place:
        running = torch.empty((2, geo.C), device=dev, dtype=running_mean.dtype)
    rm_out, rv_out = (running_mean, running_var) if update_in_place or not has_running else (running[0], running[1])
    flags = _stats_flags(weight is not None, bias is not None, has_running)
    head = (weight if weight is not None else stats, bias if bias is not None else stats, stats,
            running_mean if has_running else stats, running_var if has_running else stats)
    tail = head + (rm_out if has_running else stats, rv_out if has_running else stats, geo.M, eps, momentum)

    def trial_tail():  # the tuner's trials write their running statistics to scratch
        scratch = torch.empty((2, geo.C), device=dev, dtype=running_mean.dtype)
        return head + (scratch[0], scratch[1], geo.M, eps, momentum)

    _launch_planned("stats", _bn_stats_kernel, geo, (x,), x.dtype, flags, dev, config, tail,
                    trial_tail if has_running else None)
    y = _empty_like_layout(x, fmt)
    bits = relu_bits(x, geo) if relu and residual is not None else None
    _launch_planned("apply", _bn_apply_kernel, geo,
                    (x, residual if residual is not None else x, y, bits if bits is not None else y, y, stats, stats),
                    x.dtype,
                    _apply_flags(residual is not None, relu, store_bits=bits is not None), dev, config,
                    (stats, stats, stats, stats, 0.0, *geo.image))
    return y, stats, running, bits


def _stats_flags(has_w: bool, has_b: bool, update_running: bool) -> dict:
    return {"HAS_W": has_w, "HAS_B": has_b, "UPDATE_RUNNING": update_running}


def _reduce_flags(relu: bool, mask_from_bits: bool, store_g: bool, has_dy2: bool = False,
                  second_stride: int = 1, pair: bool = False) -> dict:
    return {"RELU": relu, "MASK_FROM_BITS": mask_from_bits, "STORE_G": store_g, "HAS_DY2": has_dy2,
            "SECOND_STRIDE": second_stride, "PAIR": pair}


def _dx_flags(relu: bool, mask_from_bits: bool, load_g: bool, has_dy2: bool = False, second_stride: int = 1,
              pair: bool = False) -> dict:
    return {"RELU": relu, "MASK_FROM_BITS": mask_from_bits, "LOAD_G": load_g, "HAS_DY2": has_dy2,
            "SECOND_STRIDE": second_stride, "PAIR": pair}


def _apply_flags(has_res: bool, relu: bool, from_running: bool = False, has_w: bool = False, has_b: bool = False,
                 store_bits: bool = False, second_stride: int = 1, res_norm: bool = False):
    return {"HAS_RES": has_res, "RELU": relu, "FROM_RUNNING": from_running, "HAS_W": has_w, "HAS_B": has_b,
            "STORE_BITS": store_bits, "SECOND_STRIDE": second_stride, "RES_NORM": res_norm}


def batch_norm_apply(x, residual, running_mean, running_var, weight, bias, eps: float, relu: bool,
                     config: Optional[Config] = None) -> torch.Tensor:
    """Inference: y = act((x - running_mean) * weight / sqrt(running_var + eps) + bias [+ residual]), the
    per-channel factors formed in the kernel (fp32)."""
    (x, residual), fmt, geo = _prepare(x, residual)
    running_mean, running_var, weight, bias = (t.contiguous() if t is not None else None
                                               for t in (running_mean, running_var, weight, bias))
    y = _empty_like_layout(x, fmt)
    _launch_planned("apply", _bn_apply_kernel, geo, (x, residual if residual is not None else x, y, y, y, x, x),
                    x.dtype, _apply_flags(residual is not None, relu, True, weight is not None, bias is not None),
                    x.device, config, (running_mean, running_var, weight if weight is not None else running_mean,
                                       bias if bias is not None else running_mean, eps, *geo.image))
    return y


def batch_norm_train_backward(dy, x, bits, stats, relu: bool, need_dx: bool, store_g: bool,
                              config: Optional[Config] = None, dy2: Optional[torch.Tensor] = None,
                              second_stride: int = 1, pair: Optional[tuple] = None):
    """(dx or None, g = the residual's gradient or None, dwb (2, C) fp32 = dweight, dbias). ``bits``: the
    forward's relu bits when the mask is read from them (a residual was added), else None. ``dy2``: the
    second part of the output's gradient (see batch_norm's ``two_outputs``), added as it is loaded: y's, or
    with ``second_stride`` > 1 that of y[:, :, ::stride, ::stride] (taken dense channels_last). ``pair``:
    (res_x in x's layout, res_stats) of the batch norm whose output was the residual (batch_norm_pair; with
    need_dx): the same two kernels also give its (res_dx, res_dwb), appended to the result."""
    if second_stride > 1:
        (x, dy), fmt, geo = _prepare(x, dy)
        dy2 = dy2.contiguous(memory_format=torch.channels_last)
    else:
        (x, dy, dy2), fmt, geo = _prepare(x, dy, dy2)
    dev, mask_from_bits, has_dy2 = x.device, relu and bits is not None, dy2 is not None
    dy2 = dy2 if has_dy2 else dy
    g = _empty_like_layout(x, fmt, dy.dtype) if store_g else None
    dwb, coef = (torch.empty((2 if pair is None else 4, geo.C), device=dev, dtype=torch.float32) for _ in range(2))
    res_x, res_stats = pair if pair is not None else (x, stats)
    dx = _empty_like_layout(x, fmt) if need_dx else None
    res_dx = _empty_like_layout(x, fmt) if pair is not None else dx
    _launch_planned(
        "bwd_reduce", _bn_bwd_reduce_kernel, geo,
        (dy, dy2, x, bits if bits is not None else x, g if g is not None else dy, stats),
        dy.dtype, _reduce_flags(relu, mask_from_bits, store_g, has_dy2, second_stride, pair is not None), dev,
        config, (coef, dwb, geo.M, *geo.image, res_x, res_stats, coef[-2:], dwb[-2:]))
    if need_dx:
        _launch_planned("bwd_dx", _bn_bwd_dx_kernel, geo,
                        (dy, dy2, g if g is not None else dy, x, bits if bits is not None else x, dx, stats, coef),
                        x.dtype, _dx_flags(relu, mask_from_bits, store_g, has_dy2, second_stride, pair is not None),
                        dev, config, (*geo.image, res_x, res_stats, coef[-2:], res_dx))
    return (dx, g, dwb) if pair is None else (dx, g, dwb[:2], res_dx, dwb[2:])


# ----------------------------------------------------------------------------------------------------
# torch op registration + autograd
# ----------------------------------------------------------------------------------------------------
def _bn_train_op(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                 residual: Optional[torch.Tensor], running_mean: Optional[torch.Tensor],
                 running_var: Optional[torch.Tensor], momentum: float, eps: float, relu: bool,
                 update_in_place: bool, config: str) -> list[torch.Tensor]:
    y, stats, running, bits = batch_norm_train_forward(x, weight, bias, residual, running_mean, running_var, momentum,
                                                       eps, relu, update_in_place, _config_from(config))
    return [y, stats, running, bits if bits is not None else x.new_empty((0,), dtype=torch.uint8)]


def _bn_backward_eager(dy: torch.Tensor, x: torch.Tensor, bits: Optional[torch.Tensor], stats: torch.Tensor,
                       relu: bool, need_dx: bool, store_g: bool, config: str) -> list:
    return list(batch_norm_train_backward(dy, x, bits, stats, relu, need_dx, store_g, _config_from(config)))


def _bn_backward_op(dy: torch.Tensor, x: torch.Tensor, bits: Optional[torch.Tensor], stats: torch.Tensor, relu: bool,
                    need_dx: bool, store_g: bool, config: str) -> list[torch.Tensor]:
    dx, g, dwb = _bn_backward_eager(dy, x, bits, stats, relu, need_dx, store_g, config)
    empty = x.new_empty((0,))
    return [dx if dx is not None else empty, g if g is not None else empty.clone(), dwb]


def _bn_apply_op(x: torch.Tensor, residual: Optional[torch.Tensor], running_mean: torch.Tensor,
                 running_var: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float,
                 relu: bool, config: str) -> torch.Tensor:
    return batch_norm_apply(x, residual, running_mean, running_var, weight, bias, eps, relu, _config_from(config))


def _setup_context(ctx, inputs, output):
    x, weight, bias, residual, _, _, _, _, relu, _, config = inputs
    _, stats, _, bits = output
    ctx.relu, ctx.has_res, ctx.config = relu, residual is not None, config
    ctx.w_dtype = weight.dtype if weight is not None else None
    ctx.b_dtype = bias.dtype if bias is not None else None
    # the relu mask is read from its bits when a residual was added (recomputed from x otherwise)
    ctx.save_for_backward(x, bits if (relu and residual is not None) else None, stats)


def backward_ops(dy, x, bits, stats, relu: bool, needs: tuple, config: str, dtypes: tuple) -> tuple:
    """(dx, dweight, dbias, dresidual), None where ``needs`` (x, weight, bias, residual) wants none; dweight /
    dbias in ``dtypes``. Through the registered backward op, which has no derivative: in a double backward
    (create_graph=True) its outputs raise a RuntimeError when differentiated again."""
    need_x, need_w, need_b, need_res = needs
    store_g = need_res and relu
    dx, g, dwb = _bn_backward_call(dy, x, bits, stats, relu, need_x, store_g, config)
    dres = (g if store_g else dy) if need_res else None
    return (dx if need_x else None, dwb[0].to(dtypes[0]) if need_w else None,
            dwb[1].to(dtypes[1]) if need_b else None, dres)


def _backward(ctx, grads):
    x, bits, stats = ctx.saved_tensors
    needs = tuple(bool(n) for n in ctx.needs_input_grad[:4])
    return (*backward_ops(grads[0], x, bits, stats, ctx.relu, needs, ctx.config, (ctx.w_dtype, ctx.b_dtype)),
            None, None, None, None, None, None, None)


_bn_backward_call = register_op("tk::batch_norm_act_backward", _bn_backward_op, eager=_bn_backward_eager)
_bn_train_call = register_op("tk::batch_norm_act", _bn_train_op, setup_context=_setup_context, backward=_backward)
_bn_apply_call = register_op("tk::batch_norm_act_inference", _bn_apply_op)


# ----------------------------------------------------------------------------------------------------
# Public functions
# ----------------------------------------------------------------------------------------------------
def _validate(x, running_mean, running_var, weight, bias, momentum, eps, residual) -> None:
    check_tensor("x", x, ndim=4, dtypes=DTYPES, interpreter_dtypes=INTERPRETER_STORE_DTYPES)
    C = x.shape[1]
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        if t is not None:
            check_tensor(name, t, ndim=1, dtypes=DTYPES, device=x.device)
            if t.shape[0] != C:
                raise ValueError(f"{name} has {t.shape[0]} values but x has {C} channels")
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must be given together (or both None)")
    if residual is not None:
        check_tensor("residual", residual, ndim=4, dtypes=(x.dtype,), device=x.device)
        if residual.shape != x.shape:
            raise ValueError(f"residual has shape {tuple(residual.shape)}, expected x's {tuple(x.shape)}")
    if not (isinstance(momentum, (int, float)) and 0.0 <= momentum <= 1.0):
        raise ValueError(f"momentum must be a number in [0, 1], got {momentum!r}")
    if not (isinstance(eps, (int, float)) and 0.0 <= eps < float("inf")):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")


def batch_norm(x: torch.Tensor, running_mean: Optional[torch.Tensor] = None,
               running_var: Optional[torch.Tensor] = None, weight: Optional[torch.Tensor] = None,
               bias: Optional[torch.Tensor] = None, training: bool = True, momentum: float = 0.1, eps: float = 1e-5,
               residual: Optional[torch.Tensor] = None, relu: bool = False,
               config: Optional[Config] = None, two_outputs: bool = False, second_stride: int = 1):
    """``act(F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps) [+ residual])``
    with act = relu when ``relu``, for x (N, C, H, W) fp32 / fp16 / bf16 (weight, bias and the running
    statistics in any of those dtypes). Training mode normalises with the batch statistics (fp32) and
    updates the running statistics as torch does; inference mode uses the running statistics (when a
    gradient is needed there, torch's own ops run). Differentiable in x, weight, bias and residual.
    ``config``: the tiling of every kernel of the call (see :func:`check_config`) instead of the tuned ones.
    ``two_outputs``: return (y, y2), y2 sharing y's memory, for a y used twice (a ResNet block's input: its
    first convolution and its shortcut). Where the eager fast path runs the call, autograd hands y's two
    gradients to this op's backward separately and the backward kernels add them as they load them, instead
    of autograd adding them in a pass of its own; elsewhere y2 is y. ``second_stride`` (with two_outputs): y2 is
    y[:, :, ::second_stride, ::second_stride], what a 1x1 convolution of that stride (no padding) reads, for
    the same convolution at stride 1; the fast path writes it as a tensor of its own in the forward, so its
    gradient comes that small (a view of y elsewhere)."""
    if type(two_outputs) is not bool:
        raise ValueError(f"two_outputs must be a bool, got {two_outputs!r}")
    if type(second_stride) is not int or second_stride < 1 or (second_stride > 1 and not two_outputs):
        raise ValueError(f"second_stride must be an int >= 1, and 1 unless two_outputs, got {second_stride!r}")
    y = _batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, residual, relu, config,
                    two_outputs, second_stride)
    if isinstance(y, tuple) or not two_outputs:
        return y
    return y, (y if second_stride == 1 else y[:, :, ::second_stride, ::second_stride])


def batch_norm_pair(x: torch.Tensor, res_x: torch.Tensor, running_mean, running_var, weight, bias, res_mean, res_var,
                    res_weight, res_bias, momentum: float = 0.1, eps: float = 1e-5, res_momentum: float = 0.1,
                    res_eps: float = 1e-5, relu: bool = True, two_outputs: bool = False, second_stride: int = 1):
    """Training mode: ``batch_norm(x, ..., residual=batch_norm(res_x, res_mean, res_var, res_weight, res_bias,
    True, res_momentum, res_eps), relu=relu, two_outputs=..., second_stride=...)``, the end of a ResNet block
    whose shortcut has a batch norm. Where the eager fast path knows both calls' signatures (after one call
    of each) one apply kernel normalises both, so the shortcut's output is never written; elsewhere these two
    calls run."""
    out = batchnorm_eager.fast_pair(x, res_x, running_mean, running_var, weight, bias, res_mean, res_var, res_weight,
                                    res_bias, momentum, eps, res_momentum, res_eps, relu, two_outputs, second_stride)
    if out is not None:
        return out
    residual = batch_norm(res_x, res_mean, res_var, res_weight, res_bias, True, res_momentum, res_eps)
    return batch_norm(x, running_mean, running_var, weight, bias, True, momentum, eps, residual=residual, relu=relu,
                      two_outputs=two_outputs, second_stride=second_stride)


def _batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, residual, relu, config,
                two_outputs: bool, second_stride: int = 1):
    """batch_norm's output: y, or the fast path's (y, y2) for a two_outputs call with autograd or a second_stride."""
    if config is None:
        if training:
            y = batchnorm_eager.fast_train(x, running_mean, running_var, weight, bias, momentum, eps, residual, relu,
                                           two_outputs, second_stride)
        elif not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual))):
            y = batchnorm_eager.fast_infer(x, running_mean, running_var, weight, bias, eps, residual, relu)
        else:
            y = None
        if y is not None:
            return y
    _validate(x, running_mean, running_var, weight, bias, momentum, eps, residual)
    check_config(config)
    N, C, H, W = x.shape
    if training:
        if N * H * W <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got x of shape {tuple(x.shape)}")
        tracing = is_tracing(x)
        in_place = (running_mean is not None and not tracing and running_mean.is_contiguous()
                    and running_var.is_contiguous())
        y, _, running, _ = _bn_train_call(x, weight, bias, residual, running_mean, running_var, float(momentum),
                                          float(eps), bool(relu), in_place, _config_str(config))
        if running_mean is not None and not in_place:
            with torch.no_grad():
                running_mean.copy_(running[0])
                running_var.copy_(running[1])
        elif config is None:
            batchnorm_eager.remember_train(x, running_mean, running_var, weight, bias, residual, bool(relu),
                                           two_outputs, second_stride)
        return y
    if running_mean is None:
        raise ValueError("inference mode (training=False) needs running_mean and running_var")
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias, residual)):
        # the statistics and parameters in fp32, which torch takes with x in any of DTYPES (mixed dtypes not)
        weight, bias = (t.float() if t is not None else None for t in (weight, bias))
        y = torch.nn.functional.batch_norm(x, running_mean.float(), running_var.float(), weight, bias, False, 0.0, eps)
        y = y + residual if residual is not None else y
        y = torch.relu(y) if relu else y
    elif x.numel() == 0:
        y = torch.empty_like(x)
    else:
        y = _bn_apply_call(x, residual, running_mean, running_var, weight, bias, float(eps), bool(relu),
                           _config_str(config))
        if config is None:
            batchnorm_eager.remember_infer(x, running_mean, running_var, weight, bias, residual, relu)
    return y


from . import batchnorm_eager  # noqa: E402  (it builds on this module's launchers and plans)
